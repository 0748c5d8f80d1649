//! Signal chaining (`vsci_trap::chain`) in one process: once the trap's
//! handler is installed, a program's SIGBUS handler set through the chain is
//! reported back exactly, gets the SIGBUS that are not the trap's, and
//! takes nothing away from the trap. A file of its own: the SIGBUS
//! disposition is process-wide.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use vsci_trap::chain;
use vsci_trap::trap::{self, Fault, Trap, TrapHandler, TrapOptions};

struct Filler {
    fill: usize,
    page: usize,
    count: AtomicUsize,
}

impl TrapHandler for Filler {
    fn on_fault(&self, trap: &Trap, f: Fault) {
        self.count.fetch_add(1, Ordering::SeqCst);
        if f.present != Some(true) {
            // SAFETY: the page lies inside the test's fill mapping.
            unsafe { std::ptr::write_bytes((self.fill + f.page) as *mut u8, 0, self.page) };
            trap.map_in(f.page, self.page, !f.write).unwrap();
        }
        if f.write && f.present != Some(false) {
            trap.unprotect(f.page, self.page).unwrap();
        }
    }
}

static PROGRAM_GOT: AtomicUsize = AtomicUsize::new(0);
static PROGRAM_CODE: AtomicUsize = AtomicUsize::new(0);

extern "C" fn program_handler(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    PROGRAM_GOT.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the kernel's siginfo, passed on by the chain.
    PROGRAM_CODE.store(unsafe { (*info).si_code } as usize, Ordering::SeqCst);
}

fn program_action(flags: libc::c_int) -> libc::sigaction {
    // SAFETY: an all-zero sigaction is valid; the fields are set below.
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction = program_handler as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
    a.sa_flags = flags;
    // SAFETY: sigaddset writes the set only.
    unsafe { libc::sigaddset(&mut a.sa_mask, libc::SIGUSR1) };
    a
}

#[test]
fn the_trap_stays_first_and_the_program_keeps_its_handler() {
    let page = vsci_trap::page_size();
    let len = 2 * page;
    let maps = common::memfd_twice(c"chain-test", len);
    let (base, fill) = (maps.0.addr(), maps.1.addr());
    // What the process had before the trap (Rust's runtime installs a
    // SIGBUS handler of its own for stack overflows).
    // SAFETY: a query into a valid struct.
    let before = unsafe {
        let mut b: libc::sigaction = std::mem::zeroed();
        chain::real_sigaction(libc::SIGBUS, std::ptr::null(), &mut b);
        b.sa_sigaction
    };
    let h = Arc::new(Filler { fill, page, count: AtomicUsize::new(0) });
    // SAFETY: the mapping outlives the trap (unregistered below).
    let t = unsafe { Trap::new(base as *mut u8, len, TrapOptions { writes: true }, h.clone()) }.unwrap();

    // The program installs its handler after the trap's (as GASNet does
    // after mapping), through the chain.
    let mine = program_action(libc::SA_SIGINFO | libc::SA_RESETHAND);
    // SAFETY: valid actions, live across the calls.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(chain::sigaction(libc::SIGBUS, &mine, &mut old), 0);
        assert_eq!(old.sa_sigaction, before, "the program sees what it had before its own");
        let mut now: libc::sigaction = std::mem::zeroed();
        assert_eq!(chain::sigaction(libc::SIGBUS, std::ptr::null(), &mut now), 0);
        assert_eq!(now.sa_sigaction, mine.sa_sigaction, "reported back as set");
        assert_eq!(now.sa_flags & (libc::SA_SIGINFO | libc::SA_RESETHAND), libc::SA_SIGINFO | libc::SA_RESETHAND);
        assert_eq!(libc::sigismember(&now.sa_mask, libc::SIGUSR1), 1);
    }

    // The trap still works: a store faults into the trap's handler only.
    // SAFETY: a store inside the test's mapping.
    unsafe { std::ptr::write_volatile(base as *mut u8, 3) };
    assert_eq!(h.count.load(Ordering::SeqCst), 1);
    assert_eq!(PROGRAM_GOT.load(Ordering::SeqCst), 0);

    // A SIGBUS that is not the trap's reaches the program's handler, once
    // (SA_RESETHAND), with its siginfo.
    // SAFETY: raising a signal in this thread.
    unsafe { libc::raise(libc::SIGBUS) };
    assert_eq!(PROGRAM_GOT.load(Ordering::SeqCst), 1);
    assert_eq!(PROGRAM_CODE.load(Ordering::SeqCst) as i32, libc::SI_TKILL);
    // SAFETY: a query into a valid struct.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        chain::sigaction(libc::SIGBUS, std::ptr::null(), &mut now);
        assert_eq!(now.sa_sigaction, libc::SIG_DFL, "SA_RESETHAND reset the program's disposition");
    }

    // Blocking SIGBUS through the chain: reported as blocked, never really
    // blocked, and a store still traps and is resolved.
    // SAFETY: mask calls with valid sets; a store inside the mapping.
    unsafe {
        let mut s: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut s);
        libc::sigaddset(&mut s, libc::SIGBUS);
        assert_eq!(chain::sigmask(libc::SIG_BLOCK, &s, std::ptr::null_mut()), 0);
        let mut seen: libc::sigset_t = std::mem::zeroed();
        chain::sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut seen);
        assert_eq!(libc::sigismember(&seen, libc::SIGBUS), 1, "the program sees SIGBUS blocked");
        let mut real: libc::sigset_t = std::mem::zeroed();
        chain::real_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut real);
        assert_eq!(libc::sigismember(&real, libc::SIGBUS), 0, "the kernel does not");
        std::ptr::write_volatile((base + page) as *mut u8, 4);
        assert_eq!(h.count.load(Ordering::SeqCst), 2);
        // A SIGBUS sent while the program believes it blocked waits for
        // the unblock, then reaches its (re-installed) handler.
        let mine = program_action(libc::SA_SIGINFO);
        chain::sigaction(libc::SIGBUS, &mine, std::ptr::null_mut());
        libc::raise(libc::SIGBUS);
        assert_eq!(PROGRAM_GOT.load(Ordering::SeqCst), 1, "held while blocked");
        chain::sigmask(libc::SIG_UNBLOCK, &s, std::ptr::null_mut());
        assert_eq!(PROGRAM_GOT.load(Ordering::SeqCst), 2, "delivered at the unblock");
    }
    // SAFETY: reading the test's fill mapping.
    assert_eq!(unsafe { *((fill + page) as *const u8) }, 4);

    trap::unregister(&t);
    drop(t);
    drop(maps);
}
