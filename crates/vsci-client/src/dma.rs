//! The DMA engine: SISCI DMA queues on a host.
//!
//! A queue carries one transfer at a time (SISCI's queue states: IDLE →
//! POSTED → DONE / ABORTED / ERROR, and POSTED again for the next one). Each
//! queue has its own worker thread, so transfers on different queues run
//! side by side and the program's thread is free while its transfer moves.
//!
//! Where the bytes go:
//! - the remote segment lives on this node (a co-located segment): the
//!   engine maps both memfds itself and copies straight from one to the
//!   other — one `memcpy`, through no intermediate buffer;
//! - the remote segment lives on another node: the engine hands the local
//!   segment's pages to the RMA engine (`vsci-fabric`), which writes them
//!   into, or reads them from, the owner's registered region directly — the
//!   same machinery `SCIMemCpy` uses, without the shadow map in between.
//!
//! The bytes themselves are moved by `vsci_rma::mover`, the one byte mover
//! of this engine and of the node's engine a guest's host side runs for
//! guest programs (`vsci-vm`'s agent): this file keeps the queues, their
//! states, waits, channels and the engine's mappings, and says which
//! memory is which side.
//!
//! Completion is seen by polling [`DmaQueue::state`], by a blocking
//! [`DmaQueue::wait`] (poll, block or spin-then-block, as for interrupts:
//! `VSCI_DMA_WAIT`, else `VSCI_WAIT`, else the node's default), or by a
//! completion closure run on the worker.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;

use vsci_proto::guest::GuestRequest;
use vsci_proto::{SciError, WaitMode};

use crate::conn::Client;
use crate::segment::{LocalSegment, RemoteSegment};
use crate::wait::{self, WaitPolicy, Waited};
use crate::Result;

// DMA channels: what one stands for, the process's pool of them.
mod channel;
pub use channel::{ChannelCore, DmaChannel};

/// `sci_dma_queue_state_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum QueueState {
    Idle = 0,
    Gather = 1,
    Posted = 2,
    Done = 3,
    Aborted = 4,
    Error = 5,
}

impl QueueState {
    fn from_raw(v: u32) -> QueueState {
        match v {
            0 => QueueState::Idle,
            1 => QueueState::Gather,
            2 => QueueState::Posted,
            3 => QueueState::Done,
            4 => QueueState::Aborted,
            _ => QueueState::Error,
        }
    }
}

/// The alignment transfers need, in bytes (what `SCIQuery` reports as
/// `SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT` / `..._OFFSET_ALIGNMENT`): none. The
/// engine copies with `memmove` or hands byte ranges to the RMA engine,
/// neither of which cares, and programs written for Dolphin hardware move
/// single bytes by DMA.
pub const DMA_ALIGN: u64 = 1;

/// Pieces one vector transfer may have on any queue (`DIS_DMA_MAX_VECLEN`),
/// even one created with `maxEntries` 1, as on Dolphin's engines; a queue
/// with a larger `maxEntries` takes vectors that long. `maxEntries` also
/// bounds what the older `SCIEnqueueDMATransfer` API gathers (see
/// [`DmaQueue::enqueue`]).
pub const MAX_VECLEN: usize = 256;

/// DMA channels one process can hold at once (ids `0..DMA_CHANNELS`).
pub const DMA_CHANNELS: u32 = 8;

/// Largest piece moved between two looks at the abort flag and at the
/// remote segment's health (see `vsci_rma::mover`).
const CHUNK: usize = vsci_rma::mover::CHUNK;

/// The local side of a transfer.
#[derive(Clone)]
pub enum DmaLocal {
    Segment(Arc<LocalSegment>),
    /// Program memory (`SCIStartDmaTransferMem`): `len` bytes at `addr`,
    /// which the program keeps valid until the transfer has ended.
    Mem {
        addr: usize,
        len: usize,
    },
}

/// One piece of a transfer (`dis_dma_vec_t` without its flags).
pub use vsci_rma::mover::Piece as DmaEntry;

pub struct Transfer {
    pub local: DmaLocal,
    pub remote: Arc<RemoteSegment>,
    pub entries: Vec<DmaEntry>,
    /// `SCI_FLAG_DMA_READ`: remote → local (default local → remote).
    pub read: bool,
}

/// Run once when a transfer ends, with its status (`Ok`, `Cancelled` after
/// an abort, or the error that stopped it).
pub type Completion = Box<dyn FnOnce(SciError) + Send>;

/// What a queue's engine runs in one go: one transfer (`SCIStartDmaTransfer*`)
/// or the transfers gathered by `SCIEnqueueDMATransfer`, in order, under
/// the queue's channel if it has one.
struct Job {
    transfers: Vec<Transfer>,
    completion: Option<Completion>,
    channel: Option<Arc<ChannelCore>>,
    /// `SCI_FLAG_DMA_RESET`: a job that succeeds leaves the queue IDLE.
    reset_after: bool,
}

struct Shared {
    state: AtomicU32,
    /// Status of the transfer that ended last (a raw `SciError`).
    status: AtomicU32,
    abort: AtomicBool,
    /// The current transfer reports by callback: waiting on it is refused.
    uses_callback: AtomicBool,
    done_sleepers: AtomicU32,
    done_efd: OwnedFd,
    job: Mutex<Option<Job>>,
    /// A transfer sits in `job`, not yet picked up (read without the lock).
    pending: AtomicBool,
    work_sleepers: AtomicU32,
    work_efd: OwnedFd,
    shutdown: AtomicBool,
    policy: WaitPolicy,
    /// In a guest: the connection whose host side runs segment transfers on
    /// the node's engine (API remoting), and this queue's name there.
    forward: Option<(Client, u64)>,
}

pub struct DmaQueue {
    shared: Arc<Shared>,
    pub max_entries: u32,
    /// Transfers enqueued (state GATHER) and not posted yet.
    gather: Mutex<Vec<Transfer>>,
    /// The channel assigned with `SCIAssignDMAChannel`, if any.
    channel: Mutex<Option<Arc<ChannelCore>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    worker_id: OnceLock<std::thread::ThreadId>,
    removed: AtomicBool,
    _client: Client,
}

fn new_eventfd() -> Result<OwnedFd> {
    vsci_sys::eventfd::new().map_err(|_| SciError::Nospc)
}

/// The queue's waiting policy: `VSCI_DMA_WAIT` overrides the mode the
/// descriptor uses for interrupts (`VSCI_WAIT` or the node's default).
fn dma_policy(base: WaitPolicy) -> WaitPolicy {
    let mode = std::env::var("VSCI_DMA_WAIT").ok().and_then(|v| v.parse::<WaitMode>().ok()).unwrap_or(base.mode);
    WaitPolicy { mode, spin: base.spin }
}

impl Client {
    /// Create a DMA queue taking vectors of up to `max_entries` entries.
    pub fn create_dma_queue(&self, max_entries: u32) -> Result<Arc<DmaQueue>> {
        if max_entries == 0 {
            return Err(SciError::IllegalParameter);
        }
        if !self.is_alive() {
            return Err(SciError::NoLinkAccess);
        }
        let shared = Arc::new(Shared {
            state: AtomicU32::new(QueueState::Idle as u32),
            status: AtomicU32::new(SciError::Ok as u32),
            abort: AtomicBool::new(false),
            uses_callback: AtomicBool::new(false),
            done_sleepers: AtomicU32::new(0),
            done_efd: new_eventfd()?,
            job: Mutex::new(None),
            pending: AtomicBool::new(false),
            work_sleepers: AtomicU32::new(0),
            work_efd: new_eventfd()?,
            shutdown: AtomicBool::new(false),
            policy: dma_policy(self.wait_policy()),
            forward: self.is_guest().then(|| {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                (self.clone(), NEXT.fetch_add(1, SeqCst))
            }),
        });
        let s2 = shared.clone();
        let worker = vsci_sys::signals::spawn(std::thread::Builder::new().name("vsci-dma".into()), move || s2.run())
            .map_err(|_| SciError::Nospc)?;
        let q = Arc::new(DmaQueue {
            shared,
            max_entries,
            gather: Mutex::new(Vec::new()),
            channel: Mutex::new(None),
            worker_id: OnceLock::new(),
            worker: Mutex::new(None),
            removed: AtomicBool::new(false),
            _client: self.clone(),
        });
        let _ = q.worker_id.set(worker.thread().id());
        *q.worker.lock().unwrap() = Some(worker);
        Ok(q)
    }
}

impl DmaQueue {
    pub fn state(&self) -> QueueState {
        let st = QueueState::from_raw(self.shared.state.load(SeqCst));
        if st == QueueState::Posted && self.shared.pending.load(SeqCst) {
            self.shared.let_worker_run();
        }
        st
    }

    /// Most pieces one vector transfer on this queue may have:
    /// `DIS_DMA_MAX_VECLEN`, or the queue's `maxEntries` if larger.
    pub fn max_vector(&self) -> usize {
        MAX_VECLEN.max(self.max_entries as usize)
    }

    pub fn wait_policy(&self) -> WaitPolicy {
        self.shared.policy
    }

    /// Check a transfer against the queue and both segments; every error a
    /// bad argument can cause is found here, before anything moves.
    fn validate(&self, t: &Transfer) -> Result<()> {
        let local_size = match &t.local {
            DmaLocal::Segment(s) => s.size,
            DmaLocal::Mem { addr, len } => {
                // A NULL buffer is refused after the vector's shape, as
                // before the pieces are looked at.
                if *addr == 0 && !t.entries.is_empty() && t.entries.len() <= self.max_vector() {
                    return Err(SciError::IllegalParameter);
                }
                *len as u64
            }
        };
        vsci_rma::mover::check(&t.entries, self.max_vector(), local_size, t.remote.size)?;
        if t.remote.is_lost() {
            return Err(SciError::SegmentNotConnected);
        }
        if !t.remote.client().is_alive() {
            return Err(SciError::NoLinkAccess);
        }
        Ok(())
    }

    /// Start a transfer. With `wait` it runs in the calling thread and the
    /// call returns its status (`SCI_FLAG_DMA_WAIT`); otherwise it is handed
    /// to the queue's worker and this returns at once. `completion` runs
    /// when it ends (on the worker, or before a waiting call returns).
    pub fn start(&self, t: Transfer, completion: Option<Completion>, wait: bool) -> Result<()> {
        if self.removed.load(SeqCst) {
            return Err(SciError::IllegalParameter);
        }
        self.validate(&t)?;
        self.claim(None)?;
        self.launch(vec![t], completion, wait, false)
    }

    /// Make the queue POSTED: from any state but POSTED and GATHER (a start
    /// must not mix with transfers gathered for a post), or, for a post,
    /// only from GATHER (`from`).
    fn claim(&self, from: Option<QueueState>) -> Result<()> {
        let sh = &*self.shared;
        let mut cur = sh.state.load(SeqCst);
        loop {
            match from {
                Some(f) if cur != f as u32 => return Err(SciError::IllegalOperation),
                None if cur == QueueState::Posted as u32 => return Err(SciError::Busy),
                None if cur == QueueState::Gather as u32 => return Err(SciError::IllegalOperation),
                _ => {}
            }
            match sh.state.compare_exchange(cur, QueueState::Posted as u32, SeqCst, SeqCst) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// Run `transfers` on a queue this thread has just claimed (POSTED).
    fn launch(
        &self,
        transfers: Vec<Transfer>,
        completion: Option<Completion>,
        wait: bool,
        reset_after: bool,
    ) -> Result<()> {
        let sh = &*self.shared;
        // Only the claimant writes these while the queue is POSTED. The
        // previous completion's kick is still in the eventfd (waits on it
        // do not drain: every waiter must see it); clear it for this one.
        wait::drain(sh.done_efd.as_fd());
        sh.abort.store(false, SeqCst);
        sh.uses_callback.store(completion.is_some() && !wait, SeqCst);
        let channel = self.channel.lock().unwrap().clone();
        if wait {
            let status = sh.execute_all(&transfers, channel.as_deref());
            drop(transfers);
            sh.finish(status, completion, reset_after);
            return match status {
                SciError::Ok => Ok(()),
                e => Err(e),
            };
        }
        *sh.job.lock().unwrap() = Some(Job { transfers, completion, channel, reset_after });
        sh.pending.store(true, SeqCst);
        if sh.work_sleepers.load(SeqCst) > 0 {
            wait::kick(sh.work_efd.as_fd());
        }
        Ok(())
    }

    // ---- The DMA queue API that preceded SCIStartDmaTransfer --------------
    //
    // SCIEnqueueDMATransfer gathers transfers (state GATHER, at most
    // `maxEntries` of them), SCIPostDMAQueue runs them in order as one job
    // on the same engine as a start (POSTED, then DONE / ABORTED / ERROR),
    // SCIResetDMAQueue returns the queue to IDLE for the next gather.

    /// Add a transfer to the queue's gather list; returns the new state
    /// (GATHER). A queue that has ended a job (DONE, ABORTED, ERROR) starts
    /// a new list, as after a reset.
    pub fn enqueue(&self, t: Transfer) -> Result<QueueState> {
        if self.removed.load(SeqCst) {
            return Err(SciError::IllegalParameter);
        }
        self.validate(&t)?;
        let sh = &*self.shared;
        let mut gather = self.gather.lock().unwrap();
        let mut cur = sh.state.load(SeqCst);
        loop {
            if cur == QueueState::Posted as u32 {
                return Err(SciError::IllegalOperation);
            }
            if cur == QueueState::Gather as u32 {
                break;
            }
            // Ended or idle: a fresh list.
            match sh.state.compare_exchange(cur, QueueState::Gather as u32, SeqCst, SeqCst) {
                Ok(_) => {
                    gather.clear();
                    break;
                }
                Err(now) => cur = now,
            }
        }
        if gather.len() >= self.max_entries as usize {
            return Err(SciError::MaxEntries);
        }
        gather.push(t);
        Ok(QueueState::Gather)
    }

    /// Post the gathered transfers: they run in order, as one job that ends
    /// the queue DONE, ABORTED or ERROR (IDLE instead of DONE with
    /// `reset_after`, `SCI_FLAG_DMA_RESET`). `wait` and `completion` as for
    /// [`DmaQueue::start`]. Refused (`SCI_ERR_ILLEGAL_OPERATION`) unless the
    /// queue is GATHER.
    pub fn post_then(&self, completion: Option<Completion>, wait: bool, reset_after: bool) -> Result<()> {
        if self.removed.load(SeqCst) {
            return Err(SciError::IllegalParameter);
        }
        let mut gather = self.gather.lock().unwrap();
        if gather.is_empty() {
            return Err(SciError::IllegalOperation);
        }
        self.claim(Some(QueueState::Gather))?;
        let transfers = std::mem::take(&mut *gather);
        drop(gather);
        self.launch(transfers, completion, wait, reset_after)
    }

    /// Back to IDLE, dropping anything gathered. Refused while POSTED.
    pub fn reset(&self) -> Result<()> {
        let sh = &*self.shared;
        let mut gather = self.gather.lock().unwrap();
        let mut cur = sh.state.load(SeqCst);
        loop {
            if cur == QueueState::Posted as u32 {
                return Err(SciError::IllegalOperation);
            }
            match sh.state.compare_exchange(cur, QueueState::Idle as u32, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        gather.clear();
        Ok(())
    }

    /// Run this queue's transfers under `channel` from now on (`None`: on
    /// the engine freely). A job already posted keeps what it started with.
    pub fn assign_channel(&self, channel: Option<&DmaChannel>) {
        *self.channel.lock().unwrap() = channel.map(|c| c.core.clone());
    }

    /// Drop the assignment to `channel` if this queue has it (the channel
    /// is being returned).
    pub fn unassign(&self, channel: &DmaChannel) {
        let mut cur = self.channel.lock().unwrap();
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, &channel.core)) {
            *cur = None;
        }
    }

    /// Wait up to `timeout_ms` for the queue to leave POSTED; returns the
    /// state it ended in, or the error the transfer ended with (`Cancelled`
    /// for an abort). A queue with no transfer posted returns at once.
    pub fn wait(&self, timeout_ms: u32) -> std::result::Result<QueueState, (QueueState, SciError)> {
        let sh = &*self.shared;
        if sh.state.load(SeqCst) == QueueState::Posted as u32 && sh.uses_callback.load(SeqCst) {
            return Err((QueueState::Posted, SciError::IllegalOperation));
        }
        // A waiter with nothing else to do runs a transfer the worker has not
        // picked up yet itself: on a machine with few cores, handing it over
        // costs a wake-up of the worker and one of the waiter, and a
        // spinning waiter can even keep the worker off the CPU. Only
        // unbounded waits do, so a timeout still returns on time.
        if timeout_ms == crate::INFINITE {
            if let Some(job) = sh.take_job() {
                let status = sh.execute_all(&job.transfers, job.channel.as_deref());
                drop(job.transfers);
                sh.finish(status, job.completion, job.reset_after);
            }
        }
        let deadline = wait::deadline(timeout_ms);
        // Until the worker has the transfer, a spinning waiter would only
        // delay it (it is usually queued on this very CPU, where it was
        // woken): step aside instead.
        while sh.pending.load(SeqCst) && sh.state.load(SeqCst) == QueueState::Posted as u32 {
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                break;
            }
            sh.let_worker_run();
        }
        let r = wait::wait_until_sticky(sh.policy, deadline, &sh.done_sleepers, sh.done_efd.as_fd(), || {
            sh.state.load(SeqCst) != QueueState::Posted as u32
        });
        if let Waited::TimedOut = r {
            return Err((QueueState::Posted, SciError::Timeout));
        }
        let st = self.state();
        match st {
            QueueState::Aborted => Err((st, SciError::Cancelled)),
            QueueState::Error => {
                Err((st, SciError::from_raw(sh.status.load(SeqCst)).unwrap_or(SciError::TransferFailed)))
            }
            _ => Ok(st),
        }
    }

    /// Stop the transfer in flight. Returns once the engine has stopped
    /// touching either side's memory; the queue is then ABORTED (or DONE,
    /// if the transfer finished first). With nothing in flight it does
    /// nothing.
    pub fn abort(&self) -> Result<()> {
        let sh = &*self.shared;
        if sh.state.load(SeqCst) != QueueState::Posted as u32 {
            return Ok(());
        }
        sh.abort.store(true, SeqCst);
        if self.on_worker() {
            return Ok(()); // from a callback: the worker is not copying now
        }
        // Wait with the queue's own policy: the engine notices within one
        // chunk.
        wait::wait_until_sticky(sh.policy, None, &sh.done_sleepers, sh.done_efd.as_fd(), || {
            sh.state.load(SeqCst) != QueueState::Posted as u32
        });
        Ok(())
    }

    fn on_worker(&self) -> bool {
        self.worker_id.get() == Some(&std::thread::current().id())
    }

    /// Remove the queue. Refused with `SCI_ERR_ILLEGAL_OPERATION` while a
    /// transfer is in flight (SISCI: "not allowed in this queue state").
    pub fn remove(&self) -> Result<()> {
        if self.state() == QueueState::Posted {
            return Err(SciError::IllegalOperation);
        }
        self.stop_worker();
        Ok(())
    }

    fn stop_worker(&self) {
        if self.removed.swap(true, SeqCst) {
            return;
        }
        self.gather.lock().unwrap().clear();
        *self.channel.lock().unwrap() = None;
        self.shared.shutdown.store(true, SeqCst);
        wait::kick(self.shared.work_efd.as_fd());
        prune_cache();
        let handle = self.worker.lock().unwrap().take();
        // A callback may remove its own queue: the worker then ends by
        // itself once the callback returns.
        if let Some(h) = handle {
            if !self.on_worker() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for DmaQueue {
    /// A queue dropped with a transfer in flight (SCIClose, process exit)
    /// aborts it first, so no memory is touched after its owner is gone.
    fn drop(&mut self) {
        if self.state() == QueueState::Posted {
            let _ = self.abort();
        }
        self.stop_worker();
    }
}

impl Shared {
    fn run(self: Arc<Self>) {
        // The worker never polls forever: between transfers it spins for
        // the spin time (a program posting back to back finds it awake),
        // then sleeps. Only a `block` queue sleeps at once.
        let idle = WaitPolicy {
            mode: if self.policy.mode == WaitMode::Block { WaitMode::Block } else { WaitMode::Adaptive },
            spin: self.policy.spin,
        };
        loop {
            wait::wait_until(idle, None, &self.work_sleepers, self.work_efd.as_fd(), || {
                self.shutdown.load(SeqCst) || self.job.lock().unwrap().is_some()
            });
            if self.shutdown.load(SeqCst) {
                return;
            }
            let Some(job) = self.take_job() else { continue };
            let status = self.execute_all(&job.transfers, job.channel.as_deref());
            drop(job.transfers);
            self.finish(status, job.completion, job.reset_after);
        }
    }

    fn take_job(&self) -> Option<Job> {
        let mut slot = self.job.lock().unwrap();
        let job = slot.take();
        self.pending.store(false, SeqCst);
        job
    }

    /// Give the CPU to the worker if it is waiting for one. A queue's
    /// worker, woken by a start, is typically queued on the starter's CPU;
    /// a thread that spins there for the result keeps it from running.
    fn let_worker_run(&self) {
        std::thread::yield_now();
    }

    /// Publish the outcome, wake waiters, then run the completion (which
    /// may start the next transfer on this queue).
    fn finish(&self, status: SciError, completion: Option<Completion>, reset_after: bool) {
        let st = match status {
            SciError::Ok if reset_after => QueueState::Idle,
            SciError::Ok => QueueState::Done,
            SciError::Cancelled => QueueState::Aborted,
            _ => QueueState::Error,
        };
        self.status.store(status as u32, SeqCst);
        self.state.store(st as u32, SeqCst);
        if self.done_sleepers.load(SeqCst) > 0 {
            wait::kick(self.done_efd.as_fd());
        }
        if let Some(c) = completion {
            c(status);
        }
    }

    fn aborted(&self) -> bool {
        self.abort.load(SeqCst)
    }

    /// Run a job's transfers in order, holding `channel`'s engine for the
    /// whole job; the first one that does not end `Ok` ends the job.
    fn execute_all(&self, transfers: &[Transfer], channel: Option<&ChannelCore>) -> SciError {
        let _engine = match channel {
            Some(c) => match c.acquire(&self.abort) {
                Some(g) => Some(g),
                None => return SciError::Cancelled,
            },
            None => None,
        };
        for t in transfers {
            let st = self.execute(t);
            if st != SciError::Ok {
                return st;
            }
        }
        SciError::Ok
    }

    /// Move the bytes of `t`; `Ok`, `Cancelled` or the failure.
    fn execute(&self, t: &Transfer) -> SciError {
        if t.remote.is_group() {
            return self.execute_group(t);
        }
        if let (Some((client, queue)), DmaLocal::Segment(local)) = (&self.forward, &t.local) {
            return self.execute_forwarded(client, *queue, local, t);
        }
        match (&t.remote.target, &t.remote.agent) {
            (Some(target), _) => self.execute_rma(t, target),
            (None, Some(agent)) => self.execute_agent(t, agent),
            (None, None) => self.execute_local(t),
        }
    }

    /// A reflective-memory group: a write goes to every member at once (one
    /// RMA transfer posted to all remote members), a read comes
    /// from one member (this node's if it is one). A member lost on the way
    /// is left out, as the group's maps leave it out; the transfer fails
    /// only if a member still there failed, or none is left.
    fn execute_group(&self, t: &Transfer) -> SciError {
        let mut members = t.remote.group_members();
        if members.is_empty() {
            return SciError::TransferFailed;
        }
        let one = |m: &Arc<RemoteSegment>| Transfer {
            local: t.local.clone(),
            remote: m.clone(),
            entries: t.entries.clone(),
            read: t.read,
        };
        if t.read {
            members.sort_by_key(|m| m.is_remote());
            return self.execute(&one(&members[0]));
        }
        let statuses: Vec<SciError> = if self.forward.is_some() {
            // In a guest each transfer is one request on this queue's name
            // at the host side: one member at a time.
            members.iter().map(|m| self.execute(&one(m))).collect()
        } else {
            // Members on other nodes get one transfer posted to all of
            // them; one on this node is a copy.
            let rma: Vec<usize> = (0..members.len()).filter(|&i| members[i].target.is_some()).collect();
            let mut st: Vec<SciError> =
                members.iter().map(|m| if m.target.is_some() { SciError::Ok } else { self.execute(&one(m)) }).collect();
            if !rma.is_empty() {
                let to: Vec<_> =
                    rma.iter().map(|&i| (&**members[i].target.as_ref().expect("filtered"), &members[i])).collect();
                for (&i, s) in rma.iter().zip(self.execute_rma_to(t, &to)) {
                    st[i] = s;
                }
            }
            st
        };
        let mut delivered = false;
        for (m, st) in members.iter().zip(statuses) {
            match st {
                SciError::Ok => delivered = true,
                SciError::Cancelled => return SciError::Cancelled,
                _ if m.is_lost() => log::warn!(
                    "vsci: DMA to reflective-memory group {}: member on node {} lost",
                    m.segment_id,
                    m.node_id
                ),
                e => return e,
            }
        }
        if delivered {
            SciError::Ok
        } else {
            SciError::TransferFailed
        }
    }

    /// In a guest, program memory to or from another node's segment: the
    /// guest's host side reads or writes the owner for us, a chunk at a
    /// time through the connection's staging window (the window is not the
    /// segment: bytes copied into it alone would never reach the owner).
    fn execute_agent(&self, t: &Transfer, agent: &crate::guest::AgentPath) -> SciError {
        // The program's earlier stores to remote maps go first.
        if crate::remote::flush_all().is_err() && t.remote.is_lost() {
            return SciError::TransferFailed;
        }
        for e in &t.entries {
            let n = e.size as usize;
            let l_ptr = match &t.local {
                DmaLocal::Mem { addr, .. } => (*addr + e.local_offset as usize) as *mut u8,
                // Segment to segment is forwarded to the host side whole.
                DmaLocal::Segment(_) => return SciError::IllegalOperation,
            };
            let mut off = 0usize;
            while off < n {
                if self.aborted() {
                    return SciError::Cancelled;
                }
                if t.remote.is_lost() {
                    return SciError::TransferFailed;
                }
                let len = CHUNK.min(n - off);
                let roff = e.remote_offset + off as u64;
                let r = if t.read {
                    // SAFETY: the program's buffer, which it vouched for
                    // (SCIStartDmaTransferMem's contract); validate()
                    // checked the segment side.
                    let dst = unsafe { std::slice::from_raw_parts_mut(l_ptr.add(off), len) };
                    agent.read(dst, roff)
                } else {
                    // SAFETY: as above; only read.
                    let src = unsafe { std::slice::from_raw_parts(l_ptr.add(off), len) };
                    agent.ship(roff, &[(0, len)], |(o, k)| &src[o..o + k])
                };
                if let Err(err) = r {
                    log::warn!("vsci: DMA through the host side failed: {}", err.c_name());
                    return SciError::TransferFailed;
                }
                off += len;
            }
        }
        SciError::Ok
    }

    /// In a guest: the node's engine moves the bytes (the guest's host side
    /// runs the transfer between the segments' memory, which it shares with
    /// the guest, and tells us the end with an interrupt). Program memory
    /// (`SCIStartDmaTransferMem`) is guest RAM the host cannot see; those
    /// transfers are copied by this engine inside the guest instead.
    fn execute_forwarded(&self, client: &Client, queue: u64, local: &Arc<LocalSegment>, t: &Transfer) -> SciError {
        // The program's stores to other nodes' segments go first.
        let _ = crate::remote::flush_all();
        let done = client.register_dma(queue);
        let entries = t.entries.iter().map(|e| (e.size, e.local_offset, e.remote_offset)).collect();
        let req = GuestRequest::DmaStart { queue, local: local.id, remote: t.remote.id, entries, read: t.read };
        if let Err(e) = client.call_host_side(req) {
            client.unregister_dma(queue);
            // The program's start already succeeded: a segment lost since is
            // a failed transfer, as on a host.
            return if e == SciError::SegmentNotConnected { SciError::TransferFailed } else { e };
        }
        let mut abort_sent = false;
        let status = loop {
            match done.recv_timeout(std::time::Duration::from_millis(5)) {
                Ok(s) => break s,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if self.aborted() && !abort_sent {
                        abort_sent = true;
                        let _ = client.call_host_side(GuestRequest::DmaAbort { queue });
                    }
                    if !client.is_alive() {
                        break SciError::NoLinkAccess;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break SciError::NoLinkAccess,
            }
        };
        client.unregister_dma(queue);
        status
    }

    /// Co-located segment: copy between the two memfds' pages.
    fn execute_local(&self, t: &Transfer) -> SciError {
        let remote = match seg_mem_remote(&t.remote) {
            Ok(m) => m,
            Err(e) => return e,
        };
        let seg = match local_side(t) {
            Ok(s) => s,
            Err(e) => return e,
        };
        let members = [&t.remote];
        let watch = EngineWatch { sh: self, members: &members, keep: None };
        vsci_rma::mover::copy(local_mem(t, &seg), remote.mem(), &t.entries, t.read, &watch)
    }

    /// Segment of another node: RMA straight between the local pages and
    /// the owner's registered region.
    fn execute_rma(&self, t: &Transfer, target: &crate::remote::RemoteTarget) -> SciError {
        self.execute_rma_to(t, &[(target, &t.remote)])[0]
    }

    /// RMA between the local side and each of `members` (target and
    /// connection): a read from the first, a write to all of them at once
    /// (every member's writes of a batch are posted before any is waited
    /// for). One status per member; a member that fails or is lost is left
    /// out of the rest of the transfer.
    fn execute_rma_to(
        &self,
        t: &Transfer,
        members: &[(&crate::remote::RemoteTarget, &Arc<RemoteSegment>)],
    ) -> Vec<SciError> {
        // The program's earlier stores to remote maps go first, so a DMA
        // never overtakes them (and a DMA read sees them). A flush fails
        // for a member whose segment is lost, which the mover then finds
        // lost.
        let _ = crate::remote::flush_all();
        let seg = match local_side(t) {
            Ok(s) => s,
            Err(e) => return vec![e; members.len()],
        };
        let targets: Vec<&crate::remote::RemoteTarget> = members.iter().map(|m| m.0).collect();
        let segments: Vec<&Arc<RemoteSegment>> = members.iter().map(|m| m.1).collect();
        // After an abandoned operation (the node stopped answering while it
        // was in flight) the provider may still touch the local pages: the
        // watch keeps the engine's mapping of them for the life of the
        // process. Program memory is not ours to keep: reads into it go
        // through a buffer of the mover's (`direct_reads` false).
        let watch = EngineWatch { sh: self, members: &segments, keep: seg.as_ref() };
        vsci_rma::mover::rma(local_mem(t, &seg), seg.is_some(), &targets, &t.entries, t.read, &watch)
    }
}

/// What the mover asks a queue's transfer between chunks.
struct EngineWatch<'a> {
    sh: &'a Shared,
    /// The far sides, in the mover's order.
    members: &'a [&'a Arc<RemoteSegment>],
    /// The engine's mapping of the local segment, kept for good once an RMA
    /// operation on it was abandoned.
    keep: Option<&'a Arc<SegMem>>,
}

impl vsci_rma::mover::Watch for EngineWatch<'_> {
    fn aborted(&self) -> bool {
        self.sh.aborted()
    }

    fn lost(&self, i: usize) -> bool {
        self.members.get(i).is_some_and(|m| m.is_lost())
    }

    fn abandoned(&self) {
        if let Some(m) = self.keep {
            std::mem::forget(m.clone());
        }
    }
}

/// The engine's mapping of the transfer's local segment (`None` for
/// program memory).
fn local_side(t: &Transfer) -> Result<Option<Arc<SegMem>>> {
    match &t.local {
        DmaLocal::Segment(s) => seg_mem_local(s).map(Some),
        DmaLocal::Mem { .. } => Ok(None),
    }
}

/// The transfer's local side as memory the mover reaches by address:
/// `seg`, the engine's mapping of the local segment, or the program's
/// buffer.
fn local_mem<'a>(t: &Transfer, seg: &'a Option<Arc<SegMem>>) -> vsci_rma::LocalMem<'a> {
    match (seg, &t.local) {
        (Some(m), _) => m.mem(),
        // SAFETY: `len` bytes at `addr` are the program's buffer, which it
        // keeps valid until the transfer has ended (SISCI's contract for
        // SCIStartDmaTransferMem, checked non-NULL by validate()); the
        // engine makes no reference over it, only copies by address.
        (None, DmaLocal::Mem { addr, len }) => unsafe { vsci_rma::LocalMem::from_raw(*addr as *mut u8, *len) },
        (None, DmaLocal::Segment(_)) => unreachable!("local_side maps a segment"),
    }
}

// ---------------------------------------------------------------------------
// The engine's own mappings of segment memory.
//
// Mapping per transfer would cost an mmap and a page fault per page every
// time; the engine keeps one mapping of each segment it has used, for as
// long as some segment object of this process refers to that memory. Two
// objects backed by the same memfd (a process connected to its own segment)
// share one mapping, so an overlapping copy between them is a plain memmove.

/// A segment's memory, mapped whole for the engine, which only copies
/// through raw pointers into ranges it validated.
pub(crate) struct SegMem(vsci_sys::Mapping);

impl SegMem {
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }

    /// The whole segment, for the mover.
    pub(crate) fn mem(&self) -> vsci_rma::LocalMem<'_> {
        // SAFETY: the mapping stays mapped while `self` lives (and for good
        // once an operation on it was abandoned: the engine then forgets a
        // reference to it); the engine only copies through raw pointers
        // into it, making no reference over memory others store to.
        unsafe { vsci_rma::LocalMem::from_raw(self.0.as_ptr(), self.0.len()) }
    }
}

enum Owner {
    Local(Weak<LocalSegment>),
    Remote(Weak<RemoteSegment>),
}

impl Owner {
    fn alive(&self) -> bool {
        match self {
            Owner::Local(w) => w.strong_count() > 0,
            Owner::Remote(w) => w.strong_count() > 0,
        }
    }
    fn addr(&self) -> usize {
        match self {
            Owner::Local(w) => w.as_ptr() as usize,
            Owner::Remote(w) => w.as_ptr() as usize,
        }
    }
}

struct CacheEntry {
    mem: Arc<SegMem>,
    owners: Vec<Owner>,
}

static CACHE: OnceLock<Mutex<HashMap<(u64, u64), CacheEntry>>> = OnceLock::new();

/// Drop mappings of segments no object of this process refers to any more.
fn prune_cache() {
    if let Some(c) = CACHE.get() {
        c.lock().unwrap().retain(|_, e| {
            e.owners.retain(Owner::alive);
            !e.owners.is_empty()
        });
    }
}

fn seg_mem_local(s: &Arc<LocalSegment>) -> Result<Arc<SegMem>> {
    seg_mem(Arc::as_ptr(s) as usize, s.memfd.as_fd(), s.size, || Owner::Local(Arc::downgrade(s)))
}

pub(crate) fn seg_mem_remote(s: &Arc<RemoteSegment>) -> Result<Arc<SegMem>> {
    seg_mem(Arc::as_ptr(s) as usize, s.memfd.as_fd(), s.size, || Owner::Remote(Arc::downgrade(s)))
}

fn seg_mem(
    key: usize,
    fd: std::os::fd::BorrowedFd<'_>,
    size: u64,
    owner: impl FnOnce() -> Owner,
) -> Result<Arc<SegMem>> {
    prune_cache();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    if let Some(e) = cache.values().find(|e| e.owners.iter().any(|o| o.addr() == key)) {
        return Ok(e.mem.clone());
    }
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|_| SciError::System)?;
    let id = (st.st_dev, st.st_ino);
    if let Some(e) = cache.get_mut(&id) {
        e.owners.push(owner());
        return Ok(e.mem.clone());
    }
    let len = usize::try_from(size).map_err(|_| SciError::Nospc)?;
    if len == 0 {
        return Err(SciError::IllegalParameter);
    }
    // A sealed memfd (it cannot shrink under us), mapped at exactly the
    // segment's size.
    let mem = Arc::new(SegMem(vsci_sys::MapOptions::shared().map(fd, len, 0).map_err(|_| SciError::Nospc)?));
    cache.insert(id, CacheEntry { mem: mem.clone(), owners: vec![owner()] });
    Ok(mem)
}
