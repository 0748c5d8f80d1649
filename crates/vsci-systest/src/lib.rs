//! System tests live in tests/; `src/bin/vsci-soak.rs` is the soak run
//! (`scripts/soak.sh`). This crate has no library code.
