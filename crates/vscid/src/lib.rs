//! The node daemon's code as a library, so that the fuzz targets
//! (`fuzz/`) and their corpus replay (`crates/vsci-fuzz`) run the same
//! parsing and validation `vscid` runs on bytes from clients, other nodes
//! and the cluster file, not a copy of it. `main.rs` is the binary.

pub mod access;
pub mod client;
pub mod cluster;
pub mod config;
pub mod engine;
pub mod fuzz_entry;
pub mod link;
pub mod loans;
pub mod memory;
pub mod metrics;
pub mod node;
pub mod peers;
pub mod recover;
pub mod registry;
