/*
 * Spyre-style PCIe AI accelerator model: command rings.
 *
 * A ring is a power-of-two array of 64-byte commands in host memory and a
 * parallel array of 32-byte completion entries. The guest writes commands,
 * then the doorbell (TAIL). A bottom half consumes head..tail in order,
 * executes each command, writes completion entry N for command N and
 * advances HEAD. Nothing is executed in the MMIO handler.
 *
 * A LAUNCH or a large DMA_COPY is validated here and handed to a worker
 * thread (spyre-worker.c); its ring stays busy (HEAD on the command,
 * nothing else consumed) until the worker finished and
 * spyre_ring_complete() ran from the worker's bottom half. Other rings keep
 * going meanwhile. CTRL.ABORT disables the ring and cancels that command
 * without waiting for it; STATUS.BUSY tells when it let go.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/bitops.h"
#include "qemu/main-loop.h"
#include "qemu/timer.h"
#include "hw/pci/pci_device.h"
#include "spyre.h"
#include "trace.h"

QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_cmd) != 64);
QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_cmd_dma2d) != 48);
QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_cpl) != 32);
QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_cpl_time) != 64);
QEMU_BUILD_BUG_ON(SPYRE_NUM_RINGS_MAX > 31);

void spyre_ring_reset(SpyreRing *r)
{
    g_free(r->clk_doorbell);
    memset(r, 0, sizeof(*r));
}

static bool spyre_ring_enabled(SpyreRing *r)
{
    return r->status & SPYRE_RING_STATUS_ENABLED;
}

bool spyre_ring_busy(const SpyreRing *r)
{
    return r->job || r->hang || r->sem_wait;
}

/*
 * CTRL.ABORT: disable the ring, drop what was not consumed, cancel the
 * command in progress. Never waits: BUSY stays set until a running job let
 * go of its memory (or forever, for a STICKY or WEDGE hang).
 */
static void spyre_ring_abort(SpyreState *s, unsigned n)
{
    SpyreRing *r = &s->rings[n];

    r->ctrl = 0;
    r->status &= ~SPYRE_RING_STATUS_ENABLED;
    r->tail = r->head;
    if (r->job) {
        spyre_worker_abort(s, r->job);
    }
    spyre_sem_cancel(s, n);
    if (r->hang && !(r->hang & (SPYRE_HANG_STICKY | SPYRE_HANG_WEDGE))) {
        r->hang = 0;
    }
    trace_spyre_ring_abort(n, r->head, spyre_ring_busy(r));
}

static void spyre_ring_ctrl(SpyreState *s, unsigned n, uint32_t val)
{
    SpyreRing *r = &s->rings[n];
    bool was = r->ctrl & SPYRE_RING_CTRL_ENABLE;
    bool want = val & SPYRE_RING_CTRL_ENABLE;
    uint32_t known = SPYRE_RING_CTRL_ENABLE | SPYRE_RING_CTRL_ABORT |
                     SPYRE_RING_CTRL_CPL_TIME;

    if (val & ~known) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: reserved CTRL bits 0x%08x ignored\n",
                      n, val & ~known);
    }
    if (val & SPYRE_RING_CTRL_ABORT) {
        spyre_ring_abort(s, n);
        return;
    }
    if (was == want) {
        return;
    }
    if (!want) {
        r->ctrl = 0;
        r->status &= ~SPYRE_RING_STATUS_ENABLED;
        /* A waiting SEM_WAIT would only have its completion dropped. */
        spyre_sem_cancel(s, n);
        trace_spyre_ring_disable(n, r->head);
        return;
    }
    if (!is_power_of_2(r->size) || r->size < SPYRE_RING_SIZE_MIN ||
        r->size > SPYRE_RING_SIZE_MAX || !r->cmd_base || !r->cpl_base ||
        (r->cmd_base & (SPYRE_RING_ALIGN - 1)) ||
        (r->cpl_base & (SPYRE_RING_ALIGN - 1))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: enable refused: size %u cmd 0x%"
                      PRIx64 " cpl 0x%" PRIx64 "\n",
                      n, r->size, r->cmd_base, r->cpl_base);
        trace_spyre_guest_error(n, "bad ring configuration");
        r->status = SPYRE_RING_STATUS_BAD_CONFIG;
        r->ctrl = 0;
        return;
    }
    r->l_cmd_base = r->cmd_base;
    r->l_cpl_base = r->cpl_base;
    r->l_size = r->size;
    r->head = 0;
    r->tail = 0;
    r->completed = 0;
    r->epoch++;
    /* Doorbell snapshots of the modeled clock, one per entry (1.7). */
    g_free(r->clk_doorbell);
    r->clk_doorbell = g_new0(uint64_t, r->l_size);
    r->ctrl = SPYRE_RING_CTRL_ENABLE | (val & SPYRE_RING_CTRL_CPL_TIME);
    r->status = SPYRE_RING_STATUS_ENABLED;
    trace_spyre_ring_enable(n, r->l_cmd_base, r->l_cpl_base, r->l_size);
}

void spyre_ring_write(SpyreState *s, unsigned n, unsigned reg, uint32_t val)
{
    SpyreRing *r = &s->rings[n];

    if (n >= s->num_rings) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: write to register 0x%x of absent ring %u\n",
                      reg, n);
        return;
    }
    if (s->status & SPYRE_STATUS_RESETTING) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: write of 0x%08x to register 0x%x "
                      "while the card is RESETTING ignored\n", n, val, reg);
        return;
    }

    switch (reg) {
    case SPYRE_RING_CMD_BASE_LO:
        r->cmd_base = deposit64(r->cmd_base, 0, 32, val);
        break;
    case SPYRE_RING_CMD_BASE_HI:
        r->cmd_base = deposit64(r->cmd_base, 32, 32, val);
        break;
    case SPYRE_RING_CPL_BASE_LO:
        r->cpl_base = deposit64(r->cpl_base, 0, 32, val);
        break;
    case SPYRE_RING_CPL_BASE_HI:
        r->cpl_base = deposit64(r->cpl_base, 32, 32, val);
        break;
    case SPYRE_RING_SIZE:
        r->size = val;
        break;
    case SPYRE_RING_TAIL:
        if (!spyre_ring_enabled(r)) {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: ring %u: doorbell on a disabled ring\n", n);
            trace_spyre_guest_error(n, "doorbell on disabled ring");
            break;
        }
        if (val >= r->l_size) {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: ring %u: tail %u >= size %u ignored\n",
                          n, val, r->l_size);
            trace_spyre_guest_error(n, "tail out of range");
            r->status |= SPYRE_RING_STATUS_BAD_TAIL;
            break;
        }
        /*
         * What the card had completed when the host rang: the submitted
         * commands start no earlier on the modeled clock (1.7).
         */
        for (uint32_t e = r->tail; e != val; e = (e + 1) & (r->l_size - 1)) {
            r->clk_doorbell[e] = s->clk_posted;
        }
        r->tail = val;
        trace_spyre_doorbell(n, r->head, val);
        qemu_bh_schedule(s->bh);
        break;
    case SPYRE_RING_CTRL:
        spyre_ring_ctrl(s, n, val);
        break;
    case SPYRE_RING_FAULT_ADDR_LO:
    case SPYRE_RING_FAULT_ADDR_HI:
    case SPYRE_RING_FAULT_INFO:
        spyre_mmu_ring_write(s, n, reg, val);
        break;
    default:
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: write of 0x%08x to read-only or "
                      "unimplemented register 0x%x\n", n, val, reg);
        break;
    }
}

/*
 * EXEC_TIME of ring r (1.4): RUNNING and the milliseconds its command has
 * held its engine (a SEM_WAIT: has waited), or 0 if none does; *seqno gets
 * that command's seqno.
 * A command waiting for a worker held by another ring's is not charged.
 */
static uint32_t spyre_ring_exec(SpyreRing *r, uint64_t *seqno)
{
    int64_t ns = -1;
    bool running = true;

    *seqno = 0;
    if (r->hang) {
        ns = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) - r->hang_start_ns;
        *seqno = r->hang_seqno;
    } else if (r->job) {
        ns = spyre_worker_exec_ns(r->job, &running);
        *seqno = r->job->seqno;
    } else if (r->sem_wait) {
        /* A waiting SEM_WAIT (1.8) runs: it holds its ring, no unit. */
        ns = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) - r->sem_start_ns;
        *seqno = r->sem_cmd.hdr.seqno;
    }
    if (ns < 0) {
        *seqno = 0;
        return 0;
    }
    /* A preempted LAUNCH (1.5): its seqno and time so far, not RUNNING. */
    return (running ? SPYRE_RING_EXEC_RUNNING : 0) |
           MIN(ns / SCALE_MS, (int64_t)SPYRE_RING_EXEC_MS_MASK);
}

uint32_t spyre_ring_read(SpyreState *s, unsigned n, unsigned reg)
{
    uint64_t seqno;
    uint32_t exec;

    SpyreRing *r = &s->rings[n];

    if (n >= s->num_rings) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: read of register 0x%x of absent ring %u\n",
                      reg, n);
        return 0;
    }
    if (s->status & SPYRE_STATUS_RESETTING) {
        return 0;
    }

    switch (reg) {
    case SPYRE_RING_CMD_BASE_LO:
        return (uint32_t)r->cmd_base;
    case SPYRE_RING_CMD_BASE_HI:
        return r->cmd_base >> 32;
    case SPYRE_RING_CPL_BASE_LO:
        return (uint32_t)r->cpl_base;
    case SPYRE_RING_CPL_BASE_HI:
        return r->cpl_base >> 32;
    case SPYRE_RING_SIZE:
        return r->size;
    case SPYRE_RING_HEAD:
        return r->head;
    case SPYRE_RING_TAIL:
        return r->tail;
    case SPYRE_RING_CTRL:
        return r->ctrl;
    case SPYRE_RING_STATUS:
        return r->status | (spyre_ring_busy(r) ? SPYRE_RING_STATUS_BUSY : 0);
    case SPYRE_RING_COMPLETED:
        return r->completed;
    case SPYRE_RING_FAULT_ADDR_LO:
    case SPYRE_RING_FAULT_ADDR_HI:
    case SPYRE_RING_FAULT_INFO:
        return spyre_mmu_ring_read(s, n, reg);
    case SPYRE_RING_EXEC_SEQNO:
    case SPYRE_RING_EXEC_TIME:
        exec = spyre_ring_exec(r, &seqno);
        trace_spyre_ring_exec(n, seqno, exec);
        return reg == SPYRE_RING_EXEC_TIME ? exec : (uint32_t)seqno;
    default:
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: read of unimplemented register 0x%x\n",
                      n, reg);
        return 0;
    }
}

/* ---- Command execution ---- */

static void spyre_cmd_to_cpu(struct spyre_hw_cmd *c)
{
    unsigned i;

    c->hdr.ctx = le16_to_cpu(c->hdr.ctx);
    c->hdr.reserved1 = le32_to_cpu(c->hdr.reserved1);
    c->hdr.seqno = le64_to_cpu(c->hdr.seqno);
    for (i = 0; i < ARRAY_SIZE(c->raw); i++) {
        c->raw[i] = le64_to_cpu(c->raw[i]);
    }
}

static uint32_t spyre_exec_fence(SpyreState *s, unsigned n,
                                 const struct spyre_hw_cmd *c,
                                 uint64_t *cycles)
{
    const struct spyre_hw_cmd_fence *f = &c->fence;
    uint64_t le = cpu_to_le64(f->value);

    if (c->hdr.flags & (SPYRE_CMD_F_SRC_HOST | SPYRE_CMD_F_DST_HOST) ||
        f->reserved[0] || f->reserved[1] || f->reserved[2] ||
        f->reserved[3]) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: FENCE_WRITE with reserved bits set\n",
                      n);
        return SPYRE_STATUS_ERR_RESERVED;
    }
    if (f->addr & 7) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: FENCE_WRITE address 0x%" PRIx64
                      " not 8-byte aligned\n", n, f->addr);
        return SPYRE_STATUS_ERR_ALIGN;
    }
    *cycles = SPYRE_CYCLES_FENCE;
    if (!spyre_host_write(s, f->addr, &le, sizeof(le))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: FENCE_WRITE to 0x%" PRIx64 " failed\n",
                      n, f->addr);
        return SPYRE_STATUS_ERR_HOST_DMA;
    }
    return SPYRE_STATUS_OK;
}

/* A translation fault fills *fault and returns SPYRE_STATUS_ERR_MMU_FAULT. */
static uint32_t spyre_exec(SpyreState *s, unsigned n, uint32_t idx,
                           const struct spyre_hw_cmd *c, uint64_t *cycles,
                           SpyreMmuFault *fault)
{
    unsigned i;

    *cycles = SPYRE_CYCLES_ERROR;
    if (c->hdr.flags & ~SPYRE_CMD_F_VALID_MASK ||
        c->hdr.ctx >= SPYRE_MMU_NUM_CTX || c->hdr.reserved1) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: command flags 0x%02x, context %u or "
                      "reserved header fields invalid\n", n, c->hdr.flags,
                      c->hdr.ctx);
        return SPYRE_STATUS_ERR_RESERVED;
    }

    switch (c->hdr.opcode) {
    case SPYRE_OP_NOP:
        if (c->hdr.flags & (SPYRE_CMD_F_SRC_HOST | SPYRE_CMD_F_DST_HOST)) {
            goto reserved;
        }
        for (i = 0; i < ARRAY_SIZE(c->raw); i++) {
            if (c->raw[i]) {
                goto reserved;
            }
        }
        *cycles = SPYRE_CYCLES_NOP;
        return SPYRE_STATUS_OK;
    case SPYRE_OP_FENCE_WRITE:
        return spyre_exec_fence(s, n, c, cycles);
    case SPYRE_OP_DMA_COPY:
        if (c->dma.reserved) {
            goto reserved;
        }
        return spyre_dma_copy(s, n, idx, c, cycles, fault);
    case SPYRE_OP_DMA_COPY_2D:
        return spyre_dma_copy_2d(s, n, idx, c, cycles, fault);
    case SPYRE_OP_LAUNCH:
        return spyre_launch_submit(s, n, idx, c, cycles, fault);
    case SPYRE_OP_SEM_SIGNAL:
        return spyre_sem_signal(s, n, idx, c, cycles, fault);
    case SPYRE_OP_SEM_WAIT:
        return spyre_sem_wait(s, n, idx, c, cycles, fault);
    default:
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: unknown opcode 0x%02x\n",
                      n, c->hdr.opcode);
        return SPYRE_STATUS_ERR_OPCODE;
    }

reserved:
    qemu_log_mask(LOG_GUEST_ERROR,
                  "spyre: ring %u: opcode 0x%02x with reserved bits set\n",
                  n, c->hdr.opcode);
    return SPYRE_STATUS_ERR_RESERVED;
}

/* The unit of the modeled clock a command occupies (hardware.md section 11). */
static SpyreClkUnit spyre_cmd_unit(uint8_t opcode)
{
    switch (opcode) {
    case SPYRE_OP_DMA_COPY:
    case SPYRE_OP_DMA_COPY_2D:
        return SPYRE_CLK_DMA;
    case SPYRE_OP_LAUNCH:
        return SPYRE_CLK_ENGINE;
    default:
        return SPYRE_CLK_NONE;
    }
}

/* FAULT_HANG takes the next command of any ring, or of its selected ring only. */
static bool spyre_hang_applies(SpyreState *s, unsigned n)
{
    uint32_t h = s->fault_hang;

    if (!(h & SPYRE_HANG_COUNT_MASK)) {
        return false;
    }
    return !(h & SPYRE_HANG_ON_RING) ||
           ((h & SPYRE_HANG_RING_MASK) >> SPYRE_HANG_RING_SHIFT) == n;
}

/*
 * Consume the command at HEAD of ring n. Returns the interrupt causes it
 * raised; *bytes gets the DMA volume (for the BH work budget).
 */
static uint32_t spyre_ring_step(SpyreState *s, unsigned n, uint64_t *bytes)
{
    SpyreRing *r = &s->rings[n];
    struct spyre_hw_cmd c;
    uint32_t idx = r->head;
    uint32_t st;
    uint64_t cycles = SPYRE_CYCLES_ERROR;
    uint64_t seqno = 0;
    uint8_t flags = 0;
    uint32_t detail = 0;
    SpyreClkUnit unit = SPYRE_CLK_NONE;
    SpyreMmuFault fault;

    *bytes = 0;
    if (!spyre_host_read(s, r->l_cmd_base + (uint64_t)idx * sizeof(c), &c,
                         sizeof(c))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: cannot read command %u at 0x%" PRIx64
                      "\n", n, idx, r->l_cmd_base + (uint64_t)idx * sizeof(c));
        st = SPYRE_STATUS_ERR_HOST_DMA;
    } else {
        spyre_cmd_to_cpu(&c);
        seqno = c.hdr.seqno;
        flags = c.hdr.flags;
        unit = spyre_cmd_unit(c.hdr.opcode);
        trace_spyre_cmd(n, idx, c.hdr.opcode, flags, seqno);
        if (s->fault_inject) {
            s->fault_inject--;
            st = SPYRE_STATUS_ERR_INJECTED;
        } else if (spyre_hang_applies(s, n)) {
            /* Occupies the ring until an ABORT or a reset ends it. */
            r->hang = SPYRE_RING_HUNG |
                      (s->fault_hang & (SPYRE_HANG_STICKY | SPYRE_HANG_WEDGE));
            r->hang_seqno = seqno;
            r->hang_start_ns = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
            s->fault_hang--;
            if (!(s->fault_hang & SPYRE_HANG_COUNT_MASK)) {
                s->fault_hang = 0;
            }
            trace_spyre_cmd_hang(n, idx, r->hang);
            return 0;
        } else {
            st = spyre_exec(s, n, idx, &c, &cycles, &fault);
            if (st == SPYRE_STATUS_QUEUED) {
                /*
                 * A worker owns it now (r->job); completed by
                 * spyre_worker_bh().
                 */
                assert(r->job);
                return 0;
            }
            if (st == SPYRE_STATUS_SEM_WAITING) {
                /* Holds the ring; completed by spyre_sem_poll(). */
                assert(r->sem_wait);
                return 0;
            }
            if (st == SPYRE_STATUS_OK) {
                *bytes = spyre_dma_cmd_bytes(&c);
            } else if (st == SPYRE_STATUS_ERR_MMU_FAULT) {
                detail = spyre_mmu_report(s, n, &fault);
            }
        }
    }
    return spyre_ring_complete(s, n, idx, seqno, flags, st, detail, cycles,
                               unit);
}

/*
 * The earliest modeled start of command idx of ring n that occupies no
 * unit: its ring's previous command ended and everything the card had
 * completed at its doorbell (1.7).
 */
uint64_t spyre_clock_ready(SpyreState *s, unsigned n, uint32_t idx)
{
    SpyreRing *r = &s->rings[n];

    return MAX(r->clk_end, r->clk_doorbell[idx]);
}

/*
 * Place command idx of ring n on the modeled clock (1.7, hardware.md
 * section 11): it starts when its ring's previous command ended, its unit
 * is free and everything the card had completed when the host rang its
 * doorbell has ended; it ends its cycles later.
 */
static uint64_t spyre_clock_start(SpyreState *s, unsigned n, uint32_t idx,
                                  uint64_t cycles, SpyreClkUnit unit)
{
    SpyreRing *r = &s->rings[n];
    uint64_t start = spyre_clock_ready(s, n, idx);

    if (unit != SPYRE_CLK_NONE) {
        start = MAX(start, s->clk_unit[unit]);
        s->clk_unit[unit] = start + cycles;
    }
    r->clk_end = start + cycles;
    s->clk_posted = MAX(s->clk_posted, r->clk_end);
    trace_spyre_cmd_clock(n, idx, unit, start, r->clk_end);
    return start;
}

/*
 * Write the completion entry of command idx of ring n, advance HEAD and
 * account the command. Returns the interrupt causes to raise.
 */
uint32_t spyre_ring_complete(SpyreState *s, unsigned n, uint32_t idx,
                             uint64_t seqno, uint8_t flags, uint32_t st,
                             uint32_t detail, uint64_t cycles,
                             SpyreClkUnit unit)
{
    SpyreRing *r = &s->rings[n];
    struct spyre_hw_cpl_time cpl = { 0 };
    uint64_t start = spyre_clock_start(s, n, idx, cycles, unit);
    bool timed = r->ctrl & SPYRE_RING_CTRL_CPL_TIME;
    uint64_t size = timed ? sizeof(cpl) : sizeof(cpl.cpl);
    uint32_t causes = 0;

    r->completed++;
    cpl.cpl.seqno = cpu_to_le64(seqno);
    cpl.cpl.status = cpu_to_le32(st);
    cpl.cpl.detail = cpu_to_le32(detail);
    cpl.cpl.cycles = cpu_to_le64(cycles);
    cpl.cpl.done_count = cpu_to_le64(r->completed);
    cpl.start_cycle = cpu_to_le64(start);
    cpl.end_cycle = cpu_to_le64(start + cycles);
    if (!spyre_host_write(s, r->l_cpl_base + (uint64_t)idx * size, &cpl,
                          size)) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: cannot write completion %u at 0x%"
                      PRIx64 "\n", n, idx, r->l_cpl_base + (uint64_t)idx * size);
        if (st == SPYRE_STATUS_OK) {
            st = SPYRE_STATUS_ERR_HOST_DMA;
        }
    }
    r->head = (idx + 1) & (r->l_size - 1);

    s->tele_cmds++;
    spyre_update_load(s, cycles);
    trace_spyre_cmd_done(n, idx, st, cycles);

    if (st != SPYRE_STATUS_OK) {
        trace_spyre_cmd_error(n, idx, st, seqno);
        s->error_code = st;
        s->status |= SPYRE_STATUS_ERROR;
        s->tele_errors++;
        causes |= SPYRE_INTR_ERROR;
    }
    if (flags & SPYRE_CMD_F_IRQ) {
        causes |= SPYRE_INTR_RING(n);
    }
    /* A local signal: the waiting SEM_WAITs look again (1.8). */
    s->sem_kick = true;
    return causes;
}

static bool spyre_ring_pending(SpyreState *s, unsigned n)
{
    SpyreRing *r = &s->rings[n];

    return spyre_ring_enabled(r) && !spyre_ring_busy(r) && r->head != r->tail;
}

/*
 * Process up to SPYRE_BH_MAX_CMDS commands (or SPYRE_BH_MAX_BYTES of DMA)
 * round-robin over the rings, one command per ring per round, then
 * reschedule if work is left so the main loop and the vCPUs keep running.
 */
void spyre_ring_bh(void *opaque)
{
    SpyreState *s = opaque;
    unsigned done = 0;
    uint64_t volume = 0;
    uint32_t causes = 0;
    bool progress = true;
    unsigned i;

    while (progress && done < SPYRE_BH_MAX_CMDS &&
           volume < SPYRE_BH_MAX_BYTES) {
        progress = false;
        /* SEM_WAITs released by what completed so far free their ring. */
        causes |= spyre_sem_poll(s);
        for (i = 0; i < s->num_rings; i++) {
            unsigned n = (s->next_ring + i) % s->num_rings;
            uint64_t bytes;

            if (!spyre_ring_pending(s, n)) {
                continue;
            }
            causes |= spyre_ring_step(s, n, &bytes);
            progress = true;
            done++;
            volume += bytes;
            if (done >= SPYRE_BH_MAX_CMDS || volume >= SPYRE_BH_MAX_BYTES) {
                s->next_ring = (n + 1) % s->num_rings;
                break;
            }
        }
    }

    causes |= spyre_sem_poll(s);
    if (causes) {
        spyre_raise(s, causes);
    }
    for (i = 0; i < s->num_rings; i++) {
        if (spyre_ring_pending(s, i)) {
            qemu_bh_schedule(s->bh);
            break;
        }
    }
}
