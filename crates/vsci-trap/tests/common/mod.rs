//! What the trap tests share: a private memfd mapped twice (the trapped
//! mapping and an untracked one to fill pages through).

use std::os::fd::AsFd;

use vsci_sys::{memfd, MapOptions, Mapping};

/// Map a fresh memfd of `len` bytes twice: (trapped, fill). Drop them only
/// after their trap is unregistered.
pub fn memfd_twice(name: &std::ffi::CStr, len: usize) -> (Mapping, Mapping) {
    let fd = memfd::create(name, len as u64, memfd::Seals::NONE).expect("memfd");
    let m = || MapOptions::shared().map(fd.as_fd(), len, 0).expect("mmap");
    (m(), m())
}
