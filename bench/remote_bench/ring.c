#include "remote_bench.h"

/* ------------------------------------------------------------------------ */
/* i) message ring                                                          */
/* ------------------------------------------------------------------------ */

/* Each side's ring segment: the ack word (the peer's consumed counter of the
 * messages this side sent) at 0, then RING_SLOTS slots of RING_STRIDE bytes.
 * A message of `len` bytes sits at the top of its slot: payload, then the
 * header {len, seq} above it, then the flag (= seq) in the slot's last
 * 8 bytes, the highest word of the message and stored last, as a transport
 * written for a write-combining PCIe window lays it out.  Sequences run on
 * across rows, so a flag is never seen twice in a slot. */
typedef struct {
    sci_local_segment_t     seg;
    sci_map_t               lmap, rmap;
    sci_remote_segment_t    rseg;
    volatile unsigned char *local, *remote;
    uint64_t                sent, rcvd;        /* my messages, the peer's    */
    unsigned char          *src;               /* the message being sent     */
} ring_t;

static ring_t g_ring;

/* Word i of message seq: new in every message. */
static inline uint64_t ring_word(uint64_t seq, size_t i)
{
    return (seq * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i * 0xd6e8feb86659fd93ull) ^
           0x5851f42d4c957f2dull;
}

static inline volatile unsigned char *ring_slot_end(volatile unsigned char *base, uint64_t seq)
{
    return base + RING_OFF + (seq % RING_SLOTS + 1) * RING_STRIDE;
}

static void ring_open(void)
{
    sci_error_t e;
    ring_t *r = &g_ring;
    uint32_t base = opt.segid + RING_SEGID;
    uint32_t mine = base + (opt.server ? 0 : 1), theirs = base + (opt.server ? 1 : 0);
    memset(r, 0, sizeof *r);
    r->seg = make_segment(mine, RING_SEG, &r->lmap, &r->local);
    connect_peer(theirs, RING_SEG, &r->rseg);
    r->remote = SCIMapRemoteSegment(r->rseg, &r->rmap, 0, RING_SEG, NULL, 0, &e);
    sci_check("SCIMapRemoteSegment (message ring)", e);
    r->src = xalloc(RING_MAX);
    ctl_send(0x6e);                          /* both mapped */
    ctl_expect(0x6e, "message ring setup");
}

static void ring_close(void)
{
    ring_t *r = &g_ring;
    disconnect_peer(r->rseg, r->rmap, "message ring");
    ctl_send(0x6f);                          /* both disconnected */
    ctl_expect(0x6f, "message ring teardown");
    remove_own_segment(r->seg, r->lmap, "SCIRemoveSegment (message ring)");
    munmap(r->src, RING_MAX);
}

/* Send one message of `len` bytes: wait for a free slot (plain spin on the
 * ack word of the own segment), make the payload, copy it into the peer's
 * slot, store the header, then the flag; SCIFlush after it with `flush`. */
static inline void ring_send(ring_t *r, size_t len, int flush)
{
    uint64_t s = ++r->sent;
    const volatile uint64_t *ack = (const volatile uint64_t *)r->local;
    uint64_t n = 0, deadline = 0;
    while (s - *ack > RING_SLOTS)
        if (spin_late(&n, &deadline))
            fail("message ring: no free slot for message %llu within %.0f s (acked %llu)",
                 (unsigned long long)s, opt.timeout, (unsigned long long)*ack);
    uint64_t *w = (uint64_t *)r->src;
    for (size_t i = 0; i < len / 8; i++)
        w[i] = ring_word(s, i);
    volatile unsigned char *end = ring_slot_end(r->remote, s);
    memcpy((void *)(end - 16 - len), r->src, len);
    *(volatile uint64_t *)(end - 16) = (uint64_t)len | (s << 32);
    __atomic_store_n((uint64_t *)(end - 8), s, __ATOMIC_RELEASE);
    if (flush)
        SCIFlush(NULL, 0);
}

static inline int ring_ok(const volatile unsigned char *end, size_t len, uint64_t s)
{
    if (*(const volatile uint64_t *)(end - 16) != ((uint64_t)len | (s << 32)))
        return 0;
    const volatile uint64_t *p = (const volatile uint64_t *)(end - 16 - len);
    for (size_t i = 0; i < len / 8; i++)
        if (p[i] != ring_word(s, i))
            return 0;
    return 1;
}

/* Receive the next message: plain spin on its flag in the own segment,
 * check the header and every payload byte, store the ack (the consumed
 * counter) into the sender's segment.  Returns 0 if the message was right
 * when the flag showed, 1 if it completed within 0.5 s after (the flag
 * overtook part of it), 2 if it stayed wrong. */
static inline int ring_recv(ring_t *r, size_t len)
{
    uint64_t s = ++r->rcvd;
    const volatile unsigned char *end = ring_slot_end(r->local, s);
    uint64_t n = 0, deadline = 0;
    while (__atomic_load_n((const uint64_t *)(end - 8), __ATOMIC_ACQUIRE) != s)
        if (spin_late(&n, &deadline))
            fail("message ring: message %llu of %zu B did not arrive within %.0f s (the flag "
                 "holds %llu)", (unsigned long long)s, len, opt.timeout,
                 (unsigned long long)*(const volatile uint64_t *)(end - 8));
    int ret = 0;
    if (!ring_ok(end, len, s)) {
        ret = 2;
        uint64_t until = now_ns() + 500000000ull;
        while (now_ns() < until)
            if (ring_ok(end, len, s)) {
                ret = 1;
                break;
            }
        if (ret == 2)
            fprintf(stderr, "remote_bench %s: message ring: message %llu (%zu B) still wrong "
                    "0.5 s after its flag (header 0x%llx)\n", opt.server ? "server" : "client",
                    (unsigned long long)s, len,
                    (unsigned long long)*(const volatile uint64_t *)(end - 16));
    }
    *(volatile uint64_t *)r->remote = s;     /* the ack */
    return ret;
}

/* `count` round trips (client: send, then receive the echo; server: the
 * reverse).  Returns (late << 32) | wrong of the messages this side got. */
static uint64_t ring_pp_loop(size_t len, int flush, uint32_t count, uint64_t *samples)
{
    static const uint64_t add[3] = { 0, 1ull << 32, 1 };
    ring_t *r = &g_ring;
    uint64_t bad = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (!opt.server) {
            uint64_t a = now_ns();
            ring_send(r, len, flush);
            bad += add[ring_recv(r, len)];
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += add[ring_recv(r, len)];
            ring_send(r, len, flush);
        }
    }
    return bad;
}

/* Client: `count` messages as fast as the ring lets them go, then a spin
 * until the last is acknowledged (received and checked).  Server: receive
 * them.  Returns the server's (late << 32) | wrong. */
static uint64_t ring_stream_loop(size_t len, int flush, uint32_t count)
{
    static const uint64_t add[3] = { 0, 1ull << 32, 1 };
    ring_t *r = &g_ring;
    uint64_t bad = 0;
    if (!opt.server) {
        for (uint32_t i = 0; i < count; i++)
            ring_send(r, len, flush);
        const volatile uint64_t *ack = (const volatile uint64_t *)r->local;
        uint64_t n = 0, deadline = 0;
        while (*ack != r->sent)
            if (spin_late(&n, &deadline))
                fail("message ring: the last message (%llu) was not acknowledged within %.0f s "
                     "(acked %llu)", (unsigned long long)r->sent, opt.timeout,
                     (unsigned long long)*ack);
    } else {
        for (uint32_t i = 0; i < count; i++)
            bad += add[ring_recv(r, len)];
    }
    return bad;
}

/* Client: one command = one loop; returns the server's count of late and
 * wrong messages (for ping-pong plus this side's). */
static uint64_t ring_remote(int cmd, size_t len, int flush, uint32_t count, uint64_t *samples,
                            uint64_t *link, int *link_ok, double *secs)
{
    ctl_send(CMD(cmd, (uint64_t)len | ((uint64_t)flush << 32)));
    ctl_send(count);
    uint64_t rx0 = 0, tx0 = 0, rx1 = 0, tx1 = 0;
    int ok = net_bytes(&rx0, &tx0);
    uint64_t t0 = now_ns(), bad = 0;
    if (cmd == CMD_RING_PP)
        bad = ring_pp_loop(len, flush, count, samples);
    else
        bad = ring_stream_loop(len, flush, count);
    uint64_t t1 = now_ns();
    ok = net_bytes(&rx1, &tx1) && ok;
    if (link)
        *link = ok ? (rx1 - rx0) + (tx1 - tx0) : 0;
    if (link_ok)
        *link_ok = ok;
    if (secs)
        *secs = (double)(t1 - t0) / 1e9;
    return bad + ctl_recv();
}

void section_ring(void)
{
    phase_begin(PH_RING);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.ring_max);
    ctl_send(CMD(CMD_RING_SETUP, 0));
    ring_open();
    R.ring_n = 0;
    for (int flush = 0; flush < 2; flush++) {
        for (int k = 0; k < opt.n_ring; k++) {
            size_t len = opt.ring_sizes[k];
            ring_row_t *row = &R.ring[R.ring_n];
            memset(row, 0, sizeof *row);
            row->size = len;
            row->flush = flush;
            /* ping-pong: warm-up, then as many round trips as fit the budget */
            uint64_t t0 = now_ns();
            ring_remote(CMD_RING_PP, len, flush, (uint32_t)opt.ring_warm, NULL, NULL, NULL, NULL);
            uint32_t n = pick_iters(now_ns() - t0, opt.ring_warm, opt.ring_min, opt.ring_max,
                                    opt.ring_budget);
            uint64_t bad = ring_remote(CMD_RING_PP, len, flush, n, samples, &row->pp_link,
                                       &row->link_ok, NULL);
            row->pp_wrong = (uint32_t)bad;
            row->pp_late = (uint32_t)(bad >> 32);
            row->pp_msgs = 2ull * n;
            make_stats(&row->pp, samples, n, row->pp_wrong, 2.0);
            /* streaming: the same, window = the ring */
            t0 = now_ns();
            ring_remote(CMD_RING_STREAM, len, flush, (uint32_t)opt.ring_warm, NULL, NULL, NULL,
                        NULL);
            n = pick_iters(now_ns() - t0, opt.ring_warm, opt.ring_min, opt.ring_max,
                           opt.ring_budget);
            bad = ring_remote(CMD_RING_STREAM, len, flush, n, NULL, &row->st_link, NULL,
                              &row->st_secs);
            row->st_wrong = (uint32_t)bad;
            row->st_late = (uint32_t)(bad >> 32);
            row->st_msgs = n;
            R.ring_n++;
        }
    }
    ctl_send(CMD(CMD_RING_END, 0));
    ring_close();
    munmap(samples, sizeof(uint64_t) * (size_t)opt.ring_max);
    phase_end(PH_RING);
}

void server_ring(int cmd, uint64_t arg)
{
    if (cmd == CMD_RING_SETUP) {
        g_phase = PH_RING;
        ring_open();
        return;
    }
    if (cmd == CMD_RING_END) {
        ring_close();
        return;
    }
    size_t len = (size_t)(arg & 0xffffffffu);
    int flush = (int)((arg >> 32) & 1);
    if (len < 8 || len > RING_MAX || len % 8)
        fail("message ring command with a bad size %zu", len);
    uint32_t count = (uint32_t)ctl_recv();
    if (cmd == CMD_RING_PP)
        ctl_send(ring_pp_loop(len, flush, count, NULL));
    else
        ctl_send(ring_stream_loop(len, flush, count));
}

