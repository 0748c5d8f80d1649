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
//!   Every `RELEARN_NS` a page's window goes past its predicted end, to
//!   `PROBE_NS` of quiet, and learns its count again (a page's messages may
//!   grow, and a window closed at its predicted end shows no growth);
//! - at a store over bytes it holds already: the next message (an
//!   acknowledgement word stored again);
//! - before anything else this process sends or reads on the data path (a
//!   store the window does not take, a fetch, a shipment, a flush point, a
//!   trigger, `post_emulated`), so the order of everything the program did
//!   is kept;
//! - `IDLE_NS` after its last store, by the window timer's thread (a
//!   message shorter than its page's last one, a program that stopped
//!   storing);
//! - at the process's exit (`remote::flush_at_exit`).

use super::*;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

/// Quiet after a window's last store after which the timer posts it. Only a
/// window whose prediction failed waits this long. Shorter, a program
/// preempted in the middle of a message (a busy two-core host, where
/// programs spin on both cores) had its window posted early and the rest of
/// the message in a write of its own: with 20 µs the message ring put 425
/// bytes on the link per 8-byte message instead of 355 (`vsci bench --paths
/// remote --sections i`).
const IDLE_NS: u64 = 100_000;
/// Most stores one window takes before it is posted.
const MAX_STORES: u32 = 64;
/// Largest string store (`memcpy` payload) a window takes: one inside a
/// page, of at most what a posted write carries (`POSTED_MAX`). A copy
/// across pages is posted on its own, after the window before it.
pub(crate) const COPY_MAX: usize = POSTED_MAX;
/// Pages whose last window's store count is remembered (direct-mapped).
const LEARNED: usize = 512;
/// Age past which a page's learned store count is learned again. A count
/// only ever shrinks by what windows show, and a window closed at its
/// predicted end shows nothing: a page whose messages grew (a ring slot
/// that took 8 KiB messages, header and flag, then 8-byte ones, payload,
/// header and flag) closed every message short of its flag for good, the
/// flag a write of its own (measured: 1.3 stores a window, `vsci bench
/// --paths remote --sections i`, the `SCIFlush` rows after the 8 KiB ones).
/// Learning again costs, once in this long, one window that stays open past
/// its predicted end until `PROBE_NS` of quiet (or what the program does
/// next: a flush, another page's store): a message that grew joins it. Left
/// open for the full `IDLE_NS` instead, every 100 ms, a ring of 16 slots
/// in 16 pages had one message in 84 wait 100 µs, and the ring's 99th
/// percentile went from about 60 µs to 100-170 µs.
const RELEARN_NS: u64 = 200_000_000;
/// Quiet after which a window learning its page's count again is posted:
/// a few traps' time (a message's next store comes one trap, 6-10 µs,
/// after the last).
const PROBE_NS: u64 = 20_000;

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
    /// Quiet after which the timer posts it: `IDLE_NS`, or `PROBE_NS` once
    /// it is past its predicted end (learning the count again).
    idle_ns: u64,
    /// The timer runs for it (a window posted at the store that opened it
    /// never needs the `timerfd_settime` that disarms it).
    armed: bool,
}

impl Window {
    /// Does the window hold any of the bytes `off..off + len` already?
    fn holds_any(&self, off: usize, len: usize) -> bool {
        off < self.span.end && off + len > self.span.start && any_set(&self.mask, off, len)
    }
}

/// The mask words bits `off..off + len` fall in, each with those bits set:
/// a word at a time (a payload of kilobytes is tens of words, not
/// thousands of bits).
fn mask_words(off: usize, len: usize) -> impl Iterator<Item = (usize, u64)> {
    let end = off + len;
    let mut b = off;
    std::iter::from_fn(move || {
        if b >= end {
            return None;
        }
        let upto = end.min((b / 64 + 1) * 64);
        let bits = if upto - b == 64 { u64::MAX } else { ((1u64 << (upto - b)) - 1) << (b % 64) };
        let word = b / 64;
        b = upto;
        Some((word, bits))
    })
}

/// Is any of bits `off..off + len` of `mask` set?
fn any_set(mask: &[u64], off: usize, len: usize) -> bool {
    mask_words(off, len).any(|(w, bits)| mask[w] & bits != 0)
}

struct Combiner {
    open: Option<Window>,
    /// A closed window's page buffer and mask (mask cleared), for the next.
    spare: Option<(Vec<u8>, Vec<u64>)>,
    /// How many stores each page's windows take.
    learned: [Learned; LEARNED],
}

/// How many stores a page's messages take, as its windows showed.
#[derive(Clone, Copy)]
struct Learned {
    map: usize,
    page: usize,
    stores: u32,
    /// A smaller count seen once: taken when seen again in a row (a window
    /// can go quiet mid-message when the program is preempted).
    fewer: u32,
    /// When `stores` was learned (see `RELEARN_NS`).
    at_ns: u64,
}

const UNLEARNED: Learned = Learned { map: 0, page: 0, stores: 0, fewer: 0, at_ns: 0 };

static COMBINER: Mutex<Combiner> = Mutex::new(Combiner { open: None, spare: None, learned: [UNLEARNED; LEARNED] });

/// When the open window falls due (`last_ns + idle_ns`), 0 when none is
/// open or being posted: `close` and the timer's thread look without the
/// lock.
static OPEN_DUE_NS: AtomicU64 = AtomicU64::new(0);

/// The timer that posts a window gone quiet: armed `IDLE_NS` ahead when a
/// window stays open past its first store, disarmed when it closes, read by
/// a thread of its own. A window that closes at its predicted end (every message of a
/// program that sends one shape) so costs two `timerfd_settime` calls and
/// wakes nobody. The flusher could not do it: it sleeps for a millisecond
/// or parks, and waking it at every window cost a blocking wake-up (about
/// 48 µs here) per message, or, with rounds of 1 ms while a program
/// combines, 86 µs of CPU per isolated store (`vsci bench --paths remote
/// --sections j`); with rounds of 20 ms the message ring's 99th percentile
/// went from about 100 µs to 3-7 ms, windows that ended short waiting for
/// a round.
static TIMER: OnceLock<TimerFd> = OnceLock::new();

/// Make the window timer and its thread (real-time where the process may,
/// like the flusher: it must preempt a program spinning on every core).
/// Called with the first remote map, never from the fault handler. Without
/// it stores are not combined.
pub(crate) fn start_timer() {
    if !on() {
        return;
    }
    let t = match TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_CLOEXEC) {
        Ok(t) => t,
        Err(e) => {
            log::warn!("vsci: no timerfd ({e}); emulated stores are sent one by one");
            return;
        }
    };
    if TIMER.set(t).is_err() {
        return;
    }
    let spawned = vsci_sys::signals::spawn(std::thread::Builder::new().name("vsci-combine".into()), || {
        vsci_fabric::boost_current_thread();
        let t = TIMER.get().expect("the timer is made before its thread");
        loop {
            if let Err(e) = t.wait() {
                log::debug!("vsci: reading the window timer failed ({e})");
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Some(due) = close_if_idle() {
                arm(due.saturating_sub(trapped::now_ns()));
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("vsci: no window timer thread ({e}); emulated stores are sent one by one");
        STARTED.store(false, Ordering::Release);
    } else {
        STARTED.store(true, Ordering::Release);
    }
}

/// The timer's thread runs: windows may open.
static STARTED: AtomicBool = AtomicBool::new(false);

fn arm(ns: u64) {
    if let Some(t) = TIMER.get() {
        let d = TimeSpec::from_duration(Duration::from_nanos(ns.max(1)));
        if let Err(e) = t.set(Expiration::OneShot(d), TimerSetTimeFlags::empty()) {
            log::debug!("vsci: arming the window timer failed ({e})");
        }
    }
}

fn disarm() {
    if let Some(t) = TIMER.get() {
        let _ = t.unset();
    }
}

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

fn lock() -> Option<vsci_sys::signals::Locked<'static, Combiner>> {
    if HOLDING.with(|h| h.get()) {
        return None;
    }
    Some(vsci_sys::signals::lock(&COMBINER))
}

/// Take the store of `data` at byte `off` of page `page` (of `page_size`
/// bytes, segment offset `base`) of the map whose shadow is at `map`,
/// going to `target`. Called from the fault handler, under the map's lock.
/// False if not taken: the caller posts the store on its own.
pub(crate) fn append(
    target: &Arc<RemoteTarget>,
    map: usize,
    page: usize,
    page_size: usize,
    base: u64,
    off: usize,
    data: &[u8],
) -> bool {
    // Programs that flush are combined too: their window goes at its
    // predicted end (the flag), before the flush, as one acknowledged
    // write instead of three (the ring with `SCIFlush` after each flag:
    // 61-64 → 42-43 µs one way for 8 bytes).
    let now = trapped::now_ns();
    if !STARTED.load(Ordering::Acquire) || off + data.len() > page_size {
        return false;
    }
    let Some(mut c) = lock() else { return false };
    let key = (map, page);
    // Another page's store, or one over bytes the window holds already:
    // the next message (a message stores each of its words once; a
    // receiver's acknowledgement word stored again is the next
    // acknowledgement, which must not wait for the first's window).
    if c.open.as_ref().is_some_and(|w| w.key != key || !Arc::ptr_eq(&w.target, target) || w.holds_any(off, data.len()))
    {
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
            idle_ns: IDLE_NS,
            armed: false,
        });
    }
    let w = c.open.as_mut().expect("a window is open");
    w.bytes[off..off + data.len()].copy_from_slice(data);
    w.span = w.span.start.min(off)..w.span.end.max(off + data.len());
    for (i, bits) in mask_words(off, data.len()) {
        w.mask[i] |= bits;
    }
    w.last = off..off + data.len();
    w.stores += 1;
    w.last_ns = now;
    let stores = w.stores;
    let l = c.learned[slot(key)];
    let (predicted, stale) =
        if (l.map, l.page) == key { (l.stores, now.saturating_sub(l.at_ns) >= RELEARN_NS) } else { (0, false) };
    let at_end = predicted > 0 && stores >= predicted;
    if stores >= MAX_STORES || (at_end && !stale) {
        // The page's messages are this long: this store ends one. The
        // prediction stays as it is.
        close_locked(&mut c, false);
        return true;
    }
    let w = c.open.as_mut().expect("a window is open");
    // Once per window, or again when it goes past its predicted end to
    // learn the count again (shorter): when the timer fires with the
    // window still in use, its thread arms it again for the rest
    // (`close_if_idle`).
    let arm_now = if at_end && w.idle_ns != PROBE_NS {
        w.idle_ns = PROBE_NS;
        true
    } else {
        !w.armed
    };
    OPEN_DUE_NS.store(now + w.idle_ns, Ordering::Release);
    if arm_now {
        w.armed = true;
        arm(w.idle_ns);
    }
    true
}

/// Post the open window, if any (see the module's comment for when).
pub(crate) fn close() {
    if OPEN_DUE_NS.load(Ordering::Acquire) == 0 {
        return;
    }
    if let Some(mut c) = lock() {
        close_locked(&mut c, true);
    }
}

/// The timer's share: post a window quiet for its `idle_ns`; when one
/// stays open, the time it falls due.
pub(crate) fn close_if_idle() -> Option<u64> {
    let due = OPEN_DUE_NS.load(Ordering::Acquire);
    if due == 0 {
        return None;
    }
    if trapped::now_ns() < due {
        return Some(due);
    }
    let mut c = lock()?;
    match &c.open {
        Some(w) if trapped::now_ns() >= w.last_ns + w.idle_ns => {
            close_locked(&mut c, true);
            None
        }
        Some(w) => Some(w.last_ns + w.idle_ns),
        None => None,
    }
}

/// Post the open window: every stored byte outside the last store, in
/// runs, then the last store's bytes after them. `learn`: remember how
/// many stores it took, to close the page's next window at as many.
fn close_locked(c: &mut Combiner, learn: bool) {
    let Some(mut w) = c.open.take() else { return };
    if w.armed {
        disarm();
    }
    if learn {
        let n = w.stores;
        let l = &mut c.learned[slot(w.key)];
        if (l.map, l.page) != w.key || n >= l.stores || l.fewer == n {
            *l = Learned { map: w.key.0, page: w.key.1, stores: n, fewer: 0, at_ns: w.last_ns };
        } else {
            l.fewer = n;
        }
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
    OPEN_DUE_NS.store(0, Ordering::Release);
    for m in &mut w.mask[w.span.start / 64..w.span.end.div_ceil(64)] {
        *m = 0;
    }
    c.spare = Some((std::mem::take(&mut w.bytes), std::mem::take(&mut w.mask)));
}

#[cfg(test)]
mod tests {
    use super::any_set;

    #[test]
    fn any_set_sees_exactly_the_bits_asked() {
        let mut mask = vec![0u64; 4];
        assert!(!any_set(&mask, 0, 256));
        mask[1] |= 1 << 5; // bit 69
        assert!(any_set(&mask, 69, 1));
        assert!(any_set(&mask, 0, 70));
        assert!(!any_set(&mask, 0, 69));
        assert!(!any_set(&mask, 70, 186));
        assert!(any_set(&mask, 64, 64));
        assert!(any_set(&mask, 60, 10));
        mask[3] |= 1 << 63; // bit 255, the last
        assert!(any_set(&mask, 255, 1));
        assert!(any_set(&mask, 128, 128));
        assert!(!any_set(&mask, 128, 127));
        assert!(!any_set(&mask, 70, 0));
    }
}
