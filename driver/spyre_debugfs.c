// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: debugfs (/sys/kernel/debug/accel/<pci address>/).
 *
 *   fault_inject  RW  the next N commands fail with SPYRE_STATUS_ERR_INJECTED
 *   rings         RO  software and hardware state of every ring
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>

#include <drm/drm_drv.h>

#include "spyre_drv.h"

static int spyre_fault_inject_get(void *data, u64 *val)
{
	struct spyre_device *sdev = data;
	int idx;

	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	*val = spyre_read(sdev, SPYRE_REG_FAULT_INJECT);
	drm_dev_exit(idx);
	return 0;
}

static int spyre_fault_inject_set(void *data, u64 val)
{
	struct spyre_device *sdev = data;
	int idx;

	if (val > U32_MAX)
		return -EINVAL;
	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	spyre_write(sdev, SPYRE_REG_FAULT_INJECT, val);
	drm_dev_exit(idx);
	return 0;
}

DEFINE_DEBUGFS_ATTRIBUTE(spyre_fault_inject_fops, spyre_fault_inject_get,
			 spyre_fault_inject_set, "%llu\n");

static int spyre_rings_show(struct seq_file *m, void *unused)
{
	struct spyre_device *sdev = m->private;
	unsigned int i;
	int idx;

	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	for (i = 0; i < sdev->num_rings; i++) {
		struct spyre_ring *ring = &sdev->rings[i];
		unsigned long flags;
		u64 submitted, done;

		spin_lock_irqsave(&ring->lock, flags);
		submitted = ring->submitted;
		done = ring->done;
		spin_unlock_irqrestore(&ring->lock, flags);
		seq_printf(m, "ring %u: size %u submitted %llu done %llu head %u tail %u status %#x completed %u\n",
			   i, ring->size, submitted, done,
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
	debugfs_create_file("rings", 0400, root, sdev, &spyre_rings_fops);
}
