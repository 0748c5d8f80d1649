/*
 * sisci_bench.h - what the files of sisci_bench share: constants, phases,
 * the results the workers write into a shared mapping, the options, the
 * worker context and its helpers, and each phase's entry point.  See
 * main.c for what each section measures.
 *
 *   main.c         options, the coordinator (one pair of worker processes
 *                  per phase), the order of phases
 *   worker.c       a worker's errors, control channel and SISCI session
 *   bandwidth.c    a) segment write bandwidth
 *   pingpong.c     b) ping-pong through segments and through a memfd
 *   interrupts.c   c, d) interrupts, data interrupts, their eventfd peers
 *   report.c       the table and JSON
 */
#ifndef VSCI_SISCI_BENCH_H
#define VSCI_SISCI_BENCH_H

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

/* main.c defines the machine description stats.h fills and prints. */
#ifndef SISCI_BENCH_MAIN
#define BENCH_MACHINE_EXTERN
#endif
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

/* A shared mapping the coordinator reads after the workers exit (main.c). */
extern results_t *R;

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

/* main.c */
extern struct sisci_options {
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


void worker_fail(ctx_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

static inline void sci_check(ctx_t *c, const char *what, sci_error_t e)
{
    if (e != SCI_ERR_OK)
        worker_fail(c, "%s failed: %s (0x%08x): %s", what, sci_err_name(e),
                    (unsigned)e, SCIGetErrorString(e));
}

void ctl_send(ctx_t *c, uint64_t v);
uint64_t ctl_recv(ctx_t *c);
void ctl_barrier(ctx_t *c);
uint32_t agree_iters(ctx_t *c, uint64_t warm_ns, int warm, int lo, int hi, double budget);
void *xalloc(ctx_t *c, size_t size);
void sci_open_worker(ctx_t *c);
void sci_close_worker(ctx_t *c);
void sci_remove_local(ctx_t *c, sci_local_segment_t seg, sci_map_t map);
void make_rtt_stats(lat_t *L, uint64_t *rtt_ns, uint32_t n, uint32_t bad);

/* ------------------------------------------------------------------------ */
/* The phases: what each worker runs                                        */
/* ------------------------------------------------------------------------ */

void phase_bw(ctx_t *c);        /* bandwidth.c */
void phase_pp(ctx_t *c);        /* pingpong.c */
void phase_intr(ctx_t *c);      /* interrupts.c */
void phase_peer(ctx_t *c);

/* ------------------------------------------------------------------------ */
/* Output (report.c)                                                        */
/* ------------------------------------------------------------------------ */

extern uint64_t g_clock_step;   /* smallest non-zero step between two readings */

static inline int want(char s) { return strchr(opt.sections, s) != NULL; }

void print_header(void);
void print_results(void);
int write_json(const char *path);

#endif /* VSCI_SISCI_BENCH_H */
