//! The `vsci` command itself: `demo` (the README's main job) and a
//! seconds-long smoke run of `bench`. Nothing here asserts a timing.

mod common;

use std::process::Command;

use common::*;

#[test]
fn demo_moves_data_and_interrupts() {
    let out = run(
        "vsci demo",
        Command::new(built("bin/vsci")).args(["demo", "--round-trips", "200", "--stream-bytes", "16777216"]),
        PROGRAM_TIMEOUT,
    );
    out.assert_success()
        .assert_contains("0 wrong")
        .assert_contains("interrupt ping-pong")
        .assert_contains("segment event: Disconnect")
        .assert_contains("demo finished");
}

#[test]
fn status_lists_what_a_node_holds() {
    let d = Daemon::start(9);
    let out = run("vsci status", Command::new(built("bin/vsci")).arg("status").arg("--socket").arg(&d.socket), PROGRAM_TIMEOUT);
    out.assert_success().assert_contains("node 9").assert_contains("segments (0)");
    let out = run("vsci status (no node)", Command::new(built("bin/vsci")).args(["status", "--socket", "/nonexistent/vscid.sock"]), PROGRAM_TIMEOUT);
    assert!(!out.status.success(), "status against a missing node must fail: {}", out.describe());
    out.assert_contains("cannot reach vscid");
}

#[test]
fn bench_quick_smoke_run_writes_json() {
    let dir = TempDir::new("bench");
    let json = dir.path.join("bench.json");
    let out = run(
        "vsci bench --quick",
        Command::new(built("bin/vsci")).args(["bench", "--quick", "--json"]).arg(&json).arg("--bench-dir").arg(build_dir().join("bench")),
        PROGRAM_TIMEOUT,
    );
    out.assert_success();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("bench wrote its JSON")).expect("valid JSON");
    assert!(v.is_object(), "bench JSON is an object: {v}");
}

/// The acceptance path for users: an unmodified SISCI program builds with
/// `cc prog.c $(pkg-config --cflags --libs sisci)` (here against the staged
/// build's sisci.pc) and runs between two processes of one node.
#[test]
fn pkg_config_builds_an_unmodified_program() {
    let dir = TempDir::new("pkgconfig");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pingpong.c");
    let exe = dir.path.join("pingpong");
    let flags = run(
        "pkg-config",
        Command::new("pkg-config").args(["--cflags", "--libs", "sisci"]).env("PKG_CONFIG_PATH", build_dir().join("lib/pkgconfig")),
        PROGRAM_TIMEOUT,
    );
    flags.assert_success();
    let mut cc = Command::new("cc");
    cc.arg("-O2").arg("-o").arg(&exe).arg(&src).args(flags.stdout.split_whitespace());
    run("cc pingpong.c $(pkg-config --cflags --libs sisci)", &mut cc, PROGRAM_TIMEOUT).assert_success();

    let d = Daemon::start(12);
    let mut server = Proc::spawn("pingpong -server", d.client(&exe).args(["-server", "-n", "1000"]));
    let client = run("pingpong -client", d.client(&exe).args(["-client", "-rn", "12", "-n", "1000"]), PROGRAM_TIMEOUT);
    client.assert_success().assert_contains("median");
    let s = server.wait(PROGRAM_TIMEOUT);
    s.assert_success();
}
