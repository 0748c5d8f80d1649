//! The copy routines behind `SCIMemCpy` and `SCIMemWrite`, chosen with
//! Dolphin's `SetSciMemCopyFunction` / `GetSciMemCopyFunction`.
//!
//! On Dolphin hardware the routine decides how stores reach the adapter's
//! PCIe window (plain, wide, write-combined). Here a map of a segment of
//! this node is ordinary memory, so the choice changes how the CPU writes
//! it, which is what a memcpy benchmark measures:
//!
//! | number | routine |
//! |---|---|
//! | 0 (default) | `memmove` (the C library's, any overlap) |
//! | 1 | 8-byte stores: bytes up to an 8-byte aligned destination, then one aligned 8-byte store per word, then the tail |
//! | 2 | non-temporal (streaming) 8-byte stores that bypass the cache, then `sfence` (x86-64; elsewhere as 1) |
//!
//! Any other number selects 0, and `GetSciMemCopyFunction` then reports 0:
//! it always names the routine in use. Routines 1 and 2 fall back to
//! `memmove` when source and destination overlap. Maps of other nodes'
//! segments are written by `SCIMemCpy` through the RMA engine, which no
//! routine changes; `SCIMemWrite` stores through the map with the routine.

use std::ffi::c_uint;
use std::sync::atomic::{AtomicU32, Ordering};

static SELECTED: AtomicU32 = AtomicU32::new(0);

/// Routines 0..=LAST exist.
const LAST: c_uint = 2;

#[no_mangle]
pub extern "C" fn SetSciMemCopyFunction(func: c_uint) {
    crate::guard::void("SetSciMemCopyFunction", || {
        SELECTED.store(if func <= LAST { func } else { 0 }, Ordering::Relaxed)
    })
}

#[no_mangle]
pub extern "C" fn GetSciMemCopyFunction() -> c_uint {
    crate::guard::value("GetSciMemCopyFunction", 0, || SELECTED.load(Ordering::Relaxed))
}

/// Copy `n` bytes from `src` to `dst` with the selected routine.
///
/// # Safety
/// `src` must be readable and `dst` writable for `n` bytes (they may
/// overlap).
pub unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    let overlap = (src as usize) < (dst as usize).wrapping_add(n) && (dst as usize) < (src as usize).wrapping_add(n);
    match SELECTED.load(Ordering::Relaxed) {
        // SAFETY: the caller's promise, passed on.
        1 if !overlap => unsafe { copy_words(src, dst, n, false) },
        // SAFETY: as above.
        2 if !overlap => unsafe { copy_words(src, dst, n, true) },
        // SAFETY: as above; ptr::copy allows overlap.
        _ => unsafe { std::ptr::copy(src, dst, n) },
    }
}

/// Head bytes until `dst` is 8-byte aligned, aligned 8-byte stores, tail
/// bytes; the stores are streaming ones with `nontemporal` on x86-64.
///
/// # Safety
/// As [`copy`], and the ranges must not overlap.
unsafe fn copy_words(src: *const u8, dst: *mut u8, n: usize, nontemporal: bool) {
    let head = dst.align_offset(8).min(n);
    // SAFETY: within the caller's ranges (head <= n); no overlap.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let words = (n - head) / 8;
    for i in 0..words {
        let off = head + i * 8;
        // SAFETY: off + 8 <= n, so both 8-byte accesses lie in the caller's
        // ranges; the load is unaligned-safe, the store aligned (dst + head
        // is 8-byte aligned and off - head is a multiple of 8).
        unsafe {
            let w = src.add(off).cast::<u64>().read_unaligned();
            let d = dst.add(off).cast::<u64>();
            store_word(d, w, nontemporal);
        }
    }
    let done = head + words * 8;
    // SAFETY: the remaining n - done bytes of both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), n - done) };
    if nontemporal {
        // Streaming stores are weakly ordered: fence them before any later
        // store (the caller's flag after its data).
        vsci_client::store_fence();
    }
}

/// One aligned 8-byte store.
///
/// # Safety
/// `d` is 8-byte aligned and writable.
#[inline(always)]
unsafe fn store_word(d: *mut u64, w: u64, nontemporal: bool) {
    #[cfg(target_arch = "x86_64")]
    if nontemporal {
        // SAFETY: SSE2 is part of x86-64; `d` is aligned and writable (the
        // caller's promise). movnti takes a 64-bit integer.
        unsafe { std::arch::x86_64::_mm_stream_si64(d.cast::<i64>(), w as i64) };
        return;
    }
    let _ = nontemporal;
    // SAFETY: the caller's promise.
    unsafe { d.write_volatile(w) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_routine_copies_every_alignment_and_length() {
        for f in 0..=LAST + 1 {
            SetSciMemCopyFunction(f);
            assert_eq!(GetSciMemCopyFunction(), if f <= LAST { f } else { 0 });
            for so in 0..8 {
                for dofs in 0..8 {
                    for n in [0usize, 1, 7, 8, 9, 15, 16, 63, 64, 65, 200] {
                        let src: Vec<u8> = (0..n + 16).map(|i| (i * 7 + 3) as u8).collect();
                        let mut dst = vec![0xeeu8; n + 16];
                        // SAFETY: both ranges lie inside the vectors.
                        unsafe { copy(src.as_ptr().add(so), dst.as_mut_ptr().add(dofs), n) };
                        assert_eq!(&dst[dofs..dofs + n], &src[so..so + n], "f={f} so={so} do={dofs} n={n}");
                        assert!(dst[..dofs].iter().all(|&b| b == 0xee));
                        assert!(dst[dofs + n..].iter().all(|&b| b == 0xee));
                    }
                }
            }
        }
        SetSciMemCopyFunction(0);
    }
}
