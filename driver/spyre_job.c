// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: job submission, scheduling and completion.
 *
 * Every ring has a drm_gpu_scheduler whose credits are ring entries; every open file has
 * one entity per ring. A job is a list of hardware commands prepared and checked at SUBMIT;
 * run_job() copies them into the ring and rings the doorbell. The last command of a job
 * asks for an interrupt; the interrupt thread reads the completion entries of finished
 * jobs, records their result and signals their hardware fence.
 *
 * Recovery (Documentation/driver.md, "Failure handling"): a job that outlives the timeout
 * gets its ring aborted (CTRL.ABORT, then STATUS.BUSY = 0: only then are its resources
 * released); innocent jobs behind it are written to the ring again. A ring that does not
 * stop escalates to a card reset (every ring's innocent jobs re-run), and a card that does
 * not come back, or resets too often, is wedged: every job fails until a PCI reset.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/capability.h>
#include <linux/dma-fence-chain.h>
#include <linux/moduleparam.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include <drm/drm_drv.h>
#include <drm/drm_syncobj.h>
#include <drm/drm_utils.h>

#include "spyre_drv.h"
#include "spyre_trace.h"

/*
 * Smallest element sizes SUBMIT accepts: the sizes of the first published (v1) structs,
 * pinned here so that growing a struct never rejects older callers.
 */
#define SPYRE_CMD_SIZE_MIN	64
#define SPYRE_SYNC_SIZE_MIN	16
static_assert(sizeof(struct drm_spyre_cmd) >= SPYRE_CMD_SIZE_MIN);
static_assert(sizeof(struct drm_spyre_sync) >= SPYRE_SYNC_SIZE_MIN);
/* Largest element size accepted; the tail beyond the known struct must be zero. */
#define SPYRE_ELEM_SIZE_MAX	256
/* First published (v1) size of struct drm_spyre_copy_2d, the smallest ext_size of COPY_2D. */
#define SPYRE_COPY_2D_EXT_SIZE_MIN	32
static_assert(sizeof(struct drm_spyre_copy_2d) >= SPYRE_COPY_2D_EXT_SIZE_MIN);
/* First published (v1) size of struct drm_spyre_sem, the smallest ext_size of SEM_*. */
#define SPYRE_SEM_EXT_SIZE_MIN	16
static_assert(sizeof(struct drm_spyre_sem) >= SPYRE_SEM_EXT_SIZE_MIN);
static_assert(sizeof(struct spyre_hw_sem) == DRM_SPYRE_SEM_SIZE);
static_assert(DRM_SPYRE_SEM_SIZE == SPYRE_SEM_ALIGN);
static_assert(DRM_SPYRE_SEM_WAIT_MAX_US == SPYRE_SEM_WAIT_MAX_US);
/* The op of a command is its first field: SUBMIT reads it alone to count LAUNCHes. */
static_assert(offsetof(struct drm_spyre_cmd, op) == 0);

static unsigned int spyre_job_timeout_ms = SPYRE_JOB_TIMEOUT_MS;
module_param_named(job_timeout_ms, spyre_job_timeout_ms, uint, 0444);
MODULE_PARM_DESC(job_timeout_ms, "time a job may run before its ring is reset (default 30000)");

static inline struct spyre_job *to_spyre_job(struct drm_sched_job *job)
{
	return container_of(job, struct spyre_job, base);
}

/* ---- hardware fences ---- */

static const char *spyre_fence_driver_name(struct dma_fence *fence)
{
	return SPYRE_DRIVER_NAME;
}

static const char *spyre_fence_timeline_name(struct dma_fence *fence)
{
	return "spyre-ring";
}

static const struct dma_fence_ops spyre_fence_ops = {
	.get_driver_name = spyre_fence_driver_name,
	.get_timeline_name = spyre_fence_timeline_name,
};

/* ---- results ---- */

static void spyre_result_release(struct kref *ref)
{
	struct spyre_result *res = container_of(ref, struct spyre_result, ref);

	dma_fence_put(res->done);
	kfree(res);
}

/* A job's result, live from the start: spyre_job_free() puts it on every error path. */
static struct spyre_result *spyre_result_alloc(void)
{
	struct spyre_result *res = kzalloc(sizeof(*res), GFP_KERNEL_ACCOUNT);

	if (res)
		kref_init(&res->ref);
	return res;
}

void spyre_result_put(struct spyre_result *res)
{
	if (res)
		kref_put(&res->ref, spyre_result_release);
}

static void spyre_job_free(struct spyre_job *job)
{
	struct spyre_launch *l, *tmp;
	u32 i;

	list_for_each_entry_safe(l, tmp, &job->launches, node) {
		list_del(&l->node);
		spyre_launch_free(job->sdev, l);
	}
	/* First every PEER BO's count: a revocation may wait for it, and a put may block. */
	for (i = 0; i < job->bo_count; i++)
		if (to_spyre_bo(job->bos[i])->flags == DRM_SPYRE_BO_PEER)
			spyre_peer_job_release(to_spyre_bo(job->bos[i]));
	for (i = 0; i < job->bo_count; i++)
		drm_gem_object_put(job->bos[i]);
	kvfree(job->bos);
	kvfree(job->cmds);
	if (job->hw_fence_live)
		dma_fence_put(job->hw_fence);
	else
		kfree(job->hw_fence);
	spyre_result_put(job->res);
	if (job->sf) {
		/* after the job is off the card for good: its context id may be taken now */
		if (job->ctx)
			spyre_vm_put_ctx(job->sf->vm);
		atomic_dec(&job->sf->jobs);
		atomic_sub(job->charged_cmds, &job->sf->cmds);
		atomic_sub(job->charged_launches, &job->sf->launches);
		spyre_file_put(job->sf);
	}
	kfree(job);
}

static void spyre_file_release(struct kref *ref)
{
	struct spyre_file *sf = container_of(ref, struct spyre_file, ref);

	spyre_vm_put(sf->vm);
	mutex_destroy(&sf->lock);
	kvfree(sf);
}

void spyre_file_put(struct spyre_file *sf)
{
	kref_put(&sf->ref, spyre_file_release);
}

/* ---- completion ---- */

/* Hardware entry of ring sequence number @seq. */
static inline u32 spyre_ring_entry(struct spyre_ring *ring, u64 seq)
{
	return (seq - ring->hw_base) & (ring->size - 1);
}

/*
 * Command @i of @job completed with ERR_MMU_FAULT, @detail being its FAULT_INFO. The ring's
 * fault registers hold its first fault not yet cleared: ours (earlier jobs cleared theirs, a
 * ring restart clears an aborted job's), or already a later command's when the ring ran on
 * before this completion was processed. Take the address only if the latch names this
 * command's context and fault, so that no other file's address and context is reported;
 * leave a later fault for its own job. The address is reported if this was the job's first
 * failing command.
 */
static void spyre_job_take_fault(struct spyre_ring *ring, struct spyre_job *job, u32 i,
				 u32 detail)
{
	struct spyre_device *sdev = ring->sdev;
	u32 info = spyre_read(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_FAULT_INFO));
	u64 addr;

	if (!(info & SPYRE_MMU_FAULT_VALID) || info != detail ||
	    (info & SPYRE_MMU_FAULT_CTX_MASK) != job->cmds[i].hdr.ctx)
		return;
	addr = spyre_read64(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_FAULT_ADDR_LO));
	spyre_write(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_FAULT_INFO), SPYRE_MMU_FAULT_VALID);
	if (job->res->failed_cmd == i)
		job->res->fault_addr = addr;
	dev_info_ratelimited(sdev->drm.dev,
			     "%s translation fault at %#llx, context %u (pid %d %s), job %llu\n",
			     info & SPYRE_MMU_FAULT_ENGINE ? "core" : "DMA", addr,
			     info & SPYRE_MMU_FAULT_CTX_MASK, job->sf ? job->sf->pid : 0,
			     job->sf ? job->sf->comm : "kernel", job->res->job_id);
}

/*
 * The job's place on the card's modeled clock (hw 1.7): its commands run in order on one
 * ring, so it starts with the first and ends with the last. Older cards: 0, 0.
 */
static void spyre_job_clock(struct spyre_ring *ring, struct spyre_job *job)
{
	struct spyre_hw_cpl_time *first, *last;

	if (ring->cpl_size != sizeof(*first) || !job->cmd_count)
		return;
	first = (void *)spyre_ring_cpl(ring, spyre_ring_entry(ring, job->first));
	last = (void *)spyre_ring_cpl(ring,
				      spyre_ring_entry(ring, job->first + job->cmd_count - 1));
	job->res->start_cycle = READ_ONCE(first->start_cycle);
	job->res->end_cycle = READ_ONCE(last->end_cycle);
}

/* Record the job's result from its completion entries and signal its hardware fence. */
static void spyre_job_complete(struct spyre_ring *ring, struct spyre_job *job)
{
	struct spyre_device *sdev = ring->sdev;
	struct spyre_result *res = job->res;
	u64 eng[SPYRE_ENGINE_COUNT] = { 0 };
	struct spyre_launch *l;
	u32 i, status, fault_cmd = U32_MAX, fault_detail = 0;
	u64 cycles = 0, c;
	bool failed = false;

	for (i = 0; i < job->cmd_count; i++) {
		u32 e = spyre_ring_entry(ring, job->first + i);
		struct spyre_hw_cpl *cpl = spyre_ring_cpl(ring, e);

		c = READ_ONCE(cpl->cycles);
		cycles += c;
		/* A SEM_WAIT occupies no engine: its cycles are mostly the wait. */
		if (job->cmds[i].hdr.opcode != SPYRE_OP_SEM_WAIT)
			eng[job->cmds[i].hdr.opcode == SPYRE_OP_LAUNCH ?
			    SPYRE_ENGINE_COMPUTE : SPYRE_ENGINE_DMA] += c;
		status = READ_ONCE(cpl->status);
		if (!failed && status != SPYRE_STATUS_OK) {
			failed = true;
			res->hw_status = status;
			res->hw_detail = READ_ONCE(cpl->detail);
			res->failed_cmd = i;
		}
		/* A fault after another error latched too: it must be cleared all the same. */
		if (status == SPYRE_STATUS_ERR_MMU_FAULT && fault_cmd == U32_MAX) {
			fault_cmd = i;
			fault_detail = READ_ONCE(cpl->detail);
		}
	}
	if (fault_cmd != U32_MAX)
		spyre_job_take_fault(ring, job, fault_cmd, fault_detail);
	res->cycles = cycles;
	spyre_job_clock(ring, job);
	/* fdinfo: what the submitting file ran (kernel jobs belong to no file). */
	if (job->sf)
		for (i = 0; i < SPYRE_ENGINE_COUNT; i++)
			atomic64_add(eng[i], &job->sf->engine_cycles[i]);
	/* Launch results reach their BOs before the fence tells anyone the job is done. */
	list_for_each_entry(l, &job->launches, node) {
		u32 e = spyre_ring_entry(ring, job->first + l->cmd_idx);

		spyre_launch_complete(l, spyre_ring_cpl(ring, e));
	}
	if (!job->kernel)
		atomic64_inc(&sdev->jobs_completed);
	if (failed) {
		res->status = DRM_SPYRE_JOB_DEVICE_ERROR;
		dma_fence_set_error(job->hw_fence, -EIO);
		if (!job->kernel)
			atomic64_inc(&sdev->jobs_failed);
	}
	list_del_init(&job->node);
	trace_spyre_job_complete(job);
	dma_fence_signal(job->hw_fence);
}

/*
 * Finish a job that did not complete: @status DRM_SPYRE_JOB_TIMEOUT (the guilty job) or
 * DRM_SPYRE_JOB_ABORTED, fence error @error. The ring lock is held (or the ring is dead).
 */
static void spyre_job_fail(struct spyre_job *job, u32 status, int error)
{
	struct spyre_device *sdev = job->sdev;

	if (dma_fence_is_signaled(job->hw_fence))
		return;
	job->res->status = status;
	dma_fence_set_error(job->hw_fence, error);
	if (!job->kernel) {
		atomic64_inc(&sdev->jobs_completed);
		atomic64_inc(&sdev->jobs_failed);
	}
	if (status == DRM_SPYRE_JOB_TIMEOUT)
		atomic64_inc(&sdev->jobs_timed_out);
	list_del_init(&job->node);
	trace_spyre_job_complete(job);
	dma_fence_signal(job->hw_fence);
}

/* The completion entries of a job are valid once each carries its command's seqno. */
static bool spyre_job_cpls_valid(struct spyre_ring *ring, struct spyre_job *job)
{
	u32 i;

	for (i = 0; i < job->cmd_count; i++) {
		u64 seq = job->first + i;

		if (READ_ONCE(spyre_ring_cpl(ring, spyre_ring_entry(ring, seq))->seqno) != seq + 1)
			return false;
	}
	return true;
}

/*
 * Complete the finished jobs of a ring, oldest first. @quiesced: the ring is stopped
 * (aborted or reset) and the card writes nothing more for it, so every completion entry
 * that carries its command's seqno is final, whatever HEAD says.
 */
static void spyre_ring_process_locked(struct spyre_ring *ring, bool quiesced)
{
	struct spyre_device *sdev = ring->sdev;
	struct spyre_job *job, *tmp;
	u32 head, rel;

	lockdep_assert_held(&ring->lock);
	if (quiesced) {
		ring->done = ring->submitted;
	} else if (ring->enabled) {
		head = spyre_read(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_HEAD));
		if (head < ring->size) {
			rel = ring->done - ring->hw_base;
			ring->done += (head - rel) & (ring->size - 1);
			if (ring->done > ring->submitted)
				ring->done = ring->submitted;
		}
	}
	dma_rmb();
	list_for_each_entry_safe(job, tmp, &ring->active, node) {
		if (job->first + job->cmd_count > ring->done)
			break;
		if (!spyre_job_cpls_valid(ring, job))
			break;
		spyre_job_complete(ring, job);
	}
}

/* Called from the interrupt threads and the timeout handler. */
void spyre_ring_process(struct spyre_ring *ring)
{
	spin_lock(&ring->lock);
	spyre_ring_process_locked(ring, false);
	spin_unlock(&ring->lock);
}

/* Write the job's commands to the ring and ring the doorbell; ring lock held. */
static void spyre_ring_write_job(struct spyre_ring *ring, struct spyre_job *job)
{
	struct spyre_device *sdev = ring->sdev;
	u32 i;

	lockdep_assert_held(&ring->lock);
	job->first = ring->submitted;
	for (i = 0; i < job->cmd_count; i++) {
		struct spyre_hw_cmd *cmd = &ring->cmds[spyre_ring_entry(ring, job->first + i)];

		*cmd = job->cmds[i];
		cmd->hdr.seqno = job->first + i + 1;
		if (i == job->cmd_count - 1)
			cmd->hdr.flags |= SPYRE_CMD_F_IRQ;
	}
	ring->submitted += job->cmd_count;
	list_add_tail(&job->node, &ring->active);
	/* writel() orders the command writes before the doorbell. */
	spyre_write(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_TAIL),
		    spyre_ring_entry(ring, ring->submitted));
}

/* ---- scheduler back end ---- */

/*
 * Credits of a job: its ring entries plus a fixed share of the ring, so that at most
 * SPYRE_RING_JOBS jobs are on a ring at once whatever their size (the hardware runs a ring
 * in order: a deep ring would make a high priority job wait for everything on it), and a
 * job of DRM_SPYRE_MAX_CMDS commands still fits.
 */
static u32 spyre_job_credits(struct spyre_ring *ring, u32 cmd_count)
{
	return cmd_count + (ring->size - 1) / SPYRE_RING_JOBS - 1;
}

static_assert(DRM_SPYRE_MAX_CMDS + (SPYRE_RING_ENTRIES - 1) / SPYRE_RING_JOBS - 1 <=
	      SPYRE_RING_ENTRIES - 1);

/*
 * First run: check, initialise the hardware fence, write the job. Re-run after a reset
 * (drm_sched_resubmit_jobs()): a job whose fence has signalled meanwhile (it completed, or
 * it was the guilty one) returns it; the others are written to the ring again.
 */
static struct dma_fence *spyre_run_job(struct drm_sched_job *sched_job)
{
	struct spyre_job *job = to_spyre_job(sched_job);
	struct spyre_ring *ring = job->ring;
	struct spyre_device *sdev = job->sdev;
	int idx, err;

	if (job->hw_fence_live && dma_fence_is_signaled(job->hw_fence))
		return dma_fence_get(job->hw_fence);

	err = sched_job->s_fence->finished.error;
	if (!err && !drm_dev_enter(&sdev->drm, &idx))
		err = -ENODEV;
	if (!err && READ_ONCE(sdev->wedged)) {
		drm_dev_exit(idx);
		err = -EIO;
	}
	if (unlikely(err)) {
		if (!job->hw_fence_live) {
			job->res->status = DRM_SPYRE_JOB_ABORTED;
			return ERR_PTR(err);
		}
		spin_lock(&ring->lock);
		spyre_job_fail(job, DRM_SPYRE_JOB_ABORTED, err);
		spin_unlock(&ring->lock);
		return dma_fence_get(job->hw_fence);
	}

	spin_lock(&ring->lock);
	if (!job->hw_fence_live) {
		dma_fence_init(job->hw_fence, &spyre_fence_ops, &ring->fence_lock,
			       ring->fence_context, ++ring->fence_seqno);
		job->hw_fence_live = true;
	} else {
		atomic64_inc(&sdev->jobs_rerun);
	}
	spyre_ring_write_job(ring, job);
	trace_spyre_job_run(job);
	spin_unlock(&ring->lock);

	drm_dev_exit(idx);
	return dma_fence_get(job->hw_fence);
}

/* ---- recovery ---- */

/*
 * Restart an aborted ring (the card touches nothing of it any more): complete what had
 * finished, fail @bad with DRM_SPYRE_JOB_TIMEOUT, take every other job off the ring (run_job
 * writes them again, in order, from drm_sched_resubmit_jobs()) and enable the ring empty.
 */
static int spyre_ring_restart(struct spyre_ring *ring, struct spyre_job *bad)
{
	struct spyre_job *job, *tmp;
	int ret;

	spin_lock(&ring->lock);
	spyre_ring_process_locked(ring, true);
	if (bad && bad->ring == ring)
		spyre_job_fail(bad, DRM_SPYRE_JOB_TIMEOUT, -ETIMEDOUT);
	list_for_each_entry_safe(job, tmp, &ring->active, node)
		list_del_init(&job->node);
	ret = spyre_hw_ring_enable(ring);
	spin_unlock(&ring->lock);
	return ret;
}

/* A wedged card fails every job on it, @bad with DRM_SPYRE_JOB_TIMEOUT. */
static void spyre_ring_fail_all(struct spyre_ring *ring, struct spyre_job *bad, int error)
{
	struct spyre_job *job, *tmp;

	spin_lock(&ring->lock);
	spyre_ring_process_locked(ring, true);
	list_for_each_entry_safe(job, tmp, &ring->active, node) {
		if (job == bad)
			spyre_job_fail(job, DRM_SPYRE_JOB_TIMEOUT, -ETIMEDOUT);
		else
			spyre_job_fail(job, DRM_SPYRE_JOB_ABORTED, error);
	}
	spin_unlock(&ring->lock);
}

/* Card resets are rate-limited: more than SPYRE_CARD_RESET_BURST a window wedges. */
static bool spyre_card_reset_allowed(struct spyre_device *sdev)
{
	unsigned long *slot = &sdev->card_reset_at[sdev->card_reset_next];

	if (*slot && time_before(jiffies, *slot + SPYRE_CARD_RESET_WINDOW))
		return false;
	*slot = jiffies | 1;
	sdev->card_reset_next = (sdev->card_reset_next + 1) % SPYRE_CARD_RESET_BURST;
	return true;
}

/*
 * The "WEDGED=" uevent, from a worker: kobject_uevent_env() allocates with GFP_KERNEL, which
 * the timeout handler must not. Linux 6.12 has no drm_dev_wedged_event(), so it is sent by
 * hand (Documentation/gpu/drm-uapi.rst, "Device wedging"): unbind, PCI reset, bind recovers.
 */
static void spyre_wedged_uevent_work(struct work_struct *work)
{
	struct spyre_device *sdev = container_of(work, struct spyre_device, wedge_work);
	char event[32], *envp[2];
	int idx;

	/* An unplugged card's accel device is going away: no one to tell. */
	if (!drm_dev_enter(&sdev->drm, &idx))
		return;
	strscpy(event, "WEDGED=rebind,bus-reset");
	envp[0] = event;
	envp[1] = NULL;
	if (sdev->drm.accel)
		kobject_uevent_env(&sdev->drm.accel->kdev->kobj, KOBJ_CHANGE, envp);
	drm_dev_exit(idx);
}

/* The card did not come back: fail everything, keep the rings down and tell userspace. */
static void spyre_wedge(struct spyre_device *sdev)
{
	if (READ_ONCE(sdev->wedged))
		return;
	WRITE_ONCE(sdev->wedged, true);
	drm_err(&sdev->drm, "card wedged; to recover: unbind, reset the PCI function, bind\n");
	queue_work(system_unbound_wq, &sdev->wedge_work);
}

/*
 * Reset the whole card; every scheduler is stopped. @bad (may be NULL) fails with
 * DRM_SPYRE_JOB_TIMEOUT; every other unfinished job is taken off its ring to be written
 * again by drm_sched_resubmit_jobs(), unless the card does not come back (or @force is
 * false and the reset budget is used up): then the card is wedged and they fail.
 */
static void spyre_card_reset(struct spyre_device *sdev, struct spyre_job *bad, bool force)
{
	bool ok = force || (!READ_ONCE(sdev->wedged) && spyre_card_reset_allowed(sdev));
	bool reset = false;
	unsigned int i;

	spyre_hw_disable_interrupts(sdev);
	for (i = 0; i < sdev->num_rings; i++) {
		spin_lock(&sdev->rings[i].lock);
		sdev->rings[i].enabled = false;
		spin_unlock(&sdev->rings[i].lock);
	}
	if (ok) {
		reset = !spyre_hw_reset(sdev);
		ok = reset;
	}
	for (i = 0; i < sdev->num_rings && ok; i++)
		if (spyre_ring_restart(&sdev->rings[i], bad))
			ok = false;
	if (!ok) {
		/*
		 * Not reset (budget spent) or not back from it: the card may still run what it
		 * was given. Stop its DMA before the fences let the jobs' memory be freed.
		 */
		if (!reset)
			spyre_hw_stop_dma(sdev);
		for (i = 0; i < sdev->num_rings; i++)
			spyre_ring_fail_all(&sdev->rings[i], bad, -EIO);
		spyre_wedge(sdev);
		trace_spyre_reset(sdev, bad ? bad->ring->idx : -1, "wedged");
		return;
	}
	WRITE_ONCE(sdev->wedged, false);
	spyre_hw_enable_interrupts(sdev);
	atomic_inc(&sdev->card_resets);
	trace_spyre_reset(sdev, bad ? bad->ring->idx : -1, "card");
}

static void spyre_sched_stop_all(struct spyre_device *sdev, struct drm_gpu_scheduler *except)
{
	unsigned int i;

	for (i = 0; i < sdev->num_rings; i++)
		if (&sdev->rings[i].sched != except)
			drm_sched_stop(&sdev->rings[i].sched, NULL);
}

static void spyre_sched_restart_all(struct spyre_device *sdev)
{
	unsigned int i;

	for (i = 0; i < sdev->num_rings; i++) {
		drm_sched_resubmit_jobs(&sdev->rings[i].sched);
		drm_sched_start(&sdev->rings[i].sched);
	}
}

/*
 * The ring's timer starts at run_job, but the card has one compute engine and one DMA worker
 * for all rings: a command may wait there behind other rings' commands. With CAP_EXEC_TIME
 * (hw 1.4) the card says which command of the ring holds its engine and for how long, so a
 * job is charged only while it executes. It is hung when one of its commands has held the
 * engine for 7/8 of the timeout: the rest allows for the latency between the timer's start
 * and the card's start of the command (xe allows its scheduler 5% likewise). Returns true to
 * keep the job: it waits for the engine, or runs within its budget. A job that waits while
 * its ring makes no progress for longer than the other rings' commands can hold the engine
 * (two timeouts each: the check, then the re-armed one) is not kept: the card is stuck.
 * With CAP_TIMESLICE (hw 1.5) rings share the engine in slices: a command preempted between
 * its slices reads its seqno without RUNNING and the time it has held the engine so far; it
 * is charged that time like a running one (it gets the engine back in its turn).
 * A SEM_WAIT (hw 1.8) that waits reads its seqno with RUNNING and the time it has waited: it
 * is charged like a running command, and ends on its own within SPYRE_SEM_WAIT_MAX_US (10 s),
 * far below 7/8 of the default timeout, with ERR_TIMEOUT through the usual completion.
 */
static bool spyre_job_keep(struct spyre_ring *ring, struct spyre_job *job)
{
	struct spyre_device *sdev = ring->sdev;
	unsigned long timeout = ring->sched.timeout;
	u32 budget_ms = jiffies_to_msecs(timeout);
	u32 seq, exec, again, ms;
	int tries = 3;
	u64 done;

	if (!(sdev->caps & SPYRE_CAP_EXEC_TIME) || READ_ONCE(sdev->wedged))
		return false;
	do {
		seq = spyre_read(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_EXEC_SEQNO));
		exec = spyre_read(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_EXEC_TIME));
		again = spyre_read(sdev, SPYRE_RING_REG(ring->idx, SPYRE_RING_EXEC_SEQNO));
	} while (seq != again && --tries);
	/* The ring moved to another command while we read: it makes progress. */
	if (seq != again)
		return true;
	if ((exec & SPYRE_RING_EXEC_RUNNING) ||
	    (seq && (sdev->caps & SPYRE_CAP_TIMESLICE))) {
		job->wait_since = 0;
		/* Commands before the job's are complete: another seqno means it just finished. */
		if (seq - (u32)(job->first + 1) >= job->cmd_count)
			return true;
		ms = exec & SPYRE_RING_EXEC_MS_MASK;
		return ms < budget_ms - budget_ms / 8;
	}
	spin_lock(&ring->lock);
	done = ring->done;
	spin_unlock(&ring->lock);
	if (!job->wait_since || job->wait_done != done) {
		job->wait_since = jiffies | 1;
		job->wait_done = done;
		return true;
	}
	return time_before(jiffies, job->wait_since + 2 * sdev->num_rings * timeout);
}

/*
 * A job did not finish in time. If its completion was only missed, or it has not used its
 * budget on the card (spyre_job_keep()), carry on. Otherwise
 * stop its scheduler, abort its ring and wait until the card has really stopped it (its
 * BOs and launch buffers stay alive until then), fail it with DRM_SPYRE_JOB_TIMEOUT and
 * re-run the innocent jobs queued behind it. A ring that does not stop escalates to a card
 * reset, a card that does not come back is wedged.
 *
 * All of it is a fence-signalling critical section (annotated for lockdep): the fences it
 * signals may be what memory reclaim waits for, so nothing here may allocate with reclaim
 * or take a lock held while allocating. The coredump goes into a buffer allocated at probe,
 * jobs freed on the way are freed later (spyre_free_job()).
 */
static enum drm_gpu_sched_stat spyre_timedout_job(struct drm_sched_job *sched_job)
{
	struct spyre_job *job = to_spyre_job(sched_job);
	struct drm_gpu_scheduler *sched = sched_job->sched;
	struct spyre_ring *ring = job->ring;
	struct spyre_device *sdev = job->sdev;
	const char *recovery;
	bool fence_cookie, dumped;
	ktime_t start;
	u32 us;
	int idx;

	/* After remove(), teardown aborts everything. */
	if (!drm_dev_enter(&sdev->drm, &idx))
		goto keep;
	/*
	 * Begun inside drm_dev_enter(): lockdep follows no dependency through that SRCU read
	 * lock, so begun before it a reclaim in the section would close no cycle. No lock is
	 * needed: every recovery and both halves of a PCI reset run on one ordered workqueue.
	 */
	fence_cookie = dma_fence_begin_signalling();
	if (job->hw_fence_live)
		spyre_ring_process(ring);
	/* Finished after all, never reached the ring, or a PCI reset deals with it. */
	if (!job->hw_fence_live || dma_fence_is_signaled(job->hw_fence) ||
	    READ_ONCE(sdev->in_pci_reset)) {
		dma_fence_end_signalling(fence_cookie);
		drm_dev_exit(idx);
		goto keep;
	}
	if (spyre_job_keep(ring, job)) {
		atomic_inc(&sdev->timeouts_deferred);
		trace_spyre_job_timeout_deferred(job);
		dma_fence_end_signalling(fence_cookie);
		drm_dev_exit(idx);
		goto keep;
	}

	start = ktime_get();
	trace_spyre_job_timeout(job);
	/* The dump shows the card as the hang left it: captured before anything is reset. */
	dumped = spyre_coredump_capture(sdev, job);
	WRITE_ONCE(sdev->recovering, true);
	WRITE_ONCE(sdev->recovery_task, current);
	drm_sched_stop(sched, sched_job);
	if (!READ_ONCE(sdev->wedged) && spyre_hw_ring_abort(ring) &&
	    !spyre_ring_restart(ring, job)) {
		drm_warn(&sdev->drm, "job %llu on ring %u timed out; ring reset\n",
			 job->res->job_id, ring->idx);
		atomic_inc(&sdev->ring_resets);
		trace_spyre_reset(sdev, ring->idx, "ring");
		recovery = "ring reset";
		drm_sched_resubmit_jobs(sched);
		drm_sched_start(sched);
	} else {
		drm_warn(&sdev->drm, "job %llu on ring %u timed out and the ring did not stop; card reset\n",
			 job->res->job_id, ring->idx);
		spyre_sched_stop_all(sdev, sched);
		spyre_card_reset(sdev, job, false);
		recovery = READ_ONCE(sdev->wedged) ? "wedged" : "card reset";
		spyre_sched_restart_all(sdev);
	}
	WRITE_ONCE(sdev->recovery_task, NULL);
	WRITE_ONCE(sdev->recovering, false);
	us = ktime_us_delta(ktime_get(), start);
	sdev->last_recovery_us = us;
	sdev->max_recovery_us = max(sdev->max_recovery_us, us);
	if (dumped)
		spyre_coredump_emit(sdev, recovery);
	dma_fence_end_signalling(fence_cookie);
	drm_dev_exit(idx);
	return DRM_GPU_SCHED_STAT_NOMINAL;

keep:
	spin_lock(&sched->job_list_lock);
	list_add(&sched_job->list, &sched->pending_list);
	spin_unlock(&sched->job_list_lock);
	return DRM_GPU_SCHED_STAT_NOMINAL;
}

/*
 * PCI function reset while bound (sysfs reset, AER): every scheduler stops before it, and
 * after it the card comes back (a PCI reset also ends a wedge) and what was queued re-runs.
 * Both halves run on reset_wq, the ordered workqueue of the timeout handlers, so they never
 * overlap a recovery, and no lock is held while drm_sched_stop() waits for the finished
 * fences of completed jobs: a timeout handler takes every lock inside its fence-signalling
 * section, so such a wait under one of them would close a cycle (lockdep reports it).
 */
static void spyre_reset_prepare_work(struct work_struct *work)
{
	struct spyre_device *sdev = container_of(work, struct spyre_device, reset_prepare_work);

	if (sdev->in_pci_reset)
		return;
	WRITE_ONCE(sdev->in_pci_reset, true);
	spyre_sched_stop_all(sdev, NULL);
	spyre_hw_disable_interrupts(sdev);
}

static void spyre_reset_done_work(struct work_struct *work)
{
	struct spyre_device *sdev = container_of(work, struct spyre_device, reset_done_work);

	if (!sdev->in_pci_reset)
		return;
	WRITE_ONCE(sdev->wedged, false);
	spyre_card_reset(sdev, NULL, true);
	/* The card came back: it runs nothing, DMA and quarantined memory may resume. */
	if (!READ_ONCE(sdev->wedged))
		spyre_hw_start_dma(sdev);
	WRITE_ONCE(sdev->in_pci_reset, false);
	spyre_sched_restart_all(sdev);
}

void spyre_reset_prepare(struct spyre_device *sdev)
{
	if (!sdev->sched_ready)
		return;
	queue_work(sdev->reset_wq, &sdev->reset_prepare_work);
	flush_work(&sdev->reset_prepare_work);
}

void spyre_reset_done(struct spyre_device *sdev)
{
	if (!sdev->sched_ready)
		return;
	queue_work(sdev->reset_wq, &sdev->reset_done_work);
	flush_work(&sdev->reset_done_work);
}

/*
 * remove(): the card is already reset and its interrupts freed. Fail every job still on a
 * ring and free, synchronously, every job the schedulers hold (drm_sched_stop() frees the
 * finished ones), so no BO reference outlives the device; then restart the schedulers so
 * that jobs still queued by open files reach run_job, which refuses them.
 */
void spyre_sched_teardown(struct spyre_device *sdev)
{
	unsigned int i;

	for (i = 0; i < sdev->num_rings; i++)
		spyre_ring_fail_all(&sdev->rings[i], NULL, -ENODEV);
	if (!sdev->sched_ready)
		return;
	for (i = 0; i < sdev->num_rings; i++) {
		drm_sched_stop(&sdev->rings[i].sched, NULL);
		drm_sched_start(&sdev->rings[i].sched);
	}
	/* Jobs a recovery left for later hold BO references too. */
	flush_work(&sdev->free_work);
	flush_work(&sdev->wedge_work);
}

/* Jobs that drm_sched_stop() freed during a recovery, freed outside it. */
static void spyre_free_later_work(struct work_struct *work)
{
	struct spyre_device *sdev = container_of(work, struct spyre_device, free_work);
	struct spyre_job *job, *tmp;

	llist_for_each_entry_safe(job, tmp, llist_del_all(&sdev->free_later), free_node)
		spyre_job_free(job);
}

static void spyre_free_job(struct drm_sched_job *sched_job)
{
	struct spyre_job *job = to_spyre_job(sched_job);
	struct spyre_device *sdev = job->sdev;

	drm_sched_job_cleanup(sched_job);
	/*
	 * From the timeout handler (drm_sched_stop() frees finished jobs): the last reference
	 * to a BO or file may go, whose release takes the dma_resv and address space locks,
	 * held elsewhere while allocating. Not in the fence-signalling section, then.
	 */
	if (READ_ONCE(sdev->recovery_task) == current) {
		if (llist_add(&job->free_node, &sdev->free_later))
			queue_work(system_unbound_wq, &sdev->free_work);
		return;
	}
	spyre_job_free(job);
}

static const struct drm_sched_backend_ops spyre_sched_ops = {
	.run_job = spyre_run_job,
	.timedout_job = spyre_timedout_job,
	.free_job = spyre_free_job,
};

int spyre_sched_init(struct spyre_device *sdev)
{
	struct drm_gpu_scheduler *sched;
	unsigned int i;
	int ret;

	init_llist_head(&sdev->free_later);
	INIT_WORK(&sdev->free_work, spyre_free_later_work);
	INIT_WORK(&sdev->wedge_work, spyre_wedged_uevent_work);
	INIT_WORK(&sdev->reset_prepare_work, spyre_reset_prepare_work);
	INIT_WORK(&sdev->reset_done_work, spyre_reset_done_work);
	for (i = 0; i < sdev->num_rings; i++) {
		struct spyre_ring *ring = &sdev->rings[i];
		struct drm_sched_init_args args = {
			.ops = &spyre_sched_ops,
			.num_rqs = DRM_SCHED_PRIORITY_COUNT,
			.credit_limit = ring->size - 1,
			.timeout = msecs_to_jiffies(spyre_job_timeout_ms ?: SPYRE_JOB_TIMEOUT_MS),
			/* one ordered queue: recoveries of different rings never overlap */
			.timeout_wq = sdev->reset_wq,
			.name = ring->irq_name,
			.dev = sdev->drm.dev,
		};

		ret = drm_sched_init(&ring->sched, &args);
		if (ret)
			goto err;
	}

	sched = &sdev->kernel_ring->sched;
	ret = drm_sched_entity_init(&sdev->kernel_entity, DRM_SCHED_PRIORITY_KERNEL, &sched, 1,
				    NULL);
	if (ret)
		goto err;
	mutex_init(&sdev->kernel_lock);
	sdev->sched_ready = true;
	return 0;

err:
	while (i--)
		drm_sched_fini(&sdev->rings[i].sched);
	return ret;
}

void spyre_sched_fini(struct spyre_device *sdev)
{
	unsigned int i;

	drm_sched_entity_destroy(&sdev->kernel_entity);
	mutex_destroy(&sdev->kernel_lock);
	for (i = 0; i < sdev->num_rings; i++)
		drm_sched_fini(&sdev->rings[i].sched);
	sdev->sched_ready = false;
}

/* drm_sched priority of each DRM_SPYRE_PRIORITY_* (the uapi values index the table). */
static const enum drm_sched_priority spyre_sched_priority[SPYRE_NUM_PRIORITIES] = {
	[DRM_SPYRE_PRIORITY_NORMAL] = DRM_SCHED_PRIORITY_NORMAL,
	[DRM_SPYRE_PRIORITY_LOW] = DRM_SCHED_PRIORITY_LOW,
	[DRM_SPYRE_PRIORITY_HIGH] = DRM_SCHED_PRIORITY_HIGH,
};

/* Entities of a file: one per user ring and priority, entity n of the flattened array. */
static struct drm_sched_entity *spyre_file_entity(struct spyre_file *sf, unsigned int n)
{
	return &sf->entities[n / SPYRE_NUM_PRIORITIES][n % SPYRE_NUM_PRIORITIES];
}

int spyre_job_file_open(struct spyre_file *sf)
{
	struct spyre_device *sdev = sf->sdev;
	unsigned int n;
	int ret;

	for (n = 0; n < sdev->user_rings * SPYRE_NUM_PRIORITIES; n++) {
		struct drm_gpu_scheduler *sched = &sdev->rings[n / SPYRE_NUM_PRIORITIES].sched;

		ret = drm_sched_entity_init(spyre_file_entity(sf, n),
					    spyre_sched_priority[n % SPYRE_NUM_PRIORITIES],
					    &sched, 1, NULL);
		if (ret) {
			while (n--)
				drm_sched_entity_destroy(spyre_file_entity(sf, n));
			return ret;
		}
	}
	return 0;
}

void spyre_job_file_close(struct spyre_file *sf)
{
	unsigned int i;

	for (i = 0; i < sf->sdev->user_rings * SPYRE_NUM_PRIORITIES; i++)
		drm_sched_entity_destroy(spyre_file_entity(sf, i));
	for (i = 0; i < SPYRE_JOB_HISTORY; i++)
		spyre_result_put(sf->history[i]);
}

/* ---- SUBMIT ---- */

static int spyre_elem_size_ok(u32 size, size_t min)
{
	return size >= min && size <= SPYRE_ELEM_SIZE_MAX && IS_ALIGNED(size, 8);
}

static bool spyre_ext_size_ok(u32 size, size_t min)
{
	return size >= min && size <= DRM_SPYRE_EXT_SIZE_MAX && IS_ALIGNED(size, 8);
}

/*
 * Copy the extension struct of command @uc into @dst (@ksize bytes). ext_size must lie
 * between @v1_size (the struct's first published size) and DRM_SPYRE_EXT_SIZE_MAX, multiple
 * of 8: the bytes beyond @ksize are checked to be zero, and the bound keeps that check to at
 * most a few KiB of user memory per command (an unbounded size let one SUBMIT scan terabytes
 * of zero pages, unkillable).
 */
int spyre_cmd_copy_ext(void *dst, size_t ksize, size_t v1_size, const struct drm_spyre_cmd *uc)
{
	int ret;

	if (!uc->ext || !spyre_ext_size_ok(uc->ext_size, v1_size))
		return -EINVAL;
	ret = copy_struct_from_user(dst, ksize, u64_to_user_ptr(uc->ext), uc->ext_size);
	return ret == -E2BIG ? -EINVAL : ret;
}

/*
 * Between two commands of a SUBMIT: let others run, and give up if the caller is being
 * killed (nothing of the SUBMIT is kept). Only fatal signals: a SUBMIT is bounded work
 * (tens of ms at most), and restarting it on every signal would never finish under a
 * profiling timer faster than that.
 */
static int spyre_submit_yield(void)
{
	cond_resched();
	return fatal_signal_pending(current) ? -EINTR : 0;
}

/* Copy element @i of a user array with element size @usize into @dst (@ksize bytes). */
static int spyre_copy_elem(void *dst, size_t ksize, u64 uptr, u32 i, u32 usize)
{
	int ret;

	ret = copy_struct_from_user(dst, ksize, u64_to_user_ptr(uptr + (u64)i * usize), usize);
	return ret == -E2BIG ? -EINVAL : ret;
}

static int spyre_job_add_bo(struct spyre_job *job, struct drm_file *file, u32 handle,
			    struct spyre_bo **out)
{
	struct drm_gem_object *obj = drm_gem_object_lookup(file, handle);
	struct spyre_bo *bo;

	if (!obj)
		return -ENOENT;
	job->bos[job->bo_count++] = obj;
	*out = bo = to_spyre_bo(obj);
	/* A peer's BO: counted until the job is freed; refused once its exporter is gone. */
	if (bo->flags == DRM_SPYRE_BO_PEER)
		return spyre_peer_job_hold(bo);
	return spyre_bo_in_file_vm(bo, file) ? 0 : -EINVAL;
}

/* The hardware address of one side of a DMA and the flag that says it is host memory. */
static u64 spyre_dma_side(const struct spyre_bo *bo, u8 host_flag, u8 *flags)
{
	if (spyre_bo_is_host_side(bo)) {
		*flags |= host_flag;
		return bo->pagedir_dma;
	}
	return spyre_bo_dev_addr(bo);
}

/* True if height rows of width bytes, pitch apart from offset, lie inside a BO of bo_size. */
static bool spyre_rows_fit(u64 offset, u64 width, u64 height, u64 pitch, u64 bo_size)
{
	u64 extent, end;

	return !check_mul_overflow(height - 1, pitch, &extent) &&
	       !check_add_overflow(extent, width, &extent) &&
	       !check_add_overflow(offset, extent, &end) && end <= bo_size;
}

static int spyre_job_prepare_copy_2d(struct spyre_job *job, struct drm_file *file,
				     const struct drm_spyre_cmd *uc, struct spyre_hw_cmd *hc)
{
	struct drm_spyre_copy_2d e;
	struct spyre_bo *src, *dst;
	int ret;

	if (!(job->sdev->caps & SPYRE_CAP_DMA_2D))
		return -EOPNOTSUPP;
	ret = spyre_cmd_copy_ext(&e, sizeof(e), SPYRE_COPY_2D_EXT_SIZE_MIN, uc);
	if (ret)
		return ret;
	if (e.reserved || !uc->size || !e.height || uc->size > U32_MAX || e.height > U32_MAX ||
	    e.src_pitch > U32_MAX || e.dst_pitch > U32_MAX)
		return -EINVAL;
	ret = spyre_job_add_bo(job, file, uc->src_handle, &src);
	if (ret)
		return ret;
	ret = spyre_job_add_bo(job, file, uc->dst_handle, &dst);
	if (ret)
		return ret;
	/* Pitches of 0 repeat rows: bound the bytes moved, not just the extents. */
	if (uc->size * e.height > job->sdev->devmem_size)
		return -EINVAL;
	if (!spyre_rows_fit(uc->src_offset, uc->size, e.height, e.src_pitch,
			    src->shmem.base.size) ||
	    !spyre_rows_fit(uc->dst_offset, uc->size, e.height, e.dst_pitch,
			    dst->shmem.base.size))
		return -EINVAL;
	if (spyre_bo_is_host_side(src) && spyre_bo_is_host_side(dst))
		return -EINVAL;

	memset(hc, 0, sizeof(*hc));
	hc->hdr.opcode = SPYRE_OP_DMA_COPY_2D;
	hc->dma2d.src_addr = spyre_dma_side(src, SPYRE_CMD_F_SRC_HOST, &hc->hdr.flags);
	hc->dma2d.dst_addr = spyre_dma_side(dst, SPYRE_CMD_F_DST_HOST, &hc->hdr.flags);
	hc->dma2d.src_offset = uc->src_offset;
	hc->dma2d.dst_offset = uc->dst_offset;
	hc->dma2d.width = uc->size;
	hc->dma2d.height = e.height;
	hc->dma2d.src_pitch = e.src_pitch;
	hc->dma2d.dst_pitch = e.dst_pitch;
	return 0;
}

/*
 * SEM_SIGNAL (@wait false) names its semaphore by dst_handle and dst_offset, SEM_WAIT by
 * src_handle and src_offset; the other side and size are 0. The BO may be DEVICE, HOST or
 * PEER: the semaphore is addressed as that side of a copy would be.
 */
static int spyre_job_prepare_sem(struct spyre_job *job, struct drm_file *file,
				 const struct drm_spyre_cmd *uc, struct spyre_hw_cmd *hc, bool wait)
{
	u32 handle = wait ? uc->src_handle : uc->dst_handle;
	u64 offset = wait ? uc->src_offset : uc->dst_offset;
	struct drm_spyre_sem e;
	struct spyre_bo *bo;
	int ret;

	if (!(job->sdev->caps & SPYRE_CAP_SEM))
		return -EOPNOTSUPP;
	ret = spyre_cmd_copy_ext(&e, sizeof(e), SPYRE_SEM_EXT_SIZE_MIN, uc);
	if (ret)
		return ret;
	if (e.flags || uc->size || (wait ? uc->dst_handle || uc->dst_offset :
					   uc->src_handle || uc->src_offset))
		return -EINVAL;
	if (wait ? e.timeout_us > DRM_SPYRE_SEM_WAIT_MAX_US : e.timeout_us)
		return -EINVAL;
	if (!IS_ALIGNED(offset, DRM_SPYRE_SEM_SIZE))
		return -EINVAL;
	ret = spyre_job_add_bo(job, file, handle, &bo);
	if (ret)
		return ret;
	if (bo->shmem.base.size < DRM_SPYRE_SEM_SIZE ||
	    offset > bo->shmem.base.size - DRM_SPYRE_SEM_SIZE)
		return -EINVAL;

	memset(hc, 0, sizeof(*hc));
	hc->hdr.opcode = wait ? SPYRE_OP_SEM_WAIT : SPYRE_OP_SEM_SIGNAL;
	hc->sem.addr = spyre_dma_side(bo, wait ? SPYRE_CMD_F_SRC_HOST : SPYRE_CMD_F_DST_HOST,
				      &hc->hdr.flags);
	hc->sem.offset = offset;
	hc->sem.value = e.value;
	hc->sem.timeout_us = e.timeout_us;
	return 0;
}

/* Check one user command and translate it into a hardware command. */
static int spyre_job_prepare_cmd(struct spyre_job *job, struct drm_file *file,
				 const struct drm_spyre_cmd *uc, struct spyre_hw_cmd *hc)
{
	struct spyre_bo *src, *dst;
	struct spyre_launch *l;
	u64 end;
	int ret;

	if (uc->flags || uc->pad || uc->reserved)
		return -EINVAL;

	if (uc->op == DRM_SPYRE_CMD_LAUNCH) {
		/* More LAUNCHes than counted and charged: the array changed during SUBMIT. */
		if (job->launch_count >= job->charged_launches)
			return -EINVAL;
		ret = spyre_launch_prepare(job->sdev, file, uc, job->cmd_count, hc, &l);
		if (l) {
			list_add_tail(&l->node, &job->launches);
			job->launch_count++;
		}
		return ret;
	}
	if (uc->op == DRM_SPYRE_CMD_COPY_2D)
		return spyre_job_prepare_copy_2d(job, file, uc, hc);
	if (uc->op == DRM_SPYRE_CMD_SEM_SIGNAL || uc->op == DRM_SPYRE_CMD_SEM_WAIT)
		return spyre_job_prepare_sem(job, file, uc, hc, uc->op == DRM_SPYRE_CMD_SEM_WAIT);
	/* Only LAUNCH, COPY_2D and SEM_* have an extension. */
	if (uc->ext || uc->ext_size)
		return -EINVAL;

	memset(hc, 0, sizeof(*hc));
	switch (uc->op) {
	case DRM_SPYRE_CMD_NOP:
		if (uc->src_handle || uc->dst_handle || uc->src_offset || uc->dst_offset ||
		    uc->size)
			return -EINVAL;
		hc->hdr.opcode = SPYRE_OP_NOP;
		return 0;
	case DRM_SPYRE_CMD_COPY:
		break;
	default:
		return -EINVAL;
	}

	if (uc->size == 0)
		return -EINVAL;
	ret = spyre_job_add_bo(job, file, uc->src_handle, &src);
	if (ret)
		return ret;
	ret = spyre_job_add_bo(job, file, uc->dst_handle, &dst);
	if (ret)
		return ret;
	if (check_add_overflow(uc->src_offset, uc->size, &end) ||
	    end > src->shmem.base.size)
		return -EINVAL;
	if (check_add_overflow(uc->dst_offset, uc->size, &end) ||
	    end > dst->shmem.base.size)
		return -EINVAL;
	if (spyre_bo_is_host_side(src) && spyre_bo_is_host_side(dst))
		return -EINVAL;

	hc->hdr.opcode = SPYRE_OP_DMA_COPY;
	hc->dma.src_addr = spyre_dma_side(src, SPYRE_CMD_F_SRC_HOST, &hc->hdr.flags);
	hc->dma.dst_addr = spyre_dma_side(dst, SPYRE_CMD_F_DST_HOST, &hc->hdr.flags);
	hc->dma.src_offset = uc->src_offset;
	hc->dma.dst_offset = uc->dst_offset;
	hc->dma.size = uc->size;
	return 0;
}

static int spyre_job_prepare_cmds(struct spyre_job *job, struct drm_file *file,
				  const struct drm_spyre_submit *args)
{
	struct drm_spyre_cmd uc;
	u32 i;
	int ret;

	job->cmds = kvmalloc_array(args->cmd_count, sizeof(*job->cmds), GFP_KERNEL_ACCOUNT);
	job->bos = kvmalloc_array(args->cmd_count * 2, sizeof(*job->bos), GFP_KERNEL_ACCOUNT);
	if (!job->cmds || !job->bos)
		return -ENOMEM;

	for (i = 0; i < args->cmd_count; i++) {
		ret = spyre_submit_yield();
		if (ret)
			return ret;
		ret = spyre_copy_elem(&uc, sizeof(uc), args->cmds, i, args->cmd_size);
		if (ret)
			return ret;
		ret = spyre_job_prepare_cmd(job, file, &uc, &job->cmds[i]);
		if (ret)
			return ret;
		/* Its device addresses are the file's virtual addresses. */
		job->cmds[i].hdr.ctx = job->ctx;
		job->cmd_count++;
	}
	return 0;
}

/*
 * The LAUNCH commands of a SUBMIT, counted from the op (first field) of each command before
 * anything is allocated, so that a job over the file's launch budget costs nothing. The
 * commands are read again to be prepared; one that has become a LAUNCH since is refused.
 */
static int spyre_submit_count_launches(const struct drm_spyre_submit *args, u32 *launches)
{
	u32 i, op;
	int ret;

	*launches = 0;
	for (i = 0; i < args->cmd_count; i++) {
		ret = spyre_submit_yield();
		if (ret)
			return ret;
		if (copy_from_user(&op, u64_to_user_ptr(args->cmds + (u64)i * args->cmd_size),
				   sizeof(op)))
			return -EFAULT;
		if (op == DRM_SPYRE_CMD_LAUNCH)
			++*launches;
	}
	/* More than a file may ever have in flight: no retry can succeed. */
	return *launches > SPYRE_FILE_MAX_LAUNCHES ? -EINVAL : 0;
}

static int spyre_job_add_in_syncs(struct spyre_job *job, struct drm_file *file,
				  const struct drm_spyre_submit *args)
{
	struct drm_spyre_sync sync;
	struct dma_fence *fence;
	u32 i;
	int ret;

	for (i = 0; i < args->in_sync_count; i++) {
		ret = spyre_copy_elem(&sync, sizeof(sync), args->in_syncs, i, args->sync_size);
		if (ret)
			return ret;
		if (sync.flags || !sync.handle)
			return -EINVAL;
		ret = drm_syncobj_find_fence(file, sync.handle, sync.point, 0, &fence);
		if (ret)
			return ret;
		ret = drm_sched_job_add_dependency(&job->base, fence);
		if (ret)
			return ret;
	}
	return 0;
}

static int spyre_submit_check_args(struct spyre_device *sdev, const struct drm_spyre_submit *a)
{
	if (a->flags || a->priority >= SPYRE_NUM_PRIORITIES)
		return -EINVAL;
	if (a->ring >= sdev->user_rings)
		return -EINVAL;
	if (a->cmd_count == 0 || a->cmd_count > DRM_SPYRE_MAX_CMDS || !a->cmds)
		return -EINVAL;
	if (!spyre_elem_size_ok(a->cmd_size, SPYRE_CMD_SIZE_MIN))
		return -EINVAL;
	if (a->in_sync_count > DRM_SPYRE_MAX_SYNCS)
		return -EINVAL;
	if (a->in_sync_count &&
	    (!a->in_syncs || !spyre_elem_size_ok(a->sync_size, SPYRE_SYNC_SIZE_MIN)))
		return -EINVAL;
	if (!a->out_sync && a->out_point)
		return -EINVAL;
	/* Like a negative nice value: only for the privileged. */
	if (a->priority == DRM_SPYRE_PRIORITY_HIGH && !capable(CAP_SYS_NICE))
		return -EPERM;
	return 0;
}

int spyre_ioctl_submit(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct spyre_device *sdev = to_spyre_dev(drm);
	struct spyre_file *sf = file->driver_priv;
	struct drm_spyre_submit *args = data;
	struct dma_fence_chain *chain = NULL;
	struct drm_syncobj *syncobj = NULL;
	struct spyre_result *old;
	struct dma_fence *done;
	struct spyre_job *job;
	unsigned int slot;
	int ret, jobs, cmds, launched;
	u32 launches;

	ret = spyre_submit_check_args(sdev, args);
	if (ret)
		return ret;
	if (READ_ONCE(sdev->wedged))
		return -EIO;
	ret = spyre_submit_count_launches(args, &launches);
	if (ret)
		return ret;

	job = kzalloc(sizeof(*job), GFP_KERNEL_ACCOUNT);
	if (!job)
		return -ENOMEM;
	job->sdev = sdev;
	job->ring = &sdev->rings[args->ring];
	job->priority = args->priority;
	INIT_LIST_HEAD(&job->node);
	INIT_LIST_HEAD(&job->launches);

	/*
	 * Per-file budget of work in flight, charged until the job is freed, and checked before
	 * anything of the commands is allocated.
	 */
	kref_get(&sf->ref);
	job->sf = sf;
	job->charged_cmds = args->cmd_count;
	job->charged_launches = launches;
	jobs = atomic_inc_return(&sf->jobs);
	cmds = atomic_add_return(args->cmd_count, &sf->cmds);
	launched = atomic_add_return(launches, &sf->launches);
	/* A job without LAUNCHes is not refused for another SUBMIT's passing excess. */
	if (jobs > SPYRE_FILE_MAX_JOBS || cmds > SPYRE_FILE_MAX_CMDS ||
	    (launches && launched > SPYRE_FILE_MAX_LAUNCHES)) {
		ret = -EAGAIN;
		goto err_free;
	}

	job->res = spyre_result_alloc();
	job->hw_fence = kzalloc(sizeof(*job->hw_fence), GFP_KERNEL_ACCOUNT);
	if (!job->res || !job->hw_fence) {
		ret = -ENOMEM;
		goto err_free;
	}

	/*
	 * The file's MMU context id, bound here (where we may sleep and wait for one) and held
	 * by the job until it is freed: nothing can take it while the job is queued, runs, or is
	 * re-run after a reset, so neither run_job nor recovery ever binds.
	 */
	if (sf->vm) {
		ret = spyre_vm_get_ctx(sf->vm, &job->ctx);
		if (ret)
			goto err_free;
	}

	ret = spyre_job_prepare_cmds(job, file, args);
	if (ret)
		goto err_free;

	if (args->out_sync) {
		syncobj = drm_syncobj_find(file, args->out_sync);
		if (!syncobj) {
			ret = -ENOENT;
			goto err_free;
		}
		if (args->out_point) {
			chain = dma_fence_chain_alloc();
			if (!chain) {
				ret = -ENOMEM;
				goto err_free;
			}
		}
	}

	ret = drm_sched_job_init(&job->base, &sf->entities[args->ring][args->priority],
				 spyre_job_credits(job->ring, job->cmd_count), sf, file->client_id);
	if (ret)
		goto err_free;
	ret = spyre_job_add_in_syncs(job, file, args);
	if (ret)
		goto err_cleanup;

	mutex_lock(&sf->lock);
	drm_sched_job_arm(&job->base);
	done = dma_fence_get(&job->base.s_fence->finished);
	job->res->job_id = ++sf->next_job_id;
	job->res->done = dma_fence_get(done);
	kref_get(&job->res->ref);
	slot = job->res->job_id % SPYRE_JOB_HISTORY;
	old = sf->history[slot];
	sf->history[slot] = job->res;
	args->job_id = job->res->job_id;
	atomic64_inc(&sdev->jobs_submitted);
	trace_spyre_job_submit(job);
	drm_sched_entity_push_job(&job->base);
	mutex_unlock(&sf->lock);
	spyre_result_put(old);

	if (syncobj) {
		if (chain)
			drm_syncobj_add_point(syncobj, chain, done, args->out_point);
		else
			drm_syncobj_replace_fence(syncobj, done);
		drm_syncobj_put(syncobj);
	}
	dma_fence_put(done);
	return 0;

err_cleanup:
	drm_sched_job_cleanup(&job->base);
err_free:
	dma_fence_chain_free(chain);
	if (syncobj)
		drm_syncobj_put(syncobj);
	spyre_job_free(job);
	return ret;
}

/* ---- kernel jobs ---- */

/* A job of one command (left zero for the caller) on the kernel's own ring. */
static struct spyre_job *spyre_kernel_job_alloc(struct spyre_device *sdev)
{
	struct spyre_job *job;

	job = kzalloc(sizeof(*job), GFP_KERNEL_ACCOUNT);
	if (!job)
		return NULL;
	job->sdev = sdev;
	job->ring = sdev->kernel_ring;
	job->kernel = true;
	INIT_LIST_HEAD(&job->node);
	INIT_LIST_HEAD(&job->launches);
	job->res = spyre_result_alloc();
	job->hw_fence = kzalloc(sizeof(*job->hw_fence), GFP_KERNEL_ACCOUNT);
	job->cmds = kvzalloc(sizeof(*job->cmds), GFP_KERNEL_ACCOUNT);
	if (!job->res || !job->hw_fence || !job->cmds) {
		spyre_job_free(job);
		return NULL;
	}
	job->cmd_count = 1;
	return job;
}

/* Queue a kernel job; *done gets its "finished" fence. On error the job is freed. */
static int spyre_kernel_job_push(struct spyre_job *job, struct dma_fence **done)
{
	struct spyre_device *sdev = job->sdev;
	int ret;

	ret = drm_sched_job_init(&job->base, &sdev->kernel_entity,
				 spyre_job_credits(job->ring, 1), sdev, 0);
	if (ret) {
		spyre_job_free(job);
		return ret;
	}
	mutex_lock(&sdev->kernel_lock);
	drm_sched_job_arm(&job->base);
	*done = dma_fence_get(&job->base.s_fence->finished);
	trace_spyre_job_submit(job);
	drm_sched_entity_push_job(&job->base);
	mutex_unlock(&sdev->kernel_lock);
	return 0;
}

/*
 * Zero a new DEVICE BO with one DMA copy from the zero source on the kernel's own ring, and
 * wait for it, interruptibly. The caller keeps its reference on @bo across the call. The BO
 * keeps the clear's fence: if the wait is interrupted and the BO freed, its card memory is
 * returned only once the clear has finished (spyre_gem_reap()).
 */
int spyre_job_clear_bo(struct spyre_device *sdev, struct spyre_bo *bo)
{
	struct spyre_hw_cmd *cmd;
	struct dma_fence *done;
	struct spyre_job *job;
	int ret;

	if (READ_ONCE(sdev->wedged))
		return -EIO;
	job = spyre_kernel_job_alloc(sdev);
	if (!job)
		return -ENOMEM;
	/*
	 * No BO reference in the job: the BO holds the fence instead (see above), so closing
	 * the new BO right after BO_CREATE returns its card memory at once.
	 */
	cmd = &job->cmds[0];
	cmd->hdr.opcode = SPYRE_OP_DMA_COPY;
	cmd->hdr.flags = SPYRE_CMD_F_SRC_HOST;
	cmd->dma.src_addr = sdev->zero_dir_dma;
	cmd->dma.dst_addr = bo->node.start;
	cmd->dma.size = bo->shmem.base.size;

	ret = spyre_kernel_job_push(job, &done);
	if (ret)
		return ret;
	bo->clear_fence = done;

	ret = dma_fence_wait(done, true);
	if (ret)
		return ret;
	return done->error ? -EIO : 0;
}

/*
 * Read sizeof(p->data) bytes at virtual address @va of MMU context @ctx as that context's
 * jobs would: a DMA copy translated by the card (its translation cache included) into a
 * host page, on the kernel's ring. For tests (debugfs mmu_probe): the card's view of a
 * context, which launch windows and BO handles hide from user space. The wait is not
 * interruptible: the card writes into the page until the job is over.
 */
int spyre_job_probe_va(struct spyre_device *sdev, u32 ctx, u64 va, struct spyre_va_probe *p)
{
	struct device *dev = sdev->drm.dev;
	struct spyre_result *res;
	struct spyre_hw_cmd *cmd;
	struct dma_fence *done;
	struct spyre_job *job;
	dma_addr_t dma;
	__le64 *pages;
	int ret;

	if (READ_ONCE(sdev->wedged))
		return -EIO;
	/* page 0: the directory, page 1: its one page table, page 2: the data page */
	pages = dma_alloc_coherent(dev, 3 * SPYRE_HOST_PAGE_SIZE, &dma, GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	pages[0] = cpu_to_le64(dma + SPYRE_HOST_PAGE_SIZE);
	pages[SPYRE_HOST_PT_ENTRIES] = cpu_to_le64(dma + 2 * SPYRE_HOST_PAGE_SIZE);
	job = spyre_kernel_job_alloc(sdev);
	if (!job) {
		ret = -ENOMEM;
		goto out_free;
	}
	cmd = &job->cmds[0];
	cmd->hdr.opcode = SPYRE_OP_DMA_COPY;
	cmd->hdr.flags = SPYRE_CMD_F_DST_HOST;
	cmd->hdr.ctx = ctx;
	cmd->dma.src_addr = va;
	cmd->dma.dst_addr = dma;
	cmd->dma.size = sizeof(p->data);
	res = job->res;
	kref_get(&res->ref);
	ret = spyre_kernel_job_push(job, &done);
	if (ret) {
		spyre_result_put(res);
		goto out_free;
	}
	dma_fence_wait(done, false);
	if (res->status == DRM_SPYRE_JOB_OK && !done->error) {
		p->hw_status = SPYRE_STATUS_OK;
		memcpy(p->data, &pages[2 * SPYRE_HOST_PT_ENTRIES], sizeof(p->data));
	} else if (res->hw_status) {
		p->hw_status = res->hw_status;
		p->fault_addr = res->fault_addr;
	} else {
		ret = -EIO;	/* timed out or aborted */
	}
	dma_fence_put(done);
	spyre_result_put(res);
out_free:
	dma_free_coherent(dev, 3 * SPYRE_HOST_PAGE_SIZE, pages, dma);
	return ret;
}

/* ---- JOB_WAIT ---- */

int spyre_ioctl_job_wait(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct spyre_file *sf = file->driver_priv;
	struct drm_spyre_job_wait *args = data;
	struct spyre_result *res = NULL;
	long timeout, ret;

	if (args->flags || args->pad)
		return -EINVAL;

	mutex_lock(&sf->lock);
	if (args->job_id && args->job_id <= sf->next_job_id) {
		res = sf->history[args->job_id % SPYRE_JOB_HISTORY];
		if (res && res->job_id == args->job_id)
			kref_get(&res->ref);
		else
			res = NULL;
	}
	mutex_unlock(&sf->lock);
	if (!res)
		return -ENOENT;

	/*
	 * The deadline is on CLOCK_MONOTONIC, the wait counts jiffies; where the two drift
	 * (seen in emulated guests) a jiffy wait can end early: wait again for what is left.
	 */
	do {
		timeout = drm_timeout_abs_to_jiffies(args->timeout_ns);
		ret = dma_fence_wait_timeout(res->done, true, timeout);
	} while (ret == 0 && timeout && (s64)ktime_get_ns() < args->timeout_ns);
	if (ret == 0) {
		ret = -ETIME;
	} else if (ret > 0) {
		args->status = res->status;
		if (args->status == DRM_SPYRE_JOB_OK && res->done->error)
			args->status = DRM_SPYRE_JOB_ABORTED;
		args->hw_status = res->hw_status;
		args->failed_cmd = res->failed_cmd;
		args->hw_detail = res->hw_detail;
		args->fault_addr = res->fault_addr;
		args->cycles = res->cycles;
		args->start_cycle = res->start_cycle;
		args->end_cycle = res->end_cycle;
		ret = 0;
	}
	spyre_result_put(res);
	return ret;
}

#if IS_ENABLED(CONFIG_KUNIT)
#include "spyre_job_kunit.c"
#endif
