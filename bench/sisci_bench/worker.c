#include "sisci_bench.h"

/* ------------------------------------------------------------------------ */
/* Worker context, errors and the control channel between A and B           */
/* ------------------------------------------------------------------------ */

void worker_fail(ctx_t *c, const char *fmt, ...)
{
    char buf[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    snprintf(R->err[c->phase][c->role], sizeof R->err[0][0], "%s", buf);
    fprintf(stderr, "sisci_bench: [%s, worker %c] %s\n",
            phase_names[c->phase], c->role ? 'B' : 'A', buf);
    _exit(3);
}

void ctl_send(ctx_t *c, uint64_t v)
{
    const char *p = (const char *)&v;
    size_t left = sizeof v;
    while (left) {
        ssize_t n = write(c->ctl, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            worker_fail(c, "control channel: write: %s", strerror(errno));
        p += n;
        left -= (size_t)n;
    }
}

uint64_t ctl_recv(ctx_t *c)
{
    uint64_t v;
    char *p = (char *)&v;
    size_t left = sizeof v;
    while (left) {
        ssize_t n = read(c->ctl, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            worker_fail(c, "control channel: the other worker exited");
        if (n < 0)
            worker_fail(c, "control channel: read: %s", strerror(errno));
        p += n;
        left -= (size_t)n;
    }
    return v;
}

void ctl_barrier(ctx_t *c)
{
    ctl_send(c, 0xba77);
    if (ctl_recv(c) != 0xba77)
        worker_fail(c, "control channel out of step");
}

void *xalloc(ctx_t *c, size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        worker_fail(c, "mmap(%zu): %s", size, strerror(errno));
    return p;
}

void sci_open_worker(ctx_t *c)
{
    sci_error_t e;
    SCIOpen(&c->sd, 0, &e);
    sci_check(c, "SCIOpen", e);
    SCIGetLocalNodeId(0, &c->node, 0, &e);
    sci_check(c, "SCIGetLocalNodeId", e);
    if (c->role == 0)
        R->node_id = (int)c->node;
}

void sci_close_worker(ctx_t *c)
{
    sci_error_t e;
    SCIClose(c->sd, 0, &e);
    sci_check(c, "SCIClose", e);
}

/* Unmap, make unavailable and remove a local segment. */
void sci_remove_local(ctx_t *c, sci_local_segment_t seg, sci_map_t map)
{
    sci_error_t e;
    SCIUnmapSegment(map, 0, &e);
    sci_check(c, "SCIUnmapSegment (local)", e);
    SCISetSegmentUnavailable(seg, 0, 0, &e);
    sci_check(c, "SCISetSegmentUnavailable", e);
    SCIRemoveSegment(seg, 0, &e);
    sci_check(c, "SCIRemoveSegment", e);
}

/* The number of timed iterations: A picks it from its warm-up (pick_iters),
 * B is told. */
uint32_t agree_iters(ctx_t *c, uint64_t warm_ns, int warm, int lo, int hi, double budget)
{
    uint32_t n;
    if (c->role == 0) {
        n = pick_iters(warm_ns, warm, lo, hi, budget);
        ctl_send(c, n);
    } else {
        n = (uint32_t)ctl_recv(c);
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                               */
/* ------------------------------------------------------------------------ */

/* rtt_ns: n round-trip times; stores RTT/2 statistics in microseconds. */
void make_rtt_stats(lat_t *L, uint64_t *rtt_ns, uint32_t n, uint32_t bad)
{
    make_stats(L, rtt_ns, n, bad, 2.0);
    L->sleeps = -1;
}

