/*
 * t_gasnet_like.c - a program that handles its signals the way GASNet's
 * SISCI conduit does (issue 33, crates/vsci-systest/tests/signals.rs), then
 * runs a two-node ping-pong over remote maps.
 *
 * GASNet's gasnet_attach registers one handler for SIGSEGV, SIGBUS, SIGILL,
 * SIGFPE and SIGABRT with signal() (gasneti_reghandler): it prints
 * "*** Caught a fatal signal", puts back the default disposition and
 * re-raises.  Its backtrace code saves and restores dispositions with
 * signal() around the backtrace.  Across two nodes every GASNet test died
 * with SIGBUS or SIGSEGV at its first store into a remote map.
 *
 *   t_gasnet_like [-wait S] ping|pong ROUNDS MYSEG PEERNODE:PEERSEG [fault]
 *       "gasnet_init": SCIInitialize, SCIOpen, create MYSEG (one page).
 *       "gasnet_attach": signal() handlers for the five fatal signals (each
 *       signal() must return SIG_DFL: the program installed nothing before),
 *       a backtrace with signal() save/restore around it, then connect to
 *       PEERNODE:PEERSEG and map it.  ping stores i into the peer's counter
 *       word and spins on its own until it reads i; pong spins until it
 *       reads i and stores i back; odd rounds SCIFlush after the store, even
 *       rounds make no call.  Every 1,000 rounds a backtrace again (signal()
 *       save/restore around it).  Prints "GASNET <side> DONE round_trips=N",
 *       then checks that sigaction reports its handler for each of the five
 *       ("GASNET REPORT-BACK OK").  With `fault`, a NULL write afterwards:
 *       its handler prints "*** Caught a fatal signal: SIGSEGV(11)" and
 *       re-raises, and the process dies of SIGSEGV, as GASNet's does.
 *       A fatal signal caught before that prints the same line with
 *       "during the run" and re-raises: the test sees the death.
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>

#include "common/proc.h"
#include "common/roles.h"

#define PAGE 4096u
#define COUNTER_OFF 128u

static volatile sig_atomic_t final_fault;
static int *volatile null_ptr = NULL;

static const char *signame(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "?";
    }
}

/* gasneti_defaultSignalHandler: print, restore the default, re-raise. */
static void fatal_handler(int sig)
{
    char b[200];
    snprintf(b, sizeof b, "*** Caught a fatal signal: %s(%d) on node %d/2 %s\n", signame(sig), sig,
             0, final_fault ? "(the program's own fault)" : "during the run");
    ssize_t w = write(2, b, strlen(b));
    w = write(1, b, strlen(b));
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static const int fatal_sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
#define NFATAL (sizeof fatal_sigs / sizeof fatal_sigs[0])

static void bt_handler(int sig)
{
    (void)sig;
    const char m[] = "*** fault during the backtrace\n";
    ssize_t w = write(2, m, sizeof m - 1);
    (void)w;
    _exit(9);
}

static int bad_report;

/* A backtrace, with the dispositions saved and restored around it by
 * signal() (as GASNet's gasneti_print_backtrace does). */
static void backtrace_like(void)
{
    void (*old[NFATAL])(int);
    for (size_t i = 0; i < NFATAL; i++) {
        old[i] = signal(fatal_sigs[i], bt_handler);
        if (old[i] != fatal_handler) {
            printf("GASNET REPORT-BACK MISMATCH: signal(%s) returned %p around the backtrace, "
                   "not the program's handler %p\n", signame(fatal_sigs[i]), (void *)old[i],
                   (void *)fatal_handler);
            bad_report++;
            old[i] = fatal_handler;
        }
    }
    void *frames[32];
    int n = backtrace(frames, 32);
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
        backtrace_symbols_fd(frames, n, fd);
        close(fd);
    }
    for (size_t i = 0; i < NFATAL; i++) {
        void (*r)(int) = signal(fatal_sigs[i], old[i]);
        if (r != bt_handler) {
            printf("GASNET REPORT-BACK MISMATCH: restoring %s, signal() returned %p, not the "
                   "backtrace's %p\n", signame(fatal_sigs[i]), (void *)r, (void *)bt_handler);
            bad_report++;
        }
    }
}

static int run(int ping, uint32_t rounds, unsigned myseg, const char *peer, int fault)
{
    sci_error_t err;
    unsigned node;
    const char *side = ping ? "ping" : "pong";
    if (fault) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_CORE, &rl) == 0) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_CORE, &rl);
        }
    }

    /* gasnet_init */
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t ls;
    sci_map_t lmap;
    volatile unsigned char *own;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &ls, myseg, PAGE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, own = SCIMapLocalSegment(ls, &lmap, 0, PAGE, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(ls, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(ls, 0, NO_FLAGS, &err));

    /* gasnet_attach: the fatal-signal handlers, a backtrace, the segments */
    for (size_t i = 0; i < NFATAL; i++) {
        void (*old)(int) = signal(fatal_sigs[i], fatal_handler);
        if (old != SIG_DFL) {
            printf("GASNET REPORT-BACK MISMATCH: the first signal(%s) returned %p, not SIG_DFL\n",
                   signame(fatal_sigs[i]), (void *)old);
            bad_report++;
        }
    }
    backtrace_like();
    unsigned pnode, pseg;
    parse_target(peer, &pnode, &pseg);
    sci_remote_segment_t rs;
    uint64_t t0 = now_ms();
    for (;;) {
        err = ERR_SENTINEL;
        SCIConnectSegment(sd, &rs, pnode, pseg, 0, NULL, NULL, 1000, NO_FLAGS, &err);
        if (err == SCI_ERR_OK)
            break;
        if (now_ms() - t0 > 60000)
            FAILF("SCIConnectSegment(node %u, segment 0x%x) still fails after 60 s: %s", pnode,
                  pseg, err_name(err));
        sleep_ms(50);
    }
    sci_map_t rmap;
    volatile unsigned char *rp;
    EXPECT(SCI_ERR_OK, rp = SCIMapRemoteSegment(rs, &rmap, 0, PAGE, NULL, NO_FLAGS, &err));
    backtrace_like();
    volatile uint32_t *mine = (volatile uint32_t *)(own + COUNTER_OFF);
    volatile uint32_t *theirs = (volatile uint32_t *)(rp + COUNTER_OFF);
    printf("GASNET %s READY node=%u peer=%u rounds=%u\n", side, node, pnode, rounds);

    uint64_t t1 = now_ms();
    for (uint32_t i = 1; i <= rounds; i++) {
        if (ping) {
            *theirs = i;
            if (i & 1)
                SCIFlush(NULL, NO_FLAGS);
        }
        uint64_t deadline = now_ms() + wait_ms;
        if (!SPIN_UNTIL(*mine == i, deadline))
            FAILF("%s: round %u of %u: own counter holds %u after %" PRIu64 " ms, want %u: a "
                  "store was lost", side, i, rounds, *mine, wait_ms, i);
        if (!ping) {
            *theirs = i;
            if (i & 1)
                SCIFlush(NULL, NO_FLAGS);
        }
        if (i % 1000 == 0)
            backtrace_like();
    }
    uint64_t ms = now_ms() - t1;
    printf("GASNET %s DONE round_trips=%u ms=%" PRIu64 " (%.1f us per round trip)\n", side, rounds,
           ms, rounds ? 1000.0 * (double)ms / rounds : 0.0);

    for (size_t i = 0; i < NFATAL; i++) {
        struct sigaction cur;
        memset(&cur, 0, sizeof cur);
        sigaction(fatal_sigs[i], NULL, &cur);
        if (cur.sa_handler != fatal_handler) {
            printf("GASNET REPORT-BACK MISMATCH: sigaction(%s) reports %p, not the program's "
                   "handler %p\n", signame(fatal_sigs[i]), (void *)cur.sa_handler,
                   (void *)fatal_handler);
            bad_report++;
        }
    }
    if (!bad_report)
        printf("GASNET REPORT-BACK OK: every signal() and sigaction answer was the program's own\n");

    if (fault) {
        printf("GASNET OWN FAULT: a NULL write\n");
        fflush(stdout);
        final_fault = 1;
        *null_ptr = 1;
        printf("GASNET OWN FAULT DID NOT KILL\n");
        return 7;
    }
    /* Unmap makes the last answer visible; the peer may be gone already
     * (it ends with a fault of its own), so errors are noted, not judged. */
    SCIUnmapSegment(rmap, NO_FLAGS, &err);
    if (err != SCI_ERR_OK)
        printf("note: SCIUnmapSegment: %s\n", err_name(err));
    SCIDisconnectSegment(rs, NO_FLAGS, &err);
    if (err != SCI_ERR_OK)
        printf("note: SCIDisconnectSegment: %s\n", err_name(err));
    SCIClose(sd, NO_FLAGS, &err);
    return bad_report ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    roles_init(&argc, &argv, "t_gasnet_like");
    if (argc < 5) {
        fprintf(stderr, "usage: t_gasnet_like [-wait S] ping|pong ROUNDS MYSEG PEERNODE:PEERSEG [fault]\n");
        return 2;
    }
    const char *side = argv[1];
    check_role = side;
    if (strcmp(side, "ping") && strcmp(side, "pong")) {
        fprintf(stderr, "t_gasnet_like: side %s is neither ping nor pong\n", side);
        return 2;
    }
    alarm(1200);
    return run(strcmp(side, "ping") == 0, (uint32_t)argu(argc, argv, 2),
               (unsigned)argu(argc, argv, 3), arg(argc, argv, 4),
               argc > 5 && strcmp(argv[5], "fault") == 0);
}
