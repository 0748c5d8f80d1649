//! Memory extension: a range of this process's virtual memory backed by
//! memory borrowed from other nodes (seed-002 §1.10, remote memory as an
//! extension of main memory). docs/remote-memory.md, "Memory extension",
//! describes it for users; this comment says how it works.
//!
//! The range is an anonymous mapping registered with userfaultfd for
//! missing and write-protect faults, and a handler thread serves both:
//!
//! * A missing fault on a page never evicted installs zeros; on a page
//!   evicted before, the page is read from a lender (RMA into a buffer of
//!   ours, then `UFFDIO_COPY`). A page installed for a read is installed
//!   write-protected, so the first store to it is a write-protect fault:
//!   that is how the handler learns a page is dirty (then it lifts the
//!   protection; the page stays dirty until it is evicted).
//! * At most `budget` bytes are resident. A fault that would exceed it
//!   first evicts a batch of cold pages, chosen by a clock (second chance):
//!   see [`Clock`]. A dirty victim is write-protected (the program's stores
//!   to it now wait for the handler), copied out, written to its lenders and
//!   only then `MADV_DONTNEED`ed; a clean victim that its lenders already
//!   hold, or that was never written (zeros), is just dropped.
//!
//! * Read-ahead: a missing fault on page `p` that needs a fetch right after
//!   the previous fetch ended at `p - 1` (a sequential stream) also fetches
//!   the pages after it ([`READAHEAD`] at most, fewer when room within the
//!   budget is short; see [`readahead_window`]) in one batched RMA read per
//!   lender, checks each one's checksum and installs them write-protected
//!   (clean) and not referenced, so the clock takes them before pages the
//!   program touched.
//!
//! With two or more lenders every stored page has two copies, on two
//! different lenders ([`places`]); a fetch reads the first and falls back
//! to the second. Each stored page's checksum is kept here, so a copy that
//! comes back wrong (a lender that restarted and reused the address, a
//! fault on the way) is treated like an unreachable one instead of being
//! handed to the program. A page none of whose copies can be had ends the
//! process with a message naming the page and its lenders ([`LOST_EXIT`]):
//! there is no right answer to give the faulting thread, and a SIGBUS in
//! the middle of the program explains nothing.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vsci_client::{Client, Loan, SciError};

/// The page size the extension works in (x86-64 and aarch64 4 KiB kernels).
pub const PAGE: usize = 4096;

/// Exit status of a process whose extension lost a page (no reachable
/// copy): EX_SOFTWARE of sysexits.h.
pub const LOST_EXIT: i32 = 70;

/// How long after a lender failed (or after the last try) a write-back
/// tries to borrow from it again.
pub const REBORROW_AFTER: Duration = Duration::from_secs(2);

/// Most pages one eviction writes back together (one RMA write of several
/// runs per lender instead of one per page).
const MAX_BATCH: usize = 64;

/// Most pages a sequential fetch reads ahead of the faulting page (also at
/// most one eviction batch, so small budgets read ahead less).
pub const READAHEAD: usize = 15;

// The extension's decisions, pure and tested on their own: where a page's
// copies go, its checksum, what evicting it takes, the resident set's clock
// and how far to read ahead.
mod policy;
pub(crate) use policy::{checksum, loan_pages, places, plan, readahead_window, Clock, Plan};

// Per-page flags.
const DIRTY: u8 = 1;
/// Written back at least once: its contents are on the lenders (or lost),
/// not zeros.
const STORED: u8 = 2;
/// The first (`COPY << 0`) or second (`COPY << 1`) copy is valid.
const COPY: u8 = 4;

/// An empty frame of the [`Clock`], a page in none.
const NONE: u32 = u32::MAX;

/// The userfaultfd calls the extension makes, over vsci-sys's layer (the
/// one copy of the UAPI numbers, checked against linux/userfaultfd.h there).
mod uffd {
    use vsci_sys::uffd::*;
    pub use vsci_sys::uffd::{
        UffdMsg as Msg, Userfaultfd as Uffd, UFFD_EVENT_PAGEFAULT as EVENT_PAGEFAULT,
        UFFD_PAGEFAULT_FLAG_WP as FLAG_WP, UFFD_PAGEFAULT_FLAG_WRITE as FLAG_WRITE,
    };

    /// The range ioctls the handler needs.
    const NEEDED: u64 =
        ioctl_bit(UFFDIO_WAKE) | ioctl_bit(UFFDIO_COPY) | ioctl_bit(UFFDIO_ZEROPAGE) | ioctl_bit(UFFDIO_WRITEPROTECT);

    /// A non-blocking userfaultfd handling only user-mode faults (what an
    /// unprivileged process may have with vm.unprivileged_userfaultfd = 0),
    /// with the API handshake done.
    pub fn open() -> std::io::Result<Uffd> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        let u = match Uffd::open(flags | UFFD_USER_MODE_ONLY) {
            // Kernels before 5.11 know no user-mode-only flag; there every
            // userfaultfd handles only user-mode faults of unprivileged
            // processes anyway.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Uffd::open(flags)?,
            r => r?,
        };
        u.api(0)?;
        Ok(u)
    }

    /// Register `[start, start + len)` for missing and write-protect faults.
    ///
    /// # Safety
    /// As [`Uffd::register`]: the caller serves the range's faults.
    pub unsafe fn register(u: &Uffd, start: usize, len: usize) -> std::io::Result<()> {
        // SAFETY: the caller's contract.
        let ioctls = unsafe { u.register(start, len, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP) }?;
        if ioctls & NEEDED != NEEDED {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "userfaultfd without write-protect support for anonymous memory",
            ));
        }
        Ok(())
    }
}

/// Counters of an extension (all since it was made).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Missing faults: pages brought in (zeros or fetched) by a fault of
    /// their own (pages read ahead come in without one).
    pub faults: u64,
    /// First stores to clean resident pages (write-protect faults).
    pub wp_faults: u64,
    /// Pages filled with zeros (never stored before).
    pub zero_fills: u64,
    /// Pages read from a lender.
    pub fetches: u64,
    /// Of those, pages whose first copy failed and the second served.
    pub mirror_fetches: u64,
    /// Of the fetches, pages read ahead of a sequential fault (brought in
    /// without a fault of their own).
    pub readahead_pages: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Evicted pages written to lenders (a mirrored page counts once).
    pub write_backs: u64,
    /// Bytes resident now.
    pub resident_bytes: u64,
    /// Times a lender failed (a transfer failed or returned a wrong page).
    pub lender_failures: u64,
    /// Times a failed lender was borrowed from again.
    pub reborrows: u64,
}

#[derive(Default)]
struct Counters {
    faults: AtomicU64,
    wp_faults: AtomicU64,
    zero_fills: AtomicU64,
    fetches: AtomicU64,
    mirror_fetches: AtomicU64,
    readahead_pages: AtomicU64,
    evictions: AtomicU64,
    write_backs: AtomicU64,
    resident_pages: AtomicU64,
    lender_failures: AtomicU64,
    reborrows: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Why an extension could not be made.
#[derive(Debug)]
pub enum Error {
    /// A lender refused the loan (or is not in the cluster).
    Borrow(u32, SciError),
    /// Bad arguments (no lenders, a budget under 16 pages, sizes not
    /// multiples of the page size, a page size other than 4 KiB).
    Invalid(&'static str),
    /// A system call failed (mmap, userfaultfd, ...).
    System(&'static str, std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Borrow(node, e) => write!(f, "borrowing from node {node}: {} ({e})", e.c_name()),
            Error::Invalid(what) => write!(f, "{what}"),
            Error::System(what, e) => write!(f, "{what}: {e}"),
        }
    }
}

impl std::error::Error for Error {}

struct Lender {
    node: u32,
    loan: Option<Loan>,
    /// When it failed, or when borrowing from it again was last tried.
    last_try: Instant,
    why: String,
}

/// The handler thread's state.
struct Handler {
    base: usize,
    uffd: Arc<uffd::Uffd>,
    client: Client,
    lenders: Vec<Lender>,
    loan_size: u64,
    clock: Clock,
    flags: Vec<u8>,
    sums: Vec<u64>,
    counters: Arc<Counters>,
    batch: usize,
    zeros: Vec<u8>,
    /// The fetch buffer; `None` after a failed read leaked it (the engine
    /// may still write into it).
    fetch_buf: Option<Vec<u8>>,
    bounce: Vec<u8>,
    /// Most pages to read ahead: `READAHEAD`, at most one eviction batch.
    readahead: usize,
    /// The last page the previous fetch brought in (`usize::MAX`: none).
    last_fetch: usize,
    /// Page buffers for batched fetches (none leaked by an abandoned read).
    spare: Vec<Vec<u8>>,
}

/// A range of virtual memory backed by memory borrowed from other nodes;
/// see the module comment and docs/remote-memory.md.
pub struct Extension {
    counters: Arc<Counters>,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    /// The range (declared last: unmapped after `drop` stopped the thread).
    map: vsci_sys::Mapping,
}

impl Extension {
    /// Reserve `size` bytes of address space backed by loans from
    /// `lenders` (node ids), at most `budget` bytes of it resident. With
    /// two or more lenders every evicted page is kept on two of them. Each
    /// lender lends `2 * size / n` bytes (rounded up to whole pages), or
    /// `size` when it is the only one.
    pub fn new(client: &Client, lenders: &[u32], size: u64, budget: u64) -> Result<Extension, Error> {
        // SAFETY: sysconf has no memory effects.
        if unsafe { libc::sysconf(libc::_SC_PAGESIZE) } != PAGE as libc::c_long {
            return Err(Error::Invalid("the memory extension needs 4 KiB pages"));
        }
        if lenders.is_empty() {
            return Err(Error::Invalid("no lenders"));
        }
        let mut seen = lenders.to_vec();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != lenders.len() {
            return Err(Error::Invalid("a lender is named twice"));
        }
        if size == 0
            || !size.is_multiple_of(PAGE as u64)
            || !budget.is_multiple_of(PAGE as u64)
            || size > isize::MAX as u64
        {
            return Err(Error::Invalid("size and budget must be multiples of 4096 bytes, size non-zero"));
        }
        let pages = (size / PAGE as u64) as usize;
        if pages >= NONE as usize {
            return Err(Error::Invalid("size too large (at most 16 TiB)"));
        }
        let frames = ((budget / PAGE as u64) as usize).min(pages);
        if frames < 16 {
            return Err(Error::Invalid("budget must be at least 16 pages (64 KiB)"));
        }
        let loan_size = loan_pages(pages as u64, lenders.len()) * PAGE as u64;
        let mut ls = Vec::with_capacity(lenders.len());
        for &node in lenders {
            // On error the loans so far are dropped, which gives them back.
            let loan = client.borrow(node, loan_size).map_err(|e| Error::Borrow(node, e))?;
            ls.push(Lender { node, loan: Some(loan), last_try: Instant::now(), why: String::new() });
        }

        let uffd = Arc::new(uffd::open().map_err(|e| Error::System("userfaultfd", e))?);
        let len = size as usize;
        // NORESERVE: the range may be larger than the memory this node has,
        // and at most `budget` of it is ever resident. On an error below,
        // dropping `map` unmaps it.
        let map = vsci_sys::MapOptions::private().noreserve().anonymous(len).map_err(|e| Error::System("mmap", e))?;
        let base = map.addr();
        // Huge pages would defeat page-wise eviction; a forked child would
        // get a copy of the range without its handler (zeros where pages
        // are on the lenders), so it gets no copy at all.
        for advice in [libc::MADV_NOHUGEPAGE, libc::MADV_DONTFORK] {
            map.advise(0, len, advice).map_err(|e| Error::System("madvise", e))?;
        }
        // SAFETY: our own fresh mapping, whose faults the handler thread
        // started below serves for as long as the mapping lives (Drop stops
        // the thread before the mapping goes).
        unsafe { uffd::register(&uffd, base, len) }
            .map_err(|e| Error::System("registering the range with userfaultfd", e))?;
        let stop = vsci_sys::eventfd::new().map_err(|e| Error::System("eventfd", e))?;

        let counters = Arc::new(Counters::default());
        let mut h = Handler {
            base,
            uffd,
            client: client.clone(),
            lenders: ls,
            loan_size,
            clock: Clock::new(pages, frames),
            flags: vec![0; pages],
            sums: vec![0; pages],
            counters: counters.clone(),
            batch: (frames / 8).clamp(1, MAX_BATCH),
            zeros: vec![0; PAGE],
            fetch_buf: Some(vec![0; PAGE]),
            bounce: vec![0; MAX_BATCH * PAGE],
            readahead: READAHEAD.min((frames / 8).clamp(1, MAX_BATCH)),
            last_fetch: usize::MAX,
            spare: Vec::new(),
        };
        let stop_fd = stop.as_raw_fd();
        let thread = vsci_sys::signals::spawn(std::thread::Builder::new().name("vsci-memext".into()), move || {
            // A panic here would leave the program's threads waiting
            // on their faults for ever: end the process instead.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.run(stop_fd))).is_err() {
                eprintln!("vsci memext: the page-fault handler failed; ending the process (exit status {LOST_EXIT})");
                // SAFETY: _exit ends the process at once; nothing can
                // serve the range's faults any more.
                unsafe { libc::_exit(LOST_EXIT) };
            }
        })
        .map_err(|e| Error::System("starting the fault handler", e))?;
        Ok(Extension { counters, stop, thread: Some(thread), map })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The range as a slice. Only this process reaches the range, through
    /// this slice or [`as_ptr`](Self::as_ptr); it behaves as ordinary
    /// memory for user-mode loads and stores (see the docs for system
    /// calls given pointers into it).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `base..base + len` is our mapping (`map`), alive until
        // drop, which needs `&mut self`, so it outlives the slice. Its bytes are
        // initialised (zeros or what the program stored). The handler never
        // changes a byte the program could see: it installs a page only
        // where none is mapped (with the contents last written back), reads
        // a page only while it is write-protected (stores wait) and drops it
        // only once its contents are on the lenders.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.map.len()) }
    }

    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            faults: g(&c.faults),
            wp_faults: g(&c.wp_faults),
            zero_fills: g(&c.zero_fills),
            fetches: g(&c.fetches),
            mirror_fetches: g(&c.mirror_fetches),
            readahead_pages: g(&c.readahead_pages),
            evictions: g(&c.evictions),
            write_backs: g(&c.write_backs),
            resident_bytes: g(&c.resident_pages) * PAGE as u64,
            lender_failures: g(&c.lender_failures),
            reborrows: g(&c.reborrows),
        }
    }
}

impl Drop for Extension {
    fn drop(&mut self) {
        let _ = vsci_sys::eventfd::write(self.stop.as_fd(), 1);
        if let Some(t) = self.thread.take() {
            // The handler returns the loans as its state drops.
            let _ = t.join();
        }
        // `map` is unmapped after this, once the handler that used it has
        // ended; `&mut self` means no slice of it is alive.
    }
}

impl Handler {
    fn run(&mut self, stop: i32) {
        let mut msgs = [uffd::Msg::default(); 64];
        loop {
            let mut fds = [
                libc::pollfd { fd: self.uffd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: stop, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: `fds` is an array of two pollfds we own.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if r < 0 {
                continue; // EINTR
            }
            if fds[1].revents != 0 {
                return;
            }
            let n = self.uffd.read(&mut msgs);
            for m in &msgs[..n] {
                if m.event == uffd::EVENT_PAGEFAULT {
                    self.fault(m.address as usize & !(PAGE - 1), m.flags);
                }
            }
        }
    }

    fn pages(&self) -> usize {
        self.flags.len()
    }

    fn addr(&self, page: usize) -> usize {
        self.base + page * PAGE
    }

    fn fault(&mut self, addr: usize, flags: u64) {
        let Some(page) = addr.checked_sub(self.base).map(|o| o / PAGE).filter(|p| *p < self.pages()) else { return };
        let write = flags & uffd::FLAG_WRITE != 0;
        if self.clock.contains(page) {
            if flags & uffd::FLAG_WP != 0 {
                self.flags[page] |= DIRTY;
                self.clock.touch(page);
                add(&self.counters.wp_faults, 1);
                // Lifting the protection wakes the writer.
                self.check(page, "lifting its write protection", self.uffd.write_protect(addr, PAGE, false));
            } else {
                // Another thread's fault on it was served first.
                let _ = self.uffd.wake(addr, PAGE);
            }
            return;
        }
        add(&self.counters.faults, 1);
        if self.flags[page] & STORED != 0 {
            self.fetch_fault(page, write);
            return;
        }
        if self.clock.is_full() {
            self.evict();
        }
        add(&self.counters.zero_fills, 1);
        let r = if write {
            // The store that faulted makes it dirty at once; the zero page
            // spares a copy and the store's fault copies on write.
            self.uffd.zeropage(addr, PAGE)
        } else {
            self.uffd.copy(addr, &self.zeros, true)
        };
        self.install(page, r, write, true);
    }

    /// After `UFFDIO_COPY` (or zero page) of `page` returned `r`: check it
    /// and take the page into the resident set.
    fn install(&mut self, page: usize, r: Result<(), i32>, write: bool, referenced: bool) {
        match r {
            // EEXIST: mapped meanwhile (cannot happen while we alone
            // install pages, but waking is what it would need).
            Err(libc::EEXIST) => {
                let _ = self.uffd.wake(self.addr(page), PAGE);
            }
            r => self.check(page, "installing it", r),
        }
        if write {
            self.flags[page] |= DIRTY;
        }
        if referenced {
            self.clock.insert(page);
        } else {
            self.clock.insert_cold(page);
        }
        self.counters.resident_pages.store(self.clock.len() as u64, Ordering::Relaxed);
    }

    /// The copy of `page` to read: `(copy, lender, slot, fallback)`, the
    /// first valid copy on a lender holding a loan, but the one on `prefer`
    /// if that lender has a valid copy too (one batched read per lender).
    /// `fallback`: the first copy is not to be had.
    fn source(&self, page: usize, prefer: Option<usize>) -> Option<(usize, usize, u64, bool)> {
        let (pl, n) = places(page as u64, self.lenders.len());
        let usable = |k: usize| self.flags[page] & (COPY << k) != 0 && self.lenders[pl[k].0].loan.is_some();
        let mut first = None;
        for k in (0..n).filter(|&k| usable(k)) {
            let s = (k, pl[k].0, pl[k].1, !usable(0));
            if Some(s.1) == prefer {
                return Some(s);
            }
            first = first.or(Some(s));
        }
        first
    }

    /// Pages after `page` that read-ahead may bring in, at most `limit`:
    /// each must be on the lenders (stored, with a copy to be had) and not
    /// resident. (Eviction runs on this thread, to its end, before any
    /// fetch: no page is half evicted here.)
    fn ahead(&self, page: usize, limit: usize) -> usize {
        readahead_window(page, self.pages(), limit, |q| {
            !self.clock.contains(q) && self.flags[q] & STORED != 0 && self.source(q, None).is_some()
        })
    }

    /// A missing fault on `page`, which is on the lenders: fetch it, and
    /// with it the pages after it when the fetches go in sequence.
    fn fetch_fault(&mut self, page: usize, write: bool) {
        let want = if self.last_fetch.checked_add(1) == Some(page) { self.readahead } else { 0 };
        let first = if want > 0 { self.ahead(page, want) } else { 0 };
        if self.clock.room() < 1 + first {
            // Room for the faulting page at least (the clock is not empty
            // when it has no room), and for read-ahead if one batch gives it.
            self.evict();
        }
        let ahead = if want > 0 { self.ahead(page, want.min(self.clock.room().saturating_sub(1))) } else { 0 };
        let prefer = self.source(page, None).map(|s| s.1);
        if ahead == 0 || prefer.is_none() {
            let buf = self.fetch(page);
            add(&self.counters.fetches, 1);
            let r = self.uffd.copy(self.addr(page), &buf, !write);
            self.fetch_buf = Some(buf);
            self.install(page, r, write, true);
            self.last_fetch = page;
            return;
        }
        // Pages page..=page + ahead by the lender each is read from.
        let mut groups: Vec<Vec<(usize, u64, bool)>> = vec![Vec::new(); self.lenders.len()];
        for q in page..=page + ahead {
            if let Some((_, j, slot, fallback)) = self.source(q, prefer) {
                groups[j].push((q, slot, fallback));
            }
        }
        // (page, contents, served by its second copy) of the pages read well.
        let mut got: Vec<(usize, Vec<u8>, bool)> = Vec::with_capacity(ahead + 1);
        for (j, group) in groups.iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            // Groups only hold lenders with loans, and only lender j's
            // failure below takes its loan.
            let Some(loan) = &self.lenders[j].loan else { continue };
            let mut bufs: Vec<(Vec<u8>, u64)> = group
                .iter()
                .map(|&(_, slot, _)| (self.spare.pop().unwrap_or_else(|| vec![0; PAGE]), slot * PAGE as u64))
                .collect();
            let why = match loan.read_many(&mut bufs) {
                Ok(()) => group
                    .iter()
                    .zip(&bufs)
                    .find(|((q, _, _), (b, _))| checksum(*q as u64, b) != self.sums[*q])
                    .map(|((q, _, _), _)| format!("page {q} came back with a wrong checksum")),
                Err(e) => Some(format!("reading pages {}..={}: {}", group[0].0, group[group.len() - 1].0, e.c_name())),
            };
            match why {
                None => got.extend(group.iter().zip(bufs).map(|(&(q, _, fallback), (b, _))| (q, b, fallback))),
                Some(why) => {
                    // A lender that failed is not trusted for any page of
                    // the batch. Buffers an abandoned read leaked are empty.
                    self.spare.extend(bufs.into_iter().map(|(b, _)| b).filter(|b| b.len() == PAGE));
                    self.lender_failed(j, why);
                }
            }
        }
        // The faulting page first (its thread waits): from the batch, or
        // else copy by copy as a single fetch.
        let r = match got.iter().position(|(q, _, _)| *q == page) {
            Some(i) => {
                let (_, buf, fallback) = got.swap_remove(i);
                if fallback {
                    add(&self.counters.mirror_fetches, 1);
                }
                let r = self.uffd.copy(self.addr(page), &buf, !write);
                self.spare.push(buf);
                r
            }
            None => {
                let buf = self.fetch(page);
                let r = self.uffd.copy(self.addr(page), &buf, !write);
                self.fetch_buf = Some(buf);
                r
            }
        };
        self.install(page, r, write, true);
        // The pages read ahead, clean (write-protected: a store to one is a
        // write-protect fault like on any clean page) and not referenced.
        // Room for them was there before the fetch and nothing took it.
        let n = got.len() as u64;
        got.sort_unstable_by_key(|(q, _, _)| *q);
        for (q, buf, fallback) in got {
            if fallback {
                add(&self.counters.mirror_fetches, 1);
            }
            let r = self.uffd.copy(self.addr(q), &buf, true);
            self.spare.push(buf);
            self.install(q, r, false, false);
        }
        add(&self.counters.fetches, 1 + n);
        add(&self.counters.readahead_pages, n);
        self.last_fetch = page + ahead;
    }

    /// A userfaultfd call that failed leaves a thread waiting on a page
    /// that will never come, unless the process is going away (ESRCH,
    /// ENOENT: its memory is being torn down).
    fn check(&self, page: usize, what: &str, r: Result<(), i32>) {
        match r {
            Ok(()) | Err(libc::ESRCH) | Err(libc::ENOENT) => {}
            Err(e) => self.lost(page, &format!("{what} failed: {}", std::io::Error::from_raw_os_error(e))),
        }
    }

    fn describe_lenders(&self, page: usize) -> String {
        let (pl, n) = places(page as u64, self.lenders.len());
        let now = Instant::now();
        pl[..n]
            .iter()
            .enumerate()
            .map(|(k, &(j, _))| {
                let l = &self.lenders[j];
                let copy = if self.flags[page] & (COPY << k) != 0 { "has a copy" } else { "no copy" };
                if l.loan.is_some() {
                    format!("node {} ({copy})", l.node)
                } else {
                    format!(
                        "node {} ({copy}; failed {:.1} s ago: {})",
                        l.node,
                        now.duration_since(l.last_try).as_secs_f64(),
                        l.why
                    )
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// No copy of `page` can be had: end the process rather than hand the
    /// program a wrong page (see the module comment).
    fn lost(&self, page: usize, why: &str) -> ! {
        eprintln!(
            "vsci memext: page {page} (offset {:#x}, address {:#x}) of the memory extension is lost: {why}; its lenders: {}. \
             Ending the process (exit status {LOST_EXIT}) rather than giving the program a wrong page.",
            page * PAGE,
            self.addr(page),
            self.describe_lenders(page)
        );
        // SAFETY: _exit ends the process at once, without destructors or
        // atexit handlers that might touch the range.
        unsafe { libc::_exit(LOST_EXIT) }
    }

    /// Lender `j` failed: its loan goes, and with it every copy it held
    /// (its memory died with its node or can no longer be trusted).
    fn lender_failed(&mut self, j: usize, why: String) {
        let l = &mut self.lenders[j];
        if l.loan.take().is_none() {
            return;
        }
        log::warn!("vsci memext: lender node {} failed ({why}); its pages are served from their other copies", l.node);
        l.last_try = Instant::now();
        l.why = why;
        add(&self.counters.lender_failures, 1);
        let n = self.lenders.len();
        for p in 0..self.pages() {
            let (pl, c) = places(p as u64, n);
            for (k, &(lj, _)) in pl[..c].iter().enumerate() {
                if lj == j {
                    self.flags[p] &= !(COPY << k);
                }
            }
        }
    }

    /// Borrow again from lenders that failed a while ago.
    fn revive(&mut self) {
        for l in self.lenders.iter_mut().filter(|l| l.loan.is_none() && l.last_try.elapsed() >= REBORROW_AFTER) {
            l.last_try = Instant::now();
            match self.client.borrow(l.node, self.loan_size) {
                Ok(loan) => {
                    log::warn!(
                        "vsci memext: lender node {} is back; pages written back from now on are mirrored again",
                        l.node
                    );
                    l.loan = Some(loan);
                    add(&self.counters.reborrows, 1);
                }
                Err(e) => l.why = format!("borrowing again: {}", e.c_name()),
            }
        }
    }

    /// `page`'s contents from one of its copies.
    fn fetch(&mut self, page: usize) -> Vec<u8> {
        let (pl, n) = places(page as u64, self.lenders.len());
        for (k, &(j, slot)) in pl[..n].iter().enumerate() {
            if self.flags[page] & (COPY << k) == 0 {
                continue;
            }
            let Some(loan) = &self.lenders[j].loan else { continue };
            let buf = self.fetch_buf.take().unwrap_or_else(|| vec![0; PAGE]);
            match loan.read_vec(buf, slot * PAGE as u64) {
                Ok(buf) if checksum(page as u64, &buf) == self.sums[page] => {
                    if k > 0 {
                        add(&self.counters.mirror_fetches, 1);
                    }
                    return buf;
                }
                Ok(buf) => {
                    self.fetch_buf = Some(buf);
                    self.lender_failed(j, format!("page {page} came back with a wrong checksum"));
                }
                // read_vec leaked the buffer if the engine may still write it.
                Err(e) => self.lender_failed(j, format!("reading page {page}: {}", e.c_name())),
            }
        }
        self.lost(page, "no lender could return a good copy")
    }

    fn evict(&mut self) {
        let mut victims = Vec::with_capacity(self.batch);
        while victims.len() < self.batch {
            match self.clock.victim() {
                Some(p) => victims.push(p),
                None => break,
            }
        }
        if victims.is_empty() {
            return;
        }
        self.revive();
        let n = self.lenders.len();
        // (page, copies to write) of the victims that go to lenders.
        let mut writes: Vec<(usize, u8)> = Vec::new();
        for &p in &victims {
            let (pl, c) = places(p as u64, n);
            let alive = pl[..c]
                .iter()
                .enumerate()
                .filter(|(_, (j, _))| self.lenders[*j].loan.is_some())
                .fold(0u8, |a, (k, _)| a | 1 << k);
            match plan(self.flags[p], c, alive) {
                Plan::Lost => self.lost(p, "it must be written back but none of its lenders holds a loan"),
                Plan::Write(0) => {}
                Plan::Write(need) => writes.push((p, need)),
            }
        }
        // Stop the program's stores to dirty victims before copying them
        // (its stores now wait for the handler, then fault the page back).
        for &(p, _) in &writes {
            if self.flags[p] & DIRTY != 0 {
                self.check(p, "write-protecting it for write-back", self.uffd.write_protect(self.addr(p), PAGE, true));
            }
        }
        for (i, &(p, _)) in writes.iter().enumerate() {
            // SAFETY: page `p` is resident (it was in the clock) and
            // write-protected, so these bytes are mapped and nobody stores
            // to them while we read; the bounce buffer holds MAX_BATCH pages.
            let src = unsafe { std::slice::from_raw_parts(self.addr(p) as *const u8, PAGE) };
            self.bounce[i * PAGE..(i + 1) * PAGE].copy_from_slice(src);
            self.sums[p] = checksum(p as u64, src);
        }
        // Copies written, per victim in `writes`.
        let mut ok = vec![0u8; writes.len()];
        let mut failed = Vec::new();
        for (j, lender) in self.lenders.iter().enumerate() {
            let Some(loan) = &lender.loan else { continue };
            let mut runs = Vec::new();
            let mut who = Vec::new();
            for (i, &(p, need)) in writes.iter().enumerate() {
                let (pl, c) = places(p as u64, n);
                for (k, &(lj, slot)) in pl[..c].iter().enumerate() {
                    if lj == j && need & (1 << k) != 0 {
                        runs.push((&self.bounce[i * PAGE..(i + 1) * PAGE], slot * PAGE as u64));
                        who.push((i, k));
                    }
                }
            }
            if runs.is_empty() {
                continue;
            }
            match loan.write_many(&runs) {
                Ok(()) => who.iter().for_each(|&(i, k)| ok[i] |= 1 << k),
                Err(e) => failed.push((j, format!("writing back: {}", e.c_name()))),
            }
        }
        if !failed.is_empty() {
            // An abandoned write may still read the bounce buffer later:
            // it is never reused.
            std::mem::forget(std::mem::replace(&mut self.bounce, vec![0; MAX_BATCH * PAGE]));
        }
        for (j, why) in failed {
            self.lender_failed(j, why);
        }
        let mut written = 0;
        for (i, &(p, _)) in writes.iter().enumerate() {
            let f = &mut self.flags[p];
            if *f & DIRTY != 0 {
                // The old copies are stale whether or not the new ones made it.
                *f = (*f & !(DIRTY | COPY | COPY << 1)) | STORED;
            }
            *f |= ok[i] * COPY;
            if ok[i] != 0 {
                written += 1;
            }
            if *f & (COPY | COPY << 1) == 0 {
                self.lost(p, "it must make room within the budget but writing it back failed on every lender of its");
            }
        }
        victims.sort_unstable();
        let mut i = 0;
        while i < victims.len() {
            let mut j = i + 1;
            while j < victims.len() && victims[j] == victims[j - 1] + 1 {
                j += 1;
            }
            // SAFETY: these pages are in our mapping and their contents are
            // on the lenders (or zeros never stored); dropping them makes the
            // next touch a missing fault that fetches them back.
            let r = unsafe {
                libc::madvise(self.addr(victims[i]) as *mut libc::c_void, (j - i) * PAGE, libc::MADV_DONTNEED)
            };
            if r != 0 {
                self.lost(victims[i], &format!("dropping it failed: {}", std::io::Error::last_os_error()));
            }
            i = j;
        }
        add(&self.counters.evictions, victims.len() as u64);
        add(&self.counters.write_backs, written);
        self.counters.resident_pages.store(self.clock.len() as u64, Ordering::Relaxed);
    }
}
