//! The guest paths: one or both ends of a path in a QEMU guest started by
//! `vsci vm run`, with the same unmodified programs (the image's libsisci).
//!
//! - `guest`: sisci_bench (the local suite: bandwidth, ping-pong,
//!   interrupts, with its raw peers memcpy / memfd polling / eventfd), the
//!   seed-001 transfers with both ends inside one guest, next to the
//!   `local` path's host figures (issue 4: [`versus_host`]), and dma_bench
//!   (seed 003: the guest's DMA calls remoted to the node's engine; see
//!   [`crate::dma::versus`]);
//! - `guest-host`: remote_bench and the transfers between a guest and a host
//!   process of the same node;
//! - `guest-guest`: the same between two guests of one node;
//! - `guest-remote`: the same between a guest on node 1 and a host process
//!   on node 2, the two nodes in network namespaces (the remote path's).
//!
//! sisci_bench forks both its ends from one process, so it can only run
//! with both ends in one guest; across the guest boundary the two-process
//! remote_bench runs instead (`-same-node`: a guest shares its node's id),
//! without its store-to-visibility section, whose delays compare the two
//! ends' clocks (a guest's clock is not the host's).
//!
//! A boot costs 6–8 s under TCG, so each end boots once and runs every
//! measurement of the path in one `sh -c` script; the JSON a program
//! writes inside the guest comes back on its stdout between markers
//! ([`crate::block`]). Under TCG the guest ends run the benchmarks'
//! `-quick` iteration counts, and the transfers stop at 64 MB: a guest
//! instruction costs many host ones, and the full counts would take the
//! run past a quarter of an hour on two cores.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::schema::{
    self, Guest, GuestPair, GuestPeers, GuestVsHost, GuestVsHostRow, Local, Outcome, PathResult, RemoteBench,
    SisciBench,
};

use crate::netns::{self, Pair};
use crate::node::TempNode;
use crate::peers::{self, TRANSFER_SEGID};
use crate::{block, dma, fmt_opt, say, size_name, step, tail, Ctx, Forward, PathSpec};

pub const GUEST: PathSpec = PathSpec {
    name: "guest",
    what: "the local suite with both ends inside one guest (two vCPUs, one node)",
    unavailable: no_qemu,
    steps: 1,
    tools: &[],
    run: run_guest,
};

pub const GUEST_HOST: PathSpec = PathSpec {
    name: "guest-host",
    what: "a guest (client/sender) and a host process (server/receiver) of one node",
    unavailable: no_qemu,
    steps: 1,
    tools: &[],
    run: run_guest_host,
};

pub const GUEST_GUEST: PathSpec = PathSpec {
    name: "guest-guest",
    what: "two co-located guests of one node",
    unavailable: no_qemu,
    steps: 1,
    tools: &[],
    run: run_guest_guest,
};

pub const GUEST_REMOTE: PathSpec = PathSpec {
    name: "guest-remote",
    what: "a guest on node 1 and a host process on node 2 (two network namespaces over veth)",
    unavailable: |ctx| {
        no_qemu(ctx).or_else(|| {
            if !nix::unistd::geteuid().is_root() {
                Some("needs root to create network namespaces (ip netns); run as root".into())
            } else if peers::which("ip").is_none() {
                Some("needs `ip` (iproute2)".into())
            } else {
                None
            }
        })
    },
    steps: 2,
    tools: &[],
    run: run_guest_remote,
};

/// Why the peers of the other paths do not run on guest paths.
const NO_TCP_PEERS: &str = "sockperf, iperf3 and ucx_perftest are not in the guest image (busybox, the C runtime and libsisci only), and a guest has no network device: there is no TCP path into it to measure. The guest's own limits are the raw shared-memory ping-pong and memcpy that sisci_bench measures inside a guest (path `guest`).";

pub fn qemu() -> Option<PathBuf> {
    std::env::var_os("VSCI_QEMU").map(PathBuf::from).or_else(|| peers::which("qemu-system-x86_64"))
}

fn no_qemu(_: &Ctx) -> Option<String> {
    match qemu() {
        None => Some("needs QEMU (qemu-system-x86_64; Debian package qemu-system-x86) to boot guests".into()),
        Some(_) => None,
    }
}

/// One end of a guest path: a host process or a guest, of the node on
/// `socket`, optionally in a network namespace.
struct End {
    ns: Option<String>,
    socket: PathBuf,
    /// Guest name and vCPUs; `None`: a host process.
    guest: Option<(String, u32)>,
}

impl End {
    fn host(socket: &Path) -> End {
        End { ns: None, socket: socket.to_path_buf(), guest: None }
    }
    fn guest(socket: &Path, name: &str, cpus: u32) -> End {
        End { ns: None, socket: socket.to_path_buf(), guest: Some((name.into(), cpus)) }
    }
    fn in_ns(mut self, ns: &str) -> End {
        self.ns = Some(ns.into());
        self
    }
    fn label(&self) -> String {
        match &self.guest {
            Some((n, c)) => format!("guest {n} ({c} vCPU)"),
            None => "host process".into(),
        }
    }

    /// `sh -c script` at this end. In the script `{NAME}` stands for the
    /// program `NAME` of `progs` and `{tmp}` for a scratch directory.
    fn command(&self, progs: &[(&str, &Path)], script: &str, tmp: &Path, timeout: Duration) -> Command {
        let base = |program: &std::ffi::OsStr| {
            let mut c = match &self.ns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns]).arg(program);
                    c
                }
                None => Command::new(program),
            };
            c.env(vsci_proto::SOCKET_ENV, &self.socket).stdin(Stdio::null()).process_group(0);
            c
        };
        let mut s = script.to_string();
        match &self.guest {
            None => {
                for (n, p) in progs {
                    s = s.replace(&format!("{{{n}}}"), &p.display().to_string());
                }
                let mut c = base("sh".as_ref());
                c.arg("-c").arg(s.replace("{tmp}", &tmp.display().to_string()));
                c
            }
            Some((name, cpus)) => {
                for (n, _) in progs {
                    s = s.replace(&format!("{{{n}}}"), &format!("/bin/{n}"));
                }
                let mut c = base(crate::node::sibling("vsci").as_os_str());
                c.args(["vm", "run", "--socket"]).arg(&self.socket);
                c.args(["--name", name, "--cpus", &cpus.to_string(), "--timeout", &timeout.as_secs().to_string()]);
                for (n, p) in progs {
                    c.arg("--add").arg(format!("{}:/bin/{n}", p.display()));
                }
                c.args(["--", "sh", "-c"]).arg(s.replace("{tmp}", "/tmp"));
                c
            }
        }
    }
}

/// The accelerator line `vsci vm run` prints ("accelerator tcg (...)").
fn accelerator(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.split_once("vsci vm: accelerator ").map(|(_, a)| a.trim().to_string()))
}

/// Scratch directory for host ends; removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Result<Scratch> {
        let d = std::env::temp_dir().join(format!("vsci-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(Scratch(d))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Transfer sizes on guest paths: 4 KB / 2 MB, and 64 MB in full mode
/// (1 GB would take minutes of TCG per copy pass).
fn transfer_plan(quick: bool) -> (&'static str, &'static [(&'static str, u64)], usize) {
    if quick {
        ("4m", &[("4k", 4 << 10), ("2m", 2 << 20)], 3)
    } else {
        ("64m", &[("4k", 4 << 10), ("2m", 2 << 20), ("64m", 64 << 20)], 3)
    }
}

const TIMEOUT: Duration = Duration::from_secs(900);

// ---------------------------------------------------------------------------
// guest: the local suite inside one guest

fn run_guest(ctx: &Ctx) -> Result<PathResult> {
    let sb = ctx.program(&ctx.bench_dir, "sisci_bench")?;
    let sr = ctx.program(&ctx.examples_dir, "sendrecv")?;
    let db = ctx.program(&ctx.bench_dir, "dma_bench")?;
    let node = TempNode::start(1)?;
    step("guest: sisci_bench, the transfers and dma_bench inside one guest");
    let (window, sizes, reps) = transfer_plan(ctx.quick);
    let list = peers::transfer_list(sizes, reps);
    // Two vCPUs: both ends of sisci_bench's ping-pongs poll, and with one
    // vCPU every round trip waits for a scheduler tick (4 ms) instead.
    // The receiver runs in the background; the sender's connect waits for
    // its window segment.
    let script = format!(
        "{{sisci_bench}} -quick -json /tmp/sb.json; st=$?\n\
         echo '@@vsci-bench-begin sisci_bench'; cat /tmp/sb.json; echo '@@vsci-bench-end'\n\
         {{sendrecv}} -receiver -window {window} -segid {TRANSFER_SEGID} > /tmp/recv.txt 2>&1 &\n\
         {{sendrecv}} -sender -rn 1 -bytes {list} -slots 1 -copy -segid {TRANSFER_SEGID} || st=$?\n\
         wait $! || st=$?\n\
         echo '@@vsci-bench-begin receiver'; cat /tmp/recv.txt; echo '@@vsci-bench-end'\n\
         {dma}\
         exit $st",
        dma = dma::guest_script()
    );
    let end = End::guest(node.socket(), "vsci-bench-guest", 2);
    let cmd = end.command(
        &[("sisci_bench", &sb), ("sendrecv", &sr), ("dma_bench", &db)],
        &script,
        Path::new("/tmp"),
        TIMEOUT,
    );
    let (st, text) = crate::run_forwarded(cmd, "vsci vm run (guest)", TIMEOUT + Duration::from_secs(30), true)?;
    netns::check_interrupted()?;
    drop(node);
    let Some(sbj) = block(&text, "sisci_bench") else {
        bail!("sisci_bench in the guest wrote no JSON (vsci vm run: {st}):\n{}", tail(&text, 20));
    };
    let sbj: SisciBench = schema::from_str(&sbj).context("sisci_bench's JSON in the guest")?;
    if !st.success() {
        say(&format!("!! the guest's command exited {st}; sisci_bench's JSON lists failed phases"));
    }
    let rtext = block(&text, "receiver").unwrap_or_default();
    let transfers = Outcome::of(
        peers::parse_transfers(&text, &rtext, window, &list, 1)
            .inspect_err(|e| say(&format!("!! transfers failed: {e:#}"))),
    );
    Ok(PathResult::Guest(Box::new(Guest {
        path: "guest".into(),
        what: GUEST.what.into(),
        accelerator: accelerator(&text),
        iterations: "sisci_bench -quick (its smaller size set and iteration counts) under TCG; transfers 4 KB / 2 MB (/ 64 MB in full mode), window 4 MiB (64 MiB)".into(),
        sisci_bench: sbj,
        transfers,
        dma: dma::from_guest(&text),
        peers: GuestPeers { not_run: NO_TCP_PEERS.into() },
    })))
}

/// The local suite in the guest against the host, figure by figure:
/// `guest / host` (for latency lower is better, for bandwidth higher).
pub fn versus_host(local: &Local, guest: &Guest) -> GuestVsHost {
    let (h, g) = (&local.sisci_bench, &guest.sisci_bench);
    let mut out = Vec::new();
    let mut add = |what: String, unit: &str, hv: Option<f64>, gv: Option<f64>| {
        let ratio = match (hv, gv) {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        };
        out.push(GuestVsHostRow { what, unit: unit.into(), host: hv, guest: gv, ratio });
    };
    let med = |v: &Option<schema::Lat>| v.as_ref().and_then(|v| v.median_us);
    for r in &g.write_bandwidth.rows {
        let Some(hr) = h.write_bandwidth.rows.iter().find(|x| x.size == r.size) else { continue };
        let s = size_name(r.size);
        add(format!("write {s}, memcpy + SCIFlush"), "MB/s", hr.vsci_mbps, r.vsci_mbps);
        add(format!("write {s}, raw memcpy (limit)"), "MB/s", hr.peer_mbps, r.peer_mbps);
    }
    for r in &g.pingpong.rows {
        let Some(hr) = h.pingpong.rows.iter().find(|x| x.size == r.size) else { continue };
        let s = size_name(r.size);
        add(format!("ping-pong {s}, RTT/2"), "us", med(&hr.vsci), med(&r.vsci));
        add(format!("ping-pong {s}, raw memfd (limit)"), "us", med(&hr.peer), med(&r.peer));
    }
    for r in &g.interrupt.rows {
        let Some(hr) = h.interrupt.rows.iter().find(|x| x.wait == r.wait) else { continue };
        add(format!("interrupt, VSCI_WAIT={}", r.wait), "us", med(&hr.vsci), med(&r.vsci));
    }
    add("interrupt peer: eventfd ping-pong".into(), "us", med(&h.interrupt.peer), med(&g.interrupt.peer));
    for r in &g.data_interrupt.rows {
        let Some(hr) = h.data_interrupt.rows.iter().find(|x| x.wait == r.wait && x.payload == r.payload) else {
            continue;
        };
        add(format!("data interrupt {}, {}", size_name(r.payload), r.wait), "us", med(&hr.vsci), med(&r.vsci));
    }
    let accel = guest.accelerator.clone().unwrap_or_else(|| "unknown".into());
    say(&format!("\n== the local suite in a guest vs on the host (guest / host; accelerator {accel}) =="));
    say(&format!("{:<44} {:>12} {:>12} {:>10}", "what", "host", "guest", "guest/host"));
    for r in &out {
        say(&format!(
            "{:<44} {:>12} {:>12} {:>10}",
            r.what,
            format!("{} {}", fmt_opt(r.host, 2), r.unit),
            format!("{} {}", fmt_opt(r.guest, 2), r.unit),
            r.ratio.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
        ));
    }
    GuestVsHost {
        kvm: accel.starts_with("kvm"),
        accelerator: accel,
        what: "median latencies (us) and bandwidths (MB/s) of sisci_bench in one guest (path guest) and on the host (path local), same run; ratio = guest / host".into(),
        rows: out,
    }
}

// ---------------------------------------------------------------------------
// Two ends across a guest boundary: remote_bench, then the transfers

fn run_guest_host(ctx: &Ctx) -> Result<PathResult> {
    let node = TempNode::start(1)?;
    step("guest-host: remote_bench and the transfers, guest -> host process");
    let ends = [End::guest(node.socket(), "vsci-bench-gh", 1), End::host(node.socket())];
    let v = run_pair(ctx, "guest-host", &ends, [1, 1]);
    drop(node);
    v.map(|v| PathResult::GuestPair(Box::new(v)))
}

fn run_guest_guest(ctx: &Ctx) -> Result<PathResult> {
    let node = TempNode::start(1)?;
    step("guest-guest: remote_bench and the transfers between two guests");
    let ends = [End::guest(node.socket(), "vsci-bench-gg0", 1), End::guest(node.socket(), "vsci-bench-gg1", 1)];
    let v = run_pair(ctx, "guest-guest", &ends, [1, 1]);
    drop(node);
    v.map(|v| PathResult::GuestPair(Box::new(v)))
}

fn run_guest_remote(ctx: &Ctx) -> Result<PathResult> {
    // The guest boots inside a namespace, which cannot reach the package
    // archive the first image build downloads the kernel from.
    vsci_vm::image::ensure_image(&|m: &str| say(&format!("vsci vm: {m}"))).context("building the guest image")?;
    step("guest-remote: two nodes in two network namespaces");
    let mut pair = Pair::create()?;
    pair.start_nodes(&crate::node::sibling("vscid"), Duration::from_secs(30))?;
    say(&format!(
        "namespaces {} (node 1, guest) and {} (node 2, host process); vscid up on both",
        pair.ns[0], pair.ns[1]
    ));
    step("guest-remote: remote_bench and the transfers, guest on node 1 -> host process on node 2");
    let ends = [
        End::guest(&pair.sockets[0], "vsci-bench-gr", 1).in_ns(&pair.ns[0]),
        End::host(&pair.sockets[1]).in_ns(&pair.ns[1]),
    ];
    let v = run_pair(ctx, "guest-remote", &ends, [1, 2]);
    pair.check_daemons()?;
    v.map(|mut v| {
        v.link = Some("veth pair between two network namespaces of one host".into());
        PathResult::GuestPair(Box::new(v))
    })
}

/// remote_bench (client at end 0, server at end 1) and then the
/// transfers (sender at end 0, receiver at end 1), each end in one boot.
fn run_pair(ctx: &Ctx, name: &str, ends: &[End; 2], nodes: [u32; 2]) -> Result<GuestPair> {
    let rb = ctx.program(&ctx.bench_dir, "remote_bench")?;
    let sr = ctx.program(&ctx.examples_dir, "sendrecv")?;
    let progs: [(&str, &Path); 2] = [("remote_bench", &rb), ("sendrecv", &sr)];
    let (window, sizes, reps) = transfer_plan(ctx.quick);
    let list = peers::transfer_list(sizes, reps);
    let same = if nodes[0] == nodes[1] { " -same-node" } else { "" };
    // Sections a (ping-pong), b (bandwidth, from 4 B), d (interrupts); not
    // c: its delays subtract the two ends' clocks.
    let rb_args = format!("{same} -s abd -bw-from 4 -quick -timeout 120");
    // The sender waits 2 s: the receiver starts only when the server side
    // of remote_bench has finished (its connect then waits for the window).
    let client = format!(
        "{{remote_bench}} -client -rn {rn}{rb_args} -json {{tmp}}/rb.json; st=$?\n\
         echo '@@vsci-bench-begin remote_bench'; cat {{tmp}}/rb.json; echo '@@vsci-bench-end'\n\
         sleep 2\n\
         {{sendrecv}} -sender -rn {rn} -bytes {list} -slots 1 -copy -segid {TRANSFER_SEGID} || st=$?\n\
         exit $st",
        rn = nodes[1]
    );
    let server = format!(
        "{{remote_bench}} -server -rn {rn}{rb_args}; st=$?\n\
         {{sendrecv}} -receiver -window {window} -segid {TRANSFER_SEGID} || st=$?\n\
         exit $st",
        rn = nodes[0]
    );
    say(&format!(
        "{name}: end 0 (remote_bench -client, sendrecv -sender): {}; end 1 (-server, -receiver): {}",
        ends[0].label(),
        ends[1].label()
    ));
    let scratch = Scratch::new(name)?;
    let (s0, s1) = (scratch.0.join("0"), scratch.0.join("1"));
    std::fs::create_dir_all(&s0)?;
    std::fs::create_dir_all(&s1)?;
    let mut sc = ends[1].command(&progs, &server, &s1, TIMEOUT);
    sc.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut srv = sc.spawn().with_context(|| format!("starting end 1 of {name}"))?;
    let sfwd = Forward::start(&mut srv, false);
    let mut cc = ends[0].command(&progs, &client, &s0, TIMEOUT);
    cc.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut cli = match cc.spawn() {
        Ok(c) => c,
        Err(e) => {
            netns::stop_child(&mut srv, Duration::from_secs(3));
            return Err(e).with_context(|| format!("starting end 0 of {name}"));
        }
    };
    let cfwd = Forward::start(&mut cli, true);
    let st = netns::wait_child(&mut cli, TIMEOUT + Duration::from_secs(30), &format!("{name} end 0"));
    let sst = match &st {
        Ok(_) => netns::wait_child(&mut srv, Duration::from_secs(90), &format!("{name} end 1")).ok(),
        Err(_) => None,
    };
    if sst.is_none() {
        netns::stop_child(&mut srv, Duration::from_secs(3));
    }
    let text = cfwd.finish();
    let stext = sfwd.finish();
    let st = st?;
    let rbj = block(&text, "remote_bench");
    let Some(rbj) = rbj else {
        bail!(
            "remote_bench wrote no JSON (end 0: {st}, end 1: {})\n--- end 1 ---\n{}",
            sst.map(|s| s.to_string()).unwrap_or_else(|| "did not finish".into()),
            tail(&stext, 30)
        );
    };
    let rbj: RemoteBench = schema::from_str(&rbj).context("remote_bench's JSON from the guest path")?;
    if !st.success() || !sst.is_some_and(|s| s.success()) {
        say(&format!(
            "!! {name}: end 0 exited {st}, end 1 {}; end 1 said:\n{}",
            sst.map(|s| s.to_string()).unwrap_or_else(|| "did not finish".into()),
            tail(&stext, 12)
        ));
    }
    let transfers = Outcome::of(
        peers::parse_transfers(&text, &stext, window, &list, nodes[1])
            .inspect_err(|e| say(&format!("!! transfers failed: {e:#}"))),
    );
    let accel = accelerator(&text).or_else(|| accelerator(&stext));
    Ok(GuestPair {
        path: name.into(),
        what: path_what(name).into(),
        ends: vec![ends[0].label(), ends[1].label()],
        nodes: nodes.to_vec(),
        accelerator: accel,
        iterations: format!("remote_bench{rb_args} (quick counts under TCG; no store-to-visibility: the guest's clock is not the host's); transfers 4 KB / 2 MB (/ 64 MB in full mode), window {window}"),
        remote_bench: rbj,
        transfers,
        peers: GuestPeers { not_run: NO_TCP_PEERS.into() },
        link: None,
    })
}

fn path_what(name: &str) -> &'static str {
    [&GUEST, &GUEST_HOST, &GUEST_GUEST, &GUEST_REMOTE].iter().find(|p| p.name == name).map(|p| p.what).unwrap_or("")
}
