//! Who may use a node: the control socket's group and mode
//! (`--socket-group`, `--socket-mode`), and the error a refused user gets.
//!
//! Runs as root (as the suite does): each test creates a temporary group and
//! two users — one in the group, one not — and runs clients as them with
//! `setpriv`; the users and the group are deleted on drop, also when the
//! test fails.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;

/// A temporary group and two users: `member` (in the group) and `outsider`.
struct Users {
    group: String,
    gid: u32,
    member: String,
    outsider: String,
}

fn tool(args: &[&str]) -> bool {
    Command::new(args[0]).args(&args[1..]).output().map(|o| o.status.success()).unwrap_or(false)
}

impl Users {
    fn new() -> Option<Users> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: creating users needs root");
            return None;
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let tag = format!("{}{}", std::process::id() % 100000, NEXT.fetch_add(1, Ordering::SeqCst));
        let u = Users { group: format!("vscig{tag}"), gid: 0, member: format!("vscim{tag}"), outsider: format!("vscio{tag}") };
        u.remove(); // left over from a run that was killed
        assert!(tool(&["groupadd", &u.group]), "groupadd {}", u.group);
        let mut u = u;
        u.gid = group_gid(&u.group).expect("gid of the new group");
        assert!(tool(&["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", "-G", &u.group, &u.member]), "useradd {}", u.member);
        assert!(tool(&["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", &u.outsider]), "useradd {}", u.outsider);
        Some(u)
    }

    fn remove(&self) {
        let _ = tool(&["userdel", &self.member]);
        let _ = tool(&["userdel", &self.outsider]);
        let _ = tool(&["groupdel", &self.group]);
    }

    /// `program args` as `user`, with its groups, against `d`'s socket.
    fn as_user(&self, user: &str, d: &Daemon, program: &std::path::Path, args: &[&str]) -> Output {
        let mut c = d.client(std::path::Path::new("setpriv"));
        c.args(["--reuid", user, "--regid", "nogroup", "--init-groups", "--"]).arg(program).args(args);
        run(&format!("{} as {user}", program.display()), &mut c, Duration::from_secs(60))
    }
}

impl Drop for Users {
    fn drop(&mut self) {
        self.remove();
    }
}

fn group_gid(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&name)).then(|| f.get(2)?.parse().ok()).flatten()
    })
}

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
    let out = u.as_user(&u.member, &d, &built("bin/vsci"), &["status", "--socket", &d.socket.display().to_string(), "--json"]);
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
