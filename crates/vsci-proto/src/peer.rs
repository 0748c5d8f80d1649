//! Node-to-node control protocol (between `vscid`s of one cluster).
//!
//! Links are TCP connections authenticated with the cluster's shared key:
//! a mutual HMAC-SHA256 challenge-response at setup, then every frame
//! carries an HMAC over a per-direction sequence number and its body, so a
//! host without the key can neither join nor inject. Links are not
//! encrypted. Bulk data never travels here: segment stores and reads go
//! over the RMA engine, keyed by capabilities sent on these links.

use serde::{Deserialize, Serialize};

use crate::{IntrKind, ObjId, SciError, SegmentEvent};

/// Largest frame body on a node link.
pub const MAX_PEER_FRAME: usize = 64 * 1024;

/// First frame from the connecting node (not authenticated yet).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkHello {
    pub version: u32,
    pub from: u32,
    pub to: u32,
    pub nonce: [u8; 32],
}

/// The accepting node proves it knows the key and sends its own nonce.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkChallenge {
    pub nonce: [u8; 32],
    pub mac: [u8; 32],
}

/// The connecting node proves it knows the key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkProof {
    pub mac: [u8; 32],
}

/// Where a segment's memory can be reached over the RMA engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RmaRegion {
    /// Address the initiator adds offsets to (0 or the target's virtual address).
    pub base: u64,
    /// Memory-region key: an unguessable capability.
    pub key: u64,
    pub len: u64,
}

/// Messages on an authenticated node link.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PeerMsg {
    /// Sent first on every link, right after authentication (and again if
    /// the engine address changes). `incarnation`: a random non-zero number
    /// the sender drew when it started, so a restarted node (with none of
    /// its old state) is told from one whose link merely dropped; `knows`:
    /// the receiver's incarnation whose connections the sender still holds
    /// (0: none). A link continues the old connections only when both
    /// sides hold each other's current incarnation.
    Info {
        node_id: u32,
        fabric_addr: Vec<u8>,
        incarnation: u64,
        knows: u64,
    },
    Heartbeat,
    ConnectSegment {
        req: u64,
        segment_id: u32,
        timeout_ms: u32,
        broadcast: bool,
    },
    ConnectSegmentReply {
        req: u64,
        result: Result<RemoteSegmentGrant, SciError>,
    },
    DisconnectSegment {
        conn: ObjId,
    },
    /// Owner → importer node: something happened to a connection.
    SegmentEvent {
        conn: ObjId,
        reason: SegmentEvent,
    },
    ConnectInterrupt {
        req: u64,
        kind: IntrKind,
        number: u32,
        timeout_ms: u32,
    },
    ConnectInterruptReply {
        req: u64,
        result: Result<RemoteInterruptGrant, SciError>,
    },
    DisconnectInterrupt {
        conn: ObjId,
    },
    InterruptGone {
        conn: ObjId,
    },
    /// Borrower → lender: lend `size` bytes of your pool.
    Borrow {
        req: u64,
        size: u64,
    },
    /// The loan (`conn` names it) and where it is registered.
    BorrowReply {
        req: u64,
        result: Result<RemoteSegmentGrant, SciError>,
    },
    /// Borrower → lender: the loan is given back.
    ReturnLoan {
        loan: ObjId,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteSegmentGrant {
    pub conn: ObjId,
    pub size: u64,
    pub region: RmaRegion,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteInterruptGrant {
    pub conn: ObjId,
    /// Capability the initiator puts in each trigger message.
    pub token: u64,
}

/// A trigger sent over the RMA engine's message channel to the owner node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TriggerMsg {
    pub token: u64,
    pub data: Option<Vec<u8>>,
}
