/*
 * t_conformance.c - docs/api.md "Conformance": the release calls in every
 * handle state, and SCI_FLAG_FORCE_REMOVE with a connected peer.
 *
 * Programs written for Dolphin's library free their handles after closing
 * their descriptors and calling SCITerminate, looping on each release until
 * it returns SCI_ERR_OK (GASNet's SISCI conduit does exactly that at
 * gasnet_exit).  The cases:
 *
 *   gasnet_exit            open two descriptors, make one object of every
 *                          kind, SCIClose both, SCITerminate, then loop on
 *                          each release until SCI_ERR_OK (a loop that needs
 *                          more than RELEASE_CAP tries fails the case); the
 *                          ids are free again afterwards
 *   release_table          for every state of the table below, a fresh set
 *                          of objects put in that state, then every release
 *                          call, each checked against the table's code
 *   wrong_kind_orphans     after SCIClose, a released handle passed to
 *                          another kind's release call is refused, and the
 *                          right call still succeeds
 *   release_after_peer_gone  B connects to A's segment and interrupts; A
 *                          exits without releasing; B's releases succeed
 *   force_remove           A maps its segment, B connects and maps it; A's
 *                          SCIRemoveSegment is BUSY without the flag and OK
 *                          with SCI_FLAG_FORCE_REMOVE; B gets SCI_CB_LOST,
 *                          its SCICheckSequence and its next checked store
 *                          report the loss, a plain store does not crash,
 *                          and none of its stores reaches the new segment A
 *                          makes under the same id
 *
 * Roles for the tests across nodes (crates/vsci-systest/tests/conformance.rs):
 *   t_conformance -role force_owner SEGID
 *   t_conformance -role force_peer NODE SEGID
 *   t_conformance -role gasnet_owner SEGID
 *   t_conformance -role gasnet_remote NODE SEGID   (gasnet_exit with another
 *                                        node's segment and interrupt)
 *   t_conformance -role nodegone        (releases after the node died; the
 *                                        test kills the node after READY)
 *
 * Why one file of about 1,100 lines: it is one test program, as every
 * program in tests/c is (one binary the harness runs case by case or role by
 * role), and its cases share the one object set of every kind (make_set) and
 * the release calls and codes they are checked against; they are the one
 * "Conformance" section of docs/api.md.
 */
#include "common/proc.h"

/* Tries a release loop may take before the case fails (a loop that never
 * ends is the bug this program exists for). */
#define RELEASE_CAP 1000
#define SEG_SIZE 8192
#define WAIT_MS 60000

/* ---- one object of every kind ------------------------------------------ */

struct set {
    sci_desc_t sd, sd2;
    unsigned int node, segid, intno, dintno;
    sci_local_segment_t lseg;     /* on sd */
    sci_map_t lmap;
    sci_remote_segment_t rseg;    /* on sd2: our own segment, connected */
    sci_map_t rmap;
    sci_sequence_t seq;           /* on rmap */
    sci_local_interrupt_t lint;
    sci_remote_interrupt_t rint;  /* on sd2 */
    sci_local_data_interrupt_t ldint;
    sci_remote_data_interrupt_t rdint; /* on sd2 */
    sci_dma_queue_t dq;
    sci_dma_channel_t ch;         /* lseg prepared on it */
};

static void make_set(struct set *s, unsigned int segid)
{
    sci_error_t err;
    memset(s, 0, sizeof *s);
    s->sd = open_sd(&s->node);
    EXPECT(SCI_ERR_OK, SCIOpen(&s->sd2, NO_FLAGS, &err));
    s->segid = segid;
    EXPECT(SCI_ERR_OK, SCICreateSegment(s->sd, &s->lseg, segid, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(s->lseg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(s->lseg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, (void)SCIMapLocalSegment(s->lseg, &s->lmap, 0, SEG_SIZE, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(s->sd2, &s->rseg, s->node, segid, 0, NULL, NULL,
                                         WAIT_MS, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, (void)SCIMapRemoteSegment(s->rseg, &s->rmap, 0, SEG_SIZE, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(s->rmap, &s->seq, NO_FLAGS, &err));
    s->intno = 0;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(s->sd, &s->lint, 0, &s->intno, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(s->sd2, &s->rint, s->node, 0, s->intno, WAIT_MS, NO_FLAGS, &err));
    s->dintno = 0;
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(s->sd, &s->ldint, 0, &s->dintno, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(s->sd2, &s->rdint, s->node, 0, s->dintno, WAIT_MS,
                                               NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(s->sd, &s->dq, 0, 4, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRequestDMAChannel(s->sd, &s->ch, 0, SCI_DMA_TYPE_DONTCARE,
                                            SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareLocalSegmentForDMA(s->ch, s->lseg, NO_FLAGS, &err));
}

/* ---- the release calls --------------------------------------------------- */

enum rel {
    R_SEQ, R_RMAP, R_LMAP, R_UNPREP, R_RSEG, R_LSEG, R_RINT, R_LINT, R_RDINT, R_LDINT,
    R_DQ, R_CH, R_SD2, R_SD, R_COUNT
};

static const char *rel_names[R_COUNT] = {
    "SCIRemoveSequence", "SCIUnmapSegment(remote map)", "SCIUnmapSegment(local map)",
    "SCIUnprepareLocalSegmentForDMA", "SCIDisconnectSegment", "SCIRemoveSegment",
    "SCIDisconnectInterrupt", "SCIRemoveInterrupt", "SCIDisconnectDataInterrupt",
    "SCIRemoveDataInterrupt", "SCIRemoveDMAQueue", "SCIReturnDMAChannel",
    "SCIClose(second descriptor)", "SCIClose",
};

/* The handle release `r` of set `s` names. */
static void *rel_handle(const struct set *s, enum rel r)
{
    switch (r) {
    case R_SEQ: return s->seq;
    case R_RMAP: return s->rmap;
    case R_LMAP: return s->lmap;
    case R_UNPREP: return s->lseg;
    case R_RSEG: return s->rseg;
    case R_LSEG: return s->lseg;
    case R_RINT: return s->rint;
    case R_LINT: return s->lint;
    case R_RDINT: return s->rdint;
    case R_LDINT: return s->ldint;
    case R_DQ: return s->dq;
    case R_CH: return s->ch;
    case R_SD2: return s->sd2;
    case R_SD: return s->sd;
    default: return NULL;
    }
}

/* Make release call `r` on handle `h` (for the unprepare call: segment `h`
 * on channel `ch`); returns its error. */
static sci_error_t do_release_flags(enum rel r, void *h, void *ch, unsigned int flags)
{
    sci_error_t err = ERR_SENTINEL;
    switch (r) {
    case R_SEQ: SCIRemoveSequence(h, flags, &err); break;
    case R_RMAP:
    case R_LMAP: SCIUnmapSegment(h, flags, &err); break;
    case R_UNPREP: SCIUnprepareLocalSegmentForDMA(ch, h, flags, &err); break;
    case R_RSEG: SCIDisconnectSegment(h, flags, &err); break;
    case R_LSEG: SCIRemoveSegment(h, flags, &err); break;
    case R_RINT: SCIDisconnectInterrupt(h, flags, &err); break;
    case R_LINT: SCIRemoveInterrupt(h, flags, &err); break;
    case R_RDINT: SCIDisconnectDataInterrupt(h, flags, &err); break;
    case R_LDINT: SCIRemoveDataInterrupt(h, flags, &err); break;
    case R_DQ: SCIRemoveDMAQueue(h, flags, &err); break;
    case R_CH: SCIReturnDMAChannel(h, &err); break; /* takes no flags */
    case R_SD2:
    case R_SD: SCIClose(h, flags, &err); break;
    default: break;
    }
    return err;
}

static sci_error_t do_release(enum rel r, void *h, void *ch)
{
    return do_release_flags(r, h, ch, NO_FLAGS);
}

/* Call release `r` of `s` until it returns SCI_ERR_OK, as GASNet does; more
 * than RELEASE_CAP tries fails. */
static void release_until_ok(const struct set *s, enum rel r)
{
    for (int i = 0; i < RELEASE_CAP; i++) {
        sci_error_t e = do_release(r, rel_handle(s, r), s->ch);
        if (e == SCI_ERR_OK)
            return;
        if (i == 0)
            printf("%s: %s, retrying\n", rel_names[r], err_name(e));
    }
    FAILF("%s never returned SCI_ERR_OK (%d tries)", rel_names[r], RELEASE_CAP);
}

/* The ids of `s` can be taken again (what the releases named is gone). */
static void ids_free(const struct set *s)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg;
    sci_local_interrupt_t li;
    unsigned int no = s->intno;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, s->segid, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* GASNet's order at gasnet_exit: its DMA queues, its barrier segment, its
 * map sequences; then the rest. */
static const enum rel gasnet_order[R_COUNT] = {
    R_DQ, R_LSEG, R_SEQ, R_RMAP, R_LMAP, R_UNPREP, R_RSEG, R_RINT, R_LINT, R_RDINT, R_LDINT,
    R_CH, R_SD2, R_SD,
};

static void gasnet_exit(struct peer *p)
{
    (void)p;
    struct set s;
    sci_error_t err;
    make_set(&s, 0x3401);
    EXPECT(SCI_ERR_OK, SCIClose(s.sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIClose(s.sd2, NO_FLAGS, &err));
    SCITerminate();
    for (int i = 0; i < R_COUNT; i++) {
        /* The program closed its descriptors itself: those are released. */
        if (gasnet_order[i] == R_SD || gasnet_order[i] == R_SD2)
            continue;
        release_until_ok(&s, gasnet_order[i]);
    }
    /* The library starts again and the ids are free. */
    ids_free(&s);
    SCITerminate();
    printf("gasnet_exit: every release returned SCI_ERR_OK\n");
}

/* ---- the table ----------------------------------------------------------- */

enum state {
    S_VALID,            /* live objects */
    S_CLOSED,           /* the program SCIClosed both descriptors */
    S_TERMINATED,       /* SCITerminate */
    S_CLOSED_TERMINATED,/* both */
    S_RELEASED,         /* released once already (validly) */
    S_RELEASED_AFTER_TERMINATE, /* SCITerminate, released once, again */
    S_NULL,             /* never valid: NULL */
    S_FORGED,           /* never valid: made-up values */
    S_WRONG_KIND,       /* never valid: a live handle of another kind */
    S_COUNT
};

static const char *state_names[S_COUNT] = {
    "valid", "descriptor closed", "after SCITerminate", "closed, then SCITerminate",
    "already released", "released after SCITerminate, again", "NULL", "forged", "wrong kind",
};

#define OK SCI_ERR_OK
#define IP SCI_ERR_ILLEGAL_PARAMETER

/* expected[state][release]: docs/api.md's "Conformance" table. */
static const sci_error_t expected[S_COUNT][R_COUNT] = {
    /*                 SEQ RMAP LMAP UNPREP RSEG LSEG RINT LINT RDINT LDINT DQ  CH  SD2 SD */
    [S_VALID]        = { OK, OK,  OK,  OK,    OK,  OK,  OK,  OK,  OK,   OK,   OK, OK, OK, OK },
    /* Released by the program's SCIClose: the descriptors themselves are
     * released handles. */
    [S_CLOSED]       = { OK, OK,  OK,  OK,    OK,  OK,  OK,  OK,  OK,   OK,   OK, OK, IP, IP },
    [S_TERMINATED]   = { OK, OK,  OK,  OK,    OK,  OK,  OK,  OK,  OK,   OK,   OK, OK, OK, OK },
    [S_CLOSED_TERMINATED] = { OK, OK, OK, OK, OK,  OK,  OK,  OK,  OK,   OK,   OK, OK, IP, IP },
    [S_RELEASED]     = { IP, IP,  IP,  IP,    IP,  IP,  IP,  IP,  IP,   IP,   IP, IP, IP, IP },
    [S_RELEASED_AFTER_TERMINATE] = { IP, IP, IP, IP, IP, IP, IP, IP, IP,  IP,   IP, IP, IP, IP },
    [S_NULL]         = { IP, IP,  IP,  IP,    IP,  IP,  IP,  IP,  IP,   IP,   IP, IP, IP, IP },
    [S_FORGED]       = { IP, IP,  IP,  IP,    IP,  IP,  IP,  IP,  IP,   IP,   IP, IP, IP, IP },
    [S_WRONG_KIND]   = { IP, IP,  IP,  IP,    IP,  IP,  IP,  IP,  IP,   IP,   IP, IP, IP, IP },
};

/* A handle of another kind than release `r`'s, live in `s`. */
static void *other_kind(const struct set *s, enum rel r)
{
    switch (r) {
    case R_SEQ: return s->rmap;
    case R_RMAP: case R_LMAP: return s->seq;
    case R_UNPREP: return s->rseg;
    case R_RSEG: return s->lseg;
    case R_LSEG: return s->rseg;
    case R_RINT: return s->lint;
    case R_LINT: return s->rint;
    case R_RDINT: return s->rint;  /* a plain interrupt is not a data one */
    case R_LDINT: return s->lint;
    case R_DQ: return s->ch;
    case R_CH: return s->dq;
    case R_SD2: case R_SD: return s->lseg;
    default: return NULL;
    }
}

static void release_all_valid(const struct set *s)
{
    for (int r = 0; r < R_COUNT; r++) {
        sci_error_t e = do_release((enum rel)r, rel_handle(s, (enum rel)r), s->ch);
        CHECK_MSG(e == SCI_ERR_OK, "%s on a live handle: %s", rel_names[r], err_name(e));
    }
}

static void release_table(struct peer *p)
{
    (void)p;
    int failures = 0;
    for (int st = 0; st < S_COUNT; st++) {
        struct set s;
        sci_error_t err;
        make_set(&s, 0x3410 + (unsigned)st);
        switch ((enum state)st) {
        case S_CLOSED:
            EXPECT(SCI_ERR_OK, SCIClose(s.sd, NO_FLAGS, &err));
            EXPECT(SCI_ERR_OK, SCIClose(s.sd2, NO_FLAGS, &err));
            break;
        case S_TERMINATED:
            SCITerminate();
            break;
        case S_CLOSED_TERMINATED:
            EXPECT(SCI_ERR_OK, SCIClose(s.sd, NO_FLAGS, &err));
            EXPECT(SCI_ERR_OK, SCIClose(s.sd2, NO_FLAGS, &err));
            SCITerminate();
            break;
        case S_RELEASED:
            release_all_valid(&s);
            break;
        case S_RELEASED_AFTER_TERMINATE:
            SCITerminate();
            release_all_valid(&s);
            break;
        default:
            break;
        }
        for (int r = 0; r < R_COUNT; r++) {
            void *h = rel_handle(&s, (enum rel)r), *ch = s.ch;
            if (st == S_NULL) {
                h = NULL;
                ch = NULL;
            } else if (st == S_FORGED) {
                /* One value near the library's handles, one far away. */
                h = (void *)(uintptr_t)(r & 1 ? 0x7a5c1008u : 0xdeadbeef0ull);
                ch = h;
            } else if (st == S_WRONG_KIND) {
                h = other_kind(&s, (enum rel)r);
                if (r == R_UNPREP)
                    ch = s.dq;
            }
            sci_error_t e = do_release((enum rel)r, h, ch);
            if (e != expected[st][r]) {
                fprintf(stderr, "[A] %s, handle %s: expected %s, got %s\n", rel_names[r],
                        state_names[st], err_name(expected[st][r]), err_name(e));
                failures++;
            } else {
                printf("%-32s %-38s %s\n", rel_names[r], state_names[st], err_name(e));
            }
        }
        if (st == S_NULL || st == S_FORGED || st == S_WRONG_KIND) {
            /* Nothing was released by the bad calls. */
            release_all_valid(&s);
        }
        /* Whatever the state, everything is gone now. */
        ids_free(&s);
    }
    CHECK_MSG(failures == 0, "%d answers differ from the table", failures);
}

/* After SCIClose, a released handle of one kind passed to another kind's
 * release is refused and stays releasable by the right call. */
static void wrong_kind_orphans(struct peer *p)
{
    (void)p;
    struct set s;
    sci_error_t err;
    make_set(&s, 0x3420);
    EXPECT(SCI_ERR_OK, SCIClose(s.sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIClose(s.sd2, NO_FLAGS, &err));
    for (int r = 0; r < R_SD2; r++) {
        if (r == R_UNPREP)
            continue; /* takes two handles; covered by the table */
        void *h = other_kind(&s, (enum rel)r);
        sci_error_t e = do_release((enum rel)r, h, s.ch);
        CHECK_MSG(e == SCI_ERR_ILLEGAL_PARAMETER, "%s on a closed descriptor's handle of another kind: %s",
                  rel_names[r], err_name(e));
    }
    for (int r = 0; r < R_SD2; r++)
        release_until_ok(&s, (enum rel)r);
    ids_free(&s);
}

/* The flags of the release calls: SCI_FLAG_FORCE_REMOVE on SCIRemoveSegment
 * and SCIRemoveDMAQueue, nothing on the others; any other bit is
 * SCI_ERR_ILLEGAL_FLAG, checked before the handle, so it releases nothing
 * and does not use up a released handle's first SCI_ERR_OK. */
static void release_flags(struct peer *p)
{
    (void)p;
    for (int closed = 0; closed < 2; closed++) {
        struct set s;
        sci_error_t err;
        make_set(&s, 0x34a0 + (unsigned)closed);
        if (closed) {
            EXPECT(SCI_ERR_OK, SCIClose(s.sd, NO_FLAGS, &err));
            EXPECT(SCI_ERR_OK, SCIClose(s.sd2, NO_FLAGS, &err));
        }
        for (int r = 0; r < R_COUNT; r++) {
            if (r == R_CH)
                continue; /* SCIReturnDMAChannel has no flags argument */
            if (closed && (r == R_SD || r == R_SD2))
                continue; /* released by the program */
            unsigned int bits[] = { BAD_FLAG, 0x1, SCI_FLAG_FORCE_REMOVE };
            for (size_t b = 0; b < sizeof bits / sizeof bits[0]; b++) {
                if (bits[b] == SCI_FLAG_FORCE_REMOVE && (r == R_LSEG || r == R_DQ))
                    continue; /* honoured: below */
                sci_error_t e = do_release_flags((enum rel)r, rel_handle(&s, (enum rel)r), s.ch, bits[b]);
                CHECK_MSG(e == SCI_ERR_ILLEGAL_FLAG, "%s with flag 0x%x (%s): %s", rel_names[r], bits[b],
                          closed ? "descriptor closed" : "valid", err_name(e));
            }
        }
        /* Nothing went: each release still succeeds, the two that take it
         * with SCI_FLAG_FORCE_REMOVE. */
        for (int r = 0; r < R_COUNT; r++) {
            if (closed && (r == R_SD || r == R_SD2))
                continue;
            unsigned int f = (r == R_LSEG || r == R_DQ) ? SCI_FLAG_FORCE_REMOVE : NO_FLAGS;
            sci_error_t e = do_release_flags((enum rel)r, rel_handle(&s, (enum rel)r), s.ch, f);
            CHECK_MSG(e == SCI_ERR_OK, "%s (%s): %s", rel_names[r], closed ? "descriptor closed" : "valid",
                      err_name(e));
        }
        ids_free(&s);
    }
}

/* ---- every other call on released handles -------------------------------- */

/* The calls that use a handle without releasing it.  On a handle SCIClose
 * or SCITerminate released, or one released already, or one never valid,
 * each answers as the table says (SCI_ERR_ILLEGAL_PARAMETER, a getter 0, a
 * queue state SCI_DMAQUEUE_ERROR) -- and none of them uses up the first
 * release call's SCI_ERR_OK. */
enum use {
    U_CREATE_SEG, U_CONNECT_SEG, U_CREATE_INT, U_CONNECT_INT, U_CREATE_DINT, U_CONNECT_DINT,
    U_PROBE, U_CREATE_DQ, U_REQUEST_CH, U_ATTACH,
    U_PREPARE, U_AVAILABLE, U_UNAVAILABLE, U_LSEG_EVENT, U_MAP_LOCAL, U_SHARE, U_REGISTER,
    U_LSEG_SIZE, U_LSEG_ID, U_PREP_LOCAL_DMA,
    U_RSEG_EVENT, U_MAP_REMOTE, U_RSEG_SIZE, U_RSEG_ID, U_RSEG_NODE, U_PREP_REMOTE_DMA,
    U_MEMCPY, U_MEMCPY_READ, U_CREATE_SEQ, U_MAP_POINTER, U_CACHE_SYNC, U_MEMWRITE,
    U_START_SEQ, U_CHECK_SEQ,
    U_WAIT_INT, U_TRIGGER_INT, U_WAIT_DINT, U_TRIGGER_DINT,
    U_ABORT_DQ, U_DQ_STATE, U_WAIT_DQ, U_START_DMA, U_START_DMA_MEM, U_START_DMA_VEC,
    U_ENQUEUE, U_POST, U_RESET, U_ASSIGN_CH,
    U_COUNT
};

static const char *use_names[U_COUNT] = {
    "SCICreateSegment", "SCIConnectSegment", "SCICreateInterrupt", "SCIConnectInterrupt",
    "SCICreateDataInterrupt", "SCIConnectDataInterrupt", "SCIProbeNode", "SCICreateDMAQueue",
    "SCIRequestDMAChannel", "SCIAttachLocalSegment",
    "SCIPrepareSegment", "SCISetSegmentAvailable", "SCISetSegmentUnavailable",
    "SCIWaitForLocalSegmentEvent", "SCIMapLocalSegment", "SCIShareSegment",
    "SCIRegisterSegmentMemory", "SCIGetLocalSegmentSize", "SCIGetLocalSegmentId",
    "SCIPrepareLocalSegmentForDMA",
    "SCIWaitForRemoteSegmentEvent", "SCIMapRemoteSegment", "SCIGetRemoteSegmentSize",
    "SCIGetRemoteSegmentId", "SCIGetRemoteSegmentNodeId", "SCIPrepareRemoteSegmentForDMA",
    "SCIMemCpy", "SCIMemCpy(SCI_FLAG_BLOCK_READ)", "SCICreateMapSequence", "SCIGetMapPointer",
    "SCICacheSync", "SCIMemWrite",
    "SCIStartSequence", "SCICheckSequence",
    "SCIWaitForInterrupt", "SCITriggerInterrupt", "SCIWaitForDataInterrupt",
    "SCITriggerDataInterrupt",
    "SCIAbortDMAQueue", "SCIDMAQueueState", "SCIWaitForDMAQueue", "SCIStartDmaTransfer",
    "SCIStartDmaTransferMem", "SCIStartDmaTransferVec", "SCIEnqueueDMATransfer",
    "SCIPostDMAQueue", "SCIResetDMAQueue", "SCIAssignDMAChannel",
};

/* Make call `u` with the handles of `s` (released, or replaced by `bad`
 * when not NULL); `addr` is where s's remote map was.  Returns its error;
 * calls without one return SCI_ERR_ILLEGAL_PARAMETER when they answered as
 * for a bad handle (0, NULL, SCI_DMAQUEUE_ERROR) and SCI_ERR_OK otherwise. */
/* What the last do_use() call made, if it made something. */
static void *last_out;

static sci_error_t do_use(enum use u, const struct set *s, void *bad, void *addr)
{
#define H(x) (bad ? bad : (void *)(x))
    sci_error_t err = ERR_SENTINEL;
    char buf[64] = { 0 };
    unsigned int no = 0, len = sizeof buf, node = 0, adapter = 0;
    size_t size = 0;
    void *out = NULL;
    sci_error_t status;
    dis_dma_vec_t vec = { 64, 0, 0, 0 };
    switch (u) {
    case U_CREATE_SEG: SCICreateSegment(H(s->sd), (sci_local_segment_t *)&out, 0x34ff, 4096, NULL, NULL, NO_FLAGS, &err); break;
    case U_CONNECT_SEG: SCIConnectSegment(H(s->sd), (sci_remote_segment_t *)&out, s->node, s->segid, 0, NULL, NULL, 0, NO_FLAGS, &err); break;
    case U_CREATE_INT: SCICreateInterrupt(H(s->sd), (sci_local_interrupt_t *)&out, 0, &no, NULL, NULL, NO_FLAGS, &err); break;
    case U_CONNECT_INT: SCIConnectInterrupt(H(s->sd), (sci_remote_interrupt_t *)&out, s->node, 0, s->intno, 0, NO_FLAGS, &err); break;
    case U_CREATE_DINT: SCICreateDataInterrupt(H(s->sd), (sci_local_data_interrupt_t *)&out, 0, &no, NULL, NULL, NO_FLAGS, &err); break;
    case U_CONNECT_DINT: SCIConnectDataInterrupt(H(s->sd), (sci_remote_data_interrupt_t *)&out, s->node, 0, s->dintno, 0, NO_FLAGS, &err); break;
    case U_PROBE: (void)SCIProbeNode(H(s->sd), 0, s->node, NO_FLAGS, &err); break;
    case U_CREATE_DQ: SCICreateDMAQueue(H(s->sd), (sci_dma_queue_t *)&out, 0, 4, NO_FLAGS, &err); break;
    case U_REQUEST_CH: SCIRequestDMAChannel(H(s->sd), (sci_dma_channel_t *)&out, 0, SCI_DMA_TYPE_DONTCARE, SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &err); break;
    case U_ATTACH: SCIAttachLocalSegment(H(s->sd), (sci_local_segment_t *)&out, s->segid, &size, NULL, NULL, NO_FLAGS, &err); break;
    case U_PREPARE: SCIPrepareSegment(H(s->lseg), 0, NO_FLAGS, &err); break;
    case U_AVAILABLE: SCISetSegmentAvailable(H(s->lseg), 0, NO_FLAGS, &err); break;
    case U_UNAVAILABLE: SCISetSegmentUnavailable(H(s->lseg), 0, NO_FLAGS, &err); break;
    case U_LSEG_EVENT: (void)SCIWaitForLocalSegmentEvent(H(s->lseg), &node, &adapter, 0, NO_FLAGS, &err); break;
    case U_MAP_LOCAL: (void)SCIMapLocalSegment(H(s->lseg), (sci_map_t *)&out, 0, 4096, NULL, NO_FLAGS, &err); break;
    case U_SHARE: SCIShareSegment(H(s->lseg), NO_FLAGS, &err); break;
    case U_REGISTER: {
        static char page[8192] __attribute__((aligned(4096)));
        SCIRegisterSegmentMemory(page, SEG_SIZE, H(s->lseg), NO_FLAGS, &err);
        break;
    }
    case U_LSEG_SIZE: return SCIGetLocalSegmentSize(H(s->lseg)) == 0 ? SCI_ERR_ILLEGAL_PARAMETER : SCI_ERR_OK;
    case U_LSEG_ID: return SCIGetLocalSegmentId(H(s->lseg)) == 0 ? SCI_ERR_ILLEGAL_PARAMETER : SCI_ERR_OK;
    case U_PREP_LOCAL_DMA: SCIPrepareLocalSegmentForDMA(H(s->ch), H(s->lseg), NO_FLAGS, &err); break;
    case U_RSEG_EVENT: (void)SCIWaitForRemoteSegmentEvent(H(s->rseg), &status, 0, NO_FLAGS, &err); break;
    case U_MAP_REMOTE: (void)SCIMapRemoteSegment(H(s->rseg), (sci_map_t *)&out, 0, 4096, NULL, NO_FLAGS, &err); break;
    case U_RSEG_SIZE: return SCIGetRemoteSegmentSize(H(s->rseg)) == 0 ? SCI_ERR_ILLEGAL_PARAMETER : SCI_ERR_OK;
    case U_RSEG_ID: return SCIGetRemoteSegmentId(H(s->rseg)) == 0 ? SCI_ERR_ILLEGAL_PARAMETER : SCI_ERR_OK;
    case U_RSEG_NODE: return SCIGetRemoteSegmentNodeId(H(s->rseg)) == 0 ? SCI_ERR_ILLEGAL_PARAMETER : SCI_ERR_OK;
    case U_PREP_REMOTE_DMA: SCIPrepareRemoteSegmentForDMA(H(s->ch), H(s->rseg), NO_FLAGS, &err); break;
    case U_MEMCPY: SCIMemCpy(NULL, buf, H(s->rmap), 0, 16, NO_FLAGS, &err); break;
    case U_MEMCPY_READ: SCIMemCpy(NULL, buf, H(s->rmap), 0, 16, SCI_FLAG_BLOCK_READ, &err); break;
    case U_CREATE_SEQ: SCICreateMapSequence(H(s->rmap), (sci_sequence_t *)&out, NO_FLAGS, &err); break;
    case U_MAP_POINTER: return SCIGetMapPointer(H(s->rmap)) == NULL ? SCI_ERR_ILLEGAL_PARAMETER : SCI_ERR_OK;
    case U_CACHE_SYNC: SCICacheSync(H(s->rmap), buf, 16, SCI_FLAG_CACHE_FLUSH, &err); break;
    /* Takes an address, not a handle: one in no live map. */
    case U_MEMWRITE: SCIMemWrite(buf, bad ? bad : addr, 16, NO_FLAGS, &err); break;
    case U_START_SEQ: (void)SCIStartSequence(H(s->seq), NO_FLAGS, &err); break;
    case U_CHECK_SEQ: (void)SCICheckSequence(H(s->seq), NO_FLAGS, &err); break;
    case U_WAIT_INT: SCIWaitForInterrupt(H(s->lint), 0, NO_FLAGS, &err); break;
    case U_TRIGGER_INT: SCITriggerInterrupt(H(s->rint), NO_FLAGS, &err); break;
    case U_WAIT_DINT: SCIWaitForDataInterrupt(H(s->ldint), buf, &len, 0, NO_FLAGS, &err); break;
    case U_TRIGGER_DINT: SCITriggerDataInterrupt(H(s->rdint), buf, 8, NO_FLAGS, &err); break;
    case U_ABORT_DQ: SCIAbortDMAQueue(H(s->dq), NO_FLAGS, &err); break;
    case U_DQ_STATE: return SCIDMAQueueState(H(s->dq)) == SCI_DMAQUEUE_ERROR ? SCI_ERR_ILLEGAL_PARAMETER : SCI_ERR_OK;
    case U_WAIT_DQ: (void)SCIWaitForDMAQueue(H(s->dq), 0, NO_FLAGS, &err); break;
    case U_START_DMA: SCIStartDmaTransfer(H(s->dq), H(s->lseg), H(s->rseg), 0, 64, 0, NULL, NULL, NO_FLAGS, &err); break;
    case U_START_DMA_MEM: SCIStartDmaTransferMem(H(s->dq), buf, H(s->rseg), 64, 0, NULL, NULL, NO_FLAGS, &err); break;
    case U_START_DMA_VEC: SCIStartDmaTransferVec(H(s->dq), H(s->lseg), H(s->rseg), 1, &vec, NULL, NULL, NO_FLAGS, &err); break;
    case U_ENQUEUE: (void)SCIEnqueueDMATransfer(H(s->dq), H(s->lseg), H(s->rseg), 0, 0, 64, NO_FLAGS, &err); break;
    case U_POST: SCIPostDMAQueue(H(s->dq), NULL, NULL, NO_FLAGS, &err); break;
    case U_RESET: SCIResetDMAQueue(H(s->dq), NO_FLAGS, &err); break;
    case U_ASSIGN_CH: SCIAssignDMAChannel(H(s->ch), H(s->dq), NO_FLAGS, &err); break;
    default: break;
    }
    last_out = out;
    return err;
#undef H
}

/* The state of the handles: the same rows as release_table's. */
static void calls_on_released_handles(struct peer *p)
{
    (void)p;
    static const enum state states[] = {
        S_CLOSED, S_TERMINATED, S_CLOSED_TERMINATED, S_RELEASED, S_NULL, S_FORGED,
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        enum state st = states[i];
        struct set s;
        sci_error_t err;
        make_set(&s, 0x3470 + (unsigned)i);
        void *addr = (void *)(uintptr_t)SCIGetMapPointer(s.rmap);
        switch (st) {
        case S_CLOSED:
        case S_CLOSED_TERMINATED:
            EXPECT(SCI_ERR_OK, SCIClose(s.sd, NO_FLAGS, &err));
            EXPECT(SCI_ERR_OK, SCIClose(s.sd2, NO_FLAGS, &err));
            if (st == S_CLOSED_TERMINATED)
                SCITerminate();
            break;
        case S_TERMINATED:
            SCITerminate();
            break;
        case S_RELEASED:
            release_all_valid(&s);
            break;
        default:
            break;
        }
        /* A descriptor for the calls that need a live one besides. */
        void *bad = st == S_NULL ? NULL : st == S_FORGED ? (void *)(uintptr_t)0xdeadbeef0ull : NULL;
        for (int u = 0; u < U_COUNT; u++) {
            sci_error_t want = u == U_MEMWRITE ? SCI_ERR_ILLEGAL_ADDRESS : SCI_ERR_ILLEGAL_PARAMETER;
            sci_error_t e;
            if (st == S_NULL) {
                /* Every handle argument NULL (and SCIMemWrite's address). */
                struct set z;
                memset(&z, 0, sizeof z);
                z.node = s.node;
                z.segid = s.segid;
                z.intno = s.intno;
                z.dintno = s.dintno;
                e = do_use((enum use)u, &z, NULL, NULL);
                if (u == U_CACHE_SYNC)
                    want = SCI_ERR_OK; /* NULL map: the range need lie in no map */
            } else {
                e = do_use((enum use)u, &s, bad, addr);
            }
            if (e != want) {
                fprintf(stderr, "[A] %s, handle %s: expected %s, got %s\n", use_names[u],
                        state_names[st], err_name(want), err_name(e));
                failures++;
            } else {
                printf("%-32s %-38s %s\n", use_names[u], state_names[st], err_name(e));
            }
        }
        /* None of those calls was a release: the first release of each
         * handle SCIClose or SCITerminate released still succeeds. */
        for (int r = 0; r < R_COUNT; r++) {
            sci_error_t e = do_release((enum rel)r, rel_handle(&s, (enum rel)r), s.ch);
            sci_error_t want = expected[st][r];
            if (st == S_NULL || st == S_FORGED)
                want = SCI_ERR_OK; /* the objects are live: release them */
            if (e != want) {
                fprintf(stderr, "[A] %s after the other calls, handle %s: expected %s, got %s\n",
                        rel_names[r], state_names[st], err_name(want), err_name(e));
                failures++;
            }
        }
        ids_free(&s);
    }
    CHECK_MSG(failures == 0, "%d answers differ from the table", failures);
}

/* ---- peer gone ------------------------------------------------------------ */

static void peer_gone_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    sci_local_interrupt_t li;
    sci_local_data_interrupt_t ldi;
    unsigned int no = 0, dno = 0;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x3430, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &ldi, 0, &dno, NULL, NULL, NO_FLAGS, &err));
    peer_send(p, node);
    peer_send(p, no);
    peer_send(p, dno);
    peer_barrier(p); /* B is connected */
    _exit(0);        /* gone, releasing nothing itself */
}

static void peer_gone_b(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int node = (unsigned int)peer_recv(p);
    unsigned int no = (unsigned int)peer_recv(p), dno = (unsigned int)peer_recv(p);
    sci_remote_segment_t rs;
    sci_map_t map;
    sci_sequence_t seq;
    sci_remote_interrupt_t ri;
    sci_remote_data_interrupt_t rdi;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3430, 0, NULL, NULL, WAIT_MS, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, (void)SCIMapRemoteSegment(rs, &map, 0, SEG_SIZE, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(map, &seq, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, no, WAIT_MS, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(sd, &rdi, node, 0, dno, WAIT_MS, NO_FLAGS, &err));
    peer_barrier(p);
    peer_wait_gone(p);
    sci_error_t status;
    sci_segment_cb_reason_t reason;
    EXPECT(SCI_ERR_OK, reason = SCIWaitForRemoteSegmentEvent(rs, &status, WAIT_MS, NO_FLAGS, &err));
    CHECK_EQ(reason, SCI_CB_LOST);
    sci_sequence_status_t sst;
    EXPECT(SCI_ERR_TRANSFER_FAILED, sst = SCICheckSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(sst, SCI_SEQ_NOT_RETRIABLE);
    /* The other calls on handles whose peer is gone (docs/api.md's
     * "peer gone" column). */
    {
        struct set s;
        memset(&s, 0, sizeof s);
        s.sd = sd;
        s.node = node;
        s.segid = 0x3430;
        s.intno = no;
        s.dintno = dno;
        s.rseg = rs;
        s.rmap = map;
        s.seq = seq;
        s.rint = ri;
        s.rdint = rdi;
        EXPECT(SCI_ERR_OK, SCICreateDMAQueue(sd, &s.dq, 0, 4, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &s.lseg, 0x3431, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIRequestDMAChannel(sd, &s.ch, 0, SCI_DMA_TYPE_DONTCARE,
                                                SCI_DMA_CHANNEL_ID_DONTCARE, NO_FLAGS, &err));
        static const struct { enum use u; sci_error_t want; } rows[] = {
            { U_CONNECT_SEG, SCI_ERR_NO_SUCH_SEGMENT },
            { U_CONNECT_INT, SCI_ERR_CONNECTION_REFUSED },
            { U_CONNECT_DINT, SCI_ERR_CONNECTION_REFUSED },
            { U_RSEG_EVENT, SCI_ERR_TIMEOUT },
            /* A new map of a lost connection is of its last memory, shared
             * with no one (as the maps it already had). */
            { U_MAP_REMOTE, SCI_ERR_OK },
            { U_RSEG_SIZE, SCI_ERR_OK },
            { U_RSEG_ID, SCI_ERR_OK },
            { U_RSEG_NODE, SCI_ERR_OK },
            { U_PREP_REMOTE_DMA, SCI_ERR_SEGMENT_NOT_CONNECTED },
            /* Unchecked copies reach no one; SCI_FLAG_ERROR_CHECK and the
             * sequence report the loss. */
            { U_MEMCPY, SCI_ERR_OK },
            { U_MEMCPY_READ, SCI_ERR_OK },
            { U_CREATE_SEQ, SCI_ERR_OK },
            { U_MAP_POINTER, SCI_ERR_OK },
            { U_START_SEQ, SCI_ERR_TRANSFER_FAILED },
            { U_CHECK_SEQ, SCI_ERR_TRANSFER_FAILED },
            { U_TRIGGER_INT, SCI_ERR_NOT_CONNECTED },
            { U_TRIGGER_DINT, SCI_ERR_NOT_CONNECTED },
            { U_START_DMA, SCI_ERR_SEGMENT_NOT_CONNECTED },
            { U_START_DMA_MEM, SCI_ERR_SEGMENT_NOT_CONNECTED },
        };
        int failures = 0;
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            sci_error_t e = do_use(rows[i].u, &s, NULL, NULL);
            printf("%-32s %-38s %s\n", use_names[rows[i].u], "peer gone", err_name(e));
            if (e != rows[i].want) {
                fprintf(stderr, "[B] %s, peer gone: expected %s, got %s\n", use_names[rows[i].u],
                        err_name(rows[i].want), err_name(e));
                failures++;
            }
            /* Release what the row made. */
            if (e == SCI_ERR_OK && rows[i].u == U_MAP_REMOTE)
                EXPECT(SCI_ERR_OK, SCIUnmapSegment(last_out, NO_FLAGS, &err));
            if (e == SCI_ERR_OK && rows[i].u == U_CREATE_SEQ)
                EXPECT(SCI_ERR_OK, SCIRemoveSequence(last_out, NO_FLAGS, &err));
        }
        CHECK_MSG(failures == 0, "%d answers differ from the table", failures);
        EXPECT(SCI_ERR_OK, SCIReturnDMAChannel(s.ch, &err));
        EXPECT(SCI_ERR_OK, SCIRemoveSegment(s.lseg, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(s.dq, NO_FLAGS, &err));
    }
    /* Every release succeeds with the owner gone. */
    EXPECT(SCI_ERR_OK, SCIRemoveSequence(seq, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(rdi, NO_FLAGS, &err));
    close_sd(sd);
}

/* ---- SCI_FLAG_FORCE_REMOVE ------------------------------------------------ */

static volatile unsigned char *map_remote(sci_desc_t sd, unsigned int node, unsigned int segid,
                                          sci_remote_segment_t *rs, sci_map_t *map)
{
    sci_error_t err;
    volatile unsigned char *q;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, rs, node, segid, 0, NULL, NULL, WAIT_MS, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, q = (volatile unsigned char *)SCIMapRemoteSegment(*rs, map, 0, SEG_SIZE, NULL,
                                                                        NO_FLAGS, &err));
    return q;
}

/* The owner: waits for the peer's store, force-removes its segment while
 * it still maps it itself, makes a new segment under the same id, and
 * checks that nothing the peer stored after the removal reaches it. */
static void force_owner(unsigned int segid)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg, seg2;
    sci_map_t map, map2;
    volatile unsigned char *a, *b;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, segid, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, a = SCIMapLocalSegment(seg, &map, 0, SEG_SIZE, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    printf("OWNER READY\n");
    unsigned int node, adapter;
    sci_segment_cb_reason_t reason;
    EXPECT(SCI_ERR_OK, reason = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, WAIT_MS, NO_FLAGS, &err));
    CHECK_EQ(reason, SCI_CB_CONNECT);
    WAIT_UNTIL(a[1] == 0x12, WAIT_MS);
    CHECK_EQ(a[0], 0x11);
    printf("OWNER SAW THE PEER'S STORE (peer node %u)\n", node);

    /* We still map it: BUSY without the flag. */
    EXPECT(SCI_ERR_BUSY, SCIRemoveSegment(seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRemoveSegment(seg, SCI_FLAG_FORCE_REMOVE | BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, SCI_FLAG_FORCE_REMOVE, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRemoveSegment(seg, SCI_FLAG_FORCE_REMOVE, &err));
    /* Our own map stays valid memory until we unmap it. */
    a[100] = 5;
    CHECK_EQ(a[100], 5);
    printf("OWNER FORCE-REMOVED\n");

    /* The id is free again at once; the new segment is fresh memory. */
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg2, segid, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg2, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, b = SCIMapLocalSegment(seg2, &map2, 0, SEG_SIZE, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg2, 0, NO_FLAGS, &err));
    /* The peer stores into its old map after its loss, then connects to the
     * new segment and sets a marker there. */
    WAIT_UNTIL(b[4096] == 0x22, WAIT_MS);
    for (int i = 0; i < 4096; i++)
        CHECK_MSG(b[i] == 0, "byte %d of the new segment is 0x%02x: a stale store reached it", i, b[i]);
    printf("OWNER: NO STALE WRITES\n");
    EXPECT(SCI_ERR_OK, reason = SCIWaitForLocalSegmentEvent(seg2, &node, &adapter, WAIT_MS, NO_FLAGS, &err));
    CHECK_EQ(reason, SCI_CB_CONNECT);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map2, NO_FLAGS, &err));
    /* Peer connected or gone by now: the segment goes either way. */
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg2, SCI_FLAG_FORCE_REMOVE, &err));
    close_sd(sd);
    printf("OWNER OK\n");
}

/* The peer: connects and maps, stores, and after the owner's forced
 * removal finds the loss reported by SCI_CB_LOST, SCICheckSequence and its
 * next checked store. */
static void force_peer(unsigned int node, unsigned int segid)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_remote_segment_t rs, rs2;
    sci_map_t map, map2;
    sci_sequence_t seq, seq2;
    volatile unsigned char *q = map_remote(sd, node, segid, &rs, &map);
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(map, &seq, NO_FLAGS, &err));
    sci_sequence_status_t sst;
    EXPECT(SCI_ERR_OK, sst = SCIStartSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(sst, SCI_SEQ_OK);
    q[0] = 0x11;
    SCIFlush(seq, NO_FLAGS);
    EXPECT(SCI_ERR_OK, sst = SCICheckSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(sst, SCI_SEQ_OK);
    /* Only now tell the owner it may remove (a store travels at once: the
     * owner would see the first one before our check). */
    q[1] = 0x12;
    SCIFlush(seq, NO_FLAGS);
    printf("PEER STORED\n");

    sci_error_t status = ERR_SENTINEL;
    sci_segment_cb_reason_t reason;
    EXPECT(SCI_ERR_OK, reason = SCIWaitForRemoteSegmentEvent(rs, &status, WAIT_MS, NO_FLAGS, &err));
    CHECK_EQ(reason, SCI_CB_LOST);
    printf("PEER GOT SCI_CB_LOST (status %s)\n", err_name(status));
    EXPECT(SCI_ERR_TRANSFER_FAILED, sst = SCICheckSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(sst, SCI_SEQ_NOT_RETRIABLE);
    /* A plain store does not crash (it reaches no one); a checked one
     * reports the loss. */
    q[0] = 0x33;
    q[8] = 0x33;
    SCIFlush(seq, NO_FLAGS);
    unsigned char buf[16];
    memset(buf, 0x44, sizeof buf);
    err = ERR_SENTINEL;
    SCIMemCpy(seq, buf, map, 16, sizeof buf, SCI_FLAG_ERROR_CHECK, &err);
    printf("PEER CHECKED STORE AFTER THE LOSS: %s\n", err_name(err));
    CHECK_MSG(err == SCI_ERR_TRANSFER_FAILED || err == SCI_ERR_NO_LINK_ACCESS,
              "SCIMemCpy(SCI_FLAG_ERROR_CHECK) after the loss: %s", err_name(err));
    EXPECT(SCI_ERR_TRANSFER_FAILED, sst = SCICheckSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(sst, SCI_SEQ_NOT_RETRIABLE);

    /* The id again: the owner's new segment, untouched by the stores above. */
    volatile unsigned char *q2 = map_remote(sd, node, segid, &rs2, &map2);
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(map2, &seq2, NO_FLAGS, &err));
    q2[4096] = 0x22;
    SCIFlush(seq2, NO_FLAGS);
    EXPECT(SCI_ERR_OK, sst = SCICheckSequence(seq2, NO_FLAGS, &err));
    CHECK_EQ(sst, SCI_SEQ_OK);
    printf("PEER MARKED THE NEW SEGMENT\n");

    EXPECT(SCI_ERR_OK, SCIRemoveSequence(seq, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSequence(seq2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs2, NO_FLAGS, &err));
    close_sd(sd);
    printf("PEER OK\n");
}

static void force_remove_a(struct peer *p)
{
    (void)p;
    force_owner(0x3440);
}

static void force_remove_b(struct peer *p)
{
    (void)p;
    unsigned int node;
    sci_error_t err;
    EXPECT(SCI_ERR_OK, SCIGetLocalNodeId(0, &node, NO_FLAGS, &err));
    force_peer(node, 0x3440);
}

/* ---- GASNet's exit across two nodes ------------------------------------------ */

#define GASNET_INTNO 34

/* The owner on one node: a segment and an interrupt the program on the other
 * node uses; it sees the program's connection come and, at its SCIClose,
 * go. */
static void gasnet_owner(unsigned int segid)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg;
    sci_local_interrupt_t li;
    unsigned int no = GASNET_INTNO, node, adapter;
    sci_segment_cb_reason_t reason;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, segid, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err));
    printf("OWNER READY\n");
    EXPECT(SCI_ERR_OK, reason = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, WAIT_MS, NO_FLAGS, &err));
    CHECK_EQ(reason, SCI_CB_CONNECT);
    EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_MS, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, reason = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, WAIT_MS, NO_FLAGS, &err));
    CHECK_EQ(reason, SCI_CB_DISCONNECT);
    printf("OWNER SAW THE PROGRAM CONNECT AND GO (node %u)\n", node);
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
    printf("OWNER OK\n");
}

/* The program on the other node: what GASNet's SISCI conduit holds (a
 * local barrier segment, another node's segment mapped with a sequence, a
 * remote interrupt, a DMA queue), used once, then gasnet_exit: SCIClose,
 * SCITerminate, and each release looped on until SCI_ERR_OK. */
static void gasnet_remote(unsigned int node, unsigned int segid)
{
    struct set s;
    sci_error_t err;
    memset(&s, 0, sizeof s);
    s.sd = open_sd(&s.node);
    EXPECT(SCI_ERR_OK, SCIOpen(&s.sd2, NO_FLAGS, &err));
    s.segid = segid + 1;
    EXPECT(SCI_ERR_OK, SCICreateSegment(s.sd, &s.lseg, s.segid, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(s.lseg, 0, NO_FLAGS, &err));
    volatile unsigned char *l;
    EXPECT(SCI_ERR_OK, l = SCIMapLocalSegment(s.lseg, &s.lmap, 0, SEG_SIZE, NULL, NO_FLAGS, &err));
    l[0] = 7;
    volatile unsigned char *r = map_remote(s.sd2, node, segid, &s.rseg, &s.rmap);
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(s.rmap, &s.seq, NO_FLAGS, &err));
    r[0] = 1;
    SCIFlush(s.seq, NO_FLAGS);
    sci_sequence_status_t sst;
    EXPECT(SCI_ERR_OK, sst = SCICheckSequence(s.seq, NO_FLAGS, &err));
    CHECK_EQ(sst, SCI_SEQ_OK);
    EXPECT(SCI_ERR_OK, SCICreateDMAQueue(s.sd, &s.dq, 0, 4, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(s.dq, s.lseg, s.rseg, 0, 4096, 4096, NULL, NULL,
                                           SCI_FLAG_DMA_WAIT, &err));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(s.sd2, &s.rint, node, 0, GASNET_INTNO, WAIT_MS, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(s.rint, NO_FLAGS, &err));
    printf("PROGRAM USED EVERYTHING\n");

    /* gasnet_exit */
    EXPECT(SCI_ERR_OK, SCIClose(s.sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIClose(s.sd2, NO_FLAGS, &err));
    SCITerminate();
    static const enum rel order[] = { R_DQ, R_LSEG, R_SEQ, R_RMAP, R_LMAP, R_RSEG, R_RINT };
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        release_until_ok(&s, order[i]);
    /* The ids are free again. */
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, s.segid, SEG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
    SCITerminate();
    printf("PROGRAM OK: every release returned SCI_ERR_OK\n");
}

/* ---- the node dies --------------------------------------------------------- */

/* What each other call answers once the node is gone. */
static sci_error_t node_gone_expected(int u)
{
    switch (u) {
    /* Work without the node: local memory, DMA (run in the program), the
     * handle's own state. */
    case U_REQUEST_CH: case U_MAP_LOCAL: case U_LSEG_SIZE: case U_LSEG_ID:
    case U_PREP_LOCAL_DMA: case U_MAP_REMOTE: case U_RSEG_SIZE: case U_RSEG_ID:
    case U_RSEG_NODE: case U_MEMCPY: case U_MEMCPY_READ: case U_CREATE_SEQ:
    case U_MAP_POINTER: case U_ABORT_DQ: case U_DQ_STATE: case U_WAIT_DQ:
    case U_RESET: case U_ASSIGN_CH:
        return SCI_ERR_OK;
    /* Return the event that tells it: SCI_CB_LOST. */
    case U_LSEG_EVENT: case U_RSEG_EVENT:
        return SCI_ERR_OK;
    /* The connection is lost with the node. */
    case U_PREP_REMOTE_DMA: case U_START_DMA: case U_START_DMA_MEM: case U_START_DMA_VEC:
    case U_ENQUEUE:
        return SCI_ERR_SEGMENT_NOT_CONNECTED;
    case U_START_SEQ: case U_CHECK_SEQ:
        return SCI_ERR_TRANSFER_FAILED;
    /* The interrupt went with the node. */
    case U_TRIGGER_INT: case U_TRIGGER_DINT:
        return SCI_ERR_NOT_CONNECTED;
    /* Argument checks of do_use()'s values, whatever the state: a buffer
     * outside the map; a segment that was not made SCI_FLAG_EMPTY; a
     * queue with nothing enqueued. */
    case U_CACHE_SYNC: return SCI_ERR_OUT_OF_RANGE;
    case U_REGISTER: return SCI_ERR_ILLEGAL_OPERATION;
    case U_POST: return SCI_ERR_ILLEGAL_OPERATION;
    default:
        return SCI_ERR_NO_LINK_ACCESS;
    }
}

/* Make every object, say READY, wait until the node is gone (the test kills
 * it), then release everything: each release returns SCI_ERR_OK. */
static void nodegone(void)
{
    struct set s;
    sci_error_t err;
    make_set(&s, 0x3450);
    printf("READY\n");
    uint64_t deadline = now_ms() + WAIT_MS;
    for (;;) {
        unsigned int n;
        err = ERR_SENTINEL;
        SCIGetLocalNodeId(0, &n, NO_FLAGS, &err);
        if (err == SCI_ERR_NO_LINK_ACCESS)
            break;
        if (now_ms() > deadline)
            FAILF("the node did not go away");
        sleep_ms(20);
    }
    /* Until both descriptors learnt it from their sockets (each does at
     * once, on a thread of its own), answers would depend on the race;
     * then let their exit paths (LOST events, gone interrupts) finish. */
    for (;;) {
        sci_sequence_status_t sst = SCICheckSequence(s.seq, NO_FLAGS, &err);
        (void)SCIProbeNode(s.sd, 0, s.node, NO_FLAGS, &err);
        if (sst == SCI_SEQ_NOT_RETRIABLE && err == SCI_ERR_NO_LINK_ACCESS)
            break;
        if (now_ms() > deadline)
            FAILF("the descriptors did not learn that the node went away");
        sleep_ms(20);
    }
    sleep_ms(500);
    printf("NODE GONE\n");
    void *addr = (void *)(uintptr_t)SCIGetMapPointer(s.rmap);
    int failures = 0;
    for (int u = 0; u < U_COUNT; u++) {
        if (u == U_MEMWRITE)
            continue; /* writes through the live map: covered in t_nodegone */
        sci_error_t e = do_use((enum use)u, &s, NULL, addr);
        sci_error_t want = node_gone_expected(u);
        printf("%-32s %-38s %s\n", use_names[u], "node gone", err_name(e));
        if (e != want) {
            fprintf(stderr, "[nodegone] %s, node gone: expected %s, got %s\n", use_names[u],
                    err_name(want), err_name(e));
            failures++;
        }
        /* Release what the call made (the segment's removal waits for its
         * maps to go). */
        if (e == SCI_ERR_OK && (u == U_MAP_LOCAL || u == U_MAP_REMOTE))
            EXPECT(SCI_ERR_OK, SCIUnmapSegment(last_out, NO_FLAGS, &err));
        if (e == SCI_ERR_OK && u == U_CREATE_SEQ)
            EXPECT(SCI_ERR_OK, SCIRemoveSequence(last_out, NO_FLAGS, &err));
        if (e == SCI_ERR_OK && u == U_REQUEST_CH)
            EXPECT(SCI_ERR_OK, SCIReturnDMAChannel(last_out, &err));
    }
    CHECK_MSG(failures == 0, "%d answers differ from the table", failures);
    for (int r = 0; r < R_COUNT; r++)
        release_until_ok(&s, (enum rel)r);
    SCITerminate();
    printf("NODEGONE OK\n");
}

static const struct test_case cases[] = {
    { "gasnet_exit", gasnet_exit, NULL, 0 },
    { "release_table", release_table, NULL, 0 },
    { "wrong_kind_orphans", wrong_kind_orphans, NULL, 0 },
    { "calls_on_released_handles", calls_on_released_handles, NULL, 0 },
    { "release_flags", release_flags, NULL, 0 },
    { "release_after_peer_gone", peer_gone_a, peer_gone_b, 0 },
    { "force_remove", force_remove_a, force_remove_b, 0 },
    { NULL, NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "-role") == 0) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        check_role = argv[2];
        if (strcmp(argv[2], "force_owner") == 0 && argc == 4)
            force_owner((unsigned int)strtoul(argv[3], NULL, 0));
        else if (strcmp(argv[2], "force_peer") == 0 && argc == 5)
            force_peer((unsigned int)strtoul(argv[3], NULL, 0), (unsigned int)strtoul(argv[4], NULL, 0));
        else if (strcmp(argv[2], "gasnet_owner") == 0 && argc == 4)
            gasnet_owner((unsigned int)strtoul(argv[3], NULL, 0));
        else if (strcmp(argv[2], "gasnet_remote") == 0 && argc == 5)
            gasnet_remote((unsigned int)strtoul(argv[3], NULL, 0), (unsigned int)strtoul(argv[4], NULL, 0));
        else if (strcmp(argv[2], "nodegone") == 0)
            nodegone();
        else {
            fprintf(stderr, "usage: %s [-l] [CASE...] | -role force_owner SEGID | "
                            "-role force_peer NODE SEGID | -role gasnet_owner SEGID | "
                            "-role gasnet_remote NODE SEGID | -role nodegone\n", argv[0]);
            return 2;
        }
        return 0;
    }
    return proc_main(argc, argv, cases);
}
