#![no_main]
//! See vsci_devshare::fuzz_entry::device_message (the replay test runs the same function on the corpus).
libfuzzer_sys::fuzz_target!(|data: &[u8]| vsci_fuzz::device_message(data));
