#!/usr/bin/env bash
# scripts/soak.sh MINUTES [vsci-soak options]: two nodes on loopback, many
# clients doing random SISCI work and killed at random for MINUTES; prints
# each node's resident memory, descriptors and threads at start and end
# (docs/operations.md). Builds first; the work is crates/vsci-systest's
# vsci-soak.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/soak.sh MINUTES [--clients N] [--kill-every-ms MS] [--seed S]" >&2; exit 2; }
export PATH="$HOME/.cargo/bin:$PATH"
make >/dev/null
cargo build --release --quiet -p vsci-systest --bin vsci-soak
exec target/release/vsci-soak --build "$PWD/build" --minutes "$@"
