// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: MSI-X interrupts, one vector per ring plus an error vector.
 *
 * The hard interrupt handlers only acknowledge the cause; completions are processed in the
 * interrupt threads (process context), so fence signalling, launch result delivery and any
 * ring work never run with interrupts off.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/interrupt.h>

#include "spyre_drv.h"

/*
 * The cause is acknowledged before the thread looks at the ring; the card sends the vector
 * again for every later completion, which wakes the thread again.
 */
static irqreturn_t spyre_ring_irq(int irq, void *arg)
{
	struct spyre_ring *ring = arg;

	spyre_write(ring->sdev, SPYRE_REG_INTR_STATUS, SPYRE_INTR_RING(ring->idx));
	return IRQ_WAKE_THREAD;
}

static irqreturn_t spyre_ring_thread(int irq, void *arg)
{
	spyre_ring_process(arg);
	return IRQ_HANDLED;
}

static irqreturn_t spyre_error_irq(int irq, void *arg)
{
	struct spyre_device *sdev = arg;

	spyre_write(sdev, SPYRE_REG_INTR_STATUS, SPYRE_INTR_ERROR);
	return IRQ_WAKE_THREAD;
}

static irqreturn_t spyre_error_thread(int irq, void *arg)
{
	struct spyre_device *sdev = arg;
	unsigned int i;

	drm_dbg_driver(&sdev->drm, "command error, code %u\n",
		       spyre_read(sdev, SPYRE_REG_ERROR_CODE));
	/* A failed command may end a job: look at every ring. */
	for (i = 0; i < sdev->num_rings; i++)
		spyre_ring_process(&sdev->rings[i]);
	return IRQ_HANDLED;
}

int spyre_irq_init(struct spyre_device *sdev)
{
	struct pci_dev *pdev = sdev->pdev;
	unsigned int nvec = sdev->num_rings + 1;
	unsigned int i;
	int ret;

	ret = pci_alloc_irq_vectors(pdev, nvec, nvec, PCI_IRQ_MSIX);
	if (ret < 0) {
		dev_err(&pdev->dev, "cannot allocate %u MSI-X vectors: %d\n", nvec, ret);
		return ret;
	}

	sdev->err_irq = -1;
	for (i = 0; i < sdev->num_rings; i++)
		sdev->rings[i].irq = -1;

	for (i = 0; i < sdev->num_rings; i++) {
		struct spyre_ring *ring = &sdev->rings[i];

		snprintf(ring->irq_name, sizeof(ring->irq_name), "spyre-%s-ring%u",
			 pci_name(pdev), i);
		ret = request_threaded_irq(pci_irq_vector(pdev, i), spyre_ring_irq,
					   spyre_ring_thread, 0, ring->irq_name, ring);
		if (ret)
			goto err;
		ring->irq = pci_irq_vector(pdev, i);
	}
	ret = request_threaded_irq(pci_irq_vector(pdev, sdev->num_rings), spyre_error_irq,
				   spyre_error_thread, 0, "spyre-error", sdev);
	if (ret)
		goto err;
	sdev->err_irq = pci_irq_vector(pdev, sdev->num_rings);
	return 0;

err:
	dev_err(&pdev->dev, "cannot request interrupt: %d\n", ret);
	spyre_irq_fini(sdev);
	return ret;
}

void spyre_irq_fini(struct spyre_device *sdev)
{
	unsigned int i;

	for (i = 0; i < sdev->num_rings; i++) {
		if (sdev->rings[i].irq >= 0)
			free_irq(sdev->rings[i].irq, &sdev->rings[i]);
		sdev->rings[i].irq = -1;
	}
	if (sdev->err_irq >= 0)
		free_irq(sdev->err_irq, sdev);
	sdev->err_irq = -1;
	pci_free_irq_vectors(sdev->pdev);
}
