//! The memory extension (docs/remote-memory-memext.md): three nodes in
//! their own network namespaces, two of them lending (`vscid --lend`), and
//! `vsci-memext-check` on the third running a program over a range twice
//! its resident budget, backed by pages mirrored on both lenders; one
//! lender is killed and restarted under it.
//!
//! Needs root for `ip netns`; without it the tests print SKIPPED and pass.
//! Run after `make`:
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test memext -- --test-threads=1

mod common;
mod netns;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use netns::Cluster;

/// The value of `name=N` in the counters line `vsci-memext-check` prints.
fn counter(line: &str, name: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

fn last_counters(stdout: &str) -> String {
    stdout
        .lines()
        .filter(|l| l.starts_with("faults="))
        .next_back()
        .unwrap_or_else(|| panic!("no counters in:\n{stdout}"))
        .to_string()
}

fn start() -> Option<Cluster> {
    Cluster::start_args(&[1, 2, 3], &[(2, &["--lend", "256M"]), (3, &["--lend", "256M"])])
}

#[test]
fn a_program_streams_twice_its_budget_through_mirrored_remote_memory() {
    let Some(c) = start() else { return };
    let mut cmd = c.client(1, &built("bin/vsci-memext-check"));
    cmd.args(["stream", "64M", "32M", "2,3"]);
    let t = Instant::now();
    let out = run("vsci-memext-check stream", &mut cmd, Duration::from_secs(300));
    let took = t.elapsed();
    out.assert_success();
    assert!(out.stdout.lines().any(|l| l == "OK"), "{}", out.describe());
    let s = last_counters(&out.stdout);
    // 64 MiB through 32 MiB: pages went out and came back.
    assert!(counter(&s, "evictions") > 0, "{s}");
    assert!(counter(&s, "write_backs") > 0, "{s}");
    assert!(counter(&s, "fetches") > 0, "{s}");
    // Stores to pages brought in by loads were seen (and written back).
    assert!(counter(&s, "wp_faults") > 0, "{s}");
    assert!(counter(&s, "resident_bytes") <= 32 << 20, "{s}");
    assert_eq!(counter(&s, "lender_failures"), 0, "{s}");
    eprintln!("remote ({took:?} in all):\n{}", out.stdout);

    // The same program on plain memory (a measure, not a test).
    let mut cmd = c.client(1, &built("bin/vsci-memext-check"));
    cmd.args(["--local", "stream", "64M", "32M", "-"]);
    let local = run("vsci-memext-check --local stream", &mut cmd, Duration::from_secs(120));
    local.assert_success().assert_contains("OK");
    eprintln!("local:\n{}", local.stdout);
}

#[test]
fn a_lender_killed_and_restarted_under_a_program_loses_it_nothing() {
    let Some(mut c) = start() else { return };
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let mut cmd = c.client(1, &built("bin/vsci-memext-check"));
    cmd.args(["restart", "64M", "32M", "2,3"]).stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
    let mut p = Proc::spawn("vsci-memext-check restart", &mut cmd);
    p.wait_line("READY", Duration::from_secs(300));

    // Half the pages are on the lenders now, each on both; node 3's copies
    // die with it, and its restart brings back an empty pool.
    c.kill_node(3);
    c.restart_node(3);
    writeln!(ours, "go").unwrap();
    p.wait_line("OK", Duration::from_secs(300));

    // Rewriting everything brings node 3 back into the mirror; then node 2
    // dies and node 3's copies alone serve the check.
    writeln!(ours, "again").unwrap();
    p.wait_line("READY2", Duration::from_secs(300));
    c.kill_node(2);
    writeln!(ours, "go").unwrap();
    p.wait_line("OK2", Duration::from_secs(300));
    drop(ours);
    let out = p.wait(Duration::from_secs(60));
    out.assert_success();
    eprintln!("{}", out.stdout);
    let counters: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("faults=")).collect();
    // [after filling, after the first check, READY2, after the second]
    assert_eq!(counters.len(), 4, "{}", out.describe());
    assert!(counter(counters[0], "evictions") > 0 && counter(counters[0], "lender_failures") == 0, "{}", counters[0]);
    assert!(counter(counters[1], "lender_failures") >= 1, "node 3's death went unnoticed: {}", counters[1]);
    assert!(counter(counters[1], "fetches") > 0, "{}", counters[1]);
    assert!(counter(counters[2], "reborrows") >= 1, "{}", counters[2]);
    assert!(counter(counters[3], "lender_failures") >= 2, "node 2's death went unnoticed: {}", counters[3]);
}

#[test]
fn a_page_with_no_copy_left_ends_the_program_with_a_message_not_a_wrong_page() {
    let Some(mut c) = Cluster::start_args(&[1, 2], &[(2, &["--lend", "256M"])]) else { return };
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let mut cmd = c.client(1, &built("bin/vsci-memext-check"));
    cmd.args(["restart", "64M", "32M", "2"]).stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
    let mut p = Proc::spawn("vsci-memext-check restart (one lender)", &mut cmd);
    p.wait_line("READY", Duration::from_secs(300));
    // The only lender dies with half the range on it.
    c.kill_node(2);
    writeln!(ours, "go").unwrap();
    let out = p.wait(Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(70), "{}", out.describe());
    assert!(!out.stdout.contains("OK") && !out.stdout.contains("MISMATCH"), "{}", out.describe());
    // The first page the check needs is on the dead lender, and to make
    // room for it a dirty page has to go there too: whichever fails first
    // is named, with the lender.
    assert!(
        out.stderr.contains("vsci memext: page ") && out.stderr.contains("is lost") && out.stderr.contains("node 2 ("),
        "{}",
        out.describe()
    );
    eprintln!("{}", out.stderr);
}
