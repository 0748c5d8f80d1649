/*
 * sisci_types.h - SISCI handle, enum, callback and flag definitions (vsci).
 *
 * Dolphin's headers declare flags as `extern const unsigned int`; vsci
 * defines them as plain integer constants with the same names and, where
 * they are publicly known, the same values, so they also work in `case`
 * labels and static initialisers.  Flag values are per function: the same
 * bit means different things to different calls.
 *
 * What these headers guarantee to programs written for Dolphin's: they
 * define only SISCI's own names (SCI*, sci_*, SISCI_*, dis_*, DIS_*,
 * HOSTBRIDGE_*) and Dolphin's empty parameter annotations IN, OUT and IN_OUT,
 * nothing a program defines for itself (NO_FLAGS, NO_OFFSET, NO_CALLBACK and
 * NO_ARG are the program's own, as in Dolphin's sample programs), and
 * they compile without a warning as C (-std=c99, -std=c17) and as C++ under
 * -Wall -Wextra -pedantic -Wcast-qual -Wconversion -Wshadow -Wredundant-decls
 * -Wstrict-prototypes (crates/vsci-systest/tests/dolphin_layout.rs checks it).
 */
#ifndef SISCI_TYPES_H
#define SISCI_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include "sisci_error.h"
#include "dis/dis_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Parameter annotations ---------------------------------------------
 * Dolphin's headers mark parameters as input, output or both with these
 * empty macros, and programs copy them into their own callbacks
 * (`void IN *arg`).  A program or another header may define them first. */
#ifndef IN
#define IN
#endif
#ifndef OUT
#define OUT
#endif
#ifndef IN_OUT
#define IN_OUT
#endif

/* ---- Opaque handles ---------------------------------------------------- */
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
/* A DMA channel (SCIRequestDMAChannel): in vsci, a token for one engine's
 * worth of concurrency; see docs/api.md "DMA channels". */
typedef struct sci_dma_channel          *sci_dma_channel_t;

/* Which DMA engine a channel is requested on: SCI_DMA_TYPE_* below. */
typedef unsigned int sci_dma_type_t;

typedef unsigned int sci_ioaddr_t;

typedef struct {
    unsigned short nodeId;
    unsigned short offsHi;
    unsigned int   offsLo;
} sci_address_t;

/* ---- Enumerations -------------------------------------------------------- */
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

/* ---- Callbacks ----------------------------------------------------------- */
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

/* dis_dma_vec_t (the element of SCIStartDmaTransferVec) and
 * DIS_DMA_MAX_VECLEN are in dis/dis_types.h, included above. */

/* ---- General constants --------------------------------------------------- */
#define SCI_INFINITE_TIMEOUT         0xffffffffU
#define SCI_LOCAL_HOST               0xfffffffeU

/* Largest payload of one data interrupt, in bytes. */
#define SCI_MAX_DATA_INTERRUPT_SIZE  1024U

/* ---- Flags: segments ----------------------------------------------------- */
#define SCI_FLAG_USE_CALLBACK              0x1U
#define SCI_FLAG_EMPTY                     0x2U
#define SCI_FLAG_PRIVATE                   0x4U
#define SCI_FLAG_DMA_SOURCE_ONLY           0x8U
#define SCI_FLAG_PHYSICAL                  0x1000U
#define SCI_FLAG_CUDA_BUFFER               0x2000U
#define SCI_FLAG_SCIF_BUFFER               0x4000U
#define SCI_FLAG_AUTO_ID                   0x20000000U
#define SCI_FLAG_ASYNCHRONOUS_CONNECT      0x10000U
#define SCI_FLAG_FORCE_DISCONNECT          0x20000U
#define SCI_FLAG_NOTIFY                    0x80000U
#define SCI_FLAG_THREAD_SAFE               0x400000U

/* ---- Flags: maps --------------------------------------------------------- */
#define SCI_FLAG_FIXED_MAP_ADDR            0x1U
#define SCI_FLAG_READONLY_MAP              0x2U
#define SCI_FLAG_LOCK_OPERATION            0x4U
#define SCI_FLAG_CONDITIONAL_INTERRUPT_MAP 0x8U
#define SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP 0x10U
#define SCI_FLAG_IO_MAP_IOSPACE            0x80U
#define SCI_FLAG_NO_MEMORY_LOOPBACK_MAP    0x800U
#define SCI_FLAG_SHARED_MAP                0x2000U
#define SCI_FLAG_BROADCAST                 0x40000U
#define SCI_FLAG_WRITE_BACK_CACHE_MAP      0x08000000U
#define SCI_FLAG_READ_PREFETCH_AGGR_HOLD_MAP 0x100U
#define SCI_FLAG_READ_PREFETCH_NO_HOLD_MAP 0x200U
#define SCI_FLAG_DMOVE_MAP                 0x400U
#define SCI_FLAG_WRITES_DISABLE_GATHER_MAP 0x1000U
#define SCI_FLAG_DISABLE_128_BYTES_PACKETS 0x4000U

/* ---- Flags: PIO, ordering, error checking -------------------------------- */
#define SCI_FLAG_BLOCK_READ                0x40U
#define SCI_FLAG_ERROR_CHECK               0x80U
#define SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY    0x100U
#define SCI_FLAG_NO_FLUSH                  0x200U
#define SCI_FLAG_NO_STORE_BARRIER          0x400U
#define SCI_FLAG_FAST_BARRIER              0x1000U
#define SCI_FLAG_CACHE_FLUSH               0x100000U
#define SCI_FLAG_CACHE_INVALIDATE          0x200000U

/* ---- Flags: interrupts --------------------------------------------------- */
#define SCI_FLAG_FIXED_INTNO               0x2U
#define SCI_FLAG_SHARED_INT                0x4U
#define SCI_FLAG_CONDITIONAL_INTERRUPT     0x8U
#define SCI_FLAG_COUNTING_INT              0x20U
#define SCI_FLAG_SHARE_EXTERNAL            0x40U

/* ---- Flags: DMA ---------------------------------------------------------- */
#define SCI_FLAG_DMA_CHANNEL_SHARED        0x1U
#define SCI_FLAG_DMA_POST                  0x8U
#define SCI_FLAG_DMA_WAIT                  0x4U
#define SCI_FLAG_DMA_READ                  0x10U
#define SCI_FLAG_DMA_PHDMA                 0x20U
#define SCI_FLAG_FORCE_REMOVE              0x20U
#define SCI_FLAG_DMA_GLOBAL                0x40U
#define SCI_FLAG_ALLOW_UNICAST             0x80U
#define SCI_FLAG_DMA_SYSDMA                0x100U
#define SCI_FLAG_DMA_USER_MEM              0x200U
#define SCI_FLAG_LOCK_USER_MEM             0x400U
#define SCI_FLAG_DMA_ADAPTER               0x800U
#define SCI_FLAG_DMA_RESET                 0x1000U

#define SCI_DMA_TYPE_DONTCARE              1
#define SCI_DMA_TYPE_ADAPTER               2
#define SCI_DMA_TYPE_GLOBAL                3
#define SCI_DMA_TYPE_SYSTEM                4
#define SCI_DMA_TYPE_TRANSPARENT           5
#define SCI_DMA_CHANNEL_ID_DONTCARE        0xFFFFFFFFU

/* ---- Flags and constants of Dolphin's SmartIO / PCIe device calls --------
 * Defined so programs that mention them build; the calls that take them
 * need PCIe devices and are not offered (docs/api.md "Calls vsci does not
 * declare").  SCI_FLAG_NO_MEMORY_LOOPBACK is the modern spelling of
 * SCI_FLAG_NO_MEMORY_LOOPBACK_MAP (same value). */
#define SCI_FLAG_NO_MEMORY_LOOPBACK        0x800U
#define SCI_FLAG_PCIE_REQUESTER_GLOBAL     0x1U
#define SCI_FLAG_EXCLUSIVE                 0x01000000U
#define SCI_FLAG_DEVICE_SIDE_ONLY          0x02001000U
#define SCI_FLAG_LOCAL_ONLY                0x02002000U
#define SCI_FLAG_DEVICE_PREFER_BANDWIDTH   0x04000001U
#define SCI_FLAG_HOST_PREFER_BANDWIDTH     0x04000002U
#define SCI_FLAG_SPECIFY_PATH              0x10000000U
#define SCI_FLAG_SPECIFY_SLOT              0x20000000U

#define SCI_MEMACCESS_DEVICE_READ          0x1U
#define SCI_MEMACCESS_DEVICE_WRITE         0x2U
#define SCI_MEMACCESS_HOST_READ            0x4U
#define SCI_MEMACCESS_HOST_WRITE           0x8U
#define SCI_MEMACCESS_MULTIHOST_READ       (0x10U | SCI_MEMACCESS_HOST_READ)
#define SCI_MEMACCESS_MULTIHOST_WRITE      (0x10U | SCI_MEMACCESS_HOST_WRITE)
#define SCI_MEMACCESS_P2P_READ             (0x20U | SCI_MEMACCESS_DEVICE_READ)
#define SCI_MEMACCESS_P2P_WRITE            (0x20U | SCI_MEMACCESS_DEVICE_WRITE)

#define SCI_MEMTYPE_BAR                    1
#define SCI_MEMTYPE_PRIVATE                2
#define SCI_MEMTYPE_SHARED                 4

/* ---- SCIQuery: major commands -------------------------------------------- */
#define SCI_Q_VENDORID                     1U
#define SCI_Q_API                          2U
#define SCI_Q_ADAPTER                      3U
#define SCI_Q_SYSTEM                       4U
#define SCI_Q_LOCAL_SEGMENT                5U
#define SCI_Q_REMOTE_SEGMENT               6U
#define SCI_Q_MAP                          7U

/* ---- SCIQuery: adapter sub-commands (sci_query_adapter_t.subcommand) ----- */
#define SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT        0x100U
#define SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT      0x101U
#define SCI_Q_ADAPTER_DMA_MTU                   0x102U
#define SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE    0x103U
#define SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE  0x104U
#define SCI_Q_ADAPTER_NODEID                    0x105U
#define SCI_Q_ADAPTER_SERIAL_NUMBER             0x106U
#define SCI_Q_ADAPTER_CARD_TYPE                 0x107U
#define SCI_Q_ADAPTER_NUMBER_OF_STREAMS         0x108U
#define SCI_Q_ADAPTER_STREAM_BUFFER_SIZE        0x109U
#define SCI_Q_ADAPTER_CONFIGURED                0x10AU
#define SCI_Q_ADAPTER_LINK_OPERATIONAL          0x10BU
#define SCI_Q_ADAPTER_HW_LINK_STATUS_IS_OK      0x10CU
#define SCI_Q_ADAPTER_NUMBER                    0x10DU
#define SCI_Q_ADAPTER_INSTANCE_NUMBER           0x10EU
#define SCI_Q_ADAPTER_FIRMWARE_OK               0x10FU
#define SCI_Q_ADAPTER_CONNECTED_TO_SWITCH       0x110U
#define SCI_Q_ADAPTER_ATT_PAGE_SIZE             0x111U
#define SCI_Q_ADAPTER_ATT_NUMBER_OF_ENTRIES     0x112U
#define SCI_Q_ADAPTER_ATT_AVAILABLE_ENTRIES     0x113U
#define SCI_Q_ADAPTER_DMA_AVAILABLE             0x114U
#define SCI_Q_ADAPTER_BDF                       0x115U

/* ---- SCIQuery: system, segment and map sub-commands ---------------------- */
#define SCI_Q_SYSTEM_HOSTBRIDGE                 0x200U
#define SCI_Q_SYSTEM_WRITE_POSTING_ENABLED      0x201U
#define SCI_Q_SYSTEM_WRITE_COMBINING_ENABLED    0x202U
#define SCI_Q_LOCAL_SEGMENT_IOADDR              0x300U
#define SCI_Q_LOCAL_SEGMENT_PHYS_ADDR           0x301U
#define SCI_Q_REMOTE_SEGMENT_IOADDR             0x400U
#define SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET        0x500U
#define SCI_Q_MAP_QUERY_REMOTE_MAPPED_TO_LOCAL_TARGET 0x501U

#define HOSTBRIDGE_NOT_AVAILABLE                0U
#define HOSTBRIDGE_UNKNOWN                      1U
#define HOSTBRIDGE_WRITE_POSTING_DISABLED       0U
#define HOSTBRIDGE_WRITE_POSTING_ENABLED        1U

/* Card type reported by SCI_Q_ADAPTER_CARD_TYPE for a vsci software adapter. */
#define SCI_ADAPTER_CARD_TYPE_VSCI              0x7653U

typedef struct {
    char         *str;      /* buffer of at least `length` bytes */
    unsigned int  length;
} sci_query_string_t;

typedef struct {
    unsigned int  localAdapterNo;
    unsigned int  portNo;
    unsigned int  subcommand;
    void         *data;     /* usually an unsigned int * */
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

#ifdef __cplusplus
}
#endif

#endif /* SISCI_TYPES_H */
