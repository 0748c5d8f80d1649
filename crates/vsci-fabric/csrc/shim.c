/*
 * Thin C shim over libfabric for vsci-fabric.
 *
 * libfabric's data-path entry points (fi_write, fi_cq_read, fi_mr_reg, ...)
 * are static inline functions that dispatch through per-object ops tables, so
 * Rust cannot call them through FFI directly.  This file turns the handful we
 * need into ordinary exported functions with plain-C arguments.  It holds no
 * policy: the Rust side decides which hints to try, what to register and how
 * to wait; this side only translates structs and return codes.
 */
#define _GNU_SOURCE /* dladdr, dlvsym */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <string.h>

/*
 * libfabric is opened by this file at first use (vf_load), not linked: the
 * five functions it exports that we call are renamed here to wrappers that
 * call through pointers.  Why: Debian's libfabric pulls in libinfinipath,
 * whose load constructor replaces the handlers of SIGSEGV, SIGBUS, SIGILL,
 * SIGABRT, SIGINT and SIGTERM with one that prints a backtrace and exits.
 * Linked, that ran before anything of ours could save what the program had
 * installed (a program that dlopen()s libsisci after installing its
 * handlers lost them).  Opened here, the dispositions are saved just before
 * and the replaced ones put back just after.
 */
#define fi_getinfo vf_dl_getinfo
#define fi_freeinfo vf_dl_freeinfo
#define fi_dupinfo vf_dl_dupinfo
#define fi_fabric vf_dl_fabric
#define fi_strerror vf_dl_strerror

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define VF_MAX_IOV 16

/* ---- libfabric, opened at first use ------------------------------------ */

static void *vf_lib;
static char vf_load_error[256];
static pthread_once_t vf_once = PTHREAD_ONCE_INIT;
static int (*p_getinfo)(uint32_t, const char *, const char *, uint64_t,
			const struct fi_info *, struct fi_info **);
static void (*p_freeinfo)(struct fi_info *);
static struct fi_info *(*p_dupinfo)(const struct fi_info *);
static int (*p_fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
static const char *(*p_strerror)(int);

/* glibc's own name of sigaction, which reaches the kernel past libsisci's
 * exported sigaction (the program's view, crates/sisci/src/signals.rs). */
extern int __sigaction(int, const struct sigaction *, struct sigaction *);

static int from_backtrace_library(const struct sigaction *a)
{
	Dl_info i;

	if (a->sa_handler == SIG_DFL || a->sa_handler == SIG_IGN)
		return 0;
	if (!dladdr((void *)a->sa_handler, &i) || !i.dli_fname)
		return 0;
	return strstr(i.dli_fname, "infinipath") || strstr(i.dli_fname, "libpsm");
}

/* Put back, for every signal a library loaded with libfabric took, what was
 * there before: through `set` at the level `get` reads. */
static void vf_put_back(const struct sigaction *before, const int *had,
			int (*get_set)(int, const struct sigaction *, struct sigaction *))
{
	for (int s = 1; s < NSIG; s++) {
		struct sigaction now;

		if (!had[s] || get_set(s, NULL, &now))
			continue;
		if (now.sa_handler != before[s].sa_handler && from_backtrace_library(&now))
			get_set(s, &before[s], NULL);
	}
}

static void vf_load(void)
{
	/* Two levels: what the kernel holds, and what the program sees (the
	 * process's `sigaction`: libsisci's, which records the program's
	 * SIGBUS disposition while the kernel keeps the trap's handler). */
	static struct sigaction kernel[NSIG], view[NSIG];
	static int had_kernel[NSIG], had_view[NSIG];
	int (*process_sigaction)(int, const struct sigaction *, struct sigaction *) =
		(int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_DEFAULT, "sigaction");

	if (!process_sigaction)
		process_sigaction = __sigaction;
	for (int s = 1; s < NSIG; s++) {
		had_kernel[s] = __sigaction(s, NULL, &kernel[s]) == 0;
		had_view[s] = process_sigaction(s, NULL, &view[s]) == 0;
	}
	vf_lib = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	if (vf_lib) {
		vf_put_back(view, had_view, process_sigaction);
		vf_put_back(kernel, had_kernel, __sigaction);
	} else {
		snprintf(vf_load_error, sizeof vf_load_error, "%s", dlerror());
		return;
	}
	/* The versions the headers we were built with name. */
	p_getinfo = dlvsym(vf_lib, "fi_getinfo", "FABRIC_1.3");
	p_freeinfo = dlvsym(vf_lib, "fi_freeinfo", "FABRIC_1.3");
	p_dupinfo = dlvsym(vf_lib, "fi_dupinfo", "FABRIC_1.3");
	p_fabric = dlvsym(vf_lib, "fi_fabric", "FABRIC_1.1");
	p_strerror = dlvsym(vf_lib, "fi_strerror", "FABRIC_1.0");
	if (!p_getinfo || !p_freeinfo || !p_dupinfo || !p_fabric || !p_strerror)
		snprintf(vf_load_error, sizeof vf_load_error,
			 "libfabric.so.1 lacks fi_getinfo@FABRIC_1.3 or a sibling: %s", dlerror());
}

/* 0 once libfabric is usable; otherwise -FI_ENOSYS (vf_load_failure says why). */
static int vf_loaded(void)
{
	pthread_once(&vf_once, vf_load);
	return vf_load_error[0] ? -FI_ENOSYS : 0;
}

const char *vf_load_failure(void)
{
	return vf_loaded() ? vf_load_error : NULL;
}

int vf_dl_getinfo(uint32_t version, const char *node, const char *service,
		  uint64_t flags, const struct fi_info *hints, struct fi_info **info)
{
	int ret = vf_loaded();

	return ret ? ret : p_getinfo(version, node, service, flags, hints, info);
}

void vf_dl_freeinfo(struct fi_info *info)
{
	if (!vf_loaded())
		p_freeinfo(info);
}

struct fi_info *vf_dl_dupinfo(const struct fi_info *info)
{
	return vf_loaded() ? NULL : p_dupinfo(info);
}

int vf_dl_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	int ret = vf_loaded();

	return ret ? ret : p_fabric(attr, fabric, context);
}

const char *vf_dl_strerror(int errnum)
{
	return vf_loaded() ? "libfabric could not be loaded" : p_strerror(errnum);
}

struct vf_ctx {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	int source;	/* FI_SOURCE granted: completions carry the sender */
	int cq_wait;	/* the CQ has a wait object: fi_cq_sread works */
};

/* What Rust asks for.  Kept flat so the Rust mirror is trivial. */
struct vf_hints {
	const char *prov_name;
	const char *node;	/* local address to bind, or NULL */
	uint64_t caps;
	uint64_t tx_msg_order;
	uint64_t tx_op_flags;
	uint64_t mr_mode;
	int want_cq_wait;
};

/* What the provider granted. */
struct vf_attrs {
	uint64_t caps;
	uint64_t mr_mode;
	uint64_t tx_msg_order;
	uint64_t tx_op_flags;
	uint64_t mr_key_size;
	uint64_t inject_size;
	uint64_t max_msg_size;
	uint64_t iov_limit;	/* min of tx iov_limit and rma_iov_limit */
	uint64_t max_order_waw_size;
	int data_progress;
	int cq_wait;
	char prov_name[64];
};

/* One completion, independent of the CQ format the provider uses. */
struct vf_comp {
	void *context;
	uint64_t flags;
	uint64_t len;
	uint64_t src;	/* fi_addr_t of the sender, FI_ADDR_NOTAVAIL if unknown */
};

/* extra_mr: a region that the endpoint may still be using (the receive
 * pool's), closed after the endpoint and before the domain. */
void vf_close(struct vf_ctx *c, struct fid_mr *extra_mr)
{
	if (!c)
		return;
	/* Endpoint first: it references the AV and CQ, and closing it
	 * discards the receives still posted into our buffers. */
	if (c->ep)
		fi_close(&c->ep->fid);
	if (extra_mr)
		fi_close(&extra_mr->fid);
	if (c->cq)
		fi_close(&c->cq->fid);
	if (c->av)
		fi_close(&c->av->fid);
	if (c->domain)
		fi_close(&c->domain->fid);
	if (c->fabric)
		fi_close(&c->fabric->fid);
	if (c->info)
		fi_freeinfo(c->info);
	free(c);
}

int vf_open(const struct vf_hints *h, struct vf_ctx **out, struct vf_attrs *a)
{
	struct fi_info *hints, *info = NULL;
	struct vf_ctx *c;
	int ret;

	*out = NULL;
	hints = fi_allocinfo();
	if (!hints)
		return -FI_ENOMEM;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = h->caps;
	/* mode 0: we cannot give the provider per-operation fi_context space,
	 * so providers that need FI_CONTEXT are filtered out. */
	hints->mode = 0;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->domain_attr->mr_mode = (int)h->mr_mode;
	hints->tx_attr->msg_order = h->tx_msg_order;
	hints->tx_attr->op_flags = h->tx_op_flags;
	if (h->prov_name) {
		hints->fabric_attr->prov_name = strdup(h->prov_name);
		if (!hints->fabric_attr->prov_name) {
			fi_freeinfo(hints);
			return -FI_ENOMEM;
		}
	}
	/* With FI_SOURCE the node names our own address; the service (port)
	 * is left to the provider. */
	ret = fi_getinfo(FI_VERSION(1, 17), h->node, NULL,
			 h->node ? FI_SOURCE : 0, hints, &info);
	fi_freeinfo(hints);
	if (ret)
		return ret;

	c = calloc(1, sizeof(*c));
	if (!c) {
		fi_freeinfo(info);
		return -FI_ENOMEM;
	}
	c->info = info;
	c->source = (info->caps & FI_SOURCE) != 0;

	ret = fi_fabric(info->fabric_attr, &c->fabric, NULL);
	if (ret)
		goto err;
	ret = fi_domain(c->fabric, info, &c->domain, NULL);
	if (ret)
		goto err;

	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	ret = fi_av_open(c->domain, &av_attr, &c->av, NULL);
	if (ret)
		goto err;

	/* Preference: an fd (pollable, lets Rust spin-then-block on it), any
	 * wait object (fi_cq_sread works), none (polling only). */
	static const enum fi_wait_obj waits[] = {
		FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_NONE
	};
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_DATA };
	for (size_t i = h->want_cq_wait ? 0 : 2; i < 3; i++) {
		cq_attr.wait_obj = waits[i];
		ret = fi_cq_open(c->domain, &cq_attr, &c->cq, NULL);
		if (!ret)
			break;
	}
	if (ret)
		goto err;
	c->cq_wait = cq_attr.wait_obj != FI_WAIT_NONE;

	ret = fi_endpoint(c->domain, info, &c->ep, NULL);
	if (ret)
		goto err;
	ret = fi_ep_bind(c->ep, &c->av->fid, 0);
	if (ret)
		goto err;
	ret = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV);
	if (ret)
		goto err;
	ret = fi_enable(c->ep);
	if (ret)
		goto err;

	memset(a, 0, sizeof(*a));
	a->caps = info->caps;
	a->mr_mode = (uint64_t)(unsigned)info->domain_attr->mr_mode;
	a->tx_msg_order = info->tx_attr->msg_order;
	a->tx_op_flags = info->tx_attr->op_flags;
	a->mr_key_size = info->domain_attr->mr_key_size;
	a->inject_size = info->tx_attr->inject_size;
	a->max_msg_size = info->ep_attr->max_msg_size;
	a->iov_limit = info->tx_attr->iov_limit < info->tx_attr->rma_iov_limit ?
		info->tx_attr->iov_limit : info->tx_attr->rma_iov_limit;
	a->max_order_waw_size = info->ep_attr->max_order_waw_size;
	a->data_progress = info->domain_attr->data_progress;
	a->cq_wait = c->cq_wait;
	strncpy(a->prov_name, info->fabric_attr->prov_name, sizeof(a->prov_name) - 1);
	*out = c;
	return 0;
err:
	vf_close(c, NULL);
	return ret;
}

int vf_getname(struct vf_ctx *c, void *buf, size_t *len)
{
	return fi_getname(&c->ep->fid, buf, len);
}

/* Returns 1 on success (count inserted), like fi_av_insert. */
int vf_av_insert(struct vf_ctx *c, const void *addr, uint64_t *fi_addr)
{
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int ret = fi_av_insert(c->av, addr, 1, &a, 0, NULL);
	*fi_addr = a;
	return ret;
}

int vf_av_remove(struct vf_ctx *c, uint64_t fi_addr)
{
	fi_addr_t a = fi_addr;
	return fi_av_remove(c->av, &a, 1, 0);
}

int vf_mr_reg(struct vf_ctx *c, void *buf, size_t len, uint64_t access,
	      uint64_t requested_key, struct fid_mr **mr, uint64_t *key,
	      void **desc)
{
	int ret = fi_mr_reg(c->domain, buf, len, access, 0, requested_key, 0,
			    mr, NULL);
	if (ret)
		return ret;
	/* FI_MR_ENDPOINT: the region is only usable once bound to the
	 * endpoint it will be accessed through, and enabled. */
	if (c->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		ret = fi_mr_bind(*mr, &c->ep->fid, 0);
		if (!ret)
			ret = fi_mr_enable(*mr);
		if (ret) {
			fi_close(&(*mr)->fid);
			*mr = NULL;
			return ret;
		}
	}
	*key = fi_mr_key(*mr);
	*desc = fi_mr_desc(*mr);
	return 0;
}

int vf_mr_close(struct fid_mr *mr)
{
	return fi_close(&mr->fid);
}

/* Writes count local buffers to count remote ranges of one region (local
 * buffer i has the length of remote range i), as one operation;
 * count <= vf_attrs.iov_limit. */
ssize_t vf_writev(struct vf_ctx *c, const struct iovec *iov, void **desc,
		  const uint64_t *raddr, size_t count, uint64_t dest,
		  uint64_t key, void *context, uint64_t flags)
{
	struct fi_rma_iov rma[VF_MAX_IOV];
	struct fi_msg_rma msg = {
		.msg_iov = iov,
		.desc = desc,
		.iov_count = count,
		.addr = dest,
		.rma_iov = rma,
		.rma_iov_count = count,
		.context = context,
		.data = 0,
	};

	if (count == 0 || count > VF_MAX_IOV)
		return -FI_EINVAL;
	for (size_t i = 0; i < count; i++) {
		rma[i].addr = raddr[i];
		rma[i].len = iov[i].iov_len;
		rma[i].key = key;
	}
	return fi_writemsg(c->ep, &msg, flags);
}

ssize_t vf_readmsg(struct vf_ctx *c, void *buf, size_t len, void *desc,
		   uint64_t dest, uint64_t raddr, uint64_t key, void *context,
		   uint64_t flags)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct fi_rma_iov rma = { .addr = raddr, .len = len, .key = key };
	struct fi_msg_rma msg = {
		.msg_iov = &iov,
		.desc = &desc,
		.iov_count = 1,
		.addr = dest,
		.rma_iov = &rma,
		.rma_iov_count = 1,
		.context = context,
		.data = 0,
	};
	return fi_readmsg(c->ep, &msg, flags);
}

ssize_t vf_send(struct vf_ctx *c, const void *buf, size_t len, void *desc,
		uint64_t dest, void *context)
{
	return fi_send(c->ep, buf, len, desc, dest, context);
}

ssize_t vf_recv(struct vf_ctx *c, void *buf, size_t len, void *desc,
		void *context)
{
	return fi_recv(c->ep, buf, len, desc, FI_ADDR_UNSPEC, context);
}

static ssize_t convert(const struct fi_cq_data_entry *e, const fi_addr_t *src,
		       ssize_t n, struct vf_comp *out)
{
	for (ssize_t i = 0; i < n; i++) {
		out[i].context = e[i].op_context;
		out[i].flags = e[i].flags;
		out[i].len = e[i].len;
		out[i].src = src ? src[i] : FI_ADDR_NOTAVAIL;
	}
	return n;
}

#define VF_MAX_BATCH 32

/* Non-blocking.  Returns the count, -FI_EAGAIN when empty, -FI_EAVAIL when
 * an error completion is at the head (read it with vf_cq_readerr). */
ssize_t vf_cq_read(struct vf_ctx *c, struct vf_comp *out, size_t count)
{
	struct fi_cq_data_entry e[VF_MAX_BATCH];
	fi_addr_t src[VF_MAX_BATCH];
	ssize_t n;

	if (count > VF_MAX_BATCH)
		count = VF_MAX_BATCH;
	if (c->source) {
		n = fi_cq_readfrom(c->cq, e, count, src);
		return n > 0 ? convert(e, src, n, out) : n;
	}
	n = fi_cq_read(c->cq, e, count);
	return n > 0 ? convert(e, NULL, n, out) : n;
}

/* Blocking with a timeout; only valid when the CQ has a wait object.
 * Returns -FI_EAGAIN on timeout. */
ssize_t vf_cq_sread(struct vf_ctx *c, struct vf_comp *out, size_t count,
		    int timeout_ms)
{
	struct fi_cq_data_entry e[VF_MAX_BATCH];
	fi_addr_t src[VF_MAX_BATCH];
	ssize_t n;

	if (!c->cq_wait)
		return -FI_ENOSYS;
	if (count > VF_MAX_BATCH)
		count = VF_MAX_BATCH;
	if (c->source) {
		n = fi_cq_sreadfrom(c->cq, e, count, src, NULL, timeout_ms);
		return n > 0 ? convert(e, src, n, out) : n;
	}
	n = fi_cq_sread(c->cq, e, count, NULL, timeout_ms);
	return n > 0 ? convert(e, NULL, n, out) : n;
}

/* Reads one error completion.  Returns 1 if one was read, -FI_EAGAIN if
 * none; msg receives the provider's explanation. */
ssize_t vf_cq_readerr(struct vf_ctx *c, void **context, int *err,
		      int *prov_errno, char *msg, size_t msglen)
{
	struct fi_cq_err_entry e;
	ssize_t ret;

	memset(&e, 0, sizeof(e));
	ret = fi_cq_readerr(c->cq, &e, 0);
	if (ret <= 0)
		return ret;
	*context = e.op_context;
	*err = e.err;
	*prov_errno = e.prov_errno;
	if (msg && msglen) {
		const char *s = fi_cq_strerror(c->cq, e.prov_errno, e.err_data,
					       NULL, 0);
		snprintf(msg, msglen, "%s (%s)", fi_strerror(e.err),
			 s ? s : "no provider detail");
	}
	return ret;
}

const char *vf_strerror(int err)
{
	return fi_strerror(err);
}

/* The CQ's wait object as a pollable fd, or a negative error when it is
 * not an fd.  For rxm this is an epoll fd over the connections' sockets, so
 * it becomes readable on incoming RMA too, which produces no completion. */
int vf_cq_wait_fd(struct vf_ctx *c)
{
	enum fi_wait_obj obj = FI_WAIT_NONE;
	int fd = -1, ret;

	if (!c->cq_wait)
		return -FI_ENOSYS;
	ret = fi_control(&c->cq->fid, FI_GETWAITOBJ, &obj);
	if (ret)
		return ret;
	if (obj != FI_WAIT_FD)
		return -FI_ENOSYS;
	ret = fi_control(&c->cq->fid, FI_GETWAIT, &fd);
	return ret ? ret : fd;
}

/* 0 when it is safe to block on the wait fd, -FI_EAGAIN when the CQ must
 * be polled first (fi_trywait protocol). */
int vf_trywait(struct vf_ctx *c)
{
	struct fid *fids[1] = { &c->cq->fid };
	return fi_trywait(c->fabric, fids, 1);
}
