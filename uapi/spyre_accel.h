/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * Userspace interface of the spyre DRM accel driver (/dev/accel/accelN).
 * Documented in Documentation/uapi.md. Rules that hold for every ioctl:
 *  - flags, pad and reserved fields must be zero, otherwise -EINVAL;
 *  - arrays are passed as a __u64 user pointer, an element count and an element size
 *    (the size lets the struct grow: a smaller, older size is accepted and zero-extended);
 *  - timeouts are absolute CLOCK_MONOTONIC nanoseconds.
 */
#ifndef _UAPI_SPYRE_ACCEL_H_
#define _UAPI_SPYRE_ACCEL_H_

#include "drm.h"

#if defined(__cplusplus)
extern "C" {
#endif

#define DRM_SPYRE_QUERY			0x00
#define DRM_SPYRE_BO_CREATE		0x01
#define DRM_SPYRE_BO_INFO		0x02
#define DRM_SPYRE_SUBMIT		0x03
#define DRM_SPYRE_JOB_WAIT		0x04

#define DRM_IOCTL_SPYRE_QUERY \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_SPYRE_QUERY, struct drm_spyre_query)
#define DRM_IOCTL_SPYRE_BO_CREATE \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_SPYRE_BO_CREATE, struct drm_spyre_bo_create)
#define DRM_IOCTL_SPYRE_BO_INFO \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_SPYRE_BO_INFO, struct drm_spyre_bo_info)
#define DRM_IOCTL_SPYRE_SUBMIT \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_SPYRE_SUBMIT, struct drm_spyre_submit)
#define DRM_IOCTL_SPYRE_JOB_WAIT \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_SPYRE_JOB_WAIT, struct drm_spyre_job_wait)

/* ---- QUERY ---- */

/* What to query (drm_spyre_query.param). */
#define DRM_SPYRE_QUERY_DEVICE_INFO	0	/* struct drm_spyre_device_info */
#define DRM_SPYRE_QUERY_MEM_INFO	1	/* struct drm_spyre_mem_info */
#define DRM_SPYRE_QUERY_TELEMETRY	2	/* struct drm_spyre_telemetry */

/*
 * Sized query. With size == 0 the kernel only stores the full size of the answer in size.
 * Otherwise it copies min(size, full size) bytes to data and stores the number it copied.
 */
struct drm_spyre_query {
	__u32 param;
	__u32 size;
	__u64 data;		/* user pointer */
	__u32 flags;		/* must be zero */
	__u32 pad;
};

/* Capability bits of drm_spyre_device_info.caps. */
#define DRM_SPYRE_CAP_DMA_COPY		(1ull << 0)	/* DRM_SPYRE_CMD_COPY */
#define DRM_SPYRE_CAP_HOST_BO		(1ull << 1)	/* DRM_SPYRE_BO_HOST */
#define DRM_SPYRE_CAP_TIMELINE		(1ull << 2)	/* timeline syncobjs in SUBMIT */
#define DRM_SPYRE_CAP_TELEMETRY		(1ull << 3)	/* DRM_SPYRE_QUERY_TELEMETRY */

struct drm_spyre_device_info {
	__u16 pci_vendor;
	__u16 pci_device;
	__u16 pci_revision;
	__u16 pad;
	__u32 hw_version;	/* major << 16 | minor */
	__u32 num_cores;
	__u32 num_rings;
	__u32 lx_bytes;		/* scratchpad per core */
	__u32 stick_bytes;
	__u32 clock_mhz;
	__u64 devmem_bytes;	/* total device memory */
	__u64 caps;		/* DRM_SPYRE_CAP_* */
	__u64 max_bo_bytes;	/* largest single BO */
};

struct drm_spyre_mem_info {
	__u64 devmem_total;
	__u64 devmem_used;	/* bytes in device BOs of all clients */
	__u64 devmem_largest_free;
	__u64 host_bo_bytes;	/* bytes in host BOs of all clients */
};

struct drm_spyre_telemetry {
	__u64 cmds_completed;
	__u64 h2d_bytes;
	__u64 d2h_bytes;
	__u64 d2d_bytes;
	__u64 jobs_submitted;
	__u64 jobs_completed;
	__u64 jobs_failed;
	__u32 cmd_errors;
	__u32 resets;
	__u32 temp_mc;		/* milli-Celsius */
	__u32 power_mw;
	__u32 power_cap_mw;
	__u32 pad;
};

/* ---- Buffer objects ---- */

/* BO placement (drm_spyre_bo_create.flags). Exactly one of DEVICE or HOST. */
#define DRM_SPYRE_BO_DEVICE		(1u << 0)	/* in card memory, CPU-mapped through BAR2 */
#define DRM_SPYRE_BO_HOST		(1u << 1)	/* in system memory, reachable by the DMA engine */

struct drm_spyre_bo_create {
	__u64 size;		/* in: bytes, > 0; rounded up to the page size */
	__u32 flags;		/* in: DRM_SPYRE_BO_* */
	__u32 handle;		/* out: GEM handle */
};

struct drm_spyre_bo_info {
	__u32 handle;		/* in */
	__u32 flags;		/* out: DRM_SPYRE_BO_* of the BO */
	__u64 size;		/* out: bytes */
	__u64 dev_addr;		/* out: device address (DEVICE BOs), 0 for HOST BOs */
	__u64 mmap_offset;	/* out: offset to mmap() on the accel fd */
};

/* ---- Submission ---- */

#define DRM_SPYRE_CMD_NOP		0
#define DRM_SPYRE_CMD_COPY		1	/* copy size bytes between two BOs */

/* One command of a job. BOs are named by handle; the kernel checks every range. */
struct drm_spyre_cmd {
	__u32 op;		/* DRM_SPYRE_CMD_* */
	__u32 flags;		/* must be zero */
	__u32 src_handle;	/* COPY: source BO */
	__u32 dst_handle;	/* COPY: destination BO */
	__u64 src_offset;
	__u64 dst_offset;
	__u64 size;		/* COPY: bytes, > 0 */
	__u64 reserved[3];	/* must be zero */
};

/* A syncobj to wait on (point 0 for a binary syncobj). */
struct drm_spyre_sync {
	__u32 handle;
	__u32 flags;		/* must be zero */
	__u64 point;
};

/*
 * Queue a job of cmd_count commands on ring `ring`. The job starts after every in-sync has
 * signalled; its completion signals out_sync (at out_point for a timeline syncobj) and is
 * also reported by DRM_IOCTL_SPYRE_JOB_WAIT for job_id.
 */
struct drm_spyre_submit {
	__u64 cmds;		/* user pointer to cmd_count drm_spyre_cmd */
	__u32 cmd_count;	/* 1 .. DRM_SPYRE_MAX_CMDS */
	__u32 cmd_size;		/* sizeof(struct drm_spyre_cmd) */
	__u64 in_syncs;		/* user pointer to in_sync_count drm_spyre_sync */
	__u32 in_sync_count;	/* 0 .. DRM_SPYRE_MAX_SYNCS */
	__u32 sync_size;	/* sizeof(struct drm_spyre_sync) */
	__u32 out_sync;		/* syncobj handle, 0 for none */
	__u32 ring;		/* < drm_spyre_device_info.num_rings */
	__u64 out_point;	/* timeline point, 0 for a binary syncobj */
	__u32 flags;		/* must be zero */
	__u32 pad;
	__u64 job_id;		/* out: per-file job number, starts at 1 */
};

#define DRM_SPYRE_MAX_CMDS		4096
#define DRM_SPYRE_MAX_SYNCS		64

/* Job outcome (drm_spyre_job_wait.status). */
#define DRM_SPYRE_JOB_OK		0
#define DRM_SPYRE_JOB_DEVICE_ERROR	1	/* a command failed; hw_status says why */
#define DRM_SPYRE_JOB_TIMEOUT		2	/* the job hung and was aborted */
#define DRM_SPYRE_JOB_ABORTED		3	/* device reset or removed before it ran */

/*
 * Wait until job_id of this file has finished or timeout_ns (absolute CLOCK_MONOTONIC) has
 * passed (-ETIME). Results of the last DRM_SPYRE_JOB_HISTORY jobs are kept; older or unknown
 * job ids give -ENOENT.
 */
struct drm_spyre_job_wait {
	__u64 job_id;		/* in */
	__s64 timeout_ns;	/* in */
	__u32 flags;		/* must be zero */
	__u32 status;		/* out: DRM_SPYRE_JOB_* */
	__u32 hw_status;	/* out: device status code of the failing command (hardware.md) */
	__u32 failed_cmd;	/* out: index of the failing command in the job */
	__u64 cycles;		/* out: modeled device cycles of the job */
};

#define DRM_SPYRE_JOB_HISTORY		1024

#if defined(__cplusplus)
}
#endif

#endif /* _UAPI_SPYRE_ACCEL_H_ */
