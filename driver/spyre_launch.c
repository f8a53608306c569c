// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: the LAUNCH command (a program on the cores).
 *
 * SUBMIT checks a DRM_SPYRE_CMD_LAUNCH and its struct drm_spyre_launch, takes a reference on
 * every BO it names and builds, in one DMA-coherent buffer, the hardware launch descriptor
 * with its window list (the program BO and the listed DEVICE BOs of the file, nothing else:
 * the card stops a program that touches any other device memory) followed by the hardware
 * launch result. When the job completes, the result is converted to the uapi layout and
 * copied into the caller's result BO before the job's fence signals, so a caller that has
 * waited for the job can read it. The copy runs in the completion path (interrupt thread,
 * under the ring spinlock), so everything it touches is mapped at SUBMIT: HOST BO pages are
 * pinned for the BO's lifetime, a DEVICE BO's range is ioremapped write-combined.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/io.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "spyre_drv.h"

/* The uapi mirrors the hardware limits and result layout. */
static_assert(DRM_SPYRE_LAUNCH_MAX_ARGS == SPYRE_LAUNCH_MAX_ARGS);
static_assert(DRM_SPYRE_LAUNCH_MAX_PROG_SIZE == SPYRE_LAUNCH_MAX_PROG_SIZE);
static_assert(DRM_SPYRE_LAUNCH_MAX_BOS + 1 == SPYRE_LAUNCH_MAX_WINDOWS);
static_assert(DRM_SPYRE_LAUNCH_MAX_CORES == SPYRE_LAUNCH_MAX_CORES);
static_assert(DRM_SPYRE_LAUNCH_MSG_LEN == SPYRE_LAUNCH_MSG_LEN);
static_assert(DRM_SPYRE_LAUNCH_UNITS == SPYRE_LAUNCH_UNITS);
static_assert(sizeof(struct drm_spyre_launch) >= 168);
static_assert(sizeof(struct drm_spyre_launch_result) == sizeof(struct spyre_hw_launch_result));

/* Smallest drm_spyre_launch a caller may pass: v1 (up to DRM_SPYRE_EXT_SIZE_MAX, tail 0). */
#define SPYRE_LAUNCH_EXT_SIZE_MIN	168

static int spyre_launch_hold(struct spyre_launch *l, struct drm_file *file, u32 handle,
			     struct spyre_bo **out)
{
	struct drm_gem_object *obj = drm_gem_object_lookup(file, handle);

	if (!obj)
		return -ENOENT;
	l->bos[l->bo_count++] = obj;
	*out = to_spyre_bo(obj);
	/* Windows and results are this card's memory or host pages, never a peer's. */
	if ((*out)->flags == DRM_SPYRE_BO_PEER || !spyre_bo_in_file_vm(*out, file))
		return -EINVAL;
	return 0;
}

/* Check the drm_spyre_launch itself, before any BO is looked up. */
static int spyre_launch_check(struct spyre_device *sdev, const struct drm_spyre_cmd *uc,
			      const struct drm_spyre_launch *a)
{
	u32 i;

	if (uc->dst_handle || uc->dst_offset)
		return -EINVAL;
	if (uc->size == 0 || uc->size > DRM_SPYRE_LAUNCH_MAX_PROG_SIZE)
		return -EINVAL;
	if (a->flags)
		return -EINVAL;
	if (a->num_cores > sdev->num_cores || a->num_cores > DRM_SPYRE_LAUNCH_MAX_CORES)
		return -EINVAL;
	if (a->num_args > DRM_SPYRE_LAUNCH_MAX_ARGS)
		return -EINVAL;
	/* Unused arguments must be zero, so that they can be given a meaning later. */
	for (i = a->num_args; i < DRM_SPYRE_LAUNCH_MAX_ARGS; i++)
		if (a->args[i])
			return -EINVAL;
	if (a->bo_count > DRM_SPYRE_LAUNCH_MAX_BOS || (a->bo_count && !a->bo_handles))
		return -EINVAL;
	if (!a->result_handle) {
		if (a->result_offset || a->result_size)
			return -EINVAL;
	} else if (!a->result_size || !IS_ALIGNED(a->result_offset, 8)) {
		return -EINVAL;
	}
	return 0;
}

/* Add the window of DEVICE BO @bo unless it is already listed. */
static void spyre_launch_add_window(struct spyre_hw_launch_desc *desc, struct spyre_bo *bo)
{
	struct spyre_hw_launch_window *win = (struct spyre_hw_launch_window *)(desc + 1);
	u32 i;

	for (i = 0; i < desc->num_windows; i++)
		if (win[i].addr == spyre_bo_dev_addr(bo))
			return;
	win[i].addr = spyre_bo_dev_addr(bo);
	win[i].size = bo->shmem.base.size;
	desc->num_windows++;
}

/* Look up, check and map the result BO. */
static int spyre_launch_setup_result(struct spyre_device *sdev, struct spyre_launch *l,
				     struct drm_file *file, const struct drm_spyre_launch *a)
{
	struct spyre_bo *bo;
	u64 end, first, last;
	int ret;

	ret = spyre_launch_hold(l, file, a->result_handle, &bo);
	if (ret)
		return ret;
	if (check_add_overflow(a->result_offset, (u64)a->result_size, &end) ||
	    end > bo->shmem.base.size)
		return -EINVAL;

	l->res_bo = bo;
	l->res_offset = a->result_offset;
	l->res_len = min_t(u32, a->result_size, sizeof(struct drm_spyre_launch_result));
	l->staging = kzalloc(sizeof(*l->staging), GFP_KERNEL_ACCOUNT);
	if (!l->staging)
		return -ENOMEM;
	if (bo->flags == DRM_SPYRE_BO_HOST)
		return 0;

	/* DEVICE BO: map the pages the result lands on through BAR2. */
	first = round_down(bo->node.start + l->res_offset, PAGE_SIZE);
	last = round_up(bo->node.start + l->res_offset + l->res_len, PAGE_SIZE);
	if (last > sdev->devmem_bar_len)
		return -EINVAL;
	l->res_io_len = last - first;
	l->res_io_skip = bo->node.start + l->res_offset - first;
	l->res_io = ioremap_wc(sdev->devmem_bar_start + first, l->res_io_len);
	if (!l->res_io)
		return -ENOMEM;
	return 0;
}

/*
 * Check LAUNCH command @uc (its extension not yet read) and translate it into @hc. On
 * success *@out is the new launch; on failure whatever was set up is in *@out too (or NULL)
 * and the caller frees it with spyre_launch_free().
 */
int spyre_launch_prepare(struct spyre_device *sdev, struct drm_file *file,
			 const struct drm_spyre_cmd *uc, u32 cmd_idx, struct spyre_hw_cmd *hc,
			 struct spyre_launch **out)
{
	struct spyre_hw_launch_desc *desc;
	struct drm_spyre_launch a;
	struct spyre_launch *l;
	struct spyre_bo *prog, *bo;
	u32 *handles = NULL;
	size_t res_at;
	u64 end;
	u32 i;
	int ret;

	*out = NULL;
	if (!(sdev->caps & SPYRE_CAP_LAUNCH))
		return -EOPNOTSUPP;
	ret = spyre_cmd_copy_ext(&a, sizeof(a), SPYRE_LAUNCH_EXT_SIZE_MIN, uc);
	if (ret)
		return ret;
	ret = spyre_launch_check(sdev, uc, &a);
	if (ret)
		return ret;

	l = kzalloc(sizeof(*l), GFP_KERNEL_ACCOUNT);
	if (!l)
		return -ENOMEM;
	*out = l;
	INIT_LIST_HEAD(&l->node);
	l->cmd_idx = cmd_idx;
	/* program BO + data BOs + result BO */
	l->bos = kvmalloc_array(a.bo_count + 2, sizeof(*l->bos), GFP_KERNEL_ACCOUNT);
	if (!l->bos)
		return -ENOMEM;

	if (a.bo_count) {
		handles = memdup_array_user(u64_to_user_ptr(a.bo_handles), a.bo_count,
					    sizeof(*handles));
		if (IS_ERR(handles))
			return PTR_ERR(handles);
	}

	/* The descriptor and windows, then the result, 8-byte aligned. */
	res_at = ALIGN(sizeof(*desc) + (a.bo_count + 1) * sizeof(struct spyre_hw_launch_window),
		       8);
	l->buf_size = res_at + (a.result_handle ? sizeof(struct spyre_hw_launch_result) : 0);
	/* Lives as long as the job: charged to the submitter's memory cgroup. */
	l->buf = dma_alloc_coherent(sdev->drm.dev, l->buf_size, &l->buf_dma, GFP_KERNEL_ACCOUNT);
	if (!l->buf) {
		ret = -ENOMEM;
		goto out;
	}
	desc = l->buf;
	desc->num_cores = a.num_cores;
	desc->num_args = a.num_args;
	for (i = 0; i < a.num_args; i++)
		desc->args[i] = a.args[i];

	ret = spyre_launch_hold(l, file, uc->src_handle, &prog);
	if (ret)
		goto out;
	if (prog->flags != DRM_SPYRE_BO_DEVICE ||
	    check_add_overflow(uc->src_offset, uc->size, &end) || end > prog->shmem.base.size) {
		ret = -EINVAL;
		goto out;
	}
	spyre_launch_add_window(desc, prog);

	for (i = 0; i < a.bo_count; i++) {
		ret = spyre_launch_hold(l, file, handles[i], &bo);
		if (ret)
			goto out;
		if (bo->flags != DRM_SPYRE_BO_DEVICE) {
			ret = -EINVAL;
			goto out;
		}
		spyre_launch_add_window(desc, bo);
	}

	if (a.result_handle) {
		ret = spyre_launch_setup_result(sdev, l, file, &a);
		if (ret)
			goto out;
		l->hw_res = l->buf + res_at;
	}

	memset(hc, 0, sizeof(*hc));
	hc->hdr.opcode = SPYRE_OP_LAUNCH;
	hc->launch.prog_addr = spyre_bo_dev_addr(prog) + uc->src_offset;
	hc->launch.prog_size = uc->size;
	hc->launch.desc_addr = l->buf_dma;
	hc->launch.result_addr = l->hw_res ? l->buf_dma + res_at : 0;
	ret = 0;
out:
	kvfree(handles);
	return ret;
}

/* Copy the staged result to a HOST BO, page by page (pages are pinned). */
static void spyre_launch_copy_to_host(struct spyre_launch *l)
{
	struct page **pages = l->res_bo->shmem.pages;
	const u8 *src = (const u8 *)l->staging;
	u64 off = l->res_offset;
	u32 left = l->res_len;

	while (left) {
		u32 in_page = offset_in_page(off);
		u32 n = min_t(u32, left, PAGE_SIZE - in_page);
		void *dst = kmap_local_page(pages[off >> PAGE_SHIFT]);

		memcpy(dst + in_page, src, n);
		kunmap_local(dst);
		src += n;
		off += n;
		left -= n;
	}
}

/*
 * The LAUNCH of @l completed with completion entry @cpl: deliver its result. Called from
 * the completion path with the ring lock held; must not sleep.
 */
void spyre_launch_complete(struct spyre_launch *l, const struct spyre_hw_cpl *cpl)
{
	const struct spyre_hw_launch_result *h = l->hw_res;
	struct drm_spyre_launch_result *r = l->staging;
	u32 status = READ_ONCE(cpl->status);
	u32 i, u, nc;

	/* The card writes a result only for a LAUNCH it ran. */
	if (!l->res_len || (status != SPYRE_STATUS_OK && status != SPYRE_STATUS_ERR_PROGRAM))
		return;
	/* The result was written before the completion entry. */
	dma_rmb();

	memset(r, 0, sizeof(*r));
	r->error = h->error;
	r->core = h->core;
	r->pc = h->pc;
	memcpy(r->message, h->message, sizeof(r->message));
	r->message[sizeof(r->message) - 1] = 0;
	r->total_cycles = h->total_cycles;
	r->ddr_read_bytes = h->ddr_read_bytes;
	r->ddr_write_bytes = h->ddr_write_bytes;
	r->ring_bytes = h->ring_bytes;
	r->instructions = h->instructions;
	r->macs = h->macs;
	nc = min_t(u32, h->num_cores, DRM_SPYRE_LAUNCH_MAX_CORES);
	r->num_cores = nc;
	r->mac_peak = h->mac_peak;
	for (i = 0; i < nc; i++) {
		for (u = 0; u < DRM_SPYRE_LAUNCH_UNITS; u++)
			r->cores[i].busy[u] = h->cores[i].busy[u];
		r->cores[i].end_cycle = h->cores[i].end_cycle;
	}

	if (l->res_io) {
		memcpy_toio(l->res_io + l->res_io_skip, r, l->res_len);
		/* Drain the write-combining buffers before the fence signals. */
		wmb();
	} else {
		spyre_launch_copy_to_host(l);
	}
}

void spyre_launch_free(struct spyre_device *sdev, struct spyre_launch *l)
{
	u32 i;

	if (!l)
		return;
	if (l->res_io)
		iounmap(l->res_io);
	kfree(l->staging);
	if (l->buf)
		dma_free_coherent(sdev->drm.dev, l->buf_size, l->buf, l->buf_dma);
	for (i = 0; i < l->bo_count; i++)
		drm_gem_object_put(l->bos[i]);
	kvfree(l->bos);
	kfree(l);
}
