//! Page- and byte-level tracking on a memfd mapped twice (MAP_SHARED): the
//! trackers watch mapping 1 (`m1`); mapping 2 (`m2`) is an untracked view of
//! the same pages.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{page, Shm};
use vsci_dirty::{
    DiffConfig, DiffTracker, Error, Initial, Mode, ModeRequest, PageTracker, Run, WpOptions,
};

/// Kernel release as (major, minor).
fn kernel_version() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = r
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// A write-protect page tracker, or None (test skipped) where the kernel
/// cannot do it. On Linux >= 6.7 it must work (see `wp_available`).
fn wp_tracker(s: &Shm, len: usize) -> Option<PageTracker> {
    match PageTracker::with_mode(s.m1, len, ModeRequest::WriteProtect) {
        Ok(t) => Some(t),
        Err(e) => {
            assert!(
                kernel_version() < (6, 7),
                "write-protect tracking failed on a >= 6.7 kernel: {e}"
            );
            eprintln!("skipped: no write-protect tracking here ({e})");
            None
        }
    }
}

fn wp_diff(s: &Shm, len: usize, gap: usize) -> Option<DiffTracker> {
    let pages = wp_tracker(s, len)?;
    // SAFETY: the Shm outlives the tracker in every test.
    Some(unsafe { DiffTracker::from_page_tracker(pages, gap, Initial::Copy) }.unwrap())
}

fn cmp_diff(s: &Shm, len: usize, gap: usize) -> DiffTracker {
    let cfg = DiffConfig {
        merge_gap: gap,
        mode: ModeRequest::Compare,
        initial: Initial::Copy,
    };
    // SAFETY: the Shm outlives the tracker in every test.
    unsafe { DiffTracker::with_config(s.m1, len, cfg) }.unwrap()
}

fn dirty(t: &mut PageTracker) -> Vec<(usize, usize)> {
    let mut v = vec![(12345, 1)]; // must be cleared by take_dirty
    t.take_dirty(&mut v).unwrap();
    v
}

fn collect(t: &mut DiffTracker) -> Vec<Run> {
    let mut v = vec![(999, 1)];
    t.collect(&mut v).unwrap();
    v
}

#[test]
fn wp_available() {
    let s = Shm::new(4 * page());
    let t = PageTracker::new(s.m1, s.len).unwrap();
    let forced = std::env::var(vsci_dirty::ENV_VAR)
        .map(|v| v == "compare")
        .unwrap_or(false);
    if kernel_version() >= (6, 7) && !forced {
        assert_eq!(t.mode(), Mode::WriteProtect);
    }
    eprintln!("mode: {}", t.mode());
}

#[test]
fn page_level_exact() {
    let p = page();
    let s = Shm::new(64 * p);
    let Some(mut t) = wp_tracker(&s, s.len) else {
        return;
    };
    assert_eq!(t.mode(), Mode::WriteProtect);
    assert!(dirty(&mut t).is_empty(), "nothing written yet");
    s.store1(0, 1);
    s.store1(3 * p + 17, 2);
    s.store1(4 * p + p - 1, 3); // adjacent to page 3: one range
    s.write1(10 * p + 100, &[9; 300]);
    s.store1(63 * p + 5, 4);
    s.store1(63 * p + 6, 4); // same page twice
    assert_eq!(
        dirty(&mut t),
        vec![(0, p), (3 * p, 2 * p), (10 * p, p), (63 * p, p)]
    );
    assert!(dirty(&mut t).is_empty(), "second take after no stores");
    assert!(dirty(&mut t).is_empty(), "third take after no stores");
    // A store of the same value still counts at page level.
    s.store1(10 * p + 100, 9);
    assert_eq!(dirty(&mut t), vec![(10 * p, p)]);
}

#[test]
fn untracked_mapping_and_reads_not_reported() {
    let p = page();
    let s = Shm::new(32 * p);
    let Some(mut t) = wp_tracker(&s, s.len) else {
        return;
    };
    // Stores through the second mapping: invisible to the page layer.
    for i in 0..32 {
        s.store2(i * p + 7, 0xAA);
    }
    assert!(dirty(&mut t).is_empty());
    // Reads through the tracked mapping (populating its page tables) don't count.
    let mut sum = 0u64;
    for i in 0..s.len {
        sum += s.load1(i) as u64;
    }
    assert_eq!(sum, 32 * 0xAA);
    assert!(dirty(&mut t).is_empty());
    // Byte layer in WP mode: nothing to ship either (the page layer hides them).
    let mut d = wp_diff(&Shm::new(p), p, 0).unwrap();
    assert!(collect(&mut d).is_empty());
}

#[test]
fn untouched_pages_never_reported() {
    let p = page();
    let s = Shm::new(256 * p);
    let Some(mut t) = wp_tracker(&s, s.len) else {
        return;
    };
    let touched = [1usize, 2, 77, 200, 255];
    for round in 0..5u8 {
        for &i in &touched {
            s.store1(i * p + round as usize, round);
        }
        let got = dirty(&mut t);
        let pages: Vec<usize> = got
            .iter()
            .flat_map(|&(o, l)| (o / p)..((o + l) / p))
            .collect();
        assert_eq!(pages, touched, "round {round}");
    }
}

#[test]
fn kernel_mode_write_is_reported() {
    // read(2) into the tracked mapping: the kernel stores on our behalf.
    let p = page();
    let s = Shm::new(4 * p);
    let Some(mut t) = wp_tracker(&s, s.len) else {
        return;
    };
    let mut fds = [0; 2];
    // SAFETY: pipe/write/read/close on our own fds; the read target is inside m1.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        assert_eq!(
            libc::write(fds[1], b"hello".as_ptr() as *const libc::c_void, 5),
            5
        );
        assert_eq!(
            libc::read(fds[0], s.m1.add(2 * p + 10) as *mut libc::c_void, 5),
            5
        );
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    assert_eq!(dirty(&mut t), vec![(2 * p, p)]);
}

#[test]
fn byte_runs_exact_and_merged() {
    let p = page();
    for (mode, gap) in [("wp", 0usize), ("wp", 64), ("cmp", 0), ("cmp", 64)] {
        let s = Shm::new(16 * p);
        s.write1(5 * p, &[7; 100]); // content before tracking: baseline, never shipped
        let mut d = match mode {
            "wp" => match wp_diff(&s, s.len, gap) {
                Some(d) => d,
                None => continue,
            },
            _ => cmp_diff(&s, s.len, gap),
        };
        assert!(collect(&mut d).is_empty(), "{mode}/{gap}: baseline");
        s.store1(3, 1); // byte 3
        s.store1(4, 1); // adjacent: same run
        s.store1(40, 2); // gap of 35 bytes from the previous run
        s.write1(p - 2, &[3, 3, 3, 3]); // crosses into page 1
        s.write1(5 * p + 10, &[7, 7, 8, 7]); // only one byte really changes
        s.write1(9 * p + 1000, &[1; 70]);
        s.store1(9 * p + 1200, 1); // gap 130 from the previous run
        let runs = collect(&mut d);
        let want: Vec<Run> = if gap == 0 {
            vec![
                (3, 2),
                (40, 1),
                (p - 2, 4),
                (5 * p + 12, 1),
                (9 * p + 1000, 70),
                (9 * p + 1200, 1),
            ]
        } else {
            vec![
                (3, 38),
                (p - 2, 4),
                (5 * p + 12, 1),
                (9 * p + 1000, 70),
                (9 * p + 1200, 1),
            ]
        };
        assert_eq!(runs, want, "{mode}/{gap}");
        assert_eq!(
            d.twin(),
            &s.snapshot()[..],
            "{mode}/{gap}: twin follows the mapping"
        );
        assert_eq!(d.twin_range((40, 1)), &[2]);
        assert!(collect(&mut d).is_empty(), "{mode}/{gap}: repeated collect");
        assert!(collect(&mut d).is_empty(), "{mode}/{gap}: repeated collect");
        // Storing the same values again: pages dirty (in WP mode), no bytes.
        s.write1(9 * p + 1000, &[1; 70]);
        assert!(collect(&mut d).is_empty(), "{mode}/{gap}: same values");
    }
}

#[test]
fn odd_length_tail() {
    // A tracked length that is not a multiple of 8 or of the page size.
    let p = page();
    let len = 3 * p + 5;
    let s = Shm::new(4 * p);
    let Some(mut d) = wp_diff(&s, len, 0) else {
        return;
    };
    s.store1(len - 1, 1);
    s.store1(len - 5, 1);
    s.store1(len, 1); // outside the tracked length: ignored
    s.store1(len + 2, 1);
    assert_eq!(collect(&mut d), vec![(len - 5, 1), (len - 1, 1)]);
    let mut c = cmp_diff(&s, len, 0);
    s.store1(len - 2, 5);
    s.store1(len + 1, 5);
    assert_eq!(collect(&mut c), vec![(len - 2, 1)]);
}

#[test]
fn sixty_four_mib_scattered() {
    let p = page();
    let len = 64 << 20;
    let s = Shm::new(len);
    // Tiny result vector: exercises PAGEMAP_SCAN's walk_end continuation.
    let opts = WpOptions {
        vec_capacity: 2,
        ..WpOptions::default()
    };
    let pages = match PageTracker::with_options(s.m1, len, ModeRequest::WriteProtect, opts) {
        Ok(t) => t,
        Err(e) => {
            assert!(kernel_version() < (6, 7), "{e}");
            return;
        }
    };
    // SAFETY: `s` outlives `d`. AssumeZero: the memfd is fresh.
    let mut d = unsafe { DiffTracker::from_page_tracker(pages, 0, Initial::AssumeZero) }.unwrap();
    assert!(collect(&mut d).is_empty());
    let offs = [
        0usize,
        5 * p + 3,
        1 << 20,
        (13 << 20) + 4095,
        (40 << 20) + 8,
        len - 1,
    ];
    for (i, &o) in offs.iter().enumerate() {
        s.store1(o, i as u8 + 1);
    }
    let runs = collect(&mut d);
    assert_eq!(runs, offs.iter().map(|&o| (o, 1)).collect::<Vec<_>>());
    assert!(collect(&mut d).is_empty());
    // Same stores seen by a compare-mode tracker on a second shm.
    let s2 = Shm::new(len);
    let cfg = DiffConfig {
        merge_gap: 0,
        mode: ModeRequest::Compare,
        initial: Initial::AssumeZero,
    };
    // SAFETY: `s2` outlives `c`.
    let mut c = unsafe { DiffTracker::with_config(s2.m1, len, cfg) }.unwrap();
    for (i, &o) in offs.iter().enumerate() {
        s2.store1(o, i as u8 + 1);
    }
    assert_eq!(collect(&mut c), runs);
    assert!(collect(&mut c).is_empty());
}

/// Deterministic pseudo-random numbers (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Apply the same pseudo-random store sequence; returns nothing.
fn scripted_stores(s: &Shm, seed: u64, n: usize) {
    let mut r = Rng(seed);
    for _ in 0..n {
        let x = r.next();
        let off = (x as usize >> 8) % s.len;
        let kind = x & 3;
        if kind == 3 && off + 8 <= s.len {
            let o = off & !7;
            // SAFETY: aligned word inside m1.
            unsafe { AtomicU64::from_ptr(s.m1.add(o) as *mut u64) }
                .store(r.next(), Ordering::Relaxed);
        } else {
            s.store1(off, (x >> 4) as u8 % 3); // few values: bytes often revert
        }
    }
}

#[test]
fn fallback_gives_same_runs() {
    let p = page();
    for gap in [0usize, 64] {
        let a = Shm::new(64 * p);
        let b = Shm::new(64 * p);
        let Some(mut wa) = wp_diff(&a, a.len, gap) else {
            return;
        };
        let mut cb = cmp_diff(&b, b.len, gap);
        assert_eq!(cb.mode(), Mode::Compare);
        for round in 0..20u64 {
            scripted_stores(&a, round + 1, 50 + round as usize * 10);
            scripted_stores(&b, round + 1, 50 + round as usize * 10);
            let ra = collect(&mut wa);
            let rb = collect(&mut cb);
            assert_eq!(ra, rb, "gap {gap} round {round}");
            assert_eq!(wa.twin(), cb.twin());
        }
    }
}

#[test]
fn external_writes_not_shipped_back() {
    let p = page();
    for mode in ["wp", "cmp"] {
        let s = Shm::new(8 * p);
        let mut d = match mode {
            "wp" => match wp_diff(&s, s.len, 0) {
                Some(d) => d,
                None => continue,
            },
            _ => cmp_diff(&s, s.len, 0),
        };
        // A "fetch" from the owner written through the other mapping.
        let fresh: Vec<u8> = (0..3 * p).map(|i| (i % 251) as u8 + 1).collect();
        s.write2(p + 3, &fresh);
        d.note_external_write(p + 3, fresh.len()).unwrap();
        // The program also stores into one of those pages.
        s.store1(2 * p + 5, 0);
        assert_eq!(collect(&mut d), vec![(2 * p + 5, 1)], "{mode}");
        // Data variant: the program stored after the external write and
        // before the note; its store must still be shipped.
        s.write2(6 * p, &[5; 64]);
        s.store1(6 * p + 10, 6);
        d.note_external_data(6 * p, &[5; 64]).unwrap();
        assert_eq!(collect(&mut d), vec![(6 * p + 10, 1)], "{mode}");
        assert_eq!(d.twin(), &s.snapshot()[..]);
        // Bounds.
        assert!(matches!(
            d.note_external_write(8 * p - 1, 2),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            d.note_external_data(usize::MAX, &[1]),
            Err(Error::OutOfRange { .. })
        ));
    }
    // Compare mode without a note: the external bytes come back as changes.
    let s = Shm::new(p);
    let mut c = cmp_diff(&s, p, 0);
    s.write2(100, &[1; 10]);
    assert_eq!(collect(&mut c), vec![(100, 10)]);
}

#[test]
fn sync_all_marks_clean() {
    let p = page();
    let s = Shm::new(8 * p);
    let Some(mut d) = wp_diff(&s, s.len, 0) else {
        return;
    };
    s.write1(0, &[1; 5000]);
    s.write2(7 * p, &[2; 10]);
    d.sync_all().unwrap();
    assert!(collect(&mut d).is_empty());
    assert_eq!(d.twin(), &s.snapshot()[..]);
    s.store1(7 * p, 3);
    assert_eq!(collect(&mut d), vec![(7 * p, 1)]);
    // collect_all compares everything: finds the unannounced external write.
    s.store2(3 * p, 9);
    assert!(collect(&mut d).is_empty());
    let mut v = Vec::new();
    d.collect_all(&mut v).unwrap();
    assert_eq!(v, vec![(3 * p, 1)]);
}

/// A writer thread stores while the collector diffs in a loop and applies the
/// runs (from the twin) to a "remote" copy. At the end the remote copy and
/// the twin must equal the mapping: no store lost.
fn concurrent(mut d: DiffTracker, s: Arc<Shm>, stores: usize) {
    let mut remote = vec![0u8; s.len];
    remote.copy_from_slice(d.twin());
    let done = Arc::new(AtomicBool::new(false));
    let w = {
        let (s, done) = (s.clone(), done.clone());
        std::thread::spawn(move || {
            let mut r = Rng(0x1234_5678);
            for i in 0..stores {
                let x = r.next();
                let off = (x as usize >> 8) % s.len;
                if x & 7 == 0 {
                    let o = off & !7;
                    // SAFETY: aligned word inside m1.
                    unsafe { AtomicU64::from_ptr(s.m1.add(o) as *mut u64) }
                        .store(r.next(), Ordering::Relaxed);
                } else {
                    s.store1(off, (x >> 4) as u8 % 3);
                }
                if i % 4096 == 0 {
                    std::thread::yield_now();
                }
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut runs = Vec::new();
    let mut rounds = 0u64;
    let mut shipped = 0usize;
    loop {
        let finished = done.load(Ordering::Acquire);
        d.collect(&mut runs).unwrap();
        for &r in &runs {
            remote[r.0..r.0 + r.1].copy_from_slice(d.twin_range(r));
            shipped += r.1;
        }
        rounds += 1;
        if finished {
            break; // this collect started after the writer's last store
        }
    }
    w.join().unwrap();
    let now = s.snapshot();
    assert!(d.twin() == &now[..], "twin differs from the mapping");
    assert!(remote == now, "a store was lost");
    d.collect(&mut runs).unwrap();
    assert!(runs.is_empty());
    eprintln!(
        "{} mode: {rounds} collects, {shipped} bytes shipped for {stores} stores",
        d.mode()
    );
}

#[test]
fn concurrent_writer_no_lost_store_wp() {
    let p = page();
    // Large area (few collisions) and a tiny one (the collector and the
    // writer fight over the same words all the time).
    for (pages, gap) in [(256usize, 0usize), (256, 64), (2, 0), (2, 64)] {
        let s = Arc::new(Shm::new(pages * p));
        let Some(d) = wp_diff(&s, s.len, gap) else {
            return;
        };
        concurrent(d, s, 400_000);
    }
}

#[test]
fn concurrent_writer_no_lost_store_compare() {
    let p = page();
    let s = Arc::new(Shm::new(64 * p));
    let d = cmp_diff(&s, s.len, 16);
    concurrent(d, s, 200_000);
}

#[test]
fn bad_arguments() {
    let s = Shm::new(2 * page());
    // SAFETY: plain pointer arithmetic, not dereferenced.
    let odd = unsafe { s.m1.add(8) };
    assert!(matches!(
        PageTracker::new(odd, 100),
        Err(Error::Unaligned { .. })
    ));
    assert!(matches!(PageTracker::new(s.m1, 0), Err(Error::EmptyRange)));
    assert!(matches!(
        PageTracker::new(std::ptr::null_mut(), 4096),
        Err(Error::Unaligned { .. })
    ));
}

#[test]
fn drop_releases_registration() {
    let p = page();
    let s = Shm::new(4 * p);
    for i in 0..3u8 {
        let Some(mut t) = wp_tracker(&s, s.len) else {
            return;
        };
        s.store1(p, i + 1);
        assert_eq!(dirty(&mut t), vec![(p, p)]);
        drop(t);
        // Untracked again: stores work and nothing hangs.
        s.store1(2 * p, i);
    }
    // A second tracker on a range already registered by another one fails
    // (the kernel allows one userfaultfd per range): Auto falls back to compare.
    let Some(_t1) = wp_tracker(&s, s.len) else {
        return;
    };
    let t2 = PageTracker::with_mode(s.m1, s.len, ModeRequest::Auto).unwrap();
    assert_eq!(t2.mode(), Mode::Compare);
    assert!(PageTracker::with_mode(s.m1, s.len, ModeRequest::WriteProtect).is_err());
}

#[test]
fn store_then_zap_still_reported() {
    // MADV_DONTNEED drops the tracked mapping's page-table entries (the shmem
    // pages stay). A written page whose pte was zapped before the scan must
    // still be reported (the kernel treats a pte without a wp marker as
    // written).
    let p = page();
    let s = Shm::new(8 * p);
    let Some(mut d) = wp_diff(&s, s.len, 0) else {
        return;
    };
    s.store1(3 * p + 9, 7);
    // SAFETY: madvise on our own mapping; shmem content is kept.
    let r = unsafe { libc::madvise(s.m1 as *mut libc::c_void, s.len, libc::MADV_DONTNEED) };
    assert_eq!(r, 0);
    assert_eq!(collect(&mut d), vec![(3 * p + 9, 1)]);
    assert!(collect(&mut d).is_empty());
}

/// The program stores data, then a flag after it (also across a page
/// boundary), over and over. Whatever `collect_consistent` reports, applied
/// in order to a replica, must never show a flag without the data stored
/// before it: the remote reader of a "data then flag" protocol must never
/// see a torn message.
#[test]
fn consistent_snapshots_keep_store_order() {
    let len = 8 * 4096;
    let s = Shm::new(len);
    let Some(t) = wp_diff(&s, len, 0) else { return };
    store_order_kept(&s, t);
}

/// The same in compare mode (stores the page layer cannot see, e.g. a
/// guest's through QEMU's mapping): repeated compares stand in for the
/// write-protect check.
#[test]
fn consistent_compares_keep_store_order() {
    let len = 8 * 4096;
    let s = Shm::new(len);
    let t = cmp_diff(&s, len, 0);
    store_order_kept(&s, t);
}

fn store_order_kept(s: &Shm, mut t: DiffTracker) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let len = s.len;
    let base = s.m1 as usize;
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    // Data words 0..3000 span six pages; the flag is on page 7.
    let writer = std::thread::spawn(move || {
        let word = |i: usize| {
            // SAFETY: i * 8 < len: inside the live tracked mapping.
            unsafe { &*((base + i * 8) as *const AtomicU64) }
        };
        let mut n = 1u64;
        while !stop2.load(Ordering::Relaxed) {
            for i in 0..3000 {
                word(i).store(n, Ordering::Relaxed);
            }
            word(3600).store(n, Ordering::Release);
            n += 1;
        }
        n
    });
    let mut replica = vec![0u8; len];
    let mut runs = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1000);
    let mut shipped = 0;
    let mut torn = None;
    while torn.is_none() && std::time::Instant::now() < deadline {
        if t.collect_consistent(&mut runs, 4).unwrap().is_none() {
            continue;
        }
        for &r in &runs {
            replica[r.0..r.0 + r.1].copy_from_slice(t.twin_range(r));
            shipped += 1;
        }
        let w = |i: usize| u64::from_ne_bytes(replica[i * 8..i * 8 + 8].try_into().unwrap());
        let flag = w(3600);
        torn = (0..3000).find(|&i| w(i) < flag).map(|i| (i, w(i), flag));
    }
    // Stop the writer before asserting: it stores into the mapping.
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(torn, None, "(data word, its value, flag): the replica saw a flag before its data");
    assert!(shipped > 0, "nothing was ever shipped while the writer ran");
}

/// A `collect_consistent` that gives up (`None`: another thread kept
/// storing) has already taken the written pages from the page layer; a plain
/// `collect` after it — what a flush point falls back to — must still report
/// their stores, not wait for the next store to the same page.
#[test]
fn collect_after_inconsistent_snapshot_keeps_taken_pages() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let p = page();
    let len = 8 * p;
    let s = Shm::new(len);
    let Some(mut t) = wp_diff(&s, len, 0) else { return };
    let base = s.m1 as usize;
    let word = move |off: usize| {
        // SAFETY: every offset used below is 8-aligned and inside the live
        // tracked mapping (`s` outlives the writer thread and the tracker).
        unsafe { &*((base + off) as *const AtomicU64) }
    };
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    // Page 5 is stored to all the time, so snapshots keep failing.
    let writer = std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            n += 1;
            word(5 * p).store(n, Ordering::Relaxed);
        }
    });
    let mut runs = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut v = 0u64;
    let mut gave_up = false;
    while !gave_up && std::time::Instant::now() < deadline {
        v += 1;
        word(8).store(v, Ordering::Relaxed);
        gave_up = t.collect_consistent(&mut runs, 1).unwrap().is_none();
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    if !gave_up {
        eprintln!("skipped: no snapshot was ever disturbed (writer thread never ran alongside)");
        return;
    }
    t.collect(&mut runs).unwrap();
    let got = runs.iter().find(|r| r.0 <= 8 && 8 < r.0 + r.1).map(|&r| t.twin_range(r).to_vec());
    assert!(got.is_some(), "the store to page 0 was not reported: {runs:?}");
    assert_eq!(u64::from_ne_bytes(t.twin()[8..16].try_into().unwrap()), v);
    // And it is not reported again.
    t.collect(&mut runs).unwrap();
    assert!(runs.iter().all(|r| r.0 >= p), "{runs:?}");
}
