//! Which bytes of a remote map a program stored, seen at the store itself.
//!
//! vsci keeps a local *shadow* of each remote segment a process maps and must
//! ship every store the program makes into it to the segment's owner (the
//! store contract in docs/api.md). [`trap`] registers the program's mapping
//! with a userfaultfd so that the first access to each page, and the first
//! store after each shipment, fault in the thread that makes them; the
//! caller keeps a twin of the owner's bytes per page and diffs against it.
//!
//! An earlier page tracker (asynchronous write-protect and `PAGEMAP_SCAN`,
//! or whole-map compares) found written pages *after* the fact and diffed
//! against the last shipped bytes: a store that rewrote an earlier value was
//! lost. It is gone; docs/design.md ("Remote maps") says why.

pub mod chain;
pub mod emulate;
pub mod trap;

/// A changed byte run: `(offset, len)` relative to the start of a mapping.
pub type Run = (usize, usize);

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
    OutOfRange { offset: usize, len: usize, size: usize },
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

pub use vsci_sys::mman::page_size;
