//! Reaching other nodes' segments and interrupts over the RMA engine.
//!
//! A remote segment is mapped as a local *shadow* whose pages are fetched
//! from the owner when the program first touches them, and whose stores
//! are found by trapping the first store to each page (`trapped`). A
//! flusher ships them to the owner with RMA writes, in the background
//! (stores arrive with no call at all) and synchronously at `SCIFlush`,
//! `SCIStoreBarrier`, `SCICheckSequence`, `SCITriggerInterrupt`,
//! `SCIMemCpy` and unmap, which therefore make every earlier store visible
//! at the owner before returning. Each shipment is a snapshot consistent
//! with the program's store order, and its highest changed word is placed
//! at the owner after the rest of it: a flag stored after its data, above
//! it, never shows before that data.
//!
//! A host process reaches the owner over its own RMA endpoint; a guest
//! program, which has none, through its host side ([`Owner::Agent`]): the
//! maps behave the same, only the bytes travel through the guest's window.
//! `SCIMemCpy` with `SCI_FLAG_BLOCK_READ` always reads fresh data from the
//! owner.
//!
//! The RMA side — the process's endpoint, a remote segment's
//! [`RemoteTarget`], trigger messages — is `vsci_rma`'s, which a guest's
//! host side uses too; this module keeps what a program's maps need on top.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use vsci_proto::SciError;

use crate::Result;

pub(crate) mod combine;
pub(crate) mod group;
mod trapped;

pub(crate) use vsci_rma::{Endpoint, RemoteTarget};

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
    ep.set_patient();
    watch().lock().unwrap().segments.insert(Arc::as_ptr(q) as usize, ep.clone());
}

pub(crate) fn unwatch_segment(q: &Arc<crate::conn::EventQueue>) {
    watch().lock().unwrap().segments.remove(&(Arc::as_ptr(q) as usize));
}

pub(crate) fn watch_interrupt(conn: vsci_proto::ObjId, ep: &Endpoint) {
    ep.set_patient();
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

/// Fill `buf` by `read`, which reads into a buffer of ours: bytes land in
/// `buf` only when all of them arrived, and a read the engine abandoned
/// (it may still write later) keeps its buffer for good, never the caller's.
fn bounced(buf: &mut [u8], read: impl FnOnce(&mut [u8]) -> std::result::Result<(), OwnerError>) -> Result<()> {
    let mut bounce = vec![0u8; buf.len()];
    match read(&mut bounce) {
        Ok(()) => {
            buf.copy_from_slice(&bounce);
            Ok(())
        }
        Err(e) => {
            log::debug!("vsci: read from the owner failed: {e}");
            if e.is_abandoned() {
                std::mem::forget(bounce);
            }
            Err(SciError::TransferFailed)
        }
    }
}

/// Where a map's pages come from and where its stores go.
pub(crate) enum Owner {
    /// The owner node itself, over this process's RMA endpoint.
    Rma(Arc<RemoteTarget>),
    /// The guest's host side, which reaches the owner for a guest program.
    Agent(Arc<crate::guest::AgentPath>),
    /// Every member of a reflective-memory group; `bool`: this node's own
    /// member is written too (no `SCI_FLAG_NO_MEMORY_LOOPBACK_MAP`).
    Group(Arc<group::Group>, bool),
}

/// Why a read or write of the owner's memory failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OwnerError {
    #[error("{0}")]
    Rma(#[from] vsci_fabric::Error),
    #[error("the guest's host side answered {}", .0.c_name())]
    Agent(SciError),
}

impl OwnerError {
    /// The RMA engine may still use the memory of the failed operation.
    pub(crate) fn is_abandoned(&self) -> bool {
        matches!(self, OwnerError::Rma(vsci_fabric::Error::Abandoned))
    }
}

impl Owner {
    /// The owner's bytes at segment offset `offset` into `buf`. After an
    /// abandoned RMA read the engine may still write `buf` later.
    pub(crate) fn read_direct(&self, buf: &mut [u8], offset: u64) -> std::result::Result<(), OwnerError> {
        // Combined stores go first: a read is served after them.
        combine::close();
        match self {
            Owner::Rma(t) => Ok(t.read_direct(buf, offset)?),
            Owner::Agent(a) => a.read(buf, offset).map_err(OwnerError::Agent),
            Owner::Group(g, loopback) => g.read_direct(*loopback, buf, offset),
        }
    }

    /// Fresh bytes, landing in `buf` only when all of them arrived.
    pub(crate) fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self {
            Owner::Agent(a) => a.read(buf, offset),
            Owner::Rma(_) | Owner::Group(..) => bounced(buf, |b| self.read_direct(b, offset)),
        }
    }

    /// A shipment: see [`RemoteTarget::write_shipment`].
    pub(crate) fn write_shipment<'a>(
        &self,
        seg_off: u64,
        runs: &[vsci_trap::Run],
        bytes: impl Fn(vsci_trap::Run) -> &'a [u8],
    ) -> std::result::Result<(), OwnerError> {
        combine::close();
        match self {
            Owner::Rma(t) => Ok(t.write_shipment(seg_off, runs, bytes)?),
            Owner::Agent(a) => a.ship(seg_off, runs, bytes).map_err(OwnerError::Agent),
            Owner::Group(g, loopback) => g.write_shipment(*loopback, seg_off, runs, bytes),
        }
    }

    /// `data` to segment offset `offset`, visible at the owner on return.
    fn write(&self, data: &[u8], offset: u64) -> std::result::Result<(), OwnerError> {
        combine::close();
        match self {
            Owner::Rma(t) => Ok(t.write(data, offset)?),
            Owner::Agent(a) => a.ship(offset, &[(0, data.len())], |(o, n)| &data[o..o + n]).map_err(OwnerError::Agent),
            Owner::Group(g, loopback) => {
                g.write_shipment(*loopback, offset, &[(0, data.len())], |(o, n)| &data[o..o + n])
            }
        }
    }
}

/// One map of a remote segment (see `trapped`).
pub(crate) struct RemoteMap {
    trapped: trapped::Trapped,
    /// When clean pages were last dropped to be fetched fresh.
    last_refresh: Mutex<Instant>,
    /// Faults counted when the flusher last looked.
    seen_faults: std::sync::atomic::AtomicU64,
}

impl RemoteMap {
    /// Trap the program's mapping `base..base+len` of a fresh private memfd
    /// (also mapped at `fill`, untrapped, for the library to write), whose
    /// first byte is segment offset `seg_off`; `valid` bytes of it lie
    /// inside the segment. Nothing is fetched until the program touches it.
    pub(crate) fn new(
        owner: Owner,
        base: *mut u8,
        len: usize,
        seg_off: u64,
        valid: usize,
        fill: *mut u8,
        readonly: bool,
    ) -> Result<Arc<RemoteMap>> {
        let trapped = trapped::Trapped::new(owner, base, len, seg_off, valid, fill, readonly)?;
        let m =
            Arc::new(RemoteMap { trapped, last_refresh: Mutex::new(Instant::now()), seen_faults: Default::default() });
        flusher().add(&m);
        Ok(m)
    }

    /// Ship every store made so far; returns after they are visible at
    /// the owner, with whether there was anything to ship.
    pub(crate) fn flush(&self) -> Result<bool> {
        let shipped = self.trapped.ship();
        drain_emulated()?;
        shipped
    }

    /// Write `data` at `off` (bytes from the start of the mapping) and make
    /// it visible at the owner before returning — `SCIMemCpy`'s write.
    /// Earlier stores go first.
    pub(crate) fn write_through(&self, off: usize, data: &[u8]) -> Result<()> {
        drain_emulated()?;
        self.trapped.write_through(off, data)
    }

    /// Drop clean pages so that the program's next access fetches them.
    fn refresh(&self) {
        self.trapped.refresh();
        *self.last_refresh.lock().unwrap() = Instant::now();
    }

    fn refresh_due(&self, hot: bool) -> bool {
        let every = if hot { REFRESH_HOT } else { REFRESH_IDLE };
        self.last_refresh.lock().unwrap().elapsed() >= every
    }

    /// Stop trapping (before the mapping goes away).
    pub(crate) fn close(&self) {
        self.trapped.close();
    }

    /// Has shipping to the owner failed for good?
    /// Stop reaching the owner once `events` says the segment is lost.
    pub(crate) fn watch_lost(&self, events: Arc<crate::conn::EventQueue>) {
        let _ = self.trapped.shadow().lost.set(events);
    }

    pub(crate) fn is_failed(&self) -> bool {
        self.trapped.shadow().failed.load(Ordering::Relaxed)
    }

    /// Did the program touch the map since the last call (a fault: a first
    /// access to a page since it was fetched or shipped)?
    fn activity(&self) -> bool {
        let s = self.trapped.shadow();
        let n = s.faults.load(Ordering::Relaxed);
        let old = self.seen_faults.swap(n, Ordering::Relaxed);
        s.stored.swap(false, Ordering::AcqRel) || n != old
    }
}

/// How often a busy map is refetched, and an idle one (for a trapped map:
/// how often its clean pages are dropped, to be fetched again when touched).
const REFRESH_HOT: Duration = Duration::from_millis(1);
const REFRESH_IDLE: Duration = Duration::from_millis(5);

/// Ships stores of every remote map of the process in the background.
pub(crate) struct Flusher {
    maps: Mutex<Vec<Weak<RemoteMap>>>,
}

/// How many remote maps the process holds, kept beside the flusher's list
/// so that a flush point of a program with none (every local-only program)
/// costs one load: `SCIFlush` after a 64-byte copy is on the hot path.
pub(crate) static REMOTE_MAPS: AtomicUsize = AtomicUsize::new(0);

static FLUSHER: OnceLock<Arc<Flusher>> = OnceLock::new();

pub(crate) fn flusher() -> &'static Arc<Flusher> {
    FLUSHER.get_or_init(|| {
        let f = Arc::new(Flusher { maps: Mutex::new(Vec::new()) });
        let g = f.clone();
        let h = vsci_sys::signals::spawn(std::thread::Builder::new().name("vsci-flusher".into()), move || g.run())
            .expect("spawn flusher");
        let _ = FLUSHER_THREAD.set(h.thread().clone());
        combine::start_timer();
        flush_at_exit();
        f
    })
}

/// Make every store visible at its owner when the process exits, as at a
/// flush point: a store made just before `exit` with no call after it (a
/// combined window, a posted write still queued in the provider, a page
/// waiting for its shipment) would otherwise die with the process, where
/// on hardware it arrives. Registered with the first remote map.
fn flush_at_exit() {
    static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    extern "C" fn at_exit() {
        // A child made by fork() that calls exit() shares the parent's
        // connections: posting or reading on them would corrupt the
        // parent's streams. Only the process that mapped settles.
        if std::process::id() != PID.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = flush_all() {
            log::warn!("vsci: stores made before exit did not all arrive ({})", e.c_name());
        }
        log::debug!("vsci: {}", combine::stats_line());
    }
    PID.store(std::process::id(), Ordering::Relaxed);
    // SAFETY: `at_exit` is a plain function taking nothing; glibc's `atexit`
    // in a shared object registers it for that object, so a `dlclose` of
    // the library runs or drops it before the code goes.
    unsafe { libc::atexit(at_exit) };
}

/// Are there remote maps at all? (Lets local-only programs skip flushing.)
#[inline]
pub(crate) fn any_remote_maps() -> bool {
    REMOTE_MAPS.load(Ordering::Relaxed) > 0
}

/// Make every store to every remote map visible at its owner.
pub(crate) fn flush_all() -> Result<()> {
    if !any_remote_maps() {
        return Ok(());
    }
    FLUSH_EPOCH.fetch_add(1, Ordering::Relaxed);
    combine::close();
    let shipped = flusher().flush_all();
    drain_emulated().and(shipped)
}

/// Flush points so far: stores on either side of one are not one copy
/// (see `trapped::Shadow::emulate`).
static FLUSH_EPOCH: AtomicU64 = AtomicU64::new(0);

pub(crate) fn flush_epoch() -> u64 {
    FLUSH_EPOCH.load(Ordering::Relaxed)
}

/// A store emulated by a trapped map's fault handler (see
/// `trapped::Shadow::emulate`), posted and not yet known to be at its owner.
struct Emulated {
    target: Arc<RemoteTarget>,
    /// Where the write's bytes go: ranges of its buffer and the segment
    /// offset of each, in the order they are placed.
    runs: Vec<(std::ops::Range<usize>, u64)>,
    write: vsci_fabric::PendingWrite,
    /// To a member of a reflective-memory group: a member that failed is
    /// dropped from the group, not an error of the store.
    member: bool,
    /// Posted to complete once sent (no acknowledgement from the owner's
    /// engine): placed only once a later read from the same owner proves it
    /// ([`settle_batch`]). Otherwise posted with delivery completion, placed
    /// when its completion comes.
    posted: bool,
    /// The endpoint's failure count before the write was posted
    /// ([`vsci_fabric::Fabric::failures`]).
    failures_at: u64,
    /// When it was posted (`trapped::now_ns`).
    at_ns: u64,
}

/// Emulated stores in the order they were posted.
static EMULATED: Mutex<std::collections::VecDeque<Emulated>> = Mutex::new(std::collections::VecDeque::new());

/// Held by the one thread settling a batch of emulated stores; a second
/// waits, so that when it returns the stores the first took are settled too.
static SETTLING: Mutex<()> = Mutex::new(());

/// A store settled in the background (the flusher) did not reach its owner:
/// the next flush point reports it.
static EMULATED_LOST: AtomicBool = AtomicBool::new(false);

/// Largest emulated write posted to complete once sent. Each such write keeps
/// its buffer until a flush point or the flusher proves it placed (it may
/// have to be written again), so large string stores keep delivery
/// completion: one acknowledgement per copy of kilobytes costs nothing.
const POSTED_MAX: usize = 4096;

/// Emulated stores waiting past which the fault handler wakes the flusher
/// to settle them (a program that makes no call), and the age at which the
/// flusher settles them anyway. Proving costs the flusher a read round trip,
/// and the flusher runs real-time beside the program: proving every round
/// (1 ms) took the message ring's streaming rate from 10,000 to 2,400-4,700
/// messages a second here; proving every 1,024 stores or 20 ms costs nothing
/// measurable, and holds at most that many small buffers.
const POSTED_WAKE: usize = 1024;
const POSTED_AGE_NS: u64 = 20_000_000;

/// A program that reached a flush point this recently (the last call of
/// `drain_emulated`) is one that flushes its stores: its emulated writes are
/// acknowledged, as one acknowledgement arrives sooner than a proof read
/// made at the flush (measured: the ring with `SCIFlush` after each message
/// ran 6,400-7,300 messages a second with proof reads, 10,300-10,600 with
/// acknowledgements). A program that makes no call gets posted writes.
const FLUSHED_RECENTLY_NS: u64 = 2_000_000;
static LAST_FLUSH_NS: AtomicU64 = AtomicU64::new(0);

/// Emulated writes complete once sent unless `VSCI_POSTED_STORES=0` (read
/// once): then each is acknowledged by the owner's engine, as before.
fn posted_stores_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("VSCI_POSTED_STORES").map_or(true, |v| v != "0"))
}

/// Post an emulated store's bytes to `offset` of `target` and queue it;
/// `posted` sees the bytes (the write's own buffer) before the store is
/// queued. Called from the fault handler. A small write completes once sent,
/// as a store on hardware is posted: the owner's engine sends no
/// acknowledgement for it (an 8-byte message was three writes and three
/// acknowledgements); its placement is proven at the next flush point or
/// background round by one read per owner, served after it (`FI_ORDER_RAW`).
pub(crate) fn post_emulated(
    target: &Arc<RemoteTarget>,
    data: Vec<u8>,
    offset: u64,
    member: bool,
    posted: impl FnOnce(&[u8]),
) -> vsci_fabric::Result<()> {
    // Stores combined before this one go first (see `combine`).
    combine::close();
    let n = data.len();
    post_emulated_groups(target, data, &[&[(0..n, offset)]], member, posted)
}

/// [`post_emulated`] of groups of runs of `data`, each group placed after
/// the ones before it (what a combined window posts, `combine::close`).
pub(crate) fn post_emulated_groups(
    target: &Arc<RemoteTarget>,
    data: Vec<u8>,
    groups: &[&[(std::ops::Range<usize>, u64)]],
    member: bool,
    posted: impl FnOnce(&[u8]),
) -> vsci_fabric::Result<()> {
    let fabric = target.fabric();
    let n = data.len();
    let now = trapped::now_ns();
    let post_only = n <= POSTED_MAX
        && posted_stores_on()
        && fabric.info().reads_follow_writes()
        && now.saturating_sub(LAST_FLUSH_NS.load(Ordering::Relaxed)) >= FLUSHED_RECENTLY_NS;
    let failures_at = fabric.failures();
    let write = fabric.write_start_groups(target.peer(), data, groups, target.region(), !post_only)?;
    let runs: Vec<_> = groups.iter().flat_map(|g| g.iter().cloned()).collect();
    posted(write.data());
    let mut q = vsci_sys::signals::lock(&EMULATED);
    // Acknowledged writes at the front that were placed go first, so the
    // queue stays short without a waiter. One that failed stays, and what
    // follows it: it must be written again before them (`settle_batch`),
    // not here, after writes posted later that may cover the same bytes.
    while q.front().is_some_and(|e| !e.posted && e.target.fabric().write_succeeded(&e.write)) {
        let e = q.pop_front().expect("front");
        let (_, data) = e.target.fabric().write_finish_keep(e.write);
        if let Some(d) = data {
            keep_buffer(d);
        }
    }
    q.push_back(Emulated { target: target.clone(), runs, write, member, posted: post_only, failures_at, at_ns: now });
    let waiting = q.len();
    drop(q);
    if waiting == POSTED_WAKE {
        wake_flusher();
    }
    Ok(())
}

/// Are emulated stores waiting that the flusher should settle: many, or
/// one long enough?
fn emulated_due() -> bool {
    let q = vsci_sys::signals::lock(&EMULATED);
    q.len() >= POSTED_WAKE || q.front().is_some_and(|e| trapped::now_ns().saturating_sub(e.at_ns) >= POSTED_AGE_NS)
}

/// Buffers of finished string-store writes (`emulate_rep`), kept for the
/// next ones: a fresh buffer of a megabyte is a page fault per page when it
/// is filled, and glibc gives such buffers back to the kernel when they are
/// freed (measured: page faults were a fifth of a `memcpy` of 64 KiB-8 MiB
/// into a remote map).
static SPARE_BUFFERS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
/// Smallest buffer worth keeping, largest kept (a string store's most:
/// one `SCIMemCpy` of half a gigabyte must not hold that much for good),
/// and how many are kept.
const SPARE_MIN: usize = 64 << 10;
const SPARE_MAX: usize = 16 << 20;
const SPARE_KEEP: usize = 2;

/// A buffer of `n` bytes (their values unspecified) for an emulated write.
/// Called from the fault handler; the lock is never held around a store
/// to a remote map, so the faulting thread cannot hold it already.
pub(crate) fn spare_buffer(n: usize) -> Vec<u8> {
    let mut b = spare_capacity(n);
    b.resize(n, 0);
    b
}

/// An empty buffer with room for `n` bytes (see [`spare_buffer`]).
pub(crate) fn spare_capacity(n: usize) -> Vec<u8> {
    if n < SPARE_MIN {
        return Vec::with_capacity(n);
    }
    let mut spare = vsci_sys::signals::lock(&SPARE_BUFFERS);
    // The smallest that fits: a small copy must not take the large buffer
    // a large one is about to want.
    let fit = (0..spare.len()).filter(|&i| spare[i].capacity() >= n).min_by_key(|&i| spare[i].capacity());
    let mut b = match fit {
        Some(i) => spare.swap_remove(i),
        None => Vec::with_capacity(n),
    };
    drop(spare);
    b.clear();
    b
}

/// Keep `b` for a later [`spare_buffer`] if it is large but not huge (the
/// largest `SPARE_KEEP` are kept).
pub(crate) fn keep_buffer(b: Vec<u8>) {
    if b.capacity() < SPARE_MIN || b.capacity() > SPARE_MAX {
        return;
    }
    let mut spare = vsci_sys::signals::lock(&SPARE_BUFFERS);
    if spare.len() < SPARE_KEEP {
        spare.push(b);
    } else if let Some(i) =
        (0..spare.len()).min_by_key(|&i| spare[i].capacity()).filter(|&i| spare[i].capacity() < b.capacity())
    {
        let old = std::mem::replace(&mut spare[i], b);
        drop(spare);
        drop(old);
    }
}

/// Wait until every emulated store is in its owner's memory. One that
/// failed on a broken connection is written again (in order, before later
/// ones are looked at); one to a node declared down is given up. Every
/// thread that drains waits for all emulated stores posted before it
/// started, its own and others'.
pub(crate) fn drain_emulated() -> Result<()> {
    thread_local! {
        /// This thread is settling a batch: a flush point reached again on
        /// it (from a signal handler that interrupted the first) must not
        /// wait for the lock it holds.
        static SETTLING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    combine::close();
    LAST_FLUSH_NS.store(trapped::now_ns(), Ordering::Relaxed);
    let held =
        if SETTLING_HERE.with(|s| s.get()) { None } else { Some(SETTLING.lock().unwrap_or_else(|e| e.into_inner())) };
    SETTLING_HERE.with(|s| s.set(true));
    let settled = settle_batch(take_emulated());
    if held.is_some() {
        SETTLING_HERE.with(|s| s.set(false));
    }
    if EMULATED_LOST.swap(false, Ordering::AcqRel) {
        return Err(SciError::TransferFailed);
    }
    settled
}

/// Every emulated store waiting, in the order posted, taken from the queue.
fn take_emulated() -> Vec<Emulated> {
    vsci_sys::signals::lock(&EMULATED).drain(..).collect()
}

/// The flusher's share: settle what is waiting unless a flush point is at it.
fn settle_in_background() {
    let Ok(_one) = SETTLING.try_lock() else { return };
    if settle_batch(take_emulated()).is_err() {
        log::warn!("vsci: an emulated store could not be delivered: its node stopped answering");
        EMULATED_LOST.store(true, Ordering::Release);
    }
}

/// Write an emulated store again, with a blocking delivered write. A write
/// cancelled (`ECANCELED`) is tried again a few times: when its node's
/// engine refuses an access (a store into a segment that went away, sent
/// before this process heard it is lost) it drops the connection, and rxm
/// then cancels the other writes on it with the refusal's own reason, so a
/// write to a segment that is still there looks refused too (measured:
/// `remote_stores` `stores_beside_refused_ones_arrive`). A write that is
/// refused every time is refused.
fn write_again(target: &RemoteTarget, data: &[u8], runs: &[(std::ops::Range<usize>, u64)]) -> vsci_rma::RmaResult {
    for (r, offset) in runs {
        let mut tries = 0;
        loop {
            tries += 1;
            match target.write(&data[r.clone()], *offset) {
                Err(vsci_fabric::Error::Completion { code, .. }) if code == libc::ECANCELED && tries < 4 => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
                Ok(()) => break,
            }
        }
    }
    Ok(())
}

/// Settle emulated stores taken from the queue, in the order posted.
/// Acknowledged writes are placed when they complete. Posted ones are placed
/// when a read from the same owner, made after they completed, completes
/// (the owner's engine serves a read after every write posted before it,
/// `FI_ORDER_RAW`) and no operation of the endpoint failed since before they
/// were posted: a read proves nothing across a connection that broke and was
/// made again (bytes sent into the old one may be lost), and a broken
/// connection fails some operation. From the first store not proven placed
/// on, every store of the batch is written again, in order, with a blocking
/// delivered write, so that what the owner ends with is the program's last
/// value (an acknowledged write after the lost one included).
fn settle_batch(batch: Vec<Emulated>) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    // Wait for every write. `data` None: given up (a node declared down).
    struct Finished {
        target: Arc<RemoteTarget>,
        runs: Vec<(std::ops::Range<usize>, u64)>,
        member: bool,
        posted: bool,
        failures_at: u64,
        data: Option<Vec<u8>>,
        ok: bool,
    }
    let done: Vec<Finished> = batch
        .into_iter()
        .map(|Emulated { target, runs, write, member, posted, failures_at, .. }| {
            let (r, data) = target.fabric().write_finish_keep(write);
            Finished { target, runs, member, posted, failures_at, data, ok: r.is_ok() }
        })
        .collect();
    // A proof per owner, from its last store of the batch: an acknowledged
    // one proves the posted ones before it when the provider places writes
    // in order (WAW); otherwise one read of its last byte (readable: the
    // program's map of it is).
    let mut proofs: Vec<(*const RemoteTarget, bool)> = Vec::new();
    for f in done.iter().rev() {
        let t = Arc::as_ptr(&f.target);
        if proofs.iter().any(|(p, _)| std::ptr::eq(*p, t)) {
            continue;
        }
        let proven = if !f.posted && f.target.fabric().info().ordered_writes == u64::MAX {
            f.ok
        } else {
            // The last byte of the last run (every write has one).
            let last = f.runs.last().map_or(0, |(r, off)| off + (r.len().max(1) as u64) - 1);
            f.ok && f.target.read(&mut [0u8; 1], last).is_ok()
        };
        proofs.push((t, proven));
    }
    let placed = |f: &Finished| {
        let t = Arc::as_ptr(&f.target);
        f.ok && (!f.posted
            || (proofs.iter().any(|(p, proven)| *proven && std::ptr::eq(*p, t))
                && f.target.fabric().failures() == f.failures_at))
    };
    let first_unplaced = done.iter().position(|f| !placed(f)).unwrap_or(done.len());
    let mut result = Ok(());
    // Owners that refused a store written again (the segment went away, its
    // node is down): their later stores are not tried, as each refusal
    // costs the connection (rxm makes it again, 100-200 ms; thousands of
    // stores into a lost segment took a flush 40 s).
    let mut refused: Vec<*const RemoteTarget> = Vec::new();
    for (i, f) in done.into_iter().enumerate() {
        let Finished { target, runs, member, data, .. } = f;
        let t = Arc::as_ptr(&target);
        let r = match data {
            Some(d) if i >= first_unplaced && refused.iter().any(|p| std::ptr::eq(*p, t)) => {
                keep_buffer(d);
                Err(SciError::TransferFailed)
            }
            Some(d) if i >= first_unplaced => {
                log::debug!("vsci: an emulated store is not proven placed; writing it again");
                let r = write_again(&target, &d, &runs);
                keep_buffer(d);
                if let Err(e) = &r {
                    log::debug!("vsci: an emulated store written again failed ({e})");
                    refused.push(t);
                }
                r.map_err(|_| SciError::TransferFailed)
            }
            Some(d) => {
                keep_buffer(d);
                Ok(())
            }
            None => Err(SciError::TransferFailed),
        };
        if r.is_err() {
            if member {
                log::debug!("vsci: an emulated store did not reach a reflective-memory member (the group drops it)");
            } else {
                result = Err(SciError::TransferFailed);
            }
        }
    }
    result
}

impl Flusher {
    fn add(&self, m: &Arc<RemoteMap>) {
        let mut v = self.maps.lock().unwrap();
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(m));
        REMOTE_MAPS.store(v.len(), Ordering::Relaxed);
    }

    pub(crate) fn remove(&self, m: &Arc<RemoteMap>) {
        let mut v = self.maps.lock().unwrap();
        v.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(m)));
        REMOTE_MAPS.store(v.len(), Ordering::Relaxed);
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

    /// Background shipping. A trapped store wakes it ([`wake_flusher`]); it
    /// sleeps until the shipment is due (the settle time after the first
    /// store), ships, and drops clean pages every `REFRESH_HOT` while the
    /// program is busy, `REFRESH_IDLE` when quiet; with no pages mapped it
    /// parks, so an untouched map costs nothing at all.
    ///
    /// It sleeps rather than spins even when busy: the program's own thread
    /// is usually busy-waiting on its segment, and on a machine with few
    /// cores a spinning or yielding flusher only runs when the scheduler
    /// preempts that thread (milliseconds). With real-time priority (see
    /// `vsci_fabric::boost_current_thread`) a flusher waking from a short
    /// sleep preempts a spinning program at once.
    fn run(self: Arc<Self>) {
        const HOT: Duration = Duration::from_millis(20);
        // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer
        // slack; 1 ns lets the short sleeps below be short.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64);
        }
        vsci_fabric::boost_current_thread();
        let settle = settle_ns();
        let mut last_activity = Instant::now();
        loop {
            // Emulated stores posted without acknowledgement keep their
            // buffers until proven placed: a program that makes no call
            // has them proven here, seldom (see `emulated_due`).
            if emulated_due() {
                settle_in_background();
            }
            let maps = self.live();
            let mut active = false;
            let hot = last_activity.elapsed() < HOT;
            // The next shipment due, and whether clean pages are to be
            // refreshed.
            let mut due: Option<u64> = None;
            let mut present = false;
            for m in &maps {
                if m.is_failed() {
                    continue;
                }
                active |= m.activity();
                let (r, next) = m.trapped.ship_due(settle);
                active |= r.unwrap_or(false);
                if let Some(n) = next {
                    due = Some(due.map_or(n, |d| d.min(n)));
                }
                present |= m.trapped.has_present();
                if m.refresh_due(hot) {
                    m.refresh();
                }
            }
            drop(maps);
            if active {
                last_activity = Instant::now();
            }
            let hot = last_activity.elapsed() < HOT;
            // A round is needed only when a shipment falls due (a fault
            // wakes us) or clean pages are to be refreshed.
            let mut wait = if present {
                if hot {
                    REFRESH_HOT
                } else {
                    REFRESH_IDLE
                }
            } else {
                IDLE_PARK
            };
            if let Some(d) = due {
                wait = wait.min(Duration::from_nanos(d.saturating_sub(trapped::now_ns())));
            }
            if due.is_some() {
                // A short, exact sleep (hrtimer; slack 1 ns).
                std::thread::sleep(wait);
            } else {
                PARKED.store(true, Ordering::SeqCst);
                std::thread::park_timeout(wait);
                PARKED.store(false, Ordering::SeqCst);
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
    ep.send_trigger(token, data)?;
    flushed
}
