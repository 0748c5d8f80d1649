//! The SISCI DMA calls over `vsci_client`'s DMA engine (see docs/api.md,
//! "DMA"). Everything a program can get wrong — handles, flags, NULL
//! pointers, vector lengths, offsets, sizes — is checked before a transfer
//! is handed to the engine.

use std::ffi::{c_uint, c_void};

use vsci_client::{DmaChannel, DmaEntry, DmaLocal, QueueState, SciError, Transfer};

use crate::handles::{self, Obj};
use crate::{as_handle, check_adapter, check_flags, guard, h, out, report, set, Handle, SciErr, FLAG_USE_CALLBACK};

pub(crate) const FLAG_DMA_WAIT: c_uint = 0x4;
pub(crate) const FLAG_DMA_POST: c_uint = 0x8;
pub(crate) const FLAG_DMA_READ: c_uint = 0x10;
pub(crate) const FLAG_DMA_PHDMA: c_uint = 0x20;
pub(crate) const FLAG_DMA_RESET: c_uint = 0x1000;
/// `SCI_FLAG_FORCE_REMOVE` (same bit as `SCI_FLAG_DMA_PHDMA`, which only
/// `SCICreateDMAQueue` takes).
pub(crate) const FLAG_FORCE_REMOVE: c_uint = 0x20;
pub(crate) const FLAG_DMA_CHANNEL_SHARED: c_uint = 0x1;
/// Reflective memory (broadcast) DMA and its unicast fallback
/// (`SCI_FLAG_BROADCAST`, `SCI_FLAG_ALLOW_UNICAST`): a transfer to a group
/// connection writes every member whatever the flags say, and one to a
/// single node's segment is unicast, which both flags allow.
pub(crate) const DMA_BROADCAST_FLAGS: c_uint = 0x4_0000 | 0x80;
/// `SCI_DMA_TYPE_DONTCARE` .. `SCI_DMA_TYPE_TRANSPARENT`.
pub(crate) const DMA_TYPES: std::ops::RangeInclusive<c_uint> = 1..=5;
pub(crate) const DMA_CHANNEL_ID_DONTCARE: c_uint = 0xFFFF_FFFF;
/// Which hardware engine to use (`SCI_FLAG_DMA_GLOBAL`, `_SYSDMA`,
/// `_ADAPTER`): vsci has one engine, so these are accepted and change
/// nothing.
pub(crate) const DMA_ENGINE_HINTS: c_uint = 0x40 | 0x100 | 0x800;
/// `SCI_FLAG_DMA_USER_MEM`, `SCI_FLAG_LOCK_USER_MEM`: hints about program
/// memory; it needs no pinning here.
pub(crate) const DMA_USER_MEM_HINTS: c_uint = 0x200 | 0x400;

type CbDma = unsafe extern "C" fn(*mut c_void, Handle, SciErr) -> c_uint;

/// `dis_dma_vec_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DisDmaVec {
    pub(crate) size: usize,
    pub(crate) local_offset: usize,
    pub(crate) remote_offset: usize,
    pub(crate) flags: c_uint,
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
        report("SCICreateDMAQueue", error, (), || {
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
        report("SCIRemoveDMAQueue", error, (), || {
            check_flags(flags, FLAG_FORCE_REMOVE)?;
            if handles::dma_queue(h(dq)).is_err() && handles::take_orphan(h(dq), handles::Kind::DmaQueue) {
                return Ok(()); // removed by SCIClose or SCITerminate
            }
            let q = handles::dma_queue(h(dq))?;
            if flags & FLAG_FORCE_REMOVE != 0 {
                // Remove even with a transfer in flight: stop it first
                // (returns once the engine no longer touches either side).
                q.abort()?;
            }
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
        report("SCIAbortDMAQueue", error, (), || {
            check_flags(flags, 0)?;
            handles::dma_queue(h(dq))?.abort()
        })
    }
}

#[no_mangle]
pub extern "C" fn SCIDMAQueueState(dq: Handle) -> c_uint {
    // No error out-parameter: a bad handle reads as a queue in ERROR.
    guard::value("SCIDMAQueueState", QueueState::Error as c_uint, || {
        handles::dma_queue(h(dq)).map(|q| q.state() as c_uint).unwrap_or(QueueState::Error as c_uint)
    })
}

#[no_mangle]
pub unsafe extern "C" fn SCIWaitForDMAQueue(dq: Handle, timeout: c_uint, flags: c_uint, error: *mut SciErr) -> c_uint {
    let r = guard::value("SCIWaitForDMAQueue", Err((QueueState::Error, SciError::System)), || {
        check_flags(flags, 0).map_err(|e| (QueueState::Error, e))?;
        let q = handles::dma_queue(h(dq)).map_err(|e| (QueueState::Error, e))?;
        q.wait(timeout)
    });
    let (state, e) = match r {
        Ok(st) => (st, SciError::Ok),
        Err((st, e)) => (st, e),
    };
    // SAFETY: see `set`.
    unsafe { set(error, e) };
    state as c_uint
}

/// Check the transfer flags of a start call; `extra` are flags only this
/// variant accepts.
fn start_flags(flags: c_uint, extra: c_uint, callback: *mut c_void) -> Result<Option<CbDma>, SciError> {
    check_flags(
        flags,
        FLAG_DMA_READ | FLAG_DMA_WAIT | FLAG_USE_CALLBACK | DMA_ENGINE_HINTS | DMA_BROADCAST_FLAGS | extra,
    )?;
    callback_of(flags, callback)
}

/// The program's DMA callback, if it asked for one with
/// `SCI_FLAG_USE_CALLBACK` (which without a callback is an error).
fn callback_of(flags: c_uint, callback: *mut c_void) -> Result<Option<CbDma>, SciError> {
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

/// The program's callback as the engine's completion for queue `dq`.
fn completion(dq: Handle, cb: Option<CbDma>, arg: *mut c_void) -> Option<vsci_client::Completion> {
    let handle = h(dq);
    let arg = arg as usize;
    cb.map(|f| {
        Box::new(move |status: SciError| {
            guard::void("cb_dma", || {
                // SAFETY: the program's callback, with the argument it gave
                // and the handle of the queue, as SISCI specifies.
                unsafe { f(arg as *mut c_void, as_handle(handle), status as c_uint) };
            })
        }) as vsci_client::Completion
    })
}

/// Hand a validated transfer to the queue behind handle `dq`.
fn start(dq: Handle, t: Transfer, cb: Option<CbDma>, arg: *mut c_void, flags: c_uint) -> Result<(), SciError> {
    let q = handles::dma_queue(h(dq))?;
    q.start(t, completion(dq, cb, arg), flags & FLAG_DMA_WAIT != 0)
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
        report("SCIStartDmaTransfer", error, (), || {
            let cb = start_flags(flags, 0, callback)?;
            handles::dma_queue(h(dq))?;
            let ls = handles::local_seg(h(local_segment))?;
            let rs = handles::remote_seg(h(remote_segment))?;
            let entries = vec![DmaEntry {
                size: size as u64,
                local_offset: local_offset as u64,
                remote_offset: remote_offset as u64,
            }];
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
        report("SCIStartDmaTransferMem", error, (), || {
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
        report("SCIStartDmaTransferVec", error, (), || {
            let cb = start_flags(flags, 0, callback)?;
            let q = handles::dma_queue(h(dq))?;
            let ls = handles::local_seg(h(local_segment))?;
            let rs = handles::remote_seg(h(remote_segment))?;
            if dis_dma_vec.is_null() || vec_length == 0 {
                return Err(SciError::IllegalParameter);
            }
            // Up to DIS_DMA_MAX_VECLEN pieces on any queue, more on a queue
            // created for more (DmaQueue::max_vector). Checked before the
            // vector is read.
            if vec_length > q.max_vector() {
                return Err(SciError::MaxEntries);
            }
            let v = dis_dma_vec.cast::<DisDmaVec>();
            let mut entries = Vec::with_capacity(vec_length);
            for i in 0..vec_length {
                let e = v.add(i).read_unaligned();
                if e.flags != 0 {
                    return Err(SciError::IllegalFlag);
                }
                entries.push(DmaEntry {
                    size: e.size as u64,
                    local_offset: e.local_offset as u64,
                    remote_offset: e.remote_offset as u64,
                });
            }
            let t = Transfer { local: DmaLocal::Segment(ls), remote: rs, entries, read: flags & FLAG_DMA_READ != 0 };
            start(dq, t, cb, callback_arg, flags)
        })
    }
}

// ---------------------------------------------------------------------------
// The DMA queue API that preceded SCIStartDmaTransfer (SISCI 1.x, still
// used by message-passing layers of that era): gather transfers with
// SCIEnqueueDMATransfer, run them with SCIPostDMAQueue, make the queue IDLE
// again with SCIResetDMAQueue. Same engine and states as the start calls.

#[no_mangle]
pub unsafe extern "C" fn SCIEnqueueDMATransfer(
    dq: Handle,
    local_segment: Handle,
    remote_segment: Handle,
    local_offset: c_uint,
    remote_offset: c_uint,
    size: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) -> c_uint {
    // On failure the call still returns the queue's state (what it is now:
    // a refused enqueue leaves it as it was); a bad queue handle reads as
    // ERROR, as in SCIDMAQueueState.
    const FAILED: c_uint = c_uint::MAX;
    // SAFETY: see `set`.
    let r = unsafe {
        report("SCIEnqueueDMATransfer", error, FAILED, || {
            check_flags(flags, FLAG_DMA_READ | FLAG_DMA_POST | FLAG_DMA_WAIT | FLAG_DMA_RESET | DMA_ENGINE_HINTS)?;
            let q = handles::dma_queue(h(dq))?;
            let ls = handles::local_seg(h(local_segment))?;
            let rs = handles::remote_seg(h(remote_segment))?;
            let entries = vec![DmaEntry {
                size: size.into(),
                local_offset: local_offset.into(),
                remote_offset: remote_offset.into(),
            }];
            let t = Transfer { local: DmaLocal::Segment(ls), remote: rs, entries, read: flags & FLAG_DMA_READ != 0 };
            q.enqueue(t)?;
            if flags & FLAG_DMA_POST != 0 {
                // Post at once; with SCI_FLAG_DMA_WAIT the gathered transfers
                // run in this thread before we return; with
                // SCI_FLAG_DMA_RESET a list that succeeds leaves the queue
                // IDLE (a failed one keeps its state, so the failure stays
                // visible).
                q.post_then(None, flags & FLAG_DMA_WAIT != 0, flags & FLAG_DMA_RESET != 0)?;
            }
            Ok(q.state() as c_uint)
        })
    };
    if r != FAILED {
        return r;
    }
    SCIDMAQueueState(dq)
}

#[no_mangle]
pub unsafe extern "C" fn SCIPostDMAQueue(
    dq: Handle,
    callback: *mut c_void,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`; the callback is checked by `callback_of`.
    unsafe {
        report("SCIPostDMAQueue", error, (), || {
            check_flags(flags, FLAG_USE_CALLBACK | FLAG_DMA_WAIT)?;
            let cb = callback_of(flags, callback)?;
            let q = handles::dma_queue(h(dq))?;
            q.post_then(completion(dq, cb, callback_arg), flags & FLAG_DMA_WAIT != 0, false)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIResetDMAQueue(dq: Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIResetDMAQueue", error, (), || {
            check_flags(flags, 0)?;
            handles::dma_queue(h(dq))?.reset()
        })
    }
}

// ---------------------------------------------------------------------------
// DMA channels (vsci_client::DmaChannel says what a channel is here).

#[no_mangle]
pub unsafe extern "C" fn SCIRequestDMAChannel(
    sd: Handle,
    channel: *mut Handle,
    adapter: c_uint,
    dma_type: c_uint,
    channel_id: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: `out` NULL-checks `channel`.
    unsafe {
        report("SCIRequestDMAChannel", error, (), || {
            check_flags(flags, FLAG_DMA_CHANNEL_SHARED)?;
            if channel.is_null() || !DMA_TYPES.contains(&dma_type) {
                return Err(SciError::IllegalParameter);
            }
            handles::desc(h(sd))?;
            check_adapter(adapter)?;
            let id = (channel_id != DMA_CHANNEL_ID_DONTCARE).then_some(channel_id);
            let ch = DmaChannel::request(id, flags & FLAG_DMA_CHANNEL_SHARED != 0, dma_type)?;
            let hnd = handles::insert(Obj::DmaChannel(std::sync::Arc::new(ch)), h(sd));
            out(channel, as_handle(hnd))
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIReturnDMAChannel(channel: Handle, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIReturnDMAChannel", error, (), || {
            let ch = match handles::dma_channel(h(channel)) {
                Ok(c) => c,
                // Returned already by SCIClose or SCITerminate.
                Err(_) if handles::take_orphan(h(channel), handles::Kind::DmaChannel) => return Ok(()),
                Err(e) => return Err(e),
            };
            for q in handles::dma_queues() {
                q.unassign(&ch);
            }
            handles::remove(h(channel));
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIAssignDMAChannel(channel: Handle, dq: Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIAssignDMAChannel", error, (), || {
            check_flags(flags, 0)?;
            let ch = handles::dma_channel(h(channel))?;
            let q = handles::dma_queue(h(dq))?;
            q.assign_channel(Some(&ch));
            Ok(())
        })
    }
}

macro_rules! channel_segment_op {
    ($name:ident, $getter:ident, $kind:expr, |$ch:ident, $s:ident| $body:expr, $release:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(channel: Handle, segment: Handle, flags: c_uint, error: *mut SciErr) {
            // SAFETY: see `set`.
            unsafe {
                report(stringify!($name), error, (), || {
                    check_flags(flags, 0)?;
                    let looked_up =
                        handles::dma_channel(h(channel)).and_then(|c| Ok((c, handles::$getter(h(segment))?)));
                    let ($ch, $s) = match looked_up {
                        Ok(x) => x,
                        // After SCIClose or SCITerminate released the
                        // channel or the segment, unprepare calls succeed.
                        // Neither handle is released by them, so both stay
                        // orphans for their own release calls.
                        Err(_)
                            if $release
                                && (handles::is_orphan(h(channel), handles::Kind::DmaChannel)
                                    || handles::is_orphan(h(segment), $kind)) =>
                        {
                            return Ok(())
                        }
                        Err(e) => return Err(e),
                    };
                    $body
                })
            }
        }
    };
}

channel_segment_op!(
    SCIPrepareLocalSegmentForDMA,
    local_seg,
    handles::Kind::LocalSeg,
    |ch, s| ch.prepare_local(&s),
    false
);
channel_segment_op!(
    SCIPrepareRemoteSegmentForDMA,
    remote_seg,
    handles::Kind::RemoteSeg,
    |ch, s| ch.prepare_remote(&s),
    false
);
channel_segment_op!(
    SCIUnprepareLocalSegmentForDMA,
    local_seg,
    handles::Kind::LocalSeg,
    |ch, s| {
        ch.unprepare(&s);
        Ok(())
    },
    true
);
channel_segment_op!(
    SCIUnprepareRemoteSegmentForDMA,
    remote_seg,
    handles::Kind::RemoteSeg,
    |ch, s| {
        ch.unprepare(&s);
        Ok(())
    },
    true
);

// ---------------------------------------------------------------------------
// Physical DMA (SCI_FLAG_DMA_PHDMA): a privileged interface that programs
// an adapter's DMA engine with bus addresses. A software interconnect has
// no bus addresses to give; declared so programs with such a path build,
// and told plainly at run time.

#[no_mangle]
pub unsafe extern "C" fn SCIphDmaEnqueue(
    _dq: Handle,
    _size: c_uint,
    _local_bus_addr: c_uint,
    _remote_nodeid: c_uint,
    _remote_highaddr: c_uint,
    _remote_lowaddr: c_uint,
    _flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIphDmaEnqueue", error, ()) }
}

#[no_mangle]
pub unsafe extern "C" fn SCIphDmaStart(
    _dq: Handle,
    _callback: *mut c_void,
    _callback_arg: *mut c_void,
    _flags: c_uint,
    error: *mut SciErr,
) -> c_uint {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIphDmaStart", error, QueueState::Error as c_uint) }
}
