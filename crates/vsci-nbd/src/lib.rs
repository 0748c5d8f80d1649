//! An NBD (Network Block Device) server, generic over where the blocks live.
//!
//! vsci serves block devices whose contents sit in other machines' memory;
//! this crate is only the protocol: QEMU's built-in NBD client, the kernel's
//! `nbd` driver and libnbd tools connect over a UNIX or TCP socket, and every
//! read, write, flush and trim lands on a [`Backend`].
//!
//! ## Why not the `nbd` crate
//! `nbd` (0.3) serves one connection at a time from a `Read + Write + Seek`,
//! answers requests strictly in order, ignores the export name and has no
//! `NBD_OPT_GO`/`NBD_OPT_INFO` block-size reply. We need out-of-order
//! completion across worker threads (so a queue depth of 32 overlaps the
//! backend's network latency, and requests queued together reach the
//! backend as one batch), multi-connection, strict validation of
//! untrusted input and parsers a fuzz target can call, so the protocol —
//! small — is written here ([`proto`]).
//!
//! ## What is spoken
//! Fixed newstyle negotiation only, with `NBD_OPT_EXPORT_NAME`, `NBD_OPT_GO`,
//! `NBD_OPT_INFO`, `NBD_OPT_LIST` and `NBD_OPT_ABORT`; every other option
//! (structured replies, meta contexts, TLS, extended headers) is answered
//! `NBD_REP_ERR_UNSUP`, so transmission uses simple replies only. Commands:
//! READ, WRITE (+FUA), FLUSH, TRIM, WRITE_ZEROES (+NO_HOLE), DISC.
//!
//! ## Ordering
//! Requests of one connection run on `workers_per_connection` threads and
//! may complete out of order; replies carry the client's cookie. For a
//! backend that takes batches ([`Backend::max_batch`]), a worker takes the
//! READs (or WRITEs) already queued behind the one it picks and hands them
//! to [`Backend::read_many_at`] (`write_many_at`) at once; FLUSH, TRIM and
//! WRITE_ZEROES run alone. A FLUSH
//! waits until every request the connection received before it has
//! completed, then calls [`Backend::flush`], which must cover writes from
//! all connections (we advertise `NBD_FLAG_CAN_MULTI_CONN`).
//!
//! ## Limits
//! READ/WRITE lengths are capped at `max_request`; one connection holds at
//! most 2 × `max_request` of request buffers at once (the reader waits for
//! workers beyond that). TRIM and WRITE_ZEROES carry no payload and may
//! span up to 4 GiB. Negotiation must make progress every 30 s and within
//! 256 options. The number of connections is not limited here: put the
//! socket where only trusted clients reach it.

pub mod proto;
mod server;

pub use proto::{
    check_request, parse_client_flags, parse_info_request, parse_option_header, parse_request, ClientFlags,
    ExportLimits, InfoRequest, OptionHeader, ParseError, Request,
};
pub use server::{negotiate, ExportInfo, Negotiated, Server};

/// Where an export's bytes live. Calls come from many threads at once
/// (several per connection, several connections), possibly for overlapping
/// ranges; the server never issues a call outside `0..size()`.
pub trait Backend: Send + Sync + 'static {
    /// Export size in bytes; read once per connection at negotiation.
    fn size(&self) -> u64;
    /// Fill buf from offset (offset+len <= size, checked by the server).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Store data at offset (offset+len <= size, checked by the server).
    fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()>;
    /// How many queued READs (or WRITEs) the server may hand
    /// [`read_many_at`](Self::read_many_at) (`write_many_at`) at once. The
    /// default, 1, gives every request a call of its own on whichever
    /// worker is free, so requests overlap; a backend whose batch calls do
    /// better than a loop raises it.
    fn max_batch(&self) -> usize {
        1
    }
    /// Fill several reads that are queued together: each `(buf, offset)`
    /// from `offset` (every range checked by the server). One result per
    /// request, in order. The default reads them one by one with
    /// [`read_at`](Self::read_at); a backend whose reads wait on a network
    /// can post them all and wait once. A buffer the backend must keep (an
    /// abandoned DMA may still write into it) can be taken out, leaving an
    /// empty `Vec`, with an error for its request.
    fn read_many_at(&self, reqs: &mut [(Vec<u8>, u64)]) -> Vec<std::io::Result<()>> {
        reqs.iter_mut().map(|(buf, offset)| self.read_at(buf, *offset)).collect()
    }
    /// Store several writes that are queued together (ranges checked by
    /// the server; requests in flight together may overlap, in which case
    /// either may land last). One result per request, in order. The
    /// default writes them one by one with [`write_at`](Self::write_at).
    fn write_many_at(&self, reqs: &[(&[u8], u64)]) -> Vec<std::io::Result<()>> {
        reqs.iter().map(|&(data, offset)| self.write_at(data, offset)).collect()
    }
    /// Make every completed write durable/visible at the store — writes of
    /// all connections, since multi-connection clients rely on it.
    fn flush(&self) -> std::io::Result<()>;
    /// Hint that a range is unused (may be a no-op); also used for
    /// WRITE_ZEROES after writing zeros when the backend cannot do better.
    /// Because of the latter, a trimmed range must afterwards read back as
    /// zeros or as its previous contents, never as anything else.
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()>;
}

/// How an export is offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Name clients ask for; the empty name is accepted as well.
    pub export_name: String,
    /// Advertise `NBD_FLAG_READ_ONLY` and refuse WRITE/TRIM/WRITE_ZEROES
    /// with `EPERM`.
    pub read_only: bool,
    /// Threads executing requests of one connection (at least 1).
    pub workers_per_connection: usize,
    /// Largest READ/WRITE length accepted, advertised as the maximum block
    /// size. Clamped to 4 KiB ..= 64 MiB.
    pub max_request: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig { export_name: String::new(), read_only: false, workers_per_connection: 4, max_request: 32 << 20 }
    }
}

/// Counters since the server was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted.
    pub connections: u64,
    /// Connections currently open.
    pub active_connections: u64,
    /// Successful READ commands.
    pub reads: u64,
    /// Successful WRITE commands.
    pub writes: u64,
    /// Successful FLUSH commands (FUA does not count).
    pub flushes: u64,
    /// Successful TRIM commands.
    pub trims: u64,
    /// Successful WRITE_ZEROES commands.
    pub zero_writes: u64,
    /// Bytes sent to clients by READ.
    pub bytes_read: u64,
    /// Bytes stored by WRITE (WRITE_ZEROES not included).
    pub bytes_written: u64,
    /// Error replies sent, plus connections dropped for protocol violations.
    pub errors: u64,
}
