//! `vsci bench`: run the benchmark programs against a private node.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::node::TempNode;

pub fn run(quick: bool, json: Option<PathBuf>, bench_dir: Option<PathBuf>) -> Result<()> {
    let dir = bench_dir.unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap_or_default();
        exe.parent().and_then(|p| p.parent()).map(|p| p.join("bench")).unwrap_or_else(|| PathBuf::from("build/bench"))
    });
    let prog = dir.join("sisci_bench");
    if !prog.exists() {
        bail!("{} not found; build it with `make`", prog.display());
    }
    let node = TempNode::start(1)?;
    let mut cmd = Command::new(&prog);
    if quick {
        cmd.arg("-quick");
    }
    if let Some(j) = &json {
        cmd.arg("-json").arg(j);
    }
    let status = cmd.env(vsci_proto::SOCKET_ENV, node.socket()).status().with_context(|| format!("running {}", prog.display()))?;
    if !status.success() {
        bail!("benchmark failed: {status}");
    }
    Ok(())
}
