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
#define DRM_SPYRE_QUERY_TOPOLOGY	3	/* struct drm_spyre_topology, then its peers */

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
#define DRM_SPYRE_CAP_LAUNCH		(1ull << 4)	/* DRM_SPYRE_CMD_LAUNCH */
#define DRM_SPYRE_CAP_PRIORITY		(1ull << 5)	/* drm_spyre_submit.priority */
#define DRM_SPYRE_CAP_COPY_2D		(1ull << 6)	/* DRM_SPYRE_CMD_COPY_2D */
/* Device addresses (BO_INFO dev_addr) are the file's own virtual addresses (card MMU). */
#define DRM_SPYRE_CAP_VM		(1ull << 7)
/* DEVICE BOs export as dma-bufs that peer spyre cards import as DRM_SPYRE_BO_PEER (hw 1.6). */
#define DRM_SPYRE_CAP_P2P		(1ull << 8)
/* JOB_WAIT reports the job's start_cycle and end_cycle on the card's modeled clock (hw 1.7). */
#define DRM_SPYRE_CAP_JOB_CLOCK		(1ull << 9)
/* DRM_SPYRE_CMD_SEM_SIGNAL and DRM_SPYRE_CMD_SEM_WAIT (hw 1.8): device-side dependencies. */
#define DRM_SPYRE_CAP_SEMAPHORE		(1ull << 10)

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
	/*
	 * This driver's policy limits (0 from a driver older than these fields: then the
	 * DRM_SPYRE_FILE_MAX_* and DRM_SPYRE_JOB_HISTORY values below apply).
	 */
	__u32 file_max_jobs;	/* jobs one file may have in flight */
	__u32 file_max_cmds;	/* commands one file may have in flight */
	__u32 file_max_launches; /* LAUNCHes one file may have in flight, and in one SUBMIT */
	__u32 job_history;	/* results JOB_WAIT keeps per file */
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
	/* Compute engine, since power-on; zero without DRM_SPYRE_CAP_LAUNCH. */
	__u64 launches;		/* LAUNCHes the engine ran (successful or not) */
	__u64 launch_errors;	/* LAUNCHes that stopped with a program error */
	__u64 engine_cycles;	/* sum of the launches' modeled cycles */
	__u64 engine_instructions;
	__u64 engine_macs;
	__u64 engine_ddr_read_bytes;
	__u64 engine_ddr_write_bytes;
	__u64 engine_ring_bytes;
	/* Driver recovery, since load (Documentation/driver.md "Failure handling"). */
	__u64 jobs_timed_out;	/* jobs that ended with DRM_SPYRE_JOB_TIMEOUT */
	__u64 jobs_rerun;	/* innocent jobs written to a ring again after a reset */
	__u32 ring_resets;	/* hung rings stopped with a ring ABORT */
	__u32 card_resets;	/* whole-card resets that brought the card back */
	__u32 state;		/* DRM_SPYRE_STATE_* */
	__u32 pad2;
	/*
	 * Peer-to-peer (DRM_SPYRE_CAP_P2P, hw 1.6), since power-on: bytes this card's copies read
	 * from / wrote into peer cards' memory (a subset of h2d_bytes / d2h_bytes).
	 */
	__u64 p2p_rd_bytes;
	__u64 p2p_wr_bytes;
};

/*
 * DRM_SPYRE_QUERY_TOPOLOGY: this card's PCI address and link, then one drm_spyre_peer per other
 * card of the driver (num_peers of them, in accel minor order). The answer's full size is
 * sizeof(struct drm_spyre_topology) + num_peers * sizeof(struct drm_spyre_peer); cards come and
 * go, so a caller sizes its buffer with a size-0 query and reads num_peers from the answer.
 */
struct drm_spyre_topology {
	__u32 pci_domain;
	__u32 pci_bus;
	__u32 pci_devfn;
	__u32 link_speed_mts;	/* current PCIe link speed in MT/s (2500 .. 64000), 0 if unknown */
	__u32 link_width;	/* current PCIe link width in lanes, 0 if unknown */
	__u32 num_peers;
	__u64 reserved;		/* zero */
};

struct drm_spyre_peer {
	__u32 accel_minor;	/* /dev/accel/accelN of the peer */
	__u32 flags;		/* DRM_SPYRE_PEER_* */
	/*
	 * PCI bridges between the two cards: those on the way up from this card to the nearest
	 * upstream bridge the two share, that one, and those down to the peer. With no shared
	 * bridge (each card below its own root port) the path crosses the root complex, counted
	 * as one more.
	 */
	__u32 distance;
	__u32 pad;
};

/* The peer's device memory can be a copy's side on this card (both have DRM_SPYRE_CAP_P2P). */
#define DRM_SPYRE_PEER_P2P		(1u << 0)
/* The cards share an upstream bridge: peer traffic need not cross the root complex. */
#define DRM_SPYRE_PEER_SHARED_BRIDGE	(1u << 1)

/* drm_spyre_telemetry.state */
#define DRM_SPYRE_STATE_OK		0
#define DRM_SPYRE_STATE_WEDGED		1	/* every job fails; unbind, PCI reset, bind */

/* ---- Buffer objects ---- */

/* BO placement (drm_spyre_bo_create.flags). Exactly one of DEVICE or HOST. */
#define DRM_SPYRE_BO_DEVICE		(1u << 0)	/* in card memory, CPU-mapped through BAR2 */
#define DRM_SPYRE_BO_HOST		(1u << 1)	/* in system memory, reachable by the DMA engine */
/*
 * BO_INFO only: a peer card's DEVICE BO imported through PRIME (DRM_SPYRE_CAP_P2P); the host
 * side of COPY/COPY_2D, never a LAUNCH BO, not mmap()able through this card.
 */
#define DRM_SPYRE_BO_PEER		(1u << 2)

struct drm_spyre_bo_create {
	__u64 size;		/* in: bytes, > 0; rounded up to the page size */
	__u32 flags;		/* in: DRM_SPYRE_BO_* */
	__u32 handle;		/* out: GEM handle */
};

/*
 * The struct grew by in_flags and pad (an older, 32-byte caller's are zero: DRM fills what
 * it did not pass with zeroes); both must be zero, so later versions can give them meaning.
 */
struct drm_spyre_bo_info {
	__u32 handle;		/* in */
	__u32 flags;		/* out: DRM_SPYRE_BO_* of the BO */
	__u64 size;		/* out: bytes */
	__u64 dev_addr;		/* out: device address (DEVICE BOs), 0 for HOST BOs */
	__u64 mmap_offset;	/* out: offset to mmap() on the accel fd */
	__u32 in_flags;		/* in: must be zero (none defined) */
	__u32 pad;		/* must be zero */
};

/* ---- Submission ---- */

#define DRM_SPYRE_CMD_NOP		0
#define DRM_SPYRE_CMD_COPY		1	/* copy size bytes between two BOs */
#define DRM_SPYRE_CMD_LAUNCH		2	/* run a program on the cores (struct drm_spyre_launch) */
#define DRM_SPYRE_CMD_COPY_2D		3	/* copy rows with pitches (struct drm_spyre_copy_2d) */
#define DRM_SPYRE_CMD_SEM_SIGNAL	4	/* write a semaphore in a BO (struct drm_spyre_sem) */
#define DRM_SPYRE_CMD_SEM_WAIT		5	/* wait for a semaphore in a BO (struct drm_spyre_sem) */

/*
 * One command of a job. BOs are named by handle; the kernel checks every range.
 * ext points to the op's extension struct (LAUNCH: struct drm_spyre_launch; COPY_2D: struct
 * drm_spyre_copy_2d; SEM_*: struct drm_spyre_sem) of ext_size bytes; both must be 0 for NOP
 * and COPY. ext_size is at least the struct's first published (v1) size (LAUNCH 168,
 * COPY_2D 32, SEM 16), at most DRM_SPYRE_EXT_SIZE_MAX and a multiple of 8; bytes beyond the
 * kernel's struct must be zero.
 */
#define DRM_SPYRE_EXT_SIZE_MAX		4096

struct drm_spyre_cmd {
	__u32 op;		/* DRM_SPYRE_CMD_* */
	__u32 flags;		/* must be zero */
	__u32 src_handle;	/* COPY: source BO; LAUNCH: DEVICE BO holding the program */
	__u32 dst_handle;	/* COPY: destination BO; LAUNCH: 0 */
	__u64 src_offset;	/* LAUNCH: offset of the program image in src_handle */
	__u64 dst_offset;	/* LAUNCH: 0 */
	__u64 size;		/* COPY: bytes, > 0; LAUNCH: program image bytes */
	__u64 ext;		/* user pointer to the extension struct, 0 for none */
	__u32 ext_size;		/* sizeof the extension struct, 0 for none */
	__u32 pad;		/* must be zero */
	__u64 reserved;		/* must be zero */
};

/* ---- COPY_2D ---- */

/*
 * Extension of DRM_SPYRE_CMD_COPY_2D (DRM_SPYRE_CAP_COPY_2D): height rows of cmd.size bytes,
 * row r read at src_offset + r * src_pitch of src_handle and written at dst_offset + r *
 * dst_pitch of dst_handle, in row order. size, height and the pitches are at most U32_MAX;
 * size and height are not 0; every row lies inside its BO. A pitch below size is allowed.
 * size * height (the bytes moved) is at most the card's device memory size.
 */
struct drm_spyre_copy_2d {
	__u64 height;
	__u64 src_pitch;
	__u64 dst_pitch;
	__u64 reserved;		/* must be zero */
};

/* ---- Semaphores (DRM_SPYRE_CAP_SEMAPHORE) ---- */

/*
 * Extension of DRM_SPYRE_CMD_SEM_SIGNAL and DRM_SPYRE_CMD_SEM_WAIT. A semaphore is 16 bytes at
 * a 16-byte aligned offset of a DEVICE, HOST or PEER BO: a __u64 value, then a __u64 the card
 * writes beside it (the modeled cycle of the signal, Documentation/hardware.md section 6).
 * SEM_SIGNAL names it by dst_handle and dst_offset and stores value; SEM_WAIT names it by
 * src_handle and src_offset and holds the rest of its ring's work until the stored value is
 * at least value (unsigned), for at most timeout_us microseconds: then the job fails with
 * DRM_SPYRE_JOB_DEVICE_ERROR and hw_status 10 (ERR_TIMEOUT). The other handle, offset and
 * size of the command must be 0. A waiting command holds its ring (no other job of the ring
 * runs meanwhile) but no engine; the wait's bound keeps it far below the job timeout.
 */
#define DRM_SPYRE_SEM_SIZE		16
#define DRM_SPYRE_SEM_WAIT_MAX_US	10000000u	/* 10 s */

struct drm_spyre_sem {
	__u64 value;
	__u32 timeout_us;	/* SEM_WAIT: <= DRM_SPYRE_SEM_WAIT_MAX_US; SEM_SIGNAL: 0 */
	__u32 flags;		/* must be zero */
};

/* ---- LAUNCH ---- */

#define DRM_SPYRE_LAUNCH_MAX_ARGS	16
#define DRM_SPYRE_LAUNCH_MAX_BOS	255	/* data BOs besides the program BO */
#define DRM_SPYRE_LAUNCH_MAX_PROG_SIZE	(32u + 16u * 1048576u)	/* header + 2^20 instructions */
#define DRM_SPYRE_LAUNCH_MAX_CORES	64
#define DRM_SPYRE_LAUNCH_MSG_LEN	128

/* Units of drm_spyre_launch_core.busy[] (Documentation/isa.md). */
#define DRM_SPYRE_UNIT_SCALAR		0
#define DRM_SPYRE_UNIT_DMA		1
#define DRM_SPYRE_UNIT_MATRIX		2
#define DRM_SPYRE_UNIT_VECTOR		3
#define DRM_SPYRE_UNIT_RING		4
#define DRM_SPYRE_LAUNCH_UNITS		5

/*
 * Extension of DRM_SPYRE_CMD_LAUNCH. The program may access only the program BO and the
 * bo_count DEVICE BOs of bo_handles (the card enforces it); every other device memory access
 * stops the job with a program error.
 */
struct drm_spyre_launch {
	__u32 num_cores;	/* cores that run the program; 0 = all */
	__u32 num_args;		/* <= DRM_SPYRE_LAUNCH_MAX_ARGS */
	__u64 args[DRM_SPYRE_LAUNCH_MAX_ARGS];	/* read by the program (ARG); rest must be 0 */
	__u64 bo_handles;	/* user pointer to bo_count __u32 DEVICE BO handles */
	__u32 bo_count;		/* <= DRM_SPYRE_LAUNCH_MAX_BOS */
	__u32 result_handle;	/* BO that receives a struct drm_spyre_launch_result, 0 = none */
	__u64 result_offset;	/* 8-byte aligned offset in result_handle */
	__u32 result_size;	/* bytes at result_offset; 0 if and only if result_handle is 0 */
	__u32 flags;		/* must be zero */
};

struct drm_spyre_launch_core {
	__u64 busy[DRM_SPYRE_LAUNCH_UNITS];	/* cycles each unit was busy */
	__u64 end_cycle;	/* cycle the core finished */
};

/*
 * Outcome of a LAUNCH, written by the kernel into the result BO (the first
 * min(result_size, sizeof) bytes) before the job's fence signals.
 */
struct drm_spyre_launch_result {
	__u32 error;		/* engine error code, 0 = success (isa.md "Errors") */
	__s32 core;		/* failing core, -1 if not core specific */
	__u64 pc;		/* failing instruction index */
	char message[DRM_SPYRE_LAUNCH_MSG_LEN];	/* NUL-terminated reason, "" on success */
	__u64 total_cycles;	/* modeled cycles of the launch */
	__u64 ddr_read_bytes;
	__u64 ddr_write_bytes;
	__u64 ring_bytes;
	__u64 instructions;	/* all cores */
	__u64 macs;		/* multiply-accumulates, all cores */
	__u32 num_cores;	/* valid entries of cores[] */
	__u32 mac_peak;		/* peak MACs/cycle of a core for the types used; 0 = no MACs */
	struct drm_spyre_launch_core cores[DRM_SPYRE_LAUNCH_MAX_CORES];
};

/* A syncobj to wait on (point 0 for a binary syncobj). */
struct drm_spyre_sync {
	__u32 handle;
	__u32 flags;		/* must be zero */
	__u64 point;
};

/*
 * Scheduling priority of a job (drm_spyre_submit.priority). Among the jobs waiting for a
 * ring, those of a higher priority go to the ring first; HIGH needs CAP_SYS_NICE.
 */
#define DRM_SPYRE_PRIORITY_NORMAL	0
#define DRM_SPYRE_PRIORITY_LOW		1
#define DRM_SPYRE_PRIORITY_HIGH		2

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
	__u32 priority;		/* DRM_SPYRE_PRIORITY_* (was pad: 0 is NORMAL) */
	__u64 job_id;		/* out: per-file job number, starts at 1 */
};

#define DRM_SPYRE_MAX_CMDS		4096
#define DRM_SPYRE_MAX_SYNCS		64

/*
 * Work one open file may have in flight (submitted and not yet finished and freed);
 * a SUBMIT beyond any of these fails with -EAGAIN. These are driver policy, not ABI: the
 * values a driver enforces are in drm_spyre_device_info.file_max_*; the macros stay, with
 * the values every driver so far has enforced, for callers built against them.
 */
#define DRM_SPYRE_FILE_MAX_JOBS		256
#define DRM_SPYRE_FILE_MAX_CMDS		16384
#define DRM_SPYRE_FILE_MAX_LAUNCHES	1024

/* Job outcome (drm_spyre_job_wait.status). */
#define DRM_SPYRE_JOB_OK		0
#define DRM_SPYRE_JOB_DEVICE_ERROR	1	/* a command failed; hw_status (hw_detail) says why */
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
	__u32 hw_detail;	/* out: hw_status ERR_PROGRAM: engine error code (isa.md);
				 * ERR_MMU_FAULT: the fault's FAULT_INFO (hardware.md section 15) */
	__u32 pad;		/* must be zero */
	__u64 fault_addr;	/* out: hw_status ERR_MMU_FAULT: faulting device virtual address */
	/*
	 * out (appended for hw 1.7): the job on the card's modeled clock, cycles at
	 * drm_spyre_device_info.clock_mhz: its first command's start and its last one's end
	 * (hardware.md section 11, "Modeled clock"); jobs of other rings may overlap it, and
	 * end_cycle - start_cycle >= cycles. 0, 0 without DRM_SPYRE_CAP_JOB_CLOCK (a card
	 * before hw 1.7); an older kernel leaves them as the caller set them (zero them).
	 */
	__u64 start_cycle;
	__u64 end_cycle;
};

/* Driver policy too: the driver's value is drm_spyre_device_info.job_history. */
#define DRM_SPYRE_JOB_HISTORY		1024

#if defined(__cplusplus)
}
#endif

#endif /* _UAPI_SPYRE_ACCEL_H_ */
