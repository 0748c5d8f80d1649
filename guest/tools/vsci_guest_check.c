/* SPDX-License-Identifier: MIT */
/*
 * vsci_guest_check: exercises vsci_guest.ko from inside a guest, the way
 * libsisci will. Used by crates/vsci-systest/tests/vm.rs; also handy by hand.
 *
 *   info DEV                  print what VSCI_IOC_INFO says
 *   ctl DEV PEER RV WV MS     read IVPosition, check argument validation,
 *                             ring PEER's vector RV, wait up to MS ms for our
 *                             vector WV; the shared region's first bytes are
 *                             printed and "hello from guest" is written at 64
 *   gone DEV                  map DEV and wait on it until the host unplugs
 *                             it (ENODEV), then check the mapping faults
 *   wait DEV V MS             wait for DEV's vector V
 *   seg MS                    wait for /dev/vsci-seg0, print its size, PCI
 *                             address and first bytes, write "reply from
 *                             guest" at 64, then wait for it to be unplugged
 *                             and check that the old mapping now faults
 *   cycles N MS               N times: wait for /dev/vsci-seg0, print the u32
 *                             at offset 0, wait for it to go
 *   await PATH MS             wait for a device node to appear
 *   --user (anywhere)         drop to uid/gid 1000 first
 *
 * Prints one line per step; exits non-zero on the first failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "vsci_guest.h"

#define SEG0 "/dev/vsci-seg0"

static void die(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	exit(1);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* wait until PATH exists (want=1) or is gone (want=0) */
static int wait_path(const char *path, int want, int ms)
{
	long long end = now_ms() + ms;

	while (now_ms() < end) {
		if ((access(path, F_OK) == 0) == want)
			return 0;
		usleep(5000);
	}
	return -1;
}

static int open_dev(const char *dev, struct vsci_info *info)
{
	int fd = open(dev, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		die(dev);
	if (ioctl(fd, VSCI_IOC_INFO, info))
		die("VSCI_IOC_INFO");
	return fd;
}

static void print_info(const char *dev, const struct vsci_info *i)
{
	printf("%s kind=%s ivposition=%u vectors=%u shm_size=%llu regs_size=%llu regs_mappable=%u pci=%s\n",
	       dev, i->kind == VSCI_KIND_CTL ? "ctl" : "seg", i->ivposition, i->vectors,
	       (unsigned long long)i->shm_size, (unsigned long long)i->regs_size, i->regs_mappable,
	       i->pci_address);
}

static void expect_err(int ret, int err, const char *what)
{
	if (ret != -1 || errno != err) {
		printf("FAIL %s: expected errno %d, got ret %d errno %d\n", what, err, ret, errno);
		exit(1);
	}
}

static sigjmp_buf fault_jmp;

static void on_sigbus(int sig)
{
	(void)sig;
	siglongjmp(fault_jmp, 1);
}

/* true if reading *p faults (SIGBUS), as it must once the device is gone */
static int faults(volatile char *p)
{
	signal(SIGBUS, on_sigbus);
	if (sigsetjmp(fault_jmp, 1) == 0) {
		char c = *p;

		printf("FAIL old mapping still readable (%d)\n", c);
		return 0;
	}
	return 1;
}

/* map DEV, wait forever on vector 0; the host unplugs the device meanwhile */
static int cmd_gone(int argc, char **argv)
{
	struct vsci_info info;
	struct vsci_wait w = { .vector = 0, .timeout_ms = 0 };
	volatile char *shm;
	int fd;

	if (argc < 2)
		return 2;
	fd = open_dev(argv[1], &info);
	shm = mmap(NULL, info.shm_size, PROT_READ, MAP_SHARED, fd, 0);
	if (shm == MAP_FAILED)
		die("mmap shm");
	(void)shm[0];
	ioctl(fd, VSCI_IOC_WAIT, &w);	/* learn the current count */
	w.timeout_ms = VSCI_INFINITE_TIMEOUT;
	printf("waiting on %s until it is unplugged\n", argv[1]);
	expect_err(ioctl(fd, VSCI_IOC_WAIT, &w), ENODEV, "wait across unplug");
	printf("unplugged: wait ended with ENODEV\n");
	if (!faults(shm))
		return 1;
	printf("unplugged: old mapping faults (SIGBUS)\n");
	expect_err(ioctl(fd, VSCI_IOC_INFO, &info), ENODEV, "info after unplug");
	close(fd);
	return 0;
}

/* wait until DEV's vector V fires (count differs from 0) */
static int cmd_wait(int argc, char **argv)
{
	struct vsci_info info;
	struct vsci_wait w = { 0 };
	int fd;

	if (argc < 4)
		return 2;
	fd = open_dev(argv[1], &info);
	w.vector = strtoul(argv[2], NULL, 0);
	w.timeout_ms = strtoul(argv[3], NULL, 0);
	printf("waiting on %s vector %u\n", argv[1], w.vector);
	if (ioctl(fd, VSCI_IOC_WAIT, &w))
		die("VSCI_IOC_WAIT");
	printf("%s vector %u count %llu\n", argv[1], w.vector, (unsigned long long)w.count);
	return 0;
}

static int cmd_ctl(int argc, char **argv)
{
	struct vsci_info info;
	struct vsci_ring ring;
	struct vsci_wait w;
	volatile uint32_t *regs;
	char *shm;
	int fd;

	if (argc < 6)
		return 2;
	fd = open_dev(argv[1], &info);
	print_info(argv[1], &info);
	printf("ivposition %u\n", info.ivposition);

	shm = mmap(NULL, info.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (shm == MAP_FAILED)
		die("mmap shm");
	printf("shm says: %.32s\n", shm);
	strcpy(shm + 64, "hello from guest");

	/* every bad argument is refused */
	ring.peer = 0x10000; ring.vector = 0;
	expect_err(ioctl(fd, VSCI_IOC_RING, &ring), EINVAL, "ring peer 65536");
	ring.peer = 0; ring.vector = info.vectors;
	expect_err(ioctl(fd, VSCI_IOC_RING, &ring), EINVAL, "ring vector out of range");
	memset(&w, 0, sizeof(w));
	w.vector = info.vectors;
	expect_err(ioctl(fd, VSCI_IOC_WAIT, &w), EINVAL, "wait vector out of range");
	expect_err(ioctl(fd, _IO('v', 0x99)), ENOTTY, "unknown ioctl");
	expect_err(mmap(NULL, info.shm_size + 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED ? -1 : 0,
		   EINVAL, "mmap past the end");
	expect_err(mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, info.shm_size) == MAP_FAILED ? -1 : 0,
		   EINVAL, "mmap at the end");
	expect_err(mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED ? -1 : 0,
		   EINVAL, "private mmap");
	expect_err(mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, VSCI_MMAP_REGS_OFFSET) == MAP_FAILED ? -1 : 0,
		   EINVAL, "two-page register map");
	w.vector = 0; w.timeout_ms = 0; w.count = 0;
	expect_err(ioctl(fd, VSCI_IOC_WAIT, &w), ETIMEDOUT, "wait with nothing pending");
	printf("validation ok\n");

	if (info.regs_mappable) {
		regs = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, VSCI_MMAP_REGS_OFFSET);
		if (regs == MAP_FAILED)
			die("mmap regs");
		printf("regs page ivposition %u\n", regs[VSCI_REG_IVPOSITION / 4]);
		munmap((void *)regs, 4096);
	}

	ring.peer = strtoul(argv[2], NULL, 0);
	ring.vector = strtoul(argv[3], NULL, 0);
	if (ioctl(fd, VSCI_IOC_RING, &ring))
		die("VSCI_IOC_RING");
	printf("rang peer %u vector %u\n", ring.peer, ring.vector);

	w.vector = strtoul(argv[4], NULL, 0);
	w.timeout_ms = strtoul(argv[5], NULL, 0);
	w.count = 0;
	printf("waiting on vector %u\n", w.vector);
	if (ioctl(fd, VSCI_IOC_WAIT, &w))
		die("VSCI_IOC_WAIT");
	printf("vector %u count %llu\n", w.vector, (unsigned long long)w.count);
	return 0;
}

static int cmd_seg(int argc, char **argv)
{
	int ms = argc > 1 ? atoi(argv[1]) : 60000;
	struct vsci_info info;
	volatile char *p;
	char sysfs[128];
	int fd;

	printf("waiting for %s\n", SEG0);
	if (wait_path(SEG0, 1, ms)) {
		printf("FAIL %s did not appear\n", SEG0);
		return 1;
	}
	fd = open_dev(SEG0, &info);
	print_info(SEG0, &info);
	snprintf(sysfs, sizeof(sysfs), "/sys/class/vsci/vsci-seg0/size");
	p = mmap(NULL, info.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap seg");
	printf("seg data: %.32s\n", (const char *)p);
	strcpy((char *)p + 64, "reply from guest");
	expect_err(mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, VSCI_MMAP_REGS_OFFSET) == MAP_FAILED ? -1 : 0,
		   EINVAL, "register map of a plain device");
	printf("mapped; waiting for unplug\n");
	if (wait_path(sysfs, 0, ms)) {
		printf("FAIL %s did not go away\n", SEG0);
		return 1;
	}
	printf("unplugged: %s gone\n", SEG0);
	if (!faults(p))
		return 1;
	printf("old mapping faults (SIGBUS)\n");
	expect_err(ioctl(fd, VSCI_IOC_INFO, &info), ENODEV, "info after unplug");
	close(fd);
	return 0;
}

static int cmd_cycles(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1;
	int ms = argc > 2 ? atoi(argv[2]) : 60000;
	struct vsci_info info;
	volatile uint32_t *p;
	int i, fd;

	for (i = 0; i < n; i++) {
		if (wait_path(SEG0, 1, ms)) {
			printf("FAIL cycle %d: %s did not appear\n", i, SEG0);
			return 1;
		}
		fd = open_dev(SEG0, &info);
		p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			die("mmap");
		printf("cycle %d value %u\n", i, p[0]);
		munmap((void *)p, 4096);
		close(fd);
		if (wait_path("/sys/class/vsci/vsci-seg0", 0, ms)) {
			printf("FAIL cycle %d: %s did not go\n", i, SEG0);
			return 1;
		}
	}
	printf("cycles done\n");
	return 0;
}

/*
 * Wait for a device node to appear. The host's last plug of a test also says
 * "I am done looking at QEMU": without it the guest could power off while
 * the host still talks QMP.
 */
static int cmd_await(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : SEG0;
	int ms = argc > 2 ? atoi(argv[2]) : 60000;

	printf("awaiting %s\n", path);
	if (wait_path(path, 1, ms)) {
		printf("FAIL %s did not appear\n", path);
		return 1;
	}
	printf("plugged: %s\n", path);
	return 0;
}

int main(int argc, char **argv)
{
	int i, j, user = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = j = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--user"))
			user = 1;
		else
			argv[j++] = argv[i];
	}
	argc = j;
	if (user && (setgid(1000) || setuid(1000)))
		die("drop to uid 1000");
	if (user)
		printf("running as uid %d\n", (int)getuid());
	if (argc >= 3 && !strcmp(argv[1], "info")) {
		struct vsci_info info;

		open_dev(argv[2], &info);
		print_info(argv[2], &info);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "ctl"))
		return cmd_ctl(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "seg"))
		return cmd_seg(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "cycles"))
		return cmd_cycles(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "await"))
		return cmd_await(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "gone"))
		return cmd_gone(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "wait"))
		return cmd_wait(argc - 1, argv + 1);
	fprintf(stderr, "usage: vsci_guest_check [--user] info DEV | ctl DEV PEER RV WV MS | gone DEV | wait DEV V MS | seg MS | cycles N MS | await PATH MS\n");
	return 2;
}
