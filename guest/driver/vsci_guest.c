// SPDX-License-Identifier: GPL-2.0
/*
 * vsci_guest: vsci's driver for QEMU ivshmem devices (PCI 1af4:1110) in a
 * guest. It gives unprivileged programs (libsisci) what they need and
 * nothing more:
 *
 *  - ivshmem-doorbell (has MSI-X, BAR1): /dev/vsci-ctlN, the control channel
 *    to the node. mmap of BAR2 (the region the node's ivshmem server gave this
 *    guest) and of BAR0's register page (doorbell without a system call),
 *    ioctls to read IVPosition, ring a peer's vector and wait for one of our
 *    own MSI-X vectors. Interrupts are counted per vector; a waiter passes the
 *    count it last saw, so no interrupt between two waits is lost.
 *  - ivshmem-plain (no MSI-X): /dev/vsci-segN, a segment window hot-plugged
 *    by the host. mmap of BAR2; sysfs and an ioctl tell its size and PCI
 *    address, which is how user space finds the window the node just plugged
 *    (the node chooses the PCI slot and tells libsisci).
 *
 * Why a driver at all: the device delivers host-to-guest notifications only
 * as MSI-X, which needs a kernel driver (uio_pci_generic is INTx only, VFIO
 * needs an IOMMU), and a freshly hot-plugged device decodes nothing until
 * it is enabled.
 *
 * Unplug: user mappings are zapped and later accesses get SIGBUS, waiters
 * wake with ENODEV, and the device state lives until the last file closes.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/fs.h>
#include <linux/cdev.h>
#include <linux/mm.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/wait.h>
#include <linux/uaccess.h>
#include <linux/slab.h>
#include <linux/kref.h>
#include <linux/rwsem.h>
#include <linux/sizes.h>

#include "vsci_guest.h"

#define VSCI_MAX_MINORS 256
#define VSCI_MAX_VECTORS 64	/* QEMU's ivshmem server limit */

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
	 * Read-held while BARs are touched (ring, info, mmap, faults);
	 * write-held by remove to flip @gone, so nothing touches a BAR of an
	 * unplugged device.
	 */
	struct rw_semaphore lock;
	bool gone;
	int kind;
	int minor;
	int index;
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
};

static dev_t vsci_devt;
static struct cdev vsci_cdev;
static struct class *vsci_class;
static DEFINE_MUTEX(vsci_lock);	/* minors, map_inode */
static DEFINE_IDR(vsci_minors);
static DEFINE_IDA(vsci_ctl_ida);
static DEFINE_IDA(vsci_seg_ida);

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

static int vsci_open(struct inode *inode, struct file *f)
{
	struct vsci_dev *v;
	int ret = 0;

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
	f->private_data = v;
out:
	mutex_unlock(&vsci_lock);
	return ret;
}

static int vsci_release(struct inode *inode, struct file *f)
{
	struct vsci_dev *v = f->private_data;

	kref_put(&v->ref, vsci_free);
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
	struct vsci_dev *v = vma->vm_file->private_data;
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
	struct vsci_dev *v = vmf->vma->vm_file->private_data;

	return vsci_fault_range(vmf, v->shm_start);
}

static vm_fault_t vsci_regs_fault(struct vm_fault *vmf)
{
	struct vsci_dev *v = vmf->vma->vm_file->private_data;

	return vsci_fault_range(vmf, v->regs_start);
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
	struct vsci_dev *v = f->private_data;
	unsigned long pages = vma_pages(vma);
	unsigned long shm_pages = v->shm_len >> PAGE_SHIFT;
	int ret = 0;

	/* a private (copy-on-write) map of device memory would share nothing */
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;

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
	} else if (vma->vm_pgoff < shm_pages && pages <= shm_pages - vma->vm_pgoff) {
		/*
		 * BAR2 is host RAM behind a prefetchable BAR: cacheable, as
		 * reserved by ioremap_cache() in probe (an unreserved range
		 * would be mapped uncached).
		 */
		vma->vm_ops = &vsci_shm_vm_ops;
	} else {
		ret = -EINVAL;	/* outside the BAR */
	}
	if (!ret)
		vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP;
	up_read(&v->lock);
	return ret;
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

static long vsci_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct vsci_dev *v = f->private_data;
	void __user *p = (void __user *)arg;

	switch (cmd) {
	case VSCI_IOC_INFO:
		return vsci_info(v, p);
	case VSCI_IOC_RING:
		return vsci_ring(v, p);
	case VSCI_IOC_WAIT:
		return vsci_wait(v, p);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations vsci_fops = {
	.owner = THIS_MODULE,
	.open = vsci_open,
	.release = vsci_release,
	.mmap = vsci_mmap,
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
	v->pdev = pdev;
	v->minor = -1;
	v->index = -1;
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

	ida = v->kind == VSCI_KIND_CTL ? &vsci_ctl_ida : &vsci_seg_ida;
	ret = ida_alloc(ida, GFP_KERNEL);
	if (ret < 0)
		goto err_irqs;
	v->index = ret;
	mutex_lock(&vsci_lock);
	ret = idr_alloc(&vsci_minors, v, 0, VSCI_MAX_MINORS, GFP_KERNEL);
	mutex_unlock(&vsci_lock);
	if (ret < 0)
		goto err_index;
	v->minor = ret;
	pci_set_drvdata(pdev, v);

	v->dev = device_create_with_groups(vsci_class, &pdev->dev,
					   MKDEV(MAJOR(vsci_devt), v->minor),
					   v, vsci_groups, "vsci-%s%d",
					   v->kind == VSCI_KIND_CTL ? "ctl" : "seg",
					   v->index);
	if (IS_ERR(v->dev)) {
		ret = PTR_ERR(v->dev);
		goto err_minor;
	}
	dev_info(&pdev->dev, "%s: %llu bytes shared, %u vectors\n",
		 dev_name(v->dev), (unsigned long long)v->shm_len, v->nvec);
	return 0;

err_minor:
	mutex_lock(&vsci_lock);
	idr_remove(&vsci_minors, v->minor);
	mutex_unlock(&vsci_lock);
err_index:
	ida_free(ida, v->index);
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
	unsigned int i;

	/* no new opens */
	mutex_lock(&vsci_lock);
	idr_remove(&vsci_minors, v->minor);
	mutex_unlock(&vsci_lock);

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
	ida_free(v->kind == VSCI_KIND_CTL ? &vsci_ctl_ida : &vsci_seg_ida,
		 v->index);
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
