//! The remote path's main tables: ping-pong, bandwidth, store-to-
//! visibility, interrupts, transfers. The rows of the later sections
//! (spinning ping-pong, stores, idle map, mailbox, message ring, trapped
//! stores, the loaded run) are in remote_rows.rs.

use super::local::{sockperf_lat, sockperf_row, tcp_peer_notes, transfers, ucx_note};
use super::remote_rows::{ring_and_trapped_stores, spinning_stores_and_mailbox};
use super::{
    fr, hist, hist_table, lat2, mbps, med, ratio, t5, t56, us, Doc, T54_NATIVE, T54_VIRT, T55_NATIVE, T55_VIRT,
    T56_NATIVE, T56_VIRT, T57_REMOTE,
};
use crate::schema::{FabricWrite, Iperf3, Lat, Outcome, Remote, Sockperf, Transfers, Ucx};
use crate::size_name;

pub(super) fn remote(d: &mut Doc, r: &Remote) {
    let rb = &r.remote_bench;
    let none_sp = Sockperf::default();
    let none_ip = Iperf3::default();
    let none_ucx = Ucx::default();
    let sp = r.peers.sockperf.as_ref().unwrap_or(&none_sp);
    let ip = r.peers.iperf3.as_ref().unwrap_or(&none_ip);
    let ucx = r.peers.ucx_perftest.as_ref().unwrap_or(&none_ucx);
    d.line("## Remote path: two nodes in two network namespaces over veth");
    d.line("");
    d.line("Two `vscid` nodes of one cluster, each in its own network namespace, joined by a veth pair;");
    d.line("the RMA engine is libfabric over TCP. Peers between the same two namespaces in the same run:");
    d.line("`sockperf` TCP ping-pong (blocking), `iperf3` (one TCP stream), `ucx_perftest` over TCP");
    d.line("(`UCX_TLS=tcp`, busy polling). There is no hardware here, so the **limit** of this path is what");
    d.line("the best peer reaches over the same veth: the lower of the peers' latencies, the higher of");
    d.line("their bandwidths.");
    d.line("");
    tcp_peer_notes(d, sp, ip, "columns show");
    ucx_note(d, ucx);
    let min2 = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };

    d.line("### Ping-pong: payload then flag stored into the peer's segment, no call; RTT/2 (thesis table 5.6)");
    d.line("");
    d.line("Median / p99 µs. Thesis 5.6: IXH610 PCIe, host↔host native and guest↔guest.");
    d.line("");
    let mut body = Vec::new();
    for row in &rb.pingpong.rows {
        let size = row.size;
        let v = med(row.vsci.as_ref());
        let s = sockperf_row(sp, size);
        let s_med = s.and_then(|x| x.median_us);
        let u = ucx.lat_median(size);
        if s_med.is_none() && u.is_none() && ![64, 1024, 8192].contains(&size) {
            continue;
        }
        let rs = d.peer(format!("remote ping-pong {} vs sockperf", size_name(size)), ratio(v, s_med), true);
        let ru = d.peer(format!("remote ping-pong {} vs UCX tcp put_lat", size_name(size)), ratio(v, u), true);
        let lim = min2(s_med, u);
        body.push(vec![
            size_name(size),
            lat2(row.vsci.as_ref()),
            s.map(sockperf_lat).unwrap_or_else(|| "-".into()),
            fr(rs),
            us(u),
            fr(ru),
            fr(ratio(v, lim)),
            us(t56(&T56_NATIVE, size)),
            us(t56(&T56_VIRT, size)),
        ]);
    }
    d.table(
        &[
            "size",
            "vsci",
            "sockperf TCP",
            "vsci/sockperf",
            "UCX tcp put_lat",
            "vsci/UCX",
            "vsci/limit",
            "thesis 5.6 native",
            "thesis 5.6 guest",
        ],
        &body,
    );

    let none_fw = FabricWrite::default();
    spinning_stores_and_mailbox(d, rb, ucx, r.peers.fabric_write.as_ref().unwrap_or(&none_fw));
    ring_and_trapped_stores(d, r);

    d.line("### Write bandwidth to a remote segment (thesis tables 5.4, 5.5)");
    d.line("");
    d.line("`memcpy` into the remote map + `SCIFlush` per copy (the thesis's method), and `SCIMemCpy` per copy.");
    d.line("Peers: iperf3 (one TCP stream, any size), UCX `ucp_put_bw` and `ucp_am_bw` over TCP at the same");
    d.line("size (UCX 1.13 has no native put over TCP and emulates it; active messages are what it moves");
    d.line("fastest). Limit: the best of the three. Thesis: 5.4 IXH610 (Gen2 x8) and 5.5 PXH830 (Gen3 x16),");
    d.line("host native / guest→remote guest, MB/s.");
    d.line("");
    let ipm = ip.mbps;
    let mut body = Vec::new();
    for row in &rb.write_bandwidth.rows {
        let size = row.size;
        let f = row.flush_mbps;
        let m = row.memcpy_mbps;
        let u = ucx.bw.iter().find(|x| x.size == size).map(|x| x.mbps);
        let am = ucx.am_bw.iter().find(|x| x.size == size).map(|x| x.mbps);
        let lim = [ipm, u, am].into_iter().flatten().reduce(f64::max);
        let ri = d.peer(format!("remote write {} memcpy+SCIFlush vs iperf3", size_name(size)), ratio(f, ipm), false);
        let rm = d.peer(format!("remote write {} SCIMemCpy vs iperf3", size_name(size)), ratio(m, ipm), false);
        let ru = d.peer(format!("remote write {} SCIMemCpy vs UCX tcp put_bw", size_name(size)), ratio(m, u), false);
        body.push(vec![
            size_name(size),
            mbps(f),
            mbps(m),
            mbps(ipm),
            format!("{} / {}", fr(ri), fr(rm)),
            mbps(u),
            fr(ru),
            mbps(am),
            format!("{} / {}", fr(ratio(f, lim)), fr(ratio(m, lim))),
            format!("{} / {}", mbps(t5(&T54_NATIVE, size)), mbps(t5(&T54_VIRT, size))),
            format!("{} / {}", mbps(t5(&T55_NATIVE, size)), mbps(t5(&T55_VIRT, size))),
        ]);
    }
    d.table(
        &[
            "size",
            "vsci flush",
            "vsci SCIMemCpy",
            "iperf3",
            "vsci/iperf3 (flush / SCIMemCpy)",
            "UCX tcp put_bw",
            "SCIMemCpy/UCX put",
            "UCX tcp am_bw",
            "vsci/limit (flush / SCIMemCpy)",
            "thesis 5.4 native / guest",
            "thesis 5.5 native / guest",
        ],
        &body,
    );

    d.line("### Store-to-visibility: a plain store into a remote map, no call, until the owner sees it");
    d.line("");
    d.line("One way, µs. The peer is sockperf's 64 B RTT/2 (the one-way time of a TCP message).");
    d.line("");
    let s64 = sockperf_row(sp, 64).and_then(|x| x.median_us);
    let mut body = Vec::new();
    for row in &rb.store_visibility.rows {
        let pace = row.interval_us;
        let pace = if pace >= 1000 { format!("{} ms", pace / 1000) } else { format!("{pace} µs") };
        let del = row.delay.as_ref();
        let rv = d.peer(
            format!("remote store-to-visibility (a store every {pace}) vs sockperf 64 B one way"),
            ratio(med(del), s64),
            true,
        );
        body.push(vec![
            format!("a store every {pace}"),
            lat2(del),
            us(del.and_then(|x| x.max_us)),
            format!("{} of {}", del.map(|x| x.n).unwrap_or(0), row.sent),
            us(s64),
            fr(rv),
        ]);
    }
    d.table(&["pace", "vsci p50 / p99", "max", "seen", "sockperf 64 B", "vsci/peer"], &body);

    d.line("### Remote interrupts, RTT/2 (thesis table 5.7, remote column)");
    d.line("");
    let u64l = ucx.lat_median(64);
    let mut body = Vec::new();
    let mut add = |d: &mut Doc, what: String, v: Option<&Lat>, ps: u64, thesis: bool| {
        let s = sockperf_row(sp, ps);
        let s_med = s.and_then(|x| x.median_us);
        let rs = d.peer(format!("remote {what} vs sockperf"), ratio(med(v), s_med), true);
        body.push(vec![
            what,
            lat2(v),
            format!("{} ({})", s.map(sockperf_lat).unwrap_or_else(|| "-".into()), size_name(ps)),
            fr(rs),
            fr(ratio(med(v), min2(s_med, u64l))),
            if thesis { us(Some(T57_REMOTE.0)) } else { "".into() },
            if thesis { us(Some(T57_REMOTE.1)) } else { "".into() },
        ]);
    };
    add(d, "interrupt trigger → wait".into(), rb.interrupt.vsci.as_ref(), 64, true);
    for row in &rb.data_interrupt.rows {
        let p = row.payload;
        add(d, format!("data interrupt {}", size_name(p)), row.vsci.as_ref(), if p <= 64 { 64 } else { p }, false);
    }
    d.table(
        &["what", "vsci", "sockperf TCP", "vsci/sockperf", "vsci/limit", "thesis 5.7 native", "thesis 5.7 guest"],
        &body,
    );
    let mut cols = Vec::new();
    if let Some(h) = hist(rb.interrupt.vsci.as_ref()) {
        cols.push(("vsci remote interrupt".to_string(), h));
    }
    hist_table(d, "Remote interrupt latency histogram (RTT/2, 10 µs buckets)", &cols);

    // A run of a few sections (`--sections`) has no transfers: the table
    // stands empty.
    let none = Outcome::Ran(Transfers { window: "128m".into(), ..Transfers::default() });
    transfers(
        d,
        r.transfers.as_ref().unwrap_or(&none),
        ipm,
        "the data crossing the link once at this run's iperf3 rate between the namespaces",
        1.0,
    );
}
