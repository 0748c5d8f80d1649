/*
 * t_compat.c - a program written the way Dolphin's documentation and
 * public SISCI sample programs use the API, built with -Wall -Wextra
 * -Werror (Makefile): its own NO_FLAGS-style helpers (NO_CALLBACK 0, as
 * some samples have it), SCI_FLAG_DMA_GLOBAL on segments and transfers,
 * 1-byte DMAs at odd offsets, dis_dma_vec_t vectors of DIS_DMA_MAX_VECLEN
 * pieces on a queue created with maxEntries 1, DMA channels, the memcpy
 * selector, the older SCIEnqueueDMATransfer / SCIPostDMAQueue /
 * SCIResetDMAQueue queue API, calls that need hardware, reflective memory
 * (a broadcast segment, a group connection, its map, a broadcast DMA and
 * interrupt) and cleanup calls made after SCITerminate.
 *
 *   t_compat -server [-size BYTES]
 *       creates segment SEGMENT_ID, waits for a client to connect, for the
 *       flag byte the client writes last, checks every byte the client
 *       wrote, waits for the client's disconnect (sent by its SCITerminate)
 *       and prints "SERVER VERIFIED".
 *   t_compat -client -rn NODE [-size BYTES]
 *       does everything above against the server's segment on NODE (this
 *       node or another) and prints "CLIENT OK".
 *
 * Any failure prints the call, the line and the error, and exits 1.
 * crates/vsci-systest/tests/compat.rs runs it on one node and across two
 * network namespaces.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "sisci_api.h"
#include "sisci_error.h"
#include "sisci_types.h"

/* The sample programs' own helpers (Dolphin's headers do not have them). */
#define NO_FLAGS     0
#define NO_OFFSET    0
#define NO_CALLBACK  0
#define NO_ARG       0
#define NO_SUGGESTED_ADDRESS 0
#define ADAPTER_NO   0

#define SEGMENT_ID        0x6b01
#define LOCAL_SEGMENT_ID  0x6b02
#define GROUP_ID          0x6b03
#define GROUP_INTNO       0x6b03
#define CONNECT_TIMEOUT   30000    /* ms */

static unsigned int segment_size = 256 * 1024;
static int failures;

static void fail(int line, const char *what, sci_error_t got, sci_error_t want)
{
    fprintf(stderr, "t_compat.c:%d: %s: got %s (0x%x), want %s (0x%x)\n", line, what,
            SCIGetErrorString(got), (unsigned int)got, SCIGetErrorString(want), (unsigned int)want);
    exit(1);
}

/* Call, then compare the error with what is expected. */
#define EXPECT(want, call)                                              \
    do {                                                                \
        error = (sci_error_t)0x7eadbeef;                                \
        call;                                                           \
        if (error != (want))                                            \
            fail(__LINE__, #call, error, (want));                       \
    } while (0)
#define CHECK(cond)                                                     \
    do {                                                                \
        if (!(cond)) {                                                  \
            fprintf(stderr, "t_compat.c:%d: check failed: %s\n", __LINE__, #cond); \
            exit(1);                                                    \
        }                                                               \
    } while (0)

static unsigned char pattern(size_t i, unsigned int seed)
{
    return (unsigned char)((i * 131u + seed * 7u + (i >> 9)) & 0xff);
}

/* The final contents the client writes and the server checks. */
#define FINAL_SEED 99u
#define FLAG_VALUE 0xa5

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- server ------------------------------------------------------------- */

static int server(void)
{
    sci_desc_t sd;
    sci_local_segment_t segment;
    sci_map_t map;
    sci_error_t error;
    unsigned int node = 0, adapter = 0;

    EXPECT(SCI_ERR_OK, SCIInitialize(NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIOpen(&sd, NO_FLAGS, &error));
    /* A segment meant for global DMA, as programs for Dolphin's DMA
     * engines create it: the flag only chooses hardware, vsci accepts it. */
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &segment, SEGMENT_ID, segment_size, NO_CALLBACK, NO_ARG,
                                        SCI_FLAG_DMA_GLOBAL, &error));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(segment, ADAPTER_NO, SCI_FLAG_DMA_GLOBAL, &error));
    volatile unsigned char *mem = (volatile unsigned char *)SCIMapLocalSegment(
        segment, &map, NO_OFFSET, segment_size, NO_SUGGESTED_ADDRESS, NO_FLAGS, &error);
    CHECK(error == SCI_ERR_OK && mem != NULL);
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(segment, ADAPTER_NO, NO_FLAGS, &error));
    printf("SERVER READY\n");
    fflush(stdout);

    sci_segment_cb_reason_t reason;
    EXPECT(SCI_ERR_OK, reason = SCIWaitForLocalSegmentEvent(segment, &node, &adapter, 60000, NO_FLAGS, &error));
    CHECK(reason == SCI_CB_CONNECT);

    /* The client's last DMA is a single flag byte at the end. */
    double deadline = now_s() + 120;
    while (mem[segment_size - 1] != FLAG_VALUE) {
        if (now_s() > deadline) {
            fprintf(stderr, "server: no flag byte after 120 s\n");
            return 1;
        }
        usleep(1000);
    }
    for (size_t i = 0; i + 1 < segment_size; i++) {
        if (mem[i] != pattern(i, FINAL_SEED)) {
            fprintf(stderr, "server: byte %zu is 0x%02x, want 0x%02x\n", i, mem[i], pattern(i, FINAL_SEED));
            return 1;
        }
    }
    printf("SERVER DATA OK from node %u\n", node);
    fflush(stdout);

    /* The client ends with SCITerminate, which releases its connection. */
    EXPECT(SCI_ERR_OK, reason = SCIWaitForLocalSegmentEvent(segment, &node, &adapter, 60000, NO_FLAGS, &error));
    CHECK(reason == SCI_CB_DISCONNECT);

    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(segment, ADAPTER_NO, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(segment, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIClose(sd, NO_FLAGS, &error));
    SCITerminate();
    printf("SERVER VERIFIED\n");
    return 0;
}

/* ---- client ------------------------------------------------------------- */

struct client {
    sci_desc_t sd;
    sci_local_segment_t lseg;
    sci_remote_segment_t rseg;
    sci_map_t lmap, rmap;
    unsigned char *local;            /* map of our own segment */
    volatile unsigned char *remote;  /* map of the server's */
    sci_dma_queue_t dq;              /* maxEntries 1 */
    sci_dma_queue_t gq;              /* the older API: maxEntries 4 */
};

/* Read `size` bytes of the server's segment at `off` fresh from its owner. */
static void read_remote(struct client *c, size_t off, void *buf, size_t size)
{
    sci_error_t error;
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, buf, c->rmap, off, size, SCI_FLAG_BLOCK_READ, &error));
}

static void check_remote(struct client *c, size_t off, size_t size, unsigned int seed, const char *what)
{
    unsigned char *buf = malloc(size);
    CHECK(buf != NULL);
    read_remote(c, off, buf, size);
    for (size_t i = 0; i < size; i++) {
        if (buf[i] != pattern(off + i, seed)) {
            fprintf(stderr, "%s: remote byte %zu is 0x%02x, want 0x%02x\n", what, off + i, buf[i],
                    pattern(off + i, seed));
            exit(1);
        }
    }
    free(buf);
}

static void fill_local(struct client *c, size_t off, size_t size, unsigned int seed)
{
    for (size_t i = 0; i < size; i++)
        c->local[off + i] = pattern(off + i, seed);
}

/* SCIQuery: a software engine needs no alignment. */
static void query_alignment(void)
{
    sci_error_t error;
    unsigned int value = 0;
    sci_query_adapter_t q;
    q.localAdapterNo = ADAPTER_NO;
    q.portNo = 0;
    q.subcommand = SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT;
    q.data = &value;
    EXPECT(SCI_ERR_OK, SCIQuery(SCI_Q_ADAPTER, &q, NO_FLAGS, &error));
    CHECK(value == 1);
    value = 0;
    q.subcommand = SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT;
    EXPECT(SCI_ERR_OK, SCIQuery(SCI_Q_ADAPTER, &q, NO_FLAGS, &error));
    CHECK(value == 1);
    printf("dma alignment 1\n");
}

/* Single bytes at odd offsets, written and read back, with each engine
 * choice flag. */
static void one_byte_dmas(struct client *c)
{
    sci_error_t error;
    const unsigned int engines[] = { SCI_FLAG_DMA_GLOBAL, SCI_FLAG_DMA_SYSDMA, SCI_FLAG_DMA_ADAPTER, NO_FLAGS };
    for (unsigned int e = 0; e < 4; e++) {
        for (size_t k = 0; k < 8; k++) {
            size_t loff = 1 + k * 13 + e * 101, roff = 3 + k * 17 + e * 211;
            c->local[loff] = (unsigned char)(0x40 + e * 8 + k);
            EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(c->dq, c->lseg, c->rseg, loff, 1, roff, NO_CALLBACK, NO_ARG,
                                                   engines[e] | SCI_FLAG_DMA_WAIT, &error));
            unsigned char b = 0;
            read_remote(c, roff, &b, 1);
            CHECK(b == (unsigned char)(0x40 + e * 8 + k));
            /* And back by a 1-byte DMA read, asynchronously this time. */
            c->local[loff + 5000] = 0;
            EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(c->dq, c->lseg, c->rseg, loff + 5000, 1, roff, NO_CALLBACK,
                                                   NO_ARG, engines[e] | SCI_FLAG_DMA_READ, &error));
            sci_dma_queue_state_t st;
            EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(c->dq, SCI_INFINITE_TIMEOUT, NO_FLAGS, &error));
            CHECK(st == SCI_DMAQUEUE_DONE);
            CHECK(c->local[loff + 5000] == (unsigned char)(0x40 + e * 8 + k));
        }
    }
    /* Program memory, one odd byte too. */
    unsigned char byte = 0x5c;
    EXPECT(SCI_ERR_OK, SCIStartDmaTransferMem(c->dq, &byte, c->rseg, 1, 7777, NO_CALLBACK, NO_ARG,
                                              SCI_FLAG_DMA_GLOBAL | SCI_FLAG_DMA_WAIT, &error));
    unsigned char b = 0;
    read_remote(c, 7777, &b, 1);
    CHECK(b == 0x5c);
    printf("1-byte DMAs ok\n");
}

/* DIS_DMA_MAX_VECLEN pieces of odd sizes at odd offsets in one vector, on a
 * queue created with maxEntries 1. */
static void max_vector(struct client *c)
{
    sci_error_t error;
    static dis_dma_vec_t vec[DIS_DMA_MAX_VECLEN];
    size_t n = DIS_DMA_MAX_VECLEN, piece = 5, stride = 9, base = 40001;
    CHECK(base + n * stride < segment_size);
    fill_local(c, base, n * stride, 3);
    for (size_t i = 0; i < n; i++) {
        vec[i].size = piece;
        vec[i].local_offset = base + i * stride;
        vec[i].remote_offset = base + i * stride;
        vec[i].flags = NO_FLAGS;
    }
    EXPECT(SCI_ERR_OK, SCIStartDmaTransferVec(c->dq, c->lseg, c->rseg, n, vec, NO_CALLBACK, NO_ARG,
                                              SCI_FLAG_DMA_GLOBAL, &error));
    sci_dma_queue_state_t st;
    EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(c->dq, SCI_INFINITE_TIMEOUT, NO_FLAGS, &error));
    CHECK(st == SCI_DMAQUEUE_DONE);
    unsigned char buf[16];
    for (size_t i = 0; i < n; i++) {
        read_remote(c, base + i * stride, buf, piece);
        for (size_t j = 0; j < piece; j++)
            CHECK(buf[j] == pattern(base + i * stride + j, 3));
    }
    /* One more than the maximum is refused before anything moves. */
    EXPECT(SCI_ERR_MAX_ENTRIES, SCIStartDmaTransferVec(c->dq, c->lseg, c->rseg, n + 1, vec, NO_CALLBACK, NO_ARG,
                                                       NO_FLAGS, &error));
    printf("vector of %zu pieces on a 1-entry queue ok\n", n);
}

/* DMA channels, used as programs that choose engines explicitly use them. */
static void channels(struct client *c)
{
    sci_error_t error;
    sci_dma_channel_t ch, ch2, shared1, shared2;
    EXPECT(SCI_ERR_OK, SCIRequestDMAChannel(c->sd, &ch, ADAPTER_NO, SCI_DMA_TYPE_SYSTEM,
                                            SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIAssignDMAChannel(ch, c->dq, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIPrepareLocalSegmentForDMA(ch, c->lseg, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIPrepareRemoteSegmentForDMA(ch, c->rseg, NO_FLAGS, &error));

    /* A second queue on the same channel: the two transfers take turns on
     * the channel's engine, both complete. */
    sci_dma_queue_t q2;
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(c->sd, &q2, ADAPTER_NO, 1, SCI_FLAG_DMA_SYSDMA, &error));
    EXPECT(SCI_ERR_OK, SCIAssignDMAChannel(ch, q2, NO_FLAGS, &error));
    fill_local(c, 60000, 30000, 11);
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(c->dq, c->lseg, c->rseg, 60000, 15000, 60000, NO_CALLBACK, NO_ARG,
                                           SCI_FLAG_DMA_SYSDMA, &error));
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q2, c->lseg, c->rseg, 75000, 15000, 75000, NO_CALLBACK, NO_ARG,
                                           SCI_FLAG_DMA_SYSDMA, &error));
    sci_dma_queue_state_t st;
    EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(c->dq, SCI_INFINITE_TIMEOUT, NO_FLAGS, &error));
    CHECK(st == SCI_DMAQUEUE_DONE);
    EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(q2, SCI_INFINITE_TIMEOUT, NO_FLAGS, &error));
    CHECK(st == SCI_DMAQUEUE_DONE);
    check_remote(c, 60000, 30000, 11, "transfers on one channel");

    /* A channel id taken exclusively is busy; shared ids can be shared. */
    EXPECT(SCI_ERR_OK, SCIRequestDMAChannel(c->sd, &ch2, ADAPTER_NO, SCI_DMA_TYPE_ADAPTER, 3, NO_FLAGS, &error));
    EXPECT(SCI_ERR_BUSY, SCIRequestDMAChannel(c->sd, &shared1, ADAPTER_NO, SCI_DMA_TYPE_ADAPTER, 3, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIRequestDMAChannel(c->sd, &shared1, ADAPTER_NO, SCI_DMA_TYPE_GLOBAL, 5,
                                            SCI_FLAG_DMA_CHANNEL_SHARED, &error));
    EXPECT(SCI_ERR_OK, SCIRequestDMAChannel(c->sd, &shared2, ADAPTER_NO, SCI_DMA_TYPE_DONTCARE, 5,
                                            SCI_FLAG_DMA_CHANNEL_SHARED, &error));
    EXPECT(SCI_ERR_OK, SCIReturnDMAChannel(shared2, &error));
    EXPECT(SCI_ERR_OK, SCIReturnDMAChannel(shared1, &error));
    EXPECT(SCI_ERR_OK, SCIReturnDMAChannel(ch2, &error));
    /* Returned: id 3 is free again. */
    EXPECT(SCI_ERR_OK, SCIRequestDMAChannel(c->sd, &ch2, ADAPTER_NO, SCI_DMA_TYPE_TRANSPARENT, 3, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIReturnDMAChannel(ch2, &error));

    EXPECT(SCI_ERR_OK, SCIUnprepareRemoteSegmentForDMA(ch, c->rseg, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIUnprepareLocalSegmentForDMA(ch, c->lseg, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIReturnDMAChannel(ch, &error));
    EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(q2, NO_FLAGS, &error));
    /* The queue runs on without its channel. */
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(c->dq, c->lseg, c->rseg, 60000, 100, 60000, NO_CALLBACK, NO_ARG,
                                           SCI_FLAG_DMA_WAIT, &error));
    printf("dma channels ok\n");
}

/* SetSciMemCopyFunction / GetSciMemCopyFunction choose SCIMemCpy's copy
 * routine; every routine moves the bytes. */
static void memcopy_selector(struct client *c)
{
    sci_error_t error;
    unsigned char src[1000];
    for (unsigned int f = 0; f < 3; f++) {
        SetSciMemCopyFunction(f);
        CHECK(GetSciMemCopyFunction() == f);
        for (size_t i = 0; i < sizeof src; i++)
            src[i] = pattern(100003 + i, 20 + f);
        EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, src, c->rmap, 100003, sizeof src, NO_FLAGS, &error));
        check_remote(c, 100003, sizeof src, 20 + f, "SCIMemCpy with the selected routine");
        /* SCIMemWrite stores through the map with the routine too. */
        unsigned char *lp = c->local + 3001;
        EXPECT(SCI_ERR_OK, SCIMemWrite(src, lp, 333, NO_FLAGS, &error));
        CHECK(memcmp(lp, src, 333) == 0);
    }
    /* A routine vsci does not have selects the default. */
    SetSciMemCopyFunction(5);
    CHECK(GetSciMemCopyFunction() == 0);
    printf("memcpy selector ok\n");
}

static atomic_int post_callbacks;

static sci_callback_action_t post_done(void *arg, sci_dma_queue_t queue, sci_error_t status)
{
    struct client *c = arg;
    if (queue == c->gq && status == SCI_ERR_OK)
        atomic_fetch_add(&post_callbacks, 1);
    return SCI_CALLBACK_CONTINUE;
}

/* The DMA queue API that preceded SCIStartDmaTransfer. */
static void older_queue_api(struct client *c)
{
    sci_error_t error;
    sci_dma_queue_state_t st;
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(c->sd, &c->gq, ADAPTER_NO, 4, NO_FLAGS, &error));
    CHECK(SCIDMAQueueState(c->gq) == SCI_DMAQUEUE_IDLE);

    /* Gather four transfers (three writes and a read), post, wait. */
    fill_local(c, 0, 4 * 4099, 31);
    for (unsigned int i = 0; i < 3; i++) {
        EXPECT(SCI_ERR_OK, st = SCIEnqueueDMATransfer(c->gq, c->lseg, c->rseg, i * 4099, 120000 + i * 4099,
                                                      4099, NO_FLAGS, &error));
        CHECK(st == SCI_DMAQUEUE_GATHER);
    }
    /* The read comes back from what the first write put there. */
    EXPECT(SCI_ERR_OK, st = SCIEnqueueDMATransfer(c->gq, c->lseg, c->rseg, 150001, 120000, 4099,
                                                  SCI_FLAG_DMA_READ, &error));
    CHECK(st == SCI_DMAQUEUE_GATHER && SCIDMAQueueState(c->gq) == SCI_DMAQUEUE_GATHER);
    /* maxEntries is the gather limit. */
    EXPECT(SCI_ERR_MAX_ENTRIES, st = SCIEnqueueDMATransfer(c->gq, c->lseg, c->rseg, 0, 0, 8, NO_FLAGS, &error));
    CHECK(st == SCI_DMAQUEUE_GATHER);
    /* A start does not mix with a gathered list. */
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIStartDmaTransfer(c->gq, c->lseg, c->rseg, 0, 8, 0, NO_CALLBACK, NO_ARG,
                                                          NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIPostDMAQueue(c->gq, NO_CALLBACK, NO_ARG, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(c->gq, SCI_INFINITE_TIMEOUT, NO_FLAGS, &error));
    CHECK(st == SCI_DMAQUEUE_DONE);
    for (size_t i = 0; i < 4099; i++)
        CHECK(c->local[150001 + i] == pattern(i, 31));
    /* Posting again needs a new gather. */
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIPostDMAQueue(c->gq, NO_CALLBACK, NO_ARG, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIResetDMAQueue(c->gq, NO_FLAGS, &error));
    CHECK(SCIDMAQueueState(c->gq) == SCI_DMAQUEUE_IDLE);

    /* Post with a callback. */
    fill_local(c, 20000, 8192, 32);
    EXPECT(SCI_ERR_OK, SCIEnqueueDMATransfer(c->gq, c->lseg, c->rseg, 20000, 20000, 8192, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIPostDMAQueue(c->gq, post_done, c, SCI_FLAG_USE_CALLBACK, &error));
    double deadline = now_s() + 60;
    while (atomic_load(&post_callbacks) == 0) {
        CHECK(now_s() < deadline);
        usleep(100);
    }
    CHECK(SCIDMAQueueState(c->gq) == SCI_DMAQUEUE_DONE);
    check_remote(c, 20000, 8192, 32, "posted with a callback");
    EXPECT(SCI_ERR_OK, SCIResetDMAQueue(c->gq, NO_FLAGS, &error));

    /* Enqueue, post, wait and reset in one call, as message-passing layers
     * of that era do; the queue is IDLE again when it returns. */
    for (unsigned int r = 0; r < 3; r++) {
        fill_local(c, 30000, 777, 40 + r);
        EXPECT(SCI_ERR_OK, st = SCIEnqueueDMATransfer(c->gq, c->lseg, c->rseg, 30000, 30001, 777,
                                                      SCI_FLAG_DMA_POST | SCI_FLAG_DMA_WAIT | SCI_FLAG_DMA_RESET,
                                                      &error));
        CHECK(st == SCI_DMAQUEUE_IDLE);
        unsigned char buf[777];
        read_remote(c, 30001, buf, sizeof buf);
        for (size_t i = 0; i < sizeof buf; i++)
            CHECK(buf[i] == pattern(30000 + i, 40 + r));
    }

    /* Abort a posted list: it ends ABORTED, or DONE if it finished first;
     * reset makes the queue usable again. */
    for (unsigned int i = 0; i < 4; i++)
        EXPECT(SCI_ERR_OK, SCIEnqueueDMATransfer(c->gq, c->lseg, c->rseg, 0, 0, segment_size, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIPostDMAQueue(c->gq, NO_CALLBACK, NO_ARG, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIAbortDMAQueue(c->gq, NO_FLAGS, &error));
    st = SCIDMAQueueState(c->gq);
    CHECK(st == SCI_DMAQUEUE_ABORTED || st == SCI_DMAQUEUE_DONE);
    EXPECT(SCI_ERR_OK, SCIResetDMAQueue(c->gq, NO_FLAGS, &error));
    CHECK(SCIDMAQueueState(c->gq) == SCI_DMAQUEUE_IDLE);
    printf("older queue api ok (last post %s)\n", st == SCI_DMAQUEUE_ABORTED ? "aborted" : "done first");
}

/* Calls that need hardware: declared, linked, and answered plainly. */
static void hardware_only(struct client *c)
{
    sci_error_t error;
    EXPECT(SCI_ERR_NOT_IMPLEMENTED, SCIphDmaStart(c->dq, NO_CALLBACK, NO_ARG, NO_FLAGS, &error));
    EXPECT(SCI_ERR_NOT_IMPLEMENTED, SCIGetLocalCSR(c->sd, ADAPTER_NO, 0, NO_FLAGS, &error));
    sci_address_t addr;
    memset(&addr, 0, sizeof addr);
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_NOT_IMPLEMENTED, SCIConnectSCISpace(c->sd, ADAPTER_NO, &rs, addr, 4096, NO_FLAGS, &error));
    CHECK(SCIGetMapPointer(c->rmap) == c->remote);
    printf("hardware-only calls answer NOT_IMPLEMENTED\n");
}

/* Reflective memory as Dolphin's samples use it, with this node the only
 * member: a broadcast segment, a group connection and its map, a broadcast
 * DMA and a broadcast interrupt; every write shows in the member. */
static void reflective_memory(struct client *c)
{
    sci_error_t error;
    sci_local_segment_t member;
    sci_map_t mmap_, gmap;
    sci_remote_segment_t group;
    const unsigned int gsize = 8192;
    EXPECT(SCI_ERR_OK, SCICreateSegment(c->sd, &member, GROUP_ID, gsize, NO_CALLBACK, NO_ARG,
                                        SCI_FLAG_BROADCAST, &error));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(member, ADAPTER_NO, SCI_FLAG_BROADCAST, &error));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(member, ADAPTER_NO, NO_FLAGS, &error));
    volatile unsigned char *mem = (volatile unsigned char *)SCIMapLocalSegment(
        member, &mmap_, NO_OFFSET, gsize, NO_SUGGESTED_ADDRESS, NO_FLAGS, &error);
    CHECK(error == SCI_ERR_OK && mem != NULL);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(c->sd, &group, DIS_BROADCAST_NODEID_GROUP_ALL, GROUP_ID, ADAPTER_NO,
                                         NO_CALLBACK, NO_ARG, CONNECT_TIMEOUT, SCI_FLAG_BROADCAST, &error));
    CHECK(SCIGetRemoteSegmentNodeId(group) == DIS_BROADCAST_NODEID_GROUP_ALL);
    CHECK(SCIGetRemoteSegmentSize(group) == gsize);
    volatile unsigned char *g = (volatile unsigned char *)SCIMapRemoteSegment(
        group, &gmap, NO_OFFSET, gsize, NO_SUGGESTED_ADDRESS, SCI_FLAG_BROADCAST, &error);
    CHECK(error == SCI_ERR_OK && g != NULL);
    for (unsigned int i = 0; i < 4096; i++)
        g[i] = pattern(i, 7);
    SCIFlush(NULL, NO_FLAGS);
    for (unsigned int i = 0; i < 4096; i++)
        CHECK(mem[i] == pattern(i, 7));
    /* One byte by broadcast DMA, at an odd offset. */
    c->local[3] = 0x5c;
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(c->dq, c->lseg, group, 3, 1, 5001, NO_CALLBACK, NO_ARG,
                                           SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST | SCI_FLAG_DMA_WAIT, &error));
    CHECK(mem[5001] == 0x5c);
    /* A broadcast interrupt reaches the interrupt of that number here. */
    sci_local_interrupt_t li;
    sci_remote_interrupt_t ri;
    unsigned int intno = GROUP_INTNO;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(c->sd, &li, ADAPTER_NO, &intno, NO_CALLBACK, NO_ARG,
                                          SCI_FLAG_FIXED_INTNO, &error));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(c->sd, &ri, DIS_BROADCAST_NODEID_GROUP_ALL, ADAPTER_NO, GROUP_INTNO,
                                           CONNECT_TIMEOUT, SCI_FLAG_BROADCAST, &error));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, 10000, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(gmap, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(group, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(mmap_, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(member, NO_FLAGS, &error));
    printf("reflective memory (this node a member) ok\n");
}

/* The server's segment ends as pattern(FINAL_SEED), written with the older
 * API, then the flag byte by a 1-byte DMA. */
static void final_contents(struct client *c)
{
    sci_error_t error;
    sci_dma_queue_state_t st;
    fill_local(c, 0, segment_size, FINAL_SEED);
    size_t quarter = (segment_size - 1) / 4;
    for (unsigned int i = 0; i < 4; i++) {
        size_t off = i * quarter, len = i == 3 ? segment_size - 1 - off : quarter;
        EXPECT(SCI_ERR_OK, SCIEnqueueDMATransfer(c->gq, c->lseg, c->rseg, (unsigned int)off, (unsigned int)off,
                                                 (unsigned int)len, i == 3 ? SCI_FLAG_DMA_POST | SCI_FLAG_DMA_WAIT : NO_FLAGS,
                                                 &error));
    }
    CHECK(SCIDMAQueueState(c->gq) == SCI_DMAQUEUE_DONE);
    c->local[segment_size - 1] = FLAG_VALUE;
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(c->dq, c->lseg, c->rseg, segment_size - 1, 1, segment_size - 1,
                                           NO_CALLBACK, NO_ARG, SCI_FLAG_DMA_GLOBAL | SCI_FLAG_DMA_WAIT, &error));
    EXPECT(SCI_ERR_OK, st = SCIWaitForDMAQueue(c->dq, 0, NO_FLAGS, &error));
    CHECK(st == SCI_DMAQUEUE_DONE);
    printf("final contents written\n");
}

/* SCITerminate, then free everything as a message-passing layer does:
 * every call succeeds, and what they name is really gone (the ids can be
 * used again, the daemon holds nothing: compat.rs checks that). */
static void cleanup_after_terminate(struct client *c)
{
    sci_error_t error;
    SCITerminate();
    EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(c->gq, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(c->dq, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(c->rmap, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(c->lmap, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(c->rseg, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(c->lseg, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIClose(c->sd, NO_FLAGS, &error));
    /* Released once: a second release is an ordinary stale handle. */
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRemoveSegment(c->lseg, NO_FLAGS, &error));

    /* The library starts again, and our segment id is free. */
    sci_desc_t sd;
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCIInitialize(NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIOpen(&sd, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, LOCAL_SEGMENT_ID, segment_size, NO_CALLBACK, NO_ARG,
                                        NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIClose(sd, NO_FLAGS, &error));
    SCITerminate();
    printf("cleanup after SCITerminate ok\n");
}

static int client(unsigned int remote_node)
{
    struct client c;
    sci_error_t error;
    memset(&c, 0, sizeof c);

    EXPECT(SCI_ERR_OK, SCIInitialize(NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCIOpen(&c.sd, NO_FLAGS, &error));
    EXPECT(SCI_ERR_OK, SCICreateSegment(c.sd, &c.lseg, LOCAL_SEGMENT_ID, segment_size, NO_CALLBACK, NO_ARG,
                                        SCI_FLAG_DMA_GLOBAL, &error));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(c.lseg, ADAPTER_NO, SCI_FLAG_DMA_GLOBAL, &error));
    c.local = SCIMapLocalSegment(c.lseg, &c.lmap, NO_OFFSET, segment_size, NO_SUGGESTED_ADDRESS, NO_FLAGS, &error);
    CHECK(error == SCI_ERR_OK && c.local != NULL);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(c.sd, &c.rseg, remote_node, SEGMENT_ID, ADAPTER_NO, NO_CALLBACK, NO_ARG,
                                         CONNECT_TIMEOUT, NO_FLAGS, &error));
    CHECK(SCIGetRemoteSegmentSize(c.rseg) == segment_size);
    c.remote = SCIMapRemoteSegment(c.rseg, &c.rmap, NO_OFFSET, segment_size, NO_SUGGESTED_ADDRESS, NO_FLAGS, &error);
    CHECK(error == SCI_ERR_OK && c.remote != NULL);
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(c.sd, &c.dq, ADAPTER_NO, 1, SCI_FLAG_DMA_GLOBAL, &error));

    query_alignment();
    one_byte_dmas(&c);
    max_vector(&c);
    channels(&c);
    memcopy_selector(&c);
    older_queue_api(&c);
    hardware_only(&c);
    reflective_memory(&c);
    final_contents(&c);
    cleanup_after_terminate(&c);
    printf("CLIENT OK\n");
    return failures != 0;
}

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s -server [-size BYTES] | -client -rn NODE [-size BYTES]\n", prog);
    exit(2);
}

int main(int argc, char *argv[])
{
    int is_server = 0, is_client = 0;
    unsigned int remote_node = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-server") == 0) {
            is_server = 1;
        } else if (strcmp(argv[i], "-client") == 0) {
            is_client = 1;
        } else if (strcmp(argv[i], "-rn") == 0 && i + 1 < argc) {
            remote_node = (unsigned int)strtoul(argv[++i], NULL, 0);
        } else if (strcmp(argv[i], "-size") == 0 && i + 1 < argc) {
            segment_size = (unsigned int)strtoul(argv[++i], NULL, 0);
        } else {
            usage(argv[0]);
        }
    }
    if (segment_size < 200000)
        usage(argv[0]);
    if (is_server == is_client || (is_client && remote_node == 0))
        usage(argv[0]);
    return is_server ? server() : client(remote_node);
}
