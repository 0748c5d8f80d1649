//! DMA from a guest (seed 003's API remoting): tests/c/t_dma.c, every case,
//! run unchanged inside a QEMU guest against a private node. The guest's
//! DMA calls run on the node's engine (the guest's host side), which checks
//! each against the program's own objects and reports the end as an MSI-X
//! interrupt. Afterwards the node holds nothing for the guest any more.
//!
//! Skips (passes with a message) where qemu-system-x86_64 is missing. Run
//! after `make`:
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test guest_dma

mod common;

use std::time::Duration;

use common::*;

#[test]
fn every_dma_case_in_a_guest() {
    if !have_qemu() {
        return;
    }
    let mut d = Daemon::start(61);
    let base = d.counts();
    let socket = d.socket.to_string_lossy().to_string();
    let mut cmd = d.client(&built("bin/vsci"));
    cmd.args(["vm", "run", "--socket", &socket, "--name", "dma", "--memory", "768", "--timeout", "280"]);
    cmd.arg("--add").arg(format!("{}:/bin/t_dma", built("tests/t_dma").display()));
    cmd.args(["--", "t_dma"]);
    let out = run("t_dma in a guest", &mut cmd, Duration::from_secs(300));
    println!("{}", out.stdout);
    eprintln!("{}", out.stderr);
    assert!(out.stdout.contains(" passed, 0 failed"), "t_dma in a guest: some cases failed\n{}", out.describe());
    out.assert_success();
    d.assert_running();
    d.wait_counts(base, "after the guest's DMA");
}
