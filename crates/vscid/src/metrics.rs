//! A Prometheus endpoint (`vscid --metrics ADDR`): what the node holds,
//! limit hits and errors by SISCI code, in the OpenMetrics text format
//! written by the `prometheus-client` crate.
//!
//! Gauges of what the node holds are read from the registry when scraped
//! (one lock, the same snapshot `vsci status` takes), so nothing on the
//! request path pays for them; counters are bumped where things happen.
//! The HTTP side is deliberately tiny — one thread, one request per
//! connection, a 2 s read timeout — since a scraper is its only client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use log::{debug, info, warn};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use vsci_proto::SciError;

use crate::node::Node;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabel {
    peer: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkLabel {
    peer: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoanLabel {
    node: String,
    /// lent (to that node) or borrowed (from it).
    direction: String,
}

pub struct Metrics {
    registry: Registry,
    clients: Gauge,
    segments: Gauge,
    segment_bytes: Gauge,
    connections: Gauge,
    interrupts: Gauge,
    open_fds: Gauge,
    peers: Family<PeerLabel, Gauge>,
    peer_imports: Family<PeerLabel, Gauge>,
    errors: Family<CodeLabel, Counter>,
    limit_hits: Family<LimitLabel, Counter>,
    accepted: Counter,
    handshake_timeouts: Counter,
    link_frames: Family<LinkLabel, Counter>,
    link_bytes: Family<LinkLabel, Counter>,
    remote_triggers: Family<OutcomeLabel, Counter>,
    rma_queue: Family<QueueLabel, Gauge>,
    rma_regions: Gauge,
    rma_trigger_tokens: Gauge,
    lend_pool: Gauge,
    loan_bytes: Family<LoanLabel, Gauge>,
    rma_received: Counter,
    rma_completions: Counter,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The node's metrics (created on first use, also when nobody scrapes).
pub fn get() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("vsci");
        let m = Metrics {
            registry: Registry::default(),
            clients: Gauge::default(),
            segments: Gauge::default(),
            segment_bytes: Gauge::default(),
            connections: Gauge::default(),
            interrupts: Gauge::default(),
            open_fds: Gauge::default(),
            peers: Family::default(),
            peer_imports: Family::default(),
            errors: Family::default(),
            limit_hits: Family::default(),
            accepted: Counter::default(),
            handshake_timeouts: Counter::default(),
            link_frames: Family::default(),
            link_bytes: Family::default(),
            remote_triggers: Family::default(),
            rma_queue: Family::default(),
            rma_regions: Gauge::default(),
            rma_trigger_tokens: Gauge::default(),
            lend_pool: Gauge::default(),
            loan_bytes: Family::default(),
            rma_received: Counter::default(),
            rma_completions: Counter::default(),
        };
        registry.register(
            "clients",
            "Connected clients (SISCI descriptors, peer nodes' stand-ins included)",
            m.clients.clone(),
        );
        registry.register("segments", "Segments held by the node", m.segments.clone());
        registry.register("segment_bytes", "Bytes of segment memory held by the node", m.segment_bytes.clone());
        registry.register(
            "connections",
            "Connections to segments (local and to other nodes); each map lives in its program",
            m.connections.clone(),
        );
        registry.register("interrupts", "Interrupts and data interrupts held by the node", m.interrupts.clone());
        registry.register("open_fds", "Descriptors the daemon has open", m.open_fds.clone());
        registry.register(
            "peer",
            "Other nodes of the cluster, 1 per node with its link state as a label",
            m.peers.clone(),
        );
        registry.register(
            "peer_imports",
            "Connections of this node's clients to each other node's objects",
            m.peer_imports.clone(),
        );
        registry.register("errors", "Requests answered with a SISCI error, by code", m.errors.clone());
        registry.register("limit_hits", "Requests refused at a limit, by limit", m.limit_hits.clone());
        registry.register("connections_accepted", "Control-socket connections accepted", m.accepted.clone());
        registry.register(
            "handshake_timeouts",
            "Connections closed for sending no Hello in time",
            m.handshake_timeouts.clone(),
        );
        registry.register(
            "link_messages",
            "Frames on each node link (heartbeats included), by peer and direction (tx, rx)",
            m.link_frames.clone(),
        );
        registry.register(
            "link_bytes",
            "Bytes on each node link as framed on the wire (length, body, MAC), by peer and direction",
            m.link_bytes.clone(),
        );
        registry.register("remote_triggers", "Trigger messages from other nodes' programs to the RMA engine, by outcome (applied, unknown_token, undecodable)", m.remote_triggers.clone());
        registry.register("rma_queue_depth", "RMA engine queues now: ops_in_flight (posted, not completed), received (messages not yet taken), repost (receive buffers waiting to be re-posted)", m.rma_queue.clone());
        registry.register(
            "rma_regions",
            "Segments registered with the RMA engine for other nodes",
            m.rma_regions.clone(),
        );
        registry.register(
            "rma_trigger_tokens",
            "Interrupt connections other nodes trigger through the RMA engine",
            m.rma_trigger_tokens.clone(),
        );
        registry.register(
            "lend_pool_bytes",
            "Memory this node lends to other nodes at most (vscid --lend)",
            m.lend_pool.clone(),
        );
        registry.register(
            "loan_bytes",
            "Memory lent to each other node and borrowed from it by this node's programs",
            m.loan_bytes.clone(),
        );
        registry.register("rma_messages_received", "Messages the RMA engine received", m.rma_received.clone());
        registry.register(
            "rma_completions",
            "Completions the RMA engine handled (operations, receives, errors)",
            m.rma_completions.clone(),
        );
        Metrics { registry, ..m }
    }

    pub fn error(&self, e: SciError) {
        self.errors.get_or_create(&CodeLabel { code: e.c_name().to_string() }).inc();
    }

    pub fn limit_hit(&self, limit: &str) {
        self.limit_hits.get_or_create(&LimitLabel { limit: limit.to_string() }).inc();
    }

    pub fn accepted(&self) {
        self.accepted.inc();
    }

    pub fn handshake_timeout(&self) {
        self.handshake_timeouts.inc();
    }

    /// One frame of `bytes` went `direction` ("tx" or "rx") on the link to `peer`.
    pub fn link_frame(&self, peer: u32, direction: &str, bytes: usize) {
        let l = LinkLabel { peer: peer.to_string(), direction: direction.to_string() };
        self.link_frames.get_or_create(&l).inc();
        self.link_bytes.get_or_create(&l).inc_by(bytes as u64);
    }

    pub fn remote_trigger(&self, outcome: &str) {
        self.remote_triggers.get_or_create(&OutcomeLabel { outcome: outcome.to_string() }).inc();
    }

    /// Read the gauges from the registry and render everything.
    fn render(&self, node: &Node) -> String {
        let (st, bytes, links) = {
            let reg = node.lock();
            (reg.status(&node.cfg, node.started), reg.segment_bytes(), reg.links.clone())
        };
        // The engine exists only on a node of a cluster; its figures are
        // read outside the registry lock (it has its own).
        if let Some(e) = links.map(|l| l.engine().stats()) {
            let f = e.fabric;
            self.rma_queue.get_or_create(&QueueLabel { queue: "ops_in_flight".into() }).set(f.ops_in_flight as i64);
            self.rma_queue.get_or_create(&QueueLabel { queue: "received".into() }).set(f.received_queued as i64);
            self.rma_queue.get_or_create(&QueueLabel { queue: "repost".into() }).set(f.receives_to_repost as i64);
            self.rma_regions.set(e.regions as i64);
            self.rma_trigger_tokens.set(e.trigger_tokens as i64);
            // Totals kept by the endpoint: the counters catch up to them.
            self.rma_received.inc_by(f.received.saturating_sub(self.rma_received.get()));
            self.rma_completions.inc_by(f.completions.saturating_sub(self.rma_completions.get()));
        }
        self.clients.set(st.totals.clients as i64);
        self.segments.set(st.totals.segments as i64);
        self.segment_bytes.set(bytes.min(i64::MAX as u64) as i64);
        self.connections.set(st.totals.connections as i64);
        self.interrupts.set(st.totals.interrupts as i64);
        self.open_fds.set(st.open_fds.into());
        self.peers.clear();
        self.lend_pool.set(st.lending.pool.min(i64::MAX as u64) as i64);
        self.loan_bytes.clear();
        for (direction, list) in [("lent", &st.lending.lent), ("borrowed", &st.lending.borrowed)] {
            for t in list {
                let l = LoanLabel { node: t.node_id.to_string(), direction: direction.into() };
                self.loan_bytes.get_or_create(&l).set(t.bytes.min(i64::MAX as u64) as i64);
            }
        }
        self.peer_imports.clear();
        for p in &st.peers {
            let l = PeerLabel { peer: p.node_id.to_string(), state: p.state.clone() };
            self.peers.get_or_create(&l).set(1);
            self.peer_imports.get_or_create(&l).set(p.imports.into());
        }
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            warn!("metrics: cannot encode: {e}");
        }
        out
    }
}

/// Serve `GET /metrics` on `addr`; returns the bound address (port 0 picks one).
pub fn serve(addr: SocketAddr, node: Arc<Node>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("metrics: cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    get();
    std::thread::Builder::new().name("vscid-metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            match stream {
                Ok(s) => {
                    if let Err(e) = answer(s, &node) {
                        debug!("metrics: {e}");
                    }
                }
                Err(e) => {
                    warn!("metrics: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    })?;
    info!("metrics on http://{bound}/metrics");
    Ok(bound)
}

fn answer(mut s: TcpStream, node: &Node) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    // Read the request head (at most 8 KiB); only its first line matters.
    let mut buf = vec![0u8; 8192];
    let mut n = 0;
    while n < buf.len() {
        let k = s.read(&mut buf[n..])?;
        if k == 0 {
            break;
        }
        n += k;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") || buf[..n].windows(2).any(|w| w == b"\n\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, ctype, body) = if method == "GET" && (path == "/metrics" || path.starts_with("/metrics?")) {
        ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", get().render(node))
    } else {
        ("404 Not Found", "text/plain; charset=utf-8", "try GET /metrics\n".to_string())
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}
