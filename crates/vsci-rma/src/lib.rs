//! Reaching other nodes' segments and interrupts over the RMA engine
//! (`vsci-fabric`), for every process that does: a program's library
//! (`vsci-client`: remote maps, `SCIMemCpy`, loans, triggers, its DMA
//! engine) and a guest's host side (`vsci-vm`'s agent, which reaches other
//! nodes for guest programs, and runs their DMA).
//!
//! - [`Endpoint`]: the owner node's RMA engine as this process sees it,
//!   over the process's one libfabric endpoint (opened on first use), with
//!   trigger messages to its interrupts ([`Endpoint::send_trigger`]);
//! - [`RemoteTarget`]: one remote segment's registered memory: reads,
//!   writes and ordered shipments into it, from slices or from memory
//!   named by address ([`LocalMem`]: memory other parties write meanwhile,
//!   such as a segment shared with a guest, over which no Rust reference
//!   may be made);
//! - [`mover`]: the byte mover of both DMA engines (the client's queues and
//!   the node's engine a guest's host side runs), between this host's
//!   mappings or to and from other nodes, in 1 MiB pieces.
//!
//! Errors: the RMA calls return the engine's [`Error`] (the caller must
//! know about [`Error::Abandoned`]: the engine may still touch the local
//! memory of an abandoned operation); the rest return SISCI errors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use vsci_fabric::{Fabric, Peer, ProgressThread, RemoteRegion};
use vsci_proto::peer::TriggerMsg;
use vsci_proto::{RemoteAccess, SciError};

pub mod mover;

/// The RMA engine's error; [`Error::Abandoned`] means the engine may still
/// touch the operation's local memory later.
pub use vsci_fabric::Error;
pub use vsci_fabric::LocalMem;

/// A run of bytes in a map or window: (offset, length).
pub type Run = (usize, usize);

/// Result of the calls that answer with a SISCI error.
pub type Result<T> = std::result::Result<T, SciError>;

/// The result of an RMA operation.
pub type RmaResult = std::result::Result<(), Error>;

/// The process's RMA endpoint, opened on first use.
struct Rma {
    fabric: Fabric,
    peers: Mutex<HashMap<Vec<u8>, Arc<Peer>>>,
    _progress: ProgressThread,
}

static RMA: OnceLock<std::result::Result<Arc<Rma>, SciError>> = OnceLock::new();

/// The local address the kernel sends from to reach the engine at fabric
/// address `peer` (a `sockaddr_in`, as the tcp provider's addresses are).
/// The process's endpoint binds there: left to itself the provider binds to
/// the first interface it finds, and on a host with several (a TAP, a
/// bridge, a second network) the peer's answers would then go to an
/// address it has no route to.
fn route_source(peer: &[u8]) -> Option<String> {
    if peer.len() < 8 || u16::from_ne_bytes([peer[0], peer[1]]) != libc::AF_INET as u16 {
        return None;
    }
    let ip = std::net::Ipv4Addr::new(peer[4], peer[5], peer[6], peer[7]);
    let port = u16::from_be_bytes([peer[2], peer[3]]).max(1);
    // A UDP "connect" sends nothing; it only asks the kernel for the route.
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect((ip, port)).ok()?;
    let local = s.local_addr().ok()?.ip();
    (!local.is_unspecified()).then(|| local.to_string())
}

fn rma(provider: &str, first_peer: &[u8]) -> Result<Arc<Rma>> {
    RMA.get_or_init(|| {
        let bind = route_source(first_peer);
        let fabric = Fabric::open(provider, bind.as_deref()).map_err(|e| {
            log::error!("vsci: cannot open the RMA engine ({provider}): {e}");
            SciError::NoRemoteLinkAccess
        })?;
        // This process initiates and never serves RMA (its node's engine owns
        // the memory): see ProgressMode::Initiator for why it does not block
        // on the provider's fd while writes are in flight.
        let progress = fabric.spawn_progress_thread_with(vsci_fabric::ProgressMode::Initiator);
        Ok(Arc::new(Rma { fabric, peers: Mutex::new(HashMap::new()), _progress: progress }))
    })
    .clone()
}

impl Rma {
    fn peer(&self, addr: &[u8]) -> Result<Arc<Peer>> {
        let mut p = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(peer) = p.get(addr) {
            return Ok(peer.clone());
        }
        let peer = Arc::new(self.fabric.insert_peer(addr).map_err(|_| SciError::NoRemoteLinkAccess)?);
        p.insert(addr.to_vec(), peer.clone());
        Ok(peer)
    }
}

/// The owner node's RMA engine, as seen from this process. Cheap to clone;
/// every endpoint of one node shares one peer entry.
#[derive(Clone)]
pub struct Endpoint {
    rma: Arc<Rma>,
    peer: Arc<Peer>,
}

impl Endpoint {
    /// The engine at fabric address `addr` (what the node granted), over
    /// provider `provider`; opens the process's endpoint on first use.
    pub fn new(provider: &str, addr: &[u8]) -> Result<Endpoint> {
        let rma = rma(provider, addr)?;
        let peer = rma.peer(addr)?;
        // The node granted us something just now: it is up (again).
        rma.fabric.set_peer_down(&peer, false);
        Ok(Endpoint { rma, peer })
    }

    /// The process's endpoint.
    pub fn fabric(&self) -> &Fabric {
        &self.rma.fabric
    }

    /// The owner's engine in the endpoint's address vector.
    pub fn peer(&self) -> &Arc<Peer> {
        &self.peer
    }

    /// The owner's node was declared dead: operations waiting for it give
    /// up ([`Error::Abandoned`]) and new ones fail.
    pub fn set_down(&self) {
        self.rma.fabric.set_peer_down(&self.peer, true);
    }

    /// A store, flush or trigger to this node while it is paused (not
    /// dead) waits for it, however long: its node tells us when it is
    /// declared dead (SCI_CB_LOST with SCI_ERR_NODE_NOT_RESPONDING; then
    /// [`set_down`](Self::set_down)), and only then does an operation to it
    /// fail (issue 38: no store is lost silently). Only for endpoints whose
    /// death the caller hears of: others (a borrower's loans) keep the
    /// bounded wait.
    pub fn set_patient(&self) {
        self.rma.fabric.set_patient(&self.peer);
    }

    /// Send one trigger message (plain, or with `data`) for the interrupt
    /// connection `token` names, and nothing else: stores the caller made
    /// to remote segments are not flushed first (the caller's job).
    pub fn send_trigger(&self, token: u64, data: Option<&[u8]>) -> Result<()> {
        let msg =
            postcard::to_stdvec(&TriggerMsg { token, data: data.map(<[u8]>::to_vec) }).map_err(|_| SciError::System)?;
        self.rma.fabric.send(&self.peer, &msg).map_err(|e| {
            log::debug!("vsci: trigger send failed: {e}");
            if matches!(e, Error::Abandoned) {
                // The engine may still read the message.
                std::mem::forget(msg);
            }
            SciError::NotConnected
        })
    }
}

/// Where a remote segment lives: its owner's engine and the registered
/// region its memory is.
pub struct RemoteTarget {
    ep: Endpoint,
    region: RemoteRegion,
}

impl RemoteTarget {
    /// The segment (or loan) a node granted as `access`.
    pub fn new(access: &RemoteAccess) -> Result<RemoteTarget> {
        let ep = Endpoint::new(&access.provider, &access.fabric_addr)?;
        let r = access.region;
        Ok(RemoteTarget { ep, region: RemoteRegion { base: r.base, key: r.key, len: r.len } })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    pub fn fabric(&self) -> &Fabric {
        self.ep.fabric()
    }

    pub fn peer(&self) -> &Arc<Peer> {
        self.ep.peer()
    }

    pub fn region(&self) -> &RemoteRegion {
        &self.region
    }

    /// Fresh bytes from the owner into `buf`. They land in a buffer of ours
    /// first: if the node dies mid-read the engine may still write into it
    /// later, so it must never be the caller's memory.
    pub fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read_bounced(LocalMem::from_mut(buf), offset)
    }

    /// [`read`](Self::read) into memory named by address: the bytes are
    /// copied into `dst` (raw copies, no reference made over it) only once
    /// all of them arrived.
    pub fn read_bounced(&self, dst: LocalMem, offset: u64) -> Result<()> {
        let mut bounce = vec![0u8; dst.len()];
        match self.read_direct(&mut bounce, offset) {
            Ok(()) => {
                // SAFETY: `dst` is `dst.len()` bytes of writable memory
                // (LocalMem's contract: a `&mut` slice, or from_raw's
                // promise), and `bounce` is our own buffer of that length:
                // the two do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(bounce.as_ptr(), dst.as_ptr(), dst.len()) };
                Ok(())
            }
            Err(e) => {
                log::debug!("vsci: read from the owner failed: {e}");
                if matches!(e, Error::Abandoned) {
                    // The engine may still write into it.
                    std::mem::forget(bounce);
                }
                Err(SciError::TransferFailed)
            }
        }
    }

    /// RMA read straight into `buf`. After `Err(Abandoned)` the engine may
    /// still write into `buf` later: the caller must then keep that memory
    /// for good ([`read`](Self::read) uses a throw-away buffer).
    pub fn read_direct(&self, buf: &mut [u8], offset: u64) -> RmaResult {
        self.fabric().read(&self.ep.peer, buf, &self.region, offset)
    }

    /// [`read_direct`](Self::read_direct) into memory named by address.
    pub fn read_direct_mem(&self, dst: LocalMem, offset: u64) -> RmaResult {
        self.fabric().read_mem(&self.ep.peer, dst, &self.region, offset)
    }

    /// RMA reads straight into several buffers, waited for together. After
    /// `Err(Abandoned)` the engine may still write into any of them later:
    /// the caller must then keep that memory for good.
    pub fn read_direct_many(&self, ops: &mut [(&mut [u8], u64)]) -> RmaResult {
        self.fabric().read_many(&self.ep.peer, ops, &self.region)
    }

    /// `data` to segment offset `offset`, visible at the owner on return.
    pub fn write(&self, data: &[u8], offset: u64) -> RmaResult {
        self.fabric().write(&self.ep.peer, data, &self.region, offset)
    }

    /// RMA writes of `(bytes, segment offset)` runs straight from the
    /// caller's memory, all visible at the owner when this returns. After
    /// `Err(Abandoned)` the engine may still read that memory later.
    pub fn write_direct(&self, runs: &[(&[u8], u64)]) -> RmaResult {
        self.fabric().write_many(&self.ep.peer, runs, &self.region)
    }

    /// [`write_direct`](Self::write_direct) from memory named by address.
    pub fn write_direct_mem(&self, runs: &[(LocalMem, u64)]) -> RmaResult {
        self.fabric().write_many_mem(&self.ep.peer, runs, &self.region)
    }

    /// `first`, then `then`, placed at the owner after every byte of
    /// `first` (see [`Fabric::write_many_ordered`]); all visible on return.
    pub fn write_ordered(&self, first: &[(&[u8], u64)], then: &[(&[u8], u64)]) -> RmaResult {
        match (first.is_empty(), then.is_empty()) {
            (true, true) => Ok(()),
            (false, true) => self.write_direct(first),
            (true, false) => self.write_direct(then),
            (false, false) => self.fabric().write_many_ordered(&self.ep.peer, first, then, &self.region),
        }
    }

    /// Ship a shipment's `runs` (offsets in a map starting at segment offset
    /// `seg_off`, ascending), taking each run's bytes from `bytes`, all
    /// delivered on return. The last changed word goes in a write of its
    /// own, placed after everything else: the owner's side copies a write
    /// into memory in no particular address order (its provider's memcpy),
    /// so a flag stored after its data, above it — the usual "data, then a
    /// flag at the end" — could otherwise become visible before part of
    /// that data, although both came from one consistent snapshot.
    pub fn write_shipment<'a>(&self, seg_off: u64, runs: &[Run], bytes: impl Fn(Run) -> &'a [u8]) -> RmaResult {
        let (first, last) = split_last_word(runs);
        let ops =
            |rs: &[Run]| -> Vec<(&[u8], u64)> { rs.iter().map(|&run| (bytes(run), seg_off + run.0 as u64)).collect() };
        self.fabric().write_many_ordered(&self.ep.peer, &ops(&first), &ops(&[last]), &self.region)
    }
}

/// Split a shipment's runs (ascending, non-empty) into everything but its
/// highest changed word, and that word: the bytes of the last run from its
/// last 8-byte boundary (or from its start, if shorter). A word-sized tail
/// is placed by the owner's side with one or two overlapping stores, so it
/// is never seen before the bytes below it in the same word either.
pub fn split_last_word(runs: &[Run]) -> (Vec<Run>, Run) {
    let (&(start, len), rest) = runs.split_last().expect("runs to ship");
    let end = start + len;
    let tail = ((end - 1) & !7).max(start);
    let mut first = rest.to_vec();
    if tail > start {
        first.push((start, tail - start));
    }
    (first, (tail, end - tail))
}

#[cfg(test)]
mod tests {
    use super::split_last_word;

    #[test]
    fn last_word_ships_last() {
        // A 512-byte message whose flag's low byte ends the run at 509: the
        // word holding the flag goes alone, after the rest.
        assert_eq!(split_last_word(&[(0, 509)]), (vec![(0, 504)], (504, 5)));
        // Runs below the last one go first, whole.
        assert_eq!(split_last_word(&[(0, 16), (64, 20)]), (vec![(0, 16), (64, 16)], (80, 4)));
        // A last run that ends on a word boundary: its whole last word.
        assert_eq!(split_last_word(&[(8, 24)]), (vec![(8, 16)], (24, 8)));
        // A last run inside one word goes whole, nothing is cut off it.
        assert_eq!(split_last_word(&[(0, 100), (4093, 2)]), (vec![(0, 100)], (4093, 2)));
        assert_eq!(split_last_word(&[(3, 1)]), (vec![], (3, 1)));
    }
}
