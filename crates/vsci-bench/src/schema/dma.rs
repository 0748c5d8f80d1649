//! Seed 003's DMA figures: dma_bench's JSON and the paths side by side.

use serde::{Deserialize, Serialize};

use super::{req, ProgramMachine};

/// dma_bench's JSON (bench/dma_bench.c): a section's array is there when
/// the section ran (`-s`; sections a-e by default, f only when asked).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaBench {
    pub benchmark: String,
    pub date: String,
    pub command: String,
    pub mode: String,
    pub machine: ProgramMachine,
    pub vsci_socket: String,
    /// `co-located` or `remote`.
    pub target: String,
    pub target_node: u64,
    pub units: DmaUnits,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<DmaSetup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub single: Vec<DmaSingle>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bursts: Vec<DmaBursts>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<DmaNotify>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<DmaCall>,
    /// Section f: word-by-word PIO against the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pio: Option<Vec<DmaPio>>,
    pub failures: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaUnits {
    pub bandwidth: String,
    pub time: String,
}

/// Section a: a DMA buffer's set-up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaSetup {
    pub bytes: u64,
    #[serde(deserialize_with = "req")]
    pub create_map_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub touch_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub first_dma_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub second_dma_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub unmap_remove_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub peer_mmap_touch_us: Option<f64>,
}

/// Section b: one transfer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaSingle {
    /// `read` or `write`.
    pub dir: String,
    pub bytes: u64,
    #[serde(deserialize_with = "req")]
    pub dma_mbps: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub peer_mbps: Option<f64>,
}

/// Section c: bursts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaBursts {
    pub total_bytes: u64,
    pub burst_bytes: u64,
    #[serde(deserialize_with = "req")]
    pub queues4_mbps: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub queue1_mbps: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub peer_mbps: Option<f64>,
}

/// Section d: completion notification.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaNotify {
    pub how: String,
    #[serde(deserialize_with = "req")]
    pub median_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p99_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub idle_median_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub idle_p99_us: Option<f64>,
}

/// Section e: control calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaCall {
    pub call: String,
    #[serde(deserialize_with = "req")]
    pub median_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p99_us: Option<f64>,
}

/// Section f: PIO against DMA.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaPio {
    pub how: String,
    pub dir: String,
    pub bytes: u64,
    /// Bytes a DMA read found in the target afterwards.
    pub delivered_bytes: u64,
    #[serde(deserialize_with = "req")]
    pub ms: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub mbps: Option<f64>,
}

/// The DMA figures of the `local`, `guest` and `remote` paths side by side.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaVersus {
    pub accelerator: String,
    pub what: String,
    pub modes: DmaModes,
    pub paper: Vec<PaperFigure>,
    pub rows: Vec<DmaVersusRow>,
}

/// dma_bench's `mode` on each path (null where it did not run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaModes {
    #[serde(deserialize_with = "req")]
    pub host: Option<String>,
    #[serde(deserialize_with = "req")]
    pub guest: Option<String>,
    #[serde(deserialize_with = "req")]
    pub remote: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperFigure {
    pub section: String,
    pub figure: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaVersusRow {
    pub what: String,
    /// `us` or `MB/s`.
    pub unit: String,
    pub higher_is_better: bool,
    #[serde(deserialize_with = "req")]
    pub host: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub guest: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub remote: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub guest_overhead: Option<f64>,
    pub paper: String,
}
