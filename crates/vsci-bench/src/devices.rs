//! The `devices` path: one host's NIC shared with VMs on other hosts
//! (issue 14), seed 004's §7 scaled to this machine. Three nodes in
//! network namespaces; node 1 runs `vsci device serve` (its wire a TAP,
//! 10.99.0.1) and the servers (tcp_pingpong, iperf3). Process VMs (`vsci
//! device vm`, each in a namespace of its own) run on node 1 itself (the
//! seed's single-host SRIOV baseline: the device reaches the VM's memory
//! without RMA) or on node 2, in the bounce (MRIOV) or zero-copy (MRIOV+)
//! mode. Between a VM's stack and node 1's:
//!
//! 1. latency: tcp_pingpong, a fixed count of round trips per size, every
//!    echo checked (NetPIPE's measure, §7.2);
//! 2. throughput: iperf3 per write length, TX (the VM sends) and RX (`-R`)
//!    (§7.3);
//! 3. interrupts: a fresh VM per configuration, one fixed iperf3 RX run,
//!    its driver's interrupt and packet counters (§7.4);
//! 4. fairness: concurrent RX streams of 1, 1+1 and 2+2 VMs on two hosts,
//!    each VM's share and Jain's index (§7.5);
//! 5. raw bandwidth (§7.1): dma_bench's section f from node 1 to a segment
//!    on node 2, word-by-word PIO against the DMA engine.
//!
//! The same ping-pong and iperf3 runs from node 2 to node 1 over the
//! nodes' veth are the physical reference: every remote packet crosses it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::schema::{
    self, DeviceConfig, DeviceFunction, DeviceRuns, Devices, DevicesPio, Dir, Driver, Drops, Fairness, Interrupts,
    Outcome, PathResult, TcpPingpong, Throughput,
};

use crate::netns::{self, Pair};
use crate::peers::{self, Sites, Tool};
use crate::{fmt_opt, run_forwarded, say, step, tail, Ctx, PathSpec};

pub const PATH: PathSpec = PathSpec {
    name: "devices",
    what: "a NIC shared across hosts (vsci device): process VMs on the device host (SRIOV baseline) and on another host in the bounce (MRIOV) and zero-copy (MRIOV+) modes; TCP ping-pong, iperf3, interrupt counts, fairness, and PIO against DMA, beside the same runs over the veth (network namespaces, RMA engine over TCP)",
    unavailable,
    steps: 5,
    tools: &[Tool::Iperf3],
    run,
};

/// Node 1's end of the device's wire.
const WIRE: &str = "10.99.0.1";
const PINGPONG_PORT: u16 = 7400;
/// iperf3 servers on node 1: the first for single streams, one per VM of
/// the fairness runs.
const IPERF_PORT: u16 = 5201;
const IPERF_SERVERS: u16 = 4;

fn unavailable(ctx: &Ctx) -> Option<String> {
    crate::remote::needs_root_and_ip(ctx).or_else(|| {
        peers::which("iperf3")
            .is_none()
            .then(|| "needs iperf3 (Debian package iperf3; scripts/install-deps.sh installs it)".into())
    })
}

/// A client in namespace `from` (address `from_ip`) and the servers on
/// node 1 at `to` (in namespace `to_ns`).
struct Route {
    from: String,
    from_ip: String,
    to_ns: String,
    to: String,
}

impl Sites for Route {
    fn command(&self, i: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", if i == 0 { &self.from } else { &self.to_ns }])
            .arg(program)
            .stdin(Stdio::null())
            .process_group(0);
        c
    }
    fn addr(&self, i: usize) -> String {
        if i == 1 {
            self.to.clone()
        } else {
            self.from_ip.clone()
        }
    }
    fn node_id(&self, _: usize) -> u32 {
        0
    }
}

/// A process VM: its `vsci device vm` (a helper of the pair), namespace,
/// address and output file.
struct Vm {
    name: String,
    helper: usize,
    ns: String,
    ip: String,
    out: PathBuf,
    /// Node 1's wire TAP's dropped count when the VM started.
    wire_dropped: Option<u64>,
}

impl Vm {
    fn route(&self, pair: &Pair) -> Route {
        Route { from: self.ns.clone(), from_ip: self.ip.clone(), to_ns: pair.ns[0].clone(), to: WIRE.into() }
    }
}

/// Everything the runs share.
struct Bench<'a> {
    ctx: &'a Ctx,
    pair: Pair,
    vsci: PathBuf,
    iperf3: PathBuf,
    pingpong: PathBuf,
    /// The last byte of the next VM's address (each VM gets its own, so no
    /// stale neighbour entry on node 1 points at an earlier VM's MAC).
    next_host: u8,
}

impl Bench<'_> {
    /// Start a process VM on node `node` (1-based) and wait until it holds
    /// a function.
    fn start_vm(&mut self, node: usize, name: &str, mode: &str) -> Result<Vm> {
        let ns = format!("{}-{name}", self.pair.ns[0]);
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        netns::ip(&["netns", "add", &ns])?;
        self.pair.adopt_netns(&ns);
        netns::ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        let ip = format!("10.99.0.{}", self.next_host);
        self.next_host += 1;
        let out = self.pair.dir.join(format!("{name}.out"));
        let mut c = self.pair.command(node - 1, &self.vsci);
        c.args([
            "device",
            "vm",
            "--device-node",
            "1",
            "--name",
            name,
            "--mode",
            mode,
            "--netns",
            &ns,
            "--address",
            &format!("{ip}/24"),
            "--key-file",
        ])
        .arg(self.pair.dir.join("cluster.key"))
        .arg("--socket")
        .arg(&self.pair.sockets[node - 1])
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(out.with_extension("err"))?);
        let helper = self.pair.spawn(c, "vsci device vm")?;
        let t0 = Instant::now();
        while !std::fs::read_to_string(&out).unwrap_or_default().contains("(MAC") {
            if let Some(st) = self.pair.helper(helper).try_wait()? {
                let err = std::fs::read_to_string(out.with_extension("err")).unwrap_or_default();
                bail!(
                    "vsci device vm {name} on node {node} ended ({st}) before it held a function:\n{}",
                    tail(&err, 10)
                );
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("vsci device vm {name} on node {node} held no function after 60 s");
            }
            netns::sleep(Duration::from_millis(100))?;
        }
        // It holds a function; its driver then brings its interface up.
        let vm = Vm { name: name.into(), helper, ns, ip, out, wire_dropped: tx_dropped(&self.pair.ns[0], "nic0") };
        while !Command::new("ip")
            .args(["-n", &vm.ns, "route", "get", WIRE])
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success())
        {
            if t0.elapsed() > Duration::from_secs(60) {
                self.stop_vm(vm);
                bail!("VM {name} on node {node} has no route to {WIRE} after 60 s");
            }
            netns::sleep(Duration::from_millis(50))?;
        }
        Ok(vm)
    }

    /// SIGTERM the VM's `vsci device vm` (which stops the VM), delete its
    /// namespace. Its driver's counters, with what the device counted for
    /// its function (`device`: frames missed for want of a posted buffer)
    /// and the frames the two TAP queues dropped during its life (`drops`:
    /// the VM's interface, and the wire on node 1, which VMs running at the
    /// same time share).
    fn stop_vm(&mut self, vm: Vm) -> Driver {
        let device = self.device_function(&vm.name);
        let drops = Drops {
            vm_tap_tx: tx_dropped(&vm.ns, "eth0"),
            wire_tap_tx: tx_dropped(&self.pair.ns[0], "nic0").zip(vm.wire_dropped).map(|(a, b)| a - b),
        };
        let child = self.pair.helper(vm.helper);
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let _ = netns::wait_child(child, Duration::from_secs(20), "vsci device vm");
        self.pair.drop_netns(&vm.ns);
        let text = std::fs::read_to_string(&vm.out).unwrap_or_default();
        let mut v = driver_stats(&text).unwrap_or_else(|| Driver {
            error: Some(format!("VM {} printed no DriverStats line when stopped: {}", vm.name, tail(&text, 3).trim())),
            ..Driver::default()
        });
        v.device = device;
        v.drops = drops;
        v
    }

    /// `vsci device list --json` on node 1: the counters of the function
    /// VM `name` holds.
    fn device_function(&self, name: &str) -> DeviceFunction {
        let mut c = self.pair.command(0, &self.vsci);
        c.args(["device", "list", "--json", "--device-node", "1", "--key-file"])
            .arg(self.pair.dir.join("cluster.key"))
            .arg("--socket")
            .arg(&self.pair.sockets[0]);
        let list: Option<DeviceList> =
            c.stderr(Stdio::null()).output().ok().and_then(|o| serde_json::from_slice(&o.stdout).ok());
        let f = list.and_then(|l| l.functions.into_iter().find(|f| f.holder.as_ref().is_some_and(|h| h.vm == name)));
        match f {
            Some(f) => DeviceFunction {
                error: None,
                func: Some(f.func),
                tx_packets: Some(f.tx_packets),
                rx_packets: Some(f.rx_packets),
                rx_missed: Some(f.rx_missed),
                faults: Some(f.faults),
                refused: Some(f.refused),
                irqs: Some(f.irqs),
            },
            None => DeviceFunction {
                error: Some(format!("vsci device list shows no function held by {name}")),
                ..DeviceFunction::default()
            },
        }
    }

    /// tcp_pingpong from the route's client to node 1: a fixed count of
    /// round trips per size.
    fn latency(&self, route: &Route, sizes: &[u64]) -> Outcome<TcpPingpong> {
        let (count, warmup) = if self.ctx.quick { (50, 5) } else { (200, 20) };
        let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
        let mut c = route.command(0, &self.pingpong);
        c.args([
            "client",
            &format!("{}:{PINGPONG_PORT}", route.to),
            "--sizes",
            &list.join(","),
            "--count",
            &count.to_string(),
            "--warmup",
            &warmup.to_string(),
        ]);
        let run = || -> Result<TcpPingpong> {
            let (st, out) = run_forwarded(c, "tcp_pingpong client", Duration::from_secs(600), false)?;
            for l in out.lines().filter(|l| l.starts_with("tcp_pingpong ")) {
                say(&format!("  {l}"));
            }
            match (st.success(), out.lines().find_map(|l| l.strip_prefix("@@json "))) {
                (true, Some(j)) => schema::from_str(j).context("tcp_pingpong's @@json line"),
                _ => bail!("tcp_pingpong client failed ({st}):\n{}", tail(&out, 5)),
            }
        };
        Outcome::of(run().inspect_err(|e| say(&format!("  !! latency: {e:#}"))))
    }

    /// iperf3 TX and RX per write length.
    fn throughput(&self, route: &Route, lens: &[u64]) -> Vec<Throughput> {
        let secs = if self.ctx.quick { 2 } else { 5 };
        let mut rows = Vec::new();
        for &len in lens {
            let mut row = Throughput { len, secs: secs.into(), ..Throughput::default() };
            let l = len.to_string();
            for (dir, extra) in [(Dir::Tx, vec!["-l", l.as_str()]), (Dir::Rx, vec!["-l", l.as_str(), "-R"])] {
                let cpu0 = cpu_jiffies();
                let (mbps, retransmits, busy, per_mb, error) = match (dir, &mut row) {
                    (Dir::Tx, r) => (
                        &mut r.tx_mbps,
                        &mut r.tx_retransmits,
                        &mut r.tx_cpu_busy,
                        &mut r.tx_cpu_ms_per_mb,
                        &mut r.tx_error,
                    ),
                    (Dir::Rx, r) => (
                        &mut r.rx_mbps,
                        &mut r.rx_retransmits,
                        &mut r.rx_cpu_busy,
                        &mut r.rx_cpu_ms_per_mb,
                        &mut r.rx_error,
                    ),
                };
                match peers::iperf3_client(route, &self.iperf3, &IPERF_PORT.to_string(), secs, &extra) {
                    Ok(v) => {
                        *mbps = peers::iperf3_received(&v);
                        *retransmits = v.end.sum_sent.retransmits;
                        // What the whole machine spent on the run (both
                        // ends, the device, the nodes, the VM's driver):
                        // busy CPU-ms per MB received.
                        let mb = v.end.sum_received.bytes.map(|b| b / 1e6);
                        if let (Some((b0, t0)), Some((b1, t1)), Some(mb)) = (cpu0, cpu_jiffies(), mb) {
                            let busy_s = (b1 - b0) as f64 / clock_ticks();
                            *busy = Some((b1 - b0) as f64 / (t1 - t0).max(1) as f64);
                            *per_mb = Some(busy_s * 1e3 / mb.max(1e-9));
                        }
                    }
                    Err(e) => *error = Some(format!("{e:#}")),
                }
            }
            let show = |dir: Dir| {
                let f = row.dir(dir);
                match f.mbps {
                    Some(m) => format!(
                        "{:.2} Gbit/s{}",
                        m * 8e-3,
                        f.cpu_ms_per_mb
                            .map(|c| format!(" ({c:.2} CPU-ms/MB, {:.0} % busy)", f.cpu_busy.unwrap_or(0.0) * 100.0))
                            .unwrap_or_default()
                    ),
                    None => format!("FAILED: {}", f.error.unwrap_or("?")),
                }
            };
            say(&format!("  iperf3 -l {len:<6} -t {secs}: TX {}, RX {}", show(Dir::Tx), show(Dir::Rx)));
            rows.push(row);
        }
        rows
    }

    /// One configuration: a VM for latency and throughput, then a fresh
    /// one for the interrupt count.
    fn config(&mut self, name: &str, node: usize, mode: &str, sizes: &[u64], lens: &[u64]) -> Result<DeviceConfig> {
        let vm = self.start_vm(node, &format!("vm-{name}"), mode)?;
        let t0 = Instant::now();
        let route = vm.route(&self.pair);
        let (latency, throughput) = (self.latency(&route, sizes), self.throughput(&route, lens));
        let secs = t0.elapsed().as_secs_f64();
        let driver = self.stop_vm(vm);
        say(&format!(
            "  driver counters over those {secs:.0} s: {}",
            serde_json::to_string(&driver).unwrap_or_default()
        ));
        let interrupts = self.interrupts(node, name, mode)?;
        Ok(DeviceConfig {
            name: name.into(),
            node: node as u64,
            mode: mode.into(),
            error: None,
            latency: Some(latency),
            throughput,
            driver: Some(driver),
            seconds: Some(secs),
            interrupts: Some(interrupts),
        })
    }

    /// A fresh VM, one iperf3 RX run of fixed length, the interrupts and
    /// packets its driver counted over its life.
    fn interrupts(&mut self, node: usize, name: &str, mode: &str) -> Result<Interrupts> {
        let secs = if self.ctx.quick { 3 } else { 10 };
        let vm = self.start_vm(node, &format!("irq-{name}"), mode)?;
        let t0 = Instant::now();
        let r = peers::iperf3_client(&vm.route(&self.pair), &self.iperf3, &IPERF_PORT.to_string(), secs, &["-R"]);
        let driver = self.stop_vm(vm);
        let vm_secs = t0.elapsed().as_secs_f64();
        let mbps = r.as_ref().ok().and_then(peers::iperf3_received);
        let irqs = driver.irqs;
        let packets = driver.tx.zip(driver.rx).map(|(t, r)| t + r);
        say(&format!(
            "  interrupts over one {secs} s iperf3 -R run: {} interrupts, {} packets, {} frames missed by the device, {} Gbit/s{}",
            irqs.map_or("-".into(), |i| i.to_string()),
            packets.map_or("-".into(), |p| p.to_string()),
            driver.device.rx_missed.map_or("null".into(), |m| m.to_string()),
            fmt_opt(mbps.map(|m| m * 8e-3), 2),
            r.as_ref().err().map(|e| format!(" (iperf3 FAILED: {e:#})")).unwrap_or_default()
        ));
        Ok(Interrupts { secs: secs.into(), vm_secs, rx_mbps: mbps, error: r.err().map(|e| format!("{e:#}")), driver })
    }

    /// Zero-copy VMs on `hosts`, one concurrent `iperf3 -R` each: their
    /// shares and Jain's index.
    fn fairness(&mut self, label: &str, hosts: &[usize]) -> Result<Fairness> {
        let secs = if self.ctx.quick { 3 } else { 10 };
        let mut vms = Vec::new();
        for (k, &node) in hosts.iter().enumerate() {
            match self.start_vm(node, &format!("fair{}-{k}", hosts.len()), "zero-copy") {
                Ok(vm) => vms.push(vm),
                Err(e) => {
                    for vm in vms {
                        self.stop_vm(vm);
                    }
                    return Err(e);
                }
            }
        }
        let routes: Vec<Route> = vms.iter().map(|vm| vm.route(&self.pair)).collect();
        let iperf3 = &self.iperf3;
        let results: Vec<Result<peers::IperfJson>> = std::thread::scope(|s| {
            let runs: Vec<_> = routes
                .iter()
                .enumerate()
                .map(|(k, r)| {
                    s.spawn(move || {
                        peers::iperf3_client(r, iperf3, &(IPERF_PORT + k as u16).to_string(), secs, &["-R"])
                    })
                })
                .collect();
            runs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("the iperf3 thread panicked")))).collect()
        });
        let drivers: Vec<Driver> = vms.into_iter().map(|vm| self.stop_vm(vm)).collect();
        let shares: Vec<Option<f64>> =
            results.iter().map(|r| r.as_ref().ok().and_then(peers::iperf3_received)).collect();
        let errors: Vec<String> = results.iter().filter_map(|r| r.as_ref().err().map(|e| format!("{e:#}"))).collect();
        let got: Vec<f64> = shares.iter().flatten().copied().collect();
        let total: f64 = got.iter().sum();
        // Only when every VM reported: a missing share is not a zero.
        let index = if errors.is_empty() { jain(&got) } else { None };
        say(&format!(
            "  {label} (nodes {hosts:?}), {secs} s: {} Gbit/s each, total {:.2}, Jain {}{}",
            shares.iter().map(|x| fmt_opt(x.map(|m| m * 8e-3), 2)).collect::<Vec<_>>().join(" / "),
            total * 8e-3,
            fmt_opt(index, 3),
            if errors.is_empty() { String::new() } else { format!("; FAILED: {}", errors.join("; ")) }
        ));
        Ok(Fairness {
            case: label.into(),
            hosts: hosts.iter().map(|&h| h as u64).collect(),
            secs: Some(secs.into()),
            mbps: shares,
            total_mbps: Some(total),
            jain: index,
            errors,
            drivers,
        })
    }
}

/// The counters of the driver's last line: `... stopped; DriverStats { tx:
/// 1, rx: 2, tx_errors: 0, rx_errors: 0, irqs: 3, copies: 0 }`.
fn driver_stats(text: &str) -> Option<Driver> {
    let body = text.rsplit_once("DriverStats {")?.1.split('}').next()?;
    let m: std::collections::BTreeMap<String, u64> = body
        .split(',')
        .filter_map(|kv| kv.split_once(':'))
        .filter_map(|(k, v)| Some((k.trim().to_string(), v.trim().parse::<u64>().ok()?)))
        .collect();
    if m.is_empty() {
        return None;
    }
    let unknown: Vec<&String> =
        m.keys().filter(|k| !["tx", "rx", "tx_errors", "rx_errors", "irqs", "copies"].contains(&k.as_str())).collect();
    if !unknown.is_empty() {
        say(&format!("  !! DriverStats has counters the results schema does not know: {unknown:?}"));
    }
    let g = |k: &str| m.get(k).copied();
    Some(Driver {
        tx: g("tx"),
        rx: g("rx"),
        tx_errors: g("tx_errors"),
        rx_errors: g("rx_errors"),
        irqs: g("irqs"),
        copies: g("copies"),
        ..Driver::default()
    })
}

/// `vsci device list --json` (crates/vsci-cli/src/device.rs), what is read
/// of it.
#[derive(serde::Deserialize)]
struct DeviceList {
    functions: Vec<ListedFunction>,
}

#[derive(serde::Deserialize)]
struct ListedFunction {
    func: u64,
    holder: Option<Holder>,
    tx_packets: u64,
    rx_packets: u64,
    rx_missed: u64,
    faults: u64,
    refused: u64,
    irqs: u64,
}

#[derive(serde::Deserialize)]
struct Holder {
    vm: String,
}

/// Frames interface `dev` of namespace `ns` dropped on its way out (for a
/// TAP: frames its stack sent that the program behind it never read).
fn tx_dropped(ns: &str, dev: &str) -> Option<u64> {
    let o = Command::new("ip").args(["-n", ns, "-s", "-j", "link", "show", dev]).stdin(Stdio::null()).output().ok()?;
    #[derive(serde::Deserialize)]
    struct Link {
        stats64: Stats,
    }
    #[derive(serde::Deserialize)]
    struct Stats {
        tx: Counters,
    }
    #[derive(serde::Deserialize)]
    struct Counters {
        dropped: u64,
    }
    let v: Vec<Link> = serde_json::from_slice(&o.stdout).ok()?;
    Some(v.first()?.stats64.tx.dropped)
}

/// Jain's fairness index of the shares: 1 when equal, 1/n when one takes all.
/// Busy and total jiffies of the whole machine so far (/proc/stat's `cpu`
/// line; idle and iowait are not busy).
fn cpu_jiffies() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<u64> = s.lines().next()?.split_whitespace().skip(1).take(8).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn jain(x: &[f64]) -> Option<f64> {
    let (sum, sq): (f64, f64) = (x.iter().sum(), x.iter().map(|v| v * v).sum());
    (!x.is_empty() && sq > 0.0).then(|| sum * sum / (x.len() as f64 * sq))
}

fn run(ctx: &Ctx) -> Result<PathResult> {
    let iperf3 =
        ctx.tools.get(Tool::Iperf3).context("iperf3 is needed (scripts/install-deps.sh installs it)")?.to_path_buf();
    let pingpong = ctx.program(&ctx.bench_dir, "tcp_pingpong")?;
    let vsci = crate::node::sibling("vsci");
    step("devices: three nodes, a shared NIC on node 1");
    let mut pair = Pair::create_n(3)?;
    pair.start_nodes(&crate::node::sibling("vscid"), Duration::from_secs(30))?;
    let dev_out = pair.dir.join("device.out");
    let mut dev = pair.command(0, &vsci);
    dev.args([
        "device",
        "serve",
        "--tap",
        "nic0",
        "--address",
        &format!("{WIRE}/24"),
        "--functions",
        "4",
        "--key-file",
    ])
    .arg(pair.dir.join("cluster.key"))
    .arg("--socket")
    .arg(&pair.sockets[0])
    .stdout(std::fs::File::create(&dev_out)?)
    .stderr(Stdio::null());
    let dev = pair.spawn(dev, "vsci device serve")?;
    let t0 = Instant::now();
    while !std::fs::read_to_string(&dev_out).unwrap_or_default().contains("functions on node") {
        if pair.helper(dev).try_wait()?.is_some() || t0.elapsed() > Duration::from_secs(30) {
            bail!("vsci device serve did not come up: {}", std::fs::read_to_string(&dev_out).unwrap_or_default());
        }
        netns::sleep(Duration::from_millis(100))?;
    }
    let mut s = pair.command(0, &pingpong);
    s.args(["server", &format!("0.0.0.0:{PINGPONG_PORT}")]).stdout(Stdio::null()).stderr(Stdio::null());
    pair.spawn(s, "tcp_pingpong server")?;
    for port in IPERF_PORT..IPERF_PORT + IPERF_SERVERS {
        let mut s = pair.command(0, &iperf3);
        s.args(["-s", "-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
        pair.spawn(s, "iperf3 -s")?;
    }
    netns::sleep(Duration::from_millis(500))?;
    let sizes: &[u64] = if ctx.quick { &[32, 4096, 65536] } else { &[32, 256, 1024, 4096, 16384, 65536] };
    let lens: &[u64] = if ctx.quick { &[1024, 65536] } else { &[1024, 4096, 16384, 65536] };
    let veth = Route {
        from: pair.ns[1].clone(),
        from_ip: pair.ip[1].clone(),
        to_ns: pair.ns[0].clone(),
        to: pair.ip[0].clone(),
    };
    let mut b = Bench { ctx, pair, vsci, iperf3, pingpong, next_host: 11 };

    step("devices: the veth reference");
    say(&format!("veth (node 2 -> node 1, {}), the physical reference:", veth.to));
    let reference = DeviceRuns { latency: b.latency(&veth, sizes), throughput: b.throughput(&veth, lens) };

    step("devices: local, bounce and zero-copy VMs");
    let mut configs = Vec::new();
    for (name, node, mode) in [("local", 1usize, "zero-copy"), ("bounce", 2, "bounce"), ("zero-copy", 2, "zero-copy")] {
        netns::check_interrupted()?;
        say(&format!("{name}: a process VM on node {node} in the {mode} mode"));
        configs.push(b.config(name, node, mode, sizes, lens).unwrap_or_else(|e| {
            say(&format!("  !! {name}: {e:#}"));
            DeviceConfig {
                name: name.into(),
                node: node as u64,
                mode: mode.into(),
                error: Some(format!("{e:#}")),
                ..DeviceConfig::default()
            }
        }));
    }

    step("devices: fairness (concurrent RX streams, zero-copy)");
    let mut fairness = Vec::new();
    for (label, hosts) in
        [("1 VM", &[2usize][..]), ("1 VM on each of 2 hosts", &[2, 3]), ("2 VMs on each of 2 hosts", &[2, 2, 3, 3])]
    {
        netns::check_interrupted()?;
        fairness.push(b.fairness(label, hosts).unwrap_or_else(|e| {
            say(&format!("  !! {label}: {e:#}"));
            Fairness {
                case: label.into(),
                hosts: hosts.iter().map(|&h| h as u64).collect(),
                errors: vec![format!("{e:#}")],
                ..Fairness::default()
            }
        }));
    }

    step("devices: PIO against DMA (dma_bench -s f, node 1 -> a segment on node 2)");
    let d = crate::dma::remote(ctx, &mut b.pair, Some("f"));
    let pio = match d {
        Outcome::Ran(d) => DevicesPio { rows: d.pio, failures: Some(d.failures), error: None, mode: Some(d.mode) },
        Outcome::Failed(e) | Outcome::Skipped(e) => DevicesPio { error: Some(e), ..DevicesPio::default() },
    };
    b.pair.check_daemons().context("a node died during the device benchmark")?;
    Ok(PathResult::Devices(Box::new(Devices {
        available: true,
        command: format!("vsci device serve --tap nic0 --address {WIRE}/24 --functions 4 on node 1; vsci device vm --mode zero-copy|bounce on node 1 (local) or 2; tcp_pingpong client {WIRE}:{PINGPONG_PORT} --sizes S --count N and iperf3 -c {WIRE} -l LEN [-R] from the VM's namespace to node 1; veth: the same from node 2 to node 1's veth address; dma_bench -s f -rn 2 on node 1"),
        reference,
        configs,
        fairness,
        pio,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_stats_line_is_parsed() {
        let out = "vsci device vm vm-x: function 1 (MAC 02:..) of node 1\nvsci vm-driver vm-x: stopped; DriverStats { tx: 10, rx: 20, tx_errors: 0, rx_errors: 1, irqs: 7, copies: 0 }\n";
        let v = driver_stats(out).unwrap();
        assert_eq!((v.tx, v.rx, v.irqs, v.rx_errors), (Some(10), Some(20), Some(7), Some(1)));
        assert!(driver_stats("no stats here").is_none());
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[]), None);
    }
}
