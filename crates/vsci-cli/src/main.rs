//! `vsci`: the command-line tool of vsci.
//!
//! - `vsci status`: what a node holds (clients, segments, connections,
//!   interrupts, memory lent and borrowed), as a table or JSON;
//! - `vsci demo`: starts a node on embedded defaults and two processes that
//!   move data and interrupts through it, printing what happened;
//! - `vsci bench`: runs the benchmark suite against a fresh node (the
//!   harness is the vsci-bench crate; only its arguments are parsed here);
//! - `vsci vm run`: runs a command in a QEMU guest attached to a node;
//! - `vsci blockdev`: serves a block device of other nodes' lent memory
//!   over NBD;
//! - `vsci device`: shares one host's NIC functions with VMs on other
//!   nodes (serve, vm, list, revoke).

mod blockdev;
mod demo;
mod device;
mod vm;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "vsci", version, about = "vsci: software SISCI interconnect")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show a node's clients, segments, connections and interrupts.
    Status {
        /// Control socket [default: $VSCI_SOCKET, else /tmp/vscid.sock].
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Start a node and two processes that exchange data and interrupts.
    Demo {
        /// Use this running node instead of starting one.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Interrupt round trips to time.
        #[arg(long, default_value_t = 2000)]
        round_trips: u32,
        /// Bytes to stream through the segment for the bandwidth figure.
        #[arg(long, default_value_t = 256 << 20)]
        stream_bytes: u64,
    },
    /// Run the benchmarks on each data path, with peers measured in the same run.
    Bench {
        /// Seconds-long smoke run (fewer sizes and iterations) instead of the full suite.
        #[arg(long)]
        quick: bool,
        /// Write the JSON results here.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Write the report here: DIR/benchmarks.md, DIR/bench/results.{json,txt},
        /// DIR/bench/*.png (`--report docs` regenerates docs/benchmarks.md).
        #[arg(long, value_name = "DIR")]
        report: Option<PathBuf>,
        /// Directory with the benchmark binaries [default: next to this program, ../bench].
        #[arg(long)]
        bench_dir: Option<PathBuf>,
        /// Data paths, comma-separated: `local` (processes on one node), `remote` (two nodes
        /// in two network namespaces; needs root), or `all`. Paths that cannot run here are
        /// skipped with the reason.
        #[arg(long, value_delimiter = ',', default_value = "local")]
        paths: Vec<String>,
        /// Rebuild the report (--report DIR) from a saved results.json instead of measuring.
        #[arg(long, value_name = "FILE", requires = "report")]
        from_json: Option<PathBuf>,
        /// Do not install missing peers (sockperf, iperf3, ucx_perftest) with apt-get.
        #[arg(long)]
        no_install: bool,
        /// Remote path only: run just these remote_bench sections (letters a-j, e.g. `h`
        /// or `ef`) and skip the transfers, DMA and the peers other sections need, to
        /// look at a few rows.
        #[arg(long, value_name = "LETTERS")]
        sections: Option<String>,
        /// Remote path only: afterwards measure the spinning ping-pong, the message ring
        /// and the per-store figures (sections e, i, j) and their UCX peers again with two
        /// busy loops per core competing for the CPU, for idle-against-loaded ratios.
        #[arg(long)]
        loaded: bool,
        /// Remote path only: run remote_bench this many times in the same namespaces
        /// (the figures kept are the last run's; a failing run stops), to catch rare faults.
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
    },
    /// Serve a block device made of memory other nodes lend (`vscid --lend`)
    /// as an NBD export: QEMU (`-drive file=nbd+unix:///vsci?socket=PATH`),
    /// the kernel's nbd-client and libnbd's tools use it; `mkswap` it for
    /// remote swap.
    Blockdev(blockdev::BlockdevArgs),
    /// Share one host's NIC functions with VMs on other nodes (docs/devices.md).
    #[command(subcommand)]
    Device(device::DeviceCmd),
    /// QEMU guests: `vsci vm run --socket PATH --name NAME [--add HOST:GUEST]... -- CMD`.
    #[command(subcommand)]
    Vm(vm::VmCmd),
    /// One side of `vsci demo` (run by the demo itself).
    #[command(hide = true)]
    DemoPeer {
        #[arg(long)]
        role: demo::Role,
        #[arg(long)]
        round_trips: u32,
        #[arg(long)]
        stream_bytes: u64,
    },
}

fn main() -> Result<()> {
    // Warnings (e.g. from a guest's agent in `vm run`) go to stderr;
    // RUST_LOG=info or debug shows more.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).format_target(false).init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Status { socket, json } => status(socket, json),
        Cmd::Demo { socket, round_trips, stream_bytes } => demo::run(socket, round_trips, stream_bytes),
        Cmd::DemoPeer { role, round_trips, stream_bytes } => demo::peer(role, round_trips, stream_bytes),
        Cmd::Bench { quick, json, report, bench_dir, paths, no_install, from_json, sections, loaded, repeat } => {
            vsci_bench::run(vsci_bench::Options {
                quick,
                json,
                report,
                bench_dir,
                paths,
                install: !no_install,
                from_json,
                sections,
                loaded,
                repeat,
            })
        }
        Cmd::Vm(cmd) => vm::run(cmd),
        Cmd::Blockdev(a) => blockdev::run(a),
        Cmd::Device(cmd) => device::run(cmd),
    }
}

fn status(socket: Option<PathBuf>, json: bool) -> Result<()> {
    let path = socket.unwrap_or_else(vsci_proto::socket_path);
    let client = vsci_client::Client::connect(&path, "vsci-status").map_err(|e| match e {
        vsci_proto::SciError::Access => anyhow::anyhow!(
            "permission denied on vscid's socket {} ({e}): you need write permission on it; \
                 ask the operator to add you to the node's socket group",
            path.display()
        ),
        _ => anyhow::anyhow!("cannot reach vscid at {}: {}; is the node running?", path.display(), e),
    })?;
    let st = client.status().map_err(|e| anyhow::anyhow!("status request failed: {e}"))?;
    client.close();
    let devices = vsci_devshare::status::read_all(&path);
    if json {
        let mut v = serde_json::to_value(&st)?;
        v["devices"] = serde_json::to_value(&devices)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "node {}  pid {}  socket {}  up {:.1} s  wait mode {}  open fds {}",
        st.node_id,
        st.pid,
        st.socket,
        st.uptime_ms as f64 / 1000.0,
        st.wait_mode,
        st.open_fds
    );
    // The status request itself is a client; do not list it.
    let clients: Vec<_> = st.clients.iter().filter(|c| c.name != "vsci-status").collect();
    let more = |shown: usize, total: u64| {
        if (shown as u64) < total {
            format!(", first {shown} shown")
        } else {
            String::new()
        }
    };
    if !st.peers.is_empty() {
        println!("\nnodes ({})", st.peers.len());
        for p in &st.peers {
            let seen = if p.last_seen_ms == 0 {
                "never heard from".to_string()
            } else {
                format!("last heard {:.1} s ago", p.last_seen_ms as f64 / 1000.0)
            };
            println!("  node {:<5} {:<22} {:<15} {}  connections {}", p.node_id, p.address, p.state, seen, p.imports);
        }
    }
    println!("\nclients ({}{})", st.totals.clients.saturating_sub(1), more(st.clients.len(), st.totals.clients));
    for c in clients {
        println!("  #{:<5} pid {:<7} uid {:<6} {}", c.client, c.pid, c.uid, c.name);
    }
    println!("\nsegments ({}{})", st.totals.segments, more(st.segments.len(), st.totals.segments));
    for s in &st.segments {
        println!(
            "  id {:<10} {:>12} bytes  owner #{:<5} {}{}{}{}  connections {}",
            s.segment_id,
            s.size,
            s.owner,
            if s.prepared { "prepared" } else { "created" },
            if s.available { ", available" } else { "" },
            if s.shared { format!(", shared ({} attached)", s.attached) } else { String::new() },
            if s.broadcast { ", reflective-memory member" } else { "" },
            s.connections
        );
    }
    println!("\nconnections ({}{})", st.totals.connections, more(st.connections.len(), st.totals.connections));
    for c in &st.connections {
        println!("  client #{:<5} -> node {} segment {}", c.client, c.node_id, c.segment_id);
    }
    println!("\ninterrupts ({}{})", st.totals.interrupts, more(st.interrupts.len(), st.totals.interrupts));
    for i in &st.interrupts {
        println!(
            "  {} {:<6} owner #{:<5} connections {}",
            if i.data { "data " } else { "plain" },
            i.number,
            i.owner,
            i.connections
        );
    }
    let l = &st.lending;
    if l.pool > 0 || !l.lent.is_empty() || !l.borrowed.is_empty() {
        let lent: u64 = l.lent.iter().map(|t| t.bytes).sum();
        println!(
            "
lending: pool {} bytes, {} lent, {} free",
            l.pool,
            lent,
            l.pool.saturating_sub(lent)
        );
        for t in &l.lent {
            println!("  lent to node {:<5} {:>14} bytes in {} loan(s)", t.node_id, t.bytes, t.loans);
        }
        for t in &l.borrowed {
            println!("  borrowed from node {:<5} {:>14} bytes in {} loan(s)", t.node_id, t.bytes, t.loans);
        }
    }
    print_devices(&devices);
    Ok(())
}

/// Shared devices this node serves or uses (`vsci device`).
fn print_devices(devices: &[vsci_devshare::status::Entry]) {
    use vsci_devshare::status::Entry;
    if devices.is_empty() {
        return;
    }
    println!("\nshared devices");
    for d in devices {
        match d {
            Entry::Device { pid, name, wire, functions } => {
                println!("  device {name} (pid {pid}, wire {wire}), {} functions", functions.len());
                for f in functions {
                    match (&f.node, &f.vm) {
                        (Some(n), Some(vm)) => println!(
                            "    function {:<3} {}  held by node {n} VM {vm} ({})",
                            f.func,
                            f.mac,
                            f.mode.as_deref().unwrap_or("?")
                        ),
                        _ => println!("    function {:<3} {}  free", f.func, f.mac),
                    }
                }
            }
            Entry::Vm { pid, name, device_node, func, mac, mode } => {
                println!(
                    "  VM {name} (pid {pid}) holds function {func} ({mac}) of node {device_node}'s device, {mode}"
                );
            }
        }
    }
}
