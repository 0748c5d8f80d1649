//! Checks a memory extension (vsci_lend::memext) end to end; the system
//! test crates/vsci-systest/tests/memext.rs runs it in a node's namespace.
//!
//!     vsci-memext-check [--local] stream SIZE BUDGET LENDERS
//!     vsci-memext-check restart SIZE BUDGET LENDERS
//!
//! SIZE and BUDGET take K/M/G suffixes; LENDERS is a list of node ids
//! ("2,3"). `stream` writes a pattern over min(SIZE, 2 × BUDGET) bytes,
//! reads it all back twice (in order, then page by page in a random
//! order), rewrites it page by page in a random order (each page read
//! first) and reads that back, and prints the rates, the extension's
//! counters and `OK` only if every byte matched; with `--local` it runs on
//! an anonymous mapping instead
//! (the same program on plain memory, to compare). `restart` fills the
//! whole range, prints READY, waits for a line on stdin, checks everything
//! and prints OK; if the next line is `again`, it rewrites the range (with
//! another pattern) until a lender that failed was borrowed from again and
//! once more after that, prints READY2, waits for a line, checks and prints
//! OK2. Exit status 1 on a mismatch, 2 on bad arguments or setup errors.

use std::io::BufRead;
use std::process::exit;
use std::time::Instant;

use vsci_lend::memext::{Extension, Stats, PAGE};

fn usage() -> ! {
    eprintln!("usage: vsci-memext-check [--local] stream|restart SIZE BUDGET LENDERS");
    exit(2)
}

/// The word at word index `i` of pattern `seed`: differs per word and per
/// seed, so a stale, zero or misplaced page cannot pass.
fn word(seed: u64, i: u64) -> u64 {
    let mut x = i.wrapping_add(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ 0x5851_f42d_4c95_7f2d;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

fn as_words(mem: &mut [u8]) -> &mut [u64] {
    // SAFETY: the range is page aligned (mmap), so u64-aligned; its length
    // is a multiple of the page size; every bit pattern is a valid u64; the
    // new slice takes over `mem`'s exclusive borrow.
    unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr().cast::<u64>(), mem.len() / 8) }
}

fn fill(w: &mut [u64], seed: u64) {
    for (i, x) in w.iter_mut().enumerate() {
        *x = word(seed, i as u64);
    }
}

fn mismatch(i: usize, got: u64, want: u64) -> ! {
    println!("MISMATCH at byte offset {:#x} (page {}): got {got:#018x}, want {want:#018x}", i * 8, i * 8 / PAGE);
    exit(1)
}

fn verify_seq(w: &[u64], seed: u64) {
    for (i, &x) in w.iter().enumerate() {
        if x != word(seed, i as u64) {
            mismatch(i, x, word(seed, i as u64));
        }
    }
}

/// Page numbers `0..pages` in a random order (a fixed shuffle:
/// reproducible).
fn shuffled(pages: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pages).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

/// Page by page in a random order.
fn verify_random(w: &[u64], seed: u64) {
    let per = PAGE / 8;
    for p in shuffled(w.len() / per) {
        for (i, &x) in w.iter().enumerate().skip(p * per).take(per) {
            if x != word(seed, i as u64) {
                mismatch(i, x, word(seed, i as u64));
            }
        }
    }
}

/// Page by page in a random order, check a word of pattern `old` and then
/// rewrite the page with pattern `new`: stores to pages brought in (or
/// kept) clean by a load, which the extension must notice are dirty.
fn update_random(w: &mut [u64], old: u64, new: u64) {
    let per = PAGE / 8;
    for p in shuffled(w.len() / per).into_iter().rev() {
        let i = p * per + p % per;
        if w[i] != word(old, i as u64) {
            mismatch(i, w[i], word(old, i as u64));
        }
        for (i, x) in w.iter_mut().enumerate().skip(p * per).take(per) {
            *x = word(new, i as u64);
        }
    }
}

fn print_stats(s: &Stats) {
    println!(
        "faults={} wp_faults={} zero_fills={} fetches={} mirror_fetches={} readahead_pages={} evictions={} write_backs={} resident_bytes={} lender_failures={} reborrows={}",
        s.faults, s.wp_faults, s.zero_fills, s.fetches, s.mirror_fetches, s.readahead_pages, s.evictions, s.write_backs, s.resident_bytes, s.lender_failures, s.reborrows
    );
}

fn rate(bytes: usize, t: Instant) -> String {
    let s = t.elapsed().as_secs_f64();
    format!("{:.3} GB/s ({bytes} bytes in {:.3} s)", bytes as f64 / s / 1e9, s)
}

/// Anonymous memory standing in for the extension (`--local`).
struct Local(vsci_sys::Mapping);

impl Local {
    fn new(len: usize) -> Local {
        match vsci_sys::MapOptions::private().anonymous(len) {
            Ok(m) => Local(m),
            Err(e) => {
                eprintln!("mmap: {e}");
                exit(2);
            }
        }
    }

    fn slice(&mut self) -> &mut [u8] {
        let len = self.0.len();
        // SAFETY: private anonymous memory that nothing but this slice
        // touches; `&mut self` keeps it the only one.
        unsafe { self.0.as_mut_slice(0, len) }
    }
}

/// Write and read back `span` bytes; exits on a mismatch.
fn stream(mem: &mut [u8], span: usize) {
    let w = as_words(&mut mem[..span]);
    let t = Instant::now();
    fill(w, 1);
    println!("write: {}", rate(span, t));
    let t = Instant::now();
    verify_seq(w, 1);
    println!("read sequential: {}", rate(span, t));
    let t = Instant::now();
    verify_random(w, 1);
    println!("read random pages: {}", rate(span, t));
    let t = Instant::now();
    update_random(w, 1, 2);
    println!("read-modify-write random pages: {}", rate(span, t));
    verify_seq(w, 2);
}

fn line() -> Option<String> {
    let mut l = String::new();
    match std::io::stdin().lock().read_line(&mut l) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(l.trim().to_string()),
    }
}

fn restart(ext: &mut Extension) {
    let t = Instant::now();
    fill(as_words(ext.as_mut_slice()), 1);
    print_stats(&ext.stats());
    println!("READY (filled {} bytes in {:.2} s)", ext.len(), t.elapsed().as_secs_f64());
    if line().is_none() {
        eprintln!("no line on stdin");
        exit(2);
    }
    verify_seq(as_words(ext.as_mut_slice()), 1);
    print_stats(&ext.stats());
    println!("OK");
    if line().as_deref() != Some("again") {
        return;
    }
    // Write-backs now go to the surviving lender; keep writing until one
    // of them borrows from the failed lender again, then once more over
    // everything, so every page written back is mirrored again.
    let start = Instant::now();
    let mut seed = 2;
    while ext.stats().reborrows == 0 {
        if start.elapsed().as_secs() > 60 {
            print_stats(&ext.stats());
            println!("NO REBORROW after 60 s");
            exit(1);
        }
        seed += 1;
        fill(as_words(ext.as_mut_slice()), seed);
    }
    seed += 1;
    fill(as_words(ext.as_mut_slice()), seed);
    print_stats(&ext.stats());
    println!("READY2");
    if line().is_none() {
        eprintln!("no second line on stdin");
        exit(2);
    }
    verify_seq(as_words(ext.as_mut_slice()), seed);
    print_stats(&ext.stats());
    println!("OK2");
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let local = args.first().is_some_and(|a| a == "--local");
    if local {
        args.remove(0);
    }
    let [mode, size, budget, lenders] = &args[..] else { usage() };
    let size = vsci_proto::parse_size(size).unwrap_or_else(|e| {
        eprintln!("SIZE: {e}");
        exit(2)
    });
    let budget = vsci_proto::parse_size(budget).unwrap_or_else(|e| {
        eprintln!("BUDGET: {e}");
        exit(2)
    });
    let span = size.min(2 * budget) as usize;
    if local {
        if mode != "stream" {
            usage();
        }
        let mut m = Local::new(span);
        println!("local memory, {span} bytes");
        stream(m.slice(), span);
        println!("OK");
        return;
    }
    let lenders: Vec<u32> = lenders.split(',').map(|s| s.trim().parse().unwrap_or_else(|_| usage())).collect();
    let sock = vsci_proto::socket_path();
    let client = vsci_client::Client::connect(&sock, "vsci-memext-check").unwrap_or_else(|e| {
        eprintln!("cannot reach vscid at {}: {e}", sock.display());
        exit(2)
    });
    let mut ext = Extension::new(&client, &lenders, size, budget).unwrap_or_else(|e| {
        eprintln!("memory extension: {e}");
        exit(2)
    });
    println!("extension of {size} bytes, budget {budget}, lenders {lenders:?}");
    match mode.as_str() {
        "stream" => {
            let span = span.min(ext.len());
            stream(ext.as_mut_slice(), span);
            print_stats(&ext.stats());
            println!("OK");
        }
        "restart" => restart(&mut ext),
        _ => usage(),
    }
}
