//! `vsci bench`: run the benchmark programs and put their figures next to
//! peers measured in the same run.
//!
//! - `local` (default): `sisci_bench` against a private node on this host;
//! - `remote`: two nodes in two network namespaces joined by a veth pair
//!   (needs root): `remote_bench` runs as a server on node 2 and a client
//!   on node 1, then `sockperf` (TCP ping-pong) and `iperf3` run between
//!   the same namespaces, and one table shows vsci, the peer and the ratio.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::node::TempNode;
use netns::Pair;

// The namespace pair lives in its own file; declared here so that main.rs
// keeps its module list.
#[path = "netns.rs"]
mod netns;

/// Which data paths `vsci bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchPath {
    /// Processes on one node (sisci_bench).
    Local,
    /// Two nodes in two network namespaces (remote_bench, sockperf, iperf3; needs root).
    Remote,
}

pub fn run(quick: bool, json: Option<PathBuf>, bench_dir: Option<PathBuf>, paths: Vec<BenchPath>) -> Result<()> {
    let dir = bench_dir.unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap_or_default();
        exe.parent().and_then(|p| p.parent()).map(|p| p.join("bench")).unwrap_or_else(|| PathBuf::from("build/bench"))
    });
    let local = paths.contains(&BenchPath::Local);
    let remote = paths.contains(&BenchPath::Remote);
    if !local && !remote {
        bail!("--paths names no path (local, remote)");
    }
    if remote && !nix::unistd::geteuid().is_root() {
        bail!("--paths remote creates network namespaces (ip netns) and needs root; run it as root or use --paths local");
    }
    netns::catch_signals();

    // Local only: exactly the sisci_bench run (its JSON goes straight to --json).
    if !remote {
        return run_local(&dir, quick, json.as_deref());
    }

    let mut out = serde_json::Map::new();
    if local {
        let tmp = std::env::temp_dir().join(format!("vsci-bench-local-{}.json", std::process::id()));
        let r = run_local(&dir, quick, Some(&tmp));
        let v = std::fs::read_to_string(&tmp).ok().and_then(|s| serde_json::from_str::<Value>(&s).ok());
        let _ = std::fs::remove_file(&tmp);
        r?;
        out.insert("local".into(), v.unwrap_or(Value::Null));
        netns::check_interrupted()?;
        println!();
    }
    let r = run_remote(&dir, quick)?;
    out.insert("remote".into(), r);
    if let Some(j) = &json {
        std::fs::write(j, serde_json::to_string_pretty(&Value::Object(out))? + "\n").with_context(|| format!("writing {}", j.display()))?;
        println!("json written to {}", j.display());
    }
    Ok(())
}

/// `sisci_bench` against a private node.
fn run_local(dir: &Path, quick: bool, json: Option<&Path>) -> Result<()> {
    let prog = dir.join("sisci_bench");
    if !prog.exists() {
        bail!("{} not found; build it with `make`", prog.display());
    }
    let node = TempNode::start(1)?;
    let mut cmd = Command::new(&prog);
    if quick {
        cmd.arg("-quick");
    }
    if let Some(j) = json {
        cmd.arg("-json").arg(j);
    }
    let status = cmd.env(vsci_proto::SOCKET_ENV, node.socket()).status().with_context(|| format!("running {}", prog.display()))?;
    netns::check_interrupted()?;
    if !status.success() {
        bail!("benchmark failed: {status}");
    }
    Ok(())
}

/// The last `n` lines of a text.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| format!("{l}\n")).collect()
}

/// Where a program is on PATH.
fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

fn f64_at(v: &Value, path: &[&str]) -> Option<f64> {
    let mut cur = v;
    for k in path {
        cur = cur.get(*k)?;
    }
    cur.as_f64()
}

// ---------------------------------------------------------------------------
// The remote path

const SOCKPERF_PORT: &str = "11111";
const IPERF_PORT: &str = "5201";

/// Two nodes, remote_bench between them, then the peers on the same
/// namespaces. Returns the "remote" JSON object.
fn run_remote(dir: &Path, quick: bool) -> Result<Value> {
    let prog = dir.join("remote_bench");
    if !prog.exists() {
        bail!("{} not found; build it with `make`", prog.display());
    }
    let prog = prog.canonicalize()?;
    let vscid = crate::node::sibling("vscid");

    println!("== remote: setting up two nodes in two network namespaces joined by a veth pair ==");
    let mut pair = Pair::create()?;
    println!(
        "namespaces {} (node 1, {}) and {} (node 2, {}); files in {}",
        pair.ns[0],
        pair.ip[0],
        pair.ns[1],
        pair.ip[1],
        pair.dir.display()
    );
    pair.start_nodes(&vscid, Duration::from_secs(30))?;
    println!("vscid up on both nodes; each reports the other \"up\"\n");

    // remote_bench: server on node 2, client on node 1.
    let quick_arg: &[&str] = if quick { &["-quick"] } else { &[] };
    let server_log = pair.dir.join("remote_bench-server.log");
    let mut server = pair.command(1, &prog);
    server.args(["-server", "-rn", "1"]).args(quick_arg);
    let slog = std::fs::File::create(&server_log)?;
    server.stdout(slog.try_clone()?).stderr(slog);
    let sh = pair.spawn(server, "remote_bench -server")?;
    let json_path = pair.dir.join("remote_bench.json");
    let mut client = pair.command(0, &prog);
    client.args(["-client", "-rn", "2"]).args(quick_arg).arg("-json").arg(&json_path);
    let ch = pair.spawn(client, "remote_bench -client")?;
    let limit = Duration::from_secs(if quick { 180 } else { 900 });
    let st = netns::wait_child(pair.helper(ch), limit, "remote_bench -client");
    let server_st = match &st {
        Ok(_) => netns::wait_child(pair.helper(sh), Duration::from_secs(15), "remote_bench -server").ok(),
        Err(_) => None,
    };
    let st = st?;
    pair.check_daemons()?;
    let vsci: Value = std::fs::read_to_string(&json_path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    if !st.success() || !server_st.is_some_and(|s| s.success()) {
        bail!(
            "remote_bench failed (client: {st}, server: {})\n--- server output ---\n{}--- vscid node 1 log ---\n{}--- vscid node 2 log ---\n{}",
            server_st.map(|s| s.to_string()).unwrap_or_else(|| "did not finish".into()),
            std::fs::read_to_string(&server_log).unwrap_or_default(),
            tail(&pair.log(0), 40),
            tail(&pair.log(1), 40)
        );
    }
    if vsci.is_null() {
        bail!("remote_bench wrote no JSON to {}", json_path.display());
    }

    // The peers, on the same namespaces, now that vsci is idle.
    println!("\n== remote: peers on the same namespaces ==");
    let pp_sizes: Vec<u64> = vec![64, 1024, 8192];
    let secs = if quick { 1 } else { 5 };
    let sockperf = match which("sockperf") {
        Some(sp) => run_sockperf(&mut pair, &sp, &pp_sizes, secs)?,
        None => {
            println!("sockperf: NOT INSTALLED, its rows show \"-\" (Debian: apt-get install sockperf, or scripts/install-deps.sh)");
            json!({"available": false})
        }
    };
    let iperf = match which("iperf3") {
        Some(ip) => run_iperf3(&mut pair, &ip, if quick { 2 } else { 5 })?,
        None => {
            println!("iperf3: NOT INSTALLED, its rows show \"-\" (Debian: apt-get install iperf3, or scripts/install-deps.sh)");
            json!({"available": false})
        }
    };
    pair.check_daemons()?;

    let table = print_table(&pair, &vsci, &sockperf, &iperf);
    Ok(json!({
        "namespaces": [
            {"name": pair.ns[0], "node_id": 1, "address": pair.ip[0]},
            {"name": pair.ns[1], "node_id": 2, "address": pair.ip[1]},
        ],
        "link": "veth pair between two network namespaces of one host",
        "vsci": vsci,
        "peers": {"sockperf": sockperf, "iperf3": iperf},
        "table": table,
        "units": {"latency": "microseconds; RTT/2 for ping-pongs, one way for store-to-visibility", "bandwidth": "MB/s (1e6 B/s)", "ratio": "vsci / peer"},
    }))
}

/// Remove terminal colour sequences.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            if it.peek() == Some(&'[') {
                it.next();
                for d in it.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The number after `key` ("avg-latency=", "percentile 99.000 =") on a
/// sockperf line.
fn sockperf_value(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let i = l.find(key)?;
        let rest = l[i + key.len()..].trim_start_matches(['=', ' ']);
        rest.split(|c: char| !(c.is_ascii_digit() || c == '.')).next()?.parse().ok()
    })
}

/// sockperf TCP ping-pong: `sockperf server` in node 2's namespace,
/// `sockperf ping-pong` from node 1's, one run per message size.
fn run_sockperf(pair: &mut Pair, sockperf: &Path, sizes: &[u64], secs: u32) -> Result<Value> {
    let addr = pair.ip[1].clone();
    let log = std::fs::File::create(pair.dir.join("sockperf-server.log"))?;
    let mut srv = pair.command(1, sockperf);
    srv.args(["server", "--tcp", "-i", &addr, "-p", SOCKPERF_PORT]).stdout(log.try_clone()?).stderr(log);
    let sh = pair.spawn(srv, "sockperf server")?;
    netns::sleep(Duration::from_millis(300))?;
    let mut rows = Vec::new();
    for &m in sizes {
        let mut text = String::new();
        for attempt in 0..10 {
            if let Some(st) = pair.helper(sh).try_wait()? {
                bail!("sockperf server exited ({st}): {}", std::fs::read_to_string(pair.dir.join("sockperf-server.log")).unwrap_or_default());
            }
            let mut c = pair.command(0, sockperf);
            c.args(["ping-pong", "--tcp", "-i", &addr, "-p", SOCKPERF_PORT, "-m", &m.to_string(), "-t", &secs.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let child = c.spawn().context("starting sockperf ping-pong")?;
            let out = wait_output(child, Duration::from_secs(secs as u64 + 30), "sockperf ping-pong")?;
            text = strip_ansi(&(String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)));
            if out.status.success() && text.contains("avg-latency") {
                break;
            }
            if attempt == 9 {
                bail!("sockperf ping-pong -m {m} failed ({}):\n{text}", out.status);
            }
            netns::sleep(Duration::from_millis(300))?;
        }
        let row = json!({
            "size": m,
            "mean_us": sockperf_value(&text, "avg-latency="),
            "median_us": sockperf_value(&text, "percentile 50.000 ="),
            "p99_us": sockperf_value(&text, "percentile 99.000 ="),
            "max_us": sockperf_value(&text, "<MAX> observation ="),
            "min_us": sockperf_value(&text, "<MIN> observation ="),
            "n": sockperf_value(&text, "Total "),
        });
        println!(
            "sockperf ping-pong --tcp -m {m:<5} -t {secs}: median {} us, p99 {} us (RTT/2)",
            fmt_opt(row["median_us"].as_f64(), 2),
            fmt_opt(row["p99_us"].as_f64(), 2)
        );
        rows.push(row);
    }
    netns::stop_child(pair.helper(sh), Duration::from_millis(500));
    Ok(json!({
        "available": true,
        "command": format!("sockperf server --tcp -i {addr} -p {SOCKPERF_PORT} (node 2 ns); sockperf ping-pong --tcp -i {addr} -p {SOCKPERF_PORT} -m SIZE -t {secs} (node 1 ns)"),
        "what": "blocking TCP ping-pong, latency = RTT/2",
        "rows": rows,
    }))
}

/// iperf3, one TCP stream from node 1's namespace to node 2's.
fn run_iperf3(pair: &mut Pair, iperf3: &Path, secs: u32) -> Result<Value> {
    let addr = pair.ip[1].clone();
    let log = std::fs::File::create(pair.dir.join("iperf3-server.log"))?;
    let mut srv = pair.command(1, iperf3);
    srv.args(["-s", "-B", &addr, "-p", IPERF_PORT]).stdout(log.try_clone()?).stderr(log);
    let sh = pair.spawn(srv, "iperf3 -s")?;
    netns::sleep(Duration::from_millis(300))?;
    let mut result = None;
    for attempt in 0..10 {
        let mut c = pair.command(0, iperf3);
        c.args(["-c", &addr, "-p", IPERF_PORT, "-t", &secs.to_string(), "-J"]).stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = c.spawn().context("starting iperf3 -c")?;
        let out = wait_output(child, Duration::from_secs(secs as u64 + 30), "iperf3 -c")?;
        let v: Option<Value> = serde_json::from_slice(&out.stdout).ok();
        let bps = v.as_ref().and_then(|v| f64_at(v, &["end", "sum_received", "bits_per_second"]));
        if out.status.success() && bps.is_some() {
            result = Some((bps.unwrap_or(0.0), v.unwrap_or(Value::Null)));
            break;
        }
        if attempt == 9 {
            bail!("iperf3 -c failed ({}): {}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
        netns::sleep(Duration::from_millis(300))?;
    }
    netns::stop_child(pair.helper(sh), Duration::from_millis(500));
    let (bps, v) = result.expect("set or bailed");
    let mbps = bps / 8.0 / 1e6;
    let sent = f64_at(&v, &["end", "sum_sent", "bits_per_second"]).map(|b| b / 8.0 / 1e6);
    let retr = v.get("end").and_then(|e| e.get("sum_sent")).and_then(|s| s.get("retransmits")).cloned();
    println!("iperf3 -c -t {secs} (1 TCP stream): {mbps:.1} MB/s received");
    Ok(json!({
        "available": true,
        "command": format!("iperf3 -s -B {addr} -p {IPERF_PORT} (node 2 ns); iperf3 -c {addr} -p {IPERF_PORT} -t {secs} -J (node 1 ns)"),
        "what": "one TCP stream, bytes received per second",
        "MBps": mbps,
        "sent_MBps": sent,
        "retransmits": retr,
        "seconds": secs,
    }))
}

/// Wait for a child with piped output, killing it after `timeout` or on a
/// signal.
fn wait_output(mut child: std::process::Child, timeout: Duration, what: &str) -> Result<std::process::Output> {
    use std::io::Read;
    // Read the pipes in threads so a chatty child cannot block on them.
    let mut so = child.stdout.take();
    let mut se = child.stderr.take();
    let t1 = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = so.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let t2 = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(s) = se.as_mut() {
            let _ = s.read_to_end(&mut b);
        }
        b
    });
    let status = netns::wait_child(&mut child, timeout, what)?;
    Ok(std::process::Output { status, stdout: t1.join().unwrap_or_default(), stderr: t2.join().unwrap_or_default() })
}

// ---------------------------------------------------------------------------
// The table

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "-".into(),
    }
}

fn size_name(s: u64) -> String {
    if s >= 1 << 20 && s % (1 << 20) == 0 {
        format!("{} MiB", s >> 20)
    } else if s >= 1024 && s % 1024 == 0 {
        format!("{} KiB", s >> 10)
    } else {
        format!("{s} B")
    }
}

struct Row {
    what: String,
    unit: &'static str,
    vsci: (Option<f64>, Option<f64>),
    peer_name: String,
    peer: (Option<f64>, Option<f64>),
    /// Latency rows compare medians (lower is better); bandwidth rows MB/s.
    latency: bool,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        match (self.vsci.0, self.peer.0) {
            (Some(v), Some(p)) if p > 0.0 => Some(v / p),
            _ => None,
        }
    }
}

fn lat_of(v: &Value) -> (Option<f64>, Option<f64>) {
    (v.get("median_us").and_then(Value::as_f64), v.get("p99_us").and_then(Value::as_f64))
}

fn rows_of<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(|x| x.get("rows")).and_then(Value::as_array).into_iter().flatten()
}

fn sockperf_row(sp: &Value, size: u64) -> (Option<f64>, Option<f64>) {
    sp.get("rows")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| r.get("size").and_then(Value::as_u64) == Some(size))
        .map(lat_of)
        .unwrap_or((None, None))
}

fn print_table(pair: &Pair, vsci: &Value, sp: &Value, ip: &Value) -> Vec<Value> {
    let mut rows: Vec<Row> = Vec::new();
    let sp_name = |s: u64| {
        if sp.get("available").and_then(Value::as_bool) == Some(true) {
            format!("sockperf TCP ping-pong {}", size_name(s))
        } else {
            "sockperf (not installed)".to_string()
        }
    };
    // Ping-pong: every remote_bench size that sockperf also ran.
    for r in rows_of(vsci, "pingpong") {
        let Some(size) = r.get("size").and_then(Value::as_u64) else { continue };
        let peer = sockperf_row(sp, size);
        if peer.0.is_none() && sp.get("available").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if ![64, 1024, 8192].contains(&size) {
            continue;
        }
        rows.push(Row {
            what: format!("ping-pong {}, stores + flag, no call", size_name(size)),
            unit: "us",
            vsci: lat_of(&r["vsci"]),
            peer_name: sp_name(size),
            peer,
            latency: true,
        });
    }
    // Interrupts.
    if let Some(i) = vsci.get("interrupt").and_then(|x| x.get("vsci")) {
        rows.push(Row {
            what: "interrupt trigger -> wait".into(),
            unit: "us",
            vsci: lat_of(i),
            peer_name: sp_name(64),
            peer: sockperf_row(sp, 64),
            latency: true,
        });
    }
    for r in rows_of(vsci, "data_interrupt") {
        let Some(len) = r.get("payload").and_then(Value::as_u64) else { continue };
        let ps = if len <= 64 { 64 } else { len };
        rows.push(Row {
            what: format!("data interrupt {}", size_name(len)),
            unit: "us",
            vsci: lat_of(&r["vsci"]),
            peer_name: sp_name(ps),
            peer: sockperf_row(sp, ps),
            latency: true,
        });
    }
    // Store-to-visibility: one way, against sockperf's one-way (RTT/2) 64 B.
    for r in rows_of(vsci, "store_visibility") {
        let pace = r.get("interval_us").and_then(Value::as_u64).unwrap_or(0);
        let pace = if pace >= 1000 { format!("{} ms", pace / 1000) } else { format!("{pace} us") };
        rows.push(Row {
            what: format!("store-to-visibility, a store every {pace}"),
            unit: "us",
            vsci: lat_of(&r["delay"]),
            peer_name: format!("{} (RTT/2)", sp_name(64)),
            peer: sockperf_row(sp, 64),
            latency: true,
        });
    }
    // Bandwidth against iperf3.
    let ip_mbps = ip.get("MBps").and_then(Value::as_f64);
    let ip_name = if ip_mbps.is_some() { "iperf3 TCP, 1 stream".to_string() } else { "iperf3 (not installed)".to_string() };
    let bw: Vec<&Value> = rows_of(vsci, "write_bandwidth").collect();
    for r in &bw {
        let Some(size) = r.get("size").and_then(Value::as_u64) else { continue };
        if ![64 << 10, 1 << 20, 8 << 20].contains(&size) {
            continue;
        }
        rows.push(Row {
            what: format!("write {}, memcpy + SCIFlush", size_name(size)),
            unit: "MB/s",
            vsci: (r.get("flush_MBps").and_then(Value::as_f64), None),
            peer_name: ip_name.clone(),
            peer: (ip_mbps, None),
            latency: false,
        });
    }
    if let Some(r) = bw.iter().find(|r| r.get("size").and_then(Value::as_u64) == Some(8 << 20)) {
        rows.push(Row {
            what: "write 8 MiB, SCIMemCpy".into(),
            unit: "MB/s",
            vsci: (r.get("memcpy_MBps").and_then(Value::as_f64), None),
            peer_name: ip_name.clone(),
            peer: (ip_mbps, None),
            latency: false,
        });
    }

    println!(
        "\n== remote: vsci node 1 ({}) <-> node 2 ({}), two network namespaces over veth ==",
        pair.ip[0], pair.ip[1]
    );
    println!("   latency: median / p99 in us, RTT/2 (store-to-visibility: one way); bandwidth: MB/s = 1e6 B/s");
    println!("   ratio = vsci / peer (medians; for latency lower is better, for bandwidth higher is better)\n");
    let cell = |v: (Option<f64>, Option<f64>), unit: &str| -> String {
        match (v.0, v.1) {
            (Some(a), Some(b)) => format!("{a:.2} / {b:.2} {unit}"),
            (Some(a), None) => format!("{a:.1} {unit}"),
            _ => "-".into(),
        }
    };
    println!("{:<42} {:>24}   {:<42} {:>22} {:>9}", "what", "vsci", "peer", "peer value", "ratio");
    println!("{}", "-".repeat(42 + 1 + 24 + 3 + 42 + 1 + 22 + 1 + 9));
    let mut out = Vec::new();
    for r in &rows {
        let ratio = r.ratio();
        println!(
            "{:<42} {:>24}   {:<42} {:>22} {:>9}",
            r.what,
            cell(r.vsci, r.unit),
            r.peer_name,
            cell(r.peer, r.unit),
            ratio.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
        );
        out.push(json!({
            "what": r.what,
            "unit": r.unit,
            "kind": if r.latency { "latency" } else { "bandwidth" },
            "vsci": if r.latency { json!({"median": r.vsci.0, "p99": r.vsci.1}) } else { json!(r.vsci.0) },
            "peer": r.peer_name,
            "peer_value": if r.latency { json!({"median": r.peer.0, "p99": r.peer.1}) } else { json!(r.peer.0) },
            "ratio": ratio,
        }));
    }
    // Store-to-visibility, the figure the brief asks to publish.
    let vis: Vec<String> = rows_of(vsci, "store_visibility")
        .map(|r| {
            format!(
                "every {} us: p50 {} us, p99 {} us, max {} us ({} of {} seen)",
                r.get("interval_us").and_then(Value::as_u64).unwrap_or(0),
                fmt_opt(r["delay"].get("median_us").and_then(Value::as_f64), 1),
                fmt_opt(r["delay"].get("p99_us").and_then(Value::as_f64), 1),
                fmt_opt(r["delay"].get("max_us").and_then(Value::as_f64), 1),
                r["delay"].get("n").and_then(Value::as_u64).unwrap_or(0),
                r.get("sent").and_then(Value::as_u64).unwrap_or(0),
            )
        })
        .collect();
    // Correctness notes from the ping-pong (remote_bench checks every payload).
    for r in rows_of(vsci, "pingpong") {
        let size = r.get("size").and_then(Value::as_u64).unwrap_or(0);
        let late = r.get("flag_before_payload").and_then(Value::as_u64).unwrap_or(0);
        let bad = r["vsci"].get("bad").and_then(Value::as_u64).unwrap_or(0);
        let n = r["vsci"].get("n").and_then(Value::as_u64).unwrap_or(0);
        if late > 0 || bad > 0 {
            println!(
                "!! ping-pong {}: {late} messages had the flag before the whole payload, {bad} a payload that never completed (warm-up and {n} timed round trips)",
                size_name(size)
            );
        }
    }
    if !vis.is_empty() {
        println!("\nstore-to-visibility delay (a store to a remote map with no call, until the owner sees it):");
        for v in vis {
            println!("  {v}");
        }
    }
    out
}
