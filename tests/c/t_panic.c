/*
 * t_panic.c - no panic of libsisci's unwinds into the program (issue 36).
 *
 * Run with VSCI_TEST_PANIC naming the entry points that must panic (see
 * crates/sisci/src/guard.rs); each mode checks that every call so made
 * fails the way it can fail and that the program goes on:
 *
 *   t_panic api          VSCI_TEST_PANIC=*: every SISCI and vsci_tmem call
 *                        (and one through Dolphin's _SISCI_PUBLIC_FUNC_
 *                        names) reports SCI_ERR_SYSTEM, or returns its
 *                        default value (0, NULL, SCI_DMAQUEUE_ERROR,
 *                        SCI_SEQ_NOT_RETRIABLE) if it has no error pointer;
 *                        the void calls without one just return. No node.
 *   t_panic interposers  VSCI_TEST_PANIC names memcpy, memmove and the
 *                        signal calls: the copies are made anyway, the
 *                        signal calls fail with -1 (SIG_ERR) and EINVAL
 *                        (pthread_sigmask returns EINVAL). No node.
 *   t_panic flush        VSCI_TEST_PANIC=SCIFlush,SCIStoreBarrier: with a
 *                        node, a segment written through a map and read
 *                        through another process-level connection; the
 *                        panicking calls return and everything else works.
 *   t_panic callbacks    VSCI_TEST_PANIC=cb_local_segment,cb_remote_segment,
 *                        cb_interrupt,cb_data_interrupt,cb_dma: with a node,
 *                        events, interrupts and a DMA completion whose
 *                        callback closure panics; the calls succeed, the
 *                        program's callbacks are not called, waiting on the
 *                        interrupts works once their callback threads ended.
 *   t_panic load         with the constructors panicking (at_load,
 *                        find_next, in_executable): a copy and a segment work.
 *
 * Prints "<MODE> OK" on success; crates/vsci-systest/tests/panics.rs runs
 * it and reads the library's "NAME: caught a panic" lines from stderr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>

#include "common/proc.h"
#include "vsci_tmem.h"

#define EXPECT_SYSTEM(call) EXPECT(SCI_ERR_SYSTEM, call)

static void api(void)
{
    sci_error_t err;
    void *h = (void *)0x1000; /* never looked at: every call panics first */
    unsigned int u = 0;
    size_t sz = 0;
    char buf[64];

    EXPECT_SYSTEM(SCIInitialize(NO_FLAGS, &err));
    SCITerminate();
    EXPECT_SYSTEM(SCIOpen((sci_desc_t *)&h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIClose(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIQuery(SCI_Q_VENDORID, buf, NO_FLAGS, &err));
    CHECK(SCIGetErrorString(SCI_ERR_OK) != NULL);
    EXPECT_SYSTEM(SCIGetLocalNodeId(0, &u, NO_FLAGS, &err));
    EXPECT_SYSTEM(CHECK(SCIProbeNode(h, 0, 1, NO_FLAGS, &err) == 0));

    EXPECT_SYSTEM(SCICreateSegment(h, (sci_local_segment_t *)&h, 1, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIPrepareSegment(h, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCISetSegmentAvailable(h, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCISetSegmentUnavailable(h, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIRemoveSegment(h, NO_FLAGS, &err));
    CHECK(SCIGetLocalSegmentSize(h) == 0);
    CHECK(SCIGetLocalSegmentId(h) == 0);
    EXPECT_SYSTEM(CHECK(SCIWaitForLocalSegmentEvent(h, &u, &u, 0, NO_FLAGS, &err) == 0));
    EXPECT_SYSTEM(SCIRegisterSegmentMemory(buf, sizeof buf, h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIShareSegment(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIAttachLocalSegment(h, (sci_local_segment_t *)&h, 1, &sz, NULL, NULL, NO_FLAGS, &err));

    EXPECT_SYSTEM(SCIConnectSegment(h, (sci_remote_segment_t *)&h, 1, 1, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIDisconnectSegment(h, NO_FLAGS, &err));
    CHECK(SCIGetRemoteSegmentSize(h) == 0);
    CHECK(SCIGetRemoteSegmentId(h) == 0);
    CHECK(SCIGetRemoteSegmentNodeId(h) == 0);
    sci_error_t status;
    EXPECT_SYSTEM(CHECK(SCIWaitForRemoteSegmentEvent(h, &status, 0, NO_FLAGS, &err) == 0));

    EXPECT_SYSTEM(CHECK(SCIMapLocalSegment(h, (sci_map_t *)&h, 0, 4096, NULL, NO_FLAGS, &err) == NULL));
    EXPECT_SYSTEM(CHECK(SCIMapRemoteSegment(h, (sci_map_t *)&h, 0, 4096, NULL, NO_FLAGS, &err) == NULL));
    EXPECT_SYSTEM(SCIUnmapSegment(h, NO_FLAGS, &err));
    CHECK(SCIGetMapPointer(h) == NULL);

    EXPECT_SYSTEM(SCIMemCpy(NULL, buf, h, 0, 8, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIMemWrite(buf, buf, 8, NO_FLAGS, &err));
    SCIFlush(NULL, NO_FLAGS);
    SCIStoreBarrier(NULL, NO_FLAGS);
    EXPECT_SYSTEM(SCICacheSync(NULL, buf, 8, SCI_FLAG_CACHE_FLUSH, &err));
    EXPECT_SYSTEM(SCICreateMapSequence(h, (sci_sequence_t *)&h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIRemoveSequence(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(CHECK(SCIStartSequence(h, NO_FLAGS, &err) == SCI_SEQ_NOT_RETRIABLE));
    EXPECT_SYSTEM(CHECK(SCICheckSequence(h, NO_FLAGS, &err) == SCI_SEQ_NOT_RETRIABLE));

    EXPECT_SYSTEM(SCICreateInterrupt(h, (sci_local_interrupt_t *)&h, 0, &u, NULL, NULL, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIRemoveInterrupt(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIWaitForInterrupt(h, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIConnectInterrupt(h, (sci_remote_interrupt_t *)&h, 1, 0, 1, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIDisconnectInterrupt(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCITriggerInterrupt(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIRegisterInterruptFlag(0, (sci_local_interrupt_t *)&h, h, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIEnableConditionalInterrupt(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIDisableConditionalInterrupt(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIGetConditionalInterruptTrigCounter(h, &u, NO_FLAGS, &err));

    EXPECT_SYSTEM(SCICreateDataInterrupt(h, (sci_local_data_interrupt_t *)&h, 0, &u, NULL, NULL, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIRemoveDataInterrupt(h, NO_FLAGS, &err));
    u = sizeof buf;
    EXPECT_SYSTEM(SCIWaitForDataInterrupt(h, buf, &u, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIConnectDataInterrupt(h, (sci_remote_data_interrupt_t *)&h, 1, 0, 1, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIDisconnectDataInterrupt(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCITriggerDataInterrupt(h, buf, 8, NO_FLAGS, &err));

    dis_dma_vec_t vec = { 0 };
    EXPECT_SYSTEM(SCICreateDMAQueue(h, (sci_dma_queue_t *)&h, 0, 1, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIRemoveDMAQueue(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIAbortDMAQueue(h, NO_FLAGS, &err));
    CHECK(SCIDMAQueueState(h) == SCI_DMAQUEUE_ERROR);
    EXPECT_SYSTEM(CHECK(SCIWaitForDMAQueue(h, 0, NO_FLAGS, &err) == SCI_DMAQUEUE_ERROR));
    EXPECT_SYSTEM(SCIStartDmaTransfer(h, h, h, 0, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIStartDmaTransferMem(h, buf, h, 8, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIStartDmaTransferVec(h, h, h, 1, &vec, NULL, NULL, NO_FLAGS, &err));
    /* Its state after a failure: SCIDMAQueueState's, which panics too. */
    EXPECT_SYSTEM(CHECK(SCIEnqueueDMATransfer(h, h, h, 0, 0, 8, NO_FLAGS, &err) == SCI_DMAQUEUE_ERROR));
    EXPECT_SYSTEM(SCIPostDMAQueue(h, NULL, NULL, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIResetDMAQueue(h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIRequestDMAChannel(h, (sci_dma_channel_t *)&h, 0, SCI_DMA_TYPE_DONTCARE,
                                       SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIReturnDMAChannel(h, &err));
    EXPECT_SYSTEM(SCIAssignDMAChannel(h, h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIPrepareLocalSegmentForDMA(h, h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIUnprepareLocalSegmentForDMA(h, h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIPrepareRemoteSegmentForDMA(h, h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIUnprepareRemoteSegmentForDMA(h, h, NO_FLAGS, &err));

    SetSciMemCopyFunction(1);
    CHECK(GetSciMemCopyFunction() == 0);

    sci_address_t addr = { 0 };
    EXPECT_SYSTEM(SCIphDmaEnqueue(h, 8, 0, 1, 0, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(CHECK(SCIphDmaStart(h, NULL, NULL, NO_FLAGS, &err) == SCI_DMAQUEUE_ERROR));
    EXPECT_SYSTEM(CHECK(SCIGetCSRRegister(h, 0, 1, 0, NO_FLAGS, &err) == 0));
    EXPECT_SYSTEM(SCISetCSRRegister(h, 0, 1, 0, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(CHECK(SCIGetLocalCSR(h, 0, 0, NO_FLAGS, &err) == 0));
    EXPECT_SYSTEM(SCISetLocalCSR(h, 0, 0, 0, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIAttachPhysicalMemory(0, buf, 0, 8, h, NO_FLAGS, &err));
    EXPECT_SYSTEM(SCIConnectSCISpace(h, 0, (sci_remote_segment_t *)&h, addr, 8, NO_FLAGS, &err));

    /* vsci_tmem_*. */
    unsigned int lender = 1;
    vsci_tmem_stats_t st;
    EXPECT_SYSTEM(CHECK(vsci_tmem_open(&lender, 1, 1 << 20, &err) == NULL));
    vsci_tmem_close(h);
    EXPECT_SYSTEM(CHECK(vsci_tmem_new_pool(h, 0, &err) == -1));
    EXPECT_SYSTEM(vsci_tmem_destroy_pool(h, 0, &err));
    char page[VSCI_TMEM_PAGE_SIZE];
    EXPECT_SYSTEM(vsci_tmem_put(h, 0, 1, 0, page, &err));
    EXPECT_SYSTEM(CHECK(vsci_tmem_get(h, 0, 1, 0, page, &err) == -1));
    EXPECT_SYSTEM(vsci_tmem_flush_page(h, 0, 1, 0, &err));
    EXPECT_SYSTEM(vsci_tmem_flush_object(h, 0, 1, &err));
    EXPECT_SYSTEM(CHECK(vsci_tmem_page_node(h, 0, 1, 0, &err) == 0));
    EXPECT_SYSTEM(vsci_tmem_stats(h, &st, &err));

    /* A program built against Dolphin's headers calls the same guard. */
    void (*dolphin_open)(sci_desc_t *, unsigned int, sci_error_t *) =
        (void (*)(sci_desc_t *, unsigned int, sci_error_t *))dlsym(RTLD_DEFAULT, "_SISCI_PUBLIC_FUNC_MT_SCIOpen");
    CHECK(dolphin_open != NULL);
    EXPECT_SYSTEM(dolphin_open((sci_desc_t *)&h, NO_FLAGS, &err));

    printf("API OK\n");
}

/* The interposers are looked up as the program's own calls bind (and so
 * the compiler cannot inline memcpy). */
static void *fn(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f)
        FAILF("no %s", name);
    return f;
}

#define EXPECT_ERRNO(cond) do {                                                 \
        CHECK(cond);                                                            \
        CHECK_MSG(errno == EINVAL, "errno %d, not EINVAL", errno);              \
        errno = 0;                                                              \
    } while (0)

typedef void (*handler_t)(int);

static void interposers(void)
{
    static char a[8192], b[8192];
    for (size_t i = 0; i < sizeof a; i++)
        a[i] = (char)(i * 7 + 1);
    void *(*cp)(void *, const void *, size_t) = (void *(*)(void *, const void *, size_t))fn("memcpy");
    void *(*mv)(void *, const void *, size_t) = (void *(*)(void *, const void *, size_t))fn("memmove");
    CHECK(cp(b, a, sizeof b) == b);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(mv(a + 1, a, 4096) == a + 1); /* overlapping, upwards */
    CHECK(a[1] == 1 && a[2] == 8 && a[4096] == b[4095]);

    struct sigaction act = { 0 };
    sigset_t set;
    sigemptyset(&set);
    errno = 0;
    EXPECT_ERRNO(((int (*)(int, const struct sigaction *, struct sigaction *))fn("sigaction"))(SIGUSR1, NULL, &act) == -1);
    EXPECT_ERRNO(((handler_t (*)(int, handler_t))fn("signal"))(SIGUSR1, SIG_IGN) == SIG_ERR);
    EXPECT_ERRNO(((handler_t (*)(int, handler_t))fn("bsd_signal"))(SIGUSR1, SIG_IGN) == SIG_ERR);
    EXPECT_ERRNO(((handler_t (*)(int, handler_t))fn("sysv_signal"))(SIGUSR1, SIG_IGN) == SIG_ERR);
    EXPECT_ERRNO(((handler_t (*)(int, handler_t))fn("__sysv_signal"))(SIGUSR1, SIG_IGN) == SIG_ERR);
    EXPECT_ERRNO(((handler_t (*)(int, handler_t))fn("sigset"))(SIGUSR1, SIG_IGN) == SIG_ERR);
    EXPECT_ERRNO(((int (*)(int))fn("sigignore"))(SIGUSR1) == -1);
    EXPECT_ERRNO(((int (*)(int))fn("sighold"))(SIGUSR1) == -1);
    EXPECT_ERRNO(((int (*)(int))fn("sigrelse"))(SIGUSR1) == -1);
    EXPECT_ERRNO(((int (*)(int, int))fn("siginterrupt"))(SIGUSR1, 1) == -1);
    EXPECT_ERRNO(((int (*)(int, const sigset_t *, sigset_t *))fn("sigprocmask"))(SIG_BLOCK, &set, NULL) == -1);
    CHECK(((int (*)(int, const sigset_t *, sigset_t *))fn("pthread_sigmask"))(SIG_BLOCK, &set, NULL) == EINVAL);
    /* Would wait for a signal for ever if it did not fail at once. */
    EXPECT_ERRNO(((int (*)(const sigset_t *))fn("sigsuspend"))(&set) == -1);
    EXPECT_ERRNO(((long (*)(long, ...))fn("syscall"))(SYS_getpid) == -1);
    printf("INTERPOSERS OK\n");
}

/* A segment of this node written through one map and read through a
 * connection to it, with SCIFlush and SCIStoreBarrier panicking. */
static void flush(void)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t ls;
    sci_remote_segment_t rs;
    sci_map_t lm, rm;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &ls, 0x5a1, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(ls, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(ls, 0, NO_FLAGS, &err));
    volatile unsigned int *lp = SCIMapLocalSegment(ls, &lm, 0, 4096, NULL, NO_FLAGS, &err);
    CHECK_ERR(err, SCI_ERR_OK);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x5a1, 0, NULL, NULL, 5000, NO_FLAGS, &err));
    volatile unsigned int *rp = SCIMapRemoteSegment(rs, &rm, 0, 4096, NULL, NO_FLAGS, &err);
    CHECK_ERR(err, SCI_ERR_OK);
    for (unsigned int i = 0; i < 100; i++) {
        rp[i] = i + 1;
        SCIFlush(NULL, NO_FLAGS);
        SCIStoreBarrier(NULL, NO_FLAGS);
        CHECK(lp[i] == i + 1);
    }
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(rm, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(lm, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(ls, NO_FLAGS, &err));
    close_sd(sd);
    SCITerminate();
    printf("FLUSH OK\n");
}

static volatile int called;

static sci_callback_action_t local_cb(void *arg, sci_local_segment_t s, sci_segment_cb_reason_t r,
                                      unsigned int n, unsigned int a, sci_error_t e)
{
    (void)arg, (void)s, (void)r, (void)n, (void)a, (void)e;
    called++;
    return SCI_CALLBACK_CONTINUE;
}

static sci_callback_action_t remote_cb(void *arg, sci_remote_segment_t s, sci_segment_cb_reason_t r,
                                       sci_error_t e)
{
    (void)arg, (void)s, (void)r, (void)e;
    called++;
    return SCI_CALLBACK_CONTINUE;
}

static sci_callback_action_t intr_cb(void *arg, sci_local_interrupt_t i, sci_error_t e)
{
    (void)arg, (void)i, (void)e;
    called++;
    return SCI_CALLBACK_CONTINUE;
}

static sci_callback_action_t data_cb(void *arg, sci_local_data_interrupt_t i, void *d, unsigned int n,
                                     sci_error_t e)
{
    (void)arg, (void)i, (void)d, (void)n, (void)e;
    called++;
    return SCI_CALLBACK_CONTINUE;
}

static sci_callback_action_t dma_cb(void *arg, sci_dma_queue_t q, sci_error_t e)
{
    (void)arg, (void)q, (void)e;
    called++;
    return SCI_CALLBACK_CONTINUE;
}

/* Wait on an interrupt whose callback thread is ending (ILLEGAL_OPERATION
 * until it has). */
#define WAIT_ONCE_FREE(call) do {                                              \
        uint64_t until_ = now_ms() + 10000;                                    \
        do {                                                                   \
            err = ERR_SENTINEL;                                                \
            call;                                                              \
        } while (err == SCI_ERR_ILLEGAL_OPERATION && now_ms() < until_ &&      \
                 (sleep_ms(20), 1));                                           \
        check_err_(__FILE__, __LINE__, #call, err, SCI_ERR_OK);                \
    } while (0)

static void callbacks(void)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);

    /* Segment events: CONNECT to both callbacks. */
    sci_local_segment_t ls;
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &ls, 0x5a2, 8192, local_cb, NULL, SCI_FLAG_USE_CALLBACK, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(ls, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(ls, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x5a2, 0, remote_cb, NULL, 5000,
                                         SCI_FLAG_USE_CALLBACK | SCI_FLAG_ASYNCHRONOUS_CONNECT, &err));

    /* Interrupts: the callback thread ends at once; a trigger can then be
     * waited for. */
    sci_local_interrupt_t li;
    sci_remote_interrupt_t ri;
    unsigned int no = 0;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, intr_cb, NULL, SCI_FLAG_USE_CALLBACK, &err));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, no, 5000, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    WAIT_ONCE_FREE(SCIWaitForInterrupt(li, 5000, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));

    sci_local_data_interrupt_t ldi;
    sci_remote_data_interrupt_t rdi;
    char msg[16] = "hello", got[64];
    unsigned int len = sizeof got;
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &ldi, 0, &no, data_cb, NULL, SCI_FLAG_USE_CALLBACK, &err));
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(sd, &rdi, node, 0, no, 5000, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(rdi, msg, sizeof msg, NO_FLAGS, &err));
    WAIT_ONCE_FREE(SCIWaitForDataInterrupt(ldi, got, &len, 5000, NO_FLAGS, &err));
    CHECK(len == sizeof msg && strcmp(got, "hello") == 0);
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(rdi, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(ldi, NO_FLAGS, &err));

    /* A DMA completion. */
    sci_dma_queue_t q;
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(sd, &q, 0, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, ls, rs, 0, 4096, 4096, dma_cb, NULL,
                                           SCI_FLAG_USE_CALLBACK, &err));
    /* (A queue with a callback is not waited on: its state is polled.) */
    WAIT_UNTIL(SCIDMAQueueState(q) == SCI_DMAQUEUE_DONE, 10000);
    EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(q, NO_FLAGS, &err));

    /* The local segment's CONNECT event reaches its callback from the
     * library's event thread, whenever it comes: give it time. */
    sleep_ms(1000);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(ls, NO_FLAGS, &err));
    close_sd(sd);
    CHECK_MSG(called == 0, "%d callbacks called", called);
    printf("CALLBACKS OK\n");
}

/* The constructors panicked: the library still copies and makes segments. */
static void load(void)
{
    static char a[4096], b[4096];
    memset(a, 7, sizeof a);
    void *(*cp)(void *, const void *, size_t) = (void *(*)(void *, const void *, size_t))fn("memcpy");
    CHECK(cp(b, a, sizeof b) == b && b[4095] == 7);
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t ls;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &ls, 0x5a3, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(ls, NO_FLAGS, &err));
    close_sd(sd);
    printf("LOAD OK\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "api"))
        api();
    else if (!strcmp(mode, "interposers"))
        interposers();
    else if (!strcmp(mode, "flush"))
        flush();
    else if (!strcmp(mode, "callbacks"))
        callbacks();
    else if (!strcmp(mode, "load"))
        load();
    else {
        fprintf(stderr, "usage: t_panic api|interposers|flush|callbacks|load\n");
        return 2;
    }
    return 0;
}
