//! Client side of vsci: everything `libsisci` does, as a safe Rust API.
//!
//! A [`Client`] is one control connection to the node's `vscid` (one SISCI
//! descriptor). Objects it creates hold the memfds and eventfds the daemon
//! handed out; data moves through `mmap`ed memory and interrupt triggers
//! through a shared page, without the daemon.

mod conn;
mod dma;
pub mod guest;
mod interrupt;
mod loan;
mod map;
mod remote;
mod segment;
mod wait;
pub use interrupt::DataWait;

pub use conn::{Client, EventQueue, SegEvent};
pub use dma::{
    Completion, DmaChannel, DmaEntry, DmaLocal, DmaQueue, QueueState, Transfer, DMA_ALIGN, DMA_CHANNELS, MAX_VECLEN,
};
pub use interrupt::{LocalInterrupt, RemoteInterrupt};
pub use loan::Loan;
pub use map::{Map, MapFlags, MapTarget};
pub use remote::group::GROUP_ALL;
pub use segment::{LocalSegment, PostedDma, RemoteSegment};
pub use vsci_proto::{IntrKind, SciError, SegmentEvent, WaitMode};
/// May a copy to `addr..addr + len` reach another node's segment through
/// a map (a trapped range)? False only when it certainly cannot.
pub use vsci_trap::trap::may_be_trapped as may_reach_remote_map;

/// Make the start of a copy of `n` bytes from `src` (not overlapping) to
/// `dst` in a map of another node's segment as the map's store fault would
/// make it as one string store, but without the fault; returns how many
/// bytes from the start were made (0: none; the caller copies the rest).
/// For libsisci's `memcpy`; never changes `errno`.
pub fn copy_into_remote_map(dst: usize, src: usize, n: usize) -> usize {
    vsci_trap::trap::copy_in(dst, src, n)
}
pub use wait::WaitPolicy;

/// Make every store to another node's segment made so far visible at its
/// owner (what SCIFlush, SCIStoreBarrier and SCICheckSequence promise).
/// The ordering `SCIFlush` and `SCIStoreBarrier` give on one host: every
/// store before it (non-temporal ones included) is visible before any store
/// after it. On x86-64 ordinary stores are already ordered among themselves
/// (TSO); only streaming stores and write-combining memory are not, and
/// `sfence` orders those at a quarter of the cost of `mfence` (measured
/// 4× faster at 4–64 B copies). It does not order stores before later
/// loads; nor does SCIFlush on Dolphin hardware.
#[inline]
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no operands and no memory-safety effects.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

#[inline]
pub fn flush_remote_stores() -> Result<()> {
    if !remote::any_remote_maps() {
        return Ok(());
    }
    remote::flush_all()
}

/// Result type of every client call.
pub type Result<T> = std::result::Result<T, SciError>;

/// Timeout in milliseconds, SISCI-style: `u32::MAX` waits forever.
pub const INFINITE: u32 = u32::MAX;
