//! Memory borrowed from another node's lending pool.
//!
//! A [`Loan`] is a zero-filled range of another node's memory that only
//! this program holds. Reads and writes are RMA operations of this
//! process's engine endpoint straight to the lender's registered memory:
//! neither daemon is on the path and the lender copies nothing. When the
//! lender dies, operations fail (`SCI_ERR_TRANSFER_FAILED`) instead of
//! waiting; the loan's contents are then gone.

use std::sync::atomic::{AtomicBool, Ordering};

use vsci_proto::{ObjId, Reply, Request, SciError};

use crate::conn::Client;
use crate::remote::RemoteTarget;
use crate::Result;

pub struct Loan {
    client: Client,
    id: ObjId,
    node_id: u32,
    size: u64,
    target: RemoteTarget,
    returned: AtomicBool,
}

impl Client {
    /// Borrow `size` bytes of node `node_id`'s lending pool
    /// (`SCI_ERR_NOSPC` when it has not that much left,
    /// `SCI_ERR_NO_SUCH_NODEID` for a node not in the cluster).
    pub fn borrow(&self, node_id: u32, size: u64) -> Result<Loan> {
        let (reply, _) = self.call(Request::Borrow { node_id, size })?;
        let Reply::Borrowed { loan, node_id, size: granted, access } = reply else { return Err(SciError::System) };
        let give_back = |e| {
            let _ = self.call(Request::ReturnLoan { loan });
            Err(e)
        };
        if granted != size || access.region.len < size {
            return give_back(SciError::System);
        }
        match RemoteTarget::new(&access) {
            Ok(target) => {
                Ok(Loan { client: self.clone(), id: loan, node_id, size, target, returned: AtomicBool::new(false) })
            }
            Err(e) => give_back(e),
        }
    }
}

fn transfer_failed(e: vsci_fabric::Error) -> SciError {
    log::debug!("vsci: loan transfer failed: {e}");
    SciError::TransferFailed
}

impl Loan {
    pub fn node_id(&self) -> u32 {
        self.node_id
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    fn check(&self, offset: u64, len: usize) -> Result<()> {
        if self.returned.load(Ordering::Relaxed) {
            return Err(SciError::NotConnected);
        }
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(SciError::OutOfRange),
        }
    }

    /// Copy `buf.len()` bytes at `offset` of the loan into `buf`. The bytes
    /// land in a buffer of ours first (a read the engine abandons may still
    /// write later; that must never be the caller's memory); see
    /// [`Loan::read_vec`] for reads without that copy.
    pub fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.check(offset, buf.len())?;
        self.target.read(buf, offset)
    }

    /// Read `buf.len()` bytes at `offset` straight into `buf` and hand it
    /// back. If the engine abandons the read, `buf` is leaked rather than
    /// freed: the engine may still write into it.
    pub fn read_vec(&self, buf: Vec<u8>, offset: u64) -> Result<Vec<u8>> {
        let mut one = [(buf, offset)];
        self.read_many(&mut one)?;
        let [(buf, _)] = one;
        Ok(buf)
    }

    /// Fill each `(buffer, offset)` with the loan's bytes at that offset,
    /// straight into the buffers, all reads in flight together (one wait
    /// for the lot rather than a round trip each). Every range is checked
    /// first: one out of range reads nothing. If the engine abandons the
    /// reads, every buffer is leaked rather than freed (the engine may
    /// still write into any of them) and left empty in `bufs`.
    pub fn read_many(&self, bufs: &mut [(Vec<u8>, u64)]) -> Result<()> {
        for (b, off) in bufs.iter() {
            self.check(*off, b.len())?;
        }
        let mut ops: Vec<(&mut [u8], u64)> = bufs.iter_mut().map(|(b, off)| (b.as_mut_slice(), *off)).collect();
        match self.target.read_direct_many(&mut ops) {
            Ok(()) => Ok(()),
            Err(e) => {
                if matches!(e, vsci_fabric::Error::Abandoned) {
                    for (b, _) in bufs.iter_mut() {
                        std::mem::forget(std::mem::take(b));
                    }
                }
                Err(transfer_failed(e))
            }
        }
    }

    /// Write `data` at `offset`: visible at the lender when this returns.
    pub fn write(&self, data: &[u8], offset: u64) -> Result<()> {
        self.write_many(&[(data, offset)])
    }

    /// Write several `(bytes, offset)` runs, all visible at the lender when
    /// this returns.
    pub fn write_many(&self, runs: &[(&[u8], u64)]) -> Result<()> {
        for (d, off) in runs {
            self.check(*off, d.len())?;
        }
        self.target.write_direct(runs).map_err(transfer_failed)
    }

    /// Give the loan back now; its memory is freed on the lender. Dropping
    /// the loan does the same.
    pub fn give_back(&self) -> Result<()> {
        if self.returned.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        match self.client.call(Request::ReturnLoan { loan: self.id }) {
            // The node went away: it returned everything already.
            Ok(_) | Err(SciError::NoLinkAccess) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        let _ = self.give_back();
    }
}
