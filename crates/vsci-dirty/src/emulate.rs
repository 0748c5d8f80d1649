//! Emulating the store that trapped, so that a trapped page need not be
//! made writable (and fetched) for a program that stores a word now and
//! then: the handler decodes the faulting instruction, takes the value it
//! would have stored, and skips it. The caller puts the bytes where they
//! belong (the shadow, and the owner).
//!
//! Only plain `MOV` of a general register or an immediate to memory (1, 2, 4
//! or 8 bytes, no segment override) is emulated: that is how programs store
//! flags, counters, sequence numbers and mailbox words. Anything else — SSE
//! and AVX stores (`memcpy`), string instructions, atomics, stores that
//! straddle a page — is left to the caller's other path, so a wrong guess is
//! never possible: what is not understood exactly is not emulated.

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};

/// A store decoded from the faulting instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    /// First byte stored.
    pub addr: usize,
    /// The bytes, `len` of them.
    pub bytes: [u8; 8],
    pub len: usize,
    /// Length of the instruction, to skip it.
    pub insn_len: usize,
}

/// The registers the decoder needs: general registers by their 64-bit
/// name, and the instruction pointer.
pub trait Registers {
    fn gpr(&self, full: Register) -> Option<u64>;
    fn rip(&self) -> u64;
}

/// Decode the store at the instruction pointer that faulted on `fault_addr`
/// with the bytes `code` (at least the instruction; 15 bytes read at `rip`
/// always hold it). `None` unless it is a store this module emulates whose
/// bytes lie in one page of `page` bytes and contain `fault_addr`.
pub fn decode_store(code: &[u8], regs: &dyn Registers, fault_addr: usize, page: usize) -> Option<Store> {
    let mut d = Decoder::with_ip(64, code, regs.rip(), DecoderOptions::NONE);
    let insn = d.decode();
    if insn.is_invalid() || insn.mnemonic() != Mnemonic::Mov || insn.op0_kind() != OpKind::Memory {
        return None;
    }
    if insn.segment_prefix() != Register::None {
        return None;
    }
    let len = insn.memory_size().size();
    if !matches!(len, 1 | 2 | 4 | 8) {
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
    if fault_addr < ea || fault_addr >= end || ea / page != (end - 1) / page {
        return None;
    }
    let value = match insn.op1_kind() {
        OpKind::Register => reg_value(regs, insn.op1_register())?,
        OpKind::Immediate8 | OpKind::Immediate16 | OpKind::Immediate32 | OpKind::Immediate8to64 | OpKind::Immediate32to64 => {
            insn.immediate(1)
        }
        _ => return None,
    };
    Some(Store { addr: ea, bytes: value.to_le_bytes(), len, insn_len: insn.len() })
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

    fn rip(&self) -> u64 {
        self.gregs()[libc::REG_RIP as usize] as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Regs([u64; 16], u64);

    impl Registers for Regs {
        fn gpr(&self, full: Register) -> Option<u64> {
            let order = [
                Register::RAX, Register::RCX, Register::RDX, Register::RBX, Register::RSP, Register::RBP, Register::RSI, Register::RDI,
                Register::R8, Register::R9, Register::R10, Register::R11, Register::R12, Register::R13, Register::R14, Register::R15,
            ];
            order.iter().position(|r| *r == full).map(|i| self.0[i])
        }
        fn rip(&self) -> u64 {
            self.1
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

    #[test]
    fn plain_stores_are_decoded() {
        let r = regs();
        // mov [rbx], eax
        assert_eq!(
            decode_store(&[0x89, 0x03], &r, 0x1_0000, 4096),
            Some(Store { addr: 0x1_0000, bytes: 0x5566_7788u64.to_le_bytes(), len: 4, insn_len: 2 })
        );
        // mov [rbx+rcx*8+0x10], r8
        let s = decode_store(&[0x4c, 0x89, 0x44, 0xcb, 0x10], &r, 0x1_0028, 4096).unwrap();
        assert_eq!((s.addr, s.len, s.insn_len, u64::from_le_bytes(s.bytes)), (0x1_0028, 8, 5, 0xdead_beef_cafe_f00d));
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

    #[test]
    fn anything_else_is_left_alone() {
        let r = regs();
        // A load: mov eax, [rbx]
        assert_eq!(decode_store(&[0x8b, 0x03], &r, 0x1_0000, 4096), None);
        // movups [rbx], xmm0 (memcpy's kind of store)
        assert_eq!(decode_store(&[0x0f, 0x11, 0x03], &r, 0x1_0000, 4096), None);
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
