//! The C API tests (tests/c/*.c, built to build/tests/) against a fresh
//! vscid each.  Every C program runs its cases as separate processes and
//! prints "N passed, N failed"; afterwards the daemon must be alive and hold
//! no segment, connection or interrupt, and no more descriptors than before.

mod common;

use common::*;

fn run_c_tests(program: &str, node_id: u32) {
    run_c_program(program, &[], node_id, " passed, 0 failed");
}

/// Runs build/tests/PROGRAM ARGS as a client of a fresh node; its stdout
/// must contain `want`, and afterwards the node must be back where it was.
fn run_c_program(program: &str, args: &[&str], node_id: u32, want: &str) {
    let mut d = Daemon::start(node_id);
    let base = d.counts();
    let base_fds = d.settled_fd_count();
    let mut cmd = d.client(&built(&format!("tests/{program}")));
    cmd.args(args);
    let out = run(program, &mut cmd, PROGRAM_TIMEOUT);
    println!("{}", out.stdout);
    eprintln!("{}", out.stderr);
    assert!(out.stdout.contains(want), "{program}: no \"{want}\" (some cases failed)\n{}", out.describe());
    out.assert_success();
    d.assert_running();
    d.wait_counts(base, &format!("after {program}"));
    d.wait_fd_count(base_fds, &format!("after {program}"));
}

#[test]
fn c_basic() {
    run_c_tests("t_basic", 7);
}

#[test]
fn c_handles() {
    run_c_tests("t_handles", 21);
}

#[test]
fn c_segments() {
    run_c_tests("t_segments", 3);
}

#[test]
fn c_maps() {
    run_c_tests("t_maps", 4);
}

#[test]
fn c_interrupts() {
    run_c_tests("t_interrupts", 5);
}

#[test]
fn c_datainterrupts() {
    run_c_tests("t_datainterrupts", 6);
}

/// 500 connect/map/unmap/disconnect and 500 create/map/unmap/remove
/// cycles: the process keeps no mapping, the node no object or descriptor.
#[test]
fn c_map_cycles() {
    run_c_program("t_map_cycles", &["-n", "500"], 9, "MAP CYCLES OK remote=500 local=500");
}

#[test]
fn c_dma() {
    run_c_tests("t_dma", 8);
}

/// `vscid --wait-mode` sets the default wait strategy of clients that do not
/// set VSCI_WAIT: a polling waiter stays runnable, a blocking one sleeps.
#[test]
fn daemon_wait_mode_is_the_client_default() {
    for (node, mode) in [(31, "poll"), (32, "block")] {
        let d = Daemon::start_with(node, &["--wait-mode", mode]);
        let mut cmd = d.client(&built("tests/t_interrupts"));
        cmd.arg("wait_state_daemon_default").env("VSCI_TEST_WAIT_EXPECT", mode);
        let out = run("t_interrupts wait_state_daemon_default", &mut cmd, PROGRAM_TIMEOUT);
        out.assert_success().assert_contains(&format!("wait mode {mode}: waiter"));
    }
}
