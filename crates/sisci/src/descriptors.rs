//! Library, descriptors, nodes: `SCIInitialize`, `SCITerminate`, `SCIOpen`,
//! `SCIClose`, the local node and probing other nodes, error strings
//! (docs/api.md, "Finding the node").

use super::*;

#[no_mangle]
pub unsafe extern "C" fn SCIInitialize(flags: c_uint, error: *mut SciErr) {
    // Nothing to set up: SCIOpen connects lazily. No flags are defined.
    // SAFETY: see `set`.
    unsafe { report("SCIInitialize", error, (), || check_flags(flags, 0)) }
}

#[no_mangle]
pub extern "C" fn SCITerminate() {
    // Release everything the program still holds, and let the release calls
    // programs make after SCITerminate (as they may with Dolphin's library)
    // succeed: every descriptor and everything made through it becomes an
    // orphan (see handles::orphan). Nothing here may unwind into C.
    guard::void("SCITerminate", || {
        for d in handles::descriptors() {
            close_descriptor(d, true);
        }
    });
}

#[no_mangle]
pub unsafe extern "C" fn SCIOpen(sd: *mut Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: report/out only write through caller pointers after NULL checks.
    unsafe {
        report("SCIOpen", error, (), || {
            check_flags(flags, FLAG_THREAD_SAFE)?;
            if sd.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let client = open_client()?;
            let hnd = handles::insert(Obj::Desc(Arc::new(Desc { client })), 0);
            out(sd, as_handle(hnd))
        })
    }
}

/// Release descriptor `d` and everything made through it. The children's
/// handles become orphans, whose release calls succeed once (programs
/// written for Dolphin's library free them after closing the descriptor);
/// so does the descriptor's own handle if `orphan_desc` (SCITerminate
/// closed it, not the program's SCIClose).
pub(crate) fn close_descriptor(d: usize, orphan_desc: bool) {
    let Some(Entry { obj: Obj::Desc(desc), .. }) = handles::remove(d) else { return };
    let children = handles::remove_children(d);
    let orphans: Vec<(usize, handles::Kind)> = children
        .iter()
        .map(|(hnd, e)| (*hnd, e.obj.kind()))
        .chain(orphan_desc.then_some((d, handles::Kind::Desc)))
        .collect();
    for (_, e) in children {
        match e.obj {
            Obj::Map(m) => m.unmap(),
            Obj::LocalIntr(i) | Obj::LocalDataIntr(i) => {
                let _ = i.intr.remove();
            }
            _ => {}
        }
    }
    desc.client.close();
    // Only now, so a release call that succeeds means the node has freed
    // what it named (its ids can be taken again); one racing this close
    // from another thread gets SCI_ERR_ILLEGAL_PARAMETER meanwhile, and a
    // program that loops until SCI_ERR_OK gets there.
    handles::orphan(orphans);
}

#[no_mangle]
pub unsafe extern "C" fn SCIClose(sd: Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIClose", error, (), || {
            check_flags(flags, 0)?;
            if handles::desc(h(sd)).is_err() && handles::take_orphan(h(sd), handles::Kind::Desc) {
                return Ok(()); // closed by SCITerminate
            }
            handles::desc(h(sd))?;
            close_descriptor(h(sd), false);
            Ok(())
        })
    }
}

/// Ask the node for its id (used where no descriptor is at hand).
pub(crate) fn local_node_id() -> Result<u32, SciError> {
    let c = open_client()?;
    let id = c.node_id();
    c.close();
    Ok(id)
}

#[no_mangle]
pub unsafe extern "C" fn SCIGetLocalNodeId(adapter: c_uint, node_id: *mut c_uint, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set` and `out`.
    unsafe {
        report("SCIGetLocalNodeId", error, (), || {
            check_flags(flags, 0)?;
            check_adapter(adapter)?;
            if node_id.is_null() {
                return Err(SciError::IllegalParameter);
            }
            out(node_id, local_node_id()?)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIProbeNode(
    sd: Handle,
    adapter: c_uint,
    node_id: c_uint,
    flags: c_uint,
    error: *mut SciErr,
) -> c_int {
    // SAFETY: see `set`.
    unsafe {
        report("SCIProbeNode", error, 0, || {
            check_flags(flags, 0)?;
            check_adapter(adapter)?;
            let d = handles::desc(h(sd))?;
            if d.client.probe_node(node_id)? {
                Ok(1)
            } else {
                Err(SciError::NoSuchNodeid)
            }
        })
    }
}

pub(crate) static ERROR_STRINGS: std::sync::OnceLock<Vec<(u32, std::ffi::CString)>> = std::sync::OnceLock::new();

#[no_mangle]
pub extern "C" fn SCIGetErrorString(error: SciErr) -> *const c_char {
    static UNKNOWN: &[u8] = b"Unknown SISCI error code\0";
    guard::value("SCIGetErrorString", UNKNOWN.as_ptr().cast(), || {
        let table = ERROR_STRINGS.get_or_init(|| {
            SciError::ALL
                .iter()
                .map(|e| (*e as u32, std::ffi::CString::new(format!("{}: {}", e.c_name(), e.description())).unwrap()))
                .collect()
        });
        table.iter().find(|(v, _)| *v == error).map(|(_, s)| s.as_ptr()).unwrap_or(UNKNOWN.as_ptr().cast())
    })
}
