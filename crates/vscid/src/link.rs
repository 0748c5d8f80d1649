//! Authenticated TCP links between the nodes of a cluster.
//!
//! The node with the lower id dials, the higher one accepts; a dialer that
//! loses its link dials again, so a cut link heals by itself. Setup is a
//! mutual HMAC-SHA256 challenge-response over the shared key; afterwards
//! every frame is `len (u32 LE) | body | HMAC(session key, direction | seq |
//! body)`, so frames cannot be forged, replayed or reordered by a host
//! without the key. A frame that fails any check ends the link.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use vsci_proto::peer::{LinkChallenge, LinkHello, LinkProof, PeerMsg, MAX_PEER_FRAME};
use vsci_proto::PROTOCOL_VERSION;

type HmacSha256 = Hmac<Sha256>;

const MAC_LEN: usize = 32;

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn verify(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.verify_slice(tag).is_ok()
}

fn nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    getrandom::getrandom(&mut n).expect("the OS random source works");
    n
}

/// Unauthenticated framing used only during the handshake.
fn write_plain<T: serde::Serialize>(s: &mut TcpStream, v: &T) -> Result<()> {
    let body = postcard::to_stdvec(v)?;
    s.write_all(&(body.len() as u32).to_le_bytes())?;
    s.write_all(&body)?;
    Ok(())
}

/// Any reader, so the fuzz targets can feed it bytes.
pub fn read_plain<T: serde::de::DeserializeOwned>(s: &mut impl Read) -> Result<T> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > 1024 {
        bail!("handshake frame of {len} bytes");
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok(postcard::from_bytes(&body)?)
}

/// One direction of an authenticated link.
pub struct Sealer {
    key: [u8; 32],
    dir: u8,
    seq: u64,
}

impl Sealer {
    /// One direction keyed with `key` from sequence number 0, as a fresh
    /// link's (the fuzz targets seal their inputs with it, so that frames
    /// get past authentication to decoding).
    pub fn new(key: [u8; 32], dir: u8) -> Sealer {
        Sealer { key, dir, seq: 0 }
    }

    /// Seal and send one frame; returns its size on the wire (for the
    /// per-link byte counters).
    pub fn write(&mut self, s: &mut impl Write, msg: &PeerMsg) -> Result<usize> {
        self.seal_raw(s, &postcard::to_stdvec(msg)?)
    }

    /// Seal and write an encoded body as the next frame; returns its size
    /// on the wire.
    pub fn seal_raw(&mut self, s: &mut impl Write, body: &[u8]) -> Result<usize> {
        let tag = mac(&self.key, &[&[self.dir], &self.seq.to_le_bytes(), body]);
        self.seq += 1;
        let mut frame = Vec::with_capacity(4 + body.len() + MAC_LEN);
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(body);
        frame.extend_from_slice(&tag);
        s.write_all(&frame)?;
        Ok(frame.len())
    }

    /// Read and check one frame; returns it with its size on the wire.
    pub fn read(&mut self, s: &mut impl Read) -> Result<(PeerMsg, usize)> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_PEER_FRAME {
            bail!("frame of {len} bytes exceeds {MAX_PEER_FRAME}");
        }
        let mut buf = vec![0u8; len + MAC_LEN];
        s.read_exact(&mut buf)?;
        let (body, tag) = buf.split_at(len);
        if !verify(&self.key, &[&[self.dir], &self.seq.to_le_bytes(), body], tag) {
            bail!("frame failed authentication");
        }
        self.seq += 1;
        Ok((postcard::from_bytes(body).context("undecodable frame")?, 4 + len + MAC_LEN))
    }
}

/// An authenticated link: the stream plus a sealer for each direction.
pub struct Link {
    pub stream: TcpStream,
    pub peer: u32,
    pub tx: Sealer,
    pub rx: Sealer,
}

fn session_key(key: &[u8], nc: &[u8; 32], ns: &[u8; 32]) -> [u8; 32] {
    mac(key, &[b"vsci-session", nc, ns])
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// Dial `addr` as node `me` and authenticate to node `peer`.
pub fn dial(me: u32, peer: u32, addr: SocketAddr, key: &[u8]) -> Result<Link> {
    let mut s = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let nc = nonce();
    write_plain(&mut s, &LinkHello { version: PROTOCOL_VERSION, from: me, to: peer, nonce: nc })?;
    let ch: LinkChallenge = read_plain(&mut s).context("no challenge (wrong key or not a vsci node?)")?;
    let idb = [me.to_le_bytes(), peer.to_le_bytes()].concat();
    if !verify(key, &[b"vsci-accept", &idb, &nc, &ch.nonce], &ch.mac) {
        bail!("node {peer} at {addr} failed authentication (does it use the same key?)");
    }
    let proof = mac(key, &[b"vsci-dial", &idb, &nc, &ch.nonce]);
    write_plain(&mut s, &LinkProof { mac: proof })?;
    s.set_read_timeout(None)?;
    let k = session_key(key, &nc, &ch.nonce);
    Ok(Link { stream: s, peer, tx: Sealer::new(k, 0), rx: Sealer::new(k, 1) })
}

/// Whether a dialer's first (unauthenticated) frame may go on: our
/// version, for us, from another node of the cluster.
pub fn check_hello(hello: &LinkHello, me: u32, known: impl Fn(u32) -> bool) -> Result<()> {
    if hello.version != PROTOCOL_VERSION {
        bail!("node {} speaks protocol {}, we speak {PROTOCOL_VERSION}", hello.from, hello.version);
    }
    if hello.to != me || !known(hello.from) || hello.from == me {
        bail!("hello from unknown node {} for node {}", hello.from, hello.to);
    }
    Ok(())
}

/// What `accept` fails with when the other end closed without a word: a
/// peer's liveness probe (see `peers.rs`), not an attack.
const NO_HELLO: &str = "closed before its hello";

/// Did `accept` fail because the other end closed without sending anything?
pub fn is_probe(e: &anyhow::Error) -> bool {
    e.to_string() == NO_HELLO
        && e.root_cause()
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
}

/// Did `dial` fail because nothing listens at the address (connection
/// refused): no vscid runs there.
pub fn is_refused(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// Authenticate an accepted connection. `known` says whether a node id is
/// in the cluster.
pub fn accept(mut s: TcpStream, me: u32, key: &[u8], known: impl Fn(u32) -> bool) -> Result<Link> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let hello: LinkHello = read_plain(&mut s).context(NO_HELLO)?;
    check_hello(&hello, me, known)?;
    let ns = nonce();
    let idb = [hello.from.to_le_bytes(), me.to_le_bytes()].concat();
    let m = mac(key, &[b"vsci-accept", &idb, &hello.nonce, &ns]);
    write_plain(&mut s, &LinkChallenge { nonce: ns, mac: m })?;
    let proof: LinkProof = read_plain(&mut s)
        .with_context(|| format!("node {} did not answer our challenge (wrong cluster key?)", hello.from))?;
    if !verify(key, &[b"vsci-dial", &idb, &hello.nonce, &ns], &proof.mac) {
        bail!("node {} failed authentication (wrong cluster key)", hello.from);
    }
    s.set_read_timeout(None)?;
    let k = session_key(key, &hello.nonce, &ns);
    Ok(Link { stream: s, peer: hello.from, tx: Sealer::new(k, 1), rx: Sealer::new(k, 0) })
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    fn pair(dial_key: &'static [u8], accept_key: &'static [u8]) -> (Result<Link>, Result<Link>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            accept(s, 2, accept_key, |id| id == 1)
        });
        let d = dial(1, 2, addr, dial_key);
        (d, t.join().unwrap())
    }

    #[test]
    fn authenticated_link_carries_frames() {
        let (d, a) = pair(b"the-same-key-0123456789", b"the-same-key-0123456789");
        let (mut d, mut a) = (d.unwrap(), a.unwrap());
        assert_eq!(a.peer, 1);
        let mut ds = d.stream.try_clone().unwrap();
        d.tx.write(&mut ds, &PeerMsg::Heartbeat).unwrap();
        d.tx.write(&mut ds, &PeerMsg::DisconnectSegment { conn: 9 }).unwrap();
        let mut s = a.stream.try_clone().unwrap();
        assert!(matches!(a.rx.read(&mut s).unwrap().0, PeerMsg::Heartbeat));
        assert!(matches!(a.rx.read(&mut s).unwrap().0, PeerMsg::DisconnectSegment { conn: 9 }));
    }

    #[test]
    fn wrong_key_is_refused() {
        let (d, a) = pair(b"the-wrong-key-0123456789", b"the-right-key-0123456789");
        assert!(d.is_err());
        assert!(a.is_err());
    }

    #[test]
    fn tampered_frame_is_rejected() {
        let (d, a) = pair(b"the-same-key-0123456789", b"the-same-key-0123456789");
        let (mut d, mut a) = (d.unwrap(), a.unwrap());
        let mut frame = Vec::new();
        d.tx.write(&mut frame, &PeerMsg::DisconnectSegment { conn: 9 }).unwrap();
        frame[5] ^= 1;
        let mut ds = d.stream.try_clone().unwrap();
        ds.write_all(&frame).unwrap();
        let mut s = a.stream.try_clone().unwrap();
        assert!(a.rx.read(&mut s).is_err());
    }
}
