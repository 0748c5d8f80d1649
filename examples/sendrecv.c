/*
 * sendrecv.c - move data larger than the shared window, with acks.
 *
 * The receiver owns a window segment (default 128 MB) plus a header page.
 * The sender maps the window and moves each transfer (default 4 KB, 2 MB
 * and 1 GB) through it in chunks: the window is split into -slots chunk
 * slots (default 2, so the sender fills one while the receiver checks the
 * other).  For each chunk the sender
 *   1. waits until the slot is free (the receiver acked the chunk that used
 *      it before),
 *   2. stores the chunk's bytes into the slot with plain CPU stores,
 *   3. triggers the receiver's data interrupt carrying the chunk's transfer
 *      number, absolute offset, length and slot.
 * The receiver checks EVERY byte of the chunk against the pattern computed
 * from its absolute offset in the transfer, and acks it with a plain
 * interrupt.  Each side prints the MB/s of each transfer.
 *
 * With -copy (sender's option) the sides work as in seed 001 instead: the
 * sender memcpy()s each chunk from a local buffer that holds the whole
 * transfer (filled before the clock starts), the receiver memcpy()s it out
 * into a local buffer and acks, and checks every byte of that buffer when
 * the transfer has ended, outside the sender's timing.
 *
 *   sendrecv -receiver [-window BYTES] [-segid ID]
 *   sendrecv -sender   [-rn RECEIVER_NODE] [-bytes LIST] [-slots N] [-segid ID] [-copy]
 *
 * -server is the same as -receiver, -client the same as -sender.
 * -bytes is a comma-separated list of sizes with k/m/g suffixes
 * (default 4k,2m,1g).  The receiver learns everything else from the
 * messages, so only the sender needs -bytes, -slots and -copy.
 */
#include "common/example.h"

#define DEFAULT_SEGID  0x5400
#define HEADER_SIZE    4096
#define SR_MAGIC       0x53524356u      /* "SRCV" */
#define MAX_SIZES      16

/* The receiver's header page. */
struct sr_header {
    volatile uint32_t magic;
    volatile uint32_t data_intno;       /* receiver's data interrupt */
    volatile uint64_t window;           /* window bytes after the header */
    volatile uint32_t error;            /* set by the receiver on a bad byte */
    volatile uint32_t pad;
    volatile uint64_t bad_offset;
};

/* The payload of each data interrupt. */
enum { MSG_HELLO = 1, MSG_CHUNK = 2, MSG_END = 3, MSG_BYE = 4 };
struct sr_msg {
    uint32_t type;
    uint32_t xfer;          /* transfer number */
    uint32_t slot;          /* CHUNK: window slot */
    uint32_t node;          /* HELLO: sender's node */
    uint32_t ack_intno;     /* HELLO: sender's ack interrupt */
    uint32_t copy;          /* HELLO: 1 = -copy mode */
    uint64_t total;         /* transfer size */
    uint64_t offset;        /* CHUNK: absolute offset in the transfer */
    uint64_t len;           /* CHUNK: bytes */
    uint64_t chunk;         /* HELLO: slot size */
};

/* The 8-byte word at absolute offset o (a multiple of 8) of transfer x. */
static inline uint64_t word_at(uint64_t o, uint32_t x)
{
    uint64_t v = (o >> 3) * 0x9E3779B97F4A7C15ULL + x * 0xD1B54A32D192ED03ULL;
    return v ^ (v >> 29);
}

static inline unsigned char byte_at(uint64_t o, uint32_t x)
{
    return (unsigned char)(word_at(o & ~7ULL, x) >> ((o & 7) * 8));
}

/* Store the pattern for [off, off+len) of transfer x at dst.  Plain stores,
 * word by word; off is a multiple of 8 (chunk offsets are). */
static void fill_chunk(unsigned char *dst, uint64_t off, uint64_t len, uint32_t x)
{
    uint64_t words = len / 8, i;
    uint64_t *w = (uint64_t *)dst;
    for (i = 0; i < words; i++)
        w[i] = word_at(off + i * 8, x);
    for (uint64_t b = words * 8; b < len; b++)
        dst[b] = byte_at(off + b, x);
}

/* Check every byte of [off, off+len) of transfer x at src; returns the
 * absolute offset of the first bad byte, or UINT64_MAX. */
static uint64_t check_chunk(const unsigned char *src, uint64_t off, uint64_t len, uint32_t x)
{
    uint64_t words = len / 8, i;
    const uint64_t *w = (const uint64_t *)src;
    for (i = 0; i < words; i++) {
        if (w[i] != word_at(off + i * 8, x)) {
            for (uint64_t b = i * 8; b < i * 8 + 8; b++)
                if (src[b] != byte_at(off + b, x))
                    return off + b;
        }
    }
    for (uint64_t b = words * 8; b < len; b++)
        if (src[b] != byte_at(off + b, x))
            return off + b;
    return UINT64_MAX;
}

static void print_rate(const char *who, uint64_t total, uint64_t chunks, uint64_t us)
{
    printf("%s: %12" PRIu64 " bytes in %5" PRIu64 " chunks: %10.3f ms, %9.1f MB/s\n", who, total,
           chunks, us / 1000.0, mb_per_s(total, us));
    fflush(stdout);
}

static int run_receiver(sci_desc_t sd, unsigned int segid, uint64_t window)
{
    sci_error_t err;
    sci_local_segment_t segment;
    sci_map_t map;
    sci_local_data_interrupt_t data_intr;
    unsigned int intno = 0x70;

    SCICreateDataInterrupt(sd, &data_intr, adapter, &intno, NULL, NULL, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCICreateDataInterrupt");
    unsigned char *base = (unsigned char *)create_mapped_segment(
        sd, &segment, &map, segid, HEADER_SIZE + window, " on this node (try -segid)");
    struct sr_header *h = (struct sr_header *)base;
    const unsigned char *win = base + HEADER_SIZE;
    h->data_intno = intno;
    h->window = window;
    h->magic = SR_MAGIC;
    make_available(segment);                /* SCIPrepareSegment, SCISetSegmentAvailable */
    printf("receiver: window segment 0x%x, %" PRIu64 " bytes, data interrupt %u\n", segid,
           window, intno);
    fflush(stdout);

    sci_remote_interrupt_t ack = NULL;
    struct sr_msg m;
    uint64_t chunk = 0, xfer_start = 0, xfer_chunks = 0, xfer_bytes = 0;
    int rc = 0, done = 0, copy = 0;
    unsigned char *dst = NULL;      /* -copy: the whole transfer, copied out */
    uint64_t dst_size = 0;
    while (!done) {
        unsigned int len = sizeof m;
        SCIWaitForDataInterrupt(data_intr, &m, &len, timeout_ms, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIWaitForDataInterrupt");
        if (len != sizeof m)
            fail("a %u-byte message; expected %zu", len, sizeof m);
        switch (m.type) {
        case MSG_HELLO:
            chunk = m.chunk;
            if (chunk == 0 || chunk > window)
                fail("sender's chunk size %" PRIu64 " does not fit the window", chunk);
            copy = m.copy == 1;
            connect_interrupt(sd, &ack, m.node, m.ack_intno, "SCIConnectInterrupt (ack)");
            printf("receiver: sender on node %u, chunks of %" PRIu64 " bytes%s\n", m.node, chunk,
                   copy ? ", copied out and checked at the end of each transfer" : "");
            break;
        case MSG_CHUNK: {
            if (!ack)
                fail("a chunk before the sender said hello");
            if (xfer_chunks == 0) {
                xfer_start = now_us();
                xfer_bytes = 0;
            }
            if (m.len > chunk || (uint64_t)(m.slot + 1) * chunk > window)
                fail("chunk %" PRIu64 "+%" PRIu64 " in slot %u does not fit", m.offset, m.len,
                     m.slot);
            uint64_t bad = UINT64_MAX;
            if (copy) {
                if (m.offset > m.total || m.len > m.total - m.offset)
                    fail("chunk %" PRIu64 "+%" PRIu64 " outside a transfer of %" PRIu64 " bytes",
                         m.offset, m.len, m.total);
                if (m.total > dst_size) {
                    free(dst);
                    dst = malloc(m.total);
                    if (!dst)
                        fail("no memory for a %" PRIu64 "-byte receive buffer", m.total);
                    dst_size = m.total;
                }
                memcpy(dst + m.offset, win + (uint64_t)m.slot * chunk, m.len);
            } else {
                bad = check_chunk(win + (uint64_t)m.slot * chunk, m.offset, m.len, m.xfer);
            }
            if (bad != UINT64_MAX) {
                printf("receiver: transfer %u: byte %" PRIu64 " is wrong\n", m.xfer, bad);
                h->bad_offset = bad;
                h->error = 1;
                rc = 1;
                done = 1;
            }
            xfer_chunks++;
            xfer_bytes += m.len;
            SCITriggerInterrupt(ack, NO_FLAGS, &err);      /* slot free again */
            DIE_ON_ERROR(err, "SCITriggerInterrupt (ack)");
            break;
        }
        case MSG_END:
            if (xfer_bytes != m.total)
                fail("transfer %u: got %" PRIu64 " of %" PRIu64 " bytes", m.xfer, xfer_bytes,
                     m.total);
            if (copy) {
                uint64_t bad = check_chunk(dst, 0, m.total, m.xfer);
                if (bad != UINT64_MAX) {
                    printf("receiver: transfer %u: byte %" PRIu64 " is wrong\n", m.xfer, bad);
                    h->bad_offset = bad;
                    h->error = 1;
                    rc = 1;
                    done = 1;
                    break;
                }
            }
            printf("receiver: transfer %u verified, every byte:\n", m.xfer);
            print_rate("receiver", m.total, xfer_chunks, now_us() - xfer_start);
            xfer_chunks = 0;
            break;
        case MSG_BYE:
            done = 1;
            break;
        default:
            fail("unknown message type %u", m.type);
        }
    }

    /* Stay until the sender has disconnected from the window. */
    wait_for_disconnect(segment);
    if (ack) {
        SCIDisconnectInterrupt(ack, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIDisconnectInterrupt");
    }
    free(dst);
    remove_mapped_segment(segment, map, 0);
    SCIRemoveDataInterrupt(data_intr, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveDataInterrupt");
    return rc;
}

static int run_sender(sci_desc_t sd, unsigned int remote_node, unsigned int segid,
                      const uint64_t *sizes, int nsizes, unsigned int slots, int copy)
{
    sci_error_t err;
    sci_remote_segment_t segment;
    sci_map_t hmap, wmap;
    sci_local_interrupt_t ack;
    sci_remote_data_interrupt_t data_intr;
    unsigned int local_node, ack_intno = 0x71;

    local_node = local_node_id();
    create_interrupt(sd, &ack, &ack_intno);
    printf("sender: connecting to window segment 0x%x on node %u\n", segid, remote_node);
    fflush(stdout);
    connect_segment(sd, &segment, remote_node, segid);
    struct sr_header *h = (struct sr_header *)map_remote(segment, &hmap, 0, HEADER_SIZE,
                                                         "SCIMapRemoteSegment (header)");
    if (h->magic != SR_MAGIC)
        fail("segment 0x%x is not a sendrecv window", segid);
    uint64_t window = h->window;
    uint64_t chunk = (window / slots) & ~(uint64_t)4095;
    if (chunk == 0)
        fail("window of %" PRIu64 " bytes is too small for %u slots", window, slots);
    unsigned char *win = (unsigned char *)map_remote(segment, &wmap, HEADER_SIZE, window,
                                                     "SCIMapRemoteSegment (window)");
    SCIConnectDataInterrupt(sd, &data_intr, remote_node, adapter, h->data_intno, timeout_ms,
                            NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIConnectDataInterrupt");
    printf("sender: window %" PRIu64 " bytes, %u slots of %" PRIu64 " bytes\n", window, slots,
           chunk);

    struct sr_msg m = { .type = MSG_HELLO, .node = local_node, .ack_intno = ack_intno,
                        .chunk = chunk, .copy = (uint32_t)copy };
    unsigned char *src = NULL;      /* -copy: the whole transfer, filled in advance */
    if (copy) {
        uint64_t most = 0;
        for (int s = 0; s < nsizes; s++)
            most = sizes[s] > most ? sizes[s] : most;
        src = malloc(most);
        if (!src)
            fail("no memory for a %" PRIu64 "-byte send buffer", most);
    }
    SCITriggerDataInterrupt(data_intr, &m, sizeof m, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCITriggerDataInterrupt (hello)");

    int rc = 0;
    for (int s = 0; s < nsizes && rc == 0; s++) {
        uint64_t total = sizes[s], sent = 0, acked = 0, chunks = 0;
        uint32_t xfer = (uint32_t)s + 1;
        if (copy)
            fill_chunk(src, 0, total, xfer);
        uint64_t t0 = now_us();
        for (uint64_t off = 0; off < total; off += chunk) {
            /* A slot is free once the chunk that used it was acked. */
            if (sent - acked == slots) {
                SCIWaitForInterrupt(ack, timeout_ms, NO_FLAGS, &err);
                DIE_ON_ERROR(err, "SCIWaitForInterrupt (ack)");
                acked++;
                if (h->error) {
                    rc = 1;
                    break;
                }
            }
            uint32_t slot = (uint32_t)(sent % slots);
            uint64_t len = total - off < chunk ? total - off : chunk;
            if (copy)
                memcpy(win + (uint64_t)slot * chunk, src + off, len);
            else
                fill_chunk(win + (uint64_t)slot * chunk, off, len, xfer);
            SCIStoreBarrier(NULL, NO_FLAGS);   /* data before the message */
            struct sr_msg c = { .type = MSG_CHUNK, .xfer = xfer, .slot = slot, .total = total,
                                .offset = off, .len = len };
            SCITriggerDataInterrupt(data_intr, &c, sizeof c, NO_FLAGS, &err);
            DIE_ON_ERROR(err, "SCITriggerDataInterrupt (chunk)");
            sent++;
            chunks++;
        }
        /* The last acks.  After a bad chunk the receiver acks no more. */
        while (acked < sent && !h->error) {
            SCIWaitForInterrupt(ack, timeout_ms, NO_FLAGS, &err);
            DIE_ON_ERROR(err, "SCIWaitForInterrupt (ack)");
            acked++;
        }
        uint64_t us = now_us() - t0;
        if (h->error) {
            printf("sender: the receiver found a wrong byte at offset %" PRIu64
                   " of transfer %u\n", h->bad_offset, xfer);
            rc = 1;
            break;
        }
        struct sr_msg e = { .type = MSG_END, .xfer = xfer, .total = total };
        SCITriggerDataInterrupt(data_intr, &e, sizeof e, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCITriggerDataInterrupt (end)");
        print_rate("sender", total, chunks, us);
    }
    if (rc == 0) {
        struct sr_msg b = { .type = MSG_BYE };
        SCITriggerDataInterrupt(data_intr, &b, sizeof b, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCITriggerDataInterrupt (bye)");
    }

    free(src);
    SCIDisconnectDataInterrupt(data_intr, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectDataInterrupt");
    disconnect_mapped_segment(segment, hmap, wmap);
    SCIRemoveInterrupt(ack, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveInterrupt");
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: sendrecv -receiver [-window BYTES] [-segid ID] [-a ADAPTER] [-timeout MS]\n"
            "       sendrecv -sender [-rn NODE] [-bytes LIST] [-slots N] [-segid ID] [-copy]\n"
            "                [-a ADAPTER] [-timeout MS]\n"
            "  -window BYTES  receiver's window (default 128m)\n"
            "  -bytes LIST    transfer sizes, comma-separated (default 4k,2m,1g)\n"
            "  -slots N       chunks in flight; chunk = window / N (default 2)\n"
            "  -segid ID      the window's segment id (default 0x%x)\n"
            "  -copy          copy in from and out to local buffers (seed 001's way);\n"
            "                 the receiver checks every byte after each transfer\n"
            "  (-server = -receiver, -client = -sender)\n",
            DEFAULT_SEGID);
    exit(2);
}

int main(int argc, char **argv)
{
    int receiver = -1;
    unsigned int remote_node = 0, segid = DEFAULT_SEGID, slots = 2;
    int copy = 0;
    uint64_t window = 128ULL << 20;
    uint64_t sizes[MAX_SIZES] = { 4ULL << 10, 2ULL << 20, 1ULL << 30 };
    int nsizes = 3;

    example_name = "sendrecv";
    for (int i = 1; i < argc; i++) {
        /* -server and -client set `receiver` too. */
        if (common_option(argc, argv, &i, &receiver, &remote_node)) {
            continue;
        } else if (!strcmp(argv[i], "-receiver")) {
            receiver = 1;
        } else if (!strcmp(argv[i], "-sender")) {
            receiver = 0;
        } else if (!strcmp(argv[i], "-window")) {
            window = parse_size(opt_value(argc, argv, &i));
        } else if (!strcmp(argv[i], "-copy")) {
            copy = 1;
        } else if (!strcmp(argv[i], "-slots")) {
            slots = opt_uint(argc, argv, &i);
        } else if (!strcmp(argv[i], "-segid")) {
            segid = opt_uint(argc, argv, &i);
        } else if (!strcmp(argv[i], "-bytes")) {
            char *list = strdup(opt_value(argc, argv, &i)), *save = NULL;
            nsizes = 0;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (nsizes == MAX_SIZES)
                    fail("at most %d sizes", MAX_SIZES);
                sizes[nsizes++] = parse_size(t);
            }
            free(list);
        } else {
            usage();
        }
    }
    /* Up to 64 data interrupts queue up, so at most 60 chunks in flight. */
    if (receiver < 0 || nsizes == 0 || window < 4096 || slots == 0 || slots > 60)
        usage();
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] == 0)
            fail("a transfer of 0 bytes");

    sci_desc_t sd = open_descriptor();                 /* SCIInitialize, SCIOpen */
    if (remote_node == 0)
        remote_node = local_node_id();
    int rc = receiver ? run_receiver(sd, segid, window)
                      : run_sender(sd, remote_node, segid, sizes, nsizes, slots, copy);
    close_descriptor(sd);                              /* SCIClose, SCITerminate */
    printf("%s: %s\n", receiver ? "receiver" : "sender", rc == 0 ? "success" : "FAILED");
    return rc;
}
