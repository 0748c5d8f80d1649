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

/// Low-latency queue (as NICs with an LLQ, whose drivers write transmit
/// descriptors into device memory): a write here hands the device the
/// transmit descriptor of the next ring slot (counted from 0 since TX_LEN
/// was written), so it need not read the ring across the fabric. The value
/// packs the buffer's DVA (bits 0-47), its length (bits 48-61), [`PUSH_MORE`]
/// and [`PUSH_INLINE`]; see [`push`].
pub const TX_PUSH: u32 = 0x60;
/// Eight more bytes of a frame carried in the writes themselves (little
/// endian), for the next [`TX_PUSH`] with [`PUSH_INLINE`]: a small frame
/// (an ACK) then costs the device no DMA at all.
pub const TX_INLINE: u32 = 0x68;
/// The length of each receive buffer later [`RX_PUSH`] writes hand over.
pub const RX_PUSH_LEN: u32 = 0x70;
/// Receive buffers pushed to the device (as [`TX_PUSH`] for the receive
/// ring): a run of `count` buffers of [`RX_PUSH_LEN`] bytes each, one after
/// the other from `addr`, for the next `count` ring slots. The value packs
/// `addr` (bits 0-47) and `count` (bits 48-63); see [`rx_push`]. A ring of
/// equal buffers is reposted with one or two writes.
pub const RX_PUSH: u32 = 0x78;
/// In a [`TX_PUSH`] value: the frame continues in the next descriptor.
pub const PUSH_MORE: u64 = 1 << 63;
/// In a [`TX_PUSH`] value: the buffer's bytes are the ones sent with
/// [`TX_INLINE`] since the last push.
pub const PUSH_INLINE: u64 = 1 << 62;
/// Frames up to this length a driver sends inline.
pub const INLINE_MAX: usize = 96;

pub const MAX_RING: u32 = 4096;

/// A [`TX_PUSH`] value for descriptor `d` (its MORE status bit kept).
pub fn push(d: Desc, inline: bool) -> u64 {
    let mut v = (d.addr & ((1 << 48) - 1)) | (u64::from(d.len & 0x3fff) << 48);
    if d.status & MORE != 0 {
        v |= PUSH_MORE;
    }
    if inline {
        v |= PUSH_INLINE;
    }
    v
}

/// An [`RX_PUSH`] value: `count` buffers from `addr`.
pub fn rx_push(addr: u64, count: u16) -> u64 {
    (addr & ((1 << 48) - 1)) | (u64::from(count) << 48)
}

/// The buffers an [`RX_PUSH`] value hands over: first DVA and count.
pub fn rx_pushed(v: u64) -> (u64, u32) {
    (v & ((1 << 48) - 1), (v >> 48) as u32)
}

/// The descriptor a [`TX_PUSH`] value carries, and whether it is inline.
pub fn pushed(v: u64) -> (Desc, bool) {
    let d = Desc {
        addr: v & ((1 << 48) - 1),
        len: ((v >> 48) & 0x3fff) as u32,
        status: if v & PUSH_MORE != 0 { MORE } else { 0 },
    };
    (d, v & PUSH_INLINE != 0)
}

/// The writes that push a one-descriptor frame `bytes` whose buffer is
/// `d`: inline when it is small.
pub fn push_frame(d: Desc, bytes: &[u8], out: &mut Vec<(u32, u64)>) {
    let inline = bytes.len() <= INLINE_MAX && d.status & MORE == 0;
    if inline {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            out.push((TX_INLINE, u64::from_le_bytes(w)));
        }
    }
    out.push((TX_PUSH, push(d, inline)));
}

/// Every register the device knows (for validating a write).
pub fn known(off: u32) -> bool {
    matches!(
        off,
        CTRL | TX_BASE
            | TX_LEN
            | TX_TAIL
            | RX_BASE
            | RX_LEN
            | RX_TAIL
            | IRQ_MASK
            | TX_PUSH
            | TX_INLINE
            | RX_PUSH_LEN
            | RX_PUSH
    ) || (MSIX_BASE..MSIX_BASE + 8 * VECTORS as u32).contains(&off) && off.is_multiple_of(8)
}

/// The writes that bring a function up: both rings (`len` entries each),
/// interrupts unmasked, the MSI-X entries aimed at `handles`, enabled.
pub fn bring_up(tx_ring: u64, rx_ring: u64, len: u32, handles: &[u64; VECTORS]) -> Vec<(u32, u64)> {
    let mut w = vec![
        (TX_BASE, tx_ring),
        (TX_LEN, u64::from(len)),
        (RX_BASE, rx_ring),
        (RX_LEN, u64::from(len)),
        (IRQ_MASK, 0),
        (CTRL, 1),
    ];
    w.extend(handles.iter().enumerate().map(|(v, &h)| (MSIX_BASE + 8 * v as u32, h)));
    w
}

/// Why a register write is refused, if it is: an offset that is not a
/// register, a ring length that is not a power of two up to [`MAX_RING`],
/// an MSI-X entry naming a handle the remapping table does not grant.
pub fn check_write(off: u32, val: u64, remap: &crate::iommu::Remap) -> Result<(), String> {
    if !known(off) {
        return Err(format!("write to register offset {off:#x}, which is not one of the function's"));
    }
    match off {
        TX_LEN | RX_LEN if val > u64::from(MAX_RING) || !(val as u32).is_power_of_two() => Err(format!("ring length {val}: a power of two up to {MAX_RING}")),
        o if (MSIX_BASE..MSIX_BASE + 8 * VECTORS as u32).contains(&o) && val != 0 && remap.vector_of(val).is_none() => Err(format!(
            "MSI-X entry {} names interrupt handle {val:#x}, which the remapping table does not grant this function (another VM's vector?)",
            (o - MSIX_BASE) / 8
        )),
        _ => Ok(()),
    }
}

/// Ring slots `[from, to)` of a ring of `len` entries at `base`, as
/// (DVA, count, first index) runs: one, or two when they wrap.
pub fn ring_runs(base: u64, len: u32, from: u32, to: u32) -> Vec<(u64, u32, u32)> {
    let n = to.wrapping_sub(from);
    let s = from % len;
    let first = n.min(len - s);
    let mut v = vec![(base + u64::from(s) * DESC as u64, first, from)];
    if first < n {
        v.push((base, n - first, from.wrapping_add(first)));
    }
    v
}

/// Transmit descriptors grouped into frames (MORE chains one to the next,
/// at most [`MAX_FRAGS`] per frame), and how many trailing descriptors
/// belong to a frame whose end is not posted yet.
pub fn frames(descs: &[(u32, Desc)]) -> (Vec<Vec<(u32, Desc)>>, usize) {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for &(idx, d) in descs {
        cur.push((idx, d));
        if d.status & MORE == 0 || cur.len() == MAX_FRAGS {
            out.push(std::mem::take(&mut cur));
        }
    }
    (out, cur.len())
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
    if !b.len().is_multiple_of(12) {
        return None;
    }
    Some(
        b.chunks_exact(12)
            .map(|c| {
                (
                    u32::from_le_bytes(c[0..4].try_into().expect("4")),
                    u64::from_le_bytes(c[4..12].try_into().expect("8")),
                )
            })
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
    fn ring_runs_wrap() {
        assert_eq!(ring_runs(0x1000, 8, 6, 10), vec![(0x1000 + 6 * 16, 2, 6), (0x1000, 2, 8)]);
        assert_eq!(ring_runs(0, 8, u32::MAX, 1), vec![(7 * 16, 1, u32::MAX), (0, 1, 0)]);
    }

    #[test]
    fn frames_group_and_wait() {
        let d = |status| Desc { addr: 0, len: 60, status };
        let (f, pending) = frames(&[(0, d(MORE)), (1, d(0)), (2, d(0)), (3, d(MORE))]);
        assert_eq!(f.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(pending, 1);
    }

    #[test]
    fn pushed_descriptors_round_trip() {
        let d = Desc { addr: 0x17A2_D800, len: 1514, status: MORE };
        assert_eq!(pushed(push(d, false)), (d, false));
        let mut w = Vec::new();
        push_frame(Desc { addr: 0x1000, len: 66, status: 0 }, &[7; 66], &mut w);
        assert_eq!(w.len(), 9 + 1);
        assert_eq!(pushed(w[9].1), (Desc { addr: 0x1000, len: 66, status: 0 }, true));
        let mut w = Vec::new();
        push_frame(Desc { addr: 0x1000, len: 1514, status: 0 }, &[7; 1514], &mut w);
        assert_eq!(w, vec![(TX_PUSH, push(Desc { addr: 0x1000, len: 1514, status: 0 }, false))]);
    }

    #[test]
    fn known_registers() {
        assert!(known(TX_TAIL) && known(MSIX_BASE + 16));
        assert!(!known(MSIX_BASE + 24) && !known(0x04) && !known(WINDOW));
    }
}
