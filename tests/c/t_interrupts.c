/*
 * t_interrupts.c - docs/api.md "Interrupts" and "Waiting", plain interrupts:
 *   SCICreateInterrupt (hint vs SCI_FLAG_FIXED_INTNO, callbacks),
 *   SCIConnectInterrupt (waiting for the creator), SCITriggerInterrupt
 *   (counted, never lost; NOT_CONNECTED after removal), SCIWaitForInterrupt
 *   (timeouts, CANCELLED on removal, the three wait modes),
 *   SCIDisconnectInterrupt, SCIRemoveInterrupt, and their errors.
 */
#include <pthread.h>

#include "common/proc.h"

#define WAIT_LONG 30000u

static sci_local_interrupt_t make_intr(sci_desc_t sd, unsigned int *no, unsigned int flags)
{
    sci_error_t err;
    sci_local_interrupt_t li;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, no, NULL, NULL, flags, &err));
    return li;
}

static void create_errors(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_interrupt_t li;
    unsigned int no = 3;
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCICreateInterrupt(NULL, &li, 0, &no, NULL, NULL,
                                                         NO_FLAGS, &err));
    EXPECT_FAIL(SCICreateInterrupt(sd, NULL, 0, &no, NULL, NULL, NO_FLAGS, &err));
    EXPECT_FAIL(SCICreateInterrupt(sd, &li, 0, NULL, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCICreateInterrupt(sd, &li, 1, &no, NULL, NULL,
                                                         NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL,
                                                    SCI_FLAG_FIXED_INTNO | BAD_FLAG, &err));
    /* Nothing was created by the failures: 3 is still free. */
    no = 3;
    li = make_intr(sd, &no, SCI_FLAG_FIXED_INTNO);
    CHECK_EQ(no, 3);
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIWaitForInterrupt(li, 0, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRemoveInterrupt(li, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIWaitForInterrupt(li, 0, NO_FLAGS, &err));
    close_sd(sd);
}

/* The number is a hint unless SCI_FLAG_FIXED_INTNO; numbers are per node
 * and per kind. */
static void hint_numbers_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 7;
    sci_local_interrupt_t li = make_intr(sd, &no, NO_FLAGS);
    CHECK_EQ(no, 7);
    peer_barrier(p);            /* B tries 7 */
    peer_barrier(p);
    /* A data interrupt may use the same number. */
    sci_local_data_interrupt_t ldi;
    unsigned int dno = 7;
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &ldi, 0, &dno, NULL, NULL,
                                              SCI_FLAG_FIXED_INTNO, &err));
    CHECK_EQ(dno, 7);
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    peer_barrier(p);            /* B takes 7 now it is free */
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(ldi, NO_FLAGS, &err));
    close_sd(sd);
}

static void hint_numbers_b(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_interrupt_t li1, li2, li3, li4;
    peer_barrier(p);
    unsigned int no = 7;
    li1 = make_intr(sd, &no, NO_FLAGS);
    printf("hint 7 taken by A: got %u\n", no);
    CHECK(no != 7);
    CHECK(no < 7);        /* the lowest free number */
    unsigned int first = no;
    no = 7;
    EXPECT(SCI_ERR_BUSY, SCICreateInterrupt(sd, &li2, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO,
                                            &err));
    no = first;
    EXPECT(SCI_ERR_BUSY, SCICreateInterrupt(sd, &li2, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO,
                                            &err));
    no = 9;
    li2 = make_intr(sd, &no, SCI_FLAG_FIXED_INTNO);
    CHECK_EQ(no, 9);
    /* A large hint that is free is given as is. */
    no = 1000;
    li3 = make_intr(sd, &no, NO_FLAGS);
    CHECK_EQ(no, 1000);
    peer_barrier(p);
    peer_barrier(p);
    no = 7;
    li4 = make_intr(sd, &no, SCI_FLAG_FIXED_INTNO);
    CHECK_EQ(no, 7);
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li3, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li4, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

static void connect_errors(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_interrupt_t ri;
    EXPECT(SCI_ERR_CONNECTION_REFUSED, SCIConnectInterrupt(sd, &ri, node, 0, 77, 0, NO_FLAGS,
                                                           &err));
    EXPECT(SCI_ERR_CONNECTION_REFUSED, SCIConnectInterrupt(sd, &ri, node, 0, 77, 200, NO_FLAGS,
                                                           &err));
    EXPECT(SCI_ERR_NO_SUCH_NODEID, SCIConnectInterrupt(sd, &ri, absent_node(node), 0, 77, 0,
                                                       NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_NODEID, SCIConnectInterrupt(sd, &ri, 0, 0, 77, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCIConnectInterrupt(sd, &ri, node, 1, 77, 0, NO_FLAGS,
                                                          &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIConnectInterrupt(NULL, &ri, node, 0, 77, 0, NO_FLAGS,
                                                          &err));
    unsigned int no = 77;
    sci_local_interrupt_t li = make_intr(sd, &no, SCI_FLAG_FIXED_INTNO);
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIConnectInterrupt(sd, &ri, node, 0, 77, 0, BAD_FLAG, &err));
    EXPECT_FAIL(SCIConnectInterrupt(sd, NULL, node, 0, 77, 0, NO_FLAGS, &err));
    /* A data interrupt 77 does not exist: kinds are separate. */
    sci_remote_data_interrupt_t rdi;
    EXPECT(SCI_ERR_CONNECTION_REFUSED, SCIConnectDataInterrupt(sd, &rdi, node, 0, 77, 0,
                                                               NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, 77, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCITriggerInterrupt(ri, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIDisconnectInterrupt(ri, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

/* SCIConnectInterrupt waits for another process to create the interrupt. */
static void connect_waits_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    CHECK_EQ(peer_recv(p), 1);
    sleep_ms(300);
    unsigned int no = 33;
    sci_local_interrupt_t li = make_intr(sd, &no, SCI_FLAG_FIXED_INTNO);
    EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_LONG, NO_FLAGS, &err));
    CHECK_EQ(peer_recv(p), 2);
    sleep_ms(300);
    no = 34;
    sci_local_interrupt_t li2 = make_intr(sd, &no, SCI_FLAG_FIXED_INTNO);
    EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li2, WAIT_LONG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li2, NO_FLAGS, &err));
    close_sd(sd);
}

static void connect_waits_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_interrupt_t ri, ri2;
    peer_send(p, 1);
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, 33, WAIT_LONG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    peer_send(p, 2);
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri2, node, 0, 34, SCI_INFINITE_TIMEOUT,
                                           NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri2, NO_FLAGS, &err));
    close_sd(sd);
}

/* Triggers are counted: N triggers, N wake-ups, then a timeout. */
#define PINGS 200

static void trigger_wait_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = 40;
    sci_local_interrupt_t li = make_intr(sd, &no, NO_FLAGS);
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForInterrupt(li, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForInterrupt(li, 100, NO_FLAGS, &err));
    peer_send(p, no);
    peer_barrier(p);            /* B triggered 5 times */
    for (int i = 0; i < 5; i++)
        EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForInterrupt(li, 0, NO_FLAGS, &err));
    /* Ping-pong: B triggers A, A triggers B. */
    unsigned int bno = (unsigned int)peer_recv(p);
    sci_remote_interrupt_t ri;
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, bno, WAIT_LONG, NO_FLAGS, &err));
    peer_barrier(p);
    for (int i = 0; i < PINGS; i++) {
        EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_LONG, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    }
    /* A burst: 1000 triggers, none lost. */
    peer_barrier(p);
    for (int i = 0; i < 1000; i++)
        EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_LONG, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForInterrupt(li, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void trigger_wait_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int ano = (unsigned int)peer_recv(p);
    sci_remote_interrupt_t ri;
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, ano, 0, NO_FLAGS, &err));
    for (int i = 0; i < 5; i++)
        EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    unsigned int no = 41;
    sci_local_interrupt_t li = make_intr(sd, &no, NO_FLAGS);
    peer_send(p, no);
    peer_barrier(p);
    uint64_t t0 = now_ms();
    for (int i = 0; i < PINGS; i++) {
        EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_LONG, NO_FLAGS, &err));
    }
    printf("%d round trips in %" PRIu64 " ms\n", PINGS, now_ms() - t0);
    peer_barrier(p);
    for (int i = 0; i < 1000; i++)
        EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

/* The same ping-pong under each wait mode (VSCI_WAIT). */
static void pingpong_mode(struct peer *p, const char *mode, int first)
{
    setenv("VSCI_WAIT", mode, 1);
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = 0;
    sci_local_interrupt_t li = make_intr(sd, &no, NO_FLAGS);
    peer_send(p, no);
    unsigned int other = (unsigned int)peer_recv(p);
    sci_remote_interrupt_t ri;
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, other, WAIT_LONG, NO_FLAGS, &err));
    /* A timeout still works in this mode. */
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForInterrupt(li, 50, NO_FLAGS, &err));
    peer_barrier(p);
    uint64_t t0 = now_ms();
    for (int i = 0; i < PINGS; i++) {
        if (first)
            EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_LONG, NO_FLAGS, &err));
        if (!first)
            EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    }
    if (first)
        printf("VSCI_WAIT=%s: %d round trips in %" PRIu64 " ms\n", mode, PINGS, now_ms() - t0);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void mode_poll_a(struct peer *p) { pingpong_mode(p, "poll", 1); }
static void mode_poll_b(struct peer *p) { pingpong_mode(p, "poll", 0); }
static void mode_block_a(struct peer *p) { pingpong_mode(p, "block", 1); }
static void mode_block_b(struct peer *p) { pingpong_mode(p, "block", 0); }
static void mode_adaptive_a(struct peer *p) { pingpong_mode(p, "adaptive", 1); }
static void mode_adaptive_b(struct peer *p) { pingpong_mode(p, "adaptive", 0); }

/*
 * Which wait strategy is in force shows in the waiting thread's state,
 * without any timing: spinning (poll) keeps it runnable ('R'), blocking
 * keeps it asleep ('S').  A thread waits 3 s on an interrupt nobody
 * triggers while the main thread samples its state.
 */
struct state_waiter {
    sci_local_interrupt_t li;
    volatile pid_t tid;
    volatile int started;
    sci_error_t result;
};

static void *state_waiter_thread(void *arg)
{
    struct state_waiter *w = arg;
    sci_error_t err = ERR_SENTINEL;
    w->tid = my_tid();
    w->started = 1;
    SCIWaitForInterrupt(w->li, 3000, NO_FLAGS, &err);
    w->result = err;
    return NULL;
}

static char thread_state(pid_t tid)
{
    char path[64], buf[512], state = '?';
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ')
            state = rp[2];
    }
    return state;
}

/* `mode`: "poll" or "block", or NULL to take it from VSCI_TEST_WAIT_EXPECT
 * (set by the harness for a daemon started with --wait-mode; the case does
 * nothing without it). */
static void wait_state_check(const char *set_env, const char *expect)
{
    if (!expect) {
        printf("VSCI_TEST_WAIT_EXPECT not set: nothing to check\n");
        return;
    }
    if (set_env)
        setenv("VSCI_WAIT", set_env, 1);
    else
        unsetenv("VSCI_WAIT");
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 90;
    struct state_waiter w = { .li = make_intr(sd, &no, NO_FLAGS), .tid = 0, .started = 0,
                              .result = ERR_SENTINEL };
    pthread_t t;
    CHECK(pthread_create(&t, NULL, state_waiter_thread, &w) == 0);
    WAIT_UNTIL(w.started, WAIT_LONG);
    sleep_ms(100);
    int running = 0, sleeping = 0, samples = 0;
    while (samples < 20) {
        char st = thread_state(w.tid);
        if (st == 'R')
            running++;
        else if (st == 'S')
            sleeping++;
        samples++;
        sleep_ms(50);
    }
    pthread_join(t, NULL);
    CHECK_ERR(w.result, SCI_ERR_TIMEOUT);
    printf("wait mode %s: waiter runnable in %d, asleep in %d of %d samples\n", expect, running,
           sleeping, samples);
    if (strcmp(expect, "poll") == 0)
        CHECK_MSG(sleeping <= 5, "a polling waiter slept in %d of %d samples", sleeping, samples);
    else
        CHECK_MSG(running <= 5, "a blocking waiter was runnable in %d of %d samples", running,
                  samples);
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(w.li, NO_FLAGS, &err));
    close_sd(sd);
}

static void wait_state_poll(struct peer *p) { (void)p; wait_state_check("poll", "poll"); }
static void wait_state_block(struct peer *p) { (void)p; wait_state_check("block", "block"); }
static void wait_state_daemon_default(struct peer *p)
{
    (void)p;
    wait_state_check(NULL, getenv("VSCI_TEST_WAIT_EXPECT"));
}

/* Callbacks run once per trigger, on a library thread. */
static int cb_count;
static int cb_cancel_after;            /* 0: never cancel */
static sci_local_interrupt_t cb_expected;
static int cb_bad;

static sci_callback_action_t intr_cb(void *arg, sci_local_interrupt_t interrupt,
                                     sci_error_t status)
{
    if (arg != &cb_count || interrupt != cb_expected || status != SCI_ERR_OK)
        __atomic_store_n(&cb_bad, 1, __ATOMIC_RELEASE);
    int n = __atomic_add_fetch(&cb_count, 1, __ATOMIC_ACQ_REL);
    return (cb_cancel_after && n >= cb_cancel_after) ? SCI_CALLBACK_CANCEL
                                                     : SCI_CALLBACK_CONTINUE;
}

static void callback_common_a(struct peer *p, int cancel_after)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_interrupt_t li;
    unsigned int no = 50;
    cb_cancel_after = cancel_after;
    /* Make the handle known to the callback before any trigger can come. */
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, intr_cb, &cb_count,
                                          SCI_FLAG_USE_CALLBACK, &err));
    __atomic_store_n(&cb_expected, li, __ATOMIC_RELEASE);
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIWaitForInterrupt(li, 0, NO_FLAGS, &err));
    peer_send(p, no);
    peer_barrier(p);           /* B triggered 10 times */
    if (!cancel_after) {
        WAIT_UNTIL(__atomic_load_n(&cb_count, __ATOMIC_ACQUIRE) >= 10, WAIT_LONG);
        sleep_ms(200);
        CHECK_EQ(__atomic_load_n(&cb_count, __ATOMIC_ACQUIRE), 10);
    } else {
        WAIT_UNTIL(__atomic_load_n(&cb_count, __ATOMIC_ACQUIRE) >= cancel_after, WAIT_LONG);
        sleep_ms(500);
        CHECK_MSG(__atomic_load_n(&cb_count, __ATOMIC_ACQUIRE) == cancel_after,
                  "callback ran %d times after returning SCI_CALLBACK_CANCEL on call %d",
                  cb_count, cancel_after);
    }
    CHECK_MSG(!__atomic_load_n(&cb_bad, __ATOMIC_ACQUIRE),
              "callback got a wrong argument, handle or status");
    /* (After SCI_CALLBACK_CANCEL docs/api.md does not say whether waiting
     * becomes legal, so that is only checked while the callback runs.) */
    if (!cancel_after)
        EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIWaitForInterrupt(li, 100, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void callback_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = (unsigned int)peer_recv(p);
    sci_remote_interrupt_t ri;
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, no, 0, NO_FLAGS, &err));
    for (int i = 0; i < 10; i++)
        EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    close_sd(sd);
}

static void callback_a(struct peer *p) { callback_common_a(p, 0); }
static void callback_cancel_a(struct peer *p) { callback_common_a(p, 3); }

/* Removing an interrupt wakes a thread blocked in SCIWaitForInterrupt. */
struct waiter {
    sci_local_interrupt_t li;
    volatile int started;
    volatile pid_t tid;
    sci_error_t result;
};

static void *waiter_thread(void *arg)
{
    struct waiter *w = arg;
    sci_error_t err = ERR_SENTINEL;
    w->tid = my_tid();
    w->started = 1;
    SCIWaitForInterrupt(w->li, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
    w->result = err;
    return NULL;
}

static void cancelled_while_waiting(struct peer *p)
{
    (void)p;
    setenv("VSCI_WAIT", "block", 1);      /* the waiter sleeps in the kernel */
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 60;
    struct waiter w = { .li = make_intr(sd, &no, NO_FLAGS), .started = 0,
                        .result = ERR_SENTINEL };
    pthread_t t;
    CHECK(pthread_create(&t, NULL, waiter_thread, &w) == 0);
    WAIT_UNTIL(w.started, WAIT_LONG);
    wait_thread_asleep(w.tid, WAIT_LONG);   /* blocked in the wait */
    sleep_ms(100);            /* let it block */
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(w.li, NO_FLAGS, &err));
    pthread_join(t, NULL);
    CHECK_ERR(w.result, SCI_ERR_CANCELLED);
    close_sd(sd);
}

/* A trigger after the creator removed the interrupt: NOT_CONNECTED, also
 * when a new interrupt now has the old number. */
static void not_connected_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 70;
    sci_local_interrupt_t li = make_intr(sd, &no, SCI_FLAG_FIXED_INTNO);
    peer_barrier(p);           /* B connected and triggered once */
    EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_LONG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    peer_barrier(p);           /* B: NOT_CONNECTED */
    peer_barrier(p);
    li = make_intr(sd, &no, SCI_FLAG_FIXED_INTNO);
    peer_barrier(p);           /* B: old handle still NOT_CONNECTED */
    peer_barrier(p);
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForInterrupt(li, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void not_connected_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_interrupt_t ri;
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, 70, WAIT_LONG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    close_sd(sd);
}

/* Conditional interrupts are declared but not offered: every call says so. */
static void conditional_not_implemented(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg;
    sci_local_interrupt_t li = NULL;
    unsigned int counter = 7;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x5301, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NOT_IMPLEMENTED,
           SCIRegisterInterruptFlag(0, &li, seg, 0, NULL, NULL, SCI_FLAG_CONDITIONAL_INTERRUPT, &err));
    CHECK(li == NULL);
    EXPECT(SCI_ERR_NOT_IMPLEMENTED, SCIEnableConditionalInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NOT_IMPLEMENTED, SCIDisableConditionalInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NOT_IMPLEMENTED, SCIGetConditionalInterruptTrigCounter(li, &counter, NO_FLAGS, &err));
    CHECK_EQ(counter, 7);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static const struct test_case cases[] = {
    { "create_errors", create_errors, NULL, 0 },
    { "conditional_not_implemented", conditional_not_implemented, NULL, 0 },
    { "hint_numbers", hint_numbers_a, hint_numbers_b, 0 },
    { "connect_errors", connect_errors, NULL, 0 },
    { "connect_waits_for_creator", connect_waits_a, connect_waits_b, 0 },
    { "trigger_wait_counted", trigger_wait_a, trigger_wait_b, 0 },
    { "wait_mode_poll", mode_poll_a, mode_poll_b, 0 },
    { "wait_mode_block", mode_block_a, mode_block_b, 0 },
    { "wait_mode_adaptive", mode_adaptive_a, mode_adaptive_b, 0 },
    { "wait_state_poll", wait_state_poll, NULL, 0 },
    { "wait_state_block", wait_state_block, NULL, 0 },
    { "wait_state_daemon_default", wait_state_daemon_default, NULL, 0 },
    { "callback", callback_a, callback_b, 0 },
    { "callback_cancel", callback_cancel_a, callback_b, 0 },
    { "cancelled_while_waiting", cancelled_while_waiting, NULL, 0 },
    { "not_connected_after_remove", not_connected_a, not_connected_b, 0 },
    { NULL, NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
    return proc_main(argc, argv, cases);
}
