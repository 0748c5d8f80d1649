//! What the trap tests share: a private memfd mapped twice (the trapped
//! mapping and an untracked one to fill pages through).

/// Map a fresh memfd of `len` bytes twice; returns (trapped, fill) bases.
pub fn memfd_twice(name: &std::ffi::CStr, len: usize) -> (usize, usize) {
    // SAFETY: a private memfd and two shared mappings of it, owned by the
    // calling test until `unmap_both`.
    unsafe {
        let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, len as i64), 0);
        let m = || libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
        let (a, b) = (m(), m());
        assert!(a != libc::MAP_FAILED && b != libc::MAP_FAILED);
        libc::close(fd);
        (a as usize, b as usize)
    }
}

/// Unmap what `memfd_twice` made (after its trap is unregistered).
pub fn unmap_both(base: usize, fill: usize, len: usize) {
    // SAFETY: the calling test's own mappings, no longer used.
    unsafe {
        libc::munmap(base as *mut libc::c_void, len);
        libc::munmap(fill as *mut libc::c_void, len);
    }
}
