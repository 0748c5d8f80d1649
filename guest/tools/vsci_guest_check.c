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
 *                             (as non-root: only that mapping the whole
 *                             region is refused with EPERM)
 *   seg WIN MS                wait for window WIN (/dev/vsci-winS), print its
 *                             size, PCI address and first bytes, write
 *                             "reply from guest" at 64, then wait for it to
 *                             be unplugged and check that the old mapping
 *                             now faults
 *   cycles N WIN MS           N times: wait for WIN, print the u32 at offset
 *                             0, wait for it to go
 *   await PATH MS             wait for a device node to appear
 *   session DEV V MS          sessions: refusals, two sessions with a pattern
 *                             in their areas, wait for vector V, close them;
 *                             after V again, two more (reuse after the
 *                             host's FREE, not before)
 *   vecfile DEV V MS          a vector file for V: counts, poll, read
 *   bellfile DEV PEER V N     a doorbell file for (PEER, V): N writes
 *   window WIN CTL V MS       window words: WIN opened before CTL exists,
 *                             mapping outlives the fd, nested opens, unplug
 *                             while open and a new window at the same slot;
 *                             steps are paced by CTL's vector V
 *   --user (anywhere)         drop to uid/gid 1000 first
 *
 * Prints one line per step; exits non-zero on the first failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
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

/*
 * Wait until a device node can be opened for reading and writing (want 1)
 * or until a path is gone (want 0). Existing is not enough: devtmpfs makes a
 * node with its mode less the kernel's umask (0644) and only then sets the
 * driver's 0666, so a --user open between the two failed with EACCES (a
 * guest under software emulation on a loaded host, once).
 */
static int wait_path(const char *path, int want, int ms)
{
	long long end = now_ms() + ms;

	while (now_ms() < end) {
		if (want ? access(path, R_OK | W_OK) == 0 : access(path, F_OK) != 0)
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
	if (getuid() != 0) {
		/* the whole region holds every session's area: root only */
		expect_err(shm == MAP_FAILED ? -1 : 0, EPERM, "whole-region map as a user");
		printf("whole-region map refused (EPERM)\n");
	} else {
		if (shm == MAP_FAILED)
			die("mmap shm");
		printf("shm says: %.32s\n", shm);
		strcpy(shm + 64, "hello from guest");
		expect_err(mmap(NULL, info.shm_size + 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED ? -1 : 0,
			   EINVAL, "mmap past the end");
		expect_err(mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, info.shm_size) == MAP_FAILED ? -1 : 0,
			   EINVAL, "mmap at the end");
	}
	if (info.shm_size < VSCI_CTL_MIN_SIZE) {
		struct vsci_session s;

		expect_err(ioctl(fd, VSCI_IOC_SESSION, &s), EINVAL, "session in a small region");
	}

	/* every bad argument is refused */
	ring.peer = 0x10000; ring.vector = 0;
	expect_err(ioctl(fd, VSCI_IOC_RING, &ring), EINVAL, "ring peer 65536");
	ring.peer = 0; ring.vector = info.vectors;
	expect_err(ioctl(fd, VSCI_IOC_RING, &ring), EINVAL, "ring vector out of range");
	memset(&w, 0, sizeof(w));
	w.vector = info.vectors;
	expect_err(ioctl(fd, VSCI_IOC_WAIT, &w), EINVAL, "wait vector out of range");
	expect_err(ioctl(fd, _IO('v', 0x99)), ENOTTY, "unknown ioctl");
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

/* /sys/class/vsci/NAME of a device node /dev/NAME */
static void sysfs_dir(const char *dev, char *buf, size_t len)
{
	char tmp[128];

	snprintf(tmp, sizeof(tmp), "%s", dev);
	snprintf(buf, len, "/sys/class/vsci/%s", basename(tmp));
}

static int cmd_seg(int argc, char **argv)
{
	const char *win;
	int ms;
	struct vsci_info info;
	volatile char *p;
	char sysfs[160];
	int fd;

	if (argc < 2)
		return 2;
	win = argv[1];
	ms = argc > 2 ? atoi(argv[2]) : 60000;
	printf("waiting for %s\n", win);
	if (wait_path(win, 1, ms)) {
		printf("FAIL %s did not appear\n", win);
		return 1;
	}
	fd = open_dev(win, &info);
	print_info(win, &info);
	sysfs_dir(win, sysfs, sizeof(sysfs));
	strcat(sysfs, "/size");
	p = mmap(NULL, info.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap seg");
	printf("seg data: %.32s\n", (const char *)p);
	strcpy((char *)p + 64, "reply from guest");
	expect_err(mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, VSCI_MMAP_REGS_OFFSET) == MAP_FAILED ? -1 : 0,
		   EINVAL, "register map of a plain device");
	printf("mapped; waiting for unplug\n");
	if (wait_path(sysfs, 0, ms)) {
		printf("FAIL %s did not go away\n", win);
		return 1;
	}
	printf("unplugged: %s gone\n", win);
	if (!faults(p))
		return 1;
	printf("old mapping faults (SIGBUS)\n");
	expect_err(ioctl(fd, VSCI_IOC_INFO, &info), ENODEV, "info after unplug");
	close(fd);
	return 0;
}

static int cmd_cycles(int argc, char **argv)
{
	int n, ms;
	const char *win;
	struct vsci_info info;
	volatile uint32_t *p;
	char sysfs[160];
	int i, fd;

	if (argc < 3)
		return 2;
	n = atoi(argv[1]);
	win = argv[2];
	ms = argc > 3 ? atoi(argv[3]) : 60000;
	sysfs_dir(win, sysfs, sizeof(sysfs));
	for (i = 0; i < n; i++) {
		if (wait_path(win, 1, ms)) {
			printf("FAIL cycle %d: %s did not appear\n", i, win);
			return 1;
		}
		fd = open_dev(win, &info);
		p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			die("mmap");
		printf("cycle %d value %u\n", i, p[0]);
		munmap((void *)p, 4096);
		close(fd);
		if (wait_path(sysfs, 0, ms)) {
			printf("FAIL cycle %d: %s did not go\n", i, win);
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
	const char *path;
	int ms = argc > 2 ? atoi(argv[2]) : 60000;

	if (argc < 2)
		return 2;
	path = argv[1];

	printf("awaiting %s\n", path);
	if (wait_path(path, 1, ms)) {
		printf("FAIL %s did not appear\n", path);
		return 1;
	}
	printf("plugged: %s\n", path);
	return 0;
}

/*
 * Steps paced by the host: it notifies our vector when it has checked what
 * we printed. The count is learnt first, so a notification that comes
 * before we wait is not lost.
 */
struct pacer {
	int fd;
	struct vsci_wait w;
};

static void pace_init(struct pacer *p, int fd, unsigned int vector)
{
	p->fd = fd;
	memset(&p->w, 0, sizeof(p->w));
	p->w.vector = vector;
	p->w.timeout_ms = 0;
	ioctl(fd, VSCI_IOC_WAIT, &p->w);	/* ETIMEDOUT; count filled in */
}

static void pace(struct pacer *p, int ms, const char *what)
{
	p->w.timeout_ms = ms;
	printf("%s; waiting on vector %u\n", what, p->w.vector);
	if (ioctl(p->fd, VSCI_IOC_WAIT, &p->w))
		die("pace: VSCI_IOC_WAIT");
}

static char *map_session(int fd, const struct vsci_session *s)
{
	char *a = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (a == MAP_FAILED)
		die("mmap session area");
	snprintf(a, 64, "session %u gen %u", s->index, s->generation);
	snprintf(a + s->size - 64, 64, "end of session %u", s->index);
	return a;
}

static void get_session(int fd, struct vsci_session *s, int n)
{
	if (ioctl(fd, VSCI_IOC_SESSION, s))
		die("VSCI_IOC_SESSION");
	printf("session %d index %u generation %u size %llu\n", n, s->index, s->generation,
	       (unsigned long long)s->size);
}

static int cmd_session(int argc, char **argv)
{
	struct vsci_session s1, s2, s3, s4, s;
	struct vsci_info info;
	struct pacer pc;
	char *a1, *a2;
	uint32_t v = 0;
	int fd0, fd1, fd2, fd3, fd4, ms;

	if (argc < 4)
		return 2;
	ms = atoi(argv[3]);
	fd0 = open_dev(argv[1], &info);
	pace_init(&pc, fd0, strtoul(argv[2], NULL, 0));
	fd1 = open_dev(argv[1], &info);
	if (getuid() != 0) {
		expect_err(mmap(NULL, info.shm_size, PROT_READ, MAP_SHARED, fd1, 0) == MAP_FAILED ? -1 : 0,
			   EPERM, "whole-region map as a user");
		printf("whole-region map refused (EPERM)\n");
	}
	get_session(fd1, &s1, 1);
	expect_err(ioctl(fd1, VSCI_IOC_SESSION, &s), EBUSY, "second session on one file");
	expect_err(ioctl(fd1, VSCI_IOC_BIND_VECTOR, &v), EBUSY, "vector binding of a session file");
	a1 = map_session(fd1, &s1);
	expect_err(mmap(NULL, s1.size + 4096, PROT_READ, MAP_SHARED, fd1, 0) == MAP_FAILED ? -1 : 0,
		   EINVAL, "map beyond the session area");
	expect_err(mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd1, s1.size) == MAP_FAILED ? -1 : 0,
		   EINVAL, "map after the session area");
	fd2 = open_dev(argv[1], &info);
	get_session(fd2, &s2, 2);
	if (s2.index == s1.index) {
		printf("FAIL two open sessions share index %u\n", s1.index);
		return 1;
	}
	a2 = map_session(fd2, &s2);
	pace(&pc, ms, "session areas written");

	/* the mapping keeps session 1's file, and so the session, alive */
	close(fd1);
	munmap(a2, s2.size);
	close(fd2);
	pace(&pc, ms, "session 2 closed; session 1 fd closed, still mapped");
	if (strncmp(a1, "session ", 8)) {
		printf("FAIL session 1's area lost its pattern\n");
		return 1;
	}
	munmap(a1, s1.size);
	pace(&pc, ms, "session 1 unmapped");

	/* the host freed session 2's slot and left session 1's CLOSING */
	fd3 = open_dev(argv[1], &info);
	get_session(fd3, &s3, 3);
	fd4 = open_dev(argv[1], &info);
	get_session(fd4, &s4, 4);
	if (s3.index != s2.index || s4.index == s1.index || s4.index == s3.index) {
		printf("FAIL slot reuse: sessions %u %u, then %u %u\n", s1.index, s2.index, s3.index, s4.index);
		return 1;
	}
	close(fd3);
	close(fd4);
	printf("sessions done\n");
	return 0;
}

static int cmd_vecfile(int argc, char **argv)
{
	struct vsci_info info;
	struct vsci_session s;
	struct vsci_ring r = { 0, 0 };
	struct vsci_wait w = { 0 };
	struct pollfd pfd;
	uint64_t x = 0, start;
	uint32_t v, bad;
	int fd0, fd, fl;

	if (argc < 4)
		return 2;
	fd0 = open_dev(argv[1], &info);
	fd = open_dev(argv[1], &info);
	v = strtoul(argv[2], NULL, 0);
	bad = info.vectors;
	expect_err(ioctl(fd, VSCI_IOC_BIND_VECTOR, &bad), EINVAL, "bind a vector we do not have");
	if (ioctl(fd, VSCI_IOC_BIND_VECTOR, &v))
		die("VSCI_IOC_BIND_VECTOR");
	expect_err(ioctl(fd, VSCI_IOC_BIND_VECTOR, &v), EBUSY, "bind twice");
	expect_err(ioctl(fd, VSCI_IOC_SESSION, &s), EBUSY, "session on a vector file");
	expect_err(ioctl(fd, VSCI_IOC_BIND_DOORBELL, &r), EBUSY, "doorbell on a vector file");
	expect_err(write(fd, &x, 8), EINVAL, "write to a vector file");
	expect_err(read(fd, &x, 4), EINVAL, "short read");
	fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	expect_err(read(fd, &x, 8), EAGAIN, "non-blocking read with nothing pending");
	pfd.fd = fd;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, 0) != 0) {
		printf("FAIL poll says %#x with nothing pending\n", pfd.revents);
		return 1;
	}

	/*
	 * Three interrupts, counted through the plain interface first; one
	 * at a time, since QEMU raises one interrupt for notifications that
	 * pile up in its eventfd.
	 */
	w.vector = v;
	ioctl(fd0, VSCI_IOC_WAIT, &w);
	start = w.count;
	printf("vector file bound\n");
	while (w.count < start + 3) {
		printf("waiting for interrupt %llu on vector %u\n",
		       (unsigned long long)(w.count - start + 1), v);
		w.timeout_ms = atoi(argv[3]);
		if (ioctl(fd0, VSCI_IOC_WAIT, &w))
			die("VSCI_IOC_WAIT");
	}
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) != 1 || !(pfd.revents & POLLIN)) {
		printf("FAIL poll says %#x with 3 pending\n", pfd.revents);
		return 1;
	}
	if (read(fd, &x, 8) != 8)
		die("read vector file");
	printf("vector file read %llu\n", (unsigned long long)x);
	expect_err(read(fd, &x, 8), EAGAIN, "read after the count was taken");
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) != 0) {
		printf("FAIL poll says %#x after the read\n", pfd.revents);
		return 1;
	}
	fcntl(fd, F_SETFL, fl);
	printf("blocking read\n");
	if (read(fd, &x, 8) != 8)
		die("blocking read");
	printf("vector file blocking read %llu\n", (unsigned long long)x);
	return 0;
}

static int cmd_bellfile(int argc, char **argv)
{
	struct vsci_info info;
	struct vsci_ring r;
	struct pollfd pfd;
	uint64_t x = 1;
	int fd, i, n;

	if (argc < 5)
		return 2;
	fd = open_dev(argv[1], &info);
	r.peer = 0x10000;
	r.vector = 0;
	expect_err(ioctl(fd, VSCI_IOC_BIND_DOORBELL, &r), EINVAL, "doorbell for peer 65536");
	r.peer = strtoul(argv[2], NULL, 0);
	r.vector = info.vectors;
	expect_err(ioctl(fd, VSCI_IOC_BIND_DOORBELL, &r), EINVAL, "doorbell for a vector out of range");
	r.vector = strtoul(argv[3], NULL, 0);
	if (ioctl(fd, VSCI_IOC_BIND_DOORBELL, &r))
		die("VSCI_IOC_BIND_DOORBELL");
	expect_err(ioctl(fd, VSCI_IOC_BIND_DOORBELL, &r), EBUSY, "bind twice");
	expect_err(read(fd, &x, 8), EINVAL, "read from a doorbell file");
	expect_err(write(fd, &x, 4), EINVAL, "short write");
	pfd.fd = fd;
	pfd.events = POLLIN | POLLOUT;
	if (poll(&pfd, 1, 0) != 1 || pfd.revents != POLLOUT) {
		printf("FAIL poll says %#x on a doorbell file\n", pfd.revents);
		return 1;
	}
	n = atoi(argv[4]);
	for (i = 0; i < n; i++)
		if (write(fd, &x, 8) != 8)
			die("write doorbell file");
	printf("bell file rang peer %u vector %u %d times\n", r.peer, r.vector, n);
	return 0;
}

static int open_win(const char *win)
{
	int fd = open(win, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		die(win);
	return fd;
}

static int cmd_window(int argc, char **argv)
{
	const char *win, *ctl;
	struct vsci_info info;
	struct pacer pc;
	char sysfs[160];
	void *p;
	int ms, wfd, cfd, a, b;

	if (argc < 5)
		return 2;
	win = argv[1];
	ctl = argv[2];
	ms = atoi(argv[4]);
	printf("waiting for %s\n", win);
	if (wait_path(win, 1, ms)) {
		printf("FAIL %s did not appear\n", win);
		return 1;
	}
	wfd = open_win(win);
	printf("window open before the control device\n");
	if (wait_path(ctl, 1, ms)) {
		printf("FAIL %s did not appear\n", ctl);
		return 1;
	}
	cfd = open_dev(ctl, &info);
	pace_init(&pc, cfd, strtoul(argv[3], NULL, 0));
	pace(&pc, ms, "control device here");

	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, wfd, 0);
	if (p == MAP_FAILED)
		die("mmap window");
	close(wfd);
	pace(&pc, ms, "window fd closed, still mapped");
	munmap(p, 4096);
	pace(&pc, ms, "window unmapped");

	a = open_win(win);
	b = open_win(win);
	close(a);
	pace(&pc, ms, "two opens, one closed");
	close(b);
	pace(&pc, ms, "both closed");

	a = open_win(win);
	sysfs_dir(win, sysfs, sizeof(sysfs));
	printf("holding %s open for unplug\n", win);
	if (wait_path(sysfs, 0, ms)) {
		printf("FAIL %s was not unplugged\n", win);
		return 1;
	}
	printf("window unplugged while open\n");
	if (wait_path(win, 1, ms)) {
		printf("FAIL a new %s did not appear\n", win);
		return 1;
	}
	b = open_win(win);
	close(a);	/* the old window's last close must not clear the new one's word */
	pace(&pc, ms, "new window open, old fd closed");
	close(b);
	printf("new window closed\n");
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
	if (argc >= 2 && !strcmp(argv[1], "session"))
		return cmd_session(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "vecfile"))
		return cmd_vecfile(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "bellfile"))
		return cmd_bellfile(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "window"))
		return cmd_window(argc - 1, argv + 1);
	fprintf(stderr, "usage: vsci_guest_check [--user] info DEV | ctl DEV PEER RV WV MS | gone DEV | wait DEV V MS | seg WIN MS | cycles N WIN MS | await PATH MS\n"
		"       | session DEV V MS | vecfile DEV V MS | bellfile DEV PEER V N | window WIN CTL V MS\n");
	return 2;
}
