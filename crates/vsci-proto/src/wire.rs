//! Framing: one postcard-encoded message per `SOCK_SEQPACKET` datagram, with
//! up to [`MAX_FDS`] descriptors attached by `SCM_RIGHTS`.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::cmsg_space;
use nix::sys::socket::{
    self, recvmsg, sendmsg, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr,
};
use serde::{de::DeserializeOwned, Serialize};

use crate::{MAX_FDS, MAX_MESSAGE};

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("peer closed the connection")]
    Closed,
    #[error("socket error: {0}")]
    Io(#[from] nix::Error),
    #[error("message truncated (longer than {MAX_MESSAGE} bytes or too many fds)")]
    Truncated,
    #[error("undecodable message: {0}")]
    Decode(#[from] postcard::Error),
    #[error("message carries {got} file descriptors, expected {want}")]
    FdCount { got: usize, want: usize },
}

/// Create a `SOCK_SEQPACKET` socket connected to `path`.
pub fn connect(path: &Path) -> Result<OwnedFd, nix::Error> {
    let fd = socket::socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)?;
    let addr = UnixAddr::new(path)?;
    socket::connect(fd.as_raw_fd(), &addr)?;
    Ok(fd)
}

/// Bind and listen on `path` (the caller removes stale files first).
pub fn listen(path: &Path) -> Result<OwnedFd, nix::Error> {
    let fd = socket::socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)?;
    let addr = UnixAddr::new(path)?;
    socket::bind(fd.as_raw_fd(), &addr)?;
    socket::listen(&fd, socket::Backlog::new(128)?)?;
    Ok(fd)
}

/// Encode and send one message with `fds` attached.
pub fn send<T: Serialize>(sock: BorrowedFd<'_>, msg: &T, fds: &[BorrowedFd<'_>]) -> Result<(), WireError> {
    let bytes = postcard::to_stdvec(msg)?;
    if bytes.len() > MAX_MESSAGE || fds.len() > MAX_FDS {
        return Err(WireError::Truncated);
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
    let iov = [IoSlice::new(&bytes)];
    loop {
        match sendmsg::<UnixAddr>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(_) => return Ok(()),
            Err(nix::Error::EINTR) => continue,
            Err(nix::Error::EPIPE) | Err(nix::Error::ECONNRESET) => return Err(WireError::Closed),
            Err(e) => return Err(e.into()),
        }
    }
}

/// A received datagram: raw bytes plus the descriptors that came with it.
pub struct Received {
    pub bytes: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

impl Received {
    /// Decode the body. Descriptors stay in `self.fds`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, WireError> {
        Ok(postcard::from_bytes(&self.bytes)?)
    }

    /// Take exactly `n` descriptors, failing if a different number came.
    pub fn take_fds(&mut self, n: usize) -> Result<Vec<OwnedFd>, WireError> {
        if self.fds.len() != n {
            return Err(WireError::FdCount { got: self.fds.len(), want: n });
        }
        Ok(std::mem::take(&mut self.fds))
    }
}

/// Receive one datagram (blocking). Descriptors are owned at once, so they
/// are closed even if the message is then rejected.
pub fn recv(sock: impl AsFd) -> Result<Received, WireError> {
    let mut buf = vec![0u8; MAX_MESSAGE + 1];
    let mut space = cmsg_space!([RawFd; MAX_FDS]);
    loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let res = recvmsg::<UnixAddr>(sock.as_fd().as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC);
        let msg = match res {
            Ok(m) => m,
            Err(nix::Error::EINTR) => continue,
            Err(nix::Error::ECONNRESET) => return Err(WireError::Closed),
            Err(e) => return Err(e.into()),
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(list) = c {
                for raw in list {
                    // SAFETY: the kernel just installed `raw` in our table for
                    // this message; nothing else owns it yet.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
        let truncated = msg.flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
        let n = msg.bytes;
        if n == 0 && fds.is_empty() {
            return Err(WireError::Closed);
        }
        if truncated || n > MAX_MESSAGE {
            return Err(WireError::Truncated);
        }
        buf.truncate(n);
        return Ok(Received { bytes: buf, fds });
    }
}
