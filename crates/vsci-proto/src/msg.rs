//! Request, reply and event messages.
//!
//! Handles (`ObjId`) are chosen by the daemon, are unique for the daemon's
//! lifetime and are only meaningful on the connection that received them:
//! the daemon looks every handle up in the requesting connection's own
//! table, so a client cannot name another client's objects.

use serde::{Deserialize, Serialize};

use crate::SciError;

/// A daemon-side object handle.
pub type ObjId = u64;

/// Longest client name accepted in `Hello`.
pub const MAX_NAME: usize = 256;

/// Interrupt kind: plain doorbell or data interrupt (separate number spaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IntrKind {
    Plain,
    Data,
}

/// How interrupt waits wait (see docs/api.md, "Waiting").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitMode {
    Adaptive,
    Poll,
    Block,
}

impl std::str::FromStr for WaitMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "adaptive" => Ok(WaitMode::Adaptive),
            "poll" => Ok(WaitMode::Poll),
            "block" => Ok(WaitMode::Block),
            other => Err(format!("unknown wait mode {other:?} (adaptive, poll, block)")),
        }
    }
}

impl std::fmt::Display for WaitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WaitMode::Adaptive => "adaptive",
            WaitMode::Poll => "poll",
            WaitMode::Block => "block",
        })
    }
}

/// Client → daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientMsg {
    /// Echoed in the reply so a multi-threaded client can match them.
    pub tag: u64,
    pub req: Request,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// First message on every connection.
    Hello {
        version: u32,
        name: String,
    },
    /// Reply carries the segment memfd. `broadcast`: a member of the
    /// reflective-memory group `segment_id` (SCI_FLAG_BROADCAST).
    CreateSegment {
        segment_id: u32,
        auto_id: bool,
        size: u64,
        events: bool,
        broadcast: bool,
    },
    PrepareSegment {
        seg: ObjId,
    },
    SetAvailable {
        seg: ObjId,
    },
    SetUnavailable {
        seg: ObjId,
        notify: bool,
        force_disconnect: bool,
    },
    RemoveSegment {
        seg: ObjId,
    },
    /// Waits up to `timeout_ms` (`u32::MAX` = forever) for the segment.
    /// Reply carries the segment memfd. `broadcast`: only a reflective-memory
    /// member (a segment created with `broadcast`) will do.
    ConnectSegment {
        node_id: u32,
        segment_id: u32,
        timeout_ms: u32,
        broadcast: bool,
    },
    DisconnectSegment {
        conn: ObjId,
    },
    /// Reply carries [shared state memfd, eventfd].
    CreateInterrupt {
        kind: IntrKind,
        hint: u32,
        fixed: bool,
    },
    /// As `CreateInterrupt`, but the request carries the eventfd that wakes
    /// the waiter (a guest's MSI-X vector, so triggers reach the guest
    /// without a hop through its host side). Reply as `CreateInterrupt`.
    CreateInterruptWake {
        kind: IntrKind,
        hint: u32,
        fixed: bool,
    },
    RemoveInterrupt {
        intr: ObjId,
    },
    /// Reply carries [shared state memfd, eventfd].
    ConnectInterrupt {
        kind: IntrKind,
        node_id: u32,
        number: u32,
        timeout_ms: u32,
    },
    DisconnectInterrupt {
        conn: ObjId,
    },
    ProbeNode {
        node_id: u32,
    },
    Status,
    /// Let other programs of this node attach to the segment (SCIShareSegment).
    ShareSegment {
        seg: ObjId,
    },
    /// A handle of our own on a shared segment of this node
    /// (SCIAttachLocalSegment). Reply `Segment`, carrying the segment memfd;
    /// `RemoveSegment` on the new handle detaches.
    AttachSegment {
        segment_id: u32,
    },
    /// Borrow `size` bytes of the memory node `node_id` lends (its pool,
    /// `vscid --lend`). Reply `Borrowed`: where to reach the loan over the
    /// RMA engine. The loan is zero-filled and the borrower's alone.
    Borrow {
        node_id: u32,
        size: u64,
    },
    /// Give a loan back (`loan` from `Borrowed`, or, between nodes, from
    /// `Lent`). Reply `Done`; its memory is freed on the lender.
    ReturnLoan {
        loan: ObjId,
    },
    /// Another node's pseudo-client only: set aside `size` bytes of this
    /// node's lending pool and register them with the RMA engine. Reply
    /// `Lent`.
    Lend {
        size: u64,
    },
    /// SCIClose: release everything this connection holds, reply `Done`
    /// once that is done, then end the connection. A program that closes a
    /// descriptor and at once opens another finds the segment ids and
    /// interrupt numbers it held free again.
    Close,
}

/// Daemon → client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ServerMsg {
    Reply { tag: u64, result: Result<Reply, SciError> },
    Event(Event),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    Hello {
        node_id: u32,
        wait_mode: WaitMode,
        spin_us: u32,
        max_segment_size: u64,
    },
    Done,
    Segment {
        seg: ObjId,
        segment_id: u32,
        size: u64,
    },
    /// Local segments carry the segment memfd. Remote ones carry a fresh
    /// zero-filled *shadow* memfd to map, plus where the owner's memory is.
    /// (In a guest, another node's segment comes without `remote`: the
    /// guest's host side reaches it, see `guest`.)
    Connected {
        conn: ObjId,
        node_id: u32,
        segment_id: u32,
        size: u64,
        remote: Option<RemoteAccess>,
    },
    /// Carries [arena chunk memfd, eventfd]; `place` is the interrupt's
    /// slot in the chunk.
    Interrupt {
        intr: ObjId,
        number: u32,
        place: crate::intr::Place,
    },
    /// Local interrupts carry [arena chunk memfd, eventfd] and their slot's
    /// `place`; remote ones no fds and no place.
    InterruptConnected {
        conn: ObjId,
        remote: Option<RemoteTrigger>,
        place: Option<crate::intr::Place>,
    },
    Probe {
        reachable: bool,
    },
    Status(Box<NodeStatus>),
    /// A loan of `size` bytes of node `node_id`'s memory.
    Borrowed {
        loan: ObjId,
        node_id: u32,
        size: u64,
        access: RemoteAccess,
    },
    /// To a peer's pseudo-client: the loan set aside, and where the RMA
    /// engine has it registered.
    Lent {
        loan: ObjId,
        size: u64,
        region: crate::peer::RmaRegion,
    },
}

/// How a process reaches a remote segment's memory over the RMA engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteAccess {
    pub region: crate::peer::RmaRegion,
    /// The owner node's RMA engine address.
    pub fabric_addr: Vec<u8>,
    /// RMA engine provider the cluster uses.
    pub provider: String,
}

/// How a process triggers a remote interrupt over the RMA engine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteTrigger {
    pub token: u64,
    pub fabric_addr: Vec<u8>,
    pub provider: String,
}

/// Segment callback reasons, with SISCI's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u32)]
pub enum SegmentEvent {
    Connect = 1,
    Disconnect = 2,
    NotOperational = 3,
    Operational = 4,
    Lost = 5,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Event {
    /// To a segment's owner: a peer connected or disconnected.
    LocalSegment { seg: ObjId, reason: SegmentEvent, node_id: u32 },
    /// To a connector: the segment went away or asked peers to leave.
    RemoteSegment { conn: ObjId, reason: SegmentEvent, status: SciError },
    /// To a connector of an interrupt whose creator removed it (status
    /// `Ok`) or whose node stopped answering (`NodeNotResponding`).
    InterruptGone { conn: ObjId, status: SciError },
    /// The node is shutting down; every handle is dead.
    Shutdown,
}

/// What `vsci status` prints.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeStatus {
    pub node_id: u32,
    pub pid: u32,
    pub socket: String,
    pub uptime_ms: u64,
    pub wait_mode: String,
    pub clients: Vec<ClientInfo>,
    pub segments: Vec<SegmentInfo>,
    pub connections: Vec<ConnectionInfo>,
    pub interrupts: Vec<InterruptInfo>,
    pub open_fds: u32,
    /// Other nodes of the cluster (empty for a stand-alone node).
    #[serde(default)]
    pub peers: Vec<PeerInfo>,
    /// Memory this node lends and borrows.
    #[serde(default)]
    pub lending: LendingStatus,
    /// How many of each the node holds. The lists above stop at
    /// [`STATUS_LIST_MAX`] entries each, so the reply fits one message
    /// however many clients and objects there are.
    #[serde(default)]
    pub totals: StatusTotals,
}

/// What a node lends to and borrows from other nodes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LendingStatus {
    /// Bytes this node offers to lend (`vscid --lend`).
    pub pool: u64,
    /// Loans to other nodes, per borrowing node.
    pub lent: Vec<LoanTotal>,
    /// Loans from other nodes to this node's programs, per lending node.
    pub borrowed: Vec<LoanTotal>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LoanTotal {
    pub node_id: u32,
    pub loans: u32,
    pub bytes: u64,
}

/// Most entries of each list a status reply carries.
pub const STATUS_LIST_MAX: usize = 100;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusTotals {
    pub clients: u64,
    pub segments: u64,
    pub connections: u64,
    pub interrupts: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeerInfo {
    pub node_id: u32,
    pub address: String,
    /// "up", "not responding" (link up, silent for `node_timeout_ms`),
    /// "link down" (connections kept, waiting for it) or "down" (never
    /// seen, or declared dead).
    pub state: String,
    /// Milliseconds since we last heard from it (0 if never).
    pub last_seen_ms: u64,
    /// Connections of our clients to its segments and interrupts.
    pub imports: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientInfo {
    pub client: u64,
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    pub name: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SegmentInfo {
    pub segment_id: u32,
    pub size: u64,
    pub owner: u64,
    pub prepared: bool,
    pub available: bool,
    pub connections: u32,
    /// Shared with SCIShareSegment.
    #[serde(default)]
    pub shared: bool,
    /// Handles other programs attached with (SCIAttachLocalSegment).
    #[serde(default)]
    pub attached: u32,
    /// A reflective-memory member (SCI_FLAG_BROADCAST).
    #[serde(default)]
    pub broadcast: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConnectionInfo {
    pub client: u64,
    pub node_id: u32,
    pub segment_id: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InterruptInfo {
    pub number: u32,
    pub data: bool,
    pub owner: u64,
    pub connections: u32,
}
