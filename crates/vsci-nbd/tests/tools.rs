//! The server against real NBD clients: libnbd's nbdinfo/nbdcopy and
//! QEMU 7.2's qemu-io/qemu-img.

mod common;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use vsci_nbd::{Server, ServerConfig};

const T: Duration = Duration::from_secs(120);

fn cfg(name: &str) -> ServerConfig {
    ServerConfig { export_name: name.into(), ..ServerConfig::default() }
}

fn export_json(text: &str, name: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(text).expect("nbdinfo --json output parses");
    let exports = v["exports"].as_array().expect("exports array");
    exports.iter().find(|e| e["export-name"] == name).unwrap_or_else(|| panic!("export {name} not in {v}")).clone()
}

#[test]
fn nbdinfo_reports_size_and_name() {
    if !have_tool("nbdinfo") {
        return;
    }
    let size = 16 << 20;
    let srv = TestServer::start(MemBackend::new(size), cfg("disk0"));
    let out = run_tool("nbdinfo", &["--json", &srv.url("disk0")], T);
    assert!(out.success);
    let e = export_json(&out.stdout, "disk0");
    assert_eq!(e["export-size"], size as u64);
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["can_multi_conn"], true);
    assert_eq!(e["can_flush"], true);
    assert_eq!(e["can_fua"], true);
    assert_eq!(e["can_trim"], true);
    assert_eq!(e["can_zero"], true);
    assert_eq!(e["block_size_minimum"], 1);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 32 << 20);

    // An unknown export is refused, and the empty name is the default one.
    let bad = run_tool("nbdinfo", &["--json", &srv.url("nope")], T);
    assert!(!bad.success);
    let dflt = run_tool("nbdinfo", &["--size", &srv.url("")], T);
    assert!(dflt.success);
    assert_eq!(dflt.stdout.trim(), size.to_string());

    // NBD_OPT_LIST.
    let list = run_tool("nbdinfo", &["--list", "--json", &srv.url("")], T);
    assert!(list.success);
    export_json(&list.stdout, "disk0");
}

#[test]
fn nbdinfo_over_tcp() {
    if !have_tool("nbdinfo") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = Arc::new(Server::new(MemBackend::new(1 << 20), cfg("tcp0")));
    let s = server.clone();
    let t = std::thread::spawn(move || s.serve_tcp(listener));
    struct StopOnDrop(Arc<Server>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.stop();
        }
    }
    let guard = StopOnDrop(server.clone());
    let out = run_tool("nbdinfo", &["--json", &format!("nbd://127.0.0.1:{port}/tcp0")], T);
    assert!(out.success);
    assert_eq!(export_json(&out.stdout, "tcp0")["export-size"], 1u64 << 20);
    drop(guard);
    t.join().unwrap().unwrap();
    assert!(server.stats().connections >= 1);
}

#[test]
fn qemu_io_write_then_read_back() {
    if !have_tool("qemu-io") {
        return;
    }
    let backend = MemBackend::new(4 << 20);
    let srv = TestServer::start(backend.clone(), cfg("vol"));
    let url = srv.url("vol");
    let out = run_tool(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "write -P 0xcd 1M 64k",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "read -P 0xcd 1M 64k",
            "-c",
            "flush",
            &url,
        ],
        T,
    );
    assert!(out.success);
    let text = out.text();
    assert!(!text.contains("failed") && !text.contains("Pattern verification"), "{text}");
    let d = backend.snapshot();
    assert!(d[..1 << 20].iter().all(|&b| b == 0xab));
    assert!(d[1 << 20..(1 << 20) + (64 << 10)].iter().all(|&b| b == 0xcd));
    assert!(d[(1 << 20) + (64 << 10)..].iter().all(|&b| b == 0));
    assert!(backend.flushes.load(std::sync::atomic::Ordering::SeqCst) >= 1);

    // Write-zeroes (with and without unmap permission) and discard.
    let out = run_tool(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -z 0 64k",
            "-c",
            "write -z -u 64k 64k",
            "-c",
            "discard 2M 1M",
            "-c",
            "read -P 0 0 128k",
            &url,
        ],
        T,
    );
    assert!(out.success && !out.text().contains("failed"), "{}", out.text());
    let d = backend.snapshot();
    assert!(d[..128 << 10].iter().all(|&b| b == 0));
    assert!(d[128 << 10..1 << 20].iter().all(|&b| b == 0xab));
    let st = srv.server.stats();
    assert!(st.writes >= 2 && st.reads >= 2 && st.bytes_written >= (1 << 20) + (64 << 10), "{st:?}");
    assert!(st.zero_writes >= 2 && st.trims >= 1, "{st:?}");
}

#[test]
fn write_beyond_end_fails_and_server_keeps_serving() {
    if !have_tool("qemu-io") {
        return;
    }
    let size = 1 << 20;
    let backend = MemBackend::new(size);
    let srv = TestServer::start(backend.clone(), cfg("small"));
    let url = srv.url("small");
    // qemu checks the bound itself, so also send one straight to the server.
    let out = run_tool("qemu-io", &["-f", "raw", "-c", "write -P 0x11 1020k 8k", &url], T);
    assert!(!out.success || out.text().contains("failed"), "{}", out.text());

    let (mut s, info) = open(&srv.sock, "small");
    assert_eq!(info.size, size as u64);
    let payload = vec![0x11u8; 8192];
    assert_eq!(raw_cmd(&mut s, 0, 1, size as u64 - 4096, 8192, &payload), 22);
    assert_eq!(raw_cmd(&mut s, 0, 1, u64::MAX - 100, 8192, &payload), 22);
    assert_eq!(raw_read(&mut s, size as u64, 1), Err(22));
    assert_eq!(raw_cmd(&mut s, 0, 6, size as u64, 1, &[]), 22);
    assert_eq!(raw_cmd(&mut s, 0, 4, u64::MAX, u32::MAX, &[]), 22);
    assert!(backend.snapshot().iter().all(|&b| b == 0), "nothing was written");
    // Same connection still works, and so does a new client.
    assert_eq!(raw_cmd(&mut s, 0, 1, 0, 4, b"abcd"), 0);
    assert_eq!(raw_read(&mut s, 0, 4).unwrap(), b"abcd");
    let out = run_tool("qemu-io", &["-f", "raw", "-c", "read -P 0x61 0 1", "-c", "write -P 0x22 1020k 4k", &url], T);
    assert!(out.success && !out.text().contains("failed"), "{}", out.text());
    assert!(srv.server.stats().errors >= 5);
}

#[test]
fn read_only_export_refuses_writes() {
    if !have_tool("qemu-io") || !have_tool("nbdinfo") {
        return;
    }
    let backend = MemBackend::new(1 << 20);
    backend.data.write().unwrap()[..4].copy_from_slice(b"keep");
    let srv = TestServer::start(backend.clone(), ServerConfig { read_only: true, ..cfg("ro") });
    let url = srv.url("ro");

    let info = run_tool("nbdinfo", &["--json", &url], T);
    assert_eq!(export_json(&info.stdout, "ro")["is_read_only"], true);

    let out = run_tool("qemu-io", &["-f", "raw", "-c", "write -P 0xab 0 4k", &url], T);
    assert!(!out.success || out.text().contains("failed"), "{}", out.text());
    // Reading is fine (-r: qemu opens read-only).
    let out = run_tool("qemu-io", &["-r", "-f", "raw", "-c", "read -P 0 4k 4k", &url], T);
    assert!(out.success && !out.text().contains("failed"), "{}", out.text());

    // A client ignoring NBD_FLAG_READ_ONLY gets EPERM for every kind of write.
    let (mut s, info) = open(&srv.sock, "ro");
    assert_ne!(info.tflags & 2, 0, "READ_ONLY flag advertised");
    assert_eq!(raw_cmd(&mut s, 0, 1, 0, 4, b"XXXX"), 1);
    assert_eq!(raw_cmd(&mut s, 1, 1, 0, 4, b"XXXX"), 1);
    assert_eq!(raw_cmd(&mut s, 0, 4, 0, 4096, &[]), 1);
    assert_eq!(raw_cmd(&mut s, 0, 6, 0, 4096, &[]), 1);
    assert_eq!(raw_read(&mut s, 0, 4).unwrap(), b"keep");
    assert_eq!(&backend.snapshot()[..4], b"keep");
}

#[test]
fn nbdcopy_64mib_round_trip() {
    if !have_tool("nbdcopy") {
        return;
    }
    let size = 64 << 20;
    let backend = MemBackend::new(size);
    let srv = TestServer::start(backend.clone(), cfg("big"));
    let url = srv.url("big");
    let dir = TempDir::new("copy");
    let src = dir.0.join("in.bin");
    let dst = dir.0.join("out.bin");
    let data = random_bytes(size, 0x5eed_1234);
    std::fs::write(&src, &data).unwrap();

    let out = run_tool("nbdcopy", &["--flush", src.to_str().unwrap(), &url], T);
    assert!(out.success);
    let st = srv.server.stats();
    assert!(st.connections >= 2, "nbdcopy should use several connections (multi-conn): {st:?}");
    assert!(backend.snapshot() == data, "backend differs from the source file");

    std::fs::write(&dst, []).unwrap();
    let out = run_tool("nbdcopy", &[&url, dst.to_str().unwrap()], T);
    assert!(out.success);
    let back = std::fs::read(&dst).unwrap();
    assert_eq!(back.len(), size);
    assert!(back == data, "copied-out bytes differ");
    let st = srv.server.stats();
    assert!(st.bytes_read >= size as u64 && st.bytes_written >= size as u64, "{st:?}");
    assert_eq!(st.errors, 0, "{st:?}");
}

#[test]
fn qemu_img_sees_the_export() {
    if !have_tool("qemu-img") {
        return;
    }
    let srv = TestServer::start(MemBackend::new(8 << 20), cfg("img"));
    let out = run_tool("qemu-img", &["info", "--output=json", &srv.url("img")], T);
    assert!(out.success);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["virtual-size"], 8u64 << 20);
}
