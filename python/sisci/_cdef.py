"""The C declarations of libsisci that the binding uses, for cffi.

TYPES are the types of ``sisci_types.h``, ``sisci_error.h`` and
``dis/dis_types.h``; FUNCTIONS are the prototypes of ``sisci_api.h``, copied
as the headers write them.  ``python/tests/test_cdef.py`` compiles FUNCTIONS
after ``#include <sisci_api.h>`` with ``-Werror``, so a prototype that differs
from the header's fails the tests.
"""

TYPES = r"""
typedef struct sci_desc                *sci_desc_t;
typedef struct sci_local_segment       *sci_local_segment_t;
typedef struct sci_remote_segment      *sci_remote_segment_t;
typedef struct sci_map                 *sci_map_t;
typedef struct sci_sequence            *sci_sequence_t;
typedef struct sci_dma_queue           *sci_dma_queue_t;
typedef struct sci_remote_interrupt    *sci_remote_interrupt_t;
typedef struct sci_local_interrupt     *sci_local_interrupt_t;
typedef struct sci_block_transfer      *sci_block_transfer_t;
typedef struct sci_local_data_interrupt  *sci_local_data_interrupt_t;
typedef struct sci_remote_data_interrupt *sci_remote_data_interrupt_t;
typedef struct sci_dma_channel          *sci_dma_channel_t;
typedef unsigned int sci_dma_type_t;
typedef unsigned int sci_ioaddr_t;

typedef struct {
    unsigned short nodeId;
    unsigned short offsHi;
    unsigned int   offsLo;
} sci_address_t;

typedef enum {
    SCI_ERR_OK                    = 0x000,
    SCI_ERR_BUSY                  = 0x40000900,
    SCI_ERR_FLAG_NOT_IMPLEMENTED  = 0x40000901,
    SCI_ERR_ILLEGAL_FLAG          = 0x40000902,
    SCI_ERR_NOSPC                 = 0x40000904,
    SCI_ERR_API_NOSPC             = 0x40000905,
    SCI_ERR_HW_NOSPC              = 0x40000906,
    SCI_ERR_NOT_IMPLEMENTED       = 0x40000907,
    SCI_ERR_ILLEGAL_ADAPTERNO     = 0x40000908,
    SCI_ERR_NO_SUCH_ADAPTERNO     = 0x40000909,
    SCI_ERR_TIMEOUT               = 0x4000090A,
    SCI_ERR_OUT_OF_RANGE          = 0x4000090B,
    SCI_ERR_NO_SUCH_SEGMENT       = 0x4000090C,
    SCI_ERR_ILLEGAL_NODEID        = 0x4000090D,
    SCI_ERR_CONNECTION_REFUSED    = 0x4000090E,
    SCI_ERR_SEGMENT_NOT_CONNECTED = 0x4000090F,
    SCI_ERR_SIZE_ALIGNMENT        = 0x40000910,
    SCI_ERR_OFFSET_ALIGNMENT      = 0x40000911,
    SCI_ERR_ILLEGAL_PARAMETER     = 0x40000912,
    SCI_ERR_MAX_ENTRIES           = 0x40000913,
    SCI_ERR_SEGMENT_NOT_PREPARED  = 0x40000914,
    SCI_ERR_ILLEGAL_ADDRESS       = 0x40000915,
    SCI_ERR_ILLEGAL_OPERATION     = 0x40000916,
    SCI_ERR_ILLEGAL_QUERY         = 0x40000917,
    SCI_ERR_SEGMENTID_USED        = 0x40000918,
    SCI_ERR_SYSTEM                = 0x40000919,
    SCI_ERR_CANCELLED             = 0x4000091A,
    SCI_ERR_NOT_CONNECTED         = 0x4000091B,
    SCI_ERR_NOT_AVAILABLE         = 0x4000091C,
    SCI_ERR_INCONSISTENT_VERSIONS = 0x4000091D,
    SCI_ERR_COND_INT_RACE_PROBLEM = 0x4000091E,
    SCI_ERR_OVERFLOW              = 0x4000091F,
    SCI_ERR_NOT_INITIALIZED       = 0x40000920,
    SCI_ERR_ACCESS                = 0x40000921,
    SCI_ERR_NO_SUCH_NODEID        = 0x40000A00,
    SCI_ERR_NODE_NOT_RESPONDING   = 0x40000A02,
    SCI_ERR_NO_REMOTE_LINK_ACCESS = 0x40000A04,
    SCI_ERR_NO_LINK_ACCESS        = 0x40000A05,
    SCI_ERR_TRANSFER_FAILED       = 0x40000A06
} sci_error_t;

typedef enum {
    SCI_CB_CONNECT         = 1,
    SCI_CB_DISCONNECT      = 2,
    SCI_CB_NOT_OPERATIONAL = 3,
    SCI_CB_OPERATIONAL     = 4,
    SCI_CB_LOST            = 5
} sci_segment_cb_reason_t;

typedef enum {
    SCI_DMAQUEUE_IDLE    = 0,
    SCI_DMAQUEUE_GATHER  = 1,
    SCI_DMAQUEUE_POSTED  = 2,
    SCI_DMAQUEUE_DONE    = 3,
    SCI_DMAQUEUE_ABORTED = 4,
    SCI_DMAQUEUE_ERROR   = 5
} sci_dma_queue_state_t;

typedef enum {
    SCI_SEQ_OK            = 0,
    SCI_SEQ_RETRIABLE     = 1,
    SCI_SEQ_NOT_RETRIABLE = 2,
    SCI_SEQ_PENDING       = 3
} sci_sequence_status_t;

typedef enum {
    SCI_CALLBACK_CANCEL   = 1,
    SCI_CALLBACK_CONTINUE = 2
} sci_callback_action_t;

typedef sci_callback_action_t (*sci_cb_local_segment_t)(void *arg,
        sci_local_segment_t segment, sci_segment_cb_reason_t reason,
        unsigned int nodeId, unsigned int localAdapterNo, sci_error_t error);
typedef sci_callback_action_t (*sci_cb_remote_segment_t)(void *arg,
        sci_remote_segment_t segment, sci_segment_cb_reason_t reason,
        sci_error_t status);
typedef sci_callback_action_t (*sci_cb_dma_t)(void *arg,
        sci_dma_queue_t queue, sci_error_t status);
typedef sci_callback_action_t (*sci_cb_interrupt_t)(void *arg,
        sci_local_interrupt_t interrupt, sci_error_t status);
typedef sci_callback_action_t (*sci_cb_data_interrupt_t)(void *arg,
        sci_local_data_interrupt_t interrupt, void *data,
        unsigned int length, sci_error_t status);

typedef struct {
    size_t       size;
    size_t       local_offset;
    size_t       remote_offset;
    unsigned int flags;
} dis_dma_vec_t;

typedef struct {
    char         *str;
    unsigned int  length;
} sci_query_string_t;

typedef struct {
    unsigned int  localAdapterNo;
    unsigned int  portNo;
    unsigned int  subcommand;
    void         *data;
} sci_query_adapter_t;

typedef struct {
    unsigned int  subcommand;
    void         *data;
} sci_query_system_t;

typedef struct {
    sci_local_segment_t segment;
    unsigned int        subcommand;
    union { sci_ioaddr_t ioaddr; uint64_t ioaddr64; } data;
} sci_query_local_segment_t;

typedef struct {
    sci_remote_segment_t segment;
    unsigned int         subcommand;
    union { sci_ioaddr_t ioaddr; uint64_t ioaddr64; } data;
} sci_query_remote_segment_t;

typedef struct {
    sci_map_t     map;
    unsigned int  subcommand;
    unsigned int  data;
} sci_query_map_t;
"""

FUNCTIONS = r"""
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
void SCIShareSegment(sci_local_segment_t segment, unsigned int flags, sci_error_t *error);
void SCIAttachLocalSegment(sci_desc_t sd, sci_local_segment_t *segment,
                           unsigned int segmentId, size_t *size,
                           sci_cb_local_segment_t callback, void *callbackArg,
                           unsigned int flags, sci_error_t *error);

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

void *SCIMapLocalSegment(sci_local_segment_t segment, sci_map_t *map,
                         size_t offset, size_t size, void *addr,
                         unsigned int flags, sci_error_t *error);
volatile void *SCIMapRemoteSegment(sci_remote_segment_t segment, sci_map_t *map,
                                   size_t offset, size_t size, void *addr,
                                   unsigned int flags, sci_error_t *error);
void SCIUnmapSegment(sci_map_t map, unsigned int flags, sci_error_t *error);
volatile void *SCIGetMapPointer(sci_map_t map);

void SCIMemCpy(sci_sequence_t sequence, void *memAddr, sci_map_t remoteMap,
               size_t remoteOffset, size_t size, unsigned int flags,
               sci_error_t *error);
void SCIMemWrite(void *memAddr, volatile void *remoteAddr, size_t size,
                 unsigned int flags, sci_error_t *error);
void SCIFlush(sci_sequence_t sequence, unsigned int flags);
void SCIStoreBarrier(sci_sequence_t sequence, unsigned int flags);
void SCICacheSync(sci_map_t map, void *addr, size_t length, unsigned int flags,
                  sci_error_t *error);
void SCICreateMapSequence(sci_map_t map, sci_sequence_t *sequence,
                          unsigned int flags, sci_error_t *error);
void SCIRemoveSequence(sci_sequence_t sequence, unsigned int flags, sci_error_t *error);
sci_sequence_status_t SCIStartSequence(sci_sequence_t sequence, unsigned int flags,
                                       sci_error_t *error);
sci_sequence_status_t SCICheckSequence(sci_sequence_t sequence, unsigned int flags,
                                       sci_error_t *error);
void SetSciMemCopyFunction(unsigned int func);
unsigned int GetSciMemCopyFunction(void);

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
"""
