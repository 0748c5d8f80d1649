//! `vscid`: the vsci node daemon.
//!
//! It owns one node: the segment and interrupt registry, the access policy
//! and the life cycle of every client. It is on the control path only;
//! segment data and interrupt triggers go straight between processes
//! through the memfds and eventfds it hands out.

use vscid::{access, client, cluster, engine, metrics, peers, registry};

use std::fs::{File, OpenOptions};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use log::{error, info, warn};
use nix::fcntl::{Flock, FlockArg};
use vsci_proto::WaitMode;

use vscid::node::Node;
use vscid::registry::Config;

/// vsci node daemon: serves the SISCI API to the processes of one host.
#[derive(Parser, Debug)]
#[command(name = "vscid", version)]
struct Args {
    /// This node's id (1..=65535), as SCIGetLocalNodeId reports it.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65535))]
    node_id: u32,

    /// Control socket path [default: $VSCI_SOCKET, else /tmp/vscid.sock].
    #[arg(long)]
    socket: Option<PathBuf>,

    /// Cluster file (TOML): every node's id and address, and the shared key.
    /// Without it the node stands alone.
    #[arg(long)]
    config: Option<PathBuf>,

    /// Group whose members may use the node (name or gid): the control
    /// socket is given this group [default: the daemon's own group].
    #[arg(long)]
    socket_group: Option<String>,

    /// Permission bits of the control socket, octal [default: 0600, or 0660
    /// with --socket-group]. Connecting needs write permission.
    #[arg(long, value_parser = access::parse_mode)]
    socket_mode: Option<u32>,

    /// Default way for interrupt waits to wait: adaptive, poll or block.
    #[arg(long, default_value = "adaptive")]
    wait_mode: WaitMode,

    /// Spin time before blocking in adaptive mode, in microseconds.
    #[arg(long, default_value_t = 50)]
    spin_us: u32,

    /// Largest segment a client may create, in bytes (K/M/G suffixes).
    #[arg(long, default_value = "16G", value_parser = vsci_proto::parse_size)]
    max_segment_size: u64,

    /// Most segments + connections + interrupts one client may hold.
    #[arg(long, default_value_t = 4096)]
    max_objects_per_client: usize,

    /// Most segments + connections + interrupts all clients of one uid may
    /// hold together.
    #[arg(long, default_value_t = 8192)]
    max_objects_per_uid: usize,

    /// Most clients (open SISCI descriptors) one uid may have at once.
    #[arg(long, default_value_t = 4096)]
    max_clients_per_uid: usize,

    /// Most segment memory the clients of one uid may hold together (K/M/G
    /// suffixes; 0 = no limit beyond --max-segment-size per segment).
    #[arg(long, default_value = "0", value_parser = vsci_proto::parse_size)]
    max_memory_per_uid: u64,

    /// Most requests of one client that may wait at once (connects with a
    /// timeout).
    #[arg(long, default_value_t = 64)]
    max_pending_per_client: usize,

    /// Descriptors kept for new clients and `vsci status`: objects stop
    /// this far below the node's descriptor limit [default: a tenth of the
    /// limit, at least 64].
    #[arg(long)]
    fd_reserve: Option<u64>,

    /// Who may connect to a segment or interrupt of a local program: any
    /// client (SISCI's rule), only programs of the creator's uid, or of its
    /// uid or primary group. Other nodes' programs are not restricted.
    #[arg(long, default_value = "any")]
    connect_policy: registry::ConnectPolicy,

    /// Memory this node lends to other nodes' programs, in bytes (K/M/G
    /// suffixes) [default: the `lend` key of this node in the cluster file,
    /// else 0: none]. Loans are taken from it as borrowers ask.
    #[arg(long, value_parser = vsci_proto::parse_size)]
    lend: Option<u64>,

    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9477;
    /// port 0 picks a free one, logged at start).
    #[arg(long)]
    metrics: Option<std::net::SocketAddr>,

    /// Threads that handle client requests (all clients share them; an
    /// idle client costs no thread).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,

    /// A connection that sends no Hello within this many milliseconds is
    /// closed.
    #[arg(long, default_value_t = 5000)]
    handshake_timeout_ms: u64,

    /// More log output (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// Holds the node's lock file: only one live vscid per socket path.
struct SocketGuard {
    socket: PathBuf,
    lock_path: PathBuf,
    _lock: Flock<File>,
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// Take the socket path: refuse if a live node holds it, recover a stale
/// socket file left by a node that died without cleaning up.
fn claim_socket(socket: &Path, group: Option<nix::unistd::Gid>, mode: u32) -> Result<(SocketGuard, OwnedFd)> {
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut lock_path = socket.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening lock file {}", lock_path.display()))?;
    let lock = match Flock::lock(lock, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err(_) => bail!("another vscid is running on {} (lock {} is held)", socket.display(), lock_path.display()),
    };
    if socket.exists() {
        // We hold the lock, so whoever made this file is gone; but if
        // something still answers on it, it is not ours to take.
        if vsci_proto::wire::connect(socket).is_ok() {
            bail!("{} is in use by a live process that is not a vscid holding its lock", socket.display());
        }
        warn!("removing stale socket {}", socket.display());
        std::fs::remove_file(socket).with_context(|| format!("removing stale socket {}", socket.display()))?;
    }
    let listener = access::listen(socket, group, mode).with_context(|| format!("listening on {}", socket.display()))?;
    Ok((SocketGuard { socket: socket.to_owned(), lock_path, _lock: lock }, listener))
}

fn main() {
    // Before any thread and any libfabric call (see its doc).
    vsci_fabric::prepare_rma_target_process();
    let args = Args::parse();
    let level = match args.verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).format_timestamp_micros().init();
    if let Err(e) = run(args) {
        error!("{e:#}");
        std::process::exit(1);
    }
}

/// Every client costs the node descriptors (its socket, segment memfds,
/// interrupt pages): take all the kernel allows this process, not the
/// soft limit a login shell or service manager happened to set.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                info!("descriptor limit raised from {soft} to {hard}");
                hard
            }
            Err(e) => {
                warn!("cannot raise the descriptor limit from {soft} to {hard}: {e}");
                soft
            }
        },
        Ok((soft, _)) => {
            info!("descriptor limit {soft}");
            soft
        }
        Err(e) => {
            warn!("cannot read the descriptor limit: {e}");
            1024
        }
    }
}

fn run(args: Args) -> Result<()> {
    let fd_limit = raise_fd_limit();
    let fd_reserve = args.fd_reserve.unwrap_or((fd_limit / 10).max(64)).min(fd_limit / 2);
    let socket = args.socket.clone().unwrap_or_else(vsci_proto::socket_path);
    let cluster = match &args.config {
        Some(path) => Some(cluster::Cluster::load(path)?),
        None => None,
    };
    // Flags win over the cluster file.
    let group_name = args.socket_group.clone().or_else(|| cluster.as_ref().and_then(|c| c.socket_group.clone()));
    let group = group_name.as_deref().map(access::resolve_group).transpose()?;
    let mode = args.socket_mode.or(cluster.as_ref().and_then(|c| c.socket_mode)).unwrap_or(access::default_mode(group));
    let (guard, listener) = claim_socket(&socket, group, mode)?;
    info!(
        "control socket {} mode {mode:04o}{}",
        socket.display(),
        group.map(|g| format!(" group {} ({g})", group_name.as_deref().unwrap_or("?"))).unwrap_or_default()
    );
    let cfg = Config {
        node_id: args.node_id,
        socket: socket.display().to_string(),
        wait_mode: args.wait_mode,
        spin_us: args.spin_us,
        max_segment_size: args.max_segment_size,
        max_objects_per_client: args.max_objects_per_client,
        max_waiting_per_client: args.max_pending_per_client,
        max_objects_per_uid: args.max_objects_per_uid,
        max_clients_per_uid: args.max_clients_per_uid,
        max_memory_per_uid: args.max_memory_per_uid,
        fd_limit,
        fd_reserve,
        connect_policy: args.connect_policy,
        lend_pool: args.lend.or_else(|| cluster.as_ref().and_then(|c| c.lend.get(&args.node_id).copied())).unwrap_or(0),
    };
    info!(
        "limits: {} objects and {} waiting requests per client; {} objects, {} clients and {} per uid; {fd_reserve} of {fd_limit} descriptors kept in reserve",
        cfg.max_objects_per_client,
        cfg.max_waiting_per_client,
        cfg.max_objects_per_uid,
        cfg.max_clients_per_uid,
        if cfg.max_memory_per_uid == 0 { "unlimited memory".to_string() } else { format!("{} bytes of segments", cfg.max_memory_per_uid) }
    );
    if cfg.lend_pool > 0 {
        info!("lending up to {} bytes to other nodes", cfg.lend_pool);
    }
    let node = Node::new(cfg);
    if let Some(cluster) = cluster {
        let Some(addr) = cluster.nodes.get(&args.node_id).copied() else {
            bail!("node {} is not listed in {}", args.node_id, args.config.as_ref().expect("set").display());
        };
        let engine = engine::Engine::open(&cluster.provider, &addr.ip().to_string())?;
        info!("RMA engine: libfabric provider {:?} on {}", cluster.provider, addr.ip());
        peers::Peers::start(&node, cluster, engine)?;
    }
    info!(
        "vscid node {} listening on {} (wait mode {}, spin {} us)",
        args.node_id,
        socket.display(),
        args.wait_mode,
        args.spin_us
    );

    if let Some(addr) = args.metrics {
        metrics::serve(addr, node.clone())?;
    }
    client::Server::start(
        node.clone(),
        listener,
        args.workers.into(),
        Duration::from_millis(args.handshake_timeout_ms),
    )?;

    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
    let sig = signals.forever().next().unwrap_or(signal_hook::consts::SIGTERM);
    info!("signal {sig}: shutting down, telling {} client(s)", node.lock().clients.len());
    // No new clients from here on: a program that opens now fails at once
    // instead of connecting to a node that is about to go.
    let _ = std::fs::remove_file(&socket);
    node.lock().broadcast_shutdown();
    // Give writer threads a moment to deliver the shutdown notices.
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    while std::time::Instant::now() < deadline && !node.lock().clients.is_empty() {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(guard);
    info!("vscid node {} stopped", args.node_id);
    Ok(())
}
