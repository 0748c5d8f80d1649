//! Reaching other nodes on behalf of a guest, which cannot use the RMA
//! engine itself. The agent keeps one of these per remote segment or
//! interrupt a guest program connected to, and reaches the owner with
//! `vsci_rma` directly, as a host program's library does.
//!
//! A segment: vscid hands out a shadow memfd, as for a host process; the
//! agent plugs it into the guest as a window, which the guest's libsisci
//! uses only to stage bytes: its maps trap accesses as a host process's do
//! (QEMU's mapping of the window would tell nobody about a store), and a
//! [`ProxiedSegment`] moves what it is asked between the window and the
//! owner (`GuestRequest::FetchRemote`, `GuestRequest::ShipRemote`).
//!
//! The guest writes the window whenever it likes, through its own mapping:
//! this side never makes a Rust reference over it. Bytes are copied out of
//! it or into it by address (`vsci_sys::Mapping::read` and `write`), into
//! and out of buffers of ours, and only those buffers are handed to the
//! RMA engine: what the guest stores meanwhile is only its own race, and
//! the engine never holds the window (an abandoned operation keeps our
//! buffer, not the guest's memory).
//!
//! An interrupt: the guest triggers a relay page (same layout as an
//! interrupt's shared page, with a sleeper announced forever so every
//! trigger also rings) and a doorbell; [`ProxiedTrigger::forward`] turns
//! what the page holds into RMA trigger messages.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;

use vsci_proto::guest::{MAX_REMOTE_FETCH, MAX_SHIP_RUNS};
use vsci_proto::intr::{self, DATA_MAX};
use vsci_proto::{RemoteAccess, RemoteTrigger, SciError};
use vsci_rma::{Endpoint, RemoteTarget, Run};

type Result<T> = std::result::Result<T, SciError>;

const PAGE: usize = 4096;

/// A remote segment's staging window, served to a guest.
///
/// The guest's libsisci keeps its maps itself (trapped, as a host
/// process's): it asks for a page of the owner's bytes with `FetchRemote`
/// and copies it out of the window, and ships its stores by copying them
/// into the window and sending `ShipRemote`. This side only moves bytes
/// between the window and the owner, checking every offset the guest gives.
pub struct ProxiedSegment {
    target: RemoteTarget,
    size: u64,
    window: vsci_sys::Mapping,
}

fn map_shared(fd: BorrowedFd, len: usize) -> Result<vsci_sys::Mapping> {
    if len == 0 {
        return Err(SciError::IllegalParameter);
    }
    vsci_sys::MapOptions::shared().map(fd, len, 0).map_err(|_| SciError::Nospc)
}

/// Keep a buffer the RMA engine may still touch (an abandoned operation)
/// for good.
fn keep_if_abandoned(e: &vsci_rma::Error, buf: Vec<u8>) {
    if matches!(e, vsci_rma::Error::Abandoned) {
        std::mem::forget(buf);
    }
}

impl ProxiedSegment {
    /// `shadow`: the memfd the guest sees as the segment's window.
    pub fn new(access: &RemoteAccess, shadow: BorrowedFd, size: u64) -> Result<ProxiedSegment> {
        let target = RemoteTarget::new(access)?;
        let len = usize::try_from(size).map_err(|_| SciError::OutOfRange)?.div_ceil(PAGE) * PAGE;
        let window = map_shared(shadow, len)?;
        Ok(ProxiedSegment { target, size, window })
    }

    /// The segment's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Where the segment lives (the guest's DMA reaches it from there).
    pub fn target(&self) -> &RemoteTarget {
        &self.target
    }

    /// `[off, off+len)` checked against the segment, as a window range.
    fn range(&self, off: u64, len: u64) -> Result<(usize, usize)> {
        match off.checked_add(len) {
            Some(end) if end <= self.size => Ok((off as usize, len as usize)),
            _ => Err(SciError::OutOfRange),
        }
    }

    fn failed(what: &str, e: &vsci_rma::Error) -> SciError {
        log::warn!("vsci: {what} for a guest failed: {e}");
        SciError::TransferFailed
    }

    /// `FetchRemote`: the owner's bytes at `[off, off+len)` into the window.
    pub fn fetch(&self, off: u64, len: u64) -> Result<()> {
        if len > MAX_REMOTE_FETCH {
            return Err(SciError::IllegalParameter);
        }
        let (off, len) = self.range(off, len)?;
        // Into a buffer of ours first: the guest's window is not written
        // until the bytes are all there, and an abandoned read writes only
        // into our buffer.
        let mut buf = vec![0u8; len];
        if let Err(e) = self.target.read_direct(&mut buf, off as u64) {
            let err = Self::failed("a fetch", &e);
            keep_if_abandoned(&e, buf);
            return Err(err);
        }
        self.window.write(off, &buf).ok_or(SciError::OutOfRange)
    }

    /// `ShipRemote`: write these runs of the window to the owner, the
    /// highest word last, all visible there on return. The runs' bytes are
    /// copied out of the window first, so the shipment is one snapshot
    /// whatever the guest stores meanwhile.
    pub fn ship(&self, runs: &[(u64, u64)]) -> Result<()> {
        if runs.is_empty() || runs.len() > MAX_SHIP_RUNS {
            return Err(SciError::IllegalParameter);
        }
        let mut checked: Vec<Run> = Vec::with_capacity(runs.len());
        for &(off, len) in runs {
            if len == 0 {
                return Err(SciError::IllegalParameter);
            }
            let r = self.range(off, len)?;
            if checked.last().is_some_and(|p| p.0 + p.1 > r.0) {
                return Err(SciError::IllegalParameter); // not ascending, or overlapping
            }
            checked.push(r);
        }
        // The snapshot: each run's bytes, one after the other, and where
        // each run starts in it.
        let total: usize = checked.iter().map(|r| r.1).sum();
        let mut snap = vec![0u8; total];
        let mut starts: Vec<(usize, usize)> = Vec::with_capacity(checked.len());
        let mut at = 0;
        for &(o, n) in &checked {
            self.window.read(o, &mut snap[at..at + n]).ok_or(SciError::OutOfRange)?;
            starts.push((o, at));
            at += n;
        }
        let r = {
            let (snap, starts) = (&snap, &starts);
            // A piece of a run (the shipment cuts off its last word).
            let bytes = move |(o, n): Run| -> &[u8] {
                let (s, at) = starts[starts.partition_point(|&(s, _)| s <= o) - 1];
                &snap[at + (o - s)..][..n]
            };
            self.target.write_shipment(0, &checked, bytes)
        };
        r.map_err(|e| {
            let err = Self::failed("a shipment", &e);
            keep_if_abandoned(&e, snap);
            err
        })
    }
}

/// A remote interrupt triggered by a guest through a relay page.
pub struct ProxiedTrigger {
    ep: Endpoint,
    token: u64,
    page: vsci_sys::Mapping,
    seen: u64,
    tail: u64,
}

impl ProxiedTrigger {
    /// Where the relay page's interrupt is, for the guest: a data slot at
    /// its start (which serves plain interrupts too).
    pub const RELAY_PLACE: intr::Place = intr::Place { kind: vsci_proto::IntrKind::Data, offset: 0, generation: 1 };

    /// `page`: a zero-filled memfd of at least `intr::DATA_SIZE` bytes
    /// (plain or data, the guest may send either), which becomes the relay
    /// page the guest triggers.
    pub fn new(trigger: &RemoteTrigger, page: BorrowedFd) -> Result<ProxiedTrigger> {
        let ep = Endpoint::new(&trigger.provider, &trigger.fabric_addr)?;
        let len = intr::DATA_SIZE;
        let p = map_shared(page, len)?;
        // SAFETY: the mapping is DATA_SIZE bytes, page aligned, and lives
        // as long as the struct that owns it.
        let shared = unsafe { intr::View::new(p.as_ptr(), len) }.shared;
        shared.init(Self::RELAY_PLACE.generation);
        // A sleeper forever: every trigger the guest makes also rings us.
        shared.sleepers.store(1, Ordering::SeqCst);
        Ok(ProxiedTrigger { ep, token: trigger.token, page: p, seen: 0, tail: 0 })
    }

    /// Send a trigger message for every trigger and data message the guest
    /// put in the relay page since the last call. Stores the guest made to
    /// remote segments must be flushed first (the guest's libsisci ships
    /// them before it rings).
    pub fn forward(&mut self) -> Result<usize> {
        // SAFETY: see `new`; the mapping lives as long as self.
        let view = unsafe { intr::View::new(self.page.as_ptr(), self.page.len()) };
        let (shared, ring) = (view.shared, view.ring.ok_or(SciError::System)?);
        let mut sent = 0;
        let now = shared.triggers.load(Ordering::Acquire);
        // The guest can write any count; never send more than a bounded
        // burst per call for a jump it made up.
        let due = now.wrapping_sub(self.seen).min(1024);
        self.seen = now;
        for _ in 0..due {
            self.ep.send_trigger(self.token, None)?;
            sent += 1;
        }
        let mut buf = [0u8; DATA_MAX];
        while sent < 4096 {
            let Some(n) = intr::try_dequeue(shared, ring, &mut self.tail, &mut buf) else { break };
            self.ep.send_trigger(self.token, Some(&buf[..n]))?;
            sent += 1;
        }
        Ok(sent)
    }
}
