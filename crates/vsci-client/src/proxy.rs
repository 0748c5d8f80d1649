//! Reaching other nodes on behalf of a guest, which cannot use the RMA
//! engine itself. The guest's host side (crates/vsci-vm's agent) keeps one
//! of these per remote segment or interrupt a guest program connected to.
//!
//! A segment: vscid hands out a shadow memfd, as for a host process; the
//! agent plugs it into the guest as a window, and a [`ProxiedSegment`]
//! keeps it in step with the owner: the guest's stores are found by
//! comparing the shadow with a twin (they reach the shadow through QEMU's
//! mapping, so no page fault ever tells us) and shipped by RMA, in the
//! background for maps up to 1 MiB and always at the guest's flush points;
//! the owner's bytes are refetched as for host maps.
//!
//! An interrupt: the guest triggers a relay page (same layout as an
//! interrupt's shared page, with a sleeper announced forever so every
//! trigger also rings) and a doorbell; [`ProxiedTrigger::forward`] turns
//! what the page holds into RMA trigger messages.

use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use vsci_proto::intr::{self, Shared, DATA_MAX};
use vsci_proto::{RemoteAccess, RemoteTrigger, SciError};

use crate::remote::{self, Endpoint, RemoteMap, RemoteTarget, Tracking};
use crate::Result;

const PAGE: usize = 4096;

/// A remote segment's shadow, served to a guest.
pub struct ProxiedSegment {
    map: Arc<RemoteMap>,
    size: u64,
    base: NonNull<libc::c_void>,
    fill: NonNull<libc::c_void>,
    len: usize,
}

// SAFETY: the two mappings are owned by this struct and only touched by the
// RemoteMap's tracker (behind its mutex) and at Drop.
unsafe impl Send for ProxiedSegment {}
// SAFETY: as above.
unsafe impl Sync for ProxiedSegment {}

fn map_shared(fd: BorrowedFd, len: usize) -> Result<NonNull<libc::c_void>> {
    // SAFETY: a new MAP_SHARED mapping of a sealed memfd at an address of the
    // kernel's choosing; it aliases no Rust object.
    unsafe { mmap(None, std::num::NonZeroUsize::new(len).ok_or(SciError::IllegalParameter)?, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, fd, 0) }
        .map_err(|_| SciError::Nospc)
}

impl ProxiedSegment {
    /// Fill the shadow with the owner's bytes and start tracking it.
    pub fn new(access: &RemoteAccess, shadow: BorrowedFd, size: u64) -> Result<ProxiedSegment> {
        let target = Arc::new(RemoteTarget::new(access)?);
        let size = usize::try_from(size).map_err(|_| SciError::OutOfRange)?;
        let len = size.div_ceil(PAGE) * PAGE;
        let base = map_shared(shadow, len)?;
        let fill = match map_shared(shadow, len) {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: the mapping made just above.
                unsafe {
                    let _ = munmap(base, len);
                }
                return Err(e);
            }
        };
        match RemoteMap::new(target, base.as_ptr().cast(), len, 0, size, fill.as_ptr().cast(), Tracking::Compare, false) {
            Ok(map) => Ok(ProxiedSegment { map, size: size as u64, base, fill, len }),
            Err(e) => {
                // SAFETY: both mappings made above, not handed out.
                unsafe {
                    let _ = munmap(base, len);
                    let _ = munmap(fill, len);
                }
                Err(e)
            }
        }
    }

    /// The segment's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Make every store the guest made so far visible at the owner.
    pub fn flush(&self) -> Result<()> {
        self.map.flush().map(|_| ())
    }

    /// Keep `[off, off+len)` refetched in the background (or stop).
    pub fn watch(&self, off: u64, len: u64, on: bool) -> Result<()> {
        let off = usize::try_from(off).map_err(|_| SciError::OutOfRange)?;
        let len = usize::try_from(len).map_err(|_| SciError::OutOfRange)?;
        self.map.watch(off, len, on)
    }

    /// DMA on the guest's behalf: RMA-write `src` to the owner's memory at
    /// segment offset `off`, straight from the caller's buffer (a guest
    /// segment's pages), not through the shadow.
    pub fn dma_write(&self, src: &[u8], off: u64) -> Result<()> {
        self.map.target().write_direct(&[(src, off)]).map_err(|e| {
            log::warn!("vsci: DMA write for a guest failed: {e}");
            SciError::TransferFailed
        })
    }

    /// DMA on the guest's behalf: RMA-read the owner's memory at `off`
    /// into `dst`. `dst` must stay valid even if the node dies mid-read
    /// (the engine may write later): the guest's segment pages, which the
    /// caller keeps mapped for the process's life once a read was abandoned.
    pub fn dma_read(&self, dst: &mut [u8], off: u64) -> std::result::Result<(), (SciError, bool)> {
        self.map.target().read_direct(dst, off).map_err(|e| {
            log::warn!("vsci: DMA read for a guest failed: {e}");
            (SciError::TransferFailed, matches!(e, vsci_fabric::Error::Abandoned))
        })
    }

    /// Refetch `[off, off+len)` of the owner's bytes now (a guest's fresh
    /// read), whatever the size of the segment.
    pub fn refresh(&self, off: u64, len: u64) -> Result<()> {
        let off = usize::try_from(off).map_err(|_| SciError::OutOfRange)?;
        let len = usize::try_from(len).map_err(|_| SciError::OutOfRange)?;
        if off.checked_add(len).is_none_or(|e| e as u64 > self.size) {
            return Err(SciError::OutOfRange);
        }
        self.map.refresh_now(off, len).map(|_| ())
    }
}

impl Drop for ProxiedSegment {
    fn drop(&mut self) {
        let _ = self.map.flush();
        remote::flusher().remove(&self.map);
        self.map.close();
        // SAFETY: the mappings made in `new`; the tracker that used them is
        // closed.
        unsafe {
            let _ = munmap(self.base, self.len);
            let _ = munmap(self.fill, self.len);
        }
    }
}

/// A remote interrupt triggered by a guest through a relay page.
pub struct ProxiedTrigger {
    ep: Endpoint,
    token: u64,
    page: NonNull<Shared>,
    len: usize,
    seen: u64,
    tail: u64,
}

// SAFETY: the page is a MAP_SHARED mapping owned by this struct; the
// fields of `Shared` written concurrently (by the guest) are atomics.
unsafe impl Send for ProxiedTrigger {}

impl ProxiedTrigger {
    /// `page`: a zero-filled memfd of at least `intr::SHARED_SIZE` bytes,
    /// which becomes the relay page the guest triggers.
    pub fn new(trigger: &RemoteTrigger, page: BorrowedFd) -> Result<ProxiedTrigger> {
        let ep = Endpoint::new(&trigger.provider, &trigger.fabric_addr)?;
        let len = intr::SHARED_SIZE;
        let p = map_shared(page, len)?.cast::<Shared>();
        // SAFETY: the mapping is SHARED_SIZE bytes, page aligned, and any
        // bit pattern is valid for the atomics in `Shared`.
        let shared = unsafe { p.as_ref() };
        shared.init();
        // A sleeper forever: every trigger the guest makes also rings us.
        shared.sleepers.store(1, Ordering::SeqCst);
        Ok(ProxiedTrigger { ep, token: trigger.token, page: p, len, seen: 0, tail: 0 })
    }

    /// Send a trigger message for every trigger and data message the guest
    /// put in the relay page since the last call. Stores the guest made to
    /// remote segments must be flushed first (the caller's job).
    pub fn forward(&mut self) -> Result<usize> {
        // SAFETY: see `new`; the mapping lives as long as self.
        let shared = unsafe { self.page.as_ref() };
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
            let Some(n) = intr::try_dequeue(shared, &mut self.tail, &mut buf) else { break };
            remote::send_trigger_only(&self.ep, self.token, Some(&buf[..n]))?;
            sent += 1;
        }
        Ok(sent)
    }
}

impl Drop for ProxiedTrigger {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe {
            let _ = munmap(self.page.cast(), self.len);
        }
    }
}
