//! The guest paths.

use serde::{Deserialize, Serialize};

use super::{req, DmaBench, Outcome, RemoteBench, SisciBench, Transfers};

/// The local suite with both ends inside one guest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guest {
    pub path: String,
    pub what: String,
    /// What `vsci vm run` said the guest ran under (null if it said nothing).
    #[serde(deserialize_with = "req")]
    pub accelerator: Option<String>,
    pub iterations: String,
    pub sisci_bench: SisciBench,
    pub transfers: Outcome<Transfers>,
    pub dma: Outcome<DmaBench>,
    pub peers: GuestPeers,
}

/// Why the TCP peers do not run on guest paths.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestPeers {
    pub not_run: String,
}

/// Two ends across a guest boundary (`guest-host`, `guest-guest`,
/// `guest-remote`): remote_bench and the transfers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestPair {
    pub path: String,
    pub what: String,
    /// What each end is (`guest NAME (1 vCPU)`, `host process`).
    pub ends: Vec<String>,
    pub nodes: Vec<u32>,
    #[serde(deserialize_with = "req")]
    pub accelerator: Option<String>,
    pub iterations: String,
    pub remote_bench: RemoteBench,
    pub transfers: Outcome<Transfers>,
    pub peers: GuestPeers,
    /// `guest-remote` only: the link between the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// The local suite in a guest against the host, figure by figure.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestVsHost {
    pub accelerator: String,
    pub kvm: bool,
    pub what: String,
    pub rows: Vec<GuestVsHostRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestVsHostRow {
    pub what: String,
    /// `us` or `MB/s`.
    pub unit: String,
    #[serde(deserialize_with = "req")]
    pub host: Option<f64>,
    #[serde(deserialize_with = "req")]
    pub guest: Option<f64>,
    /// guest / host.
    #[serde(deserialize_with = "req")]
    pub ratio: Option<f64>,
}
