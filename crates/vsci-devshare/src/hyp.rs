//! The compute host's side of a process VM (the seed's "CH hypervisor"):
//! it makes the VM's memory (a segment of this node), asks the device
//! host's manager for a function, starts the VM as an untrusted process
//! that holds only its memory and its channel to us, and then relays:
//! the VM's register writes (its MMIO window) to the function, checked
//! against the window's bounds, and the function's interrupts to the VM.
//! When the VM ends the function is released; when the manager revokes it
//! the VM is stopped.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use log::{info, warn};
use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType};
use serde::{Deserialize, Serialize};
use vmm_sys_util::eventfd::EventFd;
use vsci_client::{Client, DataWait, IntrKind, SciError};

use crate::msg::{self, Mode, Reply, ReplyFor, ReplyTo, Request, ToHost};
use crate::regs;
use crate::requester::Requester;

/// The simple mode's payload area (the seed's 4 MB per virtual device).
pub const BOUNCE_AREA: u64 = 4 << 20;

pub struct VmOptions {
    pub socket: PathBuf,
    pub device_node: u32,
    pub device_interrupt: u32,
    pub key: Vec<u8>,
    pub name: String,
    pub mode: Mode,
    pub ram: u64,
    /// What the VM is.
    pub kind: VmKind,
}

pub enum VmKind {
    /// A process VM: this driver process and its arguments (it gets
    /// `--ram-fd 3 --chan-fd 4`).
    Process(Vec<String>),
    /// A QEMU guest: this command (`vsci vm run` and its arguments before
    /// the `--`), to which `--mem-path`, `--memory` and `--net` are added;
    /// then `rest` (`-- CMD...`).
    Guest { command: Vec<String>, rest: Vec<String> },
}

/// What the VM is told about its device (step 6).
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct VmConfig {
    pub name: String,
    pub mac: [u8; 6],
    pub ram_size: u64,
    /// The DMA window: where rings and every buffer the device touches
    /// must lie (all of the memory in the zero-copy mode).
    pub window: (u64, u64),
    pub mode: Mode,
    pub handles: [u64; regs::VECTORS],
}

/// From the VM to us: posted register writes. From us to the VM: the
/// config once, then one byte per interrupt (the vector).
/// Most register writes one message on a VM's channel carries (a longer
/// message is refused whole: it arrives truncated).
pub const MAX_WRITES: usize = 1024;

pub fn socketpair() -> Result<(OwnedFd, OwnedFd)> {
    Ok(socket::socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)?)
}

pub fn send(fd: &OwnedFd, b: &[u8]) -> nix::Result<usize> {
    socket::sendmsg::<()>(fd.as_raw_fd(), &[IoSlice::new(b)], &[], MsgFlags::MSG_NOSIGNAL, None)
}

/// One message; Ok(0) when the other side is gone.
pub fn recv(fd: &OwnedFd, buf: &mut [u8], flags: MsgFlags) -> nix::Result<usize> {
    let mut iov = [IoSliceMut::new(buf)];
    let r = socket::recvmsg::<()>(fd.as_raw_fd(), &mut iov, None, flags)?;
    Ok(r.bytes)
}

pub fn run_vm(o: VmOptions, stop: Arc<AtomicBool>) -> Result<()> {
    let guest = matches!(o.kind, VmKind::Guest { .. });
    anyhow::ensure!(
        o.ram >= 2 * BOUNCE_AREA && o.ram.is_multiple_of(1 << 20),
        "--ram: a multiple of 1 MiB, at least 8 MiB"
    );
    // A guest's memory segment is its RAM and, past it, where the guest
    // cannot see it, the function's rings and the bounce area.
    let seg_size = if guest { o.ram + BOUNCE_AREA } else { o.ram };
    let client = Client::connect_service(&o.socket, "vsci-device-vm")
        .map_err(|e| anyhow!("cannot reach vscid at {}: {e}", o.socket.display()))?;
    let node = client.node_id();
    let ram = client
        .create_segment(None, seg_size)
        .map_err(|e| anyhow!("cannot create the VM's memory ({seg_size} bytes): {e}"))?;
    ram.prepare()
        .and_then(|_| ram.set_available())
        .map_err(|e| anyhow!("cannot offer the VM's memory to the device: {e}"))?;
    let irq = client
        .create_interrupt(IntrKind::Data, 0x4C80, false)
        .map_err(|e| anyhow!("cannot create the VM's interrupt: {e}"))?;
    let req = Requester::new(client.clone(), o.key.clone(), o.device_node, o.device_interrupt)?;
    let window = match o.mode {
        Mode::ZeroCopy => (0, seg_size),
        Mode::Bounce => (seg_size - BOUNCE_AREA, BOUNCE_AREA),
    };
    info!(
        "setup step 1: asking node {}'s device for a function for VM {}: memory = node {node} segment {:#x} ({} bytes), DMA payload window [{:#x}, +{:#x}) ({:?}), MSI-X to node {node} interrupt {}",
        o.device_node, o.name, ram.segment_id, seg_size, window.0, window.1, o.mode, irq.number
    );
    let reply = req.call(
        Request::Assign {
            vm: o.name.clone(),
            ram_segment: ram.segment_id,
            ram_size: seg_size,
            window,
            mode: o.mode,
            irq: ReplyTo { node, interrupt: irq.number },
        },
        Duration::from_secs(20),
    )?;
    let a = match reply {
        Reply::Assigned(a) => a,
        Reply::Refused(why) => bail!("the device's manager refused: {why}"),
        other => bail!("unexpected answer from the manager: {other:?}"),
    };
    let req = Arc::new(req);
    let (mut child, ours, guest_net, vm_irq) = match &o.kind {
        VmKind::Process(driver) => {
            let (ours, theirs) = socketpair()?;
            let cfg = VmConfig {
                name: o.name.clone(),
                mac: a.mac,
                ram_size: seg_size,
                window,
                mode: o.mode,
                handles: a.handles,
            };
            let child = spawn_driver(driver, ram.memfd(), &theirs)?;
            drop(theirs);
            send(&ours, &msg::encode(&cfg))?;
            (child, Some(Arc::new(ours)), None, None)
        }
        VmKind::Guest { command, rest } => {
            let (child, net, irq_fd) = start_guest(&o, command, rest, &ram, &a, req.clone())?;
            (child, None, Some(net), Some(irq_fd))
        }
    };
    info!(
        "setup step 6: VM {} (pid {}) given function {} of node {}: MAC {}, DMA window [{:#x}, +{:#x}), MSI-X handles {:x?}",
        o.name,
        child.id(),
        a.func,
        o.device_node,
        regs::mac_string(&a.mac),
        window.0,
        window.1,
        a.handles
    );
    let tag = format!("vm-{}", o.name);
    crate::status::publish(
        &o.socket,
        &tag,
        &crate::status::Entry::Vm {
            pid: std::process::id(),
            name: o.name.clone(),
            device_node: o.device_node,
            func: a.func,
            mac: regs::mac_string(&a.mac),
            mode: format!("{:?}", o.mode),
        },
    );
    println!(
        "vsci device vm {}: function {} (MAC {}) of node {} in {:?} mode; VM pid {}",
        o.name,
        a.func,
        regs::mac_string(&a.mac),
        o.device_node,
        o.mode,
        child.id()
    );

    let revoked = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    // The function's interrupts and the manager's notices, to the VM.
    let irq_thread = {
        let (ours, irq, revoked, done, key, func) =
            (ours.clone(), irq.clone(), revoked.clone(), done.clone(), o.key.clone(), a.func);
        let vm_irq = vm_irq.as_ref().map(|e: &EventFd| e.try_clone()).transpose()?;
        std::thread::Builder::new().name("vsci-vm-irq".into()).spawn(move || {
            let mut buf = vec![0u8; vsci_proto::intr::DATA_MAX];
            while !done.load(Ordering::Relaxed) {
                match irq.wait_data(&mut buf, 200) {
                    Ok(DataWait::Got(n)) => match msg::decode::<ToHost>(&buf[..n]) {
                        Some(ToHost::Irq { func: f, vector }) if f == func && (vector as usize) < regs::VECTORS => {
                            if let Some(ch) = &ours {
                                let _ = send(ch, &[vector]);
                            }
                            if let Some(e) = &vm_irq {
                                let _ = e.write(1);
                            }
                        }
                        Some(ToHost::Manager(s)) => match msg::open::<ReplyFor>(&key, &s) {
                            Ok(env) => {
                                if let Reply::Revoked { why, .. } = env.msg.reply {
                                    warn!("function {func} was taken back: {why}; stopping the VM");
                                    revoked.store(true, Ordering::SeqCst);
                                    return;
                                }
                            }
                            Err(e) => warn!("a notice that is not the manager's: {e}; ignored"),
                        },
                        _ => warn!("a message on the VM's interrupt that is not its function's; ignored"),
                    },
                    Ok(DataWait::TooSmall(_)) => unreachable!("the buffer holds DATA_MAX"),
                    Err(SciError::Timeout) => {}
                    Err(e) => {
                        warn!("the VM's interrupt failed: {e}");
                        return;
                    }
                }
            }
        })?
    };
    // The VM's register writes, checked and forwarded (this thread).
    let mut buf = vec![0u8; MAX_WRITES * 12 + 1];
    let mut outside = 0u64;
    let outcome = loop {
        if stop.load(Ordering::Relaxed) {
            break "stopped";
        }
        if revoked.load(Ordering::SeqCst) {
            break "revoked";
        }
        if let Ok(Some(_)) = child.try_wait() {
            break "the VM ended";
        }
        if guest_net.as_ref().is_some_and(|t| t.is_finished()) {
            break "the guest's network backend ended";
        }
        let Some(ours) = &ours else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let mut p = [nix::poll::PollFd::new(ours.as_fd(), nix::poll::PollFlags::POLLIN)];
        if !matches!(nix::poll::poll(&mut p, nix::poll::PollTimeout::from(100u16)), Ok(n) if n > 0) {
            continue;
        }
        let n = match recv(ours, &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => break "the VM closed its channel",
            Ok(n) => n,
            Err(nix::errno::Errno::EAGAIN) => continue,
            Err(e) => {
                warn!("the VM's channel failed: {e}");
                break "channel error";
            }
        };
        let Some(writes) = regs::decode_writes(&buf[..n]) else {
            warn!(
                "VM {}: a torn register write ({n} bytes), or more than {MAX_WRITES} in one message; dropped",
                o.name
            );
            continue;
        };
        // The window is all the VM's CPU can reach of the device: writes
        // outside it (another function's registers, the device's own) go
        // nowhere, as stores outside a VM's EPT mappings.
        let (inside, out): (Vec<_>, Vec<_>) =
            writes.into_iter().partition(|&(off, _)| off < regs::WINDOW && off % 8 == 0);
        for (off, _) in &out {
            outside += 1;
            if outside <= 20 || outside.is_multiple_of(1000) {
                warn!("refused: VM {} wrote offset {off:#x}, outside its function's {:#x}-byte register window (EPT violation #{outside}); not forwarded", o.name, regs::WINDOW);
            }
        }
        req.send_regs(a.func, a.token, &inside);
    };
    info!("VM {}: {outcome}", o.name);
    done.store(true, Ordering::Relaxed);
    stop_child(&mut child);
    let _ = irq_thread.join();
    if let Some(net) = guest_net {
        match net.join() {
            Ok(Ok(st)) => println!("vsci device vm {}: guest network {st:?}", o.name),
            Ok(Err(e)) => warn!("the guest's network backend failed: {e}"),
            Err(_) => warn!("the guest's network backend panicked"),
        }
    }
    if !revoked.load(Ordering::SeqCst) {
        match req.call(Request::Release { func: a.func, token: a.token }, Duration::from_secs(5)) {
            Ok(Reply::Done) => info!("function {} released", a.func),
            Ok(r) => warn!("releasing function {}: {r:?}", a.func),
            Err(e) => warn!("releasing function {}: {e}", a.func),
        }
    }
    drop(req);
    crate::status::withdraw(&o.socket, &tag);
    let _ = irq.remove();
    let _ = ram.remove();
    println!("vsci device vm {}: {outcome}", o.name);
    if revoked.load(Ordering::SeqCst) {
        bail!("function {} was revoked by the device host", a.func);
    }
    Ok(())
}

type GuestNetThread = std::thread::JoinHandle<Result<crate::vhost::GuestStats>>;

/// Start the guest's network backend, then QEMU (through `vsci vm run`)
/// with the memory segment as its RAM and a virtio-net card on the backend.
fn start_guest(
    o: &VmOptions,
    command: &[String],
    rest: &[String],
    ram: &vsci_client::LocalSegment,
    a: &crate::msg::Assigned,
    req: Arc<Requester>,
) -> Result<(Child, GuestNetThread, EventFd)> {
    let irq = EventFd::new(libc::EFD_NONBLOCK)?;
    let st = nix::sys::stat::fstat(ram.memfd().as_raw_fd())?;
    let (func, token) = (a.func, a.token);
    let port = crate::vhost::Port {
        write_regs: Box::new(move |w: &[(u32, u64)]| req.send_regs(func, token, w)),
        seg: crate::mem::Mapping::new(ram.memfd(), ram.size as usize)?,
        seg_ino: (st.st_dev, st.st_ino),
        mode: o.mode,
        ring_area: o.ram,
        handles: a.handles,
    };
    let sock = std::env::temp_dir().join(format!("vsci-guest-net-{}-{}.sock", std::process::id(), o.name));
    let _ = std::fs::remove_file(&sock);
    let net = {
        let (sock, irq) = (sock.clone(), irq.try_clone()?);
        std::thread::Builder::new()
            .name("vsci-guest-net".into())
            .spawn(move || crate::vhost::serve(&sock, port, irq))?
    };
    // QEMU connects as soon as it starts: the backend must listen first.
    let t0 = std::time::Instant::now();
    while !sock.exists() {
        anyhow::ensure!(!net.is_finished(), "the guest's network backend did not start");
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(10),
            "the guest's network backend did not listen on {}",
            sock.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (prog, args) = command.split_first().ok_or_else(|| anyhow!("no guest command"))?;
    let mut c = Command::new(prog);
    c.args(args)
        .arg("--mem-path")
        .arg(format!("/proc/{}/fd/{}", std::process::id(), ram.memfd().as_raw_fd()))
        .arg("--memory")
        .arg((o.ram >> 20).to_string())
        .arg("--net")
        .arg(format!("vhost-user:{},mac={}", sock.display(), regs::mac_string(&a.mac)))
        .args(rest)
        .stdin(std::process::Stdio::null());
    let child = c.spawn().map_err(|e| anyhow!("cannot start the guest ({prog}): {e}"))?;
    Ok((child, net, irq))
}

fn stop_child(child: &mut Child) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
    for _ in 0..50 {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Start the VM with its memory as fd 3 and its channel as fd 4 and
/// nothing else of ours (every other descriptor of this process is
/// close-on-exec).
fn spawn_driver(cmd: &[String], ram: std::os::fd::BorrowedFd<'_>, chan: &OwnedFd) -> Result<Child> {
    let (prog, args) = cmd.split_first().ok_or_else(|| anyhow!("no driver command"))?;
    let (ram_fd, chan_fd) = (ram.as_raw_fd(), chan.as_raw_fd());
    let mut c = Command::new(prog);
    c.args(args).args(["--ram-fd", "3", "--chan-fd", "4"]).stdin(std::process::Stdio::null());
    // SAFETY: between fork and exec only async-signal-safe calls (dup,
    // dup2, close); the descriptors are ours and open.
    unsafe {
        c.pre_exec(move || {
            // Move both above 4 first so that dup2 onto 3 and 4 cannot
            // clobber the other one.
            let r = libc::fcntl(ram_fd, libc::F_DUPFD, 10);
            let ch = libc::fcntl(chan_fd, libc::F_DUPFD, 10);
            if r < 0 || ch < 0 || libc::dup2(r, 3) < 0 || libc::dup2(ch, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(r);
            libc::close(ch);
            Ok(())
        });
    }
    c.spawn().map_err(|e| anyhow!("cannot start the VM ({prog}): {e}"))
}
