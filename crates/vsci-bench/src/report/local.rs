//! The local path's tables, and the pieces other paths share (the seed-001
//! transfers, the UCX note).

use super::{
    fr, hist, hist_table, lat2, mbps, med, ms_fmt, quantiles, ratio, sig, t5, t56, us, Doc, T51, T52_NATIVE, T52_VIRT,
    T53_VIRT, T56_NATIVE, T56_VIRT, T57_LOCAL,
};
use crate::schema::{
    Iperf3, Local, LocalPeers, Outcome, PythonBench, PythonRow, SisciBench, Sockperf, SockperfRow, Transfers, Ucx,
};
use crate::size_name;

pub(super) fn local(d: &mut Doc, l: &Local) {
    let sb = &l.sisci_bench;
    let ucx = &l.peers.ucx_perftest;
    d.line("## Local path: processes on one node (zero copy)");
    d.line("");
    d.line("Two processes of one node; the segment is the same physical pages in both. Peers: `memcpy`");
    d.line("into private memory, a raw `memfd` polling ping-pong, a blocking `eventfd` ping-pong (all in");
    d.line("sisci_bench, same run), `ucx_perftest` between two processes over UCX shared memory");
    d.line("(`UCX_TLS=posix,self`).");
    d.line("");
    ucx_note(d, ucx);

    // Write bandwidth.
    d.line("### Write bandwidth: `memcpy` into the mapped segment + `SCIFlush` per copy (thesis tables 5.1–5.3)");
    d.line("");
    d.line("Limit: `memcpy` of the same size into private memory (segment memory *is* memory).");
    d.line("Floor of any flush: `memcpy` + a call of a shared-library function that does nothing (`getpagesize`),");
    d.line("same run: what `SCIFlush` would cost if it did nothing at all, the best a library call can do.");
    d.line(
        "Thesis columns: 5.1 `memcpy_bench`, 5.2 host process native and guest→host, 5.3 guest→co-located guest, MB/s.",
    );
    d.line("");
    let mut body = Vec::new();
    for r in &sb.write_bandwidth.rows {
        let size = r.size;
        let v = r.vsci_mbps;
        let lim = r.peer_mbps;
        let call = r.memcpy_call_mbps;
        let u = ucx.bw.iter().find(|x| x.size == size).map(|x| x.mbps);
        let ru = d.peer(format!("local write {} vs UCX shm put", size_name(size)), ratio(v, u), false);
        body.push(vec![
            size_name(size),
            mbps(v),
            mbps(lim),
            fr(ratio(v, lim)),
            mbps(call),
            fr(ratio(v, call)),
            mbps(u),
            fr(ru),
            mbps(t5(&T51, size)),
            mbps(t5(&T52_NATIVE, size)),
            mbps(t5(&T52_VIRT, size)),
            mbps(t5(&T53_VIRT, size)),
        ]);
    }
    d.table(
        &[
            "size",
            "vsci MB/s",
            "memcpy (limit)",
            "vsci/limit",
            "memcpy + empty call (floor)",
            "vsci/floor",
            "UCX shm put_bw",
            "vsci/UCX",
            "thesis 5.1 memcpy",
            "thesis 5.2 native",
            "thesis 5.2 guest→host",
            "thesis 5.3 guest→guest",
        ],
        &body,
    );

    // Ping-pong.
    d.line("### Ping-pong latency through segments, flag in the last 4 bytes, RTT/2 (thesis table 5.6)");
    d.line("");
    d.line("Limit: the same protocol over a raw shared `memfd` with no SISCI (sisci_bench, interleaved with vsci).");
    d.line("Peer: UCX `ucp_put_lat` over shared memory (busy polling). Thesis 5.6 is *remote* host↔host and");
    d.line("guest↔guest over an IXH610 PCIe adapter, the only latency table of the thesis. Median / p99 µs.");
    d.line("How fast the two vCPUs pass a cache line changes over minutes on this VM, so the raw `memfd`");
    d.line("ping-pong is also taken again right before UCX runs (\"raw, at UCX time\"): compare UCX with that.");
    d.line("");
    let ucx_ref = ucx.reference_pingpong.as_ref().map(|p| &p.rows[..]).unwrap_or_default();
    let mut body = Vec::new();
    for r in &sb.pingpong.rows {
        let size = r.size;
        let v = med(r.vsci.as_ref());
        let lim = med(r.peer.as_ref());
        let u = ucx.lat_median(size);
        let ru = d.peer(format!("local ping-pong {} vs UCX shm put_lat", size_name(size)), ratio(v, u), true);
        let refr = ucx_ref.iter().find(|x| x.size == size).and_then(|x| med(x.peer.as_ref()));
        body.push(vec![
            size_name(size),
            lat2(r.vsci.as_ref()),
            lat2(r.peer.as_ref()),
            fr(ratio(v, lim)),
            us(u),
            us(refr),
            fr(ru),
            us(t56(&T56_NATIVE, size)),
            us(t56(&T56_VIRT, size)),
        ]);
    }
    d.table(
        &[
            "size",
            "vsci",
            "raw memfd polling (limit)",
            "vsci/limit",
            "UCX shm put_lat",
            "raw, at UCX time",
            "vsci/UCX",
            "thesis 5.6 native",
            "thesis 5.6 guest",
        ],
        &body,
    );

    // Interrupts.
    interrupts_local(d, sb);
    if let Some(p) = &l.python {
        python_binding(d, p);
    }

    tcp_loopback(d, sb, &l.peers);

    // Transfers.
    let memcpy8 = sb.write_bandwidth.rows.iter().find(|r| r.size == 8 << 20).and_then(|r| r.peer_mbps);
    transfers(d, &l.transfers, memcpy8, "two copies of the data (in and out) at this run's 8 MiB `memcpy` rate", 2.0);
}

/// "was not available" / "failed" notes of the TCP peers.
pub(super) fn tcp_peer_notes(d: &mut Doc, sp: &Sockperf, ip: &Iperf3, what: &str) {
    for (name, available, error) in
        [("sockperf", sp.available, sp.error.as_deref()), ("iperf3", ip.available, ip.error.as_deref())]
    {
        if !available {
            d.line(&format!("**{name} was not available in this run; its {what} \"-\".**"));
            d.line("");
        } else if let Some(e) = error {
            d.line(&format!("**{name} failed:** {}", e.lines().next().unwrap_or("")));
            d.line("");
        }
    }
}

/// sockperf's row of `size`.
pub(super) fn sockperf_row(sp: &Sockperf, size: u64) -> Option<&SockperfRow> {
    sp.rows.iter().find(|r| r.size == size)
}

/// A sockperf row as "median / p99".
pub(super) fn sockperf_lat(s: &SockperfRow) -> String {
    quantiles(s.median_us, s.p99_us)
}

/// The local figures against TCP between the same two processes' host.
fn tcp_loopback(d: &mut Doc, sb: &SisciBench, peers: &LocalPeers) {
    let sp = &peers.sockperf;
    let ip = &peers.iperf3;
    d.line("### Against TCP over loopback (sockperf, iperf3)");
    d.line("");
    d.line("What two processes on this host get from the kernel's TCP through `lo`, in the same run:");
    d.line("`sockperf` blocking TCP ping-pong (RTT/2) and `iperf3` (one stream).");
    d.line("");
    tcp_peer_notes(d, sp, ip, "column shows");
    let mut body = Vec::new();
    for row in &sb.pingpong.rows {
        let size = row.size;
        let Some(s) = sockperf_row(sp, size) else { continue };
        let v = med(row.vsci.as_ref());
        let r =
            d.peer(format!("local ping-pong {} vs sockperf loopback", size_name(size)), ratio(v, s.median_us), true);
        body.push(vec![format!("ping-pong {}", size_name(size)), lat2(row.vsci.as_ref()), sockperf_lat(s), fr(r)]);
    }
    if let Some(s) = sockperf_row(sp, 64) {
        for row in &sb.interrupt.rows {
            let w = &row.wait;
            let v = med(row.vsci.as_ref());
            let r =
                d.peer(format!("local interrupt ({w} wait) vs sockperf loopback 64 B"), ratio(v, s.median_us), true);
            body.push(vec![
                format!("interrupt, `{w}` (sockperf 64 B)"),
                lat2(row.vsci.as_ref()),
                sockperf_lat(s),
                fr(r),
            ]);
        }
    }
    let ipm = ip.mbps;
    if ipm.is_some() {
        for row in &sb.write_bandwidth.rows {
            let size = row.size;
            if ![64 << 10, 1 << 20, 8 << 20].contains(&size) {
                continue;
            }
            let v = row.vsci_mbps;
            let r = d.peer(format!("local write {} vs iperf3 loopback", size_name(size)), ratio(v, ipm), false);
            body.push(vec![format!("write {}, MB/s (iperf3)", size_name(size)), mbps(v), mbps(ipm), fr(r)]);
        }
    }
    d.table(&["what", "vsci", "TCP over loopback", "vsci/peer"], &body);
}

pub(super) fn ucx_note(d: &mut Doc, ucx: &Ucx) {
    if !ucx.available {
        d.line("**ucx_perftest was not available in this run; its columns show \"-\".**");
        d.line("");
    }
    for e in &ucx.errors {
        let first = e.lines().next().unwrap_or("").to_string();
        d.line(&format!("**ucx_perftest failed** (`UCX_TLS={}`): {first} — that column shows \"-\".", ucx.tls));
        d.line("");
    }
}

fn interrupts_local(d: &mut Doc, sb: &SisciBench) {
    d.line(
        "### Interrupt latency: `SCITriggerInterrupt` → `SCIWaitForInterrupt`, RTT/2 (thesis table 5.7, local column)",
    );
    d.line("");
    d.line("Peer: a blocking `eventfd` ping-pong between two processes. Limit: the 4-byte raw `memfd` polling");
    d.line("ping-pong above (the cost of a polled wake-up). Median / p99 µs. Thesis 5.7 local: host↔host");
    d.line("native and guest↔guest.");
    d.line("");
    let peer = sb.interrupt.peer.as_ref();
    let lim4 = sb.pingpong.rows.iter().find(|r| r.size == 4).and_then(|r| med(r.peer.as_ref()));
    let mut body = Vec::new();
    for r in &sb.interrupt.rows {
        let w = &r.wait;
        let v = med(r.vsci.as_ref());
        let rp = d.peer(format!("local interrupt ({w} wait) vs eventfd"), ratio(v, med(peer)), true);
        body.push(vec![
            format!("interrupt, `VSCI_WAIT={w}`"),
            lat2(r.vsci.as_ref()),
            lat2(peer),
            fr(rp),
            us(lim4),
            fr(ratio(v, lim4)),
            us(Some(T57_LOCAL.0)),
            us(Some(T57_LOCAL.1)),
        ]);
    }
    let dpeer_name = "eventfd + payload through memfd";
    for r in &sb.data_interrupt.rows {
        let w = &r.wait;
        let p = r.payload;
        let v = med(r.vsci.as_ref());
        let rp = d.peer(
            format!("local data interrupt {} ({w}) vs {dpeer_name}", size_name(p)),
            ratio(v, med(r.peer.as_ref())),
            true,
        );
        body.push(vec![
            format!("data interrupt {}, `{w}`", size_name(p)),
            lat2(r.vsci.as_ref()),
            format!("{} ({dpeer_name})", lat2(r.peer.as_ref())),
            fr(rp),
            us(lim4),
            fr(ratio(v, lim4)),
            "".into(),
            "".into(),
        ]);
    }
    d.table(
        &[
            "what",
            "vsci",
            "peer",
            "vsci/peer",
            "limit (raw polling 4 B)",
            "vsci/limit",
            "thesis 5.7 native",
            "thesis 5.7 guest",
        ],
        &body,
    );

    // The histogram the thesis's intr_bench -inner prints.
    let mut cols: Vec<(String, Vec<u64>)> = Vec::new();
    for r in &sb.interrupt.rows {
        if let Some(h) = hist(r.vsci.as_ref()) {
            cols.push((format!("vsci {}", r.wait), h));
        }
    }
    if let Some(h) = hist(peer) {
        cols.push(("eventfd".into(), h));
    }
    hist_table(
        d,
        "Local interrupt latency histogram (RTT/2, 10 µs buckets; the thesis's `intr_bench -inner` format)",
        &cols,
    );
}

/// The Python binding (issue 37): the same two ping-pongs from Python
/// against sisci_bench's C figures of the run; the difference per one-way
/// trip is the binding's cost.
fn python_binding(d: &mut Doc, p: &Outcome<PythonBench>) {
    d.line("### The Python binding: the same ping-pongs from Python (`python3 -m sisci.bench`)");
    d.line("");
    let p = match p {
        Outcome::Ran(p) => p,
        Outcome::Skipped(why) | Outcome::Failed(why) => {
            d.line(&format!("Not measured: {why}."));
            d.line("");
            return;
        }
    };
    d.line("Two Python processes (`python/sisci`, cffi over libsisci) run sisci_bench's 8-byte segment ping-pong");
    d.line("(payload, `store_barrier()`, flag, through a `memoryview` of the map; spin on the own segment) and its");
    d.line("interrupt ping-pong (`trigger()`, `wait()`, each `VSCI_WAIT`); C is sisci_bench's figure of the same");
    d.line("run. RTT/2, median / p99 µs; the median of three rounds of fresh process pairs.");
    d.line("");
    let c = &p.c;
    let mut body = Vec::new();
    let c_size = match c.segment_pingpong_size {
        Some(s) if s != 8 => format!(" (C: its {s}-byte row)"),
        _ => String::new(),
    };
    for row in PythonRow::ALL {
        let Some(py) = p.pingpong(row) else { continue };
        let cm = c.us(row);
        let pm = py.median_us;
        let what = row.label();
        let what = if row.wait().is_none() {
            format!("{what}{c_size}")
        } else {
            what.replace("VSCI_WAIT=", "`VSCI_WAIT=") + "`"
        };
        body.push(vec![what, quantiles(pm, py.p99_us), us(cm), us(pm.zip(cm).map(|(a, b)| a - b)), fr(ratio(pm, cm))]);
    }
    d.table(&["what", "Python", "C (sisci_bench)", "binding cost per trip", "Python/C"], &body);
    let calls = &p.calls;
    let ns = |v: f64| format!("{v:.0} ns");
    d.line(&format!(
        "Single calls from Python: a SISCI getter through cffi {}, through the binding's property {}, `trigger()` {}; \
         a word load / store through a map's `memoryview` {} / {} (an empty loop turn: {}). {}, cffi {}.",
        ns(calls.cffi_call_ns),
        ns(calls.binding_getter_ns),
        ns(calls.trigger_ns),
        ns(calls.memoryview_load_ns),
        ns(calls.memoryview_store_ns),
        ns(calls.loop_ns),
        p.python,
        p.cffi
    ));
    d.line("");
}

/// The seed-001 transfers: `rate` is the limit's MB/s, moved `copies`
/// times.
pub(super) fn transfers(d: &mut Doc, t: &Outcome<Transfers>, rate: Option<f64>, limit_what: &str, copies: f64) {
    let window = match t {
        Outcome::Ran(t) => t.window.as_str(),
        _ => "128m",
    };
    let window = window.to_uppercase().replace('M', " MiB");
    d.line(&format!("### Seed 001 transfers through a {window} window, with acks"));
    d.line("");
    let t = match t {
        Outcome::Ran(t) => t,
        Outcome::Failed(e) | Outcome::Skipped(e) => {
            d.line(&format!("**The transfer run failed:** {}", e.lines().next().unwrap_or("")));
            d.line("");
            return;
        }
    };
    d.line("`examples/sendrecv -copy`, the seed's protocol: the sender copies each chunk (up to 128 MiB, the");
    d.line("seed's window) from a local buffer into the receiver's segment and triggers a data interrupt;");
    d.line("the receiver copies the chunk out into a local buffer and acks with an interrupt; the next chunk");
    d.line("waits for the ack. Time from before the first copy to the last ack, the seed's definition;");
    d.line("median of 3 runs (the first run of each size also pays for first-touch page faults). The");
    d.line("receiver checks every byte after each transfer, untimed. The sender's clock reads whole µs.");
    d.line(&format!("Limit: {limit_what}."));
    d.line("Seed 001: kvmtool, guest→guest on one host, its table 1.");
    d.line("");
    let mut body = Vec::new();
    for r in &t.rows {
        let size = r.size;
        let ms = Some(r.median_ms);
        let lim = rate.map(|m| copies * size as f64 / m / 1e3);
        let seed = r.seed001_ms;
        let rs = ratio(ms, seed);
        let runs: Vec<String> = r.runs_ms.iter().map(|x| ms_fmt(Some(*x))).collect();
        body.push(vec![
            size_name(size),
            format!("{}", r.chunks.unwrap_or(0)),
            ms_fmt(ms),
            runs.join(", "),
            mbps(Some(r.mbps)),
            sig(lim),
            fr(ratio(ms, lim)),
            sig(seed),
            fr(rs),
        ]);
    }
    d.table(
        &[
            "size",
            "chunks",
            "vsci ms (median)",
            "runs ms",
            "MB/s",
            "limit ms",
            "vsci/limit",
            "seed 001 ms",
            "vsci/seed 001",
        ],
        &body,
    );
}
