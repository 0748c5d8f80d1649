//! Emulating the store that trapped, so that a trapped page need not be
//! made writable (and fetched) for a program that stores a word now and
//! then: the handler decodes the faulting instruction, takes the value it
//! would have stored, and skips it. The caller puts the bytes where they
//! belong (the shadow, and the owner).
//!
//! Emulated: plain `MOV` of a general register or an immediate to memory
//! (1, 2, 4 or 8 bytes) and `MOVNTI` — how programs store flags, counters,
//! sequence numbers and mailbox words — and the unmasked SSE, AVX and
//! AVX-512 moves of a whole vector register or its low 4 or 8 bytes to
//! memory (`MOVUPS`/`MOVDQU`/`VMOVDQU64` and kin, non-temporal ones too,
//! `MOVQ`/`MOVD`/`MOVSS`/`MOVSD`/`MOVLPS`), which is what `memcpy` stores a
//! small message with. Vector registers are read from the XSAVE image the
//! kernel put in the signal frame. Forward `REP MOVSB` and `REP STOSB`
//! (glibc's `memcpy` of 2 KiB to 1 MiB, `memset`) are decoded as what is
//! left of the whole copy ([`decode_rep`]). Anything else — masked,
//! scattered or compressing stores, stores of a register's upper half,
//! other string instructions, atomics, segment overrides, single stores
//! that straddle a page —
//! is left to the caller's other path, so a wrong guess is never possible:
//! what is not understood exactly is not emulated.

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};

/// A store decoded from the faulting instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    /// First byte stored.
    pub addr: usize,
    /// The bytes, `len` of them (at most 64: one AVX-512 register).
    pub bytes: [u8; 64],
    pub len: usize,
    /// Length of the instruction, to skip it.
    pub insn_len: usize,
}

/// The registers the decoder needs: general registers by their 64-bit
/// name, vector registers by number, and the instruction pointer.
pub trait Registers {
    fn gpr(&self, full: Register) -> Option<u64>;
    /// The low `len` bytes (16, 32 or 64) of vector register `n` (xmm/ymm/
    /// zmm `n`, 0-31), or `None` if the saved state does not hold them.
    fn vector(&self, n: usize, len: usize) -> Option<[u8; 64]>;
    fn rip(&self) -> u64;
    fn eflags(&self) -> u64;
}

/// A `REP MOVSB` or `REP STOSB` (how glibc's `memcpy` and `memset` copy
/// 2 KiB to 1 MiB) whose next store faulted: what is left of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepString {
    /// Where the next byte goes (RDI).
    pub dst: usize,
    /// Bytes left (RCX).
    pub count: usize,
    /// Where the next byte comes from (RSI) for `MOVSB`; `None` for
    /// `STOSB`, which stores `value` (AL) every time.
    pub src: Option<usize>,
    pub value: u8,
    /// Length of the instruction, to skip it once `count` is done.
    pub insn_len: usize,
    /// `src` is the library's own copy of the program's source bytes, at
    /// least `count` of them (a small `memcpy` handed over by
    /// `trap::copy_in`): a plain load reads it. Otherwise the source is the
    /// program's memory, read through the kernel (it may fault).
    pub src_staged: bool,
}

/// Decode a `REP MOVSB` / `REP STOSB` at the instruction pointer that
/// faulted on `fault_addr` with its registers: forward (DF clear), 64-bit
/// addressing, no segment override, `fault_addr` among the bytes left.
pub fn decode_rep(code: &[u8], regs: &dyn Registers, fault_addr: usize) -> Option<RepString> {
    let mut d = Decoder::with_ip(64, code, regs.rip(), DecoderOptions::NONE);
    let insn = d.decode();
    if insn.is_invalid() || !insn.has_rep_prefix() || insn.segment_prefix() != Register::None {
        return None;
    }
    let movs = match insn.mnemonic() {
        Mnemonic::Movsb => true,
        Mnemonic::Stosb => false,
        _ => return None,
    };
    // 0x67 (32-bit addresses) would use ECX/EDI/ESI.
    if insn.op0_kind() != OpKind::MemoryESRDI || (movs && insn.op1_kind() != OpKind::MemorySegRSI) {
        return None;
    }
    if regs.eflags() & (1 << 10) != 0 {
        return None; // DF set: the copy runs downwards
    }
    let count = regs.gpr(Register::RCX)? as usize;
    let dst = regs.gpr(Register::RDI)? as usize;
    if count == 0 || fault_addr < dst || fault_addr - dst >= count || dst.checked_add(count).is_none() {
        return None;
    }
    let src = if movs { Some(regs.gpr(Register::RSI)? as usize) } else { None };
    let value = regs.gpr(Register::RAX)? as u8;
    Some(RepString { dst, count, src, value, insn_len: insn.len(), src_staged: false })
}

/// Stores of a general register that are plain moves.
const GPR_STORES: [Mnemonic; 2] = [Mnemonic::Mov, Mnemonic::Movnti];

/// Moves of a vector register (or its low 4 or 8 bytes) to memory with no
/// other effect. `MOVHPS`/`MOVHPD` (upper half), masked, scatter and
/// compress stores and lane extracts are deliberately not here.
const VECTOR_STORES: [Mnemonic; 36] = [
    Mnemonic::Movups,
    Mnemonic::Movaps,
    Mnemonic::Movupd,
    Mnemonic::Movapd,
    Mnemonic::Movdqu,
    Mnemonic::Movdqa,
    Mnemonic::Movntdq,
    Mnemonic::Movntps,
    Mnemonic::Movntpd,
    Mnemonic::Movq,
    Mnemonic::Movd,
    Mnemonic::Movss,
    Mnemonic::Movsd,
    Mnemonic::Movlps,
    Mnemonic::Movlpd,
    Mnemonic::Vmovups,
    Mnemonic::Vmovaps,
    Mnemonic::Vmovupd,
    Mnemonic::Vmovapd,
    Mnemonic::Vmovdqu,
    Mnemonic::Vmovdqa,
    Mnemonic::Vmovdqu8,
    Mnemonic::Vmovdqu16,
    Mnemonic::Vmovdqu32,
    Mnemonic::Vmovdqu64,
    Mnemonic::Vmovdqa32,
    Mnemonic::Vmovdqa64,
    Mnemonic::Vmovntdq,
    Mnemonic::Vmovntps,
    Mnemonic::Vmovntpd,
    Mnemonic::Vmovq,
    Mnemonic::Vmovd,
    Mnemonic::Vmovss,
    Mnemonic::Vmovsd,
    Mnemonic::Vmovlps,
    Mnemonic::Vmovlpd,
];

/// Decode the store at the instruction pointer that faulted on `fault_addr`
/// with the bytes `code` (at least the instruction; 15 bytes read at `rip`
/// always hold it). `None` unless it is a store this module emulates whose
/// bytes lie in one page of `page` bytes and contain `fault_addr`.
pub fn decode_store(code: &[u8], regs: &dyn Registers, fault_addr: usize, page: usize) -> Option<Store> {
    let st = decode_store_at(code, regs, regs.rip(), page)?;
    (fault_addr >= st.addr && fault_addr < st.addr + st.len).then_some(st)
}

/// Decode the instruction at `ip`, whose bytes `code` holds, as a store
/// this module emulates whose bytes lie in one page of `page` bytes, with
/// the registers `regs`: the faulting instruction (`decode_store`) or one
/// that follows it with only such stores in between, which change no
/// register (`vsci_trap::trap::Fault::decode_store_after`).
pub fn decode_store_at(code: &[u8], regs: &dyn Registers, ip: u64, page: usize) -> Option<Store> {
    let mut d = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let insn = d.decode();
    if insn.is_invalid() || insn.op0_kind() != OpKind::Memory || insn.op_count() != 2 {
        return None;
    }
    let gpr = GPR_STORES.contains(&insn.mnemonic());
    if !gpr && !VECTOR_STORES.contains(&insn.mnemonic()) {
        return None;
    }
    if insn.segment_prefix() != Register::None || insn.op_mask() != Register::None {
        return None;
    }
    let len = insn.memory_size().size();
    if !matches!(len, 1 | 2 | 4 | 8 | 16 | 32 | 64) {
        return None;
    }
    // Effective address: base + index * scale + displacement (RIP-relative
    // displacements are already absolute with the decoder's ip set).
    let mut ea = insn.memory_displacement64();
    if insn.memory_base() != Register::None && insn.memory_base() != Register::RIP {
        ea = ea.wrapping_add(reg_value(regs, insn.memory_base())?);
    }
    if insn.memory_index() != Register::None {
        ea = ea.wrapping_add(reg_value(regs, insn.memory_index())?.wrapping_mul(insn.memory_index_scale() as u64));
    }
    let ea = ea as usize;
    let end = ea.checked_add(len)?;
    if ea / page != (end - 1) / page {
        return None;
    }
    let mut bytes = [0u8; 64];
    match insn.op1_kind() {
        OpKind::Register if gpr && len <= 8 => {
            bytes[..8].copy_from_slice(&reg_value(regs, insn.op1_register())?.to_le_bytes())
        }
        OpKind::Immediate8
        | OpKind::Immediate16
        | OpKind::Immediate32
        | OpKind::Immediate8to64
        | OpKind::Immediate32to64
            if insn.mnemonic() == Mnemonic::Mov =>
        {
            bytes[..8].copy_from_slice(&insn.immediate(1).to_le_bytes())
        }
        OpKind::Register if !gpr => {
            let r = insn.op1_register();
            let width = if r.is_xmm() {
                16
            } else if r.is_ymm() {
                32
            } else if r.is_zmm() {
                64
            } else {
                return None; // MMX and the like
            };
            // The whole register, or its low 4 or 8 bytes (MOVQ, MOVSS...).
            if len > width {
                return None;
            }
            bytes = regs.vector(r.number(), width)?;
        }
        _ => return None,
    }
    Some(Store { addr: ea, bytes, len, insn_len: insn.len() })
}

/// The value of a general register of any size, as the instruction sees it.
fn reg_value(regs: &dyn Registers, r: Register) -> Option<u64> {
    if !r.is_gpr() {
        return None;
    }
    let full = regs.gpr(r.full_register())?;
    Some(match r {
        Register::AH | Register::CH | Register::DH | Register::BH => (full >> 8) & 0xff,
        _ => match r.size() {
            1 => full & 0xff,
            2 => full & 0xffff,
            4 => full & 0xffff_ffff,
            _ => full,
        },
    })
}

/// The registers of a signal's `ucontext_t`.
#[cfg(target_arch = "x86_64")]
pub struct Ucontext(pub *mut libc::c_void);

#[cfg(target_arch = "x86_64")]
impl Ucontext {
    fn gregs(&self) -> &[libc::greg_t; 23] {
        // SAFETY: for an SA_SIGINFO handler the kernel's ucontext_t is valid
        // for the handler's duration; we only read it here.
        unsafe { &(*(self.0 as *const libc::ucontext_t)).uc_mcontext.gregs }
    }

    /// Skip `n` bytes of instructions: the thread resumes after the store.
    ///
    /// # Safety
    /// Only inside the signal handler this context belongs to, and only
    /// after the store's effect has been made in its place.
    pub unsafe fn skip(&self, n: usize) {
        // SAFETY: the caller's contract; the kernel restores RIP from here.
        unsafe {
            let g = &mut (*(self.0 as *mut libc::ucontext_t)).uc_mcontext.gregs;
            g[libc::REG_RIP as usize] = g[libc::REG_RIP as usize].wrapping_add(n as i64);
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Registers for Ucontext {
    fn gpr(&self, full: Register) -> Option<u64> {
        let i = match full {
            Register::RAX => libc::REG_RAX,
            Register::RBX => libc::REG_RBX,
            Register::RCX => libc::REG_RCX,
            Register::RDX => libc::REG_RDX,
            Register::RSI => libc::REG_RSI,
            Register::RDI => libc::REG_RDI,
            Register::RBP => libc::REG_RBP,
            Register::RSP => libc::REG_RSP,
            Register::R8 => libc::REG_R8,
            Register::R9 => libc::REG_R9,
            Register::R10 => libc::REG_R10,
            Register::R11 => libc::REG_R11,
            Register::R12 => libc::REG_R12,
            Register::R13 => libc::REG_R13,
            Register::R14 => libc::REG_R14,
            Register::R15 => libc::REG_R15,
            _ => return None,
        };
        Some(self.gregs()[i as usize] as u64)
    }

    fn vector(&self, n: usize, len: usize) -> Option<[u8; 64]> {
        // SAFETY: as in `gregs`; `fpregs` points into the same signal frame
        // (or is null when the thread had no FPU state saved).
        let fx = unsafe { (*(self.0 as *const libc::ucontext_t)).uc_mcontext.fpregs } as *const u8;
        if fx.is_null() {
            return None;
        }
        // SAFETY: the legacy FXSAVE area (512 bytes) is always there when
        // fpregs is set; the XSAVE part is read only after its marker says
        // the kernel wrote one (and only within the size it gives).
        unsafe { xsave_vector(fx, n, len) }
    }

    fn rip(&self) -> u64 {
        self.gregs()[libc::REG_RIP as usize] as u64
    }

    fn eflags(&self) -> u64 {
        self.gregs()[libc::REG_EFL as usize] as u64
    }
}

#[cfg(target_arch = "x86_64")]
impl Ucontext {
    /// Account `done` bytes of `r` as executed: RDI (and RSI for `MOVSB`)
    /// move on, RCX counts down, and once nothing is left the thread
    /// resumes after the instruction (otherwise it goes on with the rest).
    ///
    /// # Safety
    /// Only inside the signal handler this context belongs to, after those
    /// bytes' effect has been made in their place.
    pub unsafe fn advance_rep(&self, r: &RepString, done: usize) {
        // SAFETY: the caller's contract; the kernel restores the registers
        // from here.
        unsafe {
            let g = &mut (*(self.0 as *mut libc::ucontext_t)).uc_mcontext.gregs;
            let done = done.min(r.count);
            g[libc::REG_RDI as usize] = (r.dst + done) as i64;
            if let Some(src) = r.src {
                g[libc::REG_RSI as usize] = (src + done) as i64;
            }
            g[libc::REG_RCX as usize] = (r.count - done) as i64;
            if done == r.count {
                g[libc::REG_RIP as usize] = g[libc::REG_RIP as usize].wrapping_add(r.insn_len as i64);
            }
        }
    }
}

/// Marker of an XSAVE image in a signal frame (`FP_XSTATE_MAGIC1`, at
/// byte 464 of the FXSAVE area: `struct _fpx_sw_bytes`).
#[cfg(target_arch = "x86_64")]
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;

/// Where XSAVE state component `c` lies in a standard-format image (the
/// format of signal frames): CPUID leaf 0xD, sub-leaf `c`, EAX = size,
/// EBX = offset.
#[cfg(target_arch = "x86_64")]
fn xsave_component(c: u32) -> (usize, usize) {
    // SAFETY: CPUID leaf 0xD exists on every CPU with XSAVE, the only
    // case this is called in (the frame's marker says XSAVE was used).
    // (`__cpuid_count` became a safe function in newer Rust.)
    #[allow(unused_unsafe)]
    let r = unsafe { std::arch::x86_64::__cpuid_count(0xd, c) };
    (r.ebx as usize, r.eax as usize)
}

/// Bytes `0..len` of vector register `n` from the FPU image at `fx`.
/// Components the image marks as in their initial state are zero.
///
/// # Safety
/// `fx` must point to the FPU state of a signal frame (512 bytes of
/// FXSAVE, then an XSAVE header and components when the marker is set).
#[cfg(target_arch = "x86_64")]
unsafe fn xsave_vector(fx: *const u8, n: usize, len: usize) -> Option<[u8; 64]> {
    let rd = |off: usize, buf: &mut [u8]| {
        // SAFETY: the caller's contract, and every `off` below was checked
        // against the image's size.
        unsafe { std::ptr::copy_nonoverlapping(fx.add(off), buf.as_mut_ptr(), buf.len()) }
    };
    let mut sw = [0u8; 16];
    rd(464, &mut sw);
    let xsave = u32::from_le_bytes(sw[0..4].try_into().ok()?) == FP_XSTATE_MAGIC1;
    let xfeatures = u64::from_le_bytes(sw[8..16].try_into().ok()?);
    let xstate_size = u32::from_le_bytes(sw[4..8].try_into().ok()?) as usize;
    let mut out = [0u8; 64];
    if !xsave {
        // Plain FXSAVE: xmm0-15 only.
        if n >= 16 || len > 16 {
            return None;
        }
        rd(160 + 16 * n, &mut out[..16]);
        return Some(out);
    }
    let mut hdr = [0u8; 8];
    rd(512, &mut hdr);
    let xstate_bv = u64::from_le_bytes(hdr);
    // Copy `buf.len()` bytes of component `c` at `at` into `buf`: zero if
    // the component is in its initial state, None if the image lacks it.
    let part = |c: u32, at: usize, buf: &mut [u8]| -> Option<()> {
        if xfeatures & (1 << c) == 0 {
            return None;
        }
        if xstate_bv & (1 << c) == 0 {
            buf.fill(0);
            return Some(());
        }
        let off = if c == 1 { 160 } else { xsave_component(c).0 };
        if off == 0 || off + at + buf.len() > xstate_size {
            return None;
        }
        rd(off + at, buf);
        Some(())
    };
    if n < 16 {
        part(1, 16 * n, &mut out[..16])?; // SSE: xmm0-15
        if len > 16 {
            part(2, 16 * n, &mut out[16..32])?; // AVX: ymm0-15 bits 128-255
        }
        if len > 32 {
            part(6, 32 * n, &mut out[32..64])?; // ZMM_Hi256: zmm0-15 bits 256-511
        }
    } else if n < 32 {
        part(7, 64 * (n - 16), &mut out[..len])?; // Hi16_ZMM: zmm16-31 whole
    } else {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Regs([u64; 16], u64);

    impl Registers for Regs {
        fn gpr(&self, full: Register) -> Option<u64> {
            let order = [
                Register::RAX,
                Register::RCX,
                Register::RDX,
                Register::RBX,
                Register::RSP,
                Register::RBP,
                Register::RSI,
                Register::RDI,
                Register::R8,
                Register::R9,
                Register::R10,
                Register::R11,
                Register::R12,
                Register::R13,
                Register::R14,
                Register::R15,
            ];
            order.iter().position(|r| *r == full).map(|i| self.0[i])
        }
        fn vector(&self, n: usize, len: usize) -> Option<[u8; 64]> {
            // Register n holds bytes n, n+1, ... (its low `len` of them).
            let mut v = [0u8; 64];
            for (i, b) in v.iter_mut().enumerate().take(len) {
                *b = (n + i) as u8;
            }
            Some(v)
        }
        fn rip(&self) -> u64 {
            self.1
        }
        fn eflags(&self) -> u64 {
            0x202
        }
    }

    fn regs() -> Regs {
        let mut r = [0u64; 16];
        r[0] = 0x1122_3344_5566_7788; // rax
        r[3] = 0x0000_0000_0001_0000; // rbx: a base address
        r[1] = 3; // rcx: an index
        r[8] = 0xdead_beef_cafe_f00d; // r8
        Regs(r, 0x40_0000)
    }

    fn wide(v: u64) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(&v.to_le_bytes());
        b
    }

    #[test]
    fn plain_stores_are_decoded() {
        let r = regs();
        // mov [rbx], eax
        assert_eq!(
            decode_store(&[0x89, 0x03], &r, 0x1_0000, 4096),
            Some(Store { addr: 0x1_0000, bytes: wide(0x5566_7788), len: 4, insn_len: 2 })
        );
        // mov [rbx+rcx*8+0x10], r8
        let s = decode_store(&[0x4c, 0x89, 0x44, 0xcb, 0x10], &r, 0x1_0028, 4096).unwrap();
        assert_eq!(
            (s.addr, s.len, s.insn_len, u64::from_le_bytes(s.bytes[..8].try_into().unwrap())),
            (0x1_0028, 8, 5, 0xdead_beef_cafe_f00d)
        );
        // mov byte [rbx+1], ah
        let s = decode_store(&[0x88, 0x63, 0x01], &r, 0x1_0001, 4096).unwrap();
        assert_eq!((s.len, s.bytes[0]), (1, 0x77));
        // mov dword [rbx+4], 0x0b (immediate)
        let s = decode_store(&[0xc7, 0x43, 0x04, 0x0b, 0, 0, 0], &r, 0x1_0004, 4096).unwrap();
        assert_eq!((s.addr, s.len, s.insn_len, s.bytes[..4].to_vec()), (0x1_0004, 4, 7, vec![0x0b, 0, 0, 0]));
        // mov word [rbx], 0x1234
        let s = decode_store(&[0x66, 0xc7, 0x03, 0x34, 0x12], &r, 0x1_0000, 4096).unwrap();
        assert_eq!((s.len, s.bytes[..2].to_vec()), (2, vec![0x34, 0x12]));
    }

    /// The fake registers hold bytes n, n+1, ... in vector register n.
    fn vec_bytes(n: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| (n + i) as u8).collect()
    }

    #[test]
    fn vector_stores_are_decoded() {
        let r = regs();
        let cases: [(&[u8], usize, usize, usize, usize); 8] = [
            // (code, address, register, bytes, instruction length)
            (&[0x0f, 0x11, 0x03], 0x1_0000, 0, 16, 3), // movups [rbx], xmm0
            (&[0xc5, 0xfe, 0x7f, 0x0b], 0x1_0000, 1, 32, 4), // vmovdqu [rbx], ymm1
            (&[0x62, 0xe1, 0xfe, 0x48, 0x7f, 0x0b], 0x1_0000, 17, 64, 6), // vmovdqu64 [rbx], zmm17
            (&[0x62, 0xe1, 0xfe, 0x28, 0x7f, 0x43, 0x01], 0x1_0020, 16, 32, 7), // vmovdqu64 [rbx+0x20], ymm16
            (&[0x66, 0x0f, 0xd6, 0x13], 0x1_0000, 2, 8, 4), // movq [rbx], xmm2
            (&[0xc5, 0xfd, 0xe7, 0x2b], 0x1_0000, 5, 32, 4), // vmovntdq [rbx], ymm5
            (&[0xc5, 0xfa, 0x11, 0x23], 0x1_0000, 4, 4, 4), // vmovss [rbx], xmm4
            (&[0x48, 0x0f, 0xc3, 0x03], 0x1_0000, usize::MAX, 8, 4), // movnti [rbx], rax
        ];
        for (code, addr, reg, len, insn_len) in cases {
            let s = decode_store(code, &r, addr + len - 1, 4096).unwrap_or_else(|| panic!("{code:02x?} not decoded"));
            assert_eq!((s.addr, s.len, s.insn_len), (addr, len, insn_len), "{code:02x?}");
            let want =
                if reg == usize::MAX { 0x1122_3344_5566_7788u64.to_le_bytes().to_vec() } else { vec_bytes(reg, len) };
            assert_eq!(s.bytes[..len].to_vec(), want, "{code:02x?}");
        }
    }

    #[test]
    fn rep_strings_are_decoded() {
        let mut r = regs();
        r.0[1] = 100; // rcx: bytes left
        r.0[6] = 0x2_0000; // rsi
        r.0[7] = 0x1_0010; // rdi
                           // rep movsb
        let m = decode_rep(&[0xf3, 0xa4], &r, 0x1_0010).unwrap();
        assert_eq!(
            m,
            RepString { dst: 0x1_0010, count: 100, src: Some(0x2_0000), value: 0x88, insn_len: 2, src_staged: false }
        );
        // rep stosb (al = 0x88)
        let st = decode_rep(&[0xf3, 0xaa], &r, 0x1_0050).unwrap();
        assert_eq!((st.src, st.value, st.count), (None, 0x88, 100));
        // Not where the copy is, plain movsb, rep movsq, 32-bit addresses.
        assert_eq!(decode_rep(&[0xf3, 0xa4], &r, 0x1_0000), None);
        assert_eq!(decode_rep(&[0xf3, 0xa4], &r, 0x1_0010 + 100), None);
        assert_eq!(decode_rep(&[0xa4], &r, 0x1_0010), None);
        assert_eq!(decode_rep(&[0xf3, 0x48, 0xa5], &r, 0x1_0010), None);
        assert_eq!(decode_rep(&[0x67, 0xf3, 0xa4], &r, 0x1_0010), None);
        // And decode_store leaves them alone.
        assert_eq!(decode_store(&[0xf3, 0xa4], &r, 0x1_0010, 4096), None);
    }

    #[test]
    fn anything_else_is_left_alone() {
        let r = regs();
        // A load: mov eax, [rbx]
        assert_eq!(decode_store(&[0x8b, 0x03], &r, 0x1_0000, 4096), None);
        // movhps [rbx], xmm3 (the register's upper half)
        assert_eq!(decode_store(&[0x0f, 0x17, 0x1b], &r, 0x1_0000, 4096), None);
        // vmovdqu64 [rbx]{k1}, zmm2 (masked: only some lanes are stored)
        assert_eq!(decode_store(&[0x62, 0xf1, 0xfe, 0x49, 0x7f, 0x13], &r, 0x1_0000, 4096), None);
        // movq [rbx], mm0 (MMX)
        assert_eq!(decode_store(&[0x0f, 0x7f, 0x03], &r, 0x1_0000, 4096), None);
        // A 64-byte store that straddles two pages.
        assert_eq!(
            decode_store(
                &[0x62, 0xe1, 0xfe, 0x48, 0x7f, 0x0b],
                &Regs([0, 0, 0, 0xffe0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0),
                0xfff0,
                4096
            ),
            None
        );
        // xchg [rbx], eax (reads as well)
        assert_eq!(decode_store(&[0x87, 0x03], &r, 0x1_0000, 4096), None);
        // rep movsb
        assert_eq!(decode_store(&[0xf3, 0xa4], &r, 0x1_0000, 4096), None);
        // mov fs:[rbx], eax (segment override: TLS)
        assert_eq!(decode_store(&[0x64, 0x89, 0x03], &r, 0x1_0000, 4096), None);
        // A store that straddles two pages.
        assert_eq!(decode_store(&[0x48, 0x89, 0x43, 0xfc], &r, 0x1_0000, 4096), None);
        // The fault is not where the decoded store goes.
        assert_eq!(decode_store(&[0x89, 0x03], &r, 0x2_0000, 4096), None);
    }
}
