//! The memory extension's decisions (the parent, `memext.rs`, says how the
//! extension works and carries them out): where each page's two copies go
//! and how much each lender lends ([`places`], [`loan_pages`]), a page's
//! checksum, what evicting a page takes ([`plan`]), the resident set's
//! second-chance [`Clock`] and how far a sequential fetch reads ahead
//! ([`readahead_window`]). Pure functions of their arguments, with their
//! unit tests here.

use super::*;

/// How many pages after `page` to read ahead: the run of pages
/// `page + 1 ..` that `eligible` accepts, at most `limit` of them and none
/// at or past `pages` (the end of the range).
pub(crate) fn readahead_window(
    page: usize,
    pages: usize,
    limit: usize,
    mut eligible: impl FnMut(usize) -> bool,
) -> usize {
    let end = pages.min(page.saturating_add(1).saturating_add(limit));
    (page + 1..end).take_while(|&q| eligible(q)).count()
}

/// Where `page`'s copies live: `(lender index, slot in its loan)` for the
/// first and, with two or more lenders, the second copy. Pages go round the
/// lenders, the second copy on the next lender, so each of `n` lenders
/// holds `2 * ceil(pages / n)` slots and every pair of copies is on two
/// different lenders.
pub(crate) fn places(page: u64, n: usize) -> ([(usize, u64); 2], usize) {
    if n == 1 {
        return ([(0, page), (0, page)], 1);
    }
    let n64 = n as u64;
    let (i, k) = ((page % n64) as usize, page / n64);
    ([(i, 2 * k), ((i + 1) % n, 2 * k + 1)], 2)
}

/// Slots (pages) each lender lends for `pages` pages over `n` lenders.
pub(crate) fn loan_pages(pages: u64, n: usize) -> u64 {
    if n == 1 {
        pages
    } else {
        2 * pages.div_ceil(n as u64)
    }
}

/// A page's checksum, seeded with its number so a copy from the wrong slot
/// does not pass either.
pub(crate) fn checksum(page: u64, data: &[u8]) -> u64 {
    let mut h = page ^ 0x243f_6a88_85a3_08d3;
    for w in data.chunks_exact(8) {
        let w = u64::from_le_bytes(w.try_into().unwrap());
        h = (h.rotate_left(23) ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h ^ (h >> 29)
}

/// What evicting a page takes: which copies to write (bit k: copy k), or
/// that it cannot be evicted without losing it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    Write(u8),
    Lost,
}

/// `alive`: bit k set when copy k's lender holds a loan now. A dirty page
/// goes to every live lender of its; a clean stored page only where its
/// copy is missing (that re-mirrors pages as they pass through after a
/// lender came back), and a clean page never stored is zeros: dropped.
pub(crate) fn plan(flags: u8, copies: usize, alive: u8) -> Plan {
    let all = if copies == 2 { 3 } else { 1 };
    let valid = (flags / COPY) & all;
    if flags & DIRTY != 0 {
        if alive & all == 0 {
            return Plan::Lost;
        }
        return Plan::Write(alive & all);
    }
    if flags & STORED == 0 {
        return Plan::Write(0);
    }
    let missing = all & !valid & alive;
    if valid == 0 && missing == 0 {
        return Plan::Lost;
    }
    Plan::Write(missing)
}

/// The resident set: `frames` slots round which a hand turns. A page is
/// referenced when it is faulted in and again at each write-protect fault
/// (its first store). The hand clears referenced bits and takes the first
/// page it finds unreferenced: second chance. Stores after the first and
/// reads of resident pages do not fault, so the handler cannot see them;
/// in practice this is FIFO that spares pages the program began writing
/// since the hand last passed.
pub(crate) struct Clock {
    frames: Vec<u32>,
    referenced: Vec<bool>,
    frame_of: Vec<u32>,
    free: Vec<u32>,
    hand: usize,
}

impl Clock {
    pub(crate) fn new(pages: usize, frames: usize) -> Clock {
        Clock {
            frames: vec![NONE; frames],
            referenced: vec![false; frames],
            frame_of: vec![NONE; pages],
            // Filled in order, so the hand meets pages in the order they came.
            free: (0..frames as u32).rev().collect(),
            hand: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.frames.len() - self.free.len()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    /// Frames free: pages that can come in before one must go.
    pub(crate) fn room(&self) -> usize {
        self.free.len()
    }

    pub(crate) fn contains(&self, page: usize) -> bool {
        self.frame_of[page] != NONE
    }

    pub(crate) fn insert(&mut self, page: usize) {
        self.insert_as(page, true);
    }

    /// Insert a page nobody asked for yet (read ahead): not referenced, so
    /// the hand takes it at its next pass unless a store touches it first.
    pub(crate) fn insert_cold(&mut self, page: usize) {
        self.insert_as(page, false);
    }

    fn insert_as(&mut self, page: usize, referenced: bool) {
        let f = self.free.pop().expect("insert into a full clock") as usize;
        debug_assert!(!self.contains(page));
        self.frames[f] = page as u32;
        self.referenced[f] = referenced;
        self.frame_of[page] = f as u32;
    }

    pub(crate) fn touch(&mut self, page: usize) {
        let f = self.frame_of[page];
        if f != NONE {
            self.referenced[f as usize] = true;
        }
    }

    /// Take the next victim out of the set.
    pub(crate) fn victim(&mut self) -> Option<usize> {
        if self.len() == 0 {
            return None;
        }
        loop {
            let f = self.hand;
            self.hand = (self.hand + 1) % self.frames.len();
            let page = self.frames[f];
            if page == NONE {
                continue;
            }
            if std::mem::take(&mut self.referenced[f]) {
                continue;
            }
            self.frames[f] = NONE;
            self.frame_of[page as usize] = NONE;
            self.free.push(f as u32);
            return Some(page as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_on_two_lenders_in_distinct_slots_within_the_loans() {
        for n in 1..=5usize {
            let pages = 1000u64;
            let mut seen = std::collections::HashSet::new();
            for p in 0..pages {
                let (pl, c) = places(p, n);
                assert_eq!(c, if n == 1 { 1 } else { 2 });
                if c == 2 {
                    assert_ne!(pl[0].0, pl[1].0, "both copies of page {p} on one lender (n={n})");
                }
                for &(j, slot) in &pl[..c] {
                    assert!(j < n && slot < loan_pages(pages, n), "page {p} n={n}: slot {slot}");
                    assert!(seen.insert((j, slot)), "slot ({j}, {slot}) used twice (n={n})");
                }
            }
        }
        assert_eq!(loan_pages(16384, 2), 16384, "two lenders each hold everything");
        assert_eq!(loan_pages(10, 3), 8);
    }

    #[test]
    fn checksum_tells_pages_and_contents_apart() {
        let a = vec![7u8; PAGE];
        let mut b = a.clone();
        b[4000] ^= 1;
        assert_ne!(checksum(1, &a), checksum(1, &b));
        assert_ne!(checksum(1, &a), checksum(2, &a), "a copy from another slot must not pass");
        assert_ne!(checksum(0, &[0; PAGE]), 0);
    }

    #[test]
    fn the_clock_evicts_in_arrival_order_but_spares_touched_pages() {
        let mut c = Clock::new(100, 4);
        for p in [10, 11, 12, 13] {
            c.insert(p);
        }
        assert!(c.is_full());
        // Everything is referenced on arrival: one sweep clears, then FIFO.
        assert_eq!(c.victim(), Some(10));
        c.insert(14);
        c.touch(11);
        // 11 was written since the sweep: it gets a second chance.
        assert_eq!(c.victim(), Some(12));
        assert_eq!(c.victim(), Some(13));
        assert!(!c.contains(13) && c.contains(11) && c.contains(14));
        assert_eq!(c.len(), 2);
        // 14 arrived referenced, 11's bit was cleared by the pass over it.
        assert_eq!(c.victim(), Some(11));
        assert_eq!(c.victim(), Some(14));
        assert_eq!(c.victim(), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn the_clock_never_loses_or_duplicates_a_page() {
        let mut c = Clock::new(64, 8);
        let mut resident = std::collections::BTreeSet::new();
        let mut x = 12345u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = (x % 64) as usize;
            if c.contains(p) {
                c.touch(p);
                continue;
            }
            if c.is_full() {
                let v = c.victim().unwrap();
                assert!(resident.remove(&v));
            }
            c.insert(p);
            resident.insert(p);
            assert_eq!(c.len(), resident.len());
            assert!(resident.iter().all(|&r| c.contains(r)));
        }
    }

    #[test]
    fn the_readahead_window_stops_at_the_limit_the_end_and_the_first_page_it_cannot_take() {
        let all = |_: usize| true;
        assert_eq!(readahead_window(10, 100, 15, all), 15);
        assert_eq!(readahead_window(10, 100, 0, all), 0);
        // The end of the range.
        assert_eq!(readahead_window(90, 100, 15, all), 9);
        assert_eq!(readahead_window(99, 100, 15, all), 0);
        // The first page not to be taken (resident, never stored, ...).
        assert_eq!(readahead_window(10, 100, 15, |q| q != 14), 3);
        assert_eq!(readahead_window(10, 100, 15, |q| q != 11), 0);
        // Only pages after the faulting one are asked about, in order.
        let mut asked = Vec::new();
        readahead_window(5, 100, 3, |q| {
            asked.push(q);
            true
        });
        assert_eq!(asked, [6, 7, 8]);
        assert_eq!(readahead_window(usize::MAX - 1, usize::MAX, 15, all), 0);
    }

    #[test]
    fn pages_read_ahead_go_before_touched_pages_and_after_nothing_else() {
        let mut c = Clock::new(16, 4);
        c.insert(0);
        c.insert_cold(1);
        c.insert_cold(2);
        c.insert(3);
        assert_eq!(c.room(), 0);
        // The cold pages go first, in order; the referenced ones get their
        // second chance.
        assert_eq!(c.victim(), Some(1));
        assert_eq!(c.victim(), Some(2));
        assert_eq!(c.room(), 2);
        // A store to a cold page makes it referenced like any other.
        c.insert_cold(4);
        c.touch(4);
        assert_eq!(c.victim(), Some(0));
        assert_eq!(c.victim(), Some(3));
        assert_eq!(c.victim(), Some(4));
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn eviction_plans() {
        let both = COPY | COPY << 1;
        // Dirty: to every live lender of its; none alive: lost.
        assert_eq!(plan(DIRTY | STORED | both, 2, 3), Plan::Write(3));
        assert_eq!(plan(DIRTY, 2, 2), Plan::Write(2));
        assert_eq!(plan(DIRTY, 2, 0), Plan::Lost);
        assert_eq!(plan(DIRTY, 1, 1), Plan::Write(1));
        // Clean and never stored: zeros, dropped.
        assert_eq!(plan(0, 2, 0), Plan::Write(0));
        // Clean with both copies: dropped; with one and the other lender
        // back: re-mirrored; with one and the other still away: dropped.
        assert_eq!(plan(STORED | both, 2, 3), Plan::Write(0));
        assert_eq!(plan(STORED | COPY, 2, 3), Plan::Write(2));
        assert_eq!(plan(STORED | COPY, 2, 1), Plan::Write(0));
        // Clean, stored, every copy lost while it was resident: it must go
        // back out, or it is lost.
        assert_eq!(plan(STORED, 2, 1), Plan::Write(1));
        assert_eq!(plan(STORED, 2, 0), Plan::Lost);
        assert_eq!(plan(STORED, 1, 0), Plan::Lost);
    }
}
