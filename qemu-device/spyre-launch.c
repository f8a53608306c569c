/*
 * Spyre-style PCIe AI accelerator model: LAUNCH command.
 *
 * The main loop validates a LAUNCH (command, descriptor and windows read
 * from guest memory) and queues it on the engine worker (spyre-worker.c),
 * which runs the launches in order on the compute engine (engine/, linked
 * in as a C++ library through its C API) with the device memory RAM block
 * as the engine's memory. The worker never touches guest memory or device
 * registers and needs no BQL. The completion (launch result, completion
 * entry, telemetry) is written on the main loop. A LAUNCH in an MMU
 * context runs on the snapshot of the context's mapping taken at
 * validation: the program is fetched through it and the engine translates
 * every core access through its device runs (spyre-mmu.c). An ABORT or a
 * reset sets the job's cancel flag, which the engine polls per instruction
 * and inside its kernels. With time slicing (hw 1.5) a timer ends the
 * running launch's slice while others wait: it is preempted at an
 * instruction boundary and keeps its state in its own engine context
 * (SpyreState.engines) until it runs again, ends or is dropped.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/cutils.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/timer.h"
#include "hw/pci/pci_device.h"
#include "spyre.h"
#include "trace.h"

QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_launch_desc) != 144);
QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_launch_window) != 16);
QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_launch_result) !=
                  200 + 48 * SPYRE_LAUNCH_MAX_CORES);
QEMU_BUILD_BUG_ON(SPYRE_LAUNCH_MAX_CORES != SPYRE_ENGINE_MAX_CORES);
QEMU_BUILD_BUG_ON(SPYRE_LAUNCH_MAX_ARGS != SPYRE_ENGINE_MAX_ARGS);
QEMU_BUILD_BUG_ON(SPYRE_LAUNCH_UNITS != SPYRE_UNIT_COUNT);
QEMU_BUILD_BUG_ON(SPYRE_LAUNCH_MSG_LEN != SPYRE_ENGINE_MSG_LEN);

/* ---- Validation and submission (main loop) ---- */

/* Device memory, or a context's 2^39 virtual bytes (limit). */
static bool spyre_devrange_ok(uint64_t limit, uint64_t addr, uint64_t size)
{
    return addr <= limit && size <= limit - addr;
}

/*
 * Validate LAUNCH command idx of ring n and queue it for the worker.
 * Returns SPYRE_STATUS_QUEUED, or the error status of an invalid command.
 */
uint32_t spyre_launch_submit(SpyreState *s, unsigned n, uint32_t idx,
                             const struct spyre_hw_cmd *c, uint64_t *cycles,
                             SpyreMmuFault *fault)
{
    const struct spyre_hw_cmd_launch *lc = &c->launch;
    uint64_t limit = c->hdr.ctx ? SPYRE_MMU_VA_LIMIT : s->devmem_size;
    struct spyre_hw_launch_desc desc;
    g_autofree struct spyre_hw_launch_window *win = NULL;
    SpyreMmuMap *map = NULL;
    uint32_t hint = 0, st;
    SpyreJob *l;
    unsigned i;

    *cycles = SPYRE_CYCLES_ERROR;
    if (c->hdr.flags & (SPYRE_CMD_F_SRC_HOST | SPYRE_CMD_F_DST_HOST) ||
        lc->reserved[0] || lc->reserved[1]) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: LAUNCH with reserved flags or fields "
                      "set\n", n);
        return SPYRE_STATUS_ERR_RESERVED;
    }
    if (lc->prog_size == 0 || lc->prog_size > SPYRE_LAUNCH_MAX_PROG_SIZE) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: LAUNCH program size %" PRIu64
                      " not in [1, %u]\n", n, lc->prog_size,
                      SPYRE_LAUNCH_MAX_PROG_SIZE);
        return SPYRE_STATUS_ERR_SIZE;
    }
    if (!spyre_devrange_ok(limit, lc->prog_addr, lc->prog_size)) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: LAUNCH program 0x%" PRIx64 "+0x%"
                      PRIx64 " outside %s\n", n, lc->prog_addr,
                      lc->prog_size, c->hdr.ctx ? "the context's 2^39 bytes" :
                      "device memory");
        return SPYRE_STATUS_ERR_DEV_RANGE;
    }
    if ((lc->desc_addr & 7) || (lc->result_addr & 7)) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: LAUNCH descriptor 0x%" PRIx64
                      " or result 0x%" PRIx64 " not 8-byte aligned\n", n,
                      lc->desc_addr, lc->result_addr);
        return SPYRE_STATUS_ERR_ALIGN;
    }
    if (!spyre_host_read(s, lc->desc_addr, &desc, sizeof(desc))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: LAUNCH cannot read descriptor at 0x%"
                      PRIx64 "\n", n, lc->desc_addr);
        return SPYRE_STATUS_ERR_HOST_DMA;
    }
    desc.num_cores = le32_to_cpu(desc.num_cores);
    desc.num_args = le32_to_cpu(desc.num_args);
    desc.num_windows = le32_to_cpu(desc.num_windows);
    desc.flags = le32_to_cpu(desc.flags);
    if (desc.flags) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: LAUNCH descriptor flags 0x%x\n", n,
                      desc.flags);
        return SPYRE_STATUS_ERR_RESERVED;
    }
    if (desc.num_cores > s->num_cores ||
        desc.num_args > SPYRE_LAUNCH_MAX_ARGS ||
        desc.num_windows > SPYRE_LAUNCH_MAX_WINDOWS) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: LAUNCH descriptor counts out of range "
                      "(cores %u of %u, args %u of %d, windows %u of %d)\n",
                      n, desc.num_cores, s->num_cores, desc.num_args,
                      SPYRE_LAUNCH_MAX_ARGS, desc.num_windows,
                      SPYRE_LAUNCH_MAX_WINDOWS);
        return SPYRE_STATUS_ERR_SIZE;
    }
    if (desc.num_windows) {
        win = g_new(struct spyre_hw_launch_window, desc.num_windows);
        if (!spyre_host_read(s, lc->desc_addr + sizeof(desc), win,
                             desc.num_windows * sizeof(*win))) {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: ring %u: LAUNCH cannot read %u windows at "
                          "0x%" PRIx64 "\n", n, desc.num_windows,
                          lc->desc_addr + sizeof(desc));
            return SPYRE_STATUS_ERR_HOST_DMA;
        }
    }
    for (i = 0; i < desc.num_windows; i++) {
        win[i].addr = le64_to_cpu(win[i].addr);
        win[i].size = le64_to_cpu(win[i].size);
        if (!spyre_devrange_ok(limit, win[i].addr, win[i].size)) {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: ring %u: LAUNCH window %u (0x%" PRIx64
                          "+0x%" PRIx64 ") outside %s\n", n, i,
                          win[i].addr, win[i].size, c->hdr.ctx ?
                          "the context's 2^39 bytes" : "device memory");
            return SPYRE_STATUS_ERR_DEV_RANGE;
        }
    }
    if (c->hdr.ctx) {
        /* The program image is fetched through the context's mapping. */
        map = spyre_mmu_get(s, c->hdr.ctx, &st);
        if (!map) {
            return st;
        }
        if (spyre_mmu_fault_first(s, map, lc->prog_addr,
                                  SPYRE_MMU_FAULT_FETCH, fault) ||
            !spyre_mmu_check(map, lc->prog_addr, lc->prog_size,
                             SPYRE_MMU_FAULT_FETCH, &hint, fault)) {
            spyre_mmu_unref(map);
            return SPYRE_STATUS_ERR_MMU_FAULT;
        }
    }

    l = spyre_job_new(s, SPYRE_JOB_LAUNCH, n, idx, c);
    l->map = map;
    l->prog_addr = lc->prog_addr;
    l->prog_size = lc->prog_size;
    l->result_addr = lc->result_addr;
    l->num_cores = desc.num_cores;
    l->num_args = desc.num_args;
    l->num_windows = desc.num_windows;
    for (i = 0; i < desc.num_args; i++) {
        l->args[i] = le64_to_cpu(desc.args[i]);
    }
    l->windows = g_new0(spyre_engine_window, MAX(desc.num_windows, 1));
    for (i = 0; i < desc.num_windows; i++) {
        l->windows[i].addr = win[i].addr;
        l->windows[i].size = win[i].size;
    }
    trace_spyre_launch_queued(n, idx, l->prog_addr, l->prog_size,
                              l->num_cores, l->num_windows);

    s->rings[n].job = l;
    spyre_worker_submit(&s->engine_worker, l);
    spyre_launch_slice_kick(s);
    return SPYRE_STATUS_QUEUED;
}

/* ---- Engine worker ---- */

static void spyre_launch_fail(SpyreJob *l, int error, const char *msg)
{
    l->res->status = -1;
    l->res->error = error;
    l->res->core = -1;
    pstrcpy(l->res->message, sizeof(l->res->message), msg);
}

/* Copy the (checked) program image of a translated launch, page by page. */
static void spyre_launch_fetch(SpyreState *s, const SpyreMmuMap *m,
                               uint64_t va, uint64_t len, uint8_t *buf)
{
    uint32_t hint = 0;

    while (len) {
        const SpyreMmuRun *r = spyre_mmu_lookup(m, va, &hint);
        uint64_t n = MIN(len, r->len - (va - r->va));

        memcpy(buf, s->devmem_ptr + r->pa + (va - r->va), n);
        buf += n;
        va += n;
        len -= n;
    }
}

/* Name the context in the message of a core's translation fault. */
static void spyre_launch_fault_message(spyre_engine_result *res, unsigned ctx)
{
    g_autofree char *msg = g_strdup_printf("context %u: %s", ctx,
                                           res->message);

    pstrcpy(res->message, sizeof(res->message), msg);
}

/*
 * Worker: an engine context for launch l (its own from the first slice until
 * it ends), created when none is free. At most one launch per ring is in
 * progress, so there are at most num_rings contexts. NULL: out of memory.
 */
static spyre_engine *spyre_launch_context(SpyreState *s, SpyreWorker *w,
                                          SpyreJob *l)
{
    spyre_engine *eng;
    int slot = -1;
    unsigned i;

    qemu_mutex_lock(&w->lock);
    /* The first free context, preferring one that exists. */
    for (i = 0; i < s->num_rings; i++) {
        if (!s->engine_owner[i] &&
            (slot < 0 || (s->engines[i] && !s->engines[slot]))) {
            slot = i;
        }
    }
    assert(slot >= 0);
    s->engine_owner[slot] = l;
    l->eng_slot = slot;
    eng = s->engines[slot];
    qemu_mutex_unlock(&w->lock);
    if (!eng) {
        /*
         * Created on first use: its scratchpads and threads cost nothing
         * until the guest launches something (a second context only once
         * two rings' launches share the engine).
         */
        eng = spyre_engine_create(&s->engine_cfg);
        qemu_mutex_lock(&w->lock);
        s->engines[slot] = eng;
        if (!eng) {
            s->engine_owner[slot] = NULL;
            l->eng_slot = -1;
        }
        qemu_mutex_unlock(&w->lock);
    }
    return eng;
}

/*
 * Give back l's engine context (worker when l ends, main loop when a
 * preempted l is dropped: its context is idle then). A preempted job's
 * state is discarded.
 */
static void spyre_launch_release(SpyreState *s, SpyreJob *l)
{
    SpyreWorker *w = &s->engine_worker;
    int slot = l->eng_slot;

    if (slot < 0) {
        return;
    }
    spyre_engine_discard(s->engines[slot]);
    qemu_mutex_lock(&w->lock);
    assert(s->engine_owner[slot] == l);
    s->engine_owner[slot] = NULL;
    l->eng_slot = -1;
    qemu_mutex_unlock(&w->lock);
}

/*
 * Modeled cycles of one context switch of a launch whose cores wrote
 * bytes of scratchpad: the fixed part, then the save (LX -> DDR) and the
 * restore (DDR -> LX) of those bytes at the device memory bandwidth.
 */
static uint64_t spyre_launch_switch_cycles(SpyreState *s, uint64_t bytes)
{
    uint64_t one_way = (bytes * s->clock_mhz + s->ddr_mbps - 1) / s->ddr_mbps;

    return SPYRE_CYCLES_CTX_SWITCH + 2 * one_way;
}

/* Another launch waits for the engine (time slicing round-robins to it). */
static bool spyre_launch_others_wait(SpyreWorker *w)
{
    bool wait;

    qemu_mutex_lock(&w->lock);
    wait = !QSIMPLEQ_EMPTY(&w->queue);
    qemu_mutex_unlock(&w->lock);
    return wait;
}

/* Worker: start launch l on an engine context. false: it ended already. */
static bool spyre_launch_start(SpyreState *s, SpyreWorker *w, SpyreJob *l)
{
    spyre_engine_job *job = &l->ejob;

    l->res = g_try_new0(spyre_engine_result, 1);
    if (!l->res) {
        return false;     /* completed as NO_MEMORY */
    }
    /*
     * Snapshot the program: the guest may rewrite device memory while the
     * job runs, and the engine must execute exactly what it validated.
     */
    l->prog = g_try_malloc(l->prog_size);
    if (!l->prog) {
        spyre_launch_fail(l, SPYRE_ENGINE_ERR_NO_MEMORY,
                          "out of host memory for the program image");
        return false;
    }
    if (!spyre_launch_context(s, w, l)) {
        spyre_launch_fail(l, SPYRE_ENGINE_ERR_NO_MEMORY,
                          "cannot create the compute engine");
        return false;
    }
    memset(job, 0, sizeof(*job));
    if (l->map) {
        spyre_launch_fetch(s, l->map, l->prog_addr, l->prog_size, l->prog);
        job->mappings = l->map->dev;
        job->num_mappings = l->map->num_dev;
    } else {
        memcpy(l->prog, s->devmem_ptr + l->prog_addr, l->prog_size);
    }
    job->program = l->prog;
    job->program_size = l->prog_size;
    job->args = l->args;
    job->num_args = l->num_args;
    job->num_cores = l->num_cores;
    job->mem = s->devmem_ptr;
    job->mem_size = s->devmem_size;
    job->windows = l->windows;
    job->num_windows = l->num_windows;
    job->cancel = &l->cancel;
    return true;
}

/*
 * Worker: run launch l for one turn on the engine. With time slicing, the
 * slice timer sets l->preempt once l held the engine for timeslice-ms while
 * another launch waits; the engine then stops at the next instruction
 * boundary of all cores and l is preempted (returns false, its state stays
 * in its engine context and it pays a context switch). Returns true once
 * it ended.
 */
static bool spyre_launch_run(SpyreState *s, SpyreWorker *w, SpyreJob *l)
{
    const spyre_engine_job *job = NULL;
    spyre_engine *eng;
    int rc;

    if (l->eng_slot < 0) {
        if (!spyre_launch_start(s, w, l)) {
            spyre_launch_release(s, l);
            return true;
        }
        job = &l->ejob;
        if (s->timeslice) {
            l->ejob.preempt = &l->preempt;
        }
    }
    eng = s->engines[l->eng_slot];
    for (;;) {
        qatomic_set(&l->preempt, 0);
        rc = spyre_engine_run_slice(eng, job, 0, l->res);
        job = NULL;
        if (rc != SPYRE_ENGINE_PREEMPTED) {
            break;
        }
        /* Preempted, but the launches that waited were dropped: go on. */
        if (spyre_launch_others_wait(w)) {
            uint64_t bytes = spyre_engine_context_bytes(eng);

            l->switches++;
            l->switch_cycles += spyre_launch_switch_cycles(s, bytes);
            trace_spyre_launch_preempted(l->ring, l->idx, bytes, l->switches);
            return false;
        }
    }
    spyre_launch_release(s, l);
    if (l->map && l->res->error == SPYRE_ENGINE_ERR_MMU_FAULT) {
        spyre_launch_fault_message(l->res, l->map->ctx);
    }
    return true;
}

/* ---- Time slicing (main loop) ---- */

/*
 * The slice timer: while launches wait for the engine, end the running
 * one's slice once it has held the engine for timeslice-ms (it is then
 * preempted at the next instruction boundary of all its cores), and check
 * again at the end of the next slice. Stops when nothing waits.
 */
static void spyre_launch_slice_timer(void *opaque)
{
    SpyreState *s = opaque;
    SpyreWorker *w = &s->engine_worker;
    int64_t quantum = (int64_t)s->timeslice_ms * SCALE_MS;
    int64_t now = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
    int64_t next = -1;
    SpyreJob *j;

    qemu_mutex_lock(&w->lock);
    if (!QSIMPLEQ_EMPTY(&w->queue)) {
        j = w->running;
        next = now + quantum;
        if (j && now - j->run_start_ns >= quantum) {
            qatomic_set(&j->preempt, 1);
        } else if (j) {
            next = j->run_start_ns + quantum;
        }
    }
    qemu_mutex_unlock(&w->lock);
    if (next >= 0) {
        timer_mod(s->slice_timer, next);
    }
}

/* A launch was queued: make sure the slice timer watches the engine. */
void spyre_launch_slice_kick(SpyreState *s)
{
    if (s->timeslice && !timer_pending(s->slice_timer)) {
        timer_mod(s->slice_timer, qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL));
    }
}

/* ---- Completion (main loop) ---- */

static void spyre_launch_result_to_hw(const spyre_engine_result *r,
                                      struct spyre_hw_launch_result *h)
{
    unsigned i, u;
    unsigned nc = MIN(r->num_cores, SPYRE_LAUNCH_MAX_CORES);

    memset(h, 0, sizeof(*h));
    h->error = cpu_to_le32(r->error);
    h->core = cpu_to_le32(r->core);
    h->pc = cpu_to_le64(r->pc);
    memcpy(h->message, r->message, sizeof(h->message));
    h->message[sizeof(h->message) - 1] = 0;
    h->total_cycles = cpu_to_le64(r->total_cycles);
    h->ddr_read_bytes = cpu_to_le64(r->ddr_read_bytes);
    h->ddr_write_bytes = cpu_to_le64(r->ddr_write_bytes);
    h->ring_bytes = cpu_to_le64(r->ring_bytes);
    h->instructions = cpu_to_le64(r->instructions);
    h->macs = cpu_to_le64(r->macs);
    h->num_cores = cpu_to_le32(nc);
    h->mac_peak = cpu_to_le32(r->mac_peak);
    for (i = 0; i < nc; i++) {
        for (u = 0; u < SPYRE_LAUNCH_UNITS; u++) {
            h->cores[i].busy[u] = cpu_to_le64(r->cores[i].busy[u]);
        }
        h->cores[i].end_cycle = cpu_to_le64(r->cores[i].end_cycle);
    }
}

static void spyre_launch_account(SpyreState *s, const SpyreJob *l,
                                 const spyre_engine_result *r)
{
    unsigned i, u;
    unsigned nc = MIN(r->num_cores, MIN(s->num_cores, SPYRE_LAUNCH_MAX_CORES));

    s->tele_launches++;
    if (r->error) {
        s->tele_launch_errors++;
    }
    s->tele_eng_cycles += r->total_cycles + l->switch_cycles;
    s->tele_eng_instrs += r->instructions;
    s->tele_eng_macs += r->macs;
    s->tele_eng_ddr_rd += r->ddr_read_bytes;
    s->tele_eng_ddr_wr += r->ddr_write_bytes;
    s->tele_eng_ring += r->ring_bytes;
    for (i = 0; i < nc; i++) {
        SpyreCoreTele *t = &s->tele_core[i];

        for (u = 0; u < SPYRE_LAUNCH_UNITS; u++) {
            t->busy[u] += r->cores[i].busy[u];
        }
        t->active += r->cores[i].end_cycle;
        t->instrs += r->cores[i].instructions;
    }
}

static uint32_t spyre_launch_complete(SpyreState *s, SpyreJob *l, bool live)
{
    static const spyre_engine_result no_memory = {
        .status = -1, .error = SPYRE_ENGINE_ERR_NO_MEMORY, .core = -1,
        .message = "out of host memory for the launch result",
    };
    const spyre_engine_result *res = l->res ? l->res : &no_memory;
    uint32_t st = res->error ? SPYRE_STATUS_ERR_PROGRAM : SPYRE_STATUS_OK;
    uint32_t detail = res->error;
    bool cancelled = qatomic_read(&l->cancel);

    /* Dropped while preempted: its saved context goes. */
    spyre_launch_release(s, l);
    if (l->map && res->error == SPYRE_ENGINE_ERR_MMU_FAULT) {
        st = SPYRE_STATUS_ERR_MMU_FAULT;
        spyre_mmu_fault_set(&l->fault, l->map->ctx, res->fault_va,
                            res->fault_access == SPYRE_ENGINE_ACCESS_WRITE ?
                            SPYRE_MMU_FAULT_WRITE : SPYRE_MMU_FAULT_READ,
                            true);
    }

    trace_spyre_launch_done(l->ring, l->idx, cancelled ? -1 : res->error,
                            res->total_cycles);
    /* The switches happened, whatever becomes of the launch. */
    s->tele_eng_switches += l->switches;
    s->tele_eng_switch_cycles += l->switch_cycles;
    if (!cancelled) {
        /* An aborted or reset launch is not accounted otherwise. */
        spyre_launch_account(s, l, res);
    }
    if (res->error && !cancelled) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: LAUNCH %u stopped: %s (%d) core %d "
                      "pc %" PRIu64 ": %s\n", l->ring, l->idx,
                      spyre_engine_error_name(res->error), res->error,
                      res->core, res->pc, res->message);
    }
    /*
     * The engine wrote device memory behind the memory API's back: each
     * page of the windows once (work in the runs met, not the windows'
     * sizes, however many windows overlap).
     */
    spyre_mmu_set_dirty_windows(s, l->map, l->windows, l->num_windows);
    if (!live) {
        return 0;
    }
    if (l->result_addr) {
        g_autofree struct spyre_hw_launch_result *h =
            g_new(struct spyre_hw_launch_result, 1);

        spyre_launch_result_to_hw(res, h);
        if (!spyre_host_write(s, l->result_addr, h, sizeof(*h))) {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: ring %u: LAUNCH cannot write the result "
                          "at 0x%" PRIx64 "\n", l->ring, l->result_addr);
            if (st == SPYRE_STATUS_OK) {
                st = SPYRE_STATUS_ERR_HOST_DMA;
            }
        }
    }
    if (st == SPYRE_STATUS_ERR_MMU_FAULT) {
        detail = spyre_mmu_report(s, l->ring, &l->fault);
    }
    return spyre_ring_complete(s, l->ring, l->idx, l->seqno, l->flags, st,
                               st == SPYRE_STATUS_OK ||
                               st == SPYRE_STATUS_ERR_HOST_DMA ? 0 : detail,
                               res->total_cycles + l->switch_cycles,
                               SPYRE_CLK_ENGINE);
}

/* ---- Life cycle ---- */

void spyre_launch_worker_init(SpyreState *s)
{
    SpyreWorker *w = &s->engine_worker;

    spyre_engine_config_default(&s->engine_cfg);
    s->engine_cfg.num_cores = s->num_cores;
    s->engine_cfg.lx_bytes = s->lx_size;
    s->engine_cfg.clock_hz = (uint64_t)s->clock_mhz * 1000000;
    s->engine_cfg.ddr_bytes_per_s = (uint64_t)s->ddr_mbps * 1000000;
    s->engine_cfg.host_dma_bytes_per_s = (uint64_t)s->pcie_mbps * 1000000;
    s->engine_cfg.dma_setup_cycles = SPYRE_CYCLES_DMA_SETUP;
    s->engine_cfg.ring_bytes_per_cycle = s->ring_bytes_per_cycle;
    s->engine_cfg.num_threads = s->engine_threads;
    memset(s->engines, 0, sizeof(s->engines));
    memset(s->engine_owner, 0, sizeof(s->engine_owner));

    w->run = spyre_launch_run;
    w->complete = spyre_launch_complete;
    spyre_worker_init(s, w, "spyre-engine");
    s->slice_timer = timer_new_ns(QEMU_CLOCK_VIRTUAL, spyre_launch_slice_timer,
                                  s);
}

void spyre_launch_worker_fini(SpyreState *s)
{
    unsigned i;

    timer_free(s->slice_timer);
    s->slice_timer = NULL;
    spyre_worker_fini(&s->engine_worker);
    for (i = 0; i < ARRAY_SIZE(s->engines); i++) {
        assert(!s->engine_owner[i]);
        if (s->engines[i]) {
            spyre_engine_destroy(s->engines[i]);
            s->engines[i] = NULL;
        }
    }
}
