//! One delivered libfabric RMA write, timed: the peer of remote_bench's
//! "store + SCIFlush" rows (`vsci bench --paths remote`), run between the
//! same two network namespaces as the two vscid nodes.
//!
//! ```text
//! fabric_write_lat target BIND_IP [--provider P]
//! fabric_write_lat initiator BIND_IP --to "ADDR BASE KEY LEN" [--sizes 1,4096] [--quick] [--provider P]
//! ```
//!
//! The target opens an endpoint on BIND_IP, registers a 64 KiB region and
//! serves it the way vscid's engine serves segments: a blocking progress
//! thread with real-time priority where the process may have it
//! (`spawn_progress_thread_realtime`); its main thread only waits. It
//! prints `fabric-target ADDR BASE KEY LEN` (the endpoint address in hex and
//! the region descriptor) and exits when its stdin reaches end of file.
//!
//! The initiator writes into that region with [`Fabric::write`], which
//! returns once the bytes are in the target's memory (delivery complete):
//! per size, a warm-up, then writes timed one by one, back to back, each
//! carrying new data (1 B: a new value; larger: the sequence number in the
//! first 8 bytes, then a pattern that differs in every byte from the
//! previous write's). After the timed writes it reads the bytes back from
//! the target and compares them with the last write (`data_check`). It
//! prints one line per size and, last, `@@json {...}` with every figure
//! (microseconds per write call).

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use vsci_fabric::{Fabric, RemoteRegion, DEFAULT_PROVIDER};

const REGION: usize = 64 << 10;
/// Where each size is written in the region (its own pages, as in remote_bench).
fn offset_of(size: usize) -> u64 {
    if size == 1 {
        45056
    } else {
        32768
    }
}

fn die(msg: &str) -> ! {
    eprintln!("fabric_write_lat: {msg}");
    std::process::exit(2)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

struct Args {
    role: String,
    bind: String,
    provider: String,
    to: Option<String>,
    sizes: Vec<usize>,
    quick: bool,
}

fn args() -> Args {
    let mut it = std::env::args().skip(1);
    let role = it.next().unwrap_or_default();
    if role != "target" && role != "initiator" {
        die("usage: fabric_write_lat target|initiator BIND_IP [--provider P] [--to \"ADDR BASE KEY LEN\"] [--sizes 1,4096] [--quick]");
    }
    let bind = it.next().unwrap_or_else(|| die("BIND_IP missing"));
    let mut a = Args { role, bind, provider: DEFAULT_PROVIDER.into(), to: None, sizes: vec![1, 4096], quick: false };
    while let Some(x) = it.next() {
        match x.as_str() {
            "--provider" => a.provider = it.next().unwrap_or_else(|| die("--provider P")),
            "--to" => a.to = Some(it.next().unwrap_or_else(|| die("--to \"ADDR BASE KEY LEN\""))),
            "--sizes" => {
                let v = it.next().unwrap_or_else(|| die("--sizes LIST"));
                a.sizes = v.split(',').map(|s| s.trim().parse().unwrap_or_else(|_| die("--sizes: numbers"))).collect();
                if a.sizes.iter().any(|&s| s == 0 || s > 8192) {
                    die("--sizes: 1 to 8192 bytes");
                }
            }
            "--quick" => a.quick = true,
            _ => die(&format!("unknown argument {x}")),
        }
    }
    a
}

fn target(a: &Args) {
    let f = Fabric::open(&a.provider, Some(&a.bind))
        .unwrap_or_else(|e| die(&format!("opening {} on {}: {e}", a.provider, a.bind)));
    let layout = std::alloc::Layout::from_size_align(REGION, 4096).expect("layout");
    // SAFETY: non-zero size; never freed, so it outlives the registration.
    let mem = unsafe { std::alloc::alloc_zeroed(layout) };
    if mem.is_null() {
        die("out of memory");
    }
    // SAFETY: mem is valid for REGION bytes for the life of the process;
    // only the peer's RMA writes and reads touch it.
    let mr =
        unsafe { f.register(mem, REGION, true, true) }.unwrap_or_else(|e| die(&format!("registering the region: {e}")));
    let _progress = f.spawn_progress_thread_realtime();
    let r = mr.remote();
    println!("fabric-target {} {} {} {}", hex(&f.address()), r.base, r.key, r.len);
    let _ = std::io::stdout().flush();
    // Serve until the harness closes our stdin.
    let mut sink = String::new();
    let stdin = std::io::stdin();
    let mut lock = stdin.lock();
    while lock.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
        sink.clear();
    }
    drop(mr);
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn initiator(a: &Args) {
    let to = a.to.as_deref().unwrap_or_else(|| die("--to \"ADDR BASE KEY LEN\" missing"));
    let w: Vec<&str> = to.split_whitespace().collect();
    let (addr, region) = match w.as_slice() {
        [addr, base, key, len] => (
            unhex(addr).unwrap_or_else(|| die("--to: the address is not hex")),
            RemoteRegion {
                base: base.parse().unwrap_or_else(|_| die("--to: BASE")),
                key: key.parse().unwrap_or_else(|_| die("--to: KEY")),
                len: len.parse().unwrap_or_else(|_| die("--to: LEN")),
            },
        ),
        _ => die("--to wants \"ADDR BASE KEY LEN\""),
    };
    let f = Fabric::open(&a.provider, Some(&a.bind))
        .unwrap_or_else(|e| die(&format!("opening {} on {}: {e}", a.provider, a.bind)));
    // As a vsci client process: a progress thread reaps what nobody waits for.
    let _progress = f.spawn_progress_thread();
    let peer = f.insert_peer(&addr).unwrap_or_else(|e| die(&format!("inserting the target's address: {e}")));
    let (warm, lo, hi, budget) = if a.quick { (50u32, 200u32, 2000u32, 0.15) } else { (300, 1000, 20000, 0.6) };
    let mut rows = Vec::new();
    let mut seq = 0u64;
    for &size in &a.sizes {
        let off = offset_of(size);
        let mut pat = [vec![0x5au8; size], vec![0xa5u8; size]];
        let one = |seq: u64, pat: &mut [Vec<u8>; 2]| -> Duration {
            let p = &mut pat[(seq & 1) as usize];
            if size == 1 {
                p[0] = seq as u8;
            } else {
                let n = size.min(8);
                p[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
            }
            let t0 = Instant::now();
            f.write(&peer, p, &region, off).unwrap_or_else(|e| die(&format!("write of {size} B: {e}")));
            t0.elapsed()
        };
        let t0 = Instant::now();
        for _ in 0..warm {
            seq += 1;
            one(seq, &mut pat);
        }
        let per = t0.elapsed().as_secs_f64() / warm as f64;
        let n = ((budget / per.max(1e-9)) as u32).clamp(lo, hi);
        let mut us: Vec<f64> = (0..n)
            .map(|_| {
                seq += 1;
                one(seq, &mut pat).as_secs_f64() * 1e6
            })
            .collect();
        // What arrived: the target's bytes are the last write's.
        let mut back = vec![0u8; size];
        f.read(&peer, &mut back, &region, off).unwrap_or_else(|e| die(&format!("read back of {size} B: {e}")));
        let ok = back == pat[(seq & 1) as usize];
        us.sort_by(f64::total_cmp);
        let (med, p99) = (us[us.len() / 2], percentile(&us, 0.99));
        let mean = us.iter().sum::<f64>() / us.len() as f64;
        println!(
            "delivered RMA write {size:>5} B ({}): median {med:.2} us, p99 {p99:.2} us, mean {mean:.2} us per write, {n} writes; {}",
            a.provider,
            if ok { "read back identical" } else { "!! READ BACK DIFFERS" }
        );
        rows.push(format!(
            "{{\"size\": {size}, \"n\": {n}, \"median_us\": {med:.4}, \"p99_us\": {p99:.4}, \"mean_us\": {mean:.4}, \"min_us\": {:.4}, \"max_us\": {:.4}, \"data_check\": \"{}\"}}",
            us[0],
            us[us.len() - 1],
            if ok { "ok" } else { "mismatch" }
        ));
    }
    println!(
        "@@json {{\"provider\": \"{}\", \"delivery\": \"{:?}\", \"rows\": [{}]}}",
        f.info().provider,
        f.delivery(),
        rows.join(", ")
    );
    let _ = std::io::stdout().flush();
}

fn main() {
    let a = args();
    if a.role == "target" {
        target(&a);
    } else {
        initiator(&a);
    }
}
