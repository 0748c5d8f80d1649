//! Layout of an interrupt's shared state, and of the arenas that pack it.
//!
//! Creator and connectors of an interrupt map the same few bytes of a
//! memfd. A trigger is a store into them, plus an eventfd write only when
//! the creator is asleep, so a polling waiter sees a trigger within a
//! cache-line transfer and the daemon is never on the path.
//!
//! A plain interrupt is a slot of [`PLAIN_SLOT`] bytes of control words
//! ([`Shared`]); a data interrupt's slot adds the message ring ([`Ring`],
//! 64 × 1 KiB) after them. The node packs the slots of one creator's
//! interrupts of one kind into arena chunks ([`CHUNK_BYTES`], one memfd
//! each), so an interrupt costs the node a slot, not a memfd and a page.
//! The ring needs no initialisation, so an idle data interrupt costs its
//! control words, and the ring's pages are allocated as messages pass.
//!
//! Everything here is shared with processes that may be hostile to each
//! other only within one creator's interrupts of one kind (whoever may
//! connect to one of them may connect to all: access is decided by the
//! creator's uid and gid): the consumer copies each message out and
//! validates its length before use, so a corrupt slot can garble that
//! interrupt's messages but never make the consumer read out of bounds. A
//! slot is reused only under a new [`Shared::generation`], so a connection
//! to a removed interrupt cannot reach the one that takes its slot.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::IntrKind;

/// "VSCI" in little-endian ASCII.
pub const MAGIC: u32 = 0x4943_5356;
/// Interrupt is live.
pub const STATE_LIVE: u32 = 1;
/// The creator removed it; triggers fail with `SCI_ERR_NOT_CONNECTED`.
pub const STATE_REMOVED: u32 = 2;

/// Payload bytes per data-interrupt message.
pub const DATA_MAX: usize = 1024;
/// Queue depth for data interrupts (power of two).
pub const RING_SLOTS: usize = 64;

#[repr(C)]
pub struct Slot {
    /// Vyukov bounded-queue sequence number, stored minus the slot's index
    /// (see [`Slot::seq`]).
    seq_rel: AtomicU64,
    pub len: AtomicU32,
    pub _pad: u32,
    pub data: [u8; DATA_MAX],
}

impl Slot {
    /// The slot's sequence number. It is stored minus the slot's index so
    /// that a zero-filled page already is an empty queue (slot `i` starts
    /// at sequence `i`): nobody writes the ring at creation, and its pages
    /// cost memory only once messages pass through them.
    pub fn seq(&self, index: usize, order: Ordering) -> u64 {
        self.seq_rel.load(order).wrapping_add(index as u64)
    }

    fn set_seq(&self, index: usize, seq: u64, order: Ordering) {
        self.seq_rel.store(seq.wrapping_sub(index as u64), order);
    }
}

/// The control words of an interrupt: all a plain interrupt has.
#[repr(C)]
pub struct Shared {
    pub magic: AtomicU32,
    pub state: AtomicU32,
    /// Creator threads currently asleep on the eventfd.
    pub sleepers: AtomicU32,
    /// Which use of the slot this is: set by the node when it hands the
    /// slot out, checked by every triggerer against the one it was given.
    pub generation: AtomicU32,
    /// Plain interrupts: total triggers ever made.
    pub triggers: AtomicU64,
    _pad1: [u64; 5],
    /// Data interrupts: next slot to fill (producers).
    pub head: AtomicU64,
    _pad2: [u64; 7],
    /// Data interrupts: next slot to drain (creator only).
    pub tail: AtomicU64,
    _pad3: [u64; 7],
}

/// A data interrupt's message queue, at [`RING_OFFSET`] after the control
/// words.
#[repr(C)]
pub struct Ring {
    pub slots: [Slot; RING_SLOTS],
}

/// Where the ring starts (a cache-line multiple past the control words).
pub const RING_OFFSET: usize = (std::mem::size_of::<Shared>() + 63) & !63;
/// Bytes of a plain interrupt's slot: its control words, cache-line padded.
pub const PLAIN_SLOT: usize = RING_OFFSET;
/// Bytes of a data interrupt's slot: control words and ring. Only the
/// control words are written when it is handed out (see [`Slot::seq`]).
pub const DATA_SLOT: usize = (RING_OFFSET + std::mem::size_of::<Ring>() + 63) & !63;
/// Bytes of a plain interrupt's own page, for memory holding one interrupt
/// alone (a guest's relay page).
pub const PLAIN_SIZE: usize = (PLAIN_SLOT + 4095) & !4095;
/// Bytes of a data interrupt's own pages, for memory holding one alone.
pub const DATA_SIZE: usize = (DATA_SLOT + 4095) & !4095;

/// Bytes of one arena chunk of interrupts of `kind`: a power of two, as a
/// guest sees a chunk through a PCI BAR (256 plain or 125 data interrupts).
pub fn chunk_bytes(kind: IntrKind) -> usize {
    match kind {
        IntrKind::Plain => 64 << 10,
        IntrKind::Data => 8 << 20,
    }
}

/// Bytes an interrupt of `kind` needs mapped: its slot.
pub fn size_for(kind: IntrKind) -> usize {
    match kind {
        IntrKind::Plain => PLAIN_SLOT,
        IntrKind::Data => DATA_SLOT,
    }
}

/// Slots of `kind` in one arena chunk.
pub fn slots_per_chunk(kind: IntrKind) -> usize {
    chunk_bytes(kind) / size_for(kind)
}

/// Where an interrupt's slot is in the memfd that comes with it, which
/// kind of slot it is, and which use of the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Place {
    pub kind: IntrKind,
    pub offset: u64,
    pub generation: u32,
}

impl Place {
    /// Check a place received for memory of `size` bytes: the slot must
    /// lie inside and be cache-line aligned (the atomics in it must be
    /// aligned).
    pub fn check(&self, size: u64) -> bool {
        self.offset.is_multiple_of(64)
            && self.offset.checked_add(size_for(self.kind) as u64).is_some_and(|end| end <= size)
            && self.generation != 0
    }

    /// The page-aligned range to map to reach the slot, and the slot's
    /// offset inside it.
    pub fn pages(&self) -> (u64, usize, usize) {
        let start = self.offset & !4095;
        let inner = (self.offset - start) as usize;
        let len = (inner + size_for(self.kind) + 4095) & !4095;
        (start, len, inner)
    }
}

/// An interrupt's control words and, for a data interrupt, its ring, as
/// seen through one mapping.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub shared: &'a Shared,
    pub ring: Option<&'a Ring>,
}

impl<'a> View<'a> {
    /// View the mapping at `base`, `len` bytes long: the ring is there when
    /// the mapping is long enough for one.
    ///
    /// # Safety
    /// `base` must be page aligned and point to a mapping of at least
    /// `len >= PLAIN_SLOT` readable and writable bytes that outlives `'a`.
    /// Any bit pattern is valid for the atomics and bytes in it, so what
    /// other processes write there cannot make this unsound.
    pub unsafe fn new(base: *const u8, len: usize) -> View<'a> {
        assert!(len >= PLAIN_SLOT && (base as usize).is_multiple_of(64));
        View {
            shared: &*(base as *const Shared),
            ring: (len >= DATA_SLOT).then(|| &*(base.add(RING_OFFSET) as *const Ring)),
        }
    }
}

/// A mapping of one interrupt's slot out of the memfd (or guest window)
/// that holds it: the pages around the slot, never the whole chunk.
pub struct SlotMap {
    map: vsci_sys::Mapping,
    inner: usize,
    kind: IntrKind,
    generation: u32,
}

impl SlotMap {
    /// Map the slot at `place` in `fd`, whose memory is `size` bytes (the
    /// caller measured it: a memfd's size or a guest window's). Fails if
    /// the place does not fit or the slot does not hold that use of it.
    pub fn new(fd: std::os::fd::BorrowedFd<'_>, size: u64, place: Place) -> Result<SlotMap, nix::Error> {
        if !place.check(size) {
            return Err(nix::Error::EINVAL);
        }
        let kind = place.kind;
        let (start, len, inner) = place.pages();
        // A shared mapping of `len` bytes at a page-aligned offset of memory
        // the place was checked to lie in. The memory past `size` (the last
        // page's tail) is inside the file, whose size is a page multiple.
        let map = vsci_sys::MapOptions::shared()
            .map(fd, len, start)
            .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let m = SlotMap { map, inner, kind, generation: place.generation };
        let shared = m.view().shared;
        if shared.magic.load(Ordering::Acquire) != MAGIC
            || shared.generation.load(Ordering::Acquire) != place.generation
        {
            return Err(nix::Error::ESTALE);
        }
        Ok(m)
    }

    pub fn view(&self) -> View<'_> {
        let p =
            self.map.ptr_at(self.inner, size_for(self.kind)).expect("the slot lies inside the mapping (Place::pages)");
        // SAFETY: `size_for(kind)` bytes at `p` lie inside the mapping
        // (checked), the slot is 64-byte aligned (`Place::check`), and the
        // mapping lives as long as `self`.
        unsafe { View::new(p, size_for(self.kind)) }
    }

    /// The use of the slot this mapping was made for.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Live, and still the interrupt it was mapped for.
    pub fn is_live(&self) -> bool {
        self.view().shared.is_live(self.generation)
    }
}

/// Length of the next complete message for the consumer at `tail`,
/// clamped to [`DATA_MAX`] (a producer may have written any length).
pub fn next_len(ring: &Ring, tail: u64) -> Option<usize> {
    let i = (tail as usize) % RING_SLOTS;
    let slot = &ring.slots[i];
    if slot.seq(i, Ordering::Acquire) != tail + 1 {
        return None;
    }
    Some((slot.len.load(Ordering::Relaxed) as usize).min(DATA_MAX))
}

/// Take the next complete data message into `buf` (at least [`DATA_MAX`]
/// bytes) as the single consumer whose position is `tail`; returns its
/// length. The length is clamped and the bytes copied out before use: every
/// producer can write the page.
pub fn try_dequeue(shared: &Shared, ring: &Ring, tail: &mut u64, buf: &mut [u8; DATA_MAX]) -> Option<usize> {
    let pos = *tail;
    let i = (pos as usize) % RING_SLOTS;
    let slot = &ring.slots[i];
    if slot.seq(i, Ordering::Acquire) != pos + 1 {
        return None;
    }
    let len = (slot.len.load(Ordering::Relaxed) as usize).min(DATA_MAX);
    // SAFETY: `slot.data` is DATA_MAX bytes and len <= DATA_MAX; the
    // producer published `seq` after writing (Release/Acquire). A hostile
    // producer still writing garbles bytes, never bounds; volatile reads
    // keep the compiler from assuming the bytes are stable.
    unsafe {
        let src = slot.data.as_ptr();
        for (i, b) in buf.iter_mut().take(len).enumerate() {
            *b = std::ptr::read_volatile(src.add(i));
        }
    }
    slot.set_seq(i, pos + RING_SLOTS as u64, Ordering::Release);
    *tail = pos + 1;
    shared.tail.store(pos + 1, Ordering::Relaxed);
    Some(len)
}

/// Why a data message could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueError {
    /// Longer than [`DATA_MAX`].
    TooLong,
    /// Every slot is taken (the creator is not draining).
    Full,
    /// The interrupt was removed.
    Removed,
}

impl Shared {
    /// Lay out a zero-filled slot as use `generation` (never 0) of it:
    /// live, magic last (readers check the magic before trusting the
    /// rest). A zero-filled ring is already an empty queue.
    pub fn init(&self, generation: u32) {
        use std::sync::atomic::Ordering::*;
        self.generation.store(generation, Relaxed);
        self.state.store(STATE_LIVE, Relaxed);
        self.magic.store(MAGIC, Release);
    }

    /// Live, and still the use of the slot that `generation` names.
    pub fn is_live(&self, generation: u32) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        self.state.load(Acquire) == STATE_LIVE && self.generation.load(Acquire) == generation
    }

    /// Count one trigger. Returns whether a sleeper must be woken.
    pub fn trigger(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.triggers.fetch_add(1, SeqCst);
        self.sleepers.load(SeqCst) > 0
    }

    /// Try once to queue a data message (a Vyukov bounded-queue enqueue).
    /// Returns whether a sleeper must be woken.
    pub fn try_enqueue(&self, ring: &Ring, generation: u32, data: &[u8]) -> Result<bool, EnqueueError> {
        use std::sync::atomic::Ordering::*;
        if data.len() > DATA_MAX {
            return Err(EnqueueError::TooLong);
        }
        if !self.is_live(generation) {
            return Err(EnqueueError::Removed);
        }
        let mut pos = self.head.load(Relaxed);
        let (slot, index) = loop {
            let index = (pos as usize) % RING_SLOTS;
            let slot = &ring.slots[index];
            let seq = slot.seq(index, Acquire);
            let diff = seq.wrapping_sub(pos) as i64;
            if diff == 0 {
                match self.head.compare_exchange_weak(pos, pos + 1, AcqRel, Relaxed) {
                    Ok(_) => break (slot, index),
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                return Err(EnqueueError::Full);
            } else {
                pos = self.head.load(Relaxed);
            }
        };
        // SAFETY: we own this slot until we publish `seq`; data.len() <=
        // DATA_MAX keeps the copy inside `slot.data`. The page is shared
        // memory, so we write through a raw pointer, never a &mut.
        unsafe {
            let dst = slot.data.as_ptr() as *mut u8;
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
        }
        slot.len.store(data.len() as u32, Relaxed);
        slot.set_seq(index, pos + 1, Release);
        std::sync::atomic::fence(SeqCst);
        Ok(self.sleepers.load(SeqCst) > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zero-filled, page-aligned memory of a data interrupt's size, as a
    /// fresh memfd gives it.
    struct Pages(*mut u8);

    impl Pages {
        fn new() -> Pages {
            let layout = std::alloc::Layout::from_size_align(DATA_SIZE, 4096).unwrap();
            // SAFETY: a non-zero size and a valid alignment.
            Pages(unsafe { std::alloc::alloc_zeroed(layout) })
        }

        fn view(&self) -> View<'_> {
            // SAFETY: DATA_SIZE bytes, page aligned, alive as long as self.
            unsafe { View::new(self.0, DATA_SIZE) }
        }
    }

    impl Drop for Pages {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { std::alloc::dealloc(self.0, std::alloc::Layout::from_size_align(DATA_SIZE, 4096).unwrap()) }
        }
    }

    #[test]
    fn zero_filled_ring_is_an_empty_queue_that_wraps_and_fills() {
        assert_eq!(PLAIN_SIZE, 4096, "a plain interrupt alone is one page");
        assert!(PLAIN_SLOT <= 256 && slots_per_chunk(IntrKind::Plain) >= 256);
        assert!(slots_per_chunk(IntrKind::Data) >= 64);
        let p = Pages::new();
        let v = p.view();
        v.shared.init(1);
        let ring = v.ring.expect("long enough for a ring");
        let mut tail = 0u64;
        let mut buf = [0u8; DATA_MAX];
        assert_eq!(try_dequeue(v.shared, ring, &mut tail, &mut buf), None);
        // Several times round the ring, one message at a time.
        for i in 0..(3 * RING_SLOTS as u32 + 5) {
            let msg = i.to_le_bytes();
            v.shared.try_enqueue(ring, 1, &msg[..(i as usize % 4) + 1]).unwrap();
            assert_eq!(next_len(ring, tail), Some((i as usize % 4) + 1));
            let n = try_dequeue(v.shared, ring, &mut tail, &mut buf).unwrap();
            assert_eq!(&buf[..n], &msg[..n]);
        }
        // Full after RING_SLOTS messages nobody takes, in order after that.
        for i in 0..RING_SLOTS as u8 {
            v.shared.try_enqueue(ring, 1, &[i]).unwrap();
        }
        assert_eq!(v.shared.try_enqueue(ring, 1, &[0]), Err(EnqueueError::Full));
        for i in 0..RING_SLOTS as u8 {
            assert_eq!(try_dequeue(v.shared, ring, &mut tail, &mut buf), Some(1));
            assert_eq!(buf[0], i);
        }
        assert_eq!(try_dequeue(v.shared, ring, &mut tail, &mut buf), None);
    }

    #[test]
    fn plain_sized_mapping_has_no_ring() {
        let p = Pages::new();
        // SAFETY: the first PLAIN_SLOT bytes of a live, aligned allocation.
        let v = unsafe { View::new(p.0, PLAIN_SLOT) };
        assert!(v.ring.is_none());
    }

    #[test]
    fn a_reused_slot_refuses_its_old_generation() {
        let p = Pages::new();
        let v = p.view();
        v.shared.init(7);
        let ring = v.ring.expect("ring");
        assert!(v.shared.is_live(7));
        v.shared.init(8);
        assert!(!v.shared.is_live(7));
        assert_eq!(v.shared.try_enqueue(ring, 7, &[1]), Err(EnqueueError::Removed));
        assert!(v.shared.try_enqueue(ring, 8, &[1]).is_ok());
    }

    #[test]
    fn places_are_checked_against_the_memory() {
        let chunk = chunk_bytes(IntrKind::Data) as u64;
        let last = (slots_per_chunk(IntrKind::Data) as u64 - 1) * DATA_SLOT as u64;
        let data = |offset, generation| Place { kind: IntrKind::Data, offset, generation };
        let plain = |offset, generation| Place { kind: IntrKind::Plain, offset, generation };
        assert!(data(last, 1).check(chunk));
        assert!(!data(last + DATA_SLOT as u64, 1).check(chunk));
        assert!(!plain(8, 1).check(4096), "misaligned");
        assert!(!plain(0, 0).check(4096), "generation 0 is never handed out");
        assert!(!plain(u64::MAX - 63, 1).check(u64::MAX));
        let (start, len, inner) = plain(4096 + 192, 1).pages();
        assert_eq!((start, len, inner), (4096, 4096, 192));
        let (start, len, inner) = data(DATA_SLOT as u64, 1).pages();
        assert_eq!(start, DATA_SLOT as u64 & !4095);
        assert!(inner + DATA_SLOT <= len && len % 4096 == 0);
    }
}
