/*
 * shmem.c - write into a remote segment through a map, then interrupt.
 *
 * The server creates a segment: one header page followed by -size bytes of
 * data.  The client connects to it, maps the header and the data (two maps
 * of one segment), stores a pattern into every data byte with plain CPU
 * stores, and triggers the server's interrupt.  The server checks every byte
 * in its local memory, writes the verdict into the header, and triggers the
 * client's interrupt.  The client reads the verdict and both exit 0 when all
 * bytes arrived.
 *
 *   shmem -server [-size BYTES] [-segid ID]
 *   shmem -client [-rn SERVER_NODE] [-size BYTES] [-segid ID]
 *
 * Common options: -a ADAPTER (0), -timeout MS (waits; default forever).
 * Interrupt numbers are exchanged through the header, so none is fixed.
 */
#include "common/example.h"

#define DEFAULT_SEGID  0x5100
#define HEADER_SIZE    4096
#define SHMEM_MAGIC    0x53484d45u      /* "SHME" */

/* The header page.  The server writes magic/server_intno before making the
 * segment available; the client fills in its part before triggering. */
struct shmem_header {
    volatile uint32_t magic;
    volatile uint32_t server_intno;     /* server waits here for "written" */
    volatile uint32_t client_intno;     /* client waits here for the verdict */
    volatile uint32_t client_node;
    volatile uint64_t size;             /* data bytes after the header */
    volatile uint32_t status;           /* 1 = all bytes good, 2 = mismatch */
    volatile uint32_t pad;
    volatile uint64_t bad_offset;       /* first bad byte when status == 2 */
};

/* The byte the client stores at data offset i. */
static inline unsigned char pattern(uint64_t i)
{
    return (unsigned char)((i * 251u) ^ (i >> 11) ^ 0x5a);
}

static int run_server(sci_desc_t sd, unsigned int segid, size_t size)
{
    sci_error_t err;
    sci_local_segment_t segment;
    sci_map_t map;
    sci_local_interrupt_t intr;
    unsigned int local_node, intno = 0x20;

    local_node = local_node_id();

    /* The interrupt the client triggers when it has written the data. */
    create_interrupt(sd, &intr, &intno);

    /* SCICreateSegment and SCIMapLocalSegment: header page and data. */
    volatile unsigned char *base = create_mapped_segment(
        sd, &segment, &map, segid, HEADER_SIZE + size,
        " on this node (another server running? try -segid)");
    struct shmem_header *h = (struct shmem_header *)base;
    const volatile unsigned char *data = base + HEADER_SIZE;

    h->server_intno = intno;
    h->size = size;
    h->magic = SHMEM_MAGIC;

    make_available(segment);                /* SCIPrepareSegment, SCISetSegmentAvailable */
    printf("server: node %u, segment 0x%x (%zu data bytes) available, interrupt %u\n",
           local_node, segid, size, intno);
    fflush(stdout);

    /* Wait for the client's "data written" interrupt. */
    SCIWaitForInterrupt(intr, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIWaitForInterrupt");

    /* Check every byte in local memory. */
    uint64_t t0 = now_us();
    uint64_t bad = UINT64_MAX;
    for (uint64_t i = 0; i < size; i++) {
        if (data[i] != pattern(i)) {
            bad = i;
            break;
        }
    }
    uint64_t check_us = now_us() - t0;
    if (bad == UINT64_MAX) {
        printf("server: all %zu bytes are correct (checked in %.3f ms)\n", size,
               check_us / 1000.0);
        h->status = 1;
    } else {
        printf("server: byte %" PRIu64 " is 0x%02x, expected 0x%02x\n", bad, data[bad],
               pattern(bad));
        h->bad_offset = bad;
        h->status = 2;
    }

    /* Answer through the client's interrupt. */
    sci_remote_interrupt_t answer;
    connect_interrupt(sd, &answer, h->client_node, h->client_intno,
                      "SCIConnectInterrupt (client)");
    SCITriggerInterrupt(answer, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCITriggerInterrupt");

    /* Keep the segment until the client has read the verdict and left:
     * its connection shows up as CONNECT, its departure as DISCONNECT. */
    for (;;) {
        unsigned int node, adap;
        sci_segment_cb_reason_t reason =
            SCIWaitForLocalSegmentEvent(segment, &node, &adap, timeout_ms, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIWaitForLocalSegmentEvent");
        printf("server: segment event %s from node %u\n",
               reason == SCI_CB_CONNECT ? "CONNECT" :
               reason == SCI_CB_DISCONNECT ? "DISCONNECT" : "other", node);
        if (reason == SCI_CB_DISCONNECT)
            break;
    }

    SCIDisconnectInterrupt(answer, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectInterrupt");
    remove_mapped_segment(segment, map, 1);   /* unmap, set unavailable, remove */
    SCIRemoveInterrupt(intr, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveInterrupt");
    return bad == UINT64_MAX ? 0 : 1;
}

static int run_client(sci_desc_t sd, unsigned int remote_node, unsigned int segid, size_t size)
{
    sci_error_t err;
    sci_remote_segment_t segment;
    sci_map_t hmap, dmap;
    sci_local_interrupt_t answer;
    sci_remote_interrupt_t server_intr;
    unsigned int local_node, intno = 0x21;

    local_node = local_node_id();

    /* The interrupt the server answers on. */
    create_interrupt(sd, &answer, &intno);

    printf("client: connecting to segment 0x%x on node %u\n", segid, remote_node);
    fflush(stdout);
    connect_segment(sd, &segment, remote_node, segid);
    if (SCIGetRemoteSegmentSize(segment) != HEADER_SIZE + size)
        fail("the server's segment has %zu data bytes, not %zu (use the same -size)",
             SCIGetRemoteSegmentSize(segment) - HEADER_SIZE, size);

    /* Two maps of the one segment: the header page and the data. */
    struct shmem_header *h = (struct shmem_header *)map_remote(
        segment, &hmap, 0, HEADER_SIZE, "SCIMapRemoteSegment (header)");
    volatile unsigned char *data = map_remote(segment, &dmap, HEADER_SIZE, size,
                                              "SCIMapRemoteSegment (data)");
    if (h->magic != SHMEM_MAGIC)
        fail("segment 0x%x does not look like a shmem server's segment", segid);

    h->client_node = local_node;
    h->client_intno = intno;

    /* Plain stores into the remote memory. */
    uint64_t t0 = now_us();
    for (uint64_t i = 0; i < size; i++)
        data[i] = pattern(i);
    SCIStoreBarrier(NULL, NO_FLAGS);      /* all stores visible before the trigger */
    uint64_t write_us = now_us() - t0;
    printf("client: wrote %zu bytes in %.3f ms (%.1f MB/s)\n", size, write_us / 1000.0,
           mb_per_s(size, write_us));

    connect_interrupt(sd, &server_intr, remote_node, h->server_intno,
                      "SCIConnectInterrupt (server)");
    t0 = now_us();
    SCITriggerInterrupt(server_intr, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCITriggerInterrupt");
    SCIWaitForInterrupt(answer, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIWaitForInterrupt");
    uint64_t answer_us = now_us() - t0;

    uint32_t status = h->status;
    int rc;
    if (status == 1) {
        printf("client: server verified every byte (answer after %.3f ms)\n",
               answer_us / 1000.0);
        rc = 0;
    } else {
        printf("client: server found a bad byte at offset %" PRIu64 "\n", h->bad_offset);
        rc = 1;
    }

    SCIDisconnectInterrupt(server_intr, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectInterrupt");
    disconnect_mapped_segment(segment, hmap, dmap);
    SCIRemoveInterrupt(answer, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveInterrupt");
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: shmem -server [-size BYTES] [-segid ID] [-a ADAPTER] [-timeout MS]\n"
            "       shmem -client [-rn NODE] [-size BYTES] [-segid ID] [-a ADAPTER] [-timeout MS]\n"
            "  -rn NODE     the server's node id (default: this node)\n"
            "  -size BYTES  data bytes to write (default 1m; k/m/g suffixes)\n"
            "  -segid ID    the server's segment id (default 0x%x)\n",
            DEFAULT_SEGID);
    exit(2);
}

int main(int argc, char **argv)
{
    int server = -1;
    unsigned int remote_node = 0, segid = DEFAULT_SEGID;
    size_t size = 1 << 20;

    example_name = "shmem";
    for (int i = 1; i < argc; i++) {
        if (common_option(argc, argv, &i, &server, &remote_node))
            continue;
        if (!strcmp(argv[i], "-size"))
            size = (size_t)parse_size(opt_value(argc, argv, &i));
        else if (!strcmp(argv[i], "-segid"))
            segid = opt_uint(argc, argv, &i);
        else
            usage();
    }
    if (server < 0 || size == 0)
        usage();

    sci_desc_t sd = open_descriptor();                 /* SCIInitialize, SCIOpen */
    if (remote_node == 0)
        remote_node = local_node_id();

    int rc = server ? run_server(sd, segid, size) : run_client(sd, remote_node, segid, size);

    close_descriptor(sd);                              /* SCIClose, SCITerminate */
    printf("%s: %s\n", server ? "server" : "client", rc == 0 ? "success" : "FAILED");
    return rc;
}
