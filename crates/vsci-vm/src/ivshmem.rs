//! A server for QEMU's ivshmem-doorbell protocol (QEMU docs/specs/ivshmem-spec.rst),
//! written to be embedded in vscid.
//!
//! Every message is one little-endian i64, sometimes with one descriptor
//! (SCM_RIGHTS), server to client only. On connect the server sends:
//! the protocol version 0; the client's id; -1 with the shared-memory fd;
//! for every peer the client may ring, that peer's id once per vector with
//! the peer's eventfd for that vector; then the client's own id once per
//! vector with its own eventfds (QEMU turns them into MSI-X vectors). Later, a
//! peer id with an fd announces a new peer, a peer id without one says that
//! peer is gone.
//!
//! Unlike QEMU's example server, this one
//! - can be a peer itself (`host_peer`): it keeps eventfds of its own, so
//!   guests ring the node (id 0) and the node rings guests ([`Server::notify`]);
//! - gives each client the shared memory its `shm` callback returns, so every
//!   guest can get a private control region;
//! - tells guests about each other only when `announce_peers` is set: with it
//!   off, a guest can ring the node and nobody else.
//!
//! Clients never send anything; a readable or hung-up client socket means the
//! client went away (QEMU exited or the device was unplugged).

use std::collections::BTreeMap;
use std::io::{self, IoSlice, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

/// Largest vector count (QEMU's example server has the same limit).
pub const MAX_VECTORS: u16 = 64;
/// The id the server takes when it is a peer itself.
pub const HOST_ID: u16 = 0;

/// How a server behaves.
#[derive(Clone, Debug)]
pub struct Config {
    /// Vectors per peer (1..=64); give QEMU's device the same `vectors=`.
    pub vectors: u16,
    /// The server is peer [`HOST_ID`] with eventfds of its own.
    pub host_peer: bool,
    /// Tell every client about every other client (QEMU's example server does).
    pub announce_peers: bool,
    /// Most clients at once.
    pub max_clients: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { vectors: 4, host_peer: true, announce_peers: false, max_clients: 256 }
    }
}

/// What happened to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Connected(u16),
    Disconnected(u16),
}

type ShmFn = dyn Fn(u16) -> io::Result<OwnedFd> + Send + Sync;

struct Peer {
    sock: UnixStream,
    vectors: Vec<OwnedFd>,
}

struct State {
    clients: BTreeMap<u16, Peer>,
    next_id: u32,
}

/// A running server: a thread accepting clients on a UNIX socket.
pub struct Server {
    path: PathBuf,
    cfg: Config,
    state: Arc<Mutex<State>>,
    host_vectors: Arc<Vec<OwnedFd>>,
    events: Receiver<Event>,
    stop: OwnedFd,
    /// Rung after a client is dropped from outside the worker: its poll()
    /// holds a reference to the client's socket, which closes (and the client
    /// sees end-of-file) only once poll returns.
    wake: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

fn eventfd() -> io::Result<OwnedFd> {
    vsci_sys::eventfd::new()
}

/// Write 1 to an eventfd: how one peer rings another.
pub fn ring(fd: BorrowedFd) -> io::Result<()> {
    vsci_sys::eventfd::write(fd, 1)
}

/// Read and reset an eventfd's counter; 0 if nothing was pending.
pub fn drain(fd: BorrowedFd) -> io::Result<u64> {
    vsci_sys::eventfd::read(fd)
}

/// Wait until `fd` is readable, at most `timeout`; true if it is.
pub fn wait_readable(fd: BorrowedFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n > 0)
}

fn send(sock: &UnixStream, value: i64, fd: Option<RawFd>) -> io::Result<()> {
    let bytes = value.to_le_bytes();
    let iov = [IoSlice::new(&bytes)];
    let fds;
    let cmsg: Vec<ControlMessage> = match fd {
        Some(f) => {
            fds = [f];
            vec![ControlMessage::ScmRights(&fds)]
        }
        None => Vec::new(),
    };
    let n = sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None).map_err(io::Error::from)?;
    if n != 8 {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short write to ivshmem client"));
    }
    Ok(())
}

impl Server {
    /// Listen on `path` (an existing socket file there is replaced) and serve
    /// in a thread. `shm(id)` gives the shared memory for client `id`.
    pub fn start(
        path: &Path,
        cfg: Config,
        shm: impl Fn(u16) -> io::Result<OwnedFd> + Send + Sync + 'static,
    ) -> io::Result<Server> {
        if cfg.vectors == 0 || cfg.vectors > MAX_VECTORS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("vectors must be 1..={MAX_VECTORS}")));
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        let host_vectors = if cfg.host_peer {
            (0..cfg.vectors).map(|_| eventfd()).collect::<io::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let host_vectors = Arc::new(host_vectors);
        let state = Arc::new(Mutex::new(State {
            clients: BTreeMap::new(),
            next_id: if cfg.host_peer { HOST_ID as u32 + 1 } else { 0 },
        }));
        let stop = eventfd()?;
        let wake = eventfd()?;
        let (tx, rx) = mpsc::channel();
        let worker = Worker {
            listener,
            cfg: cfg.clone(),
            state: state.clone(),
            host_vectors: host_vectors.clone(),
            shm: Box::new(shm),
            events: tx,
            stop: stop.try_clone()?,
            wake: wake.try_clone()?,
        };
        let thread = std::thread::Builder::new().name("ivshmem-server".into()).spawn(move || worker.run())?;
        Ok(Server { path: path.to_path_buf(), cfg, state, host_vectors, events: rx, stop, wake, thread: Some(thread) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The eventfd that becomes readable when a client rings (HOST_ID, vector).
    pub fn host_vector(&self, vector: u16) -> Option<BorrowedFd<'_>> {
        self.host_vectors.get(vector as usize).map(|f| f.as_fd())
    }

    /// Ids of the connected clients.
    pub fn peers(&self) -> Vec<u16> {
        self.state.lock().unwrap().clients.keys().copied().collect()
    }

    /// Raise `vector` in client `peer` (an MSI-X interrupt in its guest).
    pub fn notify(&self, peer: u16, vector: u16) -> io::Result<()> {
        let st = self.state.lock().unwrap();
        let p = st
            .clients
            .get(&peer)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no ivshmem peer {peer}")))?;
        let fd = p
            .vectors
            .get(vector as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no vector {vector}")))?;
        ring(fd.as_fd())
    }

    /// A copy of client `peer`'s own eventfd for `vector`: whoever writes it
    /// raises that MSI-X vector in the guest, with no server in between.
    pub fn client_vector(&self, peer: u16, vector: u16) -> io::Result<OwnedFd> {
        let st = self.state.lock().unwrap();
        let p = st
            .clients
            .get(&peer)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no ivshmem peer {peer}")))?;
        let fd = p
            .vectors
            .get(vector as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no vector {vector}")))?;
        fd.try_clone()
    }

    /// Tell client `client` about a peer `peer` that is not a QEMU: its
    /// vectors are `fds` (at most the device's vector count). A doorbell the
    /// guest rings at (peer, v) then writes `fds[v]` directly. `peer` must
    /// not be a real client's id or [`HOST_ID`].
    pub fn add_virtual_peer(&self, client: u16, peer: u16, fds: &[BorrowedFd]) -> io::Result<()> {
        let st = self.state.lock().unwrap();
        if peer == HOST_ID || st.clients.contains_key(&peer) || fds.len() > self.cfg.vectors as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad virtual peer {peer}")));
        }
        let c = st
            .clients
            .get(&client)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no ivshmem peer {client}")))?;
        for fd in fds {
            send(&c.sock, peer as i64, Some(fd.as_raw_fd()))?;
        }
        Ok(())
    }

    /// Withdraw a virtual peer: QEMU closes its copies of the eventfds.
    pub fn remove_virtual_peer(&self, client: u16, peer: u16) -> io::Result<()> {
        let st = self.state.lock().unwrap();
        let c = st
            .clients
            .get(&client)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no ivshmem peer {client}")))?;
        send(&c.sock, peer as i64, None)
    }

    /// Drop client `peer` (its QEMU keeps the device, with no server behind
    /// it: doorbells to the node go nowhere). Other clients are told when
    /// `announce_peers` is set. False if there was no such client.
    pub fn disconnect(&self, peer: u16) -> bool {
        let mut st = self.state.lock().unwrap();
        if st.clients.remove(&peer).is_none() {
            return false;
        }
        if self.cfg.announce_peers {
            for p in st.clients.values() {
                let _ = send(&p.sock, peer as i64, None);
            }
        }
        drop(st);
        let _ = ring(self.wake.as_fd());
        true
    }

    /// The next connect/disconnect, waiting at most `timeout`.
    pub fn next_event(&self, timeout: Duration) -> Option<Event> {
        self.events.recv_timeout(timeout).ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = ring(self.stop.as_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

struct Worker {
    listener: UnixListener,
    cfg: Config,
    state: Arc<Mutex<State>>,
    host_vectors: Arc<Vec<OwnedFd>>,
    shm: Box<ShmFn>,
    events: Sender<Event>,
    stop: OwnedFd,
    wake: OwnedFd,
}

impl Worker {
    fn run(self) {
        loop {
            // poll: [stop, listener, wake, clients...]
            let ids: Vec<u16>;
            let mut pfds = vec![
                libc::pollfd { fd: self.stop.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            {
                let st = self.state.lock().unwrap();
                ids = st.clients.keys().copied().collect();
                for p in st.clients.values() {
                    pfds.push(libc::pollfd { fd: p.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 });
                }
            }
            // SAFETY: pfds is a live array of pollfd of the given length.
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, -1) };
            if n < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                log::error!("ivshmem server: poll: {}", io::Error::last_os_error());
                return;
            }
            if pfds[0].revents != 0 {
                return;
            }
            if pfds[2].revents != 0 {
                let _ = drain(self.wake.as_fd());
            }
            for (i, id) in ids.iter().enumerate() {
                if pfds[i + 3].revents != 0 {
                    self.client_event(*id);
                }
            }
            if pfds[1].revents != 0 {
                loop {
                    match self.listener.accept() {
                        Ok((s, _)) => self.accept(s),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            log::warn!("ivshmem server: accept: {e}");
                            break;
                        }
                    }
                }
            }
        }
    }

    /// A client socket is readable or hung up. QEMU never writes, so anything
    /// readable is either end-of-file or a protocol violation: drop it.
    fn client_event(&self, id: u16) {
        let mut buf = [0u8; 64];
        let gone = {
            let st = self.state.lock().unwrap();
            match st.clients.get(&id) {
                Some(p) => match (&p.sock).read(&mut buf) {
                    Ok(0) => true,
                    Ok(n) => {
                        log::warn!("ivshmem server: client {id} sent {n} bytes (clients must not send); dropping it");
                        true
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                    Err(_) => true,
                },
                None => false,
            }
        };
        if gone {
            self.remove(id);
        }
    }

    fn remove(&self, id: u16) {
        let mut st = self.state.lock().unwrap();
        if st.clients.remove(&id).is_none() {
            return;
        }
        if self.cfg.announce_peers {
            for p in st.clients.values() {
                let _ = send(&p.sock, id as i64, None);
            }
        }
        drop(st);
        log::info!("ivshmem server: client {id} disconnected");
        let _ = self.events.send(Event::Disconnected(id));
    }

    fn accept(&self, sock: UnixStream) {
        let id = {
            let mut st = self.state.lock().unwrap();
            if st.clients.len() >= self.cfg.max_clients {
                log::warn!("ivshmem server: {} clients already; refusing another", st.clients.len());
                return;
            }
            let mut id = None;
            for _ in 0..=u16::MAX as u32 {
                let cand = (st.next_id % (u16::MAX as u32 + 1)) as u16;
                st.next_id = st.next_id.wrapping_add(1);
                if (self.cfg.host_peer && cand == HOST_ID) || st.clients.contains_key(&cand) {
                    continue;
                }
                id = Some(cand);
                break;
            }
            match id {
                Some(i) => i,
                None => return,
            }
        };
        match self.setup(id, sock) {
            Ok(()) => {
                log::info!("ivshmem server: client {id} connected");
                let _ = self.events.send(Event::Connected(id));
            }
            Err(e) => log::warn!("ivshmem server: setting up client {id} failed: {e}"),
        }
    }

    fn setup(&self, id: u16, sock: UnixStream) -> io::Result<()> {
        // Blocking with a bound: the initial burst is small, and a client that
        // does not read must not stall the server for long.
        sock.set_nonblocking(false)?;
        sock.set_write_timeout(Some(Duration::from_secs(2)))?;
        let shm = (self.shm)(id)?;
        let vectors: Vec<OwnedFd> = (0..self.cfg.vectors).map(|_| eventfd()).collect::<io::Result<_>>()?;
        send(&sock, 0, None)?; // protocol version
        send(&sock, id as i64, None)?;
        send(&sock, -1, Some(shm.as_raw_fd()))?;
        drop(shm); // QEMU holds its own reference now
        for v in self.host_vectors.iter() {
            send(&sock, HOST_ID as i64, Some(v.as_raw_fd()))?;
        }
        let mut st = self.state.lock().unwrap();
        if self.cfg.announce_peers {
            for (pid, p) in st.clients.iter() {
                for v in &p.vectors {
                    send(&sock, *pid as i64, Some(v.as_raw_fd()))?;
                }
            }
            for p in st.clients.values() {
                for v in &vectors {
                    // a peer that cannot take it is dealt with when its socket reports
                    let _ = send(&p.sock, id as i64, Some(v.as_raw_fd()));
                }
            }
        }
        for v in &vectors {
            send(&sock, id as i64, Some(v.as_raw_fd()))?;
        }
        sock.set_nonblocking(true)?;
        st.clients.insert(id, Peer { sock, vectors });
        Ok(())
    }
}

/// What a socket turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    /// It sent protocol version 0: an ivshmem server.
    Ivshmem,
    /// Something else (the reason says what).
    Other(String),
}

/// Does `path` speak the ivshmem server protocol? Connects, reads the first
/// message (the version) and hangs up. The server sees a client come and go.
pub fn probe(path: &Path, timeout: Duration) -> Probe {
    let s = match UnixStream::connect(path) {
        Ok(s) => s,
        // a SOCK_SEQPACKET socket (vscid's control socket) refuses a stream
        Err(e) if e.raw_os_error() == Some(libc::EPROTOTYPE) => {
            return Probe::Other("not a stream socket (a vscid control socket?)".into())
        }
        Err(e) => return Probe::Other(format!("cannot connect: {e}")),
    };
    let _ = s.set_read_timeout(Some(timeout));
    let mut b = [0u8; 8];
    match (&s).read_exact(&mut b) {
        Ok(()) if i64::from_le_bytes(b) == 0 => Probe::Ivshmem,
        Ok(()) => Probe::Other(format!("first message {} is not protocol version 0", i64::from_le_bytes(b))),
        Err(e) => Probe::Other(format!("no version message: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{recvmsg, ControlMessageOwned};
    use std::io::IoSliceMut;
    use std::os::fd::FromRawFd;

    fn memfd(size: u64) -> OwnedFd {
        vsci_sys::memfd::create(c"ivshmem-test", size, vsci_sys::memfd::Seals::NONE).expect("memfd")
    }

    fn recv(s: &UnixStream) -> (i64, Option<OwnedFd>) {
        let mut b = [0u8; 8];
        let mut iov = [IoSliceMut::new(&mut b)];
        let mut space = nix::cmsg_space!([RawFd; 1]);
        let msg = recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).unwrap();
        assert_eq!(msg.bytes, 8);
        let mut fd = None;
        for c in msg.cmsgs().unwrap() {
            if let ControlMessageOwned::ScmRights(v) = c {
                // SAFETY: the kernel gave us these descriptors.
                fd = v.first().map(|f| unsafe { OwnedFd::from_raw_fd(*f) });
            }
        }
        (i64::from_le_bytes(b), fd)
    }

    #[test]
    fn protocol_sequence_and_notifications() {
        let dir = std::env::temp_dir().join(format!("ivshmem-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let cfg = Config { vectors: 2, host_peer: true, announce_peers: true, max_clients: 8 };
        let srv = Server::start(&path, cfg, |_| Ok(memfd(4096))).unwrap();
        assert_eq!(probe(&path, Duration::from_secs(2)), Probe::Ivshmem);
        // The probe may hang up before its setup is sent (then the server
        // logs a failed setup) or after (then it comes and goes).
        if let Some(Event::Connected(p)) = srv.next_event(Duration::from_millis(500)) {
            assert_eq!(srv.next_event(Duration::from_secs(2)), Some(Event::Disconnected(p)));
        }
        assert!(srv.peers().is_empty());

        let a = UnixStream::connect(&path).unwrap();
        assert_eq!(recv(&a).0, 0);
        let aid = recv(&a).0;
        assert!(aid > 0);
        let (m, shm) = recv(&a);
        assert_eq!(m, -1);
        assert!(shm.is_some());
        // host peer's two vectors, then own two
        for _ in 0..2 {
            let (m, fd) = recv(&a);
            assert_eq!(m, HOST_ID as i64);
            assert!(fd.is_some());
        }
        let mut own = Vec::new();
        for _ in 0..2 {
            let (m, fd) = recv(&a);
            assert_eq!(m, aid);
            own.push(fd.unwrap());
        }
        assert_eq!(srv.next_event(Duration::from_secs(2)), Some(Event::Connected(aid as u16)));
        // the server rings a's vector 1
        srv.notify(aid as u16, 1).unwrap();
        assert_eq!(drain(own[1].as_fd()).unwrap(), 1);
        assert_eq!(drain(own[0].as_fd()).unwrap(), 0);
        assert!(srv.notify(aid as u16, 2).is_err());
        assert!(srv.notify(999, 0).is_err());

        // a second client: a hears about it, then about its going
        let b = UnixStream::connect(&path).unwrap();
        let mut bmsgs = Vec::new();
        for _ in 0..(3 + 2 + 2 + 2) {
            bmsgs.push(recv(&b).0);
        }
        let bid = bmsgs[1];
        assert!(bmsgs.contains(&aid), "b learns of a: {bmsgs:?}");
        for _ in 0..2 {
            let (m, fd) = recv(&a);
            assert_eq!(m, bid);
            assert!(fd.is_some());
        }
        drop(b);
        let (m, fd) = recv(&a);
        assert_eq!(m, bid);
        assert!(fd.is_none(), "disconnect notice carries no fd");
        // the server drops a: a sees end-of-file
        assert!(srv.disconnect(aid as u16));
        assert!(!srv.disconnect(aid as u16));
        let mut buf = [0u8; 8];
        a.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!((&a).read(&mut buf).unwrap(), 0);
        drop(srv);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn probe_tells_other_sockets_apart() {
        let dir = std::env::temp_dir().join(format!("ivshmem-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(probe(&dir.join("none"), Duration::from_millis(200)), Probe::Other(_)));
        let p = dir.join("silent");
        let _l = UnixListener::bind(&p).unwrap();
        assert!(matches!(probe(&p, Duration::from_millis(200)), Probe::Other(_)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
