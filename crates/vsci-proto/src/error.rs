//! SISCI error codes (`sci_error_t`), with Dolphin's numeric values.

use serde::{Deserialize, Serialize};

macro_rules! sci_errors {
    ($( $name:ident = $value:expr, $c:literal, $text:literal; )*) => {
        /// A SISCI error code. `Ok` is included because the C API reports
        /// success through the same out-parameter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[repr(u32)]
        pub enum SciError { $( $name = $value, )* }

        impl SciError {
            /// Every code, in table order.
            pub const ALL: &'static [SciError] = &[ $( SciError::$name, )* ];

            /// The C name, e.g. `SCI_ERR_BUSY`.
            pub fn c_name(self) -> &'static str {
                match self { $( SciError::$name => $c, )* }
            }

            /// A one-line description for `SCIGetErrorString`.
            pub fn description(self) -> &'static str {
                match self { $( SciError::$name => $text, )* }
            }

            /// Decode a raw value; `None` for values that are not SISCI codes.
            pub fn from_raw(v: u32) -> Option<SciError> {
                match v { $( x if x == $value => Some(SciError::$name), )* _ => None }
            }
        }
    };
}

sci_errors! {
    Ok = 0x000, "SCI_ERR_OK", "Success";
    Busy = 0x4000_0900, "SCI_ERR_BUSY", "Resource is busy (still in use)";
    FlagNotImplemented = 0x4000_0901, "SCI_ERR_FLAG_NOT_IMPLEMENTED", "Flag is valid but not implemented by vsci";
    IllegalFlag = 0x4000_0902, "SCI_ERR_ILLEGAL_FLAG", "Illegal flag for this call";
    Nospc = 0x4000_0904, "SCI_ERR_NOSPC", "Out of resources (memory or node limit)";
    ApiNospc = 0x4000_0905, "SCI_ERR_API_NOSPC", "Out of library resources";
    HwNospc = 0x4000_0906, "SCI_ERR_HW_NOSPC", "Out of adapter resources";
    NotImplemented = 0x4000_0907, "SCI_ERR_NOT_IMPLEMENTED", "Function not implemented";
    IllegalAdapterno = 0x4000_0908, "SCI_ERR_ILLEGAL_ADAPTERNO", "Illegal adapter number";
    NoSuchAdapterno = 0x4000_0909, "SCI_ERR_NO_SUCH_ADAPTERNO", "No such adapter (vsci has adapter 0 only)";
    Timeout = 0x4000_090A, "SCI_ERR_TIMEOUT", "Operation timed out";
    OutOfRange = 0x4000_090B, "SCI_ERR_OUT_OF_RANGE", "Offset or size out of range";
    NoSuchSegment = 0x4000_090C, "SCI_ERR_NO_SUCH_SEGMENT", "No such segment";
    IllegalNodeid = 0x4000_090D, "SCI_ERR_ILLEGAL_NODEID", "Illegal node id";
    ConnectionRefused = 0x4000_090E, "SCI_ERR_CONNECTION_REFUSED", "Connection refused (not available)";
    SegmentNotConnected = 0x4000_090F, "SCI_ERR_SEGMENT_NOT_CONNECTED", "Segment is not connected";
    SizeAlignment = 0x4000_0910, "SCI_ERR_SIZE_ALIGNMENT", "Size is not correctly aligned";
    OffsetAlignment = 0x4000_0911, "SCI_ERR_OFFSET_ALIGNMENT", "Offset is not correctly aligned";
    IllegalParameter = 0x4000_0912, "SCI_ERR_ILLEGAL_PARAMETER", "Illegal parameter (bad handle or argument)";
    MaxEntries = 0x4000_0913, "SCI_ERR_MAX_ENTRIES", "Maximum number of entries reached";
    SegmentNotPrepared = 0x4000_0914, "SCI_ERR_SEGMENT_NOT_PREPARED", "Segment is not prepared";
    IllegalAddress = 0x4000_0915, "SCI_ERR_ILLEGAL_ADDRESS", "Illegal address";
    IllegalOperation = 0x4000_0916, "SCI_ERR_ILLEGAL_OPERATION", "Illegal operation in this state";
    IllegalQuery = 0x4000_0917, "SCI_ERR_ILLEGAL_QUERY", "Illegal query";
    SegmentidUsed = 0x4000_0918, "SCI_ERR_SEGMENTID_USED", "Segment id already used on this node";
    System = 0x4000_0919, "SCI_ERR_SYSTEM", "System call failed";
    Cancelled = 0x4000_091A, "SCI_ERR_CANCELLED", "Operation cancelled";
    NotConnected = 0x4000_091B, "SCI_ERR_NOT_CONNECTED", "Not connected";
    NotAvailable = 0x4000_091C, "SCI_ERR_NOT_AVAILABLE", "Not available";
    InconsistentVersions = 0x4000_091D, "SCI_ERR_INCONSISTENT_VERSIONS", "Library and daemon versions differ";
    CondIntRaceProblem = 0x4000_091E, "SCI_ERR_COND_INT_RACE_PROBLEM", "Conditional interrupt race";
    Overflow = 0x4000_091F, "SCI_ERR_OVERFLOW", "Overflow";
    NotInitialized = 0x4000_0920, "SCI_ERR_NOT_INITIALIZED", "Library not initialized";
    Access = 0x4000_0921, "SCI_ERR_ACCESS", "Access denied";
    NoSuchNodeid = 0x4000_0A00, "SCI_ERR_NO_SUCH_NODEID", "No such node id";
    NodeNotResponding = 0x4000_0A02, "SCI_ERR_NODE_NOT_RESPONDING", "Node does not respond";
    NoRemoteLinkAccess = 0x4000_0A04, "SCI_ERR_NO_REMOTE_LINK_ACCESS", "Remote link is not operational";
    NoLinkAccess = 0x4000_0A05, "SCI_ERR_NO_LINK_ACCESS", "Local link is not operational (vscid unreachable)";
    TransferFailed = 0x4000_0A06, "SCI_ERR_TRANSFER_FAILED", "Transfer failed";
}

impl std::fmt::Display for SciError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.c_name(), self.description())
    }
}

impl std::error::Error for SciError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_values_round_trip() {
        for &e in SciError::ALL {
            assert_eq!(SciError::from_raw(e as u32), Some(e));
            assert!(e == SciError::Ok || (e as u32) & 0x4000_0000 != 0);
        }
        assert_eq!(SciError::from_raw(0x1234), None);
    }
}
