//! RMA operations: writes (single, many, ordered, posted and finished
//! later) and reads, the completion slots they wait on, and how waits
//! retry and back off.

use super::*;

/// When a posted write completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Complete {
    /// Once its bytes are in the target's memory ([`Delivery`]).
    Placed,
    /// Once sent (the local buffer is free again).
    Sent,
}

/// Completion bookkeeping for one blocking call: how many of its operations
/// are still in flight and the first error. Each posted operation owns one
/// strong count (its context pointer comes from `Arc::into_raw`), so the slot
/// outlives the call even if a completion is dispatched by another thread.
pub(crate) struct OpSlot {
    pub(crate) pending: AtomicUsize,
    pub(crate) error: Mutex<Option<Error>>,
}

impl OpSlot {
    pub(crate) fn new() -> Arc<OpSlot> {
        Arc::new(OpSlot { pending: AtomicUsize::new(0), error: Mutex::new(None) })
    }

    pub(crate) fn fail(&self, e: Error) {
        let mut g = vsci_sys::signals::lock(&self.error);
        if g.is_none() {
            *g = Some(e);
        }
    }

    pub(crate) fn take_error(&self) -> Option<Error> {
        vsci_sys::signals::lock(&self.error).take()
    }
}

/// A write posted by [`Fabric::write_start`] and not yet waited for.
pub struct PendingWrite {
    pub(crate) posted: Option<Posted>,
    pub(crate) data: Option<Vec<u8>>,
    pub(crate) fi_addr: u64,
}

// SAFETY: the registrations (LocalMr) are libfabric objects of an endpoint
// opened FI_THREAD_SAFE, which may be closed from any thread; the rest is
// owned data and an Arc'd slot of atomics.
unsafe impl Send for PendingWrite {}

impl Drop for PendingWrite {
    /// Dropped without [`Fabric::write_finish`] while still in flight: the
    /// provider may still read the buffer and use the registrations, so
    /// both are kept for good.
    fn drop(&mut self) {
        if let Some(p) = self.posted.take() {
            if p.slot.pending.load(Ordering::Acquire) != 0 {
                std::mem::forget(p);
                std::mem::forget(self.data.take());
            }
        }
    }
}

impl PendingWrite {
    /// The bytes being written.
    pub fn data(&self) -> &[u8] {
        self.data.as_deref().unwrap_or(&[])
    }
}

/// Writes posted by one call and not yet waited for: the slot counting them,
/// the local registrations and the probe read's buffer they may still use.
pub(crate) struct Posted {
    pub(crate) slot: Arc<OpSlot>,
    pub(crate) locals: Vec<LocalMr>,
    /// On the heap, so moving `Posted` does not move what the provider
    /// writes into.
    pub(crate) probe: Box<[u8; 1]>,
    /// Whether posting went through (what was posted is waited for anyway).
    pub(crate) result: Result<()>,
    pub(crate) fi_addr: u64,
}

impl Fabric {
    /// Writes `local` to `remote` at `offset`; returns once the data is
    /// visible in the target's memory.
    pub fn write(&self, peer: &Peer, local: &[u8], remote: &RemoteRegion, offset: u64) -> Result<()> {
        self.write_many(peer, &[(local, offset)], remote)
    }

    /// Posts all writes (`(local data, offset in remote)`), then waits for
    /// all; returns once every one is visible in the target's memory. On
    /// error, every write already posted has still completed (successfully or
    /// not) before this returns, so the borrowed buffers are free again.
    pub fn write_many(&self, peer: &Peer, runs: &[(&[u8], u64)], remote: &RemoteRegion) -> Result<()> {
        self.write_many_mem(peer, &mems(runs), remote)
    }

    /// [`write_many`](Self::write_many) from memory named by address
    /// ([`LocalMem`]), such as memory other parties write meanwhile.
    pub fn write_many_mem(&self, peer: &Peer, runs: &[(LocalMem, u64)], remote: &RemoteRegion) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        retry_reconnect(|| self.write_many_once(peer, runs, remote))
    }

    /// Like [`write_many`](Self::write_many), but every byte of `then` is
    /// placed in the target's memory after every byte of `first`, whatever
    /// order the target places the bytes of one write in.
    ///
    /// Why: the target's provider copies a write into memory with `memcpy`,
    /// whose stores do not go in address order (glibc's AVX-512 copy of 257
    /// to 512 bytes stores its last 64-byte block first and the one 256
    /// bytes before the end last), so a reader polling the last word of a
    /// write can see it before the rest. Writes posted one after the other
    /// are placed in that order only if the provider grants WAW ordering
    /// ([`Info::ordered_writes`]); otherwise `first` is waited for before
    /// `then` is posted, which costs a round trip.
    pub fn write_many_ordered(
        &self,
        peer: &Peer,
        first: &[(&[u8], u64)],
        then: &[(&[u8], u64)],
        remote: &RemoteRegion,
    ) -> Result<()> {
        self.write_many_ordered_mem(peer, &mems(first), &mems(then), remote)
    }

    /// [`write_many_ordered`](Self::write_many_ordered) from memory named by
    /// address ([`LocalMem`]).
    pub fn write_many_ordered_mem(
        &self,
        peer: &Peer,
        first: &[(LocalMem, u64)],
        then: &[(LocalMem, u64)],
        remote: &RemoteRegion,
    ) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        // `first` may be posted as fewer, larger operations than runs: its
        // total bounds the largest of them.
        let total: u64 = first.iter().map(|r| r.0.len() as u64).sum();
        if first.is_empty() || then.is_empty() || total > self.inner.info.ordered_writes {
            // A retry after a broken connection re-sends `first` and then
            // `then`, so the order still holds for what lands last.
            retry_reconnect(|| self.write_many_once(peer, first, remote))?;
            return retry_reconnect(|| self.write_many_once(peer, then, remote));
        }
        retry_reconnect(|| self.write_groups_once(peer, &[first, then], remote))
    }

    pub(crate) fn write_many_once(&self, peer: &Peer, runs: &[(LocalMem, u64)], remote: &RemoteRegion) -> Result<()> {
        self.write_groups_once(peer, &[runs], remote)
    }

    /// Posts the groups' writes in order (each group's operations after the
    /// previous group's), then waits for all of them.
    pub(crate) fn write_groups_once(
        &self,
        peer: &Peer,
        groups: &[&[(LocalMem, u64)]],
        remote: &RemoteRegion,
    ) -> Result<()> {
        self.finish(self.post_groups(peer, groups, remote, Complete::Placed))
    }

    /// Like [`write_many_ordered`](Self::write_many_ordered) to several
    /// targets at once (the members of a reflective-memory group): every
    /// target's writes are posted before any is waited for, so the data
    /// travels to all of them in parallel. One result per target, in order;
    /// a target that fails does not stop the others.
    pub fn write_many_ordered_multi(
        &self,
        targets: &[(&Peer, &RemoteRegion)],
        first: &[(&[u8], u64)],
        then: &[(&[u8], u64)],
    ) -> Vec<Result<()>> {
        self.write_many_ordered_multi_mem(targets, &mems(first), &mems(then))
    }

    /// [`write_many_ordered_multi`](Self::write_many_ordered_multi) from
    /// memory named by address ([`LocalMem`]).
    pub fn write_many_ordered_multi_mem(
        &self,
        targets: &[(&Peer, &RemoteRegion)],
        first: &[(LocalMem, u64)],
        then: &[(LocalMem, u64)],
    ) -> Vec<Result<()>> {
        let total: u64 = first.iter().map(|r| r.0.len() as u64).sum();
        let together = !first.is_empty() && !then.is_empty() && total <= self.inner.info.ordered_writes;
        let phases: Vec<Vec<&[(LocalMem, u64)]>> =
            if together { vec![vec![first, then]] } else { vec![vec![first], vec![then]] };
        let mut results: Vec<Result<()>> =
            targets.iter().map(|(peer, _)| self.check_peer(peer).and_then(|()| self.check_up(peer))).collect();
        for groups in &phases {
            let posted: Vec<Option<Posted>> = targets
                .iter()
                .zip(&results)
                .map(|((peer, remote), r)| r.is_ok().then(|| self.post_groups(peer, groups, remote, Complete::Placed)))
                .collect();
            for (i, p) in posted.into_iter().enumerate() {
                if let Some(p) = p {
                    results[i] = self.finish(p);
                }
            }
        }
        // A connection that broke under us: the one-target path re-sends
        // the whole shipment, in order, while the provider reconnects.
        for (i, (peer, remote)) in targets.iter().enumerate() {
            if results[i].as_ref().is_err_and(Error::connection_lost) {
                results[i] = self.write_many_ordered_mem(peer, first, then, remote);
            }
        }
        results
    }

    /// Post a write of `data` to `remote` at `offset` and return at once;
    /// [`write_finish`](Self::write_finish) waits for it (the bytes are
    /// then in the target's memory), [`write_done`](Self::write_done) says
    /// whether it would wait. Writes posted to one peer are placed in the
    /// order they were posted when the provider grants WAW ordering
    /// ([`Info::ordered_writes`]).
    pub fn write_start(&self, peer: &Peer, data: Vec<u8>, remote: &RemoteRegion, offset: u64) -> Result<PendingWrite> {
        let n = data.len();
        self.write_start_runs(peer, data, &[(0..n, offset)], remote)
    }

    /// [`write_start`](Self::write_start) of several runs of one buffer:
    /// `data[range]` to `offset` each, posted (and, with WAW ordering,
    /// placed) in the order given. A message sent to the same peer after
    /// this returns is delivered after the writes are placed when the
    /// provider orders sends after writes (`FI_ORDER_SAW` in
    /// [`Info::msg_order`]).
    pub fn write_start_runs(
        &self,
        peer: &Peer,
        data: Vec<u8>,
        runs: &[(std::ops::Range<usize>, u64)],
        remote: &RemoteRegion,
    ) -> Result<PendingWrite> {
        self.write_start_with(peer, data, &[runs], remote, Complete::Placed)
    }

    /// [`write_start_runs`](Self::write_start_runs) for a writer that
    /// learns of placement otherwise (a message it sends after the writes,
    /// delivered after them: [`Info::messages_follow_writes`]): the writes
    /// complete once sent, so the target's engine sends no acknowledgement
    /// per write. [`write_done`](Self::write_done) then says the buffer is
    /// free again, not that the bytes are in place.
    pub fn write_post_runs(
        &self,
        peer: &Peer,
        data: Vec<u8>,
        runs: &[(std::ops::Range<usize>, u64)],
        remote: &RemoteRegion,
    ) -> Result<PendingWrite> {
        self.write_start_with(peer, data, &[runs], remote, Complete::Sent)
    }

    /// Post groups of runs of one buffer, each group placed after the ones
    /// before it (separate operations, WAW) and the runs of one group in one
    /// operation where the provider takes that many; `placed`: complete once
    /// the bytes are in the target's memory ([`write_start_runs`](Self::write_start_runs)),
    /// else once sent ([`write_post_runs`](Self::write_post_runs)).
    pub fn write_start_groups(
        &self,
        peer: &Peer,
        data: Vec<u8>,
        groups: &[&[(std::ops::Range<usize>, u64)]],
        remote: &RemoteRegion,
        placed: bool,
    ) -> Result<PendingWrite> {
        self.write_start_with(peer, data, groups, remote, if placed { Complete::Placed } else { Complete::Sent })
    }

    pub(crate) fn write_start_with(
        &self,
        peer: &Peer,
        data: Vec<u8>,
        groups: &[&[(std::ops::Range<usize>, u64)]],
        remote: &RemoteRegion,
        complete: Complete,
    ) -> Result<PendingWrite> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        if groups.iter().flat_map(|g| g.iter()).any(|(r, _)| r.start > r.end || r.end > data.len()) {
            return Err(Error::Invalid("a run outside the buffer"));
        }
        let ops: Vec<Vec<(LocalMem, u64)>> = groups
            .iter()
            .map(|g| g.iter().map(|(r, off)| (LocalMem::from_slice(&data[r.clone()]), *off)).collect())
            .collect();
        let refs: Vec<&[(LocalMem, u64)]> = ops.iter().map(|g| &g[..]).collect();
        let posted = self.post_groups(peer, &refs, remote, complete);
        drop(refs);
        drop(ops);
        if posted.result.is_err() {
            let r = self.finish(posted);
            if matches!(r, Err(Error::Abandoned)) {
                std::mem::forget(data);
            }
            return Err(r.err().unwrap_or(Error::Abandoned));
        }
        // The provider holds pointers into `data`'s heap buffer, which the
        // PendingWrite keeps (moving the Vec does not move the bytes).
        Ok(PendingWrite { posted: Some(posted), data: Some(data), fi_addr: peer.fi_addr })
    }

    /// Has the write completed (successfully or not)?
    pub fn write_done(&self, w: &PendingWrite) -> bool {
        w.posted.as_ref().is_none_or(|p| p.slot.pending.load(Ordering::Acquire) == 0)
    }

    /// Has the write completed, and without an error?
    pub fn write_succeeded(&self, w: &PendingWrite) -> bool {
        self.write_done(w)
            && w.posted.as_ref().is_none_or(|p| p.result.is_ok() && vsci_sys::signals::lock(&p.slot.error).is_none())
    }

    /// Would waiting for `w` never end (its peer was declared down)?
    pub fn write_abandoned(&self, w: &PendingWrite) -> bool {
        self.inner.is_down(w.fi_addr)
    }

    /// Wait for a write posted with [`write_start`](Self::write_start).
    /// After `Err(Abandoned)` its buffer is kept for good (the provider may
    /// still read it).
    pub fn write_finish(&self, w: PendingWrite) -> Result<()> {
        self.write_finish_keep(w).0
    }

    /// [`write_finish`](Self::write_finish), handing back the written
    /// buffer (to write again after a failure, or to reuse) unless the
    /// write was abandoned.
    pub fn write_finish_keep(&self, mut w: PendingWrite) -> (Result<()>, Option<Vec<u8>>) {
        let data = w.data.take();
        let Some(posted) = w.posted.take() else { return (Ok(()), data) };
        let r = self.finish(posted);
        if matches!(r, Err(Error::Abandoned)) {
            std::mem::forget(data);
            return (r, None);
        }
        (r, data)
    }

    /// Posts the groups' writes in order (each group's operations after the
    /// previous group's), and for a provider without delivery completion
    /// the read that proves them placed; [`finish`](Self::finish) waits.
    pub(crate) fn post_groups(
        &self,
        peer: &Peer,
        groups: &[&[(LocalMem, u64)]],
        remote: &RemoteRegion,
        complete: Complete,
    ) -> Posted {
        let _quiet = vsci_sys::signals::quiet();
        let slot = OpSlot::new();
        let mut posted =
            Posted { slot, locals: Vec::new(), probe: Box::new([0u8; 1]), result: Ok(()), fi_addr: peer.fi_addr };
        // Validate everything first so that a bad run posts nothing. The
        // groups stay apart: one operation never mixes runs of two groups,
        // since only separate operations are placed in order.
        let mut ops = Vec::new();
        let mut bounds = Vec::with_capacity(groups.len());
        for runs in groups {
            for &(buf, off) in runs.iter() {
                match remote.addr(off, buf.len()) {
                    Ok(raddr) if !buf.is_empty() => ops.push((buf, raddr)),
                    Ok(_) => {}
                    Err(e) => {
                        posted.result = Err(e);
                        return posted;
                    }
                }
            }
            bounds.push(ops.len());
        }
        let Some(&(last_buf, last_raddr)) = ops.last() else {
            return posted;
        };
        let inner = &*self.inner;
        let flags = match (complete, inner.info.delivery) {
            (Complete::Placed, Delivery::DeliveryComplete) => ffi::FI_COMPLETION | ffi::FI_DELIVERY_COMPLETE,
            _ => ffi::FI_COMPLETION,
        };
        let slot = &posted.slot;
        let locals = &mut posted.locals;
        let mut result = Ok(());
        let mut start = 0;
        let chunks = bounds.iter().flat_map(|&end| {
            let group = &ops[start..end];
            start = end;
            group.chunks(inner.info.iov_limit)
        });
        // Several runs per operation: the per-operation cost dominates small
        // runs (measured about 5-6 µs per operation on tcp;ofi_rxm here).
        for chunk in chunks {
            result = (|| {
                let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; ffi::VF_MAX_IOV];
                let mut desc = [std::ptr::null_mut(); ffi::VF_MAX_IOV];
                let mut raddr = [0u64; ffi::VF_MAX_IOV];
                for (i, &(buf, addr)) in chunk.iter().enumerate() {
                    iov[i] = libc::iovec { iov_base: buf.as_ptr().cast(), iov_len: buf.len() };
                    desc[i] = inner.local_desc(buf.as_ptr(), buf.len(), ffi::FI_WRITE, locals)?;
                    raddr[i] = addr;
                }
                inner.post(slot, "fi_writemsg", peer.fi_addr, |ctx| {
                    // SAFETY: the buffers stay valid (slices borrowed, or
                    // LocalMem::from_raw's promise: the caller's runs
                    // outlive `finish`) and their registrations stay in
                    // `locals` until finish's wait_slot has seen every
                    // posted operation complete; the arrays hold
                    // chunk.len() <= iov_limit valid entries.
                    unsafe {
                        ffi::vf_writev(
                            inner.ctx,
                            iov.as_ptr(),
                            desc.as_mut_ptr(),
                            raddr.as_ptr(),
                            chunk.len(),
                            peer.fi_addr,
                            remote.key,
                            ctx,
                            flags,
                        )
                    }
                })
            })();
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() && complete == Complete::Placed && inner.info.delivery == Delivery::ReadAfterWrite {
            // FI_ORDER_RAW: the target serves this read after every earlier
            // write from us, so its completion proves they landed.
            let raddr = last_raddr + last_buf.len() as u64 - 1;
            result = inner.post_read(slot, peer, LocalMem::from_mut(&mut posted.probe[..]), raddr, remote.key, locals);
        }
        posted.result = result;
        posted
    }

    /// Waits for everything [`post_groups`](Self::post_groups) posted.
    pub(crate) fn finish(&self, p: Posted) -> Result<()> {
        let waited = self.inner.wait_slot(&p.slot, p.fi_addr);
        abandon_locals(&waited, (p.locals, p.probe));
        p.result.and(waited)
    }

    /// Reads `local.len()` bytes from `remote` at `offset`.
    pub fn read(&self, peer: &Peer, local: &mut [u8], remote: &RemoteRegion, offset: u64) -> Result<()> {
        self.read_mem(peer, LocalMem::from_mut(local), remote, offset)
    }

    /// [`read`](Self::read) into memory named by address ([`LocalMem`]).
    pub fn read_mem(&self, peer: &Peer, local: LocalMem, remote: &RemoteRegion, offset: u64) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        let raddr = remote.addr(offset, local.len())?;
        if local.is_empty() {
            return Ok(());
        }
        if !local.writable {
            return Err(Error::Invalid("a read into memory made from a shared slice"));
        }
        retry_reconnect(|| self.read_many_once(peer, &[(local, offset)], &[raddr], remote))
    }

    /// Posts all reads (`(local buffer, offset in remote)`), then waits for
    /// all: several requests pay one wait instead of a round trip each.
    /// Every range is checked before anything is posted, so a bad one reads
    /// nothing. On error, every read already posted has still completed
    /// before this returns, except after [`Error::Abandoned`] (the peer was
    /// declared down): then, as for [`read`](Self::read), the provider may
    /// still write into any of the buffers later, and the caller must keep
    /// them for good.
    pub fn read_many(&self, peer: &Peer, ops: &mut [(&mut [u8], u64)], remote: &RemoteRegion) -> Result<()> {
        let ops: Vec<(LocalMem, u64)> = ops.iter_mut().map(|(buf, off)| (LocalMem::from_mut(buf), *off)).collect();
        self.read_many_mem(peer, &ops, remote)
    }

    /// [`read_many`](Self::read_many) into memory named by address
    /// ([`LocalMem`]).
    pub fn read_many_mem(&self, peer: &Peer, ops: &[(LocalMem, u64)], remote: &RemoteRegion) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        if ops.iter().any(|(buf, _)| !buf.writable) {
            return Err(Error::Invalid("a read into memory made from a shared slice"));
        }
        let raddrs = ops.iter().map(|(buf, off)| remote.addr(*off, buf.len())).collect::<Result<Vec<u64>>>()?;
        retry_reconnect(|| self.read_many_once(peer, ops, &raddrs, remote))
    }

    /// Post a read per buffer (to the matching address of `raddrs`), then
    /// wait for them all; what `read` and `read_many` both do once.
    pub(crate) fn read_many_once(
        &self,
        peer: &Peer,
        ops: &[(LocalMem, u64)],
        raddrs: &[u64],
        remote: &RemoteRegion,
    ) -> Result<()> {
        let slot = OpSlot::new();
        let mut locals = Vec::new();
        let mut posted = Ok(());
        for (&(buf, _), &raddr) in ops.iter().zip(raddrs) {
            if buf.is_empty() {
                continue;
            }
            posted = self.inner.post_read(&slot, peer, buf, raddr, remote.key, &mut locals);
            // What was posted is still waited for below.
            if posted.is_err() {
                break;
            }
        }
        let waited = self.inner.wait_slot(&slot, peer.fi_addr);
        abandon_locals(&waited, locals);
        posted.and(waited)
    }
}

/// Slices as [`LocalMem`]s, for the slice forms of the calls.
fn mems<'a>(runs: &[(&'a [u8], u64)]) -> Vec<(LocalMem<'a>, u64)> {
    runs.iter().map(|&(b, off)| (LocalMem::from_slice(b), off)).collect()
}

/// How long an operation is retried while the connection to its peer is
/// being re-established.
pub(crate) const RECONNECT_WINDOW: Duration = Duration::from_secs(2);

/// Runs `op` again while it fails because the connection to the peer is
/// down ([`Error::connection_lost`]). Measured on tcp;ofi_rxm 1.17: when a
/// target refuses an access (bad key, out of range, no permission) it drops
/// the whole connection; the refused operation completes with ECANCELED,
/// operations in flight on the connection fail with EPIPE, ECONNRESET or
/// ECANCELED (provider error ENOTCONN), and every operation to that peer
/// then fails with ENOTCONN until rxm has processed the shutdown and
/// reconnects on demand, 100-200 ms later. Without this retry, one refused
/// access (e.g. racing with the owner removing a segment) would fail all
/// other traffic to that node for that time. Retrying is safe: RMA writes
/// and reads are idempotent, and an operation that found no connection did
/// nothing.
/// After an abandoned wait the provider may still use the local
/// registrations of that call: keep them for the life of the process.
pub(crate) fn abandon_locals<T>(waited: &Result<()>, locals: T) {
    if matches!(waited, Err(Error::Abandoned)) {
        std::mem::forget(locals);
    } else {
        drop(locals);
    }
}

pub(crate) fn retry_reconnect(mut op: impl FnMut() -> Result<()>) -> Result<()> {
    let start = Instant::now();
    loop {
        match op() {
            Err(e) if e.connection_lost() && start.elapsed() < RECONNECT_WINDOW => {
                log::debug!("fabric: peer connection down, retrying");
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// Adaptive wait used when nobody else drives progress: spin briefly (the
/// answer usually comes within microseconds), then yield, then sleep.
pub(crate) fn backoff(idle: u32) {
    if idle < 64 {
        std::hint::spin_loop();
    } else if idle < 256 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// How a caller waiting for its own operation waits: polling the completion
/// queue (each poll drives the provider: socket reads) for the first
/// `WAIT_POLL`, since an answer from a peer takes tens of microseconds here
/// and a thread that sleeps sooner wakes ~50 µs late (measured: a 4 KiB read
/// took 51 µs on average with sleeps after 256 polls, most of it sleeping);
/// then yielding, then sleeping.
pub(crate) fn wait_backoff(start: Instant) {
    const WAIT_POLL: Duration = Duration::from_micros(300);
    const WAIT_YIELD: Duration = Duration::from_millis(2);
    let waited = start.elapsed();
    if waited < WAIT_POLL {
        std::hint::spin_loop();
    } else if waited < WAIT_YIELD && !crate::process::current_thread_realtime() {
        // A real-time thread's yield gives way to no normal thread (see
        // `Inner::wait_for_poller`): it sleeps instead.
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// How long a post may keep failing with FI_EAGAIN before we give up. A full
/// send queue drains within milliseconds; rxm also answers FI_EAGAIN for
/// as long as it cannot connect to the peer, which for a peer that is gone
/// is forever. Nothing has been posted at that point, so giving up is safe.
pub(crate) const POST_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct LocalMr(pub(crate) *mut ffi::FidMr);

impl Drop for LocalMr {
    fn drop(&mut self) {
        let _quiet = vsci_sys::signals::quiet();
        // SAFETY: the MR came from vf_mr_reg and the operations using it have
        // completed (callers drop these only after wait_slot).
        unsafe { ffi::vf_mr_close(self.0) };
    }
}

impl Inner {
    /// Posts one operation owned by `slot`, retrying on FI_EAGAIN while
    /// driving progress (the queue drains only when completions are read).
    pub(crate) fn post(
        &self,
        slot: &Arc<OpSlot>,
        call: &'static str,
        fi_addr: u64,
        mut f: impl FnMut(*mut c_void) -> isize,
    ) -> Result<()> {
        slot.pending.fetch_add(1, Ordering::AcqRel);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let ctx = Arc::into_raw(slot.clone()) as *mut c_void;
        let start = Instant::now();
        let mut idle = 0;
        loop {
            self.wait_for_poller();
            let ret = f(ctx);
            if ret >= 0 {
                return Ok(());
            }
            let waited = start.elapsed();
            let patient = ret == -ffi::FI_EAGAIN
                && waited >= POST_TIMEOUT
                && vsci_sys::signals::lock(&self.patient).contains(&fi_addr)
                && !self.is_down(fi_addr);
            if ret == -ffi::FI_EAGAIN && (waited < POST_TIMEOUT || patient) {
                if self.progress().unwrap_or(0) == 0 {
                    idle += 1;
                    backoff(idle);
                }
                continue;
            }
            // SAFETY: the operation was not posted, so nobody else will
            // reclaim the reference made by into_raw above.
            drop(unsafe { Arc::from_raw(ctx as *const OpSlot) });
            slot.pending.fetch_sub(1, Ordering::AcqRel);
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            self.failures.fetch_add(1, Ordering::Release);
            if ret == -ffi::FI_EAGAIN {
                return Err(Error::Unreachable { call, waited });
            }
            return check(call, ret);
        }
    }

    pub(crate) fn post_read(
        &self,
        slot: &Arc<OpSlot>,
        peer: &Peer,
        buf: LocalMem,
        raddr: u64,
        key: u64,
        locals: &mut Vec<LocalMr>,
    ) -> Result<()> {
        let _quiet = vsci_sys::signals::quiet();
        let desc = self.local_desc(buf.as_ptr(), buf.len(), ffi::FI_READ, locals)?;
        let (ptr, len) = (buf.as_ptr(), buf.len());
        self.post(slot, "fi_readmsg", peer.fi_addr, |ctx| {
            // SAFETY: the caller keeps buf valid (a borrowed slice, or
            // LocalMem::from_raw's promise) and the registration in `locals`
            // until wait_slot has seen this operation complete.
            unsafe {
                ffi::vf_readmsg(self.ctx, ptr.cast(), len, desc, peer.fi_addr, raddr, key, ctx, ffi::FI_COMPLETION)
            }
        })
    }

    pub(crate) fn is_down(&self, fi_addr: u64) -> bool {
        vsci_sys::signals::lock(&self.down).contains(&fi_addr)
    }

    /// Waits until every operation posted on `slot` has completed. There is
    /// no timeout: the provider may still be using the caller's buffers until
    /// then. A peer whose connection breaks surfaces as an error completion;
    /// one that goes silent is only given up on when the caller declares it
    /// down, and then the call returns [`Error::Abandoned`] (the slot stays
    /// alive through the provider's own reference to it).
    pub(crate) fn wait_slot(&self, slot: &Arc<OpSlot>, fi_addr: u64) -> Result<()> {
        let mut idle = 0u32;
        let start = Instant::now();
        while slot.pending.load(Ordering::Acquire) != 0 {
            if idle > 0 && idle.is_multiple_of(64) && self.is_down(fi_addr) {
                return Err(Error::Abandoned);
            }
            match self.progress() {
                Ok(0) => {
                    idle = idle.saturating_add(1);
                    wait_backoff(start);
                }
                Ok(_) => idle = 0,
                Err(e) => {
                    log::warn!("fabric progress: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        slot.take_error().map_or(Ok(()), Err)
    }
}
