//! The results of a run, typed: what the runners produce, what
//! `results.json` holds, and what the report and the plots read.
//!
//! Every struct refuses keys it does not know (`deny_unknown_fields`), and
//! a field is required unless it says otherwise, so a misspelt key in the
//! code is a compile error and one in a file is a load error that names the
//! field (with its path, from [`load`]). Three kinds of field:
//!
//! - plain (`u64`, `String`, `Vec<_>`): always written, never null;
//! - `Option<_>` with `deserialize_with = "req"`: always written, null when
//!   the program could not measure it (the C benchmarks write `null` for a
//!   figure that is not a finite number, or for a latency with no sample);
//! - `Option<_>` or `Vec<_>` with `#[serde(default)]`: absent in some runs,
//!   each saying when (a section that did not run, a run made before the
//!   figure existed, a failure that left only its error).
//!
//! The JSON some programs of the run write (sisci_bench, remote_bench,
//! dma_bench, `python -m sisci.bench`, fabric_write_lat, tcp_pingpong) is
//! read through the same types, so a change of their output that the
//! schema does not know stops the path with the field's name rather than
//! losing the figure later in the report.

mod devices;
mod dma;
mod guest;
mod lending;
mod local;
mod peers;
mod reflective;
mod remote;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use devices::*;
pub use dma::*;
pub use guest::*;
pub use lending::*;
pub use local::*;
pub use peers::*;
pub use reflective::*;
pub use remote::*;

/// A field that is always there but may be null (see the module's text).
pub fn req<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

/// Parse JSON text through the schema; the error names the path of the
/// field that did not fit (`paths.remote.remote_bench.pingpong.rows[2].vsci:
/// unknown field ...`).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        anyhow::anyhow!("{}{}", if path == "." { String::new() } else { format!("{path}: ") }, e.into_inner())
    })
}

/// A results file (`results.json`).
pub fn load(path: &Path) -> Result<Results> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    from_str(&text).with_context(|| format!("{} does not fit the results schema", path.display()))
}

/// A program's JSON output file, read through the schema.
pub fn load_output<T: DeserializeOwned>(path: &Path, program: &str) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("{program} wrote no JSON to {}", path.display()))?;
    from_str(&text).with_context(|| format!("{program}'s JSON ({}) does not fit the results schema", path.display()))
}

// ---------------------------------------------------------------------------
// Outcomes: a measurement, or why there is none

/// A step that measured (`Ran`), failed (`{"error": ...}`) or was not run
/// (`{"skipped": ...}`). The two objects with one key are told apart from
/// the measurement by their key; the measurement is read strictly.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    Ran(T),
    Failed(String),
    Skipped(String),
}

impl<T> Outcome<T> {
    pub fn ran(&self) -> Option<&T> {
        match self {
            Outcome::Ran(t) => Some(t),
            _ => None,
        }
    }
    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::Failed(e) => Some(e),
            _ => None,
        }
    }
    pub fn skipped(&self) -> Option<&str> {
        match self {
            Outcome::Skipped(e) => Some(e),
            _ => None,
        }
    }
    /// An `anyhow` result as an outcome.
    pub fn of(r: Result<T>) -> Outcome<T> {
        match r {
            Ok(t) => Outcome::Ran(t),
            Err(e) => Outcome::Failed(format!("{e:#}")),
        }
    }
}

impl<T: Default> Default for Outcome<T> {
    fn default() -> Self {
        Outcome::Ran(T::default())
    }
}

impl<T: Serialize> Serialize for Outcome<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Outcome::Ran(t) => t.serialize(s),
            Outcome::Failed(e) | Outcome::Skipped(e) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(if matches!(self, Outcome::Failed(_)) { "error" } else { "skipped" }, e)?;
                m.end()
            }
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Outcome<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        if let Some(o) = v.as_object().filter(|o| o.len() == 1) {
            if let Some(e) = o.get("error").and_then(|e| e.as_str()) {
                return Ok(Outcome::Failed(e.to_string()));
            }
            if let Some(e) = o.get("skipped").and_then(|e| e.as_str()) {
                return Ok(Outcome::Skipped(e.to_string()));
            }
        }
        serde_path_to_error::deserialize(v).map(Outcome::Ran).map_err(|e| {
            let path = e.path().to_string();
            serde::de::Error::custom(format!(
                "{}{}",
                if path == "." { String::new() } else { format!("{path}: ") },
                e.into_inner()
            ))
        })
    }
}

// ---------------------------------------------------------------------------
// Pieces many sections share

/// A latency distribution as the C benchmarks write it (`json_lat`):
/// microseconds, RTT/2 for ping-pongs. `n` samples, `bad` of them wrong.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lat {
    pub n: u64,
    pub bad: u64,
    #[serde(deserialize_with = "req")]
    pub median_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p99_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub mean_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub min_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub max_us: Option<f64>,
    /// sisci_bench's interrupt rows only: voluntary context switches per
    /// round trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleeps_per_roundtrip: Option<f64>,
    /// 10 µs buckets, the last one the overflow. Absent where the program
    /// sent none (remote_bench's trapped-store visibility before 0b54935).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hist_10us: Option<Vec<u64>>,
}

/// A latency summary a program or the runner computes itself (no
/// histogram): sockperf, fabric_write_lat, tcp_pingpong, reflective rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quantiles {
    #[serde(deserialize_with = "req")]
    pub median_us: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub p99_us: Option<f64>,
}

/// What a C benchmark records of the machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramMachine {
    pub hostname: String,
    pub nproc: u64,
    /// sisci_bench only: the clock's step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_step_ns: Option<u64>,
    pub kernel: String,
    pub cpu: String,
}

/// One phase of a C benchmark: whether it passed its checks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub name: String,
    pub ok: bool,
    pub errors: Vec<String>,
}

/// A network namespace of a path: its name, node and address.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Namespace {
    pub name: String,
    pub node_id: u64,
    pub address: String,
}

// ---------------------------------------------------------------------------
// The whole run

/// `results.json`: one run of `vsci bench` (or several merged, see
/// `command`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Results {
    pub benchmark: String,
    pub version: String,
    pub command: String,
    pub date: String,
    pub elapsed_s: f64,
    /// `quick` or `full`.
    pub mode: String,
    pub machine: Machine,
    pub paths: Paths,
    pub skipped: Vec<Skipped>,
    /// Paths that failed, with the error.
    pub errors: BTreeMap<String, String>,
    pub peers: PeerPrograms,
    pub units: Units,
    /// The local suite in a guest against the host (null unless both the
    /// `local` and the `guest` path ran).
    #[serde(deserialize_with = "req")]
    pub guest_vs_host: Option<GuestVsHost>,
    /// Seed 003's DMA figures side by side (null when no path ran
    /// dma_bench; results saved before it existed have null and get it when
    /// the report is rebuilt).
    #[serde(deserialize_with = "req")]
    pub dma: Option<DmaVersus>,
}

/// The machine the run was made on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    pub cpu: String,
    pub cores: u64,
    pub memory: String,
    pub kernel: String,
    pub hostname: String,
    pub under_hypervisor: bool,
    pub virtualization: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Units {
    pub latency: String,
    pub bandwidth: String,
    pub transfer: String,
    pub ratio: String,
}

/// The peer programs found, and what happened to the missing ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerPrograms {
    /// Program name to its path.
    pub found: BTreeMap<String, String>,
    pub notes: Vec<PeerNote>,
}

/// A peer program that was missing: installed by the run, or still
/// missing and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerNote {
    pub tool: String,
    pub package: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

/// Every path's results; a path that did not run is absent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paths {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<Local>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<Remote>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflective: Option<Reflective>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending: Option<Lending>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Devices>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Guest>,
    #[serde(rename = "guest-host", default, skip_serializing_if = "Option::is_none")]
    pub guest_host: Option<GuestPair>,
    #[serde(rename = "guest-guest", default, skip_serializing_if = "Option::is_none")]
    pub guest_guest: Option<GuestPair>,
    #[serde(rename = "guest-remote", default, skip_serializing_if = "Option::is_none")]
    pub guest_remote: Option<GuestPair>,
}

/// What a path's runner returns.
#[derive(Debug, Clone)]
pub enum PathResult {
    Local(Box<Local>),
    Remote(Box<Remote>),
    Reflective(Box<Reflective>),
    Lending(Box<Lending>),
    Devices(Box<Devices>),
    Guest(Box<Guest>),
    GuestPair(Box<GuestPair>),
}

impl Paths {
    /// Put a runner's result in its place (`name`: the path's name).
    pub fn insert(&mut self, name: &str, r: PathResult) {
        match r {
            PathResult::Local(v) => self.local = Some(*v),
            PathResult::Remote(v) => self.remote = Some(*v),
            PathResult::Reflective(v) => self.reflective = Some(*v),
            PathResult::Lending(v) => self.lending = Some(*v),
            PathResult::Devices(v) => self.devices = Some(*v),
            PathResult::Guest(v) => self.guest = Some(*v),
            PathResult::GuestPair(v) => match name {
                "guest-host" => self.guest_host = Some(*v),
                "guest-guest" => self.guest_guest = Some(*v),
                _ => self.guest_remote = Some(*v),
            },
        }
    }

    /// The names of the paths that ran, in name order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = [
            ("local", self.local.is_some()),
            ("remote", self.remote.is_some()),
            ("reflective", self.reflective.is_some()),
            ("lending", self.lending.is_some()),
            ("devices", self.devices.is_some()),
            ("guest", self.guest.is_some()),
            ("guest-host", self.guest_host.is_some()),
            ("guest-guest", self.guest_guest.is_some()),
            ("guest-remote", self.guest_remote.is_some()),
        ]
        .into_iter()
        .filter(|(_, ran)| *ran)
        .map(|(n, _)| n)
        .collect();
        v.sort_unstable();
        v
    }

    /// The guest pairs that ran, with their names, in report order.
    pub fn guest_pairs(&self) -> Vec<(&'static str, &GuestPair)> {
        [("guest-host", &self.guest_host), ("guest-guest", &self.guest_guest), ("guest-remote", &self.guest_remote)]
            .into_iter()
            .filter_map(|(n, g)| g.as_ref().map(|g| (n, g)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
