//! Starting a private node for `vsci demo` and `vsci bench`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A `vscid` started by us, stopped (SIGTERM) when dropped.
pub struct TempNode {
    child: Child,
    pub socket: PathBuf,
    dir: PathBuf,
}

/// Where sibling programs live: the directory of this executable.
pub fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

impl TempNode {
    pub fn start(node_id: u32) -> Result<TempNode> {
        let dir = std::env::temp_dir().join(format!("vsci-{}-{}", std::process::id(), node_id));
        std::fs::create_dir_all(&dir)?;
        let socket = dir.join("vscid.sock");
        let child = Command::new(sibling("vscid"))
            .args(["--node-id", &node_id.to_string(), "--socket"])
            .arg(&socket)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .spawn()
            .context("starting vscid (is it built? run `make`)")?;
        let node = TempNode { child, socket, dir };
        node.wait_ready()?;
        Ok(node)
    }

    fn wait_ready(&self) -> Result<()> {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if vsci_proto::wire::connect(&self.socket).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("vscid did not come up on {}", self.socket.display())
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for TempNode {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
