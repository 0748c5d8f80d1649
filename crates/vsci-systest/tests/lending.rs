//! Memory lent between nodes (docs/remote-memory.md): three nodes in their
//! own network namespaces, two of them lending (`vscid --lend`), and
//! `vsci blockdev` on the third serving a block device striped over both
//! as an NBD export that real NBD clients (libnbd's nbdcopy and nbdinfo,
//! QEMU's qemu-io) read and write.
//!
//! Needs root for `ip netns`; without it the tests print SKIPPED and pass.
//! Run after `make`:
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test lending -- --test-threads=1

mod common;
mod netns;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use netns::Cluster;

const MIB: u64 = 1 << 20;

fn have(tool: &str) -> bool {
    let ok = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: {tool} is not installed (scripts/install-deps.sh installs it)");
    }
    ok
}

/// `vsci blockdev` on member `node`, serving on `sock`; waits until it
/// serves.
fn blockdev(c: &Cluster, node: u32, sock: &Path, args: &[&str]) -> Proc {
    let mut cmd = c.client(node, &built("bin/vsci"));
    cmd.arg("blockdev").arg("--socket").arg(&c.node(node).socket).arg("--listen-unix").arg(sock).args(args);
    let mut p = Proc::spawn(&format!("vsci blockdev {}", args.join(" ")), &mut cmd);
    p.wait_line("serving on nbd+unix", Duration::from_secs(60));
    p
}

fn url(sock: &Path) -> String {
    format!("nbd+unix:///vsci?socket={}", sock.display())
}

/// A file of `len` bytes no two runs share (a xorshift stream seeded from
/// the clock), so a stale or misplaced block cannot pass for the right one.
fn random_file(path: &Path, len: u64) {
    let mut x = Instant::now().elapsed().as_nanos() as u64 ^ 0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id());
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut block = vec![0u8; MIB as usize];
    for _ in 0..len / MIB {
        for w in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&block).unwrap();
    }
    f.flush().unwrap();
}

fn same_files(a: &Path, b: &Path) -> Result<(), String> {
    let (mut fa, mut fb) = (std::fs::File::open(a).unwrap(), std::fs::File::open(b).unwrap());
    let (la, lb) = (fa.metadata().unwrap().len(), fb.metadata().unwrap().len());
    if la != lb {
        return Err(format!("{} is {la} bytes, {} is {lb}", a.display(), b.display()));
    }
    let (mut ba, mut bb) = (vec![0u8; MIB as usize], vec![0u8; MIB as usize]);
    let mut off = 0u64;
    while off < la {
        let n = (la - off).min(MIB) as usize;
        fa.read_exact(&mut ba[..n]).unwrap();
        fb.read_exact(&mut bb[..n]).unwrap();
        if let Some(i) = (0..n).find(|&i| ba[i] != bb[i]) {
            return Err(format!("first difference at byte {}", off + i as u64));
        }
        off += n as u64;
    }
    Ok(())
}

/// Loans per node in a status's "lending" section: (node, bytes) pairs.
fn loans(st: &serde_json::Value, side: &str) -> Vec<(u64, u64)> {
    st["lending"][side]
        .as_array()
        .unwrap_or_else(|| panic!("no lending.{side} in status:\n{st:#}"))
        .iter()
        .map(|t| (t["node_id"].as_u64().unwrap(), t["bytes"].as_u64().unwrap()))
        .collect()
}

fn nbd_tool(c: &Cluster, node: u32, tool: &str, args: &[&str]) -> Output {
    let mut cmd = c.client(node, Path::new(tool));
    cmd.args(args);
    run(&format!("{tool} {}", args.join(" ")), &mut cmd, Duration::from_secs(300))
}

#[test]
fn a_block_device_of_lent_memory_holds_256_mib_across_namespaces() {
    if !(have("nbdcopy") && have("nbdinfo") && have("qemu-io")) {
        return;
    }
    let Some(mut c) = Cluster::start_args(&[1, 2, 3], &[(2, &["--lend", "512M"]), (3, &["--lend", "512M"])]) else {
        return;
    };
    let dir = c.dir.path.clone();
    let sock = dir.join("bd.sock");
    let bd = blockdev(&c, 1, &sock, &["--size", "256M", "--from", "2,3"]);

    // Each lender lent half, and the borrower's node says so.
    for lender in [2, 3] {
        let st = c.status(lender);
        assert_eq!(st["lending"]["pool"].as_u64(), Some(512 * MIB), "{st:#}");
        assert_eq!(loans(&st, "lent"), vec![(1, 128 * MIB)], "node {lender}");
    }
    assert_eq!(loans(&c.status(1), "borrowed"), vec![(2, 128 * MIB), (3, 128 * MIB)]);
    let info = nbd_tool(&c, 1, "nbdinfo", &["--json", &url(&sock)]);
    info.assert_success();
    let v: serde_json::Value = serde_json::from_str(&info.stdout).expect("nbdinfo --json");
    assert_eq!(v["exports"][0]["export-size"].as_u64(), Some(256 * MIB), "{v:#}");

    // 256 MiB in, 256 MiB out, compared byte for byte.
    let (input, output) = (dir.join("in.bin"), dir.join("out.bin"));
    random_file(&input, 256 * MIB);
    let t = Instant::now();
    nbd_tool(&c, 1, "nbdcopy", &[&input.to_string_lossy(), &url(&sock)]).assert_success();
    let wrote = t.elapsed();
    let t = Instant::now();
    nbd_tool(&c, 1, "nbdcopy", &[&url(&sock), &output.to_string_lossy()]).assert_success();
    eprintln!("256 MiB written in {wrote:?}, read back in {:?} (not a benchmark: see vsci bench)", t.elapsed());
    same_files(&input, &output).unwrap_or_else(|e| panic!("what came back differs from what went in: {e}"));
    let _ = std::fs::remove_file(&output);

    // A second client process sees the same bytes (QEMU's own NBD client):
    // the first MiB is on node 2, the second on node 3.
    let mut first = vec![0u8; 2 * MIB as usize];
    std::fs::File::open(&input).unwrap().read_exact(&mut first).unwrap();
    let byte = |o: u64| first[o as usize];
    let (first_mib, second_mib) = (format!("read -P {} 0 1", byte(0)), format!("read -P {} {MIB} 1", byte(MIB)));
    let q = nbd_tool(&c, 1, "qemu-io", &["-f", "raw", "-c", &first_mib, "-c", &second_mib, &url(&sock)]);
    q.assert_success();
    assert!(!q.stdout.contains("failed") && !q.stdout.contains("Pattern verification"), "qemu-io: {}", q.describe());

    // A lender dies: reads of its stripes fail with an I/O error, soon;
    // the other lender's stripes still read.
    c.kill_node(3);
    let t = Instant::now();
    let q = nbd_tool(&c, 1, "qemu-io", &["-f", "raw", "-c", &format!("read {MIB} 4096"), &url(&sock)]);
    let took = t.elapsed();
    assert!(
        q.stdout.contains("Input/output error") || q.stderr.contains("Input/output error"),
        "a read of the dead lender's stripe: {}",
        q.describe()
    );
    assert!(took < Duration::from_secs(30), "the failed read took {took:?}");
    let q = nbd_tool(&c, 1, "qemu-io", &["-f", "raw", "-c", &format!("read -P {} 0 1", byte(0)), &url(&sock)]);
    q.assert_success();
    assert!(
        !q.stdout.contains("failed") && !q.stdout.contains("Pattern verification"),
        "node 2's stripe after node 3 died: {}",
        q.describe()
    );

    // Stopping the device gives the loans back.
    bd.signal(libc::SIGTERM);
    let out = bd.wait(Duration::from_secs(30));
    assert!(out.stdout.contains("stopped"), "{}", out.describe());
    wait_for(Duration::from_secs(20), "node 2's loan returned", || {
        loans(&c.status(2), "lent").is_empty().then_some(())
    });
    assert!(loans(&c.status(1), "borrowed").is_empty());
}

#[test]
fn a_lender_lends_no_more_than_its_pool() {
    let Some(c) = Cluster::start_args(&[1, 2], &[(2, &["--lend", "64M"])]) else { return };
    let sock = c.dir.path.join("bd.sock");
    let mut cmd = c.client(1, &built("bin/vsci"));
    cmd.arg("blockdev")
        .arg("--socket")
        .arg(&c.node(1).socket)
        .arg("--listen-unix")
        .arg(&sock)
        .args(["--size", "128M", "--from", "2"]);
    let out = run("vsci blockdev beyond the pool", &mut cmd, Duration::from_secs(60));
    assert!(!out.status.success(), "{}", out.describe());
    out.assert_contains("SCI_ERR_NOSPC");
    // Within the pool it works, and what is left is refused.
    let _bd = blockdev(&c, 1, &sock, &["--size", "48M", "--from", "2"]);
    let sock2 = c.dir.path.join("bd2.sock");
    let mut cmd = c.client(1, &built("bin/vsci"));
    cmd.arg("blockdev")
        .arg("--socket")
        .arg(&c.node(1).socket)
        .arg("--listen-unix")
        .arg(&sock2)
        .args(["--size", "32M", "--from", "2"]);
    run("vsci blockdev past what is left", &mut cmd, Duration::from_secs(60)).assert_contains("SCI_ERR_NOSPC");
    // A node that lends nothing refuses, and a node not in the cluster is
    // no lender.
    let mut cmd = c.client(2, &built("bin/vsci"));
    cmd.arg("blockdev")
        .arg("--socket")
        .arg(&c.node(2).socket)
        .arg("--listen-unix")
        .arg(c.dir.path.join("bd3.sock"))
        .args(["--size", "4M", "--from", "1"]);
    run("vsci blockdev from a node that lends nothing", &mut cmd, Duration::from_secs(60))
        .assert_contains("SCI_ERR_NOSPC");
    let mut cmd = c.client(1, &built("bin/vsci"));
    cmd.arg("blockdev")
        .arg("--socket")
        .arg(&c.node(1).socket)
        .arg("--listen-unix")
        .arg(c.dir.path.join("bd4.sock"))
        .args(["--size", "4M", "--from", "9"]);
    run("vsci blockdev from no such node", &mut cmd, Duration::from_secs(60)).assert_contains("SCI_ERR_NO_SUCH_NODEID");
}

/// A QEMU guest swaps onto a block device of lent memory (QEMU's own NBD
/// client reads `vsci blockdev`'s export; the guest sees virtio-blk) and a
/// program larger than the guest's RAM finishes with every word right.
#[test]
fn a_guest_swaps_onto_lent_memory() {
    if !netns::guests_possible() {
        eprintln!("SKIPPED: no QEMU here");
        return;
    }
    let Some(c) = Cluster::start_args(&[1, 2], &[(2, &["--lend", "512M"])]) else { return };
    let sock = c.dir.path.join("swap.sock");
    let bd = blockdev(&c, 1, &sock, &["--size", "256M", "--from", "2"]);
    let mut cmd = c.client(1, &built("bin/vsci"));
    cmd.args(["vm", "run", "--name", "swapper", "--memory", "128", "--timeout", "400", "--drive", &url(&sock)]);
    cmd.arg("--add").arg(format!("{}:/bin/t_memhog", built("tests/t_memhog").display()));
    cmd.args(["--", "sh", "-c", "mkswap /dev/vda && swapon /dev/vda && grep -E 'MemTotal|SwapTotal' /proc/meminfo && t_memhog 192 && grep SwapTotal /proc/meminfo"]);
    let out = Proc::spawn("guest swapping onto lent memory", &mut cmd).wait(Duration::from_secs(450));
    println!("{}{}", out.stdout, out.stderr);
    out.assert_success();
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("MEMHOG"))
        .unwrap_or_else(|| panic!("no MEMHOG line: {}", out.describe()));
    assert!(line.starts_with("MEMHOG OK"), "{line}");
    let swapped: i64 =
        line.split_whitespace().find_map(|w| w.strip_prefix("swapped_kib=")).and_then(|k| k.parse().ok()).unwrap_or(-1);
    assert!(swapped > 32 * 1024, "the program should have been partly swapped out: {line}");
    let mem_kib: u64 = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal");
    assert!(mem_kib < 192 * 1024, "the guest has less RAM ({mem_kib} KiB) than the program needs");
    // What went through the device: the server counted writes and reads.
    bd.signal(libc::SIGTERM);
    let st = bd.wait(Duration::from_secs(30));
    println!("{}", st.stdout);
    assert!(st.stdout.contains("stopped"), "{}", st.describe());
}

/// The host path, where a kernel has an NBD client: a guest whose kernel
/// has nbd (the development hosts' kernel has no loadable modules) attaches
/// the export with Debian's nbd-client over QEMU's user-mode network, writes
/// 16 MiB through /dev/nbd0, reads it back past its page cache, and swaps
/// on it; the host then reads the same bytes out of the export.
#[test]
fn a_guest_kernel_attaches_the_device_with_its_own_nbd_client() {
    if !netns::guests_possible() || !have("nbd-client") || !have("nbdcopy") {
        eprintln!("SKIPPED: needs QEMU, nbd-client and nbdcopy");
        return;
    }
    let Some(c) = Cluster::start_args(&[1, 2], &[(2, &["--lend", "256M"])]) else { return };
    let sock = c.dir.path.join("kernel.sock");
    let bd = blockdev(&c, 1, &sock, &["--size", "64M", "--from", "2", "--listen-tcp", "127.0.0.1:10809"]);
    let nbd_client = Command::new("sh").args(["-c", "command -v nbd-client"]).output().unwrap();
    let nbd_client = String::from_utf8_lossy(&nbd_client.stdout).trim().to_string();
    let script = "set -e; insmod /lib/modules/nbd/nbd.ko; \
        nbd-client -N vsci 10.0.2.2 10809 /dev/nbd0; \
        dd if=/dev/urandom of=/tmp/a bs=1M count=16 2>/dev/null; \
        dd if=/tmp/a of=/dev/nbd0 bs=1M conv=fsync 2>/dev/null; \
        echo 3 > /proc/sys/vm/drop_caches; \
        dd if=/dev/nbd0 of=/tmp/b bs=1M count=16 2>/dev/null; \
        echo \"WROTE $(md5sum < /tmp/a)\"; echo \"READ $(md5sum < /tmp/b)\"; \
        echo \"TAIL $(dd if=/tmp/a bs=4096 skip=1 2>/dev/null | md5sum)\"; \
        mkswap -L lent /dev/nbd0 >/dev/null && echo MKSWAP OK; \
        nbd-client -d /dev/nbd0 >/dev/null 2>&1 || true";
    let mut cmd = c.client(1, &built("bin/vsci"));
    cmd.args(["vm", "run", "--name", "nbdguest", "--timeout", "300", "--net", "user"]);
    cmd.arg("--add").arg(format!("{nbd_client}:/bin/nbd-client"));
    cmd.args(["--", "sh", "-c", script]);
    let out = Proc::spawn("guest with the kernel's NBD client", &mut cmd).wait(Duration::from_secs(360));
    println!("{}{}", out.stdout, out.stderr);
    out.assert_success();
    let sum = |tag: &str| {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
            .unwrap_or_else(|| panic!("no {tag} line: {}", out.describe()))
    };
    let (wrote, read) = (sum("WROTE "), sum("READ "));
    assert_eq!(wrote, read, "what the guest read back through /dev/nbd0 differs from what it wrote");
    out.assert_contains("MKSWAP OK");
    // The bytes are in the lent memory: the host reads them out of the export.
    // (mkswap rewrote the first page; compare from 4 KiB on.)
    let copy = c.dir.path.join("from-host.bin");
    nbd_tool(&c, 1, "nbdcopy", &[&url(&sock), &copy.to_string_lossy()]).assert_success();
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), 64 << 20);
    let host_tail = Command::new("sh")
        .arg("-c")
        .arg(format!("dd if={} bs=4096 skip=1 count=4095 2>/dev/null | md5sum", copy.display()))
        .output()
        .unwrap();
    let host_tail = String::from_utf8_lossy(&host_tail.stdout).split_whitespace().next().unwrap_or("").to_string();
    assert_eq!(host_tail, sum("TAIL "), "the host reads other bytes out of the export than the guest wrote");
    bd.signal(libc::SIGTERM);
    assert!(bd.wait(Duration::from_secs(30)).stdout.contains("stopped"));
}
