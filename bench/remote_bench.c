/*
 * remote_bench.c - vsci between two nodes: what a SISCI program sees when
 * its peer runs on another host.
 *
 * One program, run as two processes on two different nodes of a cluster
 * (VSCI_SOCKET names each one's node): `-server -rn CLIENT_NODE` on one,
 * `-client -rn SERVER_NODE` on the other.  `vsci bench --paths remote`
 * starts both, each in its own network namespace, and puts the results next
 * to peers (sockperf, iperf3) measured on the same namespaces in the same
 * run.  Only the SISCI API is used, also to coordinate the two processes:
 * each creates an "inbox" segment, maps the other's, and control messages
 * are a value plus a sequence word written into the peer's inbox followed
 * by SCIFlush.  The client drives; the server obeys commands.  Sections:
 *
 *   a) remote ping-pong latency, 4 B .. 8 KiB: the client writes the message
 *      (payload, then a sequence flag in its last 4 bytes) into the server's
 *      inbox through its remote map with plain stores and NO SISCI call, and
 *      busy-waits on its own local inbox for the echo.  RTT/2, median/p99;
 *   b) remote write bandwidth, 64 KiB .. 8 MiB, into an 8 MiB segment of the
 *      server: memcpy() into the remote map + SCIFlush per copy (thesis
 *      style), and SCIMemCpy() per copy.  MB/s;
 *   c) store-to-visibility delay: the server stores a CLOCK_MONOTONIC time
 *      stamp into the client's inbox (no call) at a steady pace, the client
 *      polls its local inbox and records arrival time - store time (both
 *      nodes share the host's clock); p50/p99/max, at two paces;
 *   d) remote interrupt (SCITriggerInterrupt / SCIWaitForInterrupt) and data
 *      interrupt (4 B, 1 KiB) ping-pong latency, RTT/2.
 *
 * Usage: remote_bench -server|-client -rn NODE [-quick] [-json FILE] [-s abcd]
 *                     [-id SEGID] [-timeout S] [-yield N] [-h]
 * See bench/README.md ("remote_bench").
 */
#define _GNU_SOURCE
#include <sisci_api.h>

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Constants                                                                */
/* ------------------------------------------------------------------------ */

#define INBOX_SIZE    (64u << 10)     /* each side's inbox segment           */
#define CTL_OFF       0u              /* control ring: 64 x {seq, value}     */
#define VIS_OFF       4096u           /* c: ring of time stamps (one page)   */
#define VIS_SLOTS     256u            /* 16 B each                           */
#define PP_OFF        16384u          /* a: message area                     */
#define PP_MAX        8192u           /* largest ping-pong message           */
#define BW_MAX        (8u << 20)      /* b: the server's bandwidth segment   */
#define DI_MAX        1024u           /* largest data-interrupt payload      */
#define NB            30              /* histogram: 30 buckets of 10 us ...  */
#define BUCKET_US     10.0            /* ... plus one overflow bucket        */
#define MAX_PP_SIZES  16
#define MAX_BW_SIZES  16
#define NPACES        2
#define DEFAULT_SEGID 0x52420000u     /* server inbox; client +1, bw +2      */
#define WAIT_TIMEOUT_MS 10000u        /* each SCIWaitFor*Interrupt           */
#define VIS_MAGIC     0x5649534942454e43ull

static const unsigned di_sizes[2] = { 4, 1024 };

/* Commands from the client to the server (high byte of a control value). */
enum {
    CMD_HELLO = 1, CMD_PP, CMD_BW_CHECK, CMD_VIS, CMD_INTR_SETUP, CMD_INTR_LOOP,
    CMD_INTR_END, CMD_DONE
};
#define CMD(c, arg) (((uint64_t)(c) << 56) | (uint64_t)(arg))
#define HELLO_MAGIC 0x524246u         /* "RBF" */

enum { K_INTR, K_DINTR };

/* Sections (and the phases the JSON reports) */
enum { PH_SETUP, PH_PP, PH_BW, PH_VIS, PH_INTR, PH_TEARDOWN, NPHASES };
static const char *const phase_names[NPHASES] = {
    "setup", "a: remote ping-pong", "b: remote write bandwidth",
    "c: store-to-visibility", "d: remote interrupts", "teardown"
};

/* ------------------------------------------------------------------------ */
/* Results (client)                                                         */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint32_t n;                 /* samples (0 = not measured)                */
    uint32_t bad;               /* messages that arrived with wrong content  */
    uint32_t late;              /* a: flag seen before all of the payload    */
    double   med, p99, mean, min, max;     /* microseconds                   */
    uint32_t hist[NB + 1];      /* in 10 us buckets, last = overflow         */
} lat_t;

#include "common/stats.h"

static struct {
    int      pp_n;
    size_t   pp_size[MAX_PP_SIZES];
    lat_t    pp[MAX_PP_SIZES];
    int      bw_n;
    size_t   bw_size[MAX_BW_SIZES];
    double   bw_flush[MAX_BW_SIZES], bw_memcpy[MAX_BW_SIZES];
    int      bw_verified;       /* 1 ok, -1 mismatch, 0 not checked          */
    int      vis_n;
    unsigned vis_interval_us[NPACES];
    double   vis_actual_us[NPACES];        /* the writer's real mean pace    */
    uint32_t vis_sent[NPACES];
    lat_t    vis[NPACES];                  /* one-way, not halved            */
    lat_t    intr;
    lat_t    dint[2];
    int      ran[NPHASES], ok[NPHASES];
    char     err[NPHASES][400];
} R;

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

static struct {
    int         server;         /* role: 1 server, 0 client                  */
    unsigned    rn;             /* the other node                            */
    int         quick;
    const char *json;
    char        sections[8];
    uint32_t    segid;
    double      timeout;        /* seconds a control wait may take           */
    unsigned    yield_every;    /* spins between sched_yield in busy-waits   */
    int         same_node;      /* -same-node: the other side is on this node */
    size_t      bw_from;        /* smallest bandwidth size (-bw-from)        */
    /* derived */
    size_t      pp_sizes[MAX_PP_SIZES];
    int         n_pp;
    int         pp_warm, pp_min, pp_max;
    double      pp_budget;
    size_t      bw_sizes[MAX_BW_SIZES];
    int         n_bw;
    double      bw_time;
    int         bw_rounds;
    unsigned    vis_interval_us[NPACES];
    unsigned    vis_count[NPACES];
    int         in_warm, in_min, in_max;
    double      in_budget;
} opt;

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

static int g_phase = PH_SETUP;
static int write_json(const char *path);
static void print_results(void);

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A failure ends the run: the two processes share state that cannot be
 * recovered half-way.  The client still prints and writes what it has. */
static void fail(const char *fmt, ...)
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

static void sci_check(const char *what, sci_error_t e)
{
    if (e != SCI_ERR_OK)
        fail("%s failed: %s (0x%08x): %s", what, sci_err_name(e), (unsigned)e,
             SCIGetErrorString(e));
}

static void *xalloc(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        fail("mmap(%zu): %s", size, strerror(errno));
    return p;
}

static void phase_begin(int p)
{
    g_phase = p;
    R.ran[p] = 1;
}

static void phase_end(int p)
{
    R.ok[p] = 1;
}

/* A polite busy-wait step: pause, and let another thread of the same core
 * run every opt.yield_every spins (the library's store shipper and the RMA
 * engine's progress threads need a core too; there are only 2 here). */
static inline void spin_step(uint32_t *spins)
{
    cpu_relax();
    if (opt.yield_every && ++*spins >= opt.yield_every) {
        *spins = 0;
        sched_yield();
    }
}

/* ------------------------------------------------------------------------ */
/* The two inboxes and the control channel                                  */
/* ------------------------------------------------------------------------ */

static sci_desc_t g_sd;
static unsigned g_node;
static sci_local_segment_t g_inbox_seg;
static sci_map_t g_inbox_lmap, g_peer_rmap;
static sci_remote_segment_t g_peer_rseg;
static volatile unsigned char *g_in;       /* my inbox, local map          */
static volatile unsigned char *g_out;      /* the peer's inbox, remote map */
static sci_sequence_t g_peer_seq;          /* on g_peer_rmap: tells a lost connection */
static uint64_t g_ctl_sent, g_ctl_rcvd;

static sci_local_segment_t g_bw_seg;       /* server */
static sci_map_t g_bw_lmap;
static volatile unsigned char *g_bw_local;

/* Control messages: a ring of CTL_SLOTS {sequence, value} slots in the
 * peer's inbox (no side sends more than a few messages before it waits for
 * an answer).  Send: value, barrier, sequence word, flush -- visible at the
 * peer when this returns. */
#define CTL_SLOTS 64u

static void ctl_send(uint64_t v)
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

static int ctl_ready(void)
{
    uint64_t k = g_ctl_rcvd + 1;
    return __atomic_load_n((uint64_t *)&ctl_slot(k)[0], __ATOMIC_ACQUIRE) == k;
}

static uint64_t ctl_recv(void)
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

static void ctl_expect(uint64_t want, const char *what)
{
    uint64_t got = ctl_recv();
    if (got != want)
        fail("control channel out of step at %s: got 0x%llx, expected 0x%llx", what,
             (unsigned long long)got, (unsigned long long)want);
}

static sci_local_segment_t make_segment(uint32_t id, size_t size, sci_map_t *map,
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
static void connect_peer(uint32_t id, size_t want, sci_remote_segment_t *rseg)
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

static void setup(void)
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

static void teardown(void)
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
/* a) remote ping-pong                                                      */
/* ------------------------------------------------------------------------ */

/* Two payload patterns whose every byte differs: message n carries
 * pattern n & 1, so every byte of it is a change the library must ship
 * (vsci ships only bytes that changed). */
static unsigned char *g_pat[2], *g_rbuf;
static uint32_t g_pp_seq;               /* identical sequence on both sides */

/* Message of `size` bytes into the peer's inbox: payload (its first word is
 * the sequence number), then the flag = sequence number in the last 4
 * bytes.  Plain stores; no SISCI call. */
static inline void pp_send(size_t size, uint32_t seq)
{
    unsigned char *dst = (unsigned char *)(g_out + PP_OFF);
    if (size > 4) {
        unsigned char *p = g_pat[seq & 1];
        memcpy(p, &seq, 4);
        memcpy(dst, p, size - 4);
    }
    __atomic_store_n((uint32_t *)(dst + size - 4), seq, __ATOMIC_RELEASE);
}

static inline int pp_payload_ok(const unsigned char *src, size_t size, uint32_t seq)
{
    uint32_t got;
    memcpy(g_rbuf, src, size - 4);
    memcpy(&got, g_rbuf, 4);
    if (got != seq)
        return 0;
    return size <= 8 || memcmp(g_rbuf + 4, g_pat[seq & 1] + 4, size - 8) == 0;
}

/* Busy-wait on the own inbox for the flag; check the payload.  Returns 0 if
 * the payload is the one sent with this sequence number, 1 if it was not yet
 * complete when the flag showed but completed within 0.5 s (the flag
 * overtook part of the payload), 2 if it stayed wrong. */
static inline int pp_wait(size_t size, uint32_t seq, uint64_t deadline)
{
    const unsigned char *src = (const unsigned char *)(g_in + PP_OFF);
    uint32_t spins = 0, n = 0;
    uint64_t late = 0;
    while (__atomic_load_n((const uint32_t *)(src + size - 4), __ATOMIC_ACQUIRE) != seq) {
        spin_step(&spins);
        if ((++n & 0xfffff) != 0)
            continue;
        uint64_t t = now_ns();
        if (t > deadline)
            fail("ping-pong: message %u of %zu B did not arrive within %.0f s (flag holds %u)",
                 seq, size, opt.timeout, *(const volatile uint32_t *)(src + size - 4));
        /* Late by a second: say so at once if the connection is gone (the
         * check is a flush point, so never made while messages flow). */
        if (late == 0)
            late = t + 1000000000ull;
        else if (t > late) {
            sci_error_t e;
            if (SCICheckSequence(g_peer_seq, 0, &e) == SCI_SEQ_NOT_RETRIABLE)
                fail("ping-pong: message %u of %zu B: the connection to the peer's inbox was "
                     "lost (%s)", seq, size, SCIGetErrorString(e));
        }
    }
    if (size <= 4 || pp_payload_ok(src, size, seq))
        return 0;
    uint64_t until = now_ns() + 500000000ull;
    while (now_ns() < until) {
        struct timespec ts = { 0, 20000 };
        nanosleep(&ts, NULL);       /* leave the core to the library's threads */
        if (pp_payload_ok(src, size, seq))
            return 1;
    }
    uint32_t got;
    memcpy(&got, g_rbuf, 4);
    fprintf(stderr, "remote_bench %s: ping-pong message %u (%zu B): after 0.5 s the payload still "
            "holds sequence %u, byte 4 = 0x%02x, last payload byte = 0x%02x (expected 0x%02x)\n",
            opt.server ? "server" : "client", seq, size, got, size > 8 ? g_rbuf[4] : 0,
            g_rbuf[size - 5], g_pat[seq & 1][size - 5]);
    return 2;
}

/* `count` round trips; the client stores each RTT in samples[] (if set).
 * Returns (late << 32) | wrong: messages whose payload completed after
 * the flag, and messages whose payload stayed wrong. */
static uint64_t pp_loop(size_t size, uint32_t count, uint64_t *samples)
{
    uint64_t bad = 0;
    static const uint64_t add[3] = { 0, 1ull << 32, 1 };
    uint64_t deadline = now_ns() + (uint64_t)(opt.timeout * 1e9);
    for (uint32_t i = 0; i < count; i++) {
        uint32_t s = ++g_pp_seq;
        if (!opt.server) {
            uint64_t a = now_ns();
            pp_send(size, s);
            bad += add[pp_wait(size, s, deadline)];
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += add[pp_wait(size, s, deadline)];
            pp_send(size, s);
        }
    }
    return bad;
}

/* Client: one command = one loop of `count` round trips of `size` bytes. */
static uint64_t pp_remote_loop(size_t size, uint32_t count, uint64_t *samples)
{
    ctl_send(CMD(CMD_PP, size));
    ctl_send(count);
    uint64_t bad = pp_loop(size, count, samples);
    return bad + ctl_recv();                /* plus the server's receive errors */
}

static void section_pp(void)
{
    phase_begin(PH_PP);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.pp_max);
    for (int s = 0; s < opt.n_pp; s++) {
        size_t size = opt.pp_sizes[s];
        uint64_t t0 = now_ns();
        uint64_t bad = pp_remote_loop(size, (uint32_t)opt.pp_warm, NULL);
        uint64_t warm_ns = now_ns() - t0;
        uint32_t n = pick_iters(warm_ns, opt.pp_warm, opt.pp_min, opt.pp_max, opt.pp_budget);
        bad += pp_remote_loop(size, n, samples);
        R.pp_size[s] = size;
        make_stats(&R.pp[s], samples, n, (uint32_t)bad, 2.0);
        R.pp[s].late = (uint32_t)(bad >> 32);
        R.pp_n = s + 1;
    }
    munmap(samples, sizeof(uint64_t) * (size_t)opt.pp_max);
    phase_end(PH_PP);
}

static void server_pp(size_t size)
{
    if (size < 4 || size > PP_MAX || size % 4)
        fail("ping-pong command with a bad size %zu", size);
    uint32_t count = (uint32_t)ctl_recv();
    ctl_send(pp_loop(size, count, NULL));
}

/* ------------------------------------------------------------------------ */
/* b) remote write bandwidth                                                */
/* ------------------------------------------------------------------------ */

enum { BW_FLUSH, BW_MEMCPY };

/* One copy of `size` bytes from src into the remote map, visible at the
 * owner when it returns. */
static inline void bw_one(sci_map_t rmap, void *rem, void *src, size_t size, int kind)
{
    sci_error_t e;
    if (kind == BW_FLUSH) {
        memcpy(rem, src, size);
        SCIFlush(NULL, 0);
    } else {
        SCIMemCpy(NULL, src, rmap, 0, size, 0, &e);
        sci_check("SCIMemCpy", e);
    }
}

/* MB/s (10^6 B/s) over at least opt.bw_time seconds and 3 copies, after one
 * untimed copy.  Copies alternate between two sources that differ in every
 * byte, so every copy moves `size` new bytes. */
static double bw_measure(sci_map_t rmap, void *rem, unsigned char *src[2], size_t size, int kind)
{
    bw_one(rmap, rem, src[1], size, kind);
    uint64_t n = 0, t0 = now_ns(), el;
    do {
        bw_one(rmap, rem, src[n & 1], size, kind);
        n++;
        el = now_ns() - t0;
    } while (n < 3 || (double)el < opt.bw_time * 1e9);
    return (double)size * (double)n / ((double)el / 1e9) / 1e6;
}

static void section_bw(void)
{
    sci_error_t e;
    sci_remote_segment_t rseg;
    sci_map_t rmap;
    phase_begin(PH_BW);
    connect_peer(opt.segid + 2, BW_MAX, &rseg);
    void *rem = (void *)SCIMapRemoteSegment(rseg, &rmap, 0, BW_MAX, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (bandwidth)", e);

    unsigned char *src[2] = { xalloc(BW_MAX), xalloc(BW_MAX) };
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() ^ now_ns();
    for (size_t i = 0; i < BW_MAX / 8; i++) {   /* xorshift pattern and its complement */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ((uint64_t *)src[0])[i] = x;
        ((uint64_t *)src[1])[i] = ~x;
    }

    for (int s = 0; s < opt.n_bw; s++) {
        size_t size = opt.bw_sizes[s];
        double bf = 0, bm = 0;
        for (int r = 0; r < opt.bw_rounds; r++) {   /* interleaved, best of N */
            double f = bw_measure(rmap, rem, src, size, BW_FLUSH);
            double m = bw_measure(rmap, rem, src, size, BW_MEMCPY);
            if (f > bf) bf = f;
            if (m > bm) bm = m;
        }
        R.bw_size[s] = size;
        R.bw_flush[s] = bf;
        R.bw_memcpy[s] = bm;
        R.bw_n = s + 1;
    }

    /* What the client wrote through its map is what the server has. */
    memcpy(rem, src[0], BW_MAX);
    SCIFlush(NULL, 0);
    ctl_send(CMD(CMD_BW_CHECK, 0));
    ctl_send(hash_buf(src[0], BW_MAX));
    R.bw_verified = ctl_recv() == 1 ? 1 : -1;

    SCIUnmapSegment(rmap, 0, &e);
    sci_check("SCIUnmapSegment (bandwidth)", e);
    SCIDisconnectSegment(rseg, 0, &e);
    sci_check("SCIDisconnectSegment (bandwidth)", e);
    munmap(src[0], BW_MAX);
    munmap(src[1], BW_MAX);
    if (R.bw_verified < 0)
        fail("data check: the server's segment does not hold what the client wrote");
    phase_end(PH_BW);
}

static void server_bw_check(void)
{
    uint64_t want = ctl_recv();
    ctl_send(hash_buf(g_bw_local, BW_MAX) == want ? 1 : 0);
}

/* ------------------------------------------------------------------------ */
/* c) store-to-visibility delay                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint64_t ts;                /* CLOCK_MONOTONIC ns at the store           */
    uint64_t chk;               /* ts ^ VIS_MAGIC: the slot is complete      */
} vslot_t;

static uint64_t g_vis_next;      /* next ring slot the writer uses           */

/* Server: `count` time stamps, one every interval_us, plain stores. */
static void server_vis(unsigned interval_us)
{
    uint32_t count = (uint32_t)ctl_recv();
    volatile vslot_t *ring = (volatile vslot_t *)(g_out + VIS_OFF);
    uint64_t t0 = now_ns(), first = 0, last = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t due = t0 + (uint64_t)i * interval_us * 1000ull;
        struct timespec ts = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        uint64_t t = now_ns();
        volatile vslot_t *s = &ring[g_vis_next++ % VIS_SLOTS];
        s->ts = t;
        s->chk = t ^ VIS_MAGIC;
        if (i == 0)
            first = t;
        last = t;
    }
    SCIFlush(NULL, 0);
    ctl_send(count);
    ctl_send(count > 1 ? (last - first) / (count - 1) : 0);
}

static void section_vis(void)
{
    phase_begin(PH_VIS);
    volatile vslot_t *ring = (volatile vslot_t *)(g_in + VIS_OFF);
    uint64_t seen[VIS_SLOTS];
    unsigned maxn = 0;
    for (int p = 0; p < NPACES; p++)
        if (opt.vis_count[p] > maxn)
            maxn = opt.vis_count[p];
    uint64_t *samples = xalloc(sizeof(uint64_t) * maxn);

    for (int p = 0; p < NPACES; p++) {
        unsigned n = opt.vis_count[p];
        for (unsigned k = 0; k < VIS_SLOTS; k++)
            seen[k] = ring[k].ts;
        ctl_send(CMD(CMD_VIS, opt.vis_interval_us[p]));
        ctl_send(n);
        uint32_t got = 0, spins = 0;
        int done = 0;
        uint64_t deadline = now_ns() + (uint64_t)(opt.timeout * 1e9) +
                            (uint64_t)n * opt.vis_interval_us[p] * 1000ull;
        for (;;) {
            /* the writer's "done" comes after a flush: one more scan sees all */
            int last_scan = done || ctl_ready();
            for (unsigned k = 0; k < VIS_SLOTS; k++) {
                uint64_t ts = ring[k].ts;
                if (ts == seen[k])
                    continue;
                if (ring[k].chk != (ts ^ VIS_MAGIC))
                    continue;               /* not complete yet */
                uint64_t t = now_ns();
                seen[k] = ts;
                if (got < n)
                    samples[got++] = t > ts ? t - ts : 0;
            }
            if (last_scan)
                break;
            spin_step(&spins);
            if ((spins & 0xff) == 0 && now_ns() > deadline)
                fail("store-to-visibility: the writer did not finish (%u of %u time stamps seen)",
                     got, n);
        }
        uint32_t sent = (uint32_t)ctl_recv();
        uint64_t pace = ctl_recv();
        R.vis_interval_us[p] = opt.vis_interval_us[p];
        R.vis_actual_us[p] = (double)pace / 1000.0;
        R.vis_sent[p] = sent;
        make_stats(&R.vis[p], samples, got, sent - got, 1.0);  /* bad = never seen */
        R.vis_n = p + 1;
    }
    munmap(samples, sizeof(uint64_t) * maxn);
    phase_end(PH_VIS);
}

/* ------------------------------------------------------------------------ */
/* d) remote interrupts and data interrupts                                 */
/* ------------------------------------------------------------------------ */

static sci_local_interrupt_t g_li;
static sci_remote_interrupt_t g_ri;
static sci_local_data_interrupt_t g_dli;
static sci_remote_data_interrupt_t g_dri;
static uint32_t g_in_seq;

static void intr_setup(void)
{
    sci_error_t e;
    unsigned no = 0, dno = 0;
    SCICreateInterrupt(g_sd, &g_li, 0, &no, NULL, NULL, 0, &e);
    sci_check("SCICreateInterrupt", e);
    SCICreateDataInterrupt(g_sd, &g_dli, 0, &dno, NULL, NULL, 0, &e);
    sci_check("SCICreateDataInterrupt", e);
    ctl_send(((uint64_t)no << 32) | dno);
    uint64_t peer = ctl_recv();
    unsigned pno = (unsigned)(peer >> 32), pdno = (unsigned)peer;
    SCIConnectInterrupt(g_sd, &g_ri, opt.rn, 0, pno, 10000, 0, &e);
    sci_check("SCIConnectInterrupt", e);
    SCIConnectDataInterrupt(g_sd, &g_dri, opt.rn, 0, pdno, 10000, 0, &e);
    sci_check("SCIConnectDataInterrupt", e);
    ctl_send(0x1a);                          /* both connected */
    ctl_expect(0x1a, "interrupt setup");
}

static void intr_end(void)
{
    sci_error_t e;
    SCIDisconnectInterrupt(g_ri, 0, &e);
    sci_check("SCIDisconnectInterrupt", e);
    SCIDisconnectDataInterrupt(g_dri, 0, &e);
    sci_check("SCIDisconnectDataInterrupt", e);
    ctl_send(0x1b);                          /* both disconnected */
    ctl_expect(0x1b, "interrupt teardown");
    SCIRemoveInterrupt(g_li, 0, &e);
    sci_check("SCIRemoveInterrupt", e);
    SCIRemoveDataInterrupt(g_dli, 0, &e);
    sci_check("SCIRemoveDataInterrupt", e);
}

static inline void in_send(int k, unsigned char *buf, unsigned len, uint32_t seq)
{
    sci_error_t e;
    if (k == K_INTR) {
        SCITriggerInterrupt(g_ri, 0, &e);
        sci_check("SCITriggerInterrupt", e);
    } else {
        memcpy(buf, &seq, 4);
        SCITriggerDataInterrupt(g_dri, buf, len, 0, &e);
        sci_check("SCITriggerDataInterrupt", e);
    }
}

static inline int in_wait(int k, unsigned char *buf, unsigned len, uint32_t seq)
{
    sci_error_t e;
    if (k == K_INTR) {
        SCIWaitForInterrupt(g_li, WAIT_TIMEOUT_MS, 0, &e);
        sci_check("SCIWaitForInterrupt", e);
        return 0;
    }
    unsigned rl = DI_MAX;
    uint32_t got;
    SCIWaitForDataInterrupt(g_dli, buf, &rl, WAIT_TIMEOUT_MS, 0, &e);
    sci_check("SCIWaitForDataInterrupt", e);
    memcpy(&got, buf, 4);
    return rl != len || got != seq;
}

static uint32_t in_loop(int k, unsigned len, uint32_t count, uint64_t *samples,
                        unsigned char *buf)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t s = ++g_in_seq;
        if (!opt.server) {
            uint64_t a = now_ns();
            in_send(k, buf, len, s);
            bad += in_wait(k, buf, len, s);
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += in_wait(k, buf, len, s);
            in_send(k, buf, len, s);
        }
    }
    return bad;
}

static uint32_t in_remote_loop(int k, unsigned len, uint32_t count, uint64_t *samples,
                               unsigned char *buf)
{
    ctl_send(CMD(CMD_INTR_LOOP, ((uint64_t)k << 16) | len));
    ctl_send(count);
    uint32_t bad = in_loop(k, len, count, samples, buf);
    return bad + (uint32_t)ctl_recv();
}

static void in_measure(int k, unsigned len, lat_t *out, uint64_t *samples, unsigned char *buf)
{
    uint64_t t0 = now_ns();
    uint32_t bad = in_remote_loop(k, len, (uint32_t)opt.in_warm, NULL, buf);
    uint64_t warm_ns = now_ns() - t0;
    uint32_t n = pick_iters(warm_ns, opt.in_warm, opt.in_min, opt.in_max, opt.in_budget);
    bad += in_remote_loop(k, len, n, samples, buf);
    make_stats(out, samples, n, bad, 2.0);
}

static void section_intr(void)
{
    phase_begin(PH_INTR);
    ctl_send(CMD(CMD_INTR_SETUP, 0));
    intr_setup();
    unsigned char *buf = xalloc(DI_MAX);
    memset(buf, 0x3c, DI_MAX);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.in_max);
    in_measure(K_INTR, 0, &R.intr, samples, buf);
    for (int d = 0; d < 2; d++)
        in_measure(K_DINTR, di_sizes[d], &R.dint[d], samples, buf);
    ctl_send(CMD(CMD_INTR_END, 0));
    intr_end();
    munmap(samples, sizeof(uint64_t) * (size_t)opt.in_max);
    munmap(buf, DI_MAX);
    phase_end(PH_INTR);
}

static void server_intr_loop(uint64_t arg)
{
    static unsigned char *buf;
    if (!buf) {
        buf = xalloc(DI_MAX);
        memset(buf, 0xc3, DI_MAX);
    }
    int k = (int)((arg >> 16) & 0xff);
    unsigned len = (unsigned)(arg & 0xffff);
    if ((k != K_INTR && k != K_DINTR) || len > DI_MAX || (k == K_DINTR && len < 4))
        fail("interrupt command with bad arguments (kind %d, length %u)", k, len);
    uint32_t count = (uint32_t)ctl_recv();
    ctl_send(in_loop(k, len, count, NULL, buf));
}

/* ------------------------------------------------------------------------ */
/* The server: a command loop                                               */
/* ------------------------------------------------------------------------ */

static void run_server(void)
{
    setup();
    uint64_t hello = ctl_recv();
    if (hello >> 56 != CMD_HELLO || ((hello >> 8) & 0xffffffu) != HELLO_MAGIC)
        fail("the first control message is not the client's hello (0x%llx)",
             (unsigned long long)hello);
    ctl_send(CMD(CMD_HELLO, (uint64_t)HELLO_MAGIC << 8));
    printf("remote_bench server: node %u, serving node %u (%s mode)\n", g_node, opt.rn,
           (hello & 1) ? "quick" : "default");
    fflush(stdout);
    for (;;) {
        uint64_t c = ctl_recv();
        uint64_t arg = c & ((1ull << 56) - 1);
        switch ((int)(c >> 56)) {
        case CMD_PP:
            g_phase = PH_PP;
            server_pp((size_t)arg);
            break;
        case CMD_BW_CHECK:
            g_phase = PH_BW;
            server_bw_check();
            break;
        case CMD_VIS:
            g_phase = PH_VIS;
            server_vis((unsigned)arg);
            break;
        case CMD_INTR_SETUP:
            g_phase = PH_INTR;
            intr_setup();
            break;
        case CMD_INTR_LOOP:
            server_intr_loop(arg);
            break;
        case CMD_INTR_END:
            intr_end();
            break;
        case CMD_DONE:
            teardown();
            printf("remote_bench server: done\n");
            return;
        default:
            fail("unknown command 0x%llx", (unsigned long long)c);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Output (client)                                                          */
/* ------------------------------------------------------------------------ */

static double g_elapsed;

static int want(char s) { return strchr(opt.sections, s) != NULL; }

static const char *wait_mode(void)
{
    const char *w = getenv("VSCI_WAIT");
    return w && *w ? w : "node default";
}

static void print_header(void)
{
    print_machine("remote_bench");
    printf("run     : %s  (mode %s; sections %s; VSCI_WAIT %s; busy-waits yield every %u spins)\n",
           g_cmd, opt.quick ? "quick" : "default", opt.sections, wait_mode(), opt.yield_every);
    printf("method  : this client drives a remote_bench -server on node %u; both coordinate\n"
           "          through their own SISCI inbox segments only.  Times from\n"
           "          clock_gettime(CLOCK_MONOTONIC).  Latencies in microseconds; MB/s = 10^6 B/s.\n",
           opt.rn);
    fflush(stdout);
}

static void lat_cells(const lat_t *L)
{
    if (L->n)
        printf(" %9.2f %9.2f %9.2f %9.2f", L->med, L->p99, L->mean, L->max);
    else
        printf(" %9s %9s %9s %9s", "-", "-", "-", "-");
}

static void print_results(void)
{
    char b1[32];
    printf("node id : %u (client), %u (server)\n", g_node, opt.rn);
    if (want('a') && R.ran[PH_PP]) {
        printf("\n[a] remote ping-pong: the client writes a message (payload, then the sequence\n"
               "    number in its last 4 bytes) into the server's inbox through its remote map,\n"
               "    with no SISCI call, and busy-waits on its own local inbox for the echo.\n"
               "    Every payload byte changes each message.  RTT/2 in microseconds.\n"
               "    \"flag before payload\": the flag was seen before all of the payload had\n"
               "    arrived (it completed later).  Stores between two flush points may arrive\n"
               "    in any order, except that the highest changed word of each shipment (here\n"
               "    the flag, stored last and above its payload) is placed after the rest of\n"
               "    it (docs/cluster.md): a flag never shows before its payload, so this count\n"
               "    should stay 0 and anything else is a bug.  \"wrong\": not complete after\n"
               "    0.5 s.\n");
        printf("  %9s %9s %9s %9s %9s %8s\n", "size", "median", "p99", "mean", "max", "n");
        for (int i = 0; i < R.pp_n; i++) {
            printf("  %9s", fmt_size(R.pp_size[i], b1, sizeof b1));
            lat_cells(&R.pp[i]);
            printf(" %8u", R.pp[i].n);
            if (R.pp[i].late)
                printf("   %u flag before payload", R.pp[i].late);
            if (R.pp[i].bad)
                printf("   !! %u wrong payloads", R.pp[i].bad);
            printf("\n");
        }
    }
    if (want('b') && R.ran[PH_BW]) {
        printf("\n[b] remote write bandwidth into an 8 MiB segment of the server, best of %d\n"
               "    runs of >= %.0f ms: memcpy() into the remote map + SCIFlush per copy, and\n"
               "    SCIMemCpy per copy.  Copies alternate between two sources that differ in\n"
               "    every byte.\n", opt.bw_rounds, opt.bw_time * 1e3);
        printf("  %9s %16s %16s\n", "size", "memcpy+SCIFlush", "SCIMemCpy");
        for (int i = 0; i < R.bw_n; i++)
            printf("  %9s %11.1f MB/s %11.1f MB/s\n", fmt_size(R.bw_size[i], b1, sizeof b1),
                   R.bw_flush[i], R.bw_memcpy[i]);
        if (R.bw_verified)
            printf("  data check: %s\n", R.bw_verified > 0
                   ? "8 MiB written through the map, read back identical by the server"
                   : "!! MISMATCH between what was written and what the server holds");
    }
    if (want('c') && R.ran[PH_VIS]) {
        printf("\n[c] store-to-visibility: the server stores a CLOCK_MONOTONIC time stamp into\n"
               "    the client's inbox (plain stores, no call); the client polls its local\n"
               "    inbox and records arrival - store time.  One way, microseconds.\n");
        printf("  %9s %9s %7s %7s %9s %9s %9s %9s %7s\n", "pace(us)", "actual", "sent", "seen",
               "p50", "p99", "mean", "max", "lost");
        for (int p = 0; p < R.vis_n; p++) {
            const lat_t *L = &R.vis[p];
            printf("  %9u %9.1f %7u %7u", R.vis_interval_us[p], R.vis_actual_us[p],
                   R.vis_sent[p], L->n);
            if (L->n)
                printf(" %9.2f %9.2f %9.2f %9.2f", L->med, L->p99, L->mean, L->max);
            else
                printf(" %9s %9s %9s %9s", "-", "-", "-", "-");
            printf(" %7u\n", L->bad);
        }
        printf("  (lost = overwritten in the %u-slot ring before the client saw it)\n", VIS_SLOTS);
    }
    if (want('d') && R.ran[PH_INTR]) {
        printf("\n[d] remote interrupts: SCITriggerInterrupt -> SCIWaitForInterrupt ping-pong\n"
               "    between the nodes, and the same with data interrupts.  RTT/2, microseconds.\n");
        printf("  %-22s %9s %9s %9s %9s %8s\n", "kind", "median", "p99", "mean", "max", "n");
        printf("  %-22s", "interrupt");
        lat_cells(&R.intr);
        printf(" %8u\n", R.intr.n);
        for (int d = 0; d < 2; d++) {
            char k[32];
            snprintf(k, sizeof k, "data interrupt %u B", di_sizes[d]);
            printf("  %-22s", k);
            lat_cells(&R.dint[d]);
            printf(" %8u", R.dint[d].n);
            if (R.dint[d].bad)
                printf("   !! %u wrong payloads", R.dint[d].bad);
            printf("\n");
        }
    }
}

static int write_json(const char *path)
{
    FILE *f = json_open("remote_bench", path);
    if (!f)
        return 0;
    json_preamble(f, "remote_bench", opt.quick, 0, 0);
    fprintf(f, ",\n  \"node_id\": %u,\n  \"server_node_id\": %u,\n  \"vsci_wait\": ", g_node,
            opt.rn);
    json_str(f, wait_mode());
    fprintf(f, ",\n  \"yield_every\": %u,\n  \"elapsed_s\": ", opt.yield_every);
    json_num(f, g_elapsed);
    fputs(",\n  \"units\": {\"bandwidth\": \"MB/s (1e6 B/s)\", \"latency\": "
          "\"microseconds; RTT/2 for ping-pongs, one way for store_visibility\"},\n", f);

    fputs("  \"phases\": [", f);
    int first = 1;
    for (int p = 0; p < NPHASES; p++) {
        if (!R.ran[p])
            continue;
        fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
        first = 0;
        json_str(f, phase_names[p]);
        fprintf(f, ", \"ok\": %s, \"errors\": [", R.ok[p] ? "true" : "false");
        if (R.err[p][0])
            json_str(f, R.err[p]);
        fputs("]}", f);
    }
    fputs("\n  ],\n", f);

    fputs("  \"pingpong\": {\"vsci\": \"message + flag stored into the peer's segment through "
          "a remote map, no SISCI call; busy-wait on the own local segment\", \"rows\": [", f);
    for (int i = 0; i < R.pp_n; i++) {
        fprintf(f, "%s\n    {\"size\": %zu, \"flag_before_payload\": %u, \"vsci\": ",
                i ? "," : "", R.pp_size[i], R.pp[i].late);
        json_lat(f, &R.pp[i]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fprintf(f, "  \"write_bandwidth\": {\"flush\": \"memcpy into remote map + SCIFlush per "
               "copy\", \"memcpy\": \"SCIMemCpy per copy\", \"data_check\": %s, \"rows\": [",
            R.bw_verified > 0 ? "\"ok\"" : R.bw_verified < 0 ? "\"mismatch\"" : "null");
    for (int i = 0; i < R.bw_n; i++) {
        fprintf(f, "%s\n    {\"size\": %zu, \"flush_MBps\": ", i ? "," : "", R.bw_size[i]);
        json_num(f, R.bw_flush[i]);
        fputs(", \"memcpy_MBps\": ", f);
        json_num(f, R.bw_memcpy[i]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"store_visibility\": {\"vsci\": \"time stamp stored into a remote map with no "
          "call; arrival seen by polling the owner's local map\", \"rows\": [", f);
    for (int p = 0; p < R.vis_n; p++) {
        fprintf(f, "%s\n    {\"interval_us\": %u, \"actual_interval_us\": ", p ? "," : "",
                R.vis_interval_us[p]);
        json_num(f, R.vis_actual_us[p]);
        fprintf(f, ", \"sent\": %u, \"lost\": %u, \"delay\": ", R.vis_sent[p], R.vis[p].bad);
        json_lat(f, &R.vis[p]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"interrupt\": {\"vsci\": ", f);
    json_lat(f, &R.intr);
    fputs("},\n  \"data_interrupt\": {\"rows\": [", f);
    for (int d = 0; d < 2; d++) {
        fprintf(f, "%s\n    {\"payload\": %u, \"vsci\": ", d ? "," : "", di_sizes[d]);
        json_lat(f, &R.dint[d]);
        fputs("}", f);
    }
    fputs("\n  ]}\n}\n", f);
    return json_close("remote_bench", f, path);
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: remote_bench -server -rn CLIENT_NODE [options]   (on one node)\n"
        "       remote_bench -client -rn SERVER_NODE [options]   (on another node)\n"
        "  -quick        few iterations and a subset of sizes (a few seconds)\n"
        "  -json FILE    client: also write the results as JSON to FILE\n"
        "  -s SECTIONS   client: run only these sections (default abcd): a ping-pong,\n"
        "                b write bandwidth, c store-to-visibility, d interrupts\n"
        "  -id SEGID     segment id base (default 0x%x; the server uses SEGID and\n"
        "                SEGID+2, the client SEGID+1)\n"
        "  -timeout S    longest wait for the other side (default 60 s)\n"
        "  -yield N      sched_yield() after every N busy-wait spins (default 64; 0 = never)\n"
        "  -same-node    the other side is on this node too (a guest of it, or a host\n"
        "                process next to a guest): -rn may name this node\n"
        "  -bw-from B    bandwidth from B bytes (power of two >= 4; default 65536)\n"
        "Each side's VSCI_SOCKET names its node; the nodes are in one cluster.\n",
        DEFAULT_SEGID);
}

static void setup_options(void)
{
    opt.n_pp = opt.n_bw = 0;
    if (opt.quick) {
        static const size_t p[] = { 4, 64, 1024, 8192 };
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            opt.pp_sizes[opt.n_pp++] = p[i];
        /* -bw-from below 64 KiB adds it (and 4 KiB) in front. */
        if (opt.bw_from < (64u << 10))
            opt.bw_sizes[opt.n_bw++] = opt.bw_from;
        if (opt.bw_from < 4096)
            opt.bw_sizes[opt.n_bw++] = 4096;
        static const size_t b[] = { 64u << 10, 1u << 20, 8u << 20 };
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
            opt.bw_sizes[opt.n_bw++] = b[i];
        opt.pp_warm = 50;  opt.pp_min = 200; opt.pp_max = 2000; opt.pp_budget = 0.15;
        opt.bw_time = 0.1; opt.bw_rounds = 1;
        opt.vis_interval_us[0] = 100;   opt.vis_count[0] = 1000;
        opt.vis_interval_us[1] = 10000; opt.vis_count[1] = 30;
        opt.in_warm = 20;  opt.in_min = 100; opt.in_max = 1000; opt.in_budget = 0.1;
    } else {
        for (size_t s = 4; s <= PP_MAX; s *= 2)
            opt.pp_sizes[opt.n_pp++] = s;
        /* Below 64 KiB (only with -bw-from) in steps of 4, so that
         * 4 B .. 8 MiB fits MAX_BW_SIZES; from 64 KiB in steps of 2. */
        for (size_t s = opt.bw_from; s < (64u << 10); s *= 4)
            opt.bw_sizes[opt.n_bw++] = s;
        for (size_t s = 64u << 10; s <= BW_MAX; s *= 2)
            opt.bw_sizes[opt.n_bw++] = s;
        opt.pp_warm = 300; opt.pp_min = 1000; opt.pp_max = 20000; opt.pp_budget = 0.6;
        opt.bw_time = 0.3; opt.bw_rounds = 2;
        opt.vis_interval_us[0] = 100;   opt.vis_count[0] = 2000;
        opt.vis_interval_us[1] = 10000; opt.vis_count[1] = 200;
        opt.in_warm = 100; opt.in_min = 500; opt.in_max = 10000; opt.in_budget = 0.8;
    }
}

int main(int argc, char **argv)
{
    int role = -1, have_rn = 0;
    snprintf(opt.sections, sizeof opt.sections, "abcd");
    opt.segid = DEFAULT_SEGID;
    opt.timeout = 60;
    opt.yield_every = 64;
    opt.bw_from = 64u << 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] == '-')
            a++;                                /* accept --quick too */
        if (!strcmp(a, "-server")) {
            role = 1;
        } else if (!strcmp(a, "-client")) {
            role = 0;
        } else if (!strcmp(a, "-rn") && i + 1 < argc) {
            opt.rn = (unsigned)strtoul(argv[++i], NULL, 0);
            have_rn = 1;
        } else if (!strcmp(a, "-quick")) {
            opt.quick = 1;
        } else if (!strcmp(a, "-json") && i + 1 < argc) {
            opt.json = argv[++i];
        } else if (!strcmp(a, "-s") && i + 1 < argc) {
            const char *s = argv[++i];
            if (!parse_sections(s, opt.sections, sizeof opt.sections)) {
                usage(stderr);
                return 2;
            }
        } else if (!strcmp(a, "-id") && i + 1 < argc) {
            opt.segid = (uint32_t)strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(a, "-timeout") && i + 1 < argc) {
            opt.timeout = atof(argv[++i]);
        } else if (!strcmp(a, "-same-node")) {
            opt.same_node = 1;
        } else if (!strcmp(a, "-bw-from") && i + 1 < argc) {
            opt.bw_from = (size_t)strtoul(argv[++i], NULL, 0);
            if (opt.bw_from < 4 || opt.bw_from > (64u << 10) || (opt.bw_from & (opt.bw_from - 1))) {
                fprintf(stderr, "remote_bench: -bw-from wants a power of two from 4 to 65536\n");
                return 2;
            }
        } else if (!strcmp(a, "-yield") && i + 1 < argc) {
            opt.yield_every = (unsigned)strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(a, "-h") || !strcmp(a, "-help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "remote_bench: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (role < 0 || !have_rn || opt.timeout <= 0) {
        fprintf(stderr, "remote_bench: say -server or -client, and -rn NODE\n");
        usage(stderr);
        return 2;
    }
    opt.server = role;
    setup_options();
    machine_info(argc, argv);

    g_pat[0] = xalloc(PP_MAX);
    g_pat[1] = xalloc(PP_MAX);
    g_rbuf = xalloc(PP_MAX);
    memset(g_pat[0], 0x5a, PP_MAX);
    memset(g_pat[1], 0xa5, PP_MAX);

    if (opt.server) {
        run_server();
        return 0;
    }

    print_header();
    uint64_t t0 = now_ns();
    setup();
    if (want('a'))
        section_pp();
    if (want('b'))
        section_bw();
    if (want('c'))
        section_vis();
    if (want('d'))
        section_intr();
    teardown();
    g_elapsed = (double)(now_ns() - t0) / 1e9;

    print_results();
    /* As in sisci_bench, wrong payloads are counted and shown (!!), and
     * the exit status says whether every phase ran. */
    int ok = 1, wrong = 0;
    for (int i = 0; i < R.pp_n; i++)
        wrong |= R.pp[i].bad != 0;
    for (int d = 0; d < 2; d++)
        wrong |= R.dint[d].bad != 0;
    printf("\ntotal time %.1f s%s\n", g_elapsed, wrong ? "   (!! WRONG PAYLOADS, see above)" : "");
    fflush(stdout);
    if (opt.json && !write_json(opt.json))
        ok = 0;
    else if (opt.json)
        printf("json written to %s\n", opt.json);
    return ok ? 0 : 1;
}
