/*
 * t_kill.c - roles for the system tests that kill processes or the daemon
 * (crates/vsci-systest/tests/daemon.rs).  The harness starts them, reads
 * their "... READY" lines, kills what it wants, and checks the outcome.
 *
 *   t_kill victim OBS_SEG VICTIM_SEG
 *       creates segment VICTIM_SEG (with its interrupt numbers in its first
 *       words), an interrupt and a data interrupt, connects to and maps the
 *       observer's segment OBS_SEG, prints "VICTIM READY", then sleeps until
 *       it is killed.
 *   t_kill observer OBS_SEG VICTIM_SEG
 *       owns OBS_SEG (with a callback), connects to the victim's segment and
 *       interrupts, prints "OBSERVER READY" once the victim is connected,
 *       then waits for the victim to die: it must get SCI_CB_DISCONNECT for
 *       OBS_SEG (callback) and SCI_CB_LOST for VICTIM_SEG (wait), and
 *       SCI_ERR_NOT_CONNECTED when triggering the dead victim's interrupts.
 *       Releases everything and exits 0 ("OBSERVER DONE").
 *   t_kill term-owner SEG
 *       owns SEG, prints "OWNER READY", sleeps until killed.
 *   t_kill term-connector SEG
 *       connects to and maps SEG, prints "CONNECTOR READY", waits for
 *       SCI_CB_LOST (the daemon goes away), prints "CONNECTOR GOT LOST",
 *       exits 0.
 *   t_kill smoke
 *       a short, complete client session; prints "SMOKE OK".
 *
 * Every role exits 1 with a message on any unexpected result.
 */
#include "common/proc.h"

#define WAIT_LONG 60000u

struct victim_hdr {
    volatile uint32_t magic;
    volatile uint32_t intno;
    volatile uint32_t dintno;
};
#define VICTIM_MAGIC 0x71c71d00u

static void sleep_forever(void)
{
    for (;;)
        pause();
}

static int victim(unsigned int obs_seg, unsigned int victim_seg)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    sci_map_t lmap, rmap;
    sci_remote_segment_t rs;
    sci_local_interrupt_t li;
    sci_local_data_interrupt_t ldi;
    unsigned int no = 0, dno = 0;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &ldi, 0, &dno, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, victim_seg, 65536, NULL, NULL, NO_FLAGS, &err));
    struct victim_hdr *h;
    EXPECT(SCI_ERR_OK, h = (struct victim_hdr *)SCIMapLocalSegment(seg, &lmap, 0, 65536, NULL,
                                                                   NO_FLAGS, &err));
    h->intno = no;
    h->dintno = dno;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    h->magic = VICTIM_MAGIC;
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, obs_seg, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    volatile unsigned char *r;
    EXPECT(SCI_ERR_OK, r = SCIMapRemoteSegment(rs, &rmap, 0, 4096, NULL, NO_FLAGS, &err));
    r[0] = 0x42;
    printf("VICTIM READY pid=%d segment=%u intno=%u dintno=%u\n", (int)getpid(), victim_seg,
           no, dno);
    fflush(stdout);
    sleep_forever();
    return 0;
}

static int obs_events;                     /* bit 0: CONNECT, bit 1: DISCONNECT */
static unsigned int obs_disconnect_node;

static sci_callback_action_t obs_cb(void *arg, sci_local_segment_t segment,
                                    sci_segment_cb_reason_t reason, unsigned int nodeId,
                                    unsigned int adapter, sci_error_t error)
{
    (void)arg; (void)segment; (void)adapter; (void)error;
    printf("observer callback: reason %d from node %u\n", (int)reason, nodeId);
    fflush(stdout);
    if (reason == SCI_CB_CONNECT)
        __atomic_or_fetch(&obs_events, 1, __ATOMIC_ACQ_REL);
    if (reason == SCI_CB_DISCONNECT) {
        obs_disconnect_node = nodeId;
        __atomic_or_fetch(&obs_events, 2, __ATOMIC_ACQ_REL);
    }
    return SCI_CALLBACK_CONTINUE;
}

static int observer(unsigned int obs_seg, unsigned int victim_seg)
{
    sci_error_t err, status;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    sci_remote_segment_t rs;
    sci_map_t rmap, lmap;
    sci_remote_interrupt_t ri;
    sci_remote_data_interrupt_t rdi;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, obs_seg, 4096, obs_cb, NULL,
                                        SCI_FLAG_USE_CALLBACK, &err));
    volatile unsigned char *l;
    EXPECT(SCI_ERR_OK, l = SCIMapLocalSegment(seg, &lmap, 0, 4096, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, victim_seg, 0, NULL, NULL, WAIT_LONG,
                                         NO_FLAGS, &err));
    struct victim_hdr *h;
    EXPECT(SCI_ERR_OK, h = (struct victim_hdr *)SCIMapRemoteSegment(rs, &rmap, 0, 4096, NULL,
                                                                    NO_FLAGS, &err));
    WAIT_UNTIL(h->magic == VICTIM_MAGIC, WAIT_LONG);
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, h->intno, WAIT_LONG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectDataInterrupt(sd, &rdi, node, 0, h->dintno, WAIT_LONG, NO_FLAGS,
                                               &err));
    /* The victim is connected to us once it wrote into our segment. */
    WAIT_UNTIL((__atomic_load_n(&obs_events, __ATOMIC_ACQUIRE) & 1) && l[0] == 0x42, WAIT_LONG);
    printf("OBSERVER READY\n");
    fflush(stdout);

    sci_segment_cb_reason_t r;
    EXPECT(SCI_ERR_OK, r = SCIWaitForRemoteSegmentEvent(rs, &status, WAIT_LONG, NO_FLAGS, &err));
    CHECK_MSG(r == SCI_CB_LOST, "victim's segment: event %d, want SCI_CB_LOST (%d)", (int)r,
              (int)SCI_CB_LOST);
    printf("OBSERVER GOT LOST\n");
    WAIT_UNTIL(__atomic_load_n(&obs_events, __ATOMIC_ACQUIRE) & 2, WAIT_LONG);
    CHECK_EQ(obs_disconnect_node, node);
    printf("OBSERVER GOT DISCONNECT node=%u\n", obs_disconnect_node);
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    char b[4] = "x";
    EXPECT(SCI_ERR_NOT_CONNECTED, SCITriggerDataInterrupt(rdi, b, 1, NO_FLAGS, &err));
    printf("OBSERVER GOT NOT_CONNECTED\n");
    /* The dead victim's segment id is free again. */
    sci_local_segment_t again;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &again, victim_seg, 4096, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(again, NO_FLAGS, &err));

    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectDataInterrupt(rdi, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(rmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(lmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
    printf("OBSERVER DONE\n");
    return 0;
}

static int term_owner(unsigned int id)
{
    sci_error_t err;
    sci_desc_t sd = open_sd(NULL);
    sci_local_segment_t seg;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, id, 65536, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    printf("OWNER READY\n");
    fflush(stdout);
    sleep_forever();
    return 0;
}

static int term_connector(unsigned int id)
{
    sci_error_t err, status;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_remote_segment_t rs;
    sci_map_t map;
    volatile unsigned char *m;
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, id, 0, NULL, NULL, WAIT_LONG, NO_FLAGS,
                                         &err));
    EXPECT(SCI_ERR_OK, m = SCIMapRemoteSegment(rs, &map, 0, 65536, NULL, NO_FLAGS, &err));
    m[0] = 1;
    printf("CONNECTOR READY\n");
    fflush(stdout);
    sci_segment_cb_reason_t r;
    EXPECT(SCI_ERR_OK, r = SCIWaitForRemoteSegmentEvent(rs, &status, WAIT_LONG, NO_FLAGS, &err));
    CHECK_MSG(r == SCI_CB_LOST, "event %d, want SCI_CB_LOST (%d)", (int)r, (int)SCI_CB_LOST);
    printf("CONNECTOR GOT LOST\n");
    /* The map is still memory. */
    m[1] = 2;
    CHECK_EQ(m[0] + m[1], 3);
    /* Releasing after the daemon is gone must not hang or crash; the errors
     * are reported, not judged. */
    err = ERR_SENTINEL;
    SCIUnmapSegment(map, NO_FLAGS, &err);
    printf("unmap after daemon exit: %s\n", err_name(err));
    err = ERR_SENTINEL;
    SCIDisconnectSegment(rs, NO_FLAGS, &err);
    printf("disconnect after daemon exit: %s\n", err_name(err));
    err = ERR_SENTINEL;
    SCIClose(sd, NO_FLAGS, &err);
    printf("close after daemon exit: %s\n", err_name(err));
    return 0;
}

static int smoke(void)
{
    sci_error_t err;
    unsigned int node;
    sci_desc_t sd = open_sd(&node);
    sci_local_segment_t seg;
    sci_remote_segment_t rs;
    sci_map_t lmap, rmap;
    volatile unsigned char *l, *r;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, 0, 8192, NULL, NULL, SCI_FLAG_AUTO_ID, &err));
    unsigned int id = SCIGetLocalSegmentId(seg);
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node, id, 0, NULL, NULL, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, l = SCIMapLocalSegment(seg, &lmap, 0, 8192, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, r = SCIMapRemoteSegment(rs, &rmap, 0, 8192, NULL, NO_FLAGS, &err));
    for (int i = 0; i < 8192; i++)
        r[i] = (unsigned char)i;
    for (int i = 0; i < 8192; i++)
        CHECK_EQ(l[i], (unsigned char)i);
    unsigned int no = 0;
    sci_local_interrupt_t li;
    sci_remote_interrupt_t ri;
    EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIConnectInterrupt(sd, &ri, node, 0, no, 0, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCITriggerInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIWaitForInterrupt(li, WAIT_LONG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectInterrupt(ri, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveInterrupt(li, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(rmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIUnmapSegment(lmap, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIDisconnectSegment(rs, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIRemoveSegment(seg, NO_FLAGS, &err));
    close_sd(sd);
    printf("SMOKE OK node=%u\n", node);
    return 0;
}

static unsigned int arg_u(int argc, char **argv, int i)
{
    if (i >= argc) {
        fprintf(stderr, "t_kill %s: missing argument %d\n", argv[1], i - 1);
        exit(2);
    }
    return (unsigned int)strtoul(argv[i], NULL, 0);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: t_kill victim|observer OBS_SEG VICTIM_SEG\n"
                        "       t_kill term-owner|term-connector SEG\n"
                        "       t_kill smoke\n");
        return 2;
    }
    check_role = argv[1];
    /* A watchdog: no role runs for more than 5 minutes. */
    alarm(300);
    if (strcmp(argv[1], "victim") == 0)
        return victim(arg_u(argc, argv, 2), arg_u(argc, argv, 3));
    if (strcmp(argv[1], "observer") == 0)
        return observer(arg_u(argc, argv, 2), arg_u(argc, argv, 3));
    if (strcmp(argv[1], "term-owner") == 0)
        return term_owner(arg_u(argc, argv, 2));
    if (strcmp(argv[1], "term-connector") == 0)
        return term_connector(arg_u(argc, argv, 2));
    if (strcmp(argv[1], "smoke") == 0)
        return smoke();
    fprintf(stderr, "t_kill: unknown role %s\n", argv[1]);
    return 2;
}
