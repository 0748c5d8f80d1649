//! The peers (sockperf, iperf3, ucx_perftest, fabric_write_lat) and the
//! seed-001 transfers, which every path shares.

use serde::{Deserialize, Serialize};

use super::{req, SbPingpong};

/// sockperf's TCP ping-pong. Not available: `available` false and nothing
/// else; failed: `error` and nothing measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sockperf {
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<SockperfRow>,
}

/// RTT/2 in µs, from sockperf's text (a figure it did not print is null).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SockperfRow {
    pub size: u64,
    #[serde(deserialize_with = "req")]
    pub mean_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub median_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p99_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub max_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub min_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub n: Option<f64>,
}

/// iperf3, one TCP stream. Not available / failed as [`Sockperf`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Iperf3 {
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    /// Received, MB/s.
    #[serde(rename = "MBps", default, skip_serializing_if = "Option::is_none")]
    pub mbps: Option<f64>,
    #[serde(rename = "sent_MBps", default, skip_serializing_if = "Option::is_none")]
    pub sent_mbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
}

/// ucx_perftest's UCP put (and with `am_bw`, active-message bandwidth).
/// Not available: `available` false and `tls`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ucx {
    pub available: bool,
    pub tls: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    #[serde(default)]
    pub lat: Vec<UcxLat>,
    #[serde(default)]
    pub bw: Vec<UcxBw>,
    #[serde(default)]
    pub am_bw: Vec<UcxBw>,
    /// Runs that gave no figure, as their error text.
    #[serde(default)]
    pub errors: Vec<String>,
    /// Local path only: the raw memfd ping-pong taken again right before
    /// UCX ran (sisci_bench -s b's `pingpong`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_pingpong: Option<SbPingpong>,
}

impl Ucx {
    /// put_lat RTT/2 of `size` bytes (median, µs).
    pub fn lat_median(&self, size: u64) -> Option<f64> {
        self.lat.iter().find(|r| r.size == size).map(|r| r.median_us)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UcxLat {
    pub size: u64,
    pub n: f64,
    pub median_us: f64,
    pub mean_us: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UcxBw {
    pub size: u64,
    pub n: f64,
    #[serde(rename = "MBps")]
    pub mbps: f64,
}

/// Active messages over UCX's tcp transport (the message ring's peer).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UcxAm {
    pub available: bool,
    pub tls: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    #[serde(default)]
    pub rows: Vec<UcxAmRow>,
    #[serde(default)]
    pub errors: Vec<String>,
}

impl UcxAm {
    /// The row of `test` (am_lat or am_bw) at `size`.
    pub fn row(&self, test: AmTest, size: u64) -> Option<&UcxAmRow> {
        self.rows.iter().find(|r| r.test == test && r.size == size)
    }
}

/// Which active-message test a row is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmTest {
    /// A ping-pong, RTT/2.
    #[default]
    AmLat,
    /// A one-way stream, messages per second.
    AmBw,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UcxAmRow {
    pub size: u64,
    pub test: AmTest,
    /// ucx_perftest's test name (am_lat, ucp_am_bw, ...).
    pub ucx_test: String,
    /// `uct` or `ucp`.
    pub api: String,
    pub n: f64,
    pub messages: f64,
    /// am_lat only.
    #[serde(deserialize_with = "req")]
    pub median_us: Option<f64>,
    /// am_lat only.
    #[serde(deserialize_with = "req")]
    pub mean_us: Option<f64>,
    pub msgs_per_s: f64,
    #[serde(rename = "MBps")]
    pub mbps: f64,
    #[serde(deserialize_with = "req")]
    pub link_bytes: Option<u64>,
    #[serde(deserialize_with = "req")]
    pub link_bytes_per_msg: Option<f64>,
}

/// fabric_write_lat: one delivered libfabric RMA write per call. Not
/// there or failed: `error` (and `available`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricWrite {
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    #[serde(default)]
    pub rows: Vec<FabricWriteRow>,
}

/// What fabric_write_lat prints on its `@@json` line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricWriteOutput {
    pub provider: String,
    pub delivery: String,
    pub rows: Vec<FabricWriteRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricWriteRow {
    pub size: u64,
    pub n: u64,
    pub median_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// `ok` when the bytes read back were the ones written.
    pub data_check: String,
}

/// The seed-001 transfers (examples/sendrecv -copy).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transfers {
    pub what: String,
    /// sendrecv's `-window` (`128m`).
    pub window: String,
    pub slots: u64,
    pub command: String,
    pub verified_transfers: u64,
    pub rows: Vec<TransferRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferRow {
    pub size: u64,
    #[serde(deserialize_with = "req")]
    pub chunks: Option<u64>,
    pub runs_ms: Vec<f64>,
    pub median_ms: f64,
    pub min_ms: f64,
    #[serde(rename = "MBps")]
    pub mbps: f64,
    /// The seed's own figure at this size (null at sizes it did not move).
    #[serde(deserialize_with = "req")]
    pub seed001_ms: Option<f64>,
}
