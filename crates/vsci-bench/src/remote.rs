//! The `remote` path: two nodes in two network namespaces joined by a veth
//! pair (needs root). remote_bench runs as a server on node 2 and a client
//! on node 1; then the seed-001 transfers, seed 003's DMA measurements
//! (dma_bench against a segment of node 2), and the peers between the same
//! namespaces: sockperf (TCP ping-pong), iperf3, ucx_perftest over TCP and
//! fabric_write_lat (one delivered libfabric RMA write, our own build).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::schema::{
    self, AmTest, FabricWrite, Iperf3, Lat, Loaded, LoadedPeers, Namespace, Outcome, PathResult, Remote, RemoteBench,
    RemotePeers, Sockperf, TableRow, TableValue, Ucx, UcxAm,
};

use crate::netns::{self, Pair};
use crate::peers::{self, Sites, Tool};
use crate::{dma, fmt_opt, say, size_name, step, tail, Ctx, Forward, PathSpec};

pub const PATH: PathSpec = PathSpec {
    name: "remote",
    what: "two nodes in two network namespaces over veth (RMA engine over TCP)",
    unavailable,
    steps: 6,
    tools: &[Tool::Sockperf, Tool::Iperf3, Tool::UcxPerftest],
    run,
};

fn unavailable(ctx: &Ctx) -> Option<String> {
    needs_root_and_ip(ctx)
}

/// Paths that make network namespaces need root and `ip`.
pub fn needs_root_and_ip(_: &Ctx) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root to create network namespaces (ip netns); run as root".into());
    }
    if peers::which("ip").is_none() {
        return Some("needs `ip` (iproute2)".into());
    }
    None
}

impl Sites for Pair {
    fn command(&self, i: usize, program: &Path) -> Command {
        Pair::command(self, i, program)
    }
    fn addr(&self, i: usize) -> String {
        self.ip[i].clone()
    }
    fn node_id(&self, i: usize) -> u32 {
        i as u32 + 1
    }
    fn net_dev(&self) -> Option<String> {
        Some(netns::DEV.to_string())
    }
    fn link_bytes(&self) -> Option<u64> {
        Pair::link_bytes(self, 0)
    }
}

/// The message sizes of remote_bench's message ring (section i), which UCX's
/// active messages are measured at.
fn ring_sizes(quick: bool) -> &'static [u64] {
    if quick {
        &[8, 1024, 8192]
    } else {
        &[8, 64, 256, 1024, 8192]
    }
}

/// How many UCX active messages to time.
fn am_counts(quick: bool) -> peers::AmCounts {
    if quick {
        peers::AmCounts::QUICK
    } else {
        peers::AmCounts::FULL
    }
}

/// The sections measured again with the CPU oversubscribed (`--loaded`):
/// the spinning ping-pong, the message ring and the per-store figures.
const LOADED_SECTIONS: &str = "eij";

/// `remote_bench -server` on node 2 and `-client` on node 1, `repeat`
/// times; the client's JSON of the last run. `sections`: `-s` for both;
/// `tag` names its log and JSON files.
fn remote_bench(
    ctx: &Ctx,
    pair: &mut Pair,
    prog: &Path,
    sections: Option<&str>,
    tag: &str,
    repeat: u32,
) -> Result<RemoteBench> {
    let quick_arg: &[&str] = if ctx.quick { &["-quick"] } else { &[] };
    let section_args: Vec<&str> = sections.map(|s| vec!["-s", s]).unwrap_or_default();
    let server_log = pair.dir.join(format!("remote_bench{tag}-server.log"));
    let json_path = pair.dir.join(format!("remote_bench{tag}.json"));
    let limit = Duration::from_secs(if ctx.quick { 180 } else { 900 });
    let mut vsci = None;
    for run in 1..=repeat {
        if repeat > 1 {
            say(&format!("remote_bench run {run} of {repeat}"));
        }
        let mut server = pair.command(1, prog);
        server.args(["-server", "-rn", "1"]).args(quick_arg).args(&section_args);
        let slog = std::fs::File::create(&server_log)?;
        server.stdout(slog.try_clone()?).stderr(slog);
        let sh = pair.spawn(server, "remote_bench -server")?;
        let mut client = pair.command(0, prog);
        client
            .args(["-client", "-rn", "2"])
            .args(quick_arg)
            .args(&section_args)
            .arg("-json")
            .arg(&json_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let ch = pair.spawn(client, "remote_bench -client")?;
        let fwd = Forward::start(pair.helper(ch), true);
        let st = netns::wait_child(pair.helper(ch), limit, "remote_bench -client");
        let server_st = match &st {
            Ok(_) => netns::wait_child(pair.helper(sh), Duration::from_secs(15), "remote_bench -server").ok(),
            Err(_) => None,
        };
        fwd.finish();
        let st = st?;
        pair.check_daemons()?;
        if !st.success() || !server_st.is_some_and(|s| s.success()) {
            bail!(
                "remote_bench failed (client: {st}, server: {})\n--- server output ---\n{}--- vscid node 1 log ---\n{}--- vscid node 2 log ---\n{}",
                server_st.map(|s| s.to_string()).unwrap_or_else(|| "did not finish".into()),
                std::fs::read_to_string(&server_log).unwrap_or_default(),
                tail(&pair.log(0), 40),
                tail(&pair.log(1), 40)
            );
        }
        if !json_path.exists() {
            bail!("remote_bench wrote no JSON to {}", json_path.display());
        }
        vsci = Some(schema::load_output::<RemoteBench>(&json_path, "remote_bench")?);
    }
    vsci.context("remote_bench did not run")
}

/// The load average (1, 5, 15 minutes) now.
fn loadavg() -> Vec<f64> {
    let t = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    t.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect()
}

/// Busy loops that oversubscribe the CPU (two per core, at normal
/// priority, like `loaded`), stopped when dropped.
struct Busy(Vec<std::process::Child>);

impl Busy {
    fn start(n: usize) -> Result<Busy> {
        use std::os::unix::process::CommandExt;
        let mut b = Busy(Vec::new());
        for _ in 0..n {
            let mut c = Command::new("sh");
            c.args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0);
            b.0.push(c.spawn().context("starting a busy loop (sh)")?);
        }
        Ok(b)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            netns::stop_child(c, Duration::from_millis(200));
        }
    }
}

fn run(ctx: &Ctx) -> Result<PathResult> {
    let prog = ctx.program(&ctx.bench_dir, "remote_bench")?;
    let sendrecv = ctx.program(&ctx.examples_dir, "sendrecv")?;
    let vscid = crate::node::sibling("vscid");

    step("remote: two nodes in two network namespaces");
    let mut pair = Pair::create()?;
    say(&format!(
        "namespaces {} (node 1, {}) and {} (node 2, {}); files in {}",
        pair.ns[0],
        pair.ip[0],
        pair.ns[1],
        pair.ip[1],
        pair.dir.display()
    ));
    pair.start_nodes(&vscid, Duration::from_secs(30))?;
    say("vscid up on both nodes; each reports the other \"up\"");

    step("remote: remote_bench (ping-pong, bandwidth, visibility, interrupts, spinning ping-pong, store + flush, idle map, mailbox, message ring, per store)");
    let vsci = remote_bench(ctx, &mut pair, &prog, ctx.sections.as_deref(), "", ctx.repeat)?;
    if let Some(sections) = ctx.sections.as_deref() {
        // A look at a few rows: no transfers or DMA; only the peers of
        // the sections asked for that take seconds.
        step("remote: the peers of the sections asked for");
        let has = |c: char| sections.contains(c);
        let ucx = (has('e') || has('h')).then(|| peers::ucx(&pair, &ctx.tools, "tcp", &[4], &[], false, ctx.quick));
        let ucx_am = has('i').then(|| peers::ucx_am(&pair, &ctx.tools, ring_sizes(ctx.quick), am_counts(ctx.quick)));
        let fabric = has('f').then(|| fabric_peer(ctx, &pair));
        pair.check_daemons()?;
        let loaded = if ctx.loaded { Some(run_loaded(ctx, &mut pair, &prog, Some(sections))?) } else { None };
        let peers = RemotePeers { sockperf: None, iperf3: None, ucx_perftest: ucx, ucx_am, fabric_write: fabric };
        let table = print_table(&pair, &vsci, &peers, loaded.as_ref().and_then(|l| l.ran()));
        return Ok(PathResult::Remote(Box::new(Remote {
            path: "remote".into(),
            what: PATH.what.into(),
            sections: ctx.sections.clone(),
            runs: Some(ctx.repeat),
            remote_bench: vsci,
            peers,
            loaded,
            table,
            ..Remote::default()
        })));
    }

    step("remote: seed 001 transfers (sendrecv, 4 KB / 2 MB / 1 GB)");
    let transfers = Outcome::of(
        peers::transfers(&pair, &sendrecv, ctx.quick).inspect_err(|e| say(&format!("!! transfers failed: {e:#}"))),
    );
    pair.check_daemons()?;

    step("remote: dma_bench (seed 003: the DMA engine, target on node 2)");
    let dma = dma::remote(ctx, &mut pair, None);
    pair.check_daemons()?;

    // The peers, on the same namespaces, now that vsci is idle.
    step("remote: peers (sockperf, iperf3, ucx_perftest over TCP, fabric_write_lat)");
    let secs = if ctx.quick { 1 } else { 5 };
    let sockperf = peers::sockperf(&pair, &ctx.tools, &[64, 1024, 8192], secs);
    let iperf = peers::iperf3(&pair, &ctx.tools, if ctx.quick { 2 } else { 5 });
    // 4 B put_lat is the peer of the spinning ping-pong and the mailbox.
    let (lat, bw): (&[u64], &[u64]) = if ctx.quick {
        (&[4, 64, 8192], &[65536, 8 << 20])
    } else {
        (&[4, 64, 1024, 8192], &[65536, 1 << 20, 8 << 20])
    };
    let ucx = peers::ucx(&pair, &ctx.tools, "tcp", lat, bw, true, ctx.quick);
    // Active messages: the peer of the message ring (issue 35).
    let ucx_am = peers::ucx_am(&pair, &ctx.tools, ring_sizes(ctx.quick), am_counts(ctx.quick));
    // One delivered RMA write: the peer of store + SCIFlush.
    let fabric = fabric_peer(ctx, &pair);
    pair.check_daemons()?;

    let loaded = if ctx.loaded { Some(run_loaded(ctx, &mut pair, &prog, None)?) } else { None };
    let peers = RemotePeers {
        sockperf: Some(sockperf),
        iperf3: Some(iperf),
        ucx_perftest: Some(ucx),
        ucx_am: Some(ucx_am),
        fabric_write: Some(fabric),
    };
    let table = print_table(&pair, &vsci, &peers, loaded.as_ref().and_then(|l| l.ran()));
    Ok(PathResult::Remote(Box::new(Remote {
        path: "remote".into(),
        what: PATH.what.into(),
        sections: None,
        runs: None,
        namespaces: (0..2)
            .map(|i| Namespace { name: pair.ns[i].clone(), node_id: i as u64 + 1, address: pair.ip[i].clone() })
            .collect(),
        link: Some("veth pair between two network namespaces of one host".into()),
        remote_bench: vsci,
        transfers: Some(transfers),
        dma: Some(dma),
        peers,
        loaded,
        table,
        run: None,
    })))
}

/// fabric_write_lat 1 B and 4 KiB, or why not.
fn fabric_peer(ctx: &Ctx, pair: &Pair) -> FabricWrite {
    match ctx.program(&ctx.bench_dir, "fabric_write_lat") {
        Ok(p) => peers::fabric_write(pair, &p, &[1, 4096], ctx.quick),
        Err(e) => {
            say(&format!("fabric_write_lat: NOT AVAILABLE ({e:#}), its figures show \"-\""));
            FabricWrite { available: false, error: Some(format!("{e:#}")), ..FabricWrite::default() }
        }
    }
}

/// `--loaded`: the rows of the spinning ping-pong, the message ring and the
/// trapped stores again (remote_bench sections e, i and j,
/// or those of them in `sections`) and their UCX peers (put_lat 4 B, the
/// active messages), all with two busy loops per core competing for the
/// CPU, in the same namespaces, right after the idle run.
fn run_loaded(ctx: &Ctx, pair: &mut Pair, prog: &Path, sections: Option<&str>) -> Result<Outcome<Loaded>> {
    let secs: String = LOADED_SECTIONS.chars().filter(|c| sections.is_none_or(|s| s.contains(*c))).collect();
    if secs.is_empty() {
        return Ok(Outcome::Skipped(format!("none of the sections {LOADED_SECTIONS} was asked for")));
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let n = 2 * cores;
    step(&format!("remote: sections {secs} and their UCX peers again, with {n} busy loops ({cores} cores)"));
    let before = loadavg();
    let busy = Busy::start(n)?;
    // Let the scheduler see the loops before anything is timed.
    netns::sleep(Duration::from_secs(2))?;
    let during = loadavg();
    let vsci = remote_bench(ctx, pair, prog, Some(&secs), "-loaded", 1)?;
    // Fewer UCX iterations: under this load a UCX round trip takes
    // milliseconds, and 20,000 of them did not finish in 120 s.
    let ucx = secs.contains('e').then(|| peers::ucx(pair, &ctx.tools, "tcp", &[4], &[], false, true));
    let ucx_am =
        secs.contains('i').then(|| peers::ucx_am(pair, &ctx.tools, ring_sizes(ctx.quick), peers::AmCounts::LOADED));
    let after = loadavg();
    drop(busy);
    pair.check_daemons()?;
    Ok(Outcome::Ran(Loaded {
        what: "the same rows with the CPU oversubscribed: busy loops (sh -c 'while :; do :; done', normal priority) beside everything, vsci and its UCX peers alike".into(),
        busy_loops: n as u64,
        cores: cores as u64,
        sections: secs,
        loadavg_before: before,
        loadavg_started: during,
        loadavg_after: after,
        remote_bench: vsci,
        peers: LoadedPeers { ucx_perftest: ucx, ucx_am },
    }))
}

// The text table (the transcript; the report has its own)

/// What a row compares: latency (medians, lower is better), bandwidth
/// (MB/s, higher is better), a rate (per second, higher is better) or a
/// cost (CPU, bytes: lower is better).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Latency,
    Bandwidth,
    Rate,
    Cost,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Latency => "latency",
            Kind::Bandwidth => "bandwidth",
            Kind::Rate => "rate",
            Kind::Cost => "cost",
        }
    }
}

struct Row {
    what: String,
    unit: &'static str,
    vsci: (Option<f64>, Option<f64>),
    peer_name: String,
    peer: (Option<f64>, Option<f64>),
    kind: Kind,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        match (self.vsci.0, self.peer.0) {
            (Some(v), Some(p)) if p > 0.0 => Some(v / p),
            _ => None,
        }
    }
}

/// Median and p99 of a latency.
fn lat_of(v: Option<&Lat>) -> (Option<f64>, Option<f64>) {
    (v.and_then(|v| v.median_us), v.and_then(|v| v.p99_us))
}

fn sockperf_row(sp: &Sockperf, size: u64) -> (Option<f64>, Option<f64>) {
    sp.rows.iter().find(|r| r.size == size).map(|r| (r.median_us, r.p99_us)).unwrap_or((None, None))
}

/// The transcript's table of the remote path, printed and returned.
fn print_table(pair: &Pair, vsci: &RemoteBench, peers: &RemotePeers, loaded: Option<&Loaded>) -> Vec<TableRow> {
    let none_sp = Sockperf::default();
    let none_ip = Iperf3::default();
    let sp = peers.sockperf.as_ref().unwrap_or(&none_sp);
    let ip = peers.iperf3.as_ref().unwrap_or(&none_ip);
    let mut rows: Vec<Row> = Vec::new();
    let sp_name = |s: u64| {
        if sp.available {
            format!("sockperf TCP ping-pong {}", size_name(s))
        } else {
            "sockperf (not installed)".to_string()
        }
    };
    // Ping-pong: every remote_bench size that sockperf also ran.
    for r in &vsci.pingpong.rows {
        let size = r.size;
        let peer = sockperf_row(sp, size);
        if peer.0.is_none() && sp.available {
            continue;
        }
        if ![64, 1024, 8192].contains(&size) {
            continue;
        }
        rows.push(Row {
            what: format!("ping-pong {}, stores + flag, no call", size_name(size)),
            unit: "us",
            vsci: lat_of(r.vsci.as_ref()),
            peer_name: sp_name(size),
            peer,
            kind: Kind::Latency,
        });
    }
    // Interrupts.
    if let Some(i) = &vsci.interrupt.vsci {
        rows.push(Row {
            what: "interrupt trigger -> wait".into(),
            unit: "us",
            vsci: lat_of(Some(i)),
            peer_name: sp_name(64),
            peer: sockperf_row(sp, 64),
            kind: Kind::Latency,
        });
    }
    for r in &vsci.data_interrupt.rows {
        let len = r.payload;
        if r.vsci.is_none() {
            continue;
        }
        let ps = if len <= 64 { 64 } else { len };
        rows.push(Row {
            what: format!("data interrupt {}", size_name(len)),
            unit: "us",
            vsci: lat_of(r.vsci.as_ref()),
            peer_name: sp_name(ps),
            peer: sockperf_row(sp, ps),
            kind: Kind::Latency,
        });
    }
    // Store-to-visibility: one way, against sockperf's one-way (RTT/2) 64 B.
    for r in &vsci.store_visibility.rows {
        let pace = r.interval_us;
        let pace = if pace >= 1000 { format!("{} ms", pace / 1000) } else { format!("{pace} us") };
        rows.push(Row {
            what: format!("store-to-visibility, a store every {pace}"),
            unit: "us",
            vsci: lat_of(r.delay.as_ref()),
            peer_name: format!("{} (RTT/2)", sp_name(64)),
            peer: sockperf_row(sp, 64),
            kind: Kind::Latency,
        });
    }
    // Bandwidth against iperf3.
    let ip_mbps = ip.mbps;
    let ip_name =
        if ip_mbps.is_some() { "iperf3 TCP, 1 stream".to_string() } else { "iperf3 (not installed)".to_string() };
    let bw = &vsci.write_bandwidth.rows;
    for r in bw {
        let size = r.size;
        if ![64 << 10, 1 << 20, 8 << 20].contains(&size) {
            continue;
        }
        rows.push(Row {
            what: format!("write {}, memcpy + SCIFlush", size_name(size)),
            unit: "MB/s",
            vsci: (r.flush_mbps, None),
            peer_name: ip_name.clone(),
            peer: (ip_mbps, None),
            kind: Kind::Bandwidth,
        });
    }
    if let Some(r) = bw.iter().find(|r| r.size == 8 << 20) {
        rows.push(Row {
            what: "write 8 MiB, SCIMemCpy".into(),
            unit: "MB/s",
            vsci: (r.memcpy_mbps, None),
            peer_name: ip_name.clone(),
            peer: (ip_mbps, None),
            kind: Kind::Bandwidth,
        });
    }

    spin_store_mailbox_rows(&mut rows, vsci, peers.ucx_perftest.as_ref(), peers.fabric_write.as_ref());
    ring_and_trapped_rows(&mut rows, vsci, peers.ucx_am.as_ref());
    let idle_rows = rows.len();
    if let Some(l) = loaded {
        let before = rows.len();
        spin_store_mailbox_rows(&mut rows, &l.remote_bench, l.peers.ucx_perftest.as_ref(), None);
        ring_and_trapped_rows(&mut rows, &l.remote_bench, l.peers.ucx_am.as_ref());
        for r in &mut rows[before..] {
            r.what = format!("LOADED {}", r.what);
        }
    }

    say(&format!(
        "\n== remote: vsci node 1 ({}) <-> node 2 ({}), two network namespaces over veth ==",
        pair.ip[0], pair.ip[1]
    ));
    say("   latency: median / p99 in us, RTT/2 (store-to-visibility: one way; store + SCIFlush and the libfabric write: per call); bandwidth: MB/s = 1e6 B/s");
    say("   ratio = vsci / peer (medians; for latency and costs lower is better, for bandwidth and rates higher is better)\n");
    let cell = |v: (Option<f64>, Option<f64>), unit: &str| -> String {
        match (v.0, v.1) {
            (Some(a), Some(b)) => format!("{a:.2} / {b:.2} {unit}"),
            (Some(a), None) if unit == "%" => format!("{a:.3} {unit}"),
            (Some(a), None) if unit == "B" || unit == "/s" => format!("{a:.0} {unit}"),
            (Some(a), None) => format!("{a:.1} {unit}"),
            _ => "-".into(),
        }
    };
    say(&format!("{:<48} {:>24}   {:<48} {:>22} {:>9}", "what", "vsci", "peer", "peer value", "ratio"));
    say(&"-".repeat(48 + 1 + 24 + 3 + 48 + 1 + 22 + 1 + 9).to_string());
    let mut out = Vec::new();
    for r in &rows {
        let ratio = r.ratio();
        say(&format!(
            "{:<48} {:>24}   {:<48} {:>22} {:>9}",
            r.what,
            cell(r.vsci, r.unit),
            r.peer_name,
            cell(r.peer, r.unit),
            ratio.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
        ));
        let lat = r.kind == Kind::Latency;
        let value = |v: (Option<f64>, Option<f64>)| {
            if lat {
                TableValue::Latency { median: v.0, p99: v.1 }
            } else {
                TableValue::One(v.0)
            }
        };
        out.push(TableRow {
            what: r.what.clone(),
            unit: r.unit.into(),
            kind: r.kind.name().into(),
            vsci: value(r.vsci),
            peer: r.peer_name.clone(),
            peer_value: value(r.peer),
            ratio,
        });
    }
    // Store-to-visibility, the figure the brief asks to publish.
    let vis: Vec<String> = vsci
        .store_visibility
        .rows
        .iter()
        .map(|r| {
            let d = r.delay.as_ref();
            format!(
                "every {} us: p50 {} us, p99 {} us, max {} us ({} of {} seen)",
                r.interval_us,
                fmt_opt(d.and_then(|d| d.median_us), 1),
                fmt_opt(d.and_then(|d| d.p99_us), 1),
                fmt_opt(d.and_then(|d| d.max_us), 1),
                d.map(|d| d.n).unwrap_or(0),
                r.sent,
            )
        })
        .collect();
    // Correctness notes from the ping-pong (remote_bench checks every payload).
    for r in &vsci.pingpong.rows {
        let size = r.size;
        let late = r.flag_before_payload;
        let bad = r.vsci.as_ref().map(|v| v.bad).unwrap_or(0);
        let n = r.vsci.as_ref().map(|v| v.n).unwrap_or(0);
        if late > 0 || bad > 0 {
            say(&format!(
                "!! ping-pong {}: {late} messages had the flag before the whole payload, {bad} a payload that never completed (warm-up and {n} timed round trips)",
                size_name(size)
            ));
        }
    }
    for l in spin_store_mailbox_notes(vsci) {
        say(&l);
    }
    for l in ring_and_trapped_notes(vsci) {
        say(&l);
    }
    if let Some(l) = loaded {
        let la = |v: &[f64]| serde_json::to_string(v).unwrap_or_default();
        say(&format!(
            "\nwith {} busy loops beside (load average before {}, while measuring {} .. {}): vsci/peer ratio idle -> loaded, and how much it grew (goal in issue 35: at most 1.5x)",
            l.busy_loops,
            la(&l.loadavg_before),
            la(&l.loadavg_started),
            la(&l.loadavg_after)
        ));
        for r in &rows[idle_rows..] {
            let name = r.what.trim_start_matches("LOADED ");
            let Some(idle) = rows[..idle_rows].iter().find(|x| x.what == name) else { continue };
            let (Some(a), Some(b)) = (idle.ratio(), r.ratio()) else { continue };
            let growth = if matches!(r.kind, Kind::Rate | Kind::Bandwidth) { a / b } else { b / a };
            say(&format!(
                "  {name:<60} {a:>8.2}x -> {b:>8.2}x   grew {growth:.2}x{}",
                if growth > 1.5 { "  !!" } else { "" }
            ));
        }
    }
    if !vis.is_empty() {
        say("\nstore-to-visibility delay (a store to a remote map with no call, until the owner sees it):");
        for v in vis {
            say(&format!("  {v}"));
        }
    }
    out
}

/// The rows of remote_bench sections a and e-h (issue 17): the spinning
/// ping-pong by map size (and the yielding 4 B ping-pong of section a)
/// against UCX put_lat 4 B, store + SCIFlush against one delivered RMA
/// write, the idle 1 GiB map against the heartbeats alone, the mailbox
/// against UCX put/flag round trips.
fn spin_store_mailbox_rows(rows: &mut Vec<Row>, vsci: &RemoteBench, ucx: Option<&Ucx>, fw: Option<&FabricWrite>) {
    let u4 = ucx.and_then(|u| u.lat_median(4));
    let ucx_name = if u4.is_some() {
        "UCX tcp put_lat 4 B (RTT/2)".to_string()
    } else {
        "UCX tcp put_lat 4 B (not measured)".to_string()
    };
    if let Some(r) = vsci.pingpong.rows.iter().find(|r| r.size == 4) {
        let y = vsci.yield_every;
        rows.push(Row {
            what: format!("ping-pong 4 B, yielding every {y} spins (a)"),
            unit: "us",
            vsci: lat_of(r.vsci.as_ref()),
            peer_name: ucx_name.clone(),
            peer: (u4, None),
            kind: Kind::Latency,
        });
    }
    for r in vsci.spin_pingpong.iter().flat_map(|s| &s.rows) {
        rows.push(Row {
            what: format!("spinning ping-pong 4 B, no yields, {} maps", size_name(r.map_size)),
            unit: "us",
            vsci: lat_of(r.vsci.as_ref()),
            peer_name: ucx_name.clone(),
            peer: (u4, None),
            kind: Kind::Latency,
        });
    }
    for r in vsci.store_flush.iter().flat_map(|s| &s.rows) {
        let size = r.size;
        let p = fw.and_then(|fw| fw.rows.iter().find(|x| x.size == size));
        let what = if size == 1 {
            "store 1 B + SCIFlush".to_string()
        } else {
            format!("memcpy {} + SCIFlush", size_name(size))
        };
        rows.push(Row {
            what,
            unit: "us",
            vsci: lat_of(r.vsci.as_ref()),
            peer_name: if p.is_some() {
                format!("libfabric delivered write {}", size_name(size))
            } else {
                "libfabric write (not measured)".into()
            },
            peer: p.map(|x| (Some(x.median_us), Some(x.p99_us))).unwrap_or((None, None)),
            kind: Kind::Latency,
        });
    }
    if let Some(idle) = &vsci.idle_map {
        let secs = idle.seconds.unwrap_or(0.0);
        let bytes = |x: Option<u64>| x.map(|v| v as f64);
        rows.push(Row {
            what: format!("idle 1 GiB map {secs:.0} s: client CPU"),
            unit: "%",
            vsci: (idle.map.cpu_pct, None),
            peer_name: "the same sleep, no map".into(),
            peer: (idle.no_map.cpu_pct, None),
            kind: Kind::Cost,
        });
        rows.push(Row {
            what: format!("idle 1 GiB map {secs:.0} s: link bytes"),
            unit: "B",
            vsci: (bytes(idle.map.link_bytes), None),
            peer_name: "no map: the nodes' heartbeats".into(),
            peer: (bytes(idle.no_map.link_bytes), None),
            kind: Kind::Cost,
        });
    }
    if let Some(mb) = &vsci.mailbox {
        rows.push(Row {
            what: "mailbox: payload, flush, flag, flush, ack".into(),
            unit: "/s",
            vsci: (mb.rounds_per_s, None),
            peer_name: "UCX put/flag round trips (1e6 / 2 put_lat 4 B)".into(),
            peer: (u4.filter(|&x| x > 0.0).map(|x| 1e6 / (2.0 * x)), None),
            kind: Kind::Rate,
        });
    }
}

/// The rows of remote_bench sections i and j (issue 35): the message ring
/// (ping-pong latency against UCX tcp am_lat, streaming rate against am_bw,
/// link bytes per message against UCX's), and the per-store figures
/// against one RMA write.
fn ring_and_trapped_rows(rows: &mut Vec<Row>, vsci: &RemoteBench, am: Option<&UcxAm>) {
    for r in vsci.message_ring.iter().flat_map(|m| &m.rows) {
        let size = r.size;
        let v = if r.flush { "SCIFlush after the flag" } else { "no call" };
        let lat = am.and_then(|a| a.row(AmTest::AmLat, size));
        let bw = am.and_then(|a| a.row(AmTest::AmBw, size));
        let name = |r: Option<&schema::UcxAmRow>, t: &str| match r {
            Some(x) => format!("UCX tcp {t} {} ({})", size_name(size), x.api),
            None => format!("UCX tcp {t} {} (not measured)", size_name(size)),
        };
        rows.push(Row {
            what: format!("ring {}, ping-pong, {v}", size_name(size)),
            unit: "us",
            vsci: lat_of(r.pingpong.as_ref()),
            peer_name: name(lat, "am_lat"),
            peer: (lat.and_then(|x| x.median_us), None),
            kind: Kind::Latency,
        });
        rows.push(Row {
            what: format!("ring {}, streaming, {v}", size_name(size)),
            unit: "/s",
            vsci: (r.msgs_per_s, None),
            peer_name: name(bw, "am_bw"),
            peer: (bw.map(|x| x.msgs_per_s), None),
            kind: Kind::Rate,
        });
        rows.push(Row {
            what: format!("ring {}, ping-pong, {v}: link B/msg", size_name(size)),
            unit: "B",
            vsci: (r.pp_link_bytes_per_msg, None),
            peer_name: format!("{}: link B/msg", name(lat, "am_lat")),
            peer: (lat.and_then(|x| x.link_bytes_per_msg), None),
            kind: Kind::Cost,
        });
        rows.push(Row {
            what: format!("ring {}, streaming, {v}: link B/msg", size_name(size)),
            unit: "B",
            vsci: (r.stream_link_bytes_per_msg, None),
            peer_name: format!("{}: link B/msg", name(bw, "am_bw")),
            peer: (bw.and_then(|x| x.link_bytes_per_msg), None),
            kind: Kind::Cost,
        });
    }
    if let Some(ts) = vsci.trapped_store.as_ref().filter(|t| t.store.is_some()) {
        let (s, m) = (ts.store.as_ref(), ts.scimemcpy.as_ref());
        rows.push(Row {
            what: "trapped store 8 B: CPU of the storing thread".to_string(),
            unit: "us",
            vsci: lat_of(s.and_then(|s| s.cpu.as_ref())),
            peer_name: "SCIMemCpy 8 B (one RMA write): CPU".into(),
            peer: lat_of(m.and_then(|m| m.cpu.as_ref())),
            kind: Kind::Latency,
        });
        rows.push(Row {
            what: "trapped store 8 B: until the owner sees it".to_string(),
            unit: "us",
            vsci: lat_of(s.and_then(|s| s.visibility.as_ref())),
            peer_name: "SCIMemCpy 8 B (one RMA write): until seen".into(),
            peer: lat_of(m.and_then(|m| m.visibility.as_ref())),
            kind: Kind::Latency,
        });
    }
}

/// What sections i and j found wrong.
fn ring_and_trapped_notes(vsci: &RemoteBench) -> Vec<String> {
    let mut out = Vec::new();
    for r in vsci.message_ring.iter().flat_map(|m| &m.rows) {
        let (late, wrong) = (r.pp_late + r.stream_late, r.pp_wrong + r.stream_wrong);
        if late > 0 || wrong > 0 {
            out.push(format!(
                "!! message ring {}{}: {late} messages had their flag before the rest, {wrong} stayed wrong",
                size_name(r.size),
                if r.flush { " with SCIFlush" } else { "" }
            ));
        }
    }
    if let Some(ts) = &vsci.trapped_store {
        for (k, t) in [("store", &ts.store), ("scimemcpy", &ts.scimemcpy)] {
            let lost = t.as_ref().and_then(|t| t.lost).unwrap_or(0);
            if lost > 0 {
                out.push(format!("!! per-store figures, {k}: {lost} writes never seen by the owner"));
            }
        }
    }
    out
}

/// What sections e-h found wrong, and the idle figures in words.
fn spin_store_mailbox_notes(vsci: &RemoteBench) -> Vec<String> {
    let mut out = Vec::new();
    for r in vsci.spin_pingpong.iter().flat_map(|s| &s.rows) {
        let bad = r.vsci.as_ref().map(|v| v.bad).unwrap_or(0);
        if bad > 0 {
            out.push(format!(
                "!! spinning ping-pong, {} maps: {bad} counter values that were neither the old nor the new one",
                size_name(r.map_size)
            ));
        }
    }
    for r in vsci.store_flush.iter().flat_map(|s| &s.rows) {
        if r.data_check != "ok" {
            out.push(format!("!! store + SCIFlush {}: the server does not hold the last store", size_name(r.size)));
        }
    }
    if let Some(idle) = &vsci.idle_map {
        let bytes = |x: Option<u64>| x.map(|v| v as f64);
        out.push(format!(
            "\nidle 1 GiB map, {} s of sleep after one store + SCIFlush: client CPU {} % ({} ms), link {} B received + {} B sent; with no map: CPU {} %, link {} B + {} B (heartbeats){}",
            fmt_opt(idle.seconds, 0),
            fmt_opt(idle.map.cpu_pct, 3),
            fmt_opt(idle.map.cpu_s.map(|x| x * 1e3), 1),
            fmt_opt(bytes(idle.map.rx_bytes), 0),
            fmt_opt(bytes(idle.map.tx_bytes), 0),
            fmt_opt(idle.no_map.cpu_pct, 3),
            fmt_opt(bytes(idle.no_map.rx_bytes), 0),
            fmt_opt(bytes(idle.no_map.tx_bytes), 0),
            if idle.data_check == "ok" { "" } else { "; !! the stored byte is NOT at the server" }
        ));
    }
    if let Some(mb) = &vsci.mailbox {
        let wrong = mb.wrong_payloads;
        out.push(format!(
            "mailbox: {} rounds ({} with warm-up), {} rounds/s, {} us per round, {wrong} wrong payloads{}",
            mb.rounds,
            mb.rounds_total,
            fmt_opt(mb.rounds_per_s, 0),
            fmt_opt(mb.us_per_round, 1),
            if wrong > 0 { " !!" } else { "" }
        ));
    }
    out
}
