/*
 * roles.h - what the multi-node role programs (t_store.c, t_reflect.c)
 * share: the deadline of every wait (-wait S), a plain spin loop with that
 * deadline, NODE:SEG targets and the role's arguments.  Include after
 * common/proc.h (now_ms).
 */
#ifndef VSCI_TEST_ROLES_H
#define VSCI_TEST_ROLES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The program's name in messages (set by roles_init). */
static const char *roles_prog = "?";

/* Deadline of every wait, in ms (-wait S, default 120 s). */
static uint64_t wait_ms = 120000;

/* Name the program and take the options before the role: -wait S. */
static void roles_init(int *argc, char ***argv, const char *prog)
{
    roles_prog = prog;
    while (*argc > 2 && strcmp((*argv)[1], "-wait") == 0) {
        wait_ms = 1000u * strtoull((*argv)[2], NULL, 0);
        *argv += 2;
        *argc -= 2;
    }
}

static inline void compiler_barrier(void)
{
    __asm__ __volatile__("" ::: "memory");
}

/* Spin in a plain loop until `cond` holds or `deadline` (now_ms) passes;
 * yields the final value of `cond`.  The clock is read (vDSO, no system
 * call) every 16384 spins only. */
#define SPIN_UNTIL(cond, deadline)                                             \
    ({                                                                         \
        int ok_ = 1;                                                           \
        unsigned sp_ = 0;                                                      \
        while (!(cond)) {                                                      \
            compiler_barrier();                                                \
            if (++sp_ == 16384u) {                                             \
                sp_ = 0;                                                       \
                if (now_ms() > (deadline)) {                                   \
                    ok_ = (cond);                                              \
                    break;                                                     \
                }                                                              \
            }                                                                  \
        }                                                                      \
        ok_;                                                                   \
    })

static void parse_target(const char *s, unsigned *node, unsigned *segid)
{
    char *end;
    *node = (unsigned)strtoul(s, &end, 0);
    if (*end != ':') {
        fprintf(stderr, "%s: target \"%s\" is not NODE:SEG\n", roles_prog, s);
        exit(2);
    }
    *segid = (unsigned)strtoul(end + 1, NULL, 0);
}

/* Argument i of the role (argv[1] is the role's name). */
static const char *arg(int argc, char **argv, int i)
{
    if (i >= argc) {
        fprintf(stderr, "%s %s: missing argument %d (run without arguments for usage)\n",
                roles_prog, argc > 1 ? argv[1] : "", i - 1);
        exit(2);
    }
    return argv[i];
}

/* A number argument; a k, m or g suffix multiplies by 2^10, 2^20, 2^30. */
static unsigned long argu(int argc, char **argv, int i)
{
    const char *s = arg(argc, argv, i);
    char *end;
    unsigned long v = strtoul(s, &end, 0);
    if (*end == 'k' || *end == 'K')
        v <<= 10;
    else if (*end == 'm' || *end == 'M')
        v <<= 20;
    else if (*end == 'g' || *end == 'G')
        v <<= 30;
    return v;
}

#endif
