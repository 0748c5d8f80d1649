//! The node's registry of clients, segments, connections and interrupts,
//! and the operations that change it (the dispatcher that runs requests
//! against it is `node.rs`).
//!
//! About 1,000 lines: the tables and every operation on them stay in one
//! file, because removing a client walks all of them and must see every
//! kind of object (a new table belongs next to the others).
//!
//! All state sits behind one mutex: control operations are rare and short,
//! and a single lock makes the clean-up of a dead client atomic with respect
//! to everyone else's requests. Nothing in here blocks: messages to clients
//! go through bounded per-client queues (see `client.rs`), and requests
//! that must wait (connect with a timeout) are parked on `Node::changed` (node.rs)
//! from their own thread.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use log::{debug, info, warn};
use vsci_proto::{
    ClientInfo, ConnectionInfo, Event, InterruptInfo, IntrKind, NodeStatus, ObjId, Reply, SciError, SegmentEvent,
    SegmentInfo, ServerMsg,
};

pub use crate::config::{Config, ConnectPolicy};
use crate::memory::{self, Arena, IntrObjects};

pub type ClientId = u64;

/// What the registry needs of the cluster links (`crate::peers::Peers`):
/// the RMA engine, messages to other nodes, their status. The links call
/// into the registry (through the node) for every frame they receive; this
/// trait keeps the registry from depending on them in turn.
pub trait Links: Send + Sync {
    fn engine(&self) -> &Arc<crate::engine::Engine>;
    /// Queue `msg` for node `peer`; false if its link is down.
    fn send(&self, peer: u32, msg: vsci_proto::peer::PeerMsg) -> bool;
    /// The other nodes, with how many of our connections reach each.
    fn status(&self, imports: &HashMap<u32, u32>) -> Vec<vsci_proto::PeerInfo>;
}

/// A message queued for one client, with the descriptors it carries.
pub struct Outgoing {
    pub msg: ServerMsg,
    pub fds: Vec<OwnedFd>,
}

impl Outgoing {
    pub fn reply(tag: u64, result: Result<Reply, SciError>) -> Outgoing {
        Outgoing { msg: ServerMsg::Reply { tag, result }, fds: Vec::new() }
    }
    pub(crate) fn event(ev: Event) -> Outgoing {
        Outgoing { msg: ServerMsg::Event(ev), fds: Vec::new() }
    }
}

/// The limits a client can run into, for the log-once bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Limit {
    ObjectsPerClient = 1,
    ObjectsPerUid = 2,
    MemoryPerUid = 4,
    PendingPerClient = 8,
    Descriptors = 16,
    SegmentSize = 32,
}

impl Limit {
    fn describe(self, cfg: &Config) -> String {
        match self {
            Limit::ObjectsPerClient => {
                format!("{} objects per client (--max-objects-per-client)", cfg.max_objects_per_client)
            }
            Limit::ObjectsPerUid => format!("{} objects per uid (--max-objects-per-uid)", cfg.max_objects_per_uid),
            Limit::MemoryPerUid => format!("{} segment bytes per uid (--max-memory-per-uid)", cfg.max_memory_per_uid),
            Limit::PendingPerClient => {
                format!("{} waiting requests per client (--max-pending-per-client)", cfg.max_waiting_per_client)
            }
            Limit::Descriptors => format!(
                "the node's descriptor reserve (limit {}, {} kept for new clients and status)",
                cfg.fd_limit, cfg.fd_reserve
            ),
            Limit::SegmentSize => format!("{} bytes per segment (--max-segment-size)", cfg.max_segment_size),
        }
    }
}

/// What the clients of one uid hold together.
#[derive(Default, Debug)]
pub(crate) struct UidUsage {
    pub(crate) clients: usize,
    pub(crate) objects: usize,
    pub(crate) memory: u64,
}

/// Where a client's messages go: its connection (sent at once or queued,
/// see `client.rs`), or a channel a thread drains (peer pseudo-clients,
/// unit tests).
pub enum Tx {
    Conn(Arc<crate::client::Conn>),
    Queue(SyncSender<Outgoing>),
}

impl Tx {
    pub fn try_send(&self, out: Outgoing) -> Result<(), TrySendError<Outgoing>> {
        if let ServerMsg::Reply { result: Err(e), .. } = &out.msg {
            crate::metrics::get().error(*e);
        }
        match self {
            Tx::Conn(c) => c.try_send(out),
            Tx::Queue(q) => q.try_send(out),
        }
    }
}

impl From<SyncSender<Outgoing>> for Tx {
    fn from(q: SyncSender<Outgoing>) -> Tx {
        Tx::Queue(q)
    }
}

pub struct ClientEntry {
    pub info: ClientInfo,
    pub tx: Tx,
    /// Shut down to evict a client whose queue overflowed.
    pub sock: Arc<OwnedFd>,
    /// The node the client is on: ours, or the peer a pseudo-client stands for.
    pub node_id: Option<u32>,
    pub(crate) objects: usize,
    pub(crate) waiting: usize,
    /// Limits already logged for this client (a bit per [`Limit`]): each
    /// is logged once, not once per refused request.
    pub(crate) limits_logged: u8,
}

pub(crate) struct Segment {
    pub(crate) owner: ClientId,
    /// Whose memory budget the segment counts against (the creator's uid),
    /// and the creator's uid and group for the connect policy.
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) segment_id: u32,
    pub(crate) size: u64,
    pub(crate) memfd: OwnedFd,
    pub(crate) prepared: bool,
    pub(crate) available: bool,
    pub(crate) conns: HashSet<ObjId>,
    /// SCIShareSegment was called: other programs may attach.
    pub(crate) shared: bool,
    /// Handles other programs (or the owner again) attached with.
    pub(crate) attached: HashSet<ObjId>,
    /// The owner removed its handle while attachments remained: the segment
    /// lives on until the last of them goes.
    pub(crate) owner_removed: bool,
    /// A member of reflective-memory group `segment_id` (SCI_FLAG_BROADCAST):
    /// group connects (`ConnectSegment` with `broadcast`) find only these.
    pub(crate) broadcast: bool,
}

/// A program's handle on a shared segment it attached to.
pub(crate) struct SegAttach {
    pub(crate) client: ClientId,
    pub(crate) seg: ObjId,
}

pub(crate) struct SegConn {
    pub(crate) client: ClientId,
    pub(crate) seg: ObjId,
}

pub(crate) struct Intr {
    pub(crate) owner: ClientId,
    pub(crate) kind: IntrKind,
    pub(crate) number: u32,
    pub(crate) objects: IntrObjects,
    pub(crate) conns: HashSet<ObjId>,
}

pub(crate) struct IntrConn {
    pub(crate) client: ClientId,
    pub(crate) intr: ObjId,
}

/// One of our clients' connections to a segment of another node.
pub(crate) struct RemoteSeg {
    pub(crate) client: ClientId,
    pub(crate) peer: u32,
    /// The owner node's id for this connection.
    pub(crate) remote_conn: ObjId,
    pub(crate) segment_id: u32,
}

/// One of our clients' connections to an interrupt of another node.
pub(crate) struct RemoteIntr {
    pub(crate) client: ClientId,
    pub(crate) peer: u32,
    pub(crate) remote_conn: ObjId,
}

#[derive(Default)]
pub struct Registry {
    pub(crate) next_id: u64,
    pub clients: HashMap<ClientId, ClientEntry>,
    pub(crate) segments: HashMap<ObjId, Segment>,
    pub(crate) seg_by_id: HashMap<u32, ObjId>,
    pub(crate) seg_conns: HashMap<ObjId, SegConn>,
    pub(crate) seg_attach: HashMap<ObjId, SegAttach>,
    pub(crate) intrs: HashMap<ObjId, Intr>,
    pub(crate) intr_by_num: HashMap<(IntrKind, u32), ObjId>,
    pub(crate) intr_conns: HashMap<ObjId, IntrConn>,
    /// Each creator's interrupt slots, by kind.
    pub(crate) arenas: HashMap<(ClientId, IntrKind), Arena>,
    /// Memory lent to other nodes and borrowed from them.
    pub loans: crate::loans::Loans,
    pub(crate) remote_segs: HashMap<ObjId, RemoteSeg>,
    pub(crate) remote_intrs: HashMap<ObjId, RemoteIntr>,
    /// The cluster links, when this node is part of a cluster.
    pub links: Option<Arc<dyn Links>>,
    pub(crate) uids: HashMap<u32, UidUsage>,
    /// Limit hits since start, by limit (for logs, status and metrics).
    pub limit_hits: HashMap<&'static str, u64>,
}

/// What travels with an interrupt reply: its chunk's memfd and its eventfd.
pub(crate) fn intr_fds(objects: &IntrObjects) -> Result<Vec<OwnedFd>, SciError> {
    Ok(vec![
        memory::dup(objects.memfd()).map_err(|_| SciError::System)?,
        memory::dup(objects.eventfd.as_fd()).map_err(|_| SciError::System)?,
    ])
}

impl Registry {
    pub(crate) fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Queue a message for a client. A client that does not drain its queue
    /// is evicted rather than allowed to stall the node.
    pub(crate) fn send(&self, client: ClientId, out: Outgoing) {
        let Some(c) = self.clients.get(&client) else { return };
        match c.tx.try_send(out) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                warn!("client {} (pid {}) is not reading its messages; disconnecting it", client, c.info.pid);
                let _ = nix::sys::socket::shutdown(
                    std::os::fd::AsRawFd::as_raw_fd(&*c.sock),
                    nix::sys::socket::Shutdown::Both,
                );
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    pub(crate) fn node_of(&self, cfg: &Config, client: ClientId) -> u32 {
        self.clients.get(&client).and_then(|c| c.node_id).unwrap_or(cfg.node_id)
    }

    pub fn set_client_node(&mut self, client: ClientId, node_id: u32) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.node_id = Some(node_id);
        }
    }

    pub fn send_to(&self, client: ClientId, out: Outgoing) {
        self.send(client, out);
    }

    /// Refuse a request at a limit: count it, log it the first time this
    /// client hits it (with who), and answer SCI_ERR_NOSPC.
    pub fn limit_hit(&mut self, cfg: &Config, client: ClientId, limit: Limit) -> SciError {
        let name = match limit {
            Limit::ObjectsPerClient => "objects_per_client",
            Limit::ObjectsPerUid => "objects_per_uid",
            Limit::MemoryPerUid => "memory_per_uid",
            Limit::PendingPerClient => "pending_per_client",
            Limit::Descriptors => "descriptors",
            Limit::SegmentSize => "segment_size",
        };
        *self.limit_hits.entry(name).or_default() += 1;
        crate::metrics::get().limit_hit(name);
        if let Some(c) = self.clients.get_mut(&client) {
            if c.limits_logged & limit as u8 == 0 {
                c.limits_logged |= limit as u8;
                warn!(
                    "limit: client {client} (pid {}, uid {}, {:?}) reached {}; refusing with SCI_ERR_NOSPC (logged once per client)",
                    c.info.pid,
                    c.info.uid,
                    c.info.name,
                    limit.describe(cfg)
                );
            }
        }
        SciError::Nospc
    }

    /// Count a new object against the client's and its uid's limits and the
    /// node's descriptor reserve. Peer nodes' pseudo-clients are bounded by
    /// their own nodes, not by a local uid's budget.
    pub(crate) fn charge(&mut self, cfg: &Config, client: ClientId) -> Result<(), SciError> {
        let c = self.clients.get(&client).ok_or(SciError::NoLinkAccess)?;
        let (uid, local) = (c.info.uid, c.node_id.is_none());
        if c.objects >= cfg.max_objects_per_client {
            return Err(self.limit_hit(cfg, client, Limit::ObjectsPerClient));
        }
        if local && self.uids.get(&uid).is_some_and(|u| u.objects >= cfg.max_objects_per_uid) {
            return Err(self.limit_hit(cfg, client, Limit::ObjectsPerUid));
        }
        if memory::lowest_free_fd() >= cfg.fd_limit.saturating_sub(cfg.fd_reserve) {
            return Err(self.limit_hit(cfg, client, Limit::Descriptors));
        }
        self.clients.get_mut(&client).expect("checked").objects += 1;
        if local {
            self.uids.entry(uid).or_default().objects += 1;
        }
        Ok(())
    }

    pub(crate) fn uncharge(&mut self, client: ClientId) {
        if let Some(c) = self.clients.get_mut(&client) {
            if c.objects > 0 {
                c.objects -= 1;
                if c.node_id.is_none() {
                    if let Some(u) = self.uids.get_mut(&c.info.uid) {
                        u.objects = u.objects.saturating_sub(1);
                    }
                }
            }
        }
    }

    /// Drop a uid's usage entry once it holds nothing, so the table grows
    /// with the uids using the node now, not with every uid ever seen.
    pub(crate) fn forget_idle_uid(&mut self, uid: u32) {
        if self.uids.get(&uid).is_some_and(|u| u.clients == 0 && u.objects == 0 && u.memory == 0) {
            self.uids.remove(&uid);
        }
    }

    /// May one more client of `uid` connect? (Checked at Hello.)
    pub fn admit(&self, cfg: &Config, uid: u32) -> Result<(), String> {
        let n = self.uids.get(&uid).map_or(0, |u| u.clients);
        if n >= cfg.max_clients_per_uid {
            return Err(format!(
                "uid {uid} already has {n} clients (--max-clients-per-uid {})",
                cfg.max_clients_per_uid
            ));
        }
        let low = memory::lowest_free_fd();
        if low >= cfg.fd_limit.saturating_sub(cfg.fd_reserve / 4) {
            return Err(format!("the node is out of descriptors (lowest free {low}, limit {})", cfg.fd_limit));
        }
        Ok(())
    }

    /// The segment a client's handle stands for: one it created (and has not
    /// removed) or one it attached to.
    pub(crate) fn held(&self, client: ClientId, handle: ObjId) -> Result<ObjId, SciError> {
        if let Some(a) = self.seg_attach.get(&handle) {
            return if a.client == client { Ok(a.seg) } else { Err(SciError::IllegalParameter) };
        }
        match self.segments.get(&handle) {
            Some(s) if s.owner == client && !s.owner_removed => Ok(handle),
            _ => Err(SciError::IllegalParameter),
        }
    }

    pub(crate) fn owned_segment(&mut self, client: ClientId, handle: ObjId) -> Result<&mut Segment, SciError> {
        let seg = self.held(client, handle)?;
        Ok(self.segments.get_mut(&seg).expect("held segments exist"))
    }

    /// Tell every holder of a segment (owner and attachers, each under its
    /// own handle) about a connection coming or going.
    pub(crate) fn notify_holders(&self, seg: ObjId, reason: SegmentEvent, node_id: u32) {
        let Some(s) = self.segments.get(&seg) else { return };
        if !s.owner_removed {
            self.send(s.owner, Outgoing::event(Event::LocalSegment { seg, reason, node_id }));
        }
        for h in &s.attached {
            if let Some(a) = self.seg_attach.get(h) {
                self.send(a.client, Outgoing::event(Event::LocalSegment { seg: *h, reason, node_id }));
            }
        }
    }

    // ---- segments ---------------------------------------------------------

    pub(crate) fn create_segment(
        &mut self,
        cfg: &Config,
        client: ClientId,
        segment_id: u32,
        auto_id: bool,
        size: u64,
        broadcast: bool,
    ) -> Result<Outgoing, SciError> {
        if size == 0 {
            return Err(SciError::IllegalParameter);
        }
        if size > cfg.max_segment_size {
            return Err(self.limit_hit(cfg, client, Limit::SegmentSize));
        }
        let (uid, local) =
            self.clients.get(&client).map(|c| (c.info.uid, c.node_id.is_none())).ok_or(SciError::NoLinkAccess)?;
        let used = self.uids.get(&uid).map_or(0, |u| u.memory);
        if local && cfg.max_memory_per_uid > 0 && used.saturating_add(size) > cfg.max_memory_per_uid {
            return Err(self.limit_hit(cfg, client, Limit::MemoryPerUid));
        }
        let segment_id = if auto_id {
            (0x4000_0000u32..u32::MAX).find(|id| !self.seg_by_id.contains_key(id)).ok_or(SciError::Nospc)?
        } else {
            if self.seg_by_id.contains_key(&segment_id) {
                return Err(SciError::SegmentidUsed);
            }
            segment_id
        };
        let memfd = memory::sealed_memfd(&format!("vsci-seg-{segment_id}"), size).map_err(|e| {
            warn!("cannot allocate segment {segment_id} of {size} bytes: {e}");
            SciError::Nospc
        })?;
        let fd = memory::dup(memfd.as_fd()).map_err(|_| SciError::System)?;
        self.charge(cfg, client)?;
        self.uids.entry(uid).or_default().memory += size;
        let seg = self.new_id();
        self.segments.insert(
            seg,
            Segment {
                owner: client,
                uid,
                gid: self.clients.get(&client).map_or(u32::MAX, |c| c.info.gid),
                segment_id,
                size,
                memfd,
                prepared: false,
                available: false,
                conns: HashSet::new(),
                shared: false,
                attached: HashSet::new(),
                owner_removed: false,
                broadcast,
            },
        );
        self.seg_by_id.insert(segment_id, seg);
        debug!("client {client} created segment {segment_id} ({size} bytes)");
        Ok(Outgoing { msg: reply_ok(0, Reply::Segment { seg, segment_id, size }), fds: vec![fd] })
    }

    /// Drop one handle on a segment (validated by [`Self::held`]): an
    /// attachment, or the owner's. The segment itself goes with the last one.
    pub(crate) fn release_segment(&mut self, handle: ObjId) {
        if let Some(a) = self.seg_attach.remove(&handle) {
            self.uncharge(a.client);
            let last = self.segments.get_mut(&a.seg).is_some_and(|s| {
                s.attached.remove(&handle);
                s.owner_removed && s.attached.is_empty()
            });
            if last {
                self.remove_segment(a.seg);
            }
            return;
        }
        let Some(s) = self.segments.get_mut(&handle) else { return };
        if s.attached.is_empty() {
            self.remove_segment(handle);
        } else {
            s.owner_removed = true;
            let owner = s.owner;
            debug!("segment {}: owner's handle removed, {} attachment(s) keep it", s.segment_id, s.attached.len());
            self.uncharge(owner);
        }
    }

    pub(crate) fn remove_segment(&mut self, seg: ObjId) {
        let Some(s) = self.segments.remove(&seg) else { return };
        self.seg_by_id.remove(&s.segment_id);
        if let Some(u) = self.uids.get_mut(&s.uid) {
            u.memory = u.memory.saturating_sub(s.size);
        }
        // The owner may have left before the segment went (an attachment
        // kept it): its uid's entry may be idle only now.
        self.forget_idle_uid(s.uid);
        for h in &s.attached {
            if let Some(a) = self.seg_attach.remove(h) {
                self.uncharge(a.client);
            }
        }
        for conn in &s.conns {
            if let Some(c) = self.seg_conns.remove(conn) {
                self.uncharge(c.client);
                self.send(
                    c.client,
                    Outgoing::event(Event::RemoteSegment {
                        conn: *conn,
                        reason: SegmentEvent::Lost,
                        status: SciError::Ok,
                    }),
                );
            }
        }
        if !s.owner_removed {
            self.uncharge(s.owner);
        }
        debug!("segment {} removed", s.segment_id);
    }

    pub(crate) fn attach_segment(
        &mut self,
        cfg: &Config,
        client: ClientId,
        segment_id: u32,
    ) -> Result<Outgoing, SciError> {
        let seg = *self.seg_by_id.get(&segment_id).ok_or(SciError::NoSuchSegment)?;
        let s = &self.segments[&seg];
        if !s.shared {
            return Err(SciError::Access);
        }
        let size = s.size;
        let fd = memory::dup(s.memfd.as_fd()).map_err(|_| SciError::System)?;
        self.charge(cfg, client)?;
        let handle = self.new_id();
        self.seg_attach.insert(handle, SegAttach { client, seg });
        self.segments.get_mut(&seg).expect("checked").attached.insert(handle);
        debug!("client {client} attached to segment {segment_id}");
        Ok(Outgoing { msg: reply_ok(0, Reply::Segment { seg: handle, segment_id, size }), fds: vec![fd] })
    }

    /// May `client` connect to an object created by `uid`/`gid`?
    pub(crate) fn may_connect(&self, cfg: &Config, client: ClientId, uid: u32, gid: u32) -> Result<(), SciError> {
        let Some(c) = self.clients.get(&client) else { return Err(SciError::NoLinkAccess) };
        let ok = c.node_id.is_some()
            || match cfg.connect_policy {
                ConnectPolicy::Any => true,
                ConnectPolicy::SameUid => c.info.uid == uid,
                ConnectPolicy::SameGroup => c.info.uid == uid || c.info.gid == gid,
            };
        if ok {
            Ok(())
        } else {
            debug!(
                "client {client} (uid {} gid {}) may not connect to an object of uid {uid} gid {gid}",
                c.info.uid, c.info.gid
            );
            Err(SciError::Access)
        }
    }

    pub(crate) fn connect_segment(
        &mut self,
        cfg: &Config,
        client: ClientId,
        segment_id: u32,
        broadcast: bool,
    ) -> Result<Outgoing, SciError> {
        let seg = *self.seg_by_id.get(&segment_id).ok_or(SciError::NoSuchSegment)?;
        let s = &self.segments[&seg];
        if broadcast && !s.broadcast {
            // A group connect looks for members only: an ordinary segment
            // that happens to have the group's id is not one.
            return Err(SciError::NoSuchSegment);
        }
        self.may_connect(cfg, client, s.uid, s.gid)?;
        if !s.available {
            return Err(SciError::ConnectionRefused);
        }
        let size = s.size;
        let fd = memory::dup(s.memfd.as_fd()).map_err(|_| SciError::System)?;
        self.charge(cfg, client)?;
        let conn = self.new_id();
        self.seg_conns.insert(conn, SegConn { client, seg });
        self.segments.get_mut(&seg).expect("checked").conns.insert(conn);
        let from = self.node_of(cfg, client);
        self.notify_holders(seg, SegmentEvent::Connect, from);
        Ok(Outgoing {
            msg: reply_ok(0, Reply::Connected { conn, node_id: cfg.node_id, segment_id, size, remote: None }),
            fds: vec![fd],
        })
    }

    pub(crate) fn disconnect_segment(&mut self, cfg: &Config, conn: ObjId) {
        let Some(c) = self.seg_conns.remove(&conn) else { return };
        self.uncharge(c.client);
        if let Some(s) = self.segments.get_mut(&c.seg) {
            s.conns.remove(&conn);
            let from = self.node_of(cfg, c.client);
            self.notify_holders(c.seg, SegmentEvent::Disconnect, from);
        }
    }

    // ---- interrupts -------------------------------------------------------

    pub(crate) fn create_interrupt(
        &mut self,
        cfg: &Config,
        client: ClientId,
        kind: IntrKind,
        hint: u32,
        fixed: bool,
        wake: Option<OwnedFd>,
    ) -> Result<Outgoing, SciError> {
        let number = if fixed {
            if self.intr_by_num.contains_key(&(kind, hint)) {
                return Err(SciError::Busy);
            }
            hint
        } else if !self.intr_by_num.contains_key(&(kind, hint)) {
            hint
        } else {
            (0..u32::MAX).find(|n| !self.intr_by_num.contains_key(&(kind, *n))).ok_or(SciError::Nospc)?
        };
        self.charge(cfg, client)?;
        let arena = self
            .arenas
            .entry((client, kind))
            .or_insert_with(|| Arena::new(kind, format!("vsci-intr-{client}-{kind:?}")));
        let objects = match arena.alloc(wake) {
            Ok(o) => o,
            Err(e) => {
                warn!("cannot create interrupt objects: {e}");
                self.release_slot_owner(client, kind, None);
                return Err(SciError::Nospc);
            }
        };
        let fds = match intr_fds(&objects) {
            Ok(f) => f,
            Err(e) => {
                self.release_slot_owner(client, kind, Some(objects));
                return Err(e);
            }
        };
        let place = objects.place;
        let intr = self.new_id();
        self.intrs.insert(intr, Intr { owner: client, kind, number, objects, conns: HashSet::new() });
        self.intr_by_num.insert((kind, number), intr);
        Ok(Outgoing { msg: reply_ok(0, Reply::Interrupt { intr, number, place }), fds })
    }

    /// Give a slot back to its creator's arena (if any) and undo the
    /// charge of one object; the arena goes when it holds nothing.
    pub(crate) fn release_slot_owner(&mut self, client: ClientId, kind: IntrKind, objects: Option<IntrObjects>) {
        if let Some(arena) = self.arenas.get_mut(&(client, kind)) {
            if let Some(o) = objects {
                arena.release(o);
            }
            if arena.is_empty() {
                self.arenas.remove(&(client, kind));
            }
        }
        self.uncharge(client);
    }

    pub(crate) fn remove_interrupt(&mut self, intr: ObjId) {
        let Some(i) = self.intrs.remove(&intr) else { return };
        self.intr_by_num.remove(&(i.kind, i.number));
        for conn in &i.conns {
            if let Some(c) = self.intr_conns.remove(conn) {
                self.uncharge(c.client);
                self.send(c.client, Outgoing::event(Event::InterruptGone { conn: *conn, status: SciError::Ok }));
            }
        }
        self.release_slot_owner(i.owner, i.kind, Some(i.objects));
    }

    pub(crate) fn connect_interrupt(
        &mut self,
        cfg: &Config,
        client: ClientId,
        kind: IntrKind,
        number: u32,
    ) -> Result<Outgoing, SciError> {
        let intr = *self.intr_by_num.get(&(kind, number)).ok_or(SciError::ConnectionRefused)?;
        let i = &self.intrs[&intr];
        let (uid, gid) = self.clients.get(&i.owner).map_or((u32::MAX, u32::MAX), |c| (c.info.uid, c.info.gid));
        self.may_connect(cfg, client, uid, gid)?;
        let fds = intr_fds(&i.objects)?;
        let place = i.objects.place;
        self.charge(cfg, client)?;
        let conn = self.new_id();
        self.intr_conns.insert(conn, IntrConn { client, intr });
        self.intrs.get_mut(&intr).expect("checked").conns.insert(conn);
        Ok(Outgoing { msg: reply_ok(0, Reply::InterruptConnected { conn, remote: None, place: Some(place) }), fds })
    }

    pub(crate) fn disconnect_interrupt(&mut self, conn: ObjId) {
        let Some(c) = self.intr_conns.remove(&conn) else { return };
        self.uncharge(c.client);
        if let Some(i) = self.intrs.get_mut(&c.intr) {
            i.conns.remove(&conn);
        }
    }

    // ---- connections to other nodes' objects -------------------------------

    /// Record a granted remote segment and build the client's reply: a
    /// fresh shadow memfd to map, plus how to reach the owner's memory.
    pub fn add_remote_segment(
        &mut self,
        cfg: &Config,
        client: ClientId,
        peer: u32,
        segment_id: u32,
        grant: &vsci_proto::peer::RemoteSegmentGrant,
        access: vsci_proto::RemoteAccess,
    ) -> Result<Outgoing, SciError> {
        if !self.clients.contains_key(&client) {
            return Err(SciError::NoLinkAccess);
        }
        let shadow = memory::sealed_memfd(&format!("vsci-shadow-{peer}-{segment_id}"), grant.size)
            .map_err(|_| SciError::Nospc)?;
        self.charge(cfg, client)?;
        let conn = self.new_id();
        self.remote_segs.insert(conn, RemoteSeg { client, peer, remote_conn: grant.conn, segment_id });
        Ok(Outgoing {
            msg: reply_ok(
                0,
                Reply::Connected { conn, node_id: peer, segment_id, size: grant.size, remote: Some(access) },
            ),
            fds: vec![shadow],
        })
    }

    pub fn add_remote_interrupt(
        &mut self,
        cfg: &Config,
        client: ClientId,
        peer: u32,
        remote_conn: ObjId,
        trig: vsci_proto::RemoteTrigger,
    ) -> Result<Outgoing, SciError> {
        if !self.clients.contains_key(&client) {
            return Err(SciError::NoLinkAccess);
        }
        self.charge(cfg, client)?;
        let conn = self.new_id();
        self.remote_intrs.insert(conn, RemoteIntr { client, peer, remote_conn });
        Ok(Outgoing {
            msg: reply_ok(0, Reply::InterruptConnected { conn, remote: Some(trig), place: None }),
            fds: Vec::new(),
        })
    }

    /// The owner node reports an event on one of our clients' connections.
    pub fn remote_segment_event(&mut self, peer: u32, remote_conn: ObjId, reason: SegmentEvent) {
        let Some((&conn, rec)) = self.remote_segs.iter().find(|(_, r)| r.peer == peer && r.remote_conn == remote_conn)
        else {
            return;
        };
        let client = rec.client;
        if reason == SegmentEvent::Lost {
            self.remote_segs.remove(&conn);
            self.uncharge(client);
        }
        self.send(client, Outgoing::event(Event::RemoteSegment { conn, reason, status: SciError::Ok }));
    }

    pub fn remote_interrupt_gone(&mut self, peer: u32, remote_conn: ObjId) {
        let Some((&conn, rec)) = self.remote_intrs.iter().find(|(_, r)| r.peer == peer && r.remote_conn == remote_conn)
        else {
            return;
        };
        let client = rec.client;
        self.remote_intrs.remove(&conn);
        self.uncharge(client);
        self.send(client, Outgoing::event(Event::InterruptGone { conn, status: SciError::Ok }));
    }

    /// A node stopped answering: every connection to it is lost.
    /// A peer node's pseudo-client asks for a loan: set it aside and
    /// register it with the RMA engine for that node.
    pub(crate) fn lend(&mut self, client: ClientId, size: u64) -> Result<Outgoing, SciError> {
        let Some(node_id) = self.clients.get(&client).and_then(|c| c.node_id) else {
            return Err(SciError::IllegalOperation);
        };
        let engine = self.links.as_ref().map(|l| l.engine().clone()).ok_or(SciError::IllegalOperation)?;
        let loan = self.new_id();
        let fd = self.loans.lend(loan, client, node_id, size)?;
        match engine.register_segment_conn(loan, fd, size) {
            Ok(region) => Ok(simple(Reply::Lent { loan, size, region })),
            Err(e) => {
                self.loans.take_back(loan, client);
                Err(e)
            }
        }
    }

    /// Give a loan back: one this node lent (asked by the borrowing node's
    /// pseudo-client) or one a program of ours borrowed.
    pub(crate) fn return_loan(&mut self, client: ClientId, loan: ObjId) -> Result<Outgoing, SciError> {
        if self.loans.take_back(loan, client) {
            if let Some(l) = &self.links {
                l.engine().release_segment_conn(loan);
            }
            return Ok(done());
        }
        let (lender, remote) = self.loans.give_back(loan, client).ok_or(SciError::IllegalParameter)?;
        self.uncharge(client);
        if let Some(l) = &self.links {
            l.send(lender, vsci_proto::peer::PeerMsg::ReturnLoan { loan: remote });
        }
        Ok(done())
    }

    /// A lender granted a loan to `client` (charged when it asked): record
    /// it and build the program's reply. Err if the program is gone (the
    /// caller returns the loan).
    pub fn add_borrowed(
        &mut self,
        client: ClientId,
        lender: u32,
        grant: &vsci_proto::peer::RemoteSegmentGrant,
        access: vsci_proto::RemoteAccess,
    ) -> Result<Outgoing, SciError> {
        if !self.clients.contains_key(&client) {
            return Err(SciError::NoLinkAccess);
        }
        let loan = self.new_id();
        self.loans.add_borrowed(loan, client, lender, grant.conn, grant.size);
        Ok(simple(Reply::Borrowed { loan, node_id: lender, size: grant.size, access }))
    }

    /// A borrow failed after it was charged.
    pub fn borrow_failed(&mut self, client: ClientId) {
        self.uncharge(client);
    }

    /// Answer a borrow: it no longer waits.
    pub fn borrow_answered(&mut self, client: ClientId, out: Outgoing) {
        finish_wait(self, client, out);
    }

    /// The link to `peer` went down (`up` false) or came back: our
    /// programs' connections to its segments hear SCI_CB_NOT_OPERATIONAL or
    /// SCI_CB_OPERATIONAL; nothing is released (`peer_down` does that when
    /// the node is declared dead).
    pub fn peer_link(&mut self, peer: u32, up: bool) {
        let reason = if up { SegmentEvent::Operational } else { SegmentEvent::NotOperational };
        let conns: Vec<(ClientId, ObjId)> =
            self.remote_segs.iter().filter(|(_, r)| r.peer == peer).map(|(k, r)| (r.client, *k)).collect();
        for (client, conn) in conns {
            self.send(client, Outgoing::event(Event::RemoteSegment { conn, reason, status: SciError::Ok }));
        }
    }

    pub fn peer_down(&mut self, peer: u32) {
        for client in self.loans.lender_down(peer) {
            self.uncharge(client);
        }
        let segs: Vec<ObjId> = self.remote_segs.iter().filter(|(_, r)| r.peer == peer).map(|(k, _)| *k).collect();
        for conn in segs {
            let rec = self.remote_segs.remove(&conn).expect("listed");
            self.uncharge(rec.client);
            self.send(
                rec.client,
                Outgoing::event(Event::RemoteSegment {
                    conn,
                    reason: SegmentEvent::Lost,
                    status: SciError::NodeNotResponding,
                }),
            );
        }
        let intrs: Vec<ObjId> = self.remote_intrs.iter().filter(|(_, r)| r.peer == peer).map(|(k, _)| *k).collect();
        for conn in intrs {
            let rec = self.remote_intrs.remove(&conn).expect("listed");
            self.uncharge(rec.client);
            self.send(rec.client, Outgoing::event(Event::InterruptGone { conn, status: SciError::NodeNotResponding }));
        }
    }

    pub(crate) fn disconnect_remote_segment(&mut self, conn: ObjId) {
        if let Some(rec) = self.remote_segs.remove(&conn) {
            self.uncharge(rec.client);
            if let Some(l) = &self.links {
                l.send(rec.peer, vsci_proto::peer::PeerMsg::DisconnectSegment { conn: rec.remote_conn });
            }
        }
    }

    pub(crate) fn disconnect_remote_interrupt(&mut self, conn: ObjId) {
        if let Some(rec) = self.remote_intrs.remove(&conn) {
            self.uncharge(rec.client);
            if let Some(l) = &self.links {
                l.send(rec.peer, vsci_proto::peer::PeerMsg::DisconnectInterrupt { conn: rec.remote_conn });
            }
        }
    }

    // ---- clients ----------------------------------------------------------

    /// Release everything a client holds and tell its peers. Called when
    /// its socket closes, whatever the reason (exit, SIGKILL, eviction).
    pub fn remove_client(&mut self, cfg: &Config, client: ClientId) {
        let segs: Vec<ObjId> = self
            .segments
            .iter()
            .filter(|(_, s)| s.owner == client && !s.owner_removed)
            .map(|(k, _)| *k)
            .chain(self.seg_attach.iter().filter(|(_, a)| a.client == client).map(|(k, _)| *k))
            .collect();
        let sconns: Vec<ObjId> = self.seg_conns.iter().filter(|(_, c)| c.client == client).map(|(k, _)| *k).collect();
        let intrs: Vec<ObjId> = self.intrs.iter().filter(|(_, i)| i.owner == client).map(|(k, _)| *k).collect();
        let iconns: Vec<ObjId> = self.intr_conns.iter().filter(|(_, c)| c.client == client).map(|(k, _)| *k).collect();
        for s in segs {
            self.release_segment(s);
        }
        for c in sconns {
            self.disconnect_segment(cfg, c);
        }
        for i in intrs {
            self.remove_interrupt(i);
        }
        for c in iconns {
            self.disconnect_interrupt(c);
        }
        let rsegs: Vec<ObjId> = self.remote_segs.iter().filter(|(_, r)| r.client == client).map(|(k, _)| *k).collect();
        for c in rsegs {
            self.disconnect_remote_segment(c);
        }
        let rintrs: Vec<ObjId> =
            self.remote_intrs.iter().filter(|(_, r)| r.client == client).map(|(k, _)| *k).collect();
        for c in rintrs {
            self.disconnect_remote_interrupt(c);
        }
        for (lender, loan) in self.loans.give_back_all(client) {
            self.uncharge(client);
            if let Some(l) = &self.links {
                l.send(lender, vsci_proto::peer::PeerMsg::ReturnLoan { loan });
            }
        }
        for loan in self.loans.take_back_all(client) {
            if let Some(l) = &self.links {
                l.engine().release_segment_conn(loan);
            }
        }
        if let Some(c) = self.clients.remove(&client) {
            if let Some(u) = self.uids.get_mut(&c.info.uid) {
                u.clients = u.clients.saturating_sub(1);
                if c.node_id.is_none() {
                    u.objects = u.objects.saturating_sub(c.objects);
                }
            }
            self.forget_idle_uid(c.info.uid);
            info!("client {} (pid {}, uid {}, {:?}) gone", client, c.info.pid, c.info.uid, c.info.name);
        }
    }

    pub fn register_client(&mut self, info: ClientInfo, tx: impl Into<Tx>, sock: Arc<OwnedFd>) -> ClientId {
        let tx = tx.into();
        let id = self.new_id();
        let mut info = info;
        info.client = id;
        self.uids.entry(info.uid).or_default().clients += 1;
        self.clients
            .insert(id, ClientEntry { info, tx, sock, node_id: None, objects: 0, waiting: 0, limits_logged: 0 });
        id
    }

    pub fn broadcast_shutdown(&self) {
        for id in self.clients.keys() {
            self.send(*id, Outgoing::event(Event::Shutdown));
        }
    }

    /// True when the node holds nothing for anyone: what must be left once
    /// every client is gone, whatever they asked (the fuzz targets check it:
    /// an object or a uid's charge left behind would be a leak).
    pub fn holds_nothing(&self) -> bool {
        self.clients.is_empty()
            && self.segments.is_empty()
            && self.seg_by_id.is_empty()
            && self.seg_conns.is_empty()
            && self.seg_attach.is_empty()
            && self.intrs.is_empty()
            && self.intr_by_num.is_empty()
            && self.intr_conns.is_empty()
            && self.arenas.is_empty()
            && self.loans.is_empty()
            && self.remote_segs.is_empty()
            && self.remote_intrs.is_empty()
            && self.uids.is_empty()
    }

    /// Bytes of segment memory the node holds.
    pub fn segment_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size).sum()
    }

    pub fn status(&self, cfg: &Config, started: Instant) -> NodeStatus {
        let mut st = NodeStatus {
            node_id: cfg.node_id,
            pid: std::process::id(),
            socket: cfg.socket.clone(),
            uptime_ms: started.elapsed().as_millis() as u64,
            wait_mode: cfg.wait_mode.to_string(),
            open_fds: memory::open_fd_count(),
            ..Default::default()
        };
        st.clients = self.clients.values().map(|c| c.info.clone()).collect();
        st.clients.sort_by_key(|c| c.client);
        st.segments = self
            .segments
            .values()
            .map(|s| SegmentInfo {
                segment_id: s.segment_id,
                size: s.size,
                owner: s.owner,
                prepared: s.prepared,
                available: s.available,
                connections: s.conns.len() as u32,
                shared: s.shared,
                attached: s.attached.len() as u32,
                broadcast: s.broadcast,
            })
            .collect();
        st.segments.sort_by_key(|s| s.segment_id);
        st.connections = self
            .seg_conns
            .values()
            .map(|c| ConnectionInfo {
                client: c.client,
                node_id: cfg.node_id,
                segment_id: self.segments.get(&c.seg).map(|s| s.segment_id).unwrap_or(0),
            })
            .collect();
        st.interrupts = self
            .intrs
            .values()
            .map(|i| InterruptInfo {
                number: i.number,
                data: i.kind == IntrKind::Data,
                owner: i.owner,
                connections: i.conns.len() as u32,
            })
            .collect();
        st.connections.extend(self.remote_segs.values().map(|r| ConnectionInfo {
            client: r.client,
            node_id: r.peer,
            segment_id: r.segment_id,
        }));
        st.interrupts.sort_by_key(|i| (i.data, i.number));
        if let Some(l) = &self.links {
            let mut imports: HashMap<u32, u32> = HashMap::new();
            for p in self.remote_segs.values().map(|r| r.peer).chain(self.remote_intrs.values().map(|r| r.peer)) {
                *imports.entry(p).or_default() += 1;
            }
            st.peers = l.status(&imports);
        }
        st.lending = self.loans.status();
        st.totals = vsci_proto::StatusTotals {
            clients: st.clients.len() as u64,
            segments: st.segments.len() as u64,
            connections: st.connections.len() as u64,
            interrupts: st.interrupts.len() as u64,
        };
        // Bounded, so the reply fits one message even with thousands of
        // clients or a client at its object limit (totals say how many).
        st.clients.truncate(vsci_proto::STATUS_LIST_MAX);
        st.segments.truncate(vsci_proto::STATUS_LIST_MAX);
        st.connections.truncate(vsci_proto::STATUS_LIST_MAX);
        st.interrupts.truncate(vsci_proto::STATUS_LIST_MAX);
        st
    }
}

pub(crate) fn reply_ok(tag: u64, r: Reply) -> ServerMsg {
    ServerMsg::Reply { tag, result: Ok(r) }
}

/// Fill in the request tag of a reply built by a handler.
pub fn tagged(mut out: Outgoing, tag: u64) -> Outgoing {
    if let ServerMsg::Reply { tag: t, .. } = &mut out.msg {
        *t = tag;
    }
    out
}

pub(crate) fn finish_wait(reg: &mut Registry, client: ClientId, out: Outgoing) {
    if let Some(c) = reg.clients.get_mut(&client) {
        c.waiting = c.waiting.saturating_sub(1);
    }
    reg.send(client, out);
}

pub(crate) fn done() -> Outgoing {
    simple(Reply::Done)
}

pub(crate) fn simple(r: Reply) -> Outgoing {
    Outgoing { msg: reply_ok(0, r), fds: Vec::new() }
}
