//! The device host's software IOMMU and interrupt-remapping table.
//!
//! Every function has its own translation context: a list of grants, each
//! a range of device virtual addresses (DVAs, what the driver writes into
//! descriptors and ring-base registers) mapped onto a range of one VM's
//! memory with read and/or write permission. Every address the device is
//! about to touch — a ring, a descriptor's buffer — is translated through
//! the context of the function doing it, and anything not wholly inside
//! one grant is a fault: nothing moves, the descriptor is marked ERR, the
//! fault is counted and logged. The device host's own memory, other
//! functions' registers, other VMs' and other hosts' memory have no DVA in
//! a function's context at all, so the seed's attacks 1, 3 and 4 (and the
//! DMA path of 2) all end here. Grants are installed by the platform
//! manager at assignment and dropped at release; the VM cannot change them.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// One mapping: DVAs `[dva, dva + len)` to target offsets `[offset, offset + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub dva: u64,
    pub len: u64,
    pub offset: u64,
    pub read: bool,
    pub write: bool,
}

/// Why a translation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub dva: u64,
    pub len: u64,
    pub access: Access,
    /// A grant covered the range but not this access.
    pub denied: bool,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.access == Access::Read { "read" } else { "write" };
        if self.denied {
            write!(f, "DMA {what} of {} bytes at DVA {:#x}: the grant does not allow {what}s", self.len, self.dva)
        } else {
            write!(f, "DMA {what} of {} bytes at DVA {:#x}: no grant of this function covers it", self.len, self.dva)
        }
    }
}

/// A function's translation context.
#[derive(Clone, Debug, Default)]
pub struct Context {
    grants: Vec<Grant>,
}

impl Context {
    pub fn new(grants: Vec<Grant>) -> Context {
        Context { grants }
    }

    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// The target offset of `[dva, dva + len)`, if one grant holds all of
    /// it with `access` allowed. A zero-length access still needs a grant
    /// (a descriptor pointing nowhere is refused, not ignored).
    pub fn translate(&self, dva: u64, len: u64, access: Access) -> Result<u64, Fault> {
        let fault = |denied| Fault { dva, len, access, denied };
        let end = dva.checked_add(len).ok_or(fault(false))?;
        for g in &self.grants {
            if dva >= g.dva && end <= g.dva + g.len {
                let ok = match access {
                    Access::Read => g.read,
                    Access::Write => g.write,
                };
                return if ok { Ok(g.offset + (dva - g.dva)) } else { Err(fault(true)) };
            }
        }
        Err(fault(false))
    }
}

/// The interrupt-remapping entries of one function: the handles its
/// MSI-X table may name, each delivered to one interrupt of the VM's
/// hypervisor. A handle not in the table (another VM's vector, a guess)
/// is refused when the driver writes it.
#[derive(Clone, Debug, Default)]
pub struct Remap {
    pub handles: [u64; crate::regs::VECTORS],
}

impl Remap {
    /// The vector a handle stands for, if it is one of this function's.
    pub fn vector_of(&self, handle: u64) -> Option<usize> {
        (handle != 0).then(|| self.handles.iter().position(|&h| h == handle)).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn bounce_window_only() {
        // The simple mode: one 4 MiB payload area at RAM offset 60 MiB.
        let c = Context::new(vec![Grant { dva: 60 * MIB, len: 4 * MIB, offset: 60 * MIB, read: true, write: true }]);
        assert_eq!(c.translate(60 * MIB + 100, 1514, Access::Write), Ok(60 * MIB + 100));
        assert_eq!(c.translate(64 * MIB - 8, 8, Access::Read), Ok(64 * MIB - 8));
        // One byte over the end, below the start, wrapping: faults.
        assert!(c.translate(64 * MIB - 8, 9, Access::Read).is_err());
        assert!(c.translate(60 * MIB - 1, 2, Access::Write).is_err());
        assert!(c.translate(u64::MAX - 4, 16, Access::Read).is_err());
        assert!(c.translate(0, 0, Access::Read).is_err());
    }

    #[test]
    fn permissions_are_checked() {
        let c = Context::new(vec![Grant { dva: 0, len: 4096, offset: 0, read: true, write: false }]);
        assert!(c.translate(0, 64, Access::Read).is_ok());
        let f = c.translate(0, 64, Access::Write).unwrap_err();
        assert!(f.denied, "{f}");
    }

    #[test]
    fn seed_address_chain() {
        // The seed's MRIOV+ example: the guest buffer at CH 0x17A2D000 is
        // written to the VF as MH 0x40BD476000; the BAR pair takes it to
        // DVA 0xBD476000, which the CH IOMMU maps to 0x17A2D000. Here one
        // grant plays that whole chain: DVA window at 0x40_0000_0000 over
        // the VM's memory.
        let c =
            Context::new(vec![Grant { dva: 0x40_0000_0000, len: 0x1_0000_0000, offset: 0, read: true, write: true }]);
        assert_eq!(c.translate(0x40BD476000, 2048, Access::Write), Ok(0xBD476000));
    }

    #[test]
    fn remap_accepts_only_own_handles() {
        let r = Remap { handles: [11, 22, 33] };
        assert_eq!(r.vector_of(22), Some(1));
        assert_eq!(r.vector_of(44), None);
        assert_eq!(r.vector_of(0), None);
    }
}
