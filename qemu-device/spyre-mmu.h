/*
 * Spyre-style PCIe AI accelerator model: card MMU (hardware.md section 15).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MISC_SPYRE_MMU_H
#define HW_MISC_SPYRE_MMU_H

#include "spyre_hw.h"
#include "spyre/engine.h"

typedef struct SpyreState SpyreState;

#define SPYRE_MMU_VA_LIMIT      (1ULL << SPYRE_MMU_VA_BITS)

/*
 * Translation cache (hardware.md section 15): the card caches at most
 * x-mmu-cache-runs runs (merged pages) for all contexts together, counted
 * from a snapshot's walk until the last command using it completes; one
 * context's mapping at most 1/16 of that (one per ring could be in use by
 * running commands, so a fill always fits once idle snapshots are evicted).
 * A walk reads at most SPYRE_MMU_WALK_TABLES tables (more with more than
 * 4 GiB of device memory: devmem-size / 1 MiB). A context that does
 * not fit faults with SPYRE_MMU_FAULT_CACHE. A run costs at most
 * SPYRE_MMU_RUN_BYTES of host memory.
 */
#define SPYRE_MMU_CACHE_RUNS    (1u << 21)
#define SPYRE_MMU_CACHE_RUNS_MAX (1u << 26)
#define SPYRE_MMU_CTX_SHARE     SPYRE_NUM_RINGS_MAX
#define SPYRE_MMU_WALK_TABLES   4096
#define SPYRE_MMU_RUN_BYTES     64

/* A run of pages contiguous in both address spaces, with one permission. */
typedef struct SpyreMmuRun {
    uint64_t va;
    uint64_t pa;                /* device offset, or host DMA address */
    uint64_t len;
    uint32_t pte;               /* SPYRE_MMU_WRITE | SPYRE_MMU_HOST */
} SpyreMmuRun;

/*
 * Immutable snapshot of one context's whole mapping, read at its first use
 * after an invalidation. Shared by the cache and the commands that use it
 * (refcounted: a running command keeps the translations it started with).
 * runs: every run, sorted by va. dev: the device runs in the engine's
 * format, for LAUNCH (a core may not reach HOST pages).
 */
typedef struct SpyreMmuMap {
    int refs;
    unsigned ctx;
    /*
     * The context does not fit the cache (too many runs or tables): no
     * runs, every translated command of the context faults with CACHE.
     */
    bool overflow;
    uint64_t last_use;          /* main loop: LRU stamp of the cache */
    uint64_t *live;             /* the cache's run count, for unref */
    uint32_t num_runs;
    SpyreMmuRun *runs;
    uint32_t num_dev;
    spyre_engine_mapping *dev;
} SpyreMmuMap;

/* A translation fault: what FAULT_ADDR / FAULT_INFO latch. */
typedef struct SpyreMmuFault {
    uint64_t va;
    uint32_t info;              /* SPYRE_MMU_FAULT_* without VALID */
} SpyreMmuFault;

typedef struct SpyreMmu {
    uint64_t ctx_base;          /* MMU_CTX_BASE (bits 11:0 read 0) */
    SpyreMmuMap *cache[SPYRE_MMU_NUM_CTX];
    /* Runs of every live snapshot, cached or in use (atomic). */
    uint64_t live_runs;
    uint64_t use_clock;         /* LRU stamps */
    uint32_t tele_faults;       /* TELE_MMU_FAULTS (survives reset) */
    uint32_t fault_next;        /* FAULT_MMU: translated commands to fault */
} SpyreMmu;

/* Registers and reset (main loop). */
void spyre_mmu_write_base(SpyreState *s, bool hi, uint32_t val);
uint32_t spyre_mmu_read_base(SpyreState *s, bool hi);
void spyre_mmu_invalidate(SpyreState *s, uint32_t val);
void spyre_mmu_reset(SpyreState *s);

/*
 * Main loop: the snapshot of context ctx (1 .. 255) with a reference for
 * the caller, walking the tables if it is not cached. NULL with *st =
 * ERR_HOST_DMA if a table cannot be read.
 */
SpyreMmuMap *spyre_mmu_get(SpyreState *s, unsigned ctx, uint32_t *st);
SpyreMmuMap *spyre_mmu_ref(SpyreMmuMap *m);
void spyre_mmu_unref(SpyreMmuMap *m);

/*
 * Any thread: the run of m that contains va, or NULL. *hint (a run index,
 * start at 0) makes nearby look-ups cheap.
 */
const SpyreMmuRun *spyre_mmu_lookup(const SpyreMmuMap *m, uint64_t va,
                                    uint32_t *hint);
/* Any thread: index of the first run of m that ends after va. */
uint32_t spyre_mmu_first(const SpyreMmuMap *m, uint64_t va);
/*
 * Any thread: true if [va, va + len) is mapped with the access (a
 * SPYRE_MMU_FAULT_* kind; write needs WRITE, fetch a device page); else
 * false with the fault of its first failing byte in *f (ENGINE not set).
 */
bool spyre_mmu_check(const SpyreMmuMap *m, uint64_t va, uint64_t len,
                     unsigned access, uint32_t *hint, SpyreMmuFault *f);
/*
 * Main loop: mark the device pages of [va, va + len) dirty; returns the
 * number of ranges marked (one per run met).
 */
uint64_t spyre_mmu_set_dirty(SpyreState *s, const SpyreMmuMap *m,
                             uint64_t va, uint64_t len);
/*
 * Main loop: mark the device pages of n windows dirty (through m, or
 * untranslated if m is NULL), each page once however the windows overlap:
 * work proportional to the windows and the runs they meet.
 */
void spyre_mmu_set_dirty_windows(SpyreState *s, const SpyreMmuMap *m,
                                 const spyre_engine_window *w, unsigned n);
void spyre_mmu_fault_set(SpyreMmuFault *f, unsigned ctx, uint64_t va,
                         unsigned access, bool engine);
/*
 * Main loop: true (with the fault in *f) if this translated command faults
 * at its first translated access (va, with the access kind) before any
 * translation: its context does not fit the cache (m->overflow, fault with
 * CACHE), or FAULT_MMU makes it fault.
 */
bool spyre_mmu_fault_first(SpyreState *s, const SpyreMmuMap *m, uint64_t va,
                           unsigned access, SpyreMmuFault *f);

/*
 * Main loop: latch a fault in ring n's FAULT_* registers (if none is
 * latched), count it; returns the completion detail (FAULT_INFO value).
 */
uint32_t spyre_mmu_report(SpyreState *s, unsigned n, const SpyreMmuFault *f);
uint32_t spyre_mmu_ring_read(SpyreState *s, unsigned n, unsigned reg);
void spyre_mmu_ring_write(SpyreState *s, unsigned n, unsigned reg,
                          uint32_t val);

#endif /* HW_MISC_SPYRE_MMU_H */
