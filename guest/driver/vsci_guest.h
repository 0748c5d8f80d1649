/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * vsci_guest: user-space interface of vsci's guest driver for QEMU ivshmem
 * devices (PCI 1af4:1110). Shared by the module, guest programs and libsisci.
 *
 * /dev/vsci-ctlN  one per ivshmem-doorbell device (the control channel to the
 *                 node: private shared region, doorbells, MSI-X vectors)
 * /dev/vsci-segN  one per ivshmem-plain device (a segment window hot-plugged
 *                 by the host)
 *
 * mmap offsets:
 *   0 .. shm_size            BAR2, the shared memory (both kinds)
 *   VSCI_MMAP_REGS_OFFSET    BAR0's register page, exactly one page (ctl
 *                            only): IVPosition at +8, Doorbell at +12
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

#define VSCI_IOC_MAGIC 'v'
#define VSCI_IOC_INFO _IOR(VSCI_IOC_MAGIC, 0x80, struct vsci_info)
#define VSCI_IOC_RING _IOW(VSCI_IOC_MAGIC, 0x81, struct vsci_ring)
#define VSCI_IOC_WAIT _IOWR(VSCI_IOC_MAGIC, 0x82, struct vsci_wait)

#endif
