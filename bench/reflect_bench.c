/*
 * reflect_bench.c - reflective memory (broadcast segments) against unicast,
 * run by `vsci bench --paths reflective` (crates/vsci-cli/src/bench/reflective.rs)
 * on nodes in network namespaces: a writer on node 1 and 1-3 members.
 *
 *   reflect_bench member SEGID K WRITERNODE:ACKSEG BLOCK NPIO NDMA [unicast]
 *       Creates SEGID (BLOCK bytes of data and a control page) with
 *       SCI_FLAG_BROADCAST (plain with `unicast`), prints "READY", then for
 *       every block the writer sends spins on the flag word in its own
 *       memory, checks the whole block against the pattern it must hold
 *       (every byte changes from one block to the next) and acks through its
 *       map of the writer's ACKSEG.  Then it spins on the stamp word and, for
 *       every new value, records now - value (both CLOCK_MONOTONIC of the one
 *       host the namespaces share): prints "S value delay_ns" lines and
 *       "VIS n=.. p50_us=.. p99_us=..".
 *
 *   reflect_bench writer SEGID ACKSEG MEMBERS BLOCK NPIO NDMA SAMPLES PACE_US [unicast]
 *       MEMBERS: the members' node ids, e.g. 2,3,4.  Connects to the group
 *       (DIS_BROADCAST_NODEID_GROUP_ALL, SCI_FLAG_BROADCAST), or with
 *       `unicast` to the one member's segment, maps it, and:
 *       - PIO: memcpy of BLOCK bytes into the map, SCIFlush, the flag stored
 *         and SCIFlush-ed, until every member acked: NPIO timed blocks;
 *       - DMA: SCIStartDmaTransfer of the block (SCI_FLAG_DMA_GLOBAL |
 *         SCI_FLAG_BROADCAST | SCI_FLAG_DMA_WAIT), the flag as above: NDMA;
 *       - store + SCIFlush of one 8-byte word, SAMPLES times, one every
 *         PACE_US: SCIFlush returns once the word is at every member;
 *       - store-to-visibility: SAMPLES plain 8-byte stores of the clock into
 *         the stamp word, one every PACE_US, no call at all.
 *       Prints "RESULT pio_us=.. pio_MBps=.. dma_us=.. dma_MBps=..
 *       pio_call_us=.. dma_call_us=.. flush_p50_us=.. flush_p99_us=..": per block, the time until every
 *       member had checked it, the bytes per second each member received and
 *       checked, and the time in the writing calls alone (the copy and
 *       SCIFlush, the DMA transfer: the data is at every member when they
 *       return), and the store + SCIFlush percentiles.
 *   Every wait has a deadline (60 s); a failure exits 1 with a message.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sisci_api.h>
#include <sisci_error.h>
#include <sisci_types.h>

#define CTL 4096u
#define FLAG_AT 0u
#define STAMP_AT 64u
#define POKE_AT 128u
#define ACK_STRIDE 64u
#define MAX_MEMBERS 8u
#define WARM 3u
#define DONE 0xFFFFFFFFu
#define END_STAMP UINT64_MAX
#define WAIT_NS 60000000000ull

static const char *role = "?";

#define DIE(...)                                                               \
    do {                                                                       \
        fprintf(stderr, "reflect_bench %s: ", role);                           \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        exit(1);                                                               \
    } while (0)
#define TRY(call)                                                              \
    do {                                                                       \
        sci_error_t err_ = SCI_ERR_OK;                                         \
        sci_error_t *const error = &err_;                                      \
        call;                                                                  \
        if (err_ != SCI_ERR_OK)                                                \
            DIE("%s: error 0x%x (line %d)", #call, (unsigned)err_, __LINE__);  \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spin in a plain loop until `cond`, failing after WAIT_NS. */
#define SPIN(cond, what)                                                       \
    do {                                                                       \
        uint64_t t0_ = now_ns();                                               \
        unsigned n_ = 0;                                                       \
        while (!(cond)) {                                                      \
            __asm__ __volatile__("" ::: "memory");                             \
            if (++n_ == 65536u) {                                              \
                n_ = 0;                                                        \
                if (now_ns() - t0_ > WAIT_NS)                                  \
                    DIE("no %s after 60 s", what);                             \
            }                                                                  \
        }                                                                      \
    } while (0)

/* Block i's bytes: pattern A for odd i, its complement for even i, so every
 * byte changes from one block to the next. */
static unsigned char *make_pattern(size_t block, int odd)
{
    unsigned char *p = malloc(block);
    if (!p)
        DIE("out of memory");
    uint32_t x = 0x12345678u;
    for (size_t i = 0; i < block; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
        if (!odd)
            p[i] = (unsigned char)~p[i];
    }
    return p;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int member(unsigned segid, unsigned k, const char *writer, size_t block, unsigned npio,
                  unsigned ndma, int unicast)
{
    sci_desc_t sd;
    sci_local_segment_t seg;
    sci_map_t map, amap;
    sci_remote_segment_t ack;
    size_t size = block + CTL;
    unsigned wnode, wseg;
    char *end;
    wnode = (unsigned)strtoul(writer, &end, 0);
    if (*end != ':')
        DIE("writer \"%s\" is not NODE:SEG", writer);
    wseg = (unsigned)strtoul(end + 1, NULL, 0);
    TRY(SCIInitialize(0, error));
    TRY(SCIOpen(&sd, 0, error));
    TRY(SCICreateSegment(sd, &seg, segid, size, NULL, NULL, unicast ? 0 : SCI_FLAG_BROADCAST, error));
    volatile unsigned char *mem;
    TRY(mem = SCIMapLocalSegment(seg, &map, 0, size, NULL, 0, error));
    TRY(SCIPrepareSegment(seg, 0, 0, error));
    TRY(SCISetSegmentAvailable(seg, 0, 0, error));
    /* The writer starts once every member is ready, and makes its ack
     * segment then. */
    printf("READY\n");
    fflush(stdout);
    uint64_t t0 = now_ns();
    for (;;) {
        sci_error_t e = SCI_ERR_OK;
        SCIConnectSegment(sd, &ack, wnode, wseg, 0, NULL, NULL, 1000, 0, &e);
        if (e == SCI_ERR_OK)
            break;
        if (now_ns() - t0 > WAIT_NS)
            DIE("cannot connect to the writer's segment %u:0x%x (0x%x)", wnode, wseg, (unsigned)e);
        usleep(20000);
    }
    volatile uint32_t *acks;
    TRY(acks = SCIMapRemoteSegment(ack, &amap, 0, ACK_STRIDE * (MAX_MEMBERS + 1), NULL, 0, error));
    unsigned char *pat[2] = { make_pattern(block, 0), make_pattern(block, 1) };

    volatile uint32_t *flag = (volatile uint32_t *)(mem + block + FLAG_AT);
    unsigned blocks = 2 * WARM + npio + ndma;
    for (uint32_t i = 1; i <= blocks; i++) {
        SPIN(*flag == i, "block");
        if (memcmp((const void *)mem, pat[i & 1], block) != 0)
            DIE("block %u arrived wrong (its flag came first, or bytes were lost)", i);
        acks[k * ACK_STRIDE / 4] = i;
        SCIFlush(NULL, 0);
    }

    volatile uint64_t *stamp = (volatile uint64_t *)(mem + block + STAMP_AT);
    size_t cap = 1 << 16, n = 0;
    uint64_t *vals = malloc(cap * sizeof *vals), *lats = malloc(cap * sizeof *lats);
    uint64_t last = *stamp;
    for (;;) {
        uint64_t v;
        SPIN((v = *stamp) != last, "stamp");
        uint64_t t = now_ns();
        if (v == END_STAMP)
            break;
        if (n < cap) {
            vals[n] = v;
            lats[n] = t > v ? t - v : 0;
            n++;
        }
        last = v;
    }
    for (size_t i = 0; i < n; i++)
        printf("S %llu %llu\n", (unsigned long long)vals[i], (unsigned long long)lats[i]);
    qsort(lats, n, sizeof *lats, cmp_u64);
    if (n)
        printf("VIS n=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f\n", n, lats[n / 2] / 1e3,
               lats[(size_t)(0.99 * (double)(n - 1))] / 1e3, lats[n - 1] / 1e3);
    acks[k * ACK_STRIDE / 4] = DONE;
    SCIFlush(NULL, 0);
    TRY(SCIUnmapSegment(amap, 0, error));
    TRY(SCIDisconnectSegment(ack, 0, error));
    TRY(SCIUnmapSegment(map, 0, error));
    sci_error_t e = SCI_ERR_OK;
    SCIRemoveSegment(seg, 0, &e);
    SCIClose(sd, 0, &e);
    SCITerminate();
    return 0;
}

static int writer(unsigned segid, unsigned ackid, const char *members, size_t block,
                  unsigned npio, unsigned ndma, unsigned samples, unsigned pace_us, int unicast)
{
    sci_desc_t sd;
    sci_local_segment_t ackseg, src;
    sci_map_t ackmap, gmap, srcmap;
    sci_remote_segment_t rs;
    sci_dma_queue_t q;
    unsigned ks[MAX_MEMBERS], nk = 0, nodes[MAX_MEMBERS];
    for (const char *p = members; *p && nk < MAX_MEMBERS;) {
        char *end;
        nodes[nk] = (unsigned)strtoul(p, &end, 10);
        ks[nk] = nk + 1;
        nk++;
        p = *end == ',' ? end + 1 : end;
    }
    if (nk == 0 || (unicast && nk != 1))
        DIE("members \"%s\": one node for unicast, 1..8 for a group", members);
    TRY(SCIInitialize(0, error));
    TRY(SCIOpen(&sd, 0, error));
    size_t acksize = ACK_STRIDE * (MAX_MEMBERS + 1);
    TRY(SCICreateSegment(sd, &ackseg, ackid, acksize, NULL, NULL, 0, error));
    volatile uint32_t *acks;
    TRY(acks = SCIMapLocalSegment(ackseg, &ackmap, 0, acksize, NULL, 0, error));
    TRY(SCIPrepareSegment(ackseg, 0, 0, error));
    TRY(SCISetSegmentAvailable(ackseg, 0, 0, error));
    if (unicast)
        TRY(SCIConnectSegment(sd, &rs, nodes[0], segid, 0, NULL, NULL, 30000, 0, error));
    else
        TRY(SCIConnectSegment(sd, &rs, DIS_BROADCAST_NODEID_GROUP_ALL, segid, 0, NULL, NULL, 30000,
                              SCI_FLAG_BROADCAST, error));
    size_t size = block + CTL;
    if (SCIGetRemoteSegmentSize(rs) < size)
        DIE("segment of %zu bytes, need %zu", SCIGetRemoteSegmentSize(rs), size);
    volatile unsigned char *g;
    TRY(g = SCIMapRemoteSegment(rs, &gmap, 0, size, NULL, unicast ? 0 : SCI_FLAG_BROADCAST, error));
    TRY(SCICreateSegment(sd, &src, ackid + 1, 2 * block, NULL, NULL, SCI_FLAG_DMA_GLOBAL, error));
    unsigned char *s;
    TRY(s = SCIMapLocalSegment(src, &srcmap, 0, 2 * block, NULL, 0, error));
    TRY(SCIPrepareSegment(src, 0, SCI_FLAG_DMA_SOURCE_ONLY, error));
    TRY(SCICreateDMAQueue(sd, &q, 0, 1, 0, error));
    unsigned char *pat[2] = { make_pattern(block, 0), make_pattern(block, 1) };
    memcpy(s, pat[0], block);
    memcpy(s + block, pat[1], block);
    volatile uint32_t *flag = (volatile uint32_t *)(g + block + FLAG_AT);
    unsigned dma_flags = SCI_FLAG_DMA_GLOBAL | SCI_FLAG_DMA_WAIT | (unicast ? 0 : SCI_FLAG_BROADCAST);

    uint32_t i = 0;
    double us[2] = { 0, 0 };
    uint64_t call_ns[2] = { 0, 0 };
    for (int phase = 0; phase < 2; phase++) {
        unsigned timed = phase ? ndma : npio;
        uint64_t t0 = 0;
        for (unsigned b = 0; b < WARM + timed; b++) {
            if (b == WARM)
                t0 = now_ns();
            i++;
            uint64_t c0 = now_ns();
            if (phase == 0) {
                memcpy((void *)g, pat[i & 1], block);
                SCIFlush(NULL, 0);
            } else {
                TRY(SCIStartDmaTransfer(q, src, rs, (i & 1) ? block : 0, block, 0, NULL, NULL,
                                        dma_flags, error));
            }
            if (b >= WARM)
                call_ns[phase] += now_ns() - c0;
            *flag = i;
            SCIFlush(NULL, 0);
            for (unsigned m = 0; m < nk; m++)
                SPIN(acks[ks[m] * ACK_STRIDE / 4] == i, "ack");
        }
        us[phase] = timed ? (double)(now_ns() - t0) / 1e3 / timed : 0;
    }

    /* Store + SCIFlush of one word: SCIFlush returns once the word is in
     * every member's memory (delivery complete), whatever the members'
     * programs are doing. */
    volatile uint64_t *poke = (volatile uint64_t *)(g + block + POKE_AT);
    uint64_t *fl = malloc((samples ? samples : 1) * sizeof *fl);
    for (unsigned n = 0; n < samples; n++) {
        uint64_t t = now_ns();
        *poke = n + 1;
        SCIFlush(NULL, 0);
        fl[n] = now_ns() - t;
        while (now_ns() < t + 1000ull * pace_us)
            __asm__ __volatile__("" ::: "memory");
    }
    qsort(fl, samples, sizeof *fl, cmp_u64);

    volatile uint64_t *stamp = (volatile uint64_t *)(g + block + STAMP_AT);
    for (unsigned n = 0; n < samples; n++) {
        uint64_t t = now_ns();
        *stamp = t;
        while (now_ns() < t + 1000ull * pace_us)
            __asm__ __volatile__("" ::: "memory");
    }
    *stamp = END_STAMP;
    SCIFlush(NULL, 0);
    for (unsigned m = 0; m < nk; m++)
        SPIN(acks[ks[m] * ACK_STRIDE / 4] == DONE, "the members' end");
    printf("RESULT pio_us=%.1f pio_MBps=%.1f dma_us=%.1f dma_MBps=%.1f pio_call_us=%.1f "
           "dma_call_us=%.1f flush_p50_us=%.1f flush_p99_us=%.1f members=%u block=%zu\n",
           us[0], us[0] > 0 ? block / us[0] : 0, us[1], us[1] > 0 ? block / us[1] : 0,
           npio ? call_ns[0] / 1e3 / npio : 0, ndma ? call_ns[1] / 1e3 / ndma : 0,
           samples ? fl[samples / 2] / 1e3 : 0,
           samples ? fl[(size_t)(0.99 * (samples - 1))] / 1e3 : 0, nk, block);
    TRY(SCIRemoveDMAQueue(q, 0, error));
    TRY(SCIUnmapSegment(srcmap, 0, error));
    TRY(SCIRemoveSegment(src, 0, error));
    TRY(SCIUnmapSegment(gmap, 0, error));
    TRY(SCIDisconnectSegment(rs, 0, error));
    TRY(SCIUnmapSegment(ackmap, 0, error));
    sci_error_t e = SCI_ERR_OK;
    SCIRemoveSegment(ackseg, 0, &e);
    SCIClose(sd, 0, &e);
    SCITerminate();
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(900);
    if (argc >= 8 && strcmp(argv[1], "member") == 0) {
        role = "member";
        return member((unsigned)strtoul(argv[2], NULL, 0), (unsigned)strtoul(argv[3], NULL, 0),
                      argv[4], strtoul(argv[5], NULL, 0), (unsigned)strtoul(argv[6], NULL, 0),
                      (unsigned)strtoul(argv[7], NULL, 0), argc > 8 && !strcmp(argv[8], "unicast"));
    }
    if (argc >= 10 && strcmp(argv[1], "writer") == 0) {
        role = "writer";
        return writer((unsigned)strtoul(argv[2], NULL, 0), (unsigned)strtoul(argv[3], NULL, 0),
                      argv[4], strtoul(argv[5], NULL, 0), (unsigned)strtoul(argv[6], NULL, 0),
                      (unsigned)strtoul(argv[7], NULL, 0), (unsigned)strtoul(argv[8], NULL, 0),
                      (unsigned)strtoul(argv[9], NULL, 0), argc > 10 && !strcmp(argv[10], "unicast"));
    }
    fprintf(stderr,
            "usage: reflect_bench member SEGID K WRITERNODE:ACKSEG BLOCK NPIO NDMA [unicast]\n"
            "       reflect_bench writer SEGID ACKSEG MEMBERS BLOCK NPIO NDMA SAMPLES PACE_US "
            "[unicast]\n");
    return 2;
}
