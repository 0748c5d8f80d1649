/*
 * sisci_bench - vsci micro-benchmarks against peers measured in the same run.
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
 *
 * This file: the options, the coordinator that forks the workers of each
 * phase, and the order of phases; sisci_bench.h lists the other files and
 * what each holds.
 */

#define SISCI_BENCH_MAIN
#include "sisci_bench.h"

results_t *R;
struct sisci_options opt;

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
        } else {
            return help_or_unknown("sisci_bench", a, argv[i], usage);
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
    return json_and_status(ok, opt.json, write_json);
}
