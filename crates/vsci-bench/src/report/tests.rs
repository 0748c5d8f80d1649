//! The report from made-up results, and from the repository's own.

use super::*;
use crate::schema::*;

fn lat(m: f64, bad: u64) -> Option<Lat> {
    Some(Lat { n: 100, bad, median_us: Some(m), p99_us: Some(2.0 * m), mean_us: Some(m), ..Lat::default() })
}

fn with_paths(paths: Paths) -> Results {
    Results { paths, ..Results::default() }
}

#[test]
fn thesis_tables_line_up_with_sizes() {
    assert_eq!(t5(&T51, 1 << 10), Some(95279.0));
    assert_eq!(t5(&T55_NATIVE, 8 << 20), Some(5682.0));
    assert_eq!(t5(&T51, 16 << 10), None);
    assert_eq!(t56(&T56_NATIVE, 4), Some(0.710));
    assert_eq!(t56(&T56_NATIVE, 8192), Some(3.572));
    assert_eq!(t56(&T56_NATIVE, 3), None);
}

#[test]
fn a_run_without_results_still_makes_a_report() {
    let out = Results {
        machine: Machine { cpu: "x".into(), ..Machine::default() },
        skipped: vec![Skipped { path: "remote".into(), reason: "needs root".into() }],
        ..Results::default()
    };
    let md = markdown(&out, &[]);
    assert!(md.contains("# Benchmarks") && md.contains("path remote skipped") && md.contains("No ratio"), "{md}");
}

#[test]
fn ratios_and_peer_rows_come_from_the_results() {
    let mut l = Local::default();
    l.sisci_bench.write_bandwidth.rows.push(SbBandwidthRow {
        size: 1024,
        vsci_mbps: Some(50.0),
        peer_mbps: Some(100.0),
        memcpy_call_mbps: Some(62.5),
        ..SbBandwidthRow::default()
    });
    l.peers.ucx_perftest = Ucx {
        available: true,
        tls: "posix,self".into(),
        bw: vec![UcxBw { size: 1024, n: 1.0, mbps: 25.0 }],
        ..Ucx::default()
    };
    l.transfers = Outcome::Ran(Transfers {
        rows: vec![TransferRow {
            size: 4096,
            chunks: Some(1),
            median_ms: 0.5,
            runs_ms: vec![0.5],
            seed001_ms: Some(1.0),
            ..TransferRow::default()
        }],
        ..Transfers::default()
    });
    let md = markdown(&with_paths(Paths { local: Some(l), ..Paths::default() }), &["bandwidth.png".into()]);
    assert!(md.contains("| 1 KiB | 50.0 | 100 | 0.50 | 62.5 | 0.80 | 25.0 | 2.00 | 95279 |"), "{md}");
    assert!(md.contains("local write 1 KiB vs UCX shm put"), "{md}");
    assert!(md.contains("![bandwidth.png](bench/bandwidth.png)"), "{md}");
}

#[test]
fn spinning_store_idle_and_mailbox_rows_stand_beside_their_peers() {
    let idle = |cpu_s: f64, pct: f64, rx: u64, tx: u64| IdleFigures {
        wall_s: Some(10.0),
        cpu_s: Some(cpu_s),
        cpu_pct: Some(pct),
        rx_bytes: Some(rx),
        tx_bytes: Some(tx),
        link_bytes: Some(rx + tx),
    };
    let rb = RemoteBench {
        yield_every: 64,
        pingpong: RbPingpong {
            rows: vec![RbPingpongRow { size: 4, vsci: lat(60.0, 0), ..RbPingpongRow::default() }],
            ..RbPingpong::default()
        },
        spin_pingpong: Some(RbSpinPingpong {
            rows: vec![
                RbSpinRow { map_size: 4096, vsci: lat(30.0, 0) },
                RbSpinRow { map_size: 1 << 30, vsci: lat(45.0, 1) },
            ],
            ..RbSpinPingpong::default()
        }),
        store_flush: Some(RbStoreFlush {
            rows: vec![RbStoreFlushRow { size: 1, data_check: "ok".into(), vsci: lat(40.0, 0) }],
            ..RbStoreFlush::default()
        }),
        idle_map: Some(IdleMap {
            seconds: Some(10.0),
            data_check: "ok".into(),
            map: idle(0.05, 0.5, 600, 400),
            no_map: idle(0.0, 0.0, 300, 200),
            ..IdleMap::default()
        }),
        mailbox: Some(Mailbox {
            rounds: 1000,
            rounds_total: 1200,
            rounds_per_s: Some(5000.0),
            us_per_round: Some(200.0),
            wrong_payloads: 0,
            round: lat(190.0, 0),
            ..Mailbox::default()
        }),
        ..RemoteBench::default()
    };
    let peers = RemotePeers {
        ucx_perftest: Some(Ucx {
            available: true,
            tls: "tcp".into(),
            lat: vec![UcxLat { size: 4, n: 1.0, median_us: 20.0, mean_us: 20.0 }],
            ..Ucx::default()
        }),
        fabric_write: Some(FabricWrite {
            available: true,
            rows: vec![FabricWriteRow {
                size: 1,
                median_us: 20.0,
                p99_us: 30.0,
                data_check: "ok".into(),
                ..FabricWriteRow::default()
            }],
            ..FabricWrite::default()
        }),
        ..RemotePeers::default()
    };
    let remote =
        Remote { remote_bench: rb, peers, transfers: Some(Outcome::Ran(Transfers::default())), ..Remote::default() };
    let md = markdown(&with_paths(Paths { remote: Some(remote), ..Paths::default() }), &[]);
    assert!(md.contains("| spinning, no yields, 4 KiB maps | 30.00 / 60.00 | 0 | 20.00 | 1.50 |"), "{md}");
    assert!(md.contains("| spinning, no yields, 1 GiB maps | 45.00 / 90.00 | 1 | 20.00 | 2.25 |"), "{md}");
    assert!(
        md.contains(
            "| yielding every 64 spins, 4 B message in a 64 KiB inbox (section a) | 60.00 / 120 | 0 | 20.00 | 3.00 |"
        ),
        "{md}"
    );
    assert!(md.contains("| store 1 B + `SCIFlush` | 40.00 / 80.00 | ok | 20.00 / 30.00 | ok | 2.00 |"), "{md}");
    assert!(md.contains("| 1 GiB map, one byte stored | 10.00 | 50.00 | 0.500 | 600 | 400 | 100 |"), "{md}");
    assert!(md.contains("Link bytes with the map / without: 2.00."), "{md}");
    assert!(md.contains("| 1000 (1200) | 5000 | 200 | 190 / 380 | 0 | 25000 | 0.20 |"), "{md}");
}

#[test]
fn ring_and_trapped_store_rows_stand_beside_ucx_and_the_loaded_run() {
    let ring = |size: u64, flush: bool, m: f64, rate: f64, link: f64| RingRow {
        size,
        flush,
        pingpong: lat(m, 0),
        pp_link_bytes_per_msg: Some(link),
        stream_link_bytes_per_msg: Some(link / 2.0),
        msgs_per_s: Some(rate),
        mbps: Some(rate * size as f64 / 1e6),
        ..RingRow::default()
    };
    let am = |lat_us: f64, rate: f64| UcxAm {
        available: true,
        tls: "tcp".into(),
        rows: vec![
            UcxAmRow {
                size: 8,
                test: AmTest::AmLat,
                api: "uct".into(),
                median_us: Some(lat_us),
                msgs_per_s: 1e5,
                link_bytes_per_msg: Some(80.0),
                ..UcxAmRow::default()
            },
            UcxAmRow {
                size: 8,
                test: AmTest::AmBw,
                api: "uct".into(),
                msgs_per_s: rate,
                mbps: rate * 8.0 / 1e6,
                link_bytes_per_msg: Some(100.0),
                ..UcxAmRow::default()
            },
        ],
        ..UcxAm::default()
    };
    let fig = |cpu: f64, proc_cpu: f64, wall: f64, vis: Option<f64>| {
        Some(StoreFigures {
            cpu: lat(cpu, 0),
            process_cpu_us: Some(proc_cpu),
            wall: lat(wall, 0),
            visibility: vis.and_then(|v| lat(v, 0)),
            lost: vis.map(|_| 0),
        })
    };
    let ts = |store_vis: f64| TrappedStore {
        count: 1000,
        pace_us: 1000,
        store: fig(30.0, 50.0, 40.0, Some(store_vis)),
        scimemcpy: fig(20.0, 40.0, 35.0, Some(25.0)),
        local_store: fig(1.0, 2.0, 0.3, None),
        ..TrappedStore::default()
    };
    let rb = RemoteBench {
        message_ring: Some(MessageRing {
            slots: 16,
            rows: vec![ring(8, false, 100.0, 2000.0, 1000.0), ring(8, true, 200.0, 1000.0, 2000.0)],
            ..MessageRing::default()
        }),
        trapped_store: Some(ts(50.0)),
        ..RemoteBench::default()
    };
    let loaded = Loaded {
        busy_loops: 4,
        sections: "ij".into(),
        loadavg_before: vec![1.0, 1.0, 1.0],
        loadavg_started: vec![4.0, 2.0, 1.0],
        loadavg_after: vec![6.0, 3.0, 1.0],
        remote_bench: RemoteBench {
            message_ring: Some(MessageRing {
                rows: vec![ring(8, false, 400.0, 500.0, 1000.0)],
                ..MessageRing::default()
            }),
            trapped_store: Some(ts(100.0)),
            ..RemoteBench::default()
        },
        peers: LoadedPeers { ucx_am: Some(am(10.0, 20000.0)), ..LoadedPeers::default() },
        ..Loaded::default()
    };
    let remote = Remote {
        remote_bench: rb,
        peers: RemotePeers { ucx_am: Some(am(5.0, 40000.0)), ..RemotePeers::default() },
        loaded: Some(Outcome::Ran(loaded)),
        transfers: Some(Outcome::Ran(Transfers::default())),
        ..Remote::default()
    };
    let md = markdown(&with_paths(Paths { remote: Some(remote), ..Paths::default() }), &[]);
    assert!(md.contains("| 8 B | 100 / 200 | 200 / 400 | 5.00 | 20.00 / 40.00 | 0 / 0 | uct |"), "{md}");
    assert!(
        md.contains("| 8 B | 2000 (0.0160 MB/s) | 1000 (0.00800 MB/s) | 40000 (0.320 MB/s) | 0.050 / 0.025 |"),
        "{md}"
    );
    assert!(md.contains("| 8 B | 72 | 144 | 1000 / 2000 | 500 / 1000 | 80 | 100 | 13.89 | 12.50 |"), "{md}");
    assert!(
        md.contains("| store 8 B into the remote map | 30.00 / 30.00 | 50.00 | 40.00 / 80.00 | 50.00 / 100 | 0 |"),
        "{md}"
    );
    assert!(md.contains("Trapped store / one RMA write: thread CPU 1.50, time to the owner 2.00."), "{md}");
    // Loaded: latency ratio 20 -> 40 grows 2x; rate ratio 0.05 -> 0.025 grows 2x.
    assert!(
        md.contains(
            "| ring 8 B ping-pong, no call / UCX tcp am_lat | 100 | 5.00 | 20.00 | 400 | 10.00 | 40.00 | 2.00 |"
        ),
        "{md}"
    );
    assert!(md.contains("| ring 8 B streaming, no call / UCX tcp am_bw (messages/s) | 2000 | 40000 | 0.050 | 500 | 20000 | 0.025 | 2.00 |"), "{md}");
    assert!(md.contains("| trapped store 8 B until seen / SCIMemCpy 8 B until seen | 50.00 | 25.00 | 2.00 | 100 | 25.00 | 4.00 | 2.00 |"), "{md}");
}

#[test]
fn reflective_rows_stand_against_the_group_of_one() {
    let row = |config: &str, members: u64, unicast: bool, call: f64| ReflectiveRow {
        config: config.into(),
        members,
        unicast,
        pio_mbps: Some(100.0),
        pio_us: Some(10.0),
        dma_mbps: Some(900.0),
        dma_us: Some(1.0),
        dma_call_us: Some(call),
        flush: Quantiles { median_us: Some(200.0), p99_us: Some(300.0) },
        visibility_all: VisibilityAll { n: 10, sent: 10, median_us: Some(100.0), p99_us: Some(200.0), max_us: None },
        ..ReflectiveRow::default()
    };
    let r = Reflective {
        block: 1 << 20,
        blocks_pio: 4,
        blocks_dma: 4,
        pace_us: 1000,
        samples: 10,
        rows: vec![
            row("unicast, 1 node", 1, true, 500.0),
            row("group of 1", 1, false, 500.0),
            row("group of 3", 3, false, 1500.0),
        ],
        ..Reflective::default()
    };
    let md = markdown(&with_paths(Paths { reflective: Some(r), ..Paths::default() }), &[]);
    assert!(md.contains("## Reflective memory"), "{md}");
    assert!(
        md.contains(
            "| group of 3 | 100 (10.0) | 900 (1.00) | 1500 | 200 / 300 | 100 / 200 | 10 of 10 | 3.00 / 1.00 / 1.00 |"
        ),
        "{md}"
    );
}

#[test]
fn devices_section_puts_the_configurations_side_by_side() {
    let latency = |m: f64| {
        Outcome::Ran(TcpPingpong {
            count: 200,
            rows: vec![TcpPingpongRow { size: 32, median_us: m, p99_us: 2.0 * m, ..TcpPingpongRow::default() }],
            ..TcpPingpong::default()
        })
    };
    let tp = |rx: f64| {
        vec![Throughput { len: 65536, secs: 5, rx_mbps: Some(rx), tx_mbps: Some(rx), ..Throughput::default() }]
    };
    let dev = |missed: u64, packets: u64| DeviceFunction {
        rx_missed: Some(missed),
        rx_packets: Some(packets),
        ..DeviceFunction::default()
    };
    let cfg = |name: &str, lat: f64, rx: f64| DeviceConfig {
        name: name.into(),
        latency: Some(latency(lat)),
        throughput: tp(rx),
        driver: Some(Driver { device: dev(10, 90), ..Driver::default() }),
        interrupts: Some(Interrupts {
            secs: 10,
            vm_secs: 12.0,
            rx_mbps: Some(rx),
            driver: Driver {
                tx: Some(500),
                rx: Some(1500),
                irqs: Some(100),
                copies: Some(0),
                device: dev(0, 1500),
                ..Driver::default()
            },
            ..Interrupts::default()
        }),
        ..DeviceConfig::default()
    };
    let pio = |how: &str, bytes: u64, ms: f64, mbps: f64| DmaPio {
        how: how.into(),
        dir: "write".into(),
        bytes,
        delivered_bytes: bytes,
        ms: Some(ms),
        mbps: Some(mbps),
    };
    let r = Devices {
        reference: DeviceRuns { latency: latency(10.0), throughput: tp(1000.0) },
        configs: vec![cfg("local", 100.0, 250.0), cfg("bounce", 200.0, 125.0), cfg("zero-copy", 150.0, 250.0)],
        fairness: vec![Fairness {
            case: "1 VM on each of 2 hosts".into(),
            hosts: vec![2, 3],
            secs: Some(10),
            mbps: vec![Some(100.0), None],
            total_mbps: Some(100.0),
            jain: None,
            errors: vec!["iperf3 failed".into()],
            drivers: vec![],
        }],
        pio: DevicesPio {
            rows: Some(vec![
                pio("4-byte stores, SCIFlush after each", 262144, 1000.0, 0.262),
                pio("DMA engine, one 4 MiB transfer (median)", 4194304, 2.0, 2097.0),
            ]),
            ..DevicesPio::default()
        },
        ..Devices::default()
    };
    let md = markdown(&with_paths(Paths { devices: Some(r), ..Paths::default() }), &[]);
    assert!(md.contains("## Device sharing (seed 004)"), "{md}");
    assert!(md.contains("| 32 B | 10.00 / 20.00 | 100 / 200 | 200 / 400 | 150 / 300 | 10.00 | 2.00 | 1.50 |"), "{md}");
    assert!(
        md.contains("| RX 64 KiB | 8.00 | 2.00 | 1.00 | 2.00 | 0.25 | -50.0 % | +0.0 % | MRIOV 5.63 % lower |"),
        "{md}"
    );
    assert!(md.contains("| bounce | 1.00 | 2000 | 100 | 50.00 | 8.33 | 0 (0.0 %) | 10 (10.0 %) | 0 |"), "{md}");
    assert!(md.contains("| 2, 3 | 0.80 / - | 0.80 | - | - | FAILED: iperf3 failed |"), "{md}");
    assert!(md.contains("writes 8004×"), "{md}");
}

#[test]
fn guest_paths_get_their_sections_and_the_guest_host_table() {
    let not_run = GuestPeers { not_run: "not in the image".into() };
    let mut sb = SisciBench::default();
    sb.pingpong.rows.push(SbPingpongRow {
        size: 4,
        vsci: Some(Lat { median_us: Some(1.0), p99_us: Some(2.0), ..Lat::default() }),
        peer: Some(Lat { median_us: Some(0.5), p99_us: Some(1.0), ..Lat::default() }),
        ratio: None,
    });
    let guest = Guest {
        accelerator: Some("tcg (no vmx)".into()),
        iterations: "quick".into(),
        peers: not_run.clone(),
        sisci_bench: sb,
        ..Guest::default()
    };
    let mut rb = RemoteBench::default();
    rb.pingpong.rows.push(RbPingpongRow {
        size: 4,
        vsci: Some(Lat { median_us: Some(2.0), p99_us: Some(3.0), ..Lat::default() }),
        ..RbPingpongRow::default()
    });
    let pair = GuestPair {
        what: "a guest and a host process".into(),
        ends: vec!["guest g".into(), "host process".into()],
        accelerator: Some("tcg (no vmx)".into()),
        peers: not_run,
        remote_bench: rb,
        transfers: Outcome::Ran(Transfers { window: "4m".into(), ..Transfers::default() }),
        ..GuestPair::default()
    };
    let out = Results {
        guest_vs_host: Some(GuestVsHost {
            accelerator: "tcg (no vmx)".into(),
            kvm: false,
            rows: vec![GuestVsHostRow {
                what: "ping-pong 4 B, RTT/2".into(),
                unit: "us".into(),
                host: Some(0.1),
                guest: Some(1.0),
                ratio: Some(10.0),
            }],
            ..GuestVsHost::default()
        }),
        paths: Paths { guest: Some(guest), guest_host: Some(pair), ..Paths::default() },
        ..Results::default()
    };
    let md = markdown(&out, &[]);
    assert!(md.contains("**Accelerator: TCG**") && md.contains("| ping-pong 4 B, RTT/2 | 0.100 | 1.00 |"), "{md}");
    assert!(md.contains("guest ping-pong 4 B vs raw memfd in the guest"), "{md}");
    assert!(
        md.contains("## Path guest-host") && md.contains("guest-host ping-pong 4 B vs raw memfd in a guest"),
        "{md}"
    );
    assert!(md.contains("Peers not run on this path: not in the image"), "{md}");
}

#[test]
fn dma_section_puts_the_paths_side_by_side() {
    let single = |mbps: f64| DmaBench {
        single: vec![DmaSingle {
            dir: "write".into(),
            bytes: 524288,
            dma_mbps: Some(mbps),
            peer_mbps: Some(2.0 * mbps),
        }],
        ..DmaBench::default()
    };
    let (host, guest) = (single(1000.0), single(500.0));
    let v = crate::dma::versus(Some(&host), Some(&guest), None, Some("tcg"));
    let out = Results {
        dma: v,
        paths: Paths {
            local: Some(Local { dma: Outcome::Ran(host), ..Local::default() }),
            guest: Some(Guest { dma: Outcome::Ran(guest), ..Guest::default() }),
            ..Paths::default()
        },
        ..Results::default()
    };
    let md = markdown(&out, &[]);
    assert!(md.contains("## DMA engine (seed 003)"), "{md}");
    assert!(
        md.contains(
            "| single transfer 512 KiB, write (MB/s) | 1000 | 500 | +100 % | - | 7 % overhead (max, at 512 KiB) |"
        ),
        "{md}"
    );
    assert!(md.contains("local DMA write 512 KiB vs memcpy"), "{md}");
}

#[test]
fn the_committed_report_is_what_the_committed_results_make() {
    // docs/benchmarks.md is generated from docs/bench/results.json; both
    // are committed together, so the generator must still make the file.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs");
    let r = crate::schema::load(std::path::Path::new(&format!("{root}/bench/results.json"))).unwrap();
    let r = crate::with_dma_versus(r);
    let plots: Vec<String> =
        ["bandwidth.png", "latency.png", "interrupts.png", "transfers.png"].iter().map(|s| s.to_string()).collect();
    let md = markdown(&r, &plots);
    let committed = std::fs::read_to_string(format!("{root}/benchmarks.md")).unwrap();
    if md != committed {
        let line = md.lines().zip(committed.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "docs/benchmarks.md differs from the report of docs/bench/results.json at line {}:\n  made:      {}\n  committed: {}",
            line + 1,
            md.lines().nth(line).unwrap_or(""),
            committed.lines().nth(line).unwrap_or("")
        );
    }
}
