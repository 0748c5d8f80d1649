//! The `local` path: processes on one node sharing segments. sisci_bench
//! (write bandwidth, ping-pong, interrupts, data interrupts with their raw
//! peers: memcpy, memfd polling, eventfd), the seed-001 transfers, seed
//! 003's DMA measurements (dma_bench), the Python binding's cost (the same
//! ping-pongs from Python, `python.rs`), and ucx_perftest over shared memory
//! between two processes.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::node::TempNode;
use crate::peers::{self, Sites, Tool};
use crate::{dma, netns, run_forwarded, say, step, Ctx, PathSpec};

// bench/python.rs (a module of this path's only).
#[path = "python.rs"]
pub(crate) mod python;

pub const PATH: PathSpec = PathSpec {
    name: "local",
    what: "host processes on one node sharing segments (zero copy)",
    unavailable: |_| None,
    steps: 6,
    tools: &[Tool::UcxPerftest, Tool::Sockperf, Tool::Iperf3],
    run,
};

/// Both ends on this host, one node.
struct Local<'a> {
    socket: &'a Path,
}

impl Sites for Local<'_> {
    fn command(&self, _i: usize, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.env(vsci_proto::SOCKET_ENV, self.socket).stdin(Stdio::null()).process_group(0);
        c
    }
    fn addr(&self, _i: usize) -> String {
        "127.0.0.1".into()
    }
    fn node_id(&self, _i: usize) -> u32 {
        1
    }
}

fn run(ctx: &Ctx) -> Result<Value> {
    let prog = ctx.program(&ctx.bench_dir, "sisci_bench")?;
    let sendrecv = ctx.program(&ctx.examples_dir, "sendrecv")?;
    let node = TempNode::start(1)?;

    step("local: sisci_bench (bandwidth, ping-pong, interrupts)");
    let tmp = std::env::temp_dir().join(format!("vsci-bench-local-{}.json", std::process::id()));
    let mut cmd = Command::new(&prog);
    if ctx.quick {
        cmd.arg("-quick");
    }
    cmd.arg("-json").arg(&tmp).env(vsci_proto::SOCKET_ENV, node.socket()).stdin(Stdio::null()).process_group(0);
    let limit = Duration::from_secs(if ctx.quick { 300 } else { 1800 });
    let (st, _) = run_forwarded(cmd, "sisci_bench", limit, true)?;
    let sb = std::fs::read_to_string(&tmp).ok().and_then(|s| serde_json::from_str::<Value>(&s).ok());
    let _ = std::fs::remove_file(&tmp);
    netns::check_interrupted()?;
    let Some(sb) = sb else { bail!("sisci_bench wrote no JSON ({st})") };
    if !st.success() {
        say(&format!("!! sisci_bench exited {st}; its JSON lists the failed phases"));
    }

    step("local: seed 001 transfers (sendrecv, 4 KB / 2 MB / 1 GB)");
    let sites = Local { socket: node.socket() };
    let transfers = peers::transfers(&sites, &sendrecv, ctx.quick).unwrap_or_else(|e| {
        say(&format!("!! transfers failed: {e:#}"));
        json!({"error": format!("{e:#}")})
    });

    step("local: dma_bench (seed 003: the DMA engine)");
    let dma = dma::host(ctx, node.socket());
    netns::check_interrupted()?;

    step("local: Python binding (the same ping-pongs from Python, against C)");
    let python = python::run(ctx, node.socket(), &sb);
    netns::check_interrupted()?;

    step("local: ucx_perftest over shared memory");
    // How fast two cores of this VM pass a cache line changes over minutes
    // (vCPU placement on the host), so a raw memfd ping-pong taken right
    // before UCX is the fair reference for UCX's latency, not the one
    // sisci_bench took minutes earlier.
    let tmp2 = std::env::temp_dir().join(format!("vsci-bench-local-ref-{}.json", std::process::id()));
    let mut cmd = Command::new(&prog);
    cmd.args(["-quick", "-s", "b", "-json"])
        .arg(&tmp2)
        .env(vsci_proto::SOCKET_ENV, node.socket())
        .stdin(Stdio::null())
        .process_group(0);
    let reference = match run_forwarded(cmd, "sisci_bench -s b", Duration::from_secs(120), false) {
        Ok(_) => std::fs::read_to_string(&tmp2)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .map(|v| v["pingpong"].clone()),
        Err(e) => {
            say(&format!("!! reference ping-pong for UCX failed: {e:#}"));
            None
        }
    };
    let _ = std::fs::remove_file(&tmp2);
    drop(node);
    let (lat, bw): (&[u64], &[u64]) = if ctx.quick {
        (&[64, 8192], &[65536, 8 << 20])
    } else {
        (&[4, 64, 1024, 8192], &[1024, 4096, 65536, 1 << 20, 8 << 20])
    };
    // posix: the shared-memory transport between processes; self: a
    // process's own endpoint, which UCP wants available.
    let mut ucx =
        peers::ucx(&Local { socket: Path::new("/nonexistent") }, &ctx.tools, "posix,self", lat, bw, false, ctx.quick);
    if let (Some(r), Some(o)) = (reference, ucx.as_object_mut()) {
        o.insert("reference_pingpong".into(), r);
    }

    // What the same two ends get from TCP through the loopback device.
    step("local: sockperf and iperf3 over loopback");
    let lo = Local { socket: Path::new("/nonexistent") };
    let secs = if ctx.quick { 1 } else { 5 };
    let sizes: &[u64] = if ctx.quick { &[64] } else { &[64, 1024, 8192] };
    let sockperf = peers::sockperf(&lo, &ctx.tools, sizes, secs);
    let iperf = peers::iperf3(&lo, &ctx.tools, secs);
    Ok(json!({
        "path": "local",
        "what": PATH.what,
        "sisci_bench": sb,
        "transfers": transfers,
        "dma": dma,
        "python": python,
        "peers": {"ucx_perftest": ucx, "sockperf": sockperf, "iperf3": iperf},
    }))
}
