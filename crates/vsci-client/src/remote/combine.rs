//! Write combining of emulated stores (`trapped::Shadow::emulate`).
//!
//! A message is several stores into one page (or across into the next):
//! its payload (`memcpy`, one string store), a header, a flag. Emulated one by one, each is an RMA
//! write of its own: a libfabric call, a TCP segment and its headers on the
//! link, a wake-up of the owner's engine. Combined, the stores of one page
//! and the page after it that follow each other with nothing else in
//! between travel together: the fault handler puts each store's bytes into
//! the process's one open *window* (two pages of one map, and which of
//! their bytes were stored) instead
//! of posting it, and the window is posted when it closes, as one write of
//! every stored byte but the last store's, then the last store's bytes placed
//! after them (the last run of the same write where the provider places a
//! write's runs in order, tcp; else a write of its own, WAW): a flag stored last is never seen
//! before the bytes stored before it, as with one write per store. Only
//! bytes the program stored are sent (contract line 2 in docs/api.md).
//!
//! A window that holds one store (a *lead*: a receiver's acknowledgement,
//! a credit, a doorbell word) carries on into other pages of the same
//! map: the message the program writes next travels in the same write,
//! the lead's bytes first. In a ping-pong the receiver acknowledges, then
//! replies; each was a write of its own, a TCP segment and a wake-up of the
//! owner's engine. The lead comes first on the link and the window's last
//! store last, so the order is that of two windows posted one after the
//! other.
//!
//! A window closes:
//! - when it has taken as many stores as the last window that opened on
//!   the same page did, or for a page with no window yet the last count
//!   learned in its map (a program sending messages of one shape closes
//!   each message's window at its last store, with no wait: the
//!   prediction);
//!   A page whose messages grew shows it at the next store: within
//!   `PROBE_NS` of such a close, into the window's pages but outside what
//!   it stored (the flag of a message that now takes one store more). That
//!   store is posted at once, and the page's next window goes past its
//!   predicted end, to `PROBE_NS` of quiet, learning its count again;
//! - at a store over bytes it holds already: the next message (an
//!   acknowledgement word stored again);
//! - before anything else this process sends or reads on the data path (a
//!   store the window does not take: another map's, one outside its two
//!   pages once it has more than one store, a fetch, a shipment, a flush point, a
//!   trigger, `post_emulated`), so the order of everything the program did
//!   is kept;
//! - `IDLE_NS` after its last store, by the window timer's thread (a
//!   message shorter than its page's last one, a program that stopped
//!   storing); `SURE_IDLE_NS` in a page whose windows have long ended at
//!   their predicted count;
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
/// The same quiet for a window whose page's last `SURE_STREAK` windows all
/// ended at their predicted count: the timer is then only a safety net (a
/// program that stops in the middle of a message), and a window that does
/// need it waits longer, once, before its page goes back to `IDLE_NS`.
/// Why: arming a timer that becomes the CPU's next event and disarming it
/// reprograms the hardware timer twice, which in these VMs is an exit each
/// (`timerfd_settime` 100 µs ahead, then off: 8.9-14 µs a pair, about a
/// fifth of a message's one-way time in the ring), while a timer due after
/// the next scheduler tick (HZ=250: at most 4 ms away) is only queued
/// (3 ms ahead and off: 0.6 µs a pair).
const SURE_IDLE_NS: u64 = 4_000_000;
/// Windows in a row closed at their page's predicted count after which the
/// next ones wait `SURE_IDLE_NS` (see there).
const SURE_STREAK: u32 = 16;
/// Most stores one window takes before it is posted.
const MAX_STORES: u32 = 64;
/// Largest string store (`memcpy` payload) a window takes: one inside a
/// page or across into the next, of at most what a posted write carries
/// (`POSTED_MAX`). A longer copy is posted on its own, after the window
/// before it.
pub(crate) const COPY_MAX: usize = POSTED_MAX;
/// Pages whose last window's store count is remembered (direct-mapped).
const LEARNED: usize = 512;
/// Quiet after which a window learning its page's count again is posted,
/// and the time after a window posted at its predicted end within which a
/// store shows that the page's messages grew (or that its one store could
/// have led the next window): a few traps' time (a message's next store
/// comes one trap, 6-10 µs, after the last).
///
/// A count only ever shrinks by what windows show, and a window closed at
/// its predicted end shows nothing of a message that grew (a ring slot
/// that took 8 KiB messages, header and flag, then 8-byte ones, payload,
/// header and flag, closed every message short of its flag: 1.3 stores a
/// window, `vsci bench --paths remote --sections i`, the `SCIFlush` rows
/// after the 8 KiB ones). It used to be learned again every 200 ms, each
/// time one window past its predicted end waiting for this quiet and a
/// timer's wake-up: an isolated store (one a millisecond into 128 pages in
/// turn, section j) waited for it at every other visit of its page and for
/// the 100 µs timer at its first, a median of 101 µs until the owner saw
/// it against 32 µs for one RMA write. Now a page whose window was
/// followed at once by a store that shows growth learns again, and every
/// page once in `RELEARN_NS`.
const PROBE_NS: u64 = 20_000;
/// Age past which a page's count is learned again even though no store
/// showed growth: what `Ended::shows_more` misses (a program preempted
/// between the window and the store that would show it, on a busy host).
const RELEARN_NS: u64 = 1_000_000_000;
/// Least time between two times a page is made to learn its count again:
/// a program that streams messages into one page stores the next message
/// within `PROBE_NS` of the last, into the same pages, which looks like a
/// message that grew; its page learns the stream's windows once in this
/// long, not at every window.
const REPROBE_NS: u64 = 10_000_000;

/// Largest lead (see the module's comment): a word or a vector register.
const LEAD_MAX: usize = 64;

/// The one store a window took into the page before its own.
struct Lead {
    /// Segment offset of its first byte, and its bytes.
    offset: u64,
    len: usize,
    bytes: [u8; LEAD_MAX],
}

/// Runs of a write: each a range of its buffer and the segment offset it
/// goes to.
type Runs = Vec<(std::ops::Range<usize>, u64)>;

/// The stores a window took into one page and the page after it, not
/// posted yet (a payload copied across a page boundary, then the header and
/// flag above it, is one message).
struct PageStores {
    /// Segment offset of the first page's first byte.
    base: u64,
    /// The two pages' stored bytes; `mask`: which (one bit a byte).
    bytes: Vec<u8>,
    mask: Vec<u64>,
    /// The last store's bytes, and the span of all (page offsets; empty
    /// before the first store).
    last: std::ops::Range<usize>,
    span: std::ops::Range<usize>,
}

impl PageStores {
    /// An empty page of `base`, in the buffers `bytes` and `mask` (cleared).
    fn new(base: u64, bytes: Vec<u8>, mask: Vec<u64>) -> Self {
        PageStores { base, bytes, mask, last: 0..0, span: 0..0 }
    }

    /// Take the store of `data` at page offset `off`.
    fn store(&mut self, off: usize, data: &[u8]) {
        self.bytes[off..off + data.len()].copy_from_slice(data);
        self.span = if self.span.is_empty() {
            off..off + data.len()
        } else {
            self.span.start.min(off)..self.span.end.max(off + data.len())
        };
        for (i, bits) in mask_words(off, data.len()) {
            self.mask[i] |= bits;
        }
        self.last = off..off + data.len();
    }

    /// Does it hold any of the bytes `off..off + len` already?
    fn holds_any(&self, off: usize, len: usize) -> bool {
        off < self.span.end && off + len > self.span.start && any_set(&self.mask, off, len)
    }

    /// The last store as a lead: where it goes and its bytes (at most
    /// `LEAD_MAX`).
    fn last_as_lead(&self) -> Option<Lead> {
        let len = self.last.len();
        (len <= LEAD_MAX).then(|| {
            let mut lead = Lead { offset: self.base + self.last.start as u64, len, bytes: [0; LEAD_MAX] };
            lead.bytes[..len].copy_from_slice(&self.bytes[self.last.clone()]);
            lead
        })
    }

    /// Forget every store (clearing only the mask words they touched), for
    /// the page at `base`.
    fn reset(&mut self, base: u64) {
        for m in &mut self.mask[self.span.start / 64..self.span.end.div_ceil(64)] {
            *m = 0;
        }
        self.base = base;
        self.last = 0..0;
        self.span = 0..0;
    }

    /// What a window of these stores (after `lead`, if any) posts: its
    /// bytes in one buffer, and the runs (range of the buffer, segment
    /// offset) in the order they are placed: the lead, then the page's
    /// stored bytes outside its last store in address order, then its last
    /// store (see [`groups`] for how they are split into operations).
    fn runs(&self, lead: Option<&Lead>) -> (Vec<u8>, Runs) {
        let stored = |b: usize| self.mask[b / 64] & (1 << (b % 64)) != 0 && !self.last.contains(&b);
        let mut data = Vec::with_capacity(self.span.len() + lead.map_or(0, |l| l.len));
        let mut runs = Vec::new();
        if let Some(l) = lead {
            data.extend_from_slice(&l.bytes[..l.len]);
            runs.push((0..l.len, l.offset));
        }
        let mut b = self.span.start;
        while b < self.span.end {
            if !stored(b) {
                b += 1;
                continue;
            }
            let start = b;
            while b < self.span.end && stored(b) {
                b += 1;
            }
            let at = data.len();
            data.extend_from_slice(&self.bytes[start..b]);
            runs.push((at..data.len(), self.base + start as u64));
        }
        let at = data.len();
        data.extend_from_slice(&self.bytes[self.last.clone()]);
        runs.push((at..data.len(), self.base + self.last.start as u64));
        (data, runs)
    }
}

/// A window's `runs` (the first of them its lead when `led`) as operations
/// each placed after the one before: one operation where the provider
/// places a write's runs in order (`in_order`: one write on the link), else
/// the lead, the rest and the last store each an operation of its own.
fn groups(runs: &[(std::ops::Range<usize>, u64)], led: bool, in_order: bool) -> Vec<&[(std::ops::Range<usize>, u64)]> {
    if in_order {
        return vec![runs];
    }
    let (lead, runs) = runs.split_at(usize::from(led));
    let (rest, last) = runs.split_at(runs.len() - 1);
    [lead, rest, last].into_iter().filter(|g| !g.is_empty()).collect()
}

/// An open window: stores into one page of one map and the page after it,
/// not posted yet, and maybe the one store before them in another page of
/// the map (`lead`).
struct Window {
    target: Arc<RemoteTarget>,
    /// The map's shadow (its address) and the first of the two pages the
    /// window takes stores into now.
    key: (usize, usize),
    page_size: usize,
    /// The map and page the window opened on: its count of stores is
    /// learned and predicted under this key.
    first: (usize, usize),
    lead: Option<Lead>,
    page: PageStores,
    stores: u32,
    last_ns: u64,
    /// Quiet after which the timer posts it: `IDLE_NS`, or `PROBE_NS` once
    /// it is past its predicted end (learning the count again).
    idle_ns: u64,
    /// The timer runs for it (a window posted at the store that opened it
    /// never needs the `timerfd_settime` that disarms it).
    armed: bool,
}

/// What an open window does with a store (`Window::admits`).
enum Admit {
    /// Takes it into its pages, at this offset from their start.
    Here(usize),
    /// Takes it into another page, its one store so far becoming the lead.
    Lead,
    /// Must be posted first.
    No,
}

impl Window {
    /// Can a store of `len` bytes at `off` of page `key` (map, page) going
    /// to `target` join the window? A store over bytes it holds is the next
    /// message (a message stores each of its words once; a receiver's
    /// acknowledgement word stored again is the next acknowledgement, which
    /// must not wait for the first's window). A store into other pages
    /// joins only a window of one store (which leads) into pages of the
    /// same map, where one write places its runs in order.
    fn admits(&self, target: &Arc<RemoteTarget>, key: (usize, usize), off: usize, len: usize) -> Admit {
        if !Arc::ptr_eq(&self.target, target) || self.key.0 != key.0 {
            return Admit::No;
        }
        let rel = match key.1.checked_sub(self.key.1) {
            Some(0) => Some(off),
            Some(1) => Some(self.page_size + off),
            _ => None,
        };
        if let Some(rel) = rel.filter(|r| r + len <= 2 * self.page_size) {
            if self.page.holds_any(rel, len) {
                Admit::No
            } else {
                Admit::Here(rel)
            }
        } else if self.lead.is_none()
            && self.stores == 1
            && self.page.last.len() <= LEAD_MAX
            && self.target.fabric().info().places_runs_in_order()
        {
            Admit::Lead
        } else {
            Admit::No
        }
    }

    /// Make the window's one store its lead and take stores into page
    /// `key` (at segment offset `base`) from now on.
    fn lead_on(&mut self, key: (usize, usize), base: u64) {
        self.lead = self.page.last_as_lead();
        self.page.reset(base);
        self.key = key;
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
    /// The last window posted at its predicted end, if nothing was posted
    /// after it: a store that follows within `PROBE_NS` may show that its
    /// page's windows now go further (`Ended::shows_more`).
    ended: Option<Ended>,
    /// A closed window's page buffer and mask (mask cleared), for the next.
    spare: Option<(Vec<u8>, Vec<u64>)>,
    /// How many stores each page's windows take.
    learned: [Learned; LEARNED],
    /// The map and count of the last window whose count was learned: what
    /// a page of that map with no count of its own is guessed to take.
    recent: (usize, u32),
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
    /// Its next window goes past `stores` and learns the count again: a
    /// store showed that its messages grew.
    stale: bool,
    /// When it was last made `stale` (see `REPROBE_NS`).
    probed_ns: u64,
    /// When `stores` was learned (see `RELEARN_NS`).
    at_ns: u64,
    /// `stores` is the map's recent count, not one this page's windows
    /// showed: the first window that closes otherwise than at it teaches
    /// its own count at once.
    guessed: bool,
    /// Windows in a row that ended at `stores` (see `SURE_IDLE_NS`).
    streak: u32,
}

impl Learned {
    /// Its windows have ended at their predicted count long enough that
    /// the next one waits for `SURE_IDLE_NS` of quiet, not `IDLE_NS`. Only
    /// a count the page's own windows taught counts (not one `guessed`
    /// from its map, until the page learns it again).
    fn sure(&self, key: (usize, usize), now: u64) -> bool {
        (self.map, self.page) == key
            && !self.guessed
            && !self.stale
            && self.streak >= SURE_STREAK
            && now.saturating_sub(self.at_ns) < RELEARN_NS
    }
}

const UNLEARNED: Learned =
    Learned { map: 0, page: 0, stores: 0, fewer: 0, stale: false, probed_ns: 0, at_ns: 0, guessed: false, streak: 0 };

static COMBINER: Mutex<Combiner> =
    Mutex::new(Combiner { open: None, ended: None, spare: None, learned: [UNLEARNED; LEARNED], recent: (0, 0) });

/// A window posted at its predicted end (`Combiner::ended`).
struct Ended {
    /// The page its count is learned under, and the map and first page of
    /// the two it took stores into.
    first: (usize, usize),
    key: (usize, usize),
    /// Segment offsets of its first page and of the span of its stores.
    base: u64,
    span: std::ops::Range<u64>,
    page_size: usize,
    /// It held one store of at most `LEAD_MAX` bytes and no lead: it could
    /// lead a window in another page of its map.
    lone: bool,
    /// When its posting ended.
    at_ns: u64,
}

impl Ended {
    /// Does a store of `len` bytes at segment offset `at` into map `map`,
    /// at `now`, show that the windows of this one's first page go further
    /// than it did? `Some(true)`: the message grew (the store falls in its
    /// pages, outside the span it stored: a flag the count left out),
    /// `Some(false)`: its one store would have led this one (another page
    /// of the map), `None`: neither (too late, another map, or over what it
    /// stored: the next message).
    fn shows_more(&self, map: usize, at: u64, len: usize, now: u64) -> Option<bool> {
        if map != self.key.0 || now.saturating_sub(self.at_ns) >= PROBE_NS {
            return None;
        }
        let end = at + len as u64;
        if end > self.span.start && at < self.span.end {
            return None;
        }
        let inside = at >= self.base && end <= self.base + 2 * self.page_size as u64;
        if inside {
            Some(true)
        } else if self.lone {
            Some(false)
        } else {
            None
        }
    }
}

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

/// Windows posted, by why they closed (see the module's comment): at their
/// predicted end, at a store they did not take, at something else the
/// process did (`close`), by the timer; and how many had a lead, and the
/// stores they took. Logged at the process's exit (`VSCI_LOG=debug`).
static POSTED_AT: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
static LED: AtomicU64 = AtomicU64::new(0);
static STORES: AtomicU64 = AtomicU64::new(0);
/// Times a page was made to learn its count again (`Ended::shows_more`),
/// and pages whose first count was their map's recent one.
static PROBES: AtomicU64 = AtomicU64::new(0);
static GUESSED: AtomicU64 = AtomicU64::new(0);
const AT_END: usize = 0;
const AT_STORE: usize = 1;
const AT_CLOSE: usize = 2;
const AT_TIMER: usize = 3;

/// One line on what the windows did, for the exit log.
pub(crate) fn stats_line() -> String {
    let n: Vec<u64> = POSTED_AT.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    format!(
        "combined windows: {} at their predicted end, {} at a store they did not take, {} at another \
         operation, {} by the timer; {} with a lead; {} stores; {} counts learned again, {} guessed",
        n[AT_END],
        n[AT_STORE],
        n[AT_CLOSE],
        n[AT_TIMER],
        LED.load(Ordering::Relaxed),
        STORES.load(Ordering::Relaxed),
        PROBES.load(Ordering::Relaxed),
        GUESSED.load(Ordering::Relaxed)
    )
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
/// going to `target`; it may go on into the next page (a copy), no
/// further. Called from the fault handler, under the map's lock. False if
/// not taken: the caller posts the store on its own.
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
    if !STARTED.load(Ordering::Acquire) || off + data.len() > 2 * page_size {
        return false;
    }
    let Some(mut c) = lock() else { return false };
    let key = (map, page);
    let mut rel = off;
    match c.open.as_ref().map(|w| w.admits(target, key, off, data.len())) {
        None => {}
        Some(Admit::Here(r)) => rel = r,
        Some(Admit::Lead) => {
            let w = c.open.as_mut().expect("a window is open");
            w.lead_on(key, base);
        }
        Some(Admit::No) => close_locked(&mut c, true, AT_STORE),
    }
    let mut tail = false;
    if c.open.is_none() {
        // The window posted at its predicted end just before is followed
        // at once by a store that shows its page's windows go further: the
        // rest of a message that grew (posted now, on its own: its page's
        // count would make it wait), or a store its one store would have
        // led (that page's windows took one store while the program only
        // acknowledged, say, and now it acknowledges and replies). Its page
        // learns its count again at its next window.
        if let Some(e) = c.ended.take() {
            if let Some(grew) = e.shows_more(map, base + off as u64, data.len(), now) {
                let l = &mut c.learned[slot(e.first)];
                if (l.map, l.page) == e.first && now.saturating_sub(l.probed_ns) >= REPROBE_NS {
                    l.stale = true;
                    l.probed_ns = now;
                    tail = grew;
                    PROBES.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // A page with no count of its own takes its map's recent one: a
        // ring's slots, or words stored one at a time into page after page
        // of a map, take as many stores in every page. Without it, the
        // first window of each page waited for the timer (`IDLE_NS`): an
        // isolated store into page after page of a map waited 100 µs at
        // the first visit of each. A guess too small shows like a message
        // that grew (`Ended::shows_more`); one too large waits for the
        // timer, as no guess did.
        let (rmap, rstores) = c.recent;
        let l = &mut c.learned[slot(key)];
        if (l.map, l.page) != key && rmap == map && rstores > 0 {
            *l = Learned { map, page, stores: rstores, at_ns: now, guessed: true, ..UNLEARNED };
            GUESSED.fetch_add(1, Ordering::Relaxed);
        }
        let idle_ns = if c.learned[slot(key)].sure(key, now) { SURE_IDLE_NS } else { IDLE_NS };
        let (bytes, mask) = match c.spare.take() {
            Some((b, m)) if b.len() == 2 * page_size => (b, m),
            _ => (vec![0; 2 * page_size], vec![0; (2 * page_size).div_ceil(64)]),
        };
        c.open = Some(Window {
            target: target.clone(),
            key,
            page_size,
            first: key,
            lead: None,
            page: PageStores::new(base, bytes, mask),
            stores: 0,
            last_ns: now,
            idle_ns,
            armed: false,
        });
    }
    let w = c.open.as_mut().expect("a window is open");
    w.page.store(rel, data);
    w.stores += 1;
    w.last_ns = now;
    let stores = w.stores;
    let first = w.first;
    if tail {
        // Learns nothing: it is the end of the last window's message.
        close_locked(&mut c, false, AT_END);
        c.ended = None;
        return true;
    }
    let l = c.learned[slot(first)];
    let (predicted, stale) = if (l.map, l.page) == first {
        (l.stores, l.stale || now.saturating_sub(l.at_ns) >= RELEARN_NS)
    } else {
        (0, false)
    };
    let at_end = predicted > 0 && stores >= predicted;
    if stores >= MAX_STORES || (at_end && !stale) {
        // The page's messages are this long: this store ends one. The
        // prediction stays as it is.
        if at_end {
            let l = &mut c.learned[slot(first)];
            l.streak = l.streak.saturating_add(1);
        }
        close_locked(&mut c, false, AT_END);
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
        close_locked(&mut c, true, AT_CLOSE);
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
            close_locked(&mut c, true, AT_TIMER);
            None
        }
        Some(w) => Some(w.last_ns + w.idle_ns),
        None => None,
    }
}

/// Post the open window: its lead, every stored byte of its page outside
/// the last store, in runs, then the last store's bytes after them.
/// `learn`: remember how many stores it took, to close the next window
/// that opens on its first page at as many; `why`: what closed it (`AT_*`).
fn close_locked(c: &mut Combiner, learn: bool, why: usize) {
    let Some(mut w) = c.open.take() else { return };
    POSTED_AT[why].fetch_add(1, Ordering::Relaxed);
    LED.fetch_add(u64::from(w.lead.is_some()), Ordering::Relaxed);
    STORES.fetch_add(u64::from(w.stores), Ordering::Relaxed);
    if w.armed {
        disarm();
    }
    if learn {
        let n = w.stores;
        let l = &mut c.learned[slot(w.first)];
        let known = (l.map, l.page) == w.first;
        if !known || l.guessed || n >= l.stores || (l.fewer == n && why != AT_CLOSE) {
            let probed_ns = if known { l.probed_ns } else { 0 };
            // A count confirmed (a page learning again that its messages
            // did not grow) keeps its streak.
            let streak = if known && !l.guessed && n == l.stores { l.streak } else { 0 };
            *l = Learned {
                map: w.first.0,
                page: w.first.1,
                stores: n,
                fewer: 0,
                stale: false,
                probed_ns,
                at_ns: w.last_ns,
                guessed: false,
                streak,
            };
            c.recent = (w.first.0, n);
        } else if why != AT_CLOSE {
            l.fewer = n;
            // The timer had to end it: its page waits `IDLE_NS` again.
            l.streak = 0;
        }
        // A window cut short by another operation (a flush, a copy across
        // pages posted on its own, a fetch) shows only that the operation
        // came, not that the page's messages got shorter: the next window
        // cut short closes as soon, and one that is not keeps its
        // prediction. Learned shorter, a ring whose acknowledgement leads
        // its reply lost the lead whenever a reply's payload crossed a
        // page (1 slot in 16 for 64-byte messages): the next windows
        // posted the acknowledgement alone until learned again.
    }
    // The last store's bytes are placed after the rest: as the last run of
    // the same operation where the provider places runs in order (one
    // write on the link, not two), else as an operation of its own.
    let (data, runs) = w.page.runs(w.lead.as_ref());
    let groups = groups(&runs, w.lead.is_some(), w.target.fabric().info().places_runs_in_order());
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
            let (data, runs) = w.page.runs(w.lead.as_ref());
            if write_again(&w.target, &data, &runs).is_err() {
                EMULATED_LOST.store(true, Ordering::Release);
            }
        }
    }
    HOLDING.with(|h| h.set(false));
    // Only now, with the write queued where flush points wait for it: a
    // thread that found no window while this one was posting it would go
    // on to post a later store first, or return from a flush before it.
    OPEN_DUE_NS.store(0, Ordering::Release);
    // Timed from the end of the posting: a store that shows more follows
    // it at once, and the posting (a libfabric write call, 8-30 µs here)
    // is not the program's time between its stores.
    c.ended = (why == AT_END).then(|| Ended {
        first: w.first,
        key: w.key,
        base: w.page.base,
        span: w.page.base + w.page.span.start as u64..w.page.base + w.page.span.end as u64,
        page_size: w.page_size,
        lone: w.stores == 1 && w.lead.is_none() && w.page.last.len() <= LEAD_MAX,
        at_ns: trapped::now_ns(),
    });
    w.page.reset(0);
    c.spare = Some((std::mem::take(&mut w.page.bytes), std::mem::take(&mut w.page.mask)));
}

#[cfg(test)]
mod tests {
    use super::{any_set, groups, Ended, Lead, PageStores, PROBE_NS};

    fn page(base: u64) -> PageStores {
        PageStores::new(base, vec![0; 8192], vec![0; 128])
    }

    /// What a window of `p`'s stores after `lead` posts, as (segment
    /// offset, bytes), operation by operation.
    fn placed(p: &PageStores, lead: Option<&Lead>, in_order: bool) -> Vec<Vec<(u64, Vec<u8>)>> {
        let (data, runs) = p.runs(lead);
        let groups = groups(&runs, lead.is_some(), in_order);
        groups.iter().map(|g| g.iter().map(|(r, off)| (*off, data[r.clone()].to_vec())).collect()).collect()
    }

    #[test]
    fn a_message_goes_in_address_order_with_its_last_store_last() {
        let mut p = page(8192);
        p.store(4088, &[9; 8]); // a flag stored first, at the top
        p.store(16, &[1; 4]); // the payload, below it
        p.store(20, &[2; 4]); // its second half, adjacent: one run
        p.store(100, &[3; 2]); // the store made last, between them
        assert_eq!(
            placed(&p, None, true),
            vec![vec![(8192 + 16, vec![1, 1, 1, 1, 2, 2, 2, 2]), (8192 + 4088, vec![9; 8]), (8192 + 100, vec![3; 2])]]
        );
        // Where a write's runs may land in any order, the last store is an
        // operation of its own.
        assert_eq!(placed(&p, None, false).len(), 2);
        assert_eq!(placed(&p, None, false)[1], vec![(8192 + 100, vec![3; 2])]);
    }

    #[test]
    fn a_lead_goes_first_and_a_reset_page_forgets_every_store() {
        let mut ack = page(0);
        ack.store(0, &7u64.to_le_bytes());
        let lead = ack.last_as_lead().expect("a word leads");
        ack.reset(3 * 4096);
        assert!(!ack.holds_any(0, 4096), "the reset page holds nothing");
        ack.store(4000, &[5; 64]); // a payload
        ack.store(4088, &[6; 8]); // its flag
        assert_eq!(
            placed(&ack, Some(&lead), true),
            vec![vec![(0, 7u64.to_le_bytes().to_vec()), (3 * 4096 + 4000, vec![5; 64]), (3 * 4096 + 4088, vec![6; 8])]]
        );
        assert_eq!(
            placed(&ack, Some(&lead), false),
            vec![
                vec![(0, 7u64.to_le_bytes().to_vec())],
                vec![(3 * 4096 + 4000, vec![5; 64])],
                vec![(3 * 4096 + 4088, vec![6; 8])]
            ]
        );
        // A payload across the page boundary, then its flag in the second
        // page: one run for the payload, the flag last.
        let mut two = page(8192);
        two.store(4000, &[1; 200]);
        two.store(4200, &[2; 8]);
        assert_eq!(placed(&two, None, true), vec![vec![(8192 + 4000, vec![1; 200]), (8192 + 4200, vec![2; 8])]]);
        // A store of more than a vector register does not lead.
        let mut big = page(0);
        big.store(0, &[1; 65]);
        assert!(big.last_as_lead().is_none());
    }

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

    #[test]
    fn what_shows_that_a_page_s_windows_go_further() {
        // A window of map 7 that opened on page 2 (segment offset 8192),
        // stored bytes 8200..8216 of it and was posted at time 1000.
        let e = |lone| Ended {
            first: (7, 2),
            key: (7, 2),
            base: 8192,
            span: 8200..8216,
            page_size: 4096,
            lone,
            at_ns: 1000,
        };
        let soon = 1000 + PROBE_NS / 2;
        // The flag above the message, in its page or the next: it grew.
        assert_eq!(e(false).shows_more(7, 8216, 8, soon), Some(true));
        assert_eq!(e(false).shows_more(7, 8192 + 4096 + 64, 8, soon), Some(true));
        // Over what it stored: the next message, not more of this one.
        assert_eq!(e(false).shows_more(7, 8208, 8, soon), None);
        assert_eq!(e(true).shows_more(7, 8200, 8, soon), None);
        // Too late, or another map: nothing shown.
        assert_eq!(e(false).shows_more(7, 8216, 8, 1000 + PROBE_NS), None);
        assert_eq!(e(true).shows_more(8, 8216, 8, soon), None);
        // Another page of the map: a window of one store could have led it.
        assert_eq!(e(true).shows_more(7, 0, 8, soon), Some(false));
        assert_eq!(e(true).shows_more(7, 4 * 4096, 1024, soon), Some(false));
        assert_eq!(e(false).shows_more(7, 0, 8, soon), None);
    }
}
