//! `libsisci`: the SISCI C API (see include/sisci_api.h and docs/api.md)
//! implemented on top of `vsci-client`.
//!
//! The calls are in one file per API area, named as docs/api.md's sections
//! are: `descriptors.rs`, `segments.rs`, `maps.rs`, `ordering.rs`,
//! `interrupts.rs`, `query.rs`, `hardware.rs`, `dma.rs`, `tmem.rs`; this
//! file keeps the flags, the helpers and the macros they share.
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

/// The store path may run inside a program's signal handler that
/// interrupted `malloc`: it allocates from a region of its own there.
#[global_allocator]
static ALLOCATOR: vsci_sys::alloc::SignalSafe = vsci_sys::alloc::SignalSafe;
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
            eprintln!(
                "vsci: cannot reach vscid at {} ({}); is the node running? (VSCI_SOCKET selects the socket)",
                path.display(),
                e.c_name()
            );
        }
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

// The calls, one file an API area (after the macros above, which they use).
mod descriptors;
mod hardware;
mod interrupts;
mod maps;
mod ordering;
mod query;
mod segments;

pub use hardware::SciAddress;
#[allow(unused_imports)]
use {descriptors::*, hardware::*, interrupts::*, maps::*, ordering::*, query::*, segments::*};
