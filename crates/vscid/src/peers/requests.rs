//! What crosses a node link (the parent, `peers.rs`, keeps the links
//! themselves: dialling, accepting, liveness, the pseudo-clients): a local
//! client's request for another node's segment, interrupt or memory, sent
//! and waited for (`ask`) on the client's own thread; the other nodes'
//! requests for our objects, run as their pseudo-clients
//! (`peer_request`, `run_for_peer`), and what the registry then tells a
//! pseudo-client, turned back into frames (`forward_pseudo`).

use super::*;

/// What a pseudo-client's reply answers, in the low bits of its tag (the
/// peer's request number is above them; tag 0 is a disconnect's, unanswered).
const TAG_SEGMENT: u64 = 0;
const TAG_INTERRUPT: u64 = 1;
const TAG_LOAN: u64 = 2;
const TAG_BITS: u32 = 2;

impl Peers {
    pub(super) fn on_peer_msg(self: &Arc<Self>, node: &Arc<Node>, peer: u32, pseudo: ClientId, msg: PeerMsg) {
        match msg {
            PeerMsg::Heartbeat => {}
            // Checked against the introduction by the link's reader.
            PeerMsg::Info { node_id, fabric_addr, .. } => {
                if node_id != peer {
                    warn!("node {peer} calls itself {node_id}; ignoring its info");
                    return;
                }
                if let Some(s) = self.state.locked().get_mut(&peer) {
                    s.fabric_addr = Some(fabric_addr);
                }
                self.changed.notify_all();
            }
            // Requests for our objects: run them as the pseudo-client (a
            // disconnect first revokes the peer's RMA access).
            PeerMsg::ConnectSegment { .. }
            | PeerMsg::ConnectInterrupt { .. }
            | PeerMsg::DisconnectSegment { .. }
            | PeerMsg::DisconnectInterrupt { .. }
            | PeerMsg::Borrow { .. }
            | PeerMsg::ReturnLoan { .. } => {
                match msg {
                    PeerMsg::DisconnectSegment { conn } => self.engine.release_segment_conn(conn),
                    PeerMsg::DisconnectInterrupt { conn } => self.engine.remove_trigger_conn(conn),
                    _ => {}
                }
                if let Some((tag, r)) = peer_request(self.me, &msg) {
                    run_for_peer(node, pseudo, tag, r);
                }
            }
            // Answers and events about our clients' imports.
            // A grant nobody waits for any more (the request timed out or
            // its link dropped meanwhile) is handed back at once, so the
            // owner does not keep a connection no program holds.
            PeerMsg::ConnectSegmentReply { req, result } => {
                if let Some(PeerReply::Segment(g)) = self.complete(req, result.map(PeerReply::Segment)) {
                    self.send(peer, PeerMsg::DisconnectSegment { conn: g.conn });
                }
            }
            PeerMsg::ConnectInterruptReply { req, result } => {
                if let Some(PeerReply::Interrupt(g)) = self.complete(req, result.map(PeerReply::Interrupt)) {
                    self.send(peer, PeerMsg::DisconnectInterrupt { conn: g.conn });
                }
            }
            PeerMsg::BorrowReply { req, result } => {
                if let Some(PeerReply::Loan(g)) = self.complete(req, result.map(PeerReply::Loan)) {
                    self.send(peer, PeerMsg::ReturnLoan { loan: g.conn });
                }
            }
            PeerMsg::SegmentEvent { conn, reason } => node.lock().remote_segment_event(peer, conn, reason),
            PeerMsg::InterruptGone { conn } => node.lock().remote_interrupt_gone(peer, conn),
        }
    }

    /// Hand a reply to the request waiting for it; returns a grant that
    /// found nobody waiting.
    fn complete(&self, req: u64, r: Result<PeerReply, SciError>) -> Option<PeerReply> {
        let slot = self.pending.locked().remove(&req);
        match (slot, r) {
            (Some(slot), r) => match slot.try_send(r) {
                Ok(()) => None,
                Err(std::sync::mpsc::TrySendError::Full(r) | std::sync::mpsc::TrySendError::Disconnected(r)) => r.ok(),
            },
            (None, r) => r.ok(),
        }
    }

    /// Translate what the registry tells a pseudo-client into frames for
    /// the node it stands for.
    pub(super) fn forward_pseudo(self: &Arc<Self>, peer: u32, rx: Receiver<Outgoing>) {
        for out in rx {
            let msg = match out.msg {
                ServerMsg::Reply { tag: 0, .. } => continue, // disconnect acknowledgements
                ServerMsg::Reply { tag, result } if tag & 3 == TAG_LOAN => {
                    let result = result.and_then(|r| match r {
                        Reply::Lent { loan, size, region } => Ok(RemoteSegmentGrant { conn: loan, size, region }),
                        _ => Err(SciError::System),
                    });
                    if let Err(e) = &result {
                        debug!("node {peer}: loan request failed: {e}");
                    }
                    PeerMsg::BorrowReply { req: tag >> TAG_BITS, result }
                }
                ServerMsg::Reply { tag, result } if tag & 3 == TAG_SEGMENT => {
                    let result = result.and_then(|r| match r {
                        Reply::Connected { conn, size, .. } => {
                            let fd = out.fds.into_iter().next().ok_or(SciError::System)?;
                            let region = self.engine.register_segment_conn(conn, fd, size)?;
                            Ok(RemoteSegmentGrant { conn, size, region })
                        }
                        _ => Err(SciError::System),
                    });
                    if let Err(e) = &result {
                        debug!("node {peer}: segment request failed: {e}");
                    }
                    PeerMsg::ConnectSegmentReply { req: tag >> TAG_BITS, result }
                }
                ServerMsg::Reply { tag, result } => {
                    let result = result.and_then(|r| match r {
                        Reply::InterruptConnected { conn, place: Some(place), .. } => {
                            let mut fds = out.fds.into_iter();
                            let (Some(chunk), Some(efd)) = (fds.next(), fds.next()) else {
                                return Err(SciError::System);
                            };
                            let token = self.engine.add_trigger_conn(conn, chunk, place, efd)?;
                            Ok(RemoteInterruptGrant { conn, token })
                        }
                        _ => Err(SciError::System),
                    });
                    PeerMsg::ConnectInterruptReply { req: tag >> TAG_BITS, result }
                }
                ServerMsg::Event(Event::RemoteSegment { conn, reason, .. }) => {
                    if reason == SegmentEvent::Lost {
                        self.engine.release_segment_conn(conn);
                    }
                    PeerMsg::SegmentEvent { conn, reason }
                }
                ServerMsg::Event(Event::InterruptGone { conn, .. }) => {
                    self.engine.remove_trigger_conn(conn);
                    PeerMsg::InterruptGone { conn }
                }
                ServerMsg::Event(_) => continue,
            };
            // False only for a peer declared dead (its pseudo-client is
            // being removed; this loop ends when the registry drops it) or
            // a stuck link.
            if !self.send(peer, msg) {
                debug!("node {peer}: a frame for it was dropped (dead or stuck)");
            }
        }
    }

    /// Wait until `peer`'s link is up and its engine address known.
    fn wait_ready(&self, peer: u32, deadline: Option<Instant>) -> Result<Vec<u8>, SciError> {
        let mut st = self.state.locked();
        loop {
            if let Some(s) = st.get(&peer) {
                if let (Some(_), Some(addr)) = (&s.tx, &s.fabric_addr) {
                    return Ok(addr.clone());
                }
            }
            let wait = match deadline {
                None => Duration::from_secs(1),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => w,
                    _ => return Err(SciError::NodeNotResponding),
                },
            };
            st = crate::recover::wait_timeout(&self.changed, st, wait.min(Duration::from_millis(200)));
        }
    }

    /// Send a request to `peer` and wait for its reply.
    fn ask(
        &self,
        peer: u32,
        deadline: Option<Instant>,
        make: impl FnOnce(u64) -> PeerMsg,
    ) -> Result<PeerReply, SciError> {
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        self.pending.locked().insert(req, tx);
        if !self.send_now(peer, make(req)) {
            self.pending.locked().remove(&req);
            return Err(SciError::NodeNotResponding);
        }
        // The owner enforces the timeout; allow for the round trip, and
        // watch the link so a dying node does not leave us hanging.
        let hard = deadline.map(|d| d + Duration::from_secs(3));
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(r) => return r,
                Err(_) => {
                    if !self.is_up(peer) || hard.is_some_and(|h| Instant::now() > h) {
                        self.pending.locked().remove(&req);
                        return Err(SciError::NodeNotResponding);
                    }
                }
            }
        }
    }

    /// The asking half of a connect to `peer`'s segment or interrupt: wait
    /// for its link (until the call's deadline; 10 s when it has none),
    /// then ask with what is left of `timeout_ms` (`make(req, left)`).
    /// The owner waits at most `PEER_WAIT_MAX_MS` for the segment or
    /// interrupt to appear; a caller that gave more (a server waiting for a
    /// client's guest to boot) is asked for again with what is then left, so
    /// the program's timeout is the one that holds. The peer's reply and
    /// its engine address.
    fn connect_remote(
        &self,
        peer: u32,
        timeout_ms: u32,
        make: impl Fn(u64, u32) -> PeerMsg,
    ) -> Result<(PeerReply, Vec<u8>), SciError> {
        let deadline = (timeout_ms != u32::MAX).then(|| Instant::now() + Duration::from_millis(timeout_ms.into()));
        let addr = self.wait_ready(peer, deadline.or(Some(Instant::now() + Duration::from_secs(10))))?;
        loop {
            let left =
                deadline.map(|d| d.saturating_duration_since(Instant::now()).as_millis() as u32).unwrap_or(u32::MAX);
            let asked = Instant::now();
            match self.ask(peer, deadline, |req| make(req, left)) {
                Err(SciError::NoSuchSegment | SciError::ConnectionRefused)
                    if left > PEER_WAIT_MAX_MS && deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    // An owner that answered at once (it parks nothing)
                    // is not asked in a tight loop.
                    if asked.elapsed() < Duration::from_secs(1) {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                r => return Ok((r?, addr)),
            }
        }
    }

    /// A local client asks for a segment of another node (runs on its own thread).
    #[allow(clippy::too_many_arguments)]
    pub fn connect_segment(
        self: &Arc<Self>,
        node: Arc<Node>,
        client: ClientId,
        tag: u64,
        peer: u32,
        segment_id: u32,
        timeout_ms: u32,
        broadcast: bool,
    ) {
        let p = self.clone();
        std::thread::spawn(move || {
            let result = p
                .connect_remote(peer, timeout_ms, |req, left| PeerMsg::ConnectSegment {
                    req,
                    segment_id,
                    timeout_ms: left,
                    broadcast,
                })
                .and_then(|(reply, addr)| match reply {
                    PeerReply::Segment(g) => Ok((g, addr)),
                    _ => Err(SciError::System),
                });
            let mut reg = node.lock();
            match result {
                Ok((grant, addr)) => {
                    let access =
                        RemoteAccess { region: grant.region, fabric_addr: addr, provider: p.cluster.provider.clone() };
                    match reg.add_remote_segment(&node.cfg, client, peer, segment_id, &grant, access) {
                        Ok(out) => reg.send_to(client, crate::registry::tagged(out, tag)),
                        Err(e) => {
                            drop(reg);
                            p.send(peer, PeerMsg::DisconnectSegment { conn: grant.conn });
                            node.lock().send_to(client, Outgoing::reply(tag, Err(e)));
                        }
                    }
                }
                Err(e) => reg.send_to(client, Outgoing::reply(tag, Err(e))),
            }
        });
    }

    /// A local client asks for an interrupt of another node.
    pub fn connect_interrupt(
        self: &Arc<Self>,
        node: Arc<Node>,
        client: ClientId,
        tag: u64,
        peer: u32,
        kind: IntrKind,
        number: u32,
        timeout_ms: u32,
    ) {
        let p = self.clone();
        std::thread::spawn(move || {
            let result = p
                .connect_remote(peer, timeout_ms, |req, left| PeerMsg::ConnectInterrupt {
                    req,
                    kind,
                    number,
                    timeout_ms: left,
                })
                .and_then(|(reply, addr)| match reply {
                    PeerReply::Interrupt(g) => Ok((g, addr)),
                    _ => Err(SciError::System),
                });
            let mut reg = node.lock();
            match result {
                Ok((grant, addr)) => {
                    let trig =
                        RemoteTrigger { token: grant.token, fabric_addr: addr, provider: p.cluster.provider.clone() };
                    match reg.add_remote_interrupt(&node.cfg, client, peer, grant.conn, trig) {
                        Ok(out) => reg.send_to(client, crate::registry::tagged(out, tag)),
                        Err(e) => {
                            drop(reg);
                            p.send(peer, PeerMsg::DisconnectInterrupt { conn: grant.conn });
                            node.lock().send_to(client, Outgoing::reply(tag, Err(e)));
                        }
                    }
                }
                Err(e) => reg.send_to(client, Outgoing::reply(tag, Err(e))),
            }
        });
    }

    /// A local client asks to borrow memory of another node (charged
    /// already; runs on its own thread).
    pub fn borrow(self: &Arc<Self>, node: Arc<Node>, client: ClientId, tag: u64, peer: u32, size: u64) {
        let p = self.clone();
        std::thread::spawn(move || {
            let deadline = Some(Instant::now() + Duration::from_secs(10));
            let result = p.wait_ready(peer, deadline).and_then(|addr| {
                match p.ask(peer, deadline, |req| PeerMsg::Borrow { req, size })? {
                    PeerReply::Loan(g) if g.size == size && g.region.len >= size => Ok((g, addr)),
                    PeerReply::Loan(g) => {
                        // A lender that answers with another size is broken or
                        // hostile: give it back, use nothing of it.
                        p.send(peer, PeerMsg::ReturnLoan { loan: g.conn });
                        Err(SciError::System)
                    }
                    _ => Err(SciError::System),
                }
            });
            let mut reg = node.lock();
            let out = match result {
                Ok((grant, addr)) => {
                    let access =
                        RemoteAccess { region: grant.region, fabric_addr: addr, provider: p.cluster.provider.clone() };
                    match reg.add_borrowed(client, peer, &grant, access) {
                        Ok(out) => crate::registry::tagged(out, tag),
                        Err(e) => {
                            p.send(peer, PeerMsg::ReturnLoan { loan: grant.conn });
                            reg.borrow_failed(client);
                            Outgoing::reply(tag, Err(e))
                        }
                    }
                }
                Err(e) => {
                    reg.borrow_failed(client);
                    Outgoing::reply(tag, Err(e))
                }
            };
            reg.borrow_answered(client, out);
        });
    }
}

/// Longest a connect asked by another node waits here for its segment or
/// interrupt to appear.
pub const PEER_WAIT_MAX_MS: u32 = 60_000;

/// The request a peer's frame asks of our registry, run as that node's
/// pseudo-client, with the tag its reply is matched by (`forward_pseudo`
/// turns it back into the peer's request number and kind). A peer may ask
/// a connect to wait at most `PEER_WAIT_MAX_MS` (its node asks again for a
/// longer wait, see `connect_remote`): a bound on how long another node can
/// park requests here.
pub fn peer_request(me: u32, msg: &PeerMsg) -> Option<(u64, Request)> {
    match *msg {
        PeerMsg::ConnectSegment { req, segment_id, timeout_ms, broadcast } => Some((
            (req << TAG_BITS) | TAG_SEGMENT,
            Request::ConnectSegment {
                node_id: me,
                segment_id,
                timeout_ms: timeout_ms.min(PEER_WAIT_MAX_MS),
                broadcast,
            },
        )),
        PeerMsg::ConnectInterrupt { req, kind, number, timeout_ms } => Some((
            (req << TAG_BITS) | TAG_INTERRUPT,
            Request::ConnectInterrupt { kind, node_id: me, number, timeout_ms: timeout_ms.min(PEER_WAIT_MAX_MS) },
        )),
        PeerMsg::Borrow { req, size } => Some(((req << TAG_BITS) | TAG_LOAN, Request::Lend { size })),
        PeerMsg::DisconnectSegment { conn } => Some((0, Request::DisconnectSegment { conn })),
        PeerMsg::DisconnectInterrupt { conn } => Some((0, Request::DisconnectInterrupt { conn })),
        PeerMsg::ReturnLoan { loan } => Some((0, Request::ReturnLoan { loan })),
        _ => None,
    }
}

/// Run a peer's request as its pseudo-client; the answer goes the way of
/// everything said to that client (`forward_pseudo`).
pub fn run_for_peer(node: &Arc<Node>, pseudo: ClientId, tag: u64, req: Request) {
    if let Handled::Reply(out) = node.handle(pseudo, tag, req) {
        node.lock().send_to(pseudo, out);
    }
}
