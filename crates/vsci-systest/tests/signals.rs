//! Remote maps in programs that handle their own fault signals (issue 33),
//! across two nodes, each vscid in its own network namespace (netns/mod.rs).
//!
//! A store into a map of another node's segment is trapped by libsisci and
//! shipped to the owner. Whatever a program does with SIGSEGV and SIGBUS,
//! every such store must arrive, `sigaction` must report what the program
//! installed, and a fault of the program's own must behave exactly as it
//! would without libsisci: its handler runs, or the default action kills
//! the process with that signal (and a core where the kernel dumps one).
//!
//! - the matrix: tests/c/t_sigchain.c's rows (one test each), every row of
//!   issue 33's list
//!   10,000 counter stores with SCIFlush after each and 10,000 with no call
//!   at all, each acknowledged by the owner (t_sigchain owner, on the other
//!   node) before the next, then the report-back check, then the program's
//!   own fault (a NULL write, or a store past the end of a file mapping for
//!   the SIGBUS rows); t_sigchain_static (libsisci.a) and t_sigchain_dlopen
//!   (no libsisci at link time: dlopen RTLD_LOCAL after its handlers) are
//!   the same source built two more ways (Makefile); further rows (a nested
//!   own SIGBUS with and without SA_NODEFER, syscall(SYS_rt_sigaction),
//!   a signalfd, sysv_signal/sigset, handlers changed by one thread while
//!   two store, every signal blocked, SIGBUS raised by the program itself)
//!   with 2,000 stores per phase;
//! - a program that handles signals as GASNet's gasnet_attach does, then a
//!   10,000-round-trip ping-pong over remote maps (tests/c/t_gasnet_like.c);
//! - Python with faulthandler enabled, libsisci loaded by ctypes
//!   (tests/python/faulthandler_remote.py);
//! - rows handlers_after_map and signal_save_restore run by a program in a
//!   QEMU guest attached to node 2 (`vsci vm run`; 200 stores per phase
//!   under TCG, 2,000 under KVM), against owners on node 1 (guest_rows).
//!
//! Every wait inside the programs has a deadline, so a lost store fails the
//! test with the value and slot instead of hanging; dropping the Cluster
//! removes its namespaces and processes. One test at a time (SERIAL): the
//! programs spin and the machines have 2 cores. Needs root for `ip netns`;
//! without it every test prints SKIPPED and passes. Run after `make`:
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test signals -- --test-threads=1

mod common;
mod netns;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use netns::Cluster;

/// Stores per phase (with SCIFlush, then without any call) of every row of
/// issue 33's matrix.
const STORES: u32 = 10_000;
/// Stores per phase of the further rows (nested faults, raw syscall,
/// signalfd, sysv_signal), which are about the program's own signals.
const EXTRA_STORES: u32 = 2_000;
/// The owner's deadline for each value (seconds without progress).
const OWNER_WAIT_S: &str = "60";
/// The writer waits longer, so that a lost store is reported by the owner.
const WRITER_WAIT_S: &str = "90";
/// Bound on one program (a hang beyond its own deadlines fails the test).
const RUN: Duration = Duration::from_secs(300);
/// Round trips of the GASNet-like ping-pong.
const GASNET_ROUNDS: &str = "10000";
/// Stores of each Python run.
const PY_STORES: &str = "1000";

const OWNER_SEG: &str = "0x5901";
const WRITER_SEG: &str = "0x5902";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a row's own fault must end.
#[derive(Clone, Copy, Debug)]
enum End {
    /// Its handler ran: these lines were printed and it called _exit(42).
    Handled(&'static [&'static str]),
    /// These lines were printed (its handler ran), then the process died of
    /// the signal (SA_RESETHAND: the second fault takes the default action).
    HandledThenDies(&'static [&'static str], i32),
    /// No handler of the program runs; the process dies of the signal.
    Dies(i32),
}

/// Wait for `p` until `timeout`; then kill it. Never panics.
fn finish(mut p: Proc, timeout: Duration) -> (Output, bool) {
    let deadline = Instant::now() + timeout;
    let mut killed = false;
    while p.try_wait().is_none() {
        if Instant::now() > deadline {
            p.signal(libc::SIGKILL);
            killed = true;
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    (p.wait(Duration::from_secs(20)), killed)
}

fn sig_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        _ => "another signal",
    }
}

/// Whether a process that dies of SIGSEGV in `dir`, with its core limit
/// raised to the hard limit as the writers raise theirs, dumps core here
/// (core_pattern and limits are the host's): what the writers' deaths are
/// compared with.
fn cores_dumped_here(dir: &Path) -> bool {
    let st = Command::new("sh")
        .args(["-c", "ulimit -S -c \"$(ulimit -H -c)\" 2>/dev/null; kill -SEGV $$"])
        .current_dir(dir)
        .status()
        .expect("run sh");
    assert_eq!(st.signal(), Some(libc::SIGSEGV), "the control shell did not die of SIGSEGV: {st:?}");
    remove_cores(dir);
    st.core_dumped()
}

fn remove_cores(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("core") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Check one program's end against `end`; push what is wrong onto `bad`.
fn check_end(o: &Output, killed: bool, end: End, core_expected: bool, bad: &mut Vec<String>) {
    let all = format!("{}{}", o.stdout, o.stderr);
    if killed {
        bad.push(format!("{} did not end within {RUN:?} and was killed", o.name));
        return;
    }
    let lines: &[&str] = match end {
        End::Handled(l) | End::HandledThenDies(l, _) => l,
        End::Dies(_) => &[],
    };
    for l in lines {
        if !all.contains(l) {
            bad.push(format!("its own fault: no \"{l}\" in its output (its handler did not run as it asked)"));
        }
    }
    match end {
        End::Handled(_) => {
            if o.status.code() != Some(42) {
                bad.push(format!(
                    "its own fault: its handler should have ended it with _exit(42); it ended with {}",
                    describe_status(o.status)
                ));
            }
        }
        End::HandledThenDies(_, sig) | End::Dies(sig) => {
            if matches!(end, End::Dies(_))
                && (all.contains("OWN SIGSEGV HANDLED") || all.contains("OWN SIGBUS HANDLED"))
            {
                bad.push("its own fault reached a handler; nothing of the program's should have run".into());
            }
            if o.status.signal() != Some(sig) {
                bad.push(format!(
                    "its own fault should have killed it with {} ({sig}), as without libsisci; it ended with {}",
                    sig_name(sig),
                    describe_status(o.status)
                ));
            } else if core_expected && !o.status.core_dumped() {
                bad.push(format!(
                    "it died of {} but dumped no core, where a process killed by {} here does (the default action, \
                     re-raised by libsisci, must be the kernel's own)",
                    sig_name(sig),
                    sig_name(sig)
                ));
            }
        }
    }
}

/// One row of the matrix: t_sigchain owner on node 1, `bin` writer --row
/// `row` on node 2 (in the cluster's directory, for its core).
fn row(row: &str, bin: &str, slots: u32, end: End, env: &[(&str, &str)]) {
    row_with(row, bin, slots, STORES, end, env)
}

fn row_with(row: &str, bin: &str, slots: u32, stores: u32, end: End, env: &[(&str, &str)]) {
    let _g = serial();
    let Some(c) = Cluster::start(&[1, 2]) else { return };
    let dir = c.dir.path.clone();
    let core_expected = cores_dumped_here(&dir);
    let extra = u32::from(row == "bus_adrerr"); // the store made by its SIGBUS handler
    let total = (2 * stores + extra).to_string();
    let slots_s = slots.to_string();
    let writer_target = format!("2:{WRITER_SEG}");
    let owner_target = format!("1:{OWNER_SEG}");

    let mut ocmd = c.client(1, &built("tests/t_sigchain"));
    ocmd.args(["-wait", OWNER_WAIT_S, "owner", OWNER_SEG, &writer_target, &slots_s, &total]);
    let owner = Proc::spawn(&format!("t_sigchain owner (node 1, for row {row})"), &mut ocmd);

    let stores = stores.to_string();
    let mut wcmd = c.client(2, &built(bin));
    wcmd.args([
        "-wait",
        WRITER_WAIT_S,
        "writer",
        "--row",
        row,
        "--stores",
        &stores,
        "--core",
        &owner_target,
        WRITER_SEG,
    ])
    .current_dir(&dir)
    .envs(env.iter().copied());
    let writer = Proc::spawn(
        &format!(
            "{} writer --row {row} (node 2{})",
            bin.trim_start_matches("tests/"),
            if env.is_empty() { String::new() } else { format!(", {env:?}") }
        ),
        &mut wcmd,
    );

    let (wout, wkilled) = finish(writer, RUN);
    // The owner finishes right after the last store arrives; if the writer
    // never got that far, the owner has nothing left to wait for.
    let stores_done = wout.stdout.contains("WRITER STORES DONE");
    let (oout, okilled) = finish(owner, if stores_done || wkilled { RUN } else { Duration::from_secs(5) });
    remove_cores(&dir);

    let mut bad = Vec::new();
    let wall = format!("{}{}", wout.stdout, wout.stderr);
    if let Some(l) = wall.lines().find(|l| l.contains("UNEXPECTED")) {
        bad.push(format!("a signal reached the program before its own fault: {l}"));
    }
    if !oout.status.success() || !oout.stdout.contains("OWNER DONE") {
        let why = oout.stderr.lines().find(|l| l.contains("t_sigchain.c")).unwrap_or("");
        bad.push(format!(
            "not every store arrived: the owner ended with {}{} {why}",
            describe_status(oout.status),
            if okilled { " (killed: the writer had stopped storing)" } else { "" }
        ));
    }
    if !stores_done {
        bad.push("the writer did not finish its stores".into());
    }
    for l in wall.lines().filter(|l| l.contains("REPORT-BACK MISMATCH")) {
        bad.push(format!("what the program is told is not what it installed: {l}"));
    }
    if stores_done && !wall.contains("REPORT-BACK OK") {
        bad.push("no REPORT-BACK OK".into());
    }
    if stores_done {
        check_end(&wout, wkilled, end, core_expected, &mut bad);
    }
    let timing: Vec<&str> = wout
        .stdout
        .lines()
        .filter(|l| ["THREAD ", "WRITER STORES DONE", "ASYNC"].iter().any(|p| l.starts_with(p)))
        .collect();
    if !bad.is_empty() {
        panic!(
            "row {row}: {} problem(s):\n  - {}\n\n{}\n\n{}\n\n(a process killed by SIGSEGV here {} core)",
            bad.len(),
            bad.join("\n  - "),
            wout.describe(),
            oout.describe(),
            if core_expected { "dumps" } else { "dumps no" }
        );
    }
    eprintln!("row {row}: every store arrived, report-back OK, own fault as without libsisci; {}", timing.join("; "));
    c.wait_clean(1, &format!("after row {row}"));
    c.wait_clean(2, &format!("after row {row}"));
}

#[test]
fn handlers_after_map() {
    row(
        "handlers_after_map",
        "tests/t_sigchain",
        1,
        End::Handled(&["OWN SIGSEGV HANDLED row=handlers_after_map signo=11 si_code=1 si_addr=(nil)"]),
        &[],
    );
}

#[test]
fn handlers_before_map() {
    row(
        "handlers_before_map",
        "tests/t_sigchain",
        1,
        End::Handled(&["OWN SIGSEGV HANDLED row=handlers_before_map signo=11 si_code=1 si_addr=(nil)"]),
        &[],
    );
}

/// SA_RESETHAND on both: libsisci's traps must not use up the program's
/// one-shot handler; the first own fault runs it, the second (the handler
/// returns and the write faults again) takes the default action.
#[test]
fn resethand() {
    row(
        "resethand",
        "tests/t_sigchain",
        1,
        End::HandledThenDies(
            &["OWN SIGSEGV HANDLED row=resethand signo=11 si_code=1 si_addr=(nil)", "OWN SIGSEGV HANDLER RETURNS"],
            libc::SIGSEGV,
        ),
        &[],
    );
}

/// signal() handlers, and signal() save/restore around every 100 stores.
#[test]
fn signal_save_restore() {
    row(
        "signal_save_restore",
        "tests/t_sigchain",
        1,
        End::Handled(&["OWN SIGSEGV HANDLED row=signal_save_restore signo=11 (a handler without SA_SIGINFO)"]),
        &[],
    );
}

/// The storing thread blocks SIGSEGV and SIGBUS: its stores still arrive,
/// its mask reads back as it set it, and its own (synchronous) SIGSEGV
/// kills it, as the kernel does with a blocked synchronous fault.
#[test]
fn blocked() {
    row("blocked", "tests/t_sigchain", 1, End::Dies(libc::SIGSEGV), &[]);
}

/// sigaltstack + SA_ONSTACK handlers; every 10th store made by a SIGUSR1
/// handler running on the alternate stack; the own fault's handler runs on
/// the alternate stack.
#[test]
fn altstack() {
    row(
        "altstack",
        "tests/t_sigchain",
        1,
        End::Handled(&[
            "OWN SIGSEGV HANDLED row=altstack signo=11 si_code=1 si_addr=(nil) on_altstack=1",
            "all on the alternate stack",
        ]),
        &[],
    );
}

#[test]
fn sig_ign() {
    row("sig_ign", "tests/t_sigchain", 1, End::Dies(libc::SIGSEGV), &[]);
}

/// Handlers first, then libsisci by dlopen(RTLD_NOW | RTLD_LOCAL): loading
/// it must leave the program's handlers in place.
#[test]
fn dlopen() {
    row(
        "dlopen",
        "tests/t_sigchain_dlopen",
        1,
        End::Handled(&["OWN SIGSEGV HANDLED row=dlopen signo=11 si_code=1 si_addr=(nil)"]),
        &[],
    );
}

#[test]
fn four_threads() {
    row(
        "four_threads",
        "tests/t_sigchain",
        4,
        End::Handled(&["OWN SIGSEGV HANDLED row=four_threads signo=11 si_code=1 si_addr=(nil)"]),
        &[],
    );
}

/// Linked with libsisci.a.
#[test]
fn static_link() {
    row(
        "static",
        "tests/t_sigchain_static",
        1,
        End::Handled(&["OWN SIGSEGV HANDLED row=static signo=11 si_code=1 si_addr=(nil)"]),
        &[],
    );
}

/// The baseline: nothing installed.
#[test]
fn no_handlers() {
    row("no_handlers", "tests/t_sigchain", 1, End::Dies(libc::SIGSEGV), &[]);
}

/// A SIGBUS of the program's own (a store past the end of a file mapping)
/// reaches its SA_SIGINFO handler with BUS_ADRERR and the address; a remote
/// store made inside that handler (SIGBUS blocked there, as the program
/// asked) arrives too.
#[test]
fn bus_adrerr() {
    row(
        "bus_adrerr",
        "tests/t_sigchain",
        1,
        End::Handled(&[
            "OWN SIGBUS HANDLED row=bus_adrerr signo=7 si_code=2 (BUS_ADRERR)",
            "(the page past the file's end)",
            "STORE FROM SIGBUS HANDLER ARRIVED",
        ]),
        &[],
    );
}

/// Nothing installed; the program's own SIGBUS takes the default action.
#[test]
fn bus_dfl() {
    row("bus_dfl", "tests/t_sigchain", 1, End::Dies(libc::SIGBUS), &[]);
}

/// SIG_IGN for both; the program's own SIGBUS (synchronous, so the kernel
/// would not ignore it) kills it.
#[test]
fn sig_ign_bus() {
    row("sig_ign_bus", "tests/t_sigchain", 1, End::Dies(libc::SIGBUS), &[]);
}

/// handlers_after_map with the trap forced to the handler thread
/// (VSCI_TRAP=thread) in a program that links libsisci.
#[test]
fn handlers_after_map_thread_trap() {
    row(
        "handlers_after_map",
        "tests/t_sigchain",
        1,
        End::Handled(&["OWN SIGSEGV HANDLED row=handlers_after_map signo=11 si_code=1 si_addr=(nil)"]),
        &[("VSCI_TRAP", "thread")],
    );
}

// ---- a GASNet-like program ------------------------------------------------------------

/// Handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT with signal()
/// that print and re-raise, signal() save/restore around a backtrace (after
/// mapping and every 1,000 rounds), then 10,000 round trips of a ping-pong
/// over remote maps. Then ping makes a NULL write: its handler prints and
/// re-raises, and it dies of SIGSEGV, as GASNet's does.
#[test]
fn gasnet_like_pingpong() {
    let _g = serial();
    let Some(c) = Cluster::start(&[1, 2]) else { return };
    let dir = c.dir.path.clone();
    let core_expected = cores_dumped_here(&dir);
    let bin = built("tests/t_gasnet_like");
    let mut pcmd = c.client(2, &bin);
    pcmd.args(["-wait", OWNER_WAIT_S, "pong", GASNET_ROUNDS, "0x5911", "1:0x5910"]);
    let pong = Proc::spawn("t_gasnet_like pong (node 2)", &mut pcmd);
    let mut icmd = c.client(1, &bin);
    icmd.args(["-wait", OWNER_WAIT_S, "ping", GASNET_ROUNDS, "0x5910", "2:0x5911", "fault"]).current_dir(&dir);
    let ping = Proc::spawn("t_gasnet_like ping (node 1)", &mut icmd);
    let (iout, ikilled) = finish(ping, RUN);
    let (pout, pkilled) = finish(pong, if iout.stdout.contains("DONE") { RUN } else { Duration::from_secs(5) });
    remove_cores(&dir);
    let mut bad = Vec::new();
    for (o, side) in [(&iout, "ping"), (&pout, "pong")] {
        let all = format!("{}{}", o.stdout, o.stderr);
        if !o.stdout.contains(&format!("GASNET {side} DONE round_trips={GASNET_ROUNDS}")) {
            bad.push(format!("{side} did not finish its {GASNET_ROUNDS} round trips"));
        }
        if let Some(l) = all.lines().find(|l| l.contains("during the run")) {
            bad.push(format!("{side}: a fatal signal reached the program's handler during the run: {l}"));
        }
        for l in all.lines().filter(|l| l.contains("REPORT-BACK MISMATCH")) {
            bad.push(format!("{side}: {l}"));
        }
        if o.stdout.contains("DONE round_trips") && !o.stdout.contains("GASNET REPORT-BACK OK") {
            bad.push(format!("{side}: no GASNET REPORT-BACK OK"));
        }
    }
    if pkilled || !pout.status.success() {
        bad.push(format!("pong ended with {}{}", describe_status(pout.status), if pkilled { " (killed)" } else { "" }));
    }
    if iout.stdout.contains("DONE round_trips") {
        check_end(
            &iout,
            ikilled,
            End::HandledThenDies(
                &["*** Caught a fatal signal: SIGSEGV(11) on node 0/2 (the program's own fault)"],
                libc::SIGSEGV,
            ),
            core_expected,
            &mut bad,
        );
    }
    if !bad.is_empty() {
        panic!(
            "GASNet-like ping-pong: {} problem(s):\n  - {}\n\n{}\n\n{}",
            bad.len(),
            bad.join("\n  - "),
            iout.describe(),
            pout.describe()
        );
    }
    let line = iout.stdout.lines().find(|l| l.contains("GASNET ping DONE")).unwrap_or_default();
    eprintln!("GASNet-like ping-pong: {line}");
    c.wait_clean(1, "after the GASNet-like ping-pong");
    c.wait_clean(2, "after the GASNet-like ping-pong");
}

// ---- Python with faulthandler ----------------------------------------------------------

fn python_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/faulthandler_remote.py")
}

fn have_python() -> bool {
    Command::new("python3").args(["-c", "import ctypes, faulthandler"]).status().map(|s| s.success()).unwrap_or(false)
}

/// python3 with faulthandler enabled before libsisci is loaded (ctypes:
/// dlopen RTLD_LOCAL): 1,000 stores through a ctypes pointer into a remote
/// map arrive (half with SCIFlush, half without a call), and a NULL read
/// afterwards reaches faulthandler ("Fatal Python error: Segmentation
/// fault"), which re-raises: the process dies of SIGSEGV. Then the same with
/// faulthandler disabled and enabled again after the map.
#[test]
fn python_faulthandler() {
    let _g = serial();
    if !have_python() {
        eprintln!("SKIPPED: no python3 with ctypes and faulthandler");
        return;
    }
    let Some(c) = Cluster::start(&[1, 2]) else { return };
    let dir = c.dir.path.clone();
    let core_expected = cores_dumped_here(&dir);
    let lib = built("lib/libsisci.so");
    let script = python_script();
    let mut bad = Vec::new();
    let mut outs = Vec::new();
    for (k, mode) in ["", "reenable"].iter().enumerate() {
        let oseg = format!("0x{:x}", 0x5920 + 2 * k);
        let wseg = format!("0x{:x}", 0x5921 + 2 * k);
        let mut ocmd = c.client(1, &built("tests/t_sigchain"));
        ocmd.args(["-wait", OWNER_WAIT_S, "owner", &oseg, &format!("2:{wseg}"), "1", PY_STORES]);
        let owner = Proc::spawn(&format!("t_sigchain owner (node 1, for python {mode})"), &mut ocmd);
        let mut pcmd = c.client(2, Path::new("python3"));
        pcmd.arg(&script).args(["--wait", WRITER_WAIT_S]).arg(&lib).args([&format!("1:{oseg}"), &wseg, PY_STORES]);
        if !mode.is_empty() {
            pcmd.arg(mode);
        }
        pcmd.arg("fault").current_dir(&dir);
        let py = Proc::spawn(&format!("faulthandler_remote.py {mode} (node 2)"), &mut pcmd);
        let (pout, pkilled) = finish(py, RUN);
        let done = pout.stdout.contains(&format!("PY STORES DONE stores={PY_STORES}"));
        let (oout, okilled) = finish(owner, if done { RUN } else { Duration::from_secs(5) });
        remove_cores(&dir);
        let tag = if mode.is_empty() {
            "faulthandler enabled before loading libsisci"
        } else {
            "faulthandler enabled again after the map"
        };
        if !oout.status.success() || !oout.stdout.contains("OWNER DONE") {
            bad.push(format!(
                "{tag}: not every store arrived (the owner ended with {}{})",
                describe_status(oout.status),
                if okilled { ", killed" } else { "" }
            ));
        }
        if !done {
            bad.push(format!("{tag}: python did not finish its stores"));
        } else {
            let mut b = Vec::new();
            check_end(
                &pout,
                pkilled,
                End::HandledThenDies(&["Fatal Python error: Segmentation fault"], libc::SIGSEGV),
                core_expected,
                &mut b,
            );
            bad.extend(b.into_iter().map(|s| format!("{tag}: {s}")));
        }
        outs.push(pout);
        outs.push(oout);
    }
    if !bad.is_empty() {
        let all: Vec<String> = outs.iter().map(|o| o.describe()).collect();
        panic!(
            "python with faulthandler: {} problem(s):\n  - {}\n\n{}",
            bad.len(),
            bad.join("\n  - "),
            all.join("\n\n")
        );
    }
    c.wait_clean(1, "after the python runs");
    c.wait_clean(2, "after the python runs");
}

// ---- further rows: the program's own signals, exactly as without libsisci ------------------

/// The program's own SIGBUS handler (no SA_NODEFER) makes the same fault
/// again: SIGBUS is blocked inside it, so the kernel kills the process with
/// SIGBUS (the handler does not run nested).
#[test]
fn bus_nested() {
    row_with(
        "bus_nested",
        "tests/t_sigchain",
        1,
        EXTRA_STORES,
        End::HandledThenDies(
            &[
                "OWN SIGBUS HANDLED row=bus_nested signo=7 si_code=2 (BUS_ADRERR)",
                "depth=0",
                "A SECOND OWN SIGBUS INSIDE THE HANDLER",
            ],
            libc::SIGBUS,
        ),
        &[],
    );
}

/// The same with SA_NODEFER: the handler runs again, nested.
#[test]
fn bus_nested_nodefer() {
    row_with(
        "bus_nested_nodefer",
        "tests/t_sigchain",
        1,
        EXTRA_STORES,
        End::Handled(&["NESTED OWN SIGBUS HANDLED row=bus_nested_nodefer signo=7 si_code=2 (BUS_ADRERR)", "depth=1"]),
        &[],
    );
}

/// Handlers installed and read back with syscall(SYS_rt_sigaction).
#[test]
fn raw_syscall() {
    row_with(
        "raw_syscall",
        "tests/t_sigchain",
        1,
        EXTRA_STORES,
        End::Handled(&["OWN SIGSEGV HANDLED row=raw_syscall signo=11 si_code=1 si_addr=(nil)"]),
        &[],
    );
}

/// SIGSEGV + SIGBUS blocked with sigprocmask and read from a signalfd:
/// nothing of libsisci's shows up there; the own SIGSEGV kills.
#[test]
fn signalfd_blocked() {
    row_with("signalfd_blocked", "tests/t_sigchain", 1, EXTRA_STORES, End::Dies(libc::SIGSEGV), &[]);
}

/// sysv_signal(SIGSEGV, h) and sigset(SIGBUS, h).
#[test]
fn sysv_signal() {
    row_with(
        "sysv_signal",
        "tests/t_sigchain",
        1,
        EXTRA_STORES,
        End::Handled(&["OWN SIGSEGV HANDLED row=sysv_signal signo=11 (a handler without SA_SIGINFO)"]),
        &[],
    );
}

/// Two threads store while the main thread installs, reads back, saves and
/// restores SIGBUS/SIGSEGV handlers and blocks/unblocks SIGBUS in a loop.
#[test]
fn racing_installs() {
    row_with(
        "racing_installs",
        "tests/t_sigchain",
        2,
        EXTRA_STORES,
        End::Handled(&["OWN SIGSEGV HANDLED row=racing_installs signo=11 si_code=1 si_addr=(nil)"]),
        &[],
    );
}

/// The storing thread blocks every signal (sigfillset, SIG_SETMASK).
#[test]
fn fillset_blocked() {
    row_with("fillset_blocked", "tests/t_sigchain", 1, EXTRA_STORES, End::Dies(libc::SIGSEGV), &[]);
}

/// SIGBUS the program sends itself (raise, kill, sigqueue) reaches its
/// handler with its si_code, si_pid and si_value, among the trapped stores.
#[test]
fn raised_sigbus() {
    row_with(
        "raised_sigbus",
        "tests/t_sigchain",
        1,
        EXTRA_STORES,
        End::Handled(&[
            "RAISED SIGBUS: 12 reached the program's handler as sent (want 12)",
            "OWN SIGSEGV HANDLED row=raised_sigbus signo=11",
        ]),
        &[],
    );
}

/// A program's signal handler stores into the remote map (a count and a
/// `memcpy`) every ~20 us while the program's thread stores, copies and
/// flushes into the same map: the handler interrupts libsisci's store path,
/// `memcpy` and `SCIFlush` while they hold the map's locks, and must neither
/// wait for ever nor lose a store.
#[test]
fn async_stores() {
    row_with(
        "async_stores",
        "tests/t_sigchain",
        1,
        EXTRA_STORES,
        End::Handled(&["ASYNC STORES ARRIVED", "OWN SIGSEGV HANDLED row=async_stores signo=11"]),
        &[],
    );
}

/// The program's asynchronous signals reach only the program's threads:
/// one it blocks and waits for with `sigtimedwait` is not taken by a thread
/// of libsisci (which would run the default action, death), and one whose
/// handler only a program thread lets through runs there.
#[test]
fn program_signals() {
    row_with(
        "program_signals",
        "tests/t_sigchain",
        1,
        EXTRA_STORES,
        End::Handled(&["PROGRAM SIGNALS OK", "OWN SIGSEGV HANDLED row=program_signals signo=11"]),
        &[],
    );
}

// ---- a guest program (issue 33, item 3) --------------------------------------------------

/// Stores per phase of each guest row under software emulation (TCG):
/// every store is trapped by the guest kernel's userfaultfd, emulated by
/// the guest's libsisci and shipped through its host side, and every ack
/// comes back the same way, tens of ms each in an emulated guest on a busy
/// 2-core host. What the rows are about (the program's handlers installed
/// or saved/restored around the stores, then its own fault) shows with a
/// few hundred; signal_save_restore still swaps its handlers every 100.
const GUEST_TCG_STORES: u32 = 200;
/// The same under KVM.
const GUEST_KVM_STORES: u32 = 2_000;
/// The owners' deadline in the guest test: the first value comes only
/// after the guest has booted (10-30 s under TCG).
const GUEST_OWNER_WAIT_S: &str = "120";
/// The guest writer's waits (longer than its owner's, as above).
const GUEST_WRITER_WAIT_S: &str = "150";
/// A guest row still running after this long is stuck (a row takes
/// 20-40 s under TCG): described and killed by the guest's shell.
const GUEST_ROW_WATCHDOG_S: u32 = 75;

/// Rows handlers_after_map and signal_save_restore in a QEMU guest attached
/// to node 2 (`vsci vm run`), one after the other in one guest, each against
/// its own t_sigchain owner on node 1. The guest's libsisci traps the remote
/// map with the guest kernel's userfaultfd (SIGBUS delivery: the program
/// links libsisci, so its sigaction calls reach libsisci's); the program's
/// handlers are installed (or swapped with signal()) after the map. Every
/// store arrives at the owner, sigaction reports what the program installed,
/// no trap reaches the program, and its NULL write reaches its own handler
/// (its line, then _exit(42), as the guest's shell reports).
///
/// `VSCI_SIGNALS_GUEST_ENV` puts NAME=VALUE words before each guest
/// command (e.g. `VSCI_TRAP=thread`, `VSCI_LOG=debug`).
#[test]
fn guest_rows() {
    let _g = serial();
    if !netns::guests_possible() {
        return;
    }
    let Some(c) = Cluster::start(&[1, 2]) else { return };
    let kvm = vsci_vm::run::choose_accel(vsci_vm::Accel::Auto).kvm;
    let stores = if kvm { GUEST_KVM_STORES } else { GUEST_TCG_STORES };
    let total = (2 * stores).to_string();
    let rows: [(&str, &str, &str, End); 2] = [
        (
            "handlers_after_map",
            "0x5931",
            "0x5932",
            End::Handled(&["OWN SIGSEGV HANDLED row=handlers_after_map signo=11 si_code=1 si_addr=(nil)"]),
        ),
        (
            "signal_save_restore",
            "0x5933",
            "0x5934",
            End::Handled(&["OWN SIGSEGV HANDLED row=signal_save_restore signo=11 (a handler without SA_SIGINFO)"]),
        ),
    ];
    let marker = |row: &str| format!("GUEST ROW {row} EXIT ");
    // Each program runs under a watchdog: one stuck inside libsisci (where
    // its own deadlines cannot fire) is described (each thread's wchan and
    // /proc syscall line: number, arguments, stack pointer, pc) and killed,
    // so the test fails with that instead of hanging until the guest's
    // timeout, and the next row still runs.
    let extra_env = std::env::var("VSCI_SIGNALS_GUEST_ENV").map(|e| e + " ").unwrap_or_default();
    let script: Vec<String> = rows
        .iter()
        .map(|(row, oseg, wseg, _)| {
            format!(
                "{extra_env}t_sigchain -wait {GUEST_WRITER_WAIT_S} writer --row {row} --stores {stores} 1:{oseg} {wseg} & p=$!; \
                 (sleep {GUEST_ROW_WATCHDOG_S}; if [ -d /proc/$p ]; then echo \"GUEST WATCHDOG row={row}: still running after {GUEST_ROW_WATCHDOG_S} s\"; \
                 for t in /proc/$p/task/*; do echo \"GUEST WATCHDOG thread $(cat $t/comm): wchan=$(cat $t/wchan) syscall=$(cat $t/syscall)\"; done; \
                 grep -E '^Sig(Blk|Cgt)' /proc/$p/status; kill -9 $p; fi) & w=$!; wait $p; echo \"{}$?\"; kill $w 2>/dev/null",
                marker(row)
            )
        })
        .collect();
    let script = script.join("; ") + "; exit 0";
    let owner = |row: &str, oseg: &str, wseg: &str| {
        let mut ocmd = c.client(1, &built("tests/t_sigchain"));
        ocmd.args(["-wait", GUEST_OWNER_WAIT_S, "owner", oseg, &format!("2:{wseg}"), "1", &total]);
        Proc::spawn(&format!("t_sigchain owner (node 1, for guest row {row})"), &mut ocmd)
    };
    let t0 = Instant::now();
    let mut owners = vec![owner(rows[0].0, rows[0].1, rows[0].2)];
    let mut guest = c.guest(2, "sigchain", &[(built("tests/t_sigchain"), "t_sigchain")], &script);
    // Each owner starts when its row does: an owner gives up on a writer
    // segment that does not show up within 60 s, and the second row's
    // comes only after the guest has booted and run the first.
    let deadline = Instant::now() + RUN;
    let mut row_times = Vec::new();
    for (k, (row, ..)) in rows.iter().enumerate() {
        while !guest.stdout_text().contains(&marker(row)) && guest.try_wait().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        if !guest.stdout_text().contains(&marker(row)) {
            break;
        }
        let now = Instant::now();
        row_times.push(format!("{row} done at {:.1} s", (now - t0).as_secs_f64()));
        if let Some((next, oseg, wseg, _)) = rows.get(k + 1) {
            owners.push(owner(next, oseg, wseg));
        }
    }
    let (gout, gkilled) = finish(guest, RUN.saturating_sub(t0.elapsed()));
    let oouts: Vec<(Output, bool)> = owners.into_iter().map(|o| finish(o, Duration::from_secs(5))).collect();

    let mut bad = Vec::new();
    if gkilled {
        bad.push(format!("the guest did not end within {RUN:?} and was killed"));
    } else if !gout.status.success() {
        bad.push(format!("vsci vm run ended with {}", describe_status(gout.status)));
    }
    let mut rest: &str = &gout.stdout;
    for (k, (row, _, _, end)) in rows.iter().enumerate() {
        let m = marker(row);
        let Some(at) = rest.find(&m) else {
            bad.push(format!("row {row}: the guest's program did not end (no \"{m}\")"));
            break;
        };
        let section = &rest[..at];
        let code: i32 = rest[at + m.len()..].lines().next().unwrap_or("").trim().parse().unwrap_or(-1);
        rest = &rest[at + m.len()..];
        let mut rb = Vec::new();
        match oouts.get(k) {
            Some((o, killed)) if o.status.success() && o.stdout.contains("OWNER DONE") && !killed => {}
            Some((o, killed)) => {
                let why = o.stderr.lines().find(|l| l.contains("t_sigchain.c")).unwrap_or("");
                rb.push(format!(
                    "not every store arrived: the owner ended with {}{} {why}",
                    describe_status(o.status),
                    if *killed { " (killed)" } else { "" }
                ));
            }
            None => rb.push("its owner never started".into()),
        }
        if let Some(l) = section.lines().find(|l| l.contains("UNEXPECTED")) {
            rb.push(format!("a signal reached the program before its own fault: {l}"));
        }
        if section.contains("GUEST WATCHDOG") {
            let threads: Vec<&str> =
                section.lines().filter(|l| l.starts_with("GUEST WATCHDOG") || l.starts_with("Sig")).collect();
            rb.push(format!("the program was stuck and killed by the watchdog:\n      {}", threads.join("\n      ")));
        }
        let stores_done = section.contains("WRITER STORES DONE");
        if !stores_done {
            rb.push("the writer did not finish its stores".into());
        }
        for l in section.lines().filter(|l| l.contains("REPORT-BACK MISMATCH")) {
            rb.push(format!("what the program is told is not what it installed: {l}"));
        }
        if stores_done && !section.contains("REPORT-BACK OK") {
            rb.push("no REPORT-BACK OK".into());
        }
        if stores_done {
            // The guest's shell reports the program's status as $? (an exit
            // code, or 128 + the signal that killed it).
            let o = Output {
                name: format!("t_sigchain writer --row {row} (in a guest on node 2)"),
                status: if code > 128 {
                    ExitStatus::from_raw(code - 128)
                } else {
                    ExitStatus::from_raw((code & 0xff) << 8)
                },
                stdout: section.to_string(),
                stderr: String::new(),
            };
            check_end(&o, false, *end, false, &mut rb);
        }
        bad.extend(rb.into_iter().map(|s| format!("guest row {row}: {s}")));
    }
    if !bad.is_empty() {
        let owners: Vec<String> = oouts.iter().map(|(o, _)| o.describe()).collect();
        panic!(
            "guest rows: {} problem(s):\n  - {}\n\n{}\n\n{}",
            bad.len(),
            bad.join("\n  - "),
            gout.describe(),
            owners.join("\n\n")
        );
    }
    eprintln!(
        "guest rows ({}, {stores} stores per phase): every store arrived, report-back OK, own fault handled; {}; {:.1} s in all",
        if kvm { "KVM" } else { "TCG" },
        row_times.join(", "),
        t0.elapsed().as_secs_f64()
    );
    c.wait_clean(1, "after the guest rows");
    c.wait_clean(2, "after the guest rows");
}
