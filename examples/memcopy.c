/*
 * memcopy.c - SCIMemCpy in both directions, guarded by a sequence.
 *
 * The server creates a segment: one header page plus -size data bytes.
 *   1. The client copies a buffer into the data with SCIMemCpy, between
 *      SCIStartSequence and SCICheckSequence (retrying the copy if the
 *      sequence says so), puts the buffer's checksum into the header and
 *      triggers the server's interrupt.
 *   2. The server checksums what arrived in its memory, writes its verdict,
 *      fills the data with a new pattern, puts that checksum into the header
 *      and triggers the client's interrupt.
 *   3. The client copies the data back with SCIMemCpy(SCI_FLAG_BLOCK_READ),
 *      checks it against the server's checksum, writes its verdict and
 *      triggers the server again.
 * Both exit 0 when both checksums matched.
 *
 *   memcopy -server [-size BYTES] [-segid ID]
 *   memcopy -client [-rn SERVER_NODE] [-size BYTES] [-segid ID]
 */
#include "common/example.h"

#define DEFAULT_SEGID 0x5200
#define HEADER_SIZE   4096
#define MC_MAGIC      0x4d454d43u        /* "MEMC" */

struct mc_header {
    volatile uint32_t magic;
    volatile uint32_t server_intno;
    volatile uint32_t client_intno;
    volatile uint32_t client_node;
    volatile uint64_t size;
    volatile uint64_t client_sum;      /* checksum of what the client wrote */
    volatile uint64_t server_sum;      /* checksum of what the server wrote */
    volatile uint32_t server_verdict;  /* 1 = client's data arrived intact */
    volatile uint32_t client_verdict;  /* 1 = server's data read back intact */
};

/* A position-dependent 64-bit checksum (FNV-1a over 8-byte words). */
static uint64_t checksum(const volatile unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, (const unsigned char *)p + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (unsigned char)(x >> 56);
    }
}

static int run_server(sci_desc_t sd, unsigned int segid, size_t size)
{
    sci_error_t err;
    sci_local_segment_t segment;
    sci_map_t map;
    sci_local_interrupt_t intr;
    unsigned int intno = 0x30;

    create_interrupt(sd, &intr, &intno);
    unsigned char *base = (unsigned char *)create_mapped_segment(
        sd, &segment, &map, segid, HEADER_SIZE + size, " on this node (try -segid)");
    struct mc_header *h = (struct mc_header *)base;
    unsigned char *data = base + HEADER_SIZE;
    h->server_intno = intno;
    h->size = size;
    h->magic = MC_MAGIC;
    make_available(segment);                /* SCIPrepareSegment, SCISetSegmentAvailable */
    printf("server: segment 0x%x with %zu data bytes available\n", segid, size);
    fflush(stdout);

    /* 1. The client has copied its data in. */
    SCIWaitForInterrupt(intr, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIWaitForInterrupt");
    uint64_t got = checksum(data, size);
    int ok_in = got == h->client_sum;
    printf("server: data from the client: checksum %016" PRIx64 " %s\n", got,
           ok_in ? "matches" : "DOES NOT MATCH");
    h->server_verdict = ok_in ? 1 : 2;

    /* 2. New data for the client to read back. */
    fill(data, size, 0xfeed);
    h->server_sum = checksum(data, size);
    sci_remote_interrupt_t to_client;
    connect_interrupt(sd, &to_client, h->client_node, h->client_intno, "SCIConnectInterrupt");
    SCITriggerInterrupt(to_client, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCITriggerInterrupt");

    /* 3. The client's verdict on reading it back. */
    SCIWaitForInterrupt(intr, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIWaitForInterrupt");
    int ok_out = h->client_verdict == 1;
    printf("server: client read back the data %s\n", ok_out ? "intact" : "CORRUPTED");

    /* Stay until the client has disconnected. */
    wait_for_disconnect(segment);
    SCIDisconnectInterrupt(to_client, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectInterrupt");
    remove_mapped_segment(segment, map, 0);
    SCIRemoveInterrupt(intr, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveInterrupt");
    return ok_in && ok_out ? 0 : 1;
}

/* SCIMemCpy between sequence start and check, retried as the sequence asks. */
static void guarded_copy(sci_sequence_t seq, void *buf, sci_map_t map, size_t size,
                         unsigned int flags, const char *what)
{
    sci_error_t err;
    for (int attempt = 0; attempt < 10; attempt++) {
        sci_sequence_status_t st;
        do {
            st = SCIStartSequence(seq, NO_FLAGS, &err);
        } while (st == SCI_SEQ_PENDING);
        if (st != SCI_SEQ_OK)
            fail("%s: SCIStartSequence says %d (%s)", what, (int)st, SCIGetErrorString(err));
        SCIMemCpy(seq, buf, map, 0, size, flags, &err);
        DIE_ON_ERROR(err, what);
        st = SCICheckSequence(seq, NO_FLAGS, &err);
        if (st == SCI_SEQ_OK)
            return;
        if (st == SCI_SEQ_NOT_RETRIABLE)
            fail("%s: the transfer failed for good (%s)", what, SCIGetErrorString(err));
        /* SCI_SEQ_RETRIABLE / PENDING: copy again. */
    }
    fail("%s: the sequence never came back OK", what);
}

static int run_client(sci_desc_t sd, unsigned int remote_node, unsigned int segid, size_t size)
{
    sci_error_t err;
    sci_remote_segment_t segment;
    sci_map_t hmap, dmap;
    sci_sequence_t seq;
    sci_local_interrupt_t intr;
    unsigned int local_node, intno = 0x31;

    local_node = local_node_id();
    create_interrupt(sd, &intr, &intno);
    connect_segment(sd, &segment, remote_node, segid);
    if (SCIGetRemoteSegmentSize(segment) != HEADER_SIZE + size)
        fail("the server's segment has %zu data bytes, not %zu (use the same -size)",
             SCIGetRemoteSegmentSize(segment) - HEADER_SIZE, size);
    struct mc_header *h = (struct mc_header *)map_remote(segment, &hmap, 0, HEADER_SIZE,
                                                         "SCIMapRemoteSegment (header)");
    map_remote(segment, &dmap, HEADER_SIZE, size, "SCIMapRemoteSegment (data)");
    if (h->magic != MC_MAGIC)
        fail("segment 0x%x does not look like a memcopy server's segment", segid);
    SCICreateMapSequence(dmap, &seq, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCICreateMapSequence");

    unsigned char *buf = malloc(size);
    if (!buf)
        fail("out of memory");
    fill(buf, size, 0xc0ffee);
    uint64_t sum = checksum(buf, size);

    /* 1. Write. */
    uint64_t t0 = now_us();
    guarded_copy(seq, buf, dmap, size, NO_FLAGS, "SCIMemCpy (write)");
    uint64_t write_us = now_us() - t0;
    printf("client: SCIMemCpy wrote %zu bytes in %.3f ms (%.1f MB/s), checksum %016" PRIx64 "\n",
           size, write_us / 1000.0, mb_per_s(size, write_us), sum);
    h->client_node = local_node;
    h->client_intno = intno;
    h->client_sum = sum;
    SCIFlush(seq, NO_FLAGS);             /* header stores visible before the trigger */

    sci_remote_interrupt_t to_server;
    connect_interrupt(sd, &to_server, remote_node, h->server_intno, "SCIConnectInterrupt");
    SCITriggerInterrupt(to_server, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCITriggerInterrupt");

    /* 2. Wait for the server's verdict and new data. */
    SCIWaitForInterrupt(intr, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIWaitForInterrupt");
    int ok_in = h->server_verdict == 1;
    printf("client: server says the written data arrived %s\n", ok_in ? "intact" : "CORRUPTED");

    /* 3. Read back with SCI_FLAG_BLOCK_READ. */
    memset(buf, 0, size);
    t0 = now_us();
    guarded_copy(seq, buf, dmap, size, SCI_FLAG_BLOCK_READ, "SCIMemCpy (read)");
    uint64_t read_us = now_us() - t0;
    uint64_t got = checksum(buf, size);
    int ok_out = got == h->server_sum;
    printf("client: SCIMemCpy read %zu bytes in %.3f ms (%.1f MB/s), checksum %016" PRIx64
           " %s\n", size, read_us / 1000.0, mb_per_s(size, read_us), got,
           ok_out ? "matches" : "DOES NOT MATCH");
    h->client_verdict = ok_out ? 1 : 2;
    SCIFlush(seq, NO_FLAGS);
    SCITriggerInterrupt(to_server, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCITriggerInterrupt");

    free(buf);
    SCIRemoveSequence(seq, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveSequence");
    SCIDisconnectInterrupt(to_server, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectInterrupt");
    disconnect_mapped_segment(segment, hmap, dmap);
    SCIRemoveInterrupt(intr, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveInterrupt");
    return ok_in && ok_out ? 0 : 1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: memcopy -server [-size BYTES] [-segid ID] [-a ADAPTER] [-timeout MS]\n"
            "       memcopy -client [-rn NODE] [-size BYTES] [-segid ID] [-a ADAPTER] [-timeout MS]\n"
            "  -rn NODE     the server's node id (default: this node)\n"
            "  -size BYTES  bytes to copy each way (default 4m; k/m/g suffixes)\n"
            "  -segid ID    the server's segment id (default 0x%x)\n",
            DEFAULT_SEGID);
    exit(2);
}

int main(int argc, char **argv)
{
    int server = -1;
    unsigned int remote_node = 0, segid = DEFAULT_SEGID;
    size_t size = 4 << 20;

    example_name = "memcopy";
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
