//! The library's signal calls, in front of the C library's for the whole
//! program, so that a program's own signal handling never takes away the
//! trap that ships its stores into remote maps (docs/design.md "Signals",
//! `vsci_trap::chain` for what each call does with `SIGBUS`).
//!
//! Every call here that does not concern `SIGBUS` is the C library's, with
//! one change: `SIGBUS` is taken out of any mask the kernel would see (and
//! put back in what is reported), because a thread that blocks it would be
//! killed by its next remote store.
//!
//! At load the library decides how remote maps trap (`VSCI_TRAP=signal`,
//! `thread`, or `auto`, the default): with a `SIGBUS` when these functions
//! are what the program's signal calls reach — libsisci linked with the
//! program (shared or static) or preloaded — and with a fault thread and no
//! signal at all when they are not (libsisci opened by `dlopen` into a
//! local scope, as Python's ctypes does), where a program's `sigaction`
//! could remove the trap's handler unseen.

use std::ffi::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use vsci_trap::chain;
use vsci_trap::trap::{set_delivery, Delivery};

const BUS: c_int = chain::TRAP_SIGNAL;
/// `SIG_HOLD` (glibc: `((__sighandler_t) 2)`).
const SIG_HOLD: libc::sighandler_t = 2;

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const std::ffi::c_char) -> *mut c_void;
}
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The C library's functions behind ours, found at load.
struct Next {
    name: &'static std::ffi::CStr,
    f: AtomicPtr<c_void>,
}

impl Next {
    const fn new(name: &'static std::ffi::CStr) -> Next {
        Next { name, f: AtomicPtr::new(std::ptr::null_mut()) }
    }

    fn resolve(&self) {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        let f = unsafe { dlsym(RTLD_NEXT, self.name.as_ptr()) };
        self.f.store(f, Ordering::Release);
    }

    /// The function as type `F`; null when the C library has none.
    fn get<F: Copy>(&self) -> Option<F> {
        let mut f = self.f.load(Ordering::Acquire);
        if f.is_null() {
            self.resolve();
            f = self.f.load(Ordering::Acquire);
        }
        // SAFETY: `F` is always the C type of the function named `name`
        // (each caller below names its own), and function pointers have
        // the size of a data pointer on every platform we build for.
        (!f.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&f) })
    }
}

type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
type SigFn = unsafe extern "C" fn(c_int) -> c_int;
type SiginterruptFn = unsafe extern "C" fn(c_int, c_int) -> c_int;

static NEXT_SIGNAL: Next = Next::new(c"signal");
static NEXT_SYSV_SIGNAL: Next = Next::new(c"sysv_signal");
static NEXT_SIGSET: Next = Next::new(c"sigset");
static NEXT_SIGIGNORE: Next = Next::new(c"sigignore");
static NEXT_SIGHOLD: Next = Next::new(c"sighold");
static NEXT_SIGRELSE: Next = Next::new(c"sigrelse");
static NEXT_SIGINTERRUPT: Next = Next::new(c"siginterrupt");

/// Calls of our `sigaction` (the load-time probe counts them).
static PROBE: AtomicU32 = AtomicU32::new(0);

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = e };
}

/// Run the body of interposer `name`. A panic of ours (see `crate::guard`)
/// fails the call as the C library's fails it: `fail` (`-1`, `SIG_ERR`)
/// with errno `EINVAL`.
#[inline(always)]
fn errno_guard<T>(name: &'static str, fail: T, f: impl FnOnce() -> T) -> T {
    match crate::guard::value(name, None, || Some(f())) {
        Some(v) => v,
        None => {
            set_errno(libc::EINVAL);
            fail
        }
    }
}

fn empty_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is valid; sigemptyset writes it.
    let mut s: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::sigemptyset(&mut s) };
    s
}

fn set_of(sig: c_int) -> libc::sigset_t {
    let mut s = empty_set();
    // SAFETY: sigaddset writes only `s`.
    unsafe { libc::sigaddset(&mut s, sig) };
    s
}

/// Set SIGBUS's disposition through the chain; the previous handler, or
/// `SIG_ERR`.
fn bus_handler(handler: libc::sighandler_t, mask: libc::sigset_t, flags: c_int) -> libc::sighandler_t {
    // SAFETY: an all-zero sigaction is valid; every field we need is set.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_mask = mask;
    act.sa_flags = flags;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both structs are valid and live across the call.
    if unsafe { chain::sigaction(BUS, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

fn bus_current() -> libc::sigaction {
    // SAFETY: an all-zero sigaction is valid; the call only fills it.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { chain::sigaction(BUS, std::ptr::null(), &mut old) };
    old
}

/// Block (`how` = SIG_BLOCK) or unblock SIGBUS in the program's view;
/// whether it was blocked.
fn bus_mask(how: c_int) -> bool {
    let s = set_of(BUS);
    let mut old = empty_set();
    // SAFETY: both sets are valid and live across the call.
    unsafe { chain::sigmask(how, &s, &mut old) };
    // SAFETY: sigismember only reads.
    unsafe { libc::sigismember(&old, BUS) == 1 }
}

/// `sigaction(2)`.
///
/// # Safety
/// As `sigaction(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    errno_guard("sigaction", -1, || {
        PROBE.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract.
        unsafe { chain::sigaction(sig, act, old) }
    })
}

/// `signal(3)` (glibc's: BSD semantics).
///
/// # Safety
/// As `signal(3)`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    errno_guard("signal", libc::SIG_ERR, || {
        if sig == BUS {
            return bus_handler(handler, set_of(BUS), libc::SA_RESTART);
        }
        match NEXT_SIGNAL.get::<SignalFn>() {
            // SAFETY: the C library's signal with the caller's arguments.
            Some(f) => unsafe { f(sig, handler) },
            None => libc::SIG_ERR,
        }
    })
}

/// `bsd_signal(3)`.
///
/// # Safety
/// As `signal(3)`.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    errno_guard("bsd_signal", libc::SIG_ERR, || {
        // SAFETY: the caller's contract; glibc's `signal` is `bsd_signal`.
        unsafe { signal(sig, handler) }
    })
}

/// `sysv_signal(3)`: the handler is reset on delivery and not blocked.
///
/// # Safety
/// As `sysv_signal(3)`.
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    errno_guard("sysv_signal", libc::SIG_ERR, || {
        if sig == BUS {
            return bus_handler(handler, empty_set(), libc::SA_RESETHAND | libc::SA_NODEFER);
        }
        match NEXT_SYSV_SIGNAL.get::<SignalFn>() {
            // SAFETY: the C library's sysv_signal with the caller's arguments.
            Some(f) => unsafe { f(sig, handler) },
            None => libc::SIG_ERR,
        }
    })
}

/// `__sysv_signal`, what `signal` becomes under `_XOPEN_SOURCE` without
/// `_DEFAULT_SOURCE`.
///
/// # Safety
/// As `sysv_signal(3)`.
#[no_mangle]
pub unsafe extern "C" fn __sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    errno_guard("__sysv_signal", libc::SIG_ERR, || {
        // SAFETY: the caller's contract.
        unsafe { sysv_signal(sig, handler) }
    })
}

/// `sigset(3)` (System V): `SIG_HOLD` blocks; any other disposition is
/// installed and the signal unblocked.
///
/// # Safety
/// As `sigset(3)`.
#[no_mangle]
pub unsafe extern "C" fn sigset(sig: c_int, disp: libc::sighandler_t) -> libc::sighandler_t {
    errno_guard("sigset", libc::SIG_ERR, || {
        if sig == BUS {
            if disp == SIG_HOLD {
                let old = bus_current().sa_sigaction;
                return if bus_mask(libc::SIG_BLOCK) { SIG_HOLD } else { old };
            }
            let old = bus_handler(disp, empty_set(), 0);
            if old == libc::SIG_ERR {
                return old;
            }
            return if bus_mask(libc::SIG_UNBLOCK) { SIG_HOLD } else { old };
        }
        match NEXT_SIGSET.get::<SignalFn>() {
            // SAFETY: the C library's sigset with the caller's arguments.
            Some(f) => unsafe { f(sig, disp) },
            None => libc::SIG_ERR,
        }
    })
}

/// `sigignore(3)`.
///
/// # Safety
/// As `sigignore(3)`.
#[no_mangle]
pub unsafe extern "C" fn sigignore(sig: c_int) -> c_int {
    errno_guard("sigignore", -1, || {
        if sig == BUS {
            return if bus_handler(libc::SIG_IGN, empty_set(), 0) == libc::SIG_ERR { -1 } else { 0 };
        }
        // SAFETY: the C library's sigignore with the caller's argument.
        NEXT_SIGIGNORE.get::<SigFn>().map_or(-1, |f| unsafe { f(sig) })
    })
}

/// `sighold(3)`.
///
/// # Safety
/// As `sighold(3)`.
#[no_mangle]
pub unsafe extern "C" fn sighold(sig: c_int) -> c_int {
    errno_guard("sighold", -1, || {
        if sig == BUS {
            bus_mask(libc::SIG_BLOCK);
            return 0;
        }
        // SAFETY: the C library's sighold with the caller's argument.
        NEXT_SIGHOLD.get::<SigFn>().map_or(-1, |f| unsafe { f(sig) })
    })
}

/// `sigrelse(3)`.
///
/// # Safety
/// As `sigrelse(3)`.
#[no_mangle]
pub unsafe extern "C" fn sigrelse(sig: c_int) -> c_int {
    errno_guard("sigrelse", -1, || {
        if sig == BUS {
            bus_mask(libc::SIG_UNBLOCK);
            return 0;
        }
        // SAFETY: the C library's sigrelse with the caller's argument.
        NEXT_SIGRELSE.get::<SigFn>().map_or(-1, |f| unsafe { f(sig) })
    })
}

/// `siginterrupt(3)`: whether the signal interrupts system calls.
///
/// # Safety
/// As `siginterrupt(3)`.
#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    errno_guard("siginterrupt", -1, || {
        if sig == BUS {
            let mut act = bus_current();
            if flag != 0 {
                act.sa_flags &= !libc::SA_RESTART;
            } else {
                act.sa_flags |= libc::SA_RESTART;
            }
            // SAFETY: `act` is a valid sigaction.
            return unsafe { chain::sigaction(BUS, &act, std::ptr::null_mut()) };
        }
        // SAFETY: the C library's siginterrupt with the caller's arguments.
        NEXT_SIGINTERRUPT.get::<SiginterruptFn>().map_or(-1, |f| unsafe { f(sig, flag) })
    })
}

/// `sigprocmask(2)`.
///
/// # Safety
/// As `sigprocmask(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    errno_guard("sigprocmask", -1, || {
        // SAFETY: the caller's contract.
        match unsafe { chain::sigmask(how, set, old) } {
            0 => 0,
            e => {
                set_errno(e);
                -1
            }
        }
    })
}

/// `pthread_sigmask(3)`.
///
/// # Safety
/// As `pthread_sigmask(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    crate::guard::value("pthread_sigmask", libc::EINVAL, || {
        // SAFETY: the caller's contract.
        unsafe { chain::sigmask(how, set, old) }
    })
}

/// `sigsuspend(2)`.
///
/// # Safety
/// As `sigsuspend(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigsuspend(set: *const libc::sigset_t) -> c_int {
    errno_guard("sigsuspend", -1, || {
        // SAFETY: the caller's contract.
        unsafe { chain::sigsuspend(set) }
    })
}

/// The kernel's `struct sigaction` (x86-64), as `rt_sigaction` takes it.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

fn to_set(k: u64) -> libc::sigset_t {
    let mut s = empty_set();
    for sig in 1..=64 {
        if k & (1u64 << (sig - 1)) != 0 {
            // SAFETY: sigaddset writes only `s`.
            unsafe { libc::sigaddset(&mut s, sig) };
        }
    }
    s
}

fn from_set(s: &libc::sigset_t) -> u64 {
    // SAFETY: sigismember only reads.
    (1..=64).filter(|&sig| unsafe { libc::sigismember(s, sig) } == 1).fold(0, |k, sig| k | (1u64 << (sig - 1)))
}

/// `syscall(2)`: the C library's, except for the signal system calls, which
/// take the same way as the functions above. Defined with six fixed
/// arguments: on x86-64 a variadic call passes them in the same registers
/// (and the sixth on the stack), and the kernel ignores the ones a call
/// does not use.
///
/// # Safety
/// As `syscall(2)` with these arguments.
#[cfg(target_arch = "x86_64")]
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    errno_guard("syscall", -1, || {
        let r = match n {
            // SAFETY: the caller's contract, per system call.
            libc::SYS_rt_sigaction if d == 8 => unsafe {
                rt_sigaction(a as c_int, b as *const KernelSigaction, c as *mut KernelSigaction)
            },
            // SAFETY: as above.
            libc::SYS_rt_sigprocmask if d == 8 => unsafe { rt_sigprocmask(a as c_int, b as *const u64, c as *mut u64) },
            libc::SYS_rt_sigsuspend if b == 8 && a != 0 => {
                // SAFETY: the caller's 8-byte set, read once.
                let s = to_set(unsafe { *(a as *const u64) });
                // SAFETY: `s` is a valid set.
                let r = unsafe { chain::sigsuspend(&s) };
                if r < 0 {
                    // SAFETY: errno is thread-local.
                    -(unsafe { *libc::__errno_location() } as c_long)
                } else {
                    r as c_long
                }
            }
            // SAFETY: the caller's contract.
            _ => unsafe { vsci_sys::raw_syscall(n, [a, b, c, d, e, f]) },
        };
        if (-4095..0).contains(&r) {
            set_errno(-r as c_int);
            -1
        } else {
            r
        }
    })
}

/// `rt_sigaction` made directly: SIGBUS through the chain; other signals
/// to the kernel with SIGBUS out of their mask. Returns `-errno` or 0.
///
/// # Safety
/// `act` null or readable, `old` null or writable.
unsafe fn rt_sigaction(sig: c_int, act: *const KernelSigaction, old: *mut KernelSigaction) -> c_long {
    // SAFETY: the caller's contract.
    let new = unsafe { act.as_ref() }.copied();
    if sig == BUS {
        let lib = new.map(|k| {
            // SAFETY: an all-zero sigaction is valid; fields set below.
            let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
            a.sa_sigaction = k.handler;
            a.sa_flags = k.flags as c_int;
            a.sa_mask = to_set(k.mask);
            // The program's own trampoline (SA_RESTORER), reported back.
            a.sa_restorer = (k.restorer != 0).then(|| {
                // SAFETY: a non-null code address the program gave as its
                // trampoline; we only store and report it, never call it.
                unsafe { std::mem::transmute::<usize, extern "C" fn()>(k.restorer) }
            });
            a
        });
        // SAFETY: as above.
        let mut prev: libc::sigaction = unsafe { std::mem::zeroed() };
        let p = lib.as_ref().map_or(std::ptr::null(), |a| a as *const _);
        // SAFETY: `p` null or valid; `prev` writable.
        if unsafe { chain::sigaction(sig, p, &mut prev) } != 0 {
            // SAFETY: errno is thread-local.
            return -(unsafe { *libc::__errno_location() } as c_long);
        }
        if !old.is_null() {
            let k = KernelSigaction {
                handler: prev.sa_sigaction,
                flags: prev.sa_flags as u32 as u64,
                restorer: prev.sa_restorer.map_or(0, |f| f as usize),
                mask: from_set(&prev.sa_mask),
            };
            // SAFETY: the caller's contract: `old` is writable.
            unsafe { *old = k };
        }
        return 0;
    }
    let bus_bit = 1u64 << (BUS - 1);
    let stripped = new.map(|mut k| {
        k.mask &= !bus_bit;
        k
    });
    let p = stripped.as_ref().map_or(std::ptr::null(), |k| k as *const _);
    // SAFETY: `p` null or our valid copy; `old` the caller's.
    let r = unsafe { vsci_sys::raw_syscall(libc::SYS_rt_sigaction, [sig as _, p as _, old as _, 8, 0, 0]) };
    if r == 0 && (1..=64).contains(&sig) {
        let held = chain::note_mask_held(sig, new.map(|k| k.mask & bus_bit != 0));
        if held && !old.is_null() {
            // SAFETY: the kernel just filled `old`.
            unsafe { (*old).mask |= bus_bit };
        }
    }
    r
}

/// `rt_sigprocmask` made directly, through the chain. Returns `-errno` or 0.
///
/// # Safety
/// `set` null or 8 readable bytes, `old` null or 8 writable bytes.
unsafe fn rt_sigprocmask(how: c_int, set: *const u64, old: *mut u64) -> c_long {
    // SAFETY: the caller's contract.
    let new = unsafe { set.as_ref() }.map(|&k| to_set(k));
    let mut prev = empty_set();
    let p = new.as_ref().map_or(std::ptr::null(), |s| s as *const _);
    // SAFETY: `p` null or valid; `prev` writable.
    match unsafe { chain::sigmask(how, p, &mut prev) } {
        0 => {
            if !old.is_null() {
                // SAFETY: the caller's contract.
                unsafe { *old = from_set(&prev) };
            }
            0
        }
        e => -(e as c_long),
    }
}

/// Is `addr` in the program's executable (libsisci linked statically)?
fn in_executable(addr: usize) -> bool {
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // Called by the C library: a panic of ours stops the walk.
        crate::guard::value("in_executable", 1, || {
            // SAFETY: the loader passes a valid info; `data` is the (addr,
            // found) pair `in_executable` passed, alive for the whole walk.
            unsafe {
                let (addr, found) = &mut *(data as *mut (usize, bool));
                let info = &*info;
                for i in 0..info.dlpi_phnum as usize {
                    let ph = &*info.dlpi_phdr.add(i);
                    let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                    if ph.p_type == libc::PT_LOAD && *addr >= start && *addr < start + ph.p_memsz as usize {
                        *found = true;
                    }
                }
            }
            1 // the first object is the executable: stop there
        })
    }
    let mut data = (addr, false);
    // SAFETY: the callback only reads the loader's info and writes `data`.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut data as *mut (usize, bool) as *mut c_void) };
    data.1
}

/// How remote maps trap in this process (see the module's documentation).
fn choose_delivery() -> Delivery {
    match std::env::var("VSCI_TRAP").as_deref() {
        Ok("signal") => return Delivery::Signal,
        Ok("thread") => return Delivery::Thread,
        _ => {}
    }
    if in_executable(choose_delivery as *const () as usize) {
        // Linked statically: the program's own signal calls were bound to
        // ours when it was linked.
        return Delivery::Signal;
    }
    // Does a `sigaction` called through the process's symbol scope reach
    // ours (first in line, or behind another interposer that chains on)?
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
    let global = unsafe { dlsym(RTLD_DEFAULT, c"sigaction".as_ptr()) };
    if global.is_null() {
        return Delivery::Thread;
    }
    let before = PROBE.load(Ordering::Relaxed);
    // SAFETY: `global` is the process's `sigaction`; a query with a null
    // new action only fills `old`.
    unsafe {
        let f = std::mem::transmute::<
            *mut c_void,
            unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int,
        >(global);
        let mut old: libc::sigaction = std::mem::zeroed();
        f(BUS, std::ptr::null(), &mut old);
    }
    if PROBE.load(Ordering::Relaxed) != before {
        Delivery::Signal
    } else {
        Delivery::Thread
    }
}

extern "C" fn at_load() {
    // Run by the loader: a panic of ours is logged, and the trap keeps its
    // default delivery.
    crate::guard::void("at_load", || {
        chain::resolve();
        for n in [
            &NEXT_SIGNAL,
            &NEXT_SYSV_SIGNAL,
            &NEXT_SIGSET,
            &NEXT_SIGIGNORE,
            &NEXT_SIGHOLD,
            &NEXT_SIGRELSE,
            &NEXT_SIGINTERRUPT,
        ] {
            n.resolve();
        }
        set_delivery(choose_delivery());
    })
}

// Before the program's main (or when dlopen returns).
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;
