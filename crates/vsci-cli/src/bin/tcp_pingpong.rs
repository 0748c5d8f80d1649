//! `tcp_pingpong`: a blocking TCP ping-pong with a fixed number of round
//! trips per message size, for `vsci bench --paths devices` (NetPIPE's
//! measure in seed 004 §7.2). A message is a 4-byte length and that many
//! payload bytes; the server reads a whole message before it sends it back
//! in one write. The client times each round trip (write to last byte
//! read back), checks every echoed byte, and prints RTT/2 per size.
//!
//!     tcp_pingpong server ADDR:PORT
//!     tcp_pingpong client ADDR:PORT --sizes 32,256,... [--count N] [--warmup N]
//!
//! The client's last line is `@@json {...}`: per size the median, p99,
//! mean, min and max of RTT/2 in µs and the round trips whose echo was
//! checked. A wrong echo, or one missing for 10 s, ends the client with an
//! error (exit 1): a figure only stands for bytes that came back intact.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn usage() -> ! {
    eprintln!("usage: tcp_pingpong server ADDR:PORT\n       tcp_pingpong client ADDR:PORT --sizes N,N,... [--count N] [--warmup N]");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(addr)) = (args.first(), args.get(1)) else { usage() };
    let r = match mode.as_str() {
        "server" => server(addr).map_err(|e| e.to_string()),
        "client" => {
            let mut sizes = Vec::new();
            let (mut count, mut warmup) = (200u32, 20u32);
            let mut it = args[2..].iter();
            while let Some(a) = it.next() {
                let v = it.next().unwrap_or_else(|| usage());
                match a.as_str() {
                    "--sizes" => sizes = v.split(',').map(|s| s.parse::<usize>().unwrap_or_else(|_| usage())).collect(),
                    "--count" => count = v.parse().unwrap_or_else(|_| usage()),
                    "--warmup" => warmup = v.parse().unwrap_or_else(|_| usage()),
                    _ => usage(),
                }
            }
            if sizes.is_empty() || count == 0 || sizes.iter().any(|&s| s == 0 || s > 16 << 20) {
                usage();
            }
            client(addr, &sizes, count, warmup)
        }
        _ => usage(),
    };
    if let Err(e) = r {
        eprintln!("tcp_pingpong {mode}: {e}");
        std::process::exit(1);
    }
}

fn server(addr: &str) -> std::io::Result<()> {
    let l = TcpListener::bind(addr)?;
    println!("tcp_pingpong: listening on {addr}");
    for conn in l.incoming() {
        let Ok(s) = conn else { continue };
        std::thread::spawn(move || {
            let _ = echo(s);
        });
    }
    Ok(())
}

/// Read whole messages and send each back in one write, until EOF.
fn echo(mut s: TcpStream) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let mut buf = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_err() {
            return Ok(());
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > 16 << 20 {
            return Ok(());
        }
        buf.resize(4 + n, 0);
        buf[..4].copy_from_slice(&len);
        s.read_exact(&mut buf[4..])?;
        s.write_all(&buf)?;
    }
}

/// Payload byte `i` of round trip `k`: differs between consecutive round
/// trips, so an echo of an older message is caught.
fn pattern(k: u32, i: usize) -> u8 {
    (i as u32).wrapping_mul(31).wrapping_add(k.wrapping_mul(7)) as u8
}

fn client(addr: &str, sizes: &[usize], count: u32, warmup: u32) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    // A lost or stalled echo ends the run instead of hanging it.
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for &size in sizes {
        let mut out = vec![0u8; 4 + size];
        out[..4].copy_from_slice(&(size as u32).to_le_bytes());
        let mut back = vec![0u8; 4 + size];
        let mut half_us = Vec::with_capacity(count as usize);
        for k in 0..warmup + count {
            for (i, b) in out[4..].iter_mut().enumerate() {
                *b = pattern(k, i);
            }
            let t0 = Instant::now();
            s.write_all(&out).map_err(|e| format!("{size} B, round trip {k}: send: {e}"))?;
            s.read_exact(&mut back).map_err(|e| format!("{size} B, round trip {k}: no complete echo: {e}"))?;
            let dt = t0.elapsed();
            if back != out {
                let at = back.iter().zip(&out).position(|(a, b)| a != b).unwrap_or(0);
                return Err(format!("{size} B, round trip {k}: the echo differs from what was sent at byte {at}"));
            }
            if k >= warmup {
                half_us.push(dt.as_secs_f64() * 1e6 / 2.0);
            }
        }
        half_us.sort_by(f64::total_cmp);
        let n = half_us.len();
        let pct = |p: f64| half_us[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        let mean = half_us.iter().sum::<f64>() / n as f64;
        println!(
            "tcp_pingpong {size:>6} B x {n}: median {:.2} us, p99 {:.2} us, mean {mean:.2} us (RTT/2), every echo checked",
            pct(0.5),
            pct(0.99)
        );
        rows.push(format!(
            "{{\"size\": {size}, \"n\": {n}, \"median_us\": {:.3}, \"p99_us\": {:.3}, \"mean_us\": {mean:.3}, \"min_us\": {:.3}, \"max_us\": {:.3}, \"verified\": {n}}}",
            pct(0.5),
            pct(0.99),
            half_us[0],
            half_us[n - 1]
        ));
    }
    println!("@@json {{\"count\": {count}, \"warmup\": {warmup}, \"rows\": [{}]}}", rows.join(", "));
    Ok(())
}
