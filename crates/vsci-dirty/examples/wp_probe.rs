//! Probe which userfaultfd write-protect set-up catches what on this kernel.
//! `cargo run -p vsci-dirty --example wp_probe`
//!
//! For each combination of (UFFD_FEATURE_WP_UNPOPULATED, initial
//! UFFDIO_WRITEPROTECT) it runs small scenarios on a fresh memfd mapped twice
//! and prints whether the page layer reported the page ("yes"/"no").

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};

use vsci_dirty::{ModeRequest, PageTracker, WpOptions};

const PAGES: usize = 4;

struct Shm {
    _fd: OwnedFd,
    len: usize,
    m1: *mut u8,
    m2: *mut u8,
}

impl Shm {
    fn new() -> Shm {
        let len = PAGES * vsci_dirty::page_size();
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"probe".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscall.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len as i64) }, 0);
        let map = || {
            // SAFETY: new shared mapping of our memfd.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            p as *mut u8
        };
        let (m1, m2) = (map(), map());
        Shm {
            _fd: fd,
            len,
            m1,
            m2,
        }
    }
    fn b(p: *mut u8, off: usize) -> &'static AtomicU8 {
        // SAFETY: inside a live mapping (Shm is leaked for the probe's duration).
        unsafe { AtomicU8::from_ptr(p.add(off)) }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: our mappings.
        unsafe {
            libc::munmap(self.m1 as _, self.len);
            libc::munmap(self.m2 as _, self.len);
        }
    }
}

type Step = fn(&Shm);

fn run(opts: WpOptions, pre: Step, act: Step) -> String {
    let s = Shm::new();
    pre(&s);
    let mut t = match PageTracker::with_options(s.m1, s.len, ModeRequest::WriteProtect, opts) {
        Ok(t) => t,
        Err(e) => return format!("ERR({e})"),
    };
    act(&s);
    let mut out = Vec::new();
    if let Err(e) = t.take_dirty(&mut out) {
        return format!("ERR({e})");
    }
    let hit = out.iter().any(|&(o, l)| o == 0 || (o < 1 && l > 0));
    if hit {
        "yes".into()
    } else {
        "no".into()
    }
}

fn nothing(_: &Shm) {}

fn main() {
    let scenarios: Vec<(&str, Step, Step, &str)> = vec![
        (
            "never-touched page, store via m1",
            nothing,
            |s| Shm::b(s.m1, 0).store(1, Ordering::Relaxed),
            "yes",
        ),
        (
            "never-touched page, read via m1",
            nothing,
            |s| {
                Shm::b(s.m1, 0).load(Ordering::Relaxed);
            },
            "no",
        ),
        (
            "populated via m2, then read via m1",
            |s| Shm::b(s.m2, 0).store(1, Ordering::Relaxed),
            |s| {
                Shm::b(s.m1, 0).load(Ordering::Relaxed);
            },
            "no",
        ),
        (
            "populated via m2, then store via m1",
            |s| Shm::b(s.m2, 0).store(1, Ordering::Relaxed),
            |s| Shm::b(s.m1, 0).store(2, Ordering::Relaxed),
            "yes",
        ),
        (
            "written via m1 before, untouched",
            |s| Shm::b(s.m1, 0).store(1, Ordering::Relaxed),
            nothing,
            "no",
        ),
        (
            "written via m1 before, store via m1",
            |s| Shm::b(s.m1, 0).store(1, Ordering::Relaxed),
            |s| Shm::b(s.m1, 0).store(2, Ordering::Relaxed),
            "yes",
        ),
        (
            "written via m1 before, store via m2",
            |s| Shm::b(s.m1, 0).store(1, Ordering::Relaxed),
            |s| Shm::b(s.m2, 0).store(2, Ordering::Relaxed),
            "no",
        ),
        (
            "never-touched, kernel write (read(2) from pipe)",
            nothing,
            |s| {
                let mut fds = [0; 2];
                // SAFETY: pipe/write/read on our own fds and mapping.
                unsafe {
                    assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
                    assert_eq!(libc::write(fds[1], b"xyz".as_ptr() as _, 3), 3);
                    assert_eq!(libc::read(fds[0], s.m1 as _, 3), 3);
                    libc::close(fds[0]);
                    libc::close(fds[1]);
                }
            },
            "yes",
        ),
        (
            "never-touched, MADV_DONTNEED then store via m1",
            nothing,
            |s| {
                // SAFETY: our mapping.
                unsafe { libc::madvise(s.m1 as _, s.len, libc::MADV_DONTNEED) };
                Shm::b(s.m1, 0).store(3, Ordering::Relaxed)
            },
            "yes",
        ),
        (
            "store via m1, then MADV_DONTNEED on m1 (no store after)",
            nothing,
            |s| {
                Shm::b(s.m1, 0).store(4, Ordering::Relaxed);
                // SAFETY: our mapping.
                unsafe { libc::madvise(s.m1 as _, s.len, libc::MADV_DONTNEED) };
            },
            "yes",
        ),
    ];
    for umo in [true, false] {
        for (unpop, prot, base) in [
            (false, false, false),
            (true, false, false),
            (false, true, false),
            (false, false, true),
            (true, true, true),
            (false, true, true),
        ] {
            {
                let opts = WpOptions {
                    wp_unpopulated: unpop,
                    initial_protect: prot,
                    user_mode_only: umo,
                    baseline_scan: base,
                    ..WpOptions::default()
                };
                println!(
                    "\n== USER_MODE_ONLY={umo} WP_UNPOPULATED={unpop} initial UFFDIO_WRITEPROTECT={prot} baseline scan+protect={base}"
                );
                for (name, pre, act, want) in &scenarios {
                    let got = run(opts, *pre, *act);
                    let mark = match (got.as_str(), *want) {
                        (g, w) if g == w => "",
                        ("yes", "no") => "   <-- extra (false positive: harmless, costs a compare)",
                        ("no", "yes") => "   <-- MISSED (would lose stores)",
                        _ => "   <-- error",
                    };
                    println!("  {name:<50} reported: {got:<4} (want {want}){mark}");
                }
            }
        }
    }
}
