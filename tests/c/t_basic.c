/*
 * t_basic.c - library, descriptor and query calls (docs/api.md "Finding the
 * node", "Flags", "Queries"):
 *   SCIInitialize, SCITerminate, SCIOpen, SCIClose, SCIGetLocalNodeId,
 *   SCIQuery (adapter, vendor, API), SCIProbeNode, SCIGetErrorString,
 *   and what SCIOpen does when no daemon is reachable.
 *
 * Environment: VSCI_SOCKET names the daemon.  VSCI_TEST_NODE_ID, when set,
 * is the node id the daemon was started with.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "common/proc.h"

static unsigned int expected_node(void)
{
    const char *s = getenv("VSCI_TEST_NODE_ID");
    return s ? (unsigned int)strtoul(s, NULL, 0) : 0;
}

/* SCIInitialize / SCIOpen / SCIClose and their argument errors. */
static void open_close(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd1 = NULL, sd2 = NULL;

    EXPECT(SCI_ERR_OK, SCIInitialize(NO_FLAGS, &err));
    /* Initialising twice is harmless. */
    EXPECT(SCI_ERR_OK, SCIInitialize(NO_FLAGS, &err));

    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIOpen(&sd1, BAD_FLAG, &err));
    EXPECT_FAIL(SCIOpen(NULL, NO_FLAGS, &err));

    EXPECT(SCI_ERR_OK, SCIOpen(&sd1, NO_FLAGS, &err));
    CHECK(sd1 != NULL);
    /* A process may hold several descriptors. */
    EXPECT(SCI_ERR_OK, SCIOpen(&sd2, NO_FLAGS, &err));
    CHECK(sd2 != NULL);
    CHECK(sd1 != sd2);

    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIClose(sd1, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIClose(NULL, NO_FLAGS, &err));

    EXPECT(SCI_ERR_OK, SCIClose(sd1, NO_FLAGS, &err));
    /* A closed descriptor is stale. */
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIClose(sd1, NO_FLAGS, &err));
    /* The other descriptor still works. */
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd2, &seg, 0x1001, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIClose(sd2, NO_FLAGS, &err));

    /* Reopen after closing everything. */
    EXPECT(SCI_ERR_OK, SCIOpen(&sd1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIClose(sd1, NO_FLAGS, &err));
    SCITerminate();
}

/* SCIInitialize with a flag it does not take (docs/api.md "Flags"). */
static void initialize_bad_flag(struct peer *p)
{
    (void)p;
    sci_error_t err;
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIInitialize(BAD_FLAG, &err));
    /* The library still initialises and works afterwards. */
    sci_desc_t sd = open_sd(NULL);
    close_sd(sd);
}

/* SCIOpen without SCIInitialize works (the first SCIOpen initialises). */
static void open_without_initialize(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd;
    EXPECT(SCI_ERR_OK, SCIOpen(&sd, NO_FLAGS, &err));
    unsigned int node = 0;
    EXPECT(SCI_ERR_OK, SCIGetLocalNodeId(0, &node, NO_FLAGS, &err));
    CHECK(node >= 1 && node <= 65535);
    EXPECT(SCI_ERR_OK, SCIClose(sd, NO_FLAGS, &err));
}

/* Redirect stderr into a temporary file around `call`; return what was written. */
static char stderr_text[4096];
#define CAPTURE_STDERR(call) do {                                              \
        char path_[] = "/tmp/vsci-test-stderr-XXXXXX";                         \
        int tmp_ = mkstemp(path_);                                             \
        CHECK(tmp_ >= 0);                                                      \
        unlink(path_);                                                         \
        fflush(stderr);                                                        \
        int saved_ = dup(2);                                                   \
        dup2(tmp_, 2);                                                         \
        call;                                                                  \
        fflush(stderr);                                                        \
        dup2(saved_, 2);                                                       \
        close(saved_);                                                         \
        lseek(tmp_, 0, SEEK_SET);                                              \
        ssize_t n_ = read(tmp_, stderr_text, sizeof stderr_text - 1);          \
        stderr_text[n_ > 0 ? n_ : 0] = 0;                                      \
        close(tmp_);                                                           \
    } while (0)

/* No daemon: SCIOpen fails with SCI_ERR_NO_LINK_ACCESS and names the socket. */
static void no_daemon(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = NULL;
    char path[128];
    snprintf(path, sizeof path, "/tmp/vsci-test-no-daemon-%d/none.sock", (int)getpid());
    setenv("VSCI_SOCKET", path, 1);
    unsetenv("VSCI_LOG");
    CAPTURE_STDERR(EXPECT(SCI_ERR_NO_LINK_ACCESS, SCIOpen(&sd, NO_FLAGS, &err)));
    CHECK_MSG(strstr(stderr_text, path) != NULL,
              "stderr should name the socket %s; it was: \"%s\"", path, stderr_text);
    printf("SCIOpen said: %s", stderr_text);
    /* A second try fails the same way (nothing cached). */
    EXPECT(SCI_ERR_NO_LINK_ACCESS, SCIOpen(&sd, NO_FLAGS, &err));
}

/* VSCI_LOG=off silences the line. */
static void no_daemon_quiet(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = NULL;
    setenv("VSCI_SOCKET", "/tmp/vsci-test-no-daemon-quiet/none.sock", 1);
    setenv("VSCI_LOG", "off", 1);
    CAPTURE_STDERR(EXPECT(SCI_ERR_NO_LINK_ACCESS, SCIOpen(&sd, NO_FLAGS, &err)));
    CHECK_MSG(stderr_text[0] == 0, "VSCI_LOG=off, yet stderr got \"%s\"", stderr_text);
}

/* Unset VSCI_SOCKET: the library uses /tmp/vscid.sock. */
static void default_socket(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = NULL;
    struct stat st;
    unsetenv("VSCI_SOCKET");
    unsetenv("VSCI_LOG");
    if (stat("/tmp/vscid.sock", &st) == 0) {
        printf("/tmp/vscid.sock exists; skipping the default-socket check\n");
        return;
    }
    CAPTURE_STDERR(EXPECT(SCI_ERR_NO_LINK_ACCESS, SCIOpen(&sd, NO_FLAGS, &err)));
    CHECK_MSG(strstr(stderr_text, "/tmp/vscid.sock") != NULL,
              "stderr should name /tmp/vscid.sock; it was: \"%s\"", stderr_text);
}

/* SCIGetLocalNodeId. */
static void node_id(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node = 0;
    sci_desc_t sd = open_sd(&node);
    CHECK(node >= 1 && node <= 65535);
    if (expected_node())
        CHECK_EQ(node, expected_node());
    unsigned int again = 0;
    EXPECT(SCI_ERR_OK, SCIGetLocalNodeId(0, &again, NO_FLAGS, &err));
    CHECK_EQ(again, node);
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCIGetLocalNodeId(1, &again, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCIGetLocalNodeId(0xffffffffu, &again, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIGetLocalNodeId(0, &again, BAD_FLAG, &err));
    EXPECT_FAIL(SCIGetLocalNodeId(0, NULL, NO_FLAGS, &err));
    printf("local node id %u\n", node);
    close_sd(sd);
}

static unsigned int query_adapter(unsigned int adapter, unsigned int sub, sci_error_t *errp)
{
    unsigned int value = 0xdeadbeef;
    sci_query_adapter_t q = { .localAdapterNo = adapter, .portNo = 0,
                              .subcommand = sub, .data = &value };
    SCIQuery(SCI_Q_ADAPTER, &q, NO_FLAGS, errp);
    return value;
}

/* SCIQuery(SCI_Q_ADAPTER, ...) for every sub-command docs/api.md answers. */
static void query_adapter_cmds(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int v;

    EXPECT(SCI_ERR_OK, v = query_adapter(0, SCI_Q_ADAPTER_NODEID, &err));
    CHECK_EQ(v, node);
    EXPECT(SCI_ERR_OK, v = query_adapter(0, SCI_Q_ADAPTER_CONFIGURED, &err));
    CHECK_EQ(v, 1);
    EXPECT(SCI_ERR_OK, v = query_adapter(0, SCI_Q_ADAPTER_LINK_OPERATIONAL, &err));
    CHECK_EQ(v, 1);
    EXPECT(SCI_ERR_OK, v = query_adapter(0, SCI_Q_ADAPTER_NUMBER, &err));
    CHECK_EQ(v, 0);
    EXPECT(SCI_ERR_OK, v = query_adapter(0, SCI_Q_ADAPTER_SERIAL_NUMBER, &err));
    CHECK(v != 0xdeadbeef);
    EXPECT(SCI_ERR_OK, v = query_adapter(0, SCI_Q_ADAPTER_CARD_TYPE, &err));
    CHECK_EQ(v, SCI_ADAPTER_CARD_TYPE_VSCI);
    static const struct { unsigned int sub; const char *name; } positive[] = {
        { SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT, "DMA_SIZE_ALIGNMENT" },
        { SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT, "DMA_OFFSET_ALIGNMENT" },
        { SCI_Q_ADAPTER_DMA_MTU, "DMA_MTU" },
        { SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE, "SUGGESTED_MIN_DMA_SIZE" },
        { SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE, "SUGGESTED_MIN_BLOCK_SIZE" },
        { SCI_Q_ADAPTER_ATT_PAGE_SIZE, "ATT_PAGE_SIZE" },
    };
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++) {
        EXPECT(SCI_ERR_OK, v = query_adapter(0, positive[i].sub, &err));
        CHECK_MSG(v != 0 && v != 0xdeadbeef, "%s = %u", positive[i].name, v);
        printf("adapter %s = %u\n", positive[i].name, v);
    }

    /* Unknown sub-commands, adapters and flags. */
    EXPECT(SCI_ERR_ILLEGAL_QUERY, query_adapter(0, 0x1ff, &err));
    EXPECT(SCI_ERR_ILLEGAL_QUERY, query_adapter(0, 0xffffffffu, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, query_adapter(1, SCI_Q_ADAPTER_NODEID, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, query_adapter(77, SCI_Q_ADAPTER_NODEID, &err));
    {
        unsigned int value;
        sci_query_adapter_t q = { 0, 0, SCI_Q_ADAPTER_NODEID, &value };
        EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIQuery(SCI_Q_ADAPTER, &q, BAD_FLAG, &err));
        /* NULL query structure, NULL data pointer. */
        EXPECT_FAIL(SCIQuery(SCI_Q_ADAPTER, NULL, NO_FLAGS, &err));
        q.data = NULL;
        EXPECT_FAIL(SCIQuery(SCI_Q_ADAPTER, &q, NO_FLAGS, &err));
    }
    /* An unknown major command. */
    {
        unsigned int value;
        sci_query_adapter_t q = { 0, 0, SCI_Q_ADAPTER_NODEID, &value };
        EXPECT_FAIL(SCIQuery(0x7777, &q, NO_FLAGS, &err));
    }
    close_sd(sd);
}

/* SCIQuery(SCI_Q_VENDORID / SCI_Q_API). */
static void query_strings(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    unsigned int cmds[] = { SCI_Q_VENDORID, SCI_Q_API };
    const char *names[] = { "VENDORID", "API" };
    for (int i = 0; i < 2; i++) {
        char buf[256];
        memset(buf, 'X', sizeof buf);
        sci_query_string_t q = { buf, sizeof buf };
        EXPECT(SCI_ERR_OK, SCIQuery(cmds[i], &q, NO_FLAGS, &err));
        CHECK_MSG(memchr(buf, 0, sizeof buf) != NULL, "%s string not terminated", names[i]);
        CHECK_MSG(strlen(buf) > 0, "%s string empty", names[i]);
        printf("SCI_Q_%s = \"%s\"\n", names[i], buf);
        EXPECT_FAIL(SCIQuery(cmds[i], NULL, NO_FLAGS, &err));
        EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIQuery(cmds[i], &q, BAD_FLAG, &err));
    }
    close_sd(sd);
}

/* SCIGetErrorString: a distinct, non-empty description for every code. */
static void error_strings(struct peer *p)
{
    (void)p;
    const char *s[CHECK_N_ERRS];
    for (size_t i = 0; i < CHECK_N_ERRS; i++) {
        s[i] = SCIGetErrorString(check_err_names[i].code);
        CHECK_MSG(s[i] != NULL, "SCIGetErrorString(%s) is NULL", check_err_names[i].name);
        CHECK_MSG(strlen(s[i]) > 0, "SCIGetErrorString(%s) is empty", check_err_names[i].name);
        /* Static: the same pointer or at least the same text every time. */
        CHECK(strcmp(s[i], SCIGetErrorString(check_err_names[i].code)) == 0);
        printf("%-32s 0x%08x  %s\n", check_err_names[i].name,
               (unsigned)check_err_names[i].code, s[i]);
    }
    for (size_t i = 0; i < CHECK_N_ERRS; i++)
        for (size_t j = i + 1; j < CHECK_N_ERRS; j++)
            CHECK_MSG(strcmp(s[i], s[j]) != 0, "%s and %s have the same description \"%s\"",
                      check_err_names[i].name, check_err_names[j].name, s[i]);
    /* Values that are not codes still get a string, not a crash. */
    const char *u = SCIGetErrorString((sci_error_t)0x12345);
    CHECK(u != NULL);
    u = SCIGetErrorString((sci_error_t)0x7fffffff);
    CHECK(u != NULL);
    printf("unknown code: %s\n", u);
}

/* SCIProbeNode. */
static void probe(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    int r;
    EXPECT(SCI_ERR_OK, r = SCIProbeNode(sd, 0, node, NO_FLAGS, &err));
    CHECK_EQ(r, 1);
    err = ERR_SENTINEL;
    r = SCIProbeNode(sd, 0, absent_node(node), NO_FLAGS, &err);
    CHECK_EQ(r, 0);
    CHECK_MSG(err != SCI_ERR_OK && err != ERR_SENTINEL,
              "probe of an absent node returned 0 but error %s", err_name(err));
    printf("probe of absent node %u: %s\n", absent_node(node), err_name(err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, r = SCIProbeNode(sd, 1, node, NO_FLAGS, &err));
    CHECK_EQ(r, 0);
    EXPECT(SCI_ERR_ILLEGAL_FLAG, r = SCIProbeNode(sd, 0, node, BAD_FLAG, &err));
    CHECK_EQ(r, 0);
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, r = SCIProbeNode(NULL, 0, node, NO_FLAGS, &err));
    CHECK_EQ(r, 0);
    close_sd(sd);
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, r = SCIProbeNode(sd, 0, node, NO_FLAGS, &err));
    CHECK_EQ(r, 0);
}

/* Two processes see the same node id and can probe it. */
static void two_processes_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    peer_send(p, node);
    unsigned int other = (unsigned int)peer_recv(p);
    CHECK_EQ(other, node);
    int r;
    EXPECT(SCI_ERR_OK, r = SCIProbeNode(sd, 0, other, NO_FLAGS, &err));
    CHECK_EQ(r, 1);
    close_sd(sd);
}

static void two_processes_b(struct peer *p)
{
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    peer_send(p, node);
    CHECK_EQ(peer_recv(p), node);
    close_sd(sd);
}

/* libsisci provides memcpy and memmove for the whole program (copies into
 * remote maps take one string store; docs/design.md): every other copy must
 * behave exactly as the C library's. Sizes around the thresholds, odd
 * offsets, overlaps both ways, against a byte-by-byte reference. Called
 * through volatile pointers so the compiler cannot expand them inline. */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;
static void *(*volatile move_fn)(void *, const void *, size_t) = memmove;

static void copies_behave_as_the_c_library(struct peer *p)
{
    (void)p;
    static const size_t sizes[] = { 0, 1, 7, 63, 64, 65, 2047, 2048, 2049, 4096, 70001, 1 << 20, (1 << 20) + 3 };
    /* The program's memcpy and memmove are libsisci's. */
    Dl_info info;
    CHECK_MSG(dladdr((void *)copy_fn, &info) && info.dli_fname && strstr(info.dli_fname, "libsisci"),
              "memcpy comes from %s, not libsisci", info.dli_fname ? info.dli_fname : "nowhere");
    CHECK_MSG(dladdr((void *)move_fn, &info) && info.dli_fname && strstr(info.dli_fname, "libsisci"),
              "memmove comes from %s, not libsisci", info.dli_fname ? info.dli_fname : "nowhere");
    size_t cap = (3u << 20);
    unsigned char *a = malloc(cap), *want = malloc(cap);
    CHECK_MSG(a && want, "out of memory");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        for (int mode = 0; mode < 3; mode++) {
            /* mode 0: memcpy apart; 1: memmove up by 5 (overlapping); 2: memmove down by 5 */
            for (size_t i = 0; i < cap; i++)
                a[i] = want[i] = (unsigned char)(i * 131 + k + 7 * mode);
            size_t src = 3, dst = mode == 0 ? (1u << 20) + 1000 + 1 : mode == 1 ? 3 + 5 : 3;
            if (mode == 2)
                src = 8;
            /* the reference, byte by byte, in the safe direction */
            if (dst > src)
                for (size_t i = n; i-- > 0;)
                    want[dst + i] = want[src + i];
            else
                for (size_t i = 0; i < n; i++)
                    want[dst + i] = want[src + i];
            void *r = mode == 0 ? copy_fn(a + dst, a + src, n) : move_fn(a + dst, a + src, n);
            CHECK_MSG(r == a + dst, "size %zu mode %d: returned %p, not the destination", n, mode, r);
            CHECK_MSG(memcmp(a, want, cap) == 0, "size %zu mode %d: the bytes differ from a byte-by-byte copy", n, mode);
        }
    }
    free(a);
    free(want);
}

static const struct test_case cases[] = {
    { "copies_behave_as_the_c_library", copies_behave_as_the_c_library, NULL, 0 },
    { "open_close", open_close, NULL, 0 },
    { "initialize_bad_flag", initialize_bad_flag, NULL, 0 },
    { "open_without_initialize", open_without_initialize, NULL, 0 },
    { "no_daemon", no_daemon, NULL, 0 },
    { "no_daemon_quiet", no_daemon_quiet, NULL, 0 },
    { "default_socket", default_socket, NULL, 0 },
    { "node_id", node_id, NULL, 0 },
    { "query_adapter", query_adapter_cmds, NULL, 0 },
    { "query_strings", query_strings, NULL, 0 },
    { "error_strings", error_strings, NULL, 0 },
    { "probe", probe, NULL, 0 },
    { "two_processes", two_processes_a, two_processes_b, 0 },
    { NULL, NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
    return proc_main(argc, argv, cases);
}
