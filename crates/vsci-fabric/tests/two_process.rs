//! Initiator and target in separate processes, so the target's memory is
//! served only by its own progress thread. The test binary re-runs itself as
//! the target (`VSCI_FABRIC_ROLE=target`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use vsci_fabric::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn fnv(data: impl Iterator<Item = u8>) -> u64 {
    data.fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// Target: registers 1 MiB, keeps it served by a progress thread, and
/// answers "sum OFF LEN REPLY_ADDR" messages with the FNV hash of its own
/// memory, so the initiator can check what really landed. The sender's
/// address travels in the payload (the identity-in-payload pattern).
#[test]
fn two_process_target() {
    if std::env::var("VSCI_FABRIC_ROLE").as_deref() != Ok("target") {
        return;
    }
    let f = Fabric::open(DEFAULT_PROVIDER, Some("127.0.0.1")).unwrap();
    let mem = Box::into_raw(vec![0u8; 1 << 20].into_boxed_slice()) as *mut u8;
    // SAFETY: mem is leaked, so it outlives the registration.
    let mr = unsafe { f.register(mem, 1 << 20, true, true) }.unwrap();
    let _progress = f.spawn_progress_thread();
    let r = mr.remote();
    println!("TARGET {} {} {} {}", hex(&f.address()), r.base, r.key, r.len);
    std::io::stdout().flush().unwrap();
    loop {
        let Some(m) = f.recv_timeout(Duration::from_secs(30)) else { panic!("initiator went away") };
        let text = String::from_utf8(m.data).unwrap();
        let words: Vec<&str> = text.split(' ').collect();
        match words[0] {
            "sum" => {
                let (off, len): (usize, usize) = (words[1].parse().unwrap(), words[2].parse().unwrap());
                let peer = f.insert_peer(&unhex(words[3])).unwrap();
                // SAFETY: in-bounds volatile reads of memory peers write into.
                let h = fnv((off..off + len).map(|i| unsafe { std::ptr::read_volatile(mem.add(i)) }));
                f.send(&peer, format!("{h}").as_bytes()).unwrap();
            }
            "quit" => break,
            w => panic!("unexpected {w}"),
        }
    }
}

#[test]
fn two_process_rma() {
    if std::env::var("VSCI_FABRIC_ROLE").is_ok() {
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "two_process_target", "--nocapture", "--test-threads", "1"])
        .env("VSCI_FABRIC_ROLE", "target")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // libtest may print its own "test ... " prefix on the same line.
    let line = lines.by_ref().map(|l| l.unwrap()).find_map(|l| l.split_once("TARGET ").map(|(_, t)| t.to_string()));
    let line = line.expect("target line");
    let w: Vec<&str> = line.split(' ').collect();
    let remote = RemoteRegion { base: w[1].parse().unwrap(), key: w[2].parse().unwrap(), len: w[3].parse().unwrap() };

    let f = Fabric::open(DEFAULT_PROVIDER, Some("127.0.0.1")).unwrap();
    let peer = f.insert_peer(&unhex(w[0])).unwrap();
    let me = hex(&f.address());
    let check = |off: usize, data: &[u8]| {
        f.send(&peer, format!("sum {off} {} {me}", data.len()).as_bytes()).unwrap();
        let m = f.recv_timeout(Duration::from_secs(10)).expect("sum reply");
        assert_eq!(String::from_utf8(m.data).unwrap(), fnv(data.iter().copied()).to_string(), "at {off}");
    };

    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 3) as u8).collect();
    f.write(&peer, &data, &remote, 4096).unwrap();
    check(4096, &data);

    let runs: Vec<(Vec<u8>, u64)> = (0..100u64).map(|i| (vec![i as u8 + 1; 999], 400_000 + i * 1000)).collect();
    let refs: Vec<(&[u8], u64)> = runs.iter().map(|(b, o)| (b.as_slice(), *o)).collect();
    f.write_many(&peer, &refs, &remote).unwrap();
    for (b, o) in &runs {
        check(*o as usize, b);
    }

    let mut back = vec![0u8; data.len()];
    f.read(&peer, &mut back, &remote, 4096).unwrap();
    assert_eq!(back, data);
    assert!(f.write(&peer, &[0; 8], &RemoteRegion { key: remote.key.wrapping_add(1), ..remote }, 0).is_err());
    // The connection recovers from the refused write.
    f.write(&peer, b"after", &remote, 0).unwrap();
    check(0, b"after");

    f.send(&peer, b"quit").unwrap();
    assert!(child.wait().unwrap().success());
}
