/*
 * t_datainterrupts.c - docs/api.md "Interrupts", data interrupts:
 *   SCICreateDataInterrupt, SCIConnectDataInterrupt, SCITriggerDataInterrupt,
 *   SCIWaitForDataInterrupt, SCIDisconnectDataInterrupt,
 *   SCIRemoveDataInterrupt: payloads 0..1024 bytes (longer: OUT_OF_RANGE),
 *   a too-small receive buffer (OUT_OF_RANGE, *len = size needed, message
 *   kept), the 64-message queue (a trigger on a full queue: BUSY after 1 s),
 *   callbacks, timeouts, CANCELLED, NOT_CONNECTED, and argument errors.
 */
#include <pthread.h>

#include "common/proc.h"

#define WAIT_LONG 30000u
#define MAXD SCI_MAX_DATA_INTERRUPT_SIZE

static sci_local_data_interrupt_t make_dintr(sci_desc_t sd, unsigned int *no,
                                             unsigned int flags)
{
    sci_error_t err;
    sci_local_data_interrupt_t li;
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &li, 0, no, NULL, NULL, flags, &err));
    return li;
}

static sci_remote_data_interrupt_t connect_dintr(sci_desc_t sd, unsigned int node,
                                                 unsigned int no)
{
    sci_error_t err;
    sci_remote_data_interrupt_t ri;
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(sd, &ri, node, 0, no, WAIT_LONG, NO_FLAGS, &err));
    return ri;
}

static void fill(unsigned char *b, unsigned int len, unsigned int seed)
{
    for (unsigned int i = 0; i < len; i++)
        b[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 8));
}

static void check_payload(const unsigned char *b, unsigned int len, unsigned int seed)
{
    for (unsigned int i = 0; i < len; i++)
        CHECK_MSG(b[i] == (unsigned char)(seed * 31 + i * 7 + (i >> 8)),
                  "payload %u (len %u): byte %u is 0x%02x", seed, len, i, b[i]);
}

static void errors(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_data_interrupt_t li;
    sci_remote_data_interrupt_t ri;
    unsigned int no = 4;
    unsigned char buf[MAXD + 100];
    unsigned int len;
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCICreateDataInterrupt(NULL, &li, 0, &no, NULL, NULL,
                                                             NO_FLAGS, &err));
    EXPECT_FAIL(SCICreateDataInterrupt(sd, NULL, 0, &no, NULL, NULL, NO_FLAGS, &err));
    EXPECT_FAIL(SCICreateDataInterrupt(sd, &li, 0, NULL, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCICreateDataInterrupt(sd, &li, 1, &no, NULL, NULL,
                                                             NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCICreateDataInterrupt(sd, &li, 0, &no, NULL, NULL, BAD_FLAG,
                                                        &err));
    EXPECT(SCI_ERR_CONNECTION_REFUSED, SCIConnectDataInterrupt(sd, &ri, node, 0, 4, 0, NO_FLAGS,
                                                               &err));
    EXPECT(SCI_ERR_CONNECTION_REFUSED, SCIConnectDataInterrupt(sd, &ri, node, 0, 4, 200,
                                                               NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_NODEID, SCIConnectDataInterrupt(sd, &ri, absent_node(node), 0, 4, 0,
                                                           NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCIConnectDataInterrupt(sd, &ri, node, 1, 4, 0, NO_FLAGS,
                                                              &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIConnectDataInterrupt(NULL, &ri, node, 0, 4, 0, NO_FLAGS,
                                                              &err));

    no = 4;
    li = make_dintr(sd, &no, SCI_FLAG_FIXED_INTNO);
    CHECK_EQ(no, 4);
    /* Taken: FIXED fails, a hint moves. */
    sci_local_data_interrupt_t li2;
    EXPECT(SCI_ERR_BUSY, SCICreateDataInterrupt(sd, &li2, 0, &no, NULL, NULL,
                                                SCI_FLAG_FIXED_INTNO, &err));
    no = 4;
    li2 = make_dintr(sd, &no, NO_FLAGS);
    CHECK(no != 4);
    CHECK(no < 4);
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li2, NO_FLAGS, &err));
    /* A plain interrupt 4 does not exist: kinds are separate. */
    sci_remote_interrupt_t pri;
    EXPECT(SCI_ERR_CONNECTION_REFUSED, SCIConnectInterrupt(sd, &pri, node, 0, 4, 0, NO_FLAGS,
                                                           &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIConnectDataInterrupt(sd, &ri, node, 0, 4, 0, BAD_FLAG, &err));
    EXPECT_FAIL(SCIConnectDataInterrupt(sd, NULL, node, 0, 4, 0, NO_FLAGS, &err));
    ri = connect_dintr(sd, node, 4);

    fill(buf, sizeof buf, 1);
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCITriggerDataInterrupt(ri, buf, MAXD + 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCITriggerDataInterrupt(ri, buf, 0xffffffffu, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCITriggerDataInterrupt(ri, buf, 8, BAD_FLAG, &err));
    EXPECT_FAIL(SCITriggerDataInterrupt(ri, NULL, 8, NO_FLAGS, &err));
    /* None of those queued anything. */
    len = sizeof buf;
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    len = sizeof buf;
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForDataInterrupt(li, buf, &len, 100, NO_FLAGS, &err));
    len = sizeof buf;
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIWaitForDataInterrupt(li, buf, &len, 0, BAD_FLAG, &err));
    EXPECT_FAIL(SCIWaitForDataInterrupt(li, buf, NULL, 0, NO_FLAGS, &err));

    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIDisconnectDataInterrupt(ri, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCITriggerDataInterrupt(ri, buf, 8, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRemoveDataInterrupt(li, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    len = sizeof buf;
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    close_sd(sd);
}

/* Every payload size 0..1024, echoed back: A receives and echoes, B sends
 * and checks the echo. */
static void payloads_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = 10;
    sci_local_data_interrupt_t li = make_dintr(sd, &no, NO_FLAGS);
    peer_send(p, no);
    unsigned int bno = (unsigned int)peer_recv(p);
    sci_remote_data_interrupt_t ri = connect_dintr(sd, node, bno);
    unsigned char buf[MAXD];
    for (unsigned int size = 0; size <= MAXD; size++) {
        unsigned int len = sizeof buf;
        EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(li, buf, &len, WAIT_LONG, NO_FLAGS, &err));
        CHECK_EQ(len, size);
        check_payload(buf, len, size);
        EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, buf, len, NO_FLAGS, &err));
    }
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void payloads_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = 10;
    sci_local_data_interrupt_t li = make_dintr(sd, &no, NO_FLAGS);
    unsigned int ano = (unsigned int)peer_recv(p);
    peer_send(p, no);
    sci_remote_data_interrupt_t ri = connect_dintr(sd, node, ano);
    unsigned char out[MAXD], in[MAXD + 16];
    uint64_t t0 = now_ms();
    for (unsigned int size = 0; size <= MAXD; size++) {
        fill(out, size, size);
        EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, out, size, NO_FLAGS, &err));
        unsigned int len = sizeof in;
        EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(li, in, &len, WAIT_LONG, NO_FLAGS, &err));
        CHECK_EQ(len, size);
        check_payload(in, len, size);
    }
    printf("%u echoed messages in %" PRIu64 " ms\n", MAXD + 1, now_ms() - t0);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

/* A buffer too small: OUT_OF_RANGE, *len = size needed, message kept. */
static void small_buffer_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 11;
    sci_local_data_interrupt_t li = make_dintr(sd, &no, NO_FLAGS);
    peer_send(p, no);
    peer_barrier(p);          /* B sent 100, then 1024, then 0 bytes */
    unsigned char buf[MAXD];
    unsigned int len = 10;
    memset(buf, 0xcc, sizeof buf);
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIWaitForDataInterrupt(li, buf, &len, WAIT_LONG, NO_FLAGS,
                                                         &err));
    CHECK_EQ(len, 100);
    len = 99;
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    CHECK_EQ(len, 100);
    len = 0;
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    CHECK_EQ(len, 100);
    len = 100;
    EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    CHECK_EQ(len, 100);
    check_payload(buf, 100, 100);
    /* The next message, in a larger buffer than needed. */
    len = 1023;
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    CHECK_EQ(len, 1024);
    len = sizeof buf;
    EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    CHECK_EQ(len, 1024);
    check_payload(buf, 1024, 7);
    /* A 0-byte message fits a 0-byte buffer. */
    len = 0;
    EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    CHECK_EQ(len, 0);
    len = sizeof buf;
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void small_buffer_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = (unsigned int)peer_recv(p);
    sci_remote_data_interrupt_t ri = connect_dintr(sd, node, no);
    unsigned char out[MAXD];
    fill(out, 100, 100);
    EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, out, 100, NO_FLAGS, &err));
    fill(out, 1024, 7);
    EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, out, 1024, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, out, 0, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    close_sd(sd);
}

/* 64 messages queue up; the 65th trigger waits about 1 s and gets BUSY. */
static void queue_full_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 12;
    sci_local_data_interrupt_t li = make_dintr(sd, &no, NO_FLAGS);
    peer_send(p, no);
    peer_barrier(p);          /* B filled the queue and got BUSY */
    unsigned char buf[MAXD];
    for (unsigned int i = 0; i < 64; i++) {
        unsigned int len = sizeof buf;
        EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
        CHECK_EQ(len, 16 + i);
        check_payload(buf, len, i);     /* in order */
    }
    unsigned int len = sizeof buf;
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    peer_barrier(p);          /* B can trigger again */
    peer_barrier(p);
    len = sizeof buf;
    EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(li, buf, &len, WAIT_LONG, NO_FLAGS, &err));
    CHECK_EQ(len, 5);
    check_payload(buf, 5, 99);
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void queue_full_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = (unsigned int)peer_recv(p);
    sci_remote_data_interrupt_t ri = connect_dintr(sd, node, no);
    unsigned char out[MAXD];
    for (unsigned int i = 0; i < 64; i++) {
        fill(out, 16 + i, i);
        EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, out, 16 + i, NO_FLAGS, &err));
    }
    uint64_t t0 = now_ms();
    fill(out, 8, 200);
    EXPECT(SCI_ERR_BUSY, SCITriggerDataInterrupt(ri, out, 8, NO_FLAGS, &err));
    printf("trigger on a full queue returned BUSY after %" PRIu64 " ms\n", now_ms() - t0);
    peer_barrier(p);
    peer_barrier(p);
    fill(out, 5, 99);
    EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, out, 5, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    close_sd(sd);
}

/* A full queue that drains while the trigger waits: the trigger succeeds. */
static void queue_drains_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 13;
    sci_local_data_interrupt_t li = make_dintr(sd, &no, NO_FLAGS);
    peer_send(p, no);
    CHECK_EQ(peer_recv(p), 64);      /* queue is full, B is about to trigger */
    sleep_ms(100);
    unsigned char buf[MAXD];
    for (unsigned int i = 0; i < 65; i++) {
        unsigned int len = sizeof buf;
        EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(li, buf, &len, WAIT_LONG, NO_FLAGS, &err));
        CHECK_EQ(len, 4);
        check_payload(buf, 4, i);
    }
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void queue_drains_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = (unsigned int)peer_recv(p);
    sci_remote_data_interrupt_t ri = connect_dintr(sd, node, no);
    unsigned char out[8];
    for (unsigned int i = 0; i < 64; i++) {
        fill(out, 4, i);
        EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, out, 4, NO_FLAGS, &err));
    }
    peer_send(p, 64);
    fill(out, 4, 64);
    /* A starts draining 100 ms from now; this trigger may wait up to 1 s.
     * (It may also come back BUSY if this machine stalls A for a second;
     * then retry: what matters is that it is never lost or duplicated.) */
    for (;;) {
        err = ERR_SENTINEL;
        SCITriggerDataInterrupt(ri, out, 4, NO_FLAGS, &err);
        if (err != SCI_ERR_BUSY)
            break;
        printf("queue still full after the wait; retrying\n");
    }
    CHECK_ERR(err, SCI_ERR_OK);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    close_sd(sd);
}

/* Data interrupt callbacks get each payload. */
static int dcb_count, dcb_bad;
static unsigned int dcb_len[16];
static unsigned char dcb_data[16][MAXD];
static sci_local_data_interrupt_t dcb_expected;

static sci_callback_action_t dintr_cb(void *arg, sci_local_data_interrupt_t interrupt,
                                      void *data, unsigned int length, sci_error_t status)
{
    if (arg != &dcb_count || interrupt != __atomic_load_n(&dcb_expected, __ATOMIC_ACQUIRE) ||
        status != SCI_ERR_OK || length > MAXD)
        __atomic_store_n(&dcb_bad, 1, __ATOMIC_RELEASE);
    int i = __atomic_load_n(&dcb_count, __ATOMIC_ACQUIRE);
    if (i < 16 && length <= MAXD) {
        dcb_len[i] = length;
        if (length)
            memcpy(dcb_data[i], data, length);
    }
    __atomic_store_n(&dcb_count, i + 1, __ATOMIC_RELEASE);
    return SCI_CALLBACK_CONTINUE;
}

static void callback_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_data_interrupt_t li;
    unsigned int no = 14;
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &li, 0, &no, dintr_cb, &dcb_count,
                                              SCI_FLAG_USE_CALLBACK, &err));
    __atomic_store_n(&dcb_expected, li, __ATOMIC_RELEASE);
    unsigned char buf[MAXD];
    unsigned int len = sizeof buf;
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIWaitForDataInterrupt(li, buf, &len, 0, NO_FLAGS, &err));
    peer_send(p, no);
    static const unsigned int sizes[5] = { 1, 0, 100, 1024, 513 };
    WAIT_UNTIL(__atomic_load_n(&dcb_count, __ATOMIC_ACQUIRE) >= 5, WAIT_LONG);
    sleep_ms(100);
    CHECK_EQ(__atomic_load_n(&dcb_count, __ATOMIC_ACQUIRE), 5);
    CHECK_MSG(!dcb_bad, "callback got a wrong argument, handle, status or length");
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(dcb_len[i], sizes[i]);
        check_payload(dcb_data[i], dcb_len[i], (unsigned)i + 40);
    }
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    close_sd(sd);
}

static void callback_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = (unsigned int)peer_recv(p);
    sci_remote_data_interrupt_t ri = connect_dintr(sd, node, no);
    static const unsigned int sizes[5] = { 1, 0, 100, 1024, 513 };
    unsigned char out[MAXD];
    for (int i = 0; i < 5; i++) {
        fill(out, sizes[i], (unsigned)i + 40);
        EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(ri, out, sizes[i], NO_FLAGS, &err));
    }
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    close_sd(sd);
}

/* Removal wakes a blocked waiter with CANCELLED. */
struct dwaiter {
    sci_local_data_interrupt_t li;
    volatile int started;
    volatile pid_t tid;
    sci_error_t result;
};

static void *dwaiter_thread(void *arg)
{
    struct dwaiter *w = arg;
    unsigned char buf[MAXD];
    unsigned int len = sizeof buf;
    sci_error_t err = ERR_SENTINEL;
    w->tid = my_tid();
    w->started = 1;
    SCIWaitForDataInterrupt(w->li, buf, &len, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
    w->result = err;
    return NULL;
}

static void cancelled_while_waiting(struct peer *p)
{
    (void)p;
    setenv("VSCI_WAIT", "block", 1);      /* the waiter sleeps in the kernel */
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 15;
    struct dwaiter w = { .li = make_dintr(sd, &no, NO_FLAGS), .started = 0,
                         .result = ERR_SENTINEL };
    pthread_t t;
    CHECK(pthread_create(&t, NULL, dwaiter_thread, &w) == 0);
    WAIT_UNTIL(w.started, WAIT_LONG);
    wait_thread_asleep(w.tid, WAIT_LONG);   /* blocked in the wait */
    sleep_ms(100);
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(w.li, NO_FLAGS, &err));
    pthread_join(t, NULL);
    CHECK_ERR(w.result, SCI_ERR_CANCELLED);
    close_sd(sd);
}

/* Trigger after the creator removed it: NOT_CONNECTED. */
static void not_connected_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int no = 16;
    sci_local_data_interrupt_t li = make_dintr(sd, &no, SCI_FLAG_FIXED_INTNO);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(li, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    close_sd(sd);
}

static void not_connected_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_data_interrupt_t ri = connect_dintr(sd, node, 16);
    unsigned char out[8] = "payload";
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerDataInterrupt(ri, out, 8, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

static const struct test_case cases[] = {
    { "errors", errors, NULL, 0 },
    { "payloads_0_to_1024", payloads_a, payloads_b, 0 },
    { "small_buffer", small_buffer_a, small_buffer_b, 0 },
    { "queue_full_busy", queue_full_a, queue_full_b, 0 },
    { "queue_drains_while_trigger_waits", queue_drains_a, queue_drains_b, 0 },
    { "callback", callback_a, callback_b, 0 },
    { "cancelled_while_waiting", cancelled_while_waiting, NULL, 0 },
    { "not_connected_after_remove", not_connected_a, not_connected_b, 0 },
    { NULL, NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
    return proc_main(argc, argv, cases);
}
