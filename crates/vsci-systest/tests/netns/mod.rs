//! A cluster of `vscid` nodes, each in its own network namespace, joined by
//! veth pairs to a bridge that lives in a namespace of its own (nothing is
//! added to the root namespace's network).  Addresses are in a private /24
//! (10.213.X.0/24, X from the test process's pid); traffic goes only to
//! those addresses.  Dropping the `Cluster` (also on panic) kills every
//! process in its namespaces, deletes the namespaces (which removes the
//! veths and the bridge) and the temporary directory.
//!
//! Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) for `ip netns`; without it
//! `Cluster::start` returns None and the test prints why it is skipped.
#![allow(dead_code)]

use std::fs::{self, File};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// The link port every node listens on (each node has its own address).
pub const LINK_PORT: u16 = 7100;
/// How long a node may take to start and see all its peers up.
pub const UP_TIMEOUT: Duration = Duration::from_secs(30);

/// One vscid of the cluster.
pub struct Node {
    /// The node id it runs as.
    pub id: u32,
    /// "node3", or "rogue4" for a node that does not hold the cluster key.
    pub name: String,
    /// Holds the shared cluster key.
    pub legit: bool,
    pub ns: String,
    pub ip: String,
    /// The bridge-side end of its veth pair (in the bridge namespace).
    pub br_if: String,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub config: PathBuf,
    /// Extra vscid arguments (e.g. `--lend 1G`).
    pub args: Vec<String>,
    child: Option<Child>,
}

impl Node {
    pub fn address(&self) -> String {
        format!("{}:{LINK_PORT}", self.ip)
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The vscid's process id while it runs (`ip netns exec` execs it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

/// A node that does not hold the cluster's key.
#[derive(Clone, Copy, Debug)]
pub struct Rogue {
    /// The node id it claims.
    pub id: u32,
    /// Whether the members' (shared) cluster file lists this id at the
    /// rogue's address -- an expected member replaced by an impostor.
    pub listed: bool,
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    bridge_ns: String,
    /// Every namespace created so far (removed on drop).
    namespaces: Vec<String>,
    pub subnet: u8,
    pub dir: TempDir,
    /// When each member's cable was last pulled (`cut_link`), until it is
    /// plugged back in.
    cut_at: std::sync::Mutex<std::collections::HashMap<u32, Instant>>,
}

fn ip_cmd(args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip {args:?}: {e}"))
}

/// Run `ip ARGS`; panic with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = ip_cmd(args);
    assert!(out.status.success(), "ip {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// A key file's contents: 48 hex characters from /dev/urandom.
fn random_key() -> String {
    let mut b = [0u8; 24];
    use std::io::Read;
    File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).expect("read /dev/urandom");
    b.iter().map(|x| format!("{x:02x}")).collect::<String>() + "\n"
}

fn cluster_toml(key_file: &str, settings: &str, nodes: &[(u32, String)]) -> String {
    let mut s = format!("# written by crates/vsci-systest/tests/netns/mod.rs\nkey_file = \"{key_file}\"\n{settings}\n");
    for (id, addr) in nodes {
        s += &format!("\n[[node]]\nid = {id}\naddress = \"{addr}\"\n");
    }
    s
}

/// Can guests boot in the cluster's namespaces? QEMU must be there, and
/// the guest image is built first, outside any namespace (the build
/// downloads the guest kernel).
pub fn guests_possible() -> bool {
    if !have_qemu() {
        return false;
    }
    guest_image();
    true
}

impl Cluster {
    /// `vsci vm run` on member `node`: a guest whose /bin holds `files`
    /// (host path, name) runs `sh -c script`.
    pub fn guest(&self, node: u32, name: &str, files: &[(PathBuf, &str)], script: &str) -> Proc {
        let vsci = built("bin/vsci");
        let socket = self.node(node).socket.to_string_lossy().to_string();
        let mut cmd = self.client(node, &vsci);
        cmd.args(["vm", "run", "--socket", &socket, "--name", name, "--timeout", "450"]);
        for (path, e) in files {
            cmd.arg("--add").arg(format!("{}:/bin/{e}", path.display()));
        }
        cmd.args(["--", "sh", "-c", script]);
        Proc::spawn(&format!("guest {name} on node {node}"), &mut cmd)
    }

    /// Members `ids` (sharing one key and one cluster file) and no rogues.
    pub fn start(ids: &[u32]) -> Option<Cluster> {
        Cluster::start_with(ids, &[])
    }

    /// Members `ids` plus `rogues`.  Every rogue has its own key and its own
    /// cluster file, listing itself at its address and every member (but a
    /// member of the same id) at the member's address.  Returns None (after
    /// printing why) when network namespaces cannot be made here.
    pub fn start_with(ids: &[u32], rogues: &[Rogue]) -> Option<Cluster> {
        Cluster::start_full(ids, rogues, &[], "")
    }

    /// Members `ids`, member `id` started with the extra vscid arguments
    /// `args` given for it (e.g. `(2, &["--lend", "1G"])`).
    pub fn start_args(ids: &[u32], args: &[(u32, &[&str])]) -> Option<Cluster> {
        Cluster::start_full(ids, &[], args, "")
    }

    /// Members `ids` whose cluster file also holds `settings` (top-level
    /// TOML lines such as `node_dead_after_ms = 5000`).
    pub fn start_settings(ids: &[u32], settings: &str) -> Option<Cluster> {
        Cluster::start_full(ids, &[], &[], settings)
    }

    fn start_full(ids: &[u32], rogues: &[Rogue], node_args: &[(u32, &[&str])], settings: &str) -> Option<Cluster> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let pid = std::process::id();
        let k = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("vsci-st{pid}c{k}");
        let bridge_ns = format!("{tag}-br");

        clean_up_on_termination();
        // Can we make namespaces at all?
        let probe = Command::new("ip").args(["netns", "add", &bridge_ns]).stdin(Stdio::null()).output();
        match probe {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                eprintln!(
                    "SKIPPED: `ip netns add` is not permitted here ({}); the cluster tests need root \
                     (CAP_SYS_ADMIN and CAP_NET_ADMIN)",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return None;
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run `ip` ({e}); the cluster tests need iproute2 and root");
                return None;
            }
        }

        let subnet = (pid % 250) as u8 + 1;
        let dir = TempDir::new(&format!("cluster{k}"));
        let mut c = Cluster {
            nodes: Vec::new(),
            bridge_ns: bridge_ns.clone(),
            namespaces: vec![bridge_ns.clone()],
            subnet,
            dir,
            cut_at: Default::default(),
        };

        // The bridge, in its own namespace.
        ip(&["-n", &bridge_ns, "link", "set", "lo", "up"]);
        ip(&["-n", &bridge_ns, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &bridge_ns, "link", "set", "br0", "up"]);

        // One namespace per node: members first, then rogues.
        let mut plan: Vec<(u32, bool)> = ids.iter().map(|&i| (i, true)).collect();
        plan.extend(rogues.iter().map(|r| (r.id, false)));
        for (idx, &(id, legit)) in plan.iter().enumerate() {
            let name = if legit { format!("node{id}") } else { format!("rogue{id}") };
            let ns = format!("{tag}-{name}");
            let _ = ip_cmd(&["netns", "del", &ns]); // a leftover of a crashed run with our pid
            ip(&["netns", "add", &ns]);
            c.namespaces.push(ns.clone());
            let br_if = format!("v{idx}");
            let ipaddr = format!("10.213.{subnet}.{}", 11 + idx);
            ip(&["-n", &bridge_ns, "link", "add", &br_if, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
            ip(&["-n", &bridge_ns, "link", "set", &br_if, "master", "br0"]);
            ip(&["-n", &bridge_ns, "link", "set", &br_if, "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            ip(&["-n", &ns, "addr", "add", &format!("{ipaddr}/24"), "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            let socket = c.dir.path.join(format!("{name}.sock"));
            let log = c.dir.path.join(format!("{name}.log"));
            let config = c.dir.path.join(if legit { "cluster.toml".to_string() } else { format!("{name}.toml") });
            let args = node_args
                .iter()
                .filter(|(i, _)| legit && *i == id)
                .flat_map(|(_, a)| a.iter().map(|s| s.to_string()))
                .collect();
            c.nodes.push(Node { id, name, legit, ns, ip: ipaddr, br_if, socket, log, config, args, child: None });
        }

        // Key files and cluster files.
        fs::write(c.dir.path.join("key"), random_key()).unwrap();
        let mut members: Vec<(u32, String)> = c.nodes.iter().filter(|n| n.legit).map(|n| (n.id, n.address())).collect();
        for r in rogues.iter().filter(|r| r.listed) {
            assert!(!ids.contains(&r.id), "a listed rogue needs an id of its own");
            let n = c.nodes.iter().find(|n| !n.legit && n.id == r.id).unwrap();
            members.push((r.id, n.address()));
        }
        fs::write(c.dir.path.join("cluster.toml"), cluster_toml("key", settings, &members)).unwrap();
        for n in c.nodes.iter().filter(|n| !n.legit) {
            let kf = format!("{}.key", n.name);
            fs::write(c.dir.path.join(&kf), random_key()).unwrap();
            let mut list: Vec<(u32, String)> =
                c.nodes.iter().filter(|m| m.legit && m.id != n.id).map(|m| (m.id, m.address())).collect();
            list.push((n.id, n.address()));
            list.sort();
            fs::write(&n.config, cluster_toml(&kf, "", &list)).unwrap();
        }

        for i in 0..c.nodes.len() {
            c.spawn_daemon(i);
        }
        for i in 0..c.nodes.len() {
            c.wait_socket(i);
        }
        c.wait_all_up();
        Some(c)
    }

    fn spawn_daemon(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        let f = File::create(&n.log).expect("create daemon log");
        let child = Command::new("ip")
            .args(["netns", "exec", &n.ns])
            .arg(built("bin/vscid"))
            .arg("--config")
            .arg(&n.config)
            .arg("--node-id")
            .arg(n.id.to_string())
            .arg("--socket")
            .arg(&n.socket)
            .args(&n.args)
            .env_remove("VSCI_SOCKET")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(f.try_clone().unwrap()))
            .stderr(Stdio::from(f))
            .spawn()
            .expect("start vscid");
        n.child = Some(child);
    }

    fn wait_socket(&mut self, i: usize) {
        let deadline = Instant::now() + UP_TIMEOUT;
        loop {
            let n = &mut self.nodes[i];
            if let Some(st) = n.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "{} (vscid) exited ({}) while starting\n--- log ---\n{}",
                    n.name,
                    describe_status(st),
                    n.log_text()
                );
            }
            if let Some(fd) = seqpacket_connect(&n.socket) {
                close_fd(fd);
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "{}: vscid did not accept on {} within {UP_TIMEOUT:?}\n--- log ---\n{}",
                    n.name,
                    n.socket.display(),
                    n.log_text()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// A namespace of the test's own beside the nodes' (a process VM's),
    /// with loopback up; removed with the cluster, after its processes
    /// are killed.
    pub fn extra_netns(&mut self, name: &str) -> String {
        let ns = format!("{}-{name}", self.bridge_ns.trim_end_matches("-br"));
        let _ = ip_cmd(&["netns", "del", &ns]);
        ip(&["netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ns
    }

    /// The shared cluster key's file.
    pub fn key_file(&self) -> PathBuf {
        self.dir.path.join("key")
    }

    /// Index of the member (the key holder) with node id `id`.
    fn idx(&self, id: u32) -> usize {
        self.nodes.iter().position(|n| n.legit && n.id == id).unwrap_or_else(|| panic!("no member node {id}"))
    }

    pub fn node(&self, id: u32) -> &Node {
        &self.nodes[self.idx(id)]
    }

    pub fn rogue(&self, id: u32) -> &Node {
        self.nodes.iter().find(|n| !n.legit && n.id == id).unwrap_or_else(|| panic!("no rogue node {id}"))
    }

    pub fn member_ids(&self) -> Vec<u32> {
        self.nodes.iter().filter(|n| n.legit).map(|n| n.id).collect()
    }

    /// `vsci status --json` of a node (by its socket), parsed.
    pub fn status_of(n: &Node) -> serde_json::Value {
        let out = run(
            "vsci status",
            Command::new(built("bin/vsci"))
                .arg("status")
                .arg("--socket")
                .arg(&n.socket)
                .arg("--json")
                .stdin(Stdio::null()),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "vsci status of {} failed:\n{}", n.name, out.describe());
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("vsci status --json of {} printed no JSON ({e}):\n{}", n.name, out.stdout))
    }

    /// `vsci status` of member `id` as a person reads it (no `--json`).
    pub fn status_text(&self, id: u32) -> String {
        let n = self.node(id);
        let out = run(
            "vsci status",
            Command::new(built("bin/vsci")).arg("status").arg("--socket").arg(&n.socket).stdin(Stdio::null()),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "vsci status of {} failed:\n{}", n.name, out.describe());
        out.stdout
    }

    pub fn status(&self, id: u32) -> serde_json::Value {
        Cluster::status_of(self.node(id))
    }

    /// The `state` member `id` reports for `peer`, None if it lists no such peer.
    pub fn peer_state_of(n: &Node, peer: u32) -> Option<String> {
        let v = Cluster::status_of(n);
        let peers = v
            .get("peers")
            .and_then(|p| p.as_array())
            .unwrap_or_else(|| panic!("no \"peers\" array in the status of {}:\n{v:#}", n.name));
        peers
            .iter()
            .find(|p| p.get("node_id").and_then(|x| x.as_u64()) == Some(peer as u64))
            .map(|p| p.get("state").and_then(|s| s.as_str()).unwrap_or("<no state>").to_string())
    }

    pub fn peer_state(&self, id: u32, peer: u32) -> Option<String> {
        Cluster::peer_state_of(self.node(id), peer)
    }

    /// Wait until member `id` reports `peer` in a state for which `ok` holds.
    pub fn wait_peer(
        &self,
        id: u32,
        peer: u32,
        what: &str,
        timeout: Duration,
        ok: impl Fn(Option<&str>) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.peer_state(id, peer);
            if ok(s.as_deref()) {
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "node {id} still reports node {peer} as {s:?} after {timeout:?}; wanted {what}\n--- status of node {id} ---\n{:#}",
                    self.status(id)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until every member reports every other member "up".
    pub fn wait_all_up(&self) {
        let ids = self.member_ids();
        for &a in &ids {
            for &b in ids.iter().filter(|b| **b != a) {
                self.wait_peer(a, b, "\"up\"", UP_TIMEOUT, |s| s == Some("up"));
            }
        }
    }

    /// A client program to run on member `id` (in its namespace, with
    /// VSCI_SOCKET set).
    pub fn client(&self, id: u32, program: &Path) -> Command {
        Cluster::client_on(self.node(id), program)
    }

    pub fn client_on(n: &Node, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &n.ns])
            .arg(program)
            .env("VSCI_SOCKET", &n.socket)
            .env_remove("VSCI_WAIT")
            .env_remove("VSCI_LOG")
            .stdin(Stdio::null());
        c
    }

    /// Crash member `id` as a machine crashes: SIGKILL its vscid and every
    /// client in its namespace at once.
    pub fn kill_node(&mut self, id: u32) {
        let i = self.idx(id);
        let ns = self.nodes[i].ns.clone();
        for p in netns_pids(&ns) {
            signal(p as u32, libc::SIGKILL);
        }
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let st = c.wait().ok();
            if let Some(st) = st {
                assert!(st.signal() == Some(libc::SIGKILL) || !st.success(), "node {id} exited on its own: {st:?}");
            }
        }
    }

    /// Start member `id` again after `kill_node` (same arguments), and
    /// wait until it and every other member see each other up.
    pub fn restart_node(&mut self, id: u32) {
        let i = self.idx(id);
        assert!(self.nodes[i].child.is_none(), "node {id} is still running");
        self.spawn_daemon(i);
        self.wait_socket(i);
        self.wait_all_up();
    }

    /// Start member `id` again after `kill_node` and wait only for its
    /// control socket (its links may be cut).
    pub fn respawn_node(&mut self, id: u32) {
        let i = self.idx(id);
        assert!(self.nodes[i].child.is_none(), "node {id} is still running");
        self.spawn_daemon(i);
        self.wait_socket(i);
    }

    /// Pull member `id`'s cable: its veth's bridge end goes down, so its
    /// packets are dropped silently (no reset reaches anyone).
    pub fn cut_link(&self, id: u32) {
        let start = self.set_port(id, "down");
        self.cut_at.lock().unwrap().insert(id, start);
    }

    /// Plug member `id`'s cable back in. Returns how long the cable was out
    /// at most: from the start of the last `cut_link` of it (or of this
    /// call, if none) until the kernel had put the port back up. That can
    /// be much longer than the caller slept: `ip link` waits for the
    /// kernel's network configuration lock, which other namespaces being
    /// set up or torn down (other tests, guests) may hold for seconds.
    pub fn restore_link(&self, id: u32) -> Duration {
        let start = self.set_port(id, "up");
        let since = self.cut_at.lock().unwrap().remove(&id).unwrap_or(start);
        since.elapsed()
    }

    /// Set member `id`'s bridge port `state`; returns when the command
    /// was started.
    fn set_port(&self, id: u32, state: &str) -> Instant {
        let n = self.node(id);
        let start = Instant::now();
        ip(&["-n", &self.bridge_ns, "link", "set", &n.br_if, state]);
        let took = start.elapsed();
        if took > Duration::from_secs(1) {
            eprintln!("setting node {id}'s cable {state} took {} ms (ip link waited for the kernel)", took.as_millis());
        }
        start
    }

    /// Stop members `ids` the way a paused VM stops: SIGSTOP their vscid and
    /// every client in their namespaces at once, and SIGCONT them all after
    /// `d`.  Nothing may panic in between (that would leave them stopped
    /// until the drop kills them).
    pub fn pause_nodes(&self, ids: &[u32], d: Duration) {
        let pids: Vec<i32> = ids.iter().flat_map(|&id| netns_pids(&self.node(id).ns)).collect();
        for &p in &pids {
            signal(p as u32, libc::SIGSTOP);
        }
        thread::sleep(d);
        for &p in &pids {
            signal(p as u32, libc::SIGCONT);
        }
    }

    /// Panics unless member `id`'s vscid is still running.
    pub fn assert_running(&mut self, id: u32) {
        let i = self.idx(id);
        let n = &mut self.nodes[i];
        if let Some(st) = n.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            panic!("{} (vscid) ended with {}\n--- log ---\n{}", n.name, describe_status(st), n.log_text());
        }
    }

    /// Wait until member `id` holds no segments, connections or interrupts
    /// and no clients but node links and status queries.
    pub fn wait_clean(&self, id: u32, what: &str) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let v = self.status(id);
            let len = |k: &str| v.get(k).and_then(|a| a.as_array()).map(|a| a.len()).unwrap_or(usize::MAX);
            let clients = v
                .get("clients")
                .and_then(|a| a.as_array())
                .map(|a| {
                    a.iter()
                        .filter(|c| {
                            c.get("pid").and_then(|p| p.as_u64()) != Some(0)
                                && c.get("name").and_then(|s| s.as_str()) != Some("vsci-status")
                        })
                        .count()
                })
                .unwrap_or(usize::MAX);
            if clients == 0 && len("segments") == 0 && len("connections") == 0 && len("interrupts") == 0 {
                return;
            }
            if Instant::now() > deadline {
                panic!("{what}: node {id} still holds objects after {SETTLE_TIMEOUT:?}:\n{v:#}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Every process in our namespaces: daemons and clients alike.
        for ns in &self.namespaces {
            for p in netns_pids(ns) {
                signal(p as u32, libc::SIGKILL);
            }
        }
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if thread::panicking() {
            for n in &self.nodes {
                eprintln!("--- vscid {} ({}, {}) log ---\n{}", n.name, n.ns, n.address(), n.log_text());
            }
        }
        // Processes must be gone before their namespace can be freed; a
        // namespace whose last process is gone disappears with its veths.
        let deadline = Instant::now() + Duration::from_secs(10);
        for ns in &self.namespaces {
            while !netns_pids(ns).is_empty() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
        }
        for ns in self.namespaces.iter().rev() {
            let out = ip_cmd(&["netns", "del", ns]);
            if !out.status.success() {
                eprintln!("warning: ip netns del {ns}: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
        }
        // self.dir (TempDir) removes the key, cluster files, sockets and logs.
    }
}
