#![no_main]
//! See vsci_fuzz::nbd_session (the replay test runs the same function on the corpus).
libfuzzer_sys::fuzz_target!(|data: &[u8]| vsci_fuzz::nbd_session(data));
