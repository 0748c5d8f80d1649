//! No panic unwinds out of libsisci into a program, nor ends a worker of
//! vscid (issue 36). libsisci: tests/c/t_panic.c with `VSCI_TEST_PANIC`
//! naming the entry points that must panic (crates/sisci/src/guard.rs);
//! every function libsisci exports must be among those seen to catch a
//! panic. vscid: with `VSCID_TEST_PANIC` naming a request, its handler
//! panics with the registry locked (crates/vscid/src/recover.rs); each
//! such request must be answered with an error, and the node, its workers
//! and the client must go on.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::*;
use vsci_client::{Client, SciError};

/// The interposers and what `t_panic interposers` calls them with.
const INTERPOSERS: &str = "memcpy,memmove,sigaction,signal,bsd_signal,sysv_signal,__sysv_signal,sigset,sigignore,sighold,sigrelse,siginterrupt,sigprocmask,pthread_sigmask,sigsuspend,syscall";

/// Run `t_panic MODE` with `VSCI_TEST_PANIC=names` (as a client of `d`, or
/// of no node); it must succeed and print "<MODE> OK". The names whose
/// panics the library caught and logged.
fn t_panic(d: Option<&Daemon>, mode: &str, names: &str) -> BTreeSet<String> {
    let prog = built("tests/t_panic");
    let mut cmd = match d {
        Some(d) => d.client(&prog),
        None => {
            let mut c = Command::new(&prog);
            c.env("VSCI_SOCKET", "/nonexistent/vscid.sock").env_remove("VSCI_LOG");
            c
        }
    };
    cmd.arg(mode).env("VSCI_TEST_PANIC", names).env("RUST_BACKTRACE", "0");
    let out = run(&format!("t_panic {mode}"), &mut cmd, Duration::from_secs(120));
    out.assert_success();
    out.assert_contains(&format!("{} OK", mode.to_uppercase()));
    let caught: BTreeSet<String> = out
        .stderr
        .lines()
        .filter_map(|l| {
            l.split_once(": caught a panic").map(|(head, _)| head.rsplit(' ').next().unwrap_or("").to_string())
        })
        .collect();
    println!("t_panic {mode}: caught in {caught:?}");
    caught
}

/// The functions libsisci.so exports (Dolphin's `_SISCI_PUBLIC_FUNC_`
/// forwarders aside: each only calls the plain-named function, and
/// `t_panic api` calls one to show the guard is reached through it).
fn exported_functions() -> BTreeSet<String> {
    let out = run(
        "nm",
        Command::new("nm").args(["-D", "--defined-only"]).arg(built("lib/libsisci.so")),
        Duration::from_secs(60),
    );
    out.assert_success();
    out.stdout
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind == "T" && !name.starts_with("_SISCI_PUBLIC_")).then(|| name.to_string())
        })
        .collect()
}

/// Every function libsisci exports, made to panic, returns to the program
/// with its error (SCI_ERR_SYSTEM, -1/EINVAL, a default value; memcpy
/// copies anyway) instead of aborting it; no function is left out.
#[test]
fn every_exported_function_catches_its_panics() {
    let mut caught = t_panic(None, "api", "*");
    caught.extend(t_panic(None, "interposers", INTERPOSERS));
    let exported = exported_functions();
    assert!(exported.len() > 100, "only {} exported functions: {exported:?}", exported.len());
    let missing: Vec<_> = exported.difference(&caught).collect();
    assert!(missing.is_empty(), "exported functions never seen catching a panic (add them to t_panic.c): {missing:?}");
}

/// SCIFlush and SCIStoreBarrier panicking on every call (their guard logs
/// and swallows it): stores still arrive, everything else works; callback
/// closures panicking: the calls succeed and interrupts can be waited on;
/// the library's constructors panicking: it still works. The node ends
/// with nothing left of the client.
#[test]
fn panics_in_flush_callbacks_and_constructors_leave_the_program_running() {
    let mut d = Daemon::start(61);
    let base = d.counts();
    let flush = t_panic(Some(&d), "flush", "SCIFlush,SCIStoreBarrier");
    assert!(flush.contains("SCIFlush") && flush.contains("SCIStoreBarrier"), "{flush:?}");
    let cbs = "cb_local_segment,cb_remote_segment,cb_interrupt,cb_data_interrupt,cb_dma";
    let caught = t_panic(Some(&d), "callbacks", cbs);
    for cb in cbs.split(',') {
        assert!(caught.contains(cb), "{cb} not seen catching a panic: {caught:?}");
    }
    let caught = t_panic(Some(&d), "load", "at_load,find_next");
    assert!(caught.contains("at_load") && caught.contains("find_next"), "{caught:?}");
    let caught = t_panic(Some(&d), "load", "in_executable");
    assert!(caught.contains("in_executable"), "{caught:?}");
    d.assert_running();
    d.wait_counts(base, "after the t_panic runs");
}

/// A request whose handler panics (with the registry locked) is answered
/// SCI_ERR_SYSTEM, ten times over on two workers: no worker is lost, the
/// lock it poisoned is taken again, the same client and new ones are
/// served, and the panics are logged.
#[test]
fn a_panicking_request_handler_ends_only_that_request() {
    let mut d = Daemon::start_wrapped(62, &["env", "VSCID_TEST_PANIC=ProbeNode"], &["--workers", "2"]);
    let base = d.counts();
    let c = Client::connect(&d.socket, "panics").expect("connect");
    for _ in 0..10 {
        assert_eq!(c.probe_node(62), Err(SciError::System));
    }
    // The same client goes on, with requests that need the registry.
    let seg = c.create_segment_opts(Some(0x62), 4096, false, false).expect("create a segment after the panics");
    assert_eq!(c.probe_node(62), Err(SciError::System));
    seg.remove_with(false).expect("remove it");
    // Other clients are served (`vsci status` too).
    for i in 0..4 {
        let other = Client::connect(&d.socket, &format!("other{i}")).expect("another client");
        other.close();
    }
    c.close();
    d.assert_running();
    d.wait_counts(base, "after the panicking requests");
    let log = d.log_text();
    assert_eq!(log.matches("panicked (VSCID_TEST_PANIC").count(), 11, "{log}");
}
