//! Maps: `mmap` of a segment's memfd, at any byte offset.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::sys::mman::{mmap, munmap, MapFlags as MmapFlags, ProtFlags};
use vsci_proto::SciError;

use crate::segment::{LocalSegment, RemoteSegment};

use crate::Result;

pub(crate) const PAGE: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
pub struct MapFlags {
    pub readonly: bool,
    /// Map exactly at this address (must not replace anything).
    pub fixed_addr: Option<usize>,
    /// A map of a reflective-memory group leaves this node's own member out
    /// (`SCI_FLAG_NO_MEMORY_LOOPBACK_MAP`).
    pub no_loopback: bool,
}

#[derive(Clone)]
pub enum MapTarget {
    Local(Arc<LocalSegment>),
    Remote(Arc<RemoteSegment>),
}

impl MapTarget {
    fn size(&self) -> u64 {
        match self {
            MapTarget::Local(s) => s.size,
            MapTarget::Remote(s) => s.size,
        }
    }

    fn counter(&self) -> &std::sync::atomic::AtomicUsize {
        match self {
            MapTarget::Local(s) => &s.maps,
            MapTarget::Remote(s) => &s.maps,
        }
    }

    /// Has the memory behind this map stopped being shared with its owner?
    pub fn is_lost(&self) -> bool {
        match self {
            MapTarget::Local(s) => !s.client.is_alive(),
            MapTarget::Remote(s) => s.is_lost(),
        }
    }
}

pub struct Map {
    pub target: MapTarget,
    /// Stores shipping for maps of another node's segment.
    remote: Option<Arc<crate::remote::RemoteMap>>,
    /// Untracked second mapping of the same shadow bytes (remote maps), for
    /// data the library itself puts there.
    fill: Option<(NonNull<libc::c_void>, usize)>,
    base: NonNull<libc::c_void>,
    len: usize,
    /// First byte the program sees (base + offset within the first page).
    pub addr: *mut u8,
    pub size: usize,
    pub offset: u64,
    pub readonly: bool,
    unmapped: AtomicBool,
}

// SAFETY: the mapping is process-wide memory owned by this struct; the raw
// pointers are only dereferenced by callers that check bounds, and the
// memory is shared with other processes anyway (it is never Rust-aliased).
unsafe impl Send for Map {}
// SAFETY: see above; concurrent access is to the mapped memory, which the
// SISCI contract leaves to the program.
unsafe impl Sync for Map {}

impl Map {
    pub fn new(target: MapTarget, offset: u64, size: u64, flags: MapFlags) -> Result<Map> {
        if size == 0 {
            return Err(SciError::IllegalParameter);
        }
        if let MapTarget::Local(s) = &target {
            s.check_has_memory()?;
        }
        let end = offset.checked_add(size).ok_or(SciError::OutOfRange)?;
        if end > target.size() {
            return Err(SciError::OutOfRange);
        }
        let page_off = offset & !(PAGE as u64 - 1);
        let delta = (offset - page_off) as usize;
        let len = (delta + size as usize).div_ceil(PAGE) * PAGE;
        let mut mflags = MmapFlags::MAP_SHARED;
        let hint = match flags.fixed_addr {
            Some(a) => {
                if a % PAGE != delta || a < delta {
                    return Err(SciError::IllegalAddress);
                }
                mflags |= MmapFlags::MAP_FIXED_NOREPLACE;
                std::num::NonZeroUsize::new(a - delta)
            }
            None => None,
        };
        let prot = if flags.readonly { ProtFlags::PROT_READ } else { ProtFlags::PROT_READ | ProtFlags::PROT_WRITE };
        let fd = match &target {
            MapTarget::Local(s) => s.memfd.as_fd(),
            MapTarget::Remote(s) => s.memfd.as_fd(),
        };
        // SAFETY: we map a sealed memfd (its size cannot shrink under us)
        // with MAP_SHARED; with a fixed address MAP_FIXED_NOREPLACE refuses
        // to clobber existing mappings, so no Rust object is aliased.
        let base = unsafe {
            mmap(hint, std::num::NonZeroUsize::new(len).expect("len > 0"), prot, mflags, fd, page_off as i64)
        };
        let base = match base {
            Ok(b) => b,
            Err(nix::Error::EEXIST) if flags.fixed_addr.is_some() => return Err(SciError::IllegalAddress),
            Err(nix::Error::ENOMEM) => return Err(SciError::Nospc),
            Err(_) => return Err(SciError::System),
        };
        if let Some(a) = flags.fixed_addr {
            if base.as_ptr() as usize != a - delta {
                // An old kernel ignored MAP_FIXED_NOREPLACE and gave a hint.
                // SAFETY: we just created this mapping of `len` bytes.
                unsafe {
                    let _ = munmap(base, len);
                }
                return Err(SciError::IllegalAddress);
            }
        }
        // SAFETY: delta < PAGE <= len, so the result is inside the mapping.
        let addr = unsafe { base.as_ptr().cast::<u8>().add(delta) };
        let (remote, fill) = match &target {
            MapTarget::Remote(s) if s.is_remote() => match Self::track_remote(s, base, len, page_off, prot, flags.no_loopback) {
                Ok(v) => v,
                Err(e) => {
                    // SAFETY: the mapping made above, not yet handed out.
                    unsafe {
                        let _ = munmap(base, len);
                    }
                    return Err(e);
                }
            },
            _ => (None, None),
        };
        target.counter().fetch_add(1, Ordering::SeqCst);
        Ok(Map {
            target,
            remote,
            fill,
            base,
            len,
            addr,
            size: size as usize,
            offset,
            readonly: flags.readonly,
            unmapped: AtomicBool::new(false),
        })
    }

    /// Set up a map of another node's segment: the program's mapping is
    /// replaced by one of a private memfd (this map's shadow, see
    /// `remote::trapped`), mapped a second time for the library to fill.
    #[allow(clippy::type_complexity)]
    fn track_remote(
        s: &Arc<RemoteSegment>,
        base: NonNull<libc::c_void>,
        len: usize,
        page_off: u64,
        prot: ProtFlags,
        no_loopback: bool,
    ) -> Result<(Option<Arc<crate::remote::RemoteMap>>, Option<(NonNull<libc::c_void>, usize)>)> {
        let owner = match (s.owner().expect("checked by caller"), no_loopback) {
            (crate::remote::Owner::Group(g, _), true) => crate::remote::Owner::Group(g, false),
            (o, _) => o,
        };
        let shadow = nix::sys::memfd::memfd_create(c"vsci-remote-map", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).map_err(|_| SciError::Nospc)?;
        nix::unistd::ftruncate(&shadow, len as i64).map_err(|_| SciError::Nospc)?;
        let nz = std::num::NonZeroUsize::new(len).expect("len > 0");
        // SAFETY: MAP_FIXED over the mapping `new` just made at `base` (same
        // length, not yet handed out): it replaces ours, nothing else.
        unsafe { mmap(Some(std::num::NonZeroUsize::new(base.as_ptr() as usize).expect("mapped")), nz, prot, MmapFlags::MAP_SHARED | MmapFlags::MAP_FIXED, &shadow, 0) }
            .map_err(|_| SciError::Nospc)?;
        // SAFETY: a second MAP_SHARED mapping of the private memfd; nothing
        // in Rust refers to it but this map.
        let fill = unsafe { mmap(None, nz, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MmapFlags::MAP_SHARED, &shadow, 0) }.map_err(|_| SciError::Nospc)?;
        let valid = (s.size - page_off).min(len as u64) as usize;
        let readonly = !prot.contains(ProtFlags::PROT_WRITE);
        match crate::remote::RemoteMap::new(owner, base.as_ptr().cast(), len, page_off, valid, fill.as_ptr().cast(), readonly) {
            Ok(rm) => Ok((Some(rm), Some((fill, len)))),
            Err(e) => {
                // SAFETY: the fill mapping made just above.
                unsafe {
                    let _ = munmap(fill, len);
                }
                Err(e)
            }
        }
    }

    /// Is this a map of another node's segment?
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// Make every store made through this map visible at the owner.
    pub fn flush(&self) -> Result<()> {
        match &self.remote {
            Some(r) => r.flush().map(|_| ()),
            None => {
                crate::store_fence();
                Ok(())
            }
        }
    }

    /// Copy `data` to `off` within this map; for a map of another node's
    /// segment it is visible at the owner when this returns.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        if off.checked_add(data.len()).is_none_or(|e| e > self.size) {
            return Err(SciError::OutOfRange);
        }
        if self.readonly {
            return Err(SciError::IllegalOperation);
        }
        match &self.remote {
            // Offsets of the tracker count from the page-aligned start.
            Some(r) => r.write_through(self.addr as usize - self.base.as_ptr() as usize + off, data),
            None => {
                // SAFETY: bounds checked above; the map is writable shared
                // memory of at least `size` bytes at `addr`.
                unsafe { std::ptr::copy(data.as_ptr(), self.addr.add(off), data.len()) };
                crate::store_fence();
                Ok(())
            }
        }
    }

    /// Read fresh bytes from the owner at `off` within this map.
    pub fn read_fresh(&self, buf: &mut [u8], off: usize) -> Result<()> {
        if off.checked_add(buf.len()).is_none_or(|e| e > self.size) {
            return Err(SciError::OutOfRange);
        }
        match &self.target {
            MapTarget::Remote(s) if s.is_remote() => s.read_fresh(buf, self.offset + off as u64),
            _ => Err(SciError::IllegalOperation),
        }
    }

    /// Does `[p, p+n)` lie inside this map?
    pub fn contains(&self, p: usize, n: usize) -> bool {
        let a = self.addr as usize;
        p >= a && n <= self.size && p - a <= self.size - n
    }

    /// Make earlier stores visible, then unmap. Idempotent.
    pub fn unmap(&self) {
        if self.unmapped.swap(true, Ordering::SeqCst) {
            return;
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(r) = &self.remote {
            // Unmap makes earlier stores visible at the owner; a lost
            // segment has nowhere to send them.
            let _ = r.flush();
            crate::remote::flusher().remove(r);
            r.close();
        }
        // SAFETY: base/len describe the mapping created in `new`; the flag
        // above makes sure it is unmapped once.
        unsafe {
            let _ = munmap(self.base, self.len);
            if let Some((p, l)) = self.fill {
                let _ = munmap(p, l);
            }
        }
        self.target.counter().fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        self.unmap();
    }
}

/// Is `[addr, addr+size)` entirely private, writable, anonymous or heap
/// memory of this process (what a program allocates for a buffer), per
/// /proc/self/maps? Files, stacks and other segments' maps are refused.
fn is_plain_program_memory(addr: usize, size: usize) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return false };
    let end = addr + size;
    let mut covered = addr;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let path = f.nth(3).unwrap_or("");
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        if b <= covered || a >= end {
            continue;
        }
        if a > covered || !perms.starts_with("rw") || perms.as_bytes().get(3) != Some(&b'p') || !(path.is_empty() || path == "[heap]") {
            return false;
        }
        covered = b;
        if covered >= end {
            return true;
        }
    }
    false
}

/// Make the program's memory `[addr, addr+size)` (page aligned) a shared
/// mapping of `fd` from offset 0, at the same address and with the same
/// bytes.
pub(crate) fn adopt_program_memory(fd: BorrowedFd<'_>, addr: usize, size: usize) -> Result<()> {
    if !is_plain_program_memory(addr, size) {
        return Err(SciError::IllegalAddress);
    }
    let len = NonZeroUsize::new(size).ok_or(SciError::IllegalParameter)?;
    let rw = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
    // SAFETY: a fresh shared mapping of the segment's memory; nothing else
    // refers to it.
    let tmp = unsafe { mmap(None, len, rw, MmapFlags::MAP_SHARED, fd, 0) }.map_err(|_| SciError::Nospc)?;
    // SAFETY: the source was just checked to be readable memory of this
    // process, the destination is the `size` bytes mapped above, and the
    // two are different mappings. The program must not write its buffer
    // during the call (as with any SISCI call handed that memory).
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, tmp.as_ptr().cast::<u8>(), size) };
    // SAFETY: MAP_FIXED replaces exactly the page-aligned range the program
    // handed over, checked above to be plain private memory it owns; its
    // bytes are already in the segment, so the program reads at the same
    // address what it wrote there. No Rust object lives in that memory.
    let placed = unsafe { mmap(NonZeroUsize::new(addr), len, rw, MmapFlags::MAP_SHARED | MmapFlags::MAP_FIXED, fd, 0) };
    // SAFETY: the temporary mapping made above, no longer used.
    unsafe {
        let _ = munmap(tmp, size);
    }
    match placed {
        Ok(p) if p.as_ptr() as usize == addr => Ok(()),
        _ => Err(SciError::Nospc),
    }
}
