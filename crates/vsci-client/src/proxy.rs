//! Reaching other nodes on behalf of a guest, which cannot use the RMA
//! engine itself. The guest's host side (crates/vsci-vm's agent) keeps one
//! of these per remote segment or interrupt a guest program connected to.
//!
//! A segment: vscid hands out a shadow memfd, as for a host process; the
//! agent plugs it into the guest as a window, which the guest's libsisci
//! uses only to stage bytes: its maps trap accesses as a host process's do
//! (QEMU's mapping of the window would tell nobody about a store), and a
//! [`ProxiedSegment`] moves what it is asked between the window and the
//! owner.
//!
//! An interrupt: the guest triggers a relay page (same layout as an
//! interrupt's shared page, with a sleeper announced forever so every
//! trigger also rings) and a doorbell; [`ProxiedTrigger::forward`] turns
//! what the page holds into RMA trigger messages.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;

use vsci_proto::intr::{self, DATA_MAX};
use vsci_proto::{RemoteAccess, RemoteTrigger, SciError};

use crate::remote::{self, Endpoint, RemoteTarget};
use crate::Result;

const PAGE: usize = 4096;

/// A remote segment's staging window, served to a guest.
///
/// The guest's libsisci keeps its maps itself (trapped, as a host
/// process's, see `remote::trapped`): it asks for a page of the owner's
/// bytes with `FetchRemote` and copies it out of the window, and ships its
/// stores by copying them into the window and sending `ShipRemote`. This
/// side only moves bytes between the window and the owner, checking every
/// offset the guest gives.
pub struct ProxiedSegment {
    target: RemoteTarget,
    size: u64,
    /// The window (`None` only while dropping).
    window: Option<vsci_sys::Mapping>,
    /// An RMA operation on the window was abandoned (the node died with it
    /// in flight): the engine may still touch the window, so it is never
    /// unmapped.
    keep: std::sync::atomic::AtomicBool,
}

fn map_shared(fd: BorrowedFd, len: usize) -> Result<vsci_sys::Mapping> {
    if len == 0 {
        return Err(SciError::IllegalParameter);
    }
    vsci_sys::MapOptions::shared().map(fd, len, 0).map_err(|_| SciError::Nospc)
}

impl ProxiedSegment {
    /// `shadow`: the memfd the guest sees as the segment's window.
    pub fn new(access: &RemoteAccess, shadow: BorrowedFd, size: u64) -> Result<ProxiedSegment> {
        let target = RemoteTarget::new(access)?;
        let len = usize::try_from(size).map_err(|_| SciError::OutOfRange)?.div_ceil(PAGE) * PAGE;
        let window = Some(map_shared(shadow, len)?);
        Ok(ProxiedSegment { target, size, window, keep: Default::default() })
    }

    /// The segment's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `[off, off+len)` checked against the segment, as a window range.
    fn range(&self, off: u64, len: u64) -> Result<(usize, usize)> {
        match off.checked_add(len) {
            Some(end) if end <= self.size => Ok((off as usize, len as usize)),
            _ => Err(SciError::OutOfRange),
        }
    }

    /// The first of `len` bytes at `off` of the window mapping, which lives
    /// as long as `self`. A pointer, not a slice: the guest may write the
    /// same bytes at any time through its own mapping (what it gets then is
    /// its own race), so each caller makes the slice it needs for one call.
    fn window_ptr(&self, off: usize, len: usize) -> *mut u8 {
        self.window.as_ref().and_then(|w| w.ptr_at(off, len)).expect("inside the window")
    }

    fn failed(&self, what: &str, e: &vsci_fabric::Error) -> SciError {
        log::warn!("vsci: {what} for a guest failed: {e}");
        if matches!(e, vsci_fabric::Error::Abandoned) {
            self.keep.store(true, Ordering::SeqCst);
        }
        SciError::TransferFailed
    }

    /// `FetchRemote`: the owner's bytes at `[off, off+len)` into the window.
    pub fn fetch(&self, off: u64, len: u64) -> Result<()> {
        if len > vsci_proto::MAX_REMOTE_FETCH {
            return Err(SciError::IllegalParameter);
        }
        let (off, len) = self.range(off, len)?;
        // Into a buffer of ours first: the guest's window is not written
        // until the bytes are all there.
        // SAFETY: in bounds (window_ptr asserts it); this call holds the
        // only slice of ours over these bytes while it lasts.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.window_ptr(off, len), len) };
        self.target.read(buf, off as u64)
    }

    /// `ShipRemote`: write these runs of the window to the owner, the
    /// highest word last, all visible there on return.
    pub fn ship(&self, runs: &[(u64, u64)]) -> Result<()> {
        if runs.is_empty() || runs.len() > vsci_proto::MAX_SHIP_RUNS {
            return Err(SciError::IllegalParameter);
        }
        let mut checked: Vec<vsci_trap::Run> = Vec::with_capacity(runs.len());
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
        self.target
            .write_shipment(0, &checked, |(o, n)| {
                // SAFETY: in bounds (window_ptr asserts it); only read while
                // the shipment is written.
                unsafe { std::slice::from_raw_parts(self.window_ptr(o, n), n) }
            })
            .map_err(|e| self.failed("a shipment", &e))
    }

    /// DMA on the guest's behalf: RMA-write `src` to the owner's memory at
    /// segment offset `off`, straight from the caller's buffer (a guest
    /// segment's pages), not through the window.
    pub fn dma_write(&self, src: &[u8], off: u64) -> Result<()> {
        self.target.write_direct(&[(src, off)]).map_err(|e| {
            log::warn!("vsci: DMA write for a guest failed: {e}");
            SciError::TransferFailed
        })
    }

    /// DMA on the guest's behalf: RMA-read the owner's memory at `off`
    /// into `dst`. `dst` must stay valid even if the node dies mid-read
    /// (the engine may write later): the guest's segment pages, which the
    /// caller keeps mapped for the process's life once a read was abandoned.
    pub fn dma_read(&self, dst: &mut [u8], off: u64) -> std::result::Result<(), (SciError, bool)> {
        self.target.read_direct(dst, off).map_err(|e| {
            log::warn!("vsci: DMA read for a guest failed: {e}");
            (SciError::TransferFailed, matches!(e, vsci_fabric::Error::Abandoned))
        })
    }
}

impl Drop for ProxiedSegment {
    fn drop(&mut self) {
        if let Some(w) = self.window.take() {
            if self.keep.load(Ordering::SeqCst) {
                // The engine may still touch the window: never unmapped.
                let _ = w.into_raw();
            }
            // Else no RMA operation on it is in flight (each one
            // completed): dropping `w` unmaps it.
        }
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
    /// remote segments must be flushed first (the caller's job).
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
            remote::send_trigger_only(&self.ep, self.token, None)?;
            sent += 1;
        }
        let mut buf = [0u8; DATA_MAX];
        while sent < 4096 {
            let Some(n) = intr::try_dequeue(shared, ring, &mut self.tail, &mut buf) else { break };
            remote::send_trigger_only(&self.ep, self.token, Some(&buf[..n]))?;
            sent += 1;
        }
        Ok(sent)
    }
}
