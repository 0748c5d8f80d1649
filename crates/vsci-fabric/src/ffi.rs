//! Declarations of the C shim (csrc/shim.c) and the few libfabric constants
//! we use. Values are copied from rdma/fabric.h and rdma/fi_errno.h of
//! libfabric 1.17; they are part of libfabric's stable ABI.

use std::ffi::{c_char, c_int, c_void};

pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_READ: u64 = 1 << 8;
pub const FI_WRITE: u64 = 1 << 9;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_REMOTE_READ: u64 = 1 << 12;
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
pub const FI_COMPLETION: u64 = 1 << 24;
pub const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
pub const FI_SOURCE: u64 = 1 << 57;

pub const FI_MR_LOCAL: u64 = 1 << 2;
pub const FI_MR_VIRT_ADDR: u64 = 1 << 4;
pub const FI_MR_ALLOCATED: u64 = 1 << 5;
pub const FI_MR_PROV_KEY: u64 = 1 << 6;
pub const FI_MR_ENDPOINT: u64 = 1 << 9;

pub const FI_ORDER_RAW: u64 = 1 << 1;
pub const FI_ORDER_RMA_RAW: u64 = 1 << 33;
pub const FI_ORDER_WAW: u64 = 1 << 4;
pub const FI_ORDER_RMA_WAW: u64 = 1 << 35;
pub const FI_ORDER_SAW: u64 = 1 << 7;

pub const FI_PROGRESS_AUTO: c_int = 1;

/// Largest iov count the shim's vf_writev accepts.
pub const VF_MAX_IOV: usize = 16;

pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;

pub const FI_EAGAIN: isize = libc::EAGAIN as isize;
pub const FI_ENOKEY: c_int = libc::ENOKEY;
pub const FI_EAVAIL: isize = 259;

#[repr(C)]
pub struct VfCtx {
    _opaque: [u8; 0],
}

#[repr(C)]
pub struct FidMr {
    _opaque: [u8; 0],
}

#[repr(C)]
pub struct VfHints {
    pub prov_name: *const c_char,
    pub node: *const c_char,
    pub caps: u64,
    pub tx_msg_order: u64,
    pub tx_op_flags: u64,
    pub mr_mode: u64,
    pub want_cq_wait: c_int,
}

#[repr(C)]
#[derive(Debug, Clone)]
pub struct VfAttrs {
    pub caps: u64,
    pub mr_mode: u64,
    pub tx_msg_order: u64,
    pub tx_op_flags: u64,
    pub mr_key_size: u64,
    pub inject_size: u64,
    pub max_msg_size: u64,
    pub iov_limit: u64,
    pub max_order_waw_size: u64,
    pub data_progress: c_int,
    pub cq_wait: c_int,
    pub prov_name: [c_char; 64],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct VfComp {
    pub context: *mut c_void,
    pub flags: u64,
    pub len: u64,
    pub src: u64,
}

extern "C" {
    /// Why libfabric could not be opened (the shim opens it at first
    /// use), or null when it is usable.
    pub fn vf_load_failure() -> *const c_char;
    pub fn vf_open(h: *const VfHints, out: *mut *mut VfCtx, a: *mut VfAttrs) -> c_int;
    pub fn vf_close(c: *mut VfCtx, extra_mr: *mut FidMr);
    pub fn vf_getname(c: *mut VfCtx, buf: *mut c_void, len: *mut usize) -> c_int;
    pub fn vf_av_insert(c: *mut VfCtx, addr: *const c_void, fi_addr: *mut u64) -> c_int;
    pub fn vf_av_remove(c: *mut VfCtx, fi_addr: u64) -> c_int;
    pub fn vf_mr_reg(
        c: *mut VfCtx,
        buf: *mut c_void,
        len: usize,
        access: u64,
        requested_key: u64,
        mr: *mut *mut FidMr,
        key: *mut u64,
        desc: *mut *mut c_void,
    ) -> c_int;
    pub fn vf_mr_close(mr: *mut FidMr) -> c_int;
    pub fn vf_writev(
        c: *mut VfCtx,
        iov: *const libc::iovec,
        desc: *mut *mut c_void,
        raddr: *const u64,
        count: usize,
        dest: u64,
        key: u64,
        context: *mut c_void,
        flags: u64,
    ) -> isize;
    pub fn vf_readmsg(
        c: *mut VfCtx,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        raddr: u64,
        key: u64,
        context: *mut c_void,
        flags: u64,
    ) -> isize;
    pub fn vf_send(
        c: *mut VfCtx,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        context: *mut c_void,
    ) -> isize;
    pub fn vf_recv(c: *mut VfCtx, buf: *mut c_void, len: usize, desc: *mut c_void, context: *mut c_void) -> isize;
    pub fn vf_cq_read(c: *mut VfCtx, out: *mut VfComp, count: usize) -> isize;
    pub fn vf_cq_sread(c: *mut VfCtx, out: *mut VfComp, count: usize, timeout_ms: c_int) -> isize;
    pub fn vf_cq_readerr(
        c: *mut VfCtx,
        context: *mut *mut c_void,
        err: *mut c_int,
        prov_errno: *mut c_int,
        msg: *mut c_char,
        msglen: usize,
    ) -> isize;
    pub fn vf_strerror(err: c_int) -> *const c_char;
    pub fn vf_cq_wait_fd(c: *mut VfCtx) -> c_int;
    pub fn vf_trywait(c: *mut VfCtx) -> c_int;
}
