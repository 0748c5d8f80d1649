//! Binary compatibility with programs built against Dolphin's own headers.
//!
//! Dolphin's `sisci_api.h` renames every function to
//! `_SISCI_PUBLIC_FUNC_ST_<name>` (or `_MT_` when built with `_REENTRANT`)
//! and every flag or constant to an `extern const unsigned int` named
//! `_SISCI_PUBLIC_CONST_<name>`. A binary built that way looks for those
//! symbols, so we export them too: the functions as thin forwards to the
//! plain-named ones, the constants with the values of our `sisci_types.h`
//! (which is what this library interprets).

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::memcpy::{GetSciMemCopyFunction, SetSciMemCopyFunction};
use crate::*;

macro_rules! forward {
    ($( $f:ident ( $($a:ident : $t:ty),* ) $(-> $r:ty)? ; )*) => { $(
        #[allow(unused_unsafe)]
        const _: () = {
            #[export_name = concat!("_SISCI_PUBLIC_FUNC_ST_", stringify!($f))]
            pub unsafe extern "C" fn st($($a: $t),*) $(-> $r)? {
                // SAFETY: same contract as the function we forward to.
                unsafe { $f($($a),*) }
            }
            #[export_name = concat!("_SISCI_PUBLIC_FUNC_MT_", stringify!($f))]
            pub unsafe extern "C" fn mt($($a: $t),*) $(-> $r)? {
                // SAFETY: same contract as the function we forward to.
                unsafe { $f($($a),*) }
            }
        };
    )* };
}

type E = *mut SciErr;
type P = *mut c_void;

forward! {
    SCIInitialize(flags: c_uint, error: E);
    SCITerminate();
    SCIOpen(sd: *mut Handle, flags: c_uint, error: E);
    SCIClose(sd: Handle, flags: c_uint, error: E);
    SCIQuery(command: c_uint, data: P, flags: c_uint, error: E);
    SCIGetErrorString(error: SciErr) -> *const c_char;
    SCIGetLocalNodeId(adapter: c_uint, node_id: *mut c_uint, flags: c_uint, error: E);
    SCIProbeNode(sd: Handle, adapter: c_uint, node_id: c_uint, flags: c_uint, error: E) -> c_int;
    SCICreateSegment(sd: Handle, seg: *mut Handle, id: c_uint, size: usize, cb: CbLocalSeg, arg: P, flags: c_uint, error: E);
    SCIPrepareSegment(seg: Handle, adapter: c_uint, flags: c_uint, error: E);
    SCISetSegmentAvailable(seg: Handle, adapter: c_uint, flags: c_uint, error: E);
    SCISetSegmentUnavailable(seg: Handle, adapter: c_uint, flags: c_uint, error: E);
    SCIRemoveSegment(seg: Handle, flags: c_uint, error: E);
    SCIShareSegment(seg: Handle, flags: c_uint, error: E);
    SCIAttachLocalSegment(sd: Handle, seg: *mut Handle, id: c_uint, size: *mut usize, cb: CbLocalSeg, arg: P, flags: c_uint, error: E);
    SCIGetLocalSegmentSize(seg: Handle) -> usize;
    SCIGetLocalSegmentId(seg: Handle) -> c_uint;
    SCIWaitForLocalSegmentEvent(seg: Handle, node: *mut c_uint, adapter: *mut c_uint, timeout: c_uint, flags: c_uint, error: E) -> c_uint;
    SCIRegisterSegmentMemory(addr: P, size: usize, seg: Handle, flags: c_uint, error: E);
    SCIConnectSegment(sd: Handle, seg: *mut Handle, node: c_uint, id: c_uint, adapter: c_uint, cb: CbRemoteSeg, arg: P, timeout: c_uint, flags: c_uint, error: E);
    SCIDisconnectSegment(seg: Handle, flags: c_uint, error: E);
    SCIGetRemoteSegmentSize(seg: Handle) -> usize;
    SCIGetRemoteSegmentId(seg: Handle) -> c_uint;
    SCIGetRemoteSegmentNodeId(seg: Handle) -> c_uint;
    SCIWaitForRemoteSegmentEvent(seg: Handle, status: E, timeout: c_uint, flags: c_uint, error: E) -> c_uint;
    SCIMapLocalSegment(seg: Handle, map: *mut Handle, off: usize, size: usize, addr: P, flags: c_uint, error: E) -> P;
    SCIMapRemoteSegment(seg: Handle, map: *mut Handle, off: usize, size: usize, addr: P, flags: c_uint, error: E) -> P;
    SCIUnmapSegment(map: Handle, flags: c_uint, error: E);
    SCIMemCpy(seq: Handle, mem: P, map: Handle, off: usize, size: usize, flags: c_uint, error: E);
    SCIMemWrite(mem: P, remote: P, size: usize, flags: c_uint, error: E);
    SCIFlush(seq: Handle, flags: c_uint);
    SCIStoreBarrier(seq: Handle, flags: c_uint);
    SCICacheSync(map: Handle, addr: P, length: usize, flags: c_uint, error: E);
    SCICreateMapSequence(map: Handle, seq: *mut Handle, flags: c_uint, error: E);
    SCIRemoveSequence(seq: Handle, flags: c_uint, error: E);
    SCIStartSequence(seq: Handle, flags: c_uint, error: E) -> c_uint;
    SCICheckSequence(seq: Handle, flags: c_uint, error: E) -> c_uint;
    SCICreateInterrupt(sd: Handle, intr: *mut Handle, adapter: c_uint, no: *mut c_uint, cb: CbIntr, arg: P, flags: c_uint, error: E);
    SCIRemoveInterrupt(intr: Handle, flags: c_uint, error: E);
    SCIWaitForInterrupt(intr: Handle, timeout: c_uint, flags: c_uint, error: E);
    SCIConnectInterrupt(sd: Handle, intr: *mut Handle, node: c_uint, adapter: c_uint, no: c_uint, timeout: c_uint, flags: c_uint, error: E);
    SCIDisconnectInterrupt(intr: Handle, flags: c_uint, error: E);
    SCITriggerInterrupt(intr: Handle, flags: c_uint, error: E);
    SCIRegisterInterruptFlag(adapter: c_uint, intr: *mut Handle, seg: Handle, off: c_uint, cb: CbIntr, arg: P, flags: c_uint, error: E);
    SCIEnableConditionalInterrupt(intr: Handle, flags: c_uint, error: E);
    SCIDisableConditionalInterrupt(intr: Handle, flags: c_uint, error: E);
    SCIGetConditionalInterruptTrigCounter(intr: Handle, counter: *mut c_uint, flags: c_uint, error: E);
    SCICreateDataInterrupt(sd: Handle, intr: *mut Handle, adapter: c_uint, no: *mut c_uint, cb: CbDataIntr, arg: P, flags: c_uint, error: E);
    SCIRemoveDataInterrupt(intr: Handle, flags: c_uint, error: E);
    SCIWaitForDataInterrupt(intr: Handle, data: P, len: *mut c_uint, timeout: c_uint, flags: c_uint, error: E);
    SCIConnectDataInterrupt(sd: Handle, intr: *mut Handle, node: c_uint, adapter: c_uint, no: c_uint, timeout: c_uint, flags: c_uint, error: E);
    SCIDisconnectDataInterrupt(intr: Handle, flags: c_uint, error: E);
    SCITriggerDataInterrupt(intr: Handle, data: P, len: c_uint, flags: c_uint, error: E);
    SCICreateDMAQueue(sd: Handle, dq: *mut Handle, adapter: c_uint, max: c_uint, flags: c_uint, error: E);
    SCIRemoveDMAQueue(dq: Handle, flags: c_uint, error: E);
    SCIAbortDMAQueue(dq: Handle, flags: c_uint, error: E);
    SCIDMAQueueState(dq: Handle) -> c_uint;
    SCIWaitForDMAQueue(dq: Handle, timeout: c_uint, flags: c_uint, error: E) -> c_uint;
    SCIStartDmaTransfer(dq: Handle, ls: Handle, rs: Handle, loff: usize, size: usize, roff: usize, cb: P, arg: P, flags: c_uint, error: E);
    SCIStartDmaTransferMem(dq: Handle, mem: P, rs: Handle, size: usize, roff: usize, cb: P, arg: P, flags: c_uint, error: E);
    SCIStartDmaTransferVec(dq: Handle, ls: Handle, rs: Handle, len: usize, vec: P, cb: P, arg: P, flags: c_uint, error: E);
    SCIEnqueueDMATransfer(dq: Handle, ls: Handle, rs: Handle, loff: c_uint, roff: c_uint, size: c_uint, flags: c_uint, error: E) -> c_uint;
    SCIPostDMAQueue(dq: Handle, cb: P, arg: P, flags: c_uint, error: E);
    SCIResetDMAQueue(dq: Handle, flags: c_uint, error: E);
    SCIRequestDMAChannel(sd: Handle, ch: *mut Handle, adapter: c_uint, kind: c_uint, id: c_uint, flags: c_uint, error: E);
    SCIReturnDMAChannel(ch: Handle, error: E);
    SCIAssignDMAChannel(ch: Handle, dq: Handle, flags: c_uint, error: E);
    SCIPrepareLocalSegmentForDMA(ch: Handle, seg: Handle, flags: c_uint, error: E);
    SCIUnprepareLocalSegmentForDMA(ch: Handle, seg: Handle, flags: c_uint, error: E);
    SCIPrepareRemoteSegmentForDMA(ch: Handle, seg: Handle, flags: c_uint, error: E);
    SCIUnprepareRemoteSegmentForDMA(ch: Handle, seg: Handle, flags: c_uint, error: E);
    SetSciMemCopyFunction(func: c_uint);
    GetSciMemCopyFunction() -> c_uint;
    SCIGetMapPointer(map: Handle) -> P;
    SCIphDmaEnqueue(dq: Handle, size: c_uint, bus: c_uint, node: c_uint, hi: c_uint, lo: c_uint, flags: c_uint, error: E);
    SCIphDmaStart(dq: Handle, cb: P, arg: P, flags: c_uint, error: E) -> c_uint;
    SCIGetCSRRegister(sd: Handle, adapter: c_uint, node: c_uint, off: c_uint, flags: c_uint, error: E) -> c_uint;
    SCISetCSRRegister(sd: Handle, adapter: c_uint, node: c_uint, off: c_uint, value: c_uint, flags: c_uint, error: E);
    SCIGetLocalCSR(sd: Handle, adapter: c_uint, off: c_uint, flags: c_uint, error: E) -> c_uint;
    SCISetLocalCSR(sd: Handle, adapter: c_uint, off: c_uint, value: c_uint, flags: c_uint, error: E);
    SCIAttachPhysicalMemory(io: c_uint, addr: P, bus: c_uint, size: usize, seg: Handle, flags: c_uint, error: E);
    SCIConnectSCISpace(sd: Handle, adapter: c_uint, seg: *mut Handle, address: SciAddress, size: c_uint, flags: c_uint, error: E);
}

macro_rules! constants {
    ($( $name:ident = $v:expr; )*) => {
        $(
            const _: () = {
                #[export_name = concat!("_SISCI_PUBLIC_CONST_", stringify!($name))]
                pub static C: c_uint = $v;
            };
        )*
        /// Every exported constant by its header name (c_headers.rs
        /// checks them against sisci_types.h).
        #[cfg(test)]
        pub(crate) const EXPORTED: &[(&str, c_uint)] = &[$((stringify!($name), $v)),*];
    };
}

constants! {
    SCI_INFINITE_TIMEOUT = 0xffff_ffff;
    SCI_FLAG_USE_CALLBACK = FLAG_USE_CALLBACK;
    SCI_FLAG_EMPTY = FLAG_EMPTY;
    SCI_FLAG_PRIVATE = FLAG_PRIVATE;
    SCI_FLAG_DMA_SOURCE_ONLY = FLAG_DMA_SOURCE_ONLY;
    SCI_FLAG_AUTO_ID = FLAG_AUTO_ID;
    SCI_FLAG_ASYNCHRONOUS_CONNECT = FLAG_ASYNCHRONOUS_CONNECT;
    SCI_FLAG_FORCE_DISCONNECT = FLAG_FORCE_DISCONNECT;
    SCI_FLAG_NOTIFY = FLAG_NOTIFY;
    SCI_FLAG_THREAD_SAFE = FLAG_THREAD_SAFE;
    SCI_FLAG_FIXED_MAP_ADDR = FLAG_FIXED_MAP_ADDR;
    SCI_FLAG_READONLY_MAP = FLAG_READONLY_MAP;
    SCI_FLAG_LOCK_OPERATION = 0x4;
    SCI_FLAG_IO_MAP_IOSPACE = 0x80;
    SCI_FLAG_SHARED_MAP = 0x2000;
    SCI_FLAG_BROADCAST = FLAG_BROADCAST;
    SCI_FLAG_READ_PREFETCH_AGGR_HOLD_MAP = 0x100;
    SCI_FLAG_READ_PREFETCH_NO_HOLD_MAP = 0x200;
    SCI_FLAG_DMOVE_MAP = 0x400;
    SCI_FLAG_WRITES_DISABLE_GATHER_MAP = 0x1000;
    SCI_FLAG_NO_MEMORY_LOOPBACK_MAP = 0x800;
    SCI_FLAG_BLOCK_READ = FLAG_BLOCK_READ;
    SCI_FLAG_ERROR_CHECK = FLAG_ERROR_CHECK;
    SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY = FLAG_FLUSH_CPU_BUFFERS_ONLY;
    SCI_FLAG_NO_FLUSH = FLAG_NO_FLUSH;
    SCI_FLAG_NO_STORE_BARRIER = FLAG_NO_STORE_BARRIER;
    SCI_FLAG_FAST_BARRIER = FLAG_FAST_BARRIER;
    SCI_FLAG_CACHE_FLUSH = FLAG_CACHE_FLUSH;
    SCI_FLAG_CACHE_INVALIDATE = FLAG_CACHE_INVALIDATE;
    SCI_FLAG_FIXED_INTNO = FLAG_FIXED_INTNO;
    SCI_FLAG_SHARED_INT = FLAG_SHARED_INT;
    SCI_FLAG_COUNTING_INT = FLAG_COUNTING_INT;
    SCI_FLAG_DMA_WAIT = 0x4;
    SCI_FLAG_DMA_READ = 0x10;
    SCI_FLAG_DMA_POST = 0x8;
    SCI_FLAG_DMA_RESET = 0x1000;
    SCI_FLAG_DMA_PHDMA = 0x20;
    SCI_FLAG_DMA_GLOBAL = 0x40;
    SCI_FLAG_DMA_SYSDMA = 0x100;
    SCI_FLAG_DMA_ADAPTER = 0x800;
    SCI_FLAG_DMA_USER_MEM = 0x200;
    SCI_FLAG_LOCK_USER_MEM = 0x400;
    SCI_FLAG_DMA_CHANNEL_SHARED = 0x1;
    SCI_FLAG_ALLOW_UNICAST = 0x80;
    SCI_FLAG_FORCE_REMOVE = 0x20;
    SCI_FLAG_PHYSICAL = 0x1000;
    SCI_FLAG_CUDA_BUFFER = 0x2000;
    SCI_FLAG_SCIF_BUFFER = 0x4000;
    SCI_FLAG_CONDITIONAL_INTERRUPT = 0x8;
    SCI_FLAG_CONDITIONAL_INTERRUPT_MAP = 0x8;
    SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP = 0x10;
    SCI_FLAG_DISABLE_128_BYTES_PACKETS = 0x4000;
    SCI_FLAG_WRITE_BACK_CACHE_MAP = 0x0800_0000;
    SCI_FLAG_SHARE_EXTERNAL = 0x40;
    SCI_LOCAL_HOST = 0xffff_fffe;
    SCI_Q_VENDORID = Q_VENDORID;
    SCI_Q_API = Q_API;
    SCI_Q_ADAPTER = Q_ADAPTER;
    SCI_Q_SYSTEM = Q_SYSTEM;
    SCI_Q_LOCAL_SEGMENT = Q_LOCAL_SEGMENT;
    SCI_Q_REMOTE_SEGMENT = Q_REMOTE_SEGMENT;
    SCI_Q_MAP = Q_MAP;
    SCI_Q_ADAPTER_NODEID = 0x105;
    SCI_Q_ADAPTER_SERIAL_NUMBER = 0x106;
    SCI_Q_ADAPTER_CARD_TYPE = 0x107;
    SCI_Q_ADAPTER_CONFIGURED = 0x10A;
    SCI_Q_ADAPTER_LINK_OPERATIONAL = 0x10B;
    SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT = 0x100;
    SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT = 0x101;
    SCI_Q_ADAPTER_DMA_MTU = 0x102;
}
