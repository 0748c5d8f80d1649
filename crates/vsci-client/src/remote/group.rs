//! Reflective memory: a group connection to every member of a broadcast
//! segment group, and what its maps and DMA transfers write to.
//!
//! On Dolphin hardware a broadcast segment is one PCIe multicast address:
//! each node that creates a segment with `SCI_FLAG_BROADCAST` and the
//! group's id is a member, and a store or DMA write into a map of the group
//! (`SCIConnectSegment` to `DIS_BROADCAST_NODEID_GROUP_ALL`) lands in every
//! member's segment, the writer's own node included unless the map asked for
//! `SCI_FLAG_NO_MEMORY_LOOPBACK_MAP`.
//!
//! Here a group connection is one ordinary connection per member segment
//! (so access checks, events and clean-up are the unicast ones). A
//! shipment of the group's trapped map posts its writes to every remote
//! member before it waits for any (`write_many_ordered_multi`), so the
//! members receive in parallel, and copies into a member on this node
//! directly. Each member gets the same ordered shipment as a unicast map:
//! what is stored before a flush is at every live member when it returns,
//! and a flag above its payload never shows before the payload at any
//! member. A member that fails (its node died, its segment was removed) is
//! dropped and the others go on; the group is lost when none is left.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use vsci_proto::{SciError, SegmentEvent};

use super::{Owner, OwnerError};
use crate::conn::{EventQueue, SegEvent};
use crate::segment::RemoteSegment;
use crate::Result;

/// Dolphin's node id for "every member of the group" (`dis_types.h`).
pub const GROUP_ALL: u32 = 252;

/// How often a group connection looks for members that joined since (a
/// node that created its broadcast segment after the connect): on hardware
/// a multicast group has no list, every member receives what is written
/// after it joined.
const SWEEP: Duration = Duration::from_millis(500);

struct Member {
    seg: Arc<RemoteSegment>,
    /// Dropped after a failed write or read.
    dropped: bool,
}

#[derive(Default)]
struct State {
    /// Every member ever connected, in order (indices stay valid).
    members: Vec<Member>,
    /// Disconnected: the sweeper adds no one any more.
    closed: bool,
    /// Nodes whose member was too small (said once).
    too_small: Vec<u32>,
}

/// The members of one group connection.
pub(crate) struct Group {
    segment_id: u32,
    /// The group connection's size: its smallest first member's. A later
    /// member must be at least as large.
    size: u64,
    client: crate::conn::Client,
    /// The nodes of the cluster, this one first.
    nodes: Vec<u32>,
    state: Mutex<State>,
    /// The group connection's own events: LOST once no member is left.
    events: Weak<EventQueue>,
}

/// How one member is reached.
enum Reach {
    /// A segment of this node: its memory, mapped by the DMA engine's cache.
    Here(Arc<crate::dma::SegMem>),
    Remote(Owner),
}

impl Group {
    fn new(
        client: &crate::conn::Client,
        segment_id: u32,
        nodes: Vec<u32>,
        members: Vec<Arc<RemoteSegment>>,
        events: &Arc<EventQueue>,
    ) -> Arc<Group> {
        let size = members.iter().map(|m| m.size).min().unwrap_or(0);
        let g = Arc::new(Group {
            segment_id,
            size,
            client: client.clone(),
            nodes,
            state: Mutex::new(State::default()),
            events: Arc::downgrade(events),
        });
        for m in members {
            g.add(m);
        }
        let w = Arc::downgrade(&g);
        let _ = vsci_sys::signals::spawn(std::thread::Builder::new().name("vsci-group".into()), move || loop {
            std::thread::sleep(SWEEP);
            match w.upgrade() {
                Some(g) if g.sweep() => {}
                _ => return,
            }
        });
        g
    }

    fn add(self: &Arc<Self>, m: Arc<RemoteSegment>) {
        let w = Arc::downgrade(self);
        m.events.set_callback(Box::new(move |ev: SegEvent| {
            if ev.reason == SegmentEvent::Lost {
                if let Some(g) = w.upgrade() {
                    g.check_lost();
                }
            }
            true
        }));
        self.state.lock().unwrap().members.push(Member { seg: m, dropped: false });
    }

    /// Connect members that appeared since; false once the group is closed
    /// or lost (the sweeper then ends).
    fn sweep(self: &Arc<Self>) -> bool {
        if self.events.upgrade().is_none_or(|q| q.lost.load(Ordering::SeqCst)) {
            return false;
        }
        let have: Vec<u32> = self.live().iter().map(|(_, m)| m.node_id).collect();
        for &n in self.nodes.iter().filter(|n| !have.contains(n)) {
            let Ok(m) = self.client.connect_segment_with(n, self.segment_id, 0, true) else { continue };
            if self.state.lock().unwrap().closed {
                let _ = m.disconnect();
                return false;
            }
            if m.size < self.size {
                let mut st = self.state.lock().unwrap();
                if st.too_small.contains(&n) {
                    drop(st);
                    let _ = m.disconnect();
                    continue;
                }
                st.too_small.push(n);
                drop(st);
                log::warn!(
                    "vsci: reflective-memory group {}: the member on node {n} has {} bytes, fewer than the group's {}; left out",
                    self.segment_id,
                    m.size,
                    self.size
                );
                let _ = m.disconnect();
                continue;
            }
            log::info!("vsci: reflective-memory group {}: member on node {n} joined", self.segment_id);
            self.add(m);
        }
        !self.state.lock().unwrap().closed
    }

    /// In a guest: are members reached through the guest's host side?
    pub(crate) fn through_agent(&self) -> bool {
        self.state.lock().unwrap().members.iter().any(|m| m.seg.agent.is_some())
    }

    /// Stop adding members; every member connection, dropped or not (for
    /// disconnecting).
    pub(crate) fn close(&self) -> Vec<Arc<RemoteSegment>> {
        let mut st = self.state.lock().unwrap();
        st.closed = true;
        st.members.iter().map(|m| m.seg.clone()).collect()
    }

    /// The members still written to, with their index.
    pub(crate) fn live(&self) -> Vec<(usize, Arc<RemoteSegment>)> {
        let st = self.state.lock().unwrap();
        st.members
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.dropped && !m.seg.is_lost())
            .map(|(i, m)| (i, m.seg.clone()))
            .collect()
    }

    /// Where an emulated store goes (see `trapped::Shadow::emulate`): the
    /// remote members' RMA targets with their index, and this node's
    /// member's memory if `loopback`. `None` when a member is reached some
    /// other way (through a guest's host side).
    #[allow(clippy::type_complexity)]
    pub(crate) fn emulation_targets(
        &self,
        loopback: bool,
    ) -> Option<(Vec<(usize, Arc<super::RemoteTarget>)>, Vec<Arc<crate::dma::SegMem>>)> {
        let (mut rma, mut here) = (Vec::new(), Vec::new());
        for (i, m) in self.live() {
            match Self::reach(&m).ok()? {
                Reach::Remote(Owner::Rma(t)) => rma.push((i, t)),
                Reach::Here(mem) if loopback => here.push(mem),
                Reach::Here(_) => {}
                Reach::Remote(_) => return None,
            }
        }
        Some((rma, here))
    }

    pub(crate) fn drop_member(&self, i: usize, why: &dyn std::fmt::Display) {
        let mut st = self.state.lock().unwrap();
        if !st.members[i].dropped {
            st.members[i].dropped = true;
            log::warn!(
                "vsci: reflective-memory group {}: member on node {} dropped ({why})",
                self.segment_id,
                st.members[i].seg.node_id
            );
        }
        drop(st);
        self.check_lost();
    }

    /// No member left: the group connection is lost (once).
    fn check_lost(&self) {
        if !self.live().is_empty() {
            return;
        }
        if let Some(q) = self.events.upgrade() {
            if !q.lost.swap(true, Ordering::SeqCst) {
                q.deliver(SegEvent { reason: SegmentEvent::Lost, node_id: GROUP_ALL, status: SciError::Ok });
            }
        }
    }

    fn reach(m: &Arc<RemoteSegment>) -> std::result::Result<Reach, OwnerError> {
        match m.owner() {
            Some(o) => Ok(Reach::Remote(o)),
            None => crate::dma::seg_mem_remote(m).map(Reach::Here).map_err(OwnerError::Agent),
        }
    }

    /// The group's bytes at `offset`: from a member on this node if there is
    /// one and `loopback` writes it (no round trip), else from the first
    /// remote member that answers. Never from a member the map does not
    /// write: its bytes are not what the others hold, and a twin made from
    /// them would hide stores equal to them from the members that do differ.
    pub(crate) fn read_direct(
        &self,
        loopback: bool,
        buf: &mut [u8],
        offset: u64,
    ) -> std::result::Result<(), OwnerError> {
        let mut live = self.live();
        live.retain(|(_, m)| loopback || m.owner().is_some());
        live.sort_by_key(|(_, m)| m.owner().is_some());
        let mut last = OwnerError::Agent(SciError::NoSuchSegment);
        for (i, m) in live {
            let r = Self::reach(&m).and_then(|reach| match reach {
                Reach::Here(mem) => {
                    // SAFETY: the trap reads within the map, which lies
                    // inside the group's size, the smallest member's size;
                    // the mapping covers that member's whole segment.
                    unsafe {
                        std::ptr::copy_nonoverlapping(mem.ptr().add(offset as usize), buf.as_mut_ptr(), buf.len())
                    };
                    Ok(())
                }
                Reach::Remote(o) => o.read_direct(buf, offset),
            });
            match r {
                Ok(()) => return Ok(()),
                // The engine may still write into `buf`: no other member may
                // be read into it.
                Err(e) if e.is_abandoned() => {
                    self.drop_member(i, &e);
                    return Err(e);
                }
                Err(e) => {
                    self.drop_member(i, &e);
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// A shipment (see `RemoteTarget::write_shipment`) to every live member:
    /// remote ones in parallel, this node's (unless `loopback` is off) by
    /// copying. Fails only when no member took it.
    pub(crate) fn write_shipment<'a>(
        &self,
        loopback: bool,
        seg_off: u64,
        runs: &[vsci_trap::Run],
        bytes: impl Fn(vsci_trap::Run) -> &'a [u8],
    ) -> std::result::Result<(), OwnerError> {
        let (first, last) = vsci_rma::split_last_word(runs);
        let ops = |rs: &[vsci_trap::Run]| -> Vec<(&[u8], u64)> {
            rs.iter().map(|&run| (bytes(run), seg_off + run.0 as u64)).collect()
        };
        let (first_ops, last_ops) = (ops(&first), ops(&[last]));
        let mut rma = Vec::new();
        let mut delivered = false;
        let mut last_err = None;
        for (i, m) in self.live() {
            match Self::reach(&m) {
                Ok(Reach::Here(mem)) => {
                    if !loopback {
                        continue;
                    }
                    // Payload first, the highest word after it, as the
                    // remote members get it.
                    let copy = |(src, off): &(&[u8], u64)| {
                        // SAFETY: the runs lie inside the map, which lies
                        // inside the group's (smallest member's) size.
                        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), mem.ptr().add(*off as usize), src.len()) };
                    };
                    first_ops.iter().for_each(copy);
                    std::sync::atomic::fence(Ordering::Release);
                    last_ops.iter().for_each(copy);
                    delivered = true;
                }
                Ok(Reach::Remote(Owner::Rma(t))) => rma.push((i, t)),
                Ok(Reach::Remote(Owner::Agent(a))) => match a.ship(seg_off, runs, &bytes).map_err(OwnerError::Agent) {
                    Ok(()) => delivered = true,
                    Err(e) => {
                        self.drop_member(i, &e);
                        last_err = Some(e);
                    }
                },
                // A member is one node's segment, never a group.
                Ok(Reach::Remote(Owner::Group(..))) => unreachable!("groups do not nest"),
                Err(e) => {
                    self.drop_member(i, &e);
                    last_err = Some(e);
                }
            }
        }
        if let Some((_, t0)) = rma.first() {
            let fabric = t0.fabric().clone();
            let targets: Vec<_> = rma.iter().map(|(_, t)| (&**t.peer(), t.region())).collect();
            let results = fabric.write_many_ordered_multi(&targets, &first_ops, &last_ops);
            for ((i, _), r) in rma.iter().zip(results) {
                match r {
                    Ok(()) => delivered = true,
                    Err(e) => {
                        let e = OwnerError::Rma(e);
                        self.drop_member(*i, &e);
                        last_err = Some(e);
                    }
                }
            }
        }
        match (delivered, last_err) {
            (true, _) => Ok(()),
            (false, Some(e)) => Err(e),
            // Nothing to write to (every member gone, or only this node's
            // with loopback off): nothing was lost by not writing.
            (false, None) if self.live().is_empty() => Err(OwnerError::Agent(SciError::NoSuchSegment)),
            (false, None) => Ok(()),
        }
    }
}

impl crate::conn::Client {
    /// Connect to reflective-memory group `segment_id`: every node's segment
    /// created with `broadcast` under that id, this node's included. Waits
    /// up to `timeout_ms` for at least one member; the members are the ones
    /// there when the first is found (plus any that answer in the same
    /// sweep of the cluster), and any that appear later, found within
    /// [`SWEEP`].
    pub fn connect_group(&self, segment_id: u32, timeout_ms: u32) -> Result<Arc<RemoteSegment>> {
        let members = self.sweep_cluster(timeout_ms, |n| self.connect_segment_with(n, segment_id, 0, true))?;
        let events = Arc::new(EventQueue::default());
        let group = Group::new(self, segment_id, self.cluster_nodes(), members, &events);
        self.group_segment(segment_id, group.size, group, events)
    }

    /// This node, then every other node of its cluster.
    fn cluster_nodes(&self) -> Vec<u32> {
        let mut nodes = vec![self.node_id()];
        if let Ok(st) = self.status() {
            nodes.extend(st.peers.iter().map(|p| p.node_id).filter(|n| *n != self.node_id()));
        }
        nodes
    }

    /// Try `connect` on every node of the cluster (this one first) until at
    /// least one succeeds or `timeout_ms` passes (`SCI_ERR_NO_SUCH_SEGMENT`
    /// then; the callers' objects name what was missing the same way
    /// Dolphin's group connects do). Returns everything that connected in
    /// the sweep that found the first.
    pub(crate) fn sweep_cluster<T>(&self, timeout_ms: u32, connect: impl Fn(u32) -> Result<T>) -> Result<Vec<T>> {
        let deadline = crate::wait::deadline(timeout_ms);
        let nodes = self.cluster_nodes();
        loop {
            let mut members = Vec::new();
            for &n in &nodes {
                match connect(n) {
                    Ok(s) => members.push(s),
                    Err(e) => log::debug!("vsci: group connect: nothing on node {n}: {}", e.c_name()),
                }
            }
            if !members.is_empty() {
                return Ok(members);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(SciError::NoSuchSegment);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The memory a group's maps are made of before `track_remote` replaces it
/// with the shadow: any memfd of the right size.
pub(crate) fn placeholder_memfd(size: u64) -> Result<std::os::fd::OwnedFd> {
    vsci_sys::memfd::create(c"vsci-group", size, vsci_sys::memfd::Seals::NONE).map_err(|_| SciError::Nospc)
}
