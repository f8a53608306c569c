// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: register access, reset and command ring set-up.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/iopoll.h>
#include <linux/log2.h>

#include "spyre_drv.h"

/* Read and check the identification and configuration registers. */
int spyre_hw_init(struct spyre_device *sdev)
{
	struct device *dev = &sdev->pdev->dev;
	u32 id = spyre_read(sdev, SPYRE_REG_ID);

	if (id != SPYRE_ID_MAGIC) {
		dev_err(dev, "not a Spyre card: ID register is %#010x, expected %#010x\n",
			id, SPYRE_ID_MAGIC);
		return -ENODEV;
	}

	sdev->hw_version = spyre_read(sdev, SPYRE_REG_VERSION);
	if ((sdev->hw_version >> 16) != SPYRE_HW_VERSION_MAJOR) {
		dev_err(dev, "unsupported hardware interface %u.%u, driver supports %u.x\n",
			sdev->hw_version >> 16, sdev->hw_version & 0xffff,
			SPYRE_HW_VERSION_MAJOR);
		return -ENODEV;
	}

	sdev->caps = spyre_read(sdev, SPYRE_REG_CAPS);
	sdev->num_cores = spyre_read(sdev, SPYRE_REG_NUM_CORES);
	sdev->num_rings = spyre_read(sdev, SPYRE_REG_NUM_RINGS);
	sdev->lx_bytes = spyre_read(sdev, SPYRE_REG_LX_SIZE);
	sdev->stick_bytes = spyre_read(sdev, SPYRE_REG_STICK_BYTES);
	sdev->clock_mhz = spyre_read(sdev, SPYRE_REG_CLOCK_MHZ);
	sdev->devmem_size = spyre_read64(sdev, SPYRE_REG_DEVMEM_SIZE_LO);

	if (sdev->num_rings == 0 || sdev->num_rings > SPYRE_NUM_RINGS_MAX) {
		dev_err(dev, "device reports %u command rings, supported 1..%u\n",
			sdev->num_rings, SPYRE_NUM_RINGS_MAX);
		return -ENODEV;
	}
	if (!sdev->clock_mhz) {
		dev_err(dev, "device reports a core clock of 0 MHz\n");
		return -ENODEV;
	}
	if (!(sdev->caps & SPYRE_CAP_DMA) || !(sdev->caps & SPYRE_CAP_MSIX)) {
		dev_err(dev, "device lacks DMA or MSI-X capability (caps %#x)\n", sdev->caps);
		return -ENODEV;
	}
	if (sdev->devmem_size <= SPYRE_DEVMEM_RESERVED) {
		dev_err(dev, "device memory too small (%llu bytes)\n", sdev->devmem_size);
		return -ENODEV;
	}
	if (sdev->devmem_bar_len < sdev->devmem_size)
		dev_warn(dev, "BAR2 (%pa bytes) is smaller than device memory; mmap is limited\n",
			 &sdev->devmem_bar_len);
	return 0;
}

/*
 * Reset the whole card: rings are disabled, interrupts masked, running commands cancelled,
 * counters kept. The reset is asynchronous (hw 1.1): wait, at most @timeout_us, until the
 * card is READY again. Returns -ETIMEDOUT if it is not (a wedged card). Sleeps.
 */
int spyre_hw_reset_timeout(struct spyre_device *sdev, u64 timeout_us)
{
	u32 status;
	int ret;

	spyre_write(sdev, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
	ret = readl_poll_timeout(sdev->regs + SPYRE_REG_STATUS, status,
				 (status & (SPYRE_STATUS_READY | SPYRE_STATUS_RESETTING)) ==
				 SPYRE_STATUS_READY, 1000, timeout_us);
	if (ret)
		drm_warn(&sdev->drm, "device not ready after reset (status %#x)\n", status);
	else
		spyre_mmu_hw_init(sdev);
	return ret;
}

int spyre_hw_reset(struct spyre_device *sdev)
{
	return spyre_hw_reset_timeout(sdev, SPYRE_RESET_TIMEOUT_US);
}

/*
 * The card could not be confirmed idle (a ring that did not stop and no reset allowed, or a
 * reset that did not finish): it may still read or write any host memory it was given. Stop
 * its bus mastering before the fences that let that memory be freed are signalled; the
 * config read-back makes sure the card has the write. Card memory it may still write is
 * quarantined instead (spyre_gem.c). Undone by a reset that completes (spyre_hw_start_dma())
 * or by the next probe. No allocation, no sleep: called from the timeout handler.
 */
void spyre_hw_stop_dma(struct spyre_device *sdev)
{
	u16 cmd;

	WRITE_ONCE(sdev->dma_stopped, true);
	pci_clear_master(sdev->pdev);
	pci_read_config_word(sdev->pdev, PCI_COMMAND, &cmd);
	drm_err(&sdev->drm, "card not confirmed idle: bus mastering stopped, card memory quarantined\n");
}

/* A reset completed: the card runs nothing, DMA may resume and quarantined memory go back. */
void spyre_hw_start_dma(struct spyre_device *sdev)
{
	if (!READ_ONCE(sdev->dma_stopped))
		return;
	pci_set_master(sdev->pdev);
	WRITE_ONCE(sdev->dma_stopped, false);
	mutex_lock(&sdev->mm_lock);
	spyre_gem_reap(sdev, false);
	mutex_unlock(&sdev->mm_lock);
}

int spyre_hw_rings_alloc(struct spyre_device *sdev)
{
	struct device *dev = &sdev->pdev->dev;
	unsigned int i;

	for (i = 0; i < sdev->num_rings; i++) {
		struct spyre_ring *ring = &sdev->rings[i];

		ring->size = SPYRE_RING_ENTRIES;
		/* hw 1.7: entries carry each command's modeled start and end cycle. */
		ring->cpl_size = sdev->caps & SPYRE_CAP_CPL_TIME ?
				 sizeof(struct spyre_hw_cpl_time) : sizeof(struct spyre_hw_cpl);
		ring->cmds = dma_alloc_coherent(dev, ring->size * sizeof(*ring->cmds),
						&ring->cmds_dma, GFP_KERNEL);
		ring->cpls = dma_alloc_coherent(dev, ring->size * ring->cpl_size,
						&ring->cpls_dma, GFP_KERNEL);
		if (!ring->cmds || !ring->cpls)
			goto err;
	}
	sdev->rings_allocated = true;
	return 0;

err:
	sdev->rings_allocated = true;
	spyre_hw_rings_free(sdev);
	return -ENOMEM;
}

void spyre_hw_rings_free(struct spyre_device *sdev)
{
	struct device *dev = &sdev->pdev->dev;
	unsigned int i;

	if (!sdev->rings_allocated)
		return;
	for (i = 0; i < sdev->num_rings; i++) {
		struct spyre_ring *ring = &sdev->rings[i];

		if (ring->cmds)
			dma_free_coherent(dev, ring->size * sizeof(*ring->cmds),
					  ring->cmds, ring->cmds_dma);
		if (ring->cpls)
			dma_free_coherent(dev, ring->size * ring->cpl_size,
					  ring->cpls, ring->cpls_dma);
		ring->cmds = NULL;
		ring->cpls = NULL;
	}
	sdev->rings_allocated = false;
}

/*
 * Program and enable one ring, empty. The caller holds ring->lock or owns the ring
 * exclusively. Hardware entry 0 is now sequence number ring->submitted; the arrays are not
 * cleared (seqnos never repeat, so stale completion entries cannot match).
 */
int spyre_hw_ring_enable(struct spyre_ring *ring)
{
	struct spyre_device *sdev = ring->sdev;
	unsigned int n = ring->idx;
	u32 status;

	spyre_write(sdev, SPYRE_RING_REG(n, SPYRE_RING_CTRL), 0);
	ring->hw_base = ring->submitted;
	ring->done = ring->submitted;

	spyre_write(sdev, SPYRE_RING_REG(n, SPYRE_RING_CMD_BASE_LO), lower_32_bits(ring->cmds_dma));
	spyre_write(sdev, SPYRE_RING_REG(n, SPYRE_RING_CMD_BASE_HI), upper_32_bits(ring->cmds_dma));
	spyre_write(sdev, SPYRE_RING_REG(n, SPYRE_RING_CPL_BASE_LO), lower_32_bits(ring->cpls_dma));
	spyre_write(sdev, SPYRE_RING_REG(n, SPYRE_RING_CPL_BASE_HI), upper_32_bits(ring->cpls_dma));
	spyre_write(sdev, SPYRE_RING_REG(n, SPYRE_RING_SIZE), ring->size);
	/*
	 * No fault latched: one of a command whose job was aborted is no one's, and must not be
	 * reported to the next job that faults here. The ring is stopped, nothing latches now.
	 */
	if (sdev->caps & SPYRE_CAP_MMU)
		spyre_write(sdev, SPYRE_RING_REG(n, SPYRE_RING_FAULT_INFO), SPYRE_MMU_FAULT_VALID);
	spyre_write(sdev, SPYRE_RING_REG(n, SPYRE_RING_CTRL), SPYRE_RING_CTRL_ENABLE |
		    (ring->cpl_size == sizeof(struct spyre_hw_cpl_time) ?
		     SPYRE_RING_CTRL_CPL_TIME : 0));

	status = spyre_read(sdev, SPYRE_RING_REG(n, SPYRE_RING_STATUS));
	if (!(status & SPYRE_RING_STATUS_ENABLED)) {
		drm_err(&sdev->drm, "ring %u refused its configuration (status %#x)\n", n, status);
		return -EIO;
	}
	ring->enabled = true;
	return 0;
}

/* The caller holds ring->lock or owns the ring exclusively. */
void spyre_hw_ring_disable(struct spyre_ring *ring)
{
	ring->enabled = false;
	spyre_write(ring->sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_CTRL), 0);
}

/*
 * Stop a ring now (hw 1.1 CTRL.ABORT): the running command is cancelled, nothing after it
 * runs. Returns true once STATUS.BUSY is clear, after which the card touches no memory for
 * the ring's commands; false if the card cannot abort or the command does not stop within
 * SPYRE_ABORT_TIMEOUT_US (then only a card reset helps). Sleeps.
 */
bool spyre_hw_ring_abort(struct spyre_ring *ring)
{
	struct spyre_device *sdev = ring->sdev;
	u32 status;

	spin_lock(&ring->lock);
	ring->enabled = false;
	spin_unlock(&ring->lock);
	if (!(sdev->caps & SPYRE_CAP_RING_ABORT))
		return false;
	spyre_write(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_CTRL), SPYRE_RING_CTRL_ABORT);
	return !readl_poll_timeout(sdev->regs + SPYRE_RING_REG(ring->idx, SPYRE_RING_STATUS),
				   status, !(status & SPYRE_RING_STATUS_BUSY), 1000,
				   SPYRE_ABORT_TIMEOUT_US);
}

void spyre_hw_enable_interrupts(struct spyre_device *sdev)
{
	u32 mask = SPYRE_INTR_ERROR | GENMASK(sdev->num_rings - 1, 0);

	spyre_write(sdev, SPYRE_REG_INTR_STATUS, ~0u);
	spyre_write(sdev, SPYRE_REG_INTR_MASK, mask);
}

void spyre_hw_disable_interrupts(struct spyre_device *sdev)
{
	spyre_write(sdev, SPYRE_REG_INTR_MASK, 0);
	spyre_write(sdev, SPYRE_REG_INTR_STATUS, ~0u);
}
