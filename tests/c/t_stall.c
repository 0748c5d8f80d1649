/*
 * t_stall.c - roles for the stall system tests
 * (crates/vsci-systest/tests/stalls.rs): a writer on one node stores a
 * counter into a segment of another node while the harness pauses a node
 * (SIGSTOP) or cuts its link, and the owner checks that every store
 * arrived.
 *
 * Layout of the owner's segment (PAGE + N * 4 bytes, rounded up):
 *   page 0, word 0   magic, written by the owner when it is ready;
 *           word 1   verdict, written by the owner: 1 = every store arrived;
 *           word 16  the writer's counter: stores made so far (i + 1);
 *           word 17  the writer's acknowledgement of the verdict (0xACED);
 *   page 1...        slot[i] = i + 1, one slot per store: a store lost is a
 *                    slot that never holds its value.
 *
 *   t_stall owner SEG N
 *       creates the segment, prints "OWNER READY", then waits until the
 *       counter is N and every slot holds its value ("OWNER VERIFIED
 *       stores=N"; verdict 1), then for the writer's acknowledgement
 *       ("OWNER DONE").  If nothing new arrives for 120 s it prints "OWNER
 *       LOST missing=K first=I counter=C" and fails.
 *   t_stall write NODE SEG N flush|noflush [expect-lost]
 *       connects (with a segment callback that prints "EVENT reason=R
 *       status=S"), maps the whole segment, starts a map sequence, prints
 *       "WRITER STORING", then makes N rounds of: slot[i] = i + 1, counter =
 *       i + 1 (with `flush` also SCIFlush), sleep 1 ms.  Prints "WRITER
 *       STORED n=N ms=T", waits for the verdict (a remote load; up to 180 s),
 *       checks the sequence (must be SCI_SEQ_OK), reads the slots back with
 *       SCIMemCpy and compares, prints "WRITER ACK events=E lost=L" and
 *       acknowledges (the owner may then remove its segment before we
 *       disconnect: a LOST after this line is that race): "WRITER DONE".
 *       With expect-lost the owner's node is declared dead meanwhile: after
 *       storing, the writer waits for SCI_CB_LOST, then SCIFlush must
 *       return and SCICheckSequence must not say SCI_SEQ_OK: "WRITER SAW
 *       LOST seq=Q err=E".
 *   t_stall link NODE
 *       prints what a program can ask about the links: "LINK operational=O
 *       hw_ok=H probe=P err=E" (SCIQuery SCI_Q_ADAPTER_LINK_OPERATIONAL and
 *       SCI_Q_ADAPTER_HW_LINK_STATUS_IS_OK, SCIProbeNode of NODE).
 */
#include <signal.h>
#include <stdatomic.h>

#include "common/proc.h"

#define STALL_MAGIC 0x5354414cu            /* "STAL" */
#define PAGE 4096u
#define W_MAGIC 0
#define W_VERDICT 1
#define W_COUNT 16
#define W_ACK 17
#define ACK 0xACEDu

static size_t seg_size(unsigned int n)
{
    size_t sz = PAGE + (size_t)n * 4;
    return (sz + PAGE - 1) / PAGE * PAGE;
}

static int owner(unsigned int segid, unsigned int n)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    sci_map_t map;
    size_t size = seg_size(n);
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, segid, size, NULL, NULL, NO_FLAGS, &err));
    volatile uint32_t *base;
    EXPECT(SCI_ERR_OK, base = (volatile uint32_t *)SCIMapLocalSegment(seg, &map, 0, size, NULL,
                                                                      NO_FLAGS, &err));
    volatile uint32_t *slot = base + PAGE / 4;
    base[W_MAGIC] = STALL_MAGIC;
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    printf("OWNER READY node=%u seg=%u stores=%u\n", node, segid, n);
    fflush(stdout);

    /* Slots fill in order; `good` is how many leading slots hold their
     * value. A pause or a cut only delays them. */
    unsigned int good = 0;
    uint64_t last_progress = now_ms();
    for (;;) {
        while (good < n && slot[good] == good + 1)
            good++;
        uint32_t count = base[W_COUNT];
        if (good == n && count == n)
            break;
        if (good > 0 && slot[good - 1] != good)
            FAILF("slot %u changed from %u to %u", good - 1, good, slot[good - 1]);
        static unsigned int last_good;
        if (good != last_good) {
            last_good = good;
            last_progress = now_ms();
        }
        if (now_ms() - last_progress > 120000) {
            unsigned int missing = 0, first = n;
            for (unsigned int i = 0; i < n; i++) {
                if (slot[i] != i + 1) {
                    missing++;
                    if (first == n)
                        first = i;
                }
            }
            printf("OWNER LOST missing=%u first=%u counter=%u\n", missing, first, count);
            fflush(stdout);
            return 1;
        }
        sleep_ms(1);
    }
    printf("OWNER VERIFIED stores=%u\n", n);
    fflush(stdout);
    base[W_VERDICT] = 1;
    WAIT_UNTIL(base[W_ACK] == ACK, 180000);
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
    printf("OWNER DONE\n");
    return 0;
}

static atomic_int events, lost;

static sci_callback_action_t on_segment(void *arg, sci_remote_segment_t s,
                                        sci_segment_cb_reason_t reason, sci_error_t status)
{
    (void)arg;
    (void)s;
    atomic_fetch_add(&events, 1);
    if (reason == SCI_CB_LOST)
        atomic_store(&lost, 1);
    printf("EVENT reason=%d status=%s at %" PRIu64 " ms\n", (int)reason, err_name(status), now_ms());
    fflush(stdout);
    return SCI_CALLBACK_CONTINUE;
}

static int writer(unsigned int owner_node, unsigned int segid, unsigned int n, int flush,
                  int expect_lost)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs;
    sci_map_t map;
    sci_sequence_t seq;
    size_t size = seg_size(n);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, owner_node, segid, 0, on_segment, NULL, 60000,
                                         SCI_FLAG_USE_CALLBACK, &err));
    volatile uint32_t *base;
    EXPECT(SCI_ERR_OK, base = (volatile uint32_t *)SCIMapRemoteSegment(rs, &map, 0, size, NULL,
                                                                       NO_FLAGS, &err));
    volatile uint32_t *slot = base + PAGE / 4;
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(map, &seq, NO_FLAGS, &err));
    sci_sequence_status_t st;
    do {
        st = SCIStartSequence(seq, NO_FLAGS, &err);
    } while (st != SCI_SEQ_OK);
    WAIT_UNTIL(base[W_MAGIC] == STALL_MAGIC, 60000);
    printf("WRITER STORING node=%u owner=%u stores=%u %s\n", node, owner_node, n,
           flush ? "flush" : "noflush");
    fflush(stdout);
    uint64_t t0 = now_ms();
    for (unsigned int i = 0; i < n; i++) {
        slot[i] = i + 1;
        base[W_COUNT] = i + 1;
        if (flush)
            SCIFlush(NULL, NO_FLAGS);
        sleep_ms(1);
    }
    printf("WRITER STORED n=%u ms=%" PRIu64 "\n", n, now_ms() - t0);
    fflush(stdout);

    if (expect_lost) {
        /* The owner's node is declared dead: the connection is lost, a
         * flush returns, and the sequence says the stores may be lost. */
        WAIT_UNTIL(atomic_load(&lost), 300000);
        SCIFlush(NULL, NO_FLAGS);
        st = SCICheckSequence(seq, NO_FLAGS, &err);
        printf("WRITER SAW LOST seq=%d err=%s\n", (int)st, err_name(err));
        fflush(stdout);
        CHECK_MSG(st != SCI_SEQ_OK, "SCICheckSequence returned SCI_SEQ_OK after the node died");
        CHECK_MSG(err != SCI_ERR_OK, "SCICheckSequence reported SCI_ERR_OK after the node died");
        SCIRemoveSequence(seq, NO_FLAGS, &err);
        SCIUnmapSegment(map, NO_FLAGS, &err);
        SCIDisconnectSegment(rs, NO_FLAGS, &err);
        close_sd(sd);
        printf("WRITER DONE events=%d\n", atomic_load(&events));
        return 0;
    }

    WAIT_UNTIL(base[W_VERDICT] == 1, 180000);
    st = SCICheckSequence(seq, NO_FLAGS, &err);
    CHECK_ERR(err, SCI_ERR_OK);
    CHECK_MSG(st == SCI_SEQ_OK, "SCICheckSequence returned %d", (int)st);
    /* The connection still works both ways after the stall. */
    uint32_t *back = malloc((size_t)n * 4);
    CHECK_MSG(back != NULL, "malloc");
    EXPECT(SCI_ERR_OK, SCIMemCpy(seq, back, map, PAGE, (size_t)n * 4, SCI_FLAG_BLOCK_READ, &err));
    for (unsigned int i = 0; i < n; i++)
        CHECK_MSG(back[i] == i + 1, "slot %u reads back %u", i, back[i]);
    free(back);
    /* Events after the acknowledgement are the owner's clean-up racing our
     * disconnect (a LOST when it removes the segment first): not judged. */
    printf("WRITER ACK events=%d lost=%d\n", atomic_load(&events), atomic_load(&lost));
    fflush(stdout);
    base[W_ACK] = ACK;
    SCIFlush(NULL, NO_FLAGS);
    /* The owner removes its segment once it sees the acknowledgement, which
     * it checks itself: this check may find the segment gone already (a
     * guest's slower calls made that race show), never any other error. */
    st = SCICheckSequence(seq, NO_FLAGS, &err);
    CHECK_MSG(err == SCI_ERR_OK || err == SCI_ERR_TRANSFER_FAILED, "SCICheckSequence after the acknowledgement: %s",
              SCIGetErrorString(err));
    EXPECT(SCI_ERR_OK, SCIRemoveSequence(seq, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    close_sd(sd);
    printf("WRITER DONE events=%d\n", atomic_load(&events));
    return 0;
}

static unsigned int arg_u(char **argv, int i)
{
    return (unsigned int)strtoul(argv[i], NULL, 0);
}

static int link_state(unsigned int node)
{
    sci_error_t err;
    unsigned int operational = 99, hw_ok = 99;
    sci_query_adapter_t q;
    sci_desc_t sd = open_sd(NULL);
    q.localAdapterNo = 0;
    q.subcommand = SCI_Q_ADAPTER_LINK_OPERATIONAL;
    q.data = &operational;
    SCIQuery(SCI_Q_ADAPTER, &q, NO_FLAGS, &err);
    CHECK_EQ(err, SCI_ERR_OK);
    q.subcommand = SCI_Q_ADAPTER_HW_LINK_STATUS_IS_OK;
    q.data = &hw_ok;
    SCIQuery(SCI_Q_ADAPTER, &q, NO_FLAGS, &err);
    CHECK_EQ(err, SCI_ERR_OK);
    int probe = SCIProbeNode(sd, 0, node, NO_FLAGS, &err);
    printf("LINK operational=%u hw_ok=%u probe=%d err=%s\n", operational, hw_ok, probe,
           SCIGetErrorString(err));
    close_sd(sd);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 4 && strcmp(argv[1], "owner") == 0)
        return owner(arg_u(argv, 2), arg_u(argv, 3));
    if (argc >= 6 && strcmp(argv[1], "write") == 0)
        return writer(arg_u(argv, 2), arg_u(argv, 3), arg_u(argv, 4),
                      strcmp(argv[5], "noflush") != 0,
                      argc >= 7 && strcmp(argv[6], "expect-lost") == 0);
    if (argc >= 3 && strcmp(argv[1], "link") == 0)
        return link_state(arg_u(argv, 2));
    fprintf(stderr, "usage: t_stall owner SEG N | t_stall write NODE SEG N flush|noflush [expect-lost] | "
                    "t_stall link NODE\n");
    return 2;
}
