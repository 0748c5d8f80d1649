//! Memory a function's DMA reaches: one VM's memory, either another node's
//! segment (moved by the RMA engine) or, for a VM on the device host
//! itself (the seed's single-host SR-IOV baseline), the segment mapped here.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use vm_memory::VolatileSlice;
use vsci_client::{PostedDma, RemoteInterrupt, RemoteSegment, SciError};

/// A shared mapping of a memfd, unmapped on drop. Other parties write the
/// memory at any time (the device's engine, the hypervisor, the VM), so it
/// is reached only through [`VolatileSlice`]s ([`slice`](Self::slice)),
/// never as a Rust slice, whose bytes the compiler may assume unchanging.
pub struct Mapping(vsci_sys::Mapping);

impl Mapping {
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> anyhow::Result<Mapping> {
        anyhow::ensure!(len > 0, "empty mapping");
        // The memfd is at least `len` bytes (callers pass its size).
        Ok(Mapping(vsci_sys::MapOptions::shared().map(fd, len, 0)?))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mapped bytes `[off, off + n)`.
    pub fn slice(&self, off: u64, n: usize) -> Result<VolatileSlice<'_>, SciError> {
        let p = usize::try_from(off).ok().and_then(|o| self.0.ptr_at(o, n)).ok_or(SciError::OutOfRange)?;
        // SAFETY: in bounds of our mapping (checked), which stays mapped
        // while `self` is borrowed; nothing makes Rust references to it.
        Ok(unsafe { VolatileSlice::new(p, n) })
    }

    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), SciError> {
        self.slice(off, buf.len())?.copy_to(buf);
        Ok(())
    }

    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), SciError> {
        self.slice(off, data.len())?.copy_from(data);
        Ok(())
    }

    /// Descriptor `idx` of the ring of `len` entries at offset `ring`, read
    /// after everything the device stored before it (its status last).
    pub fn desc(&self, ring: u64, len: u32, idx: u32) -> crate::regs::Desc {
        let mut b = [0u8; crate::regs::DESC];
        self.read(ring + u64::from(idx % len) * crate::regs::DESC as u64, &mut b)
            .expect("rings lie inside the mapping");
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        crate::regs::Desc::decode(&b)
    }

    pub fn set_desc(&self, ring: u64, len: u32, idx: u32, d: crate::regs::Desc) {
        self.write(ring + u64::from(idx % len) * crate::regs::DESC as u64, &d.encode())
            .expect("rings lie inside the mapping");
    }
}

/// Consecutive pieces `(length, offset)` as byte ranges of one buffer.
fn ranges(pieces: &[(usize, u64)]) -> Vec<(std::ops::Range<usize>, u64)> {
    let mut at = 0;
    pieces
        .iter()
        .map(|&(n, off)| {
            at += n;
            (at - n..at, off)
        })
        .collect()
}

fn runs<'a>(b: &'a [u8], v: &[(std::ops::Range<usize>, u64)]) -> Vec<(&'a [u8], u64)> {
    v.iter().map(|(r, o)| (&b[r.clone()], *o)).collect()
}

/// One VM's memory as its function's DMA reaches it.
pub struct VmMemory {
    pub seg: Arc<RemoteSegment>,
    local: Option<Mapping>,
}

impl VmMemory {
    pub fn new(seg: Arc<RemoteSegment>) -> anyhow::Result<VmMemory> {
        let local = match seg.local_memfd() {
            Some(fd) => Some(Mapping::new(fd, seg.size as usize)?),
            None => None,
        };
        Ok(VmMemory { seg, local })
    }

    pub fn is_remote(&self) -> bool {
        self.local.is_none()
    }

    /// Read consecutive pieces of `buf`: `(length, offset)` each. The
    /// buffer is ours: if the engine abandoned the reads it may still write
    /// into it, so it is then kept for good.
    pub fn read(&self, mut buf: Vec<u8>, pieces: &[(usize, u64)]) -> Result<Vec<u8>, SciError> {
        if let Some(m) = &self.local {
            let mut at = 0;
            for &(n, off) in pieces {
                m.read(off, &mut buf[at..at + n])?;
                at += n;
            }
            return Ok(buf);
        }
        let r = {
            let mut rest: &mut [u8] = &mut buf;
            let mut ops = Vec::with_capacity(pieces.len());
            for &(n, off) in pieces {
                let (a, b) = std::mem::take(&mut rest).split_at_mut(n);
                ops.push((a, off));
                rest = b;
            }
            self.seg.dma_read_many(&mut ops)
        };
        match r {
            Ok(()) => Ok(buf),
            Err((e, abandoned)) => {
                if abandoned {
                    std::mem::forget(buf);
                }
                Err(e)
            }
        }
    }

    /// Can [`write_posted`](Self::write_posted) be followed by a trigger
    /// of `irq` without waiting (the trigger arrives after the bytes)?
    /// Always for this host's memory, which is written before the call
    /// returns.
    pub fn posted_then_trigger_ordered(&self, irq: &RemoteInterrupt) -> bool {
        self.local.is_some() || self.seg.posted_then_trigger_ordered(irq)
    }

    /// [`write`](Self::write) without waiting for another node's memory:
    /// the writes are posted in order (`then` after `data`) and the handle
    /// returned, to be reaped with [`posted_done`](Self::posted_done) and
    /// [`posted_finish`](Self::posted_finish). This host's memory is
    /// written at once (None).
    pub fn write_posted(
        &self,
        mut data: Vec<u8>,
        pieces: &[(usize, u64)],
        then: Vec<u8>,
        then_pieces: &[(usize, u64)],
    ) -> Result<Option<PostedDma>, SciError> {
        if self.local.is_some() {
            return self.write(data, pieces, then, then_pieces).map(|()| None);
        }
        let mut runs = ranges(pieces);
        let at = data.len();
        runs.extend(ranges(then_pieces).into_iter().map(|(r, off)| (r.start + at..r.end + at, off)));
        data.extend_from_slice(&then);
        self.seg.dma_write_posted(data, &runs).map(Some)
    }

    pub fn posted_done(&self, p: &PostedDma) -> bool {
        self.seg.dma_posted_done(p)
    }

    pub fn posted_finish(&self, p: PostedDma) -> Result<(), SciError> {
        self.seg.dma_posted_finish(p)
    }

    /// Write `data`'s consecutive pieces, then `then`'s: everything in
    /// `then` lands after everything in `data`.
    pub fn write(
        &self,
        data: Vec<u8>,
        pieces: &[(usize, u64)],
        then: Vec<u8>,
        then_pieces: &[(usize, u64)],
    ) -> Result<(), SciError> {
        let (d, t) = (ranges(pieces), ranges(then_pieces));
        if let Some(m) = &self.local {
            for (r, off) in &d {
                m.write(*off, &data[r.clone()])?;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            for (r, off) in &t {
                m.write(*off, &then[r.clone()])?;
            }
            return Ok(());
        }
        let r = self.seg.dma_write_ordered(&runs(&data, &d), &runs(&then, &t));
        match r {
            Ok(()) => Ok(()),
            Err((e, abandoned)) => {
                if abandoned {
                    std::mem::forget(data);
                    std::mem::forget(then);
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_is_reached_through_bounds_checked_volatile_slices() {
        let fd =
            nix::sys::memfd::memfd_create(c"vsci-mem-test", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&fd, 8192).unwrap();
        let m = Mapping::new(std::os::fd::AsFd::as_fd(&fd), 8192).unwrap();
        m.write(4090, b"abcdef").unwrap();
        let mut b = [0u8; 6];
        assert_eq!(m.slice(4090, 6).unwrap().copy_to(&mut b), 6);
        assert_eq!(&b, b"abcdef");
        m.slice(8191, 1).unwrap().copy_from(b"z");
        m.read(8191, &mut b[..1]).unwrap();
        assert_eq!(b[0], b'z');
        assert_eq!(m.slice(8190, 3).unwrap_err(), SciError::OutOfRange);
        assert_eq!(m.read(u64::MAX, &mut b).unwrap_err(), SciError::OutOfRange);
        assert_eq!(m.write(8192, b"x").unwrap_err(), SciError::OutOfRange);
    }
}
