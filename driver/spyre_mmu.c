// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: per-file device address spaces on the card MMU (hw 1.3,
 * Documentation/hardware.md section 15).
 *
 * Every open file gets an MMU context and its own virtual address space; each DEVICE BO it
 * creates is mapped there at BO_CREATE, and every device address the file sees (BO_INFO)
 * or its commands use is a virtual address of that space. So one client's addresses never
 * name another client's memory, nor reveal where its own memory lies on the card.
 *
 * The page tables live in host memory (DMA-coherent pages). The card caches translations,
 * so every change is followed by an MMU_INVALIDATE of the context before anything relies
 * on it: a new mapping before BO_CREATE returns, a removed one before the BO's card memory
 * goes back to the allocator.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */

#include <linux/dma-mapping.h>
#include <linux/slab.h>

#include <drm/drm_drv.h>
#include <drm/drm_managed.h>

#include "spyre_drv.h"

#define SPYRE_MMU_ENTRIES	BIT(SPYRE_MMU_LEVEL_BITS)
/* Virtual addresses handed out: none below 64 KiB, so that 0 never names a BO. */
#define SPYRE_VA_START		SZ_64K
#define SPYRE_VA_END		BIT_ULL(SPYRE_MMU_VA_BITS)

static unsigned int spyre_mmu_index(u64 va, int level)
{
	int shift = SPYRE_MMU_PAGE_SHIFT + (3 - level) * SPYRE_MMU_LEVEL_BITS;

	return (va >> shift) & (SPYRE_MMU_ENTRIES - 1);
}

static int spyre_pt_alloc(struct spyre_device *sdev, struct spyre_pt *pt, bool leaf)
{
	pt->entries = dma_alloc_coherent(sdev->drm.dev, SPYRE_MMU_PAGE_SIZE, &pt->dma,
					 GFP_KERNEL);
	if (!pt->entries)
		return -ENOMEM;
	if (leaf)
		return 0;
	pt->child = kcalloc(SPYRE_MMU_ENTRIES, sizeof(*pt->child), GFP_KERNEL);
	if (!pt->child) {
		dma_free_coherent(sdev->drm.dev, SPYRE_MMU_PAGE_SIZE, pt->entries, pt->dma);
		pt->entries = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void spyre_pt_free(struct spyre_device *sdev, struct spyre_pt *pt)
{
	unsigned int i;

	if (pt->child) {
		for (i = 0; i < SPYRE_MMU_ENTRIES; i++) {
			if (!pt->child[i])
				continue;
			spyre_pt_free(sdev, pt->child[i]);
			kfree(pt->child[i]);
		}
		kfree(pt->child);
		pt->child = NULL;
	}
	if (pt->entries)
		dma_free_coherent(sdev->drm.dev, SPYRE_MMU_PAGE_SIZE, pt->entries, pt->dma);
	pt->entries = NULL;
}

/* The level-3 table covering @va, allocated (with its level-2 parent) if @create. */
static struct spyre_pt *spyre_vm_leaf(struct spyre_vm *vm, u64 va, bool create)
{
	struct spyre_pt *pt = &vm->root;
	int level;

	lockdep_assert_held(&vm->lock);
	for (level = 1; level < 3; level++) {
		unsigned int i = spyre_mmu_index(va, level);
		struct spyre_pt *next = pt->child[i];

		if (!next) {
			if (!create)
				return NULL;
			next = kzalloc(sizeof(*next), GFP_KERNEL);
			if (!next || spyre_pt_alloc(vm->sdev, next, level == 2)) {
				kfree(next);
				return NULL;
			}
			pt->child[i] = next;
			WRITE_ONCE(pt->entries[i], cpu_to_le64(next->dma | SPYRE_MMU_VALID));
		}
		pt = next;
	}
	return pt;
}

/* Drop the card's cached translations of the context (after a change to its tables). */
static void spyre_vm_invalidate(struct spyre_vm *vm)
{
	int idx;

	/* writel() orders the table writes before it; an unplugged card caches nothing. */
	if (drm_dev_enter(&vm->sdev->drm, &idx)) {
		spyre_write(vm->sdev, SPYRE_REG_MMU_INVALIDATE, vm->ctx);
		drm_dev_exit(idx);
	}
}

/* Write PTEs for [va, va + size) to device memory at @pa, or clear them (pa == U64_MAX). */
static int spyre_vm_set_range(struct spyre_vm *vm, u64 va, u64 size, u64 pa)
{
	u64 off;

	for (off = 0; off < size; off += SPYRE_MMU_PAGE_SIZE) {
		struct spyre_pt *leaf = spyre_vm_leaf(vm, va + off, pa != U64_MAX);
		u64 pte = 0;

		if (!leaf) {
			if (pa == U64_MAX)
				continue;
			return -ENOMEM;
		}
		if (pa != U64_MAX)
			pte = (pa + off) | SPYRE_MMU_VALID | SPYRE_MMU_WRITE;
		WRITE_ONCE(leaf->entries[spyre_mmu_index(va + off, 3)], cpu_to_le64(pte));
	}
	return 0;
}

/* Map DEVICE BO @bo into @vm; its device address becomes bo->va.start. */
int spyre_vm_map_bo(struct spyre_vm *vm, struct spyre_bo *bo)
{
	u64 size = bo->shmem.base.size;
	int ret;

	mutex_lock(&vm->lock);
	ret = drm_mm_insert_node_generic(&vm->va_mm, &bo->va, size, SPYRE_MMU_PAGE_SIZE, 0,
					 DRM_MM_INSERT_BEST);
	if (ret) {
		mutex_unlock(&vm->lock);
		return -ENOSPC;
	}
	ret = spyre_vm_set_range(vm, bo->va.start, size, bo->node.start);
	if (ret) {
		spyre_vm_set_range(vm, bo->va.start, size, U64_MAX);
		drm_mm_remove_node(&bo->va);
	} else {
		kref_get(&vm->ref);
		bo->vm = vm;
	}
	spyre_vm_invalidate(vm);
	mutex_unlock(&vm->lock);
	return ret;
}

/* Remove @bo's mapping; afterwards the card can no longer reach its memory through @vm. */
void spyre_vm_unmap_bo(struct spyre_bo *bo)
{
	struct spyre_vm *vm = bo->vm;

	if (!vm)
		return;
	mutex_lock(&vm->lock);
	spyre_vm_set_range(vm, bo->va.start, bo->va.size, U64_MAX);
	drm_mm_remove_node(&bo->va);
	spyre_vm_invalidate(vm);
	mutex_unlock(&vm->lock);
	bo->vm = NULL;
	spyre_vm_put(vm);
}

struct spyre_vm *spyre_vm_create(struct spyre_device *sdev)
{
	struct spyre_vm *vm;
	int ctx, ret;

	vm = kzalloc(sizeof(*vm), GFP_KERNEL_ACCOUNT);
	if (!vm)
		return ERR_PTR(-ENOMEM);
	ret = spyre_pt_alloc(sdev, &vm->root, false);
	if (ret)
		goto err_free;
	ctx = ida_alloc_range(&sdev->mmu_ctx_ida, 1, SPYRE_MMU_NUM_CTX - 1, GFP_KERNEL);
	if (ctx < 0) {
		ret = ctx == -ENOSPC ? -EBUSY : ctx;
		goto err_pt;
	}
	kref_init(&vm->ref);
	vm->sdev = sdev;
	vm->ctx = ctx;
	mutex_init(&vm->lock);
	drm_mm_init(&vm->va_mm, SPYRE_VA_START, SPYRE_VA_END - SPYRE_VA_START);
	/* The id may have been used before: nothing of its last owner may stay cached. */
	mutex_lock(&vm->lock);
	WRITE_ONCE(sdev->mmu_ctx_table[ctx], cpu_to_le64(vm->root.dma | SPYRE_MMU_VALID));
	spyre_vm_invalidate(vm);
	mutex_unlock(&vm->lock);
	return vm;

err_pt:
	spyre_pt_free(sdev, &vm->root);
err_free:
	kfree(vm);
	return ERR_PTR(ret);
}

static void spyre_vm_release(struct kref *ref)
{
	struct spyre_vm *vm = container_of(ref, struct spyre_vm, ref);
	struct spyre_device *sdev = vm->sdev;

	/* No BO is mapped any more (each holds a reference): retire the context, then free. */
	mutex_lock(&vm->lock);
	WRITE_ONCE(sdev->mmu_ctx_table[vm->ctx], 0);
	spyre_vm_invalidate(vm);
	mutex_unlock(&vm->lock);
	ida_free(&sdev->mmu_ctx_ida, vm->ctx);
	drm_mm_takedown(&vm->va_mm);
	spyre_pt_free(sdev, &vm->root);
	mutex_destroy(&vm->lock);
	kfree(vm);
}

void spyre_vm_put(struct spyre_vm *vm)
{
	if (vm)
		kref_put(&vm->ref, spyre_vm_release);
}

/* Point the card at the context table; again after every reset, which clears it. */
void spyre_mmu_hw_init(struct spyre_device *sdev)
{
	if (!sdev->mmu_ctx_table)
		return;
	spyre_write(sdev, SPYRE_REG_MMU_CTX_BASE_LO, lower_32_bits(sdev->mmu_ctx_table_dma));
	spyre_write(sdev, SPYRE_REG_MMU_CTX_BASE_HI, upper_32_bits(sdev->mmu_ctx_table_dma));
}

/* drm release: the last file and BO are gone, so is every address space. */
static void spyre_mmu_release(struct drm_device *drm, void *data)
{
	struct spyre_device *sdev = data;

	if (sdev->mmu_ctx_table)
		dma_free_coherent(drm->dev, SPYRE_MMU_PAGE_SIZE, sdev->mmu_ctx_table,
				  sdev->mmu_ctx_table_dma);
	sdev->mmu_ctx_table = NULL;
	ida_destroy(&sdev->mmu_ctx_ida);
}

/*
 * The context table outlives remove(): address spaces of files still open after a
 * hot-unplug retire their context in it when they go.
 */
int spyre_mmu_init(struct spyre_device *sdev)
{
	ida_init(&sdev->mmu_ctx_ida);
	if (sdev->caps & SPYRE_CAP_MMU) {
		sdev->mmu_ctx_table = dma_alloc_coherent(sdev->drm.dev, SPYRE_MMU_PAGE_SIZE,
							 &sdev->mmu_ctx_table_dma, GFP_KERNEL);
		if (!sdev->mmu_ctx_table)
			return -ENOMEM;
	}
	spyre_mmu_hw_init(sdev);
	return drmm_add_action_or_reset(&sdev->drm, spyre_mmu_release, sdev);
}
