#include "sisci_bench.h"

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

void phase_bw(ctx_t *c)
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

