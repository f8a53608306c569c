// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: buffer objects.
 *
 * DEVICE BOs are ranges of card memory handed out by a drm_mm; the CPU maps them through
 * BAR2, write-combined (shared mappings only); with CAP_P2P they export as dma-bufs that
 * only peer spyre cards import (spyre_dmabuf.c). HOST BOs are shmem objects, pinned and
 * DMA-mapped at creation (the pinned pages count in the creator's pinned_vm, against its
 * RLIMIT_MEMLOCK) and described to the DMA engine by a two-level host page directory
 * (spyre_hw.h), as are PEER BOs (a peer's DEVICE BO, spyre_dmabuf.c).
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/dma-mapping.h>
#include <linux/mm.h>
#include <linux/capability.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/pagemap.h>
#include <linux/scatterlist.h>

#include <drm/drm_drv.h>
#include <drm/drm_vma_manager.h>

#include "spyre_drv.h"

/* ---- DEVICE BOs ---- */

/* Return the card memory of a freed DEVICE BO; mm_lock held. */
static void spyre_dev_bo_release_node(struct spyre_device *sdev, struct spyre_bo *bo)
{
	lockdep_assert_held(&sdev->mm_lock);
	if (drm_mm_node_allocated(&bo->node)) {
		sdev->devmem_used -= bo->node.size;
		drm_mm_remove_node(&bo->node);
	}
	dma_fence_put(bo->clear_fence);
	kfree(bo);
}

/*
 * A DEVICE BO whose clear is still running (BO_CREATE was interrupted) keeps its card
 * memory on the zombie list until the clear's fence has signalled: the card may still be
 * writing it. So does every DEVICE BO freed while bus mastering is stopped (a card that was
 * not confirmed idle: its failed jobs may still run and write their BOs), until a reset
 * completes. Reaped at the next allocation or memory query, all of them at teardown.
 */
void spyre_gem_reap(struct spyre_device *sdev, bool all)
{
	struct spyre_bo *bo, *tmp;

	lockdep_assert_held(&sdev->mm_lock);
	if (!all && READ_ONCE(sdev->dma_stopped))
		return;
	list_for_each_entry_safe(bo, tmp, &sdev->zombies, zombie) {
		if (!all && bo->clear_fence && !dma_fence_is_signaled(bo->clear_fence))
			continue;
		list_del(&bo->zombie);
		spyre_dev_bo_release_node(sdev, bo);
	}
}

static void spyre_dev_bo_free(struct drm_gem_object *obj)
{
	struct spyre_device *sdev = to_spyre_dev(obj->dev);
	struct spyre_bo *bo = to_spyre_bo(obj);

	drm_gem_object_release(obj);
	/* Out of its file's address space before its card memory can be reused. */
	spyre_vm_unmap_bo(bo);
	mutex_lock(&sdev->mm_lock);
	if (READ_ONCE(sdev->dma_stopped) ||
	    (bo->clear_fence && !dma_fence_is_signaled(bo->clear_fence)))
		list_add_tail(&bo->zombie, &sdev->zombies);
	else
		spyre_dev_bo_release_node(sdev, bo);
	mutex_unlock(&sdev->mm_lock);
}

static vm_fault_t spyre_dev_bo_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct drm_gem_object *obj = vma->vm_private_data;
	struct spyre_device *sdev = to_spyre_dev(obj->dev);
	struct spyre_bo *bo = to_spyre_bo(obj);
	unsigned long page = vma->vm_pgoff + ((vmf->address - vma->vm_start) >> PAGE_SHIFT);
	u64 offset = bo->node.start + ((u64)page << PAGE_SHIFT);
	vm_fault_t ret;
	int idx;

	if (page >= obj->size >> PAGE_SHIFT || offset + PAGE_SIZE > sdev->devmem_bar_len)
		return VM_FAULT_SIGBUS;
	if (!drm_dev_enter(obj->dev, &idx))
		return VM_FAULT_SIGBUS;
	ret = vmf_insert_pfn(vma, vmf->address, (sdev->devmem_bar_start + offset) >> PAGE_SHIFT);
	drm_dev_exit(idx);
	return ret;
}

static const struct vm_operations_struct spyre_dev_bo_vm_ops = {
	.fault = spyre_dev_bo_fault,
	.open = drm_gem_vm_open,
	.close = drm_gem_vm_close,
};

/*
 * Shared mappings only: a private (copy-on-write) mapping of PFNMAP memory cannot work
 * (vmf_insert_pfn() refuses it), whether through the accel fd or a dma-buf.
 */
static int spyre_dev_bo_mmap(struct drm_gem_object *obj, struct vm_area_struct *vma)
{
	if (is_cow_mapping(vma->vm_flags))
		return -EINVAL;
	/* Make vm_pgoff the page offset inside the BO. */
	vma->vm_pgoff -= drm_vma_node_start(&obj->vma_node);
	vm_flags_set(vma, VM_PFNMAP | VM_IO | VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_page_prot = pgprot_writecombine(vm_get_page_prot(vma->vm_flags));
	return 0;
}

static const struct drm_gem_object_funcs spyre_dev_bo_funcs = {
	.free = spyre_dev_bo_free,
	.export = spyre_dmabuf_export,
	.mmap = spyre_dev_bo_mmap,
	.vm_ops = &spyre_dev_bo_vm_ops,
};

static struct spyre_bo *spyre_dev_bo_create(struct spyre_device *sdev, u64 size)
{
	struct spyre_bo *bo;
	int ret;

	bo = kzalloc(sizeof(*bo), GFP_KERNEL_ACCOUNT);
	if (!bo)
		return ERR_PTR(-ENOMEM);
	bo->flags = DRM_SPYRE_BO_DEVICE;
	bo->shmem.base.funcs = &spyre_dev_bo_funcs;
	INIT_LIST_HEAD(&bo->zombie);
	INIT_LIST_HEAD(&bo->export_node);
	drm_gem_private_object_init(&sdev->drm, &bo->shmem.base, size);

	mutex_lock(&sdev->mm_lock);
	spyre_gem_reap(sdev, false);
	ret = drm_mm_insert_node_generic(&sdev->mm, &bo->node, size, PAGE_SIZE, 0,
					 DRM_MM_INSERT_BEST);
	if (!ret)
		sdev->devmem_used += size;
	mutex_unlock(&sdev->mm_lock);
	if (ret) {
		ret = -ENOMEM;
		goto err;
	}

	ret = drm_gem_create_mmap_offset(&bo->shmem.base);
	if (ret)
		goto err;
	return bo;

err:
	drm_gem_object_put(&bo->shmem.base);
	return ERR_PTR(ret);
}

/* ---- HOST BOs ---- */

void spyre_bo_free_pagedir(struct spyre_device *sdev, struct spyre_bo *bo)
{
	struct device *dev = sdev->drm.dev;
	unsigned int i;

	if (bo->tables) {
		for (i = 0; i < bo->num_tables; i++)
			if (bo->tables[i])
				dma_free_coherent(dev, SPYRE_HOST_PAGE_SIZE, bo->tables[i],
						  bo->tables_dma[i]);
	}
	kvfree(bo->tables);
	kvfree(bo->tables_dma);
	bo->tables = NULL;
	bo->tables_dma = NULL;
	if (bo->pagedir)
		dma_free_coherent(dev, bo->pagedir_bytes, bo->pagedir, bo->pagedir_dma);
	bo->pagedir = NULL;
}

static void spyre_host_bo_free(struct drm_gem_object *obj)
{
	struct spyre_device *sdev = to_spyre_dev(obj->dev);
	struct spyre_bo *bo = to_spyre_bo(obj);

	if (bo->pagedir)
		atomic64_sub(obj->size, &sdev->host_bo_bytes);
	/* No mmap_lock here: the last reference may go in munmap() or exit_mmap(). */
	if (bo->pin_mm) {
		atomic64_sub(obj->size >> PAGE_SHIFT, &bo->pin_mm->pinned_vm);
		mmdrop(bo->pin_mm);
	}
	spyre_bo_free_pagedir(sdev, bo);
	drm_gem_shmem_free(&bo->shmem);
}

static const struct drm_gem_object_funcs spyre_host_bo_funcs = {
	.free = spyre_host_bo_free,
	.print_info = drm_gem_shmem_object_print_info,
	.pin = drm_gem_shmem_object_pin,
	.unpin = drm_gem_shmem_object_unpin,
	.get_sg_table = drm_gem_shmem_object_get_sg_table,
	.vmap = drm_gem_shmem_object_vmap,
	.vunmap = drm_gem_shmem_object_vunmap,
	.mmap = drm_gem_shmem_object_mmap,
	.vm_ops = &drm_gem_shmem_vm_ops,
};

/* drm_gem_shmem_create() allocates through this hook; only HOST BOs are shmem objects. */
struct drm_gem_object *spyre_gem_create_object(struct drm_device *drm, size_t size)
{
	struct spyre_bo *bo = kzalloc(sizeof(*bo), GFP_KERNEL_ACCOUNT);

	if (!bo)
		return ERR_PTR(-ENOMEM);
	bo->flags = DRM_SPYRE_BO_HOST;
	bo->shmem.base.funcs = &spyre_host_bo_funcs;
	return &bo->shmem.base;
}

/* Build the page directory of a HOST or PEER BO from the DMA addresses of @sgt. */
int spyre_bo_build_pagedir(struct spyre_device *sdev, struct spyre_bo *bo, struct sg_table *sgt)
{
	struct device *dev = sdev->drm.dev;
	u64 npages = bo->shmem.base.size >> SPYRE_HOST_PAGE_SHIFT;
	struct sg_dma_page_iter iter;
	__le64 *dir, *table;
	u64 n = 0;
	unsigned int i;

	bo->num_tables = DIV_ROUND_UP(npages, SPYRE_HOST_PT_ENTRIES);
	bo->tables = kvcalloc(bo->num_tables, sizeof(*bo->tables), GFP_KERNEL_ACCOUNT);
	bo->tables_dma = kvcalloc(bo->num_tables, sizeof(*bo->tables_dma), GFP_KERNEL_ACCOUNT);
	if (!bo->tables || !bo->tables_dma)
		goto err;
	bo->pagedir_bytes = PAGE_ALIGN(bo->num_tables * sizeof(u64));
	bo->pagedir = dma_alloc_coherent(dev, bo->pagedir_bytes, &bo->pagedir_dma, GFP_KERNEL);
	if (!bo->pagedir)
		goto err;
	dir = (__le64 *)bo->pagedir;

	for (i = 0; i < bo->num_tables; i++) {
		bo->tables[i] = dma_alloc_coherent(dev, SPYRE_HOST_PAGE_SIZE, &bo->tables_dma[i],
						   GFP_KERNEL);
		if (!bo->tables[i])
			goto err;
		dir[i] = cpu_to_le64(bo->tables_dma[i]);
	}

	for_each_sgtable_dma_page(sgt, &iter, 0) {
		dma_addr_t addr = sg_page_iter_dma_address(&iter);
		unsigned int sub;

		for (sub = 0; sub < PAGE_SIZE / SPYRE_HOST_PAGE_SIZE && n < npages; sub++, n++) {
			table = (__le64 *)bo->tables[n / SPYRE_HOST_PT_ENTRIES];
			table[n % SPYRE_HOST_PT_ENTRIES] =
				cpu_to_le64(addr + sub * SPYRE_HOST_PAGE_SIZE);
		}
	}
	if (WARN_ON(n != npages))
		goto err;
	return 0;

err:
	spyre_bo_free_pagedir(sdev, bo);
	return -ENOMEM;
}

static struct spyre_bo *spyre_host_bo_create(struct spyre_device *sdev, u64 size)
{
	struct drm_gem_shmem_object *shmem;
	struct sg_table *sgt;
	struct spyre_bo *bo;
	s64 npages, pinned;
	int ret;

	shmem = drm_gem_shmem_create(&sdev->drm, size);
	if (IS_ERR(shmem))
		return ERR_CAST(shmem);
	bo = container_of(shmem, struct spyre_bo, shmem);

	/*
	 * Pinned pages are locked memory: charge them to the caller's mm->pinned_vm against
	 * RLIMIT_MEMLOCK (unless CAP_IPC_LOCK), as RDMA memory registration does. The shmem
	 * pages themselves are charged to the caller's memory cgroup.
	 */
	npages = size >> PAGE_SHIFT;
	pinned = atomic64_add_return(npages, &current->mm->pinned_vm);
	if (pinned > rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &current->mm->pinned_vm);
		drm_gem_object_put(&shmem->base);
		return ERR_PTR(-ENOMEM);
	}
	bo->pin_mm = current->mm;
	mmgrab(bo->pin_mm);

	/* Pin the pages, map them for the device and build the page directory. */
	sgt = drm_gem_shmem_get_pages_sgt(&bo->shmem);
	ret = IS_ERR(sgt) ? PTR_ERR(sgt) : spyre_bo_build_pagedir(sdev, bo, sgt);
	if (!ret) {
		atomic64_add(size, &sdev->host_bo_bytes);
		ret = drm_gem_create_mmap_offset(&shmem->base);
	}
	if (ret) {
		drm_gem_object_put(&shmem->base);
		return ERR_PTR(ret);
	}
	return bo;
}

/* ---- ioctls ---- */

int spyre_ioctl_bo_create(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct spyre_device *sdev = to_spyre_dev(drm);
	struct drm_spyre_bo_create *args = data;
	struct spyre_file *sf = file->driver_priv;
	u64 max = sdev->devmem_size - SPYRE_DEVMEM_RESERVED;
	struct spyre_bo *bo;
	u64 size;
	int ret;

	if (args->flags != DRM_SPYRE_BO_DEVICE && args->flags != DRM_SPYRE_BO_HOST)
		return -EINVAL;
	if (args->size == 0)
		return -EINVAL;
	if (args->size > max)
		return -ENOMEM;
	size = PAGE_ALIGN(args->size);

	if (args->flags == DRM_SPYRE_BO_DEVICE)
		bo = spyre_dev_bo_create(sdev, size);
	else
		bo = spyre_host_bo_create(sdev, size);
	if (IS_ERR(bo))
		return PTR_ERR(bo);

	/* Card memory may hold another client's data: clear it before anyone sees it. */
	if (args->flags == DRM_SPYRE_BO_DEVICE) {
		ret = spyre_job_clear_bo(sdev, bo);
		if (!ret && sf->vm)
			ret = spyre_vm_map_bo(sf->vm, bo);
		if (ret) {
			drm_gem_object_put(&bo->shmem.base);
			return ret;
		}
	}

	ret = drm_gem_handle_create(file, &bo->shmem.base, &args->handle);
	drm_gem_object_put(&bo->shmem.base);
	return ret;
}

int spyre_ioctl_bo_info(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_spyre_bo_info *args = data;
	struct drm_gem_object *obj;
	struct spyre_bo *bo;

	if (args->in_flags || args->pad)
		return -EINVAL;
	obj = drm_gem_object_lookup(file, args->handle);
	if (!obj)
		return -ENOENT;
	bo = to_spyre_bo(obj);
	args->flags = bo->flags;
	args->size = obj->size;
	args->dev_addr = bo->flags == DRM_SPYRE_BO_DEVICE ? spyre_bo_dev_addr(bo) : 0;
	args->mmap_offset = drm_vma_node_offset_addr(&obj->vma_node);
	drm_gem_object_put(obj);
	return 0;
}

/* ---- device memory allocator ---- */

u64 spyre_gem_largest_free(struct spyre_device *sdev)
{
	struct drm_mm_node *node;
	u64 start, end, best = 0;

	lockdep_assert_held(&sdev->mm_lock);
	drm_mm_for_each_hole(node, &sdev->mm, start, end)
		best = max(best, end - start);
	return best;
}

int spyre_gem_init(struct spyre_device *sdev)
{
	mutex_init(&sdev->mm_lock);
	INIT_LIST_HEAD(&sdev->zombies);
	drm_mm_init(&sdev->mm, SPYRE_DEVMEM_RESERVED, sdev->devmem_size - SPYRE_DEVMEM_RESERVED);
	return 0;
}

void spyre_gem_fini(struct spyre_device *sdev)
{
	mutex_lock(&sdev->mm_lock);
	spyre_gem_reap(sdev, true);
	mutex_unlock(&sdev->mm_lock);
	drm_mm_takedown(&sdev->mm);
	mutex_destroy(&sdev->mm_lock);
}

/* The zero source of spyre_job_clear_bo(), covering all of device memory. */
int spyre_gem_hw_init(struct spyre_device *sdev)
{
	struct device *dev = sdev->drm.dev;
	u64 n = DIV_ROUND_UP(sdev->devmem_size, 1ull << SPYRE_HOST_PT_SHIFT);
	u64 i;

	sdev->zero_dir_bytes = PAGE_ALIGN(n * sizeof(u64));
	sdev->zero_page = dma_alloc_coherent(dev, SPYRE_HOST_PAGE_SIZE, &sdev->zero_page_dma,
					     GFP_KERNEL);
	sdev->zero_pt = dma_alloc_coherent(dev, SPYRE_HOST_PAGE_SIZE, &sdev->zero_pt_dma,
					   GFP_KERNEL);
	sdev->zero_dir = dma_alloc_coherent(dev, sdev->zero_dir_bytes, &sdev->zero_dir_dma,
					    GFP_KERNEL);
	if (!sdev->zero_page || !sdev->zero_pt || !sdev->zero_dir) {
		spyre_gem_hw_fini(sdev);
		return -ENOMEM;
	}
	memset(sdev->zero_page, 0, SPYRE_HOST_PAGE_SIZE);
	for (i = 0; i < SPYRE_HOST_PT_ENTRIES; i++)
		sdev->zero_pt[i] = cpu_to_le64(sdev->zero_page_dma);
	for (i = 0; i < n; i++)
		sdev->zero_dir[i] = cpu_to_le64(sdev->zero_pt_dma);
	return 0;
}

void spyre_gem_hw_fini(struct spyre_device *sdev)
{
	struct device *dev = sdev->drm.dev;

	if (sdev->zero_dir)
		dma_free_coherent(dev, sdev->zero_dir_bytes, sdev->zero_dir, sdev->zero_dir_dma);
	if (sdev->zero_pt)
		dma_free_coherent(dev, SPYRE_HOST_PAGE_SIZE, sdev->zero_pt, sdev->zero_pt_dma);
	if (sdev->zero_page)
		dma_free_coherent(dev, SPYRE_HOST_PAGE_SIZE, sdev->zero_page,
				  sdev->zero_page_dma);
	sdev->zero_dir = NULL;
	sdev->zero_pt = NULL;
	sdev->zero_page = NULL;
}

/* Zap every CPU mapping of the device's BOs; later faults on DEVICE BOs get SIGBUS. */
void spyre_gem_unmap_all(struct spyre_device *sdev)
{
	if (sdev->drm.anon_inode)
		unmap_mapping_range(sdev->drm.anon_inode->i_mapping, 0, 0, 1);
}
