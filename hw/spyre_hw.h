/* SPDX-License-Identifier: MIT */
/*
 * Spyre card hardware interface: PCI identity, BAR0 registers, command ring and completion
 * formats. This header is the single encoding of Documentation/hardware.md; the QEMU device
 * model and the kernel driver both include it, so it uses only fixed-size C types and macros.
 */
#ifndef SPYRE_HW_H
#define SPYRE_HW_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
#endif

/* PCI identity. Deliberately not IBM's 1014:06a7, so real Spyre tools never bind to the model. */
#define SPYRE_PCI_VENDOR_ID		0x1234
#define SPYRE_PCI_DEVICE_ID		0x5350
#define SPYRE_PCI_REVISION		0x02
#define SPYRE_PCI_CLASS			0x1200	/* processing accelerator */

/* BARs */
#define SPYRE_BAR_REGS			0	/* registers, SPYRE_REGS_SIZE bytes */
#define SPYRE_BAR_DEVMEM		2	/* device memory, 64-bit prefetchable */
#define SPYRE_BAR_MSIX			4	/* MSI-X table and PBA */
#define SPYRE_REGS_SIZE			0x10000

/* Hardware interface version (SPYRE_REG_VERSION). */
#define SPYRE_HW_VERSION_MAJOR		1
#define SPYRE_HW_VERSION_MINOR		8
#define SPYRE_HW_VERSION(maj, min)	(((maj) << 16) | (min))

/* Identification value of SPYRE_REG_ID: "SPYR". */
#define SPYRE_ID_MAGIC			0x53505952u

/* ---- BAR0 global registers (all 32-bit, little endian) ---- */
#define SPYRE_REG_ID			0x0000	/* RO: SPYRE_ID_MAGIC */
#define SPYRE_REG_VERSION		0x0004	/* RO: SPYRE_HW_VERSION(major, minor) */
#define SPYRE_REG_CAPS			0x0008	/* RO: SPYRE_CAP_* */
#define SPYRE_REG_NUM_CORES		0x000c	/* RO: compute cores */
#define SPYRE_REG_DEVMEM_SIZE_LO	0x0010	/* RO: device memory bytes, low 32 bits */
#define SPYRE_REG_DEVMEM_SIZE_HI	0x0014	/* RO: device memory bytes, high 32 bits */
#define SPYRE_REG_NUM_RINGS		0x0018	/* RO: command rings */
#define SPYRE_REG_LX_SIZE		0x001c	/* RO: scratchpad bytes per core */
#define SPYRE_REG_STATUS		0x0020	/* RO: SPYRE_STATUS_* */
#define SPYRE_REG_RESET			0x0024	/* WO: write SPYRE_RESET_MAGIC to reset */
#define SPYRE_REG_CLOCK_MHZ		0x0028	/* RO: core clock */
#define SPYRE_REG_SCRATCH		0x002c	/* RW: free for the driver; cleared by reset */
#define SPYRE_REG_INTR_STATUS		0x0030	/* RW1C: SPYRE_INTR_* pending causes */
#define SPYRE_REG_INTR_MASK		0x0034	/* RW: 1 = cause enabled */
#define SPYRE_REG_ERROR_CODE		0x0038	/* RO: last SPYRE_STATUS_ERR_* of any ring */
#define SPYRE_REG_STICK_BYTES		0x003c	/* RO: bytes per stick (128) */
#define SPYRE_REG_FAULT_INJECT		0x0040	/* RW: the next N commands fail with ERR_INJECTED */
#define SPYRE_REG_FAULT_HANG		0x0044	/* RW: the next N commands hang (SPYRE_HANG_*) */
#define SPYRE_REG_MMU_CTX_BASE_LO	0x0048	/* RW: host DMA address of the context table (1.3) */
#define SPYRE_REG_MMU_CTX_BASE_HI	0x004c	/* RW: bits 63:32 */
#define SPYRE_REG_MMU_INVALIDATE	0x0050	/* WO: drop cached translations (SPYRE_MMU_INV_*) */
#define SPYRE_REG_FAULT_MMU		0x0054	/* RW: the next N translated commands fault (1.3) */

#define SPYRE_CAP_DMA			(1u << 0)	/* DMA_COPY command */
#define SPYRE_CAP_FENCE			(1u << 1)	/* FENCE_WRITE command */
#define SPYRE_CAP_MSIX			(1u << 2)	/* MSI-X per ring */
#define SPYRE_CAP_TELEMETRY		(1u << 3)	/* SPYRE_REG_TELE_* block */
#define SPYRE_CAP_LAUNCH		(1u << 4)	/* LAUNCH command, dataflow engine */
#define SPYRE_CAP_RING_ABORT		(1u << 5)	/* CTRL.ABORT, STATUS.BUSY, async RESET */
#define SPYRE_CAP_FAULT_INJECT		(1u << 6)	/* FAULT_INJECT and FAULT_HANG work */
#define SPYRE_CAP_DMA_2D		(1u << 7)	/* DMA_COPY_2D command (hw 1.2) */
#define SPYRE_CAP_MMU			(1u << 8)	/* per-context address translation (hw 1.3) */
#define SPYRE_CAP_EXEC_TIME		(1u << 9)	/* RING_EXEC_SEQNO / RING_EXEC_TIME (hw 1.4) */
#define SPYRE_CAP_TIMESLICE		(1u << 10)	/* engine time-sliced between rings (hw 1.5) */
#define SPYRE_CAP_P2P			(1u << 11)	/* copies reach peer cards' BAR2 (hw 1.6) */
#define SPYRE_CAP_CPL_TIME		(1u << 12)	/* RING_CTRL_CPL_TIME: modeled start/end (hw 1.7) */
#define SPYRE_CAP_SEM			(1u << 13)	/* SEM_SIGNAL / SEM_WAIT commands (hw 1.8) */

#define SPYRE_STATUS_READY		(1u << 0)	/* accepts ring configuration */
#define SPYRE_STATUS_ERROR		(1u << 1)	/* a command failed since reset */
#define SPYRE_STATUS_RESETTING		(1u << 2)	/* a RESET is still stopping the workers */

#define SPYRE_RESET_MAGIC		0x52535421u	/* "RST!" */

/*
 * FAULT_HANG value: bits 15:0 count the commands still to hang; the flags say what it takes
 * to end such a hang. Without a flag, a ring ABORT or a card reset ends it.
 */
#define SPYRE_HANG_COUNT_MASK		0xffffu
#define SPYRE_HANG_STICKY		(1u << 16)	/* ring ABORT cannot end it; RESET can */
#define SPYRE_HANG_WEDGE		(1u << 17)	/* RESET cannot end it; a PCI reset can */
#define SPYRE_HANG_ON_RING		(1u << 18)	/* only commands of ring SPYRE_HANG_RING (1.3) */
#define SPYRE_HANG_RING_SHIFT		24
#define SPYRE_HANG_RING_MASK		(0xfu << SPYRE_HANG_RING_SHIFT)
#define SPYRE_HANG_RING(n)		(SPYRE_HANG_ON_RING | ((uint32_t)(n) << SPYRE_HANG_RING_SHIFT))
#define SPYRE_HANG_VALID_MASK		(SPYRE_HANG_COUNT_MASK | SPYRE_HANG_STICKY | \
					 SPYRE_HANG_WEDGE | SPYRE_HANG_ON_RING | \
					 SPYRE_HANG_RING_MASK)

/* Interrupt causes: bit N for ring N completion, plus a global error cause. */
#define SPYRE_INTR_RING(n)		(1u << (n))
#define SPYRE_INTR_ERROR		(1u << 31)

/* MSI-X vectors (BAR4): one per ring, then one for SPYRE_INTR_ERROR. */
#define SPYRE_MSIX_VEC_RING(n)		(n)
#define SPYRE_MSIX_VEC_ERROR(num_rings)	(num_rings)

/*
 * ---- Telemetry (RO) ----
 * 64-bit counters are read LO then HI: reading LO latches the HI half, so the pair is a
 * consistent snapshot (a 64-bit read does exactly this). One latch serves every counter:
 * readers must not interleave their pairs.
 */
#define SPYRE_REG_TELE_CMDS_LO		0x0100	/* commands completed */
#define SPYRE_REG_TELE_CMDS_HI		0x0104
#define SPYRE_REG_TELE_H2D_BYTES_LO	0x0108	/* DMA bytes host -> device */
#define SPYRE_REG_TELE_H2D_BYTES_HI	0x010c
#define SPYRE_REG_TELE_D2H_BYTES_LO	0x0110	/* DMA bytes device -> host */
#define SPYRE_REG_TELE_D2H_BYTES_HI	0x0114
#define SPYRE_REG_TELE_D2D_BYTES_LO	0x0118	/* DMA bytes device -> device */
#define SPYRE_REG_TELE_D2D_BYTES_HI	0x011c
#define SPYRE_REG_TELE_ERRORS		0x0120	/* commands failed */
#define SPYRE_REG_TELE_RESETS		0x0124	/* resets since power-on */
#define SPYRE_REG_TELE_TEMP_MC		0x0128	/* board temperature, milli-Celsius */
#define SPYRE_REG_TELE_POWER_MW		0x012c	/* board power, milliwatts */
#define SPYRE_REG_TELE_POWER_CAP_MW	0x0130	/* board power limit, milliwatts */
#define SPYRE_REG_TELE_LAUNCH_ERRORS	0x0134	/* LAUNCHes that ended with ERR_PROGRAM */
#define SPYRE_REG_TELE_LAUNCHES_LO	0x0138	/* LAUNCHes the engine ran (OK or ERR_PROGRAM) */
#define SPYRE_REG_TELE_LAUNCHES_HI	0x013c
#define SPYRE_REG_TELE_ENG_CYCLES_LO	0x0140	/* sum of launch total_cycles */
#define SPYRE_REG_TELE_ENG_CYCLES_HI	0x0144
#define SPYRE_REG_TELE_ENG_INSTRS_LO	0x0148	/* instructions executed, all cores */
#define SPYRE_REG_TELE_ENG_INSTRS_HI	0x014c
#define SPYRE_REG_TELE_ENG_MACS_LO	0x0150	/* multiply-accumulates, all cores */
#define SPYRE_REG_TELE_ENG_MACS_HI	0x0154
#define SPYRE_REG_TELE_ENG_DDR_RD_LO	0x0158	/* engine DDR -> LX bytes */
#define SPYRE_REG_TELE_ENG_DDR_RD_HI	0x015c
#define SPYRE_REG_TELE_ENG_DDR_WR_LO	0x0160	/* engine LX -> DDR bytes */
#define SPYRE_REG_TELE_ENG_DDR_WR_HI	0x0164
#define SPYRE_REG_TELE_ENG_RING_LO	0x0168	/* bytes sent over the core ring */
#define SPYRE_REG_TELE_ENG_RING_HI	0x016c
#define SPYRE_REG_TELE_MMU_FAULTS	0x0170	/* commands completed with ERR_MMU_FAULT (1.3) */
#define SPYRE_REG_TELE_ENG_SWITCHES_LO	0x0178	/* engine context switches between launches (1.5) */
#define SPYRE_REG_TELE_ENG_SWITCHES_HI	0x017c
#define SPYRE_REG_TELE_ENG_SWITCH_CYCLES_LO 0x0180	/* their modeled cost, in TELE_ENG_CYCLES too */
#define SPYRE_REG_TELE_ENG_SWITCH_CYCLES_HI 0x0184
#define SPYRE_REG_TELE_P2P_RD_BYTES_LO	0x0188	/* bytes copies read from peer cards' memory (1.6) */
#define SPYRE_REG_TELE_P2P_RD_BYTES_HI	0x018c
#define SPYRE_REG_TELE_P2P_WR_BYTES_LO	0x0190	/* bytes copies wrote into peer cards' memory (1.6) */
#define SPYRE_REG_TELE_P2P_WR_BYTES_HI	0x0194

/*
 * Per-core telemetry (RO, 64-bit LO/HI pairs as above), cumulative over all LAUNCHes since
 * power-on: one SPYRE_TELE_CORE_STRIDE block per core, NUM_CORES blocks. Reads of blocks of
 * absent cores return 0.
 */
#define SPYRE_TELE_CORE_BASE		0x3000
#define SPYRE_TELE_CORE_STRIDE		0x40
#define SPYRE_TELE_CORE_REG(n, reg)	(SPYRE_TELE_CORE_BASE + (n) * SPYRE_TELE_CORE_STRIDE + (reg))
#define SPYRE_TELE_CORE_BUSY_LO(unit)	((unit) * 8)	/* unit busy cycles, SPYRE_LAUNCH_UNITS */
#define SPYRE_TELE_CORE_BUSY_HI(unit)	((unit) * 8 + 4)
#define SPYRE_TELE_CORE_ACTIVE_LO	0x28	/* cycles from launch start to the core's halt */
#define SPYRE_TELE_CORE_ACTIVE_HI	0x2c
#define SPYRE_TELE_CORE_INSTRS_LO	0x30	/* instructions executed */
#define SPYRE_TELE_CORE_INSTRS_HI	0x34

/* ---- Command rings: SPYRE_NUM_RINGS_MAX blocks of SPYRE_RING_STRIDE bytes ---- */
#define SPYRE_NUM_RINGS_MAX		16
#define SPYRE_RING_BASE			0x1000
#define SPYRE_RING_STRIDE		0x100
#define SPYRE_RING_REG(n, reg)		(SPYRE_RING_BASE + (n) * SPYRE_RING_STRIDE + (reg))

#define SPYRE_RING_CMD_BASE_LO		0x00	/* RW: host DMA address of the command array */
#define SPYRE_RING_CMD_BASE_HI		0x04
#define SPYRE_RING_CPL_BASE_LO		0x08	/* RW: host DMA address of the completion array */
#define SPYRE_RING_CPL_BASE_HI		0x0c
#define SPYRE_RING_SIZE			0x10	/* RW: entries, power of two in [2, 65536] */
#define SPYRE_RING_HEAD			0x14	/* RO: next entry the device will consume */
#define SPYRE_RING_TAIL			0x18	/* RW: doorbell; first entry not yet submitted */
#define SPYRE_RING_CTRL			0x1c	/* RW: SPYRE_RING_CTRL_* */
#define SPYRE_RING_STATUS		0x20	/* RO: SPYRE_RING_STATUS_* */
#define SPYRE_RING_COMPLETED		0x24	/* RO: commands completed since enable (wraps) */
#define SPYRE_RING_FAULT_ADDR_LO	0x28	/* RO: virtual address of the latched MMU fault */
#define SPYRE_RING_FAULT_ADDR_HI	0x2c
#define SPYRE_RING_FAULT_INFO		0x30	/* RW1C bit 31: SPYRE_MMU_FAULT_* of the fault */
#define SPYRE_RING_EXEC_SEQNO		0x34	/* RO: seqno bits 31:0 of the executing command (1.4) */
#define SPYRE_RING_EXEC_TIME		0x38	/* RO: SPYRE_RING_EXEC_RUNNING | ms it has executed */

/*
 * RING_EXEC_TIME: RUNNING while a command of the ring holds its engine (a worker or an
 * injected hang); bits 30:0 the milliseconds it has held it (saturating). 0 while the ring's
 * command waits for its worker, runs inline, or the ring is idle. A LAUNCH preempted by time
 * slicing (hw 1.5) reads RUNNING 0 with its seqno and the milliseconds it held the engine.
 */
#define SPYRE_RING_EXEC_RUNNING		(1u << 31)
#define SPYRE_RING_EXEC_MS_MASK		0x7fffffffu

#define SPYRE_RING_CTRL_ENABLE		(1u << 0)	/* 0 -> 1 latches bases, size; head = tail = 0 */
#define SPYRE_RING_CTRL_ABORT		(1u << 1)	/* disable, drop, cancel the running command */
/* Latched by the enable (hw 1.7): completion entries are struct spyre_hw_cpl_time. */
#define SPYRE_RING_CTRL_CPL_TIME	(1u << 2)

#define SPYRE_RING_STATUS_ENABLED	(1u << 0)
#define SPYRE_RING_STATUS_BAD_CONFIG	(1u << 1)	/* enable refused: size or alignment */
#define SPYRE_RING_STATUS_BAD_TAIL	(1u << 2)	/* tail written >= size; ignored */
#define SPYRE_RING_STATUS_BUSY		(1u << 3)	/* a consumed command still executes */

/* Both arrays must be aligned to this. */
#define SPYRE_RING_ALIGN		64
#define SPYRE_RING_SIZE_MIN		2
#define SPYRE_RING_SIZE_MAX		65536

/* ---- Commands: 64-byte entries in the command array ---- */
enum spyre_hw_opcode {
	SPYRE_OP_NOP		= 0x00,
	SPYRE_OP_FENCE_WRITE	= 0x01,	/* write a 64-bit value to host memory */
	SPYRE_OP_DMA_COPY	= 0x02,	/* copy bytes between host and/or device memory */
	SPYRE_OP_LAUNCH		= 0x03,	/* run a program on the cores (Documentation/isa.md) */
	SPYRE_OP_DMA_COPY_2D	= 0x04,	/* copy rows with a pitch on each side (hw 1.2) */
	SPYRE_OP_SEM_SIGNAL	= 0x05,	/* write a semaphore: value and modeled cycle (hw 1.8) */
	SPYRE_OP_SEM_WAIT	= 0x06,	/* wait until a semaphore reaches a value (hw 1.8) */
};

/* Command flags (header.flags). */
#define SPYRE_CMD_F_IRQ			(1u << 0)	/* raise the ring's interrupt when done */
#define SPYRE_CMD_F_SRC_HOST		(1u << 1)	/* DMA_COPY(_2D), SEM_WAIT: source is a host page table */
#define SPYRE_CMD_F_DST_HOST		(1u << 2)	/* DMA_COPY(_2D), SEM_SIGNAL: destination is a host page table */
#define SPYRE_CMD_F_VALID_MASK		0x07u

struct spyre_hw_cmd_header {
	uint8_t opcode;		/* enum spyre_hw_opcode */
	uint8_t flags;		/* SPYRE_CMD_F_* */
	uint16_t ctx;		/* MMU context (1.3, CAP_MMU): 0 untranslated, 1 .. 255 */
	uint32_t reserved1;	/* must be zero */
	uint64_t seqno;		/* copied into the completion entry */
};

/*
 * NOP: the payload (raw[]) must be zero; only SPYRE_CMD_F_IRQ may be set.
 *
 * DMA_COPY. A device side address is an offset into device memory (addr + offset).
 * A host side address is the DMA address of a host page directory (see below) and offset is
 * the byte offset inside the memory it describes.
 */
struct spyre_hw_cmd_dma {
	uint64_t src_addr;
	uint64_t src_offset;
	uint64_t dst_addr;
	uint64_t dst_offset;
	uint64_t size;		/* bytes, > 0 and <= device memory size */
	uint64_t reserved;	/* must be zero */
};

/*
 * DMA_COPY_2D: height rows of width bytes; row r is read at src_offset + r * src_pitch and
 * written at dst_offset + r * dst_pitch (addresses as for DMA_COPY), rows in ascending order.
 * width and height > 0, width * height <= device memory size; every row of both sides inside
 * its memory (ERR_SIZE for a zero or overflowing extent or too many bytes, ERR_DEV_RANGE
 * outside device memory). Pitches may be smaller than width
 * (rows overlap; a later row overwrites an earlier one's bytes).
 */
struct spyre_hw_cmd_dma2d {
	uint64_t src_addr;
	uint64_t src_offset;
	uint64_t dst_addr;
	uint64_t dst_offset;
	uint32_t width;		/* bytes per row */
	uint32_t height;	/* rows */
	uint32_t src_pitch;	/* bytes between source rows */
	uint32_t dst_pitch;	/* bytes between destination rows */
};

/*
 * Semaphores (hw 1.8, CAP_SEM; hardware.md section 6 "SEM_SIGNAL / SEM_WAIT"): 16 bytes at a
 * 16-byte aligned address, addressed as one side of a DMA_COPY (device address addr + offset,
 * translated by the command's ctx; or, with the side's HOST flag, the memory of a host page
 * directory, whose data pages may be host RAM or, with CAP_P2P, a peer card's BAR2).
 * SEM_SIGNAL (flag DST_HOST allowed) writes value and the command's modeled end cycle.
 * SEM_WAIT (flag SRC_HOST allowed) holds its ring until the semaphore's value >= value
 * (unsigned), at most timeout_us microseconds of the card's time (then ERR_TIMEOUT); its
 * modeled end is at least the cycle stored with the value it saw (the cards' clocks join
 * like Lamport clocks).
 */
struct spyre_hw_sem {
	uint64_t value;
	uint64_t cycle;		/* modeled end cycle of the SEM_SIGNAL that wrote value */
};

#define SPYRE_SEM_ALIGN			16
#define SPYRE_SEM_WAIT_MAX_US		10000000u	/* longest SEM_WAIT timeout: 10 s */

struct spyre_hw_cmd_sem {
	uint64_t addr;		/* device address, or host page directory (HOST flag) */
	uint64_t offset;	/* added to addr (device) or byte offset in the directory's memory */
	uint64_t value;		/* SIGNAL: stored; WAIT: the value to reach */
	uint32_t timeout_us;	/* WAIT: <= SPYRE_SEM_WAIT_MAX_US (0: test once); SIGNAL: 0 */
	uint32_t reserved0;	/* must be zero */
	uint64_t reserved[2];	/* must be zero */
};

/* FENCE_WRITE: stores value (little endian) at host DMA address addr, 8-byte aligned. */
struct spyre_hw_cmd_fence {
	uint64_t addr;
	uint64_t value;
	uint64_t reserved[4];	/* must be zero */
};

/*
 * LAUNCH: run the program image at device address prog_addr on the cores. The rest of the job
 * is described by a launch descriptor in host memory (contiguous, 8-byte aligned); the device
 * writes a launch result to result_addr (contiguous, 8-byte aligned; 0 = no result wanted).
 * The program may touch only the device memory windows listed in the descriptor: any other
 * access stops the job with SPYRE_STATUS_ERR_PROGRAM (this is how the driver keeps one
 * client's job out of another client's memory).
 */
struct spyre_hw_cmd_launch {
	uint64_t prog_addr;	/* device address of the program image */
	uint64_t prog_size;	/* bytes */
	uint64_t desc_addr;	/* host DMA address of struct spyre_hw_launch_desc */
	uint64_t result_addr;	/* host DMA address of struct spyre_hw_launch_result, or 0 */
	uint64_t reserved[2];	/* must be zero */
};

#define SPYRE_LAUNCH_MAX_ARGS		16
/* Largest program image: 32-byte header + 2^20 16-byte instructions (isa.md). */
#define SPYRE_LAUNCH_MAX_PROG_SIZE	(32u + 16u * 1048576u)
#define SPYRE_LAUNCH_MAX_WINDOWS	256

struct spyre_hw_launch_window {
	uint64_t addr;		/* device address */
	uint64_t size;		/* bytes */
};

/* Followed immediately by num_windows struct spyre_hw_launch_window. */
struct spyre_hw_launch_desc {
	uint32_t num_cores;	/* cores that run the program, 1..NUM_CORES; 0 = all */
	uint32_t num_args;	/* <= SPYRE_LAUNCH_MAX_ARGS */
	uint32_t num_windows;	/* <= SPYRE_LAUNCH_MAX_WINDOWS */
	uint32_t flags;		/* must be zero */
	uint64_t args[SPYRE_LAUNCH_MAX_ARGS];	/* launch arguments read by the program */
};

#define SPYRE_LAUNCH_MAX_CORES		64
#define SPYRE_LAUNCH_MSG_LEN		128
#define SPYRE_LAUNCH_UNITS		5	/* scalar, dma, matrix, vector, ring (isa.md) */

struct spyre_hw_launch_core {
	uint64_t busy[SPYRE_LAUNCH_UNITS];	/* cycles each unit was occupied */
	uint64_t end_cycle;	/* cycle the core finished */
};

/* Written by the device when a LAUNCH completes, successfully or not. */
struct spyre_hw_launch_result {
	uint32_t error;		/* engine error code, 0 = success (isa.md "Errors") */
	int32_t core;		/* failing core, -1 if not core specific */
	uint64_t pc;		/* failing instruction index */
	char message[SPYRE_LAUNCH_MSG_LEN];	/* NUL-terminated reason */
	uint64_t total_cycles;
	uint64_t ddr_read_bytes;
	uint64_t ddr_write_bytes;
	uint64_t ring_bytes;
	uint64_t instructions;
	uint64_t macs;
	uint32_t num_cores;	/* entries of cores[] that are valid */
	uint32_t mac_peak;	/* peak MACs/cycle of one core for the types used, 0 = no MACs */
	struct spyre_hw_launch_core cores[SPYRE_LAUNCH_MAX_CORES];
};

struct spyre_hw_cmd {
	struct spyre_hw_cmd_header hdr;
	union {
		struct spyre_hw_cmd_dma dma;
		struct spyre_hw_cmd_dma2d dma2d;
		struct spyre_hw_cmd_fence fence;
		struct spyre_hw_cmd_launch launch;
		struct spyre_hw_cmd_sem sem;
		uint64_t raw[6];
	};
};

/*
 * Host page directory: host memory is reached through a two-level table of 4 KiB pages.
 * With CAP_P2P (hw 1.6) a data page (not the directory or a page table) may also be in a
 * peer spyre card's BAR2: the copy then moves data card to card.
 * The directory is an array of 64-bit DMA addresses of page tables; each page table is one
 * 4 KiB page holding 512 64-bit DMA addresses of 4 KiB data pages. Byte offset o is at
 * table = dir[o >> 21], page = table[(o >> 12) & 511], byte (o & 4095).
 * The directory must be 8-byte aligned; page table and data page addresses 4 KiB aligned
 * (SPYRE_STATUS_ERR_ALIGN otherwise). Only the entries a command touches are read.
 */
#define SPYRE_HOST_PAGE_SHIFT		12
#define SPYRE_HOST_PAGE_SIZE		(1u << SPYRE_HOST_PAGE_SHIFT)
#define SPYRE_HOST_PT_ENTRIES		512
#define SPYRE_HOST_PT_SHIFT		21	/* bytes covered by one page table */

/* ---- Completions: 32-byte entries, entry N describes command N ---- */
enum spyre_hw_status {
	SPYRE_STATUS_OK			= 0,
	SPYRE_STATUS_ERR_OPCODE		= 1,	/* unknown opcode */
	SPYRE_STATUS_ERR_RESERVED	= 2,	/* unknown flag or non-zero reserved field */
	SPYRE_STATUS_ERR_DEV_RANGE	= 3,	/* device address range outside device memory */
	SPYRE_STATUS_ERR_HOST_DMA	= 4,	/* host memory access failed */
	SPYRE_STATUS_ERR_ALIGN		= 5,	/* misaligned address */
	SPYRE_STATUS_ERR_SIZE		= 6,	/* zero or overflowing size */
	SPYRE_STATUS_ERR_INJECTED	= 7,	/* fault injection */
	SPYRE_STATUS_ERR_PROGRAM	= 8,	/* LAUNCH: the program stopped with an error */
	SPYRE_STATUS_ERR_MMU_FAULT	= 9,	/* translation fault (1.3): see the ring's FAULT_* */
	SPYRE_STATUS_ERR_TIMEOUT	= 10,	/* SEM_WAIT: the value was not reached in time (1.8) */
};

struct spyre_hw_cpl {
	uint64_t seqno;		/* header.seqno of the command */
	uint32_t status;	/* enum spyre_hw_status */
	uint32_t detail;	/* ERR_PROGRAM: engine error; ERR_MMU_FAULT: FAULT_INFO; else 0 */
	uint64_t cycles;	/* modeled device cycles the command took */
	uint64_t done_count;	/* value of the ring's completed counter after this command */
};

/*
 * Completion entry of a ring enabled with RING_CTRL_CPL_TIME (hw 1.7, CAP_CPL_TIME): the
 * command's modeled start and end on the card's clock (hardware.md section 11, "Modeled
 * clock"); end_cycle - start_cycle == cpl.cycles.
 */
struct spyre_hw_cpl_time {
	struct spyre_hw_cpl cpl;
	uint64_t start_cycle;	/* cycle the command started on the card's modeled clock */
	uint64_t end_cycle;	/* cycle it ended: start_cycle + cpl.cycles */
	uint64_t reserved[2];	/* written 0 */
};

/*
 * ---- MMU (hw 1.3, CAP_MMU; Documentation/hardware.md section 15) ----
 * A command whose header.ctx is non-zero runs in that context: its device addresses (DMA
 * device sides, LAUNCH program, windows and every core access) are virtual addresses
 * translated through the context's page table. Context table: SPYRE_MMU_NUM_CTX u64 entries
 * at MMU_CTX_BASE (4 KiB aligned), entry c = SPYRE_MMU_VALID | DMA address of the context's
 * level-1 table. Three levels of 4 KiB host pages holding 512 u64 entries each; a VA below
 * 2^39 indexes them with bits 38:30, 29:21 and 20:12. Level-1/2 entries: VALID | DMA
 * address of the next table. Level-3 entries (PTEs): VALID | WRITE | HOST | page address
 * (device memory offset, or host DMA address with HOST). Bits 11:3 of every entry must be 0.
 */
#define SPYRE_MMU_NUM_CTX		256	/* context ids 1 .. 255; 0 = untranslated */
#define SPYRE_MMU_PAGE_SHIFT		12
#define SPYRE_MMU_PAGE_SIZE		(1u << SPYRE_MMU_PAGE_SHIFT)
#define SPYRE_MMU_LEVEL_BITS		9	/* 512 entries per table */
#define SPYRE_MMU_VA_BITS		39	/* 512 GiB of virtual addresses per context */
#define SPYRE_MMU_VALID			(1ull << 0)
#define SPYRE_MMU_WRITE			(1ull << 1)	/* PTE: stores and DMA writes allowed */
#define SPYRE_MMU_HOST			(1ull << 2)	/* PTE: a host page (DMA only) */
#define SPYRE_MMU_ADDR_MASK		(~0xfffull)
#define SPYRE_MMU_RSVD_MASK		0xff8ull

/* MMU_INVALIDATE value: a context id, or ALL. */
#define SPYRE_MMU_INV_CTX_MASK		0xffu
#define SPYRE_MMU_INV_ALL		(1u << 31)

/* RING_FAULT_INFO, also the completion detail of ERR_MMU_FAULT. */
#define SPYRE_MMU_FAULT_CTX_MASK	0xffu
#define SPYRE_MMU_FAULT_ACCESS_SHIFT	8
#define SPYRE_MMU_FAULT_ACCESS_MASK	(3u << SPYRE_MMU_FAULT_ACCESS_SHIFT)
#define SPYRE_MMU_FAULT_READ		0u	/* access kinds */
#define SPYRE_MMU_FAULT_WRITE		1u
#define SPYRE_MMU_FAULT_FETCH		2u	/* LAUNCH program image */
#define SPYRE_MMU_FAULT_ENGINE		(1u << 10)	/* a core's access, not the DMA engine's */
#define SPYRE_MMU_FAULT_CACHE		(1u << 11)	/* the context does not fit the translation cache */
#define SPYRE_MMU_FAULT_VALID		(1u << 31)

#endif /* SPYRE_HW_H */
