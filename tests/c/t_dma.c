/*
 * t_dma.c - docs/api.md "DMA": queues, transfers in both directions, vectors,
 * program memory, completion by callback, by SCI_FLAG_DMA_WAIT, by polling
 * and by blocking waits (block, poll, adaptive), abort, one transfer per
 * queue, several queues at once, every argument error, a segment lost in
 * mid-transfer, and a descriptor closed or a process killed with a transfer
 * in flight.
 *
 * Test cases (run by crates/vsci-systest/tests/c_api.rs):   t_dma [CASE...]
 * The target segment belongs to another process of the same node (role A),
 * or to the DMA-ing process itself.
 *
 * Remote mode (run by crates/vsci-systest/tests/cluster.rs, one process per
 * node):
 *   t_dma owner SEG SIZE
 *       creates segment SEG of SIZE bytes, prints "OWNER READY", and on
 *       SIGTERM prints "OWNER CRC crc=C" (CRC-32 of the whole segment) and
 *       "OWNER DONE".
 *   t_dma client NODE SEG SIZE
 *       runs the data cases (write, read, vector, program memory, callback,
 *       polling, blocking wait, SCI_FLAG_DMA_WAIT, several queues) against
 *       segment SEG of node NODE, checking every byte through SCIMemCpy
 *       reads, then writes a final pattern and prints "CLIENT DONE crc=C".
 *   t_dma stream NODE SEG SIZE
 *       DMA-writes and -reads SIZE bytes to and from that segment over and
 *       over, printing "STREAMING" after the first round, until a transfer
 *       fails: the queue must then be in state ERROR and the failing call
 *       must report an error; prints "STREAM FAILED state=S err=NAME after
 *       N rounds" and exits 0.  (The harness kills the owner's node.)
 *
 * Why one file of about 1,000 lines: it is one test program, as every
 * program in tests/c is (the Makefile builds each into one binary that the
 * harness runs case by case), and its local cases and its roles across nodes
 * share the fixtures at the top (context, patterns and checks, queues); the
 * other API areas have their own programs.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "common/proc.h"

#define MIB ((size_t)1 << 20)
#define WAIT_LONG 60000u
/* A size that is not a multiple of the engine's 1 MiB chunk. */
#define ODD_SIZE (MIB + 3 * 4096 + 8)

static inline unsigned char pattern(size_t i, unsigned seed)
{
    return (unsigned char)(i * 131u + seed * 7u + (i >> 9) + (i >> 17) + 1);
}

static uint32_t crc32_buf(const volatile unsigned char *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1]) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* ---- a DMA-ing process and its target ------------------------------------ */

struct ctx {
    sci_desc_t sd;
    unsigned int node;
    sci_local_segment_t ls;      /* the DMA-ing process's own segment */
    sci_map_t lmap;
    volatile unsigned char *l;
    size_t lsize;
    sci_remote_segment_t rs;     /* the target */
    sci_map_t rmap;              /* for checking through SCIMemCpy */
    size_t rsize;
};

static void ctx_open(struct ctx *c, unsigned int lseg_id, size_t lsize, unsigned int node,
                     unsigned int rseg_id)
{
    sci_error_t err;
    memset(c, 0, sizeof *c);
    c->sd = open_sd(&c->node);
    c->lsize = lsize;
    EXPECT(SCI_ERR_OK, SCICreateSegment(c->sd, &c->ls, lseg_id, lsize, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(c->ls, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, c->l = SCIMapLocalSegment(c->ls, &c->lmap, 0, lsize, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(c->sd, &c->rs, node ? node : c->node, rseg_id, 0, NULL,
                                         NULL, WAIT_LONG, NO_FLAGS, &err));
    c->rsize = SCIGetRemoteSegmentSize(c->rs);
    volatile void *p;
    EXPECT(SCI_ERR_OK, p = SCIMapRemoteSegment(c->rs, &c->rmap, 0, c->rsize, NULL, NO_FLAGS, &err));
    (void)p;
}

static void ctx_close(struct ctx *c)
{
    sci_error_t err;
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(c->rmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(c->rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(c->lmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(c->ls, NO_FLAGS, &err));
    close_sd(c->sd);
}

static void fill_local(struct ctx *c, size_t off, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        c->l[off + i] = pattern(i, seed);
}

static void check_local(struct ctx *c, size_t off, size_t n, unsigned seed, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (c->l[off + i] != pattern(i, seed))
            FAILF("%s: local byte %zu (offset %zu) is 0x%02x, expected 0x%02x", what, i, off + i,
                  c->l[off + i], pattern(i, seed));
}

/* Put a pattern into the target with SCIMemCpy (visible at its owner on
 * return), independent of the DMA engine. */
static void fill_remote(struct ctx *c, size_t off, size_t n, unsigned seed)
{
    sci_error_t err;
    unsigned char *b = malloc(n);
    CHECK(b != NULL);
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(i, seed);
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, b, c->rmap, off, n, NO_FLAGS, &err));
    free(b);
}

/* Read the target's bytes fresh from its owner (SCIMemCpy block read) and
 * compare them with the pattern. */
static void check_remote(struct ctx *c, size_t off, size_t n, unsigned seed, const char *what)
{
    sci_error_t err;
    unsigned char *b = malloc(n);
    CHECK(b != NULL);
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, b, c->rmap, off, n, SCI_FLAG_BLOCK_READ, &err));
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(i, seed))
            FAILF("%s: target byte %zu (offset %zu) is 0x%02x, expected 0x%02x", what, i, off + i,
                  b[i], pattern(i, seed));
    free(b);
}

static sci_dma_queue_t make_queue(struct ctx *c, unsigned int max_entries)
{
    sci_error_t err;
    sci_dma_queue_t q;
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(c->sd, &q, 0, max_entries, NO_FLAGS, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_IDLE);
    return q;
}

static void remove_queue(sci_dma_queue_t q)
{
    sci_error_t err;
    EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(q, NO_FLAGS, &err));
}

static void wait_done(sci_dma_queue_t q)
{
    sci_error_t err;
    sci_dma_queue_state_t st;
    EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(q, WAIT_LONG, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_DMAQUEUE_DONE);
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_DONE);
}

/* ---- the data cases (both modes) ------------------------------------------ */

/* local -> target, then target -> local, with a size that is not a whole
 * number of engine chunks and offsets on both sides. */
static void data_write_read(struct ctx *c)
{
    sci_error_t err;
    sci_dma_queue_t q = make_queue(c, 1);
    fill_local(c, 4096, ODD_SIZE, 11);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c->ls, c->rs, 4096, ODD_SIZE, 8192, NULL, NULL,
                                           NO_FLAGS, &err));
    wait_done(q);
    check_remote(c, 8192, ODD_SIZE, 11, "write");

    fill_remote(c, 16, ODD_SIZE, 12);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c->ls, c->rs, 2 * MIB, ODD_SIZE, 16, NULL, NULL,
                                           SCI_FLAG_DMA_READ, &err));
    wait_done(q);
    check_local(c, 2 * MIB, ODD_SIZE, 12, "read");
    remove_queue(q);
    printf("data write/read ok\n");
}

/* Vectors of scattered pieces, both directions, with the engine-type hint
 * flags real programs pass. */
static void data_vector(struct ctx *c)
{
    sci_error_t err;
    enum { N = 5 };
    sci_dma_queue_t q = make_queue(c, N);
    dis_dma_vec_t v[N];
    size_t sizes[N] = { 8, 4096, 65536 + 8, MIB + 24, 3 * 4096 };
    size_t loff = 0, roff = 0;
    for (int i = 0; i < N; i++) {
        v[i].size = sizes[i];
        v[i].local_offset = loff;
        v[i].remote_offset = roff + 4096;   /* the pieces land apart */
        v[i].flags = 0;
        fill_local(c, loff, sizes[i], 20 + (unsigned)i);
        loff += sizes[i] + 64;
        roff += sizes[i] + 4096 + 4096;
    }
    EXPECT(SCI_ERR_OK, SCIStartDmaTransferVec(q, c->ls, c->rs, N, v, NULL, NULL,
                                              SCI_FLAG_DMA_GLOBAL, &err));
    wait_done(q);
    for (int i = 0; i < N; i++)
        check_remote(c, v[i].remote_offset, sizes[i], 20 + (unsigned)i, "vector write");

    /* Read them back, each into a new local place. */
    for (int i = 0; i < N; i++)
        v[i].local_offset += 4 * MIB;
    EXPECT(SCI_ERR_OK, SCIStartDmaTransferVec(q, c->ls, c->rs, N, v, NULL, NULL,
                                              SCI_FLAG_DMA_READ | SCI_FLAG_DMA_WAIT, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_DONE);
    for (int i = 0; i < N; i++)
        check_local(c, v[i].local_offset, sizes[i], 20 + (unsigned)i, "vector read");
    remove_queue(q);
    printf("data vector ok\n");
}

/* SCIStartDmaTransferMem: program memory instead of a local segment. */
static void data_mem(struct ctx *c)
{
    sci_error_t err;
    sci_dma_queue_t q = make_queue(c, 1);
    size_t n = ODD_SIZE;
    unsigned char *b = malloc(n);
    CHECK(b != NULL);
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(i, 31);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransferMem(q, b, c->rs, n, 40960, NULL, NULL, NO_FLAGS, &err));
    wait_done(q);
    check_remote(c, 40960, n, 31, "mem write");
    fill_remote(c, 8, n, 32);
    memset(b, 0, n);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransferMem(q, b, c->rs, n, 8, NULL, NULL,
                                              SCI_FLAG_DMA_READ | SCI_FLAG_DMA_WAIT, &err));
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(i, 32))
            FAILF("mem read: byte %zu is 0x%02x, expected 0x%02x", i, b[i], pattern(i, 32));
    free(b);
    remove_queue(q);
    printf("data mem ok\n");
}

/* Completion callbacks: each gets its argument, its queue and SCI_ERR_OK;
 * a callback may start the next transfer on its own queue. */
struct cb_state {
    struct ctx *c;
    sci_dma_queue_t q;
    atomic_int calls;
    atomic_int bad;
    int rounds;
};

static sci_callback_action_t chain_cb(void *arg, sci_dma_queue_t queue, sci_error_t status)
{
    struct cb_state *s = arg;
    if (queue != s->q || status != SCI_ERR_OK)
        atomic_fetch_add(&s->bad, 1);
    int n = atomic_fetch_add(&s->calls, 1) + 1;
    if (n < s->rounds) {
        sci_error_t err;
        /* Round n writes piece n. */
        SCIStartDmaTransfer(queue, s->c->ls, s->c->rs, (size_t)n * 65536, 65536,
                            (size_t)n * 65536, chain_cb, s, SCI_FLAG_USE_CALLBACK, &err);
        if (err != SCI_ERR_OK)
            atomic_fetch_add(&s->bad, 1);
    }
    return SCI_CALLBACK_CONTINUE;
}

static void data_callback(struct ctx *c)
{
    sci_error_t err;
    struct cb_state s = { .c = c, .rounds = 8 };
    s.q = make_queue(c, 1);
    for (int i = 0; i < s.rounds; i++)
        fill_local(c, (size_t)i * 65536, 65536, 40 + (unsigned)i);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(s.q, c->ls, c->rs, 0, 65536, 0, chain_cb, &s,
                                           SCI_FLAG_USE_CALLBACK, &err));
    WAIT_UNTIL(atomic_load(&s.calls) == s.rounds, WAIT_LONG);
    CHECK_EQ(atomic_load(&s.bad), 0);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&s.calls), s.rounds); /* each transfer called back once */
    CHECK_EQ(SCIDMAQueueState(s.q), SCI_DMAQUEUE_DONE);
    for (int i = 0; i < s.rounds; i++)
        check_remote(c, (size_t)i * 65536, 65536, 40 + (unsigned)i, "callback chain");
    /* A callback given without SCI_FLAG_USE_CALLBACK is not called. */
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(s.q, c->ls, c->rs, 0, 4096, 0, chain_cb, &s,
                                           NO_FLAGS, &err));
    wait_done(s.q);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&s.calls), s.rounds);
    remove_queue(s.q);
    printf("data callback ok\n");
}

/* Completion by polling SCIDMAQueueState, and by SCI_FLAG_DMA_WAIT. */
static void data_poll_and_wait_flag(struct ctx *c)
{
    sci_error_t err;
    sci_dma_queue_t q = make_queue(c, 1);
    fill_local(c, 0, 2 * MIB, 51);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c->ls, c->rs, 0, 2 * MIB, 0, NULL, NULL, NO_FLAGS,
                                           &err));
    uint64_t dl = now_ms() + WAIT_LONG;
    sci_dma_queue_state_t st;
    while ((st = SCIDMAQueueState(q)) == SCI_DMAQUEUE_POSTED)
        CHECK(now_ms() < dl);
    CHECK_EQ(st, SCI_DMAQUEUE_DONE);
    check_remote(c, 0, 2 * MIB, 51, "polled write");

    fill_local(c, 0, 2 * MIB, 52);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c->ls, c->rs, 0, 2 * MIB, 0, NULL, NULL,
                                           SCI_FLAG_DMA_WAIT, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_DONE);
    check_remote(c, 0, 2 * MIB, 52, "DMA_WAIT write");
    /* Waiting on a finished queue returns its state at once. */
    EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(q, 0, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_DMAQUEUE_DONE);
    /* DMA_WAIT with a callback: the callback has run when the call returns. */
    struct cb_state s = { .c = c, .q = q, .rounds = 1 };
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c->ls, c->rs, 0, 4096, 0, chain_cb, &s,
                                           SCI_FLAG_DMA_WAIT | SCI_FLAG_USE_CALLBACK, &err));
    CHECK_EQ(atomic_load(&s.calls), 1);
    CHECK_EQ(atomic_load(&s.bad), 0);
    remove_queue(q);
    printf("data poll/wait-flag ok\n");
}

/* SCIWaitForDMAQueue in each waiting mode (the mode is read when the queue
 * is created). */
static void data_blocking_waits(struct ctx *c)
{
    sci_error_t err;
    const char *modes[] = { "block", "poll", "adaptive" };
    for (int m = 0; m < 3; m++) {
        setenv("VSCI_DMA_WAIT", modes[m], 1);
        sci_dma_queue_t q = make_queue(c, 1);
        unsigned seed = 60 + (unsigned)m;
        fill_local(c, 0, 3 * MIB, seed);
        EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c->ls, c->rs, 0, 3 * MIB, 0, NULL, NULL,
                                               NO_FLAGS, &err));
        sci_dma_queue_state_t st;
        EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(q, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err));
        CHECK_EQ(st, SCI_DMAQUEUE_DONE);
        check_remote(c, 0, 3 * MIB, seed, modes[m]);
        remove_queue(q);
    }
    unsetenv("VSCI_DMA_WAIT");
    printf("data blocking waits ok\n");
}

/* Several queues in flight at once, each on its own part of the target. */
static void data_several_queues(struct ctx *c)
{
    sci_error_t err;
    enum { Q = 4 };
    size_t part = MIB;
    sci_dma_queue_t q[Q];
    for (int i = 0; i < Q; i++) {
        q[i] = make_queue(c, 1);
        fill_local(c, (size_t)i * part, part, 70 + (unsigned)i);
    }
    for (int i = 0; i < Q; i++)
        EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q[i], c->ls, c->rs, (size_t)i * part, part,
                                               (size_t)i * part, NULL, NULL, NO_FLAGS, &err));
    for (int i = 0; i < Q; i++)
        wait_done(q[i]);
    for (int i = 0; i < Q; i++) {
        check_remote(c, (size_t)i * part, part, 70 + (unsigned)i, "several queues");
        remove_queue(q[i]);
    }
    printf("data several queues ok\n");
}

static void data_suite(struct ctx *c)
{
    CHECK(c->lsize >= 8 * MIB && c->rsize >= 4 * MIB);
    data_write_read(c);
    data_vector(c);
    data_mem(c);
    data_callback(c);
    data_poll_and_wait_flag(c);
    data_blocking_waits(c);
    data_several_queues(c);
}

/* ---- local cases ----------------------------------------------------------- */

#define TSEG 0x6d01u          /* role A's target segment */
#define TSIZE (8 * MIB)

/* Role A: own the target segment until B is done with it. */
static void owner_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, TSEG, TSIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    peer_send(p, node);
    peer_recv(p);                       /* B is done */
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void data_b(struct peer *p)
{
    unsigned int node = (unsigned int)peer_recv(p);
    struct ctx c;
    ctx_open(&c, 0x6d02, 8 * MIB, node, TSEG);
    data_suite(&c);
    ctx_close(&c);
    peer_send(p, 1);
}

/* The queue calls themselves: create, state, wait, abort and remove, and
 * their errors; the adapter query. */
static void queue_calls(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_dma_queue_t q, q2;
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCICreateDMAQueue(NULL, &q, 0, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCICreateDMAQueue(sd, NULL, 0, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCICreateDMAQueue(sd, &q, 0, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCICreateDMAQueue(sd, &q, 1, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCICreateDMAQueue(sd, &q, 0, 1, BAD_FLAG, &err));
    EXPECT(SCI_ERR_FLAG_NOT_IMPLEMENTED, SCICreateDMAQueue(sd, &q, 0, 1, SCI_FLAG_DMA_PHDMA, &err));
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(sd, &q, 0, 16, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(sd, &q2, 0, 1, SCI_FLAG_DMA_GLOBAL, &err));
    CHECK(q != q2);
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_IDLE);
    /* Nothing posted: waiting returns IDLE at once, abort does nothing. */
    sci_dma_queue_state_t st;
    EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(q, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_DMAQUEUE_IDLE);
    EXPECT(SCI_ERR_OK, SCIAbortDMAQueue(q, NO_FLAGS, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_IDLE);
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIWaitForDMAQueue(q, 0, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIAbortDMAQueue(q, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRemoveDMAQueue(q, BAD_FLAG, &err));
    /* Bad handles. */
    CHECK_EQ(SCIDMAQueueState(NULL), SCI_DMAQUEUE_ERROR);
    CHECK_EQ(SCIDMAQueueState((sci_dma_queue_t)sd), SCI_DMAQUEUE_ERROR);
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, st = SCIWaitForDMAQueue(NULL, 0, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_DMAQUEUE_ERROR);
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIAbortDMAQueue((sci_dma_queue_t)sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRemoveDMAQueue(NULL, NO_FLAGS, &err));

    /* The older queue API: bad handles and flags, nothing to post. */
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, st = SCIEnqueueDMATransfer(NULL, NULL, NULL, 0, 0, 8, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_DMAQUEUE_ERROR);
    EXPECT(SCI_ERR_ILLEGAL_FLAG, st = SCIEnqueueDMATransfer(q, NULL, NULL, 0, 0, 8, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, st = SCIEnqueueDMATransfer(q, NULL, NULL, 0, 0, 8, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIPostDMAQueue((sci_dma_queue_t)sd, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIResetDMAQueue(NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIPostDMAQueue(q, NULL, NULL, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIResetDMAQueue(q, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIPostDMAQueue(q, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIPostDMAQueue(q, NULL, NULL, SCI_FLAG_USE_CALLBACK, &err));
    EXPECT(SCI_ERR_OK, SCIResetDMAQueue(q, NO_FLAGS, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_IDLE);

    /* DMA channels: arguments, the 8 a process may hold, stale handles. */
    sci_dma_channel_t ch[9];
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRequestDMAChannel(NULL, &ch[0], 0, SCI_DMA_TYPE_DONTCARE,
                                                           SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRequestDMAChannel(sd, NULL, 0, SCI_DMA_TYPE_DONTCARE,
                                                           SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRequestDMAChannel(sd, &ch[0], 0, 99, SCI_DMA_CHANNEL_ID_DONTCARE,
                                                           NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRequestDMAChannel(sd, &ch[0], 0, SCI_DMA_TYPE_DONTCARE, 8, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCIRequestDMAChannel(sd, &ch[0], 1, SCI_DMA_TYPE_DONTCARE,
                                                           SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRequestDMAChannel(sd, &ch[0], 0, SCI_DMA_TYPE_DONTCARE,
                                                      SCI_DMA_CHANNEL_ID_DONTCARE, BAD_FLAG, &err));
    for (int i = 0; i < 8; i++)
        EXPECT(SCI_ERR_OK, SCIRequestDMAChannel(sd, &ch[i], 0, SCI_DMA_TYPE_GLOBAL, SCI_DMA_CHANNEL_ID_DONTCARE,
                                                NO_FLAGS, &err));
    EXPECT(SCI_ERR_NOSPC, SCIRequestDMAChannel(sd, &ch[8], 0, SCI_DMA_TYPE_GLOBAL, SCI_DMA_CHANNEL_ID_DONTCARE,
                                               NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIAssignDMAChannel(ch[0], (sci_dma_queue_t)sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIAssignDMAChannel((sci_dma_channel_t)q, q, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIAssignDMAChannel(ch[0], q, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIAssignDMAChannel(ch[0], q, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIPrepareLocalSegmentForDMA(ch[0], NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIPrepareRemoteSegmentForDMA(ch[0], NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIUnprepareLocalSegmentForDMA(NULL, NULL, NO_FLAGS, &err));
    for (int i = 0; i < 8; i++)
        EXPECT(SCI_ERR_OK, SCIReturnDMAChannel(ch[i], &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIReturnDMAChannel(ch[0], &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIReturnDMAChannel(NULL, &err));

    EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(q, NO_FLAGS, &err));
    /* A removed queue's handle is stale. */
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ERROR);
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRemoveDMAQueue(q, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIWaitForDMAQueue(q, 0, NO_FLAGS, &err));
    /* The adapter says it has DMA, and its alignment. */
    unsigned int v = 0;
    sci_query_adapter_t qa = { .localAdapterNo = 0, .subcommand = SCI_Q_ADAPTER_DMA_AVAILABLE,
                               .data = &v };
    EXPECT(SCI_ERR_OK, SCIQuery(SCI_Q_ADAPTER, &qa, NO_FLAGS, &err));
    CHECK_EQ(v, 1);
    qa.subcommand = SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT;
    EXPECT(SCI_ERR_OK, SCIQuery(SCI_Q_ADAPTER, &qa, NO_FLAGS, &err));
    CHECK_EQ(v, 1);
    qa.subcommand = SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT;
    EXPECT(SCI_ERR_OK, SCIQuery(SCI_Q_ADAPTER, &qa, NO_FLAGS, &err));
    CHECK_EQ(v, 1);
    /* SCIClose with a queue still there. */
    close_sd(sd);
    printf("queue calls ok\n");
}

/* Every argument error of the start calls; none of them changes the
 * queue's state or moves a byte. */
static void bad_args_b(struct peer *p)
{
    unsigned int node = (unsigned int)peer_recv(p);
    sci_error_t err;
    struct ctx c;
    ctx_open(&c, 0x6d03, 8 * MIB, node, TSEG);
    sci_dma_queue_t q = make_queue(&c, 2);
    fill_remote(&c, 0, 4096, 90);
    memset((void *)c.l, 0xee, 4096);
    size_t L = c.lsize, R = c.rsize;

    /* Handles. */
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransfer(NULL, c.ls, c.rs, 0, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransfer(q, NULL, c.rs, 0, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransfer(q, c.ls, NULL, 0, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransfer(q, (sci_local_segment_t)c.rs,
                                      (sci_remote_segment_t)c.ls, 0, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransfer((sci_dma_queue_t)c.ls, c.ls, c.rs, 0, 8, 0, NULL, NULL, NO_FLAGS, &err));
    /* Flags. */
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIStartDmaTransfer(q, c.ls, c.rs, 0, 8, 0, NULL, NULL, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransfer(q, c.ls, c.rs, 0, 8, 0, NULL, NULL,
                                                          SCI_FLAG_USE_CALLBACK, &err));
    /* Sizes and offsets. */
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransfer(q, c.ls, c.rs, 0, 0, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIStartDmaTransfer(q, c.ls, c.rs, 0, R + 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIStartDmaTransfer(q, c.ls, c.rs, L - 8, 16, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIStartDmaTransfer(q, c.ls, c.rs, 0, 16, R - 8, NULL, NULL, SCI_FLAG_DMA_READ, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIStartDmaTransfer(q, c.ls, c.rs, L, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIStartDmaTransfer(q, c.ls, c.rs, 8, (size_t)-8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIStartDmaTransfer(q, c.ls, c.rs, (size_t)-8, 16, 0, NULL, NULL, NO_FLAGS, &err));
    /* Any size and offset is fine (alignment 1): t_compat moves single bytes. */
    /* Program memory. */
    char buf[64];
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransferMem(q, NULL, c.rs, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransferMem(q, buf, NULL, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIStartDmaTransferMem(q, buf, c.rs, 16, R - 8, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransferMem(q, buf, c.rs, 0, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIStartDmaTransferMem(q, buf, c.rs, 8, 0, NULL, NULL, BAD_FLAG, &err));
    /* Vectors. */
    dis_dma_vec_t v[3] = {
        { .size = 4096, .local_offset = 0, .remote_offset = 0, .flags = 0 },
        { .size = 4096, .local_offset = 4096, .remote_offset = R - 4096, .flags = 0 },
        { .size = 4096, .local_offset = 8192, .remote_offset = 8192, .flags = 0 },
    };
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransferVec(q, c.ls, c.rs, 2, NULL, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransferVec(q, c.ls, c.rs, 0, v, NULL, NULL, NO_FLAGS, &err));
    /* Vectors of up to DIS_DMA_MAX_VECLEN pieces run on any queue (this
     * one has maxEntries 2); longer ones do not. */
    EXPECT(SCI_ERR_MAX_ENTRIES, SCIStartDmaTransferVec(q, c.ls, c.rs, DIS_DMA_MAX_VECLEN + 1, v, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_MAX_ENTRIES, SCIStartDmaTransferVec(q, c.ls, c.rs, (size_t)-1, v, NULL, NULL, NO_FLAGS, &err));
    v[1].remote_offset = R - 4088;          /* second entry reaches past the end */
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIStartDmaTransferVec(q, c.ls, c.rs, 2, v, NULL, NULL, NO_FLAGS, &err));
    v[1].remote_offset = R - 4096;
    v[1].size = 0;
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIStartDmaTransferVec(q, c.ls, c.rs, 2, v, NULL, NULL, NO_FLAGS, &err));
    v[1].size = 4096;
    v[1].flags = SCI_FLAG_DMA_READ;
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIStartDmaTransferVec(q, c.ls, c.rs, 2, v, NULL, NULL, NO_FLAGS, &err));
    v[1].flags = 0;

    /* Nothing happened. */
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_IDLE);
    for (size_t i = 0; i < 4096; i++)
        CHECK_EQ(c.l[i], 0xee);
    check_remote(&c, 0, 4096, 90, "after bad calls");
    /* And the queue still works. */
    v[0].local_offset = 0;
    EXPECT(SCI_ERR_OK, SCIStartDmaTransferVec(q, c.ls, c.rs, 2, v, NULL, NULL,
                                              SCI_FLAG_DMA_READ | SCI_FLAG_DMA_WAIT, &err));
    check_local(&c, 0, 4096, 90, "read after bad calls");
    remove_queue(q);
    ctx_close(&c);
    printf("bad args ok\n");
    peer_send(p, 1);
}

/* ---- long transfers: busy, abort, timeouts, sleeping waiters, loss ---------- */

#define LSEG_SIZE (64 * MIB)
#define LONG_ENTRIES 512     /* 512 x 64 MiB = 32 GiB: seconds of copying */

/* Start a transfer that takes seconds: the same 64 MiB, many times. */
static void start_long(struct ctx *c, sci_dma_queue_t q, sci_cb_dma_t cb, void *arg,
                       unsigned int flags)
{
    sci_error_t err;
    static dis_dma_vec_t v[LONG_ENTRIES];
    for (int i = 0; i < LONG_ENTRIES; i++) {
        v[i].size = LSEG_SIZE;
        v[i].local_offset = 0;
        v[i].remote_offset = 0;
        v[i].flags = 0;
    }
    EXPECT(SCI_ERR_OK, SCIStartDmaTransferVec(q, c->ls, c->rs, LONG_ENTRIES, v, cb, arg, flags, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_POSTED);
}

static void long_owner_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, TSEG + 1, LSEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    peer_send(p, node);
    /* 1: B is done; 2: B wants the segment gone now. */
    if (peer_recv(p) == 2) {
        EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
        peer_recv(p);
    } else {
        EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    }
    close_sd(sd);
}

static void long_open(struct peer *p, struct ctx *c, unsigned int lseg)
{
    unsigned int node = (unsigned int)peer_recv(p);
    ctx_open(c, lseg, LSEG_SIZE, node, TSEG + 1);
}

struct waiter {
    sci_dma_queue_t q;
    pid_t tid;
    atomic_int started;
    sci_dma_queue_state_t st;
    sci_error_t err;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    w->tid = my_tid();
    atomic_store(&w->started, 1);
    w->st = SCIWaitForDMAQueue(w->q, SCI_INFINITE_TIMEOUT, NO_FLAGS, &w->err);
    return NULL;
}

static atomic_int abort_cb_calls;
static atomic_int abort_cb_status;

static sci_callback_action_t abort_cb(void *arg, sci_dma_queue_t queue, sci_error_t status)
{
    (void)arg;
    (void)queue;
    atomic_store(&abort_cb_status, (int)status);
    atomic_fetch_add(&abort_cb_calls, 1);
    return SCI_CALLBACK_CONTINUE;
}

/* One transfer per queue; timeouts; a blocked waiter sleeps and wakes on
 * abort with SCI_ERR_CANCELLED; the queue is reusable; remove is refused
 * while a transfer is in flight; abort reaches callbacks. */
static void busy_abort_b(struct peer *p)
{
    sci_error_t err;
    struct ctx c;
    long_open(p, &c, 0x6d04);
    setenv("VSCI_DMA_WAIT", "block", 1);
    sci_dma_queue_t q = make_queue(&c, LONG_ENTRIES);
    unsetenv("VSCI_DMA_WAIT");

    start_long(&c, q, NULL, NULL, NO_FLAGS);
    EXPECT(SCI_ERR_BUSY, SCIStartDmaTransfer(q, c.ls, c.rs, 0, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_BUSY, SCIStartDmaTransfer(q, c.ls, c.rs, 0, 8, 0, NULL, NULL, SCI_FLAG_DMA_WAIT, &err));
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIRemoveDMAQueue(q, NO_FLAGS, &err));
    sci_dma_queue_state_t st;
    EXPECT(SCI_ERR_TIMEOUT, st = SCIWaitForDMAQueue(q, 50, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_DMAQUEUE_POSTED);
    EXPECT(SCI_ERR_TIMEOUT, st = SCIWaitForDMAQueue(q, 0, NO_FLAGS, &err));

    /* A waiter blocked in SCIWaitForDMAQueue sleeps (block mode) ... */
    struct waiter w = { .q = q, .err = ERR_SENTINEL };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, waiter_main, &w) == 0);
    WAIT_UNTIL(atomic_load(&w.started), 5000);
    wait_thread_asleep(w.tid, 5000);
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_POSTED);
    /* ... and wakes when the transfer is aborted. */
    uint64_t t0 = now_ms();
    EXPECT(SCI_ERR_OK, SCIAbortDMAQueue(q, NO_FLAGS, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ABORTED);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_ERR(w.err, SCI_ERR_CANCELLED);
    CHECK_EQ(w.st, SCI_DMAQUEUE_ABORTED);
    printf("abort took %llu ms\n", (unsigned long long)(now_ms() - t0));
    EXPECT(SCI_ERR_CANCELLED, st = SCIWaitForDMAQueue(q, 0, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_DMAQUEUE_ABORTED);

    /* The queue takes the next transfer. */
    fill_local(&c, 0, MIB, 95);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c.ls, c.rs, 0, MIB, 0, NULL, NULL, NO_FLAGS, &err));
    wait_done(q);
    check_remote(&c, 0, MIB, 95, "after abort");

    /* Abort reaches a callback, with SCI_ERR_CANCELLED, once; waiting on a
     * transfer that reports by callback is refused. */
    start_long(&c, q, abort_cb, NULL, SCI_FLAG_USE_CALLBACK);
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIWaitForDMAQueue(q, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIAbortDMAQueue(q, NO_FLAGS, &err));
    WAIT_UNTIL(atomic_load(&abort_cb_calls) == 1, 5000);
    CHECK_ERR((sci_error_t)atomic_load(&abort_cb_status), SCI_ERR_CANCELLED);
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ABORTED);

    /* SCI_FLAG_FORCE_REMOVE removes a queue with a transfer in flight: it
     * is aborted first. */
    start_long(&c, q, NULL, NULL, NO_FLAGS);
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRemoveDMAQueue(q, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(q, SCI_FLAG_FORCE_REMOVE, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ERROR);   /* stale handle */

    ctx_close(&c);
    peer_send(p, 1);
    printf("busy/abort ok\n");
}

struct aborter {
    sci_dma_queue_t q;
    atomic_int go;
};

static void *aborter_main(void *arg)
{
    struct aborter *a = arg;
    while (!atomic_load(&a->go))
        sleep_ms(1);
    sleep_ms(100);
    sci_error_t err;
    SCIAbortDMAQueue(a->q, NO_FLAGS, &err);
    return NULL;
}

/* A SCI_FLAG_DMA_WAIT transfer is aborted from another thread: the call
 * returns SCI_ERR_CANCELLED. */
static void abort_wait_flag_b(struct peer *p)
{
    sci_error_t err;
    struct ctx c;
    long_open(p, &c, 0x6d05);
    sci_dma_queue_t q = make_queue(&c, LONG_ENTRIES);
    struct aborter a = { .q = q };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, aborter_main, &a) == 0);
    atomic_store(&a.go, 1);
    static dis_dma_vec_t v[LONG_ENTRIES];
    for (int i = 0; i < LONG_ENTRIES; i++)
        v[i] = (dis_dma_vec_t){ .size = LSEG_SIZE };
    EXPECT(SCI_ERR_CANCELLED, SCIStartDmaTransferVec(q, c.ls, c.rs, LONG_ENTRIES, v, NULL, NULL,
                                                     SCI_FLAG_DMA_WAIT, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ABORTED);
    CHECK(pthread_join(th, NULL) == 0);
    remove_queue(q);
    ctx_close(&c);
    peer_send(p, 1);
}

/* The owner removes the target while a transfer to it runs: the transfer
 * ends in ERROR with SCI_ERR_TRANSFER_FAILED, and a new one is refused. */
static void lost_b(struct peer *p)
{
    sci_error_t err;
    struct ctx c;
    long_open(p, &c, 0x6d06);
    sci_dma_queue_t q = make_queue(&c, LONG_ENTRIES);
    start_long(&c, q, NULL, NULL, NO_FLAGS);
    peer_send(p, 2);                          /* remove it now */
    sci_dma_queue_state_t st;
    EXPECT(SCI_ERR_TRANSFER_FAILED, st = SCIWaitForDMAQueue(q, WAIT_LONG, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_DMAQUEUE_ERROR);
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ERROR);
    EXPECT(SCI_ERR_TRANSFER_FAILED, st = SCIWaitForDMAQueue(q, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_SEGMENT_NOT_CONNECTED,
           SCIStartDmaTransfer(q, c.ls, c.rs, 0, 8, 0, NULL, NULL, NO_FLAGS, &err));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ERROR);
    remove_queue(q);
    ctx_close(&c);
    peer_send(p, 1);
    printf("lost ok\n");
}

/* SCIClose with a transfer in flight returns promptly (the transfer is
 * aborted). */
static void close_in_flight_b(struct peer *p)
{
    struct ctx c;
    long_open(p, &c, 0x6d07);
    sci_dma_queue_t q = make_queue(&c, LONG_ENTRIES);
    start_long(&c, q, NULL, NULL, NO_FLAGS);
    uint64_t t0 = now_ms();
    close_sd(c.sd);
    CHECK_MSG(now_ms() - t0 < 5000, "SCIClose took %llu ms", (unsigned long long)(now_ms() - t0));
    CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ERROR); /* the handle went with the descriptor */
    peer_send(p, 1);
}

/* A process killed with a transfer in flight: its node cleans up (checked by
 * the harness) and the owner's segment is still removable. */
static void killed_in_flight_b(struct peer *p)
{
    struct ctx c;
    long_open(p, &c, 0x6d08);
    sci_dma_queue_t q = make_queue(&c, LONG_ENTRIES);
    start_long(&c, q, NULL, NULL, NO_FLAGS);
    peer_send(p, 1);
    kill(getpid(), SIGKILL);
}

/* A process connected to its own segment: overlapping transfers move bytes
 * like memmove, in both directions. */
static void self_overlap(struct peer *p)
{
    (void)p;
    sci_error_t err;
    struct ctx c;
    unsigned int node;
    sci_desc_t sd0 = open_sd(&node);
    sci_local_segment_t t;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd0, &t, 0x6d09, 8 * MIB, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(t, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(t, 0, NO_FLAGS, &err));
    ctx_open(&c, 0x6d0a, 8 * MIB, node, 0x6d09);
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(c.ls, 0, NO_FLAGS, &err));
    /* Same memory on both sides: the target is the local segment itself. */
    sci_remote_segment_t self;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(c.sd, &self, node, 0x6d0a, 0, NULL, NULL, 0, NO_FLAGS, &err));
    sci_dma_queue_t q = make_queue(&c, 1);
    size_t n = 3 * MIB + 64;
    fill_local(&c, 0, n, 99);
    /* Forward overlap (target above source): copy [0, n) to [MIB/2, ...). */
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c.ls, self, 0, n, MIB / 2, NULL, NULL, SCI_FLAG_DMA_WAIT, &err));
    check_local(&c, MIB / 2, n, 99, "overlap up");
    /* Backward overlap with DMA_READ: bring it back down. */
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c.ls, self, 0, n, MIB / 2, NULL, NULL,
                                           SCI_FLAG_DMA_READ | SCI_FLAG_DMA_WAIT, &err));
    check_local(&c, 0, n, 99, "overlap down");
    remove_queue(q);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(self, NO_FLAGS, &err));
    ctx_close(&c);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(t, NO_FLAGS, &err));
    close_sd(sd0);
    printf("self overlap ok\n");
}

static const struct test_case cases[] = {
    { "queue_calls", queue_calls, NULL, 0 },
    { "data", owner_a, data_b, 0 },
    { "bad_args", owner_a, bad_args_b, 0 },
    { "busy_abort_waiters", long_owner_a, busy_abort_b, 0 },
    { "abort_dma_wait", long_owner_a, abort_wait_flag_b, 0 },
    { "segment_lost_mid_transfer", long_owner_a, lost_b, 0 },
    { "close_in_flight", long_owner_a, close_in_flight_b, 0 },
    { "killed_in_flight", long_owner_a, killed_in_flight_b, 1 },
    { "self_overlap", self_overlap, NULL, 0 },
    { NULL, NULL, NULL, 0 },
};

/* ---- remote mode ------------------------------------------------------------ */

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static int owner_main(unsigned int segid, size_t size)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    sci_map_t map;
    volatile unsigned char *base;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, segid, size, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, base = SCIMapLocalSegment(seg, &map, 0, size, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    printf("OWNER READY node=%u seg=%u size=%zu\n", node, segid, size);
    fflush(stdout);
    while (!stop)
        sleep_ms(5);
    printf("OWNER CRC crc=%08x\n", crc32_buf(base, size));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
    printf("OWNER DONE\n");
    return 0;
}

static int client_main(unsigned int node, unsigned int segid, size_t size)
{
    sci_error_t err;
    struct ctx c;
    ctx_open(&c, 0x6e01, 8 * MIB, node, segid);
    CHECK_EQ(c.rsize, size);
    data_suite(&c);
    /* The owner checks the last pattern itself. */
    fill_local(&c, 0, c.rsize, 123);
    sci_dma_queue_t q = make_queue(&c, 1);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, c.ls, c.rs, 0, c.rsize, 0, NULL, NULL,
                                           SCI_FLAG_DMA_WAIT, &err));
    remove_queue(q);
    uint32_t crc = crc32_buf(c.l, c.rsize);
    ctx_close(&c);
    printf("CLIENT DONE crc=%08x\n", crc);
    return 0;
}

static int stream_main(unsigned int node, unsigned int segid, size_t size)
{
    sci_error_t err;
    struct ctx c;
    ctx_open(&c, 0x6e02, size, node, segid);
    sci_dma_queue_t q = make_queue(&c, 1);
    fill_local(&c, 0, size, 7);
    unsigned rounds = 0;
    uint64_t t0 = now_ms();
    sci_dma_queue_state_t st;
    for (;;) {
        unsigned int dir = rounds & 1 ? SCI_FLAG_DMA_READ : NO_FLAGS;
        err = ERR_SENTINEL;
        SCIStartDmaTransfer(q, c.ls, c.rs, 0, size, 0, NULL, NULL, dir, &err);
        if (err != SCI_ERR_OK) {
            /* Refused at the start: the segment is already known lost. */
            CHECK_ERR(err, SCI_ERR_SEGMENT_NOT_CONNECTED);
            st = SCIDMAQueueState(q);
            break;
        }
        err = ERR_SENTINEL;
        st = SCIWaitForDMAQueue(q, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
        if (err != SCI_ERR_OK) {
            CHECK_EQ(st, SCI_DMAQUEUE_ERROR);
            CHECK_EQ(SCIDMAQueueState(q), SCI_DMAQUEUE_ERROR);
            CHECK(err != ERR_SENTINEL);
            break;
        }
        CHECK_EQ(st, SCI_DMAQUEUE_DONE);
        if (rounds++ == 0) {
            printf("STREAMING\n");
            fflush(stdout);
        }
        CHECK_MSG(now_ms() - t0 < 120000, "still streaming after 120 s");
    }
    printf("STREAM FAILED state=%d err=%s after %u rounds\n", (int)st, err_name(err), rounds);
    /* Releasing everything must not hang; errors are not judged. */
    SCIRemoveDMAQueue(q, NO_FLAGS, &err);
    SCIUnmapSegment(c.rmap, NO_FLAGS, &err);
    SCIDisconnectSegment(c.rs, NO_FLAGS, &err);
    SCIUnmapSegment(c.lmap, NO_FLAGS, &err);
    SCIRemoveSegment(c.ls, NO_FLAGS, &err);
    SCIClose(c.sd, NO_FLAGS, &err);
    printf("STREAM DONE\n");
    return 0;
}

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end == 'k' || *end == 'K')
        v <<= 10;
    else if (*end == 'm' || *end == 'M')
        v <<= 20;
    return (size_t)v;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "owner") == 0) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        return owner_main((unsigned)strtoul(argv[2], NULL, 0), parse_size(argv[3]));
    }
    if (argc >= 5 && (strcmp(argv[1], "client") == 0 || strcmp(argv[1], "stream") == 0)) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        alarm(ROLE_TIMEOUT_S * 2);
        unsigned node = (unsigned)strtoul(argv[2], NULL, 0);
        unsigned seg = (unsigned)strtoul(argv[3], NULL, 0);
        size_t size = parse_size(argv[4]);
        return argv[1][0] == 'c' ? client_main(node, seg, size) : stream_main(node, seg, size);
    }
    return proc_main(argc, argv, cases);
}
