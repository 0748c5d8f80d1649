//! Small safe API over libfabric for vsci's remote data path.
//!
//! One [`Fabric`] is one reliable-datagram (`FI_EP_RDM`) endpoint with its
//! own domain, address vector and completion queue. Owners register memory
//! ([`Fabric::register`]) and hand the resulting [`RemoteRegion`] to peers;
//! initiators insert the owner's address ([`Fabric::insert_peer`]) and use
//! blocking [`Fabric::write`] / [`Fabric::read`] / [`Fabric::write_many`].
//! Small messages go through [`Fabric::send`] and [`Fabric::recv_timeout`].
//!
//! Progress: the software providers (`tcp;ofi_rxm`, `sockets`, ...) move data
//! only while someone polls the completion queue, on the initiator *and* on
//! the target. Blocking calls poll for themselves; an owner that only serves
//! incoming RMA keeps a [`ProgressThread`] alive ([`Fabric::spawn_progress_thread`]).
//!
//! All handles are `Send + Sync`: the domain is opened `FI_THREAD_SAFE`, so
//! several threads may post and poll at once, and any thread's poll completes
//! any thread's operation.
//!
//! README.md records what libfabric 1.17 on Debian 12 was measured to do
//! (delivery, progress, refused accesses, latency and bandwidth).
//!
//! Layout, as libfabric's own providers lay theirs out: `endpoint.rs`
//! (opening, the shared state, peers), `mr.rs` (memory registration),
//! `rma.rs` (writes, reads and their completion slots), `msg.rs`
//! (messages), `progress.rs` (the completion queue and progress threads),
//! `process.rs` (what the engine needs of its process), `ffi.rs` (the C
//! shim). This file keeps the public types and the `Fabric` handle.

mod endpoint;
mod ffi;
mod mr;
mod msg;
mod process;
mod progress;
mod rma;

use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use endpoint::*;
use msg::*;
use rma::*;

pub use endpoint::Peer;
pub use mr::MemRegion;
pub use process::{boost_current_thread, prepare_rma_target_process, restore_default_signals};
pub use progress::{ProgressMode, ProgressThread, INITIATOR_LINGER, INITIATOR_POLL};
pub use rma::PendingWrite;

/// Largest message [`Fabric::send`] accepts; receive buffers have this size.
pub const MAX_MSG: usize = 4096;
/// Receive buffers kept posted. Senders beyond this are buffered by the
/// provider (rxm keeps unexpected messages), not dropped.
const RECV_BUFFERS: usize = 64;
/// The default provider: TCP sockets underneath, RDM semantics and RMA
/// emulation from the rxm utility layer.
pub const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A libfabric call failed when it was made.
    #[error("{call}: {msg} (libfabric error {code})")]
    Call { call: &'static str, code: i32, msg: String },
    /// An operation was accepted but completed with an error
    /// (bad key, out-of-range at the target, connection lost, ...).
    #[error("operation failed: {msg} (libfabric error {code}, provider error {prov_errno})")]
    Completion { code: i32, prov_errno: i32, msg: String },
    #[error("access of {len} bytes at offset {offset} is outside the remote region of {region_len} bytes")]
    OutOfRange { offset: u64, len: u64, region_len: u64 },
    #[error("message of {0} bytes exceeds the limit of {MAX_MSG} bytes")]
    MessageTooLarge(usize),
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The provider kept refusing to accept the operation (FI_EAGAIN): on
    /// tcp;ofi_rxm this is what a peer that is gone or never existed looks
    /// like. Nothing was posted.
    #[error("{call}: peer unreachable (provider busy for {}s)", .waited.as_secs())]
    Unreachable { call: &'static str, waited: Duration },
    /// The peer was marked down ([`Fabric::set_peer_down`]) before the
    /// operation was posted. Nothing was posted.
    #[error("peer is down")]
    PeerDown,
    /// The peer was marked down while the operation was in flight and we
    /// stopped waiting for it. The provider may still read or write the
    /// buffers given to that call: the caller must keep them alive for the
    /// life of the process (leak them).
    #[error("peer went down with the operation in flight")]
    Abandoned,
}

impl Error {
    /// Did the operation fail because its connection to the peer broke or
    /// is being made again, rather than because the peer refused it? Such an
    /// operation may be posted again (RMA is idempotent) once rxm has
    /// reconnected. A refused access is ECANCELED with the target's reason
    /// (ENOENT for a key it does not know); one cancelled because the
    /// connection went down carries ENOTCONN or EPIPE.
    pub fn connection_lost(&self) -> bool {
        const LOST: [i32; 4] = [libc::ENOTCONN, libc::ECONNRESET, libc::EPIPE, libc::ECONNABORTED];
        match *self {
            Error::Call { code, .. } => LOST.contains(&code),
            Error::Completion { code, prov_errno, .. } => {
                LOST.contains(&code) || (code == libc::ECANCELED && LOST.contains(&prov_errno))
            }
            _ => false,
        }
    }
}

fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string
    // for any input value.
    unsafe { CStr::from_ptr(ffi::vf_strerror(code)) }.to_string_lossy().into_owned()
}

fn check(call: &'static str, ret: isize) -> Result<()> {
    if ret >= 0 {
        return Ok(());
    }
    let code = (-ret) as i32;
    Err(Error::Call { call, code, msg: strerror(code) })
}

/// How a write is made *delivered* (visible in the target's memory) before
/// the blocking call returns. See [`Fabric::delivery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Each write carries `FI_DELIVERY_COMPLETE`: its completion is reported
    /// only after the target placed the data.
    DeliveryComplete,
    /// Writes complete when sent; a final small read of the last written
    /// byte, ordered after the writes by `FI_ORDER_RAW`, proves they landed.
    /// Needs remote read access on the region.
    ReadAfterWrite,
}

/// Opaque identity of a peer in this fabric's address vector; what
/// [`Message::from`] reports when the provider knows the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerId(u64);

/// Everything a peer needs to access a registered region: sent by the owner
/// over vsci's authenticated control link, used by the initiator with an
/// offset. `base` already accounts for the provider's addressing mode
/// (virtual address with `FI_MR_VIRT_ADDR`, 0 otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    pub base: u64,
    pub key: u64,
    pub len: u64,
}

impl RemoteRegion {
    fn addr(&self, offset: u64, len: usize) -> Result<u64> {
        let len = len as u64;
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.base.wrapping_add(offset)),
            _ => Err(Error::OutOfRange { offset, len, region_len: self.len }),
        }
    }
}

/// Local memory an RMA operation sends from (a write) or fills (a read),
/// named by address, as the provider reaches it anyway. Made from a slice,
/// or, for memory other parties may write while the operation runs (a
/// segment shared with other processes, a guest's window or RAM), over
/// which this process must not make a Rust reference, from a pointer and a
/// length ([`LocalMem::from_raw`]): the provider only copies bytes in or
/// out of it, so what another party stores meanwhile is only bytes.
#[derive(Debug, Clone, Copy)]
pub struct LocalMem<'a> {
    ptr: *mut u8,
    len: usize,
    /// Reads may fill it (it was not made from a shared slice).
    writable: bool,
    _borrow: std::marker::PhantomData<&'a mut [u8]>,
}

impl<'a> LocalMem<'a> {
    /// Bytes a write sends (a read into it is refused).
    pub fn from_slice(s: &'a [u8]) -> LocalMem<'a> {
        LocalMem { ptr: s.as_ptr() as *mut u8, len: s.len(), writable: false, _borrow: std::marker::PhantomData }
    }

    /// A buffer a read fills (or a write sends).
    pub fn from_mut(s: &'a mut [u8]) -> LocalMem<'a> {
        LocalMem { ptr: s.as_mut_ptr(), len: s.len(), writable: true, _borrow: std::marker::PhantomData }
    }

    /// `len` bytes at `ptr`, which a write sends or a read fills.
    ///
    /// # Safety
    /// The bytes are mapped memory and stay mapped for `'a`, and for good
    /// once an operation on them returned [`Error::Abandoned`] (the
    /// provider may still read or write them later). While an operation
    /// uses them, this process holds no Rust reference to them; other
    /// processes or guests may store to them (the provider copies whatever
    /// it finds, and a read's bytes may be overwritten).
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> LocalMem<'a> {
        LocalMem { ptr, len, writable: true, _borrow: std::marker::PhantomData }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// `len` bytes of this memory from byte `off`; `None` past its end.
    pub fn sub(&self, off: usize, len: usize) -> Option<LocalMem<'a>> {
        let end = off.checked_add(len)?;
        // wrapping_add: in bounds (checked), so it is the same address as add.
        (end <= self.len).then(|| LocalMem { ptr: self.ptr.wrapping_add(off), len, ..*self })
    }
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub data: Vec<u8>,
    /// The sender, if the provider reports sources (`FI_SOURCE`; both
    /// `tcp;ofi_rxm` and `sockets` of libfabric 1.17 do) and the sender is in
    /// our address vector; `None` for senders we have not inserted. This is
    /// the provider's view of the connection, not an authenticated identity:
    /// protocols that need to know who spoke rely on vsci's control links or
    /// carry the sender's identity in the payload.
    pub from: Option<PeerId>,
}

/// Which libfabric attributes were granted; for logs and benchmarks.
#[derive(Debug, Clone)]
pub struct Info {
    pub provider: String,
    pub mr_mode: u64,
    pub mr_key_size: u64,
    pub msg_order: u64,
    /// Runs per write operation in [`Fabric::write_many`].
    pub iov_limit: usize,
    /// Largest write whose data the target places before the data of a
    /// later write from us (`FI_ORDER_WAW` and `max_order_waw_size`); 0 if
    /// the provider promises no such order.
    pub ordered_writes: u64,
    pub auto_progress: bool,
    pub source: bool,
    pub cq_wait: bool,
    pub delivery: Delivery,
}

impl Info {
    /// Are writes posted one after the other placed in that order, and a
    /// message sent after them delivered only after they are placed? Then a
    /// posted write followed by a message (an interrupt) needs no wait.
    pub fn messages_follow_writes(&self) -> bool {
        self.ordered_writes == u64::MAX && self.msg_order & ffi::FI_ORDER_SAW != 0
    }

    /// Is a read served only after every write posted before it to the same
    /// peer is placed (`FI_ORDER_RAW`)? Then writes that completed when sent
    /// ([`Fabric::write_post_runs`]) are proven placed by the completion of a
    /// later read, as long as no operation failed in between
    /// ([`Fabric::failures`]).
    pub fn reads_follow_writes(&self) -> bool {
        self.msg_order & (ffi::FI_ORDER_RAW | ffi::FI_ORDER_RMA_RAW) != 0
    }

    /// Are the runs of one write operation placed in the order given, each
    /// run's bytes before the next run's? libfabric promises nothing within
    /// one operation, so this holds only where no operation has two runs
    /// (`iov_limit` 1: every run is an operation of its own, placed in
    /// order with WAW) or the provider is known to: tcp (under ofi_rxm too)
    /// receives a write's data from the socket into its target ranges one
    /// after the other, in the order of the operation's remote ranges
    /// (straight from the socket, or copied out of its prefetch buffer).
    pub fn places_runs_in_order(&self) -> bool {
        self.ordered_writes == u64::MAX && (self.iov_limit == 1 || self.provider.split(';').next() == Some("tcp"))
    }
}

/// A libfabric endpoint. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct Fabric {
    inner: Arc<Inner>,
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fabric").field("info", &self.inner.info).finish()
    }
}

/// What [`Fabric::stats`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Writes, reads and sends posted and not yet completed (the work
    /// queue's depth; an initiator blocked on a slow peer shows here).
    pub ops_in_flight: usize,
    /// Messages received and not yet taken by [`Fabric::recv_timeout`]
    /// (the receive queue's depth; a consumer falling behind shows here).
    pub received_queued: usize,
    /// Receive buffers whose re-post the provider refused for now.
    pub receives_to_repost: usize,
    /// Messages received since the endpoint opened.
    pub received: u64,
    /// Completions handled (operations, receives and errors) since then.
    pub completions: u64,
}

/// Options for [`Fabric::open_with`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub provider: String,
    pub bind: Option<String>,
    /// Force a delivery method (benchmarks and tests); `None` picks one.
    pub delivery: Option<Delivery>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { provider: DEFAULT_PROVIDER.into(), bind: None, delivery: None }
    }
}
