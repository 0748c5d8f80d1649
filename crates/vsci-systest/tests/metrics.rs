//! `vscid --metrics ADDR`: a Prometheus endpoint scraped over HTTP shows
//! what the node holds, limit hits and errors by SISCI code; on two nodes
//! (both on loopback, no namespaces needed) the per-link message and byte
//! counters and the RMA engine's figures move with traffic between them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

fn scrape(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_string(), body.to_string())
}

/// The value of the sample line starting with `name` (labels included).
fn value(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The address a daemon logged for its metrics endpoint (a node of a
/// cluster opens its engine and links first, so the line may come after
/// the control socket accepts).
fn metrics_addr(d: &Daemon) -> String {
    wait_for(Duration::from_secs(20), "the metrics address in the log", || {
        d.log_text()
            .lines()
            .find_map(|l| l.split("metrics on http://").nth(1))
            .and_then(|r| r.strip_suffix("/metrics"))
            .map(str::to_string)
    })
}

#[test]
fn metrics_endpoint_is_scraped_over_http() {
    let d = Daemon::start_with(90, &["--metrics", "127.0.0.1:0", "--max-objects-per-client", "50", "--lend", "64M"]);
    let addr = metrics_addr(&d);

    let (head, body) = scrape(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert_eq!(value(&body, "vsci_interrupts"), Some(0.0), "{body}");
    assert_eq!(value(&body, "vsci_lend_pool_bytes"), Some(64.0 * 1024.0 * 1024.0), "{body}");

    // A client at its object limit, and a connect to a missing segment.
    let mut hog = Proc::spawn("t_nodegone hog", d.client(&built("tests/t_nodegone")).args(["hog", "1000"]));
    hog.wait_line("HOG created=50 err=SCI_ERR_NOSPC", LINE_TIMEOUT);
    hog.wait_line("READY", LINE_TIMEOUT);
    run("t_nodegone take", d.client(&built("tests/t_nodegone")).args(["take", "0x4242"]), Duration::from_secs(60))
        .assert_success()
        .assert_contains("TAKE SCI_ERR_NO_SUCH_SEGMENT");

    let (_, body) = scrape(&addr, "/metrics");
    eprintln!("{body}");
    assert_eq!(value(&body, "vsci_interrupts"), Some(50.0), "{body}");
    assert!(value(&body, "vsci_clients").is_some_and(|v| v >= 1.0), "{body}");
    assert_eq!(
        value(&body, "vsci_limit_hits_total{limit=\"objects_per_client\"}"),
        Some(10.0),
        "the hog was refused 10 times: {body}"
    );
    assert_eq!(value(&body, "vsci_errors_total{code=\"SCI_ERR_NOSPC\"}"), Some(10.0), "{body}");
    assert_eq!(value(&body, "vsci_errors_total{code=\"SCI_ERR_NO_SUCH_SEGMENT\"}"), Some(1.0), "{body}");
    assert!(value(&body, "vsci_connections_accepted_total").is_some_and(|v| v >= 3.0), "{body}");
    // 50 interrupts: an eventfd each, their slots share one memfd.
    assert!(value(&body, "vsci_open_fds").is_some_and(|v| v > 50.0), "{body}");

    let (head, _) = scrape(&addr, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // A scraper that connects and says nothing does not stop the endpoint.
    let _idle = TcpStream::connect(&addr).unwrap();
    let (head, _) = scrape(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// Two nodes of one cluster on loopback, interrupts back and forth between
/// them: each node counts frames and bytes on its link to the other, its
/// engine applies the other's triggers, and the queue gauges are there.
#[test]
fn link_and_rma_engine_metrics_move_with_traffic() {
    let (_dir, n1, n2) = loopback_pair(&["--metrics", "127.0.0.1:0"]);
    let (a1, a2) = (metrics_addr(&n1), metrics_addr(&n2));

    let prog = built("examples/interrupt");
    let server = Proc::spawn(
        "interrupt server (node 2)",
        n2.client(&prog).args(["-server", "-timeout", "30000", "-rn", "1", "-loops", "50"]),
    );
    let client = Proc::spawn(
        "interrupt client (node 1)",
        n1.client(&prog).args(["-client", "-timeout", "30000", "-rn", "2", "-loops", "50"]),
    );
    client.wait(Duration::from_secs(90)).assert_success().assert_contains("50 round trips");
    server.wait(Duration::from_secs(90)).assert_success().assert_contains("50 round trips");

    for (addr, me, peer) in [(&a1, 1, 2), (&a2, 2, 1)] {
        let (_, body) = scrape(addr, "/metrics");
        eprintln!("--- node {me} ---\n{body}");
        for dir in ["tx", "rx"] {
            let l = format!("{{peer=\"{peer}\",direction=\"{dir}\"}}");
            let msgs = value(&body, &format!("vsci_link_messages_total{l}")).unwrap_or(0.0);
            let bytes = value(&body, &format!("vsci_link_bytes_total{l}")).unwrap_or(0.0);
            // Each frame carries a 4-byte length and a 32-byte MAC at least.
            assert!(
                msgs >= 2.0 && bytes >= 36.0 * msgs,
                "node {me}, link to {peer} {dir}: {msgs} frames, {bytes} bytes\n{body}"
            );
        }
        // Each side triggered the other's interrupt 50 times over the engine.
        let applied = value(&body, "vsci_remote_triggers_total{outcome=\"applied\"}").unwrap_or(0.0);
        assert!(applied >= 50.0, "node {me}: {applied} remote triggers applied\n{body}");
        assert!(value(&body, "vsci_rma_messages_received_total").is_some_and(|v| v >= 50.0), "node {me}\n{body}");
        assert!(value(&body, "vsci_rma_completions_total").is_some_and(|v| v >= 50.0), "node {me}\n{body}");
        for q in ["ops_in_flight", "received", "repost"] {
            assert!(
                value(&body, &format!("vsci_rma_queue_depth{{queue=\"{q}\"}}")).is_some(),
                "node {me}: no {q} queue depth\n{body}"
            );
        }
        assert!(value(&body, "vsci_rma_trigger_tokens").is_some(), "node {me}\n{body}");
        assert!(value(&body, "vsci_rma_regions").is_some(), "node {me}\n{body}");
    }
}
