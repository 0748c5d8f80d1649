/*
 * proc.h - run SISCI test cases as separate processes.
 *
 * Each test case has one or two roles ("A" and "B").  The main process never
 * calls SISCI: for every case it forks one child per role, and each child
 * opens its own descriptor and talks to the other through the API (and, for
 * sequencing only, through a pair of pipes: peer_send()/peer_recv()).
 *
 * A case passes when every role exits 0.  A role that is expected to die by
 * SIGKILL (it kills itself to play a crashed peer) is marked in the table.
 * Each role has a watchdog (alarm) so a hang fails the case instead of
 * blocking the run; when one role fails, the other is killed.
 *
 * Usage of a test program:   prog [-l] [CASE...]
 *   -l      list the cases
 *   CASE    run only the named cases (default: all)
 * The last line printed is "N passed, N failed".
 */
#ifndef VSCI_TEST_PROC_H
#define VSCI_TEST_PROC_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"

/* Seconds a role may run before its watchdog kills it. */
#ifndef ROLE_TIMEOUT_S
#define ROLE_TIMEOUT_S 90
#endif

/* Milliseconds peer_recv() waits for the other role. */
#define PEER_WAIT_MS 60000

struct peer {
    int role;            /* 0 = A, 1 = B */
    int rfd, wfd;        /* pipe ends to and from the other role */
};

typedef void (*role_fn)(struct peer *p);

struct test_case {
    const char *name;
    role_fn a;
    role_fn b;           /* NULL: single-process case */
    int b_dies;          /* B is expected to end by SIGKILL */
};

/* ---- talking to the other role (sequencing only) ------------------------ */

static inline void peer_send(struct peer *p, uint64_t v)
{
    const char *b = (const char *)&v;
    size_t done = 0;
    while (done < sizeof v) {
        ssize_t n = write(p->wfd, b + done, sizeof v - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            FAILF("peer_send: other role is gone");
        done += (size_t)n;
    }
}

static inline uint64_t peer_recv(struct peer *p)
{
    uint64_t v = 0;
    char *b = (char *)&v;
    size_t done = 0;
    while (done < sizeof v) {
        struct pollfd pfd = { .fd = p->rfd, .events = POLLIN };
        int r = poll(&pfd, 1, PEER_WAIT_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            FAILF("peer_recv: no word from the other role in %d ms", PEER_WAIT_MS);
        ssize_t n = read(p->rfd, b + done, sizeof v - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            FAILF("peer_recv: other role exited early");
        done += (size_t)n;
    }
    return v;
}

/* Both roles call this; it returns when both reached it. */
static inline void peer_barrier(struct peer *p)
{
    peer_send(p, 0xBA55);
    uint64_t v = peer_recv(p);
    if (v != 0xBA55)
        FAILF("peer_barrier: out of step (got %" PRIu64 ")", v);
}

/* Wait until the other role has exited (its pipe end closes). */
static inline void peer_wait_gone(struct peer *p)
{
    char c;
    for (;;) {
        struct pollfd pfd = { .fd = p->rfd, .events = POLLIN };
        int r = poll(&pfd, 1, PEER_WAIT_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            FAILF("peer_wait_gone: other role still alive after %d ms", PEER_WAIT_MS);
        ssize_t n = read(p->rfd, &c, 1);
        if (n == 0)
            return;
        if (n < 0 && errno != EINTR)
            return;
    }
}

/* ---- small utilities ----------------------------------------------------- */

static inline void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static inline uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Spin-sleep until *flag reaches at least `want`, or fail after `ms`. */
#define WAIT_UNTIL(cond, ms) do {                                              \
        uint64_t dl_ = now_ms() + (ms);                                        \
        while (!(cond)) {                                                      \
            if (now_ms() > dl_)                                                \
                FAILF("timed out after %u ms waiting for %s", (unsigned)(ms), #cond); \
            sleep_ms(1);                                                       \
        }                                                                      \
    } while (0)

static inline pid_t my_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* Wait until thread `tid` of this process has been asleep (state S in
 * /proc) for several samples in a row, e.g. blocked in a wait call. */
static inline void wait_thread_asleep(pid_t tid, unsigned ms)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    uint64_t deadline = now_ms() + ms;
    int asleep = 0;
    while (asleep < 5) {
        char buf[512], state = '?';
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = 0;
            fclose(f);
            char *rp = strrchr(buf, ')');
            if (rp && rp[1] == ' ')
                state = rp[2];
        }
        asleep = state == 'S' ? asleep + 1 : 0;
        if (now_ms() > deadline)
            FAILF("thread %d never went to sleep (state %c)", (int)tid, state);
        sleep_ms(20);
    }
}

/* Open a descriptor and return it together with the local node id. */
static inline sci_desc_t open_sd(unsigned int *node)
{
    sci_error_t err;
    sci_desc_t sd = NULL;
    EXPECT(SCI_ERR_OK, SCIInitialize(NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIOpen(&sd, NO_FLAGS, &err));
    if (node) {
        EXPECT(SCI_ERR_OK, SCIGetLocalNodeId(0, node, NO_FLAGS, &err));
    }
    return sd;
}

static inline void close_sd(sci_desc_t sd)
{
    sci_error_t err;
    EXPECT(SCI_ERR_OK, SCIClose(sd, NO_FLAGS, &err));
}

/* A node id that is neither this node nor, in a one-node setup, any other. */
static inline unsigned int absent_node(unsigned int local)
{
    return local == 4242 ? 4243 : 4242;
}

/* ---- the runner ---------------------------------------------------------- */

static inline pid_t proc_spawn_role(const struct test_case *tc, int role,
                                    int rfd, int wfd, int close1, int close2)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        close(close1);
        close(close2);
        check_role = role == 0 ? "A" : "B";
        setvbuf(stdout, NULL, _IOLBF, 0);
        alarm(ROLE_TIMEOUT_S);
        struct peer p = { .role = role, .rfd = rfd, .wfd = wfd };
        signal(SIGPIPE, SIG_IGN);
        (role == 0 ? tc->a : tc->b)(&p);
        fflush(stdout);
        exit(0);
    }
    return pid;
}

static inline const char *proc_describe(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == SIGALRM ? " - watchdog: role hung" : "");
    else
        snprintf(buf, n, "status 0x%x", status);
    return buf;
}

static inline int proc_run_case(const struct test_case *tc)
{
    int ab[2], ba[2];
    if (pipe(ab) || pipe(ba)) {
        perror("pipe");
        exit(2);
    }
    printf("[ RUN      ] %s\n", tc->name);
    fflush(stdout);
    pid_t pids[2] = { -1, -1 };
    int done[2] = { 0, 0 };
    /* A reads ba, writes ab; B reads ab, writes ba. */
    pids[0] = proc_spawn_role(tc, 0, ba[0], ab[1], ab[0], ba[1]);
    if (tc->b)
        pids[1] = proc_spawn_role(tc, 1, ab[0], ba[1], ba[0], ab[1]);
    close(ab[0]); close(ab[1]); close(ba[0]); close(ba[1]);

    int nroles = tc->b ? 2 : 1, left = nroles, failed = 0;
    char why[2][96] = { "", "" };
    while (left > 0) {
        int st;
        pid_t w = waitpid(-1, &st, 0);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        int r = w == pids[0] ? 0 : w == pids[1] ? 1 : -1;
        if (r < 0)
            continue;
        done[r] = 1;
        left--;
        int ok = (r == 1 && tc->b_dies)
                     ? (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
                     : (WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (!ok) {
            failed = 1;
            proc_describe(st, why[r], sizeof why[r]);
            /* The other role may be waiting for this one: stop it. */
            for (int o = 0; o < nroles; o++)
                if (!done[o] && pids[o] > 0)
                    kill(pids[o], SIGKILL);
        }
    }
    if (failed) {
        printf("[   FAIL   ] %s:", tc->name);
        for (int r = 0; r < nroles; r++)
            if (why[r][0])
                printf(" role %c %s;", r == 0 ? 'A' : 'B', why[r]);
        printf("\n");
    } else {
        printf("[       OK ] %s\n", tc->name);
    }
    fflush(stdout);
    return failed;
}

static inline int proc_main(int argc, char **argv, const struct test_case *cases)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1 && strcmp(argv[1], "-l") == 0) {
        for (const struct test_case *tc = cases; tc->name; tc++)
            printf("%s\n", tc->name);
        return 0;
    }
    int passed = 0, failed = 0;
    char failed_names[4096] = "";
    for (int i = 1; i < argc; i++) {
        int found = 0;
        for (const struct test_case *tc = cases; tc->name; tc++)
            if (strcmp(tc->name, argv[i]) == 0)
                found = 1;
        if (!found) {
            fprintf(stderr, "no such case: %s (use -l to list)\n", argv[i]);
            return 2;
        }
    }
    for (const struct test_case *tc = cases; tc->name; tc++) {
        if (argc > 1) {
            int want = 0;
            for (int i = 1; i < argc; i++)
                if (strcmp(tc->name, argv[i]) == 0)
                    want = 1;
            if (!want)
                continue;
        }
        if (proc_run_case(tc)) {
            failed++;
            if (strlen(failed_names) + strlen(tc->name) + 2 < sizeof failed_names) {
                strcat(failed_names, " ");
                strcat(failed_names, tc->name);
            }
        } else {
            passed++;
        }
    }
    if (failed)
        printf("failed cases:%s\n", failed_names);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif /* VSCI_TEST_PROC_H */
