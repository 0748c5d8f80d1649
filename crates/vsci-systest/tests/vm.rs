//! `vsci vm run` and the guest driver, in real QEMU guests (TCG here: each
//! boot takes about 5 s). Skipped, with a message, where qemu-system-x86_64 is
//! not installed. The first test to need the guest image builds it (about 6 s
//! plus the kernel download); later ones reuse it.
//!
//! Three full boots: a shell command; the driver with ivshmem-doorbell devices
//! served by an in-test ivshmem server; and a memfd hot-plugged over QMP as
//! ivshmem-plain, followed by 50 plug/unplug cycles in the same guest. Plus
//! two short runs stopped by --timeout and by SIGINT.

mod common;

use std::fs;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use vsci_vm::ivshmem::{self, Config, Event, Server};
use vsci_vm::qmp::Qmp;

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

fn have_qemu() -> bool {
    if vsci_vm::run::find_qemu().is_some() {
        return true;
    }
    eprintln!("SKIP: qemu-system-x86_64 is not installed (Debian: apt-get install qemu-system-x86, or scripts/install-deps.sh)");
    false
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

fn vsci_vm() -> Command {
    let mut c = Command::new(built("bin/vsci"));
    c.args(["vm", "run", "--timeout", "240"]).stdin(Stdio::null());
    c
}

fn memfd(size: u64, data: &[u8]) -> OwnedFd {
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(b"vsci-vm-test\0".as_ptr() as *const libc::c_char, libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate/pwrite on our memfd with a live buffer.
    unsafe {
        assert_eq!(libc::ftruncate(fd.as_raw_fd(), size as i64), 0);
        assert_eq!(libc::pwrite(fd.as_raw_fd(), data.as_ptr() as *const libc::c_void, data.len(), 0), data.len() as isize);
    }
    fd
}

fn read_at(fd: &OwnedFd, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    // SAFETY: pread into a live buffer of its length.
    let n = unsafe { libc::pread(fd.as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, len, off as i64) };
    assert_eq!(n, len as isize);
    b
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
    let t0 = Instant::now();
    // A --socket that is not an ivshmem server is noted, not fatal.
    let o = run(
        "vsci vm run sh",
        vsci_vm()
            .args(["--name", "hello", "--socket", "/nonexistent/vscid.sock", "--add"])
            .arg(format!("{}:/usr/bin/shmem", sisci.display()))
            .args(["--", "/bin/sh", "-c", "echo hello; echo oops >&2; shmem -server -timeout 100 >&2; exit 3"]),
        VM_TIMEOUT,
    );
    assert_eq!(o.status.code(), Some(3), "{}", o.describe());
    assert_eq!(o.stdout, "hello\n", "only the command's output on stdout\n{}", o.describe());
    assert!(o.stderr.contains("oops"), "{}", o.describe());
    assert!(o.stderr.contains("accelerator tcg") || o.stderr.contains("accelerator kvm"), "{}", o.describe());
    assert!(o.stderr.contains("does not speak the ivshmem server protocol"), "{}", o.describe());
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
        c.args(["vm", "run", "--name", name, "--timeout", timeout, "--", "sleep", "600"]).env("TMPDIR", &tmp.path).stdin(Stdio::null());
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
    assert!(!Path::new(&format!("/proc/{qemu}")).exists() || fs::read_to_string(format!("/proc/{qemu}/stat")).map_or(true, |s| s.contains(") Z")), "QEMU {qemu} still runs");
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
            // ring the node (peer 0) on vector 1, then wait for our vector 2;
            // as uid 1000: the device files are for ordinary users. Then the
            // same on a second doorbell device hot-plugged at run time; then
            // the first is unplugged under a waiting program; the second's
            // vector 1 ends the run.
            .args(["--", "/bin/sh", "-c"])
            .arg(
                "vsci_guest_check --user ctl /dev/vsci-ctl0 0 1 2 60000 \
                 && vsci_guest_check await /dev/vsci-ctl1 60000 \
                 && vsci_guest_check --user ctl /dev/vsci-ctl1 0 3 0 60000 \
                 && vsci_guest_check gone /dev/vsci-ctl0 \
                 && vsci_guest_check wait /dev/vsci-ctl1 1 60000",
            ),
    );
    vm.wait_line("running as uid 1000", VM_TIMEOUT);
    let line = vm.wait_line("ivposition ", LINE_TIMEOUT);
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
    let line = vm.wait_line("ivposition ", LINE_TIMEOUT);
    let id2: u16 = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(id2 != id && srv.peers().contains(&id2), "new guest id {id2}; server's peers {:?}", srv.peers());
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
                "vsci_guest_check --user seg 120000 && vsci_guest_check cycles {CYCLES} 60000 \
                 && vsci_guest_check await /dev/vsci-seg0 60000"
            )),
    );
    vm.wait_line("waiting for /dev/vsci-seg0", VM_TIMEOUT);
    let mut q = ok!(vm, Qmp::connect(&qmp_path, Duration::from_secs(30)), "QMP connect");
    let qemu = ok!(vm, vsci_vm::run::qemu_child_of(vm.pid()).ok_or("no QEMU child"), "find QEMU");

    // plug 1 MiB at slot 0x10; the guest finds it, reads our data, writes back
    let seg = memfd(1 << 20, b"segment data 1");
    let p = ok!(vm, q.plug_memfd("seg-a", seg.as_fd(), 1 << 20, Some(0x10)), "plug seg-a");
    let line = vm.wait_line("/dev/vsci-seg0 kind=seg", LINE_TIMEOUT);
    assert!(line.contains("shm_size=1048576") && line.contains("pci=0000:00:10.0"), "{line}");
    vm.wait_line("seg data: segment data 1", LINE_TIMEOUT);
    vm.wait_line("mapped; waiting for unplug", LINE_TIMEOUT);
    assert_eq!(cstr(&read_at(&seg, 64, 32)), "reply from guest");
    ok!(vm, q.unplug(&p, Duration::from_secs(30)), "unplug seg-a");
    vm.wait_line("unplugged: /dev/vsci-seg0 gone", LINE_TIMEOUT);
    vm.wait_line("old mapping faults (SIGBUS)", LINE_TIMEOUT);
    drop(seg);

    // 50 more, each with a fresh memfd; QEMU's descriptors must not pile up
    let settle = |want: Option<usize>| -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let n = vsci_vm::run::fd_count(qemu).expect("QEMU's fd count");
            if want.map_or(true, |w| n <= w) || Instant::now() > deadline {
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
    vm.wait_line("plugged: /dev/vsci-seg0", LINE_TIMEOUT);
    let o = vm.wait(VM_TIMEOUT);
    o.assert_success();
    eprintln!(
        "vm hot-plug run: {:.1} s ({CYCLES} cycles in {cycles_s:.1} s; QEMU fds {before} -> {after})",
        t0.elapsed().as_secs_f64()
    );
    let _ = fs::remove_file(&qmp_path);
}
