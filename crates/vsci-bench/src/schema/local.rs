//! The `local` path and what runs on it: sisci_bench and the Python
//! binding's figures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{req, DmaBench, Iperf3, Lat, Outcome, Phase, ProgramMachine, Sockperf, Transfers, Ucx};

/// Processes of one node.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Local {
    pub path: String,
    pub what: String,
    pub sisci_bench: SisciBench,
    pub transfers: Outcome<Transfers>,
    pub dma: Outcome<DmaBench>,
    /// The Python binding's ping-pongs (absent in runs made before it was
    /// measured, 2026-11-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<Outcome<PythonBench>>,
    pub peers: LocalPeers,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalPeers {
    pub ucx_perftest: Ucx,
    pub sockperf: Sockperf,
    pub iperf3: Iperf3,
}

/// sisci_bench's JSON (bench/sisci_bench.c, `write_json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SisciBench {
    pub benchmark: String,
    pub date: String,
    pub command: String,
    pub mode: String,
    pub machine: ProgramMachine,
    pub vsci_socket: String,
    pub node_id: i64,
    pub pinned: bool,
    pub units: SbUnits,
    pub phases: Vec<Phase>,
    pub write_bandwidth: SbWriteBandwidth,
    pub pingpong: SbPingpong,
    pub interrupt: SbInterrupt,
    pub data_interrupt: SbDataInterrupt,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbUnits {
    pub bandwidth: String,
    pub latency: String,
    pub ratio: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbWriteBandwidth {
    pub peer: String,
    pub vsci: String,
    /// `ok`, `mismatch`, or null when not checked.
    #[serde(deserialize_with = "req")]
    pub data_check: Option<String>,
    pub rows: Vec<SbBandwidthRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbBandwidthRow {
    pub size: u64,
    #[serde(rename = "vsci_MBps", deserialize_with = "req")]
    pub vsci_mbps: Option<f64>,
    /// memcpy into private memory: the limit.
    #[serde(rename = "peer_MBps", deserialize_with = "req")]
    pub peer_mbps: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub ratio: Option<f64>,
    #[serde(rename = "memcpy_fence_MBps", deserialize_with = "req")]
    pub memcpy_fence_mbps: Option<f64>,
    /// memcpy + an empty library call: the floor of any flush (absent in
    /// runs made before 600c283).
    #[serde(rename = "memcpy_call_MBps", default, skip_serializing_if = "Option::is_none")]
    pub memcpy_call_mbps: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbPingpong {
    pub peer: String,
    pub rows: Vec<SbPingpongRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbPingpongRow {
    pub size: u64,
    #[serde(deserialize_with = "req")]
    pub vsci: Option<Lat>,
    /// The raw memfd polling ping-pong: the limit.
    #[serde(deserialize_with = "req")]
    pub peer: Option<Lat>,
    #[serde(deserialize_with = "req")]
    pub ratio: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbInterrupt {
    pub peer_name: String,
    /// The blocking eventfd ping-pong.
    #[serde(deserialize_with = "req")]
    pub peer: Option<Lat>,
    pub rows: Vec<SbInterruptRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbInterruptRow {
    /// `VSCI_WAIT`: adaptive, block or poll.
    pub wait: String,
    #[serde(deserialize_with = "req")]
    pub vsci: Option<Lat>,
    #[serde(deserialize_with = "req")]
    pub ratio: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub ratio_vs_raw_poll: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbDataInterrupt {
    pub peer_name: String,
    pub rows: Vec<SbDataInterruptRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbDataInterruptRow {
    pub payload: u64,
    pub wait: String,
    #[serde(deserialize_with = "req")]
    pub vsci: Option<Lat>,
    #[serde(deserialize_with = "req")]
    pub peer: Option<Lat>,
    #[serde(deserialize_with = "req")]
    pub ratio: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub ratio_vs_raw_poll: Option<f64>,
}

/// `python -m sisci.bench`'s JSON (python/sisci/bench.py) with the runner's
/// C figures beside it (`c`, `binding_cost_us`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonBench {
    pub benchmark: String,
    /// The interpreter ("CPython 3.11.2").
    pub python: String,
    pub cffi: String,
    pub library: String,
    pub vsci_wait: String,
    pub rounds: u64,
    pub calls: PythonCalls,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_pingpong: Option<PythonPingpong>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_pingpong: Option<PythonPingpong>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_pingpong_block: Option<PythonPingpong>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_pingpong_poll: Option<PythonPingpong>,
    /// Added by the runner: sisci_bench's figures of the same run.
    pub c: PythonC,
    /// Added by the runner: Python's median minus C's, per row.
    pub binding_cost_us: BTreeMap<String, Option<f64>>,
}

/// The rows the Python figures are compared in: the segment ping-pong and
/// the interrupt ping-pong with each wait strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PythonRow {
    Segment,
    Interrupt,
    InterruptBlock,
    InterruptPoll,
}

impl PythonRow {
    pub const ALL: [PythonRow; 4] =
        [PythonRow::Segment, PythonRow::Interrupt, PythonRow::InterruptBlock, PythonRow::InterruptPoll];

    /// The row's key in the Python JSON (and in `binding_cost_us`).
    pub fn key(self) -> &'static str {
        match self {
            PythonRow::Segment => "segment_pingpong",
            PythonRow::Interrupt => "interrupt_pingpong",
            PythonRow::InterruptBlock => "interrupt_pingpong_block",
            PythonRow::InterruptPoll => "interrupt_pingpong_poll",
        }
    }

    /// sisci_bench's interrupt wait strategy (None: the segment ping-pong).
    pub fn wait(self) -> Option<&'static str> {
        match self {
            PythonRow::Segment => None,
            PythonRow::Interrupt => Some("adaptive"),
            PythonRow::InterruptBlock => Some("block"),
            PythonRow::InterruptPoll => Some("poll"),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            PythonRow::Segment => "segment ping-pong, 8 B",
            PythonRow::Interrupt => "interrupt ping-pong, VSCI_WAIT=adaptive",
            PythonRow::InterruptBlock => "interrupt ping-pong, VSCI_WAIT=block",
            PythonRow::InterruptPoll => "interrupt ping-pong, VSCI_WAIT=poll",
        }
    }
}

impl PythonBench {
    /// The Python figure of a row.
    pub fn pingpong(&self, row: PythonRow) -> Option<&PythonPingpong> {
        match row {
            PythonRow::Segment => self.segment_pingpong.as_ref(),
            PythonRow::Interrupt => self.interrupt_pingpong.as_ref(),
            PythonRow::InterruptBlock => self.interrupt_pingpong_block.as_ref(),
            PythonRow::InterruptPoll => self.interrupt_pingpong_poll.as_ref(),
        }
    }
}

/// Nanoseconds per call from Python.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonCalls {
    pub cffi_call_ns: f64,
    pub binding_getter_ns: f64,
    pub trigger_ns: f64,
    pub memoryview_load_ns: f64,
    pub memoryview_store_ns: f64,
    pub loop_ns: f64,
}

/// One Python ping-pong: the median round's figures and every round (a
/// round that failed has only its error); when every round failed, the
/// error and the rounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonPingpong {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// Segment ping-pong only: messages that arrived wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_us: Option<f64>,
    /// Interrupt ping-pongs: the `VSCI_WAIT` of the row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub runs: Vec<PythonRound>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonRound {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// sisci_bench's figures the Python rows are compared with (one-way
/// medians, µs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonC {
    pub from: String,
    #[serde(deserialize_with = "req")]
    pub segment_pingpong_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub interrupt_pingpong_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub interrupt_pingpong_block_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub interrupt_pingpong_poll_us: Option<f64>,
    /// The ping-pong size that stood in for 8 B (only when it was not 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_pingpong_size: Option<u64>,
}

impl PythonC {
    /// The C figure of a row.
    pub fn us(&self, row: PythonRow) -> Option<f64> {
        match row {
            PythonRow::Segment => self.segment_pingpong_us,
            PythonRow::Interrupt => self.interrupt_pingpong_us,
            PythonRow::InterruptBlock => self.interrupt_pingpong_block_us,
            PythonRow::InterruptPoll => self.interrupt_pingpong_poll_us,
        }
    }
    pub fn us_mut(&mut self, row: PythonRow) -> &mut Option<f64> {
        match row {
            PythonRow::Segment => &mut self.segment_pingpong_us,
            PythonRow::Interrupt => &mut self.interrupt_pingpong_us,
            PythonRow::InterruptBlock => &mut self.interrupt_pingpong_block_us,
            PythonRow::InterruptPoll => &mut self.interrupt_pingpong_poll_us,
        }
    }
}
