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

impl Function {
    fn fault(&mut self, what: std::fmt::Arguments<'_>) {
        self.stats.faults += 1;
        // Logged per fault up to 20, then every 1000th: a VM that keeps
        // faulting must not flood the log.
        if self.stats.faults <= 20 || self.stats.faults % 1000 == 0 {
            warn!("IOMMU fault #{} of function {}: {what}; nothing moved", self.stats.faults, self.index);
        }
    }

    fn refuse(&mut self, what: std::fmt::Arguments<'_>) {
        self.stats.refused += 1;
        if self.stats.refused <= 20 || self.stats.refused % 1000 == 0 {
            warn!("refused (function {}): {what}", self.index);
        }
    }

    fn apply(&mut self, writes: &[(u32, u64)], dev: &Device, out: &mut Deliveries) {
        let (mut tx, mut rx) = (false, false);
        for &(off, val) in writes {
            let remap = &self.asg.as_ref().expect("checked by the caller").remap;
            if let Err(why) = regs::check_write(off, val, remap) {
                self.refuse(format_args!("{why}"));
                continue;
            }
            let a = self.asg.as_mut().expect("checked by the caller");
            let r = &mut a.regs;
            match off {
                regs::CTRL => r.ctrl = val,
                regs::TX_BASE => r.tx_base = val,
                regs::RX_BASE => r.rx_base = val,
                regs::TX_LEN => {
                    (r.tx_len, r.tx_tail, a.tx_head, a.tx_push_next) = (val as u32, 0, 0, 0);
                    a.tx_pushed.clear();
                    a.tx_inline.clear();
                }
                regs::TX_INLINE => {
                    if a.tx_inline.len() >= MAX_FRAME {
                        self.refuse(format_args!("more than {MAX_FRAME} inline bytes before a push"));
                        continue;
                    }
                    a.tx_inline.extend_from_slice(&val.to_le_bytes());
                }
                regs::RX_PUSH_LEN => a.rx_push_len = val.min(u64::from(u32::MAX)) as u32,
                regs::RX_PUSH => {
                    let (addr, count) = regs::rx_pushed(val);
                    let ring = r.rx_len;
                    if a.rx_pushed.len() + count as usize > ring as usize {
                        self.refuse(format_args!("{count} pushed receive buffers beyond the ring's {ring} entries"));
                        continue;
                    }
                    let blen = a.rx_push_len;
                    for k in 0..count {
                        let d = Desc { addr: addr.wrapping_add(u64::from(k) * u64::from(blen)), len: blen, status: 0 };
                        a.rx_pushed.push_back((a.rx_push_next, d));
                        a.rx_push_next = a.rx_push_next.wrapping_add(1);
                    }
                }
                regs::TX_PUSH => {
                    let ring = r.tx_len;
                    if a.tx_pushed.len() >= ring as usize {
                        self.refuse(format_args!("a pushed transmit descriptor beyond the ring's {ring} entries"));
                        continue;
                    }
                    let (desc, inline) = regs::pushed(val);
                    let bytes = std::mem::take(&mut a.tx_inline);
                    let inline = inline.then(|| {
                        if bytes.len() >= desc.len as usize {
                            Ok(bytes[..desc.len as usize].to_vec())
                        } else {
                            Err(bytes.len())
                        }
                    });
                    a.tx_pushed.push_back(Pushed { idx: a.tx_push_next, desc, inline });
                    a.tx_push_next = a.tx_push_next.wrapping_add(1);
                }
                regs::RX_LEN => {
                    (r.rx_len, r.rx_tail, a.rx_fetched) = (val as u32, 0, 0);
                    a.rx_ready.clear();
                    a.rx_fifo.clear();
                    a.rx_pushed.clear();
                    a.rx_push_next = 0;
                }
                regs::TX_TAIL => {
                    r.tx_tail = val as u32;
                    tx = true;
                }
                regs::RX_TAIL => {
                    r.rx_tail = val as u32;
                    rx = true;
                }
                regs::IRQ_MASK => r.irq_mask = val,
                _ => r.msix[((off - regs::MSIX_BASE) / 8) as usize] = val,
            }
        }
        if rx {
            self.fetch_rx();
            if self.asg.as_ref().is_some_and(|a| !a.rx_fifo.is_empty() && !a.rx_ready.is_empty()) {
                self.receive(Vec::new());
            }
        }
        if tx {
            self.transmit(dev, out);
        }
    }

    /// Read descriptors `[from, to)` of a ring through the IOMMU.
    fn read_descs(&mut self, base: u64, len: u32, from: u32, to: u32) -> Option<Vec<(u32, Desc)>> {
        let a = self.asg.as_ref()?;
        let runs = regs::ring_runs(base, len, from, to);
        let mut pieces = Vec::new();
        for &(dva, n, _) in &runs {
            match a.iommu.translate(dva, u64::from(n) * DESC as u64, Access::Read) {
                Ok(off) => pieces.push((n as usize * DESC, off)),
                Err(f) => {
                    self.fault(format_args!("descriptor ring: {f}"));
                    return None;
                }
            }
        }
        let total = to.wrapping_sub(from) as usize * DESC;
        let buf = match a.mem.read(vec![0u8; total], &pieces) {
            Ok(b) => b,
            Err(e) => {
                warn!("function {}: reading descriptors failed: {e}", self.index);
                return None;
            }
        };
        Some(buf.chunks_exact(DESC).enumerate().map(|(k, c)| (from.wrapping_add(k as u32), Desc::decode(c))).collect())
    }

    fn fetch_rx(&mut self) {
        let Some(a) = self.asg.as_ref() else { return };
        let (base, len, tail, from) = (a.regs.rx_base, a.regs.rx_len, a.regs.rx_tail, a.rx_fetched);
        if len == 0 || tail == from {
            return;
        }
        let used_from = a.rx_ready.front().map_or(from, |d| d.0);
        if tail.wrapping_sub(used_from) > len {
            self.refuse(format_args!("RX tail {tail} is more than the ring ({len}) ahead of the device"));
            return;
        }
        // Pushed buffers first; what was not pushed is read from the ring.
        let a = self.asg.as_mut().expect("present above");
        let mut from = from;
        while let Some(&(idx, d)) = a.rx_pushed.front() {
            if before(idx, from) {
                a.rx_pushed.pop_front();
                continue;
            }
            if idx != from || idx == tail {
                break;
            }
            a.rx_pushed.pop_front();
            a.rx_ready.push_back((idx, d));
            from = from.wrapping_add(1);
        }
        a.rx_fetched = from;
        if from == tail {
            return;
        }
        if let Some(ds) = self.read_descs(base, len, from, tail) {
            let a = self.asg.as_mut().expect("present above");
            a.rx_ready.extend(ds);
            a.rx_fetched = tail;
        }
    }

    fn fire(&mut self, vector: usize) {
        let Some(a) = self.asg.as_ref() else { return };
        if a.regs.irq_mask & (1 << vector) != 0 || a.regs.msix[vector] == 0 {
            return;
        }
        let Some(target) = a.remap.vector_of(a.regs.msix[vector]) else { return };
        let m = msg::encode(&ToHost::Irq { func: self.index, vector: target as u8 });
        if let Err(e) = a.irq.trigger_data(&m) {
            warn!("function {}: interrupt to node {} failed: {e}", self.index, a.node);
        }
        self.stats.irqs += 1;
    }

    fn transmit(&mut self, dev: &Device, out: &mut Deliveries) {
        let Some(a) = self.asg.as_ref() else { return };
        let (ctrl, base, len, head, tail) = (a.regs.ctrl, a.regs.tx_base, a.regs.tx_len, a.tx_head, a.regs.tx_tail);
        if ctrl & 1 == 0 || len == 0 || tail == head {
            return;
        }
        if tail.wrapping_sub(head) > len {
            self.refuse(format_args!("TX tail {tail} is more than the ring ({len}) ahead of head {head}"));
            return;
        }
        // Pushed descriptors first (stale ones, before the head, go); the
        // rest are read from the ring.
        let a = self.asg.as_mut().expect("present above");
        while a.tx_pushed.front().is_some_and(|p| before(p.idx, head)) {
            a.tx_pushed.pop_front();
        }
        let mut descs = Vec::with_capacity(tail.wrapping_sub(head) as usize);
        let mut inline = Vec::with_capacity(descs.capacity());
        for (k, p) in a.tx_pushed.iter().enumerate() {
            let idx = head.wrapping_add(k as u32);
            if p.idx != idx || idx == tail {
                break;
            }
            descs.push((idx, p.desc));
            inline.push(p.inline.clone());
        }
        let from = head.wrapping_add(descs.len() as u32);
        if from != tail {
            let Some(read) = self.read_descs(base, len, from, tail) else { return };
            inline.extend(read.iter().map(|_| None));
            descs.extend(read);
        }
        let a = self.asg.as_ref().expect("present above");
        // A frame whose last descriptor is not posted yet waits for it.
        let (frames, pending) = regs::frames(&descs);
        let done = tail.wrapping_sub(pending as u32);
        // Check every buffer first; a frame with a faulting or bad
        // descriptor moves nothing.
        let mut ranges = Vec::new();
        let mut good_frames: Vec<Vec<Source>> = Vec::new();
        let mut status = Vec::with_capacity(descs.len());
        let mut faults = Vec::new();
        for fr in &frames {
            let mut bad = None;
            let mut sources = Vec::with_capacity(fr.len());
            for &(idx, d) in fr {
                if d.len == 0 || d.len as usize > MAX_FRAME {
                    bad = Some(format!("descriptor {idx}: length {} (1 to {MAX_FRAME})", d.len));
                    break;
                }
                match &inline[idx.wrapping_sub(head) as usize] {
                    Some(Ok(b)) => sources.push(Source::Inline(b.clone())),
                    Some(Err(n)) => {
                        bad = Some(format!("descriptor {idx}: pushed inline with {} bytes, but {n} were sent", d.len));
                        break;
                    }
                    None => match a.iommu.translate(d.addr, u64::from(d.len), Access::Read) {
                        Ok(_) => sources.push(Source::Dma(d.addr, u64::from(d.len))),
                        Err(f) => {
                            bad = Some(format!("descriptor {idx}: {f}"));
                            break;
                        }
                    },
                }
            }
            let total: usize = fr.iter().map(|(_, d)| d.len as usize).sum();
            if bad.is_none() && total > MAX_FRAME {
                bad = Some(format!("descriptors {}..: a {total}-byte frame (at most {MAX_FRAME})", fr[0].0));
            }
            let st = if bad.is_some() { DD | ERR } else { DD };
            status.extend(fr.iter().map(|&(idx, d)| (idx, Desc { status: st, ..d })));
            match bad {
                Some(b) => faults.push(b),
                None => {
                    ranges.extend(sources.iter().filter_map(|s| match *s {
                        Source::Dma(dva, n) => Some((dva, n)),
                        Source::Inline(_) => None,
                    }));
                    good_frames.push(sources);
                }
            }
        }
        // Neighbouring buffers are read as one span.
        let plan = match gather::spans(&a.iommu, &ranges) {
            Ok(p) => p,
            Err(f) => {
                self.fault(format_args!("transmit buffers: {f}"));
                return;
            }
        };
        let payload = match a.mem.read(vec![0u8; plan.total], &plan.pieces) {
            Ok(b) => b,
            Err(e) => {
                warn!("function {}: reading transmit buffers failed: {e}", self.index);
                return;
            }
        };
        for f in faults {
            self.fault(format_args!("{f}"));
        }
        let mut frame = Vec::with_capacity(MAX_FRAME);
        // The DMA sources, in order, are the plan's ranges.
        let mut at = plan.at.iter();
        for sources in good_frames {
            frame.clear();
            for src in sources {
                match src {
                    Source::Dma(_, n) => {
                        let at = *at.next().expect("one planned range per DMA source");
                        frame.extend_from_slice(&payload[at..at + n as usize]);
                    }
                    Source::Inline(b) => frame.extend_from_slice(&b),
                }
            }
            if frame.len() >= 14 && dev.switch(&frame, Some(self.index as usize), out) {
                if let Err(e) = dev.tap.send(&frame) {
                    warn!("device: the wire failed: {e}");
                }
            }
            self.stats.tx_packets += 1;
        }
        // Write back: length and status of every descriptor taken.
        self.write_back(None, base, len, &status, false);
        if let Some(a) = self.asg.as_mut() {
            a.tx_head = done;
            while a.tx_pushed.front().is_some_and(|p| before(p.idx, done)) {
                a.tx_pushed.pop_front();
            }
        }
        self.fire(regs::VEC_TX);
    }

    /// Write the payload gathered in `data` (if any), then descriptors
    /// `status` (ring index, descriptor as written back) of the ring at
    /// `base`: everything in the descriptors lands after the payload.
    /// Where an interrupt sent next arrives after the bytes, the writes are
    /// posted and not waited for.
    fn write_back(&mut self, data: Option<Payload>, base: u64, len: u32, status: &[(u32, Desc)], rx: bool) -> bool {
        let Some(a) = self.asg.as_ref() else { return false };
        let mut descs = Gather::new(&a.iommu);
        for &(idx, d) in status {
            if let Err(f) = descs.put(base + u64::from(idx % len) * DESC as u64, DESC as u64, &d.encode()) {
                let what = if rx { "RX" } else { "TX" };
                self.fault(format_args!("{what} descriptor write-back: {f}"));
                return false;
            }
        }
        let (data, pieces) = data.unwrap_or_default();
        let (then, then_pieces) = (descs.data, descs.pieces);
        if !a.posted_ordered {
            if let Err(e) = a.mem.write(data, &pieces, then, &then_pieces) {
                warn!("function {}: writing to VM {} failed: {e}", self.index, a.vm);
                return false;
            }
            return true;
        }
        let index = self.index;
        let a = self.asg.as_mut().expect("present above");
        match a.mem.write_posted(data, &pieces, then, &then_pieces) {
            Ok(Some(p)) => a.posted.push_back(p),
            Ok(None) => {}
            Err(e) => {
                warn!("function {index}: writing to VM {} failed: {e}", a.vm);
                return false;
            }
        }
        a.reap(index, false);
        true
    }

    fn receive(&mut self, frames: Vec<Vec<u8>>) {
        let Some(a) = self.asg.as_mut() else { return };
        if a.regs.ctrl & 1 == 0 || a.regs.rx_len == 0 {
            return;
        }
        let (base, len) = (a.regs.rx_base, a.regs.rx_len);
        let mut payload = Gather::new(&a.iommu);
        let mut status = Vec::new();
        let mut faults = Vec::new();
        let mut missed = 0;
        let mut got = 0;
        // Frames waiting in the FIFO go first, in order.
        let mut queue = std::mem::take(&mut a.rx_fifo);
        queue.extend(frames);
        while let Some(fr) = queue.pop_front() {
            let Some((idx, d)) = a.rx_ready.pop_front() else {
                queue.push_front(fr);
                break;
            };
            if fr.len() > d.len as usize {
                faults.push(format!(
                    "descriptor {idx}: a {}-byte frame does not fit its {}-byte buffer",
                    fr.len(),
                    d.len
                ));
                status.push((idx, Desc { len: 0, status: DD | ERR, ..d }));
                continue;
            }
            match payload.put(d.addr, u64::from(d.len), &fr) {
                Ok(()) => {
                    status.push((idx, Desc { len: fr.len() as u32, status: DD, ..d }));
                    got += 1;
                }
                Err(f) => {
                    faults.push(format!("descriptor {idx}: {f}"));
                    status.push((idx, Desc { len: 0, status: DD | ERR, ..d }));
                }
            }
        }
        if queue.len() > RX_FIFO {
            missed = (queue.len() - RX_FIFO) as u64;
            queue.truncate(RX_FIFO);
        }
        a.rx_fifo = queue;
        let data = (payload.data, payload.pieces);
        self.stats.rx_missed += missed;
        for f in faults {
            self.fault(format_args!("{f}"));
        }
        if status.is_empty() {
            return;
        }
        if self.write_back(Some(data), base, len, &status, true) {
            self.stats.rx_packets += got;
            self.fire(regs::VEC_RX);
        }
    }
}

/// The cluster key from its file, for signing and checking manager requests.
pub fn key_from(path: &std::path::Path) -> Result<Vec<u8>> {
    msg::read_key(path).context("the platform manager signs with the cluster key")
}
