//! The SISCI DMA calls over `vsci_client`'s DMA engine (see docs/api.md,
//! "DMA"). Everything a program can get wrong — handles, flags, NULL
//! pointers, vector lengths, offsets, sizes — is checked before a transfer
//! is handed to the engine.

use std::ffi::{c_uint, c_void};

use vsci_client::{DmaEntry, DmaLocal, QueueState, SciError, Transfer};

use crate::handles::{self, Obj};
use crate::{as_handle, check_adapter, check_flags, h, out, report, set, Handle, SciErr, FLAG_USE_CALLBACK};

const FLAG_DMA_WAIT: c_uint = 0x4;
const FLAG_DMA_READ: c_uint = 0x10;
const FLAG_DMA_PHDMA: c_uint = 0x20;
/// Which hardware engine to use (`SCI_FLAG_DMA_GLOBAL`, `_SYSDMA`,
/// `_ADAPTER`): vsci has one engine, so these are accepted and change
/// nothing.
const DMA_ENGINE_HINTS: c_uint = 0x40 | 0x100 | 0x800;
/// `SCI_FLAG_DMA_USER_MEM`, `SCI_FLAG_LOCK_USER_MEM`: hints about program
/// memory; it needs no pinning here.
const DMA_USER_MEM_HINTS: c_uint = 0x200 | 0x400;

type CbDma = unsafe extern "C" fn(*mut c_void, Handle, SciErr) -> c_uint;

/// `dis_dma_vec_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DisDmaVec {
    size: usize,
    local_offset: usize,
    remote_offset: usize,
    flags: c_uint,
}

#[no_mangle]
pub unsafe extern "C" fn SCICreateDMAQueue(
    sd: Handle,
    dq: *mut Handle,
    adapter: c_uint,
    max_entries: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: `out` NULL-checks `dq` before writing it.
    unsafe {
        report(error, (), || {
            check_flags(flags, FLAG_DMA_PHDMA | DMA_ENGINE_HINTS)?;
            if flags & FLAG_DMA_PHDMA != 0 {
                return Err(SciError::FlagNotImplemented);
            }
            if dq.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let d = handles::desc(h(sd))?;
            check_adapter(adapter)?;
            let q = d.client.create_dma_queue(max_entries)?;
            let hnd = handles::insert(Obj::DmaQueue(q), h(sd));
            out(dq, as_handle(hnd))
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIRemoveDMAQueue(dq: Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report(error, (), || {
            check_flags(flags, 0)?;
            let q = handles::dma_queue(h(dq))?;
            q.remove()?;
            handles::remove(h(dq));
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIAbortDMAQueue(dq: Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report(error, (), || {
            check_flags(flags, 0)?;
            handles::dma_queue(h(dq))?.abort()
        })
    }
}

#[no_mangle]
pub extern "C" fn SCIDMAQueueState(dq: Handle) -> c_uint {
    // No error out-parameter: a bad handle reads as a queue in ERROR.
    handles::dma_queue(h(dq)).map(|q| q.state() as c_uint).unwrap_or(QueueState::Error as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn SCIWaitForDMAQueue(dq: Handle, timeout: c_uint, flags: c_uint, error: *mut SciErr) -> c_uint {
    let r = std::panic::catch_unwind(|| {
        check_flags(flags, 0).map_err(|e| (QueueState::Error, e))?;
        let q = handles::dma_queue(h(dq)).map_err(|e| (QueueState::Error, e))?;
        q.wait(timeout)
    });
    let (state, e) = match r {
        Ok(Ok(st)) => (st, SciError::Ok),
        Ok(Err((st, e))) => (st, e),
        Err(_) => (QueueState::Error, SciError::System),
    };
    // SAFETY: see `set`.
    unsafe { set(error, e) };
    state as c_uint
}

/// Check the transfer flags of a start call; `extra` are flags only this
/// variant accepts.
fn start_flags(flags: c_uint, extra: c_uint, callback: *mut c_void) -> Result<Option<CbDma>, SciError> {
    check_flags(flags, FLAG_DMA_READ | FLAG_DMA_WAIT | FLAG_USE_CALLBACK | DMA_ENGINE_HINTS | extra)?;
    if flags & FLAG_USE_CALLBACK == 0 {
        return Ok(None); // SISCI ignores a callback given without the flag
    }
    if callback.is_null() {
        return Err(SciError::IllegalParameter);
    }
    // SAFETY: a non-NULL `sci_cb_dma_t` the program passed as a pointer;
    // function and data pointers have the same size and representation on
    // every platform we build for.
    Ok(Some(unsafe { std::mem::transmute::<*mut c_void, CbDma>(callback) }))
}

/// Hand a validated transfer to the queue behind handle `dq`.
fn start(dq: Handle, t: Transfer, cb: Option<CbDma>, arg: *mut c_void, flags: c_uint) -> Result<(), SciError> {
    let q = handles::dma_queue(h(dq))?;
    let handle = h(dq);
    let arg = arg as usize;
    let completion = cb.map(|f| {
        Box::new(move |status: SciError| {
            // SAFETY: the program's callback, with the argument it gave and
            // the handle of the queue, as SISCI specifies.
            unsafe { f(arg as *mut c_void, as_handle(handle), status as c_uint) };
        }) as vsci_client::Completion
    });
    q.start(t, completion, flags & FLAG_DMA_WAIT != 0)
}

#[no_mangle]
pub unsafe extern "C" fn SCIStartDmaTransfer(
    dq: Handle,
    local_segment: Handle,
    remote_segment: Handle,
    local_offset: usize,
    size: usize,
    remote_offset: usize,
    callback: *mut c_void,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`; the callback is checked by `start_flags`.
    unsafe {
        report(error, (), || {
            let cb = start_flags(flags, 0, callback)?;
            handles::dma_queue(h(dq))?;
            let ls = handles::local_seg(h(local_segment))?;
            let rs = handles::remote_seg(h(remote_segment))?;
            let entries = vec![DmaEntry { size: size as u64, local_offset: local_offset as u64, remote_offset: remote_offset as u64 }];
            let t = Transfer { local: DmaLocal::Segment(ls), remote: rs, entries, read: flags & FLAG_DMA_READ != 0 };
            start(dq, t, cb, callback_arg, flags)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIStartDmaTransferMem(
    dq: Handle,
    local_address: *mut c_void,
    remote_segment: Handle,
    size: usize,
    remote_offset: usize,
    callback: *mut c_void,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`. The program promises `size` bytes at
    // `local_address`, valid until the transfer ends (SISCI's contract);
    // the engine touches nothing outside them.
    unsafe {
        report(error, (), || {
            let cb = start_flags(flags, DMA_USER_MEM_HINTS, callback)?;
            handles::dma_queue(h(dq))?;
            let rs = handles::remote_seg(h(remote_segment))?;
            if local_address.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let entries = vec![DmaEntry { size: size as u64, local_offset: 0, remote_offset: remote_offset as u64 }];
            let local = DmaLocal::Mem { addr: local_address as usize, len: size };
            let t = Transfer { local, remote: rs, entries, read: flags & FLAG_DMA_READ != 0 };
            start(dq, t, cb, callback_arg, flags)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIStartDmaTransferVec(
    dq: Handle,
    local_segment: Handle,
    remote_segment: Handle,
    vec_length: usize,
    dis_dma_vec: *mut c_void,
    callback: *mut c_void,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`. The vector is read only after its length has been
    // checked against the queue's maxEntries, and only `vec_length` entries
    // of it, which the program promises are there.
    unsafe {
        report(error, (), || {
            let cb = start_flags(flags, 0, callback)?;
            let q = handles::dma_queue(h(dq))?;
            let ls = handles::local_seg(h(local_segment))?;
            let rs = handles::remote_seg(h(remote_segment))?;
            if dis_dma_vec.is_null() || vec_length == 0 {
                return Err(SciError::IllegalParameter);
            }
            if vec_length > q.max_entries as usize {
                return Err(SciError::MaxEntries);
            }
            let v = dis_dma_vec.cast::<DisDmaVec>();
            let mut entries = Vec::with_capacity(vec_length);
            for i in 0..vec_length {
                let e = v.add(i).read_unaligned();
                if e.flags != 0 {
                    return Err(SciError::IllegalFlag);
                }
                entries.push(DmaEntry { size: e.size as u64, local_offset: e.local_offset as u64, remote_offset: e.remote_offset as u64 });
            }
            let t = Transfer { local: DmaLocal::Segment(ls), remote: rs, entries, read: flags & FLAG_DMA_READ != 0 };
            start(dq, t, cb, callback_arg, flags)
        })
    }
}
