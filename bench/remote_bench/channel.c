#include "remote_bench.h"

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

int g_phase = PH_SETUP;

/* A failure ends the run: the two processes share state that cannot be
 * recovered half-way.  The client still prints and writes what it has. */
void fail(const char *fmt, ...)
{
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "remote_bench %s: [%s] %s\n", opt.server ? "server" : "client",
            phase_names[g_phase], buf);
    if (!opt.server) {
        R.ran[g_phase] = 1;
        R.ok[g_phase] = 0;
        snprintf(R.err[g_phase], sizeof R.err[0], "%s", buf);
        print_results();
        printf("\n!! run aborted in \"%s\": %s\n", phase_names[g_phase], buf);
        fflush(stdout);
        if (opt.json)
            write_json(opt.json);
    }
    exit(1);
}

void *xalloc(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        fail("mmap(%zu): %s", size, strerror(errno));
    return p;
}

void phase_begin(int p)
{
    g_phase = p;
    R.ran[p] = 1;
}

void phase_end(int p)
{
    R.ok[p] = 1;
}

/* ------------------------------------------------------------------------ */
/* The two inboxes and the control channel                                  */
/* ------------------------------------------------------------------------ */

sci_desc_t g_sd;
unsigned g_node;
static sci_local_segment_t g_inbox_seg;
static sci_map_t g_inbox_lmap, g_peer_rmap;
static sci_remote_segment_t g_peer_rseg;
volatile unsigned char *g_in;       /* my inbox, local map          */
volatile unsigned char *g_out;      /* the peer's inbox, remote map */
sci_sequence_t g_peer_seq;          /* on g_peer_rmap: tells a lost connection */
static uint64_t g_ctl_sent, g_ctl_rcvd;

static sci_local_segment_t g_bw_seg;       /* server */
static sci_map_t g_bw_lmap;
volatile unsigned char *g_bw_local;

/* Control messages: a ring of CTL_SLOTS {sequence, value} slots in the
 * peer's inbox (no side sends more than a few messages before it waits for
 * an answer).  Send: value, barrier, sequence word, flush -- visible at the
 * peer when this returns. */
#define CTL_SLOTS 64u

void ctl_send(uint64_t v)
{
    uint64_t k = ++g_ctl_sent;
    volatile uint64_t *slot = (volatile uint64_t *)(g_out + CTL_OFF) + 2 * (k % CTL_SLOTS);
    slot[1] = v;
    SCIStoreBarrier(NULL, 0);
    slot[0] = k;
    SCIFlush(NULL, 0);
}

static volatile uint64_t *ctl_slot(uint64_t k)
{
    return (volatile uint64_t *)(g_in + CTL_OFF) + 2 * (k % CTL_SLOTS);
}

int ctl_ready(void)
{
    uint64_t k = g_ctl_rcvd + 1;
    return __atomic_load_n((uint64_t *)&ctl_slot(k)[0], __ATOMIC_ACQUIRE) == k;
}

uint64_t ctl_recv(void)
{
    volatile uint64_t *box = ctl_slot(g_ctl_rcvd + 1);
    uint64_t t0 = now_ns();
    uint32_t spins = 0, n = 0;
    while (!ctl_ready()) {
        if (++n < 20000) {
            spin_step(&spins);
            continue;
        }
        n = 20000;
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
        if ((double)(now_ns() - t0) / 1e9 > opt.timeout)
            fail("the %s sent nothing for %.0f s (control message %llu; its slot holds %llu)",
                 opt.server ? "client" : "server", opt.timeout,
                 (unsigned long long)(g_ctl_rcvd + 1), (unsigned long long)box[0]);
    }
    g_ctl_rcvd++;
    return box[1];
}

void ctl_expect(uint64_t want, const char *what)
{
    uint64_t got = ctl_recv();
    if (got != want)
        fail("control channel out of step at %s: got 0x%llx, expected 0x%llx", what,
             (unsigned long long)got, (unsigned long long)want);
}

sci_local_segment_t make_segment(uint32_t id, size_t size, sci_map_t *map,
                                 volatile unsigned char **addr)
{
    sci_error_t e;
    sci_local_segment_t seg;
    SCICreateSegment(g_sd, &seg, id, size, NULL, NULL, 0, &e);
    sci_check("SCICreateSegment", e);
    SCIPrepareSegment(seg, 0, 0, &e);
    sci_check("SCIPrepareSegment", e);
    *addr = SCIMapLocalSegment(seg, map, 0, size, NULL, 0, &e);
    sci_check("SCIMapLocalSegment", e);
    SCISetSegmentAvailable(seg, 0, 0, &e);
    sci_check("SCISetSegmentAvailable", e);
    return seg;
}

static void drop_segment(sci_local_segment_t seg, sci_map_t map)
{
    sci_error_t e;
    SCIUnmapSegment(map, 0, &e);
    sci_check("SCIUnmapSegment (local)", e);
    SCISetSegmentUnavailable(seg, 0, 0, &e);
    sci_check("SCISetSegmentUnavailable", e);
    SCIRemoveSegment(seg, 0, &e);
    sci_check("SCIRemoveSegment", e);
}

/* Connect to a segment of the other node; it may not exist yet (the two
 * processes start independently), so try again until opt.timeout. */
void connect_peer(uint32_t id, size_t want, sci_remote_segment_t *rseg)
{
    sci_error_t e = SCI_ERR_OK;
    uint64_t t0 = now_ns();
    for (;;) {
        SCIConnectSegment(g_sd, rseg, opt.rn, id, 0, NULL, NULL, 1000, 0, &e);
        if (e == SCI_ERR_OK)
            break;
        if ((double)(now_ns() - t0) / 1e9 > opt.timeout) {
            char what[96];
            snprintf(what, sizeof what, "SCIConnectSegment(node %u, segment 0x%x)", opt.rn, id);
            sci_check(what, e);
        }
        usleep(100000);
    }
    size_t got = SCIGetRemoteSegmentSize(*rseg);
    if (got != want)
        fail("segment 0x%x of node %u has %zu bytes, expected %zu", id, opt.rn, got, want);
}

/* Unmap and disconnect a segment of the other node (what connect_peer
 * connected and the caller mapped); `what` names it in errors. */
void disconnect_peer(sci_remote_segment_t rseg, sci_map_t rmap, const char *what)
{
    char call[96];
    sci_error_t e;
    SCIUnmapSegment(rmap, 0, &e);
    snprintf(call, sizeof call, "SCIUnmapSegment (%s)", what);
    sci_check(call, e);
    SCIDisconnectSegment(rseg, 0, &e);
    snprintf(call, sizeof call, "SCIDisconnectSegment (%s)", what);
    sci_check(call, e);
}

void setup(void)
{
    sci_error_t e;
    phase_begin(PH_SETUP);
    SCIInitialize(0, &e);
    sci_check("SCIInitialize", e);
    SCIOpen(&g_sd, 0, &e);
    sci_check("SCIOpen", e);
    SCIGetLocalNodeId(0, &g_node, 0, &e);
    sci_check("SCIGetLocalNodeId", e);
    /* Two processes of one node are a misconfiguration for the remote path;
     * a guest and a host process of one node (or two guests) share the node
     * id, so the guest paths say -same-node. */
    if (g_node == opt.rn && !opt.same_node)
        fail("this node (%u) is the node named by -rn: the two sides must run on "
             "different nodes", g_node);

    uint32_t mine = opt.segid + (opt.server ? 0 : 1), theirs = opt.segid + (opt.server ? 1 : 0);
    g_inbox_seg = make_segment(mine, INBOX_SIZE, &g_inbox_lmap, &g_in);
    if (opt.server)
        g_bw_seg = make_segment(opt.segid + 2, BW_MAX, &g_bw_lmap, &g_bw_local);

    connect_peer(theirs, INBOX_SIZE, &g_peer_rseg);
    g_out = SCIMapRemoteSegment(g_peer_rseg, &g_peer_rmap, 0, INBOX_SIZE, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (inbox)", e);
    SCICreateMapSequence(g_peer_rmap, &g_peer_seq, 0, &e);
    sci_check("SCICreateMapSequence (inbox)", e);

    /* Hello: the client tells the server what to expect. */
    if (!opt.server) {
        ctl_send(CMD(CMD_HELLO, ((uint64_t)HELLO_MAGIC << 8) | (unsigned)opt.quick));
        ctl_expect(CMD(CMD_HELLO, (uint64_t)HELLO_MAGIC << 8), "hello");
    }
    phase_end(PH_SETUP);
}

void teardown(void)
{
    sci_error_t e;
    phase_begin(PH_TEARDOWN);
    /* Both stop writing into the other's inbox, then remove their own. */
    if (!opt.server)
        ctl_send(CMD(CMD_DONE, 0));
    ctl_send(CMD(CMD_DONE, 1));
    ctl_expect(CMD(CMD_DONE, 1), "done");
    SCIRemoveSequence(g_peer_seq, 0, &e);
    sci_check("SCIRemoveSequence (inbox)", e);
    SCIUnmapSegment(g_peer_rmap, 0, &e);
    sci_check("SCIUnmapSegment (remote inbox)", e);
    SCIDisconnectSegment(g_peer_rseg, 0, &e);
    sci_check("SCIDisconnectSegment (inbox)", e);
    /* The peer may still be disconnecting from ours: removal may report
     * SCI_ERR_BUSY for a moment. */
    uint64_t t0 = now_ns();
    for (;;) {
        SCISetSegmentUnavailable(g_inbox_seg, 0, 0, &e);
        if (e == SCI_ERR_OK || now_ns() - t0 > 5000000000ull)
            break;
        usleep(20000);
    }
    SCIUnmapSegment(g_inbox_lmap, 0, &e);
    sci_check("SCIUnmapSegment (local inbox)", e);
    for (;;) {
        SCIRemoveSegment(g_inbox_seg, 0, &e);
        if (e != SCI_ERR_BUSY || now_ns() - t0 > 5000000000ull)
            break;
        usleep(20000);
    }
    sci_check("SCIRemoveSegment (inbox)", e);
    if (opt.server)
        drop_segment(g_bw_seg, g_bw_lmap);
    SCIClose(g_sd, 0, &e);
    sci_check("SCIClose", e);
    SCITerminate();
    phase_end(PH_TEARDOWN);
}

/* ------------------------------------------------------------------------ */
/* Segments made for one section on both sides                             */
/* ------------------------------------------------------------------------ */

/* Remove a segment of ours that the peer was connected to: its disconnect
 * may still be on its way, so SCI_ERR_BUSY is retried for up to 5 s. */
void remove_own_segment(sci_local_segment_t seg, sci_map_t map, const char *what)
{
    sci_error_t e;
    uint64_t t0 = now_ns();
    SCIUnmapSegment(map, 0, &e);
    sci_check("SCIUnmapSegment (local)", e);
    for (;;) {
        SCISetSegmentUnavailable(seg, 0, 0, &e);
        if (e == SCI_ERR_OK || now_ns() - t0 > 5000000000ull)
            break;
        usleep(20000);
    }
    for (;;) {
        SCIRemoveSegment(seg, 0, &e);
        if (e != SCI_ERR_BUSY || now_ns() - t0 > 5000000000ull)
            break;
        usleep(20000);
    }
    sci_check(what, e);
}

void xseg_open(xseg_t *x, uint32_t base, size_t size)
{
    sci_error_t e;
    uint32_t mine = base + (opt.server ? 0 : 1), theirs = base + (opt.server ? 1 : 0);
    x->size = size;
    x->seg = make_segment(mine, size, &x->lmap, &x->local);
    connect_peer(theirs, size, &x->rseg);
    x->remote = SCIMapRemoteSegment(x->rseg, &x->rmap, 0, size, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (spinning ping-pong)", e);
    ctl_send(0x5e);                          /* both mapped */
    ctl_expect(0x5e, "spinning ping-pong setup");
}

void xseg_close(xseg_t *x)
{
    disconnect_peer(x->rseg, x->rmap, "spinning ping-pong");
    ctl_send(0x5f);                          /* both disconnected */
    ctl_expect(0x5f, "spinning ping-pong teardown");
    remove_own_segment(x->seg, x->lmap, "SCIRemoveSegment (spinning ping-pong)");
}
