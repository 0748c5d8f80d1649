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
    // SAFETY: a private memfd and one shared mapping of it, owned here.
    let base = unsafe {
        let fd = libc::memfd_create(c"trap-cost".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, page as i64), 0);
        // The page must exist in the memfd for the handler to map it in.
        assert_eq!(libc::pwrite(fd, [1u8].as_ptr().cast(), 1, 0), 1);
        let a = libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
        assert!(a != libc::MAP_FAILED);
        libc::close(fd);
        a as *mut u8
    };
    // SAFETY: the mapping lives until the process ends.
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
