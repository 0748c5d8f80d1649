//! Interrupts and data interrupts.
//!
//! A trigger is a store into the interrupt's shared page (a counter for
//! plain interrupts, a slot of a bounded multi-producer queue for data
//! interrupts) followed by an eventfd write only if the creator has
//! announced that it sleeps. Waiting follows the [`WaitPolicy`].

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vsci_proto::intr::{self, DATA_MAX};
use vsci_proto::{IntrKind, ObjId, Reply, Request, SciError};

use crate::conn::Client;
use crate::wait::{self, WaitPolicy, Waited};
use crate::Result;

/// A mapping of an interrupt's slot.
struct Page(intr::SlotMap);

impl Page {
    /// Map the slot the node said is at `place` in `fd`, checking it holds
    /// an interrupt of `kind` (a data slot starts with the control words a
    /// plain interrupt uses, so it serves both: a guest's relay page is
    /// one) and is still that use of the slot.
    fn map(fd: &OwnedFd, kind: IntrKind, place: Option<intr::Place>) -> Result<Page> {
        let place = place.filter(|p| p.kind == kind || p.kind == IntrKind::Data).ok_or(SciError::System)?;
        let size = crate::guest::mem_size(fd.as_fd()).ok_or(SciError::System)?;
        intr::SlotMap::new(fd.as_fd(), size, place).map(Page).map_err(|e| {
            if e == nix::Error::EINVAL {
                SciError::System
            } else {
                SciError::Nospc
            }
        })
    }

    fn view(&self) -> intr::View<'_> {
        self.0.view()
    }

    fn get(&self) -> &intr::Shared {
        self.view().shared
    }

    /// The message ring: there for data interrupts, whose slots were
    /// mapped with it.
    fn ring(&self) -> Result<&intr::Ring> {
        self.view().ring.ok_or(SciError::System)
    }
}

pub struct LocalInterrupt {
    client: Client,
    id: ObjId,
    pub kind: IntrKind,
    pub number: u32,
    page: Page,
    eventfd: OwnedFd,
    /// Triggers consumed so far (plain interrupts).
    consumed: AtomicU64,
    /// Next queue position to drain (data interrupts); the lock serialises
    /// threads of this process that wait on the same interrupt.
    tail: Mutex<u64>,
    removed: AtomicBool,
    pub policy: WaitPolicy,
}

/// How a connected interrupt is reached.
enum Path {
    /// Same node: the shared page and eventfd.
    Local { page: Page, eventfd: OwnedFd },
    /// Another node: trigger messages to its RMA engine.
    Rma { ep: crate::remote::Endpoint, token: u64 },
    /// Every node's interrupt of this number (`SCI_FLAG_BROADCAST`, node
    /// `DIS_BROADCAST_NODEID_GROUP_ALL`): a trigger goes to each of them.
    Group(Vec<Arc<RemoteInterrupt>>),
}

pub struct RemoteInterrupt {
    client: Client,
    id: ObjId,
    pub kind: IntrKind,
    pub node_id: u32,
    pub number: u32,
    path: Path,
    gone: Arc<AtomicBool>,
}

fn two_fds(mut fds: Vec<OwnedFd>) -> Result<(OwnedFd, OwnedFd)> {
    if fds.len() != 2 {
        return Err(SciError::System);
    }
    let e = fds.pop().expect("len 2");
    let m = fds.pop().expect("len 2");
    Ok((m, e))
}

impl Client {
    pub fn create_interrupt(&self, kind: IntrKind, hint: u32, fixed: bool) -> Result<Arc<LocalInterrupt>> {
        let (reply, fds) = self.call(Request::CreateInterrupt { kind, hint, fixed })?;
        let Reply::Interrupt { intr, number, place } = reply else { return Err(SciError::System) };
        let (memfd, eventfd) = two_fds(fds)?;
        let i = Arc::new(LocalInterrupt {
            client: self.clone(),
            id: intr,
            kind,
            number,
            page: Page::map(&memfd, kind, Some(place))?,
            eventfd,
            consumed: AtomicU64::new(0),
            tail: Mutex::new(0),
            removed: AtomicBool::new(false),
            policy: self.wait_policy(),
        });
        Ok(i)
    }

    pub fn connect_interrupt(
        &self,
        kind: IntrKind,
        node_id: u32,
        number: u32,
        timeout_ms: u32,
    ) -> Result<Arc<RemoteInterrupt>> {
        let (reply, fds) = self.call(Request::ConnectInterrupt { kind, node_id, number, timeout_ms })?;
        let Reply::InterruptConnected { conn, remote, place } = reply else { return Err(SciError::System) };
        let path = match remote {
            Some(t) => match crate::remote::Endpoint::new(&t.provider, &t.fabric_addr) {
                Ok(ep) => Path::Rma { ep, token: t.token },
                Err(e) => {
                    let _ = self.call(Request::DisconnectInterrupt { conn });
                    return Err(e);
                }
            },
            None => {
                let (memfd, eventfd) = two_fds(fds)?;
                Path::Local { page: Page::map(&memfd, kind, place)?, eventfd }
            }
        };
        if let Path::Rma { ep, .. } = &path {
            crate::remote::watch_interrupt(conn, ep);
        }
        let r = Arc::new(RemoteInterrupt {
            client: self.clone(),
            id: conn,
            kind,
            node_id,
            number,
            path,
            gone: Arc::new(AtomicBool::new(false)),
        });
        self.register_intr_conn(conn, &r.gone);
        Ok(r)
    }
}

/// Outcome of a data-interrupt wait.
pub enum DataWait {
    /// A message of this many bytes was copied out.
    Got(usize),
    /// The next message needs a buffer of this many bytes; it stays queued.
    TooSmall(usize),
}

impl LocalInterrupt {
    fn try_consume(&self) -> bool {
        let shared = self.page.get();
        loop {
            let c = self.consumed.load(Ordering::Acquire);
            if shared.triggers.load(Ordering::Acquire) <= c {
                return false;
            }
            if self.consumed.compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return true;
            }
        }
    }

    fn pending(&self) -> bool {
        let shared = self.page.get();
        match self.kind {
            IntrKind::Plain => shared.triggers.load(Ordering::Acquire) > self.consumed.load(Ordering::Acquire),
            IntrKind::Data => {
                let t = *self.tail.lock().unwrap();
                self.page.ring().is_ok_and(|r| intr::next_len(r, t).is_some())
            }
        }
    }

    /// If other threads of ours sleep and triggers remain, pass the wake-up
    /// on (one eventfd read drains several triggers' writes).
    fn pass_on(&self) {
        if self.page.get().sleepers.load(Ordering::SeqCst) > 0 && self.pending() {
            wait::kick(self.eventfd.as_fd());
        }
    }

    fn check_live(&self) -> Result<()> {
        if self.removed.load(Ordering::SeqCst) {
            return Err(SciError::Cancelled);
        }
        if !self.client.is_alive() {
            return Err(SciError::NoLinkAccess);
        }
        Ok(())
    }

    /// Consume one trigger, waiting up to `timeout_ms`.
    pub fn wait(&self, timeout_ms: u32) -> Result<()> {
        self.check_live()?;
        let deadline = wait::deadline(timeout_ms);
        let shared = self.page.get();
        loop {
            let r = wait::wait_until_or_gone(
                self.policy,
                deadline,
                &shared.sleepers,
                self.eventfd.as_fd(),
                self.client.gone_fd(),
                || self.pending() || self.removed.load(Ordering::Relaxed) || !self.client.is_alive(),
            );
            self.check_live()?;
            match r {
                Waited::TimedOut => {
                    if self.try_consume() {
                        return Ok(());
                    }
                    return Err(SciError::Timeout);
                }
                Waited::Ready => {
                    if self.try_consume() {
                        self.pass_on();
                        return Ok(());
                    }
                    // Another thread of ours took it; wait again.
                }
            }
        }
    }

    /// Receive one data-interrupt message into `buf`, waiting up to
    /// `timeout_ms`.
    pub fn wait_data(&self, buf: &mut [u8], timeout_ms: u32) -> Result<DataWait> {
        self.check_live()?;
        let deadline = wait::deadline(timeout_ms);
        let shared = self.page.get();
        loop {
            if let Some(r) = self.try_take(buf) {
                self.pass_on();
                return Ok(r);
            }
            let r = wait::wait_until_or_gone(
                self.policy,
                deadline,
                &shared.sleepers,
                self.eventfd.as_fd(),
                self.client.gone_fd(),
                || self.pending() || self.removed.load(Ordering::Relaxed) || !self.client.is_alive(),
            );
            self.check_live()?;
            if let Waited::TimedOut = r {
                return self.try_take(buf).ok_or(SciError::Timeout);
            }
        }
    }

    /// Take the next message if one is complete. The length is copied out
    /// and clamped before use: the page is writable by every connector.
    fn try_take(&self, buf: &mut [u8]) -> Option<DataWait> {
        let ring = self.page.ring().ok()?;
        let mut tail = self.tail.lock().unwrap();
        let len = intr::next_len(ring, *tail)?;
        if len > buf.len() {
            return Some(DataWait::TooSmall(len));
        }
        // A producer may rewrite the length between the look and the take
        // (only a hostile one would): the take clamps it again, and we
        // copy no more than the caller's buffer holds.
        let mut msg = [0u8; DATA_MAX];
        let n = intr::try_dequeue(self.page.get(), ring, &mut tail, &mut msg)?.min(buf.len());
        buf[..n].copy_from_slice(&msg[..n]);
        Some(DataWait::Got(n))
    }

    /// Remove the interrupt; waiters get `SCI_ERR_CANCELLED`.
    pub fn remove(&self) -> Result<()> {
        if self.removed.load(Ordering::SeqCst) {
            return Err(SciError::IllegalParameter);
        }
        let r = self.client.call(Request::RemoveInterrupt { intr: self.id });
        self.removed.store(true, Ordering::SeqCst);
        wait::kick(self.eventfd.as_fd());
        match r {
            Ok(_) | Err(SciError::NoLinkAccess) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }
}

/// How long a trigger on a full data-interrupt queue keeps retrying.
const FULL_QUEUE_WAIT: Duration = Duration::from_secs(1);

impl Client {
    /// Connect to interrupt `number` of every node that has one (this node
    /// included), waiting up to `timeout_ms` for at least one; a trigger of
    /// the result reaches all of them.
    pub fn connect_interrupt_group(
        &self,
        kind: IntrKind,
        number: u32,
        timeout_ms: u32,
    ) -> Result<Arc<RemoteInterrupt>> {
        let members = self.sweep_cluster(timeout_ms, |n| self.connect_interrupt(kind, n, number, 0))?;
        Ok(Arc::new(RemoteInterrupt {
            client: self.clone(),
            id: 0,
            kind,
            node_id: crate::remote::group::GROUP_ALL,
            number,
            path: Path::Group(members),
            gone: Arc::new(AtomicBool::new(false)),
        }))
    }
}

impl RemoteInterrupt {
    /// Run `f` on each member of a group connection, or on this one: `Ok`
    /// if any member took it (members gone since are skipped), else the
    /// last error.
    fn each(&self, f: impl Fn(&RemoteInterrupt) -> Result<()>) -> Result<()> {
        let Path::Group(members) = &self.path else { return f(self) };
        let mut last = Err(SciError::NotConnected);
        for m in members {
            match f(m) {
                Ok(()) => last = Ok(()),
                Err(e) if last.is_err() => last = Err(e),
                Err(_) => {}
            }
        }
        last
    }

    fn check_live(&self) -> Result<()> {
        if let Path::Group(_) = &self.path {
            return self.each(|m| m.check_live());
        }
        if self.gone.load(Ordering::SeqCst) {
            return Err(SciError::NotConnected);
        }
        if let Path::Local { page, .. } = &self.path {
            if !page.0.is_live() {
                return Err(SciError::NotConnected);
            }
        }
        Ok(())
    }

    pub fn trigger(&self) -> Result<()> {
        if let Path::Group(_) = &self.path {
            return self.each(|m| m.trigger());
        }
        self.check_live()?;
        match &self.path {
            Path::Local { page, eventfd } => {
                // Stores to other nodes' segments must land before the peer
                // wakes; local memory is coherent already.
                crate::remote::flush_all()?;
                if page.get().trigger() {
                    wait::kick(eventfd.as_fd());
                }
                Ok(())
            }
            Path::Rma { ep, token } => crate::remote::send_trigger(ep, *token, None),
            Path::Group(_) => unreachable!("handled above"),
        }
    }

    /// The RMA engine peer triggers go to (another node's interrupt).
    pub(crate) fn rma_peer(&self) -> Option<Arc<vsci_fabric::Peer>> {
        match &self.path {
            Path::Rma { ep, .. } => Some(ep.peer().clone()),
            _ => None,
        }
    }

    pub fn trigger_data(&self, data: &[u8]) -> Result<()> {
        if data.len() > DATA_MAX {
            return Err(SciError::OutOfRange);
        }
        if let Path::Group(_) = &self.path {
            return self.each(|m| m.trigger_data(data));
        }
        self.check_live()?;
        let (page, eventfd) = match &self.path {
            Path::Rma { ep, token } => return crate::remote::send_trigger(ep, *token, Some(data)),
            Path::Local { page, eventfd } => (page, eventfd),
            Path::Group(_) => unreachable!("handled above"),
        };
        crate::remote::flush_all()?;
        let give_up = Instant::now() + FULL_QUEUE_WAIT;
        loop {
            self.check_live()?;
            match page.get().try_enqueue(page.ring()?, page.0.generation(), data) {
                Ok(wake) => {
                    if wake {
                        wait::kick(eventfd.as_fd());
                    }
                    return Ok(());
                }
                Err(intr::EnqueueError::TooLong) => return Err(SciError::OutOfRange),
                Err(intr::EnqueueError::Removed) => return Err(SciError::NotConnected),
                Err(intr::EnqueueError::Full) => {
                    // The creator is not draining: nudge it, back off, give up later.
                    if Instant::now() >= give_up {
                        return Err(SciError::Busy);
                    }
                    wait::kick(eventfd.as_fd());
                    std::thread::yield_now();
                }
            }
        }
    }

    pub fn disconnect(&self) -> Result<()> {
        if let Path::Group(members) = &self.path {
            for m in members {
                m.disconnect()?;
            }
            return Ok(());
        }
        self.client.unregister(self.id);
        crate::remote::unwatch_interrupt(self.id);
        if self.gone.load(Ordering::SeqCst) {
            return Ok(());
        }
        match self.client.call(Request::DisconnectInterrupt { conn: self.id }) {
            Ok(_) | Err(SciError::IllegalParameter | SciError::NoLinkAccess) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
