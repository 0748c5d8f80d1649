//! Byte layer: twin copy + diff of the dirty pages → changed byte runs.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::page::{Mode, ModeRequest, PageTracker};
use crate::{Error, Result};

/// A changed byte run: `(offset, len)` relative to the start of the mapping.
pub type Run = (usize, usize);

/// Default for [`DiffConfig::merge_gap`]: runs separated by fewer than 64
/// unchanged bytes are shipped as one.
pub const DEFAULT_MERGE_GAP: usize = 64;

/// Initial content of the twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Initial {
    /// Copy the mapping (reads — and so populates — every page).
    #[default]
    Copy,
    /// The caller guarantees the mapping is all zeroes now (e.g. a memfd just
    /// created and sized); nothing is read. If that is not true, stores that
    /// write a zero over a non-zero byte can be missed.
    AssumeZero,
}

/// Settings of a [`DiffTracker`].
#[derive(Debug, Clone, Copy)]
pub struct DiffConfig {
    /// Two changed runs separated by fewer than `merge_gap` unchanged bytes
    /// are reported as one run (fewer, larger RMA writes). Adjacent changed
    /// bytes always form one run; 0 or 1 gives exact runs.
    ///
    /// The unchanged bytes of a merged gap are shipped from the twin, i.e. the
    /// value the owner had as far as this node knows. When other nodes write
    /// to the same page concurrently (multiple writers), a gap can overwrite
    /// their bytes with stale ones: use 0 for pages shared by writers.
    pub merge_gap: usize,
    /// Mechanism request for the page layer.
    pub mode: ModeRequest,
    /// Initial twin content.
    pub initial: Initial,
}

impl Default for DiffConfig {
    fn default() -> Self {
        DiffConfig {
            merge_gap: DEFAULT_MERGE_GAP,
            mode: ModeRequest::Auto,
            initial: Initial::Copy,
        }
    }
}

/// What one [`DiffTracker::collect`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CollectStats {
    /// Pages compared (all of them in compare mode).
    pub pages_compared: usize,
    /// Runs emitted.
    pub runs: usize,
    /// Bytes covered by the runs (gaps included).
    pub bytes: usize,
}

/// Changed-byte finder for one mapping: a [`PageTracker`] plus a private twin.
///
/// Usage on the shipping side:
///
/// ```no_run
/// # fn ship(_off: usize, _b: &[u8]) {}
/// # let (addr, len) = (std::ptr::null_mut::<u8>(), 4096);
/// // SAFETY: addr..addr+len stays mapped while `t` lives.
/// let mut t = unsafe { vsci_dirty::DiffTracker::new(addr, len, 64) }.unwrap();
/// let mut runs = Vec::new();
/// loop {
///     t.collect(&mut runs).unwrap();
///     for &r in &runs {
///         ship(r.0, t.twin_range(r)); // ship from the twin, not the mapping
///     }
/// #   break;
/// }
/// ```
///
/// # The race rule
///
/// The program may store while `collect` runs; every store is reported by
/// this or a later `collect` (a byte may be shipped twice, never lost), as long
/// as the bytes shipped are taken from the twin ([`twin_range`](Self::twin_range))
/// after `collect` returns and before the next one. See the comment in
/// `collect` for why.
pub struct DiffTracker {
    pages: PageTracker,
    base: usize,
    len: usize,
    merge_gap: usize,
    /// `len` bytes rounded up to whole u64 words. Bytes past `len` are unused.
    twin: Vec<u64>,
    dirty: Vec<(usize, usize)>,
    /// Pages taken from the page layer whose snapshot could not be made
    /// consistent yet ([`collect_consistent`](Self::collect_consistent)).
    pending: Vec<(usize, usize)>,
    snap: Vec<u8>,
    /// Compare mode: runs already in the twin (compared) but not yet
    /// reported for shipping, because the compares that found them were
    /// not yet followed by a quiet one ([`collect_consistent`](Self::collect_consistent)).
    unshipped: Vec<(usize, usize)>,
}

// SAFETY: the tracker owns its twin and page tracker; the mapping it reads is
// shared memory that may be accessed from any thread (only atomic loads are
// used on it).
unsafe impl Send for DiffTracker {}

/// Accumulates changed byte intervals (in ascending order) into runs.
struct RunBuilder<'a> {
    out: &'a mut Vec<Run>,
    merge_gap: usize,
    cur: Option<(usize, usize)>,
}

impl RunBuilder<'_> {
    #[inline]
    fn push(&mut self, s: usize, e: usize) {
        if let Some((cs, ce)) = self.cur {
            if s <= ce || s - ce < self.merge_gap {
                self.cur = Some((cs, ce.max(e)));
                return;
            }
            self.out.push((cs, ce - cs));
        }
        self.cur = Some((s, e));
    }

    fn finish(&mut self) {
        if let Some((s, e)) = self.cur.take() {
            self.out.push((s, e - s));
        }
    }
}

/// Emit the changed bytes of one word (`x` = old ^ new, bytes in memory order
/// via `to_ne_bytes`), limited to the first `limit` bytes.
#[inline]
fn emit_word(b: &mut RunBuilder<'_>, off: usize, x: u64, limit: usize) {
    let bytes = x.to_ne_bytes();
    let mut k = 0;
    while k < limit {
        if bytes[k] == 0 {
            k += 1;
            continue;
        }
        let s = k;
        while k < limit && bytes[k] != 0 {
            k += 1;
        }
        b.push(off + s, off + k);
    }
}

impl DiffTracker {
    /// Track `len` bytes at `addr` (page-aligned) with the default mode
    /// request and a twin copied from the mapping now.
    ///
    /// # Safety
    /// `addr..addr+len` (rounded up to whole pages) must be readable mapped
    /// memory for the whole life of the tracker, and must not be unmapped or
    /// remapped while it lives. Other threads/processes may store to it.
    pub unsafe fn new(addr: *mut u8, len: usize, merge_gap: usize) -> Result<DiffTracker> {
        // SAFETY: forwarded from the caller.
        unsafe {
            Self::with_config(
                addr,
                len,
                DiffConfig {
                    merge_gap,
                    ..DiffConfig::default()
                },
            )
        }
    }

    /// Track with explicit settings.
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    pub unsafe fn with_config(addr: *mut u8, len: usize, cfg: DiffConfig) -> Result<DiffTracker> {
        let pages = PageTracker::with_mode(addr, len, cfg.mode)?;
        // SAFETY: forwarded from the caller.
        unsafe { Self::from_page_tracker(pages, cfg.merge_gap, cfg.initial) }
    }

    /// Build on an existing page tracker (which must not have been used to
    /// take dirty pages that were not reconciled with the initial twin).
    ///
    /// # Safety
    /// As for [`new`](Self::new), for the tracker's range.
    pub unsafe fn from_page_tracker(
        pages: PageTracker,
        merge_gap: usize,
        initial: Initial,
    ) -> Result<DiffTracker> {
        let base = pages.addr() as usize;
        let len = pages.len();
        let mut t = DiffTracker {
            pages,
            base,
            len,
            merge_gap,
            twin: vec![0u64; len.div_ceil(8)],
            dirty: Vec::new(),
            pending: Vec::new(),
            snap: Vec::new(),
            unshipped: Vec::new(),
        };
        match initial {
            Initial::Copy => t.sync_all()?,
            Initial::AssumeZero => {
                // Consume whatever was dirty before (baseline = now).
                let mut scratch = Vec::new();
                t.pages.take_dirty(&mut scratch)?;
            }
        }
        Ok(t)
    }

    /// The page-layer mechanism in use.
    pub fn mode(&self) -> Mode {
        self.pages.mode()
    }

    /// Tracked length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true; for clippy.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Current merge gap (see [`DiffConfig::merge_gap`]).
    pub fn merge_gap(&self) -> usize {
        self.merge_gap
    }

    /// Change the merge gap for later collects.
    pub fn set_merge_gap(&mut self, gap: usize) {
        self.merge_gap = gap;
    }

    /// The twin: the mapping's content as of the last reconciliation, i.e.
    /// what has been (or is about to be) shipped.
    pub fn twin(&self) -> &[u8] {
        // SAFETY: the Vec<u64> holds at least `len` initialized bytes
        // (len.div_ceil(8) words); u8 has no alignment or validity requirement;
        // the borrow of `self` keeps it alive and unmodified.
        unsafe { std::slice::from_raw_parts(self.twin.as_ptr() as *const u8, self.len) }
    }

    fn twin_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `twin`, with an exclusive borrow.
        unsafe { std::slice::from_raw_parts_mut(self.twin.as_mut_ptr() as *mut u8, self.len) }
    }

    /// The bytes to ship for `run` (a run returned by the last `collect`).
    ///
    /// # Panics
    /// If the run is outside the tracked range.
    pub fn twin_range(&self, run: Run) -> &[u8] {
        &self.twin()[run.0..run.0 + run.1]
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(e) if e <= self.len => Ok(()),
            _ => Err(Error::OutOfRange {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    #[inline]
    fn load_word(&self, word: usize) -> u64 {
        let p = (self.base + word * 8) as *mut u64;
        // SAFETY: `word * 8 + 8 <= span` (callers stay within len rounded up to
        // 8, and the mapping is whole pages, so the full word is mapped, per
        // the constructor's contract); `base` is page-aligned so `p` is 8-byte
        // aligned. Other threads/processes may store to this memory
        // concurrently; an atomic load never tears a word nor makes the race
        // undefined on our side.
        unsafe { AtomicU64::from_ptr(p) }.load(Ordering::Relaxed)
    }

    #[inline]
    fn load_byte(&self, off: usize) -> u8 {
        let p = (self.base + off) as *mut u8;
        // SAFETY: `off < len`, inside the mapped range (constructor contract).
        unsafe { AtomicU8::from_ptr(p) }.load(Ordering::Relaxed)
    }

    /// Copy `offset..offset+len` of the mapping into the twin.
    fn copy_into_twin(&mut self, offset: usize, len: usize) {
        let end = offset + len;
        let mut o = offset;
        while o < end && o & 7 != 0 {
            let v = self.load_byte(o);
            self.twin_mut()[o] = v;
            o += 1;
        }
        while o + 8 <= end {
            let w = o / 8;
            self.twin[w] = self.load_word(w);
            o += 8;
        }
        while o < end {
            let v = self.load_byte(o);
            self.twin_mut()[o] = v;
            o += 1;
        }
    }

    /// Report the byte runs changed since the previous collect (or since
    /// creation / `sync_all`), replacing the contents of `out`, and update the
    /// twin for them. Ship `twin_range(run)` for each run.
    pub fn collect(&mut self, out: &mut Vec<Run>) -> Result<CollectStats> {
        // ORDER MATTERS — scan and re-protect first, compare second.
        //
        // 1. `take_dirty` (PAGEMAP_SCAN with PM_SCAN_WP_MATCHING) reports the
        //    pages written since the previous scan and write-protects them
        //    again, per page under the page-table lock, and flushes the TLBs
        //    before returning: no CPU can store to a reported page through a
        //    stale writable TLB entry after that point without faulting.
        // 2. For every reported page we load each word of the mapping ONCE,
        //    compare it with the twin, and if different store that same
        //    loaded value into the twin and emit the changed bytes. The
        //    shipper sends the twin's bytes.
        //
        // Take any store S to byte b of page P (through the tracked mapping):
        // * S took effect before the scan re-protected P (or P was already
        //   unprotected): P is reported by this scan, and our load of b comes
        //   after the scan returned, so it sees S or a later store.
        // * S takes effect after the scan re-protected P: S faults (async,
        //   in-kernel) and clears P's protection, so the NEXT scan reports P
        //   and the next compare loads b after S.
        // So the first compare after any store sees it (or a later value).
        // There is no window "between the compare and the twin update": both
        // use the same load. A store that lands right after our load is in
        // the second case; the next compare finds the mapping differs from
        // the twin and ships it — unless the byte was set back to the value
        // in the twin, which is then exactly what the owner already has.
        //
        // Doing it the other way round (compare, then scan) would lose
        // stores: a store landing on an already-compared byte before the
        // scan would be re-protected as "clean" and never compared again.
        //
        // Shipping from the twin rather than re-reading the mapping is what
        // keeps "owner == twin" on every clean byte: if the shipper re-read
        // the mapping it could send a newer value w while the twin holds v;
        // a later store of v would then compare equal and never be shipped,
        // leaving w at the owner.
        //
        // In compare mode every page is "reported" every time: same argument.
        self.pages.take_dirty(&mut self.dirty)?;
        // Pages a `collect_consistent` that gave up took from the page layer
        // are re-protected but not shipped yet: compare them too, or their
        // stores would wait for the next store to the same page (a flush
        // point falling back to this after `None` would return without them).
        if !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            merge_ranges(&mut self.dirty, &pending);
        }
        out.clear();
        let dirty = std::mem::take(&mut self.dirty);
        let mut b = RunBuilder {
            out,
            merge_gap: self.merge_gap,
            cur: None,
        };
        let mut pages = 0;
        let ps = self.pages.page_size();
        for &(off, len) in &dirty {
            pages += len.div_ceil(ps);
            self.diff_span(off, off + len, &mut b);
        }
        b.finish();
        self.dirty = dirty;
        // Runs an unfinished consistent compare left in the twin go now.
        if !self.unshipped.is_empty() {
            let unshipped = std::mem::take(&mut self.unshipped);
            merge_ranges(out, &unshipped);
        }
        let bytes = out.iter().map(|r| r.1).sum();
        Ok(CollectStats {
            pages_compared: pages,
            runs: out.len(),
            bytes,
        })
    }

    /// Does the twin hold compared bytes that have not been reported for
    /// shipping yet? Until they are, the twin is not what the owner has, so
    /// nothing may be merged into the mapping by comparing with it
    /// ([`note_external_data`](Self::note_external_data) callers check this).
    pub fn has_unshipped(&self) -> bool {
        !self.unshipped.is_empty()
    }

    /// [`collect_consistent`](Self::collect_consistent) in compare mode.
    ///
    /// A compare loads the words in ascending address order. Say the
    /// program stores S1 at a1 and then S2 at a2 > a1 (data, then a flag
    /// above it), and one compare loads a1 before S1 and a2 after S2: it
    /// found the flag without the data. A second compare loads a1 after the
    /// first one ended, so after S2, so after S1: it finds a1 changed. Hence
    /// if a compare finds nothing new, every store found by the compares
    /// before it came with every store made before it: the twin is then a
    /// state the memory really passed through (for the changed words), and
    /// the runs found since the last shipment are reported together. While
    /// compares keep finding stores, the runs wait in `unshipped`, up to
    /// `tries + 1` compares; then `None`, and the runs wait for the next
    /// call (or `collect`, which reports them).
    ///
    /// Only the first compare covers the whole mapping. A torn pair needs
    /// its later store among the words found, above the missed one, so the
    /// compares that check need only cover what lies below the highest word
    /// found so far (a store above it is simply not in this shipment).
    ///
    /// `within`: compare only these ranges (the caller knows nothing else
    /// can have been stored to); `None`, the whole mapping.
    fn collect_consistent_compare(&mut self, out: &mut Vec<Run>, tries: usize, within: Option<&[Run]>) -> Result<Option<CollectStats>> {
        let spans: Vec<Run> = match within {
            None => vec![(0, self.len)],
            Some(w) => {
                // Word-aligned, in range, ascending and disjoint: each
                // compare must load in ascending address order.
                let aligned: Vec<Run> = w
                    .iter()
                    .filter_map(|&(o, l)| {
                        let s = (o & !7).min(self.len);
                        let e = o.saturating_add(l).min(self.len);
                        (e > s).then_some((s, e - s))
                    })
                    .collect();
                let mut merged = Vec::new();
                merge_ranges(&mut merged, &aligned);
                merged
            }
        };
        let mut found = std::mem::take(&mut self.unshipped);
        let mut pass = Vec::new();
        let mut pages = 0;
        let ps = self.pages.page_size();
        for k in 0..=tries.max(1) {
            let end = if k == 0 { self.len } else { found.last().map_or(0, |r| r.0 + r.1).min(self.len) };
            pass.clear();
            let mut b = RunBuilder { out: &mut pass, merge_gap: self.merge_gap, cur: None };
            for &(s, l) in &spans {
                let e = (s + l).min(end);
                if e > s {
                    self.diff_span(s, e, &mut b);
                    pages += (e - s).div_ceil(ps);
                }
            }
            b.finish();
            if pass.is_empty() {
                out.clear();
                out.extend_from_slice(&found);
                let bytes = out.iter().map(|r| r.1).sum();
                return Ok(Some(CollectStats { pages_compared: pages, runs: out.len(), bytes }));
            }
            merge_ranges(&mut found, &pass);
        }
        self.unshipped = found;
        out.clear();
        Ok(None)
    }

    /// Like [`collect`](Self::collect), but the runs it reports come from a
    /// snapshot that is consistent with the program's store order: if they
    /// contain a store S, they also contain every store the program made
    /// before S (or the owner already has it). A remote reader that sees a
    /// flag written after data therefore also sees the data.
    ///
    /// A plain compare can break that: the program writes data then a flag
    /// while we compare; we load the data word before its store lands and
    /// the flag word after, and ship the flag without the data.
    ///
    /// How: take the written pages (re-protecting them), copy them to a
    /// snapshot, then ask the page layer whether ANY page of the range was
    /// written since. If none was, no store landed during the copy, so the
    /// snapshot is the memory as it stood at one instant after the scan,
    /// and everything the program stored before that instant is in it or
    /// already shipped. Otherwise the written pages join the set and we copy
    /// again, up to `tries` times; if the program never pauses we ship
    /// nothing this time (returns `None`) and keep the pages for next time.
    ///
    /// In [`Mode::Compare`] the page layer cannot tell; compares are
    /// repeated until one finds nothing new instead (see
    /// `collect_consistent_compare`).
    pub fn collect_consistent(&mut self, out: &mut Vec<Run>, tries: usize) -> Result<Option<CollectStats>> {
        self.collect_consistent_inner(out, tries, None)
    }

    /// As [`collect_consistent`](Self::collect_consistent); in compare mode
    /// only `within` is compared (the caller knows no store can have landed
    /// elsewhere since the last collect, e.g. the only writable maps of the
    /// range). The page layer of write-protect mode needs no such hint.
    pub fn collect_consistent_within(&mut self, within: &[Run], out: &mut Vec<Run>, tries: usize) -> Result<Option<CollectStats>> {
        self.collect_consistent_inner(out, tries, Some(within))
    }

    fn collect_consistent_inner(&mut self, out: &mut Vec<Run>, tries: usize, within: Option<&[Run]>) -> Result<Option<CollectStats>> {
        if self.pages.mode() == Mode::Compare {
            return self.collect_consistent_compare(out, tries, within);
        }
        out.clear();
        let mut fresh = std::mem::take(&mut self.dirty);
        for attempt in 0..tries.max(1) {
            self.pages.take_dirty(&mut fresh)?;
            merge_ranges(&mut self.pending, &fresh);
            if self.pending.is_empty() {
                self.dirty = fresh;
                return Ok(Some(CollectStats { pages_compared: 0, runs: 0, bytes: 0 }));
            }
            // Copy every pending page. The program may be storing into it
            // meanwhile: a copy that races with a store may hold a torn
            // value, and the scan that follows reports exactly that case
            // (the page was written after it was protected), so a torn
            // snapshot is never used.
            let total: usize = self.pending.iter().map(|r| r.1).sum();
            self.snap.resize(total, 0);
            let mut k = 0;
            for i in 0..self.pending.len() {
                let (off, len) = self.pending[i];
                // SAFETY: off + len <= self.len, inside the tracked mapping
                // (constructor contract); `snap` has `total` bytes and the
                // ranges are disjoint, so k + len <= total. Volatile reads:
                // the memory is shared with other threads and processes.
                unsafe {
                    let src = (self.base + off) as *const u8;
                    let dst = self.snap.as_mut_ptr().add(k);
                    volatile_copy(src, dst, len);
                }
                k += len;
            }
            if !self.pages.any_written()? {
                break;
            }
            if attempt + 1 == tries.max(1) {
                self.dirty = fresh;
                return Ok(None);
            }
        }
        self.dirty = fresh;
        let mut b = RunBuilder { out, merge_gap: self.merge_gap, cur: None };
        let mut k = 0;
        let mut pages = 0;
        let ps = self.pages.page_size();
        let pending = std::mem::take(&mut self.pending);
        for &(off, len) in &pending {
            pages += len.div_ceil(ps);
            let mut j = 0;
            while j < len {
                // Skip 64-byte blocks that did not change (slice compare is a
                // memcmp); only changed blocks are examined word by word.
                if j + 64 <= len && (off + j) % 8 == 0 {
                    let w0 = (off + j) / 8;
                    let twin_bytes = twin_block(&self.twin, w0);
                    if self.snap[k + j..k + j + 64] == *twin_bytes {
                        j += 64;
                        continue;
                    }
                }
                let n = (len - j).min(8);
                let mut v = [0u8; 8];
                v[..n].copy_from_slice(&self.snap[k + j..k + j + n]);
                let w = (off + j) / 8;
                let t = self.twin[w];
                let mut tb = t.to_ne_bytes();
                let val = u64::from_ne_bytes(v);
                let mask: u64 = if n == 8 { !0 } else { (1u64 << (n * 8)) - 1 };
                let x = (val ^ t) & mask;
                if x != 0 {
                    tb[..n].copy_from_slice(&v[..n]);
                    self.twin[w] = u64::from_ne_bytes(tb);
                    emit_word(&mut b, off + j, x, n);
                }
                j += 8;
            }
            k += len;
        }
        b.finish();
        let bytes = out.iter().map(|r| r.1).sum();
        Ok(Some(CollectStats { pages_compared: pages, runs: out.len(), bytes }))
    }

    /// Like [`collect`](Self::collect) but compares the whole range whatever
    /// the page layer says: a safety net after events the write-protect mode
    /// cannot see (stores through another mapping that were not announced
    /// with `note_external_*`, reclaim of written pages, fork, ...).
    pub fn collect_all(&mut self, out: &mut Vec<Run>) -> Result<CollectStats> {
        // Re-protect first, as in `collect`. Pending pages are inside the
        // whole range compared below.
        self.pages.take_dirty(&mut self.dirty)?;
        self.pending.clear();
        out.clear();
        let unshipped = std::mem::take(&mut self.unshipped);
        let mut b = RunBuilder {
            out,
            merge_gap: self.merge_gap,
            cur: None,
        };
        self.diff_span(0, self.len, &mut b);
        b.finish();
        merge_ranges(out, &unshipped);
        let bytes = out.iter().map(|r| r.1).sum();
        let pages = self.len.div_ceil(self.pages.page_size());
        Ok(CollectStats {
            pages_compared: pages,
            runs: out.len(),
            bytes,
        })
    }

    /// Compare `start..end` (start 8-aligned, end <= len) with the twin.
    fn diff_span(&mut self, start: usize, end: usize, b: &mut RunBuilder<'_>) {
        debug_assert!(start & 7 == 0 && end <= self.len);
        let full_end = end / 8; // words entirely inside the range
        let mut w = start / 8;
        // Blocks of 8 words (64 bytes): one pass of loads, one OR of XORs;
        // the per-word work only for blocks that changed.
        while w + 8 <= full_end {
            let mut v = [0u64; 8];
            let mut acc = 0u64;
            for (k, slot) in v.iter_mut().enumerate() {
                *slot = self.load_word(w + k);
                acc |= *slot ^ self.twin[w + k];
            }
            if acc != 0 {
                for (k, &val) in v.iter().enumerate() {
                    let t = self.twin[w + k];
                    if val != t {
                        self.twin[w + k] = val;
                        emit_word(b, (w + k) * 8, val ^ t, 8);
                    }
                }
            }
            w += 8;
        }
        while w < full_end {
            let val = self.load_word(w);
            let t = self.twin[w];
            if val != t {
                self.twin[w] = val;
                emit_word(b, w * 8, val ^ t, 8);
            }
            w += 1;
        }
        let rem = end - full_end * 8;
        if rem > 0 {
            // Last, partial word: the whole word is mapped (page granularity)
            // but only `rem` bytes belong to the range.
            let val = self.load_word(full_end);
            let t = self.twin[full_end];
            let mut mb = [0u8; 8];
            mb[..rem].fill(0xff);
            let mask = u64::from_ne_bytes(mb);
            let x = (val ^ t) & mask;
            if x != 0 {
                self.twin[full_end] = (t & !mask) | (val & mask);
                emit_word(b, full_end * 8, x, rem);
            }
        }
    }

    /// vsci itself wrote `offset..offset+len` of the shadow through another,
    /// untracked path (e.g. fresh data fetched from the owner written through a
    /// second mapping or `pwrite`): refresh the twin from the mapping so those
    /// bytes are not shipped back.
    ///
    /// Call it after the external write and before the next `collect`. Caveat:
    /// this reads the mapping, so a store by the program to these same bytes
    /// made *after* the external write and before this call would be taken as
    /// clean and not shipped; when that can happen use
    /// [`note_external_data`](Self::note_external_data), which needs no read.
    pub fn note_external_write(&mut self, offset: usize, len: usize) -> Result<()> {
        self.check(offset, len)?;
        self.copy_into_twin(offset, len);
        Ok(())
    }

    /// Like [`note_external_write`](Self::note_external_write) but sets the
    /// twin to `data` (the bytes that were written externally at `offset`)
    /// without reading the mapping: a program store that landed on those bytes
    /// after the external write differs from `data` and is still shipped.
    pub fn note_external_data(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        self.twin_mut()[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Mark everything clean: consume the dirty pages and set the twin to the
    /// current content of the mapping.
    ///
    /// Meant for quiescent points (e.g. right after filling the shadow from
    /// the owner, before the program can store): a store made concurrently
    /// with this call may be absorbed into the twin and never shipped.
    pub fn sync_all(&mut self) -> Result<()> {
        self.pages.take_dirty(&mut self.dirty)?;
        self.copy_into_twin(0, self.len);
        Ok(())
    }
}

impl std::fmt::Debug for DiffTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiffTracker")
            .field("pages", &self.pages)
            .field("merge_gap", &self.merge_gap)
            .finish()
    }
}

/// Add page ranges to a sorted, non-overlapping set (merging neighbours).
fn merge_ranges(set: &mut Vec<(usize, usize)>, add: &[(usize, usize)]) {
    if add.is_empty() {
        return;
    }
    set.extend_from_slice(add);
    set.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(set.len());
    for &(s, l) in set.iter() {
        match merged.last_mut() {
            Some(m) if s <= m.0 + m.1 => m.1 = m.1.max(s + l - m.0),
            _ => merged.push((s, l)),
        }
    }
    *set = merged;
}

/// The 64 bytes of the twin starting at word `w0`.
fn twin_block(twin: &[u64], w0: usize) -> &[u8] {
    let words = &twin[w0..w0 + 8];
    // SAFETY: eight initialized u64s are 64 initialized bytes; u8 has no
    // alignment or validity requirement; the borrow ties the lifetime.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, 64) }
}

/// Copy `len` bytes of shared memory word by word with volatile loads (the
/// source may change under us; the compiler must not assume otherwise).
///
/// # Safety
/// `src..src+len` must be readable and `dst..dst+len` writable, not
/// overlapping, and `src` 8-byte aligned when `len >= 8`.
unsafe fn volatile_copy(src: *const u8, dst: *mut u8, len: usize) {
    let words = len / 8;
    let s = src as *const u64;
    let d = dst as *mut u64;
    for i in 0..words {
        // SAFETY: i < len / 8, inside both ranges (caller contract); dst
        // may be unaligned, hence write_unaligned.
        unsafe { d.add(i).write_unaligned(std::ptr::read_volatile(s.add(i))) };
    }
    for i in words * 8..len {
        // SAFETY: i < len, inside both ranges.
        unsafe { dst.add(i).write(std::ptr::read_volatile(src.add(i))) };
    }
}
