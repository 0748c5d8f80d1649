//! What one trapped store costs in this process, without any network: a
//! write-protected page of a memfd mapping, a store to it, the fault, the
//! handler lifting the protection, the store completing; then the page is
//! protected again. Prints the median and 10th percentile of the cost per
//! trapped store over ROUNDS rounds of BATCH stores (nanoseconds).
//!
//!     cargo run --release -p vsci-trap --example trap_cost [ROUNDS] [BATCH]
//!
//! `VSCI_TRAP=thread` measures the fault-thread delivery instead. Used to
//! show that signal chaining (chain.rs) adds nothing measurable per store
//! (docs/bench/signals.md).

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Instant;

use vsci_trap::trap::{self, Delivery, Fault, Trap, TrapHandler, TrapOptions};

struct Unprotect {
    page: usize,
}

impl TrapHandler for Unprotect {
    fn on_fault(&self, trap: &Trap, f: Fault) {
        if f.present != Some(true) {
            trap.map_in(f.page, self.page, !f.write).unwrap();
        }
        if f.write && f.present != Some(false) {
            trap.unprotect(f.page, self.page).unwrap();
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    if std::env::var("VSCI_TRAP").as_deref() == Ok("thread") {
        trap::set_delivery(Delivery::Thread);
    }
    let page = vsci_trap::page_size();
    let fd = vsci_sys::memfd::create(c"trap-cost", page as u64, vsci_sys::memfd::Seals::NONE).expect("memfd");
    // The page must exist in the memfd for the handler to map it in.
    std::fs::File::from(fd.try_clone().expect("dup")).write_all_at(&[1], 0).expect("pwrite");
    let map = vsci_sys::MapOptions::shared().map(std::os::fd::AsFd::as_fd(&fd), page, 0).expect("mmap");
    drop(fd);
    let base = map.as_ptr();
    // SAFETY: the mapping lives until the end of main, after the trap.
    let t = unsafe { Trap::new(base, page, TrapOptions { writes: true }, Arc::new(Unprotect { page })) }.unwrap();
    // SAFETY: a load inside the mapping (maps the page in, protected).
    unsafe { std::ptr::read_volatile(base) };
    let mut per_store = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let t0 = Instant::now();
        for i in 0..batch {
            t.protect(0, page).unwrap();
            // SAFETY: a store inside the mapping; it traps and is resolved.
            unsafe { std::ptr::write_volatile(base, (r + i) as u8) };
        }
        per_store.push(t0.elapsed().as_nanos() as f64 / batch as f64);
    }
    // The protect call alone, to subtract.
    let t0 = Instant::now();
    for _ in 0..batch {
        t.protect(0, page).unwrap();
    }
    let protect = t0.elapsed().as_nanos() as f64 / batch as f64;
    per_store.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "trapped store ({:?}): median {:.0} ns, p10 {:.0} ns per store (protect + store + fault); protect alone {:.0} ns; {} rounds of {}",
        trap::delivery(),
        per_store[rounds / 2],
        per_store[rounds / 10],
        protect,
        rounds,
        batch
    );
}
