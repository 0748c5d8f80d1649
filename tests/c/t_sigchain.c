/*
 * t_sigchain.c - roles for the signal-chaining tests (issue 33,
 * crates/vsci-systest/tests/signals.rs): a program that handles its own
 * fault signals keeps its remote maps working, and its own handlers keep
 * working for the faults that are its own.
 *
 * A store into a map of another node's segment is trapped by libsisci (a
 * SIGBUS from userfaultfd, or a handler thread) and shipped to the owner.
 * Nothing of that may show to the program: whatever it does with SIGSEGV
 * and SIGBUS (handlers before or after mapping, SA_RESETHAND, signal()
 * save/restore, blocking them, an alternate signal stack, SIG_IGN, loading
 * libsisci with dlopen, several storing threads, libsisci.a), every store
 * arrives, what it asks sigaction() is what it installed, and a fault of its
 * own behaves exactly as it would without libsisci.
 *
 *   t_sigchain [-wait S] owner SEG WNODE:WSEG SLOTS TOTAL
 *       Creates SEG (one page) on its node; slot k (k < SLOTS) is the word
 *       at 64*k.  Maps WNODE:WSEG (the writer's own segment; ack word k at
 *       64*k).  For every slot it expects the values 1..TOTAL in order: when
 *       slot k reads the next value v it stores v into ack word k (a plain
 *       store, no call).  Any other value
 *       than v-1 or v is a store out of order, lost or corrupt; a slot that
 *       makes no progress for -wait S seconds is a lost store.  Prints
 *       "OWNER DONE" when every slot reached TOTAL.
 *
 *   t_sigchain [-wait S] writer --row ROW [--stores N] [--core] OWNERNODE:SEG MYSEG
 *       Creates MYSEG (one page; its ack words), maps OWNERNODE:SEG, sets up
 *       its signals as ROW says (some rows before SCIInitialize), and then,
 *       in each storing thread k (four with four_threads, else one): stores
 *       1..N into slot k with an SCIFlush after each, then N+1..2N with no
 *       call at all, each time spinning on its own ack word k until the
 *       owner acknowledges that value (deadline: -wait S).  Prints
 *       "WRITER STORES DONE", then compares what sigaction() (and, in the
 *       rows that change them, the signal mask and sigaltstack) report with
 *       what it installed: "REPORT-BACK OK" or one "REPORT-BACK MISMATCH"
 *       line per difference.  Then it makes a fault of its own:
 *         a NULL write (SIGSEGV) - its handler prints "OWN SIGSEGV HANDLED"
 *           and _exit(42); with SA_RESETHAND (row resethand) the handler
 *           returns, the write faults again and the default action kills
 *           the process; blocked, SIG_IGN or no handler: the process dies of
 *           SIGSEGV (the kernel forces a synchronous fault);
 *         rows bus_*: a store into a page of a file mapping past the file's
 *           end (after ftruncate) - SIGBUS with si_code BUS_ADRERR.  Row
 *           bus_adrerr: its SA_SIGINFO handler checks si_code and si_addr,
 *           prints "OWN SIGBUS HANDLED", stores 2N+1 into slot 0 through the
 *           remote map from inside the handler (the owner then expects
 *           TOTAL = 2N+1), siglongjmps out; the program waits for the ack,
 *           prints "STORE FROM SIGBUS HANDLER ARRIVED" and _exit(42).  Rows
 *           bus_dfl (no handler) and sig_ign_bus (SIG_IGN): the process dies
 *           of SIGBUS.
 *       --core raises the core-size limit to its hard limit, so that a death
 *       by the default action dumps core (as it would for the program
 *       without libsisci); run it in a scratch directory.
 *       A SIGSEGV or SIGBUS reaching one of its handlers before the final
 *       fault prints "UNEXPECTED SIG..." and exits 3: libsisci's trap leaked
 *       into the program.
 *
 * Rows (ROW):
 *   handlers_after_map  sigaction SIGSEGV + SIGBUS handlers (SA_SIGINFO)
 *                       installed after SCIMapRemoteSegment
 *   handlers_before_map the same, installed before SCIInitialize
 *   resethand           the same after mapping, with SA_RESETHAND
 *   signal_save_restore signal() handlers after mapping, and around every
 *                       100 stores old = signal(SIGBUS, h2), signal(SIGSEGV,
 *                       h2) ... signal(SIG*, old), as GASNet does; every
 *                       value signal() returns is checked
 *   blocked             handlers installed, then the storing thread blocks
 *                       SIGSEGV + SIGBUS with pthread_sigmask
 *   altstack            sigaltstack (64 KiB) + SA_ONSTACK handlers for
 *                       SIGSEGV, SIGBUS and SIGUSR1; every 10th store is made
 *                       by the SIGUSR1 handler (raise), on the alternate stack
 *   sig_ign             SIGSEGV and SIGBUS set to SIG_IGN
 *   dlopen              (t_sigchain_dlopen, built without -lsisci) handlers
 *                       installed first, then dlopen("libsisci.so",
 *                       RTLD_NOW | RTLD_LOCAL) and dlsym of every SCI call
 *   four_threads        handlers after mapping; 4 threads store, each its own
 *                       counter into its own slot
 *   static              (t_sigchain_static, linked with libsisci.a) as
 *                       handlers_after_map
 *   no_handlers         nothing installed (the baseline)
 *   bus_adrerr          handlers after mapping; the final fault is a SIGBUS
 *                       of the program's own (see above)
 *   bus_dfl             nothing installed; final fault SIGBUS of its own
 *   sig_ign_bus         SIG_IGN for both; final fault SIGBUS of its own
 *   bus_nested          SA_SIGINFO handlers after mapping; final fault SIGBUS of
 *                       its own, whose handler makes the same fault again:
 *                       SIGBUS is blocked in the handler, the process dies of it
 *   bus_nested_nodefer  the same with SA_NODEFER on SIGBUS: the handler runs
 *                       again, nested ("NESTED OWN SIGBUS HANDLED"), _exit(42)
 *   raw_syscall         handlers installed with syscall(SYS_rt_sigaction)
 *                       (SA_RESTORER with a trampoline of its own) and read
 *                       back the same way; x86_64 only
 *   signalfd_blocked    nothing installed; SIGSEGV + SIGBUS blocked with
 *                       sigprocmask and read from a signalfd, which must stay
 *                       empty; the own SIGSEGV kills it
 *   sysv_signal         sysv_signal(SIGSEGV, h) (SA_RESETHAND | SA_NODEFER) and
 *                       sigset(SIGBUS, h) after mapping
 *   racing_installs     two threads store while the main thread, in a loop,
 *                       installs SIGBUS/SIGSEGV handlers (sigaction, signal
 *                       save/restore), reads them back and blocks/unblocks
 *                       SIGBUS
 *   fillset_blocked     handlers after mapping; the storing thread blocks every
 *                       signal (sigfillset + pthread_sigmask SIG_SETMASK); the
 *                       own SIGSEGV kills it
 *   raised_sigbus       a SA_SIGINFO SIGBUS handler; every 1,000 stores the
 *                       program sends itself SIGBUS with raise, kill and
 *                       sigqueue: each reaches its handler with its si_code,
 *                       si_pid and si_value
 *   async_stores        handlers after mapping; each store is a 16-byte memcpy
 *                       into the slot's line, then the counter; a thread of
 *                       the program's sends the storing thread SIGUSR2 every
 *                       ~20 us, whose handler stores a count and memcpys 24
 *                       bytes into the remote map (plain stores: async-signal-
 *                       safe on hardware), so that it interrupts libsisci's
 *                       store path, memcpy and SCIFlush; at the end the owner's
 *                       copy of those bytes (a remote read after SCIFlush) is
 *                       the handler's last ("ASYNC STORES ARRIVED")
 *   program_signals     handlers after mapping; after the stores (every thread
 *                       of libsisci running) the main thread blocks SIGUSR1
 *                       and waits for it with sigtimedwait 20 times after
 *                       kill(getpid(), SIGUSR1) (no handler: delivered to a
 *                       thread of libsisci it would kill the process); then
 *                       it blocks SIGALRM too, a program thread unblocks it,
 *                       and each of 20 kill(getpid(), SIGALRM) must run the
 *                       handler in that thread ("PROGRAM SIGNALS OK")
 *
 * Why one file of about 1,200 lines: it is one test program built three
 * ways from this one source (t_sigchain, t_sigchain_static with libsisci.a,
 * t_sigchain_dlopen with dlopen; see the Makefile), and every row above is
 * a few lines of set-up around the same owner, writer, store loop and
 * report-back checks; a row is easiest to check against its neighbours.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sisci_api.h"

#ifdef SIGCHAIN_DLOPEN
/* Built without libsisci: every SCI call goes through a pointer that
 * load_sisci() fills with dlsym() after the program's handlers are in. */
#include <dlfcn.h>
#define SCI_FNS(X)                                                             \
    X(SCIInitialize) X(SCIOpen) X(SCIClose) X(SCIGetLocalNodeId)               \
    X(SCICreateSegment) X(SCIPrepareSegment) X(SCISetSegmentAvailable)         \
    X(SCISetSegmentUnavailable) X(SCIRemoveSegment)                            \
    X(SCIWaitForLocalSegmentEvent) X(SCIConnectSegment)                        \
    X(SCIDisconnectSegment) X(SCIGetRemoteSegmentSize) X(SCIMapLocalSegment)   \
    X(SCIMapRemoteSegment) X(SCIUnmapSegment) X(SCIFlush)
#define DL_DECL_(f) static __typeof__(f) *dl_##f;
SCI_FNS(DL_DECL_)
#define SCIInitialize (*dl_SCIInitialize)
#define SCIOpen (*dl_SCIOpen)
#define SCIClose (*dl_SCIClose)
#define SCIGetLocalNodeId (*dl_SCIGetLocalNodeId)
#define SCICreateSegment (*dl_SCICreateSegment)
#define SCIPrepareSegment (*dl_SCIPrepareSegment)
#define SCISetSegmentAvailable (*dl_SCISetSegmentAvailable)
#define SCISetSegmentUnavailable (*dl_SCISetSegmentUnavailable)
#define SCIRemoveSegment (*dl_SCIRemoveSegment)
#define SCIWaitForLocalSegmentEvent (*dl_SCIWaitForLocalSegmentEvent)
#define SCIConnectSegment (*dl_SCIConnectSegment)
#define SCIDisconnectSegment (*dl_SCIDisconnectSegment)
#define SCIGetRemoteSegmentSize (*dl_SCIGetRemoteSegmentSize)
#define SCIMapLocalSegment (*dl_SCIMapLocalSegment)
#define SCIMapRemoteSegment (*dl_SCIMapRemoteSegment)
#define SCIUnmapSegment (*dl_SCIUnmapSegment)
#define SCIFlush (*dl_SCIFlush)

static void load_sisci(void)
{
    const char *name = getenv("VSCI_TEST_LIBSISCI");
    if (!name || !*name)
        name = "libsisci.so";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "t_sigchain_dlopen: dlopen(%s): %s\n", name, dlerror());
        exit(1);
    }
#define DL_LOAD_(f)                                                            \
    if (!(dl_##f = (__typeof__(dl_##f))dlsym(h, #f))) {                        \
        fprintf(stderr, "t_sigchain_dlopen: dlsym(%s): %s\n", #f, dlerror()); \
        exit(1);                                                               \
    }
    SCI_FNS(DL_LOAD_)
    printf("LOADED %s with dlopen(RTLD_NOW | RTLD_LOCAL)\n", name);
}
#else
static void load_sisci(void) {}
#endif

#include "common/proc.h"
#include "common/roles.h"

#define PAGE 4096u
#define SLOT_STRIDE 64u
#define MAX_SLOTS 8u

#ifdef SIGCHAIN_DLOPEN
#define BUILD_KIND "dlopen"
#elif defined(SIGCHAIN_STATIC)
#define BUILD_KIND "static"
#else
#define BUILD_KIND "shared"
#endif

/* ---- segments (as in t_store.c) ------------------------------------------ */

struct lseg {
    sci_local_segment_t seg;
    sci_map_t map;
    volatile unsigned char *p;
};

static void lseg_create(sci_desc_t sd, struct lseg *l, unsigned segid)
{
    sci_error_t err;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &l->seg, segid, PAGE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, l->p = SCIMapLocalSegment(l->seg, &l->map, 0, PAGE, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(l->seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(l->seg, 0, NO_FLAGS, &err));
}

struct rseg {
    sci_remote_segment_t rs;
    sci_map_t map;
    volatile unsigned char *p;
    unsigned node, segid;
};

/* Connect to NODE:SEG (retrying up to 60 s until it exists) and map its
 * first page. */
static void rseg_connect(sci_desc_t sd, struct rseg *r, const char *target)
{
    sci_error_t err;
    parse_target(target, &r->node, &r->segid);
    uint64_t t0 = now_ms();
    for (unsigned attempt = 1;; attempt++) {
        err = ERR_SENTINEL;
        SCIConnectSegment(sd, &r->rs, r->node, r->segid, 0, NULL, NULL, 1000, NO_FLAGS, &err);
        if (err == SCI_ERR_OK)
            break;
        if (now_ms() - t0 > 60000)
            FAILF("SCIConnectSegment(node %u, segment 0x%x) still fails after %u attempts in "
                  "60 s: %s",
                  r->node, r->segid, attempt, err_name(err));
        sleep_ms(50);
    }
    CHECK_MSG(SCIGetRemoteSegmentSize(r->rs) >= PAGE, "segment 0x%x of node %u is smaller than a page",
              r->segid, r->node);
    EXPECT(SCI_ERR_OK, r->p = SCIMapRemoteSegment(r->rs, &r->map, 0, PAGE, NULL, NO_FLAGS, &err));
}

static inline volatile uint32_t *word_at(volatile unsigned char *base, size_t off)
{
    return (volatile uint32_t *)(base + off);
}

/* ---- the owner -------------------------------------------------------------- */

static int owner(unsigned segid, const char *writer, unsigned slots, uint32_t total)
{
    sci_error_t err;
    unsigned node;
    CHECK_MSG(slots >= 1 && slots <= MAX_SLOTS, "SLOTS %u: 1..%u", slots, MAX_SLOTS);
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, segid);
    printf("OWNER READY node=%u seg=0x%x slots=%u total=%u\n", node, segid, slots, total);
    struct rseg ack;
    rseg_connect(sd, &ack, writer);
    printf("OWNER CONNECTED to the writer's segment %s\n", writer);

    volatile uint32_t *slot[MAX_SLOTS], *ackw[MAX_SLOTS];
    uint32_t next[MAX_SLOTS];
    uint64_t last[MAX_SLOTS];
    uint64_t t0 = now_ms();
    for (unsigned k = 0; k < slots; k++) {
        slot[k] = word_at(own.p, SLOT_STRIDE * k);
        ackw[k] = word_at(ack.p, SLOT_STRIDE * k);
        next[k] = 1;
        last[k] = t0;
    }
    unsigned left = slots;
    unsigned spins = 0;
    while (left) {
        for (unsigned k = 0; k < slots; k++) {
            if (next[k] > total)
                continue;
            uint32_t v = *slot[k];
            if (v == next[k]) {
                *ackw[k] = v; /* a plain store: it arrives promptly */
                last[k] = now_ms();
                if (next[k]++ == total)
                    left--;
                else if (v % 5000 == 0)
                    printf("OWNER slot %u: %u of %u arrived in order\n", k, v, total);
            } else if (v != next[k] - 1) {
                FAILF("slot %u: read %u while waiting for %u (the writer stores %u only after "
                      "the owner acknowledged %u): a store arrived out of order, was lost or "
                      "is corrupt",
                      k, v, next[k], next[k], next[k] - 1);
            }
        }
        compiler_barrier();
        if (++spins == 4096) {
            spins = 0;
            uint64_t now = now_ms();
            for (unsigned k = 0; k < slots; k++)
                if (next[k] <= total && now - last[k] > wait_ms)
                    FAILF("LOST STORE: slot %u still holds %u after %" PRIu64
                          " ms without progress; waiting for %u of %u (value %u arrived and was "
                          "acknowledged; the writer stores the next only after its ack)",
                          k, *slot[k], now - last[k], next[k], total, next[k] - 1);
        }
    }
    uint64_t ms = now_ms() - t0;
    printf("OWNER DONE slots=%u total=%u ms=%" PRIu64 ": every value arrived, in order\n", slots,
           total, ms);
    /* The writer may already be gone (it ends with a fault of its own):
     * errors here are noted, not judged. */
    err = ERR_SENTINEL;
    SCIUnmapSegment(ack.map, NO_FLAGS, &err);
    if (err != SCI_ERR_OK)
        printf("note: SCIUnmapSegment of the writer's segment: %s\n", err_name(err));
    err = ERR_SENTINEL;
    SCIDisconnectSegment(ack.rs, NO_FLAGS, &err);
    if (err != SCI_ERR_OK)
        printf("note: SCIDisconnectSegment of the writer's segment: %s\n", err_name(err));
    /* Wait (bounded) for the writer to leave our segment, then release. */
    uint64_t deadline = now_ms() + 30000;
    int gone = 0;
    while (!gone && now_ms() < deadline) {
        unsigned n = 0, a = 0;
        err = ERR_SENTINEL;
        sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(own.seg, &n, &a, 1000, NO_FLAGS, &err);
        if (err == SCI_ERR_OK && (r == SCI_CB_DISCONNECT || r == SCI_CB_LOST))
            gone = 1;
    }
    if (!gone)
        printf("warning: the writer did not leave segment 0x%x within 30 s\n", segid);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(own.map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(own.seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(own.seg, NO_FLAGS, &err));
    close_sd(sd);
    printf("OWNER RELEASED\n");
    return 0;
}

/* ---- the writer's signal handling --------------------------------------------- */

enum row {
    R_AFTER, R_BEFORE, R_RESETHAND, R_SAVE_RESTORE, R_BLOCKED, R_ALTSTACK, R_SIG_IGN,
    R_DLOPEN, R_FOUR_THREADS, R_STATIC, R_NONE, R_BUS_ADRERR, R_BUS_DFL, R_SIG_IGN_BUS,
    R_BUS_NESTED, R_BUS_NESTED_NODEFER, R_RAW_SYSCALL, R_SIGNALFD, R_SYSV, R_RACING,
    R_FILLSET, R_RAISED_BUS, R_ASYNC_STORES, R_PROGRAM_SIGNALS,
};

static const struct { const char *name; enum row row; } rows[] = {
    { "handlers_after_map", R_AFTER }, { "handlers_before_map", R_BEFORE },
    { "resethand", R_RESETHAND }, { "signal_save_restore", R_SAVE_RESTORE },
    { "blocked", R_BLOCKED }, { "altstack", R_ALTSTACK }, { "sig_ign", R_SIG_IGN },
    { "dlopen", R_DLOPEN }, { "four_threads", R_FOUR_THREADS }, { "static", R_STATIC },
    { "no_handlers", R_NONE }, { "bus_adrerr", R_BUS_ADRERR }, { "bus_dfl", R_BUS_DFL },
    { "sig_ign_bus", R_SIG_IGN_BUS }, { "bus_nested", R_BUS_NESTED },
    { "bus_nested_nodefer", R_BUS_NESTED_NODEFER }, { "raw_syscall", R_RAW_SYSCALL },
    { "signalfd_blocked", R_SIGNALFD }, { "sysv_signal", R_SYSV },
    { "racing_installs", R_RACING }, { "fillset_blocked", R_FILLSET },
    { "raised_sigbus", R_RAISED_BUS }, { "async_stores", R_ASYNC_STORES },
    { "program_signals", R_PROGRAM_SIGNALS },
};

static int bus_row(enum row r)
{
    return r == R_BUS_ADRERR || r == R_BUS_DFL || r == R_SIG_IGN_BUS || r == R_BUS_NESTED ||
           r == R_BUS_NESTED_NODEFER;
}

static enum row row;
static const char *row_name;

/* Set right before the program's own fault: a signal reaching a handler
 * before that is libsisci's trap leaking into the program. */
static volatile sig_atomic_t final_fault;

/* The page past the end of the file (rows bus_*). */
static volatile unsigned char *bus_page;

/* Row bus_adrerr: the store the SIGBUS handler makes through the remote
 * map, and where it jumps back to. */
static volatile uint32_t *handler_slot;
static uint32_t handler_value;
static sigjmp_buf bus_jump;

/* Row altstack. */
#define ALTSTACK_SIZE (64u * 1024u)
static unsigned char *altstack_base;
static volatile uint32_t *usr1_slot;
static volatile uint32_t usr1_value;
static volatile sig_atomic_t usr1_off_stack; /* a SIGUSR1 handler ran off the alternate stack */
static volatile sig_atomic_t usr1_runs;

static void say(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(1, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static int on_altstack(void)
{
    unsigned char here;
    if (!altstack_base)
        return 0;
    return &here >= altstack_base && &here < altstack_base + ALTSTACK_SIZE;
}

static void unexpected(int sig, const siginfo_t *si)
{
    char b[256];
    snprintf(b, sizeof b,
             "UNEXPECTED %s reached the program's handler before its own fault (si_code=%d "
             "si_addr=%p): libsisci's trap leaked into the program\n",
             sig == SIGBUS ? "SIGBUS" : sig == SIGSEGV ? "SIGSEGV" : "signal",
             si ? si->si_code : -1, si ? si->si_addr : NULL);
    say(b);
    _exit(3);
}

static void segv_info(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (!final_fault)
        unexpected(sig, si);
    char b[256];
    snprintf(b, sizeof b,
             "OWN SIGSEGV HANDLED row=%s signo=%d si_code=%d si_addr=%p on_altstack=%d\n",
             row_name, si->si_signo, si->si_code, si->si_addr, on_altstack());
    say(b);
    if (row == R_RESETHAND) {
        /* Return: the write faults again, now under SIG_DFL. */
        say("OWN SIGSEGV HANDLER RETURNS (SA_RESETHAND: the next fault takes the default action)\n");
        return;
    }
    _exit(42);
}

static void segv_plain(int sig)
{
    if (!final_fault)
        unexpected(sig, NULL);
    char b[160];
    snprintf(b, sizeof b, "OWN SIGSEGV HANDLED row=%s signo=%d (a handler without SA_SIGINFO)\n", row_name, sig);
    say(b);
    _exit(42);
}

static volatile sig_atomic_t bus_depth;

static void bus_info(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (!final_fault || !bus_row(row))
        unexpected(sig, si);
    char b[256];
    int addr_ok = si->si_addr == (void *)bus_page;
    int depth = bus_depth++;
    snprintf(b, sizeof b,
             "%sOWN SIGBUS HANDLED row=%s signo=%d si_code=%d%s si_addr=%p (%s) depth=%d\n",
             depth ? "NESTED " : "", row_name, si->si_signo, si->si_code,
             si->si_code == BUS_ADRERR ? " (BUS_ADRERR)" : " (NOT BUS_ADRERR)", si->si_addr,
             addr_ok ? "the page past the file's end" : "NOT the page it touched", depth);
    say(b);
    if (si->si_code != BUS_ADRERR || !addr_ok)
        _exit(5);
    if (row == R_BUS_NESTED || row == R_BUS_NESTED_NODEFER) {
        if (depth > 0)
            _exit(42); /* SA_NODEFER: the handler ran again, nested */
        /* The same fault again, inside the handler: with SA_NODEFER the
         * handler runs again; without, SIGBUS is blocked here and the
         * kernel kills the process with it. */
        say("A SECOND OWN SIGBUS INSIDE THE HANDLER\n");
        bus_page[0] = 2;
        say("THE SECOND OWN SIGBUS DID NOT FAULT\n");
        _exit(6);
    }
    /* A remote store from inside the program's own SIGBUS handler (which
     * runs with SIGBUS blocked, as the program asked): libsisci traps it
     * all the same. */
    *handler_slot = handler_value;
    say("STORED FROM THE SIGBUS HANDLER\n");
    siglongjmp(bus_jump, 1);
}

/* Row raised_sigbus: SIGBUS sent by the program to itself (raise, kill,
 * sigqueue) reaches its handler as sent; a kernel-generated one before the
 * final fault is a leak. */
static volatile sig_atomic_t user_bus, user_bus_bad;
static volatile int queued_value;

static void bus_counting(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (si->si_code > 0)
        unexpected(sig, si);
    user_bus++;
    if (si->si_code == SI_QUEUE && si->si_value.sival_int != queued_value)
        user_bus_bad = 1;
    if ((si->si_code == SI_USER || si->si_code == SI_QUEUE) && si->si_pid != getpid())
        user_bus_bad = 1;
}

static void bus_plain(int sig)
{
    unexpected(sig, NULL);
}

/* The handler signal_save_restore puts in place around its stores. */
static void bus_saved(int sig)
{
    unexpected(sig, NULL);
}

static void usr1_info(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    (void)uc;
    if (!on_altstack())
        usr1_off_stack = 1;
    usr1_runs++;
    *usr1_slot = usr1_value; /* a remote store on the alternate stack */
}

/* What the program installed, to compare with what it is told. */
struct installed {
    int sig;
    int set;          /* the program installed something for sig */
    struct sigaction sa;
};
static struct installed inst[3] = { { .sig = SIGSEGV }, { .sig = SIGBUS }, { .sig = SIGUSR1 } };
static int mismatches;

static const char *sig_name(int sig)
{
    return sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGUSR1 ? "SIGUSR1" : "?";
}

static void mismatch(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mismatch(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("REPORT-BACK MISMATCH ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    mismatches++;
}

static struct installed *inst_of(int sig)
{
    for (int i = 0; i < 3; i++)
        if (inst[i].sig == sig)
            return &inst[i];
    abort();
}

/* Install with sigaction() and remember it. */
static void install(int sig, void (*fn)(int, siginfo_t *, void *), void (*plain)(int), int flags)
{
    struct installed *in = inst_of(sig);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (fn) {
        sa.sa_sigaction = fn;
        flags |= SA_SIGINFO;
    } else {
        sa.sa_handler = plain;
    }
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2); /* a mask to report back */
    if (sigaction(sig, &sa, NULL) != 0)
        FAILF("sigaction(%s): %s", sig_name(sig), strerror(errno));
    in->set = 1;
    in->sa = sa;
}

/* What glibc's signal() installs: the handler, sig in its mask,
 * SA_RESTART (BSD semantics). */
static void install_with_signal(int sig, void (*plain)(int))
{
    struct installed *in = inst_of(sig);
    void (*old)(int) = signal(sig, plain);
    if (old == SIG_ERR)
        FAILF("signal(%s): %s", sig_name(sig), strerror(errno));
    if (old != SIG_DFL)
        mismatch("%s: the first signal() returned %p, not SIG_DFL (the program installed "
                 "nothing before)", sig_name(sig), (void *)old);
    memset(&in->sa, 0, sizeof in->sa);
    in->sa.sa_handler = plain;
    in->sa.sa_flags = SA_RESTART;
    sigemptyset(&in->sa.sa_mask);
    sigaddset(&in->sa.sa_mask, sig);
    in->set = 1;
}

/* Before the program installs anything, it must see SIG_DFL. */
static void check_default(int sig, const char *when)
{
    struct sigaction cur;
    memset(&cur, 0, sizeof cur);
    if (sigaction(sig, NULL, &cur) != 0)
        FAILF("sigaction(%s, NULL, &old): %s", sig_name(sig), strerror(errno));
    if (cur.sa_handler != SIG_DFL)
        mismatch("%s %s: sigaction reports handler %p flags 0x%x, not SIG_DFL (the program "
                 "installed nothing yet)", sig_name(sig), when, (void *)cur.sa_handler,
                 (unsigned)cur.sa_flags);
}

/* SA_RESTORER is the C library's business (glibc adds it to every
 * sigaction and reports it back); everything else must be as installed. */
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

static void check_reported(int sig)
{
    struct installed *in = inst_of(sig);
    struct sigaction cur;
    memset(&cur, 0, sizeof cur);
    if (sigaction(sig, NULL, &cur) != 0)
        FAILF("sigaction(%s, NULL, &old): %s", sig_name(sig), strerror(errno));
    struct sigaction want;
    memset(&want, 0, sizeof want);
    if (in->set)
        want = in->sa;
    else
        want.sa_handler = SIG_DFL;
    if ((void *)cur.sa_handler != (void *)want.sa_handler)
        mismatch("%s: sigaction reports handler %p, the program installed %p", sig_name(sig),
                 (void *)cur.sa_handler, (void *)want.sa_handler);
    unsigned gf = (unsigned)cur.sa_flags & ~(unsigned)SA_RESTORER;
    unsigned wf = (unsigned)want.sa_flags & ~(unsigned)SA_RESTORER;
    if (in->set && gf != wf)
        mismatch("%s: sigaction reports flags 0x%x, the program installed 0x%x", sig_name(sig),
                 gf, wf);
    if (in->set)
        for (int s = 1; s < 65; s++) {
            if (s == SIGKILL || s == SIGSTOP || s == 32 || s == 33)
                continue;
            int g = sigismember(&cur.sa_mask, s) == 1, w = sigismember(&want.sa_mask, s) == 1;
            if (g != w)
                mismatch("%s: signal %d is %s the mask sigaction reports, but %s the mask the "
                         "program installed", sig_name(sig), s, g ? "in" : "not in",
                         w ? "in" : "not in");
        }
}

static void check_mask_blocked(const char *who)
{
    sigset_t m;
    sigemptyset(&m);
    pthread_sigmask(SIG_BLOCK, NULL, &m);
    if (sigismember(&m, SIGSEGV) != 1 || sigismember(&m, SIGBUS) != 1)
        mismatch("%s: pthread_sigmask reports SIGSEGV %s, SIGBUS %s; the thread blocked both",
                 who, sigismember(&m, SIGSEGV) == 1 ? "blocked" : "NOT blocked",
                 sigismember(&m, SIGBUS) == 1 ? "blocked" : "NOT blocked");
    sigemptyset(&m);
    sigprocmask(SIG_BLOCK, NULL, &m);
    if (sigismember(&m, SIGSEGV) != 1 || sigismember(&m, SIGBUS) != 1)
        mismatch("%s: sigprocmask reports SIGSEGV %s, SIGBUS %s; the thread blocked both", who,
                 sigismember(&m, SIGSEGV) == 1 ? "blocked" : "NOT blocked",
                 sigismember(&m, SIGBUS) == 1 ? "blocked" : "NOT blocked");
}

/* ---- row raw_syscall: rt_sigaction without the C library ------------------------ */

#include <sys/signalfd.h>
#include <sys/syscall.h>

/* The kernel's struct sigaction (x86_64: handler, flags, restorer, mask). */
struct ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

#ifdef __x86_64__
/* Our own rt_sigreturn trampoline (the kernel wants SA_RESTORER here). */
void t_sigchain_restore_rt(void);
__asm__(".text\n.globl t_sigchain_restore_rt\n.type t_sigchain_restore_rt,@function\n"
        "t_sigchain_restore_rt:\n\tmovq $15, %rax\n\tsyscall\n");
#define RAW_RESTORER ((void *)t_sigchain_restore_rt)
#else
#define RAW_RESTORER NULL
#endif

static struct ksigaction raw_installed[2]; /* SIGSEGV, SIGBUS */

static long raw_rt_sigaction(int sig, const struct ksigaction *act, struct ksigaction *old)
{
    return syscall(SYS_rt_sigaction, sig, act, old, sizeof(uint64_t));
}

static void raw_install(int sig, void (*fn)(int, siginfo_t *, void *))
{
    struct ksigaction old, act = { .handler = (void *)fn,
                                   .flags = SA_SIGINFO | SA_RESTORER,
                                   .restorer = RAW_RESTORER,
                                   .mask = 1ull << (SIGUSR2 - 1) };
    memset(&old, 0xa5, sizeof old);
    if (raw_rt_sigaction(sig, NULL, &old) != 0)
        FAILF("syscall(SYS_rt_sigaction, %d, NULL, &old): %s", sig, strerror(errno));
    if (old.handler != (void *)SIG_DFL)
        mismatch("%s before the program installed a handler: syscall(SYS_rt_sigaction) reports "
                 "handler %p flags 0x%lx, not SIG_DFL", sig == SIGBUS ? "SIGBUS" : "SIGSEGV",
                 old.handler, old.flags);
    if (raw_rt_sigaction(sig, &act, NULL) != 0)
        FAILF("syscall(SYS_rt_sigaction, %d, &act): %s", sig, strerror(errno));
    raw_installed[sig == SIGBUS] = act;
}

static void raw_check(int sig)
{
    struct ksigaction cur;
    const struct ksigaction *want = &raw_installed[sig == SIGBUS];
    memset(&cur, 0, sizeof cur);
    if (raw_rt_sigaction(sig, NULL, &cur) != 0)
        FAILF("syscall(SYS_rt_sigaction, %d, NULL, &cur): %s", sig, strerror(errno));
    const char *n = sig == SIGBUS ? "SIGBUS" : "SIGSEGV";
    if (cur.handler != want->handler)
        mismatch("%s: syscall(SYS_rt_sigaction) reports handler %p, the program installed %p", n,
                 cur.handler, want->handler);
    if (cur.flags != want->flags)
        mismatch("%s: syscall(SYS_rt_sigaction) reports flags 0x%lx, the program installed 0x%lx",
                 n, cur.flags, want->flags);
    if (cur.restorer != want->restorer)
        mismatch("%s: syscall(SYS_rt_sigaction) reports restorer %p, the program installed %p", n,
                 cur.restorer, want->restorer);
    if (cur.mask != want->mask)
        mismatch("%s: syscall(SYS_rt_sigaction) reports mask 0x%llx, the program installed 0x%llx",
                 n, (unsigned long long)cur.mask, (unsigned long long)want->mask);
    /* And the C library's sigaction() says the same handler. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigaction(sig, NULL, &sa);
    if ((void *)sa.sa_sigaction != want->handler)
        mismatch("%s: sigaction() reports handler %p after syscall(SYS_rt_sigaction) installed %p",
                 n, (void *)sa.sa_sigaction, want->handler);
}

/* Row signalfd_blocked: the process blocks both with sigprocmask and reads
 * them from a signalfd; libsisci's traps must not show up there. */
static int sfd = -1;

/* ---- the writer --------------------------------------------------------------- */

struct counter {
    unsigned k;
    uint32_t n;                  /* stores per phase */
    volatile uint32_t *slot;     /* in the owner's segment, through the remote map */
    volatile uint32_t *ack;      /* in our own segment */
    pthread_t th;
};

static void wait_ack(struct counter *c, uint32_t v, const char *phase)
{
    uint64_t deadline = now_ms() + wait_ms + 30000; /* the owner reports first */
    if (!SPIN_UNTIL(*c->ack == v, deadline))
        FAILF("thread %u (%s): no ack for %u within %" PRIu64 " ms (ack word holds %u)", c->k,
              phase, v, wait_ms + 30000, *c->ack);
}

/* Row signal_save_restore: around every 100 stores, as GASNet does. */
static void (*saved_bus)(int), (*saved_segv)(int);
static void save_around(uint32_t i)
{
    if (i % 100 != 1)
        return;
    saved_bus = signal(SIGBUS, bus_saved);
    saved_segv = signal(SIGSEGV, bus_saved);
    if (saved_bus != bus_plain || saved_segv != segv_plain) {
        mismatch("signal() around store %u returned %p for SIGBUS and %p for SIGSEGV; the "
                 "program's handlers are %p and %p", i, (void *)saved_bus,
                 (void *)saved_segv, (void *)bus_plain, (void *)segv_plain);
        /* Put the program's own handlers back whatever it was told. */
        saved_bus = bus_plain;
        saved_segv = segv_plain;
    }
}
static void restore_around(uint32_t i)
{
    if (i % 100 != 0)
        return;
    void (*b)(int) = signal(SIGBUS, saved_bus);
    void (*s)(int) = signal(SIGSEGV, saved_segv);
    if (b != bus_saved || s != bus_saved)
        mismatch("restoring after store %u: signal() returned %p for SIGBUS and %p for SIGSEGV; "
                 "the program had put %p there", i, (void *)b, (void *)s, (void *)bus_saved);
}

static void store(struct counter *c, uint32_t v)
{
    if (row == R_RAISED_BUS) {
        if (v % 1000 == 250) {
            raise(SIGBUS);
        } else if (v % 1000 == 500) {
            kill(getpid(), SIGBUS);
        } else if (v % 1000 == 750) {
            queued_value = (int)v;
            union sigval sv = { .sival_int = (int)v };
            sigqueue(getpid(), SIGBUS, sv);
        }
    }
    if (row == R_SAVE_RESTORE)
        save_around(v);
    if (row == R_ASYNC_STORES) {
        uint32_t payload[4] = { v, ~v, v * 3u, v ^ 0x5a5a5a5au };
        memcpy((unsigned char *)c->slot + 8, payload, sizeof payload);
    }
    if (row == R_ALTSTACK && v % 10 == 0) {
        usr1_slot = c->slot;
        usr1_value = v;
        raise(SIGUSR1);
    } else {
        *c->slot = v;
    }
}

static unsigned counters_done;

/* ---- rows async_stores and program_signals ---------------------------------- */

/* Row async_stores: the line of the remote map the SIGUSR2 handler owns
 * (no slot of the owner's: at most four are used). */
#define ASYNC_LINE (SLOT_STRIDE * 6u)
static volatile unsigned char *async_line;
static volatile uint32_t async_count;
static volatile int async_stop;
static pthread_t async_target;

static void usr2_stores(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    int saved = errno;
    uint32_t n = async_count + 1;
    uint32_t words[6] = { n, n * 7u, ~n, n ^ 0xa5a5a5a5u, n + 1000u, n * 13u };
    memcpy((unsigned char *)async_line + 8, words, sizeof words);
    *(volatile uint32_t *)async_line = n;
    async_count = n;
    errno = saved;
}

static void *async_kicker(void *arg)
{
    (void)arg;
    unsigned long sent = 0;
    while (!async_stop) {
        uint64_t t = now_us();
        while (now_us() - t < 20)
            ;
        if (pthread_kill(async_target, SIGUSR2) == 0)
            sent++;
    }
    return (void *)sent;
}

static pthread_t async_start(volatile unsigned char *remote)
{
    async_line = remote + ASYNC_LINE;
    async_target = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = usr2_stores;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK_MSG(sigaction(SIGUSR2, &sa, NULL) == 0, "sigaction(SIGUSR2): %s", strerror(errno));
    pthread_t th;
    int e = pthread_create(&th, NULL, async_kicker, NULL);
    CHECK_MSG(e == 0, "pthread_create: %s", strerror(e));
    return th;
}

/* Stop the kicker; every SIGUSR2 it sent has been handled once this thread
 * is back from the join (a pending signal is taken on the way out of the
 * kernel). Then the owner's copy must be the handler's last. */
static void async_finish(pthread_t th)
{
    async_stop = 1;
    void *sent;
    pthread_join(th, &sent);
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &m, NULL);
    uint32_t n = async_count;
    SCIFlush(NULL, NO_FLAGS);
    uint32_t want[6] = { n, n * 7u, ~n, n ^ 0xa5a5a5a5u, n + 1000u, n * 13u };
    uint32_t got[7];
    for (unsigned i = 0; i < 7; i++)
        got[i] = ((volatile uint32_t *)async_line)[i == 0 ? 0 : i + 1];
    printf("ASYNC: the kicker sent %lu SIGUSR2, the handler ran %u times\n",
           (unsigned long)(uintptr_t)sent, n);
    int same = got[0] == n;
    for (unsigned i = 0; i < 6; i++)
        same &= got[i + 1] == want[i];
    if (n < 50)
        mismatch("the SIGUSR2 handler ran only %u times: the test did not interrupt the stores", n);
    else if (!same)
        mismatch("the owner holds count %u and words %08x %08x %08x %08x %08x %08x; the handler's "
                 "last stores were %u and %08x %08x %08x %08x %08x %08x", got[0], got[1], got[2],
                 got[3], got[4], got[5], got[6], n, want[0], want[1], want[2], want[3], want[4],
                 want[5]);
    else
        printf("ASYNC STORES ARRIVED: the owner holds the handler's last count (%u) and bytes\n", n);
}

/* Row program_signals. */
static volatile pid_t alrm_tid;
static volatile int alrm_runs, alrm_stop;

static void alrm_record(int sig)
{
    (void)sig;
    alrm_tid = gettid();
    alrm_runs++;
}

static void *alrm_listener(void *arg)
{
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &m, NULL);
    *(volatile pid_t *)arg = gettid();
    while (!alrm_stop)
        sleep_ms(1);
    return NULL;
}

static void program_signals(void)
{
    /* SIGUSR1: blocked in the only thread of the program, taken with
     * sigtimedwait. */
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &m, NULL);
    for (int i = 0; i < 20; i++) {
        kill(getpid(), SIGUSR1);
        struct timespec ts = { .tv_sec = 10 };
        int s = sigtimedwait(&m, NULL, &ts);
        if (s != SIGUSR1) {
            mismatch("sigtimedwait for the SIGUSR1 the program sent itself (%d of 20) returned %d "
                     "(%s)", i + 1, s, s < 0 ? strerror(errno) : "another signal");
            return;
        }
    }
    /* SIGALRM: blocked here, unblocked in one thread of the program only. */
    signal(SIGALRM, alrm_record);
    sigaddset(&m, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &m, NULL);
    volatile pid_t listener = 0;
    pthread_t th;
    int e = pthread_create(&th, NULL, alrm_listener, (void *)&listener);
    CHECK_MSG(e == 0, "pthread_create: %s", strerror(e));
    while (!listener)
        sleep_ms(1);
    int elsewhere = 0;
    for (int i = 0; i < 20; i++) {
        int before = alrm_runs;
        kill(getpid(), SIGALRM);
        uint64_t deadline = now_ms() + 10000;
        while (alrm_runs == before && now_ms() < deadline)
            sleep_ms(1);
        if (alrm_runs == before) {
            mismatch("SIGALRM %d of 20 never reached the program's handler", i + 1);
            break;
        }
        if (alrm_tid != listener)
            elsewhere++;
    }
    alrm_stop = 1;
    pthread_join(th, NULL);
    if (elsewhere)
        mismatch("%d of 20 SIGALRM ran the program's handler in a thread that is not the "
                 "program's (the only one with SIGALRM unblocked is %d)", elsewhere, (int)listener);
    else if (mismatches == 0)
        printf("PROGRAM SIGNALS OK: 20 SIGUSR1 taken by sigtimedwait, 20 SIGALRM handled in the "
               "program's own thread\n");
}

static void *run_counter(void *arg)
{
    struct counter *c = arg;
    uint64_t t0 = now_us();
    for (uint32_t v = 1; v <= c->n; v++) {
        store(c, v);
        SCIFlush(NULL, NO_FLAGS);
        wait_ack(c, v, "with SCIFlush");
        if (row == R_SAVE_RESTORE)
            restore_around(v);
    }
    uint64_t t1 = now_us();
    for (uint32_t v = c->n + 1; v <= 2 * c->n; v++) {
        store(c, v); /* no call at all */
        wait_ack(c, v, "without any call");
        if (row == R_SAVE_RESTORE)
            restore_around(v);
    }
    uint64_t t2 = now_us();
    printf("THREAD %u: %u stores with SCIFlush, %.1f us per acknowledged store; %u without any "
           "call, %.1f us each\n", c->k, c->n, c->n ? (double)(t1 - t0) / c->n : 0.0, c->n,
           c->n ? (double)(t2 - t1) / c->n : 0.0);
    __atomic_add_fetch(&counters_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void install_row_handlers(void)
{
    switch (row) {
    case R_AFTER:
    case R_BEFORE:
    case R_DLOPEN:
    case R_FOUR_THREADS:
    case R_STATIC:
    case R_BLOCKED:
    case R_BUS_ADRERR:
    case R_ASYNC_STORES:
    case R_PROGRAM_SIGNALS:
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        install(SIGSEGV, segv_info, NULL, 0);
        install(SIGBUS, bus_info, NULL, 0);
        break;
    case R_RESETHAND:
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        install(SIGSEGV, segv_info, NULL, SA_RESETHAND);
        install(SIGBUS, bus_info, NULL, SA_RESETHAND);
        break;
    case R_SAVE_RESTORE:
        install_with_signal(SIGSEGV, segv_plain);
        install_with_signal(SIGBUS, bus_plain);
        break;
    case R_ALTSTACK: {
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        altstack_base = mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK_MSG(altstack_base != MAP_FAILED, "mmap of the alternate stack: %s", strerror(errno));
        stack_t ss = { .ss_sp = altstack_base, .ss_size = ALTSTACK_SIZE, .ss_flags = 0 };
        CHECK_MSG(sigaltstack(&ss, NULL) == 0, "sigaltstack: %s", strerror(errno));
        install(SIGSEGV, segv_info, NULL, SA_ONSTACK);
        install(SIGBUS, bus_info, NULL, SA_ONSTACK);
        install(SIGUSR1, usr1_info, NULL, SA_ONSTACK);
        break;
    }
    case R_SIG_IGN:
    case R_SIG_IGN_BUS:
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        install(SIGSEGV, NULL, SIG_IGN, 0);
        install(SIGBUS, NULL, SIG_IGN, 0);
        break;
    case R_NONE:
    case R_BUS_DFL:
        check_default(SIGSEGV, "with nothing installed");
        check_default(SIGBUS, "with nothing installed");
        break;
    case R_RACING:
    case R_FILLSET:
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        install(SIGSEGV, segv_info, NULL, 0);
        install(SIGBUS, bus_info, NULL, 0);
        break;
    case R_RAISED_BUS:
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        install(SIGSEGV, segv_info, NULL, 0);
        install(SIGBUS, bus_counting, NULL, 0);
        break;
    case R_BUS_NESTED:
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        install(SIGSEGV, segv_info, NULL, 0);
        install(SIGBUS, bus_info, NULL, 0);
        break;
    case R_BUS_NESTED_NODEFER:
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        install(SIGSEGV, segv_info, NULL, 0);
        install(SIGBUS, bus_info, NULL, SA_NODEFER);
        break;
    case R_RAW_SYSCALL:
#ifndef __x86_64__
        FAILF("row raw_syscall needs x86_64 (its own rt_sigreturn trampoline)");
#endif
        raw_install(SIGSEGV, segv_info);
        raw_install(SIGBUS, bus_info);
        break;
    case R_SIGNALFD: {
        check_default(SIGSEGV, "with nothing installed");
        check_default(SIGBUS, "with nothing installed");
        sigset_t m;
        sigemptyset(&m);
        sigaddset(&m, SIGSEGV);
        sigaddset(&m, SIGBUS);
        CHECK_MSG(sigprocmask(SIG_BLOCK, &m, NULL) == 0, "sigprocmask: %s", strerror(errno));
        sfd = signalfd(-1, &m, SFD_NONBLOCK | SFD_CLOEXEC);
        CHECK_MSG(sfd >= 0, "signalfd: %s", strerror(errno));
        check_mask_blocked("right after sigprocmask");
        break;
    }
    case R_SYSV: {
        check_default(SIGSEGV, "before the program installed a handler");
        check_default(SIGBUS, "before the program installed a handler");
        /* glibc: sysv_signal = SA_RESETHAND | SA_NODEFER, empty mask;
         * sigset = flags 0, empty mask (and unblocks the signal). */
        CHECK_MSG(sysv_signal(SIGSEGV, segv_plain) == SIG_DFL, "sysv_signal(SIGSEGV) did not return SIG_DFL");
        struct installed *in = inst_of(SIGSEGV);
        memset(&in->sa, 0, sizeof in->sa);
        in->sa.sa_handler = segv_plain;
        in->sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigemptyset(&in->sa.sa_mask);
        in->set = 1;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        void (*old)(int) = sigset(SIGBUS, bus_plain); /* old programs still call it */
#pragma GCC diagnostic pop
        if (old != SIG_DFL)
            mismatch("SIGBUS: sigset() returned %p, not SIG_DFL", (void *)old);
        in = inst_of(SIGBUS);
        memset(&in->sa, 0, sizeof in->sa);
        in->sa.sa_handler = bus_plain;
        in->sa.sa_flags = 0;
        sigemptyset(&in->sa.sa_mask);
        in->set = 1;
        break;
    }
    }
}

static void block_both(void)
{
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGSEGV);
    sigaddset(&m, SIGBUS);
    int e = pthread_sigmask(SIG_BLOCK, &m, NULL);
    CHECK_MSG(e == 0, "pthread_sigmask: %s", strerror(e));
    check_mask_blocked("right after blocking");
}

/* A page of a file mapping past the file's end. */
static volatile unsigned char *page_past_eof(void)
{
    char path[] = "/tmp/t_sigchain.XXXXXX";
    int fd = mkstemp(path);
    CHECK_MSG(fd >= 0, "mkstemp: %s", strerror(errno));
    unlink(path);
    CHECK_MSG(ftruncate(fd, 2 * PAGE) == 0, "ftruncate: %s", strerror(errno));
    unsigned char *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK_MSG(p != MAP_FAILED, "mmap of the file: %s", strerror(errno));
    p[0] = 1;
    p[PAGE] = 1;
    CHECK_MSG(ftruncate(fd, PAGE) == 0, "ftruncate: %s", strerror(errno));
    close(fd);
    return p + PAGE;
}

static int *volatile null_ptr = NULL;

static int writer(uint32_t n, int core, const char *owner_target, unsigned myseg)
{
    unsigned node;
    if (core) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_CORE, &rl) == 0) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_CORE, &rl);
        }
    }
    printf("WRITER row=%s build=%s stores=%u per phase\n", row_name, BUILD_KIND, n);
    if (row == R_BEFORE || row == R_DLOPEN)
        install_row_handlers();
    load_sisci();
    sci_desc_t sd = open_sd(&node);
    struct lseg own;
    lseg_create(sd, &own, myseg);
    struct rseg box;
    rseg_connect(sd, &box, owner_target);
    if (row != R_BEFORE && row != R_DLOPEN)
        install_row_handlers();
    unsigned threads = row == R_FOUR_THREADS ? 4 : row == R_RACING ? 2 : 1;
    struct counter c[4];
    for (unsigned k = 0; k < threads; k++) {
        c[k].k = k;
        c[k].n = n;
        c[k].slot = word_at(box.p, SLOT_STRIDE * k);
        c[k].ack = word_at(own.p, SLOT_STRIDE * k);
    }
    printf("WRITER READY node=%u owner=%u threads=%u\n", node, box.node, threads);
    uint64_t t0 = now_ms();
    if (row == R_BLOCKED)
        block_both();
    if (row == R_FILLSET) {
        sigset_t all;
        sigfillset(&all);
        int e = pthread_sigmask(SIG_SETMASK, &all, NULL);
        CHECK_MSG(e == 0, "pthread_sigmask(SIG_SETMASK, full): %s", strerror(e));
        check_mask_blocked("right after blocking every signal");
    }
    if (threads == 1) {
        pthread_t kicker = 0;
        if (row == R_ASYNC_STORES)
            kicker = async_start(box.p);
        run_counter(&c[0]);
        if (row == R_ASYNC_STORES)
            async_finish(kicker);
    } else {
        for (unsigned k = 0; k < threads; k++) {
            int e = pthread_create(&c[k].th, NULL, run_counter, &c[k]);
            CHECK_MSG(e == 0, "pthread_create: %s", strerror(e));
        }
        unsigned long races = 0;
        while (row == R_RACING && __atomic_load_n(&counters_done, __ATOMIC_SEQ_CST) < threads) {
            /* Install, read back, save/restore and block/unblock from this
             * thread while the others store. */
            install(SIGBUS, races & 1 ? bus_info : NULL, races & 1 ? NULL : bus_plain, 0);
            install(SIGSEGV, segv_info, NULL, races & 2 ? SA_NODEFER : 0);
            check_reported(SIGBUS);
            void (*old)(int) = signal(SIGBUS, bus_saved);
            signal(SIGBUS, old);
            sigset_t m;
            sigemptyset(&m);
            sigaddset(&m, SIGBUS);
            pthread_sigmask(SIG_BLOCK, &m, NULL);
            pthread_sigmask(SIG_UNBLOCK, &m, NULL);
            races++;
            sleep_ms(1);
        }
        for (unsigned k = 0; k < threads; k++)
            pthread_join(c[k].th, NULL);
        if (row == R_RACING) {
            install(SIGBUS, bus_info, NULL, 0);
            install(SIGSEGV, segv_info, NULL, 0);
            printf("RACING: %lu rounds of sigaction/signal/pthread_sigmask from the main thread "
                   "while two threads stored\n", races);
            if (races < 10)
                mismatch("only %lu racing rounds: the test did not race", races);
        }
    }
    uint64_t ms = now_ms() - t0;
    printf("WRITER STORES DONE stores=%u threads=%u ms=%" PRIu64 " (%.1f us per acknowledged store)\n",
           2 * n * threads, threads, ms, n ? 1000.0 * (double)ms / (2.0 * n) : 0.0);
    if (row == R_ALTSTACK) {
        printf("ALTSTACK: %d stores made by the SIGUSR1 handler%s\n", (int)usr1_runs,
               usr1_off_stack ? ", SOME OFF the alternate stack" : ", all on the alternate stack");
        if (usr1_off_stack)
            mismatch("SIGUSR1 (SA_ONSTACK) ran off the alternate stack");
        if ((uint32_t)usr1_runs != 2 * n / 10)
            mismatch("SIGUSR1 ran %d times, not %u", (int)usr1_runs, 2 * n / 10);
        stack_t ss;
        memset(&ss, 0, sizeof ss);
        sigaltstack(NULL, &ss);
        if (ss.ss_sp != altstack_base || ss.ss_size != ALTSTACK_SIZE || (ss.ss_flags & SS_DISABLE))
            mismatch("sigaltstack reports sp=%p size=%zu flags=0x%x; the program set %p, %u, 0",
                     ss.ss_sp, ss.ss_size, (unsigned)ss.ss_flags, (void *)altstack_base,
                     ALTSTACK_SIZE);
    }

    /* What the program is told is what it installed. */
    if (row != R_RAW_SYSCALL) {
        check_reported(SIGSEGV);
        check_reported(SIGBUS);
    }
    if (row == R_ALTSTACK)
        check_reported(SIGUSR1);
    if (row == R_BLOCKED || row == R_SIGNALFD || row == R_FILLSET)
        check_mask_blocked("after the stores");
    if (row == R_RAISED_BUS) {
        unsigned want = 3 * (2 * n / 1000);
        printf("RAISED SIGBUS: %d reached the program's handler as sent (want %u)%s\n",
               (int)user_bus, want, user_bus_bad ? ", SOME WITH THE WRONG si_pid OR si_value" : "");
        if ((unsigned)user_bus != want || user_bus_bad)
            mismatch("the program's own raise/kill/sigqueue(SIGBUS): %d of %u reached its "
                     "handler%s", (int)user_bus, want,
                     user_bus_bad ? ", some with the wrong si_pid or si_value" : "");
    }
    if (row == R_RAW_SYSCALL) {
        raw_check(SIGSEGV);
        raw_check(SIGBUS);
    }
    if (row == R_PROGRAM_SIGNALS)
        program_signals();
    if (row == R_SIGNALFD) {
        struct signalfd_siginfo fi;
        ssize_t r = read(sfd, &fi, sizeof fi);
        if (r >= 0)
            mismatch("the program's signalfd for SIGSEGV+SIGBUS holds signal %u (si_code %d, "
                     "address 0x%llx): libsisci's trap showed up there",
                     fi.ssi_signo, fi.ssi_code, (unsigned long long)fi.ssi_addr);
        else if (errno != EAGAIN)
            mismatch("read of the program's signalfd: %s (want EAGAIN: nothing queued)",
                     strerror(errno));
    }
    if (mismatches == 0)
        printf("REPORT-BACK OK row=%s: sigaction reports what the program installed\n", row_name);

    /* A fault of its own. */
    if (bus_row(row)) {
        bus_page = page_past_eof();
        handler_slot = c[0].slot;
        handler_value = 2 * n + 1;
        if (row == R_BUS_ADRERR && sigsetjmp(bus_jump, 1)) {
            wait_ack(&c[0], 2 * n + 1, "stored by the SIGBUS handler");
            printf("STORE FROM SIGBUS HANDLER ARRIVED value=%u\n", 2 * n + 1);
            fflush(stdout);
            _exit(42);
        }
        printf("OWN FAULT: a store into the page past the end of a file (SIGBUS)\n");
        fflush(stdout);
        final_fault = 1;
        bus_page[0] = 1;
        printf("OWN FAULT DID NOT KILL: the store past the file's end completed\n");
        return 7;
    }
    printf("OWN FAULT: a NULL write (SIGSEGV)\n");
    fflush(stdout);
    final_fault = 1;
    *null_ptr = 1;
    printf("OWN FAULT DID NOT KILL: the NULL write completed\n");
    return 7;
}

/* ---- main --------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    roles_init(&argc, &argv, "t_sigchain");
    if (argc < 2) {
        fprintf(stderr,
                "usage: t_sigchain [-wait S] ROLE ...\n"
                "  owner SEG WNODE:WSEG SLOTS TOTAL\n"
                "  writer --row ROW [--stores N] [--core] OWNERNODE:SEG MYSEG\n");
        return 2;
    }
    const char *role = argv[1];
    check_role = role;
    alarm(1200); /* a last resort; every wait has its own deadline */
    if (strcmp(role, "owner") == 0) {
        load_sisci();
        return owner((unsigned)argu(argc, argv, 2), arg(argc, argv, 3),
                     (unsigned)argu(argc, argv, 4), (uint32_t)argu(argc, argv, 5));
    }
    if (strcmp(role, "writer") == 0) {
        uint32_t n = 10000;
        int core = 0, i = 2;
        row_name = NULL;
        for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
            if (strcmp(argv[i], "--row") == 0 && i + 1 < argc)
                row_name = argv[++i];
            else if (strcmp(argv[i], "--stores") == 0 && i + 1 < argc)
                n = (uint32_t)strtoul(argv[++i], NULL, 0);
            else if (strcmp(argv[i], "--core") == 0)
                core = 1;
            else {
                fprintf(stderr, "t_sigchain writer: unknown option %s\n", argv[i]);
                return 2;
            }
        }
        if (!row_name) {
            fprintf(stderr, "t_sigchain writer: --row ROW is required\n");
            return 2;
        }
        size_t r;
        for (r = 0; r < sizeof rows / sizeof rows[0]; r++)
            if (strcmp(rows[r].name, row_name) == 0)
                break;
        if (r == sizeof rows / sizeof rows[0]) {
            fprintf(stderr, "t_sigchain writer: unknown row %s\n", row_name);
            return 2;
        }
        row = rows[r].row;
#ifdef SIGCHAIN_DLOPEN
        if (row != R_DLOPEN) {
            fprintf(stderr, "t_sigchain_dlopen plays row dlopen only\n");
            return 2;
        }
#else
        if (row == R_DLOPEN) {
            fprintf(stderr, "row dlopen is t_sigchain_dlopen's (built without libsisci)\n");
            return 2;
        }
#endif
#ifndef SIGCHAIN_STATIC
        if (row == R_STATIC) {
            fprintf(stderr, "row static is t_sigchain_static's (linked with libsisci.a)\n");
            return 2;
        }
#endif
        if (argc - i != 2) {
            fprintf(stderr, "t_sigchain writer: need OWNERNODE:SEG MYSEG\n");
            return 2;
        }
        return writer(n, core, argv[i], (unsigned)strtoul(argv[i + 1], NULL, 0));
    }
    fprintf(stderr, "t_sigchain: unknown role %s\n", role);
    return 2;
}
