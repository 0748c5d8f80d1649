/* SPDX-License-Identifier: MIT */
/*
 * vsci_guest_abuse: a misbehaving guest program, for the isolation tests in
 * crates/vsci-systest/tests/guests.rs. Each mode breaks the rules of the
 * control channel in one way; the node, the guest's host side and every
 * other guest must keep working.
 *
 *   garbage DEV ROUNDS       ROUNDS sessions, each broken a different way:
 *                            random bytes over the whole session area, a
 *                            head index beyond the ring, a record longer
 *                            than the host accepts, a well-framed record
 *                            that does not decode; the doorbell rung after
 *                            each
 *   header DEV               (root) scribble the region's header: random
 *                            session state words and window words, a wrong
 *                            magic; then restore the magic
 *   noreply DEV HELLO REQ N  a session that sends the HELLO record, then N
 *                            copies of REQ (both hex), and never reads one
 *                            reply
 *   flood DEV INTNO MAX_S    create SISCI interrupt INTNO, print
 *                            "FLOOD START", then ring doorbells as fast as
 *                            the device takes them (the host's control
 *                            vector, peers that do not exist, every vector)
 *                            until INTNO is triggered or MAX_S seconds pass
 *   deaf INTNO DATANO STOPNO MAX_S
 *                            create interrupt INTNO and data interrupt
 *                            DATANO and never wait on them; wait (only) on
 *                            interrupt STOPNO, at most MAX_S seconds
 *   trigger NODE INTNO N     (any host or guest) trigger interrupt INTNO on
 *                            NODE N times; print how many succeeded
 *   dtrigger NODE INTNO N    the same with data interrupts (16 bytes each);
 *                            print how many succeeded and how many were
 *                            refused because the queue was full
 *
 * Prints one line per step; exits non-zero on the first unexpected result.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sisci_api.h"
#include "vsci_guest.h"

/* The session area's rings (crates/vsci-proto/src/guest.rs): indices are
 * free-running byte counts, a record is a u32 length and its bytes. */
#define TO_HOST_HEAD 0x00
#define TO_HOST_TAIL 0x40
#define TO_HOST_DATA 0x1000
#define TO_HOST_CAP  0x4000
#define MAX_RECORD   4096

static void die(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	exit(1);
}

static void sci_die(const char *what, sci_error_t err)
{
	printf("FAIL %s: %s\n", what, SCIGetErrorString(err));
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	/* xorshift64*: enough for garbage, and the same garbage every run */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

/* Opens a control device and reads what the driver says about it. */
static int open_ctl(const char *path, struct vsci_info *info)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		die(path);
	if (ioctl(fd, VSCI_IOC_INFO, info))
		die("VSCI_IOC_INFO");
	return fd;
}

static void ring_host(int fd)
{
	struct vsci_ring r = { .peer = 0, .vector = VSCI_CTL_VECTOR };

	if (ioctl(fd, VSCI_IOC_RING, &r))
		die("VSCI_IOC_RING");
}

struct session {
	int fd;
	volatile uint8_t *area;
	uint32_t index;
};

static struct session open_session(const char *dev)
{
	struct vsci_session s;
	struct session out;

	out.fd = open(dev, O_RDWR | O_CLOEXEC);
	if (out.fd < 0)
		die(dev);
	if (ioctl(out.fd, VSCI_IOC_SESSION, &s))
		die("VSCI_IOC_SESSION");
	out.area = mmap(NULL, s.size, PROT_READ | PROT_WRITE, MAP_SHARED, out.fd, 0);
	if (out.area == MAP_FAILED)
		die("mmap session");
	out.index = s.index;
	return out;
}

static void close_session(struct session *s)
{
	munmap((void *)s->area, VSCI_SESSION_SIZE);
	close(s->fd);
}

static volatile uint32_t *word(volatile uint8_t *base, size_t off)
{
	return (volatile uint32_t *)(base + off);
}

/* Append one record to the to-host ring; 0 if it fits, -1 if full. */
static int put_record(volatile uint8_t *area, const uint8_t *rec, uint32_t len)
{
	uint32_t head = *word(area, TO_HOST_HEAD);
	uint32_t tail = __atomic_load_n(word(area, TO_HOST_TAIL), __ATOMIC_ACQUIRE);
	uint8_t hdr[4] = { len, len >> 8, len >> 16, len >> 24 };
	uint32_t i;

	if (TO_HOST_CAP - (head - tail) < 4 + len)
		return -1;
	for (i = 0; i < 4; i++)
		area[TO_HOST_DATA + (head + i) % TO_HOST_CAP] = hdr[i];
	for (i = 0; i < len; i++)
		area[TO_HOST_DATA + (head + 4 + i) % TO_HOST_CAP] = rec[i];
	__atomic_store_n(word(area, TO_HOST_HEAD), head + 4 + len, __ATOMIC_RELEASE);
	return 0;
}

static int cmd_garbage(int argc, char **argv)
{
	int rounds, r;
	uint8_t rec[64];
	size_t i;

	if (argc < 3)
		return 2;
	rounds = atoi(argv[2]);
	for (r = 0; r < rounds; r++) {
		struct session s = open_session(argv[1]);
		const char *how;

		switch (r % 4) {
		case 0:
			how = "random bytes over the session area";
			for (i = 0; i < VSCI_SESSION_SIZE; i += 8)
				*(volatile uint64_t *)(s.area + i) = rnd();
			break;
		case 1:
			how = "head index beyond the ring";
			*word(s.area, TO_HOST_HEAD) = *word(s.area, TO_HOST_TAIL) + TO_HOST_CAP + 1 + (rnd() & 0xffff);
			break;
		case 2:
			how = "record longer than the host accepts";
			*word(s.area, TO_HOST_DATA) = MAX_RECORD + 1 + (rnd() & 0xff);
			*word(s.area, TO_HOST_HEAD) = 4 + 100;
			break;
		default:
			how = "well-framed record that does not decode";
			for (i = 0; i < sizeof(rec); i++)
				rec[i] = 0xff - (uint8_t)(rnd() & 0x0f);
			if (put_record(s.area, rec, sizeof(rec)))
				die("ring full on a new session");
			break;
		}
		ring_host(s.fd);
		printf("session %u: %s\n", s.index, how);
		/* give the host a moment to look before the next one */
		usleep(20000);
		close_session(&s);
	}
	printf("GARBAGE DONE rounds=%d\n", rounds);
	return 0;
}

static int cmd_header(int argc, char **argv)
{
	struct vsci_info info;
	volatile uint8_t *shm;
	uint32_t magic;
	int fd, i, pass;

	if (argc < 2)
		return 2;
	fd = open_ctl(argv[1], &info);
	shm = mmap(NULL, info.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (shm == MAP_FAILED)
		die("mmap the whole region (root only)");
	magic = *word(shm, 0);
	for (pass = 0; pass < 20; pass++) {
		for (i = 0; i < VSCI_CTL_MAX_WINDOWS; i++)
			*word(shm, VSCI_CTL_WINDOWS + 4 * i) = (uint32_t)rnd();
		for (i = 0; i < VSCI_CTL_MAX_SESSIONS; i++)
			*word(shm, VSCI_CTL_SESSIONS + 4 * i) = (uint32_t)rnd();
		*word(shm, 0) = (uint32_t)rnd();
		ring_host(fd);
		usleep(20000);
	}
	/* A guest may ruin its own channel; the test then checks the node and
	 * the other guests, not this one. Put back what the driver needs. */
	for (i = 0; i < VSCI_CTL_MAX_WINDOWS; i++)
		*word(shm, VSCI_CTL_WINDOWS + 4 * i) = 0;
	for (i = 0; i < VSCI_CTL_MAX_SESSIONS; i++)
		*word(shm, VSCI_CTL_SESSIONS + 4 * i) = VSCI_SESSION_CLOSING;
	*word(shm, 0) = magic;
	ring_host(fd);
	printf("HEADER DONE\n");
	return 0;
}

static size_t unhex(const char *hex, uint8_t *out, size_t max)
{
	size_t n = strlen(hex) / 2, i;

	if (strlen(hex) % 2 || n > max) {
		printf("FAIL bad hex record %s\n", hex);
		exit(2);
	}
	for (i = 0; i < n; i++) {
		unsigned int b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1) {
			printf("FAIL bad hex record %s\n", hex);
			exit(2);
		}
		out[i] = b;
	}
	return n;
}

static int cmd_noreply(int argc, char **argv)
{
	uint8_t hello[MAX_RECORD], req[MAX_RECORD];
	size_t hello_len, req_len;
	long n, sent = 0, full = 0;
	double end;
	struct session s;

	if (argc < 5)
		return 2;
	hello_len = unhex(argv[2], hello, sizeof(hello));
	req_len = unhex(argv[3], req, sizeof(req));
	n = atol(argv[4]);
	s = open_session(argv[1]);
	if (put_record(s.area, hello, hello_len))
		die("hello does not fit");
	ring_host(s.fd);
	/* The host must stop taking requests once too many replies are
	 * unread: stop when the ring has stayed full for 3 s. */
	end = now_s() + 3;
	while (sent < n && now_s() < end) {
		if (put_record(s.area, req, req_len) == 0) {
			sent++;
			end = now_s() + 3;
			if (sent % 256 == 0)
				ring_host(s.fd);
		} else {
			full++;
			ring_host(s.fd);
			usleep(1000);
		}
	}
	ring_host(s.fd);
	printf("NOREPLY sent=%ld of %ld (ring full %ld times)\n", sent, n, full);
	close_session(&s);
	return 0;
}

static sci_desc_t open_sd(void)
{
	sci_error_t err;
	sci_desc_t sd;

	SCIInitialize(0, &err);
	if (err != SCI_ERR_OK)
		sci_die("SCIInitialize", err);
	SCIOpen(&sd, 0, &err);
	if (err != SCI_ERR_OK)
		sci_die("SCIOpen", err);
	return sd;
}

static sci_local_interrupt_t create_intr(sci_desc_t sd, unsigned int no)
{
	sci_local_interrupt_t li;
	sci_error_t err;

	SCICreateInterrupt(sd, &li, 0, &no, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
	if (err != SCI_ERR_OK)
		sci_die("SCICreateInterrupt", err);
	return li;
}

static int cmd_flood(int argc, char **argv)
{
	struct vsci_info info;
	volatile uint32_t *regs;
	sci_local_interrupt_t stop;
	sci_error_t err;
	unsigned long long rings = 0;
	double end;
	uint32_t k;
	int fd;

	if (argc < 4)
		return 2;
	fd = open_ctl(argv[1], &info);
	if (!info.regs_mappable) {
		printf("FAIL the register page cannot be mapped\n");
		return 1;
	}
	regs = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, VSCI_MMAP_REGS_OFFSET);
	if (regs == MAP_FAILED)
		die("mmap regs");
	stop = create_intr(open_sd(), strtoul(argv[2], NULL, 0));
	end = now_s() + atof(argv[3]);
	printf("FLOOD START\n");
	fflush(stdout);
	for (;;) {
		for (k = 0; k < 4096; k++) {
			/* mostly the host's control vector; also peers nobody has
			 * and every vector, which QEMU must drop quietly */
			uint32_t peer = (k & 7) ? 0 : (uint32_t)(rnd() & 0xffff);
			uint32_t vec = (k & 7) ? 0 : k % info.vectors;

			regs[VSCI_REG_DOORBELL / 4] = peer << 16 | vec;
		}
		rings += 4096;
		SCIWaitForInterrupt(stop, 0, 0, &err);
		if (err == SCI_ERR_OK)
			break;
		if (err != SCI_ERR_TIMEOUT)
			sci_die("SCIWaitForInterrupt", err);
		if (now_s() > end) {
			printf("FAIL nobody stopped the flood within %s s\n", argv[3]);
			return 1;
		}
	}
	printf("FLOOD DONE rings=%llu\n", rings);
	return 0;
}

static int cmd_deaf(int argc, char **argv)
{
	sci_desc_t sd;
	sci_local_interrupt_t stop;
	sci_local_data_interrupt_t ldi;
	unsigned int dno;
	sci_error_t err;

	if (argc < 5)
		return 2;
	sd = open_sd();
	(void)create_intr(sd, strtoul(argv[1], NULL, 0));
	dno = strtoul(argv[2], NULL, 0);
	SCICreateDataInterrupt(sd, &ldi, 0, &dno, NULL, NULL, SCI_FLAG_FIXED_INTNO, &err);
	if (err != SCI_ERR_OK)
		sci_die("SCICreateDataInterrupt", err);
	stop = create_intr(sd, strtoul(argv[3], NULL, 0));
	printf("DEAF READY\n");
	fflush(stdout);
	SCIWaitForInterrupt(stop, atoi(argv[4]) * 1000, 0, &err);
	if (err != SCI_ERR_OK)
		sci_die("waiting to be told to stop", err);
	printf("DEAF DONE\n");
	/* exit without removing anything: the node cleans up after us */
	return 0;
}

static sci_remote_interrupt_t connect_intr(sci_desc_t sd, unsigned int node, unsigned int no)
{
	sci_remote_interrupt_t ri;
	sci_error_t err;

	SCIConnectInterrupt(sd, &ri, node, 0, no, 60000, 0, &err);
	if (err != SCI_ERR_OK)
		sci_die("SCIConnectInterrupt", err);
	return ri;
}

static int cmd_trigger(int argc, char **argv)
{
	sci_remote_interrupt_t ri;
	sci_error_t err;
	long n, i, ok = 0;
	double t0;

	if (argc < 4)
		return 2;
	ri = connect_intr(open_sd(), strtoul(argv[1], NULL, 0), strtoul(argv[2], NULL, 0));
	n = atol(argv[3]);
	t0 = now_s();
	for (i = 0; i < n; i++) {
		SCITriggerInterrupt(ri, 0, &err);
		if (err != SCI_ERR_OK)
			sci_die("SCITriggerInterrupt", err);
		ok++;
	}
	printf("TRIGGERED ok=%ld in %.2f s\n", ok, now_s() - t0);
	return 0;
}

static int cmd_dtrigger(int argc, char **argv)
{
	sci_remote_data_interrupt_t rdi;
	sci_error_t err;
	unsigned char msg[16];
	long n, i, ok = 0, busy = 0;
	sci_desc_t sd;

	if (argc < 4)
		return 2;
	sd = open_sd();
	SCIConnectDataInterrupt(sd, &rdi, strtoul(argv[1], NULL, 0), 0, strtoul(argv[2], NULL, 0), 60000, 0, &err);
	if (err != SCI_ERR_OK)
		sci_die("SCIConnectDataInterrupt", err);
	n = atol(argv[3]);
	for (i = 0; i < n; i++) {
		memset(msg, (int)i, sizeof(msg));
		SCITriggerDataInterrupt(rdi, msg, sizeof(msg), 0, &err);
		if (err == SCI_ERR_OK)
			ok++;
		else if (err == SCI_ERR_BUSY)
			busy++;
		else
			sci_die("SCITriggerDataInterrupt", err);
	}
	printf("DTRIGGERED ok=%ld busy=%ld\n", ok, busy);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {
		{ "garbage", cmd_garbage }, { "header", cmd_header },   { "noreply", cmd_noreply },
		{ "flood", cmd_flood },     { "deaf", cmd_deaf },       { "trigger", cmd_trigger },
		{ "dtrigger", cmd_dtrigger },
	};
	size_t i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 0; argc > 1 && i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (!strcmp(argv[1], cmds[i].name)) {
			int r = cmds[i].fn(argc - 1, argv + 1);

			if (r == 2)
				fprintf(stderr, "%s: too few arguments for %s\n", argv[0], argv[1]);
			return r;
		}
	}
	fprintf(stderr, "usage: %s garbage|header|noreply|flood|deaf|trigger|dtrigger ... (see the source)\n", argv[0]);
	return 2;
}
