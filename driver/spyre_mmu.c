// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: per-file device address spaces on the card MMU (hw 1.3,
 * Documentation/hardware.md section 15).
 *
 * Every open file gets its own virtual address space; each DEVICE BO it creates is mapped
 * there at BO_CREATE, and every device address the file sees (BO_INFO) or its commands use
 * is a virtual address of that space. So one client's addresses never name another client's
 * memory, nor reveal where its own memory lies on the card.
 *
 * The card has only 255 context ids, so an address space gets one only when a job (or a
 * debugfs probe) is to run in it, at SUBMIT, where we may sleep; the job holds it (vm->busy)
 * until it is freed, so run_job and recovery never bind anything. When every id is bound, one
 * is taken from the address space that has gone longest without binding and has nothing
 * running (its context entry rewritten and the id invalidated), and that space gets an id
 * again at its next SUBMIT; if every id is held by jobs, SUBMIT waits (bounded) for one.
 * One user's jobs may hold at most ctx_per_user ids (counted over the files that user
 * opened), so whatever one user runs, the others find an id free or idle to take.
 * Opening a file, QUERY and BO_CREATE take none: tables are host memory, changed freely while
 * no id is bound, and binding invalidates the id before any command uses it.
 *
 * The page tables live in host memory (DMA-coherent pages, charged to the memcg of the
 * file's caller). The card caches translations, so every change is followed by an
 * MMU_INVALIDATE of the context before anything relies on it: a new mapping before
 * BO_CREATE returns, a removed one before the BO's card memory goes back to the allocator.
 * A level-2/3 table left without a VALID entry by an unmap is unlinked and freed right
 * after that invalidate (the card may read any table of the context until then).
 *
 * Locking: vm->lock covers the va allocator, every table (entries, children, counts) and
 * pt_bytes, from a change through its invalidate to the free of what it unlinked.
 * sdev->mmu_ctx_lock covers the binding of ids (taken before a vm->lock, never after):
 * vm->ctx changes under both, so an unmap that sees 0 knows the card has dropped the
 * space's translations (unbinding invalidated the id before it cleared vm->ctx).
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */

#include <linux/cred.h>
#include <linux/dma-mapping.h>
#include <linux/moduleparam.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include <drm/drm_drv.h>
#include <drm/drm_managed.h>

#include "spyre_drv.h"

#define SPYRE_MMU_ENTRIES	BIT(SPYRE_MMU_LEVEL_BITS)
/* Virtual addresses handed out: none below 64 KiB, so that 0 never names a BO. */
#define SPYRE_VA_START		SZ_64K
#define SPYRE_VA_END		BIT_ULL(SPYRE_MMU_VA_BITS)
/* How long SUBMIT waits for a context id while jobs hold every one; then -EBUSY. */
#define SPYRE_CTX_WAIT_MS	1000

/*
 * Ids one user (the euid that opened the files) may keep busy at once, so that one user's
 * jobs never hold every id: the others always find one free or idle to take. Root may change
 * it at run time; it applies to the next SUBMIT.
 */
static unsigned int spyre_ctx_per_user = 64;
module_param_named(ctx_per_user, spyre_ctx_per_user, uint, 0644);
MODULE_PARM_DESC(ctx_per_user,
		 "MMU context ids one user's jobs may hold at once (1..254, default 64)");

static unsigned int spyre_mmu_index(u64 va, int level)
{
	int shift = SPYRE_MMU_PAGE_SHIFT + (3 - level) * SPYRE_MMU_LEVEL_BITS;

	return (va >> shift) & (SPYRE_MMU_ENTRIES - 1);
}

/* Bytes a table takes: its page and, above level 3, the array of its children. */
static u64 spyre_pt_bytes(bool leaf)
{
	return SPYRE_MMU_PAGE_SIZE + (leaf ? 0 : SPYRE_MMU_ENTRIES * sizeof(struct spyre_pt *));
}

static void spyre_vm_count_pt(struct spyre_vm *vm, s64 bytes)
{
	WRITE_ONCE(vm->pt_bytes, vm->pt_bytes + bytes);
	atomic64_add(bytes, &vm->sdev->mmu_pt_bytes);
}

/*
 * Tables are allocated on behalf of the file whose BO (or open) needs them: charged to the
 * caller's memcg, like the address space itself.
 */
static int spyre_pt_alloc(struct spyre_vm *vm, struct spyre_pt *pt, bool leaf)
{
	struct device *dev = vm->sdev->drm.dev;

	pt->entries = dma_alloc_coherent(dev, SPYRE_MMU_PAGE_SIZE, &pt->dma, GFP_KERNEL_ACCOUNT);
	if (!pt->entries)
		return -ENOMEM;
	if (!leaf) {
		pt->child = kcalloc(SPYRE_MMU_ENTRIES, sizeof(*pt->child), GFP_KERNEL_ACCOUNT);
		if (!pt->child) {
			dma_free_coherent(dev, SPYRE_MMU_PAGE_SIZE, pt->entries, pt->dma);
			pt->entries = NULL;
			return -ENOMEM;
		}
	}
	spyre_vm_count_pt(vm, spyre_pt_bytes(leaf));
	return 0;
}

/* Free @pt and every table below it (the card must no longer read any of them). */
static void spyre_pt_free(struct spyre_vm *vm, struct spyre_pt *pt)
{
	bool leaf = !pt->child;
	unsigned int i;

	if (!pt->entries)
		return;
	if (pt->child) {
		for (i = 0; i < SPYRE_MMU_ENTRIES; i++) {
			if (!pt->child[i])
				continue;
			spyre_pt_free(vm, pt->child[i]);
			kfree(pt->child[i]);
		}
		kfree(pt->child);
		pt->child = NULL;
	}
	dma_free_coherent(vm->sdev->drm.dev, SPYRE_MMU_PAGE_SIZE, pt->entries, pt->dma);
	pt->entries = NULL;
	spyre_vm_count_pt(vm, -(s64)spyre_pt_bytes(leaf));
}

/* Free the tables unlinked by spyre_vm_set_range(), once the card cannot read them. */
static void spyre_pt_free_stale(struct spyre_vm *vm, struct list_head *stale)
{
	struct spyre_pt *pt, *tmp;

	list_for_each_entry_safe(pt, tmp, stale, stale) {
		list_del(&pt->stale);
		spyre_pt_free(vm, pt);
		kfree(pt);
	}
}

/* The level-3 table covering @va, allocated (with its level-2 parent) if missing. */
static struct spyre_pt *spyre_vm_leaf(struct spyre_vm *vm, u64 va)
{
	struct spyre_pt *pt = &vm->root;
	int level;

	lockdep_assert_held(&vm->lock);
	for (level = 1; level < 3; level++) {
		unsigned int i = spyre_mmu_index(va, level);
		struct spyre_pt *next = pt->child[i];

		if (!next) {
			next = kzalloc(sizeof(*next), GFP_KERNEL_ACCOUNT);
			if (!next || spyre_pt_alloc(vm, next, level == 2)) {
				kfree(next);
				return NULL;
			}
			pt->child[i] = next;
			pt->used++;
			WRITE_ONCE(pt->entries[i], cpu_to_le64(next->dma | SPYRE_MMU_VALID));
		}
		pt = next;
	}
	return pt;
}

/*
 * Unlink the empty table child @i of @parent: its entry is cleared now, the table goes on
 * @stale and is freed only after the invalidate that follows (the card may read it until
 * then). Empty: no VALID entry, so no BO is mapped through it and no job can be using a
 * translation it gave (jobs hold their BOs, and so their mappings, until they are freed).
 */
static void spyre_pt_unlink(struct spyre_pt *parent, unsigned int i, struct list_head *stale)
{
	struct spyre_pt *pt = parent->child[i];

	WRITE_ONCE(parent->entries[i], 0);
	parent->child[i] = NULL;
	parent->used--;
	list_add_tail(&pt->stale, stale);
}

/* Clear the PTE of @va; tables left empty go to @stale. */
static void spyre_vm_clear_page(struct spyre_vm *vm, u64 va, struct list_head *stale)
{
	unsigned int i1 = spyre_mmu_index(va, 1), i2 = spyre_mmu_index(va, 2);
	unsigned int i3 = spyre_mmu_index(va, 3);
	struct spyre_pt *l2 = vm->root.child[i1], *leaf;

	if (!l2)
		return;
	leaf = l2->child[i2];
	if (leaf && leaf->entries[i3]) {
		WRITE_ONCE(leaf->entries[i3], 0);
		if (!--leaf->used)
			spyre_pt_unlink(l2, i2, stale);
	}
	/* Also a level-2 table left empty by a failed allocation of its level-3 table. */
	if (!l2->used)
		spyre_pt_unlink(&vm->root, i1, stale);
}

/*
 * Drop the card's cached translations of the context (after a change to its tables). The
 * read-back makes the (posted) invalidate reach the card before the caller frees a table
 * or gives memory back: after it, the card reads the tables again from level 1 only.
 */
static void spyre_ctx_invalidate(struct spyre_device *sdev, u32 ctx)
{
	int idx;

	/* writel() orders the table writes before it; an unplugged card caches nothing. */
	if (drm_dev_enter(&sdev->drm, &idx)) {
		spyre_write(sdev, SPYRE_REG_MMU_INVALIDATE, ctx);
		spyre_read(sdev, SPYRE_REG_ID);
		drm_dev_exit(idx);
	}
}

/* An address space without an id has nothing cached on the card: unbinding invalidated. */
static void spyre_vm_invalidate(struct spyre_vm *vm)
{
	lockdep_assert_held(&vm->lock);
	if (vm->ctx)
		spyre_ctx_invalidate(vm->sdev, vm->ctx);
}

/*
 * Write PTEs for [va, va + size) to device memory at @pa, or clear them (pa == U64_MAX):
 * then the tables left empty are unlinked onto @stale, for the caller to free after its
 * invalidate.
 */
static int spyre_vm_set_range(struct spyre_vm *vm, u64 va, u64 size, u64 pa,
			      struct list_head *stale)
{
	u64 off;

	lockdep_assert_held(&vm->lock);
	for (off = 0; off < size; off += SPYRE_MMU_PAGE_SIZE) {
		unsigned int i3 = spyre_mmu_index(va + off, 3);
		struct spyre_pt *leaf;

		if (pa == U64_MAX) {
			spyre_vm_clear_page(vm, va + off, stale);
			continue;
		}
		leaf = spyre_vm_leaf(vm, va + off);
		if (!leaf)
			return -ENOMEM;
		if (!leaf->entries[i3])
			leaf->used++;
		WRITE_ONCE(leaf->entries[i3],
			   cpu_to_le64((pa + off) | SPYRE_MMU_VALID | SPYRE_MMU_WRITE));
	}
	return 0;
}

/* Map DEVICE BO @bo into @vm; its device address becomes bo->va.start. */
int spyre_vm_map_bo(struct spyre_vm *vm, struct spyre_bo *bo)
{
	u64 size = bo->shmem.base.size;
	LIST_HEAD(stale);
	int ret;

	mutex_lock(&vm->lock);
	ret = drm_mm_insert_node_generic(&vm->va_mm, &bo->va, size, SPYRE_MMU_PAGE_SIZE, 0,
					 DRM_MM_INSERT_BEST);
	if (ret) {
		mutex_unlock(&vm->lock);
		return -ENOSPC;
	}
	ret = spyre_vm_set_range(vm, bo->va.start, size, bo->node.start, &stale);
	if (ret) {
		/* Undo the part mapped, and free the tables it alone needed. */
		spyre_vm_set_range(vm, bo->va.start, size, U64_MAX, &stale);
		drm_mm_remove_node(&bo->va);
	} else {
		kref_get(&vm->ref);
		bo->vm = vm;
	}
	spyre_vm_invalidate(vm);
	spyre_pt_free_stale(vm, &stale);
	mutex_unlock(&vm->lock);
	return ret;
}

/*
 * Remove @bo's mapping; afterwards the card can no longer reach its memory through @vm.
 * Tables it leaves empty are freed after the invalidate, under the lock: the next mapping
 * cannot reuse their slots before the card has dropped what it read from them.
 */
void spyre_vm_unmap_bo(struct spyre_bo *bo)
{
	struct spyre_vm *vm = bo->vm;
	LIST_HEAD(stale);

	if (!vm)
		return;
	mutex_lock(&vm->lock);
	spyre_vm_set_range(vm, bo->va.start, bo->va.size, U64_MAX, &stale);
	drm_mm_remove_node(&bo->va);
	spyre_vm_invalidate(vm);
	spyre_pt_free_stale(vm, &stale);
	mutex_unlock(&vm->lock);
	bo->vm = NULL;
	spyre_vm_put(vm);
}

struct spyre_vm *spyre_vm_create(struct spyre_device *sdev, u64 client_id)
{
	struct spyre_vm *vm;
	int ret;

	vm = kzalloc(sizeof(*vm), GFP_KERNEL_ACCOUNT);
	if (!vm)
		return ERR_PTR(-ENOMEM);
	vm->sdev = sdev;
	vm->client_id = client_id;
	vm->uid = current_euid();
	ret = spyre_pt_alloc(vm, &vm->root, false);
	if (ret) {
		kfree(vm);
		return ERR_PTR(ret);
	}
	kref_init(&vm->ref);
	INIT_LIST_HEAD(&vm->lru);
	mutex_init(&vm->lock);
	drm_mm_init(&vm->va_mm, SPYRE_VA_START, SPYRE_VA_END - SPYRE_VA_START);
	atomic_inc(&sdev->mmu_contexts);
	return vm;
}

/* ---- context ids ---- */

/* A context id may be free to take: wake SUBMITs waiting for one. */
static void spyre_ctx_kick(struct spyre_device *sdev)
{
	atomic_inc(&sdev->mmu_ctx_gen);
	wake_up_all(&sdev->mmu_ctx_wq);
}

/*
 * Take @vm's id away: its context entry is cleared and the id invalidated (read back), so the
 * card no longer reaches the space's tables or cached translations through it, before
 * vm->ctx reads 0 (after which its unmaps skip the invalidate and free tables at once).
 * Nothing runs with the id: vm->busy is 0 (or the space is being released).
 */
static void spyre_vm_unbind(struct spyre_vm *vm)
{
	struct spyre_device *sdev = vm->sdev;
	u32 ctx = vm->ctx;

	lockdep_assert_held(&sdev->mmu_ctx_lock);
	if (!ctx)
		return;
	mutex_lock(&vm->lock);
	WRITE_ONCE(sdev->mmu_ctx_table[ctx], 0);
	spyre_ctx_invalidate(sdev, ctx);
	WRITE_ONCE(vm->ctx, 0);
	mutex_unlock(&vm->lock);
	sdev->mmu_ctx_owner[ctx] = NULL;
	list_del_init(&vm->lru);
	spyre_ctx_kick(sdev);
}

/*
 * Give @vm context id @ctx (free): its entry names the space's level-1 table, and the id is
 * invalidated before any command can use it, so nothing of a previous owner stays cached.
 */
static void spyre_vm_bind(struct spyre_vm *vm, u32 ctx)
{
	struct spyre_device *sdev = vm->sdev;

	lockdep_assert_held(&sdev->mmu_ctx_lock);
	mutex_lock(&vm->lock);
	WRITE_ONCE(sdev->mmu_ctx_table[ctx], cpu_to_le64(vm->root.dma | SPYRE_MMU_VALID));
	WRITE_ONCE(vm->ctx, ctx);
	spyre_vm_invalidate(vm);
	mutex_unlock(&vm->lock);
	sdev->mmu_ctx_owner[ctx] = vm;
	list_add_tail(&vm->lru, &sdev->mmu_ctx_lru);
}

/* A free id, or one taken from the least recently bound idle space; 0 if none. */
static u32 spyre_ctx_find(struct spyre_device *sdev)
{
	struct spyre_vm *victim;
	u32 ctx;

	lockdep_assert_held(&sdev->mmu_ctx_lock);
	for (ctx = 1; ctx < SPYRE_MMU_NUM_CTX; ctx++)
		if (!sdev->mmu_ctx_owner[ctx])
			return ctx;
	/* busy only rises under mmu_ctx_lock: an idle space stays idle while we hold it */
	list_for_each_entry(victim, &sdev->mmu_ctx_lru, lru) {
		if (atomic_read(&victim->busy))
			continue;
		ctx = victim->ctx;
		spyre_vm_unbind(victim);
		sdev->mmu_ctx_steals++;
		return ctx;
	}
	return 0;
}

/* The user of @vm already holds its share of busy ids: it may not make one more busy. */
static bool spyre_ctx_over_share(struct spyre_vm *vm)
{
	struct spyre_device *sdev = vm->sdev;
	unsigned int n = 0, max = clamp(READ_ONCE(spyre_ctx_per_user), 1U, SPYRE_MMU_NUM_CTX - 2);
	struct spyre_vm *o;
	u32 ctx;

	lockdep_assert_held(&sdev->mmu_ctx_lock);
	if (atomic_read(&vm->busy))
		return false;
	for (ctx = 1; ctx < SPYRE_MMU_NUM_CTX; ctx++) {
		o = sdev->mmu_ctx_owner[ctx];
		if (o && atomic_read(&o->busy) && uid_eq(o->uid, vm->uid))
			n++;
	}
	return n >= max;
}

/*
 * The context id of @vm for a job (or probe) about to be queued, bound now if it has none,
 * and held until spyre_vm_put_ctx(): while a job holds it no one can take it, so run_job,
 * a re-run after a reset and the completion all see the id the commands were written with.
 * May sleep: called from SUBMIT (and debugfs), never from the scheduler's paths. When jobs
 * hold every id, or the user's jobs already hold ctx_per_user of them, waits up to
 * SPYRE_CTX_WAIT_MS, interruptibly, for one to be given back, then fails with -EBUSY (the
 * caller may retry once some of its own jobs are done).
 */
int spyre_vm_get_ctx(struct spyre_vm *vm, u32 *ctx)
{
	struct spyre_device *sdev = vm->sdev;
	long left = msecs_to_jiffies(SPYRE_CTX_WAIT_MS);
	int gen;
	u32 c;

	mutex_lock(&sdev->mmu_ctx_lock);
	for (;;) {
		if (!spyre_ctx_over_share(vm)) {
			if (vm->ctx)
				break;
			c = spyre_ctx_find(sdev);
			if (c) {
				spyre_vm_bind(vm, c);
				break;
			}
		}
		gen = atomic_read(&sdev->mmu_ctx_gen);
		mutex_unlock(&sdev->mmu_ctx_lock);
		if (!left)
			return -EBUSY;
		left = wait_event_interruptible_timeout(sdev->mmu_ctx_wq,
							atomic_read(&sdev->mmu_ctx_gen) != gen,
							left);
		if (left < 0)
			return left;
		mutex_lock(&sdev->mmu_ctx_lock);
	}
	atomic_inc(&vm->busy);
	list_move_tail(&vm->lru, &sdev->mmu_ctx_lru);
	*ctx = vm->ctx;
	mutex_unlock(&sdev->mmu_ctx_lock);
	return 0;
}

/* The job (or probe) that held @vm's id is done with it: the id may be taken. */
void spyre_vm_put_ctx(struct spyre_vm *vm)
{
	if (atomic_dec_and_test(&vm->busy))
		spyre_ctx_kick(vm->sdev);
}

/* The file is closed: give its id back now, unless jobs of it still hold it. */
void spyre_vm_unbind_idle(struct spyre_vm *vm)
{
	struct spyre_device *sdev = vm->sdev;

	mutex_lock(&sdev->mmu_ctx_lock);
	if (!atomic_read(&vm->busy))
		spyre_vm_unbind(vm);
	mutex_unlock(&sdev->mmu_ctx_lock);
}

static void spyre_vm_release(struct kref *ref)
{
	struct spyre_vm *vm = container_of(ref, struct spyre_vm, ref);
	struct spyre_device *sdev = vm->sdev;

	/* No BO is mapped any more (each holds a reference), no job runs: retire the id. */
	mutex_lock(&sdev->mmu_ctx_lock);
	WARN_ON(atomic_read(&vm->busy));
	spyre_vm_unbind(vm);
	mutex_unlock(&sdev->mmu_ctx_lock);
	drm_mm_takedown(&vm->va_mm);
	/* Only the level-1 table is left: unmapping freed the rest (a leak would WARN). */
	WARN_ON(vm->pt_bytes != spyre_pt_bytes(false));
	spyre_pt_free(vm, &vm->root);
	atomic_dec(&sdev->mmu_contexts);
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
	mutex_destroy(&sdev->mmu_ctx_lock);
}

/*
 * The context table outlives remove(): address spaces of files still open after a
 * hot-unplug retire their context in it when they go.
 */
int spyre_mmu_init(struct spyre_device *sdev)
{
	mutex_init(&sdev->mmu_ctx_lock);
	INIT_LIST_HEAD(&sdev->mmu_ctx_lru);
	init_waitqueue_head(&sdev->mmu_ctx_wq);
	if (sdev->caps & SPYRE_CAP_MMU) {
		sdev->mmu_ctx_table = dma_alloc_coherent(sdev->drm.dev, SPYRE_MMU_PAGE_SIZE,
							 &sdev->mmu_ctx_table_dma, GFP_KERNEL);
		if (!sdev->mmu_ctx_table)
			return -ENOMEM;
	}
	spyre_mmu_hw_init(sdev);
	return drmm_add_action_or_reset(&sdev->drm, spyre_mmu_release, sdev);
}
