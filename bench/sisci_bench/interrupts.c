#include "sisci_bench.h"


/* ------------------------------------------------------------------------ */
/* c, d) interrupts and their eventfd peers                                 */
/* ------------------------------------------------------------------------ */

enum { K_INTR, K_DINTR, K_EVENTFD, K_EVENTFD_SHM };

typedef struct {
    sci_local_interrupt_t       li;
    sci_remote_interrupt_t      ri;
    sci_local_data_interrupt_t  dli;
    sci_remote_data_interrupt_t dri;
    unsigned char              *shm_out, *shm_in;   /* eventfd+shm peer */
} intr_t;

static void efd_signal(ctx_t *c, int fd)
{
    uint64_t one = 1;
    while (write(fd, &one, 8) != 8)
        if (errno != EINTR)
            worker_fail(c, "eventfd write: %s", strerror(errno));
}

static void efd_wait(ctx_t *c, int fd)
{
    uint64_t v;
    while (read(fd, &v, 8) != 8)
        if (errno != EINTR)
            worker_fail(c, "eventfd read: %s", strerror(errno));
}

/* Send one "interrupt" of kind k to the peer, carrying seq (data kinds). */
static inline void in_send(ctx_t *c, intr_t *I, int k, unsigned char *buf,
                           unsigned len, uint32_t seq)
{
    sci_error_t e;
    switch (k) {
    case K_INTR:
        SCITriggerInterrupt(I->ri, 0, &e);
        sci_check(c, "SCITriggerInterrupt", e);
        break;
    case K_DINTR:
        memcpy(buf, &seq, 4);
        SCITriggerDataInterrupt(I->dri, buf, len, 0, &e);
        sci_check(c, "SCITriggerDataInterrupt", e);
        break;
    case K_EVENTFD:
        efd_signal(c, c->efd[c->role]);
        break;
    case K_EVENTFD_SHM:
        memcpy(buf, &seq, 4);
        memcpy(I->shm_out, buf, len);
        efd_signal(c, c->efd[c->role]);
        break;
    }
}

/* Wait for one from the peer; returns 1 if the payload is wrong. */
static inline int in_wait(ctx_t *c, intr_t *I, int k, unsigned char *buf,
                          unsigned len, uint32_t seq)
{
    sci_error_t e;
    uint32_t got;
    switch (k) {
    case K_INTR:
        SCIWaitForInterrupt(I->li, WAIT_TIMEOUT_MS, 0, &e);
        sci_check(c, "SCIWaitForInterrupt", e);
        return 0;
    case K_DINTR: {
        unsigned int rl = DI_MAX;
        SCIWaitForDataInterrupt(I->dli, buf, &rl, WAIT_TIMEOUT_MS, 0, &e);
        sci_check(c, "SCIWaitForDataInterrupt", e);
        memcpy(&got, buf, 4);
        return rl != len || got != seq;
    }
    case K_EVENTFD:
        efd_wait(c, c->efd[1 - c->role]);
        return 0;
    case K_EVENTFD_SHM:
        efd_wait(c, c->efd[1 - c->role]);
        memcpy(buf, I->shm_in, len);
        memcpy(&got, buf, 4);
        return got != seq;
    }
    return 0;
}

static uint32_t in_seq;

static void in_measure(ctx_t *c, intr_t *I, int k, unsigned len, lat_t *out,
                       uint64_t *samples, unsigned char *buf)
{
    uint32_t bad = 0;
    ctl_barrier(c);
    uint64_t t0 = now_ns();
    for (int i = 0; i < opt.in_warm; i++) {
        uint32_t s = ++in_seq;
        if (c->role == 0) {
            in_send(c, I, k, buf, len, s);
            bad += in_wait(c, I, k, buf, len, s);
        } else {
            bad += in_wait(c, I, k, buf, len, s);
            in_send(c, I, k, buf, len, s);
        }
    }
    uint64_t warm_ns = now_ns() - t0;
    uint32_t n = agree_iters(c, warm_ns, opt.in_warm, opt.in_min, opt.in_max, opt.in_budget);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_THREAD, &ru0);
    for (uint32_t i = 0; i < n + 16; i++) {
        uint32_t s = ++in_seq;
        if (c->role == 0) {
            uint64_t a = now_ns();
            in_send(c, I, k, buf, len, s);
            bad += in_wait(c, I, k, buf, len, s);
            uint64_t b = now_ns();
            if (i >= 16)
                samples[i - 16] = b - a;
        } else {
            bad += in_wait(c, I, k, buf, len, s);
            in_send(c, I, k, buf, len, s);
        }
    }
    getrusage(RUSAGE_THREAD, &ru1);
    if (c->role == 1) {
        ctl_send(c, bad);
    } else {
        bad += (uint32_t)ctl_recv(c);
        make_rtt_stats(out, samples, n, bad);
        out->sleeps = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw) / (n + 16);
    }
}

/* One wait mode: plain interrupt, then data interrupts of 4 B and 1 KiB. */
void phase_intr(ctx_t *c)
{
    sci_error_t e;
    intr_t I;
    memset(&I, 0, sizeof I);
    sci_open_worker(c);

    unsigned int no = 0, dno = 0;
    SCICreateInterrupt(c->sd, &I.li, 0, &no, NULL, NULL, 0, &e);
    sci_check(c, "SCICreateInterrupt", e);
    SCICreateDataInterrupt(c->sd, &I.dli, 0, &dno, NULL, NULL, 0, &e);
    sci_check(c, "SCICreateDataInterrupt", e);
    ctl_send(c, ((uint64_t)no << 32) | dno);
    uint64_t peer = ctl_recv(c);
    unsigned int pno = (unsigned)(peer >> 32), pdno = (unsigned)(peer & 0xffffffffu);
    if (pno == no || pdno == dno)
        worker_fail(c, "both workers got the same interrupt number (%u/%u, data %u/%u)",
                    no, pno, dno, pdno);
    SCIConnectInterrupt(c->sd, &I.ri, c->node, 0, pno, CONNECT_TIMEOUT_MS, 0, &e);
    sci_check(c, "SCIConnectInterrupt", e);
    SCIConnectDataInterrupt(c->sd, &I.dri, c->node, 0, pdno, CONNECT_TIMEOUT_MS, 0, &e);
    sci_check(c, "SCIConnectDataInterrupt", e);

    unsigned char *buf = xalloc(c, DI_MAX);
    memset(buf, 0x3c, DI_MAX);
    uint64_t *samples = xalloc(c, sizeof(uint64_t) * ((size_t)opt.in_max + 16));

    in_measure(c, &I, K_INTR, 0, &R->intr[c->mode], samples, buf);
    for (int d = 0; d < 2; d++)
        in_measure(c, &I, K_DINTR, di_sizes[d], &R->dint[d][c->mode], samples, buf);

    ctl_barrier(c);
    SCIDisconnectInterrupt(I.ri, 0, &e);
    sci_check(c, "SCIDisconnectInterrupt", e);
    SCIDisconnectDataInterrupt(I.dri, 0, &e);
    sci_check(c, "SCIDisconnectDataInterrupt", e);
    ctl_barrier(c);
    SCIRemoveInterrupt(I.li, 0, &e);
    sci_check(c, "SCIRemoveInterrupt", e);
    SCIRemoveDataInterrupt(I.dli, 0, &e);
    sci_check(c, "SCIRemoveDataInterrupt", e);
    sci_close_worker(c);
}

/* The kernel peers: blocking eventfd ping-pong, without and with a payload
 * copied through a memfd mapping.  No SISCI here. */
void phase_peer(ctx_t *c)
{
    intr_t I;
    memset(&I, 0, sizeof I);
    unsigned char *shm = mmap(NULL, 2 * PP_SEG, PROT_READ | PROT_WRITE, MAP_SHARED,
                              c->memfd, 0);
    if (shm == MAP_FAILED)
        worker_fail(c, "mmap(memfd): %s", strerror(errno));
    I.shm_out = shm + (size_t)(1 - c->role) * PP_SEG;
    I.shm_in = shm + (size_t)c->role * PP_SEG;
    unsigned char *buf = xalloc(c, DI_MAX);
    memset(buf, 0x3c, DI_MAX);
    uint64_t *samples = xalloc(c, sizeof(uint64_t) * ((size_t)opt.in_max + 16));

    in_measure(c, &I, K_EVENTFD, 0, &R->intr_peer, samples, buf);
    for (int d = 0; d < 2; d++)
        in_measure(c, &I, K_EVENTFD_SHM, di_sizes[d], &R->dint_peer[d], samples, buf);
}

/* ------------------------------------------------------------------------ */
/* Coordinator                                                              */
/* ------------------------------------------------------------------------ */
