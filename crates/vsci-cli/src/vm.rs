//! `vsci vm run`: boot a guest attached to a node, run a command in it, relay
//! its output and exit with its status. `vsci vm image`: build (or find) the
//! cached guest image without booting anything. The work is in crates/vsci-vm.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum VmCmd {
    /// Boot a guest, run CMD in it, relay its output, exit with its status.
    Run(RunArgs),
    /// Build the guest image now (or find it in the cache) and print its
    /// directory. `vsci vm run` does the same on first use; this lets a
    /// script do the slow part (downloading the kernel, building the
    /// driver) up front, for example before entering a network namespace
    /// that cannot reach the package archive.
    Image,
}

#[derive(Args)]
pub struct RunArgs {
    /// The node's socket (default: $VSCI_SOCKET or /tmp/vscid.sock, if a
    /// node is there). SISCI programs in the guest reach that node.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The guest's name (QEMU -name, guest host name).
    #[arg(long, default_value = "vsci-guest")]
    name: String,
    /// Copy HOST_PATH into the guest at GUEST_PATH (with the shared
    /// libraries `ldd` says it needs). Repeatable.
    #[arg(long = "add", value_name = "HOST_PATH:GUEST_PATH")]
    adds: Vec<String>,
    /// Set NAME=VALUE in the command's environment. Repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Expose QEMU's QMP on this UNIX socket (segment windows are hot-plugged
    /// through it).
    #[arg(long)]
    qmp: Option<PathBuf>,
    /// MSI-X vectors of the doorbell device (the server's count).
    #[arg(long, default_value_t = 16)]
    vectors: u16,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 512)]
    memory: u32,
    /// vCPUs (default 2 under KVM, 1 under TCG).
    #[arg(long)]
    cpus: Option<u32>,
    /// Stop the guest after this many seconds (exit status 124); 0: never.
    #[arg(long, default_value_t = 0)]
    timeout: u64,
    /// Accelerator: auto (KVM where the CPU shows vmx/svm and /dev/kvm
    /// works, else TCG), kvm or tcg.
    #[arg(long, default_value = "auto")]
    accel: String,
    /// Copy the guest's kernel console to stderr.
    #[arg(long)]
    console: bool,
    /// Give the guest a disk: a raw image file or an NBD URL (e.g. what
    /// `vsci blockdev` prints); it appears as /dev/vda, /dev/vdb, ...
    /// (virtio-blk). Repeatable.
    #[arg(long = "drive", value_name = "FILE_OR_NBD_URL")]
    drives: Vec<String>,
    /// Give the guest a network card: `user`, on QEMU's user-mode network
    /// (the guest is 10.0.2.15, and 10.0.2.2 is the host side, where a
    /// server on the host's loopback is reached); or
    /// `vhost-user:SOCKET,mac=MAC`, a virtio-net card whose backend serves
    /// on SOCKET (a shared device's function; `vsci device vm --guest`
    /// passes this, with --mem-path).
    #[arg(long)]
    net: Option<String>,
    /// Guest RAM is this file, mapped shared (`vsci device vm --guest`
    /// passes its memory segment).
    #[arg(long, value_name = "FILE")]
    mem_path: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(cmd: VmCmd) -> Result<()> {
    match cmd {
        VmCmd::Run(a) => {
            let code = match vm_run(a) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("vsci vm: {e:#}");
                    1
                }
            };
            std::process::exit(code);
        }
        VmCmd::Image => {
            let say = |m: &str| eprintln!("vsci vm: {m}");
            match vsci_vm::image::ensure_image(&say) {
                Ok(img) => {
                    println!("{}", img.dir.display());
                    Ok(())
                }
                Err(e) => {
                    eprintln!("vsci vm: cannot build the guest image: {e:#}");
                    std::process::exit(1);
                }
            }
        }
    }
}

fn vm_run(a: RunArgs) -> Result<i32> {
    let mut cfg = vsci_vm::RunConfig::new(&a.name, a.command);
    // Without --socket, attach to the node every client would use
    // (VSCI_SOCKET or /tmp/vscid.sock) if one is there.
    cfg.socket = a.socket.or_else(|| {
        let p = vsci_proto::socket_path();
        let up = vsci_proto::wire::connect(&p).is_ok();
        if up {
            eprintln!("vsci vm: attaching to the node at {}", p.display());
        }
        up.then_some(p)
    });
    for add in &a.adds {
        let Some((h, g)) = add.split_once(':') else { bail!("--add {add}: expected HOST_PATH:GUEST_PATH") };
        if h.is_empty() || !g.starts_with('/') {
            bail!("--add {add}: expected HOST_PATH:/absolute/guest/path");
        }
        cfg.adds.push((PathBuf::from(h), g.to_string()));
    }
    for e in &a.env {
        let Some((k, v)) = e.split_once('=') else { bail!("--env {e}: expected NAME=VALUE") };
        cfg.env.push((k.to_string(), v.to_string()));
    }
    cfg.qmp = a.qmp;
    if a.vectors == 0 || a.vectors > vsci_vm::ivshmem::MAX_VECTORS {
        bail!("--vectors must be 1..={}", vsci_vm::ivshmem::MAX_VECTORS);
    }
    cfg.vectors = a.vectors;
    if a.memory < 64 {
        bail!("--memory: at least 64 MiB");
    }
    cfg.memory_mb = a.memory;
    if a.cpus.is_some_and(|c| c == 0 || c > 8) {
        bail!("--cpus: 1 to 8");
    }
    cfg.cpus = a.cpus;
    cfg.timeout = (a.timeout > 0).then(|| Duration::from_secs(a.timeout));
    cfg.accel = match a.accel.as_str() {
        "auto" => vsci_vm::Accel::Auto,
        "kvm" => vsci_vm::Accel::Kvm,
        "tcg" => vsci_vm::Accel::Tcg,
        other => bail!("--accel {other}: expected auto, kvm or tcg"),
    };
    cfg.console = a.console;
    cfg.drives = a.drives;
    match a.net.as_deref() {
        None => {}
        Some("user") => cfg.net_user = true,
        Some(v) => {
            let spec = v
                .strip_prefix("vhost-user:")
                .ok_or_else(|| anyhow::anyhow!("--net {v}: expected user or vhost-user:SOCKET,mac=MAC"))?;
            let (sock, mac) =
                spec.split_once(",mac=").ok_or_else(|| anyhow::anyhow!("--net {v}: vhost-user:SOCKET,mac=MAC"))?;
            cfg.vhost_user_net = Some((PathBuf::from(sock), mac.to_string()));
        }
    }
    cfg.mem_path = a.mem_path;
    vsci_vm::run(&cfg)
}
