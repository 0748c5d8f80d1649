//! Client connections: one event loop and a small pool of workers for all
//! of them.
//!
//! Why not a thread per client (what this replaced): an idle client cost the
//! node two threads, and a connection that never spoke held one forever, so
//! a few thousand idle or hostile connections meant thousands of threads.
//! Every request handler is short and never blocks (requests that wait park
//! on their own thread, see `Node::defer`), so a handful of workers serve
//! any number of clients.
//!
//! - The poll thread owns the epoll set: it accepts, hands a connection with
//!   input to a worker, and closes connections that do not say Hello within
//!   the handshake timeout.
//! - Each connection is registered `EPOLLONESHOT`: at most one worker
//!   handles it at a time (`busy`), so its requests are handled in order;
//!   the worker re-arms it when done.
//! - Sockets are non-blocking. A message to a client is sent at once if its
//!   queue is empty and the socket takes it; otherwise it waits in the
//!   client's bounded queue and `EPOLLOUT` drains it. A client whose queue
//!   overflows is disconnected rather than allowed to stall the node.
//! - A request handler that panics (a bug of ours) ends that request, which
//!   is answered `SCI_ERR_SYSTEM` and logged; the client and the worker go
//!   on (crate::recover).

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use log::{debug, error, info, warn};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use vsci_proto::wire::{self, WireError};
use vsci_proto::{ClientInfo, ClientMsg, Reply, Request, SciError, MAX_NAME, PROTOCOL_VERSION};

use crate::node::{Handled, Node};
use crate::recover::{self, Recover};
use crate::registry::{ClientId, Outgoing};

/// Messages that may wait for one client before it is considered stuck.
const QUEUE_DEPTH: usize = 1024;
/// Requests a worker handles from one client before letting others go.
const BATCH: usize = 32;
/// The listening socket's epoll token (connection tokens start above it).
const LISTENER: u64 = 0;

enum Phase {
    /// Accepted; its Hello must arrive within the handshake timeout.
    Handshake,
    /// Registered in the node as `id`.
    Client { id: ClientId, pid: i32 },
}

struct State {
    /// A worker (or the poll thread handing it over) owns this connection's
    /// input; nobody else re-arms it meanwhile.
    busy: bool,
    /// Readiness reported while busy, handled before it is released.
    events: EpollFlags,
    out: VecDeque<Outgoing>,
    phase: Phase,
    closed: bool,
}

/// One client connection.
pub struct Conn {
    token: u64,
    pub sock: Arc<OwnedFd>,
    st: Mutex<State>,
    server: std::sync::Weak<Server>,
}

impl Conn {
    /// Queue (or send at once) a message for this client. Never blocks: it
    /// is called with the registry locked.
    pub fn try_send(&self, out: Outgoing) -> Result<(), TrySendError<Outgoing>> {
        let mut st = self.st.locked();
        if st.closed {
            return Err(TrySendError::Disconnected(out));
        }
        if st.out.is_empty() {
            match send_now(&self.sock, &out) {
                Sent::Yes => return Ok(()),
                Sent::Later => {}
                Sent::Failed => {
                    st.closed = true;
                    self.hang_up();
                    return Err(TrySendError::Disconnected(out));
                }
            }
        }
        if st.out.len() >= QUEUE_DEPTH {
            return Err(TrySendError::Full(out));
        }
        st.out.push_back(out);
        if !st.busy {
            self.arm(&st);
        }
        Ok(())
    }

    /// Send what is queued, as far as the socket takes it.
    fn flush(&self, st: &mut State) {
        while let Some(out) = st.out.front() {
            match send_now(&self.sock, out) {
                Sent::Yes => {
                    st.out.pop_front();
                }
                Sent::Later => return,
                Sent::Failed => {
                    st.out.clear();
                    st.closed = true;
                    self.hang_up();
                    return;
                }
            }
        }
    }

    /// Re-arm the one-shot registration: input always, output while
    /// something is queued.
    fn arm(&self, st: &State) {
        let Some(server) = self.server.upgrade() else { return };
        let mut flags = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLONESHOT;
        if !st.out.is_empty() {
            flags |= EpollFlags::EPOLLOUT;
        }
        let mut ev = EpollEvent::new(flags, self.token);
        if let Err(e) = server.epoll.modify(self.sock.as_fd(), &mut ev) {
            debug!("epoll modify of connection {}: {e}", self.token);
        }
    }

    /// Make the connection read as closed: its worker then cleans up.
    fn hang_up(&self) {
        let _ = nix::sys::socket::shutdown(self.sock.as_raw_fd(), nix::sys::socket::Shutdown::Both);
    }
}

enum Sent {
    Yes,
    Later,
    Failed,
}

fn send_now(sock: &OwnedFd, out: &Outgoing) -> Sent {
    let fds: Vec<_> = out.fds.iter().map(|f| f.as_fd()).collect();
    match wire::send(sock.as_fd(), &out.msg, &fds) {
        Ok(()) => Sent::Yes,
        Err(WireError::Io(nix::Error::EAGAIN)) => Sent::Later,
        Err(e) => {
            debug!("send to a client failed: {e}");
            Sent::Failed
        }
    }
}

/// The event loop and its workers.
pub struct Server {
    node: Arc<Node>,
    epoll: Epoll,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_token: AtomicU64,
    handshake_timeout: Duration,
}

impl Server {
    /// Serve clients on `listener` with `workers` worker threads.
    pub fn start(
        node: Arc<Node>,
        listener: OwnedFd,
        workers: usize,
        handshake_timeout: Duration,
    ) -> anyhow::Result<()> {
        set_nonblocking(&listener)?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        epoll.add(listener.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))?;
        let server = Arc::new(Server {
            node,
            epoll,
            conns: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(LISTENER + 1),
            handshake_timeout,
        });
        let (tx, rx) = channel::<Arc<Conn>>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..workers.max(1) {
            let (s, rx) = (Arc::clone(&server), Arc::clone(&rx));
            std::thread::Builder::new().name(format!("vscid-worker{i}")).spawn(move || s.worker(&rx))?;
        }
        std::thread::Builder::new().name("vscid-poll".into()).spawn(move || server.poll_loop(listener, tx))?;
        Ok(())
    }

    fn poll_loop(self: Arc<Self>, listener: OwnedFd, work: Sender<Arc<Conn>>) {
        let mut events = vec![EpollEvent::empty(); 256];
        // Connections in accept order; deadlines grow in the same order.
        let mut handshakes: VecDeque<(Instant, u64)> = VecDeque::new();
        let mut fd_warned = false;
        loop {
            let timeout = EpollTimeout::try_from(Duration::from_millis(200)).expect("small timeout");
            let n = match self.epoll.wait(&mut events, timeout) {
                Ok(n) => n,
                Err(nix::Error::EINTR) => 0,
                Err(e) => {
                    error!("epoll_wait: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    0
                }
            };
            for ev in &events[..n] {
                if ev.data() == LISTENER {
                    self.accept_all(&listener, &mut handshakes, &mut fd_warned);
                    continue;
                }
                let Some(conn) = self.conns.locked().get(&ev.data()).cloned() else { continue };
                let mut st = conn.st.locked();
                st.events |= ev.events();
                if !st.busy {
                    st.busy = true;
                    drop(st);
                    if work.send(conn).is_err() {
                        return;
                    }
                }
            }
            // Close connections that did not introduce themselves in time.
            let now = Instant::now();
            while handshakes.front().is_some_and(|(d, _)| *d <= now) {
                let (_, token) = handshakes.pop_front().expect("checked");
                let Some(conn) = self.conns.locked().get(&token).cloned() else { continue };
                let st = conn.st.locked();
                if matches!(st.phase, Phase::Handshake) {
                    let pid = getsockopt(&*conn.sock, PeerCredentials).map(|c| c.pid()).unwrap_or(0);
                    warn!("connection from pid {pid} sent no Hello within {:?}; closing it", self.handshake_timeout);
                    crate::metrics::get().handshake_timeout();
                    conn.hang_up();
                }
            }
        }
    }

    fn accept_all(
        self: &Arc<Self>,
        listener: &OwnedFd,
        handshakes: &mut VecDeque<(Instant, u64)>,
        fd_warned: &mut bool,
    ) {
        loop {
            let flags = nix::sys::socket::SockFlag::SOCK_CLOEXEC | nix::sys::socket::SockFlag::SOCK_NONBLOCK;
            match nix::sys::socket::accept4(listener.as_raw_fd(), flags) {
                Ok(raw) => {
                    *fd_warned = false;
                    crate::metrics::get().accepted();
                    // SAFETY: accept4 returned a new descriptor that we now own.
                    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                    self.add(fd, handshakes);
                }
                Err(nix::Error::EAGAIN) => return,
                Err(nix::Error::EINTR | nix::Error::ECONNABORTED) => {}
                Err(e @ (nix::Error::EMFILE | nix::Error::ENFILE)) => {
                    if !*fd_warned {
                        warn!("out of file descriptors ({e}); new clients wait until some close");
                        *fd_warned = true;
                    }
                    // The listener stays readable; do not spin on it.
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
                Err(e) => {
                    error!("accept failed: {e}");
                    return;
                }
            }
        }
    }

    fn add(self: &Arc<Self>, fd: OwnedFd, handshakes: &mut VecDeque<(Instant, u64)>) {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + self.handshake_timeout;
        let conn = Arc::new(Conn {
            token,
            sock: Arc::new(fd),
            st: Mutex::new(State {
                busy: false,
                events: EpollFlags::empty(),
                out: VecDeque::new(),
                phase: Phase::Handshake,
                closed: false,
            }),
            server: Arc::downgrade(self),
        });
        self.conns.locked().insert(token, Arc::clone(&conn));
        let ev = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLONESHOT, token);
        if let Err(e) = self.epoll.add(conn.sock.as_fd(), ev) {
            warn!("cannot watch a new connection: {e}");
            self.conns.locked().remove(&token);
            return;
        }
        handshakes.push_back((deadline, token));
    }

    fn worker(&self, rx: &Mutex<Receiver<Arc<Conn>>>) {
        loop {
            let conn = match rx.locked().recv() {
                Ok(c) => c,
                Err(_) => return,
            };
            // A panic outside a request handler (those answer it, see
            // `request`) costs this connection, never the worker.
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve(&conn))) {
                error!("a panic while serving connection {} ({}); dropping it", conn.token, recover::message(&*p));
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.close(&conn))).is_err() {
                    error!("a panic while dropping connection {}", conn.token);
                }
            }
        }
    }

    /// Handle what `conn` has for us, then release it.
    fn serve(&self, conn: &Arc<Conn>) {
        loop {
            let events = {
                let mut st = conn.st.locked();
                let e = std::mem::replace(&mut st.events, EpollFlags::empty());
                if e.is_empty() {
                    st.busy = false;
                    if st.closed {
                        drop(st);
                        self.close(conn);
                    } else {
                        conn.arm(&st);
                    }
                    return;
                }
                if e.contains(EpollFlags::EPOLLOUT) {
                    conn.flush(&mut st);
                }
                e
            };
            if events
                .intersects(EpollFlags::EPOLLIN | EpollFlags::EPOLLHUP | EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLERR)
                && !self.read(conn)
            {
                self.close(conn);
                return;
            }
        }
    }

    /// Read and handle up to BATCH messages. False when the connection is
    /// finished (closed by the client, or dropped for misbehaving).
    fn read(&self, conn: &Arc<Conn>) -> bool {
        for _ in 0..BATCH {
            let msg = match wire::recv(conn.sock.as_fd()) {
                Ok(m) => m,
                Err(WireError::Io(nix::Error::EAGAIN)) => return true,
                Err(WireError::Closed) => return false,
                Err(e) => {
                    warn!("{}: {e}; dropping connection", self.who(conn));
                    return false;
                }
            };
            let handshake = matches!(conn.st.locked().phase, Phase::Handshake);
            let ok = if handshake { self.hello(conn, msg) } else { self.request(conn, msg) };
            if !ok {
                return false;
            }
        }
        // More may be waiting: re-arming (level-triggered) reports it again
        // after other clients had their turn.
        true
    }

    fn who(&self, conn: &Conn) -> String {
        match conn.st.locked().phase {
            Phase::Client { id, pid } => format!("client {id} (pid {pid})"),
            Phase::Handshake => {
                let pid = getsockopt(&*conn.sock, PeerCredentials).map(|c| c.pid()).unwrap_or(0);
                format!("pid {pid} (before Hello)")
            }
        }
    }

    /// The first message must be a Hello with our protocol version.
    fn hello(&self, conn: &Arc<Conn>, msg: wire::Received) -> bool {
        let creds = match getsockopt(&*conn.sock, PeerCredentials) {
            Ok(c) => c,
            Err(e) => {
                warn!("cannot read peer credentials, refusing connection: {e}");
                return false;
            }
        };
        let (tag, name) = match check_hello(&msg) {
            HelloCheck::Hello { tag, name } => (tag, name),
            HelloCheck::WrongVersion { tag, version } => {
                warn!("pid {} speaks protocol {version}, we speak {PROTOCOL_VERSION}; refusing", creds.pid());
                let out = Outgoing::reply(tag, Err(SciError::InconsistentVersions));
                let _ = send_now(&conn.sock, &out);
                return false;
            }
            HelloCheck::Refused(why) => {
                warn!("pid {}: {why}; dropping connection", creds.pid());
                return false;
            }
        };
        let info = ClientInfo { client: 0, pid: creds.pid(), uid: creds.uid(), gid: creds.gid(), name };
        let hello = Reply::Hello {
            node_id: self.node.cfg.node_id,
            wait_mode: self.node.cfg.wait_mode,
            spin_us: self.node.cfg.spin_us,
            max_segment_size: self.node.cfg.max_segment_size,
        };
        let mut reg = self.node.lock();
        if let Err(why) = reg.admit(&self.node.cfg, info.uid) {
            *reg.limit_hits.entry("clients").or_default() += 1;
            crate::metrics::get().limit_hit("clients");
            drop(reg);
            // Logged for every refusal: a refused client has no entry to
            // remember it by, and refusals are rare next to the requests a
            // client at an object limit keeps making.
            warn!("limit: refusing pid {} uid {} {:?}: {why}; answering SCI_ERR_NOSPC", info.pid, info.uid, info.name);
            let _ = send_now(&conn.sock, &Outgoing::reply(tag, Err(SciError::Nospc)));
            return false;
        }
        let id = reg.register_client(info.clone(), crate::registry::Tx::Conn(Arc::clone(conn)), Arc::clone(&conn.sock));
        conn.st.locked().phase = Phase::Client { id, pid: info.pid };
        reg.send_to(id, Outgoing::reply(tag, Ok(hello)));
        drop(reg);
        info!("client {id} connected: pid {} uid {} {:?}", info.pid, info.uid, info.name);
        true
    }

    fn request(&self, conn: &Arc<Conn>, msg: wire::Received) -> bool {
        let Phase::Client { id, pid } = conn.st.locked().phase else { return false };
        let (tag, req, wake) = match check_request(msg) {
            Ok(r) => r,
            Err(why) => {
                warn!("client {id} (pid {pid}): {why}; dropping connection");
                return false;
            }
        };
        debug!("client {id}: {req:?}");
        if matches!(req, Request::Close) {
            // Release first, then answer: the client's SCIClose returns on
            // the answer, and ids it held must be free by then. Answered
            // directly (the connection's queued output is dropped as it
            // ends), and `close` then finds no client left to remove.
            self.release_client(conn);
            let _ = send_now(&conn.sock, &Outgoing::reply(tag, Ok(Reply::Done)));
            return false;
        }
        // A handler's panic (a bug of ours) ends this request: it is
        // answered SCI_ERR_SYSTEM and the client and the worker go on.
        let handled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.node.handle_with(id, tag, req, wake)));
        let handled = handled.unwrap_or_else(|p| {
            error!("client {id} (pid {pid}): the handler of its request (tag {tag}) panicked ({}); answering SCI_ERR_SYSTEM", recover::message(&*p));
            Handled::Reply(Outgoing::reply(tag, Err(SciError::System)))
        });
        match handled {
            Handled::Reply(out) => {
                let reg = self.node.lock();
                if let Some(c) = reg.clients.get(&id) {
                    if c.tx.try_send(out).is_err() {
                        warn!("client {id} (pid {pid}) is not reading replies; dropping connection");
                        return false;
                    }
                }
            }
            Handled::Deferred => {}
        }
        true
    }

    /// Release what the connection's client held, once: the connection
    /// goes back to having no client (a `Close` request, then the end of
    /// the connection, release only at the first).
    fn release_client(&self, conn: &Conn) {
        let phase = std::mem::replace(&mut conn.st.locked().phase, Phase::Handshake);
        if let Phase::Client { id, .. } = phase {
            self.node.lock().remove_client(&self.node.cfg, id);
            self.node.changed.notify_all();
        }
    }

    /// Forget a finished connection and release what its client held.
    fn close(&self, conn: &Arc<Conn>) {
        {
            let mut st = conn.st.locked();
            st.closed = true;
            st.out.clear();
        }
        self.release_client(conn);
        let _ = self.epoll.delete(conn.sock.as_fd());
        conn.hang_up();
        self.conns.locked().remove(&conn.token);
    }
}

/// What a connection's first message turned out to be.
pub enum HelloCheck {
    /// A plain Hello in our protocol version; `name` cut to [`MAX_NAME`] characters.
    Hello { tag: u64, name: String },
    /// A Hello in another version: answered, then the connection is dropped.
    WrongVersion { tag: u64, version: u32 },
    /// Anything else: the connection is dropped unanswered.
    Refused(String),
}

/// Check a connection's first message (everything `Server::hello` decides
/// from the bytes alone; the fuzz targets run this same function).
pub fn check_hello(msg: &wire::Received) -> HelloCheck {
    match msg.decode::<ClientMsg>() {
        Ok(ClientMsg { tag, req: Request::Hello { version, name } }) if msg.fds.is_empty() => {
            if version != PROTOCOL_VERSION {
                return HelloCheck::WrongVersion { tag, version };
            }
            HelloCheck::Hello { tag, name: name.chars().take(MAX_NAME).collect() }
        }
        Ok(_) => HelloCheck::Refused("first message was not a plain Hello".into()),
        Err(e) => HelloCheck::Refused(format!("bad first message ({e})")),
    }
}

/// Decode a registered client's message and check the descriptors that
/// came with it: only `CreateInterruptWake` carries one, an eventfd. Err
/// says why the connection is dropped.
pub fn check_request(msg: wire::Received) -> Result<(u64, Request, Option<OwnedFd>), String> {
    let ClientMsg { tag, req } = msg.decode::<ClientMsg>().map_err(|e| format!("malformed message ({e})"))?;
    let mut fds = msg.fds;
    let wake = match (&req, fds.len()) {
        (Request::CreateInterruptWake { .. }, 1) if crate::memory::is_eventfd(fds[0].as_fd()) => fds.pop(),
        (_, 0) if !matches!(req, Request::CreateInterruptWake { .. }) => None,
        _ => return Err(format!("unexpected file descriptors with {req:?}")),
    };
    Ok((tag, req, wake))
}

fn set_nonblocking(fd: &OwnedFd) -> nix::Result<()> {
    let fl = OFlag::from_bits_truncate(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?);
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK))?;
    Ok(())
}
