//! Limits that protect the node: per-client and per-uid object limits and
//! the descriptor reserve. A client at a limit gets SCI_ERR_NOSPC, the node
//! logs the hit once with who hit it, and `vsci status` and new clients
//! keep working. (The attack: three clients of one user asking for
//! 4,096 interrupts each took every descriptor of the node.)

mod common;

use std::time::Duration;

use common::*;

fn hog(d: &Daemon, n: usize) -> (Proc, usize, String) {
    let mut p = Proc::spawn("t_nodegone hog", d.client(&built("tests/t_nodegone")).args(["hog", &n.to_string()]));
    let line = p.wait_line("HOG created=", LINE_TIMEOUT);
    p.wait_line("READY", LINE_TIMEOUT);
    let rest = line.split("HOG created=").nth(1).expect("HOG line").trim().to_string();
    let (made, err) = rest.split_once(" err=").expect("HOG line format");
    (p, made.parse().expect("count"), err.to_string())
}

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

/// One uid's clients together stop at --max-objects-per-uid, each at
/// --max-objects-per-client; another user still gets everything it asks.
#[test]
fn per_client_and_per_uid_limits() {
    let Some(u) = Users::new() else { return };
    let d = Daemon::start_with(
        70,
        &["--max-objects-per-client", "200", "--max-objects-per-uid", "300", "--socket-mode", "0666"],
    );
    let base = d.counts();
    let (a, made_a, err_a) = hog(&d, 1000);
    assert_eq!((made_a, err_a.as_str()), (200, "SCI_ERR_NOSPC"), "first client stops at the per-client limit");
    let (b, made_b, err_b) = hog(&d, 1000);
    assert_eq!(
        (made_b, err_b.as_str()),
        (100, "SCI_ERR_NOSPC"),
        "second client of the same uid stops at the uid's limit"
    );

    // The node still serves: status, and another user's whole session.
    let st = d.status();
    assert_eq!(st["totals"]["interrupts"].as_u64(), Some(300), "{st:#}");
    let out = u.as_user(&u.outsider, &d, &built("tests/t_kill"), &["smoke"]);
    out.assert_success().assert_contains("SMOKE OK");

    // Each hit logged once per client (each hog was refused 10 times).
    let log = d.log_text();
    assert_eq!(count(&log, "reached 200 objects per client"), 1, "{log}");
    assert_eq!(count(&log, "reached 300 objects per uid"), 1, "{log}");
    assert!(log.contains(&format!("pid {}", a.pid())) && log.contains(&format!("pid {}", b.pid())), "{log}");

    // Released with their clients: the uid's budget comes back.
    drop(a);
    drop(b);
    d.wait_counts(base, "after the hogs were killed");
    let (_c, made_c, _) = hog(&d, 150);
    assert_eq!(made_c, 150);
}

/// With no per-uid limit in the way, the node stops handing out objects at
/// its descriptor reserve: `vsci status` and new clients still get in.
#[test]
fn descriptor_reserve_keeps_the_node_usable() {
    // 1024 descriptors, 200 of them in reserve.
    let d = Daemon::start_wrapped(71, &["prlimit", "--nofile=1024:1024", "--"], &["--fd-reserve", "200"]);
    let log = d.log_text();
    assert!(log.contains("200 of 1024 descriptors kept in reserve"), "{log}");
    let (_h1, made1, err1) = hog(&d, 100000);
    let (_h2, made2, err2) = hog(&d, 100000);
    eprintln!("at the reserve: first client made {made1} interrupts, second {made2}");
    assert_eq!(err1, "SCI_ERR_NOSPC");
    assert_eq!(err2, "SCI_ERR_NOSPC");
    assert!(made1 > 300, "the first client got {made1} interrupts");
    let open = d.fd_count();
    assert!(open <= 1024 - 190, "the node holds {open} descriptors: the reserve was not kept");
    // Status works and shows everything; new clients connect.
    assert_eq!(d.counts().interrupts, made1 + made2);
    for _ in 0..5 {
        run("t_nodegone open", d.client(&built("tests/t_nodegone")).arg("open"), Duration::from_secs(60))
            .assert_success()
            .assert_contains("OPEN SCI_ERR_OK");
    }
    let log = d.log_text();
    assert!(log.contains("reached the node's descriptor reserve"), "{log}");
    assert_eq!(count(&log, "reached the node's descriptor reserve"), 2, "once per client: {log}");
}

/// A uid at --max-clients-per-uid cannot open another descriptor
/// (SCI_ERR_NOSPC, logged); other users still can.
#[test]
fn clients_per_uid() {
    let Some(u) = Users::new() else { return };
    let d = Daemon::start_with(72, &["--max-clients-per-uid", "2", "--socket-mode", "0666"]);
    let (_a, _, _) = hog(&d, 1);
    let (_b, _, _) = hog(&d, 1);
    let out = run("t_nodegone open", d.client(&built("tests/t_nodegone")).arg("open"), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(3), "{}", out.describe());
    out.assert_contains("OPEN SCI_ERR_NOSPC");
    u.as_user(&u.outsider, &d, &built("tests/t_nodegone"), &["open"])
        .assert_success()
        .assert_contains("OPEN SCI_ERR_OK");
    let log = d.log_text();
    assert!(log.contains("uid 0 already has 2 clients (--max-clients-per-uid 2)"), "{log}");
}
