//! A host process's map of another node's segment, kept by trapping first
//! accesses (see `vsci_trap::trap`).
//!
//! The map is a private memfd (the *shadow*) mapped twice: the program's
//! mapping, trapped, and an untracked *fill* mapping the library writes
//! through. Each page is in one of three states:
//! - **absent**: not mapped in the program's mapping; the first access
//!   traps, the faulting thread fetches the page from the owner (one RMA
//!   read) and maps it in — write-protected for a load, writable for a store;
//! - **clean**: mapped write-protected, holding the owner's bytes as of its
//!   fetch; the first store traps and fetches the page again, so the *twin*
//!   (a private copy) holds exactly what the owner had when this process
//!   began writing the page;
//! - **dirty**: writable; stores land freely. A shipment write-protects the
//!   dirty pages (from then on a store traps and waits for the shipment),
//!   compares each with its twin and writes the changed bytes to the owner.
//!
//! Why that keeps every store (contract lines 1 and 2 of docs/api.md): a
//! byte differs from the twin exactly when the program stored a value other
//! than the owner's at first write, so a repeated store of an old value
//! (the owner cleared it meanwhile) is still a change, and bytes the
//! program did not store always equal the twin and are never sent.
//!
//! Cost follows use: nothing is fetched at map time; a background round
//! drops clean pages from the program's mapping (`zap`), so a page is
//! fetched again only if the program touches it again, and an untouched map
//! costs nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use vsci_trap::trap::{self, Fault, Trap, TrapHandler, TrapOptions};

use super::{Owner, OwnerError};
use crate::Result;
use vsci_proto::SciError;

// The fault path: what one trapped access does (emulate the store, fetch
// the page and the run a stream will want, map it in, mark it dirty).
mod fault;

/// Page bookkeeping, behind one lock taken by fault handlers, shipments and
/// background rounds. Code holding it never touches the program's mapping
/// (that would trap into a handler waiting for this very lock).
struct Pages {
    /// Bit per page: stores may have landed since its last shipment.
    dirty: Vec<u64>,
    dirty_list: Vec<u32>,
    /// Bit per page: mapped in the program's mapping.
    present: Vec<u64>,
    present_list: Vec<u32>,
    /// The owner's bytes of each dirty page at its first write.
    twin: Anon,
    /// Pages the next store fault of a sequential stream fetches and makes
    /// writable at once (see `stream_run`); 1 when the stores are not a
    /// stream.
    ahead: usize,
    /// Where a stream through the last run would go on: the page just past
    /// it in the stream's direction and whether that is upwards (both ways
    /// after a single page). A store fault there continues the stream even
    /// if a shipment has cleaned the run meanwhile.
    stream_edges: [Option<(usize, bool)>; 2],
    /// Stores emulated per page in the current millisecond (see `emulate`):
    /// (millisecond, count); past `EMULATE_MAX` the page takes the twin's
    /// way. Counted by time, not by the flusher's rounds: a flusher parked
    /// for 100 ms (no page mapped, as when every store is emulated) held a
    /// page's count for as long, and a mailbox word stored 65 times in that
    /// time took the twin's way, a fetch and a shipment per store.
    emulated: Vec<(u8, u8)>,
    /// The store burst being emulated: its page, how many stores so far,
    /// when the last emulation ended, and the flush epoch it began in (see
    /// `EMULATE_BURST`).
    burst: (usize, u8, u64, u64),
    /// A page whose last copy was longer than a burst, and until when its
    /// vector stores are not emulated.
    long_copies: (usize, u64),
    /// This map's dirty pages are counted in `DIRTY_MAPS`.
    counted_dirty: bool,
}

impl Pages {
    /// Stores emulated into page `p` this millisecond.
    pub(super) fn emulated(&self, p: usize) -> u8 {
        let (ms, n) = self.emulated[p];
        if ms == this_ms() {
            n
        } else {
            0
        }
    }

    /// Count one more store emulated into page `p`.
    pub(super) fn count_emulated(&mut self, p: usize) {
        let n = self.emulated(p).saturating_add(1);
        self.emulated[p] = (this_ms(), n);
    }
}

/// The current millisecond, modulo 256 (`Pages::emulated`).
fn this_ms() -> u8 {
    (now_ns() / 1_000_000) as u8
}

impl Pages {
    /// After an abandoned RMA operation the engine may still read or write
    /// the twin later: it must never be unmapped. Keep it for good and go
    /// on with a fresh one.
    fn abandon_twin(&mut self, e: &OwnerError) {
        if e.is_abandoned() {
            if let Ok(fresh) = Anon::new(self.twin.0.len()) {
                std::mem::forget(std::mem::replace(&mut self.twin, fresh));
            }
        }
    }
}

/// Maps of this process with stores not shipped yet. A store is emulated
/// only when there are none: an emulated store is posted at once, so a
/// dirty page waiting for its shipment would arrive after a store made
/// later (a payload in a dirty page, then a flag emulated).
static DIRTY_MAPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Drop for Pages {
    /// A map that goes with stores it never shipped (its node died) no
    /// longer holds emulation off for the rest of the process.
    fn drop(&mut self) {
        if self.counted_dirty {
            DIRTY_MAPS.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Pages {
    /// Keep `DIRTY_MAPS` in step after the dirty set changed.
    fn count_dirty(&mut self) {
        let dirty = !self.dirty_list.is_empty();
        if dirty != self.counted_dirty {
            self.counted_dirty = dirty;
            if dirty {
                DIRTY_MAPS.fetch_add(1, Ordering::SeqCst);
            } else {
                DIRTY_MAPS.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

fn bit(v: &[u64], p: usize) -> bool {
    v[p / 64] & (1 << (p % 64)) != 0
}

fn set(v: &mut [u64], list: &mut Vec<u32>, p: usize) {
    if !bit(v, p) {
        v[p / 64] |= 1 << (p % 64);
        // The list was given room for every page: no allocation here,
        // which may run inside a signal handler.
        debug_assert!(list.len() < list.capacity());
        list.push(p as u32);
    }
}

fn clear_all(v: &mut [u64], list: &mut Vec<u32>) {
    for &p in list.iter() {
        v[p as usize / 64] = 0;
    }
    list.clear();
}

/// Anonymous private memory that costs nothing until touched.
struct Anon(vsci_sys::Mapping);

impl Anon {
    fn new(len: usize) -> Result<Anon> {
        vsci_sys::MapOptions::private().noreserve().anonymous(len).map(Anon).map_err(|_| SciError::Nospc)
    }

    fn slice(&self, off: usize, len: usize) -> &[u8] {
        // SAFETY: private memory of ours, only mutated through `slice_mut`,
        // which needs `&mut self` (the call panics if out of bounds).
        unsafe { self.0.as_slice(off, len) }
    }

    fn slice_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: as above, with exclusive access through `&mut self`.
        unsafe { self.0.as_mut_slice(off, len) }
    }
}

/// The fault handler's view of one map.
pub(crate) struct Shadow {
    owner: Owner,
    /// Segment offset of the mapping's first byte.
    seg_off: u64,
    /// The untracked mapping of the same memfd pages.
    fill: usize,
    len: usize,
    /// Bytes of the mapping inside the segment.
    valid: usize,
    page: usize,
    pages: Mutex<Pages>,
    pub(crate) failed: AtomicBool,
    /// The segment's events, whose LOST flag stops the map reaching its
    /// owner (see `check_lost`); unset for a group (a lost member is
    /// dropped from it instead).
    pub(crate) lost: OnceLock<Arc<crate::conn::EventQueue>>,
    /// Faults so far (the flusher's sign of activity).
    pub(crate) faults: AtomicU64,
    /// Stores trapped since the flusher last looked.
    pub(crate) stored: AtomicBool,
    /// When the first page dirty since the last shipment became dirty
    /// (`now_ns`), 0 when none is.
    oldest_dirty: AtomicU64,
    /// When the last store fault was handled (`now_ns`). Loads do not
    /// count: a program polling a word faults on every refresh, and its
    /// stores must not wait for that to stop.
    last_write_fault: AtomicU64,
    /// Longest a background shipment waits for faults to stop (ns).
    stream_cap: u64,
    /// The last store fault continued a long sequential stream
    /// (`stream_run`): background shipments wait for it to pause.
    in_stream: AtomicBool,
    /// Least quiet time before a background shipment (ns): for a map
    /// reached through the guest's host side, twice the recent fetch round
    /// trip (see `note_fetch`); 0 for a map of this process's own RMA
    /// endpoint.
    settle_floor: AtomicU64,
    /// Reached through the guest's host side (`Owner::Agent`, or a group
    /// whose members are).
    via_agent: bool,
}

/// CLOCK_MONOTONIC in nanoseconds (a vDSO call: fine in a signal handler).
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// SAFETY: `fill` is an address of a mapping owned by the `Map` that owns the
// `RemoteMap` holding this; it outlives every use (the trap is unregistered
// and this is dropped before the mapping goes). The twin pointer is only
// used behind the mutex.
unsafe impl Send for Shadow {}
// SAFETY: as above.
unsafe impl Sync for Shadow {}

impl Shadow {
    /// Is the map failed, or its segment lost? A lost segment's memory is
    /// gone at the owner: its node's engine refuses what is still sent to
    /// it, and each refusal costs this process its connection to that node
    /// (rxm makes it again), which the program's other segments there share.
    /// So from the LOST event on, the map is failed: stores complete in the
    /// shadow and nothing more is sent.
    pub(crate) fn check_lost(&self) -> bool {
        if self.lost.get().is_some_and(|q| q.lost.load(Ordering::Relaxed)) && !self.failed.swap(true, Ordering::SeqCst)
        {
            log::debug!("vsci: a map's segment is lost; its stores are no longer sent");
        }
        self.failed.load(Ordering::Relaxed)
    }
}

impl Shadow {
    fn lock(&self) -> vsci_sys::signals::Locked<'_, Pages> {
        vsci_sys::signals::lock(&self.pages)
    }

    fn fill_range(&self, off: usize, n: usize) -> &[u8] {
        assert!(off + n <= self.len);
        // SAFETY: in bounds of the fill mapping (asserted), alive as long
        // as we are (see the Send impl).
        unsafe { std::slice::from_raw_parts((self.fill + off) as *const u8, n) }
    }

    #[allow(clippy::mut_from_ref)]
    fn fill_page(&self, p: usize) -> &mut [u8] {
        // SAFETY: p < number of pages, so the page lies inside the fill
        // mapping (alive, see the Send impl). The program may touch the
        // same memfd page through its own mapping only where the page is
        // mapped there, which callers rule out or accept (see callers).
        unsafe { std::slice::from_raw_parts_mut((self.fill + p * self.page) as *mut u8, self.page) }
    }

    /// Make page `p` exist in the memfd without changing a byte of it
    /// (UFFDIO_CONTINUE maps only pages the memfd has).
    fn allocate(&self, p: usize) {
        // SAFETY: the page lies in the fill mapping (alive, see the Send
        // impl). A compare-exchange of a byte with its own value is a
        // write access (it allocates the page) that cannot undo a store
        // the program makes meanwhile: if the byte changed, it fails.
        // (An idempotent `fetch_or(0)` is not enough: LLVM turns it into a
        // fenced load, and a load does not make the page exist: measured,
        // UFFDIO_CONTINUE then failed with EFAULT on every retry.)
        let b = unsafe { &*((self.fill + p * self.page) as *const std::sync::atomic::AtomicU8) };
        let v = b.load(Ordering::Relaxed);
        let _ = b.compare_exchange(v, v, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Bytes of page `p` that lie inside the segment.
    fn page_valid(&self, p: usize) -> usize {
        self.valid.saturating_sub(p * self.page).min(self.page)
    }
}

/// A trapped map: the registration and the state behind it.
pub(crate) struct Trapped {
    shadow: Arc<Shadow>,
    trap: Mutex<Option<Arc<Trap>>>,
}

impl Trapped {
    /// Trap `base..base+len` (the program's mapping of a fresh private
    /// memfd, also mapped at `fill`).
    pub(crate) fn new(
        owner: Owner,
        base: *mut u8,
        len: usize,
        seg_off: u64,
        valid: usize,
        fill: *mut u8,
        readonly: bool,
    ) -> Result<Trapped> {
        let page = vsci_trap::page_size();
        let npages = len / page;
        let words = npages.div_ceil(64);
        let pages = Pages {
            dirty: vec![0; words],
            dirty_list: Vec::with_capacity(npages),
            present: vec![0; words],
            present_list: Vec::with_capacity(npages),
            twin: Anon::new(len)?,
            ahead: 1,
            stream_edges: [None, None],
            emulated: vec![(0, 0); npages],
            burst: (usize::MAX, 0, 0, 0),
            long_copies: (usize::MAX, 0),
            counted_dirty: false,
        };
        let owner_kind = match &owner {
            Owner::Rma(_) => OwnerKind::Rma,
            Owner::Agent(_) => OwnerKind::Agent,
            Owner::Group(g, _) if g.through_agent() => OwnerKind::Agent,
            Owner::Group(..) => OwnerKind::Rma,
        };
        let shadow = Arc::new(Shadow {
            owner,
            seg_off,
            fill: fill as usize,
            len,
            valid,
            page,
            pages: Mutex::new(pages),
            failed: AtomicBool::new(false),
            lost: OnceLock::new(),
            faults: AtomicU64::new(0),
            stored: AtomicBool::new(false),
            oldest_dirty: AtomicU64::new(0),
            last_write_fault: AtomicU64::new(0),
            in_stream: AtomicBool::new(false),
            settle_floor: AtomicU64::new(0),
            via_agent: owner_kind == OwnerKind::Agent,
            stream_cap: match owner_kind {
                OwnerKind::Rma => STREAM_CAP_RMA,
                OwnerKind::Agent => STREAM_CAP_AGENT,
            },
        });
        // SAFETY: `base..base+len` is a page-aligned shared memfd mapping the
        // owning `Map` keeps until after `close()` unregisters the trap.
        let trap = unsafe { Trap::new(base, len, TrapOptions { writes: !readonly }, shadow.clone()) }.map_err(|e| {
            log::warn!("vsci: cannot trap accesses to a remote map: {e}");
            SciError::System
        })?;
        Ok(Trapped { shadow, trap: Mutex::new(Some(trap)) })
    }

    pub(crate) fn shadow(&self) -> &Arc<Shadow> {
        &self.shadow
    }

    /// Ship every store made so far; returns after they are visible at the
    /// owner, with whether there was anything to ship.
    pub(crate) fn ship(&self) -> Result<bool> {
        let trap = self.trap.lock().unwrap().clone();
        let Some(trap) = trap else { return Ok(false) };
        let mut g = self.shadow.lock();
        self.ship_locked(&trap, &mut g)
    }

    /// The background shipment: ship once the first page made dirty since
    /// the last shipment has been so for `settle` (the program's store has
    /// landed, and the stores that follow it in the same page) and no store
    /// has faulted for `settle` either, but no later than `stream_cap`
    /// after that first store; else say when that will be (ns, `now_ns`
    /// clock).
    ///
    /// Shipping sooner would write-protect a page the program is still
    /// writing: its next store would trap and fetch the page again. And a
    /// program streaming through fresh pages faults once per page, each
    /// fault a read from the owner: a shipment between two of them holds
    /// the map for a write round trip and doubles the cost of every page
    /// (two owner round trips per page instead of one).
    pub(crate) fn ship_due(&self, settle: u64) -> (Result<bool>, Option<u64>) {
        if let Some(due) = self.not_due(settle) {
            return (Ok(false), due);
        }
        let trap = self.trap.lock().unwrap().clone();
        let Some(trap) = trap else { return (Ok(false), None) };
        let mut g = self.shadow.lock();
        // Again under the lock: a store fault may have held it until just
        // now (its owner read takes a round trip). Shipping the moment it
        // lets go would write-protect the pages it just opened, under the
        // program that is about to write them.
        if let Some(due) = self.not_due(settle) {
            return (Ok(false), due);
        }
        (self.ship_locked(&trap, &mut g), None)
    }

    /// `None` when a background shipment is due now, else `Some` of when it
    /// will be (`None` inside: nothing to ship).
    fn not_due(&self, settle: u64) -> Option<Option<u64>> {
        let s = &*self.shadow;
        let since = s.oldest_dirty.load(Ordering::Acquire);
        if since == 0 {
            return Some(None);
        }
        // A sequential stream faults once per run, a read round trip
        // apart: waiting only `settle` would ship (and write-protect)
        // between two runs, each shipment holding the next fault for a
        // write round trip. While a long stream runs, quiet means a quarter
        // of the cap without a store fault.
        let settle = settle.max(s.settle_floor.load(Ordering::Relaxed));
        let quiet_for = if s.in_stream.load(Ordering::Acquire) { settle.max(s.stream_cap / 4) } else { settle };
        let quiet = s.last_write_fault.load(Ordering::Acquire).max(since) + quiet_for;
        let due = quiet.min(since + settle.max(s.stream_cap));
        (now_ns() < due).then_some(Some(due))
    }

    fn ship_locked(&self, trap: &Trap, g: &mut Pages) -> Result<bool> {
        let s = &*self.shadow;
        if s.check_lost() {
            return Err(SciError::TransferFailed);
        }
        if g.dirty_list.is_empty() {
            return Ok(false);
        }
        s.oldest_dirty.store(0, Ordering::Release);
        g.dirty_list.sort_unstable();
        // Write-protect first: from here no store lands in these pages
        // (a store traps and waits for this lock), so what is compared
        // below is one snapshot, consistent with the program's order.
        for (first, n) in page_runs(&g.dirty_list) {
            if let Err(e) = trap.protect(first * s.page, n * s.page) {
                log::error!("vsci: cannot write-protect a remote map: {e}");
                return Err(SciError::System);
            }
        }
        let mut runs: Vec<vsci_trap::Run> = Vec::new();
        for &p in &g.dirty_list {
            let p = p as usize;
            let n = s.page_valid(p);
            let base = p * s.page;
            let now = &s.fill_page(p)[..n];
            let twin = g.twin.slice(base, n);
            diff_into(now, twin, base, &mut runs);
        }
        // The twin learns what is shipped: it is the owner's bytes once
        // the writes land.
        for &(off, n) in &runs {
            g.twin.slice_mut(off, n).copy_from_slice(s.fill_range(off, n));
        }
        let Pages { dirty, dirty_list, .. } = g;
        clear_all(dirty, dirty_list);
        g.count_dirty();
        if runs.is_empty() {
            return Ok(false);
        }
        let twin = &g.twin;
        let r = s.owner.write_shipment(s.seg_off, &runs, |(o, n)| twin.slice(o, n));
        match r {
            Ok(()) => Ok(true),
            Err(e) => {
                log::warn!("RMA write to node failed ({e}); stores to this map are no longer shipped");
                s.failed.store(true, Ordering::SeqCst);
                g.abandon_twin(&e);
                Err(SciError::TransferFailed)
            }
        }
    }

    /// `SCIMemCpy`'s write: earlier stores first, then `data` at `off` as
    /// one RMA write, visible at the owner on return.
    pub(crate) fn write_through(&self, off: usize, data: &[u8]) -> Result<()> {
        let s = &*self.shadow;
        if off.checked_add(data.len()).is_none_or(|e| e > s.valid) {
            return Err(SciError::OutOfRange);
        }
        // Copy first, outside the lock: `data` may itself lie in a trapped
        // map (reading it can trap into a handler that needs the lock), and
        // a write abandoned under a dead link may leave the engine holding
        // the buffer, which must then stay ours for good. Into a kept
        // buffer: a fresh one of megabytes faults in page by page.
        let mut copy = super::spare_capacity(data.len());
        copy.extend_from_slice(data);
        let bytes: &[u8] = &copy;
        let trap = self.trap.lock().unwrap().clone();
        let Some(trap) = trap else { return Err(SciError::TransferFailed) };
        let mut g = s.lock();
        self.ship_locked(&trap, &mut g)?;
        if let Err(e) = s.owner.write(bytes, s.seg_off + off as u64) {
            log::warn!("RMA write to node failed ({e}); stores to this map are no longer shipped");
            s.failed.store(true, Ordering::SeqCst);
            if e.is_abandoned() {
                std::mem::forget(copy);
            }
            return Err(SciError::TransferFailed);
        }
        // No page is dirty now (just shipped, and stores wait for the lock):
        // the shadow takes the owner's new bytes. The twin need not: it is
        // read only for dirty pages, and each page's first store after a
        // shipment fetches it afresh.
        let mut done = 0;
        while done < bytes.len() {
            let at = off + done;
            let p = at / s.page;
            let within = at - p * s.page;
            let n = (s.page - within).min(bytes.len() - done);
            s.fill_page(p)[within..within + n].copy_from_slice(&bytes[done..done + n]);
            done += n;
        }
        drop(g);
        super::keep_buffer(copy);
        Ok(())
    }

    /// Are any pages mapped in the program's mapping (to refresh)?
    /// Asked by the flusher every round: it must not wait for the lock,
    /// which a store fault holds across an owner round trip (the fault then
    /// slept on the flusher's hold when the flusher got it first; measured
    /// with `perf`). Held means a fault is mapping pages: say yes.
    pub(crate) fn has_present(&self) -> bool {
        match self.shadow.pages.try_lock() {
            Ok(g) => !g.present_list.is_empty(),
            Err(std::sync::TryLockError::Poisoned(e)) => !e.into_inner().present_list.is_empty(),
            Err(std::sync::TryLockError::WouldBlock) => true,
        }
    }

    /// Drop clean pages from the program's mapping so that the next access
    /// to each fetches it fresh. Returns how many were dropped.
    pub(crate) fn refresh(&self) -> usize {
        let trap = self.trap.lock().unwrap().clone();
        let Some(trap) = trap else { return 0 };
        // A page dropped now is fetched again at its next access, with a
        // read that the owner serves after every write this process posted
        // to it before (FI_ORDER_RAW): stores emulated into the page and
        // still on their way are in what that read returns.
        let s = &*self.shadow;
        let mut g = s.lock();
        if g.present_list.is_empty() {
            return 0;
        }
        let Pages { dirty, present, present_list, .. } = &mut *g;
        let mut zap: Vec<u32> = Vec::with_capacity(present_list.len());
        present_list.retain(|&p| {
            if bit(dirty, p as usize) {
                true
            } else {
                present[p as usize / 64] &= !(1 << (p as usize % 64));
                zap.push(p);
                false
            }
        });
        zap.sort_unstable();
        for (first, n) in page_runs(&zap) {
            let _ = trap.zap(first * s.page, n * s.page);
        }
        zap.len()
    }

    /// Stop trapping (before the mapping goes away).
    pub(crate) fn close(&self) {
        let _ = super::drain_emulated();
        if let Some(t) = self.trap.lock().unwrap().take() {
            trap::unregister(&t);
        }
    }
}

/// Longest a background shipment waits while the program keeps faulting
/// fresh pages: a host's faults are RMA reads (tens of µs), a guest's are
/// control round trips to its host side (ms under emulation).
const STREAM_CAP_RMA: u64 = 1_000_000;
const STREAM_CAP_AGENT: u64 = 50_000_000;

/// Emulated stores are on unless `VSCI_EMULATE=0` (read once).
fn emulation_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VSCI_EMULATE").map_or(true, |v| v != "0"))
}

/// Most stores emulated per page in one millisecond: more is a page being
/// filled, shipped cheaper as one write of its changed bytes. (A ping-pong of small messages makes about
/// ten rounds per millisecond, each a store or two of payload and a flag.)
const EMULATE_MAX: u8 = 64;

/// Most stores of one burst emulated: stores into one page, each trapping
/// less than `EMULATE_BURST_GAP_NS` after the one before. Each costs a trap
/// and a posted write, and the owner's engine one wake-up per write (about
/// 50 µs of a round trip each when the nodes share cores, as in the tests
/// here); the twin's way costs one trap and a read round trip, after which
/// the rest of the copy is free. Three covers a message of up to 64 bytes
/// (`memcpy` stores it with one or two vector stores) and its flag.
const EMULATE_BURST: u8 = 3;
/// After a copy longer than a burst, a page's vector stores take the twin's
/// way for this long: a program sending messages of one size does not pay
/// the burst's emulated stores before each one.
const EMULATE_LONG_NS: u64 = 10_000_000;
/// Most bytes of one string store done at one fault (the rest traps again).
const REP_MAX: usize = 16 << 20;

/// Stores further apart than this (from the end of one emulation to the
/// next fault) are not one copy.
const EMULATE_BURST_GAP_NS: u64 = 20_000;

/// Most pages one store fault of a sequential stream fetches (128 KiB with
/// 4 KiB pages): past that the read's own transfer time dominates its
/// round trip, and a larger run only widens what is fetched ahead of use.
const STREAM_AHEAD_MAX: usize = 32;

/// The read-ahead (pages) from which a stream counts as long: its third
/// run (1 page, then 2, 4, 8).
const STREAM_LONG: usize = 8;

/// Which way a map reaches its owner (sets how long shipments may wait).
#[derive(PartialEq, Eq, Clone, Copy)]
enum OwnerKind {
    Rma,
    Agent,
}

/// Ascending page numbers as (first, count) runs of consecutive pages.
fn page_runs(pages: &[u32]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &p in pages {
        let p = p as usize;
        match out.last_mut() {
            Some(r) if r.0 + r.1 == p => r.1 += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

/// Append the byte runs where `now` differs from `twin` (offsets + `base`),
/// joining a run to one in `out` that it continues. Runs are widened over
/// unchanged bytes only between two changed bytes of one aligned 8-byte
/// word: those carry this process's view of bytes it may not have stored,
/// and another writer may have stored there since, but a value stored in
/// one instruction (a time stamp or a pointer written over zeroes often
/// keeps a byte of the old value) must reach the owner in one write, or
/// the owner can read its low bytes without its high ones.
fn diff_into(now: &[u8], twin: &[u8], base: usize, out: &mut Vec<vsci_trap::Run>) {
    let n = now.len();
    let mut i = 0;
    while i < n {
        // Skip equal words quickly.
        if i % 8 == 0 && i + 8 <= n && now[i..i + 8] == twin[i..i + 8] {
            i += 8;
            continue;
        }
        if now[i] == twin[i] {
            i += 1;
            continue;
        }
        let start = i;
        loop {
            while i < n && now[i] != twin[i] {
                i += 1;
            }
            // A changed byte further on in the word of the last changed
            // one continues the run (`now` is a page of the program's
            // mapping, so its words are the words the program stores).
            let word_end = ((i - 1) / 8 + 1) * 8;
            match (i..word_end.min(n)).find(|&j| now[j] != twin[j]) {
                Some(j) => i = j,
                None => break,
            }
        }
        let (a, len) = (base + start, i - start);
        match out.last_mut() {
            Some(r) if a == r.0 + r.1 => r.1 += len,
            _ => out.push((a, len)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{diff_into, page_runs};

    #[test]
    fn runs_of_pages() {
        assert_eq!(page_runs(&[1, 2, 3, 7, 9, 10]), vec![(1, 3), (7, 1), (9, 2)]);
        assert!(page_runs(&[]).is_empty());
    }

    #[test]
    fn diff_finds_changed_runs() {
        let twin = vec![0u8; 64];
        let mut now = twin.clone();
        now[3] = 1;
        now[5] = 1;
        now[40] = 2;
        now[41] = 2;
        let mut out = Vec::new();
        diff_into(&now, &twin, 4096, &mut out);
        // Bytes 3 and 5 are one word's: the unchanged byte 4 between
        // them goes too, so the word arrives in one write.
        assert_eq!(out, vec![(4099, 3), (4136, 2)]);
        // A run continuing one from the page before joins it.
        let mut start = twin.clone();
        start[0] = 9;
        start[1] = 9;
        let mut out = vec![(4090usize, 6usize)];
        diff_into(&start[..8], &twin[..8], 4096, &mut out);
        assert_eq!(out, vec![(4090, 8)]);
    }

    #[test]
    fn a_word_stored_whole_is_one_run() {
        // A time stamp stored over zeroes, one of whose middle bytes is
        // zero: one run, or the owner can see its low half alone.
        let twin = vec![0u8; 24];
        let mut now = twin.clone();
        now[8..16].copy_from_slice(&0x0000_1d1a_00c3_5e27u64.to_le_bytes());
        let mut out = Vec::new();
        diff_into(&now, &twin, 0, &mut out);
        assert_eq!(out, vec![(8, 6)]);
        // Unchanged bytes between changes in two different words stay
        // out: byte 7 ends one word, byte 9 is in the next.
        let mut now = twin.clone();
        now[6] = 1;
        now[9] = 1;
        let mut out = Vec::new();
        diff_into(&now, &twin, 0, &mut out);
        assert_eq!(out, vec![(6, 1), (9, 1)]);
        // A change in the last byte of a page-end word.
        let mut now = twin.clone();
        now[16] = 1;
        now[23] = 1;
        let mut out = Vec::new();
        diff_into(&now, &twin, 0, &mut out);
        assert_eq!(out, vec![(16, 8)]);
    }
}
