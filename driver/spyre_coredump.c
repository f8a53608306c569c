// SPDX-License-Identifier: GPL-2.0-only
/*
 * Spyre accelerator driver: device coredump of a job that timed out.
 *
 * The timeout handler captures the card before it recovers (the guilty job with its
 * commands, every ring, the card registers and telemetry) as "key: value" text lines, adds
 * how the recovery ended and queues a worker that hands the text to devcoredump: it appears
 * as /sys/class/devcoredump/devcdN/data until something is written to that file (or for 5
 * minutes). The format is documented in Documentation/driver.md, "Device coredump".
 *
 * The handler is in the fence-signalling critical section: it must not allocate with
 * reclaim (reclaim may wait for the fences the recovery signals), and vmalloc() cannot do
 * without it. So it writes into a buffer allocated at probe, big enough for the largest
 * job, and only the worker, outside that section, allocates the copy devcoredump keeps.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <linux/devcoredump.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>
#include <linux/vmalloc.h>
#include <linux/workqueue.h>

#include "spyre_drv.h"

#define SPYRE_DUMP_VERSION	1
/* Room for everything but the guilty job's commands, and for each command line. */
#define SPYRE_DUMP_BASE_BYTES	SZ_16K
#define SPYRE_DUMP_CMD_BYTES	160
/* The whole capture buffer: the largest job fits (a bigger dump would be truncated). */
#define SPYRE_DUMP_BYTES	(SPYRE_DUMP_BASE_BYTES + DRM_SPYRE_MAX_CMDS * SPYRE_DUMP_CMD_BYTES)
/* Bit of spyre_dump.busy: a capture is in the buffer until the worker has copied it. */
#define SPYRE_DUMP_BUSY		0

struct spyre_dump_reg {
	const char *name;
	u32 reg;
};

static const struct spyre_dump_reg spyre_dump_card_regs[] = {
	{ "ID", SPYRE_REG_ID },
	{ "VERSION", SPYRE_REG_VERSION },
	{ "CAPS", SPYRE_REG_CAPS },
	{ "NUM_CORES", SPYRE_REG_NUM_CORES },
	{ "NUM_RINGS", SPYRE_REG_NUM_RINGS },
	{ "STATUS", SPYRE_REG_STATUS },
	{ "INTR_STATUS", SPYRE_REG_INTR_STATUS },
	{ "INTR_MASK", SPYRE_REG_INTR_MASK },
	{ "ERROR_CODE", SPYRE_REG_ERROR_CODE },
	{ "SCRATCH", SPYRE_REG_SCRATCH },
	{ "MMU_CTX_BASE_LO", SPYRE_REG_MMU_CTX_BASE_LO },
	{ "MMU_CTX_BASE_HI", SPYRE_REG_MMU_CTX_BASE_HI },
};

static const struct spyre_dump_reg spyre_dump_ring_regs[] = {
	{ "CMD_BASE_LO", SPYRE_RING_CMD_BASE_LO },
	{ "CMD_BASE_HI", SPYRE_RING_CMD_BASE_HI },
	{ "CPL_BASE_LO", SPYRE_RING_CPL_BASE_LO },
	{ "CPL_BASE_HI", SPYRE_RING_CPL_BASE_HI },
	{ "SIZE", SPYRE_RING_SIZE },
	{ "HEAD", SPYRE_RING_HEAD },
	{ "TAIL", SPYRE_RING_TAIL },
	{ "CTRL", SPYRE_RING_CTRL },
	{ "STATUS", SPYRE_RING_STATUS },
	{ "COMPLETED", SPYRE_RING_COMPLETED },
	{ "FAULT_ADDR_LO", SPYRE_RING_FAULT_ADDR_LO },
	{ "FAULT_ADDR_HI", SPYRE_RING_FAULT_ADDR_HI },
	{ "FAULT_INFO", SPYRE_RING_FAULT_INFO },
	{ "EXEC_SEQNO", SPYRE_RING_EXEC_SEQNO },	/* hw 1.4: what held the engine, how long */
	{ "EXEC_TIME", SPYRE_RING_EXEC_TIME },
};

/* 64-bit telemetry counters (LO register named); TELE_ERRORS and TELE_RESETS are 32-bit. */
static const struct spyre_dump_reg spyre_dump_tele64[] = {
	{ "cmds", SPYRE_REG_TELE_CMDS_LO },
	{ "h2d_bytes", SPYRE_REG_TELE_H2D_BYTES_LO },
	{ "d2h_bytes", SPYRE_REG_TELE_D2H_BYTES_LO },
	{ "d2d_bytes", SPYRE_REG_TELE_D2D_BYTES_LO },
	{ "launches", SPYRE_REG_TELE_LAUNCHES_LO },
	{ "engine_cycles", SPYRE_REG_TELE_ENG_CYCLES_LO },
};

static const char * const spyre_dump_priority[] = {
	[DRM_SPYRE_PRIORITY_NORMAL] = "normal",
	[DRM_SPYRE_PRIORITY_LOW] = "low",
	[DRM_SPYRE_PRIORITY_HIGH] = "high",
};

static __printf(2, 3) void spyre_dump_printf(struct spyre_dump *d, const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	d->len += vscnprintf(d->buf + d->len, SPYRE_DUMP_BYTES - d->len, fmt, args);
	va_end(args);
}

static void spyre_dump_job(struct spyre_dump *d, struct spyre_job *job)
{
	struct spyre_file *sf = job->sf;
	u32 i;

	spyre_dump_printf(d, "guilty.pid: %d\n", sf ? sf->pid : 0);
	spyre_dump_printf(d, "guilty.comm: %s\n", sf ? sf->comm : "[kernel]");
	spyre_dump_printf(d, "guilty.client_id: %llu\n", sf ? sf->client_id : 0);
	spyre_dump_printf(d, "guilty.mmu_context: %u\n", job->ctx);
	spyre_dump_printf(d, "guilty.ring: %u\n", job->ring->idx);
	spyre_dump_printf(d, "guilty.job_id: %llu\n", job->res->job_id);
	spyre_dump_printf(d, "guilty.priority: %s\n",
			  job->kernel ? "kernel" : spyre_dump_priority[job->priority]);
	spyre_dump_printf(d, "guilty.seqno: %llu\n", job->first + 1);
	spyre_dump_printf(d, "guilty.cmd_count: %u\n", job->cmd_count);
	/* The commands as the card got them: seqno stamped, IRQ on the last one. */
	for (i = 0; i < job->cmd_count; i++) {
		struct spyre_ring *ring = job->ring;
		u32 e = (job->first + i - ring->hw_base) & (ring->size - 1);

		spyre_dump_printf(d, "guilty.cmd.%u: %*phN\n", i,
				  (int)sizeof(ring->cmds[e]), &ring->cmds[e]);
	}
}

static void spyre_dump_rings(struct spyre_dump *d, struct spyre_device *sdev)
{
	unsigned int i, r;

	for (i = 0; i < sdev->num_rings; i++) {
		struct spyre_ring *ring = &sdev->rings[i];
		u64 submitted, done;
		bool enabled;

		spin_lock(&ring->lock);
		submitted = ring->submitted;
		done = ring->done;
		enabled = ring->enabled;
		spin_unlock(&ring->lock);
		spyre_dump_printf(d, "ring.%u.kernel: %d\n", i, ring == sdev->kernel_ring);
		spyre_dump_printf(d, "ring.%u.enabled: %d\n", i, enabled);
		spyre_dump_printf(d, "ring.%u.submitted: %llu\n", i, submitted);
		spyre_dump_printf(d, "ring.%u.done: %llu\n", i, done);
		for (r = 0; r < ARRAY_SIZE(spyre_dump_ring_regs); r++) {
			const struct spyre_dump_reg *reg = &spyre_dump_ring_regs[r];

			spyre_dump_printf(d, "ring.%u.%s: 0x%08x\n", i, reg->name,
					  spyre_read(sdev, SPYRE_RING_REG(i, reg->reg)));
		}
	}
}

static void spyre_dump_card(struct spyre_dump *d, struct spyre_device *sdev)
{
	unsigned int r;

	for (r = 0; r < ARRAY_SIZE(spyre_dump_card_regs); r++)
		spyre_dump_printf(d, "card.%s: 0x%08x\n", spyre_dump_card_regs[r].name,
				  spyre_read(sdev, spyre_dump_card_regs[r].reg));
	if (!(sdev->caps & SPYRE_CAP_TELEMETRY))
		return;
	for (r = 0; r < ARRAY_SIZE(spyre_dump_tele64); r++)
		spyre_dump_printf(d, "telemetry.%s: %llu\n", spyre_dump_tele64[r].name,
				  spyre_read64(sdev, spyre_dump_tele64[r].reg));
	spyre_dump_printf(d, "telemetry.errors: %u\n", spyre_read(sdev, SPYRE_REG_TELE_ERRORS));
	spyre_dump_printf(d, "telemetry.resets: %u\n", spyre_read(sdev, SPYRE_REG_TELE_RESETS));
	spyre_dump_printf(d, "telemetry.temp_mc: %u\n", spyre_read(sdev, SPYRE_REG_TELE_TEMP_MC));
	spyre_dump_printf(d, "telemetry.power_mw: %u\n",
			  spyre_read(sdev, SPYRE_REG_TELE_POWER_MW));
}

/*
 * Capture the card with @guilty on it, before any recovery touches it, into the buffer
 * allocated at probe; allocates nothing. Returns false (no dump) while the previous capture
 * is not yet handed to devcoredump.
 */
bool spyre_coredump_capture(struct spyre_device *sdev, struct spyre_job *guilty)
{
	struct spyre_dump *d = &sdev->dump;

	if (test_and_set_bit_lock(SPYRE_DUMP_BUSY, &d->busy)) {
		drm_info(&sdev->drm, "previous device coredump still being published; none taken\n");
		return false;
	}
	d->len = 0;
	spyre_dump_printf(d, "spyre devcoredump\n");
	spyre_dump_printf(d, "version: %d\n", SPYRE_DUMP_VERSION);
	spyre_dump_printf(d, "reason: job timeout\n");
	spyre_dump_printf(d, "device: %s\n", dev_name(sdev->drm.dev));
	spyre_dump_printf(d, "time_ns: %llu\n", ktime_get_real_ns());
	spyre_dump_printf(d, "boottime_ns: %llu\n", ktime_get_boottime_ns());
	spyre_dump_job(d, guilty);
	spyre_dump_rings(d, sdev);
	spyre_dump_card(d, sdev);
	spyre_dump_printf(d, "telemetry.jobs_submitted: %lld\n",
			  atomic64_read(&sdev->jobs_submitted));
	spyre_dump_printf(d, "telemetry.jobs_timed_out: %lld\n",
			  atomic64_read(&sdev->jobs_timed_out));
	spyre_dump_printf(d, "telemetry.ring_resets: %d\n", atomic_read(&sdev->ring_resets));
	spyre_dump_printf(d, "telemetry.card_resets: %d\n", atomic_read(&sdev->card_resets));
	return true;
}

/*
 * Add how the recovery ended ("ring reset", "card reset", "wedged") to a capture and queue
 * its publication; allocates nothing.
 */
void spyre_coredump_emit(struct spyre_device *sdev, const char *recovery)
{
	struct spyre_dump *d = &sdev->dump;

	spyre_dump_printf(d, "recovery: %s\n", recovery);
	spyre_dump_printf(d, "end\n");
	queue_work(system_unbound_wq, &d->work);
}

/*
 * Outside the fence-signalling path: copy the capture for devcoredump, which owns (and
 * vfree()s) the copy and keeps only the first of a device's dumps until that one is read
 * out and freed. The capture buffer is free again once copied.
 */
static void spyre_coredump_work(struct work_struct *work)
{
	struct spyre_dump *d = container_of(work, struct spyre_dump, work);
	struct spyre_device *sdev = container_of(d, struct spyre_device, dump);
	size_t len = d->len;
	void *copy;

	copy = vmalloc(len);
	if (copy)
		memcpy(copy, d->buf, len);
	clear_bit_unlock(SPYRE_DUMP_BUSY, &d->busy);
	if (!copy) {
		drm_warn(&sdev->drm, "no memory for a device coredump\n");
		return;
	}
	dev_coredumpv(sdev->drm.dev, copy, len, GFP_KERNEL);
}

/* unbind: after remove() no timeout handler runs; publish a capture still queued. */
static void spyre_coredump_fini(void *data)
{
	struct spyre_dump *d = data;

	flush_work(&d->work);
	kvfree(d->buf);
	d->buf = NULL;
}

/* probe: the capture buffer, SPYRE_DUMP_BYTES, so that a timeout never allocates one. */
int spyre_coredump_init(struct spyre_device *sdev)
{
	struct spyre_dump *d = &sdev->dump;

	INIT_WORK(&d->work, spyre_coredump_work);
	d->buf = kvmalloc(SPYRE_DUMP_BYTES, GFP_KERNEL);
	if (!d->buf)
		return -ENOMEM;
	return devm_add_action_or_reset(&sdev->pdev->dev, spyre_coredump_fini, d);
}
