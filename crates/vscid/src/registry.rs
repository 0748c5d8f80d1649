//! The node's registry of clients, segments, connections and interrupts,
//! and the request handlers that change it.
//!
//! All state sits behind one mutex: control operations are rare and short,
//! and a single lock makes the clean-up of a dead client atomic with respect
//! to everyone else's requests. Nothing in here blocks: messages to clients
//! go through bounded per-client queues (see `client.rs`), and requests
//! that must wait (connect with a timeout) are parked on `Node::changed`
//! from their own thread.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use vsci_proto::{
    ClientInfo, ConnectionInfo, Event, InterruptInfo, IntrKind, NodeStatus, ObjId, Reply,
    SciError, SegmentEvent, SegmentInfo, ServerMsg, WaitMode,
};

use crate::memory::{self, Arena, IntrObjects};
use crate::recover::Recover;

pub type ClientId = u64;

/// A message queued for one client, with the descriptors it carries.
pub struct Outgoing {
    pub msg: ServerMsg,
    pub fds: Vec<OwnedFd>,
}

impl Outgoing {
    pub fn reply(tag: u64, result: Result<Reply, SciError>) -> Outgoing {
        Outgoing { msg: ServerMsg::Reply { tag, result }, fds: Vec::new() }
    }
    fn event(ev: Event) -> Outgoing {
        Outgoing { msg: ServerMsg::Event(ev), fds: Vec::new() }
    }
}

/// Node-wide settings, fixed at start.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_id: u32,
    pub socket: String,
    pub wait_mode: WaitMode,
    pub spin_us: u32,
    pub max_segment_size: u64,
    /// Segments + connections + interrupts one client may hold.
    pub max_objects_per_client: usize,
    /// Requests of one client that may wait (connect with timeout) at once.
    pub max_waiting_per_client: usize,
    /// Objects all clients of one uid may hold together.
    pub max_objects_per_uid: usize,
    /// Clients (open descriptors) one uid may have at once.
    pub max_clients_per_uid: usize,
    /// Segment bytes the clients of one uid may hold together (0: no limit).
    pub max_memory_per_uid: u64,
    /// The node's descriptor limit and the part of it kept for new clients
    /// and `vsci status`: no new object once the lowest free descriptor
    /// reaches `fd_limit - fd_reserve`, no new client past
    /// `fd_limit - fd_reserve / 4`.
    pub fd_limit: u64,
    pub fd_reserve: u64,
    /// Who may connect to a local client's segments and interrupts.
    pub connect_policy: ConnectPolicy,
    /// Bytes of memory this node lends to other nodes at most.
    pub lend_pool: u64,
}

/// Who may connect to a segment or interrupt of this node. SISCI itself has
/// no per-object rights (any program that knows a segment id may connect);
/// a shared node may narrow that to programs of the creator's uid or
/// primary group. Other nodes' programs are let in as SISCI does: the
/// cluster key vouches for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectPolicy {
    #[default]
    Any,
    SameUid,
    SameGroup,
}

impl std::str::FromStr for ConnectPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "any" => Ok(ConnectPolicy::Any),
            "uid" | "same-uid" => Ok(ConnectPolicy::SameUid),
            "group" | "same-group" => Ok(ConnectPolicy::SameGroup),
            _ => Err(format!("{s:?}: expected any, uid or group")),
        }
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
            Limit::ObjectsPerClient => format!("{} objects per client (--max-objects-per-client)", cfg.max_objects_per_client),
            Limit::ObjectsPerUid => format!("{} objects per uid (--max-objects-per-uid)", cfg.max_objects_per_uid),
            Limit::MemoryPerUid => format!("{} segment bytes per uid (--max-memory-per-uid)", cfg.max_memory_per_uid),
            Limit::PendingPerClient => format!("{} waiting requests per client (--max-pending-per-client)", cfg.max_waiting_per_client),
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
struct UidUsage {
    clients: usize,
    objects: usize,
    memory: u64,
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
    objects: usize,
    waiting: usize,
    /// Limits already logged for this client (a bit per [`Limit`]): each
    /// is logged once, not once per refused request.
    limits_logged: u8,
}

struct Segment {
    owner: ClientId,
    /// Whose memory budget the segment counts against (the creator's uid),
    /// and the creator's uid and group for the connect policy.
    uid: u32,
    gid: u32,
    segment_id: u32,
    size: u64,
    memfd: OwnedFd,
    prepared: bool,
    available: bool,
    conns: HashSet<ObjId>,
    /// SCIShareSegment was called: other programs may attach.
    shared: bool,
    /// Handles other programs (or the owner again) attached with.
    attached: HashSet<ObjId>,
    /// The owner removed its handle while attachments remained: the segment
    /// lives on until the last of them goes.
    owner_removed: bool,
    /// A member of reflective-memory group `segment_id` (SCI_FLAG_BROADCAST):
    /// group connects (`ConnectSegment` with `broadcast`) find only these.
    broadcast: bool,
}

/// A program's handle on a shared segment it attached to.
struct SegAttach {
    client: ClientId,
    seg: ObjId,
}

struct SegConn {
    client: ClientId,
    seg: ObjId,
}

struct Intr {
    owner: ClientId,
    kind: IntrKind,
    number: u32,
    objects: IntrObjects,
    conns: HashSet<ObjId>,
}

struct IntrConn {
    client: ClientId,
    intr: ObjId,
}

/// One of our clients' connections to a segment of another node.
struct RemoteSeg {
    client: ClientId,
    peer: u32,
    /// The owner node's id for this connection.
    remote_conn: ObjId,
    segment_id: u32,
}

/// One of our clients' connections to an interrupt of another node.
struct RemoteIntr {
    client: ClientId,
    peer: u32,
    remote_conn: ObjId,
}

#[derive(Default)]
pub struct Registry {
    next_id: u64,
    pub clients: HashMap<ClientId, ClientEntry>,
    segments: HashMap<ObjId, Segment>,
    seg_by_id: HashMap<u32, ObjId>,
    seg_conns: HashMap<ObjId, SegConn>,
    seg_attach: HashMap<ObjId, SegAttach>,
    intrs: HashMap<ObjId, Intr>,
    intr_by_num: HashMap<(IntrKind, u32), ObjId>,
    intr_conns: HashMap<ObjId, IntrConn>,
    /// Each creator's interrupt slots, by kind.
    arenas: HashMap<(ClientId, IntrKind), Arena>,
    /// Memory lent to other nodes and borrowed from them.
    pub loans: crate::loans::Loans,
    remote_segs: HashMap<ObjId, RemoteSeg>,
    remote_intrs: HashMap<ObjId, RemoteIntr>,
    /// The cluster runtime, when this node is part of a cluster.
    pub links: Option<Arc<crate::peers::Peers>>,
    uids: HashMap<u32, UidUsage>,
    /// Limit hits since start, by limit (for logs, status and metrics).
    pub limit_hits: HashMap<&'static str, u64>,
}

/// What travels with an interrupt reply: its chunk's memfd and its eventfd.
fn intr_fds(objects: &IntrObjects) -> Result<Vec<OwnedFd>, SciError> {
    Ok(vec![
        memory::dup(objects.memfd()).map_err(|_| SciError::System)?,
        memory::dup(objects.eventfd.as_fd()).map_err(|_| SciError::System)?,
    ])
}

impl Registry {
    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Queue a message for a client. A client that does not drain its queue
    /// is evicted rather than allowed to stall the node.
    fn send(&self, client: ClientId, out: Outgoing) {
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

    fn node_of(&self, cfg: &Config, client: ClientId) -> u32 {
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
    fn charge(&mut self, cfg: &Config, client: ClientId) -> Result<(), SciError> {
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

    fn uncharge(&mut self, client: ClientId) {
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
    fn forget_idle_uid(&mut self, uid: u32) {
        if self.uids.get(&uid).is_some_and(|u| u.clients == 0 && u.objects == 0 && u.memory == 0) {
            self.uids.remove(&uid);
        }
    }

    /// May one more client of `uid` connect? (Checked at Hello.)
    pub fn admit(&self, cfg: &Config, uid: u32) -> Result<(), String> {
        let n = self.uids.get(&uid).map_or(0, |u| u.clients);
        if n >= cfg.max_clients_per_uid {
            return Err(format!("uid {uid} already has {n} clients (--max-clients-per-uid {})", cfg.max_clients_per_uid));
        }
        let low = memory::lowest_free_fd();
        if low >= cfg.fd_limit.saturating_sub(cfg.fd_reserve / 4) {
            return Err(format!("the node is out of descriptors (lowest free {low}, limit {})", cfg.fd_limit));
        }
        Ok(())
    }

    /// The segment a client's handle stands for: one it created (and has not
    /// removed) or one it attached to.
    fn held(&self, client: ClientId, handle: ObjId) -> Result<ObjId, SciError> {
        if let Some(a) = self.seg_attach.get(&handle) {
            return if a.client == client { Ok(a.seg) } else { Err(SciError::IllegalParameter) };
        }
        match self.segments.get(&handle) {
            Some(s) if s.owner == client && !s.owner_removed => Ok(handle),
            _ => Err(SciError::IllegalParameter),
        }
    }

    fn owned_segment(&mut self, client: ClientId, handle: ObjId) -> Result<&mut Segment, SciError> {
        let seg = self.held(client, handle)?;
        Ok(self.segments.get_mut(&seg).expect("held segments exist"))
    }

    /// Tell every holder of a segment (owner and attachers, each under its
    /// own handle) about a connection coming or going.
    fn notify_holders(&self, seg: ObjId, reason: SegmentEvent, node_id: u32) {
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

    fn create_segment(
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
        let (uid, local) = self.clients.get(&client).map(|c| (c.info.uid, c.node_id.is_none())).ok_or(SciError::NoLinkAccess)?;
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
    fn release_segment(&mut self, handle: ObjId) {
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

    fn remove_segment(&mut self, seg: ObjId) {
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
                    Outgoing::event(Event::RemoteSegment { conn: *conn, reason: SegmentEvent::Lost, status: SciError::Ok }),
                );
            }
        }
        if !s.owner_removed {
            self.uncharge(s.owner);
        }
        debug!("segment {} removed", s.segment_id);
    }

    fn attach_segment(&mut self, cfg: &Config, client: ClientId, segment_id: u32) -> Result<Outgoing, SciError> {
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
    fn may_connect(&self, cfg: &Config, client: ClientId, uid: u32, gid: u32) -> Result<(), SciError> {
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
            debug!("client {client} (uid {} gid {}) may not connect to an object of uid {uid} gid {gid}", c.info.uid, c.info.gid);
            Err(SciError::Access)
        }
    }

    fn connect_segment(&mut self, cfg: &Config, client: ClientId, segment_id: u32, broadcast: bool) -> Result<Outgoing, SciError> {
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
            msg: reply_ok(0, Reply::Connected { conn, node_id: cfg.node_id, segment_id, size, remote: None, proxied: false }),
            fds: vec![fd],
        })
    }

    fn disconnect_segment(&mut self, cfg: &Config, conn: ObjId) {
        let Some(c) = self.seg_conns.remove(&conn) else { return };
        self.uncharge(c.client);
        if let Some(s) = self.segments.get_mut(&c.seg) {
            s.conns.remove(&conn);
            let from = self.node_of(cfg, c.client);
            self.notify_holders(c.seg, SegmentEvent::Disconnect, from);
        }
    }

    // ---- interrupts -------------------------------------------------------

    fn create_interrupt(
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
        let arena = self.arenas.entry((client, kind)).or_insert_with(|| Arena::new(kind, format!("vsci-intr-{client}-{kind:?}")));
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
    fn release_slot_owner(&mut self, client: ClientId, kind: IntrKind, objects: Option<IntrObjects>) {
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

    fn remove_interrupt(&mut self, intr: ObjId) {
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

    fn connect_interrupt(
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

    fn disconnect_interrupt(&mut self, conn: ObjId) {
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
        let shadow = memory::sealed_memfd(&format!("vsci-shadow-{peer}-{segment_id}"), grant.size).map_err(|_| SciError::Nospc)?;
        self.charge(cfg, client)?;
        let conn = self.new_id();
        self.remote_segs.insert(conn, RemoteSeg { client, peer, remote_conn: grant.conn, segment_id });
        Ok(Outgoing {
            msg: reply_ok(0, Reply::Connected { conn, node_id: peer, segment_id, size: grant.size, remote: Some(access), proxied: false }),
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
        Ok(Outgoing { msg: reply_ok(0, Reply::InterruptConnected { conn, remote: Some(trig), place: None }), fds: Vec::new() })
    }

    /// The owner node reports an event on one of our clients' connections.
    pub fn remote_segment_event(&mut self, peer: u32, remote_conn: ObjId, reason: SegmentEvent) {
        let Some((&conn, rec)) = self.remote_segs.iter().find(|(_, r)| r.peer == peer && r.remote_conn == remote_conn) else {
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
        let Some((&conn, rec)) = self.remote_intrs.iter().find(|(_, r)| r.peer == peer && r.remote_conn == remote_conn) else {
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
    fn lend(&mut self, client: ClientId, size: u64) -> Result<Outgoing, SciError> {
        let Some(node_id) = self.clients.get(&client).and_then(|c| c.node_id) else { return Err(SciError::IllegalOperation) };
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
    fn return_loan(&mut self, client: ClientId, loan: ObjId) -> Result<Outgoing, SciError> {
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
    pub fn add_borrowed(&mut self, client: ClientId, lender: u32, grant: &vsci_proto::peer::RemoteSegmentGrant, access: vsci_proto::RemoteAccess) -> Result<Outgoing, SciError> {
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
        let conns: Vec<(ClientId, ObjId)> = self.remote_segs.iter().filter(|(_, r)| r.peer == peer).map(|(k, r)| (r.client, *k)).collect();
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
            self.send(rec.client, Outgoing::event(Event::RemoteSegment { conn, reason: SegmentEvent::Lost, status: SciError::NodeNotResponding }));
        }
        let intrs: Vec<ObjId> = self.remote_intrs.iter().filter(|(_, r)| r.peer == peer).map(|(k, _)| *k).collect();
        for conn in intrs {
            let rec = self.remote_intrs.remove(&conn).expect("listed");
            self.uncharge(rec.client);
            self.send(rec.client, Outgoing::event(Event::InterruptGone { conn, status: SciError::NodeNotResponding }));
        }
    }

    fn disconnect_remote_segment(&mut self, conn: ObjId) {
        if let Some(rec) = self.remote_segs.remove(&conn) {
            self.uncharge(rec.client);
            if let Some(l) = &self.links {
                l.send(rec.peer, vsci_proto::peer::PeerMsg::DisconnectSegment { conn: rec.remote_conn });
            }
        }
    }

    fn disconnect_remote_interrupt(&mut self, conn: ObjId) {
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
        let rintrs: Vec<ObjId> = self.remote_intrs.iter().filter(|(_, r)| r.client == client).map(|(k, _)| *k).collect();
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
        self.clients.insert(id, ClientEntry { info, tx, sock, node_id: None, objects: 0, waiting: 0, limits_logged: 0 });
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
            .map(|i| InterruptInfo { number: i.number, data: i.kind == IntrKind::Data, owner: i.owner, connections: i.conns.len() as u32 })
            .collect();
        st.connections.extend(self.remote_segs.values().map(|r| ConnectionInfo { client: r.client, node_id: r.peer, segment_id: r.segment_id }));
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

fn reply_ok(tag: u64, r: Reply) -> ServerMsg {
    ServerMsg::Reply { tag, result: Ok(r) }
}

/// Fill in the request tag of a reply built by a handler.
pub fn tagged(mut out: Outgoing, tag: u64) -> Outgoing {
    if let ServerMsg::Reply { tag: t, .. } = &mut out.msg {
        *t = tag;
    }
    out
}

/// The node: configuration plus the registry and its change signal.
pub struct Node {
    pub cfg: Config,
    pub started: Instant,
    pub reg: Mutex<Registry>,
    /// Signalled on every change a parked request might be waiting for.
    pub changed: Condvar,
}

/// What a handler decided.
pub enum Handled {
    Reply(Outgoing),
    /// The reply will be sent later by a waiting thread.
    Deferred,
}

impl Node {
    pub fn new(cfg: Config) -> Arc<Node> {
        let reg = Registry { loans: crate::loans::Loans::new(cfg.lend_pool), ..Default::default() };
        Arc::new(Node { cfg, started: Instant::now(), reg: Mutex::new(reg), changed: Condvar::new() })
    }

    pub fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock leaves the registry as the handler
        // left it; the node keeps serving rather than cascade (see
        // crate::recover).
        self.reg.locked()
    }

    fn check_node(&self, node_id: u32) -> Result<(), SciError> {
        if node_id == self.cfg.node_id {
            Ok(())
        } else {
            Err(SciError::NoSuchNodeid)
        }
    }

    /// Handle one validated request from `client`.
    pub fn handle(self: &Arc<Self>, client: ClientId, tag: u64, req: vsci_proto::Request) -> Handled {
        self.handle_with(client, tag, req, None)
    }

    /// Handle a request that may carry a validated eventfd (`wake`, only for
    /// `CreateInterruptWake`).
    pub fn handle_with(self: &Arc<Self>, client: ClientId, tag: u64, req: vsci_proto::Request, wake: Option<OwnedFd>) -> Handled {
        use vsci_proto::Request as R;
        let cfg = &self.cfg;
        let mut reg = self.lock();
        crate::recover::test_panic(&req);
        let result: Result<Outgoing, SciError> = match req {
            // Close ends the connection, which the connection's server does
            // (`client::Server::request`); it never reaches the registry.
            R::Hello { .. } | R::FetchRemote { .. } | R::ShipRemote { .. } | R::DmaStart { .. } | R::DmaAbort { .. } | R::Close => {
                Err(SciError::IllegalOperation)
            }
            R::CreateSegment { segment_id, auto_id, size, events: _, broadcast } => {
                let r = reg.create_segment(cfg, client, segment_id, auto_id, size, broadcast);
                self.changed.notify_all();
                r
            }
            R::PrepareSegment { seg } => reg.owned_segment(client, seg).map(|s| {
                s.prepared = true;
                done()
            }),
            R::SetAvailable { seg } => {
                let r = reg.owned_segment(client, seg).and_then(|s| {
                    if !s.prepared {
                        return Err(SciError::SegmentNotPrepared);
                    }
                    s.available = true;
                    Ok(done())
                });
                self.changed.notify_all();
                r
            }
            R::SetUnavailable { seg: handle, notify, force_disconnect } => {
                let seg = reg.held(client, handle);
                match seg.and_then(|seg| reg.owned_segment(client, seg)).and_then(|s| {
                    if !s.prepared {
                        return Err(SciError::SegmentNotPrepared);
                    }
                    s.available = false;
                    Ok(s.conns.iter().copied().collect::<Vec<_>>())
                }) {
                    Err(e) => Err(e),
                    Ok(conns) => {
                        let seg = seg.expect("held");
                        for conn in conns {
                            let Some(c) = reg.seg_conns.get(&conn) else { continue };
                            let connector = c.client;
                            if force_disconnect {
                                reg.seg_conns.remove(&conn);
                                reg.uncharge(connector);
                                if let Some(s) = reg.segments.get_mut(&seg) {
                                    s.conns.remove(&conn);
                                }
                                reg.send(connector, Outgoing::event(Event::RemoteSegment { conn, reason: SegmentEvent::Lost, status: SciError::Ok }));
                            } else if notify {
                                reg.send(connector, Outgoing::event(Event::RemoteSegment { conn, reason: SegmentEvent::Disconnect, status: SciError::Ok }));
                            }
                        }
                        Ok(done())
                    }
                }
            }
            R::RemoveSegment { seg } => reg.held(client, seg).map(|_| {
                reg.release_segment(seg);
                self.changed.notify_all();
                done()
            }),
            R::ShareSegment { seg } => reg.owned_segment(client, seg).map(|s| {
                s.shared = true;
                done()
            }),
            R::AttachSegment { segment_id } => reg.attach_segment(cfg, client, segment_id),
            R::ConnectSegment { node_id, segment_id, timeout_ms, broadcast } if reg.links.as_ref().is_some_and(|l| l.is_member(node_id)) => {
                let links = reg.links.clone().expect("checked");
                drop(reg);
                links.connect_segment(Arc::clone(self), client, tag, node_id, segment_id, timeout_ms, broadcast);
                return Handled::Deferred;
            }
            R::ConnectSegment { node_id, segment_id, timeout_ms, broadcast } => {
                match self.check_node(node_id).and_then(|()| reg.connect_segment(cfg, client, segment_id, broadcast)) {
                    Err(SciError::NoSuchSegment | SciError::ConnectionRefused) if timeout_ms > 0 => {
                        return self.defer(reg, client, tag, timeout_ms, move |reg, cfg| {
                            reg.connect_segment(cfg, client, segment_id, broadcast)
                        });
                    }
                    r => r,
                }
            }
            R::DisconnectSegment { conn } => match (reg.seg_conns.get(&conn), reg.remote_segs.get(&conn)) {
                (Some(c), _) if c.client == client => {
                    reg.disconnect_segment(cfg, conn);
                    Ok(done())
                }
                (_, Some(r)) if r.client == client => {
                    reg.disconnect_remote_segment(conn);
                    Ok(done())
                }
                _ => Err(SciError::IllegalParameter),
            },
            R::CreateInterrupt { kind, hint, fixed } => {
                let r = reg.create_interrupt(cfg, client, kind, hint, fixed, None);
                self.changed.notify_all();
                r
            }
            R::CreateInterruptWake { kind, hint, fixed } => match wake {
                Some(fd) => {
                    let r = reg.create_interrupt(cfg, client, kind, hint, fixed, Some(fd));
                    self.changed.notify_all();
                    r
                }
                None => Err(SciError::IllegalParameter),
            },
            R::RemoveInterrupt { intr } => match reg.intrs.get(&intr) {
                Some(i) if i.owner == client => {
                    reg.remove_interrupt(intr);
                    Ok(done())
                }
                _ => Err(SciError::IllegalParameter),
            },
            R::ConnectInterrupt { kind, node_id, number, timeout_ms } if reg.links.as_ref().is_some_and(|l| l.is_member(node_id)) => {
                let links = reg.links.clone().expect("checked");
                drop(reg);
                links.connect_interrupt(Arc::clone(self), client, tag, node_id, kind, number, timeout_ms);
                return Handled::Deferred;
            }
            R::ConnectInterrupt { kind, node_id, number, timeout_ms } => {
                match self.check_node(node_id).and_then(|()| reg.connect_interrupt(cfg, client, kind, number)) {
                    Err(SciError::ConnectionRefused) if timeout_ms > 0 => {
                        return self.defer(reg, client, tag, timeout_ms, move |reg, cfg| {
                            reg.connect_interrupt(cfg, client, kind, number)
                        });
                    }
                    r => r,
                }
            }
            R::DisconnectInterrupt { conn } => match (reg.intr_conns.get(&conn), reg.remote_intrs.get(&conn)) {
                (Some(c), _) if c.client == client => {
                    reg.disconnect_interrupt(conn);
                    Ok(done())
                }
                (_, Some(r)) if r.client == client => {
                    reg.disconnect_remote_interrupt(conn);
                    Ok(done())
                }
                _ => Err(SciError::IllegalParameter),
            },
            R::ProbeNode { node_id } => {
                let reachable = node_id == cfg.node_id || reg.links.as_ref().is_some_and(|l| l.is_up(node_id));
                if !reachable && reg.links.as_ref().is_some_and(|l| l.is_member(node_id)) {
                    Err(SciError::NodeNotResponding)
                } else {
                    Ok(simple(Reply::Probe { reachable }))
                }
            }
            R::Status => Ok(simple(Reply::Status(Box::new(reg.status(cfg, self.started))))),
            R::Borrow { node_id, size } if node_id != cfg.node_id && reg.links.as_ref().is_some_and(|l| l.is_member(node_id)) => {
                if size == 0 {
                    Err(SciError::IllegalParameter)
                } else if reg.clients.get(&client).is_some_and(|c| c.waiting >= cfg.max_waiting_per_client) {
                    // Each borrow in flight holds a thread until the lender
                    // answers: bounded like connects that wait.
                    Err(reg.limit_hit(cfg, client, Limit::PendingPerClient))
                } else {
                    match reg.charge(cfg, client) {
                        Err(e) => Err(e),
                        Ok(()) => {
                            if let Some(c) = reg.clients.get_mut(&client) {
                                c.waiting += 1;
                            }
                            let links = reg.links.clone().expect("checked");
                            drop(reg);
                            links.borrow(Arc::clone(self), client, tag, node_id, size);
                            return Handled::Deferred;
                        }
                    }
                }
            }
            // Not from ourselves: a program that wants its own node's memory
            // makes a segment.
            R::Borrow { node_id, .. } if node_id == cfg.node_id => Err(SciError::IllegalParameter),
            R::Borrow { .. } => Err(SciError::NoSuchNodeid),
            R::Lend { size } => reg.lend(client, size),
            R::ReturnLoan { loan } => reg.return_loan(client, loan),
        };
        Handled::Reply(match result {
            Ok(out) => tagged(out, tag),
            Err(e) => Outgoing::reply(tag, Err(e)),
        })
    }

    /// Park a request until `attempt` succeeds, the client goes away, or
    /// `timeout_ms` passes (then reply with the last attempt's error). Runs on its own thread
    /// so the client's other requests keep flowing.
    fn defer<F>(
        self: &Arc<Self>,
        mut reg: MutexGuard<'_, Registry>,
        client: ClientId,
        tag: u64,
        timeout_ms: u32,
        attempt: F,
    ) -> Handled
    where
        F: Fn(&mut Registry, &Config) -> Result<Outgoing, SciError> + Send + 'static,
    {
        let Some(c) = reg.clients.get_mut(&client) else { return Handled::Deferred };
        if c.waiting >= self.cfg.max_waiting_per_client {
            let e = reg.limit_hit(&self.cfg, client, Limit::PendingPerClient);
            return Handled::Reply(Outgoing::reply(tag, Err(e)));
        }
        c.waiting += 1;
        drop(reg);
        let deadline = (timeout_ms != u32::MAX).then(|| Instant::now() + Duration::from_millis(timeout_ms.into()));
        let node = Arc::clone(self);
        std::thread::spawn(move || {
            let mut reg = node.lock();
            let mut last_err;
            loop {
                if !reg.clients.contains_key(&client) {
                    return; // client gone; nothing to answer
                }
                // A panic of the attempt ends this request, not the node
                // (see crate::recover).
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| attempt(&mut reg, &node.cfg))).unwrap_or_else(|p| {
                    log::error!("client {client}: a waiting request (tag {tag}) panicked ({}); answering SCI_ERR_SYSTEM", crate::recover::message(&*p));
                    Err(SciError::System)
                });
                match r {
                    Ok(out) => {
                        finish_wait(&mut reg, client, tagged(out, tag));
                        return;
                    }
                    Err(e @ (SciError::NoSuchSegment | SciError::ConnectionRefused)) => last_err = e,
                    Err(e) => {
                        finish_wait(&mut reg, client, Outgoing::reply(tag, Err(e)));
                        return;
                    }
                }
                let wait = match deadline {
                    None => Duration::from_secs(3600),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            finish_wait(&mut reg, client, Outgoing::reply(tag, Err(last_err)));
                            return;
                        }
                        d - now
                    }
                };
                reg = node.changed.wait_timeout(reg, wait).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            }
        });
        Handled::Deferred
    }
}

fn finish_wait(reg: &mut Registry, client: ClientId, out: Outgoing) {
    if let Some(c) = reg.clients.get_mut(&client) {
        c.waiting = c.waiting.saturating_sub(1);
    }
    reg.send(client, out);
}

fn done() -> Outgoing {
    simple(Reply::Done)
}

fn simple(r: Reply) -> Outgoing {
    Outgoing { msg: reply_ok(0, r), fds: Vec::new() }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{sync_channel, Receiver};

    use vsci_proto::Request as R;

    use super::*;

    fn node() -> Arc<Node> {
        Node::new(Config {
            node_id: 7,
            socket: "test".into(),
            wait_mode: WaitMode::Adaptive,
            spin_us: 0,
            max_segment_size: 1 << 30,
            max_objects_per_client: 8,
            max_waiting_per_client: 2,
            max_objects_per_uid: 1 << 20,
            max_clients_per_uid: 1 << 20,
            max_memory_per_uid: 0,
            fd_limit: 1 << 20,
            fd_reserve: 64,
            connect_policy: ConnectPolicy::Any,
            lend_pool: 0,
        })
    }

    fn add_client(n: &Node) -> (ClientId, Receiver<Outgoing>) {
        let (tx, rx) = sync_channel(64);
        let sock: OwnedFd = nix::sys::eventfd::EventFd::new().unwrap().into();
        let id = n.lock().register_client(ClientInfo::default(), tx, Arc::new(sock));
        (id, rx)
    }

    fn call(n: &Arc<Node>, c: ClientId, req: R) -> (Result<Reply, SciError>, usize) {
        match n.handle(c, 1, req) {
            Handled::Reply(Outgoing { msg: ServerMsg::Reply { result, .. }, fds }) => (result, fds.len()),
            _ => panic!("expected an immediate reply"),
        }
    }

    fn seg_of(r: Result<Reply, SciError>) -> ObjId {
        match r {
            Ok(Reply::Segment { seg, .. }) => seg,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn segment_life_cycle_and_events() {
        let n = node();
        let (a, rx_a) = add_client(&n);
        let (b, rx_b) = add_client(&n);
        let (r, nfds) = call(&n, a, R::CreateSegment { segment_id: 5, auto_id: false, size: 4096, events: true, broadcast: false });
        assert_eq!(nfds, 1, "the reply carries the memfd");
        let seg = seg_of(r);
        assert_eq!(call(&n, a, R::CreateSegment { segment_id: 5, auto_id: false, size: 1, events: true, broadcast: false }).0.unwrap_err(), SciError::SegmentidUsed);
        assert_eq!(call(&n, b, R::ConnectSegment { node_id: 7, segment_id: 5, timeout_ms: 0, broadcast: false }).0.unwrap_err(), SciError::ConnectionRefused);
        assert_eq!(call(&n, a, R::SetAvailable { seg }).0.unwrap_err(), SciError::SegmentNotPrepared);
        call(&n, a, R::PrepareSegment { seg }).0.unwrap();
        call(&n, a, R::SetAvailable { seg }).0.unwrap();
        assert_eq!(call(&n, b, R::ConnectSegment { node_id: 8, segment_id: 5, timeout_ms: 0, broadcast: false }).0.unwrap_err(), SciError::NoSuchNodeid);
        let conn = match call(&n, b, R::ConnectSegment { node_id: 7, segment_id: 5, timeout_ms: 0, broadcast: false }).0 {
            Ok(Reply::Connected { conn, size: 4096, .. }) => conn,
            other => panic!("{other:?}"),
        };
        assert!(matches!(rx_a.try_recv().unwrap().msg, ServerMsg::Event(Event::LocalSegment { reason: SegmentEvent::Connect, node_id: 7, .. })));
        // Isolation: B cannot remove or prepare A's segment, A cannot disconnect B.
        assert_eq!(call(&n, b, R::RemoveSegment { seg }).0.unwrap_err(), SciError::IllegalParameter);
        assert_eq!(call(&n, a, R::DisconnectSegment { conn }).0.unwrap_err(), SciError::IllegalParameter);
        // Removing a connected segment succeeds and tells the connector.
        call(&n, a, R::RemoveSegment { seg }).0.unwrap();
        assert!(matches!(rx_b.try_recv().unwrap().msg, ServerMsg::Event(Event::RemoteSegment { reason: SegmentEvent::Lost, .. })));
        let reg = n.lock();
        assert!(reg.segments.is_empty() && reg.seg_conns.is_empty() && reg.seg_by_id.is_empty());
    }

    #[test]
    fn group_connects_find_only_broadcast_segments() {
        let n = node();
        let (a, _rx_a) = add_client(&n);
        let (b, _rx_b) = add_client(&n);
        for (id, broadcast) in [(5, false), (6, true)] {
            let seg = seg_of(call(&n, a, R::CreateSegment { segment_id: id, auto_id: false, size: 4096, events: true, broadcast }).0);
            call(&n, a, R::PrepareSegment { seg }).0.unwrap();
            call(&n, a, R::SetAvailable { seg }).0.unwrap();
        }
        // An ordinary segment with the group's id is not a member...
        assert_eq!(call(&n, b, R::ConnectSegment { node_id: 7, segment_id: 5, timeout_ms: 0, broadcast: true }).0.unwrap_err(), SciError::NoSuchSegment);
        // ...a broadcast one is, and unicast connects reach both.
        for (id, broadcast) in [(6, true), (6, false), (5, false)] {
            assert!(matches!(call(&n, b, R::ConnectSegment { node_id: 7, segment_id: id, timeout_ms: 0, broadcast }).0, Ok(Reply::Connected { .. })));
        }
        let st = n.lock().status(&n.cfg, Instant::now());
        let flags: Vec<(u32, bool)> = st.segments.iter().map(|s| (s.segment_id, s.broadcast)).collect();
        assert!(flags.contains(&(5, false)) && flags.contains(&(6, true)), "{flags:?}");
    }

    #[test]
    fn dead_client_releases_everything() {
        let n = node();
        let (a, _rx_a) = add_client(&n);
        let (b, rx_b) = add_client(&n);
        let seg = seg_of(call(&n, a, R::CreateSegment { segment_id: 0, auto_id: true, size: 8192, events: true, broadcast: false }).0);
        call(&n, a, R::PrepareSegment { seg }).0.unwrap();
        call(&n, a, R::SetAvailable { seg }).0.unwrap();
        let id = n.lock().segments[&seg].segment_id;
        call(&n, b, R::ConnectSegment { node_id: 7, segment_id: id, timeout_ms: 0, broadcast: false }).0.unwrap();
        let number = match call(&n, a, R::CreateInterrupt { kind: IntrKind::Plain, hint: 3, fixed: true }).0 {
            Ok(Reply::Interrupt { number, .. }) => number,
            other => panic!("{other:?}"),
        };
        assert_eq!(number, 3);
        assert_eq!(call(&n, b, R::CreateInterrupt { kind: IntrKind::Plain, hint: 3, fixed: true }).0.unwrap_err(), SciError::Busy);
        match call(&n, b, R::CreateInterrupt { kind: IntrKind::Plain, hint: 3, fixed: false }).0 {
            Ok(Reply::Interrupt { number, .. }) => assert_ne!(number, 3, "a taken hint gives another number"),
            other => panic!("{other:?}"),
        }
        call(&n, b, R::ConnectInterrupt { kind: IntrKind::Plain, node_id: 7, number: 3, timeout_ms: 0 }).0.unwrap();
        let cfg = n.cfg.clone();
        n.lock().remove_client(&cfg, a);
        let kinds: Vec<_> = rx_b.try_iter().map(|o| o.msg).collect();
        assert!(kinds.iter().any(|m| matches!(m, ServerMsg::Event(Event::RemoteSegment { reason: SegmentEvent::Lost, .. }))));
        assert!(kinds.iter().any(|m| matches!(m, ServerMsg::Event(Event::InterruptGone { .. }))));
        let reg = n.lock();
        assert!(reg.segments.is_empty() && reg.seg_conns.is_empty());
        assert_eq!(reg.intrs.len(), 1, "only B's own interrupt is left");
        assert!(reg.intr_conns.is_empty());
    }

    /// Found by the client_request fuzz target: an owner that left while
    /// another uid's program kept its shared segment attached left its
    /// uid's usage entry behind (all zero) once the segment went.
    #[test]
    fn an_owner_gone_before_its_segment_leaves_no_uid_entry() {
        let n = node();
        let (tx, _rx_a) = sync_channel(64);
        let sock: OwnedFd = nix::sys::eventfd::EventFd::new().unwrap().into();
        let a = n.lock().register_client(ClientInfo { uid: 1000, ..Default::default() }, tx, Arc::new(sock));
        let (b, _rx_b) = add_client(&n);
        let seg = seg_of(call(&n, a, R::CreateSegment { segment_id: 5, auto_id: false, size: 4096, events: false, broadcast: false }).0);
        call(&n, a, R::ShareSegment { seg }).0.unwrap();
        call(&n, b, R::AttachSegment { segment_id: 5 }).0.unwrap();
        let cfg = n.cfg.clone();
        n.lock().remove_client(&cfg, a);
        assert!(!n.lock().holds_nothing(), "the attachment keeps the segment");
        n.lock().remove_client(&cfg, b);
        assert!(n.lock().holds_nothing());
    }

    #[test]
    fn limits_are_enforced() {
        let n = node();
        let (a, _rx) = add_client(&n);
        assert_eq!(call(&n, a, R::CreateSegment { segment_id: 1, auto_id: false, size: 0, events: true, broadcast: false }).0.unwrap_err(), SciError::IllegalParameter);
        assert_eq!(call(&n, a, R::CreateSegment { segment_id: 1, auto_id: false, size: 2 << 30, events: true, broadcast: false }).0.unwrap_err(), SciError::Nospc);
        for i in 0..8 {
            seg_of(call(&n, a, R::CreateSegment { segment_id: 100 + i, auto_id: false, size: 4096, events: true, broadcast: false }).0);
        }
        assert_eq!(call(&n, a, R::CreateSegment { segment_id: 200, auto_id: false, size: 4096, events: true, broadcast: false }).0.unwrap_err(), SciError::Nospc);
    }
}
