//! No panic of ours unwinds into C. Every function the library exports
//! (the SISCI calls, `vsci_tmem_*`, the `memcpy`/`memmove` and signal
//! interposers, the load-time constructors) and every closure that calls a
//! program's callback runs its body under one of the guards here: a panic
//! (a bug of ours) is caught, logged as an error, and the call fails the
//! way it can fail — `SCI_ERR_SYSTEM` through `sci_error_t *error`, a
//! default value for calls without one, `-1`/`EINVAL` for the signal
//! calls, the C library's copy for `memcpy` — instead of aborting the
//! program (Rust aborts when a panic reaches an `extern "C"` frame).
//!
//! The test switch: `VSCI_TEST_PANIC=NAME[,NAME...]` makes each named entry
//! point panic at its start, every time it is called (`*` names every
//! SISCI and `vsci_tmem_*` call; interposers, constructors and callback
//! closures are named one by one). It is read once; a call pays one relaxed
//! atomic load for it. crates/vsci-systest/tests/panics.rs runs
//! tests/c/t_panic.c with it.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// `SWITCH`: not read yet, being read (by this thread or another), off, on.
const UNKNOWN: u8 = 0;
const READING: u8 = 1;
const OFF: u8 = 2;
const ON: u8 = 3;

static SWITCH: AtomicU8 = AtomicU8::new(UNKNOWN);
static NAMES: OnceLock<Vec<String>> = OnceLock::new();

thread_local! {
    /// This thread is unwinding from (or logging) a panic the switch made:
    /// the calls the panic machinery makes meanwhile (`memcpy` above all)
    /// must not panic again.
    static INJECTED: Cell<bool> = const { Cell::new(false) };
}

/// Panic here if `VSCI_TEST_PANIC` names `name`.
#[inline(always)]
pub(crate) fn test_panic(name: &'static str) {
    if SWITCH.load(Ordering::Relaxed) != OFF {
        armed(name);
    }
}

/// No test panic can fire (the switch was read and is off): a caller with
/// a fast path that cannot panic may take it without a guard.
#[inline(always)]
pub(crate) fn switch_off() -> bool {
    SWITCH.load(Ordering::Relaxed) == OFF
}

/// Is `name` one of the calls `*` stands for?
fn is_api(name: &str) -> bool {
    name.starts_with("SCI") || name.starts_with("vsci_tmem_") || name.ends_with("SciMemCopyFunction")
}

#[cold]
#[inline(never)]
fn armed(name: &'static str) {
    if SWITCH.load(Ordering::Acquire) == UNKNOWN {
        read_switch();
    }
    if SWITCH.load(Ordering::Acquire) != ON {
        return;
    }
    let Some(names) = NAMES.get() else { return };
    if !names.iter().any(|n| n == name || (n == "*" && is_api(name))) {
        return;
    }
    if INJECTED.with(|c| c.replace(true)) {
        return;
    }
    panic!("VSCI_TEST_PANIC: a panic in {name}, as asked");
}

/// Read `VSCI_TEST_PANIC` once. Reading allocates (which may copy through
/// our own `memcpy`): calls meanwhile see READING and do not panic.
fn read_switch() {
    if SWITCH.compare_exchange(UNKNOWN, READING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    let names: Vec<String> = std::env::var("VSCI_TEST_PANIC")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let on = !names.is_empty();
    let _ = NAMES.set(names);
    SWITCH.store(if on { ON } else { OFF }, Ordering::Release);
}

/// Log a panic caught in `name` (once logged, the switch may fire again).
#[cold]
#[inline(never)]
pub(crate) fn caught(name: &str, payload: Box<dyn Any + Send>) {
    // Logging writes to stderr, which can itself fail and panic; and a
    // payload's drop may panic: neither may leave this function.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let what = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("no message");
        crate::init_logging();
        log::error!("{name}: caught a panic ({what}); it does not unwind into the program");
        drop(payload);
    }));
    INJECTED.with(|c| c.set(false));
}

/// Run `f`, the body of exported call `name`; on a panic log it and
/// return `dflt`.
#[inline(always)]
pub(crate) fn value<T>(name: &'static str, dflt: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(|| {
        test_panic(name);
        f()
    })) {
        Ok(v) => v,
        Err(p) => {
            caught(name, p);
            dflt
        }
    }
}

/// [`value`] for calls that return nothing: a panic is logged and
/// swallowed.
#[inline(always)]
pub(crate) fn void(name: &'static str, f: impl FnOnce()) {
    value(name, (), f)
}

/// Read the switch now (the library's constructor): so that a first call
/// made in a signal handler (`memcpy`, `sigaction`) never allocates.
extern "C" fn at_load() {
    void("guard_at_load", || {
        if SWITCH.load(Ordering::Acquire) == UNKNOWN {
            read_switch();
        }
    })
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_a_guard_becomes_the_default_value() {
        assert_eq!(value("t_value", 7, || panic!("boom")), 7);
        assert_eq!(value("t_value", 7, || 3), 3);
        void("t_void", || panic!("boom"));
        assert!(!INJECTED.with(Cell::get));
    }

    #[test]
    fn the_wildcard_names_the_api_only() {
        assert!(is_api("SCIFlush") && is_api("vsci_tmem_put") && is_api("SetSciMemCopyFunction"));
        assert!(!is_api("memcpy") && !is_api("sigaction") && !is_api("cb_dma") && !is_api("at_load"));
    }
}
