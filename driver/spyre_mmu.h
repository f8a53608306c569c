/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Spyre accelerator driver: per-file device address spaces on the card MMU (hw 1.3).
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#ifndef __SPYRE_MMU_H__
#define __SPYRE_MMU_H__

#include <linux/atomic.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/types.h>
#include <linux/uidgid.h>

#include <drm/drm_mm.h>

struct spyre_device;
struct spyre_bo;

/* One page-table page of the card MMU and, above level 3, the tables it points to. */
struct spyre_pt {
	__le64 *entries;			/* DMA-coherent, SPYRE_MMU_PAGE_SIZE bytes */
	dma_addr_t dma;
	struct spyre_pt **child;		/* levels 1 and 2: 512 slots; NULL at level 3 */
	unsigned int used;			/* VALID entries; 0 below level 1: freed */
	struct list_head stale;			/* unlinked, freed after the next invalidate */
};

/*
 * The device address space of one open file: its page tables, the allocator of its virtual
 * addresses and, while bound, a hardware context id. Held by the file and by each BO mapped
 * in it.
 */
struct spyre_vm {
	struct kref ref;
	struct spyre_device *sdev;
	u64 client_id;				/* of the file (debugfs) */
	kuid_t uid;				/* who opened it: ctx_per_user */
	/*
	 * 1 .. SPYRE_MMU_NUM_CTX - 1 while bound, 0 when not: written under mmu_ctx_lock and
	 * lock both, read under either.
	 */
	u32 ctx;
	atomic_t busy;				/* jobs and probes running with ctx */
	struct list_head lru;			/* in sdev->mmu_ctx_lru while bound */
	struct mutex lock;			/* va_mm, the tables and pt_bytes */
	struct drm_mm va_mm;
	struct spyre_pt root;			/* level 1 */
	u64 pt_bytes;				/* table pages + child arrays (fdinfo) */
};

int spyre_mmu_init(struct spyre_device *sdev);
void spyre_mmu_hw_init(struct spyre_device *sdev);
struct spyre_vm *spyre_vm_create(struct spyre_device *sdev, u64 client_id);
void spyre_vm_put(struct spyre_vm *vm);
int spyre_vm_get_ctx(struct spyre_vm *vm, u32 *ctx);
void spyre_vm_put_ctx(struct spyre_vm *vm);
void spyre_vm_unbind_idle(struct spyre_vm *vm);
int spyre_vm_map_bo(struct spyre_vm *vm, struct spyre_bo *bo);
void spyre_vm_unmap_bo(struct spyre_bo *bo);

#endif /* __SPYRE_MMU_H__ */
