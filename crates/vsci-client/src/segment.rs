//! Local segments (created here) and remote segments (connected here).
//! Both are backed by the memfd the daemon created; mapping one is a plain
//! `mmap` of that memfd, so every map of a segment is the same memory.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use vsci_proto::{ObjId, Reply, Request, SciError};

use crate::conn::{Client, EventQueue};
use crate::Result;

pub struct LocalSegment {
    pub(crate) client: Client,
    pub(crate) id: ObjId,
    pub segment_id: u32,
    pub size: u64,
    pub(crate) memfd: OwnedFd,
    pub events: Arc<EventQueue>,
    pub(crate) maps: AtomicUsize,
    pub(crate) removed: AtomicBool,
    /// Created with `SCI_FLAG_EMPTY`: its memory is the program's, once
    /// registered.
    empty: bool,
    registered: AtomicBool,
    /// `SCI_FLAG_PRIVATE`: never offered to connectors (making it
    /// available succeeds and changes nothing).
    pub private: AtomicBool,
}

pub struct RemoteSegment {
    pub(crate) client: Client,
    pub(crate) id: ObjId,
    pub node_id: u32,
    pub segment_id: u32,
    pub size: u64,
    pub(crate) memfd: OwnedFd,
    pub events: Arc<EventQueue>,
    pub(crate) maps: AtomicUsize,
    /// For a segment of another node: where its memory is (our memfd is
    /// then a shadow whose stores are shipped there).
    pub(crate) target: Option<Arc<crate::remote::RemoteTarget>>,
    /// In a guest: another node's segment, reached through the guest's
    /// host side (our memfd is then the segment's staging window).
    pub(crate) agent: Option<Arc<crate::guest::AgentPath>>,
    /// A reflective-memory group connection (node `GROUP_ALL`): its members
    /// (our memfd is then only a placeholder for maps to replace).
    pub(crate) group: Option<Arc<crate::remote::group::Group>>,
}

fn expect_fd(mut fds: Vec<OwnedFd>) -> Result<OwnedFd> {
    if fds.len() != 1 {
        return Err(SciError::System);
    }
    Ok(fds.remove(0))
}

impl Client {
    /// Create a segment. `segment_id = None` lets the node pick one.
    pub fn create_segment(&self, segment_id: Option<u32>, size: u64) -> Result<Arc<LocalSegment>> {
        self.create_segment_with(segment_id, size, false)
    }

    /// As [`Self::create_segment`]; `empty` (SCI_FLAG_EMPTY): the program
    /// will give the segment its own memory with
    /// [`LocalSegment::register_memory`] before preparing or mapping it.
    pub fn create_segment_with(&self, segment_id: Option<u32>, size: u64, empty: bool) -> Result<Arc<LocalSegment>> {
        self.create_segment_opts(segment_id, size, empty, false)
    }

    /// As [`Self::create_segment_with`]; `broadcast` (SCI_FLAG_BROADCAST):
    /// the segment is this node's member of reflective-memory group
    /// `segment_id`, which group connects ([`Self::connect_group`]) write to.
    pub fn create_segment_opts(
        &self,
        segment_id: Option<u32>,
        size: u64,
        empty: bool,
        broadcast: bool,
    ) -> Result<Arc<LocalSegment>> {
        if size == 0 {
            return Err(SciError::IllegalParameter);
        }
        let req = Request::CreateSegment {
            segment_id: segment_id.unwrap_or(0),
            auto_id: segment_id.is_none(),
            size,
            events: true,
            broadcast,
        };
        self.local_segment(req, empty)
    }

    /// A handle of our own on segment `segment_id` of this node, which its
    /// creator shared (`SCI_ERR_ACCESS` if not). The memory is the same;
    /// removing this handle only detaches.
    pub fn attach_segment(&self, segment_id: u32) -> Result<Arc<LocalSegment>> {
        self.local_segment(Request::AttachSegment { segment_id }, false)
    }

    fn local_segment(&self, req: Request, empty: bool) -> Result<Arc<LocalSegment>> {
        let (reply, fds) = self.call(req)?;
        let Reply::Segment { seg, segment_id, size } = reply else { return Err(SciError::System) };
        let memfd = expect_fd(fds)?;
        let s = Arc::new(LocalSegment {
            client: self.clone(),
            id: seg,
            segment_id,
            size,
            memfd,
            events: Arc::new(EventQueue::default()),
            maps: AtomicUsize::new(0),
            removed: AtomicBool::new(false),
            empty,
            registered: AtomicBool::new(false),
            private: AtomicBool::new(false),
        });
        self.register_sink(seg, &s.events);
        Ok(s)
    }

    /// Connect to segment `segment_id` of node `node_id`, waiting up to
    /// `timeout_ms` for it to exist and be available.
    pub fn connect_segment(&self, node_id: u32, segment_id: u32, timeout_ms: u32) -> Result<Arc<RemoteSegment>> {
        self.connect_segment_with(node_id, segment_id, timeout_ms, false)
    }

    /// As [`Self::connect_segment`]; `broadcast`: only a reflective-memory
    /// member will do.
    pub(crate) fn connect_segment_with(
        &self,
        node_id: u32,
        segment_id: u32,
        timeout_ms: u32,
        broadcast: bool,
    ) -> Result<Arc<RemoteSegment>> {
        let (reply, fds) = self.call(Request::ConnectSegment { node_id, segment_id, timeout_ms, broadcast })?;
        let Reply::Connected { conn, node_id, segment_id, size, remote } = reply else {
            return Err(SciError::System);
        };
        // In a guest, the host side reaches every other node's segment for
        // us (vsci_proto::guest): the memory is then a staging window.
        let proxied = self.is_guest() && node_id != self.node_id();
        let memfd = expect_fd(fds)?;
        let target = match &remote {
            Some(access) => match crate::remote::RemoteTarget::new(access) {
                Ok(t) => Some(Arc::new(t)),
                Err(e) => {
                    let _ = self.call(Request::DisconnectSegment { conn });
                    return Err(e);
                }
            },
            None => None,
        };
        let agent = match proxied {
            true => match crate::guest::AgentPath::new(self.clone(), conn, memfd.as_fd(), size) {
                Ok(a) => Some(Arc::new(a)),
                Err(e) => {
                    let _ = self.call(Request::DisconnectSegment { conn });
                    return Err(e);
                }
            },
            false => None,
        };
        let s = Arc::new(RemoteSegment {
            client: self.clone(),
            id: conn,
            node_id,
            segment_id,
            size,
            memfd,
            events: Arc::new(EventQueue::default()),
            maps: AtomicUsize::new(0),
            target,
            agent,
            group: None,
        });
        if let Some(t) = &s.target {
            crate::remote::watch_segment(&s.events, t.endpoint());
        }
        self.register_sink(conn, &s.events);
        Ok(s)
    }

    /// The group connection over `members` (see [`Self::connect_group`]).
    pub(crate) fn group_segment(
        &self,
        segment_id: u32,
        size: u64,
        group: Arc<crate::remote::group::Group>,
        events: Arc<EventQueue>,
    ) -> Result<Arc<RemoteSegment>> {
        let memfd = crate::remote::group::placeholder_memfd(size)?;
        Ok(Arc::new(RemoteSegment {
            client: self.clone(),
            id: 0,
            node_id: crate::remote::group::GROUP_ALL,
            segment_id,
            size,
            memfd,
            events,
            maps: AtomicUsize::new(0),
            target: None,
            agent: None,
            group: Some(group),
        }))
    }
}

impl LocalSegment {
    /// The segment's memory, to hand to another process (a process VM is
    /// given its RAM this way and nothing else of the node).
    pub fn memfd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.memfd.as_fd()
    }

    fn simple(&self, req: Request) -> Result<()> {
        if self.removed.load(Ordering::SeqCst) {
            return Err(SciError::IllegalParameter);
        }
        self.client.call(req).map(|_| ())
    }

    pub fn prepare(&self) -> Result<()> {
        self.check_has_memory()?;
        self.simple(Request::PrepareSegment { seg: self.id })
    }

    /// An empty segment (`SCI_FLAG_EMPTY`) has no memory to prepare or map
    /// until the program registers some.
    pub fn check_has_memory(&self) -> Result<()> {
        if self.empty && !self.registered.load(Ordering::SeqCst) {
            return Err(SciError::IllegalOperation);
        }
        Ok(())
    }

    /// Make the program's memory `[addr, addr+size)` this empty segment's
    /// memory (SCIRegisterSegmentMemory), zero copy from then on: its
    /// current bytes are copied into the segment once, then the segment is
    /// mapped over the range at the same address, so the program keeps its
    /// pointer and every other map and connector sees the same pages.
    pub fn register_memory(&self, addr: usize, size: usize) -> Result<()> {
        if self.removed.load(Ordering::SeqCst) {
            return Err(SciError::IllegalParameter);
        }
        if !self.empty {
            return Err(SciError::IllegalOperation);
        }
        if addr == 0 {
            return Err(SciError::IllegalParameter);
        }
        if !addr.is_multiple_of(crate::map::PAGE) {
            return Err(SciError::IllegalAddress);
        }
        if size as u64 != self.size {
            return Err(SciError::IllegalParameter);
        }
        if !size.is_multiple_of(crate::map::PAGE) {
            return Err(SciError::SizeAlignment);
        }
        if self.registered.swap(true, Ordering::SeqCst) {
            return Err(SciError::IllegalOperation);
        }
        let r = crate::map::adopt_program_memory(self.memfd.as_fd(), addr, size);
        if r.is_err() {
            self.registered.store(false, Ordering::SeqCst);
        }
        r
    }

    pub fn set_available(&self) -> Result<()> {
        if self.private.load(Ordering::Relaxed) {
            // Never connectable: connects keep finding it unavailable.
            return if self.removed.load(Ordering::SeqCst) { Err(SciError::IllegalParameter) } else { Ok(()) };
        }
        self.simple(Request::SetAvailable { seg: self.id })
    }

    pub fn set_unavailable(&self, notify: bool, force_disconnect: bool) -> Result<()> {
        self.simple(Request::SetUnavailable { seg: self.id, notify, force_disconnect })
    }

    /// Let other programs of this node attach to the segment.
    pub fn share(&self) -> Result<()> {
        self.simple(Request::ShareSegment { seg: self.id })
    }

    /// Remove the segment. Fails with `SCI_ERR_BUSY` while we still map it.
    pub fn remove(&self) -> Result<()> {
        self.remove_with(false)
    }

    /// Remove the segment; `force` (`SCI_FLAG_FORCE_REMOVE`): even while we
    /// still map it. Our maps then stay valid memory, no longer shared with
    /// anyone (the node forgets the segment, its id is free again, and a
    /// new segment under that id has other pages). Connected peers get
    /// `SCI_CB_LOST` either way. With the node gone, the segment went with
    /// it: that counts as removed.
    pub fn remove_with(&self, force: bool) -> Result<()> {
        if !force && self.maps.load(Ordering::SeqCst) > 0 {
            return Err(SciError::Busy);
        }
        match self.simple(Request::RemoveSegment { seg: self.id }) {
            Ok(()) | Err(SciError::NoLinkAccess) => {}
            Err(e) => return Err(e),
        }
        self.removed.store(true, Ordering::SeqCst);
        self.client.unregister(self.id);
        Ok(())
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl RemoteSegment {
    /// True once the owner removed the segment, forced us off, or the node
    /// went away (the LOST flag is raised before any callback runs).
    pub fn is_lost(&self) -> bool {
        self.events.lost.load(Ordering::SeqCst) || !self.client.is_alive()
    }

    /// Disconnect. Fails with `SCI_ERR_BUSY` while we still map it.
    pub fn disconnect(&self) -> Result<()> {
        if self.maps.load(Ordering::SeqCst) > 0 {
            return Err(SciError::Busy);
        }
        if let Some(g) = &self.group {
            for m in g.close() {
                m.disconnect()?;
            }
            return Ok(());
        }
        self.client.unregister(self.id);
        if self.target.is_some() {
            crate::remote::unwatch_segment(&self.events);
        }
        if self.events.lost.load(Ordering::SeqCst) {
            return Ok(()); // the owner already dropped us
        }
        match self.client.call(Request::DisconnectSegment { conn: self.id }) {
            Ok(_) => Ok(()),
            // The owner removed it between our check and the call, or the
            // node is gone: either way we are disconnected.
            Err(SciError::IllegalParameter | SciError::NoLinkAccess) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Is this a segment of another node (reached over the RMA engine,
    /// directly or through a guest's host side)?
    pub fn is_remote(&self) -> bool {
        self.owner().is_some()
    }

    /// Where this segment's memory is, if it is another node's.
    pub(crate) fn owner(&self) -> Option<crate::remote::Owner> {
        if let Some(g) = &self.group {
            return Some(crate::remote::Owner::Group(g.clone(), true));
        }
        match (&self.target, &self.agent) {
            (Some(t), _) => Some(crate::remote::Owner::Rma(t.clone())),
            (None, Some(a)) => Some(crate::remote::Owner::Agent(a.clone())),
            (None, None) => None,
        }
    }

    /// Is this a reflective-memory group connection?
    pub fn is_group(&self) -> bool {
        self.group.is_some()
    }

    /// The group's members (for a group connection): the DMA engine writes
    /// each of them.
    pub(crate) fn group_members(&self) -> Vec<Arc<RemoteSegment>> {
        self.group.as_ref().map(|g| g.live().into_iter().map(|(_, m)| m).collect()).unwrap_or_default()
    }

    /// The segment's memory when it is this node's own (a connection on
    /// the same node shares the creator's memfd); None for another node's.
    pub fn local_memfd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        (!self.is_remote()).then(|| self.memfd.as_fd())
    }

    /// A device's DMA into another node's segment: RMA writes of
    /// `(bytes, offset)` runs straight from the caller's memory, then the
    /// `then` runs, placed after all of `data` (a descriptor's status after
    /// its payload); all visible at the owner on return. On failure the
    /// flag says the engine abandoned the writes and may still read the
    /// caller's buffers later: they must then be kept for good.
    pub fn dma_write_ordered(
        &self,
        data: &[(&[u8], u64)],
        then: &[(&[u8], u64)],
    ) -> std::result::Result<(), (SciError, bool)> {
        let Some(t) = &self.target else { return Err((SciError::IllegalOperation, false)) };
        t.write_ordered(data, then).map_err(dma_error)
    }

    /// A device's DMA into another node's segment, posted: `data[range]`
    /// to each offset, in order, returning before the bytes arrive. The
    /// writes are placed in the order given; [`dma_posted_done`] says when
    /// their buffer is free again (over a provider that orders messages
    /// after writes, once sent, since a trigger sent next proves placement;
    /// otherwise once in the owner's memory), [`dma_posted_finish`] waits
    /// for that. If [`posted_then_trigger_ordered`] holds for an interrupt, a
    /// trigger sent to it after this returns reaches its owner after the
    /// bytes are placed.
    ///
    /// [`dma_posted_done`]: Self::dma_posted_done
    /// [`dma_posted_finish`]: Self::dma_posted_finish
    /// [`posted_then_trigger_ordered`]: Self::posted_then_trigger_ordered
    pub fn dma_write_posted(&self, data: Vec<u8>, runs: &[(std::ops::Range<usize>, u64)]) -> Result<PostedDma> {
        let Some(t) = &self.target else { return Err(SciError::IllegalOperation) };
        let fabric = t.fabric();
        // Where a later trigger proves placement, the writes need no
        // acknowledgement each from the owner's engine.
        let write = if fabric.info().messages_follow_writes() {
            fabric.write_post_runs(t.peer(), data, runs, t.region())
        } else {
            fabric.write_start_runs(t.peer(), data, runs, t.region())
        };
        let write = write.map_err(|e| dma_error(e).0)?;
        Ok(PostedDma { write })
    }

    /// Have the writes of `p` completed (see [`dma_write_posted`](Self::dma_write_posted)), or failed?
    pub fn dma_posted_done(&self, p: &PostedDma) -> bool {
        self.target.as_ref().is_none_or(|t| t.fabric().write_done(&p.write) || t.fabric().write_abandoned(&p.write))
    }

    /// Wait for the writes of `p`. A write the engine abandoned keeps its
    /// buffer for good (the engine may still read it).
    pub fn dma_posted_finish(&self, p: PostedDma) -> Result<()> {
        let Some(t) = &self.target else { return Err(SciError::IllegalOperation) };
        t.fabric().write_finish(p.write).map_err(|e| dma_error(e).0)
    }

    /// Does a trigger of `irq`, sent after [`dma_write_posted`] returned,
    /// reach the owner only after the posted bytes are placed? It does when
    /// both go to the same engine over a provider that orders messages after
    /// writes; otherwise the caller must finish the writes first.
    ///
    /// [`dma_write_posted`]: Self::dma_write_posted
    pub fn posted_then_trigger_ordered(&self, irq: &crate::RemoteInterrupt) -> bool {
        let Some(t) = &self.target else { return false };
        irq.rma_peer().is_some_and(|p| Arc::ptr_eq(&p, t.peer())) && t.fabric().info().messages_follow_writes()
    }

    /// A device's DMA out of another node's segment: RMA reads into the
    /// caller's buffers, waited for together. On failure the flag says the
    /// engine abandoned them and may still write into the buffers later:
    /// they must then be kept for good.
    pub fn dma_read_many(&self, ops: &mut [(&mut [u8], u64)]) -> std::result::Result<(), (SciError, bool)> {
        let Some(t) = &self.target else { return Err((SciError::IllegalOperation, false)) };
        if ops.is_empty() {
            return Ok(());
        }
        t.read_direct_many(ops).map_err(dma_error)
    }

    /// Read fresh bytes from the owner (remote segments only).
    pub fn read_fresh(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self.owner() {
            Some(o) => o.read(buf, offset),
            None => Err(SciError::IllegalOperation),
        }
    }
}

/// Writes posted by [`RemoteSegment::dma_write_posted`], with their buffer.
/// Dropped unfinished, the buffer is kept for good (the engine may still
/// read it).
pub struct PostedDma {
    write: vsci_fabric::PendingWrite,
}

fn dma_error(e: vsci_fabric::Error) -> (SciError, bool) {
    log::debug!("vsci: device DMA failed: {e}");
    let abandoned = matches!(e, vsci_fabric::Error::Abandoned);
    let err = match e {
        vsci_fabric::Error::OutOfRange { .. } => SciError::OutOfRange,
        vsci_fabric::Error::PeerDown | vsci_fabric::Error::Abandoned => SciError::NoLinkAccess,
        _ => SciError::TransferFailed,
    };
    (err, abandoned)
}
