// SPDX-License-Identifier: GPL-2.0
/*
 * vsci_guest: vsci's driver for QEMU ivshmem devices (PCI 1af4:1110) in a
 * guest. It gives unprivileged programs (libsisci) what they need and
 * nothing more:
 *
 *  - ivshmem-doorbell (has MSI-X, BAR1): /dev/vsci-ctlN, the control channel
 *    to the node. Per open file, one of:
 *      a session (VSCI_IOC_SESSION): a slot of the node's control region,
 *        whose private area is then all that mmap offset 0 reaches; closing
 *        the file tells the node, so a killed program is cleaned up;
 *      a vector file (VSCI_IOC_BIND_VECTOR): an eventfd-like counter of one
 *        of our MSI-X vectors, for read() and poll();
 *      a doorbell file (VSCI_IOC_BIND_DOORBELL): write() rings one peer's
 *        vector.
 *    Any file also maps BAR0's register page (doorbell without a system
 *    call) and takes the INFO/RING/WAIT ioctls; mapping the whole control
 *    region takes CAP_SYS_ADMIN (tools and tests), since it holds every
 *    session's area. Interrupts are counted per vector; a waiter passes the
 *    count it last saw, so no interrupt between two waits is lost.
 *  - ivshmem-plain (no MSI-X) on PCI bus 0: /dev/vsci-winS, S = its PCI slot,
 *    a segment window hot-plugged by the node at the slot it chose and told
 *    libsisci about. mmap of BAR2. While the node is open (first open to last
 *    release, mappings included), the driver keeps word S of the control
 *    region's window table at 1, so the node knows when the guest has let go.
 *    ivshmem-plain elsewhere: /dev/vsci-segN, not tracked.
 *
 * Why a driver at all: the device delivers host-to-guest notifications only
 * as MSI-X, which needs a kernel driver (uio_pci_generic is INTx only, VFIO
 * needs an IOMMU), and a freshly hot-plugged device decodes nothing until
 * it is enabled.
 *
 * Unplug: user mappings are zapped and later accesses get SIGBUS, waiters
 * wake with ENODEV, and the device state lives until the last file closes.
 *
 * One file of about 1,200 lines, as a Linux driver of this size is (Kbuild:
 * obj-m := vsci_guest.o): the doorbell and the plain devices are one
 * struct vsci_dev with one set of file operations, one PCI probe and one
 * unplug path, and the ioctl ABI is the header next to it (vsci_guest.h).
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/fs.h>
#include <linux/cdev.h>
#include <linux/mm.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/wait.h>
#include <linux/poll.h>
#include <linux/uaccess.h>
#include <linux/slab.h>
#include <linux/kref.h>
#include <linux/rwsem.h>
#include <linux/mutex.h>
#include <linux/list.h>
#include <linux/bitmap.h>
#include <linux/capability.h>
#include <linux/sizes.h>

#include "vsci_guest.h"

#define VSCI_MAX_MINORS 256
#define VSCI_MAX_VECTORS 64	/* QEMU's ivshmem server limit */
#define VSCI_GEN_MASK 0xffffffU	/* 24-bit session generations */

struct vsci_vec {
	atomic64_t count;
	wait_queue_head_t wq;
	bool requested;
};

struct vsci_dev {
	struct kref ref;
	struct pci_dev *pdev;
	struct device *dev;		/* the class device, /dev/vsci-* */
	/*
	 * Read-held while BARs are touched (ring, info, mmap, faults,
	 * session and window words); write-held by remove to flip @gone, so
	 * nothing touches a BAR of an unplugged device.
	 */
	struct rw_semaphore lock;
	bool gone;
	wait_queue_head_t gone_wq;	/* poll() learns of the unplug */
	int kind;
	int minor;
	int index;			/* N of vsci-ctlN/vsci-segN, or -1 */
	int slot;			/* S of vsci-winS, or -1 */
	int win_opens;			/* windows: open files, vsci_ctl_lock */
	void __iomem *regs;
	void __iomem *shm;		/* reserves BAR2's cacheable memtype */
	resource_size_t regs_start, regs_len, shm_start, shm_len;
	bool regs_mappable;
	/*
	 * Every open file shares this inode's address_space, so that one
	 * unmap_mapping_range() on unplug reaches every user mapping, even
	 * ones made through another device node for the same minor.
	 */
	struct inode *map_inode;
	unsigned int nvec;
	struct vsci_vec *vec;
	/*
	 * ctl: session slots this driver handed to a file that is still
	 * open. A slot is reusable only when it is clear here *and* the
	 * node has answered CLOSING with FREE in the region.
	 */
	struct mutex sess_lock;
	DECLARE_BITMAP(sess_held, VSCI_CTL_MAX_SESSIONS);
	struct list_head ctl_node;	/* on vsci_ctls, vsci_ctl_lock */
};

enum {
	VSCI_BIND_NONE,
	VSCI_BIND_SESSION,
	VSCI_BIND_VECTOR,
	VSCI_BIND_DOORBELL,
};

/* one per open file */
struct vsci_file {
	struct vsci_dev *v;
	struct mutex bind_lock;	/* serializes the binding ioctls */
	/*
	 * VSCI_BIND_*: set once, under bind_lock, with a release store after
	 * the fields below are filled in; readers that do not take bind_lock
	 * (mmap, read, write, poll) load it with acquire.
	 */
	int bind;
	u32 sess_index, sess_gen;	/* VSCI_BIND_SESSION */
	u32 vector;			/* VSCI_BIND_VECTOR */
	atomic64_t seen;		/* count at the last read() */
	u32 bell;			/* VSCI_BIND_DOORBELL: register value */
};

static dev_t vsci_devt;
static struct cdev vsci_cdev;
static struct class *vsci_class;
static DEFINE_MUTEX(vsci_lock);	/* minors, map_inode */
static DEFINE_IDR(vsci_minors);
static DEFINE_IDA(vsci_ctl_ida);
static DEFINE_IDA(vsci_seg_ida);

/*
 * The control device, whose region gets the window words: the first bound
 * ctl device still present (vsci_ctls is in bind order). It holds a
 * reference; vsci_windows[] does not need one, since remove takes a window
 * out of it before the device can go. vsci_ctl_lock covers all of these and
 * every window's win_opens, so the words are written in the order the
 * opens and releases happened. Lock order: vsci_ctl_lock, then a device's
 * lock.
 */
static DEFINE_MUTEX(vsci_ctl_lock);
static LIST_HEAD(vsci_ctls);
static struct vsci_dev *vsci_ctl;
static struct vsci_dev *vsci_windows[VSCI_CTL_MAX_WINDOWS];

static void vsci_free(struct kref *ref)
{
	struct vsci_dev *v = container_of(ref, struct vsci_dev, ref);

	if (v->map_inode)
		iput(v->map_inode);
	kfree(v->vec);
	kfree(v);
}

static irqreturn_t vsci_irq(int irq, void *arg)
{
	struct vsci_vec *vec = arg;

	/* rev 1 ivshmem with MSI-X has nothing to acknowledge */
	atomic64_inc(&vec->count);
	wake_up_interruptible_all(&vec->wq);
	return IRQ_HANDLED;
}

/*
 * Is @c's BAR2 a control region laid out by vsci's node? The driver writes
 * into a region only if so: another doorbell device's memory is not ours to
 * scribble on. Caller holds c->lock for reading, c not gone.
 */
static int vsci_region_check(struct vsci_dev *c)
{
	if (c->kind != VSCI_KIND_CTL || c->shm_len < VSCI_CTL_MIN_SIZE)
		return -EINVAL;
	if (ioread32(c->shm) != VSCI_CTL_MAGIC)
		return -EPROTO;
	return 0;
}

/* Tell the node its control words changed. Caller holds c->lock, not gone. */
static void vsci_ring_host(struct vsci_dev *c)
{
	/* the words must be visible before the node looks at them */
	wmb();
	iowrite32(0 << 16 | VSCI_CTL_VECTOR, c->regs + VSCI_REG_DOORBELL);
}

/* Set window @slot's word to @val and ring the node. vsci_ctl_lock held. */
static void vsci_window_word(int slot, u32 val)
{
	struct vsci_dev *c = vsci_ctl;

	if (!c)
		return;		/* no control channel (yet): nobody to tell */
	down_read(&c->lock);
	if (!c->gone && !vsci_region_check(c)) {
		iowrite32(val, c->shm + VSCI_CTL_WINDOWS + 4 * slot);
		vsci_ring_host(c);
	}
	up_read(&c->lock);
}

/*
 * A device just became the control device: bring its whole window table up
 * to date (it may be a new region, or windows were opened while there was
 * no control device) and ring the node if anything changed.
 * vsci_ctl_lock held.
 */
static void vsci_ctl_sync(void)
{
	struct vsci_dev *c = vsci_ctl;
	bool changed = false;
	u32 want;
	int s;

	if (!c)
		return;
	down_read(&c->lock);
	if (!c->gone && !vsci_region_check(c)) {
		for (s = 0; s < VSCI_CTL_MAX_WINDOWS; s++) {
			want = vsci_windows[s] && vsci_windows[s]->win_opens;
			if (ioread32(c->shm + VSCI_CTL_WINDOWS + 4 * s) != want) {
				iowrite32(want, c->shm + VSCI_CTL_WINDOWS + 4 * s);
				changed = true;
			}
		}
		if (changed)
			vsci_ring_host(c);
	}
	up_read(&c->lock);
}

static void vsci_window_get(struct vsci_dev *v)
{
	mutex_lock(&vsci_ctl_lock);
	if (v->win_opens++ == 0 && vsci_windows[v->slot] == v)
		vsci_window_word(v->slot, 1);
	mutex_unlock(&vsci_ctl_lock);
}

static void vsci_window_put(struct vsci_dev *v)
{
	/*
	 * Not after unplug (vsci_windows[] no longer names v): remove has
	 * written the 0 already, and the slot may hold a new window by now.
	 */
	mutex_lock(&vsci_ctl_lock);
	if (--v->win_opens == 0 && vsci_windows[v->slot] == v)
		vsci_window_word(v->slot, 0);
	mutex_unlock(&vsci_ctl_lock);
}

static void __iomem *vsci_sess_word(struct vsci_dev *v, u32 i)
{
	return v->shm + VSCI_CTL_SESSIONS + 4 * i;
}

/* Mark session @i CLOSING, for the node to clean up and free. */
static void vsci_session_close(struct vsci_dev *v, u32 i, u32 gen)
{
	down_read(&v->lock);
	if (!v->gone) {
		mutex_lock(&v->sess_lock);
		iowrite32(gen << 8 | VSCI_SESSION_CLOSING, vsci_sess_word(v, i));
		clear_bit(i, v->sess_held);
		vsci_ring_host(v);
		mutex_unlock(&v->sess_lock);
	}
	up_read(&v->lock);
}

static int vsci_open(struct inode *inode, struct file *f)
{
	struct vsci_file *vf;
	struct vsci_dev *v;
	int ret = 0;

	vf = kzalloc(sizeof(*vf), GFP_KERNEL);
	if (!vf)
		return -ENOMEM;
	mutex_init(&vf->bind_lock);
	mutex_lock(&vsci_lock);
	v = idr_find(&vsci_minors, iminor(inode));
	if (!v || READ_ONCE(v->gone)) {
		ret = -ENODEV;
		goto out;
	}
	if (!v->map_inode) {
		ihold(inode);
		v->map_inode = inode;
	}
	f->f_mapping = v->map_inode->i_mapping;
	kref_get(&v->ref);
	vf->v = v;
	f->private_data = vf;
out:
	mutex_unlock(&vsci_lock);
	if (ret) {
		kfree(vf);
		return ret;
	}
	if (v->slot >= 0)
		vsci_window_get(v);
	return 0;
}

/* The last reference to the file: every mapping of it is gone by now. */
static int vsci_release(struct inode *inode, struct file *f)
{
	struct vsci_file *vf = f->private_data;
	struct vsci_dev *v = vf->v;

	if (vf->bind == VSCI_BIND_SESSION)
		vsci_session_close(v, vf->sess_index, vf->sess_gen);
	if (v->slot >= 0)
		vsci_window_put(v);
	kref_put(&v->ref, vsci_free);
	kfree(vf);
	return 0;
}

/*
 * Mappings are filled at fault time, not at mmap(): a fault only happens in a
 * VMA that is already linked to our address_space, so unplug's
 * unmap_mapping_range() is sure to find every PTE we ever inserted; a PTE
 * inserted by mmap() itself could slip in before the VMA is linked.
 */
static vm_fault_t vsci_fault_range(struct vm_fault *vmf, resource_size_t base)
{
	struct vm_area_struct *vma = vmf->vma;
	struct vsci_file *vf = vma->vm_file->private_data;
	struct vsci_dev *v = vf->v;
	unsigned long addr, start, end, pfn;
	vm_fault_t ret = VM_FAULT_NOPAGE;

	down_read(&v->lock);
	if (v->gone) {
		up_read(&v->lock);
		return VM_FAULT_SIGBUS;
	}
	/* fill the 2 MiB around the fault: big windows take few faults */
	start = max(ALIGN_DOWN(vmf->address, SZ_2M), vma->vm_start);
	end = min(ALIGN_DOWN(vmf->address, SZ_2M) + SZ_2M, vma->vm_end);
	for (addr = start; addr < end; addr += PAGE_SIZE) {
		pfn = (base >> PAGE_SHIFT) + vma->vm_pgoff +
		      ((addr - vma->vm_start) >> PAGE_SHIFT);
		/* a PTE already there (a racing fault) is not an error */
		ret = vmf_insert_pfn(vma, addr, pfn);
		if (ret != VM_FAULT_NOPAGE)
			break;
	}
	up_read(&v->lock);
	return ret;
}

static vm_fault_t vsci_shm_fault(struct vm_fault *vmf)
{
	struct vsci_file *vf = vmf->vma->vm_file->private_data;

	return vsci_fault_range(vmf, vf->v->shm_start);
}

static vm_fault_t vsci_regs_fault(struct vm_fault *vmf)
{
	struct vsci_file *vf = vmf->vma->vm_file->private_data;

	return vsci_fault_range(vmf, vf->v->regs_start);
}

/* the VMA's file keeps the device (and so v) alive: no open/close needed */
static const struct vm_operations_struct vsci_shm_vm_ops = {
	.fault = vsci_shm_fault,
};

static const struct vm_operations_struct vsci_regs_vm_ops = {
	.fault = vsci_regs_fault,
};

static int vsci_mmap(struct file *f, struct vm_area_struct *vma)
{
	struct vsci_file *vf = f->private_data;
	struct vsci_dev *v = vf->v;
	unsigned long pages = vma_pages(vma);
	unsigned long off = 0, len = v->shm_len >> PAGE_SHIFT;
	int ret = 0;

	/* a private (copy-on-write) map of device memory would share nothing */
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;

	/*
	 * What offset 0 of a control device reaches: a session's own area,
	 * or, for the administrator only, the whole region with every
	 * session's area in it. The opener's capability counts, as for any
	 * check on an open file: a root tool may hand its descriptor on, and
	 * a set-uid program is not fooled into mapping a user's descriptor.
	 */
	if (v->kind == VSCI_KIND_CTL &&
	    vma->vm_pgoff != (VSCI_MMAP_REGS_OFFSET >> PAGE_SHIFT)) {
		if (smp_load_acquire(&vf->bind) == VSCI_BIND_SESSION) {
			off = VSCI_CTL_SESSION_AREA(vf->sess_index) >> PAGE_SHIFT;
			len = VSCI_SESSION_SIZE >> PAGE_SHIFT;
		} else if (!file_ns_capable(f, &init_user_ns, CAP_SYS_ADMIN)) {
			return -EPERM;
		}
	}

	down_read(&v->lock);
	if (v->gone) {
		ret = -ENODEV;
	} else if (vma->vm_pgoff == (VSCI_MMAP_REGS_OFFSET >> PAGE_SHIFT)) {
		/*
		 * Only a page that holds nothing but our registers may be
		 * handed out: a 256-byte BAR0 may share its page with
		 * another device's registers. vsci's image boots with
		 * pci=resource_alignment=12@pci:1af4:1110 to get a page.
		 */
		if (v->kind != VSCI_KIND_CTL || !v->regs_mappable || pages != 1) {
			ret = -EINVAL;
		} else {
			vma->vm_pgoff = 0;
			vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
			vma->vm_ops = &vsci_regs_vm_ops;
		}
	} else if (vma->vm_pgoff < len && pages <= len - vma->vm_pgoff &&
		   off + len <= v->shm_len >> PAGE_SHIFT) {
		/*
		 * BAR2 is host RAM behind a prefetchable BAR: cacheable, as
		 * reserved by ioremap_cache() in probe (an unreserved range
		 * would be mapped uncached). A session's VMA is moved to
		 * its area here; faults then need no session lookup.
		 */
		vma->vm_pgoff += off;
		vma->vm_ops = &vsci_shm_vm_ops;
	} else {
		ret = -EINVAL;	/* outside the BAR or the session's area */
	}
	if (!ret)
		vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP;
	up_read(&v->lock);
	return ret;
}

static ssize_t vsci_read(struct file *f, char __user *buf, size_t len,
			 loff_t *ppos)
{
	struct vsci_file *vf = f->private_data;
	struct vsci_dev *v = vf->v;
	struct vsci_vec *vec;
	s64 count, seen;
	int ret;

	if (smp_load_acquire(&vf->bind) != VSCI_BIND_VECTOR || len < 8)
		return -EINVAL;
	vec = &v->vec[vf->vector];
	for (;;) {
		if (READ_ONCE(v->gone))
			return -ENODEV;
		count = atomic64_read(&vec->count);
		seen = atomic64_read(&vf->seen);
		/* two readers of one file must not both take the same count */
		if (count != seen) {
			if (atomic64_cmpxchg(&vf->seen, seen, count) == seen)
				break;
			continue;
		}
		if (f->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = wait_event_interruptible(vec->wq,
			atomic64_read(&vec->count) != atomic64_read(&vf->seen) ||
			READ_ONCE(v->gone));
		if (ret)
			return ret;
	}
	if (put_user((u64)(count - seen), (u64 __user *)buf))
		return -EFAULT;
	return 8;
}

static ssize_t vsci_write(struct file *f, const char __user *buf, size_t len,
			  loff_t *ppos)
{
	struct vsci_file *vf = f->private_data;
	struct vsci_dev *v = vf->v;
	ssize_t ret = 8;

	/* as an eventfd: 8 bytes, whose value does not matter here */
	if (smp_load_acquire(&vf->bind) != VSCI_BIND_DOORBELL || len < 8)
		return -EINVAL;
	down_read(&v->lock);
	if (v->gone)
		ret = -ENODEV;
	else
		iowrite32(vf->bell, v->regs + VSCI_REG_DOORBELL);
	up_read(&v->lock);
	return ret;
}

static __poll_t vsci_poll(struct file *f, struct poll_table_struct *pt)
{
	struct vsci_file *vf = f->private_data;
	struct vsci_dev *v = vf->v;
	int bind = smp_load_acquire(&vf->bind);
	struct vsci_vec *vec = NULL;

	poll_wait(f, &v->gone_wq, pt);
	if (bind == VSCI_BIND_VECTOR) {
		vec = &v->vec[vf->vector];
		poll_wait(f, &vec->wq, pt);
	}
	if (READ_ONCE(v->gone))
		return EPOLLERR | EPOLLHUP;
	if (vec && atomic64_read(&vec->count) != atomic64_read(&vf->seen))
		return EPOLLIN | EPOLLRDNORM;
	if (bind == VSCI_BIND_DOORBELL)
		return EPOLLOUT | EPOLLWRNORM;
	return 0;
}

static long vsci_info(struct vsci_dev *v, void __user *arg)
{
	struct vsci_info info = {};

	down_read(&v->lock);
	if (v->gone) {
		up_read(&v->lock);
		return -ENODEV;
	}
	info.kind = v->kind;
	if (v->kind == VSCI_KIND_CTL)
		info.ivposition = ioread32(v->regs + VSCI_REG_IVPOSITION);
	info.vectors = v->nvec;
	info.regs_mappable = v->regs_mappable;
	info.regs_size = v->regs_len;
	info.shm_size = v->shm_len;
	strscpy(info.pci_address, pci_name(v->pdev), sizeof(info.pci_address));
	up_read(&v->lock);
	return copy_to_user(arg, &info, sizeof(info)) ? -EFAULT : 0;
}

static long vsci_ring(struct vsci_dev *v, void __user *arg)
{
	struct vsci_ring r;
	long ret = 0;

	if (copy_from_user(&r, arg, sizeof(r)))
		return -EFAULT;
	/*
	 * The device cannot know the peer's vector count; QEMU's protocol
	 * assumes every peer has as many as we do, so hold to ours.
	 */
	if (v->kind != VSCI_KIND_CTL || r.peer > 0xffff || r.vector >= v->nvec)
		return -EINVAL;
	down_read(&v->lock);
	if (v->gone)
		ret = -ENODEV;
	else
		iowrite32(r.peer << 16 | r.vector, v->regs + VSCI_REG_DOORBELL);
	up_read(&v->lock);
	return ret;
}

static long vsci_wait(struct vsci_dev *v, void __user *arg)
{
	struct vsci_wait w;
	struct vsci_vec *vec;
	long t, ret;

	if (copy_from_user(&w, arg, sizeof(w)))
		return -EFAULT;
	if (v->kind != VSCI_KIND_CTL || w.vector >= v->nvec)
		return -EINVAL;
	vec = &v->vec[w.vector];
	t = w.timeout_ms == VSCI_INFINITE_TIMEOUT ? MAX_SCHEDULE_TIMEOUT :
		msecs_to_jiffies(w.timeout_ms);
	t = wait_event_interruptible_timeout(vec->wq,
		atomic64_read(&vec->count) != w.count || READ_ONCE(v->gone), t);
	if (t < 0)
		ret = t;			/* -ERESTARTSYS */
	else if (READ_ONCE(v->gone))
		ret = -ENODEV;
	else if (atomic64_read(&vec->count) == w.count)
		ret = -ETIMEDOUT;
	else
		ret = 0;
	w.count = atomic64_read(&vec->count);
	if (copy_to_user(arg, &w, sizeof(w)))
		return -EFAULT;
	return ret;
}

/*
 * Take a FREE slot that no open file of ours holds: the region's word
 * alone is not enough (a confused node could free a slot a file still
 * uses), nor is our bitmap alone (the node frees CLOSING slots only once
 * it has cleaned up after them).
 */
static long vsci_session_alloc(struct vsci_dev *v, u32 *index, u32 *gen)
{
	long ret;
	u32 i, w, g;

	down_read(&v->lock);
	ret = v->gone ? -ENODEV : vsci_region_check(v);
	if (ret)
		goto out;
	ret = -ENOSPC;
	mutex_lock(&v->sess_lock);
	for (i = 0; i < VSCI_CTL_MAX_SESSIONS; i++) {
		if (test_bit(i, v->sess_held))
			continue;
		w = ioread32(vsci_sess_word(v, i));
		if ((w & 0xff) != VSCI_SESSION_FREE)
			continue;
		/* a new generation tells the node this is a new owner */
		g = ((w >> 8) + 1) & VSCI_GEN_MASK;
		if (!g)
			g = 1;
		iowrite32(g << 8 | VSCI_SESSION_OPEN, vsci_sess_word(v, i));
		set_bit(i, v->sess_held);
		vsci_ring_host(v);
		*index = i;
		*gen = g;
		ret = 0;
		break;
	}
	mutex_unlock(&v->sess_lock);
out:
	up_read(&v->lock);
	return ret;
}

static long vsci_ioc_session(struct vsci_file *vf, void __user *arg)
{
	struct vsci_dev *v = vf->v;
	struct vsci_session s = {};
	long ret;

	if (v->kind != VSCI_KIND_CTL)
		return -EINVAL;
	mutex_lock(&vf->bind_lock);
	if (vf->bind) {
		ret = -EBUSY;
		goto out;
	}
	ret = vsci_session_alloc(v, &s.index, &s.generation);
	if (ret)
		goto out;
	s.size = VSCI_SESSION_SIZE;
	if (copy_to_user(arg, &s, sizeof(s))) {
		/* nobody learnt of it: give it back at once */
		vsci_session_close(v, s.index, s.generation);
		ret = -EFAULT;
		goto out;
	}
	vf->sess_index = s.index;
	vf->sess_gen = s.generation;
	smp_store_release(&vf->bind, VSCI_BIND_SESSION);
out:
	mutex_unlock(&vf->bind_lock);
	return ret;
}

static long vsci_bind_vector(struct vsci_file *vf, u32 __user *arg)
{
	struct vsci_dev *v = vf->v;
	long ret = 0;
	u32 vector;

	if (get_user(vector, arg))
		return -EFAULT;
	if (v->kind != VSCI_KIND_CTL || vector >= v->nvec)
		return -EINVAL;
	mutex_lock(&vf->bind_lock);
	if (vf->bind) {
		ret = -EBUSY;
	} else if (READ_ONCE(v->gone)) {
		ret = -ENODEV;
	} else {
		vf->vector = vector;
		/* count from now on, as a fresh eventfd would */
		atomic64_set(&vf->seen, atomic64_read(&v->vec[vector].count));
		smp_store_release(&vf->bind, VSCI_BIND_VECTOR);
	}
	mutex_unlock(&vf->bind_lock);
	return ret;
}

static long vsci_bind_doorbell(struct vsci_file *vf, void __user *arg)
{
	struct vsci_dev *v = vf->v;
	struct vsci_ring r;
	long ret = 0;

	if (copy_from_user(&r, arg, sizeof(r)))
		return -EFAULT;
	/* checked once here, so that write() cannot fail on arguments */
	if (v->kind != VSCI_KIND_CTL || r.peer > 0xffff || r.vector >= v->nvec)
		return -EINVAL;
	mutex_lock(&vf->bind_lock);
	if (vf->bind) {
		ret = -EBUSY;
	} else if (READ_ONCE(v->gone)) {
		ret = -ENODEV;
	} else {
		vf->bell = r.peer << 16 | r.vector;
		smp_store_release(&vf->bind, VSCI_BIND_DOORBELL);
	}
	mutex_unlock(&vf->bind_lock);
	return ret;
}

static long vsci_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct vsci_file *vf = f->private_data;
	void __user *p = (void __user *)arg;

	switch (cmd) {
	case VSCI_IOC_INFO:
		return vsci_info(vf->v, p);
	case VSCI_IOC_RING:
		return vsci_ring(vf->v, p);
	case VSCI_IOC_WAIT:
		return vsci_wait(vf->v, p);
	case VSCI_IOC_SESSION:
		return vsci_ioc_session(vf, p);
	case VSCI_IOC_BIND_VECTOR:
		return vsci_bind_vector(vf, p);
	case VSCI_IOC_BIND_DOORBELL:
		return vsci_bind_doorbell(vf, p);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations vsci_fops = {
	.owner = THIS_MODULE,
	.open = vsci_open,
	.release = vsci_release,
	.mmap = vsci_mmap,
	.read = vsci_read,
	.write = vsci_write,
	.poll = vsci_poll,
	.unlocked_ioctl = vsci_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static ssize_t kind_show(struct device *d, struct device_attribute *a, char *buf)
{
	struct vsci_dev *v = dev_get_drvdata(d);

	return sysfs_emit(buf, "%s\n", v->kind == VSCI_KIND_CTL ? "ctl" : "seg");
}
static DEVICE_ATTR_RO(kind);

static ssize_t size_show(struct device *d, struct device_attribute *a, char *buf)
{
	struct vsci_dev *v = dev_get_drvdata(d);

	return sysfs_emit(buf, "%llu\n", (unsigned long long)v->shm_len);
}
static DEVICE_ATTR_RO(size);

static ssize_t pci_address_show(struct device *d, struct device_attribute *a,
				char *buf)
{
	struct vsci_dev *v = dev_get_drvdata(d);

	return sysfs_emit(buf, "%s\n", pci_name(v->pdev));
}
static DEVICE_ATTR_RO(pci_address);

static ssize_t ivposition_show(struct device *d, struct device_attribute *a,
			       char *buf)
{
	struct vsci_dev *v = dev_get_drvdata(d);
	u32 pos = 0;

	/* sysfs files are removed before the BARs go, see vsci_remove() */
	if (v->kind == VSCI_KIND_CTL)
		pos = ioread32(v->regs + VSCI_REG_IVPOSITION);
	return sysfs_emit(buf, "%u\n", pos);
}
static DEVICE_ATTR_RO(ivposition);

static ssize_t vectors_show(struct device *d, struct device_attribute *a,
			    char *buf)
{
	struct vsci_dev *v = dev_get_drvdata(d);

	return sysfs_emit(buf, "%u\n", v->nvec);
}
static DEVICE_ATTR_RO(vectors);

static struct attribute *vsci_attrs[] = {
	&dev_attr_kind.attr,
	&dev_attr_size.attr,
	&dev_attr_pci_address.attr,
	&dev_attr_ivposition.attr,
	&dev_attr_vectors.attr,
	NULL,
};
ATTRIBUTE_GROUPS(vsci);

/*
 * Mode 0666: ordinary users in the guest run SISCI programs, as on the host
 * where any user may talk to vscid. Access control belongs to the node, which
 * decides what each guest's region, doorbells and windows reach; inside the
 * guest these files give no more than the device already gives the guest.
 */
static char *vsci_devnode(struct device *dev, umode_t *mode)
{
	if (mode)
		*mode = 0666;
	return NULL;
}

static int vsci_setup_irqs(struct vsci_dev *v)
{
	struct pci_dev *pdev = v->pdev;
	int n, i, ret;

	n = pci_msix_vec_count(pdev);
	if (n <= 0)
		return n ? n : -ENODEV;
	n = min(n, VSCI_MAX_VECTORS);
	v->vec = kcalloc(n, sizeof(*v->vec), GFP_KERNEL);
	if (!v->vec)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		atomic64_set(&v->vec[i].count, 0);
		init_waitqueue_head(&v->vec[i].wq);
	}
	ret = pci_alloc_irq_vectors(pdev, n, n, PCI_IRQ_MSIX);
	if (ret < 0)
		return ret;
	v->nvec = n;
	for (i = 0; i < n; i++) {
		ret = request_irq(pci_irq_vector(pdev, i), vsci_irq, 0,
				  "vsci_guest", &v->vec[i]);
		if (ret)
			return ret;
		v->vec[i].requested = true;
	}
	return 0;
}

static void vsci_free_irqs(struct vsci_dev *v)
{
	unsigned int i;

	for (i = 0; i < v->nvec; i++)
		if (v->vec[i].requested)
			free_irq(pci_irq_vector(v->pdev, i), &v->vec[i]);
	if (v->nvec)
		pci_free_irq_vectors(v->pdev);
}

static int vsci_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct vsci_dev *v;
	struct ida *ida;
	int ret;

	v = kzalloc(sizeof(*v), GFP_KERNEL);
	if (!v)
		return -ENOMEM;
	kref_init(&v->ref);
	init_rwsem(&v->lock);
	init_waitqueue_head(&v->gone_wq);
	mutex_init(&v->sess_lock);
	INIT_LIST_HEAD(&v->ctl_node);
	v->pdev = pdev;
	v->minor = -1;
	v->index = -1;
	v->slot = -1;
	/* only ivshmem-doorbell has BAR1, the MSI-X table */
	v->kind = pci_resource_len(pdev, 1) ? VSCI_KIND_CTL : VSCI_KIND_SEG;

	/* a hot-plugged device decodes nothing until it is enabled */
	ret = pci_enable_device(pdev);
	if (ret)
		goto err_free;
	ret = pci_request_regions(pdev, "vsci_guest");
	if (ret)
		goto err_disable;
	v->shm_start = pci_resource_start(pdev, 2);
	v->shm_len = pci_resource_len(pdev, 2);
	v->regs_start = pci_resource_start(pdev, 0);
	v->regs_len = pci_resource_len(pdev, 0);
	if (!v->shm_len) {
		ret = -ENODEV;
		goto err_release;
	}
	v->regs_mappable = PAGE_ALIGNED(v->regs_start) &&
			   v->regs_len >= PAGE_SIZE;
	if (!PAGE_ALIGNED(v->shm_start) || !PAGE_ALIGNED(v->shm_len)) {
		ret = -ENODEV;	/* cannot be mapped page by page */
		goto err_release;
	}
	/*
	 * On x86 a PFN mapping takes the cache mode reserved for its range;
	 * mapping BAR2 write-back here reserves that mode, so user mappings
	 * are cacheable rather than uncached.
	 */
	v->shm = ioremap_cache(v->shm_start, v->shm_len);
	if (!v->shm) {
		ret = -ENOMEM;
		goto err_release;
	}

	if (v->kind == VSCI_KIND_CTL) {
		v->regs = pci_iomap(pdev, 0, 0);
		if (!v->regs) {
			ret = -ENOMEM;
			goto err_irqs;
		}
		/* MSI-X messages are memory writes by the device */
		pci_set_master(pdev);
		ret = vsci_setup_irqs(v);
		if (ret)
			goto err_irqs;
	}

	/*
	 * A window is named after the slot the node plugged it at, which is
	 * all the node can tell libsisci before the guest has seen it. Only
	 * bus 0 has slots the node chooses, and only function 0 so that the
	 * name is unique; anything else is an untracked vsci-segN.
	 */
	if (v->kind == VSCI_KIND_SEG && pci_domain_nr(pdev->bus) == 0 &&
	    pci_is_root_bus(pdev->bus) && pdev->bus->number == 0 &&
	    PCI_FUNC(pdev->devfn) == 0) {
		mutex_lock(&vsci_ctl_lock);
		if (!vsci_windows[PCI_SLOT(pdev->devfn)]) {
			v->slot = PCI_SLOT(pdev->devfn);
			vsci_windows[v->slot] = v;
		}
		mutex_unlock(&vsci_ctl_lock);
	}
	ida = v->kind == VSCI_KIND_CTL ? &vsci_ctl_ida : &vsci_seg_ida;
	if (v->slot < 0) {
		ret = ida_alloc(ida, GFP_KERNEL);
		if (ret < 0)
			goto err_window;
		v->index = ret;
	}
	mutex_lock(&vsci_lock);
	ret = idr_alloc(&vsci_minors, v, 0, VSCI_MAX_MINORS, GFP_KERNEL);
	mutex_unlock(&vsci_lock);
	if (ret < 0)
		goto err_index;
	v->minor = ret;
	pci_set_drvdata(pdev, v);

	if (v->slot >= 0)
		v->dev = device_create_with_groups(vsci_class, &pdev->dev,
						   MKDEV(MAJOR(vsci_devt), v->minor),
						   v, vsci_groups, "vsci-win%d",
						   v->slot);
	else
		v->dev = device_create_with_groups(vsci_class, &pdev->dev,
						   MKDEV(MAJOR(vsci_devt), v->minor),
						   v, vsci_groups, "vsci-%s%d",
						   v->kind == VSCI_KIND_CTL ? "ctl" : "seg",
						   v->index);
	if (IS_ERR(v->dev)) {
		ret = PTR_ERR(v->dev);
		goto err_minor;
	}
	if (v->kind == VSCI_KIND_CTL) {
		mutex_lock(&vsci_ctl_lock);
		list_add_tail(&v->ctl_node, &vsci_ctls);
		if (!vsci_ctl) {
			kref_get(&v->ref);
			vsci_ctl = v;
			vsci_ctl_sync();
		}
		mutex_unlock(&vsci_ctl_lock);
	}
	dev_info(&pdev->dev, "%s: %llu bytes shared, %u vectors\n",
		 dev_name(v->dev), (unsigned long long)v->shm_len, v->nvec);
	return 0;

err_minor:
	mutex_lock(&vsci_lock);
	idr_remove(&vsci_minors, v->minor);
	mutex_unlock(&vsci_lock);
err_index:
	if (v->index >= 0)
		ida_free(ida, v->index);
err_window:
	if (v->slot >= 0) {
		mutex_lock(&vsci_ctl_lock);
		vsci_windows[v->slot] = NULL;
		mutex_unlock(&vsci_ctl_lock);
	}
err_irqs:
	vsci_free_irqs(v);
	if (v->regs)
		pci_iounmap(pdev, v->regs);
	iounmap(v->shm);
err_release:
	pci_release_regions(pdev);
err_disable:
	pci_disable_device(pdev);
err_free:
	kref_put(&v->ref, vsci_free);
	return ret;
}

static void vsci_remove(struct pci_dev *pdev)
{
	struct vsci_dev *v = pci_get_drvdata(pdev);
	bool was_ctl = false;
	unsigned int i;

	/* no new opens */
	mutex_lock(&vsci_lock);
	idr_remove(&vsci_minors, v->minor);
	mutex_unlock(&vsci_lock);

	/*
	 * The next control device, if any, takes over the window words, so
	 * the node hears about windows through a channel that still works.
	 */
	if (v->kind == VSCI_KIND_CTL) {
		mutex_lock(&vsci_ctl_lock);
		list_del(&v->ctl_node);
		if (vsci_ctl == v) {
			was_ctl = true;
			vsci_ctl = list_first_entry_or_null(&vsci_ctls,
							    struct vsci_dev,
							    ctl_node);
			if (vsci_ctl) {
				kref_get(&vsci_ctl->ref);
				vsci_ctl_sync();
			}
		}
		mutex_unlock(&vsci_ctl_lock);
		if (was_ctl)
			kref_put(&v->ref, vsci_free);	/* ours still holds */
	}

	/* waits for ring/mmap/info in flight; none start after this */
	down_write(&v->lock);
	v->gone = true;
	up_write(&v->lock);

	/*
	 * The BAR's addresses may go to the next device plugged in: take
	 * every user mapping away, so later accesses fault (SIGBUS).
	 */
	mutex_lock(&vsci_lock);
	if (v->map_inode)
		unmap_mapping_range(v->map_inode->i_mapping, 0, 0, 1);
	mutex_unlock(&vsci_lock);

	for (i = 0; i < v->nvec; i++)
		wake_up_interruptible_all(&v->vec[i].wq);
	wake_up_interruptible_all(&v->gone_wq);

	/*
	 * The guest cannot reach the window any more: say so now, not when
	 * the last file closes, by which time the node may have plugged a
	 * new window at this slot.
	 */
	if (v->slot >= 0) {
		mutex_lock(&vsci_ctl_lock);
		if (vsci_windows[v->slot] == v) {
			vsci_windows[v->slot] = NULL;
			if (v->win_opens)
				vsci_window_word(v->slot, 0);
		}
		mutex_unlock(&vsci_ctl_lock);
	}

	/*
	 * Only now take the node and sysfs away (which also drains sysfs
	 * readers of the registers): whoever sees them go may rely on the
	 * mappings being gone and the waiters woken.
	 */
	device_destroy(vsci_class, MKDEV(MAJOR(vsci_devt), v->minor));
	vsci_free_irqs(v);
	if (v->regs)
		pci_iounmap(pdev, v->regs);
	iounmap(v->shm);
	pci_release_regions(pdev);
	pci_disable_device(pdev);
	if (v->index >= 0)
		ida_free(v->kind == VSCI_KIND_CTL ? &vsci_ctl_ida :
			 &vsci_seg_ida, v->index);
	dev_info(&pdev->dev, "removed\n");
	kref_put(&v->ref, vsci_free);	/* open files keep the rest alive */
}

static const struct pci_device_id vsci_ids[] = {
	{ PCI_DEVICE(0x1af4, 0x1110) },	/* ivshmem, plain and doorbell */
	{ }
};
MODULE_DEVICE_TABLE(pci, vsci_ids);

static struct pci_driver vsci_driver = {
	.name = "vsci_guest",
	.id_table = vsci_ids,
	.probe = vsci_probe,
	.remove = vsci_remove,
};

static int __init vsci_init(void)
{
	int ret;

	ret = alloc_chrdev_region(&vsci_devt, 0, VSCI_MAX_MINORS, "vsci");
	if (ret)
		return ret;
	cdev_init(&vsci_cdev, &vsci_fops);
	ret = cdev_add(&vsci_cdev, vsci_devt, VSCI_MAX_MINORS);
	if (ret)
		goto err_region;
	vsci_class = class_create(THIS_MODULE, "vsci");
	if (IS_ERR(vsci_class)) {
		ret = PTR_ERR(vsci_class);
		goto err_cdev;
	}
	vsci_class->devnode = vsci_devnode;
	ret = pci_register_driver(&vsci_driver);
	if (ret)
		goto err_class;
	return 0;

err_class:
	class_destroy(vsci_class);
err_cdev:
	cdev_del(&vsci_cdev);
err_region:
	unregister_chrdev_region(vsci_devt, VSCI_MAX_MINORS);
	return ret;
}

static void __exit vsci_exit(void)
{
	pci_unregister_driver(&vsci_driver);
	class_destroy(vsci_class);
	cdev_del(&vsci_cdev);
	unregister_chrdev_region(vsci_devt, VSCI_MAX_MINORS);
}

module_init(vsci_init);
module_exit(vsci_exit);
MODULE_DESCRIPTION("vsci guest driver for QEMU ivshmem devices");
MODULE_AUTHOR("vsci");
MODULE_LICENSE("GPL");
