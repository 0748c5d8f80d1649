//! The device host: a multi-queue NIC model whose wire is a TAP interface
//! of this host, offering `functions` VF-like functions (a queue pair,
//! registers and three interrupt vectors each), and the platform manager
//! that assigns them to VMs on any node of the cluster.
//!
//! Two threads: the doorbell thread waits on the device's data interrupt
//! for register writes (running transmit and fetching receive buffers when
//! a tail moves) and manager requests; the wire thread reads frames from
//! the TAP and switches them, by destination MAC, into the functions'
//! receive rings (broadcasts to every enabled function). Frames a function
//! sends to another function's MAC stay inside the device, as in an
//! SR-IOV NIC's embedded switch; all others go out on the wire.
//!
//! Every DMA address goes through the function's IOMMU context (iommu.rs);
//! every register write must carry its assignment's token; every MSI-X
//! entry must name a handle of the function's remapping table; every
//! manager request must be signed with the cluster key and fresh.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use log::{info, warn};
use vsci_client::{Client, DataWait, IntrKind, PostedDma, RemoteInterrupt, SciError};

use crate::gather::{self, Gather};
use crate::iommu::{Access, Context, Grant, Remap};
use crate::mem::VmMemory;
use crate::msg::{
    self, Assigned, FunctionInfo, Mode, Reply, ReplyFor, ReplyTo, Request, RequestFrom, Signed, ToDevice, ToHost,
};
use crate::regs::{self, Desc, DD, DESC, ERR, MAX_FRAME};
use crate::tap::Tap;

// A function's own work (registers, rings, transmit, receive, interrupts).
mod function;

pub struct DeviceOptions {
    /// The node's control socket.
    pub socket: PathBuf,
    /// The device's name (shown by `vsci device list`).
    pub name: String,
    /// The TAP interface that is its wire.
    pub tap: String,
    /// An address for this host's end of the wire (`ip addr add`).
    pub address: Option<String>,
    pub functions: u8,
    pub interrupt: u32,
    pub key: Vec<u8>,
}

#[derive(Default, Clone, Copy, Debug)]
struct Registers {
    ctrl: u64,
    tx_base: u64,
    tx_len: u32,
    tx_tail: u32,
    rx_base: u64,
    rx_len: u32,
    rx_tail: u32,
    irq_mask: u64,
    msix: [u64; regs::VECTORS],
}

struct Assignment {
    vm: String,
    node: u32,
    mode: Mode,
    token: u64,
    remap: Remap,
    iommu: Context,
    mem: VmMemory,
    /// Where the function's interrupts (and the manager's notices) go.
    irq: Arc<RemoteInterrupt>,
    regs: Registers,
    tx_head: u32,
    rx_fetched: u32,
    /// Posted receive buffers not used yet: (ring index, descriptor).
    rx_ready: VecDeque<(u32, Desc)>,
    /// Frames that came while no receive buffer was posted, oldest first
    /// (the NIC's receive FIFO): delivered as soon as buffers are posted;
    /// a frame that finds it full is dropped.
    rx_fifo: VecDeque<Vec<u8>>,
    /// Writes into the VM's memory still in flight, oldest first.
    posted: VecDeque<PostedDma>,
    /// Transmit descriptors the driver pushed (regs::TX_PUSH), by ring
    /// index, oldest first, with the frame bytes of inline ones.
    tx_pushed: VecDeque<Pushed>,
    /// The ring index the next push describes.
    tx_push_next: u32,
    /// Receive buffers the driver pushed (regs::RX_PUSH) for slots not
    /// posted yet, oldest first, and the next slot a push describes.
    rx_pushed: VecDeque<(u32, Desc)>,
    rx_push_next: u32,
    rx_push_len: u32,
    /// Bytes sent with regs::TX_INLINE for the next push.
    tx_inline: Vec<u8>,
    /// Whether an interrupt sent after a posted write arrives after its
    /// bytes (then nothing waits for writes; see VmMemory::write_posted).
    posted_ordered: bool,
}

/// A pushed transmit descriptor.
struct Pushed {
    idx: u32,
    desc: Desc,
    /// Inline: the frame's bytes (Err: the push claimed more inline bytes
    /// than were sent).
    inline: Option<Result<Vec<u8>, usize>>,
}

/// Where a transmit descriptor's bytes come from.
enum Source {
    /// A DMA read of (DVA, length): the read plan's next range.
    Dma(u64, u64),
    Inline(Vec<u8>),
}

/// Is ring index `a` before `b`? (Indices count up and wrap.)
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Frames the receive FIFO holds per function (about 1.5 MB of full
/// frames, as a NIC's on-chip packet buffer).
const RX_FIFO: usize = 1024;
/// Writes a function may have in flight before the oldest is waited for.
const MAX_POSTED: usize = 64;

impl Assignment {
    /// Take completed posted writes off the queue; with `all`, wait for
    /// every one. A failed write is logged (the VM's node is going away).
    fn reap(&mut self, func: u8, all: bool) {
        while let Some(p) = self.posted.front() {
            if !all && self.posted.len() <= MAX_POSTED && !self.mem.posted_done(p) {
                break;
            }
            let p = self.posted.pop_front().expect("front exists");
            if let Err(e) = self.mem.posted_finish(p) {
                warn!("function {func}: writing to VM {} failed: {e}", self.vm);
            }
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Stats {
    tx_packets: u64,
    rx_packets: u64,
    rx_missed: u64,
    faults: u64,
    refused: u64,
    irqs: u64,
}

struct Function {
    index: u8,
    mac: [u8; 6],
    asg: Option<Assignment>,
    stats: Stats,
}

struct Device {
    name: String,
    socket: PathBuf,
    wire: String,
    node: u32,
    client: Client,
    key: Vec<u8>,
    tap: Tap,
    fns: Vec<Mutex<Function>>,
    replay: Mutex<msg::ReplayGuard>,
}

/// Bytes to write and their `(length, offset)` pieces (gather.rs).
type Payload = (Vec<u8>, Vec<(usize, u64)>);

/// Frames to hand to functions after the sender's lock is released.
type Deliveries = Vec<(usize, Vec<u8>)>;

pub fn serve(o: DeviceOptions, stop: Arc<AtomicBool>) -> Result<()> {
    anyhow::ensure!((1..=64).contains(&o.functions), "--functions: 1 to 64");
    let client = Client::connect_service(&o.socket, "vsci-device")
        .map_err(|e| anyhow::anyhow!("cannot reach vscid at {}: {e}", o.socket.display()))?;
    let node = client.node_id();
    let tap = Tap::open(&o.tap)?;
    crate::tap::configure(&o.tap, None, o.address.as_deref())?;
    tap.set_nonblocking(true)?;
    let intr = client
        .create_interrupt(IntrKind::Data, o.interrupt, true)
        .map_err(|e| anyhow::anyhow!("cannot create the device's interrupt {:#x} on node {node}: {e}", o.interrupt))?;
    let fns = (0..o.functions)
        .map(|i| Mutex::new(Function { index: i, mac: regs::mac(node, i), asg: None, stats: Stats::default() }))
        .collect();
    let dev = Arc::new(Device {
        name: o.name.clone(),
        socket: o.socket.clone(),
        wire: o.tap.clone(),
        node,
        client,
        key: o.key,
        tap,
        fns,
        replay: Mutex::default(),
    });
    println!(
        "vsci device {}: {} functions on node {node}, interrupt {:#x}, wire {}{}",
        o.name,
        o.functions,
        o.interrupt,
        o.tap,
        o.address.as_deref().map(|a| format!(" ({a})")).unwrap_or_default()
    );
    for f in &dev.fns {
        let f = f.lock().unwrap();
        info!("function {}: MAC {}", f.index, regs::mac_string(&f.mac));
    }
    dev.publish();
    let wire = {
        let (dev, stop) = (dev.clone(), stop.clone());
        std::thread::Builder::new().name("vsci-dev-wire".into()).spawn(move || wire_loop(&dev, &stop))?
    };
    let mut buf = vec![0u8; vsci_proto::intr::DATA_MAX];
    let mut last_check = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        match intr.wait_data(&mut buf, 200) {
            Ok(DataWait::Got(n)) => match msg::decode::<ToDevice>(&buf[..n]) {
                Some(ToDevice::Regs { func, token, writes }) => dev.register_writes(func, token, &writes),
                Some(ToDevice::Manager(s)) => dev.manager(&s),
                None => warn!("device: a malformed message of {n} bytes on the device's interrupt; dropped"),
            },
            Ok(DataWait::TooSmall(_)) => unreachable!("the buffer holds DATA_MAX"),
            Err(SciError::Timeout) => {}
            Err(e) => {
                warn!("device: the interrupt failed: {e}; stopping");
                break;
            }
        }
        if last_check.elapsed() > Duration::from_millis(500) {
            dev.reap_lost();
            last_check = std::time::Instant::now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = wire.join();
    for i in 0..dev.fns.len() {
        dev.release(i, "the device stops");
    }
    let _ = intr.remove();
    crate::status::withdraw(&dev.socket, &format!("device-{}", dev.name));
    println!("vsci device {}: stopped", dev.name);
    Ok(())
}

fn wire_loop(dev: &Device, stop: &AtomicBool) {
    let mut frame = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        if !dev.tap.wait_readable(200) {
            continue;
        }
        // Up to 64 frames per round (the seed's NAPI budget): one
        // interrupt per function per round.
        let mut batch: Deliveries = Vec::new();
        for _ in 0..64 {
            match dev.tap.recv(&mut frame) {
                Ok(Some(n)) if n >= 14 => {
                    dev.switch(&frame[..n], None, &mut batch);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    warn!("device: the wire failed: {e}");
                    return;
                }
            }
        }
        dev.deliver(batch);
    }
}

fn is_multicast(mac: &[u8]) -> bool {
    mac[0] & 1 == 1
}

impl Device {
    fn func(&self, i: usize) -> std::sync::MutexGuard<'_, Function> {
        self.fns[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where a frame from `from` (None: the wire) goes: functions by
    /// destination MAC (all enabled ones for broadcast and multicast), and
    /// the wire unless it was for a function.
    fn switch(&self, frame: &[u8], from: Option<usize>, out: &mut Deliveries) -> bool {
        let dst = &frame[0..6];
        let mut to_wire = from.is_some();
        for i in 0..self.fns.len() {
            if Some(i) == from {
                continue;
            }
            // The MAC is fixed per function; no lock needed to compare it.
            let mac = regs::mac(self.node, i as u8);
            if is_multicast(dst) || dst == mac {
                out.push((i, frame.to_vec()));
                if !is_multicast(dst) {
                    to_wire = false;
                }
            }
        }
        to_wire
    }

    fn deliver(&self, batch: Deliveries) {
        let mut by_fn: Vec<Vec<Vec<u8>>> = vec![Vec::new(); self.fns.len()];
        for (i, f) in batch {
            by_fn[i].push(f);
        }
        for (i, frames) in by_fn.into_iter().enumerate() {
            if !frames.is_empty() {
                let mut f = self.func(i);
                f.receive(frames);
            }
        }
    }

    fn register_writes(&self, func: u8, token: u64, writes: &[(u32, u64)]) {
        let i = func as usize;
        if i >= self.fns.len() {
            warn!("refused: register writes to function {func}, which this device does not have");
            return;
        }
        let mut out = Vec::new();
        {
            let mut f = self.func(i);
            let ok = f.asg.as_ref().is_some_and(|a| a.token == token);
            if !ok {
                f.stats.refused += 1;
                warn!("refused: register writes to function {func} without its holder's token (spoofed, or from a holder it was taken from)");
                return;
            }
            f.apply(writes, self, &mut out);
        }
        self.deliver(out);
    }

    /// A function's assignment is gone (released, revoked, holder lost).
    fn release(&self, i: usize, why: &str) -> Option<Assignment> {
        let mut a = self.func(i).asg.take()?;
        if !a.mem.seg.is_lost() {
            a.reap(i as u8, true);
        }
        info!("function {i} taken from VM {} of node {}: {why}; back in the pool", a.vm, a.node);
        let _ = a.mem.seg.disconnect();
        self.publish();
        Some(a)
    }

    /// Who holds what, for `vsci status` on this node.
    fn publish(&self) {
        let functions = (0..self.fns.len())
            .map(|i| {
                let f = self.func(i);
                let h = f.asg.as_ref();
                crate::status::Holding {
                    func: f.index,
                    mac: regs::mac_string(&f.mac),
                    node: h.map(|a| a.node),
                    vm: h.map(|a| a.vm.clone()),
                    mode: h.map(|a| format!("{:?}", a.mode)),
                }
            })
            .collect();
        let e = crate::status::Entry::Device {
            pid: std::process::id(),
            name: self.name.clone(),
            wire: self.wire.clone(),
            functions,
        };
        crate::status::publish(&self.socket, &format!("device-{}", self.name), &e);
    }

    fn reap_lost(&self) {
        for i in 0..self.fns.len() {
            let lost = self.func(i).asg.as_ref().is_some_and(|a| a.mem.seg.is_lost());
            if lost {
                if let Some(a) = self.release(i, "its node is gone") {
                    let _ = a.irq.disconnect();
                }
            }
        }
    }

    fn reply(&self, to: ReplyTo, nonce: u64, reply: Reply) {
        let body = msg::encode(&ToHost::Manager(msg::sign(&self.key, msg::random_u64(), ReplyFor { nonce, reply })));
        match self.client.connect_interrupt(IntrKind::Data, to.node, to.interrupt, 2000) {
            Ok(r) => {
                if let Err(e) = r.trigger_data(&body) {
                    warn!("manager: cannot answer node {} interrupt {}: {e}", to.node, to.interrupt);
                }
                let _ = r.disconnect();
            }
            Err(e) => warn!("manager: cannot reach node {} interrupt {} to answer: {e}", to.node, to.interrupt),
        }
    }

    fn manager(&self, s: &Signed) {
        let env = match msg::open::<RequestFrom>(&self.key, s) {
            Ok(e) => e,
            Err(e) => {
                warn!("manager: refused a request: {e}");
                return;
            }
        };
        if !self.replay.lock().unwrap().fresh(env.nonce) {
            warn!(
                "manager: refused a request from node {}: replayed (nonce {:#x} seen before)",
                env.msg.node, env.nonce
            );
            return;
        }
        let RequestFrom { node, reply, req } = env.msg;
        let answer = match req {
            Request::Assign { vm, ram_segment, ram_size, window, mode, irq } => {
                self.assign(node, vm, ram_segment, ram_size, window, mode, irq)
            }
            Request::Release { func, token } => {
                let i = func as usize;
                let holder =
                    i < self.fns.len() && self.func(i).asg.as_ref().is_some_and(|a| a.token == token && a.node == node);
                if holder {
                    if let Some(a) = self.release(i, "released by its holder") {
                        let _ = a.irq.disconnect();
                    }
                    Reply::Done
                } else {
                    Reply::Refused(format!("function {func} is not held by this requester"))
                }
            }
            Request::Revoke { func } => {
                let i = func as usize;
                match (i < self.fns.len())
                    .then(|| self.release(i, &format!("revoked by an administrator on node {node}")))
                    .flatten()
                {
                    Some(a) => {
                        let notice = ToHost::Manager(msg::sign(
                            &self.key,
                            msg::random_u64(),
                            ReplyFor {
                                nonce: 0,
                                reply: Reply::Revoked {
                                    func,
                                    why: format!("revoked by an administrator on node {node}"),
                                },
                            },
                        ));
                        let _ = a.irq.trigger_data(&msg::encode(&notice));
                        let _ = a.irq.disconnect();
                        Reply::Done
                    }
                    None => Reply::Refused(format!("function {func} is not assigned")),
                }
            }
            Request::List => Reply::List { device: self.name.clone(), functions: self.list() },
        };
        self.reply(reply, env.nonce, answer);
    }

    fn list(&self) -> Vec<FunctionInfo> {
        (0..self.fns.len())
            .map(|i| {
                let f = self.func(i);
                FunctionInfo {
                    func: f.index,
                    mac: f.mac,
                    holder: f.asg.as_ref().map(|a| (a.node, a.vm.clone(), a.mode)),
                    tx_packets: f.stats.tx_packets,
                    rx_packets: f.stats.rx_packets,
                    rx_missed: f.stats.rx_missed,
                    faults: f.stats.faults,
                    refused: f.stats.refused,
                    irqs: f.stats.irqs,
                }
            })
            .collect()
    }

    /// The seed's setup steps 2 to 5, on the device host (the hypervisor
    /// logs 1 and 6).
    #[allow(clippy::too_many_arguments)]
    fn assign(
        &self,
        node: u32,
        vm: String,
        ram_segment: u32,
        ram_size: u64,
        window: (u64, u64),
        mode: Mode,
        irq: ReplyTo,
    ) -> Reply {
        if vm.is_empty() || vm.len() > 64 {
            return Reply::Refused("a VM name is 1 to 64 bytes".into());
        }
        if window.1 == 0 || window.0.checked_add(window.1).is_none_or(|e| e > ram_size) {
            return Reply::Refused(format!(
                "the DMA window [{:#x}, +{:#x}) is not inside the VM's {ram_size} bytes",
                window.0, window.1
            ));
        }
        info!("setup step 1 (received): node {node} asks a function for VM {vm}: memory = node {node} segment {ram_segment:#x} ({ram_size} bytes), DMA payload window [{:#x}, +{:#x}) ({mode:?}), MSI-X to node {} interrupt {}", window.0, window.1, irq.node, irq.interrupt);
        let Some(i) = (0..self.fns.len()).find(|&i| self.func(i).asg.is_none()) else {
            return Reply::Refused(format!("all {} functions of device {} are assigned", self.fns.len(), self.name));
        };
        let mac = regs::mac(self.node, i as u8);
        info!("setup step 2: function {i} (MAC {}) allocated for VM {vm} of node {node}: CSR/MMIO = its {:#x}-byte register window, MSI-X = {} vectors, DMA payload = DVA [{:#x}, +{:#x})", regs::mac_string(&mac), regs::WINDOW, regs::VECTORS, window.0, window.1);
        let seg = match self.client.connect_segment(node, ram_segment, 5000) {
            Ok(s) => s,
            Err(e) => {
                return Reply::Refused(format!(
                    "cannot reach the VM's memory (node {node} segment {ram_segment:#x}): {e}"
                ))
            }
        };
        if seg.size != ram_size {
            let _ = seg.disconnect();
            return Reply::Refused(format!("the VM's memory is {} bytes, not the {ram_size} asked", seg.size));
        }
        let mem = match VmMemory::new(seg) {
            Ok(m) => m,
            Err(e) => return Reply::Refused(format!("cannot map the VM's memory: {e}")),
        };
        let token = msg::random_u64();
        info!("setup step 3: the CSR/MMIO range of VM {vm}'s virtual device is mapped onto function {i}'s registers (writes must carry the assignment's token)");
        let remote_irq = match self.client.connect_interrupt(IntrKind::Data, irq.node, irq.interrupt, 5000) {
            Ok(r) => r,
            Err(e) => {
                let _ = mem.seg.disconnect();
                return Reply::Refused(format!(
                    "cannot reach the VM's interrupt (node {} interrupt {}): {e}",
                    irq.node, irq.interrupt
                ));
            }
        };
        let handles = [msg::random_u64() | 1, msg::random_u64() | 1, msg::random_u64() | 1];
        // Direct mapping (the seed's policy): DVA = offset in the VM's memory.
        let iommu =
            Context::new(vec![Grant { dva: window.0, len: window.1, offset: window.0, read: true, write: true }]);
        info!(
            "setup step 4: IOMMU context of function {i}: DVA [{:#x}, +{:#x}) -> node {node} segment {ram_segment:#x} offset {:#x}, read/write ({}); interrupt remapping: its vectors -> node {} interrupt {}",
            window.0,
            window.1,
            window.0,
            if mem.is_remote() { "over the RMA engine" } else { "this host's memory" },
            irq.node,
            irq.interrupt
        );
        info!("setup step 5: requester table: function {i} <-> node {node} VM {vm}");
        let posted_ordered = mem.posted_then_trigger_ordered(&remote_irq);
        let mut f = self.func(i);
        f.stats = Stats::default();
        f.asg = Some(Assignment {
            vm,
            node,
            mode,
            token,
            remap: Remap { handles },
            iommu,
            mem,
            irq: remote_irq,
            regs: Registers::default(),
            tx_head: 0,
            rx_fetched: 0,
            rx_ready: VecDeque::new(),
            rx_fifo: VecDeque::new(),
            posted: VecDeque::new(),
            tx_pushed: VecDeque::new(),
            tx_push_next: 0,
            rx_pushed: VecDeque::new(),
            rx_push_next: 0,
            rx_push_len: 0,
            tx_inline: Vec::new(),
            posted_ordered,
        });
        drop(f);
        self.publish();
        Reply::Assigned(Assigned { func: i as u8, mac, token, handles })
    }
}

/// The cluster key from its file, for signing and checking manager requests.
pub fn key_from(path: &std::path::Path) -> Result<Vec<u8>> {
    msg::read_key(path).context("the platform manager signs with the cluster key")
}
