//! Maps: `mmap` of a segment's memfd, at any byte offset.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use vsci_proto::SciError;
use vsci_sys::{MapOptions, Mapping, Prot};

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
    /// The program's mapping and, for remote maps, an untracked second
    /// mapping of the same shadow bytes, for data the library itself puts
    /// there; taken (unmapped) by `unmap`.
    maps: Mutex<Option<(Mapping, Option<Mapping>)>>,
    /// Where the program's mapping starts (page aligned).
    base: usize,
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
        let mut opts = MapOptions::shared();
        if let Some(a) = flags.fixed_addr {
            if a % PAGE != delta || a < delta {
                return Err(SciError::IllegalAddress);
            }
            // MAP_FIXED_NOREPLACE: refuses to clobber existing mappings.
            opts = opts.at(a - delta);
        }
        let prot = if flags.readonly { Prot::Read } else { Prot::ReadWrite };
        let fd = match &target {
            MapTarget::Local(s) => s.memfd.as_fd(),
            MapTarget::Remote(s) => s.memfd.as_fd(),
        };
        // A sealed memfd: its size cannot shrink under us.
        let base = match opts.prot(prot).map(fd, len, page_off) {
            Ok(b) => b,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && flags.fixed_addr.is_some() => {
                return Err(SciError::IllegalAddress)
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => return Err(SciError::Nospc),
            Err(_) => return Err(SciError::System),
        };
        // delta < PAGE <= len: inside the mapping.
        let addr = base.ptr_at(delta, size as usize).expect("the map lies inside its mapping");
        let (remote, fill) = match &target {
            // On an error the mapping made above is dropped (unmapped).
            MapTarget::Remote(s) if s.is_remote() => Self::track_remote(s, &base, page_off, prot, flags.no_loopback)?,
            _ => (None, None),
        };
        target.counter().fetch_add(1, Ordering::SeqCst);
        Ok(Map {
            target,
            remote,
            base: base.addr(),
            maps: Mutex::new(Some((base, fill))),
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
    fn track_remote(
        s: &Arc<RemoteSegment>,
        base: &Mapping,
        page_off: u64,
        prot: Prot,
        no_loopback: bool,
    ) -> Result<(Option<Arc<crate::remote::RemoteMap>>, Option<Mapping>)> {
        let owner = match (s.owner().expect("checked by caller"), no_loopback) {
            (crate::remote::Owner::Group(g, _), true) => crate::remote::Owner::Group(g, false),
            (o, _) => o,
        };
        let len = base.len();
        let shadow = vsci_sys::memfd::create(c"vsci-remote-map", len as u64, vsci_sys::memfd::Seals::NONE)
            .map_err(|_| SciError::Nospc)?;
        // SAFETY: the mapping `new` just made (not yet handed out, so
        // nothing uses it) becomes the shadow, which is `len` bytes long.
        unsafe { base.replace(shadow.as_fd(), 0, prot) }.map_err(|_| SciError::Nospc)?;
        // A second shared mapping of the private memfd.
        let fill = MapOptions::shared().map(shadow.as_fd(), len, 0).map_err(|_| SciError::Nospc)?;
        let valid = (s.size - page_off).min(len as u64) as usize;
        let readonly = prot != Prot::ReadWrite;
        // On an error `fill` is dropped (unmapped).
        let group = matches!(owner, crate::remote::Owner::Group(..));
        let rm = crate::remote::RemoteMap::new(owner, base.as_ptr(), len, page_off, valid, fill.as_ptr(), readonly)?;
        if !group {
            rm.watch_lost(s.events.clone());
        }
        Ok((Some(rm), Some(fill)))
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
            Some(r) => r.write_through(self.addr as usize - self.base + off, data),
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
        drop(self.maps.lock().unwrap_or_else(|e| e.into_inner()).take());
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
        if a > covered
            || !perms.starts_with("rw")
            || perms.as_bytes().get(3) != Some(&b'p')
            || !(path.is_empty() || path == "[heap]")
        {
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
    if size == 0 {
        return Err(SciError::IllegalParameter);
    }
    // A fresh shared mapping of the segment's memory.
    let tmp = MapOptions::shared().map(fd, size, 0).map_err(|_| SciError::Nospc)?;
    // SAFETY: the source was just checked to be readable memory of this
    // process, the destination is the `size` bytes mapped above, and the
    // two are different mappings. The program must not write its buffer
    // during the call (as with any SISCI call handed that memory).
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, tmp.as_ptr(), size) };
    // SAFETY: MAP_FIXED replaces exactly the page-aligned range the program
    // handed over, checked above to be plain private memory it owns; its
    // bytes are already in the segment, so the program reads at the same
    // address what it wrote there. No Rust object lives in that memory. The
    // new mapping is the program's, as the old one was.
    let placed = unsafe { vsci_sys::mman::map_fixed(addr, size, Prot::ReadWrite, fd, 0) };
    // The temporary mapping is unmapped here.
    drop(tmp);
    placed.map_err(|_| SciError::Nospc)
}
