//! The control channel between `libsisci` in a guest and the guest's host
//! side (the agent in `vsci vm run`), through the private control region of
//! the guest's ivshmem-doorbell device.
//!
//! Layout of the region (guest/driver/vsci_guest.h says the same for C):
//! a header page (magic, window-in-use words, session state words), then one
//! [`SESSION_SIZE`] area per session. A session is one guest program's
//! connection: the driver hands it out on `VSCI_IOC_SESSION` and marks it
//! closing when the program's file goes away, so a killed program is
//! cleaned up like a killed host process.
//!
//! A session area holds two byte rings: guest → host records are
//! postcard-encoded [`GuestMsg`]s: a request of the node's protocol
//! ([`Request`], exactly what a host client sends on its socket, which the
//! host side relays to vscid) or one only the host side answers
//! ([`GuestRequest`]: the guest's maps of other nodes' segments, and DMA by
//! API remoting); host → guest records are [`AgentRecord`]s: a
//! [`ServerMsg`](crate::ServerMsg) plus [`Attachment`]s that stand for the
//! descriptors a host client would have received, or the end of a DMA
//! transfer the host side ran ([`ToGuest::DmaDone`]). vscid never sees the
//! guest-only messages: they are not part of its protocol.
//!
//! The host side reaches every other node's segment for the guest: a
//! `Connected` reply for a segment of another node (its `node_id` is not
//! the guest's node) carries no `remote` (the guest has no RMA engine),
//! and its window is a *staging window* that [`GuestRequest::FetchRemote`]
//! fills from the owner and [`GuestRequest::ShipRemote`] ships from.
//!
//! Both sides treat everything the other side wrote as untrusted: a record
//! is copied out of the ring, then its length and contents are checked. The
//! host never trusts a guest's head pointer beyond the ring's capacity.

use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

use crate::{ObjId, Request, SciError};

/// Host-written at offset 0 once the region is laid out ("VSCG").
pub const MAGIC: u32 = 0x4743_5356;
pub const MAGIC_OFFSET: usize = 0;
/// Layout version, host-written at offset 4.
pub const VERSION: u32 = 1;
pub const VERSION_OFFSET: usize = 4;
/// Window-in-use words, one per PCI slot on bus 0 (driver-written).
pub const WINDOWS_OFFSET: usize = 0x100;
pub const MAX_WINDOWS: usize = 32;
/// Session state words (driver: FREE→OPEN→CLOSING; host: CLOSING→FREE).
pub const SESSIONS_OFFSET: usize = 0x200;
pub const MAX_SESSIONS: usize = 64;
pub const SESSION_SIZE: usize = 0x10000;
/// Smallest control region (a power of two, as QEMU wants BARs).
pub const REGION_SIZE: usize = 8 << 20;

pub const SESSION_FREE: u32 = 0;
pub const SESSION_OPEN: u32 = 1;
pub const SESSION_CLOSING: u32 = 2;

/// Vector 0 carries control traffic both ways: guests ring the host's
/// vector 0 after writing requests (and the driver after changing header
/// words); the host raises the guest's vector 0 after writing replies.
pub const CTL_VECTOR: u16 = 0;

/// Offset of session `i`'s area in the region.
pub const fn session_offset(i: usize) -> usize {
    SESSION_SIZE * (i + 1)
}

/// Session state word: (generation << 8) | state.
pub fn split_state(word: u32) -> (u32, u32) {
    (word >> 8, word & 0xff)
}

// Inside a session area: ring headers on separate cache lines, then data.
// Public so that a test or fuzz target can write a ring as a hostile guest
// would.
pub const TO_HOST_HEAD: usize = 0x00;
pub const TO_HOST_TAIL: usize = 0x40;
pub const TO_GUEST_HEAD: usize = 0x80;
pub const TO_GUEST_TAIL: usize = 0xc0;
pub const TO_HOST_DATA: usize = 0x1000;
pub const TO_HOST_CAP: usize = 0x4000;
pub const TO_GUEST_DATA: usize = TO_HOST_DATA + TO_HOST_CAP;
pub const TO_GUEST_CAP: usize = SESSION_SIZE - TO_GUEST_DATA;

/// Largest record either way: control messages are small; a bigger one is a
/// protocol violation.
pub const MAX_RECORD: usize = 4096;

/// A descriptor a host client would have received, as a guest can use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Attachment {
    /// A memfd, hot-plugged as an ivshmem-plain window at this PCI slot
    /// (`/dev/vsci-winS`); `size` is its BAR size.
    Window { slot: u8, size: u64 },
    /// An eventfd that wakes a waiter: one of the guest's MSI-X vectors.
    Vector(u16),
    /// An eventfd a triggerer writes: ring this (peer, vector) doorbell.
    Doorbell { peer: u16, vector: u16 },
}

/// Largest [`GuestRequest::FetchRemote`] (a guest fetches a page at a
/// time; fresh reads of more are split).
pub const MAX_REMOTE_FETCH: u64 = 1 << 20;
/// Most runs in one [`GuestRequest::ShipRemote`]: with varint offsets the
/// record stays well inside [`MAX_RECORD`]. A shipment with more is sent as
/// several, in ascending order, each delivered before the next goes.
pub const MAX_SHIP_RUNS: usize = 200;

/// Guest → host: one record of the guest → host ring.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GuestMsg {
    /// Echoed in the reply, as a [`ClientMsg`](crate::ClientMsg)'s tag is.
    pub tag: u64,
    pub req: GuestRequest,
}

/// What a guest program asks its host side. Each is answered with a
/// [`ServerMsg::Reply`](crate::ServerMsg::Reply) carrying the same tag
/// (`Done` for the guest-only requests).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum GuestRequest {
    /// A request of the node's protocol, relayed to vscid on the program's
    /// own connection (the first must be `Hello`; `CreateInterruptWake`,
    /// which hands vscid an eventfd, is the host side's alone).
    Node(Request),
    /// Read `[offset, offset+len)` of the segment of connection `conn` (of
    /// another node) from its owner into its staging window, so that the
    /// guest can copy it out. At most [`MAX_REMOTE_FETCH`] bytes.
    FetchRemote { conn: ObjId, offset: u64, len: u64 },
    /// Write these `(offset, len)` runs of the staging window (ascending,
    /// not overlapping, at most [`MAX_SHIP_RUNS`]) to the owner, the
    /// highest word last; `Done` once all of it is visible there.
    ShipRemote { conn: ObjId, runs: Vec<(u64, u64)> },
    /// Run a DMA transfer on the node's engine between the program's local
    /// segment `local` and the segment of connection `remote`. `queue` is
    /// the program's name for its queue; the end comes as
    /// [`ToGuest::DmaDone`] (an interrupt in the guest). Entries are (size,
    /// local offset, remote offset). `Done` once accepted.
    DmaStart { queue: u64, local: ObjId, remote: ObjId, entries: Vec<(u64, u64, u64)>, read: bool },
    /// Stop queue `queue`'s transfer (it ends `Cancelled`).
    DmaAbort { queue: u64 },
}

/// Host → guest: what a record says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToGuest {
    /// A postcard-encoded [`ServerMsg`](crate::ServerMsg), as vscid sent
    /// it, its descriptors replaced by the record's attachments (and, for
    /// another node's segment, its `remote` kept by the host side).
    Node(Vec<u8>),
    /// The DMA transfer the program started on `queue` ended.
    DmaDone { queue: u64, status: SciError },
}

/// Host → guest: one message and what replaces its descriptors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentRecord {
    pub msg: ToGuest,
    pub attachments: Vec<Attachment>,
}

/// Which half of a session a side writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Guest,
    Host,
}

/// Why a ring refused a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// Not enough room now (the reader is behind).
    Full,
    /// The record is longer than [`MAX_RECORD`].
    TooLong,
    /// The other side wrote indices or lengths that cannot be right.
    Corrupt,
}

/// One side's view of a session area mapped at `base`.
///
/// Indices are free-running byte counts (u32, wrapping); a record is a
/// little-endian u32 length followed by its bytes, split at the end of the
/// ring. The producer publishes with a release store of its head; the
/// consumer reads the head with acquire, copies, then releases its tail.
pub struct Session {
    base: *mut u8,
    role: Role,
}

// SAFETY: `Session` only does atomic accesses to its header words and
// byte copies to/from ring slots it owns at that moment (by the protocol);
// the other side may scribble anything, which every reader tolerates.
unsafe impl Send for Session {}
// SAFETY: see Send; callers serialise producers and consumers themselves.
unsafe impl Sync for Session {}

impl Session {
    /// # Safety
    /// `base` must point to a mapping of at least [`SESSION_SIZE`] bytes
    /// that stays mapped as long as the `Session` is used, 64-byte aligned.
    pub unsafe fn new(base: *mut u8, role: Role) -> Session {
        Session { base, role }
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        // SAFETY: off < SESSION_SIZE and 4-aligned (the constants above);
        // the mapping outlives self (see `new`); AtomicU32 has the layout of
        // u32 and any bit pattern is valid.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    fn out_ring(&self) -> (usize, usize, usize, usize) {
        match self.role {
            Role::Guest => (TO_HOST_HEAD, TO_HOST_TAIL, TO_HOST_DATA, TO_HOST_CAP),
            Role::Host => (TO_GUEST_HEAD, TO_GUEST_TAIL, TO_GUEST_DATA, TO_GUEST_CAP),
        }
    }

    fn in_ring(&self) -> (usize, usize, usize, usize) {
        match self.role {
            Role::Guest => (TO_GUEST_HEAD, TO_GUEST_TAIL, TO_GUEST_DATA, TO_GUEST_CAP),
            Role::Host => (TO_HOST_HEAD, TO_HOST_TAIL, TO_HOST_DATA, TO_HOST_CAP),
        }
    }

    /// Reset both rings (the host does this when a session opens).
    pub fn reset(&self) {
        for off in [TO_HOST_HEAD, TO_HOST_TAIL, TO_GUEST_HEAD, TO_GUEST_TAIL] {
            self.word(off).store(0, Ordering::SeqCst);
        }
    }

    fn copy_in(&self, data: usize, cap: usize, pos: u32, src: &[u8]) {
        let start = pos as usize % cap;
        let first = src.len().min(cap - start);
        // SAFETY: both ranges lie inside the ring's data area (start < cap,
        // first <= cap - start, the rest < cap), which lies inside the
        // mapping; the consumer does not read these bytes until the head is
        // published after this copy.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(data + start), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), self.base.add(data), src.len() - first);
        }
    }

    fn copy_out(&self, data: usize, cap: usize, pos: u32, dst: &mut [u8]) {
        let start = pos as usize % cap;
        let first = dst.len().min(cap - start);
        // SAFETY: as in copy_in; a hostile producer may change these bytes
        // while we copy, which yields garbage that decoding then rejects,
        // never an out-of-bounds access.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(data + start), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(self.base.add(data), dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }

    /// Append one record; the caller rings the other side afterwards.
    pub fn send(&self, rec: &[u8]) -> Result<(), RingError> {
        if rec.len() > MAX_RECORD {
            return Err(RingError::TooLong);
        }
        let (h, t, data, cap) = self.out_ring();
        let head = self.word(h).load(Ordering::Relaxed);
        let tail = self.word(t).load(Ordering::Acquire);
        let used = head.wrapping_sub(tail) as usize;
        if used > cap {
            return Err(RingError::Corrupt);
        }
        if cap - used < 4 + rec.len() {
            return Err(RingError::Full);
        }
        self.copy_in(data, cap, head, &(rec.len() as u32).to_le_bytes());
        self.copy_in(data, cap, head.wrapping_add(4), rec);
        self.word(h).store(head.wrapping_add(4 + rec.len() as u32), Ordering::Release);
        Ok(())
    }

    /// Take the next record, if any.
    pub fn recv(&self) -> Result<Option<Vec<u8>>, RingError> {
        let (h, t, data, cap) = self.in_ring();
        let head = self.word(h).load(Ordering::Acquire);
        let tail = self.word(t).load(Ordering::Relaxed);
        let avail = head.wrapping_sub(tail) as usize;
        if avail == 0 {
            return Ok(None);
        }
        if avail > cap || avail < 4 {
            return Err(RingError::Corrupt);
        }
        let mut len = [0u8; 4];
        self.copy_out(data, cap, tail, &mut len);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_RECORD || 4 + len > avail {
            return Err(RingError::Corrupt);
        }
        let mut rec = vec![0u8; len];
        self.copy_out(data, cap, tail.wrapping_add(4), &mut rec);
        self.word(t).store(tail.wrapping_add(4 + len as u32), Ordering::Release);
        Ok(Some(rec))
    }

    /// True if a record is waiting for us.
    pub fn pending(&self) -> bool {
        let (h, t, ..) = self.in_ring();
        self.word(h).load(Ordering::Acquire) != self.word(t).load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(4096))]
    struct Area([u8; SESSION_SIZE]);

    #[test]
    fn records_cross_both_ways_and_wrap() {
        let mut area = Box::new(Area([0; SESSION_SIZE]));
        let p = area.0.as_mut_ptr();
        // SAFETY: the box outlives both views and is SESSION_SIZE bytes.
        let (g, h) = unsafe { (Session::new(p, Role::Guest), Session::new(p, Role::Host)) };
        h.reset();
        for i in 0..5000u32 {
            let rec: Vec<u8> = (0..(i % 700) as usize).map(|k| (k as u32 ^ i) as u8).collect();
            g.send(&rec).unwrap();
            assert_eq!(h.recv().unwrap().unwrap(), rec);
            h.send(&rec).unwrap();
            assert_eq!(g.recv().unwrap().unwrap(), rec);
        }
        assert_eq!(h.recv().unwrap(), None);
    }

    #[test]
    fn full_and_corrupt_rings_are_reported() {
        let mut area = Box::new(Area([0; SESSION_SIZE]));
        let p = area.0.as_mut_ptr();
        // SAFETY: as above.
        let (g, h) = unsafe { (Session::new(p, Role::Guest), Session::new(p, Role::Host)) };
        let big = vec![7u8; MAX_RECORD];
        assert_eq!(g.send(&vec![0; MAX_RECORD + 1]), Err(RingError::TooLong));
        while g.send(&big).is_ok() {}
        assert_eq!(g.send(&big), Err(RingError::Full));
        // a guest that lies about its head
        g.word(TO_HOST_HEAD).store(0x10_0000, Ordering::SeqCst);
        assert_eq!(h.recv(), Err(RingError::Corrupt));
        // a length word beyond what is there
        g.word(TO_HOST_HEAD).store(8, Ordering::SeqCst);
        g.word(TO_HOST_TAIL).store(0, Ordering::SeqCst);
        area.0[TO_HOST_DATA..TO_HOST_DATA + 4].copy_from_slice(&5000u32.to_le_bytes());
        assert_eq!(h.recv(), Err(RingError::Corrupt));
    }
}
