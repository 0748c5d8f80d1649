//! vsci's system layer: the operating-system objects the rest of the tree
//! builds on, each behind one owned type, so that most of the tree's
//! `unsafe` lives here, in one audited place (as iceoryx2's posix layer and
//! rust-vmm's vmm-sys-util do for theirs).
//!
//! * [`mman`]: [`Mapping`], an owned `mmap` (shared or private, of a
//!   descriptor or anonymous) unmapped on drop, with bounds-checked raw
//!   pointers and volatile accessors; and the two calls that map over memory
//!   no `Mapping` owns ([`mman::map_fixed`]).
//! * [`memfd`]: memfds, sized and sealed.
//! * [`eventfd`]: eventfds and their 8-byte counter reads and writes.
//! * [`uffd`]: userfaultfd: the UAPI numbers and structures
//!   (checked against `<linux/userfaultfd.h>` by this crate's tests) and
//!   [`Userfaultfd`], whose methods are its ioctls. What to register and how
//!   to serve faults stays with the crates that do it (`vsci-trap`,
//!   `vsci-lend`).
//! * [`syscall`]: system calls that bypass the C library's `syscall(2)`
//!   (libsisci interposes it), for code that runs in signal handlers.
//! * [`alloc`]: libsisci's global allocator, which serves the store path
//!   (a signal handler that may have interrupted `malloc`) without it.
//! * [`signals`]: keeping the program's asynchronous signals out of our
//!   threads and out of code that holds a lock the store path takes.
//!
//! Every function here that can run inside a signal handler says so; those
//! make system calls only and never allocate.

pub mod alloc;
pub mod eventfd;
pub mod memfd;
pub mod mman;
pub mod signals;
pub mod syscall;
pub mod uffd;

pub use mman::{MapOptions, Mapping, Prot};
pub use syscall::raw_syscall;
pub use uffd::Userfaultfd;

/// The last OS error as an `io::Error` (no allocation).
pub(crate) fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}
