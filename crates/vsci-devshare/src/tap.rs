//! A TAP interface: the device's wire on the device host, and a process
//! VM's own NIC (its kernel's side of the virtual device).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use anyhow::{Context as _, Result};
use vm_memory::VolatileSlice;

const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

nix::ioctl_write_int!(tunsetiff, b'T', 202);

pub struct Tap {
    fd: OwnedFd,
    pub name: String,
}

impl Tap {
    /// Create (or attach to) TAP interface `name` in this process's network
    /// namespace: frames without a packet-information header.
    pub fn open(name: &str) -> Result<Tap> {
        anyhow::ensure!(!name.is_empty() && name.len() < libc::IFNAMSIZ, "interface name {name:?}: 1 to 15 bytes");
        let raw = nix::fcntl::open(
            "/dev/net/tun",
            nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .context("cannot open /dev/net/tun")?;
        // SAFETY: open returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: IFF_TAP | IFF_NO_PI, _pad: [0; 22] };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads (and may write the chosen name into) a
        // struct ifreq; `req` is laid out as one and outlives the call.
        unsafe { tunsetiff(fd.as_raw_fd(), &mut req as *mut IfReq as u64) }
            .with_context(|| format!("cannot create TAP {name} (needs CAP_NET_ADMIN)"))?;
        Ok(Tap { fd, name: name.to_string() })
    }

    /// One frame into `buf`; Ok(None) when none is waiting (nonblocking).
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>> {
        self.recv_volatile(&VolatileSlice::from(buf))
    }

    /// One frame into memory another party may write too (a VM's buffer,
    /// which its device reads): never a Rust slice.
    pub fn recv_volatile(&self, buf: &VolatileSlice<'_>) -> Result<Option<usize>> {
        let p = buf.ptr_guard_mut();
        // SAFETY: read(2) writes at most `buf.len()` bytes at the slice's
        // address, all of which the VolatileSlice covers; no Rust reference
        // to them exists.
        let r = unsafe { libc::read(self.fd.as_raw_fd(), p.as_ptr().cast(), buf.len()) };
        match nix::errno::Errno::result(r) {
            Ok(n) => Ok(Some(n as usize)),
            Err(nix::errno::Errno::EAGAIN) => Ok(None),
            Err(nix::errno::Errno::EINTR) => Ok(None),
            Err(e) => Err(e).context("read from the TAP"),
        }
    }

    /// Send one frame. A full queue drops it, as a wire would.
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        sent(nix::unistd::write(&self.fd, frame))
    }

    /// [`send`](Self::send) from memory another party may write too.
    pub fn send_volatile(&self, frame: &VolatileSlice<'_>) -> Result<()> {
        let p = frame.ptr_guard();
        // SAFETY: write(2) reads `frame.len()` bytes at the slice's
        // address, all of which the VolatileSlice covers.
        let r = unsafe { libc::write(self.fd.as_raw_fd(), p.as_ptr().cast(), frame.len()) };
        sent(nix::errno::Errno::result(r).map(|n| n as usize))
    }

    pub fn set_nonblocking(&self, on: bool) -> Result<()> {
        let fl = nix::fcntl::fcntl(self.fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
        let mut fl = nix::fcntl::OFlag::from_bits_truncate(fl);
        fl.set(nix::fcntl::OFlag::O_NONBLOCK, on);
        nix::fcntl::fcntl(self.fd.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(fl))?;
        Ok(())
    }

    /// Wait up to `ms` for a frame; true if one is waiting.
    pub fn wait_readable(&self, ms: u16) -> bool {
        let mut p = [nix::poll::PollFd::new(self.fd.as_fd(), nix::poll::PollFlags::POLLIN)];
        matches!(nix::poll::poll(&mut p, nix::poll::PollTimeout::from(ms)), Ok(n) if n > 0)
    }
}

/// A frame's send: a full queue drops it, as a wire would.
fn sent(r: nix::Result<usize>) -> Result<()> {
    match r {
        Ok(_) | Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::ENOBUFS) => Ok(()),
        // The interface is down (EIO): frames are dropped, as by a NIC
        // whose link is down.
        Err(nix::errno::Errno::EIO) => Ok(()),
        Err(e) => Err(e).context("write to the TAP"),
    }
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `ip link set dev NAME address MAC up` and, if given, `ip addr add` (thin
/// glue: iproute2 is what configures interfaces here).
pub fn configure(name: &str, mac: Option<&str>, addr: Option<&str>) -> Result<()> {
    let mut link = vec!["link", "set", "dev", name];
    if let Some(m) = mac {
        link.extend(["address", m]);
    }
    link.push("up");
    ip(&link)?;
    if let Some(a) = addr {
        ip(&["addr", "add", a, "dev", name])?;
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("ip").args(args).output().context("cannot run ip (iproute2)")?;
    anyhow::ensure!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}
