#![no_main]
//! See vsci_fuzz::node_link_frame (the replay test runs the same function on the corpus).
libfuzzer_sys::fuzz_target!(|data: &[u8]| vsci_fuzz::node_link_frame(data));
