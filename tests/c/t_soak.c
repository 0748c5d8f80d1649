/*
 * t_soak.c - one client of the soak run (scripts/soak.sh, vsci-soak).
 *
 *   t_soak SLOT PEER_NODE SLOTS SECONDS SEED
 *
 * Does random SISCI work against its own node and node PEER_NODE until
 * SECONDS have passed (or it is killed, which the soak driver does at
 * random): creates, exports and removes segments, connects to and maps the
 * segments of other clients (slots 0..SLOTS-1 on either node), stores into
 * them and flushes, triggers their interrupts and data interrupts, moves
 * data to them with DMA, and leaves whatever it holds for its node to clean
 * up when it exits or dies.  Its peers die under it too, so every call may
 * fail with a documented error: the client counts errors and goes on. What
 * it must never do is hang past its deadline or crash; it ends with
 * "SOAK CLIENT DONE ops=N errors=M" and status 0.
 *
 * Names: client SLOT's segments are 0x50000000 | SLOT << 8 | k (k < 4),
 * its interrupt is number 1000 + SLOT, its data interrupt 2000 + SLOT.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sisci_api.h"

#define NO_FLAGS 0
#define NSEG 4
#define NCONN 4
#define SEG_ID(slot, k) (0x50000000u | ((unsigned)(slot) << 8) | (unsigned)(k))

static unsigned long ops, errors;
static unsigned int rnd_state;

static unsigned int rnd(unsigned int n)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (rnd_state >> 8) % n;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Count one call; true when it succeeded. */
static int ok(sci_error_t err)
{
    ops++;
    if (err != SCI_ERR_OK) {
        errors++;
        return 0;
    }
    return 1;
}

struct own {
    int used;
    sci_local_segment_t seg;
    sci_map_t map;
    volatile unsigned char *addr;
    size_t size;
};

struct conn {
    int used;
    sci_remote_segment_t rs;
    int mapped;
    sci_map_t map;
    volatile unsigned char *addr;
    size_t size;
};

static sci_desc_t sd;
static struct own own[NSEG];
static struct conn conn[NCONN];
static unsigned int self_node, peer_node, slot, slots;

static void seg_create(void)
{
    unsigned int k = rnd(NSEG);
    struct own *o = &own[k];
    sci_error_t err;
    if (o->used)
        return;
    o->size = (size_t)4096 << rnd(9); /* 4 KiB .. 1 MiB */
    SCICreateSegment(sd, &o->seg, SEG_ID(slot, k), o->size, NULL, NULL, NO_FLAGS, &err);
    if (!ok(err))
        return;
    o->used = 1;
    o->addr = SCIMapLocalSegment(o->seg, &o->map, 0, o->size, NULL, NO_FLAGS, &err);
    if (!ok(err))
        o->addr = NULL;
    if (o->addr)
        memset((void *)o->addr, (int)rnd(256), o->size);
    SCIPrepareSegment(o->seg, 0, NO_FLAGS, &err);
    ok(err);
    SCISetSegmentAvailable(o->seg, 0, NO_FLAGS, &err);
    ok(err);
}

static void seg_remove(void)
{
    struct own *o = &own[rnd(NSEG)];
    sci_error_t err;
    if (!o->used)
        return;
    if (o->addr) {
        SCIUnmapSegment(o->map, NO_FLAGS, &err);
        ok(err);
        o->addr = NULL;
    }
    SCISetSegmentUnavailable(o->seg, 0, NO_FLAGS, &err);
    ok(err);
    SCIRemoveSegment(o->seg, NO_FLAGS, &err);
    /* Busy while others are connected: try again later. */
    if (ok(err) || err != SCI_ERR_BUSY)
        o->used = 0;
}

static void conn_open(void)
{
    struct conn *c = &conn[rnd(NCONN)];
    sci_error_t err;
    unsigned int node = rnd(2) ? peer_node : self_node;
    if (c->used)
        return;
    SCIConnectSegment(sd, &c->rs, node, SEG_ID(rnd(slots), rnd(NSEG)), 0, NULL, NULL, 200,
                      NO_FLAGS, &err);
    if (!ok(err))
        return;
    c->used = 1;
    c->size = SCIGetRemoteSegmentSize(c->rs);
    c->addr = SCIMapRemoteSegment(c->rs, &c->map, 0, c->size, NULL, NO_FLAGS, &err);
    c->mapped = ok(err);
}

static void conn_close(void)
{
    struct conn *c = &conn[rnd(NCONN)];
    sci_error_t err;
    if (!c->used)
        return;
    if (c->mapped) {
        SCIUnmapSegment(c->map, NO_FLAGS, &err);
        ok(err);
        c->mapped = 0;
    }
    SCIDisconnectSegment(c->rs, NO_FLAGS, &err);
    ok(err);
    c->used = 0;
}

static void conn_store(void)
{
    struct conn *c = &conn[rnd(NCONN)];
    sci_error_t err;
    if (!c->used || !c->mapped || c->size == 0)
        return;
    /* A few words here and there, as a program would; a peer that died
     * leaves the shadow in place, so these stores never fault. */
    for (int i = 0; i < 8; i++)
        c->addr[rnd((unsigned int)c->size)] = (unsigned char)rnd(256);
    if (rnd(2)) {
        SCIFlush(NULL, NO_FLAGS);
        ops++;
    } else {
        sci_sequence_t seq;
        SCICreateMapSequence(c->map, &seq, NO_FLAGS, &err);
        if (ok(err)) {
            SCIStartSequence(seq, NO_FLAGS, &err);
            ok(err);
            SCIStoreBarrier(seq, NO_FLAGS);
            SCICheckSequence(seq, NO_FLAGS, &err);
            ok(err);
            SCIRemoveSequence(seq, NO_FLAGS, &err);
            ok(err);
        }
    }
    volatile unsigned char x = c->addr[rnd((unsigned int)c->size)];
    (void)x;
}

static void conn_memcpy(void)
{
    struct conn *c = &conn[rnd(NCONN)];
    unsigned char buf[4096];
    sci_error_t err;
    if (!c->used || !c->mapped || c->size < sizeof buf)
        return;
    memset(buf, (int)rnd(256), sizeof buf);
    size_t off = (size_t)rnd((unsigned int)(c->size / sizeof buf)) * sizeof buf;
    SCIMemCpy(NULL, buf, c->map, off, sizeof buf, rnd(2) ? SCI_FLAG_BLOCK_READ : NO_FLAGS, &err);
    ok(err);
}

static void conn_dma(void)
{
    struct conn *c = &conn[rnd(NCONN)];
    struct own *o = &own[rnd(NSEG)];
    sci_dma_queue_t q;
    sci_error_t err;
    if (!c->used || !o->used)
        return;
    size_t n = c->size < o->size ? c->size : o->size;
    if (n == 0)
        return;
    SCICreateDMAQueue(sd, &q, 0, 4, NO_FLAGS, &err);
    if (!ok(err))
        return;
    SCIStartDmaTransfer(q, o->seg, c->rs, 0, n, 0, NULL, NULL, NO_FLAGS, &err);
    if (ok(err)) {
        SCIWaitForDMAQueue(q, 2000, NO_FLAGS, &err);
        ok(err);
    }
    SCIRemoveDMAQueue(q, NO_FLAGS, &err);
    /* A transfer still running (its peer died slowly): abort, then remove. */
    if (!ok(err)) {
        SCIAbortDMAQueue(q, NO_FLAGS, &err);
        SCIWaitForDMAQueue(q, 2000, NO_FLAGS, &err);
        SCIRemoveDMAQueue(q, NO_FLAGS, &err);
        ok(err);
    }
}

static void trigger(void)
{
    sci_error_t err;
    unsigned int node = rnd(2) ? peer_node : self_node;
    unsigned int other = rnd(slots);
    if (rnd(2)) {
        sci_remote_interrupt_t ri;
        SCIConnectInterrupt(sd, &ri, node, 0, 1000 + other, 200, NO_FLAGS, &err);
        if (!ok(err))
            return;
        for (int i = 0; i < 4; i++) {
            SCITriggerInterrupt(ri, NO_FLAGS, &err);
            ok(err);
        }
        SCIDisconnectInterrupt(ri, NO_FLAGS, &err);
        ok(err);
    } else {
        sci_remote_data_interrupt_t rdi;
        char msg[64];
        SCIConnectDataInterrupt(sd, &rdi, node, 0, 2000 + other, 200, NO_FLAGS, &err);
        if (!ok(err))
            return;
        int n = snprintf(msg, sizeof msg, "from %u/%u", self_node, slot);
        SCITriggerDataInterrupt(rdi, msg, (unsigned int)n, NO_FLAGS, &err);
        ok(err);
        SCIDisconnectDataInterrupt(rdi, NO_FLAGS, &err);
        ok(err);
    }
}

static sci_local_interrupt_t li;
static sci_local_data_interrupt_t ldi;
static int have_li, have_ldi;

/* Take what arrived at our own interrupts, without blocking long. */
static void drain(void)
{
    sci_error_t err;
    if (have_li) {
        SCIWaitForInterrupt(li, 0, NO_FLAGS, &err);
        ops++;
    }
    if (have_ldi) {
        char buf[SCI_MAX_DATA_INTERRUPT_SIZE];
        unsigned int len = sizeof buf;
        SCIWaitForDataInterrupt(ldi, buf, &len, 0, NO_FLAGS, &err);
        ops++;
    }
}

int main(int argc, char **argv)
{
    sci_error_t err;
    if (argc != 6) {
        fprintf(stderr, "usage: t_soak SLOT PEER_NODE SLOTS SECONDS SEED\n");
        return 2;
    }
    slot = (unsigned int)atoi(argv[1]);
    peer_node = (unsigned int)atoi(argv[2]);
    slots = (unsigned int)atoi(argv[3]);
    double seconds = atof(argv[4]);
    rnd_state = (unsigned int)strtoul(argv[5], NULL, 0) ^ (unsigned int)getpid();
    if (slots == 0 || slot >= slots) {
        fprintf(stderr, "t_soak: SLOT must be below SLOTS\n");
        return 2;
    }

    SCIInitialize(NO_FLAGS, &err);
    if (err != SCI_ERR_OK) {
        fprintf(stderr, "t_soak: SCIInitialize: 0x%x\n", (unsigned)err);
        return 1;
    }
    SCIOpen(&sd, NO_FLAGS, &err);
    if (err != SCI_ERR_OK) {
        fprintf(stderr, "t_soak: SCIOpen: 0x%x\n", (unsigned)err);
        return 1;
    }
    SCIGetLocalNodeId(0, &self_node, NO_FLAGS, &err);
    unsigned int no = 1000 + slot;
    SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
    have_li = ok(err);
    no = 2000 + slot;
    SCICreateDataInterrupt(sd, &ldi, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
    have_ldi = ok(err);

    double end = now_s() + seconds;
    while (now_s() < end) {
        switch (rnd(10)) {
        case 0: seg_create(); break;
        case 1: seg_remove(); break;
        case 2: conn_open(); break;
        case 3: conn_close(); break;
        case 4: case 5: conn_store(); break;
        case 6: conn_memcpy(); break;
        case 7: conn_dma(); break;
        case 8: trigger(); break;
        default: drain(); break;
        }
    }
    /* Half the time leave everything to the node, as a crashing program
     * would; otherwise close the descriptor, which releases it all. */
    if (rnd(2)) {
        SCIClose(sd, NO_FLAGS, &err);
        SCITerminate();
    }
    printf("SOAK CLIENT DONE ops=%lu errors=%lu\n", ops, errors);
    return 0;
}
