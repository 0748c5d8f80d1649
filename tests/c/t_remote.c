/*
 * t_remote.c - roles for the cluster system tests
 * (crates/vsci-systest/tests/cluster.rs).  Each role is one process on one
 * node of a cluster (VSCI_SOCKET names its node); the harness starts them in
 * the nodes' network namespaces, reads their lines, cuts links or kills
 * nodes, and checks the outcome.  Every role exits 1 with a file:line
 * message on any unexpected result, 0 otherwise.
 *
 * The owner's segment layout (SIZE >= 3 pages):
 *   page 0  written by the owner only: magic, owner node, interrupt and data
 *           interrupt numbers, the last verified round and its verdict;
 *   page 1  written by writers only: round number and writer node;
 *   page 2. the data area, filled by a writer with pattern(i, node, round).
 *
 *   t_remote owner SEG SIZE
 *       creates segment SEG of SIZE bytes, an interrupt and a data
 *       interrupt, prints "OWNER READY ...", then verifies every round a
 *       writer announces in page 1 (checksum of the data area in local
 *       memory), prints "OWNER VERIFIED round=R writer=N bytes=B crc=C" and
 *       answers in page 0.  Ends cleanly on SIGTERM ("OWNER DONE").
 *   t_remote write [-retry MS] [-whole] NODE:SEG [NODE:SEG ...]
 *       connects to every listed owner segment at once (with -retry: tries
 *       again every 200 ms for up to MS ms, printing each failure), maps it
 *       (page 0, page 1 and the data area apart, or with -whole as one map),
 *       fills the data area with plain stores, announces the round, waits for
 *       each owner's verdict through a remote load of page 0, reads the whole
 *       data area back with SCIMemCpy(SCI_FLAG_BLOCK_READ) and compares it,
 *       then releases everything.  Prints "WRITE OK node=N seg=S crc=C" per
 *       owner and "WRITER DONE".
 *   t_remote observe NODE SEG [flush|noflush]
 *       connects to an owner's segment, its interrupt and data interrupt,
 *       prints "OBSERVER READY", then keeps storing into the data area (with
 *       `flush`, the default, also calling SCIFlush every 16th store) while
 *       polling for a segment event.  SCI_CB_NOT_OPERATIONAL and
 *       SCI_CB_OPERATIONAL (the link dropped, or came back) are printed
 *       and skipped; the next event
 *       must be SCI_CB_LOST with status SCI_ERR_NODE_NOT_RESPONDING
 *       ("OBSERVER GOT LOST ...") and SCIFlush must then return.  Then triggers to the owner's interrupts
 *       must fail with SCI_ERR_NOT_CONNECTED, and new connects to the node
 *       (segment and interrupt, 2 s timeout) with
 *       SCI_ERR_NODE_NOT_RESPONDING.  Releasing must not hang; its errors are
 *       printed, not judged.  "OBSERVER DONE".  A watchdog ends the role
 *       after 60 s naming the call it is stuck in.
 *   t_remote connect-fail NODE SEG TIMEOUT_MS
 *       SCIConnectSegment(NODE, SEG, TIMEOUT_MS) must fail (any error);
 *       prints "CONNECT FAILED err=NAME after MS ms".
 */
#include <signal.h>

#include "common/proc.h"

#define OWNER_MAGIC 0x4f574e52u          /* "OWNR" */
#define PAGE 4096u
#define WAIT_LONG 60000u

struct owner_page {                        /* page 0: the owner writes */
    volatile uint32_t magic;
    volatile uint32_t node;
    volatile uint32_t intno;
    volatile uint32_t dintno;
    volatile uint32_t verified_round;      /* last round checked */
    volatile uint32_t verdict;             /* 1 = good, 2 = bad */
    volatile uint32_t crc;                 /* of the data area */
    volatile uint32_t bad_offset;
};

struct writer_page {                       /* page 1: writers write */
    volatile uint32_t round;
    volatile uint32_t writer;
};

static inline unsigned char pattern(size_t i, uint32_t node, uint32_t round)
{
    return (unsigned char)(i * 131u + node * 17u + round * 7u + (i >> 9) + (i >> 17));
}

/* CRC-32 (IEEE), bitwise; fast enough for a few MiB. */
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

static uint32_t crc32_pattern(size_t n, uint32_t node, uint32_t round)
{
    unsigned char *b = malloc(n);
    CHECK(b != NULL);
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(i, node, round);
    uint32_t c = crc32_buf(b, n);
    free(b);
    return c;
}

/* ---- owner ----------------------------------------------------------------- */

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static int owner(unsigned int segid, size_t size)
{
    sci_error_t err;
    unsigned int node;
    CHECK_MSG(size >= 3 * PAGE, "SIZE must be at least %u", 3 * PAGE);
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    sci_map_t map;
    sci_local_interrupt_t li;
    sci_local_data_interrupt_t ldi;
    unsigned int no = 0, dno = 0;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &ldi, 0, &dno, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, segid, size, NULL, NULL, NO_FLAGS, &err));
    volatile unsigned char *base;
    EXPECT(SCI_ERR_OK, base = SCIMapLocalSegment(seg, &map, 0, size, NULL, NO_FLAGS, &err));
    struct owner_page *op = (struct owner_page *)base;
    struct writer_page *wp = (struct writer_page *)(base + PAGE);
    const volatile unsigned char *data = base + 2 * PAGE;
    size_t dsize = size - 2 * PAGE;
    op->node = node;
    op->intno = no;
    op->dintno = dno;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    op->magic = OWNER_MAGIC;
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    printf("OWNER READY node=%u seg=%u size=%zu intno=%u dintno=%u\n", node, segid, size, no,
           dno);
    fflush(stdout);

    uint32_t done = 0;
    while (!stop) {
        uint32_t r = wp->round;
        if (r == done || r == 0) {
            sleep_ms(1);
            continue;
        }
        uint32_t writer = wp->writer;
        uint32_t want = crc32_pattern(dsize, writer, r);
        uint32_t got = crc32_buf(data, dsize);
        uint32_t bad = 0;
        if (got != want) {
            for (size_t i = 0; i < dsize; i++)
                if (data[i] != pattern(i, writer, r)) {
                    bad = (uint32_t)i;
                    break;
                }
        }
        op->crc = got;
        op->bad_offset = bad;
        op->verdict = got == want ? 1 : 2;
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        op->verified_round = r;
        done = r;
        if (got == want) {
            printf("OWNER VERIFIED round=%u writer=%u bytes=%zu crc=%08x\n", r, writer, dsize,
                   got);
        } else {
            printf("OWNER BAD round=%u writer=%u: byte %u is 0x%02x, expected 0x%02x "
                   "(crc %08x, expected %08x)\n",
                   r, writer, bad, data[bad], pattern(bad, writer, r), got, want);
        }
        fflush(stdout);
    }

    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(ldi, NO_FLAGS, &err));
    close_sd(sd);
    printf("OWNER DONE\n");
    return 0;
}

/* ---- writer ---------------------------------------------------------------- */

struct target {
    unsigned int node, segid;
    sci_remote_segment_t rs;
    sci_map_t omap, wmap, dmap;
    size_t woff, doff;      /* offsets of page 1 and the data in wmap, dmap */
    int whole;              /* one map of the whole segment (omap) */
    struct owner_page *op;
    struct writer_page *wp;
    volatile unsigned char *data;
    size_t dsize;
    uint32_t round, crc;
};

static void parse_target(const char *s, struct target *t)
{
    char *end;
    t->node = (unsigned int)strtoul(s, &end, 0);
    if (*end != ':') {
        fprintf(stderr, "t_remote: target \"%s\" is not NODE:SEG\n", s);
        exit(2);
    }
    t->segid = (unsigned int)strtoul(end + 1, NULL, 0);
}

static void connect_target(sci_desc_t sd, struct target *t, unsigned int retry_ms, int whole)
{
    sci_error_t err;
    uint64_t t0 = now_ms();
    for (unsigned attempt = 1;; attempt++) {
        err = ERR_SENTINEL;
        uint64_t a = now_ms();
        SCIConnectSegment(sd, &t->rs, t->node, t->segid, 0, NULL, NULL,
                          retry_ms ? 1000 : 30000, NO_FLAGS, &err);
        if (err == SCI_ERR_OK) {
            printf("CONNECTED node=%u seg=%u after %u attempt(s)\n", t->node, t->segid,
                   attempt);
            break;
        }
        printf("connect attempt %u to node %u seg %u: %s after %" PRIu64 " ms\n", attempt,
               t->node, t->segid, err_name(err), now_ms() - a);
        fflush(stdout);
        if (!retry_ms || now_ms() - t0 > retry_ms)
            FAILF("SCIConnectSegment(node %u, segment %u) kept failing: %s", t->node, t->segid,
                  err_name(err));
        sleep_ms(200);
    }
    size_t size = SCIGetRemoteSegmentSize(t->rs);
    CHECK_MSG(size >= 3 * PAGE, "segment %u on node %u has %zu bytes", t->segid, t->node, size);
    t->dsize = size - 2 * PAGE;
    t->whole = whole;
    if (whole) {
        /* One map: the owner's answers are then polled through a map as
         * large as the segment. */
        volatile unsigned char *base;
        EXPECT(SCI_ERR_OK, base = SCIMapRemoteSegment(t->rs, &t->omap, 0, size, NULL, NO_FLAGS,
                                                      &err));
        t->op = (struct owner_page *)base;
        t->wp = (struct writer_page *)(base + PAGE);
        t->data = base + 2 * PAGE;
        t->wmap = t->dmap = t->omap;
        t->woff = PAGE;
        t->doff = 2 * PAGE;
        return;
    }
    t->woff = t->doff = 0;
    EXPECT(SCI_ERR_OK, t->op = (struct owner_page *)SCIMapRemoteSegment(t->rs, &t->omap, 0, PAGE,
                                                                         NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, t->wp = (struct writer_page *)SCIMapRemoteSegment(
                           t->rs, &t->wmap, PAGE, PAGE, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, t->data = SCIMapRemoteSegment(t->rs, &t->dmap, 2 * PAGE, t->dsize, NULL,
                                                     NO_FLAGS, &err));
}

static int writer(int argc, char **argv)
{
    sci_error_t err;
    unsigned int node, retry_ms = 0;
    int i = 2, whole = 0;
    for (;;) {
        if (i + 1 < argc && strcmp(argv[i], "-retry") == 0) {
            retry_ms = (unsigned int)strtoul(argv[i + 1], NULL, 0);
            i += 2;
        } else if (i < argc && strcmp(argv[i], "-whole") == 0) {
            whole = 1;
            i++;
        } else {
            break;
        }
    }
    int n = argc - i;
    if (n < 1) {
        fprintf(stderr, "usage: t_remote write [-retry MS] [-whole] NODE:SEG [NODE:SEG ...]\n");
        return 2;
    }
    struct target *t = calloc((size_t)n, sizeof *t);
    CHECK(t != NULL);
    sci_desc_t sd = open_sd(&node);
    for (int k = 0; k < n; k++) {
        parse_target(argv[i + k], &t[k]);
        connect_target(sd, &t[k], retry_ms, whole);
    }
    /* The owners' headers, through remote loads. */
    for (int k = 0; k < n; k++) {
        WAIT_UNTIL(t[k].op->magic == OWNER_MAGIC, WAIT_LONG);
        CHECK_EQ(t[k].op->node, t[k].node);
    }
    /* Read the round counters fresh, then fill every data area with plain stores. */
    for (int k = 0; k < n; k++) {
        struct writer_page w;
        EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, &w, t[k].wmap, t[k].woff, sizeof w, SCI_FLAG_BLOCK_READ, &err));
        t[k].round = w.round + 1;
        for (size_t b = 0; b < t[k].dsize; b++)
            t[k].data[b] = pattern(b, node, t[k].round);
        t[k].crc = crc32_pattern(t[k].dsize, node, t[k].round);
    }
    for (int k = 0; k < n; k++)
        t[k].wp->writer = node;
    /* Data (and who wrote it) before the announcement. */
    SCIStoreBarrier(NULL, NO_FLAGS);
    for (int k = 0; k < n; k++)
        t[k].wp->round = t[k].round;
    SCIFlush(NULL, NO_FLAGS);
    /* Each owner answers in its page 0; we see it through remote loads. */
    for (int k = 0; k < n; k++) {
        WAIT_UNTIL(t[k].op->verified_round == t[k].round, WAIT_LONG);
        CHECK_MSG(t[k].op->verdict == 1,
                  "node %u found byte %u of the data area wrong (crc %08x, expected %08x)",
                  t[k].node, t[k].op->bad_offset, t[k].op->crc, t[k].crc);
        CHECK_EQ(t[k].op->crc, t[k].crc);
    }
    /* Read everything back fresh and compare. */
    for (int k = 0; k < n; k++) {
        unsigned char *back = malloc(t[k].dsize);
        CHECK(back != NULL);
        memset(back, 0, t[k].dsize);
        EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, back, t[k].dmap, t[k].doff, t[k].dsize, SCI_FLAG_BLOCK_READ,
                                     &err));
        uint32_t c = crc32_buf(back, t[k].dsize);
        CHECK_MSG(c == t[k].crc, "read back from node %u: crc %08x, expected %08x", t[k].node,
                  c, t[k].crc);
        free(back);
        printf("WRITE OK node=%u seg=%u round=%u bytes=%zu crc=%08x\n", t[k].node, t[k].segid,
               t[k].round, t[k].dsize, c);
    }
    for (int k = 0; k < n; k++) {
        if (!t[k].whole) {
            EXPECT(SCI_ERR_OK, SCIUnmapSegment(t[k].dmap, NO_FLAGS, &err));
            EXPECT(SCI_ERR_OK, SCIUnmapSegment(t[k].wmap, NO_FLAGS, &err));
        }
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(t[k].omap, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIDisconnectSegment(t[k].rs, NO_FLAGS, &err));
    }
    close_sd(sd);
    free(t);
    printf("WRITER DONE\n");
    return 0;
}

/* ---- observer --------------------------------------------------------------- */

/* What the observer is doing, for the watchdog's message. */
static const char *volatile phase = "starting";
#define PHASE(s) (phase = (s))

static void on_alarm(int sig)
{
    (void)sig;
    const char *p = phase;
    char msg[256];
    size_t n = 0;
    const char *parts[] = { "t_remote: watchdog: still in ", p, " -- giving up\n" };
    for (size_t k = 0; k < 3; k++)
        for (const char *c = parts[k]; *c && n < sizeof msg; c++)
            msg[n++] = *c;
    ssize_t w = write(2, msg, n);
    (void)w;
    _exit(3);
}

static int observe(unsigned int owner_node, unsigned int segid, int flush)
{
    sci_error_t err, status;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs;
    sci_map_t omap, dmap;
    sci_remote_interrupt_t ri;
    sci_remote_data_interrupt_t rdi;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, owner_node, segid, 0, NULL, NULL, 30000,
                                         NO_FLAGS, &err));
    struct owner_page *op;
    EXPECT(SCI_ERR_OK, op = (struct owner_page *)SCIMapRemoteSegment(rs, &omap, 0, PAGE, NULL,
                                                                      NO_FLAGS, &err));
    volatile uint32_t *d;
    EXPECT(SCI_ERR_OK, d = (volatile uint32_t *)SCIMapRemoteSegment(rs, &dmap, 2 * PAGE, PAGE,
                                                                     NULL, NO_FLAGS, &err));
    WAIT_UNTIL(op->magic == OWNER_MAGIC, WAIT_LONG);
    unsigned int no = op->intno, dno = op->dintno;
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, owner_node, 0, no, 30000, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(sd, &rdi, owner_node, 0, dno, 30000, NO_FLAGS,
                                               &err));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    char hello[16] = "observer";
    EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(rdi, hello, sizeof hello, NO_FLAGS, &err));
    d[0] = 1;
    SCIFlush(NULL, NO_FLAGS);
    printf("OBSERVER READY node=%u owner=%u seg=%u intno=%u dintno=%u\n", node, owner_node,
           segid, no, dno);
    fflush(stdout);

    /* Keep the connection busy until the owner's node goes away: stores
     * (shipped in the background) and, with `flush`, an SCIFlush every 16th. */
    alarm(60);
    uint64_t t0 = now_ms();
    uint32_t i = 1;
    sci_segment_cb_reason_t r;
    for (;;) {
        PHASE("plain stores into the remote map");
        d[i % 1024] = i;
        if (flush && i % 16 == 0) {
            PHASE("SCIFlush while storing (before any segment event)");
            SCIFlush(NULL, NO_FLAGS);
        }
        i++;
        status = ERR_SENTINEL;
        err = ERR_SENTINEL;
        PHASE("SCIWaitForRemoteSegmentEvent (10 ms polls; no event yet)");
        r = SCIWaitForRemoteSegmentEvent(rs, &status, 10, NO_FLAGS, &err);
        if (err == SCI_ERR_TIMEOUT)
            continue;
        CHECK_ERR(err, SCI_ERR_OK);
        /* A link that drops before its node is declared dead says so first
         * (SCI_CB_NOT_OPERATIONAL, and OPERATIONAL if it comes back). */
        if (r == SCI_CB_NOT_OPERATIONAL || r == SCI_CB_OPERATIONAL) {
            printf("OBSERVER GOT %s after %" PRIu64 " ms\n",
                   r == SCI_CB_OPERATIONAL ? "OPERATIONAL" : "NOT_OPERATIONAL", now_ms() - t0);
            fflush(stdout);
            continue;
        }
        break;
    }
    printf("OBSERVER GOT %s status=%s after %" PRIu64 " ms (%u stores)\n",
           r == SCI_CB_LOST ? "LOST" : r == SCI_CB_DISCONNECT ? "DISCONNECT" : "OTHER",
           err_name(status), now_ms() - t0, i);
    fflush(stdout);
    CHECK_MSG(r == SCI_CB_LOST, "segment event %d, want SCI_CB_LOST (%d)", (int)r,
              (int)SCI_CB_LOST);
    CHECK_ERR(status, SCI_ERR_NODE_NOT_RESPONDING);

    /* The map is still memory, and flushing it returns. */
    PHASE("a store and a load after LOST");
    d[1] = 0x1234;
    CHECK_EQ(d[1], 0x1234);
    PHASE("SCIFlush after LOST");
    SCIFlush(NULL, NO_FLAGS);
    printf("OBSERVER FLUSH AFTER LOST RETURNED\n");
    fflush(stdout);

    PHASE("SCITriggerInterrupt after LOST");
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    PHASE("SCITriggerDataInterrupt after LOST");
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerDataInterrupt(rdi, hello, sizeof hello, NO_FLAGS,
                                                          &err));
    printf("OBSERVER TRIGGERS NOT_CONNECTED\n");
    fflush(stdout);

    sci_remote_segment_t rs2;
    uint64_t a = now_ms();
    PHASE("SCIConnectSegment (2 s timeout) after LOST");
    EXPECT(SCI_ERR_NODE_NOT_RESPONDING, SCIConnectSegment(sd, &rs2, owner_node, segid, 0, NULL,
                                                          NULL, 2000, NO_FLAGS, &err));
    uint64_t seg_ms = now_ms() - a;
    sci_remote_interrupt_t ri2;
    a = now_ms();
    PHASE("SCIConnectInterrupt (2 s timeout) after LOST");
    EXPECT(SCI_ERR_NODE_NOT_RESPONDING, SCIConnectInterrupt(sd, &ri2, owner_node, 0, no, 2000,
                                                            NO_FLAGS, &err));
    uint64_t intr_ms = now_ms() - a;
    printf("OBSERVER NEW CONNECTS NODE_NOT_RESPONDING segment after %" PRIu64
           " ms, interrupt after %" PRIu64 " ms\n", seg_ms, intr_ms);
    fflush(stdout);

    /* Releasing what is left must not hang; the results are reported only. */
    PHASE("releasing (disconnect, unmap) after LOST");
    err = ERR_SENTINEL;
    SCIDisconnectInterrupt(ri, NO_FLAGS, &err);
    printf("disconnect interrupt: %s\n", err_name(err));
    err = ERR_SENTINEL;
    SCIDisconnectDataInterrupt(rdi, NO_FLAGS, &err);
    printf("disconnect data interrupt: %s\n", err_name(err));
    err = ERR_SENTINEL;
    SCIUnmapSegment(dmap, NO_FLAGS, &err);
    printf("unmap data: %s\n", err_name(err));
    err = ERR_SENTINEL;
    SCIUnmapSegment(omap, NO_FLAGS, &err);
    printf("unmap header: %s\n", err_name(err));
    err = ERR_SENTINEL;
    SCIDisconnectSegment(rs, NO_FLAGS, &err);
    printf("disconnect segment: %s\n", err_name(err));
    PHASE("SCIClose after LOST");
    close_sd(sd);
    alarm(0);
    printf("OBSERVER DONE\n");
    return 0;
}

/* ---- connect-fail ---------------------------------------------------------- */

static int connect_fail(unsigned int node, unsigned int segid, unsigned int timeout)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_remote_segment_t rs;
    uint64_t a = now_ms();
    err = ERR_SENTINEL;
    SCIConnectSegment(sd, &rs, node, segid, 0, NULL, NULL, timeout, NO_FLAGS, &err);
    uint64_t ms = now_ms() - a;
    if (err == SCI_ERR_OK)
        FAILF("SCIConnectSegment(node %u, segment %u) succeeded; it must fail", node, segid);
    if (err == ERR_SENTINEL)
        FAILF("SCIConnectSegment did not set its error");
    printf("CONNECT FAILED err=%s after %" PRIu64 " ms\n", err_name(err), ms);
    close_sd(sd);
    return 0;
}

static unsigned int arg_u(int argc, char **argv, int i)
{
    if (i >= argc) {
        fprintf(stderr, "t_remote %s: missing argument %d\n", argv[1], i - 1);
        exit(2);
    }
    return (unsigned int)strtoul(argv[i], NULL, 0);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: t_remote owner SEG SIZE\n"
                        "       t_remote write [-retry MS] [-whole] NODE:SEG [NODE:SEG ...]\n"
                        "       t_remote observe NODE SEG [flush|noflush]\n"
                        "       t_remote connect-fail NODE SEG TIMEOUT_MS\n");
        return 2;
    }
    check_role = argv[1];
    /* A watchdog: no role runs for more than 5 minutes. */
    alarm(300);
    if (strcmp(argv[1], "owner") == 0)
        return owner(arg_u(argc, argv, 2), arg_u(argc, argv, 3));
    if (strcmp(argv[1], "write") == 0)
        return writer(argc, argv);
    if (strcmp(argv[1], "observe") == 0) {
        signal(SIGALRM, on_alarm);
        int flush = argc > 4 && strcmp(argv[4], "noflush") == 0 ? 0 : 1;
        return observe(arg_u(argc, argv, 2), arg_u(argc, argv, 3), flush);
    }
    if (strcmp(argv[1], "connect-fail") == 0)
        return connect_fail(arg_u(argc, argv, 2), arg_u(argc, argv, 3), arg_u(argc, argv, 4));
    fprintf(stderr, "t_remote: unknown role %s\n", argv[1]);
    return 2;
}
