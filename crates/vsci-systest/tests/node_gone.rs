//! Failure is reported, never waited out: a program blocked in a SISCI call
//! with no timeout returns with an error soon after its node stops
//! (SIGTERM) or dies (SIGKILL); later calls fail at once; memory it mapped
//! stays readable. The C side is tests/c/t_nodegone.c.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// How long after the node went away the program must have ended. The
/// library learns of it from its socket at once; the bound leaves room for
/// a loaded machine (2 cores shared by parallel builds).
const BOUND: Duration = Duration::from_secs(3);

fn blocked_call_returns(mode: &str, sig: i32, node_id: u32) {
    let mut d = Daemon::start(node_id);
    let mut p = Proc::spawn(&format!("t_nodegone {mode}"), d.client(&built("tests/t_nodegone")).arg(mode));
    p.wait_line("READY", LINE_TIMEOUT);
    // Let the call get past its spin phase and really sleep.
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    d.signal(sig);
    let out = p.wait(Duration::from_secs(30));
    let took = t0.elapsed();
    eprintln!("{mode} after signal {sig}: program ended {took:?} after the signal\n{}", out.stdout);
    out.assert_success();
    assert!(took < BOUND, "{mode}/{sig}: the program ended only {took:?} after the node went away\n{}", out.describe());
    match mode {
        // Segment-event waits return the event that tells it: SCI_CB_LOST
        // (for a connection, with the status saying the local link — the
        // node — is gone).
        "lsegev" => {
            out.assert_contains("REASON 5"); // SCI_CB_LOST
            out.assert_contains("RETURNED SCI_ERR_OK");
        }
        "rsegev" => {
            out.assert_contains("REASON 5 STATUS SCI_ERR_NO_LINK_ACCESS");
            out.assert_contains("RETURNED SCI_ERR_OK");
        }
        _ => {
            out.assert_contains("RETURNED SCI_ERR_NO_LINK_ACCESS");
        }
    }
    out.assert_contains("LATER SCI_ERR_NO_LINK_ACCESS");
    out.assert_contains("REOPEN SCI_ERR_NO_LINK_ACCESS");
    out.assert_contains("MAPPED OK");
    if sig == libc::SIGTERM {
        let st = d.wait_exit(Duration::from_secs(10));
        assert!(st.success(), "vscid after SIGTERM: {st:?}");
    }
}

const MODES: [&str; 6] = ["intr", "dintr", "intrcb", "lsegev", "rsegev", "connect"];

#[test]
fn blocked_calls_return_when_the_node_stops() {
    for (i, mode) in MODES.iter().enumerate() {
        blocked_call_returns(mode, libc::SIGTERM, 40 + i as u32);
    }
}

#[test]
fn blocked_calls_return_when_the_node_is_killed() {
    for (i, mode) in MODES.iter().enumerate() {
        blocked_call_returns(mode, libc::SIGKILL, 50 + i as u32);
    }
}

/// The same for a program in a guest: its node is killed while it sleeps in
/// SCIWaitForInterrupt (its wake-up is an MSI-X vector, which only the
/// device can raise); it returns NO_LINK_ACCESS and the guest run ends.
#[test]
fn guest_blocked_call_returns_when_the_node_is_killed() {
    if vsci_vm::run::find_qemu().is_none() {
        eprintln!("SKIP: qemu-system-x86_64 is not installed");
        return;
    }
    guest_image();
    let mut d = Daemon::start(59);
    let prog = built("tests/t_nodegone");
    let mut c = std::process::Command::new(built("bin/vsci"));
    c.args(["vm", "run", "--timeout", "240", "--socket"])
        .arg(&d.socket)
        .args(["--name", "nodegone", "--add"])
        .arg(format!("{}:/bin/t_nodegone", prog.display()))
        .args(["--", "t_nodegone", "intr"])
        .stdin(std::process::Stdio::null());
    let mut p = Proc::spawn("t_nodegone intr in a guest", &mut c);
    p.wait_line("READY", Duration::from_secs(240));
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    d.kill9();
    let out = p.wait(Duration::from_secs(60));
    let took = t0.elapsed();
    eprintln!("guest: the run ended {took:?} after the node was killed\n{}", out.stdout);
    out.assert_success();
    out.assert_contains("RETURNED SCI_ERR_NO_LINK_ACCESS");
    out.assert_contains("MAPPED OK");
    // The bound includes the guest powering off (under TCG).
    assert!(took < Duration::from_secs(10), "the guest's call returned only {took:?} after the node died");
}
