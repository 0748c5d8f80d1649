//! Find out which bytes a process stored into a `MAP_SHARED` memfd mapping
//! since the last check — cheaply, and with no help from the code that stores.
//!
//! vsci uses this to ship the stores a program makes into a local *shadow* of a
//! remote segment to the segment's owner node (see the "Remote stores" rule of
//! the brief: stores must arrive without any call by the program).
//!
//! Two layers:
//!
//! * [`PageTracker`]: page-granular "written since last time" sets. Fast path
//!   ([`Mode::WriteProtect`]): a userfaultfd registered in write-protect mode
//!   with `UFFD_FEATURE_WP_ASYNC` (Linux ≥ 6.7) — the first store to a
//!   protected page takes a short in-kernel fault that only clears the page's
//!   uffd-wp bit — and the `PAGEMAP_SCAN` ioctl on `/proc/self/pagemap`, which
//!   returns the written pages and re-protects them in one call. Fallback
//!   ([`Mode::Compare`], chosen at run time when the kernel lacks either, or
//!   forced with `VSCI_DIRTY=compare`): every page is a candidate every time.
//! * [`DiffTracker`]: keeps a private *twin* (copy of the mapping as of the last
//!   sync), compares the candidate pages against it and yields the changed
//!   byte runs (TreadMarks-style twins/diffs, so several writers can share a
//!   page without clobbering each other's bytes). Correctness never depends on
//!   the fast path: in compare mode the same runs come out, at the price of a
//!   full comparison per check.
//!
//! Only stores made through the tracked mapping are seen by the write-protect
//! mode (the page tables of this process); stores through another mapping of
//! the same memfd — another process, a second mapping, a guest through QEMU's
//! mapping — are not (in compare mode they are, since everything is compared).

//!
//! # Findings on Linux 6.18 (see `examples/wp_probe.rs`)
//!
//! * `UFFD_USER_MODE_ONLY` is required when not root (`vm.unprivileged_userfaultfd`
//!   is 0); with it, write-protect mode works unprivileged, and stores the
//!   kernel makes on the process's behalf (`read(2)` into the buffer) are
//!   still tracked, because async WP faults are resolved before the
//!   user/kernel-mode check.
//! * `UFFD_FEATURE_WP_UNPOPULATED` is not needed for shmem (it only matters
//!   for anonymous memory); never-touched pages are caught without it.
//! * The range must be write-protected once at creation (we do both an
//!   `UFFDIO_WRITEPROTECT` and a first scan-and-protect). Without that, every
//!   page that is merely *read* (or was written before) shows up as written:
//!   false positives only — the kernel reports any page-table entry without a
//!   write-protect mark as written, so it never under-reports.
//! * A written page whose page-table entry is dropped before the scan
//!   (`MADV_DONTNEED`) is still reported (as written), for the same reason.
//!
//! # Caveats
//!
//! * One userfaultfd registration per range: a second write-protect tracker
//!   on the same range fails (`ModeRequest::Auto` then falls back to compare).
//! * Write-protect mode does not see stores through other mappings of the
//!   memfd (other processes, guests via QEMU): tell the twin about writes vsci
//!   makes that way (`DiffTracker::note_external_*`) and use compare mode (or
//!   `DiffTracker::collect_all`) where others store.
//! * A forked child's stores to the tracked range are not tracked (no
//!   `UFFD_FEATURE_EVENT_FORK`).
//! * The tracker must be dropped before the range is unmapped or remapped.
//! * Tested with 4 KiB shmem pages only (no MFD_HUGETLB, shmem THP off here).

mod diff;
mod page;
pub mod trap;
#[doc(hidden)]
pub mod sys;

pub use diff::{CollectStats, DiffConfig, DiffTracker, Initial, Run, DEFAULT_MERGE_GAP};
pub use page::{Mode, ModeRequest, PageTracker, WpOptions, ENV_VAR};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The start address is null or not page-aligned.
    #[error("address {addr:#x} is not aligned to the page size {page}")]
    Unaligned { addr: usize, page: usize },
    /// Zero length (or a range that wraps the address space).
    #[error("empty or wrapping range")]
    EmptyRange,
    /// An offset/length outside the tracked range.
    #[error("range {offset}+{len} outside the tracked {size} bytes")]
    OutOfRange {
        offset: usize,
        len: usize,
        size: usize,
    },
    /// Write-protect tracking was required but is not available.
    #[error("write-protect tracking unavailable: {0}")]
    WpUnavailable(String),
    /// A system call failed.
    #[error("{op}: {source}")]
    Os {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}
