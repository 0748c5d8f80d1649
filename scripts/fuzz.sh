#!/usr/bin/env bash
# Run every cargo-fuzz target in fuzz/ for N executions each (default
# 10,000,000), one at a time, and print executions, time, coverage and the
# result per target. Needs a nightly toolchain and cargo-fuzz (installed
# here if missing). A crash leaves its input in fuzz/artifacts/<target>/;
# fix the bug, then keep the input in fuzz/regressions/<target>/ so the
# test suite replays it (crates/vsci-fuzz/tests/replay.rs).
#
#   scripts/fuzz.sh [EXECUTIONS] [TARGET...]
#
# Environment: FUZZ_JOBS (cargo build jobs, default 1), FUZZ_SANITIZER
# (none, the default, or address), FUZZ_MAX_LEN (default 8192 bytes).
# Without a sanitizer the targets run two to three times faster; the code
# is safe Rust except the guest ring's copies, so the runs recorded in
# docs/security.md use AddressSanitizer for guest_control only (it is fast
# anyway). Overflow checks and debug assertions are on either way.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH" RUST_BACKTRACE=0
runs="${1:-10000000}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(client_request node_link_frame guest_control cluster_file nbd_session device_message)

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --version 0.13.2 --locked
san="${FUZZ_SANITIZER:-none}"
# One target directory per sanitizer: building for one does not undo the
# other's build.
tdir="target/san-$san"
CARGO_BUILD_JOBS="${FUZZ_JOBS:-1}" cargo +nightly fuzz build -O -s "$san" --target-dir "$tdir"

status=0
mkdir -p target/fuzz-logs
printf '%-16s %12s %8s %10s %6s  %s\n' target executions seconds exec/s cov result
for t in "${targets[@]}"; do
    log="target/fuzz-logs/$t.log"
    # A scratch copy of the corpus: the run adds inputs there, not to the
    # committed seeds (minimize into fuzz/corpus with `cargo fuzz cmin`).
    work="target/fuzz-corpus/$t"
    mkdir -p "$work"
    cp -n corpus/"$t"/* "$work"/ 2>/dev/null || true
    # With -jobs, libFuzzer runs the fuzzing in a child that logs to
    # fuzz-0.log in the current directory: that log has the figures.
    rm -f fuzz-0.log
    start=$(date +%s.%N)
    if cargo +nightly fuzz run -O -s "$san" --target-dir "$tdir" "$t" "$work" -- -runs="$runs" -jobs=1 \
        -max_len="${FUZZ_MAX_LEN:-8192}" -print_final_stats=1 >"$log.run" 2>&1 && ! grep -q 'ERROR: libFuzzer\|panicked' fuzz-0.log; then
        result=ok
    else
        result="CRASH (see $log, fuzz/artifacts/$t)"
        status=1
    fi
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    mv fuzz-0.log "$log"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    printf '%-16s %12s %8.0f %10s %6s  %s\n' "$t" "${execs:-?}" "$secs" "${rate:-?}" "${cov:-?}" "$result"
done
exit $status
