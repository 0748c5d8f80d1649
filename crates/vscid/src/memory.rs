//! Memory and notification objects the daemon hands out: sealed memfds for
//! segments and for arenas of interrupt slots, eventfds for sleeping
//! waiters.

use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use nix::sys::eventfd::{EfdFlags, EventFd};
use vsci_proto::intr::{self, Place, Shared};
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
    let rounded = size.max(4096).checked_next_power_of_two().ok_or(nix::Error::EINVAL)?;
    vsci_sys::memfd::create(&cname, rounded, vsci_sys::memfd::Seals::SIZE).map_err(nix_error)
}

fn nix_error(e: std::io::Error) -> nix::Error {
    nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Duplicate a descriptor so it can travel in a message after the registry
/// lock is released.
pub fn dup(fd: BorrowedFd<'_>) -> nix::Result<OwnedFd> {
    fd.try_clone_to_owned().map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)))
}

/// One memfd of interrupt slots of one kind, mapped whole by the node to set
/// slots up and mark them removed. Untouched slots cost nothing.
pub struct Chunk {
    memfd: OwnedFd,
    kind: IntrKind,
    /// The whole memfd, which the node only touches through the atomics of
    /// `Shared` and `zero`.
    map: vsci_sys::Mapping,
}

impl Chunk {
    fn new(name: &str, kind: IntrKind) -> nix::Result<Chunk> {
        let len = intr::chunk_bytes(kind);
        let memfd = sealed_memfd(name, len as u64)?;
        let map = vsci_sys::MapOptions::shared().map(memfd.as_fd(), len, 0).map_err(nix_error)?;
        Ok(Chunk { memfd, kind, map })
    }

    fn offset(&self, index: u32) -> usize {
        index as usize * intr::size_for(self.kind)
    }

    fn shared(&self, index: u32) -> &Shared {
        let p = self.map.ptr_at(self.offset(index), intr::size_for(self.kind)).expect("slot inside the chunk");
        // SAFETY: the slot lies inside the mapping (checked), is 64-byte
        // aligned (slot sizes are multiples of 64), and any bit pattern is
        // valid for the atomics in `Shared`; the mapping lives as long as
        // `self`.
        unsafe { &*(p as *const Shared) }
    }

    /// Zero `len` bytes at `off`: whole pages are punched out of the memfd
    /// (given back, and zero when next read), the rest stored word by word.
    /// Connectors of an earlier use may still write here: atomics keep that
    /// a race over values, never undefined behaviour.
    fn zero(&self, off: usize, len: usize) {
        let (first, end) = ((off + 4095) & !4095, (off + len) & !4095);
        let words = |from: usize, to: usize| {
            for w in (from..to).step_by(8) {
                let p = self.map.ptr_at(w, 8).expect("callers pass slot ranges");
                // SAFETY: `p` is 8-aligned (slots are 64-aligned, pages
                // 4096) and inside the mapping (checked).
                unsafe { &*(p as *const std::sync::atomic::AtomicU64) }.store(0, std::sync::atomic::Ordering::Relaxed);
            }
        };
        if first < end {
            words(off, first);
            let punched = nix::fcntl::fallocate(
                self.memfd.as_raw_fd(),
                nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
                first as libc::off_t,
                (end - first) as libc::off_t,
            );
            if punched.is_err() {
                words(first, end);
            }
            words(end, off + len);
        } else {
            words(off, off + len);
        }
    }
}

struct ChunkState {
    chunk: Arc<Chunk>,
    /// Free slots, oldest freed first: a slot is reused as late as possible.
    free: VecDeque<u32>,
    /// The generation each slot was last handed out under.
    generations: Vec<u32>,
    used: usize,
}

/// The interrupt slots of one creator and kind: chunks made as needed and
/// dropped once empty, so a creator's interrupts cost the node one memfd
/// per chunk instead of one each.
pub struct Arena {
    kind: IntrKind,
    name: String,
    chunks: Vec<Option<ChunkState>>,
}

/// An interrupt's slot and eventfd, as kept by the daemon.
pub struct IntrObjects {
    chunk: Arc<Chunk>,
    chunk_no: usize,
    index: u32,
    pub place: Place,
    pub eventfd: OwnedFd,
}

impl Arena {
    pub fn new(kind: IntrKind, name: String) -> Arena {
        Arena { kind, name, chunks: Vec::new() }
    }

    /// Hand out a slot, set up live under a new generation. `wake`: an
    /// eventfd the creator supplied (see `is_eventfd`), else a fresh one.
    pub fn alloc(&mut self, wake: Option<OwnedFd>) -> nix::Result<IntrObjects> {
        let eventfd: OwnedFd = match wake {
            Some(fd) => fd,
            None => EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?.into(),
        };
        let chunk_no = match self.chunks.iter().position(|c| c.as_ref().is_some_and(|c| !c.free.is_empty())) {
            Some(n) => n,
            None => {
                let n = self.chunks.iter().position(Option::is_none).unwrap_or(self.chunks.len());
                let chunk = Chunk::new(&format!("{}-{n}", self.name), self.kind)?;
                let slots = intr::slots_per_chunk(self.kind);
                let state = ChunkState {
                    chunk: Arc::new(chunk),
                    free: (0..slots as u32).collect(),
                    generations: vec![0; slots],
                    used: 0,
                };
                if n == self.chunks.len() {
                    self.chunks.push(None);
                }
                self.chunks[n] = Some(state);
                n
            }
        };
        let c = self.chunks[chunk_no].as_mut().expect("chosen");
        let index = c.free.pop_front().expect("chosen for a free slot");
        let g = &mut c.generations[index as usize];
        let reused = *g != 0;
        *g = g.wrapping_add(1).max(1);
        let generation = *g;
        c.used += 1;
        let off = c.chunk.offset(index);
        if reused {
            // Whatever an earlier use (or a stale connector since) left
            // there; a slot never handed out is still the memfd's zeros.
            c.chunk.zero(off, intr::size_for(self.kind));
        }
        c.chunk.shared(index).init(generation);
        Ok(IntrObjects {
            chunk: c.chunk.clone(),
            chunk_no,
            index,
            place: Place { kind: self.kind, offset: off as u64, generation },
            eventfd,
        })
    }

    /// Take a slot back: marked removed (waking any sleeper so it notices),
    /// zeroed, and queued for reuse; its chunk goes once no slot is used.
    pub fn release(&mut self, objects: IntrObjects) {
        objects.mark_removed();
        let Some(c) = self.chunks.get_mut(objects.chunk_no).and_then(Option::as_mut) else { return };
        if !Arc::ptr_eq(&c.chunk, &objects.chunk) {
            return;
        }
        let off = c.chunk.offset(objects.index);
        // The control words stay (state REMOVED) for connectors still
        // looking; the ring's pages go back now.
        if self.kind == IntrKind::Data {
            c.chunk.zero(off + intr::RING_OFFSET, intr::DATA_SLOT - intr::RING_OFFSET);
        }
        c.free.push_back(objects.index);
        c.used -= 1;
        if c.used == 0 {
            self.chunks[objects.chunk_no] = None;
        }
        while self.chunks.last().is_some_and(Option::is_none) {
            self.chunks.pop();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

impl IntrObjects {
    /// The memfd of the chunk holding the slot.
    pub fn memfd(&self) -> BorrowedFd<'_> {
        self.chunk.memfd.as_fd()
    }

    /// Mark the interrupt removed and wake any sleeper so it notices.
    fn mark_removed(&self) {
        let shared = self.chunk.shared(self.index);
        shared.state.store(intr::STATE_REMOVED, std::sync::atomic::Ordering::SeqCst);
        let _ = nix::unistd::write(self.eventfd.as_fd(), &1u64.to_ne_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;
    use vsci_proto::intr::SlotMap;

    fn slot_of(o: &IntrObjects) -> SlotMap {
        let size = nix::sys::stat::fstat(o.memfd().as_raw_fd()).unwrap().st_size as u64;
        SlotMap::new(o.memfd(), size, o.place).expect("map the slot")
    }

    #[test]
    fn slots_share_a_chunk_and_come_back_last_under_a_new_generation() {
        for kind in [IntrKind::Plain, IntrKind::Data] {
            let mut arena = Arena::new(kind, "test".into());
            let keep = arena.alloc(None).unwrap();
            let old = arena.alloc(None).unwrap();
            assert!(Arc::ptr_eq(&keep.chunk, &old.chunk), "one chunk for both");
            let (old_place, stale) = (old.place, slot_of(&old));
            assert!(stale.is_live());
            if kind == IntrKind::Data {
                stale.view().shared.try_enqueue(stale.view().ring.unwrap(), old_place.generation, b"before").unwrap();
            }
            arena.release(old);
            assert!(!stale.is_live(), "removed");
            // Every other free slot is handed out before the removed one.
            let n = intr::slots_per_chunk(kind);
            let fresh: Vec<IntrObjects> = (0..n - 1).map(|_| arena.alloc(None).unwrap()).collect();
            let reused = fresh.last().unwrap();
            assert_eq!(reused.place.offset, old_place.offset, "the removed slot comes back last");
            assert!(fresh[..n - 2].iter().all(|o| o.place.offset != old_place.offset));
            assert_eq!(reused.place.generation, old_place.generation + 1);
            assert!(!stale.is_live(), "an old connection does not match the new generation");
            let new = slot_of(reused);
            assert!(new.is_live());
            if kind == IntrKind::Data {
                let ring = new.view().ring.unwrap();
                assert_eq!(intr::next_len(ring, 0), None, "the old message went with the old use");
                assert_eq!(
                    stale.view().shared.try_enqueue(stale.view().ring.unwrap(), old_place.generation, b"late"),
                    Err(intr::EnqueueError::Removed)
                );
            } else {
                assert_eq!(new.view().shared.triggers.load(std::sync::atomic::Ordering::SeqCst), 0);
            }
            // The chunk is full: the next slot opens a second one.
            let next = arena.alloc(None).unwrap();
            assert!(!Arc::ptr_eq(&next.chunk, &keep.chunk));
            for o in fresh.into_iter().chain([keep, next]) {
                arena.release(o);
            }
            assert!(arena.is_empty(), "chunks go once empty");
        }
    }
}
