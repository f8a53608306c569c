// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: debugfs (/sys/kernel/debug/accel/<pci address>/).
 *
 *   fault_inject  RW  the next N commands fail with SPYRE_STATUS_ERR_INJECTED
 *   fault_hang    RW  the next N commands hang (count | SPYRE_HANG_STICKY / _WEDGE flags)
 *   rings         RO  software and hardware state of every ring
 *   recovery      RO  recovery counters and state
 *
 * The fault registers need a card created with x-fault-inject=on (-EOPNOTSUPP otherwise).
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>

#include <drm/drm_drv.h>

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

static int spyre_recovery_show(struct seq_file *m, void *unused)
{
	struct spyre_device *sdev = m->private;

	seq_printf(m, "state: %s\n", READ_ONCE(sdev->wedged) ? "wedged" : "ok");
	seq_printf(m, "ring_resets: %d\n", atomic_read(&sdev->ring_resets));
	seq_printf(m, "card_resets: %d\n", atomic_read(&sdev->card_resets));
	seq_printf(m, "jobs_timed_out: %lld\n", atomic64_read(&sdev->jobs_timed_out));
	seq_printf(m, "jobs_rerun: %lld\n", atomic64_read(&sdev->jobs_rerun));
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
	if (sdev->caps & SPYRE_CAP_MMU)
		debugfs_create_file_unsafe("fault_mmu", 0600, root, sdev, &spyre_fault_mmu_fops);
	debugfs_create_file("rings", 0400, root, sdev, &spyre_rings_fops);
	debugfs_create_file("recovery", 0400, root, sdev, &spyre_recovery_fops);
}
