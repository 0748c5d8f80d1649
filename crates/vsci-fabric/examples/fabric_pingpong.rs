//! RMA write latency and bandwidth between two processes over 127.0.0.1,
//! next to libfabric's own fi_pingpong on the same machine.
//!
//! Usage: fabric_pingpong [--provider P] [--delivery dc|raw] [--iters N]
//!
//! The program re-runs itself as the peer (`--peer`); the two exchange
//! endpoint addresses and region descriptors over the child's stdin/stdout.
//!
//! Latency: A writes an 8-byte sequence number into B's memory; B polls its
//! memory and writes the number back into A's; A polls its own memory. Half
//! the round trip is reported as one-way latency. Run twice: with B calling
//! `progress()` in its poll loop, and with B's memory served only by its
//! progress thread (B's main thread spins on memory without any call).
//!
//! Delivered write: A times single 8-byte writes (each returns once the data
//! is in B's memory) while B's main thread sleeps and only its progress
//! thread runs, in each ProgressMode.
//!
//! Bandwidth: A writes 1 MiB (one write, 16 x 64 KiB batched, 256 x 256 B
//! scattered batched) and reads 1 MiB; B only runs its progress thread.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vsci_fabric::*;

const MIB: usize = 1 << 20;
const REGION: usize = 4096 + MIB;
/// How B serves its memory in each latency phase; a phase ends when A
/// writes `END - phase`.
/// (ProgressMode::Polling is left out: with A and B's main thread spinning,
/// a third spinner oversubscribes a 2-core machine and measures the
/// scheduler.)
const PHASES: [(&str, Option<ProgressMode>); 3] = [
    ("peer polls memory and calls progress()", None),
    ("peer served by progress thread, Adaptive(100µs)", Some(ProgressMode::Adaptive(Duration::from_micros(100)))),
    ("peer served by progress thread, Blocking", Some(ProgressMode::Blocking)),
];
const END: u64 = u64::MAX;
const IDLE_MODES: [ProgressMode; 3] =
    [ProgressMode::Polling, ProgressMode::Adaptive(Duration::from_micros(100)), ProgressMode::Blocking];

struct Args {
    provider: String,
    delivery: Delivery,
    iters: usize,
    peer: bool,
}

fn args() -> Args {
    let mut a =
        Args { provider: DEFAULT_PROVIDER.into(), delivery: Delivery::DeliveryComplete, iters: 2000, peer: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--provider" => a.provider = it.next().expect("--provider P"),
            "--delivery" => {
                a.delivery = match it.next().as_deref() {
                    Some("dc") => Delivery::DeliveryComplete,
                    Some("raw") => Delivery::ReadAfterWrite,
                    _ => panic!("--delivery dc|raw"),
                }
            }
            "--iters" => a.iters = it.next().and_then(|n| n.parse().ok()).expect("--iters N"),
            "--peer" => a.peer = true,
            _ => panic!("unknown argument {arg}"),
        }
    }
    a
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Our registered region. The first 8 bytes are the ping-pong word, written
/// by the peer and polled here, so they are only accessed atomically.
struct Local {
    f: Fabric,
    mem: *mut u8,
    mr: MemRegion,
}

impl Local {
    fn new(o: &OpenOptions) -> Local {
        let f = Fabric::open_with(o).unwrap();
        let layout = std::alloc::Layout::from_size_align(REGION, 4096).unwrap();
        // SAFETY: non-zero size; never freed, so it outlives the registration.
        let mem = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!mem.is_null());
        // SAFETY: mem is valid for REGION bytes forever.
        let mr = unsafe { f.register(mem, REGION, true, true) }.unwrap();
        Local { f, mem, mr }
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: mem is page-aligned and lives forever; the peer's RMA
        // writes are the only other stores to it.
        unsafe { &*(self.mem as *const AtomicU64) }
    }

    fn line(&self) -> String {
        let r = self.mr.remote();
        format!("{} {} {} {}", hex(&self.f.address()), r.base, r.key, r.len)
    }
}

fn parse_line(l: &str) -> (Vec<u8>, RemoteRegion) {
    let w: Vec<&str> = l.split_whitespace().collect();
    (unhex(w[0]), RemoteRegion { base: w[1].parse().unwrap(), key: w[2].parse().unwrap(), len: w[3].parse().unwrap() })
}

fn peer_main(a: &Args) {
    let me = Local::new(&OpenOptions { provider: a.provider.clone(), bind: Some("127.0.0.1".into()), delivery: None });
    println!("{}", me.line());
    std::io::stdout().flush().unwrap();
    let mut l = String::new();
    std::io::stdin().read_line(&mut l).unwrap();
    let (addr, remote) = parse_line(&l);
    let peer = me.f.insert_peer(&addr).unwrap();

    let echo = |busy: bool, end: u64| {
        let mut last = 0;
        loop {
            if busy {
                me.f.progress();
            } else {
                std::hint::spin_loop();
            }
            let v = me.word().load(Ordering::Acquire);
            if v == last {
                continue;
            }
            last = v;
            if v == end {
                return;
            }
            me.f.write(&peer, &v.to_le_bytes(), &remote, 0).unwrap();
        }
    };
    for (i, (_, mode)) in PHASES.iter().enumerate() {
        let _progress = mode.map(|m| me.f.spawn_progress_thread_with(m));
        echo(mode.is_none(), END - i as u64);
    }
    // Idle-owner phases: B's main thread sleeps in recv_timeout, only the
    // progress thread serves A's writes. Bandwidth runs in the last one.
    for mode in IDLE_MODES {
        let _progress = me.f.spawn_progress_thread_with(mode);
        let m = me.f.recv_timeout(Duration::from_secs(120)).expect("next/done message");
        assert_eq!(m.data, b"next");
    }
    let _progress = me.f.spawn_progress_thread();
    let m = me.f.recv_timeout(Duration::from_secs(120)).expect("done message");
    assert_eq!(m.data, b"done");
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
}

fn main() {
    let a = args();
    if a.peer {
        return peer_main(&a);
    }
    let opts = OpenOptions { provider: a.provider.clone(), bind: Some("127.0.0.1".into()), delivery: Some(a.delivery) };

    // Idle cost of a progress thread: nothing else runs in this process.
    // (Adaptive idles exactly like Blocking once its spin window is over.)
    for mode in [ProgressMode::Blocking, ProgressMode::Polling] {
        let idle = Fabric::open_with(&opts).unwrap();
        if mode == ProgressMode::Blocking {
            println!(
                "provider {}, delivery {:?}, cq wait object: {}",
                idle.info().provider,
                idle.delivery(),
                idle.info().cq_wait
            );
        }
        let _t = idle.spawn_progress_thread_with(mode);
        std::thread::sleep(Duration::from_millis(100));
        let (c0, t0) = (cpu_time(), Instant::now());
        std::thread::sleep(Duration::from_secs(1));
        let (c, t) = (cpu_time() - c0, t0.elapsed());
        println!(
            "idle progress thread {mode:?}: {:.3}% of a core ({:.2} ms CPU in {:.1} s)",
            100.0 * c.as_secs_f64() / t.as_secs_f64(),
            c.as_secs_f64() * 1e3,
            t.as_secs_f64(),
        );
    }

    let me = Local::new(&opts);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--peer", "--provider", &a.provider])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    let (addr, remote) = parse_line(&l);
    writeln!(child.stdin.as_mut().unwrap(), "{}", me.line()).unwrap();
    let peer = me.f.insert_peer(&addr).unwrap();

    let mut seq = 0u64;
    let mut pingpong = |label: &str, end: u64| {
        let mut rtts = Vec::with_capacity(a.iters);
        for i in 0..a.iters + 100 {
            seq += 1;
            let t0 = Instant::now();
            me.f.write(&peer, &seq.to_le_bytes(), &remote, 0).unwrap();
            while me.word().load(Ordering::Acquire) != seq {
                me.f.progress();
            }
            if i >= 100 {
                rtts.push(t0.elapsed());
            }
        }
        me.f.write(&peer, &end.to_le_bytes(), &remote, 0).unwrap();
        rtts.sort();
        let mean = rtts.iter().sum::<Duration>().as_secs_f64() * 1e6 / rtts.len() as f64;
        println!(
            "RMA write ping-pong 8 B, {label}: one-way {:.2} µs median, {:.2} µs mean, {:.2} µs p99 (half of round trip, {} iterations)",
            percentile(&rtts, 0.5) / 2.0,
            mean / 2.0,
            percentile(&rtts, 0.99) / 2.0,
            rtts.len()
        );
    };
    for (i, (label, _)) in PHASES.iter().enumerate() {
        pingpong(label, END - i as u64);
    }

    for mode in IDLE_MODES {
        let mut ts = Vec::with_capacity(a.iters);
        for i in 0..a.iters + 100 {
            let t0 = Instant::now();
            me.f.write(&peer, &(i as u64).to_le_bytes(), &remote, 8).unwrap();
            if i >= 100 {
                ts.push(t0.elapsed());
            }
            // Let B's progress thread fall idle again, as between real flushes.
            std::thread::sleep(Duration::from_micros(200));
        }
        ts.sort();
        println!(
            "delivered 8 B write, B idle, B's progress thread {mode:?}: {:.2} µs median, {:.2} µs p99 per write call",
            percentile(&ts, 0.5),
            percentile(&ts, 0.99)
        );
        me.f.send(&peer, b"next").unwrap();
    }

    // SAFETY: the 1 MiB after the ping-pong page is ours and nobody writes it.
    let src = unsafe { std::slice::from_raw_parts(me.mem.add(4096), MIB) };
    let reps = 200;
    let bw = |label: &str, bytes: usize, f: &mut dyn FnMut()| {
        f();
        let t0 = Instant::now();
        for _ in 0..reps {
            f();
        }
        let dt = t0.elapsed().as_secs_f64();
        println!("{label}: {:.3} GB/s ({:.0} µs per call)", (reps * bytes) as f64 / dt / 1e9, dt * 1e6 / reps as f64);
    };
    bw("write 1 MiB (delivered)", MIB, &mut || me.f.write(&peer, src, &remote, 4096).unwrap());
    let runs: Vec<(&[u8], u64)> =
        (0..16).map(|i| (&src[i * 65536..(i + 1) * 65536], 4096 + (i * 65536) as u64)).collect();
    bw("write_many 16 x 64 KiB (delivered)", MIB, &mut || me.f.write_many(&peer, &runs, &remote).unwrap());
    let small: Vec<(&[u8], u64)> =
        (0..256).map(|i| (&src[i * 4096..i * 4096 + 256], 4096 + (i * 4096) as u64)).collect();
    bw("write_many 256 x 256 B scattered (delivered)", 65536, &mut || me.f.write_many(&peer, &small, &remote).unwrap());
    let mut dst = vec![0u8; MIB];
    bw("read 1 MiB", MIB, &mut || me.f.read(&peer, &mut dst, &remote, 4096).unwrap());
    me.f.send(&peer, b"done").unwrap();
    assert!(child.wait().unwrap().success());

    fi_pingpong();
}

/// Runs libfabric's fi_pingpong (server and client on 127.0.0.1) and prints
/// its result lines. Its "usec/xfer" is one-way latency, "MB/sec" is 10^6
/// bytes per second.
fn fi_pingpong() {
    let runs: &[(&str, &str, &str, &str)] = &[
        ("tcp", "msg", "8", "5000"),
        ("tcp;ofi_rxm", "rdm", "8", "5000"),
        ("tcp", "msg", "1048576", "200"),
        ("tcp;ofi_rxm", "rdm", "1048576", "200"),
    ];
    for (i, (prov, ep, size, iters)) in runs.iter().enumerate() {
        let port = (47700 + i).to_string();
        let common = ["-p", prov, "-e", ep, "-S", size, "-I", iters];
        let server = Command::new("fi_pingpong")
            .args(common)
            .args(["-B", &port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut server) = server else {
            println!("fi_pingpong not found (install libfabric-bin)");
            return;
        };
        std::thread::sleep(Duration::from_millis(300));
        let out = Command::new("fi_pingpong").args(common).args(["-P", &port, "127.0.0.1"]).output();
        let _ = server.wait();
        match out {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout);
                let result = text.lines().last().unwrap_or("(no output)");
                println!("fi_pingpong -p '{prov}' -e {ep} -S {size}: {result}   [bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec]");
            }
            Err(e) => println!("fi_pingpong: {e}"),
        }
    }
}
