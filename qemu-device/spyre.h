/*
 * Spyre-style PCIe AI accelerator model: internal state shared by the
 * device files (spyre.c: PCI/QOM/registers, spyre-ring.c: command rings,
 * spyre-dma.c: DMA engine and cycle model).
 *
 * The guest-visible interface is encoded in spyre_hw.h and specified in
 * Documentation/hardware.md of the Spyre open stack.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MISC_SPYRE_H
#define HW_MISC_SPYRE_H

#include "hw/pci/pci_device.h"
#include "qemu/thread.h"
#include "qemu/queue.h"
#include "qom/object.h"
#include "spyre_hw.h"
#include "spyre/engine.h"
#include "spyre-mmu.h"

#define TYPE_SPYRE "spyre"
OBJECT_DECLARE_SIMPLE_TYPE(SpyreState, SPYRE)

/* Modeled costs (device cycles), see Documentation/hardware.md. */
#define SPYRE_CYCLES_NOP            16
#define SPYRE_CYCLES_FENCE          32
#define SPYRE_CYCLES_DMA_SETUP      256
#define SPYRE_CYCLES_ERROR          16
/*
 * Semaphores (hw 1.8, hardware.md section 6): a SEM_SIGNAL is a posted
 * 16-byte write (plus SPYRE_CYCLES_P2P_LATENCY into a peer's BAR2), a
 * SEM_WAIT costs this much after the signal it saw.
 */
#define SPYRE_CYCLES_SEM_SIGNAL     32
#define SPYRE_CYCLES_SEM_WAIT       16
/*
 * Period (QEMU_CLOCK_VIRTUAL) of a waiting SEM_WAIT's re-check for values
 * written by peers or the host; a completion on the card re-checks at once.
 */
#define SPYRE_SEM_POLL_US           50
/*
 * A stored semaphore cycle above this counts as this: the clock join of a
 * SEM_WAIT never overflows, whatever the guest wrote (~97 years at 1.5 GHz).
 */
#define SPYRE_SEM_CYCLE_MAX         (1ULL << 62)
/*
 * Engine context switch (time slicing, hw 1.5): fixed part, on top of the
 * scratchpad save and restore at ddr-mbps. Drains the units' queues
 * (queue depth 4) and moves each core's registers and loop state (32 x 8 +
 * 8 x 32 bytes) over the 150-cycle DMA path: a model choice, not a
 * measurement (hardware.md section 12).
 */
#define SPYRE_CYCLES_CTX_SWITCH     2048
/*
 * Default time slice (timeslice-ms) of QEMU_CLOCK_VIRTUAL: a switch of a
 * launch using all 64 MiB of scratchpad costs ~0.66 ms, under 7% of it.
 */
#define SPYRE_TIMESLICE_MS          10
/* LPDDR5 aggregate bandwidth, in MB/s (204.8 GB/s). */
#define SPYRE_DDR_MBPS              204800ULL
/* PCIe Gen5 x16 effective: 32 GT/s x 16 x 128/130 = 63.0 GB/s less TLP overhead */
#define SPYRE_PCIE_MBPS             60000ULL
/*
 * Peer-to-peer (hw 1.6): a copy to or from a peer card crosses this card's
 * Gen5 x16 link, a PCIe switch and the peer's link; the link rate is the
 * same effective 60 GB/s per direction as host DMA (p2p-mbps). On top of it
 * each copy that touches a peer pays a fixed latency: two traversals of a
 * Gen5 switch (~150 ns each, the order of published cut-through latencies
 * of Gen5 switches) and the read completion round trip through the peer's
 * memory controller (~700 ns): ~1 us, 1500 cycles at 1.5 GHz. A model
 * choice, not a measurement (hardware.md section 11).
 */
#define SPYRE_P2P_MBPS              60000ULL
#define SPYRE_CYCLES_P2P_LATENCY    1500

/* Work bounds of one bottom-half run before it yields to the main loop. */
#define SPYRE_BH_MAX_CMDS           64
#define SPYRE_BH_MAX_BYTES          (64 * 1024 * 1024)

/* Board model: idle power/temperature and the load terms. */
#define SPYRE_IDLE_POWER_MW         20000
#define SPYRE_LOAD_POWER_MW         55000
#define SPYRE_IDLE_TEMP_MC          35000
#define SPYRE_LOAD_TEMP_MC          50000
#define SPYRE_THERMAL_TAU_NS        1000000000LL

typedef struct SpyreRing {
    /* Configuration registers as written by the guest (staged). */
    uint64_t cmd_base;
    uint64_t cpl_base;
    uint32_t size;
    uint32_t ctrl;
    /* Configuration latched by the 0 -> 1 transition of CTRL.ENABLE. */
    uint64_t l_cmd_base;
    uint64_t l_cpl_base;
    uint32_t l_size;
    uint32_t head;
    uint32_t tail;
    uint32_t status;
    uint32_t completed;
    /*
     * The consumed command that still executes (STATUS.BUSY): a job on a
     * worker (LAUNCH, large DMA_COPY) until its completion ran on the main
     * loop, or an injected hang (SPYRE_RING_HUNG | SPYRE_HANG_* flags).
     * The ring consumes nothing else meanwhile.
     */
    struct SpyreJob *job;
    uint32_t hang;
    /* The hung command's seqno and when it hung (EXEC_SEQNO, EXEC_TIME). */
    uint64_t hang_seqno;
    int64_t hang_start_ns;
    /* Incremented by every enable, so a late LAUNCH completion can tell. */
    uint32_t epoch;
    /* FAULT_ADDR / FAULT_INFO: the first MMU fault since the last clear. */
    uint64_t fault_addr;
    uint32_t fault_info;
    /*
     * Modeled clock (1.7): end cycle of the ring's last completed command,
     * and per entry the card's posted clock (SpyreState.clk_posted) at the
     * doorbell that submitted it (l_size entries, allocated at enable).
     */
    uint64_t clk_end;
    uint64_t *clk_doorbell;
    /*
     * A SEM_WAIT that holds the ring (hw 1.8, spyre-sem.c): its validated
     * command (host order), its entry, and the QEMU_CLOCK_VIRTUAL times it
     * started waiting and gives up. At most one per ring, never allocated.
     */
    bool sem_wait;
    uint32_t sem_idx;
    struct spyre_hw_cmd sem_cmd;
    int64_t sem_start_ns;
    int64_t sem_deadline_ns;
} SpyreRing;

/* Units of the modeled clock a command occupies (hardware.md section 11). */
typedef enum SpyreClkUnit {
    SPYRE_CLK_NONE,             /* the ring's command processor only */
    SPYRE_CLK_DMA,              /* the DMA engine: copies, peer copies too */
    SPYRE_CLK_ENGINE,           /* the compute engine: LAUNCH */
    SPYRE_CLK_UNITS,
} SpyreClkUnit;

/* SpyreRing.hang: a hang occupies the ring (with its SPYRE_HANG_* flags). */
#define SPYRE_RING_HUNG             (1u << 31)

/* Per-core telemetry, cumulative over launches (survives device reset). */
typedef struct SpyreCoreTele {
    uint64_t busy[SPYRE_LAUNCH_UNITS];
    uint64_t active;
    uint64_t instrs;
} SpyreCoreTele;

/*
 * A command handed to a worker thread: validated on the main loop, run by
 * the worker, completed on the main loop (SpyreWorker.complete).
 */
typedef enum SpyreJobKind {
    SPYRE_JOB_LAUNCH,
    SPYRE_JOB_DMA,
} SpyreJobKind;

typedef enum SpyreJobState {
    SPYRE_JOB_QUEUED,           /* in SpyreWorker.queue */
    SPYRE_JOB_RUNNING,          /* SpyreWorker.running */
    SPYRE_JOB_DONE,             /* in SpyreWorker.done, not yet completed */
} SpyreJobState;

typedef struct SpyreWorker SpyreWorker;

/*
 * One DMA transfer: height rows of width bytes, row r at src_offset +
 * r * src_pitch and dst_offset + r * dst_pitch (DMA_COPY: one row).
 */
typedef struct SpyreDmaXfer {
    uint64_t src_addr;
    uint64_t src_offset;
    uint64_t dst_addr;
    uint64_t dst_offset;
    uint64_t width;
    uint64_t height;
    uint64_t src_pitch;
    uint64_t dst_pitch;
    /* Context snapshot for the device sides (borrowed), NULL = physical. */
    const SpyreMmuMap *map;
} SpyreDmaXfer;

/*
 * Peer-to-peer traffic of one copy (hw 1.6), counted by whoever runs it:
 * bytes read from and written to peer cards' device memory, and the
 * slowest device memory bandwidth (ddr-mbps) among the peers touched.
 */
typedef struct SpyreDmaPeer {
    uint64_t rd;
    uint64_t wr;
    uint32_t ddr_mbps;          /* UINT32_MAX: no peer touched */
} SpyreDmaPeer;

typedef struct SpyreJob {
    QSIMPLEQ_ENTRY(SpyreJob) next;
    SpyreJobKind kind;
    SpyreWorker *w;
    SpyreJobState state;        /* protected by w->lock */
    /*
     * Set (atomically) by a ring ABORT or a reset: the worker, the DMA
     * copy loop and the compute engine poll it and stop within
     * milliseconds. Never cleared.
     */
    int32_t cancel;
    /* Main loop: a reset disowned the job; its ring must not be touched. */
    bool orphan;
    unsigned ring;
    uint32_t idx;               /* ring entry of the command */
    uint32_t epoch;             /* ring epoch at submission */
    uint64_t seqno;
    uint8_t flags;
    /*
     * Set by the worker when it put the started job back into its queue
     * (time slicing: preempted); cleared when it runs again.
     */
    bool preempted;
    /* Set (atomically) by the slice timer: stop at the next instruction. */
    int32_t preempt;
    /* Translated command (ctx != 0): the snapshot it started with (a ref). */
    SpyreMmuMap *map;
    SpyreMmuFault fault;        /* status ERR_MMU_FAULT: filled by the worker */
    /* LAUNCH */
    uint64_t prog_addr;
    uint64_t prog_size;
    uint64_t result_addr;
    uint32_t num_cores;
    uint32_t num_args;
    uint32_t num_windows;
    uint64_t args[SPYRE_LAUNCH_MAX_ARGS];
    spyre_engine_window *windows;
    spyre_engine_result *res;   /* filled by the worker */
    /*
     * Worker (time slicing): the program snapshot and the engine job it
     * runs on its engine context eng (an entry of SpyreState.engines,
     * owned from the first slice until the job ends or is dropped), the
     * context switches it paid and their modeled cycles.
     */
    uint8_t *prog;
    spyre_engine_job ejob;
    int eng_slot;               /* -1: none */
    uint64_t switches;
    uint64_t switch_cycles;
    /* DMA_COPY, DMA_COPY_2D */
    SpyreDmaXfer dma;
    SpyreDmaPeer peer;          /* filled by the worker */
    uint32_t status;            /* filled by the worker */
    uint64_t cycles;
    /*
     * EXEC_TIME: QEMU_CLOCK_VIRTUAL when the worker took the job, and the
     * time it ran before (protected by w->lock).
     */
    int64_t run_start_ns;
    int64_t exec_ns;
} SpyreJob;

/*
 * A worker thread with a FIFO of jobs (spyre-worker.c). queue, done,
 * running, stop and the jobs' state are protected by lock. The worker never
 * takes the BQL and never waits for anything but its queue: host memory is
 * reached only as directly mapped RAM (spyre_host_read/write), so the main
 * loop may wait for it with the BQL held (PCI reset, unrealize).
 */
struct SpyreWorker {
    SpyreState *s;
    const char *name;
    /*
     * Worker thread, no BQL: execute the job. false: it is not finished
     * (preempted); the worker queues it again behind the others.
     */
    bool (*run)(SpyreState *s, SpyreWorker *w, SpyreJob *j);
    /*
     * Main loop: account the job and, if live, complete its command
     * (a cancelled job is never live).
     */
    uint32_t (*complete)(SpyreState *s, SpyreJob *j, bool live);

    QemuThread thread;
    bool started;
    QemuMutex lock;
    QemuCond cond;              /* worker: work queued or stop */
    QemuCond idle_cond;         /* main loop: the running job finished */
    QSIMPLEQ_HEAD(, SpyreJob) queue;
    QSIMPLEQ_HEAD(, SpyreJob) done;
    SpyreJob *running;
    bool stop;
    QEMUBH *bh;                 /* completions -> guest */
};

struct SpyreState {
    PCIDevice parent_obj;

    MemoryRegion regs;
    MemoryRegion devmem;
    uint8_t *devmem_ptr;
    QEMUBH *bh;

    /* Properties. */
    uint64_t devmem_size;
    uint32_t num_rings;
    uint32_t num_cores;
    uint32_t lx_size;
    uint32_t clock_mhz;
    uint32_t ddr_mbps;          /* device memory bandwidth, MB/s */
    uint32_t pcie_mbps;         /* host <-> card DMA bandwidth, MB/s */
    bool p2p;                   /* p2p: copies may reach peer cards' BAR2 */
    uint32_t p2p_mbps;          /* peer link bandwidth, MB/s */
    uint32_t ring_bytes_per_cycle;
    uint32_t power_cap_mw;
    uint16_t vendor_id;
    uint16_t device_id;
    uint32_t engine_threads;
    uint32_t mmu_cache_runs;    /* x-mmu-cache-runs: translation cache size */
    bool fault_inject_enabled;  /* x-fault-inject */
    bool timeslice;             /* timeslice: share the engine between rings */
    uint32_t timeslice_ms;      /* timeslice-ms: the quantum */
    QEMUTimer *slice_timer;     /* main loop: ends the running launch's slice */

    /* Global registers. */
    uint32_t status;
    uint32_t scratch;
    uint32_t intr_status;
    uint32_t intr_mask;
    uint32_t error_code;
    uint32_t fault_inject;
    uint32_t fault_hang;
    /*
     * A WEDGE hang outlived a register RESET: STATUS stays RESETTING until
     * a PCI reset.
     */
    bool wedged;
    /* Jobs handed to a worker and not yet reaped on the main loop. */
    unsigned jobs_outstanding;

    SpyreRing rings[SPYRE_NUM_RINGS_MAX];
    unsigned next_ring;         /* round-robin start of the next BH run */

    SpyreMmu mmu;

    /* Telemetry (survive device reset). */
    uint64_t tele_cmds;
    uint64_t tele_h2d;
    uint64_t tele_d2h;
    uint64_t tele_d2d;
    uint64_t tele_p2p_rd;
    uint64_t tele_p2p_wr;
    uint32_t tele_errors;
    uint32_t tele_resets;
    uint32_t tele_hi_latch;     /* HI half latched by the last LO read */
    bool powered_on;            /* first reset after realize is power-on */

    uint32_t tele_launch_errors;
    uint64_t tele_launches;
    uint64_t tele_eng_cycles;
    uint64_t tele_eng_instrs;
    uint64_t tele_eng_macs;
    uint64_t tele_eng_ddr_rd;
    uint64_t tele_eng_ddr_wr;
    uint64_t tele_eng_ring;
    uint64_t tele_eng_switches;
    uint64_t tele_eng_switch_cycles;
    SpyreCoreTele tele_core[SPYRE_LAUNCH_MAX_CORES];

    /*
     * Worker threads: the compute engine runs LAUNCHes, the DMA worker runs
     * large DMA_COPYs. engines are the compute engine's contexts: a started
     * launch owns one (engine_owner) until it ends, so a preempted launch
     * keeps its cores' state and scratchpads there (at most one per ring).
     * Created by the engine worker when needed; engine_owner is protected
     * by engine_worker.lock.
     */
    SpyreWorker engine_worker;
    SpyreWorker dma_worker;
    spyre_engine *engines[SPYRE_NUM_RINGS_MAX];
    SpyreJob *engine_owner[SPYRE_NUM_RINGS_MAX];
    spyre_engine_config engine_cfg;

    /*
     * Modeled clock (1.7, hardware.md section 11): the cycle each unit is
     * free again, and the latest end of any completion posted so far.
     * Cleared by a reset.
     */
    uint64_t clk_unit[SPYRE_CLK_UNITS];
    uint64_t clk_posted;

    /*
     * Semaphores (hw 1.8, spyre-sem.c): a command completed since the
     * waiting SEM_WAITs were last checked; the timer that re-checks them
     * (SPYRE_SEM_POLL_US) and ends them at their timeout.
     */
    bool sem_kick;
    QEMUTimer *sem_timer;

    /* Thermal/power model: decaying busy time, see spyre_update_load(). */
    double heat_ns;
    int64_t heat_stamp_ns;
};

/* spyre.c */
void spyre_raise(SpyreState *s, uint32_t causes);
void spyre_update_load(SpyreState *s, uint64_t busy_cycles);
void spyre_reset_progress(SpyreState *s);

/* spyre-ring.c */
void spyre_ring_write(SpyreState *s, unsigned n, unsigned reg, uint32_t val);
uint32_t spyre_ring_read(SpyreState *s, unsigned n, unsigned reg);
void spyre_ring_reset(SpyreRing *r);
void spyre_ring_bh(void *opaque);
bool spyre_ring_busy(const SpyreRing *r);

/* Status of a command handed to a worker (internal, never in a completion). */
#define SPYRE_STATUS_QUEUED         0xffffffffu
/* Status of a command that hangs (FAULT_HANG; internal). */
#define SPYRE_STATUS_HUNG           0xfffffffdu
/* Status of a SEM_WAIT that holds its ring (internal). */
#define SPYRE_STATUS_SEM_WAITING    0xfffffffcu

/* spyre-dma.c */
uint32_t spyre_dma_copy(SpyreState *s, unsigned n, uint32_t idx,
                        const struct spyre_hw_cmd *c, uint64_t *cycles,
                        SpyreMmuFault *fault);
uint32_t spyre_dma_copy_2d(SpyreState *s, unsigned n, uint32_t idx,
                           const struct spyre_hw_cmd *c, uint64_t *cycles,
                           SpyreMmuFault *fault);
uint64_t spyre_dma_cmd_bytes(const struct spyre_hw_cmd *c);
uint64_t spyre_dma_cycles(SpyreState *s, bool src_host, bool dst_host,
                          uint64_t bytes);
uint64_t spyre_dma_peer_cycles(SpyreState *s, bool src_host, bool dst_host,
                               uint64_t bytes, const SpyreDmaPeer *pp);
void spyre_dma_worker_init(SpyreState *s);
bool spyre_host_read(SpyreState *s, uint64_t addr, void *buf, uint64_t len);
bool spyre_host_write(SpyreState *s, uint64_t addr, const void *buf,
                      uint64_t len);
bool spyre_dev_range_ok(uint64_t limit, uint64_t addr, uint64_t offset,
                        uint64_t size);
uint32_t spyre_dma_side_rw(SpyreState *s, uint64_t addr, bool host,
                           const SpyreMmuMap *map, uint64_t off, void *buf,
                           uint64_t len, bool is_write, SpyreMmuFault *fault,
                           SpyreDmaPeer *pp);

/* spyre-ring.c */
uint32_t spyre_ring_complete(SpyreState *s, unsigned n, uint32_t idx,
                             uint64_t seqno, uint8_t flags, uint32_t st,
                             uint32_t detail, uint64_t cycles,
                             SpyreClkUnit unit);
uint64_t spyre_clock_ready(SpyreState *s, unsigned n, uint32_t idx);

/* spyre-sem.c */
uint32_t spyre_sem_signal(SpyreState *s, unsigned n, uint32_t idx,
                          const struct spyre_hw_cmd *c, uint64_t *cycles,
                          SpyreMmuFault *fault);
uint32_t spyre_sem_wait(SpyreState *s, unsigned n, uint32_t idx,
                        const struct spyre_hw_cmd *c, uint64_t *cycles,
                        SpyreMmuFault *fault);
uint32_t spyre_sem_poll(SpyreState *s);
void spyre_sem_cancel(SpyreState *s, unsigned n);
void spyre_sem_init(SpyreState *s);
void spyre_sem_fini(SpyreState *s);

/* spyre-launch.c */
uint32_t spyre_launch_submit(SpyreState *s, unsigned n, uint32_t idx,
                             const struct spyre_hw_cmd *c, uint64_t *cycles,
                             SpyreMmuFault *fault);
void spyre_launch_worker_init(SpyreState *s);
void spyre_launch_worker_fini(SpyreState *s);
void spyre_launch_slice_kick(SpyreState *s);

/* spyre-worker.c */
SpyreJob *spyre_job_new(SpyreState *s, SpyreJobKind kind, unsigned n,
                        uint32_t idx, const struct spyre_hw_cmd *c);
void spyre_job_free(SpyreJob *j);
void spyre_worker_init(SpyreState *s, SpyreWorker *w, const char *name);
void spyre_worker_submit(SpyreWorker *w, SpyreJob *j);
void spyre_worker_abort(SpyreState *s, SpyreJob *j);
int64_t spyre_worker_exec_ns(SpyreJob *j, bool *running);
void spyre_worker_disown_all(SpyreWorker *w, bool wait);
void spyre_worker_fini(SpyreWorker *w);

#endif /* HW_MISC_SPYRE_H */
