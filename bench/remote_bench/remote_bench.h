/*
 * remote_bench.h - what the files of remote_bench share: the segment layout
 * and constants, the commands of the control channel, the results and
 * options, the inboxes and the control channel (channel.c), and each
 * section's entry points.  See main.c for what each section measures.
 *
 *   main.c      options, the client's order of sections, the server's
 *               command loop
 *   channel.c   failures, the two inboxes and the control channel, set-up
 *               and teardown, segments made for one section
 *   pingpong.c  a) remote ping-pong, d) interrupts, e) spinning ping-pong
 *   stores.c    b) write bandwidth, c) store-to-visibility, f) store +
 *               SCIFlush, g) idle map, h) mailbox
 *   ring.c      i) message ring
 *   trapped.c   j) per trapped store
 *   report.c    the client's table and JSON
 */
#ifndef VSCI_REMOTE_BENCH_H
#define VSCI_REMOTE_BENCH_H

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

/* main.c defines the machine description stats.h fills and prints. */
#ifndef REMOTE_BENCH_MAIN
#define BENCH_MACHINE_EXTERN
#endif
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

/* The client's results (main.c). */
extern struct remote_results {
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

/* main.c */
extern struct remote_options {
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
/* Failures and busy-waits (channel.c)                                      */
/* ------------------------------------------------------------------------ */

extern int g_phase;

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *xalloc(size_t size);
void phase_begin(int p);
void phase_end(int p);

static inline void sci_check(const char *what, sci_error_t e)
{
    if (e != SCI_ERR_OK)
        fail("%s failed: %s (0x%08x): %s", what, sci_err_name(e), (unsigned)e,
             SCIGetErrorString(e));
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
/* The two inboxes and the control channel (channel.c)                      */
/* ------------------------------------------------------------------------ */

extern sci_desc_t g_sd;
extern unsigned g_node;
extern volatile unsigned char *g_in;       /* my inbox, local map          */
extern volatile unsigned char *g_out;      /* the peer's inbox, remote map */
extern sci_sequence_t g_peer_seq;          /* on g_peer_rmap: tells a lost connection */
extern volatile unsigned char *g_bw_local; /* server: the bandwidth segment */

void ctl_send(uint64_t v);
int ctl_ready(void);
uint64_t ctl_recv(void);
void ctl_expect(uint64_t want, const char *what);
sci_local_segment_t make_segment(uint32_t id, size_t size, sci_map_t *map,
                                 volatile unsigned char **addr);
void connect_peer(uint32_t id, size_t want, sci_remote_segment_t *rseg);
void disconnect_peer(sci_remote_segment_t rseg, sci_map_t rmap, const char *what);
void setup(void);
void teardown(void);

/* Segments made for one section on both sides */
void remove_own_segment(sci_local_segment_t seg, sci_map_t map, const char *what);

/* e: a segment of each side, each mapped by the other. */
typedef struct {
    size_t                  size;
    sci_local_segment_t     seg;
    sci_map_t               lmap, rmap;
    sci_remote_segment_t    rseg;
    volatile unsigned char *local, *remote;
} xseg_t;

void xseg_open(xseg_t *x, uint32_t base, size_t size);
void xseg_close(xseg_t *x);

/* ------------------------------------------------------------------------ */
/* The sections: the client's section_*(), the server's side of each        */
/* ------------------------------------------------------------------------ */

/* pingpong.c */
extern unsigned char *g_pat[2], *g_rbuf;
void section_pp(void);
void server_pp(size_t size);
void section_intr(void);
void intr_setup(void);
void intr_end(void);
void server_intr_loop(uint64_t arg);
extern xseg_t g_x;                       /* the server's, between commands */
extern uint32_t g_spin_seq;              /* restarts with every map size    */
uint64_t spin_loop(xseg_t *x, uint32_t count, uint64_t *samples);
void section_spin(void);

/* stores.c */
void section_bw(void);
void server_bw_check(void);
void section_vis(void);
void server_vis(unsigned interval_us);
void section_flush(void);
void server_flush_check(size_t size);
double cpu_seconds(void);
int net_bytes(uint64_t *rx, uint64_t *tx);
void section_idle(void);
void server_idle(int cmd, uint64_t arg);
uint32_t mb_loop(uint32_t count, uint64_t *samples, uint64_t *elapsed);
void section_mbox(void);

/* ring.c */
void section_ring(void);
void server_ring(int cmd, uint64_t arg);

/* trapped.c */
enum { TS_STORE, TS_MEMCPY, TS_LOCAL };
void section_ts(void);
void server_ts(int cmd, uint64_t arg);

/* ------------------------------------------------------------------------ */
/* Output (report.c)                                                        */
/* ------------------------------------------------------------------------ */

extern double g_elapsed;

static inline int want(char s) { return strchr(opt.sections, s) != NULL; }

void print_header(void);
void print_results(void);
int write_json(const char *path);

#endif /* VSCI_REMOTE_BENCH_H */
