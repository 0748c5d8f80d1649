//! The peers: programs that do what vsci does without SISCI, run on the
//! same path in the same run (sockperf, iperf3, ucx_perftest), and the
//! seed-001 transfer run (examples/sendrecv), which every path shares.
//!
//! Everything here runs through [`Sites`], two ends of a path: so a path
//! only has to say how to start a program at each end and where the other
//! end is reached.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::schema::{
    self, AmTest, FabricWrite, FabricWriteOutput, Iperf3, PeerNote, PeerPrograms, Sockperf, SockperfRow, TransferRow,
    Transfers, Ucx, UcxAm, UcxAmRow, UcxBw, UcxLat,
};

use crate::{netns, run_forwarded, say, size_name, strip_ansi, Forward};

/// A peer program and the Debian package that has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    Sockperf,
    Iperf3,
    UcxPerftest,
    Fio,
    Nbdkit,
}

impl Tool {
    pub fn binary(self) -> &'static str {
        match self {
            Tool::Sockperf => "sockperf",
            Tool::Iperf3 => "iperf3",
            Tool::UcxPerftest => "ucx_perftest",
            Tool::Fio => "fio",
            Tool::Nbdkit => "nbdkit",
        }
    }
    pub fn package(self) -> &'static str {
        match self {
            Tool::Sockperf => "sockperf",
            Tool::Iperf3 => "iperf3",
            Tool::UcxPerftest => "ucx-utils",
            Tool::Fio => "fio",
            Tool::Nbdkit => "nbdkit",
        }
    }
}

/// Which peers are there, and what happened to the missing ones.
#[derive(Default)]
pub struct Tools {
    found: BTreeMap<Tool, PathBuf>,
    notes: Vec<PeerNote>,
}

impl Tools {
    pub fn get(&self, t: Tool) -> Option<&Path> {
        self.found.get(&t).map(PathBuf::as_path)
    }
    pub fn to_schema(&self) -> PeerPrograms {
        PeerPrograms {
            found: self.found.iter().map(|(t, p)| (t.binary().to_string(), p.display().to_string())).collect(),
            notes: self.notes.clone(),
        }
    }
    /// A line for a peer that is not there.
    pub fn missing(&self, t: Tool) -> String {
        format!(
            "{}: NOT AVAILABLE, its figures show \"-\" (Debian package {}; scripts/install-deps.sh installs it)",
            t.binary(),
            t.package()
        )
    }
}

/// Where a program is on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// Find the peers; install the missing ones with apt-get when we are root
/// and `install` is on, otherwise say what is missing.
pub fn ensure(tools: &[Tool], install: bool) -> Tools {
    let mut t = Tools::default();
    let mut missing = Vec::new();
    for &tool in tools {
        match which(tool.binary()) {
            Some(p) => {
                t.found.insert(tool, p);
            }
            None => missing.push(tool),
        }
    }
    if missing.is_empty() {
        return t;
    }
    let pkgs: Vec<&str> = missing.iter().map(|m| m.package()).collect();
    let root = nix::unistd::geteuid().is_root();
    if install && root && which("apt-get").is_some() {
        say(&format!("peers: installing Debian packages {} (apt-get)", pkgs.join(" ")));
        let apt = |args: &[&str]| -> bool {
            let mut c = Command::new("apt-get");
            c.args(args).env("DEBIAN_FRONTEND", "noninteractive").stdin(Stdio::null());
            match run_forwarded(c, "apt-get", Duration::from_secs(600), false) {
                Ok((st, _)) => st.success(),
                Err(_) => false,
            }
        };
        let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
        args.extend(pkgs.iter().copied());
        // The package lists may be stale or absent; update once and retry.
        if !apt(&args) {
            let _ = apt(&["update", "-q"]);
            let _ = apt(&args);
        }
        for &tool in &missing {
            match which(tool.binary()) {
                Some(p) => {
                    t.notes.push(PeerNote {
                        tool: tool.binary().into(),
                        package: tool.package().into(),
                        installed: Some(true),
                        missing: None,
                    });
                    t.found.insert(tool, p);
                }
                None => {
                    say(&format!("peers: {} is still missing after apt-get install {}", tool.binary(), tool.package()));
                    t.notes.push(PeerNote {
                        tool: tool.binary().into(),
                        package: tool.package().into(),
                        installed: None,
                        missing: Some("apt-get install failed".into()),
                    });
                }
            }
        }
    } else {
        let why = if !install {
            "--no-install given"
        } else if !root {
            "not root, cannot apt-get"
        } else {
            "no apt-get on this system"
        };
        for &tool in &missing {
            say(&format!("peers: {} ({why})", t.missing(tool)));
            t.notes.push(PeerNote {
                tool: tool.binary().into(),
                package: tool.package().into(),
                installed: None,
                missing: Some(why.into()),
            });
        }
    }
    t
}

/// The two ends of a path. End 0 is the client / sender, end 1 the
/// server / receiver.
pub trait Sites {
    /// `program` started at end `i`, with `VSCI_SOCKET` naming that end's
    /// node, stdin closed, in a process group of its own (so a stop
    /// reaches everything it started).
    fn command(&self, i: usize, program: &Path) -> Command;
    /// The address end `i` is reached at from the other end.
    fn addr(&self, i: usize) -> String;
    /// The SISCI node id of end `i`.
    fn node_id(&self, i: usize) -> u32;
    /// The network device both ends reach each other through, when it has
    /// the same name at both (what a UCT test of `ucx_perftest` needs).
    fn net_dev(&self) -> Option<String> {
        None
    }
    /// Bytes that crossed the link between the ends so far, both ways
    /// (interface counters), when the path can count them.
    fn link_bytes(&self) -> Option<u64> {
        None
    }
}

/// A server we started; stopped when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        netns::stop_child(&mut self.0, Duration::from_millis(500));
    }
}

fn spawn_server(sites: &dyn Sites, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<(Guard, Forward)> {
    let mut c = sites.command(1, program);
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().with_context(|| format!("starting {} server", program.display()))?;
    let fwd = Forward::start(&mut child, false);
    Ok((Guard(child), fwd))
}

// ---------------------------------------------------------------------------
// sockperf

pub const SOCKPERF_PORT: &str = "11111";
pub const IPERF_PORT: &str = "5201";

/// The number after `key` ("avg-latency=", "percentile 99.000 =") on a
/// sockperf line.
fn sockperf_value(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let i = l.find(key)?;
        let rest = l[i + key.len()..].trim_start_matches(['=', ' ']);
        rest.split(|c: char| !(c.is_ascii_digit() || c == '.')).next()?.parse().ok()
    })
}

/// sockperf TCP ping-pong: `sockperf server` at end 1, `sockperf
/// ping-pong` from end 0, one run per message size.
pub fn sockperf(sites: &dyn Sites, tools: &Tools, sizes: &[u64], secs: u32) -> Sockperf {
    let Some(prog) = tools.get(Tool::Sockperf) else {
        say(&tools.missing(Tool::Sockperf));
        return Sockperf::default();
    };
    match sockperf_run(sites, prog, sizes, secs) {
        Ok(v) => v,
        Err(e) => {
            say(&format!("!! sockperf failed: {e:#}"));
            Sockperf { available: true, error: Some(format!("{e:#}")), ..Sockperf::default() }
        }
    }
}

fn sockperf_run(sites: &dyn Sites, prog: &Path, sizes: &[u64], secs: u32) -> Result<Sockperf> {
    let addr = sites.addr(1);
    let (mut srv, srv_out) = spawn_server(sites, prog, &["server", "--tcp", "-i", &addr, "-p", SOCKPERF_PORT], &[])?;
    netns::sleep(Duration::from_millis(300))?;
    let mut rows = Vec::new();
    for &m in sizes {
        let mut text = String::new();
        for attempt in 0..10 {
            if let Some(st) = srv.0.try_wait()? {
                bail!("sockperf server exited ({st}): {}", srv_out.text.lock().map(|t| t.clone()).unwrap_or_default());
            }
            let mut c = sites.command(0, prog);
            c.args([
                "ping-pong",
                "--tcp",
                "-i",
                &addr,
                "-p",
                SOCKPERF_PORT,
                "-m",
                &m.to_string(),
                "-t",
                &secs.to_string(),
            ]);
            let (st, out) = run_forwarded(c, "sockperf ping-pong", Duration::from_secs(secs as u64 + 30), false)?;
            text = strip_ansi(&out);
            if st.success() && text.contains("avg-latency") {
                break;
            }
            if attempt == 9 {
                bail!("sockperf ping-pong -m {m} failed ({st}):\n{text}");
            }
            netns::sleep(Duration::from_millis(300))?;
        }
        let row = SockperfRow {
            size: m,
            mean_us: sockperf_value(&text, "avg-latency="),
            median_us: sockperf_value(&text, "percentile 50.000 ="),
            p99_us: sockperf_value(&text, "percentile 99.000 ="),
            max_us: sockperf_value(&text, "<MAX> observation ="),
            min_us: sockperf_value(&text, "<MIN> observation ="),
            n: sockperf_value(&text, "Total "),
        };
        say(&format!(
            "sockperf ping-pong --tcp -m {m:<5} -t {secs}: median {} us, p99 {} us (RTT/2)",
            crate::fmt_opt(row.median_us, 2),
            crate::fmt_opt(row.p99_us, 2)
        ));
        rows.push(row);
    }
    Ok(Sockperf {
        available: true,
        error: None,
        command: Some(format!("sockperf server --tcp -i {addr} -p {SOCKPERF_PORT} (end 1); sockperf ping-pong --tcp -i {addr} -p {SOCKPERF_PORT} -m SIZE -t {secs} (end 0)")),
        what: Some("blocking TCP ping-pong, latency = RTT/2".into()),
        rows,
    })
}

// ---------------------------------------------------------------------------
// iperf3

/// iperf3, one TCP stream from end 0 to end 1.
pub fn iperf3(sites: &dyn Sites, tools: &Tools, secs: u32) -> Iperf3 {
    let Some(prog) = tools.get(Tool::Iperf3) else {
        say(&tools.missing(Tool::Iperf3));
        return Iperf3::default();
    };
    match iperf3_run(sites, prog, secs) {
        Ok(v) => v,
        Err(e) => {
            say(&format!("!! iperf3 failed: {e:#}"));
            Iperf3 { available: true, error: Some(format!("{e:#}")), ..Iperf3::default() }
        }
    }
}

/// What vsci bench reads of iperf3's `-J` output (the rest is ignored: it
/// is iperf3's, not ours).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct IperfJson {
    pub end: IperfEnd,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct IperfEnd {
    pub sum_received: IperfSum,
    pub sum_sent: IperfSum,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct IperfSum {
    pub bits_per_second: f64,
    #[serde(default)]
    pub bytes: Option<f64>,
    #[serde(default)]
    pub retransmits: Option<u64>,
}

/// MB/s the receiving end of an iperf3 run got (its `-J` output).
pub fn iperf3_received(v: &IperfJson) -> Option<f64> {
    Some(v.end.sum_received.bits_per_second / 8.0 / 1e6)
}

/// One `iperf3 -c` from end 0 to the server on `port` at end 1, with
/// `extra` client arguments (`-l 4096`, `-R`, ...); retried while the
/// server is not up yet or still busy with an earlier client. iperf3's
/// JSON, which has a received rate.
pub fn iperf3_client(sites: &dyn Sites, prog: &Path, port: &str, secs: u32, extra: &[&str]) -> Result<IperfJson> {
    let addr = sites.addr(1);
    for attempt in 0..10 {
        let mut c = sites.command(0, prog);
        c.args(["-c", &addr, "-p", port, "-t", &secs.to_string(), "-J"]).args(extra);
        let (st, out) = run_forwarded(c, "iperf3 -c", Duration::from_secs(secs as u64 + 30), false)?;
        // -J prints one JSON object; stderr (merged here) is empty on success.
        let v: Option<IperfJson> = out.find('{').and_then(|i| serde_json::from_str(out[i..].trim_end()).ok());
        match v {
            Some(v) if st.success() => return Ok(v),
            _ if attempt == 9 => bail!(
                "iperf3 -c {addr} -p {port} {} failed ({st}): {}",
                extra.join(" "),
                out.chars().take(600).collect::<String>()
            ),
            _ => netns::sleep(Duration::from_millis(300))?,
        }
    }
    unreachable!()
}

fn iperf3_run(sites: &dyn Sites, prog: &Path, secs: u32) -> Result<Iperf3> {
    let addr = sites.addr(1);
    let (_srv, _out) = spawn_server(sites, prog, &["-s", "-B", &addr, "-p", IPERF_PORT], &[])?;
    netns::sleep(Duration::from_millis(300))?;
    let v = iperf3_client(sites, prog, IPERF_PORT, secs, &[])?;
    let mbps = iperf3_received(&v).context("iperf3 gave no result")?;
    let sent = Some(v.end.sum_sent.bits_per_second / 8.0 / 1e6);
    say(&format!("iperf3 -c -t {secs} (1 TCP stream): {mbps:.1} MB/s received"));
    Ok(Iperf3 {
        available: true,
        error: None,
        command: Some(format!(
            "iperf3 -s -B {addr} -p {IPERF_PORT} (end 1); iperf3 -c {addr} -p {IPERF_PORT} -t {secs} -J (end 0)"
        )),
        what: Some("one TCP stream, bytes received per second".into()),
        mbps: Some(mbps),
        sent_mbps: sent,
        retransmits: v.end.sum_sent.retransmits,
        seconds: Some(secs.into()),
    })
}

// ---------------------------------------------------------------------------
// ucx_perftest

pub const UCX_PORT: u16 = 13337;

/// The numbers of ucx_perftest's `Final:` line: iterations, latency
/// 50th percentile / average / overall (µs), bandwidth average / overall
/// (MiB/s), message rate average / overall (msg/s).
fn ucx_final(text: &str) -> Option<Vec<f64>> {
    let l = text.lines().rev().find(|l| l.trim_start().starts_with("Final:"))?;
    let v: Vec<f64> = l.trim_start()["Final:".len()..].split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (v.len() >= 8).then_some(v)
}

/// ucx_perftest between the two ends with the given `UCX_TLS`:
/// `ucp_put_lat` (RTT/2, busy polling) and `ucp_put_bw` per size. A
/// failing run is kept as its error text, never as a number.
/// With `am_bw`, also `ucp_am_bw` per size: UCX 1.13 has no native put
/// over TCP and emulates it, slowly for large messages; active messages
/// are what UCX moves fastest over TCP, so they bound what UCX can do on
/// the path.
pub fn ucx(
    sites: &dyn Sites,
    tools: &Tools,
    tls: &str,
    lat_sizes: &[u64],
    bw_sizes: &[u64],
    am_bw: bool,
    quick: bool,
) -> Ucx {
    let Some(prog) = tools.get(Tool::UcxPerftest) else {
        say(&tools.missing(Tool::UcxPerftest));
        return Ucx { available: false, tls: tls.into(), ..Ucx::default() };
    };
    let mut lat = Vec::new();
    let mut bw = Vec::new();
    let mut am = Vec::new();
    let mut errors = Vec::new();
    let mut one = |test: &str, size: u64, iters: u64| -> Option<Vec<f64>> {
        match ucx_run(sites, prog, tls, test, size, iters) {
            Ok(v) => Some(v),
            Err(e) => {
                let msg = format!("{test} -s {size}: {e:#}");
                say(&format!("!! ucx_perftest (UCX_TLS={tls}) {msg}"));
                errors.push(msg);
                None
            }
        }
    };
    for &s in lat_sizes {
        let iters = if quick { 2000 } else { 20000 };
        if let Some(v) = one("ucp_put_lat", s, iters) {
            say(&format!(
                "ucx_perftest -t ucp_put_lat -s {:<5} UCX_TLS={tls}: median {:.3} us, average {:.3} us (RTT/2)",
                s, v[1], v[2]
            ));
            lat.push(UcxLat { size: s, n: v[0], median_us: v[1], mean_us: v[2] });
        }
    }
    let bw_tests: &[&str] = if am_bw { &["ucp_put_bw", "ucp_am_bw"] } else { &["ucp_put_bw"] };
    for &test in bw_tests {
        for &s in bw_sizes {
            // About 256 MiB per run (64 MiB quick), at least 50 iterations.
            let iters = ((if quick { 64u64 << 20 } else { 256 << 20 }) / s).max(50);
            if let Some(v) = one(test, s, iters) {
                // ucx_perftest's "MB/s" is MiB/s; use the message rate instead.
                let mbps = v[7] * s as f64 / 1e6;
                say(&format!("ucx_perftest -t {test:<11} -s {:<8} UCX_TLS={tls}: {mbps:.1} MB/s", s));
                let row = UcxBw { size: s, n: v[0], mbps };
                if test == "ucp_am_bw" {
                    am.push(row);
                } else {
                    bw.push(row);
                }
            }
        }
    }
    Ucx {
        available: true,
        tls: tls.into(),
        command: Some(format!("UCX_TLS={tls} ucx_perftest -p {UCX_PORT} (end 1); UCX_TLS={tls} ucx_perftest {} -p {UCX_PORT} -t ucp_put_lat|ucp_put_bw{} -s SIZE -n N (end 0)", sites.addr(1), if am_bw { "|ucp_am_bw" } else { "" })),
        what: Some("UCP put: latency = RTT/2 of a put ping-pong with busy polling; bandwidth = message rate x size".into()),
        lat,
        bw,
        am_bw: am,
        errors,
        reference_pingpong: None,
    }
}

fn ucx_run(sites: &dyn Sites, prog: &Path, tls: &str, test: &str, size: u64, iters: u64) -> Result<Vec<f64>> {
    let args: Vec<String> =
        ["-t", test, "-s", &size.to_string(), "-n", &iters.to_string()].iter().map(|s| s.to_string()).collect();
    ucx_run_args(sites, prog, tls, &args).map(|(v, _)| v)
}

/// One ucx_perftest run with the client arguments `args` (after the
/// server's address and port); the numbers of its `Final:` line and the
/// bytes that crossed the link during the attempt that gave them.
fn ucx_run_args(sites: &dyn Sites, prog: &Path, tls: &str, args: &[String]) -> Result<(Vec<f64>, Option<u64>)> {
    let port = UCX_PORT.to_string();
    let env = [("UCX_TLS", tls), ("UCX_WARN_UNUSED_ENV_VARS", "n")];
    let mut last = String::new();
    for attempt in 0..5 {
        // The server serves one test and exits, so each run starts one.
        let (mut srv, srv_out) = spawn_server(sites, prog, &["-p", &port], &env)?;
        netns::sleep(Duration::from_millis(if attempt == 0 { 300 } else { 800 }))?;
        let mut c = sites.command(0, prog);
        c.args([&sites.addr(1), "-p", &port]).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let b0 = sites.link_bytes();
        let (st, out) = run_forwarded(c, "ucx_perftest", Duration::from_secs(120), false)?;
        let b1 = sites.link_bytes();
        let t0 = Instant::now();
        while srv.0.try_wait()?.is_none() && t0.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(srv);
        let srv_text = srv_out.finish();
        if st.success() {
            if let Some(v) = ucx_final(&out) {
                return Ok((v, b0.zip(b1).map(|(a, b)| b.saturating_sub(a))));
            }
        }
        last = format!("client {st}: {}server: {}", crate::tail(&out, 6), crate::tail(&srv_text, 6));
        if attempt < 4 {
            netns::sleep(Duration::from_millis(500))?;
        }
    }
    bail!("no result after 5 attempts; last one:\n{last}")
}

/// Active messages over UCX's tcp transport, the peer of remote_bench's
/// message ring (issue 35): per size a latency run (`am_lat`, a ping-pong
/// with busy polling, RTT/2) and a bandwidth run (`am_bw`, message rate),
/// with the bytes that crossed the link per message, counted the way the
/// ring counts its own (the interface counters, both ways). UCT's own tests
/// (`-t am_lat|am_bw -x tcp -d DEV`, short messages) where the path names a
/// device with the same name at both ends; otherwise, or when a UCT run
/// fails, UCP's (`ucp_am_lat|ucp_am_bw`, `UCX_TLS=tcp`); each row says
/// which. No warm-up (`-w 0`): ucx_perftest's warm-up sends a number of
/// messages it does not report, and every message must be counted; the
/// median and a rate over many messages hardly notice. Messages: 2 per
/// latency iteration (there and back), 1 per bandwidth iteration.
/// `counts`: how many (fewer with the CPU oversubscribed, where a round trip
/// takes milliseconds).
/// Iterations of the active-message runs: `lat` round trips; `bw_bytes`
/// of messages, at least `bw_min` and at most `bw_max` messages.
#[derive(Clone, Copy)]
pub struct AmCounts {
    pub lat: u64,
    pub bw_bytes: u64,
    pub bw_min: u64,
    pub bw_max: u64,
}

impl AmCounts {
    pub const FULL: AmCounts = AmCounts { lat: 20_000, bw_bytes: 128 << 20, bw_min: 5000, bw_max: 100_000 };
    pub const QUICK: AmCounts = AmCounts { lat: 2000, bw_bytes: 16 << 20, bw_min: 1000, bw_max: 10_000 };
    /// Under load a round trip takes milliseconds.
    pub const LOADED: AmCounts = AmCounts { lat: 1000, bw_bytes: 4 << 20, bw_min: 500, bw_max: 2000 };
}

pub fn ucx_am(sites: &dyn Sites, tools: &Tools, sizes: &[u64], counts: AmCounts) -> UcxAm {
    let Some(prog) = tools.get(Tool::UcxPerftest) else {
        say(&tools.missing(Tool::UcxPerftest));
        return UcxAm { available: false, tls: "tcp".into(), ..UcxAm::default() };
    };
    let dev = sites.net_dev();
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for &size in sizes {
        for lat in [true, false] {
            let iters = if lat { counts.lat } else { (counts.bw_bytes / size).clamp(counts.bw_min, counts.bw_max) };
            let (uct, ucp) = if lat { ("am_lat", "ucp_am_lat") } else { ("am_bw", "ucp_am_bw") };
            let mut tries: Vec<(&str, &str, Vec<String>)> = Vec::new();
            let common = |t: &str| -> Vec<String> {
                ["-t", t, "-s", &size.to_string(), "-n", &iters.to_string(), "-w", "0"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            };
            if let Some(d) = &dev {
                let mut a = common(uct);
                a.extend(["-x".to_string(), "tcp".to_string(), "-d".to_string(), d.clone()]);
                tries.push(("uct", uct, a));
            }
            tries.push(("ucp", ucp, common(ucp)));
            let mut done = false;
            for (api, test, args) in tries {
                match ucx_run_args(sites, prog, "tcp", &args) {
                    Ok((v, link)) => {
                        let msgs = if lat { 2.0 * v[0] } else { v[0] };
                        let per = link.map(|b| b as f64 / msgs.max(1.0));
                        let rate = v[7];
                        if lat {
                            say(&format!(
                                "ucx_perftest -t {test:<10} -s {size:<5} ({api}, tcp): median {:.3} us (RTT/2), link {} B/message",
                                v[1],
                                crate::fmt_opt(per, 0)
                            ));
                        } else {
                            say(&format!(
                                "ucx_perftest -t {test:<10} -s {size:<5} ({api}, tcp): {rate:.0} messages/s, {:.1} MB/s, link {} B/message",
                                rate * size as f64 / 1e6,
                                crate::fmt_opt(per, 0)
                            ));
                        }
                        rows.push(UcxAmRow {
                            size,
                            test: if lat { AmTest::AmLat } else { AmTest::AmBw },
                            ucx_test: test.into(),
                            api: api.into(),
                            n: v[0],
                            messages: msgs,
                            median_us: lat.then_some(v[1]),
                            mean_us: lat.then_some(v[2]),
                            msgs_per_s: rate,
                            mbps: rate * size as f64 / 1e6,
                            link_bytes: link,
                            link_bytes_per_msg: per,
                        });
                        done = true;
                        break;
                    }
                    Err(e) => {
                        let msg = format!("{test} -s {size} ({api}): {e:#}");
                        say(&format!("!! ucx_perftest {msg}"));
                        errors.push(msg);
                    }
                }
            }
            if !done {
                say(&format!("!! ucx_perftest: no {} figure at {size} B", if lat { "am_lat" } else { "am_bw" }));
            }
        }
    }
    let dev_arg = dev.as_deref().map(|d| format!(" -x tcp -d {d}")).unwrap_or_default();
    UcxAm {
        available: true,
        tls: "tcp".into(),
        command: Some(format!(
            "ucx_perftest -p {UCX_PORT} (end 1); ucx_perftest {} -p {UCX_PORT} -t am_lat|am_bw{dev_arg} -s SIZE -n N -w 0 (end 0; UCT, short messages){}",
            sites.addr(1),
            if dev.is_some() { "; where a UCT run fails: -t ucp_am_lat|ucp_am_bw with UCX_TLS=tcp" } else { "" }
        )),
        what: Some("active messages over UCX tcp: am_lat = RTT/2 of a ping-pong with busy polling; am_bw = messages per second one way (flow-control window 127); link bytes = the interface counters (both ways) over the run / messages (2 per am_lat iteration, 1 per am_bw iteration)".into()),
        rows,
        errors,
    }
}

// ---------------------------------------------------------------------------
// One delivered libfabric RMA write (fabric_write_lat, built with vsci)

/// `fabric_write_lat`: a target at end 1 registers a region and serves it
/// with a blocking real-time progress thread, as a node's engine serves a
/// segment; the initiator at end 0 times `Fabric::write` (which returns once
/// the bytes are in the target's memory) per size, back to back, and reads
/// the bytes back to check them. `prog` is the binary (staged in the bench
/// directory by `make`). A failure is kept as its error text.
pub fn fabric_write(sites: &dyn Sites, prog: &Path, sizes: &[u64], quick: bool) -> FabricWrite {
    match fabric_write_run(sites, prog, sizes, quick) {
        Ok(v) => v,
        Err(e) => {
            say(&format!("!! fabric_write_lat failed: {e:#}"));
            FabricWrite { available: true, error: Some(format!("{e:#}")), ..FabricWrite::default() }
        }
    }
}

fn fabric_write_run(sites: &dyn Sites, prog: &Path, sizes: &[u64], quick: bool) -> Result<FabricWrite> {
    let mut c = sites.command(1, prog);
    c.args(["target", &sites.addr(1)]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().context("starting fabric_write_lat target")?;
    let fwd = Forward::start(&mut child, false);
    let mut target = Guard(child);
    let t0 = Instant::now();
    let line = loop {
        let found = fwd
            .text
            .lock()
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("fabric-target ").map(str::to_string)));
        if let Some(l) = found {
            break l;
        }
        if let Some(st) = target.0.try_wait()? {
            bail!("fabric_write_lat target exited ({st}): {}", fwd.finish());
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("fabric_write_lat target printed no address within 30 s");
        }
        netns::sleep(Duration::from_millis(20))?;
    };
    let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
    let mut c = sites.command(0, prog);
    c.args(["initiator", &sites.addr(0), "--to", &line, "--sizes", &list.join(",")]);
    if quick {
        c.arg("--quick");
    }
    let run = run_forwarded(c, "fabric_write_lat initiator", Duration::from_secs(120), false);
    // End of file on its stdin ends the target.
    drop(target.0.stdin.take());
    let _ = netns::wait_child(&mut target.0, Duration::from_secs(5), "fabric_write_lat target");
    let ttext = fwd.finish();
    let (st, out) = run?;
    if !st.success() {
        bail!("fabric_write_lat initiator failed ({st}):\n{}target: {}", crate::tail(&out, 10), crate::tail(&ttext, 5));
    }
    let j = out.lines().find_map(|l| l.strip_prefix("@@json ")).context("fabric_write_lat printed no @@json line")?;
    let v: FabricWriteOutput = schema::from_str(j).context("fabric_write_lat's @@json line")?;
    for l in out.lines().filter(|l| l.starts_with("delivered RMA write")) {
        say(&format!("fabric_write_lat: {l}"));
    }
    Ok(FabricWrite {
        available: true,
        error: None,
        provider: Some(v.provider),
        delivery: Some(v.delivery),
        rows: v.rows,
        command: Some(format!(
        "fabric_write_lat target {} (end 1); fabric_write_lat initiator {} --to \"ADDR BASE KEY LEN\" --sizes {}{} (end 0)",
        sites.addr(1),
        sites.addr(0),
        list.join(","),
        if quick { " --quick" } else { "" }
    )),
        what: Some("one libfabric RMA write that returns once the bytes are in the target's memory (delivery complete), timed per call, back to back; the target serves a registered region with a blocking real-time progress thread, as vscid's engine does".into()),
    })
}

// ---------------------------------------------------------------------------
// Seed 001: 4 KB / 2 MB / 1 GB through a window smaller than the data

/// The seed's own figures (kvmtool, guest to guest, ns).
pub const SEED001_NS: [(u64, f64); 3] = [(4 << 10, 999_848.0), (2 << 20, 3_999_392.0), (1 << 30, 330_949_688.0)];

/// `sendrecv -receiver` at end 1 owns a 128 MiB window; `sendrecv -sender
/// -copy` at end 0 moves each size through it in 128 MiB chunks, the
/// seed's protocol: copy a chunk in from a local buffer, a data interrupt,
/// the receiver copies it out and acks. The receiver checks every byte
/// after each transfer, outside the timing. Each size is repeated; the
/// sender's time runs from before the first copy to the last ack.
pub fn transfers(sites: &dyn Sites, sendrecv: &Path, quick: bool) -> Result<Transfers> {
    let (window, sizes, reps): (&str, &[(&str, u64)], usize) = if quick {
        ("4m", &[("4k", 4 << 10), ("2m", 2 << 20)], 3)
    } else {
        ("128m", &[("4k", 4 << 10), ("2m", 2 << 20), ("1g", 1 << 30)], 3)
    };
    let list = transfer_list(sizes, reps);
    let segid = TRANSFER_SEGID;
    let mut rc = sites.command(1, sendrecv);
    rc.args(["-receiver", "-window", window, "-segid", segid]).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut recv = rc.spawn().context("starting sendrecv -receiver")?;
    let rfwd = Forward::start(&mut recv, true);
    let mut recv = Guard(recv);
    let t0 = Instant::now();
    while !rfwd.contains("receiver: window segment") {
        if let Some(st) = recv.0.try_wait()? {
            bail!("sendrecv -receiver exited ({st}) before it was ready:\n{}", rfwd.finish());
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("sendrecv -receiver not ready after 60 s");
        }
        netns::sleep(Duration::from_millis(20))?;
    }
    let mut sc = sites.command(0, sendrecv);
    sc.args([
        "-sender",
        "-rn",
        &sites.node_id(1).to_string(),
        "-bytes",
        &list,
        "-slots",
        "1",
        "-copy",
        "-segid",
        segid,
    ]);
    let limit = Duration::from_secs(if quick { 120 } else { 900 });
    let (st, text) = run_forwarded(sc, "sendrecv -sender", limit, true)?;
    let rst = netns::wait_child(&mut recv.0, Duration::from_secs(30), "sendrecv -receiver");
    let rtext = rfwd.finish();
    if !st.success() {
        bail!("sendrecv -sender failed ({st}); receiver said:\n{}", crate::tail(&rtext, 10));
    }
    if !rst.as_ref().is_ok_and(|s| s.success()) {
        bail!("sendrecv -receiver failed ({rst:?}):\n{}", crate::tail(&rtext, 10));
    }
    parse_transfers(&text, &rtext, window, &list, sites.node_id(1))
}

/// sendrecv's segment id (0x5400, its default).
pub const TRANSFER_SEGID: &str = "21504";

/// `-bytes` of sendrecv: each size `reps` times.
pub fn transfer_list(sizes: &[(&str, u64)], reps: usize) -> String {
    let list: Vec<&str> = sizes.iter().flat_map(|(n, _)| std::iter::repeat_n(*n, reps)).collect();
    list.join(",")
}

/// The figures of a sendrecv run from the sender's output (`text`) and
/// the receiver's (`rtext`, for the data checks).
pub fn parse_transfers(text: &str, rtext: &str, window: &str, list: &str, rn: u32) -> Result<Transfers> {
    // "sender:      4096 bytes in     1 chunks:      0.123 ms,    33.3 MB/s"
    let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut chunks: BTreeMap<u64, u64> = BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with("sender:") && l.contains(" bytes in ")) {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (Some(b), Some(c), Some(ms)) = (
            w.get(1).and_then(|x| x.parse::<u64>().ok()),
            w.get(4).and_then(|x| x.parse::<u64>().ok()),
            w.get(6).and_then(|x| x.parse::<f64>().ok()),
        ) else {
            continue;
        };
        by_size.entry(b).or_default().push(ms);
        chunks.insert(b, c);
    }
    let verified = rtext.matches("verified, every byte").count();
    let mut rows = Vec::new();
    for (&b, runs) in &by_size {
        let mut s = runs.clone();
        s.sort_by(|a, b| a.total_cmp(b));
        let median = s[s.len() / 2];
        let seed = SEED001_NS.iter().find(|(sz, _)| *sz == b).map(|(_, ns)| ns / 1e6);
        say(&format!(
            "transfer {:>7}: median {:.3} ms over {} runs ({:.1} MB/s); seed 001 {} ms",
            size_name(b),
            median,
            s.len(),
            b as f64 / (median / 1e3) / 1e6,
            crate::fmt_opt(seed, 3)
        ));
        rows.push(TransferRow {
            size: b,
            chunks: chunks.get(&b).copied(),
            runs_ms: runs.clone(),
            median_ms: median,
            min_ms: s[0],
            mbps: b as f64 / (median / 1e3) / 1e6,
            seed001_ms: seed,
        });
    }
    if rows.is_empty() {
        bail!("sendrecv printed no transfer times:\n{}", crate::tail(text, 10));
    }
    Ok(Transfers {
        what: "examples/sendrecv -copy: the sender copies each chunk from a local buffer into the receiver's window and triggers a data interrupt; the receiver copies it out into a local buffer and acks with an interrupt (and checks every byte after the transfer, untimed); time from before the first copy to the last ack".into(),
        window: window.into(),
        slots: 1,
        command: format!("sendrecv -receiver -window {window} (end 1); sendrecv -sender -rn {rn} -bytes {list} -slots 1 -copy (end 0)"),
        verified_transfers: verified as u64,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucx_final_line_is_parsed() {
        let out = "| Stage | # iterations | ... |\nFinal:                 20000      0.060     0.063     0.063      121.25     121.25    15892030    15892030\n";
        let v = ucx_final(out).expect("a Final: line");
        assert_eq!(v.len(), 8);
        assert_eq!(v[0], 20000.0);
        assert_eq!(v[1], 0.060);
        assert_eq!(v[7], 15892030.0);
        assert!(ucx_final("no result here\n").is_none());
    }

    #[test]
    fn sockperf_values_are_parsed() {
        let out = "sockperf: ====> avg-latency=6.912 (std-dev=1.2)\nsockperf: ---> percentile 99.000 =   14.951\nsockperf: ---> percentile 50.000 =    6.905\n";
        assert_eq!(sockperf_value(out, "avg-latency="), Some(6.912));
        assert_eq!(sockperf_value(out, "percentile 99.000 ="), Some(14.951));
        assert_eq!(sockperf_value(out, "percentile 50.000 ="), Some(6.905));
        assert_eq!(sockperf_value(out, "<MAX> observation ="), None);
    }
}
