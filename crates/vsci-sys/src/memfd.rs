//! memfds: anonymous files of memory, sized at creation and optionally
//! sealed.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::last_error;

/// Seals to add once the memfd has its size (`F_ADD_SEALS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seals(libc::c_int);

impl Seals {
    /// No seals (and sealing not allowed later).
    pub const NONE: Seals = Seals(0);
    /// The size can never change and no seal can be added or removed
    /// (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`): every process that
    /// maps the memfd can rely on its size, so none of them can make the
    /// others' mappings fault by truncating it.
    pub const SIZE: Seals = Seals(libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL);
}

/// A new memfd (close-on-exec) named `name`, `size` bytes long (zeros;
/// pages cost nothing until touched), with `seals` added.
pub fn create(name: &CStr, size: u64, seals: Seals) -> io::Result<OwnedFd> {
    let flags = libc::MFD_CLOEXEC | if seals == Seals::NONE { 0 } else { libc::MFD_ALLOW_SEALING };
    // SAFETY: memfd_create reads the NUL-terminated name and returns a new
    // descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: ftruncate on our own descriptor; no memory effects.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(last_error());
    }
    if seals != Seals::NONE {
        // SAFETY: fcntl(F_ADD_SEALS) on our own descriptor takes an int.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals.0) } != 0 {
            return Err(last_error());
        }
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_memfds_keep_their_size() {
        let f = create(c"vsci-sys-test", 8192, Seals::SIZE).unwrap();
        let file = std::fs::File::from(f);
        assert_eq!(file.metadata().unwrap().len(), 8192);
        assert!(file.set_len(4096).is_err(), "cannot shrink");
        assert!(file.set_len(16384).is_err(), "cannot grow");
        let g = std::fs::File::from(create(c"vsci-sys-test", 4096, Seals::NONE).unwrap());
        g.set_len(8192).unwrap();
        assert_eq!(g.metadata().unwrap().len(), 8192);
    }
}
