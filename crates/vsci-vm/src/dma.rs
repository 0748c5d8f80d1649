//! The node's DMA engine, offered to a guest by API remoting (seed 003): a
//! guest program's `SCIStartDmaTransfer*` arrives as a `DmaStart` request;
//! the agent checks it against that program's own segments and
//! connections, answers at once, moves the bytes here and reports the end
//! as a `DmaDone` (an MSI-X interrupt in the guest).
//!
//! No byte is copied between guest and host: both ends are segment memory
//! (memfds the guest sees as windows), so a co-located transfer is one copy
//! from one memfd to the other, and a transfer to another node is RMA
//! straight from or into the guest segment's pages.
//!
//! The bytes are moved by `vsci_rma::mover`, the one byte mover of this
//! engine and of a program's own DMA queues (`vsci-client`'s engine, which
//! runs in the program's process; in a guest it forwards segment transfers
//! here): the same checks, the same 1 MiB chunks between two looks at the
//! abort and lost flags, the same RMA batches. This file holds the guest
//! program's segment memory and says which memory is which side.

use std::os::fd::{AsFd, OwnedFd};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use vsci_proto::SciError;
use vsci_rma::mover::{self, Piece};
use vsci_rma::LocalMem;

use crate::proxy::ProxiedSegment;

/// Most entries in one vector (what a guest may ask the engine to walk).
pub const MAX_ENTRIES: usize = 4096;

/// Segment memory the agent holds for a guest program: a memfd and the
/// segment's size, mapped here on first use.
pub struct Mem {
    fd: OwnedFd,
    pub size: u64,
    /// The memfd's (device, inode): a segment and a connection to it are
    /// the same memory.
    key: (u64, u64),
    map: OnceLock<Option<vsci_sys::Mapping>>,
}

impl Mem {
    pub fn new(fd: OwnedFd, size: u64) -> Mem {
        let key = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd))
            .map(|st| (st.st_dev, st.st_ino))
            .unwrap_or((0, 0));
        Mem { fd, size, key, map: OnceLock::new() }
    }

    /// The whole segment, for the mover.
    fn mem(&self) -> Result<LocalMem<'_>, SciError> {
        let m = self.map.get_or_init(|| {
            let len = usize::try_from(self.size).ok()?.div_ceil(4096) * 4096;
            // A sealed memfd (it cannot shrink) of at least `size` bytes.
            vsci_sys::MapOptions::shared().map(self.fd.as_fd(), len, 0).ok()
        });
        let m = m.as_ref().ok_or(SciError::Nospc)?;
        // SAFETY: `size` bytes of the mapping (it is at least that long),
        // which lives as long as `self` — and for good once an RMA
        // operation on it was abandoned (`run` then forgets a reference to
        // this Mem). The mover only copies by address into it: the guest
        // and its peers store to the same memory meanwhile, which SISCI
        // leaves to the programs, as a hardware engine does.
        Ok(unsafe { LocalMem::from_raw(m.as_ptr(), self.size as usize) })
    }
}

/// Where the remote end of a transfer is.
#[derive(Clone)]
pub enum Target {
    /// A segment of this node (the guest's own, a host process's, another
    /// guest's).
    Local(Arc<Mem>),
    /// Another node's segment, reached over the RMA engine.
    Proxied(Arc<ProxiedSegment>),
}

impl Target {
    fn size(&self) -> u64 {
        match self {
            Target::Local(m) => m.size,
            Target::Proxied(p) => p.size(),
        }
    }
}

/// A checked transfer.
pub struct Job {
    pub local: Arc<Mem>,
    pub remote: Target,
    pub entries: Vec<Piece>,
    pub read: bool,
    pub abort: Arc<AtomicBool>,
    /// Raised when the remote segment is lost (its owner removed it, or its
    /// node stopped answering): the transfer then fails.
    pub lost: Arc<AtomicBool>,
}

/// A `DmaStart`'s entries, (size, local offset, remote offset) each.
pub fn pieces(entries: &[(u64, u64, u64)]) -> Vec<Piece> {
    entries.iter().map(|&(size, local_offset, remote_offset)| Piece { size, local_offset, remote_offset }).collect()
}

/// Check a guest's request against the objects it names (already looked
/// up in that program's own tables): the mover's checks, as on the host
/// engine (any size and offset, `vsci_client::DMA_ALIGN`).
pub fn check(local: &Mem, remote: &Target, entries: &[Piece]) -> Result<(), SciError> {
    mover::check(entries, MAX_ENTRIES, local.size, remote.size())
}

impl mover::Watch for Job {
    fn aborted(&self) -> bool {
        self.abort.load(Ordering::SeqCst)
    }

    fn lost(&self, _: usize) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    fn abandoned(&self) {
        // The engine may still touch these pages: keep the mapping for the
        // life of the agent.
        std::mem::forget(self.local.clone());
    }
}

/// Move the bytes; `Ok`, `Cancelled` or the failure.
pub fn run(job: &Job) -> SciError {
    let local = match job.local.mem() {
        Ok(m) => m,
        Err(e) => return e,
    };
    match &job.remote {
        // The same memory as the local side (a program connected to its own
        // segment): address it through the same mapping, so that overlap is
        // visible to the copy.
        Target::Local(m) if m.key == job.local.key => mover::copy(local, local, &job.entries, job.read, job),
        Target::Local(m) => match m.mem() {
            Ok(far) => mover::copy(local, far, &job.entries, job.read, job),
            Err(e) => e,
        },
        Target::Proxied(p) => mover::rma(local, true, &[p.target()], &job.entries, job.read, job)[0],
    }
}
