/*
 * example.h - small helpers shared by the vsci SISCI examples: error
 * reporting, command-line numbers and a clock.  Everything SISCI-specific
 * stays in the examples themselves.
 */
#ifndef VSCI_EXAMPLE_H
#define VSCI_EXAMPLE_H

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sisci_api.h"

/* Print "prog: what: <SISCI error text>" and exit 1 when err is not OK. */
#define DIE_ON_ERROR(err, what) do {                                           \
        if ((err) != SCI_ERR_OK) {                                             \
            fprintf(stderr, "%s: %s failed: %s (0x%x)\n", example_name, (what),\
                    SCIGetErrorString(err), (unsigned)(err));                  \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Each example sets this to its name for messages. */
static const char *example_name = "example";

static inline void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#include <stdarg.h>
static inline void fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: ", example_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Microseconds on a monotonic clock. */
static inline uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A number with an optional k/m/g suffix (powers of 1024); 0x... allowed. */
static inline uint64_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    uint64_t v = strtoull(s, &end, 0);
    if (errno || end == s)
        fail("not a number: \"%s\"", s);
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        fail("bad size: \"%s\"", s);
    return v;
}

/* The value after option argv[*i]; exits when it is missing. */
static inline const char *opt_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc)
        fail("option %s needs a value", argv[*i]);
    return argv[++*i];
}

/* Bandwidth in MB/s (10^6 bytes per second), for printing. */
static inline double mb_per_s(uint64_t bytes, uint64_t us)
{
    return us ? (double)bytes / (double)us : 0.0;
}

#endif /* VSCI_EXAMPLE_H */
