//! Kernel UAPI definitions of `userfaultfd` (include/uapi/linux/userfaultfd.h)
//! that Debian 12's headers and the `libc` crate lack: the features and
//! register modes the trap uses (missing, minor, write-protect, SIGBUS) and
//! the ioctls that resolve its faults.
//!
//! The ioctl numbers use the asm-generic `_IOC` encoding (x86, arm64, riscv,
//! loongarch, s390). Architectures with a different encoding (powerpc, mips,
//! sparc, alpha) get `WP_SUPPORTED_ARCH = false`: no trap there.

use std::mem::size_of;

/// `UFFD_API`
pub const UFFD_API: u64 = 0xAA;
/// `UFFD_USER_MODE_ONLY` (flag of the `userfaultfd()` syscall, Linux 5.11): only
/// faults raised in user mode are delivered to the handler. Needed by a process
/// without CAP_SYS_PTRACE when `vm.unprivileged_userfaultfd` is 0.
pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;

/// `UFFD_FEATURE_WP_HUGETLBFS_SHMEM` (Linux 5.19): WP works on shmem/hugetlbfs.
pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
/// `UFFD_FEATURE_SIGBUS`: faults become a SIGBUS in the faulting thread.
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
pub const UFFD_FEATURE_MINOR_SHMEM: u64 = 1 << 10;

pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
pub const UFFDIO_REGISTER_MODE_MINOR: u64 = 1 << 2;
pub const UFFDIO_CONTINUE_MODE_WP: u64 = 1 << 1;
/// `UFFDIO_WRITEPROTECT_MODE_WP`
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;

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

/// `struct uffdio_writeprotect`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioWriteprotect {
    pub range: UffdioRange,
    pub mode: u64,
}

/// `struct uffdio_continue` (Linux 5.13; `mode` WP since 6.4).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioContinue {
    pub range: UffdioRange,
    pub mode: u64,
    pub mapped: i64,
}

// The UAPI sizes are fixed; they are part of the ioctl numbers.
const _: () = assert!(size_of::<UffdioApi>() == 24);
const _: () = assert!(size_of::<UffdioRange>() == 16);
const _: () = assert!(size_of::<UffdioRegister>() == 32);
const _: () = assert!(size_of::<UffdioWriteprotect>() == 24);
const _: () = assert!(size_of::<UffdioContinue>() == 32);

/// Whether this architecture uses the asm-generic ioctl encoding below.
pub const WP_SUPPORTED_ARCH: bool = cfg!(any(
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

const fn ioc(dir: u64, ty: u8, nr: u8, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((ty as u64) << 8) | nr as u64
}

/// `UFFDIO_API = _IOWR(0xAA, 0x3F, struct uffdio_api)`
pub const UFFDIO_API: u64 = ioc(IOC_READ | IOC_WRITE, 0xAA, 0x3F, size_of::<UffdioApi>());
/// `UFFDIO_REGISTER = _IOWR(0xAA, 0x00, struct uffdio_register)`
pub const UFFDIO_REGISTER: u64 = ioc(
    IOC_READ | IOC_WRITE,
    0xAA,
    0x00,
    size_of::<UffdioRegister>(),
);
/// `UFFDIO_WRITEPROTECT = _IOWR(0xAA, 0x06, struct uffdio_writeprotect)`
pub const UFFDIO_WRITEPROTECT: u64 = ioc(
    IOC_READ | IOC_WRITE,
    0xAA,
    0x06,
    size_of::<UffdioWriteprotect>(),
);
/// `UFFDIO_CONTINUE = _IOWR(0xAA, 0x07, struct uffdio_continue)`
pub const UFFDIO_CONTINUE: u64 = ioc(IOC_READ | IOC_WRITE, 0xAA, 0x07, size_of::<UffdioContinue>());

// Values as printed by the kernel headers of 6.7+ (checked against
// criu/include/pagemap_scan.h and the linux uapi headers).
const _: () = assert!(UFFDIO_API == 0xC018_AA3F);
const _: () = assert!(UFFDIO_REGISTER == 0xC020_AA00);
const _: () = assert!(UFFDIO_WRITEPROTECT == 0xC018_AA06);

/// Copy up to `buf.len()` bytes of this process's memory at `addr` into
/// `buf` without ever faulting: unmapped or unreadable bytes end the copy.
/// Returns how many bytes were copied.
pub fn read_own(addr: usize, buf: &mut [u8]) -> usize {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: process_vm_readv on our own pid reads through the kernel,
    // which reports an unreadable address as an error (or a short read)
    // instead of a fault; `local` is `buf`, writable for its length.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        0
    } else {
        n as usize
    }
}

/// `UFFDIO_WAKE = _IOR(0xAA, 0x02, struct uffdio_range)`
pub const UFFDIO_WAKE: u64 = ioc(IOC_READ, 0xAA, 0x02, size_of::<UffdioRange>());
const _: () = assert!(UFFDIO_WAKE == 0x8010_AA02);

/// `UFFD_EVENT_PAGEFAULT` and the page-fault flags of a `struct uffd_msg`.
pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
pub const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;

/// `struct uffd_msg` as a page-fault message: event, padding, then
/// `arg.pagefault.{flags, address, feat}` (32 bytes in all).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct UffdMsg {
    pub event: u8,
    pub reserved1: u8,
    pub reserved2: u16,
    pub reserved3: u32,
    pub flags: u64,
    pub address: u64,
    pub feat: u64,
}
const _: () = assert!(size_of::<UffdMsg>() == 32);

/// A system call made with the `syscall` instruction itself, never through
/// the C library's `syscall(2)`: libsisci exports its own `syscall` (to see
/// a program's direct `rt_sigaction`), and the code behind it must not call
/// back into it. Returns the kernel's result (`-errno` on failure).
///
/// # Safety
/// As the system call `n` with these arguments.
#[cfg(target_arch = "x86_64")]
pub unsafe fn raw_syscall(n: libc::c_long, a: [libc::c_long; 6]) -> libc::c_long {
    let ret: libc::c_long;
    // SAFETY: the caller's contract. The Linux x86-64 system-call ABI: number
    // in RAX, arguments in RDI, RSI, RDX, R10, R8, R9; the kernel clobbers
    // RCX and R11 and returns in RAX.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2], in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86-64 version; elsewhere the C library's (no interposer of
/// ours exists there).
///
/// # Safety
/// As the system call `n` with these arguments.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn raw_syscall(n: libc::c_long, a: [libc::c_long; 6]) -> libc::c_long {
    // SAFETY: the caller's contract.
    let r = unsafe { libc::syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r == -1 {
        -(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL) as libc::c_long)
    } else {
        r
    }
}
