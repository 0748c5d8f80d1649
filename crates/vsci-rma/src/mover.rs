//! The byte mover of both DMA engines: a program's DMA queues
//! (`vsci-client`'s engine, in the program's process) and the node's engine
//! a guest's host side runs for guest programs (`vsci-vm`'s agent, seed
//! 003's API remoting). Both move a transfer's pieces between one local
//! side and one far side, so they share this code: what differs is only
//! where the two sides come from (the client maps its segments and takes
//! program memory; the agent holds the guest's segment memfds) and who
//! asks (a queue's worker; a thread per guest transfer).
//!
//! - the far side is on this host (a co-located segment): one copy from
//!   one mapping to the other, through no intermediate buffer, in the order
//!   `memmove` would when both are the same memory ([`copy`]);
//! - the far side is on other nodes: RMA writes straight from the local
//!   pages (up to [`WRITE_BATCH`] pieces in flight, to every target at
//!   once) and reads straight into them ([`rma`]).
//!
//! Pieces move in [`CHUNK`]s; between two, the mover asks its caller
//! whether to stop ([`Watch`]), so an abort, a LOST event or a dead node
//! stops a transfer within one chunk. Memory is reached by address
//! ([`LocalMem`]), never through a Rust reference: other processes and
//! guests store to the same segments while the engine moves them, which
//! SISCI leaves to the programs, as a hardware DMA engine does.

use vsci_proto::SciError;

use crate::{LocalMem, RemoteTarget};

/// Largest piece moved between two looks at the abort flag and at the far
/// side's health: about 100 µs of `memcpy` here, so an abort takes effect
/// promptly, and one RMA operation of a size the `tcp;ofi_rxm` provider
/// moves at full speed.
pub const CHUNK: usize = 1 << 20;

/// RMA writes posted at once before waiting (several in flight hide the
/// per-operation round trip).
pub const WRITE_BATCH: usize = 8;

/// One piece of a transfer (`dis_dma_vec_t` without its flags): `size`
/// bytes at `local_offset` of the local side and `remote_offset` of the
/// far side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub size: u64,
    pub local_offset: u64,
    pub remote_offset: u64,
}

/// Check a transfer's pieces before anything moves, as both engines do:
/// at least one and at most `max`, none empty (`SCI_ERR_ILLEGAL_PARAMETER`,
/// `SCI_ERR_MAX_ENTRIES`), each inside both sides (`SCI_ERR_OUT_OF_RANGE`).
/// Any size and offset goes: the mover copies bytes, and the RMA engine
/// moves byte ranges.
pub fn check(pieces: &[Piece], max: usize, local_len: u64, far_len: u64) -> Result<(), SciError> {
    if pieces.is_empty() {
        return Err(SciError::IllegalParameter);
    }
    if pieces.len() > max {
        return Err(SciError::MaxEntries);
    }
    for p in pieces {
        if p.size == 0 {
            return Err(SciError::IllegalParameter);
        }
        let fits = |off: u64, limit: u64| off.checked_add(p.size).is_some_and(|end| end <= limit);
        if !fits(p.local_offset, local_len) || !fits(p.remote_offset, far_len) {
            return Err(SciError::OutOfRange);
        }
    }
    Ok(())
}

/// What the mover asks its caller between chunks.
pub trait Watch {
    /// Stop now (`SCIAbortDMAQueue`): the transfer ends `Cancelled`.
    fn aborted(&self) -> bool;
    /// Far side `i` is gone (its segment lost): it fails.
    fn lost(&self, i: usize) -> bool;
    /// An RMA operation on the local memory was abandoned (its node was
    /// declared dead with it in flight): the engine may still read or write
    /// that memory later, so the caller must keep it mapped for good.
    fn abandoned(&self);
}

/// The local memory of piece `p`, `n` bytes from `off` into it.
fn local_part<'a>(local: &LocalMem<'a>, p: &Piece, off: usize, n: usize) -> LocalMem<'a> {
    local.sub(p.local_offset as usize + off, n).expect("pieces checked against the local side")
}

/// Move `pieces` between `local` and `far`, both memory of this host (a
/// co-located segment's mapping; they may be the same mapping, when a
/// program connected to its own segment). `read`: far → local. Returns
/// `Ok`, `Cancelled` or `TransferFailed` (far side 0 lost).
///
/// The caller checked the pieces against both sides ([`check`]).
pub fn copy(local: LocalMem, far: LocalMem, pieces: &[Piece], read: bool, watch: &dyn Watch) -> SciError {
    // Earlier stores by the program are in memory before the engine reads.
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    for p in pieces {
        let n = p.size as usize;
        let l = local_part(&local, p, 0, n);
        let r = far.sub(p.remote_offset as usize, n).expect("pieces checked against the far side");
        let (src, dst) = if read { (r.as_ptr(), l.as_ptr()) } else { (l.as_ptr(), r.as_ptr()) };
        // Both sides may be the same memory: copy chunks in the order
        // memmove would, so an overlapping move stays correct.
        let backward = (dst as usize) > (src as usize) && (dst as usize) < (src as usize) + n;
        let chunks = n.div_ceil(CHUNK);
        for i in 0..chunks {
            if watch.aborted() {
                return SciError::Cancelled;
            }
            if watch.lost(0) {
                return SciError::TransferFailed;
            }
            let k = if backward { chunks - 1 - i } else { i };
            let off = k * CHUNK;
            let len = CHUNK.min(n - off);
            // SAFETY: src/dst + off + len lie inside `l` and `r` (off + len
            // <= n, their length), which are memory LocalMem's contract
            // keeps mapped for this call; ptr::copy allows overlap; no Rust
            // reference is made over the bytes others may store to.
            unsafe { std::ptr::copy(src.add(off), dst.add(off), len) };
        }
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    SciError::Ok
}

/// Move `pieces` between `local` and segments of other nodes: a read from
/// `targets[0]` (`read`), or a write to every target at once (every
/// target's writes of a batch are posted before any is waited for). One
/// status per target (`Ok`, `Cancelled` or `TransferFailed`); a target that
/// fails or is lost is left out of the rest of the transfer.
///
/// `direct_reads`: reads land straight in `local` (segment memory the
/// caller keeps mapped for good once [`Watch::abandoned`] ran). Otherwise
/// `local` is memory that must never receive a late write from an
/// abandoned read (a program's own buffer), and reads go through a buffer
/// of the mover's.
///
/// The caller checked the pieces against both sides ([`check`]).
pub fn rma(
    local: LocalMem,
    direct_reads: bool,
    targets: &[&RemoteTarget],
    pieces: &[Piece],
    read: bool,
    watch: &dyn Watch,
) -> Vec<SciError> {
    let mut status = vec![SciError::Ok; targets.len()];
    let going = |status: &[SciError]| status.contains(&SciError::Ok);
    let abandoned = |r: &crate::RmaResult| {
        if matches!(r, Err(crate::Error::Abandoned)) {
            watch.abandoned();
        }
    };
    for p in pieces {
        let n = p.size as usize;
        let mut off = 0usize;
        while off < n && going(&status) {
            if watch.aborted() {
                return vec![SciError::Cancelled; targets.len()];
            }
            for (i, s) in status.iter_mut().enumerate() {
                if watch.lost(i) {
                    *s = SciError::TransferFailed;
                }
            }
            let roff = p.remote_offset + off as u64;
            if read {
                let len = CHUNK.min(n - off);
                let dst = local_part(&local, p, off, len);
                let ok = if direct_reads {
                    let r = targets[0].read_direct_mem(dst, roff);
                    abandoned(&r);
                    r.inspect_err(|e| log::warn!("vsci: DMA read failed: {e}")).is_ok()
                } else {
                    targets[0].read_bounced(dst, roff).is_ok()
                };
                if !ok {
                    status[0] = SciError::TransferFailed;
                }
                off += len;
                continue;
            }
            let batch = (CHUNK * WRITE_BATCH).min(n - off);
            let mut runs: Vec<(LocalMem, u64)> = Vec::with_capacity(WRITE_BATCH);
            let mut b = 0;
            while b < batch {
                let len = CHUNK.min(batch - b);
                runs.push((local_part(&local, p, off + b, len), roff + b as u64));
                b += len;
            }
            let live: Vec<usize> = (0..targets.len()).filter(|&i| status[i] == SciError::Ok).collect();
            let results = if let [only] = live[..] {
                vec![targets[only].write_direct_mem(&runs)]
            } else {
                let fabric = targets[live[0]].fabric();
                let to: Vec<_> = live.iter().map(|&i| (&**targets[i].peer(), targets[i].region())).collect();
                fabric.write_many_ordered_multi_mem(&to, &runs, &[])
            };
            for (&i, r) in live.iter().zip(&results) {
                abandoned(r);
                if let Err(e) = r {
                    log::warn!("vsci: DMA write failed: {e}");
                    status[i] = SciError::TransferFailed;
                }
            }
            off += batch;
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    struct Flags {
        abort_after: Cell<usize>,
        lost: bool,
        abandoned: Cell<bool>,
    }

    impl Watch for Flags {
        fn aborted(&self) -> bool {
            let n = self.abort_after.get();
            self.abort_after.set(n.saturating_sub(1));
            n == 0
        }
        fn lost(&self, _: usize) -> bool {
            self.lost
        }
        fn abandoned(&self) {
            self.abandoned.set(true);
        }
    }

    fn running() -> Flags {
        Flags { abort_after: Cell::new(usize::MAX), lost: false, abandoned: Cell::new(false) }
    }

    fn piece(size: u64, local_offset: u64, remote_offset: u64) -> Piece {
        Piece { size, local_offset, remote_offset }
    }

    #[test]
    fn pieces_are_checked_against_both_sides() {
        assert_eq!(check(&[], 4, 10, 10), Err(SciError::IllegalParameter));
        assert_eq!(check(&[piece(0, 0, 0)], 4, 10, 10), Err(SciError::IllegalParameter));
        assert_eq!(check(&[piece(1, 0, 0); 5], 4, 10, 10), Err(SciError::MaxEntries));
        assert_eq!(check(&[piece(5, 6, 0)], 4, 10, 10), Err(SciError::OutOfRange));
        assert_eq!(check(&[piece(5, 0, 6)], 4, 10, 10), Err(SciError::OutOfRange));
        assert_eq!(check(&[piece(u64::MAX, 1, 0)], 4, 10, 10), Err(SciError::OutOfRange));
        assert_eq!(check(&[piece(10, 0, 0), piece(1, 9, 9)], 4, 10, 10), Ok(()));
    }

    #[test]
    fn copies_both_ways_and_like_memmove_within_one_memory() {
        let mut a: Vec<u8> = (0..3 * CHUNK).map(|i| i as u8).collect();
        let want_b: Vec<u8> = [0, 0, 0].into_iter().chain(a[1..2 * CHUNK + 6].iter().copied()).collect();
        let mut b = vec![0u8; 3 * CHUNK];
        let (la, lb) = (LocalMem::from_mut(&mut a), LocalMem::from_mut(&mut b));
        assert_eq!(copy(la, lb, &[piece(2 * CHUNK as u64 + 5, 1, 3)], false, &running()), SciError::Ok);
        assert_eq!(copy(la, lb, &[piece(7, 100, 0)], true, &running()), SciError::Ok);
        assert_eq!(&b[..2 * CHUNK + 8], &want_b[..]);
        assert_eq!(&a[100..107], &[0, 0, 0, 1, 2, 3, 4]);
        // One memory, overlapping forward: the bytes move as memmove's do.
        let mut c: Vec<u8> = (0..2 * CHUNK + 10).map(|i| (i % 251) as u8).collect();
        let want: Vec<u8> = c[..2 * CHUNK].to_vec();
        let lc = LocalMem::from_mut(&mut c);
        assert_eq!(copy(lc, lc, &[piece(2 * CHUNK as u64, 0, 10)], false, &running()), SciError::Ok);
        assert_eq!(&c[10..2 * CHUNK + 10], &want[..]);
    }

    #[test]
    fn stops_between_chunks() {
        let mut a = vec![1u8; 3 * CHUNK];
        let mut b = vec![0u8; 3 * CHUNK];
        let (la, lb) = (LocalMem::from_mut(&mut a), LocalMem::from_mut(&mut b));
        let w = running();
        w.abort_after.set(1);
        assert_eq!(copy(la, lb, &[piece(3 * CHUNK as u64, 0, 0)], false, &w), SciError::Cancelled);
        let lost = Flags { lost: true, ..running() };
        assert_eq!(copy(la, lb, &[piece(1, 0, 0)], false, &lost), SciError::TransferFailed);
        assert!(!lost.abandoned.get());
        assert_eq!(b.iter().filter(|&&x| x == 1).count(), CHUNK, "one chunk moved before the abort");
    }
}
