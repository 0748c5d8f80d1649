//! `vscid --metrics ADDR`: a Prometheus endpoint scraped over HTTP shows
//! what the node holds, limit hits and errors by SISCI code.

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
    body.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' ')).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn metrics_endpoint_is_scraped_over_http() {
    let d = Daemon::start_with(90, &["--metrics", "127.0.0.1:0", "--max-objects-per-client", "50"]);
    let log = d.log_text();
    let addr = log
        .lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no metrics address in the log:\n{log}"))
        .to_string();

    let (head, body) = scrape(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert_eq!(value(&body, "vsci_interrupts"), Some(0.0), "{body}");

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
    assert_eq!(value(&body, "vsci_limit_hits_total{limit=\"objects_per_client\"}"), Some(10.0), "the hog was refused 10 times: {body}");
    assert_eq!(value(&body, "vsci_errors_total{code=\"SCI_ERR_NOSPC\"}"), Some(10.0), "{body}");
    assert_eq!(value(&body, "vsci_errors_total{code=\"SCI_ERR_NO_SUCH_SEGMENT\"}"), Some(1.0), "{body}");
    assert!(value(&body, "vsci_connections_accepted_total").is_some_and(|v| v >= 3.0), "{body}");
    assert!(value(&body, "vsci_open_fds").is_some_and(|v| v > 100.0), "{body}");

    let (head, _) = scrape(&addr, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // A scraper that connects and says nothing does not stop the endpoint.
    let _idle = TcpStream::connect(&addr).unwrap();
    let (head, _) = scrape(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}
