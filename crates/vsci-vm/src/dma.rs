//! The node's DMA engine, offered to a guest by API remoting (seed 003): a
//! guest program's `SCIStartDmaTransfer*` arrives as a `DmaStart` request;
//! the agent checks it against that program's own segments and
//! connections, answers at once, moves the bytes here and reports the end
//! as an `Event::DmaDone` (an MSI-X interrupt in the guest).
//!
//! No byte is copied between guest and host: both ends are segment memory
//! (memfds the guest sees as windows), so a co-located transfer is one copy
//! from one memfd to the other, and a transfer to another node is RMA
//! straight from or into the guest segment's pages.

use std::os::fd::{AsFd, OwnedFd};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use vsci_client::proxy::ProxiedSegment;
use vsci_proto::SciError;

/// Most entries in one vector (what a guest may ask the engine to walk).
pub const MAX_ENTRIES: usize = 4096;
/// Moved between two looks at the abort flag.
const CHUNK: usize = 1 << 20;

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

    fn ptr(&self) -> Result<*mut u8, SciError> {
        let m = self.map.get_or_init(|| {
            let len = usize::try_from(self.size).ok()?.div_ceil(4096) * 4096;
            // A sealed memfd (it cannot shrink) of at least `size` bytes.
            // The mapping is only used through raw copies; other processes
            // (the guest, its peers) write the same memory anyway, which
            // SISCI leaves to the programs, as a hardware engine does.
            vsci_sys::MapOptions::shared().map(self.fd.as_fd(), len, 0).ok()
        });
        m.as_ref().map(|m| m.as_ptr()).ok_or(SciError::Nospc)
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
    pub entries: Vec<(u64, u64, u64)>,
    pub read: bool,
    pub abort: Arc<AtomicBool>,
    /// Raised when the remote segment is lost (its owner removed it, or its
    /// node stopped answering): the transfer then fails.
    pub lost: Arc<AtomicBool>,
}

/// Check a guest's request against the objects it names (already looked
/// up in that program's own tables).
pub fn check(local: &Mem, remote: &Target, entries: &[(u64, u64, u64)]) -> Result<(), SciError> {
    if entries.is_empty() {
        return Err(SciError::IllegalParameter);
    }
    if entries.len() > MAX_ENTRIES {
        return Err(SciError::MaxEntries);
    }
    for &(size, loff, roff) in entries {
        if size == 0 {
            return Err(SciError::IllegalParameter);
        }
        let fits = |off: u64, limit: u64| off.checked_add(size).is_some_and(|e| e <= limit);
        if !fits(loff, local.size) || !fits(roff, remote.size()) {
            return Err(SciError::OutOfRange);
        }
        // Any size and offset, as on the host engine (vsci_client::DMA_ALIGN).
    }
    Ok(())
}

/// Move the bytes; `Ok`, `Cancelled` or the failure.
pub fn run(job: &Job) -> SciError {
    let l = match job.local.ptr() {
        Ok(p) => p,
        Err(e) => return e,
    };
    for &(size, loff, roff) in &job.entries {
        let n = size as usize;
        // SAFETY: `check` put loff + size inside the segment, and the
        // mapping covers the whole segment.
        let lp = unsafe { l.add(loff as usize) };
        let rp = match &job.remote {
            // The same memory as the local side (a program connected to its
            // own segment): address it through the same mapping, so that
            // overlap is visible to the copy.
            // SAFETY: as above, for the remote segment (same size).
            Target::Local(m) if m.key == job.local.key => Some(unsafe { l.add(roff as usize) }),
            Target::Local(m) => match m.ptr() {
                // SAFETY: as above, for the remote segment.
                Ok(p) => Some(unsafe { p.add(roff as usize) }),
                Err(e) => return e,
            },
            Target::Proxied(_) => None,
        };
        let (src, dst) = match rp {
            Some(rp) if job.read => (rp as usize, lp as usize),
            Some(rp) => (lp as usize, rp as usize),
            None => (0, 0),
        };
        // Overlapping ranges of one segment: move the chunks in the order
        // memmove would.
        let backward = dst > src && dst < src + n;
        let chunks = n.div_ceil(CHUNK);
        for k in 0..chunks {
            if job.abort.load(Ordering::SeqCst) {
                return SciError::Cancelled;
            }
            if job.lost.load(Ordering::SeqCst) {
                return SciError::TransferFailed;
            }
            let c = if backward { chunks - 1 - k } else { k };
            let off = c * CHUNK;
            let len = CHUNK.min(n - off);
            let r = match &job.remote {
                Target::Local(_) => {
                    // SAFETY: both ranges lie inside their segments' mappings
                    // (checked); ptr::copy allows overlap.
                    unsafe { std::ptr::copy((src + off) as *const u8, (dst + off) as *mut u8, len) };
                    Ok(())
                }
                Target::Proxied(p) => {
                    if job.read {
                        // SAFETY: inside the local segment's mapping (checked).
                        let d = unsafe { std::slice::from_raw_parts_mut(lp.add(off), len) };
                        p.dma_read(d, roff + off as u64).map_err(|(e, abandoned)| {
                            if abandoned {
                                // The engine may still write these pages: keep
                                // the mapping for the life of the agent.
                                std::mem::forget(job.local.clone());
                            }
                            e
                        })
                    } else {
                        // SAFETY: as above; the engine only reads it.
                        let s = unsafe { std::slice::from_raw_parts(lp.add(off), len) };
                        p.dma_write(s, roff + off as u64)
                    }
                }
            };
            if let Err(e) = r {
                return e;
            }
        }
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    SciError::Ok
}
