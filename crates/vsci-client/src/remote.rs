//! Reaching other nodes' segments and interrupts over the RMA engine.
//!
//! A remote segment is mapped as a local *shadow*. The program's plain
//! stores land in the shadow; a flusher ships them to the owner with RMA
//! writes, continuously in the background (stores arrive with no call at
//! all) and synchronously at `SCIFlush`, `SCIStoreBarrier`,
//! `SCICheckSequence`, `SCITriggerInterrupt`, `SCIMemCpy` and unmap, which
//! therefore make every earlier store visible at the owner before
//! returning. Each shipment is a snapshot consistent with the program's
//! store order, and its highest changed word is placed at the owner after
//! the rest of it: a flag stored after its data, above it, never shows
//! before that data.
//!
//! A host process's own maps trap first accesses and fetch pages from the
//! owner (`trapped`): every store is shipped, and an untouched map costs
//! nothing. Maps a guest writes through QEMU's mapping (the agent's
//! `Tracking::Compare`) cannot trap: they are compared with a twin of the
//! bytes last shipped, and refetched in the background (every
//! `REFRESH_HOT` while busy, `REFRESH_IDLE` when quiet; the whole map up to
//! `VSCI_REFRESH_MAX` bytes, else one window of that size per round) with a
//! per-word compare-and-swap from the value last shipped, so a refetch never
//! overwrites a store not yet shipped. `SCIMemCpy` with
//! `SCI_FLAG_BLOCK_READ` always reads fresh data from the owner.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use vsci_fabric::{Fabric, Peer, ProgressThread, RemoteRegion};
use vsci_proto::peer::TriggerMsg;
use vsci_proto::{RemoteAccess, SciError};

use crate::Result;

mod trapped;

/// The process's RMA endpoint, opened on first use.
pub(crate) struct Rma {
    fabric: Fabric,
    peers: Mutex<HashMap<Vec<u8>, Arc<Peer>>>,
    _progress: ProgressThread,
}

static RMA: OnceLock<std::result::Result<Arc<Rma>, SciError>> = OnceLock::new();

pub(crate) fn rma(provider: &str) -> Result<Arc<Rma>> {
    RMA.get_or_init(|| {
        let fabric = Fabric::open(provider, None).map_err(|e| {
            log::error!("vsci: cannot open the RMA engine ({provider}): {e}");
            SciError::NoRemoteLinkAccess
        })?;
        let progress = fabric.spawn_progress_thread();
        Ok(Arc::new(Rma { fabric, peers: Mutex::new(HashMap::new()), _progress: progress }))
    })
    .clone()
}

impl Rma {
    fn fabric_is_down(&self, peer: &Peer) -> bool {
        self.fabric.is_peer_down(peer)
    }

    pub(crate) fn peer(&self, addr: &[u8]) -> Result<Arc<Peer>> {
        let mut p = self.peers.lock().unwrap();
        if let Some(peer) = p.get(addr) {
            return Ok(peer.clone());
        }
        let peer = Arc::new(self.fabric.insert_peer(addr).map_err(|_| SciError::NoRemoteLinkAccess)?);
        p.insert(addr.to_vec(), peer.clone());
        Ok(peer)
    }
}

/// The owner node's RMA engine, as seen from this process.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub rma: Arc<Rma>,
    pub peer: Arc<Peer>,
}

impl Endpoint {
    pub(crate) fn new(provider: &str, addr: &[u8]) -> Result<Endpoint> {
        let rma = rma(provider)?;
        let peer = rma.peer(addr)?;
        // The node granted us something just now: it is up (again).
        rma.fabric.set_peer_down(&peer, false);
        Ok(Endpoint { rma, peer })
    }

    fn set_down(&self) {
        self.rma.fabric.set_peer_down(&self.peer, true);
    }
}

/// Which endpoint each remote segment (by its event queue) and remote
/// interrupt (by connection id) uses, so a "node not responding" event can
/// stop every wait on that node.
#[derive(Default)]
struct Watch {
    segments: HashMap<usize, Endpoint>,
    interrupts: HashMap<vsci_proto::ObjId, Endpoint>,
}

static WATCH: OnceLock<Mutex<Watch>> = OnceLock::new();

fn watch() -> &'static Mutex<Watch> {
    WATCH.get_or_init(Default::default)
}

pub(crate) fn watch_segment(q: &Arc<crate::conn::EventQueue>, ep: &Endpoint) {
    watch().lock().unwrap().segments.insert(Arc::as_ptr(q) as usize, ep.clone());
}

pub(crate) fn unwatch_segment(q: &Arc<crate::conn::EventQueue>) {
    watch().lock().unwrap().segments.remove(&(Arc::as_ptr(q) as usize));
}

pub(crate) fn watch_interrupt(conn: vsci_proto::ObjId, ep: &Endpoint) {
    watch().lock().unwrap().interrupts.insert(conn, ep.clone());
}

pub(crate) fn unwatch_interrupt(conn: vsci_proto::ObjId) {
    watch().lock().unwrap().interrupts.remove(&conn);
}

/// The node behind this segment stopped answering.
pub(crate) fn node_down_queue(q: &Arc<crate::conn::EventQueue>) {
    if let Some(ep) = WATCH.get().and_then(|w| w.lock().unwrap().segments.get(&(Arc::as_ptr(q) as usize)).cloned()) {
        ep.set_down();
    }
}

/// The node behind this interrupt connection stopped answering.
pub(crate) fn node_down(conn: vsci_proto::ObjId) {
    if let Some(ep) = WATCH.get().and_then(|w| w.lock().unwrap().interrupts.get(&conn).cloned()) {
        ep.set_down();
    }
}

/// Keep a buffer alive forever when the RMA engine may still touch it.
fn abandoned<T>(e: &vsci_fabric::Error, buf: T) {
    if matches!(e, vsci_fabric::Error::Abandoned) {
        std::mem::forget(buf);
    }
}

/// Where a remote segment lives.
pub(crate) struct RemoteTarget {
    pub ep: Endpoint,
    pub region: RemoteRegion,
}

impl RemoteTarget {
    pub(crate) fn new(access: &RemoteAccess) -> Result<RemoteTarget> {
        let ep = Endpoint::new(&access.provider, &access.fabric_addr)?;
        let r = access.region;
        Ok(RemoteTarget { ep, region: RemoteRegion { base: r.base, key: r.key, len: r.len } })
    }

    /// Fresh bytes from the owner. They land in a buffer of ours first: if
    /// the node dies mid-read the engine may still write into it later, so
    /// it must never be the caller's memory.
    pub(crate) fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut bounce = vec![0u8; buf.len()];
        match self.read_direct(&mut bounce, offset) {
            Ok(()) => {
                buf.copy_from_slice(&bounce);
                Ok(())
            }
            Err(e) => {
                log::debug!("vsci: RMA read failed: {e}");
                abandoned(&e, bounce);
                Err(SciError::TransferFailed)
            }
        }
    }
}

impl RemoteTarget {
    /// RMA read straight into `buf`. After `Err(Abandoned)` the engine may
    /// still write into `buf` later: the caller must then keep that memory
    /// for good (the DMA engine reads into segment pages it never unmaps
    /// after that; `read` uses a throw-away buffer).
    pub(crate) fn read_direct(&self, buf: &mut [u8], offset: u64) -> std::result::Result<(), vsci_fabric::Error> {
        self.ep.rma.fabric.read(&self.ep.peer, buf, &self.region, offset)
    }

    /// RMA writes of `(bytes, segment offset)` runs straight from the
    /// caller's memory, all visible at the owner when this returns. After
    /// `Err(Abandoned)` the engine may still read that memory later.
    pub(crate) fn write_direct(&self, runs: &[(&[u8], u64)]) -> std::result::Result<(), vsci_fabric::Error> {
        self.ep.rma.fabric.write_many(&self.ep.peer, runs, &self.region)
    }

    /// Ship a shipment's `runs` (offsets in a map starting at segment offset
    /// `seg_off`, ascending), taking each run's bytes from `bytes`, all
    /// delivered on return. The last changed word goes in a write of its
    /// own, placed after everything else: the owner's side copies a write
    /// into memory in no particular address order (its provider's memcpy),
    /// so a flag stored after its data, above it — the usual "data, then a
    /// flag at the end" — could otherwise become visible before part of
    /// that data, although both came from one consistent snapshot.
    fn write_shipment<'a>(&self, seg_off: u64, runs: &[vsci_dirty::Run], bytes: impl Fn(vsci_dirty::Run) -> &'a [u8]) -> std::result::Result<(), vsci_fabric::Error> {
        let (first, last) = split_last_word(runs);
        let ops = |rs: &[vsci_dirty::Run]| -> Vec<(&[u8], u64)> { rs.iter().map(|&run| (bytes(run), seg_off + run.0 as u64)).collect() };
        self.ep.rma.fabric.write_many_ordered(&self.ep.peer, &ops(&first), &ops(&[last]), &self.region)
    }
}

/// One map of a remote segment: its tracker and where to ship.
pub(crate) struct RemoteMap {
    target: Arc<RemoteTarget>,
    /// Segment offset of the start of the (page-aligned) user mapping.
    seg_off: u64,
    /// `None` once closed (the tracker must go before the mapping does).
    tracker: Mutex<Option<vsci_dirty::DiffTracker>>,
    /// The untracked second mapping of the same bytes, and how many of them
    /// lie inside the segment.
    fill: usize,
    valid: usize,
    /// When the background refetch last ran, and whether it is due often.
    last_refresh: Mutex<Instant>,
    /// Set when the segment is lost: stop shipping.
    pub(crate) failed: std::sync::atomic::AtomicBool,
    /// Ranges refreshed in the background instead of the whole map.
    watched: Mutex<Vec<(usize, usize)>>,
    /// Where the next background refetch of a map larger than
    /// `VSCI_REFRESH_MAX` starts (it goes round the map a window at a time).
    refresh_cursor: AtomicUsize,
    /// Stores found by comparing the whole map (see `Tracking`), not by
    /// page faults.
    compare: bool,
    /// A host process's own map: accesses trapped (see `trapped`). The
    /// tracker above is then unused.
    trapped: Option<trapped::Trapped>,
    /// Faults counted when the flusher last looked.
    seen_faults: std::sync::atomic::AtomicU64,
}

/// How a remote map finds the bytes that were stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tracking {
    /// Our own mapping is written by this process: trap the first access
    /// to each page (`trapped`).
    Faults,
    /// Someone else writes the shadow (a guest, through QEMU's mapping), so
    /// no fault ever reaches us: compare the whole map with the twin.
    Compare,
}

/// Most watched ranges per map.
const MAX_WATCHED: usize = 64;

/// Most bytes compared per background round; bigger compared maps ship in
/// the background only what the guest maps of them (if at most this much),
/// the rest at flush points (a full compare per round would cost more than
/// it saves).
const BACKGROUND_COMPARE_MAX: usize = 1 << 20;

// SAFETY: the tracker points into a mapping owned by the `Map` that owns
// this `RemoteMap` (it closes the tracker before unmapping), and is only
// used behind the mutex.
unsafe impl Send for RemoteMap {}
// SAFETY: as above.
unsafe impl Sync for RemoteMap {}

impl RemoteMap {
    /// Track a fresh user mapping and fill it with the owner's current
    /// content (written through `fill`, an untracked second mapping of the
    /// shadow, so the fetch is not mistaken for our own stores).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        target: Arc<RemoteTarget>,
        base: *mut u8,
        len: usize,
        seg_off: u64,
        valid: usize,
        fill: *mut u8,
        tracking: Tracking,
        readonly: bool,
    ) -> Result<Arc<RemoteMap>> {
        if tracking == Tracking::Faults {
            let t = trapped::Trapped::new(target.clone(), base, len, seg_off, valid, fill, readonly)?;
            let m = Arc::new(RemoteMap {
                target,
                seg_off,
                tracker: Mutex::new(None),
                fill: fill as usize,
                valid,
                last_refresh: Mutex::new(Instant::now()),
                failed: std::sync::atomic::AtomicBool::new(false),
                compare: false,
                watched: Mutex::new(Vec::new()),
                refresh_cursor: AtomicUsize::new(0),
                trapped: Some(t),
                seen_faults: Default::default(),
            });
            flusher().add(&m);
            return Ok(m);
        }
        // Fetch first, through the untracked mapping, then start tracking
        // with the fetched bytes as the baseline: nothing is shipped back.
        // SAFETY: `fill` maps the same `len` bytes of the shadow; `valid`
        // <= len is the part inside the segment.
        let dst = unsafe { std::slice::from_raw_parts_mut(fill, valid) };
        // The first RMA to a node may meet its connection still being set
        // up by the provider; a few quick retries cover that.
        let mut tries = 0;
        while let Err(e) = target.read(dst, seg_off) {
            tries += 1;
            if tries >= 5 || target.ep.rma.fabric_is_down(&target.ep.peer) {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(50 * tries));
        }
        let mode = match tracking {
            Tracking::Faults => vsci_dirty::ModeRequest::Auto,
            Tracking::Compare => vsci_dirty::ModeRequest::Compare,
        };
        let cfg = vsci_dirty::DiffConfig { merge_gap: MERGE_GAP, mode, ..vsci_dirty::DiffConfig::default() };
        // SAFETY: `base..base+len` is a page-aligned MAP_SHARED mapping that
        // the owner of this map (a `Map` or a `ProxiedSegment`) keeps alive
        // until after `close()` drops the tracker.
        let tracker = unsafe { vsci_dirty::DiffTracker::with_config(base, len, cfg) }.map_err(|e| {
            log::error!("vsci: cannot track stores to a remote map: {e}");
            SciError::System
        })?;
        let m = Arc::new(RemoteMap {
            target,
            seg_off,
            tracker: Mutex::new(Some(tracker)),
            fill: fill as usize,
            valid,
            last_refresh: Mutex::new(Instant::now()),
            failed: std::sync::atomic::AtomicBool::new(false),
            compare: tracking == Tracking::Compare,
            watched: Mutex::new(Vec::new()),
            refresh_cursor: AtomicUsize::new(0),
            trapped: None,
            seen_faults: Default::default(),
        });
        flusher().add(&m);
        Ok(m)
    }

    /// Ship every store made so far; returns after they are visible at
    /// the owner, with whether there was anything to ship.
    pub(crate) fn flush(&self) -> Result<bool> {
        self.ship(true)
    }

    /// Ship stores from a snapshot consistent with the program's store
    /// order, so a flag is never seen before the data stored ahead of it.
    /// In the background (`sync` false) a snapshot that keeps changing under
    /// our feet is simply retried next round; at a flush point the program's
    /// own thread is not storing, so it settles, and if other threads keep
    /// storing we ship what we have (their stores race with the flush
    /// anyway).
    fn ship(&self, sync: bool) -> Result<bool> {
        if let Some(t) = &self.trapped {
            return t.ship();
        }
        let mut guard = self.tracker.lock().unwrap();
        self.ship_locked(&mut guard, sync)
    }

    fn ship_locked(&self, guard: &mut std::sync::MutexGuard<'_, Option<vsci_dirty::DiffTracker>>, sync: bool) -> Result<bool> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(SciError::TransferFailed);
        }
        let mut runs = Vec::new();
        let Some(t) = guard.as_mut() else { return Ok(false) };
        let tries = if sync { 64 } else { 1 };
        let snap = if !self.compare || sync || self.valid <= BACKGROUND_COMPARE_MAX {
            t.collect_consistent(&mut runs, tries)
        } else {
            // A large compared map (a guest's view of a big segment): in
            // the background compare only what the guest maps (the watched
            // ranges, the only places it can store to), if that is small
            // enough; flush points compare everything.
            let watched = self.watched.lock().unwrap().clone();
            let total: usize = watched.iter().map(|r| r.1).sum();
            if watched.is_empty() || total > BACKGROUND_COMPARE_MAX {
                return Ok(false);
            }
            t.collect_consistent_within(&watched, &mut runs, tries)
        }
        .map_err(|_| SciError::System)?;
        if snap.is_none() {
            if !sync {
                return Ok(true); // busy: come back soon
            }
            t.collect(&mut runs).map_err(|_| SciError::System)?;
        }
        if runs.is_empty() {
            return Ok(false);
        }
        // Ship the twin's bytes, not the mapping's: they are exactly what
        // the diff recorded as sent, so a later store of an old value is
        // still seen as a change.
        let r = self.target.write_shipment(self.seg_off, &runs, |run| t.twin_range(run));
        match r {
            Ok(()) => Ok(true),
            Err(e) => {
                log::warn!("RMA write to node failed ({e}); stores to this map are no longer shipped");
                self.failed.store(true, Ordering::Relaxed);
                // The engine may still read the twin: never free it.
                abandoned(&e, guard.take());
                Err(SciError::TransferFailed)
            }
        }
    }

    /// Refetch the owner's bytes into the shadow, never overwriting a word
    /// this process stored since its last shipment. Returns whether
    /// anything changed.
    /// Write `data` at `off` (bytes from the start of the tracked mapping)
    /// and make it visible at the owner before returning — `SCIMemCpy`'s
    /// write. Earlier stores go first (shipped as usual); then the bytes are
    /// put in the shadow through the untracked mapping and sent as one RMA
    /// write straight from there, with no page faults, snapshot or diff, and
    /// the twin learns them so they are not shipped again.
    pub(crate) fn write_through(&self, off: usize, data: &[u8]) -> Result<()> {
        if let Some(t) = &self.trapped {
            return t.write_through(off, data);
        }
        let mut guard = self.tracker.lock().unwrap();
        self.ship_locked(&mut guard, true)?;
        let Some(t) = guard.as_mut() else { return Err(SciError::TransferFailed) };
        if off.checked_add(data.len()).is_none_or(|e| e > self.valid) {
            return Err(SciError::OutOfRange);
        }
        // SAFETY: off + len <= valid <= the fill mapping's length, which
        // lives as long as the tracker (held). The program may be storing to
        // the same bytes through its own mapping; that is its race.
        let dst = unsafe { std::slice::from_raw_parts_mut((self.fill + off) as *mut u8, data.len()) };
        dst.copy_from_slice(data);
        match self.target.ep.rma.fabric.write(&self.target.ep.peer, dst, &self.target.region, self.seg_off + off as u64) {
            Ok(()) => t.note_external_data(off, data).map_err(|_| SciError::System),
            Err(e) => {
                log::warn!("RMA write to node failed ({e}); stores to this map are no longer shipped");
                self.failed.store(true, Ordering::Relaxed);
                // The engine may still read the fill mapping: keep the
                // tracker (and so the map's memory accounting) forever.
                abandoned(&e, guard.take());
                Err(SciError::TransferFailed)
            }
        }
    }

    /// One background refetch round: the watched ranges (or the whole
    /// map) if they total at most `VSCI_REFRESH_MAX` bytes; else the next
    /// window of that size, going round them, so a program polling anywhere
    /// still sees the owner's stores (within total/window rounds) for the
    /// cost of a small map's refetch.
    pub(crate) fn refresh(&self) -> Result<bool> {
        if let Some(t) = &self.trapped {
            t.refresh();
            *self.last_refresh.lock().unwrap() = Instant::now();
            return Ok(false);
        }
        let window = refresh_max();
        if window == 0 {
            return Ok(false);
        }
        let mut ranges = self.watched.lock().unwrap().clone();
        if ranges.is_empty() {
            ranges.push((0, self.valid));
        }
        let total: usize = ranges.iter().map(|r| r.1).sum();
        if total <= window {
            let mut any = false;
            for (off, len) in ranges {
                any |= self.refresh_range(off, len)?;
            }
            return Ok(any);
        }
        // The cursor is a position in the ranges laid end to end.
        let pos = self.refresh_cursor.load(Ordering::Relaxed) % total;
        let mut base = 0;
        for (off, len) in ranges {
            if pos < base + len {
                let within = pos - base;
                let n = window.min(len - within);
                let next = if pos + n >= total { 0 } else { pos + n };
                self.refresh_cursor.store(next, Ordering::Relaxed);
                return self.refresh_range(off + within, n);
            }
            base += len;
        }
        Ok(false)
    }

    /// Refetch only these ranges (offsets in the map) in the background,
    /// instead of the whole map: how a guest's maps of a big proxied
    /// segment see the owner's stores without refetching all of it.
    pub(crate) fn watch(&self, off: usize, len: usize, on: bool) -> Result<()> {
        if off.checked_add(len).is_none_or(|e| e > self.valid) || len == 0 {
            return Err(SciError::OutOfRange);
        }
        if self.trapped.is_some() {
            // Pages are fetched when touched: nothing to watch.
            return Ok(());
        }
        let mut w = self.watched.lock().unwrap();
        if on {
            if w.len() >= MAX_WATCHED {
                return Err(SciError::Nospc);
            }
            w.push((off, len));
        } else if let Some(i) = w.iter().position(|r| *r == (off, len)) {
            w.remove(i);
        }
        Ok(())
    }

    /// Refetch a range now, whatever the map's size (an explicit request).
    pub(crate) fn refresh_now(&self, off: usize, len: usize) -> Result<bool> {
        if len == 0 {
            return Ok(false);
        }
        if let Some(t) = &self.trapped {
            return t.refresh_range(off, len).map(|()| false);
        }
        self.refresh_range(off, len)
    }

    /// Refetch `[start, start+len)` of the map from the owner into the
    /// shadow, never overwriting a word this process stored since its last
    /// shipment. Returns whether anything changed.
    fn refresh_range(&self, start: usize, len: usize) -> Result<bool> {
        if self.failed.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let start = start & !7;
        let end = (start + len.div_ceil(8) * 8 + 8).min(self.valid);
        let mut fresh = vec![0u8; end - start];
        // Hold the tracker across read and merge: a flush by another thread
        // in between would make `fresh` older than the twin, and the merge
        // would then put old bytes back. Nothing needs shipping first: the
        // twin is what the owner last got from us, and the compare-and-swap
        // below only replaces words we have not stored to since.
        let mut guard = self.tracker.lock().unwrap();
        if guard.as_ref().is_none_or(|t| t.has_unshipped()) {
            // Stores found but not shipped yet are in the twin: it is not
            // what the owner has, and the merge below would take them for
            // the owner's. The next shipment clears this.
            return Ok(false);
        }
        self.target.read(&mut fresh, self.seg_off + start as u64)?;
        let Some(t) = guard.as_mut() else { return Ok(false) };
        let twin = &t.twin()[start..end];
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let words = fresh.len() / 8;
        for w in 0..words {
            let (a, b) = (w * 8, w * 8 + 8);
            if fresh[a..b] == twin[a..b] {
                continue;
            }
            let old = u64::from_ne_bytes(twin[a..b].try_into().expect("8 bytes"));
            let new = u64::from_ne_bytes(fresh[a..b].try_into().expect("8 bytes"));
            // SAFETY: `fill + start + a` is 8-byte aligned (the mapping is
            // page aligned, start is a multiple of 8) and inside the fill
            // mapping (end <= valid), which lives as long as the tracker does
            // (we hold it). The memory is shared with the program's own
            // stores, hence the atomic.
            let cell = unsafe { &*((self.fill + start + a) as *const std::sync::atomic::AtomicU64) };
            if cell.compare_exchange(old, new, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                match runs.last_mut() {
                    Some(r) if r.0 + r.1 == a => r.1 += 8,
                    _ => runs.push((a, 8)),
                }
            }
        }
        for i in words * 8..fresh.len() {
            if fresh[i] == twin[i] {
                continue;
            }
            // SAFETY: as above, one byte.
            let cell = unsafe { &*((self.fill + start + i) as *const std::sync::atomic::AtomicU8) };
            if cell.compare_exchange(twin[i], fresh[i], Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                runs.push((i, 1));
            }
        }
        for &(off, n) in &runs {
            t.note_external_data(start + off, &fresh[off..off + n]).map_err(|_| SciError::System)?;
        }
        *self.last_refresh.lock().unwrap() = Instant::now();
        Ok(!runs.is_empty())
    }

    fn refresh_due(&self, hot: bool) -> bool {
        let every = if hot { REFRESH_HOT } else { REFRESH_IDLE };
        self.last_refresh.lock().unwrap().elapsed() >= every
    }

    pub(crate) fn target(&self) -> &Arc<RemoteTarget> {
        &self.target
    }

    /// Stop tracking (before the mapping goes away).
    pub(crate) fn close(&self) {
        if let Some(t) = &self.trapped {
            t.close();
        }
        *self.tracker.lock().unwrap() = None;
    }

    /// Has shipping to the owner failed for good?
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed) || self.trapped.as_ref().is_some_and(|t| t.shadow().failed.load(Ordering::Relaxed))
    }

    /// Did the program touch a trapped map since the last call (a fault:
    /// a first access to a page since it was fetched or shipped)? And does
    /// it have pages to keep fresh?
    fn activity(&self) -> bool {
        let Some(t) = &self.trapped else { return false };
        let n = t.shadow().faults.load(Ordering::Relaxed);
        let old = self.seen_faults.swap(n, Ordering::Relaxed);
        t.shadow().stored.swap(false, Ordering::AcqRel) || n != old
    }
}

/// How often a busy map is refetched, and an idle one (for a trapped map:
/// how often its clean pages are dropped, to be fetched again when touched).
const REFRESH_HOT: Duration = Duration::from_millis(1);
const REFRESH_IDLE: Duration = Duration::from_millis(5);

/// Largest map refetched in the background (`VSCI_REFRESH_MAX` bytes).
fn refresh_max() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| std::env::var("VSCI_REFRESH_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 20))
}

/// Split a shipment's runs (ascending, non-empty) into everything but its
/// highest changed word, and that word: the bytes of the last run from its
/// last 8-byte boundary (or from its start, if shorter). A word-sized tail
/// is placed by the owner's side with one or two overlapping stores, so it
/// is never seen before the bytes below it in the same word either.
fn split_last_word(runs: &[vsci_dirty::Run]) -> (Vec<vsci_dirty::Run>, vsci_dirty::Run) {
    let (&(start, len), rest) = runs.split_last().expect("runs to ship");
    let end = start + len;
    let tail = ((end - 1) & !7).max(start);
    let mut first = rest.to_vec();
    if tail > start {
        first.push((start, tail - start));
    }
    (first, (tail, end - tail))
}

/// Unchanged bytes between two changed runs shorter than this are shipped
/// with them (one RMA write instead of two). They carry this process's view
/// of those bytes, so a peer's store to them in the same instant could be
/// overwritten; 16 bytes keeps that window within a few words of our own
/// stores.
const MERGE_GAP: usize = 16;

/// Ships stores of every remote map of the process in the background.
pub(crate) struct Flusher {
    maps: Mutex<Vec<Weak<RemoteMap>>>,
    count: AtomicUsize,
}

static FLUSHER: OnceLock<Arc<Flusher>> = OnceLock::new();

pub(crate) fn flusher() -> &'static Arc<Flusher> {
    FLUSHER.get_or_init(|| {
        let f = Arc::new(Flusher { maps: Mutex::new(Vec::new()), count: AtomicUsize::new(0) });
        let g = f.clone();
        let h = std::thread::Builder::new().name("vsci-flusher".into()).spawn(move || g.run()).expect("spawn flusher");
        let _ = FLUSHER_THREAD.set(h.thread().clone());
        f
    })
}

/// Are there remote maps at all? (Lets local-only programs skip flushing.)
pub(crate) fn any_remote_maps() -> bool {
    FLUSHER.get().is_some_and(|f| f.count.load(Ordering::Relaxed) > 0)
}

/// Make every store to every remote map visible at its owner.
pub(crate) fn flush_all() -> Result<()> {
    crate::guest::flush_proxied()?;
    if !any_remote_maps() {
        return Ok(());
    }
    flusher().flush_all()
}

impl Flusher {
    fn add(&self, m: &Arc<RemoteMap>) {
        let mut v = self.maps.lock().unwrap();
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(m));
        self.count.store(v.len(), Ordering::Relaxed);
    }

    pub(crate) fn remove(&self, m: &Arc<RemoteMap>) {
        let mut v = self.maps.lock().unwrap();
        v.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(m)));
        self.count.store(v.len(), Ordering::Relaxed);
    }

    fn live(&self) -> Vec<Arc<RemoteMap>> {
        self.maps.lock().unwrap().iter().filter_map(Weak::upgrade).collect()
    }

    fn flush_all(&self) -> Result<()> {
        let mut result = Ok(());
        for m in self.live() {
            if let Err(e) = m.flush() {
                result = Err(e);
            }
        }
        result
    }

    /// Background shipping. After activity (a shipment, or a trapped
    /// access) it checks again every few microseconds for a while (a
    /// ping-pong's next message comes soon); when idle it parks, woken by
    /// the next trapped access ([`wake_flusher`]) or a timeout that only
    /// bounds how stale clean pages may get, so an idle process costs
    /// almost nothing and an untouched map nothing at all.
    ///
    /// It sleeps rather than spins even when busy: the program's own thread
    /// is usually busy-waiting on its segment, and on a machine with few
    /// cores a spinning or yielding flusher only runs when the scheduler
    /// preempts that thread (milliseconds). With real-time priority (see
    /// `vsci_fabric::boost_current_thread`) a flusher waking from a short sleep preempts a spinning
    /// program at once.
    fn run(self: Arc<Self>) {
        const HOT: Duration = Duration::from_millis(20);
        const HOT_SLEEP: Duration = Duration::from_micros(10);
        // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer
        // slack; 1 ns lets the short sleeps below be short.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64);
        }
        vsci_fabric::boost_current_thread();
        let settle = settle_ns();
        let mut last_activity = Instant::now();
        let mut sleep = HOT_SLEEP;
        loop {
            let maps = self.live();
            let mut active = false;
            let hot = last_activity.elapsed() < HOT;
            // The next trapped shipment due, and whether compared (guest)
            // maps need polling rounds.
            let mut due: Option<u64> = None;
            let mut compared = false;
            let mut present = false;
            for m in &maps {
                if m.is_failed() {
                    continue;
                }
                active |= m.activity();
                match &m.trapped {
                    Some(t) => {
                        let (r, next) = t.ship_due(settle);
                        active |= r.unwrap_or(false);
                        if let Some(n) = next {
                            due = Some(due.map_or(n, |d| d.min(n)));
                        }
                        present |= t.has_present();
                    }
                    None => {
                        compared = true;
                        active |= m.ship(false).unwrap_or(false);
                    }
                }
                if m.refresh_due(hot) {
                    active |= m.refresh().unwrap_or(false);
                }
            }
            drop(maps);
            if active {
                last_activity = Instant::now();
                sleep = HOT_SLEEP;
            }
            let hot = last_activity.elapsed() < HOT;
            // Trapped maps need a round only when a shipment falls due (a
            // fault wakes us) or clean pages are to be refreshed; compared
            // maps must be polled.
            let mut wait = if compared && hot {
                HOT_SLEEP
            } else if compared {
                sleep.min(Duration::from_millis(1))
            } else if present {
                if hot { REFRESH_HOT } else { REFRESH_IDLE }
            } else {
                IDLE_PARK
            };
            if let Some(d) = due {
                wait = wait.min(Duration::from_nanos(d.saturating_sub(trapped::now_ns())));
            }
            if wait == HOT_SLEEP || due.is_some() {
                // A short, exact sleep (hrtimer; slack 1 ns).
                std::thread::sleep(wait);
            } else {
                PARKED.store(true, Ordering::SeqCst);
                std::thread::park_timeout(wait);
                PARKED.store(false, Ordering::SeqCst);
                sleep = (sleep * 2).min(IDLE_PARK);
            }
        }
    }
}

/// How long the first store of a shipment may wait for the ones that follow
/// it (`VSCI_SETTLE_US`, default 20 µs).
fn settle_ns() -> u64 {
    std::env::var("VSCI_SETTLE_US").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(20) * 1000
}

/// Whether the flusher is parked (a fault then wakes it).
static PARKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Longest the flusher parks when nothing happens.
const IDLE_PARK: Duration = Duration::from_millis(100);

static FLUSHER_THREAD: OnceLock<std::thread::Thread> = OnceLock::new();

/// Wake the flusher (a store was trapped). Called from the fault handler:
/// `unpark` is an atomic swap and at most one futex wake, no lock or
/// allocation.
pub(crate) fn wake_flusher() {
    if !PARKED.load(Ordering::SeqCst) {
        return;
    }
    if let Some(t) = FLUSHER_THREAD.get() {
        t.unpark();
    }
}


/// Send a trigger (plain or with data) to a remote interrupt, after making
/// every earlier store visible at its owner.
pub(crate) fn send_trigger(ep: &Endpoint, token: u64, data: Option<&[u8]>) -> Result<()> {
    // A map of a node that died fails the flush; a trigger to a dead node
    // still reports what the program asked about: the trigger's own error.
    let flushed = flush_all();
    send_trigger_only(ep, token, data)?;
    flushed
}

/// Send a trigger message, nothing else.
pub(crate) fn send_trigger_only(ep: &Endpoint, token: u64, data: Option<&[u8]>) -> Result<()> {
    let msg = postcard::to_stdvec(&TriggerMsg { token, data: data.map(<[u8]>::to_vec) }).map_err(|_| SciError::System)?;
    ep.rma.fabric.send(&ep.peer, &msg).map_err(|e| {
        log::debug!("vsci: trigger send failed: {e}");
        abandoned(&e, msg);
        SciError::NotConnected
    })
}

#[cfg(test)]
mod tests {
    use super::split_last_word;

    #[test]
    fn last_word_ships_last() {
        // A 512-byte message whose flag's low byte ends the run at 509: the
        // word holding the flag goes alone, after the rest.
        assert_eq!(split_last_word(&[(0, 509)]), (vec![(0, 504)], (504, 5)));
        // Runs below the last one go first, whole.
        assert_eq!(split_last_word(&[(0, 16), (64, 20)]), (vec![(0, 16), (64, 16)], (80, 4)));
        // A last run that ends on a word boundary: its whole last word.
        assert_eq!(split_last_word(&[(8, 24)]), (vec![(8, 16)], (24, 8)));
        // A last run inside one word goes whole, nothing is cut off it.
        assert_eq!(split_last_word(&[(0, 100), (4093, 2)]), (vec![(0, 100)], (4093, 2)));
        assert_eq!(split_last_word(&[(3, 1)]), (vec![], (3, 1)));
    }
}
