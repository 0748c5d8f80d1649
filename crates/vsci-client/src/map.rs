//! Maps: `mmap` of a segment's memfd, at any byte offset.

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::sys::mman::{mmap, munmap, MapFlags as MmapFlags, ProtFlags};
use vsci_proto::SciError;

use crate::segment::{LocalSegment, RemoteSegment};
use crate::Result;

const PAGE: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
pub struct MapFlags {
    pub readonly: bool,
    /// Map exactly at this address (must not replace anything).
    pub fixed_addr: Option<usize>,
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
        target.counter().fetch_add(1, Ordering::SeqCst);
        // SAFETY: delta < PAGE <= len, so the result is inside the mapping.
        let addr = unsafe { base.as_ptr().cast::<u8>().add(delta) };
        Ok(Map {
            target,
            base,
            len,
            addr,
            size: size as usize,
            offset,
            readonly: flags.readonly,
            unmapped: AtomicBool::new(false),
        })
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
        // SAFETY: base/len describe the mapping created in `new`; the flag
        // above makes sure it is unmapped once.
        unsafe {
            let _ = munmap(self.base, self.len);
        }
        self.target.counter().fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        self.unmap();
    }
}
