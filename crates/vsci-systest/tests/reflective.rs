//! Reflective memory (issue 18, docs/api.md "Reflective memory") across
//! three real nodes, each vscid in its own network namespace
//! (netns/mod.rs). tests/c/t_reflect.c plays every role: members create a
//! broadcast segment under the group's id and spin on their own memory; one
//! writer on node 1 connects to DIS_BROADCAST_NODEID_GROUP_ALL and writes a
//! payload then a flag to all of them, through one map or one DMA queue.
//!
//! - ordered delivery to every member (node 1's own member included), by
//!   stores and by DMA: each member checks the whole payload whenever the
//!   flag shows, every round;
//! - a member killed mid-run: the others go on receiving every round;
//! - a map with SCI_FLAG_NO_MEMORY_LOOPBACK_MAP leaves the writer's own
//!   node out.
//!
//! Deadlines only bound hangs; nothing here asserts how fast anything is.
//! Needs root for `ip netns`; without it every test prints SKIPPED and
//! passes. Run after `make`:
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test reflective -- --test-threads=1

mod common;
mod netns;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::*;
use netns::Cluster;

const WAIT_S: &str = "120";
const RUN: Duration = Duration::from_secs(600);
const SIZE: &str = "64k";

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time in this binary: their programs spin.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn t_reflect() -> PathBuf {
    built("tests/t_reflect")
}

fn spawn(c: &Cluster, node: u32, args: &[&str]) -> Proc {
    let name = format!("t_reflect {} (node {node})", args.join(" "));
    let mut cmd = c.client(node, &t_reflect());
    cmd.args(["-wait", WAIT_S]).args(args);
    Proc::spawn(&name, &mut cmd)
}

/// Member `k` on node `node` (its extra arguments after the writer's
/// target), started and seen ready.
fn member(c: &Cluster, node: u32, k: u32, rounds: &str, group: &str, ack: &str, extra: &[&str]) -> Proc {
    let k = k.to_string();
    let target = format!("1:{ack}");
    let mut args = vec!["member", &k, rounds, group, SIZE, &target];
    args.extend_from_slice(extra);
    let mut p = spawn(c, node, &args);
    p.wait_line(&format!("MEMBER {k} READY"), LINE_TIMEOUT);
    p
}

/// Members 1, 2, 3 on nodes 1, 2, 3 (member 3 with `extra3`), then the
/// writer on node 1 in `mode`, waiting for the members in `need`.
fn run_group(
    rounds: &str,
    group: &str,
    ack: &str,
    mode: &str,
    need: &str,
    extra1: &[&str],
    extra3: &[&str],
) -> Vec<Output> {
    let Some(c) = Cluster::start(&[1, 2, 3]) else { return Vec::new() };
    let r1 = if extra1.first() == Some(&"hold") { "0" } else { rounds };
    let m1 = member(&c, 1, 1, r1, group, ack, extra1);
    let m2 = member(&c, 2, 2, rounds, group, ack, &[]);
    let m3 = member(&c, 3, 3, rounds, group, ack, extra3);
    let w = spawn(&c, 1, &["writer", rounds, group, ack, need, mode]);
    let outs = run_together_allowing(vec![w, m1, m2, m3], RUN, extra3.first() == Some(&"die-at"));
    for id in [1, 2, 3] {
        c.wait_clean(id, &format!("after the reflective-memory run ({mode})"));
    }
    outs
}

/// `run_together`, where member 3 (the last program) may end by SIGKILL
/// when `member3_dies`.
fn run_together_allowing(procs: Vec<Proc>, timeout: Duration, member3_dies: bool) -> Vec<Output> {
    if !member3_dies {
        return run_together(procs, timeout);
    }
    let mut procs = procs;
    let dying = procs.pop().expect("member 3");
    let outs = run_together(procs, timeout);
    let o3 = dying.wait(Duration::from_secs(60));
    show(&o3);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o3.status.signal(), Some(libc::SIGKILL), "member 3 should have killed itself\n{}", o3.describe());
    o3.assert_contains("MEMBER 3 DIES");
    let mut outs = outs;
    outs.push(o3);
    outs
}

fn check_all(outs: &[Output], rounds: &str) {
    if outs.is_empty() {
        return; // skipped: no namespaces here
    }
    outs[0].assert_contains(&format!("WRITER DONE rounds={rounds}"));
    let line = outs[0].stdout.lines().find(|l| l.contains("WRITER DONE")).unwrap_or_default();
    eprintln!("reflective memory: {line}");
}

/// Stores through one map of the group reach all three members (the
/// writer's own node's included), the flag never before its payload.
#[test]
fn stores_reach_every_member_in_order() {
    let _g = serial();
    let rounds = "2000";
    let outs = run_group(rounds, "0x6801", "0x6811", "pio", "1,2,3", &[], &[]);
    check_all(&outs, rounds);
    for (i, k) in [(1, 1), (2, 2), (3, 3)] {
        if let Some(o) = outs.get(i) {
            o.assert_contains(&format!("MEMBER {k} DONE rounds={rounds}"));
            // The writer's one trigger of the group's data interrupt.
            o.assert_contains(&format!("MEMBER {k} GOT BYE"));
        }
    }
}

/// DMA with SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST from a local segment
/// to the group: the payload, then the flag in a transfer of its own.
#[test]
fn dma_reaches_every_member_in_order() {
    let _g = serial();
    let rounds = "1000";
    let outs = run_group(rounds, "0x6802", "0x6812", "dma", "1,2,3", &[], &[]);
    check_all(&outs, rounds);
    for (i, k) in [(1, 1), (2, 2), (3, 3)] {
        if let Some(o) = outs.get(i) {
            o.assert_contains(&format!("MEMBER {k} DONE rounds={rounds}"));
        }
    }
}

/// Member 3 kills itself at round 300: the writer's group drops it and
/// members 1 and 2 still get every round, in order.
#[test]
fn a_member_killed_mid_run() {
    let _g = serial();
    let rounds = "1500";
    let outs = run_group(rounds, "0x6803", "0x6813", "pio", "1,2", &[], &["die-at", "300"]);
    check_all(&outs, rounds);
    for (i, k) in [(1, 1), (2, 2)] {
        if let Some(o) = outs.get(i) {
            o.assert_contains(&format!("MEMBER {k} DONE rounds={rounds}"));
        }
    }
}

/// A map with SCI_FLAG_NO_MEMORY_LOOPBACK_MAP: members 2 and 3 get every
/// round, the member on the writer's node nothing.
#[test]
fn no_loopback_map_leaves_the_writers_node_out() {
    let _g = serial();
    let rounds = "500";
    let outs = run_group(rounds, "0x6804", "0x6814", "pio-noloop", "2,3", &["hold", "8"], &[]);
    check_all(&outs, rounds);
    if let Some(o) = outs.get(1) {
        o.assert_contains("MEMBER 1 UNTOUCHED");
    }
    for (i, k) in [(2, 2), (3, 3)] {
        if let Some(o) = outs.get(i) {
            o.assert_contains(&format!("MEMBER {k} DONE rounds={rounds}"));
        }
    }
}

/// Member 3 creates its segment halfway through, long after the writer
/// connected to the group: the writer's group finds it and it receives
/// what is written after that (the last round, checked whole).
#[test]
fn a_member_that_joins_late() {
    let _g = serial();
    let rounds = "1000";
    let (group, ack) = ("0x6805", "0x6815");
    let Some(c) = Cluster::start(&[1, 2, 3]) else { return };
    let m1 = member(&c, 1, 1, rounds, group, ack, &[]);
    let m2 = member(&c, 2, 2, rounds, group, ack, &[]);
    let mut w = spawn(&c, 1, &["writer", rounds, group, ack, "1,2", "pio", "late", "3"]);
    w.wait_line("WRITER WAITS FOR MEMBER 3", LINE_TIMEOUT);
    let m3 = member(&c, 3, 3, rounds, group, ack, &["join"]);
    let outs = run_together(vec![w, m1, m2, m3], RUN);
    check_all(&outs, rounds);
    outs[1].assert_contains(&format!("MEMBER 1 DONE rounds={rounds}"));
    outs[2].assert_contains(&format!("MEMBER 2 DONE rounds={rounds}"));
    outs[3].assert_contains("MEMBER 3 JOINED LATE").assert_contains("MEMBER 3 GOT BYE");
    for id in [1, 2, 3] {
        c.wait_clean(id, "after the late member");
    }
}
