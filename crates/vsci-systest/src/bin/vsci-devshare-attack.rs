//! Hostile parties for the device-sharing tests (tests/devices.rs). Each
//! makes one of the seed's attacks and prints what came of it; the test
//! asserts the refusal and that the other tenants kept working.
//!
//! As a VM (started by `vsci device vm --driver`, holding only fds 3 and 4):
//!
//!     vsci-devshare-attack KIND --ram-fd 3 --chan-fd 4
//!
//! KIND: `dma-at=DVA` (receive and transmit descriptors whose buffers are
//! at DVA), `push-at=DVA` (the same pushed through the low-latency queue,
//! and a pushed inline frame whose bytes were not sent), `regs-outside` (writes to another function's registers, past
//! its own window), `msix=HANDLE` (its MSI-X entry aimed at HANDLE).
//!
//! As a program on a node (with the node's socket, without the key unless
//! given one):
//!
//!     vsci-devshare-attack doorbell DEVICE_NODE FUNC
//!     vsci-devshare-attack forged-revoke DEVICE_NODE FUNC
//!     vsci-devshare-attack replay DEVICE_NODE KEY_FILE

use std::time::Duration;

use vsci_devshare::driver::{Layout, Vm, BUF, RING};
use vsci_devshare::msg::{self, ReplyTo, Request, RequestFrom, ToDevice};
use vsci_devshare::regs::{self, Desc, DD, ERR};

fn parse_u64(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).expect("hex number"),
        None => s.parse().expect("number"),
    }
}

fn as_vm(kind: &str) {
    let vm = Vm::attach(3, 4).expect("attach");
    let lay = Layout::of(&vm.cfg).expect("layout");
    vm.write_regs(&regs::bring_up(lay.tx_ring, lay.rx_ring, RING, &vm.cfg.handles)).unwrap();
    println!("hostile VM {} ready, window [{:#x}, +{:#x})", vm.cfg.name, vm.cfg.window.0, vm.cfg.window.1);
    if let Some(dva) = kind.strip_prefix("dma-at=") {
        let dva = parse_u64(dva);
        // Receive buffers there: the device would write frames into it.
        for i in 0..RING {
            vm.set_desc(lay.rx_ring, i, Desc { addr: dva + u64::from(i) * BUF as u64, len: BUF as u32, status: 0 });
        }
        // And a transmit of what is there: the device would read it.
        vm.set_desc(lay.tx_ring, 0, Desc { addr: dva, len: 64, status: 0 });
        vm.write_regs(&[(regs::RX_TAIL, u64::from(RING)), (regs::TX_TAIL, 1)]).unwrap();
        wait_first_transmit(&vm, &lay);
    } else if let Some(dva) = kind.strip_prefix("push-at=") {
        let dva = parse_u64(dva);
        // The same, through the low-latency queue: the ring holds harmless
        // descriptors, the pushed ones name DVA.
        vm.set_desc(lay.tx_ring, 0, Desc { addr: lay.tx_buf(0), len: 64, status: 0 });
        vm.write_regs(&[
            (regs::RX_PUSH_LEN, BUF as u64),
            (regs::RX_PUSH, regs::rx_push(dva, RING as u16)),
            (regs::RX_TAIL, u64::from(RING)),
            (regs::TX_PUSH, regs::push(Desc { addr: dva, len: 64, status: 0 }, false)),
            // And one that claims more inline bytes than it sent.
            (regs::TX_INLINE, u64::MAX),
            (regs::TX_PUSH, regs::push(Desc { addr: lay.tx_buf(1), len: 64, status: 0 }, true)),
            (regs::TX_TAIL, 2),
        ])
        .unwrap();
        wait_first_transmit(&vm, &lay);
        let d = vm.desc(lay.tx_ring, 1);
        println!(
            "inline descriptor: status {:#x} ({})",
            d.status,
            if d.status & ERR != 0 { "refused" } else { "SENT" }
        );
    } else if kind == "regs-outside" {
        // Function f+1's TX tail and ring base, were the functions' windows
        // side by side in one BAR; and the device's own page at 0x1000.
        vm.write_regs(&[(regs::WINDOW + regs::TX_BASE, 0), (regs::WINDOW + regs::TX_TAIL, 200), (0x1000, 1)]).unwrap();
        println!("wrote outside the window");
    } else if let Some(h) = kind.strip_prefix("msix=") {
        vm.write_regs(&[(regs::MSIX_BASE, parse_u64(h))]).unwrap();
        println!("aimed MSI-X entry 0 at {h}");
    } else {
        panic!("unknown attack {kind}");
    }
    // Keep holding the function until the test ends us.
    loop {
        if vm.interrupts(1000, None).is_err() {
            return;
        }
    }
}

/// Wait until the device wrote transmit descriptor 0 back; print its fate.
fn wait_first_transmit(vm: &Vm, lay: &Layout) {
    let t0 = std::time::Instant::now();
    loop {
        let _ = vm.interrupts(100, None);
        let d = vm.desc(lay.tx_ring, 0);
        if d.status & DD != 0 {
            println!(
                "transmit descriptor: status {:#x} ({})",
                d.status,
                if d.status & ERR != 0 { "refused" } else { "SENT" }
            );
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the device never wrote the descriptor back");
    }
}

fn as_node(args: &[String]) {
    let sock = vsci_proto::socket_path();
    let client = vsci_client::Client::connect(&sock, "attack").expect("connect to the node");
    let device_node: u32 = args[1].parse().unwrap();
    let dev = client
        .connect_interrupt(vsci_client::IntrKind::Data, device_node, msg::DEFAULT_INTERRUPT, 5000)
        .expect("reach the device");
    match args[0].as_str() {
        "doorbell" => {
            // Another function's registers, with guessed tokens.
            let func: u8 = args[2].parse().unwrap();
            for _ in 0..100 {
                let m = ToDevice::Regs {
                    func,
                    token: msg::random_u64(),
                    writes: vec![(regs::CTRL, 0), (regs::RX_TAIL, 0)],
                };
                dev.trigger_data(&msg::encode(&m)).unwrap();
            }
            println!("sent 100 forged register writes to function {func}");
        }
        "forged-revoke" => {
            let func: u8 = args[2].parse().unwrap();
            let from = RequestFrom {
                node: client.node_id(),
                reply: ReplyTo { node: client.node_id(), interrupt: 1 },
                req: Request::Revoke { func },
            };
            let s = msg::sign(b"not the cluster key, a guess at it", msg::random_u64(), from);
            dev.trigger_data(&msg::encode(&ToDevice::Manager(s))).unwrap();
            println!("sent a revoke of function {func} signed with the wrong key");
        }
        "replay" => {
            let key = msg::read_key(std::path::Path::new(&args[2])).unwrap();
            let from = RequestFrom {
                node: client.node_id(),
                reply: ReplyTo { node: client.node_id(), interrupt: 1 },
                req: Request::List,
            };
            let m = msg::encode(&ToDevice::Manager(msg::sign(&key, 0x7e57, from)));
            dev.trigger_data(&m).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            dev.trigger_data(&m).unwrap();
            println!("sent one signed request twice");
        }
        other => panic!("unknown attack {other}"),
    }
    let _ = dev.disconnect();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--ram-fd") {
        as_vm(&args[0]);
    } else {
        as_node(&args);
    }
}
