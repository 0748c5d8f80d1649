//! The cluster file: every node's id and address, and the shared key.
//!
//! ```toml
//! key_file = "cluster.key"      # relative to this file
//! [[node]]
//! id = 1
//! address = "10.0.0.1:7100"
//! [[node]]
//! id = 2
//! address = "10.0.0.2:7100"
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    key_file: PathBuf,
    /// RMA engine provider (libfabric provider string).
    #[serde(default)]
    fabric_provider: Option<String>,
    /// Silence after which a node is reported not responding (ms).
    #[serde(default)]
    node_timeout_ms: Option<u64>,
    /// Time a node may be unreachable (silent, or its link down) before it
    /// is declared dead and its connections lost (ms).
    #[serde(default)]
    node_dead_after_ms: Option<u64>,
    /// TCP user timeout of node links: data unacknowledged this long ends
    /// the link (ms).
    #[serde(default)]
    link_timeout_ms: Option<u64>,
    /// Group whose members may use the control socket (name or number).
    #[serde(default)]
    socket_group: Option<String>,
    /// Permission bits of the control socket, octal as a string ("0660").
    #[serde(default)]
    socket_mode: Option<String>,
    node: Vec<NodeEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    id: u32,
    address: String,
    /// Memory the node lends to others ("1G"; as `vscid --lend`).
    #[serde(default)]
    lend: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Cluster {
    pub nodes: BTreeMap<u32, SocketAddr>,
    pub key: Vec<u8>,
    pub provider: String,
    pub node_timeout_ms: u64,
    pub node_dead_after_ms: u64,
    pub link_timeout_ms: u64,
    /// Access to the control socket; `--socket-group` / `--socket-mode` override.
    pub socket_group: Option<String>,
    pub socket_mode: Option<u32>,
    /// Bytes each node lends (nodes with a `lend` key).
    pub lend: BTreeMap<u32, u64>,
}

/// Defaults of the liveness settings (docs/cluster.md, "Failures").
///
/// Sized for busy hosts: a node that did not get the CPU for seconds (a
/// loaded 2-core machine stood still for 4.7 s at a time; a VM paused by
/// its host, a SIGSTOP for a minute) is not dead. Silence only shows in
/// `vsci status`; a link ends on transport evidence (the TCP user timeout,
/// a reset) and comes back with its connections; only a node unreachable
/// for `node_dead_after_ms`, refusing links (its vscid is gone) or back
/// with new state loses them.
pub const NODE_TIMEOUT_MS: u64 = 1500;
pub const NODE_DEAD_AFTER_MS: u64 = 120_000;
pub const LINK_TIMEOUT_MS: u64 = 20_000;

impl Cluster {
    pub fn load(path: &Path) -> Result<Cluster> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading cluster file {}", path.display()))?;
        Cluster::parse(&text, path, |p| std::fs::read(p))
    }

    /// Parse and check the text of the cluster file at `path`; `read_key`
    /// reads the key file it names (the fuzz targets pass one that reads
    /// no file).
    pub fn parse(text: &str, path: &Path, read_key: impl FnOnce(&Path) -> std::io::Result<Vec<u8>>) -> Result<Cluster> {
        let file: File = toml::from_str(text).with_context(|| format!("parsing cluster file {}", path.display()))?;
        let mut nodes = BTreeMap::new();
        let mut lend = BTreeMap::new();
        for n in &file.node {
            if let Some(l) = &n.lend {
                lend.insert(
                    n.id,
                    vsci_proto::parse_size(l)
                        .map_err(anyhow::Error::msg)
                        .with_context(|| format!("node {}: lend", n.id))?,
                );
            }
            if n.id == 0 || n.id > 65535 {
                bail!("node id {} out of range 1..=65535", n.id);
            }
            let addr: SocketAddr =
                n.address.parse().with_context(|| format!("node {}: address {:?} is not IP:PORT", n.id, n.address))?;
            if nodes.insert(n.id, addr).is_some() {
                bail!("node id {} listed twice", n.id);
            }
        }
        if nodes.is_empty() {
            bail!("the cluster file lists no [[node]]");
        }
        let key_path = if file.key_file.is_absolute() {
            file.key_file.clone()
        } else {
            path.parent().unwrap_or(Path::new(".")).join(&file.key_file)
        };
        let key = read_key(&key_path).with_context(|| format!("reading key file {}", key_path.display()))?;
        let key = vsci_proto::cluster_key(&key).map_err(|e| anyhow::anyhow!("key file {} {e}", key_path.display()))?;
        let node_timeout_ms = file.node_timeout_ms.unwrap_or(NODE_TIMEOUT_MS);
        let node_dead_after_ms = file.node_dead_after_ms.unwrap_or(NODE_DEAD_AFTER_MS.max(node_timeout_ms));
        let link_timeout_ms = file.link_timeout_ms.unwrap_or(LINK_TIMEOUT_MS);
        // A day bounds them all (a typo of a few zeros should not make a
        // dead node hold its peers' memory for a year).
        for (k, v) in [
            ("node_timeout_ms", node_timeout_ms),
            ("node_dead_after_ms", node_dead_after_ms),
            ("link_timeout_ms", link_timeout_ms),
        ] {
            if !(100..=86_400_000).contains(&v) {
                bail!("{k} = {v}: must be 100..=86400000 (ms)");
            }
        }
        if node_dead_after_ms < node_timeout_ms {
            bail!("node_dead_after_ms ({node_dead_after_ms}) is shorter than node_timeout_ms ({node_timeout_ms})");
        }
        Ok(Cluster {
            nodes,
            key,
            provider: file.fabric_provider.unwrap_or_else(|| "tcp;ofi_rxm".into()),
            node_timeout_ms,
            node_dead_after_ms,
            link_timeout_ms,
            socket_group: file.socket_group,
            lend,
            socket_mode: match file.socket_mode.as_deref() {
                Some(m) => Some(crate::access::parse_mode(m).map_err(anyhow::Error::msg).context("socket_mode")?),
                None => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_lends_what_its_lend_key_says() {
        let key = |_: &Path| Ok(b"0123456789abcdef0123".to_vec());
        let text = "key_file = \"k\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:7100\"\n[[node]]\nid = 2\naddress = \"127.0.0.1:7101\"\nlend = \"3G\"\n";
        let c = Cluster::parse(text, Path::new("/c.toml"), key).unwrap();
        assert_eq!(c.lend.get(&2), Some(&(3 << 30)));
        assert_eq!(c.lend.get(&1), None);
        let bad = text.replace("3G", "lots");
        let e = Cluster::parse(&bad, Path::new("/c.toml"), key).unwrap_err();
        assert!(format!("{e:#}").contains("node 2: lend"), "{e:#}");
    }

    #[test]
    fn liveness_settings_have_busy_host_defaults_and_are_checked() {
        let key = |_: &Path| Ok(b"0123456789abcdef0123".to_vec());
        let nodes = "[[node]]\nid = 1\naddress = \"127.0.0.1:7100\"\n";
        let c = Cluster::parse(&format!("key_file = \"k\"\n{nodes}"), Path::new("/c.toml"), key).unwrap();
        assert_eq!((c.node_timeout_ms, c.node_dead_after_ms, c.link_timeout_ms), (1500, 120_000, 20_000));
        let c = Cluster::parse(
            &format!("key_file = \"k\"\nnode_dead_after_ms = 5000\nlink_timeout_ms = 1000\n{nodes}"),
            Path::new("/c.toml"),
            key,
        )
        .unwrap();
        assert_eq!((c.node_dead_after_ms, c.link_timeout_ms), (5000, 1000));
        for bad in [
            "node_dead_after_ms = 1000\nnode_timeout_ms = 2000",
            "link_timeout_ms = 0",
            "node_dead_after_ms = 99999999999",
        ] {
            assert!(
                Cluster::parse(&format!("key_file = \"k\"\n{bad}\n{nodes}"), Path::new("/c.toml"), key).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn parses_and_validates() {
        let dir = std::env::temp_dir().join(format!("vsci-cluster-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k"), "0123456789abcdef0123\n").unwrap();
        let f = dir.join("c.toml");
        std::fs::write(&f, "key_file = \"k\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:7100\"\n[[node]]\nid = 2\naddress = \"127.0.0.1:7101\"\n").unwrap();
        let c = Cluster::load(&f).unwrap();
        assert_eq!(c.nodes.len(), 2);
        assert_eq!(c.key, b"0123456789abcdef0123");
        assert_eq!(c.socket_mode, None);
        std::fs::write(&f, "key_file = \"k\"\nsocket_group = \"vsci\"\nsocket_mode = \"0660\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:7100\"\n").unwrap();
        let c = Cluster::load(&f).unwrap();
        assert_eq!((c.socket_group.as_deref(), c.socket_mode), (Some("vsci"), Some(0o660)));
        std::fs::write(
            &f,
            "key_file = \"k\"\nsocket_mode = \"0999\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:7100\"\n",
        )
        .unwrap();
        assert!(Cluster::load(&f).is_err());
        std::fs::write(&f, "key_file = \"k\"\n[[node]]\nid = 1\naddress = \"nope\"\n").unwrap();
        assert!(Cluster::load(&f).is_err());
        // A key in hex is its text, as `vsci device` reads it too
        // (vsci_proto::cluster_key).
        std::fs::write(dir.join("k"), "0123456789abcdef\n").unwrap();
        std::fs::write(&f, "key_file = \"k\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:1\"\n").unwrap();
        assert_eq!(Cluster::load(&f).unwrap().key, b"0123456789abcdef");
        std::fs::write(dir.join("k"), "short").unwrap();
        std::fs::write(&f, "key_file = \"k\"\n[[node]]\nid = 1\naddress = \"127.0.0.1:1\"\n").unwrap();
        assert!(Cluster::load(&f).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
