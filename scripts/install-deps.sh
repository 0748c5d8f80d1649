#!/usr/bin/env bash
# Install what vsci needs to build and test on Debian 12. Idempotent: only
# missing packages are installed. Uses sudo when not root.
set -euo pipefail

PKGS=(build-essential pkg-config make gcc libc6-dev curl ca-certificates iproute2 procps
      # the tests build a SISCI program through find_package(SISCI) and as C++
      cmake g++
      # remote nodes: the RMA engine; benchmark peers (ucx-utils: ucx_perftest)
      libfabric-dev libfabric-bin sockperf iperf3 ucx-utils
      # vsci bench --report: the TrueType font its PNG plots are labelled with
      fonts-dejavu-core
      # vsci vm: QEMU 7.2, busybox for the guest image; dpkg-deb, tar and
      # apt-get download fetch and unpack the pinned guest kernel (guest/kernel-version)
      qemu-system-x86 busybox-static dpkg tar apt
      # lent memory: vsci's block device is an NBD export; the tests read
      # and write it with QEMU's NBD client (qemu-io, qemu-img) and libnbd's
      # tools, and the benchmarks compare it with nbdkit / nbd-server under fio
      qemu-utils libnbd-bin nbdkit nbd-server fio
      # the kernel's NBD client (nbd-client), run in a guest whose kernel has nbd
      nbd-client
      # make deb: man pages from --help (dpkg-dev, for dpkg-shlibdeps and
      # dpkg-gencontrol, comes with build-essential); the packages test runs
      # lintian on them
      help2man dpkg-dev lintian
      # the Python binding (python/): cffi over libsisci, numpy for zero-copy
      # arrays, pytest for its tests, venv + pip for the `pip install ./python` test
      python3 python3-cffi python3-numpy python3-pytest python3-venv python3-pip)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "vsci: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Rust: use the toolchain on PATH (or ~/.cargo/bin) if it is recent enough,
# otherwise install the stable toolchain with rustup.
export PATH="$HOME/.cargo/bin:$PATH"
need_rust=1
if command -v cargo >/dev/null 2>&1; then
    minor=$(rustc --version | sed -E 's/rustc 1\.([0-9]+).*/\1/')
    if [ "${minor:-0}" -ge 87 ]; then need_rust=0; fi
fi
if [ $need_rust -eq 1 ]; then
    echo "vsci: installing the Rust stable toolchain with rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component clippy,rustfmt
fi
# The test command lints with clippy (make lint).
if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
    rustup component add clippy rustfmt
fi
