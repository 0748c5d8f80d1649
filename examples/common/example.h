/*
 * example.h - small helpers shared by the vsci SISCI examples: error
 * reporting, command-line numbers and a clock, the options every example
 * takes, and the setup and teardown steps several examples repeat (each a
 * few SISCI calls with their error checks, in the order an example makes
 * them).  What an example is about stays in the example itself.
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

/* The "no value" helpers of SISCI's sample programs.  Dolphin's headers do
 * not define them (each program does, as here), so neither do vsci's. */
#define NO_FLAGS    0
#define NO_OFFSET   0
#define NO_CALLBACK NULL
#define NO_ARG      NULL

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

/* The adapter (-a) and the timeout of every wait (-timeout MS). */
static unsigned int adapter = 0;
static unsigned int timeout_ms = SCI_INFINITE_TIMEOUT;

/* A whole-number option value: the value after argv[*i]. */
static inline unsigned int opt_uint(int argc, char **argv, int *i)
{
    return (unsigned int)parse_size(opt_value(argc, argv, i));
}

/* The options every example takes: -server, -client, -rn NODE, -a ADAPTER
 * and -timeout MS.  Returns 1 when argv[*i] was one of them. */
static inline int common_option(int argc, char **argv, int *i, int *server,
                                unsigned int *remote_node)
{
    if (!strcmp(argv[*i], "-server"))
        *server = 1;
    else if (!strcmp(argv[*i], "-client"))
        *server = 0;
    else if (!strcmp(argv[*i], "-rn"))
        *remote_node = opt_uint(argc, argv, i);
    else if (!strcmp(argv[*i], "-a"))
        adapter = opt_uint(argc, argv, i);
    else if (!strcmp(argv[*i], "-timeout"))
        timeout_ms = opt_uint(argc, argv, i);
    else
        return 0;
    return 1;
}

/* SCIInitialize and SCIOpen: a descriptor to the local node. */
static inline sci_desc_t open_descriptor(void)
{
    sci_error_t err;
    sci_desc_t sd;
    SCIInitialize(NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIOpen");
    return sd;
}

/* SCIClose and SCITerminate. */
static inline void close_descriptor(sci_desc_t sd)
{
    sci_error_t err;
    SCIClose(sd, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIClose");
    SCITerminate();
}

/* This node's id on the adapter. */
static inline unsigned int local_node_id(void)
{
    sci_error_t err;
    unsigned int node;
    SCIGetLocalNodeId(adapter, &node, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIGetLocalNodeId");
    return node;
}

/* SCICreateSegment and SCIMapLocalSegment of all its `size` bytes; returns
 * the mapped address.  When the id is taken, fails with "segment id ... is
 * in use" followed by `in_use` (a hint).  The segment is not available yet:
 * fill in what the peer must find first, then call make_available(). */
static inline volatile void *create_mapped_segment(sci_desc_t sd,
                                                   sci_local_segment_t *segment, sci_map_t *map,
                                                   unsigned int segid, size_t size,
                                                   const char *in_use)
{
    sci_error_t err;
    SCICreateSegment(sd, segment, segid, size, NULL, NULL, NO_FLAGS, &err);
    if (err == SCI_ERR_SEGMENTID_USED)
        fail("segment id 0x%x is in use%s", segid, in_use);
    DIE_ON_ERROR(err, "SCICreateSegment");
    volatile void *p = SCIMapLocalSegment(*segment, map, 0, size, NULL, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIMapLocalSegment");
    return p;
}

/* SCIPrepareSegment and SCISetSegmentAvailable: peers may connect now. */
static inline void make_available(sci_local_segment_t segment)
{
    sci_error_t err;
    SCIPrepareSegment(segment, adapter, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIPrepareSegment");
    SCISetSegmentAvailable(segment, adapter, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCISetSegmentAvailable");
}

/* SCIUnmapSegment, SCISetSegmentUnavailable when `unavailable`, and
 * SCIRemoveSegment. */
static inline void remove_mapped_segment(sci_local_segment_t segment, sci_map_t map,
                                         int unavailable)
{
    sci_error_t err;
    SCIUnmapSegment(map, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIUnmapSegment");
    if (unavailable) {
        SCISetSegmentUnavailable(segment, adapter, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCISetSegmentUnavailable");
    }
    SCIRemoveSegment(segment, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIRemoveSegment");
}

/* Waits (up to -timeout for each event) until a peer disconnects from the
 * local segment. */
static inline void wait_for_disconnect(sci_local_segment_t segment)
{
    sci_error_t err;
    for (;;) {
        unsigned int node, adap;
        sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(segment, &node, &adap,
                                                                timeout_ms, NO_FLAGS, &err);
        DIE_ON_ERROR(err, "SCIWaitForLocalSegmentEvent");
        if (r == SCI_CB_DISCONNECT)
            break;
    }
}

/* SCIConnectSegment to segment `segid` on `node`, waiting up to -timeout
 * for it to become available. */
static inline void connect_segment(sci_desc_t sd, sci_remote_segment_t *segment,
                                   unsigned int node, unsigned int segid)
{
    sci_error_t err;
    SCIConnectSegment(sd, segment, node, segid, adapter, NULL, NULL, timeout_ms, NO_FLAGS,
                      &err);
    DIE_ON_ERROR(err, "SCIConnectSegment");
}

/* SCIMapRemoteSegment of `size` bytes at `offset`; `what` names the call
 * in an error message. */
static inline volatile void *map_remote(sci_remote_segment_t segment, sci_map_t *map,
                                        size_t offset, size_t size, const char *what)
{
    sci_error_t err;
    volatile void *p = SCIMapRemoteSegment(segment, map, offset, size, NULL, NO_FLAGS, &err);
    DIE_ON_ERROR(err, what);
    return p;
}

/* SCIUnmapSegment of a header map and a data map, and SCIDisconnectSegment. */
static inline void disconnect_mapped_segment(sci_remote_segment_t segment, sci_map_t hmap,
                                             sci_map_t dmap)
{
    sci_error_t err;
    SCIUnmapSegment(dmap, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIUnmapSegment");
    SCIUnmapSegment(hmap, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIUnmapSegment");
    SCIDisconnectSegment(segment, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCIDisconnectSegment");
}

/* SCICreateInterrupt; *intno is the number asked for and, on return, the
 * number given (no callback, no flags). */
static inline void create_interrupt(sci_desc_t sd, sci_local_interrupt_t *intr,
                                    unsigned int *intno)
{
    sci_error_t err;
    SCICreateInterrupt(sd, intr, adapter, intno, NULL, NULL, NO_FLAGS, &err);
    DIE_ON_ERROR(err, "SCICreateInterrupt");
}

/* SCIConnectInterrupt to interrupt `intno` on `node`, waiting up to
 * -timeout for it to exist; `what` names the call in an error message. */
static inline void connect_interrupt(sci_desc_t sd, sci_remote_interrupt_t *intr,
                                     unsigned int node, unsigned int intno, const char *what)
{
    sci_error_t err;
    SCIConnectInterrupt(sd, intr, node, adapter, intno, timeout_ms, NO_FLAGS, &err);
    DIE_ON_ERROR(err, what);
}

#endif /* VSCI_EXAMPLE_H */
