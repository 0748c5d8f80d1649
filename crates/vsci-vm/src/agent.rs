//! A guest's host side: serves the guest's ivshmem-doorbell device (QEMU's
//! ivshmem server protocol, a private control region), relays the guest's
//! SISCI control requests to vscid, and puts the memory and notifications
//! vscid hands out into the guest.
//!
//! Each guest program's session (guest/driver/vsci_guest.h) becomes one
//! ordinary vscid client connection, so the node applies the same
//! ownership checks and clean-up to a guest program as to a host process;
//! the guest as a whole is its own principal because nothing it sends is
//! taken as anything but a request on its own connections.
//!
//! vscid's descriptors become things a guest can use:
//! - memfds (segments, interrupt pages) are hot-plugged over QMP as
//!   `ivshmem-plain` windows at a PCI slot we choose, and unplugged once the
//!   guest's driver reports the window unused (zero copy both ways);
//! - an interrupt the guest creates wakes it through one of its own MSI-X
//!   vector eventfds, which vscid uses as the interrupt's eventfd
//!   (`CreateInterruptWake`), so triggers reach the guest with no hop here;
//! - an interrupt the guest connects to becomes a "virtual peer" of its
//!   doorbell device whose vector 0 is the interrupt's eventfd, so the
//!   guest's doorbell write wakes the host waiter directly.
//!
//! Nothing here is on a data path; everything the guest writes into the
//! control region is copied out, then checked, and a misbehaving guest can
//! only break its own sessions.
//!
//! One file of about a thousand lines, on purpose: most of it is `Worker`,
//! one event loop over the control region, the sessions and vscid's
//! replies, whose handlers all change the same state (sessions, windows,
//! relays) in an order that matters; split by handler, every file would
//! reach into one struct and the order would be spread over all of them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use vsci_proto::guest::{self, AgentRecord, Attachment, GuestMsg, GuestRequest, Role, Session, ToGuest};
use vsci_proto::wire;
use vsci_proto::{ClientMsg, Event, ObjId, Reply, Request, SciError, ServerMsg};

use crate::dma;
use crate::ivshmem::{self, Server};
use crate::proxy::{ProxiedSegment, ProxiedTrigger};
use crate::qmp::{Plugged, Qmp};

/// PCI slot of the doorbell device on bus 0; windows take the slots above.
pub const CTL_SLOT: u8 = 3;
const FIRST_WINDOW_SLOT: u8 = 4;
/// Slots on bus 0.
const SLOTS: u8 = 32;
/// Virtual peer ids (interrupts the guest triggers), above any real client.
/// Never reused: QEMU 7.2 frees a peer's eventfd array when the peer goes
/// away but keeps the pointer, so a second peer with the same id writes
/// into freed memory (QEMU crashed with SIGSEGV until we stopped reusing).
const FIRST_VPEER: u16 = 16;
/// Replies and events queued for a session whose ring is full; a guest that
/// stops reading loses that session, never the node's memory.
const MAX_QUEUED: usize = 1024;
/// Records taken from one session per pass, so one flooding program cannot
/// starve the others.
const RECORDS_PER_PASS: usize = 64;
/// Messages read from one session's node connection per wake-up. More than
/// a pass forwards, so replies never pile up at vscid (which drops a client
/// that leaves too many unread).
const NODE_MESSAGES_PER_WAKE: usize = 256;
/// Requests of one session forwarded to vscid and not yet answered. vscid
/// answers every request (a wait answers when it ends), so this bounds what
/// one program can have queued at the node, however fast it writes records;
/// a plain SISCI program has one per thread.
const MAX_IN_FLIGHT: usize = 256;
/// A window nobody opened within this time after it was handed out is taken
/// back (the program that asked for it died or misbehaves).
const UNUSED_WINDOW_GRACE: Duration = Duration::from_secs(30);
/// Tags of requests the agent makes for itself (clean-ups); their replies
/// are not forwarded.
const OWN_TAG: u64 = 1 << 63;

/// What the agent needs to know.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// vscid's control socket.
    pub node_socket: PathBuf,
    /// The guest's name (client names in `vsci status`).
    pub name: String,
    /// MSI-X vectors of the doorbell device.
    pub vectors: u16,
    /// Where QEMU's QMP socket will be.
    pub qmp: PathBuf,
}

/// A running agent.
pub struct Agent {
    ivshmem_path: PathBuf,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl Agent {
    /// Lay out a control region, listen for the guest's doorbell device at
    /// `dir/ivshmem.sock`, and serve in a thread (QMP is connected once QEMU
    /// is up).
    pub fn start(cfg: AgentConfig, dir: &Path) -> Result<Agent> {
        // Fail early and clearly if the node is not there.
        drop(
            wire::connect(&cfg.node_socket)
                .with_context(|| format!("cannot reach vscid at {}", cfg.node_socket.display()))?,
        );
        let region = Region::new().context("control region")?;
        let memfd = region.memfd.try_clone()?;
        let path = dir.join("ivshmem.sock");
        let server = Server::start(
            &path,
            ivshmem::Config { vectors: cfg.vectors, host_peer: true, announce_peers: false, max_clients: 1 },
            move |_| memfd.try_clone(),
        )?;
        let stop: OwnedFd = nix::sys::eventfd::EventFd::from_flags(
            nix::sys::eventfd::EfdFlags::EFD_CLOEXEC | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
        )?
        .into();
        let stop2 = stop.try_clone()?;
        let thread = std::thread::Builder::new().name("vsci-agent".into()).spawn(move || {
            let mut w = Worker::new(cfg, server, region, stop2);
            if let Err(e) = w.run() {
                log::error!("vsci agent: {e:#}");
            }
            w.shutdown();
        })?;
        Ok(Agent { ivshmem_path: path, stop, thread: Some(thread) })
    }

    /// The socket QEMU's `-chardev socket,path=` connects to.
    pub fn ivshmem_socket(&self) -> &Path {
        &self.ivshmem_path
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = ivshmem::ring(self.stop.as_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The guest's control region: a memfd we map, QEMU's BAR2.
/// The guest writes it concurrently, so every access goes through atomics
/// or copies (see `word`, `Session`).
struct Region {
    memfd: OwnedFd,
    map: vsci_sys::Mapping,
}

impl Region {
    fn new() -> Result<Region> {
        let memfd =
            vsci_sys::memfd::create(c"vsci-guest-ctl", guest::REGION_SIZE as u64, vsci_sys::memfd::Seals::NONE)?;
        let map = vsci_sys::MapOptions::shared().map(memfd.as_fd(), guest::REGION_SIZE, 0)?;
        let r = Region { memfd, map };
        r.word(guest::VERSION_OFFSET).store(guest::VERSION, Ordering::Relaxed);
        r.word(guest::MAGIC_OFFSET).store(guest::MAGIC, Ordering::Release);
        Ok(r)
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= guest::SESSION_SIZE);
        let p = self.map.ptr_at(off, 4).expect("inside the region");
        // SAFETY: in bounds and aligned (checked); the mapping lives as long
        // as self; any bit pattern is a valid u32.
        unsafe { &*(p as *const AtomicU32) }
    }

    fn session(&self, i: usize) -> Session {
        assert!(i < guest::MAX_SESSIONS);
        let p = self
            .map
            .ptr_at(guest::session_offset(i), guest::SESSION_SIZE)
            .expect("session areas lie inside the region");
        // SAFETY: the session area lies inside the REGION_SIZE mapping
        // (checked), which outlives every Session the worker keeps (both
        // die with it).
        unsafe { Session::new(p, Role::Host) }
    }
}

/// One guest program's connection.
struct Sess {
    generation: u32,
    ring: Session,
    node: Option<OwnedFd>,
    queued: VecDeque<Vec<u8>>,
    /// CreateInterrupt tags → the vector we attached.
    vector_for: HashMap<u64, u16>,
    /// Interrupt connections → the virtual peer standing for them.
    vpeer_of: HashMap<ObjId, u16>,
    /// DisconnectInterrupt tags → the connection.
    disconnecting: HashMap<u64, ObjId>,
    /// Set when the guest broke the protocol: ignored until it reopens.
    broken: bool,
    /// Set while its requests are held because it leaves replies unread
    /// (logged once per stall).
    stalled: bool,
    /// Requests sent to vscid whose reply has not come back.
    in_flight: usize,
    /// Other nodes' segments kept in step for the guest, by connection.
    proxied: HashMap<ObjId, Arc<ProxiedSegment>>,
    /// This node's segment memory the program holds (its segments and its
    /// connections), for DMA on its behalf.
    mem: HashMap<ObjId, Arc<dma::Mem>>,
    /// Abort flags of the program's running DMA transfers, by queue.
    dma: HashMap<u64, Arc<AtomicBool>>,
    /// Raised when a connection's segment is lost (DMA to it then fails).
    lost: HashMap<ObjId, Arc<AtomicBool>>,
    /// Other nodes' interrupts the guest triggers through a relay page.
    relays: HashMap<ObjId, Relay>,
}

impl Sess {
    fn new(generation: u32, ring: Session, broken: bool) -> Sess {
        Sess {
            generation,
            ring,
            node: None,
            queued: VecDeque::new(),
            vector_for: HashMap::new(),
            vpeer_of: HashMap::new(),
            disconnecting: HashMap::new(),
            broken,
            stalled: false,
            in_flight: 0,
            proxied: HashMap::new(),
            relays: HashMap::new(),
            mem: HashMap::new(),
            dma: HashMap::new(),
            lost: HashMap::new(),
        }
    }
}

/// A remote interrupt the guest triggers: the relay page's doorbell.
struct Relay {
    trigger: ProxiedTrigger,
    bell: OwnedFd,
}

struct Window {
    plugged: Plugged,
    size: u64,
    key: (u64, u64),
    handed_out: Instant,
    seen_in_use: bool,
}

struct Worker {
    cfg: AgentConfig,
    server: Server,
    region: Region,
    stop: OwnedFd,
    qmp: Option<Qmp>,
    guest: Option<u16>,
    sessions: Vec<Option<Sess>>,
    windows: BTreeMap<u8, Window>,
    next_vector: u16,
    vpeers_used: std::collections::BTreeSet<u16>,
    next_vpeer: u16,
    /// Ends of DMA transfers: (session, generation, queue, status), with
    /// an eventfd to wake the loop.
    dma_done: (Sender<(usize, u32, u64, SciError)>, Receiver<(usize, u32, u64, SciError)>),
    dma_bell: Arc<OwnedFd>,
    own_tag: u64,
}

fn key_of(fd: BorrowedFd) -> Result<(u64, u64, u64)> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    Ok((st.st_dev, st.st_ino, st.st_size as u64))
}

impl Worker {
    fn new(cfg: AgentConfig, server: Server, region: Region, stop: OwnedFd) -> Worker {
        Worker {
            cfg,
            server,
            region,
            stop,
            qmp: None,
            guest: None,
            sessions: (0..guest::MAX_SESSIONS).map(|_| None).collect(),
            windows: BTreeMap::new(),
            next_vector: 0,
            vpeers_used: Default::default(),
            next_vpeer: FIRST_VPEER,
            dma_done: channel(),
            dma_bell: Arc::new(
                nix::sys::eventfd::EventFd::from_flags(
                    nix::sys::eventfd::EfdFlags::EFD_CLOEXEC | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
                )
                .expect("eventfd")
                .into(),
            ),
            own_tag: OWN_TAG,
        }
    }

    fn stopped(&self) -> bool {
        ivshmem::wait_readable(self.stop.as_fd(), Duration::ZERO).unwrap_or(true)
    }

    fn run(&mut self) -> Result<()> {
        // QEMU connects its doorbell device to us while it starts.
        while self.guest.is_none() {
            if self.stopped() {
                return Ok(());
            }
            if let Some(ivshmem::Event::Connected(id)) = self.server.next_event(Duration::from_millis(100)) {
                self.guest = Some(id);
            }
        }
        let qmp = Qmp::connect(&self.cfg.qmp, Duration::from_secs(60))?;
        self.qmp = Some(qmp);
        log::info!("vsci agent: guest {} attached", self.cfg.name);
        let mut busy = true;
        loop {
            let host_vec = self.server.host_vector(guest::CTL_VECTOR).expect("host peer").as_raw_fd();
            let mut pfds = vec![
                libc::pollfd { fd: self.stop.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: host_vec, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.dma_bell.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            let mut idx = Vec::new();
            for (i, s) in self.sessions.iter().enumerate() {
                if let Some(fd) = s.as_ref().and_then(|s| s.node.as_ref()) {
                    pfds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
                    idx.push(i);
                }
            }
            let mut relay_idx = Vec::new();
            for (i, s) in self.sessions.iter().enumerate() {
                for (conn, r) in s.iter().flat_map(|s| s.relays.iter()) {
                    pfds.push(libc::pollfd { fd: r.bell.as_raw_fd(), events: libc::POLLIN, revents: 0 });
                    relay_idx.push((i, *conn));
                }
            }
            let timeout = if busy { 0 } else { 200 };
            // SAFETY: pfds is a live array of pollfd of the given length.
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
            if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                anyhow::bail!("poll: {}", std::io::Error::last_os_error());
            }
            if pfds[0].revents != 0 {
                return Ok(());
            }
            if let Some(ivshmem::Event::Disconnected(_)) = self.server.next_event(Duration::ZERO) {
                log::info!("vsci agent: guest {} detached", self.cfg.name);
                return Ok(());
            }
            let _ = ivshmem::drain(self.server.host_vector(guest::CTL_VECTOR).expect("host peer"));
            for (k, i) in idx.iter().enumerate() {
                if pfds[k + 3].revents != 0 {
                    self.from_node(*i);
                }
            }
            for (k, (i, conn)) in relay_idx.iter().enumerate() {
                if pfds[k + 3 + idx.len()].revents != 0 {
                    self.relay(*i, *conn);
                }
            }
            if pfds[2].revents != 0 {
                let _ = ivshmem::drain(self.dma_bell.as_fd());
                self.dma_ended();
            }
            busy = self.scan_sessions();
            self.flush_queued();
            self.scan_windows();
        }
    }

    fn keep_mem(&mut self, i: usize, id: ObjId, fd: &OwnedFd, size: u64) {
        if let (Some(s), Ok(dup)) = (self.sessions[i].as_mut(), fd.try_clone()) {
            s.mem.insert(id, Arc::new(dma::Mem::new(dup, size)));
        }
    }

    /// A guest program's DMA transfer: check it against the program's own
    /// objects, then run it on a thread of the node's engine.
    fn dma_start(
        &mut self,
        i: usize,
        queue: u64,
        local: ObjId,
        remote: ObjId,
        entries: Vec<(u64, u64, u64)>,
        read: bool,
    ) -> std::result::Result<(), SciError> {
        let s = self.sessions[i].as_mut().expect("open");
        if s.dma.contains_key(&queue) {
            return Err(SciError::Busy);
        }
        let local = s.mem.get(&local).cloned().ok_or(SciError::IllegalParameter)?;
        let target = match (s.mem.get(&remote), s.proxied.get(&remote)) {
            (Some(m), _) => dma::Target::Local(m.clone()),
            (_, Some(p)) => dma::Target::Proxied(p.clone()),
            _ => return Err(SciError::IllegalParameter),
        };
        let entries = dma::pieces(&entries);
        dma::check(&local, &target, &entries)?;
        let lost = s.lost.entry(remote).or_default().clone();
        if lost.load(Ordering::SeqCst) {
            return Err(SciError::SegmentNotConnected);
        }
        let abort = Arc::new(AtomicBool::new(false));
        s.dma.insert(queue, abort.clone());
        let job = dma::Job { local, remote: target, entries, read, abort, lost };
        let (tx, bell, generation) = (self.dma_done.0.clone(), self.dma_bell.clone(), s.generation);
        let spawned = std::thread::Builder::new().name("vsci-guest-dma".into()).spawn(move || {
            let status = dma::run(&job);
            let _ = tx.send((i, generation, queue, status));
            let _ = ivshmem::ring(bell.as_fd());
        });
        if spawned.is_err() {
            s.dma.remove(&queue);
            return Err(SciError::Nospc);
        }
        Ok(())
    }

    /// Tell programs their transfers ended (an interrupt in the guest).
    fn dma_ended(&mut self) {
        while let Ok((i, generation, queue, status)) = self.dma_done.1.try_recv() {
            let Some(s) = self.sessions[i].as_mut() else { continue };
            if s.generation != generation {
                continue; // the program is gone
            }
            s.dma.remove(&queue);
            self.send_guest(i, ToGuest::DmaDone { queue, status }, Vec::new());
        }
    }

    /// The guest rang a relay (its libsisci shipped its stores first).
    fn relay(&mut self, i: usize, conn: ObjId) {
        let Some(s) = self.sessions[i].as_mut() else { return };
        if let Some(r) = s.relays.get_mut(&conn) {
            let _ = ivshmem::drain(r.bell.as_fd());
            if let Err(e) = r.trigger.forward() {
                log::debug!("vsci agent: forwarding a trigger: {}", e.c_name());
            }
        }
    }

    fn notify_guest(&self) {
        if let Some(g) = self.guest {
            let _ = self.server.notify(g, guest::CTL_VECTOR);
        }
    }

    // ---- sessions ---------------------------------------------------------

    /// Follow the driver's session words and take requests. True if a
    /// session still has records waiting (come back at once).
    fn scan_sessions(&mut self) -> bool {
        let mut more = false;
        for i in 0..guest::MAX_SESSIONS {
            let word = self.region.word(guest::SESSIONS_OFFSET + 4 * i).load(Ordering::Acquire);
            let (generation, state) = guest::split_state(word);
            match state {
                guest::SESSION_OPEN => {
                    if self.sessions[i].as_ref().is_some_and(|s| s.generation != generation) {
                        self.close_session(i);
                    }
                    if self.sessions[i].is_none() {
                        self.sessions[i] = Some(Sess::new(generation, self.region.session(i), false));
                    }
                    more |= self.take_requests(i);
                }
                guest::SESSION_CLOSING => {
                    self.close_session(i);
                    self.region.session(i).reset();
                    self.region
                        .word(guest::SESSIONS_OFFSET + 4 * i)
                        .store(generation << 8 | guest::SESSION_FREE, Ordering::Release);
                }
                _ => {
                    // FREE, or garbage the guest wrote: nothing may live here.
                    if self.sessions[i].is_some() {
                        self.close_session(i);
                    }
                }
            }
        }
        more
    }

    fn close_session(&mut self, i: usize) {
        let Some(s) = self.sessions[i].take() else { return };
        for a in s.dma.values() {
            a.store(true, Ordering::SeqCst);
        }
        // Closing the connection makes vscid release everything it held.
        drop(s.node);
        for p in s.vpeer_of.values() {
            self.drop_vpeer(*p);
        }
    }

    fn break_session(&mut self, i: usize, why: &str) {
        log::warn!("vsci agent: guest {} session {i}: {why}; closing it", self.cfg.name);
        self.close_session(i);
        // Remember the generation so the same session is not revived.
        let word = self.region.word(guest::SESSIONS_OFFSET + 4 * i).load(Ordering::Acquire);
        let (generation, _) = guest::split_state(word);
        self.sessions[i] = Some(Sess::new(generation, self.region.session(i), true));
    }

    fn take_requests(&mut self, i: usize) -> bool {
        for _ in 0..RECORDS_PER_PASS {
            let name = &self.cfg.name;
            let s = self.sessions[i].as_mut().expect("open");
            if s.broken {
                return false;
            }
            // Back-pressure: a program that leaves its replies unread gets
            // no more requests served until it reads them, so what it makes
            // the node produce stays bounded (and vscid never sees this
            // guest's connection as stuck).
            if !s.queued.is_empty() {
                if !s.stalled {
                    s.stalled = true;
                    log::warn!("vsci agent: guest {name} session {i}: the program does not read its replies; holding its requests until it does");
                }
                return false;
            }
            s.stalled = false;
            if s.in_flight >= MAX_IN_FLIGHT {
                return false; // the node's replies wake us
            }
            let rec = match s.ring.recv() {
                Ok(Some(r)) => r,
                Ok(None) => return false,
                Err(e) => {
                    self.break_session(i, &format!("corrupt request ring ({e:?})"));
                    return false;
                }
            };
            let msg: GuestMsg = match postcard::from_bytes(&rec) {
                Ok(m) => m,
                Err(e) => {
                    self.break_session(i, &format!("undecodable request ({e})"));
                    return false;
                }
            };
            self.request(i, msg);
        }
        true
    }

    fn reply_err(&mut self, i: usize, tag: u64, e: SciError) {
        let msg = ServerMsg::Reply { tag, result: Err(e) };
        self.to_guest(i, &msg, Vec::new());
    }

    fn request(&mut self, i: usize, GuestMsg { tag, req }: GuestMsg) {
        log::debug!("vsci agent: session {i} tag {tag}: {req:?}");
        let s = self.sessions[i].as_mut().expect("open");
        if let Err(why) = screen(s.node.is_some(), &req) {
            return self.break_session(i, why);
        }
        // Ours to answer: the guest's maps of other nodes' segments, and
        // DMA on the node's engine.
        let req = match req {
            GuestRequest::Node(req) => req,
            GuestRequest::DmaStart { queue, local, remote, entries, read } => {
                let r = self.dma_start(i, queue, local, remote, entries, read).map(|_| Reply::Done);
                return self.to_guest(i, &ServerMsg::Reply { tag, result: r }, Vec::new());
            }
            GuestRequest::DmaAbort { queue } => {
                if let Some(a) = self.sessions[i].as_ref().expect("open").dma.get(&queue) {
                    a.store(true, Ordering::SeqCst);
                }
                return self.to_guest(i, &ServerMsg::Reply { tag, result: Ok(Reply::Done) }, Vec::new());
            }
            GuestRequest::FetchRemote { conn, offset, len } => {
                let r = match self.sessions[i].as_ref().expect("open").proxied.get(&conn) {
                    Some(p) => p.fetch(offset, len).map(|_| Reply::Done),
                    None => Err(SciError::IllegalParameter),
                };
                return self.to_guest(i, &ServerMsg::Reply { tag, result: r }, Vec::new());
            }
            GuestRequest::ShipRemote { conn, runs } => {
                let r = match self.sessions[i].as_ref().expect("open").proxied.get(&conn) {
                    Some(p) => p.ship(&runs).map(|_| Reply::Done),
                    None => Err(SciError::IllegalParameter),
                };
                return self.to_guest(i, &ServerMsg::Reply { tag, result: r }, Vec::new());
            }
        };
        let s = self.sessions[i].as_mut().expect("open");
        if s.node.is_none() {
            let Request::Hello { version, name } = req else {
                return self.break_session(i, "first request is not Hello");
            };
            let full = guest_client_name(&self.cfg.name, &name);
            match wire::connect(&self.cfg.node_socket) {
                Ok(fd) => {
                    let hello = ClientMsg { tag, req: Request::Hello { version, name: full } };
                    if wire::send(fd.as_fd(), &hello, &[]).is_ok() {
                        s.node = Some(fd);
                        s.in_flight = 1;
                        return;
                    }
                    self.reply_err(i, tag, SciError::NoLinkAccess)
                }
                Err(_) => self.reply_err(i, tag, SciError::NoLinkAccess),
            }
            return;
        }
        let mut fds: Vec<OwnedFd> = Vec::new();
        let req = match req {
            Request::CreateInterrupt { kind, hint, fixed } => {
                let v = self.pick_vector();
                match self.server.client_vector(self.guest.expect("attached"), v) {
                    Ok(fd) => fds.push(fd),
                    Err(_) => return self.reply_err(i, tag, SciError::Nospc),
                }
                self.sessions[i].as_mut().expect("open").vector_for.insert(tag, v);
                Request::CreateInterruptWake { kind, hint, fixed }
            }
            Request::DisconnectInterrupt { conn } => {
                self.sessions[i].as_mut().expect("open").disconnecting.insert(tag, conn);
                Request::DisconnectInterrupt { conn }
            }
            Request::DisconnectSegment { conn } => {
                self.sessions[i].as_mut().expect("open").disconnecting.insert(tag, conn);
                Request::DisconnectSegment { conn }
            }
            Request::RemoveSegment { seg } => {
                self.sessions[i].as_mut().expect("open").disconnecting.insert(tag, seg);
                Request::RemoveSegment { seg }
            }
            other => other,
        };
        self.send_node(i, ClientMsg { tag, req }, &fds);
    }

    fn send_node(&mut self, i: usize, msg: ClientMsg, fds: &[OwnedFd]) {
        let s = self.sessions[i].as_mut().expect("open");
        let Some(node) = s.node.as_ref() else { return };
        let b: Vec<BorrowedFd> = fds.iter().map(|f| f.as_fd()).collect();
        if wire::send(node.as_fd(), &msg, &b).is_ok() {
            s.in_flight += 1;
        } else {
            s.node = None;
            let tag = msg.tag;
            if tag & OWN_TAG == 0 {
                self.reply_err(i, tag, SciError::NoLinkAccess);
            }
        }
    }

    fn pick_vector(&mut self) -> u16 {
        if self.cfg.vectors <= 1 {
            return 0;
        }
        self.next_vector = self.next_vector % (self.cfg.vectors - 1) + 1;
        self.next_vector
    }

    // ---- node → guest -----------------------------------------------------

    /// Messages from vscid for session `i`: what is there now, up to
    /// [`NODE_MESSAGES_PER_WAKE`].
    fn from_node(&mut self, i: usize) {
        for k in 0..NODE_MESSAGES_PER_WAKE {
            let Some(node) = self.sessions[i].as_ref().and_then(|s| s.node.as_ref()) else { return };
            if k > 0 && !readable(node.as_fd()) {
                return;
            }
            self.one_from_node(i);
        }
    }

    fn one_from_node(&mut self, i: usize) {
        let Some(node) = self.sessions[i].as_ref().and_then(|s| s.node.as_ref()) else { return };
        let mut msg = match wire::recv(node.as_fd()) {
            Ok(m) => m,
            Err(_) => {
                // vscid went away or dropped us: the guest program sees what a
                // host client sees when its socket closes.
                if let Some(s) = self.sessions[i].as_mut() {
                    s.node = None;
                }
                self.to_guest(i, &ServerMsg::Event(Event::Shutdown), Vec::new());
                return;
            }
        };
        let Ok(mut sm) = msg.decode::<ServerMsg>() else { return };
        log::debug!("vsci agent: session {i} from the node: {sm:?}");
        let fds = std::mem::take(&mut msg.fds);
        if let (ServerMsg::Reply { .. }, Some(s)) = (&sm, self.sessions[i].as_mut()) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
        if let ServerMsg::Reply { tag, .. } = &sm {
            if tag & OWN_TAG != 0 {
                return; // our own clean-up's answer
            }
        }
        let attachments = match self.translate(i, &mut sm, fds) {
            Ok(a) => a,
            Err((e, cleanup)) => {
                log::warn!("vsci agent: guest {}: {e:#}", self.cfg.name);
                if let Some(req) = cleanup {
                    self.own_tag += 1;
                    let tag = self.own_tag;
                    self.send_node(i, ClientMsg { tag, req }, &[]);
                }
                if let ServerMsg::Reply { result, .. } = &mut sm {
                    *result = Err(SciError::Nospc);
                }
                Vec::new()
            }
        };
        self.to_guest(i, &sm, attachments);
    }

    /// Replace descriptors by attachments. On failure, says which request
    /// undoes what vscid already did.
    fn translate(
        &mut self,
        i: usize,
        sm: &mut ServerMsg,
        fds: Vec<OwnedFd>,
    ) -> std::result::Result<Vec<Attachment>, (anyhow::Error, Option<Request>)> {
        if let ServerMsg::Event(Event::RemoteSegment { conn, reason: vsci_proto::SegmentEvent::Lost, .. }) = sm {
            let s = self.sessions[i].as_mut().expect("open");
            s.lost.entry(*conn).or_default().store(true, Ordering::SeqCst);
        }
        let ServerMsg::Reply { tag, result: Ok(reply) } = sm else { return Ok(Vec::new()) };
        let tag = *tag;
        let s = self.sessions[i].as_mut().expect("open");
        match reply {
            Reply::Segment { seg, size, .. } => {
                let (seg, size) = (*seg, *size);
                let w =
                    one(&fds).and_then(|fd| self.window(fd)).map_err(|e| (e, Some(Request::RemoveSegment { seg })))?;
                self.keep_mem(i, seg, &fds[0], size);
                Ok(vec![w])
            }
            Reply::Connected { conn, remote: None, size, .. } => {
                let (conn, size) = (*conn, *size);
                let w = one(&fds)
                    .and_then(|fd| self.window(fd))
                    .map_err(|e| (e, Some(Request::DisconnectSegment { conn })))?;
                self.keep_mem(i, conn, &fds[0], size);
                Ok(vec![w])
            }
            Reply::Connected { conn, remote: remote @ Some(_), size, .. } => {
                // The guest has no RMA engine: we reach the owner for it,
                // and keep `remote` (its region key) to ourselves. A
                // `Connected` for another node's segment without `remote`
                // is what tells the guest (vsci_proto::guest).
                let conn = *conn;
                let access = remote.take().expect("matched Some");
                let undo = Some(Request::DisconnectSegment { conn });
                let shadow = one(&fds).map_err(|e| (e, undo.clone()))?;
                let p = ProxiedSegment::new(&access, shadow, *size)
                    .map_err(|e| (anyhow::anyhow!("reaching the owner: {}", e.c_name()), undo.clone()))?;
                let w = self.window(shadow).map_err(|e| (e, undo))?;
                self.sessions[i].as_mut().expect("open").proxied.insert(conn, Arc::new(p));
                Ok(vec![w])
            }
            Reply::Interrupt { intr, .. } => {
                let intr = *intr;
                let v = s.vector_for.remove(&tag).unwrap_or(0);
                if fds.len() != 2 {
                    return Err((
                        anyhow::anyhow!("interrupt reply with {} descriptors", fds.len()),
                        Some(Request::RemoveInterrupt { intr }),
                    ));
                }
                let w = self.window(fds[0].as_fd()).map_err(|e| (e, Some(Request::RemoveInterrupt { intr })))?;
                Ok(vec![w, Attachment::Vector(v)])
            }
            Reply::InterruptConnected { conn, remote: None, .. } => {
                let conn = *conn;
                let undo = Some(Request::DisconnectInterrupt { conn });
                if fds.len() != 2 {
                    return Err((anyhow::anyhow!("interrupt connection with {} descriptors", fds.len()), undo));
                }
                let peer = match self.add_vpeer(fds[1].as_fd()) {
                    Ok(p) => p,
                    Err(e) => return Err((e, undo)),
                };
                match self.window(fds[0].as_fd()) {
                    Ok(w) => {
                        self.sessions[i].as_mut().expect("open").vpeer_of.insert(conn, peer);
                        Ok(vec![w, Attachment::Doorbell { peer, vector: 0 }])
                    }
                    Err(e) => {
                        self.drop_vpeer(peer);
                        Err((e, undo))
                    }
                }
            }
            Reply::InterruptConnected { conn, remote: remote @ Some(_), place } => {
                let conn = *conn;
                let trig = remote.take().expect("matched Some");
                // The guest sees a local interrupt: the relay page.
                *place = Some(ProxiedTrigger::RELAY_PLACE);
                let undo = Some(Request::DisconnectInterrupt { conn });
                let (relay, page) = Relay::new(&trig).map_err(|e| (e, undo.clone()))?;
                let peer = self.add_vpeer(relay.bell.as_fd()).map_err(|e| (e, undo.clone()))?;
                match self.window(page.as_fd()) {
                    Ok(w) => {
                        let s = self.sessions[i].as_mut().expect("open");
                        s.vpeer_of.insert(conn, peer);
                        s.relays.insert(conn, relay);
                        Ok(vec![w, Attachment::Doorbell { peer, vector: 0 }])
                    }
                    Err(e) => {
                        self.drop_vpeer(peer);
                        Err((e, undo))
                    }
                }
            }
            Reply::Done => {
                if let Some(conn) = s.disconnecting.remove(&tag) {
                    s.proxied.remove(&conn);
                    s.mem.remove(&conn);
                    s.lost.remove(&conn);
                    s.relays.remove(&conn);
                    if let Some(p) = s.vpeer_of.remove(&conn) {
                        self.drop_vpeer(p);
                    }
                }
                Ok(Vec::new())
            }
            _ => Ok(Vec::new()),
        }
    }

    /// A message of the node's protocol (vscid's, translated, or our own
    /// answer to a guest-only request) to session `i`.
    fn to_guest(&mut self, i: usize, sm: &ServerMsg, attachments: Vec<Attachment>) {
        let Ok(msg) = postcard::to_stdvec(sm) else { return };
        self.send_guest(i, ToGuest::Node(msg), attachments);
    }

    fn send_guest(&mut self, i: usize, msg: ToGuest, attachments: Vec<Attachment>) {
        let Some(s) = self.sessions[i].as_mut() else { return };
        let Ok(rec) = postcard::to_stdvec(&AgentRecord { msg, attachments }) else { return };
        if rec.len() > guest::MAX_RECORD {
            log::warn!("vsci agent: a {}-byte reply does not fit a guest record; dropped", rec.len());
            return;
        }
        if s.queued.is_empty() && s.ring.send(&rec).is_ok() {
            self.notify_guest();
            return;
        }
        s.queued.push_back(rec);
        if s.queued.len() > MAX_QUEUED {
            self.break_session(i, "the program does not read its replies");
        }
    }

    fn flush_queued(&mut self) {
        let mut sent = false;
        for s in self.sessions.iter_mut().flatten() {
            while let Some(rec) = s.queued.front() {
                if s.ring.send(rec).is_err() {
                    break;
                }
                s.queued.pop_front();
                sent = true;
            }
        }
        if sent {
            self.notify_guest();
        }
    }

    // ---- doorbells to the node -------------------------------------------

    fn add_vpeer(&mut self, eventfd: BorrowedFd) -> Result<u16> {
        let id = self.next_vpeer;
        anyhow::ensure!(id < u16::MAX, "this guest has used up its doorbell peer ids (65519 interrupt connections)");
        self.next_vpeer += 1;
        self.server.add_virtual_peer(self.guest.expect("attached"), id, &[eventfd])?;
        self.vpeers_used.insert(id);
        Ok(id)
    }

    fn drop_vpeer(&mut self, id: u16) {
        if self.vpeers_used.remove(&id) {
            if let Some(g) = self.guest {
                let _ = self.server.remove_virtual_peer(g, id);
            }
        }
    }

    // ---- windows ----------------------------------------------------------

    /// Put the memory behind `fd` into the guest (or find it already there).
    fn window(&mut self, fd: BorrowedFd) -> Result<Attachment> {
        let (dev, ino, size) = key_of(fd)?;
        if let Some((slot, w)) = self.windows.iter_mut().find(|(_, w)| w.key == (dev, ino)) {
            w.handed_out = Instant::now();
            w.seen_in_use = false;
            return Ok(Attachment::Window { slot: *slot, size: w.size });
        }
        // QEMU aborts on a BAR that is not a power of two; vscid sizes its
        // memfds so, but never let anything else reach device_add.
        anyhow::ensure!(size.is_power_of_two() && size >= 4096, "memory of {size} bytes cannot be a PCI BAR");
        let slot = (FIRST_WINDOW_SLOT..SLOTS)
            .find(|s| !self.windows.contains_key(s))
            .context("the guest has no free PCI slot for another window")?;
        let qmp = self.qmp.as_mut().context("QMP not connected")?;
        let plugged = qmp.plug_memfd(&format!("vsci-win{slot}"), fd, size, Some(slot))?;
        self.windows
            .insert(slot, Window { plugged, size, key: (dev, ino), handed_out: Instant::now(), seen_in_use: false });
        Ok(Attachment::Window { slot, size })
    }

    /// Unplug windows the guest's driver says nobody holds.
    fn scan_windows(&mut self) {
        let mut gone = Vec::new();
        for (slot, w) in self.windows.iter_mut() {
            let used = self.region.word(guest::WINDOWS_OFFSET + 4 * *slot as usize).load(Ordering::Acquire) != 0;
            if used {
                w.seen_in_use = true;
            } else if w.seen_in_use || w.handed_out.elapsed() > UNUSED_WINDOW_GRACE {
                gone.push(*slot);
            }
        }
        for slot in gone {
            let w = self.windows.remove(&slot).expect("listed");
            if let Some(q) = self.qmp.as_mut() {
                if let Err(e) = q.unplug(&w.plugged, Duration::from_secs(20)) {
                    // Usually QEMU exiting under us; either way QMP is done.
                    log::debug!("vsci agent: unplugging window {slot}: {e:#}");
                    self.qmp = None;
                }
            }
        }
    }

    fn shutdown(&mut self) {
        for i in 0..guest::MAX_SESSIONS {
            self.close_session(i);
        }
    }
}

impl Relay {
    /// A relay page (returned, to be plugged) and its doorbell eventfd.
    fn new(trig: &vsci_proto::RemoteTrigger) -> Result<(Relay, OwnedFd)> {
        let size = (vsci_proto::intr::DATA_SIZE as u64).next_power_of_two();
        let page = nix::sys::memfd::memfd_create(c"vsci-relay", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)?;
        nix::unistd::ftruncate(&page, size as i64)?;
        let trigger = ProxiedTrigger::new(trig, page.as_fd())
            .map_err(|e| anyhow::anyhow!("reaching the interrupt's node: {}", e.c_name()))?;
        let bell: OwnedFd = nix::sys::eventfd::EventFd::from_flags(
            nix::sys::eventfd::EfdFlags::EFD_CLOEXEC | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
        )?
        .into();
        Ok((Relay { trigger, bell }, page))
    }
}

/// Requests a guest program may not make at this point of its session,
/// decided from the request alone (the rest is checked against the
/// program's own objects when handled). Err says why its session breaks.
pub fn screen(hello_done: bool, req: &GuestRequest) -> std::result::Result<(), &'static str> {
    match req {
        GuestRequest::Node(Request::Hello { .. }) if hello_done => Err("second Hello"),
        GuestRequest::Node(Request::Hello { .. }) => Ok(()),
        _ if !hello_done => Err("first request is not Hello"),
        // Only the agent may hand vscid an eventfd.
        GuestRequest::Node(Request::CreateInterruptWake { .. }) => Err("CreateInterruptWake from a guest"),
        _ => Ok(()),
    }
}

/// The name vscid knows a guest program by: the VM's name and the
/// program's, without control characters, cut to fit `MAX_NAME` at a
/// character boundary (the program chooses its name; `String::truncate`
/// inside a character panics).
pub fn guest_client_name(vm: &str, name: &str) -> String {
    let mut full = format!("vm {vm}: {}", name.chars().filter(|c| !c.is_control()).collect::<String>());
    let mut end = (vsci_proto::MAX_NAME - 8).min(full.len());
    while !full.is_char_boundary(end) {
        end -= 1;
    }
    full.truncate(end);
    full
}

fn one(fds: &[OwnedFd]) -> Result<BorrowedFd<'_>> {
    anyhow::ensure!(fds.len() == 1, "expected one descriptor, got {}", fds.len());
    Ok(fds[0].as_fd())
}

/// Whether `fd` has something to read (or hung up) right now.
fn readable(fd: BorrowedFd) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd; a zero timeout never blocks.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program name that put a two-byte character across the cut used to
    /// panic the agent (`String::truncate` inside a character), taking down
    /// every session of the guest. Found by reading for the guest_control
    /// fuzz target; its input is in fuzz/regressions/guest_control/.
    #[test]
    fn a_long_name_is_cut_at_a_character_boundary() {
        let prefix = "vm fuzz-vm: ".len();
        let cut = vsci_proto::MAX_NAME - 8;
        // 'é' takes bytes cut-1 and cut of the full name.
        let name = format!("{}é and more", "a".repeat(cut - 1 - prefix));
        let full = guest_client_name("fuzz-vm", &name);
        assert_eq!(full.len(), cut - 1);
        assert!(full.ends_with('a'));
        let short = guest_client_name("g1", "prog\u{7}\n");
        assert_eq!(short, "vm g1: prog");
    }

    #[test]
    fn guests_say_hello_once_and_never_pass_an_eventfd() {
        let node = GuestRequest::Node;
        let hello = node(Request::Hello { version: 3, name: "p".into() });
        let wake = node(Request::CreateInterruptWake { kind: vsci_proto::IntrKind::Plain, hint: 0, fixed: false });
        let fetch = GuestRequest::FetchRemote { conn: 1, offset: 0, len: 8 };
        assert!(screen(false, &hello).is_ok());
        assert!(screen(true, &hello).is_err());
        assert!(screen(false, &node(Request::Status)).is_err());
        assert!(screen(true, &node(Request::Status)).is_ok());
        assert!(screen(true, &wake).is_err());
        assert!(screen(false, &fetch).is_err());
        assert!(screen(true, &fetch).is_ok());
    }
}
