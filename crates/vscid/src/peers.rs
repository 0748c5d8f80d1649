//! The cluster runtime: keeps an authenticated link to every other node,
//! forwards our clients' remote requests, serves the other nodes' requests
//! for our segments and interrupts, and notices nodes that stop answering.
//!
//! Each remote node appears in our registry as a pseudo-client
//! ("node N"): its connections to our segments and interrupts are ordinary
//! registry objects, so the same validation, events and clean-up apply,
//! and when the node is declared dead removing that pseudo-client releases
//! everything the node held here. A link that merely drops releases
//! nothing: it is dialled again and the connections continue (see
//! `liveness_loop` for what counts as dead).
//!
//! Lock order: the registry lock may be held while queueing a frame to a
//! link (`Peers::send` takes only the peers lock, briefly); code in here
//! never takes the registry lock while holding the peers lock.

use std::collections::{HashMap, VecDeque};
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
use crate::node::{Handled, Node};
use crate::recover::Recover;
use crate::registry::{ClientId, Outgoing};

// What crosses a link: our clients' requests to other nodes and the other
// nodes' requests to us, their answers and events.
mod requests;
pub use requests::{peer_request, run_for_peer};

const HEARTBEAT: Duration = Duration::from_millis(250);
/// A liveness check this much later than planned means this node itself
/// was not running (scheduling noise on a loaded machine is milliseconds).
const PAUSED: Duration = HEARTBEAT;
const REDIAL: Duration = Duration::from_millis(300);
/// How often the accepting side of a down link asks the peer's address
/// whether a vscid still listens there (see `probe_loop`).
const PROBE: Duration = Duration::from_secs(1);
/// Frames that may wait for one link before it is considered stuck; also
/// the bound on frames held for a peer while its link is down.
const LINK_QUEUE: usize = 4096;
/// How long a fresh link may take to bring the peer's introduction. Long:
/// a peer that is paused or starved answers late, and that is no failure.
const INTRO_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct PeerState {
    /// Frames to send; `None` while the link is down.
    tx: Option<SyncSender<PeerMsg>>,
    /// Link generation, so a stale link's clean-up does not hit a new one.
    generation: u64,
    fabric_addr: Option<Vec<u8>>,
    last_seen: Option<Instant>,
    /// Our pseudo-client standing for this node's imports of our objects.
    /// It outlives a link that drops: only a node declared dead loses it.
    pseudo: Option<ClientId>,
    /// The link's socket, so a peer declared dead can be cut off.
    sock: Option<TcpStream>,
    /// The peer's incarnation whose connections we hold (0: none; the
    /// peer is dead to us or was never seen).
    incarnation: u64,
    /// Since when the link has been down while we hold the peer's state
    /// (moved forward by the time this node itself did not run).
    down_since: Option<Instant>,
    /// Frames for the peer made while its link was down (events about its
    /// connections, disconnects, returned loans), sent first when it is
    /// back; at most `LINK_QUEUE`.
    backlog: VecDeque<PeerMsg>,
    /// "Silent" was logged for the current silence.
    silent_logged: bool,
}

type ReplySlot = SyncSender<Result<PeerReply, SciError>>;

enum PeerReply {
    Segment(RemoteSegmentGrant),
    Interrupt(RemoteInterruptGrant),
    Loan(RemoteSegmentGrant),
}

pub struct Peers {
    me: u32,
    /// This run of this node (random, non-zero): peers tell a restart of
    /// ours, which lost every connection, from a link that only dropped.
    incarnation: u64,
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
        let listener =
            TcpListener::bind(my_addr).map_err(|e| anyhow::anyhow!("binding node link address {my_addr}: {e}"))?;
        let mut state = HashMap::new();
        for id in cluster.nodes.keys().filter(|id| **id != me) {
            state.insert(*id, PeerState::default());
        }
        let mut inc = [0u8; 8];
        getrandom::getrandom(&mut inc).map_err(|e| anyhow::anyhow!("random source: {e}"))?;
        let peers = Arc::new(Peers {
            me,
            incarnation: u64::from_le_bytes(inc).max(1),
            cluster,
            engine,
            state: Mutex::new(state),
            changed: Condvar::new(),
            pending: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(1),
            next_gen: AtomicU64::new(1),
        });
        node.set_links(&peers);
        info!(
            "cluster: node {me} links on {my_addr}; peers {:?}; not responding after {} ms of silence, dead after {} ms unreachable, link timeout {} ms",
            peers.cluster.nodes.keys().filter(|i| **i != me).collect::<Vec<_>>(),
            peers.cluster.node_timeout_ms,
            peers.cluster.node_dead_after_ms,
            peers.cluster.link_timeout_ms
        );

        let (p, n) = (peers.clone(), node.clone());
        std::thread::Builder::new().name("vscid-links".into()).spawn(move || p.accept_loop(&n, listener))?;
        for (&id, &addr) in peers.cluster.nodes.iter().filter(|(id, _)| **id > me) {
            let (p, n) = (peers.clone(), node.clone());
            std::thread::Builder::new().name(format!("vscid-dial{id}")).spawn(move || p.dial_loop(&n, id, addr))?;
        }
        for (&id, &addr) in peers.cluster.nodes.iter().filter(|(id, _)| **id < me) {
            let (p, n) = (peers.clone(), node.clone());
            std::thread::Builder::new().name(format!("vscid-probe{id}")).spawn(move || p.probe_loop(&n, id, addr))?;
        }
        let (p, n) = (peers.clone(), node.clone());
        std::thread::Builder::new().name("vscid-liveness".into()).spawn(move || p.liveness_loop(&n))?;
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
        self.state.locked().get(&node_id).is_some_and(|s| s.tx.is_some())
    }

    /// Queue a frame for a peer; false if the peer is dead to us, or its
    /// link is stuck. While the link is down but the peer is not declared
    /// dead, the frame waits (up to `LINK_QUEUE` of them) and goes first
    /// when the link is back: an owner's LOST event or an importer's
    /// disconnect must reach the other side, or both keep stale state.
    pub fn send(&self, peer: u32, msg: PeerMsg) -> bool {
        let mut st = self.state.locked();
        let Some(s) = st.get_mut(&peer) else { return false };
        match &s.tx {
            Some(tx) => tx.try_send(msg).is_ok(),
            None if s.incarnation != 0 && s.backlog.len() < LINK_QUEUE => {
                s.backlog.push_back(msg);
                true
            }
            None => false,
        }
    }

    /// Queue a frame only if the link is up now (requests whose answer
    /// someone waits for: held for later, the answer would find nobody).
    fn send_now(&self, peer: u32, msg: PeerMsg) -> bool {
        let st = self.state.locked();
        st.get(&peer).and_then(|s| s.tx.as_ref()).is_some_and(|tx| tx.try_send(msg).is_ok())
    }

    pub fn status(&self, imports: &HashMap<u32, u32>) -> Vec<PeerInfo> {
        let silent = Duration::from_millis(self.cluster.node_timeout_ms);
        let st = self.state.locked();
        let mut v: Vec<PeerInfo> = st
            .iter()
            .map(|(id, s)| PeerInfo {
                node_id: *id,
                address: self.cluster.nodes[id].to_string(),
                state: match (&s.tx, s.incarnation) {
                    (Some(_), _) if s.last_seen.is_some_and(|t| t.elapsed() > silent) => "not responding",
                    (Some(_), _) => "up",
                    (None, 0) => "down",
                    // The link is down; its connections wait for it.
                    (None, _) => "link down",
                }
                .into(),
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
                    // A peer's probe (see `probe_loop`) closes at once.
                    Err(e) if link::is_probe(&e) => debug!("probe from {from}"),
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
                    if link::is_refused(&e) {
                        self.refused(node, peer, addr);
                    }
                    // An authentication failure is worth an operator's
                    // attention; a node that is simply not up yet is not.
                    let text = format!("{e:#}");
                    if text.contains("authentication") {
                        rate_limited_warn(
                            &format!("dial {peer}"),
                            &format!("cannot link to node {peer} at {addr}: {text}"),
                        );
                    } else if !logged {
                        debug!("cannot link to node {peer} at {addr}: {text}");
                        logged = true;
                    }
                }
            }
            std::thread::sleep(REDIAL);
        }
    }

    /// The accepting side of a link cannot redial, so it learns that a
    /// peer whose link is down has lost its vscid by asking the peer's link
    /// address now and then: a refused connection means no vscid listens
    /// there any more (a paused one still completes the TCP handshake in
    /// its kernel; a cut cable refuses nothing). The probe closes at once;
    /// the peer logs it at debug level only.
    fn probe_loop(self: &Arc<Self>, node: &Arc<Node>, peer: u32, addr: SocketAddr) {
        loop {
            std::thread::sleep(PROBE);
            let holding_down = self.state.locked().get(&peer).is_some_and(|s| s.tx.is_none() && s.incarnation != 0);
            if !holding_down {
                continue;
            }
            if let Err(e) = TcpStream::connect_timeout(&addr, PROBE) {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    self.refused(node, peer, addr);
                }
            }
        }
    }

    /// Nothing listens at a peer's link address: its vscid is gone, and
    /// with it every connection and map it served.
    fn refused(&self, node: &Arc<Node>, peer: u32, addr: SocketAddr) {
        let holding = self.state.locked().get(&peer).is_some_and(|s| s.tx.is_none() && s.incarnation != 0);
        if holding {
            self.declare_dead(
                node,
                peer,
                &format!("its link address {addr} refuses connections: its vscid is not running"),
            );
        }
    }

    /// Declare `peer` dead: every connection of ours to its objects is lost
    /// (SCI_CB_LOST, SCI_ERR_NODE_NOT_RESPONDING), and everything it held
    /// here is released (its pseudo-client goes). A link that is still up
    /// is cut; a later link starts afresh.
    fn declare_dead(&self, node: &Arc<Node>, peer: u32, why: &str) {
        let pseudo = {
            let mut st = self.state.locked();
            let Some(s) = st.get_mut(&peer) else { return };
            if s.incarnation == 0 && s.pseudo.is_none() && s.tx.is_none() {
                return;
            }
            s.incarnation = 0;
            s.down_since = None;
            s.backlog.clear();
            // The link's own clean-up must not touch what follows.
            s.generation = self.next_gen.fetch_add(1, Ordering::Relaxed);
            if let Some(sock) = s.sock.take() {
                let _ = sock.shutdown(std::net::Shutdown::Both);
            }
            s.tx = None;
            s.fabric_addr = None;
            s.pseudo.take()
        };
        warn!("node {peer}: declared dead ({why}); its connections are lost");
        {
            let mut reg = node.lock();
            if let Some(p) = pseudo {
                reg.remove_client(&node.cfg, p);
            }
            reg.peer_down(peer);
        }
        node.changed.notify_all();
        // Fail requests still waiting for this node.
        self.changed.notify_all();
    }

    /// A new pseudo-client for `peer`'s imports, with the thread that turns
    /// what our registry tells it into frames for the peer.
    fn new_pseudo(self: &Arc<Self>, node: &Arc<Node>, peer: u32) -> Option<ClientId> {
        let (ptx, prx) = sync_channel::<Outgoing>(LINK_QUEUE);
        // The registry shuts a client's socket down when it stops reading;
        // a pseudo-client's messages wait in `send`'s bounded backlog
        // instead, so its "socket" is an eventfd nobody reads.
        let sock: OwnedFd = nix::sys::eventfd::EventFd::new().ok()?.into();
        let info = ClientInfo { client: 0, pid: 0, uid: 0, gid: 0, name: format!("node {peer}") };
        let id = {
            let mut reg = node.lock();
            let id = reg.register_client(info, ptx, Arc::new(sock));
            reg.set_client_node(id, peer);
            id
        };
        let p = self.clone();
        if std::thread::Builder::new()
            .name(format!("vscid-fwd{peer}"))
            .spawn(move || p.forward_pseudo(peer, prx))
            .is_err()
        {
            node.lock().remove_client(&node.cfg, id);
            return None;
        }
        Some(id)
    }

    /// Serve one authenticated link until it breaks, then clean up.
    fn run_link(self: &Arc<Self>, node: &Arc<Node>, l: Link) {
        let peer = l.peer;
        let Link { stream, mut tx, mut rx, .. } = l;
        // A link whose data goes unacknowledged for this long ends (a cut
        // cable); a paused peer's kernel still acknowledges, so its link
        // stays.
        set_user_timeout(&stream, self.cluster.link_timeout_ms);
        let Ok(mut wstream) = stream.try_clone() else { return };

        // Introductions: who each side is now, and whose state it holds.
        let knows = self.state.locked().get(&peer).map_or(0, |s| s.incarnation);
        let intro = PeerMsg::Info {
            node_id: self.me,
            fabric_addr: self.engine.address(),
            incarnation: self.incarnation,
            knows,
        };
        if let Err(e) = tx.write(&mut wstream, &intro) {
            debug!("node {peer}: link ended before its introduction: {e:#}");
            return;
        }
        let mut rs = stream;
        let _ = rs.set_read_timeout(Some(INTRO_TIMEOUT));
        let (their_inc, their_knows, their_addr) = match rx.read(&mut rs) {
            Ok((PeerMsg::Info { node_id, fabric_addr, incarnation, knows }, _))
                if node_id == peer && incarnation != 0 =>
            {
                (incarnation, knows, fabric_addr)
            }
            Ok(_) => {
                warn!("node {peer}: its link did not start with a valid introduction; closing it");
                return;
            }
            Err(e) => {
                debug!("node {peer}: no introduction on a new link: {e:#}");
                return;
            }
        };
        let _ = rs.set_read_timeout(None);

        // Does this link continue the old one? Only when both sides still
        // hold each other's current run: a peer that restarted lost every
        // connection (its memory, its engine), and one that declared us
        // dead released everything of ours.
        let continuing = knows != 0 && knows == their_inc && their_knows == self.incarnation;
        if !continuing && knows != 0 {
            let why =
                if knows != their_inc { "it restarted: a new run of its vscid" } else { "it declared this node dead" };
            self.declare_dead(node, peer, why);
        }
        let fresh = if continuing { None } else { self.new_pseudo(node, peer) };
        if !continuing && fresh.is_none() {
            return;
        }

        let generation = self.next_gen.fetch_add(1, Ordering::Relaxed);
        let (ftx, frx) = sync_channel::<PeerMsg>(LINK_QUEUE);
        let was_down;
        let published = {
            let mut st = self.state.locked();
            let s = st.entry(peer).or_default();
            // Our view must not have changed since our introduction (the
            // peer was declared dead meanwhile, or another link took over):
            // the next link sorts it out.
            let view_ok =
                if continuing { s.incarnation == their_inc && s.pseudo.is_some() } else { s.incarnation == 0 };
            // OPERATIONAL follows a NOT_OPERATIONAL only: a link replacing
            // one we had not yet seen fail changes nothing for programs.
            was_down = s.tx.is_none();
            if view_ok {
                if let Some(p) = fresh {
                    s.pseudo = Some(p);
                    s.backlog.clear();
                }
                s.incarnation = their_inc;
                // Frames held while the link was down go first, in order.
                while let Some(m) = s.backlog.pop_front() {
                    if ftx.try_send(m).is_err() {
                        break;
                    }
                }
                s.backlog.clear();
                if let Some(old) = s.sock.take() {
                    // A link this one replaces (the peer redialled before
                    // we noticed the old one fail).
                    let _ = old.shutdown(std::net::Shutdown::Both);
                }
                s.tx = Some(ftx.clone());
                s.generation = generation;
                s.last_seen = Some(Instant::now());
                s.down_since = None;
                s.silent_logged = false;
                s.fabric_addr = Some(their_addr);
                s.sock = rs.try_clone().ok();
                s.pseudo
            } else {
                None
            }
        };
        let Some(pseudo) = published else {
            if let Some(p) = fresh {
                node.lock().remove_client(&node.cfg, p);
            }
            let _ = rs.shutdown(std::net::Shutdown::Both);
            return;
        };
        if continuing {
            info!("node {peer}: link up again; its connections continue");
            if was_down {
                node.lock().peer_link(peer, true);
            }
        } else {
            info!("node {peer}: link up");
        }
        node.changed.notify_all();
        self.changed.notify_all();

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
            if let Some(s) = self.state.locked().get_mut(&peer) {
                if s.generation == generation {
                    s.last_seen = Some(Instant::now());
                }
            }
            if let PeerMsg::Info { incarnation, .. } = &msg {
                if *incarnation != their_inc {
                    warn!("node {peer} changed its incarnation on a live link; closing it");
                    break;
                }
            }
            self.on_peer_msg(node, peer, pseudo, msg);
        }
        let _ = rs.shutdown(std::net::Shutdown::Both);

        // The link is down, not the node: keep everything (connections both
        // ways, our pseudo-client for its imports) and tell our programs
        // their connections to it are not operational for now. Frames for
        // it wait in the backlog. Only `declare_dead` releases.
        let current = {
            let mut st = self.state.locked();
            match st.get_mut(&peer) {
                Some(s) if s.generation == generation => {
                    s.tx = None;
                    s.fabric_addr = None;
                    s.sock = None;
                    s.down_since = Some(Instant::now());
                    true
                }
                _ => false,
            }
        };
        if current {
            warn!(
                "node {peer}: link down; its connections wait for it (not operational) for up to {} ms",
                self.cluster.node_dead_after_ms
            );
            node.lock().peer_link(peer, false);
            node.changed.notify_all();
            // Fail requests still waiting for this node.
            self.changed.notify_all();
        }
        drop(ftx);
        let _ = writer.join();
    }

    /// Watch the peers: report silent ones, declare dead those unreachable
    /// for `node_dead_after_ms`.
    ///
    /// Silence alone cuts no link: a peer that does not get the CPU (a
    /// busy host, a paused VM, SIGSTOP) is silent while its kernel still
    /// acknowledges everything, and its links, connections and maps must
    /// survive that. A link ends on transport evidence only (a reset, the
    /// TCP user timeout `link_timeout_ms`), and then comes back with its
    /// connections. Death is declared when the peer was unreachable
    /// (silent or its link down) for `node_dead_after_ms`, when its link
    /// address refuses connections (`refused`), or when it comes back as a
    /// new run (`run_link`).
    ///
    /// Time counts only while this node itself runs. When the whole node
    /// stops for a while, the frames its peers sent meanwhile wait unread
    /// in the links' sockets, and the first check after the pause would
    /// find every peer silent before any reader had a chance to run. So a
    /// check that comes late by `late` moves every peer's last word (and
    /// the start of a down link) `late` forward: the peers get the time
    /// they had left.
    fn liveness_loop(self: &Arc<Self>, node: &Arc<Node>) {
        let silent_after = Duration::from_millis(self.cluster.node_timeout_ms);
        let dead_after = Duration::from_millis(self.cluster.node_dead_after_ms);
        let mut last_check = Instant::now();
        loop {
            std::thread::sleep(HEARTBEAT);
            let now = Instant::now();
            let late = now.saturating_duration_since(last_check).saturating_sub(HEARTBEAT);
            last_check = now;
            let mut dead = Vec::new();
            {
                let mut st = self.state.locked();
                if late >= PAUSED {
                    info!(
                        "this node did not run for {} ms; its peers' silence meanwhile is not held against them",
                        late.as_millis()
                    );
                    for s in st.values_mut() {
                        for t in [s.last_seen.as_mut(), s.down_since.as_mut()].into_iter().flatten() {
                            *t = (*t + late).min(now);
                        }
                    }
                }
                for (&id, s) in st.iter_mut() {
                    if s.tx.is_some() {
                        let Some(quiet) = s.last_seen.map(|t| t.elapsed()) else { continue };
                        if quiet > dead_after {
                            dead.push((id, format!("silent for {} ms on a link that stayed up", quiet.as_millis())));
                        } else if quiet > silent_after {
                            if !s.silent_logged {
                                info!(
                                    "node {id}: silent for {} ms (not responding); its link stays",
                                    quiet.as_millis()
                                );
                                s.silent_logged = true;
                            }
                        } else if s.silent_logged {
                            info!("node {id}: responding again");
                            s.silent_logged = false;
                        }
                    } else if s.incarnation != 0 && s.down_since.is_some_and(|t| t.elapsed() > dead_after) {
                        dead.push((id, format!("its link has been down for {} ms", dead_after.as_millis())));
                    }
                }
            }
            for (id, why) in dead {
                self.declare_dead(node, id, &why);
            }
        }
    }
}

impl crate::registry::Links for Peers {
    fn engine(&self) -> &Arc<Engine> {
        Peers::engine(self)
    }

    fn send(&self, peer: u32, msg: PeerMsg) -> bool {
        Peers::send(self, peer, msg)
    }

    fn status(&self, imports: &HashMap<u32, u32>) -> Vec<PeerInfo> {
        Peers::status(self, imports)
    }
}

/// Set a socket's TCP user timeout: unacknowledged data older than `ms`
/// ends the connection.
fn set_user_timeout(s: &TcpStream, ms: u64) {
    use std::os::fd::AsRawFd;
    let v: libc::c_uint = ms.min(u64::from(u32::MAX)) as libc::c_uint;
    // SAFETY: setsockopt reads `size_of::<c_uint>()` bytes from a valid
    // local; the fd belongs to `s`, alive for the call.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&v as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if r != 0 {
        debug!("TCP_USER_TIMEOUT on a node link: {}", std::io::Error::last_os_error());
    }
}

/// Log a warning at most once a minute per `key` (a misconfigured or hostile
/// host retries every few hundred milliseconds; the log must stay readable).
fn rate_limited_warn(key: &str, text: &str) {
    static LAST: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);
    let mut last = LAST.locked();
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
