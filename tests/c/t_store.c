/*
 * t_store.c - roles for the remote store-contract tests
 * (crates/vsci-systest/tests/remote_stores.rs, issue 17).  Each role is one
 * process on one node of a cluster (VSCI_SOCKET names its node); the harness
 * starts them in the nodes' network namespaces.  They are written the way
 * SISCI programs for Dolphin hardware are written: data then a flag stored
 * into the peer's segment through a remote map, and a busy-wait in a plain
 * loop (no sched_yield, no sleep, no pause instruction, no SISCI call) on the
 * process's OWN local segment for the answer.  Every pointer into a remote
 * map is volatile.
 *
 * Every wait has a deadline (-wait S, default 120 s) so that a lost store
 * fails the role with a message naming the round and the values seen
 * instead of hanging.  A role exits 0 when everything arrived, 1 with a
 * file:line message otherwise.
 *
 *   t_store mbox-owner calls|nocalls ROUNDS SEG W1NODE:W1SEG W2NODE:W2SEG
 *   t_store mbox-writer calls|nocalls ROUNDS K OWNERNODE:OWNERSEG MYSEG
 *       The store-loss test (three nodes).  The owner creates SEG (one
 *       page); writers K = 1 and 2 map that page and each owns a payload
 *       word and a flag word in it (adjacent words, interleaved with the
 *       other writer's).  Each writer also creates MYSEG, whose first word
 *       is its ack word.  Round r: each writer stores its payload (one of two
 *       values, alternating, so it repeats every other round) [SCIFlush],
 *       stores its flag = 11 (always the same value) [SCIFlush], and spins on
 *       its ack word until it reads r.  The owner spins until both flags are
 *       11 (with `nocalls` also until both payloads hold this round's value),
 *       checks both payloads, clears flags and payloads to 0 in its own
 *       memory, and stores r into each writer's ack word through its remote
 *       map of that writer's segment [SCIFlush].  [..] only with `calls`;
 *       with `nocalls` the loops make no SISCI call at all.  With `calls`,
 *       once both flags read 11 both payloads must be this round's: 0 is a
 *       lost store, any other value a torn or stale one.  With `nocalls`
 *       (no order between payload and flag) the owner waits until all four
 *       words hold this round's values; a store that never arrives, or a
 *       wrong value that stays, ends in the deadline's failure, whose
 *       message shows the words and any odd value seen while waiting.
 *
 *   t_store pingpong ping|pong ROUNDS SIZE MYSEG PEERNODE:PEERSEG [MSG]
 *       Both sides create MYSEG of SIZE bytes and map the peer's whole
 *       segment.  ping stores i into the counter word (in the last page) of
 *       the peer's segment and spins on its own counter word until it reads
 *       i; pong spins until it reads i and stores i back.  No call in the
 *       loop.  With MSG, each side first memcpy()s an MSG-byte message right
 *       below the counter word (vector stores) and checks the whole message
 *       it receives when the counter shows; pong echoes it.
 *
 *   t_store runs ping|pong ROUNDS MYSEG PEERNODE:PEERSEG
 *       Runs of adjacent store instructions of every width into the peer's
 *       two-page segment, then a flag in its highest word (see runs()).
 *
 *   t_store order-recv ROUNDS SIZE MYSEG SENDERNODE:SENDERSEG
 *   t_store order-send ROUNDS MYSEG RECVNODE:RECVSEG [noflush-down]
 *       Flag after payload through a large map.  The receiver creates MYSEG
 *       of SIZE bytes (64 MiB in the test); the sender maps all of it and,
 *       each round r, stores a 6 KiB payload (every word a function of r and
 *       its index, spanning two pages near the end), calls SCIFlush, stores
 *       the flag word r right after the payload, and spins on its own
 *       segment's ack word until it reads r.  The receiver spins on the flag
 *       in its own segment; when it reads r every payload word must already
 *       be this round's; then it stores r into the sender's ack word (plain
 *       store, no call).  With noflush-down the sender stores the payload
 *       from its last word down (as glibc's memcpy copies page-aligned
 *       blocks) and makes no call before the flag: the flag is the highest
 *       word of whatever shipment carries it, which must land after the
 *       rest of that shipment.
 *
 *   t_store words-owner ROUNDS SEG WRITERNODE:WRITERSEG
 *   t_store words-writer ROUNDS MYSEG OWNERNODE:OWNERSEG
 *       Whole words.  The writer stores all 512 8-byte words of the owner's
 *       one-page segment with plain 8-byte stores, round r's value in each:
 *       its lowest and highest bytes are r's (they change every round), the
 *       six bytes between are the same in every round, so a shipment that
 *       compares the page with what the owner had sees two changed bytes
 *       with six unchanged ones between them.  Then SCIFlush and a spin on
 *       its own ack word.  The owner spins over its words until every one
 *       holds round r's value, and fails at once if any word it reads is
 *       not a value the writer stored (low and high byte of different
 *       rounds: a word that arrived in pieces); then it stores r into the
 *       writer's ack word.
 *
 *   t_store halves-owner ROUNDS SEG W1NODE:W1SEG W2NODE:W2SEG
 *   t_store halves-writer ROUNDS K OWNERNODE:OWNERSEG MYSEG
 *       Two streaming writers, one page apart in every byte (three nodes).
 *       The owner creates SEG: HALVES_PAGES data pages and a control page.
 *       Writer K owns half K of every data page; each round it memcpy()s a
 *       pattern into its half of each page in address order, up in even
 *       rounds and down in odd ones (a stream: the library fetches pages
 *       ahead of it), calls SCIFlush, stores its flag
 *       (the round number) into the control page, calls SCIFlush and spins
 *       on its own segment's ack word.  The pattern repeats every other
 *       round.  The owner waits for both flags, checks every byte of both
 *       halves, clears all of it to 0 in its own memory and acks both.  A
 *       writer that shipped its stale view of the other's half, or lost a
 *       store equal to what it stored two rounds ago, shows as a wrong byte.
 *
 *   t_store stream NODE:SEG SIZE ITERS [OFFSET [guarded]]
 *       memcpy (or memmove, every other time) SIZE bytes of new data into the map of NODE:SEG at OFFSET
 *       (default 0) and SCIFlush, ITERS times, then memset its middle half
 *       and memmove it all one byte up;
 *       the segment must read back as that (SCI_FLAG_BLOCK_READ), and its
 *       bytes around the copy as they were before.  With "guarded", the
 *       source is made PROT_NONE before each copy and the program's own
 *       SIGSEGV handler makes it readable again: every copy must reach that
 *       handler (the copy reads its source as the C library's would) and
 *       still arrive.
 *
 *   t_store big-owner SEG SIZE
 *       Creates segment SEG of SIZE bytes (1 GiB in the test; memfd pages
 *       are allocated only when touched), prints "BIG READY" and waits for
 *       SIGTERM ("BIG DONE").
 *   t_store idle-map NODE:SEG SECONDS
 *       Connects to NODE:SEG, maps all of it, stores one byte, calls
 *       SCIFlush, prints "IDLE MAPPED", sleeps SECONDS (the harness counts the
 *       link's bytes meanwhile), prints "IDLE DONE cpu_ms=..." (its own CPU
 *       time while asleep, all threads), checks the byte with an
 *       SCI_FLAG_BLOCK_READ SCIMemCpy, and releases everything.
 */
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "common/proc.h"
#include "common/roles.h"

#define PAGE 4096u

/* ---- segments ---------------------------------------------------------------- */

struct lseg {
    sci_local_segment_t seg;
    sci_map_t map;
    volatile unsigned char *p;
    size_t size;
    unsigned segid;
};

/* Create, map, prepare and make available a local segment (the order a
 * SISCI program uses); its memory starts zeroed. */
static void lseg_create(sci_desc_t sd, struct lseg *l, unsigned segid, size_t size, int map)
{
    sci_error_t err;
    l->size = size;
    l->segid = segid;
    l->p = NULL;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &l->seg, segid, size, NULL, NULL, NO_FLAGS, &err));
    if (map) {
        EXPECT(SCI_ERR_OK, l->p = SCIMapLocalSegment(l->seg, &l->map, 0, size, NULL, NO_FLAGS,
                                                     &err));
    }
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(l->seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(l->seg, 0, NO_FLAGS, &err));
}

/* Wait until `peers` connections to our segment have gone (their
 * DISCONNECT or LOST events), so nobody is left storing into it, then
 * release it.  A peer that never leaves is reported, not judged: the
 * harness judges the peer. */
static void lseg_release(struct lseg *l, int peers)
{
    sci_error_t err;
    int gone = 0;
    uint64_t deadline = now_ms() + 30000;
    while (gone < peers && now_ms() < deadline) {
        unsigned node = 0, adapter = 0;
        err = ERR_SENTINEL;
        sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(l->seg, &node, &adapter, 1000,
                                                                NO_FLAGS, &err);
        if (err == SCI_ERR_TIMEOUT)
            continue;
        CHECK_ERR(err, SCI_ERR_OK);
        if (r == SCI_CB_DISCONNECT || r == SCI_CB_LOST)
            gone++;
    }
    if (gone < peers)
        printf("warning: segment %u: only %d of %d peers disconnected within 30 s\n", l->segid,
               gone, peers);
    if (l->p) {
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(l->map, NO_FLAGS, &err));
    }
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(l->seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(l->seg, NO_FLAGS, &err));
}

struct rseg {
    sci_remote_segment_t rs;
    sci_map_t map;
    volatile unsigned char *p;
    size_t size;
    unsigned node, segid;
};

/* Connect to NODE:SEG, retrying until it exists (up to 420 s: the segment
 * may be a guest's, and a guest under software emulation on a busy host
 * took over a minute to boot and make it; the deadline only bounds a hang),
 * and map `size` bytes of it at `offset` (size 0: all of it). */
static void rseg_connect(sci_desc_t sd, struct rseg *r, const char *target, size_t offset,
                         size_t size)
{
    sci_error_t err;
    parse_target(target, &r->node, &r->segid);
    uint64_t t0 = now_ms();
    for (unsigned attempt = 1;; attempt++) {
        err = ERR_SENTINEL;
        SCIConnectSegment(sd, &r->rs, r->node, r->segid, 0, NULL, NULL, 1000, NO_FLAGS, &err);
        if (err == SCI_ERR_OK)
            break;
        if (now_ms() - t0 > 420000)
            FAILF("SCIConnectSegment(node %u, segment 0x%x) still fails after %u attempts in "
                  "420 s: %s",
                  r->node, r->segid, attempt, err_name(err));
        sleep_ms(50);
    }
    size_t whole = SCIGetRemoteSegmentSize(r->rs);
    if (size == 0)
        size = whole - offset;
    CHECK_MSG(offset + size <= whole, "segment 0x%x of node %u has %zu bytes, need %zu",
              r->segid, r->node, whole, offset + size);
    r->size = size;
    EXPECT(SCI_ERR_OK, r->p = SCIMapRemoteSegment(r->rs, &r->map, offset, size, NULL, NO_FLAGS,
                                                  &err));
}

static void rseg_release(struct rseg *r)
{
    sci_error_t err;
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(r->map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(r->rs, NO_FLAGS, &err));
}

static inline volatile uint32_t *word_at(volatile unsigned char *base, size_t off)
{
    return (volatile uint32_t *)(base + off);
}

/* ---- the store-loss mailbox (three nodes) ----------------------------------------- */

#define MBOX_FLAG 11u
/* Writer k's words in the owner's page: adjacent and interleaved with the
 * other writer's, so a writer shipping its stale view of the other's bytes
 * (a whole word, line or page) would show. */
#define MBOX_BASE 0x100u
static inline size_t mbox_payload_off(unsigned k) { return MBOX_BASE + 4u * (k - 1); }
static inline size_t mbox_flag_off(unsigned k) { return MBOX_BASE + 8u + 4u * (k - 1); }
/* Writer k's payload in round r: one of two values, alternating. */
static inline uint32_t mbox_payload(unsigned k, uint32_t r)
{
    return (r & 1) ? 0xA1000000u + k : 0xB2000000u + k;
}

/* What the owner sees of both writers' words: flags read before payloads. */
struct mbox_view {
    uint32_t f[2], p[2];
};

static inline void mbox_read(struct mbox_view *v, volatile uint32_t *const flag[2],
                             volatile uint32_t *const pay[2])
{
    v->f[0] = *flag[0];
    v->f[1] = *flag[1];
    v->p[0] = *pay[0];
    v->p[1] = *pay[1];
}

/* Every word holds 0 (cleared, not yet stored this round) or this round's
 * value.  Anything else, seen while the stores are in flight, is noted for
 * the failure message but not judged: only what the contract guarantees is
 * (a flag stored after its payload and an SCIFlush, and every store
 * arriving). */
static inline int mbox_sane(const struct mbox_view *v, const uint32_t want[2])
{
    for (int k = 0; k < 2; k++) {
        if (v->f[k] != 0 && v->f[k] != MBOX_FLAG)
            return 0;
        if (v->p[k] != 0 && v->p[k] != want[k])
            return 0;
    }
    return 1;
}

/* Both flags are up; without calls (no ordering between payload and flag)
 * both payloads must have arrived too. */
static inline int mbox_arrived(const struct mbox_view *v, const uint32_t want[2], int calls)
{
    return v->f[0] == MBOX_FLAG && v->f[1] == MBOX_FLAG &&
           (calls || (v->p[0] == want[0] && v->p[1] == want[1]));
}

/* One look at the words: notes the first odd snapshot, says whether this
 * round's messages are in. */
static inline int mbox_poll(struct mbox_view *v, struct mbox_view *odd, int *seen_odd,
                            volatile uint32_t *const flag[2], volatile uint32_t *const pay[2],
                            const uint32_t want[2], int calls)
{
    mbox_read(v, flag, pay);
    if (!*seen_odd && !mbox_sane(v, want)) {
        *odd = *v;
        *seen_odd = 1;
    }
    return mbox_arrived(v, want, calls);
}

static int parse_mode(const char *s)
{
    if (strcmp(s, "calls") == 0)
        return 1;
    if (strcmp(s, "nocalls") == 0)
        return 0;
    fprintf(stderr, "t_store: mode \"%s\" is neither calls nor nocalls\n", s);
    exit(2);
}

/* "ping" (1) or "pong" (0); anything else ends the program. */
static int parse_side(const char *role, const char *side)
{
    if (strcmp(side, "ping") == 0)
        return 1;
    if (strcmp(side, "pong") == 0)
        return 0;
    fprintf(stderr, "t_store %s: side \"%s\" is neither ping nor pong\n", role, side);
    exit(2);
}

static int mbox_owner(int calls, uint32_t rounds, unsigned segid, const char *w1,
                      const char *w2)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, segid, PAGE, 1);
    struct rseg ack[2];
    rseg_connect(sd, &ack[0], w1, 0, PAGE);
    rseg_connect(sd, &ack[1], w2, 0, PAGE);
    volatile uint32_t *pay[2], *flag[2], *ackw[2];
    for (unsigned k = 1; k <= 2; k++) {
        pay[k - 1] = word_at(own.p, mbox_payload_off(k));
        flag[k - 1] = word_at(own.p, mbox_flag_off(k));
        ackw[k - 1] = word_at(ack[k - 1].p, 0);
    }
    printf("MBOX OWNER READY node=%u seg=0x%x mode=%s rounds=%u writers=%u,%u\n", node, segid,
           calls ? "calls" : "nocalls", rounds, ack[0].node, ack[1].node);

    uint64_t t0 = now_ms(), tlast = t0;
    for (uint32_t r = 1; r <= rounds; r++) {
        const uint32_t want[2] = { mbox_payload(1, r), mbox_payload(2, r) };
        struct mbox_view v, odd = { { 0, 0 }, { 0, 0 } };
        int seen_odd = 0;
        uint64_t deadline = now_ms() + wait_ms;
        int ok = SPIN_UNTIL(mbox_poll(&v, &odd, &seen_odd, flag, pay, want, calls), deadline);
        /* Judge one snapshot, flags read before payloads. */
        mbox_read(&v, flag, pay);
        char note[256] = "";
        if (seen_odd)
            snprintf(note, sizeof note,
                     "; while waiting it also saw writer 1 flag=%u payload=0x%08x, writer 2 "
                     "flag=%u payload=0x%08x",
                     odd.f[0], odd.p[0], odd.f[1], odd.p[1]);
        if (!ok)
            FAILF("round %u of %u (%s): LOST STORE: after %" PRIu64 " ms the owner's page "
                  "holds writer 1 flag=%u payload=0x%08x, writer 2 flag=%u payload=0x%08x; "
                  "want flags %u and payloads 0x%08x / 0x%08x (the owner cleared all four "
                  "to 0 after round %u; a value other than 0 and the one stored is torn or "
                  "stale)%s",
                  r, rounds, calls ? "calls" : "nocalls", wait_ms, v.f[0], v.p[0], v.f[1],
                  v.p[1], MBOX_FLAG, want[0], want[1], r - 1, note);
        if (v.p[0] != want[0] || v.p[1] != want[1])
            FAILF("round %u of %u (%s): both flags are %u (%s) but writer 1 "
                  "payload=0x%08x (want 0x%08x), writer 2 payload=0x%08x (want 0x%08x); the "
                  "owner cleared them to 0 after round %u, so 0 is a lost store and any other "
                  "value but the one stored a torn or stale one%s",
                  r, rounds, calls ? "calls" : "nocalls", MBOX_FLAG,
                  calls ? "each stored after its payload and an SCIFlush"
                        : "and both payloads had arrived a moment before",
                  v.p[0], want[0], v.p[1], want[1], r - 1, note);
        /* Consume the messages: clear them in our own memory... */
        *pay[0] = 0;
        *pay[1] = 0;
        *flag[0] = 0;
        *flag[1] = 0;
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        /* ...and acknowledge through the writers' segments. */
        *ackw[0] = r;
        *ackw[1] = r;
        if (calls)
            SCIFlush(NULL, NO_FLAGS);
        if (r % 1000 == 0 || r == rounds) {
            uint64_t t = now_ms();
            printf("MBOX OWNER round %u: %" PRIu64 " ms for the last rounds\n", r, t - tlast);
            tlast = t;
        }
    }
    uint64_t ms = now_ms() - t0;
    printf("MBOX OWNER DONE rounds=%u ms=%" PRIu64 " (%.1f us per round)\n", rounds, ms,
           rounds ? 1000.0 * (double)ms / rounds : 0.0);
    rseg_release(&ack[0]);
    rseg_release(&ack[1]);
    lseg_release(&own, 2);
    close_sd(sd);
    return 0;
}

static int mbox_writer(int calls, uint32_t rounds, unsigned k, const char *owner,
                       unsigned myseg)
{
    unsigned node;
    CHECK_MSG(k == 1 || k == 2, "writer index %u is not 1 or 2", k);
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg, PAGE, 1);
    struct rseg box;
    rseg_connect(sd, &box, owner, 0, PAGE);
    volatile uint32_t *pay = word_at(box.p, mbox_payload_off(k));
    volatile uint32_t *flag = word_at(box.p, mbox_flag_off(k));
    volatile uint32_t *ackw = word_at(own.p, 0);
    printf("MBOX WRITER %u READY node=%u owner=%u seg=0x%x mode=%s\n", k, node, box.node,
           box.segid, calls ? "calls" : "nocalls");

    uint64_t t0 = now_ms();
    for (uint32_t r = 1; r <= rounds; r++) {
        *pay = mbox_payload(k, r);
        if (calls)
            SCIFlush(NULL, NO_FLAGS);
        *flag = MBOX_FLAG;
        if (calls)
            SCIFlush(NULL, NO_FLAGS);
        uint32_t a;
        uint64_t deadline = now_ms() + wait_ms;
        int ok = SPIN_UNTIL((a = *ackw) == r, deadline);
        a = *ackw;
        if (!ok)
            FAILF("writer %u round %u of %u (%s): no ack within %" PRIu64 " ms (ack word %u); "
                  "this round it stored payload=0x%08x then flag=%u",
                  k, r, rounds, calls ? "calls" : "nocalls", wait_ms, a, mbox_payload(k, r),
                  MBOX_FLAG);
    }
    uint64_t ms = now_ms() - t0;
    printf("MBOX WRITER %u DONE rounds=%u ms=%" PRIu64 "\n", k, rounds, ms);
    rseg_release(&box);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

/* ---- two streaming writers sharing every page ------------------------------------- */

#define HALVES_PAGES 256u
#define HALF (PAGE / 2u)
static inline size_t halves_flag_off(unsigned k) { return (size_t)HALVES_PAGES * PAGE + 4u * (k - 1); }
/* Byte j of writer k's half of page i in round r: repeats every other round,
 * differs between the writers and between neighbouring bytes and pages. */
static inline unsigned char halves_byte(unsigned k, uint32_t r, size_t i, size_t j)
{
    return (unsigned char)(k * 37u + (r & 1u) * 101u + i * 7u + j + 1u);
}

static int halves_owner(uint32_t rounds, unsigned segid, const char *w1, const char *w2)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, segid, (size_t)(HALVES_PAGES + 1) * PAGE, 1);
    struct rseg ack[2];
    rseg_connect(sd, &ack[0], w1, 0, PAGE);
    rseg_connect(sd, &ack[1], w2, 0, PAGE);
    volatile uint32_t *flag[2] = { word_at(own.p, halves_flag_off(1)),
                                   word_at(own.p, halves_flag_off(2)) };
    printf("HALVES OWNER READY node=%u seg=0x%x rounds=%u pages=%u\n", node, segid, rounds,
           HALVES_PAGES);
    uint64_t t0 = now_ms();
    for (uint32_t r = 1; r <= rounds; r++) {
        uint64_t deadline = now_ms() + wait_ms;
        int ok = SPIN_UNTIL(*flag[0] == r && *flag[1] == r, deadline);
        if (!ok)
            FAILF("round %u of %u: flags %u / %u after %" PRIu64 " ms, want %u", r, rounds,
                  *flag[0], *flag[1], wait_ms, r);
        for (size_t i = 0; i < HALVES_PAGES; i++)
            for (unsigned k = 1; k <= 2; k++)
                for (size_t j = 0; j < HALF; j++) {
                    unsigned char got = own.p[i * PAGE + (k - 1) * HALF + j];
                    unsigned char want = halves_byte(k, r, i, j);
                    if (got != want)
                        FAILF("round %u of %u: page %zu, writer %u's half, byte %zu holds 0x%02x, "
                              "want 0x%02x (0 is a lost store: the owner cleared it after the "
                              "last round; the same byte two rounds ago was 0x%02x)",
                              r, rounds, i, k, j, got, want, halves_byte(k, r - 2, i, j));
                }
        memset((void *)(uintptr_t)own.p, 0, (size_t)(HALVES_PAGES + 1) * PAGE);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        *word_at(ack[0].p, 0) = r;
        *word_at(ack[1].p, 0) = r;
        SCIFlush(NULL, NO_FLAGS);
    }
    uint64_t ms = now_ms() - t0;
    printf("HALVES OWNER DONE rounds=%u ms=%" PRIu64 " (%.2f ms per round)\n", rounds, ms,
           rounds ? (double)ms / rounds : 0.0);
    rseg_release(&ack[0]);
    rseg_release(&ack[1]);
    lseg_release(&own, 2);
    close_sd(sd);
    return 0;
}

static int halves_writer(uint32_t rounds, unsigned k, const char *owner, unsigned myseg)
{
    unsigned node;
    CHECK_MSG(k == 1 || k == 2, "writer index %u is not 1 or 2", k);
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg, PAGE, 1);
    struct rseg box;
    rseg_connect(sd, &box, owner, 0, 0);
    CHECK_MSG(box.size >= (size_t)(HALVES_PAGES + 1) * PAGE, "owner segment too small: %zu",
              box.size);
    unsigned char *pattern[2];
    for (unsigned par = 0; par < 2; par++) {
        pattern[par] = malloc((size_t)HALVES_PAGES * HALF);
        CHECK_MSG(pattern[par] != NULL, "out of memory");
        for (size_t i = 0; i < HALVES_PAGES; i++)
            for (size_t j = 0; j < HALF; j++)
                pattern[par][i * HALF + j] = halves_byte(k, par, i, j);
    }
    volatile uint32_t *ackw = word_at(own.p, 0);
    printf("HALVES WRITER %u READY node=%u owner=%u\n", k, node, box.node);
    for (uint32_t r = 1; r <= rounds; r++) {
        const unsigned char *src = pattern[r & 1u];
        /* Up the pages in even rounds, down in odd ones: the library
         * fetches ahead of a stream in either direction. */
        for (size_t n = 0; n < HALVES_PAGES; n++) {
            size_t i = (r & 1u) ? HALVES_PAGES - 1 - n : n;
            memcpy((void *)(uintptr_t)(box.p + i * PAGE + (k - 1) * HALF), src + i * HALF, HALF);
        }
        SCIFlush(NULL, NO_FLAGS);
        *word_at(box.p, halves_flag_off(k)) = r;
        SCIFlush(NULL, NO_FLAGS);
        uint64_t deadline = now_ms() + wait_ms;
        if (!SPIN_UNTIL(*ackw == r, deadline))
            FAILF("writer %u round %u of %u: no ack within %" PRIu64 " ms (ack word %u)", k, r,
                  rounds, wait_ms, *ackw);
    }
    printf("HALVES WRITER %u DONE rounds=%u\n", k, rounds);
    free(pattern[0]);
    free(pattern[1]);
    rseg_release(&box);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

/* ---- whole words ------------------------------------------------------------------ */

#define WORDS_MID 0x005a5a5a5a5a5a00ull
#define WORDS_NARROW_MID 0x000000005a5a5a00ull
/* Round r's word: r's byte at both ends, the same bytes between. With
 * `narrow`, r's byte is bytes 0 and 5 and bytes 6-7 stay 0, so what a
 * shipment sends of a word is six bytes of it, not all eight. */
static inline uint64_t words_value(uint32_t r, int narrow)
{
    uint64_t b = (uint64_t)(r % 255u + 1u);
    return narrow ? b << 40 | WORDS_NARROW_MID | b : b << 56 | WORDS_MID | b;
}

static int words_owner(uint32_t rounds, unsigned segid, const char *writer, int narrow)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, segid, PAGE, 1);
    struct rseg ack;
    rseg_connect(sd, &ack, writer, 0, PAGE);
    volatile uint64_t *w = (volatile uint64_t *)own.p;
    printf("WORDS OWNER READY node=%u seg=0x%x rounds=%u\n", node, segid, rounds);
    uint64_t t0 = now_ms(), reads = 0;
    for (uint32_t r = 1; r <= rounds; r++) {
        uint64_t want = words_value(r, narrow), before = r > 1 ? words_value(r - 1, narrow) : 0;
        uint64_t deadline = now_ms() + wait_ms;
        for (;;) {
            unsigned here = 0;
            for (unsigned k = 0; k < PAGE / 8; k++) {
                uint64_t v = w[k];
                reads++;
                if (v == want)
                    here++;
                else if (v != before) {
                    /* What the word holds a moment later tells a word
                     * placed in pieces (it becomes whole) from bytes lost. */
                    uint64_t until = now_ms() + 1000, later = v;
                    while (now_ms() < until && (later = w[k]) == v)
                        ;
                    FAILF("round %u of %u: word %u reads 0x%016" PRIx64 ", which the writer never "
                          "stored (this round's 0x%016" PRIx64 ", the last one's 0x%016" PRIx64
                          "): a word that arrived in pieces; then 0x%016" PRIx64,
                          r, rounds, k, v, want, before, later);
                }
            }
            if (here == PAGE / 8)
                break;
            if (now_ms() > deadline)
                FAILF("round %u of %u: %u of %u words hold this round's value after %" PRIu64 " ms",
                      r, rounds, here, PAGE / 8, wait_ms);
        }
        *word_at(ack.p, 0) = r;
        SCIFlush(NULL, NO_FLAGS);
    }
    printf("WORDS OWNER DONE rounds=%u reads=%" PRIu64 " ms=%" PRIu64 "\n", rounds, reads,
           now_ms() - t0);
    rseg_release(&ack);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

static int words_writer(uint32_t rounds, unsigned myseg, const char *owner, int narrow)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg, PAGE, 1);
    struct rseg box;
    rseg_connect(sd, &box, owner, 0, PAGE);
    volatile uint64_t *w = (volatile uint64_t *)box.p;
    volatile uint32_t *ackw = word_at(own.p, 0);
    printf("WORDS WRITER READY node=%u owner=%u\n", node, box.node);
    for (uint32_t r = 1; r <= rounds; r++) {
        uint64_t v = words_value(r, narrow);
        for (unsigned k = 0; k < PAGE / 8; k++)
            w[k] = v;
        SCIFlush(NULL, NO_FLAGS);
        uint64_t deadline = now_ms() + wait_ms;
        if (!SPIN_UNTIL(*ackw == r, deadline))
            FAILF("round %u of %u: no ack within %" PRIu64 " ms (ack word %u)", r, rounds, wait_ms,
                  *ackw);
    }
    printf("WORDS WRITER DONE rounds=%u\n", rounds);
    rseg_release(&box);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

/* ---- spinning ping-pong ---------------------------------------------------------- */

/* Byte i of round r's message. */
static inline uint8_t pp_byte(uint32_t r, size_t i) { return (uint8_t)(r * 131u + i * 7u + 1u); }

static int pingpong(int ping, uint32_t rounds, size_t size, unsigned myseg, const char *peer,
                    size_t msg)
{
    unsigned node;
    CHECK_MSG(size >= PAGE && size % PAGE == 0, "SIZE %zu is not a multiple of a page", size);
    CHECK_MSG(msg <= 2048, "MSG %zu: at most 2048 bytes", msg);
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg, size, 1);
    struct rseg other;
    rseg_connect(sd, &other, peer, 0, size);
    size_t off = size - 64; /* the counter word, in the last page */
    volatile uint32_t *mine = word_at(own.p, off), *theirs = word_at(other.p, off);
    /* The message lies right below the counter and is copied with memcpy
     * (vector stores) before the counter is stored: when the counter shows,
     * the whole message must be there. */
    uint8_t *msg_theirs = (uint8_t *)other.p + off - msg;
    const uint8_t *msg_mine = (const uint8_t *)own.p + off - msg;
    uint8_t out[2048];
    const char *who = ping ? "ping" : "pong";
    printf("PINGPONG %s READY node=%u peer=%u size=%zu rounds=%u msg=%zu\n", who, node,
           other.node, size, rounds, msg);
    uint64_t t0 = now_ms();
    for (uint32_t i = 1; i <= rounds; i++) {
        if (ping) {
            for (size_t b = 0; b < msg; b++)
                out[b] = pp_byte(i, b);
            memcpy(msg_theirs, out, msg);
            *theirs = i;
        }
        uint32_t v;
        uint64_t deadline = now_ms() + wait_ms;
        int ok = SPIN_UNTIL((v = *mine) == i, deadline);
        v = *mine;
        if (!ok)
            FAILF("%s: round trip %u of %u: no counter %u within %" PRIu64
                  " ms (own counter word holds %u)",
                  who, i, rounds, i, wait_ms, v);
        for (size_t b = 0; b < msg; b++)
            if (msg_mine[b] != pp_byte(i, b))
                FAILF("%s: round trip %u: message byte %zu of %zu is %u, not %u, when the "
                      "counter showed", who, i, b, msg, msg_mine[b], pp_byte(i, b));
        if (!ping) {
            memcpy(out, msg_mine, msg);
            memcpy(msg_theirs, out, msg);
            *theirs = i;
        }
    }
    uint64_t ms = now_ms() - t0;
    printf("PINGPONG %s DONE round_trips=%u ms=%" PRIu64 " (%.1f us per round trip)\n", who,
           rounds, ms, rounds ? 1000.0 * (double)ms / rounds : 0.0);
    rseg_release(&other);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

/* ---- messages of changing shape, no call ------------------------------------------- */

/* Round r's message is shape_words(r) 8-byte words stored one by one with
 * plain stores below the counter, in an order that is not the address
 * order, then the counter: each message has another number of stores than
 * the one before (1 to 6), so a window of combined stores whose end the
 * page's last message predicted closes before or after the message's end
 * (docs/design.md, "Emulated stores are combined"), and runs of more than
 * three stores take the page's twin instead. The pong side checks every
 * word whenever the counter shows, and answers with one store. After the
 * last round the ping side stores one more message and calls exit() at
 * once, with no call and no unmap: it must still arrive.
 *
 * With HOLD, each shape is kept for HOLD rounds instead, two words then
 * one, in turn: a page whose windows ended at their predicted count for
 * many rounds in a row then gets a message one store shorter, which only
 * the window timer's longer wait posts (docs/design.md, "The timer is not
 * free either"). */
#define SHAPE_SLOTS 12u
static uint32_t shape_hold;
static inline unsigned shape_words(uint32_t r)
{
    if (shape_hold)
        return 2u - ((r - 1u) / shape_hold) % 2u;
    return 1u + (r * 7u + r / 3u) % 6u;
}
static inline unsigned shape_slot(uint32_t r, unsigned j) { return (j * 5u + r) % SHAPE_SLOTS; }
static inline uint64_t shape_word(uint32_t r, unsigned j)
{
    return ((uint64_t)r << 32) ^ ((uint64_t)j * 0x9e3779b97f4a7c15ull) ^ 0x5348415045ull;
}

static void shape_send(volatile unsigned char *base, size_t off, uint32_t r)
{
    volatile uint64_t *slots = (volatile uint64_t *)(base + off - 8u * SHAPE_SLOTS);
    for (unsigned j = 0; j < shape_words(r); j++)
        slots[shape_slot(r, j)] = shape_word(r, j);
    *word_at(base, off) = r;
}

static int shapes(int ping, uint32_t rounds, unsigned myseg, const char *peer)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg, PAGE, 1);
    struct rseg other;
    rseg_connect(sd, &other, peer, 0, PAGE);
    size_t off = PAGE - 64;
    volatile uint32_t *mine = word_at(own.p, off);
    const volatile uint64_t *slots = (const volatile uint64_t *)(own.p + off - 8u * SHAPE_SLOTS);
    const char *who = ping ? "ping" : "pong";
    printf("SHAPES %s READY node=%u peer=%u rounds=%u\n", who, node, other.node, rounds);
    fflush(stdout);
    /* The pong side also takes the ping side's message sent before exit. */
    uint32_t last = ping ? rounds : rounds + 1;
    for (uint32_t i = 1; i <= last; i++) {
        if (ping)
            shape_send(other.p, off, i);
        uint32_t v;
        uint64_t deadline = now_ms() + wait_ms;
        int ok = SPIN_UNTIL((v = *mine) == i, deadline);
        v = *mine;
        if (!ok)
            FAILF("shapes %s: round %u of %u: no counter %u within %" PRIu64
                  " ms (own counter word holds %u)", who, i, last, i, wait_ms, v);
        if (!ping) {
            for (unsigned j = 0; j < shape_words(i); j++) {
                uint64_t got = slots[shape_slot(i, j)];
                if (got != shape_word(i, j))
                    FAILF("shapes pong: round %u: word %u of %u (slot %u) is 0x%" PRIx64
                          ", not 0x%" PRIx64 ", when the counter showed", i, j, shape_words(i),
                          shape_slot(i, j), got, shape_word(i, j));
            }
            if (i <= rounds)
                *word_at(other.p, off) = i;
        }
    }
    if (ping) {
        printf("SHAPES ping EXITING after %u rounds, one more message on its way\n", rounds);
        fflush(stdout);
        shape_send(other.p, off, rounds + 1);
        exit(0);
    }
    printf("SHAPES pong DONE rounds=%u and the message stored before exit\n", rounds);
    rseg_release(&other);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

/* ---- runs of stores side by side, no call ------------------------------------------ */

/* The ping side stores runs of adjacent store instructions of every width
 * into the pong side's two-page segment: a byte, a 16-bit and a 32-bit word,
 * a 64-bit word, a 16-byte vector store, one into the other page, and one
 * into its own private memory between them, then the flag (round number) in
 * the highest word, last. The library makes a run of such stores at one
 * fault (docs/design.md, "Single stores are emulated"), stopping at the
 * private store, which the CPU makes, and after three into a page (the rest
 * takes the page's twin). Even rounds take the mixed run, odd rounds five
 * stores into one page in a row. The pong side starts with every byte of its
 * segment RUNS_FILL; when the flag shows, every stored byte must be this
 * round's and every other byte still RUNS_FILL (only bytes stored travel);
 * then it answers with one store. The ping side checks its private word (the
 * thread resumed after the right instructions). */
#define RUNS_FILL 0xeeu
#define RUNS_FLAG (2u * PAGE - 8u)
struct runs_store { unsigned off, len; };
static const struct runs_store runs_even[] = {
    { 100, 1 }, { 102, 2 }, { 104, 4 }, { PAGE + 200, 8 }, { PAGE + 256, 16 }, { 160, 8 },
};
static const struct runs_store runs_odd[] = {
    { 40, 8 }, { 48, 8 }, { 56, 4 }, { 64, 16 }, { 80, 8 },
};
static inline uint8_t runs_byte(uint32_t r, unsigned off) { return (uint8_t)(r * 29u + off * 13u + 3u); }

/* Round r's value of the `len` bytes at `off`, little-endian. */
static inline uint64_t runs_word(uint32_t r, unsigned off, unsigned len)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < len && i < 8; i++)
        v |= (uint64_t)runs_byte(r, off + i) << (8 * i);
    return v;
}

static void runs_send(volatile unsigned char *p, uint32_t r, volatile uint64_t *own)
{
    uint64_t q = runs_word(r, 0, 8);
#if defined(__x86_64__)
    if (r % 2 == 0) {
        __m128i x = _mm_set_epi64x((long long)runs_word(r, PAGE + 264, 8),
                                   (long long)runs_word(r, PAGE + 256, 8));
        /* The pointer operand is "r", and every offset a displacement of it,
         * so that the stores sit side by side as the CPU runs them. */
        __asm__ volatile("movb %b[b], 100(%[p])\n\t"
                         "movw %w[w], 102(%[p])\n\t"
                         "movq %[q], (%[own])\n\t"
                         "movl %k[l], 104(%[p])\n\t"
                         "movq %[d], 4296(%[p])\n\t"
                         "movdqu %[x], 4352(%[p])\n\t"
                         "movq %[e], 160(%[p])\n\t"
                         "movq %[f], 8184(%[p])\n\t"
                         :
                         : [p] "r"(p), [b] "r"(runs_word(r, 100, 1)), [w] "r"(runs_word(r, 102, 2)),
                           [own] "r"(own), [q] "r"(q), [l] "r"(runs_word(r, 104, 4)),
                           [d] "r"(runs_word(r, PAGE + 200, 8)), [x] "x"(x),
                           [e] "r"(runs_word(r, 160, 8)), [f] "r"((uint64_t)r)
                         : "memory");
    } else {
        __m128i x = _mm_set_epi64x((long long)runs_word(r, 72, 8), (long long)runs_word(r, 64, 8));
        __asm__ volatile("movq %[a], 40(%[p])\n\t"
                         "movq %[b], 48(%[p])\n\t"
                         "movl %k[c], 56(%[p])\n\t"
                         "movdqu %[x], 64(%[p])\n\t"
                         "movq %[d], 80(%[p])\n\t"
                         "movq %[q], (%[own])\n\t"
                         "movq %[f], 8184(%[p])\n\t"
                         :
                         : [p] "r"(p), [a] "r"(runs_word(r, 40, 8)), [b] "r"(runs_word(r, 48, 8)),
                           [c] "r"(runs_word(r, 56, 4)), [x] "x"(x), [d] "r"(runs_word(r, 80, 8)),
                           [own] "r"(own), [q] "r"(q), [f] "r"((uint64_t)r)
                         : "memory");
    }
#else
    const struct runs_store *st = r % 2 == 0 ? runs_even : runs_odd;
    size_t n = r % 2 == 0 ? sizeof runs_even / sizeof *st : sizeof runs_odd / sizeof *st;
    for (size_t k = 0; k < n; k++)
        for (unsigned i = 0; i < st[k].len; i++)
            p[st[k].off + i] = runs_byte(r, st[k].off + i);
    *own = q;
    *(volatile uint64_t *)(p + RUNS_FLAG) = r;
#endif
}

/* Round r stored byte `off` (the flag aside). */
static int runs_stored(uint32_t r, unsigned off)
{
    const struct runs_store *st = r % 2 == 0 ? runs_even : runs_odd;
    size_t n = r % 2 == 0 ? sizeof runs_even / sizeof *st : sizeof runs_odd / sizeof *st;
    for (size_t k = 0; k < n; k++)
        if (off >= st[k].off && off < st[k].off + st[k].len)
            return 1;
    return 0;
}

static int runs(int ping, uint32_t rounds, unsigned myseg, const char *peer)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    /* Filled before it is made available: the peer stores at once. */
    struct lseg own = { .size = 2 * PAGE, .segid = myseg };
    sci_error_t err;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &own.seg, myseg, own.size, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, own.p = SCIMapLocalSegment(own.seg, &own.map, 0, own.size, NULL, NO_FLAGS,
                                                  &err));
    for (unsigned i = 0; i < 2 * PAGE; i++)
        own.p[i] = ping ? 0 : RUNS_FILL;
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(own.seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(own.seg, 0, NO_FLAGS, &err));
    struct rseg other;
    rseg_connect(sd, &other, peer, 0, 2 * PAGE);
    volatile uint64_t *flag = (volatile uint64_t *)(own.p + RUNS_FLAG);
    const char *who = ping ? "ping" : "pong";
    printf("RUNS %s READY node=%u peer=%u rounds=%u\n", who, node, other.node, rounds);
    fflush(stdout);
    volatile uint64_t priv = 0;
    for (uint32_t i = 1; i <= rounds; i++) {
        if (ping) {
            runs_send(other.p, i, &priv);
            if (priv != runs_word(i, 0, 8))
                FAILF("runs ping: round %u: the private word between the stores holds 0x%" PRIx64
                      ", not 0x%" PRIx64, i, (uint64_t)priv, runs_word(i, 0, 8));
        }
        uint64_t v;
        uint64_t deadline = now_ms() + wait_ms;
        int ok = SPIN_UNTIL((v = *flag) == i, deadline);
        v = *flag;
        if (!ok)
            FAILF("runs %s: round %u of %u: no flag %u within %" PRIu64 " ms (it holds %" PRIu64 ")",
                  who, i, rounds, i, wait_ms, v);
        if (!ping) {
            for (unsigned off = 0; off < RUNS_FLAG; off++) {
                /* A byte stored in some round keeps its last value until a
                 * later round stores it again. */
                uint32_t last = 0;
                for (uint32_t r = i; r >= 1 && r + 2 > i; r--)
                    if (runs_stored(r, off)) {
                        last = r;
                        break;
                    }
                unsigned want = last ? runs_byte(last, off) : RUNS_FILL;
                unsigned got = own.p[off];
                if (got != want)
                    FAILF("runs pong: round %u: byte %u is 0x%02x, not 0x%02x (%s) when the flag showed",
                          i, off, got, want, last ? "stored" : "never stored");
            }
            *(volatile uint64_t *)(other.p + RUNS_FLAG) = i;
        }
    }
    printf("RUNS %s DONE rounds=%u\n", who, rounds);
    rseg_release(&other);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

/* ---- acknowledgements that lead the replies after them, no call --------------------- */

/* Each side's segment: an acknowledgement word in page ACK_PAGE (0, or the
 * last page with "high"), messages in slots in the other pages. Round i: the
 * ping side sends message i; the pong side, when its flag shows, checks it,
 * stores its acknowledgement (i) into the ping side's segment and replies
 * with message i; the ping side, when the reply's flag shows, must find the
 * acknowledgement already there (it was stored before the reply), checks
 * the reply, acknowledges it and sends message i + 1, and so on. A lone
 * store followed by stores into another page of the map travels in their
 * write (docs/design.md, "Emulated stores are combined"): it must be placed
 * before them, whether its page lies below or above theirs, and whatever
 * the payload's size (8 to 256 bytes here, so windows differ in shape and
 * some payloads cross a page). */
#define ACK_PAGES 4u
static inline size_t acks_payload(uint32_t r) { return 8u << (r % 6u); }
static inline size_t acks_flag_off(uint32_t m, int high)
{
    /* Message m: in one of two slot pages (those without the
     * acknowledgement), its flag 56 + 64 * (m % 3) bytes into the page, so
     * that a larger payload below it crosses into the page before. */
    unsigned page = ((m >> 1) & 1u) + (high ? 1u : 2u);
    return (size_t)page * PAGE + 56u + 64u * (m % 3u);
}
static inline uint64_t acks_word(uint32_t r, size_t w)
{
    return ((uint64_t)r << 32) ^ ((uint64_t)w * 0xd6e8feb86659fd93ull) ^ 0x41434b53ull;
}

static void acks_send(volatile unsigned char *base, uint32_t r, int high)
{
    uint64_t buf[32];
    size_t n = acks_payload(r), flag = acks_flag_off(r, high);
    for (size_t w = 0; w < n / 8; w++)
        buf[w] = acks_word(r, w);
    memcpy((void *)(base + flag - 8 - n), buf, n);
    *(volatile uint64_t *)(base + flag - 8) = (uint64_t)n;
    *(volatile uint64_t *)(base + flag) = r;
}

static int acks(int ping, uint32_t rounds, unsigned myseg, const char *peer, int high)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg, ACK_PAGES * PAGE, 1);
    struct rseg other;
    rseg_connect(sd, &other, peer, 0, ACK_PAGES * PAGE);
    size_t ack_off = high ? (ACK_PAGES - 1u) * PAGE + 128u : 128u;
    volatile uint64_t *my_ack = (volatile uint64_t *)(own.p + ack_off);
    volatile uint64_t *their_ack = (volatile uint64_t *)(other.p + ack_off);
    const char *who = ping ? "ping" : "pong";
    printf("ACKS %s READY node=%u peer=%u rounds=%u ack page %s\n", who, node, other.node,
           rounds, high ? "high" : "low");
    fflush(stdout);
    /* Messages alternate: the ping side sends the odd ones, the pong side
     * the even ones; each side acknowledges what it received, then sends. */
    for (uint32_t r = 1; r <= rounds; r++) {
        uint32_t out = ping ? 2u * r - 1u : 2u * r, want = ping ? 2u * r : 2u * r - 1u;
        if (ping)
            acks_send(other.p, out, high);
        volatile uint64_t *flag = (volatile uint64_t *)(own.p + acks_flag_off(want, high));
        uint64_t deadline = now_ms() + wait_ms;
        if (!SPIN_UNTIL(*flag == want, deadline))
            FAILF("acks %s: message %u: no flag within %" PRIu64 " ms (it holds %" PRIu64 ")",
                  who, want, wait_ms, *flag);
        /* The peer acknowledged the message before this one (this side's)
         * before it stored this one. */
        uint64_t a = *my_ack;
        if (want > 1u && a != want - 1u)
            FAILF("acks %s: message %u's flag showed with the acknowledgement word holding %"
                  PRIu64 ", not %u: the acknowledgement stored before the message arrived "
                  "after it", who, want, a, want - 1u);
        size_t n = acks_payload(want), fo = acks_flag_off(want, high);
        const volatile uint64_t *pay = (const volatile uint64_t *)(own.p + fo - 8 - n);
        if (*(const volatile uint64_t *)(own.p + fo - 8) != n)
            FAILF("acks %s: message %u: header %" PRIu64 ", not %zu", who, want,
                  *(const volatile uint64_t *)(own.p + fo - 8), n);
        for (size_t w = 0; w < n / 8; w++)
            if (pay[w] != acks_word(want, w))
                FAILF("acks %s: message %u: payload word %zu of %zu is 0x%" PRIx64 ", not 0x%"
                      PRIx64 " when the flag showed", who, want, w, n / 8, pay[w],
                      acks_word(want, w));
        *their_ack = want;
        if (!ping)
            acks_send(other.p, out, high);
    }
    printf("ACKS %s DONE rounds=%u\n", who, rounds);
    rseg_release(&other);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

/* ---- flag after payload through a large map ---------------------------------------- */

#define ORDER_PAYLOAD 6144u
/* The payload starts 1 KiB into the third page from the end and spans two
 * pages; the flag is the word right after it. */
static inline size_t order_payload_off(size_t size) { return size - 3 * PAGE + 1024; }
static inline size_t order_flag_off(size_t size) { return order_payload_off(size) + ORDER_PAYLOAD; }
static inline uint32_t order_word(uint32_t r, size_t w)
{
    return (r * 0x9e3779b1u) ^ (uint32_t)(w * 0x85ebca6bu) ^ 0x4f524452u;
}

static int order_recv(uint32_t rounds, size_t size, unsigned myseg, const char *sender)
{
    unsigned node;
    CHECK_MSG(size >= 4 * PAGE && size % PAGE == 0, "SIZE %zu: need whole pages, at least 4",
              size);
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg, size, 1);
    struct rseg ack;
    rseg_connect(sd, &ack, sender, 0, PAGE);
    volatile uint32_t *payload = word_at(own.p, order_payload_off(size));
    volatile uint32_t *flag = word_at(own.p, order_flag_off(size));
    volatile uint32_t *ackw = word_at(ack.p, 0);
    const size_t words = ORDER_PAYLOAD / 4;
    printf("ORDER RECV READY node=%u size=%zu payload at %zu (%u bytes), flag at %zu\n", node,
           size, order_payload_off(size), ORDER_PAYLOAD, order_flag_off(size));
    uint64_t t0 = now_ms();
    for (uint32_t r = 1; r <= rounds; r++) {
        uint32_t f;
        uint64_t deadline = now_ms() + wait_ms;
        int ok = SPIN_UNTIL((f = *flag) == r, deadline);
        f = *flag;
        if (!ok)
            FAILF("receiver: round %u of %u: no flag %u within %" PRIu64
                  " ms (flag word holds %u)",
                  r, rounds, r, wait_ms, f);
        /* The flag says round r: all of round r's payload must be here. */
        size_t bad = 0, first = 0;
        uint32_t first_got = 0;
        for (size_t w = 0; w < words; w++) {
            uint32_t got = payload[w];
            if (got != order_word(r, w)) {
                if (!bad) {
                    first = w;
                    first_got = got;
                }
                bad++;
            }
        }
        if (bad) {
            uint32_t prev = r > 1 ? order_word(r - 1, first) : 0;
            FAILF("receiver: round %u of %u: FLAG BEFORE PAYLOAD: the flag reads %u but %zu of "
                  "%zu payload words are not this round's; the first, word %zu (segment offset "
                  "%zu), is 0x%08x: expected 0x%08x (last round's was 0x%08x)",
                  r, rounds, r, bad, words, first, order_payload_off(size) + 4 * first,
                  first_got, order_word(r, first), prev);
        }
        *ackw = r; /* plain store, no call */
    }
    uint64_t ms = now_ms() - t0;
    printf("ORDER RECV DONE rounds=%u ms=%" PRIu64 ": every flag came after its payload\n",
           rounds, ms);
    rseg_release(&ack);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

static int order_send(uint32_t rounds, unsigned myseg, const char *receiver, int flush)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg, PAGE, 1);
    struct rseg big;
    rseg_connect(sd, &big, receiver, 0, 0); /* the whole segment, one map */
    size_t size = big.size;
    volatile uint32_t *payload = word_at(big.p, order_payload_off(size));
    volatile uint32_t *flag = word_at(big.p, order_flag_off(size));
    volatile uint32_t *ackw = word_at(own.p, 0);
    const size_t words = ORDER_PAYLOAD / 4;
    printf("ORDER SEND READY node=%u receiver=%u map=%zu bytes\n", node, big.node, size);
    uint64_t t0 = now_ms();
    for (uint32_t r = 1; r <= rounds; r++) {
        if (flush) {
            for (size_t w = 0; w < words; w++)
                payload[w] = order_word(r, w);
            SCIFlush(NULL, NO_FLAGS);
        } else {
            /* Downwards, as glibc's memcpy copies page-aligned blocks, and
             * no call: only "the highest changed word of a shipment lands
             * last" keeps the flag behind its payload. */
            for (size_t w = words; w-- > 0;)
                payload[w] = order_word(r, w);
        }
        *flag = r;
        uint32_t a;
        uint64_t deadline = now_ms() + wait_ms;
        int ok = SPIN_UNTIL((a = *ackw) == r, deadline);
        a = *ackw;
        if (!ok)
            FAILF("sender: round %u of %u: no ack %u within %" PRIu64 " ms (ack word holds %u)",
                  r, rounds, r, wait_ms, a);
    }
    uint64_t ms = now_ms() - t0;
    printf("ORDER SEND DONE rounds=%u ms=%" PRIu64 "\n", rounds, ms);
    rseg_release(&big);
    lseg_release(&own, 1);
    close_sd(sd);
    return 0;
}

/* ---- an idle map of a large segment ------------------------------------------------ */

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static int big_owner(unsigned segid, size_t size)
{
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, segid, size, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("BIG READY node=%u seg=0x%x size=%zu\n", node, segid, size);
    while (!stop)
        sleep_ms(50);
    lseg_release(&own, 0);
    close_sd(sd);
    printf("BIG DONE\n");
    return 0;
}

static uint64_t cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_utime.tv_sec * 1000u + (uint64_t)ru.ru_utime.tv_usec / 1000u +
           (uint64_t)ru.ru_stime.tv_sec * 1000u + (uint64_t)ru.ru_stime.tv_usec / 1000u;
}

static int idle_map(const char *target, unsigned seconds)
{
    sci_error_t err;
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct rseg big;
    rseg_connect(sd, &big, target, 0, 0);
    size_t off = big.size / 2 + 123;
    big.p[off] = 0x5a;
    SCIFlush(NULL, NO_FLAGS);
    uint64_t c0 = cpu_ms(), t0 = now_ms();
    printf("IDLE MAPPED node=%u owner=%u map=%zu bytes, one byte stored at %zu and flushed\n",
           node, big.node, big.size, off);
    sleep_ms(seconds * 1000u);
    uint64_t c1 = cpu_ms(), t1 = now_ms();
    printf("IDLE DONE cpu_ms=%" PRIu64 " over %" PRIu64 " ms asleep (%.1f%% of a CPU)\n",
           c1 - c0, t1 - t0, t1 > t0 ? 100.0 * (double)(c1 - c0) / (double)(t1 - t0) : 0.0);
    unsigned char b = 0;
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, &b, big.map, off, 1, SCI_FLAG_BLOCK_READ, &err));
    CHECK_MSG(b == 0x5a, "the byte stored at %zu reads back as 0x%02x, not 0x5a", off, b);
    rseg_release(&big);
    close_sd(sd);
    printf("IDLE RELEASED\n");
    return 0;
}

/* ---- streaming copies ---------------------------------------------------------------- */

/* ITERS times: memcpy SIZE bytes of new data into NODE:SEG's map at OFF
 * and SCIFlush (the thesis's bandwidth method). Then read the segment back
 * with SCI_FLAG_BLOCK_READ: it must hold the last copy, and the bytes of
 * the pages around it that no copy covered must be what they were. */
/* Row "guarded": the source pages, and how often the program's SIGSEGV
 * handler made them readable again. */
static uint8_t *guarded_src;
static size_t guarded_len;
static volatile sig_atomic_t guarded_faults;

static void on_guarded_segv(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    uintptr_t a = (uintptr_t)si->si_addr, lo = (uintptr_t)guarded_src;
    if (guarded_src && a >= lo && a < lo + guarded_len &&
        mprotect(guarded_src, guarded_len, PROT_READ | PROT_WRITE) == 0) {
        guarded_faults++;
        return;
    }
    signal(sig, SIG_DFL); /* a fault of another kind: die of it */
}

/* The optional last word of the stream role: "guarded" or nothing. */
static int stream_guarded(const char *word)
{
    if (!word)
        return 0;
    if (strcmp(word, "guarded") != 0) {
        fprintf(stderr, "t_store stream: the last word must be \"guarded\", not \"%s\"\n", word);
        exit(2);
    }
    return 1;
}

static int stream_copies(const char *target, size_t size, unsigned iters, size_t off, int guarded)
{
    sci_error_t err;
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct rseg r;
    rseg_connect(sd, &r, target, 0, 0);
    CHECK_MSG(size > 0 && off <= r.size && size <= r.size - off, "SIZE %zu at %zu does not fit the %zu-byte segment",
              size, off, r.size);
    /* Whole pages around the copy: what the owner holds there first. */
    size_t lo = off & ~(size_t)4095, hi = (off + size + 4095) & ~(size_t)4095;
    if (hi > r.size)
        hi = r.size;
    uint8_t *buf = malloc(size), *back = malloc(hi - lo), *before = malloc(hi - lo);
    CHECK_MSG(buf && back && before, "out of memory");
    if (guarded) {
        free(buf);
        guarded_len = (size + 4095) & ~(size_t)4095;
        void *m = mmap(NULL, guarded_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK_MSG(m != MAP_FAILED, "mmap of the guarded source failed");
        buf = guarded_src = m;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_guarded_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        CHECK_MSG(sigaction(SIGSEGV, &sa, NULL) == 0, "sigaction SIGSEGV failed");
    }
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, before, r.map, (unsigned)lo, (unsigned)(hi - lo), SCI_FLAG_BLOCK_READ, &err));
    uint64_t t0 = now_us(), copy_us = 0, flush_us = 0;
    for (unsigned i = 1; i <= iters; i++) {
        /* New data each time, every word of it. */
        for (size_t w = 0; w + 8 <= size; w += 8) {
            uint64_t v = (i * 0x0101010101010101ull) ^ (w * 0x9e3779b97f4a7c15ull);
            memcpy(buf + w, &v, 8);
        }
        if (guarded)
            CHECK_MSG(mprotect(buf, guarded_len, PROT_NONE) == 0, "mprotect PROT_NONE failed");
        uint64_t c0 = now_us();
        /* Every other copy a memmove (C++'s std::copy of plain data). */
        if (i & 1)
            memcpy((void *)(r.p + off), buf, size);
        else
            memmove((void *)(r.p + off), buf, size);
        uint64_t c1 = now_us();
        SCIFlush(NULL, NO_FLAGS);
        copy_us += c1 - c0;
        flush_us += now_us() - c1;
    }
    uint64_t us = now_us() - t0;
    if (guarded)
        CHECK_MSG(guarded_faults == (sig_atomic_t)iters, "the source faulted to the program's handler %d times in %u copies",
                  (int)guarded_faults, iters);
    /* And a memset (REP STOSB from 2 KiB on) over the middle half. */
    memset((void *)(r.p + off + size / 4), 0x5a, size / 2);
    memset(buf + size / 4, 0x5a, size / 2);
    /* And an overlapping memmove inside the map, one byte up. */
    memmove((void *)(r.p + off + 1), (const void *)(r.p + off), size - 1);
    memmove(buf + 1, buf, size - 1);
    SCIFlush(NULL, NO_FLAGS);
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, back, r.map, (unsigned)lo, (unsigned)(hi - lo), SCI_FLAG_BLOCK_READ, &err));
    CHECK_MSG(memcmp(buf, back + (off - lo), size) == 0, "the segment does not hold the last copy and memset");
    CHECK_MSG(memcmp(before, back, off - lo) == 0, "bytes in front of the copy changed");
    CHECK_MSG(memcmp(before + (off + size - lo), back + (off + size - lo), hi - (off + size)) == 0,
              "bytes after the copy changed");
    printf("STREAM DONE size=%zu iters=%u %.1f MB/s (per copy: memcpy %.1f us, SCIFlush %.1f us)\n",
           size, iters, us ? (double)size * iters / (double)us : 0.0,
           (double)copy_us / iters, (double)flush_us / iters);
    if (guarded)
        munmap(buf, guarded_len);
    else
        free(buf);
    free(back);
    free(before);
    rseg_release(&r);
    close_sd(sd);
    return 0;
}

/* ---- a map whose segment is lost ------------------------------------------------------ */

/* Map all of NODE:SEG without touching it, wait until the segment is lost
 * (its owner goes away), then store into every page - none of them was
 * ever fetched - read the stores back and flush. Every access must
 * complete on the local shadow (no hang, no signal); SCIMemCpy reports the
 * failure. */
static int lost_map(const char *target)
{
    sci_error_t err;
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct rseg r;
    rseg_connect(sd, &r, target, 0, 0);
    printf("LOST MAPPED node=%u owner=%u map=%zu bytes\n", node, r.node, r.size);
    sci_error_t status;
    sci_segment_cb_reason_t why;
    do {
        EXPECT(SCI_ERR_OK, why = SCIWaitForRemoteSegmentEvent(r.rs, &status, wait_ms, NO_FLAGS, &err));
    } while (why != SCI_CB_LOST);
    printf("LOST EVENT\n");
    for (size_t off = 0; off < r.size; off += 4096)
        r.p[off + (off / 4096) % 4000] = (unsigned char)(off / 4096 + 1);
    for (size_t off = 0; off < r.size; off += 4096)
        CHECK_MSG(r.p[off + (off / 4096) % 4000] == (unsigned char)(off / 4096 + 1),
                  "the store at %zu reads back as 0x%02x", off + (off / 4096) % 4000,
                  r.p[off + (off / 4096) % 4000]);
    SCIFlush(NULL, NO_FLAGS);
    unsigned char b = 7;
    SCIMemCpy(NULL, &b, r.map, 0, 1, NO_FLAGS, &err);
    CHECK_MSG(err != SCI_ERR_OK, "SCIMemCpy to a lost segment succeeded");
    printf("LOST STORES DONE pages=%zu memcpy=%s\n", r.size / 4096, err_name(err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(r.map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(r.rs, NO_FLAGS, &err));
    close_sd(sd);
    return 0;
}

/* ---- stores beside refused ones ----------------------------------------------------- */

/* Map A and B, two segments of one node, and store into both, a word of each
 * in turn, with no call: word (i % nw) of B gets i, and A the same, until A
 * is lost (its owner is killed meanwhile: the stores to A that its node's
 * engine receives after the segment went are refused, and the engine then
 * drops this process's connection, which B's stores share), then ROUNDS
 * more. SCIFlush, then read B back: every word must hold the last value
 * stored into it. (Posted stores sent into a connection that was then
 * dropped are lost on their way; the library must find that and write
 * them again.) */
static int refused_stores(const char *a_target, const char *b_target, unsigned rounds)
{
    sci_error_t err;
    unsigned node;
    sci_desc_t sd = open_sd(&node);
    struct rseg a, b;
    rseg_connect(sd, &a, a_target, 0, 0);
    rseg_connect(sd, &b, b_target, 0, 0);
    size_t nw = b.size / 8 < a.size / 8 ? b.size / 8 : a.size / 8;
    CHECK_MSG(nw > 0, "segments too small");
    uint64_t *expect = calloc(nw, sizeof *expect);
    CHECK_MSG(expect != NULL, "out of memory");
    /* Pages in turn, a new word of each page every pass: every store is
     * the first into its page for a while, as a flag or a counter is. */
    size_t pages = nw / 512 ? nw / 512 : 1;
    printf("REFUSED STORING node=%u a=%u b=%u words=%zu\n", node, a.node, b.node, nw);
    uint64_t i = 0, lost_at = 0, deadline = now_ms() + wait_ms;
    for (;;) {
        i++;
        size_t w = ((i % pages) * 512 + (i / pages) % 512) % nw;
        ((volatile uint64_t *)a.p)[w] = i;
        ((volatile uint64_t *)b.p)[w] = i;
        expect[w] = i;
        if (lost_at == 0 && i % 64 == 0) {
            sci_error_t status;
            if (SCIWaitForRemoteSegmentEvent(a.rs, &status, 0, NO_FLAGS, &err) == SCI_CB_LOST)
                lost_at = i;
            CHECK_MSG(now_ms() < deadline, "A was not lost within %" PRIu64 " ms (%" PRIu64 " stores)", wait_ms, i);
        }
        if (lost_at != 0 && i >= lost_at + rounds)
            break;
    }
    SCIFlush(NULL, NO_FLAGS);
    uint64_t *back = malloc(nw * 8);
    CHECK_MSG(back != NULL, "out of memory");
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, back, b.map, 0, (unsigned)(nw * 8), SCI_FLAG_BLOCK_READ, &err));
    size_t wrong = 0, first = nw;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t w = 0; w < nw; w++)
        if (back[w] != expect[w]) {
            if (wrong++ == 0)
                first = w;
            lo = expect[w] < lo ? expect[w] : lo;
            hi = expect[w] > hi ? expect[w] : hi;
        }
    CHECK_MSG(wrong == 0, "%zu of %zu words of B do not hold their last store (word %zu: 0x%" PRIx64
              ", stored 0x%" PRIx64 "; the stores lost were numbers %" PRIu64 "-%" PRIu64 " of %" PRIu64
              ", A was lost at %" PRIu64 ")", wrong, nw, first, first < nw ? back[first] : 0,
              first < nw ? expect[first] : 0, lo, hi, i, lost_at);
    printf("REFUSED DONE stores=%" PRIu64 " lost_at=%" PRIu64 "\n", i, lost_at);
    free(back);
    free(expect);
    rseg_release(&b);
    SCIUnmapSegment(a.map, NO_FLAGS, &err);
    SCIDisconnectSegment(a.rs, NO_FLAGS, &err);
    close_sd(sd);
    return 0;
}

/* ---- main --------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    roles_init(&argc, &argv, "t_store");
    if (argc < 2) {
        fprintf(stderr,
                "usage: t_store [-wait S] ROLE ...\n"
                "  mbox-owner calls|nocalls ROUNDS SEG W1NODE:W1SEG W2NODE:W2SEG\n"
                "  mbox-writer calls|nocalls ROUNDS K OWNERNODE:OWNERSEG MYSEG\n"
                "  pingpong ping|pong ROUNDS SIZE MYSEG PEERNODE:PEERSEG [MSG]\n"
                "  runs ping|pong ROUNDS MYSEG PEERNODE:PEERSEG\n"
                "  order-recv ROUNDS SIZE MYSEG SENDERNODE:SENDERSEG\n"
                "  order-send ROUNDS MYSEG RECVNODE:RECVSEG [noflush-down]\n"
                "  words-owner ROUNDS SEG WRITERNODE:WRITERSEG [narrow]\n"
                "  words-writer ROUNDS MYSEG OWNERNODE:OWNERSEG [narrow]\n"
                "  halves-owner ROUNDS SEG W1NODE:W1SEG W2NODE:W2SEG\n"
                "  halves-writer ROUNDS K OWNERNODE:OWNERSEG MYSEG\n"
                "  big-owner SEG SIZE\n"
                "  idle-map NODE:SEG SECONDS\n"
                "  stream NODE:SEG SIZE ITERS [OFFSET [guarded]]\n"
                "  lost-map NODE:SEG\n"
                "  refused-stores ANODE:ASEG BNODE:BSEG ROUNDS\n"
                "  shapes ping|pong ROUNDS MYSEG PEERNODE:PEERSEG [HOLD]\n"
                "  acks ping|pong ROUNDS MYSEG PEERNODE:PEERSEG low|high\n");
        return 2;
    }
    const char *role = argv[1];
    check_role = role;
    /* A last-resort watchdog; every wait has its own deadline. */
    alarm(1200);
    if (strcmp(role, "mbox-owner") == 0)
        return mbox_owner(parse_mode(arg(argc, argv, 2)), (uint32_t)argu(argc, argv, 3),
                          (unsigned)argu(argc, argv, 4), arg(argc, argv, 5), arg(argc, argv, 6));
    if (strcmp(role, "mbox-writer") == 0)
        return mbox_writer(parse_mode(arg(argc, argv, 2)), (uint32_t)argu(argc, argv, 3),
                           (unsigned)argu(argc, argv, 4), arg(argc, argv, 5),
                           (unsigned)argu(argc, argv, 6));
    if (strcmp(role, "pingpong") == 0)
        return pingpong(parse_side(role, arg(argc, argv, 2)), (uint32_t)argu(argc, argv, 3),
                        (size_t)argu(argc, argv, 4), (unsigned)argu(argc, argv, 5),
                        arg(argc, argv, 6), argc > 7 ? (size_t)argu(argc, argv, 7) : 0);
    if (strcmp(role, "order-recv") == 0)
        return order_recv((uint32_t)argu(argc, argv, 2), (size_t)argu(argc, argv, 3),
                          (unsigned)argu(argc, argv, 4), arg(argc, argv, 5));
    if (strcmp(role, "order-send") == 0)
        return order_send((uint32_t)argu(argc, argv, 2), (unsigned)argu(argc, argv, 3),
                          arg(argc, argv, 4),
                          argc > 5 && strcmp(argv[5], "noflush-down") == 0 ? 0 : 1);
    if (strcmp(role, "words-owner") == 0)
        return words_owner((uint32_t)argu(argc, argv, 2), (unsigned)argu(argc, argv, 3),
                           arg(argc, argv, 4), argc > 5 && strcmp(argv[5], "narrow") == 0);
    if (strcmp(role, "words-writer") == 0)
        return words_writer((uint32_t)argu(argc, argv, 2), (unsigned)argu(argc, argv, 3),
                            arg(argc, argv, 4), argc > 5 && strcmp(argv[5], "narrow") == 0);
    if (strcmp(role, "halves-owner") == 0)
        return halves_owner((uint32_t)argu(argc, argv, 2), (unsigned)argu(argc, argv, 3),
                            arg(argc, argv, 4), arg(argc, argv, 5));
    if (strcmp(role, "halves-writer") == 0)
        return halves_writer((uint32_t)argu(argc, argv, 2), (unsigned)argu(argc, argv, 3),
                             arg(argc, argv, 4), (unsigned)argu(argc, argv, 5));
    if (strcmp(role, "big-owner") == 0)
        return big_owner((unsigned)argu(argc, argv, 2), (size_t)argu(argc, argv, 3));
    if (strcmp(role, "stream") == 0)
        return stream_copies(arg(argc, argv, 2), (size_t)argu(argc, argv, 3),
                             (unsigned)argu(argc, argv, 4), argc > 5 ? (size_t)argu(argc, argv, 5) : 0,
                             stream_guarded(argc > 6 ? arg(argc, argv, 6) : NULL));
    if (strcmp(role, "idle-map") == 0)
        return idle_map(arg(argc, argv, 2), (unsigned)argu(argc, argv, 3));
    if (strcmp(role, "lost-map") == 0)
        return lost_map(arg(argc, argv, 2));
    if (strcmp(role, "shapes") == 0) {
        shape_hold = argc > 6 ? (uint32_t)argu(argc, argv, 6) : 0;
        return shapes(parse_side(role, arg(argc, argv, 2)), (uint32_t)argu(argc, argv, 3),
                      (unsigned)argu(argc, argv, 4), arg(argc, argv, 5));
    }
    if (strcmp(role, "runs") == 0)
        return runs(parse_side(role, arg(argc, argv, 2)), (uint32_t)argu(argc, argv, 3),
                    (unsigned)argu(argc, argv, 4), arg(argc, argv, 5));
    if (strcmp(role, "acks") == 0)
        return acks(parse_side(role, arg(argc, argv, 2)), (uint32_t)argu(argc, argv, 3),
                    (unsigned)argu(argc, argv, 4), arg(argc, argv, 5),
                    strcmp(arg(argc, argv, 6), "high") == 0);
    if (strcmp(role, "refused-stores") == 0)
        return refused_stores(arg(argc, argv, 2), arg(argc, argv, 3), (unsigned)argu(argc, argv, 4));
    fprintf(stderr, "t_store: unknown role %s\n", role);
    return 2;
}
