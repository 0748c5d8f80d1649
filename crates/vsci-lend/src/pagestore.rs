//! A page store over lent memory, in the manner of Xen's transcendent
//! memory (tmem): `put`, `get` and `flush` of page-sized objects keyed by
//! (pool, object, index).
//!
//! [`PageStore::new`] borrows the store's capacity (whole pages) from one
//! or more lenders (`vscid --lend`); slot `s` lives on lender `s % n`, so
//! pages spread round the lenders in turn. The index — which key is in
//! which slot, pool kinds, age order — lives in this process's memory; the
//! page bytes live only in lent memory, and every put and get is one RMA
//! operation straight to the lender (neither daemon is on the path).
//!
//! Pools are private to the store (no sharing between stores) and are of
//! two kinds:
//!
//! * [`PoolKind::Persistent`]: a page put stays until it is flushed or its
//!   pool destroyed; a later get returns it (or an error if its lender
//!   died — never "absent", never other bytes). When every slot holds a
//!   persistent page a put fails with `SCI_ERR_NOSPC` and the caller keeps
//!   its page (as frontswap falls back to the real swap device).
//! * [`PoolKind::Ephemeral`]: the store may drop a page at any time, so a
//!   get may answer "absent". A put into a full store drops the oldest
//!   ephemeral page (of any ephemeral pool) to make room.
//!
//! A put into a full store, of either kind, first drops ephemeral pages,
//! oldest first: ephemeral pages are by definition ones the store may
//! drop, and a persistent page is worth more (its owner has no other
//! copy). It fails with `SCI_ERR_NOSPC` only when no slot is free and none
//! holds an ephemeral page.
//!
//! When a transfer to a lender fails (`SCI_ERR_TRANSFER_FAILED`: it died,
//! or its link did) its memory is gone: the put stores nothing, the get
//! returns the error, and from then on the store does not use that lender.
//! Gets of its pages fail at once with the same error (never "absent",
//! never other bytes) until the key is flushed or put again; its free
//! slots go out of use, so puts go to the other lenders' slots.
//!
//! Transfers happen outside the index lock: a put reserves a slot, writes
//! the page, then publishes the key; a get pins the key's slot, reads it,
//! then unpins it. A slot that is flushed, replaced or evicted while a get
//! reads it is freed only when that get is done, so a get never returns
//! bytes of another key.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use vsci_client::{Client, Loan, SciError};

pub const PAGE_SIZE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Ephemeral,
    Persistent,
}

/// What a store has done so far, and how full it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageStoreStats {
    /// Puts that stored their page.
    pub puts: u64,
    /// Puts refused for want of room (`SCI_ERR_NOSPC`).
    pub puts_refused: u64,
    /// Gets asked (hits + misses + failed).
    pub gets: u64,
    pub hits: u64,
    /// Gets that found nothing (never put, flushed, or dropped).
    pub misses: u64,
    /// Ephemeral pages dropped to make room.
    pub evictions: u64,
    /// Puts and gets whose transfer failed (a lender died).
    pub transfer_errors: u64,
    /// Slots holding a page (or reserved by a put in progress, or freed
    /// but still being read).
    pub pages_used: u64,
    /// Slots of lenders that failed, out of use for good (their pages
    /// that are still in the index count as used until flushed).
    pub pages_lost: u64,
    pub capacity_pages: u64,
}

type Key = (u32, u64, u32);

#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: u32,
    /// Age, for ephemeral eviction order.
    seq: u64,
}

struct Pool {
    kind: PoolKind,
    pages: BTreeMap<(u64, u32), Entry>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SlotState {
    #[default]
    Free,
    /// A put is writing it; not yet in the index.
    Reserved,
    /// Holds a key's page.
    Used,
    /// Removed from the index while gets still read it: free when the
    /// last of them is done.
    Retired,
    /// On a lender that failed: never used again.
    Lost,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    state: SlotState,
    /// Gets reading it now.
    pins: u32,
}

/// A slot reserved for a put; hand it to [`Index::publish`] or
/// [`Index::abort`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub slot: u32,
    /// Ephemeral pages dropped to make room.
    pub evicted: u32,
}

/// The store's index, without transfers: which key holds which slot,
/// which slots are free, the age order of ephemeral pages.
pub(crate) struct Index {
    pools: HashMap<u32, Pool>,
    next_pool: u32,
    slots: Vec<Slot>,
    /// Free slots; the lowest is handed out first on a fresh store.
    free: Vec<u32>,
    /// Ephemeral pages by age (seq → key).
    ephemeral: BTreeMap<u64, Key>,
    next_seq: u64,
    /// Slot `s` is on lender `s % lenders`; `failed[l]`: lender `l` failed
    /// a transfer (its memory is gone).
    failed: Vec<bool>,
    lost: u64,
    stats: PageStoreStats,
}

impl Index {
    pub(crate) fn new(capacity_pages: u32, lenders: u32) -> Index {
        assert!(lenders > 0);
        Index {
            pools: HashMap::new(),
            next_pool: 0,
            slots: vec![Slot::default(); capacity_pages as usize],
            free: (0..capacity_pages).rev().collect(),
            ephemeral: BTreeMap::new(),
            next_seq: 0,
            failed: vec![false; lenders as usize],
            lost: 0,
            stats: PageStoreStats { capacity_pages: u64::from(capacity_pages), ..Default::default() },
        }
    }

    pub(crate) fn new_pool(&mut self, kind: PoolKind) -> Result<u32, SciError> {
        // Ids are never reused, so a put that publishes after its pool was
        // destroyed cannot land in a newer pool of the same id.
        let id = self.next_pool;
        if id > i32::MAX as u32 {
            return Err(SciError::Nospc);
        }
        self.next_pool += 1;
        self.pools.insert(id, Pool { kind, pages: BTreeMap::new() });
        Ok(id)
    }

    fn pool(&self, pool: u32) -> Result<&Pool, SciError> {
        self.pools.get(&pool).ok_or(SciError::IllegalParameter)
    }

    pub(crate) fn kind(&self, pool: u32) -> Result<PoolKind, SciError> {
        Ok(self.pool(pool)?.kind)
    }

    /// The lender of `slot`.
    pub(crate) fn lender(&self, slot: u32) -> usize {
        slot as usize % self.failed.len()
    }

    /// Take `slot` back from the index: free, or retired while read, or
    /// lost for good if its lender failed.
    fn release(&mut self, slot: u32) {
        let failed = self.failed[self.lender(slot)];
        let s = &mut self.slots[slot as usize];
        if s.pins > 0 {
            s.state = SlotState::Retired;
        } else if failed {
            s.state = SlotState::Lost;
            self.lost += 1;
        } else {
            s.state = SlotState::Free;
            self.free.push(slot);
        }
    }

    /// Lender `lender` failed a transfer: its memory is gone. Its free
    /// slots go out of use now, the others as they are released; gets of
    /// its pages fail from now on without trying.
    pub(crate) fn lender_failed(&mut self, lender: usize) {
        if std::mem::replace(&mut self.failed[lender], true) {
            return;
        }
        let n = self.failed.len();
        let before = self.free.len();
        self.free.retain(|&s| s as usize % n != lender);
        for s in 0..self.slots.len() {
            if s % n == lender && self.slots[s].state == SlotState::Free {
                self.slots[s].state = SlotState::Lost;
            }
        }
        self.lost += (before - self.free.len()) as u64;
    }

    /// Remove `entry` (of a pool of `kind`) from the age order and free
    /// its slot.
    fn forget(&mut self, kind: PoolKind, entry: Entry) {
        if kind == PoolKind::Ephemeral {
            self.ephemeral.remove(&entry.seq);
        }
        self.release(entry.slot);
    }

    /// Drop the oldest ephemeral page; false if there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, (pool, object, index))) = self.ephemeral.pop_first() else { return false };
        let entry = self
            .pools
            .get_mut(&pool)
            .and_then(|p| p.pages.remove(&(object, index)))
            .expect("an ephemeral page in the age order is in its pool");
        self.release(entry.slot);
        self.stats.evictions += 1;
        true
    }

    /// A slot for a put into `pool`, dropping ephemeral pages, oldest
    /// first, when none is free.
    pub(crate) fn reserve(&mut self, pool: u32) -> Result<Reservation, SciError> {
        self.pool(pool)?;
        let mut evicted = 0;
        loop {
            if let Some(slot) = self.free.pop() {
                self.slots[slot as usize].state = SlotState::Reserved;
                return Ok(Reservation { slot, evicted });
            }
            // A page being read is retired, not freed: try the next.
            if !self.evict_oldest() {
                self.stats.puts_refused += 1;
                return Err(SciError::Nospc);
            }
            evicted += 1;
        }
    }

    /// The put's page is in `slot`: make it `key`'s, replacing what `key`
    /// held. If the pool was destroyed meanwhile the slot is freed (the
    /// put happened before the destroy).
    pub(crate) fn publish(&mut self, (pool, object, index): Key, slot: u32) {
        debug_assert_eq!(self.slots[slot as usize].state, SlotState::Reserved);
        self.stats.puts += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        let Some(p) = self.pools.get_mut(&pool) else {
            self.release(slot);
            return;
        };
        let kind = p.kind;
        let old = p.pages.insert((object, index), Entry { slot, seq });
        self.slots[slot as usize].state = SlotState::Used;
        if kind == PoolKind::Ephemeral {
            self.ephemeral.insert(seq, (pool, object, index));
        }
        if let Some(old) = old {
            self.forget(kind, old);
        }
    }

    /// The put failed (call [`Index::lender_failed`] first): give its
    /// slot back.
    pub(crate) fn abort(&mut self, slot: u32) {
        debug_assert_eq!(self.slots[slot as usize].state, SlotState::Reserved);
        self.stats.transfer_errors += 1;
        self.release(slot);
    }

    /// `key`'s slot, pinned until [`Index::unpin`]; None if absent.
    pub(crate) fn lookup_pin(&mut self, (pool, object, index): Key) -> Result<Option<u32>, SciError> {
        let entry = self.pool(pool)?.pages.get(&(object, index)).copied();
        self.stats.gets += 1;
        match entry {
            None => {
                self.stats.misses += 1;
                Ok(None)
            }
            Some(e) if self.failed[self.lender(e.slot)] => {
                self.stats.transfer_errors += 1;
                Err(SciError::TransferFailed)
            }
            Some(e) => {
                self.slots[e.slot as usize].pins += 1;
                Ok(Some(e.slot))
            }
        }
    }

    /// A get of `slot` is done (`ok`: it read the page).
    pub(crate) fn unpin(&mut self, slot: u32, ok: bool) {
        if ok {
            self.stats.hits += 1;
        } else {
            self.stats.transfer_errors += 1;
        }
        let s = &mut self.slots[slot as usize];
        s.pins -= 1;
        if s.pins == 0 && s.state == SlotState::Retired {
            self.release(slot);
        }
    }

    /// The slot `key` is in, without pinning it.
    pub(crate) fn slot_of(&self, (pool, object, index): Key) -> Result<Option<u32>, SciError> {
        Ok(self.pool(pool)?.pages.get(&(object, index)).map(|e| e.slot))
    }

    /// Forget one page; true if it was there.
    pub(crate) fn flush_page(&mut self, (pool, object, index): Key) -> Result<bool, SciError> {
        let p = self.pools.get_mut(&pool).ok_or(SciError::IllegalParameter)?;
        let kind = p.kind;
        match p.pages.remove(&(object, index)) {
            Some(e) => {
                self.forget(kind, e);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Forget every page of `object`; how many there were.
    pub(crate) fn flush_object(&mut self, pool: u32, object: u64) -> Result<usize, SciError> {
        let p = self.pools.get_mut(&pool).ok_or(SciError::IllegalParameter)?;
        let kind = p.kind;
        let indexes: Vec<u32> = p.pages.range((object, 0)..=(object, u32::MAX)).map(|(&(_, i), _)| i).collect();
        let entries: Vec<Entry> = indexes.iter().filter_map(|i| p.pages.remove(&(object, *i))).collect();
        let n = entries.len();
        for e in entries {
            self.forget(kind, e);
        }
        Ok(n)
    }

    /// Forget every page of `pool` and the pool itself.
    pub(crate) fn destroy_pool(&mut self, pool: u32) -> Result<(), SciError> {
        let p = self.pools.remove(&pool).ok_or(SciError::IllegalParameter)?;
        for (_, e) in p.pages {
            self.forget(p.kind, e);
        }
        Ok(())
    }

    pub(crate) fn stats(&self) -> PageStoreStats {
        let used = (self.slots.len() - self.free.len()) as u64 - self.lost;
        PageStoreStats { pages_used: used, pages_lost: self.lost, ..self.stats }
    }
}

/// A page store over memory borrowed from lenders; see the module docs.
pub struct PageStore {
    loans: Vec<Loan>,
    index: Mutex<Index>,
}

fn check_page(len: usize) -> Result<(), SciError> {
    if len == PAGE_SIZE {
        Ok(())
    } else {
        Err(SciError::IllegalParameter)
    }
}

impl PageStore {
    /// Borrow `capacity` bytes (rounded down to whole pages, at least one)
    /// spread over `lenders`: slot `s` on `lenders[s % n]`. Everything
    /// borrowed is given back if any lender refuses (`SCI_ERR_NOSPC`: it
    /// has not that much left; `SCI_ERR_NO_SUCH_NODEID`: no such node).
    pub fn new(client: &Client, lenders: &[u32], capacity: u64) -> Result<PageStore, SciError> {
        let pages = capacity / PAGE_SIZE as u64;
        if lenders.is_empty() || pages == 0 || pages > u64::from(u32::MAX) {
            return Err(SciError::IllegalParameter);
        }
        // With fewer pages than lenders, only the first `pages` lend.
        let n = (lenders.len() as u64).min(pages);
        let mut loans = Vec::with_capacity(n as usize);
        for (i, &node) in lenders.iter().take(n as usize).enumerate() {
            let count = (pages - i as u64).div_ceil(n);
            // On error the loans so far are dropped, which gives them back.
            loans.push(client.borrow(node, count * PAGE_SIZE as u64)?);
        }
        Ok(PageStore { index: Mutex::new(Index::new(pages as u32, loans.len() as u32)), loans })
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        // A panic under the lock leaves the index consistent enough: every
        // method finishes its changes before anything that could panic.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where slot `slot` lives: (loan, offset in it).
    fn place(&self, slot: u32) -> (&Loan, u64) {
        let n = self.loans.len() as u64;
        let s = u64::from(slot);
        (&self.loans[(s % n) as usize], (s / n) * PAGE_SIZE as u64)
    }

    pub fn capacity_pages(&self) -> u64 {
        self.index().stats.capacity_pages
    }

    /// The lenders, in slot order.
    pub fn lenders(&self) -> Vec<u32> {
        self.loans.iter().map(|l| l.node_id()).collect()
    }

    pub fn new_pool(&self, kind: PoolKind) -> Result<u32, SciError> {
        self.index().new_pool(kind)
    }

    pub fn pool_kind(&self, pool: u32) -> Result<PoolKind, SciError> {
        self.index().kind(pool)
    }

    /// Forget every page of `pool`, and the pool (`SCI_ERR_ILLEGAL_PARAMETER`
    /// if there is no such pool).
    pub fn destroy_pool(&self, pool: u32) -> Result<(), SciError> {
        self.index().destroy_pool(pool)
    }

    /// Store `page` (`PAGE_SIZE` bytes) as (`pool`, `object`, `index`),
    /// replacing what that key held. Fails with `SCI_ERR_NOSPC` when the
    /// store is full of persistent pages (nothing is stored, and what the
    /// key held is still there), `SCI_ERR_TRANSFER_FAILED` when the slot's
    /// lender is gone (nothing is stored; what the key held is still
    /// there).
    pub fn put(&self, pool: u32, object: u64, index: u32, page: &[u8]) -> Result<(), SciError> {
        check_page(page.len())?;
        let r = self.index().reserve(pool)?;
        let (loan, off) = self.place(r.slot);
        // The engine writes from a buffer of ours: after a write it
        // abandoned (its lender died mid-way) it may still read that
        // memory, which must then not be the caller's.
        let bounce = page.to_vec();
        match loan.write(&bounce, off) {
            Ok(()) => {
                self.index().publish((pool, object, index), r.slot);
                Ok(())
            }
            Err(e) => {
                std::mem::forget(bounce);
                let mut ix = self.index();
                if e == SciError::TransferFailed {
                    let lender = ix.lender(r.slot);
                    ix.lender_failed(lender);
                }
                ix.abort(r.slot);
                Err(e)
            }
        }
    }

    /// Copy the page stored as (`pool`, `object`, `index`) into `out`
    /// (`PAGE_SIZE` bytes): `Ok(true)`. `Ok(false)`: there is none (never
    /// put, flushed, or dropped from an ephemeral pool); `out` is
    /// untouched. `Err(SCI_ERR_TRANSFER_FAILED)`: its lender is gone; `out`
    /// is untouched. The page stays in the store (tmem's "get" of a
    /// private pool here does not also flush).
    pub fn get(&self, pool: u32, object: u64, index: u32, out: &mut [u8]) -> Result<bool, SciError> {
        check_page(out.len())?;
        let Some(slot) = self.index().lookup_pin((pool, object, index))? else { return Ok(false) };
        let (loan, off) = self.place(slot);
        // Loan::read lands the bytes in `out` only when all of them came.
        let r = loan.read(out, off);
        let mut ix = self.index();
        if r == Err(SciError::TransferFailed) {
            let lender = ix.lender(slot);
            ix.lender_failed(lender);
        }
        ix.unpin(slot, r.is_ok());
        r.map(|()| true)
    }

    /// The lender holding (`pool`, `object`, `index`)'s page, if stored.
    pub fn node_of(&self, pool: u32, object: u64, index: u32) -> Result<Option<u32>, SciError> {
        let slot = self.index().slot_of((pool, object, index))?;
        Ok(slot.map(|s| self.place(s).0.node_id()))
    }

    /// Forget one page; Ok(true) if it was there.
    pub fn flush_page(&self, pool: u32, object: u64, index: u32) -> Result<bool, SciError> {
        self.index().flush_page((pool, object, index))
    }

    /// Forget every page of `object`; how many there were.
    pub fn flush_object(&self, pool: u32, object: u64) -> Result<usize, SciError> {
        self.index().flush_object(pool, object)
    }

    pub fn stats(&self) -> PageStoreStats {
        self.index().stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(ix: &mut Index, key: Key) -> Result<u32, SciError> {
        let r = ix.reserve(key.0)?;
        ix.publish(key, r.slot);
        Ok(r.slot)
    }

    fn get(ix: &mut Index, key: Key) -> Option<u32> {
        let s = ix.lookup_pin(key).unwrap()?;
        ix.unpin(s, true);
        Some(s)
    }

    #[test]
    fn slots_are_handed_out_lowest_first_and_reused_after_flush() {
        let mut ix = Index::new(4, 1);
        let p = ix.new_pool(PoolKind::Persistent).unwrap();
        assert_eq!((0..4).map(|i| put(&mut ix, (p, 7, i)).unwrap()).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert_eq!(ix.reserve(p), Err(SciError::Nospc), "full of persistent pages");
        assert_eq!(ix.stats().puts_refused, 1);
        assert_eq!(get(&mut ix, (p, 7, 2)), Some(2));
        assert!(ix.flush_page((p, 7, 2)).unwrap());
        assert!(!ix.flush_page((p, 7, 2)).unwrap());
        assert_eq!(get(&mut ix, (p, 7, 2)), None);
        assert_eq!(put(&mut ix, (p, 8, 0)), Ok(2));
        let st = ix.stats();
        assert_eq!((st.puts, st.gets, st.hits, st.misses, st.pages_used, st.capacity_pages), (5, 2, 1, 1, 4, 4));
    }

    #[test]
    fn a_put_of_an_existing_key_replaces_it_and_frees_the_old_slot() {
        let mut ix = Index::new(2, 1);
        let p = ix.new_pool(PoolKind::Persistent).unwrap();
        assert_eq!(put(&mut ix, (p, 1, 1)), Ok(0));
        assert_eq!(put(&mut ix, (p, 1, 1)), Ok(1));
        assert_eq!(get(&mut ix, (p, 1, 1)), Some(1));
        assert_eq!(ix.stats().pages_used, 1);
        // The old version stays readable while the new one is written.
        let r = ix.reserve(p).unwrap();
        assert_eq!(get(&mut ix, (p, 1, 1)), Some(1));
        ix.publish((p, 1, 1), r.slot);
        assert_eq!(get(&mut ix, (p, 1, 1)), Some(0));
    }

    #[test]
    fn a_full_store_drops_the_oldest_ephemeral_page_of_any_pool() {
        let mut ix = Index::new(3, 1);
        let (e1, e2, per) = (
            ix.new_pool(PoolKind::Ephemeral).unwrap(),
            ix.new_pool(PoolKind::Ephemeral).unwrap(),
            ix.new_pool(PoolKind::Persistent).unwrap(),
        );
        put(&mut ix, (e1, 0, 0)).unwrap();
        put(&mut ix, (e2, 0, 0)).unwrap();
        put(&mut ix, (e1, 0, 1)).unwrap();
        // Full: a put drops the oldest, here the key it replaces, which
        // makes that key the youngest.
        let r = ix.reserve(e1).unwrap();
        assert_eq!(r.evicted, 1);
        assert_eq!(get(&mut ix, (e1, 0, 0)), None, "the oldest went");
        ix.publish((e1, 0, 0), r.slot);
        // A persistent put takes the oldest ephemeral page's room too: e2's.
        put(&mut ix, (per, 0, 0)).unwrap();
        assert_eq!(get(&mut ix, (e2, 0, 0)), None);
        assert!(get(&mut ix, (e1, 0, 1)).is_some() && get(&mut ix, (e1, 0, 0)).is_some());
        put(&mut ix, (per, 0, 1)).unwrap();
        put(&mut ix, (per, 0, 2)).unwrap();
        assert_eq!(get(&mut ix, (e1, 0, 1)), None);
        assert_eq!(get(&mut ix, (e1, 0, 0)), None);
        // All persistent now: nothing to drop, for either kind.
        assert_eq!(ix.reserve(e1), Err(SciError::Nospc));
        assert_eq!(ix.reserve(per), Err(SciError::Nospc));
        assert_eq!(ix.stats().evictions, 4);
    }

    #[test]
    fn a_slot_being_read_is_not_reused_until_the_read_is_done() {
        let mut ix = Index::new(2, 1);
        let e = ix.new_pool(PoolKind::Ephemeral).unwrap();
        put(&mut ix, (e, 0, 0)).unwrap();
        put(&mut ix, (e, 0, 1)).unwrap();
        let reading = ix.lookup_pin((e, 0, 0)).unwrap().unwrap();
        // The oldest (being read) is dropped but its slot retired; the next
        // oldest makes the room.
        let r = ix.reserve(e).unwrap();
        assert_eq!((r.evicted, r.slot), (2, 1));
        assert_eq!(ix.stats().pages_used, 2);
        ix.publish((e, 0, 2), r.slot);
        assert_eq!(ix.stats().pages_used, 2);
        assert_eq!(ix.free, vec![]);
        ix.unpin(reading, true);
        assert_eq!(ix.free, vec![0]);
        assert!(ix.flush_page((e, 0, 2)).unwrap());
        assert_eq!(ix.stats().pages_used, 0, "the retired slot is free once read");
    }

    #[test]
    fn a_failed_lender_s_slots_go_out_of_use_and_its_pages_fail() {
        let mut ix = Index::new(6, 2);
        let p = ix.new_pool(PoolKind::Persistent).unwrap();
        for i in 0..4 {
            put(&mut ix, (p, 0, i)).unwrap();
        }
        // Lender 1 (odd slots) dies while puts write to slots 4 and 5.
        let r4 = ix.reserve(p).unwrap();
        let r5 = ix.reserve(p).unwrap();
        assert_eq!((r4.slot, r5.slot), (4, 5));
        ix.lender_failed(1);
        ix.abort(r5.slot);
        ix.publish((p, 0, 4), r4.slot);
        assert_eq!(ix.lookup_pin((p, 0, 1)), Err(SciError::TransferFailed), "never absent, never bytes");
        assert_eq!(ix.lookup_pin((p, 0, 3)), Err(SciError::TransferFailed));
        assert_eq!(get(&mut ix, (p, 0, 2)), Some(2));
        let st = ix.stats();
        assert_eq!((st.pages_used, st.pages_lost, st.transfer_errors), (5, 1, 3));
        // Flushing a lost page does not bring its slot back; lender 0's
        // slots serve on.
        assert!(ix.flush_page((p, 0, 1)).unwrap());
        assert!(ix.flush_page((p, 0, 0)).unwrap());
        assert_eq!(ix.reserve(p).map(|r| r.slot), Ok(0));
        assert_eq!(ix.reserve(p), Err(SciError::Nospc));
        let st = ix.stats();
        assert_eq!((st.pages_used, st.pages_lost), (4, 2));
    }

    #[test]
    fn flush_object_destroy_pool_and_failures_free_their_slots() {
        let mut ix = Index::new(8, 1);
        let p = ix.new_pool(PoolKind::Persistent).unwrap();
        let e = ix.new_pool(PoolKind::Ephemeral).unwrap();
        for i in 0..3 {
            put(&mut ix, (p, 5, i)).unwrap();
            put(&mut ix, (e, 5, i)).unwrap();
        }
        put(&mut ix, (p, 6, 0)).unwrap();
        put(&mut ix, (p, 4, u32::MAX)).unwrap();
        assert_eq!(ix.flush_object(p, 5), Ok(3));
        assert_eq!(ix.flush_object(p, 5), Ok(0));
        assert!(get(&mut ix, (p, 6, 0)).is_some() && get(&mut ix, (p, 4, u32::MAX)).is_some());
        assert!(get(&mut ix, (e, 5, 1)).is_some());
        ix.destroy_pool(e).unwrap();
        assert_eq!(ix.destroy_pool(e), Err(SciError::IllegalParameter));
        assert_eq!(ix.lookup_pin((e, 5, 1)), Err(SciError::IllegalParameter));
        assert_eq!(ix.stats().pages_used, 2);
        assert!(ix.ephemeral.is_empty());
        // A failed put stores nothing and gives its slot back.
        let r = ix.reserve(p).unwrap();
        ix.abort(r.slot);
        assert_eq!(ix.stats().pages_used, 2);
        assert_eq!(ix.stats().transfer_errors, 1);
        // A put whose pool went away meanwhile leaves nothing behind, and
        // pool ids are not reused.
        let q = ix.new_pool(PoolKind::Persistent).unwrap();
        let r = ix.reserve(q).unwrap();
        ix.destroy_pool(q).unwrap();
        ix.publish((q, 0, 0), r.slot);
        assert_eq!(ix.stats().pages_used, 2);
        assert!(ix.new_pool(PoolKind::Ephemeral).unwrap() > q);
        assert_eq!(ix.reserve(99), Err(SciError::IllegalParameter));
    }
}
