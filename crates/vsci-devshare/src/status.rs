//! What `vsci status` shows of shared devices: each `vsci device serve`
//! and `vsci device vm` keeps a small JSON file beside its node's control
//! socket (`SOCKET.device-NAME.json`, `SOCKET.vm-NAME.json`) saying who
//! holds what, rewritten when an assignment changes and removed on exit.
//! A file whose process is gone (killed) is ignored and removed by readers.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Holding {
    pub func: u8,
    pub mac: String,
    /// (node, VM) holding it, if any.
    pub node: Option<u32>,
    pub vm: Option<String>,
    pub mode: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A device this node serves and its functions' holders.
    Device { pid: u32, name: String, wire: String, functions: Vec<Holding> },
    /// A VM of this node and the function it holds.
    Vm { pid: u32, name: String, device_node: u32, func: u8, mac: String, mode: String },
}

impl Entry {
    fn pid(&self) -> u32 {
        match self {
            Entry::Device { pid, .. } | Entry::Vm { pid, .. } => *pid,
        }
    }
}

fn path_for(socket: &Path, tag: &str) -> PathBuf {
    let name = socket.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "vscid".into());
    socket.with_file_name(format!("{name}.{tag}.json"))
}

/// Write (atomically: a reader never sees half a file).
pub fn publish(socket: &Path, tag: &str, e: &Entry) {
    let p = path_for(socket, tag);
    let tmp = p.with_extension("json.tmp");
    let r = serde_json::to_vec_pretty(e)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&tmp, b))
        .and_then(|_| std::fs::rename(&tmp, &p));
    if let Err(err) = r {
        log::warn!("cannot write {}: {err}", p.display());
    }
}

pub fn withdraw(socket: &Path, tag: &str) {
    let _ = std::fs::remove_file(path_for(socket, tag));
}

/// Every live entry beside `socket`.
pub fn read_all(socket: &Path) -> Vec<Entry> {
    let (Some(dir), Some(name)) = (socket.parent(), socket.file_name()) else { return Vec::new() };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(rd) = std::fs::read_dir(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for f in rd.flatten() {
        let n = f.file_name().to_string_lossy().into_owned();
        if !(n.starts_with(&prefix) && n.ends_with(".json") && (n.contains(".device-") || n.contains(".vm-"))) {
            continue;
        }
        let Some(e) = std::fs::read(f.path()).ok().and_then(|b| serde_json::from_slice::<Entry>(&b).ok()) else {
            continue;
        };
        if Path::new(&format!("/proc/{}", e.pid())).exists() {
            v.push(e);
        } else {
            let _ = std::fs::remove_file(f.path());
        }
    }
    v.sort_by_key(|e| serde_json::to_string(e).unwrap_or_default());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_read_withdraw() {
        let dir = std::env::temp_dir().join(format!("vsci-status-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("node.sock");
        let e = Entry::Vm {
            pid: std::process::id(),
            name: "a".into(),
            device_node: 1,
            func: 2,
            mac: "m".into(),
            mode: "ZeroCopy".into(),
        };
        publish(&sock, "vm-a", &e);
        // A dead process's file is ignored and cleaned up.
        publish(
            &sock,
            "vm-dead",
            &Entry::Vm {
                pid: u32::MAX - 1,
                name: "d".into(),
                device_node: 1,
                func: 3,
                mac: "m".into(),
                mode: "Bounce".into(),
            },
        );
        assert_eq!(read_all(&sock), vec![e]);
        assert!(!dir.join("node.sock.vm-dead.json").exists());
        withdraw(&sock, "vm-a");
        assert!(read_all(&sock).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
