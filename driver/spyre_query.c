// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: the sized QUERY ioctl.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/bitfield.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/uaccess.h>

#include <drm/drm_drv.h>

#include "spyre_drv.h"

static void spyre_query_device_info(struct spyre_device *sdev, struct drm_spyre_device_info *di)
{
	di->pci_vendor = sdev->pdev->vendor;
	di->pci_device = sdev->pdev->device;
	di->pci_revision = sdev->pdev->revision;
	di->hw_version = sdev->hw_version;
	di->num_cores = sdev->num_cores;
	di->num_rings = sdev->user_rings;
	di->lx_bytes = sdev->lx_bytes;
	di->stick_bytes = sdev->stick_bytes;
	di->clock_mhz = sdev->clock_mhz;
	di->devmem_bytes = sdev->devmem_size;
	di->caps = DRM_SPYRE_CAP_DMA_COPY | DRM_SPYRE_CAP_HOST_BO | DRM_SPYRE_CAP_TIMELINE |
		   DRM_SPYRE_CAP_PRIORITY;
	if (sdev->caps & SPYRE_CAP_TELEMETRY)
		di->caps |= DRM_SPYRE_CAP_TELEMETRY;
	if (sdev->caps & SPYRE_CAP_LAUNCH)
		di->caps |= DRM_SPYRE_CAP_LAUNCH;
	if (sdev->caps & SPYRE_CAP_DMA_2D)
		di->caps |= DRM_SPYRE_CAP_COPY_2D;
	if (sdev->caps & SPYRE_CAP_P2P)
		di->caps |= DRM_SPYRE_CAP_P2P;
	if (sdev->mmu_ctx_table)
		di->caps |= DRM_SPYRE_CAP_VM;
	if (sdev->caps & SPYRE_CAP_CPL_TIME)
		di->caps |= DRM_SPYRE_CAP_JOB_CLOCK;
	if (sdev->caps & SPYRE_CAP_SEM)
		di->caps |= DRM_SPYRE_CAP_SEMAPHORE;
	di->max_bo_bytes = sdev->devmem_size - SPYRE_DEVMEM_RESERVED;
	di->file_max_jobs = SPYRE_FILE_MAX_JOBS;
	di->file_max_cmds = SPYRE_FILE_MAX_CMDS;
	di->file_max_launches = SPYRE_FILE_MAX_LAUNCHES;
	di->job_history = SPYRE_JOB_HISTORY;
}

/* Device memory in BOs of all clients (freed BOs whose clear has ended are reaped first). */
u64 spyre_devmem_used(struct spyre_device *sdev)
{
	u64 used;

	mutex_lock(&sdev->mm_lock);
	spyre_gem_reap(sdev, false);
	used = sdev->devmem_used;
	mutex_unlock(&sdev->mm_lock);
	return used;
}

static void spyre_query_mem_info(struct spyre_device *sdev, struct drm_spyre_mem_info *mi)
{
	mi->devmem_total = sdev->devmem_size;
	mutex_lock(&sdev->mm_lock);
	spyre_gem_reap(sdev, false);
	mi->devmem_used = sdev->devmem_used;
	mi->devmem_largest_free = spyre_gem_largest_free(sdev);
	mutex_unlock(&sdev->mm_lock);
	mi->host_bo_bytes = atomic64_read(&sdev->host_bo_bytes);
}

static void spyre_query_telemetry(struct spyre_device *sdev, struct drm_spyre_telemetry *t)
{
	t->cmds_completed = spyre_read64(sdev, SPYRE_REG_TELE_CMDS_LO);
	t->h2d_bytes = spyre_read64(sdev, SPYRE_REG_TELE_H2D_BYTES_LO);
	t->d2h_bytes = spyre_read64(sdev, SPYRE_REG_TELE_D2H_BYTES_LO);
	t->d2d_bytes = spyre_read64(sdev, SPYRE_REG_TELE_D2D_BYTES_LO);
	t->jobs_submitted = atomic64_read(&sdev->jobs_submitted);
	t->jobs_completed = atomic64_read(&sdev->jobs_completed);
	t->jobs_failed = atomic64_read(&sdev->jobs_failed);
	t->cmd_errors = spyre_read(sdev, SPYRE_REG_TELE_ERRORS);
	t->resets = spyre_read(sdev, SPYRE_REG_TELE_RESETS);
	t->temp_mc = spyre_read(sdev, SPYRE_REG_TELE_TEMP_MC);
	t->power_mw = spyre_read(sdev, SPYRE_REG_TELE_POWER_MW);
	t->power_cap_mw = spyre_read(sdev, SPYRE_REG_TELE_POWER_CAP_MW);
	t->jobs_timed_out = atomic64_read(&sdev->jobs_timed_out);
	t->jobs_rerun = atomic64_read(&sdev->jobs_rerun);
	t->ring_resets = atomic_read(&sdev->ring_resets);
	t->card_resets = atomic_read(&sdev->card_resets);
	t->state = READ_ONCE(sdev->wedged) ? DRM_SPYRE_STATE_WEDGED : DRM_SPYRE_STATE_OK;
	if (sdev->caps & SPYRE_CAP_P2P) {
		t->p2p_rd_bytes = spyre_read64(sdev, SPYRE_REG_TELE_P2P_RD_BYTES_LO);
		t->p2p_wr_bytes = spyre_read64(sdev, SPYRE_REG_TELE_P2P_WR_BYTES_LO);
	}
	if (!(sdev->caps & SPYRE_CAP_LAUNCH))
		return;
	t->launches = spyre_read64(sdev, SPYRE_REG_TELE_LAUNCHES_LO);
	t->launch_errors = spyre_read(sdev, SPYRE_REG_TELE_LAUNCH_ERRORS);
	t->engine_cycles = spyre_read64(sdev, SPYRE_REG_TELE_ENG_CYCLES_LO);
	t->engine_instructions = spyre_read64(sdev, SPYRE_REG_TELE_ENG_INSTRS_LO);
	t->engine_macs = spyre_read64(sdev, SPYRE_REG_TELE_ENG_MACS_LO);
	t->engine_ddr_read_bytes = spyre_read64(sdev, SPYRE_REG_TELE_ENG_DDR_RD_LO);
	t->engine_ddr_write_bytes = spyre_read64(sdev, SPYRE_REG_TELE_ENG_DDR_WR_LO);
	t->engine_ring_bytes = spyre_read64(sdev, SPYRE_REG_TELE_ENG_RING_LO);
}

/*
 * PCI bridges between cards @a and @b (drm_spyre_peer.distance): up from @a to the nearest
 * bridge the two share, and down to @b; without a shared bridge the root complex counts as one.
 */
u32 spyre_peer_distance(struct spyre_device *a, struct spyre_device *b, bool *shared)
{
	struct pci_dev *up_a, *up_b;
	u32 da = 0, db;

	for (up_a = pci_upstream_bridge(a->pdev); up_a; up_a = pci_upstream_bridge(up_a)) {
		da++;
		db = 0;
		for (up_b = pci_upstream_bridge(b->pdev); up_b; up_b = pci_upstream_bridge(up_b)) {
			db++;
			if (up_a == up_b) {
				*shared = true;
				return da + db - 1;
			}
		}
	}
	db = 0;
	for (up_b = pci_upstream_bridge(b->pdev); up_b; up_b = pci_upstream_bridge(up_b))
		db++;
	*shared = false;
	return da + db + 1;
}

static int spyre_peer_cmp(const void *a, const void *b)
{
	const struct drm_spyre_peer *pa = a, *pb = b;

	return pa->accel_minor < pb->accel_minor ? -1 : pa->accel_minor > pb->accel_minor;
}

static void spyre_query_link(struct spyre_device *sdev, struct drm_spyre_topology *t)
{
	static const u32 mts[] = { [1] = 2500, [2] = 5000, [3] = 8000, [4] = 16000,
				   [5] = 32000, [6] = 64000 };
	unsigned int cls;
	u16 lnksta;

	if (!pci_is_pcie(sdev->pdev) ||
	    pcie_capability_read_word(sdev->pdev, PCI_EXP_LNKSTA, &lnksta))
		return;
	cls = FIELD_GET(PCI_EXP_LNKSTA_CLS, lnksta);
	t->link_speed_mts = cls < ARRAY_SIZE(mts) ? mts[cls] : 0;
	t->link_width = FIELD_GET(PCI_EXP_LNKSTA_NLW, lnksta);
}

/*
 * DRM_SPYRE_QUERY_TOPOLOGY: the header and one entry per other bound card, sized under
 * spyre_cards_lock so that the answer is one consistent view of the cards.
 */
static int spyre_query_topology(struct spyre_device *sdev, struct drm_spyre_query *args)
{
	struct drm_spyre_topology *t = NULL;
	struct drm_spyre_peer *p;
	struct spyre_device *peer;
	u32 n = 0, full;
	bool shared;
	int idx, ret = 0;

	/* Config space is gone once the device is unplugged. */
	if (!drm_dev_enter(&sdev->drm, &idx))
		return -ENODEV;
	mutex_lock(&spyre_cards_lock);
	list_for_each_entry(peer, &spyre_cards, card_node)
		n += peer != sdev;
	full = sizeof(*t) + n * sizeof(*p);
	if (args->size == 0) {
		args->size = full;
		goto unlock;
	}
	if (!args->data) {
		ret = -EFAULT;
		goto unlock;
	}
	t = kzalloc(full, GFP_KERNEL);
	if (!t) {
		ret = -ENOMEM;
		goto unlock;
	}
	t->pci_domain = pci_domain_nr(sdev->pdev->bus);
	t->pci_bus = sdev->pdev->bus->number;
	t->pci_devfn = sdev->pdev->devfn;
	spyre_query_link(sdev, t);
	t->num_peers = n;
	p = (struct drm_spyre_peer *)(t + 1);
	list_for_each_entry(peer, &spyre_cards, card_node) {
		if (peer == sdev)
			continue;
		p->accel_minor = peer->drm.accel->index;
		p->distance = spyre_peer_distance(sdev, peer, &shared);
		if (shared)
			p->flags |= DRM_SPYRE_PEER_SHARED_BRIDGE;
		if ((sdev->caps & SPYRE_CAP_P2P) && (peer->caps & SPYRE_CAP_P2P))
			p->flags |= DRM_SPYRE_PEER_P2P;
		p++;
	}
	sort(t + 1, n, sizeof(*p), spyre_peer_cmp, NULL);
unlock:
	mutex_unlock(&spyre_cards_lock);
	drm_dev_exit(idx);
	if (t) {
		args->size = min(args->size, full);
		if (copy_to_user(u64_to_user_ptr(args->data), t, args->size))
			ret = -EFAULT;
		kfree(t);
	}
	return ret;
}

int spyre_ioctl_query(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct spyre_device *sdev = to_spyre_dev(drm);
	struct drm_spyre_query *args = data;
	union {
		struct drm_spyre_device_info di;
		struct drm_spyre_mem_info mi;
		struct drm_spyre_telemetry t;
	} u;
	u32 full;
	int idx;

	if (args->flags || args->pad)
		return -EINVAL;
	if (args->param == DRM_SPYRE_QUERY_TOPOLOGY)
		return spyre_query_topology(sdev, args);

	memset(&u, 0, sizeof(u));
	switch (args->param) {
	case DRM_SPYRE_QUERY_DEVICE_INFO:
		full = sizeof(u.di);
		break;
	case DRM_SPYRE_QUERY_MEM_INFO:
		full = sizeof(u.mi);
		break;
	case DRM_SPYRE_QUERY_TELEMETRY:
		if (!(sdev->caps & SPYRE_CAP_TELEMETRY))
			return -EOPNOTSUPP;
		full = sizeof(u.t);
		break;
	default:
		return -EINVAL;
	}

	if (args->size == 0) {
		args->size = full;
		return 0;
	}
	if (!args->data)
		return -EFAULT;

	switch (args->param) {
	case DRM_SPYRE_QUERY_DEVICE_INFO:
		spyre_query_device_info(sdev, &u.di);
		break;
	case DRM_SPYRE_QUERY_MEM_INFO:
		spyre_query_mem_info(sdev, &u.mi);
		break;
	case DRM_SPYRE_QUERY_TELEMETRY:
		/* Registers are gone once the device is unplugged. */
		if (!drm_dev_enter(drm, &idx))
			return -ENODEV;
		spyre_query_telemetry(sdev, &u.t);
		drm_dev_exit(idx);
		break;
	}

	args->size = min(args->size, full);
	if (copy_to_user(u64_to_user_ptr(args->data), &u, args->size))
		return -EFAULT;
	return 0;
}
