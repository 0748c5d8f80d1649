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
