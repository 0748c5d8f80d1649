//! Write combining of emulated stores (`trapped::Shadow::emulate`).
//!
//! A message is several stores into one page: its payload (`memcpy`, one
//! string store), a header, a flag. Emulated one by one, each is an RMA
//! write of its own: a libfabric call, a TCP segment and its headers on the
//! link, a wake-up of the owner's engine. Combined, the stores of one page
//! that follow each other with nothing else in between travel together: the
//! fault handler puts each store's bytes into the process's one open
//! *window* (a page of one map, and which of its bytes were stored) instead
//! of posting it, and the window is posted when it closes, as one write of
//! every stored byte but the last store's, then the last store's bytes placed
//! after them (the last run of the same write where the provider places a
//! write's runs in order, tcp; else a write of its own, WAW): a flag stored last is never seen
//! before the bytes stored before it, as with one write per store. Only
//! bytes the program stored are sent (contract line 2 in docs/api.md).
//!
//! A window closes:
//! - when its page has taken as many stores as the page's last window did
//!   (a program sending messages of one shape closes each message's window
//!   at its last store, with no wait: the prediction);
//! - before anything else this process sends or reads on the data path (a
//!   store the window does not take, a fetch, a shipment, a flush point, a
//!   trigger, `post_emulated`), so the order of everything the program did
//!   is kept;
//! - `IDLE_NS` after its last store, by the flusher (a store that ends a
//!   message of a new shape, a program that stopped storing);
//! - at the process's exit (`remote::flush_at_exit`).

use super::*;
use std::sync::MutexGuard;

/// Quiet after a window's last store after which the flusher posts it.
const IDLE_NS: u64 = 20_000;
/// Most stores one window takes before it is posted.
const MAX_STORES: u32 = 64;
/// Largest string store (`memcpy` payload) a window takes. A longer one is
/// posted at once, so that its bytes travel while the program stores the
/// message's header and flag, which combine: measured in the message ring
/// (`vsci bench --paths remote --sections i`, no call, ping-pong), payloads
/// combined too took 8 B from 56 to 42 µs a round trip but 1 KiB from 55 to
/// 61 and 8 KiB from 60 to 68.
pub(crate) const COPY_MAX: usize = 64;
/// Pages whose last window's store count is remembered (direct-mapped).
const LEARNED: usize = 512;

/// An open window: stores into one page of one map, not posted yet.
struct Window {
    target: Arc<RemoteTarget>,
    /// The map's shadow (its address) and the page.
    key: (usize, usize),
    /// Segment offset of the page's first byte.
    base: u64,
    /// The page's stored bytes; `mask`: which (one bit a byte).
    bytes: Vec<u8>,
    mask: Vec<u64>,
    /// The last store's bytes, and the span of all (page offsets).
    last: std::ops::Range<usize>,
    span: std::ops::Range<usize>,
    stores: u32,
    last_ns: u64,
}

struct Combiner {
    open: Option<Window>,
    /// A closed window's page buffer and mask (mask cleared), for the next.
    spare: Option<(Vec<u8>, Vec<u64>)>,
    /// (map, page, stores of its last window).
    learned: [(usize, usize, u32); LEARNED],
}

static COMBINER: Mutex<Combiner> = Mutex::new(Combiner { open: None, spare: None, learned: [(0, 0, 0); LEARNED] });

/// `last_ns` of the open window, 0 when none is open or being posted:
/// `close` and the flusher look without the lock.
static OPEN_LAST_NS: AtomicU64 = AtomicU64::new(0);

/// When a window was last used: the flusher keeps short rounds while the
/// program combines (`active`).
static USED_NS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread holds `COMBINER` (posting a window): a store or a close
    /// reached again on it (a signal handler of the program that
    /// interrupted it) must not wait for the lock it holds.
    static HOLDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Combining is on unless `VSCI_COMBINE=0` (read once).
pub(crate) fn on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("VSCI_COMBINE").map_or(true, |v| v != "0"))
}

fn slot(key: (usize, usize)) -> usize {
    (key.0 / 64).wrapping_mul(31).wrapping_add(key.1) % LEARNED
}

fn lock() -> Option<MutexGuard<'static, Combiner>> {
    if HOLDING.with(|h| h.get()) {
        return None;
    }
    Some(COMBINER.lock().unwrap_or_else(|e| e.into_inner()))
}

/// What `append` did with a store.
pub(crate) enum Appended {
    /// Not taken (the caller posts it as before).
    No,
    /// In a window still open: the flusher should be told if nothing
    /// predicts when it closes (`true`).
    Open(bool),
    /// Taken and posted with its window.
    Posted,
}

/// Take the store of `data` at byte `off` of page `page` (of `page_size`
/// bytes, segment offset `base`) of the map whose shadow is at `map`,
/// going to `target`. Called from the fault handler, under the map's lock.
pub(crate) fn append(
    target: &Arc<RemoteTarget>,
    map: usize,
    page: usize,
    page_size: usize,
    base: u64,
    off: usize,
    data: &[u8],
) -> Appended {
    // A program that flushes its stores gets them posted one by one, each
    // acknowledged (see `FLUSHED_RECENTLY_NS`): its flush then waits for
    // acknowledgements on their way, where a window posted at the flush
    // waited a whole round trip more (measured: the ring with `SCIFlush`
    // after each flag, 63 → 78 µs a round trip).
    let now = trapped::now_ns();
    if !on()
        || off + data.len() > page_size
        || now.saturating_sub(LAST_FLUSH_NS.load(Ordering::Relaxed)) < FLUSHED_RECENTLY_NS
    {
        return Appended::No;
    }
    let Some(mut c) = lock() else { return Appended::No };
    let key = (map, page);
    if c.open.as_ref().is_some_and(|w| w.key != key || !Arc::ptr_eq(&w.target, target)) {
        close_locked(&mut c, true);
    }
    let fresh = c.open.is_none();
    if fresh {
        let (bytes, mask) = match c.spare.take() {
            Some((b, m)) if b.len() == page_size => (b, m),
            _ => (vec![0; page_size], vec![0; page_size.div_ceil(64)]),
        };
        c.open = Some(Window {
            target: target.clone(),
            key,
            base,
            bytes,
            mask,
            last: 0..0,
            span: off..off + data.len(),
            stores: 0,
            last_ns: now,
        });
    }
    let w = c.open.as_mut().expect("a window is open");
    w.bytes[off..off + data.len()].copy_from_slice(data);
    w.span = w.span.start.min(off)..w.span.end.max(off + data.len());
    for b in off..off + data.len() {
        w.mask[b / 64] |= 1 << (b % 64);
    }
    w.last = off..off + data.len();
    w.stores += 1;
    w.last_ns = now;
    let stores = w.stores;
    USED_NS.store(now, Ordering::Relaxed);
    let (lm, lp, ln) = c.learned[slot(key)];
    let predicted = if (lm, lp) == key { ln } else { 0 };
    if stores >= MAX_STORES || (predicted > 0 && stores >= predicted) {
        // The page's messages are this long: this store ends one. The
        // prediction stays as it is.
        close_locked(&mut c, false);
        return Appended::Posted;
    }
    OPEN_LAST_NS.store(now, Ordering::Release);
    Appended::Open(fresh && predicted == 0)
}

/// Post the open window, if any (see the module's comment for when).
pub(crate) fn close() {
    if OPEN_LAST_NS.load(Ordering::Acquire) == 0 {
        return;
    }
    if let Some(mut c) = lock() {
        close_locked(&mut c, true);
    }
}

/// The flusher's share: post a window quiet for `IDLE_NS`; when one stays
/// open, the time it falls due.
pub(crate) fn close_if_idle() -> Option<u64> {
    let last = OPEN_LAST_NS.load(Ordering::Acquire);
    if last == 0 {
        return None;
    }
    let due = last + IDLE_NS;
    if trapped::now_ns() < due {
        return Some(due);
    }
    let mut c = lock()?;
    match &c.open {
        Some(w) if trapped::now_ns() >= w.last_ns + IDLE_NS => {
            close_locked(&mut c, true);
            None
        }
        Some(w) => Some(w.last_ns + IDLE_NS),
        None => None,
    }
}

/// Has a window been used lately (the flusher's rounds stay short)?
pub(crate) fn active(within_ns: u64) -> bool {
    trapped::now_ns().saturating_sub(USED_NS.load(Ordering::Relaxed)) < within_ns
}

/// Post the open window: every stored byte outside the last store, in
/// runs, then the last store's bytes after them. `learn`: remember how
/// many stores it took, to close the page's next window at as many.
fn close_locked(c: &mut Combiner, learn: bool) {
    let Some(mut w) = c.open.take() else { return };
    if learn {
        c.learned[slot(w.key)] = (w.key.0, w.key.1, w.stores);
    }
    let stored = |b: usize| w.mask[b / 64] & (1 << (b % 64)) != 0 && !w.last.contains(&b);
    // The runs of the page's stored bytes outside the last store (page
    // offsets), in address order, then the last store's.
    let mut page_runs = Vec::new();
    let mut b = w.span.start;
    while b < w.span.end {
        if !stored(b) {
            b += 1;
            continue;
        }
        let start = b;
        while b < w.span.end && stored(b) {
            b += 1;
        }
        page_runs.push((start..b, w.base + start as u64));
    }
    page_runs.push((w.last.clone(), w.base + w.last.start as u64));
    // The bytes posted, run after run, and where each goes.
    let mut data = Vec::with_capacity(page_runs.iter().map(|(r, _)| r.len()).sum());
    let runs: Vec<_> = page_runs
        .iter()
        .map(|(r, off)| {
            let at = data.len();
            data.extend_from_slice(&w.bytes[r.clone()]);
            (at..data.len(), *off)
        })
        .collect();
    // The last store's bytes are placed after the rest: as the last run of
    // the same operation where the provider places runs in order (one
    // write on the link, not two), else as an operation of its own.
    let (rest, last) = runs.split_at(runs.len() - 1);
    let groups: Vec<&[(std::ops::Range<usize>, u64)]> =
        if rest.is_empty() || w.target.fabric().info().places_runs_in_order() {
            vec![&runs[..]]
        } else {
            vec![rest, last]
        };
    HOLDING.with(|h| h.set(true));
    match post_emulated_groups(&w.target, data, &groups, false, |_| {}) {
        Ok(()) => {
            w.target.fabric().progress();
        }
        Err(e) => {
            // Not posted (its queue full for good, the node declared
            // down): written now, in order, or reported at the next flush
            // point.
            log::debug!("vsci: combined stores not posted ({e}); writing them");
            if write_again(&w.target, &w.bytes, &page_runs).is_err() {
                EMULATED_LOST.store(true, Ordering::Release);
            }
        }
    }
    HOLDING.with(|h| h.set(false));
    // Only now, with the write queued where flush points wait for it: a
    // thread that found no window while this one was posting it would go
    // on to post a later store first, or return from a flush before it.
    OPEN_LAST_NS.store(0, Ordering::Release);
    for m in &mut w.mask[w.span.start / 64..w.span.end.div_ceil(64)] {
        *m = 0;
    }
    c.spare = Some((std::mem::take(&mut w.bytes), std::mem::take(&mut w.mask)));
}
