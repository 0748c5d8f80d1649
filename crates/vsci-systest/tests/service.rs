//! The service: `make install` installs the systemd unit, the sysusers
//! entry and the examples; the unit and sysusers file pass systemd's own
//! checks; the example cluster file is one vscid accepts; and vscid runs
//! unprivileged the way the unit runs it (its own user, a socket group).

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success()).unwrap_or(false)
}

#[test]
fn make_install_puts_the_service_in_place() {
    let dir = TempDir::new("install");
    let prefix = dir.path.join("prefix");
    // Install what is built (-o: do not rebuild), into a private prefix.
    let out = run(
        "make install",
        Command::new("make")
            .current_dir(repo())
            .args(["-o", "all", "-o", "c", "-o", "stage", "install"])
            .arg(format!("BUILD={}", build_dir().display()))
            .arg(format!("PREFIX={}", prefix.display()))
            .arg(format!("DESTDIR={}", dir.path.join("dest").display())),
        Duration::from_secs(300),
    );
    out.assert_success();
    let root = dir.path.join("dest").join(prefix.strip_prefix("/").unwrap());
    let unit = root.join("lib/systemd/system/vscid.service");
    let text = std::fs::read_to_string(&unit).expect("the unit is installed");
    for want in [
        &format!(
            "ExecStart={}/bin/vscid --node-id ${{VSCI_NODE_ID}} --socket /run/vsci/vscid.sock --socket-group vsci",
            prefix.display()
        ),
        "LimitNOFILE=1048576",
        "User=vscid",
        "Group=vsci",
        "RuntimeDirectory=vsci",
        "EnvironmentFile=-/etc/vsci/vscid.env",
    ] {
        assert!(text.contains(want), "the unit lacks {want:?}:\n{text}");
    }
    assert!(!text.contains("@PREFIX@"));
    assert_eq!(std::fs::metadata(&unit).unwrap().mode() & 0o777, 0o644);
    for f in [
        "lib/sysusers.d/vsci.conf",
        "share/vsci/cluster.toml.example",
        "share/vsci/vscid.env",
        "share/vsci/vsci-profile.sh",
        "share/doc/vsci/operations.md",
        "share/doc/vsci/security.md",
    ] {
        assert!(root.join(f).exists(), "{f} is not installed");
    }
    if have("systemd-analyze") {
        // verify resolves ExecStart, so point it at the installed binary.
        let probe = dir.path.join("vscid.service");
        std::fs::write(
            &probe,
            text.replace(&format!("{}/bin/vscid", prefix.display()), &root.join("bin/vscid").display().to_string()),
        )
        .unwrap();
        let out = run(
            "systemd-analyze verify",
            Command::new("systemd-analyze").arg("verify").arg(&probe),
            Duration::from_secs(60),
        );
        assert!(out.status.success() && out.stderr.trim().is_empty(), "{}", out.describe());
    }
    if have("systemd-sysusers") {
        let out = run(
            "systemd-sysusers --dry-run",
            Command::new("systemd-sysusers").arg("--dry-run").arg(root.join("lib/sysusers.d/vsci.conf")),
            Duration::from_secs(60),
        );
        out.assert_success();
    }
}

/// The example cluster file, with this host's addresses and a real group,
/// starts a node: every key in it is one vscid knows.
#[test]
fn example_cluster_file_is_accepted() {
    let Some(u) = Users::new() else { return };
    let dir = TempDir::new("example");
    let text = std::fs::read_to_string(repo().join("dist/cluster.toml.example")).unwrap();
    let text = text
        .replace("10.0.0.1:7100", "127.0.0.1:17391")
        .replace("10.0.0.2:7100", "127.0.0.1:17392")
        .replace("socket_group = \"vsci\"", &format!("socket_group = \"{}\"", u.group));
    std::fs::write(dir.path.join("cluster.toml"), text).unwrap();
    std::fs::write(dir.path.join("cluster.key"), "0123456789abcdef0123456789abcdef\n").unwrap();
    let socket = dir.path.join("n1.sock");
    let cfg = dir.path.join("cluster.toml");
    let mut d = Daemon::spawn_at(&socket, 1, &["--config", cfg.to_str().unwrap()]);
    d.wait_ready();
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!((meta.gid(), meta.mode() & 0o777), (u.gid, 0o660), "socket_group and socket_mode from the file");
    u.as_user(&u.member, &d, &built("tests/t_nodegone"), &["open"]).assert_success().assert_contains("OPEN SCI_ERR_OK");
}

/// vscid as an unprivileged user with a socket group, as the unit runs it.
#[test]
fn runs_unprivileged_with_a_socket_group() {
    let Some(u) = Users::new() else { return };
    let dir = TempDir::new("unpriv");
    let uid = user_uid(&u.member).expect("uid");
    // The runtime directory the unit gives it.
    let c = std::ffi::CString::new(dir.path.to_str().unwrap()).unwrap();
    // SAFETY: chown on a path we created, with ids we just looked up.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), uid, u.gid) }, 0);
    let socket = dir.path.join("vscid.sock");
    let member = u.member.clone();
    let group = u.group.clone();
    // A copy of vscid the member can reach (the checkout may not let it through).
    let vscid = u.stage(&built("bin/vscid"));
    let mut d = Daemon::spawn_program(
        &vscid,
        &socket,
        80,
        &["setpriv", "--reuid", &member, "--regid", &group, "--clear-groups", "--"],
        &["--socket-group", &group],
    );
    d.wait_ready();
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o777), (uid, u.gid, 0o660));
    let out = u.as_user(&u.outsider, &d, &built("tests/t_nodegone"), &["open"]);
    assert_eq!(out.status.code(), Some(3), "{}", out.describe());
    out.assert_contains("OPEN SCI_ERR_ACCESS");
    // A whole session against the unprivileged node.
    run("t_kill smoke", d.client(&built("tests/t_kill")).arg("smoke"), PROGRAM_TIMEOUT)
        .assert_success()
        .assert_contains("SMOKE OK");
    d.signal(libc::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(10)).success());
    assert!(!socket.exists(), "the socket is removed on SIGTERM");
}

fn user_uid(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&name)).then(|| f.get(2)?.parse().ok()).flatten()
    })
}
