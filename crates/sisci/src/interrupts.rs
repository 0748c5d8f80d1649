//! Interrupts and data interrupts: creating, waiting, connecting,
//! triggering (docs/api.md, "Interrupts").

use super::*;

pub(crate) unsafe fn create_intr(
    kind: IntrKind,
    sd: Handle,
    interrupt: *mut Handle,
    adapter: c_uint,
    number: *mut c_uint,
    has_cb: bool,
    flags: c_uint,
) -> Result<(usize, Arc<LocalIntr>), SciError> {
    check_flags(flags, FLAG_USE_CALLBACK | FLAG_FIXED_INTNO | FLAG_SHARED_INT | FLAG_COUNTING_INT)?;
    if flags & FLAG_SHARED_INT != 0 {
        return Err(SciError::FlagNotImplemented);
    }
    if interrupt.is_null() || number.is_null() {
        return Err(SciError::IllegalParameter);
    }
    if flags & FLAG_USE_CALLBACK != 0 && !has_cb {
        return Err(SciError::IllegalParameter);
    }
    let d = handles::desc(h(sd))?;
    check_adapter(adapter)?;
    // SAFETY: NULL-checked above.
    let hint = unsafe { number.read_unaligned() };
    let intr = d.client.create_interrupt(kind, hint, flags & FLAG_FIXED_INTNO != 0)?;
    let li = Arc::new(LocalIntr { intr: intr.clone(), callback_active: Arc::new(AtomicBool::new(false)) });
    let obj = match kind {
        IntrKind::Plain => Obj::LocalIntr(li.clone()),
        IntrKind::Data => Obj::LocalDataIntr(li.clone()),
    };
    let hnd = handles::insert(obj, h(sd));
    // SAFETY: NULL-checked above.
    unsafe {
        number.write_unaligned(intr.number);
        interrupt.write_unaligned(as_handle(hnd));
    }
    Ok((hnd, li))
}

/// Runs `body` in a thread named `name` as the interrupt's callback:
/// SCIWaitFor*Interrupt refuse the interrupt until `body` returns.
fn spawn_callback(
    li: &Arc<LocalIntr>,
    name: &str,
    body: impl FnOnce(&LocalIntr) + Send + 'static,
) -> Result<(), SciError> {
    li.callback_active.store(true, Ordering::SeqCst);
    let li2 = li.clone();
    vsci_sys::signals::spawn(std::thread::Builder::new().name(name.into()), move || {
        body(&li2);
        li2.callback_active.store(false, Ordering::SeqCst);
    })
    .map_err(|_| SciError::System)?;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn SCICreateInterrupt(
    sd: Handle,
    interrupt: *mut Handle,
    adapter: c_uint,
    interrupt_no: *mut c_uint,
    callback: CbIntr,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `create_intr`; the callback runs with the program's arg.
    unsafe {
        report("SCICreateInterrupt", error, (), || {
            let (hnd, li) =
                create_intr(IntrKind::Plain, sd, interrupt, adapter, interrupt_no, callback.is_some(), flags)?;
            if flags & FLAG_USE_CALLBACK != 0 {
                let cb = callback.expect("checked");
                let arg = callback_arg as usize;
                spawn_callback(&li, "vsci-intr-cb", move |li2| {
                    // A panic of ours ends the callbacks (logged); the
                    // interrupt can then be waited on.
                    guard::void("cb_interrupt", || loop {
                        match li2.intr.wait(vsci_client::INFINITE) {
                            Ok(()) => {
                                // SAFETY: the program's callback with its own argument.
                                if cb(arg as *mut c_void, as_handle(hnd), SciError::Ok as c_uint) == CALLBACK_CANCEL {
                                    break;
                                }
                            }
                            Err(e @ SciError::NoLinkAccess) => {
                                // The node went away: say so once, with
                                // the error, instead of falling silent.
                                // SAFETY: as above.
                                cb(arg as *mut c_void, as_handle(hnd), e as c_uint);
                                break;
                            }
                            Err(_) => break,
                        }
                    });
                })?;
            }
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCICreateDataInterrupt(
    sd: Handle,
    interrupt: *mut Handle,
    adapter: c_uint,
    interrupt_no: *mut c_uint,
    callback: CbDataIntr,
    callback_arg: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see SCICreateInterrupt.
    unsafe {
        report("SCICreateDataInterrupt", error, (), || {
            let (hnd, li) =
                create_intr(IntrKind::Data, sd, interrupt, adapter, interrupt_no, callback.is_some(), flags)?;
            if flags & FLAG_USE_CALLBACK != 0 {
                let cb = callback.expect("checked");
                let arg = callback_arg as usize;
                spawn_callback(&li, "vsci-dintr-cb", move |li2| {
                    // As for SCICreateInterrupt's callbacks.
                    guard::void("cb_data_interrupt", || {
                        let mut buf = vec![0u8; vsci_proto::intr::DATA_MAX];
                        loop {
                            match li2.intr.wait_data(&mut buf, vsci_client::INFINITE) {
                                Ok(vsci_client::DataWait::Got(n)) => {
                                    // SAFETY: the program's callback with its own
                                    // argument and a buffer valid for the call.
                                    let action = cb(
                                        arg as *mut c_void,
                                        as_handle(hnd),
                                        buf.as_mut_ptr().cast(),
                                        n as c_uint,
                                        SciError::Ok as c_uint,
                                    );
                                    if action == CALLBACK_CANCEL {
                                        break;
                                    }
                                }
                                Err(e @ SciError::NoLinkAccess) => {
                                    // The node went away: report it once (no data).
                                    // SAFETY: as above, with a zero length.
                                    cb(arg as *mut c_void, as_handle(hnd), buf.as_mut_ptr().cast(), 0, e as c_uint);
                                    break;
                                }
                                _ => break,
                            }
                        }
                    });
                })?;
            }
            Ok(())
        })
    }
}

/// The interrupt a SCIWaitFor*Interrupt call names (looked up by `get`);
/// refused while a callback waits on it.
fn waitable(
    interrupt: Handle,
    flags: c_uint,
    get: fn(usize) -> Result<Arc<LocalIntr>, SciError>,
) -> Result<Arc<LocalIntr>, SciError> {
    check_flags(flags, 0)?;
    let li = get(h(interrupt))?;
    if li.callback_active.load(Ordering::SeqCst) {
        return Err(SciError::IllegalOperation);
    }
    Ok(li)
}

#[no_mangle]
pub unsafe extern "C" fn SCIWaitForInterrupt(interrupt: Handle, timeout: c_uint, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIWaitForInterrupt", error, (), || {
            let li = waitable(interrupt, flags, handles::local_intr)?;
            li.intr.wait(timeout)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIWaitForDataInterrupt(
    interrupt: Handle,
    data: *mut c_void,
    length: *mut c_uint,
    timeout: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: `length` and `data` are NULL-checked; the program promises
    // `*length` writable bytes at `data`.
    unsafe {
        report("SCIWaitForDataInterrupt", error, (), || {
            let li = waitable(interrupt, flags, handles::local_data_intr)?;
            if length.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let cap = length.read_unaligned() as usize;
            if data.is_null() && cap > 0 {
                return Err(SciError::IllegalParameter);
            }
            let buf: &mut [u8] =
                if cap == 0 { &mut [] } else { std::slice::from_raw_parts_mut(data.cast::<u8>(), cap) };
            match li.intr.wait_data(buf, timeout)? {
                vsci_client::DataWait::Got(n) => {
                    length.write_unaligned(n as c_uint);
                    Ok(())
                }
                vsci_client::DataWait::TooSmall(n) => {
                    length.write_unaligned(n as c_uint);
                    Err(SciError::OutOfRange)
                }
            }
        })
    }
}

release_op!(SCIRemoveInterrupt, local_intr, LocalIntr, |i| i.intr.remove());

release_op!(SCIRemoveDataInterrupt, local_data_intr, LocalDataIntr, |i| i.intr.remove());

pub(crate) unsafe fn connect_intr(
    kind: IntrKind,
    sd: Handle,
    interrupt: *mut Handle,
    node_id: c_uint,
    adapter: c_uint,
    number: c_uint,
    timeout: c_uint,
    flags: c_uint,
) -> Result<(), SciError> {
    // SCI_FLAG_BROADCAST (or node DIS_BROADCAST_NODEID_GROUP_ALL): interrupt
    // `number` of every node that has one; a trigger reaches all of them.
    check_flags(flags, FLAG_BROADCAST)?;
    if interrupt.is_null() {
        return Err(SciError::IllegalParameter);
    }
    let d = handles::desc(h(sd))?;
    check_adapter(adapter)?;
    let ri = if flags & FLAG_BROADCAST != 0 || node_id == vsci_client::GROUP_ALL {
        d.client.connect_interrupt_group(kind, number, timeout).map_err(|e| match e {
            SciError::NoSuchSegment => SciError::ConnectionRefused,
            e => e,
        })?
    } else {
        d.client.connect_interrupt(kind, node_id, number, timeout)?
    };
    let obj = match kind {
        IntrKind::Plain => Obj::RemoteIntr(ri),
        IntrKind::Data => Obj::RemoteDataIntr(ri),
    };
    let hnd = handles::insert(obj, h(sd));
    // SAFETY: NULL-checked above.
    unsafe { out(interrupt, as_handle(hnd)) }
}

// SCIConnectInterrupt and SCIConnectDataInterrupt: `connect_intr` for
// one kind.
macro_rules! connect_intr_op {
    ($name:ident, $kind:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            sd: Handle,
            interrupt: *mut Handle,
            node_id: c_uint,
            adapter: c_uint,
            interrupt_no: c_uint,
            timeout: c_uint,
            flags: c_uint,
            error: *mut SciErr,
        ) {
            // SAFETY: see `connect_intr`.
            unsafe {
                report(stringify!($name), error, (), || {
                    connect_intr(IntrKind::$kind, sd, interrupt, node_id, adapter, interrupt_no, timeout, flags)
                })
            }
        }
    };
}

connect_intr_op!(SCIConnectInterrupt, Plain);
connect_intr_op!(SCIConnectDataInterrupt, Data);

release_op!(SCIDisconnectInterrupt, remote_intr, RemoteIntr, |i| i.disconnect());

release_op!(SCIDisconnectDataInterrupt, remote_data_intr, RemoteDataIntr, |i| i.disconnect());

handle_op!(SCITriggerInterrupt, remote_intr, |i| i.trigger());

// Conditional interrupts: an interrupt raised by a fetch-and-add through a
// SCI_FLAG_CONDITIONAL_INTERRUPT_MAP map finding zero. No issue offers them
// yet (the map flag is refused the same way); declared so programs that
// have such a path build, and told plainly at run time.

#[no_mangle]
pub unsafe extern "C" fn SCIRegisterInterruptFlag(
    _adapter: c_uint,
    _interrupt: *mut Handle,
    _segment: Handle,
    _offset: c_uint,
    _callback: CbIntr,
    _callback_arg: *mut c_void,
    _flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIRegisterInterruptFlag", error, ()) }
}

macro_rules! conditional_interrupt_op {
    ($name:ident $(, $extra:ident: $ty:ty)?) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(_interrupt: Handle, $($extra: $ty,)? _flags: c_uint, error: *mut SciErr) {
            $(let _ = $extra;)?
            // SAFETY: see `set`.
            unsafe { crate::not_implemented(stringify!($name), error, ()) }
        }
    };
}

conditional_interrupt_op!(SCIEnableConditionalInterrupt);
conditional_interrupt_op!(SCIDisableConditionalInterrupt);
conditional_interrupt_op!(SCIGetConditionalInterruptTrigCounter, _counter: *mut c_uint);

#[no_mangle]
pub unsafe extern "C" fn SCITriggerDataInterrupt(
    interrupt: Handle,
    data: *mut c_void,
    length: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: the program promises `length` readable bytes at `data`.
    unsafe {
        report("SCITriggerDataInterrupt", error, (), || {
            check_flags(flags, 0)?;
            let ri = handles::remote_data_intr(h(interrupt))?;
            if length as usize > vsci_proto::intr::DATA_MAX {
                return Err(SciError::OutOfRange);
            }
            if data.is_null() && length > 0 {
                return Err(SciError::IllegalParameter);
            }
            let payload: &[u8] =
                if length == 0 { &[] } else { std::slice::from_raw_parts(data.cast::<u8>(), length as usize) };
            ri.trigger_data(payload)
        })
    }
}
