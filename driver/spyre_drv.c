// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: PCI probe and remove, DRM accel device, ioctl table.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/dma-mapping.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include <drm/drm_accel.h>
#include <drm/drm_drv.h>
#include <drm/drm_ioctl.h>
#include <drm/drm_managed.h>

#include "spyre_drv.h"

static int spyre_open(struct drm_device *drm, struct drm_file *file)
{
	struct spyre_file *sf;
	int ret, idx;

	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;

	sf = kvzalloc(sizeof(*sf), GFP_KERNEL);
	if (!sf) {
		ret = -ENOMEM;
		goto out;
	}
	sf->sdev = to_spyre_dev(drm);
	mutex_init(&sf->lock);
	ret = spyre_job_file_open(sf);
	if (ret) {
		mutex_destroy(&sf->lock);
		kvfree(sf);
		goto out;
	}
	file->driver_priv = sf;
out:
	drm_dev_exit(idx);
	return ret;
}

static void spyre_postclose(struct drm_device *drm, struct drm_file *file)
{
	struct spyre_file *sf = file->driver_priv;

	spyre_job_file_close(sf);
	mutex_destroy(&sf->lock);
	kvfree(sf);
}

static const struct drm_ioctl_desc spyre_ioctls[] = {
	DRM_IOCTL_DEF_DRV(SPYRE_QUERY, spyre_ioctl_query, 0),
	DRM_IOCTL_DEF_DRV(SPYRE_BO_CREATE, spyre_ioctl_bo_create, 0),
	DRM_IOCTL_DEF_DRV(SPYRE_BO_INFO, spyre_ioctl_bo_info, 0),
	DRM_IOCTL_DEF_DRV(SPYRE_SUBMIT, spyre_ioctl_submit, 0),
	DRM_IOCTL_DEF_DRV(SPYRE_JOB_WAIT, spyre_ioctl_job_wait, 0),
};

DEFINE_DRM_ACCEL_FOPS(spyre_accel_fops);

static const struct drm_driver spyre_drm_driver = {
	.driver_features = DRIVER_GEM | DRIVER_COMPUTE_ACCEL |
			   DRIVER_SYNCOBJ | DRIVER_SYNCOBJ_TIMELINE,
	.open = spyre_open,
	.postclose = spyre_postclose,
	.gem_create_object = spyre_gem_create_object,
	.ioctls = spyre_ioctls,
	.num_ioctls = ARRAY_SIZE(spyre_ioctls),
	.fops = &spyre_accel_fops,
	.name = SPYRE_DRIVER_NAME,
	.desc = SPYRE_DRIVER_DESC,
	.major = 1,
	.minor = 0,
};

/* Runs when the last reference to the DRM device goes, after remove() and the last close. */
static void spyre_drm_release(struct drm_device *drm, void *arg)
{
	struct spyre_device *sdev = arg;

	spyre_sched_fini(sdev);
	spyre_gem_fini(sdev);
}

/* Quiesce the card and release what remove() must release while the device is bound. */
static void spyre_hw_teardown(struct spyre_device *sdev)
{
	unsigned int i;

	spyre_hw_disable_interrupts(sdev);
	for (i = 0; i < sdev->num_rings; i++)
		spyre_hw_ring_disable(&sdev->rings[i]);
	spyre_hw_reset(sdev);
	spyre_irq_fini(sdev);
	for (i = 0; i < sdev->num_rings; i++)
		spyre_ring_abort_all(&sdev->rings[i], -ENODEV);
	spyre_hw_rings_free(sdev);
	spyre_gem_hw_fini(sdev);
}

static int spyre_map_bars(struct spyre_device *sdev)
{
	struct pci_dev *pdev = sdev->pdev;
	int ret;

	if (pci_resource_len(pdev, SPYRE_BAR_REGS) < SPYRE_REGS_SIZE) {
		dev_err(&pdev->dev, "BAR0 too small (%llu bytes)\n",
			(u64)pci_resource_len(pdev, SPYRE_BAR_REGS));
		return -ENODEV;
	}
	sdev->regs = pcim_iomap_region(pdev, SPYRE_BAR_REGS, SPYRE_DRIVER_NAME);
	if (IS_ERR(sdev->regs)) {
		dev_err(&pdev->dev, "cannot map BAR0: %pe\n", sdev->regs);
		return PTR_ERR(sdev->regs);
	}
	ret = pcim_request_region(pdev, SPYRE_BAR_DEVMEM, SPYRE_DRIVER_NAME);
	if (ret) {
		dev_err(&pdev->dev, "cannot request BAR2: %d\n", ret);
		return ret;
	}
	sdev->devmem_bar_start = pci_resource_start(pdev, SPYRE_BAR_DEVMEM);
	sdev->devmem_bar_len = pci_resource_len(pdev, SPYRE_BAR_DEVMEM);
	return 0;
}

static int spyre_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct spyre_device *sdev;
	unsigned int i;
	int ret;

	sdev = devm_drm_dev_alloc(&pdev->dev, &spyre_drm_driver, struct spyre_device, drm);
	if (IS_ERR(sdev))
		return PTR_ERR(sdev);
	sdev->pdev = pdev;
	pci_set_drvdata(pdev, sdev);

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	pci_set_master(pdev);
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret) {
		dev_err(&pdev->dev, "no usable 64-bit DMA configuration\n");
		return ret;
	}

	ret = spyre_map_bars(sdev);
	if (ret)
		return ret;
	ret = spyre_hw_init(sdev);
	if (ret)
		return ret;
	spyre_hw_reset(sdev);

	for (i = 0; i < sdev->num_rings; i++) {
		struct spyre_ring *ring = &sdev->rings[i];

		ring->sdev = sdev;
		ring->idx = i;
		ring->irq = -1;
		spin_lock_init(&ring->lock);
		spin_lock_init(&ring->fence_lock);
		INIT_LIST_HEAD(&ring->active);
		ring->fence_context = dma_fence_context_alloc(1);
	}
	sdev->err_irq = -1;

	ret = spyre_gem_init(sdev);
	if (ret)
		return ret;
	ret = spyre_hw_rings_alloc(sdev);
	if (ret)
		goto err_gem;
	ret = spyre_gem_hw_init(sdev);
	if (ret)
		goto err_teardown;
	ret = spyre_irq_init(sdev);
	if (ret)
		goto err_teardown;
	ret = spyre_sched_init(sdev);
	if (ret)
		goto err_teardown;
	ret = drmm_add_action(&sdev->drm, spyre_drm_release, sdev);
	if (ret) {
		spyre_sched_fini(sdev);
		goto err_teardown;
	}

	for (i = 0; i < sdev->num_rings; i++) {
		ret = spyre_hw_ring_enable(&sdev->rings[i]);
		if (ret)
			goto err_teardown_managed;
	}
	spyre_hw_enable_interrupts(sdev);

	ret = drm_dev_register(&sdev->drm, 0);
	if (ret)
		goto err_teardown_managed;
	spyre_debugfs_init(sdev);

	dev_info(&pdev->dev, "Spyre card: %u cores, %llu MiB device memory, %u rings, hw %u.%u, accel%d\n",
		 sdev->num_cores, sdev->devmem_size >> 20, sdev->num_rings,
		 sdev->hw_version >> 16, sdev->hw_version & 0xffff, sdev->drm.accel->index);
	return 0;

err_teardown_managed:
	spyre_hw_teardown(sdev);
	return ret;
err_teardown:
	spyre_hw_teardown(sdev);
err_gem:
	spyre_gem_fini(sdev);
	return ret;
}

static void spyre_remove(struct pci_dev *pdev)
{
	struct spyre_device *sdev = pci_get_drvdata(pdev);

	drm_dev_unplug(&sdev->drm);
	spyre_gem_unmap_all(sdev);
	spyre_hw_teardown(sdev);
}

static const struct pci_device_id spyre_pci_ids[] = {
	{ PCI_DEVICE(SPYRE_PCI_VENDOR_ID, SPYRE_PCI_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, spyre_pci_ids);

static struct pci_driver spyre_pci_driver = {
	.name = SPYRE_DRIVER_NAME,
	.id_table = spyre_pci_ids,
	.probe = spyre_probe,
	.remove = spyre_remove,
};
module_pci_driver(spyre_pci_driver);

MODULE_DESCRIPTION("DRM accel driver for Spyre-style AI accelerator cards");
MODULE_AUTHOR("The Spyre open stack authors");
MODULE_LICENSE("GPL");
