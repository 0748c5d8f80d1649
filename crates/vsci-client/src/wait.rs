//! How interrupt waits wait: poll, block, or spin then block.
//!
//! A blocking wake-up through an eventfd costs tens of microseconds on the
//! machines we measured (48 µs one way), while a polled shared-memory flag
//! is seen in about 0.1 µs. Adaptive waiting spins for about the price of
//! one blocking wake-up before it sleeps: it never costs more than twice the
//! better of the two fixed strategies.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags};
use vsci_proto::WaitMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    pub mode: WaitMode,
    pub spin: Duration,
}

impl WaitPolicy {
    /// The node's default, overridden by `VSCI_WAIT` and `VSCI_SPIN_US`.
    pub fn from_env(node_mode: WaitMode, node_spin_us: u32) -> WaitPolicy {
        let mode = std::env::var("VSCI_WAIT").ok().and_then(|v| v.parse().ok()).unwrap_or(node_mode);
        let spin_us = std::env::var("VSCI_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(node_spin_us);
        WaitPolicy { mode, spin: Duration::from_micros(spin_us.into()) }
    }
}

/// Absolute deadline for a SISCI millisecond timeout (`None` = forever).
pub fn deadline(timeout_ms: u32) -> Option<Instant> {
    (timeout_ms != u32::MAX).then(|| Instant::now() + Duration::from_millis(timeout_ms.into()))
}

/// Outcome of [`wait_until`].
pub enum Waited {
    Ready,
    TimedOut,
}

/// Wait until `ready()` is true or the deadline passes, following `policy`.
///
/// `sleepers` is the shared counter triggerers read to decide whether an
/// eventfd write is needed; `eventfd` is what they write. The order —
/// announce, re-check, then sleep — closes the window in which a trigger
/// could land between our last check and the sleep.
pub fn wait_until(
    policy: WaitPolicy,
    deadline: Option<Instant>,
    sleepers: &std::sync::atomic::AtomicU32,
    eventfd: BorrowedFd<'_>,
    ready: impl FnMut() -> bool,
) -> Waited {
    wait_inner(policy, deadline, sleepers, eventfd, None, true, ready)
}

/// [`wait_until`] that also wakes when `gone` becomes readable (the client's
/// connection to the node ended; `ready` must then say so), and looks again
/// after [`RECHECK`] of sleep, then after twice as long each time up to
/// [`RECHECK_MAX`]: what an interrupt wait does.
pub fn wait_until_or_gone(
    policy: WaitPolicy,
    deadline: Option<Instant>,
    sleepers: &std::sync::atomic::AtomicU32,
    eventfd: BorrowedFd<'_>,
    gone: BorrowedFd<'_>,
    ready: impl FnMut() -> bool,
) -> Waited {
    wait_inner(policy, deadline, sleepers, eventfd, Some(gone), true, ready)
}

/// How long an interrupt wait first sleeps before it looks at its condition
/// again (each later look comes after twice the sleep before, up to
/// [`RECHECK_MAX`]). An
/// interrupt's wake-up crosses more than one party (the triggerer's
/// eventfd write, for a guest QEMU's MSI-X and the guest kernel, for a
/// host process woken by a guest its doorbell through QEMU), and a wake-up
/// lost on the way left the waiter asleep with the trigger counted: a
/// guest's interrupt ping-pong with a host process once took 1.0005 s a
/// round trip for 200 rounds, where the same run takes 4 µs (`guests`
/// `guest_and_host_process`, about one run in 40). A wait that finds its
/// condition true after a sleep that nothing woke says so once per process
/// on its standard error (an error line, logged by default; the process id
/// in it says whose wake-up was lost), so a lost wake-up is seen, not only
/// survived. A trigger whose eventfd write comes more than 50 ms after its
/// count (a triggerer preempted in between) reads the same. The sleeps
/// grow so that a wait of a ping-pong (a trigger comes soon, or its
/// wake-up was lost) costs at most 50 ms more, and a long wait costs a
/// wake-up a second: a waiter woken every 50 ms was found runnable in 9
/// of 20 samples 50 ms apart under load (`t_interrupts`
/// `wait_state_block`, which wants a blocked waiter asleep).
pub const RECHECK: Duration = Duration::from_millis(50);
/// The longest sleep of an interrupt wait between two looks.
pub const RECHECK_MAX: Duration = Duration::from_secs(1);

/// Times an interrupt wait found its condition true after a sleep that no
/// wake-up ended (see [`RECHECK`]).
static LOST_WAKES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// [`wait_until`] for a condition that, once true, stays true for every
/// waiter (a DMA queue leaving POSTED): the eventfd is not drained after a
/// wake-up, so one kick wakes every sleeper — draining it would let the
/// first waiter to wake swallow the others' wake-up. Whoever makes the
/// condition false again drains it ([`drain`]) before doing so.
pub fn wait_until_sticky(
    policy: WaitPolicy,
    deadline: Option<Instant>,
    sleepers: &std::sync::atomic::AtomicU32,
    eventfd: BorrowedFd<'_>,
    ready: impl FnMut() -> bool,
) -> Waited {
    wait_inner(policy, deadline, sleepers, eventfd, None, false, ready)
}

fn wait_inner(
    policy: WaitPolicy,
    deadline: Option<Instant>,
    sleepers: &std::sync::atomic::AtomicU32,
    eventfd: BorrowedFd<'_>,
    gone: Option<BorrowedFd<'_>>,
    drain_after_wake: bool,
    mut ready: impl FnMut() -> bool,
) -> Waited {
    use std::sync::atomic::Ordering::SeqCst;
    if ready() {
        return Waited::Ready;
    }
    let spin_until = match policy.mode {
        WaitMode::Poll => None,
        WaitMode::Adaptive => Some(Instant::now() + policy.spin),
        WaitMode::Block => Some(Instant::now()),
    };
    // Spin phase (none at all in block mode: it sleeps at once).
    let mut n: u32 = 0;
    if policy.mode != WaitMode::Block {
        loop {
            if ready() {
                return Waited::Ready;
            }
            n = n.wrapping_add(1);
            if n.is_multiple_of(64) {
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Waited::TimedOut;
                }
                if spin_until.is_some_and(|s| now >= s) {
                    break;
                }
                if policy.mode == WaitMode::Poll && n.is_multiple_of(64 * 1024) {
                    // Let the peer run if it shares our core.
                    std::thread::yield_now();
                }
            }
            std::hint::spin_loop();
        }
    }
    // Block phase.
    let mut recheck_after = RECHECK;
    loop {
        sleepers.fetch_add(1, SeqCst);
        if ready() {
            sleepers.fetch_sub(1, SeqCst);
            return Waited::Ready;
        }
        let left = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    sleepers.fetch_sub(1, SeqCst);
                    return Waited::TimedOut;
                }
                Some(left)
            }
        };
        // Interrupt waits (those with `gone`) look again after a while.
        let slept_for = recheck_after;
        let recheck = gone.is_some() && left.is_none_or(|l| l > slept_for);
        recheck_after = (recheck_after * 2).min(RECHECK_MAX);
        let timeout = match if recheck { Some(slept_for) } else { left } {
            None => nix::poll::PollTimeout::NONE,
            Some(left) => {
                // Round up so we never wake just before the deadline.
                let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX)
            }
        };
        let mut fds =
            [PollFd::new(eventfd.as_fd(), PollFlags::POLLIN), PollFd::new(gone.unwrap_or(eventfd), PollFlags::POLLIN)];
        let n = if gone.is_some() { 2 } else { 1 };
        // Only a sleep that ran out counts as one nothing woke (a signal
        // that cut it short does not).
        let slept_out = matches!(nix::poll::poll(&mut fds[..n], timeout), Ok(0));
        if drain_after_wake {
            drain(eventfd);
        }
        sleepers.fetch_sub(1, SeqCst);
        if ready() {
            if recheck && slept_out && LOST_WAKES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                // At error level, which the library logs by default: a lost
                // wake-up is a fault of vsci's, or of QEMU's under it.
                log::error!(
                    "vsci: an interrupt wait found its trigger after {} ms asleep with no wake-up (lost, \
                     or later than that, on its way; interrupt waits look again after {} ms, then less \
                     often)",
                    slept_for.as_millis(),
                    RECHECK.as_millis()
                );
            }
            return Waited::Ready;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Waited::TimedOut;
        }
    }
}

/// Empty a non-blocking eventfd.
pub fn drain(eventfd: BorrowedFd<'_>) {
    let mut buf = [0u8; 8];
    while nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&eventfd), &mut buf).is_ok() {}
}

/// Wake sleepers: write 1 to the eventfd.
pub fn kick(eventfd: BorrowedFd<'_>) {
    let _ = nix::unistd::write(eventfd, &1u64.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::eventfd::{EfdFlags, EventFd};
    use std::os::fd::OwnedFd;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;

    fn eventfd() -> OwnedFd {
        EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).unwrap().into()
    }

    /// A condition made true with its wake-up lost (no eventfd write) is
    /// found by the interrupt wait's next look, not at its deadline.
    #[test]
    fn an_interrupt_wait_finds_a_trigger_whose_wake_up_was_lost() {
        let (efd, gone) = (eventfd(), eventfd());
        let sleepers = AtomicU32::new(0);
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = flag.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                flag.store(true, Ordering::SeqCst);
            })
        };
        let policy = WaitPolicy { mode: WaitMode::Block, spin: Duration::ZERO };
        let t0 = Instant::now();
        let deadline = Some(t0 + Duration::from_secs(60));
        let r =
            wait_until_or_gone(policy, deadline, &sleepers, efd.as_fd(), gone.as_fd(), || flag.load(Ordering::SeqCst));
        setter.join().unwrap();
        assert!(matches!(r, Waited::Ready));
        assert!(t0.elapsed() < Duration::from_secs(30), "woke only near the deadline: {:?}", t0.elapsed());
        assert_eq!(sleepers.load(Ordering::SeqCst), 0);
    }

    /// A wait with a deadline shorter than the look-again period still
    /// times out at its deadline.
    #[test]
    fn a_short_interrupt_wait_times_out_at_its_deadline() {
        let (efd, gone) = (eventfd(), eventfd());
        let sleepers = AtomicU32::new(0);
        let policy = WaitPolicy { mode: WaitMode::Block, spin: Duration::ZERO };
        let t0 = Instant::now();
        let r = wait_until_or_gone(
            policy,
            Some(t0 + Duration::from_millis(10)),
            &sleepers,
            efd.as_fd(),
            gone.as_fd(),
            || false,
        );
        assert!(matches!(r, Waited::TimedOut));
        assert!(t0.elapsed() >= Duration::from_millis(10));
        assert_eq!(sleepers.load(Ordering::SeqCst), 0);
    }
}
