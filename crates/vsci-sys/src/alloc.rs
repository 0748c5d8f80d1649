//! An allocator the store path may use inside a signal handler.
//!
//! A program may store into a remote map from its own signal handler (a
//! plain store is async-signal-safe on hardware), and that handler may have
//! interrupted the program inside `malloc` or `free`, holding the C
//! library's arena lock. libsisci's store path then runs on that thread
//! (the trap's `SIGBUS` handler, or a `memcpy` handed to the map) and
//! allocates: with `malloc` it would wait for that lock for ever (seen: a
//! program whose SIGUSR2 handler stores into a remote map hung in
//! `__lll_lock_wait_private` under `malloc`).
//!
//! So libsisci's global allocator ([`SignalSafe`]) serves the store path
//! ([`store_path`] marks it) from a region of its own with lock-free free
//! lists, one per power-of-two size class, and never calls the C library
//! there: a block the store path frees that `malloc` made waits on a
//! lock-free list and is given back by the next allocation outside the
//! store path. Everything else goes to `malloc` as before. A request the
//! region cannot take (larger than [`LARGEST`], an alignment above a page,
//! the region full or not mappable) falls back to `malloc`.
//!
//! The region is reserved once (`MAP_NORESERVE`; pages become memory as
//! they are first used) and never given back; blocks are reused within
//! their class.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Bytes of address space reserved for the store path's blocks.
const REGION: usize = 256 << 20;
/// The smallest block; classes are `SMALLEST << k`.
const SMALLEST: usize = 16;
/// The largest block the region serves (a larger one comes from `malloc`).
pub const LARGEST: usize = 16 << 20;
const CLASSES: usize = (LARGEST / SMALLEST).trailing_zeros() as usize + 1;
const PAGE: usize = 4096;

thread_local! {
    /// Inside the store path on this thread (nesting count). Const and
    /// without a destructor: a plain TLS access.
    static STORE_PATH: Cell<u32> = const { Cell::new(0) };
}

/// While this lives, this thread's allocations come from the region.
#[must_use = "the store path ends when this is dropped"]
pub struct StorePath(());

/// Mark this thread as running the store path until the guard drops.
pub fn store_path() -> StorePath {
    STORE_PATH.with(|d| d.set(d.get() + 1));
    StorePath(())
}

impl Drop for StorePath {
    fn drop(&mut self) {
        STORE_PATH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

fn in_store_path() -> bool {
    STORE_PATH.with(|d| d.get() > 0)
}

/// The region's base (null: not mapped yet; `FAILED`: could not be).
static BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
const FAILED: *mut u8 = std::ptr::dangling_mut::<u8>();
/// Bytes of the region handed to classes so far.
static CARVED: AtomicUsize = AtomicUsize::new(0);
/// Per class: a free list head, `tag << 32 | index`, where index is the
/// block's offset / SMALLEST + 1 (0: empty) and the tag counts changes (no
/// ABA: a head read, popped and pushed back meanwhile has another tag).
static FREE: [AtomicU64; CLASSES] = [const { AtomicU64::new(0) }; CLASSES];
/// `malloc`'s blocks freed in the store path, to give back later: a
/// lock-free stack linked through the blocks' first word.
static DEFERRED: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

fn base() -> Option<*mut u8> {
    let b = BASE.load(Ordering::Acquire);
    if b == FAILED {
        return None;
    }
    if !b.is_null() {
        return Some(b);
    }
    // SAFETY: a fresh anonymous private mapping; no existing memory is
    // touched. mmap is async-signal-safe (a system call).
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            REGION,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    let mine = if m == libc::MAP_FAILED { FAILED } else { m as *mut u8 };
    match BASE.compare_exchange(std::ptr::null_mut(), mine, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => (mine != FAILED).then_some(mine),
        Err(other) => {
            if mine != FAILED {
                // SAFETY: our own mapping, never handed out (another
                // thread's won).
                unsafe { libc::munmap(m, REGION) };
            }
            (other != FAILED).then_some(other)
        }
    }
}

fn owns(p: *mut u8) -> bool {
    let b = BASE.load(Ordering::Acquire);
    b != FAILED && !b.is_null() && (p as usize) >= b as usize && (p as usize) < b as usize + REGION
}

/// The class of a request, if the region serves it.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size().max(layout.align()).max(SMALLEST);
    if size > LARGEST || layout.align() > PAGE {
        return None;
    }
    Some((size.next_power_of_two() / SMALLEST).trailing_zeros() as usize)
}

fn block_size(class: usize) -> usize {
    SMALLEST << class
}

fn pop(class: usize, base: *mut u8) -> Option<*mut u8> {
    let head = &FREE[class];
    let mut h = head.load(Ordering::Acquire);
    loop {
        let index = (h & 0xffff_ffff) as usize;
        if index == 0 {
            return None;
        }
        // SAFETY: index - 1 < REGION / SMALLEST (only pushed from blocks of
        // the region), so the block lies in the mapping, which is never
        // unmapped: reading its link is sound even if another thread popped
        // it meanwhile (the tag then fails the exchange below).
        let block = unsafe { base.add((index - 1) * SMALLEST) };
        // SAFETY: as above; 8-byte aligned (blocks are 16-byte aligned).
        // Read atomically: the block may be a live allocation by now, its
        // owner writing it; the value is then discarded (see the tag).
        let next = unsafe { (*(block as *const AtomicU64)).load(Ordering::Relaxed) };
        let new = ((h >> 32).wrapping_add(1) << 32) | (next & 0xffff_ffff);
        match head.compare_exchange_weak(h, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(block),
            Err(now) => h = now,
        }
    }
}

fn push(class: usize, base: *mut u8, block: *mut u8) {
    let head = &FREE[class];
    let index = (block as usize - base as usize) / SMALLEST + 1;
    let mut h = head.load(Ordering::Acquire);
    loop {
        // SAFETY: the block is ours (freed by its owner), in the region,
        // 16-byte aligned and at least 16 bytes.
        unsafe { (*(block as *const AtomicU64)).store(h & 0xffff_ffff, Ordering::Relaxed) };
        let new = ((h >> 32).wrapping_add(1) << 32) | index as u64;
        match head.compare_exchange_weak(h, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(now) => h = now,
        }
    }
}

/// A new block of `class` from the uncarved rest of the region, aligned to
/// its size up to a page.
fn carve(class: usize, base: *mut u8) -> Option<*mut u8> {
    let size = block_size(class);
    let align = size.min(PAGE);
    let mut at = CARVED.load(Ordering::Relaxed);
    loop {
        let start = at.next_multiple_of(align);
        let end = start.checked_add(size)?;
        if end > REGION {
            return None;
        }
        match CARVED.compare_exchange_weak(at, end, Ordering::AcqRel, Ordering::Relaxed) {
            // SAFETY: start + size <= REGION.
            Ok(_) => return Some(unsafe { base.add(start) }),
            Err(now) => at = now,
        }
    }
}

fn region_alloc(layout: Layout) -> Option<*mut u8> {
    let class = class_of(layout)?;
    let base = base()?;
    pop(class, base).or_else(|| carve(class, base))
}

/// Give back `malloc`'s blocks the store path freed (outside it only).
fn give_back_deferred() {
    if DEFERRED.load(Ordering::Relaxed).is_null() {
        return;
    }
    let mut p = DEFERRED.swap(std::ptr::null_mut(), Ordering::AcqRel);
    while !p.is_null() {
        // SAFETY: every block on the list is a live malloc block of at
        // least 16 usable bytes (glibc's smallest chunk holds 24), whose
        // first word `defer` made the link.
        let next = unsafe { *(p as *const *mut u8) };
        // SAFETY: as above: made by malloc, freed once, here.
        unsafe { libc::free(p.cast()) };
        p = next;
    }
}

fn defer(p: *mut u8) {
    let mut head = DEFERRED.load(Ordering::Acquire);
    loop {
        // SAFETY: a malloc block being freed: no one else uses it, and it
        // holds at least a pointer (see give_back_deferred).
        unsafe { *(p as *mut *mut u8) = head };
        match DEFERRED.compare_exchange_weak(head, p, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(now) => head = now,
        }
    }
}

/// libsisci's global allocator (see the module documentation).
pub struct SignalSafe;

// SAFETY: every block handed out is at least `layout.size()` bytes aligned
// to `layout.align()` (region blocks: a power-of-two size no smaller than
// either, carved at a multiple of min(size, page) >= align; the rest is
// System's), and each is given back to where it came from (`owns`).
unsafe impl GlobalAlloc for SignalSafe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if in_store_path() {
            if let Some(p) = region_alloc(layout) {
                return p;
            }
        } else {
            give_back_deferred();
        }
        // SAFETY: the caller's contract (a non-zero size).
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if owns(p) {
            let class = class_of(layout).expect("a region block has a class");
            push(class, BASE.load(Ordering::Acquire), p);
        } else if in_store_path() {
            defer(p);
        } else {
            // SAFETY: the caller's contract: System made `p` with `layout`.
            unsafe { System.dealloc(p, layout) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !owns(p) && !in_store_path() {
            // SAFETY: the caller's contract.
            return unsafe { System.realloc(p, layout, new_size) };
        }
        // SAFETY: the caller's contract: new_size is non-zero and, rounded
        // to the alignment, does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if owns(p) && class_of(new_layout) == class_of(layout) {
            return p;
        }
        // SAFETY: as GlobalAlloc::alloc.
        let q = unsafe { self.alloc(new_layout) };
        if !q.is_null() {
            // SAFETY: both blocks hold at least min(old, new) bytes and are
            // distinct.
            unsafe { std::ptr::copy_nonoverlapping(p, q, layout.size().min(new_size)) };
            // SAFETY: p was made with layout and is not used again.
            unsafe { self.dealloc(p, layout) };
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class_of(Layout::from_size_align(1, 1).unwrap()), Some(0));
        assert_eq!(class_of(Layout::from_size_align(16, 8).unwrap()), Some(0));
        assert_eq!(class_of(Layout::from_size_align(17, 8).unwrap()), Some(1));
        assert_eq!(class_of(Layout::from_size_align(8, 64).unwrap()), Some(2));
        assert_eq!(class_of(Layout::from_size_align(LARGEST, 8).unwrap()), Some(CLASSES - 1));
        assert_eq!(class_of(Layout::from_size_align(LARGEST + 1, 8).unwrap()), None);
        assert_eq!(class_of(Layout::from_size_align(64, 8192).unwrap()), None);
    }

    #[test]
    fn store_path_blocks_come_from_the_region_and_are_reused() {
        let a = SignalSafe;
        let l = Layout::from_size_align(100, 8).unwrap();
        let big = Layout::from_size_align(1 << 20, 4096).unwrap();
        let _s = store_path();
        // SAFETY: non-zero layouts; every block is freed with its layout.
        unsafe {
            let p = a.alloc(l);
            assert!(owns(p) && (p as usize).is_multiple_of(16));
            p.write_bytes(0xab, 100);
            let q = a.alloc(big);
            assert!(owns(q) && (q as usize).is_multiple_of(4096));
            a.dealloc(p, l);
            let r = a.alloc(l);
            assert!(owns(r));
            let r2 = a.realloc(r, l, 5000);
            assert!(owns(r2));
            a.dealloc(r2, Layout::from_size_align(5000, 8).unwrap());
            a.dealloc(q, big);
        }
    }

    #[test]
    fn malloc_blocks_freed_in_the_store_path_are_given_back_later() {
        let a = SignalSafe;
        let l = Layout::from_size_align(64, 8).unwrap();
        // SAFETY: as above.
        unsafe {
            let p = a.alloc(l);
            assert!(!owns(p));
            {
                let _s = store_path();
                a.dealloc(p, l);
            }
            assert!(!DEFERRED.load(Ordering::Acquire).is_null());
            let q = a.alloc(l);
            assert!(DEFERRED.load(Ordering::Acquire).is_null());
            a.dealloc(q, l);
        }
    }

    #[test]
    fn threads_share_the_free_lists() {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let a = SignalSafe;
                    let _s = store_path();
                    for i in 0..20_000usize {
                        let l = Layout::from_size_align(16 << ((i + t) % 8), 16).unwrap();
                        // SAFETY: as above.
                        unsafe {
                            let p = a.alloc(l);
                            assert!(owns(p));
                            p.write_bytes(t as u8, l.size());
                            assert_eq!(*p.add(l.size() - 1), t as u8);
                            a.dealloc(p, l);
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
}
