//! The `remote` path: two nodes in two network namespaces joined by a veth
//! pair (needs root). remote_bench runs as a server on node 2 and a client
//! on node 1; then the seed-001 transfers, seed 003's DMA measurements
//! (dma_bench against a segment of node 2), and the peers between the same
//! namespaces: sockperf (TCP ping-pong), iperf3 and ucx_perftest over TCP.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::netns::{self, Pair};
use super::peers::{self, Sites, Tool};
use super::{dma, fmt_opt, say, size_name, step, tail, Ctx, Forward, PathSpec};

pub const PATH: PathSpec = PathSpec {
    name: "remote",
    what: "two nodes in two network namespaces over veth (RMA engine over TCP)",
    unavailable,
    steps: 5,
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
}

fn run(ctx: &Ctx) -> Result<Value> {
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

    step("remote: remote_bench (ping-pong, bandwidth, visibility, interrupts)");
    let quick_arg: &[&str] = if ctx.quick { &["-quick"] } else { &[] };
    let server_log = pair.dir.join("remote_bench-server.log");
    let mut server = pair.command(1, &prog);
    server.args(["-server", "-rn", "1"]).args(quick_arg);
    let slog = std::fs::File::create(&server_log)?;
    server.stdout(slog.try_clone()?).stderr(slog);
    let sh = pair.spawn(server, "remote_bench -server")?;
    let json_path = pair.dir.join("remote_bench.json");
    let mut client = pair.command(0, &prog);
    client.args(["-client", "-rn", "2"]).args(quick_arg).arg("-json").arg(&json_path).stdout(Stdio::piped()).stderr(Stdio::piped());
    let ch = pair.spawn(client, "remote_bench -client")?;
    let fwd = Forward::start(pair.helper(ch), true);
    let limit = Duration::from_secs(if ctx.quick { 180 } else { 900 });
    let st = netns::wait_child(pair.helper(ch), limit, "remote_bench -client");
    let server_st = match &st {
        Ok(_) => netns::wait_child(pair.helper(sh), Duration::from_secs(15), "remote_bench -server").ok(),
        Err(_) => None,
    };
    fwd.finish();
    let st = st?;
    pair.check_daemons()?;
    let vsci: Value =
        std::fs::read_to_string(&json_path).ok().and_then(|s| serde_json::from_str(&s).ok()).unwrap_or(Value::Null);
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

    step("remote: seed 001 transfers (sendrecv, 4 KB / 2 MB / 1 GB)");
    let transfers = peers::transfers(&pair, &sendrecv, ctx.quick).unwrap_or_else(|e| {
        say(&format!("!! transfers failed: {e:#}"));
        json!({"error": format!("{e:#}")})
    });
    pair.check_daemons()?;

    step("remote: dma_bench (seed 003: the DMA engine, target on node 2)");
    let dma = dma::remote(ctx, &mut pair);
    pair.check_daemons()?;

    // The peers, on the same namespaces, now that vsci is idle.
    step("remote: peers (sockperf, iperf3, ucx_perftest over TCP)");
    let secs = if ctx.quick { 1 } else { 5 };
    let sockperf = peers::sockperf(&pair, &ctx.tools, &[64, 1024, 8192], secs);
    let iperf = peers::iperf3(&pair, &ctx.tools, if ctx.quick { 2 } else { 5 });
    let (lat, bw): (&[u64], &[u64]) =
        if ctx.quick { (&[64, 8192], &[65536, 8 << 20]) } else { (&[4, 64, 1024, 8192], &[65536, 1 << 20, 8 << 20]) };
    let ucx = peers::ucx(&pair, &ctx.tools, "tcp", lat, bw, true, ctx.quick);
    pair.check_daemons()?;

    let table = print_table(&pair, &vsci, &sockperf, &iperf);
    Ok(json!({
        "path": "remote",
        "what": PATH.what,
        "namespaces": [
            {"name": pair.ns[0], "node_id": 1, "address": pair.ip[0]},
            {"name": pair.ns[1], "node_id": 2, "address": pair.ip[1]},
        ],
        "link": "veth pair between two network namespaces of one host",
        "remote_bench": vsci,
        "transfers": transfers,
        "dma": dma,
        "peers": {"sockperf": sockperf, "iperf3": iperf, "ucx_perftest": ucx},
        "table": table,
    }))
}

// The text table (the transcript; the report has its own)

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

    say(&format!(
        "\n== remote: vsci node 1 ({}) <-> node 2 ({}), two network namespaces over veth ==",
        pair.ip[0], pair.ip[1]
    ));
    say(&format!("   latency: median / p99 in us, RTT/2 (store-to-visibility: one way); bandwidth: MB/s = 1e6 B/s"));
    say(&format!("   ratio = vsci / peer (medians; for latency lower is better, for bandwidth higher is better)\n"));
    let cell = |v: (Option<f64>, Option<f64>), unit: &str| -> String {
        match (v.0, v.1) {
            (Some(a), Some(b)) => format!("{a:.2} / {b:.2} {unit}"),
            (Some(a), None) => format!("{a:.1} {unit}"),
            _ => "-".into(),
        }
    };
    say(&format!("{:<42} {:>24}   {:<42} {:>22} {:>9}", "what", "vsci", "peer", "peer value", "ratio"));
    say(&format!("{}", "-".repeat(42 + 1 + 24 + 3 + 42 + 1 + 22 + 1 + 9)));
    let mut out = Vec::new();
    for r in &rows {
        let ratio = r.ratio();
        say(&format!(
            "{:<42} {:>24}   {:<42} {:>22} {:>9}",
            r.what,
            cell(r.vsci, r.unit),
            r.peer_name,
            cell(r.peer, r.unit),
            ratio.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
        ));
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
            say(&format!(
                "!! ping-pong {}: {late} messages had the flag before the whole payload, {bad} a payload that never completed (warm-up and {n} timed round trips)",
                size_name(size)
            ));
        }
    }
    if !vis.is_empty() {
        say(&format!("\nstore-to-visibility delay (a store to a remote map with no call, until the owner sees it):"));
        for v in vis {
            say(&format!("  {v}"));
        }
    }
    out
}
