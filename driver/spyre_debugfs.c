// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: debugfs (/sys/kernel/debug/accel/<pci address>/).
 *
 *   fault_inject  RW  the next N commands fail with SPYRE_STATUS_ERR_INJECTED
 *   fault_hang    RW  the next N commands hang (count | SPYRE_HANG_STICKY / _WEDGE flags)
 *   mmu_probe     RW  write "CLIENT VA": the card reads 8 bytes at VA of that file's context
 *                     (CLIENT: its fdinfo drm-client-id); read: what it got (hw_status,
 *                     fault_addr, data), for the writer's open file
 *   rings         RO  software and hardware state of every ring
 *   recovery      RO  recovery counters and state
 *
 * The fault registers need a card created with x-fault-inject=on (-EOPNOTSUPP otherwise).
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/string.h>

#include <drm/drm_drv.h>
#include <drm/drm_file.h>

#include "spyre_drv.h"

/*
 * FAULT_HANG needs CAP_FAULT_INJECT; FAULT_INJECT too, except on a card from before hw 1.1
 * (no CAP_RING_ABORT either), where it always worked.
 */
static bool spyre_fault_supported(struct spyre_device *sdev, u32 reg)
{
	if (sdev->caps & SPYRE_CAP_FAULT_INJECT)
		return true;
	return reg == SPYRE_REG_FAULT_INJECT && !(sdev->caps & SPYRE_CAP_RING_ABORT);
}

static int spyre_fault_get(struct spyre_device *sdev, u32 reg, u64 *val)
{
	int idx;

	if (!spyre_fault_supported(sdev, reg))
		return -EOPNOTSUPP;
	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	*val = spyre_read(sdev, reg);
	drm_dev_exit(idx);
	return 0;
}

static int spyre_fault_set(struct spyre_device *sdev, u32 reg, u64 val, u64 valid)
{
	int idx;

	if (val & ~valid)
		return -EINVAL;
	if (!spyre_fault_supported(sdev, reg))
		return -EOPNOTSUPP;
	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	spyre_write(sdev, reg, val);
	drm_dev_exit(idx);
	return 0;
}

static int spyre_fault_inject_get(void *data, u64 *val)
{
	return spyre_fault_get(data, SPYRE_REG_FAULT_INJECT, val);
}

static int spyre_fault_inject_set(void *data, u64 val)
{
	return spyre_fault_set(data, SPYRE_REG_FAULT_INJECT, val, U32_MAX);
}

DEFINE_DEBUGFS_ATTRIBUTE(spyre_fault_inject_fops, spyre_fault_inject_get,
			 spyre_fault_inject_set, "%llu\n");

static int spyre_fault_hang_get(void *data, u64 *val)
{
	return spyre_fault_get(data, SPYRE_REG_FAULT_HANG, val);
}

static int spyre_fault_hang_set(void *data, u64 val)
{
	return spyre_fault_set(data, SPYRE_REG_FAULT_HANG, val, SPYRE_HANG_VALID_MASK);
}

DEFINE_DEBUGFS_ATTRIBUTE(spyre_fault_hang_fops, spyre_fault_hang_get,
			 spyre_fault_hang_set, "%#llx\n");

static int spyre_fault_mmu_get(void *data, u64 *val)
{
	return spyre_fault_get(data, SPYRE_REG_FAULT_MMU, val);
}

static int spyre_fault_mmu_set(void *data, u64 val)
{
	return spyre_fault_set(data, SPYRE_REG_FAULT_MMU, val, U32_MAX);
}

DEFINE_DEBUGFS_ATTRIBUTE(spyre_fault_mmu_fops, spyre_fault_mmu_get, spyre_fault_mmu_set,
			 "%llu\n");

/*
 * mmu_probe: what the card reaches at a virtual address of one file's context, through its
 * translation cache, whatever the file's BO handles and launch windows say (a stale
 * translation after an unmap shows here). The result is kept per open of the debugfs file.
 */
struct spyre_probe_buf {
	struct spyre_device *sdev;
	char text[96];
	size_t len;
};

static int spyre_mmu_probe_open(struct inode *inode, struct file *f)
{
	struct spyre_probe_buf *pb = kzalloc(sizeof(*pb), GFP_KERNEL);

	if (!pb)
		return -ENOMEM;
	pb->sdev = inode->i_private;
	f->private_data = pb;
	return nonseekable_open(inode, f);
}

static int spyre_mmu_probe_release(struct inode *inode, struct file *f)
{
	kfree(f->private_data);
	return 0;
}

/* The address space of the open file with drm-client-id @client, referenced, or NULL. */
static struct spyre_vm *spyre_client_vm(struct spyre_device *sdev, u64 client)
{
	struct spyre_vm *vm = NULL;
	struct drm_file *file;

	mutex_lock(&sdev->drm.filelist_mutex);
	list_for_each_entry(file, &sdev->drm.filelist, lhead) {
		struct spyre_file *sf = file->driver_priv;

		if (file->client_id == client && sf && sf->vm) {
			vm = sf->vm;
			kref_get(&vm->ref);	/* keeps the address space while we probe */
			break;
		}
	}
	mutex_unlock(&sdev->drm.filelist_mutex);
	return vm;
}

static ssize_t spyre_mmu_probe_write(struct file *f, const char __user *ubuf, size_t len,
				     loff_t *ppos)
{
	struct spyre_probe_buf *pb = f->private_data;
	struct spyre_va_probe p = { 0 };
	struct spyre_vm *vm;
	u64 client, va;
	char buf[64];
	u32 ctx;
	int ret;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	if (sscanf(buf, "%llu %llx", &client, &va) != 2)
		return -EINVAL;
	vm = spyre_client_vm(pb->sdev, client);
	if (!vm)
		return -ENOENT;
	/* The space's id, bound if it has none, held like a job's until the probe is done. */
	ret = spyre_vm_get_ctx(vm, &ctx);
	if (ret) {
		spyre_vm_put(vm);
		return ret;
	}
	/* A card gone meanwhile aborts the job (-EIO): no drm_dev_enter() across the wait. */
	ret = spyre_job_probe_va(pb->sdev, ctx, va, &p);
	spyre_vm_put_ctx(vm);
	spyre_vm_put(vm);
	if (ret)
		return ret;
	pb->len = scnprintf(pb->text, sizeof(pb->text),
			    "hw_status %u fault_addr %#llx data %8phN\n",
			    p.hw_status, p.fault_addr, p.data);
	*ppos = 0;	/* the next read starts at this result */
	return len;
}

static ssize_t spyre_mmu_probe_read(struct file *f, char __user *ubuf, size_t len,
				    loff_t *ppos)
{
	struct spyre_probe_buf *pb = f->private_data;

	return simple_read_from_buffer(ubuf, len, ppos, pb->text, pb->len);
}

static const struct file_operations spyre_mmu_probe_fops = {
	.owner = THIS_MODULE,
	.open = spyre_mmu_probe_open,
	.release = spyre_mmu_probe_release,
	.read = spyre_mmu_probe_read,
	.write = spyre_mmu_probe_write,
};

/*
 * Address spaces alive, the host memory of their page tables (all files together), and the
 * context ids: how many are bound, how many were taken from idle spaces, and one line per
 * bound id, least recently bound first (the next to be taken, if idle).
 */
static int spyre_mmu_show(struct seq_file *m, void *unused)
{
	struct spyre_device *sdev = m->private;
	struct spyre_vm *vm;
	unsigned int bound = 0;

	seq_printf(m, "contexts: %d\n", atomic_read(&sdev->mmu_contexts));
	seq_printf(m, "pagetable_bytes: %lld\n", atomic64_read(&sdev->mmu_pt_bytes));
	mutex_lock(&sdev->mmu_ctx_lock);
	list_for_each_entry(vm, &sdev->mmu_ctx_lru, lru)
		bound++;
	seq_printf(m, "ids_bound: %u of %u\n", bound, SPYRE_MMU_NUM_CTX - 1);
	seq_printf(m, "ids_taken: %llu\n", sdev->mmu_ctx_steals);
	list_for_each_entry(vm, &sdev->mmu_ctx_lru, lru)
		seq_printf(m, "id %u: client %llu uid %u jobs %d\n", vm->ctx, vm->client_id,
			   from_kuid(&init_user_ns, vm->uid), atomic_read(&vm->busy));
	mutex_unlock(&sdev->mmu_ctx_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(spyre_mmu);

static int spyre_recovery_show(struct seq_file *m, void *unused)
{
	struct spyre_device *sdev = m->private;

	struct spyre_bo *bo;
	u64 quarantined = 0;

	mutex_lock(&sdev->mm_lock);
	list_for_each_entry(bo, &sdev->zombies, zombie)
		quarantined += bo->node.size;
	mutex_unlock(&sdev->mm_lock);
	seq_printf(m, "state: %s\n", READ_ONCE(sdev->wedged) ? "wedged" : "ok");
	seq_printf(m, "bus_master: %s\n", READ_ONCE(sdev->dma_stopped) ? "stopped" : "on");
	seq_printf(m, "zombie_bytes: %llu\n", quarantined);
	seq_printf(m, "ring_resets: %d\n", atomic_read(&sdev->ring_resets));
	seq_printf(m, "card_resets: %d\n", atomic_read(&sdev->card_resets));
	seq_printf(m, "jobs_timed_out: %lld\n", atomic64_read(&sdev->jobs_timed_out));
	seq_printf(m, "jobs_rerun: %lld\n", atomic64_read(&sdev->jobs_rerun));
	seq_printf(m, "timeouts_deferred: %d\n", atomic_read(&sdev->timeouts_deferred));
	seq_printf(m, "last_recovery_us: %u\n", READ_ONCE(sdev->last_recovery_us));
	seq_printf(m, "max_recovery_us: %u\n", READ_ONCE(sdev->max_recovery_us));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(spyre_recovery);

static int spyre_rings_show(struct seq_file *m, void *unused)
{
	struct spyre_device *sdev = m->private;
	unsigned int i;
	int idx;

	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	for (i = 0; i < sdev->num_rings; i++) {
		struct spyre_ring *ring = &sdev->rings[i];
		u64 submitted, done;

		spin_lock(&ring->lock);
		submitted = ring->submitted;
		done = ring->done;
		spin_unlock(&ring->lock);
		seq_printf(m, "ring %u%s: size %u submitted %llu done %llu head %u tail %u status %#x completed %u\n",
			   i, ring == sdev->kernel_ring ? "k" : "", ring->size, submitted, done,
			   spyre_read(sdev, SPYRE_RING_REG(i, SPYRE_RING_HEAD)),
			   spyre_read(sdev, SPYRE_RING_REG(i, SPYRE_RING_TAIL)),
			   spyre_read(sdev, SPYRE_RING_REG(i, SPYRE_RING_STATUS)),
			   spyre_read(sdev, SPYRE_RING_REG(i, SPYRE_RING_COMPLETED)));
	}
	seq_printf(m, "ring resets by the driver: %d\n", atomic_read(&sdev->ring_resets));
	drm_dev_exit(idx);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(spyre_rings);

/* Called after drm_dev_register(): the accel core does not call drm_driver.debugfs_init. */
void spyre_debugfs_init(struct spyre_device *sdev)
{
	struct dentry *root = sdev->drm.debugfs_root;

	debugfs_create_file_unsafe("fault_inject", 0600, root, sdev, &spyre_fault_inject_fops);
	debugfs_create_file_unsafe("fault_hang", 0600, root, sdev, &spyre_fault_hang_fops);
	if (sdev->caps & SPYRE_CAP_MMU) {
		debugfs_create_file_unsafe("fault_mmu", 0600, root, sdev, &spyre_fault_mmu_fops);
		debugfs_create_file("mmu_probe", 0600, root, sdev, &spyre_mmu_probe_fops);
		debugfs_create_file("mmu", 0400, root, sdev, &spyre_mmu_fops);
	}
	debugfs_create_file("rings", 0400, root, sdev, &spyre_rings_fops);
	debugfs_create_file("recovery", 0400, root, sdev, &spyre_recovery_fops);
}
