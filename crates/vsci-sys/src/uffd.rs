//! userfaultfd: the kernel UAPI (`include/uapi/linux/userfaultfd.h`) that
//! Debian 12's C library and the `libc` crate lack, and [`Userfaultfd`],
//! whose methods are its ioctls.
//!
//! This is the one copy of these numbers and structures in the tree; the
//! test at the end checks each against `<linux/userfaultfd.h>` (except
//! `UFFDIO_CONTINUE_MODE_WP`, Linux 6.4, which Debian 12's header lacks).
//! What to register and how to serve faults is the callers' business:
//! `vsci-trap` (missing, minor and write-protect faults of shared memfd
//! mappings, in the faulting thread or a fault thread) and `vsci-lend`'s
//! memory extension (missing and write-protect faults of private memory,
//! in a handler thread).
//!
//! The ioctl numbers use the asm-generic `_IOC` encoding (x86, arm64,
//! riscv, loongarch, s390). Architectures with a different encoding
//! (powerpc, mips, sparc, alpha) get [`SUPPORTED_ARCH`] `= false`.
//!
//! The fault-path calls ([`Userfaultfd::copy`] and the others returning an
//! errno) make one ioctl and nothing else: they may run in a signal
//! handler.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::last_error;

/// `UFFD_API`
pub const UFFD_API: u64 = 0xAA;
/// `UFFD_USER_MODE_ONLY` (flag of the `userfaultfd()` system call, Linux
/// 5.11): only faults raised in user mode are delivered. Needed by a
/// process without CAP_SYS_PTRACE when `vm.unprivileged_userfaultfd` is 0.
pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;

/// `UFFD_FEATURE_SIGBUS`: faults become a SIGBUS in the faulting thread.
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
/// `UFFD_FEATURE_MINOR_SHMEM` (Linux 5.14): minor faults on shmem.
pub const UFFD_FEATURE_MINOR_SHMEM: u64 = 1 << 10;
/// `UFFD_FEATURE_WP_HUGETLBFS_SHMEM` (Linux 5.19): write-protect on shmem.
pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;

pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_REGISTER_MODE_MINOR: u64 = 1 << 2;
/// `UFFDIO_COPY_MODE_WP`: install the page write-protected.
pub const UFFDIO_COPY_MODE_WP: u64 = 1 << 1;
/// `UFFDIO_WRITEPROTECT_MODE_WP`
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
/// `UFFDIO_CONTINUE_MODE_WP` (Linux 6.4): map write-protected.
pub const UFFDIO_CONTINUE_MODE_WP: u64 = 1 << 1;

/// `UFFD_EVENT_PAGEFAULT` and the page-fault flags of a [`UffdMsg`].
pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
pub const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;

/// `struct uffdio_api`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioApi {
    pub api: u64,
    pub features: u64,
    pub ioctls: u64,
}

/// `struct uffdio_range`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioRange {
    pub start: u64,
    pub len: u64,
}

/// `struct uffdio_register`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioRegister {
    pub range: UffdioRange,
    pub mode: u64,
    pub ioctls: u64,
}

/// `struct uffdio_copy`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioCopy {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub copy: i64,
}

/// `struct uffdio_zeropage`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioZeropage {
    pub range: UffdioRange,
    pub mode: u64,
    pub zeropage: i64,
}

/// `struct uffdio_writeprotect`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioWriteprotect {
    pub range: UffdioRange,
    pub mode: u64,
}

/// `struct uffdio_continue` (Linux 5.13).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioContinue {
    pub range: UffdioRange,
    pub mode: u64,
    pub mapped: i64,
}

/// `struct uffd_msg` as a page-fault message: event, padding, then
/// `arg.pagefault.{flags, address, feat.ptid}` (32 bytes in all).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct UffdMsg {
    pub event: u8,
    pub reserved1: u8,
    pub reserved2: u16,
    pub reserved3: u32,
    pub flags: u64,
    pub address: u64,
    pub ptid: u32,
    pub pad: u32,
}

// The UAPI sizes are fixed; they are part of the ioctl numbers.
const _: () = assert!(size_of::<UffdioApi>() == 24);
const _: () = assert!(size_of::<UffdioRange>() == 16);
const _: () = assert!(size_of::<UffdioRegister>() == 32);
const _: () = assert!(size_of::<UffdioCopy>() == 40);
const _: () = assert!(size_of::<UffdioZeropage>() == 32);
const _: () = assert!(size_of::<UffdioWriteprotect>() == 24);
const _: () = assert!(size_of::<UffdioContinue>() == 32);
const _: () = assert!(size_of::<UffdMsg>() == 32);

/// Whether this architecture uses the asm-generic ioctl encoding below.
pub const SUPPORTED_ARCH: bool = cfg!(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "s390x"
));

const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (UFFD_API << 8) | nr
}

/// `_IOWR(UFFDIO, 0x3F, struct uffdio_api)`
pub const UFFDIO_API: u64 = ioc(IOC_READ | IOC_WRITE, 0x3F, size_of::<UffdioApi>());
/// `_IOWR(UFFDIO, 0x00, struct uffdio_register)`
pub const UFFDIO_REGISTER: u64 = ioc(IOC_READ | IOC_WRITE, 0x00, size_of::<UffdioRegister>());
/// `_IOR(UFFDIO, 0x02, struct uffdio_range)`
pub const UFFDIO_WAKE: u64 = ioc(IOC_READ, 0x02, size_of::<UffdioRange>());
/// `_IOWR(UFFDIO, 0x03, struct uffdio_copy)`
pub const UFFDIO_COPY: u64 = ioc(IOC_READ | IOC_WRITE, 0x03, size_of::<UffdioCopy>());
/// `_IOWR(UFFDIO, 0x04, struct uffdio_zeropage)`
pub const UFFDIO_ZEROPAGE: u64 = ioc(IOC_READ | IOC_WRITE, 0x04, size_of::<UffdioZeropage>());
/// `_IOWR(UFFDIO, 0x06, struct uffdio_writeprotect)`
pub const UFFDIO_WRITEPROTECT: u64 = ioc(IOC_READ | IOC_WRITE, 0x06, size_of::<UffdioWriteprotect>());
/// `_IOWR(UFFDIO, 0x07, struct uffdio_continue)`
pub const UFFDIO_CONTINUE: u64 = ioc(IOC_READ | IOC_WRITE, 0x07, size_of::<UffdioContinue>());

/// The bit of ioctl `nr` (`_UFFDIO_*`) in `UffdioRegister::ioctls`.
pub const fn ioctl_bit(request: u64) -> u64 {
    1 << (request & 0xff)
}

/// A userfaultfd descriptor.
#[derive(Debug)]
pub struct Userfaultfd(OwnedFd);

impl Userfaultfd {
    /// `userfaultfd(flags)` (`O_CLOEXEC`, `O_NONBLOCK`,
    /// [`UFFD_USER_MODE_ONLY`]). Which flags to try, in which order, is the
    /// caller's policy.
    pub fn open(flags: libc::c_int) -> io::Result<Userfaultfd> {
        // SAFETY: userfaultfd(2) takes one flags argument and returns a new
        // descriptor or -1; it touches no memory of ours.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if fd < 0 {
            return Err(last_error());
        }
        // SAFETY: a descriptor just returned to us that nobody else owns.
        Ok(Userfaultfd(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))
    }

    fn ioctl<T>(&self, request: u64, arg: &mut T) -> Result<(), i32> {
        // SAFETY: every request this module makes is paired with the
        // argument struct whose size it encodes (the constants above are
        // built from those sizes); the kernel reads and writes only that
        // struct, which `arg` borrows mutably for the call. The memory
        // effects of each request are argued at its method.
        let r = unsafe { libc::ioctl(self.0.as_raw_fd(), request as _, arg as *mut T) };
        if r < 0 {
            Err(last_error().raw_os_error().unwrap_or(libc::EIO))
        } else {
            Ok(())
        }
    }

    /// The API handshake (`UFFDIO_API`) asking for `features`; returns what
    /// the kernel answered.
    pub fn api(&self, features: u64) -> io::Result<UffdioApi> {
        let mut a = UffdioApi { api: UFFD_API, features, ioctls: 0 };
        self.ioctl(UFFDIO_API, &mut a).map_err(io::Error::from_raw_os_error)?;
        Ok(a)
    }

    /// Register `[start, start + len)` for the faults of `mode`
    /// (`UFFDIO_REGISTER_MODE_*`); returns the ioctls the range supports
    /// (test them with [`ioctl_bit`]).
    ///
    /// # Safety
    /// From now on a fault of that kind in the range waits (or raises
    /// SIGBUS, with [`UFFD_FEATURE_SIGBUS`]) until this descriptor resolves
    /// it: the range must be a mapping the caller serves, and no code that
    /// cannot wait (or take the signal) may touch it.
    pub unsafe fn register(&self, start: usize, len: usize, mode: u64) -> io::Result<u64> {
        let mut r = UffdioRegister { range: UffdioRange { start: start as u64, len: len as u64 }, mode, ioctls: 0 };
        self.ioctl(UFFDIO_REGISTER, &mut r).map_err(io::Error::from_raw_os_error)?;
        Ok(r.ioctls)
    }

    /// Install a copy of `src` at `dst` (missing pages of a registered
    /// range), write-protected if `wp`, and wake the threads waiting for
    /// it. `Err(errno)`: `EEXIST` when a page is there already.
    pub fn copy(&self, dst: usize, src: &[u8], wp: bool) -> Result<(), i32> {
        // The kernel only fills pages that are not there (EEXIST
        // otherwise), reading `src`, which we borrow: no byte anyone could
        // have seen changes.
        let mut c = UffdioCopy {
            dst: dst as u64,
            src: src.as_ptr() as u64,
            len: src.len() as u64,
            mode: if wp { UFFDIO_COPY_MODE_WP } else { 0 },
            copy: 0,
        };
        self.ioctl(UFFDIO_COPY, &mut c)
    }

    /// Map the zero page at `[dst, dst + len)` (missing pages) and wake
    /// their waiters.
    pub fn zeropage(&self, dst: usize, len: usize) -> Result<(), i32> {
        let mut z = UffdioZeropage { range: UffdioRange { start: dst as u64, len: len as u64 }, mode: 0, zeropage: 0 };
        self.ioctl(UFFDIO_ZEROPAGE, &mut z)
    }

    /// Write-protect `[start, start + len)`, or lift the protection (which
    /// wakes the threads waiting on it). Changes page protection only.
    pub fn write_protect(&self, start: usize, len: usize, wp: bool) -> Result<(), i32> {
        let mut w = UffdioWriteprotect {
            range: UffdioRange { start: start as u64, len: len as u64 },
            mode: if wp { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 },
        };
        self.ioctl(UFFDIO_WRITEPROTECT, &mut w)
    }

    /// Map the pages of `[start, start + len)` that the file (memfd) holds
    /// already (`UFFDIO_CONTINUE`, resolving minor faults), write-protected
    /// if `wp` (Linux 6.4; `EINVAL` before). `EEXIST` when one is mapped
    /// already.
    pub fn map_continue(&self, start: usize, len: usize, wp: bool) -> Result<(), i32> {
        let mut c = UffdioContinue {
            range: UffdioRange { start: start as u64, len: len as u64 },
            mode: if wp { UFFDIO_CONTINUE_MODE_WP } else { 0 },
            mapped: 0,
        };
        self.ioctl(UFFDIO_CONTINUE, &mut c)
    }

    /// Wake the threads waiting on faults in `[start, start + len)`.
    pub fn wake(&self, start: usize, len: usize) -> Result<(), i32> {
        let mut r = UffdioRange { start: start as u64, len: len as u64 };
        self.ioctl(UFFDIO_WAKE, &mut r)
    }

    /// Read pending events into `buf`; returns how many (0 when there are
    /// none or the read failed).
    pub fn read(&self, buf: &mut [UffdMsg]) -> usize {
        // SAFETY: `buf` is writable memory of `size_of_val(buf)` bytes and
        // UffdMsg is plain old data of the kernel's uffd_msg layout.
        let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), std::mem::size_of_val(buf)) };
        if n <= 0 {
            0
        } else {
            n as usize / size_of::<UffdMsg>()
        }
    }
}

impl AsFd for Userfaultfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for Userfaultfd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every number and structure above, as <linux/userfaultfd.h> has it.
    #[test]
    fn the_userfaultfd_abi_matches_the_kernel_header() {
        let pairs: Vec<(&str, u64)> = [
            ("UFFD_API", UFFD_API),
            ("UFFD_USER_MODE_ONLY", UFFD_USER_MODE_ONLY as u64),
            ("UFFD_FEATURE_SIGBUS", UFFD_FEATURE_SIGBUS),
            ("UFFD_FEATURE_MINOR_SHMEM", UFFD_FEATURE_MINOR_SHMEM),
            ("UFFD_FEATURE_WP_HUGETLBFS_SHMEM", UFFD_FEATURE_WP_HUGETLBFS_SHMEM),
            ("UFFD_EVENT_PAGEFAULT", u64::from(UFFD_EVENT_PAGEFAULT)),
            ("UFFD_PAGEFAULT_FLAG_WRITE", UFFD_PAGEFAULT_FLAG_WRITE),
            ("UFFD_PAGEFAULT_FLAG_WP", UFFD_PAGEFAULT_FLAG_WP),
            ("UFFDIO_REGISTER_MODE_MISSING", UFFDIO_REGISTER_MODE_MISSING),
            ("UFFDIO_REGISTER_MODE_WP", UFFDIO_REGISTER_MODE_WP),
            ("UFFDIO_REGISTER_MODE_MINOR", UFFDIO_REGISTER_MODE_MINOR),
            ("UFFDIO_COPY_MODE_WP", UFFDIO_COPY_MODE_WP),
            ("UFFDIO_WRITEPROTECT_MODE_WP", UFFDIO_WRITEPROTECT_MODE_WP),
            ("UFFDIO_API", UFFDIO_API),
            ("UFFDIO_REGISTER", UFFDIO_REGISTER),
            ("UFFDIO_WAKE", UFFDIO_WAKE),
            ("UFFDIO_COPY", UFFDIO_COPY),
            ("UFFDIO_ZEROPAGE", UFFDIO_ZEROPAGE),
            ("UFFDIO_WRITEPROTECT", UFFDIO_WRITEPROTECT),
            ("UFFDIO_CONTINUE", UFFDIO_CONTINUE),
            ("1ULL << _UFFDIO_WAKE", ioctl_bit(UFFDIO_WAKE)),
            ("1ULL << _UFFDIO_COPY", ioctl_bit(UFFDIO_COPY)),
            ("1ULL << _UFFDIO_ZEROPAGE", ioctl_bit(UFFDIO_ZEROPAGE)),
            ("1ULL << _UFFDIO_WRITEPROTECT", ioctl_bit(UFFDIO_WRITEPROTECT)),
            ("1ULL << _UFFDIO_CONTINUE", ioctl_bit(UFFDIO_CONTINUE)),
        ]
        .into_iter()
        .chain(vsci_cprobe::layout!("struct uffdio_api": UffdioApi { "api" => api, "features" => features, "ioctls" => ioctls }))
        .chain(vsci_cprobe::layout!("struct uffdio_range": UffdioRange { "start" => start, "len" => len }))
        .chain(vsci_cprobe::layout!("struct uffdio_register": UffdioRegister { "range" => range, "mode" => mode, "ioctls" => ioctls }))
        .chain(vsci_cprobe::layout!("struct uffdio_copy": UffdioCopy { "dst" => dst, "src" => src, "len" => len, "mode" => mode, "copy" => copy }))
        .chain(vsci_cprobe::layout!("struct uffdio_zeropage": UffdioZeropage { "range" => range, "mode" => mode, "zeropage" => zeropage }))
        .chain(vsci_cprobe::layout!("struct uffdio_writeprotect": UffdioWriteprotect { "range" => range, "mode" => mode }))
        .chain(vsci_cprobe::layout!("struct uffdio_continue": UffdioContinue { "range" => range, "mode" => mode, "mapped" => mapped }))
        .chain(vsci_cprobe::layout!("struct uffd_msg": UffdMsg { "event" => event, "arg.pagefault.flags" => flags, "arg.pagefault.address" => address, "arg.pagefault.feat.ptid" => ptid }))
        .collect();
        vsci_cprobe::check(&[], &["sys/ioctl.h", "linux/userfaultfd.h"], &pairs);
    }

    /// Missing faults of private anonymous memory served by a thread.
    #[test]
    fn a_missing_fault_is_served_with_a_copy() {
        let Ok(u) =
            Userfaultfd::open(libc::O_CLOEXEC | UFFD_USER_MODE_ONLY).or_else(|_| Userfaultfd::open(libc::O_CLOEXEC))
        else {
            eprintln!("skipped: no userfaultfd here");
            return;
        };
        u.api(0).unwrap();
        let m = crate::MapOptions::private().anonymous(4096).unwrap();
        // SAFETY: our own fresh mapping, served by the thread below before
        // this thread reads it.
        let ioctls = unsafe { u.register(m.addr(), 4096, UFFDIO_REGISTER_MODE_MISSING) }.unwrap();
        assert_ne!(ioctls & ioctl_bit(UFFDIO_COPY), 0);
        let addr = m.addr();
        let server = std::thread::spawn(move || {
            let mut msgs = [UffdMsg::default(); 4];
            assert_eq!(u.read(&mut msgs), 1, "blocking read of one fault");
            assert_eq!(msgs[0].event, UFFD_EVENT_PAGEFAULT);
            assert_eq!(msgs[0].address as usize & !4095, addr);
            u.copy(addr, &[0x5a; 4096], false).unwrap();
            assert_eq!(u.copy(addr, &[0; 4096], false), Err(libc::EEXIST));
        });
        assert_eq!(m.read_volatile::<u64>(64), Some(0x5a5a_5a5a_5a5a_5a5a));
        server.join().unwrap();
    }
}
