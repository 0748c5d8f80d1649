//! Signal chaining: the trap's `SIGBUS` handler stays first, whatever the
//! program does with its signals, and the program still sees and gets what
//! it asked for.
//!
//! A store into a remote map is trapped with a `SIGBUS` in the storing
//! thread ([`crate::trap`]). Programs install their own handlers for fatal
//! signals (crash reporters, MPI and PGAS runtimes, language runtimes), save
//! and restore dispositions with `signal()`, and block signals in threads.
//! Each of those would take the trap away: the next remote store would kill
//! the program. So libsisci puts its own `sigaction`, `signal`,
//! `sigprocmask`, `pthread_sigmask`, ... in front of the C library's (the
//! way the JVM's libjsig does; crates/sisci/src/signals.rs), and they call
//! into this module:
//!
//! * **Dispositions.** Once the trap's handler is installed, a program's
//!   `sigaction(SIGBUS, ...)` changes only the *recorded* disposition, which
//!   every later query reports back exactly as if it were in force. The
//!   kernel keeps the trap's handler; faults that are not the trap's are
//!   passed to the recorded one ([`pass_on`]) with its flags honoured:
//!   `SA_SIGINFO` or not, `SA_RESETHAND`, its `sa_mask`, `SA_ONSTACK` (the
//!   handler runs on the thread's alternate stack), `SIG_DFL` (the default
//!   action: the access repeats with the default disposition and the kernel
//!   dumps core for the right fault) and `SIG_IGN` (a synchronous fault
//!   cannot be ignored: the kernel would kill, and so do we).
//! * **Masks.** A thread that blocks `SIGBUS` and then faults is killed by
//!   the kernel (a synchronous signal cannot wait). So `SIGBUS` is never
//!   really blocked: it is removed from every mask the program sets
//!   (`sigprocmask`, `pthread_sigmask`, `sigsuspend`, every handler's
//!   `sa_mask`), and a per-thread *virtual* bit remembers that the program
//!   blocked it, reported back by every query. A `SIGBUS` sent by another
//!   process (`kill`) while the program thinks it blocked waits until the
//!   program unblocks it; a fault of the program's own while it thinks
//!   `SIGBUS` blocked takes the default action, as the kernel would.
//!
//! Why interposition and not re-installing our handler when it goes
//! missing: a program that installs its handler and stores at once would
//! die before any check ran. Interposition is what the JVM (libjsig),
//! Android's sigchain and the sanitizers do; libsigsegv, which asks the
//! program to call it, cannot serve programs that were written for hardware
//! that needs no signal at all. Where interposition cannot work (libsisci
//! opened with `dlopen` outside the global symbol scope, as Python's ctypes
//! does), libsisci traps with a handler thread instead and needs no signal
//! (see [`crate::trap::Delivery`]).
//!
//! What is not virtualised (docs/api.md says so): a `SIGBUS` the program
//! waits for with `sigwait`/`sigtimedwait`/a `signalfd` (it is never
//! blocked, so it is handled instead), a new thread's virtual bit (it starts
//! unblocked), the mask across `exec`, and a nested fault of the program's
//! own inside its own `SIGBUS` handler (not deferred).

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use vsci_sys::raw_syscall;

/// `SA_RESTORER` (the Linux UAPI value; the `libc` crate does not export
/// it): the C library sets it with its own return trampoline.
const SA_RESTORER: c_int = 0x0400_0000;

/// The one signal the trap uses.
pub const TRAP_SIGNAL: c_int = libc::SIGBUS;

type SigactionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type SigmaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
type SigsuspendFn = unsafe extern "C" fn(*const libc::sigset_t) -> c_int;

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const std::ffi::c_char) -> *mut c_void;
    /// glibc's own name of `sigaction`, which no interposer replaces.
    fn __sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
}

/// `RTLD_NEXT` (glibc: `((void *) -1l)`).
const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

/// The next definitions after ours (the C library's, or another
/// interposer's that comes after us), found once outside any handler.
static NEXT_SIGACTION: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static NEXT_SIGMASK: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static NEXT_SIGSUSPEND: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static RESOLVED: AtomicBool = AtomicBool::new(false);

/// Find the functions behind ours. Called at load (libsisci's
/// constructor) and before the handler is installed; never in a handler
/// (`dlsym` is not async-signal-safe).
pub fn resolve() {
    if RESOLVED.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: dlsym with RTLD_NEXT and NUL-terminated names; it only reads.
    unsafe {
        NEXT_SIGACTION.store(dlsym(RTLD_NEXT, c"sigaction".as_ptr()), Ordering::Release);
        NEXT_SIGMASK.store(dlsym(RTLD_NEXT, c"pthread_sigmask".as_ptr()), Ordering::Release);
        NEXT_SIGSUSPEND.store(dlsym(RTLD_NEXT, c"sigsuspend".as_ptr()), Ordering::Release);
    }
    RESOLVED.store(true, Ordering::Release);
}

/// The kernel's `sigaction`, past every interposer of ours.
///
/// # Safety
/// As `sigaction(2)`.
pub unsafe fn real_sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let f = NEXT_SIGACTION.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: the caller's contract; glibc's internal name.
        return unsafe { __sigaction(sig, act, old) };
    }
    // SAFETY: `f` is the `sigaction` dlsym found after ours, with its C type.
    unsafe { std::mem::transmute::<*mut c_void, SigactionFn>(f)(sig, act, old) }
}

/// The thread's real signal mask, past every interposer of ours. Returns 0
/// or an error number (as `pthread_sigmask`).
///
/// # Safety
/// As `pthread_sigmask(3)`.
pub unsafe fn real_sigmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    let f = NEXT_SIGMASK.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: rt_sigprocmask reads 8 bytes of `set` and writes 8 of `old`
        // (both at least that large: a sigset_t is 128 bytes).
        let r = unsafe { raw_syscall(libc::SYS_rt_sigprocmask, [how as _, set as _, old as _, 8, 0, 0]) };
        return if r < 0 { -r as c_int } else { 0 };
    }
    // SAFETY: `f` is the `pthread_sigmask` dlsym found after ours.
    unsafe { std::mem::transmute::<*mut c_void, SigmaskFn>(f)(how, set, old) }
}

// ---- the program's recorded SIGBUS disposition ------------------------------

/// The program's disposition of `SIGBUS` while the trap's handler holds the
/// real one: a sequence lock, so that a handler reads it without a lock
/// (writers take `WRITER`; readers retry while the count is odd or moved).
struct Recorded {
    seq: AtomicU64,
    act: UnsafeCell<libc::sigaction>,
}

// SAFETY: `act` is written only by the holder of WRITER between two
// increments of `seq`, and read only through `read`, which discards any
// copy made while the count was odd or changed (a sequence lock).
unsafe impl Sync for Recorded {}

static PROGRAM: Recorded = Recorded {
    seq: AtomicU64::new(0),
    // SAFETY: an all-zero sigaction is SIG_DFL with no flags and an empty mask.
    act: UnsafeCell::new(unsafe { std::mem::zeroed() }),
};
static WRITER: AtomicBool = AtomicBool::new(false);
/// Whether the trap's handler is the kernel's disposition of SIGBUS.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The trap's own action as installed (to change its SA_RESTART flag).
static OURS: Recorded = Recorded {
    seq: AtomicU64::new(0),
    // SAFETY: as above.
    act: UnsafeCell::new(unsafe { std::mem::zeroed() }),
};
/// The C library's signal trampoline, as it reports it back in `sa_restorer`.
static RESTORER: AtomicUsize = AtomicUsize::new(0);

impl Recorded {
    fn read(&self) -> libc::sigaction {
        loop {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 0 {
                // SAFETY: a plain-old-data copy; a copy torn by a writer is
                // discarded below (the count moved).
                let v = unsafe { std::ptr::read_volatile(self.act.get()) };
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s {
                    return v;
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Store `v`; the caller holds WRITER.
    fn write(&self, v: &libc::sigaction) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        // SAFETY: only the WRITER holder writes; readers discard torn copies.
        unsafe { std::ptr::write_volatile(self.act.get(), *v) };
        self.seq.fetch_add(1, Ordering::Release);
    }
}

/// Take the writers' lock. Outside handlers only.
fn lock() -> WriterGuard {
    while WRITER.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
    WriterGuard
}

/// Try the writers' lock once (inside a handler, where waiting for a
/// writer this thread interrupted would never end).
fn try_lock() -> Option<WriterGuard> {
    (!WRITER.swap(true, Ordering::Acquire)).then_some(WriterGuard)
}

struct WriterGuard;
impl Drop for WriterGuard {
    fn drop(&mut self) {
        WRITER.store(false, Ordering::Release);
    }
}

// ---- masks -------------------------------------------------------------

/// For each signal, whether the program's `sa_mask` for it held SIGBUS
/// (taken out before the kernel saw it, put back when reported).
static MASK_HELD_BUS: [AtomicBool; 65] = [const { AtomicBool::new(false) }; 65];

thread_local! {
    /// This thread's program believes SIGBUS blocked.
    static BLOCKED: Cell<bool> = const { Cell::new(false) };
    /// While the program's own SIGBUS handler runs in this thread without
    /// `SA_NODEFER` (the kernel would have blocked SIGBUS for it): an
    /// address on that handler's stack, at its call; 0 otherwise.
    static IN_HANDLER: Cell<usize> = const { Cell::new(0) };
}

/// How deep below the handler's call a fault still counts as inside it.
const HANDLER_STACK_SPAN: usize = 64 << 20;

/// Is the faulting code (stack pointer `sp`) inside the program's own
/// SIGBUS handler that the kernel would have run with SIGBUS blocked? A
/// handler left by `siglongjmp` leaves the mark behind; a fault above it on
/// the stack shows that, and clears it.
fn inside_blocking_handler(sp: usize) -> bool {
    let mark = IN_HANDLER.with(|m| m.get());
    if mark == 0 {
        return false;
    }
    if sp < mark && mark - sp < HANDLER_STACK_SPAN {
        return true;
    }
    IN_HANDLER.with(|m| m.set(0));
    false
}

#[cfg(target_arch = "x86_64")]
fn fault_sp(ctx: *mut c_void) -> usize {
    // SAFETY: for SA_SIGINFO handlers the third argument is the thread's
    // ucontext_t; gregs[REG_RSP] is the interrupted stack pointer.
    unsafe { (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RSP as usize] as usize }
}

#[cfg(not(target_arch = "x86_64"))]
fn fault_sp(_ctx: *mut c_void) -> usize {
    0
}

/// The mask of the thread a signal interrupted (the kernel saved it in the
/// frame and puts it back at sigreturn).
fn interrupted_mask(ctx: *mut c_void) -> u64 {
    // SAFETY: for SA_SIGINFO handlers the third argument is the thread's
    // ucontext_t; the kernel wrote the first 8 bytes of uc_sigmask.
    vsci_sys::signals::mask_of(unsafe { &(*(ctx as *const libc::ucontext_t)).uc_sigmask })
}

/// A SIGBUS sent to the process while a thread's program believed it
/// blocked: raised again when a thread unblocks it.
static PENDING: AtomicBool = AtomicBool::new(false);

fn has_bus(set: &libc::sigset_t) -> bool {
    // SAFETY: sigismember only reads the set.
    unsafe { libc::sigismember(set, TRAP_SIGNAL) == 1 }
}

fn without_bus(set: &libc::sigset_t) -> libc::sigset_t {
    let mut s = *set;
    // SAFETY: sigdelset only writes the set it is given.
    unsafe { libc::sigdelset(&mut s, TRAP_SIGNAL) };
    s
}

fn add_bus(set: &mut libc::sigset_t) {
    // SAFETY: sigaddset only writes the set it is given.
    unsafe { libc::sigaddset(set, TRAP_SIGNAL) };
}

fn valid(sig: c_int) -> bool {
    (1..=64).contains(&sig)
}

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always writable.
    unsafe { *libc::__errno_location() = e };
}

/// Raise SIGBUS in this thread (after a virtual unblock).
fn raise_bus() {
    // SAFETY: tgkill on our own pid and tid with a valid signal.
    unsafe {
        let pid = raw_syscall(libc::SYS_getpid, [0; 6]);
        let tid = raw_syscall(libc::SYS_gettid, [0; 6]);
        raw_syscall(libc::SYS_tgkill, [pid, tid, TRAP_SIGNAL as _, 0, 0, 0]);
    }
}

// ---- what the interposers call ------------------------------------------

/// `sigaction(2)` as the program sees it.
///
/// # Safety
/// As `sigaction(2)`: `act` null or readable, `old` null or writable.
pub unsafe fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    resolve();
    if !valid(sig) {
        // SAFETY: the caller's contract; the kernel reports the error.
        return unsafe { real_sigaction(sig, act, old) };
    }
    // SAFETY: the caller's contract: `act` is null or a valid sigaction.
    let new = unsafe { act.as_ref() }.copied();
    if sig == TRAP_SIGNAL {
        let _w = lock();
        if INSTALLED.load(Ordering::Acquire) {
            if let Some(new) = new {
                if new.sa_sigaction == libc::SIG_ERR {
                    set_errno(libc::EINVAL);
                    return -1;
                }
            }
            if !old.is_null() {
                // SAFETY: the caller's contract: `old` is writable.
                unsafe { *old = reported(PROGRAM.read()) };
            }
            if let Some(new) = new {
                PROGRAM.write(&new);
                mirror_restart(&new);
            }
            return 0;
        }
    }
    let held = MASK_HELD_BUS[sig as usize].load(Ordering::Relaxed);
    let stripped = new.map(|mut a| {
        a.sa_mask = without_bus(&a.sa_mask);
        a
    });
    let p = stripped.as_ref().map_or(std::ptr::null(), |a| a as *const _);
    // SAFETY: the caller's contract; `p` is null or our valid copy.
    let r = unsafe { real_sigaction(sig, p, old) };
    if r == 0 {
        if held && !old.is_null() {
            // SAFETY: `old` was just filled by the kernel and is writable.
            add_bus(unsafe { &mut (*old).sa_mask });
        }
        if let Some(a) = new {
            MASK_HELD_BUS[sig as usize].store(has_bus(&a.sa_mask), Ordering::Relaxed);
        }
    }
    r
}

/// A recorded action as the C library would report it (it always installs
/// its own trampoline).
fn reported(mut a: libc::sigaction) -> libc::sigaction {
    let r = RESTORER.load(Ordering::Relaxed);
    // A program that gave its own trampoline (a direct rt_sigaction) reads
    // back its own.
    if r != 0 && a.sa_flags & SA_RESTORER == 0 {
        a.sa_flags |= SA_RESTORER;
        a.sa_restorer = Some(
            // SAFETY: `r` is the non-null trampoline the C library reported
            // for our own handler; it has this type.
            unsafe { std::mem::transmute::<usize, extern "C" fn()>(r) },
        );
    }
    a
}

/// Interrupted system calls restart under the trap's handler exactly when
/// they would under the program's.
fn mirror_restart(program: &libc::sigaction) {
    let mut ours = OURS.read();
    let want = (ours.sa_flags & !libc::SA_RESTART) | (program.sa_flags & libc::SA_RESTART);
    if want != ours.sa_flags {
        ours.sa_flags = want;
        OURS.write(&ours);
        // SAFETY: re-installing our own valid action.
        unsafe { real_sigaction(TRAP_SIGNAL, &ours, std::ptr::null_mut()) };
    }
}

/// `pthread_sigmask(3)` as the program sees it (returns 0 or an error
/// number; `sigprocmask` converts).
///
/// # Safety
/// As `pthread_sigmask(3)`.
pub unsafe fn sigmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    resolve();
    // SAFETY: the caller's contract: `set` is null or a valid set.
    let new = unsafe { set.as_ref() }.copied();
    if new.is_some() && !matches!(how, libc::SIG_BLOCK | libc::SIG_UNBLOCK | libc::SIG_SETMASK) {
        return libc::EINVAL;
    }
    let was = BLOCKED.with(|b| b.get());
    let stripped = new.map(|s| without_bus(&s));
    let p = stripped.as_ref().map_or(std::ptr::null(), |s| s as *const _);
    // SAFETY: the caller's contract; `p` null or our valid copy.
    let r = unsafe { real_sigmask(how, p, old) };
    if r != 0 {
        return r;
    }
    if was && !old.is_null() {
        // SAFETY: `old` was just filled and is writable.
        add_bus(unsafe { &mut *old });
    }
    if let Some(s) = new {
        let now = match how {
            libc::SIG_BLOCK => was || has_bus(&s),
            libc::SIG_UNBLOCK => was && !has_bus(&s),
            _ => has_bus(&s),
        };
        BLOCKED.with(|b| b.set(now));
        if was && !now && PENDING.swap(false, Ordering::AcqRel) {
            raise_bus();
        }
    }
    0
}

/// `sigsuspend(2)` as the program sees it: SIGBUS stays deliverable.
///
/// # Safety
/// As `sigsuspend(2)`.
pub unsafe fn sigsuspend(set: *const libc::sigset_t) -> c_int {
    resolve();
    // SAFETY: the caller's contract: `set` is null or a valid set.
    let Some(s) = (unsafe { set.as_ref() }) else {
        set_errno(libc::EFAULT);
        return -1;
    };
    let s = without_bus(s);
    let f = NEXT_SIGSUSPEND.load(Ordering::Acquire);
    if f.is_null() {
        // SAFETY: rt_sigsuspend reads 8 bytes of the set.
        let r = unsafe { raw_syscall(libc::SYS_rt_sigsuspend, [&s as *const _ as _, 8, 0, 0, 0, 0]) };
        set_errno(-r as c_int);
        return -1;
    }
    // SAFETY: `f` is the sigsuspend dlsym found after ours.
    unsafe { std::mem::transmute::<*mut c_void, SigsuspendFn>(f)(&s) }
}

/// For a signal whose action was set without [`sigaction`] (a direct
/// `rt_sigaction`): note whether the program's mask held SIGBUS (`None`: a
/// query). Returns whether the mask it replaced did.
pub fn note_mask_held(sig: c_int, held: Option<bool>) -> bool {
    if !valid(sig) {
        return false;
    }
    let flag = &MASK_HELD_BUS[sig as usize];
    match held {
        Some(h) => flag.swap(h, Ordering::Relaxed),
        None => flag.load(Ordering::Relaxed),
    }
}

/// Whether this thread's program believes SIGBUS blocked.
pub fn program_blocks() -> bool {
    BLOCKED.with(|b| b.get())
}

// ---- installing the trap's handler ----------------------------------------

/// Install `handler` as the kernel's SIGBUS disposition (once), recording
/// the program's disposition in force until then.
pub(crate) fn install(handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void)) {
    resolve();
    let _w = lock();
    if INSTALLED.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
    // both calls read and write only these local structs.
    unsafe {
        let mut prev: libc::sigaction = std::mem::zeroed();
        real_sigaction(TRAP_SIGNAL, std::ptr::null(), &mut prev);
        if MASK_HELD_BUS[TRAP_SIGNAL as usize].load(Ordering::Relaxed) {
            add_bus(&mut prev.sa_mask);
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        // No SA_ONSTACK: the handler switches to a stack of its own
        // (`on_private_stack`). SA_NODEFER: a fault of another trapped
        // range inside a handler (a program copying between two remote
        // maps) is handled too. SA_RESTART follows the program's choice.
        let restart = if prev.sa_sigaction == libc::SIG_DFL || prev.sa_sigaction == libc::SIG_IGN {
            libc::SA_RESTART
        } else {
            prev.sa_flags & libc::SA_RESTART
        };
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | restart;
        // The program's asynchronous signals wait while the handler runs:
        // one of its handlers that stores into the map being served would
        // wait for the lock this handler holds (vsci_sys::signals). Free:
        // the kernel sets and restores the mask with the frame.
        sa.sa_mask = vsci_sys::signals::sigset(vsci_sys::signals::ASYNC_MASK);
        // What the program reads back keeps only what it set (the C
        // library adds its trampoline itself when reporting).
        PROGRAM.write(&prev);
        OURS.write(&sa);
        real_sigaction(TRAP_SIGNAL, &sa, std::ptr::null_mut());
        let mut now: libc::sigaction = std::mem::zeroed();
        real_sigaction(TRAP_SIGNAL, std::ptr::null(), &mut now);
        if now.sa_flags & SA_RESTORER != 0 {
            RESTORER.store(now.sa_restorer.map_or(0, |f| f as usize), Ordering::Relaxed);
        }
    }
    INSTALLED.store(true, Ordering::Release);
}

// ---- passing on a SIGBUS that is not the trap's ----------------------------

/// A SIGBUS that is not the trap's: do what the program's disposition says,
/// as the kernel would have without us.
pub(crate) fn pass_on(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let act = PROGRAM.read();
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let code = unsafe { (*info).si_code };
    // Kernel-generated (a fault): it repeats if we return, and cannot wait.
    let synchronous = code > 0;
    let h = act.sa_sigaction;
    let blocked = program_blocks() || (synchronous && inside_blocking_handler(fault_sp(ctx)));
    if synchronous && (blocked || h == libc::SIG_DFL || h == libc::SIG_IGN) {
        // The kernel kills a thread whose synchronous signal is blocked or
        // ignored, with the default action: let the access repeat under it.
        default_disposition();
        return;
    }
    if !synchronous {
        if blocked {
            PENDING.store(true, Ordering::Release);
            return;
        }
        if h == libc::SIG_IGN {
            return;
        }
        if h == libc::SIG_DFL {
            default_disposition();
            raise_bus();
            return;
        }
    }
    if act.sa_flags & libc::SA_RESETHAND != 0 {
        if let Some(_w) = try_lock() {
            let mut reset = act;
            reset.sa_sigaction = libc::SIG_DFL;
            reset.sa_flags &= !(libc::SA_RESETHAND | libc::SA_SIGINFO);
            PROGRAM.write(&reset);
        }
    }
    // The handler's mask while it runs, as the kernel would have set it:
    // the interrupted mask and the handler's sa_mask (SIGBUS itself stays
    // deliverable). Set whole, not added: the trap's handler runs with the
    // asynchronous signals blocked (`install`), which the program's handler
    // must not inherit. The kernel restores the interrupted mask when the
    // trap's handler returns.
    let bits = interrupted_mask(ctx) | vsci_sys::signals::mask_of(&act.sa_mask);
    let mask = without_bus(&vsci_sys::signals::sigset(bits));
    // SAFETY: setting this thread's mask; `mask` is valid.
    unsafe { real_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut()) };
    let defer = act.sa_flags & libc::SA_NODEFER == 0;
    let call = ProgramCall { h, siginfo: act.sa_flags & libc::SA_SIGINFO != 0, defer, sig, info, ctx };
    let alt = if act.sa_flags & libc::SA_ONSTACK != 0 { alternate_stack_top() } else { None };
    match alt {
        // SAFETY: `top` is the top of the thread's alternate stack, which it
        // is not running on; `call_program` is an extern "C" fn taking the
        // ProgramCall that lives on this frame until it returns.
        Some(top) => unsafe { call_on_stack(top, call_program, &call as *const _ as *mut c_void) },
        None => call_program(&call as *const _ as *mut c_void),
    }
}

/// Put back the default disposition (the process is about to take the
/// default action of a fault).
fn default_disposition() {
    // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
    unsafe {
        let dfl: libc::sigaction = std::mem::zeroed();
        real_sigaction(TRAP_SIGNAL, &dfl, std::ptr::null_mut());
    }
}

struct ProgramCall {
    h: libc::sighandler_t,
    siginfo: bool,
    /// Without SA_NODEFER: SIGBUS counts as blocked while it runs.
    defer: bool,
    sig: c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut c_void,
}

extern "C" fn call_program(p: *mut c_void) {
    // SAFETY: `p` is the ProgramCall `pass_on` made, alive for this call.
    let c = unsafe { &*(p as *const ProgramCall) };
    let here = 0u8;
    let outer = IN_HANDLER.with(|m| m.get());
    if c.defer {
        IN_HANDLER.with(|m| m.set(std::ptr::addr_of!(here) as usize));
    }
    // The program's handler runs with its own mask (pass_on set it), as
    // code of the program's.
    vsci_sys::signals::outside(|| {
        // SAFETY: the program installed `h` with these flags: SA_SIGINFO
        // handlers take three arguments, others one; we call it as the
        // kernel would have, with the kernel's own siginfo and context.
        unsafe {
            if c.siginfo {
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = std::mem::transmute(c.h);
                f(c.sig, c.info, c.ctx);
            } else {
                let f: extern "C" fn(c_int) = std::mem::transmute(c.h);
                f(c.sig);
            }
        }
    });
    IN_HANDLER.with(|m| m.set(outer));
}

/// The top of this thread's alternate signal stack, if it has one and is
/// not on it now.
fn alternate_stack_top() -> Option<usize> {
    // SAFETY: sigaltstack with a null new stack only reads the current one.
    let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `ss` is a valid stack_t.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) } != 0 {
        return None;
    }
    if ss.ss_flags & (libc::SS_DISABLE | libc::SS_ONSTACK) != 0 || ss.ss_sp.is_null() {
        return None;
    }
    Some((ss.ss_sp as usize + ss.ss_size) & !15)
}

/// Run `f(arg)` with the stack pointer at `top`, then come back.
///
/// # Safety
/// `top` is 16-byte aligned, the top of memory that is writable, unused
/// by anything else while `f` runs, and large enough for `f`; `f` must not
/// unwind (an `extern "C" fn` aborts instead).
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn call_on_stack(top: usize, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    // SAFETY: the caller's contract. R12 is callee-saved, so it holds the
    // old stack pointer across the call; the new stack is 16-byte aligned
    // at the call, as the ABI requires; every caller-saved register is
    // declared clobbered.
    unsafe {
        std::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        );
    }
}

/// Elsewhere: on the current stack.
///
/// # Safety
/// As the x86-64 version.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn call_on_stack(_top: usize, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    f(arg)
}

// ---- stacks of the trap's own ---------------------------------------------

/// The trap's handler runs on a stack of its own: a store may come from a
/// signal handler running on a small alternate stack, or from a thread
/// near the end of its stack, and the handler does network I/O.
const STACKS: usize = 64;
const STACK_SIZE: usize = 512 << 10;
static STACK_BASE: [AtomicUsize; STACKS] = [const { AtomicUsize::new(0) }; STACKS];
static STACK_BUSY: [AtomicBool; STACKS] = [const { AtomicBool::new(false) }; STACKS];

/// Run `f(arg)` on a free stack of ours (made on first use), or on the
/// current stack when all are busy (64 nested or simultaneous faults).
pub(crate) fn on_private_stack(f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    for i in 0..STACKS {
        if STACK_BUSY[i].swap(true, Ordering::Acquire) {
            continue;
        }
        let mut base = STACK_BASE[i].load(Ordering::Acquire);
        if base == 0 {
            base = map_stack();
            STACK_BASE[i].store(base, Ordering::Release);
        }
        if base != 0 {
            // SAFETY: `base..base+STACK_SIZE` is our own mapping, taken by
            // this call alone (STACK_BUSY), its top 16-byte aligned; `f`
            // is an extern "C" fn and cannot unwind past the switch.
            unsafe { call_on_stack(base + STACK_SIZE, f, arg) };
            STACK_BUSY[i].store(false, Ordering::Release);
            return;
        }
        STACK_BUSY[i].store(false, Ordering::Release);
        break;
    }
    f(arg)
}

/// A stack with a guard page below it; 0 when the kernel refuses. Runs in
/// a signal handler: `vsci_sys`'s mapping calls make system calls only
/// (mmap, mprotect: async-signal-safe) and allocate nothing. The stack is
/// kept for the process's life.
fn map_stack() -> usize {
    let page = crate::page_size();
    let Ok(m) = vsci_sys::MapOptions::private().noreserve().anonymous(STACK_SIZE + page) else { return 0 };
    let _ = m.protect(0, page, vsci_sys::Prot::None);
    let (p, _) = m.into_raw();
    p.as_ptr() as usize + page
}
