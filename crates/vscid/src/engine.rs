//! The node's RMA engine endpoint (libfabric), for other nodes' access to
//! our segments and interrupts.
//!
//! For a segment a remote node connected to, we map its memfd and register
//! the mapping as a memory region the peers may write and read; the key is
//! a random capability disclosed only over authenticated node links. With
//! a hardware provider (verbs, efa) the NIC moves the bytes; with the tcp
//! provider libfabric's progress thread in this process copies them — the
//! software stand-in for the NIC, never a protocol of ours.
//!
//! Remote interrupt triggers arrive as messages carrying a random token;
//! we apply them to the interrupt page exactly as a local trigger would.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use log::{debug, warn};
use vsci_fabric::{Fabric, MemRegion};
use vsci_proto::intr::{self, EnqueueError};
use vsci_proto::peer::{RmaRegion, TriggerMsg};
use vsci_proto::{ObjId, SciError};

use crate::recover::Recover;

/// A shared mapping owned by the engine.
/// A registered segment's memory, mapped whole for the RMA provider.
fn map_segment(fd: &OwnedFd, len: usize) -> Result<vsci_sys::Mapping, SciError> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|_| SciError::System)?;
    if (st.st_size as u64) < len as u64 || len == 0 {
        return Err(SciError::System);
    }
    vsci_sys::MapOptions::shared().map(fd.as_fd(), len, 0).map_err(|_| SciError::Nospc)
}

struct RegisteredSegment {
    // Field order matters: the region must be closed before the memory
    // under it is unmapped.
    mr: MemRegion,
    _map: vsci_sys::Mapping,
    conns: usize,
}

struct TriggerTarget {
    slot: intr::SlotMap,
    eventfd: OwnedFd,
}

#[derive(Default)]
struct Tables {
    /// Registered segments by memfd inode (one registration per segment).
    segments: HashMap<u64, RegisteredSegment>,
    conn_segment: HashMap<ObjId, u64>,
    triggers: HashMap<u64, Arc<TriggerTarget>>,
    conn_token: HashMap<ObjId, u64>,
    /// Tokens of ended connections, honoured a little longer: a trigger
    /// sent just before a disconnect travels on the RMA engine while the
    /// disconnect travels on the node link, and may arrive second.
    retiring: Vec<(Instant, u64)>,
}

/// How long a token stays valid after its connection ended.
const TOKEN_GRACE: Duration = Duration::from_secs(2);

pub struct Engine {
    fabric: Arc<Fabric>,
    tables: Mutex<Tables>,
    _progress: vsci_fabric::ProgressThread,
}

/// What [`Engine::stats`] reports (for the metrics endpoint).
pub struct EngineStats {
    pub fabric: vsci_fabric::Stats,
    pub regions: usize,
    pub trigger_tokens: usize,
}

/// How long a remote data-interrupt trigger may wait for queue space.
const FULL_QUEUE_WAIT: Duration = Duration::from_secs(1);

impl Engine {
    pub fn open(provider: &str, bind_ip: &str) -> anyhow::Result<Arc<Engine>> {
        let fabric = Fabric::open(provider, Some(bind_ip))
            .map_err(|e| anyhow::anyhow!("opening RMA engine ({provider} on {bind_ip}): {e}"))?;
        let fabric = Arc::new(fabric);
        let progress = fabric.spawn_progress_thread_realtime();
        let engine = Arc::new(Engine { fabric, tables: Mutex::new(Tables::default()), _progress: progress });
        let e = engine.clone();
        std::thread::Builder::new().name("vscid-triggers".into()).spawn(move || e.trigger_loop())?;
        Ok(engine)
    }

    pub fn address(&self) -> Vec<u8> {
        self.fabric.address()
    }

    /// The endpoint's queue depths and totals, plus what the engine holds:
    /// segments registered for other nodes and live trigger tokens.
    pub fn stats(&self) -> EngineStats {
        let t = self.tables.locked();
        EngineStats { fabric: self.fabric.stats(), regions: t.segments.len(), trigger_tokens: t.conn_token.len() }
    }

    /// Expose a segment to a remote connection; returns where to reach it.
    pub fn register_segment_conn(&self, conn: ObjId, memfd: OwnedFd, size: u64) -> Result<RmaRegion, SciError> {
        let ino = nix::sys::stat::fstat(memfd.as_raw_fd()).map_err(|_| SciError::System)?.st_ino;
        let mut t = self.tables.locked();
        if let std::collections::hash_map::Entry::Vacant(e) = t.segments.entry(ino) {
            let map = map_segment(&memfd, size as usize)?;
            // SAFETY: the region covers exactly the mapping it is stored
            // with, and the struct drops the region before the mapping.
            let mr = unsafe { self.fabric.register(map.as_ptr().cast(), map.len(), true, true) }.map_err(|e| {
                warn!("cannot register segment memory with the RMA engine: {e}");
                SciError::Nospc
            })?;
            e.insert(RegisteredSegment { mr, _map: map, conns: 0 });
        }
        let seg = t.segments.get_mut(&ino).expect("inserted");
        seg.conns += 1;
        let r = seg.mr.remote();
        t.conn_segment.insert(conn, ino);
        Ok(RmaRegion { base: r.base, key: r.key, len: r.len })
    }

    /// A remote connection ended: when it was the last one, the region is
    /// closed and the key stops working.
    pub fn release_segment_conn(&self, conn: ObjId) {
        let mut t = self.tables.locked();
        let Some(ino) = t.conn_segment.remove(&conn) else { return };
        let last = t.segments.get_mut(&ino).map(|s| {
            s.conns -= 1;
            s.conns == 0
        });
        if last == Some(true) {
            t.segments.remove(&ino);
            debug!("segment inode {ino}: last remote connection gone, region closed");
        }
    }

    /// Let other nodes trigger the interrupt whose slot is at `place` in
    /// `chunk` (what the registry handed our pseudo-client for `conn`).
    pub fn add_trigger_conn(
        &self,
        conn: ObjId,
        chunk: OwnedFd,
        place: intr::Place,
        eventfd: OwnedFd,
    ) -> Result<u64, SciError> {
        let size = nix::sys::stat::fstat(chunk.as_raw_fd()).map_err(|_| SciError::System)?.st_size as u64;
        let slot = intr::SlotMap::new(chunk.as_fd(), size, place).map_err(|_| SciError::System)?;
        let target = Arc::new(TriggerTarget { slot, eventfd });
        let mut token = [0u8; 8];
        getrandom::getrandom(&mut token).map_err(|_| SciError::System)?;
        let token = u64::from_ne_bytes(token);
        let mut t = self.tables.locked();
        t.triggers.insert(token, target);
        t.conn_token.insert(conn, token);
        Ok(token)
    }

    pub fn remove_trigger_conn(&self, conn: ObjId) {
        let mut t = self.tables.locked();
        if let Some(tok) = t.conn_token.remove(&conn) {
            t.retiring.push((Instant::now() + TOKEN_GRACE, tok));
        }
    }

    fn retire_expired(&self) {
        let mut t = self.tables.locked();
        let now = Instant::now();
        let expired: Vec<u64> = t.retiring.iter().filter(|(d, _)| *d <= now).map(|(_, tok)| *tok).collect();
        if expired.is_empty() {
            return;
        }
        t.retiring.retain(|(d, _)| *d > now);
        for tok in expired {
            t.triggers.remove(&tok);
        }
    }

    fn trigger_loop(self: Arc<Self>) {
        let mut bad = 0u64;
        loop {
            self.retire_expired();
            let Some(m) = self.fabric.recv_timeout(Duration::from_millis(500)) else { continue };
            let msg: TriggerMsg = match postcard::from_bytes(&m.data) {
                Ok(m) => m,
                Err(_) => {
                    bad += 1;
                    crate::metrics::get().remote_trigger("undecodable");
                    if bad.is_power_of_two() {
                        warn!("RMA engine: {bad} undecodable trigger message(s) dropped");
                    }
                    continue;
                }
            };
            let target = self.tables.locked().triggers.get(&msg.token).cloned();
            let Some(target) = target else {
                bad += 1;
                crate::metrics::get().remote_trigger("unknown_token");
                if bad.is_power_of_two() {
                    warn!("RMA engine: {bad} trigger(s) with unknown tokens dropped");
                }
                continue;
            };
            let view = target.slot.view();
            let shared = view.shared;
            let wake = match (&msg.data, view.ring) {
                (None, _) => target.slot.is_live() && shared.trigger(),
                (Some(_), None) => {
                    debug!("remote data trigger for a plain interrupt dropped");
                    false
                }
                (Some(data), Some(ring)) => {
                    let give_up = Instant::now() + FULL_QUEUE_WAIT;
                    loop {
                        match shared.try_enqueue(ring, target.slot.generation(), data) {
                            Ok(w) => break w,
                            Err(EnqueueError::Full) if Instant::now() < give_up => {
                                let _ = nix::unistd::write(target.eventfd.as_fd(), &1u64.to_ne_bytes());
                                std::thread::yield_now();
                            }
                            Err(e) => {
                                debug!("remote data interrupt dropped: {e:?}");
                                break false;
                            }
                        }
                    }
                }
            };
            crate::metrics::get().remote_trigger("applied");
            if wake {
                let _ = nix::unistd::write(target.eventfd.as_fd(), &1u64.to_ne_bytes());
            }
        }
    }
}
