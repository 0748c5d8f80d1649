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
/// added lending memory between nodes (`Borrow`, `Lend`, `ReturnLoan`);
/// 8 moved what only a guest and its host side say to each other
/// (`FetchRemote`, `ShipRemote`, `DmaStart`, `DmaAbort`, `DmaDone`, a
/// connection's `proxied` mark) out of these messages into `guest`'s.
pub const PROTOCOL_VERSION: u32 = 8;

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
    std::env::var_os(SOCKET_ENV).filter(|v| !v.is_empty()).map(Into::into).unwrap_or_else(|| DEFAULT_SOCKET.into())
}

/// Smallest cluster key accepted, in bytes.
pub const MIN_CLUSTER_KEY: usize = 16;

/// The cluster key a key file holds (docs/cluster.md): its bytes with
/// surrounding ASCII whitespace (a trailing newline) left out, at least
/// [`MIN_CLUSTER_KEY`] of them, taken as they are (a key written in hex is
/// its hex text). The one reading of a key file: vscid's node links
/// (`cluster.rs`) and `vsci device`'s signed requests
/// (`vsci_devshare::msg::read_key`) both use it, so a key one accepts the
/// other accepts too, and they agree on its bytes.
pub fn cluster_key(file: &[u8]) -> Result<Vec<u8>, String> {
    let key = file.trim_ascii();
    if key.len() < MIN_CLUSTER_KEY {
        return Err(format!("holds {} bytes; at least {MIN_CLUSTER_KEY} are required", key.len()));
    }
    Ok(key.to_vec())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What vscid (which took the trimmed bytes) and `vsci device` (which
    /// hex-decoded a hex file and kept any other untrimmed) each accepted:
    /// now one reading for both.
    #[test]
    fn a_key_file_reads_one_way() {
        let ok: &[(&[u8], &[u8])] = &[
            // A raw key with the newline an editor or `echo` adds.
            (b"0123456789abcdef0123\n", b"0123456789abcdef0123"),
            (b"  0123456789abcdef0123 \r\n\t", b"0123456789abcdef0123"),
            // Hex text is the key as written (vsci device used to decode it
            // to half as many bytes, and refused 16..31 hex digits).
            (b"00112233445566778899aabbccddeeff\n", b"00112233445566778899aabbccddeeff"),
            (b"0123456789abcdef", b"0123456789abcdef"),
            // Binary keys: whitespace inside is key.
            (
                b"\x01\x02 \x03\n\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10",
                b"\x01\x02 \x03\n\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10",
            ),
        ];
        for (file, key) in ok {
            assert_eq!(cluster_key(file).as_deref(), Ok(*key), "{file:?}");
        }
        for bad in [&b""[..], b" \n\n ", b"0123456789abcde\n", b"  short  "] {
            assert!(cluster_key(bad).is_err(), "{bad:?}");
        }
    }
}
