//! `libsisci`: the SISCI C API (see include/sisci_api.h and docs/api.md)
//! implemented on top of `vsci-client`.
//!
//! Every exported function validates its arguments before acting: handles
//! through the handle table, out-pointers for NULL, flags against the set
//! the call accepts, sizes and offsets against the object. Errors are
//! reported through `sci_error_t *error` with SISCI's numeric values.

#![allow(non_snake_case, clippy::missing_safety_doc)]

#[cfg(test)]
mod c_headers;
mod dma;
#[allow(unused_imports)]
pub(crate) use dma::*;
mod dolphin_abi;
mod guard;
mod handles;
#[cfg(target_arch = "x86_64")]
mod interpose;
mod memcpy;
mod signals;
mod tmem;

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use handles::{Desc, Entry, LocalIntr, Obj, Sequence};
use vsci_client::{Client, IntrKind, Map, MapFlags, MapTarget, SciError, SegEvent, SegmentEvent};

type SciErr = c_uint;
type Handle = *mut c_void;

// Flag values, as in sisci_types.h (c_headers.rs checks every value here,
// in dma.rs and in dolphin_abi.rs against the headers).
const FLAG_USE_CALLBACK: c_uint = 0x1;
const FLAG_EMPTY: c_uint = 0x2;
const FLAG_PRIVATE: c_uint = 0x4;
const FLAG_DMA_SOURCE_ONLY: c_uint = 0x8;
const FLAG_AUTO_ID: c_uint = 0x2000_0000;
const FLAG_ASYNCHRONOUS_CONNECT: c_uint = 0x10000;
const FLAG_FORCE_DISCONNECT: c_uint = 0x20000;
const FLAG_NOTIFY: c_uint = 0x80000;
const FLAG_THREAD_SAFE: c_uint = 0x40_0000;
/// `SCI_FLAG_FORCE_REMOVE` (on `SCIRemoveSegment`; `SCIRemoveDMAQueue` has
/// its own, the same bit).
const FLAG_FORCE_REMOVE: c_uint = 0x20;
const FLAG_FIXED_MAP_ADDR: c_uint = 0x1;
const FLAG_READONLY_MAP: c_uint = 0x2;
const FLAG_BROADCAST: c_uint = 0x40000;
const FLAG_CONDITIONAL_INTERRUPT_MAP: c_uint = 0x8;
const FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP: c_uint = 0x10;
const FLAG_LOCK_OPERATION: c_uint = 0x4;
/// `SCI_FLAG_DMA_GLOBAL`, `_SYSDMA`, `_ADAPTER` on segment calls: which
/// hardware DMA engine will move the segment's bytes. vsci has one engine
/// that reaches every segment, so they are accepted and change nothing.
const SEG_DMA_ENGINE_HINTS: c_uint = 0x40 | 0x100 | 0x800;
/// Segment flags for memory vsci cannot give a segment: physical memory by
/// bus address, CUDA and SCIF (Xeon Phi) buffers.
const SEG_HARDWARE_MEMORY_FLAGS: c_uint = 0x1000 | 0x2000 | 0x4000;
/// Map flags that only tune hardware paths (IO space, prefetch, gathering,
/// loopback, DMOVE, caching, packet size); memory maps accept and ignore them.
const MAP_HINT_FLAGS: c_uint = 0x80 | 0x100 | 0x200 | 0x400 | 0x800 | 0x1000 | 0x2000 | 0x4000 | 0x0800_0000;
/// `SCI_FLAG_NO_MEMORY_LOOPBACK_MAP`: a map of a reflective-memory group
/// leaves this node's own member out.
const FLAG_NO_MEMORY_LOOPBACK_MAP: c_uint = 0x800;
/// Real SISCI map flags whose behaviour vsci does not offer yet.
const MAP_UNIMPLEMENTED_FLAGS: c_uint =
    FLAG_LOCK_OPERATION | FLAG_CONDITIONAL_INTERRUPT_MAP | FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP;
const FLAG_BLOCK_READ: c_uint = 0x40;
const FLAG_ERROR_CHECK: c_uint = 0x80;
const FLAG_FLUSH_CPU_BUFFERS_ONLY: c_uint = 0x100;
const FLAG_NO_FLUSH: c_uint = 0x200;
const FLAG_NO_STORE_BARRIER: c_uint = 0x400;
const FLAG_FAST_BARRIER: c_uint = 0x1000;
const FLAG_CACHE_FLUSH: c_uint = 0x10_0000;
const FLAG_CACHE_INVALIDATE: c_uint = 0x20_0000;
const FLAG_FIXED_INTNO: c_uint = 0x2;
const FLAG_SHARED_INT: c_uint = 0x4;
const FLAG_COUNTING_INT: c_uint = 0x20;

const SEQ_OK: c_uint = 0;
const SEQ_NOT_RETRIABLE: c_uint = 2;
const CALLBACK_CANCEL: c_uint = 1;

// Query commands and sub-commands, as in sisci_types.h.
const Q_VENDORID: c_uint = 1;
const Q_API: c_uint = 2;
const Q_ADAPTER: c_uint = 3;
const Q_SYSTEM: c_uint = 4;
const Q_LOCAL_SEGMENT: c_uint = 5;
const Q_REMOTE_SEGMENT: c_uint = 6;
const Q_MAP: c_uint = 7;
const Q_MAP_MAPPED_TO_LOCAL_TARGET: c_uint = 0x500;
const Q_ADAPTER_DMA_SIZE_ALIGNMENT: c_uint = 0x100;
const Q_ADAPTER_DMA_OFFSET_ALIGNMENT: c_uint = 0x101;
const Q_ADAPTER_DMA_MTU: c_uint = 0x102;
const Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE: c_uint = 0x103;
const Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE: c_uint = 0x104;
const Q_ADAPTER_NODEID: c_uint = 0x105;
const Q_ADAPTER_SERIAL_NUMBER: c_uint = 0x106;
const Q_ADAPTER_CARD_TYPE: c_uint = 0x107;
const Q_ADAPTER_NUMBER_OF_STREAMS: c_uint = 0x108;
const Q_ADAPTER_STREAM_BUFFER_SIZE: c_uint = 0x109;
const Q_ADAPTER_CONFIGURED: c_uint = 0x10A;
const Q_ADAPTER_LINK_OPERATIONAL: c_uint = 0x10B;
const Q_ADAPTER_HW_LINK_STATUS_IS_OK: c_uint = 0x10C;
const Q_ADAPTER_NUMBER: c_uint = 0x10D;
const Q_ADAPTER_INSTANCE_NUMBER: c_uint = 0x10E;
const Q_ADAPTER_FIRMWARE_OK: c_uint = 0x10F;
const Q_ADAPTER_CONNECTED_TO_SWITCH: c_uint = 0x110;
const Q_ADAPTER_ATT_PAGE_SIZE: c_uint = 0x111;
const Q_ADAPTER_DMA_AVAILABLE: c_uint = 0x114;
const Q_SYSTEM_HOSTBRIDGE: c_uint = 0x200;
const Q_SYSTEM_WRITE_POSTING_ENABLED: c_uint = 0x201;
const Q_SYSTEM_WRITE_COMBINING_ENABLED: c_uint = 0x202;
const ADAPTER_CARD_TYPE_VSCI: c_uint = 0x7653;

type CbLocalSeg = Option<unsafe extern "C" fn(*mut c_void, Handle, c_uint, c_uint, c_uint, SciErr) -> c_uint>;
type CbRemoteSeg = Option<unsafe extern "C" fn(*mut c_void, Handle, c_uint, SciErr) -> c_uint>;
type CbIntr = Option<unsafe extern "C" fn(*mut c_void, Handle, SciErr) -> c_uint>;
type CbDataIntr = Option<unsafe extern "C" fn(*mut c_void, Handle, *mut c_void, c_uint, SciErr) -> c_uint>;

/// Write `e` through the caller's error pointer, if it gave one.
unsafe fn set(error: *mut SciErr, e: SciError) {
    if !error.is_null() {
        // SAFETY: the caller passed a pointer to its sci_error_t (checked
        // non-NULL); writing one 32-bit value is all the API promises.
        unsafe { error.write_unaligned(e as c_uint) };
    }
}

/// Run `f`, the body of exported call `name`, and report its outcome
/// through `error`; on failure return `dflt`. A panic (a bug of ours) is
/// logged and reported as `SCI_ERR_SYSTEM` (see `guard`).
unsafe fn report<T>(name: &'static str, error: *mut SciErr, dflt: T, f: impl FnOnce() -> Result<T, SciError>) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        guard::test_panic(name);
        f()
    })) {
        Ok(Ok(v)) => {
            // SAFETY: see `set`.
            unsafe { set(error, SciError::Ok) };
            v
        }
        Ok(Err(e)) => {
            // SAFETY: see `set`.
            unsafe { set(error, e) };
            dflt
        }
        Err(p) => {
            // A bug of ours must not unwind into C.
            guard::caught(name, p);
            // SAFETY: see `set`.
            unsafe { set(error, SciError::System) };
            dflt
        }
    }
}

/// A call vsci does not offer: `SCI_ERR_NOT_IMPLEMENTED`, through the
/// guard like every other call.
unsafe fn not_implemented<T>(name: &'static str, error: *mut SciErr, dflt: T) -> T {
    // SAFETY: see `set`.
    unsafe { report(name, error, dflt, || Err(SciError::NotImplemented)) }
}

fn check_flags(flags: c_uint, allowed: c_uint) -> Result<(), SciError> {
    if flags & !allowed != 0 {
        Err(SciError::IllegalFlag)
    } else {
        Ok(())
    }
}

fn check_adapter(adapter: c_uint) -> Result<(), SciError> {
    if adapter == 0 {
        Ok(())
    } else {
        Err(SciError::NoSuchAdapterno)
    }
}

/// Write an output value through a caller pointer, or fail on NULL.
unsafe fn out<T>(p: *mut T, v: T) -> Result<(), SciError> {
    if p.is_null() {
        return Err(SciError::IllegalParameter);
    }
    // SAFETY: non-NULL pointer supplied by the caller for exactly this
    // output; unaligned write tolerates packed caller structs.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

fn h(p: Handle) -> usize {
    p as usize
}

fn as_handle(v: usize) -> Handle {
    v as Handle
}

fn verbose() -> bool {
    !matches!(std::env::var("VSCI_LOG").as_deref(), Ok("off" | "0" | "none"))
}

/// The library's log lines go to stderr, errors only unless `VSCI_LOG`
/// asks for more (`warn`, `info`, `debug`, `trace`) or less (`off`): a
/// library must not chatter into a program's output by default.
struct StderrLog(log::LevelFilter);

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.0
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("vsci[{}] {}: {}", std::process::id(), r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let level = match std::env::var("VSCI_LOG").as_deref() {
            Ok("off" | "0" | "none") => log::LevelFilter::Off,
            Ok("warn") => log::LevelFilter::Warn,
            Ok("info") => log::LevelFilter::Info,
            Ok("debug") => log::LevelFilter::Debug,
            Ok("trace") => log::LevelFilter::Trace,
            _ => log::LevelFilter::Error,
        };
        if log::set_boxed_logger(Box::new(StderrLog(level))).is_ok() {
            log::set_max_level(level);
        }
    });
}

fn open_client() -> Result<Client, SciError> {
    init_logging();
    let path = vsci_proto::socket_path();
    let name = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "sisci".into());
    Client::connect_auto(&path, &name).inspect_err(|e| {
        // A permission refusal was already explained (socket, owner, mode)
        // by the client library's error log.
        if verbose() && *e != SciError::Access {
            eprintln!("vsci: cannot reach vscid at {} ({}); is the node running? (VSCI_SOCKET selects the socket)", path.display(), e.c_name());
        }
    })
}

// ---------------------------------------------------------------------------
// Library, descriptors, nodes

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
fn close_descriptor(d: usize, orphan_desc: bool) {
    let Some(Entry { obj: Obj::Desc(desc), .. }) = handles::remove(d) else { return };
    let children = handles::remove_children(d);
    let orphans: Vec<(usize, handles::Kind)> =
        children.iter().map(|(hnd, e)| (*hnd, e.obj.kind())).chain(orphan_desc.then_some((d, handles::Kind::Desc))).collect();
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
fn local_node_id() -> Result<u32, SciError> {
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
pub unsafe extern "C" fn SCIProbeNode(sd: Handle, adapter: c_uint, node_id: c_uint, flags: c_uint, error: *mut SciErr) -> c_int {
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

#[repr(C)]
struct QueryString {
    s: *mut c_char,
    length: c_uint,
}

#[repr(C)]
struct QueryAdapter {
    local_adapter_no: c_uint,
    port_no: c_uint,
    subcommand: c_uint,
    data: *mut c_void,
}

#[repr(C)]
struct QuerySystem {
    subcommand: c_uint,
    data: *mut c_void,
}

#[repr(C)]
struct QueryMap {
    map: Handle,
    subcommand: c_uint,
    data: c_uint,
}

unsafe fn fill_string(q: *mut QueryString, text: &str) -> Result<(), SciError> {
    if q.is_null() {
        return Err(SciError::IllegalParameter);
    }
    // SAFETY: non-NULL caller struct, read by value.
    let qs = unsafe { q.read_unaligned() };
    if qs.s.is_null() || qs.length == 0 {
        return Err(SciError::IllegalParameter);
    }
    let n = text.len().min(qs.length as usize - 1);
    // SAFETY: the caller promises `length` writable bytes at `s`; we write
    // n + 1 <= length of them.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), qs.s.cast::<u8>(), n);
        qs.s.add(n).write(0);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn SCIQuery(command: c_uint, data: *mut c_void, flags: c_uint, error: *mut SciErr) {
    // SAFETY: every pointer is NULL-checked before it is read or written.
    unsafe {
        report("SCIQuery", error, (), || {
            check_flags(flags, 0)?;
            match command {
                Q_VENDORID => fill_string(data.cast(), "vsci (software SISCI interconnect)"),
                Q_API => fill_string(data.cast(), concat!("vsci SISCI API ", env!("CARGO_PKG_VERSION"))),
                Q_ADAPTER => {
                    let q = data.cast::<QueryAdapter>();
                    if q.is_null() {
                        return Err(SciError::IllegalParameter);
                    }
                    let qa = q.read_unaligned();
                    check_adapter(qa.local_adapter_no)?;
                    let value: c_uint = match qa.subcommand {
                        // No alignment needed.
                        Q_ADAPTER_DMA_SIZE_ALIGNMENT | Q_ADAPTER_DMA_OFFSET_ALIGNMENT => vsci_client::DMA_ALIGN as c_uint,
                        Q_ADAPTER_DMA_MTU => 1 << 20,
                        Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE | Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE => 4096,
                        Q_ADAPTER_NODEID => local_node_id()?,
                        Q_ADAPTER_SERIAL_NUMBER => 0x7653_0000 | local_node_id()?,
                        Q_ADAPTER_CARD_TYPE => ADAPTER_CARD_TYPE_VSCI,
                        Q_ADAPTER_NUMBER_OF_STREAMS => 1,
                        Q_ADAPTER_STREAM_BUFFER_SIZE => 4096,
                        Q_ADAPTER_CONFIGURED | Q_ADAPTER_FIRMWARE_OK => 1,
                        // What a pulled cable changes: the node's links
                        // (docs/cluster.md, "Failures").
                        Q_ADAPTER_LINK_OPERATIONAL | Q_ADAPTER_HW_LINK_STATUS_IS_OK => {
                            let c = open_client()?;
                            let up = c.link_operational();
                            c.close();
                            up? as c_uint
                        }
                        Q_ADAPTER_NUMBER | Q_ADAPTER_INSTANCE_NUMBER => 0,
                        Q_ADAPTER_CONNECTED_TO_SWITCH => 0,
                        Q_ADAPTER_ATT_PAGE_SIZE => 4096,
                        Q_ADAPTER_DMA_AVAILABLE => 1,
                        _ => return Err(SciError::IllegalQuery),
                    };
                    out(qa.data.cast::<c_uint>(), value)
                }
                Q_SYSTEM => {
                    let q = data.cast::<QuerySystem>();
                    if q.is_null() {
                        return Err(SciError::IllegalParameter);
                    }
                    let qs = q.read_unaligned();
                    let value: c_uint = match qs.subcommand {
                        Q_SYSTEM_HOSTBRIDGE => 1, // unknown
                        // Stores are posted.
                        Q_SYSTEM_WRITE_POSTING_ENABLED | Q_SYSTEM_WRITE_COMBINING_ENABLED => 1,
                        _ => return Err(SciError::IllegalQuery),
                    };
                    out(qs.data.cast::<c_uint>(), value)
                }
                Q_MAP => {
                    let q = data.cast::<QueryMap>();
                    if q.is_null() {
                        return Err(SciError::IllegalParameter);
                    }
                    let qm = q.read_unaligned();
                    let m = handles::map(h(qm.map))?;
                    match qm.subcommand {
                        Q_MAP_MAPPED_TO_LOCAL_TARGET => {
                            // Every map of a vsci segment on this node is local memory.
                            let local = match &m.target {
                                MapTarget::Local(_) => true,
                                MapTarget::Remote(r) => r.node_id == r.client().node_id(),
                            };
                            let field = std::ptr::addr_of_mut!((*q).data);
                            field.write_unaligned(local as c_uint);
                            Ok(())
                        }
                        _ => Err(SciError::IllegalQuery),
                    }
                }
                Q_LOCAL_SEGMENT | Q_REMOTE_SEGMENT => Err(SciError::IllegalQuery),
                _ => Err(SciError::IllegalQuery),
            }
        })
    }
}

static ERROR_STRINGS: std::sync::OnceLock<Vec<(u32, std::ffi::CString)>> = std::sync::OnceLock::new();

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
        table
            .iter()
            .find(|(v, _)| *v == error)
            .map(|(_, s)| s.as_ptr())
            .unwrap_or(UNKNOWN.as_ptr().cast())
    })
}

/// `NAME(handle, flags, &error)` calls taking no flags that act on one
/// object and keep it.
macro_rules! handle_op {
    ($name:ident, $getter:ident, |$x:ident| $body:expr) => {
        handle_op!(@ $name, $getter, None::<handles::Kind>, |$x| $body);
    };
    (@ $name:ident, $getter:ident, $release:expr, |$x:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(handle: Handle, flags: c_uint, error: *mut SciErr) {
            // SAFETY: see `set`.
            unsafe {
                report(stringify!($name), error, (), || {
                    check_flags(flags, 0)?;
                    let release: Option<handles::Kind> = $release;
                    let $x = match handles::$getter(h(handle)) {
                        Ok(x) => x,
                        // Released already by SCIClose or SCITerminate.
                        Err(_) if release.is_some_and(|k| handles::take_orphan(h(handle), k)) => return Ok(()),
                        Err(e) => return Err(e),
                    };
                    match $body {
                        Ok(()) => {}
                        // A release whose node is gone: what it named went
                        // with the node, and a program that loops until
                        // SCI_ERR_OK must be able to finish.
                        Err(SciError::NoLinkAccess) if release.is_some() => {}
                        Err(e) => return Err(e),
                    }
                    if release.is_some() {
                        handles::remove(h(handle));
                    }
                    Ok(())
                })
            }
        }
    };
}

/// A call that ends the life of a handle of kind `$kind`: as `handle_op`,
/// then forget the handle (only once the release succeeded, so a
/// `SCI_ERR_BUSY` leaves the handle usable).
macro_rules! release_op {
    ($name:ident, $getter:ident, $kind:ident, |$x:ident| $body:expr) => {
        handle_op!(@ $name, $getter, Some(handles::Kind::$kind), |$x| $body);
    };
}

// ---------------------------------------------------------------------------
// Local segments

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
            let seg = d.client.create_segment_opts(id, size as u64, flags & FLAG_EMPTY != 0, flags & FLAG_BROADCAST != 0)?;
            // SCI_FLAG_PRIVATE: a segment only its creator uses (a DMA
            // source, a local buffer); no connection will ever reach it.
            seg.private.store(flags & FLAG_PRIVATE != 0, std::sync::atomic::Ordering::Relaxed);
            out(segment, local_seg_handle(sd, seg, callback, callback_arg))
        })
    }
}

/// The callback to install: the program's, with `SCI_FLAG_USE_CALLBACK`
/// (which without one is an error), else none.
fn wanted_callback<F>(flags: c_uint, callback: Option<F>) -> Result<Option<F>, SciError> {
    match (flags & FLAG_USE_CALLBACK != 0, callback) {
        (true, None) => Err(SciError::IllegalParameter),
        (true, cb) => Ok(cb),
        (false, _) => Ok(None),
    }
}

/// Give a program its handle on a local segment, with its callback (if it
/// asked for one) receiving the segment's events.
fn local_seg_handle(
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
                let action = unsafe { cb(arg as *mut c_void, as_handle(hnd), ev.reason as c_uint, ev.node_id, 0, SciError::Ok as c_uint) };
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

// ---------------------------------------------------------------------------
// Maps

fn map_flags(flags: c_uint, addr: *mut c_void) -> Result<MapFlags, SciError> {
    // SCI_FLAG_BROADCAST: a map of a group connection writes every member
    // whether or not the flag says so; on other maps it changes nothing.
    check_flags(flags, FLAG_FIXED_MAP_ADDR | FLAG_READONLY_MAP | FLAG_BROADCAST | MAP_HINT_FLAGS | MAP_UNIMPLEMENTED_FLAGS)?;
    if flags & MAP_UNIMPLEMENTED_FLAGS != 0 {
        return Err(SciError::FlagNotImplemented);
    }
    let fixed_addr = if flags & FLAG_FIXED_MAP_ADDR != 0 {
        if addr.is_null() {
            return Err(SciError::IllegalAddress);
        }
        Some(addr as usize)
    } else {
        None
    };
    Ok(MapFlags { readonly: flags & FLAG_READONLY_MAP != 0, fixed_addr, no_loopback: flags & FLAG_NO_MEMORY_LOOPBACK_MAP != 0 })
}

unsafe fn do_map(
    target: MapTarget,
    desc: usize,
    map: *mut Handle,
    offset: usize,
    size: usize,
    addr: *mut c_void,
    flags: c_uint,
) -> Result<*mut c_void, SciError> {
    let mf = map_flags(flags, addr)?;
    if map.is_null() {
        return Err(SciError::IllegalParameter);
    }
    let m = Arc::new(Map::new(target, offset as u64, size as u64, mf)?);
    let p = m.addr.cast::<c_void>();
    let hnd = handles::insert(Obj::Map(m), desc);
    // SAFETY: NULL-checked above.
    unsafe { out(map, as_handle(hnd))? };
    Ok(p)
}

fn owner_desc(h: usize) -> usize {
    handles::get(h).map(|e| e.desc).unwrap_or(0)
}

#[no_mangle]
pub unsafe extern "C" fn SCIMapLocalSegment(
    segment: Handle,
    map: *mut Handle,
    offset: usize,
    size: usize,
    addr: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) -> *mut c_void {
    // SAFETY: see `do_map`.
    unsafe {
        report("SCIMapLocalSegment", error, std::ptr::null_mut(), || {
            let s = handles::local_seg(h(segment))?;
            do_map(MapTarget::Local(s), owner_desc(h(segment)), map, offset, size, addr, flags)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIMapRemoteSegment(
    segment: Handle,
    map: *mut Handle,
    offset: usize,
    size: usize,
    addr: *mut c_void,
    flags: c_uint,
    error: *mut SciErr,
) -> *mut c_void {
    // SAFETY: see `do_map`.
    unsafe {
        report("SCIMapRemoteSegment", error, std::ptr::null_mut(), || {
            let s = handles::remote_seg(h(segment))?;
            do_map(MapTarget::Remote(s), owner_desc(h(segment)), map, offset, size, addr, flags)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIUnmapSegment(map: Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIUnmapSegment", error, (), || {
            check_flags(flags, 0)?;
            if handles::map(h(map)).is_err() && handles::take_orphan(h(map), handles::Kind::Map) {
                return Ok(()); // unmapped by SCIClose or SCITerminate
            }
            let m = handles::map(h(map))?;
            handles::remove(h(map));
            m.unmap();
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------
// PIO, ordering, sequences

fn lost_error(m: &Map) -> Result<(), SciError> {
    if m.target.is_lost() {
        Err(SciError::TransferFailed)
    } else {
        Ok(())
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIMemCpy(
    sequence: Handle,
    mem_addr: *mut c_void,
    remote_map: Handle,
    remote_offset: usize,
    size: usize,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: the map range is bounds-checked against the live mapping; the
    // program vouches for `mem_addr..+size` as SISCI requires.
    unsafe {
        report("SCIMemCpy", error, (), || {
            check_flags(flags, FLAG_BLOCK_READ | FLAG_ERROR_CHECK)?;
            if !sequence.is_null() {
                handles::seq(h(sequence))?;
            }
            let m = handles::map(h(remote_map))?;
            let end = remote_offset.checked_add(size).ok_or(SciError::OutOfRange)?;
            if end > m.size {
                return Err(SciError::OutOfRange);
            }
            if size == 0 {
                return Ok(());
            }
            if mem_addr.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let remote = m.addr.add(remote_offset);
            if flags & FLAG_BLOCK_READ != 0 {
                if m.is_remote() {
                    // Fresh bytes from the owner, not our shadow.
                    m.read_fresh(std::slice::from_raw_parts_mut(mem_addr.cast::<u8>(), size), remote_offset)?;
                } else {
                    std::sync::atomic::fence(Ordering::SeqCst);
                    memcpy::copy(remote, mem_addr.cast::<u8>(), size);
                }
            } else if m.is_remote() {
                // Visible at the owner before we return.
                m.write(remote_offset, std::slice::from_raw_parts(mem_addr.cast::<u8>(), size))?;
            } else {
                // A segment of this node: the program's chosen copy routine
                // (SetSciMemCopyFunction) straight into the shared pages.
                if m.readonly {
                    return Err(SciError::IllegalOperation);
                }
                memcpy::copy(mem_addr.cast::<u8>(), remote, size);
                vsci_client::store_fence();
            }
            if flags & FLAG_ERROR_CHECK != 0 {
                lost_error(&m)?;
            }
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIMemWrite(mem_addr: *mut c_void, remote_addr: *mut c_void, size: usize, flags: c_uint, error: *mut SciErr) {
    // SAFETY: the destination must lie inside one live map of ours, which
    // we check; the source is the program's own memory.
    unsafe {
        report("SCIMemWrite", error, (), || {
            check_flags(flags, FLAG_ERROR_CHECK)?;
            if size == 0 {
                return Ok(());
            }
            if mem_addr.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let m = handles::map_containing(remote_addr as usize, size).ok_or(SciError::IllegalAddress)?;
            if m.readonly {
                return Err(SciError::IllegalOperation);
            }
            memcpy::copy(mem_addr.cast::<u8>(), remote_addr.cast::<u8>(), size);
            m.flush()?;
            if flags & FLAG_ERROR_CHECK != 0 {
                lost_error(&m)?;
            }
            Ok(())
        })
    }
}

/// Make every earlier store visible before any later one: on one host a
/// full fence (maps are coherent memory); for maps of other nodes' segments
/// the stores are also shipped and acknowledged. Neither call can report an
/// error (SISCI gives them none); a failed shipment shows up in
/// `SCICheckSequence` and `SCI_FLAG_ERROR_CHECK`.
#[no_mangle]
pub extern "C" fn SCIFlush(_sequence: Handle, _flags: c_uint) {
    guard::void("SCIFlush", || {
        vsci_client::store_fence();
        let _ = vsci_client::flush_remote_stores();
    })
}

#[no_mangle]
pub extern "C" fn SCIStoreBarrier(_sequence: Handle, _flags: c_uint) {
    guard::void("SCIStoreBarrier", || {
        vsci_client::store_fence();
        let _ = vsci_client::flush_remote_stores();
    })
}

/// Cache line size every x86-64 and aarch64 CPU we run on uses; a smaller
/// real line would only mean flushing some lines twice.
const CACHE_LINE: usize = 64;

#[no_mangle]
pub unsafe extern "C" fn SCICacheSync(map: Handle, addr: *mut c_void, length: usize, flags: c_uint, error: *mut SciErr) {
    // SAFETY: with a map, the range is checked against the live mapping;
    // without one, the program vouches for `addr..+length` (as SISCI
    // requires), and CLFLUSH neither reads nor writes the bytes.
    unsafe {
        report("SCICacheSync", error, (), || {
            check_flags(flags, FLAG_CACHE_FLUSH | FLAG_CACHE_INVALIDATE)?;
            if flags == 0 || (addr.is_null() && length > 0) {
                return Err(SciError::IllegalParameter);
            }
            if !map.is_null() {
                let m = handles::map(h(map))?;
                if !m.contains(addr as usize, length) {
                    return Err(SciError::OutOfRange);
                }
                if m.is_remote() && flags & FLAG_CACHE_FLUSH != 0 {
                    // What a device-side reader of another node's memory
                    // needs is our stores there, not in our shadow.
                    m.flush()?;
                }
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            #[cfg(target_arch = "x86_64")]
            {
                // CPU caches are coherent with every reader vsci has (other
                // processes, guests' vCPUs, the RMA engine's copies), so this
                // only matters to a program that hands the memory to a
                // non-coherent device itself; it costs one CLFLUSH per line.
                let start = addr as usize & !(CACHE_LINE - 1);
                let end = addr as usize + length;
                for line in (start..end).step_by(CACHE_LINE) {
                    std::arch::x86_64::_mm_clflush(line as *const u8);
                }
                std::arch::x86_64::_mm_mfence();
            }
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCICreateMapSequence(map: Handle, sequence: *mut Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `out`.
    unsafe {
        report("SCICreateMapSequence", error, (), || {
            check_flags(flags, FLAG_FAST_BARRIER)?;
            if sequence.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let m = handles::map(h(map))?;
            let hnd = handles::insert(Obj::Seq(Arc::new(Sequence { map: m })), owner_desc(h(map)));
            out(sequence, as_handle(hnd))
        })
    }
}

release_op!(SCIRemoveSequence, seq, Seq, |_s| Ok::<(), SciError>(()));

unsafe fn sequence_status(name: &'static str, sequence: Handle, flags: c_uint, error: *mut SciErr) -> c_uint {
    // SAFETY: see `set`.
    unsafe {
        // A panic of ours is an error the sequence cannot recover from.
        let r = guard::value(name, Err(SciError::System), || {
            check_flags(flags, FLAG_NO_FLUSH | FLAG_NO_STORE_BARRIER | FLAG_FLUSH_CPU_BUFFERS_ONLY)?;
            let s = handles::seq(h(sequence))?;
            if flags & FLAG_NO_STORE_BARRIER == 0 {
                std::sync::atomic::fence(Ordering::SeqCst);
            }
            if flags & FLAG_NO_FLUSH == 0 {
                s.map.flush().map_err(|_| SciError::TransferFailed)?;
            }
            Ok::<_, SciError>(s)
        });
        match r {
            Err(e) => {
                set(error, e);
                SEQ_NOT_RETRIABLE
            }
            Ok(s) => match lost_error(&s.map) {
                Ok(()) => {
                    set(error, SciError::Ok);
                    SEQ_OK
                }
                Err(e) => {
                    set(error, e);
                    SEQ_NOT_RETRIABLE
                }
            },
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIStartSequence(sequence: Handle, flags: c_uint, error: *mut SciErr) -> c_uint {
    // SAFETY: see `sequence_status`.
    unsafe { sequence_status("SCIStartSequence", sequence, flags, error) }
}

#[no_mangle]
pub unsafe extern "C" fn SCICheckSequence(sequence: Handle, flags: c_uint, error: *mut SciErr) -> c_uint {
    // SAFETY: see `sequence_status`.
    unsafe { sequence_status("SCICheckSequence", sequence, flags, error) }
}

// ---------------------------------------------------------------------------
// Interrupts and data interrupts

unsafe fn create_intr(
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
            let (hnd, li) = create_intr(IntrKind::Plain, sd, interrupt, adapter, interrupt_no, callback.is_some(), flags)?;
            if flags & FLAG_USE_CALLBACK != 0 {
                let cb = callback.expect("checked");
                let arg = callback_arg as usize;
                li.callback_active.store(true, Ordering::SeqCst);
                let li2 = li.clone();
                std::thread::Builder::new()
                    .name("vsci-intr-cb".into())
                    .spawn(move || {
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
                        li2.callback_active.store(false, Ordering::SeqCst);
                    })
                    .map_err(|_| SciError::System)?;
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
            let (hnd, li) = create_intr(IntrKind::Data, sd, interrupt, adapter, interrupt_no, callback.is_some(), flags)?;
            if flags & FLAG_USE_CALLBACK != 0 {
                let cb = callback.expect("checked");
                let arg = callback_arg as usize;
                li.callback_active.store(true, Ordering::SeqCst);
                let li2 = li.clone();
                std::thread::Builder::new()
                    .name("vsci-dintr-cb".into())
                    .spawn(move || {
                        // As for SCICreateInterrupt's callbacks.
                        guard::void("cb_data_interrupt", || {
                            let mut buf = vec![0u8; vsci_proto::intr::DATA_MAX];
                            loop {
                                match li2.intr.wait_data(&mut buf, vsci_client::INFINITE) {
                                    Ok(vsci_client::DataWait::Got(n)) => {
                                        // SAFETY: the program's callback with its own
                                        // argument and a buffer valid for the call.
                                        let action = cb(arg as *mut c_void, as_handle(hnd), buf.as_mut_ptr().cast(), n as c_uint, SciError::Ok as c_uint);
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
                        li2.callback_active.store(false, Ordering::SeqCst);
                    })
                    .map_err(|_| SciError::System)?;
            }
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIWaitForInterrupt(interrupt: Handle, timeout: c_uint, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIWaitForInterrupt", error, (), || {
            check_flags(flags, 0)?;
            let li = handles::local_intr(h(interrupt))?;
            if li.callback_active.load(Ordering::SeqCst) {
                return Err(SciError::IllegalOperation);
            }
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
            check_flags(flags, 0)?;
            let li = handles::local_data_intr(h(interrupt))?;
            if li.callback_active.load(Ordering::SeqCst) {
                return Err(SciError::IllegalOperation);
            }
            if length.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let cap = length.read_unaligned() as usize;
            if data.is_null() && cap > 0 {
                return Err(SciError::IllegalParameter);
            }
            let buf: &mut [u8] = if cap == 0 { &mut [] } else { std::slice::from_raw_parts_mut(data.cast::<u8>(), cap) };
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

unsafe fn connect_intr(
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

#[no_mangle]
pub unsafe extern "C" fn SCIConnectInterrupt(
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
    unsafe { report("SCIConnectInterrupt", error, (), || connect_intr(IntrKind::Plain, sd, interrupt, node_id, adapter, interrupt_no, timeout, flags)) }
}

#[no_mangle]
pub unsafe extern "C" fn SCIConnectDataInterrupt(
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
    unsafe { report("SCIConnectDataInterrupt", error, (), || connect_intr(IntrKind::Data, sd, interrupt, node_id, adapter, interrupt_no, timeout, flags)) }
}

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
            let payload: &[u8] = if length == 0 { &[] } else { std::slice::from_raw_parts(data.cast::<u8>(), length as usize) };
            ri.trigger_data(payload)
        })
    }
}

// ---------------------------------------------------------------------------
// Map pointer, and calls that need hardware vsci does not have.

#[no_mangle]
pub extern "C" fn SCIGetMapPointer(map: Handle) -> *mut c_void {
    guard::value("SCIGetMapPointer", std::ptr::null_mut(), || {
        handles::map(h(map)).map(|m| m.addr.cast::<c_void>()).unwrap_or(std::ptr::null_mut())
    })
}

/// `sci_address_t`: a node id and a 48-bit address in its SCI space.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SciAddress {
    node_id: u16,
    offs_hi: u16,
    offs_lo: u32,
}

// CSR registers, physical memory by bus address, raw SCI address space:
// each names adapter hardware (configuration registers, PCI bus addresses)
// that a software interconnect does not have. Declared in sisci_api.h so
// programs that have such a path build and link; they are told plainly at
// run time.

#[no_mangle]
pub unsafe extern "C" fn SCIGetCSRRegister(_sd: Handle, _adapter: c_uint, _node: c_uint, _off: c_uint, _flags: c_uint, error: *mut SciErr) -> c_uint {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIGetCSRRegister", error, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn SCISetCSRRegister(_sd: Handle, _adapter: c_uint, _node: c_uint, _off: c_uint, _value: c_uint, _flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCISetCSRRegister", error, ()) }
}

#[no_mangle]
pub unsafe extern "C" fn SCIGetLocalCSR(_sd: Handle, _adapter: c_uint, _off: c_uint, _flags: c_uint, error: *mut SciErr) -> c_uint {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIGetLocalCSR", error, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn SCISetLocalCSR(_sd: Handle, _adapter: c_uint, _off: c_uint, _value: c_uint, _flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCISetLocalCSR", error, ()) }
}

#[no_mangle]
pub unsafe extern "C" fn SCIAttachPhysicalMemory(
    _ioaddress: c_uint,
    _address: *mut c_void,
    _bus_no: c_uint,
    _size: usize,
    _segment: Handle,
    _flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIAttachPhysicalMemory", error, ()) }
}

#[no_mangle]
pub unsafe extern "C" fn SCIConnectSCISpace(
    _sd: Handle,
    _adapter: c_uint,
    _segment: *mut Handle,
    _address: SciAddress,
    _size: c_uint,
    _flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIConnectSCISpace", error, ()) }
}
