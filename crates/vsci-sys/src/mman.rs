//! Memory mappings: [`Mapping`] owns one `mmap` and unmaps it when dropped.
//!
//! A `Mapping` hands out raw pointers (bounds-checked by
//! [`Mapping::ptr_at`]) and copies in and out (volatile for single values),
//! and slices only through `unsafe` calls: the memory is usually shared with
//! other processes, guests or an RMA engine, which write it whenever they
//! like, so a `&[u8]` over it would promise Rust something nobody keeps.
//! Private memory only this process writes may be had as a slice
//! ([`Mapping::as_mut_slice`]); code that builds a reference from a pointer
//! it got here (an atomic in a shared slot) says why in its own SAFETY
//! comment.
//!
//! Nothing here allocates: [`MapOptions::anonymous`], [`Mapping::protect`]
//! and [`Mapping::into_raw`] may run inside a signal handler (the trap's
//! private signal stacks are made that way).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::last_error;

/// What the memory of a mapping may be used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prot {
    /// No access (a guard page).
    None,
    Read,
    ReadWrite,
}

impl Prot {
    fn bits(self) -> libc::c_int {
        match self {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// How to map: shared or private, protection, reservation, placement.
#[derive(Clone, Copy, Debug)]
pub struct MapOptions {
    prot: Prot,
    shared: bool,
    noreserve: bool,
    at: Option<usize>,
}

impl MapOptions {
    /// `MAP_SHARED`, read and write.
    pub const fn shared() -> MapOptions {
        MapOptions { prot: Prot::ReadWrite, shared: true, noreserve: false, at: None }
    }

    /// `MAP_PRIVATE`, read and write.
    pub const fn private() -> MapOptions {
        MapOptions { prot: Prot::ReadWrite, shared: false, noreserve: false, at: None }
    }

    pub const fn prot(mut self, prot: Prot) -> MapOptions {
        self.prot = prot;
        self
    }

    /// `MAP_NORESERVE`: no swap is reserved (the range may be larger than
    /// the memory there is; pages cost only once touched).
    pub const fn noreserve(mut self) -> MapOptions {
        self.noreserve = true;
        self
    }

    /// At exactly `addr` (page aligned), replacing nothing: fails with
    /// `EEXIST` when something is mapped there (`MAP_FIXED_NOREPLACE`; a
    /// kernel too old for it, which took the address as a hint and chose
    /// another, fails the same way).
    pub const fn at(mut self, addr: usize) -> MapOptions {
        self.at = Some(addr);
        self
    }

    /// Anonymous memory of `len` bytes (zero-filled).
    pub fn anonymous(&self, len: usize) -> io::Result<Mapping> {
        self.map_raw(len, libc::MAP_ANONYMOUS, -1, 0)
    }

    /// `len` bytes of `fd` from `offset` (page aligned).
    pub fn map(&self, fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<Mapping> {
        let offset = libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.map_raw(len, 0, fd.as_raw_fd(), offset)
    }

    fn map_raw(&self, len: usize, kind: libc::c_int, fd: libc::c_int, offset: libc::off_t) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut flags = kind | if self.shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
        if self.noreserve {
            flags |= libc::MAP_NORESERVE;
        }
        if self.at.is_some() {
            flags |= libc::MAP_FIXED_NOREPLACE;
        }
        let hint = self.at.unwrap_or(0) as *mut libc::c_void;
        // SAFETY: a new mapping at an address of the kernel's choosing, or
        // at `at` with MAP_FIXED_NOREPLACE, which refuses to replace
        // anything mapped there: either way it overlaps no memory of this
        // process, so no Rust object is aliased or unmapped. `fd` is a live
        // descriptor (borrowed by the caller) or -1 with MAP_ANONYMOUS.
        let p = unsafe { libc::mmap(hint, len, self.prot.bits(), flags, fd, offset) };
        if p == libc::MAP_FAILED {
            return Err(last_error());
        }
        let m = Mapping { ptr: NonNull::new(p.cast()).expect("mmap returned a mapping, not NULL"), len };
        if self.at.is_some_and(|a| a != m.addr()) {
            // An old kernel ignored MAP_FIXED_NOREPLACE and took a hint;
            // dropping `m` unmaps what it chose.
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        Ok(m)
    }
}

/// One memory mapping of this process, unmapped on drop.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is a range of this process's address space; it hands
// out raw pointers and copies only, never references, so sending it or
// sharing it between threads is what sharing the memory with another
// process already is. Every raw access through its pointers is the user's
// own unsafe code, with its own justification.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping({:#x}, {} bytes)", self.addr(), self.len)
    }
}

impl Mapping {
    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The address of the first byte.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Does `[off, off + n)` lie inside the mapping?
    pub fn contains(&self, off: usize, n: usize) -> bool {
        off.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// A pointer to byte `off`, if `[off, off + n)` lies inside the mapping.
    pub fn ptr_at(&self, off: usize, n: usize) -> Option<*mut u8> {
        // SAFETY: off <= len (checked), so the result is inside the mapping
        // or one past its end.
        self.contains(off, n).then(|| unsafe { self.as_ptr().add(off) })
    }

    /// The `T` at `off`, read volatile; `None` if it does not lie inside
    /// the mapping or `off` is not aligned for `T`.
    pub fn read_volatile<T: Copy>(&self, off: usize) -> Option<T> {
        let p = self.ptr_at(off, std::mem::size_of::<T>())?;
        if !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        // SAFETY: in bounds and aligned (checked); the mapping is readable
        // memory of this process while `self` lives. T is Copy plain data
        // the caller chose (any bit pattern another party stored there must
        // be valid for it: integers and structs of integers).
        Some(unsafe { p.cast::<T>().read_volatile() })
    }

    /// Store `v` at `off`, volatile; `None` if it does not fit or `off` is
    /// not aligned for `T`.
    pub fn write_volatile<T: Copy>(&self, off: usize, v: T) -> Option<()> {
        let p = self.ptr_at(off, std::mem::size_of::<T>())?;
        if !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        // SAFETY: in bounds and aligned (checked); no Rust reference into
        // the mapping exists (see the module comment), so the store aliases
        // none. A read-only mapping faults here, as any store to it would.
        unsafe { p.cast::<T>().write_volatile(v) };
        Some(())
    }

    /// Copy the bytes at `[off, off + buf.len())` into `buf`; `None` if
    /// they do not lie inside the mapping.
    pub fn read(&self, off: usize, buf: &mut [u8]) -> Option<()> {
        let p = self.ptr_at(off, buf.len())?;
        // SAFETY: the source is inside the mapping (checked), `buf` is
        // ours, and the two cannot overlap (a Mapping never lends its memory
        // out as a slice). Bytes another party writes meanwhile are only
        // bytes.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Some(())
    }

    /// Copy `data` to `[off, off + data.len())`; `None` if it does not fit.
    pub fn write(&self, off: usize, data: &[u8]) -> Option<()> {
        let p = self.ptr_at(off, data.len())?;
        // SAFETY: the destination is inside the mapping (checked) and no
        // Rust reference points into it; `data` cannot overlap it (see
        // `read`).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Some(())
    }

    /// The bytes `[off, off + len)` as a slice (panics if they do not lie
    /// inside the mapping).
    ///
    /// # Safety
    /// Nothing may write these bytes while the slice lives: no other
    /// process, device or mapping of the same memory, and no raw pointer
    /// of this one (private anonymous memory that only `as_mut_slice`
    /// writes qualifies).
    pub unsafe fn as_slice(&self, off: usize, len: usize) -> &[u8] {
        let p = self.ptr_at(off, len).expect("slice inside the mapping");
        // SAFETY: in bounds (checked), initialised (mapped memory always
        // is), alive as long as `self`; the caller's contract excludes
        // writers.
        unsafe { std::slice::from_raw_parts(p, len) }
    }

    /// The bytes `[off, off + len)` as a mutable slice (panics if they do
    /// not lie inside the mapping).
    ///
    /// # Safety
    /// Nothing else may read or write these bytes while the slice lives (as
    /// for [`Mapping::as_slice`], and `&mut self` excludes the mapping's
    /// own other slices).
    pub unsafe fn as_mut_slice(&mut self, off: usize, len: usize) -> &mut [u8] {
        let p = self.ptr_at(off, len).expect("slice inside the mapping");
        // SAFETY: as in `as_slice`, with exclusive access through
        // `&mut self` and the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(p, len) }
    }

    /// `madvise(advice)` on `[off, off + len)` (page aligned).
    pub fn advise(&self, off: usize, len: usize, advice: libc::c_int) -> io::Result<()> {
        let p = self.ptr_at(off, len).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: advice on a range of our own mapping. Advice that drops
        // contents (MADV_DONTNEED) changes only what the mapping reads next
        // (zeros, or the file's bytes), never which memory it is: no Rust
        // object lives in it.
        if unsafe { libc::madvise(p.cast(), len, advice) } != 0 {
            return Err(last_error());
        }
        Ok(())
    }

    /// Change the protection of `[off, off + len)` (page aligned).
    pub fn protect(&self, off: usize, len: usize, prot: Prot) -> io::Result<()> {
        let p = self.ptr_at(off, len).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a range of our own mapping, which holds no Rust object;
        // an access the new protection forbids faults, as it should.
        if unsafe { libc::mprotect(p.cast(), len, prot.bits()) } != 0 {
            return Err(last_error());
        }
        Ok(())
    }

    /// Map `fd` from `offset` shared over the whole of this mapping, in
    /// place (`MAP_FIXED`): the same addresses now show `fd`'s memory.
    ///
    /// # Safety
    /// Nothing may be reading or writing the old memory through pointers
    /// taken from this mapping while it is replaced, and `fd` must be at
    /// least `offset + len()` bytes long (else accesses fault).
    pub unsafe fn replace(&self, fd: BorrowedFd<'_>, offset: u64, prot: Prot) -> io::Result<()> {
        // SAFETY: the range is exactly our own mapping; the caller's
        // contract covers its users.
        unsafe { map_fixed(self.addr(), self.len, prot, fd, offset) }
    }

    /// Give up ownership: the memory stays mapped for good (or until
    /// [`Mapping::from_raw`] takes it back). Returns its start and length.
    pub fn into_raw(self) -> (NonNull<u8>, usize) {
        let me = std::mem::ManuallyDrop::new(self);
        (me.ptr, me.len)
    }

    /// Own a mapping again.
    ///
    /// # Safety
    /// `ptr` and `len` must come from [`Mapping::into_raw`] (exactly one
    /// mapping), and nothing else may own or unmap it.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Mapping {
        Mapping { ptr, len }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping this value owns, unmapped once; no
        // Rust reference into it exists (see the module comment), and raw
        // users are bound by the owner's lifetime.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Map `len` bytes of `fd` from `offset`, shared, at exactly `addr`,
/// replacing whatever is mapped there (`MAP_SHARED | MAP_FIXED`). The new
/// mapping belongs to nobody here: it stays until something unmaps it.
///
/// # Safety
/// `[addr, addr + len)` must be page aligned, and no Rust object may live
/// in it: its old contents disappear. Whoever owned the old mapping owns
/// the new one.
pub unsafe fn map_fixed(addr: usize, len: usize, prot: Prot, fd: BorrowedFd<'_>, offset: u64) -> io::Result<()> {
    let offset = libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the caller's contract; `fd` is a live borrowed descriptor.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            prot.bits(),
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            offset,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(last_error());
    }
    if p as usize != addr {
        return Err(io::Error::from_raw_os_error(libc::ENOMEM));
    }
    Ok(())
}

/// The system page size (4096 if the system will not say).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Copy up to `buf.len()` bytes of this process's memory at `addr` into
/// `buf` without ever faulting: unmapped or unreadable bytes end the copy.
/// Returns how many bytes were copied.
pub fn read_own(addr: usize, buf: &mut [u8]) -> usize {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: process_vm_readv on our own pid reads through the kernel,
    // which reports an unreadable address as an error (or a short read)
    // instead of a fault; `local` is `buf`, writable for its length.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        0
    } else {
        n as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn accessors_check_bounds_and_alignment() {
        let m = MapOptions::private().anonymous(8192).unwrap();
        assert_eq!(m.len(), 8192);
        assert!(m.contains(0, 8192) && !m.contains(1, 8192) && !m.contains(usize::MAX, 2));
        assert_eq!(m.ptr_at(8192, 0).map(|p| p as usize), Some(m.addr() + 8192));
        assert_eq!(m.ptr_at(8190, 4), None);
        assert_eq!(m.write_volatile(8, 0x1122_3344_5566_7788u64), Some(()));
        assert_eq!(m.read_volatile::<u64>(8), Some(0x1122_3344_5566_7788));
        assert_eq!(m.read_volatile::<u64>(9), None, "misaligned");
        assert_eq!(m.read_volatile::<u64>(8188), None, "past the end");
        assert_eq!(m.write(8190, b"ab"), Some(()));
        assert_eq!(m.write(8191, b"ab"), None);
        let mut b = [0u8; 2];
        assert_eq!(m.read(8190, &mut b), Some(()));
        assert_eq!(&b, b"ab");
        assert!(m.advise(0, 4096, libc::MADV_DONTNEED).is_ok());
        assert_eq!(m.read_volatile::<u64>(8), Some(0), "private anonymous pages come back zero");
        assert!(m.protect(0, 8192 + 4096, Prot::Read).is_err());
    }

    #[test]
    fn shared_mappings_of_one_memfd_see_each_other_and_replace_swaps_memory() {
        let a = crate::memfd::create(c"vsci-sys-test", 4096, crate::memfd::Seals::NONE).unwrap();
        let b = crate::memfd::create(c"vsci-sys-test", 4096, crate::memfd::Seals::NONE).unwrap();
        let m1 = MapOptions::shared().map(a.as_fd(), 4096, 0).unwrap();
        let m2 = MapOptions::shared().map(a.as_fd(), 4096, 0).unwrap();
        m1.write_volatile(0, 7u32).unwrap();
        assert_eq!(m2.read_volatile::<u32>(0), Some(7));
        let other = MapOptions::shared().map(b.as_fd(), 4096, 0).unwrap();
        other.write_volatile(0, 9u32).unwrap();
        // SAFETY: nothing uses m1's memory meanwhile; `b` is 4096 bytes.
        unsafe { m1.replace(b.as_fd(), 0, Prot::ReadWrite) }.unwrap();
        assert_eq!(m1.read_volatile::<u32>(0), Some(9));
        let ro = MapOptions::shared().prot(Prot::Read).map(a.as_fd(), 4096, 0).unwrap();
        assert_eq!(ro.read_volatile::<u32>(0), Some(7));
    }

    #[test]
    fn a_fixed_address_never_replaces_a_mapping() {
        let m = MapOptions::private().anonymous(4096).unwrap();
        let e = MapOptions::private().at(m.addr()).anonymous(4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        let (p, len) = m.into_raw();
        // SAFETY: exactly what into_raw gave up.
        let m = unsafe { Mapping::from_raw(p, len) };
        assert_eq!((m.addr(), m.len()), (p.as_ptr() as usize, 4096));
        assert!(MapOptions::private().anonymous(0).is_err());
    }
}
