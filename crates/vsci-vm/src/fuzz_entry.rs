//! Entry point for the `guest_control` fuzz target (`fuzz/`) and its
//! corpus replay (`crates/vsci-fuzz`): what a guest writes into a session
//! of its control region, read by the agent's own code.
//!
//! The host side copies each record out of the guest → host ring
//! (`Session::recv`, which must survive any head, tail and length words),
//! decodes it as a `GuestMsg`, screens it (`agent::screen`), names a
//! Hello's client (`agent::guest_client_name`) and checks a DMA request's
//! entries against the program's segments (`dma::check`). Requests that
//! go on to vscid are the `client_request` target's.

use std::sync::{Arc, OnceLock};

use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use vsci_proto::fuzz_input::split;
use vsci_proto::guest::{
    GuestMsg, GuestRequest, Role, Session, SESSION_SIZE, TO_HOST_CAP, TO_HOST_DATA, TO_HOST_HEAD, TO_HOST_TAIL,
};
use vsci_proto::Request;

use crate::agent::{guest_client_name, screen};
use crate::dma::{self, Mem, Target};

/// A session area, aligned as the region's sessions are.
#[repr(C, align(4096))]
struct Area([u8; SESSION_SIZE]);

/// Sizes of the segments a fuzzed DMA request names.
const LOCAL_SIZE: u64 = 64 << 10;
const REMOTE_SIZE: u64 = 1 << 20;

/// The program's own local segment and a connected one, made once: a DMA
/// check only reads their sizes.
fn dma_ends() -> &'static (Mem, Target) {
    static ENDS: OnceLock<(Mem, Target)> = OnceLock::new();
    ENDS.get_or_init(|| {
        let memfd = |size: u64| {
            let fd = memfd_create(c"vsci-fuzz", MemFdCreateFlag::MFD_CLOEXEC).expect("memfd_create works");
            nix::unistd::ftruncate(&fd, size as i64).expect("ftruncate of a new memfd works");
            fd
        };
        (Mem::new(memfd(LOCAL_SIZE), LOCAL_SIZE), Target::Local(Arc::new(Mem::new(memfd(REMOTE_SIZE), REMOTE_SIZE))))
    })
}

/// Bytes a guest writes into its session (`guest_control` target).
///
/// An even first byte: the rest is the raw ring as a hostile guest leaves
/// it: the head and tail words (u32 LE each), then the ring's data. An
/// odd one: the rest is records (cut by `split`) the guest sends through
/// its own side of the ring, so that well-formed rings carry arbitrary
/// records. The host then takes records until the ring is empty or
/// reported corrupt, as `Worker::take_requests` does, and the agent's
/// checks run on each.
pub fn guest_control(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut area = Box::new(Area([0; SESSION_SIZE]));
    if mode % 2 == 0 {
        let word = |i: usize| rest.get(i..i + 4).map_or(0, |w| u32::from_le_bytes(w.try_into().expect("4 bytes")));
        let (head, tail) = (word(0), word(4));
        let ring = rest.get(8..).unwrap_or_default();
        let n = ring.len().min(TO_HOST_CAP);
        area.0[TO_HOST_DATA..TO_HOST_DATA + n].copy_from_slice(&ring[..n]);
        area.0[TO_HOST_HEAD..TO_HOST_HEAD + 4].copy_from_slice(&head.to_le_bytes());
        area.0[TO_HOST_TAIL..TO_HOST_TAIL + 4].copy_from_slice(&tail.to_le_bytes());
    }
    // From here on the area is only reached through the two views.
    let base = area.0.as_mut_ptr();
    // SAFETY: `area` is SESSION_SIZE bytes, 4096-aligned, and outlives both
    // views (they are dropped at the end of this function, before it).
    let (guest, host) = unsafe { (Session::new(base, Role::Guest), Session::new(base, Role::Host)) };
    if mode % 2 == 1 {
        for rec in split(rest) {
            if guest.send(rec).is_err() {
                break;
            }
        }
    }
    let mut hello_done = false;
    while let Ok(Some(rec)) = host.recv() {
        let Ok(GuestMsg { req, .. }) = postcard::from_bytes::<GuestMsg>(&rec) else { break };
        if screen(hello_done, &req).is_err() {
            break; // the agent breaks the session
        }
        match req {
            GuestRequest::Node(Request::Hello { name, .. }) => {
                let full = guest_client_name("fuzz-vm", &name);
                assert!(full.len() <= vsci_proto::MAX_NAME && !full.chars().any(char::is_control));
                hello_done = true;
            }
            GuestRequest::DmaStart { entries, .. } => {
                let (local, remote) = dma_ends();
                if dma::check(local, remote, &dma::pieces(&entries)).is_ok() {
                    // What the engine will walk must lie inside both segments.
                    assert!(entries.iter().all(|&(size, l, r)| l + size <= LOCAL_SIZE && r + size <= REMOTE_SIZE));
                }
            }
            _ => {}
        }
    }
}
