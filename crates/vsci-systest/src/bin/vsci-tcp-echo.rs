//! Real TCP through whatever carries it, with every byte checked:
//!
//!     vsci-tcp-echo server ADDR:PORT        echo every connection's bytes back
//!     vsci-tcp-echo client ADDR:PORT BYTES  send BYTES of a seeded stream,
//!                                           check the echo, print the rate
//!
//! Used by the device-sharing tests: a stale, lost, reordered or misplaced
//! frame shows as a mismatch or a stall, not as a pass.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn stream_byte(seed: u64, i: u64) -> u8 {
    let mut x = seed ^ (i / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 32;
    (x >> ((i % 8) * 8)) as u8
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("server") => {
            let l = TcpListener::bind(&args[2]).unwrap_or_else(|e| panic!("bind {}: {e}", args[2]));
            println!("listening on {}", args[2]);
            for c in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut c = c;
                    let mut buf = vec![0u8; 65536];
                    loop {
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if c.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        }
        Some("client") => {
            let total: u64 = args[3].parse().expect("BYTES");
            let seed = u64::from(std::process::id()) ^ Instant::now().elapsed().as_nanos() as u64 ^ 0x5eed;
            let start = Instant::now();
            let addr: std::net::SocketAddr = args[2].parse().expect("ADDR:PORT");
            let mut c = loop {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                    Ok(c) => break c,
                    Err(e) if start.elapsed() < Duration::from_secs(20) => {
                        eprintln!("connect {}: {e}; retrying", args[2]);
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(e) => panic!("connect {}: {e}", args[2]),
                }
            };
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let t0 = Instant::now();
            let mut w = c.try_clone().unwrap();
            let writer = std::thread::spawn(move || {
                let mut buf = vec![0u8; 16384];
                let mut at = 0u64;
                while at < total {
                    let n = (total - at).min(buf.len() as u64) as usize;
                    for (k, b) in buf[..n].iter_mut().enumerate() {
                        *b = stream_byte(seed, at + k as u64);
                    }
                    w.write_all(&buf[..n]).expect("send");
                    at += n as u64;
                }
            });
            let mut buf = vec![0u8; 65536];
            let mut got = 0u64;
            while got < total {
                let n = c.read(&mut buf).unwrap_or_else(|e| panic!("receive after {got} of {total} bytes: {e}"));
                assert!(n > 0, "the connection closed after {got} of {total} bytes");
                for (k, &b) in buf[..n].iter().enumerate() {
                    let i = got + k as u64;
                    assert_eq!(b, stream_byte(seed, i), "byte {i} of the echo differs");
                }
                got += n as u64;
            }
            writer.join().unwrap();
            let s = t0.elapsed().as_secs_f64();
            println!("ok {total} bytes echoed intact in {s:.3} s ({:.2} MB/s each way)", total as f64 / s / 1e6);
        }
        _ => {
            eprintln!("usage: vsci-tcp-echo server ADDR:PORT | client ADDR:PORT BYTES");
            std::process::exit(2);
        }
    }
}
