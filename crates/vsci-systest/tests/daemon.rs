//! The daemon under abuse: clients killed with SIGKILL, a second daemon on a
//! live socket, a stale socket after the daemon itself was killed, SIGTERM
//! with clients still connected, and malformed messages on the control
//! socket.  The C side of these is tests/c/t_kill.c.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn t_kill() -> PathBuf {
    built("tests/t_kill")
}

/// A short, complete client session must work.
fn smoke(d: &Daemon) {
    let out = run("t_kill smoke", d.client(&t_kill()).arg("smoke"), PROGRAM_TIMEOUT);
    out.assert_success().assert_contains("SMOKE OK");
    out.assert_contains(&format!("node={}", d.node_id));
}

/// A victim holding a segment, an interrupt, a data interrupt, maps and a
/// connection is killed with SIGKILL.  The observer (whose segment the victim
/// had connected to, and which had connected to the victim's segment and
/// interrupts) must get DISCONNECT and LOST and NOT_CONNECTED; the daemon
/// must release everything: its object counts and its open descriptors
/// return to the baseline.  Three rounds, so a leak per round shows.
#[test]
fn sigkill_client_released_and_peers_told() {
    let mut d = Daemon::start(14);
    let base = d.counts();
    let base_fds = d.settled_fd_count();
    for round in 0..3 {
        let (obs_seg, victim_seg) = ((0x7100 + round * 2).to_string(), (0x7101 + round * 2).to_string());
        let mut oc = d.client(&t_kill());
        oc.args(["observer", &obs_seg, &victim_seg]);
        let mut observer = Proc::spawn("t_kill observer", &mut oc);
        let mut vc = d.client(&t_kill());
        vc.args(["victim", &obs_seg, &victim_seg]);
        let mut victim = Proc::spawn("t_kill victim", &mut vc);
        victim.wait_line("VICTIM READY", LINE_TIMEOUT);
        observer.wait_line("OBSERVER READY", LINE_TIMEOUT);

        // While both live the node holds their objects.
        let mid = d.counts();
        assert!(mid.clients >= base.clients + 2, "round {round}: {mid:?} vs baseline {base:?}");
        assert!(mid.segments >= base.segments + 2, "round {round}: {mid:?} vs baseline {base:?}");
        assert!(mid.interrupts > base.interrupts, "round {round}: {mid:?} vs baseline {base:?}");
        assert!(mid.connections >= base.connections + 2, "round {round}: {mid:?} vs baseline {base:?}");
        assert!(d.fd_count() > base_fds, "round {round}: the daemon holds no descriptors for its clients?");

        victim.signal(libc::SIGKILL);
        let v = victim.wait(LINE_TIMEOUT);
        assert_eq!(v.status.signal_number(), Some(libc::SIGKILL), "{}", v.describe());

        let o = observer.wait(PROGRAM_TIMEOUT);
        o.assert_success();
        o.assert_contains("OBSERVER GOT LOST");
        o.assert_contains(&format!("OBSERVER GOT DISCONNECT node={}", d.node_id));
        o.assert_contains("OBSERVER GOT NOT_CONNECTED");
        o.assert_contains("OBSERVER DONE");

        d.assert_running();
        d.wait_counts(base, &format!("round {round}: after SIGKILL of the victim"));
        d.wait_fd_count(base_fds, &format!("round {round}: after SIGKILL of the victim"));
    }
    smoke(&d);
    d.wait_counts(base, "after the smoke client");
}

trait SignalNumber {
    fn signal_number(&self) -> Option<i32>;
}

impl SignalNumber for std::process::ExitStatus {
    fn signal_number(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.signal()
    }
}

/// A second vscid on a socket a live vscid serves refuses to start, and the
/// first one goes on serving.
#[test]
fn second_daemon_on_live_socket_refuses() {
    let mut d = Daemon::start(15);
    let second = run(
        "second vscid",
        Command::new(built("bin/vscid")).args(["--node-id", "16", "--socket"]).arg(&d.socket).stdin(Stdio::null()),
        Duration::from_secs(60),
    );
    assert!(!second.status.success(), "a second vscid started on a live socket\n{}", second.describe());
    println!("second vscid said: {}{}", second.stdout, second.stderr);
    d.assert_running();
    assert!(d.socket.exists(), "the refused daemon removed the live socket");
    let st = d.status();
    assert_eq!(st.get("node_id").and_then(|v| v.as_u64()), Some(15), "{st:#}");
    smoke(&d);
}

/// After vscid is killed with SIGKILL its socket file stays behind; a new
/// vscid on the same path starts anyway and serves clients.
#[test]
fn stale_socket_is_recovered() {
    let dir = TempDir::new("stale");
    let socket = dir.path.join("vscid.sock");
    let mut first = Daemon::start_at(&socket, 17);
    smoke(&first);
    first.kill9();
    assert!(socket.exists(), "expected the dead daemon's socket file to stay behind");
    assert!(seqpacket_connect(&socket).is_none(), "nobody should accept on the stale socket");

    let second = Daemon::start_at(&socket, 18);
    let st = second.status();
    assert_eq!(st.get("node_id").and_then(|v| v.as_u64()), Some(18), "{st:#}");
    smoke(&second);
    drop(second);
    drop(first);
}

/// SIGTERM with clients connected: a client with a remote segment gets
/// SCI_CB_LOST, vscid exits 0 and removes its socket.
#[test]
fn sigterm_tells_clients_and_exits_cleanly() {
    let mut d = Daemon::start(19);
    let mut oc = d.client(&t_kill());
    oc.args(["term-owner", "0x7200"]);
    let mut owner = Proc::spawn("t_kill term-owner", &mut oc);
    owner.wait_line("OWNER READY", LINE_TIMEOUT);
    let mut cc = d.client(&t_kill());
    cc.args(["term-connector", "0x7200"]);
    let mut connector = Proc::spawn("t_kill term-connector", &mut cc);
    connector.wait_line("CONNECTOR READY", LINE_TIMEOUT);

    d.signal(libc::SIGTERM);
    let st = d.wait_exit(Duration::from_secs(60));
    assert_eq!(st.code(), Some(0), "vscid after SIGTERM: {}\n--- log ---\n{}", describe_status(st), d.log_text());
    assert!(!d.socket.exists(), "vscid left its socket {} behind after SIGTERM", d.socket.display());

    let c = connector.wait(PROGRAM_TIMEOUT);
    c.assert_success().assert_contains("CONNECTOR GOT LOST");
    // The owner has nothing to wait for; it is killed when dropped.
    drop(owner);
}

/// Garbage on the control socket: the daemon drops that connection (closing
/// any descriptors it was sent), keeps running, and serves a normal client.
#[test]
fn malformed_messages_drop_only_that_connection() {
    let mut d = Daemon::start(20);
    let base = d.counts();
    let base_fds = d.settled_fd_count();

    let mut garbage: Vec<(&str, Vec<u8>)> = vec![
        ("one byte", vec![0xff]),
        ("zeros", vec![0u8; 64]),
        ("all ones", vec![0xffu8; 4096]),
        ("length fields of 2^32-1", [0xff, 0xff, 0xff, 0xff].repeat(16)),
        ("text", b"GET / HTTP/1.0\r\n\r\n".to_vec()),
        ("big packet", (0..60000u32).map(|i| (i * 7 + 3) as u8).collect()),
    ];
    // Pseudo-random packets of many lengths.
    let mut x: u64 = 0x2545F4914F6CDD1D;
    for len in [2usize, 3, 5, 8, 13, 31, 100, 257, 1000] {
        let bytes = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        garbage.push(("random", bytes));
    }

    for (what, bytes) in &garbage {
        let fd = seqpacket_connect(&d.socket).expect("connect to vscid");
        send_packet(fd, bytes, &[]).unwrap_or_else(|e| panic!("send {what}: {e}"));
        let n = expect_dropped(fd, Duration::from_secs(30), &format!("{what} ({} bytes)", bytes.len()));
        println!("{what} ({} bytes): dropped after the daemon sent {n} bytes", bytes.len());
        close_fd(fd);
        d.assert_running();
    }

    // Garbage with descriptors attached: they must not leak in the daemon.
    for round in 0..5 {
        let mut p = [0i32; 2];
        // SAFETY: p has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        let fd = seqpacket_connect(&d.socket).expect("connect to vscid");
        send_packet(fd, &[0xab; 32], &[p[0], p[1]]).expect("send with SCM_RIGHTS");
        expect_dropped(fd, Duration::from_secs(30), &format!("garbage with fds, round {round}"));
        close_fd(fd);
        close_fd(p[0]);
        close_fd(p[1]);
        d.assert_running();
    }

    // A connection that sends nothing and hangs up.
    let fd = seqpacket_connect(&d.socket).expect("connect to vscid");
    close_fd(fd);

    d.assert_running();
    smoke(&d);
    d.wait_counts(base, "after malformed messages");
    d.wait_fd_count(base_fds, "after malformed messages");
}
