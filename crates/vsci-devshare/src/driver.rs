//! A process VM: an untrusted process that holds only its memory (fd 3)
//! and its channel to its hypervisor (fd 4), and runs a user-space driver
//! for its function, bridging it to a TAP interface of its own network
//! namespace, where the VM's "kernel" (that namespace's TCP/IP stack, and
//! real programs such as iperf3) sends and receives.
//!
//! The driver works like a VF driver: two descriptor rings and their
//! buffers in its own memory, register writes to post them, interrupts
//! (or a poll) to learn the device wrote descriptors back.
//! - Zero-copy mode (MRIOV+): frames are read from the TAP straight into
//!   the buffer the descriptor names, and written to the TAP straight out
//!   of the buffer the device filled.
//! - Bounce mode (MRIOV): the device may touch only the payload area, so
//!   frames go through the driver's private buffers and are copied into
//!   and out of that area: the seed's extra copy.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context as _, Result};
use nix::sys::socket::MsgFlags;

use crate::hyp::{self, VmConfig};
use crate::mem::Mapping;
use crate::msg::{self, Mode};
use crate::regs::{self, Desc, DD, DESC, ERR};
use crate::tap::Tap;

pub const RING: u32 = 256;
pub const BUF: usize = 2048;

/// What every driver of a function has: its memory, its channel, its config.
pub struct Vm {
    pub cfg: VmConfig,
    pub mem: Mapping,
    pub chan: OwnedFd,
}

impl Vm {
    /// Take fds `ram_fd` and `chan_fd` (given by the hypervisor) and wait
    /// for the config.
    pub fn attach(ram_fd: i32, chan_fd: i32) -> Result<Vm> {
        // SAFETY: the hypervisor started us with these descriptors open and
        // nothing else in this process owns them.
        let (ram, chan) = unsafe { (OwnedFd::from_raw_fd(ram_fd), OwnedFd::from_raw_fd(chan_fd)) };
        let mut buf = vec![0u8; 4096];
        let n = hyp::recv(&chan, &mut buf, MsgFlags::empty()).context("waiting for the hypervisor's config")?;
        let cfg: VmConfig = msg::decode(&buf[..n]).ok_or_else(|| anyhow!("the hypervisor's config is malformed"))?;
        let mem = Mapping::new(ram.as_fd(), cfg.ram_size as usize)?;
        Ok(Vm { cfg, mem, chan })
    }

    /// Posted register writes, in order (messages of at most
    /// [`hyp::MAX_WRITES`]).
    pub fn write_regs(&self, w: &[(u32, u64)]) -> Result<()> {
        for c in w.chunks(hyp::MAX_WRITES) {
            hyp::send(&self.chan, &regs::encode_writes(c)).context("the hypervisor is gone")?;
        }
        Ok(())
    }

    pub fn desc(&self, ring: u64, idx: u32) -> Desc {
        self.mem.desc(ring, RING, idx)
    }

    pub fn set_desc(&self, ring: u64, idx: u32, d: Desc) {
        self.mem.set_desc(ring, RING, idx, d)
    }

    /// Wait up to `ms` for interrupts; the vectors that fired (empty on
    /// timeout). Err when the hypervisor is gone.
    pub fn interrupts(&self, ms: u16, tap: Option<&Tap>) -> Result<(Vec<u8>, bool)> {
        let mut fds = vec![nix::poll::PollFd::new(self.chan.as_fd(), nix::poll::PollFlags::POLLIN)];
        if let Some(t) = tap {
            fds.push(nix::poll::PollFd::new(t.as_fd(), nix::poll::PollFlags::POLLIN));
        }
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms));
        let tap_ready = fds.get(1).and_then(|f| f.revents()).is_some_and(|r| r.contains(nix::poll::PollFlags::POLLIN));
        let mut v = Vec::new();
        let mut b = [0u8; 64];
        loop {
            match hyp::recv(&self.chan, &mut b, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => bail!("the hypervisor is gone"),
                Ok(n) => v.extend_from_slice(&b[..n]),
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(e) => return Err(e).context("the hypervisor's channel"),
            }
        }
        Ok((v, tap_ready))
    }
}

/// Where the driver keeps things in its memory.
pub struct Layout {
    pub tx_ring: u64,
    pub rx_ring: u64,
    /// Buffers the device reads and writes: `2 * RING` of [`BUF`] bytes
    /// (TX first).
    pub dma_bufs: u64,
    /// The driver's private socket buffers (bounce mode only: outside the
    /// payload area).
    pub private_bufs: u64,
}

impl Layout {
    pub fn of(cfg: &VmConfig) -> Result<Layout> {
        let need = 2 * RING as u64 * DESC as u64 + 2 * RING as u64 * BUF as u64;
        anyhow::ensure!(
            cfg.window.1 >= need,
            "the DMA window ({} bytes) cannot hold the rings and buffers ({need})",
            cfg.window.1
        );
        let (w0, _) = cfg.window;
        Ok(match cfg.mode {
            // Buffers anywhere in memory (the device reaches all of it):
            // a megabyte in, as a kernel's socket buffers would be.
            Mode::ZeroCopy => Layout { tx_ring: w0, rx_ring: w0 + 4096, dma_bufs: 1 << 20, private_bufs: 1 << 20 },
            Mode::Bounce => Layout { tx_ring: w0, rx_ring: w0 + 4096, dma_bufs: w0 + 8192, private_bufs: 0 },
        })
    }

    pub fn tx_buf(&self, idx: u32) -> u64 {
        self.dma_bufs + u64::from(idx % RING) * BUF as u64
    }

    pub fn rx_buf(&self, idx: u32) -> u64 {
        self.dma_bufs + (u64::from(RING) + u64::from(idx % RING)) * BUF as u64
    }

    pub fn private_tx(&self, idx: u32) -> u64 {
        self.private_bufs + u64::from(idx % RING) * BUF as u64
    }

    pub fn private_rx(&self, idx: u32) -> u64 {
        self.private_bufs + (u64::from(RING) + u64::from(idx % RING)) * BUF as u64
    }
}

pub struct DriverOptions {
    pub ram_fd: i32,
    pub chan_fd: i32,
    pub tap: String,
    pub address: Option<String>,
    /// Drop to this user once the TAP is open.
    pub user: Option<String>,
}

#[derive(Default, Debug)]
pub struct DriverStats {
    pub tx: u64,
    pub rx: u64,
    pub tx_errors: u64,
    pub rx_errors: u64,
    pub irqs: u64,
    pub copies: u64,
}

pub fn run(o: DriverOptions, stop: Arc<AtomicBool>) -> Result<DriverStats> {
    let vm = Vm::attach(o.ram_fd, o.chan_fd)?;
    let tap = Tap::open(&o.tap)?;
    crate::tap::configure(&o.tap, Some(&regs::mac_string(&vm.cfg.mac)), o.address.as_deref())?;
    tap.set_nonblocking(true)?;
    if let Some(u) = &o.user {
        drop_privileges(u)?;
    }
    let lay = Layout::of(&vm.cfg)?;
    // Post every receive buffer; enable.
    for i in 0..RING {
        vm.set_desc(lay.rx_ring, i, Desc { addr: lay.rx_buf(i), len: BUF as u32, status: 0 });
        vm.set_desc(lay.tx_ring, i, Desc::default());
    }
    fence(Ordering::Release);
    // Every receive buffer is posted with the bring-up (the device fetches
    // them once all writes of the batch are applied).
    let mut w = regs::bring_up(lay.tx_ring, lay.rx_ring, RING, &vm.cfg.handles);
    w.push((regs::RX_PUSH_LEN, BUF as u64));
    push_rx(&lay, 0, RING, &mut w);
    w.push((regs::RX_TAIL, u64::from(RING)));
    vm.write_regs(&w)?;
    println!(
        "vsci vm-driver {}: {} up, MAC {}, {:?} mode",
        vm.cfg.name,
        o.tap,
        regs::mac_string(&vm.cfg.mac),
        vm.cfg.mode
    );
    let mut st = DriverStats::default();
    let (mut tx_tail, mut tx_clean, mut rx_clean) = (0u32, 0u32, 0u32);
    let mut frame = vec![0u8; BUF];
    while !stop.load(Ordering::Relaxed) {
        let (vectors, _) = match vm.interrupts(50, Some(&tap)) {
            Ok(v) => v,
            Err(_) => break,
        };
        st.irqs += vectors.len() as u64;
        // Transmit completions.
        while tx_clean != tx_tail {
            let d = vm.desc(lay.tx_ring, tx_clean);
            if d.status & DD == 0 {
                break;
            }
            if d.status & ERR != 0 {
                st.tx_errors += 1;
            }
            tx_clean = tx_clean.wrapping_add(1);
        }
        // Received frames, up to a ring's worth.
        let mut reposted = false;
        let rx_was = rx_clean;
        for _ in 0..RING {
            let d = vm.desc(lay.rx_ring, rx_clean);
            if d.status & DD == 0 {
                break;
            }
            if d.status & ERR != 0 {
                st.rx_errors += 1;
            } else {
                let n = (d.len as usize).min(BUF);
                match vm.cfg.mode {
                    // The device wrote this buffer and set DD before we
                    // read it (acquire above); the buffers are VM memory
                    // other parties can write, so read as volatile.
                    Mode::ZeroCopy => tap.send_volatile(&vm.mem.slice(lay.rx_buf(rx_clean), n)?)?,
                    Mode::Bounce => {
                        vm.mem.read(lay.rx_buf(rx_clean), &mut frame[..n])?;
                        vm.mem.write(lay.private_rx(rx_clean), &frame[..n])?;
                        st.copies += 1;
                        tap.send_volatile(&vm.mem.slice(lay.private_rx(rx_clean), n)?)?;
                    }
                }
                st.rx += 1;
            }
            vm.set_desc(lay.rx_ring, rx_clean, Desc { addr: lay.rx_buf(rx_clean), len: BUF as u32, status: 0 });
            rx_clean = rx_clean.wrapping_add(1);
            reposted = true;
        }
        // One message to the device per round: the reposted receive
        // buffers, then the frames to send.
        let mut w = Vec::new();
        if reposted {
            fence(Ordering::Release);
            // The slots these buffers fill are a ring ahead of them.
            push_rx(&lay, rx_was.wrapping_add(RING), rx_clean.wrapping_add(RING), &mut w);
            w.push((regs::RX_TAIL, u64::from(rx_clean.wrapping_add(RING))));
        }
        // Frames the VM's stack sends, while there are free descriptors.
        let mut posted = false;
        while tx_tail.wrapping_sub(tx_clean) < RING {
            let (slot, n) = match vm.cfg.mode {
                // This slot's buffer is ours until its descriptor is posted
                // (the device finished it: DD), but VM memory all the same.
                Mode::ZeroCopy => match tap.recv_volatile(&vm.mem.slice(lay.tx_buf(tx_tail), BUF)?)? {
                    Some(n) => (lay.tx_buf(tx_tail), n),
                    None => break,
                },
                Mode::Bounce => match tap.recv_volatile(&vm.mem.slice(lay.private_tx(tx_tail), BUF)?)? {
                    Some(n) => {
                        vm.mem.read(lay.private_tx(tx_tail), &mut frame[..n])?;
                        vm.mem.write(lay.tx_buf(tx_tail), &frame[..n])?;
                        st.copies += 1;
                        (lay.tx_buf(tx_tail), n)
                    }
                    None => break,
                },
            };
            let d = Desc { addr: slot, len: n as u32, status: 0 };
            vm.set_desc(lay.tx_ring, tx_tail, d);
            // Each descriptor is also pushed to the device (regs::TX_PUSH),
            // a small frame with its bytes (copied out of the buffer), so
            // the device reads nothing back for it across the fabric.
            if n <= regs::INLINE_MAX {
                let mut small = [0u8; regs::INLINE_MAX];
                vm.mem.read(slot, &mut small[..n])?;
                regs::push_frame(d, &small[..n], &mut w);
            } else {
                w.push((regs::TX_PUSH, regs::push(d, false)));
            }
            tx_tail = tx_tail.wrapping_add(1);
            st.tx += 1;
            posted = true;
        }
        if posted {
            fence(Ordering::Release);
            w.push((regs::TX_TAIL, u64::from(tx_tail)));
        }
        if !w.is_empty() {
            vm.write_regs(&w)?;
        }
    }
    println!("vsci vm-driver {}: stopped; {st:?}", vm.cfg.name);
    Ok(st)
}

/// Push the receive buffers of slots `[from, to)` (regs::RX_PUSH): one
/// write per run of neighbouring buffers (two when the run wraps).
fn push_rx(lay: &Layout, from: u32, to: u32, w: &mut Vec<(u32, u64)>) {
    let mut slot = from;
    while slot != to {
        let run = to.wrapping_sub(slot).min(RING - slot % RING);
        w.push((regs::RX_PUSH, regs::rx_push(lay.rx_buf(slot), run as u16)));
        slot = slot.wrapping_add(run);
    }
}

fn drop_privileges(user: &str) -> Result<()> {
    let u = nix::unistd::User::from_name(user)?.ok_or_else(|| anyhow!("no user {user}"))?;
    nix::unistd::setgroups(&[])?;
    nix::unistd::setgid(u.gid)?;
    nix::unistd::setuid(u.uid)?;
    Ok(())
}
