//! The `devices` path: one host's NIC shared with VMs on other hosts
//! (issue 14, seed 004 §7, scaled). Three nodes in network namespaces;
//! node 1 runs `vsci device serve` (its wire a TAP, 10.99.0.1), process
//! VMs run on node 1 itself (the seed's single-host "SRIOV" baseline) or
//! on node 2, in the bounce ("MRIOV") or zero-copy ("MRIOV+") mode, each
//! in a namespace of its own. sockperf (TCP ping-pong, RTT/2) and iperf3
//! (TX: the VM sends; RX: `-R`) run between the VM's stack and node 1's;
//! the same tools over the nodes' veth are the physical reference. Then
//! the VMs' interrupt counts, and fairness: concurrent RX streams of 1, 2
//! (one per host) and 4 (two per host) VMs.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::netns::{self, Pair};
use super::peers::{self, Sites, Tool};
use super::{run_forwarded, say, step, Ctx, PathSpec};

pub const PATH: PathSpec = PathSpec {
    name: "devices",
    what: "a NIC shared across hosts (vsci device): process VMs on the device host (baseline) and on another host in the bounce and zero-copy modes, sockperf and iperf3 through the device against the same tools over the veth (network namespaces, RMA engine over TCP)",
    unavailable: super::remote::needs_root_and_ip,
    steps: 5,
    tools: &[Tool::Sockperf, Tool::Iperf3],
    run,
};

const WIRE: &str = "10.99.0.1";

/// One end in a VM's namespace, the other on the device host.
struct Through<'a> {
    pair: &'a Pair,
    vm_ns: String,
    vm_ip: String,
}

impl Sites for Through<'_> {
    fn command(&self, i: usize, program: &Path) -> Command {
        if i == 1 {
            return self.pair.command(0, program);
        }
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.vm_ns]).arg(program).stdin(Stdio::null()).process_group(0);
        c
    }
    fn addr(&self, i: usize) -> String {
        if i == 1 { WIRE.into() } else { self.vm_ip.clone() }
    }
    fn node_id(&self, _i: usize) -> u32 {
        0
    }
}

/// Node 2 to node 1 over their veth: the reference.
struct Veth<'a>(&'a Pair);

impl Sites for Veth<'_> {
    fn command(&self, i: usize, program: &Path) -> Command {
        self.0.command(1 - i, program)
    }
    fn addr(&self, i: usize) -> String {
        self.0.ip[1 - i].clone()
    }
    fn node_id(&self, i: usize) -> u32 {
        2 - i as u32
    }
}

/// A process VM: its `vsci device vm` (a helper of the pair), namespace,
/// address and output file.
struct Vm {
    helper: usize,
    ns: String,
    ip: String,
    out: PathBuf,
}

fn start_vm(pair: &mut Pair, vsci: &Path, node: usize, name: &str, mode: &str, host: u8) -> Result<Vm> {
    let ns = format!("{}-{name}", pair.ns[0]);
    let _ = Command::new("ip").args(["netns", "del", &ns]).output();
    netns::ip(&["netns", "add", &ns])?;
    pair.adopt_netns(&ns);
    netns::ip(&["-n", &ns, "link", "set", "lo", "up"])?;
    let ip = format!("10.99.0.{host}");
    let out = pair.dir.join(format!("{name}.out"));
    let mut c = pair.command(node, vsci);
    c.args(["device", "vm", "--device-node", "1", "--name", name, "--mode", mode, "--netns", &ns, "--address", &format!("{ip}/24"), "--key-file"])
        .arg(pair.dir.join("cluster.key"))
        .arg("--socket")
        .arg(&pair.sockets[node])
        .stdout(std::fs::File::create(&out)?)
        .stderr(Stdio::null());
    let helper = pair.spawn(c, "vsci device vm")?;
    let t0 = Instant::now();
    // The driver's line: its interface is up and its buffers are posted.
    while !std::fs::read_to_string(&out).unwrap_or_default().contains(" up, MAC ") {
        if let Some(st) = pair.helper(helper).try_wait()? {
            bail!("vsci device vm {name} ended ({st}) before holding a function");
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("vsci device vm {name} got no function within 30 s");
        }
        netns::sleep(Duration::from_millis(100))?;
    }
    Ok(Vm { helper, ns, ip, out })
}

/// Stop the VM; its driver's counters (`DriverStats { tx, rx, ..., irqs, copies }`).
fn stop_vm(pair: &mut Pair, vm: &Vm) -> Value {
    let pid = pair.helper(vm.helper).id() as i32;
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
    let _ = netns::wait_child(pair.helper(vm.helper), Duration::from_secs(15), "vsci device vm");
    let text = std::fs::read_to_string(&vm.out).unwrap_or_default();
    let field = |k: &str| -> Option<u64> { text.split(&format!("{k}: ")).nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok() };
    json!({"tx": field("tx"), "rx": field("rx"), "irqs": field("irqs"), "copies": field("copies"), "tx_errors": field("tx_errors"), "rx_errors": field("rx_errors")})
}

/// iperf3 from end 0 to end 1 (`reverse`: end 1 sends), `-l len`; MB/s
/// received.
fn iperf(sites: &dyn Sites, prog: &Path, port: u16, len: u64, secs: u32, reverse: bool) -> Result<f64> {
    let addr = sites.addr(1);
    let mut c = sites.command(0, prog);
    c.args(["-c", &addr, "-p", &port.to_string(), "-t", &secs.to_string(), "-l", &len.to_string(), "-J"]);
    if reverse {
        c.arg("-R");
    }
    let (st, out) = run_forwarded(c, "iperf3 -c", Duration::from_secs(secs as u64 + 30), false)?;
    let v: Option<Value> = out.find('{').and_then(|i| serde_json::from_str(out[i..].trim_end()).ok());
    let bps = v.as_ref().and_then(|v| super::f64_at(v, &["end", "sum_received", "bits_per_second"]));
    match (st.success(), bps) {
        (true, Some(b)) => Ok(b / 8.0 / 1e6),
        _ => bail!("iperf3 -c {addr} -l {len}{} failed ({st}): {}", if reverse { " -R" } else { "" }, out.chars().take(400).collect::<String>()),
    }
}

/// Throughput rows (TX and RX per length) for one configuration.
fn throughput(sites: &dyn Sites, prog: &Path, lens: &[u64], secs: u32) -> Value {
    let rows: Vec<Value> = lens
        .iter()
        .map(|&l| {
            let tx = iperf(sites, prog, 5201, l, secs, false);
            let rx = iperf(sites, prog, 5201, l, secs, true);
            let show = |r: &Result<f64>| r.as_ref().map(|m| format!("{m:.1} MB/s")).unwrap_or_else(|e| format!("failed: {e:#}"));
            say(&format!("  iperf3 -l {l:<6}: TX {}, RX {}", show(&tx), show(&rx)));
            json!({"len": l, "tx_MBps": tx.as_ref().ok(), "rx_MBps": rx.as_ref().ok(), "error": tx.err().or(rx.err()).map(|e| format!("{e:#}"))})
        })
        .collect();
    json!(rows)
}

fn run(ctx: &Ctx) -> Result<Value> {
    let (Some(_), Some(iperf3)) = (ctx.tools.get(Tool::Sockperf), ctx.tools.get(Tool::Iperf3)) else {
        bail!("sockperf and iperf3 are needed (scripts/install-deps.sh installs them)");
    };
    let iperf3 = iperf3.to_path_buf();
    let vscid = crate::node::sibling("vscid");
    let vsci = crate::node::sibling("vsci");
    step("devices: three nodes, a shared NIC on node 1");
    let mut pair = Pair::create_n(3)?;
    pair.start_nodes(&vscid, Duration::from_secs(30))?;
    let mut dev = pair.command(0, &vsci);
    dev.args(["device", "serve", "--tap", "nic0", "--address", &format!("{WIRE}/24"), "--functions", "4", "--key-file"])
        .arg(pair.dir.join("cluster.key"))
        .arg("--socket")
        .arg(&pair.sockets[0])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    pair.spawn(dev, "vsci device serve")?;
    netns::sleep(Duration::from_secs(1))?;
    // iperf3 servers on the device host: 5201 for the single-stream runs,
    // one more per concurrent VM of the fairness runs.
    for port in 5201..5206u16 {
        let mut s = pair.command(0, &iperf3);
        s.args(["-s", "-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
        pair.spawn(s, "iperf3 -s")?;
    }
    netns::sleep(Duration::from_millis(300))?;
    let (lat_secs, bw_secs) = if ctx.quick { (1, 1) } else { (3, 4) };
    let sizes: &[u64] = if ctx.quick { &[32, 4096, 65000] } else { &[32, 256, 1024, 4096, 16384, 65000] };
    let lens: &[u64] = if ctx.quick { &[1024, 65536] } else { &[1024, 4096, 16384, 65536] };

    step("devices: the veth reference");
    say("veth (node 2 -> node 1), the physical reference:");
    let veth = Veth(&pair);
    let reference = json!({
        "latency": peers::sockperf(&veth, &ctx.tools, sizes, lat_secs),
        "throughput": throughput(&veth, &iperf3, lens, bw_secs),
    });

    step("devices: local, bounce and zero-copy VMs");
    let mut configs = Vec::new();
    for (name, node, mode) in [("local", 0usize, "zero-copy"), ("bounce", 1, "bounce"), ("zero-copy", 1, "zero-copy")] {
        say(&format!("{name}: a process VM on node {} in the {mode} mode", node + 1));
        let vm = start_vm(&mut pair, &vsci, node, &format!("vm-{name}"), mode, 11)?;
        let t0 = Instant::now();
        let (lat, bw) = {
            let sites = Through { pair: &pair, vm_ns: vm.ns.clone(), vm_ip: vm.ip.clone() };
            (peers::sockperf(&sites, &ctx.tools, sizes, lat_secs), throughput(&sites, &iperf3, lens, bw_secs))
        };
        let secs = t0.elapsed().as_secs_f64();
        let driver = stop_vm(&mut pair, &vm);
        say(&format!("  driver counters over {secs:.0} s: {driver}"));
        configs.push(json!({"name": name, "node": node + 1, "mode": mode, "latency": lat, "throughput": bw, "driver": driver, "seconds": secs}));
    }

    step("devices: fairness (concurrent RX streams, zero-copy)");
    let mut fairness = Vec::new();
    for (label, placement) in [("1 VM", vec![1usize]), ("1 VM on each of 2 hosts", vec![1, 2]), ("2 VMs on each of 2 hosts", vec![1, 1, 2, 2])] {
        let mut vms = Vec::new();
        for (k, &node) in placement.iter().enumerate() {
            vms.push(start_vm(&mut pair, &vsci, node, &format!("f{}-{k}", placement.len()), "zero-copy", 21 + k as u8)?);
        }
        let secs = if ctx.quick { 2 } else { 5 };
        let handles: Vec<_> = vms
            .iter()
            .enumerate()
            .map(|(k, vm)| {
                let sites = Through { pair: &pair, vm_ns: vm.ns.clone(), vm_ip: vm.ip.clone() };
                let mut c = sites.command(0, &iperf3);
                c.args(["-c", WIRE, "-p", &(5202 + k as u16).to_string(), "-t", &secs.to_string(), "-R", "-J"]).stdout(Stdio::piped()).stderr(Stdio::null());
                c.spawn()
            })
            .collect();
        let mut shares = Vec::new();
        for h in handles {
            let mbps = h.ok().and_then(|c| c.wait_with_output().ok()).and_then(|o| {
                let s = String::from_utf8_lossy(&o.stdout).into_owned();
                let v: Value = serde_json::from_str(s.trim()).ok()?;
                super::f64_at(&v, &["end", "sum_received", "bits_per_second"]).map(|b| b / 8.0 / 1e6)
            });
            shares.push(mbps);
        }
        for vm in &vms {
            stop_vm(&mut pair, vm);
        }
        let got: Vec<f64> = shares.iter().flatten().copied().collect();
        let (sum, sq): (f64, f64) = (got.iter().sum(), got.iter().map(|x| x * x).sum());
        let jain = (!got.is_empty() && sq > 0.0).then(|| sum * sum / (got.len() as f64 * sq));
        say(&format!("  {label}: {} MB/s each, total {sum:.1}, Jain {}", got.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(" / "), super::fmt_opt(jain, 3)));
        fairness.push(json!({"case": label, "hosts": placement.iter().map(|n| n + 1).collect::<Vec<_>>(), "MBps": shares, "total_MBps": sum, "jain": jain}));
    }
    pair.check_daemons().context("a node died during the device benchmark")?;
    Ok(json!({
        "available": true,
        "command": "vsci device serve on node 1 (wire TAP 10.99.0.1); vsci device vm --mode M on node 1 or 2; sockperf ping-pong --tcp and iperf3 -l LEN [-R] from the VM's namespace to node 1",
        "latency_secs": lat_secs,
        "throughput_secs": bw_secs,
        "reference": reference,
        "configs": configs,
        "fairness": fairness,
    }))
}
