#include "remote_bench.h"

/* ------------------------------------------------------------------------ */
/* j) per trapped store                                                     */
/* ------------------------------------------------------------------------ */

static inline uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Where write i of a variant goes: stores in pages 0..127, SCIMemCpy in
 * 128..255, each page used once every 128 writes (128 ms), a new word of it
 * each time, so every store is the first since the page's last shipment. */
static inline size_t ts_off(int variant, unsigned i)
{
    unsigned half = TS_PAGES / 2;
    unsigned page = (variant == TS_MEMCPY ? half : 0) + i % half;
    return (size_t)page * 4096 + (size_t)((i / half) % 512) * 8;
}

/* Could `v`, read at `t`, be a time stamp the client stored? Both nodes read
 * one host's CLOCK_MONOTONIC, and a run lasts less than 600 s: not one from
 * the future, nor from before that. */
static inline int ts_plausible(uint64_t v, uint64_t t)
{
    return v <= t + 1000000000ull && t - v <= 600000000000ull;
}

static sci_local_segment_t g_ts_seg;         /* server */
static sci_map_t g_ts_lmap;
static volatile unsigned char *g_ts_local;

/* Client: `count` isolated writes of a CLOCK_MONOTONIC time stamp, one
 * every TS_PACE_US, into the server's segment (TS_STORE: a plain 8-byte
 * store through the map; TS_MEMCPY: SCIMemCpy of the same 8 bytes; TS_LOCAL:
 * a store into private memory, the floor of the timing itself). */
static void ts_run(int variant, sci_map_t rmap, volatile unsigned char *rem, ts_row_t *row,
                   uint64_t *cpu, uint64_t *wall, volatile uint64_t *priv)
{
    unsigned count = opt.ts_count;
    if (variant != TS_LOCAL) {
        ctl_send(CMD(CMD_TS_RUN, (uint64_t)variant));
        ctl_send(count);
    }
    double pc0 = cpu_seconds();
    uint64_t t0 = now_ns();
    for (unsigned i = 0; i < count; i++) {
        uint64_t due = t0 + (uint64_t)(i + 1) * TS_PACE_US * 1000ull;
        struct timespec ts = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        size_t off = ts_off(variant, i);
        uint64_t c0 = thread_cpu_ns();
        uint64_t w0 = now_ns();
        if (variant == TS_STORE) {
            *(volatile uint64_t *)(rem + off) = w0;
        } else if (variant == TS_MEMCPY) {
            sci_error_t e;
            SCIMemCpy(NULL, &w0, rmap, (unsigned)off, 8, 0, &e);
            sci_check("SCIMemCpy (8 B time stamp)", e);
        } else {
            priv[off / 8] = w0;
        }
        uint64_t w1 = now_ns();
        uint64_t c1 = thread_cpu_ns();
        cpu[i] = c1 - c0;
        wall[i] = w1 - w0;
    }
    double pc1 = cpu_seconds();
    make_stats(&row->cpu, cpu, count, 0, 1.0);
    make_stats(&row->wall, wall, count, 0, 1.0);
    row->proc_cpu_us = (pc1 - pc0) * 1e6 / count;
    row->ran = 1;
    if (variant == TS_LOCAL)
        return;
    SCIFlush(NULL, 0);
    ctl_send(0x7a);                          /* done: the server counts what is missing */
    /* The server's figures: seen, lost, median, p99, mean, min, max (ns),
     * then the NB + 1 histogram buckets. */
    uint32_t seen = (uint32_t)ctl_recv();
    row->lost = (uint32_t)ctl_recv();
    lat_t *v = &row->vis;
    memset(v, 0, sizeof *v);
    v->n = seen;
    v->bad = row->lost;
    v->med = (double)ctl_recv() / 1e3;
    v->p99 = (double)ctl_recv() / 1e3;
    v->mean = (double)ctl_recv() / 1e3;
    v->min = (double)ctl_recv() / 1e3;
    v->max = (double)ctl_recv() / 1e3;
    for (int b = 0; b <= NB; b++)
        v->hist[b] = (uint32_t)ctl_recv();
}

void section_ts(void)
{
    sci_error_t e;
    sci_remote_segment_t rseg;
    sci_map_t rmap;
    phase_begin(PH_TS);
    ctl_send(CMD(CMD_TS_SETUP, 0));
    ctl_expect(CMD(CMD_TS_SETUP, 1), "per-store setup");
    connect_peer(opt.segid + TS_SEGID, TS_SIZE, &rseg);
    volatile unsigned char *rem = SCIMapRemoteSegment(rseg, &rmap, 0, TS_SIZE, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (per-store)", e);
    uint64_t *cpu = xalloc(sizeof(uint64_t) * opt.ts_count);
    uint64_t *wall = xalloc(sizeof(uint64_t) * opt.ts_count);
    volatile uint64_t *priv = xalloc(TS_SIZE);
    R.ts_count = opt.ts_count;
    ts_run(TS_LOCAL, rmap, rem, &R.ts[TS_LOCAL], cpu, wall, priv);
    ts_run(TS_STORE, rmap, rem, &R.ts[TS_STORE], cpu, wall, priv);
    ts_run(TS_MEMCPY, rmap, rem, &R.ts[TS_MEMCPY], cpu, wall, priv);
    disconnect_peer(rseg, rmap, "per-store");
    ctl_send(CMD(CMD_TS_END, 0));
    ctl_expect(CMD(CMD_TS_END, 1), "per-store teardown");
    munmap(cpu, sizeof(uint64_t) * opt.ts_count);
    munmap(wall, sizeof(uint64_t) * opt.ts_count);
    munmap((void *)priv, TS_SIZE);
    phase_end(PH_TS);
}

/* Server: spin (plain loop) on the slot of each write in turn, in the own
 * segment, and note when it shows; stop at the client's "done". */
static void server_ts_run(int variant)
{
    uint32_t count = (uint32_t)ctl_recv();
    uint64_t *d = xalloc(sizeof(uint64_t) * (count ? count : 1));
    uint32_t seen = 0, lost = 0;
    int done = 0;
    for (uint32_t i = 0; i < count; i++) {
        const volatile uint64_t *w = (const volatile uint64_t *)(g_ts_local + ts_off(variant, i));
        uint64_t v, n = 0, deadline = 0;
        /* The client's "done" follows an SCIFlush: a write not there at a
         * read made after "done" was seen never arrived. */
        for (;;) {
            if ((v = *w) != 0 || done)
                break;
            if ((done = ctl_ready()))
                continue;
            if (spin_late(&n, &deadline))
                fail("per-store: write %u did not arrive within %.0f s", i, opt.timeout);
        }
        if (v == 0) {
            lost++;                          /* the client is done and it never came */
            continue;
        }
        uint64_t t = now_ns();
        /* A value that is no time stamp was read while it was being placed
         * (docs/api.md, store contract item 7). Say so, and time the whole
         * value once it shows; a value that never becomes one is a failure. */
        if (!ts_plausible(v, t)) {
            uint64_t torn = v;
            while ((v = *w) == torn)
                if (spin_late(&n, &deadline))
                    fail("per-store: write %u reads 0x%016llx, which the client never stored, "
                         "for %.0f s", i, (unsigned long long)torn, opt.timeout);
            t = now_ns();
            if (!ts_plausible(v, t))
                fail("per-store: write %u reads 0x%016llx, then 0x%016llx: no time stamp the "
                     "client stored", i, (unsigned long long)torn, (unsigned long long)v);
            fprintf(stderr, "remote_bench: per-store write %u read in pieces (0x%016llx), then "
                    "whole\n", i, (unsigned long long)torn);
        }
        d[seen++] = t > v ? t - v : 0;
        *(volatile uint64_t *)w = 0;         /* the slot is used again 512 rounds later */
    }
    ctl_expect(0x7a, "per-store done");
    lat_t L;
    make_stats(&L, d, seen, lost, 1.0);
    ctl_send(seen);
    ctl_send(lost);
    ctl_send((uint64_t)(L.med * 1e3));
    ctl_send((uint64_t)(L.p99 * 1e3));
    ctl_send((uint64_t)(L.mean * 1e3));
    ctl_send((uint64_t)(L.min * 1e3));
    ctl_send((uint64_t)(L.max * 1e3));
    /* 38 messages in a row: the client reads them as they come, and the
     * control ring has 64 slots. */
    for (int b = 0; b <= NB; b++)
        ctl_send(L.hist[b]);
    munmap(d, sizeof(uint64_t) * (count ? count : 1));
}

void server_ts(int cmd, uint64_t arg)
{
    g_phase = PH_TS;
    if (cmd == CMD_TS_SETUP) {
        g_ts_seg = make_segment(opt.segid + TS_SEGID, TS_SIZE, &g_ts_lmap, &g_ts_local);
        ctl_send(CMD(CMD_TS_SETUP, 1));
    } else if (cmd == CMD_TS_RUN) {
        if (arg != TS_STORE && arg != TS_MEMCPY)
            fail("per-store command with a bad variant %llu", (unsigned long long)arg);
        server_ts_run((int)arg);
    } else {
        remove_own_segment(g_ts_seg, g_ts_lmap, "SCIRemoveSegment (per-store)");
        ctl_send(CMD(CMD_TS_END, 1));
    }
}

