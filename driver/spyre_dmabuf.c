// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: DEVICE BOs shared with peer cards as dma-bufs (hw 1.6, CAP_P2P).
 *
 * Export: a DEVICE BO becomes a dma-buf whose only possible importer is the spyre driver of
 * another card (dynamic attachment, peer2peer allowed). Its sg_table has no struct pages:
 * the BO's range of the exporter's BAR2, mapped for the importer with dma_map_resource().
 * The dma-buf holds a reference on the BO (and the DRM device), so the card memory stays
 * allocated while it exists. When the exporter goes (remove/unbind), every attachment is
 * revoked under the reservation lock (dma_buf_move_notify()) before the card goes away, and
 * no mapping is handed out afterwards.
 *
 * Import: on a peer card the dma-buf becomes a PEER BO: the importer maps the attachment
 * and describes its DMA addresses to its DMA engine with a host page directory, like a HOST
 * BO, so COPY/COPY_2D move data card to card. Jobs count themselves in the BO's busy count
 * while they exist; revocation makes new submits fail with -ENODEV, waits (bounded) for the
 * jobs that use it and unmaps the attachment.
 *
 * Copyright (C) 2026 The Spyre open stack authors
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>

#include <drm/drm_drv.h>
#include <drm/drm_prime.h>

#include "spyre_drv.h"

MODULE_IMPORT_NS(DMA_BUF);

/* Longest sg entry of an export (sg lengths are unsigned int). */
#define SPYRE_P2P_SG_MAX	SZ_1G
/* How long a revocation waits for the importer's jobs that use the BO. */
#define SPYRE_P2P_REVOKE_WAIT	(10 * HZ)

static const struct dma_buf_attach_ops spyre_peer_attach_ops;
static const struct dma_buf_ops spyre_dmabuf_ops;

/* Registered cards of this driver, for the p2p_peers attribute (spyre_sysfs.c). */
DEFINE_MUTEX(spyre_cards_lock);
LIST_HEAD(spyre_cards);

/* ---- exporter ---- */

/*
 * Only a spyre importer on another PCI function: it is the one whose DMA engine reaches a
 * peer's BAR2 (CAP_P2P, checked by the importer for its own card). pci_p2pdma_distance()
 * is not used: it judges the path by the host bridge (an allowlist of root complexes that
 * route peer traffic), which says nothing about the emulated fabric the card model uses,
 * and the guest kernel is built without CONFIG_PCI_P2PDMA (it would always refuse).
 */
static int spyre_dmabuf_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	struct drm_gem_object *obj = dmabuf->priv;

	if (!attach->peer2peer || attach->importer_ops != &spyre_peer_attach_ops)
		return -EOPNOTSUPP;
	if (!dev_is_pci(attach->dev) || attach->dev == obj->dev->dev)
		return -EINVAL;
	return 0;
}

/* Card memory never moves: pinning is a no-op, and lets the importer map under the lock. */
static int spyre_dmabuf_pin(struct dma_buf_attachment *attach)
{
	return 0;
}

static void spyre_dmabuf_unpin(struct dma_buf_attachment *attach)
{
}

static void spyre_dmabuf_unmap_sgt(struct dma_buf_attachment *attach, struct sg_table *sgt,
				   enum dma_data_direction dir)
{
	struct scatterlist *sg;
	unsigned int i;

	for_each_sgtable_dma_sg(sgt, sg, i)
		if (sg_dma_len(sg))
			dma_unmap_resource(attach->dev, sg_dma_address(sg), sg_dma_len(sg), dir,
					   DMA_ATTR_SKIP_CPU_SYNC);
	sg_free_table(sgt);
	kfree(sgt);
}

static struct sg_table *spyre_dmabuf_map(struct dma_buf_attachment *attach,
					 enum dma_data_direction dir)
{
	struct drm_gem_object *obj = attach->dmabuf->priv;
	struct spyre_device *sdev = to_spyre_dev(obj->dev);
	struct spyre_bo *bo = to_spyre_bo(obj);
	u64 size = obj->size, done = 0;
	struct scatterlist *sg;
	struct sg_table *sgt;
	unsigned int n, i;
	int ret;

	dma_resv_assert_held(attach->dmabuf->resv);
	if (bo->p2p_revoked || bo->node.start + size > sdev->devmem_bar_len)
		return ERR_PTR(-ENODEV);

	sgt = kzalloc(sizeof(*sgt), GFP_KERNEL);
	if (!sgt)
		return ERR_PTR(-ENOMEM);
	n = DIV_ROUND_UP(size, SPYRE_P2P_SG_MAX);
	ret = sg_alloc_table(sgt, n, GFP_KERNEL);
	if (ret) {
		kfree(sgt);
		return ERR_PTR(ret);
	}
	/* No struct pages: only the DMA side of each entry is filled in. */
	for_each_sgtable_sg(sgt, sg, i) {
		u64 len = min_t(u64, size - done, SPYRE_P2P_SG_MAX);
		phys_addr_t phys = sdev->devmem_bar_start + bo->node.start + done;
		dma_addr_t addr;

		addr = dma_map_resource(attach->dev, phys, len, dir, DMA_ATTR_SKIP_CPU_SYNC);
		if (dma_mapping_error(attach->dev, addr)) {
			sgt->nents = i;
			spyre_dmabuf_unmap_sgt(attach, sgt, dir);
			return ERR_PTR(-EIO);
		}
		sg_dma_address(sg) = addr;
		sg_dma_len(sg) = len;
		sg->length = len;
		done += len;
	}
	sgt->nents = sgt->orig_nents;
	return sgt;
}

static void spyre_dmabuf_unmap(struct dma_buf_attachment *attach, struct sg_table *sgt,
			       enum dma_data_direction dir)
{
	spyre_dmabuf_unmap_sgt(attach, sgt, dir);
}

static void spyre_dmabuf_release(struct dma_buf *dmabuf)
{
	struct drm_gem_object *obj = dmabuf->priv;
	struct spyre_device *sdev = to_spyre_dev(obj->dev);
	struct spyre_bo *bo = to_spyre_bo(obj);

	mutex_lock(&sdev->exports_lock);
	list_del_init(&bo->export_node);
	mutex_unlock(&sdev->exports_lock);
	/* A revocation looks at export_dmabuf under the lock: it never sees a freed one. */
	dma_resv_lock(obj->resv, NULL);
	bo->export_dmabuf = NULL;
	dma_resv_unlock(obj->resv);
	drm_gem_dmabuf_release(dmabuf);
}

/* CPU mmap of the dma-buf is the DEVICE BO's own (shared, write-combined, BAR2). */
static const struct dma_buf_ops spyre_dmabuf_ops = {
	.attach = spyre_dmabuf_attach,
	.pin = spyre_dmabuf_pin,
	.unpin = spyre_dmabuf_unpin,
	.map_dma_buf = spyre_dmabuf_map,
	.unmap_dma_buf = spyre_dmabuf_unmap,
	.release = spyre_dmabuf_release,
	.mmap = drm_gem_dmabuf_mmap,
};

/* gem export hook of DEVICE BOs: only cards that reach their peers (CAP_P2P). */
struct dma_buf *spyre_dmabuf_export(struct drm_gem_object *obj, int flags)
{
	struct spyre_device *sdev = to_spyre_dev(obj->dev);
	struct spyre_bo *bo = to_spyre_bo(obj);
	DEFINE_DMA_BUF_EXPORT_INFO(exp_info);
	struct dma_buf *dmabuf;
	int idx;

	if (!(sdev->caps & SPYRE_CAP_P2P))
		return ERR_PTR(-EOPNOTSUPP);
	if (!drm_dev_enter(obj->dev, &idx))
		return ERR_PTR(-ENODEV);
	exp_info.ops = &spyre_dmabuf_ops;
	exp_info.size = obj->size;
	exp_info.flags = flags;
	exp_info.priv = obj;
	exp_info.resv = obj->resv;
	dmabuf = drm_gem_dmabuf_export(obj->dev, &exp_info);
	if (!IS_ERR(dmabuf)) {
		/* Registered before remove() can revoke: it waits for drm_dev_exit(). */
		mutex_lock(&sdev->exports_lock);
		bo->export_dmabuf = dmabuf;
		list_add_tail(&bo->export_node, &sdev->exports);
		mutex_unlock(&sdev->exports_lock);
	}
	drm_dev_exit(idx);
	return dmabuf;
}

/*
 * The exporter is going away (remove/unbind, after drm_dev_unplug(): no new export): revoke
 * every attachment of every exported BO while its card memory is still there. One BO at a
 * time, holding the BO and its reservation lock but not exports_lock: the importers' wait
 * for their jobs must not hold up the release of other dma-bufs (a job's end may drop one).
 */
void spyre_dmabuf_revoke_all(struct spyre_device *sdev)
{
	struct drm_gem_object *obj;
	struct spyre_bo *bo;

	for (;;) {
		mutex_lock(&sdev->exports_lock);
		bo = list_first_entry_or_null(&sdev->exports, struct spyre_bo, export_node);
		if (bo) {
			list_del_init(&bo->export_node);
			drm_gem_object_get(&bo->shmem.base);
		}
		mutex_unlock(&sdev->exports_lock);
		if (!bo)
			return;
		obj = &bo->shmem.base;
		dma_resv_lock(obj->resv, NULL);
		bo->p2p_revoked = true;
		if (bo->export_dmabuf)
			dma_buf_move_notify(bo->export_dmabuf);
		dma_resv_unlock(obj->resv);
		drm_gem_object_put(obj);
	}
}

void spyre_dmabuf_init(struct spyre_device *sdev)
{
	mutex_init(&sdev->exports_lock);
	INIT_LIST_HEAD(&sdev->exports);
	INIT_LIST_HEAD(&sdev->card_node);
}

/* ---- importer ---- */

/* Stop using the attachment's addresses; resv held. */
static void spyre_peer_unmap(struct spyre_bo *bo)
{
	struct dma_buf_attachment *attach = bo->shmem.base.import_attach;

	dma_resv_assert_held(attach->dmabuf->resv);
	if (bo->peer_sgt)
		dma_buf_unmap_attachment(attach, bo->peer_sgt, DMA_BIDIRECTIONAL);
	bo->peer_sgt = NULL;
}

/*
 * The exporter revoked the mapping (it only does so when it goes away): refuse new jobs,
 * wait for the ones holding the BO (bounded: a job stuck on a fence times out on its own
 * card; its copy then fails on the vanished addresses, it cannot reach anything else as
 * the page tables stay this BO's), then give the addresses back.
 */
static void spyre_peer_move_notify(struct dma_buf_attachment *attach)
{
	struct spyre_bo *bo = attach->importer_priv;
	struct spyre_device *sdev = to_spyre_dev(bo->shmem.base.dev);

	WRITE_ONCE(bo->p2p_revoked, true);
	smp_mb(); /* pairs with spyre_peer_job_hold() */
	if (!wait_event_timeout(bo->peer_idle, !atomic_read(&bo->peer_busy),
				SPYRE_P2P_REVOKE_WAIT))
		drm_warn(&sdev->drm, "peer BO revoked with %d jobs still using it\n",
			 atomic_read(&bo->peer_busy));
	spyre_peer_unmap(bo);
}

static const struct dma_buf_attach_ops spyre_peer_attach_ops = {
	.allow_peer2peer = true,
	.move_notify = spyre_peer_move_notify,
};

/* A job is about to use PEER BO @bo: counted until spyre_peer_job_release(). */
int spyre_peer_job_hold(struct spyre_bo *bo)
{
	atomic_inc(&bo->peer_busy);
	smp_mb__after_atomic(); /* pairs with spyre_peer_move_notify() */
	return READ_ONCE(bo->p2p_revoked) ? -ENODEV : 0;
}

void spyre_peer_job_release(struct spyre_bo *bo)
{
	if (atomic_dec_and_test(&bo->peer_busy))
		wake_up_all(&bo->peer_idle);
}

static void spyre_peer_bo_free(struct drm_gem_object *obj)
{
	struct spyre_device *sdev = to_spyre_dev(obj->dev);
	struct dma_buf_attachment *attach = obj->import_attach;
	struct spyre_bo *bo = to_spyre_bo(obj);
	struct dma_buf *dmabuf = attach->dmabuf;

	dma_resv_lock(dmabuf->resv, NULL);
	spyre_peer_unmap(bo);
	dma_resv_unlock(dmabuf->resv);
	dma_buf_detach(dmabuf, attach);
	dma_buf_put(dmabuf);
	spyre_bo_free_pagedir(sdev, bo);
	drm_gem_object_release(obj);
	kfree(bo);
}

/* Not CPU-mappable through the importer, not a LAUNCH window: no mmap, no vm. */
static const struct drm_gem_object_funcs spyre_peer_bo_funcs = {
	.free = spyre_peer_bo_free,
};

static struct drm_gem_object *spyre_peer_import(struct spyre_device *sdev,
						struct dma_buf *dmabuf)
{
	struct dma_buf_attachment *attach;
	struct drm_gem_object *obj;
	struct spyre_bo *bo;
	struct sg_table *sgt;
	int ret;

	if (!(sdev->caps & SPYRE_CAP_P2P))
		return ERR_PTR(-EOPNOTSUPP);
	if (!dmabuf->size || !PAGE_ALIGNED(dmabuf->size))
		return ERR_PTR(-EINVAL);

	bo = kzalloc(sizeof(*bo), GFP_KERNEL_ACCOUNT);
	if (!bo)
		return ERR_PTR(-ENOMEM);
	bo->flags = DRM_SPYRE_BO_PEER;
	INIT_LIST_HEAD(&bo->zombie);
	INIT_LIST_HEAD(&bo->export_node);
	init_waitqueue_head(&bo->peer_idle);
	obj = &bo->shmem.base;
	obj->funcs = &spyre_peer_bo_funcs;
	obj->resv = dmabuf->resv;
	drm_gem_private_object_init(&sdev->drm, obj, dmabuf->size);

	attach = dma_buf_dynamic_attach(dmabuf, sdev->drm.dev, &spyre_peer_attach_ops, bo);
	if (IS_ERR(attach)) {
		drm_gem_object_release(obj);
		kfree(bo);
		return ERR_CAST(attach);
	}
	get_dma_buf(dmabuf);
	obj->import_attach = attach;
	/* From here on spyre_peer_bo_free() undoes everything. */

	dma_resv_lock(dmabuf->resv, NULL);
	sgt = dma_buf_map_attachment(attach, DMA_BIDIRECTIONAL);
	if (!IS_ERR(sgt))
		bo->peer_sgt = sgt;
	dma_resv_unlock(dmabuf->resv);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		goto err;
	}
	ret = spyre_bo_build_pagedir(sdev, bo, sgt);
	if (ret)
		goto err;
	return obj;

err:
	drm_gem_object_put(obj);
	return ERR_PTR(ret);
}

/*
 * PRIME import: a DEVICE BO of this card is the same BO; one of a peer spyre card becomes a
 * PEER BO; everything else as before (a HOST BO of this card is the same BO, other
 * dma-bufs -EINVAL).
 */
struct drm_gem_object *spyre_gem_prime_import(struct drm_device *drm, struct dma_buf *dmabuf)
{
	struct drm_gem_object *obj;

	if (dmabuf->ops != &spyre_dmabuf_ops)
		return drm_gem_prime_import(drm, dmabuf);
	obj = dmabuf->priv;
	if (obj->dev == drm) {
		drm_gem_object_get(obj);
		return obj;
	}
	return spyre_peer_import(to_spyre_dev(drm), dmabuf);
}
