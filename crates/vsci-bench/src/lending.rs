//! The `lending` path: a block device of lent memory (issue 13, seed 002).
//! Two nodes in network namespaces; node 2 lends (`vscid --lend`), node 1
//! runs `vsci blockdev` over a loan from it. The peer is what seed 002
//! compared its remote swap with: an NBD export of RAM on the other host
//! (nbdkit's memory plugin on node 2, reached over the same veth). fio
//! (libnbd engine) drives both from node 1 with the same jobs: sequential
//! and random 4 KiB reads and writes at queue depth 1 and 32, and 1 MiB
//! streams. Then, where QEMU is, a guest with less RAM than its program
//! swaps onto each device in turn and the program's run time is compared.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::schema::{
    FioFigures, FioJob, Lending, MemExt, MemExtRates, MemExtRuns, PageStore, PageStoreRow, PathResult, Swap, SwapRun,
};

use crate::netns::{self, Pair};
use crate::peers::Tool;
use crate::{run_forwarded, say, step, Ctx, PathSpec};

pub const PATH: PathSpec = PathSpec {
    name: "lending",
    what: "lent memory: vsci blockdev over memory another node lends, against an NBD export of RAM on that node (nbdkit), under fio and as a guest's swap (network namespaces, RMA engine over TCP)",
    unavailable: crate::remote::needs_root_and_ip,
    steps: 4,
    tools: &[Tool::Fio, Tool::Nbdkit],
    run,
};

/// Device size: both exports, and the lender's share.
const SIZE: &str = "384M";
const SIZE_BYTES: u64 = 384 << 20;
const NBDKIT_PORT: u16 = 10809;

/// (row name, fio --rw, block size, queue depth).
const JOBS: &[(&str, &str, u64, u32)] = &[
    ("sequential read 4 KiB", "read", 4096, 1),
    ("sequential read 4 KiB", "read", 4096, 32),
    ("random read 4 KiB", "randread", 4096, 1),
    ("random read 4 KiB", "randread", 4096, 32),
    ("sequential write 4 KiB", "write", 4096, 1),
    ("sequential write 4 KiB", "write", 4096, 32),
    ("random write 4 KiB", "randwrite", 4096, 1),
    ("random write 4 KiB", "randwrite", 4096, 32),
    ("sequential read 1 MiB", "read", 1 << 20, 8),
    ("sequential write 1 MiB", "write", 1 << 20, 8),
];

fn run(ctx: &Ctx) -> Result<PathResult> {
    let (Some(fio), Some(nbdkit)) = (ctx.tools.get(Tool::Fio), ctx.tools.get(Tool::Nbdkit)) else {
        bail!("fio and nbdkit are needed (scripts/install-deps.sh installs them)");
    };
    let (fio, nbdkit) = (fio.to_path_buf(), nbdkit.to_path_buf());
    let vscid = crate::node::sibling("vscid");
    let vsci = crate::node::sibling("vsci");
    step("lending: two nodes in network namespaces, node 2 lending");
    let mut nodes = Pair::create_n(2)?;
    nodes.node_args = vec![Vec::new(), vec!["--lend".into(), "1G".into()]];
    nodes.start_nodes(&vscid, Duration::from_secs(30))?;
    say(&format!(
        "namespaces {} (nodes 1-2, {}); files in {}",
        nodes.ns.join(", "),
        nodes.ip.join(", "),
        nodes.dir.display()
    ));

    let sock = nodes.dir.join("blockdev.sock");
    let mut bd = nodes.command(0, &vsci);
    bd.args(["blockdev", "--size", SIZE, "--from", "2", "--listen-unix"])
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    nodes.spawn(bd, "vsci blockdev")?;
    let mut kit = nodes.command(1, &nbdkit);
    kit.args(["-f", "-i", &nodes.ip[1], "-p", &NBDKIT_PORT.to_string(), "memory", SIZE])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    nodes.spawn(kit, "nbdkit")?;
    let vsci_url = format!("nbd+unix:///vsci?socket={}", sock.display());
    let kit_url = format!("nbd://{}:{NBDKIT_PORT}/", nodes.ip[1]);
    for (what, url) in [("vsci blockdev", &vsci_url), ("nbdkit", &kit_url)] {
        wait_export(&nodes, &fio, url).with_context(|| format!("{what} did not come up"))?;
    }

    step("lending: fio against vsci blockdev and nbdkit");
    let secs = if ctx.quick { 1 } else { 5 };
    // Fill both first: an export's first read of a block never written is
    // a shortcut for nbdkit (zeros) that a real swap device never sees.
    for url in [&vsci_url, &kit_url] {
        fio_job(&nodes, &fio, url, "write", 1 << 20, 8, None)?;
    }
    let mut rows = Vec::new();
    for &(name, rw, bs, qd) in JOBS {
        let v = fio_job(&nodes, &fio, &vsci_url, rw, bs, qd, Some(secs))?;
        let k = fio_job(&nodes, &fio, &kit_url, rw, bs, qd, Some(secs))?;
        say(&format!(
            "{name} qd {qd}: vsci {:.0} MB/s {:.0} IOPS p50 {:.1} µs, nbdkit {:.0} MB/s {:.0} IOPS p50 {:.1} µs",
            v.mbps.unwrap_or(0.0),
            v.iops.unwrap_or(0.0),
            v.p50_us.unwrap_or(0.0),
            k.mbps.unwrap_or(0.0),
            k.iops.unwrap_or(0.0),
            k.p50_us.unwrap_or(0.0),
        ));
        rows.push(FioJob { job: name.into(), rw: rw.into(), bs, qd: qd.into(), vsci: v, nbdkit: k });
    }

    step("lending: page store and memory extension");
    let pagestore = tmem_bench(&nodes, if ctx.quick { 1024 } else { 8192 })?;
    let memext = memext_bench(&nodes, ctx.quick)?;

    step("lending: a guest swapping onto each device");
    let swap = if ctx.quick {
        Swap { skipped: Some("--quick".into()), ..Swap::default() }
    } else if crate::guest::qemu().is_some() {
        Swap {
            skipped: None,
            vsci: Some(swap_run(&nodes, &vsci, &vsci_url)?),
            nbdkit: Some(swap_run(&nodes, &vsci, &kit_url)?),
        }
    } else {
        Swap { skipped: Some("no QEMU here".into()), ..Swap::default() }
    };
    step("lending: done");
    nodes.check_daemons()?;
    Ok(PathResult::Lending(Box::new(Lending {
        size: SIZE_BYTES,
        secs_per_job: secs.into(),
        jobs: rows,
        pagestore,
        memext,
        swap,
        peer: "nbdkit memory plugin on node 2, NBD over TCP".into(),
    })))
}

/// t_tmem's bench on node 1 against node 2's pool: puts and gets of 4 KiB
/// pages one at a time, beside the same copies into a local memfd.
fn tmem_bench(nodes: &Pair, count: u32) -> Result<PageStore> {
    let prog = crate::node::sibling("../tests/t_tmem").canonicalize().context("tests/t_tmem (built by `make`)")?;
    let mut c = nodes.command(0, &prog);
    c.args(["bench", "2", &count.to_string()]);
    let (st, out) = run_forwarded(c, "t_tmem bench", Duration::from_secs(300), false)?;
    if !st.success() || !out.contains("BENCH DONE") {
        bail!(
            "t_tmem bench failed ({st}):
{}",
            crate::tail(&out, 20)
        );
    }
    // "BENCH WHAT OP ops/s=.. MiB/s=.. p50_us=.. p99_us=.."
    let mut rows = Vec::new();
    for l in out.lines().filter(|l| l.starts_with("BENCH ") && !l.contains("DONE")) {
        let w: Vec<&str> = l.split_whitespace().collect();
        rows.push(PageStoreRow {
            store: w.get(1).map(|s| s.to_string()),
            op: w.get(2).map(|s| s.to_string()),
            ops: field(l, "ops/s="),
            p50_us: field(l, "p50_us="),
            p99_us: field(l, "p99_us="),
        });
    }
    say(&format!("page store: {} rows", rows.len()));
    Ok(PageStore { pages: count.into(), rows })
}

/// vsci-memext-check's stream on node 1 (a range of twice its budget in
/// memory node 2 lends), and the same program on local memory.
fn memext_bench(nodes: &Pair, quick: bool) -> Result<MemExt> {
    let prog = crate::node::sibling("vsci-memext-check");
    let (size, budget) = if quick { ("16M", "8M") } else { ("64M", "32M") };
    let mut out = Vec::new();
    for (what, local) in [("vsci", false), ("local", true)] {
        let mut c = nodes.command(0, &prog);
        if local {
            c.arg("--local");
        }
        c.args(["stream", size, budget, "2"]);
        let (st, text) = run_forwarded(c, "vsci-memext-check", Duration::from_secs(600), false)?;
        if !st.success() || !text.lines().any(|l| l.trim() == "OK") {
            bail!(
                "vsci-memext-check {what} failed ({st}):
{}",
                crate::tail(&text, 20)
            );
        }
        // "write: 0.123 GB/s (...)" lines.
        let rate = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        out.push(MemExtRates {
            write_gbps: rate("write: "),
            read_seq_gbps: rate("read sequential: "),
            read_random_gbps: rate("read random pages: "),
            rmw_random_gbps: rate("read-modify-write random pages: "),
        });
        let _ = what;
    }
    let (Some(local), Some(vsci)) = (out.pop(), out.pop()) else { bail!("vsci-memext-check ran twice, no result") };
    let runs = MemExtRuns { vsci, local };
    say(&format!("memory extension: {}", serde_json::to_string(&runs).unwrap_or_default()));
    Ok(MemExt { size: size.into(), budget: budget.into(), runs })
}

/// The number after `key` in a line of `key=value` words.
fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)).and_then(|v| v.parse().ok())
}

/// Wait until fio can open the export (the servers start in the background).
fn wait_export(nodes: &Pair, fio: &Path, url: &str) -> Result<()> {
    let t0 = Instant::now();
    loop {
        netns::check_interrupted()?;
        let mut c = nodes.command(0, fio);
        c.args(["--name=probe", "--ioengine=nbd", "--rw=read", "--bs=4k", "--size=4k", "--output-format=terse"])
            .arg(format!("--uri={url}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if c.status().is_ok_and(|s| s.success()) {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("no answer at {url} after 30 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One fio job from node 1: MB/s, IOPS and total latency p50/p99 in
/// µs. `secs`: time-based for that long; None: one pass over the export.
fn fio_job(nodes: &Pair, fio: &Path, url: &str, rw: &str, bs: u64, qd: u32, secs: Option<u32>) -> Result<FioFigures> {
    let mut c = nodes.command(0, fio);
    // lat_percentiles: total latency (submission to completion); with the
    // libnbd engine much of a request's time is spent before fio counts
    // it submitted, so completion latency alone would flatter both sides.
    c.args(["--name=job", "--ioengine=nbd", "--output-format=json", "--direct=1", "--lat_percentiles=1"])
        .arg(format!("--uri={url}"))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"))
        .arg(format!("--iodepth={qd}"))
        .arg(format!("--size={SIZE_BYTES}"));
    if let Some(s) = secs {
        c.args(["--time_based", &format!("--runtime={s}")]);
    }
    let (st, out) = run_forwarded(c, "fio", Duration::from_secs(300), false)?;
    if !st.success() {
        bail!("fio {rw} bs {bs} qd {qd} on {url} failed ({st}):\n{}", crate::tail(&out, 20));
    }
    // fio prints notes before the JSON document.
    let start = out.find('{').context("fio printed no JSON")?;
    let v: FioOutput = serde_json::from_str(&out[start..]).context("fio's JSON")?;
    let job = v.jobs.into_iter().next().context("fio's JSON has no job")?;
    let j = if rw.contains("read") { job.read } else { job.write };
    let pct = |p: &str| j.lat_ns.percentile.get(p).map(|ns| ns / 1000.0);
    Ok(FioFigures {
        mbps: Some(j.bw_bytes / 1e6),
        iops: Some(j.iops),
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
    })
}

/// What vsci bench reads of fio's JSON (fio's own format; the rest is
/// ignored).
#[derive(serde::Deserialize)]
struct FioOutput {
    jobs: Vec<FioOutputJob>,
}

#[derive(serde::Deserialize)]
struct FioOutputJob {
    read: FioSide,
    write: FioSide,
}

#[derive(serde::Deserialize)]
struct FioSide {
    bw_bytes: f64,
    iops: f64,
    lat_ns: FioLat,
}

#[derive(serde::Deserialize)]
struct FioLat {
    #[serde(default)]
    percentile: std::collections::BTreeMap<String, f64>,
}

/// A 128 MiB guest on node 1 with `url` as its swap device runs t_memhog
/// over twice the RAM it has left; returns the program's own time.
fn swap_run(nodes: &Pair, vsci: &Path, url: &str) -> Result<SwapRun> {
    let memhog: PathBuf = crate::node::sibling("../tests/t_memhog");
    let memhog = memhog.canonicalize().with_context(|| format!("{} (built by `make`)", memhog.display()))?;
    let mut c = nodes.command(0, vsci);
    c.args(["vm", "run", "--name", "swapper", "--memory", "128", "--timeout", "900", "--drive", url])
        .arg("--add")
        .arg(format!("{}:/bin/t_memhog", memhog.display()))
        .args(["--", "sh", "-c", "mkswap /dev/vda >/dev/null && swapon /dev/vda && t_memhog 160"])
        .env_remove(vsci_proto::SOCKET_ENV);
    let t0 = Instant::now();
    let (st, out) = run_forwarded(c, "vsci vm run (swap)", Duration::from_secs(1000), false)?;
    let wall = t0.elapsed().as_secs_f64();
    let line = out.lines().find(|l| l.starts_with("MEMHOG")).unwrap_or("");
    if !st.success() || !line.starts_with("MEMHOG OK") {
        bail!("the swapping guest failed ({st}):\n{}", crate::tail(&out, 20));
    }
    say(&format!("swap onto {url}: {line} (guest run {wall:.1} s)"));
    Ok(SwapRun {
        program_secs: field(line, "secs="),
        swapped_kib: field(line, "swapped_kib="),
        guest_wall_secs: wall,
        working_set_mib: 160,
        guest_ram_mib: 128,
    })
}
