/*
 * t_nodegone.c - a program blocked in a SISCI call while its node goes away.
 *
 *   t_nodegone open      SCIOpen only; prints "OPEN <error>" (used by the
 *                        access tests: exit 0 when it opened, 3 when not)
 *   t_nodegone offer ID  make segment ID available and hold it
 *   t_nodegone take ID   connect to segment ID once: "TAKE <error>"
 *   t_nodegone hog [N]   create interrupts until refused (at most N), print
 *                        "HOG created=<n> err=<first error>", then hold them
 *   t_nodegone MODE      block in one call with no timeout, print READY
 *                        first; the test then stops or kills vscid
 *
 * MODE is one of
 *   intr     SCIWaitForInterrupt
 *   dintr    SCIWaitForDataInterrupt
 *   intrcb   an interrupt callback (the program waits for it to be called)
 *   lsegev   SCIWaitForLocalSegmentEvent
 *   rsegev   SCIWaitForRemoteSegmentEvent (a connection to our own segment)
 *   connect  SCIConnectSegment to a segment that never appears
 *
 * After the call returns it prints "RETURNED <error> ms=<n>", then makes a
 * later call ("LATER <error> ms=<n>"), opens a new descriptor ("REOPEN
 * <error>") and checks that a segment it mapped before still reads back
 * ("MAPPED OK").  The test asserts the errors and how soon the program ended.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sisci_api.h"
#include "common/check.h"

#define SEG_SIZE 65536

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static volatile int cb_called;
static volatile sci_error_t cb_status;

static sci_callback_action_t intr_cb(void *arg, sci_local_interrupt_t li, sci_error_t status)
{
    (void)arg;
    (void)li;
    cb_status = status;
    cb_called = 1;
    return SCI_CALLBACK_CANCEL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "intr";
    sci_desc_t sd;
    sci_error_t err;
    setvbuf(stdout, NULL, _IONBF, 0);

    SCIInitialize(NO_FLAGS, &err);
    SCIOpen(&sd, NO_FLAGS, &err);
    printf("OPEN %s\n", err_name(err));
    if (err != SCI_ERR_OK)
        return 3;
    if (strcmp(mode, "open") == 0) {
        SCIClose(sd, NO_FLAGS, &err);
        return 0;
    }
    if (strcmp(mode, "offer") == 0 || strcmp(mode, "take") == 0) {
        /* offer ID: make segment ID available and hold it; take ID: connect
         * to it once and print "TAKE <error>" (the access tests). */
        unsigned int id = argc > 2 ? (unsigned int)strtoul(argv[2], NULL, 0) : 1, node = 0;
        SCIGetLocalNodeId(0, &node, NO_FLAGS, &err);
        CHECK_ERR(err, SCI_ERR_OK);
        if (mode[0] == 'o') {
            sci_local_segment_t s;
            EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &s, id, 4096, NO_CALLBACK, NO_ARG, NO_FLAGS, &err));
            EXPECT(SCI_ERR_OK, SCIPrepareSegment(s, 0, NO_FLAGS, &err));
            EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(s, 0, NO_FLAGS, &err));
            printf("READY\n");
            for (;;)
                pause();
        }
        sci_remote_segment_t r;
        SCIConnectSegment(sd, &r, node, id, 0, NO_CALLBACK, NO_ARG, 0, NO_FLAGS, &err);
        printf("TAKE %s\n", err_name(err));
        return 0;
    }
    if (strcmp(mode, "hog") == 0) {
        /* Create interrupts until the node refuses (or N are made), try 10
         * more times after the first refusal (the node logs a limit once),
         * report, and hold them until killed. */
        int n = argc > 2 ? atoi(argv[2]) : 100000, made = 0, refused = 0;
        sci_error_t first = SCI_ERR_OK;
        for (int i = 0; i < n && refused < 10; i++) {
            sci_local_interrupt_t h;
            unsigned int no = 0;
            SCICreateInterrupt(sd, &h, 0, &no, NULL, NULL, NO_FLAGS, &err);
            if (err == SCI_ERR_OK) {
                made++;
            } else {
                if (refused++ == 0)
                    first = err;
            }
        }
        printf("HOG created=%d err=%s\n", made, err_name(first));
        printf("READY\n");
        for (;;)
            pause();
    }

    unsigned int node_id = 0;
    SCIGetLocalNodeId(0, &node_id, NO_FLAGS, &err);
    CHECK_ERR(err, SCI_ERR_OK);
    unsigned int seg_id = 0x6e00000u | ((unsigned)getpid() & 0xfffff);

    /* A mapped segment whose bytes must stay readable after the node is gone. */
    sci_local_segment_t seg;
    sci_map_t map;
    EXPECT(SCI_ERR_OK, SCICreateSegment(sd, &seg, seg_id, SEG_SIZE, NO_CALLBACK, NO_ARG, NO_FLAGS, &err));
    EXPECT(SCI_ERR_OK, SCIPrepareSegment(seg, 0, NO_FLAGS, &err));
    unsigned char *mem = SCIMapLocalSegment(seg, &map, 0, SEG_SIZE, NULL, NO_FLAGS, &err);
    CHECK_ERR(err, SCI_ERR_OK);
    memset(mem, 0xa5, SEG_SIZE);

    sci_local_interrupt_t li;
    sci_local_data_interrupt_t ldi;
    sci_remote_segment_t rs;
    unsigned int no = 0;
    double t0;

    if (strcmp(mode, "intr") == 0) {
        EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, NO_FLAGS, &err));
        printf("READY\n");
        t0 = now_ms();
        SCIWaitForInterrupt(li, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
    } else if (strcmp(mode, "dintr") == 0) {
        char buf[128];
        unsigned int len = sizeof buf;
        EXPECT(SCI_ERR_OK, SCICreateDataInterrupt(sd, &ldi, 0, &no, NULL, NULL, NO_FLAGS, &err));
        printf("READY\n");
        t0 = now_ms();
        SCIWaitForDataInterrupt(ldi, buf, &len, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
    } else if (strcmp(mode, "intrcb") == 0) {
        EXPECT(SCI_ERR_OK, SCICreateInterrupt(sd, &li, 0, &no, intr_cb, NULL, SCI_FLAG_USE_CALLBACK, &err));
        printf("READY\n");
        t0 = now_ms();
        while (!cb_called)
            usleep(1000);
        err = cb_status;
    } else if (strcmp(mode, "lsegev") == 0) {
        unsigned int src = 0, adapter = 0;
        EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
        printf("READY\n");
        t0 = now_ms();
        sci_segment_cb_reason_t r = SCIWaitForLocalSegmentEvent(seg, &src, &adapter, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
        printf("REASON %d\n", (int)r);
    } else if (strcmp(mode, "rsegev") == 0) {
        sci_error_t status = SCI_ERR_OK;
        EXPECT(SCI_ERR_OK, SCISetSegmentAvailable(seg, 0, NO_FLAGS, &err));
        EXPECT(SCI_ERR_OK, SCIConnectSegment(sd, &rs, node_id, seg_id, 0, NO_CALLBACK, NO_ARG, 5000, NO_FLAGS, &err));
        /* The connect itself raises one CONNECT event on our local segment;
         * the remote segment's own queue starts empty. */
        printf("READY\n");
        t0 = now_ms();
        sci_segment_cb_reason_t r = SCIWaitForRemoteSegmentEvent(rs, &status, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
        printf("REASON %d STATUS %s\n", (int)r, err_name(status));
    } else if (strcmp(mode, "connect") == 0) {
        printf("READY\n");
        t0 = now_ms();
        SCIConnectSegment(sd, &rs, node_id, seg_id + 1, 0, NO_CALLBACK, NO_ARG, SCI_INFINITE_TIMEOUT, NO_FLAGS, &err);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("RETURNED %s ms=%.0f\n", err_name(err), now_ms() - t0);

    /* Later calls fail at once. */
    t0 = now_ms();
    sci_local_interrupt_t li2;
    SCICreateInterrupt(sd, &li2, 0, &no, NULL, NULL, NO_FLAGS, &err);
    printf("LATER %s ms=%.0f\n", err_name(err), now_ms() - t0);

    sci_desc_t sd2;
    SCIOpen(&sd2, NO_FLAGS, &err);
    printf("REOPEN %s\n", err_name(err));

    for (size_t i = 0; i < SEG_SIZE; i++) {
        if (mem[i] != 0xa5) {
            printf("MAPPED BAD at %zu: %02x\n", i, mem[i]);
            return 1;
        }
    }
    printf("MAPPED OK\n");
    return 0;
}
