//! Memory lent between nodes.
//!
//! A node started with `--lend SIZE` (or `lend` in its cluster-file entry)
//! sets aside up to SIZE bytes for other nodes' programs. A program asks its
//! own node (`Borrow`); that node asks the lender over their authenticated
//! link; the lender makes a zero-filled memfd for the loan, registers it
//! with its RMA engine, and hands back the region key. From then on the
//! borrower reads and writes the loan with RMA operations: neither node's
//! daemon is on the data path, and the lender never copies.
//!
//! Each side keeps a table: the lender the loans it made (charged to its
//! pool, owned by the borrowing node's pseudo-client, so they go when that
//! node's link does), the borrower the loans its programs hold (returned
//! when the program gives them back or exits).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use vsci_proto::{LendingStatus, LoanTotal, ObjId, SciError};

use crate::registry::ClientId;

/// A loan this node made to another node.
struct Lent {
    /// The borrowing node's pseudo-client.
    owner: ClientId,
    node_id: u32,
    size: u64,
    /// Kept so the memory lives as long as the loan, whatever the engine
    /// does with its registration.
    _memfd: OwnedFd,
}

/// A loan one of our programs holds.
struct Borrowed {
    client: ClientId,
    lender: u32,
    /// The lender's name for it.
    remote: ObjId,
    size: u64,
}

#[derive(Default)]
pub struct Loans {
    /// Bytes this node lends at most.
    pub pool: u64,
    lent: HashMap<ObjId, Lent>,
    borrowed: HashMap<ObjId, Borrowed>,
}

impl Loans {
    pub fn new(pool: u64) -> Loans {
        Loans { pool, ..Default::default() }
    }

    fn lent_bytes(&self) -> u64 {
        self.lent.values().map(|l| l.size).sum()
    }

    /// Set aside `size` bytes for node `node_id` (its pseudo-client
    /// `owner`): a fresh zero-filled memfd, returned with a duplicate for
    /// the engine to register.
    pub fn lend(&mut self, id: ObjId, owner: ClientId, node_id: u32, size: u64) -> Result<OwnedFd, SciError> {
        if size == 0 {
            return Err(SciError::IllegalParameter);
        }
        let free = self.pool.saturating_sub(self.lent_bytes());
        if size > free {
            log::info!("lending: node {node_id} asked for {size} bytes; {free} of {} left in the pool", self.pool);
            return Err(SciError::Nospc);
        }
        let memfd = crate::memory::sealed_memfd(&format!("vsci-loan-{node_id}-{id}"), size).map_err(|e| {
            log::warn!("lending: cannot make a loan of {size} bytes: {e}");
            SciError::Nospc
        })?;
        let dup = crate::memory::dup(memfd.as_fd()).map_err(|_| SciError::System)?;
        self.lent.insert(id, Lent { owner, node_id, size, _memfd: memfd });
        log::info!("lending: {size} bytes to node {node_id} (loan {id})");
        Ok(dup)
    }

    /// Take back loan `id` if `owner` holds it; true if it did.
    pub fn take_back(&mut self, id: ObjId, owner: ClientId) -> bool {
        match self.lent.get(&id) {
            Some(l) if l.owner == owner => {
                let l = self.lent.remove(&id).expect("present");
                log::info!("lending: node {} gave back loan {id} ({} bytes)", l.node_id, l.size);
                true
            }
            _ => false,
        }
    }

    /// Every loan `owner` holds (its node went away): their ids, now
    /// forgotten.
    pub fn take_back_all(&mut self, owner: ClientId) -> Vec<ObjId> {
        let ids: Vec<ObjId> = self.lent.iter().filter(|(_, l)| l.owner == owner).map(|(k, _)| *k).collect();
        for id in &ids {
            self.lent.remove(id);
        }
        ids
    }

    pub fn add_borrowed(&mut self, id: ObjId, client: ClientId, lender: u32, remote: ObjId, size: u64) {
        self.borrowed.insert(id, Borrowed { client, lender, remote, size });
    }

    /// Forget loan `id` of `client`; returns the lender and its name for
    /// the loan, to tell it.
    pub fn give_back(&mut self, id: ObjId, client: ClientId) -> Option<(u32, ObjId)> {
        match self.borrowed.get(&id) {
            Some(b) if b.client == client => {
                let b = self.borrowed.remove(&id).expect("present");
                Some((b.lender, b.remote))
            }
            _ => None,
        }
    }

    /// Everything `client` borrowed (it exits): (lender, remote id) pairs.
    pub fn give_back_all(&mut self, client: ClientId) -> Vec<(u32, ObjId)> {
        let ids: Vec<ObjId> = self.borrowed.iter().filter(|(_, b)| b.client == client).map(|(k, _)| *k).collect();
        ids.into_iter().filter_map(|id| self.give_back(id, client)).collect()
    }

    /// A lender's link went down: its loans are gone (programs learn it
    /// from their next RMA operation, which fails). Returns their holders.
    pub fn lender_down(&mut self, lender: u32) -> Vec<ClientId> {
        let ids: Vec<ObjId> = self.borrowed.iter().filter(|(_, b)| b.lender == lender).map(|(k, _)| *k).collect();
        ids.iter().filter_map(|id| self.borrowed.remove(id)).map(|b| b.client).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.lent.is_empty() && self.borrowed.is_empty()
    }

    pub fn status(&self) -> LendingStatus {
        fn totals(items: impl Iterator<Item = (u32, u64)>) -> Vec<LoanTotal> {
            let mut by: std::collections::BTreeMap<u32, LoanTotal> = Default::default();
            for (node_id, bytes) in items {
                let t = by.entry(node_id).or_insert(LoanTotal { node_id, ..Default::default() });
                t.loans += 1;
                t.bytes += bytes;
            }
            by.into_values().collect()
        }
        LendingStatus {
            pool: self.pool,
            lent: totals(self.lent.values().map(|l| (l.node_id, l.size))),
            borrowed: totals(self.borrowed.values().map(|b| (b.lender, b.size))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_bounds_what_is_lent_and_returns_free_it() {
        let mut l = Loans::new(1 << 20);
        l.lend(1, 10, 2, 600 << 10).unwrap();
        assert_eq!(l.lend(2, 11, 3, 600 << 10).unwrap_err(), SciError::Nospc);
        assert_eq!(l.lend(2, 11, 3, 0).unwrap_err(), SciError::IllegalParameter);
        assert!(!l.take_back(1, 11), "only the borrowing node returns a loan");
        assert!(l.take_back(1, 10));
        l.lend(3, 11, 3, 1 << 20).unwrap();
        assert_eq!(l.take_back_all(11), vec![3]);
        assert!(l.is_empty());
    }

    #[test]
    fn borrowed_loans_are_given_back_by_their_holder_only() {
        let mut l = Loans::new(0);
        l.add_borrowed(5, 1, 2, 77, 4096);
        l.add_borrowed(6, 1, 3, 78, 8192);
        l.add_borrowed(7, 2, 3, 79, 8192);
        assert_eq!(l.give_back(5, 2), None);
        assert_eq!(l.give_back(5, 1), Some((2, 77)));
        let st = l.status();
        assert_eq!(st.borrowed.len(), 1);
        assert_eq!((st.borrowed[0].node_id, st.borrowed[0].loans, st.borrowed[0].bytes), (3, 2, 16384));
        let mut holders = l.lender_down(3);
        holders.sort();
        assert_eq!(holders, vec![1, 2]);
        assert!(l.is_empty());
    }
}
