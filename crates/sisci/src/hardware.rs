//! The map pointer, and calls that need hardware vsci does not have
//! (docs/api.md, "Calls that need hardware").

use super::*;

#[no_mangle]
pub extern "C" fn SCIGetMapPointer(map: Handle) -> *mut c_void {
    guard::value("SCIGetMapPointer", std::ptr::null_mut(), || {
        handles::map(h(map)).map(|m| m.addr.cast::<c_void>()).unwrap_or(std::ptr::null_mut())
    })
}

/// `sci_address_t`: a node id and a 48-bit address in its SCI space.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SciAddress {
    pub(crate) node_id: u16,
    pub(crate) offs_hi: u16,
    pub(crate) offs_lo: u32,
}

// CSR registers, physical memory by bus address, raw SCI address space:
// each names adapter hardware (configuration registers, PCI bus addresses)
// that a software interconnect does not have. Declared in sisci_api.h so
// programs that have such a path build and link; they are told plainly at
// run time.

#[no_mangle]
pub unsafe extern "C" fn SCIGetCSRRegister(
    _sd: Handle,
    _adapter: c_uint,
    _node: c_uint,
    _off: c_uint,
    _flags: c_uint,
    error: *mut SciErr,
) -> c_uint {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIGetCSRRegister", error, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn SCISetCSRRegister(
    _sd: Handle,
    _adapter: c_uint,
    _node: c_uint,
    _off: c_uint,
    _value: c_uint,
    _flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCISetCSRRegister", error, ()) }
}

#[no_mangle]
pub unsafe extern "C" fn SCIGetLocalCSR(
    _sd: Handle,
    _adapter: c_uint,
    _off: c_uint,
    _flags: c_uint,
    error: *mut SciErr,
) -> c_uint {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIGetLocalCSR", error, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn SCISetLocalCSR(
    _sd: Handle,
    _adapter: c_uint,
    _off: c_uint,
    _value: c_uint,
    _flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCISetLocalCSR", error, ()) }
}

#[no_mangle]
pub unsafe extern "C" fn SCIAttachPhysicalMemory(
    _ioaddress: c_uint,
    _address: *mut c_void,
    _bus_no: c_uint,
    _size: usize,
    _segment: Handle,
    _flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIAttachPhysicalMemory", error, ()) }
}

#[no_mangle]
pub unsafe extern "C" fn SCIConnectSCISpace(
    _sd: Handle,
    _adapter: c_uint,
    _segment: *mut Handle,
    _address: SciAddress,
    _size: c_uint,
    _flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `set`.
    unsafe { crate::not_implemented("SCIConnectSCISpace", error, ()) }
}
