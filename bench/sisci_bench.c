/*
 * sisci_bench.c - vsci micro-benchmarks against peers measured in the same run.
 *
 * One program, one host.  The parent process is only a coordinator: for each
 * phase it forks two worker processes (A and B), each of which does its own
 * SCIOpen against the node daemon named by VSCI_SOCKET, and collects their
 * results through a shared anonymous mapping.  Sections:
 *
 *   a) segment write bandwidth: A memcpy()s into a mapped segment created by
 *      B, with one SCIFlush per iteration (thesis style), vs memcpy() into
 *      private memory of the same size (and vs memcpy() + a seq_cst fence);
 *   b) ping-pong latency through segments (message with a flag in its last
 *      4 bytes, written into the peer's segment, busy-wait on one's own
 *      local segment) vs the same protocol on a plain memfd MAP_SHARED
 *      mapping shared by the two processes without SISCI;
 *   c) interrupt latency (SCITriggerInterrupt / SCIWaitForInterrupt ping-pong)
 *      for each wait strategy VSCI_WAIT=adaptive|poll|block vs a blocking
 *      eventfd ping-pong between two processes;
 *   d) data-interrupt latency (4 B and 1 KiB payload), same shape, vs an
 *      eventfd ping-pong that carries the payload through a memfd mapping.
 *
 * Usage: sisci_bench [-quick] [-json FILE] [-s abcd] [-pin] [-h]
 * See bench/README.md.
 */
#define _GNU_SOURCE
#include <sisci_api.h>

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Constants                                                                */
/* ------------------------------------------------------------------------ */

#define BW_MAX        (8u << 20)      /* largest bandwidth size: 8 MiB       */
#define PP_MAX        8192u           /* largest ping-pong message           */
#define PP_SEG        (64u << 10)     /* ping-pong segment / region size     */
#define DI_MAX        1024u           /* largest data-interrupt payload      */
#define NB            30              /* histogram: 30 buckets of 10 us ...  */
#define BUCKET_US     10.0            /* ... plus one overflow bucket        */
#define MAX_BW_SIZES  32
#define MAX_PP_SIZES  16
#define NMODES        3
#define WAIT_TIMEOUT_MS 10000u        /* timeout of each SCIWaitFor* call    */
#define CONNECT_TIMEOUT_MS 10000u

static const char *const wait_modes[NMODES] = { "adaptive", "poll", "block" };
static const unsigned di_sizes[2] = { 4, 1024 };

enum { PH_BW, PH_PP, PH_INT0, PH_INT1, PH_INT2, PH_PEER, NPHASES };
static const char *const phase_names[NPHASES] = {
    "a: write bandwidth", "b: ping-pong", "c/d: interrupts (adaptive)",
    "c/d: interrupts (poll)", "c/d: interrupts (block)", "c/d: eventfd peers"
};

/* ------------------------------------------------------------------------ */
/* Results shared between the coordinator and the workers                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint32_t n;                 /* samples (0 = not measured)                */
    uint32_t bad;               /* messages that arrived with wrong content  */
    double   med, p99, mean, min, max;     /* RTT/2 in microseconds          */
    uint32_t hist[NB + 1];      /* RTT/2 in 10 us buckets, last = overflow   */
    double   sleeps;            /* A's voluntary context switches per round
                                 * trip (c, d): ~0 = never slept, ~1 = slept
                                 * once per wait; -1 = not measured          */
} lat_t;

/* json_lat() also writes the sleeps when they were measured. */
#define LAT_JSON_EXTRA(f, L) do {                                              \
        if ((L)->sleeps >= 0) {                                                \
            fputs(", \"sleeps_per_roundtrip\": ", f);                          \
            json_num(f, (L)->sleeps);                                          \
        }                                                                      \
    } while (0)

#include "common/stats.h"

typedef struct {
    int      node_id;
    /* a */
    int      bw_n;
    size_t   bw_size[MAX_BW_SIZES];
    double   bw_vsci[MAX_BW_SIZES], bw_mem[MAX_BW_SIZES], bw_fence[MAX_BW_SIZES], bw_call[MAX_BW_SIZES];
    int      bw_verified;       /* 1 ok, -1 mismatch, 0 not checked          */
    /* b */
    int      pp_n;
    size_t   pp_size[MAX_PP_SIZES];
    lat_t    pp_vsci[MAX_PP_SIZES], pp_raw[MAX_PP_SIZES];
    /* c, d */
    lat_t    intr[NMODES];
    lat_t    intr_peer;
    lat_t    dint[2][NMODES];
    lat_t    dint_peer[2];
    /* per phase: status and the first error each worker hit */
    int      ran[NPHASES];
    int      ok[NPHASES];
    char     err[NPHASES][2][320];
    char     note[NPHASES][160];
} results_t;

static results_t *R;

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

static struct {
    int         quick;
    const char *json;
    int         pin;
    char        sections[8];
    /* derived */
    double      bw_time;        /* seconds per bandwidth measurement         */
    int         bw_rounds;      /* best of N                                 */
    int         pp_warm, pp_min, pp_max, pp_rounds;
    double      pp_budget;      /* seconds per ping-pong measurement         */
    int         in_warm, in_min, in_max;
    double      in_budget;
    double      phase_timeout;  /* seconds before the coordinator kills      */
    size_t      bw_sizes[MAX_BW_SIZES];
    int         n_bw;
    size_t      pp_sizes[MAX_PP_SIZES];
    int         n_pp;
} opt;

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

#define COMPILER_BARRIER() __asm__ __volatile__("" ::: "memory")

/* The reference fence for section a: a C11 seq_cst fence, i.e. the cheapest
 * full fence the compiler knows (x86-64: `lock or` to the stack, as in a Rust
 * SeqCst fence), without any library call around it. */
static inline void full_fence(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------------ */
/* Worker context, errors and the control channel between A and B           */
/* ------------------------------------------------------------------------ */

typedef struct {
    int         phase;
    int         role;           /* 0 = A (initiator, measures), 1 = B        */
    int         ctl;            /* socketpair end to the other worker        */
    int         memfd;          /* shared memfd for the raw peers            */
    int         efd[2];         /* eventfds: [0] A->B, [1] B->A              */
    int         mode;           /* wait-mode index for interrupt phases      */
    uint32_t    idbase;         /* base of segment ids for this run          */
    sci_desc_t  sd;
    unsigned    node;
} ctx_t;

static void worker_fail(ctx_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

static void worker_fail(ctx_t *c, const char *fmt, ...)
{
    char buf[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    snprintf(R->err[c->phase][c->role], sizeof R->err[0][0], "%s", buf);
    fprintf(stderr, "sisci_bench: [%s, worker %c] %s\n",
            phase_names[c->phase], c->role ? 'B' : 'A', buf);
    _exit(3);
}

static void sci_check(ctx_t *c, const char *what, sci_error_t e)
{
    if (e != SCI_ERR_OK)
        worker_fail(c, "%s failed: %s (0x%08x): %s", what, sci_err_name(e),
                    (unsigned)e, SCIGetErrorString(e));
}

static void ctl_send(ctx_t *c, uint64_t v)
{
    const char *p = (const char *)&v;
    size_t left = sizeof v;
    while (left) {
        ssize_t n = write(c->ctl, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            worker_fail(c, "control channel: write: %s", strerror(errno));
        p += n;
        left -= (size_t)n;
    }
}

static uint64_t ctl_recv(ctx_t *c)
{
    uint64_t v;
    char *p = (char *)&v;
    size_t left = sizeof v;
    while (left) {
        ssize_t n = read(c->ctl, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            worker_fail(c, "control channel: the other worker exited");
        if (n < 0)
            worker_fail(c, "control channel: read: %s", strerror(errno));
        p += n;
        left -= (size_t)n;
    }
    return v;
}

static void ctl_barrier(ctx_t *c)
{
    ctl_send(c, 0xba77);
    if (ctl_recv(c) != 0xba77)
        worker_fail(c, "control channel out of step");
}

static void *xalloc(ctx_t *c, size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        worker_fail(c, "mmap(%zu): %s", size, strerror(errno));
    return p;
}

static void sci_open_worker(ctx_t *c)
{
    sci_error_t e;
    SCIOpen(&c->sd, 0, &e);
    sci_check(c, "SCIOpen", e);
    SCIGetLocalNodeId(0, &c->node, 0, &e);
    sci_check(c, "SCIGetLocalNodeId", e);
    if (c->role == 0)
        R->node_id = (int)c->node;
}

static void sci_close_worker(ctx_t *c)
{
    sci_error_t e;
    SCIClose(c->sd, 0, &e);
    sci_check(c, "SCIClose", e);
}

/* Unmap, make unavailable and remove a local segment. */
static void sci_remove_local(ctx_t *c, sci_local_segment_t seg, sci_map_t map)
{
    sci_error_t e;
    SCIUnmapSegment(map, 0, &e);
    sci_check(c, "SCIUnmapSegment (local)", e);
    SCISetSegmentUnavailable(seg, 0, 0, &e);
    sci_check(c, "SCISetSegmentUnavailable", e);
    SCIRemoveSegment(seg, 0, &e);
    sci_check(c, "SCIRemoveSegment", e);
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                               */
/* ------------------------------------------------------------------------ */

/* rtt_ns: n round-trip times; stores RTT/2 statistics in microseconds. */
static void make_rtt_stats(lat_t *L, uint64_t *rtt_ns, uint32_t n, uint32_t bad)
{
    make_stats(L, rtt_ns, n, bad, 2.0);
    L->sleeps = -1;
}

/* ------------------------------------------------------------------------ */
/* a) write bandwidth                                                       */
/* ------------------------------------------------------------------------ */

enum { BW_MEMCPY, BW_FENCE, BW_SCI, BW_CALL };

/* A call into a shared library (the C library) of a function that does
 * nothing but return a value: the least any library call, SCIFlush
 * included, can cost. Through a volatile pointer, since glibc declares
 * getpagesize `const` and the compiler would drop a call whose result is
 * not used. */
static int (*volatile g_empty_call)(void) = getpagesize;

static void bw_run(void *dst, const void *src, size_t size, uint64_t n, int kind)
{
    for (uint64_t i = 0; i < n; i++) {
        memcpy(dst, src, size);
        if (kind == BW_SCI)
            SCIFlush(NULL, 0);
        else if (kind == BW_FENCE)
            full_fence();
        else if (kind == BW_CALL)
            (void)g_empty_call();
        __asm__ __volatile__("" : : "r"(dst) : "memory");
    }
}

/* Returns MB/s (10^6 bytes per second). */
static double bw_measure(void *dst, const void *src, size_t size, int kind, double tmin)
{
    uint64_t n = 1, el;
    for (;;) {                                  /* calibrate */
        uint64_t t0 = now_ns();
        bw_run(dst, src, size, n, kind);
        el = now_ns() - t0;
        if (el >= tmin * 1e9 / 8 || n >= (1ull << 32))
            break;
        n *= 2;
    }
    uint64_t N = (uint64_t)((double)n * (tmin * 1e9) / (double)(el ? el : 1));
    if (N < n)
        N = n;
    uint64_t t0 = now_ns();
    bw_run(dst, src, size, N, kind);
    el = now_ns() - t0;
    return (double)size * (double)N / ((double)el / 1e9) / 1e6;
}

static void phase_bw(ctx_t *c)
{
    sci_error_t e;
    uint32_t segid = c->idbase + 1;
    sci_open_worker(c);

    if (c->role == 1) {                         /* B: owns the segment */
        sci_local_segment_t seg;
        sci_map_t map;
        SCICreateSegment(c->sd, &seg, segid, BW_MAX, NULL, NULL, 0, &e);
        sci_check(c, "SCICreateSegment", e);
        SCIPrepareSegment(seg, 0, 0, &e);
        sci_check(c, "SCIPrepareSegment", e);
        volatile void *p = SCIMapLocalSegment(seg, &map, 0, BW_MAX, NULL, 0, &e);
        sci_check(c, "SCIMapLocalSegment", e);
        SCISetSegmentAvailable(seg, 0, 0, &e);
        sci_check(c, "SCISetSegmentAvailable", e);
        ctl_send(c, 1);                          /* ready */
        uint64_t want = ctl_recv(c);             /* A wrote a pattern */
        uint64_t got = hash_buf(p, BW_MAX);
        R->bw_verified = (got == want) ? 1 : -1;
        ctl_send(c, got);
        ctl_recv(c);                             /* A unmapped, disconnected */
        sci_remove_local(c, seg, map);
        sci_close_worker(c);
        return;
    }

    /* A: the writer */
    sci_remote_segment_t rseg;
    sci_map_t rmap;
    ctl_recv(c);
    SCIConnectSegment(c->sd, &rseg, c->node, segid, 0, NULL, NULL,
                      CONNECT_TIMEOUT_MS, 0, &e);
    sci_check(c, "SCIConnectSegment", e);
    size_t rsz = SCIGetRemoteSegmentSize(rseg);
    if (rsz != BW_MAX)
        worker_fail(c, "SCIGetRemoteSegmentSize returned %zu, expected %u", rsz, BW_MAX);
    volatile void *remote = SCIMapRemoteSegment(rseg, &rmap, 0, BW_MAX, NULL, 0, &e);
    sci_check(c, "SCIMapRemoteSegment", e);
    void *rem = (void *)remote;

    unsigned char *src = xalloc(c, BW_MAX), *dst = xalloc(c, BW_MAX);
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    for (size_t i = 0; i < BW_MAX / 8; i++) {   /* xorshift pattern */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ((uint64_t *)src)[i] = x;
    }
    memset(dst, 0, BW_MAX);
    memset(rem, 0, BW_MAX);                      /* fault in every page */
    SCIFlush(NULL, 0);

    R->bw_n = opt.n_bw;
    for (int s = 0; s < opt.n_bw; s++) {
        size_t size = opt.bw_sizes[s];
        double bv = 0, bm = 0, bf = 0, bc = 0;
        for (int r = 0; r < opt.bw_rounds; r++) {   /* interleaved, best of N */
            double v = bw_measure(rem, src, size, BW_SCI, opt.bw_time);
            double m = bw_measure(dst, src, size, BW_MEMCPY, opt.bw_time);
            double f = bw_measure(dst, src, size, BW_FENCE, opt.bw_time);
            double k = bw_measure(dst, src, size, BW_CALL, opt.bw_time);
            if (k > bc) bc = k;
            if (v > bv) bv = v;
            if (m > bm) bm = m;
            if (f > bf) bf = f;
        }
        R->bw_size[s] = size;
        R->bw_vsci[s] = bv;
        R->bw_mem[s] = bm;
        R->bw_fence[s] = bf;
        R->bw_call[s] = bc;
    }

    /* Check that what A wrote through its map is what B sees in its own. */
    memcpy(rem, src, BW_MAX);
    SCIFlush(NULL, 0);
    ctl_send(c, hash_buf(src, BW_MAX));
    ctl_recv(c);

    SCIUnmapSegment(rmap, 0, &e);
    sci_check(c, "SCIUnmapSegment (remote)", e);
    SCIDisconnectSegment(rseg, 0, &e);
    sci_check(c, "SCIDisconnectSegment", e);
    ctl_send(c, 2);
    sci_close_worker(c);
}

/* ------------------------------------------------------------------------ */
/* b) ping-pong through memory                                              */
/* ------------------------------------------------------------------------ */

/* Write one message of `size` bytes into the peer's memory: payload (whose
 * first word carries the sequence number), then a store barrier, then the
 * flag (= sequence number) in the last 4 bytes. */
static inline void pp_send(unsigned char *remote, unsigned char *payload,
                           size_t size, uint32_t seq, int sci)
{
    if (size > 4) {
        memcpy(payload, &seq, 4);
        memcpy(remote, payload, size - 4);
        if (sci)
            SCIStoreBarrier(NULL, 0);
        else
            COMPILER_BARRIER();                 /* x86 TSO: stores in order */
    }
    __atomic_store_n((uint32_t *)(remote + size - 4), seq, __ATOMIC_RELEASE);
}

/* Busy-wait on the own local memory for the flag; read the payload out.
 * Returns 1 if the payload does not carry the expected sequence number. */
static inline int pp_wait(unsigned char *local, unsigned char *out, size_t size,
                          uint32_t seq)
{
    uint32_t spins = 0;
    while (__atomic_load_n((uint32_t *)(local + size - 4), __ATOMIC_ACQUIRE) != seq) {
        cpu_relax();
        if ((++spins & 0xffff) == 0)      /* the peer may share our core: let it run */
            sched_yield();
    }
    if (size > 4) {
        uint32_t got;
        memcpy(out, local, size - 4);
        memcpy(&got, out, 4);
        return got != seq;
    }
    return 0;
}

static uint32_t pp_seq;     /* identical sequence on both sides */

/* `count` round trips; A stores each RTT in samples[] (if not NULL).
 * Returns the number of messages that arrived with a wrong payload. */
static uint32_t pp_loop(ctx_t *c, unsigned char *local, unsigned char *remote, size_t size,
                        int sci, uint32_t count, uint64_t *samples,
                        unsigned char *payload, unsigned char *rbuf)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t s = ++pp_seq;
        if (c->role == 0) {
            uint64_t a = now_ns();
            pp_send(remote, payload, size, s, sci);
            bad += pp_wait(local, rbuf, size, s);
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += pp_wait(local, rbuf, size, s);
            pp_send(remote, payload, size, s, sci);
        }
    }
    return bad;
}

typedef struct {
    unsigned char *local, *remote;
    int            sci;
} pp_path_t;

/* One message size: vsci (path 0) and raw (path 1) alternate in rounds, and
 * each path's samples are pooled, so that a transient disturbance hits both. */
static void pp_size(ctx_t *c, const pp_path_t path[2], size_t size, lat_t *out[2],
                    uint64_t *samples[2], unsigned char *payload, unsigned char *rbuf)
{
    uint32_t bad[2] = { 0, 0 };
    for (int k = 0; k < 2; k++)
        memset(path[k].local, 0, size);         /* own inboxes only */
    ctl_barrier(c);

    /* warm-up; vsci's pace sets the number of timed iterations */
    uint64_t t0 = now_ns();
    bad[0] += pp_loop(c, path[0].local, path[0].remote, size, 1, (uint32_t)opt.pp_warm,
                      NULL, payload, rbuf);
    uint64_t warm_ns = now_ns() - t0;
    bad[1] += pp_loop(c, path[1].local, path[1].remote, size, 0, (uint32_t)opt.pp_warm,
                      NULL, payload, rbuf);
    uint32_t n;
    if (c->role == 0) {
        n = pick_iters(warm_ns, opt.pp_warm, opt.pp_min, opt.pp_max, opt.pp_budget);
        ctl_send(c, n);
    } else {
        n = (uint32_t)ctl_recv(c);
    }
    uint32_t per = n / (uint32_t)opt.pp_rounds;
    if (per == 0)
        per = 1;
    for (int r = 0; r < opt.pp_rounds; r++)
        for (int k = 0; k < 2; k++) {
            /* 16 unrecorded rounds after each switch (and the control message) */
            bad[k] += pp_loop(c, path[k].local, path[k].remote, size, path[k].sci, 16,
                              NULL, payload, rbuf);
            bad[k] += pp_loop(c, path[k].local, path[k].remote, size, path[k].sci, per,
                              c->role == 0 ? samples[k] + (size_t)r * per : NULL,
                              payload, rbuf);
        }

    /* B reports its receive errors; A records everything */
    if (c->role == 1) {
        ctl_send(c, ((uint64_t)bad[0] << 32) | bad[1]);
    } else {
        uint64_t b = ctl_recv(c);
        bad[0] += (uint32_t)(b >> 32);
        bad[1] += (uint32_t)b;
        for (int k = 0; k < 2; k++)
            make_rtt_stats(out[k], samples[k], per * (uint32_t)opt.pp_rounds, bad[k]);
    }
}

static void phase_pp(ctx_t *c)
{
    sci_error_t e;
    uint32_t myid = c->idbase + 2 + (uint32_t)c->role;
    uint32_t peerid = c->idbase + 2 + (uint32_t)(1 - c->role);
    sci_local_segment_t seg;
    sci_remote_segment_t rseg;
    sci_map_t lmap, rmap;

    sci_open_worker(c);
    SCICreateSegment(c->sd, &seg, myid, PP_SEG, NULL, NULL, 0, &e);
    sci_check(c, "SCICreateSegment", e);
    SCIPrepareSegment(seg, 0, 0, &e);
    sci_check(c, "SCIPrepareSegment", e);
    unsigned char *local = (unsigned char *)SCIMapLocalSegment(seg, &lmap, 0, PP_SEG,
                                                               NULL, 0, &e);
    sci_check(c, "SCIMapLocalSegment", e);
    SCISetSegmentAvailable(seg, 0, 0, &e);
    sci_check(c, "SCISetSegmentAvailable", e);
    ctl_barrier(c);
    SCIConnectSegment(c->sd, &rseg, c->node, peerid, 0, NULL, NULL,
                      CONNECT_TIMEOUT_MS, 0, &e);
    sci_check(c, "SCIConnectSegment", e);
    unsigned char *remote = (unsigned char *)SCIMapRemoteSegment(rseg, &rmap, 0, PP_SEG,
                                                                 NULL, 0, &e);
    sci_check(c, "SCIMapRemoteSegment", e);

    /* the raw peer: two separate MAP_SHARED mappings of one memfd */
    unsigned char *shm = mmap(NULL, 2 * PP_SEG, PROT_READ | PROT_WRITE, MAP_SHARED,
                              c->memfd, 0);
    if (shm == MAP_FAILED)
        worker_fail(c, "mmap(memfd): %s", strerror(errno));
    unsigned char *raw_local = shm + (size_t)c->role * PP_SEG;
    unsigned char *raw_remote = shm + (size_t)(1 - c->role) * PP_SEG;

    unsigned char *payload = xalloc(c, PP_MAX), *rbuf = xalloc(c, PP_MAX);
    memset(payload, 0x5a, PP_MAX);
    uint64_t *samples[2];
    for (int k = 0; k < 2; k++)
        samples[k] = xalloc(c, sizeof(uint64_t) * ((size_t)opt.pp_max + 16));
    const pp_path_t path[2] = { { local, remote, 1 }, { raw_local, raw_remote, 0 } };

    R->pp_n = opt.n_pp;
    for (int s = 0; s < opt.n_pp; s++) {
        size_t size = opt.pp_sizes[s];
        lat_t *out[2] = { &R->pp_vsci[s], &R->pp_raw[s] };
        R->pp_size[s] = size;
        pp_size(c, path, size, out, samples, payload, rbuf);
    }

    ctl_barrier(c);
    SCIUnmapSegment(rmap, 0, &e);
    sci_check(c, "SCIUnmapSegment (remote)", e);
    SCIDisconnectSegment(rseg, 0, &e);
    sci_check(c, "SCIDisconnectSegment", e);
    ctl_barrier(c);                 /* both disconnected before removal */
    sci_remove_local(c, seg, lmap);
    sci_close_worker(c);
}

/* ------------------------------------------------------------------------ */
/* c, d) interrupts and their eventfd peers                                 */
/* ------------------------------------------------------------------------ */

enum { K_INTR, K_DINTR, K_EVENTFD, K_EVENTFD_SHM };

typedef struct {
    sci_local_interrupt_t       li;
    sci_remote_interrupt_t      ri;
    sci_local_data_interrupt_t  dli;
    sci_remote_data_interrupt_t dri;
    unsigned char              *shm_out, *shm_in;   /* eventfd+shm peer */
} intr_t;

static void efd_signal(ctx_t *c, int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, 8) != 8)
        if (errno != EINTR)
            worker_fail(c, "eventfd write: %s", strerror(errno));
}

static void efd_wait(ctx_t *c, int fd)
{
    uint64_t v;
    while (read(fd, &v, 8) != 8)
        if (errno != EINTR)
            worker_fail(c, "eventfd read: %s", strerror(errno));
}

/* Send one "interrupt" of kind k to the peer, carrying seq (data kinds). */
static inline void in_send(ctx_t *c, intr_t *I, int k, unsigned char *buf,
                           unsigned len, uint32_t seq)
{
    sci_error_t e;
    switch (k) {
    case K_INTR:
        SCITriggerInterrupt(I->ri, 0, &e);
        sci_check(c, "SCITriggerInterrupt", e);
        break;
    case K_DINTR:
        memcpy(buf, &seq, 4);
        SCITriggerDataInterrupt(I->dri, buf, len, 0, &e);
        sci_check(c, "SCITriggerDataInterrupt", e);
        break;
    case K_EVENTFD:
        efd_signal(c, c->efd[c->role]);
        break;
    case K_EVENTFD_SHM:
        memcpy(buf, &seq, 4);
        memcpy(I->shm_out, buf, len);
        efd_signal(c, c->efd[c->role]);
        break;
    }
}

/* Wait for one from the peer; returns 1 if the payload is wrong. */
static inline int in_wait(ctx_t *c, intr_t *I, int k, unsigned char *buf,
                          unsigned len, uint32_t seq)
{
    sci_error_t e;
    uint32_t got;
    switch (k) {
    case K_INTR:
        SCIWaitForInterrupt(I->li, WAIT_TIMEOUT_MS, 0, &e);
        sci_check(c, "SCIWaitForInterrupt", e);
        return 0;
    case K_DINTR: {
        unsigned int rl = DI_MAX;
        SCIWaitForDataInterrupt(I->dli, buf, &rl, WAIT_TIMEOUT_MS, 0, &e);
        sci_check(c, "SCIWaitForDataInterrupt", e);
        memcpy(&got, buf, 4);
        return rl != len || got != seq;
    }
    case K_EVENTFD:
        efd_wait(c, c->efd[1 - c->role]);
        return 0;
    case K_EVENTFD_SHM:
        efd_wait(c, c->efd[1 - c->role]);
        memcpy(buf, I->shm_in, len);
        memcpy(&got, buf, 4);
        return got != seq;
    }
    return 0;
}

static uint32_t in_seq;

static void in_measure(ctx_t *c, intr_t *I, int k, unsigned len, lat_t *out,
                       uint64_t *samples, unsigned char *buf)
{
    uint32_t bad = 0;
    ctl_barrier(c);
    uint64_t t0 = now_ns();
    for (int i = 0; i < opt.in_warm; i++) {
        uint32_t s = ++in_seq;
        if (c->role == 0) {
            in_send(c, I, k, buf, len, s);
            bad += in_wait(c, I, k, buf, len, s);
        } else {
            bad += in_wait(c, I, k, buf, len, s);
            in_send(c, I, k, buf, len, s);
        }
    }
    uint64_t warm_ns = now_ns() - t0;
    uint32_t n;
    if (c->role == 0) {
        n = pick_iters(warm_ns, opt.in_warm, opt.in_min, opt.in_max, opt.in_budget);
        ctl_send(c, n);
    } else {
        n = (uint32_t)ctl_recv(c);
    }
    struct rusage ru0, ru1;
    getrusage(RUSAGE_THREAD, &ru0);
    for (uint32_t i = 0; i < n + 16; i++) {
        uint32_t s = ++in_seq;
        if (c->role == 0) {
            uint64_t a = now_ns();
            in_send(c, I, k, buf, len, s);
            bad += in_wait(c, I, k, buf, len, s);
            uint64_t b = now_ns();
            if (i >= 16)
                samples[i - 16] = b - a;
        } else {
            bad += in_wait(c, I, k, buf, len, s);
            in_send(c, I, k, buf, len, s);
        }
    }
    getrusage(RUSAGE_THREAD, &ru1);
    if (c->role == 1) {
        ctl_send(c, bad);
    } else {
        bad += (uint32_t)ctl_recv(c);
        make_rtt_stats(out, samples, n, bad);
        out->sleeps = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw) / (n + 16);
    }
}

/* One wait mode: plain interrupt, then data interrupts of 4 B and 1 KiB. */
static void phase_intr(ctx_t *c)
{
    sci_error_t e;
    intr_t I;
    memset(&I, 0, sizeof I);
    sci_open_worker(c);

    unsigned int no = 0, dno = 0;
    SCICreateInterrupt(c->sd, &I.li, 0, &no, NULL, NULL, 0, &e);
    sci_check(c, "SCICreateInterrupt", e);
    SCICreateDataInterrupt(c->sd, &I.dli, 0, &dno, NULL, NULL, 0, &e);
    sci_check(c, "SCICreateDataInterrupt", e);
    ctl_send(c, ((uint64_t)no << 32) | dno);
    uint64_t peer = ctl_recv(c);
    unsigned int pno = (unsigned)(peer >> 32), pdno = (unsigned)(peer & 0xffffffffu);
    if (pno == no || pdno == dno)
        worker_fail(c, "both workers got the same interrupt number (%u/%u, data %u/%u)",
                    no, pno, dno, pdno);
    SCIConnectInterrupt(c->sd, &I.ri, c->node, 0, pno, CONNECT_TIMEOUT_MS, 0, &e);
    sci_check(c, "SCIConnectInterrupt", e);
    SCIConnectDataInterrupt(c->sd, &I.dri, c->node, 0, pdno, CONNECT_TIMEOUT_MS, 0, &e);
    sci_check(c, "SCIConnectDataInterrupt", e);

    unsigned char *buf = xalloc(c, DI_MAX);
    memset(buf, 0x3c, DI_MAX);
    uint64_t *samples = xalloc(c, sizeof(uint64_t) * ((size_t)opt.in_max + 16));

    in_measure(c, &I, K_INTR, 0, &R->intr[c->mode], samples, buf);
    for (int d = 0; d < 2; d++)
        in_measure(c, &I, K_DINTR, di_sizes[d], &R->dint[d][c->mode], samples, buf);

    ctl_barrier(c);
    SCIDisconnectInterrupt(I.ri, 0, &e);
    sci_check(c, "SCIDisconnectInterrupt", e);
    SCIDisconnectDataInterrupt(I.dri, 0, &e);
    sci_check(c, "SCIDisconnectDataInterrupt", e);
    ctl_barrier(c);
    SCIRemoveInterrupt(I.li, 0, &e);
    sci_check(c, "SCIRemoveInterrupt", e);
    SCIRemoveDataInterrupt(I.dli, 0, &e);
    sci_check(c, "SCIRemoveDataInterrupt", e);
    sci_close_worker(c);
}

/* The kernel peers: blocking eventfd ping-pong, without and with a payload
 * copied through a memfd mapping.  No SISCI here. */
static void phase_peer(ctx_t *c)
{
    intr_t I;
    memset(&I, 0, sizeof I);
    unsigned char *shm = mmap(NULL, 2 * PP_SEG, PROT_READ | PROT_WRITE, MAP_SHARED,
                              c->memfd, 0);
    if (shm == MAP_FAILED)
        worker_fail(c, "mmap(memfd): %s", strerror(errno));
    I.shm_out = shm + (size_t)(1 - c->role) * PP_SEG;
    I.shm_in = shm + (size_t)c->role * PP_SEG;
    unsigned char *buf = xalloc(c, DI_MAX);
    memset(buf, 0x3c, DI_MAX);
    uint64_t *samples = xalloc(c, sizeof(uint64_t) * ((size_t)opt.in_max + 16));

    in_measure(c, &I, K_EVENTFD, 0, &R->intr_peer, samples, buf);
    for (int d = 0; d < 2; d++)
        in_measure(c, &I, K_EVENTFD_SHM, di_sizes[d], &R->dint_peer[d], samples, buf);
}

/* ------------------------------------------------------------------------ */
/* Coordinator                                                              */
/* ------------------------------------------------------------------------ */

static int g_memfd = -1;
static uint32_t g_idbase;

/* Fork A and B for one phase, wait for both (with a deadline). */
static int run_phase(int phase, void (*fn)(ctx_t *), int mode)
{
    int sv[2], efd[2] = { -1, -1 };
    R->ran[phase] = 1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(R->note[phase], sizeof R->note[0], "socketpair: %s", strerror(errno));
        return 0;
    }
    if (phase == PH_PEER) {
        efd[0] = eventfd(0, EFD_CLOEXEC);
        efd[1] = eventfd(0, EFD_CLOEXEC);
    }

    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);

    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        fflush(NULL);
        pid[r] = fork();
        if (pid[r] < 0) {
            snprintf(R->note[phase], sizeof R->note[0], "fork: %s", strerror(errno));
            if (r == 1) {
                kill(pid[0], SIGKILL);
                waitpid(pid[0], NULL, 0);
            }
            sigprocmask(SIG_SETMASK, &old, NULL);
            return 0;
        }
        if (pid[r] == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            ctx_t c;
            memset(&c, 0, sizeof c);
            c.phase = phase;
            c.role = r;
            c.ctl = sv[r];
            close(sv[1 - r]);
            c.memfd = g_memfd;
            c.efd[0] = efd[0];
            c.efd[1] = efd[1];
            c.mode = mode;
            c.idbase = g_idbase + (uint32_t)phase * 16;
            if (mode >= 0)
                setenv("VSCI_WAIT", wait_modes[mode], 1);
            if (opt.pin) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(r, &set);
                sched_setaffinity(0, sizeof set, &set);
            }
            fn(&c);
            _exit(0);
        }
    }
    close(sv[0]);
    close(sv[1]);
    if (efd[0] >= 0) close(efd[0]);
    if (efd[1] >= 0) close(efd[1]);

    int alive = 2, failed = 0, timed_out = 0;
    int status[2] = { 0, 0 };
    uint64_t deadline = now_ns() + (uint64_t)(opt.phase_timeout * 1e9);
    while (alive) {
        for (int r = 0; r < 2; r++) {
            if (pid[r] <= 0)
                continue;
            int st;
            if (waitpid(pid[r], &st, WNOHANG) == pid[r]) {
                status[r] = st;
                pid[r] = 0;
                alive--;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    if (!failed) {               /* give the other 3 s */
                        uint64_t grace = now_ns() + 3000000000ull;
                        if (grace < deadline)
                            deadline = grace;
                    }
                    failed = 1;
                }
            }
        }
        if (!alive)
            break;
        uint64_t t = now_ns();
        if (t >= deadline) {
            for (int r = 0; r < 2; r++)
                if (pid[r] > 0) {
                    kill(pid[r], SIGKILL);
                    waitpid(pid[r], &status[r], 0);
                    pid[r] = 0;
                    alive--;
                }
            timed_out = 1;
            failed = 1;
            break;
        }
        uint64_t left = deadline - t;
        struct timespec ts = { (time_t)(left / 1000000000ull), (long)(left % 1000000000ull) };
        sigtimedwait(&chld, NULL, &ts);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);

    for (int r = 0; r < 2; r++) {
        int st = status[r];
        if (WIFSIGNALED(st) && !R->err[phase][r][0])
            snprintf(R->err[phase][r], sizeof R->err[0][0], "killed by signal %d%s",
                     WTERMSIG(st),
                     timed_out && WTERMSIG(st) == SIGKILL ? " (phase timeout)" : "");
    }
    if (timed_out)
        snprintf(R->note[phase], sizeof R->note[0],
                 "phase did not finish within %.0f s; workers killed", opt.phase_timeout);
    R->ok[phase] = !failed;
    return !failed;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                   */
/* ------------------------------------------------------------------------ */

static uint64_t g_clock_step;   /* smallest non-zero step between two readings */

static void print_phase_errors(int phase)
{
    if (!R->ran[phase] || R->ok[phase])
        return;
    printf("  !! phase \"%s\" FAILED\n", phase_names[phase]);
    for (int r = 0; r < 2; r++)
        if (R->err[phase][r][0])
            printf("  !!   worker %c: %s\n", r ? 'B' : 'A', R->err[phase][r]);
    if (R->note[phase][0])
        printf("  !!   %s\n", R->note[phase]);
}

static void lat_cell(const lat_t *L)
{
    if (L->n)
        printf(" %9.3f %9.3f", L->med, L->p99);
    else
        printf(" %9s %9s", "-", "-");
}

static void ratio_cell(const lat_t *v, const lat_t *p)
{
    if (v->n && p->n && p->med > 0) {
        double r = v->med / p->med;
        printf(r < 0.095 ? "  %7.4fx" : "  %7.2fx", r);
    } else {
        printf("  %8s", "-");
    }
}

/* The raw memfd polling ping-pong of section b for a given size, if measured. */
static const lat_t *raw_pp(size_t size)
{
    for (int i = 0; i < R->pp_n; i++)
        if (R->pp_size[i] == size && R->pp_raw[i].n)
            return &R->pp_raw[i];
    return NULL;
}

static void poll_ratio_cell(const lat_t *v, size_t size)
{
    const lat_t *p = raw_pp(size);
    if (p)
        ratio_cell(v, p);
    else
        printf("  %8s", "-");
}

static void sleeps_cell(const lat_t *v, const lat_t *p)
{
    char a[16] = "-", b[16] = "-", cell[40];
    if (v->n && v->sleeps >= 0)
        snprintf(a, sizeof a, "%.2f", v->sleeps);
    if (p->n && p->sleeps >= 0)
        snprintf(b, sizeof b, "%.2f", p->sleeps);
    snprintf(cell, sizeof cell, "%s/%s", a, b);
    printf(" %11s", cell);
}

static void bad_note(const lat_t *v, const lat_t *p)
{
    if (v->bad || p->bad)
        printf("   !! wrong payloads: vsci %u, peer %u", v->bad, p->bad);
}

/* One row of print_hist(): bucket b of each column, in % of its samples. */
static void print_hist_row(const char *lab, const lat_t *cols[], int ncol, int b)
{
    printf("  %-12s", lab);
    for (int c = 0; c < ncol; c++) {
        if (cols[c]->n)
            printf(" %9.2f%%", 100.0 * cols[c]->hist[b] / cols[c]->n);
        else
            printf(" %10s", "-");
    }
    printf("\n");
}

static void print_hist(const char *title, const lat_t *cols[], const char *names[], int ncol)
{
    int last = -1;
    for (int c = 0; c < ncol; c++)
        for (int b = 0; b < NB; b++)
            if (cols[c]->hist[b] && b > last)
                last = b;
    int any_over = 0;
    for (int c = 0; c < ncol; c++)
        any_over |= cols[c]->hist[NB] != 0;
    printf("\n  %s: RTT/2 histogram, %% of samples per 10 us bucket\n", title);
    printf("  %-12s", "bucket (us)");
    for (int c = 0; c < ncol; c++)
        printf(" %10s", names[c]);
    printf("\n");
    int skipping = 0;
    for (int b = 0; b <= last; b++) {
        int empty = 1;
        for (int c = 0; c < ncol; c++)
            empty &= cols[c]->hist[b] == 0;
        if (empty) {                            /* fold runs of empty buckets */
            if (!skipping)
                printf("  %-12s\n", "  ...");
            skipping = 1;
            continue;
        }
        skipping = 0;
        char lab[32];
        snprintf(lab, sizeof lab, "%3d-%-3d", b * 10, (b + 1) * 10);
        print_hist_row(lab, cols, ncol, b);
    }
    if (any_over) {
        char lab[32];
        snprintf(lab, sizeof lab, ">=%d", NB * 10);
        print_hist_row(lab, cols, ncol, NB);
    }
}

static int want(char s) { return strchr(opt.sections, s) != NULL; }

static void print_header(void)
{
    print_machine("sisci_bench");
    printf("run     : %s  (mode %s%s; sections %s)\n", g_cmd, opt.quick ? "quick" : "default",
           opt.pin ? ", A pinned to cpu0, B to cpu1" : ", nothing pinned", opt.sections);
    printf("method  : parent forks two worker processes A and B per phase, each with its own\n"
           "          SCIOpen; times from clock_gettime(CLOCK_MONOTONIC) in A (smallest step\n"
           "          between two readings here: %llu ns).  MB/s = 10^6 B/s.\n",
           (unsigned long long)g_clock_step);
    printf("          "
           "Latencies are RTT/2 in microseconds (median, p99).  ratio = vsci / peer:\n"
           "          for bandwidth higher is better, for latency lower is better (1.00x = peer).\n");
    if (g_nproc <= 2)
        printf("          %ld cores: busy-polling on both sides uses every core; the coordinator\n"
               "          sleeps while workers run.\n", g_nproc);
}

static void print_results(void)
{
    char b1[32];
    if (R->node_id)
        printf("node id : %d\n", R->node_id);

    if (want('a')) {
        printf("\n[a] segment write bandwidth: A memcpy()s a buffer into its map of B's segment\n"
               "    and calls SCIFlush(NULL,0) after each copy (seed 000 thesis style).\n"
               "    peer = memcpy() into private memory of A; memcpy + a seq_cst fence\n"
               "    (`lock or` on x86-64) and memcpy + a call of a shared-library function\n"
               "    that does nothing (getpagesize: the floor of any SCIFlush) shown for reference.\n"
               "    best of %d runs of >= %.0f ms each, interleaved.\n",
               opt.bw_rounds, opt.bw_time * 1e3);
        printf("  %9s %12s %12s %9s %15s %10s %14s %9s\n", "size", "vsci MB/s", "peer MB/s",
               "ratio", "memcpy+fence", "vs fence", "memcpy+call", "vs call");
        for (int i = 0; i < R->bw_n; i++) {
            if (R->bw_vsci[i] <= 0)
                continue;
            printf("  %9s %12.1f %12.1f %8.2fx %15.1f %9.2fx %14.1f %8.2fx\n",
                   fmt_size(R->bw_size[i], b1, sizeof b1), R->bw_vsci[i], R->bw_mem[i],
                   R->bw_vsci[i] / R->bw_mem[i], R->bw_fence[i],
                   R->bw_vsci[i] / R->bw_fence[i], R->bw_call[i], R->bw_vsci[i] / R->bw_call[i]);
        }
        if (R->bw_verified)
            printf("  data check: 8 MiB written through A's map %s in B's local map\n",
                   R->bw_verified > 0 ? "read back identical" : "DIFFERS (!!)");
        print_phase_errors(PH_BW);
    }

    if (want('b')) {
        printf("\n[b] ping-pong latency through segments: each side writes a message (payload,\n"
               "    SCIStoreBarrier, then a 4-byte flag in the last 4 bytes) into its map of the\n"
               "    peer's segment and busy-waits on its own local segment for the reply.\n"
               "    peer = the same protocol on a plain memfd mapped MAP_SHARED by both\n"
               "    processes (no SISCI, no barrier call; x86 stores are ordered).\n"
               "    vsci and peer alternate in %d rounds per size; samples are pooled.\n",
               opt.pp_rounds);
        printf("  %9s %9s %9s %9s %9s %9s\n", "size", "vsci med", "vsci p99", "peer med",
               "peer p99", "ratio");
        for (int i = 0; i < R->pp_n; i++) {
            if (!R->pp_vsci[i].n && !R->pp_raw[i].n)
                continue;
            printf("  %9s", fmt_size(R->pp_size[i], b1, sizeof b1));
            lat_cell(&R->pp_vsci[i]);
            lat_cell(&R->pp_raw[i]);
            ratio_cell(&R->pp_vsci[i], &R->pp_raw[i]);
            bad_note(&R->pp_vsci[i], &R->pp_raw[i]);
            printf("   (n=%u)\n", R->pp_vsci[i].n);
        }
        print_phase_errors(PH_PP);
    }

    if (want('c')) {
        printf("\n[c] interrupt latency: SCITriggerInterrupt / SCIWaitForInterrupt ping-pong\n"
               "    between A and B, one fresh pair of processes per VSCI_WAIT strategy.\n"
               "    peer = blocking eventfd ping-pong (write / read) between two processes.\n");
        printf("    \"vs poll\" = vsci median / median of the raw memfd polling ping-pong\n"
               "    of [b] at 4 B, the physical limit for a polled wake-up.\n");
        printf("    sleeps = voluntary context switches of A per round trip (vsci/peer):\n"
               "    0 = the wait never slept in the kernel, 1 = it slept every time.\n");
        printf("  %-9s %9s %9s %9s %9s %9s %9s %11s\n", "wait", "vsci med", "vsci p99",
               "peer med", "peer p99", "ratio", "vs poll", "sleeps");
        for (int m = 0; m < NMODES; m++) {
            printf("  %-9s", wait_modes[m]);
            lat_cell(&R->intr[m]);
            lat_cell(&R->intr_peer);
            ratio_cell(&R->intr[m], &R->intr_peer);
            poll_ratio_cell(&R->intr[m], 4);
            sleeps_cell(&R->intr[m], &R->intr_peer);
            printf("   (n=%u)\n", R->intr[m].n);
        }
        const lat_t *cols[] = { &R->intr[0], &R->intr[1], &R->intr[2], &R->intr_peer };
        const char *names[] = { "adaptive", "poll", "block", "eventfd" };
        print_hist("interrupts", cols, names, 4);
        for (int p = PH_INT0; p <= PH_PEER; p++)
            print_phase_errors(p);
    }

    if (want('d')) {
        printf("\n[d] data-interrupt latency: SCITriggerDataInterrupt / SCIWaitForDataInterrupt\n"
               "    ping-pong carrying the payload (first word = sequence number, checked).\n"
               "    peer = blocking eventfd ping-pong, payload copied through a memfd mapping.\n");
        printf("    \"vs poll\" = vsci median / raw memfd polling ping-pong of [b], same size.\n");
        printf("  %-8s %-9s %9s %9s %9s %9s %9s %9s %11s\n", "payload", "wait", "vsci med",
               "vsci p99", "peer med", "peer p99", "ratio", "vs poll", "sleeps");
        for (int d = 0; d < 2; d++)
            for (int m = 0; m < NMODES; m++) {
                printf("  %-8s %-9s", fmt_size(di_sizes[d], b1, sizeof b1), wait_modes[m]);
                lat_cell(&R->dint[d][m]);
                lat_cell(&R->dint_peer[d]);
                ratio_cell(&R->dint[d][m], &R->dint_peer[d]);
                poll_ratio_cell(&R->dint[d][m], di_sizes[d]);
                sleeps_cell(&R->dint[d][m], &R->dint_peer[d]);
                bad_note(&R->dint[d][m], &R->dint_peer[d]);
                printf("   (n=%u)\n", R->dint[d][m].n);
            }
        for (int d = 0; d < 2; d++) {
            const lat_t *cols[] = { &R->dint[d][0], &R->dint[d][1], &R->dint[d][2],
                                    &R->dint_peer[d] };
            const char *names[] = { "adaptive", "poll", "block", "eventfd+shm" };
            char t[64];
            snprintf(t, sizeof t, "data interrupts, %s payload",
                     fmt_size(di_sizes[d], b1, sizeof b1));
            print_hist(t, cols, names, 4);
        }
        if (!want('c'))
            for (int p = PH_INT0; p <= PH_PEER; p++)
                print_phase_errors(p);
    }
}

static void json_ratio(FILE *f, const lat_t *v, const lat_t *p)
{
    if (v->n && p->n && p->med > 0)
        json_num(f, v->med / p->med);
    else
        fputs("null", f);
}

static int write_json(const char *path)
{
    FILE *f = json_open("sisci_bench", path);
    if (!f)
        return 0;
    json_preamble(f, "sisci_bench", opt.quick, 1, g_clock_step);
    fprintf(f, ",\n  \"node_id\": %d,\n  \"pinned\": %s,\n", R->node_id,
            opt.pin ? "true" : "false");
    fputs("  \"units\": {\"bandwidth\": \"MB/s (1e6 B/s)\", \"latency\": "
          "\"microseconds, RTT/2\", \"ratio\": \"vsci / peer\"},\n", f);

    fputs("  \"phases\": [", f);
    int first = 1;
    for (int p = 0; p < NPHASES; p++) {
        if (!R->ran[p])
            continue;
        fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
        first = 0;
        json_str(f, phase_names[p]);
        fprintf(f, ", \"ok\": %s, \"errors\": [", R->ok[p] ? "true" : "false");
        int fe = 1;
        for (int r = 0; r < 2; r++)
            if (R->err[p][r][0]) {
                char m[360];
                snprintf(m, sizeof m, "worker %c: %s", r ? 'B' : 'A', R->err[p][r]);
                fputs(fe ? "" : ", ", f);
                fe = 0;
                json_str(f, m);
            }
        if (R->note[p][0]) {
            fputs(fe ? "" : ", ", f);
            json_str(f, R->note[p]);
        }
        fputs("]}", f);
    }
    fputs("\n  ],\n", f);

    fprintf(f, "  \"write_bandwidth\": {\"peer\": \"memcpy into private memory\", "
               "\"vsci\": \"memcpy into remote map + SCIFlush per iteration\", "
               "\"data_check\": %s, \"rows\": [",
            R->bw_verified > 0 ? "\"ok\"" : R->bw_verified < 0 ? "\"mismatch\"" : "null");
    first = 1;
    for (int i = 0; i < R->bw_n; i++) {
        if (R->bw_vsci[i] <= 0)
            continue;
        fprintf(f, "%s\n    {\"size\": %zu, \"vsci_MBps\": ", first ? "" : ",", R->bw_size[i]);
        first = 0;
        json_num(f, R->bw_vsci[i]);
        fputs(", \"peer_MBps\": ", f);
        json_num(f, R->bw_mem[i]);
        fputs(", \"ratio\": ", f);
        json_num(f, R->bw_vsci[i] / R->bw_mem[i]);
        fputs(", \"memcpy_fence_MBps\": ", f);
        json_num(f, R->bw_fence[i]);
        fputs(", \"memcpy_call_MBps\": ", f);
        json_num(f, R->bw_call[i]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"pingpong\": {\"peer\": \"memfd MAP_SHARED polling ping-pong\", \"rows\": [", f);
    first = 1;
    for (int i = 0; i < R->pp_n; i++) {
        if (!R->pp_vsci[i].n && !R->pp_raw[i].n)
            continue;
        fprintf(f, "%s\n    {\"size\": %zu, \"vsci\": ", first ? "" : ",", R->pp_size[i]);
        first = 0;
        json_lat(f, &R->pp_vsci[i]);
        fputs(", \"peer\": ", f);
        json_lat(f, &R->pp_raw[i]);
        fputs(", \"ratio\": ", f);
        json_ratio(f, &R->pp_vsci[i], &R->pp_raw[i]);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"interrupt\": {\"peer_name\": \"blocking eventfd ping-pong\", \"peer\": ", f);
    json_lat(f, &R->intr_peer);
    fputs(", \"rows\": [", f);
    for (int m = 0; m < NMODES; m++) {
        fprintf(f, "%s\n    {\"wait\": \"%s\", \"vsci\": ", m ? "," : "", wait_modes[m]);
        json_lat(f, &R->intr[m]);
        fputs(", \"ratio\": ", f);
        json_ratio(f, &R->intr[m], &R->intr_peer);
        fputs(", \"ratio_vs_raw_poll\": ", f);
        if (raw_pp(4))
            json_ratio(f, &R->intr[m], raw_pp(4));
        else
            fputs("null", f);
        fputs("}", f);
    }
    fputs("\n  ]},\n", f);

    fputs("  \"data_interrupt\": {\"peer_name\": \"blocking eventfd ping-pong + payload "
          "through memfd\", \"rows\": [", f);
    first = 1;
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < NMODES; m++) {
            fprintf(f, "%s\n    {\"payload\": %u, \"wait\": \"%s\", \"vsci\": ",
                    first ? "" : ",", di_sizes[d], wait_modes[m]);
            first = 0;
            json_lat(f, &R->dint[d][m]);
            fputs(", \"peer\": ", f);
            json_lat(f, &R->dint_peer[d]);
            fputs(", \"ratio\": ", f);
            json_ratio(f, &R->dint[d][m], &R->dint_peer[d]);
            fputs(", \"ratio_vs_raw_poll\": ", f);
            if (raw_pp(di_sizes[d]))
                json_ratio(f, &R->dint[d][m], raw_pp(di_sizes[d]));
            else
                fputs("null", f);
            fputs("}", f);
        }
    fputs("\n  ]}\n}\n", f);
    return json_close("sisci_bench", f, path);
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sisci_bench [-quick] [-json FILE] [-s SECTIONS] [-pin]\n"
        "  -quick        few iterations and a subset of sizes (a few seconds)\n"
        "  -json FILE    also write the results as JSON to FILE\n"
        "  -s SECTIONS   run only these sections, e.g. -s ab (default abcd):\n"
        "                a write bandwidth, b ping-pong, c interrupts, d data interrupts\n"
        "  -pin          pin worker A to cpu 0 and worker B to cpu 1 (default: no pinning)\n"
        "The node daemon must be running: vscid --node-id 1 --socket PATH, and\n"
        "VSCI_SOCKET=PATH exported (default /tmp/vscid.sock).\n");
}

static void setup_options(void)
{
    opt.n_bw = 0;
    if (opt.quick) {
        static const size_t q[] = { 4, 64, 1024, 4096, 65536, 1u << 20, 8u << 20 };
        for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
            opt.bw_sizes[opt.n_bw++] = q[i];
        static const size_t p[] = { 4, 64, 1024, 8192 };
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            opt.pp_sizes[opt.n_pp++] = p[i];
        opt.bw_time = 0.005;
        opt.bw_rounds = 2;
        opt.pp_warm = 200;  opt.pp_min = 200;  opt.pp_max = 2000;  opt.pp_budget = 0.05;
        opt.pp_rounds = 2;
        opt.in_warm = 20;   opt.in_min = 100;  opt.in_max = 500;   opt.in_budget = 0.05;
        opt.phase_timeout = 20;
    } else {
        for (size_t s = 4; s <= BW_MAX; s *= 2)
            opt.bw_sizes[opt.n_bw++] = s;
        for (size_t s = 4; s <= PP_MAX; s *= 2)
            opt.pp_sizes[opt.n_pp++] = s;
        opt.bw_time = 0.025;
        opt.bw_rounds = 3;
        opt.pp_warm = 2000; opt.pp_min = 1000; opt.pp_max = 50000; opt.pp_budget = 0.4;
        opt.pp_rounds = 4;
        opt.in_warm = 200;  opt.in_min = 500;  opt.in_max = 10000; opt.in_budget = 0.8;
        opt.phase_timeout = 90;
    }
}

int main(int argc, char **argv)
{
    snprintf(opt.sections, sizeof opt.sections, "abcd");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] == '-')
            a++;                                /* accept --quick too */
        if (!strcmp(a, "-quick")) {
            opt.quick = 1;
        } else if (!strcmp(a, "-json") && i + 1 < argc) {
            opt.json = argv[++i];
        } else if (!strcmp(a, "-pin")) {
            opt.pin = 1;
        } else if (!strcmp(a, "-s") && i + 1 < argc) {
            const char *s = argv[++i];
            if (!parse_sections(s, opt.sections, sizeof opt.sections)) {
                usage(stderr);
                return 2;
            }
        } else if (!strcmp(a, "-h") || !strcmp(a, "-help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "sisci_bench: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    setup_options();
    machine_info(argc, argv);
    g_clock_step = clock_step();
    if (opt.pin && g_nproc < 2)
        opt.pin = 0;

    R = mmap(NULL, sizeof *R, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (R == MAP_FAILED) {
        perror("sisci_bench: mmap");
        return 1;
    }
    memset(R, 0, sizeof *R);
    g_memfd = memfd_create("sisci_bench-peer", MFD_CLOEXEC);
    if (g_memfd < 0 || ftruncate(g_memfd, 2 * PP_SEG) < 0) {
        perror("sisci_bench: memfd");
        return 1;
    }
    /* segment ids unique per run so concurrent runs on one node do not clash */
    g_idbase = 0x40000000u | (((uint32_t)getpid() & 0x3ffffu) << 8);

    print_header();
    fflush(stdout);

    uint64_t t0 = now_ns();
    int ok = 1;
    int sci_dead = 0;           /* stop early if the daemon is unreachable */
#define PHASE(p, fn, mode)                                                     \
    do {                                                                       \
        if (!sci_dead) {                                                       \
            ok &= run_phase(p, fn, mode);                                      \
            if (!R->ok[p] && (strstr(R->err[p][0], "SCIOpen") ||               \
                              strstr(R->err[p][1], "SCIOpen")))                \
                sci_dead = 1;                                                  \
        }                                                                      \
    } while (0)

    if (want('a'))
        PHASE(PH_BW, phase_bw, -1);
    if (want('b'))
        PHASE(PH_PP, phase_pp, -1);
    if (want('c') || want('d')) {
        for (int m = 0; m < NMODES; m++)
            PHASE(PH_INT0 + m, phase_intr, m);
        ok &= run_phase(PH_PEER, phase_peer, -1);
    }
    if (sci_dead) {
        ok = 0;
        fprintf(stderr, "sisci_bench: SCIOpen failed; is vscid running and VSCI_SOCKET "
                        "set?  Skipped the remaining SISCI phases.\n");
    }
    double elapsed = (double)(now_ns() - t0) / 1e9;

    print_results();
    printf("\ntotal time %.1f s%s\n", elapsed, ok ? "" : "   (SOME PHASES FAILED, see !! above)");
    fflush(stdout);
    if (opt.json && !write_json(opt.json))
        ok = 0;
    else if (opt.json)
        printf("json written to %s\n", opt.json);
    return ok ? 0 : 1;
}
