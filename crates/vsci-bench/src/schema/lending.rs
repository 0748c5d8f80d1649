//! The `lending` path: lent memory as a block device, a page store and a
//! memory extension, against NBD.

use serde::{Deserialize, Serialize};

use super::req;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lending {
    /// Bytes of each device.
    pub size: u64,
    pub secs_per_job: u64,
    pub jobs: Vec<FioJob>,
    pub pagestore: PageStore,
    pub memext: MemExt,
    pub swap: Swap,
    pub peer: String,
}

/// One fio job on both devices.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FioJob {
    pub job: String,
    pub rw: String,
    pub bs: u64,
    pub qd: u64,
    pub vsci: FioFigures,
    pub nbdkit: FioFigures,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FioFigures {
    #[serde(rename = "MBps", deserialize_with = "req")]
    pub mbps: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub iops: Option<f64>,
    /// Total latency (submission to completion), µs.
    #[serde(deserialize_with = "req")]
    pub p50_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p99_us: Option<f64>,
}

/// `t_tmem bench`: puts and gets of 4 KiB pages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageStore {
    pub pages: u64,
    pub rows: Vec<PageStoreRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageStoreRow {
    #[serde(deserialize_with = "req")]
    pub store: Option<String>,
    #[serde(deserialize_with = "req")]
    pub op: Option<String>,
    #[serde(deserialize_with = "req")]
    pub ops: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p50_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p99_us: Option<f64>,
}

/// vsci-memext-check's stream, on lent memory (`vsci`) and locally.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemExt {
    pub size: String,
    pub budget: String,
    pub runs: MemExtRuns,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemExtRuns {
    pub vsci: MemExtRates,
    pub local: MemExtRates,
}

/// GB/s of the program's own accesses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemExtRates {
    #[serde(rename = "write_GBps", deserialize_with = "req")]
    pub write_gbps: Option<f64>,
    #[serde(rename = "read_seq_GBps", deserialize_with = "req")]
    pub read_seq_gbps: Option<f64>,
    #[serde(rename = "read_random_GBps", deserialize_with = "req")]
    pub read_random_gbps: Option<f64>,
    #[serde(rename = "rmw_random_GBps", deserialize_with = "req")]
    pub rmw_random_gbps: Option<f64>,
}

/// A guest swapping onto each device, or why not (`skipped`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Swap {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vsci: Option<SwapRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbdkit: Option<SwapRun>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwapRun {
    #[serde(deserialize_with = "req")]
    pub program_secs: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub swapped_kib: Option<f64>,
    pub guest_wall_secs: f64,
    #[serde(rename = "working_set_MiB")]
    pub working_set_mib: u64,
    #[serde(rename = "guest_ram_MiB")]
    pub guest_ram_mib: u64,
}
