//! No panic unwinds out of libsisci into a program, nor ends a worker of
//! vscid (issue 36). libsisci: tests/c/t_panic.c with `VSCI_TEST_PANIC`
//! naming the entry points that must panic (crates/sisci/src/guard.rs);
//! every function libsisci exports must be among those seen to catch a
//! panic. vscid: a test build's debug request that panics in its handler
//! (crates/vscid/src/registry.rs) must answer that one request with an
//! error and leave the node serving.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::*;

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
        .filter_map(|l| l.split_once(": caught a panic").map(|(head, _)| head.rsplit(' ').next().unwrap_or("").to_string()))
        .collect();
    println!("t_panic {mode}: caught in {caught:?}");
    caught
}

/// The functions libsisci.so exports (Dolphin's `_SISCI_PUBLIC_FUNC_`
/// forwarders aside: each only calls the plain-named function, and
/// `t_panic api` calls one to show the guard is reached through it).
fn exported_functions() -> BTreeSet<String> {
    let out = run("nm", Command::new("nm").args(["-D", "--defined-only"]).arg(built("lib/libsisci.so")), Duration::from_secs(60));
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
