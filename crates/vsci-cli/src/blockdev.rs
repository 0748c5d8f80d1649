//! `vsci blockdev`: a block device whose blocks live in other nodes' lent
//! memory, served as an NBD export until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

#[derive(Args)]
pub struct BlockdevArgs {
    /// Size of the device, in bytes (K/M/G suffixes).
    #[arg(long, value_parser = vsci_proto::parse_size)]
    size: u64,
    /// Lending nodes, comma-separated: the device is striped over them.
    #[arg(long, value_delimiter = ',', required = true)]
    from: Vec<u32>,
    /// Stripe size in bytes (a multiple of 4096).
    #[arg(long, default_value = "1M", value_parser = vsci_proto::parse_size)]
    stripe: u64,
    /// UNIX socket to serve on [default: /tmp/vsci-blockdev-NAME.sock].
    #[arg(long)]
    listen_unix: Option<PathBuf>,
    /// Also serve on this TCP address (IP:PORT), e.g. for a guest's network.
    #[arg(long)]
    listen_tcp: Option<std::net::SocketAddr>,
    /// Export name clients ask for (the empty name works too).
    #[arg(long, default_value = "vsci")]
    name: String,
    /// Refuse writes.
    #[arg(long)]
    read_only: bool,
    /// The node's control socket [default: $VSCI_SOCKET, else /tmp/vscid.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
}

/// The device: a store of lent memory.
struct Device(vsci_lend::LoanStore);

/// The store as an NBD export's backend.
impl vsci_nbd::Backend for Device {
    fn size(&self) -> u64 {
        self.0.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.0.read_at(buf, offset)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_at(data, offset)
    }

    /// Requests queued together share one wait for their RMA operations
    /// instead of one round trip (and one spinning waiter) each.
    fn max_batch(&self) -> usize {
        16
    }

    /// Queued reads go out together, one batched RMA read per loan, straight
    /// into the request buffers (an abandoned one is leaked, not reused).
    fn read_many_at(&self, reqs: &mut [(Vec<u8>, u64)]) -> Vec<std::io::Result<()>> {
        self.0.read_many(reqs)
    }

    fn write_many_at(&self, reqs: &[(&[u8], u64)]) -> Vec<std::io::Result<()>> {
        self.0.write_many(reqs)
    }

    /// Every write is at its lender when it returns (delivered RMA
    /// writes), so there is nothing left to push. The lenders' memory is
    /// not durable across their restart: a block device of lent memory is
    /// swap or scratch space, not storage.
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// Lent memory cannot be given back piecewise; trimmed blocks keep
    /// their contents, which the trait allows.
    fn trim(&self, _offset: u64, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn run(a: BlockdevArgs) -> Result<()> {
    if a.stripe == 0 || !a.stripe.is_multiple_of(4096) {
        bail!("--stripe must be a positive multiple of 4096");
    }
    let node = a.socket.clone().unwrap_or_else(vsci_proto::socket_path);
    let client = vsci_client::Client::connect(&node, "vsci-blockdev")
        .map_err(|e| anyhow::anyhow!("cannot reach vscid at {}: {e}", node.display()))?;
    let store = vsci_lend::LoanStore::borrow(&client, &a.from, a.size, a.stripe)
        .map_err(|e| anyhow::anyhow!("borrowing {} bytes from node(s) {:?}: {} ({e})", a.size, a.from, e.c_name()))?;
    let store = Arc::new(Device(store));
    let cfg = vsci_nbd::ServerConfig { export_name: a.name.clone(), read_only: a.read_only, ..Default::default() };
    let server = Arc::new(vsci_nbd::Server::new(store.clone(), cfg));
    let path = a.listen_unix.clone().unwrap_or_else(|| PathBuf::from(format!("/tmp/vsci-blockdev-{}.sock", a.name)));
    let _ = std::fs::remove_file(&path);
    let unix =
        std::os::unix::net::UnixListener::bind(&path).with_context(|| format!("listening on {}", path.display()))?;
    let mut threads = Vec::new();
    {
        let s = server.clone();
        threads.push(std::thread::spawn(move || s.serve_unix(unix)));
    }
    if let Some(addr) = a.listen_tcp {
        let tcp = std::net::TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?;
        let s = server.clone();
        threads.push(std::thread::spawn(move || s.serve_tcp(tcp)));
        println!("serving on nbd://{addr}/{}", a.name);
    }
    println!(
        "vsci blockdev: {} bytes of memory lent by node(s) {:?}, stripe {} bytes",
        store.0.size(),
        store.0.lenders(),
        a.stripe
    );
    println!("serving on nbd+unix:///{}?socket={}", a.name, path.display());
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    while !stop.load(Ordering::Relaxed) && threads.iter().all(|t| !t.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    for t in threads {
        if let Ok(Err(e)) = t.join() {
            log::warn!("vsci blockdev: serving ended: {e}");
        }
    }
    let _ = std::fs::remove_file(&path);
    let st = server.stats();
    println!(
        "vsci blockdev: stopped; {} connections, {} reads ({} bytes), {} writes ({} bytes), {} errors",
        st.connections, st.reads, st.bytes_read, st.writes, st.bytes_written, st.errors
    );
    // Dropping the store gives the loans back.
    drop(store);
    client.close();
    Ok(())
}
