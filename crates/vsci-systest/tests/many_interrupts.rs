//! Many interrupts in one process: what each costs the node, and that
//! triggers still arrive.
//!
//! One client on node 1 of a two-node loopback cluster creates 5,000
//! interrupts (half plain, half data) through the client library, the
//! node's shared memory and descriptors are read from /proc before and
//! after, and every 100th interrupt of each kind is triggered (plain, and a
//! data message of its own) from the same node and from node 2 (the RMA
//! engine's path), and each trigger is waited for. The node packs each
//! creator's interrupts into arena chunks of slots: a plain interrupt is
//! 192 bytes of a shared page, a data interrupt's control words sit on a
//! page of their own and its ring is allocated only as messages pass. So
//! the node's shared memory grows by well under 1 KiB per plain interrupt
//! and about 4 KiB per data interrupt (68 KiB each before the ring was
//! separated), and by one descriptor per interrupt (its eventfd) plus one
//! per chunk (two each before the chunks): the test holds the node to that.
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test many_interrupts

mod common;

use std::time::Duration;

use common::*;
use vsci_client::{Client, DataWait, IntrKind};

const N: usize = 5000;

/// A `/proc/PID/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read the node's status");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Raise our descriptor limit to its hard limit; false if that is too
/// low for the test (each interrupt costs this process one descriptor).
fn enough_descriptors(want: u64) -> bool {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit write or read the one struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return false;
        }
        r.rlim_cur = r.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
            return false;
        }
    }
    r.rlim_cur >= want
}

#[test]
fn five_thousand_interrupts_in_one_process() {
    if !enough_descriptors(N as u64 + 500) {
        eprintln!("SKIPPED: the descriptor limit is below {}", N + 500);
        return;
    }
    let (_dir, d, other) = loopback_pair(&["--max-objects-per-client", "20000", "--max-objects-per-uid", "20000"]);
    let c = Client::connect(&d.socket, "many-interrupts").expect("connect to node 1");
    let far = Client::connect(&other.socket, "many-interrupts-far").expect("connect to node 2");
    // The baseline is taken once node 2 has reached node 1's engine (the
    // link and the engine's connections cost node 1 descriptors of their
    // own): one probe interrupt, triggered from node 2, then removed.
    let probe = c.create_interrupt(IntrKind::Plain, 0, false).unwrap();
    let ri = far.connect_interrupt(IntrKind::Plain, d.node_id, probe.number, 20_000).expect("node 2 reaches node 1");
    ri.trigger().unwrap();
    probe.wait(10_000).expect("the probe trigger from node 2");
    ri.disconnect().unwrap();
    probe.remove().unwrap();
    drop((ri, probe));
    // Past the engine's 2 s grace for ended connections' tokens.
    std::thread::sleep(Duration::from_millis(2500));
    let (fds0, shmem0) = (d.fd_count(), status_kib(d.pid(), "RssShmem:"));

    let mut intrs = Vec::with_capacity(N);
    let mut before = (fds0, shmem0);
    for (kind, most_kib) in [(IntrKind::Plain, 0.5), (IntrKind::Data, 4.5)] {
        for i in 0..N / 2 {
            intrs.push(c.create_interrupt(kind, 0, false).unwrap_or_else(|e| panic!("{kind:?} interrupt {i}: {e:?}")));
        }
        let after = (d.fd_count(), status_kib(d.pid(), "RssShmem:"));
        let per_intr_kib = (after.1.saturating_sub(before.1)) as f64 / (N / 2) as f64;
        let per_intr_fds = (after.0.saturating_sub(before.0)) as f64 / (N / 2) as f64;
        eprintln!(
            "{} {kind:?} interrupts: vscid shared memory +{} KiB ({per_intr_kib:.2} KiB each), descriptors {} -> {} ({per_intr_fds:.3} each)",
            N / 2,
            after.1 - before.1,
            before.0,
            after.0
        );
        assert!(
            per_intr_kib <= most_kib,
            "each {kind:?} interrupt should cost the node at most {most_kib} KiB, not {per_intr_kib:.2} KiB"
        );
        assert!(per_intr_fds <= 1.05, "each {kind:?} interrupt should cost the node one descriptor and a share of a chunk's, not {per_intr_fds:.3}");
        before = after;
    }

    // A sample of both kinds still works, from this node and from the
    // other, and a data interrupt carries its own bytes.
    let mut buf = [0u8; 1024];
    for (i, li) in intrs.iter().enumerate().filter(|(i, _)| i % 100 < 2) {
        for (from, client) in [("node 1", &c), ("node 2", &far)] {
            // Node 2 may still be linking up at first: the connect waits.
            let ri = client
                .connect_interrupt(li.kind, d.node_id, li.number, 20_000)
                .unwrap_or_else(|e| panic!("{from}: connect to interrupt {i}: {e:?}"));
            match li.kind {
                IntrKind::Plain => {
                    ri.trigger().unwrap();
                    li.wait(10_000).unwrap_or_else(|e| panic!("plain interrupt {i} from {from}: {e:?}"));
                }
                IntrKind::Data => {
                    let msg = format!("message for interrupt {i} from {from}").into_bytes();
                    ri.trigger_data(&msg).unwrap();
                    match li
                        .wait_data(&mut buf, 10_000)
                        .unwrap_or_else(|e| panic!("data interrupt {i} from {from}: {e:?}"))
                    {
                        DataWait::Got(n) => assert_eq!(&buf[..n], &msg[..], "data interrupt {i} from {from}"),
                        DataWait::TooSmall(n) => panic!("data interrupt {i} from {from}: message of {n} bytes"),
                    }
                }
            }
            ri.disconnect().unwrap();
        }
    }

    for li in &intrs {
        li.remove().unwrap();
    }
    drop(intrs);
    // Node 1's engine keeps ended connections' tokens (and their eventfds)
    // for 2 s so a late trigger still lands, and the provider may hold a
    // connection from one of node 2's endpoints a while: allow a few.
    wait_for(Duration::from_secs(30), "node 1's descriptors back near the baseline", || {
        (d.fd_count() <= fds0 + 8).then_some(())
    });
}

/// A connection to a removed interrupt cannot reach the interrupt that
/// takes its slot, seen from programs. (Two things refuse it: the node's
/// event tells the connection, and the slot's new generation refuses it even
/// before that event is read, which vscid's memory tests check alone.)
#[test]
fn a_reused_slot_refuses_connections_to_its_old_interrupt() {
    let d = Daemon::start_with(73, &[]);
    let owner = Client::connect(&d.socket, "slot-owner").expect("connect");
    let other = Client::connect(&d.socket, "slot-user").expect("connect");
    // `keep` holds the chunk open, so the removed slot stays in it.
    let keep = owner.create_interrupt(IntrKind::Plain, 0, false).unwrap();
    let old = owner.create_interrupt(IntrKind::Plain, 0, false).unwrap();
    let stale = other.connect_interrupt(IntrKind::Plain, d.node_id, old.number, 5_000).unwrap();
    stale.trigger().unwrap();
    old.wait(5_000).expect("the trigger before the removal");
    old.remove().unwrap();
    drop(old);
    // Every slot of the chunk, the removed one last.
    let slots = vsci_proto::intr::slots_per_chunk(IntrKind::Plain);
    let fresh: Vec<_> = (0..slots).map(|_| owner.create_interrupt(IntrKind::Plain, 0, false).unwrap()).collect();
    assert_eq!(
        stale.trigger(),
        Err(vsci_client::SciError::NotConnected),
        "a trigger through the removed interrupt's connection"
    );
    for (i, f) in fresh.iter().enumerate() {
        assert_eq!(
            f.wait(0),
            Err(vsci_client::SciError::Timeout),
            "new interrupt {i} saw a trigger meant for the removed one"
        );
    }
    assert_eq!(keep.wait(0), Err(vsci_client::SciError::Timeout));
    // And the new ones work.
    let c = other.connect_interrupt(IntrKind::Plain, d.node_id, fresh[slots - 1].number, 5_000).unwrap();
    c.trigger().unwrap();
    fresh[slots - 1].wait(5_000).expect("a trigger of the interrupt in the reused slot");
}
