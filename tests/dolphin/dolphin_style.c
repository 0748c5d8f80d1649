/*
 * dolphin_style.c - a SISCI program written the way programs for Dolphin's
 * installation are, built the way their build files build them:
 *
 *   cc -std=c99 -Wall -Wextra -pedantic -Wcast-qual -Wconversion -Wshadow \
 *      -Wredundant-decls -Wstrict-prototypes -Werror \
 *      -I/opt/DIS/include -I/opt/DIS/include/dis dolphin_style.c \
 *      -L/opt/DIS/lib64 -lsisci
 *
 * It defines its own NO_FLAGS-style helpers (Dolphin's headers leave them to
 * the program), marks its DMA callback's parameters with Dolphin's IN
 * annotation, includes <dis_types.h> through -I.../include/dis, and keeps
 * the map of a local segment in a plain `void *` (Dolphin declares
 * SCIMapLocalSegment so).  dolphin_style.cpp builds the same source as C++.
 *
 * Against one node: two local segments, one filled through its local map,
 * copied into the other by DMA (completion by callback), a store through a
 * remote map seen in the target's local map.  Prints "DOLPHIN STYLE OK" and
 * exits 0, or names the failed call and exits 1.  Used by
 * crates/vsci-systest/tests/dolphin_layout.rs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sisci_error.h>
#include <sisci_types.h>
#include <sisci_api.h>
#include <dis_types.h>

/* The program's own helpers, as Dolphin's sample programs have them. */
#define NO_FLAGS    0
#define NO_OFFSET   0
#define NO_CALLBACK 0
#define NO_ARG      NULL

#define ADAPTER_NO        0
#define TARGET_SEGMENT_ID 0xd15au
#define SOURCE_SEGMENT_ID 0xd15bu
#define SEGMENT_SIZE      ((size_t)65536)

static sci_error_t dma_status = SCI_ERR_NOT_INITIALIZED;

/* Copied from Dolphin's sci_cb_dma_t, annotations included. */
static sci_callback_action_t dma_done(void IN *arg, sci_dma_queue_t IN queue, sci_error_t IN status)
{
    int *calls = (int *)arg;

    (void)queue;
    *calls += 1;
    dma_status = status;
    return SCI_CALLBACK_CONTINUE;
}

static void check(sci_error_t error, const char *call)
{
    if (error != SCI_ERR_OK) {
        fprintf(stderr, "dolphin_style: %s failed: %s (0x%x)\n", call, SCIGetErrorString(error),
                (unsigned int)error);
        exit(1);
    }
}

static void fail(const char *what)
{
    fprintf(stderr, "dolphin_style: %s\n", what);
    exit(1);
}

/* Create, prepare and offer one segment; return its local map. */
static void *local_segment(sci_desc_t sd, unsigned int id, sci_local_segment_t *segment, sci_map_t *map)
{
    sci_error_t error;
    void *address;

    SCICreateSegment(sd, segment, id, SEGMENT_SIZE, NO_CALLBACK, NO_ARG, NO_FLAGS, &error);
    check(error, "SCICreateSegment");
    SCIPrepareSegment(*segment, ADAPTER_NO, NO_FLAGS, &error);
    check(error, "SCIPrepareSegment");
    SCISetSegmentAvailable(*segment, ADAPTER_NO, NO_FLAGS, &error);
    check(error, "SCISetSegmentAvailable");
    address = SCIMapLocalSegment(*segment, map, NO_OFFSET, SEGMENT_SIZE, NULL, NO_FLAGS, &error);
    check(error, "SCIMapLocalSegment");
    return address;
}

static void remove_segment(sci_local_segment_t segment, sci_map_t map)
{
    sci_error_t error;

    SCIUnmapSegment(map, NO_FLAGS, &error);
    check(error, "SCIUnmapSegment (local)");
    SCISetSegmentUnavailable(segment, ADAPTER_NO, NO_FLAGS, &error);
    check(error, "SCISetSegmentUnavailable");
    SCIRemoveSegment(segment, NO_FLAGS, &error);
    check(error, "SCIRemoveSegment");
}

int main(void)
{
    sci_error_t error;
    sci_desc_t sd;
    dis_nodeId_list_t local_nodes = { 0 };
    sci_local_segment_t target, source;
    sci_map_t target_map, source_map, remote_map;
    sci_remote_segment_t remote;
    sci_sequence_t sequence;
    sci_dma_queue_t queue;
    void *target_address, *source_address;
    volatile void *remote_address;
    volatile unsigned char *remote_bytes;
    unsigned char *source_bytes, *target_bytes;
    int dma_calls = 0;
    size_t i;

    SCIInitialize(NO_FLAGS, &error);
    check(error, "SCIInitialize");
    SCIOpen(&sd, NO_FLAGS, &error);
    check(error, "SCIOpen");
    SCIGetLocalNodeId(ADAPTER_NO, &local_nodes[ADAPTER_NO], NO_FLAGS, &error);
    check(error, "SCIGetLocalNodeId");

    target_address = local_segment(sd, TARGET_SEGMENT_ID, &target, &target_map);
    source_address = local_segment(sd, SOURCE_SEGMENT_ID, &source, &source_map);
    memset(target_address, 0, SEGMENT_SIZE);
    source_bytes = (unsigned char *)source_address;
    for (i = 0; i < SEGMENT_SIZE; i++)
        source_bytes[i] = (unsigned char)(i * 7u + 1u);

    SCIConnectSegment(sd, &remote, local_nodes[ADAPTER_NO], TARGET_SEGMENT_ID, ADAPTER_NO, NO_CALLBACK,
                      NO_ARG, SCI_INFINITE_TIMEOUT, NO_FLAGS, &error);
    check(error, "SCIConnectSegment");

    /* The source segment into the target, through the remote segment. */
    SCICreateDMAQueue(sd, &queue, ADAPTER_NO, 1, NO_FLAGS, &error);
    check(error, "SCICreateDMAQueue");
    SCIStartDmaTransfer(queue, source, remote, NO_OFFSET, SEGMENT_SIZE, NO_OFFSET, dma_done, &dma_calls,
                        SCI_FLAG_DMA_WAIT | SCI_FLAG_USE_CALLBACK, &error);
    check(error, "SCIStartDmaTransfer");
    if (dma_calls != 1)
        fail("the DMA callback did not run once");
    check(dma_status, "the DMA transfer (callback status)");
    if (memcmp(target_address, source_address, SEGMENT_SIZE) != 0)
        fail("the target segment does not hold what the DMA transfer wrote");
    SCIRemoveDMAQueue(queue, NO_FLAGS, &error);
    check(error, "SCIRemoveDMAQueue");

    /* A store through the remote map reaches the target's local map. */
    remote_address = SCIMapRemoteSegment(remote, &remote_map, NO_OFFSET, SEGMENT_SIZE, NULL, NO_FLAGS, &error);
    check(error, "SCIMapRemoteSegment");
    SCICreateMapSequence(remote_map, &sequence, NO_FLAGS, &error);
    check(error, "SCICreateMapSequence");
    remote_bytes = (volatile unsigned char *)remote_address;
    remote_bytes[100] = 0xa5;
    SCIStoreBarrier(sequence, NO_FLAGS);
    target_bytes = (unsigned char *)target_address;
    if (target_bytes[100] != 0xa5 || remote_bytes[101] != source_bytes[101])
        fail("the remote map and the local map disagree");
    SCIRemoveSequence(sequence, NO_FLAGS, &error);
    check(error, "SCIRemoveSequence");
    SCIUnmapSegment(remote_map, NO_FLAGS, &error);
    check(error, "SCIUnmapSegment (remote)");
    SCIDisconnectSegment(remote, NO_FLAGS, &error);
    check(error, "SCIDisconnectSegment");

    remove_segment(source, source_map);
    remove_segment(target, target_map);
    SCIClose(sd, NO_FLAGS, &error);
    check(error, "SCIClose");
    SCITerminate();

    printf("DOLPHIN STYLE OK node %u, %lu bytes by DMA, DIS_MAX_NSCIS %d\n", local_nodes[ADAPTER_NO],
           (unsigned long)SEGMENT_SIZE, DIS_MAX_NSCIS);
    return 0;
}
