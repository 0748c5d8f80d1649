//! Test helpers: a memfd mapped twice (MAP_SHARED).
#![allow(dead_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};

pub struct Shm {
    pub fd: OwnedFd,
    pub len: usize,
    /// Tracked mapping.
    pub m1: *mut u8,
    /// Second, untracked mapping of the same pages.
    pub m2: *mut u8,
}

// SAFETY: the mappings are plain shared memory accessed only via atomics.
unsafe impl Send for Shm {}
// SAFETY: as above.
unsafe impl Sync for Shm {}

fn map(fd: &OwnedFd, len: usize) -> *mut u8 {
    // SAFETY: a fresh shared mapping of a memfd of at least `len` bytes.
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
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p as *mut u8
}

impl Shm {
    pub fn new(len: usize) -> Shm {
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"vsci-dirty-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fresh fd, owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscall on our fd.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
        assert_eq!(r, 0);
        let m1 = map(&fd, len);
        let m2 = map(&fd, len);
        Shm { fd, len, m1, m2 }
    }

    fn at(p: *mut u8, off: usize) -> &'static AtomicU8 {
        // SAFETY: off < len, inside a live mapping (tests keep Shm alive).
        unsafe { AtomicU8::from_ptr(p.add(off)) }
    }

    pub fn store1(&self, off: usize, v: u8) {
        assert!(off < self.len);
        Self::at(self.m1, off).store(v, Ordering::Relaxed)
    }
    pub fn store2(&self, off: usize, v: u8) {
        assert!(off < self.len);
        Self::at(self.m2, off).store(v, Ordering::Relaxed)
    }
    pub fn load1(&self, off: usize) -> u8 {
        Self::at(self.m1, off).load(Ordering::Relaxed)
    }
    pub fn load2(&self, off: usize) -> u8 {
        Self::at(self.m2, off).load(Ordering::Relaxed)
    }
    pub fn write1(&self, off: usize, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            self.store1(off + i, b);
        }
    }
    pub fn write2(&self, off: usize, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            self.store2(off + i, b);
        }
    }
    pub fn snapshot(&self) -> Vec<u8> {
        (0..self.len).map(|i| self.load2(i)).collect()
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mappings; no references outlive Shm.
        unsafe {
            libc::munmap(self.m1 as *mut libc::c_void, self.len);
            libc::munmap(self.m2 as *mut libc::c_void, self.len);
        }
    }
}

pub fn page() -> usize {
    vsci_dirty::page_size()
}
