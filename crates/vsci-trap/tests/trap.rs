//! `vsci_trap::trap` on a real memfd: which faults arrive, in which thread,
//! and what each resolution does.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use vsci_sys::{memfd, MapOptions, Mapping};
use vsci_trap::trap::{self, Fault, Trap, TrapHandler, TrapOptions};

const PAGES: usize = 8;

struct Mem {
    base: *mut u8,
    fill: *mut u8,
    len: usize,
    /// The two mappings, unmapped when the test drops `Mem` (after its
    /// trap is unregistered).
    _maps: (Mapping, Mapping),
}

fn map(len: usize) -> Mem {
    let fd = memfd::create(c"trap-test", len as u64, memfd::Seals::NONE).expect("memfd");
    let m = || MapOptions::shared().map(fd.as_fd(), len, 0).expect("mmap");
    let (base, fill) = (m(), m());
    Mem { base: base.as_ptr(), fill: fill.as_ptr(), len, _maps: (base, fill) }
}

/// Fills each page from `source` on a not-present fault (as vsci fetches
/// from the owner) and records every fault.
struct Recorder {
    fill: usize,
    page: usize,
    source: Mutex<Vec<u8>>,
    faults: Mutex<Vec<(usize, bool, Option<bool>)>>,
    count: AtomicUsize,
}

impl TrapHandler for Recorder {
    fn on_fault(&self, trap: &Trap, f: Fault) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.faults.lock().unwrap().push((f.page, f.write, f.present));
        let src = self.source.lock().unwrap();
        if f.present != Some(true) {
            // SAFETY: the page lies inside the fill mapping of the test.
            unsafe {
                std::ptr::copy_nonoverlapping(src[f.page..].as_ptr(), (self.fill + f.page) as *mut u8, self.page)
            };
            trap.map_in(f.page, self.page, !f.write).unwrap();
        }
        if f.write && f.present != Some(false) {
            trap.unprotect(f.page, self.page).unwrap();
        }
    }
}

fn read(p: *const u8) -> u8 {
    // SAFETY: the tests read inside their own mapping.
    unsafe { std::ptr::read_volatile(p) }
}

fn write(p: *mut u8, v: u8) {
    // SAFETY: as above.
    unsafe { std::ptr::write_volatile(p, v) }
}

#[test]
fn first_accesses_trap_and_are_resolved() {
    let page = vsci_trap::page_size();
    let m = map(PAGES * page);
    let source: Vec<u8> = (0..m.len).map(|i| (i / page) as u8 + 1).collect();
    let rec = Arc::new(Recorder {
        fill: m.fill as usize,
        page,
        source: Mutex::new(source),
        faults: Mutex::new(Vec::new()),
        count: AtomicUsize::new(0),
    });
    // SAFETY: the mapping outlives the trap (unregistered below).
    let t = unsafe { Trap::new(m.base, m.len, TrapOptions { writes: true }, rec.clone()) }.unwrap();

    // A load of an untouched page: fetched, mapped write-protected.
    assert_eq!(read(m.base), 1);
    assert_eq!(rec.count.load(Ordering::SeqCst), 1);
    // A second load does not trap.
    assert_eq!(read(m.base.wrapping_add(100)), 1);
    assert_eq!(rec.count.load(Ordering::SeqCst), 1);
    // A store to it traps once, as a write to a present page.
    write(m.base, 42);
    write(m.base.wrapping_add(1), 43);
    assert_eq!(rec.count.load(Ordering::SeqCst), 2);
    if cfg!(target_arch = "x86_64") {
        let f = rec.faults.lock().unwrap().clone();
        assert_eq!(f[0], (0, false, Some(false)));
        assert_eq!(f[1], (0, true, Some(true)));
    }
    // SAFETY: reading our own fill mapping.
    assert_eq!(unsafe { *m.fill }, 42, "the store lands in the memfd");

    // Protect again: the same value stored again still traps.
    t.protect(0, page).unwrap();
    write(m.base, 42);
    assert_eq!(rec.count.load(Ordering::SeqCst), 3);

    // A store to an untouched page: one fault, mapped writable.
    write(m.base.wrapping_add(3 * page), 9);
    let n = rec.count.load(Ordering::SeqCst);
    write(m.base.wrapping_add(3 * page + 1), 9);
    assert_eq!(rec.count.load(Ordering::SeqCst), n);

    // A zapped page is fetched again at its next load, with new content.
    rec.source.lock().unwrap()[page * 2] = 77;
    assert_eq!(read(m.base.wrapping_add(2 * page)), 77);
    rec.source.lock().unwrap()[page * 2] = 78;
    assert_eq!(read(m.base.wrapping_add(2 * page)), 77, "mapped: no refetch");
    t.zap(2 * page, page).unwrap();
    assert_eq!(read(m.base.wrapping_add(2 * page)), 78, "zapped: fetched again");

    // Faults of another thread go to that thread's handler call.
    let b = m.base as usize;
    std::thread::spawn(move || write((b + 5 * page) as *mut u8, 1)).join().unwrap();
    assert!(rec.faults.lock().unwrap().iter().any(|f| f.0 == 5 * page));

    trap::unregister(&t);
    drop(m);
}

#[test]
fn read_only_ranges_trap_loads() {
    let page = vsci_trap::page_size();
    let m = map(2 * page);
    // SAFETY: the program's mapping becomes read-only, as a
    // SCI_FLAG_READONLY_MAP map is.
    assert_eq!(unsafe { libc::mprotect(m.base.cast(), m.len, libc::PROT_READ) }, 0);
    let source: Vec<u8> = vec![5; 2 * page];
    let rec = Arc::new(Recorder {
        fill: m.fill as usize,
        page,
        source: Mutex::new(source),
        faults: Mutex::new(Vec::new()),
        count: AtomicUsize::new(0),
    });
    // SAFETY: the mapping outlives the trap.
    let t = unsafe { Trap::new(m.base, m.len, TrapOptions { writes: false }, rec.clone()) }.unwrap();
    assert_eq!(read(m.base.wrapping_add(page + 3)), 5);
    assert_eq!(rec.count.load(Ordering::SeqCst), 1);
    trap::unregister(&t);
}

#[test]
fn misaligned_or_empty_ranges_are_refused() {
    let page = vsci_trap::page_size();
    let m = map(page * 2);
    let rec = Arc::new(Recorder {
        fill: m.fill as usize,
        page,
        source: Mutex::new(vec![0; page * 2]),
        faults: Mutex::new(Vec::new()),
        count: AtomicUsize::new(0),
    });
    // SAFETY: the calls fail before registering anything.
    unsafe {
        assert!(Trap::new(m.base.wrapping_add(1), page, TrapOptions { writes: true }, rec.clone()).is_err());
        assert!(Trap::new(m.base, 0, TrapOptions { writes: true }, rec.clone()).is_err());
        assert!(Trap::new(m.base, page + 1, TrapOptions { writes: true }, rec.clone()).is_err());
    }
}

/// Emulates every store it understands into the fill mapping and skips
/// it, leaving the page write-protected; counts what it emulated.
struct Emulator {
    fill: usize,
    base: usize,
    page: usize,
    emulated: AtomicUsize,
    other: AtomicUsize,
}

impl TrapHandler for Emulator {
    fn on_fault(&self, trap: &Trap, f: Fault) {
        if f.present != Some(true) {
            let p = (self.fill + f.page) as *mut u8;
            // SAFETY: inside the fill mapping: a write puts the page in the
            // memfd, which mapping it in needs.
            unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
            trap.map_in(f.page, self.page, true).unwrap();
        }
        if let Some(r) = f.decode_rep().filter(|_| f.write) {
            // The whole rest of the string store, as vsci does it (all of it
            // lies inside the test's mapping).
            let mut data = vec![r.value; r.count];
            if let Some(src) = r.src {
                assert_eq!(vsci_sys::mman::read_own(src, &mut data), r.count);
            }
            // SAFETY: inside the fill mapping of the same memfd; the bytes'
            // effect is made before the registers move on.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), (self.fill + (r.dst - self.base)) as *mut u8, r.count);
                f.advance_rep(&r, r.count);
            }
            self.emulated.fetch_add(1, Ordering::SeqCst);
            return;
        }
        match f.decode_store(self.page).filter(|_| f.write) {
            Some(s) => {
                // SAFETY: the store lies inside one page of the test's
                // mapping (decode_store checked), written through the fill
                // mapping of the same memfd.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        s.bytes.as_ptr(),
                        (self.fill + (s.addr - self.base)) as *mut u8,
                        s.len,
                    );
                    f.skip_store(s.insn_len);
                }
                self.emulated.fetch_add(1, Ordering::SeqCst);
            }
            None => {
                if f.write {
                    trap.unprotect(f.page, self.page).unwrap();
                }
                self.other.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// A plain store to a write-protected page is decoded, done in its place
/// and skipped: the value shows, the page stays protected (the next store
/// traps again), and a store the decoder does not know takes the other way.
#[cfg(target_arch = "x86_64")]
#[test]
fn stores_are_emulated_in_place() {
    let page = vsci_trap::page_size();
    let m = map(PAGES * page);
    let em = Arc::new(Emulator {
        fill: m.fill as usize,
        base: m.base as usize,
        page,
        emulated: AtomicUsize::new(0),
        other: AtomicUsize::new(0),
    });
    // SAFETY: the mapping outlives the trap (unregistered below).
    let t = unsafe { Trap::new(m.base, m.len, TrapOptions { writes: true }, em.clone()) }.unwrap();
    let words = m.base.cast::<u64>();
    for i in 0..64u64 {
        // SAFETY: inside the mapping.
        unsafe { std::ptr::write_volatile(words.add(i as usize * 3), i * 0x0101_0101_0101_0101 + 7) };
        write(m.base.wrapping_add(8 * 200 + i as usize), i as u8);
    }
    assert_eq!(
        em.emulated.load(Ordering::SeqCst),
        128,
        "every plain store emulated ({} others)",
        em.other.load(Ordering::SeqCst)
    );
    for i in 0..64u64 {
        // SAFETY: reading the fill mapping of the same memfd.
        assert_eq!(unsafe { *(m.fill as *const u64).add(i as usize * 3) }, i * 0x0101_0101_0101_0101 + 7);
        assert_eq!(read(m.base.wrapping_add(8 * 200 + i as usize)), i as u8);
    }
    // A store of a register's upper half (MOVHPS) is not emulated: the
    // page becomes writable.
    let v: [f32; 4] = [1.0, 2.0, 3.0, 4.0];
    // SAFETY: reads 16 bytes of v, stores 8 inside the mapping.
    unsafe {
        std::arch::asm!("movups xmm3, [{s}]", "movhps [{d}], xmm3", s = in(reg) v.as_ptr(), d = in(reg) m.base.wrapping_add(page + 16), out("xmm3") _)
    };
    assert_eq!(em.other.load(Ordering::SeqCst), 1);
    // SAFETY: reading inside the mapping.
    assert_eq!(unsafe { std::ptr::read_volatile(m.base.wrapping_add(page + 16).cast::<[f32; 2]>()) }, [3.0, 4.0]);
    trap::unregister(&t);
}

/// Vector stores (what `memcpy` stores a small message with) are emulated
/// with the register's bytes from the signal frame's XSAVE image: SSE,
/// AVX (ymm0-15, whose upper halves are in their own XSAVE component) and
/// AVX-512 (zmm16-31, in another), where the CPU has them.
#[cfg(target_arch = "x86_64")]
#[test]
fn vector_stores_are_emulated_in_place() {
    let page = vsci_trap::page_size();
    let m = map(PAGES * page);
    let em = Arc::new(Emulator {
        fill: m.fill as usize,
        base: m.base as usize,
        page,
        emulated: AtomicUsize::new(0),
        other: AtomicUsize::new(0),
    });
    // SAFETY: the mapping outlives the trap (unregistered below).
    let t = unsafe { Trap::new(m.base, m.len, TrapOptions { writes: true }, em.clone()) }.unwrap();
    let src: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
    let fill_at = |off: usize, len: usize| {
        // SAFETY: reading the fill mapping of the same memfd.
        unsafe { std::slice::from_raw_parts((m.fill as *const u8).add(off), len) }.to_vec()
    };
    let mut expect = 0;
    // SAFETY: inside the mapping; a 16-byte unaligned store.
    unsafe {
        std::arch::x86_64::_mm_storeu_si128(
            m.base.wrapping_add(16).cast(),
            std::arch::x86_64::_mm_loadu_si128(src.as_ptr().cast()),
        )
    };
    expect += 1;
    assert_eq!(fill_at(16, 16), src[..16]);
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX; the store lies inside the mapping.
        unsafe { store_ymm3(m.base.wrapping_add(page + 100), src.as_ptr()) };
        expect += 1;
        assert_eq!(fill_at(page + 100, 32), src[..32]);
    }
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512; the store lies inside the mapping.
        unsafe { store_zmm20(m.base.wrapping_add(2 * page + 64), src.as_ptr()) };
        expect += 1;
        assert_eq!(fill_at(2 * page + 64, 64), src[..]);
    }
    assert_eq!(em.emulated.load(Ordering::SeqCst), expect, "{} not emulated", em.other.load(Ordering::SeqCst));
    assert_eq!(em.other.load(Ordering::SeqCst), 0);
    trap::unregister(&t);
}

/// `REP MOVSB` and `REP STOSB` into the trapped range (glibc's memcpy and
/// memset of 2 KiB to 1 MiB) are done whole at their first fault: the
/// bytes land, the registers end as the CPU leaves them (RDI and RSI past
/// the copy, RCX zero), and the instruction is not run again.
#[cfg(target_arch = "x86_64")]
#[test]
fn string_stores_are_emulated_whole() {
    let page = vsci_trap::page_size();
    let m = map(PAGES * page);
    let em = Arc::new(Emulator {
        fill: m.fill as usize,
        base: m.base as usize,
        page,
        emulated: AtomicUsize::new(0),
        other: AtomicUsize::new(0),
    });
    // SAFETY: the mapping outlives the trap (unregistered below).
    let t = unsafe { Trap::new(m.base, m.len, TrapOptions { writes: true }, em.clone()) }.unwrap();
    let src: Vec<u8> = (0..3 * page).map(|i| (i % 251) as u8).collect();
    let dst = m.base.wrapping_add(100);
    let n = 2 * page + 300; // three pages, starting and ending inside one
    let (mut rdi, mut rsi, mut rcx) = (dst as usize, src.as_ptr() as usize, n);
    // SAFETY: copies n bytes from src (3 pages long) into the mapping.
    unsafe { std::arch::asm!("cld", "rep movsb", inout("rdi") rdi, inout("rsi") rsi, inout("rcx") rcx) };
    assert_eq!((rdi, rsi, rcx), (dst as usize + n, src.as_ptr() as usize + n, 0));
    let fill = |off: usize, len: usize| {
        // SAFETY: reading the fill mapping of the same memfd.
        unsafe { std::slice::from_raw_parts((m.fill as *const u8).add(off), len) }.to_vec()
    };
    assert_eq!(fill(100, n), src[..n]);
    let dst = m.base.wrapping_add(4 * page + 8);
    let (mut rdi, mut rcx) = (dst as usize, page);
    // SAFETY: stores one page of 0xa7 into the mapping.
    unsafe { std::arch::asm!("cld", "rep stosb", inout("rdi") rdi, inout("rcx") rcx, in("al") 0xa7u8) };
    assert_eq!((rdi, rcx), (dst as usize + page, 0));
    assert!(fill(4 * page + 8, page).iter().all(|&b| b == 0xa7));
    assert_eq!(em.emulated.load(Ordering::SeqCst), 2, "{} faults not emulated", em.other.load(Ordering::SeqCst));
    trap::unregister(&t);
}

/// Loads ymm3 from `src` and stores it at `dst` (the store may trap).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn store_ymm3(dst: *mut u8, src: *const u8) {
    // SAFETY: the caller passes 32 readable bytes at src, 32 writable at dst.
    unsafe {
        std::arch::asm!("vmovdqu ymm3, [{s}]", "vmovdqu [{d}], ymm3", s = in(reg) src, d = in(reg) dst, out("ymm3") _)
    };
}

/// Loads zmm20 from `src` and stores it at `dst` (the store may trap).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_zmm20(dst: *mut u8, src: *const u8) {
    // SAFETY: the caller passes 64 readable bytes at src, 64 writable at dst.
    unsafe {
        std::arch::asm!("vmovdqu64 zmm20, [{s}]", "vmovdqu64 [{d}], zmm20", s = in(reg) src, d = in(reg) dst, out("zmm20") _)
    };
}
