//! Two "hosts" on one machine for `vsci bench --paths remote`: two network
//! namespaces joined by one veth pair, each running a `vscid` of a
//! two-node cluster.
//!
//! Addresses are private (10.214.X.1 and 10.214.X.2, X from our pid); test
//! traffic goes only between the two namespaces.  Nothing is added to the
//! root namespace's network.  Every process started here runs in its own
//! process group, so a Ctrl-C on the terminal reaches only `vsci`, which
//! then tears everything down in order.  Dropping the [`Pair`] (also on an
//! error or after a signal) kills every process in the two namespaces,
//! deletes the namespaces (which removes the veths) and the temporary
//! directory.  Namespaces left by a `vsci bench` that was killed outright
//! (SIGKILL) are removed by the next run.

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Set by SIGINT, SIGTERM or SIGHUP.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Catch SIGINT, SIGTERM and SIGHUP: instead of dying at once, `vsci`
/// notices at its next wait and cleans up.
pub fn catch_signals() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(SigHandler::Handler(on_signal), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        let _ = unsafe { sigaction(sig, &act) };
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Fail if a signal asked us to stop.
pub fn check_interrupted() -> Result<()> {
    if interrupted() {
        bail!("interrupted; cleaning up");
    }
    Ok(())
}

/// Sleep, but return early (with an error) when interrupted.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        check_interrupted()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
    check_interrupted()
}

/// Wait for a child for at most `timeout`; kill it (its whole process
/// group) when the time is up or when we are interrupted.
pub fn wait_child(child: &mut Child, timeout: Duration, what: &str) -> Result<ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(st);
        }
        if interrupted() || t0.elapsed() > timeout {
            stop_child(child, Duration::from_secs(2));
            if interrupted() {
                bail!("interrupted while waiting for {what}; cleaning up");
            }
            bail!("{what} did not finish within {} s; killed it", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM a child's process group, SIGKILL it after `grace`, reap it.
pub fn stop_child(child: &mut Child, grace: Duration) {
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let pgid = Pid::from_raw(child.id() as i32);
    let _ = killpg(pgid, Signal::SIGTERM);
    let t0 = Instant::now();
    while t0.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            let _ = killpg(pgid, Signal::SIGKILL); // helpers it may have left
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

fn ip_output(args: &[&str]) -> Result<std::process::Output> {
    Command::new("ip").args(args).stdin(Stdio::null()).output().context("cannot run `ip` (iproute2)")
}

/// Run `ip ARGS`; fail with its stderr.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = ip_output(args)?;
    if !out.status.success() {
        bail!("ip {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Pids of every process in a namespace.
fn ns_pids(ns: &str) -> Vec<i32> {
    ip_output(&["netns", "pids", ns])
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

fn ns_list() -> Vec<String> {
    ip_output(&["netns", "list"])
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

const NS_PREFIX: &str = "vsci-bench-";

/// Remove namespaces of earlier runs whose `vsci` is gone (killed with
/// SIGKILL, say) and that hold no process any more.
fn sweep_stale() {
    for ns in ns_list() {
        let Some(rest) = ns.strip_prefix(NS_PREFIX) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if ns_pids(&ns).is_empty() {
            eprintln!("vsci bench: removing namespace {ns} left by an earlier run (pid {pid})");
            let _ = ip(&["netns", "del", &ns]);
        } else {
            eprintln!("vsci bench: warning: namespace {ns} of an earlier run still has processes; left alone");
        }
    }
}

/// A key file's contents: 64 hex characters from /dev/urandom.
fn random_key() -> Result<String> {
    let mut b = [0u8; 32];
    fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).context("reading /dev/urandom")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect::<String>() + "\n")
}

/// The link port of both nodes (each has its own address).
pub const LINK_PORT: u16 = 7100;

/// The name of each namespace's network device (its end of the veth). The
/// same in every namespace: a UCT test of `ucx_perftest` names one device,
/// and its server takes the name from the client's parameters.
pub const DEV: &str = "vb0";

/// Network namespaces joined by veth (two: one pair; more: each to a
/// bridge in a namespace of its own), a cluster file, and (after
/// [`Pair::start_nodes`]) a `vscid` in each. Node `i + 1` lives in `ns[i]`.
pub struct Pair {
    /// Namespace names, node 1 first.
    pub ns: Vec<String>,
    /// Each namespace's address on its veth.
    pub ip: Vec<String>,
    /// Temporary directory: key, cluster file, sockets, logs.
    pub dir: PathBuf,
    pub sockets: Vec<PathBuf>,
    pub logs: Vec<PathBuf>,
    /// Extra vscid arguments per node (index 0 is node 1), e.g. `--lend`.
    pub node_args: Vec<Vec<String>>,
    created: Vec<String>,
    daemons: Vec<Child>,
    /// Other processes started in the namespaces (benchmarks, peers).
    helpers: Vec<Child>,
}

impl Pair {
    /// Two nodes: see [`Pair::create_n`].
    pub fn create() -> Result<Pair> {
        Pair::create_n(2)
    }

    /// Create `n` namespaces, their links and the cluster files. Needs root
    /// (CAP_SYS_ADMIN and CAP_NET_ADMIN).
    pub fn create_n(n: usize) -> Result<Pair> {
        if !nix::unistd::geteuid().is_root() {
            bail!("the multi-node benchmarks create network namespaces (ip netns) and need root; run as root or use --paths local");
        }
        assert!((2..=9).contains(&n), "2 to 9 nodes");
        sweep_stale();
        let pid = std::process::id();
        let tag = format!("{NS_PREFIX}{pid}");
        let subnet = pid % 250 + 1;
        let dir = std::env::temp_dir().join(&tag);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut p = Pair {
            ns: (1..=n).map(|i| format!("{tag}-n{i}")).collect(),
            ip: (1..=n).map(|i| format!("10.214.{subnet}.{i}")).collect(),
            sockets: (1..=n).map(|i| dir.join(format!("node{i}.sock"))).collect(),
            logs: (1..=n).map(|i| dir.join(format!("node{i}.log"))).collect(),
            dir,
            node_args: Vec::new(),
            created: Vec::new(),
            daemons: Vec::new(),
            helpers: Vec::new(),
        };
        if n > 2 {
            let hub = format!("{tag}-hub");
            ip(&["netns", "add", &hub])?;
            p.created.push(hub.clone());
            ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
            ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        }
        for ns in p.ns.clone() {
            check_interrupted()?;
            ip(&["netns", "add", &ns])?;
            p.created.push(ns);
        }
        if n == 2 {
            let (a, b) = (&p.ns[0], &p.ns[1]);
            ip(&["link", "add", DEV, "netns", a, "type", "veth", "peer", "name", DEV, "netns", b])?;
        } else {
            let hub = format!("{tag}-hub");
            for (i, ns) in p.ns.iter().enumerate() {
                let port = format!("vh{}", i + 1);
                ip(&["link", "add", DEV, "netns", ns, "type", "veth", "peer", "name", &port, "netns", &hub])?;
                ip(&["-n", &hub, "link", "set", &port, "master", "br0"])?;
                ip(&["-n", &hub, "link", "set", &port, "up"])?;
            }
        }
        for (i, ns) in p.ns.iter().enumerate() {
            check_interrupted()?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "addr", "add", &format!("{}/24", p.ip[i]), "dev", DEV])?;
            ip(&["-n", ns, "link", "set", DEV, "up"])?;
        }

        let key = p.dir.join("cluster.key");
        fs::write(&key, random_key()?)?;
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600))?;
        let mut toml = String::from("# written by `vsci bench`\nkey_file = \"cluster.key\"\n");
        for (i, addr) in p.ip.iter().enumerate() {
            toml += &format!("\n[[node]]\nid = {}\naddress = \"{addr}:{LINK_PORT}\"\n", i + 1);
        }
        fs::write(p.dir.join("cluster.toml"), toml)?;
        Ok(p)
    }

    /// `ip netns exec NS PROGRAM` on node `i` (0 or 1), with VSCI_SOCKET
    /// naming that node, in a process group of its own, stdin closed.
    pub fn command(&self, i: usize, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i]])
            .arg(program)
            .env(vsci_proto::SOCKET_ENV, &self.sockets[i])
            .stdin(Stdio::null())
            .process_group(0);
        c
    }

    /// Start a helper process in the namespaces; it is stopped on drop
    /// unless [`Pair::finish`] reaped it before.
    pub fn spawn(&mut self, mut cmd: Command, what: &str) -> Result<usize> {
        let child = cmd.spawn().with_context(|| format!("starting {what}"))?;
        self.helpers.push(child);
        Ok(self.helpers.len() - 1)
    }

    /// A namespace made beside the nodes' (a process VM's): its processes
    /// are stopped and it is deleted with the others.
    pub fn adopt_netns(&mut self, ns: &str) {
        self.created.push(ns.to_string());
    }

    /// Delete an adopted namespace now (its processes are killed first).
    pub fn drop_netns(&mut self, ns: &str) {
        use nix::sys::signal::{kill, Signal};
        for p in ns_pids(ns) {
            let _ = kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
        }
        if let Err(e) = ip(&["netns", "del", ns]) {
            eprintln!("vsci bench: warning: {e}");
        }
        self.created.retain(|n| n != ns);
    }

    pub fn helper(&mut self, h: usize) -> &mut Child {
        &mut self.helpers[h]
    }

    /// Start `vscid` in every namespace and wait until each reports every
    /// other "up".
    pub fn start_nodes(&mut self, vscid: &Path, timeout: Duration) -> Result<()> {
        let config = self.dir.join("cluster.toml");
        let n = self.ns.len();
        for i in 0..n {
            let log = fs::File::create(&self.logs[i])?;
            let mut c = self.command(i, vscid);
            c.arg("--config")
                .arg(&config)
                .arg("--node-id")
                .arg((i + 1).to_string())
                .arg("--socket")
                .arg(&self.sockets[i])
                .args(self.node_args.get(i).into_iter().flatten())
                .env_remove(vsci_proto::SOCKET_ENV)
                .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
                .stdout(Stdio::from(log.try_clone()?))
                .stderr(Stdio::from(log));
            self.daemons.push(c.spawn().context("starting vscid (is it built? run `make`)")?);
        }
        let t0 = Instant::now();
        for (i, peer) in (0..n).flat_map(|i| (1..=n as u32).filter(move |p| *p != i as u32 + 1).map(move |p| (i, p))) {
            loop {
                check_interrupted()?;
                self.check_daemons()?;
                if let Some(state) = self.peer_state(i, peer) {
                    if state == "up" {
                        break;
                    }
                }
                if t0.elapsed() > timeout {
                    let logs: Vec<String> =
                        (0..n).map(|j| format!("--- node {} log ---\n{}", j + 1, self.log(j))).collect();
                    bail!(
                        "node {} does not see node {peer} up after {} s (state {:?})\n{}",
                        i + 1,
                        timeout.as_secs(),
                        self.peer_state(i, peer),
                        logs.join("\n")
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Both say "up", but a map made within a few hundred ms of that
        // fails now and then with SCI_ERR_TRANSFER_FAILED (the RMA read at
        // map time); give the RMA engines a moment.  VSCI_BENCH_SETTLE_MS
        // overrides the pause (0 to see the failure).
        let ms = std::env::var("VSCI_BENCH_SETTLE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
        sleep(Duration::from_millis(ms))?;
        Ok(())
    }

    /// What node `i` (`vsci status`) says about node `peer`.
    fn peer_state(&self, i: usize, peer: u32) -> Option<String> {
        let client = vsci_client::Client::connect(&self.sockets[i], "vsci-status").ok()?;
        let st = client.status().ok();
        client.close();
        st?.peers.into_iter().find(|p| p.node_id == peer).map(|p| p.state)
    }

    /// Fail if a daemon has exited.
    pub fn check_daemons(&mut self) -> Result<()> {
        for i in 0..self.daemons.len() {
            if let Some(st) = self.daemons[i].try_wait()? {
                bail!("vscid of node {} exited ({st})\n--- its log ---\n{}", i + 1, self.log(i));
            }
        }
        Ok(())
    }

    pub fn log(&self, i: usize) -> String {
        fs::read_to_string(&self.logs[i]).unwrap_or_default()
    }

    /// Bytes received + sent so far on node `i`'s end of the veth (its
    /// interface counters, `ip -s -j link`): with two nodes, every byte that
    /// crossed the link either way.
    pub fn link_bytes(&self, i: usize) -> Option<u64> {
        let out = ip_output(&["-n", &self.ns[i], "-s", "-j", "link", "show", "dev", DEV]).ok()?;
        if !out.status.success() {
            return None;
        }
        link_bytes_of(&String::from_utf8_lossy(&out.stdout))
    }
}

/// rx + tx bytes from `ip -s -j link show dev X`.
fn link_bytes_of(json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let s = v.get(0)?.get("stats64")?;
    Some(s.get("rx")?.get("bytes")?.as_u64()? + s.get("tx")?.get("bytes")?.as_u64()?)
}

impl Drop for Pair {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        for c in &mut self.helpers {
            stop_child(c, Duration::from_millis(500));
        }
        for c in &mut self.daemons {
            stop_child(c, Duration::from_secs(3));
        }
        // Anything else still in our namespaces was started by us too.
        for ns in &self.created {
            for p in ns_pids(ns) {
                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for ns in &self.created {
            while !ns_pids(ns).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Deleting a namespace removes its end of the veth, and with it the pair.
        for ns in self.created.iter().rev() {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("vsci bench: warning: {e}");
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn link_bytes_are_read_from_ip_json() {
        let j = r#"[{"ifindex":2,"ifname":"vb0","stats64":{"rx":{"bytes":1000,"packets":3},"tx":{"bytes":234,"packets":2}}}]"#;
        assert_eq!(super::link_bytes_of(j), Some(1234));
        assert_eq!(super::link_bytes_of("[]"), None);
        assert_eq!(super::link_bytes_of("not json"), None);
    }
}
