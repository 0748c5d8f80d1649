//! eventfds: a kernel counter that wakes `poll` when it is non-zero.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::last_error;

/// A new eventfd, close-on-exec and non-blocking, its counter at 0.
pub fn new() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes flags only and returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Add `n` to the counter (wakes its pollers). May run in a signal handler.
pub fn write(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    // SAFETY: writes 8 bytes from a local to a live descriptor.
    let r = unsafe { libc::write(fd.as_raw_fd(), (&n as *const u64).cast(), 8) };
    if r != 8 {
        return Err(last_error());
    }
    Ok(())
}

/// Take the counter (reset it to 0); 0 when nothing was pending (a
/// non-blocking eventfd whose counter is 0).
pub fn read(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut n = 0u64;
    // SAFETY: reads 8 bytes into a local from a live descriptor.
    let r = unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    if r == 8 {
        return Ok(n);
    }
    let e = last_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(0)
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    #[test]
    fn counts_and_resets() {
        let e = super::new().unwrap();
        assert_eq!(super::read(e.as_fd()).unwrap(), 0);
        super::write(e.as_fd(), 2).unwrap();
        super::write(e.as_fd(), 3).unwrap();
        assert_eq!(super::read(e.as_fd()).unwrap(), 5);
        assert_eq!(super::read(e.as_fd()).unwrap(), 0);
    }
}
