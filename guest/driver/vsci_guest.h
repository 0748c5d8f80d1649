/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * vsci_guest: user-space interface of vsci's guest driver for QEMU ivshmem
 * devices (PCI 1af4:1110). Shared by the module, guest programs and libsisci.
 *
 * /dev/vsci-ctlN  one per ivshmem-doorbell device (the control channel to the
 *                 node: private shared region, doorbells, MSI-X vectors)
 * /dev/vsci-winS  one per ivshmem-plain device on PCI bus 0 (function 0),
 *                 S = its slot (decimal): a segment window the host
 *                 hot-plugged at the slot it chose and told libsisci about
 * /dev/vsci-segN  any other ivshmem-plain device (not tracked in the window
 *                 table)
 *
 * mmap offsets:
 *   0 .. shm_size            BAR2, the shared memory: windows always; the
 *                            control device only for CAP_SYS_ADMIN (of
 *                            the file's opener: tests, tools; EPERM for
 *                            others) or, after
 *                            VSCI_IOC_SESSION, the session's own area
 *                            (0 .. session size; EINVAL beyond it)
 *   VSCI_MMAP_REGS_OFFSET    BAR0's register page, exactly one page (ctl
 *                            only): IVPosition at +8, Doorbell at +12
 *
 * The control region (BAR2 of the control device) as the host lays it out;
 * the driver touches only the words named here, everything else is between
 * libsisci and the host (crates/vsci-proto/src/guest.rs):
 *   VSCI_CTL_WINDOWS + 4*S   window S in use (1) or not (0), written by the
 *                            driver when /dev/vsci-winS is first opened and
 *                            last released (mappings hold it open)
 *   VSCI_CTL_SESSIONS + 4*i  session i's state word: (generation << 8) |
 *                            VSCI_SESSION_*; the driver moves FREE -> OPEN
 *                            (generation + 1) and OPEN -> CLOSING, the host
 *                            CLOSING -> FREE once it has cleaned up
 *   VSCI_CTL_SESSION_AREA(i) session i's private area, VSCI_SESSION_SIZE bytes
 * After every change of those words the driver rings the host (peer 0,
 * vector 0). It writes them only into a region of at least
 * VSCI_CTL_MIN_SIZE bytes that starts with VSCI_CTL_MAGIC. The window table
 * lives in the first ctl device bound that is still present; if there is
 * none, window opens are not reported, and a control device that appears
 * (or takes over) later gets the whole table written. A window unplugged
 * while open gets its 0 at unplug, not at the (later) last close.
 */
#ifndef VSCI_GUEST_H
#define VSCI_GUEST_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/ioctl.h>
#else
#include <stdint.h>
#include <sys/ioctl.h>
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
#endif

#define VSCI_KIND_CTL 1 /* ivshmem-doorbell */
#define VSCI_KIND_SEG 2 /* ivshmem-plain */

/* 1 TiB: above any BAR2 we will meet, below every 32-bit off_t limit issue */
#define VSCI_MMAP_REGS_OFFSET (1ULL << 40)

/* ivshmem BAR0 registers (docs/specs/ivshmem-spec.rst in QEMU) */
#define VSCI_REG_INTRMASK   0
#define VSCI_REG_INTRSTATUS 4
#define VSCI_REG_IVPOSITION 8
#define VSCI_REG_DOORBELL   12

#define VSCI_INFINITE_TIMEOUT 0xffffffffU

/* control region layout (see the top of this file) */
#define VSCI_CTL_MAGIC        0x47435356U	/* "VSCG", at offset 0, host-written */
#define VSCI_CTL_WINDOWS      0x100
#define VSCI_CTL_MAX_WINDOWS  32
#define VSCI_CTL_SESSIONS     0x200
#define VSCI_CTL_MAX_SESSIONS 64
#define VSCI_SESSION_SIZE     0x10000
#define VSCI_CTL_SESSION_AREA(i) (VSCI_SESSION_SIZE * ((__u64)(i) + 1))
#define VSCI_CTL_MIN_SIZE     VSCI_CTL_SESSION_AREA(VSCI_CTL_MAX_SESSIONS)
#define VSCI_SESSION_FREE     0
#define VSCI_SESSION_OPEN     1
#define VSCI_SESSION_CLOSING  2
/* the host's doorbell vector for control traffic and the guest's vector
 * on which the host answers */
#define VSCI_CTL_VECTOR       0

struct vsci_info {
	__u32 kind;		/* VSCI_KIND_* */
	__u32 ivposition;	/* own peer id (ctl); 0 for seg */
	__u32 vectors;		/* MSI-X vectors (ctl); 0 for seg */
	__u32 regs_mappable;	/* 1 if the register page can be mmapped */
	__u64 regs_size;	/* BAR0 length */
	__u64 shm_size;		/* BAR2 length */
	char pci_address[32];	/* "0000:00:05.0", NUL-terminated */
};

struct vsci_ring {
	__u32 peer;		/* 0..65535 */
	__u32 vector;		/* 0..vectors-1 (peers have as many as we do) */
};

/*
 * Wait until vector's interrupt count differs from @count, at most
 * @timeout_ms milliseconds (VSCI_INFINITE_TIMEOUT: no limit; 0: just look).
 * On return @count holds the current count, whatever the result: 0 when it
 * changed, -1/ETIMEDOUT when it did not, EINTR on a signal, ENODEV once the
 * device has been unplugged.
 */
struct vsci_wait {
	__u32 vector;
	__u32 timeout_ms;
	__u64 count;
};

/* VSCI_IOC_SESSION's answer */
struct vsci_session {
	__u32 index;		/* 0..VSCI_CTL_MAX_SESSIONS-1 */
	__u32 generation;	/* 1..0xffffff, as written in the state word */
	__u64 size;		/* VSCI_SESSION_SIZE: mmap offset 0, this length */
};

#define VSCI_IOC_MAGIC 'v'
#define VSCI_IOC_INFO _IOR(VSCI_IOC_MAGIC, 0x80, struct vsci_info)
#define VSCI_IOC_RING _IOW(VSCI_IOC_MAGIC, 0x81, struct vsci_ring)
#define VSCI_IOC_WAIT _IOWR(VSCI_IOC_MAGIC, 0x82, struct vsci_wait)
/*
 * ctl only. Give this open file a session of its own: the driver picks a
 * FREE slot, marks it OPEN and rings the host; from then on mmap offset 0
 * maps the session's area (and only it). Closing the file (the last
 * reference, mappings included) marks it CLOSING and rings the host, so a
 * killed program's resources are released. A slot is reused only after the
 * host has moved it from CLOSING to FREE. EBUSY if the file already has a
 * session or any other binding, ENOSPC if no slot is FREE, EINVAL on a
 * window or a region smaller than VSCI_CTL_MIN_SIZE, EPROTO if the region
 * does not start with VSCI_CTL_MAGIC (the host has not set it up yet, or it
 * is not a vsci node), ENODEV after unplug.
 */
#define VSCI_IOC_SESSION _IOR(VSCI_IOC_MAGIC, 0x83, struct vsci_session)
/*
 * ctl only. Make this open file behave like an eventfd for one of our own
 * vectors: read() of 8 bytes returns the number of interrupts since the last
 * read (blocks until there is one, or EAGAIN with O_NONBLOCK), poll() says
 * POLLIN while that number is not zero. write() is EINVAL, as is a read of
 * fewer than 8 bytes. EBUSY if the file is already bound; EINVAL for a
 * vector we do not have. Once the device is unplugged, read() fails with
 * ENODEV and poll() says POLLERR | POLLHUP (for every file of the device).
 */
#define VSCI_IOC_BIND_VECTOR _IOW(VSCI_IOC_MAGIC, 0x84, __u32)
/*
 * ctl only. Make this open file ring (peer, vector) on every write() of 8
 * bytes (the value is ignored, as an eventfd's wake-up is): the guest-side
 * half of an interrupt a host process waits on. write() returns 8; fewer
 * than 8 bytes is EINVAL, ENODEV after unplug. poll() says POLLOUT.
 * read() is EINVAL. EBUSY if already bound; EINVAL if peer > 0xffff or the
 * vector is not below our vector count.
 */
#define VSCI_IOC_BIND_DOORBELL _IOW(VSCI_IOC_MAGIC, 0x85, struct vsci_ring)

#endif
