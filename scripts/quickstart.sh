#!/usr/bin/env bash
# The README's first command: install dependencies, build everything,
# install libsisci and the headers (so `pkg-config sisci` works), and run
# the demo: a node on embedded defaults plus two processes moving data and
# interrupts through it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
make
SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO make install PREFIX="${PREFIX:-/usr/local}" >/dev/null
echo "vsci: installed to ${PREFIX:-/usr/local} (pkg-config name: sisci)"
build/bin/vsci demo
