/*
 * sisci_api.h - the SISCI shared-memory API, as implemented by vsci.
 *
 * Function names and signatures follow Dolphin's SISCI so that existing
 * programs build unchanged:  cc prog.c $(pkg-config --cflags --libs sisci)
 *
 * Every call reports through its trailing `sci_error_t *error`, except
 * SCIFlush, SCIStoreBarrier and SCIDMAQueueState, which have none, and the
 * getters that return a value directly.  See docs/api.md for what vsci
 * does with each call and flag.
 */
#ifndef SISCI_API_H
#define SISCI_API_H

#include "sisci_types.h"
#include "sisci_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SISCI_API_VERSION_MAJOR 1
#define SISCI_API_VERSION_MINOR 0

/* ---- Library, descriptors, nodes ---------------------------------------- */
void SCIInitialize(unsigned int flags, sci_error_t *error);
void SCITerminate(void);
void SCIOpen(sci_desc_t *sd, unsigned int flags, sci_error_t *error);
void SCIClose(sci_desc_t sd, unsigned int flags, sci_error_t *error);
void SCIQuery(unsigned int command, void *data, unsigned int flags, sci_error_t *error);
const char *SCIGetErrorString(sci_error_t error);
void SCIGetLocalNodeId(unsigned int adapterNo, unsigned int *nodeId,
                       unsigned int flags, sci_error_t *error);
int  SCIProbeNode(sci_desc_t sd, unsigned int localAdapterNo, unsigned int nodeId,
                  unsigned int flags, sci_error_t *error);

/* ---- Local segments ------------------------------------------------------ */
void SCICreateSegment(sci_desc_t sd, sci_local_segment_t *segment,
                      unsigned int segmentId, size_t size,
                      sci_cb_local_segment_t callback, void *callbackArg,
                      unsigned int flags, sci_error_t *error);
void SCIPrepareSegment(sci_local_segment_t segment, unsigned int localAdapterNo,
                       unsigned int flags, sci_error_t *error);
void SCISetSegmentAvailable(sci_local_segment_t segment, unsigned int localAdapterNo,
                            unsigned int flags, sci_error_t *error);
void SCISetSegmentUnavailable(sci_local_segment_t segment, unsigned int localAdapterNo,
                              unsigned int flags, sci_error_t *error);
void SCIRemoveSegment(sci_local_segment_t segment, unsigned int flags, sci_error_t *error);
size_t SCIGetLocalSegmentSize(sci_local_segment_t segment);
unsigned int SCIGetLocalSegmentId(sci_local_segment_t segment);
sci_segment_cb_reason_t SCIWaitForLocalSegmentEvent(sci_local_segment_t segment,
                      unsigned int *sourcenodeId, unsigned int *localAdapterNo,
                      unsigned int timeout, unsigned int flags, sci_error_t *error);
void SCIRegisterSegmentMemory(void *address, size_t size, sci_local_segment_t segment,
                              unsigned int flags, sci_error_t *error);
/* Sharing one local segment between programs of the same node: the creator
 * calls SCIShareSegment; others get their own handle with
 * SCIAttachLocalSegment (same memory), and SCIRemoveSegment on that handle
 * detaches.  The segment lives until its last handle is removed. */
void SCIShareSegment(sci_local_segment_t segment, unsigned int flags, sci_error_t *error);
void SCIAttachLocalSegment(sci_desc_t sd, sci_local_segment_t *segment,
                           unsigned int segmentId, size_t *size,
                           sci_cb_local_segment_t callback, void *callbackArg,
                           unsigned int flags, sci_error_t *error);

/* ---- Remote segments ----------------------------------------------------- */
void SCIConnectSegment(sci_desc_t sd, sci_remote_segment_t *segment,
                       unsigned int nodeId, unsigned int segmentId,
                       unsigned int localAdapterNo,
                       sci_cb_remote_segment_t callback, void *callbackArg,
                       unsigned int timeout, unsigned int flags, sci_error_t *error);
void SCIDisconnectSegment(sci_remote_segment_t segment, unsigned int flags,
                          sci_error_t *error);
size_t SCIGetRemoteSegmentSize(sci_remote_segment_t segment);
unsigned int SCIGetRemoteSegmentId(sci_remote_segment_t segment);
unsigned int SCIGetRemoteSegmentNodeId(sci_remote_segment_t segment);
sci_segment_cb_reason_t SCIWaitForRemoteSegmentEvent(sci_remote_segment_t segment,
                      sci_error_t *status, unsigned int timeout,
                      unsigned int flags, sci_error_t *error);

/* ---- Mapping -------------------------------------------------------------
 * As Dolphin declares them: a local segment is ordinary memory (void *), a
 * remote one is a device window whose stores the compiler must not merge or
 * drop (volatile void *). */
void *SCIMapLocalSegment(sci_local_segment_t segment, sci_map_t *map,
                         size_t offset, size_t size, void *addr,
                         unsigned int flags, sci_error_t *error);
volatile void *SCIMapRemoteSegment(sci_remote_segment_t segment, sci_map_t *map,
                                   size_t offset, size_t size, void *addr,
                                   unsigned int flags, sci_error_t *error);
void SCIUnmapSegment(sci_map_t map, unsigned int flags, sci_error_t *error);

/* ---- PIO, ordering, error checking --------------------------------------- */
void SCIMemCpy(sci_sequence_t sequence, void *memAddr, sci_map_t remoteMap,
               size_t remoteOffset, size_t size, unsigned int flags,
               sci_error_t *error);
void SCIMemWrite(void *memAddr, volatile void *remoteAddr, size_t size,
                 unsigned int flags, sci_error_t *error);
void SCIFlush(sci_sequence_t sequence, unsigned int flags);
void SCIStoreBarrier(sci_sequence_t sequence, unsigned int flags);
/* map may be NULL; flags: SCI_FLAG_CACHE_FLUSH and/or SCI_FLAG_CACHE_INVALIDATE. */
void SCICacheSync(sci_map_t map, void *addr, size_t length, unsigned int flags,
                  sci_error_t *error);
void SCICreateMapSequence(sci_map_t map, sci_sequence_t *sequence,
                          unsigned int flags, sci_error_t *error);
void SCIRemoveSequence(sci_sequence_t sequence, unsigned int flags, sci_error_t *error);
sci_sequence_status_t SCIStartSequence(sci_sequence_t sequence, unsigned int flags,
                                       sci_error_t *error);
sci_sequence_status_t SCICheckSequence(sci_sequence_t sequence, unsigned int flags,
                                       sci_error_t *error);

/* ---- Interrupts ---------------------------------------------------------- */
void SCICreateInterrupt(sci_desc_t sd, sci_local_interrupt_t *interrupt,
                        unsigned int localAdapterNo, unsigned int *interruptNo,
                        sci_cb_interrupt_t callback, void *callbackArg,
                        unsigned int flags, sci_error_t *error);
void SCIRemoveInterrupt(sci_local_interrupt_t interrupt, unsigned int flags,
                        sci_error_t *error);
void SCIWaitForInterrupt(sci_local_interrupt_t interrupt, unsigned int timeout,
                         unsigned int flags, sci_error_t *error);
void SCIConnectInterrupt(sci_desc_t sd, sci_remote_interrupt_t *interrupt,
                         unsigned int nodeId, unsigned int localAdapterNo,
                         unsigned int interruptNo, unsigned int timeout,
                         unsigned int flags, sci_error_t *error);
void SCIDisconnectInterrupt(sci_remote_interrupt_t interrupt, unsigned int flags,
                            sci_error_t *error);
void SCITriggerInterrupt(sci_remote_interrupt_t interrupt, unsigned int flags,
                         sci_error_t *error);

/* Conditional interrupts (SCI_FLAG_CONDITIONAL_INTERRUPT_MAP): declared so
 * programs with such a path build; vsci answers SCI_ERR_NOT_IMPLEMENTED. */
void SCIRegisterInterruptFlag(unsigned int localAdapterNo, sci_local_interrupt_t *interrupt,
                              sci_local_segment_t segment, unsigned int offset,
                              sci_cb_interrupt_t callback, void *callbackArg,
                              unsigned int flags, sci_error_t *error);
void SCIEnableConditionalInterrupt(sci_local_interrupt_t interrupt, unsigned int flags,
                                   sci_error_t *error);
void SCIDisableConditionalInterrupt(sci_local_interrupt_t interrupt, unsigned int flags,
                                    sci_error_t *error);
void SCIGetConditionalInterruptTrigCounter(sci_local_interrupt_t interrupt,
                                           unsigned int *interruptTrigCounter,
                                           unsigned int flags, sci_error_t *error);

/* ---- Data interrupts ----------------------------------------------------- */
void SCICreateDataInterrupt(sci_desc_t sd, sci_local_data_interrupt_t *interrupt,
                            unsigned int localAdapterNo, unsigned int *interruptNo,
                            sci_cb_data_interrupt_t callback, void *callbackArg,
                            unsigned int flags, sci_error_t *error);
void SCIRemoveDataInterrupt(sci_local_data_interrupt_t interrupt, unsigned int flags,
                            sci_error_t *error);
void SCIWaitForDataInterrupt(sci_local_data_interrupt_t interrupt, void *data,
                             unsigned int *length, unsigned int timeout,
                             unsigned int flags, sci_error_t *error);
void SCIConnectDataInterrupt(sci_desc_t sd, sci_remote_data_interrupt_t *interrupt,
                             unsigned int nodeId, unsigned int localAdapterNo,
                             unsigned int interruptNo, unsigned int timeout,
                             unsigned int flags, sci_error_t *error);
void SCIDisconnectDataInterrupt(sci_remote_data_interrupt_t interrupt,
                                unsigned int flags, sci_error_t *error);
void SCITriggerDataInterrupt(sci_remote_data_interrupt_t interrupt, void *data,
                             unsigned int length, unsigned int flags,
                             sci_error_t *error);

/* ---- DMA ----------------------------------------------------------------- */
void SCICreateDMAQueue(sci_desc_t sd, sci_dma_queue_t *dq, unsigned int localAdapterNo,
                       unsigned int maxEntries, unsigned int flags, sci_error_t *error);
void SCIRemoveDMAQueue(sci_dma_queue_t dq, unsigned int flags, sci_error_t *error);
void SCIAbortDMAQueue(sci_dma_queue_t dq, unsigned int flags, sci_error_t *error);
sci_dma_queue_state_t SCIDMAQueueState(sci_dma_queue_t dq);
sci_dma_queue_state_t SCIWaitForDMAQueue(sci_dma_queue_t dq, unsigned int timeout,
                                         unsigned int flags, sci_error_t *error);
void SCIStartDmaTransfer(sci_dma_queue_t dq, sci_local_segment_t localSegment,
                         sci_remote_segment_t remoteSegment, size_t localOffset,
                         size_t size, size_t remoteOffset, sci_cb_dma_t callback,
                         void *callbackArg, unsigned int flags, sci_error_t *error);
void SCIStartDmaTransferMem(sci_dma_queue_t dq, void *localAddress,
                            sci_remote_segment_t remoteSegment, size_t size,
                            size_t remoteOffset, sci_cb_dma_t callback,
                            void *callbackArg, unsigned int flags, sci_error_t *error);
void SCIStartDmaTransferVec(sci_dma_queue_t dq, sci_local_segment_t localSegment,
                            sci_remote_segment_t remoteSegment, size_t vecLength,
                            dis_dma_vec_t *disDmaVec, sci_cb_dma_t callback,
                            void *callbackArg, unsigned int flags, sci_error_t *error);

/* ---- The DMA queue API that preceded SCIStartDmaTransfer -----------------
 * Gather transfers (state SCI_DMAQUEUE_GATHER, at most maxEntries), post
 * them (POSTED, then DONE / ABORTED / ERROR), reset to IDLE.  Enqueue flags:
 * SCI_FLAG_DMA_READ, SCI_FLAG_DMA_POST, SCI_FLAG_DMA_WAIT, SCI_FLAG_DMA_RESET;
 * it returns the queue's state after the call. */
sci_dma_queue_state_t SCIEnqueueDMATransfer(sci_dma_queue_t dq,
                                            sci_local_segment_t localSegment,
                                            sci_remote_segment_t remoteSegment,
                                            unsigned int localOffset,
                                            unsigned int remoteOffset,
                                            unsigned int size,
                                            unsigned int flags, sci_error_t *error);
void SCIPostDMAQueue(sci_dma_queue_t dq, sci_cb_dma_t callback, void *callbackArg,
                     unsigned int flags, sci_error_t *error);
void SCIResetDMAQueue(sci_dma_queue_t dq, unsigned int flags, sci_error_t *error);

/* ---- DMA channels -------------------------------------------------------- */
void SCIRequestDMAChannel(sci_desc_t sd, sci_dma_channel_t *channel,
                          unsigned int localAdapterNo, sci_dma_type_t type,
                          unsigned int channelId, unsigned int flags,
                          sci_error_t *error);
void SCIReturnDMAChannel(sci_dma_channel_t channel, sci_error_t *error);
void SCIAssignDMAChannel(sci_dma_channel_t channel, sci_dma_queue_t dq,
                         unsigned int flags, sci_error_t *error);
void SCIPrepareLocalSegmentForDMA(sci_dma_channel_t channel,
                                  sci_local_segment_t localSegment,
                                  unsigned int flags, sci_error_t *error);
void SCIUnprepareLocalSegmentForDMA(sci_dma_channel_t channel,
                                    sci_local_segment_t localSegment,
                                    unsigned int flags, sci_error_t *error);
void SCIPrepareRemoteSegmentForDMA(sci_dma_channel_t channel,
                                   sci_remote_segment_t remoteSegment,
                                   unsigned int flags, sci_error_t *error);
void SCIUnprepareRemoteSegmentForDMA(sci_dma_channel_t channel,
                                     sci_remote_segment_t remoteSegment,
                                     unsigned int flags, sci_error_t *error);

/* ---- The copy routine of SCIMemCpy / SCIMemWrite --------------------------
 * 0: memmove (default), 1: 8-byte stores, 2: non-temporal stores; any other
 * number selects 0.  Get returns the routine in use. */
void SetSciMemCopyFunction(unsigned int func);
unsigned int GetSciMemCopyFunction(void);

/* ---- Calls that need hardware a software interconnect does not have ------
 * Declared so programs with such a path build and link; each reports
 * SCI_ERR_NOT_IMPLEMENTED at run time (docs/api.md "Compatibility"). */
void SCIphDmaEnqueue(sci_dma_queue_t dmaqueue, unsigned int size,
                     sci_ioaddr_t localBusAddr, unsigned int remote_nodeid,
                     unsigned int remote_highaddr, unsigned int remote_lowaddr,
                     unsigned int flags, sci_error_t *error);
sci_dma_queue_state_t SCIphDmaStart(sci_dma_queue_t dmaqueue, sci_cb_dma_t callback,
                                    void *callbackArg, unsigned int flags,
                                    sci_error_t *error);
unsigned int SCIGetCSRRegister(sci_desc_t sd, unsigned int localAdapterNo,
                               unsigned int SCINodeId, unsigned int CSROffset,
                               unsigned int flags, sci_error_t *error);
void SCISetCSRRegister(sci_desc_t sd, unsigned int localAdapterNo,
                       unsigned int SCINodeId, unsigned int CSROffset,
                       unsigned int CSRValue, unsigned int flags, sci_error_t *error);
unsigned int SCIGetLocalCSR(sci_desc_t sd, unsigned int localAdapterNo,
                            unsigned int CSROffset, unsigned int flags,
                            sci_error_t *error);
void SCISetLocalCSR(sci_desc_t sd, unsigned int localAdapterNo,
                    unsigned int CSROffset, unsigned int CSRValue,
                    unsigned int flags, sci_error_t *error);
void SCIAttachPhysicalMemory(sci_ioaddr_t ioaddress, void *address, unsigned int busNo,
                             size_t size, sci_local_segment_t segment,
                             unsigned int flags, sci_error_t *error);
void SCIConnectSCISpace(sci_desc_t sd, unsigned int localAdapterNo,
                        sci_remote_segment_t *segment, sci_address_t address,
                        unsigned int size, unsigned int flags, sci_error_t *error);

/* ---- Map pointer --------------------------------------------------------- */
/* The address a map starts at (what SCIMapLocalSegment/SCIMapRemoteSegment
 * returned); NULL for a bad map handle. */
volatile void *SCIGetMapPointer(sci_map_t map);

#ifdef __cplusplus
}
#endif

#endif /* SISCI_API_H */
