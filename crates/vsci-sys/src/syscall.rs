//! System calls made without the C library's `syscall(2)`.

/// A system call made with the `syscall` instruction itself, never through
/// the C library's `syscall(2)`: libsisci exports its own `syscall` (to see
/// a program's direct `rt_sigaction`), and the code behind it must not call
/// back into it. Returns the kernel's result (`-errno` on failure).
///
/// # Safety
/// As the system call `n` with these arguments.
#[cfg(target_arch = "x86_64")]
pub unsafe fn raw_syscall(n: libc::c_long, a: [libc::c_long; 6]) -> libc::c_long {
    let ret: libc::c_long;
    // SAFETY: the caller's contract. The Linux x86-64 system-call ABI: number
    // in RAX, arguments in RDI, RSI, RDX, R10, R8, R9; the kernel clobbers
    // RCX and R11 and returns in RAX.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2], in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86-64 version; elsewhere the C library's (no interposer of
/// ours exists there).
///
/// # Safety
/// As the system call `n` with these arguments.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn raw_syscall(n: libc::c_long, a: [libc::c_long; 6]) -> libc::c_long {
    // SAFETY: the caller's contract.
    let r = unsafe { libc::syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r == -1 {
        -(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL) as libc::c_long)
    } else {
        r
    }
}
