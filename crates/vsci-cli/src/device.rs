//! `vsci device`: sharing one host's device functions with VMs on other
//! nodes (docs/devices.md).
//!
//! - `serve` (device host): the NIC model and its platform manager;
//! - `vm` (compute host): a process VM holding one function;
//! - `list`, `revoke` (anywhere in the cluster, with the cluster key);
//! - `vm-driver`: the VM itself (started by `vm`).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand, ValueEnum};
use vsci_devshare::msg::{Mode, Reply, Request};

#[derive(Subcommand)]
pub enum DeviceCmd {
    /// Run a shared NIC on this node: FUNCTIONS functions whose wire is TAP interface TAP.
    Serve(ServeArgs),
    /// Run a process VM on this node with a function of node DEVICE_NODE's device.
    Vm(VmArgs),
    /// Show a device's functions, who holds each and their counters.
    List(AdminArgs),
    /// Take function FUNC back from whoever holds it.
    Revoke {
        #[command(flatten)]
        admin: AdminArgs,
        /// The function to take back.
        #[arg(long)]
        func: u8,
    },
    /// The process VM's driver (started by `vsci device vm`).
    #[command(hide = true)]
    VmDriver(DriverArgs),
}

#[derive(Args)]
pub struct Common {
    /// The node's control socket [default: $VSCI_SOCKET, else /tmp/vscid.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The cluster key file (the one vscid's cluster file names): requests
    /// to the platform manager are signed with it.
    #[arg(long)]
    key_file: PathBuf,
    /// The device's interrupt number.
    #[arg(long, default_value_t = vsci_devshare::msg::DEFAULT_INTERRUPT)]
    interrupt: u32,
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    common: Common,
    /// The TAP interface that is the device's wire (created if missing).
    #[arg(long, default_value = "vsci-nic0")]
    tap: String,
    /// An address for this host's end of the wire, e.g. 10.99.0.1/24.
    #[arg(long)]
    address: Option<String>,
    /// Functions the device offers (1-64).
    #[arg(long, default_value_t = 4)]
    functions: u8,
    /// The device's name.
    #[arg(long, default_value = "nic0")]
    name: String,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// MRIOV+: the function reaches all of the VM's memory; no copy.
    ZeroCopy,
    /// MRIOV: the function reaches a 4 MiB payload area; the driver copies.
    Bounce,
}

#[derive(Args)]
pub struct VmArgs {
    #[command(flatten)]
    common: Common,
    /// The node whose device to use.
    #[arg(long)]
    device_node: u32,
    /// The VM's name (shown by `vsci device list`).
    #[arg(long)]
    name: String,
    #[arg(long, value_enum, default_value = "zero-copy")]
    mode: ModeArg,
    /// The VM's memory.
    #[arg(long, default_value = "16M", value_parser = vsci_proto::parse_size)]
    ram: u64,
    /// Run the VM in this network namespace (`ip netns exec`): its TAP and
    /// its traffic live there.
    #[arg(long)]
    netns: Option<String>,
    /// The VM's interface name.
    #[arg(long, default_value = "eth0")]
    tap: String,
    /// The VM's address, e.g. 10.99.0.11/24.
    #[arg(long)]
    address: Option<String>,
    /// The user the VM runs as once its interface is up.
    #[arg(long)]
    user: Option<String>,
    /// The VM is a QEMU guest (`vsci vm run`) whose stock virtio-net driver
    /// drives the function; the arguments after `--` are `vsci vm run`'s
    /// (`--socket`, `--add`, ..., `-- CMD`). --ram is the guest's memory.
    #[arg(long)]
    guest: bool,
    /// After `--`: with --guest, `vsci vm run`'s arguments; else a command
    /// to run as the VM instead of the driver (it gets `--ram-fd 3
    /// --chan-fd 4`): for tests with hostile VMs.
    #[arg(last = true)]
    driver: Vec<String>,
}

#[derive(Args)]
pub struct AdminArgs {
    #[command(flatten)]
    common: Common,
    /// The device host's node id.
    #[arg(long)]
    device_node: u32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct DriverArgs {
    #[arg(long)]
    ram_fd: i32,
    #[arg(long)]
    chan_fd: i32,
    #[arg(long, default_value = "eth0")]
    tap: String,
    #[arg(long)]
    address: Option<String>,
    #[arg(long)]
    user: Option<String>,
}

fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    Ok(stop)
}

fn socket(c: &Common) -> PathBuf {
    c.socket.clone().unwrap_or_else(vsci_proto::socket_path)
}

pub fn run(cmd: DeviceCmd) -> Result<()> {
    match cmd {
        DeviceCmd::Serve(a) => vsci_devshare::nic::serve(
            vsci_devshare::nic::DeviceOptions {
                socket: socket(&a.common),
                name: a.name,
                tap: a.tap,
                address: a.address,
                functions: a.functions,
                interrupt: a.common.interrupt,
                key: vsci_devshare::nic::key_from(&a.common.key_file)?,
            },
            stop_flag()?,
        ),
        DeviceCmd::Vm(a) => {
            let exe = std::env::current_exe()?.to_string_lossy().into_owned();
            let kind = if a.guest {
                let split = a.driver.iter().position(|x| x == "--").unwrap_or(a.driver.len());
                let mut command = vec![exe, "vm".into(), "run".into(), "--name".into(), a.name.clone()];
                command.extend(a.driver[..split].iter().cloned());
                vsci_devshare::hyp::VmKind::Guest { command, rest: a.driver[split..].to_vec() }
            } else {
                vsci_devshare::hyp::VmKind::Process(process_driver(&a, exe))
            };
            vsci_devshare::hyp::run_vm(
                vsci_devshare::hyp::VmOptions {
                    socket: socket(&a.common),
                    device_node: a.device_node,
                    device_interrupt: a.common.interrupt,
                    key: vsci_devshare::nic::key_from(&a.common.key_file)?,
                    name: a.name,
                    mode: match a.mode {
                        ModeArg::ZeroCopy => Mode::ZeroCopy,
                        ModeArg::Bounce => Mode::Bounce,
                    },
                    ram: a.ram,
                    kind,
                },
                stop_flag()?,
            )
        }
        DeviceCmd::VmDriver(a) => {
            vsci_devshare::driver::run(
                vsci_devshare::driver::DriverOptions {
                    ram_fd: a.ram_fd,
                    chan_fd: a.chan_fd,
                    tap: a.tap,
                    address: a.address,
                    user: a.user,
                },
                stop_flag()?,
            )?;
            Ok(())
        }
        DeviceCmd::List(a) => {
            let r = ask(&a, Request::List)?;
            let Reply::List { device, functions } = r else { bail!("unexpected answer: {r:?}") };
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "device": device, "node": a.device_node, "functions": functions.iter().map(|f| serde_json::json!({
                    "func": f.func, "mac": vsci_devshare::regs::mac_string(&f.mac),
                    "holder": f.holder.as_ref().map(|(n, vm, m)| serde_json::json!({"node": n, "vm": vm, "mode": format!("{m:?}")})),
                    "tx_packets": f.tx_packets, "rx_packets": f.rx_packets, "rx_missed": f.rx_missed,
                    "faults": f.faults, "refused": f.refused, "irqs": f.irqs,
                })).collect::<Vec<_>>() })
                    )?
                );
            } else {
                println!("device {device} on node {}", a.device_node);
                println!(
                    "{:>4}  {:17}  {:24}  {:>9}  {:>9}  {:>7}  {:>6}  {:>7}",
                    "FUNC", "MAC", "HOLDER", "TX", "RX", "MISSED", "FAULTS", "REFUSED"
                );
                for f in functions {
                    let holder = f
                        .holder
                        .map(|(n, vm, m)| {
                            format!("node {n} {vm} ({})", if m == Mode::ZeroCopy { "zero-copy" } else { "bounce" })
                        })
                        .unwrap_or_else(|| "-".into());
                    println!(
                        "{:>4}  {:17}  {:24}  {:>9}  {:>9}  {:>7}  {:>6}  {:>7}",
                        f.func,
                        vsci_devshare::regs::mac_string(&f.mac),
                        holder,
                        f.tx_packets,
                        f.rx_packets,
                        f.rx_missed,
                        f.faults,
                        f.refused
                    );
                }
            }
            Ok(())
        }
        DeviceCmd::Revoke { admin, func } => match ask(&admin, Request::Revoke { func })? {
            Reply::Done => {
                println!("function {func} of node {}'s device revoked", admin.device_node);
                Ok(())
            }
            Reply::Refused(why) => bail!("refused: {why}"),
            r => bail!("unexpected answer: {r:?}"),
        },
    }
}

/// The process VM: the driver (or the command after `--`), in the VM's
/// network namespace if one is named.
fn process_driver(a: &VmArgs, exe: String) -> Vec<String> {
    let mut driver = Vec::new();
    if let Some(ns) = &a.netns {
        driver.extend(["ip".to_string(), "netns".into(), "exec".into(), ns.clone()]);
    }
    match a.driver.is_empty() {
        false => driver.extend(a.driver.iter().cloned()),
        true => {
            driver.extend([exe, "device".into(), "vm-driver".into(), "--tap".into(), a.tap.clone()]);
            if let Some(ad) = &a.address {
                driver.extend(["--address".into(), ad.clone()]);
            }
            if let Some(u) = &a.user {
                driver.extend(["--user".into(), u.clone()]);
            }
        }
    }
    driver
}

fn ask(a: &AdminArgs, req: Request) -> Result<Reply> {
    let path = socket(&a.common);
    let client = vsci_client::Client::connect(&path, "vsci-device")
        .map_err(|e| anyhow::anyhow!("cannot reach vscid at {}: {e}", path.display()))?;
    let r = vsci_devshare::requester::Requester::new(
        client,
        vsci_devshare::nic::key_from(&a.common.key_file)?,
        a.device_node,
        a.common.interrupt,
    )?;
    r.call(req, Duration::from_secs(10))
}
