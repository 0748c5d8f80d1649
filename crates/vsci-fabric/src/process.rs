//! What the RMA engine needs of the process it runs in: provider settings
//! made before libfabric loads, real-time priority for the threads that
//! serve peers, and signal dispositions its dependencies leave behind.

use super::*;

/// Make this process, an RMA target, place every incoming write with each
/// byte stored once. Call first thing in `main` of a process whose memory
/// peers write (vscid), before any other thread exists and before any
/// libfabric call: the provider reads its parameters from the environment
/// once, when it loads. A setting the user made is left alone.
///
/// Why: libfabric's tcp provider reads small messages into a prefetch
/// buffer and copies each write's data out of it with `memcpy`, and glibc's
/// `memcpy` of 2 to 63 bytes stores the head and the tail of the range with
/// two overlapping stores (an 8-byte write: the same 8 bytes twice). An
/// owner that sees the first store and changes the word at once (a mailbox
/// flag cleared after it was read) has its change undone by the second
/// store, so the flag shows twice. Measured: the remote_bench mailbox lost
/// one clear in about 200,000 rounds, and in 160 with a hardware watchpoint
/// on the flag word (each trap widens the window between the two stores);
/// none in 6 runs of 3,000-8,000 watched rounds with the prefetch off. With
/// it off the kernel copies each write's data from the socket straight
/// into the segment (`copy_to_user`: every byte once).
pub fn prepare_rma_target_process() {
    const PREFETCH: &str = "FI_TCP_PREFETCH_RBUF_SIZE";
    if std::env::var_os(PREFETCH).is_none() {
        std::env::set_var(PREFETCH, "0");
    }
}

/// Give the calling thread real-time priority (SCHED_FIFO 1) where the
/// process may (root, or an RLIMIT_RTPRIO), unless `VSCI_REALTIME=0`.
/// For threads that sleep until there is work and then do a bounded amount
/// of it (a progress thread, a shipper): on a machine whose cores are all
/// busy with programs spinning on shared memory, a thread of normal priority
/// woken by the network waits for the scheduler to preempt a spinner
/// (milliseconds, measured); a real-time one runs at once. Returns whether
/// it took effect.
pub fn boost_current_thread() -> bool {
    if std::env::var("VSCI_REALTIME").is_ok_and(|v| v == "0") {
        return false;
    }
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid
    // sched_param only changes its scheduling.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if r != 0 {
        log::debug!("fabric: thread keeps normal priority ({})", std::io::Error::last_os_error());
    }
    REALTIME.with(|c| c.set(if r == 0 { 2 } else { 0 }));
    r == 0
}

thread_local! {
    /// Whether this thread runs under a real-time policy: 0 not known yet,
    /// 1 no, 2 yes.
    static REALTIME: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Does the calling thread run under a real-time policy (ours, made by
/// [`boost_current_thread`], or one the program gave its own thread)?
/// Such a thread must not wait for another by `sched_yield`, which gives
/// its core only to real-time threads: a normal thread it waits for then
/// runs only when the kernel's real-time throttling stops it (after 0.95 s
/// in every second).
pub(crate) fn current_thread_realtime() -> bool {
    REALTIME.with(|c| {
        if c.get() == 0 {
            // SAFETY: sched_getscheduler(0) only reads the calling thread's policy.
            let policy = unsafe { libc::sched_getscheduler(0) };
            c.set(if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR { 2 } else { 1 });
        }
        c.get() == 2
    })
}

/// Undo the signal handlers Debian's libfabric drags in.
///
/// libfabric links the PSM providers' libraries, and libinfinipath's load
/// constructor installs handlers for SIGINT, SIGTERM, SIGSEGV, SIGBUS and
/// friends (to print a backtrace) in every process that loads libfabric,
/// unless `IPATH_NO_BACKTRACE` was set before the process started. That
/// would change how every SISCI program and the daemon react to Ctrl-C or
/// SIGTERM (they would exit with status 1 instead of dying of the signal, and
/// a handler chained by the program would run theirs too). This runs from
/// our own load constructor, after theirs (a library's dependencies are
/// initialised first), and puts back the default disposition where the
/// current handler lives in one of those libraries; anything else — a
/// handler the program installed — is left alone.
pub fn restore_default_signals() {
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGQUIT,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ] {
        // SAFETY: an all-zero sigaction is a valid value of the C struct.
        let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: sigaction with a NULL new action only reads the current
        // one into `cur`, which is a valid sigaction.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) } != 0 {
            continue;
        }
        let h = cur.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            continue;
        }
        // SAFETY: an all-zero Dl_info (null pointers) is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads its first argument as an address and
        // fills `info`, which is valid.
        if unsafe { libc::dladdr(h as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            continue;
        }
        // SAFETY: dladdr returned a NUL-terminated path owned by the loader.
        let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
        if file.contains("infinipath") || file.contains("libpsm") {
            // SAFETY: restoring the default disposition of a signal.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
}

extern "C" fn on_load() {
    restore_default_signals();
}

// Run at load time, after libfabric's dependencies' constructors.
#[used]
#[link_section = ".init_array"]
pub(crate) static RESTORE_SIGNALS_AT_LOAD: extern "C" fn() = on_load;
