//! The `reflective` path: reflective memory (issue 18). Four nodes in
//! network namespaces joined by a bridge; a writer on node 1 and members on
//! nodes 2, 3 and 4. bench/reflect_bench runs the same measurements to one
//! member's segment by unicast, then to groups of 1, 2 and 3 members: write
//! bandwidth by stores (memcpy + SCIFlush) and by DMA, every block checked
//! whole at every member, and store-to-visibility with no call at all,
//! taken per sample as the time until the *last* member saw the store.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::schema::{Namespace, PathResult, Quantiles, Reflective, ReflectiveRow, VisibilityAll};

use crate::netns::{self, Pair};
use crate::{say, step, tail, Ctx, Forward, PathSpec};

pub const PATH: PathSpec = PathSpec {
    name: "reflective",
    what: "reflective memory: a writer and groups of 1-3 member nodes in network namespaces (RMA engine over TCP)",
    unavailable: crate::remote::needs_root_and_ip,
    steps: 5,
    tools: &[],
    run,
};

/// One configuration: the members' nodes, and whether it is the unicast
/// baseline (a plain segment of one node) or a group.
struct Config {
    name: &'static str,
    nodes: &'static [u32],
    unicast: bool,
}

const CONFIGS: &[Config] = &[
    Config { name: "unicast, 1 node", nodes: &[2], unicast: true },
    Config { name: "group of 1", nodes: &[2], unicast: false },
    Config { name: "group of 2", nodes: &[2, 3], unicast: false },
    Config { name: "group of 3", nodes: &[2, 3, 4], unicast: false },
];

/// Block size of the bandwidth rows.
const BLOCK: u64 = 1 << 20;

fn run(ctx: &Ctx) -> Result<PathResult> {
    let prog = ctx.program(&ctx.bench_dir, "reflect_bench")?;
    let vscid = crate::node::sibling("vscid");
    step("reflective: four nodes in network namespaces, one bridge");
    let mut nodes = Pair::create_n(4)?;
    say(&format!(
        "namespaces {} (nodes 1-4, {}); files in {}",
        nodes.ns.join(", "),
        nodes.ip.join(", "),
        nodes.dir.display()
    ));
    nodes.start_nodes(&vscid, Duration::from_secs(30))?;
    say("vscid up on all four nodes");
    let (npio, ndma, samples) = if ctx.quick { (10, 10, 300) } else { (40, 40, 1000) };
    let pace_us = 1000;
    let mut rows = Vec::new();
    for (i, c) in CONFIGS.iter().enumerate() {
        step(&format!("reflective: {}", c.name));
        let segid = 0x7201 + i as u32;
        let row = one(&mut nodes, &prog, c, segid, npio, ndma, samples, pace_us)
            .with_context(|| format!("reflective memory, {}", c.name))?;
        rows.push(row);
        nodes.check_daemons()?;
    }
    print_table(&rows);
    Ok(PathResult::Reflective(Box::new(Reflective {
        path: "reflective".into(),
        what: PATH.what.into(),
        namespaces: nodes
            .ns
            .iter()
            .zip(&nodes.ip)
            .enumerate()
            .map(|(i, (ns, ip))| Namespace { name: ns.clone(), node_id: i as u64 + 1, address: ip.clone() })
            .collect(),
        link: "four namespaces, each with a veth to one bridge, on one host".into(),
        block: BLOCK,
        blocks_pio: npio.into(),
        blocks_dma: ndma.into(),
        samples: samples.into(),
        pace_us: pace_us.into(),
        rows,
    })))
}

#[allow(clippy::too_many_arguments)]
fn one(
    nodes: &mut Pair,
    prog: &Path,
    c: &Config,
    segid: u32,
    npio: u32,
    ndma: u32,
    samples: u32,
    pace_us: u32,
) -> Result<ReflectiveRow> {
    let ack = segid + 0x100;
    let uni: &[&str] = if c.unicast { &["unicast"] } else { &[] };
    let mut members = Vec::new();
    for (k, &n) in c.nodes.iter().enumerate() {
        let mut cmd = nodes.command(n as usize - 1, prog);
        cmd.args(["member", &segid.to_string(), &(k + 1).to_string(), &format!("1:{ack}"), &BLOCK.to_string()])
            .args([npio.to_string(), ndma.to_string()])
            .args(uni)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let h = nodes.spawn(cmd, "reflect_bench member")?;
        let fwd = Forward::start(nodes.helper(h), false);
        members.push((h, fwd, n));
    }
    for (_, fwd, n) in &members {
        let t0 = std::time::Instant::now();
        while !fwd.contains("READY") {
            netns::check_interrupted()?;
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the member on node {n} is not ready after 60 s:\n{}",
                    tail(&fwd.text.lock().map(|t| t.clone()).unwrap_or_default(), 20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let list: Vec<String> = c.nodes.iter().map(u32::to_string).collect();
    let mut cmd = nodes.command(0, prog);
    cmd.args(["writer", &segid.to_string(), &ack.to_string(), &list.join(","), &BLOCK.to_string()])
        .args([npio.to_string(), ndma.to_string(), samples.to_string(), pace_us.to_string()])
        .args(uni)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let w = nodes.spawn(cmd, "reflect_bench writer")?;
    let wfwd = Forward::start(nodes.helper(w), false);
    let st = netns::wait_child(nodes.helper(w), Duration::from_secs(600), "reflect_bench writer");
    let wout = wfwd.finish();
    let mut outs = Vec::new();
    for (h, fwd, n) in members {
        let mst = netns::wait_child(nodes.helper(h), Duration::from_secs(60), "reflect_bench member");
        let text = fwd.finish();
        if !matches!(&mst, Ok(s) if s.success()) {
            bail!("the member on node {n} failed ({mst:?}):\n{}\n--- writer ---\n{}", tail(&text, 20), tail(&wout, 20));
        }
        outs.push((n, text));
    }
    let st = st?;
    if !st.success() {
        bail!("the writer failed ({st}):\n{}", tail(&wout, 30));
    }
    let result = wout.lines().find(|l| l.starts_with("RESULT")).context("the writer printed no RESULT line")?;
    let field = |k: &str| -> Option<f64> {
        result
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse().ok())
    };
    // Store-to-visibility: each sample's delay to the last member that saw
    // it; samples some member missed (overwritten first) are left out.
    let per_member: Vec<std::collections::HashMap<u64, u64>> = outs
        .iter()
        .map(|(_, t)| {
            t.lines()
                .filter_map(|l| {
                    let mut it = l.strip_prefix("S ")?.split_whitespace();
                    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
                })
                .collect()
        })
        .collect();
    let mut all: Vec<u64> = per_member[0]
        .iter()
        .filter_map(|(v, d0)| per_member[1..].iter().try_fold(*d0, |m, pm| pm.get(v).map(|d| m.max(*d))))
        .collect();
    all.sort_unstable();
    let pct =
        |p: f64| -> Option<f64> { (!all.is_empty()).then(|| all[((all.len() - 1) as f64 * p) as usize] as f64 / 1e3) };
    say(&format!("{}: {result}", c.name));
    Ok(ReflectiveRow {
        config: c.name.into(),
        members: c.nodes.len() as u64,
        unicast: c.unicast,
        pio_us: field("pio_us"),
        pio_mbps: field("pio_MBps"),
        dma_us: field("dma_us"),
        dma_mbps: field("dma_MBps"),
        pio_call_us: field("pio_call_us"),
        dma_call_us: field("dma_call_us"),
        flush: Quantiles { median_us: field("flush_p50_us"), p99_us: field("flush_p99_us") },
        visibility_all: VisibilityAll {
            n: all.len() as u64,
            sent: samples.into(),
            median_us: pct(0.5),
            p99_us: pct(0.99),
            max_us: pct(1.0),
        },
    })
}

fn print_table(rows: &[ReflectiveRow]) {
    say("\n== reflective memory: writer on node 1, members on nodes 2-4 (1 MiB blocks, each checked whole at every member) ==");
    say(&format!(
        "{:<18} {:>14} {:>14} {:>14} {:>14} {:>14} {:>22} {:>26} {:>10}",
        "to",
        "stores µs/blk",
        "stores MB/s",
        "DMA µs/blk",
        "DMA MB/s",
        "DMA call µs",
        "8 B+flush p50/p99 µs",
        "visible at all p50/p99 µs",
        "seen"
    ));
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    for r in rows {
        let vis = &r.visibility_all;
        say(&format!(
            "{:<18} {:>14} {:>14} {:>14} {:>14} {:>14} {:>22} {:>26} {:>10}",
            r.config,
            f(r.pio_us),
            f(r.pio_mbps),
            f(r.dma_us),
            f(r.dma_mbps),
            f(r.dma_call_us),
            format!("{} / {}", f(r.flush.median_us), f(r.flush.p99_us)),
            format!("{} / {}", f(vis.median_us), f(vis.p99_us)),
            format!("{}/{}", vis.n, vis.sent),
        ));
    }
}
