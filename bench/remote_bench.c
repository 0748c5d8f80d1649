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
 *      interrupt (4 B, 1 KiB) ping-pong latency, RTT/2;
 *   e) spinning ping-pong, a 4-byte counter, with maps of 4 KiB, 16 MiB and
 *      1 GiB: each side stores the counter into the last 4 bytes of the
 *      peer's segment (plain store, no call) and spins on its own segment in
 *      a plain loop (no pause, no yield).  RTT/2 per map size;
 *   f) store + SCIFlush: 1 B, and a 4 KiB memcpy of new data, into the
 *      server's segment, then SCIFlush(NULL, 0); time per store + flush;
 *   g) an idle 1 GiB map: one byte stored and flushed, then 10 s of sleep:
 *      the client's CPU and the bytes on its namespace's links during the
 *      sleep, against the same sleep with no such map (the nodes' heartbeats);
 *   h) mailbox: payload word (the same value two rounds running), SCIFlush,
 *      flag (always the same value), SCIFlush, spin for the ack; the server
 *      checks the payload and clears both in its own memory before it acks.
 *      Rounds per second, wrong payloads;
 *   i) message ring, what a message-passing layer over SISCI does (issue 35):
 *      a ring of 16 slots in each side's segment; per message the sender
 *      memcpy's the payload (new data every message) into the receiver's
 *      slot through its remote map, stores a header (length, sequence) above
 *      it, then a flag word above that; the receiver spins on the flag in
 *      its own segment, checks every payload byte and stores its consumed
 *      counter (the ack) into the sender's segment through its own remote
 *      map; the sender spins on acks when the ring is full.  Plain loops, no
 *      call, and a variant with SCIFlush after the flag.  8 B .. 8 KiB;
 *      ping-pong (one-way latency) and streaming (messages per second), with
 *      the bytes that crossed the link per message;
 *   j) per trapped store: isolated 8-byte stores into clean pages of a
 *      remote map, one per millisecond: CPU of the storing thread and of the
 *      process per store, time in the store, and delay until the owner sees
 *      it, beside one RMA write (SCIMemCpy of the same 8 bytes) timed alike.
 *
 * Usage: remote_bench -server|-client -rn NODE [-quick] [-json FILE] [-s abcdefghij]
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
#include <sys/resource.h>
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
#define FL_OFF        32768u          /* f: 4 KiB store target (own page)    */
#define FL1_OFF       45056u          /* f: 1 B store target (own page)      */
#define MB_OFF        49152u          /* h: payload, flag at +8; ack (client) */
#define SPIN_SIZES    3               /* e: map sizes                        */
#define SPIN_SEGID    0x10u           /* e: segid + 0x10 + 2k (+1 client)    */
#define IDLE_SEGID    0x20u           /* g: segid + 0x20 (server)            */
#define IDLE_SIZE     (1ull << 30)    /* g: the idle map                     */
#define MB_FLAG       1ull            /* h: the flag's only value            */
#define MB_A          0x1111111111111111ull   /* h: the two payload values   */
#define MB_B          0x2222222222222222ull
#define ALL_SECTIONS  "abcdefghij"
#define RING_SEGID    0x30u           /* i: segid + 0x30 (server), +0x31 (client) */
#define RING_SLOTS    16u             /* i: messages in flight at most       */
#define RING_MAX      8192u           /* i: largest payload                  */
#define RING_STRIDE   (RING_MAX + 64u) /* i: one slot: payload, header, flag  */
#define RING_OFF      4096u           /* i: the ring; the ack word at 0      */
#define RING_SEG      (RING_OFF + RING_SLOTS * RING_STRIDE)
#define RING_SIZES    5
#define TS_SEGID      0x40u           /* j: segid + 0x40 (server)            */
#define TS_SIZE       (1u << 20)      /* j: 256 pages                        */
#define TS_PAGES      (TS_SIZE / 4096u)
#define TS_PACE_US    1000u           /* j: one store per millisecond        */

static const size_t spin_sizes[SPIN_SIZES] = { 4096, 16u << 20, 1u << 30 };
static const size_t fl_sizes[2] = { 1, 4096 };

static const unsigned di_sizes[2] = { 4, 1024 };
static const size_t ring_sizes[RING_SIZES] = { 8, 64, 256, 1024, 8192 };

/* Commands from the client to the server (high byte of a control value). */
enum {
    CMD_HELLO = 1, CMD_PP, CMD_BW_CHECK, CMD_VIS, CMD_INTR_SETUP, CMD_INTR_LOOP,
    CMD_INTR_END, CMD_DONE, CMD_SPIN_SETUP, CMD_SPIN_LOOP, CMD_SPIN_END, CMD_FLUSH_CHECK,
    CMD_IDLE_SETUP, CMD_IDLE_CHECK, CMD_IDLE_END, CMD_MBOX, CMD_RING_SETUP, CMD_RING_PP,
    CMD_RING_STREAM, CMD_RING_END, CMD_TS_SETUP, CMD_TS_RUN, CMD_TS_END
};
#define CMD(c, arg) (((uint64_t)(c) << 56) | (uint64_t)(arg))
#define HELLO_MAGIC 0x524246u         /* "RBF" */

enum { K_INTR, K_DINTR };

/* Sections (and the phases the JSON reports) */
enum { PH_SETUP, PH_PP, PH_BW, PH_VIS, PH_INTR, PH_SPIN, PH_FLUSH, PH_IDLE, PH_MBOX,
       PH_RING, PH_TS, PH_TEARDOWN, NPHASES };
static const char *const phase_names[NPHASES] = {
    "setup", "a: remote ping-pong", "b: remote write bandwidth",
    "c: store-to-visibility", "d: remote interrupts", "e: spinning ping-pong",
    "f: store + SCIFlush", "g: idle 1 GiB map", "h: mailbox", "i: message ring",
    "j: per trapped store", "teardown"
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

/* i: one row of the message ring */
typedef struct {
    size_t   size;              /* payload bytes                             */
    int      flush;             /* SCIFlush after the flag                   */
    lat_t    pp;                /* ping-pong: RTT/2                          */
    uint64_t pp_msgs;           /* messages in the timed ping-pong (2/round) */
    uint64_t pp_link;           /* link bytes (rx + tx) meanwhile; 0 = n/a   */
    uint32_t pp_late, pp_wrong;
    uint64_t st_msgs;           /* streaming: messages timed                 */
    double   st_secs;           /* first send to the last ack                */
    uint64_t st_link;
    uint32_t st_late, st_wrong;
    int      link_ok;           /* /proc/net/dev was readable               */
} ring_row_t;

/* j: one way of making an isolated 8-byte write */
typedef struct {
    lat_t    cpu;               /* thread CPU per store (not halved)         */
    lat_t    wall;              /* time spent in the store                   */
    lat_t    vis;               /* store to seen at the owner                */
    double   proc_cpu_us;       /* process CPU (all threads) per store       */
    uint32_t lost;              /* never seen by the owner                   */
    int      ran;
} ts_row_t;

/* g: what one sleep cost the client */
typedef struct {
    double   wall_s, cpu_s;     /* elapsed, and user + system CPU of the process */
    uint64_t rx, tx;            /* bytes on the namespace's non-loopback links */
    int      ok;                /* measured (/proc/net/dev readable)          */
} idle_t;

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
    int      spin_n;
    size_t   spin_size[SPIN_SIZES];
    lat_t    spin[SPIN_SIZES];                 /* bad = values neither old nor new */
    int      fl_n;
    lat_t    fl[2];                            /* per store + flush, not halved */
    int      fl_check[2];                      /* 1 ok, -1 mismatch             */
    int      idle_ran;
    double   idle_secs;
    idle_t   idle[2];                          /* 0: no map, 1: the 1 GiB map   */
    int      idle_check;                       /* 1 ok, -1 the byte is not there */
    int      mb_ran;
    lat_t    mb;                               /* per round, not halved         */
    uint32_t mb_rounds_total;                  /* warm-up + timed               */
    uint32_t mb_wrong;                         /* payloads the server saw wrong */
    uint32_t mb_ack_wrong;                     /* acks with an unexpected value */
    double   mb_elapsed_s;                     /* the timed rounds              */
    int      ring_n;
    ring_row_t ring[2 * RING_SIZES];           /* no call, then SCIFlush        */
    ts_row_t ts[3];                            /* store, SCIMemCpy, local floor */
    unsigned ts_count;
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
    char        sections[16];
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
    double      idle_secs;
    int         mb_warm, mb_min, mb_max;
    double      mb_budget;
    size_t      ring_sizes[RING_SIZES];
    int         n_ring;
    int         ring_warm, ring_min, ring_max;
    double      ring_budget;
    unsigned    ts_count;
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
/* Segments made for one section on both sides                             */
/* ------------------------------------------------------------------------ */

/* Remove a segment of ours that the peer was connected to: its disconnect
 * may still be on its way, so SCI_ERR_BUSY is retried for up to 5 s. */
static void remove_own_segment(sci_local_segment_t seg, sci_map_t map, const char *what)
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

/* e: a segment of each side, each mapped by the other. */
typedef struct {
    size_t                  size;
    sci_local_segment_t     seg;
    sci_map_t               lmap, rmap;
    sci_remote_segment_t    rseg;
    volatile unsigned char *local, *remote;
} xseg_t;

static void xseg_open(xseg_t *x, uint32_t base, size_t size)
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

static void xseg_close(xseg_t *x)
{
    sci_error_t e;
    SCIUnmapSegment(x->rmap, 0, &e);
    sci_check("SCIUnmapSegment (spinning ping-pong)", e);
    SCIDisconnectSegment(x->rseg, 0, &e);
    sci_check("SCIDisconnectSegment (spinning ping-pong)", e);
    ctl_send(0x5f);                          /* both disconnected */
    ctl_expect(0x5f, "spinning ping-pong teardown");
    remove_own_segment(x->seg, x->lmap, "SCIRemoveSegment (spinning ping-pong)");
}

/* The deadline of a plain spin: read the clock only every 16 Mi spins
 * (about 10 ms here); opt.timeout after the first reading. */
static inline int spin_late(uint64_t *n, uint64_t *deadline)
{
    if ((++*n & 0xffffff) != 0)
        return 0;
    uint64_t t = now_ns();
    if (*deadline == 0)
        *deadline = t + (uint64_t)(opt.timeout * 1e9);
    return t > *deadline;
}

/* A plain loop on a word of the own segment until it holds `want`: no
 * pause, no yield, no call.  A value that is neither the previous one
 * (want - 1) nor `want` is counted, once per distinct value seen. */
static inline uint32_t spin_until(const volatile uint32_t *w, uint32_t want, const char *what)
{
    uint32_t prev = want - 1, bad = 0, v;
    uint64_t n = 0, deadline = 0;
    while ((v = *w) != want) {
        if (v != prev) {
            bad++;
            prev = v;
        }
        if (spin_late(&n, &deadline))
            fail("%s: %u did not arrive within %.0f s (the word holds %u)", what, want,
                 opt.timeout, v);
    }
    return bad;
}

/* ------------------------------------------------------------------------ */
/* e) spinning ping-pong, no yields, by map size                            */
/* ------------------------------------------------------------------------ */

static xseg_t g_x;                       /* the server's, between commands */
static uint32_t g_spin_seq;              /* restarts with every map size    */

/* `count` round trips of the counter through the last 4 bytes of each
 * side's segment.  Returns the values that were neither old nor new. */
static uint64_t spin_loop(xseg_t *x, uint32_t count, uint64_t *samples)
{
    volatile uint32_t *out = (volatile uint32_t *)(x->remote + x->size - 4);
    const volatile uint32_t *in = (const volatile uint32_t *)(x->local + x->size - 4);
    uint64_t bad = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t s = ++g_spin_seq;
        if (!opt.server) {
            uint64_t a = now_ns();
            *out = s;
            bad += spin_until(in, s, "spinning ping-pong: the echo");
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += spin_until(in, s, "spinning ping-pong: the counter");
            *out = s;
        }
    }
    return bad;
}

static uint64_t spin_remote_loop(xseg_t *x, uint32_t count, uint64_t *samples)
{
    ctl_send(CMD(CMD_SPIN_LOOP, count));
    uint64_t bad = spin_loop(x, count, samples);
    return bad + ctl_recv();
}

static void section_spin(void)
{
    phase_begin(PH_SPIN);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.pp_max);
    for (int k = 0; k < SPIN_SIZES; k++) {
        xseg_t x;
        ctl_send(CMD(CMD_SPIN_SETUP, (uint64_t)k));
        g_spin_seq = 0;
        xseg_open(&x, opt.segid + SPIN_SEGID + 2u * (uint32_t)k, spin_sizes[k]);
        uint64_t t0 = now_ns();
        uint64_t bad = spin_remote_loop(&x, (uint32_t)opt.pp_warm, NULL);
        uint64_t warm_ns = now_ns() - t0;
        uint32_t n = pick_iters(warm_ns, opt.pp_warm, opt.pp_min, opt.pp_max, opt.pp_budget);
        bad += spin_remote_loop(&x, n, samples);
        R.spin_size[k] = spin_sizes[k];
        make_stats(&R.spin[k], samples, n, (uint32_t)bad, 2.0);
        R.spin_n = k + 1;
        ctl_send(CMD(CMD_SPIN_END, 0));
        xseg_close(&x);
    }
    munmap(samples, sizeof(uint64_t) * (size_t)opt.pp_max);
    phase_end(PH_SPIN);
}

/* ------------------------------------------------------------------------ */
/* f) store + SCIFlush                                                      */
/* ------------------------------------------------------------------------ */

static uint64_t g_fl_seq;

/* `count` times: 1 B (a new value each time) or a memcpy of `size` bytes
 * (the sequence number in the first 8, then a pattern that differs in every
 * byte from the previous copy's) into the server's inbox, then SCIFlush. */
static void flush_loop(size_t size, uint32_t count, uint64_t *samples, unsigned char *src[2])
{
    volatile unsigned char *dst = g_out + (size == 1 ? FL1_OFF : FL_OFF);
    for (uint32_t i = 0; i < count; i++) {
        uint64_t s = ++g_fl_seq;
        unsigned char *p = src[s & 1];
        if (size > 1)
            memcpy(p, &s, 8);
        uint64_t a = now_ns();
        if (size == 1)
            *dst = (unsigned char)s;
        else
            memcpy((void *)dst, p, size);
        SCIFlush(NULL, 0);
        uint64_t b = now_ns();
        if (samples)
            samples[i] = b - a;
    }
}

static void section_flush(void)
{
    phase_begin(PH_FLUSH);
    unsigned char *src[2] = { xalloc(4096), xalloc(4096) };
    memset(src[0], 0x5a, 4096);
    memset(src[1], 0xa5, 4096);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.pp_max);
    for (int d = 0; d < 2; d++) {
        size_t size = fl_sizes[d];
        uint64_t t0 = now_ns();
        flush_loop(size, (uint32_t)opt.pp_warm, NULL, src);
        uint64_t warm_ns = now_ns() - t0;
        uint32_t n = pick_iters(warm_ns, opt.pp_warm, opt.pp_min, opt.pp_max, opt.pp_budget);
        flush_loop(size, n, samples, src);
        /* The server's memory holds the last store (each one was flushed). */
        ctl_send(CMD(CMD_FLUSH_CHECK, size));
        ctl_send(size == 1 ? (uint64_t)(unsigned char)g_fl_seq
                           : hash_buf(src[g_fl_seq & 1], size));
        int ok = ctl_recv() == 1;
        make_stats(&R.fl[d], samples, n, ok ? 0 : n, 1.0);
        R.fl_check[d] = ok ? 1 : -1;
        R.fl_n = d + 1;
    }
    munmap(samples, sizeof(uint64_t) * (size_t)opt.pp_max);
    munmap(src[0], 4096);
    munmap(src[1], 4096);
    phase_end(PH_FLUSH);
}

static void server_flush_check(size_t size)
{
    uint64_t want = ctl_recv();
    int ok;
    if (size == 1)
        ok = g_in[FL1_OFF] == (unsigned char)want;
    else if (size == 4096)
        ok = hash_buf(g_in + FL_OFF, size) == want;
    else
        fail("flush check with a bad size %zu", size);
    ctl_send((uint64_t)ok);
}

/* ------------------------------------------------------------------------ */
/* g) an idle 1 GiB map                                                     */
/* ------------------------------------------------------------------------ */

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Bytes received and sent on every interface but lo, from /proc/net/dev
 * (which shows the network namespace of the process that reads it). */
static int net_bytes(uint64_t *rx, uint64_t *tx)
{
    FILE *f = fopen("/proc/net/dev", "r");
    if (!f)
        return 0;
    char line[512];
    *rx = *tx = 0;
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!c)
            continue;
        *c = 0;
        char *name = line;
        while (*name == ' ')
            name++;
        if (!strcmp(name, "lo"))
            continue;
        unsigned long long v[9];
        if (sscanf(c + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9) {
            *rx += v[0];
            *tx += v[8];
        }
    }
    fclose(f);
    return 1;
}

/* Sleep opt.idle_secs; what the process used meanwhile. */
static void idle_measure(idle_t *m)
{
    uint64_t rx0 = 0, tx0 = 0, rx1 = 0, tx1 = 0;
    double c0 = cpu_seconds();
    int ok = net_bytes(&rx0, &tx0);
    uint64_t t0 = now_ns(), due = t0 + (uint64_t)(opt.idle_secs * 1e9);
    struct timespec ts = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
    uint64_t t1 = now_ns();
    double c1 = cpu_seconds();
    ok = net_bytes(&rx1, &tx1) && ok;
    m->wall_s = (double)(t1 - t0) / 1e9;
    m->cpu_s = c1 - c0;
    m->rx = rx1 - rx0;
    m->tx = tx1 - tx0;
    m->ok = ok;
}

static void section_idle(void)
{
    sci_error_t e;
    sci_remote_segment_t rseg;
    sci_map_t rmap;
    phase_begin(PH_IDLE);
    R.idle_secs = opt.idle_secs;
    /* Let the previous section's threads go quiet, then the baseline: the
     * same sleep with no map but the two control inboxes (idle too). */
    usleep(500000);
    idle_measure(&R.idle[0]);
    ctl_send(CMD(CMD_IDLE_SETUP, 0));
    ctl_expect(CMD(CMD_IDLE_SETUP, 1), "idle map setup");
    connect_peer(opt.segid + IDLE_SEGID, IDLE_SIZE, &rseg);
    volatile unsigned char *p = SCIMapRemoteSegment(rseg, &rmap, 0, IDLE_SIZE, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (1 GiB)", e);
    unsigned char v = (unsigned char)(0x80 | (now_ns() & 0x7f));
    p[IDLE_SIZE / 2] = v;
    SCIFlush(NULL, 0);
    idle_measure(&R.idle[1]);
    ctl_send(CMD(CMD_IDLE_CHECK, v));
    R.idle_check = ctl_recv() == 1 ? 1 : -1;
    SCIUnmapSegment(rmap, 0, &e);
    sci_check("SCIUnmapSegment (1 GiB)", e);
    SCIDisconnectSegment(rseg, 0, &e);
    sci_check("SCIDisconnectSegment (1 GiB)", e);
    ctl_send(CMD(CMD_IDLE_END, 0));
    ctl_expect(CMD(CMD_IDLE_END, 1), "idle map teardown");
    R.idle_ran = 1;
    phase_end(PH_IDLE);
}

static sci_local_segment_t g_idle_seg;
static sci_map_t g_idle_lmap;
static volatile unsigned char *g_idle_local;

static void server_idle(int cmd, uint64_t arg)
{
    if (cmd == CMD_IDLE_SETUP) {
        g_idle_seg = make_segment(opt.segid + IDLE_SEGID, IDLE_SIZE, &g_idle_lmap, &g_idle_local);
        ctl_send(CMD(CMD_IDLE_SETUP, 1));
    } else if (cmd == CMD_IDLE_CHECK) {
        ctl_send(g_idle_local[IDLE_SIZE / 2] == (unsigned char)arg ? 1 : 0);
    } else {
        remove_own_segment(g_idle_seg, g_idle_lmap, "SCIRemoveSegment (1 GiB)");
        ctl_send(CMD(CMD_IDLE_END, 1));
    }
}

/* ------------------------------------------------------------------------ */
/* h) mailbox                                                               */
/* ------------------------------------------------------------------------ */

static uint32_t g_mb_round;

/* Round r's payload: the same value two rounds running, so every other
 * round stores again the value the server has just cleared. */
static inline uint64_t mb_value(uint32_t r)
{
    return (r >> 1) & 1 ? MB_A : MB_B;
}

/* `count` rounds.  Client: payload, SCIFlush, flag, SCIFlush into the
 * server's inbox, then a plain spin on the own inbox for the ack; returns
 * the acks with an unexpected value.  Server: a plain spin on the flag,
 * check the payload, clear both in its own memory, ack; returns the wrong
 * payloads. */
static uint32_t mb_loop(uint32_t count, uint64_t *samples, uint64_t *elapsed)
{
    uint32_t bad = 0;
    uint64_t start = now_ns();
    if (!opt.server) {
        volatile uint64_t *pl = (volatile uint64_t *)(g_out + MB_OFF), *fl = pl + 1;
        const volatile uint32_t *ack = (const volatile uint32_t *)(g_in + MB_OFF);
        for (uint32_t i = 0; i < count; i++) {
            uint32_t r = ++g_mb_round;
            uint64_t a = now_ns();
            *pl = mb_value(r);
            SCIFlush(NULL, 0);
            *fl = MB_FLAG;
            SCIFlush(NULL, 0);
            bad += spin_until(ack, r, "mailbox: the ack");
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        }
    } else {
        volatile uint64_t *pl = (volatile uint64_t *)(g_in + MB_OFF), *fl = pl + 1;
        volatile uint32_t *ack = (volatile uint32_t *)(g_out + MB_OFF);
        for (uint32_t i = 0; i < count; i++) {
            uint32_t r = ++g_mb_round;
            uint64_t n = 0, deadline = 0;
            while (*fl != MB_FLAG)
                if (spin_late(&n, &deadline))
                    fail("mailbox: the flag of round %u did not arrive within %.0f s", r,
                         opt.timeout);
            uint64_t got = *pl;
            if (got != mb_value(r) && ++bad <= 5)
                fprintf(stderr, "remote_bench server: mailbox round %u: payload 0x%llx, "
                        "expected 0x%llx\n", r, (unsigned long long)got,
                        (unsigned long long)mb_value(r));
            *fl = 0;
            *pl = 0;
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            *ack = r;
        }
    }
    if (elapsed)
        *elapsed = now_ns() - start;
    return bad;
}

static void section_mbox(void)
{
    phase_begin(PH_MBOX);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.mb_max);
    uint64_t warm_ns, el;
    ctl_send(CMD(CMD_MBOX, (uint64_t)opt.mb_warm));
    R.mb_ack_wrong = mb_loop((uint32_t)opt.mb_warm, NULL, &warm_ns);
    R.mb_wrong = (uint32_t)ctl_recv();
    uint32_t n = pick_iters(warm_ns, opt.mb_warm, opt.mb_min, opt.mb_max, opt.mb_budget);
    ctl_send(CMD(CMD_MBOX, n));
    R.mb_ack_wrong += mb_loop(n, samples, &el);
    R.mb_wrong += (uint32_t)ctl_recv();
    R.mb_rounds_total = (uint32_t)opt.mb_warm + n;
    R.mb_elapsed_s = (double)el / 1e9;
    make_stats(&R.mb, samples, n, R.mb_wrong, 1.0);
    R.mb_ran = 1;
    munmap(samples, sizeof(uint64_t) * (size_t)opt.mb_max);
    phase_end(PH_MBOX);
}

/* ------------------------------------------------------------------------ */
/* i) message ring                                                          */
/* ------------------------------------------------------------------------ */

/* Each side's ring segment: the ack word (the peer's consumed counter of the
 * messages this side sent) at 0, then RING_SLOTS slots of RING_STRIDE bytes.
 * A message of `len` bytes sits at the top of its slot: payload, then the
 * header {len, seq} above it, then the flag (= seq) in the slot's last
 * 8 bytes, the highest word of the message and stored last, as a transport
 * written for a write-combining PCIe window lays it out.  Sequences run on
 * across rows, so a flag is never seen twice in a slot. */
typedef struct {
    sci_local_segment_t     seg;
    sci_map_t               lmap, rmap;
    sci_remote_segment_t    rseg;
    volatile unsigned char *local, *remote;
    uint64_t                sent, rcvd;        /* my messages, the peer's    */
    unsigned char          *src;               /* the message being sent     */
} ring_t;

static ring_t g_ring;

/* Word i of message seq: new in every message. */
static inline uint64_t ring_word(uint64_t seq, size_t i)
{
    return (seq * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i * 0xd6e8feb86659fd93ull) ^
           0x5851f42d4c957f2dull;
}

static inline volatile unsigned char *ring_slot_end(volatile unsigned char *base, uint64_t seq)
{
    return base + RING_OFF + (seq % RING_SLOTS + 1) * RING_STRIDE;
}

static void ring_open(void)
{
    sci_error_t e;
    ring_t *r = &g_ring;
    uint32_t base = opt.segid + RING_SEGID;
    uint32_t mine = base + (opt.server ? 0 : 1), theirs = base + (opt.server ? 1 : 0);
    memset(r, 0, sizeof *r);
    r->seg = make_segment(mine, RING_SEG, &r->lmap, &r->local);
    connect_peer(theirs, RING_SEG, &r->rseg);
    r->remote = SCIMapRemoteSegment(r->rseg, &r->rmap, 0, RING_SEG, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (message ring)", e);
    r->src = xalloc(RING_MAX);
    ctl_send(0x6e);                          /* both mapped */
    ctl_expect(0x6e, "message ring setup");
}

static void ring_close(void)
{
    sci_error_t e;
    ring_t *r = &g_ring;
    SCIUnmapSegment(r->rmap, 0, &e);
    sci_check("SCIUnmapSegment (message ring)", e);
    SCIDisconnectSegment(r->rseg, 0, &e);
    sci_check("SCIDisconnectSegment (message ring)", e);
    ctl_send(0x6f);                          /* both disconnected */
    ctl_expect(0x6f, "message ring teardown");
    remove_own_segment(r->seg, r->lmap, "SCIRemoveSegment (message ring)");
    munmap(r->src, RING_MAX);
}

/* Send one message of `len` bytes: wait for a free slot (plain spin on the
 * ack word of the own segment), make the payload, copy it into the peer's
 * slot, store the header, then the flag; SCIFlush after it with `flush`. */
static inline void ring_send(ring_t *r, size_t len, int flush)
{
    uint64_t s = ++r->sent;
    const volatile uint64_t *ack = (const volatile uint64_t *)r->local;
    uint64_t n = 0, deadline = 0;
    while (s - *ack > RING_SLOTS)
        if (spin_late(&n, &deadline))
            fail("message ring: no free slot for message %llu within %.0f s (acked %llu)",
                 (unsigned long long)s, opt.timeout, (unsigned long long)*ack);
    uint64_t *w = (uint64_t *)r->src;
    for (size_t i = 0; i < len / 8; i++)
        w[i] = ring_word(s, i);
    volatile unsigned char *end = ring_slot_end(r->remote, s);
    memcpy((void *)(end - 16 - len), r->src, len);
    *(volatile uint64_t *)(end - 16) = (uint64_t)len | (s << 32);
    __atomic_store_n((uint64_t *)(end - 8), s, __ATOMIC_RELEASE);
    if (flush)
        SCIFlush(NULL, 0);
}

static inline int ring_ok(const volatile unsigned char *end, size_t len, uint64_t s)
{
    if (*(const volatile uint64_t *)(end - 16) != ((uint64_t)len | (s << 32)))
        return 0;
    const volatile uint64_t *p = (const volatile uint64_t *)(end - 16 - len);
    for (size_t i = 0; i < len / 8; i++)
        if (p[i] != ring_word(s, i))
            return 0;
    return 1;
}

/* Receive the next message: plain spin on its flag in the own segment,
 * check the header and every payload byte, store the ack (the consumed
 * counter) into the sender's segment.  Returns 0 if the message was right
 * when the flag showed, 1 if it completed within 0.5 s after (the flag
 * overtook part of it), 2 if it stayed wrong. */
static inline int ring_recv(ring_t *r, size_t len)
{
    uint64_t s = ++r->rcvd;
    const volatile unsigned char *end = ring_slot_end(r->local, s);
    uint64_t n = 0, deadline = 0;
    while (__atomic_load_n((const uint64_t *)(end - 8), __ATOMIC_ACQUIRE) != s)
        if (spin_late(&n, &deadline))
            fail("message ring: message %llu of %zu B did not arrive within %.0f s (the flag "
                 "holds %llu)", (unsigned long long)s, len, opt.timeout,
                 (unsigned long long)*(const volatile uint64_t *)(end - 8));
    int ret = 0;
    if (!ring_ok(end, len, s)) {
        ret = 2;
        uint64_t until = now_ns() + 500000000ull;
        while (now_ns() < until)
            if (ring_ok(end, len, s)) {
                ret = 1;
                break;
            }
        if (ret == 2)
            fprintf(stderr, "remote_bench %s: message ring: message %llu (%zu B) still wrong "
                    "0.5 s after its flag (header 0x%llx)\n", opt.server ? "server" : "client",
                    (unsigned long long)s, len,
                    (unsigned long long)*(const volatile uint64_t *)(end - 16));
    }
    *(volatile uint64_t *)r->remote = s;     /* the ack */
    return ret;
}

/* `count` round trips (client: send, then receive the echo; server: the
 * reverse).  Returns (late << 32) | wrong of the messages this side got. */
static uint64_t ring_pp_loop(size_t len, int flush, uint32_t count, uint64_t *samples)
{
    static const uint64_t add[3] = { 0, 1ull << 32, 1 };
    ring_t *r = &g_ring;
    uint64_t bad = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (!opt.server) {
            uint64_t a = now_ns();
            ring_send(r, len, flush);
            bad += add[ring_recv(r, len)];
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += add[ring_recv(r, len)];
            ring_send(r, len, flush);
        }
    }
    return bad;
}

/* Client: `count` messages as fast as the ring lets them go, then a spin
 * until the last is acknowledged (received and checked).  Server: receive
 * them.  Returns the server's (late << 32) | wrong. */
static uint64_t ring_stream_loop(size_t len, int flush, uint32_t count)
{
    static const uint64_t add[3] = { 0, 1ull << 32, 1 };
    ring_t *r = &g_ring;
    uint64_t bad = 0;
    if (!opt.server) {
        for (uint32_t i = 0; i < count; i++)
            ring_send(r, len, flush);
        const volatile uint64_t *ack = (const volatile uint64_t *)r->local;
        uint64_t n = 0, deadline = 0;
        while (*ack != r->sent)
            if (spin_late(&n, &deadline))
                fail("message ring: the last message (%llu) was not acknowledged within %.0f s "
                     "(acked %llu)", (unsigned long long)r->sent, opt.timeout,
                     (unsigned long long)*ack);
    } else {
        for (uint32_t i = 0; i < count; i++)
            bad += add[ring_recv(r, len)];
    }
    return bad;
}

/* Client: one command = one loop; returns the server's count of late and
 * wrong messages (for ping-pong plus this side's). */
static uint64_t ring_remote(int cmd, size_t len, int flush, uint32_t count, uint64_t *samples,
                            uint64_t *link, int *link_ok, double *secs)
{
    ctl_send(CMD(cmd, (uint64_t)len | ((uint64_t)flush << 32)));
    ctl_send(count);
    uint64_t rx0 = 0, tx0 = 0, rx1 = 0, tx1 = 0;
    int ok = net_bytes(&rx0, &tx0);
    uint64_t t0 = now_ns(), bad = 0;
    if (cmd == CMD_RING_PP)
        bad = ring_pp_loop(len, flush, count, samples);
    else
        bad = ring_stream_loop(len, flush, count);
    uint64_t t1 = now_ns();
    ok = net_bytes(&rx1, &tx1) && ok;
    if (link)
        *link = ok ? (rx1 - rx0) + (tx1 - tx0) : 0;
    if (link_ok)
        *link_ok = ok;
    if (secs)
        *secs = (double)(t1 - t0) / 1e9;
    return bad + ctl_recv();
}

static void section_ring(void)
{
    phase_begin(PH_RING);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.ring_max);
    ctl_send(CMD(CMD_RING_SETUP, 0));
    ring_open();
    R.ring_n = 0;
    for (int flush = 0; flush < 2; flush++) {
        for (int k = 0; k < opt.n_ring; k++) {
            size_t len = opt.ring_sizes[k];
            ring_row_t *row = &R.ring[R.ring_n];
            memset(row, 0, sizeof *row);
            row->size = len;
            row->flush = flush;
            /* ping-pong: warm-up, then as many round trips as fit the budget */
            uint64_t t0 = now_ns();
            ring_remote(CMD_RING_PP, len, flush, (uint32_t)opt.ring_warm, NULL, NULL, NULL, NULL);
            uint32_t n = pick_iters(now_ns() - t0, opt.ring_warm, opt.ring_min, opt.ring_max,
                                    opt.ring_budget);
            uint64_t bad = ring_remote(CMD_RING_PP, len, flush, n, samples, &row->pp_link,
                                       &row->link_ok, NULL);
            row->pp_wrong = (uint32_t)bad;
            row->pp_late = (uint32_t)(bad >> 32);
            row->pp_msgs = 2ull * n;
            make_stats(&row->pp, samples, n, row->pp_wrong, 2.0);
            /* streaming: the same, window = the ring */
            t0 = now_ns();
            ring_remote(CMD_RING_STREAM, len, flush, (uint32_t)opt.ring_warm, NULL, NULL, NULL,
                        NULL);
            n = pick_iters(now_ns() - t0, opt.ring_warm, opt.ring_min, opt.ring_max,
                           opt.ring_budget);
            bad = ring_remote(CMD_RING_STREAM, len, flush, n, NULL, &row->st_link, NULL,
                              &row->st_secs);
            row->st_wrong = (uint32_t)bad;
            row->st_late = (uint32_t)(bad >> 32);
            row->st_msgs = n;
            R.ring_n++;
        }
    }
    ctl_send(CMD(CMD_RING_END, 0));
    ring_close();
    munmap(samples, sizeof(uint64_t) * (size_t)opt.ring_max);
    phase_end(PH_RING);
}

static void server_ring(int cmd, uint64_t arg)
{
    if (cmd == CMD_RING_SETUP) {
        g_phase = PH_RING;
        ring_open();
        return;
    }
    if (cmd == CMD_RING_END) {
        ring_close();
        return;
    }
    size_t len = (size_t)(arg & 0xffffffffu);
    int flush = (int)((arg >> 32) & 1);
    if (len < 8 || len > RING_MAX || len % 8)
        fail("message ring command with a bad size %zu", len);
    uint32_t count = (uint32_t)ctl_recv();
    if (cmd == CMD_RING_PP)
        ctl_send(ring_pp_loop(len, flush, count, NULL));
    else
        ctl_send(ring_stream_loop(len, flush, count));
}

/* ------------------------------------------------------------------------ */
/* j) per trapped store                                                     */
/* ------------------------------------------------------------------------ */

enum { TS_STORE, TS_MEMCPY, TS_LOCAL };

static inline uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Where write i of a variant goes: stores in pages 0..127, SCIMemCpy in
 * 128..255, each page used once every 128 writes (128 ms), a new word of it
 * each time, so every store is the first since the page's last shipment. */
static inline size_t ts_off(int variant, unsigned i)
{
    unsigned half = TS_PAGES / 2;
    unsigned page = (variant == TS_MEMCPY ? half : 0) + i % half;
    return (size_t)page * 4096 + (size_t)((i / half) % 512) * 8;
}

static sci_local_segment_t g_ts_seg;         /* server */
static sci_map_t g_ts_lmap;
static volatile unsigned char *g_ts_local;

/* Client: `count` isolated writes of a CLOCK_MONOTONIC time stamp, one
 * every TS_PACE_US, into the server's segment (TS_STORE: a plain 8-byte
 * store through the map; TS_MEMCPY: SCIMemCpy of the same 8 bytes; TS_LOCAL:
 * a store into private memory, the floor of the timing itself). */
static void ts_run(int variant, sci_map_t rmap, volatile unsigned char *rem, ts_row_t *row,
                   uint64_t *cpu, uint64_t *wall, volatile uint64_t *priv)
{
    unsigned count = opt.ts_count;
    if (variant != TS_LOCAL) {
        ctl_send(CMD(CMD_TS_RUN, (uint64_t)variant));
        ctl_send(count);
    }
    double pc0 = cpu_seconds();
    uint64_t t0 = now_ns();
    for (unsigned i = 0; i < count; i++) {
        uint64_t due = t0 + (uint64_t)(i + 1) * TS_PACE_US * 1000ull;
        struct timespec ts = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        size_t off = ts_off(variant, i);
        uint64_t c0 = thread_cpu_ns();
        uint64_t w0 = now_ns();
        if (variant == TS_STORE) {
            *(volatile uint64_t *)(rem + off) = w0;
        } else if (variant == TS_MEMCPY) {
            sci_error_t e;
            SCIMemCpy(NULL, &w0, rmap, (unsigned)off, 8, 0, &e);
            sci_check("SCIMemCpy (8 B time stamp)", e);
        } else {
            priv[off / 8] = w0;
        }
        uint64_t w1 = now_ns();
        uint64_t c1 = thread_cpu_ns();
        cpu[i] = c1 - c0;
        wall[i] = w1 - w0;
    }
    double pc1 = cpu_seconds();
    make_stats(&row->cpu, cpu, count, 0, 1.0);
    make_stats(&row->wall, wall, count, 0, 1.0);
    row->proc_cpu_us = (pc1 - pc0) * 1e6 / count;
    row->ran = 1;
    if (variant == TS_LOCAL)
        return;
    SCIFlush(NULL, 0);
    ctl_send(0x7a);                          /* done: the server counts what is missing */
    /* The server's figures: seen, lost, median, p99, mean, min, max (ns),
     * then the NB + 1 histogram buckets. */
    uint32_t seen = (uint32_t)ctl_recv();
    row->lost = (uint32_t)ctl_recv();
    lat_t *v = &row->vis;
    memset(v, 0, sizeof *v);
    v->n = seen;
    v->bad = row->lost;
    v->med = (double)ctl_recv() / 1e3;
    v->p99 = (double)ctl_recv() / 1e3;
    v->mean = (double)ctl_recv() / 1e3;
    v->min = (double)ctl_recv() / 1e3;
    v->max = (double)ctl_recv() / 1e3;
    for (int b = 0; b <= NB; b++)
        v->hist[b] = (uint32_t)ctl_recv();
}

static void section_ts(void)
{
    sci_error_t e;
    sci_remote_segment_t rseg;
    sci_map_t rmap;
    phase_begin(PH_TS);
    ctl_send(CMD(CMD_TS_SETUP, 0));
    ctl_expect(CMD(CMD_TS_SETUP, 1), "per-store setup");
    connect_peer(opt.segid + TS_SEGID, TS_SIZE, &rseg);
    volatile unsigned char *rem = SCIMapRemoteSegment(rseg, &rmap, 0, TS_SIZE, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (per-store)", e);
    uint64_t *cpu = xalloc(sizeof(uint64_t) * opt.ts_count);
    uint64_t *wall = xalloc(sizeof(uint64_t) * opt.ts_count);
    volatile uint64_t *priv = xalloc(TS_SIZE);
    R.ts_count = opt.ts_count;
    ts_run(TS_LOCAL, rmap, rem, &R.ts[TS_LOCAL], cpu, wall, priv);
    ts_run(TS_STORE, rmap, rem, &R.ts[TS_STORE], cpu, wall, priv);
    ts_run(TS_MEMCPY, rmap, rem, &R.ts[TS_MEMCPY], cpu, wall, priv);
    SCIUnmapSegment(rmap, 0, &e);
    sci_check("SCIUnmapSegment (per-store)", e);
    SCIDisconnectSegment(rseg, 0, &e);
    sci_check("SCIDisconnectSegment (per-store)", e);
    ctl_send(CMD(CMD_TS_END, 0));
    ctl_expect(CMD(CMD_TS_END, 1), "per-store teardown");
    munmap(cpu, sizeof(uint64_t) * opt.ts_count);
    munmap(wall, sizeof(uint64_t) * opt.ts_count);
    munmap((void *)priv, TS_SIZE);
    phase_end(PH_TS);
}

/* Server: spin (plain loop) on the slot of each write in turn, in the own
 * segment, and note when it shows; stop at the client's "done". */
static void server_ts_run(int variant)
{
    uint32_t count = (uint32_t)ctl_recv();
    uint64_t *d = xalloc(sizeof(uint64_t) * (count ? count : 1));
    uint32_t seen = 0, lost = 0;
    int done = 0;
    for (uint32_t i = 0; i < count; i++) {
        const volatile uint64_t *w = (const volatile uint64_t *)(g_ts_local + ts_off(variant, i));
        uint64_t v, n = 0, deadline = 0;
        /* The client's "done" follows an SCIFlush: a write not there at a
         * read made after "done" was seen never arrived. */
        for (;;) {
            if ((v = *w) != 0 || done)
                break;
            if ((done = ctl_ready()))
                continue;
            if (spin_late(&n, &deadline))
                fail("per-store: write %u did not arrive within %.0f s", i, opt.timeout);
        }
        if (v == 0) {
            lost++;                          /* the client is done and it never came */
            continue;
        }
        uint64_t t = now_ns();
        d[seen++] = t > v ? t - v : 0;
        *(volatile uint64_t *)w = 0;         /* the slot is used again 512 rounds later */
    }
    ctl_expect(0x7a, "per-store done");
    lat_t L;
    make_stats(&L, d, seen, lost, 1.0);
    ctl_send(seen);
    ctl_send(lost);
    ctl_send((uint64_t)(L.med * 1e3));
    ctl_send((uint64_t)(L.p99 * 1e3));
    ctl_send((uint64_t)(L.mean * 1e3));
    ctl_send((uint64_t)(L.min * 1e3));
    ctl_send((uint64_t)(L.max * 1e3));
    /* 38 messages in a row: the client reads them as they come, and the
     * control ring has 64 slots. */
    for (int b = 0; b <= NB; b++)
        ctl_send(L.hist[b]);
    munmap(d, sizeof(uint64_t) * (count ? count : 1));
}

static void server_ts(int cmd, uint64_t arg)
{
    g_phase = PH_TS;
    if (cmd == CMD_TS_SETUP) {
        g_ts_seg = make_segment(opt.segid + TS_SEGID, TS_SIZE, &g_ts_lmap, &g_ts_local);
        ctl_send(CMD(CMD_TS_SETUP, 1));
    } else if (cmd == CMD_TS_RUN) {
        if (arg != TS_STORE && arg != TS_MEMCPY)
            fail("per-store command with a bad variant %llu", (unsigned long long)arg);
        server_ts_run((int)arg);
    } else {
        remove_own_segment(g_ts_seg, g_ts_lmap, "SCIRemoveSegment (per-store)");
        ctl_send(CMD(CMD_TS_END, 1));
    }
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
        case CMD_SPIN_SETUP:
            g_phase = PH_SPIN;
            if (arg >= SPIN_SIZES)
                fail("spinning ping-pong command with a bad size index %llu",
                     (unsigned long long)arg);
            g_spin_seq = 0;
            xseg_open(&g_x, opt.segid + SPIN_SEGID + 2u * (uint32_t)arg, spin_sizes[arg]);
            break;
        case CMD_SPIN_LOOP:
            ctl_send(spin_loop(&g_x, (uint32_t)arg, NULL));
            break;
        case CMD_SPIN_END:
            xseg_close(&g_x);
            break;
        case CMD_FLUSH_CHECK:
            g_phase = PH_FLUSH;
            server_flush_check((size_t)arg);
            break;
        case CMD_IDLE_SETUP:
        case CMD_IDLE_CHECK:
        case CMD_IDLE_END:
            g_phase = PH_IDLE;
            server_idle((int)(c >> 56), arg);
            break;
        case CMD_MBOX:
            g_phase = PH_MBOX;
            ctl_send(mb_loop((uint32_t)arg, NULL, NULL));
            break;
        case CMD_RING_SETUP:
        case CMD_RING_PP:
        case CMD_RING_STREAM:
        case CMD_RING_END:
            server_ring((int)(c >> 56), arg);
            break;
        case CMD_TS_SETUP:
        case CMD_TS_RUN:
        case CMD_TS_END:
            server_ts((int)(c >> 56), arg);
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
    if (want('e') && R.ran[PH_SPIN]) {
        printf("\n[e] spinning ping-pong, no yields: each side has a segment of the map size\n"
               "    and maps the other's whole segment; a 4-byte counter is stored into the\n"
               "    last 4 bytes of the peer's segment (plain store, no SISCI call) and each\n"
               "    side spins on its own segment in a plain loop (no pause, no sched_yield).\n"
               "    RTT/2 in microseconds.  \"wrong\": a value that was neither the previous\n"
               "    counter nor the expected one.\n");
        printf("  %9s %9s %9s %9s %9s %8s\n", "map", "median", "p99", "mean", "max", "n");
        for (int k = 0; k < R.spin_n; k++) {
            printf("  %9s", fmt_size(R.spin_size[k], b1, sizeof b1));
            lat_cells(&R.spin[k]);
            printf(" %8u", R.spin[k].n);
            if (R.spin[k].bad)
                printf("   !! %u wrong values", R.spin[k].bad);
            printf("\n");
        }
    }
    if (want('f') && R.ran[PH_FLUSH]) {
        printf("\n[f] store + SCIFlush: 1 B (a new value each time), or a memcpy of 4 KiB of new\n"
               "    data, into the server's segment through the remote map, then\n"
               "    SCIFlush(NULL, 0).  Microseconds per store + flush (not halved).\n");
        printf("  %9s %9s %9s %9s %9s %8s  %s\n", "size", "median", "p99", "mean", "max", "n",
               "check");
        for (int d = 0; d < R.fl_n; d++) {
            printf("  %9s", fmt_size(fl_sizes[d], b1, sizeof b1));
            lat_cells(&R.fl[d]);
            printf(" %8u  %s\n", R.fl[d].n, R.fl_check[d] > 0
                   ? "the server holds the last store"
                   : "!! the server does NOT hold the last store");
        }
    }
    if (want('g') && R.ran[PH_IDLE] && R.idle_ran) {
        printf("\n[g] idle map: the client maps the server's 1 GiB segment, stores one byte,\n"
               "    SCIFlush, then sleeps %.0f s.  CPU of the client process during the sleep\n"
               "    (getrusage, user + system) and bytes on its namespace's non-loopback\n"
               "    links (/proc/net/dev, received + sent), against the same sleep with no\n"
               "    such map (the nodes' heartbeats).\n", R.idle_secs);
        printf("  %-22s %8s %10s %8s %12s %12s %10s\n", "", "sleep s", "CPU ms", "CPU %",
               "rx bytes", "tx bytes", "B/s");
        static const char *const names[2] = { "no map (heartbeats)", "1 GiB map" };
        for (int i = 0; i < 2; i++) {
            const idle_t *m = &R.idle[i];
            printf("  %-22s %8.2f %10.2f %8.3f", names[i], m->wall_s, m->cpu_s * 1e3,
                   m->wall_s > 0 ? 100.0 * m->cpu_s / m->wall_s : 0.0);
            if (m->ok)
                printf(" %12llu %12llu %10.1f\n", (unsigned long long)m->rx,
                       (unsigned long long)m->tx,
                       m->wall_s > 0 ? (double)(m->rx + m->tx) / m->wall_s : 0.0);
            else
                printf(" %12s %12s %10s\n", "-", "-", "-");
        }
        printf("  data check: %s\n", R.idle_check > 0
               ? "the server holds the byte stored before the sleep"
               : "!! the server does NOT hold the byte stored before the sleep");
    }
    if (want('h') && R.ran[PH_MBOX] && R.mb_ran) {
        printf("\n[h] mailbox: payload word (the same value two rounds running), SCIFlush, flag\n"
               "    (always 1), SCIFlush into the server's segment, then a plain spin on the own\n"
               "    segment for the ack; the server spins on the flag, checks the payload,\n"
               "    clears flag and payload in its own memory and acks through its map.\n");
        printf("  rounds %u timed (%u in all) in %.3f s: %.0f rounds/s, %.2f us per round;\n"
               "  per round median %.2f us, p99 %.2f us, max %.2f us\n",
               R.mb.n, R.mb_rounds_total, R.mb_elapsed_s,
               R.mb_elapsed_s > 0 ? R.mb.n / R.mb_elapsed_s : 0.0,
               R.mb.n ? R.mb_elapsed_s * 1e6 / R.mb.n : 0.0, R.mb.med, R.mb.p99, R.mb.max);
        printf("  wrong payloads: %u%s", R.mb_wrong, R.mb_wrong ? "   !! (must be 0)" : "");
        if (R.mb_ack_wrong)
            printf("   !! %u acks with an unexpected value", R.mb_ack_wrong);
        printf("\n");
    }
    if (want('i') && R.ran[PH_RING] && R.ring_n) {
        printf("\n[i] message ring (%u slots): per message a memcpy of new data into the\n"
               "    receiver's slot through the remote map, a header {length, sequence} above\n"
               "    it, then a flag above that; the receiver spins on the flag in its own\n"
               "    segment, checks every byte and stores its consumed counter into the\n"
               "    sender's segment through its map.  Plain spin loops, no call (or SCIFlush\n"
               "    after the flag).  Ping-pong: one way = RTT/2, us.  Streaming: messages\n"
               "    per second from the first send to the ack of the last.  Link: bytes on\n"
               "    the namespace's links (both ways) per message.\n", RING_SLOTS);
        printf("  %-9s %7s %9s %9s %8s %10s %9s %10s %9s\n", "variant", "size", "median",
               "p99", "n", "B/msg pp", "msg/s", "MB/s", "B/msg st");
        for (int i = 0; i < R.ring_n; i++) {
            const ring_row_t *r = &R.ring[i];
            double rate = r->st_secs > 0 ? (r->st_msgs - r->st_wrong) / r->st_secs : 0.0;
            printf("  %-9s %7s %9.2f %9.2f %8u", r->flush ? "SCIFlush" : "no call",
                   fmt_size(r->size, b1, sizeof b1), r->pp.med, r->pp.p99, r->pp.n);
            if (r->link_ok)
                printf(" %10.0f", r->pp_msgs ? (double)r->pp_link / r->pp_msgs : 0.0);
            else
                printf(" %10s", "-");
            printf(" %9.0f %10.2f", rate, rate * r->size / 1e6);
            if (r->link_ok)
                printf(" %9.0f", r->st_msgs ? (double)r->st_link / r->st_msgs : 0.0);
            else
                printf(" %9s", "-");
            if (r->pp_late || r->st_late)
                printf("   %u flag before payload", r->pp_late + r->st_late);
            if (r->pp_wrong || r->st_wrong)
                printf("   !! %u wrong messages", r->pp_wrong + r->st_wrong);
            printf("\n");
        }
    }
    if (want('j') && R.ran[PH_TS] && R.ts[TS_STORE].ran) {
        static const char *const what[3] = { "store 8 B", "SCIMemCpy 8 B", "local store" };
        printf("\n[j] per trapped store: %u isolated 8-byte writes, one every %u us, each into a\n"
               "    page not written since its last shipment.  CPU of the writing thread\n"
               "    (CLOCK_THREAD_CPUTIME_ID) and of the whole process (getrusage) per write,\n"
               "    time in the write, and the delay until the owner (spinning on its own\n"
               "    segment) sees the value.  \"local store\": the same into private memory.\n",
               R.ts_count, TS_PACE_US);
        printf("  %-14s %16s %12s %16s %20s %6s\n", "what", "thread CPU med/mean", "proc CPU",
               "in write med/p99", "to owner med/p99", "lost");
        for (int k = 0; k < 3; k++) {
            const ts_row_t *t = &R.ts[k];
            if (!t->ran)
                continue;
            printf("  %-14s %8.2f/%7.2f %12.2f %8.2f/%7.2f", what[k], t->cpu.med, t->cpu.mean,
                   t->proc_cpu_us, t->wall.med, t->wall.p99);
            if (k != TS_LOCAL)
                printf(" %10.2f/%9.2f %6u", t->vis.med, t->vis.p99, t->lost);
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
    fputs("\n  ]},\n", f);

    fputs("  \"spin_pingpong\": {\"vsci\": \"4-byte counter stored into the last 4 bytes of the "
          "peer's segment (map of its whole segment), no SISCI call; plain spin on the own "
          "segment, no pause, no yield; RTT/2; bad = values neither old nor new\", \"rows\": [", f);
    for (int k = 0; k < R.spin_n; k++) {
        fprintf(f, "%s\n    {\"map_size\": %zu, \"vsci\": ", k ? "," : "", R.spin_size[k]);
        json_lat(f, &R.spin[k]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"store_flush\": {\"vsci\": \"1 B store (new value) or memcpy of 4 KiB of new data "
          "into the server's segment through the remote map, then SCIFlush(NULL, 0); time per "
          "store + flush, not halved\", \"rows\": [", f);
    for (int d = 0; d < R.fl_n; d++) {
        fprintf(f, "%s\n    {\"size\": %zu, \"data_check\": \"%s\", \"vsci\": ", d ? "," : "",
                fl_sizes[d], R.fl_check[d] > 0 ? "ok" : "mismatch");
        json_lat(f, &R.fl[d]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"idle_map\": ", f);
    if (R.idle_ran) {
        fprintf(f, "{\"vsci\": \"map of the server's 1 GiB segment, one byte stored + SCIFlush, "
                   "then a sleep: CPU of the client process (getrusage RUSAGE_SELF) and bytes on "
                   "its namespace's non-loopback links (/proc/net/dev) during the sleep; no_map: "
                   "the same sleep without that map (the nodes' heartbeats)\", \"map_size\": "
                   "%llu, \"seconds\": ", (unsigned long long)IDLE_SIZE);
        json_num(f, R.idle_secs);
        fprintf(f, ", \"data_check\": \"%s\"", R.idle_check > 0 ? "ok" : "mismatch");
        static const char *const keys[2] = { "no_map", "map" };
        for (int i = 0; i < 2; i++) {
            const idle_t *m = &R.idle[i];
            fprintf(f, ", \"%s\": {\"wall_s\": ", keys[i]);
            json_num(f, m->wall_s);
            fputs(", \"cpu_s\": ", f);
            json_num(f, m->cpu_s);
            fputs(", \"cpu_pct\": ", f);
            json_num(f, m->wall_s > 0 ? 100.0 * m->cpu_s / m->wall_s : NAN);
            if (m->ok)
                fprintf(f, ", \"rx_bytes\": %llu, \"tx_bytes\": %llu, \"link_bytes\": %llu}",
                        (unsigned long long)m->rx, (unsigned long long)m->tx,
                        (unsigned long long)(m->rx + m->tx));
            else
                fputs(", \"rx_bytes\": null, \"tx_bytes\": null, \"link_bytes\": null}", f);
        }
        fputs("},\n", f);
    } else {
        fputs("null,\n", f);
    }

    fputs("  \"message_ring\": ", f);
    if (R.ring_n) {
        fprintf(f, "{\"vsci\": \"ring of %u slots in each side's segment; per message a memcpy "
                   "of new data into the receiver's slot through the remote map, a header "
                   "{length, sequence} above it, then a flag word above that (plus SCIFlush "
                   "when flush is true); the receiver spins on the flag in its own segment, "
                   "checks every byte and stores its consumed counter into the sender's segment "
                   "through its own map (never flushed); plain spin loops\", \"slots\": %u, "
                   "\"slot_stride\": %u, \"link\": \"bytes received + sent on the client "
                   "namespace's non-loopback links (/proc/net/dev) during the timed loop, per "
                   "message (ping-pong: 2 messages per round trip; streaming: the messages sent, "
                   "acks are overhead)\", \"rows\": [", RING_SLOTS, RING_SLOTS, RING_STRIDE);
        for (int i = 0; i < R.ring_n; i++) {
            const ring_row_t *r = &R.ring[i];
            fprintf(f, "%s\n    {\"size\": %zu, \"flush\": %s, \"pingpong\": ", i ? "," : "",
                    r->size, r->flush ? "true" : "false");
            json_lat(f, &r->pp);
            fprintf(f, ", \"pp_messages\": %llu, \"pp_late\": %u, \"pp_wrong\": %u, "
                       "\"pp_link_bytes\": ", (unsigned long long)r->pp_msgs, r->pp_late,
                    r->pp_wrong);
            if (r->link_ok)
                fprintf(f, "%llu, \"pp_link_bytes_per_msg\": ", (unsigned long long)r->pp_link);
            else
                fputs("null, \"pp_link_bytes_per_msg\": ", f);
            json_num(f, r->link_ok && r->pp_msgs ? (double)r->pp_link / r->pp_msgs : NAN);
            fprintf(f, ", \"stream_messages\": %llu, \"stream_seconds\": ",
                    (unsigned long long)r->st_msgs);
            json_num(f, r->st_secs);
            fputs(", \"msgs_per_s\": ", f);
            /* only messages that arrived right count */
            double rate = r->st_secs > 0 ? (r->st_msgs - r->st_wrong) / r->st_secs : NAN;
            json_num(f, rate);
            fputs(", \"MBps\": ", f);
            json_num(f, rate * r->size / 1e6);
            fprintf(f, ", \"stream_late\": %u, \"stream_wrong\": %u, \"stream_link_bytes\": ",
                    r->st_late, r->st_wrong);
            if (r->link_ok)
                fprintf(f, "%llu, \"stream_link_bytes_per_msg\": ", (unsigned long long)r->st_link);
            else
                fputs("null, \"stream_link_bytes_per_msg\": ", f);
            json_num(f, r->link_ok && r->st_msgs ? (double)r->st_link / r->st_msgs : NAN);
            fputs("}", f);
        }
        fputs("\n  ]},\n", f);
    } else {
        fputs("null,\n", f);
    }

    fputs("  \"trapped_store\": ", f);
    if (R.ts[TS_STORE].ran) {
        static const char *const keys[3] = { "store", "scimemcpy", "local_store" };
        fprintf(f, "{\"vsci\": \"isolated 8-byte writes of a CLOCK_MONOTONIC time stamp, one "
                   "every pace_us, each into a page of the server's segment not written since "
                   "its last shipment: store = a plain store through the remote map, scimemcpy = "
                   "SCIMemCpy of the same 8 bytes (one RMA write), local_store = a store into "
                   "private memory (the floor of the timing); cpu = CPU of the writing thread "
                   "per write (CLOCK_THREAD_CPUTIME_ID), process_cpu_us = CPU of the whole "
                   "process (getrusage) over the run per write, wall = time in the write, "
                   "visibility = from just before the write until the server, spinning on its "
                   "own segment, saw the value\", \"count\": %u, \"pace_us\": %u",
                R.ts_count, TS_PACE_US);
        for (int k = 0; k < 3; k++) {
            const ts_row_t *t = &R.ts[k];
            fprintf(f, ", \"%s\": ", keys[k]);
            if (!t->ran) {
                fputs("null", f);
                continue;
            }
            fputs("{\"cpu\": ", f);
            json_lat(f, &t->cpu);
            fputs(", \"process_cpu_us\": ", f);
            json_num(f, t->proc_cpu_us);
            fputs(", \"wall\": ", f);
            json_lat(f, &t->wall);
            if (k != TS_LOCAL) {
                fprintf(f, ", \"lost\": %u, \"visibility\": ", t->lost);
                json_lat(f, &t->vis);
            }
            fputs("}", f);
        }
        fputs("},\n", f);
    } else {
        fputs("null,\n", f);
    }

    fputs("  \"mailbox\": ", f);
    if (R.mb_ran) {
        fprintf(f, "{\"vsci\": \"payload word (same value two rounds running) + SCIFlush, flag "
                   "(always 1) + SCIFlush into the server's segment, plain spin for the ack; the "
                   "server checks the payload and clears flag and payload in its own memory, "
                   "then acks through its map\", \"rounds\": %u, \"rounds_total\": %u, "
                   "\"wrong_payloads\": %u, \"wrong_acks\": %u, \"seconds\": ",
                R.mb.n, R.mb_rounds_total, R.mb_wrong, R.mb_ack_wrong);
        json_num(f, R.mb_elapsed_s);
        fputs(", \"rounds_per_s\": ", f);
        json_num(f, R.mb_elapsed_s > 0 ? R.mb.n / R.mb_elapsed_s : NAN);
        fputs(", \"us_per_round\": ", f);
        json_num(f, R.mb.n ? R.mb_elapsed_s * 1e6 / R.mb.n : NAN);
        fputs(", \"round\": ", f);
        json_lat(f, &R.mb);
        fputs("}\n}\n", f);
    } else {
        fputs("null\n}\n", f);
    }
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
        "  -s SECTIONS   client: run only these sections (default abcdefghij): a ping-pong,\n"
        "                b write bandwidth, c store-to-visibility, d interrupts,\n"
        "                e spinning ping-pong (no yields) by map size, f store + SCIFlush,\n"
        "                g idle 1 GiB map, h mailbox, i message ring, j per trapped store\n"
        "  -id SEGID     segment id base (default 0x%x; the server uses SEGID and\n"
        "                SEGID+2, the client SEGID+1; e, g, i, j use SEGID+0x10..0x40)\n"
        "  -timeout S    longest wait for the other side (default 60 s)\n"
        "  -yield N      sched_yield() after every N busy-wait spins (default 64; 0 = never;\n"
        "                sections e, h, i and j spin in plain loops whatever it says)\n"
        "  -same-node    the other side is on this node too (a guest of it, or a host\n"
        "                process next to a guest): -rn may name this node\n"
        "  -bw-from B    bandwidth from B bytes (power of two >= 4; default 65536)\n"
        "Each side's VSCI_SOCKET names its node; the nodes are in one cluster.\n",
        DEFAULT_SEGID);
}

static void setup_options(void)
{
    opt.n_pp = opt.n_bw = opt.n_ring = 0;
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
        opt.idle_secs = 5;
        opt.mb_warm = 20;  opt.mb_min = 100; opt.mb_max = 1000; opt.mb_budget = 0.2;
        static const size_t r[] = { 8, 1024, 8192 };
        for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
            opt.ring_sizes[opt.n_ring++] = r[i];
        opt.ring_warm = 20; opt.ring_min = 100; opt.ring_max = 1000; opt.ring_budget = 0.1;
        opt.ts_count = 200;
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
        opt.idle_secs = 10;
        opt.mb_warm = 200; opt.mb_min = 1000; opt.mb_max = 50000; opt.mb_budget = 2.0;
        for (int i = 0; i < RING_SIZES; i++)
            opt.ring_sizes[opt.n_ring++] = ring_sizes[i];
        opt.ring_warm = 100; opt.ring_min = 500; opt.ring_max = 20000; opt.ring_budget = 0.5;
        opt.ts_count = 1000;
    }
}

int main(int argc, char **argv)
{
    int role = -1, have_rn = 0;
    snprintf(opt.sections, sizeof opt.sections, ALL_SECTIONS);
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
            if (!parse_sections_of(s, ALL_SECTIONS, opt.sections, sizeof opt.sections)) {
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
    if (want('e'))
        section_spin();
    if (want('f'))
        section_flush();
    if (want('g'))
        section_idle();
    if (want('h'))
        section_mbox();
    if (want('i'))
        section_ring();
    if (want('j'))
        section_ts();
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
    for (int k = 0; k < R.spin_n; k++)
        wrong |= R.spin[k].bad != 0;
    for (int d = 0; d < R.fl_n; d++)
        wrong |= R.fl_check[d] < 0;
    wrong |= R.idle_ran && R.idle_check < 0;
    wrong |= R.mb_ran && (R.mb_wrong || R.mb_ack_wrong);
    for (int i = 0; i < R.ring_n; i++)
        wrong |= R.ring[i].pp_wrong || R.ring[i].st_wrong;
    wrong |= R.ts[TS_STORE].lost || R.ts[TS_MEMCPY].lost;
    printf("\ntotal time %.1f s%s\n", g_elapsed, wrong ? "   (!! WRONG PAYLOADS, see above)" : "");
    fflush(stdout);
    if (opt.json && !write_json(opt.json))
        ok = 0;
    else if (opt.json)
        printf("json written to %s\n", opt.json);
    return ok ? 0 : 1;
}
