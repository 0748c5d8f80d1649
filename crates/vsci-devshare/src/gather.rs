//! Few large DMA operations instead of many small ones.
//!
//! Over the RMA engine every operation costs about the same whatever its
//! size (a message, a completion, an acknowledgement from the owner's
//! engine), so a batch of frames written one operation per frame, and one
//! per descriptor, costs the owner's node a core at a fraction of the
//! link's bandwidth. Buffers a driver posts usually sit next to each other
//! (a ring of equal buffers, a descriptor ring), so the device writes a
//! run of them as one operation, and reads neighbouring transmit buffers
//! as one span.
//!
//! Every range is still checked by the function's IOMMU context: a merged
//! run is translated as a whole, and only merged when that succeeds.

use crate::iommu::{Access, Context, Fault};

/// Bytes of zeros a write may carry to join two buffers: the unused tail of
/// a receive buffer before the next one (a 1518-byte frame in a 2 KiB
/// buffer leaves 530).
const MAX_PAD: u64 = 4096;
/// Bytes a read may fetch between two transmit buffers to read them as one.
const MAX_GAP: u64 = 4096;

/// The bytes and `(length, offset)` pieces of one DMA write into buffers
/// of the VM.
pub struct Gather<'a> {
    iommu: &'a Context,
    pub data: Vec<u8>,
    pub pieces: Vec<(usize, u64)>,
    /// The open run: its first DVA and the DVA where the last buffer it
    /// wrote ends (its capacity, not just the bytes written).
    run: Option<(u64, u64)>,
}

impl<'a> Gather<'a> {
    pub fn new(iommu: &'a Context) -> Gather<'a> {
        Gather { iommu, data: Vec::new(), pieces: Vec::new(), run: None }
    }

    /// Store `bytes` at the start of the buffer at `dva` of `cap` bytes
    /// (which the device owns until it hands the buffer back, so the unused
    /// tail may be overwritten to join the next buffer). Nothing is stored
    /// if the buffer is not writable in the function's context.
    pub fn put(&mut self, dva: u64, cap: u64, bytes: &[u8]) -> Result<(), Fault> {
        let n = bytes.len() as u64;
        let off = self.iommu.translate(dva, n.max(1), Access::Write)?;
        let end = dva.saturating_add(cap.max(n));
        if let (Some((start, cap_end)), Some(last)) = (self.run, self.pieces.last_mut()) {
            let written_end = start + last.0 as u64;
            let pad = cap_end - written_end;
            if dva == cap_end && pad <= MAX_PAD && self.iommu.translate(start, dva + n - start, Access::Write).is_ok() {
                self.data.resize(self.data.len() + pad as usize, 0);
                self.data.extend_from_slice(bytes);
                last.0 += (pad + n) as usize;
                self.run = Some((start, end));
                return Ok(());
            }
        }
        self.data.extend_from_slice(bytes);
        self.pieces.push((bytes.len(), off));
        self.run = Some((dva, end));
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }
}

/// Reads of `(DVA, length)` ranges, joined into spans where neighbours
/// are close and the span is readable as a whole.
pub struct Spans {
    /// `(length, offset)` of each read.
    pub pieces: Vec<(usize, u64)>,
    /// For each range asked: where its bytes start in the read buffer.
    pub at: Vec<usize>,
    pub total: usize,
}

/// Plan the reads of `ranges` (each already checked readable).
pub fn spans(iommu: &Context, ranges: &[(u64, u64)]) -> Result<Spans, Fault> {
    let mut s = Spans { pieces: Vec::new(), at: Vec::with_capacity(ranges.len()), total: 0 };
    // The open span: first DVA and end DVA.
    let mut open: Option<(u64, u64)> = None;
    for &(dva, n) in ranges {
        if let (Some((start, end)), Some(last)) = (open, s.pieces.last_mut()) {
            let new_end = end.max(dva + n);
            if dva >= start && dva <= end + MAX_GAP && iommu.translate(start, new_end - start, Access::Read).is_ok() {
                s.at.push(s.total - last.0 + (dva - start) as usize);
                s.total += (new_end - end) as usize;
                last.0 = (new_end - start) as usize;
                open = Some((start, new_end));
                continue;
            }
        }
        let off = iommu.translate(dva, n, Access::Read)?;
        s.at.push(s.total);
        s.pieces.push((n as usize, off));
        s.total += n as usize;
        open = Some((dva, dva + n));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iommu::Grant;

    fn ctx() -> Context {
        Context::new(vec![Grant { dva: 0x1000, len: 0x10000, offset: 0x1000, read: true, write: true }])
    }

    #[test]
    fn neighbouring_buffers_are_one_write() {
        let c = ctx();
        let mut g = Gather::new(&c);
        g.put(0x2000, 2048, &[1; 1514]).unwrap();
        g.put(0x2800, 2048, &[2; 60]).unwrap();
        // Not next to the last buffer's end: a run of its own.
        g.put(0x8000, 2048, &[3; 100]).unwrap();
        assert_eq!(g.pieces, vec![(2048 + 60, 0x2000), (100, 0x8000)]);
        assert_eq!(g.data.len(), 2048 + 60 + 100);
        assert!(g.data[1514..2048].iter().all(|&b| b == 0));
        assert_eq!(g.data[2048], 2);
    }

    #[test]
    fn a_buffer_outside_the_grant_is_refused_and_never_joined() {
        let c = ctx();
        let mut g = Gather::new(&c);
        g.put(0x10800, 2048, &[1; 100]).unwrap();
        // Right after the last buffer, but outside the grant.
        assert!(g.put(0x11000, 2048, &[2; 100]).is_err());
        assert_eq!(g.pieces, vec![(100, 0x10800)]);
    }

    #[test]
    fn descriptors_join() {
        let c = ctx();
        let mut g = Gather::new(&c);
        for i in 0..4u64 {
            g.put(0x1000 + 16 * i, 16, &[i as u8; 16]).unwrap();
        }
        assert_eq!(g.pieces, vec![(64, 0x1000)]);
    }

    #[test]
    fn close_reads_share_a_span() {
        let c = ctx();
        let s = spans(&c, &[(0x2000, 1514), (0x2800, 60), (0x9000, 10)]).unwrap();
        assert_eq!(s.pieces, vec![(0x800 + 60, 0x2000), (10, 0x9000)]);
        assert_eq!(s.at, vec![0, 0x800, 0x800 + 60]);
        assert_eq!(s.total, 0x800 + 70);
        // A range outside the grant faults.
        assert!(spans(&c, &[(0x20000, 4)]).is_err());
    }
}
