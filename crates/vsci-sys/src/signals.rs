//! Keeping a program's asynchronous signals out of libsisci's own code.
//!
//! A program's signals are its own: a signal it sends to itself (`kill`,
//! a timer, a terminal's `SIGINT`) must reach one of *its* threads, and a
//! program that blocks a signal in its threads and waits for it with
//! `sigwait` must get it, not have the kernel hand it to a thread libsisci
//! started (which would run the default action, often death). So every
//! thread of ours starts with the program's asynchronous signals blocked
//! ([`spawn`]); threads the C libraries we call start (libfabric's) inherit
//! that when they are created inside [`quiet`].
//!
//! And a program may store into a remote map from a signal handler (plain
//! stores are async-signal-safe on hardware). That store runs libsisci's
//! store path, which takes the map's lock; if the handler interrupted this
//! thread while it held that lock (in a `memcpy` into the map, a flush, the
//! store path itself), it would wait forever. So code that holds a lock
//! the store path takes does so inside [`quiet`]: a signal arriving then
//! waits until the lock is let go, a few microseconds, and is delivered
//! then. (The store path's own `SIGBUS` handler blocks them with its
//! `sa_mask`, at no cost.)
//!
//! What stays deliverable: the signals a fault raises (`SIGBUS`,
//! `SIGSEGV`, `SIGILL`, `SIGFPE`, `SIGTRAP`, `SIGSYS`; blocked, the kernel
//! would kill instead of delivering them) and the C library's two internal
//! signals (32, 33: `setuid` in another thread waits for every thread to
//! take 33, so a thread of ours that blocked it for good would hang it).

use std::cell::Cell;
use std::io;
use std::sync::{Mutex, MutexGuard};
use std::thread::{Builder, JoinHandle};

use crate::raw_syscall;

/// Bit of signal `sig` in the kernel's 64-bit signal mask.
const fn bit(sig: libc::c_int) -> u64 {
    1u64 << (sig - 1)
}

/// The signals [`quiet`] blocks: every signal but those above (and
/// `SIGKILL`/`SIGSTOP`, which nothing blocks).
pub const ASYNC_MASK: u64 = !(bit(libc::SIGBUS)
    | bit(libc::SIGSEGV)
    | bit(libc::SIGILL)
    | bit(libc::SIGFPE)
    | bit(libc::SIGTRAP)
    | bit(libc::SIGSYS)
    | bit(libc::SIGKILL)
    | bit(libc::SIGSTOP)
    | bit(32)
    | bit(33));

/// A `sigset_t` holding the signals of the kernel's 64-bit `mask`.
pub fn sigset(mask: u64) -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is the empty set; its first 8 bytes are the
    // kernel's mask on Linux (glibc and musl alike).
    let mut s: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigset_t is at least 8 bytes (128 in glibc).
    unsafe { std::ptr::write_unaligned(&mut s as *mut libc::sigset_t as *mut u64, mask) };
    s
}

/// The kernel's 64-bit mask of `set` (signals 1 to 64).
pub fn mask_of(set: &libc::sigset_t) -> u64 {
    // SAFETY: as in `sigset`: the first 8 bytes, read unaligned-safe.
    unsafe { std::ptr::read_unaligned(set as *const libc::sigset_t as *const u64) }
}

thread_local! {
    /// How many [`Quiet`]s this thread holds, or 1 for good in a thread of
    /// ours: inside one, the signals are blocked already and another costs
    /// no system call. Const-initialised with no destructor: reading it is
    /// a plain TLS access, fit for a signal handler.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The program's asynchronous signals stay blocked in this thread until
/// this is dropped; then the mask is what it was.
#[must_use = "the signals are let through again when this is dropped"]
pub struct Quiet {
    /// The mask to put back, if this one blocked them.
    old: Option<u64>,
}

/// Block the program's asynchronous signals in this thread (see the module
/// documentation); nests, and costs nothing inside another. Safe in a
/// signal handler (at most one system call).
pub fn quiet() -> Quiet {
    if DEPTH.with(|d| d.replace(d.get() + 1)) > 0 {
        return Quiet { old: None };
    }
    let set = ASYNC_MASK;
    let mut old = 0u64;
    // SAFETY: rt_sigprocmask reads 8 bytes at `set` and writes 8 at `old`,
    // both live locals; the raw call bypasses libsisci's own interposed
    // mask functions (this is not the program changing its mask).
    unsafe {
        raw_syscall(
            libc::SYS_rt_sigprocmask,
            [libc::SIG_BLOCK as _, &set as *const u64 as _, &mut old as *mut u64 as _, 8, 0, 0],
        )
    };
    Quiet { old: Some(old) }
}

/// For a signal handler installed with [`ASYNC_MASK`] as its `sa_mask`:
/// the kernel blocked them already; [`quiet`] inside costs nothing.
pub fn held() -> Quiet {
    DEPTH.with(|d| d.set(d.get() + 1));
    Quiet { old: None }
}

/// Run `f` as code that is not ours: a program's signal handler called
/// from inside ours, with the program's own mask in force. Inside, [`quiet`]
/// blocks again.
pub fn outside<R>(f: impl FnOnce() -> R) -> R {
    let depth = DEPTH.with(|d| d.replace(0));
    let r = f();
    DEPTH.with(|d| d.set(depth));
    r
}

impl Drop for Quiet {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        if let Some(old) = self.old {
            // SAFETY: as in `quiet`; puts back the mask read there.
            unsafe {
                raw_syscall(libc::SYS_rt_sigprocmask, [libc::SIG_SETMASK as _, &old as *const u64 as _, 0, 8, 0, 0])
            };
        }
    }
}

/// Start a thread of ours with the program's asynchronous signals blocked
/// for its whole life (it inherits the mask at creation, so no signal can
/// reach it before it runs).
pub fn spawn<F, T>(builder: Builder, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let _q = quiet();
    builder.spawn(move || {
        DEPTH.with(|d| d.set(1));
        f()
    })
}

/// A lock the store path takes, held with the program's asynchronous
/// signals blocked (see the module documentation). In the store path
/// itself, and in threads of ours, the signals are blocked already and this
/// costs nothing more.
pub struct Locked<'a, T> {
    // Dropped in this order: the lock, then the signals.
    guard: MutexGuard<'a, T>,
    _quiet: Quiet,
}

/// Take `m` inside [`quiet`]. A panic while it was held does not make it
/// unusable: a later store would panic again, inside a signal handler.
pub fn lock<T>(m: &Mutex<T>) -> Locked<'_, T> {
    let quiet = quiet();
    Locked { guard: m.lock().unwrap_or_else(|e| e.into_inner()), _quiet: quiet }
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// This thread's blocked-signal mask (the kernel's 64 bits).
pub fn current_mask() -> u64 {
    let mut old = 0u64;
    // SAFETY: a null new set only reads the mask into `old` (8 bytes).
    unsafe { raw_syscall(libc::SYS_rt_sigprocmask, [libc::SIG_BLOCK as _, 0, &mut old as *mut u64 as _, 8, 0, 0]) };
    old
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigsets_hold_the_mask() {
        let s = sigset(ASYNC_MASK);
        // SAFETY: sigismember only reads the set.
        let has = |sig| unsafe { libc::sigismember(&s, sig) == 1 };
        assert!(has(libc::SIGUSR1) && has(libc::SIGALRM) && has(libc::SIGINT) && has(64));
        assert!(!has(libc::SIGBUS) && !has(libc::SIGSEGV) && !has(32));
        assert_eq!(mask_of(&s), ASYNC_MASK);
    }

    #[test]
    fn quiet_blocks_and_restores() {
        let before = current_mask();
        {
            let _q = quiet();
            assert_eq!(current_mask() & ASYNC_MASK, ASYNC_MASK);
            assert_eq!(current_mask() & bit(libc::SIGSEGV), before & bit(libc::SIGSEGV));
            {
                let _inner = quiet();
            }
            assert_eq!(current_mask() & ASYNC_MASK, ASYNC_MASK, "an inner quiet must not unblock");
            let inside = outside(|| {
                let _q = quiet();
                current_mask()
            });
            assert_eq!(inside & ASYNC_MASK, ASYNC_MASK);
        }
        assert_eq!(current_mask(), before);
    }

    #[test]
    fn spawned_threads_block_async_signals_only() {
        let before = current_mask();
        let m = spawn(Builder::new(), current_mask).unwrap().join().unwrap();
        assert_eq!(m & ASYNC_MASK, ASYNC_MASK);
        for s in [libc::SIGBUS, libc::SIGSEGV, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, 32, 33] {
            assert_eq!(m & bit(s), 0, "signal {s} must stay deliverable");
        }
        assert_eq!(current_mask(), before, "the spawning thread's mask is put back");
    }
}
