/*
 * t_maps.c - docs/api.md "Maps" and "Moving data and ordering":
 *   SCIMapLocalSegment, SCIMapRemoteSegment, SCIUnmapSegment (offsets, sizes,
 *   partial / repeated / overlapping maps showing the same memory in every
 *   process, SCI_FLAG_READONLY_MAP, SCI_FLAG_FIXED_MAP_ADDR, hint flags),
 *   SCIMemCpy (write and SCI_FLAG_BLOCK_READ), SCIMemWrite, SCIFlush,
 *   SCIStoreBarrier, SCICacheSync and the sequence calls, with their errors.
 */
#include <sys/mman.h>

#include "common/proc.h"

#define WAIT_LONG 30000u

static sci_local_segment_t make_segment(sci_desc_t sd, unsigned int id, size_t size)
{
    sci_error_t err;
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, id, size, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    return seg;
}

static sci_remote_segment_t connect_segment(sci_desc_t sd, unsigned int node, unsigned int id)
{
    sci_error_t err;
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, id, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    return rs;
}

static unsigned char pat(size_t off, unsigned seed)
{
    return (unsigned char)((off * 131u) ^ (off >> 9) ^ seed);
}

static const unsigned int hint_flags[] = {
    SCI_FLAG_SHARED_MAP, SCI_FLAG_IO_MAP_IOSPACE, SCI_FLAG_READ_PREFETCH_AGGR_HOLD_MAP,
    SCI_FLAG_READ_PREFETCH_NO_HOLD_MAP, SCI_FLAG_WRITES_DISABLE_GATHER_MAP,
    SCI_FLAG_NO_MEMORY_LOOPBACK_MAP,
    SCI_FLAG_SHARED_MAP | SCI_FLAG_IO_MAP_IOSPACE | SCI_FLAG_READ_PREFETCH_AGGR_HOLD_MAP |
        SCI_FLAG_READ_PREFETCH_NO_HOLD_MAP | SCI_FLAG_WRITES_DISABLE_GATHER_MAP |
        SCI_FLAG_NO_MEMORY_LOOPBACK_MAP | SCI_FLAG_READONLY_MAP,
};

/* Map errors and accepted flags, on a local and a remote segment. */
static void map_errors(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x4001, 16384);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4001);
    sci_map_t map;
    volatile void *a;

    for (int remote = 0; remote < 2; remote++) {
#define MAP(off, size, flags)                                                  \
        (remote ? SCIMapRemoteSegment(rs, &map, (off), (size), NULL, (flags), &err) \
                : SCIMapLocalSegment(seg, &map, (off), (size), NULL, (flags), &err))
        printf("%s segment\n", remote ? "remote" : "local");
        EXPECT(SCI_ERR_ILLEGAL_PARAMETER, MAP(0, 0, NO_FLAGS));
        EXPECT(SCI_ERR_ILLEGAL_PARAMETER, MAP(100, 0, NO_FLAGS));
        EXPECT(SCI_ERR_OUT_OF_RANGE, MAP(0, 16385, NO_FLAGS));
        EXPECT(SCI_ERR_OUT_OF_RANGE, MAP(16384, 1, NO_FLAGS));
        EXPECT(SCI_ERR_OUT_OF_RANGE, MAP(1, 16384, NO_FLAGS));
        EXPECT(SCI_ERR_OUT_OF_RANGE, MAP(16383, 2, NO_FLAGS));
        EXPECT(SCI_ERR_OUT_OF_RANGE, MAP((size_t)-1, 2, NO_FLAGS));
        EXPECT(SCI_ERR_OUT_OF_RANGE, MAP(4096, (size_t)-4096, NO_FLAGS));
        EXPECT(SCI_ERR_ILLEGAL_FLAG, MAP(0, 4096, BAD_FLAG));
        EXPECT(SCI_ERR_ILLEGAL_FLAG, MAP(0, 4096, SCI_FLAG_READONLY_MAP | BAD_FLAG));
        if (remote)
            EXPECT_FAIL(SCIMapRemoteSegment(rs, NULL, 0, 4096, NULL, NO_FLAGS, &err));
        else
            EXPECT_FAIL(SCIMapLocalSegment(seg, NULL, 0, 4096, NULL, NO_FLAGS, &err));
        /* The whole segment, the last byte. */
        EXPECT(SCI_ERR_OK, a = MAP(0, 16384, NO_FLAGS));
        CHECK(a != NULL);
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, a = MAP(16383, 1, NO_FLAGS));
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
        /* Hint flags are accepted. */
        for (size_t i = 0; i < sizeof hint_flags / sizeof hint_flags[0]; i++) {
            err = ERR_SENTINEL;
            a = MAP(0, 4096, hint_flags[i]);
            CHECK_MSG(err == SCI_ERR_OK, "map flags 0x%x: %s", hint_flags[i], err_name(err));
            CHECK(a != NULL);
            (void)*(volatile char *)a;
            EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
        }
#undef MAP
    }
    /* Unmap errors. */
    EXPECT(SCI_ERR_OK, a = SCIMapLocalSegment(seg, &map, 0, 4096, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIUnmapSegment(map, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIUnmapSegment(NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* Flags docs/api.md does not list for maps (real SISCI flags of other
 * calls, or for hardware features) give SCI_ERR_ILLEGAL_FLAG. */
static void map_unlisted_flags(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x4002, 4096);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4002);
    sci_map_t map;
    /* docs/api.md: real SISCI map flags vsci does not offer give
     * SCI_ERR_FLAG_NOT_IMPLEMENTED, hint flags are accepted, any other bit
     * gives SCI_ERR_ILLEGAL_FLAG. */
    static const struct { unsigned int flag; const char *name; sci_error_t want; } cases[] = {
        { SCI_FLAG_LOCK_OPERATION, "SCI_FLAG_LOCK_OPERATION", SCI_ERR_FLAG_NOT_IMPLEMENTED },
        { SCI_FLAG_CONDITIONAL_INTERRUPT_MAP, "SCI_FLAG_CONDITIONAL_INTERRUPT_MAP", SCI_ERR_FLAG_NOT_IMPLEMENTED },
        { SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP, "SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP", SCI_ERR_FLAG_NOT_IMPLEMENTED },
        { SCI_FLAG_BROADCAST, "SCI_FLAG_BROADCAST (no effect on a unicast map)", SCI_ERR_OK },
        { SCI_FLAG_NO_MEMORY_LOOPBACK_MAP, "SCI_FLAG_NO_MEMORY_LOOPBACK_MAP", SCI_ERR_OK },
        { SCI_FLAG_DMOVE_MAP, "SCI_FLAG_DMOVE_MAP", SCI_ERR_OK },
        { SCI_FLAG_SHARED_MAP | SCI_FLAG_IO_MAP_IOSPACE, "SCI_FLAG_SHARED_MAP|SCI_FLAG_IO_MAP_IOSPACE", SCI_ERR_OK },
        { 0x40000000u, "0x40000000 (no such flag)", SCI_ERR_ILLEGAL_FLAG },
        { 0x00100000u, "0x00100000 (not a map flag)", SCI_ERR_ILLEGAL_FLAG },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int remote = 0; remote < 2; remote++) {
            err = ERR_SENTINEL;
            if (remote)
                SCIMapRemoteSegment(rs, &map, 0, 4096, NULL, cases[i].flag, &err);
            else
                SCIMapLocalSegment(seg, &map, 0, 4096, NULL, cases[i].flag, &err);
            sci_error_t got = err;
            if (got == SCI_ERR_OK)
                EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
            if (got == cases[i].want)
                continue;
            fprintf(stderr, "%s:%d: SCIMap%sSegment with %s: expected %s, got %s\n", __FILE__,
                    __LINE__, remote ? "Remote" : "Local", cases[i].name,
                    err_name(cases[i].want), err_name(got));
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d map calls did not treat a flag as docs/api.md says", bad);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

#define SEG_SZ (1u << 20)

/* Every map, in every process, shows the same memory. */
static void same_memory_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x4010, SEG_SZ);
    sci_map_t full, part;
    volatile unsigned char *m, *q;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &full, 0, SEG_SZ, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, q = SCIMapLocalSegment(seg, &part, 12345, 70000, NULL, NO_FLAGS, &err));
    for (size_t i = 0; i < SEG_SZ; i++)
        m[i] = pat(i, 1);
    for (size_t i = 0; i < 70000; i++)
        CHECK_MSG(q[i] == pat(12345 + i, 1), "local partial map offset %zu", i);
    peer_barrier(p);         /* B checks and writes */
    peer_barrier(p);
    for (size_t i = 0; i < SEG_SZ; i++) {
        unsigned char want = (i >= 4097 && i < 4097 + 100000) ? pat(i, 2) : pat(i, 1);
        if (i >= SEG_SZ - 10)
            want = 0xee;
        CHECK_MSG(m[i] == want, "offset %zu: 0x%02x, want 0x%02x", i, m[i], want);
    }
    for (size_t i = 0; i < 70000; i++)
        CHECK(q[i] == m[12345 + i]);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(part, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(full, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void same_memory_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4010);
    CHECK_EQ(SCIGetRemoteSegmentSize(rs), SEG_SZ);
    /* A full map twice (repeated), partial maps at odd offsets, overlapping. */
    struct { size_t off, size; sci_map_t map; volatile unsigned char *a; } maps[] = {
        { 0, SEG_SZ, NULL, NULL },
        { 0, SEG_SZ, NULL, NULL },
        { 4097, 100000, NULL, NULL },
        { 1, 4095, NULL, NULL },
        { 50000, 60000, NULL, NULL },      /* overlaps the 4097 map */
        { SEG_SZ - 10, 10, NULL, NULL },   /* the tail */
        { 4097, 100000, NULL, NULL },      /* same range again */
    };
    const size_t nmaps = sizeof maps / sizeof maps[0];
    for (size_t k = 0; k < nmaps; k++)
        EXPECT(SCI_ERR_OK, maps[k].a = SCIMapRemoteSegment(rs, &maps[k].map, maps[k].off,
                                                           maps[k].size, NULL, NO_FLAGS, &err));
    CHECK(maps[0].a != maps[1].a);
    peer_barrier(p);
    for (size_t k = 0; k < nmaps; k++)
        for (size_t i = 0; i < maps[k].size; i++)
            CHECK_MSG(maps[k].a[i] == pat(maps[k].off + i, 1),
                      "map %zu (offset %zu): byte %zu is 0x%02x, want 0x%02x", k, maps[k].off,
                      i, maps[k].a[i], pat(maps[k].off + i, 1));
    /* Write through one partial map, read through the overlapping ones. */
    for (size_t i = 0; i < 100000; i++)
        maps[2].a[i] = pat(4097 + i, 2);
    for (size_t i = 0; i < 60000; i++) {
        size_t off = 50000 + i;
        unsigned char want = off < 4097 + 100000 ? pat(off, 2) : pat(off, 1);
        CHECK_MSG(maps[4].a[i] == want, "overlapping map byte %zu", off);
    }
    for (size_t i = 0; i < 100000; i++) {
        CHECK(maps[6].a[i] == pat(4097 + i, 2));
        CHECK(maps[0].a[4097 + i] == pat(4097 + i, 2));
    }
    for (size_t i = 0; i < 10; i++)
        maps[5].a[i] = 0xee;
    CHECK_EQ(maps[1].a[SEG_SZ - 1], 0xee);
    SCIStoreBarrier(NULL, NO_FLAGS);
    /* Many maps of one segment. */
    sci_map_t many[64];
    for (int i = 0; i < 64; i++) {
        volatile unsigned char *a;
        EXPECT(SCI_ERR_OK, a = SCIMapRemoteSegment(rs, &many[i], (size_t)i * 16384, 16384, NULL,
                                                   NO_FLAGS, &err));
        CHECK(a[0] == maps[0].a[(size_t)i * 16384]);
    }
    for (int i = 0; i < 64; i++)
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(many[i], NO_FLAGS, &err));
    peer_barrier(p);
    for (size_t k = 0; k < nmaps; k++)
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(maps[k].map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* Any offset: the pointer is the byte at that offset. */
static void unaligned_offsets(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    const size_t size = 3 * 4096 + 123;
    sci_local_segment_t seg = make_segment(sd, 0x4020, size);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4020);
    sci_map_t full, map;
    volatile unsigned char *m, *a;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &full, 0, size, NULL, NO_FLAGS, &err));
    for (size_t i = 0; i < size; i++)
        m[i] = pat(i, 3);
    size_t offs[] = { 1, 7, 4095, 4096, 4097, 8191, size - 1 };
    for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
        size_t len = size - offs[k] < 10 ? size - offs[k] : 10;
        EXPECT(SCI_ERR_OK, a = SCIMapLocalSegment(seg, &map, offs[k], len, NULL, NO_FLAGS, &err));
        for (size_t i = 0; i < len; i++)
            CHECK_MSG(a[i] == pat(offs[k] + i, 3), "local map at %zu, byte %zu", offs[k], i);
        a[0] ^= 0xff;
        CHECK_EQ(m[offs[k]], (unsigned char)(pat(offs[k], 3) ^ 0xff));
        a[0] ^= 0xff;
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, a = SCIMapRemoteSegment(rs, &map, offs[k], len, NULL, NO_FLAGS, &err));
        for (size_t i = 0; i < len; i++)
            CHECK_MSG(a[i] == pat(offs[k] + i, 3), "remote map at %zu, byte %zu", offs[k], i);
        EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    }
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(full, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* Store to `a` in a child process; return how the child ended. */
static int store_in_child(volatile unsigned char *a)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        alarm(20);
        a[0] = 0x11;
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

/* SCI_FLAG_READONLY_MAP: reads work, a store faults, nothing changes. */
static void readonly_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x4030, 8192);
    sci_map_t map, ro;
    volatile unsigned char *m, *r;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, 8192, NULL, NO_FLAGS, &err));
    for (int i = 0; i < 8192; i++)
        m[i] = pat((size_t)i, 4);
    EXPECT(SCI_ERR_OK, r = SCIMapLocalSegment(seg, &ro, 4096, 4096, NULL, SCI_FLAG_READONLY_MAP,
                                              &err));
    CHECK_EQ(r[5], pat(4096 + 5, 4));
    int st = store_in_child(r);
    CHECK_MSG(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS),
              "a store through a read-only local map did not fault (status 0x%x)", st);
    CHECK_EQ(m[4096], pat(4096, 4));
    /* The read-only map follows later writes. */
    m[4100] = 0x5a;
    CHECK_EQ(r[4], 0x5a);
    m[4100] = pat(4100, 4);
    peer_barrier(p);       /* B checks its read-only remote map */
    peer_barrier(p);
    CHECK_EQ(m[0], pat(0, 4));
    CHECK_EQ(m[100], pat(100, 4));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(ro, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void readonly_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4030);
    sci_map_t ro;
    volatile unsigned char *r;
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, r = SCIMapRemoteSegment(rs, &ro, 0, 8192, NULL, SCI_FLAG_READONLY_MAP,
                                               &err));
    for (int i = 0; i < 8192; i++)
        CHECK_MSG(r[i] == pat((size_t)i, 4), "read-only remote map byte %d", i);
    int st = store_in_child(r + 100);
    CHECK_MSG(WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS),
              "a store through a read-only remote map did not fault (status 0x%x)", st);
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(ro, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    close_sd(sd);
}

/* An address range nobody uses: reserve it, then release it. */
static unsigned char *free_range(size_t len)
{
    void *a = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(a != MAP_FAILED);
    munmap(a, len);
    return a;
}

/* SCI_FLAG_FIXED_MAP_ADDR. */
static void fixed_map_addr(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    sci_local_segment_t seg = make_segment(sd, 0x4040, 16 * page);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4040);
    sci_map_t full, m1, m2, m3, m4;
    volatile unsigned char *f, *a;
    EXPECT(SCI_ERR_OK, f = SCIMapLocalSegment(seg, &full, 0, 16 * page, NULL, NO_FLAGS, &err));
    for (size_t i = 0; i < 16 * page; i++)
        f[i] = pat(i, 5);

    /* At a free, aligned address: exactly there. */
    unsigned char *want = free_range(4 * page);
    EXPECT(SCI_ERR_OK, a = SCIMapRemoteSegment(rs, &m1, 0, 4 * page, want,
                                               SCI_FLAG_FIXED_MAP_ADDR, &err));
    CHECK(a == want);
    CHECK_EQ(a[page + 3], pat(page + 3, 5));

    /* Over an address in use (our own map): refused, the map intact. */
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMapLocalSegment(seg, &m2, 0, page, want + page,
                                                       SCI_FLAG_FIXED_MAP_ADDR, &err));
    CHECK_EQ(a[page + 3], pat(page + 3, 5));
    /* Over an ordinary mapping: refused, never replaced. */
    unsigned char *other = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(other != MAP_FAILED);
    memset(other, 'Q', 2 * page);
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMapRemoteSegment(rs, &m2, 0, page, other,
                                                        SCI_FLAG_FIXED_MAP_ADDR, &err));
    /* Partly overlapping an ordinary mapping. */
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMapRemoteSegment(rs, &m2, 0, 4 * page, other - page,
                                                        SCI_FLAG_FIXED_MAP_ADDR, &err));
    for (size_t i = 0; i < 2 * page; i++)
        CHECK_MSG(other[i] == 'Q', "an existing mapping was replaced (byte %zu)", i);

    /* Not page-aligned relative to the offset. */
    unsigned char *fr = free_range(4 * page);
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMapLocalSegment(seg, &m2, 0, page, fr + 1,
                                                       SCI_FLAG_FIXED_MAP_ADDR, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMapRemoteSegment(rs, &m2, 100, page, fr + 101 + 8,
                                                        SCI_FLAG_FIXED_MAP_ADDR, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMapRemoteSegment(rs, &m2, page, page, fr + 100,
                                                        SCI_FLAG_FIXED_MAP_ADDR, &err));
    /* Aligned relative to the offset: an unaligned offset at the same
     * in-page position. */
    EXPECT(SCI_ERR_OK, a = SCIMapRemoteSegment(rs, &m2, 100, page, fr + 100,
                                               SCI_FLAG_FIXED_MAP_ADDR, &err));
    CHECK(a == fr + 100);
    CHECK_EQ(a[0], pat(100, 5));
    CHECK_EQ(a[page - 1], pat(100 + page - 1, 5));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(m2, NO_FLAGS, &err));
    /* A page-aligned offset at a page-aligned address, local map. */
    EXPECT(SCI_ERR_OK, a = SCIMapLocalSegment(seg, &m3, 3 * page, 2 * page, fr,
                                              SCI_FLAG_FIXED_MAP_ADDR, &err));
    CHECK(a == fr);
    CHECK_EQ(a[0], pat(3 * page, 5));
    /* Another adjacent fixed map right after it. */
    EXPECT(SCI_ERR_OK, a = SCIMapLocalSegment(seg, &m4, 9 * page, page, fr + 2 * page,
                                              SCI_FLAG_FIXED_MAP_ADDR, &err));
    CHECK(a == fr + 2 * page);
    CHECK_EQ(a[1], pat(9 * page + 1, 5));

    /* After unmapping, the address may be used again. */
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(m1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, a = SCIMapRemoteSegment(rs, &m1, 8 * page, page, want,
                                               SCI_FLAG_FIXED_MAP_ADDR, &err));
    CHECK(a == want);
    CHECK_EQ(a[7], pat(8 * page + 7, 5));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(m1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(m3, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(m4, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(full, NO_FLAGS, &err));
    munmap(other, 2 * page);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* SCIMemCpy in both directions, with and without a sequence. */
static void memcpy_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x4050, SEG_SZ);
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, SEG_SZ, NULL, NO_FLAGS, &err));
    peer_barrier(p);     /* B wrote with SCIMemCpy */
    for (size_t i = 0; i < SEG_SZ; i++) {
        unsigned char want = pat(i, 6);
        if (i >= 65536 + 1000 && i < 65536 + 1000 + 3333)
            want = pat(i, 7);
        CHECK_MSG(m[i] == want, "offset %zu: 0x%02x want 0x%02x", i, m[i], want);
    }
    for (size_t i = 0; i < SEG_SZ; i++)
        m[i] = pat(i, 8);
    peer_barrier(p);     /* B reads with SCI_FLAG_BLOCK_READ */
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void memcpy_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4050);
    sci_map_t full, part;
    sci_sequence_t seq;
    EXPECT(SCI_ERR_OK, SCIMapRemoteSegment(rs, &full, 0, SEG_SZ, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMapRemoteSegment(rs, &part, 65536, 65536, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(full, &seq, NO_FLAGS, &err));
    unsigned char *buf = malloc(SEG_SZ);
    CHECK(buf != NULL);
    for (size_t i = 0; i < SEG_SZ; i++)
        buf[i] = pat(i, 6);
    sci_sequence_status_t st;
    EXPECT(SCI_ERR_OK, st = SCIStartSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    /* In pieces, with and without the sequence and error check. */
    EXPECT(SCI_ERR_OK, SCIMemCpy(seq, buf, full, 0, 100000, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, buf + 100000, full, 100000, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMemCpy(seq, buf + 100001, full, 100001, SEG_SZ - 100001,
                                 SCI_FLAG_ERROR_CHECK, &err));
    EXPECT(SCI_ERR_OK, st = SCICheckSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    /* Through the partial map, at an offset inside it. */
    unsigned char small[3333];
    for (size_t i = 0; i < sizeof small; i++)
        small[i] = pat(65536 + 1000 + i, 7);
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, small, part, 1000, sizeof small, NO_FLAGS, &err));
    /* Errors. */
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIMemCpy(NULL, small, part, 65000, 1000, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIMemCpy(NULL, small, part, 65536, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIMemCpy(NULL, small, part, (size_t)-1, 2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIMemCpy(NULL, buf, full, 1, SEG_SZ, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCIMemCpy(NULL, small, part, 65000, 1000, SCI_FLAG_BLOCK_READ,
                                           &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIMemCpy(NULL, small, part, 0, 10, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIMemCpy(NULL, small, part, 0, 10,
                                           SCI_FLAG_BLOCK_READ | BAD_FLAG, &err));
    peer_barrier(p);
    peer_barrier(p);
    /* Read back what A wrote. */
    memset(buf, 0, SEG_SZ);
    EXPECT(SCI_ERR_OK, st = SCIStartSequence(seq, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMemCpy(seq, buf, full, 0, SEG_SZ, SCI_FLAG_BLOCK_READ, &err));
    EXPECT(SCI_ERR_OK, st = SCICheckSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    for (size_t i = 0; i < SEG_SZ; i++)
        CHECK_MSG(buf[i] == pat(i, 8), "read back offset %zu: 0x%02x", i, buf[i]);
    memset(small, 0, sizeof small);
    EXPECT(SCI_ERR_OK, SCIMemCpy(NULL, small, part, 7, 3000,
                                 SCI_FLAG_BLOCK_READ | SCI_FLAG_ERROR_CHECK, &err));
    for (size_t i = 0; i < 3000; i++)
        CHECK(small[i] == pat(65536 + 7 + i, 8));
    free(buf);
    EXPECT(SCI_ERR_OK, SCIRemoveSequence(seq, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(part, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(full, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* SCIMemWrite: only into one live map of this process. */
static void memwrite(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    sci_local_segment_t seg = make_segment(sd, 0x4060, 8 * page);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4060);
    sci_map_t full, rmap, lo, hi;
    volatile unsigned char *f, *r;
    EXPECT(SCI_ERR_OK, f = SCIMapLocalSegment(seg, &full, 0, 8 * page, NULL, NO_FLAGS, &err));
    /* The remote map sits between two guard pages of our own, so the bytes
     * just outside it belong to no map. */
    unsigned char *guard = mmap(NULL, 4 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(guard != MAP_FAILED);
    munmap(guard + page, 2 * page);
    EXPECT(SCI_ERR_OK, r = SCIMapRemoteSegment(rs, &rmap, page, 2 * page, guard + page,
                                               SCI_FLAG_FIXED_MAP_ADDR, &err));
    CHECK(r == guard + page);
    unsigned char src[600];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(i + 9);

    EXPECT(SCI_ERR_OK, SCIMemWrite(src, r + 10, 300, NO_FLAGS, &err));
    for (size_t i = 0; i < 300; i++)
        CHECK(f[page + 10 + i] == src[i]);
    /* Exactly to the end of the map. */
    EXPECT(SCI_ERR_OK, SCIMemWrite(src, r + 2 * page - 600, 600, NO_FLAGS, &err));
    CHECK_EQ(f[3 * page - 1], src[599]);
    /* Into a local map too. */
    EXPECT(SCI_ERR_OK, SCIMemWrite(src, f + 5 * page, 16, NO_FLAGS, &err));
    CHECK_EQ(f[5 * page + 15], src[15]);

    /* Addresses outside any map. */
    unsigned char stack[64];
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, stack, 16, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, NULL, 16, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, (void *)(uintptr_t)0xdead0000, 16,
                                                NO_FLAGS, &err));
    /* Straddling the end of a map, or starting just before it. */
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, r + 2 * page - 100, 101, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, r - 1, 10, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, r + 2 * page, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, r + 10, (size_t)-1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIMemWrite(src, r + 10, 16, BAD_FLAG, &err));
    /* Two adjacent maps are still two maps. */
    unsigned char *fr = free_range(2 * page);
    EXPECT(SCI_ERR_OK, SCIMapRemoteSegment(rs, &lo, 0, page, fr, SCI_FLAG_FIXED_MAP_ADDR, &err));
    EXPECT(SCI_ERR_OK, SCIMapRemoteSegment(rs, &hi, page, page, fr + page,
                                           SCI_FLAG_FIXED_MAP_ADDR, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, fr + page - 8, 16, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMemWrite(src, fr + page - 8, 8, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(lo, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(hi, NO_FLAGS, &err));
    /* After unmap the address is no longer a map. */
    volatile unsigned char *old = r;
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(rmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIMemWrite(src, old + 10, 16, NO_FLAGS, &err));

    EXPECT(SCI_ERR_OK, SCIUnmapSegment(full, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* Sequence calls and their errors. */
static void sequences(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x4070, 4096);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4070);
    sci_map_t lmap, rmap;
    sci_sequence_t s1, s2;
    sci_sequence_status_t st;
    EXPECT(SCI_ERR_OK, SCIMapLocalSegment(seg, &lmap, 0, 4096, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMapRemoteSegment(rs, &rmap, 0, 4096, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCICreateMapSequence(rmap, &s1, BAD_FLAG, &err));
    EXPECT_FAIL(SCICreateMapSequence(rmap, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(rmap, &s1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(lmap, &s2, NO_FLAGS, &err));
    CHECK(s1 != s2);
    EXPECT(SCI_ERR_OK, st = SCIStartSequence(s1, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    EXPECT(SCI_ERR_OK, st = SCICheckSequence(s1, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    EXPECT(SCI_ERR_OK, st = SCIStartSequence(s2, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    EXPECT(SCI_ERR_OK, st = SCICheckSequence(s2, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    EXPECT(SCI_ERR_ILLEGAL_FLAG, st = SCIStartSequence(s1, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, st = SCICheckSequence(s1, BAD_FLAG, &err));
    SCIFlush(s1, NO_FLAGS);
    SCIFlush(NULL, NO_FLAGS);
    SCIStoreBarrier(s1, NO_FLAGS);
    SCIStoreBarrier(s2, NO_FLAGS);
    SCIStoreBarrier(NULL, NO_FLAGS);
    /* Checking again and again stays OK while the segment lives. */
    for (int i = 0; i < 100; i++) {
        EXPECT(SCI_ERR_OK, st = SCICheckSequence(s1, NO_FLAGS, &err));
        CHECK_EQ(st, SCI_SEQ_OK);
    }
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRemoveSequence(s1, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSequence(s1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRemoveSequence(s1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, st = SCIStartSequence(s1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSequence(s2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(lmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(rmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/*
 * The usual SISCI pattern: write data to the peer's segment, a barrier, then
 * a flag; the peer busy-waits on its own local memory.  Each side owns a
 * segment the other writes into, and they play ping-pong with it.
 */
#define PP_ROUNDS 200
#define PP_DATA 8192

struct pp_area {
    volatile uint32_t flag;            /* round number, written last */
    uint32_t pad[15];
    volatile unsigned char data[PP_DATA];
};

static void pingpong(struct peer *p, unsigned int my_id, unsigned int peer_id, int first,
                     int use_calls)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, my_id, sizeof(struct pp_area));
    sci_map_t lmap, rmap;
    struct pp_area *mine, *theirs;
    EXPECT(SCI_ERR_OK, mine = (struct pp_area *)SCIMapLocalSegment(
                           seg, &lmap, 0, sizeof(struct pp_area), NULL, NO_FLAGS, &err));
    sci_remote_segment_t rs = connect_segment(sd, node, peer_id);
    EXPECT(SCI_ERR_OK, theirs = (struct pp_area *)SCIMapRemoteSegment(
                           rs, &rmap, 0, sizeof(struct pp_area), NULL, NO_FLAGS, &err));
    peer_barrier(p);
    for (uint32_t round = 1; round <= PP_ROUNDS; round++) {
        if (!first || round > 1) {
            /* Wait for the peer's flag for this round in my own memory. */
            uint32_t want = first ? round - 1 : round;
            uint64_t deadline = now_ms() + WAIT_LONG;
            while (mine->flag != want) {
                if (now_ms() > deadline)
                    FAILF("round %u: flag stuck at %u", want, mine->flag);
            }
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            for (size_t i = 0; i < PP_DATA; i++)
                CHECK_MSG(mine->data[i] == (unsigned char)(want * 7 + i),
                          "round %u: data byte %zu is stale", want, i);
        }
        for (size_t i = 0; i < PP_DATA; i++)
            theirs->data[i] = (unsigned char)(round * 7 + i);
        if (use_calls)
            SCIStoreBarrier(NULL, NO_FLAGS);
        else
            __atomic_thread_fence(__ATOMIC_RELEASE);   /* CPU order only, no SISCI call */
        theirs->flag = round;
        if (use_calls)
            SCIFlush(NULL, NO_FLAGS);
    }
    if (first) {
        /* Wait for the last answer. */
        uint64_t deadline = now_ms() + WAIT_LONG;
        while (mine->flag != PP_ROUNDS)
            if (now_ms() > deadline)
                FAILF("last round: flag stuck at %u", mine->flag);
    }
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(rmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(lmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void flag_pingpong_a(struct peer *p) { pingpong(p, 0x4080, 0x4081, 1, 1); }
static void flag_pingpong_b(struct peer *p) { pingpong(p, 0x4081, 0x4080, 0, 1); }
/* Stores arrive with no SISCI call at all (docs: "without any call, stores
 * still arrive"). */
static void flag_nocall_a(struct peer *p) { pingpong(p, 0x4082, 0x4083, 1, 0); }
static void flag_nocall_b(struct peer *p) { pingpong(p, 0x4083, 0x4082, 0, 0); }

/* SCIFlush orders non-temporal stores before later stores. vsci makes it a
 * store fence (sfence on x86-64, not a full mfence: docs/api.md). Without
 * any fence, streaming stores of the payload may become visible after the
 * plain store of the flag; A, spinning on the flag in another process,
 * would then see a stale payload. */
#define NT_ROUNDS 20000
#define NT_WORDS  512              /* 4 KiB of payload */
struct nt_area {
    uint64_t payload[NT_WORDS];
    volatile uint64_t flag;
};

static void nt_order_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x40a0, sizeof(struct nt_area));
    sci_map_t map;
    struct nt_area *m;
    EXPECT(SCI_ERR_OK, m = (struct nt_area *)SCIMapLocalSegment(seg, &map, 0, sizeof(struct nt_area),
                                                                NULL, NO_FLAGS, &err));
    peer_barrier(p);
    for (uint64_t round = 1; round <= NT_ROUNDS; round++) {
        uint64_t deadline = now_ms() + WAIT_LONG;
        while (m->flag != round)
            if (now_ms() > deadline)
                FAILF("round %llu: flag stuck at %llu", (unsigned long long)round,
                      (unsigned long long)m->flag);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        for (size_t i = 0; i < NT_WORDS; i++) {
            uint64_t got = ((volatile uint64_t *)m->payload)[i];
            if (got != round * 1000003u + i)
                FAILF("round %llu: payload word %zu is 0x%llx, from before SCIFlush",
                      (unsigned long long)round, i, (unsigned long long)got);
        }
        peer_send(p, round);    /* B may overwrite the payload now */
    }
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void nt_order_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    peer_barrier(p);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x40a0);
    sci_map_t map;
    struct nt_area *m;
    EXPECT(SCI_ERR_OK, m = (struct nt_area *)SCIMapRemoteSegment(rs, &map, 0, sizeof(struct nt_area),
                                                                 NULL, NO_FLAGS, &err));
    for (uint64_t round = 1; round <= NT_ROUNDS; round++) {
        for (size_t i = 0; i < NT_WORDS; i++) {
#if defined(__x86_64__)
            __builtin_ia32_movnti64((long long *)&m->payload[i], (long long)(round * 1000003u + i));
#else
            m->payload[i] = round * 1000003u + i;
#endif
        }
        SCIFlush(NULL, NO_FLAGS);
        m->flag = round;
        if (peer_recv(p) != round)
            FAILF("round %llu: out of step", (unsigned long long)round);
    }
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    close_sd(sd);
}

/* SCIUnmapSegment and SCITriggerInterrupt make earlier stores visible. */
static void visible_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x4090, 65536);
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, 65536, NULL, NO_FLAGS, &err));
    unsigned int no = 0;
    sci_local_interrupt_t li;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, NO_FLAGS, &err));
    peer_send(p, no);
    peer_barrier(p);          /* B wrote the first half and unmapped */
    for (size_t i = 0; i < 32768; i++)
        CHECK_MSG(m[i] == pat(i, 9), "after unmap: offset %zu", i);
    EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_LONG, NO_FLAGS, &err));
    for (size_t i = 32768; i < 65536; i++)
        CHECK_MSG(m[i] == pat(i, 10), "after trigger: offset %zu", i);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void visible_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = (unsigned int)peer_recv(p);
    sci_remote_segment_t rs = connect_segment(sd, node, 0x4090);
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, 65536, NULL, NO_FLAGS, &err));
    for (size_t i = 0; i < 32768; i++)
        m[i] = pat(i, 9);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, 65536, NULL, NO_FLAGS, &err));
    for (size_t i = 32768; i < 65536; i++)
        m[i] = pat(i, 10);
    sci_remote_interrupt_t ri;
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, no, WAIT_LONG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    close_sd(sd);
}

/* SCICacheSync: flush and invalidate a mapped range (with the map or with
 * NULL), the bytes are unchanged; ranges outside the map and bad flags fail. */
static void cache_sync(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x4301, 3 * 4096);
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 4096, 2 * 4096, NULL, NO_FLAGS, &err));
    for (unsigned i = 0; i < 2 * 4096; i++)
        m[i] = (unsigned char)(i * 7);
    void *a = (void *)m;
    EXPECT(SCI_ERR_OK, SCICacheSync(map, a, 2 * 4096, SCI_FLAG_CACHE_FLUSH, &err));
    EXPECT(SCI_ERR_OK, SCICacheSync(NULL, a, 2 * 4096, SCI_FLAG_CACHE_FLUSH, &err));
    EXPECT(SCI_ERR_OK, SCICacheSync(map, (char *)a + 13, 100, SCI_FLAG_CACHE_INVALIDATE, &err));
    EXPECT(SCI_ERR_OK, SCICacheSync(map, a, 4096, SCI_FLAG_CACHE_FLUSH | SCI_FLAG_CACHE_INVALIDATE,
                                    &err));
    EXPECT(SCI_ERR_OK, SCICacheSync(map, a, 0, SCI_FLAG_CACHE_FLUSH, &err));
    for (unsigned i = 0; i < 2 * 4096; i++)
        CHECK_EQ(m[i], (unsigned char)(i * 7));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCICacheSync(map, (char *)a + 1, 2 * 4096, SCI_FLAG_CACHE_FLUSH,
                                              &err));
    EXPECT(SCI_ERR_OUT_OF_RANGE, SCICacheSync(map, (char *)a - 1, 16, SCI_FLAG_CACHE_FLUSH, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCICacheSync(map, a, 64, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCICacheSync(NULL, NULL, 64, SCI_FLAG_CACHE_FLUSH, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCICacheSync(map, a, 64, SCI_FLAG_CACHE_FLUSH | 0x1, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCICacheSync(map, a, 64, SCI_FLAG_CACHE_FLUSH, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static const struct test_case cases[] = {
    { "map_errors", map_errors, NULL, 0 },
    { "cache_sync", cache_sync, NULL, 0 },
    { "map_unlisted_flags", map_unlisted_flags, NULL, 0 },
    { "same_memory", same_memory_a, same_memory_b, 0 },
    { "unaligned_offsets", unaligned_offsets, NULL, 0 },
    { "readonly_map", readonly_a, readonly_b, 0 },
    { "fixed_map_addr", fixed_map_addr, NULL, 0 },
    { "memcpy", memcpy_a, memcpy_b, 0 },
    { "memwrite", memwrite, NULL, 0 },
    { "sequences", sequences, NULL, 0 },
    { "flag_pingpong", flag_pingpong_a, flag_pingpong_b, 0 },
    { "flag_pingpong_no_calls", flag_nocall_a, flag_nocall_b, 0 },
    { "stores_visible_after_unmap_and_trigger", visible_a, visible_b, 0 },
    { "nt_stores_ordered_by_flush", nt_order_a, nt_order_b, 0 },
    { NULL, NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
    return proc_main(argc, argv, cases);
}
