//! The control connection: request/reply matching, the reader thread and
//! the event dispatcher.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use vsci_proto::guest::GuestRequest;
use vsci_proto::wire::{self, Received};
use vsci_proto::{
    ClientMsg, Event, ObjId, Reply, Request, SciError, SegmentEvent, ServerMsg, WaitMode, PROTOCOL_VERSION,
};

use crate::wait::WaitPolicy;
use crate::Result;

/// A segment event as a program sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegEvent {
    pub reason: SegmentEvent,
    pub node_id: u32,
    pub status: SciError,
}

type Callback = Box<dyn FnMut(SegEvent) -> bool + Send>;

/// Where one object's segment events go: a queue for
/// `SCIWaitFor*SegmentEvent`, or a callback run on the dispatcher thread.
#[derive(Default)]
pub struct EventQueue {
    queue: Mutex<VecDeque<SegEvent>>,
    ready: Condvar,
    callback: Mutex<Option<Callback>>,
    has_callback: AtomicBool,
    /// Raised (before any callback runs) when a LOST event arrives.
    pub(crate) lost: AtomicBool,
}

impl EventQueue {
    /// Install a callback; it returns `false` to cancel itself, after which
    /// events queue up again.
    pub fn set_callback(&self, cb: Callback) {
        *self.callback.lock().unwrap() = Some(cb);
        self.has_callback.store(true, Ordering::SeqCst);
    }

    pub fn has_callback(&self) -> bool {
        self.has_callback.load(Ordering::SeqCst)
    }

    /// Hand an event to the callback, or queue it for a waiter.
    pub fn deliver(&self, ev: SegEvent) {
        let mut cb = self.callback.lock().unwrap();
        if let Some(f) = cb.as_mut() {
            if !f(ev) {
                *cb = None;
                self.has_callback.store(false, Ordering::SeqCst);
            }
            return;
        }
        drop(cb);
        self.queue.lock().unwrap().push_back(ev);
        self.ready.notify_all();
    }

    /// Wait up to `timeout_ms` for the next event.
    pub fn wait(&self, timeout_ms: u32) -> Result<SegEvent> {
        let deadline = crate::wait::deadline(timeout_ms);
        let mut q = self.queue.lock().unwrap();
        loop {
            if let Some(ev) = q.pop_front() {
                return Ok(ev);
            }
            let wait = match deadline {
                None => Duration::from_secs(3600),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => w,
                    _ => return Err(SciError::Timeout),
                },
            };
            q = self.ready.wait_timeout(q, wait).unwrap().0;
        }
    }
}

struct Pending {
    slots: HashMap<u64, SyncSender<std::result::Result<(Reply, Vec<OwnedFd>), SciError>>>,
}

/// How requests reach the node: vscid's socket, or (in a guest) a session
/// of the guest driver that the guest's host side serves.
pub(crate) enum Transport {
    Socket(OwnedFd),
    Guest(crate::guest::Channel),
}

/// What arrives on a connection.
pub(crate) enum Incoming {
    /// A message of the node's protocol (`ServerMsg`) and its descriptors.
    Node(Received),
    /// In a guest: a DMA transfer the host side ran ended.
    DmaDone { queue: u64, status: SciError },
}

impl Transport {
    /// Send request `req` tagged `tag`. Requests only a guest's host side
    /// answers go nowhere on a socket.
    fn send(&self, tag: u64, req: GuestRequest) -> std::result::Result<(), ()> {
        match (self, req) {
            (Transport::Socket(sock), GuestRequest::Node(req)) => {
                wire::send(sock.as_fd(), &ClientMsg { tag, req }, &[]).map_err(|_| ())
            }
            (Transport::Socket(_), _) => Err(()),
            (Transport::Guest(ch), req) => {
                ch.send(&postcard::to_stdvec(&vsci_proto::guest::GuestMsg { tag, req }).map_err(|_| ())?)
            }
        }
    }

    fn recv(&self) -> std::result::Result<Incoming, ()> {
        match self {
            Transport::Socket(sock) => wire::recv(sock.as_fd()).map(Incoming::Node).map_err(|_| ()),
            Transport::Guest(ch) => ch.recv(),
        }
    }

    fn shutdown(&self) {
        match self {
            Transport::Socket(sock) => {
                let _ = nix::sys::socket::shutdown(sock.as_raw_fd(), nix::sys::socket::Shutdown::Both);
            }
            Transport::Guest(ch) => ch.shutdown(),
        }
    }
}

/// How long [`Client::close`] waits for the node to release a connection.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

pub(crate) struct Inner {
    transport: Arc<Transport>,
    next_tag: AtomicU64,
    pending: Mutex<Pending>,
    dead: AtomicBool,
    /// Event sinks by daemon object id (segments and connections).
    sinks: Mutex<HashMap<ObjId, Weak<EventQueue>>>,
    /// Flags to raise when the daemon says an interrupt connection is gone.
    intr_gone: Mutex<HashMap<ObjId, Weak<AtomicBool>>>,
    /// Guests: where the end of a DMA transfer run by the host side goes.
    dma_done: Mutex<HashMap<u64, Sender<SciError>>>,
    dispatch: Mutex<Option<Sender<(Arc<EventQueue>, SegEvent)>>>,
    /// Written once (after `dead` is set) when the connection to the node
    /// ends, and never drained: every interrupt wait polls it next to its
    /// own wake-up descriptor. Without it a wait sleeping in `poll` would
    /// sleep forever once vscid is gone, since nobody writes the interrupt's
    /// eventfd any more (and in a guest that descriptor is an MSI-X vector
    /// file, which only the device can raise, so the library could not
    /// write it either).
    gone: OwnedFd,
    pub(crate) node_id: u32,
    pub(crate) wait: WaitPolicy,
    #[allow(dead_code)]
    pub(crate) max_segment_size: u64,
}

/// One control connection to `vscid` (one SISCI descriptor).
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl Client {
    /// Connect to the node the way libsisci does: through the guest driver
    /// when running in a vsci guest, else to vscid at `path`.
    pub fn connect_auto(path: &std::path::Path, name: &str) -> Result<Client> {
        if crate::guest::in_guest() {
            let ch = crate::guest::Channel::open().map_err(|e| {
                log::error!("vsci: cannot open a session on {}: {e}", crate::guest::CTL_DEVICE);
                SciError::NoLinkAccess
            })?;
            Client::start(Transport::Guest(ch), name, None)
        } else {
            Client::connect(path, name)
        }
    }

    /// Connect to the daemon at `path` and introduce ourselves.
    pub fn connect(path: &std::path::Path, name: &str) -> Result<Client> {
        let sock = wire::connect(path).map_err(|e| connect_error(path, e))?;
        Client::start(Transport::Socket(sock), name, None)
    }

    /// [`connect`](Self::connect) for a service on other programs' data
    /// path (a shared device, a VM's hypervisor): its interrupt waits block
    /// instead of spinning first, unless `VSCI_WAIT` says otherwise. A
    /// service spinning on a small host takes the core the programs it
    /// serves need (measured on 2 cores: a shared NIC's ping-pong 150 µs
    /// blocking against 170-196 µs adaptive).
    pub fn connect_service(path: &std::path::Path, name: &str) -> Result<Client> {
        let sock = wire::connect(path).map_err(|e| connect_error(path, e))?;
        Client::start(Transport::Socket(sock), name, Some(WaitMode::Block))
    }

    fn start(transport: Transport, name: &str, mode_override: Option<WaitMode>) -> Result<Client> {
        let hello = Request::Hello { version: PROTOCOL_VERSION, name: name.to_owned() };
        transport.send(0, GuestRequest::Node(hello)).map_err(|_| SciError::NoLinkAccess)?;
        let Ok(Incoming::Node(msg)) = transport.recv() else { return Err(SciError::NoLinkAccess) };
        let (node_id, mode, spin_us, max_segment_size) = match msg.decode::<ServerMsg>() {
            Ok(ServerMsg::Reply {
                tag: 0,
                result: Ok(Reply::Hello { node_id, wait_mode, spin_us, max_segment_size }),
            }) => (node_id, wait_mode, spin_us, max_segment_size),
            Ok(ServerMsg::Reply { result: Err(e), .. }) => return Err(e),
            _ => return Err(SciError::InconsistentVersions),
        };
        let transport = Arc::new(transport);
        let inner = Arc::new(Inner {
            transport: transport.clone(),
            next_tag: AtomicU64::new(1),
            pending: Mutex::new(Pending { slots: HashMap::new() }),
            dead: AtomicBool::new(false),
            sinks: Mutex::new(HashMap::new()),
            intr_gone: Mutex::new(HashMap::new()),
            dma_done: Mutex::new(HashMap::new()),
            dispatch: Mutex::new(None),
            gone: nix::sys::eventfd::EventFd::from_flags(
                nix::sys::eventfd::EfdFlags::EFD_CLOEXEC | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
            )
            .map_err(|_| SciError::System)?
            .into(),
            node_id,
            wait: WaitPolicy::from_env(mode_override.unwrap_or(mode), spin_us),
            max_segment_size,
        });
        let (dtx, drx) = channel();
        *inner.dispatch.lock().unwrap() = Some(dtx);
        vsci_sys::signals::spawn(std::thread::Builder::new().name("vsci-events".into()), move || dispatcher(drx))
            .map_err(|_| SciError::System)?;
        let weak = Arc::downgrade(&inner);
        vsci_sys::signals::spawn(std::thread::Builder::new().name("vsci-reader".into()), move || {
            reader(transport, weak)
        })
        .map_err(|_| SciError::System)?;
        Ok(Client { inner })
    }

    /// Does this connection go through a guest's host side?
    pub(crate) fn is_guest(&self) -> bool {
        matches!(*self.inner.transport, Transport::Guest(_))
    }

    pub(crate) fn register_dma(&self, queue: u64) -> Receiver<SciError> {
        let (tx, rx) = channel();
        self.inner.dma_done.lock().unwrap().insert(queue, tx);
        rx
    }

    pub(crate) fn unregister_dma(&self, queue: u64) {
        self.inner.dma_done.lock().unwrap().remove(&queue);
    }

    pub fn node_id(&self) -> u32 {
        self.inner.node_id
    }

    pub fn wait_policy(&self) -> WaitPolicy {
        self.inner.wait
    }

    pub fn is_alive(&self) -> bool {
        !self.inner.dead.load(Ordering::SeqCst)
    }

    /// Close the connection: the daemon releases everything it holds for
    /// us and tells our peers, and answers once it has (`Request::Close`),
    /// so a program that closes its descriptor and at once opens another
    /// and creates a segment with the same id finds the id free. Through a
    /// guest's host side the same request goes to the node. If the node
    /// does not answer within [`CLOSE_WAIT`], the connection ends anyway
    /// (the node releases when it sees it end).
    pub fn close(&self) {
        let _ = self.inner.call_timeout(GuestRequest::Node(Request::Close), Some(CLOSE_WAIT));
        self.inner.dead.store(true, Ordering::SeqCst);
        self.inner.transport.shutdown();
    }

    /// Send a request and wait for its reply and descriptors.
    pub(crate) fn call(&self, req: Request) -> Result<(Reply, Vec<OwnedFd>)> {
        self.inner.call(GuestRequest::Node(req))
    }

    /// In a guest: a request only the guest's host side answers (the
    /// guest's maps of other nodes' segments, DMA on the node's engine).
    /// `SCI_ERR_ILLEGAL_OPERATION` on a host.
    pub(crate) fn call_host_side(&self, req: GuestRequest) -> Result<Reply> {
        if !self.is_guest() {
            return Err(SciError::IllegalOperation);
        }
        self.inner.call(req).map(|(r, _)| r)
    }

    pub(crate) fn register_sink(&self, id: ObjId, q: &Arc<EventQueue>) {
        self.inner.sinks.lock().unwrap().insert(id, Arc::downgrade(q));
    }

    pub(crate) fn unregister(&self, id: ObjId) {
        self.inner.sinks.lock().unwrap().remove(&id);
        self.inner.intr_gone.lock().unwrap().remove(&id);
    }

    /// Readable once the connection to the node has ended (see `Inner::gone`).
    pub(crate) fn gone_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inner.gone.as_fd()
    }

    pub(crate) fn register_intr_conn(&self, id: ObjId, gone: &Arc<AtomicBool>) {
        self.inner.intr_gone.lock().unwrap().insert(id, Arc::downgrade(gone));
    }

    /// Daemon status (used by `vsci status`).
    pub fn status(&self) -> Result<vsci_proto::NodeStatus> {
        match self.call(Request::Status)? {
            (Reply::Status(s), _) => Ok(*s),
            _ => Err(SciError::System),
        }
    }

    /// Is this node's link to the cluster working: it has no other
    /// member, or the link to at least one of them is up (a member may be
    /// silent, `not responding`, with its link up)? What a pulled cable
    /// changes on Dolphin's adapter (`SCI_Q_ADAPTER_LINK_OPERATIONAL`).
    pub fn link_operational(&self) -> Result<bool> {
        let st = self.status()?;
        Ok(st.peers.is_empty() || st.peers.iter().any(|p| p.state == "up" || p.state == "not responding"))
    }

    pub fn probe_node(&self, node_id: u32) -> Result<bool> {
        match self.call(Request::ProbeNode { node_id })? {
            (Reply::Probe { reachable }, _) => Ok(reachable),
            _ => Err(SciError::System),
        }
    }
}

/// Map a failed `connect` to the control socket to a SISCI error. A refusal
/// by file permissions is `SCI_ERR_ACCESS` and is logged with the socket,
/// its owner, group and mode and what is missing, because "is the node
/// running?" sends the user looking in the wrong place.
pub fn connect_error(path: &std::path::Path, e: nix::Error) -> SciError {
    match e {
        nix::Error::EACCES | nix::Error::EPERM => {
            use std::os::unix::fs::MetadataExt;
            let what = match std::fs::metadata(path) {
                Ok(m) => format!(
                    "socket owner uid {} group gid {} mode {:04o}; connecting needs write permission on the socket \
                     (and search permission on its directories): ask the node's operator to add you to its \
                     socket group (vscid --socket-group)",
                    m.uid(),
                    m.gid(),
                    m.mode() & 0o7777
                ),
                Err(_) => "search permission on a directory above the socket is missing".into(),
            };
            log::error!(
                "permission denied connecting to vscid at {} as uid {} gid {}: {what}",
                path.display(),
                nix::unistd::getuid(),
                nix::unistd::getgid()
            );
            SciError::Access
        }
        _ => SciError::NoLinkAccess,
    }
}

impl Inner {
    fn call(&self, req: GuestRequest) -> Result<(Reply, Vec<OwnedFd>)> {
        self.call_timeout(req, None)
    }

    /// `call`, giving up after `timeout` (the reply, if it comes later, is
    /// dropped by the reader).
    fn call_timeout(&self, req: GuestRequest, timeout: Option<Duration>) -> Result<(Reply, Vec<OwnedFd>)> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(SciError::NoLinkAccess);
        }
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        self.pending.lock().unwrap().slots.insert(tag, tx);
        // The reader clears `pending` after setting `dead`: a slot added
        // after that clear would wait for a reply that never comes.
        if self.dead.load(Ordering::SeqCst) {
            self.pending.lock().unwrap().slots.remove(&tag);
            return Err(SciError::NoLinkAccess);
        }
        if self.transport.send(tag, req).is_err() {
            self.pending.lock().unwrap().slots.remove(&tag);
            return Err(SciError::NoLinkAccess);
        }
        match timeout {
            None => rx.recv().unwrap_or(Err(SciError::NoLinkAccess)),
            Some(t) => rx.recv_timeout(t).unwrap_or_else(|_| {
                self.pending.lock().unwrap().slots.remove(&tag);
                Err(SciError::Timeout)
            }),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.transport.shutdown();
    }
}

fn reader(transport: Arc<Transport>, inner: Weak<Inner>) {
    loop {
        let msg: Received = match transport.recv() {
            Ok(Incoming::Node(m)) => m,
            Ok(Incoming::DmaDone { queue, status }) => {
                let Some(inner) = inner.upgrade() else { return };
                if let Some(tx) = inner.dma_done.lock().unwrap().get(&queue) {
                    let _ = tx.send(status);
                }
                continue;
            }
            Err(_) => break,
        };
        let Some(inner) = inner.upgrade() else { return };
        let decoded = match msg.decode::<ServerMsg>() {
            Ok(m) => m,
            Err(e) => {
                log::error!("vsci: undecodable message from vscid ({e}); closing");
                break;
            }
        };
        match decoded {
            ServerMsg::Reply { tag, result } => {
                let slot = inner.pending.lock().unwrap().slots.remove(&tag);
                if let Some(tx) = slot {
                    let _ = tx.send(result.map(|r| (r, msg.fds)));
                }
            }
            ServerMsg::Event(ev) => on_event(&inner, ev),
        }
    }
    // The daemon went away (shutdown, crash, or we closed): fail every
    // waiting call and tell every connector its segment is lost.
    if let Some(inner) = inner.upgrade() {
        inner.dead.store(true, Ordering::SeqCst);
        inner.pending.lock().unwrap().slots.clear();
        let sinks: Vec<(ObjId, Weak<EventQueue>)> = inner.sinks.lock().unwrap().drain().collect();
        for (_, q) in sinks {
            if let Some(q) = q.upgrade() {
                dispatch(
                    &inner,
                    q,
                    SegEvent { reason: SegmentEvent::Lost, node_id: inner.node_id, status: SciError::NoLinkAccess },
                );
            }
        }
        inner.dma_done.lock().unwrap().clear();
        for (_, g) in inner.intr_gone.lock().unwrap().drain() {
            if let Some(g) = g.upgrade() {
                g.store(true, Ordering::SeqCst);
            }
        }
        *inner.dispatch.lock().unwrap() = None;
        // Wake every wait sleeping in poll; each sees `dead` and returns
        // SCI_ERR_NO_LINK_ACCESS.
        crate::wait::kick(inner.gone.as_fd());
    }
}

fn on_event(inner: &Arc<Inner>, ev: Event) {
    let (id, sev) = match ev {
        Event::LocalSegment { seg, reason, node_id } => (seg, SegEvent { reason, node_id, status: SciError::Ok }),
        Event::RemoteSegment { conn, reason, status } => (conn, SegEvent { reason, node_id: inner.node_id, status }),
        Event::InterruptGone { conn, status } => {
            if status == SciError::NodeNotResponding {
                crate::remote::node_down(conn);
            }
            if let Some(g) = inner.intr_gone.lock().unwrap().get(&conn).and_then(Weak::upgrade) {
                g.store(true, Ordering::SeqCst);
            }
            return;
        }
        Event::Shutdown => {
            // The node is stopping. Close our end now rather than wait for
            // it to close: the reader then runs its exit path (LOST events,
            // failed calls, woken waits) at once, and the node, which waits
            // for its clients to go, can exit sooner.
            inner.dead.store(true, Ordering::SeqCst);
            inner.transport.shutdown();
            return;
        }
    };
    if let Some(q) = inner.sinks.lock().unwrap().get(&id).and_then(Weak::upgrade) {
        dispatch(inner, q, sev);
    }
}

fn dispatch(inner: &Inner, q: Arc<EventQueue>, ev: SegEvent) {
    if ev.reason == SegmentEvent::Lost {
        q.lost.store(true, Ordering::SeqCst);
    }
    if ev.reason == SegmentEvent::Lost && ev.status == SciError::NodeNotResponding {
        // The node was declared dead: stop waiting for RMA operations to it
        // (a silently cut link never completes them). A link that is only
        // down (SCI_CB_NOT_OPERATIONAL) keeps them waiting: they complete
        // when it is back.
        crate::remote::node_down_queue(&q);
    }
    if let Some(tx) = inner.dispatch.lock().unwrap().as_ref() {
        let _ = tx.send((q, ev));
    }
}

/// Runs callbacks off the reader thread, so a callback may itself make
/// SISCI calls (which need the reader to deliver their replies).
fn dispatcher(rx: Receiver<(Arc<EventQueue>, SegEvent)>) {
    for (q, ev) in rx {
        q.deliver(ev);
    }
}
