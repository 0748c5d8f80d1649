//! Faults delivered to the fault thread (`Delivery::Thread`): no signal at
//! all, so a thread that blocks SIGBUS, or a program whose own SIGBUS
//! handler replaced everything, still gets its faults resolved. A file of
//! its own: the delivery choice is process-wide.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use vsci_trap::trap::{self, Delivery, Fault, Trap, TrapHandler, TrapOptions};

struct Filler {
    fill: usize,
    page: usize,
    count: AtomicUsize,
    writes: AtomicUsize,
}

impl TrapHandler for Filler {
    fn on_fault(&self, trap: &Trap, f: Fault) {
        self.count.fetch_add(1, Ordering::SeqCst);
        if f.write {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        assert!(f.decode_store(f.page).is_none(), "no registers to decode in the fault thread");
        if f.present != Some(true) {
            // SAFETY: the page lies inside the test's fill mapping.
            unsafe { std::ptr::write_bytes((self.fill + f.page) as *mut u8, 7, self.page) };
            trap.map_in(f.page, self.page, !f.write).unwrap();
        }
        if f.write && f.present != Some(false) {
            trap.unprotect(f.page, self.page).unwrap();
        }
    }
}

extern "C" fn die(_: libc::c_int) {
    // A signal reaching the program would be a failure of this test.
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(99) };
}

#[test]
fn faults_reach_the_fault_thread_without_a_signal() {
    trap::set_delivery(Delivery::Thread);
    let page = vsci_trap::page_size();
    let len = 4 * page;
    let maps = common::memfd_twice(c"delivery-test", len);
    let (base, fill) = (maps.0.addr(), maps.1.addr());
    // SAFETY: the SIGBUS disposition of this test process is ours to set.
    unsafe { libc::signal(libc::SIGBUS, die as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    let h = Arc::new(Filler { fill, page, count: AtomicUsize::new(0), writes: AtomicUsize::new(0) });
    // SAFETY: the mapping outlives the trap (unregistered below).
    let t = unsafe { Trap::new(base as *mut u8, len, TrapOptions { writes: true }, h.clone()) }.unwrap();

    // A load, then a store to the same page: two faults, no signal.
    // SAFETY: reads and writes inside the test's mapping.
    assert_eq!(unsafe { std::ptr::read_volatile(base as *const u8) }, 7);
    // SAFETY: as above.
    unsafe { std::ptr::write_volatile(base as *mut u8, 1) };
    assert_eq!(h.count.load(Ordering::SeqCst), 2);
    assert_eq!(h.writes.load(Ordering::SeqCst), 1);

    // A thread that blocks SIGBUS stores into a fresh page: resolved.
    std::thread::spawn(move || {
        // SAFETY: blocking SIGBUS in this thread only; then a store inside
        // the test's mapping.
        unsafe {
            let mut s: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut s);
            libc::sigaddset(&mut s, libc::SIGBUS);
            libc::pthread_sigmask(libc::SIG_BLOCK, &s, std::ptr::null_mut());
            std::ptr::write_volatile((base + 2 * page) as *mut u8, 5);
        }
    })
    .join()
    .unwrap();
    // SAFETY: reading the test's fill mapping.
    assert_eq!(unsafe { *((fill + 2 * page) as *const u8) }, 5);

    // A system call writing into an untouched page is a fault too (with a
    // signal it would fail with EFAULT).
    let mut fds = [0; 2];
    // SAFETY: a pipe, a write of 3 bytes, and a read into the mapping.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        assert_eq!(libc::write(fds[1], b"abc".as_ptr().cast(), 3), 3);
        let n = libc::read(fds[0], (base + 3 * page) as *mut libc::c_void, 3);
        // Unprivileged processes register user-mode-only faults: the
        // kernel's own access then fails instead.
        assert!(n == 3 || n == -1, "read returned {n}");
        if n == 3 {
            assert_eq!(*((fill + 3 * page) as *const u8), b'a');
        }
        libc::close(fds[0]);
        libc::close(fds[1]);
    }

    trap::unregister(&t);
    drop(t);
    drop(maps);
}
