//! The soak run (`scripts/soak.sh`, `vsci-soak`) for a short while: two
//! nodes on loopback, clients doing random work against both and killed
//! with SIGKILL at random. The nodes must survive, no client may crash or
//! hang, and the nodes must end with the descriptors and threads they
//! started with and no client objects left.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn short_soak_leaves_the_nodes_as_they_were() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vsci-soak"));
    cmd.args(["--minutes", "0.4", "--clients", "4", "--kill-every-ms", "300", "--max-life-s", "5"])
        .arg("--build")
        .arg(build_dir());
    let out = run("vsci-soak", &mut cmd, Duration::from_secs(240));
    eprintln!("{}", out.stdout);
    out.assert_success()
        .assert_contains("soak: node 1 at end")
        .assert_contains("soak: node 2 at end")
        .assert_contains("soak: OK");
    let started = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("soak: ")?.split(" clients started").next()?.parse::<u64>().ok())
        .next_back()
        .unwrap_or(0);
    assert!(started >= 16, "only {started} clients were started in the soak run:\n{}", out.describe());
}
