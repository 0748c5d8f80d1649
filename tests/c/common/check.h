/*
 * check.h - a tiny assertion helper for the vsci C tests.
 *
 * Every failed check prints "file:line: ..." with the expected and actual
 * values (error codes by name) and exits the process with status 1.  The
 * process is one role of one test case (see proc.h), so the case fails and
 * the other cases still run.
 *
 *   sci_error_t err;
 *   EXPECT(SCI_ERR_OK, SCIOpen(&sd, NO_FLAGS, &err));
 *
 * EXPECT stores a sentinel in `err` before the call, so a call that forgets
 * to write its error is caught too ("<not set>").
 */
#ifndef VSCI_TEST_CHECK_H
#define VSCI_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <inttypes.h>
#include <unistd.h>

#include "sisci_api.h"

/* The "no value" helpers of SISCI's sample programs.  Dolphin's headers do
 * not define them (each program does, as here), so neither do vsci's. */
#define NO_FLAGS    0
#define NO_OFFSET   0
#define NO_CALLBACK NULL
#define NO_ARG      NULL

/* Value stored in `err` before each EXPECTed call. */
#define ERR_SENTINEL ((sci_error_t)0x7eadbeef)

/* A bit that no SISCI call accepts as a flag. */
#define BAD_FLAG 0x40000000U

static const struct { sci_error_t code; const char *name; } check_err_names[] = {
#define E_(n) { n, #n }
    E_(SCI_ERR_OK), E_(SCI_ERR_BUSY), E_(SCI_ERR_FLAG_NOT_IMPLEMENTED),
    E_(SCI_ERR_ILLEGAL_FLAG), E_(SCI_ERR_NOSPC), E_(SCI_ERR_API_NOSPC),
    E_(SCI_ERR_HW_NOSPC), E_(SCI_ERR_NOT_IMPLEMENTED), E_(SCI_ERR_ILLEGAL_ADAPTERNO),
    E_(SCI_ERR_NO_SUCH_ADAPTERNO), E_(SCI_ERR_TIMEOUT), E_(SCI_ERR_OUT_OF_RANGE),
    E_(SCI_ERR_NO_SUCH_SEGMENT), E_(SCI_ERR_ILLEGAL_NODEID), E_(SCI_ERR_CONNECTION_REFUSED),
    E_(SCI_ERR_SEGMENT_NOT_CONNECTED), E_(SCI_ERR_SIZE_ALIGNMENT),
    E_(SCI_ERR_OFFSET_ALIGNMENT), E_(SCI_ERR_ILLEGAL_PARAMETER), E_(SCI_ERR_MAX_ENTRIES),
    E_(SCI_ERR_SEGMENT_NOT_PREPARED), E_(SCI_ERR_ILLEGAL_ADDRESS),
    E_(SCI_ERR_ILLEGAL_OPERATION), E_(SCI_ERR_ILLEGAL_QUERY), E_(SCI_ERR_SEGMENTID_USED),
    E_(SCI_ERR_SYSTEM), E_(SCI_ERR_CANCELLED), E_(SCI_ERR_NOT_CONNECTED),
    E_(SCI_ERR_NOT_AVAILABLE), E_(SCI_ERR_INCONSISTENT_VERSIONS),
    E_(SCI_ERR_COND_INT_RACE_PROBLEM), E_(SCI_ERR_OVERFLOW), E_(SCI_ERR_NOT_INITIALIZED),
    E_(SCI_ERR_ACCESS), E_(SCI_ERR_NO_SUCH_NODEID), E_(SCI_ERR_NODE_NOT_RESPONDING),
    E_(SCI_ERR_NO_REMOTE_LINK_ACCESS), E_(SCI_ERR_NO_LINK_ACCESS),
    E_(SCI_ERR_TRANSFER_FAILED),
#undef E_
};
#define CHECK_N_ERRS (sizeof(check_err_names) / sizeof(check_err_names[0]))

/* Name of an error code; unknown values are formatted into a static buffer. */
static inline const char *err_name(sci_error_t e)
{
    static char buf[4][48];
    static int next;
    for (size_t i = 0; i < CHECK_N_ERRS; i++)
        if (check_err_names[i].code == e)
            return check_err_names[i].name;
    char *b = buf[next++ & 3];
    if (e == ERR_SENTINEL)
        snprintf(b, sizeof buf[0], "<not set>");
    else
        snprintf(b, sizeof buf[0], "0x%08x", (unsigned)e);
    return b;
}

/* Role prefix for messages ("A", "B", ...); set by proc.h. */
static const char *check_role = "-";

#define FAILF(...) do {                                                        \
        fflush(stdout);                                                        \
        fprintf(stderr, "%s:%d: [%s] ", __FILE__, __LINE__, check_role);       \
        fprintf(stderr, __VA_ARGS__);                                          \
        fputc('\n', stderr);                                                   \
        exit(1);                                                               \
    } while (0)

static inline void check_err_(const char *file, int line, const char *what,
                              sci_error_t got, sci_error_t want)
{
    if (got == want)
        return;
    fflush(stdout);
    fprintf(stderr, "%s:%d: [%s] %s\n    expected %s, got %s\n", file, line,
            check_role, what, err_name(want), err_name(got));
    exit(1);
}

/* Run `call` (which must write the variable `err`) and check the error. */
#define EXPECT(want, call) do {                                                \
        err = ERR_SENTINEL;                                                    \
        call;                                                                  \
        check_err_(__FILE__, __LINE__, #call, err, (want));                    \
    } while (0)

/* Run `call` and check that it failed, with any error (used where docs/api.md
 * names no specific code). */
#define EXPECT_FAIL(call) do {                                                 \
        err = ERR_SENTINEL;                                                    \
        call;                                                                  \
        if (err == SCI_ERR_OK || err == ERR_SENTINEL)                          \
            FAILF("%s\n    expected an error, got %s", #call, err_name(err));  \
    } while (0)

#define CHECK_ERR(got, want) check_err_(__FILE__, __LINE__, #got, (got), (want))

#define CHECK(cond) do {                                                       \
        if (!(cond))                                                           \
            FAILF("check failed: %s", #cond);                                  \
    } while (0)

#define CHECK_MSG(cond, ...) do {                                              \
        if (!(cond)) {                                                         \
            fflush(stdout);                                                    \
            fprintf(stderr, "%s:%d: [%s] check failed: %s\n    ", __FILE__,   \
                    __LINE__, check_role, #cond);                              \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Compare two unsigned integers. */
#define CHECK_EQ(got, want) do {                                               \
        uint64_t g_ = (uint64_t)(got), w_ = (uint64_t)(want);                  \
        if (g_ != w_)                                                          \
            FAILF("%s\n    expected %" PRIu64 " (0x%" PRIx64 "), got %" PRIu64 \
                  " (0x%" PRIx64 ")", #got, w_, w_, g_, g_);                   \
    } while (0)

#endif /* VSCI_TEST_CHECK_H */
