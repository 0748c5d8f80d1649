//! The `remote` path: remote_bench's JSON, the peers between the two
//! namespaces, the loaded run and the transcript's table.

use serde::{Deserialize, Serialize};

use super::{
    req, DmaBench, FabricWrite, Iperf3, Lat, Machine, Namespace, Outcome, Phase, ProgramMachine, Sockperf, Transfers,
    Ucx, UcxAm,
};

/// Two nodes in two network namespaces. With `--sections` only
/// remote_bench, the peers those sections need and the loaded run are
/// there (`sections`, `runs`); otherwise everything but those two.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remote {
    pub path: String,
    pub what: String,
    /// `--sections`: the remote_bench sections asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sections: Option<String>,
    /// `--sections`: how many remote_bench runs (`--repeat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<Namespace>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    pub remote_bench: RemoteBench,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfers: Option<Outcome<Transfers>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dma: Option<Outcome<DmaBench>>,
    pub peers: RemotePeers,
    /// `--loaded`: the same rows with the CPU oversubscribed (null without).
    #[serde(deserialize_with = "req")]
    pub loaded: Option<Outcome<Loaded>>,
    /// The rows the run printed, vsci against its peer.
    pub table: Vec<TableRow>,
    /// Where this path was measured in another run than the rest of the
    /// file and merged in by hand: that run's command, commit and machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<MergedRun>,
}

/// A run merged into a results file from elsewhere.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergedRun {
    pub command: String,
    pub commit: String,
    pub date: String,
    pub elapsed_s: f64,
    pub machine: Machine,
    pub note: String,
}

/// The peers of the remote path; with `--sections`, those the sections
/// need (null for the others).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemotePeers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sockperf: Option<Sockperf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iperf3: Option<Iperf3>,
    #[serde(deserialize_with = "req")]
    pub ucx_perftest: Option<Ucx>,
    #[serde(deserialize_with = "req")]
    pub ucx_am: Option<UcxAm>,
    #[serde(deserialize_with = "req")]
    pub fabric_write: Option<FabricWrite>,
}

/// `--loaded`: sections e, i, j and their UCX peers again with busy loops.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loaded {
    pub what: String,
    pub busy_loops: u64,
    pub cores: u64,
    /// The remote_bench sections measured again.
    pub sections: String,
    pub loadavg_before: Vec<f64>,
    pub loadavg_started: Vec<f64>,
    pub loadavg_after: Vec<f64>,
    pub remote_bench: RemoteBench,
    pub peers: LoadedPeers,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadedPeers {
    #[serde(deserialize_with = "req")]
    pub ucx_perftest: Option<Ucx>,
    #[serde(deserialize_with = "req")]
    pub ucx_am: Option<UcxAm>,
}

/// A row of the transcript's table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableRow {
    pub what: String,
    pub unit: String,
    /// latency, bandwidth, rate or cost.
    pub kind: String,
    pub vsci: TableValue,
    pub peer: String,
    pub peer_value: TableValue,
    #[serde(deserialize_with = "req")]
    pub ratio: Option<f64>,
}

/// A latency (median and p99) or one figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TableValue {
    Latency {
        #[serde(deserialize_with = "req")]
        median: Option<f64>,
        #[serde(deserialize_with = "req")]
        p99: Option<f64>,
    },
    One(Option<f64>),
}

impl Default for TableValue {
    fn default() -> Self {
        TableValue::One(None)
    }
}

/// remote_bench's JSON (bench/remote_bench.c). It writes every section's
/// key, null or with no rows when the section did not run; runs made
/// before a section existed lack its key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteBench {
    pub benchmark: String,
    pub date: String,
    pub command: String,
    pub mode: String,
    pub machine: ProgramMachine,
    pub vsci_socket: String,
    pub node_id: i64,
    pub server_node_id: i64,
    pub vsci_wait: String,
    pub yield_every: u64,
    pub elapsed_s: f64,
    pub units: RbUnits,
    pub phases: Vec<Phase>,
    pub pingpong: RbPingpong,
    pub write_bandwidth: RbWriteBandwidth,
    pub store_visibility: RbStoreVisibility,
    pub interrupt: RbInterrupt,
    pub data_interrupt: RbDataInterrupt,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spin_pingpong: Option<RbSpinPingpong>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_flush: Option<RbStoreFlush>,
    /// Null when section g did not run; absent before it existed.
    #[serde(default)]
    pub idle_map: Option<IdleMap>,
    /// Null when section h did not run; absent before it existed.
    #[serde(default)]
    pub mailbox: Option<Mailbox>,
    /// Null when section i did not run; absent before it existed.
    #[serde(default)]
    pub message_ring: Option<MessageRing>,
    /// Null when section j did not run; absent before it existed.
    #[serde(default)]
    pub trapped_store: Option<TrappedStore>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbUnits {
    pub bandwidth: String,
    pub latency: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbPingpong {
    pub vsci: String,
    pub rows: Vec<RbPingpongRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbPingpongRow {
    pub size: u64,
    #[serde(deserialize_with = "req")]
    pub vsci: Option<Lat>,
    /// Messages whose flag arrived before the whole payload.
    pub flag_before_payload: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbWriteBandwidth {
    pub flush: String,
    pub memcpy: String,
    #[serde(deserialize_with = "req")]
    pub data_check: Option<String>,
    pub rows: Vec<RbBandwidthRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbBandwidthRow {
    pub size: u64,
    /// memcpy into the remote map + SCIFlush.
    #[serde(rename = "flush_MBps", deserialize_with = "req")]
    pub flush_mbps: Option<f64>,
    /// SCIMemCpy.
    #[serde(rename = "memcpy_MBps", deserialize_with = "req")]
    pub memcpy_mbps: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbStoreVisibility {
    pub vsci: String,
    pub rows: Vec<RbVisibilityRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbVisibilityRow {
    pub interval_us: u64,
    #[serde(deserialize_with = "req")]
    pub actual_interval_us: Option<f64>,
    pub sent: u64,
    pub lost: u64,
    #[serde(deserialize_with = "req")]
    pub delay: Option<Lat>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbInterrupt {
    #[serde(deserialize_with = "req")]
    pub vsci: Option<Lat>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbDataInterrupt {
    pub rows: Vec<RbDataInterruptRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbDataInterruptRow {
    pub payload: u64,
    #[serde(deserialize_with = "req")]
    pub vsci: Option<Lat>,
}

/// Section e: the spinning ping-pong by map size.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbSpinPingpong {
    pub vsci: String,
    pub rows: Vec<RbSpinRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbSpinRow {
    pub map_size: u64,
    #[serde(deserialize_with = "req")]
    pub vsci: Option<Lat>,
}

/// Section f: store + SCIFlush.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbStoreFlush {
    pub vsci: String,
    pub rows: Vec<RbStoreFlushRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbStoreFlushRow {
    pub size: u64,
    #[serde(deserialize_with = "req")]
    pub vsci: Option<Lat>,
    /// `ok` when the server holds the last store, else `mismatch`.
    pub data_check: String,
}

/// Section g: an idle 1 GiB map.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleMap {
    pub vsci: String,
    pub map_size: u64,
    #[serde(deserialize_with = "req")]
    pub seconds: Option<f64>,
    /// `ok` or `mismatch`.
    pub data_check: String,
    pub map: IdleFigures,
    pub no_map: IdleFigures,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleFigures {
    #[serde(deserialize_with = "req")]
    pub wall_s: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub cpu_s: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub cpu_pct: Option<f64>,
    /// The link counters: null when they could not be read.
    #[serde(deserialize_with = "req")]
    pub rx_bytes: Option<u64>,
    #[serde(deserialize_with = "req")]
    pub tx_bytes: Option<u64>,
    #[serde(deserialize_with = "req")]
    pub link_bytes: Option<u64>,
}

/// Section h: mailbox rounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mailbox {
    pub vsci: String,
    pub rounds: u64,
    pub rounds_total: u64,
    #[serde(deserialize_with = "req")]
    pub seconds: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub rounds_per_s: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub us_per_round: Option<f64>,
    pub wrong_payloads: u64,
    pub wrong_acks: u64,
    #[serde(deserialize_with = "req")]
    pub round: Option<Lat>,
}

/// Section i: a ring of messages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageRing {
    pub vsci: String,
    pub link: String,
    pub slots: u64,
    pub slot_stride: u64,
    pub rows: Vec<RingRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingRow {
    pub size: u64,
    /// SCIFlush after each flag.
    pub flush: bool,
    #[serde(deserialize_with = "req")]
    pub pingpong: Option<Lat>,
    pub pp_messages: u64,
    pub pp_late: u64,
    pub pp_wrong: u64,
    #[serde(deserialize_with = "req")]
    pub pp_link_bytes: Option<u64>,
    #[serde(deserialize_with = "req")]
    pub pp_link_bytes_per_msg: Option<f64>,
    pub stream_messages: u64,
    #[serde(deserialize_with = "req")]
    pub stream_seconds: Option<f64>,
    pub stream_late: u64,
    pub stream_wrong: u64,
    #[serde(deserialize_with = "req")]
    pub stream_link_bytes: Option<u64>,
    #[serde(deserialize_with = "req")]
    pub stream_link_bytes_per_msg: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub msgs_per_s: Option<f64>,
    #[serde(rename = "MBps", deserialize_with = "req")]
    pub mbps: Option<f64>,
}

/// Section j: per trapped store against one RMA write.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrappedStore {
    pub vsci: String,
    pub count: u64,
    pub pace_us: u64,
    /// A plain store through the remote map (it traps).
    #[serde(deserialize_with = "req")]
    pub store: Option<StoreFigures>,
    /// SCIMemCpy of the same bytes.
    #[serde(deserialize_with = "req")]
    pub scimemcpy: Option<StoreFigures>,
    /// A store into private memory: the floor.
    #[serde(deserialize_with = "req")]
    pub local_store: Option<StoreFigures>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreFigures {
    #[serde(deserialize_with = "req")]
    pub cpu: Option<Lat>,
    #[serde(deserialize_with = "req")]
    pub process_cpu_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub wall: Option<Lat>,
    /// Not for the local store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<Lat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
}
