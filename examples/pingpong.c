/*
 * pingpong.c - the classic SISCI memory ping-pong: remote stores, local
 * busy-wait, no flush calls.
 *
 * Each side creates a local segment (the "inbox"), connects to the other
 * side's inbox and maps it.  For each round trip i = 1..N the client writes a
 * message of -size bytes into the server's inbox -- payload first, then the
 * sequence number i in its last 4 bytes -- and busy-waits on its OWN inbox
 * until the same sequence number comes back.  The server busy-waits on its
 * own inbox, checks the payload, and echoes the message into the client's
 * inbox the same way.  Every store is a plain CPU store through a volatile
 * pointer: there is no SCIFlush, SCIStoreBarrier, sequence check or
 * interrupt anywhere in the loop, exactly as a program written for SISCI
 * hardware does it.  Both sides check every payload byte of every message.
 *
 * The client prints the one-way latency (half the round trip) as the median
 * and the 99th percentile of all round trips.
 *
 *   pingpong -server [-rn CLIENT_NODE] [-n ROUNDS] [-size BYTES] [-segid ID] [-inbox BYTES]
 *   pingpong -client [-rn SERVER_NODE] [-n ROUNDS] [-size BYTES] [-segid ID] [-inbox BYTES]
 *
 * The server learns the client's node id from the CONNECT event on its
 * segment (SCIWaitForLocalSegmentEvent) unless -rn names it.  The server's
 * inbox is segment ID (default 0x9100), the client's ID+1.
 * Common options: -a ADAPTER (0), -timeout MS (connect waits and each echo
 * wait; default forever).
 */
#include "common/example.h"

#define DEFAULT_SEGID  0x9100
#define INBOX_SIZE     8192           /* the largest message */
#define DEFAULT_ROUNDS 5000
#define DEFAULT_MSG    64

/* Size of each inbox segment (-inbox); messages use its first INBOX_SIZE
 * bytes, and only those are mapped on the peer's side. */
static size_t inbox_size = INBOX_SIZE;

/* Word w of the payload of message `seq` (the last word holds seq itself). */
static inline uint32_t payload_word(uint32_t seq, size_t w)
{
    return (seq * 0x9e3779b1u) ^ (uint32_t)(w * 0x85ebca6bu) ^ 0x50494e47u;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* Spin on our own inbox until the last word says `seq`; fail after the timeout. */
static void wait_for_seq(const volatile uint32_t *inbox, size_t words, uint32_t seq,
                         const char *who)
{
    const volatile uint32_t *last = &inbox[words - 1];
    if (*last == seq)
        return;
    uint64_t start = now_us();
    unsigned spins = 0;
    while (*last != seq) {
        cpu_relax();
        if (++spins == 65536) {
            spins = 0;
            if (timeout_ms != SCI_INFINITE_TIMEOUT &&
                now_us() - start > (uint64_t)timeout_ms * 1000u)
                fail("%s: no message %u after %u ms (the inbox holds sequence %u)", who, seq,
                     timeout_ms, *last);
        }
    }
}

/* Every payload word of message `seq` in `inbox` must be right. */
static void check_payload(const volatile uint32_t *inbox, size_t words, uint32_t seq,
                          const char *who)
{
    for (size_t w = 0; w + 1 < words; w++) {
        uint32_t got = inbox[w];
        if (got != payload_word(seq, w))
            fail("%s: message %u: payload word %zu (byte offset %zu) is 0x%08x, expected 0x%08x",
                 who, seq, w, w * 4, got, payload_word(seq, w));
    }
}

/* Payload first, then the sequence number: plain stores, no flush. */
static void send_message(volatile uint32_t *peer, size_t words, uint32_t seq)
{
    for (size_t w = 0; w + 1 < words; w++)
        peer[w] = payload_word(seq, w);
    peer[words - 1] = seq;
}

struct side {
    sci_desc_t sd;
    unsigned int local_node;
    sci_local_segment_t inbox_seg;
    sci_map_t inbox_map;
    volatile uint32_t *inbox;
    sci_remote_segment_t peer_seg;
    sci_map_t peer_map;
    volatile uint32_t *peer;
};

static void create_inbox(struct side *s, unsigned int segid)
{
    s->inbox = create_mapped_segment(s->sd, &s->inbox_seg, &s->inbox_map, segid, inbox_size,
                                     " on this node (another pingpong running? try -segid)");
    make_available(s->inbox_seg);           /* SCIPrepareSegment, SCISetSegmentAvailable */
}

static void connect_peer(struct side *s, unsigned int node, unsigned int segid)
{
    connect_segment(s->sd, &s->peer_seg, node, segid);
    if (SCIGetRemoteSegmentSize(s->peer_seg) < INBOX_SIZE)
        fail("segment 0x%x on node %u has %zu bytes, under %u: not a pingpong inbox", segid, node,
             SCIGetRemoteSegmentSize(s->peer_seg), INBOX_SIZE);
    s->peer = map_remote(s->peer_seg, &s->peer_map, 0, INBOX_SIZE, "SCIMapRemoteSegment");
}

/* Disconnect from the peer, then wait until the peer has left our inbox. */
static void finish(struct side *s, const char *who)
{
    sci_error_t err;
    SCIUnmapSegment(s->peer_map, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIUnmapSegment (peer)");
    SCIDisconnectSegment(s->peer_seg, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectSegment");
    for (;;) {
        unsigned int node, adap;
        sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(s->inbox_seg, &node, &adap,
                                                                timeout_ms, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIWaitForLocalSegmentEvent (waiting for the peer to leave)");
        if (r == SCI_CB_DISCONNECT || r == SCI_CB_LOST) {
            printf("%s: the peer on node %u left\n", who, node);
            break;
        }
    }
    SCIUnmapSegment(s->inbox_map, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIUnmapSegment (inbox)");
    SCISetSegmentUnavailable(s->inbox_seg, adapter, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCISetSegmentUnavailable");
    SCIRemoveSegment(s->inbox_seg, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveSegment");
}

static int run_server(struct side *s, unsigned int client_node, unsigned int segid,
                      uint32_t rounds, size_t size)
{
    sci_error_t err;
    size_t words = size / 4;

    create_inbox(s, segid);
    printf("server: node %u, inbox segment 0x%x ready; %u round trips of %zu bytes\n",
           s->local_node, segid, rounds, size);
    fflush(stdout);

    /* The client connects to our inbox: that tells us its node. */
    for (;;) {
        unsigned int node, adap;
        sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(s->inbox_seg, &node, &adap,
                                                                timeout_ms, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIWaitForLocalSegmentEvent");
        if (r == SCI_CB_CONNECT) {
            printf("server: client connected from node %u\n", node);
            if (client_node == 0)
                client_node = node;
            break;
        }
    }
    connect_peer(s, client_node, segid + 1);
    printf("server: mapped the client's inbox 0x%x on node %u\n", segid + 1, client_node);
    fflush(stdout);

    for (uint32_t seq = 1; seq <= rounds; seq++) {
        wait_for_seq(s->inbox, words, seq, "server");
        check_payload(s->inbox, words, seq, "server");
        send_message(s->peer, words, seq);
    }
    printf("server: echoed %u messages of %zu bytes, every payload byte correct\n", rounds,
           size);
    finish(s, "server");
    return 0;
}

static int run_client(struct side *s, unsigned int server_node, unsigned int segid,
                      uint32_t rounds, size_t size)
{
    size_t words = size / 4;
    uint64_t *half_rtt_ns = calloc(rounds, sizeof *half_rtt_ns);
    if (!half_rtt_ns)
        fail("out of memory");

    create_inbox(s, segid + 1);
    printf("client: node %u, connecting to inbox 0x%x on node %u\n", s->local_node, segid,
           server_node);
    fflush(stdout);
    connect_peer(s, server_node, segid);

    struct timespec a, b;
    uint64_t t_start = now_us();
    for (uint32_t seq = 1; seq <= rounds; seq++) {
        clock_gettime(CLOCK_MONOTONIC, &a);
        send_message(s->peer, words, seq);
        wait_for_seq(s->inbox, words, seq, "client");
        clock_gettime(CLOCK_MONOTONIC, &b);
        check_payload(s->inbox, words, seq, "client");
        uint64_t ns = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u +
                      (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec;
        half_rtt_ns[seq - 1] = ns / 2;
    }
    uint64_t total_us = now_us() - t_start;

    qsort(half_rtt_ns, rounds, sizeof *half_rtt_ns, cmp_u64);
    size_t p99 = ((size_t)rounds * 99 + 99) / 100;      /* ceil(0.99 n), 1-based */
    if (p99 > rounds)
        p99 = rounds;
    double median = rounds % 2 ? half_rtt_ns[rounds / 2] / 1000.0
                               : (half_rtt_ns[rounds / 2 - 1] + half_rtt_ns[rounds / 2]) / 2000.0;
    printf("client: %u round trips of %zu bytes in %.3f ms, every echo correct\n", rounds,
           size, total_us / 1000.0);
    printf("client: one-way latency (RTT/2): median %.2f us, p99 %.2f us, min %.2f us, "
           "max %.2f us\n",
           median, half_rtt_ns[p99 - 1] / 1000.0, half_rtt_ns[0] / 1000.0,
           half_rtt_ns[rounds - 1] / 1000.0);
    free(half_rtt_ns);
    finish(s, "client");
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pingpong -server [-rn NODE] [-n ROUNDS] [-size BYTES] [-segid ID] [-inbox BYTES] [-a ADAPTER] [-timeout MS]\n"
            "       pingpong -client [-rn NODE] [-n ROUNDS] [-size BYTES] [-segid ID] [-inbox BYTES] [-a ADAPTER] [-timeout MS]\n"
            "  -rn NODE     the other side's node id (client: default this node;\n"
            "               server: default learned from the client's connect)\n"
            "  -n ROUNDS    round trips (default %u)\n"
            "  -size BYTES  message size, 8..%u, a multiple of 4 (default %u; same on both sides)\n"
            "  -segid ID    the server's inbox segment id; the client's is ID+1 (default 0x%x)\n"
            "  -inbox BYTES size of this side's inbox segment, at least %u (default %u); the\n"
            "               peer maps only the first %u bytes of it\n"
            "  -timeout MS  bound on connect waits and on each echo (default forever)\n",
            DEFAULT_ROUNDS, INBOX_SIZE, DEFAULT_MSG, DEFAULT_SEGID, INBOX_SIZE, INBOX_SIZE, INBOX_SIZE);
    exit(2);
}

int main(int argc, char **argv)
{
    int server = -1;
    unsigned int remote_node = 0, segid = DEFAULT_SEGID;
    uint64_t rounds = DEFAULT_ROUNDS;
    size_t size = DEFAULT_MSG;

    example_name = "pingpong";
    for (int i = 1; i < argc; i++) {
        if (common_option(argc, argv, &i, &server, &remote_node))
            continue;
        if (!strcmp(argv[i], "-n"))
            rounds = parse_size(opt_value(argc, argv, &i));
        else if (!strcmp(argv[i], "-size"))
            size = (size_t)parse_size(opt_value(argc, argv, &i));
        else if (!strcmp(argv[i], "-segid"))
            segid = opt_uint(argc, argv, &i);
        else if (!strcmp(argv[i], "-inbox"))
            inbox_size = (size_t)parse_size(opt_value(argc, argv, &i));
        else
            usage();
    }
    if (server < 0)
        usage();
    if (size < 8 || size > INBOX_SIZE || size % 4)
        fail("-size must be 8..%u and a multiple of 4", INBOX_SIZE);
    if (inbox_size < INBOX_SIZE)
        fail("-inbox must be at least %u", INBOX_SIZE);
    if (rounds == 0 || rounds > 100000000)
        fail("-n must be 1..100000000");

    setvbuf(stdout, NULL, _IOLBF, 0);
    struct side s;
    memset(&s, 0, sizeof s);
    s.sd = open_descriptor();                          /* SCIInitialize, SCIOpen */
    s.local_node = local_node_id();
    if (!server && remote_node == 0)
        remote_node = s.local_node;

    int rc = server ? run_server(&s, remote_node, segid, (uint32_t)rounds, size)
                    : run_client(&s, remote_node, segid, (uint32_t)rounds, size);

    close_descriptor(s.sd);                            /* SCIClose, SCITerminate */
    printf("%s: %s\n", server ? "server" : "client", rc == 0 ? "success" : "FAILED");
    return rc;
}
