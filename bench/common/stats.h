/*
 * stats.h - helpers shared by the benchmarks (sisci_bench, remote_bench,
 * dma_bench): the clock, SISCI error names, latency statistics (median,
 * p99, histogram), the JSON writer's pieces and the machine description
 * they print and record.
 *
 * Include this header once in each file of a benchmark, after defining
 *   NB, BUCKET_US   the histogram: NB buckets of BUCKET_US microseconds plus
 *                   one overflow bucket;
 *   lat_t           a struct with at least the members
 *                   uint32_t n, bad; double med, p99, mean, min, max;
 *                   uint32_t hist[NB + 1];
 * and, optionally, LAT_JSON_EXTRA(f, L): more members of json_lat()'s
 * object, written after "max_us".
 */
#ifndef VSCI_BENCH_STATS_H
#define VSCI_BENCH_STATS_H

#include <sisci_api.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Clock and CPU                                                            */
/* ------------------------------------------------------------------------ */

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The smallest non-zero step between two readings of now_ns(). */
static inline uint64_t clock_step(void)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 20000; i++) {
        uint64_t a = now_ns(), b = now_ns();
        if (b > a && b - a < best)
            best = b - a;
    }
    return best == UINT64_MAX ? 0 : best;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

static inline const char *sci_err_name(sci_error_t e)
{
    switch (e) {
#define N(x) case x: return #x;
    N(SCI_ERR_OK) N(SCI_ERR_BUSY) N(SCI_ERR_FLAG_NOT_IMPLEMENTED)
    N(SCI_ERR_ILLEGAL_FLAG) N(SCI_ERR_NOSPC) N(SCI_ERR_API_NOSPC)
    N(SCI_ERR_HW_NOSPC) N(SCI_ERR_NOT_IMPLEMENTED) N(SCI_ERR_ILLEGAL_ADAPTERNO)
    N(SCI_ERR_NO_SUCH_ADAPTERNO) N(SCI_ERR_TIMEOUT) N(SCI_ERR_OUT_OF_RANGE)
    N(SCI_ERR_NO_SUCH_SEGMENT) N(SCI_ERR_ILLEGAL_NODEID) N(SCI_ERR_CONNECTION_REFUSED)
    N(SCI_ERR_SEGMENT_NOT_CONNECTED) N(SCI_ERR_SIZE_ALIGNMENT) N(SCI_ERR_OFFSET_ALIGNMENT)
    N(SCI_ERR_ILLEGAL_PARAMETER) N(SCI_ERR_MAX_ENTRIES) N(SCI_ERR_SEGMENT_NOT_PREPARED)
    N(SCI_ERR_ILLEGAL_ADDRESS) N(SCI_ERR_ILLEGAL_OPERATION) N(SCI_ERR_ILLEGAL_QUERY)
    N(SCI_ERR_SEGMENTID_USED) N(SCI_ERR_SYSTEM) N(SCI_ERR_CANCELLED)
    N(SCI_ERR_NOT_CONNECTED) N(SCI_ERR_NOT_AVAILABLE) N(SCI_ERR_INCONSISTENT_VERSIONS)
    N(SCI_ERR_COND_INT_RACE_PROBLEM) N(SCI_ERR_OVERFLOW) N(SCI_ERR_NOT_INITIALIZED)
    N(SCI_ERR_ACCESS) N(SCI_ERR_NO_SUCH_NODEID) N(SCI_ERR_NODE_NOT_RESPONDING)
    N(SCI_ERR_NO_REMOTE_LINK_ACCESS) N(SCI_ERR_NO_LINK_ACCESS) N(SCI_ERR_TRANSFER_FAILED)
#undef N
    }
    return "unknown error";
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                               */
/* ------------------------------------------------------------------------ */

static inline int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ns: n durations (sorted in place); stores statistics of ns/div in
 * microseconds (div 2 for RTT/2 of round trips, 1 for one-way delays):
 * median, p99, mean, min, max and the histogram.  The other members of L
 * are zeroed. */
static inline void make_stats(lat_t *L, uint64_t *ns, uint32_t n, uint32_t bad, double div)
{
    memset(L, 0, sizeof *L);
    L->bad = bad;
    if (n == 0)
        return;
    qsort(ns, n, sizeof *ns, cmp_u64);
    double sum = 0, k = 1000.0 * div;
    for (uint32_t i = 0; i < n; i++) {
        double us = (double)ns[i] / k;
        sum += us;
        /* Compared as a double: a delay past INT_MAX buckets (a clock
         * read wrong, a torn time stamp) must land in the last bucket, not
         * overflow the conversion into a negative index. */
        double b = us / BUCKET_US;
        L->hist[b < NB ? (int)b : NB]++;
    }
    uint32_t i99 = (uint32_t)ceil(0.99 * n) - 1;
    if (i99 >= n)
        i99 = n - 1;
    L->n = n;
    L->med = (double)ns[n / 2] / k;
    L->p99 = (double)ns[i99] / k;
    L->mean = sum / n;
    L->min = (double)ns[0] / k;
    L->max = (double)ns[n - 1] / k;
}

/* Number of timed iterations: fill `budget` seconds at the warm-up pace. */
static inline uint32_t pick_iters(uint64_t warm_ns, int warm, int lo, int hi, double budget)
{
    double per = warm > 0 ? (double)warm_ns / warm : 1e3;
    double n = budget * 1e9 / (per > 1 ? per : 1);
    if (n < lo)
        n = lo;
    if (n > hi)
        n = hi;
    return (uint32_t)n;
}

/* FNV-1a over the 8-byte words of a buffer (a data check). */
static inline uint64_t hash_buf(const volatile void *p, size_t len)
{
    const volatile uint64_t *w = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len / 8; i++)
        h = (h ^ w[i]) * 0x100000001b3ull;
    return h;
}

static inline const char *fmt_size(size_t s, char *buf, size_t n)
{
    if (s >= (1u << 30) && s % (1u << 30) == 0)
        snprintf(buf, n, "%zu GiB", s >> 30);
    else if (s >= (1u << 20) && s % (1u << 20) == 0)
        snprintf(buf, n, "%zu MiB", s >> 20);
    else if (s >= 1024 && s % 1024 == 0)
        snprintf(buf, n, "%zu KiB", s >> 10);
    else
        snprintf(buf, n, "%zu B", s);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The machine                                                              */
/* ------------------------------------------------------------------------ */

/* A benchmark of several files defines these in its main file and declares
 * them in the others, which define BENCH_MACHINE_EXTERN before including
 * this header. */
#ifdef BENCH_MACHINE_EXTERN
extern char g_kernel[128], g_cpu[128], g_host[128], g_cmd[512], g_date[64];
extern long g_nproc;
#else
char g_kernel[128], g_cpu[128], g_host[128], g_cmd[512], g_date[64];
long g_nproc;
#endif

/* Fills g_kernel, g_host, g_nproc, g_cpu, g_cmd (the command line) and
 * g_date (now, UTC). */
static inline void machine_info(int argc, char **argv)
{
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(g_kernel, sizeof g_kernel, "%s", u.release);
        snprintf(g_host, sizeof g_host, "%s", u.nodename);
    }
    g_nproc = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(g_cpu, sizeof g_cpu, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *p = strchr(line, ':');
                if (p) {
                    p++;
                    while (*p == ' ')
                        p++;
                    p[strcspn(p, "\n")] = 0;
                    snprintf(g_cpu, sizeof g_cpu, "%s", p);
                }
                break;
            }
        fclose(f);
    }
    size_t off = 0;
    for (int i = 0; i < argc && off < sizeof g_cmd - 1; i++)
        off += (size_t)snprintf(g_cmd + off, sizeof g_cmd - off, "%s%s", i ? " " : "", argv[i]);
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(g_date, sizeof g_date, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The first lines of the report: benchmark and date, machine, node socket. */
static inline void print_machine(const char *bench)
{
    const char *sock = getenv("VSCI_SOCKET");
    printf("vsci %s  -  %s\n", bench, g_date);
    printf("machine : %s, nproc=%ld, kernel %s, cpu \"%s\"\n", g_host, g_nproc, g_kernel, g_cpu);
    printf("node    : VSCI_SOCKET=%s%s\n", sock ? sock : "/tmp/vscid.sock",
           sock ? "" : " (unset; library default)");
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                     */
/* ------------------------------------------------------------------------ */

static inline void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static inline void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.4f", v);
    else
        fputs("null", f);
}

/* A lat_t as an object, or null when it was not measured. */
static inline void json_lat(FILE *f, const lat_t *L)
{
    if (!L->n) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"n\": %u, \"bad\": %u, \"median_us\": ", L->n, L->bad);
    json_num(f, L->med);
    fputs(", \"p99_us\": ", f);
    json_num(f, L->p99);
    fputs(", \"mean_us\": ", f);
    json_num(f, L->mean);
    fputs(", \"min_us\": ", f);
    json_num(f, L->min);
    fputs(", \"max_us\": ", f);
    json_num(f, L->max);
#ifdef LAT_JSON_EXTRA
    LAT_JSON_EXTRA(f, L);
#endif
    fputs(", \"hist_10us\": [", f);
    for (int b = 0; b <= NB; b++)
        fprintf(f, "%s%u", b ? ", " : "", L->hist[b]);
    fputs("]}", f);
}

/* Opens `path` for the JSON results; NULL (and a message) when it cannot. */
static inline FILE *json_open(const char *bench, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "%s: cannot write %s: %s\n", bench, path, strerror(errno));
    return f;
}

/* The opening members every benchmark writes: benchmark, date, command,
 * mode, machine (with clock_step_ns when have_step) and vsci_socket. */
static inline void json_preamble(FILE *f, const char *bench, int quick, int have_step,
                                 uint64_t step)
{
    const char *sock = getenv("VSCI_SOCKET");
    fprintf(f, "{\n  \"benchmark\": \"%s\",\n  \"date\": ", bench);
    json_str(f, g_date);
    fputs(",\n  \"command\": ", f);
    json_str(f, g_cmd);
    fprintf(f, ",\n  \"mode\": \"%s\",\n  \"machine\": {\"hostname\": ",
            quick ? "quick" : "default");
    json_str(f, g_host);
    if (have_step)
        fprintf(f, ", \"nproc\": %ld, \"clock_step_ns\": %llu, \"kernel\": ", g_nproc,
                (unsigned long long)step);
    else
        fprintf(f, ", \"nproc\": %ld, \"kernel\": ", g_nproc);
    json_str(f, g_kernel);
    fputs(", \"cpu\": ", f);
    json_str(f, g_cpu);
    fputs("},\n  \"vsci_socket\": ", f);
    json_str(f, sock ? sock : "/tmp/vscid.sock");
}

/* The end of a run, after the report: the JSON to `path` when asked for
 * (write_json says whether it was written) and the exit status, 1 when `ok`
 * is 0 or the JSON could not be written. */
static inline int json_and_status(int ok, const char *path, int (*write_json)(const char *))
{
    fflush(stdout);
    if (path && !write_json(path))
        ok = 0;
    else if (path)
        printf("json written to %s\n", path);
    return ok ? 0 : 1;
}

/* Closes the JSON file; 1 when everything was written. */
static inline int json_close(const char *bench, FILE *f, const char *path)
{
    int ok = !ferror(f);
    if (fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "%s: error writing %s\n", bench, path);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

/* -s SECTIONS: 1 or more letters of `allowed` (at most n - 1) into
 * sections[n]; 0 when invalid. */
static inline int parse_sections_of(const char *s, const char *allowed, char *sections, size_t n)
{
    if (strspn(s, allowed) != strlen(s) || !*s || strlen(s) >= n)
        return 0;
    snprintf(sections, n, "%s", s);
    return 1;
}

/* The last branches of an option loop, at option `arg` (`a` without a
 * second leading '-'): -h or -help prints the usage and ends the program
 * with 0; anything else is unknown or incomplete: 2. */
static inline int help_or_unknown(const char *bench, const char *a, const char *arg,
                                  void (*usage)(FILE *))
{
    if (!strcmp(a, "-h") || !strcmp(a, "-help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "%s: unknown or incomplete option '%s'\n", bench, arg);
    usage(stderr);
    return 2;
}

/* -s SECTIONS: 1..4 letters of "abcd" into sections[8]; 0 when invalid. */
static inline int parse_sections(const char *s, char *sections, size_t n)
{
    if (strlen(s) > 4)
        return 0;
    return parse_sections_of(s, "abcd", sections, n);
}

#endif /* VSCI_BENCH_STATS_H */
