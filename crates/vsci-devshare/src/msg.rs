//! Messages between compute hosts and the device host. They travel as
//! data interrupts (at most 1 KiB each) over the nodes' fabric:
//!
//! - to the device's interrupt: a function's register writes (the
//!   CSR/MMIO path, carrying the assignment's token, which plays the
//!   requester-ID check of the seed's NTB LUT), or a signed request to the
//!   platform manager (the seed's doorbell/scratchpad control path);
//! - to a hypervisor's interrupt: a function's interrupt (a vector
//!   number, delivered through the remapping table) or the manager's
//!   signed reply.
//!
//! Requests and replies are signed with the cluster key (HMAC-SHA256 over
//! the whole body) and carry a timestamp and a random nonce: a VM holds no
//! key, so a request it forges or replays is refused and logged.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The device's interrupt number when none is given (`--interrupt`).
pub const DEFAULT_INTERRUPT: u32 = 0x4C44; // "LD"

/// How far a request's clock may be from the manager's.
pub const MAX_SKEW_NS: u64 = 30_000_000_000;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToDevice {
    /// Posted register writes of one function.
    Regs { func: u8, token: u64, writes: Vec<(u32, u64)> },
    /// A request to the platform manager.
    Manager(Signed),
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToHost {
    /// Function `func`'s vector `vector` fired.
    Irq { func: u8, vector: u8 },
    /// The manager's answer (or notice) to this host.
    Manager(Signed),
}

/// A signed body: `mac` = HMAC-SHA256(key, body).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Signed {
    pub body: Vec<u8>,
    pub mac: [u8; 32],
}

/// Where an answer goes: a data interrupt of a node.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    pub node: u32,
    pub interrupt: u32,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Envelope<T> {
    /// Nanoseconds since the epoch when it was made.
    pub time_ns: u64,
    pub nonce: u64,
    pub msg: T,
}

/// How the function reaches the VM's memory (the seed's two designs).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// MRIOV: one payload area (4 MiB) is all the device may touch; the
    /// driver copies packets between its socket buffers and that area.
    Bounce,
    /// MRIOV+: all of the VM's memory is granted; packets move between the
    /// device and the driver's own buffers with no copy.
    ZeroCopy,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Request {
    /// Step 1 of the seed's setup: a hypervisor asks for a function for
    /// VM `vm`, naming the virtual device's ranges: its memory (a segment
    /// of `node`), the DMA payload window in it, and where the function's
    /// interrupts go.
    Assign { vm: String, ram_segment: u32, ram_size: u64, window: (u64, u64), mode: Mode, irq: ReplyTo },
    /// The hypervisor gives the function back.
    Release { func: u8, token: u64 },
    /// An administrator takes a function back from whoever holds it.
    Revoke { func: u8 },
    /// What the device offers and who holds it.
    List,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Assigned {
    pub func: u8,
    pub mac: [u8; 6],
    /// Carried by every register write of this assignment.
    pub token: u64,
    /// The handles the function's MSI-X entries may name.
    pub handles: [u64; crate::regs::VECTORS],
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FunctionInfo {
    pub func: u8,
    pub mac: [u8; 6],
    /// (node, VM name, mode) of the holder.
    pub holder: Option<(u32, String, Mode)>,
    pub tx_packets: u64,
    pub rx_packets: u64,
    pub rx_missed: u64,
    pub faults: u64,
    pub refused: u64,
    pub irqs: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Reply {
    Assigned(Assigned),
    Done,
    List {
        device: String,
        functions: Vec<FunctionInfo>,
    },
    /// The function was taken back (a notice, not an answer).
    Revoked {
        func: u8,
        why: String,
    },
    Refused(String),
}

/// A request as the manager receives it: who sent it, where to answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RequestFrom {
    pub node: u32,
    pub reply: ReplyTo,
    pub req: Request,
}

/// A reply, naming the request it answers (its nonce; 0 for a notice).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReplyFor {
    pub nonce: u64,
    pub reply: Reply,
}

type HmacSha256 = Hmac<Sha256>;

fn mac_of(key: &[u8], body: &[u8]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(body);
    m.finalize().into_bytes().into()
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("getrandom");
    u64::from_le_bytes(b)
}

/// Sign `msg` (with a fresh timestamp and `nonce`).
pub fn sign<T: Serialize>(key: &[u8], nonce: u64, msg: T) -> Signed {
    sign_at(key, now_ns(), nonce, msg)
}

/// Sign `msg` with the timestamp `time_ns` (fixed for reproducible seeds).
pub fn sign_at<T: Serialize>(key: &[u8], time_ns: u64, nonce: u64, msg: T) -> Signed {
    let body = postcard::to_allocvec(&Envelope { time_ns, nonce, msg }).expect("serialize");
    Signed { mac: mac_of(key, &body), body }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    #[error("bad signature (not made with the cluster key)")]
    BadMac,
    #[error("malformed body")]
    Malformed,
    #[error("stale or future timestamp ({0} s off)")]
    Stale(i64),
}

/// Check the signature and timestamp, then decode. The signature is
/// checked before the body is decoded, so an unsigned body is never parsed.
pub fn open<T: for<'de> Deserialize<'de>>(key: &[u8], s: &Signed) -> Result<Envelope<T>, OpenError> {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(&s.body);
    m.verify_slice(&s.mac).map_err(|_| OpenError::BadMac)?;
    let env: Envelope<T> = postcard::from_bytes(&s.body).map_err(|_| OpenError::Malformed)?;
    let off = env.time_ns as i128 - now_ns() as i128;
    if off.unsigned_abs() > MAX_SKEW_NS as u128 {
        return Err(OpenError::Stale((off / 1_000_000_000) as i64));
    }
    Ok(env)
}

/// Nonces seen in the last [`MAX_SKEW_NS`] * 2: a replayed request (same
/// nonce) is refused.
#[derive(Default)]
pub struct ReplayGuard {
    seen: std::collections::HashMap<u64, u64>,
}

impl ReplayGuard {
    /// True if `nonce` is new (and remembers it).
    pub fn fresh(&mut self, nonce: u64) -> bool {
        let now = now_ns();
        self.seen.retain(|_, t| now.saturating_sub(*t) < 2 * MAX_SKEW_NS);
        self.seen.insert(nonce, now).is_none()
    }
}

pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    postcard::to_allocvec(m).expect("serialize")
}

pub fn decode<T: for<'de> Deserialize<'de>>(b: &[u8]) -> Option<T> {
    postcard::from_bytes(b).ok()
}

/// The cluster key from its file, read as vscid reads it
/// (`vsci_proto::cluster_key`).
pub fn read_key(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read the key file {}: {e}", path.display()))?;
    vsci_proto::cluster_key(&raw).map_err(|e| anyhow::anyhow!("the key file {} {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_round_trip_and_forgery() {
        let key = b"0123456789abcdef0123";
        let s = sign(key, 5, Request::List);
        let e: Envelope<Request> = open(key, &s).unwrap();
        assert_eq!((e.nonce, e.msg), (5, Request::List));
        assert_eq!(open::<Request>(b"another key of 20 b", &s).unwrap_err(), OpenError::BadMac);
        let mut t = s.clone();
        t.body[0] ^= 1;
        assert_eq!(open::<Request>(key, &t).unwrap_err(), OpenError::BadMac);
    }

    #[test]
    fn the_key_file_reads_as_vscid_reads_it() {
        let f = std::env::temp_dir().join(format!("vsci-devshare-key-{}", std::process::id()));
        // 16 hex digits: vscid's key, refused here when hex was decoded.
        std::fs::write(&f, "0123456789abcdef\n").unwrap();
        assert_eq!(read_key(&f).unwrap(), vsci_proto::cluster_key(b"0123456789abcdef\n").unwrap());
        std::fs::write(&f, "short\n").unwrap();
        assert!(read_key(&f).is_err());
        std::fs::remove_file(&f).unwrap();
    }

    #[test]
    fn replay_is_refused() {
        let mut g = ReplayGuard::default();
        assert!(g.fresh(9));
        assert!(!g.fresh(9));
        assert!(g.fresh(10));
    }

    #[test]
    fn fits_a_data_interrupt() {
        let s = sign(
            b"0123456789abcdef",
            1,
            RequestFrom {
                node: 3,
                reply: ReplyTo { node: 3, interrupt: 7 },
                req: Request::Assign {
                    vm: "x".repeat(64),
                    ram_segment: 1,
                    ram_size: 1 << 30,
                    window: (0, 1 << 30),
                    mode: Mode::ZeroCopy,
                    irq: ReplyTo { node: 3, interrupt: 7 },
                },
            },
        );
        assert!(encode(&ToDevice::Manager(s)).len() < 1024);
        let w: Vec<(u32, u64)> = (0..40).map(|i| (i, u64::MAX)).collect();
        assert!(encode(&ToDevice::Regs { func: 1, token: u64::MAX, writes: w }).len() < 1024);
    }
}
