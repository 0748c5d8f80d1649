//! The examples (examples/*.c, built to build/examples/), each as a server
//! and a client process against a fresh vscid.

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;

fn example(name: &str) -> PathBuf {
    built(&format!("examples/{name}"))
}

/// Start the server, then the client; both must exit 0.  Returns (server, client).
fn server_client(d: &Daemon, name: &str, server_args: &[&str], client_args: &[&str]) -> (Output, Output) {
    let mut sc = d.client(&example(name));
    sc.arg("-server").args(server_args);
    let server = Proc::spawn(&format!("{name} -server"), &mut sc);
    let mut cc = d.client(&example(name));
    cc.arg("-client").args(client_args);
    let client = Proc::spawn(&format!("{name} -client"), &mut cc);
    let c = client.wait(PROGRAM_TIMEOUT);
    let s = server.wait(PROGRAM_TIMEOUT);
    println!("{}\n{}", s.stdout, c.stdout);
    s.assert_success();
    c.assert_success();
    (s, c)
}

/// After an example the node holds nothing of it any more.
fn assert_clean(d: &mut Daemon, base: Counts, what: &str) {
    d.assert_running();
    d.wait_counts(base, what);
}

#[test]
fn shmem() {
    let mut d = Daemon::start(2);
    let base = d.counts();
    let (s, c) = server_client(&d, "shmem", &["-size", "3m"], &["-rn", "2", "-size", "3m"]);
    s.assert_contains("all 3145728 bytes are correct");
    s.assert_contains("DISCONNECT");
    c.assert_contains("server verified every byte");
    c.assert_contains("MB/s");
    assert_clean(&mut d, base, "shmem");
}

/// The client may start first: its connect waits for the server's segment.
#[test]
fn shmem_client_first() {
    let mut d = Daemon::start(9);
    let base = d.counts();
    let mut cc = d.client(&example("shmem"));
    cc.args(["-client", "-size", "64k"]);
    let mut client = Proc::spawn("shmem -client", &mut cc);
    client.wait_line("connecting to segment", LINE_TIMEOUT);
    let mut sc = d.client(&example("shmem"));
    sc.args(["-server", "-size", "64k"]);
    let server = Proc::spawn("shmem -server", &mut sc);
    let c = client.wait(PROGRAM_TIMEOUT);
    let s = server.wait(PROGRAM_TIMEOUT);
    s.assert_success().assert_contains("all 65536 bytes are correct");
    c.assert_success().assert_contains("server verified every byte");
    assert_clean(&mut d, base, "shmem_client_first");
}

#[test]
fn interrupt() {
    let mut d = Daemon::start(3);
    let base = d.counts();
    let (s, c) = server_client(&d, "interrupt", &["-loops", "500"], &["-loops", "500", "-rn", "3"]);
    s.assert_contains("500 round trips").assert_contains("average round trip");
    c.assert_contains("500 round trips").assert_contains("average round trip");
    assert_clean(&mut d, base, "interrupt");
}

#[test]
fn datainterrupt() {
    let mut d = Daemon::start(4);
    let base = d.counts();
    let (s, c) = server_client(&d, "datainterrupt", &[], &[]);
    s.assert_contains("1024 messages, 524800 payload bytes received and echoed, all correct");
    c.assert_contains("1024 messages (1..1024 bytes)").assert_contains("all echoes correct");
    assert_clean(&mut d, base, "datainterrupt");
}

#[test]
fn memcopy() {
    let mut d = Daemon::start(5);
    let base = d.counts();
    let (s, c) = server_client(&d, "memcopy", &["-size", "8m"], &["-size", "8m"]);
    s.assert_contains("data from the client: checksum").assert_contains("matches");
    s.assert_contains("client read back the data intact");
    c.assert_contains("server says the written data arrived intact");
    c.assert_contains("SCIMemCpy read 8388608 bytes");
    assert_clean(&mut d, base, "memcopy");
}

/// Two chat processes fed from files: each prints all of the other's lines,
/// in order, and both exit after both inputs ended.
#[test]
fn chat() {
    let mut d = Daemon::start(6);
    let base = d.counts();
    let dir = TempDir::new("chat");
    let server_lines: Vec<String> = (1..=300).map(|i| format!("server says {i}")).collect();
    let mut client_lines: Vec<String> = (1..=120).map(|i| format!("client says {i}")).collect();
    client_lines.push("x".repeat(3000)); // longer than one ring slot
    client_lines.push(String::new()); // an empty line
    client_lines.push("last from client".into());
    fs::write(dir.path.join("server.in"), server_lines.join("\n") + "\n").unwrap();
    fs::write(dir.path.join("client.in"), client_lines.join("\n") + "\n").unwrap();

    let mut sc = d.client(&example("chat"));
    sc.arg("-server").stdin(Stdio::from(fs::File::open(dir.path.join("server.in")).unwrap()));
    let server = Proc::spawn("chat -server", &mut sc);
    let mut cc = d.client(&example("chat"));
    cc.arg("-client").stdin(Stdio::from(fs::File::open(dir.path.join("client.in")).unwrap()));
    let client = Proc::spawn("chat -client", &mut cc);
    let c = client.wait(PROGRAM_TIMEOUT);
    let s = server.wait(PROGRAM_TIMEOUT);
    s.assert_success();
    c.assert_success();
    let got_by_server: Vec<&str> = s.stdout.lines().collect();
    let want_by_server: Vec<String> = client_lines.iter().map(|l| format!("peer: {l}")).collect();
    assert_eq!(got_by_server, want_by_server, "server's output\n{}", s.describe());
    let got_by_client: Vec<&str> = c.stdout.lines().collect();
    let want_by_client: Vec<String> = server_lines.iter().map(|l| format!("peer: {l}")).collect();
    assert_eq!(got_by_client, want_by_client, "client's output\n{}", c.describe());
    assert_clean(&mut d, base, "chat");
}

/// One side has nothing to say (stdin is empty): both still finish.
#[test]
fn chat_one_side_silent() {
    let mut d = Daemon::start(16);
    let base = d.counts();
    let dir = TempDir::new("chat1");
    fs::write(dir.path.join("client.in"), "only the client talks\n").unwrap();
    let mut sc = d.client(&example("chat"));
    sc.arg("-server").stdin(Stdio::null());
    let server = Proc::spawn("chat -server", &mut sc);
    let mut cc = d.client(&example("chat"));
    cc.arg("-client").stdin(Stdio::from(fs::File::open(dir.path.join("client.in")).unwrap()));
    let client = Proc::spawn("chat -client", &mut cc);
    let c = client.wait(PROGRAM_TIMEOUT);
    let s = server.wait(PROGRAM_TIMEOUT);
    s.assert_success();
    c.assert_success();
    assert_eq!(s.stdout.trim_end(), "peer: only the client talks", "{}", s.describe());
    assert_eq!(c.stdout, "", "{}", c.describe());
    assert_clean(&mut d, base, "chat_one_side_silent");
}

fn sendrecv(node: u32, bytes: &str, expect: &[&str]) {
    let mut d = Daemon::start(node);
    let base = d.counts();
    let mut rc = d.client(&example("sendrecv"));
    rc.arg("-receiver");
    let receiver = Proc::spawn("sendrecv -receiver", &mut rc);
    let mut sc = d.client(&example("sendrecv"));
    sc.args(["-sender", "-bytes", bytes]);
    let sender = Proc::spawn("sendrecv -sender", &mut sc);
    let s = sender.wait(PROGRAM_TIMEOUT);
    let r = receiver.wait(PROGRAM_TIMEOUT);
    println!("{}\n{}", r.stdout, s.stdout);
    r.assert_success();
    s.assert_success();
    for size in expect {
        let verified = r.stdout.lines().any(|l| l.contains(&format!(" {size} bytes in ")) && l.contains("MB/s"));
        assert!(verified, "receiver did not report a verified {size}-byte transfer\n{}", r.describe());
        let sent = s.stdout.lines().any(|l| l.contains(&format!(" {size} bytes in ")) && l.contains("MB/s"));
        assert!(sent, "sender did not report a {size}-byte transfer\n{}", s.describe());
    }
    assert_eq!(r.stdout.matches("verified, every byte").count(), expect.len(), "{}", r.describe());
    assert_clean(&mut d, base, "sendrecv");
}

/// 4 KB and 2 MB through the default 128 MB window.
#[test]
fn sendrecv_4k_2m() {
    sendrecv(11, "4k,2m", &["4096", "2097152"]);
}

/// 1 GB through the 128 MB window (16 chunks of 64 MB, every byte checked).
#[test]
fn sendrecv_1g() {
    sendrecv(12, "1g", &["1073741824"]);
}

/// A small window and many slots: a transfer that does not divide evenly.
#[test]
fn sendrecv_small_window() {
    let mut d = Daemon::start(13);
    let mut rc = d.client(&example("sendrecv"));
    rc.args(["-receiver", "-window", "64k"]);
    let receiver = Proc::spawn("sendrecv -receiver", &mut rc);
    let mut sc = d.client(&example("sendrecv"));
    sc.args(["-sender", "-bytes", "1000,1000003", "-slots", "4"]);
    let sender = Proc::spawn("sendrecv -sender", &mut sc);
    let s = sender.wait(PROGRAM_TIMEOUT);
    let r = receiver.wait(PROGRAM_TIMEOUT);
    r.assert_success().assert_contains("1000003 bytes in");
    s.assert_success().assert_contains("1000003 bytes in");
    d.assert_running();
}

/// -copy (seed 001's way: copy in from a local buffer, copy out, check at
/// the end) through a window smaller than the transfer, with one slot.
#[test]
fn sendrecv_copy_mode() {
    let mut d = Daemon::start(17);
    let mut rc = d.client(&example("sendrecv"));
    rc.args(["-receiver", "-window", "256k"]);
    let receiver = Proc::spawn("sendrecv -receiver", &mut rc);
    let mut sc = d.client(&example("sendrecv"));
    sc.args(["-sender", "-bytes", "4k,1000003", "-slots", "1", "-copy"]);
    let sender = Proc::spawn("sendrecv -sender", &mut sc);
    let s = sender.wait(PROGRAM_TIMEOUT);
    let r = receiver.wait(PROGRAM_TIMEOUT);
    r.assert_success().assert_contains("copied out").assert_contains("1000003 bytes in");
    s.assert_success().assert_contains("1000003 bytes in");
    assert_eq!(r.stdout.matches("verified, every byte").count(), 2, "{}", r.describe());
    d.assert_running();
}

/// Usage errors exit non-zero with a message, without a daemon.
#[test]
fn examples_reject_bad_arguments() {
    for name in ["shmem", "interrupt", "datainterrupt", "memcopy", "chat", "sendrecv", "pingpong"] {
        let out = run(name, Command::new(example(name)).arg("-bogus").stdin(Stdio::null()), PROGRAM_TIMEOUT);
        assert!(!out.status.success(), "{}", out.describe());
        out.assert_contains("usage");
    }
}

/// The classic ping-pong (plain stores into the peer's segment, busy-wait on
/// one's own) between two processes of one node.
#[test]
fn pingpong_on_one_node() {
    let mut d = Daemon::start(2);
    let base = d.counts();
    let (s, c) =
        server_client(&d, "pingpong", &["-n", "2000", "-size", "256"], &["-rn", "2", "-n", "2000", "-size", "256"]);
    s.assert_success();
    c.assert_success().assert_contains("median");
    assert_clean(&mut d, base, "after pingpong");
}
