//! Sharing the functions of one host's device with VMs on other nodes, in
//! software on vsci's fabric (seed 004, Ladon). See docs/devices.md.
//!
//! - [`nic`]: the device host: a multi-queue NIC model whose wire is a
//!   TAP interface, its software IOMMU and interrupt remapping, and the
//!   platform manager that assigns functions;
//! - [`hyp`]: a compute host's side of one process VM: its memory, its
//!   function, the relay of register writes and interrupts;
//! - [`driver`]: the process VM's user-space driver, bridging its
//!   function to a TAP interface in its own network namespace;
//! - [`requester`]: signed requests to the manager (also for `vsci device
//!   list` and `revoke`);
//! - [`regs`], [`iommu`], [`msg`]: the register and descriptor layout, the
//!   translation and remapping tables, the messages;
//! - [`gather`]: DMA of neighbouring buffers as few large operations.

pub mod driver;
pub mod fuzz_entry;
pub mod gather;
pub mod hyp;
pub mod iommu;
pub mod mem;
pub mod msg;
pub mod nic;
pub mod regs;
pub mod requester;
pub mod status;
pub mod tap;
pub mod vhost;
