//! Memory borrowed from other vsci nodes, put to use.
//!
//! [`LoanStore`] is a byte store striped over loans from one or more
//! lenders (`vscid --lend`): offset `o` lives in stripe `o / stripe`, and
//! stripes go round the lenders in turn, so sequential I/O spreads over
//! every lender's link and engine. Reads and writes are RMA operations to
//! the lenders' memory; no daemon is on the path and the lenders copy
//! nothing.
//!
//! `vsci blockdev` serves it as a block device (an NBD export: QEMU's NBD
//! client, the kernel's `nbd` driver and libnbd's tools read it).
//! [`pagestore`] keeps page-sized objects in loans (tmem), [`memext`]
//! backs a range of virtual memory with them.

pub mod memext;
pub mod pagestore;

use std::io;

use vsci_client::{Client, Loan, SciError};

/// Default stripe: large enough that one NBD request of up to a few
/// hundred KiB is one or two RMA operations, small enough to spread a
/// stream over several lenders.
pub const DEFAULT_STRIPE: u64 = 1 << 20;

pub struct LoanStore {
    loans: Vec<Loan>,
    stripe: u64,
    size: u64,
}

fn io_error(what: &str, e: SciError) -> io::Error {
    io::Error::other(format!("{what}: {} ({e})", e.c_name()))
}

/// (loan, offset in the loan, position in the caller's buffer, length).
type Piece = (usize, u64, usize, usize);

/// Split `[offset, offset + len)` of a store of `size` bytes striped over
/// `n` loans into pieces, one per stripe it touches.
fn pieces(size: u64, stripe: u64, n: usize, offset: u64, len: usize) -> io::Result<Vec<Piece>> {
    let end = offset
        .checked_add(len as u64)
        .filter(|e| *e <= size)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "beyond the end of the store"))?;
    let n = n as u64;
    let mut out = Vec::new();
    let mut o = offset;
    while o < end {
        let s = o / stripe;
        let within = o % stripe;
        let take = (stripe - within).min(end - o);
        out.push(((s % n) as usize, (s / n) * stripe + within, (o - offset) as usize, take as usize));
        o += take;
    }
    Ok(out)
}

impl LoanStore {
    /// Borrow `size` bytes spread over `lenders` (each lends an equal
    /// share, whole stripes). Everything borrowed is given back if any
    /// lender refuses.
    pub fn borrow(client: &Client, lenders: &[u32], size: u64, stripe: u64) -> Result<LoanStore, SciError> {
        if lenders.is_empty() || size == 0 || stripe == 0 || !stripe.is_multiple_of(4096) {
            return Err(SciError::IllegalParameter);
        }
        let stripes = size.div_ceil(stripe);
        let per_lender = stripes.div_ceil(lenders.len() as u64) * stripe;
        let mut loans = Vec::with_capacity(lenders.len());
        for &node in lenders {
            // On error the loans so far are dropped, which gives them back.
            loans.push(client.borrow(node, per_lender)?);
        }
        Ok(LoanStore { loans, stripe, size })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn lenders(&self) -> Vec<u32> {
        self.loans.iter().map(|l| l.node_id()).collect()
    }

    fn pieces(&self, offset: u64, len: usize) -> io::Result<Vec<Piece>> {
        pieces(self.size, self.stripe, self.loans.len(), offset, len)
    }

    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        for (loan, at, pos, len) in self.pieces(offset, buf.len())? {
            self.loans[loan].read(&mut buf[pos..pos + len], at).map_err(|e| io_error("reading lent memory", e))?;
        }
        Ok(())
    }

    /// Write `data` at `offset`: at the lenders when this returns.
    pub fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let pieces = self.pieces(offset, data.len())?;
        for loan in 0..self.loans.len() {
            let runs: Vec<(&[u8], u64)> =
                pieces.iter().filter(|p| p.0 == loan).map(|&(_, at, pos, len)| (&data[pos..pos + len], at)).collect();
            if !runs.is_empty() {
                self.loans[loan].write_many(&runs).map_err(|e| io_error("writing lent memory", e))?;
            }
        }
        Ok(())
    }

    /// Fill each `(buffer, offset)` request, straight into the buffers (as
    /// [`Loan::read_vec`] does): every loan gets one batched read for
    /// all of its pieces, so the requests share one wait instead of paying
    /// a round trip each. Loans are read one after the other. One result
    /// per request; a failed loan read fails every request with a piece in
    /// it. A buffer the engine abandoned is leaked and left empty (the
    /// engine may still write into it).
    pub fn read_many(&self, reqs: &mut [(Vec<u8>, u64)]) -> Vec<io::Result<()>> {
        let mut results: Vec<io::Result<()>> = reqs.iter().map(|_| Ok(())).collect();
        // Per loan: which request each buffer belongs to (and where in it
        // when a request spans stripes), and the buffers with loan offsets.
        let mut groups: Vec<(Vec<(usize, Option<usize>)>, Vec<(Vec<u8>, u64)>)> =
            (0..self.loans.len()).map(|_| Default::default()).collect();
        for (i, (buf, offset)) in reqs.iter_mut().enumerate() {
            match self.pieces(*offset, buf.len()) {
                Err(e) => results[i] = Err(e),
                Ok(p) if p.len() == 1 => {
                    let (loan, at, _, _) = p[0];
                    groups[loan].0.push((i, None));
                    groups[loan].1.push((std::mem::take(buf), at));
                }
                // Spanning stripes (rare with large stripes): the request's
                // buffer cannot be lent to several loans' reads at once, so
                // its pieces land in buffers of their own and are copied.
                Ok(p) => {
                    for (loan, at, pos, len) in p {
                        groups[loan].0.push((i, Some(pos)));
                        groups[loan].1.push((vec![0u8; len], at));
                    }
                }
            }
        }
        for (loan, (parts, mut bufs)) in groups.into_iter().enumerate() {
            if bufs.is_empty() {
                continue;
            }
            let r = self.loans[loan].read_many(&mut bufs);
            for ((i, pos), (b, _)) in parts.into_iter().zip(bufs) {
                if let Err(e) = r {
                    if results[i].is_ok() {
                        results[i] = Err(io_error("reading lent memory", e));
                    }
                }
                match pos {
                    None => reqs[i].0 = b,
                    Some(pos) if r.is_ok() => reqs[i].0[pos..pos + b.len()].copy_from_slice(&b),
                    Some(_) => {}
                }
            }
        }
        results
    }

    /// Write each `(data, offset)` request: every loan gets one batched
    /// write for all of its pieces, all at the lenders when this returns.
    /// One result per request; a failed loan write fails every request
    /// with a piece in it.
    pub fn write_many(&self, reqs: &[(&[u8], u64)]) -> Vec<io::Result<()>> {
        let mut results: Vec<io::Result<()>> = reqs.iter().map(|_| Ok(())).collect();
        let mut groups: Vec<(Vec<usize>, Vec<(&[u8], u64)>)> =
            (0..self.loans.len()).map(|_| Default::default()).collect();
        for (i, &(data, offset)) in reqs.iter().enumerate() {
            match self.pieces(offset, data.len()) {
                Err(e) => results[i] = Err(e),
                Ok(p) => {
                    for (loan, at, pos, len) in p {
                        groups[loan].0.push(i);
                        groups[loan].1.push((&data[pos..pos + len], at));
                    }
                }
            }
        }
        for (loan, (owners, runs)) in groups.into_iter().enumerate() {
            if runs.is_empty() {
                continue;
            }
            if let Err(e) = self.loans[loan].write_many(&runs) {
                for i in owners {
                    if results[i].is_ok() {
                        results[i] = Err(io_error("writing lent memory", e));
                    }
                }
            }
        }
        results
    }
}

#[cfg(test)]
mod tests {
    use super::pieces;

    #[test]
    fn pieces_follow_the_stripes_round_the_lenders() {
        let p = pieces(10 * 4096, 4096, 3, 4096 - 10, 4096 * 3 + 20).unwrap();
        assert_eq!(
            p,
            vec![(0, 4086, 0, 10), (1, 0, 10, 4096), (2, 0, 4106, 4096), (0, 4096, 8202, 4096), (1, 4096, 12298, 10)]
        );
        assert_eq!(pieces(10 * 4096, 4096, 3, 0, 0).unwrap(), vec![]);
        assert!(pieces(10 * 4096, 4096, 3, 10 * 4096 - 1, 2).is_err(), "past the end");
        assert!(pieces(10 * 4096, 4096, 3, u64::MAX, 2).is_err(), "overflow");
        // Every byte lands exactly once, at distinct loan addresses.
        let mut seen = std::collections::HashSet::new();
        for (loan, at, _, len) in pieces(10 * 4096, 4096, 3, 0, 10 * 4096).unwrap() {
            for b in at..at + len as u64 {
                assert!(seen.insert((loan, b)));
            }
        }
        assert_eq!(seen.len(), 10 * 4096);
    }
}
