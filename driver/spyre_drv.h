/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Spyre accelerator driver: shared definitions.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#ifndef __SPYRE_DRV_H__
#define __SPYRE_DRV_H__

#include <linux/atomic.h>
#include <linux/dma-fence.h>
#include <linux/idr.h>
#include <linux/io.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/llist.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/sched.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include <drm/drm_device.h>
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_gem_shmem_helper.h>
#include <drm/drm_mm.h>
#include <drm/drm_print.h>
#include <drm/gpu_scheduler.h>

#include "spyre_hw.h"
#include "spyre_accel.h"
#include "spyre_mmu.h"

#define SPYRE_DRIVER_NAME	"spyre"
#define SPYRE_DRIVER_DESC	"Spyre AI accelerator"

/* Entries per command ring: holds the largest job (DRM_SPYRE_MAX_CMDS) twice over. */
#define SPYRE_RING_ENTRIES	8192
/* Device memory kept out of the BO allocator, so that dev_addr 0 never names a BO. */
#define SPYRE_DEVMEM_RESERVED	SZ_64K
/* Default scheduler timeout of a job on a ring (module parameter job_timeout_ms). */
#define SPYRE_JOB_TIMEOUT_MS	30000
/* Time the card may take to stop an aborted ring (STATUS.BUSY) or to finish a RESET. */
#define SPYRE_ABORT_TIMEOUT_US	(1000 * USEC_PER_MSEC)
#define SPYRE_RESET_TIMEOUT_US	(2000 * USEC_PER_MSEC)
/* At probe a command of the previous binding may still be letting go of the card. */
#define SPYRE_PROBE_RESET_TIMEOUT_US	(5000 * USEC_PER_MSEC)
/* Card resets allowed within SPYRE_CARD_RESET_WINDOW; one more wedges the card. */
#define SPYRE_CARD_RESET_BURST	5
#define SPYRE_CARD_RESET_WINDOW	(60 * HZ)
/*
 * Jobs on a hardware ring at once (job credits, spyre_job.c): jobs still waiting in the
 * scheduler can be overtaken by higher priority ones, jobs on the ring cannot.
 */
#define SPYRE_RING_JOBS		4
/* Submission priorities (DRM_SPYRE_PRIORITY_*): one scheduler entity per ring for each. */
#define SPYRE_NUM_PRIORITIES	3
/*
 * Per-file limits of work in flight (submitted, not yet freed); beyond them SUBMIT -EAGAIN.
 * Policy of this driver, reported by QUERY (drm_spyre_device_info.file_max_*); never below
 * the uapi header's DRM_SPYRE_FILE_MAX_* that callers were built with.
 */
#define SPYRE_FILE_MAX_JOBS	256
#define SPYRE_FILE_MAX_CMDS	16384
#define SPYRE_FILE_MAX_LAUNCHES	1024
/* Results JOB_WAIT keeps per file (drm_spyre_device_info.job_history). */
#define SPYRE_JOB_HISTORY	1024

struct spyre_device;
struct spyre_job;

/* One hardware command ring with its scheduler. */
struct spyre_ring {
	struct spyre_device *sdev;
	unsigned int idx;

	struct spyre_hw_cmd *cmds;		/* DMA-coherent command array */
	void *cpls;				/* DMA-coherent completion array */
	dma_addr_t cmds_dma;
	dma_addr_t cpls_dma;
	u32 size;				/* entries, power of two */
	/* Bytes per completion entry: struct spyre_hw_cpl_time with CAP_CPL_TIME (hw 1.7). */
	u32 cpl_size;

	/*
	 * Protects everything below; taken from the interrupt thread, run_job and recovery.
	 * Commands are numbered by a ring sequence number that never restarts (it is also
	 * the command's seqno - 1), so a completion entry left over from before a ring reset
	 * can never be taken for a new one. hw_base is the sequence number of hardware entry
	 * 0 since the last enable.
	 */
	spinlock_t lock;
	bool enabled;				/* HEAD is meaningful */
	u64 hw_base;
	u64 submitted;				/* sequence number of the next command */
	u64 done;				/* commands the device has consumed */
	struct list_head active;		/* jobs on the hardware, oldest first */

	spinlock_t fence_lock;			/* lock of the hardware fences */
	u64 fence_context;
	u64 fence_seqno;

	struct drm_gpu_scheduler sched;
	int irq;
	char irq_name[32];
};

/* Completion entry @e of @ring; a struct spyre_hw_cpl_time when cpl_size says so. */
static inline struct spyre_hw_cpl *spyre_ring_cpl(struct spyre_ring *ring, u32 e)
{
	return ring->cpls + (size_t)e * ring->cpl_size;
}

/*
 * The device coredump of a timeout (spyre_coredump.c): captured by the timeout handler
 * into buf, allocated at probe, and copied for devcoredump by work, outside the handler.
 */
struct spyre_dump {
	char *buf;				/* SPYRE_DUMP_BYTES, kvmalloc */
	size_t len;
	unsigned long busy;			/* SPYRE_DUMP_BUSY: buf holds a capture */
	struct work_struct work;
};

struct spyre_device {
	struct drm_device drm;
	struct pci_dev *pdev;
	void __iomem *regs;
	resource_size_t devmem_bar_start;
	resource_size_t devmem_bar_len;

	/* Configuration read from the device at probe. */
	u32 hw_version;
	u32 caps;
	u32 num_cores;
	u32 num_rings;
	u32 lx_bytes;
	u32 stick_bytes;
	u32 clock_mhz;
	u64 devmem_size;
	spinlock_t read64_lock;			/* one LO/HI register pair at a time */

	struct spyre_ring rings[SPYRE_NUM_RINGS_MAX];
	u32 user_rings;				/* rings 0 .. user_rings - 1 take SUBMITs */
	struct spyre_ring *kernel_ring;		/* BO clears; the last ring if there are two */
	bool rings_allocated;
	bool sched_ready;
	int err_irq;
	bool wc_reserved;			/* BAR2 memtype reserved write-combining */
	int wc_cookie;

	/*
	 * Recovery (spyre_job.c): the timeout handlers of all rings and both halves of a PCI
	 * reset run on one ordered workqueue, so they never overlap. A wedged card fails every
	 * job.
	 */
	struct workqueue_struct *reset_wq;
	struct work_struct reset_prepare_work;
	struct work_struct reset_done_work;
	bool in_pci_reset;			/* between reset_prepare and reset_done */
	bool recovering;			/* a timeout handler is resetting a ring/card */
	bool wedged;
	/*
	 * Bus mastering stopped: the card was not confirmed idle when its jobs were failed, so
	 * freed card memory is quarantined (kept on zombies) until a reset completes.
	 */
	bool dma_stopped;
	unsigned long card_reset_at[SPYRE_CARD_RESET_BURST];
	unsigned int card_reset_next;
	struct spyre_dump dump;
	/*
	 * The timeout handler's task while it recovers: jobs that drm_sched_stop() frees then
	 * go to free_later and are freed by free_work, outside the fence-signalling section
	 * (freeing BOs takes locks that are held while allocating).
	 */
	struct task_struct *recovery_task;
	struct llist_head free_later;
	struct work_struct free_work;
	struct work_struct wedge_work;		/* sends the WEDGED= uevent */

	/* Device memory allocator. */
	struct mutex mm_lock;			/* protects mm and devmem_used */
	struct drm_mm mm;
	u64 devmem_used;
	struct list_head zombies;		/* freed DEVICE BOs the card may still write */
	/* DEVICE BOs exported as dma-bufs (spyre_dmabuf.c), revoked at remove() */
	struct mutex exports_lock;
	struct list_head exports;
	struct list_head card_node;		/* in spyre_cards while bound and registered */
	atomic64_t host_bo_bytes;

	/*
	 * Card MMU (spyre_mmu.c): the context table, and which address space each context id
	 * is bound to (bound on demand, taken back from idle ones, least recently used first).
	 */
	__le64 *mmu_ctx_table;			/* NULL without CAP_MMU */
	dma_addr_t mmu_ctx_table_dma;
	struct mutex mmu_ctx_lock;		/* mmu_ctx_owner, mmu_ctx_lru, every vm->ctx */
	struct spyre_vm *mmu_ctx_owner[SPYRE_MMU_NUM_CTX];
	struct list_head mmu_ctx_lru;		/* bound address spaces, least recent first */
	wait_queue_head_t mmu_ctx_wq;		/* a context id may have become free */
	atomic_t mmu_ctx_gen;			/* bumped at every such chance */
	u64 mmu_ctx_steals;			/* ids taken from idle address spaces */
	atomic64_t mmu_pt_bytes;		/* page tables of all address spaces (debugfs) */
	atomic_t mmu_contexts;			/* address spaces alive */

	/*
	 * Source of the DMA copy that clears new DEVICE BOs: a host page directory whose
	 * entries all name one page table whose entries all name one zero page.
	 */
	void *zero_page;
	__le64 *zero_pt;
	__le64 *zero_dir;
	dma_addr_t zero_page_dma;
	dma_addr_t zero_pt_dma;
	dma_addr_t zero_dir_dma;
	size_t zero_dir_bytes;
	/* Kernel jobs (BO clears) run on kernel_ring through this entity. */
	struct drm_sched_entity kernel_entity;
	struct mutex kernel_lock;		/* orders arm and push on kernel_entity */

	/* Driver counters reported by QUERY_TELEMETRY. */
	atomic64_t jobs_submitted;
	atomic64_t jobs_completed;
	atomic64_t jobs_failed;
	atomic64_t jobs_timed_out;
	atomic64_t jobs_rerun;
	atomic_t ring_resets;
	atomic_t timeouts_deferred;	/* timeouts of jobs not yet over budget on the card */
	atomic_t card_resets;
	/* Recovery timing (debugfs 'recovery'): hang detected -> ring or card usable again. */
	u32 last_recovery_us;
	u32 max_recovery_us;
};

static inline struct spyre_device *to_spyre_dev(struct drm_device *drm)
{
	return container_of(drm, struct spyre_device, drm);
}

/* Result of one job, shared by the job and the history of its file. */
struct spyre_result {
	struct kref ref;
	u64 job_id;
	struct dma_fence *done;			/* scheduler "finished" fence */
	u32 status;				/* DRM_SPYRE_JOB_* */
	u32 hw_status;
	u32 failed_cmd;
	u32 hw_detail;				/* completion detail of the failed command */
	u64 fault_addr;				/* ERR_MMU_FAULT: the faulting virtual address */
	u64 cycles;
	/* Modeled clock (hw 1.7): first command's start, last one's end; 0 on older cards. */
	u64 start_cycle;
	u64 end_cycle;
};

void spyre_result_put(struct spyre_result *res);

/*
 * Engines of a card as fdinfo reports them (drm-engine-<name>): the compute engine runs
 * LAUNCHes, one at a time; the DMA engine everything else (copies, NOPs).
 */
enum spyre_engine {
	SPYRE_ENGINE_COMPUTE,
	SPYRE_ENGINE_DMA,
	SPYRE_ENGINE_COUNT,
};

/* Per open file; jobs keep a reference, so it can outlive the file's close. */
struct spyre_file {
	struct kref ref;
	struct spyre_device *sdev;
	/* Who opened it, for device coredumps and tracepoints. */
	pid_t pid;
	char comm[TASK_COMM_LEN];
	u64 client_id;				/* drm_file.client_id (fdinfo drm-client-id) */
	struct spyre_vm *vm;			/* its device address space; NULL without MMU */
	/* Modeled cycles of the file's completed commands, per engine (fdinfo). */
	atomic64_t engine_cycles[SPYRE_ENGINE_COUNT];
	atomic_t jobs;				/* jobs submitted and not yet freed */
	atomic_t cmds;				/* their commands */
	atomic_t launches;			/* their LAUNCH commands */
	struct drm_sched_entity entities[SPYRE_NUM_RINGS_MAX][SPYRE_NUM_PRIORITIES];
	struct mutex lock;			/* protects next_job_id and history */
	u64 next_job_id;
	struct spyre_result *history[SPYRE_JOB_HISTORY];
};

/* A job: hardware commands prepared at SUBMIT, run by a ring's scheduler (spyre_job.c). */
struct spyre_job {
	struct drm_sched_job base;
	struct spyre_device *sdev;
	struct spyre_ring *ring;
	struct spyre_file *sf;		/* submitter (a reference); NULL for kernel jobs */
	struct spyre_result *res;
	u32 priority;			/* DRM_SPYRE_PRIORITY_* */
	u32 ctx;			/* MMU context of its commands, held (busy) until freed */

	struct spyre_hw_cmd *cmds;
	u32 cmd_count;
	u32 launch_count;
	u32 charged_cmds;		/* counted in sf->cmds */
	u32 charged_launches;		/* counted in sf->launches */
	struct drm_gem_object **bos;
	u32 bo_count;
	struct list_head launches;	/* struct spyre_launch of its LAUNCH commands */

	struct dma_fence *hw_fence;	/* allocated at submit, initialised by the first run_job */
	bool hw_fence_live;
	bool kernel;			/* driver-internal job: not counted in telemetry */
	u64 first;			/* ring sequence number of the first command (last run) */
	/* Timeout checks: since when (jiffies) it waited for the engine, at what ring->done. */
	unsigned long wait_since;
	u64 wait_done;
	struct list_head node;		/* in ring->active while on the hardware */
	struct llist_node free_node;	/* in sdev->free_later */
};

/*
 * Buffer object. DEVICE BOs use only shmem.base; HOST BOs are shmem objects; PEER BOs
 * (a peer card's DEVICE BO imported as a dma-buf) use shmem.base (import_attach) and a host
 * page directory.
 */
struct spyre_bo {
	struct drm_gem_shmem_object shmem;
	u32 flags;				/* DRM_SPYRE_BO_* */
	/* DEVICE BOs */
	struct drm_mm_node node;
	struct dma_fence *clear_fence;		/* the clear of BO_CREATE */
	struct list_head zombie;		/* in sdev->zombies */
	struct spyre_vm *vm;			/* the address space it is mapped in, at va */
	struct drm_mm_node va;
	/* DEVICE BOs exported to peers: in sdev->exports while export_dmabuf exists */
	struct list_head export_node;
	struct dma_buf *export_dmabuf;
	/* Exported DEVICE BOs and PEER BOs: the exporter went away (under the dma-buf's resv) */
	bool p2p_revoked;
	/* PEER BOs: the mapped attachment (NULL once revoked) and the jobs that use the BO */
	struct sg_table *peer_sgt;
	atomic_t peer_busy;
	wait_queue_head_t peer_idle;
	/* HOST BOs: the mm their pinned pages are accounted to (RLIMIT_MEMLOCK) */
	struct mm_struct *pin_mm;
	/* HOST and PEER BOs: two-level page directory (spyre_hw.h) */
	u64 *pagedir;
	dma_addr_t pagedir_dma;
	size_t pagedir_bytes;
	u64 **tables;
	dma_addr_t *tables_dma;
	unsigned int num_tables;
};

/* One LAUNCH command of a job (spyre_launch.c). */
struct spyre_launch {
	struct list_head node;			/* in the job's list of launches */
	u32 cmd_idx;				/* index of the LAUNCH in its job */

	/* Descriptor, windows and (if a result is wanted) the hardware result. */
	void *buf;				/* DMA-coherent */
	dma_addr_t buf_dma;
	size_t buf_size;
	struct spyre_hw_launch_result *hw_res;	/* inside buf, or NULL */

	/* References on the program BO, the data BOs and the result BO. */
	struct drm_gem_object **bos;
	u32 bo_count;

	/* Result destination; res_len == 0 means none. */
	struct drm_spyre_launch_result *staging;
	u32 res_len;				/* bytes written: min(result_size, sizeof) */
	struct spyre_bo *res_bo;		/* HOST BO: its pinned pages; DEVICE BO: res_io */
	u64 res_offset;
	void __iomem *res_io;			/* WC mapping of the DEVICE BO's result pages */
	size_t res_io_len;
	unsigned int res_io_skip;		/* offset of the result in res_io */
};

static inline struct spyre_bo *to_spyre_bo(struct drm_gem_object *obj)
{
	return container_of(obj, struct spyre_bo, shmem.base);
}

/* The device address of a DEVICE BO as its file and its commands see it. */
static inline u64 spyre_bo_dev_addr(const struct spyre_bo *bo)
{
	return bo->vm ? bo->va.start : bo->node.start;
}

static inline u32 spyre_read(struct spyre_device *sdev, u32 reg)
{
	return readl(sdev->regs + reg);
}

static inline void spyre_write(struct spyre_device *sdev, u32 reg, u32 val)
{
	writel(val, sdev->regs + reg);
}

/*
 * A 64-bit register as LO then HI. Reading a telemetry LO latches its HI half in the card's
 * one latch, so two readers (sysfs, hwmon, QUERY, a coredump) must not interleave their pairs:
 * one could get another counter's HI half.
 */
static inline u64 spyre_read64(struct spyre_device *sdev, u32 lo)
{
	unsigned long flags;
	u64 v;

	spin_lock_irqsave(&sdev->read64_lock, flags);
	v = spyre_read(sdev, lo);
	v |= (u64)spyre_read(sdev, lo + 4) << 32;
	spin_unlock_irqrestore(&sdev->read64_lock, flags);
	return v;
}

/* spyre_hw.c */
int spyre_hw_init(struct spyre_device *sdev);
int spyre_hw_reset(struct spyre_device *sdev);
int spyre_hw_reset_timeout(struct spyre_device *sdev, u64 timeout_us);
int spyre_hw_rings_alloc(struct spyre_device *sdev);
void spyre_hw_rings_free(struct spyre_device *sdev);
int spyre_hw_ring_enable(struct spyre_ring *ring);
void spyre_hw_ring_disable(struct spyre_ring *ring);
bool spyre_hw_ring_abort(struct spyre_ring *ring);
void spyre_hw_enable_interrupts(struct spyre_device *sdev);
void spyre_hw_disable_interrupts(struct spyre_device *sdev);
void spyre_hw_stop_dma(struct spyre_device *sdev);
void spyre_hw_start_dma(struct spyre_device *sdev);

/* spyre_irq.c */
int spyre_irq_init(struct spyre_device *sdev);
void spyre_irq_fini(struct spyre_device *sdev);

/* spyre_gem.c */
struct drm_gem_object *spyre_gem_create_object(struct drm_device *drm, size_t size);
int spyre_gem_init(struct spyre_device *sdev);
void spyre_gem_fini(struct spyre_device *sdev);
void spyre_gem_unmap_all(struct spyre_device *sdev);
int spyre_gem_hw_init(struct spyre_device *sdev);
void spyre_gem_hw_fini(struct spyre_device *sdev);
int spyre_ioctl_bo_create(struct drm_device *drm, void *data, struct drm_file *file);
int spyre_ioctl_bo_info(struct drm_device *drm, void *data, struct drm_file *file);
u64 spyre_gem_largest_free(struct spyre_device *sdev);
void spyre_gem_reap(struct spyre_device *sdev, bool all);
int spyre_bo_build_pagedir(struct spyre_device *sdev, struct spyre_bo *bo, struct sg_table *sgt);
void spyre_bo_free_pagedir(struct spyre_device *sdev, struct spyre_bo *bo);

/* The DMA engine reaches a HOST or PEER BO through its host page directory. */
static inline bool spyre_bo_is_host_side(const struct spyre_bo *bo)
{
	return bo->flags == DRM_SPYRE_BO_HOST || bo->flags == DRM_SPYRE_BO_PEER;
}

/*
 * A DEVICE BO of this card imported into another file (PRIME) is mapped only in its
 * creator's address space: with the card MMU other files' commands cannot name it.
 */
static inline bool spyre_bo_in_file_vm(const struct spyre_bo *bo, struct drm_file *file)
{
	struct spyre_file *sf = file->driver_priv;

	return bo->flags != DRM_SPYRE_BO_DEVICE || bo->vm == sf->vm;
}

/* spyre_dmabuf.c */
extern struct mutex spyre_cards_lock;
extern struct list_head spyre_cards;
void spyre_dmabuf_init(struct spyre_device *sdev);
struct dma_buf *spyre_dmabuf_export(struct drm_gem_object *obj, int flags);
void spyre_dmabuf_revoke_all(struct spyre_device *sdev);
struct drm_gem_object *spyre_gem_prime_import(struct drm_device *drm, struct dma_buf *dmabuf);
int spyre_peer_job_hold(struct spyre_bo *bo);
void spyre_peer_job_release(struct spyre_bo *bo);

/* spyre_job.c */
int spyre_sched_init(struct spyre_device *sdev);
void spyre_sched_fini(struct spyre_device *sdev);
int spyre_job_file_open(struct spyre_file *sf);
void spyre_job_file_close(struct spyre_file *sf);
void spyre_ring_process(struct spyre_ring *ring);
void spyre_sched_teardown(struct spyre_device *sdev);
void spyre_file_put(struct spyre_file *sf);
void spyre_reset_prepare(struct spyre_device *sdev);
void spyre_reset_done(struct spyre_device *sdev);
int spyre_job_clear_bo(struct spyre_device *sdev, struct spyre_bo *bo);

/* What the card read at a context's virtual address (spyre_job_probe_va(), debugfs). */
struct spyre_va_probe {
	u32 hw_status;				/* SPYRE_STATUS_*: OK, ERR_MMU_FAULT, ... */
	u64 fault_addr;				/* ERR_MMU_FAULT */
	u8 data[8];				/* OK: the bytes at the address */
};

int spyre_job_probe_va(struct spyre_device *sdev, u32 ctx, u64 va, struct spyre_va_probe *p);
int spyre_ioctl_submit(struct drm_device *drm, void *data, struct drm_file *file);
int spyre_cmd_copy_ext(void *dst, size_t ksize, size_t v1_size, const struct drm_spyre_cmd *uc);
int spyre_ioctl_job_wait(struct drm_device *drm, void *data, struct drm_file *file);

/* spyre_launch.c */
int spyre_launch_prepare(struct spyre_device *sdev, struct drm_file *file,
			 const struct drm_spyre_cmd *uc, u32 cmd_idx, struct spyre_hw_cmd *hc,
			 struct spyre_launch **out);
void spyre_launch_complete(struct spyre_launch *l, const struct spyre_hw_cpl *cpl);
void spyre_launch_free(struct spyre_device *sdev, struct spyre_launch *l);

/* spyre_coredump.c */
int spyre_coredump_init(struct spyre_device *sdev);
bool spyre_coredump_capture(struct spyre_device *sdev, struct spyre_job *guilty);
void spyre_coredump_emit(struct spyre_device *sdev, const char *recovery);

/* spyre_debugfs.c */
#ifdef CONFIG_DEBUG_FS
void spyre_debugfs_init(struct spyre_device *sdev);
#else
static inline void spyre_debugfs_init(struct spyre_device *sdev) { }
#endif

/* spyre_query.c */
int spyre_ioctl_query(struct drm_device *drm, void *data, struct drm_file *file);
u32 spyre_peer_distance(struct spyre_device *a, struct spyre_device *b, bool *shared);
u64 spyre_devmem_used(struct spyre_device *sdev);

/* spyre_sysfs.c */
extern const struct attribute_group *spyre_dev_groups[];
void spyre_hwmon_init(struct spyre_device *sdev);
void spyre_show_fdinfo(struct drm_printer *p, struct drm_file *file);

#endif /* __SPYRE_DRV_H__ */
