//! The node's settings, fixed at start (from the command line and the
//! cluster file).

use vsci_proto::WaitMode;

/// Node-wide settings, fixed at start.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_id: u32,
    pub socket: String,
    pub wait_mode: WaitMode,
    pub spin_us: u32,
    pub max_segment_size: u64,
    /// Segments + connections + interrupts one client may hold.
    pub max_objects_per_client: usize,
    /// Requests of one client that may wait (connect with timeout) at once.
    pub max_waiting_per_client: usize,
    /// Objects all clients of one uid may hold together.
    pub max_objects_per_uid: usize,
    /// Clients (open descriptors) one uid may have at once.
    pub max_clients_per_uid: usize,
    /// Segment bytes the clients of one uid may hold together (0: no limit).
    pub max_memory_per_uid: u64,
    /// The node's descriptor limit and the part of it kept for new clients
    /// and `vsci status`: no new object once the lowest free descriptor
    /// reaches `fd_limit - fd_reserve`, no new client past
    /// `fd_limit - fd_reserve / 4`.
    pub fd_limit: u64,
    pub fd_reserve: u64,
    /// Who may connect to a local client's segments and interrupts.
    pub connect_policy: ConnectPolicy,
    /// Bytes of memory this node lends to other nodes at most.
    pub lend_pool: u64,
}

/// Who may connect to a segment or interrupt of this node. SISCI itself has
/// no per-object rights (any program that knows a segment id may connect);
/// a shared node may narrow that to programs of the creator's uid or
/// primary group. Other nodes' programs are let in as SISCI does: the
/// cluster key vouches for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectPolicy {
    #[default]
    Any,
    SameUid,
    SameGroup,
}

impl std::str::FromStr for ConnectPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "any" => Ok(ConnectPolicy::Any),
            "uid" | "same-uid" => Ok(ConnectPolicy::SameUid),
            "group" | "same-group" => Ok(ConnectPolicy::SameGroup),
            _ => Err(format!("{s:?}: expected any, uid or group")),
        }
    }
}
