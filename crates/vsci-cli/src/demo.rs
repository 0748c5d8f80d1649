//! `vsci demo`: two processes move data and interrupts through one node.
//!
//! The server creates a 64 MiB segment and two interrupts and publishes
//! their numbers in the segment's first bytes; the client connects, writes
//! a pattern, announces it with a data interrupt, then the two time an
//! interrupt ping-pong, a shared-memory ping-pong and a streaming write.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use vsci_client::{Client, DataWait, IntrKind, Map, MapFlags, MapTarget, SegmentEvent};

use vsci_bench::node::{sibling, TempNode};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Role {
    Server,
    Client,
}

const SEGMENT_SIZE: u64 = 64 << 20;
const PATTERN_BYTES: usize = 1 << 20;
const TIMEOUT_MS: u32 = 20_000;

/// Header at the start of the segment (u32 words).
const H_MAGIC: usize = 0;
const H_SERVER_INTR: usize = 1;
const H_SERVER_DATA_INTR: usize = 2;
const H_CLIENT_INTR: usize = 3;
/// Shared-memory ping-pong flags (u32 words, each on its own cache line).
const PING: usize = 16;
const PONG: usize = 32;
/// The pattern starts here.
const DATA_OFF: usize = 4096;
const MAGIC: u32 = 0x7653_4349;

pub fn run(socket: Option<PathBuf>, round_trips: u32, stream_bytes: u64) -> Result<()> {
    let node;
    let socket = match socket {
        Some(s) => s,
        None => {
            println!("== vsci demo: starting a node (vscid --node-id 1) on embedded defaults");
            node = TempNode::start(1)?;
            node.socket().to_owned()
        }
    };
    let me = std::env::current_exe().context("locating vsci")?;
    let spawn = |role: &str| {
        Command::new(&me)
            .args([
                "demo-peer",
                "--role",
                role,
                "--round-trips",
                &round_trips.to_string(),
                "--stream-bytes",
                &stream_bytes.to_string(),
            ])
            .env(vsci_proto::SOCKET_ENV, &socket)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the {role} process"))
    };
    println!("== node socket {}; starting a server and a client process", socket.display());
    let mut server = spawn("server")?;
    let mut client = spawn("client")?;
    let cs = client.wait()?;
    let ss = server.wait()?;
    let _ = sibling("vscid");
    if !cs.success() || !ss.success() {
        bail!("demo failed (server {ss}, client {cs})");
    }
    println!("== demo finished: data and interrupts moved between two processes through the node, zero copy");
    Ok(())
}

fn word(map: &Map, i: usize) -> &AtomicU32 {
    assert!((i + 1) * 4 <= map.size);
    // SAFETY: in bounds (checked), 4-byte aligned (map starts on a page),
    // and the memory is shared with the peer, so it is only accessed
    // through atomics here.
    unsafe { &*(map.addr.add(i * 4) as *const AtomicU32) }
}

fn pattern_byte(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3))
}

fn sci(e: vsci_client::SciError) -> anyhow::Error {
    anyhow!("{e}")
}

pub fn peer(role: Role, round_trips: u32, stream_bytes: u64) -> Result<()> {
    let client =
        Client::connect(&vsci_proto::socket_path(), &format!("vsci-demo-{role:?}").to_lowercase()).map_err(sci)?;
    match role {
        Role::Server => server(&client, round_trips),
        Role::Client => client_side(&client, round_trips, stream_bytes),
    }
}

fn segment_id() -> u32 {
    // Same for both peers (they share a parent), distinct across demos.
    0x5eed_0000 | (std::os::unix::process::parent_id() & 0xffff)
}

fn server(c: &Client, round_trips: u32) -> Result<()> {
    let seg = c.create_segment(Some(segment_id()), SEGMENT_SIZE).map_err(sci)?;
    let intr = c.create_interrupt(IntrKind::Plain, 10, false).map_err(sci)?;
    let dintr = c.create_interrupt(IntrKind::Data, 11, false).map_err(sci)?;
    let map = Arc::new(Map::new(MapTarget::Local(seg.clone()), 0, SEGMENT_SIZE, MapFlags::default()).map_err(sci)?);
    word(&map, H_SERVER_INTR).store(intr.number, Ordering::Relaxed);
    word(&map, H_SERVER_DATA_INTR).store(dintr.number, Ordering::Relaxed);
    word(&map, H_MAGIC).store(MAGIC, Ordering::Release);
    seg.prepare().map_err(sci)?;
    seg.set_available().map_err(sci)?;
    println!(
        "[server] segment {:#x} ({} MiB) available on node {}; interrupt {}, data interrupt {}",
        seg.segment_id,
        SEGMENT_SIZE >> 20,
        c.node_id(),
        intr.number,
        dintr.number
    );

    let ev = seg.events.wait(TIMEOUT_MS).map_err(sci)?;
    println!("[server] segment event: {:?} from node {}", ev.reason, ev.node_id);

    let mut msg = [0u8; 1024];
    let n = match dintr.wait_data(&mut msg, TIMEOUT_MS).map_err(sci)? {
        DataWait::Got(n) => n,
        DataWait::TooSmall(n) => bail!("data interrupt of {n} bytes too large"),
    };
    let text = String::from_utf8_lossy(&msg[..n]).into_owned();
    println!("[server] data interrupt ({n} bytes): {text:?}");
    // SAFETY: DATA_OFF + PATTERN_BYTES lies inside the 64 MiB map; the
    // client finished writing before it sent the data interrupt.
    let data = unsafe { std::slice::from_raw_parts(map.addr.add(DATA_OFF), PATTERN_BYTES) };
    let bad = data.iter().enumerate().filter(|(i, b)| **b != pattern_byte(*i)).count();
    let sum = checksum(data);
    println!("[server] checked {} bytes in place (no copy): {} wrong, checksum {sum:016x}", PATTERN_BYTES, bad);
    if bad != 0 || !text.contains(&format!("{sum:016x}")) {
        bail!("pattern mismatch");
    }

    let client_intr_no = word(&map, H_CLIENT_INTR).load(Ordering::Acquire);
    let back = c.connect_interrupt(IntrKind::Plain, c.node_id(), client_intr_no, TIMEOUT_MS).map_err(sci)?;
    back.trigger().map_err(sci)?;

    // Interrupt ping-pong: answer each trigger.
    for _ in 0..round_trips {
        intr.wait(TIMEOUT_MS).map_err(sci)?;
        back.trigger().map_err(sci)?;
    }
    // Shared-memory ping-pong: echo the counter.
    let (ping, pong) = (word(&map, PING), word(&map, PONG));
    for i in 1..=round_trips {
        while ping.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        pong.store(i, Ordering::Release);
    }
    let ev = seg.events.wait(TIMEOUT_MS).map_err(sci)?;
    println!("[server] segment event: {:?}; removing the segment", ev.reason);
    if ev.reason != SegmentEvent::Disconnect {
        bail!("expected a disconnect event");
    }
    drop(map);
    seg.remove().map_err(sci)?;
    intr.remove().map_err(sci)?;
    dintr.remove().map_err(sci)?;
    c.close();
    Ok(())
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn client_side(c: &Client, round_trips: u32, stream_bytes: u64) -> Result<()> {
    let rs = c.connect_segment(c.node_id(), segment_id(), TIMEOUT_MS).map_err(sci)?;
    let map = Map::new(MapTarget::Remote(rs.clone()), 0, rs.size, MapFlags::default()).map_err(sci)?;
    let t0 = Instant::now();
    while word(&map, H_MAGIC).load(Ordering::Acquire) != MAGIC {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("server never published its header");
        }
        std::thread::yield_now();
    }
    let own = c.create_interrupt(IntrKind::Plain, 20, false).map_err(sci)?;
    word(&map, H_CLIENT_INTR).store(own.number, Ordering::Release);
    let to_server = c
        .connect_interrupt(IntrKind::Plain, c.node_id(), word(&map, H_SERVER_INTR).load(Ordering::Acquire), TIMEOUT_MS)
        .map_err(sci)?;
    let to_server_data = c
        .connect_interrupt(
            IntrKind::Data,
            c.node_id(),
            word(&map, H_SERVER_DATA_INTR).load(Ordering::Acquire),
            TIMEOUT_MS,
        )
        .map_err(sci)?;
    println!("[client] connected to segment {:#x} ({} MiB) and mapped it", rs.segment_id, rs.size >> 20);

    // SAFETY: DATA_OFF + PATTERN_BYTES is inside the map; the server only
    // reads this range after our data interrupt.
    let data = unsafe { std::slice::from_raw_parts_mut(map.addr.add(DATA_OFF), PATTERN_BYTES) };
    for (i, b) in data.iter_mut().enumerate() {
        *b = pattern_byte(i);
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    let msg = format!("wrote {} bytes at offset {DATA_OFF}, checksum {:016x}", PATTERN_BYTES, checksum(data));
    to_server_data.trigger_data(msg.as_bytes()).map_err(sci)?;
    println!("[client] {msg}; sent it as a data interrupt");
    own.wait(TIMEOUT_MS).map_err(sci)?;
    println!("[client] server verified the data and answered with an interrupt");

    let mut rtt = Vec::with_capacity(round_trips as usize);
    for _ in 0..round_trips {
        let t = Instant::now();
        to_server.trigger().map_err(sci)?;
        own.wait(TIMEOUT_MS).map_err(sci)?;
        rtt.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let p50 = percentile(&mut rtt, 0.5);
    println!(
        "[client] interrupt ping-pong, {round_trips} round trips ({} wait): one-way median {:.2} us, p99 {:.2} us",
        own.policy.mode,
        p50 / 2.0,
        percentile(&mut rtt, 0.99) / 2.0
    );

    let (ping, pong) = (word(&map, PING), word(&map, PONG));
    let mut rtt = Vec::with_capacity(round_trips as usize);
    for i in 1..=round_trips {
        let t = Instant::now();
        ping.store(i, Ordering::Release);
        while pong.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        rtt.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "[client] segment ping-pong (store, busy-wait on a flag), {round_trips} round trips: one-way median {:.3} us",
        percentile(&mut rtt, 0.5) / 2.0
    );

    // Streaming write into the segment vs into private memory.
    let chunk = 8usize << 20;
    let src = vec![0x5au8; chunk];
    let mut private = vec![0u8; chunk];
    let passes = (stream_bytes as usize / chunk).max(1);
    let dst_off = DATA_OFF;
    let t = Instant::now();
    for _ in 0..passes {
        // SAFETY: dst_off + chunk <= 64 MiB map; plain bytes, no aliasing
        // Rust references to the destination exist.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), map.addr.add(dst_off), chunk) };
        std::sync::atomic::fence(Ordering::SeqCst);
    }
    let seg_bw = (passes * chunk) as f64 / t.elapsed().as_secs_f64() / 1e9;
    let t = Instant::now();
    for _ in 0..passes {
        private.copy_from_slice(&src);
        std::hint::black_box(&mut private);
    }
    let mem_bw = (passes * chunk) as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!("[client] streamed {} MiB into the segment: {seg_bw:.2} GB/s; memcpy into private memory: {mem_bw:.2} GB/s; ratio {:.2}", (passes * chunk) >> 20, seg_bw / mem_bw);

    drop(map);
    rs.disconnect().map_err(sci)?;
    to_server.disconnect().map_err(sci)?;
    to_server_data.disconnect().map_err(sci)?;
    own.remove().map_err(sci)?;
    c.close();
    Ok(())
}
