//! The guest side of the control channel: libsisci inside a QEMU guest
//! talks to its host side through a session of the vsci guest driver
//! (guest/driver/vsci_guest.h) instead of vscid's socket.
//!
//! Requests are the same `Request`s a host client sends, plus the few only
//! the host side answers (`vsci_proto::guest::GuestRequest`: fetches and
//! shipments for maps of other nodes' segments, [`AgentPath`]; DMA on the
//! node's engine). Replies come as [`AgentRecord`]s whose attachments
//! stand for descriptors; each is turned into a real descriptor here, so
//! the rest of the library does not care where it runs: a segment window
//! (`/dev/vsci-winS`) is mmapped like a memfd, a vector file is read and
//! polled like an eventfd, a doorbell file is written like one.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};
use vsci_proto::guest::{self, AgentRecord, Attachment, GuestRequest, RingError, Role, Session, ToGuest};
use vsci_proto::wire::Received;

use crate::conn::Incoming;

/// How a guest program's maps of another node's segment reach the owner:
/// through the guest's host side, staging bytes in the segment's window
/// (which QEMU shows the guest; the host side maps the same memory).
pub(crate) struct AgentPath {
    client: crate::Client,
    conn: vsci_proto::ObjId,
    window: vsci_sys::Mapping,
    size: u64,
    /// Held while bytes are staged in the window and moved: every map of
    /// the segment shares the window.
    staging: Mutex<()>,
}

impl AgentPath {
    /// Map segment connection `conn`'s window (`fd`, `size` bytes).
    pub(crate) fn new(
        client: crate::Client,
        conn: vsci_proto::ObjId,
        fd: BorrowedFd,
        size: u64,
    ) -> crate::Result<AgentPath> {
        let len = usize::try_from(size).map_err(|_| vsci_proto::SciError::OutOfRange)?.div_ceil(4096) * 4096;
        if len == 0 {
            return Err(vsci_proto::SciError::IllegalParameter);
        }
        let window = vsci_sys::MapOptions::shared().map(fd, len, 0).map_err(|_| vsci_proto::SciError::Nospc)?;
        Ok(AgentPath { client, conn, window, size, staging: Mutex::new(()) })
    }

    fn check(&self, off: u64, len: usize) -> crate::Result<usize> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(off as usize),
            _ => Err(vsci_proto::SciError::OutOfRange),
        }
    }

    /// The owner's bytes at segment offset `off` into `buf`: the host side
    /// reads them into the window, a piece at a time, and we copy them out.
    pub(crate) fn read(&self, buf: &mut [u8], off: u64) -> crate::Result<()> {
        let at = self.check(off, buf.len())?;
        let _g = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let step = guest::MAX_REMOTE_FETCH as usize;
        for (i, chunk) in buf.chunks_mut(step).enumerate() {
            let o = at + i * step;
            self.client.call_host_side(GuestRequest::FetchRemote {
                conn: self.conn,
                offset: o as u64,
                len: chunk.len() as u64,
            })?;
            // o + chunk.len() <= size <= len (checked); `staging` keeps our
            // own threads off the window. What a misbehaving host side
            // writes there meanwhile is only bytes.
            self.window.read(o, chunk).ok_or(vsci_proto::SciError::OutOfRange)?;
        }
        Ok(())
    }

    /// A shipment of `runs` (ascending; offsets from segment offset
    /// `seg_off`): their bytes are put in the window and the host side
    /// writes them to the owner, the highest word last, in pieces of at
    /// most `MAX_SHIP_RUNS` runs, each delivered before the next is sent.
    pub(crate) fn ship<'a>(
        &self,
        seg_off: u64,
        runs: &[vsci_trap::Run],
        bytes: impl Fn(vsci_trap::Run) -> &'a [u8],
    ) -> crate::Result<()> {
        let _g = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        for piece in runs.chunks(guest::MAX_SHIP_RUNS) {
            let mut sent = Vec::with_capacity(piece.len());
            for &run in piece {
                let data = bytes(run);
                let o = self.check(seg_off + run.0 as u64, data.len())?;
                // Inside the window (checked), see `read`.
                self.window.write(o, data).ok_or(vsci_proto::SciError::OutOfRange)?;
                sent.push((o as u64, data.len() as u64));
            }
            self.client.call_host_side(GuestRequest::ShipRemote { conn: self.conn, runs: sent })?;
        }
        Ok(())
    }
}

/// The control device libsisci uses in a guest.
pub const CTL_DEVICE: &str = "/dev/vsci-ctl0";

/// True when this process runs in a vsci guest (or `VSCI_TRANSPORT` says
/// which to use: `guest` or `socket`).
pub fn in_guest() -> bool {
    match std::env::var("VSCI_TRANSPORT").as_deref() {
        Ok("guest") => true,
        Ok("socket") => false,
        _ => Path::new(CTL_DEVICE).exists(),
    }
}

// guest/driver/vsci_guest.h
#[repr(C)]
#[derive(Default)]
struct VsciSession {
    index: u32,
    generation: u32,
    size: u64,
}

#[repr(C)]
struct VsciRing {
    peer: u32,
    vector: u32,
}

#[repr(C)]
struct VsciInfo {
    kind: u32,
    ivposition: u32,
    vectors: u32,
    regs_mappable: u32,
    regs_size: u64,
    shm_size: u64,
    pci_address: [u8; 32],
}

// VSCI_IOC_MAGIC and the ioctls' numbers (the tests below check the
// request codes, the structures and vsci_proto::guest's layout constants
// against the header).
const IOC_MAGIC: u8 = b'v';
const IOC_INFO: u8 = 0x80;
const IOC_RING: u8 = 0x81;
const IOC_SESSION: u8 = 0x83;
const IOC_BIND_VECTOR: u8 = 0x84;
const IOC_BIND_DOORBELL: u8 = 0x85;

nix::ioctl_read!(ioc_info, IOC_MAGIC, IOC_INFO, VsciInfo);
nix::ioctl_write_ptr!(ioc_ring, IOC_MAGIC, IOC_RING, VsciRing);
nix::ioctl_read!(ioc_session, IOC_MAGIC, IOC_SESSION, VsciSession);
nix::ioctl_write_ptr!(ioc_bind_vector, IOC_MAGIC, IOC_BIND_VECTOR, u32);
nix::ioctl_write_ptr!(ioc_bind_doorbell, IOC_MAGIC, IOC_BIND_DOORBELL, VsciRing);

fn open_ctl() -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(CTL_DEVICE)
}

/// Size of the memory behind `fd`: a memfd's size, or a window's BAR size.
pub fn mem_size(fd: BorrowedFd<'_>) -> Option<u64> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).ok()?;
    if st.st_mode & libc::S_IFMT == libc::S_IFCHR {
        // SAFETY: an all-zero VsciInfo is valid; the ioctl fills it.
        let mut info: VsciInfo = unsafe { std::mem::zeroed() };
        // SAFETY: VSCI_IOC_INFO writes one struct vsci_info, which `info` is.
        unsafe { ioc_info(fd.as_raw_fd(), &mut info) }.ok()?;
        Some(info.shm_size)
    } else {
        Some(st.st_size as u64)
    }
}

/// A session of the guest driver: two rings in a private area of the
/// control region, the host's doorbell, and our vector 0 to sleep on.
pub struct Channel {
    ctl: File,
    vec0: File,
    stop: OwnedFd,
    session: Session,
    /// The session area, which `session` points into (declared after it:
    /// unmapped once the session is gone).
    _area: vsci_sys::Mapping,
    send_lock: Mutex<()>,
}

impl Channel {
    pub fn open() -> std::io::Result<Channel> {
        let ctl = open_ctl()?;
        let mut s = VsciSession::default();
        // SAFETY: VSCI_IOC_SESSION writes one struct vsci_session.
        unsafe { ioc_session(ctl.as_raw_fd(), &mut s) }?;
        if s.size as usize != guest::SESSION_SIZE {
            return Err(std::io::Error::other("the guest driver's session size differs from libsisci's"));
        }
        let area = vsci_sys::MapOptions::shared().map(ctl.as_fd(), guest::SESSION_SIZE, 0)?;
        // SAFETY: the mapping is SESSION_SIZE bytes, page aligned, and lives
        // as long as the channel, which holds it past `session`.
        let session = unsafe { Session::new(area.as_ptr(), Role::Guest) };
        let vec0 = bind_vector(guest::CTL_VECTOR)?;
        let stop: OwnedFd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?.into();
        Ok(Channel { ctl, vec0, stop, session, _area: area, send_lock: Mutex::new(()) })
    }

    fn ring_host(&self) {
        let r = VsciRing { peer: 0, vector: guest::CTL_VECTOR as u32 };
        // SAFETY: VSCI_IOC_RING reads one struct vsci_ring.
        let _ = unsafe { ioc_ring(self.ctl.as_raw_fd(), &r) };
    }

    /// Send one encoded request; waits while the host is behind.
    pub fn send(&self, bytes: &[u8]) -> Result<(), ()> {
        let _g = self.send_lock.lock().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.session.send(bytes) {
                Ok(()) => break,
                Err(RingError::Full) if Instant::now() < deadline => {
                    self.ring_host();
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(_) => return Err(()),
            }
        }
        self.ring_host();
        Ok(())
    }

    /// The next reply or event, with its attachments made descriptors.
    /// Blocks; fails once `shutdown` was called or the channel broke.
    pub(crate) fn recv(&self) -> Result<Incoming, ()> {
        loop {
            drain(self.vec0.as_fd());
            match self.session.recv() {
                Ok(Some(rec)) => {
                    let rec: AgentRecord = postcard::from_bytes(&rec).map_err(|_| ())?;
                    let mut fds = Vec::with_capacity(rec.attachments.len());
                    for a in rec.attachments {
                        fds.push(attach(a).map_err(|e| log::error!("vsci: guest attachment {a:?}: {e}"))?);
                    }
                    return Ok(match rec.msg {
                        ToGuest::Node(bytes) => Incoming::Node(Received { bytes, fds }),
                        ToGuest::DmaDone { queue, status } => Incoming::DmaDone { queue, status },
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    log::error!("vsci: the host wrote a bad record ({e:?}); closing");
                    return Err(());
                }
            }
            let mut pfds = [
                libc::pollfd { fd: self.vec0.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.stop.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: pfds is a live array of two pollfd.
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, -1) };
            if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return Err(());
            }
            if pfds[1].revents != 0 || pfds[0].revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                return Err(());
            }
        }
    }

    /// Make `recv` fail (closing the session itself happens when the last
    /// descriptor of the control file goes, which the driver reports).
    pub fn shutdown(&self) {
        let _ = nix::unistd::write(self.stop.as_fd(), &1u64.to_ne_bytes());
    }
}

fn drain(fd: BorrowedFd<'_>) {
    let mut b = [0u8; 8];
    let _ = nix::unistd::read(fd.as_raw_fd(), &mut b);
}

fn bind_vector(v: u16) -> std::io::Result<File> {
    let f =
        OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK).open(CTL_DEVICE)?;
    let v = v as u32;
    // SAFETY: VSCI_IOC_BIND_VECTOR reads one u32.
    unsafe { ioc_bind_vector(f.as_raw_fd(), &v) }?;
    Ok(f)
}

/// The window device for PCI slot `slot`.
pub fn window_path(slot: u8) -> PathBuf {
    PathBuf::from(format!("/dev/vsci-win{slot}"))
}

/// Turn an attachment into the descriptor it stands for.
fn attach(a: Attachment) -> std::io::Result<OwnedFd> {
    match a {
        Attachment::Window { slot, size } => {
            // The host replies once QEMU has the device; the guest's hot-plug
            // handler and our driver's probe may still be on their way.
            let path = window_path(slot);
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(&path) {
                    Ok(f) => {
                        let fd: OwnedFd = f.into();
                        if mem_size(fd.as_fd()) == Some(size) {
                            return Ok(fd);
                        }
                        // the window that was at this slot before is still going
                    }
                    // EACCES too: devtmpfs makes the node and sets its mode
                    // (0666, the driver's devnode) in two steps, and an
                    // ordinary user's open in between is refused (seen
                    // under load: a uid 1000 program's interrupt connect
                    // failed).
                    Err(e) if Instant::now() < deadline && e.kind() == std::io::ErrorKind::PermissionDenied => {}
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound && e.raw_os_error() != Some(libc::ENODEV) => {
                        return Err(e)
                    }
                    Err(_) => {}
                }
                if Instant::now() >= deadline {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("{} did not appear", path.display()),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Attachment::Vector(v) => Ok(bind_vector(v)?.into()),
        Attachment::Doorbell { peer, vector } => {
            let f = open_ctl()?;
            let r = VsciRing { peer: peer as u32, vector: vector as u32 };
            // SAFETY: VSCI_IOC_BIND_DOORBELL reads one struct vsci_ring.
            unsafe { ioc_bind_doorbell(f.as_raw_fd(), &r) }?;
            Ok(f.into())
        }
    }
}

#[cfg(test)]
mod c_header {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// The ioctls and structures above, and vsci_proto::guest's control
    /// region layout, as guest/driver/vsci_guest.h defines them.
    #[test]
    fn ioctls_structures_and_layout_match_vsci_guest_h() {
        let owned: Vec<(String, u64)> = vec![
            ("VSCI_IOC_INFO".into(), nix::request_code_read!(IOC_MAGIC, IOC_INFO, size_of::<VsciInfo>()) as u64),
            ("VSCI_IOC_RING".into(), nix::request_code_write!(IOC_MAGIC, IOC_RING, size_of::<VsciRing>()) as u64),
            (
                "VSCI_IOC_SESSION".into(),
                nix::request_code_read!(IOC_MAGIC, IOC_SESSION, size_of::<VsciSession>()) as u64,
            ),
            (
                "VSCI_IOC_BIND_VECTOR".into(),
                nix::request_code_write!(IOC_MAGIC, IOC_BIND_VECTOR, size_of::<u32>()) as u64,
            ),
            (
                "VSCI_IOC_BIND_DOORBELL".into(),
                nix::request_code_write!(IOC_MAGIC, IOC_BIND_DOORBELL, size_of::<VsciRing>()) as u64,
            ),
            ("sizeof(struct vsci_info)".into(), size_of::<VsciInfo>() as u64),
            ("offsetof(struct vsci_info, kind)".into(), offset_of!(VsciInfo, kind) as u64),
            ("offsetof(struct vsci_info, ivposition)".into(), offset_of!(VsciInfo, ivposition) as u64),
            ("offsetof(struct vsci_info, vectors)".into(), offset_of!(VsciInfo, vectors) as u64),
            ("offsetof(struct vsci_info, regs_mappable)".into(), offset_of!(VsciInfo, regs_mappable) as u64),
            ("offsetof(struct vsci_info, regs_size)".into(), offset_of!(VsciInfo, regs_size) as u64),
            ("offsetof(struct vsci_info, shm_size)".into(), offset_of!(VsciInfo, shm_size) as u64),
            ("offsetof(struct vsci_info, pci_address)".into(), offset_of!(VsciInfo, pci_address) as u64),
            ("sizeof(((struct vsci_info *)0)->pci_address)".into(), 32),
            ("sizeof(struct vsci_ring)".into(), size_of::<VsciRing>() as u64),
            ("offsetof(struct vsci_ring, peer)".into(), offset_of!(VsciRing, peer) as u64),
            ("offsetof(struct vsci_ring, vector)".into(), offset_of!(VsciRing, vector) as u64),
            ("sizeof(struct vsci_session)".into(), size_of::<VsciSession>() as u64),
            ("offsetof(struct vsci_session, index)".into(), offset_of!(VsciSession, index) as u64),
            ("offsetof(struct vsci_session, generation)".into(), offset_of!(VsciSession, generation) as u64),
            ("offsetof(struct vsci_session, size)".into(), offset_of!(VsciSession, size) as u64),
            ("VSCI_CTL_MAGIC".into(), u64::from(guest::MAGIC)),
            ("VSCI_CTL_WINDOWS".into(), guest::WINDOWS_OFFSET as u64),
            ("VSCI_CTL_MAX_WINDOWS".into(), guest::MAX_WINDOWS as u64),
            ("VSCI_CTL_SESSIONS".into(), guest::SESSIONS_OFFSET as u64),
            ("VSCI_CTL_MAX_SESSIONS".into(), guest::MAX_SESSIONS as u64),
            ("VSCI_SESSION_SIZE".into(), guest::SESSION_SIZE as u64),
            ("VSCI_CTL_SESSION_AREA(5)".into(), guest::session_offset(5) as u64),
            (format!("VSCI_CTL_MIN_SIZE <= {}ULL", guest::REGION_SIZE), 1),
            ("VSCI_SESSION_FREE".into(), u64::from(guest::SESSION_FREE)),
            ("VSCI_SESSION_OPEN".into(), u64::from(guest::SESSION_OPEN)),
            ("VSCI_SESSION_CLOSING".into(), u64::from(guest::SESSION_CLOSING)),
            ("VSCI_CTL_VECTOR".into(), u64::from(guest::CTL_VECTOR)),
        ];
        let pairs: Vec<(&str, u64)> = owned.iter().map(|(e, v)| (e.as_str(), *v)).collect();
        vsci_cprobe::check(&[vsci_cprobe::workspace().join("guest/driver")], &["vsci_guest.h"], &pairs);
    }
}
