//! The devices path (seed 004): a NIC shared across hosts.

use super::{fr, mbps, quantiles, ratio, sig, Doc};
use crate::schema::{DeviceConfig, Devices, Dir, DirFigures, DmaPio, Driver, TcpPingpong, Throughput};
use crate::size_name;

/// What the tables read of a configuration or of the veth reference.
#[derive(Clone, Copy, Default)]
struct View<'a> {
    latency: Option<&'a TcpPingpong>,
    throughput: &'a [Throughput],
}

impl<'a> View<'a> {
    fn of(c: &'a DeviceConfig) -> View<'a> {
        View { latency: c.latency.as_ref().and_then(|l| l.ran()), throughput: &c.throughput }
    }
}

/// A configuration's throughput figures at write length `len`.
fn at(c: View<'_>, len: u64, dir: Dir) -> DirFigures<'_> {
    c.throughput.iter().find(|x| x.len == len).map(|x| x.dir(dir)).unwrap_or_default()
}

/// Its MB/s.
fn bw(c: View<'_>, len: u64, dir: Dir) -> Option<f64> {
    at(c, len, dir).mbps
}

/// Gbit/s from MB/s.
fn gbit(mbps: Option<f64>) -> String {
    match mbps {
        Some(x) if x.is_finite() => format!("{:.2}", x * 8e-3),
        _ => "-".into(),
    }
}

/// Frames the device missed for a function (`vsci device list` counters):
/// the count and its share of the frames that came for it.
fn missed(rx_missed: Option<u64>, rx_packets: Option<u64>) -> String {
    match (rx_missed.map(|x| x as f64), rx_packets.map(|x| x as f64)) {
        (Some(m), Some(r)) if m + r > 0.0 => format!("{m:.0} ({:.1} %)", m / (m + r) * 100.0),
        _ => "-".into(),
    }
}

/// Seed 004's RX figures of MRIOV against SRIOV (§7.3): write length and
/// how much lower, in percent.
const LADON_RX_LOSS: [(u64, f64); 3] = [(16 << 10, 4.51), (32 << 10, 5.13), (64 << 10, 5.63)];

/// Seed 004's §7 on this host: latency, throughput, interrupts, fairness,
/// PIO against DMA.
pub(super) fn devices(d: &mut Doc, r: &Devices) {
    d.line("## Device sharing (seed 004)");
    d.line("");
    d.line(
        "Three `vscid` nodes in network namespaces; node 1 runs `vsci device serve` (a NIC model whose wire is a \
         TAP, 10.99.0.1) and the servers. Process VMs (`vsci device vm`, each in a namespace of its own, its \
         stack behind the function's driver) hold one function each: **local** runs on node 1 itself (the \
         seed's single-host SRIOV baseline: the device reaches the VM's memory without RMA), **bounce** on \
         node 2 (MRIOV: a 4 MiB payload area, the driver copies every packet), **zero-copy** on node 2 \
         (MRIOV+: descriptors name the VM's own buffers, the RMA engine moves them). **veth** is the physical \
         reference: the same programs from node 2 to node 1 over the nodes' link, which every remote packet \
         also crosses. Throughput: one iperf3 stream, TX = the VM sends, RX = `-R`, Gbit/s received. Everything shares the machine's 2 cores with the nodes, the device model and the VM drivers.",
    );
    d.line("");
    let configs = &r.configs;
    let find = |n: &str| r.config(n).map(View::of).unwrap_or_default();
    let (local, bounce, zc) = (find("local"), find("bounce"), find("zero-copy"));
    let veth = View { latency: r.reference.latency.ran(), throughput: &r.reference.throughput };
    for c in configs {
        if let Some(e) = &c.error {
            d.line(&format!("**{} FAILED:** {e}", c.name));
            d.line("");
        }
    }

    let lat_row = |c: View, size: u64| {
        c.latency.and_then(|l| l.rows.iter().find(|x| x.size == size)).map(|x| (x.median_us, x.p99_us))
    };
    let mut sizes: Vec<u64> = [veth, local, bounce, zc]
        .iter()
        .flat_map(|c| c.latency.into_iter().flat_map(|l| l.rows.iter().map(|x| x.size)))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let q = |x: Option<(f64, f64)>| x.map(|(m, p)| quantiles(Some(m), Some(p))).unwrap_or_else(|| "-".into());
    let m = |x: Option<(f64, f64)>| x.map(|x| x.0);
    let mut body = Vec::new();
    for &size in &sizes {
        let (v, l, b, z) = (lat_row(veth, size), lat_row(local, size), lat_row(bounce, size), lat_row(zc, size));
        if size == sizes[0] {
            for (name, x) in [("local", &l), ("bounce", &b), ("zero-copy", &z)] {
                d.peer(
                    format!("devices: {name} VM vs veth, {size} B ping-pong"),
                    ratio(x.map(|x| x.0), v.map(|v| v.0)),
                    true,
                );
            }
        }
        body.push(vec![
            size_name(size),
            q(v),
            q(l),
            q(b),
            q(z),
            fr(ratio(m(l), m(v))),
            fr(ratio(m(b), m(l))),
            fr(ratio(m(z), m(l))),
        ]);
    }
    if !body.is_empty() {
        let how = match local.latency.map(|l| l.count) {
            Some(n) => format!("`tcp_pingpong`, {n} blocking TCP round trips per size, every echo checked"),
            None => "`sockperf ping-pong --tcp`, time-based".into(),
        };
        d.line(&format!("**Latency** (median / p99 µs, RTT/2; {how}). The seed (NetPIPE, Fig. 5) gives no absolute values: MRIOV above SRIOV up to 512 B, the gap gone from 1 KiB, MRIOV+ the same as SRIOV throughout."));
        d.line("");
        d.table(
            &[
                "size",
                "veth",
                "local (SRIOV)",
                "bounce (MRIOV)",
                "zero-copy (MRIOV+)",
                "local / veth",
                "bounce / local",
                "zero-copy / local",
            ],
            &body,
        );
    }

    let lens: Vec<u64> = local.throughput.iter().map(|x| x.len).collect();
    let mut body = Vec::new();
    for (dir, k) in [("RX", Dir::Rx), ("TX", Dir::Tx)] {
        for &len in &lens {
            let (v, l, b, z) = (bw(veth, len, k), bw(local, len, k), bw(bounce, len, k), bw(zc, len, k));
            if len == *lens.iter().max().unwrap_or(&0) {
                for (name, x) in [("local", l), ("bounce", b), ("zero-copy", z)] {
                    d.peer(format!("devices: {name} VM vs veth, {dir} -l {}", size_name(len)), ratio(x, v), false);
                }
            }
            let seed = LADON_RX_LOSS
                .iter()
                .find(|(s, _)| dir == "RX" && *s == len)
                .map(|(_, p)| format!("MRIOV {p} % lower"))
                .unwrap_or_default();
            let loss =
                |x: Option<f64>| ratio(x, l).map(|q| format!("{:+.1} %", (q - 1.0) * 100.0)).unwrap_or("-".into());
            body.push(vec![
                format!("{dir} {}", size_name(len)),
                gbit(v),
                gbit(l),
                gbit(b),
                gbit(z),
                fr(ratio(l, v)),
                loss(b),
                loss(z),
                seed,
            ]);
        }
    }
    if !body.is_empty() {
        d.line(&format!(
            "**Throughput** (iperf3, Gbit/s received{}; against local: the change from the SRIOV baseline). The seed \
             (Iperf, Figs. 6-7): MRIOV loses less than 6 % RX, MRIOV+ nothing.",
            local.throughput.first().map(|t| format!(", {} s per run", t.secs)).unwrap_or_default()
        ));
        d.line("");
        d.table(
            &[
                "direction, -l",
                "veth",
                "local (SRIOV)",
                "bounce (MRIOV)",
                "zero-copy (MRIOV+)",
                "local / veth",
                "bounce vs local",
                "zero-copy vs local",
                "seed",
            ],
            &body,
        );
        let failed: Vec<String> = [("veth", veth), ("local", local), ("bounce", bounce), ("zero-copy", zc)]
            .iter()
            .flat_map(|(n, c)| {
                c.throughput.iter().flat_map(move |x| {
                    [("tx", &x.tx_error), ("rx", &x.rx_error)]
                        .into_iter()
                        .filter_map(move |(k, e)| e.as_ref().map(|e| format!("{n} {k} -l {}: {e}", x.len)))
                })
            })
            .collect();
        for f in &failed {
            d.line(&format!("- FAILED: {f}"));
        }
        if !failed.is_empty() {
            d.line("");
        }
    }

    // What each byte cost the machine: the remote path moves every byte
    // once more, through the RMA engine, on the same cores.
    if let Some(&len) = lens.iter().max() {
        let mut body = Vec::new();
        for (dir, k) in [("rx", Dir::Rx), ("tx", Dir::Tx)] {
            let cost = |c: View<'_>| at(c, len, k).cpu_ms_per_mb;
            for (name, c) in
                [("veth", veth), ("local (SRIOV)", local), ("bounce (MRIOV)", bounce), ("zero-copy (MRIOV+)", zc)]
            {
                if cost(c).is_none() {
                    continue;
                }
                body.push(vec![
                    format!("{} {}", dir.to_uppercase(), size_name(len)),
                    name.to_string(),
                    gbit(at(c, len, k).mbps),
                    at(c, len, k).cpu_busy.map_or("-".into(), |b| format!("{:.0} %", b * 100.0)),
                    sig(cost(c)),
                    fr(ratio(cost(c), cost(local))),
                ]);
            }
        }
        if !body.is_empty() {
            d.line(
                "**CPU per byte** (the throughput runs above): how busy the whole machine was during the run (both cores: \
                 both ends of the connection, the device model, the VM's driver and hypervisor, the nodes) and the busy \
                 CPU-milliseconds it spent per MB received. Where the machine is near 100 % busy, throughput is what the \
                 CPU allows, and the cost per MB is what sets it.",
            );
            d.line("");
            d.table(&["direction, -l", "path", "Gbit/s", "machine busy", "CPU-ms per MB", "against local"], &body);
        }
    }

    let mut body = Vec::new();
    for c in configs {
        let Some(i) = &c.interrupts else { continue };
        let dr = &i.driver;
        let irqs = dr.irqs.map(|x| x as f64);
        let pk = dr.tx.zip(dr.rx).map(|(t, r)| (t + r) as f64);
        let dev_missed = |dr: Option<&Driver>| match dr {
            Some(dr) => missed(dr.device.rx_missed, dr.device.rx_packets),
            None => "-".into(),
        };
        body.push(vec![
            c.name.clone(),
            gbit(i.rx_mbps),
            sig(pk),
            sig(irqs),
            fr(ratio(irqs.map(|x| x * 1000.0), pk)),
            sig(ratio(irqs, Some(i.vm_secs))),
            dev_missed(Some(dr)),
            dev_missed(c.driver.as_ref()),
            dr.copies.map_or("-".into(), |x| x.to_string()),
        ]);
    }
    if !body.is_empty() {
        d.line(&format!(
            "**Interrupts** (seed Fig. 8): a fresh VM per configuration, one {} s `iperf3 -R` run; the interrupts its driver \
             received and the packets it moved over the VM's whole life (start, run, stop). The seed: MRIOV gets fewer \
             interrupts than SRIOV above 2 KB, its slower handler keeping NAPI polling. *Missed*: frames for the VM that \
             the device dropped because no receive buffer was posted and its 1024-frame receive FIFO was full (as a NIC \
             whose ring and packet buffer are full; TCP sends them again), in this run and over the latency and \
             throughput runs above.",
            configs.iter().find_map(|c| c.interrupts.as_ref().map(|i| i.secs)).unwrap_or(0)
        ));
        d.line("");
        d.table(
            &[
                "VM",
                "RX Gbit/s",
                "packets",
                "interrupts",
                "per 1000 packets",
                "per s",
                "missed (this run)",
                "missed (runs above)",
                "driver copies",
            ],
            &body,
        );
    }

    let body: Vec<Vec<String>> = r
        .fairness
        .iter()
        .map(|f| {
            let each: Vec<String> = f.mbps.iter().map(|x| gbit(*x)).collect();
            let errs: Vec<&str> = f.errors.iter().map(String::as_str).collect();
            let dev = |k: fn(&Driver) -> Option<u64>| f.drivers.iter().filter_map(k).sum::<u64>();
            vec![
                f.case.clone(),
                f.hosts.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "),
                each.join(" / "),
                gbit(f.total_mbps),
                fr(f.jain),
                missed(Some(dev(|x| x.device.rx_missed)), Some(dev(|x| x.device.rx_packets))),
                if errs.is_empty() { String::new() } else { format!("FAILED: {}", errs.join("; ")) },
            ]
        })
        .collect();
    if !body.is_empty() {
        d.line(&format!(
            "**Fairness** (seed Fig. 9): zero-copy VMs, one concurrent `iperf3 -R` each{}, Gbit/s per VM and Jain's index \
             (1 = equal shares; only when every VM reported). The seed: VMs on the same or different hosts get about equal shares.",
            r.fairness.first().and_then(|f| f.secs).map(|s| format!(" ({s} s)")).unwrap_or_default()
        ));
        d.line("");
        d.table(
            &["case", "VMs on nodes", "Gbit/s per VM", "total Gbit/s", "Jain's index", "missed by the device", ""],
            &body,
        );
    }

    let pio = &r.pio;
    let rows: &[DmaPio] = pio.rows.as_deref().unwrap_or_default();
    if let Some(e) = &pio.error {
        d.line(&format!("**PIO against DMA** FAILED: {e}"));
        d.line("");
    } else if !rows.is_empty() {
        let link = bw(veth, *lens.iter().max().unwrap_or(&0), Dir::Tx);
        let row = |how: &str| rows.iter().find(|x| x.how.starts_with(how)).and_then(|x| x.mbps);
        d.line(&format!(
            "**PIO against DMA** (seed §7.1, `dma_bench -s f`): node 1 writes and reads a 4 MiB area of a segment on node 2. \
             Word-by-word rows time a prefix; MB/s counts only bytes a DMA read found in the target afterwards. \
             For scale: one iperf3 stream over the veth (TX, 64 KiB writes, above) moved {} MB/s; one RMA transfer of \
             4 MiB can beat it.",
            mbps(link)
        ));
        d.line("");
        let paper = |how: &str, dir: &str| match (how.starts_with("DMA"), dir) {
            (false, "write") if how.contains("after each") => "11.4 MB/s",
            (false, "read") => "11.99 MB/s",
            (true, "write") => "3.44 GB/s",
            (true, "read") => "3.69 GB/s",
            _ => "",
        };
        let body: Vec<Vec<String>> = rows
            .iter()
            .map(|x| {
                let (how, dir) = (x.how.as_str(), x.dir.as_str());
                let wrong = x.bytes.saturating_sub(x.delivered_bytes);
                vec![
                    how.to_string(),
                    dir.to_string(),
                    size_name(x.bytes),
                    sig(x.ms),
                    sig(x.mbps),
                    wrong.to_string(),
                    sig(ratio(x.mbps, link)),
                    paper(how, dir).into(),
                ]
            })
            .collect();
        d.table(&["how", "dir", "bytes", "ms", "MB/s", "wrong bytes", "/ veth iperf3", "seed (NTB)"], &body);
        let (pw, dw) = (row("4-byte stores, SCIFlush after each"), row("DMA engine, one 4 MiB transfer"));
        let (pr, dr) = (row("4-byte SCIMemCpy"), row("DMA engine, one 4 MiB read"));
        d.line(&format!(
            "DMA / word-by-word PIO: writes {}×, reads {}× (the seed: 302× and 308×).",
            sig(ratio(dw, pw)),
            sig(ratio(dr, pr))
        ));
        d.line("");
    }

    // The seed's claims against this run, in words.
    let rx_big = lens.iter().max().copied();
    if let Some(len) = rx_big {
        let (l, b, z) = (bw(local, len, Dir::Rx), bw(bounce, len, Dir::Rx), bw(zc, len, Dir::Rx));
        if let (Some(l), Some(b), Some(z)) = (l, b, z) {
            let cpu = |c: View<'_>| at(c, len, Dir::Rx).cpu_ms_per_mb;
            let cost = match (cpu(local), cpu(bounce), cpu(zc)) {
                (Some(cl), Some(cb), Some(cz)) => format!(
                    " The machine was {}-{} % busy in each run, and a remote VM's MB cost {:.2}× (bounce) and {:.2}× (zero-copy) \
                     the CPU of a local one's: most of the gap is the CPU it costs to move every byte once more, through the RMA engine.",
                    [local, bounce, zc].iter().filter_map(|c| at(*c, len, Dir::Rx).cpu_busy).map(|x| (x * 100.0).round() as i64).min().unwrap_or(0),
                    [local, bounce, zc].iter().filter_map(|c| at(*c, len, Dir::Rx).cpu_busy).map(|x| (x * 100.0).round() as i64).max().unwrap_or(0),
                    cb / cl,
                    cz / cl
                ),
                _ => String::new(),
            };
            d.line(&format!(
                "**Against the seed's claims** (RX at -l {}): bounce {:+.0} % and zero-copy {:+.0} % against local, where the seed \
                 reports -5.6 % and about 0 %. Unlike the seed's PCIe NTB, every packet of a remote VM here crosses the RMA \
                 engine (libfabric over TCP on the same veth) and the nodes' engine threads, on the same 2 cores as both \
                 ends of the connection, the device model and the VM's driver; the local VM's packets stay in node 1's memory.{cost}",
                size_name(len),
                (b / l - 1.0) * 100.0,
                (z / l - 1.0) * 100.0
            ));
            d.line("");
        }
    }
}
