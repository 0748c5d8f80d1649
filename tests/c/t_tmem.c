/*
 * t_tmem.c - the page store of vsci_tmem.h, for
 * crates/vsci-systest/tests/pagestore.rs.  Runs on one node of a cluster
 * (VSCI_SOCKET names it) whose LENDERS ("2,3") lend memory.
 *
 *   t_tmem roundtrip LENDERS  1000 random pages put and read back in a
 *                             persistent and an ephemeral pool, replace,
 *                             flush_page and flush_object (then absent),
 *                             argument errors, destroy, close;
 *                             prints "ROUNDTRIP OK" at the end
 *   t_tmem fill LENDERS       a store of 64 pages: persistent puts past 64
 *                             fail with SCI_ERR_NOSPC; ephemeral puts past
 *                             64 succeed and the earliest pages are gone;
 *                             persistent puts take ephemeral pages' room;
 *                             prints "FILL ..." lines and "FILL OK"
 *   t_tmem survive LENDERS [N]  N (512) persistent pages; prints
 *                             "READY node=<id> pages=<n> ..." per lender,
 *                             waits for a line on stdin, gets every page
 *                             and prints per lender "SURVIVE node=<id>
 *                             ok=<n> failed=<n> wrong=<n> absent=<n>
 *                             err=<first error>", then puts more pages
 *                             ("AFTER put=<n> ok=<n> failed=<n>")
 *   t_tmem bench LENDERS [N]  N (4096) puts and gets of 4 KiB pages, and
 *                             the same into a local memfd mapping:
 *                             "BENCH <what> <op> ops/s=... p50_us=...
 *                             p99_us=..."
 *
 * A failed check prints "FAIL file:line: ..." and exits 1.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "sisci_api.h"
#include "vsci_tmem.h"
#include "common/check.h"

#define PAGE VSCI_TMEM_PAGE_SIZE

#define FAIL(...) do { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); exit(1); } while (0)
#define WANT_ERR(want) do { if (err != (want)) FAIL("expected %s, got %s", err_name(want), err_name(err)); } while (0)
#define WANT(cond) do { if (!(cond)) FAIL("%s", #cond); } while (0)

static uint64_t seed;

/* The bytes of (pool, object, index) in this run, version `v`. */
static void fill(unsigned char *p, int pool, unsigned long long obj, unsigned int idx, unsigned int v)
{
    uint64_t x = seed ^ ((uint64_t)pool << 56) ^ (obj * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)idx << 20) ^ ((uint64_t)v << 40);
    x |= 1;
    for (int i = 0; i < PAGE; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

static int same(const unsigned char *got, int pool, unsigned long long obj, unsigned int idx, unsigned int v)
{
    unsigned char want[PAGE];
    fill(want, pool, obj, idx, v);
    return memcmp(got, want, PAGE) == 0;
}

static unsigned int parse_lenders(const char *s, unsigned int *out, unsigned int max)
{
    unsigned int n = 0;
    while (n < max) {
        char *end;
        unsigned long v = strtoul(s, &end, 0);
        if (end == s)
            break;
        out[n++] = (unsigned int)v;
        if (*end != ',')
            break;
        s = end + 1;
    }
    return n;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static vsci_tmem_t *open_store(const unsigned int *lenders, unsigned int n, unsigned long long pages)
{
    sci_error_t err;
    vsci_tmem_t *t = vsci_tmem_open(lenders, n, pages * PAGE, &err);
    WANT_ERR(SCI_ERR_OK);
    WANT(t != NULL);
    return t;
}

static void put(vsci_tmem_t *t, int pool, unsigned long long obj, unsigned int idx, unsigned int v, sci_error_t want)
{
    unsigned char p[PAGE];
    sci_error_t err = ERR_SENTINEL;
    fill(p, pool, obj, idx, v);
    vsci_tmem_put(t, pool, obj, idx, p, &err);
    if (err != want)
        FAIL("put (%d,%llu,%u): expected %s, got %s", pool, obj, idx, err_name(want), err_name(err));
}

/* 1: present and right; 0: absent; fails on wrong bytes or an error. */
static int get(vsci_tmem_t *t, int pool, unsigned long long obj, unsigned int idx, unsigned int v)
{
    unsigned char p[PAGE];
    sci_error_t err = ERR_SENTINEL;
    int r = vsci_tmem_get(t, pool, obj, idx, p, &err);
    if (err != SCI_ERR_OK || r < 0)
        FAIL("get (%d,%llu,%u): %d %s", pool, obj, idx, r, err_name(err));
    if (r == 1 && !same(p, pool, obj, idx, v))
        FAIL("get (%d,%llu,%u): wrong bytes", pool, obj, idx);
    return r;
}

static void roundtrip(const unsigned int *lenders, unsigned int n)
{
    sci_error_t err;
    vsci_tmem_t *t = open_store(lenders, n, 2048);
    int pools[2];
    pools[0] = vsci_tmem_new_pool(t, 1, &err);
    WANT_ERR(SCI_ERR_OK);
    pools[1] = vsci_tmem_new_pool(t, 0, &err);
    WANT_ERR(SCI_ERR_OK);
    WANT(pools[0] >= 0 && pools[1] >= 0 && pools[0] != pools[1]);

    for (int k = 0; k < 2; k++) {
        int pool = pools[k];
        const char *kind = k == 0 ? "persistent" : "ephemeral";
        /* 1000 pages: objects of 16 pages (the object ids far apart). */
        for (unsigned int i = 0; i < 1000; i++)
            put(t, pool, (i / 16) * 1000003ULL, i % 16, 0, SCI_ERR_OK);
        int present = 0;
        for (unsigned int i = 0; i < 1000; i++)
            present += get(t, pool, (i / 16) * 1000003ULL, i % 16, 0);
        printf("ROUNDTRIP %s put=1000 present=%d wrong=0\n", kind, present);
        WANT(present == 1000);
        /* A put of an existing key replaces it. */
        put(t, pool, 0, 3, 1, SCI_ERR_OK);
        WANT(get(t, pool, 0, 3, 1) == 1);
        /* flush_page: absent after; flushing again is no error. */
        vsci_tmem_flush_page(t, pool, 0, 3, &err);
        WANT_ERR(SCI_ERR_OK);
        WANT(get(t, pool, 0, 3, 0) == 0);
        vsci_tmem_flush_page(t, pool, 0, 3, &err);
        WANT_ERR(SCI_ERR_OK);
        WANT(get(t, pool, 0, 4, 0) == 1);
        /* flush_object: all 16 of object 1 gone, object 2 untouched. */
        vsci_tmem_flush_object(t, pool, 1000003ULL, &err);
        WANT_ERR(SCI_ERR_OK);
        for (unsigned int i = 0; i < 16; i++) {
            WANT(get(t, pool, 1000003ULL, i, 0) == 0);
            WANT(get(t, pool, 2 * 1000003ULL, i, 0) == 1);
        }
        /* Never put. */
        WANT(get(t, pool, 5, 99, 0) == 0);
        WANT(get(t, pool, 77777, 0, 0) == 0);
        printf("ROUNDTRIP %s flush ok\n", kind);
    }
    vsci_tmem_stats_t st;
    vsci_tmem_stats(t, &st, &err);
    WANT_ERR(SCI_ERR_OK);
    printf("ROUNDTRIP stats puts=%llu gets=%llu hits=%llu misses=%llu used=%llu capacity=%llu\n",
           st.puts, st.gets, st.hits, st.misses, st.pages_used, st.capacity_pages);
    WANT(st.pages_used == 2 * (1000 - 17) && st.capacity_pages == 2048 && st.puts == 2002);

    /* Where the pages are: every lender holds some. */
    for (unsigned int l = 0; l < n; l++) {
        int held = 0;
        for (unsigned int i = 0; i < 16; i++)
            held += vsci_tmem_page_node(t, pools[0], 2 * 1000003ULL, i, &err) == lenders[l];
        WANT_ERR(SCI_ERR_OK);
        WANT(held > 0);
    }
    WANT(vsci_tmem_page_node(t, pools[0], 1000003ULL, 0, &err) == 0);
    WANT_ERR(SCI_ERR_OK);

    /* Argument errors: never a crash. */
    unsigned char page[PAGE];
    memset(page, 0, sizeof page);
    vsci_tmem_put(NULL, pools[0], 0, 0, page, &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_put((vsci_tmem_t *)(uintptr_t)0x1234560, pools[0], 0, 0, page, &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_put(t, pools[0], 0, 0, NULL, &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_put(t, -1, 0, 0, page, &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_put(t, 999, 0, 0, page, &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    WANT(vsci_tmem_get(t, 999, 0, 0, page, &err) == -1);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    WANT(vsci_tmem_get(t, pools[0], 2 * 1000003ULL, 0, NULL, &err) == -1);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    WANT(vsci_tmem_get(NULL, pools[0], 0, 0, page, &err) == -1);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_flush_page(t, -5, 0, 0, &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_flush_object(NULL, pools[0], 0, &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_stats(t, NULL, &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    WANT(vsci_tmem_new_pool(NULL, 1, &err) == -1);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_put(t, pools[0], 0, 0, page, NULL); /* no error pointer */
    WANT(vsci_tmem_open(NULL, 1, 1 << 20, &err) == NULL);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    WANT(vsci_tmem_open(lenders, 0, 1 << 20, &err) == NULL);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    WANT(vsci_tmem_open(lenders, n, PAGE - 1, &err) == NULL);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    unsigned int nobody = 99;
    WANT(vsci_tmem_open(&nobody, 1, 1 << 20, &err) == NULL);
    WANT_ERR(SCI_ERR_NO_SUCH_NODEID);
    WANT(vsci_tmem_open(lenders, 1, 1ULL << 40, &err) == NULL);
    WANT_ERR(SCI_ERR_NOSPC);
    printf("ROUNDTRIP errors ok\n");

    /* Destroy: the pool is gone, its pages freed. */
    vsci_tmem_destroy_pool(t, pools[0], &err);
    WANT_ERR(SCI_ERR_OK);
    WANT(vsci_tmem_get(t, pools[0], 2 * 1000003ULL, 0, page, &err) == -1);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_destroy_pool(t, pools[0], &err);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    vsci_tmem_stats(t, &st, &err);
    WANT(st.pages_used == 1000 - 17);
    vsci_tmem_destroy_pool(t, pools[1], &err);
    WANT_ERR(SCI_ERR_OK);
    vsci_tmem_stats(t, &st, &err);
    WANT(st.pages_used == 0);
    vsci_tmem_close(t);
    vsci_tmem_close(t); /* closed: ignored */
    vsci_tmem_close(NULL);
    WANT(vsci_tmem_new_pool(t, 1, &err) == -1);
    WANT_ERR(SCI_ERR_ILLEGAL_PARAMETER);
    printf("ROUNDTRIP OK\n");
}

static void fill_mode(const unsigned int *lenders, unsigned int n)
{
    const unsigned int N = 64;
    sci_error_t err;
    vsci_tmem_stats_t st;
    vsci_tmem_t *t = open_store(lenders, n, N);
    int per = vsci_tmem_new_pool(t, 1, &err);
    WANT_ERR(SCI_ERR_OK);

    /* Persistent: N pages fit, then NOSPC and the caller keeps its page. */
    for (unsigned int i = 0; i < N; i++)
        put(t, per, 1, i, 0, SCI_ERR_OK);
    int refused = 0;
    for (unsigned int i = N; i < N + 8; i++) {
        put(t, per, 1, i, 0, SCI_ERR_NOSPC);
        refused++;
    }
    /* Nor may a replacement of a stored key take room it has not. */
    put(t, per, 1, 0, 1, SCI_ERR_NOSPC);
    int present = 0;
    for (unsigned int i = 0; i < N; i++)
        present += get(t, per, 1, i, 0);
    for (unsigned int i = N; i < N + 8; i++)
        WANT(get(t, per, 1, i, 0) == 0);
    printf("FILL persistent stored=%d refused=%d\n", present, refused);
    WANT(present == (int)N);
    vsci_tmem_destroy_pool(t, per, &err);
    WANT_ERR(SCI_ERR_OK);

    /* Ephemeral: 2N puts all succeed; the earliest N are gone. */
    int eph = vsci_tmem_new_pool(t, 0, &err);
    WANT_ERR(SCI_ERR_OK);
    for (unsigned int i = 0; i < 2 * N; i++)
        put(t, eph, 2, i, 0, SCI_ERR_OK);
    int absent_early = 0, present_late = 0;
    for (unsigned int i = 0; i < N; i++)
        absent_early += !get(t, eph, 2, i, 0);
    for (unsigned int i = N; i < 2 * N; i++)
        present_late += get(t, eph, 2, i, 0);
    vsci_tmem_stats(t, &st, &err);
    printf("FILL ephemeral put=%u absent=%d present=%d wrong=0 evictions=%llu\n", 2 * N, absent_early, present_late, st.evictions);
    WANT(absent_early == (int)N && present_late == (int)N && st.evictions == N);

    /* A second ephemeral pool evicts the first's oldest pages. */
    int eph2 = vsci_tmem_new_pool(t, 0, &err);
    WANT_ERR(SCI_ERR_OK);
    for (unsigned int i = 0; i < 8; i++)
        put(t, eph2, 3, i, 0, SCI_ERR_OK);
    for (unsigned int i = N; i < N + 8; i++)
        WANT(get(t, eph, 2, i, 0) == 0);
    WANT(get(t, eph, 2, N + 8, 0) == 1);

    /* Persistent puts take the oldest ephemeral pages' room, until the
     * store is all persistent; then puts of both kinds are refused. */
    per = vsci_tmem_new_pool(t, 1, &err);
    WANT_ERR(SCI_ERR_OK);
    for (unsigned int i = 0; i < N; i++)
        put(t, per, 4, i, 0, SCI_ERR_OK);
    put(t, per, 4, N, 0, SCI_ERR_NOSPC);
    put(t, eph, 2, 0, 0, SCI_ERR_NOSPC);
    present = 0;
    for (unsigned int i = 0; i < N; i++)
        present += get(t, per, 4, i, 0);
    int eph_left = 0;
    for (unsigned int i = 0; i < 2 * N; i++)
        eph_left += get(t, eph, 2, i, 0);
    for (unsigned int i = 0; i < 8; i++)
        eph_left += get(t, eph2, 3, i, 0);
    vsci_tmem_stats(t, &st, &err);
    printf("FILL priority persistent=%d ephemeral_left=%d used=%llu refused=%llu\n", present, eph_left, st.pages_used, st.puts_refused);
    WANT(present == (int)N && eph_left == 0 && st.pages_used == N);
    vsci_tmem_close(t);
    printf("FILL OK\n");
}

static void survive(const unsigned int *lenders, unsigned int n, unsigned int count)
{
    sci_error_t err;
    vsci_tmem_t *t = open_store(lenders, n, 2ULL * count);
    int pool = vsci_tmem_new_pool(t, 1, &err);
    WANT_ERR(SCI_ERR_OK);
    unsigned int *node = calloc(count, sizeof *node);
    for (unsigned int i = 0; i < count; i++) {
        put(t, pool, i / 8, i % 8, 0, SCI_ERR_OK);
        node[i] = vsci_tmem_page_node(t, pool, i / 8, i % 8, &err);
        WANT_ERR(SCI_ERR_OK);
    }
    for (unsigned int l = 0; l < n; l++) {
        unsigned int held = 0;
        for (unsigned int i = 0; i < count; i++)
            held += node[i] == lenders[l];
        printf("READY node=%u pages=%u\n", lenders[l], held);
    }
    printf("READY\n");
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        FAIL("no line on stdin");

    double t0 = now_us();
    for (unsigned int l = 0; l < n; l++) {
        unsigned int ok = 0, failed = 0, wrong = 0, absent = 0;
        sci_error_t first = SCI_ERR_OK;
        for (unsigned int i = 0; i < count; i++) {
            if (node[i] != lenders[l])
                continue;
            unsigned char p[PAGE];
            memset(p, 0xA5, sizeof p);
            err = ERR_SENTINEL;
            int r = vsci_tmem_get(t, pool, i / 8, i % 8, p, &err);
            if (err != SCI_ERR_OK) {
                failed++;
                if (first == SCI_ERR_OK)
                    first = err;
                if (r != -1)
                    wrong++;
            } else if (r == 0) {
                absent++;
            } else if (same(p, pool, i / 8, i % 8, 0)) {
                ok++;
            } else {
                wrong++;
            }
        }
        printf("SURVIVE node=%u ok=%u failed=%u wrong=%u absent=%u err=%s\n", lenders[l], ok, failed, wrong, absent, err_name(first));
    }
    printf("SURVIVE ms=%.0f\n", (now_us() - t0) / 1e3);

    /* New puts go to the lenders that are left, while they have room. */
    unsigned int ok = 0, failed = 0, wrong = 0;
    sci_error_t first = SCI_ERR_OK;
    for (unsigned int i = 0; i < count / 4; i++) {
        unsigned char p[PAGE];
        fill(p, pool, 1000000 + i, 0, 0);
        err = ERR_SENTINEL;
        vsci_tmem_put(t, pool, 1000000 + i, 0, p, &err);
        if (err != SCI_ERR_OK) {
            failed++;
            if (first == SCI_ERR_OK)
                first = err;
            continue;
        }
        ok++;
        memset(p, 0, sizeof p);
        if (vsci_tmem_get(t, pool, 1000000 + i, 0, p, &err) != 1 || !same(p, pool, 1000000 + i, 0, 0))
            wrong++;
    }
    printf("AFTER put=%u ok=%u failed=%u wrong=%u err=%s\n", count / 4, ok, failed, wrong, err_name(first));
    vsci_tmem_stats_t st;
    vsci_tmem_stats(t, &st, &err);
    printf("AFTER stats used=%llu lost=%llu transfer_errors=%llu\n", st.pages_used, st.pages_lost, st.transfer_errors);
    free(node);
    vsci_tmem_close(t);
    printf("SURVIVE DONE\n");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, const char *op, double *lat, unsigned int count, double total_us)
{
    qsort(lat, count, sizeof *lat, cmp_double);
    printf("BENCH %s %s ops/s=%.0f MiB/s=%.1f p50_us=%.2f p99_us=%.2f\n", what, op, count / (total_us / 1e6),
           count * (double)PAGE / (1 << 20) / (total_us / 1e6), lat[count / 2], lat[count * 99 / 100]);
}

static void bench(const unsigned int *lenders, unsigned int n, unsigned int count)
{
    sci_error_t err;
    /* One slot spare: the second round replaces every key, and a
     * replacement is written to a free slot before the old one is freed. */
    vsci_tmem_t *t = open_store(lenders, n, count + 1);
    int pool = vsci_tmem_new_pool(t, 1, &err);
    WANT_ERR(SCI_ERR_OK);
    double *lat = calloc(count, sizeof *lat);
    unsigned char *src = malloc((size_t)PAGE * 64), dst[PAGE];
    for (int i = 0; i < 64; i++)
        fill(src + (size_t)i * PAGE, 0, i, 0, 0);

    for (int round = 0; round < 2; round++) {  /* the first warms up */
        double t0 = now_us();
        for (unsigned int i = 0; i < count; i++) {
            double a = now_us();
            vsci_tmem_put(t, pool, i, 0, src + (size_t)(i % 64) * PAGE, &err);
            lat[i] = now_us() - a;
            if (err != SCI_ERR_OK)
                FAIL("put %u: %s", i, err_name(err));
        }
        if (round)
            report("tmem", "put", lat, count, now_us() - t0);
        t0 = now_us();
        for (unsigned int i = 0; i < count; i++) {
            double a = now_us();
            int r = vsci_tmem_get(t, pool, i, 0, dst, &err);
            lat[i] = now_us() - a;
            if (r != 1)
                FAIL("get %u: %d %s", i, r, err_name(err));
        }
        if (round)
            report("tmem", "get", lat, count, now_us() - t0);
    }
    WANT(memcmp(dst, src + (size_t)((count - 1) % 64) * PAGE, PAGE) == 0);
    vsci_tmem_close(t);

    /* The same pages into local memory: a memfd mapping, memcpy. */
    int fd = memfd_create("t_tmem", 0);
    WANT(fd >= 0 && ftruncate(fd, (off_t)count * PAGE) == 0);
    unsigned char *m = mmap(NULL, (size_t)count * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    WANT(m != MAP_FAILED);
    for (int round = 0; round < 2; round++) {
        double t0 = now_us();
        for (unsigned int i = 0; i < count; i++) {
            double a = now_us();
            memcpy(m + (size_t)i * PAGE, src + (size_t)(i % 64) * PAGE, PAGE);
            lat[i] = now_us() - a;
        }
        if (round)
            report("memfd", "put", lat, count, now_us() - t0);
        t0 = now_us();
        for (unsigned int i = 0; i < count; i++) {
            double a = now_us();
            memcpy(dst, m + (size_t)i * PAGE, PAGE);
            __asm__ __volatile__("" ::"r"(dst) : "memory");
            lat[i] = now_us() - a;
        }
        if (round)
            report("memfd", "get", lat, count, now_us() - t0);
    }
    munmap(m, (size_t)count * PAGE);
    close(fd);
    free(lat);
    free(src);
    printf("BENCH DONE\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: t_tmem roundtrip|fill|survive|bench LENDERS [N]\n");
        return 2;
    }
    unsigned int lenders[16];
    unsigned int n = parse_lenders(argv[2], lenders, 16);
    if (n == 0) {
        fprintf(stderr, "t_tmem: no lenders in \"%s\"\n", argv[2]);
        return 2;
    }
    seed = (uint64_t)now_us() ^ ((uint64_t)getpid() << 32);
    unsigned int count = argc > 3 ? (unsigned int)strtoul(argv[3], NULL, 0) : 0;
    if (strcmp(argv[1], "roundtrip") == 0)
        roundtrip(lenders, n);
    else if (strcmp(argv[1], "fill") == 0)
        fill_mode(lenders, n);
    else if (strcmp(argv[1], "survive") == 0)
        survive(lenders, n, count ? count : 512);
    else if (strcmp(argv[1], "bench") == 0)
        bench(lenders, n, count ? count : 4096);
    else {
        fprintf(stderr, "t_tmem: unknown mode %s\n", argv[1]);
        return 2;
    }
    return 0;
}
