//! The library's `memcpy` and `memmove`, in front of the C library's for
//! the whole program (libsisci comes before libc in the program's symbol
//! search order).
//!
//! A copy into a map of another node's segment costs a fault per run of
//! pages the CPU's stores reach, plus an owner read for each run (the twin's
//! way, docs/design.md "Remote nodes"), unless the copy is one string store
//! (`REP MOVSB`): that faults once, and the fault handler writes the whole
//! copy to the owner as one RMA write (`emulate_rep`). glibc copies with
//! `REP MOVSB` only between a CPU-dependent lower and upper size (on the
//! AMD hosts here 2 KiB to 1 MiB, the L2 size) and with vector loops
//! elsewhere, so a `memcpy` of a megabyte or more into a remote map ran at
//! 0.12x iperf3 (docs/benchmarks.md). This `memcpy`, when the destination
//! may lie in a remote map and the copy is at least `STRING_MIN` bytes,
//! hands the copy to the map, which makes it as that fault would but with
//! no fault (`vsci_client::copy_into_remote_map`), and copies what the map
//! does not take with `REP MOVSB`; it is the C library's `memcpy`
//! otherwise: a few loads and compares in front of it (one of them
//! `guard`'s test switch). `memmove` does the same when the two buffers do
//! not overlap (C++'s `std::copy` of plain data is a `memmove`).
//! `VSCI_MEMCPY=0` in the environment makes both the C library's always;
//! `VSCI_MEMCPY=trap` leaves copies into remote maps to fault (the string
//! store), as before the map took them directly.
//!
//! Linked statically (`libsisci.a`) into a program that uses the dynamic C
//! library, the same holds: the program then defines these two functions
//! itself and finds the C library's through `dlsym`. In a fully static
//! program there is no C library to find, and every copy is a string store
//! (correct, slower for small copies): link such programs with the shared
//! libsisci.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

/// Smallest copy into a remote map done as one string store: every one.
/// glibc stores even an 8-byte copy with two overlapping stores and a
/// 64-byte one with two to four vector stores, each a trap and a posted
/// write of its own; a message of payload, header and flag then exceeded
/// the burst the fault handler emulates (three stores) and took the twin's
/// way, a read of the page from the owner per message. Taken whole, the
/// payload is one write whatever its size, and no trap. (A copy whose
/// destination lies between two remote maps without being in one looks
/// through the registry of maps and is made with `REP MOVSB`: correct, a
/// few tens of nanoseconds slower when small.)
const STRING_MIN: usize = 1;

/// The C library's `memcpy` and `memmove`, found at load (null until then).
static NEXT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static NEXT_MOVE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
/// 1 when `VSCI_MEMCPY=0`: never take the string-store way.
static OFF: AtomicU8 = AtomicU8::new(0);
/// 1 when `VSCI_MEMCPY=trap`: a copy into a remote map is a string store
/// left to fault, as before copies were handed to the map directly.
static TRAP_ONLY: AtomicU8 = AtomicU8::new(0);
/// Whether `find_next` ran: UNKNOWN, LOOKING (a copy made by dlsym itself
/// must not look again) or DONE (`NEXT` may still be null: no dynamic
/// C library, every copy takes the string way).
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const LOOKING: u8 = 1;
const DONE: u8 = 2;

type MemcpyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;

/// Copy with one string store. Correct for any non-overlapping buffers
/// (what `memcpy` requires): also the fallback before `NEXT` is known.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes, not overlapping.
#[inline(always)]
unsafe fn rep_movsb(dst: *mut c_void, src: *const c_void, n: usize) {
    // SAFETY: the caller's contract; REP MOVSB with DF clear (the ABI
    // guarantees DF is clear on function entry) copies exactly `n` bytes
    // upwards and touches no other memory or register than RDI, RSI, RCX.
    unsafe {
        std::arch::asm!("rep movsb", inout("rdi") dst => _, inout("rsi") src => _, inout("rcx") n => _, options(nostack, preserves_flags));
    }
}

/// Copy downwards (from the last byte), for an overlapping `memmove` to a
/// higher address when the C library's is unknown.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes.
unsafe fn rep_movsb_down(dst: *mut c_void, src: *const c_void, n: usize) {
    if n == 0 {
        return;
    }
    // SAFETY: the caller's contract; with DF set REP MOVSB copies `n`
    // bytes from the given last bytes downwards, which is correct for
    // overlapping buffers with dst above src; DF is cleared again before
    // anything else runs, as the ABI requires.
    unsafe {
        std::arch::asm!(
            "std",
            "rep movsb",
            "cld",
            inout("rdi") (dst as usize + n - 1) => _,
            inout("rsi") (src as usize + n - 1) => _,
            inout("rcx") n => _,
            options(nostack),
        );
    }
}

fn overlap(dst: *mut c_void, src: *const c_void, n: usize) -> bool {
    let (d, s) = (dst as usize, src as usize);
    d < s.saturating_add(n) && s < d.saturating_add(n)
}

/// Whether a copy of `n` bytes to `dst` is the C library's business: small,
/// turned off, or certainly not into a remote map.
#[inline(always)]
fn not_ours(dst: *mut c_void, n: usize) -> bool {
    n < STRING_MIN || OFF.load(Ordering::Relaxed) != 0 || !vsci_client::may_reach_remote_map(dst as usize, n)
}

/// Call the C library's `memcpy` or `memmove` (`next`, from `find_next`).
///
/// # Safety
/// `next` non-null, from `NEXT` or `NEXT_MOVE`; the arguments under the
/// contract of the function it is.
#[inline(always)]
unsafe fn call(next: *mut c_void, dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { std::mem::transmute::<*mut c_void, MemcpyFn>(next)(dst, src, n) }
}

/// `memcpy(3)`.
///
/// # Safety
/// As `memcpy`: `src` readable and `dst` writable for `n` bytes, not
/// overlapping. Nothing here may call `memcpy` (Rust code compiled into
/// this library calls this very function for its copies): only atomics,
/// inline assembly and the C library's function pointer. (Only a caught
/// panic's log line copies through it again, and `guard` keeps that from
/// panicking once more.)
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    let next = NEXT.load(Ordering::Relaxed);
    // Atomic loads and compares only: nothing here can panic.
    if crate::guard::switch_off() && !next.is_null() && not_ours(dst, n) {
        // SAFETY: the C library's memcpy, with the caller's arguments.
        return unsafe { call(next, dst, src, n) };
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { copy_guarded("memcpy", dst, src, n, &NEXT) }
}

/// `memmove(3)`.
///
/// # Safety
/// As `memmove`: `src` readable and `dst` writable for `n` bytes. As in
/// `memcpy`, nothing here may call `memmove` or `memcpy` other than
/// through the C library's function pointers.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    let next = NEXT_MOVE.load(Ordering::Relaxed);
    // As in memcpy.
    if crate::guard::switch_off() && !next.is_null() && not_ours(dst, n) {
        // SAFETY: the C library's memmove, with the caller's arguments.
        return unsafe { call(next, dst, src, n) };
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { copy_guarded("memmove", dst, src, n, &NEXT_MOVE) }
}

/// The rest of `memcpy` and `memmove` (`slot` says which C library
/// function stands behind), under a guard: a panic of ours (see
/// `crate::guard`) is logged and the copy made anyway, by the C library's
/// function or with a string store.
///
/// # Safety
/// As `memmove`.
#[inline(never)]
unsafe fn copy_guarded(
    name: &'static str,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    slot: &AtomicPtr<c_void>,
) -> *mut c_void {
    let r = std::panic::catch_unwind(|| {
        crate::guard::test_panic(name);
        let next = slot.load(Ordering::Relaxed);
        if !next.is_null() && not_ours(dst, n) {
            // SAFETY: the C library's function, with the caller's arguments.
            return unsafe { call(next, dst, src, n) };
        }
        // SAFETY: the caller's contract.
        unsafe { string_or_lookup(dst, src, n, slot) }
    });
    match r {
        Ok(d) => d,
        Err(p) => {
            crate::guard::caught(name, p);
            // SAFETY: the caller's contract.
            unsafe { plain_copy(dst, src, n, slot) }
        }
    }
}

/// Copy with the C library's function if it is known, else with string
/// stores in the direction overlapping buffers need.
///
/// # Safety
/// As `memmove`.
unsafe fn plain_copy(dst: *mut c_void, src: *const c_void, n: usize, slot: &AtomicPtr<c_void>) -> *mut c_void {
    let next = slot.load(Ordering::Relaxed);
    if !next.is_null() {
        // SAFETY: the C library's function, with the caller's arguments.
        return unsafe { call(next, dst, src, n) };
    }
    // SAFETY: the caller's contract.
    unsafe { string_copy(dst, src, n) }
}

/// The rest of `memcpy` and `memmove` (`slot` says which C library
/// function stands behind), out of their way: a copy that may reach a
/// remote map, or one made before the C library's was found (looked up
/// now if the constructor did not run: a static link that left it out; a
/// copy made meanwhile, dlsym's own, takes the string way). Overlapping
/// buffers go to the C library's function (glibc's `memcpy` copes too,
/// and programs have come to rely on that), or without one, are copied in
/// the direction that reads every byte before overwriting it.
///
/// # Safety
/// As `memmove`.
#[cold]
#[inline(never)]
unsafe fn string_or_lookup(dst: *mut c_void, src: *const c_void, n: usize, slot: &AtomicPtr<c_void>) -> *mut c_void {
    if slot.load(Ordering::Relaxed).is_null() && STATE.load(Ordering::Relaxed) == UNKNOWN {
        find_next();
    }
    let next = slot.load(Ordering::Relaxed);
    let overlapping = overlap(dst, src, n);
    if !next.is_null() && (overlapping || not_ours(dst, n)) {
        // SAFETY: the C library's function, with the caller's arguments.
        return unsafe { call(next, dst, src, n) };
    }
    // The map takes what it can of the copy as the string store's fault
    // would, without the fault (about 6 µs here); the rest, if any, is the
    // string store (a copy past the map's end, one not emulated: a page
    // with unshipped stores, a source that would fault).
    let done = if overlapping || not_ours(dst, n) || TRAP_ONLY.load(Ordering::Relaxed) != 0 {
        0
    } else {
        vsci_client::copy_into_remote_map(dst as usize, src as usize, n)
    };
    if done > 0 {
        if done < n {
            // SAFETY: the caller's contract, for the bytes after the first
            // `done` (the buffers do not overlap).
            unsafe { rep_movsb(dst.add(done), src.add(done), n - done) };
        }
        return dst;
    }
    // SAFETY: the caller's contract.
    unsafe { string_copy(dst, src, n) }
}

/// Copy with string stores, in the direction that reads every byte before
/// overwriting it.
///
/// # Safety
/// As `memmove`.
unsafe fn string_copy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    if !overlap(dst, src, n) || (dst as usize) <= (src as usize) {
        // SAFETY: the caller's contract; an upward byte copy reads every
        // byte before it is overwritten when the buffers do not overlap or
        // dst lies below src.
        unsafe { rep_movsb(dst, src, n) };
    } else {
        // SAFETY: the caller's contract (see rep_movsb_down).
        unsafe { rep_movsb_down(dst, src, n) };
    }
    dst
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const std::ffi::c_char) -> *mut c_void;
    fn getenv(name: *const std::ffi::c_char) -> *mut std::ffi::c_char;
}

/// `RTLD_NEXT` (glibc: `((void *) -1l)`).
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

/// Find the C library's `memcpy` and `memmove` when the library is loaded, before the
/// program's `main` (an ELF constructor), or at the first copy.
extern "C" fn find_next() {
    // A panic of ours leaves the copies on the string way (see `guard`).
    crate::guard::void("find_next", find_next_now)
}

fn find_next_now() {
    if STATE.compare_exchange(UNKNOWN, LOOKING, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; getenv with
    // a NUL-terminated name, its result read at once as a C string (the
    // environment is not changed while a library loads; later, vsci itself
    // never changes it and programs that do so from another thread while
    // reading it break getenv itself).
    unsafe {
        let off = getenv(c"VSCI_MEMCPY".as_ptr());
        if !off.is_null() {
            match std::ffi::CStr::from_ptr(off).to_bytes() {
                b"0" => OFF.store(1, Ordering::Relaxed),
                b"trap" => TRAP_ONLY.store(1, Ordering::Relaxed),
                _ => {}
            }
        }
        let next = dlsym(RTLD_NEXT, c"memcpy".as_ptr());
        // Never ourselves (a program that loaded us twice): that would loop.
        if !next.is_null() && next != memcpy as *mut c_void {
            NEXT.store(next, Ordering::Relaxed);
        }
        let next = dlsym(RTLD_NEXT, c"memmove".as_ptr());
        if !next.is_null() && next != memmove as *mut c_void {
            NEXT_MOVE.store(next, Ordering::Relaxed);
        }
    }
    STATE.store(DONE, Ordering::Release);
}

#[used]
#[link_section = ".init_array"]
static FIND_NEXT: extern "C" fn() = find_next;
