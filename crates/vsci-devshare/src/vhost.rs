//! A QEMU guest's function: a vhost-user-net backend. The guest sees a
//! standard virtio-net card and drives it with its stock kernel driver;
//! this backend (in the compute host's `vsci device vm --guest`) turns its
//! virtqueues into the function's rings.
//!
//! The guest's memory *is* the VM memory segment the device reaches: QEMU
//! maps the segment's memfd as guest RAM (`vsci vm run --mem-path`), and
//! the rings live in the segment just past it, where the guest cannot see
//! them. So in the zero-copy mode a transmit descriptor names the guest's
//! own socket-buffer pages (one descriptor per fragment, MORE between
//! them) and a receive descriptor the guest's own receive buffer: the
//! device's RMA engine moves packets straight between the guest's buffers
//! and the device host, nobody copies them. In the bounce mode the device
//! reaches only the area past guest RAM and this backend copies each
//! packet through it: the seed's MRIOV.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use anyhow::{anyhow, Result};
use log::{info, warn};
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{VhostUserBackendMut, VhostUserDaemon, VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{
    Bytes, GuestAddress, GuestAddressSpace, GuestMemory, GuestMemoryAtomic, GuestMemoryMmap, GuestMemoryRegion,
};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::EventFd;

use crate::driver::{BUF, RING};
use crate::mem::Mapping;
use crate::msg::Mode;
use crate::regs::{self, Desc, DD, ERR, MAX_FRAGS, MAX_FRAME, MORE};

/// virtio-net header with VIRTIO_F_VERSION_1: 12 bytes, num_buffers last.
const HDR: usize = 12;
const RXQ: u16 = 0;
const TXQ: u16 = 1;
/// The listener id of the function's interrupts (ids up to the number of
/// queues are the library's).
const IRQ_EVENT: u16 = 3;

/// Posts register writes to a function (through the hypervisor).
pub type RegWriter = Box<dyn Fn(&[(u32, u64)]) + Send + Sync>;

/// What the backend needs of its function.
pub struct Port {
    pub write_regs: RegWriter,
    /// The whole VM memory segment, mapped here (rings, bounce area).
    pub seg: Mapping,
    /// Its inode: guest memory regions must be backed by this file.
    pub seg_ino: (u64, u64),
    pub mode: Mode,
    /// Where the function's rings start in the segment (past guest RAM).
    pub ring_area: u64,
    pub handles: [u64; regs::VECTORS],
}

#[derive(Default, Debug, Clone, Copy)]
pub struct GuestStats {
    pub tx: u64,
    pub rx: u64,
    pub dropped: u64,
    pub errors: u64,
    pub irqs: u64,
    pub copies: u64,
}

struct GuestNet {
    port: Port,
    mem: Option<GuestMemoryAtomic<GuestMemoryMmap>>,
    started: bool,
    tx_tail: u32,
    tx_clean: u32,
    /// Chains the device has: (head, last ring index of the chain).
    tx_heads: VecDeque<(u16, u32)>,
    rx_tail: u32,
    rx_clean: u32,
    /// Posted guest receive buffers in ring order: (head, buffer GPA).
    rx_bufs: VecDeque<(u16, u64)>,
    irq: EventFd,
    /// Ends the library's vring thread when the session ends.
    exit: EventFd,
    stats: GuestStats,
}

impl GuestNet {
    fn tx_ring(&self) -> u64 {
        self.port.ring_area
    }

    fn rx_ring(&self) -> u64 {
        self.port.ring_area + 4096
    }

    /// Bounce slot `i`: TX first, then RX (bounce mode only).
    fn bounce(&self, rx: bool, i: u32) -> u64 {
        self.port.ring_area + 8192 + (u64::from(rx) * u64::from(RING) + u64::from(i % RING)) * BUF as u64
    }

    fn desc(&self, ring: u64, idx: u32) -> Desc {
        self.port.seg.desc(ring, RING, idx)
    }

    fn set_desc(&self, ring: u64, idx: u32, d: Desc) {
        self.port.seg.set_desc(ring, RING, idx, d)
    }

    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        for i in 0..RING {
            self.set_desc(self.tx_ring(), i, Desc::default());
            self.set_desc(self.rx_ring(), i, Desc::default());
        }
        std::sync::atomic::fence(Ordering::Release);
        (self.port.write_regs)(&regs::bring_up(self.tx_ring(), self.rx_ring(), RING, &self.port.handles));
        info!("guest network: the function's rings are set up ({:?} mode)", self.port.mode);
    }

    /// The segment offset (= DVA) of guest range `[gpa, gpa + len)`, if
    /// one region backed by the segment holds it.
    fn dva(&self, mem: &GuestMemoryMmap, gpa: u64, len: u64) -> Option<u64> {
        let r = mem.find_region(GuestAddress(gpa))?;
        let start = r.start_addr().0;
        if gpa + len > start + r.len() {
            return None;
        }
        let fo = r.file_offset()?;
        let st = nix::sys::stat::fstat(fo.file().as_raw_fd()).ok()?;
        if (st.st_dev, st.st_ino) != self.port.seg_ino {
            return None;
        }
        Some(fo.start() + (gpa - start))
    }

    fn memory(&self) -> Option<vm_memory::GuestMemoryLoadGuard<GuestMemoryMmap>> {
        self.mem.as_ref().map(|m| m.memory())
    }

    /// Post the guest's receive buffers to the function while it has room.
    fn post_rx(&mut self, vq: &VringRwLock) {
        let Some(mem) = self.memory() else { return };
        let mut posted = false;
        let mut dropped = Vec::new();
        while self.rx_tail.wrapping_sub(self.rx_clean) < RING {
            let Some(chain) = vq.get_mut().get_queue_mut().pop_descriptor_chain(&*mem) else { break };
            let head = chain.head_index();
            let first = chain.clone().next();
            let usable = first.filter(|d| d.is_write_only() && d.len() as usize >= HDR + 64);
            let Some(d) = usable else {
                dropped.push(head);
                continue;
            };
            let gpa = d.addr().0;
            let cap = (d.len() as usize - HDR).min(MAX_FRAME) as u32;
            let addr = match self.port.mode {
                Mode::ZeroCopy => {
                    match self.dva(&mem, gpa + HDR as u64, u64::from(cap)) {
                        Some(a) => a,
                        None => {
                            warn!("guest network: a receive buffer at GPA {gpa:#x} is not in the VM memory segment; dropped");
                            dropped.push(head);
                            continue;
                        }
                    }
                }
                Mode::Bounce => self.bounce(true, self.rx_tail),
            };
            self.set_desc(
                self.rx_ring(),
                self.rx_tail,
                Desc { addr, len: if self.port.mode == Mode::Bounce { BUF as u32 } else { cap }, status: 0 },
            );
            self.rx_bufs.push_back((head, gpa));
            self.rx_tail = self.rx_tail.wrapping_add(1);
            posted = true;
        }
        for h in dropped {
            let _ = vq.add_used(h, 0);
        }
        if posted {
            std::sync::atomic::fence(Ordering::Release);
            (self.port.write_regs)(&[(regs::RX_TAIL, u64::from(self.rx_tail))]);
        }
    }

    /// Hand received frames to the guest.
    fn complete_rx(&mut self, vq: &VringRwLock) {
        let Some(mem) = self.memory() else { return };
        let mut any = false;
        while self.rx_clean != self.rx_tail {
            let d = self.desc(self.rx_ring(), self.rx_clean);
            if d.status & DD == 0 {
                break;
            }
            let (head, gpa) = self.rx_bufs.pop_front().expect("one buffer per posted descriptor");
            let mut used = 0;
            if d.status & ERR != 0 {
                self.stats.errors += 1;
            } else {
                let n = (d.len as usize).min(MAX_FRAME);
                if self.port.mode == Mode::Bounce {
                    let mut frame = vec![0u8; n];
                    let ok = self.port.seg.read(self.bounce(true, self.rx_clean), &mut frame).is_ok()
                        && mem.write_slice(&frame, GuestAddress(gpa + HDR as u64)).is_ok();
                    self.stats.copies += u64::from(ok);
                }
                // num_buffers = 1; no offloads were offered, so no flags.
                let mut hdr = [0u8; HDR];
                hdr[10] = 1;
                if mem.write_slice(&hdr, GuestAddress(gpa)).is_ok() {
                    used = (HDR + n) as u32;
                    self.stats.rx += 1;
                }
            }
            let _ = vq.add_used(head, used);
            self.rx_clean = self.rx_clean.wrapping_add(1);
            any = true;
        }
        if any {
            let _ = vq.signal_used_queue();
        }
    }

    /// Give the function the guest's transmit chains while it has room.
    fn transmit(&mut self, vq: &VringRwLock) {
        let Some(mem) = self.memory() else { return };
        let mut posted = false;
        let mut dropped = Vec::new();
        let mut pushes = Vec::new();
        while RING - self.tx_tail.wrapping_sub(self.tx_clean) >= MAX_FRAGS as u32 {
            let Some(chain) = vq.get_mut().get_queue_mut().pop_descriptor_chain(&*mem) else { break };
            let head = chain.head_index();
            // The frame: the chain's readable bytes after the header.
            let mut pieces = Vec::new();
            let mut skip = HDR as u64;
            for d in chain.readable() {
                let (mut a, mut l) = (d.addr().0, u64::from(d.len()));
                let s = skip.min(l);
                (a, l, skip) = (a + s, l - s, skip - s);
                if l > 0 {
                    pieces.push((a, l));
                }
            }
            let total: u64 = pieces.iter().map(|p| p.1).sum();
            if pieces.is_empty() || total > MAX_FRAME as u64 || pieces.len() > MAX_FRAGS {
                dropped.push(head);
                continue;
            }
            let descs: Option<Vec<(u64, u32)>> = match self.port.mode {
                Mode::ZeroCopy => pieces.iter().map(|&(a, l)| self.dva(&mem, a, l).map(|d| (d, l as u32))).collect(),
                Mode::Bounce => {
                    let mut frame = Vec::with_capacity(total as usize);
                    let ok = pieces.iter().all(|&(a, l)| {
                        let at = frame.len();
                        frame.resize(at + l as usize, 0);
                        mem.read_slice(&mut frame[at..], GuestAddress(a)).is_ok()
                    });
                    let slot = self.bounce(false, self.tx_tail);
                    (ok && self.port.seg.write(slot, &frame).is_ok()).then(|| {
                        self.stats.copies += 1;
                        vec![(slot, total as u32)]
                    })
                }
            };
            let Some(descs) = descs else {
                warn!("guest network: a transmit buffer is not in the VM memory segment; dropped");
                dropped.push(head);
                continue;
            };
            let n = descs.len();
            for (k, (addr, len)) in descs.into_iter().enumerate() {
                let more = if k + 1 < n { MORE } else { 0 };
                let d = Desc { addr, len, status: more };
                self.set_desc(self.tx_ring(), self.tx_tail, d);
                // Pushed too (the low-latency queue), a small frame with
                // its bytes: the device need not read the ring back.
                let small = (n == 1 && len as usize <= regs::INLINE_MAX).then(|| {
                    let mut b = vec![0u8; len as usize];
                    self.port.seg.read(addr, &mut b).ok().map(|()| b)
                });
                match small.flatten() {
                    Some(bytes) => regs::push_frame(d, &bytes, &mut pushes),
                    None => pushes.push((regs::TX_PUSH, regs::push(d, false))),
                }
                self.tx_tail = self.tx_tail.wrapping_add(1);
            }
            self.tx_heads.push_back((head, self.tx_tail.wrapping_sub(1)));
            self.stats.tx += 1;
            posted = true;
        }
        self.stats.dropped += dropped.len() as u64;
        for h in &dropped {
            let _ = vq.add_used(*h, 0);
        }
        if posted {
            std::sync::atomic::fence(Ordering::Release);
            pushes.push((regs::TX_TAIL, u64::from(self.tx_tail)));
            (self.port.write_regs)(&pushes);
        }
        if !dropped.is_empty() {
            let _ = vq.signal_used_queue();
        }
    }

    fn complete_tx(&mut self, vq: &VringRwLock) {
        let mut any = false;
        while let Some(&(head, last)) = self.tx_heads.front() {
            let d = self.desc(self.tx_ring(), last);
            if d.status & DD == 0 {
                break;
            }
            if d.status & ERR != 0 {
                self.stats.errors += 1;
            }
            self.tx_heads.pop_front();
            let _ = vq.add_used(head, 0);
            self.tx_clean = last.wrapping_add(1);
            any = true;
        }
        if any {
            let _ = vq.signal_used_queue();
        }
    }
}

impl VhostUserBackendMut for GuestNet {
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        2
    }

    fn max_queue_size(&self) -> usize {
        256
    }

    fn features(&self) -> u64 {
        // No offloads: frames are at most MAX_FRAME, as the function moves.
        // QEMU's vhost-user-net will not start without protocol features.
        (1 << virtio_bindings::virtio_config::VIRTIO_F_VERSION_1) | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::empty()
    }

    fn set_event_idx(&mut self, _enabled: bool) {}

    fn exit_event(&self, _thread_index: usize) -> Option<EventFd> {
        self.exit.try_clone().ok()
    }

    fn update_memory(&mut self, mem: GuestMemoryAtomic<GuestMemoryMmap>) -> std::io::Result<()> {
        for r in mem.memory().iter() {
            log::debug!(
                "guest memory: GPA {:#x} +{:#x} file offset {:?}",
                r.start_addr().0,
                r.len(),
                r.file_offset().map(|f| f.start())
            );
        }
        self.mem = Some(mem);
        Ok(())
    }

    fn handle_event(
        &mut self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock],
        _thread_id: usize,
    ) -> std::io::Result<()> {
        log::debug!("guest network: event {device_event}");
        self.start();
        let (rx, tx) = (&vrings[RXQ as usize], &vrings[TXQ as usize]);
        match device_event {
            RXQ => self.post_rx(rx),
            TXQ => self.transmit(tx),
            IRQ_EVENT => {
                let _ = self.irq.read();
                self.stats.irqs += 1;
            }
            _ => {}
        }
        // Whatever woke us, finish what the device finished and refill.
        self.complete_tx(tx);
        self.complete_rx(rx);
        self.post_rx(rx);
        self.transmit(tx);
        Ok(())
    }
}

/// Serve the guest's virtio-net on `socket` until QEMU disconnects (the
/// caller stops QEMU to end it sooner); `irq` is signalled for every
/// interrupt of the function.
pub fn serve(socket: &Path, port: Port, irq: EventFd) -> Result<GuestStats> {
    let backend = Arc::new(RwLock::new(GuestNet {
        port,
        mem: None,
        started: false,
        tx_tail: 0,
        tx_clean: 0,
        tx_heads: VecDeque::new(),
        rx_tail: 0,
        rx_clean: 0,
        rx_bufs: VecDeque::new(),
        irq: irq.try_clone()?,
        exit: EventFd::new(libc::EFD_NONBLOCK)?,
        stats: GuestStats::default(),
    }));
    let mut daemon =
        VhostUserDaemon::new("vsci-guest-net".into(), backend.clone(), GuestMemoryAtomic::new(GuestMemoryMmap::new()))
            .map_err(|e| anyhow!("vhost-user daemon: {e:?}"))?;
    for h in daemon.get_epoll_handlers() {
        h.register_listener(irq.as_raw_fd(), EventSet::IN, u64::from(IRQ_EVENT))
            .map_err(|e| anyhow!("cannot listen for the function's interrupts: {e}"))?;
    }
    let _ = std::fs::remove_file(socket);
    let inner = socket.with_extension("backend");
    let _ = std::fs::remove_file(&inner);
    let public = std::os::unix::net::UnixListener::bind(socket)
        .map_err(|e| anyhow!("cannot listen on {}: {e}", socket.display()))?;
    {
        let inner = inner.clone();
        std::thread::Builder::new().name("vsci-vu-relay".into()).spawn(move || {
            if let Err(e) = relay(public, &inner) {
                warn!("guest network: the vhost-user relay ended: {e}");
            }
        })?;
    }
    // Binds, serves the one connection (the relay's), and tells the vring
    // thread to end when it goes.
    match daemon.serve(&inner) {
        Ok(()) => info!("guest network: QEMU disconnected"),
        Err(e) => warn!("guest network: the vhost-user session ended: {e:?}"),
    }
    let _ = std::fs::remove_file(socket);
    let _ = std::fs::remove_file(&inner);
    let stats = backend.read().unwrap_or_else(|p| p.into_inner()).stats;
    Ok(stats)
}

/// Between QEMU and the protocol library: QEMU 7.2's virtio-net sends
/// SET_VRING_ENABLE when it attaches, before SET_FEATURES, and never again
/// when it starts the device; the library ends the session on such an
/// early request (it wants the protocol-features bit acked first). So an
/// early request is answered here, and its last state per ring is passed
/// on right after SET_FEATURES; everything else, descriptors included,
/// passes through unchanged.
fn relay(public: std::os::unix::net::UnixListener, inner: &Path) -> std::io::Result<()> {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    const SET_FEATURES: u32 = 2;
    const SET_VRING_ENABLE: u32 = 18;
    const NEED_REPLY: u32 = 1 << 3;
    const REPLY: u32 = 1 << 2;
    const VERSION: u32 = 1;
    let (qemu, _) = public.accept()?;
    let mut backend = loop {
        match UnixStream::connect(inner) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    };
    // Answers from the library go back as they are.
    {
        let (mut from, mut to) = (backend.try_clone()?, qemu.try_clone()?);
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Both);
        });
    }
    let mut features_set = false;
    let mut early: std::collections::BTreeMap<u32, Vec<u8>> = std::collections::BTreeMap::new();
    let mut q = qemu.try_clone()?;
    loop {
        // A message: 12-byte header (request, flags, size) then the body;
        // descriptors ride with the header's bytes.
        let mut hdr = [0u8; 12];
        let mut space = nix::cmsg_space!([RawFd; 8]);
        // The descriptors that came with it, owned from here on: closed
        // when dropped, on every way out of this loop.
        let (n, fds) = {
            let mut iov = [std::io::IoSliceMut::new(&mut hdr)];
            let flags = nix::sys::socket::MsgFlags::MSG_WAITALL | nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC;
            let m = nix::sys::socket::recvmsg::<()>(qemu.as_raw_fd(), &mut iov, Some(&mut space), flags)?;
            let fds: Vec<OwnedFd> = m
                .cmsgs()?
                .flat_map(|c| match c {
                    nix::sys::socket::ControlMessageOwned::ScmRights(f) => f,
                    _ => Vec::new(),
                })
                // SAFETY: SCM_RIGHTS gave us these new descriptors; nothing
                // else in the process knows them.
                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
                .collect();
            (m.bytes, fds)
        };
        if n == 0 {
            let _ = backend.shutdown(std::net::Shutdown::Both);
            return Ok(());
        }
        if n < hdr.len() {
            q.read_exact(&mut hdr[n..])?;
        }
        let req = u32::from_le_bytes(hdr[0..4].try_into().expect("4"));
        let flags = u32::from_le_bytes(hdr[4..8].try_into().expect("4"));
        let size = u32::from_le_bytes(hdr[8..12].try_into().expect("4")) as usize;
        if size > 4096 {
            return Err(std::io::Error::other(format!("a {size}-byte vhost-user message")));
        }
        let mut body = vec![0u8; size];
        q.read_exact(&mut body)?;
        log::debug!("vhost-user request {req} flags {flags:#x} size {size} fds {}", fds.len());
        if req == SET_FEATURES {
            features_set = true;
        }
        if req == SET_VRING_ENABLE && !features_set {
            drop(fds);
            if body.len() == 8 {
                let ring = u32::from_le_bytes(body[0..4].try_into().expect("4"));
                let mut m = req.to_le_bytes().to_vec();
                m.extend_from_slice(&VERSION.to_le_bytes());
                m.extend_from_slice(&8u32.to_le_bytes());
                m.extend_from_slice(&body);
                early.insert(ring, m);
            }
            if flags & NEED_REPLY != 0 {
                let mut r = Vec::with_capacity(20);
                r.extend_from_slice(&req.to_le_bytes());
                r.extend_from_slice(&(VERSION | REPLY).to_le_bytes());
                r.extend_from_slice(&8u32.to_le_bytes());
                r.extend_from_slice(&0u64.to_le_bytes());
                q.write_all(&r)?;
            }
            continue;
        }
        let mut msg = hdr.to_vec();
        msg.extend_from_slice(&body);
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&raw)];
        let cm: &[nix::sys::socket::ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
        nix::sys::socket::sendmsg::<()>(
            backend.as_raw_fd(),
            &[std::io::IoSlice::new(&msg)],
            cm,
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            None,
        )?;
        // Passed on (the backend has its own copies): ours close here.
        drop(fds);
        if req == SET_FEATURES {
            for (_, m) in std::mem::take(&mut early) {
                backend.write_all(&m)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::{UnixListener, UnixStream};

    use super::*;

    /// A message the relay refuses (too long) ends it; the descriptor that
    /// came with it is closed, not leaked: the pipe it is the write end of
    /// reads end-of-file once ours is closed too.
    #[test]
    fn the_descriptors_of_a_refused_message_are_closed() {
        let dir = std::env::temp_dir().join(format!("vsci-vhost-relay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (public_path, inner_path) = (dir.join("public"), dir.join("inner"));
        let public = UnixListener::bind(&public_path).unwrap();
        let inner = UnixListener::bind(&inner_path).unwrap();
        let relay = std::thread::spawn(move || relay(public, &inner_path));
        let qemu = UnixStream::connect(&public_path).unwrap();
        let (_backend, _) = inner.accept().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut hdr = Vec::new();
        for word in [1u32, 1, 8192] {
            hdr.extend_from_slice(&word.to_le_bytes());
        }
        let fds = [w.as_raw_fd()];
        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
        nix::sys::socket::sendmsg::<()>(
            qemu.as_raw_fd(),
            &[std::io::IoSlice::new(&hdr)],
            &cmsg,
            nix::sys::socket::MsgFlags::empty(),
            None,
        )
        .unwrap();
        drop(w);
        assert!(relay.join().unwrap().is_err(), "an 8192-byte message is refused");
        nix::fcntl::fcntl(r.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(nix::unistd::read(r.as_raw_fd(), &mut b), Ok(0), "the relay still holds the write end");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
