//! The control protocol spoken between `vscid` and its clients (`libsisci`,
//! the `vsci` CLI).
//!
//! Messages travel over a `SOCK_SEQPACKET` UNIX socket: one datagram is one
//! message, so file descriptors passed with `SCM_RIGHTS` are always attached
//! to the message they belong to and a truncated or oversized message is
//! detectable. Bodies are `postcard`-encoded serde enums; anything that does
//! not decode is a protocol violation and the peer is dropped.
//!
//! Only control traffic uses this socket. Segment memory and interrupt
//! state are shared as memfds/eventfds and never pass through the daemon.

pub mod error;
pub mod fuzz_input;
pub mod guest;
pub mod intr;
pub mod msg;
pub mod peer;
pub mod wire;

pub use error::SciError;
pub use msg::*;

/// Bumped whenever a message changes shape, or the interrupt page's layout
/// (`intr`), which the daemon and every client share: 4 moved the data ring
/// behind the control words and made a zero-filled ring empty; 5 added
/// reflective-memory (broadcast) segments; 6 added `Close`; 7 packed
/// interrupts into arena chunks (a slot's place and generation) and
/// added lending memory between nodes (`Borrow`, `Lend`, `ReturnLoan`).
pub const PROTOCOL_VERSION: u32 = 7;

/// Largest message either side accepts, in bytes.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Most file descriptors carried by one message.
pub const MAX_FDS: usize = 4;

/// Socket path used when `VSCI_SOCKET` is not set.
pub const DEFAULT_SOCKET: &str = "/tmp/vscid.sock";

/// The environment variable naming the daemon's control socket.
pub const SOCKET_ENV: &str = "VSCI_SOCKET";

/// Resolve the control socket path the way every client does.
pub fn socket_path() -> std::path::PathBuf {
    std::env::var_os(SOCKET_ENV)
        .filter(|v| !v.is_empty())
        .map(Into::into)
        .unwrap_or_else(|| DEFAULT_SOCKET.into())
}

/// A size in bytes with an optional K/M/G suffix (powers of 1024), as
/// flags and the cluster file write them ("16G", "512M", "4096").
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)).ok_or_else(|| format!("bad size {s:?}"))
}
