//! Shared test fixtures: an in-memory backend, a server on a socket in a
//! private temp dir, a bounded runner for the real NBD tools and a tiny raw
//! NBD client written independently of the crate's encoders.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vsci_nbd::{Backend, Server, ServerConfig};

pub struct MemBackend {
    pub data: RwLock<Vec<u8>>,
    pub flushes: AtomicU64,
    pub trims: AtomicU64,
    /// Order of completed backend events, for ordering assertions.
    pub log: Mutex<Vec<String>>,
    /// Writes at this offset sleep first (to test flush ordering).
    pub slow_write_at: Option<(u64, Duration)>,
}

impl MemBackend {
    pub fn new(size: usize) -> Arc<Self> {
        Arc::new(Self::with(size, None))
    }
    pub fn with(size: usize, slow_write_at: Option<(u64, Duration)>) -> Self {
        MemBackend {
            data: RwLock::new(vec![0; size]),
            flushes: AtomicU64::new(0),
            trims: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            slow_write_at,
        }
    }
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().unwrap().clone()
    }
}

impl Backend for MemBackend {
    fn size(&self) -> u64 {
        self.data.read().unwrap().len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let d = self.data.read().unwrap();
        let o = offset as usize;
        buf.copy_from_slice(&d[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        if let Some((at, delay)) = self.slow_write_at {
            if at == offset {
                std::thread::sleep(delay);
            }
        }
        {
            let mut d = self.data.write().unwrap();
            let o = offset as usize;
            d[o..o + data.len()].copy_from_slice(data);
        }
        self.log.lock().unwrap().push(format!("write {offset}"));
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap().push("flush".into());
        Ok(())
    }
    fn trim(&self, _offset: u64, _len: u64) -> io::Result<()> {
        self.trims.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "vsci-nbd-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running server; dropping it stops the server and removes the socket.
pub struct TestServer {
    pub server: Arc<Server>,
    pub sock: PathBuf,
    thread: Option<JoinHandle<io::Result<()>>>,
    pub dir: TempDir,
}

impl TestServer {
    pub fn start<B: Backend>(backend: Arc<B>, cfg: ServerConfig) -> TestServer {
        let dir = TempDir::new("srv");
        let sock = dir.0.join("nbd.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let server = Arc::new(Server::new(backend, cfg));
        let s = server.clone();
        let thread = std::thread::spawn(move || s.serve_unix(listener));
        TestServer { server, sock, thread: Some(thread), dir }
    }
    pub fn url(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock.display())
    }
    /// Stop and wait (bounded) for serve_unix to return.
    pub fn stop(&mut self) -> Option<io::Result<()>> {
        self.server.stop();
        let t = self.thread.take()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !t.is_finished() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(t.join().expect("serve thread panicked"))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

pub fn have_tool(name: &str) -> bool {
    let ok = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("SKIP: `{name}` is not installed; test skipped");
    }
    ok
}

/// Kills the child if the test unwinds before it was waited for.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub struct ToolOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    pub fn text(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// Run a tool with a deadline; the child is killed on timeout or panic.
pub fn run_tool(prog: &str, args: &[&str], timeout: Duration) -> ToolOutput {
    let child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {prog}: {e}"));
    let mut guard = ChildGuard(Some(child));
    let c = guard.0.as_mut().unwrap();
    let mut out = c.stdout.take().unwrap();
    let mut err = c.stderr.take().unwrap();
    // Drain both pipes on threads so a chatty tool cannot block on a full pipe.
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            drop(guard);
            panic!("{prog} {args:?} timed out after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    guard.0 = None;
    let o = ToolOutput { success: status.success(), stdout: to.join().unwrap(), stderr: te.join().unwrap() };
    eprintln!("$ {prog} {args:?} -> {status}\n{}", o.text().trim());
    o
}

// --- raw client, spelled out independently of vsci_nbd::proto ---

pub const NBDMAGIC: &[u8; 8] = b"NBDMAGIC";
pub const IHAVEOPT: &[u8; 8] = b"IHAVEOPT";
pub const OPT_REPLY_MAGIC: u64 = 0x3e889045565a9;
pub const REQ_MAGIC: u32 = 0x25609513;
pub const REPLY_MAGIC: u32 = 0x67446698;
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = 0x8000_0001;
pub const REP_ERR_INVALID: u32 = 0x8000_0003;
pub const REP_ERR_UNKNOWN: u32 = 0x8000_0006;

pub fn connect(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Read the greeting and send client flags; returns the handshake flags.
pub fn greet(s: &mut UnixStream, client_flags: u32) -> u16 {
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    assert_eq!(&g[0..8], NBDMAGIC);
    assert_eq!(&g[8..16], IHAVEOPT);
    s.write_all(&client_flags.to_be_bytes()).unwrap();
    u16::from_be_bytes([g[16], g[17]])
}

pub fn send_option(s: &mut UnixStream, opt: u32, data: &[u8]) {
    let mut b = Vec::new();
    b.extend_from_slice(IHAVEOPT);
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).unwrap();
}

/// One option reply: (option, reply type, data).
pub fn read_option_reply(s: &mut UnixStream) -> (u32, u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u64::from_be_bytes(h[0..8].try_into().unwrap()), OPT_REPLY_MAGIC);
    let opt = u32::from_be_bytes(h[8..12].try_into().unwrap());
    let ty = u32::from_be_bytes(h[12..16].try_into().unwrap());
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
    let mut d = vec![0u8; len as usize];
    s.read_exact(&mut d).unwrap();
    (opt, ty, d)
}

pub fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

pub struct Info {
    pub size: u64,
    pub tflags: u16,
    pub block: Option<(u32, u32, u32)>,
}

/// Send NBD_OPT_GO (7) or NBD_OPT_INFO (6) and collect replies to the ACK;
/// Err(reply type) on an error reply.
pub fn go(s: &mut UnixStream, opt: u32, name: &str) -> Result<Info, u32> {
    send_option(s, opt, &go_data(name, &[3]));
    let mut info = Info { size: 0, tflags: 0, block: None };
    loop {
        let (o, ty, d) = read_option_reply(s);
        assert_eq!(o, opt);
        match ty {
            REP_ACK => return Ok(info),
            REP_INFO => match u16::from_be_bytes([d[0], d[1]]) {
                0 => {
                    info.size = u64::from_be_bytes(d[2..10].try_into().unwrap());
                    info.tflags = u16::from_be_bytes([d[10], d[11]]);
                }
                3 => {
                    let g = |i: usize| u32::from_be_bytes(d[i..i + 4].try_into().unwrap());
                    info.block = Some((g(2), g(6), g(10)));
                }
                _ => {}
            },
            t if t & 0x8000_0000 != 0 => return Err(t),
            t => panic!("unexpected reply type {t}"),
        }
    }
}

/// Connect and negotiate into transmission with NBD_OPT_GO.
pub fn open(path: &Path, name: &str) -> (UnixStream, Info) {
    let mut s = connect(path);
    greet(&mut s, 3);
    let info = go(&mut s, 7, name).expect("NBD_OPT_GO failed");
    (s, info)
}

pub fn send_request(s: &mut UnixStream, flags: u16, cmd: u16, cookie: u64, offset: u64, len: u32, payload: &[u8]) {
    let mut b = Vec::with_capacity(28 + payload.len());
    b.extend_from_slice(&REQ_MAGIC.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&cmd.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(payload);
    s.write_all(&b).unwrap();
}

/// (error, cookie) of the next simple reply; the caller reads any data.
pub fn read_reply(s: &mut UnixStream) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[0..4].try_into().unwrap()), REPLY_MAGIC);
    (u32::from_be_bytes(h[4..8].try_into().unwrap()), u64::from_be_bytes(h[8..16].try_into().unwrap()))
}

/// READ (cookie 1), returning the error or the data.
pub fn raw_read(s: &mut UnixStream, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
    send_request(s, 0, 0, 0x1111, offset, len, &[]);
    let (err, cookie) = read_reply(s);
    assert_eq!(cookie, 0x1111);
    if err != 0 {
        return Err(err);
    }
    let mut d = vec![0u8; len as usize];
    s.read_exact(&mut d).unwrap();
    Ok(d)
}

/// A one-request command without data in the reply; returns the error.
pub fn raw_cmd(s: &mut UnixStream, flags: u16, cmd: u16, offset: u64, len: u32, payload: &[u8]) -> u32 {
    send_request(s, flags, cmd, 0x2222, offset, len, payload);
    let (err, cookie) = read_reply(s);
    assert_eq!(cookie, 0x2222);
    err
}

/// True once the peer has closed the connection (EOF or reset).
pub fn closed_by_server(s: &mut UnixStream) -> bool {
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue, // e.g. an error reply before the close
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => return false,
            Err(e) => panic!("unexpected read error {e}"),
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift64*), no extra dependency.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    v.truncate(len);
    v
}
