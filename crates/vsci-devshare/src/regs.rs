//! What a function looks like to its driver: the registers of its window
//! (the data-plane part of a VF's configuration: queue bases, lengths and
//! tails, the interrupt mask and an MSI-X table) and the descriptor format
//! the device reads and writes in the VM's memory.
//!
//! Register writes travel as "posted writes" (offset, value): from the VM
//! to its hypervisor over their channel, from the hypervisor to the device
//! as a doorbell message. Nothing reads registers back across the fabric:
//! the device reports progress by writing descriptors (the DD bit), as
//! NICs with descriptor write-back do.

/// Bytes of one function's register window. A write outside it is the
/// VM reaching for something it was not given (another function's
/// registers, in a BAR that holds several): refused by its hypervisor.
pub const WINDOW: u32 = 0x100;

/// Bit 0: the function is enabled (the device moves packets for it).
pub const CTRL: u32 = 0x00;
/// DVA of the transmit ring (16-byte descriptors).
pub const TX_BASE: u32 = 0x08;
/// Entries in the transmit ring (a power of two, at most [`MAX_RING`]).
pub const TX_LEN: u32 = 0x10;
/// Producer index of the transmit ring: descriptors before it are ready.
pub const TX_TAIL: u32 = 0x18;
pub const RX_BASE: u32 = 0x20;
pub const RX_LEN: u32 = 0x28;
/// Producer index of the receive ring: buffers before it are posted.
pub const RX_TAIL: u32 = 0x30;
/// Bit v set: vector v does not fire (the driver is polling, NAPI-style).
pub const IRQ_MASK: u32 = 0x38;
/// MSI-X table: entry v holds the interrupt handle vector v is sent to.
/// Only handles the interrupt-remapping table grants this function are
/// accepted.
pub const MSIX_BASE: u32 = 0x40;
pub const VECTORS: usize = 3;
/// Vector numbers, as the seed's VF: receive, transmit, mailbox.
pub const VEC_RX: usize = 0;
pub const VEC_TX: usize = 1;
pub const VEC_MBX: usize = 2;

pub const MAX_RING: u32 = 4096;

/// Every register the device knows (for validating a write).
pub fn known(off: u32) -> bool {
    matches!(off, CTRL | TX_BASE | TX_LEN | TX_TAIL | RX_BASE | RX_LEN | RX_TAIL | IRQ_MASK)
        || (MSIX_BASE..MSIX_BASE + 8 * VECTORS as u32).contains(&off) && off % 8 == 0
}

/// A descriptor: buffer DVA, length, status. 16 bytes, little-endian.
pub const DESC: usize = 16;
/// Status: the device is done with this descriptor.
pub const DD: u32 = 1;
/// Set by the driver in a transmit descriptor: the frame continues in the
/// next descriptor (a frame gathered from several buffers, as a guest's
/// socket buffer with page fragments is).
pub const MORE: u32 = 1 << 1;
/// Most descriptors one frame may span.
pub const MAX_FRAGS: usize = 32;
/// Status: the device refused the descriptor (an IOMMU fault); nothing moved.
pub const ERR: u32 = 1 << 31;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub status: u32,
}

impl Desc {
    pub fn decode(b: &[u8]) -> Desc {
        Desc {
            addr: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            status: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
        }
    }

    pub fn encode(&self) -> [u8; DESC] {
        let mut b = [0u8; DESC];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.status.to_le_bytes());
        b
    }

    /// The write-back half (length and status) the device stores.
    pub fn writeback(len: u32, status: u32) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0..4].copy_from_slice(&len.to_le_bytes());
        b[4..8].copy_from_slice(&status.to_le_bytes());
        b
    }
}

/// The largest frame a function moves (no jumbo frames, as the seed's VFs).
pub const MAX_FRAME: usize = 1518;

/// One posted register write, as the VM's channel carries it: 12 bytes.
pub fn encode_writes(writes: &[(u32, u64)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(writes.len() * 12);
    for (o, val) in writes {
        v.extend_from_slice(&o.to_le_bytes());
        v.extend_from_slice(&val.to_le_bytes());
    }
    v
}

/// Decode posted writes; None if the length is not a whole number of them.
pub fn decode_writes(b: &[u8]) -> Option<Vec<(u32, u64)>> {
    if b.len() % 12 != 0 {
        return None;
    }
    Some(
        b.chunks_exact(12)
            .map(|c| (u32::from_le_bytes(c[0..4].try_into().expect("4")), u64::from_le_bytes(c[4..12].try_into().expect("8"))))
            .collect(),
    )
}

/// The function's MAC address: locally administered, naming the device
/// host and the function, so two devices of a cluster never share one.
pub fn mac(device_node: u32, func: u8) -> [u8; 6] {
    [0x02, 0x76, 0x73, (device_node >> 8) as u8, device_node as u8, func]
}

pub fn mac_string(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desc_round_trip() {
        let d = Desc { addr: 0x17A2_D000, len: 1514, status: DD };
        assert_eq!(Desc::decode(&d.encode()), d);
        assert_eq!(&d.encode()[8..], &Desc::writeback(1514, DD));
    }

    #[test]
    fn writes_round_trip_and_reject_torn() {
        let w = vec![(TX_TAIL, 7), (MSIX_BASE + 8, u64::MAX)];
        assert_eq!(decode_writes(&encode_writes(&w)), Some(w));
        assert_eq!(decode_writes(&[0; 13]), None);
    }

    #[test]
    fn known_registers() {
        assert!(known(TX_TAIL) && known(MSIX_BASE + 16));
        assert!(!known(MSIX_BASE + 24) && !known(0x04) && !known(WINDOW));
    }
}
