//! One client connection: a reader thread that validates and dispatches
//! requests, and a writer thread that drains the client's bounded queue.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::sync_channel;
use std::sync::Arc;

use log::{debug, info, warn};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use vsci_proto::wire::{self, WireError};
use vsci_proto::{ClientInfo, ClientMsg, Reply, Request, SciError, MAX_NAME, PROTOCOL_VERSION};

use crate::registry::{Handled, Node, Outgoing};

/// Messages that may wait for one client before it is considered stuck.
const QUEUE_DEPTH: usize = 1024;

pub fn serve(node: Arc<Node>, sock: OwnedFd) {
    let creds = match getsockopt(&sock, PeerCredentials) {
        Ok(c) => c,
        Err(e) => {
            warn!("cannot read peer credentials, refusing connection: {e}");
            return;
        }
    };
    let sock = Arc::new(sock);

    // The first message must be a Hello with our protocol version.
    let (tag, name) = match wire::recv(sock.as_fd()).and_then(|m| m.decode::<ClientMsg>()) {
        Ok(ClientMsg { tag, req: Request::Hello { version, name } }) => {
            if version != PROTOCOL_VERSION {
                warn!("pid {} speaks protocol {version}, we speak {PROTOCOL_VERSION}; refusing", creds.pid());
                let out = Outgoing::reply(tag, Err(SciError::InconsistentVersions));
                let _ = wire::send(sock.as_fd(), &out.msg, &[]);
                return;
            }
            (tag, name.chars().take(MAX_NAME).collect::<String>())
        }
        Ok(_) => {
            warn!("pid {}: first message was not Hello; dropping connection", creds.pid());
            return;
        }
        Err(WireError::Closed) => return,
        Err(e) => {
            warn!("pid {}: bad first message ({e}); dropping connection", creds.pid());
            return;
        }
    };

    let (tx, rx) = sync_channel::<Outgoing>(QUEUE_DEPTH);
    let info = ClientInfo { client: 0, pid: creds.pid(), uid: creds.uid(), gid: creds.gid(), name };
    let id = node.lock().register_client(info.clone(), tx.clone(), Arc::clone(&sock));
    info!("client {id} connected: pid {} uid {} {:?}", info.pid, info.uid, info.name);

    let wsock = Arc::clone(&sock);
    let writer = std::thread::Builder::new()
        .name(format!("vscid-w{id}"))
        .spawn(move || {
            for out in rx {
                let fds: Vec<_> = out.fds.iter().map(|f| f.as_fd()).collect();
                if let Err(e) = wire::send(wsock.as_fd(), &out.msg, &fds) {
                    debug!("client {id}: send failed: {e}");
                    let _ = nix::sys::socket::shutdown(
                        std::os::fd::AsRawFd::as_raw_fd(&*wsock),
                        nix::sys::socket::Shutdown::Both,
                    );
                    break;
                }
            }
        })
        .expect("spawn writer thread");

    let hello = Reply::Hello {
        node_id: node.cfg.node_id,
        wait_mode: node.cfg.wait_mode,
        spin_us: node.cfg.spin_us,
        max_segment_size: node.cfg.max_segment_size,
    };
    let _ = tx.try_send(Outgoing::reply(tag, Ok(hello)));
    drop(tx);

    loop {
        let msg = match wire::recv(sock.as_fd()) {
            Ok(m) => m,
            Err(WireError::Closed) => break,
            Err(e) => {
                warn!("client {id} (pid {}): {e}; dropping connection", info.pid);
                break;
            }
        };
        let ClientMsg { tag, req } = match msg.decode::<ClientMsg>() {
            Ok(m) => m,
            Err(e) => {
                warn!("client {id} (pid {}): malformed message ({e}); dropping connection", info.pid);
                break;
            }
        };
        // Only CreateInterruptWake carries a descriptor: exactly one eventfd.
        let mut fds = msg.fds;
        let wake = match (&req, fds.len()) {
            (vsci_proto::Request::CreateInterruptWake { .. }, 1) if crate::memory::is_eventfd(fds[0].as_fd()) => fds.pop(),
            (_, 0) if !matches!(req, vsci_proto::Request::CreateInterruptWake { .. }) => None,
            _ => {
                warn!("client {id} (pid {}): unexpected file descriptors with {req:?}; dropping connection", info.pid);
                break;
            }
        };
        debug!("client {id}: {req:?}");
        match node.handle_with(id, tag, req, wake) {
            Handled::Reply(out) => {
                let reg = node.lock();
                if let Some(c) = reg.clients.get(&id) {
                    if c.tx.try_send(out).is_err() {
                        warn!("client {id} (pid {}) is not reading replies; dropping connection", info.pid);
                        break;
                    }
                }
            }
            Handled::Deferred => {}
        }
    }

    {
        let mut reg = node.lock();
        reg.remove_client(&node.cfg, id);
    }
    node.changed.notify_all();
    let _ = nix::sys::socket::shutdown(std::os::fd::AsRawFd::as_raw_fd(&*sock), nix::sys::socket::Shutdown::Both);
    let _ = writer.join();
}
