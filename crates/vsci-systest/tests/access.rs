//! Who may use a node: the control socket's group and mode
//! (`--socket-group`, `--socket-mode`), and the error a refused user gets.
//!
//! Runs as root (as the suite does): each test creates a temporary group and
//! two users — one in the group, one not — and runs clients as them with
//! `setpriv`; the users and the group are deleted on drop, also when the
//! test fails.

mod common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::*;

fn t_nodegone() -> std::path::PathBuf {
    built("tests/t_nodegone")
}

/// By default only the daemon's user may connect; anyone else gets
/// SCI_ERR_ACCESS and a message naming the socket and the permission.
#[test]
fn default_socket_is_owner_only_and_a_refusal_says_why() {
    let Some(u) = Users::new() else { return };
    let d = Daemon::start(31);
    let meta = std::fs::metadata(&d.socket).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "default socket mode");

    let out = u.as_user(&u.outsider, &d, &t_nodegone(), &["open"]);
    assert_eq!(out.status.code(), Some(3), "{}", out.describe());
    out.assert_contains("OPEN SCI_ERR_ACCESS");
    out.assert_contains("permission denied connecting to vscid at");
    out.assert_contains(&d.socket.display().to_string());
    out.assert_contains("write permission");
    assert!(!out.stderr.contains("is the node running"), "{}", out.describe());

    let out = u.as_user(&u.outsider, &d, &built("bin/vsci"), &["status", "--socket", &d.socket.display().to_string()]);
    assert!(!out.status.success(), "{}", out.describe());
    out.assert_contains("permission denied on vscid's socket");

    // The owner (root here) still gets in.
    run("t_nodegone open as root", d.client(&t_nodegone()).arg("open"), Duration::from_secs(60))
        .assert_success()
        .assert_contains("OPEN SCI_ERR_OK");
}

/// `--socket-group` lets the group's members in (mode 0660) and nobody else.
#[test]
fn socket_group_lets_members_in() {
    let Some(u) = Users::new() else { return };
    let d = Daemon::start_with(32, &["--socket-group", &u.group]);
    let meta = std::fs::metadata(&d.socket).unwrap();
    assert_eq!((meta.gid(), meta.mode() & 0o777), (u.gid, 0o660), "socket group and mode");

    u.as_user(&u.member, &d, &t_nodegone(), &["open"]).assert_success().assert_contains("OPEN SCI_ERR_OK");
    let out = u.as_user(
        &u.member,
        &d,
        &built("bin/vsci"),
        &["status", "--socket", &d.socket.display().to_string(), "--json"],
    );
    out.assert_success();
    let out = u.as_user(&u.outsider, &d, &t_nodegone(), &["open"]);
    assert_eq!(out.status.code(), Some(3), "{}", out.describe());
    out.assert_contains("OPEN SCI_ERR_ACCESS");

    // A member's whole session works, not just the connect.
    let out = u.as_user(&u.member, &d, &built("tests/t_kill"), &["smoke"]);
    out.assert_success().assert_contains("SMOKE OK");
}

/// `--socket-mode` sets the mode outright (0666: every local user).
#[test]
fn socket_mode_opens_the_node_to_everyone() {
    let Some(u) = Users::new() else { return };
    let d = Daemon::start_with(33, &["--socket-mode", "0666"]);
    assert_eq!(std::fs::metadata(&d.socket).unwrap().mode() & 0o777, 0o666);
    u.as_user(&u.outsider, &d, &t_nodegone(), &["open"]).assert_success().assert_contains("OPEN SCI_ERR_OK");
}

/// A group that does not exist stops the node at start, saying so.
#[test]
fn unknown_group_refuses_to_start() {
    let dir = TempDir::new("badgroup");
    let mut d = Daemon::spawn_at(&dir.path.join("s.sock"), 34, &["--socket-group", "no-such-group-vsci"]);
    let st = d.wait_exit(Duration::from_secs(30));
    assert_eq!(st.code(), Some(1));
    assert!(d.log_text().contains("no such group"), "{}", d.log_text());
}

/// `--connect-policy uid`: only programs of the creator's uid may connect
/// to its segments (SCI_ERR_ACCESS for others); `any` is SISCI's rule.
#[test]
fn connect_policy_restricts_connects_to_the_creators_uid() {
    let Some(u) = Users::new() else { return };
    for (policy, node, outsider_gets) in [("uid", 35, "TAKE SCI_ERR_ACCESS"), ("any", 36, "TAKE SCI_ERR_OK")] {
        let d = Daemon::start_with(node, &["--socket-mode", "0666", "--connect-policy", policy]);
        let mut offer = Proc::spawn("t_nodegone offer", d.client(&t_nodegone()).args(["offer", "0x5151"]));
        offer.wait_line("READY", LINE_TIMEOUT);
        u.as_user(&u.outsider, &d, &t_nodegone(), &["take", "0x5151"]).assert_success().assert_contains(outsider_gets);
        run("t_nodegone take as root", d.client(&t_nodegone()).args(["take", "0x5151"]), Duration::from_secs(60))
            .assert_success()
            .assert_contains("TAKE SCI_ERR_OK");
    }
}
