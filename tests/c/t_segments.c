/*
 * t_segments.c - docs/api.md "Local segments" and "Remote segments", across
 * processes: life cycle, ids, connect with and without waiting, segment
 * events by waiting and by callback, LOST / DISCONNECT on remove, on
 * SetSegmentUnavailable(NOTIFY / FORCE_DISCONNECT), on SCIClose, and when a
 * peer exits or is killed, plus every listed error; shared segments
 * (SCIShareSegment / SCIAttachLocalSegment); program memory as a segment
 * (SCI_FLAG_EMPTY + SCIRegisterSegmentMemory).
 *
 * Why one file of about 1,300 lines: it is one test program, as every
 * program in tests/c is (one binary the harness runs case by case), for the
 * two segment sections of docs/api.md; nearly every case is a pair of roles,
 * the owner (_a) and the peer (_b) in two processes, next to each other so
 * that the steps of one can be read against the other's.
 */
#include <fcntl.h>
#include <sys/mman.h>

#include "common/proc.h"

/* Long waits for events that must come (the role watchdog is longer). */
#define WAIT_LONG 30000u

static sci_local_segment_t make_segment(sci_desc_t sd, unsigned int id, size_t size,
                                        int available)
{
    sci_error_t err;
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, id, size, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    if (available)
        EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    return seg;
}

static void expect_local_event(sci_local_segment_t seg, sci_segment_cb_reason_t want,
                               unsigned int want_node)
{
    sci_error_t err;
    unsigned int node = 0, adapter = 99;
    sci_segment_cb_reason_t r;
    EXPECT(SCI_ERR_OK, r = SCIWaitForLocalSegmentEvent(seg, &node, &adapter, WAIT_LONG,
                                                       NO_FLAGS, &err));
    CHECK_EQ(r, want);
    CHECK_EQ(node, want_node);
    CHECK_EQ(adapter, 0);
}

static void expect_no_local_event(sci_local_segment_t seg)
{
    sci_error_t err;
    unsigned int node, adapter;
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForLocalSegmentEvent(seg, &node, &adapter, 0, NO_FLAGS, &err));
}

static void expect_remote_event(sci_remote_segment_t rs, sci_segment_cb_reason_t want)
{
    sci_error_t err, status = ERR_SENTINEL;
    sci_segment_cb_reason_t r;
    EXPECT(SCI_ERR_OK, r = SCIWaitForRemoteSegmentEvent(rs, &status, WAIT_LONG, NO_FLAGS, &err));
    CHECK_EQ(r, want);
    printf("remote segment event %d, status %s\n", (int)r, err_name(status));
}

/* ---- create ---------------------------------------------------------------- */

static void create_errors(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg, seg2;

    EXPECT(SCI_ERR_ILLEGAL_PARAMETER,
           SCICreateSegment(sd, &seg, 0x3001, 0, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER,
           SCICreateSegment(sd, NULL, 0x3001, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER,
           SCICreateSegment(NULL, &seg, 0x3001, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NOSPC, SCICreateSegment(sd, &seg, 0x3001, (size_t)17 << 30, NULL, NULL,
                                           NO_FLAGS, &err));
    EXPECT(SCI_ERR_NOSPC, SCICreateSegment(sd, &seg, 0x3001, (size_t)-1, NULL, NULL,
                                           NO_FLAGS, &err));
    EXPECT(SCI_ERR_FLAG_NOT_IMPLEMENTED, SCICreateSegment(sd, &seg, 0x3001, 4096, NULL, NULL,
                                                          SCI_FLAG_PHYSICAL, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCICreateSegment(sd, &seg, 0x3001, 4096, NULL, NULL,
                                                  BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCICreateSegment(sd, &seg, 0x3001, 4096, NULL, NULL,
                                                  SCI_FLAG_READONLY_MAP | 0x80000000U, &err));

    /* None of the failures left a segment behind: the id is still free. */
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x3001, 1 << 20, NULL, NULL, NO_FLAGS, &err));
    CHECK_EQ(SCIGetLocalSegmentSize(seg), 1 << 20);
    CHECK_EQ(SCIGetLocalSegmentId(seg), 0x3001);
    EXPECT(SCI_ERR_SEGMENTID_USED,
           SCICreateSegment(sd, &seg2, 0x3001, 4096, NULL, NULL, NO_FLAGS, &err));

    /* SCI_FLAG_PRIVATE: usable by its creator, never by a connector, even
     * after SCISetSegmentAvailable. */
    sci_local_segment_t priv;
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &priv, 0x3002, 4096, NULL, NULL, SCI_FLAG_PRIVATE, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(priv, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(priv, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_CONNECTION_REFUSED,
           SCIConnectSegment(sd, &rs, node, 0x3002, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(priv, NO_FLAGS, &err));

    /* Zero-filled. */
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, 1 << 20, NULL, NO_FLAGS, &err));
    for (size_t i = 0; i < (1u << 20); i++)
        CHECK_MSG(m[i] == 0, "byte %zu of a new segment is 0x%02x", i, m[i]);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    /* The id is free again after removal. */
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x3001, 4096, NULL, NULL, NO_FLAGS, &err));

    /* Odd sizes: 1 byte, not a page multiple. */
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg2, 0x3002, 1, NULL, NULL, NO_FLAGS, &err));
    CHECK_EQ(SCIGetLocalSegmentSize(seg2), 1);
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg2, &map, 0, 1, NULL, NO_FLAGS, &err));
    CHECK_EQ(m[0], 0);
    m[0] = 7;
    CHECK_EQ(m[0], 7);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* Segment ids are per node: another process cannot reuse a live id. */
static void segmentid_used_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x3010, 4096, 0);
    peer_barrier(p);        /* B tries the id */
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    peer_barrier(p);        /* B may now create it */
    peer_barrier(p);
    close_sd(sd);
}

static void segmentid_used_b(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg;
    peer_barrier(p);
    EXPECT(SCI_ERR_SEGMENTID_USED,
           SCICreateSegment(sd, &seg, 0x3010, 4096, NULL, NULL, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x3010, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* SCI_FLAG_AUTO_ID picks free ids that others can connect to. */
static void auto_id_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t s1, s2, s3;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &s1, 0, 4096, NULL, NULL, SCI_FLAG_AUTO_ID, &err));
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &s2, 0, 4096, NULL, NULL, SCI_FLAG_AUTO_ID, &err));
    unsigned int id1 = SCIGetLocalSegmentId(s1), id2 = SCIGetLocalSegmentId(s2);
    printf("auto ids %u and %u\n", id1, id2);
    CHECK(id1 != id2);
    /* An auto id is taken like any other. */
    EXPECT(SCI_ERR_SEGMENTID_USED,
           SCICreateSegment(sd, &s3, id1, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(s1, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(s1, 0, NO_FLAGS, &err));
    peer_send(p, id1);
    peer_send(p, id2);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(s1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(s2, NO_FLAGS, &err));
    close_sd(sd);
}

static void auto_id_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int id1 = (unsigned int)peer_recv(p), id2 = (unsigned int)peer_recv(p);
    /* B's own auto id differs from A's. */
    sci_local_segment_t s;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &s, 0, 4096, NULL, NULL, SCI_FLAG_AUTO_ID, &err));
    CHECK(SCIGetLocalSegmentId(s) != id1);
    CHECK(SCIGetLocalSegmentId(s) != id2);
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, id1, 0, NULL, NULL, 0, NO_FLAGS, &err));
    CHECK_EQ(SCIGetRemoteSegmentId(rs), id1);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(s, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* Prepare / available / unavailable / remove: order, adapters, flags. */
static void lifecycle_errors(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x3020, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_SEGMENT_NOT_PREPARED, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_SEGMENT_NOT_PREPARED, SCISetSegmentUnavailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_SEGMENT_NOT_PREPARED, SCISetSegmentUnavailable(seg, 0, SCI_FLAG_NOTIFY, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCIPrepareSegment(seg, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIPrepareSegment(seg, 0, BAD_FLAG, &err));
    /* Still not prepared after the failed attempts. */
    EXPECT(SCI_ERR_SEGMENT_NOT_PREPARED, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCISetSegmentAvailable(seg, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCISetSegmentAvailable(seg, 0, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO, SCISetSegmentUnavailable(seg, 1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCISetSegmentUnavailable(seg, 0, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, SCI_FLAG_NOTIFY, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, SCI_FLAG_FORCE_DISCONNECT, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRemoveSegment(seg, BAD_FLAG, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* ---- connect ---------------------------------------------------------------- */

static void connect_errors_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x3030, 8192, 0);   /* prepared, unavailable */
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, 8192, NULL, NO_FLAGS, &err));
    peer_barrier(p);               /* B tries while unavailable */
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    peer_barrier(p);               /* B connects */
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, NO_FLAGS, &err));
    peer_barrier(p);               /* B: new connects refused, old one works */
    peer_barrier(p);
    CHECK_EQ(m[8000], 0xab);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void connect_errors_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs, rs2;
    peer_barrier(p);
    EXPECT(SCI_ERR_CONNECTION_REFUSED,
           SCIConnectSegment(sd, &rs, node, 0x3030, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_CONNECTION_REFUSED,
           SCIConnectSegment(sd, &rs, node, 0x3030, 0, NULL, NULL, 200, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_SEGMENT,
           SCIConnectSegment(sd, &rs, node, 0x3039, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_SEGMENT,
           SCIConnectSegment(sd, &rs, node, 0x3039, 0, NULL, NULL, 200, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_NODEID,
           SCIConnectSegment(sd, &rs, absent_node(node), 0x3030, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_NODEID,
           SCIConnectSegment(sd, &rs, 0, 0x3030, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_NODEID,
           SCIConnectSegment(sd, &rs, 70000, 0x3030, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_ADAPTERNO,
           SCIConnectSegment(sd, &rs, node, 0x3030, 1, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG,
           SCIConnectSegment(sd, &rs, node, 0x3030, 0, NULL, NULL, 0, BAD_FLAG, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER,
           SCIConnectSegment(NULL, &rs, node, 0x3030, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT_FAIL(SCIConnectSegment(sd, NULL, node, 0x3030, 0, NULL, NULL, 0, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK,
           SCIConnectSegment(sd, &rs, node, 0x3030, 0, NULL, NULL, 0, NO_FLAGS, &err));
    CHECK_EQ(SCIGetRemoteSegmentSize(rs), 8192);
    CHECK_EQ(SCIGetRemoteSegmentId(rs), 0x3030);
    CHECK_EQ(SCIGetRemoteSegmentNodeId(rs), node);
    peer_barrier(p);
    peer_barrier(p);
    /* Unavailable: no new connections, the existing one stays. */
    EXPECT(SCI_ERR_CONNECTION_REFUSED,
           SCIConnectSegment(sd, &rs2, node, 0x3030, 0, NULL, NULL, 0, NO_FLAGS, &err));
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, 8192, NULL, NO_FLAGS, &err));
    m[8000] = 0xab;
    SCIStoreBarrier(NULL, NO_FLAGS);
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    close_sd(sd);
}

/* A connect with a timeout waits for another process to create the segment
 * and make it available. */
static void connect_waits_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    /* Round 1: B starts waiting before the segment exists. */
    CHECK_EQ(peer_recv(p), 1);
    sleep_ms(300);
    sci_local_segment_t s1 = make_segment(sd, 0x3040, 4096, 0);
    sleep_ms(200);
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(s1, 0, NO_FLAGS, &err));
    /* Round 2: the segment exists, unavailable, when B starts waiting. */
    sci_local_segment_t s2 = make_segment(sd, 0x3041, 4096, 0);
    peer_send(p, 2);
    CHECK_EQ(peer_recv(p), 2);
    sleep_ms(300);
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(s2, 0, NO_FLAGS, &err));
    /* Round 3: it never becomes available: the wait ends refused. */
    sci_local_segment_t s3 = make_segment(sd, 0x3042, 4096, 0);
    peer_send(p, 3);
    /* Round 4: asynchronous-connect flag is accepted and connects. */
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(s1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(s2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(s3, NO_FLAGS, &err));
    close_sd(sd);
}

static void connect_waits_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs1, rs2, rs3, rs4;
    peer_send(p, 1);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs1, node, 0x3040, 0, NULL, NULL,
                                         SCI_INFINITE_TIMEOUT, NO_FLAGS, &err));
    CHECK_EQ(peer_recv(p), 2);
    peer_send(p, 2);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs2, node, 0x3041, 0, NULL, NULL,
                                         WAIT_LONG, NO_FLAGS, &err));
    CHECK_EQ(peer_recv(p), 3);
    EXPECT(SCI_ERR_CONNECTION_REFUSED, SCIConnectSegment(sd, &rs3, node, 0x3042, 0, NULL, NULL,
                                                         300, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs4, node, 0x3040, 0, NULL, NULL, WAIT_LONG,
                                         SCI_FLAG_ASYNCHRONOUS_CONNECT, &err));
    /* An asynchronous connect reports its completion as an event. */
    expect_remote_event(rs4, SCI_CB_CONNECT);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs4, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs2, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* ---- events ---------------------------------------------------------------- */

/* CONNECT / DISCONNECT to the owner through SCIWaitForLocalSegmentEvent. */
static void local_events_wait_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node, n, a;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x3050, 4096, 1);
    expect_no_local_event(seg);
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForLocalSegmentEvent(seg, &n, &a, 100, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIWaitForLocalSegmentEvent(seg, &n, &a, 0, BAD_FLAG, &err));
    peer_barrier(p);              /* B connects */
    peer_barrier(p);
    expect_local_event(seg, SCI_CB_CONNECT, node);
    expect_no_local_event(seg);
    peer_barrier(p);              /* B disconnects */
    peer_barrier(p);
    expect_local_event(seg, SCI_CB_DISCONNECT, node);
    /* Waiting first: B connects while A is blocked. */
    peer_send(p, 1);
    expect_local_event(seg, SCI_CB_CONNECT, node);
    /* B closes its descriptor: that drops the connection too. */
    expect_local_event(seg, SCI_CB_DISCONNECT, node);
    expect_no_local_event(seg);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void local_events_wait_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs;
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3050, 0, NULL, NULL, 0, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    CHECK_EQ(peer_recv(p), 1);
    sleep_ms(200);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3050, 0, NULL, NULL, 0, NO_FLAGS, &err));
    sleep_ms(100);
    close_sd(sd);
}

/* Segment callbacks record what they saw. */
struct cb_log {
    int count;                        /* accessed atomically */
    sci_segment_cb_reason_t reason[16];
    unsigned int node[16], adapter[16];
    sci_error_t error[16];
    void *segment[16];
};

static sci_callback_action_t local_cb(void *arg, sci_local_segment_t segment,
                                      sci_segment_cb_reason_t reason, unsigned int nodeId,
                                      unsigned int localAdapterNo, sci_error_t error)
{
    struct cb_log *log = arg;
    int i = __atomic_load_n(&log->count, __ATOMIC_ACQUIRE);
    if (i < 16) {
        log->reason[i] = reason;
        log->node[i] = nodeId;
        log->adapter[i] = localAdapterNo;
        log->error[i] = error;
        log->segment[i] = segment;
        __atomic_store_n(&log->count, i + 1, __ATOMIC_RELEASE);
    }
    return SCI_CALLBACK_CONTINUE;
}

static sci_callback_action_t remote_cb(void *arg, sci_remote_segment_t segment,
                                       sci_segment_cb_reason_t reason, sci_error_t status)
{
    struct cb_log *log = arg;
    int i = __atomic_load_n(&log->count, __ATOMIC_ACQUIRE);
    if (i < 16) {
        log->reason[i] = reason;
        log->error[i] = status;
        log->segment[i] = segment;
        __atomic_store_n(&log->count, i + 1, __ATOMIC_RELEASE);
    }
    return SCI_CALLBACK_CONTINUE;
}

#define LOG_COUNT(l) __atomic_load_n(&(l)->count, __ATOMIC_ACQUIRE)

/* CONNECT / DISCONNECT to the owner through its callback. */
static void local_events_cb_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node, n, a;
    sci_desc_t sd = open_sd(&node);
    static struct cb_log log;
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x3060, 4096, local_cb, &log,
                                        SCI_FLAG_USE_CALLBACK, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    /* Waiting is not allowed on a segment that uses a callback. */
    EXPECT(SCI_ERR_ILLEGAL_OPERATION,
           SCIWaitForLocalSegmentEvent(seg, &n, &a, 0, NO_FLAGS, &err));
    peer_barrier(p);           /* B connects */
    peer_barrier(p);
    WAIT_UNTIL(LOG_COUNT(&log) >= 1, WAIT_LONG);
    CHECK_EQ(log.reason[0], SCI_CB_CONNECT);
    CHECK_EQ(log.node[0], node);
    CHECK_EQ(log.adapter[0], 0);
    CHECK(log.segment[0] == (void *)seg);
    CHECK_ERR(log.error[0], SCI_ERR_OK);
    peer_barrier(p);           /* B disconnects */
    peer_barrier(p);
    WAIT_UNTIL(LOG_COUNT(&log) >= 2, WAIT_LONG);
    CHECK_EQ(log.reason[1], SCI_CB_DISCONNECT);
    CHECK_EQ(log.node[1], node);
    CHECK(log.segment[1] == (void *)seg);
    EXPECT(SCI_ERR_ILLEGAL_OPERATION,
           SCIWaitForLocalSegmentEvent(seg, &n, &a, 100, NO_FLAGS, &err));
    /* B dies without closing: the callback hears of it. */
    peer_barrier(p);
    peer_wait_gone(p);
    WAIT_UNTIL(LOG_COUNT(&log) >= 4, WAIT_LONG);
    CHECK_EQ(log.reason[2], SCI_CB_CONNECT);
    CHECK_EQ(log.reason[3], SCI_CB_DISCONNECT);
    CHECK_EQ(log.node[3], node);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void local_events_cb_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs;
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3060, 0, NULL, NULL, 0, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3060, 0, NULL, NULL, 0, NO_FLAGS, &err));
    peer_barrier(p);
    fflush(stdout);
    _exit(0);   /* no SCIClose */
}

/* Removing a segment sends LOST to a connected peer, whose map stays memory. */
static void lost_on_remove_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x3070, 65536, 1);
    peer_barrier(p);            /* B connected, mapped, wrote */
    peer_barrier(p);
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, 65536, NULL, NO_FLAGS, &err));
    for (unsigned i = 0; i < 65536; i++)
        CHECK_MSG(m[i] == (unsigned char)(i * 13 + 1), "offset %u: 0x%02x", i, m[i]);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    peer_barrier(p);            /* B checks LOST */
    peer_barrier(p);
    /* The id is free for a new segment; B's old connection does not see it. */
    seg = make_segment(sd, 0x3070, 4096, 1);
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void lost_on_remove_b(struct peer *p)
{
    sci_error_t err, status;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs, rs2;
    sci_map_t map;
    sci_sequence_t seq;
    volatile unsigned char *m;
    sci_sequence_status_t st;
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3070, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, 65536, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateMapSequence(map, &seq, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, st = SCIStartSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    for (unsigned i = 0; i < 65536; i++)
        m[i] = (unsigned char)(i * 13 + 1);
    EXPECT(SCI_ERR_OK, st = SCICheckSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_OK);
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForRemoteSegmentEvent(rs, &status, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForRemoteSegmentEvent(rs, &status, 100, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIWaitForRemoteSegmentEvent(rs, &status, 0, BAD_FLAG, &err));
    peer_barrier(p);
    peer_barrier(p);
    expect_remote_event(rs, SCI_CB_LOST);
    /* The map is still valid memory. */
    CHECK_EQ(m[1], (unsigned char)14);
    m[5] = 99;
    CHECK_EQ(m[5], 99);
    /* The sequence reports the loss. */
    EXPECT(SCI_ERR_TRANSFER_FAILED, st = SCICheckSequence(seq, NO_FLAGS, &err));
    CHECK_EQ(st, SCI_SEQ_NOT_RETRIABLE);
    char buf[64] = { 1, 2, 3 };
    EXPECT(SCI_ERR_TRANSFER_FAILED, SCIMemCpy(seq, buf, map, 0, 64, SCI_FLAG_ERROR_CHECK, &err));
    EXPECT(SCI_ERR_TRANSFER_FAILED, SCIMemCpy(NULL, buf, map, 0, 64, SCI_FLAG_ERROR_CHECK, &err));
    /* The segment is gone for new connections. */
    EXPECT(SCI_ERR_NO_SUCH_SEGMENT,
           SCIConnectSegment(sd, &rs2, node, 0x3070, 0, NULL, NULL, 0, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    /* A new segment with the same id is a new segment: B's old map does not
     * show it. */
    EXPECT(SCI_ERR_OK,
           SCIConnectSegment(sd, &rs2, node, 0x3070, 0, NULL, NULL, 0, NO_FLAGS, &err));
    CHECK_EQ(SCIGetRemoteSegmentSize(rs2), 4096);
    sci_map_t map2;
    volatile unsigned char *m2;
    EXPECT(SCI_ERR_OK, m2 = SCIMapRemoteSegment(rs2, &map2, 0, 4096, NULL, NO_FLAGS, &err));
    CHECK_EQ(m2[5], 0);
    m[5] = 55;
    CHECK_EQ(m2[5], 0);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSequence(seq, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* LOST through the connector's callback. */
static void lost_callback_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x3080, 4096, 1);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    close_sd(sd);
}

static void lost_callback_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    static struct cb_log log;
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3080, 0, remote_cb, &log, WAIT_LONG,
                                         SCI_FLAG_USE_CALLBACK, &err));
    peer_barrier(p);
    peer_barrier(p);
    WAIT_UNTIL(LOG_COUNT(&log) >= 1, WAIT_LONG);
    CHECK_EQ(log.reason[0], SCI_CB_LOST);
    CHECK(log.segment[0] == (void *)rs);
    printf("callback: LOST, status %s\n", err_name(log.error[0]));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* SCI_ERR_BUSY while the creator still has maps; then removal works. */
static void remove_busy_with_map(struct peer *p)
{
    (void)p;
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x3090, 4096, 1);
    sci_map_t m1, m2;
    EXPECT(SCI_ERR_OK, SCIMapLocalSegment(seg, &m1, 0, 4096, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMapLocalSegment(seg, &m2, 100, 10, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_BUSY, SCIRemoveSegment(seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(m1, NO_FLAGS, &err));
    EXPECT(SCI_ERR_BUSY, SCIRemoveSegment(seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(m2, NO_FLAGS, &err));
    /* The failed removals left it intact and available. */
    sci_remote_segment_t rs;
    unsigned int node;
    EXPECT(SCI_ERR_OK, SCIGetLocalNodeId(0, &node, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3090, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* SCI_ERR_BUSY on disconnect while the connector has maps. */
static void disconnect_busy_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x30a0, 4096, 1);
    peer_barrier(p);                 /* B connected and mapped */
    expect_local_event(seg, SCI_CB_CONNECT, node);
    peer_barrier(p);                 /* B's disconnect was BUSY */
    peer_barrier(p);
    expect_no_local_event(seg);
    peer_barrier(p);                 /* B unmapped and disconnected */
    peer_barrier(p);
    expect_local_event(seg, SCI_CB_DISCONNECT, node);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void disconnect_busy_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs;
    sci_map_t map;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x30a0, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMapRemoteSegment(rs, &map, 0, 4096, NULL, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_BUSY, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIDisconnectSegment(rs, BAD_FLAG, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* SCISetSegmentUnavailable(SCI_FLAG_NOTIFY): peers get DISCONNECT, keep the
 * connection; FORCE_DISCONNECT: peers get LOST. */
static void unavailable_notify_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x30b0, 4096, 1);
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, 4096, NULL, NO_FLAGS, &err));
    peer_barrier(p);               /* B connected */
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, SCI_FLAG_NOTIFY, &err));
    peer_barrier(p);               /* B got DISCONNECT, wrote */
    CHECK_EQ(m[10], 0x77);
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    peer_barrier(p);               /* B connects anew */
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void unavailable_notify_b(struct peer *p)
{
    sci_error_t err, status;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs, rs2;
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x30b0, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, 4096, NULL, NO_FLAGS, &err));
    peer_barrier(p);
    expect_remote_event(rs, SCI_CB_DISCONNECT);
    EXPECT(SCI_ERR_TIMEOUT, SCIWaitForRemoteSegmentEvent(rs, &status, 0, NO_FLAGS, &err));
    m[10] = 0x77;
    SCIStoreBarrier(NULL, NO_FLAGS);
    EXPECT(SCI_ERR_CONNECTION_REFUSED,
           SCIConnectSegment(sd, &rs2, node, 0x30b0, 0, NULL, NULL, 0, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK,
           SCIConnectSegment(sd, &rs2, node, 0x30b0, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs2, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

static void unavailable_force_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x30c0, 4096, 1);
    peer_barrier(p);               /* B connected and mapped */
    expect_local_event(seg, SCI_CB_CONNECT, node);
    EXPECT(SCI_ERR_OK, SCISetSegmentUnavailable(seg, 0, SCI_FLAG_FORCE_DISCONNECT, &err));
    peer_barrier(p);               /* B got LOST */
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void unavailable_force_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs, rs2;
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x30c0, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, 4096, NULL, NO_FLAGS, &err));
    peer_barrier(p);
    expect_remote_event(rs, SCI_CB_LOST);
    m[1] = 1;                     /* still memory */
    CHECK_EQ(m[1], 1);
    EXPECT(SCI_ERR_CONNECTION_REFUSED,
           SCIConnectSegment(sd, &rs2, node, 0x30c0, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    close_sd(sd);
}

/* ---- peers that go away ------------------------------------------------------ */

/* B owns a segment A connected to, and is connected to A's segment; then B
 * ends without SCIClose (exit, or SIGKILL).  A must get DISCONNECT on its
 * own segment and LOST on B's. */
static void peer_gone_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x30d0, 4096, 1);
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x30d1, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, 4096, NULL, NO_FLAGS, &err));
    expect_local_event(seg, SCI_CB_CONNECT, node);
    peer_barrier(p);
    peer_wait_gone(p);
    expect_local_event(seg, SCI_CB_DISCONNECT, node);
    expect_remote_event(rs, SCI_CB_LOST);
    m[0] = 1;
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    /* B's segment id is free again. */
    sci_local_segment_t again;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &again, 0x30d1, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(again, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void peer_gone_setup_b(void)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x30d1, 4096, 1);
    sci_remote_segment_t rs;
    sci_map_t map, lmap;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x30d0, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMapRemoteSegment(rs, &map, 0, 4096, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIMapLocalSegment(seg, &lmap, 0, 4096, NULL, NO_FLAGS, &err));
}

static void peer_exit_b(struct peer *p)
{
    peer_gone_setup_b();
    peer_barrier(p);
    fflush(stdout);
    _exit(0);
}

static void peer_sigkill_b(struct peer *p)
{
    peer_gone_setup_b();
    peer_barrier(p);
    fflush(stdout);
    kill(getpid(), SIGKILL);
}

/* SCIClose releases everything (no BUSY) and tells the peers. */
static void close_releases_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x30e0, 4096, 1);
    sci_map_t map;
    EXPECT(SCI_ERR_OK, SCIMapLocalSegment(seg, &map, 0, 4096, NULL, NO_FLAGS, &err));
    sci_local_interrupt_t li;
    sci_local_data_interrupt_t ldi;
    unsigned int no = 20, dno = 20;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &ldi, 0, &dno, NULL, NULL, NO_FLAGS, &err));
    peer_send(p, no);
    peer_send(p, dno);
    peer_barrier(p);        /* B connected to all three */
    EXPECT(SCI_ERR_OK, SCIClose(sd, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
}

static void close_releases_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    unsigned int no = (unsigned int)peer_recv(p), dno = (unsigned int)peer_recv(p);
    sci_remote_segment_t rs;
    sci_remote_interrupt_t ri;
    sci_remote_data_interrupt_t rdi;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x30e0, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, no, WAIT_LONG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(sd, &rdi, node, 0, dno, WAIT_LONG, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    expect_remote_event(rs, SCI_CB_LOST);
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    char b[8] = "gone";
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerDataInterrupt(rdi, b, 4, NO_FLAGS, &err));
    /* Everything A had is free again. */
    sci_local_segment_t seg;
    sci_local_interrupt_t li;
    sci_local_data_interrupt_t ldi;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x30e0, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err));
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &ldi, 0, &dno, NULL, NULL,
                                              SCI_FLAG_FIXED_INTNO, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(rdi, NO_FLAGS, &err));
    /* SCIClose with everything still held. */
    close_sd(sd);
    peer_barrier(p);
}

/* A process may connect to its own segment; getters. */
static void self_connect(struct peer *p)
{
    (void)p;
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg = make_segment(sd, 0x30f0, 12345, 1);
    CHECK_EQ(SCIGetLocalSegmentSize(seg), 12345);
    sci_remote_segment_t r1, r2;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &r1, node, 0x30f0, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &r2, node, 0x30f0, 0, NULL, NULL, 0,
                                         SCI_FLAG_ASYNCHRONOUS_CONNECT, &err));
    expect_remote_event(r2, SCI_CB_CONNECT);
    CHECK(r1 != r2);
    CHECK_EQ(SCIGetRemoteSegmentSize(r1), 12345);
    CHECK_EQ(SCIGetRemoteSegmentId(r2), 0x30f0);
    CHECK_EQ(SCIGetRemoteSegmentNodeId(r2), node);
    expect_local_event(seg, SCI_CB_CONNECT, node);
    expect_local_event(seg, SCI_CB_CONNECT, node);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(r1, NO_FLAGS, &err));
    expect_local_event(seg, SCI_CB_DISCONNECT, node);
    /* Removing with a connection open: the connection gets LOST. */
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    expect_remote_event(r2, SCI_CB_LOST);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(r2, NO_FLAGS, &err));
    close_sd(sd);
}

/* ---- shared segments (SCIShareSegment / SCIAttachLocalSegment) ------------ */

#define SHARE_SIZE (64u << 10)

/* A owns 0x3101; B attaches: refused before the share, then the same memory
 * both ways; the segment outlives its owner's handle and goes with the last. */
static void share_attach_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x3101, SHARE_SIZE, 1);
    peer_barrier(p);        /* created: B may try it now */
    sci_map_t map;
    volatile uint32_t *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, SHARE_SIZE, NULL, NO_FLAGS, &err));
    for (unsigned i = 0; i < SHARE_SIZE / 4; i++)
        m[i] = 0xA0000000u + i;
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIShareSegment(seg, 0x40000000u, &err));
    peer_barrier(p);        /* B tried before the share */
    EXPECT(SCI_ERR_OK, SCIShareSegment(seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIShareSegment(seg, NO_FLAGS, &err));   /* idempotent */
    peer_barrier(p);        /* shared */
    peer_barrier(p);        /* B attached, checked, wrote its half */
    for (unsigned i = SHARE_SIZE / 8; i < SHARE_SIZE / 4; i++)
        CHECK_EQ(m[i], 0xB0000000u + i);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    /* Our handle is gone, the segment is not: B still holds it. */
    sci_local_segment_t again;
    EXPECT(SCI_ERR_SEGMENTID_USED,
           SCICreateSegment(sd, &again, 0x3101, 4096, NULL, NULL, NO_FLAGS, &err));
    peer_barrier(p);        /* removed our handle */
    peer_barrier(p);        /* B checked it can still be connected to, then removed */
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &again, 0x3101, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(again, NO_FLAGS, &err));
    close_sd(sd);
}

static void share_attach_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    size_t size = 0;
    peer_barrier(p);        /* A created 0x3101 (not shared yet) */
    EXPECT(SCI_ERR_NO_SUCH_SEGMENT,
           SCIAttachLocalSegment(sd, &seg, 0x3199, &size, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ACCESS,
           SCIAttachLocalSegment(sd, &seg, 0x3101, &size, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER,
           SCIAttachLocalSegment(sd, NULL, 0x3101, &size, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER,
           SCIAttachLocalSegment(sd, &seg, 0x3101, &size, NULL, NULL, SCI_FLAG_USE_CALLBACK, &err));
    peer_barrier(p);
    peer_barrier(p);        /* A shared it */
    EXPECT(SCI_ERR_OK, SCIAttachLocalSegment(sd, &seg, 0x3101, &size, NULL, NULL, NO_FLAGS, &err));
    CHECK_EQ(size, SHARE_SIZE);
    CHECK_EQ(SCIGetLocalSegmentSize(seg), SHARE_SIZE);
    CHECK_EQ(SCIGetLocalSegmentId(seg), 0x3101);
    sci_map_t map;
    volatile uint32_t *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, SHARE_SIZE, NULL, NO_FLAGS, &err));
    for (unsigned i = 0; i < SHARE_SIZE / 8; i++)
        CHECK_EQ(m[i], 0xA0000000u + i);
    for (unsigned i = SHARE_SIZE / 8; i < SHARE_SIZE / 4; i++)
        m[i] = 0xB0000000u + i;
    peer_barrier(p);
    peer_barrier(p);        /* A removed its handle */
    for (unsigned i = 0; i < SHARE_SIZE / 8; i++)
        CHECK_EQ(m[i], 0xA0000000u + i);
    EXPECT(SCI_ERR_BUSY, SCIRemoveSegment(seg, NO_FLAGS, &err));
    /* Still available to connectors, through our handle's segment. */
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3101, 0, NULL, NULL, 0, NO_FLAGS, &err));
    expect_local_event(seg, SCI_CB_CONNECT, node);
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    expect_local_event(seg, SCI_CB_DISCONNECT, node);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_NO_SUCH_SEGMENT,
           SCIConnectSegment(sd, &rs, node, 0x3101, 0, NULL, NULL, 0, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

/* Owner and attacher both hear of connections, each on its own handle (B's
 * by callback); an attacher may prepare and set the segment available. */
static volatile int attach_cb_connects;

static sci_callback_action_t attach_cb(void *arg, sci_local_segment_t seg,
                                       sci_segment_cb_reason_t reason, unsigned int node,
                                       unsigned int adapter, sci_error_t status)
{
    (void)node; (void)adapter; (void)status;
    CHECK(arg == (void *)&attach_cb_connects);
    CHECK(seg != NULL);
    if (reason == SCI_CB_CONNECT)
        __atomic_add_fetch(&attach_cb_connects, 1, __ATOMIC_SEQ_CST);
    return SCI_CALLBACK_CONTINUE;
}

static void attach_events_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x3102, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIShareSegment(seg, NO_FLAGS, &err));
    peer_barrier(p);        /* B attached, prepared and set it available */
    sci_desc_t sd2 = open_sd(NULL);
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd2, &rs, node, 0x3102, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    expect_local_event(seg, SCI_CB_CONNECT, node);
    peer_barrier(p);        /* B's callback saw it */
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    expect_local_event(seg, SCI_CB_DISCONNECT, node);
    close_sd(sd2);
    peer_barrier(p);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

static void attach_events_b(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg;
    size_t size;
    for (int i = 0; ; i++) {   /* A may not have shared it yet */
        SCIAttachLocalSegment(sd, &seg, 0x3102, &size, attach_cb, (void *)&attach_cb_connects,
                              SCI_FLAG_USE_CALLBACK, &err);
        if (err == SCI_ERR_OK)
            break;
        CHECK(i < 3000 && (err == SCI_ERR_ACCESS || err == SCI_ERR_NO_SUCH_SEGMENT));
        sleep_ms(1);
    }
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    peer_barrier(p);
    uint64_t t0 = now_ms();
    while (__atomic_load_n(&attach_cb_connects, __ATOMIC_SEQ_CST) == 0)
        CHECK(now_ms() - t0 < WAIT_LONG);
    peer_barrier(p);
    peer_barrier(p);
    CHECK_EQ(__atomic_load_n(&attach_cb_connects, __ATOMIC_SEQ_CST), 1);
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
}

/* The owner is killed while B is attached: B keeps the memory and the
 * segment; B's removal then frees the id. */
static void owner_killed_a(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    peer_barrier(p);        /* B created and shared 0x3103 and wrote it */
    sci_local_segment_t seg;
    size_t size;
    EXPECT(SCI_ERR_OK, SCIAttachLocalSegment(sd, &seg, 0x3103, &size, NULL, NULL, NO_FLAGS, &err));
    peer_barrier(p);
    peer_wait_gone(p);
    sci_map_t map;
    volatile uint32_t *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, 4096, NULL, NO_FLAGS, &err));
    for (unsigned i = 0; i < 1024; i++)
        CHECK_EQ(m[i], 0xC0000000u + i);
    sci_remote_segment_t rs;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3103, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    /* The node learns of B's death when it reads the end of B's socket,
     * which on a busy machine can come after our removal: the id is free
     * once it has seen both (a generous deadline, not a guessed time). */
    uint64_t t0 = now_ms();
    for (;;) {
        SCIConnectSegment(sd, &rs, node, 0x3103, 0, NULL, NULL, 0, NO_FLAGS, &err);
        if (err != SCI_ERR_OK)
            break;
        EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
        CHECK_MSG(now_ms() - t0 < 60000, "segment 0x3103 still there 60 s after its last handle went");
        sleep_ms(20);
    }
    CHECK_EQ(err, SCI_ERR_NO_SUCH_SEGMENT);
    close_sd(sd);
}

static void owner_killed_b(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg = make_segment(sd, 0x3103, 4096, 1);
    sci_map_t map;
    volatile uint32_t *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, 4096, NULL, NO_FLAGS, &err));
    for (unsigned i = 0; i < 1024; i++)
        m[i] = 0xC0000000u + i;
    EXPECT(SCI_ERR_OK, SCIShareSegment(seg, NO_FLAGS, &err));
    peer_barrier(p);
    peer_barrier(p);
    fflush(stdout);
    kill(getpid(), SIGKILL);
}

/* ---- program memory (SCI_FLAG_EMPTY + SCIRegisterSegmentMemory) ------------ */

#define REG_SIZE (64u << 10)

/* A gives an empty segment its own buffer: the same bytes at the same
 * address, and from then on B's stores land in A's buffer and A's in B's. */
static void register_memory_a(struct peer *p)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg, odd;
    sci_map_t map;
    uint32_t *buf;
    CHECK(posix_memalign((void **)&buf, 4096, REG_SIZE) == 0);
    for (unsigned i = 0; i < REG_SIZE / 4; i++)
        buf[i] = 0xD0000000u + i;

    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0x3201, REG_SIZE, NULL, NULL, SCI_FLAG_EMPTY, &err));
    /* No memory yet: nothing to map or offer. */
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIMapLocalSegment(seg, &map, 0, 4096, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    /* Bad memory. */
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIRegisterSegmentMemory((char *)buf + 8, REG_SIZE, seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRegisterSegmentMemory(buf, REG_SIZE / 2, seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_PARAMETER, SCIRegisterSegmentMemory(NULL, REG_SIZE, seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_FLAG, SCIRegisterSegmentMemory(buf, REG_SIZE, seg, 0x40000000u, &err));
    int exe = open("/proc/self/exe", O_RDONLY);
    void *file = mmap(NULL, REG_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, exe, 0);
    CHECK(exe >= 0 && file != MAP_FAILED);
    close(exe);
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIRegisterSegmentMemory(file, REG_SIZE, seg, NO_FLAGS, &err));
    void *hole = mmap(NULL, REG_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(hole != MAP_FAILED);
    EXPECT(SCI_ERR_ILLEGAL_ADDRESS, SCIRegisterSegmentMemory(hole, REG_SIZE, seg, NO_FLAGS, &err));
    munmap(hole, REG_SIZE);
    munmap(file, REG_SIZE);
    /* A segment not made of whole pages cannot take over whole pages. */
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &odd, 0x3202, 1000, NULL, NULL, SCI_FLAG_EMPTY, &err));
    EXPECT(SCI_ERR_SIZE_ALIGNMENT, SCIRegisterSegmentMemory(buf, 1000, odd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(odd, NO_FLAGS, &err));
    /* A segment with its own memory takes none. */
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &odd, 0x3202, REG_SIZE, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIRegisterSegmentMemory(buf, REG_SIZE, odd, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(odd, NO_FLAGS, &err));

    EXPECT(SCI_ERR_OK, SCIRegisterSegmentMemory(buf, REG_SIZE, seg, NO_FLAGS, &err));
    EXPECT(SCI_ERR_ILLEGAL_OPERATION, SCIRegisterSegmentMemory(buf, REG_SIZE, seg, NO_FLAGS, &err));
    for (unsigned i = 0; i < REG_SIZE / 4; i++)
        CHECK_EQ(buf[i], 0xD0000000u + i);
    volatile uint32_t *m;
    EXPECT(SCI_ERR_OK, m = SCIMapLocalSegment(seg, &map, 0, REG_SIZE, NULL, NO_FLAGS, &err));
    CHECK_EQ(m[5], 0xD0000005u);
    buf[6] = 0x66;
    CHECK_EQ(m[6], 0x66);
    buf[6] = 0xD0000006u;
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    peer_barrier(p);        /* B connected, checked, wrote its half */
    peer_barrier(p);
    for (unsigned i = REG_SIZE / 8; i < REG_SIZE / 4; i++)
        CHECK_EQ(__atomic_load_n(&buf[i], __ATOMIC_SEQ_CST), 0xE0000000u + i);
    __atomic_store_n(&buf[0], 0x12345678u, __ATOMIC_SEQ_CST);
    peer_barrier(p);        /* B saw our new word */
    peer_barrier(p);        /* B disconnected */
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    /* The buffer stays the program's. */
    CHECK_EQ(buf[REG_SIZE / 4 - 1], 0xE0000000u + REG_SIZE / 4 - 1);
    buf[1] = 1;
    free(buf);
    close_sd(sd);
}

static void register_memory_b(struct peer *p)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs;
    sci_map_t map;
    volatile uint32_t *m;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, 0x3201, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    CHECK_EQ(SCIGetRemoteSegmentSize(rs), REG_SIZE);
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, REG_SIZE, NULL, NO_FLAGS, &err));
    for (unsigned i = 0; i < REG_SIZE / 8; i++)
        CHECK_EQ(m[i], 0xD0000000u + i);
    for (unsigned i = REG_SIZE / 8; i < REG_SIZE / 4; i++)
        m[i] = 0xE0000000u + i;
    SCIFlush(NULL, NO_FLAGS);
    peer_barrier(p);
    peer_barrier(p);
    peer_barrier(p);
    CHECK_EQ(m[0], 0x12345678u);
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(map, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    peer_barrier(p);
    close_sd(sd);
}

static const struct test_case cases[] = {
    { "create_errors", create_errors, NULL, 0 },
    { "segmentid_used", segmentid_used_a, segmentid_used_b, 0 },
    { "auto_id", auto_id_a, auto_id_b, 0 },
    { "lifecycle_errors", lifecycle_errors, NULL, 0 },
    { "connect_errors", connect_errors_a, connect_errors_b, 0 },
    { "connect_waits_for_available", connect_waits_a, connect_waits_b, 0 },
    { "local_events_wait", local_events_wait_a, local_events_wait_b, 0 },
    { "local_events_callback", local_events_cb_a, local_events_cb_b, 0 },
    { "lost_on_remove", lost_on_remove_a, lost_on_remove_b, 0 },
    { "lost_callback", lost_callback_a, lost_callback_b, 0 },
    { "remove_busy_with_map", remove_busy_with_map, NULL, 0 },
    { "disconnect_busy_with_map", disconnect_busy_a, disconnect_busy_b, 0 },
    { "unavailable_notify", unavailable_notify_a, unavailable_notify_b, 0 },
    { "unavailable_force_disconnect", unavailable_force_a, unavailable_force_b, 0 },
    { "peer_exit_without_close", peer_gone_a, peer_exit_b, 0 },
    { "peer_sigkill", peer_gone_a, peer_sigkill_b, 1 },
    { "close_releases_everything", close_releases_a, close_releases_b, 0 },
    { "self_connect", self_connect, NULL, 0 },
    { "share_attach", share_attach_a, share_attach_b, 0 },
    { "attach_events", attach_events_a, attach_events_b, 0 },
    { "owner_killed_attacher_keeps", owner_killed_a, owner_killed_b, 1 },
    { "register_memory", register_memory_a, register_memory_b, 0 },
    { NULL, NULL, NULL, 0 },
};

int main(int argc, char **argv)
{
    return proc_main(argc, argv, cases);
}
