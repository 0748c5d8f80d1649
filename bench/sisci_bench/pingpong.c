#include "sisci_bench.h"

/* ------------------------------------------------------------------------ */
/* b) ping-pong through memory                                              */
/* ------------------------------------------------------------------------ */

/* Write one message of `size` bytes into the peer's memory: payload (whose
 * first word carries the sequence number), then a store barrier, then the
 * flag (= sequence number) in the last 4 bytes. */
static inline void pp_send(unsigned char *remote, unsigned char *payload,
                           size_t size, uint32_t seq, int sci)
{
    if (size > 4) {
        memcpy(payload, &seq, 4);
        memcpy(remote, payload, size - 4);
        if (sci)
            SCIStoreBarrier(NULL, 0);
        else
            COMPILER_BARRIER();                 /* x86 TSO: stores in order */
    }
    __atomic_store_n((uint32_t *)(remote + size - 4), seq, __ATOMIC_RELEASE);
}

/* Busy-wait on the own local memory for the flag; read the payload out.
 * Returns 1 if the payload does not carry the expected sequence number. */
static inline int pp_wait(unsigned char *local, unsigned char *out, size_t size,
                          uint32_t seq)
{
    uint32_t spins = 0;
    while (__atomic_load_n((uint32_t *)(local + size - 4), __ATOMIC_ACQUIRE) != seq) {
        cpu_relax();
        if ((++spins & 0xffff) == 0)      /* the peer may share our core: let it run */
            sched_yield();
    }
    if (size > 4) {
        uint32_t got;
        memcpy(out, local, size - 4);
        memcpy(&got, out, 4);
        return got != seq;
    }
    return 0;
}

static uint32_t pp_seq;     /* identical sequence on both sides */

/* `count` round trips; A stores each RTT in samples[] (if not NULL).
 * Returns the number of messages that arrived with a wrong payload. */
static uint32_t pp_loop(ctx_t *c, unsigned char *local, unsigned char *remote, size_t size,
                        int sci, uint32_t count, uint64_t *samples,
                        unsigned char *payload, unsigned char *rbuf)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t s = ++pp_seq;
        if (c->role == 0) {
            uint64_t a = now_ns();
            pp_send(remote, payload, size, s, sci);
            bad += pp_wait(local, rbuf, size, s);
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += pp_wait(local, rbuf, size, s);
            pp_send(remote, payload, size, s, sci);
        }
    }
    return bad;
}

typedef struct {
    unsigned char *local, *remote;
    int            sci;
} pp_path_t;

/* One message size: vsci (path 0) and raw (path 1) alternate in rounds, and
 * each path's samples are pooled, so that a transient disturbance hits both. */
static void pp_size(ctx_t *c, const pp_path_t path[2], size_t size, lat_t *out[2],
                    uint64_t *samples[2], unsigned char *payload, unsigned char *rbuf)
{
    uint32_t bad[2] = { 0, 0 };
    for (int k = 0; k < 2; k++)
        memset(path[k].local, 0, size);         /* own inboxes only */
    ctl_barrier(c);

    /* warm-up; vsci's pace sets the number of timed iterations */
    uint64_t t0 = now_ns();
    bad[0] += pp_loop(c, path[0].local, path[0].remote, size, 1, (uint32_t)opt.pp_warm,
                      NULL, payload, rbuf);
    uint64_t warm_ns = now_ns() - t0;
    bad[1] += pp_loop(c, path[1].local, path[1].remote, size, 0, (uint32_t)opt.pp_warm,
                      NULL, payload, rbuf);
    uint32_t n = agree_iters(c, warm_ns, opt.pp_warm, opt.pp_min, opt.pp_max, opt.pp_budget);
    uint32_t per = n / (uint32_t)opt.pp_rounds;
    if (per == 0)
        per = 1;
    for (int r = 0; r < opt.pp_rounds; r++)
        for (int k = 0; k < 2; k++) {
            /* 16 unrecorded rounds after each switch (and the control message) */
            bad[k] += pp_loop(c, path[k].local, path[k].remote, size, path[k].sci, 16,
                              NULL, payload, rbuf);
            bad[k] += pp_loop(c, path[k].local, path[k].remote, size, path[k].sci, per,
                              c->role == 0 ? samples[k] + (size_t)r * per : NULL,
                              payload, rbuf);
        }

    /* B reports its receive errors; A records everything */
    if (c->role == 1) {
        ctl_send(c, ((uint64_t)bad[0] << 32) | bad[1]);
    } else {
        uint64_t b = ctl_recv(c);
        bad[0] += (uint32_t)(b >> 32);
        bad[1] += (uint32_t)b;
        for (int k = 0; k < 2; k++)
            make_rtt_stats(out[k], samples[k], per * (uint32_t)opt.pp_rounds, bad[k]);
    }
}

void phase_pp(ctx_t *c)
{
    sci_error_t e;
    uint32_t myid = c->idbase + 2 + (uint32_t)c->role;
    uint32_t peerid = c->idbase + 2 + (uint32_t)(1 - c->role);
    sci_local_segment_t seg;
    sci_remote_segment_t rseg;
    sci_map_t lmap, rmap;

    sci_open_worker(c);
    SCICreateSegment(c->sd, &seg, myid, PP_SEG, NULL, NULL, 0, &e);
    sci_check(c, "SCICreateSegment", e);
    SCIPrepareSegment(seg, 0, 0, &e);
    sci_check(c, "SCIPrepareSegment", e);
    unsigned char *local = (unsigned char *)SCIMapLocalSegment(seg, &lmap, 0, PP_SEG,
                                                               NULL, 0, &e);
    sci_check(c, "SCIMapLocalSegment", e);
    SCISetSegmentAvailable(seg, 0, 0, &e);
    sci_check(c, "SCISetSegmentAvailable", e);
    ctl_barrier(c);
    SCIConnectSegment(c->sd, &rseg, c->node, peerid, 0, NULL, NULL,
                      CONNECT_TIMEOUT_MS, 0, &e);
    sci_check(c, "SCIConnectSegment", e);
    unsigned char *remote = (unsigned char *)SCIMapRemoteSegment(rseg, &rmap, 0, PP_SEG,
                                                                 NULL, 0, &e);
    sci_check(c, "SCIMapRemoteSegment", e);

    /* the raw peer: two separate MAP_SHARED mappings of one memfd */
    unsigned char *shm = mmap(NULL, 2 * PP_SEG, PROT_READ | PROT_WRITE, MAP_SHARED,
                              c->memfd, 0);
    if (shm == MAP_FAILED)
        worker_fail(c, "mmap(memfd): %s", strerror(errno));
    unsigned char *raw_local = shm + (size_t)c->role * PP_SEG;
    unsigned char *raw_remote = shm + (size_t)(1 - c->role) * PP_SEG;

    unsigned char *payload = xalloc(c, PP_MAX), *rbuf = xalloc(c, PP_MAX);
    memset(payload, 0x5a, PP_MAX);
    uint64_t *samples[2];
    for (int k = 0; k < 2; k++)
        samples[k] = xalloc(c, sizeof(uint64_t) * ((size_t)opt.pp_max + 16));
    const pp_path_t path[2] = { { local, remote, 1 }, { raw_local, raw_remote, 0 } };

    R->pp_n = opt.n_pp;
    for (int s = 0; s < opt.n_pp; s++) {
        size_t size = opt.pp_sizes[s];
        lat_t *out[2] = { &R->pp_vsci[s], &R->pp_raw[s] };
        R->pp_size[s] = size;
        pp_size(c, path, size, out, samples, payload, rbuf);
    }

    ctl_barrier(c);
    SCIUnmapSegment(rmap, 0, &e);
    sci_check(c, "SCIUnmapSegment (remote)", e);
    SCIDisconnectSegment(rseg, 0, &e);
    sci_check(c, "SCIDisconnectSegment", e);
    ctl_barrier(c);                 /* both disconnected before removal */
    sci_remove_local(c, seg, lmap);
    sci_close_worker(c);
}
