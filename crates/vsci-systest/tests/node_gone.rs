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
