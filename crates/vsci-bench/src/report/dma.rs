//! Seed 003's DMA figures: host, guest and remote side by side.

use super::{fr, mbps, ratio, us, Doc};
use crate::schema::{DmaVersus, Paths};
use crate::size_name;

pub(super) fn dma(d: &mut Doc, v: &DmaVersus, paths: &Paths) {
    d.line("## DMA engine (seed 003): host, guest and remote side by side (issue 5)");
    d.line("");
    d.line(&format!("Guest accelerator: {}.", v.accelerator));
    d.line("");
    d.line("`dma_bench` (see [bench/README.md](../bench/README.md#dma_bench-the-dma-engine-seed-003s-measurements))");
    d.line("on the host against a co-located segment (path `local`), the same binary inside a guest (path");
    d.line("`guest`: its DMA calls are remoted to the node's engine by the guest agent, buffers are the");
    d.line("hot-plugged segment windows, never copied between guest and host, completions come back as");
    d.line("MSI-X interrupts), and on node 1 against a segment of node 2 (path `remote`, RMA over veth).");
    d.line("Medians. *Overhead* is the guest's extra time for the same work over the host's, the paper's");
    d.line("measure of its para-virtualized engine against the native one; the paper's figures (Mouzakitis");
    d.line("et al., a real RDMA engine under KVM) stand in their own column.");
    if !v.accelerator.starts_with("kvm") {
        d.line("Under TCG every guest instruction is emulated: each control call crosses an emulated");
        d.line("guest kernel and an MSI-X injection by QEMU's software CPU, so the guest column's fixed");
        d.line("per-call and per-completion costs are QEMU's more than the remoting's; the large transfers,");
        d.line("which the node's engine copies at host speed, show what remoting itself costs.");
    }
    let modes = &v.modes;
    d.line(&format!(
        "Iterations: host `{}`, guest `{}`, remote `{}` (quick runs move 128 MiB in the burst rows instead of 1 GiB).",
        modes.host.as_deref().unwrap_or("-"),
        modes.guest.as_deref().unwrap_or("-"),
        modes.remote.as_deref().unwrap_or("-")
    ));
    d.line("");
    let body: Vec<Vec<String>> = v
        .rows
        .iter()
        .map(|r| {
            let u = r.unit.as_str();
            let f = |x: Option<f64>| if u == "us" { us(x) } else { mbps(x) };
            let o = r.guest_overhead.map(|o| format!("{:+.0} %", o * 100.0)).unwrap_or_else(|| "–".into());
            vec![format!("{} ({u})", r.what), f(r.host), f(r.guest), o, f(r.remote), r.paper.clone()]
        })
        .collect();
    d.table(&["figure", "host", "guest", "guest overhead", "remote", "paper"], &body);
    // The engine against moving the same bytes without it, on each path.
    let mut peer_rows = Vec::new();
    let none = Vec::new();
    for (path, peer, dma) in [
        ("local", "memcpy", paths.local.as_ref().and_then(|l| l.dma.ran())),
        ("guest", "memcpy in the guest", paths.guest.as_ref().and_then(|g| g.dma.ran())),
        ("remote", "SCIMemCpy", paths.remote.as_ref().and_then(|r| r.dma.as_ref()).and_then(|d| d.ran())),
    ] {
        let single = dma.map(|d| &d.single).unwrap_or(&none);
        for bytes in [512u64 << 10, 8 << 20] {
            let Some(r) = single.iter().find(|r| r.bytes == bytes && r.dir == "write") else {
                continue;
            };
            let (dv, pv) = (r.dma_mbps, r.peer_mbps);
            let x = d.peer(format!("{path} DMA write {} vs {peer}", size_name(bytes)), ratio(dv, pv), false);
            peer_rows.push(vec![
                path.to_string(),
                format!("single transfer {}, write", size_name(bytes)),
                mbps(dv),
                peer.to_string(),
                mbps(pv),
                fr(x),
            ]);
        }
    }
    if !peer_rows.is_empty() {
        d.line("### The engine against moving the same bytes without it (MB/s)");
        d.line("");
        d.table(&["path", "what", "DMA", "peer", "peer MB/s", "DMA / peer"], &peer_rows);
    }
    d.line("The paper's figures:");
    d.line("");
    for p in &v.paper {
        d.line(&format!("- {}", p.figure));
    }
    d.line("");
}
