//! The cluster runtime: keeps an authenticated link to every other node,
//! forwards our clients' remote requests, serves the other nodes' requests
//! for our segments and interrupts, and notices nodes that stop answering.
//!
//! Each remote node appears in our registry as a pseudo-client
//! ("node N"): its connections to our segments and interrupts are ordinary
//! registry objects, so the same validation, events and clean-up apply,
//! and when the link dies removing that pseudo-client releases everything
//! the node held here.
//!
//! Lock order: the registry lock may be held while queueing a frame to a
//! link (`Peers::send` takes only the peers lock, briefly); code in here
//! never takes the registry lock while holding the peers lock.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use vsci_proto::peer::{PeerMsg, RemoteInterruptGrant, RemoteSegmentGrant};
use vsci_proto::{
    ClientInfo, Event, IntrKind, PeerInfo, RemoteAccess, RemoteTrigger, Reply, Request, SciError, SegmentEvent,
    ServerMsg,
};

use crate::cluster::Cluster;
use crate::engine::Engine;
use crate::link::{self, Link};
use crate::registry::{ClientId, Handled, Node, Outgoing};

const HEARTBEAT: Duration = Duration::from_millis(250);
/// A liveness check this much later than planned means this node itself
/// was not running (scheduling noise on a loaded machine is milliseconds).
const PAUSED: Duration = HEARTBEAT;
const REDIAL: Duration = Duration::from_millis(300);
/// Frames that may wait for one link before it is considered stuck.
const LINK_QUEUE: usize = 4096;

#[derive(Default)]
struct PeerState {
    /// Frames to send; `None` while the link is down.
    tx: Option<SyncSender<PeerMsg>>,
    /// Link generation, so a stale link's clean-up does not hit a new one.
    generation: u64,
    fabric_addr: Option<Vec<u8>>,
    last_seen: Option<Instant>,
    /// Our pseudo-client standing for this node's imports of our objects.
    pseudo: Option<ClientId>,
    /// The link's socket, so the liveness check can cut a silent link.
    sock: Option<TcpStream>,
    ever_up: bool,
}

type ReplySlot = SyncSender<Result<PeerReply, SciError>>;

enum PeerReply {
    Segment(RemoteSegmentGrant),
    Interrupt(RemoteInterruptGrant),
    Loan(RemoteSegmentGrant),
}

/// What a pseudo-client's reply answers, in the low bits of its tag (the
/// peer's request number is above them; tag 0 is a disconnect's, unanswered).
const TAG_SEGMENT: u64 = 0;
const TAG_INTERRUPT: u64 = 1;
const TAG_LOAN: u64 = 2;
const TAG_BITS: u32 = 2;

pub struct Peers {
    me: u32,
    cluster: Cluster,
    engine: Arc<Engine>,
    state: Mutex<HashMap<u32, PeerState>>,
    changed: Condvar,
    pending: Mutex<HashMap<u64, ReplySlot>>,
    next_req: AtomicU64,
    next_gen: AtomicU64,
}

impl Peers {
    pub fn start(node: &Arc<Node>, cluster: Cluster, engine: Arc<Engine>) -> anyhow::Result<Arc<Peers>> {
        let me = node.cfg.node_id;
        let Some(my_addr) = cluster.nodes.get(&me).copied() else {
            anyhow::bail!("node {me} is not listed in the cluster file");
        };
        let listener = TcpListener::bind(my_addr).map_err(|e| anyhow::anyhow!("binding node link address {my_addr}: {e}"))?;
        let mut state = HashMap::new();
        for id in cluster.nodes.keys().filter(|id| **id != me) {
            state.insert(*id, PeerState::default());
        }
        let peers = Arc::new(Peers {
            me,
            cluster,
            engine,
            state: Mutex::new(state),
            changed: Condvar::new(),
            pending: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(1),
            next_gen: AtomicU64::new(1),
        });
        node.lock().links = Some(peers.clone());
        info!("cluster: node {me} links on {my_addr}; peers {:?}", peers.cluster.nodes.keys().filter(|i| **i != me).collect::<Vec<_>>());

        let (p, n) = (peers.clone(), node.clone());
        std::thread::Builder::new().name("vscid-links".into()).spawn(move || p.accept_loop(&n, listener))?;
        for (&id, &addr) in peers.cluster.nodes.iter().filter(|(id, _)| **id > me) {
            let (p, n) = (peers.clone(), node.clone());
            std::thread::Builder::new().name(format!("vscid-dial{id}")).spawn(move || p.dial_loop(&n, id, addr))?;
        }
        let p = peers.clone();
        std::thread::Builder::new().name("vscid-liveness".into()).spawn(move || p.liveness_loop())?;
        Ok(peers)
    }

    /// This node's RMA engine (for the metrics endpoint).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn is_member(&self, node_id: u32) -> bool {
        node_id != self.me && self.cluster.nodes.contains_key(&node_id)
    }

    pub fn is_up(&self, node_id: u32) -> bool {
        self.state.lock().unwrap().get(&node_id).is_some_and(|s| s.tx.is_some())
    }

    /// Queue a frame for a peer; false if the link is down or stuck.
    pub fn send(&self, peer: u32, msg: PeerMsg) -> bool {
        let st = self.state.lock().unwrap();
        match st.get(&peer).and_then(|s| s.tx.as_ref()) {
            Some(tx) => tx.try_send(msg).is_ok(),
            None => false,
        }
    }

    pub fn status(&self, imports: &HashMap<u32, u32>) -> Vec<PeerInfo> {
        let st = self.state.lock().unwrap();
        let mut v: Vec<PeerInfo> = st
            .iter()
            .map(|(id, s)| PeerInfo {
                node_id: *id,
                address: self.cluster.nodes[id].to_string(),
                state: if s.tx.is_some() { "up" } else if s.ever_up { "not responding" } else { "down" }.into(),
                last_seen_ms: s.last_seen.map(|t| t.elapsed().as_millis() as u64).unwrap_or(0),
                imports: imports.get(id).copied().unwrap_or(0),
            })
            .collect();
        v.sort_by_key(|p| p.node_id);
        v
    }

    fn accept_loop(self: &Arc<Self>, node: &Arc<Node>, listener: TcpListener) {
        for conn in listener.incoming() {
            let Ok(stream) = conn else { continue };
            let from = stream.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
            let (p, n) = (self.clone(), node.clone());
            let _ = std::thread::Builder::new().name("vscid-accept-link".into()).spawn(move || {
                match link::accept(stream, p.me, &p.cluster.key, |id| p.cluster.nodes.contains_key(&id)) {
                    Ok(l) => p.run_link(&n, l),
                    Err(e) => rate_limited_warn(&from, &format!("refused node link from {from}: {e:#}")),
                }
            });
        }
    }

    fn dial_loop(self: &Arc<Self>, node: &Arc<Node>, peer: u32, addr: SocketAddr) {
        let mut logged = false;
        loop {
            match link::dial(self.me, peer, addr, &self.cluster.key) {
                Ok(l) => {
                    logged = false;
                    self.run_link(node, l);
                }
                Err(e) => {
                    // An authentication failure is worth an operator's
                    // attention; a node that is simply not up yet is not.
                    let text = format!("{e:#}");
                    if text.contains("authentication") {
                        rate_limited_warn(&format!("dial {peer}"), &format!("cannot link to node {peer} at {addr}: {text}"));
                    } else if !logged {
                        debug!("cannot link to node {peer} at {addr}: {text}");
                        logged = true;
                    }
                }
            }
            std::thread::sleep(REDIAL);
        }
    }

    /// Serve one authenticated link until it breaks, then clean up.
    fn run_link(self: &Arc<Self>, node: &Arc<Node>, l: Link) {
        let peer = l.peer;
        let Link { stream, mut tx, mut rx, .. } = l;
        let generation = self.next_gen.fetch_add(1, Ordering::Relaxed);
        let (ftx, frx) = sync_channel::<PeerMsg>(LINK_QUEUE);
        let Ok(wstream) = stream.try_clone() else { return };
        let Ok(sock) = stream.try_clone().map(OwnedFd::from) else { return };

        // Our pseudo-client for this node's imports.
        let (ptx, prx) = sync_channel::<Outgoing>(LINK_QUEUE);
        let info = ClientInfo { client: 0, pid: 0, uid: 0, gid: 0, name: format!("node {peer}") };
        let pseudo = {
            let mut reg = node.lock();
            let id = reg.register_client(info, ptx, Arc::new(sock));
            reg.set_client_node(id, peer);
            id
        };

        let old_pseudo = {
            let mut st = self.state.lock().unwrap();
            let s = st.entry(peer).or_default();
            let old = s.pseudo.replace(pseudo);
            s.tx = Some(ftx.clone());
            s.generation = generation;
            s.last_seen = Some(Instant::now());
            s.ever_up = true;
            s.fabric_addr = None;
            s.sock = stream.try_clone().ok();
            old
        };
        if let Some(old) = old_pseudo {
            node.lock().remove_client(&node.cfg, old);
        }
        info!("node {peer}: link up");
        self.changed.notify_all();
        let _ = ftx.try_send(PeerMsg::Info { node_id: self.me, fabric_addr: self.engine.address() });

        // Writer: frames from the queue, plus heartbeats.
        let writer = {
            let mut ws = wstream;
            std::thread::spawn(move || loop {
                match frx.recv_timeout(HEARTBEAT) {
                    Ok(m) => match tx.write(&mut ws, &m) {
                        Ok(n) => crate::metrics::get().link_frame(peer, "tx", n),
                        Err(_) => break,
                    },
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => match tx.write(&mut ws, &PeerMsg::Heartbeat) {
                        Ok(n) => crate::metrics::get().link_frame(peer, "tx", n),
                        Err(_) => break,
                    },
                    Err(_) => break,
                }
            })
        };
        // Forwarder: what our registry says to the pseudo-client goes to the peer.
        let forwarder = {
            let p = self.clone();
            std::thread::spawn(move || p.forward_pseudo(peer, prx))
        };

        let mut rs = stream;
        loop {
            let msg = match rx.read(&mut rs) {
                Ok((m, n)) => {
                    crate::metrics::get().link_frame(peer, "rx", n);
                    m
                }
                Err(e) => {
                    debug!("node {peer}: link read ended: {e:#}");
                    break;
                }
            };
            if let Some(s) = self.state.lock().unwrap().get_mut(&peer) {
                if s.generation == generation {
                    s.last_seen = Some(Instant::now());
                }
            }
            self.on_peer_msg(node, peer, pseudo, msg);
        }
        let _ = rs.shutdown(std::net::Shutdown::Both);

        // Clean up if this is still the current link of that peer.
        let current = {
            let mut st = self.state.lock().unwrap();
            match st.get_mut(&peer) {
                Some(s) if s.generation == generation => {
                    s.tx = None;
                    s.pseudo = None;
                    s.fabric_addr = None;
                    s.sock = None;
                    true
                }
                _ => false,
            }
        };
        {
            let mut reg = node.lock();
            reg.remove_client(&node.cfg, pseudo);
            if current {
                reg.peer_down(peer);
            }
        }
        node.changed.notify_all();
        if current {
            warn!("node {peer}: link down; its connections are lost");
            // Fail requests still waiting for this node.
            self.changed.notify_all();
        }
        drop(ftx);
        let _ = writer.join();
        let _ = forwarder.join();
    }

    /// Declare nodes that stopped talking dead (their link may hang on a
    /// cut cable for minutes otherwise).
    ///
    /// Silence counts only while this node itself runs. When the whole node
    /// stops for a while (its host pauses the VM, the machine is too loaded
    /// to run it, the process is stopped), the frames its peers sent
    /// meanwhile wait unread in the links' sockets, and if they were stopped
    /// too (one VM holding several nodes) they send their next heartbeat
    /// only after waking. The first check after such a pause would then find
    /// every peer "silent" before any reader had a chance to run, and cut
    /// every link: every remote connection lost, and a program's remote map
    /// silently stops shipping its stores, although no node ever stopped
    /// answering. So a check that comes late by `late` moves every peer's
    /// last word `late` forward: the peers get the time they had left.
    fn liveness_loop(self: &Arc<Self>) {
        let timeout = Duration::from_millis(self.cluster.node_timeout_ms);
        let mut last_check = Instant::now();
        loop {
            std::thread::sleep(HEARTBEAT);
            let now = Instant::now();
            let late = now.saturating_duration_since(last_check).saturating_sub(HEARTBEAT);
            last_check = now;
            let mut st = self.state.lock().unwrap();
            if late >= PAUSED {
                info!("this node did not run for {} ms; its peers' silence meanwhile is not held against them", late.as_millis());
                for s in st.values_mut() {
                    if let Some(t) = s.last_seen.as_mut() {
                        *t = (*t + late).min(now);
                    }
                }
            }
            for (id, s) in st.iter() {
                if s.tx.is_some() && s.last_seen.is_some_and(|t| t.elapsed() > timeout) {
                    warn!("node {id}: silent for {} ms; closing its link", timeout.as_millis());
                    // The link's reader fails next and runs the clean-up.
                    if let Some(sock) = &s.sock {
                        let _ = sock.shutdown(std::net::Shutdown::Both);
                    }
                }
            }
        }
    }

    fn on_peer_msg(self: &Arc<Self>, node: &Arc<Node>, peer: u32, pseudo: ClientId, msg: PeerMsg) {
        match msg {
            PeerMsg::Heartbeat => {}
            PeerMsg::Info { node_id, fabric_addr } => {
                if node_id != peer {
                    warn!("node {peer} calls itself {node_id}; ignoring its info");
                    return;
                }
                if let Some(s) = self.state.lock().unwrap().get_mut(&peer) {
                    s.fabric_addr = Some(fabric_addr);
                }
                self.changed.notify_all();
            }
            // Requests for our objects: run them as the pseudo-client (a
            // disconnect first revokes the peer's RMA access).
            PeerMsg::ConnectSegment { .. }
            | PeerMsg::ConnectInterrupt { .. }
            | PeerMsg::DisconnectSegment { .. }
            | PeerMsg::DisconnectInterrupt { .. }
            | PeerMsg::Borrow { .. }
            | PeerMsg::ReturnLoan { .. } => {
                match msg {
                    PeerMsg::DisconnectSegment { conn } => self.engine.release_segment_conn(conn),
                    PeerMsg::DisconnectInterrupt { conn } => self.engine.remove_trigger_conn(conn),
                    _ => {}
                }
                if let Some((tag, r)) = peer_request(self.me, &msg) {
                    run_for_peer(node, pseudo, tag, r);
                }
            }
            // Answers and events about our clients' imports.
            PeerMsg::ConnectSegmentReply { req, result } => self.complete(req, result.map(PeerReply::Segment)),
            PeerMsg::ConnectInterruptReply { req, result } => self.complete(req, result.map(PeerReply::Interrupt)),
            PeerMsg::BorrowReply { req, result } => self.complete(req, result.map(PeerReply::Loan)),
            PeerMsg::SegmentEvent { conn, reason } => node.lock().remote_segment_event(peer, conn, reason),
            PeerMsg::InterruptGone { conn } => node.lock().remote_interrupt_gone(peer, conn),
        }
    }

    fn complete(&self, req: u64, r: Result<PeerReply, SciError>) {
        if let Some(slot) = self.pending.lock().unwrap().remove(&req) {
            let _ = slot.try_send(r);
        }
    }

    /// Translate what the registry tells a pseudo-client into frames for
    /// the node it stands for.
    fn forward_pseudo(self: &Arc<Self>, peer: u32, rx: Receiver<Outgoing>) {
        for out in rx {
            let msg = match out.msg {
                ServerMsg::Reply { tag: 0, .. } => continue, // disconnect acknowledgements
                ServerMsg::Reply { tag, result } if tag & 3 == TAG_LOAN => {
                    let result = result.and_then(|r| match r {
                        Reply::Lent { loan, size, region } => Ok(RemoteSegmentGrant { conn: loan, size, region }),
                        _ => Err(SciError::System),
                    });
                    if let Err(e) = &result {
                        debug!("node {peer}: loan request failed: {e}");
                    }
                    PeerMsg::BorrowReply { req: tag >> TAG_BITS, result }
                }
                ServerMsg::Reply { tag, result } if tag & 3 == TAG_SEGMENT => {
                    let result = result.and_then(|r| match r {
                        Reply::Connected { conn, size, .. } => {
                            let fd = out.fds.into_iter().next().ok_or(SciError::System)?;
                            let region = self.engine.register_segment_conn(conn, fd, size)?;
                            Ok(RemoteSegmentGrant { conn, size, region })
                        }
                        _ => Err(SciError::System),
                    });
                    if let Err(e) = &result {
                        debug!("node {peer}: segment request failed: {e}");
                    }
                    PeerMsg::ConnectSegmentReply { req: tag >> TAG_BITS, result }
                }
                ServerMsg::Reply { tag, result } => {
                    let result = result.and_then(|r| match r {
                        Reply::InterruptConnected { conn, place: Some(place), .. } => {
                            let mut fds = out.fds.into_iter();
                            let (Some(chunk), Some(efd)) = (fds.next(), fds.next()) else { return Err(SciError::System) };
                            let token = self.engine.add_trigger_conn(conn, chunk, place, efd)?;
                            Ok(RemoteInterruptGrant { conn, token })
                        }
                        _ => Err(SciError::System),
                    });
                    PeerMsg::ConnectInterruptReply { req: tag >> TAG_BITS, result }
                }
                ServerMsg::Event(Event::RemoteSegment { conn, reason, .. }) => {
                    if reason == SegmentEvent::Lost {
                        self.engine.release_segment_conn(conn);
                    }
                    PeerMsg::SegmentEvent { conn, reason }
                }
                ServerMsg::Event(Event::InterruptGone { conn, .. }) => {
                    self.engine.remove_trigger_conn(conn);
                    PeerMsg::InterruptGone { conn }
                }
                ServerMsg::Event(_) => continue,
            };
            if !self.send(peer, msg) {
                break;
            }
        }
    }

    /// Wait until `peer`'s link is up and its engine address known.
    fn wait_ready(&self, peer: u32, deadline: Option<Instant>) -> Result<Vec<u8>, SciError> {
        let mut st = self.state.lock().unwrap();
        loop {
            if let Some(s) = st.get(&peer) {
                if let (Some(_), Some(addr)) = (&s.tx, &s.fabric_addr) {
                    return Ok(addr.clone());
                }
            }
            let wait = match deadline {
                None => Duration::from_secs(1),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => w,
                    _ => return Err(SciError::NodeNotResponding),
                },
            };
            st = self.changed.wait_timeout(st, wait.min(Duration::from_millis(200))).unwrap().0;
        }
    }

    /// Send a request to `peer` and wait for its reply.
    fn ask(&self, peer: u32, deadline: Option<Instant>, make: impl FnOnce(u64) -> PeerMsg) -> Result<PeerReply, SciError> {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        self.pending.lock().unwrap().insert(req, tx);
        if !self.send(peer, make(req)) {
            self.pending.lock().unwrap().remove(&req);
            return Err(SciError::NodeNotResponding);
        }
        // The owner enforces the timeout; allow for the round trip, and
        // watch the link so a dying node does not leave us hanging.
        let hard = deadline.map(|d| d + Duration::from_secs(3));
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(r) => return r,
                Err(_) => {
                    if !self.is_up(peer) || hard.is_some_and(|h| Instant::now() > h) {
                        self.pending.lock().unwrap().remove(&req);
                        return Err(SciError::NodeNotResponding);
                    }
                }
            }
        }
    }

    /// A local client asks for a segment of another node (runs on its own thread).
    #[allow(clippy::too_many_arguments)]
    pub fn connect_segment(self: &Arc<Self>, node: Arc<Node>, client: ClientId, tag: u64, peer: u32, segment_id: u32, timeout_ms: u32, broadcast: bool) {
        let p = self.clone();
        std::thread::spawn(move || {
            let deadline = (timeout_ms != u32::MAX).then(|| Instant::now() + Duration::from_millis(timeout_ms.into()));
            let result = p.wait_ready(peer, deadline.or(Some(Instant::now() + Duration::from_secs(10)))).and_then(|addr| {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()).as_millis() as u32).unwrap_or(u32::MAX);
                match p.ask(peer, deadline, |req| PeerMsg::ConnectSegment { req, segment_id, timeout_ms: left, broadcast })? {
                    PeerReply::Segment(g) => Ok((g, addr)),
                    _ => Err(SciError::System),
                }
            });
            let mut reg = node.lock();
            match result {
                Ok((grant, addr)) => {
                    let access = RemoteAccess { region: grant.region, fabric_addr: addr, provider: p.cluster.provider.clone() };
                    match reg.add_remote_segment(&node.cfg, client, peer, segment_id, &grant, access) {
                        Ok(out) => reg.send_to(client, crate::registry::tagged(out, tag)),
                        Err(e) => {
                            drop(reg);
                            p.send(peer, PeerMsg::DisconnectSegment { conn: grant.conn });
                            node.lock().send_to(client, Outgoing::reply(tag, Err(e)));
                        }
                    }
                }
                Err(e) => reg.send_to(client, Outgoing::reply(tag, Err(e))),
            }
        });
    }

    /// A local client asks for an interrupt of another node.
    pub fn connect_interrupt(self: &Arc<Self>, node: Arc<Node>, client: ClientId, tag: u64, peer: u32, kind: IntrKind, number: u32, timeout_ms: u32) {
        let p = self.clone();
        std::thread::spawn(move || {
            let deadline = (timeout_ms != u32::MAX).then(|| Instant::now() + Duration::from_millis(timeout_ms.into()));
            let result = p.wait_ready(peer, deadline.or(Some(Instant::now() + Duration::from_secs(10)))).and_then(|addr| {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()).as_millis() as u32).unwrap_or(u32::MAX);
                match p.ask(peer, deadline, |req| PeerMsg::ConnectInterrupt { req, kind, number, timeout_ms: left })? {
                    PeerReply::Interrupt(g) => Ok((g, addr)),
                    _ => Err(SciError::System),
                }
            });
            let mut reg = node.lock();
            match result {
                Ok((grant, addr)) => {
                    let trig = RemoteTrigger { token: grant.token, fabric_addr: addr, provider: p.cluster.provider.clone() };
                    match reg.add_remote_interrupt(&node.cfg, client, peer, grant.conn, trig) {
                        Ok(out) => reg.send_to(client, crate::registry::tagged(out, tag)),
                        Err(e) => {
                            drop(reg);
                            p.send(peer, PeerMsg::DisconnectInterrupt { conn: grant.conn });
                            node.lock().send_to(client, Outgoing::reply(tag, Err(e)));
                        }
                    }
                }
                Err(e) => reg.send_to(client, Outgoing::reply(tag, Err(e))),
            }
        });
    }
}

impl Peers {
    /// A local client asks to borrow memory of another node (charged
    /// already; runs on its own thread).
    pub fn borrow(self: &Arc<Self>, node: Arc<Node>, client: ClientId, tag: u64, peer: u32, size: u64) {
        let p = self.clone();
        std::thread::spawn(move || {
            let deadline = Some(Instant::now() + Duration::from_secs(10));
            let result = p.wait_ready(peer, deadline).and_then(|addr| match p.ask(peer, deadline, |req| PeerMsg::Borrow { req, size })? {
                PeerReply::Loan(g) if g.size == size && g.region.len >= size => Ok((g, addr)),
                PeerReply::Loan(g) => {
                    // A lender that answers with another size is broken or
                    // hostile: give it back, use nothing of it.
                    p.send(peer, PeerMsg::ReturnLoan { loan: g.conn });
                    Err(SciError::System)
                }
                _ => Err(SciError::System),
            });
            let mut reg = node.lock();
            let out = match result {
                Ok((grant, addr)) => {
                    let access = RemoteAccess { region: grant.region, fabric_addr: addr, provider: p.cluster.provider.clone() };
                    match reg.add_borrowed(client, peer, &grant, access) {
                        Ok(out) => crate::registry::tagged(out, tag),
                        Err(e) => {
                            p.send(peer, PeerMsg::ReturnLoan { loan: grant.conn });
                            reg.borrow_failed(client);
                            Outgoing::reply(tag, Err(e))
                        }
                    }
                }
                Err(e) => {
                    reg.borrow_failed(client);
                    Outgoing::reply(tag, Err(e))
                }
            };
            reg.borrow_answered(client, out);
        });
    }
}

/// The request a peer's frame asks of our registry, run as that node's
/// pseudo-client, with the tag its reply is matched by (`forward_pseudo`
/// turns it back into the peer's request number and kind). A peer may ask
/// a connect to wait at most a minute.
pub fn peer_request(me: u32, msg: &PeerMsg) -> Option<(u64, Request)> {
    match *msg {
        PeerMsg::ConnectSegment { req, segment_id, timeout_ms, broadcast } => {
            Some(((req << TAG_BITS) | TAG_SEGMENT, Request::ConnectSegment { node_id: me, segment_id, timeout_ms: timeout_ms.min(60_000), broadcast }))
        }
        PeerMsg::ConnectInterrupt { req, kind, number, timeout_ms } => {
            Some(((req << TAG_BITS) | TAG_INTERRUPT, Request::ConnectInterrupt { kind, node_id: me, number, timeout_ms: timeout_ms.min(60_000) }))
        }
        PeerMsg::Borrow { req, size } => Some(((req << TAG_BITS) | TAG_LOAN, Request::Lend { size })),
        PeerMsg::DisconnectSegment { conn } => Some((0, Request::DisconnectSegment { conn })),
        PeerMsg::DisconnectInterrupt { conn } => Some((0, Request::DisconnectInterrupt { conn })),
        PeerMsg::ReturnLoan { loan } => Some((0, Request::ReturnLoan { loan })),
        _ => None,
    }
}

/// Run a peer's request as its pseudo-client; the answer goes the way of
/// everything said to that client (`forward_pseudo`).
pub fn run_for_peer(node: &Arc<Node>, pseudo: ClientId, tag: u64, req: Request) {
    if let Handled::Reply(out) = node.handle(pseudo, tag, req) {
        node.lock().send_to(pseudo, out);
    }
}

/// Log a warning at most once a minute per `key` (a misconfigured or hostile
/// host retries every few hundred milliseconds; the log must stay readable).
fn rate_limited_warn(key: &str, text: &str) {
    static LAST: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap();
    let map = last.get_or_insert_with(HashMap::new);
    let now = Instant::now();
    match map.get(key) {
        Some(t) if now.duration_since(*t) < Duration::from_secs(60) => debug!("{text}"),
        _ => {
            map.insert(key.to_owned(), now);
            warn!("{text}");
        }
    }
}
