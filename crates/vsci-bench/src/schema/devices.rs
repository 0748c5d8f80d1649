//! The `devices` path: a NIC shared across hosts (seed 004).

use serde::{Deserialize, Serialize};

use super::{req, DmaPio};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Devices {
    pub available: bool,
    pub command: String,
    /// The same runs over the nodes' veth: the physical reference.
    pub reference: DeviceRuns,
    pub configs: Vec<DeviceConfig>,
    pub fairness: Vec<Fairness>,
    pub pio: DevicesPio,
}

impl Devices {
    /// The configuration named `name` (local, bounce, zero-copy).
    pub fn config(&self, name: &str) -> Option<&DeviceConfig> {
        self.configs.iter().find(|c| c.name == name)
    }
}

/// The veth reference: latency and throughput.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRuns {
    pub latency: super::Outcome<TcpPingpong>,
    pub throughput: Vec<Throughput>,
}

/// A VM configuration: latency and throughput from one VM, the interrupts
/// from a fresh one. A configuration that failed has its error and no
/// figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    pub name: String,
    pub node: u64,
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<super::Outcome<TcpPingpong>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throughput: Vec<Throughput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<Driver>,
    /// How long the VM ran its latency and throughput runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupts: Option<Interrupts>,
}

/// tcp_pingpong's `@@json` line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpPingpong {
    pub count: u64,
    pub warmup: u64,
    pub rows: Vec<TcpPingpongRow>,
}

/// RTT/2, µs; `verified`: round trips whose echo was checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpPingpongRow {
    pub size: u64,
    pub n: u64,
    pub verified: u64,
    pub median_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub min_us: f64,
    pub max_us: f64,
}

/// iperf3 TX (the VM sends) and RX (`-R`) at one write length; a direction
/// that failed has `*_error` and no figures; the CPU figures are there when
/// /proc/stat could be read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Throughput {
    pub len: u64,
    pub secs: u64,
    #[serde(rename = "tx_MBps", default, skip_serializing_if = "Option::is_none")]
    pub tx_mbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_retransmits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_cpu_busy: Option<f64>,
    #[serde(rename = "tx_cpu_ms_per_MB", default, skip_serializing_if = "Option::is_none")]
    pub tx_cpu_ms_per_mb: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_error: Option<String>,
    #[serde(rename = "rx_MBps", default, skip_serializing_if = "Option::is_none")]
    pub rx_mbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_retransmits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_cpu_busy: Option<f64>,
    #[serde(rename = "rx_cpu_ms_per_MB", default, skip_serializing_if = "Option::is_none")]
    pub rx_cpu_ms_per_mb: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_error: Option<String>,
}

/// Which way a throughput figure goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Tx,
    Rx,
}

/// One direction's figures of a [`Throughput`] row.
#[derive(Debug, Clone, Copy, Default)]
pub struct DirFigures<'a> {
    pub mbps: Option<f64>,
    pub cpu_busy: Option<f64>,
    pub cpu_ms_per_mb: Option<f64>,
    pub error: Option<&'a str>,
}

impl Throughput {
    pub fn dir(&self, d: Dir) -> DirFigures<'_> {
        match d {
            Dir::Tx => DirFigures {
                mbps: self.tx_mbps,
                cpu_busy: self.tx_cpu_busy,
                cpu_ms_per_mb: self.tx_cpu_ms_per_mb,
                error: self.tx_error.as_deref(),
            },
            Dir::Rx => DirFigures {
                mbps: self.rx_mbps,
                cpu_busy: self.rx_cpu_busy,
                cpu_ms_per_mb: self.rx_cpu_ms_per_mb,
                error: self.rx_error.as_deref(),
            },
        }
    }
}

/// The VM driver's counters over its life (its `DriverStats` line), what
/// the device counted for its function, and the TAP drops. A driver that
/// printed no counters has its error instead of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Driver {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irqs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copies: Option<u64>,
    pub device: DeviceFunction,
    pub drops: Drops,
}

/// `vsci device list --json`'s counters of the VM's function (without its
/// holder and MAC), or why there are none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceFunction {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub func: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_packets: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_packets: Option<u64>,
    /// Frames dropped for want of a posted receive buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_missed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irqs: Option<u64>,
}

/// Frames the TAPs dropped during the VM's life.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drops {
    #[serde(deserialize_with = "req")]
    pub vm_tap_tx: Option<u64>,
    #[serde(deserialize_with = "req")]
    pub wire_tap_tx: Option<u64>,
}

/// A fresh VM's interrupts over one iperf3 RX run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interrupts {
    pub secs: u64,
    pub vm_secs: f64,
    #[serde(rename = "rx_MBps", deserialize_with = "req")]
    pub rx_mbps: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub error: Option<String>,
    pub driver: Driver,
}

/// Concurrent RX streams of zero-copy VMs; a case that could not start its
/// VMs has only `case`, `hosts` and `errors`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fairness {
    pub case: String,
    pub hosts: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secs: Option<u64>,
    /// Each VM's share (null where its iperf3 failed).
    #[serde(rename = "MBps", default, skip_serializing_if = "Vec::is_empty")]
    pub mbps: Vec<Option<f64>>,
    #[serde(rename = "total_MBps", default, skip_serializing_if = "Option::is_none")]
    pub total_mbps: Option<f64>,
    /// Jain's index, only when every VM reported.
    #[serde(default)]
    pub jain: Option<f64>,
    pub errors: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drivers: Vec<Driver>,
}

/// dma_bench -s f's rows (or its error).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevicesPio {
    #[serde(deserialize_with = "req")]
    pub rows: Option<Vec<DmaPio>>,
    #[serde(deserialize_with = "req")]
    pub failures: Option<u64>,
    #[serde(deserialize_with = "req")]
    pub error: Option<String>,
    #[serde(deserialize_with = "req")]
    pub mode: Option<String>,
}
