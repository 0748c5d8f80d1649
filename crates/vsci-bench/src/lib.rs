//! `vsci bench`: run the benchmark programs on every data path asked for,
//! put each figure next to peers measured in the same run on the same path,
//! and (with `--report DIR`) write JSON, a Markdown report and PNG plots.
//!
//! A *path* is one way two SISCI programs can sit relative to each other
//! (two processes of one node, two nodes in network namespaces, guests).
//! Each path is one entry of [`PATHS`] and one runner function; the runner
//! returns its part of the typed results ([`schema`]), which is what
//! results.json holds and all that the report (`report/`) and the plots read.
//! The `vsci` command parses `vsci bench`'s arguments and calls [`run`].

mod devices;
mod dma;
mod guest;
mod lending;
mod local;
mod netns;
pub mod node;
mod peers;
mod plot;
mod reflective;
mod remote;
mod report;
pub mod schema;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use schema::{Machine, PathResult, Results, Skipped, Units};

pub use peers::Tool;

/// What `vsci bench` was asked to do.
pub struct Options {
    pub quick: bool,
    pub json: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub bench_dir: Option<PathBuf>,
    pub paths: Vec<String>,
    pub install: bool,
    /// Rebuild the report from this results.json instead of measuring.
    pub from_json: Option<PathBuf>,
    /// Remote path: only these remote_bench sections (letters a-j).
    pub sections: Option<String>,
    /// Remote path: sections e, i, j and their UCX peers again under load.
    pub loaded: bool,
    /// Remote path: remote_bench runs in the same namespaces.
    pub repeat: u32,
}

/// One data path. Adding a path (guest↔host, guest↔guest, remote guests)
/// is one more entry in [`PATHS`] plus its runner.
pub struct PathSpec {
    pub name: &'static str,
    pub what: &'static str,
    /// Why the path cannot run on this machine now, if it cannot; the path
    /// is then skipped with that reason instead of failing the run.
    pub unavailable: fn(&Ctx) -> Option<String>,
    /// Progress-bar steps the runner reports through [`step`].
    pub steps: u64,
    /// Peer programs the runner uses; missing ones are installed first.
    pub tools: &'static [Tool],
    pub run: fn(&Ctx) -> Result<PathResult>,
}

/// Every path, in the order they run. The guest paths start their guest
/// ends through `vsci vm run`.
pub const PATHS: &[PathSpec] = &[
    local::PATH,
    remote::PATH,
    reflective::PATH,
    lending::PATH,
    devices::PATH,
    guest::GUEST,
    guest::GUEST_HOST,
    guest::GUEST_GUEST,
    guest::GUEST_REMOTE,
];

/// What every runner gets.
pub struct Ctx {
    pub quick: bool,
    /// Remote path: only these remote_bench sections (checked: letters a-j).
    pub sections: Option<String>,
    /// Remote path: measure sections e, i, j and their UCX peers again with
    /// the CPU oversubscribed.
    pub loaded: bool,
    /// Remote path: remote_bench runs in the same namespaces (at least 1).
    pub repeat: u32,
    /// Directory of `sisci_bench` and `remote_bench`.
    pub bench_dir: PathBuf,
    /// Directory of the example programs (`sendrecv`).
    pub examples_dir: PathBuf,
    /// Peer programs found or installed.
    pub tools: peers::Tools,
}

impl Ctx {
    pub fn program(&self, dir: &Path, name: &str) -> Result<PathBuf> {
        let p = dir.join(name);
        if !p.exists() {
            bail!("{} not found; build it with `make`", p.display());
        }
        Ok(p.canonicalize()?)
    }
}

/// Seed 003's DMA figures of the `local`, `guest` and `remote` paths side by
/// side (None when none of them ran dma_bench).
fn dma_versus(paths: &schema::Paths) -> Option<schema::DmaVersus> {
    dma::versus(
        paths.local.as_ref().and_then(|l| l.dma.ran()),
        paths.guest.as_ref().and_then(|g| g.dma.ran()),
        paths.remote.as_ref().and_then(|r| r.dma.as_ref()?.ran()),
        paths.guest.as_ref().and_then(|g| g.accelerator.as_deref()),
    )
}

/// Results saved before the DMA comparison existed get it.
pub fn with_dma_versus(mut r: Results) -> Results {
    if r.dma.is_none() {
        r.dma = dma_versus(&r.paths);
    }
    r
}

/// Resolve `--paths`: names of [`PATHS`] or `all`.
fn select_paths(names: &[String]) -> Result<Vec<&'static PathSpec>> {
    let mut out: Vec<&'static PathSpec> = Vec::new();
    for n in names {
        let n = n.trim();
        if n == "all" {
            for p in PATHS {
                if !out.iter().any(|q| q.name == p.name) {
                    out.push(p);
                }
            }
            continue;
        }
        match PATHS.iter().find(|p| p.name == n) {
            Some(p) if !out.iter().any(|q| q.name == p.name) => out.push(p),
            Some(_) => {}
            None => {
                let list: Vec<String> = PATHS.iter().map(|p| format!("  {:<12} {}", p.name, p.what)).collect();
                bail!(
                    "unknown path `{n}` in --paths; the paths are:\n{}\n  all          every path above",
                    list.join("\n")
                );
            }
        }
    }
    if out.is_empty() {
        bail!("--paths names no path");
    }
    Ok(out)
}

pub fn run(opts: Options) -> Result<()> {
    let bench_dir = opts.bench_dir.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap_or_default();
        exe.parent().and_then(|p| p.parent()).map(|p| p.join("bench")).unwrap_or_else(|| PathBuf::from("build/bench"))
    });
    let examples_dir =
        bench_dir.parent().map(|p| p.join("examples")).unwrap_or_else(|| PathBuf::from("build/examples"));
    if let Some(f) = &opts.from_json {
        let Some(dir) = &opts.report else { bail!("--from-json needs --report DIR") };
        let out = with_dma_versus(schema::load(f)?);
        for f in write_report(dir, &out, false)? {
            say(&format!("report: wrote {}", f.display()));
        }
        return Ok(());
    }
    let selected = select_paths(&opts.paths)?;
    netns::catch_signals();
    let started = Instant::now();

    if let Some(s) = &opts.sections {
        if s.is_empty() || !s.chars().all(|c| ('a'..='j').contains(&c)) {
            bail!("--sections takes remote_bench section letters a-j (e.g. `h` or `ef`), not {s:?}");
        }
    }
    let mut ctx = Ctx {
        quick: opts.quick,
        sections: opts.sections.clone(),
        loaded: opts.loaded,
        repeat: opts.repeat.max(1),
        bench_dir,
        examples_dir,
        tools: peers::Tools::default(),
    };
    let mut runnable = Vec::new();
    let mut skipped = Vec::new();
    for p in &selected {
        match (p.unavailable)(&ctx) {
            Some(why) => skipped.push(Skipped { path: p.name.into(), reason: why }),
            None => runnable.push(*p),
        }
    }
    if runnable.is_empty() {
        let why: Vec<String> = skipped.iter().map(|s| format!("  {}: {}", s.path, s.reason)).collect();
        bail!("no path asked for can run here:\n{}", why.join("\n"));
    }
    let mut tools: Vec<Tool> = runnable.iter().flat_map(|p| p.tools.iter().copied()).collect();
    tools.sort();
    tools.dedup();
    let total: u64 = 1 + runnable.iter().map(|p| p.steps).sum::<u64>() + u64::from(opts.report.is_some());
    progress_start(total);
    for s in &skipped {
        say(&format!("path {}: skipped: {}", s.path, s.reason));
    }
    step("peers: looking for sockperf, iperf3, ucx_perftest");
    ctx.tools = peers::ensure(&tools, opts.install);

    let machine = machine();
    say(&format!(
        "machine: {} | {} cores | {} | Linux {} | {}",
        machine.cpu, machine.cores, machine.memory, machine.kernel, machine.virtualization,
    ));
    let mut results = schema::Paths::default();
    let mut errors = std::collections::BTreeMap::new();
    for p in &runnable {
        if netns::interrupted() {
            break;
        }
        say(&format!("\n######## path {}: {} ########", p.name, p.what));
        match (p.run)(&ctx) {
            Ok(v) => results.insert(p.name, v),
            Err(e) => {
                say(&format!("!! path {} failed: {e:#}", p.name));
                errors.insert(p.name.to_string(), format!("{e:#}"));
            }
        }
    }
    // The local suite in a guest against the same suite on the host,
    // figure by figure (issue 4).
    let guest_vs_host = match (&results.local, &results.guest) {
        (Some(l), Some(g)) => Some(guest::versus_host(l, g)),
        _ => None,
    };
    // Seed 003's DMA figures, host, guest and remote side by side (issue 5).
    let dma_vs = dma_versus(&results);
    let out = Results {
        benchmark: "vsci bench".into(),
        guest_vs_host,
        dma: dma_vs,
        version: env!("CARGO_PKG_VERSION").into(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: utc_now(),
        elapsed_s: started.elapsed().as_secs_f64(),
        mode: if opts.quick { "quick" } else { "full" }.into(),
        machine,
        paths: results,
        skipped,
        errors: errors.clone(),
        peers: ctx.tools.to_schema(),
        units: Units {
            latency: "microseconds; RTT/2 for ping-pongs and interrupts, one way for store-to-visibility".into(),
            bandwidth: "MB/s (1e6 B/s)".into(),
            transfer: "milliseconds from the first store to the last ack".into(),
            ratio: "vsci / peer, vsci / limit".into(),
        },
    };
    if let Some(j) = &opts.json {
        write_file(j, &(serde_json::to_string_pretty(&out)? + "\n"))?;
        say(&format!("json written to {}", j.display()));
    }
    if let Some(dir) = &opts.report {
        step("report: Markdown, JSON and plots");
        let files = write_report(dir, &out, true)?;
        for f in files {
            say(&format!("report: wrote {}", f.display()));
        }
    }
    progress_finish();
    netns::check_interrupted()?;
    if !errors.is_empty() {
        bail!("{} path(s) failed: {}", errors.len(), errors.keys().cloned().collect::<Vec<_>>().join(", "));
    }
    Ok(())
}

/// `DIR/benchmarks.md`, `DIR/bench/results.{json,txt}`, `DIR/bench/*.png`.
/// `transcript`: also write what this run printed (not when the report is
/// rebuilt from a saved JSON).
fn write_report(dir: &Path, out: &Results, with_transcript: bool) -> Result<Vec<PathBuf>> {
    let sub = dir.join("bench");
    std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
    let mut files = Vec::new();
    let j = sub.join("results.json");
    if with_transcript {
        write_file(&j, &(serde_json::to_string_pretty(out)? + "\n"))?;
        files.push(j);
    }
    if with_transcript {
        let t = sub.join("results.txt");
        write_file(&t, &transcript())?;
        files.push(t);
    }
    let plots = match plot::write_all(&sub, out) {
        Ok(p) => p,
        Err(e) => {
            say(&format!("!! plots not written: {e:#}"));
            Vec::new()
        }
    };
    let md = dir.join("benchmarks.md");
    let names: Vec<String> =
        plots.iter().filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
    write_file(&md, &report::markdown(out, &names))?;
    files.push(md);
    files.extend(plots);
    Ok(files)
}

fn write_file(p: &Path, text: &str) -> Result<()> {
    std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))
}

// ---------------------------------------------------------------------------
// Progress and output: every line the run prints goes through `say`, which
// keeps the progress bar (stderr) intact and records a transcript for the
// report.

struct Progress {
    bar: ProgressBar,
    transcript: Mutex<String>,
    step_name: Mutex<String>,
}

static PROGRESS: OnceLock<Progress> = OnceLock::new();

fn progress() -> &'static Progress {
    PROGRESS.get_or_init(|| Progress {
        bar: ProgressBar::hidden(),
        transcript: Mutex::new(String::new()),
        step_name: Mutex::new(String::new()),
    })
}

fn progress_start(len: u64) {
    let p = progress();
    // Drawn only when stderr is a terminal; a redirected run gets plain text.
    p.bar.set_draw_target(ProgressDrawTarget::stderr());
    p.bar.set_length(len);
    if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] [{bar:24}] {pos}/{len} {wide_msg}") {
        p.bar.set_style(style.progress_chars("=> "));
    }
    p.bar.enable_steady_tick(Duration::from_millis(200));
}

fn progress_finish() {
    progress().bar.finish_and_clear();
}

/// Print a line to stdout (above the bar) and keep it for results.txt.
pub fn say(line: &str) {
    let p = progress();
    p.bar.suspend(|| println!("{line}"));
    if let Ok(mut t) = p.transcript.lock() {
        t.push_str(line);
        t.push('\n');
    }
}

/// Print a line to stderr (above the bar); not part of the transcript.
pub fn say_err(line: &str) {
    progress().bar.suspend(|| eprintln!("{line}"));
}

/// Start the next progress step.
pub fn step(name: &str) {
    let p = progress();
    if let Ok(mut s) = p.step_name.lock() {
        if !s.is_empty() {
            p.bar.inc(1);
        }
        *s = name.to_string();
    }
    p.bar.set_message(name.to_string());
}

/// Show what the current step is doing (the last line of a benchmark).
fn status(line: &str) {
    let p = progress();
    let name = p.step_name.lock().map(|s| s.clone()).unwrap_or_default();
    let line: String = line.trim().chars().take(70).collect();
    p.bar.set_message(format!("{name}: {line}"));
}

fn transcript() -> String {
    progress().transcript.lock().map(|t| t.clone()).unwrap_or_default()
}

/// A file a guest prints between `BLOCK_BEGIN NAME` and `BLOCK_END`.
pub const BLOCK_BEGIN: &str = "@@vsci-bench-begin ";
pub const BLOCK_END: &str = "@@vsci-bench-end";

/// The text a program printed between `BLOCK_BEGIN name` and `BLOCK_END`.
pub fn block(text: &str, name: &str) -> Option<String> {
    let start = format!("{BLOCK_BEGIN}{name}");
    let mut out = String::new();
    let mut inside = false;
    for l in text.lines() {
        if l.trim_end() == start {
            inside = true;
        } else if inside && l.starts_with(BLOCK_END) {
            return Some(out);
        } else if inside {
            out.push_str(l);
            out.push('\n');
        }
    }
    None
}

/// Forwards a child's stdout (through [`say`]) and stderr (through
/// [`say_err`]) line by line and keeps both for the caller.
pub struct Forward {
    pub text: Arc<Mutex<String>>,
    threads: Vec<JoinHandle<()>>,
}

impl Forward {
    /// `echo`: also print the lines (benchmarks) or only keep them (peers
    /// whose output we parse and summarise).
    pub fn start(child: &mut Child, echo: bool) -> Forward {
        let text = Arc::new(Mutex::new(String::new()));
        let mut threads = Vec::new();
        fn pump<R: Read + Send + 'static>(r: R, text: Arc<Mutex<String>>, echo: bool, err: bool) -> JoinHandle<()> {
            std::thread::spawn(move || {
                // A guest passes files (JSON) back through its stdout
                // between these markers; keep them, do not print them.
                let mut hide = false;
                for line in BufReader::new(r).lines() {
                    let Ok(line) = line else { break };
                    let marker = line.starts_with(BLOCK_BEGIN) || line.starts_with(BLOCK_END);
                    if line.starts_with(BLOCK_BEGIN) {
                        hide = true;
                    }
                    if echo && !hide && !marker {
                        if err {
                            say_err(&line);
                        } else {
                            say(&line);
                        }
                    }
                    if !line.trim().is_empty() && !hide {
                        status(&line);
                    }
                    if line.starts_with(BLOCK_END) {
                        hide = false;
                    }
                    if let Ok(mut t) = text.lock() {
                        t.push_str(&line);
                        t.push('\n');
                    }
                }
            })
        }
        if let Some(o) = child.stdout.take() {
            threads.push(pump(o, text.clone(), echo, false));
        }
        if let Some(e) = child.stderr.take() {
            threads.push(pump(e, text.clone(), echo, true));
        }
        Forward { text, threads }
    }

    pub fn contains(&self, s: &str) -> bool {
        self.text.lock().map(|t| t.contains(s)).unwrap_or(false)
    }

    /// Wait for the pipes to close and return everything.
    pub fn finish(self) -> String {
        for t in self.threads {
            let _ = t.join();
        }
        self.text.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// Run a command with its output piped through [`Forward`]; kill it after
/// `timeout` or on a signal.
pub fn run_forwarded(mut cmd: Command, what: &str, timeout: Duration, echo: bool) -> Result<(ExitStatus, String)> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    let fwd = Forward::start(&mut child, echo);
    let st = netns::wait_child(&mut child, timeout, what);
    let text = fwd.finish();
    Ok((st?, text))
}

// ---------------------------------------------------------------------------
// The machine

fn read(p: &str) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// CPU, cores, memory, kernel and what a guest would run on.
fn machine() -> Machine {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.split_whitespace().collect())
        .unwrap_or_default();
    let hw_virt = flags.iter().any(|f| *f == "vmx" || *f == "svm");
    let under_hv = flags.contains(&"hypervisor");
    let kvm_dev = Path::new("/dev/kvm").exists();
    let accel = if hw_virt && kvm_dev {
        "guests would run under KVM (CPU has vmx/svm, /dev/kvm present)".to_string()
    } else if kvm_dev {
        "guests would run under TCG: /dev/kvm exists but the CPU flags show no vmx/svm (nested PVM KVM, where stock guest kernels hang)".to_string()
    } else {
        "guests would run under TCG (no /dev/kvm)".to_string()
    };
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let uts = nix::sys::utsname::uname().ok();
    let kernel = uts.as_ref().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    let host = uts.as_ref().map(|u| u.nodename().to_string_lossy().into_owned()).unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    Machine {
        cpu,
        cores: cores as u64,
        memory: format!("{:.0} GiB", mem_kib as f64 / (1024.0 * 1024.0)),
        kernel,
        hostname: host,
        under_hypervisor: under_hv,
        virtualization: format!("{}{}", if under_hv { "this machine is itself a VM; " } else { "bare metal; " }, accel),
    }
}

/// ISO 8601 UTC, without a date crate.
fn utc_now() -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

// ---------------------------------------------------------------------------
// Small helpers shared by the runners

pub fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "-".into(),
    }
}

pub fn size_name(s: u64) -> String {
    if s >= 1 << 30 && s.is_multiple_of(1 << 30) {
        format!("{} GiB", s >> 30)
    } else if s >= 1 << 20 && s.is_multiple_of(1 << 20) {
        format!("{} MiB", s >> 20)
    } else if s >= 1024 && s.is_multiple_of(1024) {
        format!("{} KiB", s >> 10)
    } else {
        format!("{s} B")
    }
}

/// The last `n` lines of a text.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].iter().map(|l| format!("{l}\n")).collect()
}

/// Remove terminal colour sequences.
pub fn strip_ansi(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_selected_by_name_and_all() {
        let names = |v: &[&str]| {
            select_paths(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .map(|p| p.iter().map(|p| p.name).collect::<Vec<_>>())
        };
        assert_eq!(names(&["local"]).unwrap(), ["local"]);
        assert_eq!(names(&["remote", "local", "remote"]).unwrap(), ["remote", "local"]);
        assert_eq!(names(&["all"]).unwrap(), PATHS.iter().map(|p| p.name).collect::<Vec<_>>());
        let e = names(&["local", "moon"]).unwrap_err().to_string();
        assert!(e.contains("unknown path `moon`") && e.contains("remote"), "{e}");
    }

    #[test]
    fn utc_now_looks_like_iso_8601() {
        let t = utc_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z') && &t[4..5] == "-" && &t[10..11] == "T", "{t}");
    }
}
