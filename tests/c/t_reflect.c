/*
 * t_reflect.c - roles for the reflective-memory tests
 * (crates/vsci-systest/tests/reflective.rs, issue 18).  Each role is one
 * process on one node of a cluster (VSCI_SOCKET names its node); the harness
 * starts them in the nodes' network namespaces.  Written the way Dolphin's
 * reflective-memory programs are: every member creates a segment with
 * SCI_FLAG_BROADCAST under the group's id and reads its own memory; the
 * writer connects to DIS_BROADCAST_NODEID_GROUP_ALL with SCI_FLAG_BROADCAST
 * and writes through one map (or one DMA queue) to all of them at once.
 * Waits are plain spin loops on the process's own memory.
 *
 *   t_reflect [-wait S] member K ROUNDS GROUP SIZE WRITERNODE:ACKSEG [die-at R|hold S|join]
 *       Member K (1..8) of group GROUP (SIZE bytes).  Prints "MEMBER K
 *       READY" once its segment is available.  Round r = 1..ROUNDS: spins
 *       until the flag word (right after the payload) reads r, checks every
 *       payload word (a function of r and its index: the flag must never show
 *       before the payload it follows, at any member), then stores r into
 *       its ack word of the writer's segment ACKSEG and calls SCIFlush.
 *       It also creates data interrupt number GROUP & 0xffff and, after the
 *       last round, waits for the writer's goodbye on it ("MEMBER K GOT BYE").
 *       With join it joins late: once its segment exists (after the writer's
 *       connect) it says hello in its ack word and waits only for the last
 *       round, which it checks ("MEMBER K JOINED LATE").
 *       With die-at R it kills itself (SIGKILL) once it has seen round R: a
 *       member that dies mid-run.  With hold S (and ROUNDS 0) it only stays a
 *       member for S seconds and then checks that nothing at all arrived
 *       ("MEMBER K UNTOUCHED"): the member on the node of a writer whose map
 *       leaves its own node out.
 *
 *   t_reflect [-wait S] writer ROUNDS GROUP ACKSEG NEED pio|dma|pio-noloop [late K]
 *       Creates ACKSEG (one ack word per member), connects to the group and
 *       each round writes the payload then the flag = r to every member:
 *       pio stores through the group's map (SCIFlush after the payload and
 *       after the flag), dma moves them with SCIStartDmaTransfer
 *       (SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST) from a local segment, the
 *       flag in a 4-byte transfer of its own after the payload's.
 *       pio-noloop maps with SCI_FLAG_NO_MEMORY_LOOPBACK_MAP: a member on the
 *       writer's own node must then receive nothing (a "hold" member).  Then it
 *       spins until every member listed in NEED (e.g. "1,2,3") acked r.
 *       With late K, halfway through it waits for member K's hello (the
 *       harness starts K then), goes on for at least 3 s more (a group finds
 *       members that join within half a second), and needs K's ack for the
 *       last round too.  Prints "WRITER DONE rounds=R ms=T".  Then it connects to that data
 *       interrupt of every member at once (DIS_BROADCAST_NODEID_GROUP_ALL,
 *       SCI_FLAG_BROADCAST) and triggers it once with "BYE".
 */
#include <signal.h>

#include "common/proc.h"
#include "common/roles.h"

#define PAYLOAD 8192u
#define FLAG_OFF PAYLOAD
#define ACK_STRIDE 64u
#define MAX_MEMBERS 8u
/* A late member's first word in its ack slot. */
#define HELLO 0xFFFFFFFFu

static inline uint32_t payload_word(uint32_t r, uint32_t i)
{
    return (r * 0x9E3779B1u) ^ (i * 0x85EBCA77u) ^ 0x5A5A0000u;
}

static int member(unsigned k, uint32_t rounds, unsigned group, size_t size, const char *writer,
                  uint32_t die_at, unsigned hold_s, int join)
{
    uint32_t all_rounds = rounds;
    sci_desc_t sd;
    sci_error_t err;
    sci_local_segment_t seg;
    sci_map_t lmap, amap;
    sci_remote_segment_t ack;
    CHECK_MSG(k >= 1 && k <= MAX_MEMBERS, "member number %u is not 1..%u", k, MAX_MEMBERS);
    CHECK_MSG(size >= PAYLOAD + 4, "group segment of %zu bytes is too small", size);
    EXPECT(SCI_ERR_OK, SCIOpen(&sd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, group, size, NULL, NULL, SCI_FLAG_BROADCAST,
                                        &err));
    volatile uint32_t *mem;
    EXPECT(SCI_ERR_OK, mem = (volatile uint32_t *)SCIMapLocalSegment(seg, &lmap, 0, size, NULL,
                                                                      NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, SCI_FLAG_BROADCAST, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    sci_local_data_interrupt_t bye;
    unsigned intno = group & 0xffffu;
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &bye, 0, &intno, NULL, NULL, SCI_FLAG_FIXED_INTNO,
                                              &err));
    printf("MEMBER %u READY\n", k);

    unsigned wnode, wseg;
    parse_target(writer, &wnode, &wseg);
    uint64_t t0 = now_ms();
    for (;;) {
        err = ERR_SENTINEL;
        SCIConnectSegment(sd, &ack, wnode, wseg, 0, NULL, NULL, 1000, NO_FLAGS, &err);
        if (err == SCI_ERR_OK)
            break;
        CHECK_MSG(now_ms() - t0 < 60000, "SCIConnectSegment(node %u, segment 0x%x): %s", wnode,
                  wseg, err_name(err));
        sleep_ms(50);
    }
    volatile uint32_t *ackp;
    EXPECT(SCI_ERR_OK, ackp = (volatile uint32_t *)SCIMapRemoteSegment(
                           ack, &amap, 0, ACK_STRIDE * (MAX_MEMBERS + 1), NULL, NO_FLAGS, &err));
    volatile uint32_t *flag = mem + FLAG_OFF / 4;
    if (hold_s) {
        sleep_ms(1000u * hold_s);
        for (uint32_t i = 0; i <= PAYLOAD / 4; i++)
            if (mem[i] != 0)
                FAILF("member %u: word %u is 0x%08x: a map without loopback wrote this node's "
                      "member", k, i, mem[i]);
        printf("MEMBER %u UNTOUCHED\n", k);
    }
    if (join) {
        ackp[k * ACK_STRIDE / 4] = HELLO;
        SCIFlush(NULL, NO_FLAGS);
        uint64_t deadline = now_ms() + wait_ms;
        if (!SPIN_UNTIL(*flag == rounds, deadline))
            FAILF("member %u (joined late): the last round %u never arrived: flag reads %u", k,
                  rounds, *flag);
        for (uint32_t i = 0; i < PAYLOAD / 4; i++)
            if (mem[i] != payload_word(rounds, i))
                FAILF("member %u (joined late): last round: payload word %u is 0x%08x, want "
                      "0x%08x", k, i, mem[i], payload_word(rounds, i));
        ackp[k * ACK_STRIDE / 4] = rounds;
        SCIFlush(NULL, NO_FLAGS);
        printf("MEMBER %u JOINED LATE\n", k);
        rounds = 0;
    }
    for (uint32_t r = 1; r <= rounds; r++) {
        uint64_t deadline = now_ms() + wait_ms;
        if (die_at) {
            /* A member nobody waits for: it follows, then dies. */
            if (!SPIN_UNTIL(*flag >= r || *flag >= die_at, deadline))
                FAILF("member %u: round %u: flag reads %u after %llu ms", k, r, *flag,
                      (unsigned long long)wait_ms);
            if (*flag >= die_at) {
                printf("MEMBER %u DIES at round %u\n", k, *flag);
                fflush(stdout);
                raise(SIGKILL);
            }
            continue;
        }
        if (!SPIN_UNTIL(*flag == r, deadline))
            FAILF("member %u: round %u never arrived: flag reads %u after %llu ms", k, r, *flag,
                  (unsigned long long)wait_ms);
        for (uint32_t i = 0; i < PAYLOAD / 4; i++) {
            uint32_t got = mem[i];
            if (got != payload_word(r, i))
                FAILF("member %u: round %u: payload word %u is 0x%08x, want 0x%08x (the flag "
                      "showed before its payload)",
                      k, r, i, got, payload_word(r, i));
        }
        ackp[k * ACK_STRIDE / 4] = r;
        SCIFlush(NULL, NO_FLAGS);
    }
    printf("MEMBER %u DONE rounds=%u\n", k, all_rounds);
    if (!hold_s) {
        char msg[64] = { 0 };
        unsigned len = sizeof msg;
        EXPECT(SCI_ERR_OK, SCIWaitForDataInterrupt(bye, msg, &len, (unsigned)wait_ms, NO_FLAGS,
                                                   &err));
        CHECK_MSG(len == 4 && memcmp(msg, "BYE", 4) == 0, "member %u: goodbye of %u bytes: %.*s",
                  k, len, (int)len, msg);
        printf("MEMBER %u GOT BYE\n", k);
    }
    EXPECT(SCI_ERR_OK, SCIRemoveDataInterrupt(bye, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(amap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(ack, NO_FLAGS, &err));
    /* The writer may still be connected: wait for it to leave before the
     * segment goes (it releases its group connection when it is done). */
    uint64_t deadline = now_ms() + 30000;
    for (;;) {
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(lmap, NO_FLAGS, &err));
        err = ERR_SENTINEL;
        SCIRemoveSegment(seg, NO_FLAGS, &err);
        if (err == SCI_ERR_OK)
            break;
        CHECK_MSG(err == SCI_ERR_BUSY && now_ms() < deadline, "SCIRemoveSegment: %s",
                  err_name(err));
        EXPECT(SCI_ERR_OK, mem = (volatile uint32_t *)SCIMapLocalSegment(seg, &lmap, 0, size,
                                                                          NULL, NO_FLAGS, &err));
        sleep_ms(50);
    }
    SCIClose(sd, NO_FLAGS, &err);
    return 0;
}

static int writer(uint32_t rounds, unsigned group, unsigned ackid, const char *need,
                  const char *mode, unsigned late)
{
    sci_desc_t sd;
    sci_error_t err;
    sci_local_segment_t ackseg, src;
    sci_map_t ackmap, srcmap, gmap = NULL;
    sci_remote_segment_t rs;
    sci_dma_queue_t q = NULL;
    int dma = strcmp(mode, "dma") == 0;
    int noloop = strcmp(mode, "pio-noloop") == 0;
    CHECK_MSG(dma || noloop || strcmp(mode, "pio") == 0, "mode \"%s\" is not pio, dma or pio-noloop",
              mode);
    unsigned needed[MAX_MEMBERS + 1], nneed = 0;
    for (const char *p = need; *p;) {
        char *end;
        unsigned long k = strtoul(p, &end, 10);
        CHECK_MSG(end != p && k >= 1 && k <= MAX_MEMBERS && nneed < MAX_MEMBERS,
                  "NEED \"%s\" is not a list of member numbers", need);
        needed[nneed++] = (unsigned)k;
        p = *end == ',' ? end + 1 : end;
    }
    EXPECT(SCI_ERR_OK, SCIOpen(&sd, NO_FLAGS, &err));
    size_t acksize = ACK_STRIDE * (MAX_MEMBERS + 1);
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &ackseg, ackid, acksize, NULL, NULL, NO_FLAGS, &err));
    volatile uint32_t *acks;
    EXPECT(SCI_ERR_OK, acks = (volatile uint32_t *)SCIMapLocalSegment(ackseg, &ackmap, 0, acksize,
                                                                       NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(ackseg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(ackseg, 0, NO_FLAGS, &err));

    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, DIS_BROADCAST_NODEID_GROUP_ALL, group, 0, NULL,
                                         NULL, 30000, SCI_FLAG_BROADCAST, &err));
    CHECK_MSG(SCIGetRemoteSegmentNodeId(rs) == DIS_BROADCAST_NODEID_GROUP_ALL,
              "a group connection names node %u", SCIGetRemoteSegmentNodeId(rs));
    size_t gsize = SCIGetRemoteSegmentSize(rs);
    CHECK_MSG(gsize >= PAYLOAD + 4, "group segment of %zu bytes", gsize);
    volatile uint32_t *g = NULL;
    uint32_t *s = NULL;
    if (dma) {
        EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &src, ackid + 1, PAYLOAD + 4, NULL, NULL,
                                            SCI_FLAG_DMA_GLOBAL, &err));
        EXPECT(SCI_ERR_OK, s = (uint32_t *)SCIMapLocalSegment(src, &srcmap, 0, PAYLOAD + 4, NULL,
                                                              NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIPrepareSegment(src, 0, SCI_FLAG_DMA_SOURCE_ONLY, &err));
        EXPECT(SCI_ERR_OK, SCICreateDMAQueue(sd, &q, 0, 1, NO_FLAGS, &err));
    } else {
        unsigned mflags = SCI_FLAG_BROADCAST | (noloop ? SCI_FLAG_NO_MEMORY_LOOPBACK_MAP : 0);
        EXPECT(SCI_ERR_OK, g = (volatile uint32_t *)SCIMapRemoteSegment(rs, &gmap, 0, gsize, NULL,
                                                                         mflags, &err));
    }
    uint64_t t0 = now_ms(), hello_at = 0;
    for (uint32_t r = 1; r <= rounds; r++) {
        if (late && r == rounds / 2) {
            printf("WRITER WAITS FOR MEMBER %u\n", late);
            volatile uint32_t *a = acks + late * ACK_STRIDE / 4;
            if (!SPIN_UNTIL(*a == HELLO, now_ms() + wait_ms))
                FAILF("writer: member %u never said hello", late);
            hello_at = now_ms();
        }
        if (late && r == rounds) {
            while (now_ms() < hello_at + 3000)
                sleep_ms(10);
            needed[nneed++] = late;
        }
        if (dma) {
            for (uint32_t i = 0; i < PAYLOAD / 4; i++)
                s[i] = payload_word(r, i);
            s[PAYLOAD / 4] = r;
            unsigned f = SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST | SCI_FLAG_DMA_WAIT;
            EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, src, rs, 0, PAYLOAD, 0, NULL, NULL, f, &err));
            EXPECT(SCI_ERR_OK, SCIStartDmaTransfer(q, src, rs, PAYLOAD, 4, FLAG_OFF, NULL, NULL, f,
                                                   &err));
        } else {
            for (uint32_t i = 0; i < PAYLOAD / 4; i++)
                g[i] = payload_word(r, i);
            SCIFlush(NULL, NO_FLAGS);
            g[FLAG_OFF / 4] = r;
            SCIFlush(NULL, NO_FLAGS);
        }
        uint64_t deadline = now_ms() + wait_ms;
        for (unsigned j = 0; j < nneed; j++) {
            volatile uint32_t *a = acks + needed[j] * ACK_STRIDE / 4;
            if (!SPIN_UNTIL(*a == r, deadline))
                FAILF("writer: round %u: member %u acked only %u after %llu ms", r, needed[j], *a,
                      (unsigned long long)wait_ms);
        }
    }
    printf("WRITER DONE rounds=%u ms=%llu\n", rounds, (unsigned long long)(now_ms() - t0));
    sci_remote_data_interrupt_t bye;
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(sd, &bye, DIS_BROADCAST_NODEID_GROUP_ALL, 0,
                                               group & 0xffffu, 30000, SCI_FLAG_BROADCAST, &err));
    EXPECT(SCI_ERR_OK, SCITriggerDataInterrupt(bye, (void *)"BYE", 4, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(bye, NO_FLAGS, &err));
    if (dma) {
        EXPECT(SCI_ERR_OK, SCIRemoveDMAQueue(q, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(srcmap, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIRemoveSegment(src, NO_FLAGS, &err));
    } else {
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(gmap, NO_FLAGS, &err));
    }
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    /* Members disconnect from the ack segment once done. */
    uint64_t deadline = now_ms() + 30000;
    for (;;) {
        err = ERR_SENTINEL;
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(ackmap, NO_FLAGS, &err));
        SCIRemoveSegment(ackseg, NO_FLAGS, &err);
        if (err == SCI_ERR_OK)
            break;
        CHECK_MSG(err == SCI_ERR_BUSY && now_ms() < deadline, "SCIRemoveSegment: %s",
                  err_name(err));
        EXPECT(SCI_ERR_OK, acks = (volatile uint32_t *)SCIMapLocalSegment(
                               ackseg, &ackmap, 0, acksize, NULL, NO_FLAGS, &err));
        sleep_ms(50);
    }
    SCIClose(sd, NO_FLAGS, &err);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    roles_init(&argc, &argv, "t_reflect");
    if (argc < 2) {
        fprintf(stderr, "usage: t_reflect [-wait S] ROLE ...\n"
                        "  member K ROUNDS GROUP SIZE WRITERNODE:ACKSEG [die-at R | hold S | join]\n"
                        "  writer ROUNDS GROUP ACKSEG NEED pio|dma|pio-noloop [late K]\n");
        return 2;
    }
    const char *role = argv[1];
    check_role = role;
    alarm(1200);
    if (strcmp(role, "member") == 0) {
        uint32_t die_at = 0;
        unsigned hold = 0;
        if (argc > 8 && strcmp(argv[7], "die-at") == 0)
            die_at = (uint32_t)argu(argc, argv, 8);
        if (argc > 8 && strcmp(argv[7], "hold") == 0)
            hold = (unsigned)argu(argc, argv, 8);
        int join = argc > 7 && strcmp(argv[7], "join") == 0;
        return member((unsigned)argu(argc, argv, 2), (uint32_t)argu(argc, argv, 3),
                      (unsigned)argu(argc, argv, 4), argu(argc, argv, 5), arg(argc, argv, 6),
                      die_at, hold, join);
    }
    if (strcmp(role, "writer") == 0) {
        unsigned late = 0;
        if (argc > 8 && strcmp(argv[7], "late") == 0)
            late = (unsigned)argu(argc, argv, 8);
        return writer((uint32_t)argu(argc, argv, 2), (unsigned)argu(argc, argv, 3),
                      (unsigned)argu(argc, argv, 4), arg(argc, argv, 5), arg(argc, argv, 6), late);
    }
    fprintf(stderr, "t_reflect: unknown role \"%s\"\n", role);
    return 2;
}
