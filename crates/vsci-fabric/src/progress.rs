//! Progress: reading the completion queue (one poller at a time),
//! dispatching completions, and the progress threads that keep an
//! endpoint moving when nobody else polls.

use super::*;

impl Fabric {
    /// Queue depths and totals of this endpoint, cheap to read at any time
    /// (a metrics scrape): nothing here takes the provider's locks.
    pub fn stats(&self) -> Stats {
        Stats {
            ops_in_flight: self.inner.in_flight.load(Ordering::Relaxed),
            received_queued: vsci_sys::signals::lock(&self.inner.rx).len(),
            receives_to_repost: vsci_sys::signals::lock(&self.inner.repost).len(),
            received: self.inner.received.load(Ordering::Relaxed),
            completions: self.inner.completions.load(Ordering::Relaxed),
        }
    }

    /// Operations of this endpoint that failed so far, at their post (other
    /// than a full queue) or with an error completion. A caller holding
    /// writes that completed when *sent* ([`write_post_runs`](Self::write_post_runs))
    /// and proving them placed with a later read (`FI_ORDER_RAW`) compares
    /// this count before the writes and after the read: the read proves
    /// nothing across a connection that broke and was made again in
    /// between, and a broken connection always fails some operation.
    pub fn failures(&self) -> u64 {
        self.inner.failures.load(Ordering::Acquire)
    }

    /// One non-blocking pass over the completion queue: drives the provider
    /// (which also serves incoming RMA on software providers), completes
    /// pending operations and queues received messages. Returns the number
    /// of completions handled.
    pub fn progress(&self) -> usize {
        match self.inner.progress() {
            Ok(n) => n,
            Err(e) => {
                log::warn!("fabric progress: {e}");
                0
            }
        }
    }

    /// Starts a thread that keeps this endpoint progressing in the default
    /// [`ProgressMode`]: incoming RMA is served and messages are received
    /// without any other call. Stops when the returned guard is dropped.
    pub fn spawn_progress_thread(&self) -> ProgressThread {
        self.spawn_progress_thread_with(ProgressMode::default())
    }

    pub fn spawn_progress_thread_with(&self, mode: ProgressMode) -> ProgressThread {
        self.spawn_progress(mode, false)
    }

    /// A blocking progress thread with real-time priority where the process
    /// may have it ([`boost_current_thread`]): for the side that serves
    /// other processes' RMA (a node's engine), which must not queue behind
    /// programs spinning on every core.
    pub fn spawn_progress_thread_realtime(&self) -> ProgressThread {
        self.spawn_progress(ProgressMode::Blocking, true)
    }

    pub(crate) fn spawn_progress(&self, mode: ProgressMode, rt: bool) -> ProgressThread {
        let stop = Arc::new(AtomicBool::new(false));
        let inner = self.inner.clone();
        let stop2 = stop.clone();
        inner.progress_threads.fetch_add(1, Ordering::AcqRel);
        let handle = vsci_sys::signals::spawn(std::thread::Builder::new().name("fabric-progress".into()), move || {
            inner.progress_loop(mode, rt, &stop2)
        })
        .expect("spawn fabric progress thread");
        ProgressThread { stop, handle: Some(handle) }
    }
}

thread_local! {
    /// This thread is the one reading the completion queue.
    static IN_POLL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Inner {
    /// Read the completion queue and handle what is there; 0 at once when
    /// another thread of the process is doing it (it handles every
    /// completion, ours included).
    ///
    /// Why not simply call in from every thread: the provider serialises
    /// its calls with a mutex, so a program thread posting a write or
    /// polling for its completion while the progress thread reads the queue
    /// went to sleep on that mutex, and a sleeping thread wakes tens of
    /// microseconds late here (measured with `perf`: about 0.4 futex waits
    /// per store + `SCIFlush`, most in `fi_writemsg` and `fi_cq_read`). Our
    /// own flag lets a second poller return and a poster spin for the few
    /// microseconds a read takes ([`Inner::wait_for_poller`]).
    pub(crate) fn progress(&self) -> Result<usize> {
        // The flag is a lock of sorts: a program signal handler that stored
        // into a remote map while this thread held it would wait for it
        // for ever (vsci_sys::signals).
        let _quiet = vsci_sys::signals::quiet();
        if self.polling.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return Ok(0);
        }
        /// Clears the flag however the poll ends (a panic in a completion
        /// handler must not leave every later poll returning 0).
        struct Polling<'a>(&'a AtomicBool);
        impl Drop for Polling<'_> {
            fn drop(&mut self) {
                IN_POLL.with(|p| p.set(false));
                self.0.store(false, Ordering::Release);
            }
        }
        IN_POLL.with(|p| p.set(true));
        let _polling = Polling(&self.polling);
        self.progress_polling()
    }

    /// Before a call into the provider: let a thread reading the completion
    /// queue finish (spinning, then yielding or, on a real-time thread,
    /// sleeping) rather than sleep on the provider's mutex. Not when this
    /// thread is the reader (a receive buffer re-posted from inside the
    /// poll).
    ///
    /// A real-time thread (the flusher, the window timer) that yielded here
    /// waited for a reader of normal priority (the program's thread, the
    /// progress thread) that it kept off its core: with both of a two-core
    /// host's cores taken by such waiters, for the 0.95 s the kernel lets
    /// real-time threads run in every second (`vsci bench --paths remote
    /// --sections ij`: isolated stores seen by their owner after 9-19 ms,
    /// the process using 2 ms of CPU a store, in one run of two).
    pub(crate) fn wait_for_poller(&self) {
        if IN_POLL.with(|p| p.get()) {
            return;
        }
        let mut spins = 0u32;
        while self.polling.load(Ordering::Acquire) {
            spins += 1;
            if spins < 2000 {
                std::hint::spin_loop();
            } else if crate::process::current_thread_realtime() {
                std::thread::sleep(std::time::Duration::from_micros(20));
            } else {
                std::thread::yield_now();
            }
        }
    }

    pub(crate) fn progress_polling(&self) -> Result<usize> {
        let _quiet = vsci_sys::signals::quiet();
        self.retry_reposts();
        let mut comps = [ffi::VfComp { context: std::ptr::null_mut(), flags: 0, len: 0, src: 0 }; 32];
        let mut total = 0;
        loop {
            // SAFETY: comps has room for the count we pass.
            let n = unsafe { ffi::vf_cq_read(self.ctx, comps.as_mut_ptr(), comps.len()) };
            if n > 0 {
                for c in &comps[..n as usize] {
                    self.dispatch(c, None);
                }
                total += n as usize;
            } else if n == -ffi::FI_EAVAIL {
                total += self.read_error()?;
            } else if n == -ffi::FI_EAGAIN {
                return Ok(total);
            } else {
                return check("fi_cq_read", n).map(|_| total);
            }
        }
    }

    /// Called only from [`Inner::progress_polling`], inside its `quiet`.
    pub(crate) fn read_error(&self) -> Result<usize> {
        let mut ctx = std::ptr::null_mut();
        let (mut err, mut prov_errno) = (0, 0);
        let mut msg = [0 as c_char; 256];
        // SAFETY: all out-pointers are valid; msg has the length we pass.
        let n =
            unsafe { ffi::vf_cq_readerr(self.ctx, &mut ctx, &mut err, &mut prov_errno, msg.as_mut_ptr(), msg.len()) };
        if n <= 0 {
            return if n == -ffi::FI_EAGAIN { Ok(0) } else { check("fi_cq_readerr", n).map(|_| 0) };
        }
        // SAFETY: the shim NUL-terminates msg (snprintf).
        let msg = unsafe { CStr::from_ptr(msg.as_ptr()) }.to_string_lossy().into_owned();
        let comp = ffi::VfComp { context: ctx, flags: 0, len: 0, src: ffi::FI_ADDR_NOTAVAIL };
        self.dispatch(&comp, Some(Error::Completion { code: err, prov_errno, msg }));
        Ok(1)
    }

    pub(crate) fn dispatch(&self, c: &ffi::VfComp, err: Option<Error>) {
        self.completions.fetch_add(1, Ordering::Relaxed);
        if err.is_some() {
            self.failures.fetch_add(1, Ordering::Release);
        }
        let ctx = c.context as usize;
        if ctx & 1 == 1 {
            let index = ctx >> 1;
            match err {
                None => {
                    let len = (c.len as usize).min(MAX_MSG);
                    // SAFETY: the provider finished writing this buffer (its
                    // completion is what we are handling) and will not touch
                    // it again until we re-post it below.
                    let data = unsafe { std::slice::from_raw_parts(self.pool.buf.add(index * MAX_MSG), len) }.to_vec();
                    let from = (self.info.source && c.src != ffi::FI_ADDR_NOTAVAIL).then_some(PeerId(c.src));
                    vsci_sys::signals::lock(&self.rx).push_back(Message { data, from });
                    self.received.fetch_add(1, Ordering::Relaxed);
                    self.rx_cv.notify_all();
                }
                Some(e) => log::warn!("fabric receive failed: {e}"),
            }
            if let Err(e) = self.post_recv(index) {
                log::error!("fabric: re-posting receive buffer {index}: {e}");
            }
        } else if ctx != 0 {
            // SAFETY: even contexts are only ever produced by Arc::into_raw in
            // post(), and each completion is reported exactly once, so this
            // reclaims that reference exactly once.
            let slot = unsafe { Arc::from_raw(c.context as *const OpSlot) };
            if let Some(e) = err {
                slot.fail(e);
            }
            slot.pending.fetch_sub(1, Ordering::AcqRel);
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
        } else if let Some(e) = err {
            log::warn!("fabric: error completion without context: {e}");
        }
    }

    pub(crate) fn progress_loop(&self, mode: ProgressMode, rt: bool, stop: &AtomicBool) {
        let boosted = rt && boost_current_thread();
        // SAFETY: ctx is open for as long as self exists.
        let fd = unsafe { ffi::vf_cq_wait_fd(self.ctx) };
        let spin = match mode {
            ProgressMode::Blocking => Duration::ZERO,
            ProgressMode::Adaptive(d) => d,
            ProgressMode::Polling => Duration::MAX,
            ProgressMode::Initiator => Duration::ZERO,
        };
        let mut last_activity = Instant::now();
        let mut idle = 0u32;
        if mode == ProgressMode::Initiator {
            self.initiator_loop(fd, stop);
            self.progress_threads.fetch_sub(1, Ordering::AcqRel);
            self.rx_cv.notify_all();
            return;
        }
        while !stop.load(Ordering::Acquire) {
            if self.progress().unwrap_or(0) > 0 {
                last_activity = Instant::now();
            }
            if last_activity.elapsed() < spin {
                // Incoming RMA produces no completion; the wait fd turning
                // readable is how we learn of it and stay in the spin window.
                idle = idle.wrapping_add(1);
                if mode != ProgressMode::Polling {
                    if fd >= 0 && idle & 15 == 0 && poll_readable(fd, 0) {
                        last_activity = Instant::now();
                    }
                    // Give way to the application's own spinning threads on
                    // small machines; on an idle core this returns at once.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            if fd >= 0 {
                // fi_trywait: blocking is only safe once the provider says
                // nothing is buffered that the fd would not signal.
                // SAFETY: ctx is open.
                if unsafe { ffi::vf_trywait(self.ctx) } == 0 {
                    if poll_readable(fd, 100) {
                        last_activity = Instant::now();
                    }
                } else if boosted {
                    // Not safe to block yet, and a real-time thread looping
                    // here would keep normal threads off this core: step
                    // aside briefly.
                    std::thread::sleep(Duration::from_micros(5));
                }
            } else if self.info.cq_wait {
                self.sread_once(100);
            } else {
                idle = idle.saturating_add(1);
                std::thread::sleep(Duration::from_micros(u64::from(idle.min(1000))));
                continue;
            }
            idle = 0;
        }
        self.progress_threads.fetch_sub(1, Ordering::AcqRel);
        self.rx_cv.notify_all();
    }

    pub(crate) fn initiator_loop(&self, fd: i32, stop: &AtomicBool) {
        let mut last_busy = Instant::now();
        while !stop.load(Ordering::Acquire) {
            let handled = self.progress().unwrap_or(0);
            let in_flight = self.in_flight.load(Ordering::Relaxed) > 0;
            if handled > 0 || in_flight {
                last_busy = Instant::now();
            }
            if in_flight {
                std::thread::sleep(INITIATOR_POLL);
            } else if last_busy.elapsed() < INITIATOR_LINGER {
                std::thread::sleep(Duration::from_millis(1));
            } else if fd >= 0 {
                // SAFETY: ctx is open for as long as self exists.
                if unsafe { ffi::vf_trywait(self.ctx) } == 0 && poll_readable(fd, 100) {
                    last_busy = Instant::now();
                }
            } else if self.info.cq_wait {
                self.sread_once(100);
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Blocks in fi_cq_sread (which also drives the provider while it
    /// waits), for CQs whose wait object is not an fd.
    pub(crate) fn sread_once(&self, timeout_ms: i32) {
        let _quiet = vsci_sys::signals::quiet();
        let mut comps = [ffi::VfComp { context: std::ptr::null_mut(), flags: 0, len: 0, src: 0 }; 32];
        // SAFETY: comps has room for the count we pass.
        let n = unsafe { ffi::vf_cq_sread(self.ctx, comps.as_mut_ptr(), comps.len(), timeout_ms) };
        if n > 0 {
            for c in &comps[..n as usize] {
                self.dispatch(c, None);
            }
        } else if n == -ffi::FI_EAVAIL {
            let _ = self.progress();
        } else if n != -ffi::FI_EAGAIN {
            log::warn!("fi_cq_sread: {}", strerror((-n) as i32));
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

pub(crate) fn poll_readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
}

/// How a [`ProgressThread`] waits for work.
///
/// Blocking uses the CQ's wait fd (for rxm an epoll set over its sockets, so
/// incoming RMA wakes it although it produces no completion), falling back
/// to fi_cq_sread, then to polling with sleeps of up to 1 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    #[default]
    /// Sleep until the provider signals activity. Measured on tcp;ofi_rxm:
    /// 0.05-0.09 % of a core when idle (a wake-up every 100 ms to check for
    /// stop); each wake-up adds about 20-35 µs to a delivery.
    Blocking,
    /// Poll (yielding the CPU) for this long after each activity, then
    /// block: idle costs what Blocking costs. On the 2-core test machine it
    /// did not beat Blocking, since the application's own spinning already
    /// occupies the cores; it is for hosts with spare cores.
    Adaptive(Duration),
    /// Poll without pause: lowest latency, one full core.
    Polling,
    /// For a process that only initiates operations and serves nobody's RMA
    /// (a vsci client: its node's engine owns the memory): while operations
    /// are in flight, poll every [`INITIATOR_POLL`] from a timed sleep; for
    /// [`INITIATOR_LINGER`] after the last one, every millisecond; then
    /// block like `Blocking`. It never waits on the provider's fd while
    /// busy, because that fd turns readable at every acknowledgement of a
    /// delivered write: blocking on it woke this thread once per store a
    /// program made (a context switch on a core the program was spinning
    /// on, ~12 µs of CPU each here). Threads that wait for their own
    /// operation poll for themselves, so this only bounds how late
    /// completions nobody waits for are reaped.
    Initiator,
}

/// How often an [`ProgressMode::Initiator`] thread polls while operations
/// are in flight.
pub const INITIATOR_POLL: Duration = Duration::from_micros(200);
/// How long an [`ProgressMode::Initiator`] thread keeps polling (every
/// millisecond) after the last operation before it blocks.
pub const INITIATOR_LINGER: Duration = Duration::from_millis(50);

/// Keeps a fabric progressing; stops and joins the thread on drop.
pub struct ProgressThread {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) handle: Option<JoinHandle<()>>,
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
