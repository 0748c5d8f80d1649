#include "remote_bench.h"

/* ------------------------------------------------------------------------ */
/* b) remote write bandwidth                                                */
/* ------------------------------------------------------------------------ */

enum { BW_FLUSH, BW_MEMCPY };

/* One copy of `size` bytes from src into the remote map, visible at the
 * owner when it returns. */
static inline void bw_one(sci_map_t rmap, void *rem, void *src, size_t size, int kind)
{
    sci_error_t e;
    if (kind == BW_FLUSH) {
        memcpy(rem, src, size);
        SCIFlush(NULL, 0);
    } else {
        SCIMemCpy(NULL, src, rmap, 0, size, 0, &e);
        sci_check("SCIMemCpy", e);
    }
}

/* MB/s (10^6 B/s) over at least opt.bw_time seconds and 3 copies, after one
 * untimed copy.  Copies alternate between two sources that differ in every
 * byte, so every copy moves `size` new bytes. */
static double bw_measure(sci_map_t rmap, void *rem, unsigned char *src[2], size_t size, int kind)
{
    bw_one(rmap, rem, src[1], size, kind);
    uint64_t n = 0, t0 = now_ns(), el;
    do {
        bw_one(rmap, rem, src[n & 1], size, kind);
        n++;
        el = now_ns() - t0;
    } while (n < 3 || (double)el < opt.bw_time * 1e9);
    return (double)size * (double)n / ((double)el / 1e9) / 1e6;
}

void section_bw(void)
{
    sci_error_t e;
    sci_remote_segment_t rseg;
    sci_map_t rmap;
    phase_begin(PH_BW);
    connect_peer(opt.segid + 2, BW_MAX, &rseg);
    void *rem = (void *)SCIMapRemoteSegment(rseg, &rmap, 0, BW_MAX, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (bandwidth)", e);

    unsigned char *src[2] = { xalloc(BW_MAX), xalloc(BW_MAX) };
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() ^ now_ns();
    for (size_t i = 0; i < BW_MAX / 8; i++) {   /* xorshift pattern and its complement */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ((uint64_t *)src[0])[i] = x;
        ((uint64_t *)src[1])[i] = ~x;
    }

    for (int s = 0; s < opt.n_bw; s++) {
        size_t size = opt.bw_sizes[s];
        double bf = 0, bm = 0;
        for (int r = 0; r < opt.bw_rounds; r++) {   /* interleaved, best of N */
            double f = bw_measure(rmap, rem, src, size, BW_FLUSH);
            double m = bw_measure(rmap, rem, src, size, BW_MEMCPY);
            if (f > bf) bf = f;
            if (m > bm) bm = m;
        }
        R.bw_size[s] = size;
        R.bw_flush[s] = bf;
        R.bw_memcpy[s] = bm;
        R.bw_n = s + 1;
    }

    /* What the client wrote through its map is what the server has. */
    memcpy(rem, src[0], BW_MAX);
    SCIFlush(NULL, 0);
    ctl_send(CMD(CMD_BW_CHECK, 0));
    ctl_send(hash_buf(src[0], BW_MAX));
    R.bw_verified = ctl_recv() == 1 ? 1 : -1;

    disconnect_peer(rseg, rmap, "bandwidth");
    munmap(src[0], BW_MAX);
    munmap(src[1], BW_MAX);
    if (R.bw_verified < 0)
        fail("data check: the server's segment does not hold what the client wrote");
    phase_end(PH_BW);
}

void server_bw_check(void)
{
    uint64_t want = ctl_recv();
    ctl_send(hash_buf(g_bw_local, BW_MAX) == want ? 1 : 0);
}

/* ------------------------------------------------------------------------ */
/* c) store-to-visibility delay                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint64_t ts;                /* CLOCK_MONOTONIC ns at the store           */
    uint64_t chk;               /* ts ^ VIS_MAGIC: the slot is complete      */
} vslot_t;

static uint64_t g_vis_next;      /* next ring slot the writer uses           */

/* Server: `count` time stamps, one every interval_us, plain stores. */
void server_vis(unsigned interval_us)
{
    uint32_t count = (uint32_t)ctl_recv();
    volatile vslot_t *ring = (volatile vslot_t *)(g_out + VIS_OFF);
    uint64_t t0 = now_ns(), first = 0, last = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t due = t0 + (uint64_t)i * interval_us * 1000ull;
        struct timespec ts = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        uint64_t t = now_ns();
        volatile vslot_t *s = &ring[g_vis_next++ % VIS_SLOTS];
        s->ts = t;
        s->chk = t ^ VIS_MAGIC;
        if (i == 0)
            first = t;
        last = t;
    }
    SCIFlush(NULL, 0);
    ctl_send(count);
    ctl_send(count > 1 ? (last - first) / (count - 1) : 0);
}

void section_vis(void)
{
    phase_begin(PH_VIS);
    volatile vslot_t *ring = (volatile vslot_t *)(g_in + VIS_OFF);
    uint64_t seen[VIS_SLOTS];
    unsigned maxn = 0;
    for (int p = 0; p < NPACES; p++)
        if (opt.vis_count[p] > maxn)
            maxn = opt.vis_count[p];
    uint64_t *samples = xalloc(sizeof(uint64_t) * maxn);

    for (int p = 0; p < NPACES; p++) {
        unsigned n = opt.vis_count[p];
        for (unsigned k = 0; k < VIS_SLOTS; k++)
            seen[k] = ring[k].ts;
        ctl_send(CMD(CMD_VIS, opt.vis_interval_us[p]));
        ctl_send(n);
        uint32_t got = 0, spins = 0;
        int done = 0;
        uint64_t deadline = now_ns() + (uint64_t)(opt.timeout * 1e9) +
                            (uint64_t)n * opt.vis_interval_us[p] * 1000ull;
        for (;;) {
            /* the writer's "done" comes after a flush: one more scan sees all */
            int last_scan = done || ctl_ready();
            for (unsigned k = 0; k < VIS_SLOTS; k++) {
                uint64_t ts = ring[k].ts;
                if (ts == seen[k])
                    continue;
                if (ring[k].chk != (ts ^ VIS_MAGIC))
                    continue;               /* not complete yet */
                uint64_t t = now_ns();
                seen[k] = ts;
                if (got < n)
                    samples[got++] = t > ts ? t - ts : 0;
            }
            if (last_scan)
                break;
            spin_step(&spins);
            if ((spins & 0xff) == 0 && now_ns() > deadline)
                fail("store-to-visibility: the writer did not finish (%u of %u time stamps seen)",
                     got, n);
        }
        uint32_t sent = (uint32_t)ctl_recv();
        uint64_t pace = ctl_recv();
        R.vis_interval_us[p] = opt.vis_interval_us[p];
        R.vis_actual_us[p] = (double)pace / 1000.0;
        R.vis_sent[p] = sent;
        make_stats(&R.vis[p], samples, got, sent - got, 1.0);  /* bad = never seen */
        R.vis_n = p + 1;
    }
    munmap(samples, sizeof(uint64_t) * maxn);
    phase_end(PH_VIS);
}

/* ------------------------------------------------------------------------ */
/* f) store + SCIFlush                                                      */
/* ------------------------------------------------------------------------ */

static uint64_t g_fl_seq;

/* `count` times: 1 B (a new value each time) or a memcpy of `size` bytes
 * (the sequence number in the first 8, then a pattern that differs in every
 * byte from the previous copy's) into the server's inbox, then SCIFlush. */
static void flush_loop(size_t size, uint32_t count, uint64_t *samples, unsigned char *src[2])
{
    volatile unsigned char *dst = g_out + (size == 1 ? FL1_OFF : FL_OFF);
    for (uint32_t i = 0; i < count; i++) {
        uint64_t s = ++g_fl_seq;
        unsigned char *p = src[s & 1];
        if (size > 1)
            memcpy(p, &s, 8);
        uint64_t a = now_ns();
        if (size == 1)
            *dst = (unsigned char)s;
        else
            memcpy((void *)dst, p, size);
        SCIFlush(NULL, 0);
        uint64_t b = now_ns();
        if (samples)
            samples[i] = b - a;
    }
}

void section_flush(void)
{
    phase_begin(PH_FLUSH);
    unsigned char *src[2] = { xalloc(4096), xalloc(4096) };
    memset(src[0], 0x5a, 4096);
    memset(src[1], 0xa5, 4096);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.pp_max);
    for (int d = 0; d < 2; d++) {
        size_t size = fl_sizes[d];
        uint64_t t0 = now_ns();
        flush_loop(size, (uint32_t)opt.pp_warm, NULL, src);
        uint64_t warm_ns = now_ns() - t0;
        uint32_t n = pick_iters(warm_ns, opt.pp_warm, opt.pp_min, opt.pp_max, opt.pp_budget);
        flush_loop(size, n, samples, src);
        /* The server's memory holds the last store (each one was flushed). */
        ctl_send(CMD(CMD_FLUSH_CHECK, size));
        ctl_send(size == 1 ? (uint64_t)(unsigned char)g_fl_seq
                           : hash_buf(src[g_fl_seq & 1], size));
        int ok = ctl_recv() == 1;
        make_stats(&R.fl[d], samples, n, ok ? 0 : n, 1.0);
        R.fl_check[d] = ok ? 1 : -1;
        R.fl_n = d + 1;
    }
    munmap(samples, sizeof(uint64_t) * (size_t)opt.pp_max);
    munmap(src[0], 4096);
    munmap(src[1], 4096);
    phase_end(PH_FLUSH);
}

void server_flush_check(size_t size)
{
    uint64_t want = ctl_recv();
    int ok;
    if (size == 1)
        ok = g_in[FL1_OFF] == (unsigned char)want;
    else if (size == 4096)
        ok = hash_buf(g_in + FL_OFF, size) == want;
    else
        fail("flush check with a bad size %zu", size);
    ctl_send((uint64_t)ok);
}

/* ------------------------------------------------------------------------ */
/* g) an idle 1 GiB map                                                     */
/* ------------------------------------------------------------------------ */

double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Bytes received and sent on every interface but lo, from /proc/net/dev
 * (which shows the network namespace of the process that reads it). */
int net_bytes(uint64_t *rx, uint64_t *tx)
{
    FILE *f = fopen("/proc/net/dev", "r");
    if (!f)
        return 0;
    char line[512];
    *rx = *tx = 0;
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!c)
            continue;
        *c = 0;
        char *name = line;
        while (*name == ' ')
            name++;
        if (!strcmp(name, "lo"))
            continue;
        unsigned long long v[9];
        if (sscanf(c + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9) {
            *rx += v[0];
            *tx += v[8];
        }
    }
    fclose(f);
    return 1;
}

/* Sleep opt.idle_secs; what the process used meanwhile. */
static void idle_measure(idle_t *m)
{
    uint64_t rx0 = 0, tx0 = 0, rx1 = 0, tx1 = 0;
    double c0 = cpu_seconds();
    int ok = net_bytes(&rx0, &tx0);
    uint64_t t0 = now_ns(), due = t0 + (uint64_t)(opt.idle_secs * 1e9);
    struct timespec ts = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
    uint64_t t1 = now_ns();
    double c1 = cpu_seconds();
    ok = net_bytes(&rx1, &tx1) && ok;
    m->wall_s = (double)(t1 - t0) / 1e9;
    m->cpu_s = c1 - c0;
    m->rx = rx1 - rx0;
    m->tx = tx1 - tx0;
    m->ok = ok;
}

void section_idle(void)
{
    sci_error_t e;
    sci_remote_segment_t rseg;
    sci_map_t rmap;
    phase_begin(PH_IDLE);
    R.idle_secs = opt.idle_secs;
    /* Let the previous section's threads go quiet, then the baseline: the
     * same sleep with no map but the two control inboxes (idle too). */
    usleep(500000);
    idle_measure(&R.idle[0]);
    ctl_send(CMD(CMD_IDLE_SETUP, 0));
    ctl_expect(CMD(CMD_IDLE_SETUP, 1), "idle map setup");
    connect_peer(opt.segid + IDLE_SEGID, IDLE_SIZE, &rseg);
    volatile unsigned char *p = SCIMapRemoteSegment(rseg, &rmap, 0, IDLE_SIZE, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (1 GiB)", e);
    unsigned char v = (unsigned char)(0x80 | (now_ns() & 0x7f));
    p[IDLE_SIZE / 2] = v;
    SCIFlush(NULL, 0);
    idle_measure(&R.idle[1]);
    ctl_send(CMD(CMD_IDLE_CHECK, v));
    R.idle_check = ctl_recv() == 1 ? 1 : -1;
    disconnect_peer(rseg, rmap, "1 GiB");
    ctl_send(CMD(CMD_IDLE_END, 0));
    ctl_expect(CMD(CMD_IDLE_END, 1), "idle map teardown");
    R.idle_ran = 1;
    phase_end(PH_IDLE);
}

static sci_local_segment_t g_idle_seg;
static sci_map_t g_idle_lmap;
static volatile unsigned char *g_idle_local;

void server_idle(int cmd, uint64_t arg)
{
    if (cmd == CMD_IDLE_SETUP) {
        g_idle_seg = make_segment(opt.segid + IDLE_SEGID, IDLE_SIZE, &g_idle_lmap, &g_idle_local);
        ctl_send(CMD(CMD_IDLE_SETUP, 1));
    } else if (cmd == CMD_IDLE_CHECK) {
        ctl_send(g_idle_local[IDLE_SIZE / 2] == (unsigned char)arg ? 1 : 0);
    } else {
        remove_own_segment(g_idle_seg, g_idle_lmap, "SCIRemoveSegment (1 GiB)");
        ctl_send(CMD(CMD_IDLE_END, 1));
    }
}

/* ------------------------------------------------------------------------ */
/* h) mailbox                                                               */
/* ------------------------------------------------------------------------ */

static uint32_t g_mb_round;

/* Round r's payload: the same value two rounds running, so every other
 * round stores again the value the server has just cleared. */
static inline uint64_t mb_value(uint32_t r)
{
    return (r >> 1) & 1 ? MB_A : MB_B;
}

/* `count` rounds.  Client: payload, SCIFlush, flag, SCIFlush into the
 * server's inbox, then a plain spin on the own inbox for the ack; returns
 * the acks with an unexpected value.  Server: a plain spin on the flag,
 * check the payload, clear both in its own memory, ack; returns the wrong
 * payloads. */
uint32_t mb_loop(uint32_t count, uint64_t *samples, uint64_t *elapsed)
{
    uint32_t bad = 0;
    uint64_t start = now_ns();
    if (!opt.server) {
        volatile uint64_t *pl = (volatile uint64_t *)(g_out + MB_OFF), *fl = pl + 1;
        const volatile uint32_t *ack = (const volatile uint32_t *)(g_in + MB_OFF);
        for (uint32_t i = 0; i < count; i++) {
            uint32_t r = ++g_mb_round;
            uint64_t a = now_ns();
            *pl = mb_value(r);
            SCIFlush(NULL, 0);
            *fl = MB_FLAG;
            SCIFlush(NULL, 0);
            bad += spin_until(ack, r, "mailbox: the ack");
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        }
    } else {
        volatile uint64_t *pl = (volatile uint64_t *)(g_in + MB_OFF), *fl = pl + 1;
        volatile uint32_t *ack = (volatile uint32_t *)(g_out + MB_OFF);
        for (uint32_t i = 0; i < count; i++) {
            uint32_t r = ++g_mb_round;
            uint64_t n = 0, deadline = 0;
            while (*fl != MB_FLAG)
                if (spin_late(&n, &deadline))
                    fail("mailbox: the flag of round %u did not arrive within %.0f s", r,
                         opt.timeout);
            uint64_t got = *pl;
            if (got != mb_value(r) && ++bad <= 5)
                fprintf(stderr, "remote_bench server: mailbox round %u: payload 0x%llx, "
                        "expected 0x%llx\n", r, (unsigned long long)got,
                        (unsigned long long)mb_value(r));
            *fl = 0;
            *pl = 0;
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            *ack = r;
        }
    }
    if (elapsed)
        *elapsed = now_ns() - start;
    return bad;
}

void section_mbox(void)
{
    phase_begin(PH_MBOX);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.mb_max);
    uint64_t warm_ns, el;
    ctl_send(CMD(CMD_MBOX, (uint64_t)opt.mb_warm));
    R.mb_ack_wrong = mb_loop((uint32_t)opt.mb_warm, NULL, &warm_ns);
    R.mb_wrong = (uint32_t)ctl_recv();
    uint32_t n = pick_iters(warm_ns, opt.mb_warm, opt.mb_min, opt.mb_max, opt.mb_budget);
    ctl_send(CMD(CMD_MBOX, n));
    R.mb_ack_wrong += mb_loop(n, samples, &el);
    R.mb_wrong += (uint32_t)ctl_recv();
    R.mb_rounds_total = (uint32_t)opt.mb_warm + n;
    R.mb_elapsed_s = (double)el / 1e9;
    make_stats(&R.mb, samples, n, R.mb_wrong, 1.0);
    R.mb_ran = 1;
    munmap(samples, sizeof(uint64_t) * (size_t)opt.mb_max);
    phase_end(PH_MBOX);
}

