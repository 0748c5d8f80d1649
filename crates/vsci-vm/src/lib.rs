//! QEMU guests for vsci.
//!
//! - [`image`]: the guest image (Debian kernel, busybox, the vsci_guest
//!   driver, the C runtime), built once and cached;
//! - [`run`]: boot it under QEMU, run one command, relay output and status
//!   (`vsci vm run`);
//! - [`ivshmem`]: a server for QEMU's ivshmem-doorbell protocol, for vscid
//!   to embed;
//! - [`qmp`]: hot-plugging memfds into a running guest as ivshmem-plain;
//! - [`agent`]: a guest's host side, with [`proxy`] (other nodes'
//!   segments and interrupts reached for the guest over `vsci_rma`) and
//!   [`dma`] (the node's DMA engine for guest programs);
//! - [`cpio`]: the initramfs format;
//! - [`fuzz_entry`]: what the `guest_control` fuzz target runs.

pub mod agent;
pub mod cpio;
pub mod dma;
pub mod fuzz_entry;
pub mod image;
pub mod ivshmem;
pub mod proxy;
pub mod qmp;
pub mod run;

pub use run::{run, Accel, RunConfig};
