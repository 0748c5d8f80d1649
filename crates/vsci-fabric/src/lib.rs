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

mod ffi;

use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    Call {
        call: &'static str,
        code: i32,
        msg: String,
    },
    /// An operation was accepted but completed with an error
    /// (bad key, out-of-range at the target, connection lost, ...).
    #[error("operation failed: {msg} (libfabric error {code}, provider error {prov_errno})")]
    Completion {
        code: i32,
        prov_errno: i32,
        msg: String,
    },
    #[error("access of {len} bytes at offset {offset} is outside the remote region of {region_len} bytes")]
    OutOfRange {
        offset: u64,
        len: u64,
        region_len: u64,
    },
    #[error("message of {0} bytes exceeds the limit of {MAX_MSG} bytes")]
    MessageTooLarge(usize),
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The provider kept refusing to accept the operation (FI_EAGAIN): on
    /// tcp;ofi_rxm this is what a peer that is gone or never existed looks
    /// like. Nothing was posted.
    #[error("{call}: peer unreachable (provider busy for {}s)", .waited.as_secs())]
    Unreachable {
        call: &'static str,
        waited: Duration,
    },
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

fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string
    // for any input value.
    unsafe { CStr::from_ptr(ffi::vf_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

fn check(call: &'static str, ret: isize) -> Result<()> {
    if ret >= 0 {
        return Ok(());
    }
    let code = (-ret) as i32;
    Err(Error::Call {
        call,
        code,
        msg: strerror(code),
    })
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
            _ => Err(Error::OutOfRange {
                offset,
                len,
                region_len: self.len,
            }),
        }
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
}

// ---------------------------------------------------------------------------

/// When a posted write completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Complete {
    /// Once its bytes are in the target's memory ([`Delivery`]).
    Placed,
    /// Once sent (the local buffer is free again).
    Sent,
}

/// Completion bookkeeping for one blocking call: how many of its operations
/// are still in flight and the first error. Each posted operation owns one
/// strong count (its context pointer comes from `Arc::into_raw`), so the slot
/// outlives the call even if a completion is dispatched by another thread.
struct OpSlot {
    pending: AtomicUsize,
    error: Mutex<Option<Error>>,
}

impl OpSlot {
    fn new() -> Arc<OpSlot> {
        Arc::new(OpSlot {
            pending: AtomicUsize::new(0),
            error: Mutex::new(None),
        })
    }

    fn fail(&self, e: Error) {
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(e);
        }
    }

    fn take_error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// A write posted by [`Fabric::write_start`] and not yet waited for.
pub struct PendingWrite {
    posted: Option<Posted>,
    data: Option<Vec<u8>>,
    fi_addr: u64,
}

// SAFETY: the registrations (LocalMr) are libfabric objects of an endpoint
// opened FI_THREAD_SAFE, which may be closed from any thread; the rest is
// owned data and an Arc'd slot of atomics.
unsafe impl Send for PendingWrite {}

impl Drop for PendingWrite {
    /// Dropped without [`Fabric::write_finish`] while still in flight: the
    /// provider may still read the buffer and use the registrations, so
    /// both are kept for good.
    fn drop(&mut self) {
        if let Some(p) = self.posted.take() {
            if p.slot.pending.load(Ordering::Acquire) != 0 {
                std::mem::forget(p);
                std::mem::forget(self.data.take());
            }
        }
    }
}

impl PendingWrite {
    /// The bytes being written.
    pub fn data(&self) -> &[u8] {
        self.data.as_deref().unwrap_or(&[])
    }
}

/// Writes posted by one call and not yet waited for: the slot counting them,
/// the local registrations and the probe read's buffer they may still use.
struct Posted {
    slot: Arc<OpSlot>,
    locals: Vec<LocalMr>,
    /// On the heap, so moving `Posted` does not move what the provider
    /// writes into.
    probe: Box<[u8; 1]>,
    /// Whether posting went through (what was posted is waited for anyway).
    result: Result<()>,
    fi_addr: u64,
}

/// Receive contexts are tagged with the low bit so they cannot be confused
/// with `OpSlot` pointers, which are at least 8-byte aligned.
fn recv_context(index: usize) -> *mut c_void {
    ((index << 1) | 1) as *mut c_void
}

struct RecvPool {
    buf: *mut u8,
    mr: *mut ffi::FidMr,
    desc: *mut c_void,
}

struct Inner {
    ctx: *mut ffi::VfCtx,
    info: Info,
    address: Vec<u8>,
    pool: RecvPool,
    rx: Mutex<VecDeque<Message>>,
    rx_cv: Condvar,
    /// Receive buffers whose re-post hit FI_EAGAIN; retried on the next poll.
    repost: Mutex<Vec<usize>>,
    /// Progress threads running; receivers then sleep on `rx_cv` instead of
    /// polling themselves.
    progress_threads: AtomicUsize,
    /// Peers (fi_addr) the caller declared down: a silently cut link never
    /// completes operations on its own (TCP retransmits for many minutes),
    /// so waits on them are abandoned instead.
    down: Mutex<std::collections::HashSet<u64>>,
    /// Peers (fi_addr) to which a post that finds the queue full is retried
    /// for as long as they are not declared down ([`Fabric::set_patient`]).
    patient: Mutex<std::collections::HashSet<u64>>,
    /// Operations posted and not yet completed, over every caller: the
    /// depth of this endpoint's work queue (see [`Fabric::stats`]).
    in_flight: AtomicUsize,
    /// Messages received and completions handled since the endpoint opened.
    received: AtomicU64,
    completions: AtomicU64,
    /// A thread is reading the completion queue (see [`Inner::progress`]).
    polling: AtomicBool,
}

// SAFETY: the raw pointers are libfabric objects opened with FI_THREAD_SAFE
// (every call on them may come from any thread concurrently) and the receive
// pool, which only the provider writes and only the completion path reads.
unsafe impl Send for Inner {}
// SAFETY: as above; all Rust-side shared state is behind atomics or mutexes.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: all MemRegions and Peers hold an Arc<Inner>, so none is left;
        // the endpoint is closed before the pool MR and the pool is freed only
        // after everything that could write into it is closed.
        unsafe {
            ffi::vf_close(self.ctx, self.pool.mr);
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.pool.buf,
                RECV_BUFFERS * MAX_MSG,
            )));
        }
    }
}

/// A libfabric endpoint. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct Fabric {
    inner: Arc<Inner>,
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fabric")
            .field("info", &self.inner.info)
            .finish()
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
        OpenOptions {
            provider: DEFAULT_PROVIDER.into(),
            bind: None,
            delivery: None,
        }
    }
}

const BASE_CAPS: u64 = ffi::FI_MSG
    | ffi::FI_RMA
    | ffi::FI_READ
    | ffi::FI_WRITE
    | ffi::FI_REMOTE_READ
    | ffi::FI_REMOTE_WRITE
    | ffi::FI_SEND
    | ffi::FI_RECV;

/// The registration modes this crate knows how to honour. `FI_MR_PROV_KEY`
/// is offered only as a fallback: provider-chosen keys are often sequential
/// (libfabric's util MR map counts up), and keys are meant to be unguessable.
const MR_MODES: u64 =
    ffi::FI_MR_LOCAL | ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_ENDPOINT;

impl Fabric {
    /// Opens an RDM endpoint on `provider` (e.g. `"tcp;ofi_rxm"`, `"sockets"`),
    /// bound to the local IP address `bind` if given; the port is chosen by
    /// the provider and is part of [`Fabric::address`].
    pub fn open(provider: &str, bind: Option<&str>) -> Result<Fabric> {
        Fabric::open_with(&OpenOptions {
            provider: provider.into(),
            bind: bind.map(Into::into),
            delivery: None,
        })
    }

    pub fn open_with(o: &OpenOptions) -> Result<Fabric> {
        let prov = CString::new(o.provider.as_str())
            .map_err(|_| Error::Invalid("provider name contains NUL"))?;
        let node = match &o.bind {
            Some(b) => Some(
                CString::new(b.as_str())
                    .map_err(|_| Error::Invalid("bind address contains NUL"))?,
            ),
            None => None,
        };
        // Most wanted first; each fallback drops one wish. FI_SOURCE lets
        // receivers learn the sender; RAW ordering is what ReadAfterWrite
        // relies on; WAW ordering lets `write_many_ordered` post its second
        // group without waiting for the first (asked for first, dropped
        // before anything else, since it only saves time).
        let raw = ffi::FI_ORDER_RAW | ffi::FI_ORDER_RMA_RAW;
        let waw = ffi::FI_ORDER_WAW | ffi::FI_ORDER_RMA_WAW;
        let attempts = [
            (BASE_CAPS | ffi::FI_SOURCE, raw, MR_MODES),
            (BASE_CAPS, raw, MR_MODES),
            (BASE_CAPS | ffi::FI_SOURCE, raw, MR_MODES | ffi::FI_MR_PROV_KEY),
            (BASE_CAPS, raw, MR_MODES | ffi::FI_MR_PROV_KEY),
            (BASE_CAPS, 0, MR_MODES | ffi::FI_MR_PROV_KEY),
        ];
        let attempts = attempts
            .iter()
            .flat_map(|&(caps, order, mr)| [(caps, order | waw, mr), (caps, order, mr)]);
        let mut last = 0;
        for (caps, msg_order, mr_mode) in attempts {
            let hints = ffi::VfHints {
                prov_name: prov.as_ptr(),
                node: node.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                caps,
                tx_msg_order: msg_order,
                tx_op_flags: 0,
                mr_mode,
                want_cq_wait: 1,
            };
            // SAFETY: no arguments; a NUL-terminated message the shim
            // keeps for the life of the process, or null.
            let failure = unsafe { ffi::vf_load_failure() };
            if !failure.is_null() {
                // SAFETY: as above.
                let why = unsafe { CStr::from_ptr(failure) }.to_string_lossy().into_owned();
                return Err(Error::Call { call: "dlopen(libfabric.so.1)", code: libc::ENOSYS, msg: format!("the RMA engine cannot be loaded: {why} (install libfabric1)") });
            }
            let mut ctx = std::ptr::null_mut();
            // SAFETY: VfAttrs is plain data, all-zero is a valid value.
            let mut attrs: ffi::VfAttrs = unsafe { std::mem::zeroed() };
            // SAFETY: hints points to valid C strings that outlive the call;
            // ctx and attrs are valid out-pointers.
            let ret = unsafe { ffi::vf_open(&hints, &mut ctx, &mut attrs) };
            if ret == 0 {
                return Fabric::finish_open(ctx, attrs, o);
            }
            last = -ret;
            log::debug!(
                "fi_getinfo/open {}: caps {caps:#x} order {msg_order:#x} mr_mode {mr_mode:#x}: {}",
                o.provider,
                strerror(last)
            );
        }
        Err(Error::Call {
            call: "fi_getinfo",
            code: last,
            msg: format!("{} (provider {:?})", strerror(last), o.provider),
        })
    }

    fn finish_open(ctx: *mut ffi::VfCtx, a: ffi::VfAttrs, o: &OpenOptions) -> Result<Fabric> {
        // SAFETY: the shim NUL-terminates prov_name within its 64 bytes.
        let provider = unsafe { CStr::from_ptr(a.prov_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let has_raw = a.tx_msg_order & (ffi::FI_ORDER_RAW | ffi::FI_ORDER_RMA_RAW) != 0;
        let delivery = o.delivery.unwrap_or(Delivery::DeliveryComplete);
        if delivery == Delivery::ReadAfterWrite && !has_raw {
            // SAFETY: ctx came from a successful vf_open and is not used again.
            unsafe { ffi::vf_close(ctx, std::ptr::null_mut()) };
            return Err(Error::Invalid("provider does not order reads after writes"));
        }
        let info = Info {
            provider,
            mr_mode: a.mr_mode,
            mr_key_size: a.mr_key_size,
            msg_order: a.tx_msg_order,
            iov_limit: (a.iov_limit as usize).clamp(1, ffi::VF_MAX_IOV),
            ordered_writes: if a.tx_msg_order & (ffi::FI_ORDER_WAW | ffi::FI_ORDER_RMA_WAW) != 0 {
                a.max_order_waw_size
            } else {
                0
            },
            auto_progress: a.data_progress == ffi::FI_PROGRESS_AUTO,
            source: a.caps & ffi::FI_SOURCE != 0,
            cq_wait: a.cq_wait != 0,
            delivery,
        };
        log::info!("libfabric endpoint: {info:?}");

        let buf = Box::into_raw(vec![0u8; RECV_BUFFERS * MAX_MSG].into_boxed_slice()) as *mut u8;
        // From here on Inner's Drop owns ctx and the pool, also on error.
        let mut inner = Inner {
            ctx,
            info,
            address: Vec::new(),
            pool: RecvPool {
                buf,
                mr: std::ptr::null_mut(),
                desc: std::ptr::null_mut(),
            },
            rx: Mutex::new(VecDeque::new()),
            rx_cv: Condvar::new(),
            repost: Mutex::new(Vec::new()),
            progress_threads: AtomicUsize::new(0),
            down: Mutex::new(std::collections::HashSet::new()),
            patient: Mutex::new(std::collections::HashSet::new()),
            in_flight: AtomicUsize::new(0),
            received: AtomicU64::new(0),
            completions: AtomicU64::new(0),
            polling: AtomicBool::new(false),
        };
        let mut addr = vec![0u8; 256];
        let mut len = addr.len();
        // SAFETY: addr is writable for len bytes; the shim writes at most len
        // and reports the real length.
        let ret = unsafe { ffi::vf_getname(ctx, addr.as_mut_ptr().cast(), &mut len) };
        check("fi_getname", ret as isize)?;
        addr.truncate(len);
        inner.address = addr;
        if inner.info.mr_mode & ffi::FI_MR_LOCAL != 0 {
            let (mr, _key, desc) = inner.reg_raw(buf, RECV_BUFFERS * MAX_MSG, ffi::FI_RECV)?;
            inner.pool.mr = mr;
            inner.pool.desc = desc;
        }
        for i in 0..RECV_BUFFERS {
            inner.post_recv(i)?;
        }
        Ok(Fabric {
            inner: Arc::new(inner),
        })
    }

    pub fn info(&self) -> &Info {
        &self.inner.info
    }

    /// How writes are made delivered before they return.
    ///
    /// Measured on Debian 12's libfabric 1.17 `tcp;ofi_rxm` (tests/fabric.rs
    /// `write_waits_for_delivery`): a plain write completes about 0.1 ms
    /// after posting even if the target never progresses, and the data is
    /// not in the target's memory. With `FI_DELIVERY_COMPLETE` the
    /// completion waits until the target has progressed and placed the data,
    /// so that is the default. The RAW-ordered read fence works too but is
    /// slower, with millisecond outliers (crate README).
    pub fn delivery(&self) -> Delivery {
        self.inner.info.delivery
    }

    /// Our endpoint address (fi_getname), to be sent to peers.
    pub fn address(&self) -> Vec<u8> {
        self.inner.address.clone()
    }

    /// Adds a peer by the address it sent us. Dropping the [`Peer`] removes it
    /// (fi_av_remove).
    pub fn insert_peer(&self, addr: &[u8]) -> Result<Peer> {
        // Providers read a fixed-size address (sockaddr_in here) from the
        // pointer, so a short buffer from a malformed message must not reach
        // them.
        if addr.len() != self.inner.address.len() {
            return Err(Error::Invalid("peer address has the wrong length"));
        }
        let mut fi_addr = ffi::FI_ADDR_NOTAVAIL;
        // SAFETY: addr is readable for the provider's address size (checked
        // above); fi_addr is a valid out-pointer.
        let ret = unsafe { ffi::vf_av_insert(self.inner.ctx, addr.as_ptr().cast(), &mut fi_addr) };
        if ret != 1 || fi_addr == ffi::FI_ADDR_NOTAVAIL {
            let code = if ret < 0 { -ret } else { libc::EINVAL };
            return Err(Error::Call {
                call: "fi_av_insert",
                code,
                msg: strerror(code),
            });
        }
        Ok(Peer {
            inner: self.inner.clone(),
            fi_addr,
        })
    }

    /// Registers `len` bytes at `ptr` for remote access.
    ///
    /// Keys: unless the provider insists on choosing them (FI_MR_PROV_KEY),
    /// we request a random key, so a key is an unguessable capability. Keys
    /// are only ever disclosed over vsci's authenticated control links.
    ///
    /// # Safety
    /// The memory must stay allocated and mapped until the returned
    /// [`MemRegion`] is dropped. Peers may write it at any time while it is
    /// registered, so the owner must treat it as shared memory (volatile or
    /// atomic accesses, no `&mut` references held across such writes).
    pub unsafe fn register(
        &self,
        ptr: *mut u8,
        len: usize,
        remote_write: bool,
        remote_read: bool,
    ) -> Result<MemRegion> {
        if ptr.is_null() || len == 0 {
            return Err(Error::Invalid("empty or null region"));
        }
        let mut access = ffi::FI_WRITE | ffi::FI_READ | ffi::FI_SEND | ffi::FI_RECV;
        if remote_write {
            access |= ffi::FI_REMOTE_WRITE;
        }
        if remote_read || self.inner.info.delivery == Delivery::ReadAfterWrite {
            // ReadAfterWrite proves delivery by reading back the last byte
            // written, which needs remote read on every writable region.
            access |= ffi::FI_REMOTE_READ;
        }
        let (mr, key, _desc) = self.inner.reg_raw(ptr, len, access)?;
        let base = if self.inner.info.mr_mode & ffi::FI_MR_VIRT_ADDR != 0 {
            ptr as u64
        } else {
            0
        };
        Ok(MemRegion {
            _inner: self.inner.clone(),
            mr,
            remote: RemoteRegion {
                base,
                key,
                len: len as u64,
            },
        })
    }

    /// Writes `local` to `remote` at `offset`; returns once the data is
    /// visible in the target's memory.
    pub fn write(
        &self,
        peer: &Peer,
        local: &[u8],
        remote: &RemoteRegion,
        offset: u64,
    ) -> Result<()> {
        self.write_many(peer, &[(local, offset)], remote)
    }

    /// Posts all writes (`(local data, offset in remote)`), then waits for
    /// all; returns once every one is visible in the target's memory. On
    /// error, every write already posted has still completed (successfully or
    /// not) before this returns, so the borrowed buffers are free again.
    pub fn write_many(
        &self,
        peer: &Peer,
        runs: &[(&[u8], u64)],
        remote: &RemoteRegion,
    ) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        retry_reconnect(|| self.write_many_once(peer, runs, remote))
    }

    /// Like [`write_many`](Self::write_many), but every byte of `then` is
    /// placed in the target's memory after every byte of `first`, whatever
    /// order the target places the bytes of one write in.
    ///
    /// Why: the target's provider copies a write into memory with `memcpy`,
    /// whose stores do not go in address order (glibc's AVX-512 copy of 257
    /// to 512 bytes stores its last 64-byte block first and the one 256
    /// bytes before the end last), so a reader polling the last word of a
    /// write can see it before the rest. Writes posted one after the other
    /// are placed in that order only if the provider grants WAW ordering
    /// ([`Info::ordered_writes`]); otherwise `first` is waited for before
    /// `then` is posted, which costs a round trip.
    pub fn write_many_ordered(
        &self,
        peer: &Peer,
        first: &[(&[u8], u64)],
        then: &[(&[u8], u64)],
        remote: &RemoteRegion,
    ) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        // `first` may be posted as fewer, larger operations than runs: its
        // total bounds the largest of them.
        let total: u64 = first.iter().map(|r| r.0.len() as u64).sum();
        if first.is_empty() || then.is_empty() || total > self.inner.info.ordered_writes {
            // A retry after a broken connection re-sends `first` and then
            // `then`, so the order still holds for what lands last.
            retry_reconnect(|| self.write_many_once(peer, first, remote))?;
            return retry_reconnect(|| self.write_many_once(peer, then, remote));
        }
        retry_reconnect(|| self.write_groups_once(peer, &[first, then], remote))
    }

    fn write_many_once(
        &self,
        peer: &Peer,
        runs: &[(&[u8], u64)],
        remote: &RemoteRegion,
    ) -> Result<()> {
        self.write_groups_once(peer, &[runs], remote)
    }

    /// Posts the groups' writes in order (each group's operations after the
    /// previous group's), then waits for all of them.
    fn write_groups_once(
        &self,
        peer: &Peer,
        groups: &[&[(&[u8], u64)]],
        remote: &RemoteRegion,
    ) -> Result<()> {
        self.finish(self.post_groups(peer, groups, remote, Complete::Placed))
    }

    /// Like [`write_many_ordered`](Self::write_many_ordered) to several
    /// targets at once (the members of a reflective-memory group): every
    /// target's writes are posted before any is waited for, so the data
    /// travels to all of them in parallel. One result per target, in order;
    /// a target that fails does not stop the others.
    pub fn write_many_ordered_multi(
        &self,
        targets: &[(&Peer, &RemoteRegion)],
        first: &[(&[u8], u64)],
        then: &[(&[u8], u64)],
    ) -> Vec<Result<()>> {
        let total: u64 = first.iter().map(|r| r.0.len() as u64).sum();
        let together = !first.is_empty() && !then.is_empty() && total <= self.inner.info.ordered_writes;
        let phases: Vec<Vec<&[(&[u8], u64)]>> = if together {
            vec![vec![first, then]]
        } else {
            vec![vec![first], vec![then]]
        };
        let mut results: Vec<Result<()>> = targets
            .iter()
            .map(|(peer, _)| self.check_peer(peer).and_then(|()| self.check_up(peer)))
            .collect();
        for groups in &phases {
            let posted: Vec<Option<Posted>> = targets
                .iter()
                .zip(&results)
                .map(|((peer, remote), r)| r.is_ok().then(|| self.post_groups(peer, groups, remote, Complete::Placed)))
                .collect();
            for (i, p) in posted.into_iter().enumerate() {
                if let Some(p) = p {
                    results[i] = self.finish(p);
                }
            }
        }
        // A connection that broke under us: the one-target path re-sends
        // the whole shipment, in order, while the provider reconnects.
        for (i, (peer, remote)) in targets.iter().enumerate() {
            if matches!(&results[i], Err(Error::Completion { code, .. } | Error::Call { code, .. }) if *code == libc::ENOTCONN) {
                results[i] = self.write_many_ordered(peer, first, then, remote);
            }
        }
        results
    }

    /// Post a write of `data` to `remote` at `offset` and return at once;
    /// [`write_finish`](Self::write_finish) waits for it (the bytes are
    /// then in the target's memory), [`write_done`](Self::write_done) says
    /// whether it would wait. Writes posted to one peer are placed in the
    /// order they were posted when the provider grants WAW ordering
    /// ([`Info::ordered_writes`]).
    pub fn write_start(&self, peer: &Peer, data: Vec<u8>, remote: &RemoteRegion, offset: u64) -> Result<PendingWrite> {
        let n = data.len();
        self.write_start_runs(peer, data, &[(0..n, offset)], remote)
    }

    /// [`write_start`](Self::write_start) of several runs of one buffer:
    /// `data[range]` to `offset` each, posted (and, with WAW ordering,
    /// placed) in the order given. A message sent to the same peer after
    /// this returns is delivered after the writes are placed when the
    /// provider orders sends after writes (`FI_ORDER_SAW` in
    /// [`Info::msg_order`]).
    pub fn write_start_runs(&self, peer: &Peer, data: Vec<u8>, runs: &[(std::ops::Range<usize>, u64)], remote: &RemoteRegion) -> Result<PendingWrite> {
        self.write_start_with(peer, data, runs, remote, Complete::Placed)
    }

    /// [`write_start_runs`](Self::write_start_runs) for a writer that
    /// learns of placement otherwise (a message it sends after the writes,
    /// delivered after them: [`Info::messages_follow_writes`]): the writes
    /// complete once sent, so the target's engine sends no acknowledgement
    /// per write. [`write_done`](Self::write_done) then says the buffer is
    /// free again, not that the bytes are in place.
    pub fn write_post_runs(&self, peer: &Peer, data: Vec<u8>, runs: &[(std::ops::Range<usize>, u64)], remote: &RemoteRegion) -> Result<PendingWrite> {
        self.write_start_with(peer, data, runs, remote, Complete::Sent)
    }

    fn write_start_with(&self, peer: &Peer, data: Vec<u8>, runs: &[(std::ops::Range<usize>, u64)], remote: &RemoteRegion, complete: Complete) -> Result<PendingWrite> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        if runs.iter().any(|(r, _)| r.start > r.end || r.end > data.len()) {
            return Err(Error::Invalid("a run outside the buffer"));
        }
        let ops: Vec<(&[u8], u64)> = runs.iter().map(|(r, off)| (&data[r.clone()], *off)).collect();
        let posted = self.post_groups(peer, &[&ops], remote, complete);
        drop(ops);
        if posted.result.is_err() {
            let r = self.finish(posted);
            if matches!(r, Err(Error::Abandoned)) {
                std::mem::forget(data);
            }
            return Err(r.err().unwrap_or(Error::Abandoned));
        }
        // The provider holds pointers into `data`'s heap buffer, which the
        // PendingWrite keeps (moving the Vec does not move the bytes).
        Ok(PendingWrite { posted: Some(posted), data: Some(data), fi_addr: peer.fi_addr })
    }

    /// Has the write completed (successfully or not)?
    pub fn write_done(&self, w: &PendingWrite) -> bool {
        w.posted.as_ref().is_none_or(|p| p.slot.pending.load(Ordering::Acquire) == 0)
    }

    /// Would waiting for `w` never end (its peer was declared down)?
    pub fn write_abandoned(&self, w: &PendingWrite) -> bool {
        self.inner.is_down(w.fi_addr)
    }

    /// Wait for a write posted with [`write_start`](Self::write_start).
    /// After `Err(Abandoned)` its buffer is kept for good (the provider may
    /// still read it).
    pub fn write_finish(&self, w: PendingWrite) -> Result<()> {
        self.write_finish_keep(w).0
    }

    /// [`write_finish`](Self::write_finish), handing back the written
    /// buffer (to write again after a failure, or to reuse) unless the
    /// write was abandoned.
    pub fn write_finish_keep(&self, mut w: PendingWrite) -> (Result<()>, Option<Vec<u8>>) {
        let data = w.data.take();
        let Some(posted) = w.posted.take() else { return (Ok(()), data) };
        let r = self.finish(posted);
        if matches!(r, Err(Error::Abandoned)) {
            std::mem::forget(data);
            return (r, None);
        }
        (r, data)
    }

    /// Posts the groups' writes in order (each group's operations after the
    /// previous group's), and for a provider without delivery completion
    /// the read that proves them placed; [`finish`](Self::finish) waits.
    fn post_groups(
        &self,
        peer: &Peer,
        groups: &[&[(&[u8], u64)]],
        remote: &RemoteRegion,
        complete: Complete,
    ) -> Posted {
        let slot = OpSlot::new();
        let mut posted = Posted {
            slot,
            locals: Vec::new(),
            probe: Box::new([0u8; 1]),
            result: Ok(()),
            fi_addr: peer.fi_addr,
        };
        // Validate everything first so that a bad run posts nothing. The
        // groups stay apart: one operation never mixes runs of two groups,
        // since only separate operations are placed in order.
        let mut ops = Vec::new();
        let mut bounds = Vec::with_capacity(groups.len());
        for runs in groups {
            for &(buf, off) in runs.iter() {
                match remote.addr(off, buf.len()) {
                    Ok(raddr) if !buf.is_empty() => ops.push((buf, raddr)),
                    Ok(_) => {}
                    Err(e) => {
                        posted.result = Err(e);
                        return posted;
                    }
                }
            }
            bounds.push(ops.len());
        }
        let Some(&(last_buf, last_raddr)) = ops.last() else {
            return posted;
        };
        let inner = &*self.inner;
        let flags = match (complete, inner.info.delivery) {
            (Complete::Placed, Delivery::DeliveryComplete) => ffi::FI_COMPLETION | ffi::FI_DELIVERY_COMPLETE,
            _ => ffi::FI_COMPLETION,
        };
        let slot = &posted.slot;
        let locals = &mut posted.locals;
        let mut result = Ok(());
        let mut start = 0;
        let chunks = bounds.iter().flat_map(|&end| {
            let group = &ops[start..end];
            start = end;
            group.chunks(inner.info.iov_limit)
        });
        // Several runs per operation: the per-operation cost dominates small
        // runs (measured about 5-6 µs per operation on tcp;ofi_rxm here).
        for chunk in chunks {
            result = (|| {
                let mut iov = [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; ffi::VF_MAX_IOV];
                let mut desc = [std::ptr::null_mut(); ffi::VF_MAX_IOV];
                let mut raddr = [0u64; ffi::VF_MAX_IOV];
                for (i, &(buf, addr)) in chunk.iter().enumerate() {
                    iov[i] = libc::iovec {
                        iov_base: buf.as_ptr() as *mut c_void,
                        iov_len: buf.len(),
                    };
                    desc[i] = inner.local_desc(
                        buf.as_ptr() as *mut u8,
                        buf.len(),
                        ffi::FI_WRITE,
                        locals,
                    )?;
                    raddr[i] = addr;
                }
                inner.post(slot, "fi_writemsg", peer.fi_addr, |ctx| {
                    // SAFETY: the buffers stay borrowed (the caller's runs
                    // outlive `finish`) and their registrations stay in
                    // `locals` until finish's wait_slot has seen every
                    // posted operation complete; the arrays hold
                    // chunk.len() <= iov_limit valid entries.
                    unsafe {
                        ffi::vf_writev(
                            inner.ctx,
                            iov.as_ptr(),
                            desc.as_mut_ptr(),
                            raddr.as_ptr(),
                            chunk.len(),
                            peer.fi_addr,
                            remote.key,
                            ctx,
                            flags,
                        )
                    }
                })
            })();
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() && complete == Complete::Placed && inner.info.delivery == Delivery::ReadAfterWrite {
            // FI_ORDER_RAW: the target serves this read after every earlier
            // write from us, so its completion proves they landed.
            let raddr = last_raddr + last_buf.len() as u64 - 1;
            result = inner.post_read(slot, peer, &mut posted.probe[..], raddr, remote.key, locals);
        }
        posted.result = result;
        posted
    }

    /// Waits for everything [`post_groups`](Self::post_groups) posted.
    fn finish(&self, p: Posted) -> Result<()> {
        let waited = self.inner.wait_slot(&p.slot, p.fi_addr);
        abandon_locals(&waited, (p.locals, p.probe));
        p.result.and(waited)
    }

    /// Declare a peer down (its node stopped answering) or up again.
    /// Operations to a down peer fail with [`Error::PeerDown`] without being
    /// posted, and waits for operations already in flight end with
    /// [`Error::Abandoned`].
    pub fn set_peer_down(&self, peer: &Peer, down: bool) {
        let mut d = self.inner.down.lock().unwrap();
        if down {
            d.insert(peer.fi_addr);
        } else {
            d.remove(&peer.fi_addr);
        }
    }

    /// Make posts to `peer` whose queue stays full wait for as long as the
    /// peer is not declared down ([`set_peer_down`](Self::set_peer_down))
    /// instead of failing after `POST_TIMEOUT`.
    ///
    /// Why: a peer whose node is paused (SIGSTOP, a VM paused by its host, a
    /// host too loaded to run it) stops reading, its socket fills and the
    /// provider answers FI_EAGAIN until it runs again, which may be minutes.
    /// Failing the post then loses a store that would have arrived. Only a
    /// caller that will be told when the peer is dead may set this (the
    /// client library, for peers of connections whose LOST event marks the
    /// peer down): rxm also answers FI_EAGAIN for as long as it cannot
    /// connect, which for a peer that is gone is forever.
    pub fn set_patient(&self, peer: &Peer) {
        self.inner.patient.lock().unwrap().insert(peer.fi_addr);
    }

    /// Was the peer declared down with [`set_peer_down`](Self::set_peer_down)?
    pub fn is_peer_down(&self, peer: &Peer) -> bool {
        self.inner.is_down(peer.fi_addr)
    }

    fn check_up(&self, peer: &Peer) -> Result<()> {
        if self.inner.is_down(peer.fi_addr) {
            Err(Error::PeerDown)
        } else {
            Ok(())
        }
    }

    /// Reads `local.len()` bytes from `remote` at `offset`.
    pub fn read(
        &self,
        peer: &Peer,
        local: &mut [u8],
        remote: &RemoteRegion,
        offset: u64,
    ) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        let raddr = remote.addr(offset, local.len())?;
        if local.is_empty() {
            return Ok(());
        }
        retry_reconnect(|| self.read_many_once(peer, &mut [(&mut *local, offset)], &[raddr], remote))
    }

    /// Posts all reads (`(local buffer, offset in remote)`), then waits for
    /// all: several requests pay one wait instead of a round trip each.
    /// Every range is checked before anything is posted, so a bad one reads
    /// nothing. On error, every read already posted has still completed
    /// before this returns, except after [`Error::Abandoned`] (the peer was
    /// declared down): then, as for [`read`](Self::read), the provider may
    /// still write into any of the buffers later, and the caller must keep
    /// them for good.
    pub fn read_many(
        &self,
        peer: &Peer,
        ops: &mut [(&mut [u8], u64)],
        remote: &RemoteRegion,
    ) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        let raddrs = ops
            .iter()
            .map(|(buf, off)| remote.addr(*off, buf.len()))
            .collect::<Result<Vec<u64>>>()?;
        retry_reconnect(|| self.read_many_once(peer, ops, &raddrs, remote))
    }

    /// Post a read per buffer (to the matching address of `raddrs`), then
    /// wait for them all; what `read` and `read_many` both do once.
    fn read_many_once(
        &self,
        peer: &Peer,
        ops: &mut [(&mut [u8], u64)],
        raddrs: &[u64],
        remote: &RemoteRegion,
    ) -> Result<()> {
        let slot = OpSlot::new();
        let mut locals = Vec::new();
        let mut posted = Ok(());
        for ((buf, _), &raddr) in ops.iter_mut().zip(raddrs) {
            if buf.is_empty() {
                continue;
            }
            posted = self
                .inner
                .post_read(&slot, peer, buf, raddr, remote.key, &mut locals);
            // What was posted is still waited for below.
            if posted.is_err() {
                break;
            }
        }
        let waited = self.inner.wait_slot(&slot, peer.fi_addr);
        abandon_locals(&waited, locals);
        posted.and(waited)
    }

    /// Sends a message of at most [`MAX_MSG`] bytes; returns when the
    /// provider reports it sent (the buffer is free again).
    pub fn send(&self, peer: &Peer, data: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        self.check_up(peer)?;
        if data.len() > MAX_MSG {
            return Err(Error::MessageTooLarge(data.len()));
        }
        retry_reconnect(|| self.send_once(peer, data))
    }

    fn send_once(&self, peer: &Peer, data: &[u8]) -> Result<()> {
        let inner = &*self.inner;
        let slot = OpSlot::new();
        let mut locals = Vec::new();
        let desc = inner.local_desc(
            data.as_ptr() as *mut u8,
            data.len(),
            ffi::FI_SEND,
            &mut locals,
        )?;
        let posted = inner.post(&slot, "fi_send", peer.fi_addr, |ctx| {
            // SAFETY: data stays borrowed until wait_slot has seen the
            // completion; desc's registration lives in `locals` as long.
            unsafe {
                ffi::vf_send(
                    inner.ctx,
                    data.as_ptr().cast(),
                    data.len(),
                    desc,
                    peer.fi_addr,
                    ctx,
                )
            }
        });
        let waited = inner.wait_slot(&slot, peer.fi_addr);
        abandon_locals(&waited, locals);
        posted.and(waited)
    }

    /// Returns a received message if one is queued, polling once.
    pub fn try_recv(&self) -> Option<Message> {
        if let Some(m) = self.inner.pop_message() {
            return Some(m);
        }
        let _ = self.progress();
        self.inner.pop_message()
    }

    /// Waits up to `timeout` for a message. Polls the fabric itself unless a
    /// progress thread is running, in which case it sleeps until woken.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Message> {
        let deadline = Instant::now() + timeout;
        let mut idle = 0u32;
        loop {
            if let Some(m) = self.inner.pop_message() {
                return Some(m);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if self.inner.progress_threads.load(Ordering::Acquire) > 0 {
                let q = self.inner.rx.lock().unwrap_or_else(|p| p.into_inner());
                if q.is_empty() {
                    // Bounded so that a progress thread stopping meanwhile
                    // only costs a few milliseconds.
                    let wait = (deadline - now).min(Duration::from_millis(10));
                    drop(self.inner.rx_cv.wait_timeout(q, wait));
                }
            } else if self.progress() > 0 {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                backoff(idle);
            }
        }
    }

    /// Queue depths and totals of this endpoint, cheap to read at any time
    /// (a metrics scrape): nothing here takes the provider's locks.
    pub fn stats(&self) -> Stats {
        Stats {
            ops_in_flight: self.inner.in_flight.load(Ordering::Relaxed),
            received_queued: self.inner.rx.lock().unwrap_or_else(|p| p.into_inner()).len(),
            receives_to_repost: self.inner.repost.lock().unwrap_or_else(|p| p.into_inner()).len(),
            received: self.inner.received.load(Ordering::Relaxed),
            completions: self.inner.completions.load(Ordering::Relaxed),
        }
    }

    /// One non-blocking pass over the completion queue: drives the provider
    /// (which also serves incoming RMA on software providers), completes
    /// pending operations and queues received messages. Returns the number
    /// of completions handled.
    pub fn progress(&self) -> usize {
        match self.inner.progress() {
            Ok(n) => n,
            Err(e) => {
                log::warn!("fabric progress: {e}");
                0
            }
        }
    }

    /// Starts a thread that keeps this endpoint progressing in the default
    /// [`ProgressMode`]: incoming RMA is served and messages are received
    /// without any other call. Stops when the returned guard is dropped.
    pub fn spawn_progress_thread(&self) -> ProgressThread {
        self.spawn_progress_thread_with(ProgressMode::default())
    }

    pub fn spawn_progress_thread_with(&self, mode: ProgressMode) -> ProgressThread {
        self.spawn_progress(mode, false)
    }

    /// A blocking progress thread with real-time priority where the process
    /// may have it ([`boost_current_thread`]): for the side that serves
    /// other processes' RMA (a node's engine), which must not queue behind
    /// programs spinning on every core.
    pub fn spawn_progress_thread_realtime(&self) -> ProgressThread {
        self.spawn_progress(ProgressMode::Blocking, true)
    }

    fn spawn_progress(&self, mode: ProgressMode, rt: bool) -> ProgressThread {
        let stop = Arc::new(AtomicBool::new(false));
        let inner = self.inner.clone();
        let stop2 = stop.clone();
        inner.progress_threads.fetch_add(1, Ordering::AcqRel);
        let handle = std::thread::Builder::new()
            .name("fabric-progress".into())
            .spawn(move || inner.progress_loop(mode, rt, &stop2))
            .expect("spawn fabric progress thread");
        ProgressThread {
            stop,
            handle: Some(handle),
        }
    }

    fn check_peer(&self, peer: &Peer) -> Result<()> {
        if Arc::ptr_eq(&self.inner, &peer.inner) {
            Ok(())
        } else {
            Err(Error::Invalid("peer belongs to another fabric"))
        }
    }
}

/// Make this process, an RMA target, place every incoming write with each
/// byte stored once. Call first thing in `main` of a process whose memory
/// peers write (vscid), before any other thread exists and before any
/// libfabric call: the provider reads its parameters from the environment
/// once, when it loads. A setting the user made is left alone.
///
/// Why: libfabric's tcp provider reads small messages into a prefetch
/// buffer and copies each write's data out of it with `memcpy`, and glibc's
/// `memcpy` of 2 to 63 bytes stores the head and the tail of the range with
/// two overlapping stores (an 8-byte write: the same 8 bytes twice). An
/// owner that sees the first store and changes the word at once (a mailbox
/// flag cleared after it was read) has its change undone by the second
/// store, so the flag shows twice. Measured: the remote_bench mailbox lost
/// one clear in about 200,000 rounds, and in 160 with a hardware watchpoint
/// on the flag word (each trap widens the window between the two stores);
/// none in 6 runs of 3,000-8,000 watched rounds with the prefetch off. With
/// it off the kernel copies each write's data from the socket straight
/// into the segment (`copy_to_user`: every byte once).
pub fn prepare_rma_target_process() {
    const PREFETCH: &str = "FI_TCP_PREFETCH_RBUF_SIZE";
    if std::env::var_os(PREFETCH).is_none() {
        std::env::set_var(PREFETCH, "0");
    }
}

/// Give the calling thread real-time priority (SCHED_FIFO 1) where the
/// process may (root, or an RLIMIT_RTPRIO), unless `VSCI_REALTIME=0`.
/// For threads that sleep until there is work and then do a bounded amount
/// of it (a progress thread, a shipper): on a machine whose cores are all
/// busy with programs spinning on shared memory, a thread of normal priority
/// woken by the network waits for the scheduler to preempt a spinner
/// (milliseconds, measured); a real-time one runs at once. Returns whether
/// it took effect.
pub fn boost_current_thread() -> bool {
    if std::env::var("VSCI_REALTIME").is_ok_and(|v| v == "0") {
        return false;
    }
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid
    // sched_param only changes its scheduling.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if r != 0 {
        log::debug!("fabric: thread keeps normal priority ({})", std::io::Error::last_os_error());
    }
    r == 0
}

thread_local! {
    /// This thread is the one reading the completion queue.
    static IN_POLL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How long an operation is retried while the connection to its peer is
/// being re-established.
const RECONNECT_WINDOW: Duration = Duration::from_secs(2);

/// Runs `op` again while it fails because the connection to the peer is
/// down. Measured on tcp;ofi_rxm 1.17: when a target refuses an access (bad
/// key, out of range, no permission) it drops the whole connection; the
/// refused operation completes with ECANCELED, and every operation to that
/// peer then fails with ENOTCONN until rxm has processed the shutdown and
/// reconnects on demand, 100-200 ms later. Without this retry, one refused
/// access (e.g. racing with the owner removing a segment) would fail all
/// other traffic to that node for that time. Retrying is safe: RMA writes
/// and reads are idempotent, and an operation that found no connection did
/// nothing.
/// After an abandoned wait the provider may still use the local
/// registrations of that call: keep them for the life of the process.
fn abandon_locals<T>(waited: &Result<()>, locals: T) {
    if matches!(waited, Err(Error::Abandoned)) {
        std::mem::forget(locals);
    } else {
        drop(locals);
    }
}

fn retry_reconnect(mut op: impl FnMut() -> Result<()>) -> Result<()> {
    let start = Instant::now();
    loop {
        match op() {
            Err(Error::Completion { code, .. } | Error::Call { code, .. })
                if code == libc::ENOTCONN && start.elapsed() < RECONNECT_WINDOW =>
            {
                log::debug!("fabric: peer connection down, retrying");
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// Adaptive wait used when nobody else drives progress: spin briefly (the
/// answer usually comes within microseconds), then yield, then sleep.
fn backoff(idle: u32) {
    if idle < 64 {
        std::hint::spin_loop();
    } else if idle < 256 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// How a caller waiting for its own operation waits: polling the completion
/// queue (each poll drives the provider: socket reads) for the first
/// `WAIT_POLL`, since an answer from a peer takes tens of microseconds here
/// and a thread that sleeps sooner wakes ~50 µs late (measured: a 4 KiB read
/// took 51 µs on average with sleeps after 256 polls, most of it sleeping);
/// then yielding, then sleeping.
fn wait_backoff(start: Instant) {
    const WAIT_POLL: Duration = Duration::from_micros(300);
    const WAIT_YIELD: Duration = Duration::from_millis(2);
    let waited = start.elapsed();
    if waited < WAIT_POLL {
        std::hint::spin_loop();
    } else if waited < WAIT_YIELD {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// How long a post may keep failing with FI_EAGAIN before we give up. A full
/// send queue drains within milliseconds; rxm also answers FI_EAGAIN for
/// as long as it cannot connect to the peer, which for a peer that is gone
/// is forever. Nothing has been posted at that point, so giving up is safe.
const POST_TIMEOUT: Duration = Duration::from_secs(5);

struct LocalMr(*mut ffi::FidMr);

impl Drop for LocalMr {
    fn drop(&mut self) {
        // SAFETY: the MR came from vf_mr_reg and the operations using it have
        // completed (callers drop these only after wait_slot).
        unsafe { ffi::vf_mr_close(self.0) };
    }
}

impl Inner {
    fn reg_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        access: u64,
    ) -> Result<(*mut ffi::FidMr, u64, *mut c_void)> {
        let prov_key = self.info.mr_mode & ffi::FI_MR_PROV_KEY != 0;
        let mut attempt = 0;
        loop {
            let requested = if prov_key {
                0
            } else {
                random_key(self.info.mr_key_size)
            };
            let mut mr = std::ptr::null_mut();
            let mut key = 0;
            let mut desc = std::ptr::null_mut();
            // SAFETY: the caller guarantees ptr..ptr+len stays valid while the
            // MR exists; the out-pointers are valid locals.
            let ret = unsafe {
                ffi::vf_mr_reg(
                    self.ctx,
                    ptr.cast(),
                    len,
                    access,
                    requested,
                    &mut mr,
                    &mut key,
                    &mut desc,
                )
            };
            if ret == 0 {
                return Ok((mr, key, desc));
            }
            attempt += 1;
            // A random key colliding with one in use is possible only with
            // short key sizes; draw again.
            if -ret != ffi::FI_ENOKEY || prov_key || attempt >= 8 {
                return Err(Error::Call {
                    call: "fi_mr_reg",
                    code: -ret,
                    msg: strerror(-ret),
                });
            }
        }
    }

    /// Registers a local buffer when the provider needs descriptors for
    /// local buffers (FI_MR_LOCAL); otherwise a null descriptor is fine.
    /// Registration per call is the simple choice: tcp;ofi_rxm does not ask
    /// for FI_MR_LOCAL, so it costs nothing there.
    fn local_desc(
        &self,
        ptr: *mut u8,
        len: usize,
        access: u64,
        keep: &mut Vec<LocalMr>,
    ) -> Result<*mut c_void> {
        if self.info.mr_mode & ffi::FI_MR_LOCAL == 0 {
            return Ok(std::ptr::null_mut());
        }
        let (mr, _key, desc) = self.reg_raw(ptr, len, access)?;
        keep.push(LocalMr(mr));
        Ok(desc)
    }

    /// Posts one operation owned by `slot`, retrying on FI_EAGAIN while
    /// driving progress (the queue drains only when completions are read).
    fn post(
        &self,
        slot: &Arc<OpSlot>,
        call: &'static str,
        fi_addr: u64,
        mut f: impl FnMut(*mut c_void) -> isize,
    ) -> Result<()> {
        slot.pending.fetch_add(1, Ordering::AcqRel);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let ctx = Arc::into_raw(slot.clone()) as *mut c_void;
        let start = Instant::now();
        let mut idle = 0;
        loop {
            self.wait_for_poller();
            let ret = f(ctx);
            if ret >= 0 {
                return Ok(());
            }
            let waited = start.elapsed();
            let patient = ret == -ffi::FI_EAGAIN && waited >= POST_TIMEOUT && self.patient.lock().unwrap().contains(&fi_addr) && !self.is_down(fi_addr);
            if ret == -ffi::FI_EAGAIN && (waited < POST_TIMEOUT || patient) {
                if self.progress().unwrap_or(0) == 0 {
                    idle += 1;
                    backoff(idle);
                }
                continue;
            }
            // SAFETY: the operation was not posted, so nobody else will
            // reclaim the reference made by into_raw above.
            drop(unsafe { Arc::from_raw(ctx as *const OpSlot) });
            slot.pending.fetch_sub(1, Ordering::AcqRel);
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            if ret == -ffi::FI_EAGAIN {
                return Err(Error::Unreachable { call, waited });
            }
            return check(call, ret);
        }
    }

    fn post_read(
        &self,
        slot: &Arc<OpSlot>,
        peer: &Peer,
        buf: &mut [u8],
        raddr: u64,
        key: u64,
        locals: &mut Vec<LocalMr>,
    ) -> Result<()> {
        let desc = self.local_desc(buf.as_mut_ptr(), buf.len(), ffi::FI_READ, locals)?;
        let (ptr, len) = (buf.as_mut_ptr(), buf.len());
        self.post(slot, "fi_readmsg", peer.fi_addr, |ctx| {
            // SAFETY: the caller keeps buf borrowed (and the registration in
            // `locals`) until wait_slot has seen this operation complete.
            unsafe {
                ffi::vf_readmsg(
                    self.ctx,
                    ptr.cast(),
                    len,
                    desc,
                    peer.fi_addr,
                    raddr,
                    key,
                    ctx,
                    ffi::FI_COMPLETION,
                )
            }
        })
    }

    fn is_down(&self, fi_addr: u64) -> bool {
        self.down.lock().unwrap().contains(&fi_addr)
    }

    /// Waits until every operation posted on `slot` has completed. There is
    /// no timeout: the provider may still be using the caller's buffers until
    /// then. A peer whose connection breaks surfaces as an error completion;
    /// one that goes silent is only given up on when the caller declares it
    /// down, and then the call returns [`Error::Abandoned`] (the slot stays
    /// alive through the provider's own reference to it).
    fn wait_slot(&self, slot: &Arc<OpSlot>, fi_addr: u64) -> Result<()> {
        let mut idle = 0u32;
        let start = Instant::now();
        while slot.pending.load(Ordering::Acquire) != 0 {
            if idle > 0 && idle % 64 == 0 && self.is_down(fi_addr) {
                return Err(Error::Abandoned);
            }
            match self.progress() {
                Ok(0) => {
                    idle = idle.saturating_add(1);
                    wait_backoff(start);
                }
                Ok(_) => idle = 0,
                Err(e) => {
                    log::warn!("fabric progress: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        slot.take_error().map_or(Ok(()), Err)
    }

    /// Read the completion queue and handle what is there; 0 at once when
    /// another thread of the process is doing it (it handles every
    /// completion, ours included).
    ///
    /// Why not simply call in from every thread: the provider serialises
    /// its calls with a mutex, so a program thread posting a write or
    /// polling for its completion while the progress thread reads the queue
    /// went to sleep on that mutex, and a sleeping thread wakes tens of
    /// microseconds late here (measured with `perf`: about 0.4 futex waits
    /// per store + `SCIFlush`, most in `fi_writemsg` and `fi_cq_read`). Our
    /// own flag lets a second poller return and a poster spin for the few
    /// microseconds a read takes ([`Inner::wait_for_poller`]).
    fn progress(&self) -> Result<usize> {
        if self.polling.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return Ok(0);
        }
        /// Clears the flag however the poll ends (a panic in a completion
        /// handler must not leave every later poll returning 0).
        struct Polling<'a>(&'a AtomicBool);
        impl Drop for Polling<'_> {
            fn drop(&mut self) {
                IN_POLL.with(|p| p.set(false));
                self.0.store(false, Ordering::Release);
            }
        }
        IN_POLL.with(|p| p.set(true));
        let _polling = Polling(&self.polling);
        self.progress_polling()
    }

    /// Before a call into the provider: let a thread reading the completion
    /// queue finish (spinning, yielding after a while) rather than sleep on
    /// the provider's mutex. Not when this thread is the reader (a receive
    /// buffer re-posted from inside the poll).
    fn wait_for_poller(&self) {
        if IN_POLL.with(|p| p.get()) {
            return;
        }
        let mut spins = 0u32;
        while self.polling.load(Ordering::Acquire) {
            spins += 1;
            if spins < 2000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn progress_polling(&self) -> Result<usize> {
        self.retry_reposts();
        let mut comps = [ffi::VfComp {
            context: std::ptr::null_mut(),
            flags: 0,
            len: 0,
            src: 0,
        }; 32];
        let mut total = 0;
        loop {
            // SAFETY: comps has room for the count we pass.
            let n = unsafe { ffi::vf_cq_read(self.ctx, comps.as_mut_ptr(), comps.len()) };
            if n > 0 {
                for c in &comps[..n as usize] {
                    self.dispatch(c, None);
                }
                total += n as usize;
            } else if n == -ffi::FI_EAVAIL {
                total += self.read_error()?;
            } else if n == -ffi::FI_EAGAIN {
                return Ok(total);
            } else {
                return check("fi_cq_read", n).map(|_| total);
            }
        }
    }

    fn read_error(&self) -> Result<usize> {
        let mut ctx = std::ptr::null_mut();
        let (mut err, mut prov_errno) = (0, 0);
        let mut msg = [0 as c_char; 256];
        // SAFETY: all out-pointers are valid; msg has the length we pass.
        let n = unsafe {
            ffi::vf_cq_readerr(
                self.ctx,
                &mut ctx,
                &mut err,
                &mut prov_errno,
                msg.as_mut_ptr(),
                msg.len(),
            )
        };
        if n <= 0 {
            return if n == -ffi::FI_EAGAIN {
                Ok(0)
            } else {
                check("fi_cq_readerr", n).map(|_| 0)
            };
        }
        // SAFETY: the shim NUL-terminates msg (snprintf).
        let msg = unsafe { CStr::from_ptr(msg.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let comp = ffi::VfComp {
            context: ctx,
            flags: 0,
            len: 0,
            src: ffi::FI_ADDR_NOTAVAIL,
        };
        self.dispatch(
            &comp,
            Some(Error::Completion {
                code: err,
                prov_errno,
                msg,
            }),
        );
        Ok(1)
    }

    fn dispatch(&self, c: &ffi::VfComp, err: Option<Error>) {
        self.completions.fetch_add(1, Ordering::Relaxed);
        let ctx = c.context as usize;
        if ctx & 1 == 1 {
            let index = ctx >> 1;
            match err {
                None => {
                    let len = (c.len as usize).min(MAX_MSG);
                    // SAFETY: the provider finished writing this buffer (its
                    // completion is what we are handling) and will not touch
                    // it again until we re-post it below.
                    let data = unsafe {
                        std::slice::from_raw_parts(self.pool.buf.add(index * MAX_MSG), len)
                    }
                    .to_vec();
                    let from = (self.info.source && c.src != ffi::FI_ADDR_NOTAVAIL)
                        .then_some(PeerId(c.src));
                    self.rx
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_back(Message { data, from });
                    self.received.fetch_add(1, Ordering::Relaxed);
                    self.rx_cv.notify_all();
                }
                Some(e) => log::warn!("fabric receive failed: {e}"),
            }
            if let Err(e) = self.post_recv(index) {
                log::error!("fabric: re-posting receive buffer {index}: {e}");
            }
        } else if ctx != 0 {
            // SAFETY: even contexts are only ever produced by Arc::into_raw in
            // post(), and each completion is reported exactly once, so this
            // reclaims that reference exactly once.
            let slot = unsafe { Arc::from_raw(c.context as *const OpSlot) };
            if let Some(e) = err {
                slot.fail(e);
            }
            slot.pending.fetch_sub(1, Ordering::AcqRel);
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
        } else if let Some(e) = err {
            log::warn!("fabric: error completion without context: {e}");
        }
    }

    fn post_recv(&self, index: usize) -> Result<()> {
        // SAFETY: buffer `index` is not posted (initial post, or its previous
        // completion was just handled) and the pool outlives the endpoint.
        let ret = unsafe {
            ffi::vf_recv(
                self.ctx,
                self.pool.buf.add(index * MAX_MSG).cast(),
                MAX_MSG,
                self.pool.desc,
                recv_context(index),
            )
        };
        if ret == -ffi::FI_EAGAIN {
            self.repost
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(index);
            return Ok(());
        }
        check("fi_recv", ret)
    }

    fn retry_reposts(&self) {
        let pending = std::mem::take(&mut *self.repost.lock().unwrap_or_else(|p| p.into_inner()));
        for index in pending {
            if let Err(e) = self.post_recv(index) {
                log::error!("fabric: re-posting receive buffer {index}: {e}");
            }
        }
    }

    fn pop_message(&self) -> Option<Message> {
        self.rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    fn progress_loop(&self, mode: ProgressMode, rt: bool, stop: &AtomicBool) {
        let boosted = rt && boost_current_thread();
        // SAFETY: ctx is open for as long as self exists.
        let fd = unsafe { ffi::vf_cq_wait_fd(self.ctx) };
        let spin = match mode {
            ProgressMode::Blocking => Duration::ZERO,
            ProgressMode::Adaptive(d) => d,
            ProgressMode::Polling => Duration::MAX,
            ProgressMode::Initiator => Duration::ZERO,
        };
        let mut last_activity = Instant::now();
        let mut idle = 0u32;
        if mode == ProgressMode::Initiator {
            self.initiator_loop(fd, stop);
            self.progress_threads.fetch_sub(1, Ordering::AcqRel);
            self.rx_cv.notify_all();
            return;
        }
        while !stop.load(Ordering::Acquire) {
            if self.progress().unwrap_or(0) > 0 {
                last_activity = Instant::now();
            }
            if last_activity.elapsed() < spin {
                // Incoming RMA produces no completion; the wait fd turning
                // readable is how we learn of it and stay in the spin window.
                idle = idle.wrapping_add(1);
                if mode != ProgressMode::Polling {
                    if fd >= 0 && idle & 15 == 0 && poll_readable(fd, 0) {
                        last_activity = Instant::now();
                    }
                    // Give way to the application's own spinning threads on
                    // small machines; on an idle core this returns at once.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            if fd >= 0 {
                // fi_trywait: blocking is only safe once the provider says
                // nothing is buffered that the fd would not signal.
                // SAFETY: ctx is open.
                if unsafe { ffi::vf_trywait(self.ctx) } == 0 {
                    if poll_readable(fd, 100) {
                        last_activity = Instant::now();
                    }
                } else if boosted {
                    // Not safe to block yet, and a real-time thread looping
                    // here would keep normal threads off this core: step
                    // aside briefly.
                    std::thread::sleep(Duration::from_micros(5));
                }
            } else if self.info.cq_wait {
                self.sread_once(100);
            } else {
                idle = idle.saturating_add(1);
                std::thread::sleep(Duration::from_micros(u64::from(idle.min(1000))));
                continue;
            }
            idle = 0;
        }
        self.progress_threads.fetch_sub(1, Ordering::AcqRel);
        self.rx_cv.notify_all();
    }

    fn initiator_loop(&self, fd: i32, stop: &AtomicBool) {
        let mut last_busy = Instant::now();
        while !stop.load(Ordering::Acquire) {
            let handled = self.progress().unwrap_or(0);
            let in_flight = self.in_flight.load(Ordering::Relaxed) > 0;
            if handled > 0 || in_flight {
                last_busy = Instant::now();
            }
            if in_flight {
                std::thread::sleep(INITIATOR_POLL);
            } else if last_busy.elapsed() < INITIATOR_LINGER {
                std::thread::sleep(Duration::from_millis(1));
            } else if fd >= 0 {
                // SAFETY: ctx is open for as long as self exists.
                if unsafe { ffi::vf_trywait(self.ctx) } == 0 && poll_readable(fd, 100) {
                    last_busy = Instant::now();
                }
            } else if self.info.cq_wait {
                self.sread_once(100);
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Blocks in fi_cq_sread (which also drives the provider while it
    /// waits), for CQs whose wait object is not an fd.
    fn sread_once(&self, timeout_ms: i32) {
        let mut comps = [ffi::VfComp {
            context: std::ptr::null_mut(),
            flags: 0,
            len: 0,
            src: 0,
        }; 32];
        // SAFETY: comps has room for the count we pass.
        let n = unsafe { ffi::vf_cq_sread(self.ctx, comps.as_mut_ptr(), comps.len(), timeout_ms) };
        if n > 0 {
            for c in &comps[..n as usize] {
                self.dispatch(c, None);
            }
        } else if n == -ffi::FI_EAVAIL {
            let _ = self.progress();
        } else if n != -ffi::FI_EAGAIN {
            log::warn!("fi_cq_sread: {}", strerror((-n) as i32));
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn poll_readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
}

fn random_key(key_size: u64) -> u64 {
    let mut b = [0u8; 8];
    let mut filled = 0;
    while filled < b.len() {
        // SAFETY: writes at most the remaining bytes of b.
        let n = unsafe { libc::getrandom(b[filled..].as_mut_ptr().cast(), b.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            panic!("getrandom failed: {}", std::io::Error::last_os_error());
        }
    }
    let key = u64::from_ne_bytes(b);
    if key_size >= 8 || key_size == 0 {
        key
    } else {
        key & ((1u64 << (key_size * 8)) - 1)
    }
}

/// A peer in our address vector; removed (fi_av_remove) on drop. Share it
/// with `Arc` if several threads talk to the same peer.
pub struct Peer {
    inner: Arc<Inner>,
    fi_addr: u64,
}

impl Peer {
    /// What [`Message::from`] reports for messages from this peer.
    pub fn id(&self) -> PeerId {
        PeerId(self.fi_addr)
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Peer({})", self.fi_addr)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // SAFETY: fi_addr came from fi_av_insert on this AV; every operation
        // that used it borrowed the Peer and has completed.
        let ret = unsafe { ffi::vf_av_remove(self.inner.ctx, self.fi_addr) };
        if ret != 0 {
            log::warn!("fi_av_remove: {}", strerror(-ret));
        }
    }
}

/// Registered memory; deregistered on drop, after which peers' accesses with
/// its key fail.
pub struct MemRegion {
    /// Keeps the domain open until the MR is closed.
    _inner: Arc<Inner>,
    mr: *mut ffi::FidMr,
    remote: RemoteRegion,
}

// SAFETY: the MR handle belongs to a FI_THREAD_SAFE domain; the only call
// made on it (fi_close) happens once, in Drop.
unsafe impl Send for MemRegion {}
// SAFETY: &MemRegion only reads plain fields.
unsafe impl Sync for MemRegion {}

impl MemRegion {
    /// The descriptor to send to peers.
    pub fn remote(&self) -> RemoteRegion {
        self.remote
    }
}

impl fmt::Debug for MemRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemRegion")
            .field("len", &self.remote.len)
            .finish()
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        // SAFETY: mr came from vf_mr_reg and is closed exactly once; the
        // domain is still open because we hold an Arc<Inner>.
        let ret = unsafe { ffi::vf_mr_close(self.mr) };
        if ret != 0 {
            log::warn!("fi_close(mr): {}", strerror(-ret));
        }
    }
}

/// How a [`ProgressThread`] waits for work.
///
/// Blocking uses the CQ's wait fd (for rxm an epoll set over its sockets, so
/// incoming RMA wakes it although it produces no completion), falling back
/// to fi_cq_sread, then to polling with sleeps of up to 1 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    #[default]
    /// Sleep until the provider signals activity. Measured on tcp;ofi_rxm:
    /// 0.05-0.09 % of a core when idle (a wake-up every 100 ms to check for
    /// stop); each wake-up adds about 20-35 µs to a delivery.
    Blocking,
    /// Poll (yielding the CPU) for this long after each activity, then
    /// block: idle costs what Blocking costs. On the 2-core test machine it
    /// did not beat Blocking, since the application's own spinning already
    /// occupies the cores; it is for hosts with spare cores.
    Adaptive(Duration),
    /// Poll without pause: lowest latency, one full core.
    Polling,
    /// For a process that only initiates operations and serves nobody's RMA
    /// (a vsci client: its node's engine owns the memory): while operations
    /// are in flight, poll every [`INITIATOR_POLL`] from a timed sleep; for
    /// [`INITIATOR_LINGER`] after the last one, every millisecond; then
    /// block like `Blocking`. It never waits on the provider's fd while
    /// busy, because that fd turns readable at every acknowledgement of a
    /// delivered write: blocking on it woke this thread once per store a
    /// program made (a context switch on a core the program was spinning
    /// on, ~12 µs of CPU each here). Threads that wait for their own
    /// operation poll for themselves, so this only bounds how late
    /// completions nobody waits for are reaped.
    Initiator,
}

/// How often an [`ProgressMode::Initiator`] thread polls while operations
/// are in flight.
pub const INITIATOR_POLL: Duration = Duration::from_micros(200);
/// How long an [`ProgressMode::Initiator`] thread keeps polling (every
/// millisecond) after the last operation before it blocks.
pub const INITIATOR_LINGER: Duration = Duration::from_millis(50);

/// Keeps a fabric progressing; stops and joins the thread on drop.
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Undo the signal handlers Debian's libfabric drags in.
///
/// libfabric links the PSM providers' libraries, and libinfinipath's load
/// constructor installs handlers for SIGINT, SIGTERM, SIGSEGV, SIGBUS and
/// friends (to print a backtrace) in every process that loads libfabric,
/// unless `IPATH_NO_BACKTRACE` was set before the process started. That
/// would change how every SISCI program and the daemon react to Ctrl-C or
/// SIGTERM (they would exit with status 1 instead of dying of the signal, and
/// a handler chained by the program would run theirs too). This runs from
/// our own load constructor, after theirs (a library's dependencies are
/// initialised first), and puts back the default disposition where the
/// current handler lives in one of those libraries; anything else — a
/// handler the program installed — is left alone.
pub fn restore_default_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGQUIT, libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT] {
        // SAFETY: an all-zero sigaction is a valid value of the C struct.
        let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: sigaction with a NULL new action only reads the current
        // one into `cur`, which is a valid sigaction.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) } != 0 {
            continue;
        }
        let h = cur.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            continue;
        }
        // SAFETY: an all-zero Dl_info (null pointers) is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads its first argument as an address and
        // fills `info`, which is valid.
        if unsafe { libc::dladdr(h as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            continue;
        }
        // SAFETY: dladdr returned a NUL-terminated path owned by the loader.
        let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
        if file.contains("infinipath") || file.contains("libpsm") {
            // SAFETY: restoring the default disposition of a signal.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
}

extern "C" fn on_load() {
    restore_default_signals();
}

// Run at load time, after libfabric's dependencies' constructors.
#[used]
#[link_section = ".init_array"]
static RESTORE_SIGNALS_AT_LOAD: extern "C" fn() = on_load;
