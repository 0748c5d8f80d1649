//! Boot a guest, run one command in it, relay its output, return its status.
//!
//! QEMU gets three serial ports, each a pipe we read: ttyS0 carries the
//! kernel console and /init's status lines (`@@vsci-exit NONCE STATUS@@`),
//! ttyS1 the command's stdout and ttyS2 its stderr. So kernel noise never
//! mixes with the command's output, and nothing has to be stripped by guessing.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::agent::{Agent, AgentConfig};
use crate::image::{self, RunFiles};
use crate::ivshmem;

/// Exit status when the run timed out (as timeout(1)).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status when the guest ended without reporting the command's status.
pub const EXIT_NO_STATUS: i32 = 125;

/// Which accelerator to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// KVM where the CPU shows vmx or svm and /dev/kvm works, else TCG.
    Auto,
    Kvm,
    Tcg,
}

/// The accelerator chosen and why.
#[derive(Clone, Debug)]
pub struct AccelChoice {
    pub kvm: bool,
    pub why: String,
}

/// What `vsci vm run` was asked to do.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub name: String,
    /// The node's socket; attached as an ivshmem-doorbell device when it
    /// speaks the ivshmem server protocol.
    pub socket: Option<PathBuf>,
    pub adds: Vec<(PathBuf, String)>,
    pub env: Vec<(String, String)>,
    pub command: Vec<String>,
    /// Expose QMP on this UNIX socket (for hot-plugging segment windows).
    pub qmp: Option<PathBuf>,
    /// MSI-X vectors of the doorbell device (match the server's).
    pub vectors: u16,
    pub memory_mb: u32,
    /// vCPUs; `None`: 2 under KVM, 1 under TCG.
    pub cpus: Option<u32>,
    pub timeout: Option<Duration>,
    pub accel: Accel,
    /// Copy the guest's console to stderr (`VSCI_VM_CONSOLE=1` does too).
    pub console: bool,
    /// Disks for the guest, as QEMU `-drive file=` names them (a raw image
    /// file, or an NBD URL such as `vsci blockdev` prints); the guest sees
    /// them as virtio-blk devices /dev/vda, /dev/vdb, ...
    pub drives: Vec<String>,
    /// A virtio-net card on QEMU's user-mode network: the guest is
    /// 10.0.2.15 and reaches the host side (QEMU's network namespace, its
    /// loopback included) at 10.0.2.2. No other network is given.
    pub net_user: bool,
    /// A virtio-net card whose backend is the vhost-user server at this
    /// socket, with this MAC (a shared device's function: `vsci device vm
    /// --guest`). Needs `mem_path`: the backend reaches guest memory.
    pub vhost_user_net: Option<(PathBuf, String)>,
    /// Guest RAM is this file, mapped shared (a vsci memory segment, so
    /// that a device on another node reaches the guest's own buffers).
    pub mem_path: Option<PathBuf>,
}

impl RunConfig {
    pub fn new(name: &str, command: Vec<String>) -> RunConfig {
        RunConfig {
            name: name.to_string(),
            socket: None,
            adds: Vec::new(),
            env: Vec::new(),
            command,
            qmp: None,
            vectors: 16,
            memory_mb: 512,
            cpus: None,
            timeout: None,
            accel: Accel::Auto,
            console: false,
            drives: Vec::new(),
            net_user: false,
            vhost_user_net: None,
            mem_path: None,
        }
    }
}

fn cpu_flags() -> (bool, bool) {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    (has("vmx"), has("svm"))
}

/// True if /dev/kvm opens read-write and answers KVM_GET_API_VERSION with 12.
fn kvm_works() -> std::result::Result<(), String> {
    let f = fs::File::options().read(true).write(true).open("/dev/kvm").map_err(|e| format!("/dev/kvm: {e}"))?;
    const KVM_GET_API_VERSION: libc::c_ulong = 0xAE00;
    // SAFETY: an ioctl without arguments on a descriptor we own.
    let v = unsafe { libc::ioctl(f.as_raw_fd(), KVM_GET_API_VERSION, 0) };
    if v == 12 {
        Ok(())
    } else {
        Err(format!("/dev/kvm answers API version {v}"))
    }
}

/// KVM only where the CPU shows vmx or svm *and* /dev/kvm works: some hosts
/// offer a /dev/kvm on which stock guest kernels hang (nested "PVM" KVM).
pub fn choose_accel(pref: Accel) -> AccelChoice {
    match pref {
        Accel::Kvm => return AccelChoice { kvm: true, why: "asked for".into() },
        Accel::Tcg => return AccelChoice { kvm: false, why: "asked for".into() },
        Accel::Auto => {}
    }
    let (vmx, svm) = cpu_flags();
    if !vmx && !svm {
        return AccelChoice { kvm: false, why: "the CPU shows neither vmx nor svm; software emulation, slower".into() };
    }
    let flag = if vmx { "vmx" } else { "svm" };
    match kvm_works() {
        Ok(()) => AccelChoice { kvm: true, why: format!("the CPU shows {flag} and /dev/kvm works") },
        Err(e) => AccelChoice { kvm: false, why: format!("the CPU shows {flag} but {e}") },
    }
}

/// `qemu-system-x86_64` on PATH, or `$VSCI_QEMU`.
pub fn find_qemu() -> Option<PathBuf> {
    if let Some(q) = std::env::var_os("VSCI_QEMU").filter(|q| !q.is_empty()) {
        return Some(PathBuf::from(q));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path).map(|d| d.join("qemu-system-x86_64")).find(|p| p.is_file())
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        let base = std::env::temp_dir();
        remove_stale(&base);
        for _ in 0..100 {
            let p = base.join(format!("vsci-vm-{}-{}", std::process::id(), nonce()));
            match fs::create_dir(&p) {
                Ok(()) => {
                    fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
                    return Ok(TempDir(p));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("create {}", p.display())),
            }
        }
        bail!("cannot create a temporary directory in {}", base.display())
    }
}

/// Remove `vsci-vm-PID-*` directories whose PID is gone (a run that was
/// killed with SIGKILL cannot clean up after itself).
fn remove_stale(base: &std::path::Path) {
    let Ok(entries) = fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) =
            name.strip_prefix("vsci-vm-").and_then(|r| r.split('-').next()).and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn nonce() -> String {
    let mut b = [0u8; 8];
    if fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_err() {
        static N: AtomicUsize = AtomicUsize::new(0);
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        b = (t.as_nanos() as u64 ^ N.fetch_add(1, Ordering::Relaxed) as u64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Kill QEMU: SIGTERM, then SIGKILL if it has not gone within 3 s.
fn kill_qemu(child: &mut Child) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Boot the guest, run the command, relay its output; returns the exit code
/// for `vsci vm run` (the command's status, or 124/125/130 and a message).
pub fn run(cfg: &RunConfig) -> Result<i32> {
    if cfg.command.is_empty() {
        bail!("no command to run in the guest");
    }
    let qemu = find_qemu()
        .context("qemu-system-x86_64 not found: install Debian's qemu-system-x86 (scripts/install-deps.sh does)")?;
    let say = |s: &str| eprintln!("vsci vm: {s}");
    let img = image::ensure_image(&say)?;

    let accel = choose_accel(cfg.accel);
    say(&format!("accelerator {} ({})", if accel.kvm { "kvm" } else { "tcg" }, accel.why));

    let tmp = TempDir::new()?;
    // A node's socket (vscid) gets an agent serving the guest's doorbell
    // device; a socket that already speaks the ivshmem protocol (a bare
    // ivshmem server) is attached directly.
    let mut doorbell = None;
    let mut agent = None;
    let agent_qmp = tmp.0.join("agent-qmp.sock");
    if let Some(sock) = &cfg.socket {
        match ivshmem::probe(sock, Duration::from_secs(2)) {
            ivshmem::Probe::Ivshmem => doorbell = Some(sock.clone()),
            ivshmem::Probe::Other(_) => {
                let a = Agent::start(
                    AgentConfig {
                        node_socket: sock.clone(),
                        name: cfg.name.clone(),
                        vectors: cfg.vectors,
                        qmp: agent_qmp.clone(),
                    },
                    &tmp.0,
                )?;
                doorbell = Some(a.ivshmem_socket().to_path_buf());
                agent = Some(a);
            }
        }
    }
    let nonce = nonce();
    let run_cpio = image::run_archive(&RunFiles {
        name: &cfg.name,
        nonce: &nonce,
        command: &cfg.command,
        adds: &cfg.adds,
        env: &cfg.env,
        has_libsisci: img.libsisci.is_some(),
        warn: &say,
    })?;
    let initrd = tmp.0.join("initrd.cpio");
    image::write_initrd(&img, &run_cpio, &initrd)?;

    let console = cfg.console || std::env::var_os("VSCI_VM_CONSOLE").is_some_and(|v| v != "0" && !v.is_empty());
    let (con_r, con_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    for r in [&con_r, &out_r, &err_r] {
        set_nonblocking(r)?;
    }

    let mut append = String::from("console=ttyS0 panic=-1 rdinit=/init");
    // A page of its own for each ivshmem BAR0, so the driver may map the
    // doorbell register page into user space without exposing a neighbour.
    append.push_str(" pci=resource_alignment=12@pci:1af4:1110");
    if !console {
        append.push_str(" quiet");
    }
    let mut cmd = Command::new(&qemu);
    cmd.arg("-name").arg(sanitize(&cfg.name));
    match &cfg.mem_path {
        Some(p) => {
            cmd.arg("-object").arg(format!(
                "memory-backend-file,id=vsci-ram,size={}M,mem-path={},share=on",
                cfg.memory_mb,
                qemu_opt(p)
            ));
            cmd.args(["-machine", "pc,memory-backend=vsci-ram"]);
        }
        None => {
            cmd.args(["-machine", "pc"]);
        }
    }
    cmd.args(["-accel", if accel.kvm { "kvm" } else { "tcg" }]);
    // By default one vCPU under TCG: TCG on a small host should not take
    // every core. Two processes of one guest that poll each other (a
    // ping-pong) need two, hence --cpus (TCG then runs one thread per vCPU).
    let cpus = cfg.cpus.unwrap_or(if accel.kvm { 2 } else { 1 });
    if accel.kvm {
        cmd.args(["-cpu", "host"]);
    }
    cmd.arg("-smp").arg(cpus.to_string());
    cmd.arg("-m").arg(cfg.memory_mb.to_string());
    cmd.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]);
    cmd.arg("-kernel").arg(&img.kernel).arg("-initrd").arg(&initrd).arg("-append").arg(&append);
    for (id, w) in [("con", &con_w), ("out", &out_w), ("err", &err_w)] {
        cmd.arg("-chardev").arg(format!("file,id={id},path=/dev/fd/{}", w.as_raw_fd()));
        cmd.arg("-serial").arg(format!("chardev:{id}"));
    }
    if let Some(q) = &cfg.qmp {
        cmd.arg("-qmp").arg(format!("unix:{},server=on,wait=off", qemu_opt(q)));
    }
    if agent.is_some() {
        cmd.arg("-qmp").arg(format!("unix:{},server=on,wait=off", qemu_opt(&agent_qmp)));
    }
    if let Some(sock) = &doorbell {
        cmd.arg("-chardev").arg(format!("socket,id=vscictl,path={}", qemu_opt(sock)));
        cmd.arg("-device").arg(format!(
            "ivshmem-doorbell,id=vsci-ctl,chardev=vscictl,vectors={},addr={:#x}",
            cfg.vectors,
            crate::agent::CTL_SLOT
        ));
    }
    for d in &cfg.drives {
        cmd.arg("-drive").arg(format!("file={},format=raw,if=virtio", d.replace(',', ",,")));
    }
    if cfg.net_user {
        cmd.args(["-nic", "user,model=virtio-net-pci"]);
    }
    if let Some((sock, mac)) = &cfg.vhost_user_net {
        anyhow::ensure!(
            cfg.mem_path.is_some(),
            "a vhost-user network card needs the guest's memory in a file (--mem-path)"
        );
        cmd.arg("-chardev").arg(format!("socket,id=vsci-vu,path={}", qemu_opt(sock)));
        cmd.args(["-netdev", "vhost-user,id=vsci-vun,chardev=vsci-vu"]);
        // vectors=0 (INTx): QEMU 7.2 crashes in msix_set_vector_notifiers
        // when a vhost device starts without irqfd (under TCG).
        let vectors = if accel.kvm { "" } else { ",vectors=0" };
        cmd.arg("-device").arg(format!("virtio-net-pci,netdev=vsci-vun,mac={mac}{vectors}"));
    }
    cmd.stdin(Stdio::null());
    // QEMU prints nothing on stdout; keep ours for the command's output.
    cmd.stdout(io::stderr());
    let fds: Vec<i32> = [&con_w, &out_w, &err_w].iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the closure only makes async-signal-safe system calls.
    unsafe {
        cmd.pre_exec(move || {
            // own process group: the terminal's Ctrl-C reaches us, and we stop
            // QEMU ourselves; and QEMU dies with us if we are killed
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            for fd in &fds {
                if libc::fcntl(*fd, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    log::debug!("{:?}", cmd);
    // From here on a signal stops QEMU and cleans up instead of killing us.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut sig_ids = Vec::new();
    for s in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        if let Ok(id) = signal_hook::flag::register(s, stop.clone()) {
            sig_ids.push(id);
        }
    }
    let t0 = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            for id in sig_ids {
                signal_hook::low_level::unregister(id);
            }
            return Err(e).with_context(|| format!("start {}", qemu.display()));
        }
    };
    drop((con_w, out_w, err_w));

    let mut relay = Relay { nonce: &nonce, console, line: Vec::new(), status: None, started: false, tail: Vec::new() };
    let mut streams = [Some(con_r), Some(out_r), Some(err_r)];
    let deadline = cfg.timeout.map(|t| Instant::now() + t);
    let mut outcome = None;
    let mut exited = false;
    loop {
        let open: Vec<usize> = (0..3).filter(|i| streams[*i].is_some()).collect();
        if open.is_empty() {
            break;
        }
        let mut pfds: Vec<libc::pollfd> = open
            .iter()
            .map(|i| libc::pollfd { fd: streams[*i].as_ref().unwrap().as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: pfds is a live array of pollfd.
        unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 100) };
        for (k, i) in open.iter().enumerate() {
            if pfds[k].revents == 0 {
                continue;
            }
            let mut buf = [0u8; 65536];
            let fd = streams[*i].as_ref().unwrap().as_raw_fd();
            // SAFETY: read into a live buffer of its length.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
            if n == 0 {
                streams[*i] = None; // every writer (QEMU) is gone
            } else if n > 0 {
                let data = &buf[..n as usize];
                match i {
                    0 => relay.console(data),
                    1 => {
                        let mut o = io::stdout().lock();
                        let _ = o.write_all(data);
                        let _ = o.flush();
                    }
                    _ => {
                        let _ = io::stderr().write_all(data);
                    }
                }
            }
        }
        if !exited {
            if let Ok(Some(_)) = child.try_wait() {
                exited = true;
            }
        }
        if exited {
            continue; // drain the pipes to end-of-file
        }
        if stop.load(Ordering::Relaxed) {
            say("interrupted: stopping the guest");
            kill_qemu(&mut child);
            outcome = Some(130);
            exited = true;
        } else if deadline.is_some_and(|d| Instant::now() >= d) {
            say(&format!("timed out after {:?}: stopping the guest", cfg.timeout.unwrap()));
            kill_qemu(&mut child);
            outcome = Some(EXIT_TIMEOUT);
            exited = true;
        }
    }
    let st = child.wait()?;
    drop(agent);
    for id in sig_ids {
        signal_hook::low_level::unregister(id);
    }
    relay.flush();
    log::debug!("guest ran {:.1} s, qemu {st}", t0.elapsed().as_secs_f64());
    if let Some(code) = outcome {
        return Ok(code);
    }
    match relay.status {
        Some(s) => Ok(s),
        None => {
            say(&format!(
                "the guest ended without reporting the command's status (qemu {st}); its last console lines:"
            ));
            for l in &relay.tail {
                eprintln!("  | {l}");
            }
            Ok(EXIT_NO_STATUS)
        }
    }
}

/// A path inside a QEMU option string: commas are doubled.
fn qemu_opt(p: &std::path::Path) -> String {
    p.display().to_string().replace(',', ",,")
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect()
}

/// Reads the console: finds /init's status lines, forwards its complaints,
/// keeps a tail for error reports, and echoes everything if asked.
struct Relay<'a> {
    nonce: &'a str,
    console: bool,
    line: Vec<u8>,
    status: Option<i32>,
    started: bool,
    tail: Vec<String>,
}

impl Relay<'_> {
    fn console(&mut self, data: &[u8]) {
        if self.console {
            let _ = io::stderr().write_all(data);
        }
        for &b in data {
            if b == b'\n' {
                let l = String::from_utf8_lossy(&self.line).trim_end_matches('\r').to_string();
                self.line.clear();
                self.handle(l);
            } else if self.line.len() < 4096 {
                self.line.push(b);
            }
        }
    }

    fn flush(&mut self) {
        if !self.line.is_empty() {
            let l = String::from_utf8_lossy(&self.line).to_string();
            self.line.clear();
            self.handle(l);
        }
    }

    fn handle(&mut self, l: String) {
        if let Some(rest) = l.strip_prefix("@@vsci-exit ").and_then(|r| r.strip_suffix("@@")) {
            if let Some((n, s)) = rest.split_once(' ') {
                if n == self.nonce {
                    self.status = s.trim().parse().ok();
                    return;
                }
            }
        }
        if l == format!("@@vsci-start {}@@", self.nonce) {
            self.started = true;
            return;
        }
        if l.starts_with("vsci-init:") && !self.console {
            eprintln!("vsci vm: guest {}", l);
        }
        self.tail.push(l);
        if self.tail.len() > 40 {
            self.tail.remove(0);
        }
    }
}

/// The QEMU process started by a `vsci vm run` with pid `pid` (its child).
pub fn qemu_child_of(pid: u32) -> Option<u32> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for t in tasks.flatten() {
        let children = fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for c in children.split_whitespace() {
            if let Ok(c) = c.parse::<u32>() {
                let comm = fs::read_to_string(format!("/proc/{c}/comm")).unwrap_or_default();
                if comm.trim().starts_with("qemu") {
                    return Some(c);
                }
            }
        }
    }
    None
}

/// Open descriptors of a process.
pub fn fd_count(pid: u32) -> Option<usize> {
    Some(fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_finds_status_and_ignores_foreign_markers() {
        let mut r =
            Relay { nonce: "abc", console: false, line: Vec::new(), status: None, started: false, tail: Vec::new() };
        r.console(b"[    1.0] noise\r\n@@vsci-start abc@@\r\n@@vsci-exit zzz 9@@\r\n@@vsci-exit abc 3@@\r\n");
        assert!(r.started);
        assert_eq!(r.status, Some(3));
    }

    #[test]
    fn accel_override() {
        assert!(!choose_accel(Accel::Tcg).kvm);
        assert!(choose_accel(Accel::Kvm).kvm);
    }
}
