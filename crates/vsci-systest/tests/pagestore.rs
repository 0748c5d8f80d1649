//! The page store over lent memory (include/vsci_tmem.h,
//! crates/vsci-lend/src/pagestore.rs): three nodes in their own network
//! namespaces, 2 and 3 lending (`vscid --lend`), and `t_tmem` on node 1
//! putting and getting pages through libsisci; then node 3 dies under a
//! store holding pages on both lenders.
//!
//! Needs root for `ip netns`; without it the tests print SKIPPED and pass.
//! Run after `make`:
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test pagestore -- --test-threads=1
//!
//! `VSCI_TMEM_BENCH=1` also runs `t_tmem bench` and prints its figures.

mod common;
mod netns;

use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use netns::Cluster;

/// `key=value` of the first stdout line starting with `prefix` (and
/// containing `with`, if given).
fn field(out: &str, prefix: &str, with: &str, key: &str) -> String {
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix) && l.contains(with))
        .unwrap_or_else(|| panic!("no line \"{prefix} ...{with}...\" in:\n{out}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {key}= in \"{line}\""))
}

fn num(out: &str, prefix: &str, with: &str, key: &str) -> u64 {
    let v = field(out, prefix, with, key);
    v.parse().unwrap_or_else(|_| panic!("{key}={v} is not a number"))
}

fn t_tmem(c: &Cluster, args: &[&str], timeout: Duration) -> Output {
    let mut cmd = c.client(1, &built("tests/t_tmem"));
    cmd.args(args);
    run(&format!("t_tmem {}", args.join(" ")), &mut cmd, timeout)
}

/// A pipe: (read end for a child's stdin, write end for us).
fn pipe() -> (OwnedFd, File) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just made by pipe2 and are owned by
    // nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

#[test]
fn pages_put_into_lent_memory_come_back_and_a_dead_lender_s_pages_fail() {
    let Some(mut c) = Cluster::start_args(&[1, 2, 3], &[(2, &["--lend", "64M"]), (3, &["--lend", "64M"])]) else {
        return;
    };

    // Round trip: 1000 random pages in each kind of pool, flushes, errors.
    let out = t_tmem(&c, &["roundtrip", "2,3"], Duration::from_secs(120));
    out.assert_success();
    for kind in ["persistent", "ephemeral"] {
        assert_eq!(num(&out.stdout, "ROUNDTRIP", kind, "present"), 1000, "{}", out.describe());
        assert!(out.stdout.contains(&format!("ROUNDTRIP {kind} flush ok")), "{}", out.describe());
    }
    assert!(out.stdout.contains("ROUNDTRIP errors ok") && out.stdout.contains("ROUNDTRIP OK"), "{}", out.describe());

    // Capacity: persistent puts refused past it, ephemeral ones evict the
    // oldest.
    let out = t_tmem(&c, &["fill", "2,3"], Duration::from_secs(120));
    out.assert_success();
    let s = &out.stdout;
    assert_eq!(
        (num(s, "FILL persistent", "", "stored"), num(s, "FILL persistent", "", "refused")),
        (64, 8),
        "{}",
        out.describe()
    );
    assert_eq!(
        (
            num(s, "FILL ephemeral", "", "absent"),
            num(s, "FILL ephemeral", "", "present"),
            num(s, "FILL ephemeral", "", "evictions")
        ),
        (64, 64, 64),
        "{}",
        out.describe()
    );
    assert_eq!(
        (num(s, "FILL priority", "", "persistent"), num(s, "FILL priority", "", "ephemeral_left")),
        (64, 0),
        "{}",
        out.describe()
    );
    assert!(s.contains("FILL OK"), "{}", out.describe());

    // Every store was closed: the lenders lent nothing any more.
    for lender in [2, 3] {
        wait_for(Duration::from_secs(20), "the loans returned", || {
            c.status(lender)["lending"]["lent"].as_array().is_some_and(|a| a.is_empty()).then_some(())
        });
    }

    if std::env::var_os("VSCI_TMEM_BENCH").is_some() {
        let out = t_tmem(&c, &["bench", "2,3", "4096"], Duration::from_secs(300));
        out.assert_success();
        for l in out.stdout.lines().filter(|l| l.starts_with("BENCH")) {
            eprintln!("{l}");
        }
    }

    // A lender dies: its pages fail with an error, none comes back wrong,
    // the other lender's pages come back right, and new puts go there.
    let (stdin, mut go) = pipe();
    let mut cmd = c.client(1, &built("tests/t_tmem"));
    cmd.args(["survive", "2,3", "512"]).stdin(Stdio::from(stdin));
    let mut p = Proc::spawn("t_tmem survive", &mut cmd);
    p.wait_line("READY node=3", Duration::from_secs(60));
    p.wait_line("READY", Duration::from_secs(10));
    c.kill_node(3);
    let t = Instant::now();
    writeln!(go, "go").unwrap();
    drop(go);
    let out = p.wait(Duration::from_secs(120));
    let took = t.elapsed();
    out.assert_success();
    let s = &out.stdout;
    for l in s.lines().filter(|l| ["READY node", "SURVIVE", "AFTER"].iter().any(|p| l.starts_with(p))) {
        eprintln!("{l}");
    }
    let (on2, on3) = (num(s, "READY", "node=2", "pages"), num(s, "READY", "node=3", "pages"));
    assert!(on2 + on3 == 512 && on2 > 0 && on3 > 0, "{}", out.describe());
    let got = |node: &str| {
        (
            num(s, "SURVIVE", node, "ok"),
            num(s, "SURVIVE", node, "failed"),
            num(s, "SURVIVE", node, "wrong"),
            num(s, "SURVIVE", node, "absent"),
        )
    };
    assert_eq!(got("node=2"), (on2, 0, 0, 0), "node 2's pages after node 3 died: {}", out.describe());
    assert_eq!(got("node=3"), (0, on3, 0, 0), "node 3's pages after it died: {}", out.describe());
    assert_eq!(field(s, "SURVIVE", "node=3", "err"), "SCI_ERR_TRANSFER_FAILED");
    assert_eq!(
        (num(s, "AFTER put", "", "ok"), num(s, "AFTER put", "", "failed"), num(s, "AFTER put", "", "wrong")),
        (128, 0, 0),
        "puts after node 3 died: {}",
        out.describe()
    );
    eprintln!("the gets after node 3 died took {} ms (program and all: {took:?})", field(s, "SURVIVE ms", "", "ms"));
    assert!(took < Duration::from_secs(60), "the gets took {took:?}");
    // The store was closed: node 2 lends nothing any more.
    wait_for(Duration::from_secs(20), "node 2's loan returned", || {
        c.status(2)["lending"]["lent"].as_array().is_some_and(|a| a.is_empty()).then_some(())
    });
}
