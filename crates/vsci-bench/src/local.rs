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

use crate::schema::{self, LocalPeers, Outcome, PathResult, SbPingpong, SisciBench};

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

fn run(ctx: &Ctx) -> Result<PathResult> {
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
    netns::check_interrupted()?;
    if !tmp.exists() {
        bail!("sisci_bench wrote no JSON ({st})");
    }
    // A file that does not fit the schema stays where it is, named in the error.
    let sb: SisciBench = schema::load_output(&tmp, "sisci_bench")?;
    let _ = std::fs::remove_file(&tmp);
    if !st.success() {
        say(&format!("!! sisci_bench exited {st}; its JSON lists the failed phases"));
    }

    step("local: seed 001 transfers (sendrecv, 4 KB / 2 MB / 1 GB)");
    let sites = Local { socket: node.socket() };
    let transfers = Outcome::of(
        peers::transfers(&sites, &sendrecv, ctx.quick).inspect_err(|e| say(&format!("!! transfers failed: {e:#}"))),
    );

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
    let reference: Option<SbPingpong> = match run_forwarded(cmd, "sisci_bench -s b", Duration::from_secs(120), false)
        .and_then(|_| schema::load_output::<SisciBench>(&tmp2, "sisci_bench -s b"))
    {
        Ok(v) => Some(v.pingpong),
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
    if ucx.available {
        ucx.reference_pingpong = reference;
    }

    // What the same two ends get from TCP through the loopback device.
    step("local: sockperf and iperf3 over loopback");
    let lo = Local { socket: Path::new("/nonexistent") };
    let secs = if ctx.quick { 1 } else { 5 };
    let sizes: &[u64] = if ctx.quick { &[64] } else { &[64, 1024, 8192] };
    let sockperf = peers::sockperf(&lo, &ctx.tools, sizes, secs);
    let iperf = peers::iperf3(&lo, &ctx.tools, secs);
    Ok(PathResult::Local(Box::new(schema::Local {
        path: "local".into(),
        what: PATH.what.into(),
        sisci_bench: sb,
        transfers,
        dma,
        python: Some(python),
        peers: LocalPeers { ucx_perftest: ucx, sockperf, iperf3: iperf },
    })))
}
