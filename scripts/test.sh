#!/usr/bin/env bash
# The README's second command: install dependencies, build, and run the
# whole test suite (Rust unit tests, then system tests that start real
# vscid daemons and C SISCI programs in separate processes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
make
make test
