/* SPDX-License-Identifier: MIT */
/*
 * Spyre dataflow engine: ISA interpreter and deterministic cycle model of the card's 32-core
 * compute engine. No QEMU dependency; linked into the QEMU device model, the host unit tests and
 * libspyre's in-process simulator backend. C11-compatible. The ISA is Documentation/isa.md.
 *
 * Thread safety: one spyre_engine_run() at a time per engine; spyre_engine_cancel() and stores to
 * a job's cancel flag may happen from any thread at any time. Different engines are independent.
 *
 * Cancellation lands within milliseconds of host time: the engine polls it before every
 * instruction and, inside long instructions, every few thousand elements or rows of the matmul
 * and vector kernels. No C++ exception escapes the API: a host failure inside the engine (also on
 * one of its pool threads) ends the job with SPYRE_ENGINE_ERR_NO_MEMORY.
 *
 * Test hook: the environment variable SPYRE_ENGINE_TEST_THROW_CORE=<n>, read when an engine is
 * created, makes core n throw a C++ exception as it starts running (every job of that engine).
 * Test hook: SPYRE_ENGINE_TEST_LX_POISON=1, read when an engine is created, fills the
 * scratchpads of a job's cores with 0xff bytes (NaN in every float type) at the start of every
 * job and part, instead of zero: a program that reads LX it has not written shows it.
 */
#ifndef SPYRE_ENGINE_H
#define SPYRE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPYRE_ENGINE_MAX_CORES 64
#define SPYRE_ENGINE_MAX_ARGS 16
#define SPYRE_ENGINE_MSG_LEN 128
#define SPYRE_ENGINE_STICK_BYTES 128

/* Execution units whose busy cycles are reported per core. */
enum spyre_engine_unit {
    SPYRE_UNIT_SCALAR = 0, /* instruction issue, scalar ALU, branches, LX scalar access */
    SPYRE_UNIT_DMA = 1,    /* DDR <-> LX stick transfers: load and store units added */
    SPYRE_UNIT_MATRIX = 2, /* systolic arrays of both corelets */
    SPYRE_UNIT_VECTOR = 3, /* vector units of both corelets */
    SPYRE_UNIT_RING = 4,   /* ring sends, all-reduce */
    SPYRE_UNIT_COUNT = 5
};

/* Error codes (spyre_engine_result.error and the return value of spyre_engine_run). */
enum spyre_engine_error {
    SPYRE_ENGINE_OK = 0,
    SPYRE_ENGINE_ERR_INVALID_ARGUMENT = 1, /* API misuse: NULL pointers, bad job fields */
    SPYRE_ENGINE_ERR_BAD_PROGRAM = 2,      /* header: magic, version, size, flags */
    SPYRE_ENGINE_ERR_ILLEGAL_OPCODE = 3,
    SPYRE_ENGINE_ERR_BAD_REGISTER = 4,  /* register field >= 32, descriptor past r31 */
    SPYRE_ENGINE_ERR_BAD_OPERAND = 5,   /* bad dtype, function, flags or nonzero reserved field */
    SPYRE_ENGINE_ERR_BAD_LOOP = 6,      /* unmatched LOOP/ENDLOOP, nesting deeper than 8 */
    SPYRE_ENGINE_ERR_BAD_BRANCH = 7,    /* target out of range or crossing a loop boundary */
    SPYRE_ENGINE_ERR_NO_HALT = 8,       /* execution ran past the last instruction */
    SPYRE_ENGINE_ERR_BAD_ARG = 9,       /* ARG index >= number of launch arguments */
    SPYRE_ENGINE_ERR_LX_RANGE = 10,     /* scratchpad access outside [0, lx_bytes) */
    SPYRE_ENGINE_ERR_DDR_WINDOW = 11,   /* device-memory access outside the job's windows */
    SPYRE_ENGINE_ERR_DDR_SPAN = 12,     /* device-memory access outside the core's 256 MB span */
    SPYRE_ENGINE_ERR_MISALIGNED = 13,   /* stick/element alignment violated */
    SPYRE_ENGINE_ERR_DIV_ZERO = 14,     /* scalar DIVU/REMU by zero */
    SPYRE_ENGINE_ERR_DEADLOCK = 15,     /* barrier/receive can never complete */
    SPYRE_ENGINE_ERR_COLLECTIVE_MISMATCH = 16, /* cores wait in different collectives */
    SPYRE_ENGINE_ERR_RING = 17,         /* receive size mismatch, ring buffer overflow */
    SPYRE_ENGINE_ERR_INSTR_BUDGET = 18, /* per-core instruction budget exceeded */
    SPYRE_ENGINE_ERR_CYCLE_BUDGET = 19, /* modeled cycle budget exceeded */
    SPYRE_ENGINE_ERR_TOO_LARGE = 20,    /* operand shape beyond the instruction's limits */
    SPYRE_ENGINE_ERR_CANCELLED = 21,    /* spyre_engine_cancel() or the job's cancel flag */
    SPYRE_ENGINE_ERR_NO_MEMORY = 22,    /* host memory or another host resource failed */
    SPYRE_ENGINE_ERR_MMU_FAULT = 23,    /* translated job: address unmapped or not writable */
    SPYRE_ENGINE_ERR_COUNT = 24
};

/* Engine configuration. Defaults (spyre_engine_config_default) are faithful to Spyre. */
typedef struct spyre_engine_config {
    uint32_t num_cores;          /* 32, at most SPYRE_ENGINE_MAX_CORES */
    uint32_t corelets_per_core;  /* 2 */
    uint32_t pe_rows;            /* 8: systolic rows per corelet */
    uint32_t pe_lanes;           /* 64: fp16 MAC lanes per row */
    uint64_t lx_bytes;           /* 2 MiB scratchpad per core (multiple of 128) */
    uint64_t clock_hz;           /* 1.5 GHz */
    uint64_t ddr_bytes_per_s;    /* 204.8 GB/s aggregate, shared by the transfers in flight */
    uint32_t dma_port_bytes_per_cycle; /* 256: per DMA unit (a core has a load and a store unit) */
    uint32_t dma_latency;        /* 150 cycles, charged when a DMA unit starts from idle */
    uint64_t span_bytes;         /* 256 MiB addressable device memory per core */
    uint32_t mm_fill_latency;    /* 16 cycles, charged when the matrix unit starts from idle */
    uint32_t mm_int8_speedup;    /* 2: int8 tiles run at 2x the fp16 MAC rate */
    uint32_t mm_fp32_slowdown;   /* 4: fp32 inputs run at 1/4 of the fp16 MAC rate */
    uint32_t vec_lanes_16;       /* 64 fp16/bf16/int8 lanes per corelet */
    uint32_t vec_lanes_32;       /* 32 fp32/int32 lanes per corelet */
    uint32_t vec_latency;        /* 8 cycles, charged when the vector unit starts from idle */
    uint32_t vec_special_cycles; /* 4: cycles per vector for div, exp, rsqrt, sqrt, tanh, ... */
    uint32_t ring_bytes_per_cycle; /* 128 per direction */
    uint32_t ring_hop_latency;   /* 8 cycles per hop */
    uint32_t barrier_latency;    /* 16 cycles */
    uint32_t queue_depth;        /* 4 in-flight instructions per unit before issue stalls */
    uint32_t num_threads;        /* host threads; 0 = number of host CPUs; at most num_cores used */
    uint64_t ring_max_bytes;     /* 8 MiB of undelivered ring data per channel */
    uint64_t max_instructions;   /* per core per job; 0 = unlimited (default 1e9) */
    uint64_t max_cycles;         /* per job; 0 = unlimited (default 15e9 = 10 s at 1.5 GHz) */
    /* Engine v2 cycle model (Documentation/isa.md "Cycle model" names the source of each). */
    uint32_t launch_overhead_cycles; /* per job, before the first instruction issues */
    uint32_t lx_reserve_pct;     /* 20: share of LX no program may use (as on the real card) */
    uint32_t vec_lx_sticks_per_cycle; /* 2: LX sticks each vector operand stream moves per cycle */
    uint32_t dma_setup_cycles;   /* set-up of a host-issued DMA command (COPY, FILL) */
    uint64_t host_dma_bytes_per_s; /* PCIe Gen5 x16 effective, host <-> device copies */
} spyre_engine_config;

typedef struct spyre_engine_window {
    uint64_t addr; /* device address (offset into the job's memory) */
    uint64_t size;
} spyre_engine_window;

/* A run of a translated job's address space: virtual [va, va + len) is device memory
 * [pa, pa + len) (offsets into the job's mem). Runs are sorted by va and do not overlap. */
#define SPYRE_ENGINE_MAP_WRITE 1u /* stores allowed (loads always are) */
typedef struct spyre_engine_mapping {
    uint64_t va;
    uint64_t pa;
    uint64_t len;
    uint32_t flags; /* SPYRE_ENGINE_MAP_* */
    uint32_t reserved;
} spyre_engine_mapping;

/* Job flag: price the job without computing it. The program runs through the same interpreter,
 * checks and cycle model, but no data moves and nothing is computed: DDR and LX are neither read
 * nor written (mem may be NULL; mem_size still bounds the windows), LXLD reads 0. For programs
 * whose control flow does not depend on data (every program the op library builds) the result's
 * statistics are exactly those of a real run; planners use it to compare candidate programs. */
#define SPYRE_ENGINE_JOB_TIMING_ONLY 1u

typedef struct spyre_engine_job {
    const void* program; /* program image, Documentation/isa.md "Program format" */
    uint64_t program_size;
    const uint64_t* args; /* launch arguments read by ARG; may be NULL if num_args == 0 */
    uint32_t num_args;    /* <= SPYRE_ENGINE_MAX_ARGS */
    uint32_t num_cores;   /* cores running the program; 0 = config.num_cores */
    void* mem;            /* device memory: device address 0 is mem[0] */
    uint64_t mem_size;
    const spyre_engine_window* windows; /* the only device memory the job may touch */
    uint32_t num_windows;
    uint32_t flags;            /* SPYRE_ENGINE_JOB_* bits; others must be 0 */
    uint64_t max_instructions; /* 0 = config value */
    uint64_t max_cycles;       /* 0 = config value */
    /* Optional (NULL = none): the job stops with SPYRE_ENGINE_ERR_CANCELLED soon after *cancel
     * becomes non-zero (read atomically; may already be set when the run starts). Unlike
     * spyre_engine_cancel(), it cannot race with the start of the run. */
    const int32_t* cancel;
    /* Optional translation (NULL = physical; isa.md section 5): windows and core accesses are
     * virtual addresses; after the window and span checks, every LOAD, STORE and MCLOAD row is
     * translated through these runs (a row may span several). An address in no run, or a store
     * to a run without SPYRE_ENGINE_MAP_WRITE, stops the job with SPYRE_ENGINE_ERR_MMU_FAULT
     * before the instruction moves data. With mappings, windows are not bounded by mem_size. */
    const spyre_engine_mapping* mappings;
    uint32_t num_mappings;
    /* Optional (NULL = none), for spyre_engine_run_slice(): once *preempt is non-zero (read
     * atomically), every core stops before its next instruction and the call returns
     * SPYRE_ENGINE_PREEMPTED, as when the slice is used up. The caller clears it to resume. */
    const int32_t* preempt;
} spyre_engine_job;

typedef struct spyre_engine_core_stats {
    uint64_t busy[SPYRE_UNIT_COUNT]; /* cycles each unit was occupied */
    uint64_t wait_cycles;  /* issue stalled on barrier, all-reduce or ring receive */
    uint64_t idle_cycles;  /* total_cycles - end_cycle */
    uint64_t end_cycle;    /* cycle the core halted (all its units drained) */
    uint64_t instructions;
    uint64_t ddr_read_bytes;
    uint64_t ddr_write_bytes;
    uint64_t ring_bytes; /* bytes this core sent (SEND and its share of ALLRED) */
    uint64_t macs;       /* multiply-accumulates issued to the matrix unit */
    uint64_t dma_load_busy;  /* the two DMA units, whose sum is busy[SPYRE_UNIT_DMA] */
    uint64_t dma_store_busy;
    uint64_t vec_sticks;     /* LX sticks read and written by the vector unit */
    /* The same MACs counted in fp16 MAC slots, i.e. weighted by the rate of their input type:
     * int8 MACs / mm_int8_speedup (rounded up per MM), fp32 MACs x mm_fp32_slowdown, fp16 and
     * bf16 MACs x 1. mac_slots / (cycles x fp16 peak) is the utilisation against the peak of the
     * types actually used. */
    uint64_t mac_slots;
} spyre_engine_core_stats;

typedef struct spyre_engine_result {
    int32_t status; /* 0 = job completed, -1 = job stopped with an error */
    int32_t error;  /* enum spyre_engine_error */
    int32_t core;   /* core that failed; -1 for program/argument errors */
    uint32_t num_cores;
    uint64_t pc; /* instruction index of the failing instruction */
    char message[SPYRE_ENGINE_MSG_LEN];
    uint64_t total_cycles; /* job cycles: max over cores of end_cycle */
    uint64_t ddr_read_bytes;
    uint64_t ddr_write_bytes;
    uint64_t ring_bytes;
    uint64_t instructions;
    uint64_t macs;
    uint64_t mac_slots; /* sum of the cores' mac_slots */
    /* Peak MACs per cycle of one core for the data types of the job's matrix work: 1024 for
     * fp16/bf16, 2048 for int8, 256 for fp32 (default config); a MAC-weighted mix,
     * round(fp16 peak x macs / mac_slots), when several types ran; 0 without matrix work.
     * MAC utilisation = macs / (total_cycles x num_cores x mac_peak). */
    uint32_t mac_peak;
    /* Linked job (spyre_engine_run_linked): the part that failed, else the number of parts
     * run less one; 0 for a job of one part. */
    uint32_t part;
    spyre_engine_core_stats cores[SPYRE_ENGINE_MAX_CORES];
    /* SPYRE_ENGINE_ERR_MMU_FAULT: the first faulting virtual byte and the access
     * (SPYRE_ENGINE_ACCESS_*); 0 otherwise. */
    uint64_t fault_va;
    uint32_t fault_access;
    /* Linked job: the cycles between its parts (barriers and scratchpad clears); 0 otherwise. */
    uint32_t link_cycles;
} spyre_engine_result;

#define SPYRE_ENGINE_ACCESS_READ 0u
#define SPYRE_ENGINE_ACCESS_WRITE 1u

typedef struct spyre_engine spyre_engine;

void spyre_engine_config_default(spyre_engine_config* cfg);
/* Returns NULL if cfg is invalid or memory is exhausted. cfg == NULL means defaults. */
spyre_engine* spyre_engine_create(const spyre_engine_config* cfg);
void spyre_engine_destroy(spyre_engine* eng);
const spyre_engine_config* spyre_engine_get_config(const spyre_engine* eng);
/* Runs a job to completion. Fills *res (always, if res != NULL) and returns res->error. */
int spyre_engine_run(spyre_engine* eng, const spyre_engine_job* job, spyre_engine_result* res);
/*
 * Time slicing (the card model's engine shared between rings, hardware.md section 12):
 * spyre_engine_run_slice(eng, job, slice, res) runs job like spyre_engine_run(), but a core
 * that has executed `slice` instructions in this call stops before its next one (0 = no limit),
 * and so does every core once the job's preempt flag is set.
 * Once every core stands at an instruction boundary (its ring messages delivered), the call
 * returns SPYRE_ENGINE_PREEMPTED and leaves *res untouched: the job's whole state (registers,
 * loops, scratchpads, ring buffers, cycle record) stays in the engine, and
 * spyre_engine_run_slice(eng, NULL, slice, res) resumes it where it stopped. The job and
 * everything it points to must stay valid until the job ends (any other return value, *res
 * filled as by spyre_engine_run) or spyre_engine_discard() drops it. Results, statistics and
 * cycles are the same however the job was sliced (except that ring_max_bytes is checked per
 * phase: an overrun within one phase may not happen when the phase is cut short). Resuming with no preempted job fails with
 * SPYRE_ENGINE_ERR_INVALID_ARGUMENT; starting a job drops a preempted one.
 */
#define SPYRE_ENGINE_PREEMPTED (-1)
int spyre_engine_run_slice(spyre_engine* eng, const spyre_engine_job* job, uint64_t slice,
                           spyre_engine_result* res);
/*
 * Linked launches: one job of `num_parts` (1..SPYRE_ENGINE_MAX_PARTS) parts run back to back,
 * as a captured graph's consecutive launches. Each part is a job of its own as
 * spyre_engine_run() takes it (program, arguments, num_cores, windows, budgets): its cores start
 * with registers reset (r1 core id, r2 the part's cores, others 0), SPAN at the part's initial
 * span, group r0 = the part's cores; a core outside the part idles. The job pays one launch
 * overhead; between parts is an implicit barrier of all cores (barrier_latency cycles after
 * the slowest core of the part has drained), then each core clears the scratchpad it wrote in
 * the part (its sticks up to the highest written, vec_lx_sticks_per_cycle per cycle, cores in
 * parallel): every part sees LX zero at its start, as a job does (the op library's programs
 * rely on it: their padding is read as zero; SPYRE_ENGINE_TEST_LX_POISON finds them). So
 *   total_cycles = sum over parts of (part alone) - (N-1) x launch_overhead_cycles
 *                  + link_cycles,
 * link_cycles = sum over part boundaries of barrier_latency + the slowest core's clear.
 * Every part must have the same mem, mem_size, flags, mappings and cancel as the first, and no
 * preempt flag. A part that fails ends the job: *res holds its error, core, pc and message,
 * `part` its index, and the statistics up to it; later parts
 * do not run. Statistics add up over the parts; a core's end_cycle is the job cycle at which
 * it last halted. A linked job cannot be time-sliced (it drops a preempted job, as a start
 * does). Returns res->error.
 */
#define SPYRE_ENGINE_MAX_PARTS 64
int spyre_engine_run_linked(spyre_engine* eng, const spyre_engine_job* parts, uint32_t num_parts,
                            spyre_engine_result* res);
/* Drops the preempted job, if any (its memory is released; the scratchpads read as zero to the
 * next job). Not concurrently with a run on the same engine. */
void spyre_engine_discard(spyre_engine* eng);
/* Scratchpad bytes (whole 128-byte sticks, all cores) the current or preempted job has
 * written: what a context switch must save and restore. */
uint64_t spyre_engine_context_bytes(const spyre_engine* eng);
/* Makes the job currently running stop with SPYRE_ENGINE_ERR_CANCELLED (a later run starts
 * afresh). */
void spyre_engine_cancel(spyre_engine* eng);
const char* spyre_engine_error_name(int error);

/* Usable scratchpad bytes per core: lx_bytes less the reserve, in whole sticks. */
uint64_t spyre_engine_lx_usable(const spyre_engine_config* cfg);

/* Host-issued DMA commands, priced by the same model as launches. */
enum spyre_engine_copy_kind {
    SPYRE_COPY_HOST_TO_DEVICE = 0, /* PCIe and DDR write: the slower of the two */
    SPYRE_COPY_DEVICE_TO_HOST = 1,
    SPYRE_COPY_DEVICE_TO_DEVICE = 2, /* reads and writes DDR: 2 x bytes of DDR traffic */
    SPYRE_COPY_FILL = 3              /* writes DDR only */
};
/* Modeled cycles of a host-issued copy of `bytes`: dma_setup_cycles plus the transfer. */
uint64_t spyre_engine_copy_cycles(const spyre_engine_config* cfg, int kind, uint64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* SPYRE_ENGINE_H */
