//! Messages: small sends and the receive pool they land in.

use super::*;

/// Receive contexts are tagged with the low bit so they cannot be confused
/// with `OpSlot` pointers, which are at least 8-byte aligned.
pub(crate) fn recv_context(index: usize) -> *mut c_void {
    ((index << 1) | 1) as *mut c_void
}

pub(crate) struct RecvPool {
    pub(crate) buf: *mut u8,
    pub(crate) mr: *mut ffi::FidMr,
    pub(crate) desc: *mut c_void,
}

impl Fabric {
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

    pub(crate) fn send_once(&self, peer: &Peer, data: &[u8]) -> Result<()> {
        let _quiet = vsci_sys::signals::quiet();
        let inner = &*self.inner;
        let slot = OpSlot::new();
        let mut locals = Vec::new();
        let desc = inner.local_desc(data.as_ptr() as *mut u8, data.len(), ffi::FI_SEND, &mut locals)?;
        let posted = inner.post(&slot, "fi_send", peer.fi_addr, |ctx| {
            // SAFETY: data stays borrowed until wait_slot has seen the
            // completion; desc's registration lives in `locals` as long.
            unsafe { ffi::vf_send(inner.ctx, data.as_ptr().cast(), data.len(), desc, peer.fi_addr, ctx) }
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
}

impl Inner {
    pub(crate) fn post_recv(&self, index: usize) -> Result<()> {
        let _quiet = vsci_sys::signals::quiet();
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
            vsci_sys::signals::lock(&self.repost).push(index);
            return Ok(());
        }
        check("fi_recv", ret)
    }

    pub(crate) fn retry_reposts(&self) {
        let pending = std::mem::take(&mut *vsci_sys::signals::lock(&self.repost));
        for index in pending {
            if let Err(e) = self.post_recv(index) {
                log::error!("fabric: re-posting receive buffer {index}: {e}");
            }
        }
    }

    pub(crate) fn pop_message(&self) -> Option<Message> {
        vsci_sys::signals::lock(&self.rx).pop_front()
    }
}
