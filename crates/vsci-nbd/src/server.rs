//! Accept loop, negotiation and the per-connection reader/worker machinery.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{send, sendmsg, MsgFlags};

use crate::proto::*;
use crate::{Backend, ServerConfig, Stats};

/// A silent client must not hold a thread forever before transmission.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bounds how long a client can keep a connection in option haggling.
const MAX_OPTIONS: usize = 256;
/// Largest option payload held in memory: enough for a 4096-byte name and
/// 65535 info requests.
const MAX_OPTION_DATA: u32 = 256 << 10;
/// Option payloads up to this are read and thrown away with
/// NBD_REP_ERR_TOO_BIG; beyond it the client is not worth the bandwidth.
const MAX_OPTION_DISCARD: u32 = 16 << 20;
/// A WRITE payload above this is not a client we want to keep reading
/// from; between max_request and this we discard it and reply EINVAL.
const ABSURD_PAYLOAD: u32 = 64 << 20;
/// After stop(), how long connections get to finish and answer the
/// requests they already read before their sockets are cut outright.
const STOP_GRACE: Duration = Duration::from_secs(1);
/// How often the accept loop looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(100);
/// Jobs queued per connection beyond those the byte budget already bounds
/// (FLUSH/TRIM/WRITE_ZEROES carry no buffer).
const QUEUE_DEPTH: usize = 128;
/// Cap on [`Backend::max_batch`]: a batch is answered only once all of it
/// is done, so a large one delays its first reply.
const MAX_BATCH: usize = 64;
/// A batch stops growing once it holds this many bytes: large requests
/// gain nothing from sharing a wait (their transfer dwarfs a round trip),
/// and their replies would wait for the whole batch instead of leaving as
/// each is done.
const MAX_BATCH_BYTES: u64 = 256 << 10;
/// Most slices given to one sendmsg (well under IOV_MAX, 1024 on Linux).
const MAX_IOV: usize = 64;
/// WRITE_ZEROES is executed as writes of this many zero bytes at most.
static ZEROES: [u8; 256 << 10] = [0; 256 << 10];

/// What [`negotiate`] offers.
#[derive(Debug, Clone, Copy)]
pub struct ExportInfo<'a> {
    pub name: &'a str,
    pub size: u64,
    pub tflags: u16,
    pub max_request: u32,
}

/// How negotiation ended, short of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    /// The client chose the export; transmission starts on the same stream.
    Transmission { no_zeroes: bool },
    /// The client sent NBD_OPT_ABORT.
    Aborted,
}

fn invalid(msg: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn option_reply(w: &mut impl Write, option: u32, reply_type: u32, data: &[u8]) -> io::Result<()> {
    // data is at most a few KiB (names are capped at MAX_STRING).
    let mut buf = Vec::with_capacity(OPTION_REPLY_HEADER_SIZE + data.len());
    buf.extend_from_slice(&encode_option_reply_header(option, reply_type, data.len() as u32));
    buf.extend_from_slice(data);
    w.write_all(&buf)
}

fn discard(r: &mut impl Read, len: u64) -> io::Result<()> {
    let n = io::copy(&mut r.take(len), &mut io::sink())?;
    if n != len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Run fixed-newstyle negotiation from the server's greeting up to the
/// start of transmission. Generic over the streams so it can be driven
/// from memory (tests, fuzzing); every byte read is treated as hostile.
pub fn negotiate<R: Read, W: Write>(r: &mut R, w: &mut W, ex: &ExportInfo<'_>) -> io::Result<Negotiated> {
    w.write_all(&encode_greeting())?;
    let mut cf = [0u8; 4];
    r.read_exact(&mut cf)?;
    let client = parse_client_flags(&cf).map_err(invalid)?;
    let name_ok = |n: &[u8]| n.is_empty() || n == ex.name.as_bytes();

    for _ in 0..MAX_OPTIONS {
        let mut hb = [0u8; OPTION_HEADER_SIZE];
        r.read_exact(&mut hb)?;
        let h = parse_option_header(&hb).map_err(invalid)?;

        if h.option == OPT_EXPORT_NAME {
            // This option cannot be answered with an error, so anything we
            // will not serve ends the session (spec).
            if h.len as usize > MAX_STRING {
                return Err(invalid("NBD_OPT_EXPORT_NAME name too long"));
            }
            let mut name = vec![0u8; h.len as usize];
            r.read_exact(&mut name)?;
            if !name_ok(&name) {
                return Err(io::Error::new(io::ErrorKind::NotFound, "unknown export requested"));
            }
            w.write_all(&encode_export_name_reply(ex.size, ex.tflags, client.no_zeroes))?;
            return Ok(Negotiated::Transmission { no_zeroes: client.no_zeroes });
        }

        if h.len > MAX_OPTION_DATA {
            if h.len > MAX_OPTION_DISCARD {
                return Err(invalid("option payload absurdly large"));
            }
            discard(r, u64::from(h.len))?;
            option_reply(w, h.option, REP_ERR_TOO_BIG, b"option data too large")?;
            continue;
        }
        let mut data = vec![0u8; h.len as usize];
        r.read_exact(&mut data)?;

        match h.option {
            OPT_ABORT => {
                // The client may already be gone; the ACK is a courtesy.
                let _ = option_reply(w, h.option, REP_ACK, &[]);
                return Ok(Negotiated::Aborted);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    option_reply(w, h.option, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data")?;
                    continue;
                }
                let mut d = Vec::with_capacity(4 + ex.name.len());
                d.extend_from_slice(&(ex.name.len() as u32).to_be_bytes());
                d.extend_from_slice(ex.name.as_bytes());
                option_reply(w, h.option, REP_SERVER, &d)?;
                option_reply(w, h.option, REP_ACK, &[])?;
            }
            OPT_INFO | OPT_GO => {
                let req = match parse_info_request(&data) {
                    Ok(req) => req,
                    Err(e) => {
                        option_reply(w, h.option, REP_ERR_INVALID, e.to_string().as_bytes())?;
                        continue;
                    }
                };
                if !name_ok(req.name) {
                    option_reply(w, h.option, REP_ERR_UNKNOWN, b"no such export")?;
                    continue;
                }
                option_reply(w, h.option, REP_INFO, &encode_info_export(ex.size, ex.tflags))?;
                // Sent even unrequested (the spec allows it) so clients that
                // did not ask still learn our maximum request.
                let preferred = 4096.min(ex.max_request);
                option_reply(w, h.option, REP_INFO, &encode_info_block_size(1, preferred, ex.max_request))?;
                if req.requests.contains(&INFO_NAME) {
                    let mut d = Vec::with_capacity(2 + ex.name.len());
                    d.extend_from_slice(&INFO_NAME.to_be_bytes());
                    d.extend_from_slice(ex.name.as_bytes());
                    option_reply(w, h.option, REP_INFO, &d)?;
                }
                option_reply(w, h.option, REP_ACK, &[])?;
                if h.option == OPT_GO {
                    return Ok(Negotiated::Transmission { no_zeroes: client.no_zeroes });
                }
            }
            _ => option_reply(w, h.option, REP_ERR_UNSUP, b"option not supported")?,
        }
    }
    Err(invalid("too many options"))
}

/// The socket types a connection can run over.
trait Conn: Read + AsFd + Send + Sync + Sized + 'static {
    fn clone_conn(&self) -> io::Result<Self>;
    fn shutdown_conn(&self, how: Shutdown);
    fn read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl Conn for UnixStream {
    fn clone_conn(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_conn(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
    fn read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)
    }
}

impl Conn for TcpStream {
    fn clone_conn(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_conn(&self, how: Shutdown) {
        let _ = self.shutdown(how);
    }
    fn read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)
    }
}

/// Writes with MSG_NOSIGNAL: a client hanging up must cost an EPIPE, not a
/// SIGPIPE that kills a host process which never ignored it (only Rust
/// `main`s ignore it by default; vsci may embed this in C-hosted code).
struct SockWriter<S>(S);

impl<S: AsFd> Write for SockWriter<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        send(self.0.as_fd().as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL).map_err(io::Error::from)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let bufs = &bufs[..bufs.len().min(MAX_IOV)];
        sendmsg::<()>(self.0.as_fd().as_raw_fd(), bufs, &[], MsgFlags::MSG_NOSIGNAL, None).map_err(io::Error::from)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: AsFd> SockWriter<S> {
    /// Every byte of `parts`, in order, in as few system calls as the
    /// socket takes them (`Write::write_all_vectored` is not stable yet).
    fn write_all_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let mut storage: Vec<IoSlice<'_>> = parts.iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)).collect();
        let mut bufs = &mut storage[..];
        while !bufs.is_empty() {
            match self.write_vectored(bufs) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    active: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    trims: AtomicU64,
    zero_writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    errors: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Shuts one connection's socket down in the given direction.
type ShutdownFn = Box<dyn Fn(Shutdown) + Send>;

struct Inner {
    backend: Arc<dyn Backend>,
    cfg: ServerConfig,
    stop: AtomicBool,
    stats: Counters,
    next_conn: AtomicU64,
    /// Open connections, so stop() can wake threads blocked on a socket.
    conns: Mutex<HashMap<u64, ShutdownFn>>,
}

/// An NBD server for one export. Cheap to share: `serve_*` may run on
/// several threads (e.g. one UNIX and one TCP listener) at once.
pub struct Server {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take the whole server down with poison.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Server {
    pub fn new<B: Backend>(backend: Arc<B>, cfg: ServerConfig) -> Server {
        let mut cfg = cfg;
        cfg.workers_per_connection = cfg.workers_per_connection.max(1);
        // Keeps the advertised block sizes consistent (preferred 4096 <=
        // max) and our per-request allocation bounded.
        cfg.max_request = cfg.max_request.clamp(4096, ABSURD_PAYLOAD);
        Server {
            inner: Arc::new(Inner {
                backend,
                cfg,
                stop: AtomicBool::new(false),
                stats: Counters::default(),
                next_conn: AtomicU64::new(0),
                conns: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Serve connections from a Unix listener until `stop()`; one thread
    /// per connection plus workers. Returns once every connection it
    /// accepted has ended, so no request touches the backend afterwards.
    pub fn serve_unix(&self, listener: UnixListener) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        self.serve_loop(listener.as_fd(), || listener.accept().map(|(s, _)| s))
    }

    /// As [`Server::serve_unix`], for TCP (Nagle is disabled on each
    /// connection: replies are latency-bound).
    pub fn serve_tcp(&self, listener: TcpListener) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        self.serve_loop(listener.as_fd(), || {
            let (s, _) = listener.accept()?;
            let _ = s.set_nodelay(true);
            Ok(s)
        })
    }

    /// Make `serve_*` return soon: the accept loops notice within 100 ms.
    /// Open connections stop reading requests at once; those already read
    /// are executed and answered if the client still listens, and after
    /// about a second any straggling connection is cut. Permanent: later
    /// `serve_*` calls return at once.
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        for shut in lock(&self.inner.conns).values() {
            shut(Shutdown::Read);
        }
    }

    pub fn stats(&self) -> Stats {
        let c = &self.inner.stats;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            connections: g(&c.connections),
            active_connections: g(&c.active),
            reads: g(&c.reads),
            writes: g(&c.writes),
            flushes: g(&c.flushes),
            trims: g(&c.trims),
            zero_writes: g(&c.zero_writes),
            bytes_read: g(&c.bytes_read),
            bytes_written: g(&c.bytes_written),
            errors: g(&c.errors),
        }
    }

    fn serve_loop<S: Conn>(&self, fd: BorrowedFd<'_>, mut accept: impl FnMut() -> io::Result<S>) -> io::Result<()> {
        let mut threads: Vec<(u64, JoinHandle<()>)> = Vec::new();
        let timeout = PollTimeout::from(ACCEPT_POLL.as_millis().min(u128::from(u16::MAX)) as u16);
        while !self.inner.stop.load(Ordering::SeqCst) {
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, timeout) {
                Ok(0) => {}
                Ok(_) => loop {
                    if self.inner.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    match accept() {
                        Ok(s) => match self.start_connection(s) {
                            Ok(t) => threads.push(t),
                            Err(e) => log::warn!("nbd: cannot start connection: {e}"),
                        },
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            // EMFILE, ECONNABORTED...: transient for a
                            // server; back off instead of spinning.
                            log::warn!("nbd: accept: {e}");
                            std::thread::sleep(ACCEPT_POLL);
                            break;
                        }
                    }
                },
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    self.shut_down_threads(threads);
                    return Err(e.into());
                }
            }
            threads.retain(|(_, t)| !t.is_finished());
        }
        self.shut_down_threads(threads);
        Ok(())
    }

    fn shut_down_threads(&self, mut threads: Vec<(u64, JoinHandle<()>)>) {
        // Read side first (also covers connections registered after
        // stop()'s sweep), so requests in flight still get their replies.
        self.shut_connections(&threads, Shutdown::Read);
        let deadline = std::time::Instant::now() + STOP_GRACE;
        while threads.iter().any(|(_, t)| !t.is_finished()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // A client that stopped reading replies would block a worker in
        // write forever; cutting both directions frees it.
        threads.retain(|(_, t)| !t.is_finished());
        self.shut_connections(&threads, Shutdown::Both);
        for (_, t) in threads {
            let _ = t.join();
        }
    }

    fn shut_connections(&self, threads: &[(u64, JoinHandle<()>)], how: Shutdown) {
        let conns = lock(&self.inner.conns);
        for (id, _) in threads {
            if let Some(shut) = conns.get(id) {
                shut(how);
            }
        }
    }

    fn start_connection<S: Conn>(&self, s: S) -> io::Result<(u64, JoinHandle<()>)> {
        let id = self.inner.next_conn.fetch_add(1, Ordering::Relaxed);
        let waker = s.clone_conn()?;
        lock(&self.inner.conns).insert(id, Box::new(move |how| waker.shutdown_conn(how)));
        bump(&self.inner.stats.connections, 1);
        bump(&self.inner.stats.active, 1);
        let inner = self.inner.clone();
        let spawned = std::thread::Builder::new().name(format!("nbd-conn-{id}")).spawn(move || {
            if let Err(e) = run_connection(&inner, id, s) {
                log::info!("nbd: connection {id} ended: {e}");
            }
            lock(&inner.conns).remove(&id);
            inner.stats.active.fetch_sub(1, Ordering::Relaxed);
        });
        match spawned {
            Ok(t) => Ok((id, t)),
            Err(e) => {
                lock(&self.inner.conns).remove(&id);
                self.inner.stats.active.fetch_sub(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}

/// Bounds the request buffers one connection holds at once, so a client
/// pipelining large requests cannot make us allocate without limit.
struct Budget {
    used: Mutex<u64>,
    cv: Condvar,
    limit: u64,
}

impl Budget {
    fn acquire(&self, n: u64) {
        let mut used = lock(&self.used);
        // One request always fits (n <= max_request <= limit) once alone.
        while *used > 0 && *used + n > self.limit {
            used = self.cv.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        *used += n;
    }
    fn release(&self, n: u64) {
        *lock(&self.used) -= n;
        self.cv.notify_all();
    }
}

/// Sequence numbers of the requests still executing, so a FLUSH can wait
/// for exactly those received before it.
struct Outstanding {
    set: Mutex<BTreeSet<u64>>,
    cv: Condvar,
}

impl Outstanding {
    fn begin(&self, seq: u64) {
        lock(&self.set).insert(seq);
    }
    fn end(&self, seq: u64) {
        lock(&self.set).remove(&seq);
        self.cv.notify_all();
    }
    /// Nothing but `seq` itself is executing.
    fn is_empty_but(&self, seq: u64) -> bool {
        lock(&self.set).iter().all(|&s| s == seq)
    }
    /// Cannot deadlock: jobs leave the queue in sequence order, so every
    /// earlier request is done or running on another worker, and a running
    /// request waits only on requests earlier still.
    fn wait_earlier(&self, seq: u64) {
        let mut set = lock(&self.set);
        while set.first().is_some_and(|&s| s < seq) {
            set = self.cv.wait(set).unwrap_or_else(|e| e.into_inner());
        }
    }
}

enum Op {
    Read { offset: u64, len: u32 },
    Write { offset: u64, data: Vec<u8>, fua: bool },
    Flush,
    Trim { offset: u64, len: u32, fua: bool },
    WriteZeroes { offset: u64, len: u32, fua: bool, no_hole: bool },
}

struct Job {
    seq: u64,
    cookie: u64,
    /// Bytes charged to the budget, released once the reply is out.
    charge: u64,
    op: Op,
}

struct ConnShared<S> {
    inner: Arc<Inner>,
    writer: Mutex<SockWriter<S>>,
    /// Used to wake the reader when a reply cannot be sent.
    waker: S,
    budget: Budget,
    outstanding: Outstanding,
}

impl<S: Conn> ConnShared<S> {
    fn send(&self, bytes: &[u8]) -> io::Result<()> {
        let r = lock(&self.writer).write_all(bytes);
        if r.is_err() {
            // The client cannot hear us any more; stop reading its requests.
            self.waker.shutdown_conn(Shutdown::Both);
        }
        r
    }
    /// Several replies (or one in pieces) in one go, so a batch costs one
    /// system call rather than one per request.
    fn send_parts(&self, parts: &[&[u8]]) -> io::Result<()> {
        let r = lock(&self.writer).write_all_parts(parts);
        if r.is_err() {
            self.waker.shutdown_conn(Shutdown::Both);
        }
        r
    }
    fn reply_error(&self, cookie: u64, err: u32) -> io::Result<()> {
        bump(&self.inner.stats.errors, 1);
        self.send(&encode_simple_reply(err, cookie))
    }
}

fn run_connection<S: Conn>(inner: &Arc<Inner>, id: u64, stream: S) -> io::Result<()> {
    if inner.stop.load(Ordering::SeqCst) {
        stream.shutdown_conn(Shutdown::Both);
        return Ok(());
    }
    let result = serve_connection(inner, id, &stream);
    if let Err(e) = &result {
        if e.kind() == io::ErrorKind::InvalidData || e.kind() == io::ErrorKind::NotFound {
            bump(&inner.stats.errors, 1);
        }
    }
    stream.shutdown_conn(Shutdown::Both);
    result
}

fn serve_connection<S: Conn>(inner: &Arc<Inner>, id: u64, stream: &S) -> io::Result<()> {
    let cfg = &inner.cfg;
    let size = inner.backend.size();
    let mut tflags = TFLAG_HAS_FLAGS
        | TFLAG_SEND_FLUSH
        | TFLAG_SEND_FUA
        | TFLAG_SEND_TRIM
        | TFLAG_SEND_WRITE_ZEROES
        | TFLAG_CAN_MULTI_CONN;
    if cfg.read_only {
        tflags |= TFLAG_READ_ONLY;
    }
    let ex = ExportInfo { name: &cfg.export_name, size, tflags, max_request: cfg.max_request };

    stream.read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut r = stream.clone_conn()?;
    let mut w = SockWriter(stream.clone_conn()?);
    match negotiate(&mut r, &mut w, &ex)? {
        Negotiated::Aborted => return Ok(()),
        Negotiated::Transmission { .. } => {}
    }
    stream.read_timeout(None)?;
    log::debug!("nbd: connection {id} in transmission, export size {size}");

    let shared = Arc::new(ConnShared {
        inner: inner.clone(),
        writer: Mutex::new(w),
        waker: stream.clone_conn()?,
        budget: Budget { used: Mutex::new(0), cv: Condvar::new(), limit: 2 * u64::from(cfg.max_request) },
        outstanding: Outstanding { set: Mutex::new(BTreeSet::new()), cv: Condvar::new() },
    });
    let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
    let max_batch = inner.backend.max_batch().clamp(1, MAX_BATCH);
    let rx = Arc::new(Mutex::new(Queue { rx, next: None, max_batch }));
    let mut workers = Vec::with_capacity(cfg.workers_per_connection);
    for n in 0..cfg.workers_per_connection {
        let (shared, rx) = (shared.clone(), rx.clone());
        let t = std::thread::Builder::new().name(format!("nbd-{id}-w{n}")).spawn(move || worker(&shared, &rx));
        match t {
            Ok(t) => workers.push(t),
            // Fewer workers still serve correctly, only with less overlap.
            Err(e) if !workers.is_empty() => log::warn!("nbd: worker spawn: {e}"),
            Err(e) => return Err(e),
        }
    }

    let limits = ExportLimits { size, read_only: cfg.read_only, max_request: cfg.max_request };
    let result = read_requests(&shared, BufReader::with_capacity(64 << 10, r), &tx, &limits);
    // Requests already queued still get their replies (spec: a DISC lets
    // in-flight requests finish) before the socket is closed.
    drop(tx);
    for t in workers {
        let _ = t.join();
    }
    result
}

fn read_requests<S: Conn>(
    shared: &ConnShared<S>,
    mut r: BufReader<S>,
    tx: &SyncSender<Job>,
    limits: &ExportLimits,
) -> io::Result<()> {
    let mut seq = 0u64;
    let mut hdr = [0u8; REQUEST_SIZE];
    loop {
        match r.read_exact(&mut hdr) {
            Ok(()) => {}
            // A client closing between requests is a (hard) disconnect,
            // not an error worth reporting.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let req = parse_request(&hdr).map_err(invalid)?;
        if req.command == CMD_DISC {
            return Ok(());
        }
        let fua = req.flags & CMD_FLAG_FUA != 0;
        let op = if req.command == CMD_WRITE {
            if req.len > ABSURD_PAYLOAD {
                return Err(invalid(format!("WRITE payload of {} bytes", req.len)));
            }
            if req.len > limits.max_request {
                discard(&mut r, u64::from(req.len))?;
                shared.reply_error(req.cookie, NBD_EINVAL)?;
                continue;
            }
            shared.budget.acquire(u64::from(req.len));
            let mut data = vec![0u8; req.len as usize];
            if let Err(e) = r.read_exact(&mut data) {
                shared.budget.release(u64::from(req.len));
                return Err(e);
            }
            if let Err(err) = check_request(&req, limits) {
                shared.budget.release(u64::from(req.len));
                shared.reply_error(req.cookie, err)?;
                continue;
            }
            Op::Write { offset: req.offset, data, fua }
        } else {
            if let Err(err) = check_request(&req, limits) {
                shared.reply_error(req.cookie, err)?;
                continue;
            }
            match req.command {
                CMD_READ => {
                    shared.budget.acquire(u64::from(req.len));
                    Op::Read { offset: req.offset, len: req.len }
                }
                CMD_FLUSH => Op::Flush,
                CMD_TRIM => Op::Trim { offset: req.offset, len: req.len, fua },
                CMD_WRITE_ZEROES => Op::WriteZeroes {
                    offset: req.offset,
                    len: req.len,
                    fua,
                    no_hole: req.flags & CMD_FLAG_NO_HOLE != 0,
                },
                // check_request accepts no other command.
                _ => return Err(invalid("unexpected command")),
            }
        };
        let charge = match &op {
            Op::Read { len, .. } => u64::from(*len),
            Op::Write { data, .. } => data.len() as u64,
            _ => 0,
        };
        shared.outstanding.begin(seq);
        let job = Job { seq, cookie: req.cookie, charge, op };
        seq += 1;
        // A client that waits for each reply (queue depth 1) has sent
        // nothing more and has nothing else in flight: run its request
        // here. Handing it to a worker would add a thread wake-up, which
        // costs more than the request itself on some machines (about
        // 48 µs where we measured, against 35 µs for an RMA read).
        if r.buffer().is_empty() && shared.outstanding.is_empty_but(job.seq) {
            let (seq, charge) = (job.seq, job.charge);
            execute(shared, job);
            shared.outstanding.end(seq);
            shared.budget.release(charge);
            continue;
        }
        if tx.send(job).is_err() {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "workers gone"));
        }
    }
}

/// The workers' end of a connection's job queue.
struct Queue {
    rx: Receiver<Job>,
    /// A job taken while gathering a batch it does not belong to: the next
    /// to leave the queue, so jobs still leave in sequence order (which
    /// [`Outstanding::wait_earlier`] relies on).
    next: Option<Job>,
    /// Most jobs taken at once (the backend's [`Backend::max_batch`]).
    max_batch: usize,
}

impl Queue {
    /// The next job, then up to `max_batch - 1` more of the same kind
    /// (READ or WRITE) that are queued right behind it, until they hold
    /// `MAX_BATCH_BYTES`; never waits for more than the first.
    fn take(&mut self) -> Option<Vec<Job>> {
        let first = match self.next.take() {
            Some(job) => job,
            None => self.rx.recv().ok()?,
        };
        let kind = batch_kind(&first.op);
        let mut batch = vec![first];
        if kind.is_none() || self.max_batch == 1 {
            return Some(batch);
        }
        let mut bytes = batch[0].charge;
        while batch.len() < self.max_batch && bytes < MAX_BATCH_BYTES {
            let Ok(job) = self.rx.try_recv() else { break };
            if batch_kind(&job.op) != kind {
                self.next = Some(job);
                break;
            }
            bytes += job.charge;
            batch.push(job);
        }
        Some(batch)
    }
}

/// Which requests may share a batch: READs with READs, WRITEs with WRITEs.
fn batch_kind(op: &Op) -> Option<u8> {
    match op {
        Op::Read { .. } => Some(0),
        Op::Write { .. } => Some(1),
        _ => None,
    }
}

fn worker<S: Conn>(shared: &ConnShared<S>, rx: &Mutex<Queue>) {
    loop {
        // A job held back in `next` by a worker gathering a batch is free
        // for any worker: the queue lock is held only while taking.
        let Some(mut batch) = lock(rx).take() else { return };
        let done: Vec<(u64, u64)> = batch.iter().map(|j| (j.seq, j.charge)).collect();
        if batch.len() == 1 {
            execute(shared, batch.pop().expect("one job"));
        } else if matches!(batch[0].op, Op::Read { .. }) {
            execute_reads(shared, batch);
        } else {
            execute_writes(shared, batch);
        }
        for (seq, charge) in done {
            shared.outstanding.end(seq);
            shared.budget.release(charge);
        }
    }
}

/// One result per request from a batch call: a panic, or a backend that
/// answered for fewer requests than it was given, is EIO for those left.
fn batch_results(what: &str, n: usize, f: impl FnOnce() -> Vec<io::Result<()>>) -> Vec<io::Result<()>> {
    let mut results = guarded(what, || Ok(f())).unwrap_or_default();
    if results.len() != n {
        log::error!("nbd: backend {what} answered {} of {n} requests", results.len());
    }
    results.resize_with(n, || Err(io::Error::other("no result from the backend")));
    results
}

/// A batch of READs: one backend call, then every reply in one send.
fn execute_reads<S: Conn>(shared: &ConnShared<S>, jobs: Vec<Job>) {
    let b = &*shared.inner.backend;
    let st = &shared.inner.stats;
    let mut reqs: Vec<(Vec<u8>, u64)> = jobs
        .iter()
        .map(|j| match j.op {
            Op::Read { offset, len } => (vec![0u8; len as usize], offset),
            _ => unreachable!("a READ batch holds only READs"),
        })
        .collect();
    let results = batch_results("read", reqs.len(), || b.read_many_at(&mut reqs));
    let headers: Vec<[u8; SIMPLE_REPLY_SIZE]> = jobs
        .iter()
        .zip(&results)
        .map(|(j, r)| match r {
            Ok(()) => encode_simple_reply(0, j.cookie),
            Err(e) => {
                log::debug!("nbd: backend error: {e}");
                bump(&st.errors, 1);
                encode_simple_reply(nbd_errno(e), j.cookie)
            }
        })
        .collect();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * jobs.len());
    for ((h, r), (data, _)) in headers.iter().zip(&results).zip(&reqs) {
        parts.push(h);
        if r.is_ok() {
            bump(&st.reads, 1);
            bump(&st.bytes_read, data.len() as u64);
            parts.push(data);
        }
    }
    // A send failure has already shut the socket down; the reader notices.
    let _ = shared.send_parts(&parts);
}

/// A batch of WRITEs: one backend call, one flush if any asked for FUA
/// (a flush covers every completed write), then every reply in one send.
fn execute_writes<S: Conn>(shared: &ConnShared<S>, jobs: Vec<Job>) {
    let b = &*shared.inner.backend;
    let st = &shared.inner.stats;
    let reqs: Vec<(&[u8], u64)> = jobs
        .iter()
        .map(|j| match &j.op {
            Op::Write { offset, data, .. } => (&data[..], *offset),
            _ => unreachable!("a WRITE batch holds only WRITEs"),
        })
        .collect();
    let results = batch_results("write", reqs.len(), || b.write_many_at(&reqs));
    let fua = |j: &Job| matches!(j.op, Op::Write { fua: true, .. });
    let flushed = if jobs.iter().zip(&results).any(|(j, r)| fua(j) && r.is_ok()) {
        guarded("flush", || b.flush())
    } else {
        Ok(())
    };
    let mut replies = Vec::with_capacity(jobs.len() * SIMPLE_REPLY_SIZE);
    for ((j, r), (data, _)) in jobs.iter().zip(&results).zip(&reqs) {
        let r = match (r, &flushed) {
            (Ok(()), Err(e)) if fua(j) => Err(e),
            (r, _) => r.as_ref().map(|_| ()),
        };
        match r {
            Ok(()) => {
                bump(&st.writes, 1);
                bump(&st.bytes_written, data.len() as u64);
                replies.extend_from_slice(&encode_simple_reply(0, j.cookie));
            }
            Err(e) => {
                log::debug!("nbd: backend error: {e}");
                bump(&st.errors, 1);
                replies.extend_from_slice(&encode_simple_reply(nbd_errno(e), j.cookie));
            }
        }
    }
    drop(reqs);
    drop(jobs);
    let _ = shared.send_parts(&[&replies]);
}

/// Map a backend failure onto the few errors NBD can carry.
fn nbd_errno(e: &io::Error) -> u32 {
    match e.raw_os_error() {
        Some(libc_errno) if libc_errno == libc::ENOSPC => NBD_ENOSPC,
        Some(libc_errno) if libc_errno == libc::ENOMEM => NBD_ENOMEM,
        Some(libc_errno) if libc_errno == libc::EPERM || libc_errno == libc::EROFS => NBD_EPERM,
        _ => NBD_EIO,
    }
}

/// Run a backend call; a panicking backend becomes EIO for this request
/// instead of a dead worker and a client waiting forever.
fn guarded<T>(what: &str, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            log::error!("nbd: backend panicked in {what}");
            Err(io::Error::other("backend panicked"))
        }
    }
}

fn execute<S: Conn>(shared: &ConnShared<S>, job: Job) {
    let b = &*shared.inner.backend;
    let st = &shared.inner.stats;
    let cookie = job.cookie;
    let done = |r: io::Result<()>, counter: &AtomicU64| match r {
        Ok(()) => {
            bump(counter, 1);
            shared.send(&encode_simple_reply(0, cookie))
        }
        Err(e) => {
            log::debug!("nbd: backend error: {e}");
            shared.reply_error(cookie, nbd_errno(&e))
        }
    };
    let flush_if = |fua: bool| {
        if fua {
            guarded("flush", || b.flush())
        } else {
            Ok(())
        }
    };
    // A send failure has already shut the socket down; the reader notices.
    let _ = match job.op {
        Op::Read { offset, len } => {
            // The reply header sits in front of the data so the whole reply
            // leaves in one write.
            let mut buf = vec![0u8; SIMPLE_REPLY_SIZE + len as usize];
            match guarded("read", || b.read_at(&mut buf[SIMPLE_REPLY_SIZE..], offset)) {
                Ok(()) => {
                    buf[..SIMPLE_REPLY_SIZE].copy_from_slice(&encode_simple_reply(0, cookie));
                    bump(&st.reads, 1);
                    bump(&st.bytes_read, u64::from(len));
                    shared.send(&buf)
                }
                Err(e) => shared.reply_error(cookie, nbd_errno(&e)),
            }
        }
        Op::Write { offset, data, fua } => {
            let r = guarded("write", || b.write_at(&data, offset)).and_then(|()| flush_if(fua));
            if r.is_ok() {
                bump(&st.bytes_written, data.len() as u64);
            }
            drop(data);
            done(r, &st.writes)
        }
        Op::Flush => {
            shared.outstanding.wait_earlier(job.seq);
            done(guarded("flush", || b.flush()), &st.flushes)
        }
        Op::Trim { offset, len, fua } => {
            let r = guarded("trim", || b.trim(offset, u64::from(len))).and_then(|()| flush_if(fua));
            done(r, &st.trims)
        }
        Op::WriteZeroes { offset, len, fua, no_hole } => {
            let r = guarded("write_zeroes", || {
                let (mut off, end) = (offset, offset + u64::from(len));
                while off < end {
                    let n = (end - off).min(ZEROES.len() as u64) as usize;
                    b.write_at(&ZEROES[..n], off)?;
                    off += n as u64;
                }
                // Without NO_HOLE the client allows the range to become a
                // hole, so the backend may release it.
                if !no_hole && len > 0 {
                    b.trim(offset, u64::from(len))?;
                }
                Ok(())
            })
            .and_then(|()| flush_if(fua));
            done(r, &st.zero_writes)
        }
    };
}
