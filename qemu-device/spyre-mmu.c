/*
 * Spyre-style PCIe AI accelerator model: card MMU (hardware.md section 15).
 *
 * Commands with a non-zero context id address device memory through that
 * context's three-level page table in host memory. The model caches a
 * context's whole mapping at its first use after an invalidation: the
 * tables are walked once, on the main loop where commands are validated,
 * into an immutable snapshot (SpyreMmuMap: sorted runs of pages contiguous
 * in both address spaces). Commands take a reference to the snapshot they
 * start with and use it on any thread, so a table changed without
 * MMU_INVALIDATE shows as a stale translation, as with a hardware TLB, and
 * a running command is never affected by an invalidation.
 *
 * The cache has a fixed size (x-mmu-cache-runs): a fill evicts the least
 * recently used snapshots of other contexts until every live snapshot
 * (cached, or still used by a command) fits; a walk reads a bounded number
 * of tables and keeps a bounded number of runs, or the context faults with
 * FAULT_INFO.CACHE until it is invalidated.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/bitops.h"
#include "qemu/log.h"
#include "exec/memory.h"
#include "spyre.h"
#include "trace.h"

#define SPYRE_MMU_ENTRIES       (1u << SPYRE_MMU_LEVEL_BITS)
#define SPYRE_MMU_L2_SHIFT      (SPYRE_MMU_PAGE_SHIFT + SPYRE_MMU_LEVEL_BITS)
#define SPYRE_MMU_L1_SHIFT      (SPYRE_MMU_L2_SHIFT + SPYRE_MMU_LEVEL_BITS)

QEMU_BUILD_BUG_ON(SPYRE_MMU_L1_SHIFT + SPYRE_MMU_LEVEL_BITS !=
                  SPYRE_MMU_VA_BITS);

/* ---- Snapshots ---- */

SpyreMmuMap *spyre_mmu_ref(SpyreMmuMap *m)
{
    if (m) {
        qatomic_inc(&m->refs);
    }
    return m;
}

void spyre_mmu_unref(SpyreMmuMap *m)
{
    if (m && qatomic_fetch_dec(&m->refs) == 1) {
        if (m->live) {
            qatomic_sub(m->live, m->num_runs);
        }
        g_free(m->runs);
        g_free(m->dev);
        g_free(m);
    }
}

/* The walk's output: runs in ascending VA order, merged as they come. */
typedef struct SpyreMmuWalk {
    GArray *runs;
    uint32_t max_runs;          /* a context's share of the cache */
    uint32_t tables;            /* tables read */
    uint32_t max_tables;        /* spyre_mmu_walk_tables() */
    bool overflow;              /* max_runs or max_tables passed */
    uint64_t stop_va;           /* where the walk stopped */
} SpyreMmuWalk;

static void spyre_mmu_add_page(SpyreMmuWalk *w, uint64_t va, uint64_t pa,
                               uint32_t pte)
{
    SpyreMmuRun *last = w->runs->len ?
        &g_array_index(w->runs, SpyreMmuRun, w->runs->len - 1) : NULL;
    SpyreMmuRun r = { .va = va, .pa = pa, .len = SPYRE_MMU_PAGE_SIZE,
                      .pte = pte };

    if (last && last->va + last->len == va && last->pa + last->len == pa &&
        last->pte == pte) {
        last->len += SPYRE_MMU_PAGE_SIZE;
        return;
    }
    if (w->runs->len >= w->max_runs) {
        w->overflow = true;
        w->stop_va = va;
        return;
    }
    g_array_append_val(w->runs, r);
}

/*
 * Read one table (512 little-endian entries) from host memory, covering VA
 * va, if the walk's budget allows (else w->overflow).
 */
static bool spyre_mmu_read_table(SpyreState *s, SpyreMmuWalk *w, uint64_t va,
                                 uint64_t addr, uint64_t *t)
{
    unsigned i;

    if (w->tables >= w->max_tables) {
        w->overflow = true;
        w->stop_va = va;
        memset(t, 0, SPYRE_MMU_ENTRIES * sizeof(*t));
        return true;
    }
    w->tables++;
    if (!spyre_host_read(s, addr, t, SPYRE_MMU_ENTRIES * sizeof(*t))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: MMU: cannot read page table at 0x%" PRIx64 "\n",
                      addr);
        return false;
    }
    for (i = 0; i < SPYRE_MMU_ENTRIES; i++) {
        t[i] = le64_to_cpu(t[i]);
    }
    return true;
}

/* A level-1/2 entry that points to a table (anything else is a hole). */
static bool spyre_mmu_dir_ok(uint64_t e)
{
    return (e & SPYRE_MMU_VALID) &&
           !(e & (SPYRE_MMU_WRITE | SPYRE_MMU_HOST | SPYRE_MMU_RSVD_MASK));
}

/* Add the pages of one level-3 table covering VA base. */
static void spyre_mmu_walk_l3(SpyreState *s, SpyreMmuWalk *w, uint64_t base,
                              const uint64_t *pt)
{
    unsigned i;

    for (i = 0; i < SPYRE_MMU_ENTRIES && !w->overflow; i++) {
        uint64_t e = pt[i];
        uint64_t pa = e & SPYRE_MMU_ADDR_MASK;

        if (!(e & SPYRE_MMU_VALID) || (e & SPYRE_MMU_RSVD_MASK)) {
            continue;
        }
        if (!(e & SPYRE_MMU_HOST) &&
            (pa >= s->devmem_size ||
             s->devmem_size - pa < SPYRE_MMU_PAGE_SIZE)) {
            continue;
        }
        spyre_mmu_add_page(w, base + ((uint64_t)i << SPYRE_MMU_PAGE_SHIFT),
                           pa, e & (SPYRE_MMU_WRITE | SPYRE_MMU_HOST));
    }
}

/* Walk the tables of a context whose level-1 table is at l1. */
static bool spyre_mmu_walk(SpyreState *s, SpyreMmuWalk *w, uint64_t l1)
{
    g_autofree uint64_t *t1 = g_new(uint64_t, SPYRE_MMU_ENTRIES);
    g_autofree uint64_t *t2 = g_new(uint64_t, SPYRE_MMU_ENTRIES);
    g_autofree uint64_t *t3 = g_new(uint64_t, SPYRE_MMU_ENTRIES);
    unsigned i, j;

    if (!spyre_mmu_read_table(s, w, 0, l1, t1)) {
        return false;
    }
    for (i = 0; i < SPYRE_MMU_ENTRIES && !w->overflow; i++) {
        uint64_t va1 = (uint64_t)i << SPYRE_MMU_L1_SHIFT;

        if (!spyre_mmu_dir_ok(t1[i])) {
            continue;
        }
        if (!spyre_mmu_read_table(s, w, va1, t1[i] & SPYRE_MMU_ADDR_MASK,
                                  t2)) {
            return false;
        }
        for (j = 0; j < SPYRE_MMU_ENTRIES && !w->overflow; j++) {
            uint64_t va2 = va1 | (uint64_t)j << SPYRE_MMU_L2_SHIFT;

            if (!spyre_mmu_dir_ok(t2[j])) {
                continue;
            }
            if (!spyre_mmu_read_table(s, w, va2, t2[j] & SPYRE_MMU_ADDR_MASK,
                                      t3)) {
                return false;
            }
            if (!w->overflow) {
                spyre_mmu_walk_l3(s, w, va2, t3);
            }
        }
    }
    return true;
}

/* The engine's view of m: its device runs (never empty, so never NULL). */
static void spyre_mmu_build_dev(SpyreMmuMap *m)
{
    uint32_t i, n = 0;

    for (i = 0; i < m->num_runs; i++) {
        n += !(m->runs[i].pte & SPYRE_MMU_HOST);
    }
    m->dev = g_new0(spyre_engine_mapping, MAX(n, 1));
    for (i = 0; i < m->num_runs; i++) {
        const SpyreMmuRun *r = &m->runs[i];
        spyre_engine_mapping *d = &m->dev[m->num_dev];

        if (r->pte & SPYRE_MMU_HOST) {
            continue;
        }
        d->va = r->va;
        d->pa = r->pa;
        d->len = r->len;
        d->flags = r->pte & SPYRE_MMU_WRITE ? SPYRE_ENGINE_MAP_WRITE : 0;
        m->num_dev++;
    }
}

/*
 * Tables a walk may read: SPYRE_MMU_WALK_TABLES, or twice the level-3
 * tables that map all of device memory once if that is more.
 */
static uint32_t spyre_mmu_walk_tables(SpyreState *s)
{
    return MAX(SPYRE_MMU_WALK_TABLES, s->devmem_size >> 20);
}

/* A context's share of the cache: its mapping holds at most this many runs. */
static uint32_t spyre_mmu_ctx_runs(SpyreState *s)
{
    return s->mmu_cache_runs / SPYRE_MMU_CTX_SHARE;
}

/*
 * Make room for n more runs beside the live snapshots: drop the least
 * recently used cached snapshots of other contexts, those no command uses
 * first (dropping one in use frees nothing until its command completes).
 * False if n does not fit even then (cannot happen with one command in use
 * per ring and a context's share of 1/16).
 */
static bool spyre_mmu_make_room(SpyreState *s, unsigned ctx, uint64_t n)
{
    SpyreMmu *mmu = &s->mmu;

    while (qatomic_read(&mmu->live_runs) + n > s->mmu_cache_runs) {
        unsigned i, victim = 0;
        bool victim_idle = false;

        for (i = 1; i < SPYRE_MMU_NUM_CTX; i++) {
            SpyreMmuMap *m = mmu->cache[i];
            bool idle;

            if (i == ctx || !m || !m->num_runs) {
                continue;
            }
            idle = qatomic_read(&m->refs) == 1;
            if (!victim || (idle && !victim_idle) ||
                (idle == victim_idle &&
                 m->last_use < mmu->cache[victim]->last_use)) {
                victim = i;
                victim_idle = idle;
            }
        }
        if (!victim) {
            return false;
        }
        trace_spyre_mmu_evict(victim, mmu->cache[victim]->num_runs,
                              victim_idle, qatomic_read(&mmu->live_runs), ctx,
                              n);
        spyre_mmu_unref(mmu->cache[victim]);
        mmu->cache[victim] = NULL;
    }
    return true;
}

/*
 * Build the snapshot of context ctx from the tables in host memory. An
 * invalid context (or MMU_CTX_BASE = 0) maps nothing; one that does not fit
 * the cache is an overflow snapshot (no runs).
 */
static SpyreMmuMap *spyre_mmu_build(SpyreState *s, unsigned ctx, uint32_t *st)
{
    SpyreMmuWalk w = {
        .runs = g_array_new(false, false, sizeof(SpyreMmuRun)),
        .max_runs = spyre_mmu_ctx_runs(s),
        .max_tables = spyre_mmu_walk_tables(s),
    };
    uint64_t entry = 0, addr = s->mmu.ctx_base + ctx * sizeof(uint64_t);
    SpyreMmuMap *m;

    if (s->mmu.ctx_base) {
        if (!spyre_host_read(s, addr, &entry, sizeof(entry))) {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: MMU: cannot read context entry %u at 0x%"
                          PRIx64 "\n", ctx, addr);
            goto host_error;
        }
        entry = le64_to_cpu(entry);
    }
    if ((entry & SPYRE_MMU_VALID) &&
        !spyre_mmu_walk(s, &w, entry & SPYRE_MMU_ADDR_MASK)) {
        goto host_error;
    }
    if (!w.overflow && !spyre_mmu_make_room(s, ctx, w.runs->len)) {
        w.overflow = true;
        w.stop_va = 0;
    }
    m = g_new0(SpyreMmuMap, 1);
    m->refs = 1;
    m->ctx = ctx;
    if (w.overflow) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: MMU: context %u does not fit the translation "
                      "cache (walk stopped at VA 0x%" PRIx64 " after %u "
                      "tables and %u runs; limits %u tables, %u runs): its "
                      "commands fault (CACHE) until it is invalidated\n",
                      ctx, w.stop_va, w.tables, w.runs->len,
                      w.max_tables, spyre_mmu_ctx_runs(s));
        trace_spyre_mmu_overflow(ctx, w.stop_va, w.tables, w.runs->len);
        g_array_free(w.runs, true);
        m->overflow = true;
        m->dev = g_new0(spyre_engine_mapping, 1);
        *st = SPYRE_STATUS_OK;
        return m;
    }
    m->num_runs = w.runs->len;
    m->runs = (SpyreMmuRun *)g_array_free(w.runs, false);
    /* No slack from the array's growth: the cache counts what it keeps. */
    m->runs = g_renew(SpyreMmuRun, m->runs, MAX(m->num_runs, 1));
    spyre_mmu_build_dev(m);
    m->live = &s->mmu.live_runs;
    qatomic_add(m->live, m->num_runs);
    trace_spyre_mmu_walk(ctx, entry, m->num_runs, w.tables,
                         qatomic_read(m->live));
    *st = SPYRE_STATUS_OK;
    return m;

host_error:
    g_array_free(w.runs, true);
    trace_spyre_mmu_walk_failed(ctx);
    *st = SPYRE_STATUS_ERR_HOST_DMA;
    return NULL;
}

SpyreMmuMap *spyre_mmu_get(SpyreState *s, unsigned ctx, uint32_t *st)
{
    assert(ctx && ctx < SPYRE_MMU_NUM_CTX);
    if (!s->mmu.cache[ctx]) {
        s->mmu.cache[ctx] = spyre_mmu_build(s, ctx, st);
        if (!s->mmu.cache[ctx]) {
            return NULL;
        }
    }
    s->mmu.cache[ctx]->last_use = ++s->mmu.use_clock;
    *st = SPYRE_STATUS_OK;
    return spyre_mmu_ref(s->mmu.cache[ctx]);
}

/* ---- Look-ups (any thread: snapshots are immutable) ---- */

uint32_t spyre_mmu_first(const SpyreMmuMap *m, uint64_t va)
{
    uint32_t lo = 0, hi = m->num_runs;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const SpyreMmuRun *r = &m->runs[mid];

        if (r->va + r->len <= va) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

const SpyreMmuRun *spyre_mmu_lookup(const SpyreMmuMap *m, uint64_t va,
                                    uint32_t *hint)
{
    uint32_t lo = 0, hi = m->num_runs, h = *hint;
    const SpyreMmuRun *r;

    /* The last run used, or the next one (accesses mostly ascend). */
    if (h < m->num_runs) {
        r = &m->runs[h];
        if (va >= r->va && va - r->va < r->len) {
            return r;
        }
        if (h + 1 < m->num_runs && va >= r[1].va && va - r[1].va < r[1].len) {
            *hint = h + 1;
            return &r[1];
        }
    }
    /* The last run with va >= run.va. */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (m->runs[mid].va <= va) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (!lo) {
        return NULL;
    }
    r = &m->runs[lo - 1];
    if (va - r->va >= r->len) {
        return NULL;
    }
    *hint = lo - 1;
    return r;
}

void spyre_mmu_fault_set(SpyreMmuFault *f, unsigned ctx, uint64_t va,
                         unsigned access, bool engine)
{
    f->va = va;
    f->info = (ctx & SPYRE_MMU_FAULT_CTX_MASK) |
              (access << SPYRE_MMU_FAULT_ACCESS_SHIFT) |
              (engine ? SPYRE_MMU_FAULT_ENGINE : 0);
}

bool spyre_mmu_check(const SpyreMmuMap *m, uint64_t va, uint64_t len,
                     unsigned access, uint32_t *hint, SpyreMmuFault *f)
{
    while (len) {
        const SpyreMmuRun *r = NULL;
        uint64_t n;

        if (va < SPYRE_MMU_VA_LIMIT) {
            r = spyre_mmu_lookup(m, va, hint);
        }
        if (!r || (access == SPYRE_MMU_FAULT_WRITE &&
                   !(r->pte & SPYRE_MMU_WRITE)) ||
            (access == SPYRE_MMU_FAULT_FETCH && (r->pte & SPYRE_MMU_HOST))) {
            spyre_mmu_fault_set(f, m->ctx, va, access, false);
            return false;
        }
        n = MIN(len, r->va + r->len - va);
        va += n;
        len -= n;
    }
    return true;
}

uint64_t spyre_mmu_set_dirty(SpyreState *s, const SpyreMmuMap *m,
                             uint64_t va, uint64_t len)
{
    uint64_t marked = 0;
    uint32_t i;

    for (i = spyre_mmu_first(m, va);
         i < m->num_runs && m->runs[i].va < va + len; i++) {
        const SpyreMmuRun *r = &m->runs[i];
        uint64_t lo = MAX(va, r->va);
        uint64_t hi = MIN(va + len, r->va + r->len);

        if (!(r->pte & SPYRE_MMU_HOST)) {
            memory_region_set_dirty(&s->devmem, r->pa + (lo - r->va),
                                    hi - lo);
            marked++;
        }
    }
    return marked;
}

static int spyre_window_cmp(const void *a, const void *b)
{
    const spyre_engine_window *x = a, *y = b;

    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

void spyre_mmu_set_dirty_windows(SpyreState *s, const SpyreMmuMap *m,
                                 const spyre_engine_window *w, unsigned n)
{
    g_autofree spyre_engine_window *v = NULL;
    uint64_t marked = 0;
    unsigned i, j, merged = 0;

    if (!n) {
        return;
    }
    /* Sorted, overlapping windows merged: disjoint ranges, ascending. */
    v = g_memdup2(w, n * sizeof(*w));
    qsort(v, n, sizeof(*v), spyre_window_cmp);
    for (i = 0; i < n; i = j) {
        uint64_t lo = v[i].addr, hi = v[i].addr + v[i].size;

        for (j = i + 1; j < n && v[j].addr <= hi; j++) {
            hi = MAX(hi, v[j].addr + v[j].size);
        }
        if (hi == lo) {
            continue;
        }
        merged++;
        if (m) {
            marked += spyre_mmu_set_dirty(s, m, lo, hi - lo);
        } else {
            memory_region_set_dirty(&s->devmem, lo, hi - lo);
            marked++;
        }
    }
    trace_spyre_mmu_dirty(m ? m->ctx : 0, n, merged, marked);
}

/* ---- Registers (main loop) ---- */

static void spyre_mmu_drop(SpyreState *s, unsigned ctx)
{
    spyre_mmu_unref(s->mmu.cache[ctx]);
    s->mmu.cache[ctx] = NULL;
}

static void spyre_mmu_drop_all(SpyreState *s)
{
    unsigned i;

    for (i = 1; i < SPYRE_MMU_NUM_CTX; i++) {
        spyre_mmu_drop(s, i);
    }
}

void spyre_mmu_write_base(SpyreState *s, bool hi, uint32_t val)
{
    s->mmu.ctx_base = deposit64(s->mmu.ctx_base, hi ? 32 : 0, 32, val) &
                      SPYRE_MMU_ADDR_MASK;
    spyre_mmu_drop_all(s);
    trace_spyre_mmu_invalidate(SPYRE_MMU_INV_ALL);
}

uint32_t spyre_mmu_read_base(SpyreState *s, bool hi)
{
    return hi ? s->mmu.ctx_base >> 32 : (uint32_t)s->mmu.ctx_base;
}

void spyre_mmu_invalidate(SpyreState *s, uint32_t val)
{
    uint32_t known = SPYRE_MMU_INV_ALL | SPYRE_MMU_INV_CTX_MASK;

    if (val & ~known) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: MMU_INVALIDATE: reserved bits 0x%08x ignored\n",
                      val & ~known);
    }
    trace_spyre_mmu_invalidate(val & known);
    if (val & SPYRE_MMU_INV_ALL) {
        spyre_mmu_drop_all(s);
    } else if (val & SPYRE_MMU_INV_CTX_MASK) {
        spyre_mmu_drop(s, val & SPYRE_MMU_INV_CTX_MASK);
    }
}

bool spyre_mmu_fault_first(SpyreState *s, const SpyreMmuMap *m, uint64_t va,
                           unsigned access, SpyreMmuFault *f)
{
    if (m->overflow) {
        spyre_mmu_fault_set(f, m->ctx, va, access, false);
        f->info |= SPYRE_MMU_FAULT_CACHE;
        return true;
    }
    if (!s->mmu.fault_next) {
        return false;
    }
    s->mmu.fault_next--;
    spyre_mmu_fault_set(f, m->ctx, va, access, false);
    return true;
}

void spyre_mmu_reset(SpyreState *s)
{
    s->mmu.ctx_base = 0;
    s->mmu.fault_next = 0;
    spyre_mmu_drop_all(s);
}

/* ---- Fault registers (per ring) ---- */

uint32_t spyre_mmu_report(SpyreState *s, unsigned n, const SpyreMmuFault *f)
{
    SpyreRing *r = &s->rings[n];
    uint32_t info = f->info | SPYRE_MMU_FAULT_VALID;

    trace_spyre_mmu_fault(n, f->va, info);
    qemu_log_mask(LOG_GUEST_ERROR,
                  "spyre: ring %u: MMU fault: context %u VA 0x%" PRIx64
                  " access %u%s%s\n", n, info & SPYRE_MMU_FAULT_CTX_MASK,
                  f->va, (info & SPYRE_MMU_FAULT_ACCESS_MASK) >>
                  SPYRE_MMU_FAULT_ACCESS_SHIFT,
                  info & SPYRE_MMU_FAULT_ENGINE ? " (core)" : "",
                  info & SPYRE_MMU_FAULT_CACHE ?
                  " (context does not fit the translation cache)" : "");
    if (!(r->fault_info & SPYRE_MMU_FAULT_VALID)) {
        r->fault_addr = f->va;
        r->fault_info = info;
    }
    s->mmu.tele_faults++;
    return info;
}

uint32_t spyre_mmu_ring_read(SpyreState *s, unsigned n, unsigned reg)
{
    SpyreRing *r = &s->rings[n];

    switch (reg) {
    case SPYRE_RING_FAULT_ADDR_LO:
        return (uint32_t)r->fault_addr;
    case SPYRE_RING_FAULT_ADDR_HI:
        return r->fault_addr >> 32;
    default:
        return r->fault_info;
    }
}

void spyre_mmu_ring_write(SpyreState *s, unsigned n, unsigned reg,
                          uint32_t val)
{
    SpyreRing *r = &s->rings[n];

    if (reg != SPYRE_RING_FAULT_INFO) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: write to read-only FAULT_ADDR\n", n);
        return;
    }
    if (val & SPYRE_MMU_FAULT_VALID) {
        r->fault_info = 0;
        r->fault_addr = 0;
    }
}
