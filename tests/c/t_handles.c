/*
 * t_handles.c - docs/api.md "Handles": a NULL, stale, wrong-kind, garbage or
 * other-process handle gives SCI_ERR_ILLEGAL_PARAMETER on every call that
 * takes it, and never crashes (but the first release call of a handle that
 * SCIClose released succeeds: docs/api.md "Conformance").  Getters and the error-less calls
 * (SCIFlush, SCIStoreBarrier) must simply not crash.
 */
#include <sys/mman.h>

#include "common/proc.h"

enum kind { K_DESC, K_LSEG, K_RSEG, K_MAP, K_SEQ, K_LINT, K_RINT, K_LDINT, K_RDINT, K_COUNT };
static const char *kind_names[K_COUNT] = {
    "descriptor", "local segment", "remote segment", "map", "sequence",
    "local interrupt", "remote interrupt", "local data interrupt", "remote data interrupt",
};

/* A live set of one handle of every kind, for valid arguments besides the
 * one under test. */
struct objs {
    sci_desc_t sd;
    unsigned int node;
    unsigned int segid;          /* an available segment on this node */
    unsigned int intno, dintno;  /* existing interrupts */
    void *h[K_COUNT];
    volatile char *addr;         /* address of the map */
};

#define SEG_SIZE 8192

static void make_objs(struct objs *o, unsigned int segid)
{
    sci_error_t err;
    memset(o, 0, sizeof *o);
    o->sd = open_sd(&o->node);
    o->segid = segid;
    sci_local_segment_t seg;
    sci_remote_segment_t rs;
    sci_map_t map;
    sci_sequence_t seq;
    sci_local_interrupt_t li;
    sci_remote_interrupt_t ri;
    sci_local_data_interrupt_t ldi;
    sci_remote_data_interrupt_t rdi;
    EXPECT(SCI_ERR_OK, SCICreateSegment(o->sd, &seg, segid, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(o->sd, &rs, o->node, segid, 0, NULL, NULL,
                                         SCI_INFINITE_TIMEOUT, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, o->addr = (volatile char *)SCIMapRemoteSegment(rs, &map, 0, SEG_SIZE,
                                                                      NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(map, &seq, NO_FLAGS, &err));
    o->intno = 5;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(o->sd, &li, 0, &o->intno, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(o->sd, &ri, o->node, 0, o->intno, 0, NO_FLAGS, &err));
    o->dintno = 5;
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(o->sd, &ldi, 0, &o->dintno, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(o->sd, &rdi, o->node, 0, o->dintno, 0, NO_FLAGS, &err));
    o->h[K_DESC] = o->sd;
    o->h[K_LSEG] = seg;
    o->h[K_RSEG] = rs;
    o->h[K_MAP] = map;
    o->h[K_SEQ] = seq;
    o->h[K_LINT] = li;
    o->h[K_RINT] = ri;
    o->h[K_LDINT] = ldi;
    o->h[K_RDINT] = rdi;
}

/* Check that every object still works, then release them in order. */
static void check_and_free_objs(struct objs *o)
{
    sci_error_t err;
    CHECK_EQ(SCIGetLocalSegmentSize(o->h[K_LSEG]), SEG_SIZE);
    CHECK_EQ(SCIGetLocalSegmentId(o->h[K_LSEG]), o->segid);
    CHECK_EQ(SCIGetRemoteSegmentSize(o->h[K_RSEG]), SEG_SIZE);
    CHECK_EQ(SCIGetRemoteSegmentId(o->h[K_RSEG]), o->segid);
    CHECK_EQ(SCIGetRemoteSegmentNodeId(o->h[K_RSEG]), o->node);
    o->addr[100] = 42;
    CHECK_EQ(o->addr[100], 42);
    /* The interrupts still deliver. */
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(o->h[K_RINT], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(o->h[K_LINT], SCI_INFINITE_TIMEOUT, NO_FLAGS, &err));
    char msg[4] = "abc", got[16];
    unsigned int len = sizeof got;
    EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(o->h[K_RDINT], msg, 4, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(o->h[K_LDINT], got, &len, SCI_INFINITE_TIMEOUT,
                                               NO_FLAGS, &err));
    CHECK_EQ(len, 4);
    CHECK(memcmp(got, "abc", 4) == 0);
    sci_sequence_status_t st;
    EXPECT(SCI_ERR_OK, st = SCIStartSequence(o->h[K_SEQ], NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);

    EXPECT(SCI_ERR_OK, SCIRemoveSequence(o->h[K_SEQ], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(o->h[K_MAP], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(o->h[K_RSEG], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(o->h[K_LSEG], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(o->h[K_RINT], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(o->h[K_LINT], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(o->h[K_RDINT], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(o->h[K_LDINT], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIClose(o->sd, NO_FLAGS, &err));
}

#define ILLEGAL(call) do {                                                     \
        err = ERR_SENTINEL;                                                    \
        call;                                                                  \
        if (err != SCI_ERR_ILLEGAL_PARAMETER)                                  \
            FAILF("%s with %s handle %p as %s\n    expected %s, got %s", #call, \
                  what, h, kind_names[k], err_name(SCI_ERR_ILLEGAL_PARAMETER), \
                  err_name(err));                                              \
    } while (0)

/* What the release calls in abuse_as() expect: SCI_ERR_ILLEGAL_PARAMETER,
 * except for handles SCIClose released while the program still held them,
 * whose first release succeeds (docs/api.md "Conformance"). */
static sci_error_t release_want = SCI_ERR_ILLEGAL_PARAMETER;

#define RELEASE(call) do {                                                     \
        err = ERR_SENTINEL;                                                    \
        call;                                                                  \
        if (err != release_want)                                               \
            FAILF("%s with %s handle %p as %s\n    expected %s, got %s", #call, \
                  what, h, kind_names[k], err_name(release_want),              \
                  err_name(err));                                              \
    } while (0)

/*
 * Call every function that takes a handle of kind `k`, passing `h` as that
 * handle and valid values (from `o`) everywhere else.  Each must fail with
 * SCI_ERR_ILLEGAL_PARAMETER.  `what` describes h for messages.
 */
static void abuse_as(struct objs *o, enum kind k, void *h, const char *what)
{
    sci_error_t err;
    char buf[64] = { 0 };
    unsigned int len = sizeof buf, no, node, adapter;
    sci_local_segment_t seg;
    sci_remote_segment_t rs;
    sci_map_t map;
    sci_sequence_t seq;
    sci_local_interrupt_t li;
    sci_remote_interrupt_t ri;
    sci_local_data_interrupt_t ldi;
    sci_remote_data_interrupt_t rdi;
    sci_error_t status;
    int r;
    switch (k) {
    case K_DESC: {
        sci_desc_t sd = h;
        ILLEGAL(SCICreateSegment(sd, &seg, 0x7001, 4096, NULL, NULL, NO_FLAGS, &err));
        ILLEGAL(SCIConnectSegment(sd, &rs, o->node, o->segid, 0, NULL, NULL, 0, NO_FLAGS, &err));
        no = 40;
        ILLEGAL(SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, NO_FLAGS, &err));
        ILLEGAL(SCIConnectInterrupt(sd, &ri, o->node, 0, o->intno, 0, NO_FLAGS, &err));
        no = 40;
        ILLEGAL(SCICreateDataInterrupt(sd, &ldi, 0, &no, NULL, NULL, NO_FLAGS, &err));
        ILLEGAL(SCIConnectDataInterrupt(sd, &rdi, o->node, 0, o->dintno, 0, NO_FLAGS, &err));
        ILLEGAL(r = SCIProbeNode(sd, 0, o->node, NO_FLAGS, &err));
        CHECK_EQ(r, 0);
        RELEASE(SCIClose(sd, NO_FLAGS, &err));
        break;
    }
    case K_LSEG: {
        sci_local_segment_t s = h;
        ILLEGAL(SCIPrepareSegment(s, 0, NO_FLAGS, &err));
        ILLEGAL(SCISetSegmentAvailable(s, 0, NO_FLAGS, &err));
        ILLEGAL(SCISetSegmentUnavailable(s, 0, NO_FLAGS, &err));
        ILLEGAL(SCIWaitForLocalSegmentEvent(s, &node, &adapter, 0, NO_FLAGS, &err));
        ILLEGAL(SCIMapLocalSegment(s, &map, 0, 4096, NULL, NO_FLAGS, &err));
        RELEASE(SCIRemoveSegment(s, NO_FLAGS, &err));
        (void)SCIGetLocalSegmentSize(s);
        (void)SCIGetLocalSegmentId(s);
        break;
    }
    case K_RSEG: {
        sci_remote_segment_t s = h;
        ILLEGAL(SCIWaitForRemoteSegmentEvent(s, &status, 0, NO_FLAGS, &err));
        ILLEGAL(SCIMapRemoteSegment(s, &map, 0, 4096, NULL, NO_FLAGS, &err));
        RELEASE(SCIDisconnectSegment(s, NO_FLAGS, &err));
        (void)SCIGetRemoteSegmentSize(s);
        (void)SCIGetRemoteSegmentId(s);
        (void)SCIGetRemoteSegmentNodeId(s);
        break;
    }
    case K_MAP: {
        sci_map_t m = h;
        ILLEGAL(SCIMemCpy(NULL, buf, m, 0, 16, NO_FLAGS, &err));
        ILLEGAL(SCIMemCpy(NULL, buf, m, 0, 16, SCI_FLAG_BLOCK_READ, &err));
        ILLEGAL(SCICreateMapSequence(m, &seq, NO_FLAGS, &err));
        RELEASE(SCIUnmapSegment(m, NO_FLAGS, &err));
        break;
    }
    case K_SEQ: {
        sci_sequence_t s = h;
        sci_sequence_status_t st;
        if (s != NULL)   /* SCIMemCpy takes a NULL sequence */
            ILLEGAL(SCIMemCpy(s, buf, o->h[K_MAP], 0, 16, NO_FLAGS, &err));
        ILLEGAL(st = SCIStartSequence(s, NO_FLAGS, &err));
        ILLEGAL(st = SCICheckSequence(s, NO_FLAGS, &err));
        (void)st;
        RELEASE(SCIRemoveSequence(s, NO_FLAGS, &err));
        /* No error argument: they must just not crash. */
        SCIFlush(s, NO_FLAGS);
        SCIStoreBarrier(s, NO_FLAGS);
        break;
    }
    case K_LINT: {
        sci_local_interrupt_t i = h;
        ILLEGAL(SCIWaitForInterrupt(i, 0, NO_FLAGS, &err));
        RELEASE(SCIRemoveInterrupt(i, NO_FLAGS, &err));
        break;
    }
    case K_RINT: {
        sci_remote_interrupt_t i = h;
        ILLEGAL(SCITriggerInterrupt(i, NO_FLAGS, &err));
        RELEASE(SCIDisconnectInterrupt(i, NO_FLAGS, &err));
        break;
    }
    case K_LDINT: {
        sci_local_data_interrupt_t i = h;
        len = sizeof buf;
        ILLEGAL(SCIWaitForDataInterrupt(i, buf, &len, 0, NO_FLAGS, &err));
        RELEASE(SCIRemoveDataInterrupt(i, NO_FLAGS, &err));
        break;
    }
    case K_RDINT: {
        sci_remote_data_interrupt_t i = h;
        ILLEGAL(SCITriggerDataInterrupt(i, buf, 8, NO_FLAGS, &err));
        RELEASE(SCIDisconnectDataInterrupt(i, NO_FLAGS, &err));
        break;
    }
    default:
        break;
    }
}

/* NULL for every kind of handle. */
static void null_handles(struct peer *p)
{
    (void)p;
    struct objs o;
    make_objs(&o, 0x2001);
    for (int k = 0; k < K_COUNT; k++)
        abuse_as(&o, (enum kind)k, NULL, "NULL");
    /* NULL sequence is allowed where docs/api.md says so. */
    sci_error_t err;
    char buf[16] = "0123456789abcde";
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, buf, o.h[K_MAP], 0, 16, NO_FLAGS, &err));
    SCIFlush(NULL, NO_FLAGS);
    SCIStoreBarrier(NULL, NO_FLAGS);
    check_and_free_objs(&o);
}

/* Handles of one kind passed where another kind is expected. */
static void wrong_kind_handles(struct peer *p)
{
    (void)p;
    struct objs o;
    make_objs(&o, 0x2002);
    for (int have = 0; have < K_COUNT; have++) {
        char what[64];
        snprintf(what, sizeof what, "a %s", kind_names[have]);
        for (int as = 0; as < K_COUNT; as++)
            if (as != have)
                abuse_as(&o, (enum kind)as, o.h[have], what);
    }
    /* Nothing was removed or closed by the abuse. */
    check_and_free_objs(&o);
}

/* Handles whose object was removed / closed. */
static void stale_handles(struct peer *p)
{
    (void)p;
    struct objs o, live;
    make_objs(&o, 0x2003);
    void *h[K_COUNT];
    memcpy(h, o.h, sizeof h);
    sci_error_t err;
    /* Release everything but the descriptor, then check each stale handle. */
    EXPECT(SCI_ERR_OK, SCIRemoveSequence(h[K_SEQ], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(h[K_MAP], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(h[K_RSEG], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(h[K_LSEG], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(h[K_RINT], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(h[K_LINT], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(h[K_RDINT], NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(h[K_LDINT], NO_FLAGS, &err));

    /* A second, live set (new objects may reuse memory or token values of
     * the old ones; the stale handles must still be refused... unless the
     * library hands out the same token again, which it must not do while
     * the old one could still be in use). */
    make_objs(&live, 0x2004);
    for (int k = K_LSEG; k < K_COUNT; k++) {
        for (int j = 0; j < K_COUNT; j++)
            CHECK_MSG(h[k] != live.h[j], "stale %s handle %p was handed out again",
                      kind_names[k], h[k]);
        abuse_as(&live, (enum kind)k, h[k], "a stale");
    }
    check_and_free_objs(&live);

    /* Now the descriptor. */
    EXPECT(SCI_ERR_OK, SCIClose(o.sd, NO_FLAGS, &err));
    struct objs tmp;
    make_objs(&tmp, 0x2005);
    abuse_as(&tmp, K_DESC, o.sd, "a closed");
    check_and_free_objs(&tmp);
}

/* Handles of objects that SCIClose released. */
static void handles_after_close(struct peer *p)
{
    (void)p;
    struct objs o, live;
    make_objs(&o, 0x2006);
    sci_error_t err;
    /* SCIClose releases everything, maps included, without SCI_ERR_BUSY. */
    EXPECT(SCI_ERR_OK, SCIClose(o.sd, NO_FLAGS, &err));
    make_objs(&live, 0x2007);
    /* Every call but the release calls refuses them; each release call
     * succeeds once (Dolphin's programs free their handles after closing
     * the descriptor); the descriptor itself was released by SCIClose. */
    for (int k = 0; k < K_COUNT; k++) {
        release_want = k == K_DESC ? SCI_ERR_ILLEGAL_PARAMETER : SCI_ERR_OK;
        abuse_as(&live, (enum kind)k, o.h[k], "a closed descriptor's");
    }
    /* Released now: refused like any released handle. */
    release_want = SCI_ERR_ILLEGAL_PARAMETER;
    for (int k = 0; k < K_COUNT; k++)
        abuse_as(&live, (enum kind)k, o.h[k], "a closed descriptor's released");
    check_and_free_objs(&live);
}

/* SCIClose returns once the node has released what the descriptor held:
 * the same segment id and fixed interrupt numbers can be taken again at
 * once, from a new descriptor, every time. */
static void ids_free_after_close(struct peer *p)
{
    (void)p;
    sci_error_t err;
    for (int round = 0; round < 200; round++) {
        struct objs o;
        make_objs(&o, 0x2008);
        sci_local_interrupt_t li;
        unsigned int intno = 77;
        EXPECT(SCI_ERR_OK, SCICreateInterrupt(o.sd, &li, 0, &intno, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err));
        EXPECT(SCI_ERR_OK, SCIClose(o.sd, NO_FLAGS, &err));
    }
}

/* Garbage values: pointers to nowhere, to random memory, to freed memory. */
static void garbage_handles(struct peer *p)
{
    (void)p;
    struct objs o;
    make_objs(&o, 0x2008);
    /* A page of 0x5a bytes, and a page with no access at all. */
    unsigned char *junk = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(junk != MAP_FAILED);
    memset(junk, 0x5a, 8192);
    unsigned char *noaccess = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(noaccess != MAP_FAILED);
    void *vals[] = {
        (void *)(uintptr_t)1, (void *)(uintptr_t)0x10, (void *)(uintptr_t)0xdeadbeef,
        (void *)(uintptr_t)0xdeadbeef00000000ULL, (void *)(uintptr_t)-1, junk + 64,
        junk + 4093, noaccess, noaccess + 8,
    };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char what[48];
        snprintf(what, sizeof what, "garbage #%zu", i);
        for (int k = 0; k < K_COUNT; k++)
            abuse_as(&o, (enum kind)k, vals[i], what);
    }
    check_and_free_objs(&o);
}

/* Handles got by another process are not handles in this one. */
static void other_process_a(struct peer *p)
{
    struct objs o;
    make_objs(&o, 0x2009);
    for (int k = 0; k < K_COUNT; k++)
        peer_send(p, (uint64_t)(uintptr_t)o.h[k]);
    peer_barrier(p); /* B has tried them all */
    check_and_free_objs(&o);
}

static void other_process_b(struct peer *p)
{
    void *h[K_COUNT];
    for (int k = 0; k < K_COUNT; k++)
        h[k] = (void *)(uintptr_t)peer_recv(p);
    /* Handle values may be the same in every process (a per-process table),
     * so B first uses up a set of handle values by creating and releasing
     * objects; its live objects then have other values than A's. */
    struct objs o;
    make_objs(&o, 0x200b);
    check_and_free_objs(&o);
    make_objs(&o, 0x200a);
    for (int k = 0; k < K_COUNT; k++) {
        int own = 0;
        for (int j = 0; j < K_COUNT; j++)
            if (h[k] == o.h[j])
                own = 1;
        if (own) {
            printf("A's %s handle %p equals one of B's own handles; skipped\n",
                   kind_names[k], h[k]);
            continue;
        }
        abuse_as(&o, (enum kind)k, h[k], "another process's");
    }
    check_and_free_objs(&o);
    peer_barrier(p);
}

static const struct test_case cases[] = {
    { "null_handles", null_handles, NULL, 0 },
    { "wrong_kind_handles", wrong_kind_handles, NULL, 0 },
    { "stale_handles", stale_handles, NULL, 0 },
    { "handles_after_close", handles_after_close, NULL, 0 },
    { "ids_free_after_close", ids_free_after_close, NULL, 0 },
    { "garbage_handles", garbage_handles, NULL, 0 },
    { "other_process_handles", other_process_a, other_process_b, 0 },
    { NULL, NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
    return proc_main(argc, argv, cases);
}
