//! What the device host and a hypervisor take from the network, as one
//! entry for the `device_message` fuzz target (fuzz/, crates/vsci-fuzz):
//! data interrupts to the device and to a hypervisor, signed bodies,
//! register writes and their checks, and descriptors a VM wrote, through
//! the grouping and the IOMMU. Input: a selector byte, then the bytes.

use crate::gather::{self, Gather};
use crate::iommu::{Access, Context, Grant, Remap};
use crate::msg::{self, ReplyFor, RequestFrom, ToDevice, ToHost};
use crate::regs::{self, Desc, DESC};

pub const KEY: &[u8] = b"the fuzz target's cluster key";

pub fn device_message(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else { return };
    let remap = Remap { handles: [3, 5, 7] };
    match sel % 4 {
        0 => {
            if let Some(m) = msg::decode::<ToDevice>(rest) {
                match m {
                    ToDevice::Regs { writes, .. } => {
                        for (o, v) in writes {
                            if regs::check_write(o, v, &remap).is_ok() {
                                assert!(regs::known(o), "an accepted write is to a register");
                            }
                        }
                    }
                    ToDevice::Manager(s) => {
                        let _ = msg::open::<RequestFrom>(KEY, &s);
                    }
                }
            }
        }
        1 => {
            if let Some(ToHost::Manager(s)) = msg::decode::<ToHost>(rest) {
                let _ = msg::open::<ReplyFor>(KEY, &s);
            }
        }
        2 => {
            if let Some(w) = regs::decode_writes(rest) {
                for (o, v) in w {
                    let _ = regs::check_write(o, v, &remap);
                }
            }
        }
        _ => descriptors(rest),
    }
}

/// Descriptors as a VM may write them: grouped into frames, each buffer
/// translated through a bounce-mode context; and ring runs from indices.
fn descriptors(b: &[u8]) {
    const BASE: u64 = 60 << 20;
    const LEN: u64 = 4 << 20;
    let ctx = Context::new(vec![Grant { dva: BASE, len: LEN, offset: BASE, read: true, write: true }]);
    let descs: Vec<(u32, Desc)> = b.chunks_exact(DESC).enumerate().map(|(i, c)| (i as u32, Desc::decode(c))).collect();
    let (frames, pending) = regs::frames(&descs);
    assert_eq!(frames.iter().map(Vec::len).sum::<usize>() + pending, descs.len());
    assert!(frames.iter().all(|f| !f.is_empty() && f.len() <= regs::MAX_FRAGS));
    for (_, d) in &descs {
        if let Ok(off) = ctx.translate(d.addr, u64::from(d.len), Access::Write) {
            assert!(off >= BASE && off + u64::from(d.len) <= BASE + LEN, "a translation stays in its grant");
        }
    }
    // The same buffers merged for DMA (gather.rs): every piece, padding
    // included, stays inside the grant, and the bytes add up.
    let mut g = Gather::new(&ctx);
    let mut ranges = Vec::new();
    for (_, d) in &descs {
        let frame = vec![0xA5; (d.len as usize).min(regs::MAX_FRAME)];
        if g.put(d.addr, u64::from(d.len), &frame).is_ok() {
            ranges.push((d.addr, frame.len().max(1) as u64));
        }
    }
    assert_eq!(g.pieces.iter().map(|p| p.0).sum::<usize>(), g.data.len());
    for &(n, off) in &g.pieces {
        assert!(off >= BASE && off + n as u64 <= BASE + LEN, "a merged write stays in its grant");
    }
    if let Ok(plan) = gather::spans(&ctx, &ranges) {
        assert_eq!(plan.pieces.iter().map(|p| p.0).sum::<usize>(), plan.total);
        for (&at, &(_, n)) in plan.at.iter().zip(&ranges) {
            assert!(at + n as usize <= plan.total, "a range lies inside the read");
        }
        for &(n, off) in &plan.pieces {
            assert!(off >= BASE && off + n as u64 <= BASE + LEN, "a merged read stays in its grant");
        }
    }
    // Pushed descriptors (the low-latency queue) decode to what they pack.
    for c in b.chunks_exact(8) {
        let v = u64::from_le_bytes(c.try_into().expect("8"));
        let (d, inline) = regs::pushed(v);
        assert_eq!(regs::push(d, inline), v, "a push round-trips (its fields use all 64 bits)");
    }
    if b.len() >= 12 {
        let len = 1u32 << (b[0] % 13);
        let from = u32::from_le_bytes(b[4..8].try_into().expect("4"));
        let n = u32::from_le_bytes(b[8..12].try_into().expect("4")) % (len + 1);
        let runs = regs::ring_runs(BASE, len, from, from.wrapping_add(n));
        assert_eq!(runs.iter().map(|r| r.1).sum::<u32>(), n);
        for (dva, count, _) in runs {
            assert!(
                dva + u64::from(count) * DESC as u64 <= BASE + u64::from(len) * DESC as u64,
                "a run stays in its ring"
            );
        }
    }
}

/// Seeds: well-formed inputs per selector, from the real encoders.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let with = |sel: u8, b: Vec<u8>| [vec![sel], b].concat();
    let from = |req| RequestFrom { node: 2, reply: msg::ReplyTo { node: 2, interrupt: 9 }, req };
    let mut v = vec![
        (
            "regs".to_string(),
            with(
                0,
                msg::encode(&ToDevice::Regs {
                    func: 1,
                    token: 7,
                    writes: vec![(regs::TX_LEN, 256), (regs::MSIX_BASE, 5), (regs::TX_TAIL, 3)],
                }),
            ),
        ),
        (
            "assign".into(),
            with(
                0,
                msg::encode(&ToDevice::Manager(msg::sign_at(
                    KEY,
                    0,
                    1,
                    from(msg::Request::Assign {
                        vm: "a".into(),
                        ram_segment: 4,
                        ram_size: 1 << 24,
                        window: (0, 1 << 24),
                        mode: msg::Mode::Bounce,
                        irq: msg::ReplyTo { node: 2, interrupt: 9 },
                    }),
                ))),
            ),
        ),
        ("list".into(), with(0, msg::encode(&ToDevice::Manager(msg::sign_at(KEY, 0, 2, from(msg::Request::List)))))),
        ("irq".into(), with(1, msg::encode(&ToHost::Irq { func: 1, vector: 0 }))),
        (
            "reply".into(),
            with(
                1,
                msg::encode(&ToHost::Manager(msg::sign_at(KEY, 0, 3, ReplyFor { nonce: 2, reply: msg::Reply::Done }))),
            ),
        ),
        ("writes".into(), with(2, regs::encode_writes(&[(regs::RX_TAIL, 4), (regs::CTRL, 1)]))),
    ];
    let mut d = Vec::new();
    for (i, st) in [regs::MORE, 0, regs::MORE, regs::MORE, 0].iter().enumerate() {
        d.extend_from_slice(&Desc { addr: (60 << 20) + i as u64 * 2048, len: 700, status: *st }.encode());
    }
    v.push(("descriptors".into(), with(3, d)));
    v
}
