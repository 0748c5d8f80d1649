//! The guest paths: the local suite in a guest against the host, the
//! local suite inside one guest, and remote_bench across a guest boundary.

use super::local::transfers;
use super::{fr, hist, hist_table, lat2, mbps, med, ratio, us, Doc};
use crate::schema::{Guest, GuestPair, GuestPeers, GuestVsHost, SisciBench};
use crate::size_name;

pub(super) fn guest_vs_host(d: &mut Doc, g: &GuestVsHost) {
    let accel = &g.accelerator;
    let kind = if g.kvm { "KVM" } else { "TCG" };
    d.line("## Guest vs host: the local suite inside a guest and on the host (issue 4)");
    d.line("");
    d.line(&format!("**Accelerator: {kind}** (`vsci vm run`: accelerator {accel})."));
    d.line("");
    d.line("sisci_bench with both ends inside one guest (path `guest`, two vCPUs, the guest's own sessions");
    d.line("on its node) against the same program on the host (path `local`), same run. Medians; ratio =");
    d.line("guest / host (for latency lower is better, for bandwidth higher). The guest ran sisci_bench's");
    d.line("`-quick` size set and iteration counts (a TCG guest is slow), the host the full ones. Under TCG");
    d.line("every guest instruction is translated and emulated, so these ratios measure QEMU's software CPU");
    d.line("more than vsci; the raw rows (no SISCI at all) show how much of each ratio is the CPU alone.");
    d.line("");
    let body: Vec<Vec<String>> = g
        .rows
        .iter()
        .map(|r| {
            let f = |v: Option<f64>| if r.unit == "us" { us(v) } else { mbps(v) };
            vec![r.what.clone(), f(r.host), f(r.guest), fr(r.ratio)]
        })
        .collect();
    d.table(&["figure", "host", "guest", "guest / host"], &body);
}

fn accel_line(d: &mut Doc, accelerator: Option<&str>, iterations: &str, peers: &GuestPeers) {
    d.line(&format!("Accelerator: {}. {}", accelerator.unwrap_or("unknown"), iterations));
    d.line("");
    d.line(&format!("Peers not run on this path: {}", peers.not_run));
    d.line("");
}

pub(super) fn guest_local(d: &mut Doc, g: &Guest) {
    let sb = &g.sisci_bench;
    d.line("## Guest path: the local suite inside one guest");
    d.line("");
    d.line("Both ends of sisci_bench in one guest of one node; each worker opens its own session through the");
    d.line("guest's control device, segments are mapped through hot-plugged ivshmem windows. Limits: the");
    d.line("same operations with no SISCI inside the same guest (`memcpy` into private memory, a raw `memfd`");
    d.line("ping-pong); peer for interrupts: an `eventfd` ping-pong inside the guest.");
    d.line("");
    accel_line(d, g.accelerator.as_deref(), &g.iterations, &g.peers);
    let mut body = Vec::new();
    for r in &sb.write_bandwidth.rows {
        let size = r.size;
        let (v, lim) = (r.vsci_mbps, r.peer_mbps);
        let rl = d.peer(format!("guest write {} vs memcpy in the guest", size_name(size)), ratio(v, lim), false);
        body.push(vec![size_name(size), mbps(v), mbps(lim), fr(rl)]);
    }
    d.line("### Write bandwidth, `memcpy` + `SCIFlush` per copy");
    d.line("");
    d.table(&["size", "vsci MB/s", "memcpy in the guest (limit)", "vsci/limit"], &body);
    let mut body = Vec::new();
    for r in &sb.pingpong.rows {
        let size = r.size;
        let (v, lim) = (med(r.vsci.as_ref()), med(r.peer.as_ref()));
        let rl = d.peer(format!("guest ping-pong {} vs raw memfd in the guest", size_name(size)), ratio(v, lim), true);
        body.push(vec![size_name(size), lat2(r.vsci.as_ref()), lat2(r.peer.as_ref()), fr(rl)]);
    }
    d.line("### Ping-pong, flag in the last 4 bytes, RTT/2 (median / p99 µs)");
    d.line("");
    d.table(&["size", "vsci", "raw memfd in the guest (limit)", "vsci/limit"], &body);
    let peer = sb.interrupt.peer.as_ref();
    let mut body = Vec::new();
    for r in &sb.interrupt.rows {
        let w = &r.wait;
        let rp = d.peer(
            format!("guest interrupt ({w} wait) vs eventfd in the guest"),
            ratio(med(r.vsci.as_ref()), med(peer)),
            true,
        );
        body.push(vec![format!("interrupt, `VSCI_WAIT={w}`"), lat2(r.vsci.as_ref()), lat2(peer), fr(rp)]);
    }
    for r in &sb.data_interrupt.rows {
        let w = &r.wait;
        let p = r.payload;
        let rp = d.peer(
            format!("guest data interrupt {} ({w}) vs eventfd + memfd in the guest", size_name(p)),
            ratio(med(r.vsci.as_ref()), med(r.peer.as_ref())),
            true,
        );
        body.push(vec![
            format!("data interrupt {}, `{w}`", size_name(p)),
            lat2(r.vsci.as_ref()),
            lat2(r.peer.as_ref()),
            fr(rp),
        ]);
    }
    d.line("### Interrupts, RTT/2 (median / p99 µs)");
    d.line("");
    d.table(&["what", "vsci", "eventfd in the guest (peer)", "vsci/peer"], &body);
    let mut cols: Vec<(String, Vec<u64>)> = Vec::new();
    for r in &sb.interrupt.rows {
        if let Some(h) = hist(r.vsci.as_ref()) {
            cols.push((format!("vsci {}", r.wait), h));
        }
    }
    if let Some(h) = hist(peer) {
        cols.push(("eventfd".into(), h));
    }
    hist_table(d, "Guest interrupt latency histogram (RTT/2, 10 µs buckets)", &cols);
    let memcpy8 = sb.write_bandwidth.rows.iter().find(|r| r.size == 8 << 20).and_then(|r| r.peer_mbps);
    transfers(d, &g.transfers, memcpy8, "two copies of the data at the guest's 8 MiB `memcpy` rate", 2.0);
}

/// remote_bench and the transfers across a guest boundary. Limits: the
/// raw figures of the `guest` path (the guest's own CPU, no SISCI).
pub(super) fn guest_pair(d: &mut Doc, name: &str, g: &GuestPair, guest_sb: Option<&SisciBench>) {
    let rb = &g.remote_bench;
    let ends = g.ends.join(" → ");
    d.line(&format!("## Path {name}: {}", g.what));
    d.line("");
    d.line(&format!(
        "remote_bench, client → server: {ends}. The client writes into the server's segment through its map"
    ));
    d.line("(ping-pong: payload then flag, no call; bandwidth: `memcpy` + `SCIFlush`, and `SCIMemCpy`); interrupts");
    d.line("and data interrupts as a trigger → wait ping-pong. Limits, where the `guest` path ran in this run: the");
    d.line("raw `memfd` ping-pong and `memcpy` inside a guest (a guest end cannot go faster than its own CPU).");
    d.line("");
    accel_line(d, g.accelerator.as_deref(), &g.iterations, &g.peers);
    let has_limit = guest_sb.is_some();
    let gpp = guest_sb.map(|s| &s.pingpong.rows[..]).unwrap_or_default();
    let gbw = guest_sb.map(|s| &s.write_bandwidth.rows[..]).unwrap_or_default();
    let mut body = Vec::new();
    for r in &rb.pingpong.rows {
        let size = r.size;
        let v = med(r.vsci.as_ref());
        let lim = gpp.iter().find(|x| x.size == size).and_then(|x| med(x.peer.as_ref()));
        let rl = d.peer(format!("{name} ping-pong {} vs raw memfd in a guest", size_name(size)), ratio(v, lim), true);
        body.push(vec![size_name(size), lat2(r.vsci.as_ref()), us(lim), fr(rl)]);
    }
    d.line("### Ping-pong through the peer's segment, RTT/2 (median / p99 µs)");
    d.line("");
    d.table(&["size", "vsci", "raw memfd in a guest (limit)", "vsci/limit"], &body);
    let mut body = Vec::new();
    for r in &rb.write_bandwidth.rows {
        let size = r.size;
        let v = r.flush_mbps;
        let lim = gbw.iter().find(|x| x.size == size).and_then(|x| x.peer_mbps);
        let rl = d.peer(format!("{name} write {} vs memcpy in a guest", size_name(size)), ratio(v, lim), false);
        body.push(vec![size_name(size), mbps(v), mbps(r.memcpy_mbps), mbps(lim), fr(rl)]);
    }
    d.line("### Write bandwidth into the server's segment (MB/s)");
    d.line("");
    d.table(&["size", "memcpy + SCIFlush", "SCIMemCpy", "memcpy in a guest (limit)", "vsci/limit"], &body);
    let lim4 = gpp.iter().find(|x| x.size == 4).and_then(|x| med(x.peer.as_ref()));
    let mut body = Vec::new();
    {
        let i = rb.interrupt.vsci.as_ref();
        let rl = d.peer(format!("{name} interrupt vs raw 4 B polling in a guest"), ratio(med(i), lim4), true);
        body.push(vec!["interrupt".into(), lat2(i), us(lim4), fr(rl)]);
    }
    for r in &rb.data_interrupt.rows {
        let p = r.payload;
        body.push(vec![
            format!("data interrupt {}", size_name(p)),
            lat2(r.vsci.as_ref()),
            us(lim4),
            fr(ratio(med(r.vsci.as_ref()), lim4)),
        ]);
    }
    d.line("### Interrupts, RTT/2 (median / p99 µs)");
    d.line("");
    d.table(&["what", "vsci", "raw 4 B polling ping-pong in a guest (limit)", "vsci/limit"], &body);
    let mut cols: Vec<(String, Vec<u64>)> = Vec::new();
    if let Some(h) = hist(rb.interrupt.vsci.as_ref()) {
        cols.push(("interrupt".into(), h));
    }
    for r in &rb.data_interrupt.rows {
        if let Some(h) = hist(r.vsci.as_ref()) {
            cols.push((format!("data interrupt {}", size_name(r.payload)), h));
        }
    }
    hist_table(d, &format!("{name} interrupt latency histogram (RTT/2, 10 µs buckets)"), &cols);
    if !has_limit {
        d.line("(No limit column: the `guest` path did not run in this run.)");
        d.line("");
    }
    let memcpy8 = gbw.iter().find(|r| r.size == 8 << 20).and_then(|r| r.peer_mbps);
    transfers(d, &g.transfers, memcpy8, "two copies of the data at a guest's 8 MiB `memcpy` rate", 2.0);
}
