//! `SCIQuery`: what the program may ask about the adapter, the system,
//! segments and maps (docs/api.md, "Queries").

use super::*;

#[repr(C)]
pub(crate) struct QueryString {
    pub(crate) s: *mut c_char,
    pub(crate) length: c_uint,
}

#[repr(C)]
pub(crate) struct QueryAdapter {
    pub(crate) local_adapter_no: c_uint,
    pub(crate) port_no: c_uint,
    pub(crate) subcommand: c_uint,
    pub(crate) data: *mut c_void,
}

#[repr(C)]
pub(crate) struct QuerySystem {
    pub(crate) subcommand: c_uint,
    pub(crate) data: *mut c_void,
}

#[repr(C)]
pub(crate) struct QueryMap {
    pub(crate) map: Handle,
    pub(crate) subcommand: c_uint,
    pub(crate) data: c_uint,
}

pub(crate) unsafe fn fill_string(q: *mut QueryString, text: &str) -> Result<(), SciError> {
    if q.is_null() {
        return Err(SciError::IllegalParameter);
    }
    // SAFETY: non-NULL caller struct, read by value.
    let qs = unsafe { q.read_unaligned() };
    if qs.s.is_null() || qs.length == 0 {
        return Err(SciError::IllegalParameter);
    }
    let n = text.len().min(qs.length as usize - 1);
    // SAFETY: the caller promises `length` writable bytes at `s`; we write
    // n + 1 <= length of them.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), qs.s.cast::<u8>(), n);
        qs.s.add(n).write(0);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn SCIQuery(command: c_uint, data: *mut c_void, flags: c_uint, error: *mut SciErr) {
    // SAFETY: every pointer is NULL-checked before it is read or written.
    unsafe {
        report("SCIQuery", error, (), || {
            check_flags(flags, 0)?;
            match command {
                Q_VENDORID => fill_string(data.cast(), "vsci (software SISCI interconnect)"),
                Q_API => fill_string(data.cast(), concat!("vsci SISCI API ", env!("CARGO_PKG_VERSION"))),
                Q_ADAPTER => {
                    let q = data.cast::<QueryAdapter>();
                    if q.is_null() {
                        return Err(SciError::IllegalParameter);
                    }
                    let qa = q.read_unaligned();
                    check_adapter(qa.local_adapter_no)?;
                    let value: c_uint = match qa.subcommand {
                        // No alignment needed.
                        Q_ADAPTER_DMA_SIZE_ALIGNMENT | Q_ADAPTER_DMA_OFFSET_ALIGNMENT => {
                            vsci_client::DMA_ALIGN as c_uint
                        }
                        Q_ADAPTER_DMA_MTU => 1 << 20,
                        Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE | Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE => 4096,
                        Q_ADAPTER_NODEID => local_node_id()?,
                        Q_ADAPTER_SERIAL_NUMBER => 0x7653_0000 | local_node_id()?,
                        Q_ADAPTER_CARD_TYPE => ADAPTER_CARD_TYPE_VSCI,
                        Q_ADAPTER_NUMBER_OF_STREAMS => 1,
                        Q_ADAPTER_STREAM_BUFFER_SIZE => 4096,
                        Q_ADAPTER_CONFIGURED | Q_ADAPTER_FIRMWARE_OK => 1,
                        // What a pulled cable changes: the node's links
                        // (docs/cluster.md, "Failures").
                        Q_ADAPTER_LINK_OPERATIONAL | Q_ADAPTER_HW_LINK_STATUS_IS_OK => {
                            let c = open_client()?;
                            let up = c.link_operational();
                            c.close();
                            up? as c_uint
                        }
                        Q_ADAPTER_NUMBER | Q_ADAPTER_INSTANCE_NUMBER => 0,
                        Q_ADAPTER_CONNECTED_TO_SWITCH => 0,
                        Q_ADAPTER_ATT_PAGE_SIZE => 4096,
                        Q_ADAPTER_DMA_AVAILABLE => 1,
                        _ => return Err(SciError::IllegalQuery),
                    };
                    out(qa.data.cast::<c_uint>(), value)
                }
                Q_SYSTEM => {
                    let q = data.cast::<QuerySystem>();
                    if q.is_null() {
                        return Err(SciError::IllegalParameter);
                    }
                    let qs = q.read_unaligned();
                    let value: c_uint = match qs.subcommand {
                        Q_SYSTEM_HOSTBRIDGE => 1, // unknown
                        // Stores are posted.
                        Q_SYSTEM_WRITE_POSTING_ENABLED | Q_SYSTEM_WRITE_COMBINING_ENABLED => 1,
                        _ => return Err(SciError::IllegalQuery),
                    };
                    out(qs.data.cast::<c_uint>(), value)
                }
                Q_MAP => {
                    let q = data.cast::<QueryMap>();
                    if q.is_null() {
                        return Err(SciError::IllegalParameter);
                    }
                    let qm = q.read_unaligned();
                    let m = handles::map(h(qm.map))?;
                    match qm.subcommand {
                        Q_MAP_MAPPED_TO_LOCAL_TARGET => {
                            // Every map of a vsci segment on this node is local memory.
                            let local = match &m.target {
                                MapTarget::Local(_) => true,
                                MapTarget::Remote(r) => r.node_id == r.client().node_id(),
                            };
                            let field = std::ptr::addr_of_mut!((*q).data);
                            field.write_unaligned(local as c_uint);
                            Ok(())
                        }
                        _ => Err(SciError::IllegalQuery),
                    }
                }
                Q_LOCAL_SEGMENT | Q_REMOTE_SEGMENT => Err(SciError::IllegalQuery),
                _ => Err(SciError::IllegalQuery),
            }
        })
    }
}
