/*
 * t_map_cycles.c - map and unmap, again and again, and nothing stays behind.
 *
 *   t_map_cycles [-n CYCLES] [-size BYTES]
 *
 * One process owns a segment (through one descriptor) and, through a second
 * descriptor, connects to it, maps it, checks and writes a word, unmaps and
 * disconnects, CYCLES times; then it creates, prepares, maps, writes, unmaps
 * and removes a fresh local segment CYCLES times. Each write is checked
 * through the owner's own map. On a host every map is an mmap of the
 * segment's memfd; in a guest every map is a segment window hot-plugged
 * into the guest and unplugged again, so this is the guest's "hundreds of
 * map/unmap cycles" check. At the end the process must have exactly the
 * mappings (/proc/self/maps lines) it had after the first cycle of each
 * kind: nothing leaked in the process. The caller checks the node (and,
 * for a guest, the guest's window devices).
 *
 * Prints "MAP CYCLES OK remote=N local=N" and exits 0, or fails with the
 * first unexpected result (check.h).
 */
#include "common/check.h"

static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    int n = 0, c;

    if (!f) {
        perror("/proc/self/maps");
        exit(1);
    }
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

int main(int argc, char **argv)
{
    unsigned cycles = 200, node;
    size_t size = 64 << 10;
    sci_error_t err;
    sci_desc_t owner_sd, user_sd;
    sci_local_segment_t seg;
    sci_map_t own_map;
    volatile uint32_t *own;
    unsigned seg_id;
    int maps_remote = -1, maps_local = -1;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            cycles = (unsigned)strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-size") && i + 1 < argc)
            size = (size_t)strtoul(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: t_map_cycles [-n CYCLES] [-size BYTES]\n");
            return 2;
        }
    }
    if (cycles < 2 || size < 4096) {
        fprintf(stderr, "t_map_cycles: at least 2 cycles and 4096 bytes\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    EXPECT(SCI_ERR_OK, SCIInitialize(NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIOpen(&owner_sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIOpen(&user_sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIGetLocalNodeId(0, &node, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateSegment(owner_sd, &seg, 0, size, NULL, NULL, SCI_FLAG_AUTO_ID, &err));
    seg_id = SCIGetLocalSegmentId(seg);
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    own = SCIMapLocalSegment(seg, &own_map, 0, size, NULL, NO_FLAGS, &err);
    CHECK(err == SCI_ERR_OK && own != NULL);
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));

    /* Connect, map, check, write, unmap, disconnect. */
    for (unsigned i = 0; i < cycles; i++) {
        sci_remote_segment_t rs;
        sci_map_t map;
        volatile uint32_t *p;
        size_t word = (i * 1031u) % (size / 4);

        own[word] = 0xc0de0000u | i;
        EXPECT(SCI_ERR_OK, SCIConnectSegment(user_sd, &rs, node, seg_id, 0, NULL, NULL,
                                             SCI_INFINITE_TIMEOUT, NO_FLAGS, &err));
        p = SCIMapRemoteSegment(rs, &map, 0, size, NULL, NO_FLAGS, &err);
        CHECK(err == SCI_ERR_OK && p != NULL);
        CHECK_EQ(p[word], 0xc0de0000u | i);
        p[word] = 0xfeed0000u | i;
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
        CHECK_EQ(own[word], 0xfeed0000u | i);
        if (i == 0)
            maps_remote = count_maps();
    }
    CHECK_EQ(count_maps(), maps_remote);
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(own_map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));

    /* Create, prepare, map, write, unmap, remove a new segment each time. */
    for (unsigned i = 0; i < cycles; i++) {
        sci_local_segment_t ls;
        sci_map_t map;
        volatile uint32_t *p;

        EXPECT(SCI_ERR_OK, SCICreateSegment(owner_sd, &ls, 0, size, NULL, NULL, SCI_FLAG_AUTO_ID, &err));
        EXPECT(SCI_ERR_OK, SCIPrepareSegment(ls, 0, NO_FLAGS, &err));
        p = SCIMapLocalSegment(ls, &map, 0, size, NULL, NO_FLAGS, &err);
        CHECK(err == SCI_ERR_OK && p != NULL);
        /* A new segment starts zeroed, whatever the last one held. */
        CHECK_EQ(p[size / 4 - 1], 0);
        p[size / 4 - 1] = 0xabcd0000u | i;
        CHECK_EQ(p[size / 4 - 1], 0xabcd0000u | i);
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIRemoveSegment(ls, NO_FLAGS, &err));
        if (i == 0)
            maps_local = count_maps();
    }
    CHECK_EQ(count_maps(), maps_local);

    EXPECT(SCI_ERR_OK, SCIClose(user_sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIClose(owner_sd, NO_FLAGS, &err));
    SCITerminate();
    printf("MAP CYCLES OK remote=%u local=%u\n", cycles, cycles);
    return 0;
}
