//! Memory and notification objects the daemon hands out: sealed memfds for
//! segments and interrupt pages, eventfds for sleeping waiters.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use vsci_proto::intr::{self, Shared};
use vsci_proto::IntrKind;

/// Create a zero-filled memfd of at least `size` bytes whose size can never
/// change.
///
/// The size is rounded up to a power of two (at least a page): a guest sees
/// a memfd through an ivshmem BAR, and QEMU aborts on a BAR whose size is
/// not a power of two. Pages nobody touches cost nothing, and every mapper
/// maps only the object's own size.
///
/// The seals matter for isolation: every process that maps a segment gets
/// this fd, and without `F_SEAL_SHRINK` one of them could truncate it and
/// make every other mapper fault with SIGBUS.
pub fn sealed_memfd(name: &str, size: u64) -> nix::Result<OwnedFd> {
    let cname = CString::new(name).unwrap_or_else(|_| CString::new("vsci").unwrap());
    let fd = memfd_create(&cname, MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING)?;
    let rounded = size.max(4096).checked_next_power_of_two().ok_or(nix::Error::EINVAL)?;
    let len = i64::try_from(rounded).map_err(|_| nix::Error::EINVAL)?;
    nix::unistd::ftruncate(&fd, len)?;
    fcntl(
        fd.as_raw_fd(),
        FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL),
    )?;
    Ok(fd)
}

/// Duplicate a descriptor so it can travel in a message after the registry
/// lock is released.
pub fn dup(fd: BorrowedFd<'_>) -> nix::Result<OwnedFd> {
    fd.try_clone_to_owned().map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)))
}

/// An interrupt's shared page and eventfd, as kept by the daemon.
pub struct IntrObjects {
    pub memfd: OwnedFd,
    pub eventfd: OwnedFd,
    page: NonNull<Shared>,
    /// Bytes mapped at `page` (`intr::size_for` the kind).
    len: usize,
}

// SAFETY: `page` points into a MAP_SHARED mapping owned by this struct; all
// fields of `Shared` that are written concurrently are atomics.
unsafe impl Send for IntrObjects {}

impl IntrObjects {
    /// `wake`: an eventfd the creator supplied (see `is_eventfd`), else a
    /// fresh one.
    pub fn new(name: &str, kind: IntrKind, wake: Option<OwnedFd>) -> nix::Result<IntrObjects> {
        // A plain interrupt needs only the control words; the data ring's
        // 64 KiB would be allocated for nothing.
        let len = intr::size_for(kind);
        let memfd = sealed_memfd(name, len as u64)?;
        let eventfd: OwnedFd = match wake {
            Some(fd) => fd,
            None => EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?.into(),
        };
        // SAFETY: mapping `len` bytes of a fresh memfd at least that long,
        // at an address of the kernel's choosing, cannot alias any Rust
        // object.
        let ptr = unsafe {
            mmap(
                None,
                std::num::NonZeroUsize::new(len).expect("nonzero"),
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                memfd.as_fd(),
                0,
            )?
        };
        let page = ptr.cast::<Shared>();
        // SAFETY: the mapping is len >= PLAIN_SIZE >= size_of::<Shared>()
        // bytes, page-aligned, zero-filled (a valid bit pattern for all
        // atomics), and not yet visible to any other process.
        unsafe { page.as_ref() }.init();
        Ok(IntrObjects { memfd, eventfd, page, len })
    }

    /// Mark the interrupt removed and wake any sleeper so it notices.
    pub fn mark_removed(&self) {
        // SAFETY: see `new`; the mapping lives as long as `self`.
        let shared = unsafe { self.page.as_ref() };
        shared.state.store(intr::STATE_REMOVED, std::sync::atomic::Ordering::SeqCst);
        let _ = nix::unistd::write(self.eventfd.as_fd(), &1u64.to_ne_bytes());
    }
}

impl Drop for IntrObjects {
    fn drop(&mut self) {
        // SAFETY: `page` was returned by mmap with this length and is not
        // referenced after drop.
        unsafe {
            let _ = munmap(self.page.cast(), self.len);
        }
    }
}

/// True if `fd` is an eventfd. A client-supplied wake-up descriptor is
/// written by every triggerer, so it must be nothing else (a pipe could
/// block them, a socket could carry data).
pub fn is_eventfd(fd: BorrowedFd<'_>) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|l| l.as_os_str() == "anon_inode:[eventfd]")
        .unwrap_or(false)
}

/// Number of descriptors this process has open (for `vsci status` and the
/// leak tests).
pub fn open_fd_count() -> u32 {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count().saturating_sub(1) as u32).unwrap_or(0)
}

/// The lowest descriptor number free in this process right now.
///
/// A cheap gauge of how close the node is to its descriptor limit (one
/// `fcntl` and one `close`, where counting `/proc/self/fd` walks every
/// descriptor): the kernel always hands out the lowest free number, so
/// holes are filled first and this number reaches `limit - reserve` only
/// once nearly every descriptor below it is in use. Returns `u64::MAX` when
/// no descriptor is free at all.
pub fn lowest_free_fd() -> u64 {
    // A new descriptor takes the lowest free slot: its number is the answer.
    match EventFd::from_flags(EfdFlags::EFD_CLOEXEC) {
        Ok(ev) => ev.as_fd().as_raw_fd() as u64,
        Err(_) => u64::MAX,
    }
}
