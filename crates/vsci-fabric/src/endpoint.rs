//! The endpoint: opening a [`Fabric`] (domain, address vector, completion
//! queue, the receive pool), its state shared by every handle ([`Inner`]),
//! and the peers in its address vector ([`Peer`]), with the down and
//! patient marks the caller puts on them.

use super::*;

pub(crate) struct Inner {
    pub(crate) ctx: *mut ffi::VfCtx,
    pub(crate) info: Info,
    pub(crate) address: Vec<u8>,
    pub(crate) pool: RecvPool,
    pub(crate) rx: Mutex<VecDeque<Message>>,
    pub(crate) rx_cv: Condvar,
    /// Receive buffers whose re-post hit FI_EAGAIN; retried on the next poll.
    pub(crate) repost: Mutex<Vec<usize>>,
    /// Progress threads running; receivers then sleep on `rx_cv` instead of
    /// polling themselves.
    pub(crate) progress_threads: AtomicUsize,
    /// Peers (fi_addr) the caller declared down: a silently cut link never
    /// completes operations on its own (TCP retransmits for many minutes),
    /// so waits on them are abandoned instead.
    pub(crate) down: Mutex<std::collections::HashSet<u64>>,
    /// Peers (fi_addr) to which a post that finds the queue full is retried
    /// for as long as they are not declared down ([`Fabric::set_patient`]).
    pub(crate) patient: Mutex<std::collections::HashSet<u64>>,
    /// Operations posted and not yet completed, over every caller: the
    /// depth of this endpoint's work queue (see [`Fabric::stats`]).
    pub(crate) in_flight: AtomicUsize,
    /// Messages received and completions handled since the endpoint opened.
    pub(crate) received: AtomicU64,
    pub(crate) completions: AtomicU64,
    /// Operations that failed, at their post or at their completion (see
    /// [`Fabric::failures`]).
    pub(crate) failures: AtomicU64,
    /// A thread is reading the completion queue (see [`Inner::progress`]).
    pub(crate) polling: AtomicBool,
}

// SAFETY: the raw pointers are libfabric objects opened with FI_THREAD_SAFE
// (every call on them may come from any thread concurrently) and the receive
// pool, which only the provider writes and only the completion path reads.
unsafe impl Send for Inner {}
// SAFETY: as above; all Rust-side shared state is behind atomics or mutexes.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        let _quiet = vsci_sys::signals::quiet();
        // SAFETY: all MemRegions and Peers hold an Arc<Inner>, so none is left;
        // the endpoint is closed before the pool MR and the pool is freed only
        // after everything that could write into it is closed.
        unsafe {
            ffi::vf_close(self.ctx, self.pool.mr);
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.pool.buf, RECV_BUFFERS * MAX_MSG)));
        }
    }
}

pub(crate) const BASE_CAPS: u64 = ffi::FI_MSG
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
pub(crate) const MR_MODES: u64 = ffi::FI_MR_LOCAL | ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_ENDPOINT;

impl Fabric {
    /// Opens an RDM endpoint on `provider` (e.g. `"tcp;ofi_rxm"`, `"sockets"`),
    /// bound to the local IP address `bind` if given; the port is chosen by
    /// the provider and is part of [`Fabric::address`].
    pub fn open(provider: &str, bind: Option<&str>) -> Result<Fabric> {
        Fabric::open_with(&OpenOptions { provider: provider.into(), bind: bind.map(Into::into), delivery: None })
    }

    pub fn open_with(o: &OpenOptions) -> Result<Fabric> {
        // Threads the provider starts now (progress, connection managers)
        // inherit this thread's mask: they must not take the program's
        // signals (vsci_sys::signals).
        let _quiet = vsci_sys::signals::quiet();
        let prov = CString::new(o.provider.as_str()).map_err(|_| Error::Invalid("provider name contains NUL"))?;
        let node = match &o.bind {
            Some(b) => Some(CString::new(b.as_str()).map_err(|_| Error::Invalid("bind address contains NUL"))?),
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
        let attempts = attempts.iter().flat_map(|&(caps, order, mr)| [(caps, order | waw, mr), (caps, order, mr)]);
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
                return Err(Error::Call {
                    call: "dlopen(libfabric.so.1)",
                    code: libc::ENOSYS,
                    msg: format!("the RMA engine cannot be loaded: {why} (install libfabric1)"),
                });
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

    pub(crate) fn finish_open(ctx: *mut ffi::VfCtx, a: ffi::VfAttrs, o: &OpenOptions) -> Result<Fabric> {
        // SAFETY: the shim NUL-terminates prov_name within its 64 bytes.
        let provider = unsafe { CStr::from_ptr(a.prov_name.as_ptr()) }.to_string_lossy().into_owned();
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
            pool: RecvPool { buf, mr: std::ptr::null_mut(), desc: std::ptr::null_mut() },
            rx: Mutex::new(VecDeque::new()),
            rx_cv: Condvar::new(),
            repost: Mutex::new(Vec::new()),
            progress_threads: AtomicUsize::new(0),
            down: Mutex::new(std::collections::HashSet::new()),
            patient: Mutex::new(std::collections::HashSet::new()),
            in_flight: AtomicUsize::new(0),
            received: AtomicU64::new(0),
            completions: AtomicU64::new(0),
            failures: AtomicU64::new(0),
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
        Ok(Fabric { inner: Arc::new(inner) })
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
        let _quiet = vsci_sys::signals::quiet();
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
            return Err(Error::Call { call: "fi_av_insert", code, msg: strerror(code) });
        }
        Ok(Peer { inner: self.inner.clone(), fi_addr })
    }

    /// Declare a peer down (its node stopped answering) or up again.
    /// Operations to a down peer fail with [`Error::PeerDown`] without being
    /// posted, and waits for operations already in flight end with
    /// [`Error::Abandoned`].
    pub fn set_peer_down(&self, peer: &Peer, down: bool) {
        let mut d = vsci_sys::signals::lock(&self.inner.down);
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
        vsci_sys::signals::lock(&self.inner.patient).insert(peer.fi_addr);
    }

    /// Was the peer declared down with [`set_peer_down`](Self::set_peer_down)?
    pub fn is_peer_down(&self, peer: &Peer) -> bool {
        self.inner.is_down(peer.fi_addr)
    }

    pub(crate) fn check_up(&self, peer: &Peer) -> Result<()> {
        if self.inner.is_down(peer.fi_addr) {
            Err(Error::PeerDown)
        } else {
            Ok(())
        }
    }

    pub(crate) fn check_peer(&self, peer: &Peer) -> Result<()> {
        if Arc::ptr_eq(&self.inner, &peer.inner) {
            Ok(())
        } else {
            Err(Error::Invalid("peer belongs to another fabric"))
        }
    }
}

/// A peer in our address vector; removed (fi_av_remove) on drop. Share it
/// with `Arc` if several threads talk to the same peer.
pub struct Peer {
    pub(crate) inner: Arc<Inner>,
    pub(crate) fi_addr: u64,
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
        let _quiet = vsci_sys::signals::quiet();
        // SAFETY: fi_addr came from fi_av_insert on this AV; every operation
        // that used it borrowed the Peer and has completed.
        let ret = unsafe { ffi::vf_av_remove(self.inner.ctx, self.fi_addr) };
        if ret != 0 {
            log::warn!("fi_av_remove: {}", strerror(-ret));
        }
    }
}
