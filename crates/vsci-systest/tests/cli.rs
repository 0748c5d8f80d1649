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
    let out = run(
        "vsci status",
        Command::new(built("bin/vsci")).arg("status").arg("--socket").arg(&d.socket),
        PROGRAM_TIMEOUT,
    );
    out.assert_success().assert_contains("node 9").assert_contains("segments (0)");
    let out = run(
        "vsci status (no node)",
        Command::new(built("bin/vsci")).args(["status", "--socket", "/nonexistent/vscid.sock"]),
        PROGRAM_TIMEOUT,
    );
    assert!(!out.status.success(), "status against a missing node must fail: {}", out.describe());
    out.assert_contains("cannot reach vscid");
}

#[test]
fn bench_quick_smoke_run_writes_json_and_report() {
    let dir = TempDir::new("bench");
    let json = dir.path.join("bench.json");
    let report = dir.path.join("report");
    // --no-install: a test never installs packages; missing peers are
    // reported as missing, which is all this run checks.
    let out = run(
        "vsci bench --quick --report",
        Command::new(built("bin/vsci"))
            .args(["bench", "--quick", "--no-install", "--paths", "local", "--json"])
            .arg(&json)
            .arg("--report")
            .arg(&report)
            .arg("--bench-dir")
            .arg(build_dir().join("bench")),
        PROGRAM_TIMEOUT,
    );
    out.assert_success();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("bench wrote its JSON")).expect("valid JSON");
    assert!(v["paths"]["local"]["sisci_bench"].is_object(), "bench JSON has the local sisci_bench results: {v}");
    assert!(v["machine"]["cores"].as_u64().is_some(), "bench JSON describes the machine: {v}");
    // dma_bench ran on the host: every section came back, sizes as integers.
    let dma = &v["paths"]["local"]["dma"];
    for sect in ["setup", "single", "bursts", "notify", "calls"] {
        assert!(dma[sect].as_array().is_some_and(|a| !a.is_empty()), "dma_bench section {sect}: {dma}");
    }
    assert_eq!(dma["failures"], 0, "{dma}");
    assert!(
        v["dma"]["rows"].as_array().is_some_and(|r| r
            .iter()
            .any(|x| x["what"] == "single transfer 512 KiB, write" && x["host"].as_f64().is_some())),
        "{}",
        v["dma"]
    );
    let md = std::fs::read_to_string(report.join("benchmarks.md")).expect("report wrote benchmarks.md");
    for part in ["## The machine and the run", "## Local path", "thesis 5.1", "Seed 001", "## DMA engine (seed 003)"] {
        assert!(md.contains(part), "benchmarks.md has {part:?}:\n{md}");
    }
    let saved: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(report.join("bench/results.json")).expect("report wrote results.json"),
    )
    .expect("valid JSON");
    assert!(saved["paths"]["local"].is_object());
    assert!(report.join("bench/results.txt").exists(), "report wrote results.txt");
    // Plots need a TrueType font (fonts-dejavu-core); without one the run
    // says so and the Markdown has no plots, which is not a failure.
    if std::path::Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists() {
        let png = std::fs::read(report.join("bench/bandwidth.png")).expect("report wrote bandwidth.png");
        assert!(png.starts_with(b"\x89PNG"), "bandwidth.png is a PNG");
    }
}

#[test]
fn bench_names_the_paths_when_one_is_unknown() {
    let out = run(
        "vsci bench --paths nowhere",
        Command::new(built("bin/vsci")).args(["bench", "--paths", "local,nowhere"]),
        PROGRAM_TIMEOUT,
    );
    assert!(!out.status.success(), "an unknown path must fail: {}", out.describe());
    out.assert_contains("unknown path `nowhere`").assert_contains("local").assert_contains("remote");
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
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "sisci"])
            .env("PKG_CONFIG_PATH", build_dir().join("lib/pkgconfig")),
        PROGRAM_TIMEOUT,
    );
    flags.assert_success();
    let mut cc = Command::new("cc");
    cc.arg("-O2").arg("-o").arg(&exe).arg(&src).args(flags.stdout.split_whitespace());
    run("cc pingpong.c $(pkg-config --cflags --libs sisci)", &mut cc, PROGRAM_TIMEOUT).assert_success();

    let d = Daemon::start(12);
    let server = Proc::spawn("pingpong -server", d.client(&exe).args(["-server", "-n", "1000"]));
    let client = run("pingpong -client", d.client(&exe).args(["-client", "-rn", "12", "-n", "1000"]), PROGRAM_TIMEOUT);
    client.assert_success().assert_contains("median");
    let s = server.wait(PROGRAM_TIMEOUT);
    s.assert_success();
}
