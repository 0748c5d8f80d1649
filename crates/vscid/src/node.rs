//! The node: its configuration, the registry behind one mutex, and the
//! dispatcher that runs each request against them (`Node::handle_with`),
//! parking the ones that wait (connects with a timeout) on their own
//! thread. Requests for other nodes go to the cluster links (`peers`),
//! which the node holds beside the registry; the registry itself only
//! sees them through [`crate::registry::Links`].

use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vsci_proto::{Event, Reply, SciError, SegmentEvent};

use crate::recover::Recover;
use crate::registry::*;

/// The node: configuration plus the registry and its change signal.
pub struct Node {
    pub cfg: Config,
    pub started: Instant,
    pub reg: Mutex<Registry>,
    /// Signalled on every change a parked request might be waiting for.
    pub changed: Condvar,
    /// The cluster links, when this node is part of a cluster: requests
    /// for other nodes go there (the registry sees them as `Links`).
    pub peers: std::sync::OnceLock<Arc<crate::peers::Peers>>,
}

/// What a handler decided.
pub enum Handled {
    Reply(Outgoing),
    /// The reply will be sent later by a waiting thread.
    Deferred,
}

impl Node {
    pub fn new(cfg: Config) -> Arc<Node> {
        let reg = Registry { loans: crate::loans::Loans::new(cfg.lend_pool), ..Default::default() };
        Arc::new(Node {
            cfg,
            started: Instant::now(),
            reg: Mutex::new(reg),
            changed: Condvar::new(),
            peers: std::sync::OnceLock::new(),
        })
    }

    /// Join the cluster: requests for other nodes go to `peers` from now
    /// on, and the registry tells them what it must (`Links`).
    pub fn set_links(&self, peers: &Arc<crate::peers::Peers>) {
        let _ = self.peers.set(peers.clone());
        self.lock().links = Some(peers.clone());
    }

    pub fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock leaves the registry as the handler
        // left it; the node keeps serving rather than cascade (see
        // crate::recover).
        self.reg.locked()
    }

    fn check_node(&self, node_id: u32) -> Result<(), SciError> {
        if node_id == self.cfg.node_id {
            Ok(())
        } else {
            Err(SciError::NoSuchNodeid)
        }
    }

    /// Handle one validated request from `client`.
    pub fn handle(self: &Arc<Self>, client: ClientId, tag: u64, req: vsci_proto::Request) -> Handled {
        self.handle_with(client, tag, req, None)
    }

    /// Handle a request that may carry a validated eventfd (`wake`, only for
    /// `CreateInterruptWake`).
    pub fn handle_with(
        self: &Arc<Self>,
        client: ClientId,
        tag: u64,
        req: vsci_proto::Request,
        wake: Option<OwnedFd>,
    ) -> Handled {
        use vsci_proto::Request as R;
        let cfg = &self.cfg;
        let mut reg = self.lock();
        crate::recover::test_panic(&req);
        let result: Result<Outgoing, SciError> = match req {
            // Close ends the connection, which the connection's server does
            // (`client::Server::request`); it never reaches the registry.
            R::Hello { .. } | R::Close => Err(SciError::IllegalOperation),
            R::CreateSegment { segment_id, auto_id, size, events: _, broadcast } => {
                let r = reg.create_segment(cfg, client, segment_id, auto_id, size, broadcast);
                self.changed.notify_all();
                r
            }
            R::PrepareSegment { seg } => reg.owned_segment(client, seg).map(|s| {
                s.prepared = true;
                done()
            }),
            R::SetAvailable { seg } => {
                let r = reg.owned_segment(client, seg).and_then(|s| {
                    if !s.prepared {
                        return Err(SciError::SegmentNotPrepared);
                    }
                    s.available = true;
                    Ok(done())
                });
                self.changed.notify_all();
                r
            }
            R::SetUnavailable { seg: handle, notify, force_disconnect } => {
                let seg = reg.held(client, handle);
                match seg.and_then(|seg| reg.owned_segment(client, seg)).and_then(|s| {
                    if !s.prepared {
                        return Err(SciError::SegmentNotPrepared);
                    }
                    s.available = false;
                    Ok(s.conns.iter().copied().collect::<Vec<_>>())
                }) {
                    Err(e) => Err(e),
                    Ok(conns) => {
                        let seg = seg.expect("held");
                        for conn in conns {
                            let Some(c) = reg.seg_conns.get(&conn) else { continue };
                            let connector = c.client;
                            if force_disconnect {
                                reg.seg_conns.remove(&conn);
                                reg.uncharge(connector);
                                if let Some(s) = reg.segments.get_mut(&seg) {
                                    s.conns.remove(&conn);
                                }
                                reg.send(
                                    connector,
                                    Outgoing::event(Event::RemoteSegment {
                                        conn,
                                        reason: SegmentEvent::Lost,
                                        status: SciError::Ok,
                                    }),
                                );
                            } else if notify {
                                reg.send(
                                    connector,
                                    Outgoing::event(Event::RemoteSegment {
                                        conn,
                                        reason: SegmentEvent::Disconnect,
                                        status: SciError::Ok,
                                    }),
                                );
                            }
                        }
                        Ok(done())
                    }
                }
            }
            R::RemoveSegment { seg } => reg.held(client, seg).map(|_| {
                reg.release_segment(seg);
                self.changed.notify_all();
                done()
            }),
            R::ShareSegment { seg } => reg.owned_segment(client, seg).map(|s| {
                s.shared = true;
                done()
            }),
            R::AttachSegment { segment_id } => reg.attach_segment(cfg, client, segment_id),
            R::ConnectSegment { node_id, segment_id, timeout_ms, broadcast }
                if self.peers.get().is_some_and(|l| l.is_member(node_id)) =>
            {
                let links = self.peers.get().cloned().expect("checked");
                drop(reg);
                links.connect_segment(Arc::clone(self), client, tag, node_id, segment_id, timeout_ms, broadcast);
                return Handled::Deferred;
            }
            R::ConnectSegment { node_id, segment_id, timeout_ms, broadcast } => {
                match self.check_node(node_id).and_then(|()| reg.connect_segment(cfg, client, segment_id, broadcast)) {
                    Err(SciError::NoSuchSegment | SciError::ConnectionRefused) if timeout_ms > 0 => {
                        return self.defer(reg, client, tag, timeout_ms, move |reg, cfg| {
                            reg.connect_segment(cfg, client, segment_id, broadcast)
                        });
                    }
                    r => r,
                }
            }
            R::DisconnectSegment { conn } => match (reg.seg_conns.get(&conn), reg.remote_segs.get(&conn)) {
                (Some(c), _) if c.client == client => {
                    reg.disconnect_segment(cfg, conn);
                    Ok(done())
                }
                (_, Some(r)) if r.client == client => {
                    reg.disconnect_remote_segment(conn);
                    Ok(done())
                }
                _ => Err(SciError::IllegalParameter),
            },
            R::CreateInterrupt { kind, hint, fixed } => {
                let r = reg.create_interrupt(cfg, client, kind, hint, fixed, None);
                self.changed.notify_all();
                r
            }
            R::CreateInterruptWake { kind, hint, fixed } => match wake {
                Some(fd) => {
                    let r = reg.create_interrupt(cfg, client, kind, hint, fixed, Some(fd));
                    self.changed.notify_all();
                    r
                }
                None => Err(SciError::IllegalParameter),
            },
            R::RemoveInterrupt { intr } => match reg.intrs.get(&intr) {
                Some(i) if i.owner == client => {
                    reg.remove_interrupt(intr);
                    Ok(done())
                }
                _ => Err(SciError::IllegalParameter),
            },
            R::ConnectInterrupt { kind, node_id, number, timeout_ms }
                if self.peers.get().is_some_and(|l| l.is_member(node_id)) =>
            {
                let links = self.peers.get().cloned().expect("checked");
                drop(reg);
                links.connect_interrupt(Arc::clone(self), client, tag, node_id, kind, number, timeout_ms);
                return Handled::Deferred;
            }
            R::ConnectInterrupt { kind, node_id, number, timeout_ms } => {
                match self.check_node(node_id).and_then(|()| reg.connect_interrupt(cfg, client, kind, number)) {
                    Err(SciError::ConnectionRefused) if timeout_ms > 0 => {
                        return self.defer(reg, client, tag, timeout_ms, move |reg, cfg| {
                            reg.connect_interrupt(cfg, client, kind, number)
                        });
                    }
                    r => r,
                }
            }
            R::DisconnectInterrupt { conn } => match (reg.intr_conns.get(&conn), reg.remote_intrs.get(&conn)) {
                (Some(c), _) if c.client == client => {
                    reg.disconnect_interrupt(conn);
                    Ok(done())
                }
                (_, Some(r)) if r.client == client => {
                    reg.disconnect_remote_interrupt(conn);
                    Ok(done())
                }
                _ => Err(SciError::IllegalParameter),
            },
            R::ProbeNode { node_id } => {
                let reachable = node_id == cfg.node_id || self.peers.get().is_some_and(|l| l.is_up(node_id));
                if !reachable && self.peers.get().is_some_and(|l| l.is_member(node_id)) {
                    Err(SciError::NodeNotResponding)
                } else {
                    Ok(simple(Reply::Probe { reachable }))
                }
            }
            R::Status => Ok(simple(Reply::Status(Box::new(reg.status(cfg, self.started))))),
            R::Borrow { node_id, size }
                if node_id != cfg.node_id && self.peers.get().is_some_and(|l| l.is_member(node_id)) =>
            {
                if size == 0 {
                    Err(SciError::IllegalParameter)
                } else if reg.clients.get(&client).is_some_and(|c| c.waiting >= cfg.max_waiting_per_client) {
                    // Each borrow in flight holds a thread until the lender
                    // answers: bounded like connects that wait.
                    Err(reg.limit_hit(cfg, client, Limit::PendingPerClient))
                } else {
                    match reg.charge(cfg, client) {
                        Err(e) => Err(e),
                        Ok(()) => {
                            if let Some(c) = reg.clients.get_mut(&client) {
                                c.waiting += 1;
                            }
                            let links = self.peers.get().cloned().expect("checked");
                            drop(reg);
                            links.borrow(Arc::clone(self), client, tag, node_id, size);
                            return Handled::Deferred;
                        }
                    }
                }
            }
            // Not from ourselves: a program that wants its own node's memory
            // makes a segment.
            R::Borrow { node_id, .. } if node_id == cfg.node_id => Err(SciError::IllegalParameter),
            R::Borrow { .. } => Err(SciError::NoSuchNodeid),
            R::Lend { size } => reg.lend(client, size),
            R::ReturnLoan { loan } => reg.return_loan(client, loan),
        };
        Handled::Reply(match result {
            Ok(out) => tagged(out, tag),
            Err(e) => Outgoing::reply(tag, Err(e)),
        })
    }

    /// Park a request until `attempt` succeeds, the client goes away, or
    /// `timeout_ms` passes (then reply with the last attempt's error). Runs on its own thread
    /// so the client's other requests keep flowing.
    fn defer<F>(
        self: &Arc<Self>,
        mut reg: MutexGuard<'_, Registry>,
        client: ClientId,
        tag: u64,
        timeout_ms: u32,
        attempt: F,
    ) -> Handled
    where
        F: Fn(&mut Registry, &Config) -> Result<Outgoing, SciError> + Send + 'static,
    {
        let Some(c) = reg.clients.get_mut(&client) else { return Handled::Deferred };
        if c.waiting >= self.cfg.max_waiting_per_client {
            let e = reg.limit_hit(&self.cfg, client, Limit::PendingPerClient);
            return Handled::Reply(Outgoing::reply(tag, Err(e)));
        }
        c.waiting += 1;
        drop(reg);
        let deadline = (timeout_ms != u32::MAX).then(|| Instant::now() + Duration::from_millis(timeout_ms.into()));
        let node = Arc::clone(self);
        std::thread::spawn(move || {
            let mut reg = node.lock();
            let mut last_err;
            loop {
                if !reg.clients.contains_key(&client) {
                    return; // client gone; nothing to answer
                }
                // A panic of the attempt ends this request, not the node
                // (see crate::recover).
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| attempt(&mut reg, &node.cfg)))
                    .unwrap_or_else(|p| {
                        log::error!(
                            "client {client}: a waiting request (tag {tag}) panicked ({}); answering SCI_ERR_SYSTEM",
                            crate::recover::message(&*p)
                        );
                        Err(SciError::System)
                    });
                match r {
                    Ok(out) => {
                        finish_wait(&mut reg, client, tagged(out, tag));
                        return;
                    }
                    Err(e @ (SciError::NoSuchSegment | SciError::ConnectionRefused)) => last_err = e,
                    Err(e) => {
                        finish_wait(&mut reg, client, Outgoing::reply(tag, Err(e)));
                        return;
                    }
                }
                let wait = match deadline {
                    None => Duration::from_secs(3600),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            finish_wait(&mut reg, client, Outgoing::reply(tag, Err(last_err)));
                            return;
                        }
                        d - now
                    }
                };
                reg = node.changed.wait_timeout(reg, wait).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            }
        });
        Handled::Deferred
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{sync_channel, Receiver};

    use vsci_proto::Request as R;
    use vsci_proto::{ClientInfo, IntrKind, ObjId, ServerMsg, WaitMode};

    use super::*;

    fn node() -> Arc<Node> {
        Node::new(Config {
            node_id: 7,
            socket: "test".into(),
            wait_mode: WaitMode::Adaptive,
            spin_us: 0,
            max_segment_size: 1 << 30,
            max_objects_per_client: 8,
            max_waiting_per_client: 2,
            max_objects_per_uid: 1 << 20,
            max_clients_per_uid: 1 << 20,
            max_memory_per_uid: 0,
            fd_limit: 1 << 20,
            fd_reserve: 64,
            connect_policy: ConnectPolicy::Any,
            lend_pool: 0,
        })
    }

    fn add_client(n: &Node) -> (ClientId, Receiver<Outgoing>) {
        let (tx, rx) = sync_channel(64);
        let sock: OwnedFd = nix::sys::eventfd::EventFd::new().unwrap().into();
        let id = n.lock().register_client(ClientInfo::default(), tx, Arc::new(sock));
        (id, rx)
    }

    fn call(n: &Arc<Node>, c: ClientId, req: R) -> (Result<Reply, SciError>, usize) {
        match n.handle(c, 1, req) {
            Handled::Reply(Outgoing { msg: ServerMsg::Reply { result, .. }, fds }) => (result, fds.len()),
            _ => panic!("expected an immediate reply"),
        }
    }

    fn seg_of(r: Result<Reply, SciError>) -> ObjId {
        match r {
            Ok(Reply::Segment { seg, .. }) => seg,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn segment_life_cycle_and_events() {
        let n = node();
        let (a, rx_a) = add_client(&n);
        let (b, rx_b) = add_client(&n);
        let (r, nfds) =
            call(&n, a, R::CreateSegment { segment_id: 5, auto_id: false, size: 4096, events: true, broadcast: false });
        assert_eq!(nfds, 1, "the reply carries the memfd");
        let seg = seg_of(r);
        assert_eq!(
            call(&n, a, R::CreateSegment { segment_id: 5, auto_id: false, size: 1, events: true, broadcast: false })
                .0
                .unwrap_err(),
            SciError::SegmentidUsed
        );
        assert_eq!(
            call(&n, b, R::ConnectSegment { node_id: 7, segment_id: 5, timeout_ms: 0, broadcast: false })
                .0
                .unwrap_err(),
            SciError::ConnectionRefused
        );
        assert_eq!(call(&n, a, R::SetAvailable { seg }).0.unwrap_err(), SciError::SegmentNotPrepared);
        call(&n, a, R::PrepareSegment { seg }).0.unwrap();
        call(&n, a, R::SetAvailable { seg }).0.unwrap();
        assert_eq!(
            call(&n, b, R::ConnectSegment { node_id: 8, segment_id: 5, timeout_ms: 0, broadcast: false })
                .0
                .unwrap_err(),
            SciError::NoSuchNodeid
        );
        let conn = match call(&n, b, R::ConnectSegment { node_id: 7, segment_id: 5, timeout_ms: 0, broadcast: false }).0
        {
            Ok(Reply::Connected { conn, size: 4096, .. }) => conn,
            other => panic!("{other:?}"),
        };
        assert!(matches!(
            rx_a.try_recv().unwrap().msg,
            ServerMsg::Event(Event::LocalSegment { reason: SegmentEvent::Connect, node_id: 7, .. })
        ));
        // Isolation: B cannot remove or prepare A's segment, A cannot disconnect B.
        assert_eq!(call(&n, b, R::RemoveSegment { seg }).0.unwrap_err(), SciError::IllegalParameter);
        assert_eq!(call(&n, a, R::DisconnectSegment { conn }).0.unwrap_err(), SciError::IllegalParameter);
        // Removing a connected segment succeeds and tells the connector.
        call(&n, a, R::RemoveSegment { seg }).0.unwrap();
        assert!(matches!(
            rx_b.try_recv().unwrap().msg,
            ServerMsg::Event(Event::RemoteSegment { reason: SegmentEvent::Lost, .. })
        ));
        let reg = n.lock();
        assert!(reg.segments.is_empty() && reg.seg_conns.is_empty() && reg.seg_by_id.is_empty());
    }

    #[test]
    fn group_connects_find_only_broadcast_segments() {
        let n = node();
        let (a, _rx_a) = add_client(&n);
        let (b, _rx_b) = add_client(&n);
        for (id, broadcast) in [(5, false), (6, true)] {
            let seg = seg_of(
                call(&n, a, R::CreateSegment { segment_id: id, auto_id: false, size: 4096, events: true, broadcast }).0,
            );
            call(&n, a, R::PrepareSegment { seg }).0.unwrap();
            call(&n, a, R::SetAvailable { seg }).0.unwrap();
        }
        // An ordinary segment with the group's id is not a member...
        assert_eq!(
            call(&n, b, R::ConnectSegment { node_id: 7, segment_id: 5, timeout_ms: 0, broadcast: true }).0.unwrap_err(),
            SciError::NoSuchSegment
        );
        // ...a broadcast one is, and unicast connects reach both.
        for (id, broadcast) in [(6, true), (6, false), (5, false)] {
            assert!(matches!(
                call(&n, b, R::ConnectSegment { node_id: 7, segment_id: id, timeout_ms: 0, broadcast }).0,
                Ok(Reply::Connected { .. })
            ));
        }
        let st = n.lock().status(&n.cfg, Instant::now());
        let flags: Vec<(u32, bool)> = st.segments.iter().map(|s| (s.segment_id, s.broadcast)).collect();
        assert!(flags.contains(&(5, false)) && flags.contains(&(6, true)), "{flags:?}");
    }

    #[test]
    fn dead_client_releases_everything() {
        let n = node();
        let (a, _rx_a) = add_client(&n);
        let (b, rx_b) = add_client(&n);
        let seg = seg_of(
            call(&n, a, R::CreateSegment { segment_id: 0, auto_id: true, size: 8192, events: true, broadcast: false })
                .0,
        );
        call(&n, a, R::PrepareSegment { seg }).0.unwrap();
        call(&n, a, R::SetAvailable { seg }).0.unwrap();
        let id = n.lock().segments[&seg].segment_id;
        call(&n, b, R::ConnectSegment { node_id: 7, segment_id: id, timeout_ms: 0, broadcast: false }).0.unwrap();
        let number = match call(&n, a, R::CreateInterrupt { kind: IntrKind::Plain, hint: 3, fixed: true }).0 {
            Ok(Reply::Interrupt { number, .. }) => number,
            other => panic!("{other:?}"),
        };
        assert_eq!(number, 3);
        assert_eq!(
            call(&n, b, R::CreateInterrupt { kind: IntrKind::Plain, hint: 3, fixed: true }).0.unwrap_err(),
            SciError::Busy
        );
        match call(&n, b, R::CreateInterrupt { kind: IntrKind::Plain, hint: 3, fixed: false }).0 {
            Ok(Reply::Interrupt { number, .. }) => assert_ne!(number, 3, "a taken hint gives another number"),
            other => panic!("{other:?}"),
        }
        call(&n, b, R::ConnectInterrupt { kind: IntrKind::Plain, node_id: 7, number: 3, timeout_ms: 0 }).0.unwrap();
        let cfg = n.cfg.clone();
        n.lock().remove_client(&cfg, a);
        let kinds: Vec<_> = rx_b.try_iter().map(|o| o.msg).collect();
        assert!(kinds
            .iter()
            .any(|m| matches!(m, ServerMsg::Event(Event::RemoteSegment { reason: SegmentEvent::Lost, .. }))));
        assert!(kinds.iter().any(|m| matches!(m, ServerMsg::Event(Event::InterruptGone { .. }))));
        let reg = n.lock();
        assert!(reg.segments.is_empty() && reg.seg_conns.is_empty());
        assert_eq!(reg.intrs.len(), 1, "only B's own interrupt is left");
        assert!(reg.intr_conns.is_empty());
    }

    /// Found by the client_request fuzz target: an owner that left while
    /// another uid's program kept its shared segment attached left its
    /// uid's usage entry behind (all zero) once the segment went.
    #[test]
    fn an_owner_gone_before_its_segment_leaves_no_uid_entry() {
        let n = node();
        let (tx, _rx_a) = sync_channel(64);
        let sock: OwnedFd = nix::sys::eventfd::EventFd::new().unwrap().into();
        let a = n.lock().register_client(ClientInfo { uid: 1000, ..Default::default() }, tx, Arc::new(sock));
        let (b, _rx_b) = add_client(&n);
        let seg = seg_of(
            call(
                &n,
                a,
                R::CreateSegment { segment_id: 5, auto_id: false, size: 4096, events: false, broadcast: false },
            )
            .0,
        );
        call(&n, a, R::ShareSegment { seg }).0.unwrap();
        call(&n, b, R::AttachSegment { segment_id: 5 }).0.unwrap();
        let cfg = n.cfg.clone();
        n.lock().remove_client(&cfg, a);
        assert!(!n.lock().holds_nothing(), "the attachment keeps the segment");
        n.lock().remove_client(&cfg, b);
        assert!(n.lock().holds_nothing());
    }

    #[test]
    fn limits_are_enforced() {
        let n = node();
        let (a, _rx) = add_client(&n);
        assert_eq!(
            call(&n, a, R::CreateSegment { segment_id: 1, auto_id: false, size: 0, events: true, broadcast: false })
                .0
                .unwrap_err(),
            SciError::IllegalParameter
        );
        assert_eq!(
            call(
                &n,
                a,
                R::CreateSegment { segment_id: 1, auto_id: false, size: 2 << 30, events: true, broadcast: false }
            )
            .0
            .unwrap_err(),
            SciError::Nospc
        );
        for i in 0..8 {
            seg_of(
                call(
                    &n,
                    a,
                    R::CreateSegment {
                        segment_id: 100 + i,
                        auto_id: false,
                        size: 4096,
                        events: true,
                        broadcast: false,
                    },
                )
                .0,
            );
        }
        assert_eq!(
            call(
                &n,
                a,
                R::CreateSegment { segment_id: 200, auto_id: false, size: 4096, events: true, broadcast: false }
            )
            .0
            .unwrap_err(),
            SciError::Nospc
        );
    }
}
