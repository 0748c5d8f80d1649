//! Memory registration: regions peers may reach ([`MemRegion`], with
//! random keys) and the local registrations an operation's buffers need.

use super::*;

impl Fabric {
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
        let base = if self.inner.info.mr_mode & ffi::FI_MR_VIRT_ADDR != 0 { ptr as u64 } else { 0 };
        Ok(MemRegion { _inner: self.inner.clone(), mr, remote: RemoteRegion { base, key, len: len as u64 } })
    }
}

impl Inner {
    pub(crate) fn reg_raw(&self, ptr: *mut u8, len: usize, access: u64) -> Result<(*mut ffi::FidMr, u64, *mut c_void)> {
        let _quiet = vsci_sys::signals::quiet();
        let prov_key = self.info.mr_mode & ffi::FI_MR_PROV_KEY != 0;
        let mut attempt = 0;
        loop {
            let requested = if prov_key { 0 } else { random_key(self.info.mr_key_size) };
            let mut mr = std::ptr::null_mut();
            let mut key = 0;
            let mut desc = std::ptr::null_mut();
            // SAFETY: the caller guarantees ptr..ptr+len stays valid while the
            // MR exists; the out-pointers are valid locals.
            let ret =
                unsafe { ffi::vf_mr_reg(self.ctx, ptr.cast(), len, access, requested, &mut mr, &mut key, &mut desc) };
            if ret == 0 {
                return Ok((mr, key, desc));
            }
            attempt += 1;
            // A random key colliding with one in use is possible only with
            // short key sizes; draw again.
            if -ret != ffi::FI_ENOKEY || prov_key || attempt >= 8 {
                return Err(Error::Call { call: "fi_mr_reg", code: -ret, msg: strerror(-ret) });
            }
        }
    }

    /// Registers a local buffer when the provider needs descriptors for
    /// local buffers (FI_MR_LOCAL); otherwise a null descriptor is fine.
    /// Registration per call is the simple choice: tcp;ofi_rxm does not ask
    /// for FI_MR_LOCAL, so it costs nothing there.
    pub(crate) fn local_desc(
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
}

pub(crate) fn random_key(key_size: u64) -> u64 {
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

/// Registered memory; deregistered on drop, after which peers' accesses with
/// its key fail.
pub struct MemRegion {
    /// Keeps the domain open until the MR is closed.
    pub(crate) _inner: Arc<Inner>,
    pub(crate) mr: *mut ffi::FidMr,
    pub(crate) remote: RemoteRegion,
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
        f.debug_struct("MemRegion").field("len", &self.remote.len).finish()
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        let _quiet = vsci_sys::signals::quiet();
        // SAFETY: mr came from vf_mr_reg and is closed exactly once; the
        // domain is still open because we hold an Arc<Inner>.
        let ret = unsafe { ffi::vf_mr_close(self.mr) };
        if ret != 0 {
            log::warn!("fi_close(mr): {}", strerror(-ret));
        }
    }
}
