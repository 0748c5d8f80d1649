//! The `reflective` path: one writer, groups of 1-3 members.

use serde::{Deserialize, Serialize};

use super::{req, Namespace, Quantiles};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reflective {
    pub path: String,
    pub what: String,
    pub namespaces: Vec<Namespace>,
    pub link: String,
    /// Bytes per block of the bandwidth rows.
    pub block: u64,
    pub blocks_pio: u64,
    pub blocks_dma: u64,
    /// Store-to-visibility samples sent.
    pub samples: u64,
    pub pace_us: u64,
    pub rows: Vec<ReflectiveRow>,
}

/// One configuration (`unicast, 1 node`, `group of N`), from the writer's
/// RESULT line (a figure it did not print is null) and the members' samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReflectiveRow {
    pub config: String,
    pub members: u64,
    pub unicast: bool,
    #[serde(deserialize_with = "req")]
    pub pio_us: Option<f64>,
    #[serde(rename = "pio_MBps", deserialize_with = "req")]
    pub pio_mbps: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub dma_us: Option<f64>,
    #[serde(rename = "dma_MBps", deserialize_with = "req")]
    pub dma_mbps: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub pio_call_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub dma_call_us: Option<f64>,
    /// 8 B stored and SCIFlush-ed.
    pub flush: Quantiles,
    /// A plain store until the last member saw it.
    pub visibility_all: VisibilityAll,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisibilityAll {
    /// Samples every member saw.
    pub n: u64,
    pub sent: u64,
    #[serde(deserialize_with = "req")]
    pub median_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p99_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub max_us: Option<f64>,
}
