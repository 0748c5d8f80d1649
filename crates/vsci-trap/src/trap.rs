//! Trapping the first access to each page of a `MAP_SHARED` memfd mapping,
//! in the thread that makes it, before the access completes.
//!
//! A [`Trap`] registers a range with a userfaultfd in three modes at once —
//! missing, minor and write-protect — with `UFFD_FEATURE_SIGBUS`, so the
//! kernel turns each such fault into a `SIGBUS` in the faulting thread
//! instead of a message for a handler thread (measured here: a cross-thread
//! wake-up costs ~48 µs one way; a SIGBUS round trip ~6 µs). A process-wide
//! handler finds the trap covering the address and calls its
//! [`TrapHandler`], which makes the page ready (fills it through a second,
//! untracked mapping of the memfd, then maps it with [`Trap::map_in`] or
//! lifts its protection with [`Trap::unprotect`]); the access is then
//! retried and completes.
//!
//! Which faults arrive:
//! * a page not mapped in the range (never touched, or dropped with
//!   [`Trap::zap`]): *not present*, read or write;
//! * a store to a page mapped write-protected ([`Trap::protect`], or mapped
//!   in with `protect`): *present*, write.
//!
//! Faults the kernel takes on the process's behalf (a `read(2)` into the
//! range, a `write(2)` from it) are not turned into signals: such system
//! calls fail with `EFAULT` on pages that would trap.
//!
//! Kinds of fault are told apart by the x86-64 page-fault error code in the
//! signal context; elsewhere every fault is reported as a write to a page of
//! unknown state, and handlers must cope (map in, then unprotect).

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use vsci_sys::uffd::{self, Userfaultfd};

use crate::{page_size, Error, Result};

/// A fault, as the handler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Offset of the faulting page from the start of the range.
    pub page: usize,
    /// Whether the access was a store.
    pub write: bool,
    /// Whether the page was mapped (so this is a write-protect fault);
    /// `None` where the architecture does not say.
    pub present: Option<bool>,
    /// The faulting address.
    pub addr: usize,
    /// The interrupted thread's `ucontext_t`; null when the fault was
    /// delivered to the fault thread ([`Delivery::Thread`]).
    ctx: *mut libc::c_void,
}

impl Fault {
    /// Account `done` bytes of `r` as executed (see
    /// [`crate::emulate::Ucontext::advance_rep`]).
    ///
    /// # Safety
    /// Only inside the handler call that got this fault, with `r` from
    /// [`Fault::decode_rep`], once those bytes' effect is made.
    pub unsafe fn advance_rep(&self, r: &crate::emulate::RepString, done: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        unsafe {
            crate::emulate::Ucontext(self.ctx).advance_rep(r, done)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (r, done);
    }

    /// Resume the thread after the store instead of retrying it.
    ///
    /// # Safety
    /// Only inside the handler call that got this fault, with `len` the
    /// length [`Fault::decode_store`] gave, once the store's effect is made.
    pub unsafe fn skip_store(&self, len: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        unsafe {
            crate::emulate::Ucontext(self.ctx).skip(len)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = len;
    }
}

/// Decoding the faulting thread's instructions: x86-64 only.
#[cfg(target_arch = "x86_64")]
impl Fault {
    /// Read the instruction `after` bytes past the faulting one and hand
    /// its bytes, the interrupted thread's registers and its address to
    /// `decode`. `None` for a fault delivered to the fault thread (the
    /// faulting thread's registers are not ours to read or change).
    fn decode_with<R>(
        &self,
        after: usize,
        decode: impl FnOnce(&[u8], &crate::emulate::Ucontext, u64) -> Option<R>,
    ) -> Option<R> {
        use crate::emulate::Registers;
        if self.ctx.is_null() {
            return None;
        }
        let uc = crate::emulate::Ucontext(self.ctx);
        let ip = uc.rip().wrapping_add(after as u64);
        let mut code = [0u8; 15];
        let n = read_code(ip as usize, uc.rip() as usize, &mut code);
        decode(&code[..n], &uc, ip)
    }

    /// The store that faulted, if it is one [`crate::emulate`] understands
    /// exactly (x86-64 only).
    pub fn decode_store(&self, page: usize) -> Option<crate::emulate::Store> {
        self.decode_with(0, |code, uc, _| crate::emulate::decode_store(code, uc, self.addr, page))
    }

    /// The instruction `after` bytes past the one that faulted, if it is a
    /// store [`crate::emulate`] understands exactly (x86-64 only), for a
    /// handler that has made the faulting store and every store up to that
    /// point (plain moves to memory, which change no register and no flag,
    /// so the registers are those the CPU would see there). `None` while
    /// the thread is single-stepped (the trap flag: a debugger expects one
    /// instruction per step).
    pub fn decode_store_after(&self, after: usize, page: usize) -> Option<crate::emulate::Store> {
        self.decode_with(after, |code, uc, ip| {
            use crate::emulate::Registers;
            if uc.eflags() & 0x100 != 0 {
                return None;
            }
            crate::emulate::decode_store_at(code, uc, ip, page)
        })
    }

    /// The `REP MOVSB` / `REP STOSB` that faulted, if it is one
    /// [`crate::emulate::decode_rep`] understands (x86-64 only).
    pub fn decode_rep(&self) -> Option<crate::emulate::RepString> {
        self.decode_with(0, |code, uc, _| crate::emulate::decode_rep(code, uc, self.addr))
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl Fault {
    pub fn decode_store(&self, _page: usize) -> Option<crate::emulate::Store> {
        None
    }

    pub fn decode_store_after(&self, _after: usize, _page: usize) -> Option<crate::emulate::Store> {
        None
    }

    pub fn decode_rep(&self) -> Option<crate::emulate::RepString> {
        None
    }
}

/// The bytes of the instruction at `ip` (at most 15, fewer where the bytes
/// after it are not mapped: a short read only ever cuts bytes the decoder
/// does not need), for the decoder: the one that faulted at `rip`, or one
/// after it.
///
/// Read with a plain load where that cannot fault, else through the kernel
/// (`read_own`, a `process_vm_readv` of about 1.2 µs here, which was a
/// fifth of the fault handler's own time per emulated store, the write it
/// posts aside: `perf` over `vsci bench --paths remote --sections i`).
/// A plain load cannot fault when:
/// - the 15 bytes lie in the 4 KiB block of `rip`, so in the page that
///   holds the faulting instruction, which the CPU has just fetched to run
///   it: that page is mapped and executable (an instruction after it in
///   the next page may not be: the CPU has not fetched it yet);
/// - executable implies readable: on x86-64 a page can be execute-only
///   only through memory protection keys, so not when CPUID says the
///   kernel has not enabled them (OSPKE clear);
/// - `ip` is outside every trapped range: a remote map's pages may be
///   dropped by the flusher at any time, and a load there would fault
///   into this handler again.
///
/// A program that unmaps or protects the code another of its threads is
/// running while that thread stores faults here instead of at its return
/// to the instruction, with the same signal.
#[cfg(target_arch = "x86_64")]
fn read_code(ip: usize, rip: usize, code: &mut [u8; 15]) -> usize {
    let in_fetched_block = ip / 4096 == rip / 4096 && ip % 4096 <= 4096 - code.len();
    if in_fetched_block && !may_be_trapped(ip, code.len()) && code_is_readable() {
        // SAFETY: the 15 bytes lie in a mapped, readable page (see above);
        // a byte array has no alignment. Volatile, as the program may
        // rewrite its code (a JIT) concurrently: any bytes read are taken
        // as an instruction, as with `read_own`.
        *code = unsafe { std::ptr::read_volatile(ip as *const [u8; 15]) };
        return code.len();
    }
    vsci_sys::mman::read_own(ip, code)
}

/// No page can be execute-only: the kernel has not enabled memory
/// protection keys (CPUID leaf 7, ECX bit 4, OSPKE). Asked once.
#[cfg(target_arch = "x86_64")]
fn code_is_readable() -> bool {
    // 0 = not asked yet, 1 = readable, 2 = maybe not.
    static READABLE: AtomicU8 = AtomicU8::new(0);
    match READABLE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // SAFETY: CPUID leaf 7 exists on every x86-64 CPU that reports
            // a maximum leaf of at least 7, checked first; (`__cpuid`
            // became a safe function in newer Rust).
            #[allow(unused_unsafe)]
            let ospke = unsafe {
                std::arch::x86_64::__cpuid(0).eax >= 7 && std::arch::x86_64::__cpuid_count(7, 0).ecx & (1 << 4) != 0
            };
            READABLE.store(if ospke { 2 } else { 1 }, Ordering::Relaxed);
            !ospke
        }
    }
}

/// How the faults of trapped ranges reach their handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// A `SIGBUS` in the faulting thread (~6 µs a fault here). Needs the
    /// trap's handler to stay the kernel's disposition of `SIGBUS`, which
    /// libsisci's signal chaining ensures when its interposers are the
    /// process's `sigaction` ([`crate::chain`]).
    Signal,
    /// A message to one fault thread per process, which resolves the fault
    /// and wakes the faulting thread (two blocking wake-ups, ~100-150 µs a
    /// fault here), with no signal at all: for processes whose signal calls
    /// libsisci cannot see (it was opened with `dlopen` outside the global
    /// symbol scope). Stores are never emulated this way (the faulting
    /// thread's registers are out of reach).
    Thread,
}

static DELIVERY: AtomicU8 = AtomicU8::new(0);

/// Choose how ranges registered from now on deliver their faults (ranges
/// registered before keep theirs).
pub fn set_delivery(d: Delivery) {
    DELIVERY.store(d as u8, Ordering::Release);
}

/// How ranges registered now deliver their faults.
pub fn delivery() -> Delivery {
    if DELIVERY.load(Ordering::Acquire) == Delivery::Thread as u8 {
        Delivery::Thread
    } else {
        Delivery::Signal
    }
}

/// What a trapped range does on a fault. Called inside a `SIGBUS` handler
/// in the faulting thread (or, with [`Delivery::Thread`], in the fault
/// thread while the faulting thread waits): it must not take a lock the
/// interrupted code may hold, and must not touch the trapped range itself
/// (that would trap again, inside the handler).
pub trait TrapHandler: Send + Sync {
    fn on_fault(&self, trap: &Trap, fault: Fault);

    /// Make the first bytes of a copy into the range (`copy.dst` lies in
    /// it; `copy.insn_len` is 0) without a fault, as the handler would
    /// make a `REP MOVSB` / `REP STOSB` that faulted there, and say how
    /// many it made: 0 leaves the whole copy to the CPU (which faults as
    /// usual). Called by [`copy_in`] in the copying thread, on a stack of
    /// the trap's own; under the same rules as `on_fault`. `copy.src` is
    /// the program's source, or with `copy.src_staged` the library's copy
    /// of it, which a plain load may read.
    fn on_copy(&self, trap: &Trap, copy: &crate::emulate::RepString) -> usize {
        let _ = (trap, copy);
        0
    }
}

/// One registered range. The registry keeps it (and its handler) until
/// [`unregister`]; the mapping must outlive that.
pub struct Trap {
    uffd: Userfaultfd,
    /// Stores trapped too (write-protect mode registered).
    writes: bool,
    base: usize,
    len: usize,
    page: usize,
    slot: usize,
    delivery: Delivery,
}

/// How a range is registered.
#[derive(Clone, Copy, Debug)]
pub struct TrapOptions {
    /// Trap stores (write-protect mode). Off for read-only mappings, where
    /// the kernel refuses write-protect registration.
    pub writes: bool,
}

impl Trap {
    /// Register `len` bytes at `addr` (page aligned, a `MAP_SHARED` mapping
    /// of a memfd) and route their faults to `handler`.
    ///
    /// # Safety
    /// `addr..addr+len` must be a shared memfd mapping that stays mapped
    /// until the returned `Trap` is dropped, and every access to it the
    /// handler cannot resolve must be acceptable to lose (the handler
    /// decides what the faulting thread sees).
    pub unsafe fn new(
        addr: *mut u8,
        len: usize,
        opts: TrapOptions,
        handler: Arc<dyn TrapHandler>,
    ) -> Result<Arc<Trap>> {
        let page = page_size();
        let base = addr as usize;
        if base == 0 || base & (page - 1) != 0 {
            return Err(Error::Unaligned { addr: base, page });
        }
        if len == 0 || !len.is_multiple_of(page) || base.checked_add(len).is_none() {
            return Err(Error::EmptyRange);
        }
        if !uffd::SUPPORTED_ARCH {
            return Err(Error::WpUnavailable("architecture not supported".into()));
        }
        let delivery = delivery();
        let signal = if delivery == Delivery::Signal {
            install_handler();
            uffd::UFFD_FEATURE_SIGBUS
        } else {
            0
        };
        let uffd = open_uffd()?;
        let features = signal
            | uffd::UFFD_FEATURE_MINOR_SHMEM
            | if opts.writes { uffd::UFFD_FEATURE_WP_HUGETLBFS_SHMEM } else { 0 };
        if let Err(e) = uffd.api(features) {
            return Err(Error::WpUnavailable(format!("UFFDIO_API: {e}")));
        }
        let mut mode = uffd::UFFDIO_REGISTER_MODE_MISSING | uffd::UFFDIO_REGISTER_MODE_MINOR;
        if opts.writes {
            mode |= uffd::UFFDIO_REGISTER_MODE_WP;
        }
        // SAFETY: the caller's contract: a shared memfd mapping that stays
        // mapped while the Trap lives, whose faults the handler resolves
        // (registering changes how they are handled, not the contents).
        if let Err(e) = unsafe { uffd.register(base, len, mode) } {
            return Err(Error::WpUnavailable(format!("UFFDIO_REGISTER: {e}")));
        }
        let mut trap = Trap { uffd, writes: opts.writes, base, len, page, slot: usize::MAX, delivery };
        trap.slot = registry_insert(base, len)?;
        let trap = Arc::new(trap);
        let entry = Box::new(Entry { trap: trap.clone(), handler });
        SLOTS[trap.slot].entry.store(Box::into_raw(entry), Ordering::SeqCst);
        if delivery == Delivery::Thread {
            if let Err(e) = fault_thread::watch(trap.slot, trap.uffd.as_raw_fd()) {
                unregister(&trap);
                return Err(e);
            }
        }
        Ok(trap)
    }

    /// The address of `[off, off + len)`, whole pages inside the range.
    fn range(&self, off: usize, len: usize) -> Result<usize> {
        if !off.is_multiple_of(self.page)
            || !len.is_multiple_of(self.page)
            || off.checked_add(len).is_none_or(|e| e > self.len)
        {
            return Err(Error::OutOfRange { offset: off, len, size: self.len });
        }
        Ok(self.base + off)
    }

    fn writeprotect(&self, off: usize, len: usize, on: bool) -> Result<()> {
        let start = self.range(off, len)?;
        self.uffd
            .write_protect(start, len, on)
            .map_err(|e| Error::Os { op: "UFFDIO_WRITEPROTECT", source: std::io::Error::from_raw_os_error(e) })
    }

    /// The range's first byte in the process's address space.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Make stores to these (mapped) pages trap again. When this returns no
    /// thread can store to them without trapping.
    pub fn protect(&self, off: usize, len: usize) -> Result<()> {
        self.writeprotect(off, len, true)
    }

    /// Let stores to these pages through (resolves a write-protect fault).
    pub fn unprotect(&self, off: usize, len: usize) -> Result<()> {
        self.writeprotect(off, len, false)
    }

    /// Map pages whose content is in the memfd already (written through
    /// another mapping) into the range, write-protected if `protect` (and
    /// stores are trapped at all). A page mapped by another thread
    /// meanwhile is left as it is.
    pub fn map_in(&self, off: usize, len: usize, protect: bool) -> Result<()> {
        let protect = protect && self.writes;
        match self.cont(off, len, protect) {
            // Kernels before 6.4 lack UFFDIO_CONTINUE_MODE_WP: map, then
            // protect (a store in between is the program's race with its
            // own first load, and lands as a store made before the fetch).
            Err(Error::Os { source, .. }) if protect && source.raw_os_error() == Some(libc::EINVAL) => {
                self.cont(off, len, false)?;
                self.protect(off, len)
            }
            r => r,
        }
    }

    fn cont(&self, off: usize, len: usize, protect: bool) -> Result<()> {
        let start = self.range(off, len)?;
        match self.uffd.map_continue(start, len, protect) {
            Ok(()) | Err(libc::EEXIST) => Ok(()),
            Err(e) => Err(Error::Os { op: "UFFDIO_CONTINUE", source: std::io::Error::from_raw_os_error(e) }),
        }
    }

    /// Drop these pages from the range (not from the memfd): the next access
    /// to each traps as not present.
    pub fn zap(&self, off: usize, len: usize) -> Result<()> {
        self.range(off, len)?;
        // SAFETY: the range lies inside the registered mapping (checked);
        // MADV_DONTNEED on a shared mapping only drops page-table entries,
        // the memfd keeps the data.
        if unsafe { libc::madvise((self.base + off) as *mut libc::c_void, len, libc::MADV_DONTNEED) } < 0 {
            return Err(os_err("madvise(MADV_DONTNEED)"));
        }
        Ok(())
    }
}

/// Stop routing faults of `trap`'s range (waits for handlers running on it).
/// Afterwards accesses to the range that would trap kill the process with
/// `SIGBUS`: unmap the range right after.
pub fn unregister(trap: &Arc<Trap>) {
    if trap.delivery == Delivery::Thread {
        fault_thread::unwatch(trap.uffd.as_raw_fd());
    }
    let slot = &SLOTS[trap.slot];
    let p = slot.entry.swap(std::ptr::null_mut(), Ordering::SeqCst);
    slot.start.store(0, Ordering::SeqCst);
    slot.end.store(0, Ordering::SeqCst);
    while slot.busy.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
    if !p.is_null() {
        // SAFETY: `p` came from Box::into_raw in `Trap::new`, was swapped out
        // of the slot exactly once (above), and no handler uses it any more
        // (busy is 0 and new handlers see the null pointer).
        drop(unsafe { Box::from_raw(p) });
    }
    slot.owner.store(0, Ordering::SeqCst);
    recompute_bounds();
}

/// Narrow LOWEST and HIGHEST to the ranges still trapped (after one went).
/// A range registered meanwhile widens them itself, and the second pass
/// below adds back one whose widening the first pass's stores undid.
/// Callers use `may_be_trapped` to choose a faster way, never for
/// correctness.
fn recompute_bounds() {
    let ranges =
        || SLOTS.iter().map(|s| (s.start.load(Ordering::SeqCst), s.end.load(Ordering::SeqCst))).filter(|&(a, b)| b > a);
    let lo = ranges().map(|r| r.0).min().unwrap_or(usize::MAX);
    let hi = ranges().map(|r| r.1).max().unwrap_or(0);
    LOWEST.store(lo, Ordering::SeqCst);
    HIGHEST.store(hi, Ordering::SeqCst);
    // A range inserted between the scan and the stores: widen again.
    for (a, b) in ranges() {
        LOWEST.fetch_min(a, Ordering::SeqCst);
        HIGHEST.fetch_max(b, Ordering::SeqCst);
    }
}

fn os_err(op: &'static str) -> Error {
    Error::Os { op, source: std::io::Error::last_os_error() }
}

fn open_uffd() -> Result<Userfaultfd> {
    // Unprivileged processes need UFFD_USER_MODE_ONLY (with
    // vm.unprivileged_userfaultfd = 0); it only drops kernel-mode faults,
    // which SIGBUS mode cannot resolve anyway.
    let mut last = None;
    for flags in [libc::O_CLOEXEC | libc::O_NONBLOCK, libc::O_CLOEXEC | libc::O_NONBLOCK | uffd::UFFD_USER_MODE_ONLY] {
        match Userfaultfd::open(flags) {
            Ok(u) => return Ok(u),
            Err(e) => last = Some(e),
        }
    }
    Err(Error::WpUnavailable(format!("userfaultfd: {}", last.expect("tried at least once"))))
}

// ---- the process-wide SIGBUS handler and its registry --------------------

struct Entry {
    trap: Arc<Trap>,
    handler: Arc<dyn TrapHandler>,
}

struct Slot {
    /// Nonzero while the slot is taken (even before the entry is set).
    owner: AtomicUsize,
    start: AtomicUsize,
    end: AtomicUsize,
    entry: AtomicPtr<Entry>,
    /// Handlers running on this slot's entry.
    busy: AtomicUsize,
}

/// Most ranges trapped at once in a process.
pub const MAX_TRAPS: usize = 1024;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    owner: AtomicUsize::new(0),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    entry: AtomicPtr::new(std::ptr::null_mut()),
    busy: AtomicUsize::new(0),
};
static SLOTS: [Slot; MAX_TRAPS] = [EMPTY; MAX_TRAPS];
/// One past the highest slot ever taken: lookups scan only these (slots are
/// taken lowest first, so a process with a few maps scans a few, not 1,024,
/// for every `memcpy` whose destination lies between two of its maps).
static USED: AtomicUsize = AtomicUsize::new(0);

/// The lowest start and highest end of the ranges trapped now (`usize::MAX`
/// and 0 when there are none): a cheap test of whether a copy may reach a
/// trapped range.
static LOWEST: AtomicUsize = AtomicUsize::new(usize::MAX);
static HIGHEST: AtomicUsize = AtomicUsize::new(0);

/// May `addr..addr + len` overlap a trapped range? False only when it
/// certainly does not (two loads; for callers on hot paths such as `memcpy`).
#[inline]
pub fn may_be_trapped(addr: usize, len: usize) -> bool {
    addr < HIGHEST.load(Ordering::Relaxed) && addr.saturating_add(len) > LOWEST.load(Ordering::Relaxed)
}

fn registry_insert(base: usize, len: usize) -> Result<usize> {
    for (i, s) in SLOTS.iter().enumerate() {
        if s.owner.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            USED.fetch_max(i + 1, Ordering::SeqCst);
            s.start.store(base, Ordering::SeqCst);
            s.end.store(base + len, Ordering::SeqCst);
            LOWEST.fetch_min(base, Ordering::SeqCst);
            HIGHEST.fetch_max(base + len, Ordering::SeqCst);
            return Ok(i);
        }
    }
    Err(Error::WpUnavailable(format!("more than {MAX_TRAPS} trapped ranges")))
}

static INSTALL: Once = Once::new();

fn install_handler() {
    INSTALL.call_once(|| crate::chain::install(on_sigbus));
}

/// What `on_sigbus` hands to the handler running on the trap's own stack.
struct SigbusCall {
    addr: usize,
    ctx: *mut libc::c_void,
    handled: bool,
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    // SAFETY: errno is thread-local; the handler saves and restores it so
    // the interrupted code never sees our ioctls' errors.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: as above.
    let from_kernel = unsafe { (*info).si_code } > 0;
    let mut call = SigbusCall { addr, ctx, handled: false };
    // A SIGBUS sent by a process carries its pid and uid where a fault's
    // address would be: only faults are looked up.
    if from_kernel && may_be_trapped(addr, 1) {
        // The handler's sa_mask blocked the program's asynchronous signals
        // (chain::install): code below that guards a lock with them costs
        // no system call.
        let _quiet = vsci_sys::signals::held();
        // And it may have interrupted the program inside malloc: the store
        // path allocates without it (vsci_sys::alloc).
        let _path = vsci_sys::alloc::store_path();
        crate::chain::on_private_stack(dispatch_call, &mut call as *mut SigbusCall as *mut libc::c_void);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    if !call.handled {
        crate::chain::pass_on(sig, info, ctx);
    }
}

/// What `copy_in` hands to the handler running on the trap's own stack.
struct CopyCall {
    copy: crate::emulate::RepString,
    done: usize,
}

/// Make the start of a copy of `count` bytes from `src` to `dst` (not
/// overlapping) through the handler of the trapped range
/// holding `dst`, with no fault: what a `memcpy` into a remote map costs
/// without the trap's `SIGBUS` and its return (about 6 µs here). Returns
/// how many bytes were made (from `dst` on); the caller copies the rest
/// itself, and 0 when `dst` is in no trapped range or its handler takes no
/// copies. Keeps `errno` as it was.
pub fn copy_in(dst: usize, src: usize, count: usize) -> usize {
    if count == 0 || !may_be_trapped(dst, 1) {
        return 0;
    }
    // SAFETY: errno is thread-local; saved here and put back below so
    // that a `memcpy` never changes it (the handler makes system calls).
    let errno = unsafe { *libc::__errno_location() };
    let staged = Staged::take(src, count);
    let copy = crate::emulate::RepString {
        dst,
        count,
        src: Some(staged.as_ref().map_or(src, Staged::addr)),
        value: 0,
        insn_len: 0,
        src_staged: staged.is_some(),
    };
    let mut call = CopyCall { copy, done: 0 };
    // The handler takes the map's lock: a program signal handler that
    // stored into the map meanwhile would wait for it for ever.
    let quiet = vsci_sys::signals::quiet();
    // A `memcpy` in a signal handler that interrupted malloc (vsci_sys::alloc).
    let path = vsci_sys::alloc::store_path();
    crate::chain::on_private_stack(copy_call, &mut call as *mut CopyCall as *mut libc::c_void);
    drop(path);
    drop(quiet);
    drop(staged);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    call.done.min(count)
}

/// Largest source `copy_in` copies into its thread's staging buffer first.
const STAGE_MAX: usize = 4096;

thread_local! {
    /// The staging buffer of `copy_in`, and whether a `copy_in` of this
    /// thread holds it (a program signal handler's `memcpy` into a remote
    /// map, run in the middle of another, goes without it).
    static STAGE: (std::cell::UnsafeCell<[u8; STAGE_MAX]>, std::cell::Cell<bool>) =
        const { (std::cell::UnsafeCell::new([0; STAGE_MAX]), std::cell::Cell::new(false)) };
}

/// A small `memcpy`'s source bytes, copied into the thread's staging buffer
/// where the program's call reads them: in the program's own context, with
/// no lock of ours held and its signals as it left them, so a source that
/// faults does so as in the C library's `memcpy`, to the program's own
/// handler. The fault handler then reads the bytes with a plain load where
/// it would otherwise read the program's memory through the kernel
/// (`process_vm_readv`, 1.3-2.3 µs here, a twentieth of a message's one-way
/// time in the ring). A program `SIGSEGV` handler that leaves a faulting
/// copy with `siglongjmp` leaves the buffer marked held: that thread's
/// later copies go without it (the kernel read), no less correct.
struct Staged(usize);

impl Staged {
    /// Stage `count` bytes at `src`, unless they are too many, may lie in a
    /// trapped range (a load there is a fault of ours), or the buffer is
    /// held already.
    fn take(src: usize, count: usize) -> Option<Staged> {
        if count > STAGE_MAX || may_be_trapped(src, count) {
            return None;
        }
        STAGE.with(|(buf, held)| {
            if held.replace(true) {
                return None;
            }
            // The flag is set before the first byte is copied: a signal
            // handler's `copy_in` in the middle of the copy must find it.
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            let at = buf.get() as *mut u8;
            // SAFETY: the buffer is this thread's, held by us alone (the
            // flag) and STAGE_MAX >= count bytes long; `src..src + count`
            // is the program's source, which its `memcpy` reads all the
            // same (a fault here is the one the C library's would take).
            unsafe { copy_bytes(at, src as *const u8, count) };
            Some(Staged(at as usize))
        })
    }

    fn addr(&self) -> usize {
        self.0
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Every read of the buffer comes before it is let go.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        STAGE.with(|(_, held)| held.set(false));
    }
}

/// Copy `n` bytes from `src` to `dst` with one string store, never through
/// `memcpy`: libsisci exports its own, which sends a copy whose
/// destination may lie in a trapped range (the bounds of all of them, a
/// coarse test) through `copy_in` again.
///
/// # Safety
/// As `memcpy`: `src` readable and `dst` writable for `n` bytes, not
/// overlapping.
#[inline(always)]
pub unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract; the direction flag is clear at every
    // call (the ABI), so the string store runs forward over exactly those
    // bytes, and changes no flag.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags)
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, n)
    };
}

extern "C" fn copy_call(p: *mut libc::c_void) {
    // SAFETY: `p` is the CopyCall `copy_in` made, alive for this call and
    // used by nothing else meanwhile.
    let c = unsafe { &mut *(p as *mut CopyCall) };
    let copy = &c.copy;
    c.done = with_entry(copy.dst, |e| e.handler.on_copy(&e.trap, copy)).unwrap_or(0);
}

/// Run `f` on the registry entry whose range holds `addr`, if any, with the
/// entry kept alive meanwhile.
fn with_entry<R>(addr: usize, f: impl FnOnce(&Entry) -> R) -> Option<R> {
    let mut f = Some(f);
    for s in SLOTS[..USED.load(Ordering::Acquire)].iter() {
        let (start, end) = (s.start.load(Ordering::Acquire), s.end.load(Ordering::Acquire));
        if addr < start || addr >= end {
            continue;
        }
        s.busy.fetch_add(1, Ordering::SeqCst);
        let p = s.entry.load(Ordering::SeqCst);
        // SAFETY: a non-null entry stays allocated while busy > 0
        // (`unregister` nulls it first, then waits for busy to drop).
        let entry = unsafe { p.as_ref() };
        let hit = entry.filter(|e| addr >= e.trap.base && addr < e.trap.base + e.trap.len);
        let r = hit.and_then(|e| f.take().map(|f| f(e)));
        s.busy.fetch_sub(1, Ordering::SeqCst);
        if r.is_some() {
            return r;
        }
    }
    None
}

extern "C" fn dispatch_call(p: *mut libc::c_void) {
    // SAFETY: `p` is the SigbusCall `on_sigbus` made, alive for this call
    // and used by nothing else meanwhile.
    let c = unsafe { &mut *(p as *mut SigbusCall) };
    c.handled = dispatch(c.addr, c.ctx);
}

fn dispatch(addr: usize, ctx: *mut libc::c_void) -> bool {
    with_entry(addr, |e| {
        let page = (addr - e.trap.base) & !(e.trap.page - 1);
        let (write, present) = fault_kind(ctx);
        e.handler.on_fault(&e.trap, Fault { page, write, present, addr, ctx });
    })
    .is_some()
}

#[cfg(target_arch = "x86_64")]
fn fault_kind(ctx: *mut libc::c_void) -> (bool, Option<bool>) {
    // SAFETY: for SA_SIGINFO handlers the third argument is the thread's
    // ucontext_t; on x86-64 gregs[REG_ERR] holds the page-fault error code
    // (bit 0: page present, bit 1: write access).
    let err = unsafe { (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize] };
    (err & 2 != 0, Some(err & 1 != 0))
}

#[cfg(not(target_arch = "x86_64"))]
fn fault_kind(_ctx: *mut libc::c_void) -> (bool, Option<bool>) {
    (true, None)
}

/// The fault thread of [`Delivery::Thread`]: one per process, made with
/// the first range that needs it, waiting on every such range's
/// userfaultfd at once.
mod fault_thread {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::sync::atomic::Ordering;
    use std::sync::OnceLock;

    use super::{Fault, SLOTS};
    use vsci_sys::uffd;

    use crate::{Error, Result};

    static EPOLL: OnceLock<std::result::Result<OwnedFd, String>> = OnceLock::new();

    fn epoll() -> Result<RawFd> {
        let ep = EPOLL.get_or_init(|| {
            log::debug!("vsci: remote maps trap with a fault thread, no signal (VSCI_TRAP, or libsisci outside the program's symbol scope)");
            // SAFETY: epoll_create1 takes flags and returns a new fd.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if fd < 0 {
                return Err(format!("epoll_create1: {}", std::io::Error::last_os_error()));
            }
            // SAFETY: a new fd nobody else owns.
            let ep = unsafe { OwnedFd::from_raw_fd(fd) };
            let raw = ep.as_raw_fd();
            vsci_sys::signals::spawn(std::thread::Builder::new().name("vsci-faults".into()), move || run(raw))
                .map_err(|e| format!("fault thread: {e}"))?;
            Ok(ep)
        });
        ep.as_ref().map(|f| f.as_raw_fd()).map_err(|e| Error::WpUnavailable(e.clone()))
    }

    pub(super) fn watch(slot: usize, uffd: RawFd) -> Result<()> {
        let ep = epoll()?;
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: slot as u64 };
        // SAFETY: adds `uffd` (open, owned by the range's Trap) to our epoll
        // set; the kernel copies `ev`.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, uffd, &mut ev) } < 0 {
            return Err(Error::Os { op: "epoll_ctl", source: std::io::Error::last_os_error() });
        }
        Ok(())
    }

    pub(super) fn unwatch(uffd: RawFd) {
        if let Ok(ep) = epoll() {
            // SAFETY: removes `uffd` from our set; a null event is allowed.
            unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, uffd, std::ptr::null_mut()) };
        }
    }

    fn run(ep: RawFd) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        loop {
            // SAFETY: `evs` has room for 16 events; `ep` stays open (EPOLL
            // is never dropped).
            let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), evs.len() as i32, -1) };
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                log::error!("vsci: the fault thread stops: epoll_wait: {}", std::io::Error::last_os_error());
                return;
            }
            for ev in &evs[..n as usize] {
                serve(ev.u64 as usize);
            }
        }
    }

    /// Resolve every fault waiting on the range in `slot`.
    fn serve(slot: usize) {
        let Some(s) = SLOTS.get(slot) else { return };
        s.busy.fetch_add(1, Ordering::SeqCst);
        // SAFETY: a non-null entry stays allocated while busy > 0.
        if let Some(e) = unsafe { s.entry.load(Ordering::SeqCst).as_ref() } {
            let t = &e.trap;
            loop {
                let mut msg = [uffd::UffdMsg::default()];
                if t.uffd.read(&mut msg) != 1 {
                    break;
                }
                let msg = msg[0];
                let addr = msg.address as usize;
                if msg.event != uffd::UFFD_EVENT_PAGEFAULT || addr < t.base || addr >= t.base + t.len {
                    continue;
                }
                let page = (addr - t.base) & !(t.page - 1);
                let write = msg.flags & uffd::UFFD_PAGEFAULT_FLAG_WRITE != 0;
                let present = Some(msg.flags & uffd::UFFD_PAGEFAULT_FLAG_WP != 0);
                e.handler.on_fault(t, Fault { page, write, present, addr, ctx: std::ptr::null_mut() });
                // The handler's map-in or unprotect woke the thread, unless
                // another fault had resolved the page already: wake it.
                let _ = t.uffd.wake(t.base + page, t.page);
            }
        }
        s.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod code_tests {
    use super::read_code;
    use vsci_sys::mman::{MapOptions, Prot};

    #[test]
    fn instruction_bytes_are_read_whole_and_never_past_a_mapped_page() {
        let m = MapOptions::private().anonymous(8192).unwrap();
        for i in 0..4096 {
            m.write(i, &[(i % 251) as u8]).unwrap();
        }
        m.protect(4096, 4096, Prot::None).unwrap();
        let mut code = [0u8; 15];
        // Inside the page: all 15 bytes (a plain load).
        assert_eq!(read_code(m.addr() + 100, m.addr() + 100, &mut code), 15);
        assert_eq!(code[0], 100);
        assert_eq!(code[14], 114);
        // Ten bytes before an inaccessible page: only those ten, without a
        // fault (through the kernel).
        let mut code = [0u8; 15];
        assert_eq!(read_code(m.addr() + 4086, m.addr() + 4086, &mut code), 10);
        assert_eq!(code[9], (4095 % 251) as u8);
        // The instruction after one at the end of a page starts in the
        // next page, which the CPU has not fetched: inaccessible here, read
        // as nothing rather than faulting.
        assert_eq!(read_code(m.addr() + 4096, m.addr() + 4090, &mut code), 0);
    }
}
