// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: PCI probe and remove, DRM accel device, ioctl table.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/dma-mapping.h>
#include <linux/io.h>
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

	sf = kvzalloc(sizeof(*sf), GFP_KERNEL_ACCOUNT);
	if (!sf) {
		ret = -ENOMEM;
		goto out;
	}
	kref_init(&sf->ref);
	sf->sdev = to_spyre_dev(drm);
	sf->pid = task_tgid_nr(current);
	get_task_comm(sf->comm, current);
	sf->client_id = file->client_id;
	mutex_init(&sf->lock);
	if (sf->sdev->mmu_ctx_table) {
		sf->vm = spyre_vm_create(sf->sdev, file->client_id);
		if (IS_ERR(sf->vm)) {
			ret = PTR_ERR(sf->vm);
			sf->vm = NULL;
			spyre_file_put(sf);
			goto out;
		}
	}
	ret = spyre_job_file_open(sf);
	if (ret) {
		spyre_file_put(sf);
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
	/* An idle file's context id is free for others at once; its address space may stay. */
	if (sf->vm)
		spyre_vm_unbind_idle(sf->vm);
	/* Jobs still on the card hold references; the last one frees the file state. */
	spyre_file_put(sf);
}

static const struct drm_ioctl_desc spyre_ioctls[] = {
	DRM_IOCTL_DEF_DRV(SPYRE_QUERY, spyre_ioctl_query, 0),
	DRM_IOCTL_DEF_DRV(SPYRE_BO_CREATE, spyre_ioctl_bo_create, 0),
	DRM_IOCTL_DEF_DRV(SPYRE_BO_INFO, spyre_ioctl_bo_info, 0),
	DRM_IOCTL_DEF_DRV(SPYRE_SUBMIT, spyre_ioctl_submit, 0),
	DRM_IOCTL_DEF_DRV(SPYRE_JOB_WAIT, spyre_ioctl_job_wait, 0),
};

static const struct file_operations spyre_accel_fops = {
	.owner = THIS_MODULE,
	DRM_ACCEL_FOPS,
	.show_fdinfo = drm_show_fdinfo,
};

static const struct drm_driver spyre_drm_driver = {
	.driver_features = DRIVER_GEM | DRIVER_COMPUTE_ACCEL |
			   DRIVER_SYNCOBJ | DRIVER_SYNCOBJ_TIMELINE,
	.open = spyre_open,
	.postclose = spyre_postclose,
	.show_fdinfo = spyre_show_fdinfo,
	.gem_create_object = spyre_gem_create_object,
	.gem_prime_import = spyre_gem_prime_import,
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

/*
 * Stop the card: no interrupt, no ring, nothing running (bounded wait). A card that does
 * not come back from its reset may still be running commands: its bus mastering is stopped
 * before remove() frees the rings, the jobs' memory and the page tables.
 */
static void spyre_hw_quiesce(struct spyre_device *sdev)
{
	unsigned int i;

	spyre_hw_disable_interrupts(sdev);
	for (i = 0; i < sdev->num_rings; i++) {
		spin_lock(&sdev->rings[i].lock);
		spyre_hw_ring_disable(&sdev->rings[i]);
		spin_unlock(&sdev->rings[i].lock);
	}
	if (spyre_hw_reset(sdev))
		spyre_hw_stop_dma(sdev);
}

/* Quiesce the card and release what remove() must release while the device is bound. */
static void spyre_hw_teardown(struct spyre_device *sdev)
{
	spyre_hw_quiesce(sdev);
	spyre_irq_fini(sdev);
	/* Jobs on the rings fail; every job the schedulers hold is freed now. */
	spyre_sched_teardown(sdev);
	spyre_hw_rings_free(sdev);
	spyre_gem_hw_fini(sdev);
}

static void spyre_wc_release(void *arg)
{
	struct spyre_device *sdev = arg;

	arch_phys_wc_del(sdev->wc_cookie);
	if (sdev->wc_reserved)
		arch_io_free_memtype_wc(sdev->devmem_bar_start, sdev->devmem_bar_len);
}

/*
 * Reserve BAR2's memory type as write-combining, so that user mappings of DEVICE BOs and
 * the driver's own ioremap_wc() really get WC (with PAT; an MTRR otherwise).
 */
static int spyre_map_devmem_wc(struct spyre_device *sdev)
{
	int ret;

	ret = arch_io_reserve_memtype_wc(sdev->devmem_bar_start, sdev->devmem_bar_len);
	if (ret)
		drm_warn(&sdev->drm, "cannot reserve BAR2 as write-combining: %d\n", ret);
	sdev->wc_reserved = !ret;
	sdev->wc_cookie = arch_phys_wc_add(sdev->devmem_bar_start, sdev->devmem_bar_len);
	return devm_add_action_or_reset(&sdev->pdev->dev, spyre_wc_release, sdev);
}

static void spyre_destroy_wq(void *arg)
{
	destroy_workqueue(arg);
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
	return spyre_map_devmem_wc(sdev);
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
	spin_lock_init(&sdev->read64_lock);
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
	/*
	 * A card that does not come back from its reset ignores ring set-up (its rings would
	 * never run a job): no binding. It may still be letting go of a command the previous
	 * binding gave it, so probe waits longer than recovery does.
	 */
	ret = spyre_hw_reset_timeout(sdev, SPYRE_PROBE_RESET_TIMEOUT_US);
	if (ret) {
		dev_err(&pdev->dev, "card not ready after its reset; a PCI function reset (sysfs 'reset') and a new bind may recover it\n");
		return ret;
	}
	pci_save_state(pdev);

	sdev->reset_wq = alloc_ordered_workqueue("spyre-reset-%s", 0, pci_name(pdev));
	if (!sdev->reset_wq)
		return -ENOMEM;
	ret = devm_add_action_or_reset(&pdev->dev, spyre_destroy_wq, sdev->reset_wq);
	if (ret)
		return ret;
	ret = spyre_coredump_init(sdev);
	if (ret)
		return ret;
	/* The last ring is the kernel's (BO clears), unless there is only one. */
	sdev->user_rings = sdev->num_rings > 1 ? sdev->num_rings - 1 : 1;
	sdev->kernel_ring = &sdev->rings[sdev->num_rings - 1];

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

	spyre_dmabuf_init(sdev);
	ret = spyre_gem_init(sdev);
	if (ret)
		return ret;
	ret = spyre_mmu_init(sdev);
	if (ret)
		goto err_gem;
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
	spyre_hwmon_init(sdev);
	mutex_lock(&spyre_cards_lock);
	list_add_tail(&sdev->card_node, &spyre_cards);
	mutex_unlock(&spyre_cards_lock);

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

	mutex_lock(&spyre_cards_lock);
	list_del_init(&sdev->card_node);
	mutex_unlock(&spyre_cards_lock);
	drm_dev_unplug(&sdev->drm);
	/* Peer cards stop using our memory while it is still there. */
	spyre_dmabuf_revoke_all(sdev);
	spyre_gem_unmap_all(sdev);
	spyre_hw_teardown(sdev);
}

/* Reboot or kexec: the card must not touch memory any more. */
static void spyre_shutdown(struct pci_dev *pdev)
{
	struct spyre_device *sdev = pci_get_drvdata(pdev);

	spyre_hw_quiesce(sdev);
}

static pci_ers_result_t spyre_error_detected(struct pci_dev *pdev, pci_channel_state_t state)
{
	struct spyre_device *sdev = pci_get_drvdata(pdev);

	if (state == pci_channel_io_perm_failure)
		return PCI_ERS_RESULT_DISCONNECT;
	spyre_reset_prepare(sdev);
	return PCI_ERS_RESULT_NEED_RESET;
}

static pci_ers_result_t spyre_slot_reset(struct pci_dev *pdev)
{
	struct spyre_device *sdev = pci_get_drvdata(pdev);

	pci_restore_state(pdev);
	pci_save_state(pdev);
	spyre_reset_done(sdev);
	return READ_ONCE(sdev->wedged) ? PCI_ERS_RESULT_DISCONNECT : PCI_ERS_RESULT_RECOVERED;
}

static void spyre_pci_reset_prepare(struct pci_dev *pdev)
{
	spyre_reset_prepare(pci_get_drvdata(pdev));
}

static void spyre_pci_reset_done(struct pci_dev *pdev)
{
	spyre_reset_done(pci_get_drvdata(pdev));
}

static const struct pci_error_handlers spyre_err_handler = {
	.error_detected = spyre_error_detected,
	.slot_reset = spyre_slot_reset,
	.reset_prepare = spyre_pci_reset_prepare,
	.reset_done = spyre_pci_reset_done,
};

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
	.shutdown = spyre_shutdown,
	.err_handler = &spyre_err_handler,
	.dev_groups = spyre_dev_groups,
};
module_pci_driver(spyre_pci_driver);

MODULE_DESCRIPTION("DRM accel driver for Spyre-style AI accelerator cards");
MODULE_AUTHOR("The Spyre open stack authors");
MODULE_LICENSE("GPL");
