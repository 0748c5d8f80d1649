/*
 * dma_bench.c - vsci's DMA engine measured the way seed 003 (RDMA engine
 * para-virtualization, Mouzakitis et al.) measured its engine, with the
 * paper's figures in a column of their own.
 *
 *   a) DMA buffer setup: SCICreateSegment + SCIPrepareSegment +
 *      SCIMapLocalSegment of 512 KiB .. 8 MiB, then the first touch of every
 *      page, then unmap + remove; peer: mmap(anonymous) + touch.
 *   b) single-transfer rate by size: SCIStartDmaTransfer, then
 *      SCIWaitForDMAQueue; time from the call to the completion, as the
 *      paper times it.  Peer: the same bytes moved without the engine
 *      (memcpy between two buffers on one node, SCIMemCpy to another node).
 *   c) 1 GiB moved in bursts of 512 KiB .. 8 MiB, with 4 queues in flight
 *      (the paper's several outstanding asynchronous transfers) and with one
 *      queue, one burst at a time; peer as in b).
 *   d) completion-notification latency: an 8-byte transfer, start to
 *      completion seen, per waiting mode (poll, adaptive, block, callback),
 *      back to back and with the engine idle (1 ms pause before each);
 *      SCI_FLAG_DMA_WAIT (the transfer runs in the caller: no notification
 *      at all) is the baseline the notification cost is read against.
 *   e) per-call overhead: SCIStartDmaTransfer returning (transfer not
 *      waited for inside the timing), SCIDMAQueueState, SCIWaitForDMAQueue
 *      on a finished queue, SCICreateDMAQueue + SCIRemoveDMAQueue.
 *   f) (only when asked for: -s f) seed 004's raw bandwidth (Ladon §7.1, a
 *      4 MB area of another host): word-by-word programmed I/O against the
 *      DMA engine.  Writes: 4-byte stores into the remote map with SCIFlush
 *      after each (uncached-style PIO, over a prefix), 4-byte stores over the
 *      whole 4 MiB and one SCIFlush, one 4 MiB DMA transfer; reads: a 4-byte
 *      SCIMemCpy(SCI_FLAG_BLOCK_READ) per word (a fresh fetch, as an uncached
 *      load would be), one 4 MiB DMA read.  Every byte is checked in the
 *      target's memory afterwards (a DMA read, which fetches fresh bytes);
 *      MB/s counts only the bytes that held the value written.
 *
 * Usage:
 *   dma_bench [-rn NODE] [-seg ID] [-quick] [-s abcde] [-json FILE]
 *       measure against a target segment on this node (default: the
 *       program creates it itself, a co-located segment) or, with -rn, the
 *       segment ID of node NODE, made there by `dma_bench -owner`; with
 *       -json, also write every figure to FILE (`vsci bench` reads it);
 *   dma_bench -owner [-seg ID]
 *       create the 32 MiB target segment ID and wait until SIGTERM/SIGINT.
 * See bench/README.md ("dma_bench").
 */
#include <sisci_api.h>

/* The "no value" helpers of SISCI's sample programs.  Dolphin's headers do
 * not define them (each program does, as here), so neither do vsci's. */
#define NO_FLAGS    0
#define NO_OFFSET   0
#define NO_CALLBACK NULL
#define NO_ARG      NULL

#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>

#define NB 30
#define BUCKET_US 10.0
typedef struct {
    uint32_t n, bad;
    double med, p99, mean, min, max;
    uint32_t hist[NB + 1];
} lat_t;
#include "common/stats.h"

#define MIB ((size_t)1 << 20)
#define TARGET_SIZE (32 * MIB)     /* 4 queues x 8 MiB bursts */
#define NQ 4

static int quick;
static unsigned remote_node;       /* 0: co-located target */
static unsigned seg_id = 0x0d3a;
static sci_desc_t sd;
static sci_local_segment_t ls;     /* the DMA buffer: 32 MiB local segment */
static sci_map_t lmap;
static volatile unsigned char *lmem;
static sci_local_segment_t own_target;
static sci_desc_t own_sd;
static sci_remote_segment_t rs;
static sci_map_t rmap;
static volatile unsigned char *rmem;   /* the target's first 8 MiB */
static int failures;
/* -json FILE: each section appends its member as it finishes. */
static FILE *jf;

/* Opens the JSON member `name` (an array) of section results. */
static void json_section(const char *name)
{
    if (jf)
        fprintf(jf, ",\n  \"%s\": [", name);
}

static void json_section_end(void)
{
    if (jf)
        fputs("\n  ]", jf);
}

/* One row of a section: `first` says whether a comma goes before it. */
static void json_row_start(int first)
{
    if (jf)
        fputs(first ? "\n    {" : ",\n    {", jf);
}

static void json_field(const char *key, double v, int last)
{
    if (!jf)
        return;
    fprintf(jf, "\"%s\": ", key);
    json_num(jf, v);
    fputs(last ? "}" : ", ", jf);
}

/* Sizes are integers in the JSON, so readers can match them exactly. */
static void json_bytes(const char *key, size_t v)
{
    if (jf)
        fprintf(jf, "\"%s\": %zu, ", key, v);
}

static void json_text(const char *key, const char *v)
{
    if (!jf)
        return;
    fprintf(jf, "\"%s\": ", key);
    json_str(jf, v);
    fputs(", ", jf);
}

static void die(const char *what, sci_error_t e)
{
    fprintf(stderr, "dma_bench: %s: %s (0x%x) %s\n", what, sci_err_name(e), (unsigned)e,
            SCIGetErrorString(e));
    exit(1);
}

#define SCI(what, call) do {                                                   \
        sci_error_t err_ = SCI_ERR_OK;                                         \
        sci_error_t *errp_ = &err_;                                            \
        (void)errp_;                                                           \
        call;                                                                  \
        if (err_ != SCI_ERR_OK)                                                \
            die(what, err_);                                                   \
    } while (0)

static double median_ns(uint64_t *v, uint32_t n)
{
    qsort(v, n, sizeof *v, cmp_u64);
    return (double)v[n / 2];
}

static sci_dma_queue_t new_queue(const char *mode)
{
    sci_dma_queue_t q;
    if (mode)
        setenv("VSCI_DMA_WAIT", mode, 1);
    else
        unsetenv("VSCI_DMA_WAIT");
    SCI("SCICreateDMAQueue", SCICreateDMAQueue(sd, &q, 0, 16, NO_FLAGS, errp_));
    unsetenv("VSCI_DMA_WAIT");
    return q;
}

static void transfer(sci_dma_queue_t q, size_t loff, size_t size, size_t roff, unsigned flags)
{
    SCI("SCIStartDmaTransfer", SCIStartDmaTransfer(q, ls, rs, loff, size, roff, NULL, NULL, flags, errp_));
}

static void wait_q(sci_dma_queue_t q)
{
    sci_dma_queue_state_t st;
    SCI("SCIWaitForDMAQueue", st = SCIWaitForDMAQueue(q, SCI_INFINITE_TIMEOUT, NO_FLAGS, errp_));
    if (st != SCI_DMAQUEUE_DONE) {
        fprintf(stderr, "dma_bench: queue ended in state %d\n", (int)st);
        exit(1);
    }
}

static void sleep_us(unsigned us)
{
    struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- setup ---------------------------------------------------------------- */

static void setup(void)
{
    unsigned node;
    SCI("SCIInitialize", SCIInitialize(NO_FLAGS, errp_));
    SCI("SCIOpen", SCIOpen(&sd, NO_FLAGS, errp_));
    SCI("SCIGetLocalNodeId", SCIGetLocalNodeId(0, &node, NO_FLAGS, errp_));
    SCI("SCICreateSegment", SCICreateSegment(sd, &ls, 0, TARGET_SIZE, NULL, NULL, SCI_FLAG_AUTO_ID, errp_));
    SCI("SCIPrepareSegment", SCIPrepareSegment(ls, 0, NO_FLAGS, errp_));
    SCI("SCIMapLocalSegment", lmem = SCIMapLocalSegment(ls, &lmap, 0, TARGET_SIZE, NULL, NO_FLAGS, errp_));
    for (size_t i = 0; i < TARGET_SIZE; i++)
        lmem[i] = (unsigned char)(i * 7);
    if (!remote_node) {
        /* A co-located target, owned through a descriptor of its own. */
        SCI("SCIOpen", SCIOpen(&own_sd, NO_FLAGS, errp_));
        SCI("SCICreateSegment", SCICreateSegment(own_sd, &own_target, seg_id, TARGET_SIZE, NULL, NULL, NO_FLAGS, errp_));
        SCI("SCIPrepareSegment", SCIPrepareSegment(own_target, 0, NO_FLAGS, errp_));
        SCI("SCISetSegmentAvailable", SCISetSegmentAvailable(own_target, 0, NO_FLAGS, errp_));
    }
    unsigned tnode = remote_node ? remote_node : node;
    SCI("SCIConnectSegment", SCIConnectSegment(sd, &rs, tnode, seg_id, 0, NULL, NULL, 30000, NO_FLAGS, errp_));
    if (SCIGetRemoteSegmentSize(rs) < TARGET_SIZE) {
        fprintf(stderr, "dma_bench: target segment is smaller than %zu bytes\n", TARGET_SIZE);
        exit(1);
    }
    /* For the peer figures (SCIMemCpy) and section f's stores. */
    SCI("SCIMapRemoteSegment", rmem = SCIMapRemoteSegment(rs, &rmap, 0, 8 * MIB, NULL, NO_FLAGS, errp_));
    print_machine("dma_bench");
    printf("target  : segment %u of node %u (%s)%s\n\n", seg_id, tnode,
           remote_node ? "another node: RMA" : "this node: co-located, memcpy between memfds",
           quick ? "  [-quick]" : "");
}

static void teardown(void)
{
    SCI("SCIUnmapSegment", SCIUnmapSegment(rmap, NO_FLAGS, errp_));
    SCI("SCIDisconnectSegment", SCIDisconnectSegment(rs, NO_FLAGS, errp_));
    SCI("SCIUnmapSegment", SCIUnmapSegment(lmap, NO_FLAGS, errp_));
    SCI("SCIRemoveSegment", SCIRemoveSegment(ls, NO_FLAGS, errp_));
    if (!remote_node) {
        SCI("SCIRemoveSegment", SCIRemoveSegment(own_target, NO_FLAGS, errp_));
        SCI("SCIClose", SCIClose(own_sd, NO_FLAGS, errp_));
    }
    SCI("SCIClose", SCIClose(sd, NO_FLAGS, errp_));
}

/* ---- a) buffer setup -------------------------------------------------------- */

static const size_t paper_sizes[] = { 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20 };
#define NPS (sizeof paper_sizes / sizeof paper_sizes[0])

static void section_a(void)
{
    int reps = quick ? 5 : 25;
    printf("a) DMA buffer setup (median of %d)\n", reps);
    printf("   %-8s %13s %10s %12s %12s %12s %15s   %s\n", "size", "create+map us", "+touch us",
           "1st DMA us", "2nd DMA us", "unmap+rm us", "peer mmap+touch", "paper (Fig. 6)");
    uint64_t *t_map = calloc((size_t)reps, 8), *t_touch = calloc((size_t)reps, 8),
             *t_rm = calloc((size_t)reps, 8), *t_peer = calloc((size_t)reps, 8),
             *dma1 = calloc((size_t)reps, 8), *dma2 = calloc((size_t)reps, 8);
    sci_dma_queue_t q = new_queue(NULL);
    json_section("setup");
    for (size_t s = 0; s < NPS; s++) {
        size_t n = paper_sizes[s];
        for (int r = 0; r < reps; r++) {
            sci_local_segment_t seg;
            sci_map_t map;
            volatile unsigned char *p;
            uint64_t t0 = now_ns();
            SCI("SCICreateSegment", SCICreateSegment(sd, &seg, 0, n, NULL, NULL, SCI_FLAG_AUTO_ID, errp_));
            SCI("SCIPrepareSegment", SCIPrepareSegment(seg, 0, NO_FLAGS, errp_));
            SCI("SCIMapLocalSegment", p = SCIMapLocalSegment(seg, &map, 0, n, NULL, NO_FLAGS, errp_));
            uint64_t t1 = now_ns();
            for (size_t i = 0; i < n; i += 4096)
                p[i] = 1;
            uint64_t t2 = now_ns();
            /* The buffer's first DMA: the engine maps it and faults its
             * pages in; the second runs on the warm mapping. */
            uint64_t d0 = now_ns();
            SCI("SCIStartDmaTransfer", SCIStartDmaTransfer(q, seg, rs, 0, n, 0, NULL, NULL, SCI_FLAG_DMA_WAIT, errp_));
            uint64_t d1 = now_ns();
            SCI("SCIStartDmaTransfer", SCIStartDmaTransfer(q, seg, rs, 0, n, 0, NULL, NULL, SCI_FLAG_DMA_WAIT, errp_));
            uint64_t d2 = now_ns();
            dma1[r] = d1 - d0;
            dma2[r] = d2 - d1;
            t2 = now_ns();
            SCI("SCIUnmapSegment", SCIUnmapSegment(map, NO_FLAGS, errp_));
            SCI("SCIRemoveSegment", SCIRemoveSegment(seg, NO_FLAGS, errp_));
            uint64_t t3 = now_ns();
            t_map[r] = t1 - t0;
            t_touch[r] = t2 - t0;
            t_rm[r] = t3 - t2;
            t0 = now_ns();
            volatile unsigned char *a = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (a == MAP_FAILED) {
                perror("mmap");
                exit(1);
            }
            for (size_t i = 0; i < n; i += 4096)
                a[i] = 1;
            t_peer[r] = now_ns() - t0;
            munmap((void *)a, n);
        }
        char b[32];
        printf("   %-8s %13.1f %10.1f %12.1f %12.1f %12.1f %15.1f   %s\n", fmt_size(n, b, sizeof b),
               median_ns(t_map, (uint32_t)reps) / 1e3, median_ns(t_touch, (uint32_t)reps) / 1e3,
               median_ns(dma1, (uint32_t)reps) / 1e3, median_ns(dma2, (uint32_t)reps) / 1e3,
               median_ns(t_rm, (uint32_t)reps) / 1e3, median_ns(t_peer, (uint32_t)reps) / 1e3,
               s == 0 ? "native flat in size; virtualized grows with size, ~31-34 ms at 512 KiB"
                      : "(no absolute values in the text)");
        json_row_start(s == 0);
        json_bytes("bytes", n);
        json_field("create_map_us", median_ns(t_map, (uint32_t)reps) / 1e3, 0);
        json_field("touch_us", median_ns(t_touch, (uint32_t)reps) / 1e3, 0);
        json_field("first_dma_us", median_ns(dma1, (uint32_t)reps) / 1e3, 0);
        json_field("second_dma_us", median_ns(dma2, (uint32_t)reps) / 1e3, 0);
        json_field("unmap_remove_us", median_ns(t_rm, (uint32_t)reps) / 1e3, 0);
        json_field("peer_mmap_touch_us", median_ns(t_peer, (uint32_t)reps) / 1e3, 1);
    }
    json_section_end();
    printf("   create+map: the three calls; +touch: and one store per page; 1st/2nd DMA: the\n"
           "   whole buffer to the target with SCI_FLAG_DMA_WAIT (the engine maps a segment on\n"
           "   its first transfer and faults its pages in then).\n\n");
    SCI("SCIRemoveDMAQueue", SCIRemoveDMAQueue(q, NO_FLAGS, errp_));
    free(dma1);
    free(dma2);
    free(t_map);
    free(t_touch);
    free(t_rm);
    free(t_peer);
}

/* ---- b) single transfers ----------------------------------------------------- */

/* Peer: the same bytes moved without the DMA engine. */
static uint64_t peer_once(size_t size, int read, unsigned char *buf, unsigned char *buf2)
{
    uint64_t t0 = now_ns();
    if (remote_node) {
        SCI("SCIMemCpy", SCIMemCpy(NULL, buf, rmap, 0, size, read ? SCI_FLAG_BLOCK_READ : NO_FLAGS, errp_));
    } else {
        memcpy(buf2, buf, size);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
    return now_ns() - t0;
}

static void section_b(void)
{
    static const size_t sizes[] = { 4096, 64 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20 };
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    double budget = quick ? 0.05 : 0.4;     /* seconds per size and direction */
    printf("b) single-transfer rate: SCIStartDmaTransfer -> SCIWaitForDMAQueue (adaptive), MB/s\n");
    printf("   peer: %s\n", remote_node ? "SCIMemCpy (write / SCI_FLAG_BLOCK_READ) of the same bytes"
                                        : "memcpy between two buffers of this process");
    printf("   %-8s %-5s %10s %10s %10s %9s   %s\n", "size", "dir", "dma MB/s", "peer MB/s",
           "dma/peer", "overhead", "paper (Fig. 7)");
    sci_dma_queue_t q = new_queue(NULL);
    unsigned char *buf = malloc(8 * MIB), *buf2 = malloc(8 * MIB);
    memset(buf, 1, 8 * MIB);
    memset(buf2, 2, 8 * MIB);
    uint64_t *t = malloc(100000 * sizeof *t), *tp = malloc(100000 * sizeof *tp);
    json_section("single");
    for (int si = 0; si < ns; si++) {
        size_t n = sizes[si];
        for (int read = 0; read < 2; read++) {
            unsigned flags = read ? SCI_FLAG_DMA_READ : NO_FLAGS;
            transfer(q, 0, n, 0, flags);     /* warm-up */
            wait_q(q);
            uint32_t k = 0;
            uint64_t start = now_ns();
            while (k < 100000 && (k < 5 || now_ns() - start < (uint64_t)(budget * 1e9))) {
                uint64_t t0 = now_ns();
                transfer(q, 0, n, 0, flags);
                wait_q(q);
                t[k++] = now_ns() - t0;
            }
            uint32_t kp = 0;
            start = now_ns();
            while (kp < 100000 && (kp < 5 || now_ns() - start < (uint64_t)(budget * 1e9)))
                tp[kp++] = peer_once(n, read, buf, buf2);
            double md = median_ns(t, k), mp = median_ns(tp, kp);
            char b[32];
            printf("   %-8s %-5s %10.0f %10.0f %10.3f %8.1f%%   %s\n", fmt_size(n, b, sizeof b),
                   read ? "read" : "write", n / md * 1e3, n / mp * 1e3, mp / md, (md - mp) / mp * 100,
                   n == (512 << 10) && !read ? "virtualization overhead max 7 % (at 512 KiB)"
                   : n > (512 << 10) && !read ? "overhead below 7 %" : "");
            json_row_start(si == 0 && read == 0);
            json_text("dir", read ? "read" : "write");
            json_bytes("bytes", n);
            json_field("dma_mbps", n / md * 1e3, 0);
            json_field("peer_mbps", n / mp * 1e3, 1);
        }
    }
    json_section_end();
    printf("   overhead = (dma time - peer time) / peer time: what the engine adds to moving\n"
           "   the bytes (the paper's 7 %% is guest vs host on the same engine).\n\n");
    SCI("SCIRemoveDMAQueue", SCIRemoveDMAQueue(q, NO_FLAGS, errp_));
    free(buf);
    free(buf2);
    free(t);
    free(tp);
}

/* ---- c) 1 GiB in bursts -------------------------------------------------------- */

static double bursts(size_t total, size_t burst, int nq, sci_dma_queue_t *q)
{
    size_t count = total / burst;
    int posted[NQ] = { 0 };
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < count; i++) {
        int k = (int)(i % (size_t)nq);
        if (posted[k])
            wait_q(q[k]);
        /* Every variant cycles through the same four 8 MiB regions, so all
         * move the same working set (not one that stays in the cache). */
        size_t off = (i % NQ) * 8 * MIB;
        transfer(q[k], off, burst, off, NO_FLAGS);
        posted[k] = 1;
    }
    for (int k = 0; k < nq; k++)
        if (posted[k])
            wait_q(q[k]);
    return (double)(now_ns() - t0);
}

static void section_c(void)
{
    size_t total = quick ? 128 * MIB : 1024 * MIB;
    char tb[32];
    printf("c) %s moved in bursts (local -> target), MB/s\n", fmt_size(total, tb, sizeof tb));
    printf("   %-8s %8s %12s %12s %10s %9s   %s\n", "burst", "bursts", "4 queues", "1 queue",
           "peer", "overhead", "paper (Fig. 8)");
    sci_dma_queue_t q[NQ];
    for (int k = 0; k < NQ; k++)
        q[k] = new_queue(NULL);
    unsigned char *buf = malloc(TARGET_SIZE), *buf2 = malloc(TARGET_SIZE);
    memset(buf, 1, TARGET_SIZE);
    memset(buf2, 2, TARGET_SIZE);
    bursts(64 * MIB, 8 * MIB, NQ, q);         /* warm the engine's mappings */
    json_section("bursts");
    for (size_t s = 0; s < NPS; s++) {
        size_t b = paper_sizes[s];
        double t4 = bursts(total, b, NQ, q);
        double t1 = bursts(total, b, 1, q);
        uint64_t p0 = now_ns();
        for (size_t i = 0; i < total / b; i++) {
            size_t off = (i % NQ) * 8 * MIB;
            if (remote_node)
                peer_once(b, 0, buf + off, NULL);   /* SCIMemCpy: its map is 8 MiB */
            else
                peer_once(b, 0, (unsigned char *)lmem + off, buf2 + off);
        }
        double tp = (double)(now_ns() - p0);
        char bb[32];
        printf("   %-8s %8zu %12.0f %12.0f %10.0f %8.1f%%   %s\n", fmt_size(b, bb, sizeof bb), total / b,
               total / t4 * 1e3, total / t1 * 1e3, total / tp * 1e3, (t4 - tp) / tp * 100,
               b == (2 << 20) ? "max overhead ~4 % (at 2 MiB); bursts beat single transfers"
                              : "");
        json_row_start(s == 0);
        json_bytes("total_bytes", total);
        json_bytes("burst_bytes", b);
        json_field("queues4_mbps", total / t4 * 1e3, 0);
        json_field("queue1_mbps", total / t1 * 1e3, 0);
        json_field("peer_mbps", total / tp * 1e3, 1);
    }
    json_section_end();
    printf("   overhead: 4 queues against the peer moving the same bursts one after another;\n"
           "   every variant cycles through four 8 MiB regions (a 64 MiB working set).\n\n");
    for (int k = 0; k < NQ; k++)
        SCI("SCIRemoveDMAQueue", SCIRemoveDMAQueue(q[k], NO_FLAGS, errp_));
    free(buf);
    free(buf2);
}

/* ---- d) completion notification ----------------------------------------------- */

static atomic_uint_fast64_t cb_time;

static sci_callback_action_t note_cb(void *arg, sci_dma_queue_t queue, sci_error_t status)
{
    (void)arg;
    (void)queue;
    if (status != SCI_ERR_OK)
        failures++;
    atomic_store(&cb_time, now_ns());
    return SCI_CALLBACK_CONTINUE;
}

/* 8-byte transfers; returns the median and p99 (us) of start -> seen done.
 * how: 0 SCIWaitForDMAQueue(INFINITE), 1 callback, 2 SCI_FLAG_DMA_WAIT,
 * 3 polling SCIDMAQueueState, 4 SCIWaitForDMAQueue(60 s). */
static void notify_run(const char *mode, int how, unsigned gap_us, lat_t *L)
{
    uint32_t n = quick ? 200 : (gap_us ? 1000 : 5000);
    uint64_t *t = malloc(n * sizeof *t);
    sci_dma_queue_t q = new_queue(mode);
    for (uint32_t i = 0; i < n + 20; i++) {
        if (gap_us)
            sleep_us(gap_us);
        atomic_store(&cb_time, 0);
        uint64_t t0 = now_ns(), t1;
        if (how == 1) {
            SCI("SCIStartDmaTransfer", SCIStartDmaTransfer(q, ls, rs, 0, 8, 0, note_cb, NULL,
                                                           SCI_FLAG_USE_CALLBACK, errp_));
            while (!(t1 = atomic_load(&cb_time)))
                cpu_relax();
        } else if (how == 2) {
            transfer(q, 0, 8, 0, SCI_FLAG_DMA_WAIT);
            t1 = now_ns();
        } else if (how == 3) {
            transfer(q, 0, 8, 0, NO_FLAGS);
            while (SCIDMAQueueState(q) == SCI_DMAQUEUE_POSTED)
                cpu_relax();
            t1 = now_ns();
        } else if (how == 4) {
            transfer(q, 0, 8, 0, NO_FLAGS);
            sci_dma_queue_state_t st;
            SCI("SCIWaitForDMAQueue", st = SCIWaitForDMAQueue(q, 60000, NO_FLAGS, errp_));
            t1 = now_ns();
            if (st != SCI_DMAQUEUE_DONE)
                failures++;
        } else {
            transfer(q, 0, 8, 0, NO_FLAGS);
            wait_q(q);
            t1 = now_ns();
        }
        if (i >= 20)
            t[i - 20] = t1 - t0;
    }
    make_stats(L, t, n, 0, 1);
    SCI("SCIRemoveDMAQueue", SCIRemoveDMAQueue(q, NO_FLAGS, errp_));
    free(t);
}

static void section_d(void)
{
    printf("d) completion notification: 8-byte transfer, start -> completion seen, us\n");
    printf("   %-38s %9s %9s %9s %9s   %s\n", "how", "median", "p99", "idle med", "idle p99",
           "paper");
    struct { const char *label, *mode; int how; } rows[] = {
        { "SCI_FLAG_DMA_WAIT (no notification)", NULL, 2 },
        { "SCIWaitForDMAQueue(INFINITE), adaptive", "adaptive", 0 },
        { "SCIWaitForDMAQueue(60 s), poll", "poll", 4 },
        { "SCIWaitForDMAQueue(60 s), adaptive", "adaptive", 4 },
        { "SCIWaitForDMAQueue(60 s), block", "block", 4 },
        { "SCIDMAQueueState polling", NULL, 3 },
        { "callback (SCI_FLAG_USE_CALLBACK)", NULL, 1 },
    };
    json_section("notify");
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        lat_t hot, idle;
        notify_run(rows[r].mode, rows[r].how, 0, &hot);
        notify_run(rows[r].mode, rows[r].how, 1000, &idle);
        printf("   %-38s %9.2f %9.2f %9.2f %9.2f   %s\n", rows[r].label, hot.med, hot.p99, idle.med,
               idle.p99, r == 6 ? "130-140 us (completion forwarded to the guest)" : "");
        json_row_start(r == 0);
        json_text("how", rows[r].label);
        json_field("median_us", hot.med, 0);
        json_field("p99_us", hot.p99, 0);
        json_field("idle_median_us", idle.med, 0);
        json_field("idle_p99_us", idle.p99, 1);
    }
    json_section_end();
    printf("   idle: a 1 ms pause before each transfer, so the engine's worker has gone to\n"
           "   sleep and must be woken (the 'hot' columns post back to back).  An unbounded\n"
           "   wait runs a transfer the worker has not picked up yet itself; a wait with a\n"
           "   timeout never does, so its rows show the hand-over and the notification.\n\n");
}

/* ---- e) per-call overhead -------------------------------------------------------- */

static void section_e(void)
{
    uint32_t n = quick ? 500 : 5000;
    uint64_t *ts = malloc(n * 8), *tq = malloc(n * 8), *tw = malloc(n * 8), *tc = malloc(n * 8);
    sci_dma_queue_t q = new_queue(NULL);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        transfer(q, 0, 8, 0, NO_FLAGS);
        uint64_t t1 = now_ns();
        wait_q(q);
        uint64_t t2 = now_ns();
        (void)SCIDMAQueueState(q);
        uint64_t t3 = now_ns();
        sci_dma_queue_state_t st;
        SCI("SCIWaitForDMAQueue", st = SCIWaitForDMAQueue(q, 0, NO_FLAGS, errp_));
        (void)st;
        uint64_t t4 = now_ns();
        ts[i] = t1 - t0;
        tq[i] = t3 - t2;
        tw[i] = t4 - t3;
    }
    SCI("SCIRemoveDMAQueue", SCIRemoveDMAQueue(q, NO_FLAGS, errp_));
    uint32_t nc = quick ? 50 : 300;
    for (uint32_t i = 0; i < nc; i++) {
        uint64_t t0 = now_ns();
        sci_dma_queue_t q2;
        SCI("SCICreateDMAQueue", SCICreateDMAQueue(sd, &q2, 0, 1, NO_FLAGS, errp_));
        SCI("SCIRemoveDMAQueue", SCIRemoveDMAQueue(q2, NO_FLAGS, errp_));
        tc[i] = now_ns() - t0;
    }
    lat_t a, b, c, d;
    make_stats(&a, ts, n, 0, 1);
    make_stats(&b, tq, n, 0, 1);
    make_stats(&c, tw, n, 0, 1);
    make_stats(&d, tc, nc, 0, 1);
    printf("e) per-call overhead, us\n");
    printf("   %-44s %9s %9s   %s\n", "call", "median", "p99", "paper (Fig. 10/11)");
    printf("   %-44s %9.2f %9.2f   %s\n", "SCIStartDmaTransfer (returns before the copy)", a.med, a.p99,
           "~3 us per forwarded control call, polled");
    printf("   %-44s %9.3f %9.3f\n", "SCIDMAQueueState", b.med, b.p99);
    printf("   %-44s %9.3f %9.3f\n", "SCIWaitForDMAQueue on a finished queue", c.med, c.p99);
    printf("   %-44s %9.1f %9.1f\n", "SCICreateDMAQueue + SCIRemoveDMAQueue", d.med, d.p99);
    printf("\n");
    const struct { const char *call; const lat_t *L; } calls[] = {
        { "SCIStartDmaTransfer", &a }, { "SCIDMAQueueState", &b },
        { "SCIWaitForDMAQueue (finished queue)", &c }, { "SCICreateDMAQueue + SCIRemoveDMAQueue", &d },
    };
    json_section("calls");
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        json_row_start(i == 0);
        json_text("call", calls[i].call);
        json_field("median_us", calls[i].L->med, 0);
        json_field("p99_us", calls[i].L->p99, 1);
    }
    json_section_end();
    free(ts);
    free(tq);
    free(tw);
    free(tc);
}

/* ---- f) PIO against DMA (seed 004 section 7.1) ------------------------------------ */

#define PIO_AREA (4 * MIB)
#define PIO_CHECK_OFF (16 * MIB)   /* where the local buffer receives read-backs */

/* Word i of pattern `tag`: every row writes a pattern of its own, so a
 * check never passes on what an earlier row left. */
static inline uint32_t pio_word(uint32_t tag, size_t i)
{
    return (uint32_t)(i * 2654435761u) ^ (tag * 0x01010101u);
}

/* Words of `w` (bytes/4 of them) that hold pattern `tag`. */
static size_t pio_matching(const volatile uint32_t *w, uint32_t tag, size_t bytes)
{
    size_t ok = 0;
    for (size_t i = 0; i < bytes / 4; i++)
        ok += w[i] == pio_word(tag, i);
    return ok * 4;
}

/* The bytes of [0, bytes) of the target that hold pattern `tag`, read
 * fresh from the owner's memory with a DMA read. */
static size_t pio_delivered(sci_dma_queue_t q, uint32_t tag, size_t bytes)
{
    transfer(q, PIO_CHECK_OFF, bytes, 0, SCI_FLAG_DMA_READ);
    wait_q(q);
    return pio_matching((const volatile uint32_t *)(lmem + PIO_CHECK_OFF), tag, bytes);
}

static void pio_row(int first, const char *how, const char *dir, size_t bytes, double ns, size_t good,
                    const char *paper)
{
    char b[32];
    double mbps = good / ns * 1e3;
    printf("   %-46s %-5s %8s %10.1f %12.2f %8zu   %s\n", how, dir, fmt_size(bytes, b, sizeof b), ns / 1e6,
           mbps, bytes - good, paper);
    if (good != bytes)
        failures++;
    json_row_start(first);
    json_text("how", how);
    json_text("dir", dir);
    json_bytes("bytes", bytes);
    json_bytes("delivered_bytes", good);
    json_field("ms", ns / 1e6, 0);
    json_field("mbps", mbps, 1);
}

static void section_f(void)
{
    size_t prefix = quick ? 16 << 10 : 256 << 10;
    int reps = quick ? 3 : 10;
    char pb[32];
    printf("f) programmed I/O against the DMA engine over a 4 MiB area of the target (seed 004, 7.1)\n");
    printf("   word-by-word rows time a %s prefix; MB/s counts only bytes found in the target\n",
           fmt_size(prefix, pb, sizeof pb));
    printf("   %-46s %-5s %8s %10s %12s %8s   %s\n", "how", "dir", "bytes", "ms", "MB/s", "wrong",
           "paper (NTB, 4 MB)");
    sci_dma_queue_t q = new_queue(NULL);
    volatile uint32_t *rw = (volatile uint32_t *)rmem;
    json_section("pio");

    /* Writes, 4 bytes at a time, each made visible before the next. */
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < prefix / 4; i++) {
        rw[i] = pio_word(1, i);
        SCIFlush(NULL, NO_FLAGS);
    }
    double ns = (double)(now_ns() - t0);
    pio_row(1, "4-byte stores, SCIFlush after each", "write", prefix, ns, pio_delivered(q, 1, prefix),
            "11.4 MB/s (4-byte copy loop, uncached)");

    /* Writes, 4 bytes at a time over the area, one flush. */
    t0 = now_ns();
    for (size_t i = 0; i < PIO_AREA / 4; i++)
        rw[i] = pio_word(2, i);
    SCIFlush(NULL, NO_FLAGS);
    ns = (double)(now_ns() - t0);
    pio_row(0, "4-byte stores, one SCIFlush at the end", "write", PIO_AREA, ns, pio_delivered(q, 2, PIO_AREA), "");

    /* One DMA transfer of the area (after one to warm the engine's maps);
     * every repetition moves a pattern of its own, written into the local
     * buffer outside the timing, and is checked. */
    volatile uint32_t *lw = (volatile uint32_t *)lmem;
    transfer(q, 0, PIO_AREA, 0, NO_FLAGS);
    wait_q(q);
    uint64_t *t = malloc((size_t)reps * sizeof *t);
    size_t good = PIO_AREA;
    for (int r = 0; r < reps; r++) {
        uint32_t tag = 16 + (uint32_t)r;
        for (size_t i = 0; i < PIO_AREA / 4; i++)
            lw[i] = pio_word(tag, i);
        t0 = now_ns();
        transfer(q, 0, PIO_AREA, 0, NO_FLAGS);
        wait_q(q);
        t[r] = now_ns() - t0;
        size_t g = pio_delivered(q, tag, PIO_AREA);
        good = g < good ? g : good;
    }
    uint32_t last = 16 + (uint32_t)reps - 1;
    pio_row(0, "DMA engine, one 4 MiB transfer (median)", "write", PIO_AREA, median_ns(t, (uint32_t)reps), good,
            "3.44 GB/s (NTB DMA engine)");

    /* Reads of what the last DMA wrote: a fresh fetch per word. */
    uint32_t *words = malloc(prefix);
    t0 = now_ns();
    for (size_t i = 0; i < prefix / 4; i++)
        SCI("SCIMemCpy", SCIMemCpy(NULL, &words[i], rmap, i * 4, 4, SCI_FLAG_BLOCK_READ, errp_));
    ns = (double)(now_ns() - t0);
    pio_row(0, "4-byte SCIMemCpy(SCI_FLAG_BLOCK_READ) per word", "read", prefix, ns,
            pio_matching(words, last, prefix), "11.99 MB/s (4-byte copy loop, uncached)");
    /* DMA reads, the target rewritten (untimed) before each. */
    good = PIO_AREA;
    for (int r = 0; r < reps; r++) {
        uint32_t tag = 64 + (uint32_t)r;
        for (size_t i = 0; i < PIO_AREA / 4; i++)
            lw[i] = pio_word(tag, i);
        transfer(q, 0, PIO_AREA, 0, NO_FLAGS);
        wait_q(q);
        memset((void *)(lmem + PIO_CHECK_OFF), 0, PIO_AREA);
        t0 = now_ns();
        transfer(q, PIO_CHECK_OFF, PIO_AREA, 0, SCI_FLAG_DMA_READ);
        wait_q(q);
        t[r] = now_ns() - t0;
        size_t g = pio_matching((const volatile uint32_t *)(lmem + PIO_CHECK_OFF), tag, PIO_AREA);
        good = g < good ? g : good;
    }
    pio_row(0, "DMA engine, one 4 MiB read (median)", "read", PIO_AREA, median_ns(t, (uint32_t)reps), good,
            "3.69 GB/s (NTB DMA engine)");
    json_section_end();
    printf("   wrong: bytes of the row's area that did not hold the value written, checked after\n"
           "   the timing by a DMA read of the target (fresh bytes from the owner's memory); DMA\n"
           "   rows move a new pattern every repetition and count the worst one.\n\n");
    SCI("SCIRemoveDMAQueue", SCIRemoveDMAQueue(q, NO_FLAGS, errp_));
    free(words);
    free(t);
}

/* ---- owner ---------------------------------------------------------------------- */

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static int owner(void)
{
    sci_local_segment_t seg;
    SCI("SCIOpen", SCIOpen(&sd, NO_FLAGS, errp_));
    SCI("SCICreateSegment", SCICreateSegment(sd, &seg, seg_id, TARGET_SIZE, NULL, NULL, NO_FLAGS, errp_));
    SCI("SCIPrepareSegment", SCIPrepareSegment(seg, 0, NO_FLAGS, errp_));
    SCI("SCISetSegmentAvailable", SCISetSegmentAvailable(seg, 0, NO_FLAGS, errp_));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("OWNER READY seg=%u size=%zu\n", seg_id, TARGET_SIZE);
    fflush(stdout);
    while (!stop)
        pause();
    SCI("SCIRemoveSegment", SCIRemoveSegment(seg, NO_FLAGS, errp_));
    SCI("SCIClose", SCIClose(sd, NO_FLAGS, errp_));
    return 0;
}

static void usage(void)
{
    printf("usage: dma_bench [-rn NODE] [-seg ID] [-quick] [-s abcdef] [-json FILE]\n"
           "       dma_bench -owner [-seg ID]\n");
}

int main(int argc, char **argv)
{
    const char *sections = "abcde", *json_path = NULL;
    int is_owner = 0;
    machine_info(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-quick"))
            quick = 1;
        else if (!strcmp(argv[i], "-owner"))
            is_owner = 1;
        else if (!strcmp(argv[i], "-rn") && i + 1 < argc)
            remote_node = (unsigned)strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-seg") && i + 1 < argc)
            seg_id = (unsigned)strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            sections = argv[++i];
        else if (!strcmp(argv[i], "-json") && i + 1 < argc)
            json_path = argv[++i];
        else {
            usage();
            return !strcmp(argv[i], "-h") ? 0 : 2;
        }
    }
    if (is_owner)
        return owner();
    setup();
    if (json_path) {
        if (!(jf = json_open("dma_bench", json_path)))
            return 1;
        json_preamble(jf, "dma_bench", quick, 0, 0);
        fprintf(jf, ",\n  \"target\": \"%s\", \"target_node\": %u",
                remote_node ? "remote" : "co-located", remote_node);
        fputs(",\n  \"units\": {\"bandwidth\": \"MB/s (1e6 B/s)\", \"time\": \"microseconds\"}", jf);
    }
    if (strchr(sections, 'a'))
        section_a();
    if (strchr(sections, 'b'))
        section_b();
    if (strchr(sections, 'c'))
        section_c();
    if (strchr(sections, 'd'))
        section_d();
    if (strchr(sections, 'e'))
        section_e();
    if (strchr(sections, 'f'))
        section_f();
    teardown();
    if (jf) {
        fprintf(jf, ",\n  \"failures\": %d\n}\n", failures);
        if (!json_close("dma_bench", jf, json_path))
            return 1;
    }
    if (failures) {
        fprintf(stderr, "dma_bench: %d callbacks reported an error\n", failures);
        return 1;
    }
    return 0;
}
