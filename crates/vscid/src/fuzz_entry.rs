//! Entry points for the fuzz targets (`fuzz/`) and their corpus replay
//! (`crates/vsci-fuzz`): untrusted bytes in, through the node's own
//! parsing, validation and handling, no panic out.
//!
//! Each function takes any byte string. A decode error or a refused
//! request is a correct answer; a panic, an abort or an allocation sized
//! by a length field is a bug. Where a whole exchange is fuzzed, the input
//! is cut into messages by [`split`]; the real transports frame messages
//! themselves (a datagram, a length word), so this cut only decides where
//! the fuzzer's bytes go.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

use vsci_proto::fuzz_input::{join, split};
use vsci_proto::peer::{LinkChallenge, LinkHello, LinkProof, PeerMsg, RemoteSegmentGrant, RmaRegion};
use vsci_proto::wire::Received;
use vsci_proto::{ClientInfo, RemoteAccess, RemoteTrigger, WaitMode};

use crate::client::{check_hello, check_request, HelloCheck};
use crate::cluster::Cluster;
use crate::link::{self, Sealer};
use crate::node::{Handled, Node};
use crate::peers::{peer_request, run_for_peer};
use crate::registry::{ClientId, Config, ConnectPolicy, Outgoing};

/// This node's id in the fuzzed node.
const ME: u32 = 7;
/// The peer node whose frames the link target plays.
const PEER: u32 = 9;

/// A node small enough to be built per input: 64 KiB segments at most, a
/// few objects per client, and no request that may wait (a waiting request
/// would get a thread that outlives the input).
fn small_node(policy: u8) -> Arc<Node> {
    Node::new(Config {
        node_id: ME,
        socket: "fuzz".into(),
        wait_mode: WaitMode::Adaptive,
        spin_us: 0,
        max_segment_size: 64 << 10,
        max_objects_per_client: 16,
        max_waiting_per_client: 0,
        max_objects_per_uid: 24,
        max_clients_per_uid: 4,
        max_memory_per_uid: 256 << 10,
        fd_limit: 1 << 20,
        fd_reserve: 64,
        connect_policy: match policy % 3 {
            0 => ConnectPolicy::Any,
            1 => ConnectPolicy::SameUid,
            _ => ConnectPolicy::SameGroup,
        },
        lend_pool: 0,
    })
}

/// Register a client as `Server::hello` does once a Hello passed; its
/// messages go to the returned queue.
fn add_client(node: &Node, uid: u32, name: String) -> Option<(ClientId, Receiver<Outgoing>)> {
    let mut reg = node.lock();
    reg.admit(&node.cfg, uid).ok()?;
    // The registry keeps a client's socket to shut it down on eviction; an
    // eventfd stands in for it.
    let sock: OwnedFd = nix::sys::eventfd::EventFd::new().ok()?.into();
    let (tx, rx) = sync_channel(256);
    let id = reg.register_client(ClientInfo { client: 0, pid: 1, uid, gid: uid, name }, tx, Arc::new(sock));
    Some((id, rx))
}

/// Remove every client, then check the node holds nothing.
fn finish(node: &Node, clients: impl IntoIterator<Item = ClientId>) {
    let mut reg = node.lock();
    for id in clients {
        reg.remove_client(&node.cfg, id);
    }
    assert!(reg.holds_nothing(), "objects or charges left after every client left");
}

/// Bytes clients send on the control socket (`client_request` target).
///
/// The first byte picks the connect policy; the rest are datagrams, each
/// prefixed by one byte naming one of three connections (clients of two
/// uids). Each connection's first datagram must be a Hello
/// (`check_hello`); later ones go through `check_request` and the node's
/// request handler, as in `Server::read`. A connection that would be
/// dropped is closed (its client removed) and later datagrams for it are
/// ignored. At the end every client leaves and the node must be empty.
pub fn client_request(data: &[u8]) {
    let Some((&policy, rest)) = data.split_first() else { return };
    let node = small_node(policy);
    #[derive(PartialEq)]
    enum State {
        Handshake,
        Client(ClientId),
        Closed,
    }
    let mut conns = [State::Handshake, State::Handshake, State::Handshake];
    let mut queues = Vec::new();
    for msg in split(rest) {
        let Some((&which, bytes)) = msg.split_first() else { continue };
        let which = usize::from(which) % conns.len();
        let uid = 1000 + (which as u32 & 1);
        let received = Received { bytes: bytes.to_vec(), fds: Vec::new() };
        match conns[which] {
            State::Closed => {}
            State::Handshake => {
                conns[which] = match check_hello(&received) {
                    HelloCheck::Hello { name, .. } => match add_client(&node, uid, name) {
                        Some((id, rx)) => {
                            queues.push(rx);
                            State::Client(id)
                        }
                        None => State::Closed,
                    },
                    HelloCheck::WrongVersion { .. } | HelloCheck::Refused(_) => State::Closed,
                }
            }
            State::Client(id) => match check_request(received) {
                Ok((tag, req, wake)) => {
                    if let Handled::Reply(out) = node.handle_with(id, tag, req, wake) {
                        node.lock().send_to(id, out);
                    }
                }
                Err(_) => {
                    let cfg = node.cfg.clone();
                    node.lock().remove_client(&cfg, id);
                    conns[which] = State::Closed;
                }
            },
        }
        // The clients read what they are sent (replies carry memfds: drop
        // them as they come, or the input's descriptors pile up).
        for q in &queues {
            while q.try_recv().is_ok() {}
        }
    }
    let left = conns.iter().filter_map(|c| match c {
        State::Client(id) => Some(*id),
        _ => None,
    });
    finish(&node, left.collect::<Vec<_>>());
}

/// A fixed session key for the link target: the input plays a peer that
/// authenticated, so its frames are sealed with the key the link uses.
pub const LINK_KEY: [u8; 32] = [0x5a; 32];

/// Bytes a peer node sends on a node link (`node_link_frame` target).
///
/// The first byte picks what the rest is:
/// - 0: the unauthenticated handshake as the accepting node reads it: a
///   `LinkHello` (checked as `link::accept` checks it), then a `LinkProof`;
/// - 1: the handshake as the dialing node reads it: a `LinkChallenge`;
/// - 2: raw bytes on an authenticated link, read frame by frame (length
///   word, MAC: almost all fail authentication, which must be all);
/// - otherwise: frame bodies (cut by `split`) that the input sealed
///   with the link's key, so they pass authentication, are decoded, and
///   reach the node as `Peers::on_peer_msg` passes them: requests run as
///   the peer's pseudo-client, replies to our clients' connects are
///   granted as the connect thread grants them, events apply to those
///   connections.
pub fn node_link_frame(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut r = rest;
    match mode {
        0 => {
            if let Ok(hello) = link::read_plain::<LinkHello>(&mut r) {
                if link::check_hello(&hello, ME, |id| id == PEER).is_ok() {
                    let _ = link::read_plain::<LinkProof>(&mut r);
                }
            }
        }
        1 => {
            let _ = link::read_plain::<LinkChallenge>(&mut r);
        }
        2 => {
            let mut rx = Sealer::new(LINK_KEY, 0);
            while rx.read(&mut r).is_ok() {}
        }
        _ => link_session(rest),
    }
}

fn link_session(rest: &[u8]) {
    let mut stream = Vec::new();
    let mut tx = Sealer::new(LINK_KEY, 0);
    for body in split(rest) {
        tx.seal_raw(&mut stream, body).expect("writing to a Vec does not fail");
    }
    let node = small_node(0);
    // The peer's pseudo-client, as `Peers::run_link` registers it, and a
    // local client whose connects to the peer the replies answer; it owns
    // an available segment and an interrupt for the peer's connects to
    // find.
    let Some((pseudo, prx)) = add_client(&node, 0, format!("node {PEER}")) else { return };
    node.lock().set_client_node(pseudo, PEER);
    let Some((local, lrx)) = add_client(&node, 1000, "local".into()) else { return };
    use vsci_proto::{Reply, Request as R, ServerMsg};
    let seg = match node.handle(
        local,
        1,
        R::CreateSegment { segment_id: 1, auto_id: false, size: 4096, events: true, broadcast: false },
    ) {
        Handled::Reply(Outgoing { msg: ServerMsg::Reply { result: Ok(Reply::Segment { seg, .. }), .. }, .. }) => seg,
        _ => panic!("a fresh node creates a small segment"),
    };
    for req in [
        R::PrepareSegment { seg },
        R::SetAvailable { seg },
        R::CreateInterrupt { kind: vsci_proto::IntrKind::Plain, hint: 1, fixed: true },
    ] {
        let _ = node.handle(local, 1, req);
    }
    let mut rx = Sealer::new(LINK_KEY, 0);
    let mut r = &stream[..];
    while let Ok((msg, _)) = rx.read(&mut r) {
        if let Some((tag, req)) = peer_request(ME, &msg) {
            run_for_peer(&node, pseudo, tag, req);
        }
        match msg {
            PeerMsg::ConnectSegmentReply { result: Ok(grant), .. } => {
                let access = RemoteAccess { region: grant.region, fabric_addr: Vec::new(), provider: "tcp".into() };
                let mut reg = node.lock();
                if let Ok(out) = reg.add_remote_segment(&node.cfg, local, PEER, 1, &grant, access) {
                    reg.send_to(local, out);
                }
            }
            PeerMsg::ConnectInterruptReply { result: Ok(grant), .. } => {
                let trig = RemoteTrigger { token: grant.token, fabric_addr: Vec::new(), provider: "tcp".into() };
                let mut reg = node.lock();
                if let Ok(out) = reg.add_remote_interrupt(&node.cfg, local, PEER, grant.conn, trig) {
                    reg.send_to(local, out);
                }
            }
            PeerMsg::SegmentEvent { conn, reason } => node.lock().remote_segment_event(PEER, conn, reason),
            PeerMsg::InterruptGone { conn } => node.lock().remote_interrupt_gone(PEER, conn),
            _ => {}
        }
        while prx.try_recv().is_ok() {}
        while lrx.try_recv().is_ok() {}
    }
    finish(&node, [pseudo, local]);
}

/// Seed inputs for `node_link_frame`'s sealed mode: these messages' bodies.
pub fn link_seed(msgs: &[PeerMsg]) -> Vec<u8> {
    let bodies: Vec<Vec<u8>> = msgs.iter().map(|m| postcard::to_stdvec(m).expect("encodes")).collect();
    let mut out = vec![3u8];
    out.extend(join(&bodies));
    out
}

/// A grant as a peer sends it, for seeds.
pub fn seed_grant(conn: u64, size: u64) -> RemoteSegmentGrant {
    RemoteSegmentGrant { conn, size, region: RmaRegion { base: 0, key: 0x1234, len: size } }
}

/// A cluster file's text (`cluster_file` target): parsed and checked by
/// `Cluster::parse`, the code `vscid --config` runs, with a key file that
/// holds the bytes after the first NUL of the input (or none).
pub fn cluster_file(data: &[u8]) {
    let (text, key) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let Ok(text) = std::str::from_utf8(text) else { return };
    if let Ok(c) = Cluster::parse(text, Path::new("/etc/vsci/cluster.toml"), |_| Ok(key.to_vec())) {
        // What `Cluster::parse` promises its callers.
        assert!(!c.nodes.is_empty());
        assert!(c.nodes.keys().all(|&id| (1..=65535).contains(&id)));
        assert!(c.key.len() >= 16);
    }
}
