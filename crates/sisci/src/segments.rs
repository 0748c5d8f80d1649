//! Local and remote segments: creating, sharing, preparing, making
//! available, connecting, events and removal (docs/api.md, "Local
//! segments", "Remote segments").

use super::*;

#[no_mangle]
pub unsafe extern "C" fn SCICreateSegment(
    sd: Handle,
    segment: *mut Handle,
    segment_id: c_uint,
    size: usize,
    callback: CbLocalSeg,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: pointers are NULL-checked; callbacks are called with the
    // argument the program gave us.
    unsafe {
        report("SCICreateSegment", error, (), || {
            check_flags(
                flags,
                FLAG_USE_CALLBACK
                    | FLAG_AUTO_ID
                    | FLAG_EMPTY
                    | FLAG_PRIVATE
                    | FLAG_DMA_SOURCE_ONLY
                    | SEG_DMA_ENGINE_HINTS
                    | FLAG_BROADCAST
                    | SEG_HARDWARE_MEMORY_FLAGS,
            )?;
            if flags & SEG_HARDWARE_MEMORY_FLAGS != 0 {
                return Err(SciError::FlagNotImplemented);
            }
            if segment.is_null() || size == 0 {
                return Err(SciError::IllegalParameter);
            }
            let callback = wanted_callback(flags, callback)?;
            let d = handles::desc(h(sd))?;
            let id = (flags & FLAG_AUTO_ID == 0).then_some(segment_id);
            let seg =
                d.client.create_segment_opts(id, size as u64, flags & FLAG_EMPTY != 0, flags & FLAG_BROADCAST != 0)?;
            // SCI_FLAG_PRIVATE: a segment only its creator uses (a DMA
            // source, a local buffer); no connection will ever reach it.
            seg.private.store(flags & FLAG_PRIVATE != 0, std::sync::atomic::Ordering::Relaxed);
            out(segment, local_seg_handle(sd, seg, callback, callback_arg))
        })
    }
}

/// The callback to install: the program's, with `SCI_FLAG_USE_CALLBACK`
/// (which without one is an error), else none.
pub(crate) fn wanted_callback<F>(flags: c_uint, callback: Option<F>) -> Result<Option<F>, SciError> {
    match (flags & FLAG_USE_CALLBACK != 0, callback) {
        (true, None) => Err(SciError::IllegalParameter),
        (true, cb) => Ok(cb),
        (false, _) => Ok(None),
    }
}

/// Give a program its handle on a local segment, with its callback (if it
/// asked for one) receiving the segment's events.
pub(crate) fn local_seg_handle(
    sd: Handle,
    seg: Arc<vsci_client::LocalSegment>,
    callback: CbLocalSeg,
    callback_arg: *mut c_void,
) -> Handle {
    let hnd = handles::insert(Obj::LocalSeg(seg.clone()), h(sd));
    if let Some(cb) = callback {
        let arg = callback_arg as usize;
        seg.events.set_callback(Box::new(move |ev: SegEvent| {
            // A panic of ours here keeps the callback (see `guard`).
            guard::value("cb_local_segment", true, || {
                // SAFETY: calling the program's callback with its own
                // argument, as SISCI specifies.
                let action = unsafe {
                    cb(arg as *mut c_void, as_handle(hnd), ev.reason as c_uint, ev.node_id, 0, SciError::Ok as c_uint)
                };
                action != CALLBACK_CANCEL
            })
        }));
    }
    as_handle(hnd)
}

handle_op!(SCIShareSegment, local_seg, |s| s.share());

#[no_mangle]
pub unsafe extern "C" fn SCIAttachLocalSegment(
    sd: Handle,
    segment: *mut Handle,
    segment_id: c_uint,
    size: *mut usize,
    callback: CbLocalSeg,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: pointers are NULL-checked (`size` is optional); the callback
    // is called with the argument the program gave us.
    unsafe {
        report("SCIAttachLocalSegment", error, (), || {
            check_flags(flags, FLAG_USE_CALLBACK)?;
            if segment.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let callback = wanted_callback(flags, callback)?;
            let d = handles::desc(h(sd))?;
            let seg = d.client.attach_segment(segment_id)?;
            if !size.is_null() {
                size.write_unaligned(seg.size as usize);
            }
            out(segment, local_seg_handle(sd, seg, callback, callback_arg))
        })
    }
}

macro_rules! seg_op {
    ($name:ident, $allowed:expr, |$s:ident, $flags:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(segment: Handle, adapter: c_uint, $flags: c_uint, error: *mut SciErr) {
            // SAFETY: see `set`.
            unsafe {
                report(stringify!($name), error, (), || {
                    check_flags($flags, $allowed)?;
                    let $s = handles::local_seg(h(segment))?;
                    check_adapter(adapter)?;
                    $body
                })
            }
        }
    };
}

// SCI_FLAG_BROADCAST: reflective-memory samples pass it here too; membership
// is decided at SCICreateSegment, so it changes nothing.
seg_op!(SCIPrepareSegment, FLAG_DMA_SOURCE_ONLY | SEG_DMA_ENGINE_HINTS | FLAG_BROADCAST, |s, _f| s.prepare());
seg_op!(SCISetSegmentAvailable, 0, |s, _f| s.set_available());
seg_op!(SCISetSegmentUnavailable, FLAG_NOTIFY | FLAG_FORCE_DISCONNECT, |s, f| s
    .set_unavailable(f & FLAG_NOTIFY != 0, f & FLAG_FORCE_DISCONNECT != 0));

/// `SCIRemoveSegment`. `SCI_FLAG_FORCE_REMOVE`: remove it even while this
/// program still maps it (its maps stay valid memory, no longer shared,
/// until unmapped). Connected peers never block a removal: they get
/// `SCI_CB_LOST` either way (docs/api.md, "Conformance").
#[no_mangle]
pub unsafe extern "C" fn SCIRemoveSegment(segment: Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIRemoveSegment", error, (), || {
            check_flags(flags, FLAG_FORCE_REMOVE)?;
            let s = match handles::local_seg(h(segment)) {
                Ok(s) => s,
                // Released already by SCIClose or SCITerminate.
                Err(_) if handles::take_orphan(h(segment), handles::Kind::LocalSeg) => return Ok(()),
                Err(e) => return Err(e),
            };
            s.remove_with(flags & FLAG_FORCE_REMOVE != 0)?;
            handles::remove(h(segment));
            Ok(())
        })
    }
}

#[no_mangle]
pub extern "C" fn SCIGetLocalSegmentSize(segment: Handle) -> usize {
    guard::value("SCIGetLocalSegmentSize", 0, || handles::local_seg(h(segment)).map(|s| s.size as usize).unwrap_or(0))
}

#[no_mangle]
pub extern "C" fn SCIGetLocalSegmentId(segment: Handle) -> c_uint {
    guard::value("SCIGetLocalSegmentId", 0, || handles::local_seg(h(segment)).map(|s| s.segment_id).unwrap_or(0))
}

#[no_mangle]
pub unsafe extern "C" fn SCIWaitForLocalSegmentEvent(
    segment: Handle,
    source_node_id: *mut c_uint,
    local_adapter_no: *mut c_uint,
    timeout: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) -> c_uint {
    // SAFETY: out-pointers are optional here and NULL-checked.
    unsafe {
        report("SCIWaitForLocalSegmentEvent", error, 0, || {
            check_flags(flags, 0)?;
            let s = handles::local_seg(h(segment))?;
            if s.events.has_callback() {
                return Err(SciError::IllegalOperation);
            }
            let ev = s.events.wait(timeout)?;
            if !source_node_id.is_null() {
                source_node_id.write_unaligned(ev.node_id);
            }
            if !local_adapter_no.is_null() {
                local_adapter_no.write_unaligned(0);
            }
            Ok(ev.reason as c_uint)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIRegisterSegmentMemory(
    address: *mut c_void,
    size: usize,
    segment: Handle,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`; the library checks the range is the program's own
    // plain memory before touching it.
    unsafe {
        report("SCIRegisterSegmentMemory", error, (), || {
            check_flags(flags, 0)?;
            handles::local_seg(h(segment))?.register_memory(address as usize, size)
        })
    }
}

// ---------------------------------------------------------------------------
// Remote segments

#[no_mangle]
pub unsafe extern "C" fn SCIConnectSegment(
    sd: Handle,
    segment: *mut Handle,
    node_id: c_uint,
    segment_id: c_uint,
    adapter: c_uint,
    callback: CbRemoteSeg,
    callback_arg: *mut c_void,
    timeout: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see SCICreateSegment.
    unsafe {
        report("SCIConnectSegment", error, (), || {
            check_flags(flags, FLAG_USE_CALLBACK | FLAG_ASYNCHRONOUS_CONNECT | SEG_DMA_ENGINE_HINTS | FLAG_BROADCAST)?;
            if segment.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let callback = wanted_callback(flags, callback)?;
            let d = handles::desc(h(sd))?;
            check_adapter(adapter)?;
            // Reflective memory: the group of every node's broadcast segment
            // with this id. Dolphin names it with node id
            // DIS_BROADCAST_NODEID_GROUP_ALL and the flag; either will do.
            let group = flags & FLAG_BROADCAST != 0 || node_id == vsci_client::GROUP_ALL;
            let rs = if group {
                d.client.connect_group(segment_id, timeout)?
            } else {
                d.client.connect_segment(node_id, segment_id, timeout)?
            };
            let hnd = handles::insert(Obj::RemoteSeg(rs.clone()), h(sd));
            if let Some(cb) = callback {
                let arg = callback_arg as usize;
                let f = move |ev: SegEvent| {
                    guard::value("cb_remote_segment", true, || {
                        // SAFETY: the program's callback with its own argument.
                        let action = cb(arg as *mut c_void, as_handle(hnd), ev.reason as c_uint, ev.status as c_uint);
                        action != CALLBACK_CANCEL
                    })
                };
                rs.events.set_callback(Box::new(f));
            }
            if flags & FLAG_ASYNCHRONOUS_CONNECT != 0 {
                // An asynchronous connect reports completion as a CONNECT
                // event (to the callback, or to SCIWaitForRemoteSegmentEvent);
                // ours completed already, so say so at once.
                rs.events.deliver(SegEvent { reason: SegmentEvent::Connect, node_id, status: SciError::Ok });
            }
            out(segment, as_handle(hnd))
        })
    }
}

release_op!(SCIDisconnectSegment, remote_seg, RemoteSeg, |s| s.disconnect());

#[no_mangle]
pub extern "C" fn SCIGetRemoteSegmentSize(segment: Handle) -> usize {
    guard::value("SCIGetRemoteSegmentSize", 0, || handles::remote_seg(h(segment)).map(|s| s.size as usize).unwrap_or(0))
}

#[no_mangle]
pub extern "C" fn SCIGetRemoteSegmentId(segment: Handle) -> c_uint {
    guard::value("SCIGetRemoteSegmentId", 0, || handles::remote_seg(h(segment)).map(|s| s.segment_id).unwrap_or(0))
}

#[no_mangle]
pub extern "C" fn SCIGetRemoteSegmentNodeId(segment: Handle) -> c_uint {
    guard::value("SCIGetRemoteSegmentNodeId", 0, || handles::remote_seg(h(segment)).map(|s| s.node_id).unwrap_or(0))
}

#[no_mangle]
pub unsafe extern "C" fn SCIWaitForRemoteSegmentEvent(
    segment: Handle,
    status: *mut SciErr,
    timeout: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) -> c_uint {
    // SAFETY: `status` is optional and NULL-checked.
    unsafe {
        report("SCIWaitForRemoteSegmentEvent", error, 0, || {
            check_flags(flags, 0)?;
            let s = handles::remote_seg(h(segment))?;
            if s.events.has_callback() {
                return Err(SciError::IllegalOperation);
            }
            let ev = s.events.wait(timeout)?;
            if !status.is_null() {
                status.write_unaligned(ev.status as c_uint);
            }
            Ok(ev.reason as c_uint)
        })
    }
}
