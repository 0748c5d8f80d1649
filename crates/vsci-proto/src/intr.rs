//! Layout of the shared state page of an interrupt.
//!
//! Creator and connectors of an interrupt map the same small memfd. A
//! trigger is a store into it, plus an eventfd write only when the creator
//! is asleep, so a polling waiter sees a trigger within a cache-line
//! transfer and the daemon is never on the path.
//!
//! Everything here is shared with processes that may be hostile to each
//! other only within one interrupt: the consumer copies each message out
//! and validates its length before use, so a corrupt page can garble that
//! interrupt's messages but never make the consumer read out of bounds.

use std::sync::atomic::{AtomicU32, AtomicU64};

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
    /// Vyukov bounded-queue sequence number.
    pub seq: AtomicU64,
    pub len: AtomicU32,
    pub _pad: u32,
    pub data: [u8; DATA_MAX],
}

#[repr(C)]
pub struct Shared {
    pub magic: AtomicU32,
    pub state: AtomicU32,
    /// Creator threads currently asleep on the eventfd.
    pub sleepers: AtomicU32,
    pub _pad0: u32,
    /// Plain interrupts: total triggers ever made.
    pub triggers: AtomicU64,
    _pad1: [u64; 5],
    /// Data interrupts: next slot to fill (producers).
    pub head: AtomicU64,
    _pad2: [u64; 7],
    /// Data interrupts: next slot to drain (creator only).
    pub tail: AtomicU64,
    _pad3: [u64; 7],
    pub slots: [Slot; RING_SLOTS],
}

/// Bytes to allocate for the shared page(s), rounded to whole pages.
pub const SHARED_SIZE: usize = (std::mem::size_of::<Shared>() + 4095) & !4095;

/// Take the next complete data message into `buf` (at least [`DATA_MAX`]
/// bytes) as the single consumer whose position is `tail`; returns its
/// length. The length is clamped and the bytes copied out before use: every
/// producer can write the page.
pub fn try_dequeue(shared: &Shared, tail: &mut u64, buf: &mut [u8; DATA_MAX]) -> Option<usize> {
    use std::sync::atomic::Ordering;
    let pos = *tail;
    let slot = &shared.slots[(pos as usize) % RING_SLOTS];
    if slot.seq.load(Ordering::Acquire) != pos + 1 {
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
    slot.seq.store(pos + RING_SLOTS as u64, Ordering::Release);
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
    /// Lay out a zero-filled page: empty queue, live, magic last (readers
    /// check the magic before trusting the rest).
    pub fn init(&self) {
        use std::sync::atomic::Ordering::*;
        for (i, slot) in self.slots.iter().enumerate() {
            slot.seq.store(i as u64, Relaxed);
        }
        self.state.store(STATE_LIVE, Relaxed);
        self.magic.store(MAGIC, Release);
    }

    pub fn is_live(&self) -> bool {
        self.state.load(std::sync::atomic::Ordering::Acquire) == STATE_LIVE
    }

    /// Count one trigger. Returns whether a sleeper must be woken.
    pub fn trigger(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.triggers.fetch_add(1, SeqCst);
        self.sleepers.load(SeqCst) > 0
    }

    /// Try once to queue a data message (a Vyukov bounded-queue enqueue).
    /// Returns whether a sleeper must be woken.
    pub fn try_enqueue(&self, data: &[u8]) -> Result<bool, EnqueueError> {
        use std::sync::atomic::Ordering::*;
        if data.len() > DATA_MAX {
            return Err(EnqueueError::TooLong);
        }
        if !self.is_live() {
            return Err(EnqueueError::Removed);
        }
        let mut pos = self.head.load(Relaxed);
        let slot = loop {
            let slot = &self.slots[(pos as usize) % RING_SLOTS];
            let seq = slot.seq.load(Acquire);
            let diff = seq as i64 - pos as i64;
            if diff == 0 {
                match self.head.compare_exchange_weak(pos, pos + 1, AcqRel, Relaxed) {
                    Ok(_) => break slot,
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
        slot.seq.store(pos + 1, Release);
        std::sync::atomic::fence(SeqCst);
        Ok(self.sleepers.load(SeqCst) > 0)
    }
}
