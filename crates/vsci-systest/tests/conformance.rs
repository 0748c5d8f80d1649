//! docs/api.md "Conformance": the release calls in every handle state
//! (valid, descriptor closed, after SCITerminate, peer gone, node gone,
//! already released, never valid) and SCI_FLAG_FORCE_REMOVE with a
//! connected peer, on one node and across two nodes. The C side is
//! tests/c/t_conformance.c; its cases are table-driven where the table
//! allows (release_table checks every row of the release calls).
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test conformance -- --test-threads=1
//!
//! The two-node test needs root for `ip netns`; without it, it prints
//! SKIPPED and passes. Deadlines only bound hangs.

mod common;
mod netns;

use std::time::Duration;

use common::*;
use netns::Cluster;

fn t_conformance() -> std::path::PathBuf {
    built("tests/t_conformance")
}

/// Run the named cases of t_conformance against a fresh node; afterwards
/// the node must be alive and hold nothing.
fn run_cases(cases: &[&str], node_id: u32) {
    let mut d = Daemon::start(node_id);
    let base = d.counts();
    let base_fds = d.settled_fd_count();
    let mut cmd = d.client(&t_conformance());
    cmd.args(cases);
    let out = run("t_conformance", &mut cmd, PROGRAM_TIMEOUT);
    println!("{}", out.stdout);
    eprintln!("{}", out.stderr);
    assert!(out.stdout.contains(" passed, 0 failed"), "t_conformance {cases:?}: some cases failed\n{}", out.describe());
    out.assert_success();
    d.assert_running();
    d.wait_counts(base, "after t_conformance");
    d.wait_fd_count(base_fds, "after t_conformance");
}

/// GASNet's exit: SCIClose, SCITerminate, then every release looped on
/// until SCI_ERR_OK (an iteration cap fails it instead of spinning).
#[test]
fn releases_after_close_and_terminate_finish() {
    run_cases(&["gasnet_exit"], 341);
}

/// Every release call in every handle state, and every other call that
/// takes a handle in the released states, against the table.
#[test]
fn release_table() {
    run_cases(&["release_table", "wrong_kind_orphans", "calls_on_released_handles", "release_flags"], 342);
}

/// The owner of everything a program is connected to exits: the other
/// calls answer as the table's "peer gone" column says, and the program's
/// releases succeed.
#[test]
fn releases_after_the_peer_is_gone() {
    run_cases(&["release_after_peer_gone"], 343);
}

/// SCI_FLAG_FORCE_REMOVE with a peer of the same node connected and
/// mapping.
#[test]
fn force_remove_with_a_local_peer() {
    run_cases(&["force_remove"], 344);
}

/// The node dies while the program holds one object of every kind: the
/// other calls answer as the table's "node gone" column says, and every
/// release returns SCI_ERR_OK (what it named went with the node).
#[test]
fn releases_after_the_node_is_gone() {
    let mut d = Daemon::start(345);
    let mut p = Proc::spawn("t_conformance -role nodegone", d.client(&t_conformance()).args(["-role", "nodegone"]));
    p.wait_line("READY", LINE_TIMEOUT);
    d.kill9();
    let out = p.wait(Duration::from_secs(120));
    println!("{}\n{}", out.stdout, out.stderr);
    out.assert_success();
    out.assert_contains("NODEGONE OK");
}

/// SCI_FLAG_FORCE_REMOVE across two nodes: the owner on node 1 force-removes
/// its segment while a peer on node 2 maps it; the peer gets SCI_CB_LOST,
/// its SCICheckSequence and its next checked store report the loss, and
/// none of its stores reaches the new segment the owner makes under the
/// same id.
#[test]
fn force_remove_with_a_peer_on_another_node() {
    let Some(c) = Cluster::start(&[1, 2]) else { return };
    c.wait_all_up();
    let segid = "0x3460";
    let mut owner =
        Proc::spawn("force_owner (node 1)", c.client(1, &t_conformance()).args(["-role", "force_owner", segid]));
    owner.wait_line("OWNER READY", LINE_TIMEOUT);
    let peer =
        Proc::spawn("force_peer (node 2)", c.client(2, &t_conformance()).args(["-role", "force_peer", "1", segid]));
    let outs = run_together(vec![owner, peer], Duration::from_secs(180));
    outs[0].assert_contains("OWNER: NO STALE WRITES");
    outs[0].assert_contains("OWNER OK");
    outs[1].assert_contains("PEER GOT SCI_CB_LOST");
    outs[1].assert_contains("PEER OK");
    c.wait_clean(1, "after the force-remove test");
    c.wait_clean(2, "after the force-remove test");
}

/// GASNet's exit with another node's segment and interrupt: the program on
/// node 2 connects to node 1's segment (map, sequence, DMA) and interrupt,
/// then closes its descriptors, calls SCITerminate and loops on each
/// release until SCI_ERR_OK; the owner on node 1 sees the connection go at
/// the program's SCIClose.
#[test]
fn releases_after_close_and_terminate_finish_across_nodes() {
    let Some(c) = Cluster::start(&[1, 2]) else { return };
    c.wait_all_up();
    let segid = "0x3480";
    let mut owner =
        Proc::spawn("gasnet_owner (node 1)", c.client(1, &t_conformance()).args(["-role", "gasnet_owner", segid]));
    owner.wait_line("OWNER READY", LINE_TIMEOUT);
    let program = Proc::spawn(
        "gasnet_remote (node 2)",
        c.client(2, &t_conformance()).args(["-role", "gasnet_remote", "1", segid]),
    );
    let outs = run_together(vec![owner, program], Duration::from_secs(180));
    outs[0].assert_contains("OWNER SAW THE PROGRAM CONNECT AND GO");
    outs[0].assert_contains("OWNER OK");
    outs[1].assert_contains("PROGRAM OK");
    c.wait_clean(1, "after the GASNet exit test");
    c.wait_clean(2, "after the GASNet exit test");
}
