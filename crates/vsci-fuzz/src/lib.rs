//! The fuzz targets of `fuzz/` (built with cargo-fuzz on nightly, run by
//! `scripts/fuzz.sh`) in one place for stable Rust: each target is one call
//! of an entry function here, the test suite replays every committed input
//! through the same functions (`tests/replay.rs`), and [`seeds`] makes the
//! seed corpus from the real encoders (`cargo run -p vsci-fuzz --bin
//! vsci-fuzz-seeds`).

use vsci_proto::fuzz_input::join;
use vsci_proto::guest::{AgentRecord, GuestMsg, GuestRequest, ToGuest};
use vsci_proto::peer::{LinkChallenge, LinkHello, LinkProof, PeerMsg, RemoteInterruptGrant};
use vsci_proto::{ClientMsg, IntrKind, Request, SciError, SegmentEvent, PROTOCOL_VERSION};
use vscid::fuzz_entry::{link_seed, seed_grant, LINK_KEY};
use vscid::link::Sealer;

pub use vsci_devshare::fuzz_entry::device_message;
pub use vsci_vm::fuzz_entry::guest_control;
pub use vscid::fuzz_entry::{client_request, cluster_file, node_link_frame};

/// Every target: its name (the directory of its corpus, the binary in
/// `fuzz/`) and its entry function.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("client_request", client_request),
    ("node_link_frame", node_link_frame),
    ("guest_control", guest_control),
    ("cluster_file", cluster_file),
    ("nbd_session", nbd_session),
    ("device_message", device_message),
];

/// Export offered to the `nbd_session` target.
const NBD_SIZE: u64 = 1 << 20;
const NBD_MAX_REQUEST: u32 = 1 << 16;

/// Bytes an NBD client sends `vsci blockdev` (`nbd_session` target): the
/// whole negotiation as the server reads it, then transmission requests
/// (header, and a WRITE's payload) as its connection reader parses and
/// checks them.
pub fn nbd_session(data: &[u8]) {
    use vsci_nbd::proto::{CMD_WRITE, REQUEST_SIZE};
    let mut r = data;
    let mut replies = Vec::new();
    let ex = vsci_nbd::ExportInfo { name: "vsci", size: NBD_SIZE, tflags: 0, max_request: NBD_MAX_REQUEST };
    let Ok(vsci_nbd::Negotiated::Transmission { .. }) = vsci_nbd::negotiate(&mut r, &mut replies, &ex) else { return };
    let lim = vsci_nbd::ExportLimits { size: NBD_SIZE, read_only: false, max_request: NBD_MAX_REQUEST };
    while r.len() >= REQUEST_SIZE {
        let (head, rest) = r.split_at(REQUEST_SIZE);
        r = rest;
        let Ok(req) = vsci_nbd::parse_request(head.try_into().expect("REQUEST_SIZE bytes")) else { return };
        let ok = vsci_nbd::check_request(&req, &lim).is_ok();
        if ok && req.command == CMD_WRITE {
            assert!(
                req.offset + u64::from(req.len) <= NBD_SIZE && req.len <= NBD_MAX_REQUEST,
                "a checked write stays in the export"
            );
        }
        if req.command == CMD_WRITE {
            r = &r[(req.len as usize).min(r.len())..];
        }
    }
}

/// A client's side of an NBD session: negotiation choosing the export with
/// `NBD_OPT_GO`, then `requests` (WRITE payloads of their length).
fn nbd_client_bytes(requests: &[vsci_nbd::Request]) -> Vec<u8> {
    use vsci_nbd::proto::*;
    let mut b = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes().to_vec();
    let mut go = 4u32.to_be_bytes().to_vec();
    go.extend_from_slice(b"vsci");
    go.extend_from_slice(&1u16.to_be_bytes());
    go.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    for (opt, data) in
        [(OPT_LIST, Vec::new()), (OPT_INFO, go.clone()), (OPT_STRUCTURED_REPLY, Vec::new()), (OPT_GO, go)]
    {
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(&data);
    }
    for r in requests {
        b.extend_from_slice(&encode_request(r));
        if r.command == CMD_WRITE {
            b.extend(std::iter::repeat_n(0xa5, r.len as usize));
        }
    }
    b
}

fn msg(tag: u64, req: Request) -> Vec<u8> {
    postcard::to_stdvec(&ClientMsg { tag, req }).expect("encodes")
}

fn hello(version: u32, name: &str) -> Request {
    Request::Hello { version, name: name.into() }
}

/// Every request a client can make, with handles a fresh node hands out
/// first: handles count up from 1 over clients and objects, so the
/// first client (1) gets segment 2 from the `CreateSegment` before these.
fn requests() -> Vec<Request> {
    vec![
        Request::CreateSegment { segment_id: 5, auto_id: false, size: 4096, events: true, broadcast: false },
        Request::PrepareSegment { seg: 2 },
        Request::SetAvailable { seg: 2 },
        Request::SetUnavailable { seg: 2, notify: true, force_disconnect: true },
        Request::RemoveSegment { seg: 2 },
        Request::ConnectSegment { node_id: 7, segment_id: 5, timeout_ms: 0, broadcast: false },
        Request::DisconnectSegment { conn: 6 },
        Request::CreateInterrupt { kind: IntrKind::Data, hint: 2, fixed: false },
        Request::CreateInterruptWake { kind: IntrKind::Plain, hint: 1, fixed: true },
        Request::RemoveInterrupt { intr: 3 },
        Request::ConnectInterrupt { kind: IntrKind::Plain, node_id: 7, number: 1, timeout_ms: 10 },
        Request::DisconnectInterrupt { conn: 7 },
        Request::ProbeNode { node_id: 9 },
        Request::Status,
        Request::ShareSegment { seg: 2 },
        Request::AttachSegment { segment_id: 5 },
        Request::Borrow { node_id: 9, size: 1 << 20 },
        Request::Lend { size: 1 << 20 },
        Request::ReturnLoan { loan: 2 },
        Request::Close,
    ]
}

/// Every request a guest program can make of its host side: the node's
/// requests, relayed, then those only the host side answers.
fn guest_requests() -> Vec<GuestRequest> {
    let mut all: Vec<GuestRequest> = requests().into_iter().map(GuestRequest::Node).collect();
    all.extend([
        GuestRequest::FetchRemote { conn: 6, offset: 0, len: 4096 },
        GuestRequest::ShipRemote { conn: 6, runs: vec![(0, 8), (64, 8)] },
        GuestRequest::DmaStart {
            queue: 1,
            local: 2,
            remote: 6,
            entries: vec![(4096, 0, 0), (16, 8, 1 << 19)],
            read: false,
        },
        GuestRequest::DmaAbort { queue: 1 },
    ]);
    all
}

fn guest_msg(tag: u64, req: GuestRequest) -> Vec<u8> {
    postcard::to_stdvec(&GuestMsg { tag, req }).expect("encodes")
}

/// Seed inputs per target, made with the encoders the node and its
/// clients use, so the fuzzer starts from well-formed exchanges.
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, bytes) in vsci_devshare::fuzz_entry::seeds() {
        out.push(("device_message", name, bytes));
    }
    // client_request: policy byte, then (connection byte + datagram)s.
    let on = |conn: u8, m: Vec<u8>| [vec![conn], m].concat();
    let session = |policy: u8, dgrams: Vec<Vec<u8>>| [vec![policy], join(&dgrams)].concat();
    let life = vec![
        on(0, msg(1, hello(PROTOCOL_VERSION, "owner"))),
        on(
            0,
            msg(
                2,
                Request::CreateSegment { segment_id: 5, auto_id: false, size: 4096, events: true, broadcast: false },
            ),
        ),
        on(0, msg(3, Request::PrepareSegment { seg: 2 })),
        on(0, msg(4, Request::CreateInterrupt { kind: IntrKind::Plain, hint: 1, fixed: true })),
        on(0, msg(5, Request::SetAvailable { seg: 2 })),
        on(0, msg(6, Request::ShareSegment { seg: 2 })),
        on(1, msg(1, hello(PROTOCOL_VERSION, "connector"))),
        on(1, msg(2, Request::ConnectSegment { node_id: 7, segment_id: 5, timeout_ms: 0, broadcast: false })),
        on(1, msg(3, Request::ConnectInterrupt { kind: IntrKind::Plain, node_id: 7, number: 1, timeout_ms: 0 })),
        on(2, msg(1, hello(PROTOCOL_VERSION, "attacher"))),
        on(2, msg(2, Request::AttachSegment { segment_id: 5 })),
        on(1, msg(4, Request::Status)),
        on(0, msg(7, Request::SetUnavailable { seg: 2, notify: true, force_disconnect: false })),
        on(0, msg(8, Request::RemoveSegment { seg: 2 })),
        on(1, msg(5, Request::DisconnectInterrupt { conn: 6 })),
        on(2, msg(3, Request::Close)),
    ];
    for policy in 0..3 {
        out.push(("client_request", format!("life-policy{policy}"), session(policy, life.clone())));
    }
    out.push((
        "client_request",
        "wrong-version".into(),
        session(0, vec![on(0, msg(1, hello(PROTOCOL_VERSION + 1, "old")))]),
    ));
    out.push(("client_request", "no-hello".into(), session(0, vec![on(0, msg(1, Request::Status))])));
    for (i, req) in requests().into_iter().enumerate() {
        let dgrams = vec![
            on(0, msg(1, hello(PROTOCOL_VERSION, "p"))),
            on(
                0,
                msg(
                    2,
                    Request::CreateSegment {
                        segment_id: 5,
                        auto_id: false,
                        size: 4096,
                        events: true,
                        broadcast: false,
                    },
                ),
            ),
            on(0, msg(3, req)),
        ];
        out.push(("client_request", format!("request-{i:02}"), session(0, dgrams)));
    }

    // node_link_frame: handshake frames, a sealed frame, sealed sessions.
    let plain = |v: Vec<u8>| [(v.len() as u32).to_le_bytes().to_vec(), v].concat();
    let lh =
        postcard::to_stdvec(&LinkHello { version: PROTOCOL_VERSION, from: 9, to: 7, nonce: [1; 32] }).expect("encodes");
    let lp = postcard::to_stdvec(&LinkProof { mac: [2; 32] }).expect("encodes");
    let lc = postcard::to_stdvec(&LinkChallenge { nonce: [3; 32], mac: [4; 32] }).expect("encodes");
    out.push(("node_link_frame", "accept-handshake".into(), [vec![0], plain(lh), plain(lp)].concat()));
    out.push(("node_link_frame", "dial-handshake".into(), [vec![1], plain(lc)].concat()));
    let mut sealed = vec![2];
    let mut tx = Sealer::new(LINK_KEY, 0);
    for m in [PeerMsg::Heartbeat, PeerMsg::DisconnectSegment { conn: 4 }] {
        tx.write(&mut sealed, &m).expect("writes to a Vec");
    }
    out.push(("node_link_frame", "sealed-frames".into(), sealed));
    let peer_msgs = vec![
        PeerMsg::Info { node_id: 9, fabric_addr: vec![1, 2, 3], incarnation: 5, knows: 0 },
        PeerMsg::Heartbeat,
        PeerMsg::ConnectSegment { req: 1, segment_id: 1, timeout_ms: 0, broadcast: false },
        PeerMsg::ConnectInterrupt { req: 2, kind: IntrKind::Plain, number: 1, timeout_ms: 0 },
        PeerMsg::ConnectSegmentReply { req: 3, result: Ok(seed_grant(77, 8192)) },
        PeerMsg::ConnectInterruptReply { req: 4, result: Ok(RemoteInterruptGrant { conn: 78, token: 5 }) },
        PeerMsg::SegmentEvent { conn: 77, reason: SegmentEvent::Disconnect },
        PeerMsg::SegmentEvent { conn: 77, reason: SegmentEvent::Lost },
        PeerMsg::InterruptGone { conn: 78 },
        PeerMsg::ConnectSegmentReply { req: 5, result: Err(SciError::NoSuchSegment) },
        PeerMsg::DisconnectSegment { conn: 5 },
        PeerMsg::DisconnectInterrupt { conn: 6 },
        PeerMsg::Borrow { req: 6, size: 1 << 20 },
        PeerMsg::BorrowReply { req: 7, result: Ok(seed_grant(79, 1 << 20)) },
        PeerMsg::BorrowReply { req: 8, result: Err(SciError::Nospc) },
        PeerMsg::ReturnLoan { loan: 79 },
    ];
    out.push(("node_link_frame", "session".into(), link_seed(&peer_msgs)));
    for (i, m) in peer_msgs.iter().enumerate() {
        out.push(("node_link_frame", format!("msg-{i:02}"), link_seed(std::slice::from_ref(m))));
    }

    // guest_control: records through the guest's side, and one raw ring.
    let guest_hello = guest_msg(1, GuestRequest::Node(hello(PROTOCOL_VERSION, "guest-prog")));
    let mut all = vec![guest_hello.clone()];
    all.extend(guest_requests().into_iter().enumerate().map(|(i, r)| guest_msg(i as u64 + 2, r)));
    out.push(("guest_control", "records".into(), [vec![1], join(&all)].concat()));
    for (i, req) in guest_requests().into_iter().enumerate() {
        out.push((
            "guest_control",
            format!("request-{i:02}"),
            [vec![1], join(&[guest_hello.clone(), guest_msg(2, req)])].concat(),
        ));
    }
    let rec = [(guest_hello.len() as u32).to_le_bytes().to_vec(), guest_hello].concat();
    let raw = [vec![0], (rec.len() as u32).to_le_bytes().to_vec(), 0u32.to_le_bytes().to_vec(), rec].concat();
    out.push(("guest_control", "raw-ring".into(), raw));
    // A host → guest record in the guest's ring is not read by the host:
    // still a seed shape worth mutating from (lengths, attachments).
    let agent =
        postcard::to_stdvec(&AgentRecord { msg: ToGuest::Node(vec![1, 2, 3]), attachments: vec![] }).expect("encodes");
    let done = postcard::to_stdvec(&AgentRecord {
        msg: ToGuest::DmaDone { queue: 1, status: SciError::Ok },
        attachments: vec![vsci_proto::guest::Attachment::Vector(1)],
    })
    .expect("encodes");
    out.push(("guest_control", "agent-record".into(), [vec![1], join(&[agent, done])].concat()));

    // nbd_session: a client's negotiation and requests.
    {
        use vsci_nbd::proto::*;
        let req =
            |command, flags, offset, len| vsci_nbd::Request { flags, command, cookie: offset ^ 0x55, offset, len };
        let all = [
            req(CMD_WRITE, CMD_FLAG_FUA, 4096, 4096),
            req(CMD_READ, 0, 0, 8192),
            req(CMD_FLUSH, 0, 0, 0),
            req(CMD_TRIM, 0, 8192, 4096),
            req(CMD_WRITE_ZEROES, 0, 0, 65536),
            req(CMD_READ, 0, NBD_SIZE - 1, 2),
            req(CMD_DISC, 0, 0, 0),
        ];
        out.push(("nbd_session", "session".into(), nbd_client_bytes(&all)));
        out.push(("nbd_session", "negotiation-only".into(), nbd_client_bytes(&[])));
    }

    // cluster_file: text, NUL, key.
    let key = b"0123456789abcdef0123456789abcdef";
    let files = [
        ("example", include_str!("../../../dist/cluster.toml.example").to_string()),
        ("minimal", "key_file = \"k\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:7100\"\n".into()),
        (
            "all-keys",
            "key_file = \"/etc/vsci/k\"\nfabric_provider = \"tcp;ofi_rxm\"\nnode_timeout_ms = 900\nsocket_group = \"vsci\"\nsocket_mode = \"0660\"\n[[node]]\nid = 1\naddress = \"[::1]:7100\"\n[[node]]\nid = 65535\naddress = \"10.0.0.2:7101\"\n".into(),
        ),
        ("duplicate-id", "key_file = \"k\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:1\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:2\"\n".into()),
    ];
    for (name, text) in files {
        out.push(("cluster_file", name.into(), [text.as_bytes(), &[0], key].concat()));
    }
    out.push((
        "cluster_file",
        "short-key".into(),
        b"key_file = \"k\"\n[[node]]\nid = 2\naddress = \"127.0.0.1:1\"\n\0short".to_vec(),
    ));
    out
}

#[cfg(test)]
mod tests {
    /// The NBD seed gets through negotiation, so the fuzzer starts inside
    /// transmission, not at the greeting.
    #[test]
    fn the_nbd_seed_reaches_transmission() {
        let seeds = super::seeds();
        let (_, _, data) = seeds.iter().find(|(t, n, _)| *t == "nbd_session" && n == "session").expect("seed");
        let mut r = &data[..];
        let mut replies = Vec::new();
        let ex = vsci_nbd::ExportInfo {
            name: "vsci",
            size: super::NBD_SIZE,
            tflags: 0,
            max_request: super::NBD_MAX_REQUEST,
        };
        let n = vsci_nbd::negotiate(&mut r, &mut replies, &ex).expect("negotiates");
        assert!(matches!(n, vsci_nbd::Negotiated::Transmission { .. }), "{n:?}");
        assert!(r.len() > 7 * 28, "requests follow");
    }
}
