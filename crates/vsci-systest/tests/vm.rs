//! `vsci vm run` and the guest driver, in real QEMU guests (TCG here: each
//! boot takes about 5 s). Skipped, with a message, where qemu-system-x86_64 is
//! not installed. The first test to need the guest image builds it (about 6 s
//! plus the kernel download); later ones reuse it.
//!
//! Five full boots: a shell command; the driver with ivshmem-doorbell devices
//! served by an in-test ivshmem server; a memfd hot-plugged over QMP as
//! ivshmem-plain, followed by 50 plug/unplug cycles in the same guest;
//! sessions, vector files and doorbell files on a vsci control region; and
//! the window table as windows are opened, mapped, closed and unplugged.
//! Plus two short runs stopped by --timeout and by SIGINT.

mod common;

use std::fs;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vsci_vm::ivshmem::{self, Config, Event, Server};
use vsci_vm::qmp::Qmp;

/// A socket path where no node answers.
const NO_NODE: &str = "/nonexistent/vscid.sock";

/// A whole guest run may take this long (boot under TCG is ~5 s).
const VM_TIMEOUT: Duration = Duration::from_secs(300);

/// Unwrap a host-side step; on error stop the guest and show everything it printed.
macro_rules! ok {
    ($vm:ident, $e:expr, $what:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => {
                $vm.signal(libc::SIGTERM);
                panic!("{}: {:#}\n{}", $what, e, $vm.wait(LINE_TIMEOUT).describe())
            }
        }
    };
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Build guest/tools/vsci_guest_check.c, dynamically linked, into `dir`.
fn guest_check(dir: &Path) -> PathBuf {
    let out = dir.join("vsci_guest_check");
    let o = run(
        "cc vsci_guest_check",
        Command::new("cc")
            .args(["-O2", "-Wall", "-Werror", "-I"])
            .arg(repo().join("guest/driver"))
            .arg("-o")
            .arg(&out)
            .arg(repo().join("guest/tools/vsci_guest_check.c")),
        PROGRAM_TIMEOUT,
    );
    o.assert_success();
    out
}

/// Appended to a guest command: fail, showing the lines, if the kernel
/// logged a warning, a bug or a trace (the driver's locking and unplug paths).
const KERNEL_CLEAN: &str = " && dmesg > /tmp/kmsg && ! grep -E 'WARNING|BUG|Oops|Call Trace|refcount' /tmp/kmsg";

fn vsci_vm() -> Command {
    let mut c = Command::new(built("bin/vsci"));
    // Without --socket, `vsci vm run` attaches to $VSCI_SOCKET's node when
    // one answers: make sure none does unless a test names one.
    c.args(["vm", "run", "--timeout", "240"]).env("VSCI_SOCKET", NO_NODE).stdin(Stdio::null());
    c
}

fn memfd(size: u64, data: &[u8]) -> OwnedFd {
    let fd = vsci_sys::memfd::create(c"vsci-vm-test", size, vsci_sys::memfd::Seals::NONE).expect("memfd_create");
    std::os::unix::fs::FileExt::write_all_at(&std::fs::File::from(fd.try_clone().expect("dup")), data, 0)
        .expect("pwrite");
    fd
}

fn read_at(fd: &OwnedFd, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    // SAFETY: pread into a live buffer of its length.
    let n = unsafe { libc::pread(fd.as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, len, off as i64) };
    assert_eq!(n, len as isize);
    b
}

// The control region's layout, as guest/driver/vsci_guest.h has it.
const CTL_MAGIC: u32 = 0x4743_5356;
const CTL_WINDOWS: u64 = 0x100;
const CTL_SESSIONS: u64 = 0x200;
const SESSION_SIZE: u64 = 0x10000;
/// 8 MiB: at least VSCI_CTL_MIN_SIZE, and a power of two (QEMU aborts on other BAR sizes).
const CTL_SIZE: u64 = 8 << 20;
const SESSION_OPEN: u32 = 1;
const SESSION_CLOSING: u32 = 2;
const VSCI_CTL_MAX_WINDOWS: u64 = 32;

fn session_area(i: u64) -> u64 {
    SESSION_SIZE * (i + 1)
}

/// A control region as the node sets it up: zeros but the magic.
fn ctl_region() -> OwnedFd {
    memfd(CTL_SIZE, &CTL_MAGIC.to_le_bytes())
}

fn word(fd: &OwnedFd, off: u64) -> u32 {
    u32::from_le_bytes(read_at(fd, off, 4).try_into().unwrap())
}

fn set_word(fd: &OwnedFd, off: u64, v: u32) {
    let b = v.to_le_bytes();
    // SAFETY: pwrite from a live buffer of its length.
    assert_eq!(unsafe { libc::pwrite(fd.as_raw_fd(), b.as_ptr() as *const libc::c_void, 4, off as i64) }, 4);
}

/// Wait until the word at `off` is `want`; Err with the last value seen.
fn wait_word(fd: &OwnedFd, off: u64, want: u32, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let v = word(fd, off);
        if v == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("word at {off:#x} is {v:#x}, wanted {want:#x}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn cstr(b: &[u8]) -> String {
    String::from_utf8_lossy(b.split(|c| *c == 0).next().unwrap_or(&[])).to_string()
}

#[test]
fn runs_a_command_and_returns_its_status() {
    if !have_qemu() {
        return;
    }
    // A SISCI program linked against libsisci without an rpath: it finds the
    // libsisci the image carries (the one next to `vsci`, build/lib).
    let dir = TempDir::new("vm-sh");
    let sisci = dir.path.join("shmem");
    run(
        "cc shmem",
        Command::new("cc")
            .arg("-I")
            .arg(repo().join("include"))
            .arg("-o")
            .arg(&sisci)
            .arg(repo().join("examples/shmem.c"))
            .arg("-L")
            .arg(built("lib"))
            .args(["-lsisci", "-lpthread"]),
        PROGRAM_TIMEOUT,
    )
    .assert_success();
    // A --socket where no node answers is an error before anything boots.
    let o = run(
        "vsci vm run --socket (nobody there)",
        vsci_vm().args(["--name", "nonode", "--socket", "/nonexistent/vscid.sock", "--", "true"]),
        VM_TIMEOUT,
    );
    assert_eq!(o.status.code(), Some(1), "{}", o.describe());
    assert!(o.stderr.contains("cannot reach vscid at /nonexistent/vscid.sock"), "{}", o.describe());
    let t0 = Instant::now();
    // Without --socket the guest attaches to $VSCI_SOCKET's node if one
    // answers there; here none does, so the guest has no node.
    let o = run(
        "vsci vm run sh",
        vsci_vm().args(["--name", "hello", "--add"]).arg(format!("{}:/usr/bin/shmem", sisci.display())).args([
            "--",
            "/bin/sh",
            "-c",
            "echo hello; echo oops >&2; shmem -server -timeout 100 >&2; exit 3",
        ]),
        VM_TIMEOUT,
    );
    assert_eq!(o.status.code(), Some(3), "{}", o.describe());
    assert_eq!(o.stdout, "hello\n", "only the command's output on stdout\n{}", o.describe());
    assert!(o.stderr.contains("oops"), "{}", o.describe());
    assert!(o.stderr.contains("accelerator tcg") || o.stderr.contains("accelerator kvm"), "{}", o.describe());
    assert!(!o.stderr.contains("attaching to the node"), "{}", o.describe());
    // libsisci loaded and ran: no node in the guest yet, so SCIOpen fails
    assert!(o.stderr.contains("SCIOpen failed: SCI_ERR_NO_LINK_ACCESS"), "{}", o.describe());
    eprintln!("vm sh run: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn timeout_and_interrupt_stop_qemu_and_clean_up() {
    if !have_qemu() {
        return;
    }
    let tmp = TempDir::new("vm-stop");
    let start = |name: &str, timeout: &str| {
        let mut c = Command::new(built("bin/vsci"));
        c.args(["vm", "run", "--name", name, "--timeout", timeout, "--", "sleep", "600"])
            .env("TMPDIR", &tmp.path)
            .env("VSCI_SOCKET", NO_NODE)
            .stdin(Stdio::null());
        Proc::spawn(name, &mut c)
    };
    let timed = start("timed", "3");
    let interrupted = start("interrupted", "0");
    // wait until its QEMU runs, then Ctrl-C
    let qemu = wait_for(LINE_TIMEOUT, "QEMU under vsci", || vsci_vm::run::qemu_child_of(interrupted.pid()));
    interrupted.signal(libc::SIGINT);
    let o = interrupted.wait(VM_TIMEOUT);
    assert_eq!(o.status.code(), Some(130), "{}", o.describe());
    assert!(o.stderr.contains("interrupted"), "{}", o.describe());
    assert!(
        !Path::new(&format!("/proc/{qemu}")).exists()
            || fs::read_to_string(format!("/proc/{qemu}/stat")).map_or(true, |s| s.contains(") Z")),
        "QEMU {qemu} still runs"
    );
    let o = timed.wait(VM_TIMEOUT);
    assert_eq!(o.status.code(), Some(124), "{}", o.describe());
    assert!(o.stderr.contains("timed out"), "{}", o.describe());
    let left: Vec<_> = fs::read_dir(&tmp.path).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
}

#[test]
fn driver_doorbells_and_msix_with_an_ivshmem_server() {
    if !have_qemu() {
        return;
    }
    let dir = TempDir::new("vm-ctl");
    let prog = guest_check(&dir.path);
    let sock = dir.path.join("ivshmem.sock");
    let shm = memfd(1 << 20, b"hello from host");
    let shm_for_server = shm.try_clone().unwrap();
    let cfg = Config { vectors: 4, host_peer: true, announce_peers: false, max_clients: 8 };
    let srv = Server::start(&sock, cfg, move |_| shm_for_server.try_clone()).unwrap();

    let qmp_path = dir.path.join("qmp.sock");
    let t0 = Instant::now();
    let mut vm = Proc::spawn(
        "vsci vm run (doorbell)",
        vsci_vm()
            .arg("--name")
            .arg("ctl")
            .arg("--qmp")
            .arg(&qmp_path)
            .arg("--socket")
            .arg(&sock)
            .args(["--vectors", "4", "--add"])
            .arg(format!("{}:/usr/bin/vsci_guest_check", prog.display()))
            // ring the node (peer 0) on vector 1, then wait for our vector 2
            // (as root: it maps the whole region). Then the same on a second
            // doorbell device hot-plugged at run time, as uid 1000: the device
            // files are for ordinary users, all but the whole-region map.
            // Then the first is unplugged under a waiting program; the
            // second's vector 1 ends the run.
            .args(["--", "/bin/sh", "-c"])
            .arg(
                "vsci_guest_check ctl /dev/vsci-ctl0 0 1 2 60000 \
                 && vsci_guest_check await /dev/vsci-ctl1 60000 \
                 && vsci_guest_check --user ctl /dev/vsci-ctl1 0 3 0 60000 \
                 && vsci_guest_check gone /dev/vsci-ctl0 \
                 && vsci_guest_check wait /dev/vsci-ctl1 1 60000"
                    .to_string()
                    + KERNEL_CLEAN,
            ),
    );
    let line = vm.wait_line("ivposition ", VM_TIMEOUT);
    let id: u16 = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(srv.peers().contains(&id), "guest id {id} not among the server's peers {:?}", srv.peers());
    vm.wait_line("shm says: hello from host", LINE_TIMEOUT);
    vm.wait_line("validation ok", LINE_TIMEOUT);
    vm.wait_line(&format!("regs page ivposition {id}"), LINE_TIMEOUT);
    vm.wait_line("rang peer 0 vector 1", LINE_TIMEOUT);
    // the guest's doorbell write reached the server's eventfd for vector 1
    let bell = srv.host_vector(1).unwrap();
    let rung = ok!(vm, ivshmem::wait_readable(bell, LINE_TIMEOUT), "poll the server's vector 1");
    ok!(vm, if rung { Ok(()) } else { Err("nothing within the line timeout") }, "doorbell on the server's vector 1");
    assert_eq!(ivshmem::drain(bell).unwrap(), 1);
    assert_eq!(ivshmem::drain(srv.host_vector(0).unwrap()).unwrap(), 0, "vector 0 was not rung");
    // the guest wrote into the shared region, and we see it in the memfd
    assert_eq!(cstr(&read_at(&shm, 64, 32)), "hello from guest");
    vm.wait_line("waiting on vector 2", LINE_TIMEOUT);
    ok!(vm, srv.notify(id, 2), "notify vector 2");
    vm.wait_line("vector 2 count 1", LINE_TIMEOUT);

    // a control channel attached at run time: MSI-X works on it as well
    vm.wait_line("awaiting /dev/vsci-ctl1", LINE_TIMEOUT);
    let mut q = ok!(vm, Qmp::connect(&qmp_path, Duration::from_secs(30)), "QMP connect");
    ok!(vm, q.plug_doorbell("vsci-ctl-2", &sock, 4), "hot-plug a doorbell device");
    vm.wait_line("plugged: /dev/vsci-ctl1", LINE_TIMEOUT);
    vm.wait_line("running as uid 1000", LINE_TIMEOUT);
    let line = vm.wait_line("ivposition ", LINE_TIMEOUT);
    let id2: u16 = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(id2 != id && srv.peers().contains(&id2), "new guest id {id2}; server's peers {:?}", srv.peers());
    vm.wait_line("whole-region map refused (EPERM)", LINE_TIMEOUT);
    vm.wait_line("rang peer 0 vector 3", LINE_TIMEOUT);
    let bell = srv.host_vector(3).unwrap();
    let rung = ok!(vm, ivshmem::wait_readable(bell, LINE_TIMEOUT), "poll the server's vector 3");
    ok!(vm, if rung { Ok(()) } else { Err("nothing within the line timeout") }, "doorbell on the server's vector 3");
    vm.wait_line("waiting on vector 0", LINE_TIMEOUT);
    ok!(vm, srv.notify(id2, 0), "notify the hot-plugged device");
    vm.wait_line("vector 0 count 1", LINE_TIMEOUT);

    // unplug the first doorbell device under a waiting program
    vm.wait_line("waiting on /dev/vsci-ctl0 until it is unplugged", LINE_TIMEOUT);
    ok!(vm, q.unplug_device("vsci-ctl", Some("vscictl"), Duration::from_secs(30)), "unplug of the doorbell device");
    vm.wait_line("unplugged: wait ended with ENODEV", LINE_TIMEOUT);
    vm.wait_line("unplugged: old mapping faults (SIGBUS)", LINE_TIMEOUT);
    // its chardev is gone: the server saw that client leave
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left = false;
    while Instant::now() < deadline && !left {
        left = matches!(srv.next_event(Duration::from_millis(200)), Some(Event::Disconnected(x)) if x == id);
    }
    assert!(left, "the server did not see guest {id} disconnect");

    // done with QMP: the second device's vector 1 lets the guest finish
    vm.wait_line("waiting on /dev/vsci-ctl1 vector 1", LINE_TIMEOUT);
    ok!(vm, srv.notify(id2, 1), "notify vector 1");
    vm.wait_line("/dev/vsci-ctl1 vector 1 count 1", LINE_TIMEOUT);
    vm.wait(VM_TIMEOUT).assert_success();
    eprintln!("vm doorbell run: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn hot_plugged_segment_window_and_50_cycles() {
    if !have_qemu() {
        return;
    }
    let dir = TempDir::new("vm-seg");
    let prog = guest_check(&dir.path);
    let qmp_path = dir.path.join("qmp.sock");
    const CYCLES: u32 = 50;
    let t0 = Instant::now();
    let mut vm = Proc::spawn(
        "vsci vm run (hot-plug)",
        vsci_vm()
            .arg("--name")
            .arg("seg")
            .arg("--qmp")
            .arg(&qmp_path)
            .arg("--add")
            .arg(format!("{}:/bin/vsci_guest_check", prog.display()))
            .args(["--", "/bin/sh", "-c"])
            .arg(format!(
                "vsci_guest_check --user seg /dev/vsci-win16 120000 && vsci_guest_check cycles {CYCLES} /dev/vsci-win16 60000 \
                 && vsci_guest_check await /dev/vsci-win16 60000{KERNEL_CLEAN}"
            )),
    );
    vm.wait_line("waiting for /dev/vsci-win16", VM_TIMEOUT);
    let mut q = ok!(vm, Qmp::connect(&qmp_path, Duration::from_secs(30)), "QMP connect");
    let qemu = ok!(vm, vsci_vm::run::qemu_child_of(vm.pid()).ok_or("no QEMU child"), "find QEMU");

    // plug 1 MiB at slot 0x10: the guest finds it as /dev/vsci-win16, reads
    // our data, writes back
    let seg = memfd(1 << 20, b"segment data 1");
    let p = ok!(vm, q.plug_memfd("seg-a", seg.as_fd(), 1 << 20, Some(0x10)), "plug seg-a");
    let line = vm.wait_line("/dev/vsci-win16 kind=seg", LINE_TIMEOUT);
    assert!(line.contains("shm_size=1048576") && line.contains("pci=0000:00:10.0"), "{line}");
    vm.wait_line("seg data: segment data 1", LINE_TIMEOUT);
    vm.wait_line("mapped; waiting for unplug", LINE_TIMEOUT);
    assert_eq!(cstr(&read_at(&seg, 64, 32)), "reply from guest");
    ok!(vm, q.unplug(&p, Duration::from_secs(30)), "unplug seg-a");
    vm.wait_line("unplugged: /dev/vsci-win16 gone", LINE_TIMEOUT);
    vm.wait_line("old mapping faults (SIGBUS)", LINE_TIMEOUT);
    drop(seg);

    // 50 more, each with a fresh memfd; QEMU's descriptors must not pile up
    let settle = |want: Option<usize>| -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let n = vsci_vm::run::fd_count(qemu).expect("QEMU's fd count");
            if want.is_none_or(|w| n <= w) || Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let before = settle(None);
    let tc = Instant::now();
    for i in 0..CYCLES {
        let fd = memfd(1 << 20, &i.to_le_bytes());
        let p = ok!(vm, q.plug_memfd(&format!("cyc{i}"), fd.as_fd(), 1 << 20, Some(0x10)), format!("cycle {i}: plug"));
        drop(fd);
        vm.wait_line(&format!("cycle {i} value {i}"), LINE_TIMEOUT);
        ok!(vm, q.unplug(&p, Duration::from_secs(30)), format!("cycle {i}: unplug"));
    }
    let cycles_s = tc.elapsed().as_secs_f64();
    vm.wait_line("cycles done", LINE_TIMEOUT);
    let after = settle(Some(before));
    assert!(after <= before, "QEMU's open descriptors grew from {before} to {after} over {CYCLES} plug/unplug cycles");
    // one more plug tells the guest we are done looking
    let fin = memfd(4096, b"fin");
    ok!(vm, q.plug_memfd("final", fin.as_fd(), 4096, Some(0x10)), "final plug");
    vm.wait_line("plugged: /dev/vsci-win16", LINE_TIMEOUT);
    let o = vm.wait(VM_TIMEOUT);
    o.assert_success();
    eprintln!(
        "vm hot-plug run: {:.1} s ({CYCLES} cycles in {cycles_s:.1} s; QEMU fds {before} -> {after})",
        t0.elapsed().as_secs_f64()
    );
    let _ = fs::remove_file(&qmp_path);
}

#[test]
fn driver_sessions_vector_files_and_doorbell_files() {
    if !have_qemu() {
        return;
    }
    let dir = TempDir::new("vm-sess");
    let prog = guest_check(&dir.path);
    let sock = dir.path.join("ivshmem.sock");
    let shm = ctl_region();
    let shm_for_server = shm.try_clone().unwrap();
    let cfg = Config { vectors: 4, host_peer: true, announce_peers: false, max_clients: 8 };
    let srv = Server::start(&sock, cfg, move |_| shm_for_server.try_clone()).unwrap();
    let t0 = Instant::now();
    // all as uid 1000: sessions are how ordinary users reach the region
    let mut vm = Proc::spawn(
        "vsci vm run (sessions)",
        vsci_vm()
            .args(["--name", "sess", "--socket"])
            .arg(&sock)
            .args(["--vectors", "4", "--add"])
            .arg(format!("{}:/usr/bin/vsci_guest_check", prog.display()))
            .args(["--", "/bin/sh", "-c"])
            .arg(
                "vsci_guest_check --user session /dev/vsci-ctl0 1 60000 \
                 && vsci_guest_check --user vecfile /dev/vsci-ctl0 2 60000 \
                 && vsci_guest_check --user bellfile /dev/vsci-ctl0 0 3 5"
                    .to_string()
                    + KERNEL_CLEAN,
            ),
    );
    let st = |i: u64| CTL_SESSIONS + 4 * i;
    vm.wait_line("running as uid 1000", VM_TIMEOUT);
    vm.wait_line("whole-region map refused (EPERM)", LINE_TIMEOUT);
    let id = ok!(vm, srv.peers().first().copied().ok_or("no client"), "the guest's ivshmem id");
    // a fresh region: slots 0 and 1, generation 1
    vm.wait_line("session 1 index 0 generation 1 size 65536", LINE_TIMEOUT);
    vm.wait_line("session 2 index 1 generation 1 size 65536", LINE_TIMEOUT);
    vm.wait_line("session areas written", LINE_TIMEOUT);
    assert_eq!(word(&shm, st(0)), 1 << 8 | SESSION_OPEN);
    assert_eq!(word(&shm, st(1)), 1 << 8 | SESSION_OPEN);
    assert_eq!(cstr(&read_at(&shm, session_area(0), 64)), "session 0 gen 1");
    assert_eq!(cstr(&read_at(&shm, session_area(0) + SESSION_SIZE - 64, 64)), "end of session 0");
    assert_eq!(cstr(&read_at(&shm, session_area(1), 64)), "session 1 gen 1");
    assert_eq!(word(&shm, st(2)), 0, "no third session");
    // every change rang the node on vector 0
    assert!(ivshmem::drain(srv.host_vector(0).unwrap()).unwrap() >= 2, "the driver did not ring the node");
    ok!(vm, srv.notify(id, 1), "notify vector 1");

    // session 2 closed; session 1's mapping outlives its descriptor
    vm.wait_line("session 2 closed; session 1 fd closed, still mapped", LINE_TIMEOUT);
    assert_eq!(word(&shm, st(0)), 1 << 8 | SESSION_OPEN, "a mapped session stays open");
    assert_eq!(word(&shm, st(1)), 1 << 8 | SESSION_CLOSING);
    assert!(ivshmem::drain(srv.host_vector(0).unwrap()).unwrap() >= 1);
    // the node has cleaned up after session 1: FREE, same generation
    set_word(&shm, st(1), 1 << 8);
    ok!(vm, srv.notify(id, 1), "notify vector 1");
    vm.wait_line("session 1 unmapped", LINE_TIMEOUT);
    assert_eq!(word(&shm, st(0)), 1 << 8 | SESSION_CLOSING);
    // slot 0 stays CLOSING (not acknowledged): it must not be handed out again
    ok!(vm, srv.notify(id, 1), "notify vector 1");
    vm.wait_line("session 3 index 1 generation 2", LINE_TIMEOUT);
    vm.wait_line("session 4 index 2 generation 1", LINE_TIMEOUT);
    vm.wait_line("sessions done", LINE_TIMEOUT);
    assert_eq!(word(&shm, st(0)), 1 << 8 | SESSION_CLOSING);
    assert_eq!(word(&shm, st(1)), 2 << 8 | SESSION_CLOSING);
    assert_eq!(word(&shm, st(2)), 1 << 8 | SESSION_CLOSING);

    // a vector file counts interrupts like an eventfd
    // one at a time: QEMU raises a single interrupt for notifications that
    // pile up in its eventfd
    vm.wait_line("vector file bound", LINE_TIMEOUT);
    for k in 1..=3 {
        vm.wait_line(&format!("waiting for interrupt {k} on vector 2"), LINE_TIMEOUT);
        ok!(vm, srv.notify(id, 2), "notify vector 2");
    }
    vm.wait_line("vector file read 3", LINE_TIMEOUT);
    vm.wait_line("blocking read", LINE_TIMEOUT);
    ok!(vm, srv.notify(id, 2), "notify vector 2");
    vm.wait_line("vector file blocking read 1", LINE_TIMEOUT);

    // a doorbell file rings the node once per write
    let bell = srv.host_vector(3).unwrap();
    assert_eq!(ivshmem::drain(bell).unwrap(), 0);
    vm.wait_line("bell file rang peer 0 vector 3 5 times", LINE_TIMEOUT);
    assert_eq!(ivshmem::drain(bell).unwrap(), 5);
    vm.wait(VM_TIMEOUT).assert_success();
    eprintln!("vm sessions run: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn driver_window_table_follows_opens_mappings_and_unplug() {
    if !have_qemu() {
        return;
    }
    let dir = TempDir::new("vm-win");
    let prog = guest_check(&dir.path);
    let sock = dir.path.join("ivshmem.sock");
    let qmp_path = dir.path.join("qmp.sock");
    let shm = ctl_region();
    let shm_for_server = shm.try_clone().unwrap();
    let cfg = Config { vectors: 4, host_peer: true, announce_peers: false, max_clients: 8 };
    let srv = Server::start(&sock, cfg, move |_| shm_for_server.try_clone()).unwrap();
    let t0 = Instant::now();
    // no control device at boot: it is plugged while a window is open
    let mut vm = Proc::spawn(
        "vsci vm run (windows)",
        vsci_vm()
            .args(["--name", "win", "--qmp"])
            .arg(&qmp_path)
            .arg("--add")
            .arg(format!("{}:/usr/bin/vsci_guest_check", prog.display()))
            .args(["--", "/bin/sh", "-c"])
            .arg("vsci_guest_check --user window /dev/vsci-win16 /dev/vsci-ctl0 1 60000".to_string() + KERNEL_CLEAN),
    );
    const SLOT: u64 = 16;
    let w16 = CTL_WINDOWS + 4 * SLOT;
    let t = Duration::from_secs(10);
    vm.wait_line("waiting for /dev/vsci-win16", VM_TIMEOUT);
    let mut q = ok!(vm, Qmp::connect(&qmp_path, Duration::from_secs(30)), "QMP connect");
    let win_a = memfd(1 << 20, b"window a");
    let pa = ok!(vm, q.plug_memfd("win-a", win_a.as_fd(), 1 << 20, Some(SLOT as u8)), "plug win-a");
    vm.wait_line("window open before the control device", LINE_TIMEOUT);
    assert_eq!(word(&shm, w16), 0);
    ok!(vm, q.plug_doorbell("vsci-ctl", &sock, 4), "hot-plug the control device");
    // the new control device gets the whole table at once
    ok!(vm, wait_word(&shm, w16, 1, t), "window 16 reported when the control device came");
    let id = ok!(vm, srv.peers().first().copied().ok_or("no client"), "the guest's ivshmem id");
    vm.wait_line("control device here", LINE_TIMEOUT);
    let rung = ok!(vm, ivshmem::wait_readable(srv.host_vector(0).unwrap(), t), "poll the node's vector 0");
    assert!(rung, "the driver did not ring the node after writing the table");
    let _ = ivshmem::drain(srv.host_vector(0).unwrap());
    for i in 0..VSCI_CTL_MAX_WINDOWS {
        if i != SLOT {
            assert_eq!(word(&shm, CTL_WINDOWS + 4 * i), 0, "window {i}");
        }
    }
    ok!(vm, srv.notify(id, 1), "notify");

    vm.wait_line("window fd closed, still mapped", LINE_TIMEOUT);
    assert_eq!(word(&shm, w16), 1, "the mapping holds the window");
    ok!(vm, srv.notify(id, 1), "notify");
    vm.wait_line("window unmapped", LINE_TIMEOUT);
    ok!(vm, wait_word(&shm, w16, 0, t), "window 16 released after munmap");
    assert!(ivshmem::drain(srv.host_vector(0).unwrap()).unwrap() >= 1, "no ring for the release");
    ok!(vm, srv.notify(id, 1), "notify");
    vm.wait_line("two opens, one closed", LINE_TIMEOUT);
    assert_eq!(word(&shm, w16), 1, "one of two opens still holds the window");
    ok!(vm, srv.notify(id, 1), "notify");
    vm.wait_line("both closed", LINE_TIMEOUT);
    ok!(vm, wait_word(&shm, w16, 0, t), "window 16 released by the last close");
    ok!(vm, srv.notify(id, 1), "notify");

    // unplugged while open: 0 at once; a new window at the slot is not
    // disturbed by the old one's last close
    vm.wait_line("holding /dev/vsci-win16 open for unplug", LINE_TIMEOUT);
    ok!(vm, wait_word(&shm, w16, 1, t), "window 16 open again");
    ok!(vm, q.unplug(&pa, Duration::from_secs(30)), "unplug win-a");
    ok!(vm, wait_word(&shm, w16, 0, t), "window 16 cleared by the unplug");
    vm.wait_line("window unplugged while open", LINE_TIMEOUT);
    let win_b = memfd(1 << 20, b"window b");
    ok!(vm, q.plug_memfd("win-b", win_b.as_fd(), 1 << 20, Some(SLOT as u8)), "plug win-b");
    vm.wait_line("new window open, old fd closed", LINE_TIMEOUT);
    assert_eq!(word(&shm, w16), 1, "the old window's last close cleared the new window's word");
    ok!(vm, srv.notify(id, 1), "notify");
    vm.wait_line("new window closed", LINE_TIMEOUT);
    ok!(vm, wait_word(&shm, w16, 0, t), "window 16 released");
    vm.wait(VM_TIMEOUT).assert_success();
    eprintln!("vm window run: {:.1} s", t0.elapsed().as_secs_f64());
    let _ = fs::remove_file(&qmp_path);
}
