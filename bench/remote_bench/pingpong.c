#include "remote_bench.h"

/* ------------------------------------------------------------------------ */
/* a) remote ping-pong                                                      */
/* ------------------------------------------------------------------------ */

/* Two payload patterns whose every byte differs: message n carries
 * pattern n & 1, so every byte of it is a change the library must ship
 * (vsci ships only bytes that changed). */
unsigned char *g_pat[2], *g_rbuf;
static uint32_t g_pp_seq;               /* identical sequence on both sides */

/* Message of `size` bytes into the peer's inbox: payload (its first word is
 * the sequence number), then the flag = sequence number in the last 4
 * bytes.  Plain stores; no SISCI call. */
static inline void pp_send(size_t size, uint32_t seq)
{
    unsigned char *dst = (unsigned char *)(g_out + PP_OFF);
    if (size > 4) {
        unsigned char *p = g_pat[seq & 1];
        memcpy(p, &seq, 4);
        memcpy(dst, p, size - 4);
    }
    __atomic_store_n((uint32_t *)(dst + size - 4), seq, __ATOMIC_RELEASE);
}

static inline int pp_payload_ok(const unsigned char *src, size_t size, uint32_t seq)
{
    uint32_t got;
    memcpy(g_rbuf, src, size - 4);
    memcpy(&got, g_rbuf, 4);
    if (got != seq)
        return 0;
    return size <= 8 || memcmp(g_rbuf + 4, g_pat[seq & 1] + 4, size - 8) == 0;
}

/* Busy-wait on the own inbox for the flag; check the payload.  Returns 0 if
 * the payload is the one sent with this sequence number, 1 if it was not yet
 * complete when the flag showed but completed within 0.5 s (the flag
 * overtook part of the payload), 2 if it stayed wrong. */
static inline int pp_wait(size_t size, uint32_t seq, uint64_t deadline)
{
    const unsigned char *src = (const unsigned char *)(g_in + PP_OFF);
    uint32_t spins = 0, n = 0;
    uint64_t late = 0;
    while (__atomic_load_n((const uint32_t *)(src + size - 4), __ATOMIC_ACQUIRE) != seq) {
        spin_step(&spins);
        if ((++n & 0xfffff) != 0)
            continue;
        uint64_t t = now_ns();
        if (t > deadline)
            fail("ping-pong: message %u of %zu B did not arrive within %.0f s (flag holds %u)",
                 seq, size, opt.timeout, *(const volatile uint32_t *)(src + size - 4));
        /* Late by a second: say so at once if the connection is gone (the
         * check is a flush point, so never made while messages flow). */
        if (late == 0)
            late = t + 1000000000ull;
        else if (t > late) {
            sci_error_t e;
            if (SCICheckSequence(g_peer_seq, 0, &e) == SCI_SEQ_NOT_RETRIABLE)
                fail("ping-pong: message %u of %zu B: the connection to the peer's inbox was "
                     "lost (%s)", seq, size, SCIGetErrorString(e));
        }
    }
    if (size <= 4 || pp_payload_ok(src, size, seq))
        return 0;
    uint64_t until = now_ns() + 500000000ull;
    while (now_ns() < until) {
        struct timespec ts = { 0, 20000 };
        nanosleep(&ts, NULL);       /* leave the core to the library's threads */
        if (pp_payload_ok(src, size, seq))
            return 1;
    }
    uint32_t got;
    memcpy(&got, g_rbuf, 4);
    fprintf(stderr, "remote_bench %s: ping-pong message %u (%zu B): after 0.5 s the payload still "
            "holds sequence %u, byte 4 = 0x%02x, last payload byte = 0x%02x (expected 0x%02x)\n",
            opt.server ? "server" : "client", seq, size, got, size > 8 ? g_rbuf[4] : 0,
            g_rbuf[size - 5], g_pat[seq & 1][size - 5]);
    return 2;
}

/* `count` round trips; the client stores each RTT in samples[] (if set).
 * Returns (late << 32) | wrong: messages whose payload completed after
 * the flag, and messages whose payload stayed wrong. */
static uint64_t pp_loop(size_t size, uint32_t count, uint64_t *samples)
{
    uint64_t bad = 0;
    static const uint64_t add[3] = { 0, 1ull << 32, 1 };
    uint64_t deadline = now_ns() + (uint64_t)(opt.timeout * 1e9);
    for (uint32_t i = 0; i < count; i++) {
        uint32_t s = ++g_pp_seq;
        if (!opt.server) {
            uint64_t a = now_ns();
            pp_send(size, s);
            bad += add[pp_wait(size, s, deadline)];
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += add[pp_wait(size, s, deadline)];
            pp_send(size, s);
        }
    }
    return bad;
}

/* Client: one command = one loop of `count` round trips of `size` bytes. */
static uint64_t pp_remote_loop(size_t size, uint32_t count, uint64_t *samples)
{
    ctl_send(CMD(CMD_PP, size));
    ctl_send(count);
    uint64_t bad = pp_loop(size, count, samples);
    return bad + ctl_recv();                /* plus the server's receive errors */
}

void section_pp(void)
{
    phase_begin(PH_PP);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.pp_max);
    for (int s = 0; s < opt.n_pp; s++) {
        size_t size = opt.pp_sizes[s];
        uint64_t t0 = now_ns();
        uint64_t bad = pp_remote_loop(size, (uint32_t)opt.pp_warm, NULL);
        uint64_t warm_ns = now_ns() - t0;
        uint32_t n = pick_iters(warm_ns, opt.pp_warm, opt.pp_min, opt.pp_max, opt.pp_budget);
        bad += pp_remote_loop(size, n, samples);
        R.pp_size[s] = size;
        make_stats(&R.pp[s], samples, n, (uint32_t)bad, 2.0);
        R.pp[s].late = (uint32_t)(bad >> 32);
        R.pp_n = s + 1;
    }
    munmap(samples, sizeof(uint64_t) * (size_t)opt.pp_max);
    phase_end(PH_PP);
}

void server_pp(size_t size)
{
    if (size < 4 || size > PP_MAX || size % 4)
        fail("ping-pong command with a bad size %zu", size);
    uint32_t count = (uint32_t)ctl_recv();
    ctl_send(pp_loop(size, count, NULL));
}

/* ------------------------------------------------------------------------ */
/* d) remote interrupts and data interrupts                                 */
/* ------------------------------------------------------------------------ */

static sci_local_interrupt_t g_li;
static sci_remote_interrupt_t g_ri;
static sci_local_data_interrupt_t g_dli;
static sci_remote_data_interrupt_t g_dri;
static uint32_t g_in_seq;

void intr_setup(void)
{
    sci_error_t e;
    unsigned no = 0, dno = 0;
    SCICreateInterrupt(g_sd, &g_li, 0, &no, NULL, NULL, 0, &e);
    sci_check("SCICreateInterrupt", e);
    SCICreateDataInterrupt(g_sd, &g_dli, 0, &dno, NULL, NULL, 0, &e);
    sci_check("SCICreateDataInterrupt", e);
    ctl_send(((uint64_t)no << 32) | dno);
    uint64_t peer = ctl_recv();
    unsigned pno = (unsigned)(peer >> 32), pdno = (unsigned)peer;
    SCIConnectInterrupt(g_sd, &g_ri, opt.rn, 0, pno, 10000, 0, &e);
    sci_check("SCIConnectInterrupt", e);
    SCIConnectDataInterrupt(g_sd, &g_dri, opt.rn, 0, pdno, 10000, 0, &e);
    sci_check("SCIConnectDataInterrupt", e);
    ctl_send(0x1a);                          /* both connected */
    ctl_expect(0x1a, "interrupt setup");
}

void intr_end(void)
{
    sci_error_t e;
    SCIDisconnectInterrupt(g_ri, 0, &e);
    sci_check("SCIDisconnectInterrupt", e);
    SCIDisconnectDataInterrupt(g_dri, 0, &e);
    sci_check("SCIDisconnectDataInterrupt", e);
    ctl_send(0x1b);                          /* both disconnected */
    ctl_expect(0x1b, "interrupt teardown");
    SCIRemoveInterrupt(g_li, 0, &e);
    sci_check("SCIRemoveInterrupt", e);
    SCIRemoveDataInterrupt(g_dli, 0, &e);
    sci_check("SCIRemoveDataInterrupt", e);
}

static inline void in_send(int k, unsigned char *buf, unsigned len, uint32_t seq)
{
    sci_error_t e;
    if (k == K_INTR) {
        SCITriggerInterrupt(g_ri, 0, &e);
        sci_check("SCITriggerInterrupt", e);
    } else {
        memcpy(buf, &seq, 4);
        SCITriggerDataInterrupt(g_dri, buf, len, 0, &e);
        sci_check("SCITriggerDataInterrupt", e);
    }
}

static inline int in_wait(int k, unsigned char *buf, unsigned len, uint32_t seq)
{
    sci_error_t e;
    if (k == K_INTR) {
        SCIWaitForInterrupt(g_li, WAIT_TIMEOUT_MS, 0, &e);
        sci_check("SCIWaitForInterrupt", e);
        return 0;
    }
    unsigned rl = DI_MAX;
    uint32_t got;
    SCIWaitForDataInterrupt(g_dli, buf, &rl, WAIT_TIMEOUT_MS, 0, &e);
    sci_check("SCIWaitForDataInterrupt", e);
    memcpy(&got, buf, 4);
    return rl != len || got != seq;
}

static uint32_t in_loop(int k, unsigned len, uint32_t count, uint64_t *samples,
                        unsigned char *buf)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t s = ++g_in_seq;
        if (!opt.server) {
            uint64_t a = now_ns();
            in_send(k, buf, len, s);
            bad += in_wait(k, buf, len, s);
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += in_wait(k, buf, len, s);
            in_send(k, buf, len, s);
        }
    }
    return bad;
}

static uint32_t in_remote_loop(int k, unsigned len, uint32_t count, uint64_t *samples,
                               unsigned char *buf)
{
    ctl_send(CMD(CMD_INTR_LOOP, ((uint64_t)k << 16) | len));
    ctl_send(count);
    uint32_t bad = in_loop(k, len, count, samples, buf);
    return bad + (uint32_t)ctl_recv();
}

static void in_measure(int k, unsigned len, lat_t *out, uint64_t *samples, unsigned char *buf)
{
    uint64_t t0 = now_ns();
    uint32_t bad = in_remote_loop(k, len, (uint32_t)opt.in_warm, NULL, buf);
    uint64_t warm_ns = now_ns() - t0;
    uint32_t n = pick_iters(warm_ns, opt.in_warm, opt.in_min, opt.in_max, opt.in_budget);
    bad += in_remote_loop(k, len, n, samples, buf);
    make_stats(out, samples, n, bad, 2.0);
}

void section_intr(void)
{
    phase_begin(PH_INTR);
    ctl_send(CMD(CMD_INTR_SETUP, 0));
    intr_setup();
    unsigned char *buf = xalloc(DI_MAX);
    memset(buf, 0x3c, DI_MAX);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.in_max);
    in_measure(K_INTR, 0, &R.intr, samples, buf);
    for (int d = 0; d < 2; d++)
        in_measure(K_DINTR, di_sizes[d], &R.dint[d], samples, buf);
    ctl_send(CMD(CMD_INTR_END, 0));
    intr_end();
    munmap(samples, sizeof(uint64_t) * (size_t)opt.in_max);
    munmap(buf, DI_MAX);
    phase_end(PH_INTR);
}

void server_intr_loop(uint64_t arg)
{
    static unsigned char *buf;
    if (!buf) {
        buf = xalloc(DI_MAX);
        memset(buf, 0xc3, DI_MAX);
    }
    int k = (int)((arg >> 16) & 0xff);
    unsigned len = (unsigned)(arg & 0xffff);
    if ((k != K_INTR && k != K_DINTR) || len > DI_MAX || (k == K_DINTR && len < 4))
        fail("interrupt command with bad arguments (kind %d, length %u)", k, len);
    uint32_t count = (uint32_t)ctl_recv();
    ctl_send(in_loop(k, len, count, NULL, buf));
}

/* ------------------------------------------------------------------------ */
/* e) spinning ping-pong, no yields, by map size                            */
/* ------------------------------------------------------------------------ */

xseg_t g_x;                       /* the server's, between commands */
uint32_t g_spin_seq;              /* restarts with every map size    */

/* `count` round trips of the counter through the last 4 bytes of each
 * side's segment.  Returns the values that were neither old nor new. */
uint64_t spin_loop(xseg_t *x, uint32_t count, uint64_t *samples)
{
    volatile uint32_t *out = (volatile uint32_t *)(x->remote + x->size - 4);
    const volatile uint32_t *in = (const volatile uint32_t *)(x->local + x->size - 4);
    uint64_t bad = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t s = ++g_spin_seq;
        if (!opt.server) {
            uint64_t a = now_ns();
            *out = s;
            bad += spin_until(in, s, "spinning ping-pong: the echo");
            uint64_t b = now_ns();
            if (samples)
                samples[i] = b - a;
        } else {
            bad += spin_until(in, s, "spinning ping-pong: the counter");
            *out = s;
        }
    }
    return bad;
}

static uint64_t spin_remote_loop(xseg_t *x, uint32_t count, uint64_t *samples)
{
    ctl_send(CMD(CMD_SPIN_LOOP, count));
    uint64_t bad = spin_loop(x, count, samples);
    return bad + ctl_recv();
}

void section_spin(void)
{
    phase_begin(PH_SPIN);
    uint64_t *samples = xalloc(sizeof(uint64_t) * (size_t)opt.pp_max);
    for (int k = 0; k < SPIN_SIZES; k++) {
        xseg_t x;
        ctl_send(CMD(CMD_SPIN_SETUP, (uint64_t)k));
        g_spin_seq = 0;
        xseg_open(&x, opt.segid + SPIN_SEGID + 2u * (uint32_t)k, spin_sizes[k]);
        uint64_t t0 = now_ns();
        uint64_t bad = spin_remote_loop(&x, (uint32_t)opt.pp_warm, NULL);
        uint64_t warm_ns = now_ns() - t0;
        uint32_t n = pick_iters(warm_ns, opt.pp_warm, opt.pp_min, opt.pp_max, opt.pp_budget);
        bad += spin_remote_loop(&x, n, samples);
        R.spin_size[k] = spin_sizes[k];
        make_stats(&R.spin[k], samples, n, (uint32_t)bad, 2.0);
        R.spin_n = k + 1;
        ctl_send(CMD(CMD_SPIN_END, 0));
        xseg_close(&x);
    }
    munmap(samples, sizeof(uint64_t) * (size_t)opt.pp_max);
    phase_end(PH_SPIN);
}

