//! Page layer: which pages of a mapping were written since the last check.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::sys;
use crate::{page_size, Error, Result};

/// Environment variable that selects the tracking mechanism when a tracker is
/// created with [`ModeRequest::Auto`]: `compare` forces the fallback, `wp`
/// requires write-protect tracking (creation fails without it), `auto` (or
/// unset) picks write-protect when the kernel offers it.
pub const ENV_VAR: &str = "VSCI_DIRTY";

/// How dirty pages are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// userfaultfd asynchronous write-protect + `PAGEMAP_SCAN`: exactly the
    /// pages written through the tracked mapping since the previous scan.
    WriteProtect,
    /// Fallback: every page is a candidate on every check; the byte layer
    /// ([`crate::DiffTracker`]) compares them all against its twin.
    Compare,
}

impl Mode {
    /// `"wp"` or `"compare"` (the values accepted by [`ENV_VAR`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::WriteProtect => "wp",
            Mode::Compare => "compare",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the caller asks for when creating a tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModeRequest {
    /// Honour [`ENV_VAR`]; otherwise write-protect if available, else compare.
    #[default]
    Auto,
    /// Write-protect or an error (ignores the environment).
    WriteProtect,
    /// Compare fallback (ignores the environment).
    Compare,
}

/// Knobs of the write-protect set-up; only for experiments and tests (the
/// defaults are what the probes on Linux 6.18 showed to be needed).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct WpOptions {
    /// Ask for `UFFD_FEATURE_WP_UNPOPULATED` (not needed for shmem).
    pub wp_unpopulated: bool,
    /// Write-protect the whole range with `UFFDIO_WRITEPROTECT` after
    /// registering. Some initial protection is needed (this or
    /// `baseline_scan`): otherwise every page that is merely read, or was
    /// written before creation, is reported as written (false positives).
    pub initial_protect: bool,
    /// Pass `UFFD_USER_MODE_ONLY` to `userfaultfd()` (needed when not root).
    pub user_mode_only: bool,
    /// Number of `page_region` slots handed to one `PAGEMAP_SCAN` call.
    pub vec_capacity: usize,
    /// Do a first scan-and-protect at creation (baseline: nothing dirty).
    /// When false, only a read-only scan checks that `PAGEMAP_SCAN` works.
    pub baseline_scan: bool,
}

impl Default for WpOptions {
    fn default() -> Self {
        WpOptions {
            wp_unpopulated: false,
            initial_protect: true,
            user_mode_only: true,
            vec_capacity: 256,
            baseline_scan: true,
        }
    }
}

/// Report written pages, write-protect them again, and fail if part of the
/// range is not registered for async write-protect.
const WP_SCAN_FLAGS: u64 = sys::PM_SCAN_WP_MATCHING | sys::PM_SCAN_CHECK_WPASYNC;

struct Wp {
    /// Keeps the userfaultfd context (and with it the registration) alive;
    /// closing it unregisters the range and drops the write-protect bits.
    _uffd: OwnedFd,
    pagemap: File,
    regions: Vec<sys::PageRegion>,
}

/// Tracks which pages of a page-aligned mapping were written since the last
/// [`take_dirty`](Self::take_dirty).
///
/// In [`Mode::WriteProtect`] the range is registered with a userfaultfd in
/// async write-protect mode: the first store to a protected page takes a
/// short in-kernel fault that clears the page's uffd-wp bit (no handler thread,
/// no wake-up); `take_dirty` asks the kernel (`PAGEMAP_SCAN` with
/// `PM_SCAN_WP_MATCHING`) for the pages whose bit is clear and re-protects
/// exactly those, atomically per page under the page-table lock, with the TLB
/// flushed before the ioctl returns.
///
/// Only stores made through *this* mapping (this process's page tables) are
/// seen, whether made by user code or by the kernel on the process's behalf
/// (e.g. `read(2)` into the buffer). Stores through other mappings of the same
/// memfd (another process, a second mapping, a VM) are not.
pub struct PageTracker {
    base: usize,
    len: usize,
    span: usize,
    page: usize,
    wp: Option<Wp>,
}

// SAFETY: the tracker holds only an address range (never dereferenced by
// this type) and file descriptors; the ioctls it issues are valid from any
// thread of the process.
unsafe impl Send for PageTracker {}

fn os_err(op: &'static str) -> Error {
    Error::Os {
        op,
        source: io::Error::last_os_error(),
    }
}

fn env_request() -> ModeRequest {
    match std::env::var(ENV_VAR) {
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "compare" | "cmp" | "fallback" => ModeRequest::Compare,
            "wp" | "writeprotect" | "write-protect" | "uffd" => ModeRequest::WriteProtect,
            "" | "auto" => ModeRequest::Auto,
            other => {
                log::warn!("{ENV_VAR}={other:?} not understood (auto|wp|compare); using auto");
                ModeRequest::Auto
            }
        },
        Err(_) => ModeRequest::Auto,
    }
}

impl PageTracker {
    /// Track `len` bytes at `addr` (page-aligned; `len` is rounded up to whole
    /// pages for tracking, ranges reported are clipped to `len`). The mode is
    /// chosen as for [`ModeRequest::Auto`].
    ///
    /// The range should be a `MAP_SHARED` mapping of a memfd (shmem); anonymous
    /// private memory works too. The tracker must be dropped before the range
    /// is unmapped or remapped.
    pub fn new(addr: *mut u8, len: usize) -> Result<PageTracker> {
        Self::with_mode(addr, len, ModeRequest::Auto)
    }

    /// Like [`new`](Self::new) with an explicit mode request.
    pub fn with_mode(addr: *mut u8, len: usize, req: ModeRequest) -> Result<PageTracker> {
        Self::with_options(addr, len, req, WpOptions::default())
    }

    #[doc(hidden)]
    pub fn with_options(
        addr: *mut u8,
        len: usize,
        req: ModeRequest,
        opts: WpOptions,
    ) -> Result<PageTracker> {
        let page = page_size();
        let base = addr as usize;
        if base == 0 || base & (page - 1) != 0 {
            return Err(Error::Unaligned { addr: base, page });
        }
        if len == 0 {
            return Err(Error::EmptyRange);
        }
        let span = len
            .checked_next_multiple_of(page)
            .ok_or(Error::EmptyRange)?;
        base.checked_add(span).ok_or(Error::EmptyRange)?;
        let req = if req == ModeRequest::Auto {
            env_request()
        } else {
            req
        };
        let mut t = PageTracker {
            base,
            len,
            span,
            page,
            wp: None,
        };
        match req {
            ModeRequest::Compare => {
                log::debug!("vsci-dirty: compare mode requested for {len} bytes at {base:#x}");
            }
            ModeRequest::WriteProtect => {
                t.wp = Some(t.setup_wp(opts)?);
            }
            ModeRequest::Auto => match t.setup_wp(opts) {
                Ok(wp) => t.wp = Some(wp),
                Err(e) => {
                    log::info!(
                        "vsci-dirty: write-protect tracking unavailable ({e}); using compare mode"
                    );
                }
            },
        }
        Ok(t)
    }

    fn setup_wp(&self, opts: WpOptions) -> Result<Wp> {
        if !sys::WP_SUPPORTED_ARCH {
            return Err(Error::WpUnavailable("architecture not supported".into()));
        }
        let mut flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        if opts.user_mode_only {
            flags |= sys::UFFD_USER_MODE_ONLY;
        }
        // SAFETY: userfaultfd(2) takes one integer flags argument and returns a
        // new file descriptor or -1; no memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if fd < 0 {
            return Err(os_err("userfaultfd"));
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };

        let mut api = sys::UffdioApi {
            api: sys::UFFD_API,
            features: sys::UFFD_FEATURE_WP_ASYNC
                | if opts.wp_unpopulated {
                    sys::UFFD_FEATURE_WP_UNPOPULATED
                } else {
                    0
                },
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes one `struct uffdio_api`, which
        // `api` is (repr(C), size checked at compile time), live for the call.
        let r = unsafe { libc::ioctl(uffd.as_raw_fd(), sys::UFFDIO_API as _, &mut api) };
        if r < 0 {
            return Err(os_err("UFFDIO_API(WP_ASYNC)"));
        }
        if api.features & sys::UFFD_FEATURE_WP_ASYNC == 0 {
            return Err(Error::WpUnavailable(
                "kernel lacks UFFD_FEATURE_WP_ASYNC".into(),
            ));
        }

        let mut reg = sys::UffdioRegister {
            range: sys::UffdioRange {
                start: self.base as u64,
                len: self.span as u64,
            },
            mode: sys::UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one `struct uffdio_register`;
        // it only changes how the kernel handles faults in the range, never the
        // memory's contents.
        let r = unsafe { libc::ioctl(uffd.as_raw_fd(), sys::UFFDIO_REGISTER as _, &mut reg) };
        if r < 0 {
            return Err(os_err("UFFDIO_REGISTER(WP)"));
        }

        if opts.initial_protect {
            let mut wp = sys::UffdioWriteprotect {
                range: sys::UffdioRange {
                    start: self.base as u64,
                    len: self.span as u64,
                },
                mode: sys::UFFDIO_WRITEPROTECT_MODE_WP,
            };
            // SAFETY: UFFDIO_WRITEPROTECT reads and writes one
            // `struct uffdio_writeprotect`; it sets uffd-wp bits/markers on the
            // registered range, contents are untouched.
            let r =
                unsafe { libc::ioctl(uffd.as_raw_fd(), sys::UFFDIO_WRITEPROTECT as _, &mut wp) };
            if r < 0 {
                return Err(os_err("UFFDIO_WRITEPROTECT"));
            }
        }

        let pagemap = File::open("/proc/self/pagemap").map_err(|source| Error::Os {
            op: "open /proc/self/pagemap",
            source,
        })?;
        let mut wp = Wp {
            _uffd: uffd,
            pagemap,
            regions: vec![sys::PageRegion::default(); opts.vec_capacity.max(1)],
        };
        // First scan: proves PAGEMAP_SCAN works (ENOTTY/EINVAL on older
        // kernels) and sets the baseline: everything written so far is clean.
        let mut scratch = Vec::new();
        let flags = if opts.baseline_scan { WP_SCAN_FLAGS } else { 0 };
        Self::scan(self.base, self.span, self.len, &mut wp, &mut scratch, flags)
            .map_err(|e| Error::WpUnavailable(format!("PAGEMAP_SCAN: {e}")))?;
        log::debug!(
            "vsci-dirty: write-protect tracking on {} bytes at {:#x} (features {:#x})",
            self.len,
            self.base,
            api.features
        );
        Ok(wp)
    }

    /// The mechanism in use.
    pub fn mode(&self) -> Mode {
        if self.wp.is_some() {
            Mode::WriteProtect
        } else {
            Mode::Compare
        }
    }

    /// Start address of the tracked range.
    pub fn addr(&self) -> *mut u8 {
        self.base as *mut u8
    }

    /// Length given at creation.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (creation rejects empty ranges); for clippy.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The page size ranges are aligned to.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// Replace `out` by the page-granular `(offset, len)` ranges (ascending,
    /// non-adjacent, clipped to the tracked length) written since the previous
    /// call (or since creation), and re-arm tracking on them.
    ///
    /// In [`Mode::Compare`] this is always the whole range.
    ///
    /// A store that lands on a page after this call re-protected it is
    /// reported by the next call; a store that completed before the call
    /// returned is visible to any load issued after the call returns.
    pub fn take_dirty(&mut self, out: &mut Vec<(usize, usize)>) -> Result<()> {
        out.clear();
        match self.wp.as_mut() {
            None => {
                out.push((0, self.len));
                Ok(())
            }
            Some(wp) => Self::scan(self.base, self.span, self.len, wp, out, WP_SCAN_FLAGS),
        }
    }

    /// Has any page of the range been written since the last
    /// [`take_dirty`](Self::take_dirty)? Nothing is re-protected. Always
    /// `false` in [`Mode::Compare`], which cannot tell.
    pub fn any_written(&mut self) -> Result<bool> {
        let mut out = Vec::new();
        match self.wp.as_mut() {
            None => Ok(false),
            Some(wp) => {
                Self::scan(self.base, self.span, self.len, wp, &mut out, sys::PM_SCAN_CHECK_WPASYNC)?;
                Ok(!out.is_empty())
            }
        }
    }

    fn scan(
        base: usize,
        span: usize,
        len: usize,
        wp: &mut Wp,
        out: &mut Vec<(usize, usize)>,
        flags: u64,
    ) -> Result<()> {
        let end = (base + span) as u64;
        let mut start = base as u64;
        while start < end {
            let mut arg = sys::PmScanArg {
                size: std::mem::size_of::<sys::PmScanArg>() as u64,
                flags,
                start,
                end,
                walk_end: 0,
                vec: wp.regions.as_mut_ptr() as u64,
                vec_len: wp.regions.len() as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: sys::PAGE_IS_WRITTEN,
                category_anyof_mask: 0,
                return_mask: sys::PAGE_IS_WRITTEN,
            };
            // SAFETY: PAGEMAP_SCAN reads/writes one `struct pm_scan_arg` (`arg`)
            // and writes at most `vec_len` `struct page_region`s to `vec`, which
            // points at `wp.regions` (exactly that many elements, exclusively
            // borrowed for the call).
            let n =
                unsafe { libc::ioctl(wp.pagemap.as_raw_fd(), sys::PAGEMAP_SCAN as _, &mut arg) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(Error::Os {
                    op: "PAGEMAP_SCAN",
                    source: e,
                });
            }
            let n = (n as usize).min(wp.regions.len());
            for r in &wp.regions[..n] {
                let s = (r.start as usize).saturating_sub(base);
                let e = ((r.end as usize).saturating_sub(base)).min(len);
                if e <= s {
                    continue;
                }
                match out.last_mut() {
                    Some(last) if last.0 + last.1 == s => last.1 = e - last.0,
                    _ => out.push((s, e - s)),
                }
            }
            if arg.walk_end >= end {
                break;
            }
            if arg.walk_end <= start {
                return Err(Error::Os {
                    op: "PAGEMAP_SCAN",
                    source: io::Error::other(format!(
                        "no progress at {start:#x} (walk_end {:#x})",
                        arg.walk_end
                    )),
                });
            }
            start = arg.walk_end;
        }
        Ok(())
    }
}

impl std::fmt::Debug for PageTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTracker")
            .field("addr", &format_args!("{:#x}", self.base))
            .field("len", &self.len)
            .field("mode", &self.mode())
            .finish()
    }
}
