//! `vsci-soak`: many clients on two nodes doing random SISCI work and dying
//! at random, for as long as asked (`scripts/soak.sh MINUTES`).
//!
//! Two `vscid` nodes of one cluster run on loopback. Each keeps `--clients`
//! copies of `tests/c/t_soak.c` busy: they create, export, connect, map,
//! store, flush, trigger and DMA against both nodes, each for a random
//! lifetime, and every `--kill-every-ms` one of them is killed with SIGKILL.
//! The nodes' resident memory, descriptors and threads are printed at the
//! start, every minute, and at the end once every client is gone; the run
//! fails when a node dies, a client crashes or hangs, or the nodes do not
//! let go of the clients' objects.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
#[command(about = "Soak two vsci nodes with random clients killed at random")]
struct Args {
    /// How long to run, in minutes (fractions allowed).
    #[arg(long)]
    minutes: f64,
    /// Clients kept running on each node.
    #[arg(long, default_value_t = 6)]
    clients: u32,
    /// Kill one random client this often.
    #[arg(long, default_value_t = 500)]
    kill_every_ms: u64,
    /// Longest lifetime of a client that is not killed, in seconds.
    #[arg(long, default_value_t = 10)]
    max_life_s: u32,
    /// The build directory (bin/vscid, bin/vsci, tests/t_soak).
    #[arg(long, env = "VSCI_BUILD", default_value = "build")]
    build: PathBuf,
    /// Seed of the random choices (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
}

/// xorshift64*: enough randomness to pick victims and lifetimes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

struct Node {
    id: u32,
    socket: PathBuf,
    child: Child,
}

/// Resident memory (KiB), open descriptors and threads of a process.
#[derive(Clone, Copy)]
struct Usage {
    rss_kib: u64,
    fds: usize,
    threads: usize,
}

fn usage(pid: u32) -> Option<Usage> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let threads = fs::read_dir(format!("/proc/{pid}/task")).ok()?.count();
    Some(Usage { rss_kib, fds, threads })
}

fn show(u: Usage) -> String {
    format!("rss {:.1} MiB, {} fds, {} threads", u.rss_kib as f64 / 1024.0, u.fds, u.threads)
}

struct Client {
    node: usize,
    slot: u32,
    child: Child,
    deadline: Instant,
    killed: bool,
    log: PathBuf,
}

#[derive(Default)]
struct Tally {
    started: u64,
    killed: u64,
    finished: u64,
    failed: u64,
}

/// Everything the run started, stopped on drop (also when it fails).
struct Run {
    dir: PathBuf,
    nodes: Vec<Node>,
    clients: Vec<Client>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for c in &mut self.clients {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
        for n in &mut self.nodes {
            // SAFETY: kill(2) on a child we started and have not reaped.
            unsafe { libc::kill(n.child.id() as i32, libc::SIGTERM) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = n.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// What the node still holds for programs (`vsci status --json`): its
/// clients (other nodes and the status query itself left out), segments,
/// connections and interrupts, each named so a failure says what leaked.
/// None while the node does not answer.
fn node_objects(build: &Path, socket: &Path) -> Option<Vec<String>> {
    let out = Command::new(build.join("bin/vsci"))
        .args(["status", "--json"])
        .env("VSCI_SOCKET", socket)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let mut held: Vec<String> = v
        .get("clients")?
        .as_array()?
        .iter()
        .filter(|c| {
            c.get("pid").and_then(|p| p.as_u64()) != Some(0)
                && c.get("name").and_then(|n| n.as_str()) != Some("vsci-status")
        })
        .map(|c| format!("client {c}"))
        .collect();
    for k in ["segments", "connections", "interrupts"] {
        if let Some(a) = v.get(k).and_then(|x| x.as_array()) {
            held.extend(a.iter().map(|o| format!("{k} {o}")));
        }
    }
    Some(held)
}

fn start_node(build: &Path, dir: &Path, id: u32) -> anyhow::Result<Node> {
    let socket = dir.join(format!("node{id}.sock"));
    let log = fs::File::create(dir.join(format!("node{id}.log")))?;
    let child = Command::new(build.join("bin/vscid"))
        .args([
            "--config",
            &dir.join("cluster.toml").to_string_lossy(),
            "--node-id",
            &id.to_string(),
            "--socket",
            &socket.to_string_lossy(),
        ])
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    Ok(Node { id, socket, child })
}

fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (_, Some(sig)) => format!("signal {sig}"),
        _ => "unknown status".into(),
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(a.minutes > 0.0, "--minutes must be positive");
    anyhow::ensure!(a.clients > 0 && a.clients <= 200, "--clients must be 1..200");
    let build =
        fs::canonicalize(&a.build).map_err(|e| anyhow::anyhow!("build directory {}: {e}", a.build.display()))?;
    let t_soak = build.join("tests/t_soak");
    anyhow::ensure!(t_soak.exists(), "{} is missing: run `make` first", t_soak.display());
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    }) | 1;
    let mut rng = Rng(seed);

    let dir = std::env::temp_dir().join(format!("vsci-soak-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let mut run = Run { dir: dir.clone(), nodes: Vec::new(), clients: Vec::new() };
    let mut key = [0u8; 32];
    for b in &mut key {
        *b = rng.next() as u8;
    }
    fs::write(dir.join("cluster.key"), key.iter().map(|b| format!("{b:02x}")).collect::<String>())?;
    let (p1, p2) = (free_port()?, free_port()?);
    fs::write(dir.join("cluster.toml"), format!("key_file = \"cluster.key\"\n\n[[node]]\nid = 1\naddress = \"127.0.0.1:{p1}\"\n\n[[node]]\nid = 2\naddress = \"127.0.0.1:{p2}\"\n"))?;
    for id in [1, 2] {
        let n = start_node(&build, &dir, id)?;
        run.nodes.push(n);
    }
    let t = Instant::now();
    for n in &run.nodes {
        while node_objects(&build, &n.socket).is_none() {
            anyhow::ensure!(
                t.elapsed() < Duration::from_secs(30),
                "node {} did not come up (log: {})",
                n.id,
                dir.join(format!("node{}.log", n.id)).display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Let the nodes link up and settle before the baseline.
    std::thread::sleep(Duration::from_secs(2));
    let pids: Vec<u32> = run.nodes.iter().map(|n| n.child.id()).collect();
    let start: Vec<Usage> = pids.iter().map(|&p| usage(p).expect("node is running")).collect();
    println!(
        "soak: seed {seed}, {} clients per node, one killed every {} ms, {} min",
        a.clients, a.kill_every_ms, a.minutes
    );
    for (i, u) in start.iter().enumerate() {
        println!("soak: node {} at start: {}", i + 1, show(*u));
    }

    let mut tally = Tally::default();
    let end = Instant::now() + Duration::from_secs_f64(a.minutes * 60.0);
    let mut next_kill = Instant::now() + Duration::from_millis(a.kill_every_ms);
    let mut next_report = Instant::now() + Duration::from_secs(60);
    let mut failures: Vec<String> = Vec::new();
    while Instant::now() < end {
        for n in &mut run.nodes {
            if let Some(s) = n.child.try_wait()? {
                anyhow::bail!(
                    "node {} died ({}); log: {}",
                    n.id,
                    describe(s),
                    dir.join(format!("node{}.log", n.id)).display()
                );
            }
        }
        // Reap clients; a client past its lifetime by 30 s is hung.
        let mut i = 0;
        while i < run.clients.len() {
            let c = &mut run.clients[i];
            let done = match c.child.try_wait()? {
                Some(s) => {
                    if c.killed {
                        tally.killed += 1;
                    } else if s.success() {
                        tally.finished += 1;
                    } else {
                        tally.failed += 1;
                        failures.push(format!(
                            "client {} on node {} ended with {}: {}",
                            c.slot,
                            c.node + 1,
                            describe(s),
                            fs::read_to_string(&c.log).unwrap_or_default().trim()
                        ));
                    }
                    true
                }
                None if Instant::now() > c.deadline + Duration::from_secs(30) => {
                    tally.failed += 1;
                    failures.push(format!(
                        "client {} on node {} hung past its lifetime (pid {})",
                        c.slot,
                        c.node + 1,
                        c.child.id()
                    ));
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                    true
                }
                None => false,
            };
            if done {
                let c = run.clients.swap_remove(i);
                let _ = fs::remove_file(&c.log);
            } else {
                i += 1;
            }
        }
        // Fill empty slots.
        for node in 0..run.nodes.len() {
            for slot in 0..a.clients {
                if run.clients.iter().any(|c| c.node == node && c.slot == slot) {
                    continue;
                }
                let life = 1 + rng.below(a.max_life_s as u64);
                let log = dir.join(format!("client-{}-{slot}.log", node + 1));
                let peer = if node == 0 { 2 } else { 1 };
                let child = Command::new(&t_soak)
                    .args([
                        slot.to_string(),
                        peer.to_string(),
                        a.clients.to_string(),
                        life.to_string(),
                        rng.next().to_string(),
                    ])
                    .env("VSCI_SOCKET", &run.nodes[node].socket)
                    .stdout(Stdio::null())
                    .stderr(fs::File::create(&log)?)
                    .spawn()?;
                tally.started += 1;
                run.clients.push(Client {
                    node,
                    slot,
                    child,
                    deadline: Instant::now() + Duration::from_secs(life),
                    killed: false,
                    log,
                });
            }
        }
        if Instant::now() >= next_kill && !run.clients.is_empty() {
            let k = rng.below(run.clients.len() as u64) as usize;
            let c = &mut run.clients[k];
            let _ = c.child.kill();
            c.killed = true;
            next_kill = Instant::now() + Duration::from_millis(a.kill_every_ms);
        }
        if Instant::now() >= next_report {
            let now: Vec<String> = pids
                .iter()
                .enumerate()
                .map(|(i, &p)| format!("node {}: {}", i + 1, usage(p).map(show).unwrap_or_else(|| "gone".into())))
                .collect();
            println!(
                "soak: {} clients started, {} killed, {} finished, {} failed; {}",
                tally.started,
                tally.killed,
                tally.finished,
                tally.failed,
                now.join("; ")
            );
            next_report = Instant::now() + Duration::from_secs(60);
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    // Stop every client, then wait for the nodes to let go of them.
    for c in &mut run.clients {
        let _ = c.child.kill();
        let _ = c.child.wait();
        tally.killed += 1;
    }
    run.clients.clear();
    let t = Instant::now();
    for n in &run.nodes {
        loop {
            let held = node_objects(&build, &n.socket);
            match held {
                Some(ref h) if h.is_empty() => break,
                _ if t.elapsed() > Duration::from_secs(30) => {
                    let what = held.map_or("it does not answer `vsci status`".to_string(), |h| h.join("; "));
                    failures.push(format!(
                        "node {} still holds clients or objects 30 s after the last client died: {what}",
                        n.id
                    ));
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    println!(
        "soak: {} clients started, {} killed, {} finished, {} failed",
        tally.started, tally.killed, tally.finished, tally.failed
    );
    for (i, &p) in pids.iter().enumerate() {
        let Some(u) = usage(p) else {
            anyhow::bail!("node {} is gone at the end", i + 1);
        };
        let s = start[i];
        println!(
            "soak: node {} at end:   {}  (start {}; change {:+.1} MiB, {:+} fds, {:+} threads)",
            i + 1,
            show(u),
            show(s),
            (u.rss_kib as f64 - s.rss_kib as f64) / 1024.0,
            u.fds as i64 - s.fds as i64,
            u.threads as i64 - s.threads as i64
        );
        if u.fds > s.fds + 4 || u.threads > s.threads + 2 {
            failures.push(format!(
                "node {} kept descriptors or threads: {} at start, {} at end",
                i + 1,
                show(s),
                show(u)
            ));
        }
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("soak: FAIL {f}");
        }
        anyhow::bail!("{} failure(s)", failures.len());
    }
    println!("soak: OK");
    Ok(())
}
