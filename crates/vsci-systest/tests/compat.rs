//! Programs written for Dolphin hardware (tests/c/t_compat.c, built with
//! -Wall -Werror as such programs are): SCI_FLAG_DMA_GLOBAL segments and
//! transfers, 1-byte DMAs, dis_dma_vec_t vectors of DIS_DMA_MAX_VECLEN
//! pieces on a 1-entry queue, DMA channels, the memcpy selector, the older
//! enqueue/post/reset queue API, hardware-only calls, and cleanup after
//! SCITerminate -- the server and client on one node, the client in a QEMU
//! guest of that node (skipped without qemu-system-x86_64), then on two
//! nodes in their own network namespaces (skipped without root, see
//! netns/mod.rs).
//! Afterwards every node must hold nothing: the cleanup calls after
//! SCITerminate really released what they named.
//!
//!     make && VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test compat -- --test-threads=1

mod common;
mod netns;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use netns::Cluster;

/// Bound on one program (a hang fails the test instead of blocking it).
const RUN: Duration = Duration::from_secs(120);
const READY: Duration = Duration::from_secs(30);

fn t_compat() -> PathBuf {
    built("tests/t_compat")
}

fn check_client(out: &Output) {
    println!("=== {} ===\n{}{}", out.name, out.stdout, out.stderr);
    out.assert_success();
    for line in [
        "dma alignment 1",
        "1-byte DMAs ok",
        "vector of 256 pieces on a 1-entry queue ok",
        "dma channels ok",
        "memcpy selector ok",
        "older queue api ok",
        "hardware-only calls answer NOT_IMPLEMENTED",
        "cleanup after SCITerminate ok",
        "CLIENT OK",
    ] {
        out.assert_contains(line);
    }
}

fn check_server(out: &Output, client_node: u32) {
    println!("=== {} ===\n{}{}", out.name, out.stdout, out.stderr);
    out.assert_success();
    out.assert_contains(&format!("SERVER DATA OK from node {client_node}"));
    out.assert_contains("SERVER VERIFIED");
}

/// Server and client as two processes of one node: the engine copies
/// between the two segments' pages.
#[test]
fn compat_one_node() {
    let d = Daemon::start(31);
    let base = d.counts();
    let tc = t_compat();
    let mut server = Proc::spawn("t_compat -server", d.client(&tc).arg("-server"));
    server.wait_line("SERVER READY", READY);
    let client = run("t_compat -client", d.client(&tc).args(["-client", "-rn", "31"]), RUN);
    check_client(&client);
    check_server(&server.wait(RUN), 31);
    d.wait_counts(base, "after t_compat");
}

/// The client inside a guest of the server's node (`vsci vm run`): segment
/// transfers run on the node's engine through the guest's host side,
/// program memory is copied by the guest's library, channels and the older
/// API are the guest library's own.
#[test]
fn compat_guest_client() {
    let have_qemu = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("qemu-system-x86_64").is_file()))
        .unwrap_or(false);
    if !have_qemu {
        println!("SKIPPED: qemu-system-x86_64 not installed");
        return;
    }
    let d = Daemon::start(32);
    let base = d.counts();
    let tc = t_compat();
    let mut server = Proc::spawn("t_compat -server", d.client(&tc).arg("-server"));
    server.wait_line("SERVER READY", READY);
    let socket = d.socket.to_string_lossy().to_string();
    let mut cmd = d.client(&built("bin/vsci"));
    cmd.args(["vm", "run", "--socket", &socket, "--name", "compat", "--memory", "768", "--timeout", "200"]);
    cmd.arg("--add").arg(format!("{}:/bin/t_compat", tc.display()));
    cmd.args(["--", "t_compat", "-client", "-rn", "32"]);
    let client = run("t_compat -client in a guest", &mut cmd, Duration::from_secs(240));
    check_client(&client);
    check_server(&server.wait(RUN), 32);
    d.wait_counts(base, "after t_compat in a guest");
}

/// Server on node 2, client on node 1 (another namespace): every transfer
/// rides the RMA engine.
#[test]
fn compat_two_nodes() {
    let Some(c) = Cluster::start(&[1, 2]) else { return };
    let tc = t_compat();
    let mut server = Proc::spawn("t_compat -server (node 2)", c.client(2, &tc).arg("-server"));
    server.wait_line("SERVER READY", READY);
    let client = run("t_compat -client (node 1)", c.client(1, &tc).args(["-client", "-rn", "2"]), RUN);
    check_client(&client);
    check_server(&server.wait(RUN), 1);
    c.wait_clean(1, "after t_compat");
    c.wait_clean(2, "after t_compat");
}
