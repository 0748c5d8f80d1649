//! Kernel UAPI definitions that Debian 12's headers (and the `libc` crate) lack:
//! `userfaultfd` write-protect with `UFFD_FEATURE_WP_ASYNC` (Linux 6.7,
//! include/uapi/linux/userfaultfd.h) and the `PAGEMAP_SCAN` ioctl on
//! `/proc/<pid>/pagemap` (Linux 6.7, include/uapi/linux/fs.h).
//!
//! The ioctl numbers use the asm-generic `_IOC` encoding (x86, arm64, riscv,
//! loongarch, s390). Architectures with a different encoding (powerpc, mips,
//! sparc, alpha) get `WP_SUPPORTED_ARCH = false` and always use the compare
//! fallback.

use std::mem::size_of;

/// `UFFD_API`
pub const UFFD_API: u64 = 0xAA;
/// `UFFD_USER_MODE_ONLY` (flag of the `userfaultfd()` syscall, Linux 5.11): only
/// faults raised in user mode are delivered to the handler. Needed by a process
/// without CAP_SYS_PTRACE when `vm.unprivileged_userfaultfd` is 0.
pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;

/// `UFFD_FEATURE_WP_HUGETLBFS_SHMEM` (Linux 5.19): WP works on shmem/hugetlbfs.
pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
/// `UFFD_FEATURE_WP_UNPOPULATED` (Linux 6.4): write-protecting a range also
/// arms never-populated anonymous pages (pte markers). shmem always gets markers.
pub const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
/// `UFFD_FEATURE_WP_ASYNC` (Linux 6.7): a write to a write-protected page is
/// resolved inside the kernel (the uffd-wp bit is dropped) instead of being
/// queued to a handler thread.
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;

/// `UFFDIO_REGISTER_MODE_WP`
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

/// `PAGE_IS_WPALLOWED`: the page has async write-protection enabled.
/// `struct uffdio_continue` (Linux 5.13; `mode` WP since 6.4).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioContinue {
    pub range: UffdioRange,
    pub mode: u64,
    pub mapped: i64,
}

pub const PAGE_IS_WPALLOWED: u64 = 1 << 0;
/// `PAGE_IS_WRITTEN`: written since it was last write-protected.
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;
/// `PAGE_IS_FILE`
pub const PAGE_IS_FILE: u64 = 1 << 2;
/// `PAGE_IS_PRESENT`
pub const PAGE_IS_PRESENT: u64 = 1 << 3;

/// `PM_SCAN_WP_MATCHING`: write-protect the pages that matched (and were reported).
pub const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// `PM_SCAN_CHECK_WPASYNC`: fail (EPERM) if a page in the range is not
/// registered for async write-protect.
pub const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;

/// `struct page_region`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PageRegion {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

/// `struct pm_scan_arg`
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PmScanArg {
    pub size: u64,
    pub flags: u64,
    pub start: u64,
    pub end: u64,
    pub walk_end: u64,
    pub vec: u64,
    pub vec_len: u64,
    pub max_pages: u64,
    pub category_inverted: u64,
    pub category_mask: u64,
    pub category_anyof_mask: u64,
    pub return_mask: u64,
}

// The UAPI sizes are fixed; they are part of the ioctl numbers.
const _: () = assert!(size_of::<UffdioApi>() == 24);
const _: () = assert!(size_of::<UffdioRange>() == 16);
const _: () = assert!(size_of::<UffdioRegister>() == 32);
const _: () = assert!(size_of::<UffdioWriteprotect>() == 24);
const _: () = assert!(size_of::<PageRegion>() == 24);
const _: () = assert!(size_of::<UffdioContinue>() == 32);
const _: () = assert!(size_of::<PmScanArg>() == 96);

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
/// `PAGEMAP_SCAN = _IOWR('f', 16, struct pm_scan_arg)`
pub const UFFDIO_CONTINUE: u64 = ioc(IOC_READ | IOC_WRITE, 0xAA, 0x07, size_of::<UffdioContinue>());
pub const PAGEMAP_SCAN: u64 = ioc(IOC_READ | IOC_WRITE, b'f', 16, size_of::<PmScanArg>());

// Values as printed by the kernel headers of 6.7+ (checked against
// criu/include/pagemap_scan.h and the linux uapi headers).
const _: () = assert!(UFFDIO_API == 0xC018_AA3F);
const _: () = assert!(UFFDIO_REGISTER == 0xC020_AA00);
const _: () = assert!(UFFDIO_WRITEPROTECT == 0xC018_AA06);
const _: () = assert!(PAGEMAP_SCAN == 0xC060_6610);
