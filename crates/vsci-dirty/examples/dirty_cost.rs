//! Costs of dirty tracking on this machine.
//!
//! `cargo run --release -p vsci-dirty --example dirty_cost`
//!
//! Prints: the cost of the first store to a write-protected page (async
//! userfaultfd WP fault) vs a store to an unprotected page; `take_dirty` on a
//! 16 MiB mapping with 0, 1 and 64 dirty pages; `collect` (with diff) for the
//! same, and the compare fallback for reference.

use std::hint::black_box;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use vsci_dirty::{DiffConfig, DiffTracker, Initial, Mode, ModeRequest, PageTracker};

const LEN: usize = 16 << 20;

struct Shm {
    _fd: OwnedFd,
    len: usize,
    p: *mut u8,
}

impl Shm {
    fn new(len: usize) -> Shm {
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"dirty-cost".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscall on our fd.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
        assert_eq!(r, 0);
        // SAFETY: new shared mapping of our memfd.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Shm {
            _fd: fd,
            len,
            p: p as *mut u8,
        }
    }
    #[inline]
    fn store(&self, off: usize, v: u8) {
        // SAFETY: off < len inside our live mapping.
        unsafe { AtomicU8::from_ptr(self.p.add(off)) }.store(v, Ordering::Relaxed)
    }
    /// One store per page, in page order; returns time per store.
    fn touch_pages(&self, v: u8) -> Duration {
        let ps = vsci_dirty::page_size();
        let n = self.len / ps;
        let t = Instant::now();
        for i in 0..n {
            self.store(i * ps + (i % 64), v);
        }
        t.elapsed() / n as u32
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: our mapping, no references outlive Shm.
        unsafe { libc::munmap(self.p as *mut libc::c_void, self.len) };
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn fmt(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 10_000 {
        format!("{ns} ns")
    } else if ns < 10_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

/// Dirty `k` pages spread over the mapping (8 changed bytes each).
fn dirty_pages(s: &Shm, k: usize, round: u8) {
    let ps = vsci_dirty::page_size();
    let n = s.len / ps;
    for j in 0..k {
        let page = (j * n / k.max(1) + 7) % n;
        for b in 0..8 {
            s.store(page * ps + 128 + b * 3, round.wrapping_add(b as u8 + 1));
        }
    }
}

fn main() {
    let ps = vsci_dirty::page_size();
    println!(
        "vsci-dirty cost on {} (page {ps} B, {} cpus), mapping {} MiB",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        LEN >> 20
    );

    // ---- 1. store costs -------------------------------------------------
    let s = Shm::new(LEN);
    let untracked_first = s.touch_pages(1); // allocates shmem pages
    let untracked_again = s.touch_pages(2);
    let mut t = PageTracker::with_mode(s.p, s.len, ModeRequest::Auto).expect("tracker");
    println!(
        "\nmode: {}{}",
        t.mode(),
        if t.mode() == Mode::Compare {
            "  (no write-protect: store costs below are plain stores)"
        } else {
            ""
        }
    );
    let mut v = Vec::new();
    let (mut wp_first, mut wp_again) = (Vec::new(), Vec::new());
    for r in 0..10u8 {
        t.take_dirty(&mut v).unwrap(); // re-protect everything written
        wp_first.push(s.touch_pages(r));
        wp_again.push(s.touch_pages(r.wrapping_add(100)));
    }
    drop(t);
    // First touch of never-populated pages, tracked (pte marker) vs not.
    let fresh = Shm::new(LEN);
    let t2 = PageTracker::with_mode(fresh.p, fresh.len, ModeRequest::Auto).unwrap();
    let tracked_first_touch = fresh.touch_pages(1);
    drop(t2);
    println!(
        "\n1. cost of one store (averaged over {} pages, one store per page)",
        LEN / ps
    );
    println!(
        "   store to a write-protected page (async WP fault)   {:>10}  (median of 10)",
        fmt(median(wp_first))
    );
    println!(
        "   store to an unprotected page (after that fault)    {:>10}  (median of 10)",
        fmt(median(wp_again))
    );
    println!(
        "   store to a page of an untracked mapping            {:>10}",
        fmt(untracked_again)
    );
    println!(
        "   first touch of a never-populated page, tracked     {:>10}  (shmem allocation + fault)",
        fmt(tracked_first_touch)
    );
    println!(
        "   first touch of a never-populated page, untracked   {:>10}  (shmem allocation + fault)",
        fmt(untracked_first)
    );

    // ---- 2. take_dirty ---------------------------------------------------
    let t0 = Instant::now();
    let mut t = PageTracker::with_mode(s.p, s.len, ModeRequest::Auto).unwrap();
    let create = t0.elapsed();
    println!(
        "\n2. take_dirty on {} MiB ({} mode), median of 200",
        LEN >> 20,
        t.mode()
    );
    for k in [0usize, 1, 64] {
        let mut samples = Vec::new();
        let mut ranges = 0;
        for r in 0..200 {
            dirty_pages(&s, k, r as u8);
            let t0 = Instant::now();
            t.take_dirty(&mut v).unwrap();
            samples.push(t0.elapsed());
            ranges = v.len();
        }
        println!(
            "   {k:>3} dirty pages: {:>10}   ({ranges} ranges returned)",
            fmt(median(samples))
        );
    }
    drop(t);
    println!(
        "   (PageTracker creation on the populated {} MiB: {})",
        LEN >> 20,
        fmt(create)
    );

    // ---- 3. collect --------------------------------------------------------
    for (label, mode) in [
        ("write-protect", ModeRequest::WriteProtect),
        ("compare fallback", ModeRequest::Compare),
    ] {
        let cfg = DiffConfig {
            merge_gap: 64,
            mode,
            initial: Initial::Copy,
        };
        let t0 = Instant::now();
        // SAFETY: `s` outlives `d`.
        let made = unsafe { DiffTracker::with_config(s.p, s.len, cfg) };
        let create = t0.elapsed();
        let mut d = match made {
            Ok(d) => d,
            Err(e) => {
                println!("\n3. collect, {label}: unavailable ({e})");
                continue;
            }
        };
        let rounds = if mode == ModeRequest::Compare {
            20
        } else {
            200
        };
        println!(
            "\n3. collect (scan + diff against twin) on {} MiB, {label}, median of {rounds}",
            LEN >> 20
        );
        println!("   (DiffTracker creation incl. twin copy: {})", fmt(create));
        let mut runs = Vec::new();
        for k in [0usize, 1, 64] {
            let mut samples = Vec::new();
            let mut st = Default::default();
            for r in 0..rounds {
                dirty_pages(&s, k, r as u8);
                let t0 = Instant::now();
                st = d.collect(&mut runs).unwrap();
                samples.push(t0.elapsed());
                black_box(&runs);
            }
            println!(
                "   {k:>3} dirty pages: {:>10}   ({} pages compared, {} runs, {} bytes)",
                fmt(median(samples)),
                st.pages_compared,
                st.runs,
                st.bytes
            );
        }
    }

    // Reference: one pass over 16 MiB with memcpy.
    let src = vec![1u8; LEN];
    let mut dst = vec![0u8; LEN];
    let mut samples = Vec::new();
    for _ in 0..20 {
        let t0 = Instant::now();
        dst.copy_from_slice(black_box(&src));
        samples.push(t0.elapsed());
        black_box(&dst);
    }
    println!(
        "\nreference: memcpy of {} MiB: {}",
        LEN >> 20,
        fmt(median(samples))
    );
}
