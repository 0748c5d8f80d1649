//! Shared pieces of the system tests: where the built binaries are, a fresh
//! `vscid` per test (killed and cleaned up by `Drop`, also on panic), child
//! processes with captured output and deadlines, and the daemon's state as
//! `vsci status --json` and `/proc/<pid>/fd` show it.
//!
//! Deadlines only bound hangs (a hang fails the test instead of blocking the
//! run); no test asserts how fast anything is.
#![allow(dead_code)]

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a C test program or an example may run before it counts as hung.
pub const PROGRAM_TIMEOUT: Duration = Duration::from_secs(300);
/// How long to wait for a process to print an expected line.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for the daemon's state to settle after clients go away.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The staged build: `$VSCI_BUILD`, else `<workspace>/build`.
pub fn build_dir() -> PathBuf {
    match std::env::var_os("VSCI_BUILD") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build"),
    }
}

/// A built file under the build directory; panics with a hint when missing.
pub fn built(rel: &str) -> PathBuf {
    let p = build_dir().join(rel);
    assert!(p.exists(), "{} does not exist: run `make` first (or set VSCI_BUILD)", p.display());
    p
}

/// Is QEMU installed? Says SKIPPED for the calling test when it is not.
pub fn have_qemu() -> bool {
    if vsci_vm::run::find_qemu().is_some() {
        return true;
    }
    println!("SKIPPED: qemu-system-x86_64 is not installed (scripts/install-deps.sh installs it)");
    false
}

/// Builds the guest image (or finds it cached) with `vsci vm image`, once
/// per test binary. Tests that boot guests inside a network namespace call
/// it first: the image build downloads the guest kernel from the package
/// archive, which a namespace cannot reach.
pub fn guest_image() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        run(
            "vsci vm image",
            Command::new(built("bin/vsci")).args(["vm", "image"]).stdin(Stdio::null()),
            Duration::from_secs(900),
        )
        .assert_success();
    });
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

/// The processes in network namespace `ns` (`ip netns pids`; none once it
/// is gone). Panics if `ip` cannot be run.
pub fn netns_pids(ns: &str) -> Vec<i32> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip netns pids {ns}: {e}"));
    String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// What `Drop` would have cleaned up, when the test process is told to stop
/// (SIGTERM from a runner's timeout, SIGINT, SIGHUP) and so never runs it:
/// every network namespace it made (`vsci-st{pid}c…`, see netns/mod.rs),
/// with the processes in them, and every temporary directory
/// (`vsci-st-{pid}-…`). Then it dies of the signal, as it would have.
/// Installed with the first temporary directory, which every test makes.
pub fn clean_up_on_termination() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("warning: no clean-up on SIGTERM ({e})");
                return;
            }
        };
        thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let pid = std::process::id();
                eprintln!("test process got signal {sig}: removing its namespaces and files");
                let ns_prefix = format!("vsci-st{pid}c");
                let list = Command::new("ip").args(["netns", "list"]).output();
                let names: Vec<String> = list
                    .map(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .lines()
                            .filter_map(|l| l.split_whitespace().next().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let ours: Vec<&String> = names.iter().filter(|n| n.starts_with(&ns_prefix)).collect();
                for ns in &ours {
                    for p in netns_pids(ns) {
                        // SAFETY: kill has no memory effects; the pid came from the kernel's list.
                        unsafe { libc::kill(p, libc::SIGKILL) };
                    }
                }
                for ns in &ours {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while !netns_pids(ns).is_empty() && Instant::now() < deadline {
                        thread::sleep(Duration::from_millis(20));
                    }
                    let _ = Command::new("ip").args(["netns", "del", ns]).output();
                }
                let dir_prefix = format!("vsci-st-{pid}-");
                if let Ok(rd) = fs::read_dir(std::env::temp_dir()) {
                    for e in rd.flatten() {
                        if e.file_name().to_string_lossy().starts_with(&dir_prefix) {
                            let _ = fs::remove_dir_all(e.path());
                        }
                    }
                }
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        });
    });
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        clean_up_on_termination();
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("vsci-st-{}-{}-{}", std::process::id(), n, tag));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Nodes 1 and 2 of one cluster, both on loopback (no namespaces, so no
/// root needed), each started with `extra` options. The TempDir holds the
/// cluster file and key; keep it as long as the nodes.
pub fn loopback_pair(extra: &[&str]) -> (TempDir, Daemon, Daemon) {
    let dir = TempDir::new("loopback-pair");
    fs::write(dir.path.join("cluster.key"), "6c6f6f706261636b2070616972206f662074776f206e6f6465\n").unwrap();
    let port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cluster = dir.path.join("cluster.toml");
    fs::write(
        &cluster,
        format!("key_file = \"cluster.key\"\n\n[[node]]\nid = 1\naddress = \"127.0.0.1:{}\"\n\n[[node]]\nid = 2\naddress = \"127.0.0.1:{}\"\n", port(), port()),
    )
    .unwrap();
    let cfg = cluster.to_string_lossy().to_string();
    let mut args = vec!["--config", &cfg];
    args.extend_from_slice(extra);
    let n1 = Daemon::start_with(1, &args);
    let n2 = Daemon::start_with(2, &args);
    (dir, n1, n2)
}

/// Send a signal to a process.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Poll `f` every 20 ms until it returns Some, or panic with `what` after `timeout`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

// ---- child processes ------------------------------------------------------

/// What a finished process left.
pub struct Output {
    pub name: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn describe(&self) -> String {
        format!(
            "{} ended with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.name,
            describe_status(self.status),
            tail(&self.stdout, 12000),
            tail(&self.stderr, 12000)
        )
    }

    /// Panics (showing all output) unless the process exited 0.
    pub fn assert_success(&self) -> &Self {
        assert!(self.status.success(), "{}", self.describe());
        self
    }

    /// Panics (showing all output) unless stdout or stderr contains `needle`.
    pub fn assert_contains(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle) || self.stderr.contains(needle),
            "expected \"{needle}\" in the output of {}",
            self.describe()
        );
        self
    }
}

pub fn describe_status(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => format!("{s:?}"),
    }
}

fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A running child with its stdout and stderr captured by reader threads.
/// Dropping it kills the process if it is still running.
pub struct Proc {
    pub name: String,
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    lines: mpsc::Receiver<String>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

fn reader<R: Read + Send + 'static>(
    r: R,
    sink: Arc<Mutex<String>>,
    lines: Option<mpsc::Sender<String>>,
) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut br = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match br.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    sink.lock().unwrap().push_str(&line);
                    if let Some(tx) = &lines {
                        let _ = tx.send(line.trim_end_matches('\n').to_string());
                    }
                }
            }
        }
    })
}

impl Proc {
    /// Start `cmd` with piped stdout/stderr (stdin as the command set it,
    /// else /dev/null).
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        // (stdin is whatever the caller set; Daemon::client sets /dev/null.)
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let r1 = reader(child.stdout.take().unwrap(), stdout.clone(), Some(tx));
        let r2 = reader(child.stderr.take().unwrap(), stderr.clone(), None);
        Proc { name: name.to_string(), child, stdout, stderr, lines: rx, readers: vec![r1, r2], status: None }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: i32) {
        if self.status.is_none() {
            signal(self.pid(), sig);
        }
    }

    fn snapshot(&self) -> String {
        format!(
            "--- stdout of {} ---\n{}\n--- stderr ---\n{}",
            self.name,
            tail(&self.stdout.lock().unwrap(), 12000),
            tail(&self.stderr.lock().unwrap(), 12000)
        )
    }

    /// What the process wrote to stdout so far.
    pub fn stdout_text(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// What the process wrote to stderr so far (its log).
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Wait until stderr has `needle` (a log line); panics after `timeout`.
    pub fn wait_stderr(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.stderr.lock().unwrap().contains(needle) {
            if Instant::now() > deadline {
                panic!("{}: no \"{needle}\" in its log after {timeout:?}\n{}", self.name, self.snapshot());
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until stdout has a line containing `needle`; returns the line.
    pub fn wait_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if Instant::now() > deadline {
                        panic!("{}: no line with \"{needle}\" after {timeout:?}\n{}", self.name, self.snapshot());
                    }
                    if let Ok(Some(st)) = self.child.try_wait() {
                        // Give the reader a moment to deliver what is left.
                        thread::sleep(Duration::from_millis(100));
                        while let Ok(line) = self.lines.try_recv() {
                            if line.contains(needle) {
                                return line;
                            }
                        }
                        self.status = Some(st);
                        panic!(
                            "{} ended ({}) before printing \"{needle}\"\n{}",
                            self.name,
                            describe_status(st),
                            self.snapshot()
                        );
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let st = self.child.wait().ok();
                    panic!(
                        "{} closed its output ({}) before printing \"{needle}\"\n{}",
                        self.name,
                        st.map(describe_status).unwrap_or_default(),
                        self.snapshot()
                    );
                }
            }
        }
    }

    /// The exit status if the process has ended (without waiting).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.status = Some(st);
            }
        }
        self.status
    }

    /// Wait for the process to end; on timeout kill it and panic.
    pub fn wait(mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = self.status {
                break st;
            }
            match self.child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) => {}
                Err(e) => panic!("waiting for {}: {e}", self.name),
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{} still running after {timeout:?}; killed it\n{}", self.name, self.snapshot());
            }
            thread::sleep(Duration::from_millis(10));
        };
        self.status = Some(status);
        // The pipes close when the process (and anything it forked) is gone.
        let readers = std::mem::take(&mut self.readers);
        let until = Instant::now() + Duration::from_secs(10);
        for r in readers {
            while !r.is_finished() && Instant::now() < until {
                thread::sleep(Duration::from_millis(10));
            }
            if r.is_finished() {
                let _ = r.join();
            }
        }
        Output {
            name: self.name.clone(),
            status,
            stdout: self.stdout.lock().unwrap().clone(),
            stderr: self.stderr.lock().unwrap().clone(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            if let Ok(None) = self.child.try_wait() {
                let _ = self.child.kill();
            }
            let _ = self.child.wait();
        }
    }
}

/// Run a command to completion with a deadline.
pub fn run(name: &str, cmd: &mut Command, timeout: Duration) -> Output {
    Proc::spawn(name, cmd).wait(timeout)
}

// ---- the daemon -------------------------------------------------------------

/// Counts of the daemon's objects, from `vsci status --json` (array lengths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub clients: usize,
    pub segments: usize,
    pub connections: usize,
    pub interrupts: usize,
}

/// A `vscid` running in the foreground on its own socket.  Dropping it kills
/// the daemon (SIGKILL if still running) and removes its directory.
pub struct Daemon {
    child: Option<Child>,
    pub socket: PathBuf,
    pub node_id: u32,
    pub log: PathBuf,
    dir: Option<TempDir>,
}

impl Daemon {
    /// A fresh daemon in a new temporary directory.
    pub fn start(node_id: u32) -> Daemon {
        Daemon::start_with(node_id, &[])
    }

    /// A fresh daemon with extra command-line options.
    pub fn start_with(node_id: u32, args: &[&str]) -> Daemon {
        let dir = TempDir::new(&format!("node{node_id}"));
        let socket = dir.path.join("vscid.sock");
        let mut d = Daemon::spawn_at(&socket, node_id, args);
        d.wait_ready();
        d.dir = Some(dir);
        d
    }

    /// A daemon on a given socket path (whose directory the caller owns).
    pub fn start_at(socket: &Path, node_id: u32) -> Daemon {
        let mut d = Daemon::spawn_at(socket, node_id, &[]);
        d.wait_ready();
        d
    }

    /// Start without waiting for the socket.
    pub fn spawn_at(socket: &Path, node_id: u32, args: &[&str]) -> Daemon {
        Daemon::spawn_wrapped(socket, node_id, &[], args)
    }

    /// A fresh daemon started through `wrapper` (a program that execs the
    /// rest of its command line, e.g. `prlimit --nofile=512:512 --`).
    pub fn start_wrapped(node_id: u32, wrapper: &[&str], args: &[&str]) -> Daemon {
        let dir = TempDir::new(&format!("node{node_id}"));
        let socket = dir.path.join("vscid.sock");
        let mut d = Daemon::spawn_wrapped(&socket, node_id, wrapper, args);
        d.wait_ready();
        d.dir = Some(dir);
        d
    }

    pub fn spawn_wrapped(socket: &Path, node_id: u32, wrapper: &[&str], args: &[&str]) -> Daemon {
        Daemon::spawn_program(&built("bin/vscid"), socket, node_id, wrapper, args)
    }

    /// As `spawn_wrapped`, running the vscid at `vscid` (e.g. a copy from
    /// `Users::stage` that another user can reach).
    pub fn spawn_program(vscid: &Path, socket: &Path, node_id: u32, wrapper: &[&str], args: &[&str]) -> Daemon {
        let log = socket.with_extension(format!("node{node_id}.log"));
        let f = File::create(&log).expect("create daemon log");
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(vscid);
                c
            }
            None => Command::new(vscid),
        };
        let child = cmd
            .arg("--node-id")
            .arg(node_id.to_string())
            .arg("--socket")
            .arg(socket)
            .args(args)
            .env_remove("VSCI_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::from(f.try_clone().unwrap()))
            .stderr(Stdio::from(f))
            .spawn()
            .expect("start vscid");
        Daemon { child: Some(child), socket: socket.to_path_buf(), node_id, log, dir: None }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon was reaped").id()
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// None while running; the exit status once it ended.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn assert_running(&mut self) {
        if let Some(st) = self.try_exit() {
            panic!("vscid ended with {}\n--- log ---\n{}", describe_status(st), self.log_text());
        }
    }

    /// Wait until the control socket accepts a connection.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // A daemon that died while starting cannot become ready.
            if let Some(st) = self.try_exit() {
                panic!("vscid exited ({}) while starting\n--- log ---\n{}", describe_status(st), self.log_text());
            }
            if let Some(fd) = seqpacket_connect(&self.socket) {
                // SAFETY: fd is a descriptor we own.
                unsafe { libc::close(fd) };
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "vscid did not accept on {} within 30 s\n--- log ---\n{}",
                    self.socket.display(),
                    self.log_text()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Environment for a client of this daemon.
    pub fn client(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.env("VSCI_SOCKET", &self.socket)
            .env("VSCI_TEST_NODE_ID", self.node_id.to_string())
            .env_remove("VSCI_WAIT")
            .env_remove("VSCI_LOG")
            .stdin(Stdio::null());
        c
    }

    /// `vsci status --socket S --json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let out = run(
            "vsci status",
            Command::new(built("bin/vsci"))
                .arg("status")
                .arg("--socket")
                .arg(&self.socket)
                .arg("--json")
                .stdin(Stdio::null()),
            Duration::from_secs(60),
        );
        out.assert_success();
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("vsci status --json printed no JSON ({e}):\n{}", out.stdout))
    }

    pub fn counts(&self) -> Counts {
        let v = self.status();
        // `totals` counts everything; the lists stop at 100 entries.
        let len = |k: &str| -> usize {
            if let Some(n) = v.get("totals").and_then(|t| t.get(k)).and_then(|n| n.as_u64()) {
                return n as usize;
            }
            v.get(k)
                .and_then(|a| a.as_array())
                .map(|a| a.len())
                .unwrap_or_else(|| panic!("no array \"{k}\" in vsci status --json:\n{v:#}"))
        };
        Counts {
            clients: len("clients"),
            segments: len("segments"),
            connections: len("connections"),
            interrupts: len("interrupts"),
        }
    }

    /// Wait until the counts equal `want` (a leak fails after SETTLE_TIMEOUT).
    pub fn wait_counts(&self, want: Counts, what: &str) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let c = self.counts();
            if c == want {
                return;
            }
            if Instant::now() > deadline {
                panic!("{what}: the daemon's objects did not return to {want:?}; still {c:?}\n{:#}", self.status());
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Open descriptors of the daemon process.
    pub fn fd_count(&self) -> usize {
        fs::read_dir(format!("/proc/{}/fd", self.pid())).expect("read /proc/<vscid>/fd").count()
    }

    pub fn fd_list(&self) -> String {
        let mut v: Vec<String> = fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| {
                        let t = fs::read_link(e.path()).map(|p| p.display().to_string()).unwrap_or_default();
                        format!("{} -> {t}", e.file_name().to_string_lossy())
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v.join("\n")
    }

    /// The fd count once it stops changing (after a status query has closed).
    pub fn settled_fd_count(&self) -> usize {
        let mut prev = self.fd_count();
        for _ in 0..50 {
            thread::sleep(Duration::from_millis(50));
            let now = self.fd_count();
            if now == prev {
                return now;
            }
            prev = now;
        }
        prev
    }

    /// Wait until the fd count is back to `want`.
    pub fn wait_fd_count(&self, want: usize, what: &str) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let n = self.fd_count();
            if n == want {
                return;
            }
            if Instant::now() > deadline {
                panic!("{what}: vscid has {n} open descriptors, baseline {want}:\n{}", self.fd_list());
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn signal(&self, sig: i32) {
        signal(self.pid(), sig);
    }

    /// Wait for the daemon to exit and reap it.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_exit() {
                return st;
            }
            if Instant::now() > deadline {
                panic!("vscid still running {timeout:?} after being asked to stop\n--- log ---\n{}", self.log_text());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL and reap (the socket file stays behind, as after a crash).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
        if thread::panicking() {
            eprintln!(
                "--- vscid node {} log ({}) ---\n{}",
                self.node_id,
                self.log.display(),
                tail(&self.log_text(), 20000)
            );
        }
        // The TempDir (if any) removes the socket, lock and log files.
    }
}

// ---- raw control-socket access ----------------------------------------------

/// Connect a SOCK_SEQPACKET socket to `path`; None if nobody accepts.
pub fn seqpacket_connect(path: &Path) -> Option<i32> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        panic!("socket path too long: {}", path.display());
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (i, b) in bytes.iter().enumerate() {
        addr.sun_path[i] = *b as libc::c_char;
    }
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket(AF_UNIX, SOCK_SEQPACKET): {}", std::io::Error::last_os_error());
    // SAFETY: addr is a valid sockaddr_un and the length matches it.
    let r = unsafe {
        libc::connect(
            fd,
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// Send one packet, optionally with descriptors attached (SCM_RIGHTS).
pub fn send_packet(fd: i32, data: &[u8], fds: &[i32]) -> std::io::Result<()> {
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: msghdr is plain data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let mut cbuf = vec![0u8; 256];
    if !fds.is_empty() {
        let payload = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure computations.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        assert!(space <= cbuf.len());
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` writable bytes, enough for one
        // cmsghdr carrying `fds`.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(c), payload as usize);
        }
    }
    // SAFETY: msg describes valid buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Read until the peer closes the connection (EOF or reset).  Returns the
/// number of bytes the daemon sent before closing; panics if it stays open.
pub fn expect_dropped(fd: i32, timeout: Duration, what: &str) -> usize {
    let deadline = Instant::now() + timeout;
    let mut total = 0;
    let mut buf = vec![0u8; 1 << 17];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            panic!("{what}: the daemon kept the connection open for {timeout:?}");
        }
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as i32) };
        if r <= 0 {
            continue;
        }
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT) };
        if n == 0 {
            return total;
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => continue,
                Some(libc::ECONNRESET) | Some(libc::EPIPE) => return total,
                _ => panic!("{what}: recv: {e}"),
            }
        }
        total += n as usize;
    }
}

pub fn close_fd(fd: i32) {
    // SAFETY: the caller owns fd.
    unsafe { libc::close(fd) };
}

// ---- temporary users -------------------------------------------------------

/// A temporary group and two users: `member` (in the group) and `outsider`.
///
/// The users do not run the built programs where they are: the checkout may
/// sit under a directory they cannot traverse (a clone under `mktemp -d`,
/// mode 0700). [`Users::stage`] copies a built program, and `Users::new`
/// libsisci.so, into a directory under the system temp dir that everyone
/// can traverse (removed on drop); [`Users::as_user`] runs the copy with
/// `LD_LIBRARY_PATH` at the copied library (the programs' rpath names the
/// build directory, which the users may not reach).
pub struct Users {
    pub group: String,
    pub gid: u32,
    pub member: String,
    pub outsider: String,
    stage: TempDir,
}

fn tool(args: &[&str]) -> bool {
    std::process::Command::new(args[0]).args(&args[1..]).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Copy `from` to `to` (creating its directory) with mode 0755, unless
/// already there.
fn copy_for_everyone(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if to.exists() {
        return;
    }
    let dir = to.parent().expect("a file in a directory");
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    // Copied under another name and renamed, so nobody runs half a file.
    let part = to.with_extension("part");
    fs::copy(from, &part).unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), part.display()));
    fs::set_permissions(&part, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&part, to).unwrap();
}

impl Users {
    pub fn new() -> Option<Users> {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: creating users needs root");
            return None;
        }
        // The users run copies of the built programs from the temp dir,
        // and reach the daemons' sockets there: that much must let others
        // through and allow programs to run.
        let stage = TempDir::new("users");
        fs::set_permissions(&stage.path, fs::Permissions::from_mode(0o755)).unwrap();
        let tmp = fs::canonicalize(&stage.path).expect("the staging directory exists");
        for dir in tmp.ancestors() {
            let mode = fs::metadata(dir).map(|m| m.permissions().mode()).unwrap_or(0);
            assert!(
                mode & 0o001 != 0,
                "{} (mode {:o}) does not let other users through, and this test runs programs as other users \
                 from copies (and against sockets) under {}: set TMPDIR to a directory every user can traverse",
                dir.display(),
                mode & 0o7777,
                std::env::temp_dir().display()
            );
        }
        let c = std::ffi::CString::new(tmp.as_os_str().as_bytes()).unwrap();
        // SAFETY: statvfs is plain data; all-zero is valid.
        let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: c is a valid C string and sv a writable statvfs.
        if unsafe { libc::statvfs(c.as_ptr(), &mut sv) } == 0 {
            assert!(
                sv.f_flag & libc::ST_NOEXEC == 0,
                "{} is on a noexec mount, and this test runs copies of the built programs from there as other users: \
                 set TMPDIR to a directory on a filesystem that allows programs to run",
                tmp.display()
            );
        }
        copy_for_everyone(&built("lib/libsisci.so"), &stage.path.join("lib/libsisci.so"));
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let tag = format!("{}{}", std::process::id() % 100000, NEXT.fetch_add(1, Ordering::SeqCst));
        let u = Users {
            group: format!("vscig{tag}"),
            gid: 0,
            member: format!("vscim{tag}"),
            outsider: format!("vscio{tag}"),
            stage,
        };
        u.remove(); // left over from a run that was killed
        assert!(tool(&["groupadd", &u.group]), "groupadd {}", u.group);
        let mut u = u;
        u.gid = group_gid(&u.group).expect("gid of the new group");
        assert!(
            tool(&["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", "-G", &u.group, &u.member]),
            "useradd {}",
            u.member
        );
        assert!(tool(&["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", &u.outsider]), "useradd {}", u.outsider);
        Some(u)
    }

    fn remove(&self) {
        let _ = tool(&["userdel", &self.member]);
        let _ = tool(&["userdel", &self.outsider]);
        let _ = tool(&["groupdel", &self.group]);
    }

    /// A copy of `program` that the users can run: a file of the build
    /// directory (as `built` names it) is copied to the same place under
    /// the staging directory, once; anything else is returned as it is.
    pub fn stage(&self, program: &Path) -> PathBuf {
        let build = build_dir();
        let rel = program.strip_prefix(&build).ok().map(Path::to_path_buf).or_else(|| {
            let (p, b) = (fs::canonicalize(program).ok()?, fs::canonicalize(&build).ok()?);
            p.strip_prefix(b).ok().map(Path::to_path_buf)
        });
        let Some(rel) = rel else { return program.to_path_buf() };
        let to = self.stage.path.join(rel);
        copy_for_everyone(program, &to);
        to
    }

    /// `LD_LIBRARY_PATH` for the users' programs: the copied libsisci.so
    /// first (their rpath names the build directory).
    pub fn library_path(&self) -> std::ffi::OsString {
        let mut v = self.stage.path.join("lib").into_os_string();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
            v.push(":");
            v.push(old);
        }
        v
    }

    /// `program args` as `user`, with its groups, against `d`'s socket
    /// (a copy of `program` the user can reach; see [`Users::stage`]).
    pub fn as_user(&self, user: &str, d: &Daemon, program: &std::path::Path, args: &[&str]) -> Output {
        let staged = self.stage(program);
        let mut c = d.client(std::path::Path::new("setpriv"));
        c.env("LD_LIBRARY_PATH", self.library_path());
        c.args(["--reuid", user, "--regid", "nogroup", "--init-groups", "--"]).arg(&staged).args(args);
        run(&format!("{} as {user}", program.display()), &mut c, Duration::from_secs(60))
    }
}

impl Drop for Users {
    fn drop(&mut self) {
        self.remove();
    }
}

pub fn group_gid(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&name)).then(|| f.get(2)?.parse().ok()).flatten()
    })
}

/// Print a finished program's status and output.
pub fn show(o: &Output) {
    println!("=== {} ({}) ===\n{}{}", o.name, describe_status(o.status), o.stdout, o.stderr);
}

/// Wait for all of `procs`, which run together.  The first one that fails
/// ends the run: the others are killed and the test fails showing every
/// output, the failed program's first.  Returns the outputs when all exit 0.
pub fn run_together(procs: Vec<Proc>, timeout: Duration) -> Vec<Output> {
    let mut procs: Vec<Option<Proc>> = procs.into_iter().map(Some).collect();
    let mut outs: Vec<Option<Output>> = procs.iter().map(|_| None).collect();
    let deadline = Instant::now() + timeout;
    let mut failed: Option<usize> = None;
    while failed.is_none() && outs.iter().any(|o| o.is_none()) {
        for i in 0..procs.len() {
            let Some(p) = procs[i].as_mut() else { continue };
            if let Some(st) = p.try_wait() {
                let o = procs[i].take().unwrap().wait(Duration::from_secs(10));
                if !st.success() && failed.is_none() {
                    failed = Some(i);
                }
                outs[i] = Some(o);
            }
        }
        if failed.is_none() && Instant::now() > deadline {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let timed_out = failed.is_none() && outs.iter().any(|o| o.is_none());
    // Whatever still runs is killed; its output so far is kept.
    for i in 0..procs.len() {
        if let Some(p) = procs[i].take() {
            p.signal(libc::SIGKILL);
            outs[i] = Some(p.wait(Duration::from_secs(10)));
        }
    }
    let outs: Vec<Output> = outs.into_iter().map(|o| o.unwrap()).collect();
    if let Some(f) = failed {
        let mut msg = format!("{} failed; the others were killed\n\n{}", outs[f].name, outs[f].describe());
        for (_, o) in outs.iter().enumerate().filter(|(i, _)| *i != f) {
            msg += &format!("\n\n{}", o.describe());
        }
        panic!("{msg}");
    }
    if timed_out {
        let all: Vec<String> = outs.iter().map(|o| o.describe()).collect();
        panic!("still running after {timeout:?}; killed\n\n{}", all.join("\n\n"));
    }
    for o in &outs {
        show(o);
    }
    outs
}
