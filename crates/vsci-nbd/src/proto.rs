//! NBD wire format: constants, and parsers/encoders that are pure functions
//! over byte slices, so a fuzz target can drive them without a socket.
//!
//! Everything is big-endian ("network byte order") on the wire. Parsers
//! check only what the bytes themselves can prove (magic, lengths, internal
//! consistency); whether a request fits the export is [`check_request`]'s
//! job because it needs the export's size and configuration.

use thiserror::Error;

/// "NBDMAGIC": first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": second server magic, and the magic of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

// Handshake flags (server, 16 bits).
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
// Client flags (32 bits).
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags (16 bits).
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_ROTATIONAL: u16 = 1 << 4;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_SEND_DF: u16 = 1 << 7;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

// Info types (NBD_OPT_INFO / NBD_OPT_GO).
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Error values carried in replies. They are the protocol's, which happen
// to match Linux errno, but are spelled out so no host errno leaks through.
pub const NBD_EPERM: u32 = 1;
pub const NBD_EIO: u32 = 5;
pub const NBD_ENOMEM: u32 = 12;
pub const NBD_EINVAL: u32 = 22;
pub const NBD_ENOSPC: u32 = 28;
pub const NBD_EOVERFLOW: u32 = 75;
pub const NBD_ENOTSUP: u32 = 95;
pub const NBD_ESHUTDOWN: u32 = 108;

/// Size of a transmission request header.
pub const REQUEST_SIZE: usize = 28;
/// Size of a client option header (magic, option, length).
pub const OPTION_HEADER_SIZE: usize = 16;
/// Size of a simple reply header.
pub const SIMPLE_REPLY_SIZE: usize = 16;
/// Size of an option reply header (magic, option, type, length).
pub const OPTION_REPLY_HEADER_SIZE: usize = 20;
/// The spec caps strings (export names included) at 4096 bytes.
pub const MAX_STRING: usize = 4096;

/// Why bytes from the peer were rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParseError {
    #[error("bad magic {0:#x}")]
    BadMagic(u64),
    #[error("client set unknown or unoffered flags {0:#x}")]
    BadClientFlags(u32),
    #[error("client did not set NBD_FLAG_C_FIXED_NEWSTYLE")]
    NotFixedNewstyle,
    #[error("option data malformed: {0}")]
    BadOptionData(&'static str),
}

/// The client's reply to the server's greeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    pub no_zeroes: bool,
}

/// Parse the 32-bit client flags. Unknown flags, or flags the server did
/// not offer, must drop the connection (spec); we also insist on fixed
/// newstyle since it is the only negotiation we speak.
pub fn parse_client_flags(b: &[u8; 4]) -> Result<ClientFlags, ParseError> {
    let f = u32::from_be_bytes(*b);
    if f & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(ParseError::BadClientFlags(f));
    }
    if f & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(ParseError::NotFixedNewstyle);
    }
    Ok(ClientFlags { no_zeroes: f & FLAG_C_NO_ZEROES != 0 })
}

/// The server's greeting: NBDMAGIC, IHAVEOPT, handshake flags.
pub fn encode_greeting() -> [u8; 18] {
    let mut b = [0u8; 18];
    b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// A client option header; `len` bytes of data follow it on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub len: u32,
}

pub fn parse_option_header(b: &[u8; OPTION_HEADER_SIZE]) -> Result<OptionHeader, ParseError> {
    let magic = u64::from_be_bytes(b[0..8].try_into().expect("8 bytes"));
    if magic != IHAVEOPT {
        return Err(ParseError::BadMagic(magic));
    }
    Ok(OptionHeader {
        option: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
        len: u32::from_be_bytes(b[12..16].try_into().expect("4 bytes")),
    })
}

/// Data of NBD_OPT_INFO / NBD_OPT_GO: an export name and the info types
/// the client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    pub name: &'a [u8],
    pub requests: Vec<u16>,
}

/// Parse NBD_OPT_INFO / NBD_OPT_GO data: u32 name length, name, u16 count,
/// count × u16 info types. The lengths must account for every byte exactly,
/// as the spec requires NBD_REP_ERR_INVALID otherwise.
pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest<'_>, ParseError> {
    let name_len = data
        .get(0..4)
        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
        .ok_or(ParseError::BadOptionData("short name length"))?;
    if name_len > MAX_STRING {
        return Err(ParseError::BadOptionData("name too long"));
    }
    // name_len <= 4096, so these additions cannot overflow.
    let name = data.get(4..4 + name_len).ok_or(ParseError::BadOptionData("name overruns option"))?;
    let rest = &data[4 + name_len..];
    let count = rest
        .get(0..2)
        .map(|b| u16::from_be_bytes(b.try_into().expect("2 bytes")) as usize)
        .ok_or(ParseError::BadOptionData("short request count"))?;
    let list = &rest[2..];
    if list.len() != count * 2 {
        return Err(ParseError::BadOptionData("request count does not match length"));
    }
    let requests = list.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
    Ok(InfoRequest { name, requests })
}

/// Option reply header; `len` bytes of data must follow.
pub fn encode_option_reply_header(option: u32, reply_type: u32, len: u32) -> [u8; OPTION_REPLY_HEADER_SIZE] {
    let mut b = [0u8; OPTION_REPLY_HEADER_SIZE];
    b[0..8].copy_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    b[8..12].copy_from_slice(&option.to_be_bytes());
    b[12..16].copy_from_slice(&reply_type.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// NBD_REP_INFO payload for NBD_INFO_EXPORT.
pub fn encode_info_export(size: u64, tflags: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size.to_be_bytes());
    b[10..12].copy_from_slice(&tflags.to_be_bytes());
    b
}

/// NBD_REP_INFO payload for NBD_INFO_BLOCK_SIZE.
pub fn encode_info_block_size(min: u32, preferred: u32, max: u32) -> [u8; 14] {
    let mut b = [0u8; 14];
    b[0..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&min.to_be_bytes());
    b[6..10].copy_from_slice(&preferred.to_be_bytes());
    b[10..14].copy_from_slice(&max.to_be_bytes());
    b
}

/// Reply to NBD_OPT_EXPORT_NAME: size, transmission flags and, unless the
/// client negotiated NO_ZEROES, 124 bytes of zeroes.
pub fn encode_export_name_reply(size: u64, tflags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(134);
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&tflags.to_be_bytes());
    if !no_zeroes {
        b.resize(134, 0);
    }
    b
}

/// A transmission request as it arrived; nothing beyond the magic is
/// validated yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub command: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

pub fn parse_request(b: &[u8; REQUEST_SIZE]) -> Result<Request, ParseError> {
    let magic = u32::from_be_bytes(b[0..4].try_into().expect("4 bytes"));
    if magic != REQUEST_MAGIC {
        return Err(ParseError::BadMagic(u64::from(magic)));
    }
    Ok(Request {
        flags: u16::from_be_bytes(b[4..6].try_into().expect("2 bytes")),
        command: u16::from_be_bytes(b[6..8].try_into().expect("2 bytes")),
        cookie: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
        offset: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
        len: u32::from_be_bytes(b[24..28].try_into().expect("4 bytes")),
    })
}

pub fn encode_request(r: &Request) -> [u8; REQUEST_SIZE] {
    let mut b = [0u8; REQUEST_SIZE];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&r.flags.to_be_bytes());
    b[6..8].copy_from_slice(&r.command.to_be_bytes());
    b[8..16].copy_from_slice(&r.cookie.to_be_bytes());
    b[16..24].copy_from_slice(&r.offset.to_be_bytes());
    b[24..28].copy_from_slice(&r.len.to_be_bytes());
    b
}

pub fn encode_simple_reply(error: u32, cookie: u64) -> [u8; SIMPLE_REPLY_SIZE] {
    let mut b = [0u8; SIMPLE_REPLY_SIZE];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// What the export looks like to [`check_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportLimits {
    pub size: u64,
    pub read_only: bool,
    /// Largest READ/WRITE payload accepted.
    pub max_request: u32,
}

/// Decide whether a well-formed request may be executed; `Err` carries the
/// NBD error to reply with. A WRITE's payload must still be consumed by the
/// caller whatever this says, or the stream loses its framing.
pub fn check_request(r: &Request, lim: &ExportLimits) -> Result<(), u32> {
    // DF needs structured replies and FAST_ZERO was never advertised, so a
    // client sending them (or bits we do not know) is outside the contract.
    if r.flags & !(CMD_FLAG_FUA | CMD_FLAG_NO_HOLE) != 0 {
        return Err(NBD_EINVAL);
    }
    let writes = match r.command {
        CMD_READ => false,
        CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES => true,
        // FLUSH carries no range; DISC is handled before checking.
        CMD_FLUSH | CMD_DISC => return Ok(()),
        _ => return Err(NBD_EINVAL),
    };
    if writes && lim.read_only {
        return Err(NBD_EPERM);
    }
    // TRIM and WRITE_ZEROES carry no payload, so the block-size maximum
    // does not bound them; only data-bearing commands are limited.
    if matches!(r.command, CMD_READ | CMD_WRITE) && r.len > lim.max_request {
        return Err(NBD_EINVAL);
    }
    match r.offset.checked_add(u64::from(r.len)) {
        Some(end) if end <= lim.size => Ok(()),
        _ => Err(NBD_EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip_and_magic() {
        let r = Request { flags: 1, command: CMD_WRITE, cookie: 0xdead_beef_0102_0304, offset: 4096, len: 512 };
        let b = encode_request(&r);
        assert_eq!(parse_request(&b), Ok(r));
        let mut bad = b;
        bad[0] ^= 1;
        assert!(matches!(parse_request(&bad), Err(ParseError::BadMagic(_))));
    }

    #[test]
    fn check_request_ranges() {
        let lim = ExportLimits { size: 1 << 20, read_only: false, max_request: 65536 };
        let mk = |command, offset, len| Request { flags: 0, command, cookie: 0, offset, len };
        assert_eq!(check_request(&mk(CMD_READ, 0, 4096), &lim), Ok(()));
        assert_eq!(check_request(&mk(CMD_READ, (1 << 20) - 1, 1), &lim), Ok(()));
        assert_eq!(check_request(&mk(CMD_READ, 1 << 20, 0), &lim), Ok(()));
        assert_eq!(check_request(&mk(CMD_READ, 1 << 20, 1), &lim), Err(NBD_EINVAL));
        assert_eq!(check_request(&mk(CMD_READ, u64::MAX, 2), &lim), Err(NBD_EINVAL));
        assert_eq!(check_request(&mk(CMD_READ, 0, 65537), &lim), Err(NBD_EINVAL));
        assert_eq!(check_request(&mk(CMD_TRIM, 0, 1 << 20), &lim), Ok(()));
        assert_eq!(check_request(&mk(CMD_CACHE, 0, 1), &lim), Err(NBD_EINVAL));
        assert_eq!(check_request(&mk(99, 0, 1), &lim), Err(NBD_EINVAL));
        let mut df = mk(CMD_READ, 0, 1);
        df.flags = CMD_FLAG_DF;
        assert_eq!(check_request(&df, &lim), Err(NBD_EINVAL));
        let ro = ExportLimits { read_only: true, ..lim };
        assert_eq!(check_request(&mk(CMD_WRITE, 0, 1), &ro), Err(NBD_EPERM));
        assert_eq!(check_request(&mk(CMD_WRITE_ZEROES, 0, 1), &ro), Err(NBD_EPERM));
        assert_eq!(check_request(&mk(CMD_READ, 0, 1), &ro), Ok(()));
    }

    #[test]
    fn info_request_lengths() {
        let mut d = Vec::new();
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(b"abc");
        d.extend_from_slice(&1u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        let r = parse_info_request(&d).unwrap();
        assert_eq!(r.name, b"abc");
        assert_eq!(r.requests, vec![INFO_BLOCK_SIZE]);
        // A trailing byte, a missing byte, and a name overrunning the data.
        let mut extra = d.clone();
        extra.push(0);
        assert!(parse_info_request(&extra).is_err());
        assert!(parse_info_request(&d[..d.len() - 1]).is_err());
        let mut over = d.clone();
        over[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_info_request(&over).is_err());
        assert!(parse_info_request(&[]).is_err());
    }

    #[test]
    fn client_flags() {
        assert_eq!(parse_client_flags(&3u32.to_be_bytes()), Ok(ClientFlags { no_zeroes: true }));
        assert_eq!(parse_client_flags(&1u32.to_be_bytes()), Ok(ClientFlags { no_zeroes: false }));
        assert!(parse_client_flags(&0u32.to_be_bytes()).is_err());
        assert!(parse_client_flags(&5u32.to_be_bytes()).is_err());
    }

    #[test]
    fn export_name_reply_zeroes() {
        assert_eq!(encode_export_name_reply(1, 1, false).len(), 134);
        assert_eq!(encode_export_name_reply(1, 1, true).len(), 10);
    }
}
