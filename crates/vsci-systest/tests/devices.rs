//! One host's NIC shared with VMs on other hosts (docs/devices.md, seed
//! 004): node 1 runs `vsci device serve` (its wire a TAP in node 1's
//! namespace, 10.99.0.1), compute nodes run `vsci device vm` (process VMs,
//! each in a network namespace of its own), and real TCP runs between the
//! VMs' stacks and node 1's through the shared device, every byte checked
//! (vsci-tcp-echo). The attacks of the seed's §4 each get a test that
//! asserts the refusal, the log line naming the mechanism, and that the
//! other tenants kept working.
//!
//! Needs root for `ip netns` and TAP interfaces; without it the tests
//! print SKIPPED and pass. Run after `make`:
//!
//!     VSCI_BUILD=$PWD/build cargo test --release -p vsci-systest --test devices -- --test-threads=1

mod common;
mod netns;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use netns::Cluster;

const DEVICE: u32 = 1;
const ECHO: &str = "10.99.0.1:7300";

struct Rig {
    c: Cluster,
    device: Proc,
    _echo: Proc,
}

impl Drop for Rig {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- vsci device serve log ---\n{}", self.device.stderr_text());
        }
    }
}

fn vsci_on(c: &Cluster, node: u32) -> Command {
    let mut cmd = c.client(node, &built("bin/vsci"));
    cmd.env("RUST_LOG", "info");
    cmd
}

/// A cluster of `ids` with a device of `functions` functions on node 1 and
/// an echo server behind its wire.
fn rig(ids: &[u32], functions: u8) -> Option<Rig> {
    let c = Cluster::start(ids)?;
    let mut cmd = vsci_on(&c, DEVICE);
    cmd.args([
        "device",
        "serve",
        "--tap",
        "nic0",
        "--address",
        "10.99.0.1/24",
        "--functions",
        &functions.to_string(),
        "--key-file",
    ])
    .arg(c.key_file())
    .arg("--socket")
    .arg(&c.node(DEVICE).socket);
    let mut device = Proc::spawn("vsci device serve", &mut cmd);
    device.wait_line("functions on node", Duration::from_secs(30));
    let mut echo = Proc::spawn(
        "echo server",
        c.client(DEVICE, &PathBuf::from(env!("CARGO_BIN_EXE_vsci-tcp-echo"))).args(["server", ECHO]),
    );
    echo.wait_line("listening", Duration::from_secs(10));
    Some(Rig { c, device, _echo: echo })
}

impl Rig {
    /// A process VM on `node` with address 10.99.0.`host`; returns it
    /// once it holds a function, with its namespace.
    fn vm(&mut self, node: u32, name: &str, mode: &str, host: u8, driver: Option<&[&str]>) -> (Proc, String) {
        let ns = self.c.extra_netns(name);
        let mut cmd = vsci_on(&self.c, node);
        cmd.args([
            "device",
            "vm",
            "--device-node",
            &DEVICE.to_string(),
            "--name",
            name,
            "--mode",
            mode,
            "--netns",
            &ns,
            "--address",
            &format!("10.99.0.{host}/24"),
            "--key-file",
        ])
        .arg(self.c.key_file())
        .arg("--socket")
        .arg(&self.c.node(node).socket);
        if let Some(d) = driver {
            cmd.arg("--").args(d);
        }
        let mut p = Proc::spawn(&format!("vm {name}"), &mut cmd);
        p.wait_line("(MAC", Duration::from_secs(60));
        (p, ns)
    }

    fn list(&self, from: u32) -> serde_json::Value {
        let mut cmd = vsci_on(&self.c, from);
        cmd.args(["device", "list", "--json", "--device-node", &DEVICE.to_string(), "--key-file"])
            .arg(self.c.key_file())
            .arg("--socket")
            .arg(&self.c.node(from).socket);
        let out = run("vsci device list", &mut cmd, Duration::from_secs(30));
        out.assert_success();
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("vsci device list --json: {e}\n{}", out.describe()))
    }

    fn holder(&self, func: u64) -> Option<String> {
        let l = self.list(DEVICE);
        let f = l["functions"].as_array().unwrap().iter().find(|f| f["func"] == func).cloned().unwrap();
        f["holder"]["vm"].as_str().map(str::to_string)
    }

    fn function_of(&self, vm: &str) -> serde_json::Value {
        let l = self.list(DEVICE);
        l["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["holder"]["vm"] == vm)
            .cloned()
            .unwrap_or_else(|| panic!("no function held by {vm}: {l}"))
    }
}

/// Echo `bytes` through TCP from VM namespace `ns` to the echo server.
fn echo(ns: &str, bytes: u64) -> Proc {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .arg(env!("CARGO_BIN_EXE_vsci-tcp-echo"))
        .args(["client", ECHO, &bytes.to_string()])
        .stdin(std::process::Stdio::null());
    Proc::spawn(&format!("echo from {ns}"), &mut cmd)
}

fn echo_ok(ns: &str, bytes: u64) -> String {
    let out = echo(ns, bytes).wait(Duration::from_secs(120));
    out.assert_success().assert_contains("echoed intact");
    out.stdout
}

/// Lines of `log` containing `needle`, in order, must appear in the order of `needles`.
fn assert_in_order(log: &str, needles: &[&str]) {
    let mut at = 0;
    for n in needles {
        match log[at..].find(n) {
            Some(i) => at += i + n.len(),
            None => panic!("\"{n}\" does not follow the earlier steps in the log:\n{log}"),
        }
    }
}

#[test]
fn assign_use_revoke_reassign() {
    let Some(mut r) = rig(&[1, 2, 3], 4) else { return };
    let (a, ns_a) = r.vm(2, "vmA", "zero-copy", 11, None);
    let (b, ns_b) = r.vm(3, "vmB", "bounce", 12, None);
    // Both compute hosts at once, through the one device.
    let (ea, eb) = (echo(&ns_a, 4 << 20), echo(&ns_b, 4 << 20));
    for e in [ea, eb] {
        let out = e.wait(Duration::from_secs(120));
        out.assert_success().assert_contains("echoed intact");
        eprintln!("{}", out.stdout.trim());
    }
    // The seed's setup steps, in order, on each side.
    assert_in_order(
        &r.device.stderr_text(),
        &[
            "setup step 1 (received): node 2",
            "setup step 2: function",
            "setup step 3:",
            "setup step 4: IOMMU context",
            "setup step 5: requester table",
        ],
    );
    assert_in_order(&a.stderr_text(), &["setup step 1: asking node 1", "setup step 6: VM vmA"]);
    let fa = r.function_of("vmA");
    assert_eq!(fa["holder"]["node"], 2);
    assert!(fa["tx_packets"].as_u64().unwrap() > 1000 && fa["rx_packets"].as_u64().unwrap() > 1000, "{fa}");
    assert_eq!(fa["faults"], 0, "{fa}");
    let fb = r.function_of("vmB");
    assert_eq!(
        (fb["holder"]["node"].clone(), fb["holder"]["mode"].clone()),
        (serde_json::json!(3), serde_json::json!("Bounce"))
    );

    // `vsci status` on each side says who holds what.
    let status = |node: u32| {
        let mut cmd = vsci_on(&r.c, node);
        cmd.args(["status", "--socket"]).arg(&r.c.node(node).socket);
        let out = run("vsci status", &mut cmd, Duration::from_secs(30));
        out.assert_success();
        out.stdout
    };
    let s1 = status(1);
    assert!(
        s1.contains("device nic0")
            && s1.contains("held by node 2 VM vmA (ZeroCopy)")
            && s1.contains("held by node 3 VM vmB (Bounce)"),
        "{s1}"
    );
    let s2 = status(2);
    assert!(s2.contains("VM vmA (pid") && s2.contains("of node 1's device, ZeroCopy"), "{s2}");

    // An administrator on node 3 takes vmA's function back.
    let func_a = fa["func"].as_u64().unwrap();
    let mut cmd = vsci_on(&r.c, 3);
    cmd.args(["device", "revoke", "--func", &func_a.to_string(), "--device-node", "1", "--key-file"])
        .arg(r.c.key_file())
        .arg("--socket")
        .arg(&r.c.node(3).socket);
    run("vsci device revoke", &mut cmd, Duration::from_secs(30)).assert_success();
    let out = a.wait(Duration::from_secs(30));
    assert!(
        !out.status.success() && out.stderr.contains("revoked"),
        "vmA must stop when its function is revoked\n{}",
        out.describe()
    );
    assert_eq!(r.holder(func_a), None);
    assert!(!status(2).contains("VM vmA"), "a revoked VM leaves node 2's status");
    // vmB was not disturbed.
    echo_ok(&ns_b, 1 << 20);

    // Reassign: a new VM on node 2 gets a function and works.
    let (_c, ns_c) = r.vm(2, "vmC", "zero-copy", 13, None);
    echo_ok(&ns_c, 2 << 20);
    drop(b);
}

#[test]
fn compute_node_killed_returns_function() {
    let Some(mut r) = rig(&[1, 2, 3], 1) else { return };
    let (_a, _) = r.vm(2, "vmA", "zero-copy", 11, None);
    assert_eq!(r.holder(0).as_deref(), Some("vmA"));
    r.c.kill_node(2);
    r.device.wait_stderr("its node is gone; back in the pool", Duration::from_secs(60));
    assert_eq!(r.holder(0), None);
    // The one function serves a VM on another node.
    let (_b, ns_b) = r.vm(3, "vmB", "zero-copy", 12, None);
    echo_ok(&ns_b, 1 << 20);
}

struct Attack {
    r: Rig,
    victim: Proc,
    victim_ns: String,
    hostile: Proc,
}

/// A victim VM on node 2 moving traffic and a hostile VM on
/// `hostile_node` making attack `kind` (KIND of vsci-devshare-attack;
/// VICTIM_HANDLE stands for the victim's receive interrupt handle) while
/// it does. Checks the victim's traffic was not disturbed.
fn attack(kind: &str, hostile_mode: &str, hostile_node: u32) -> Option<Attack> {
    let mut r = rig(&[1, 2, 3], 4)?;
    let (victim, victim_ns) = r.vm(2, "victim", "zero-copy", 11, None);
    echo_ok(&victim_ns, 256 << 10);
    let running = echo(&victim_ns, 4 << 20);
    let kind = kind.replace("VICTIM_HANDLE", &victim_handle(&victim));
    let tool = env!("CARGO_BIN_EXE_vsci-devshare-attack");
    let (mut hostile, _) = r.vm(hostile_node, "hostile", hostile_mode, 66, Some(&[tool, &kind]));
    hostile.wait_line("hostile VM hostile ready", Duration::from_secs(30));
    let out = running.wait(Duration::from_secs(120));
    out.assert_success().assert_contains("echoed intact");
    Some(Attack { r, victim, victim_ns, hostile })
}

impl Attack {
    /// After the attack: the victim still moves traffic, and its function
    /// saw no fault.
    fn victim_unharmed(&self) {
        echo_ok(&self.victim_ns, 1 << 20);
        let f = self.r.function_of("victim");
        assert_eq!(f["faults"], 0, "{f}");
        assert_eq!(f["refused"], 0, "{f}");
        assert!(self.victim.stderr_text().matches("refused").count() == 0);
    }
}

fn victim_handle(v: &Proc) -> String {
    let log = v.stderr_text();
    let line = log
        .lines()
        .find(|l| l.contains("MSI-X handles"))
        .unwrap_or_else(|| panic!("no handles in the victim's log:\n{log}"));
    let list = line
        .split("MSI-X handles [")
        .nth(1)
        .and_then(|l| l.split(']').next())
        .unwrap_or_else(|| panic!("no handle list in {line}"));
    format!("0x{}", list.split(',').next().unwrap().trim())
}

/// Attack 1: DMA into the device host's memory. The hostile VM's
/// descriptors name DVAs where a host's memory would be; its function's
/// IOMMU context has no grant there.
#[test]
fn attack_dma_into_device_host_memory() {
    let Some(mut a) = attack("dma-at=0x7f0000000000", "zero-copy", 3) else { return };
    a.hostile
        .wait_line("transmit descriptor: status", Duration::from_secs(30))
        .contains("refused")
        .then_some(())
        .expect("the transmit must be refused");
    a.r.device.wait_stderr("IOMMU fault", Duration::from_secs(10));
    let f = a.r.function_of("hostile");
    assert!(f["faults"].as_u64().unwrap() >= 1, "{f}");
    a.victim_unharmed();
}

/// Attack 1 through the low-latency queue: receive buffers and a transmit
/// descriptor pushed in register writes (never in the ring) naming the
/// device host's memory pass the same IOMMU context; an inline frame
/// claiming bytes that were not sent is refused too.
#[test]
fn attack_pushed_descriptors() {
    let Some(mut a) = attack("push-at=0x7f0000000000", "zero-copy", 3) else { return };
    let line = a.hostile.wait_line("transmit descriptor: status", Duration::from_secs(30));
    assert!(line.contains("refused"), "{line}");
    let line = a.hostile.wait_line("inline descriptor: status", Duration::from_secs(10));
    assert!(line.contains("refused"), "{line}");
    a.r.device.wait_stderr("IOMMU fault", Duration::from_secs(10));
    a.r.device.wait_stderr("pushed inline with 64 bytes, but 8 were sent", Duration::from_secs(10));
    a.victim_unharmed();
}

/// Attack 3: DMA into another compute host's memory. In the bounce mode
/// the hostile VM reaches only its 4 MiB payload area; it names DVAs just
/// past its memory (where a flat map would put the next host's).
#[test]
fn attack_dma_into_another_compute_host() {
    // 16 MiB of memory: DVA 16 MiB is the first byte past it.
    let Some(mut a) = attack("dma-at=0x1000000", "bounce", 3) else { return };
    let line = a.hostile.wait_line("transmit descriptor: status", Duration::from_secs(30));
    assert!(line.contains("refused"), "{line}");
    a.r.device.wait_stderr("no grant of this function covers it", Duration::from_secs(10));
    a.victim_unharmed();
}

/// Attack 4: memory of its own host it was not granted. The hostile VM
/// runs on the victim's node in the bounce mode and names the start of its
/// own memory, outside the payload area: refused by the IOMMU; and the
/// VM process holds no descriptor of the node, the victim or the agent.
#[test]
fn attack_own_host_memory_not_granted() {
    let Some(mut a) = attack("dma-at=0x0", "bounce", 2) else { return };
    let line = a.hostile.wait_line("transmit descriptor: status", Duration::from_secs(30));
    assert!(line.contains("refused"), "{line}");
    a.r.device.wait_stderr("IOMMU fault", Duration::from_secs(10));
    // What the VM process holds: its memory, its channel, stdio.
    let pid = a
        .hostile
        .stderr_text()
        .lines()
        .find(|l| l.contains("setup step 6"))
        .and_then(|l| l.split("(pid ").nth(1))
        .and_then(|s| s.split(')').next())
        .map(str::to_string)
        .expect("the VM's pid");
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .map(|e| std::fs::read_link(e.path()).map(|p| p.display().to_string()).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        fds.iter().all(|f| !f.contains(".sock") && !f.contains("vscid")),
        "the VM must hold nothing of the node: {fds:?}"
    );
    a.victim_unharmed();
}

/// Attack 2: another function's registers. Writes past the VM's register
/// window are refused by its hypervisor (the EPT's part); register writes
/// to another function from elsewhere lack its holder's token (the
/// requester check); and a DMA at another function's registers has no DVA.
#[test]
fn attack_other_functions_registers() {
    let Some(mut a) = attack("regs-outside", "zero-copy", 3) else { return };
    a.hostile.wait_line("wrote outside the window", Duration::from_secs(30));
    a.hostile.wait_stderr("outside its function's 0x100-byte register window", Duration::from_secs(10));
    let victim_func = a.r.function_of("victim")["func"].as_u64().unwrap().to_string();
    let mut cmd = a.r.c.client(3, &PathBuf::from(env!("CARGO_BIN_EXE_vsci-devshare-attack")));
    cmd.args(["doorbell", "1", &victim_func]);
    run("forged doorbell", &mut cmd, Duration::from_secs(30)).assert_success();
    a.r.device.wait_stderr("without its holder's token", Duration::from_secs(10));
    // The refusals count against the function written to; its traffic
    // still flows.
    echo_ok(&a.victim_ns, 1 << 20);
    let f = a.r.function_of("victim");
    assert_eq!(f["refused"], 100, "{f}");
    assert_eq!(f["faults"], 0, "{f}");
}

/// An interrupt aimed at another VM's vector: the MSI-X write names a
/// handle of the victim's function, which the remapping table does not
/// grant the hostile one.
#[test]
fn attack_interrupt_at_another_vms_vector() {
    let Some(mut a) = attack("msix=VICTIM_HANDLE", "zero-copy", 3) else { return };
    a.hostile.wait_line("aimed MSI-X entry 0", Duration::from_secs(30));
    a.r.device.wait_stderr("which the remapping table does not grant this function", Duration::from_secs(10));
    let f = a.r.function_of("hostile");
    assert_eq!(f["refused"], 1, "{f}");
    a.victim_unharmed();
}

/// A spoofed request to the manager (signed with a wrong key) and a
/// replayed one are refused and logged; nothing changes hands.
#[test]
fn spoofed_and_replayed_manager_requests() {
    let Some(mut r) = rig(&[1, 2, 3], 2) else { return };
    let (_v, ns_v) = r.vm(2, "victim", "zero-copy", 11, None);
    let tool = PathBuf::from(env!("CARGO_BIN_EXE_vsci-devshare-attack"));
    run("forged revoke", r.c.client(3, &tool).args(["forged-revoke", "1", "0"]), Duration::from_secs(30))
        .assert_success();
    r.device.wait_stderr("manager: refused a request: bad signature", Duration::from_secs(10));
    assert_eq!(r.holder(0).as_deref(), Some("victim"));
    let key = r.c.key_file();
    run("replay", r.c.client(3, &tool).arg("replay").arg("1").arg(&key), Duration::from_secs(30)).assert_success();
    r.device.wait_stderr("replayed (nonce", Duration::from_secs(10));
    echo_ok(&ns_v, 1 << 20);
}

/// A QEMU guest on node 2 uses a function with its stock virtio-net
/// driver (the backend is vsci's vhost-user server; guest RAM is the
/// memory segment the device reaches): real TCP from the guest's kernel
/// to node 1 through the shared device, every byte checked; in the
/// zero-copy mode no one copies a packet (the backend's copy counter).
fn guest_echo(mode: &str) {
    if !netns::guests_possible() {
        eprintln!("SKIPPED: no QEMU or guest image");
        return;
    }
    let Some(r) = rig(&[1, 2], 2) else { return };
    let sock = r.c.node(2).socket.display().to_string();
    let script = "ip addr flush dev eth0 && ip route flush dev eth0; ip addr add 10.99.0.21/24 dev eth0 && ip link set eth0 up && vsci-tcp-echo client 10.99.0.1:7300 1048576";
    let echo_bin = format!("{}:/bin/vsci-tcp-echo", env!("CARGO_BIN_EXE_vsci-tcp-echo"));
    let mut cmd = vsci_on(&r.c, 2);
    cmd.args([
        "device",
        "vm",
        "--guest",
        "--device-node",
        "1",
        "--name",
        "g1",
        "--mode",
        mode,
        "--ram",
        "256M",
        "--key-file",
    ])
    .arg(r.c.key_file())
    .args([
        "--socket",
        &sock,
        "--",
        "--socket",
        &sock,
        "--timeout",
        "240",
        "--add",
        &echo_bin,
        "--",
        "sh",
        "-c",
        script,
    ]);
    let out = Proc::spawn("guest g1", &mut cmd).wait(Duration::from_secs(300));
    eprintln!("{}", out.stdout.trim());
    assert!(out.stdout.contains("echoed intact"), "the guest's TCP through the device\n{}", out.describe());
    let copies: u64 = out
        .stdout
        .split("copies: ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no backend counters\n{}", out.describe()));
    if mode == "zero-copy" {
        assert_eq!(copies, 0, "zero-copy mode copied packets\n{}", out.describe());
    } else {
        assert!(copies > 100, "bounce mode copies each packet\n{}", out.describe());
    }
}

#[test]
fn guest_zero_copy() {
    guest_echo("zero-copy");
}

#[test]
fn guest_bounce() {
    guest_echo("bounce");
}
