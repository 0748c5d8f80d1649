//! Seed 003's DMA measurements (bench/dma_bench.c) on the paths that have a
//! DMA engine: `local` (host processes, a co-located target), `remote` (the
//! target on node 2, RMA), and `guest` (the same program inside a guest: its
//! calls are remoted to the node's engine by the guest agent). [`versus`]
//! puts the three side by side with the paper's figures in a column of
//! their own, and reads the guest's overhead over the host the way the paper
//! reads its para-virtualized engine against the native one.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Result};

use crate::schema::{self, DmaBench, DmaModes, DmaVersus, DmaVersusRow, Outcome, PaperFigure};

use crate::netns::{self, Pair};
use crate::{fmt_opt, run_forwarded, say, size_name, tail, Ctx};

/// The target segment's id (dma_bench's default is also used by tests).
const TARGET_SEG: &str = "0x0d3b";

/// The paper's figures (Mouzakitis et al., seed 003), as its text gives them.
pub const PAPER: &[(&str, &str)] = &[
    ("setup", "DMA buffer setup: native flat in size; virtualized grows with size, about 31-34 ms at 512 KiB (derived from Fig. 6)"),
    ("single", "single transfer: virtualization overhead at most 7 % (at 512 KiB), below that for larger transfers (Fig. 7)"),
    ("bursts", "1 GiB in bursts: overhead at most about 4 % (at 2 MiB) (Fig. 8)"),
    ("notify", "completion notification forwarded to the guest: 130-140 us"),
    ("calls", "about 3 us per forwarded control call, polled (Figs. 10/11)"),
];

/// dma_bench on a host against the node at `socket` (a co-located target
/// the program makes itself).
pub fn host(ctx: &Ctx, socket: &Path) -> Outcome<DmaBench> {
    let run = || -> Result<DmaBench> {
        let prog = ctx.program(&ctx.bench_dir, "dma_bench")?;
        let tmp = std::env::temp_dir().join(format!("vsci-bench-dma-{}.json", std::process::id()));
        let mut cmd = Command::new(&prog);
        if ctx.quick {
            cmd.arg("-quick");
        }
        cmd.args(["-seg", TARGET_SEG, "-json"]).arg(&tmp);
        cmd.env(vsci_proto::SOCKET_ENV, socket).stdin(Stdio::null()).process_group(0);
        let limit = Duration::from_secs(if ctx.quick { 180 } else { 900 });
        let (st, text) = run_forwarded(cmd, "dma_bench", limit, true)?;
        let v = check(&tmp, st.success(), &text);
        if v.is_ok() {
            let _ = std::fs::remove_file(&tmp);
        }
        v
    };
    Outcome::of(run().inspect_err(|e| say(&format!("!! dma_bench failed: {e:#}"))))
}

/// dma_bench on node 1 of `pair` against a target segment that
/// `dma_bench -owner` holds on node 2; `sections`: dma_bench's `-s`
/// (None: its default, sections a-e).
pub fn remote(ctx: &Ctx, pair: &mut Pair, sections: Option<&str>) -> Outcome<DmaBench> {
    let mut run = || -> Result<DmaBench> {
        let prog = ctx.program(&ctx.bench_dir, "dma_bench")?;
        let owner_log = pair.dir.join("dma_bench-owner.log");
        let mut owner = pair.command(1, &prog);
        let f = std::fs::File::create(&owner_log)?;
        owner.args(["-owner", "-seg", TARGET_SEG]).stdout(f.try_clone()?).stderr(f);
        let h = pair.spawn(owner, "dma_bench -owner")?;
        let ready = (0..300).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            std::fs::read_to_string(&owner_log).is_ok_and(|t| t.contains("OWNER READY"))
        });
        let result = if ready {
            let json_path = pair.dir.join("dma_bench.json");
            let mut cmd = pair.command(0, &prog);
            if ctx.quick {
                cmd.arg("-quick");
            }
            if let Some(s) = sections {
                cmd.args(["-s", s]);
            }
            cmd.args(["-rn", "2", "-seg", TARGET_SEG, "-json"]).arg(&json_path);
            let limit = Duration::from_secs(if ctx.quick { 300 } else { 1200 });
            run_forwarded(cmd, "dma_bench -rn 2", limit, true).map(|(st, text)| (st, text, json_path))
        } else {
            Err(anyhow::anyhow!(
                "dma_bench -owner on node 2 never got ready:\n{}",
                std::fs::read_to_string(&owner_log).unwrap_or_default()
            ))
        };
        netns::stop_child(pair.helper(h), Duration::from_secs(3));
        let (st, text, json_path) = result?;
        check(&json_path, st.success(), &text)
    };
    Outcome::of(run().inspect_err(|e| say(&format!("!! dma_bench (remote) failed: {e:#}"))))
}

/// The lines a guest script runs for dma_bench (`{dma_bench}` stands for
/// the program): its JSON comes back between block markers named `dma_bench`.
pub fn guest_script() -> String {
    format!(
        "{{dma_bench}} -quick -seg {TARGET_SEG} -json /tmp/dma.json > /tmp/dma.txt 2>&1 || st=$?\n\
         cat /tmp/dma.txt >&2\n\
         echo '@@vsci-bench-begin dma_bench'; cat /tmp/dma.json; echo '@@vsci-bench-end'\n"
    )
}

/// dma_bench's JSON from a guest run's output.
pub fn from_guest(text: &str) -> Outcome<DmaBench> {
    let r = match crate::block(text, "dma_bench") {
        Some(s) => {
            schema::from_str::<DmaBench>(&s).map_err(|e| anyhow::anyhow!("dma_bench's JSON in the guest: {e:#}"))
        }
        None => Err(anyhow::anyhow!("dma_bench in the guest wrote no JSON")),
    };
    Outcome::of(r.inspect_err(|e| say(&format!("!! {e:#}"))))
}

/// dma_bench's JSON at `p`, read through the schema; a file that does not
/// fit is kept and named in the error.
fn check(p: &Path, ok: bool, text: &str) -> Result<DmaBench> {
    if !p.exists() {
        bail!("dma_bench wrote no JSON:\n{}", tail(text, 20));
    }
    let v = schema::load_output(p, "dma_bench")?;
    if !ok {
        say("!! dma_bench exited with an error; its figures are kept");
    }
    Ok(v)
}

/// One figure on every path plus how the guest compares with the host.
struct Row {
    what: String,
    unit: &'static str,
    /// Higher is better (bandwidth) or lower (time).
    higher_better: bool,
    host: Option<f64>,
    guest: Option<f64>,
    remote: Option<f64>,
    paper: &'static str,
}

impl Row {
    /// The guest's overhead over the host, the paper's measure: extra time
    /// for the same work, as a fraction of the host's time.
    fn overhead(&self) -> Option<f64> {
        match (self.host, self.guest) {
            (Some(h), Some(g)) if h > 0.0 && g > 0.0 => {
                Some(if self.higher_better { h / g - 1.0 } else { g / h - 1.0 })
            }
            _ => None,
        }
    }
}

/// The DMA figures of the `local`, `guest` and `remote` paths side by side
/// (any of them may be missing), printed; None when none of them ran.
pub fn versus(
    host: Option<&DmaBench>,
    guest: Option<&DmaBench>,
    remote: Option<&DmaBench>,
    accel: Option<&str>,
) -> Option<DmaVersus> {
    let mut out: Vec<Row> = Vec::new();
    let mut add = |what: String,
                   unit: &'static str,
                   higher_better: bool,
                   pick: &dyn Fn(&DmaBench) -> Option<f64>,
                   paper: &'static str| {
        out.push(Row {
            what,
            unit,
            higher_better,
            host: host.and_then(pick),
            guest: guest.and_then(pick),
            remote: remote.and_then(pick),
            paper,
        });
    };
    for (bytes, paper) in [(512u64 << 10, "31-34 ms virtualized (derived); native flat"), (8 << 20, "")] {
        let s = size_name(bytes);
        let setup = move |v: &DmaBench| v.setup.iter().find(|x| x.bytes == bytes).cloned();
        add(format!("buffer setup {s}: create + prepare + map"), "us", false, &|v| setup(v)?.create_map_us, paper);
        add(format!("buffer {s}: first DMA (engine maps it)"), "us", false, &|v| setup(v)?.first_dma_us, "");
        add(format!("buffer {s}: second DMA"), "us", false, &|v| setup(v)?.second_dma_us, "");
    }
    for bytes in [4096u64, 64 << 10, 512 << 10, 2 << 20, 8 << 20] {
        let s = size_name(bytes);
        let paper = if bytes == 512 << 10 {
            "7 % overhead (max, at 512 KiB)"
        } else if bytes > 512 << 10 {
            "< 7 % overhead"
        } else {
            ""
        };
        let single =
            move |v: &DmaBench, dir: &str| v.single.iter().find(|x| x.bytes == bytes && x.dir == dir)?.dma_mbps;
        add(format!("single transfer {s}, write"), "MB/s", true, &|v| single(v, "write"), paper);
        add(format!("single transfer {s}, read"), "MB/s", true, &|v| single(v, "read"), "");
    }
    for bytes in [512u64 << 10, 2 << 20, 8 << 20] {
        let s = size_name(bytes);
        let b = move |v: &DmaBench| v.bursts.iter().find(|x| x.burst_bytes == bytes).cloned();
        let paper = if bytes == 2 << 20 { "~4 % overhead (max, at 2 MiB)" } else { "" };
        add(format!("bursts of {s}, 4 queues in flight"), "MB/s", true, &|v| b(v)?.queues4_mbps, paper);
        add(format!("bursts of {s}, 1 queue"), "MB/s", true, &|v| b(v)?.queue1_mbps, "");
    }
    for (label, how, paper) in [
        ("completion: callback", "callback (SCI_FLAG_USE_CALLBACK)", "130-140 us"),
        ("completion: SCIWaitForDMAQueue(INFINITE)", "SCIWaitForDMAQueue(INFINITE), adaptive", ""),
        ("completion: SCIWaitForDMAQueue(60 s), block", "SCIWaitForDMAQueue(60 s), block", ""),
        ("completion: SCIWaitForDMAQueue(60 s), poll", "SCIWaitForDMAQueue(60 s), poll", ""),
        ("completion: SCIDMAQueueState polling", "SCIDMAQueueState polling", ""),
        ("8-byte transfer with SCI_FLAG_DMA_WAIT", "SCI_FLAG_DMA_WAIT (no notification)", ""),
    ] {
        add(label.into(), "us", false, &|v| v.notify.iter().find(|x| x.how == how)?.median_us, paper);
    }
    for (label, call, paper) in [
        ("call: SCIStartDmaTransfer", "SCIStartDmaTransfer", "~3 us per control call"),
        ("call: SCIDMAQueueState", "SCIDMAQueueState", ""),
        ("call: SCIWaitForDMAQueue on a finished queue", "SCIWaitForDMAQueue (finished queue)", ""),
        ("call: SCICreateDMAQueue + SCIRemoveDMAQueue", "SCICreateDMAQueue + SCIRemoveDMAQueue", ""),
    ] {
        add(label.into(), "us", false, &|v| v.calls.iter().find(|x| x.call == call)?.median_us, paper);
    }
    out.retain(|r| r.host.is_some() || r.guest.is_some() || r.remote.is_some());
    if out.is_empty() {
        return None;
    }
    let accel = accel.unwrap_or("unknown");
    say(&format!("\n== DMA (seed 003): host, guest and remote side by side (guest accelerator {accel}) =="));
    say(&format!("{:<46} {:>14} {:>14} {:>9} {:>14}   {}", "what", "host", "guest", "overhead", "remote", "paper"));
    let cell = |v: Option<f64>, unit: &str| format!("{} {unit}", fmt_opt(v, if unit == "us" { 2 } else { 0 }));
    for r in &out {
        say(&format!(
            "{:<46} {:>14} {:>14} {:>9} {:>14}   {}",
            r.what,
            cell(r.host, r.unit),
            cell(r.guest, r.unit),
            r.overhead().map(|o| format!("{:+.0} %", o * 100.0)).unwrap_or_else(|| "-".into()),
            cell(r.remote, r.unit),
            r.paper
        ));
    }
    let mode = |v: Option<&DmaBench>| v.map(|v| v.mode.clone());
    Some(DmaVersus {
        accelerator: accel.to_string(),
        what: "dma_bench medians on the local path (host processes, co-located target), inside a guest (path guest: the guest's DMA calls run on the node's engine through the guest agent) and on the remote path (target on node 2); overhead = the guest's extra time for the same work over the host's, the paper's measure".into(),
        modes: DmaModes { host: mode(host), guest: mode(guest), remote: mode(remote) },
        paper: PAPER.iter().map(|(k, v)| PaperFigure { section: k.to_string(), figure: v.to_string() }).collect(),
        rows: out
            .iter()
            .map(|r| DmaVersusRow {
                what: r.what.clone(),
                unit: r.unit.into(),
                higher_is_better: r.higher_better,
                host: r.host,
                guest: r.guest,
                remote: r.remote,
                guest_overhead: r.overhead(),
                paper: r.paper.into(),
            })
            .collect(),
    })
}
