/*
 * Spyre-style PCIe AI accelerator model: semaphores (hw 1.8, CAP_SEM).
 *
 * A semaphore is 16 bytes { u64 value, u64 cycle }, addressed like one side
 * of a DMA_COPY (spyre_dma_side_rw: device memory through the command's
 * context, or a host page directory whose data page may be host RAM or a
 * peer card's BAR2). SEM_SIGNAL writes cycle (its modeled end), then value.
 * SEM_WAIT completes once value >= the command's value; until then it holds
 * its ring (SpyreRing.sem_wait: HEAD on it, STATUS.BUSY) and is checked
 * again whenever a command of the card completes (sem_kick, from
 * spyre_ring_complete) and every SPYRE_SEM_POLL_US of QEMU_CLOCK_VIRTUAL
 * (sem_timer) for writes by peers or the host, until its timeout. Everything
 * runs on the main loop: a check is a 16-byte read, no worker, no
 * allocation. ABORT, disable and the resets drop a waiting SEM_WAIT without
 * a completion (spyre_sem_cancel, spyre_ring_reset).
 *
 * Modeled clock (hardware.md section 11): the stored cycle joins the
 * waiter's clock to the signaller's, Lamport style: a wait ends at
 * max(start, cycle seen) + SPYRE_CYCLES_SEM_WAIT.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/timer.h"
#include "spyre.h"
#include "trace.h"

QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_cmd_sem) != 48);
QEMU_BUILD_BUG_ON(sizeof(struct spyre_hw_sem) != SPYRE_SEM_ALIGN);

/*
 * Validate a SEM_SIGNAL (wait false) or SEM_WAIT (hardware.md section 6,
 * validation table): nothing is accessed.
 */
static uint32_t spyre_sem_validate(SpyreState *s, unsigned n,
                                   const struct spyre_hw_cmd *c, bool wait)
{
    const struct spyre_hw_cmd_sem *m = &c->sem;
    const char *op = wait ? "SEM_WAIT" : "SEM_SIGNAL";
    uint8_t host_flag = wait ? SPYRE_CMD_F_SRC_HOST : SPYRE_CMD_F_DST_HOST;
    bool host = c->hdr.flags & host_flag;
    uint64_t limit = c->hdr.ctx ? SPYRE_MMU_VA_LIMIT : s->devmem_size;

    if (c->hdr.flags & ~(SPYRE_CMD_F_IRQ | host_flag) || m->reserved0 ||
        m->reserved[0] || m->reserved[1] || (!wait && m->timeout_us)) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: %s with flags 0x%02x, reserved "
                      "fields or timeout %u invalid\n", n, op, c->hdr.flags,
                      m->timeout_us);
        return SPYRE_STATUS_ERR_RESERVED;
    }
    if (wait && m->timeout_us > SPYRE_SEM_WAIT_MAX_US) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: SEM_WAIT timeout %u us > %u\n", n,
                      m->timeout_us, SPYRE_SEM_WAIT_MAX_US);
        return SPYRE_STATUS_ERR_SIZE;
    }
    if (((host ? 0 : m->addr) + m->offset) & (SPYRE_SEM_ALIGN - 1)) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: %s semaphore 0x%" PRIx64 "+0x%" PRIx64
                      " not %u-byte aligned\n", n, op, m->addr, m->offset,
                      SPYRE_SEM_ALIGN);
        return SPYRE_STATUS_ERR_ALIGN;
    }
    if (!host && !spyre_dev_range_ok(limit, m->addr, m->offset,
                                     sizeof(struct spyre_hw_sem))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: %s semaphore 0x%" PRIx64 "+0x%" PRIx64
                      " outside %s\n", n, op, m->addr, m->offset,
                      c->hdr.ctx ? "the context's 2^39 bytes" :
                      "device memory");
        return SPYRE_STATUS_ERR_DEV_RANGE;
    }
    if (host && (m->addr & 7)) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: ring %u: %s host page directory 0x%" PRIx64
                      " not 8-byte aligned\n", n, op, m->addr);
        return SPYRE_STATUS_ERR_ALIGN;
    }
    return SPYRE_STATUS_OK;
}

/*
 * The context snapshot of a device-side semaphore (*map NULL: physical or
 * host side). With @first, FAULT_MMU and an overflowing context fault here,
 * before any access, as for a copy.
 */
static uint32_t spyre_sem_map(SpyreState *s, const struct spyre_hw_cmd *c,
                              bool host, bool wait, bool first,
                              SpyreMmuMap **map, SpyreMmuFault *fault)
{
    uint32_t st = SPYRE_STATUS_OK;

    *map = NULL;
    if (!c->hdr.ctx || host) {
        return SPYRE_STATUS_OK;
    }
    *map = spyre_mmu_get(s, c->hdr.ctx, &st);
    if (!*map) {
        return st;
    }
    if (first &&
        spyre_mmu_fault_first(s, *map, c->sem.addr + c->sem.offset,
                              wait ? SPYRE_MMU_FAULT_READ :
                                     SPYRE_MMU_FAULT_WRITE, fault)) {
        spyre_mmu_unref(*map);
        *map = NULL;
        return SPYRE_STATUS_ERR_MMU_FAULT;
    }
    return SPYRE_STATUS_OK;
}

uint32_t spyre_sem_signal(SpyreState *s, unsigned n, uint32_t idx,
                          const struct spyre_hw_cmd *c, uint64_t *cycles,
                          SpyreMmuFault *fault)
{
    const struct spyre_hw_cmd_sem *m = &c->sem;
    bool host = c->hdr.flags & SPYRE_CMD_F_DST_HOST;
    SpyreDmaPeer peer = { .ddr_mbps = UINT32_MAX };
    SpyreMmuMap *map;
    uint64_t cycle, le;
    uint32_t st;

    st = spyre_sem_validate(s, n, c, false);
    if (st != SPYRE_STATUS_OK) {
        return st;
    }
    st = spyre_sem_map(s, c, host, false, true, &map, fault);
    if (st != SPYRE_STATUS_OK) {
        return st;
    }
    /*
     * The stored cycle is this command's modeled end: it occupies no unit,
     * so it starts when its ring is ready. A peer page is known once
     * written; the cycle is then written again with the link's latency,
     * before the value makes it visible.
     */
    *cycles = SPYRE_CYCLES_SEM_SIGNAL;
    cycle = spyre_clock_ready(s, n, idx) + *cycles;
    le = cpu_to_le64(cycle);
    st = spyre_dma_side_rw(s, m->addr, host, map, m->offset + 8, &le,
                           sizeof(le), true, fault, &peer);
    if (st == SPYRE_STATUS_OK && peer.wr) {
        *cycles += SPYRE_CYCLES_P2P_LATENCY;
        cycle += SPYRE_CYCLES_P2P_LATENCY;
        le = cpu_to_le64(cycle);
        st = spyre_dma_side_rw(s, m->addr, host, map, m->offset + 8, &le,
                               sizeof(le), true, fault, &peer);
    }
    if (st == SPYRE_STATUS_OK) {
        /* The cycle is visible before the value that releases waiters. */
        smp_wmb();
        le = cpu_to_le64(m->value);
        st = spyre_dma_side_rw(s, m->addr, host, map, m->offset, &le,
                               sizeof(le), true, fault, &peer);
    }
    spyre_mmu_unref(map);
    trace_spyre_sem_signal(n, idx, m->addr, m->offset, m->value, cycle,
                           peer.wr != 0, st);
    if (st != SPYRE_STATUS_OK) {
        *cycles = SPYRE_CYCLES_ERROR;
        return st;
    }
    /* TELE_P2P_WR_BYTES counts copy data only: a signal is control traffic. */
    return SPYRE_STATUS_OK;
}

/*
 * Check the SEM_WAIT c of ring n (entry idx; @first: its first check),
 * which gives up at virtual time deadline_ns. Returns
 * SPYRE_STATUS_SEM_WAITING while it has to wait, else its status with
 * *cycles (and *fault for ERR_MMU_FAULT).
 */
static uint32_t spyre_sem_check(SpyreState *s, unsigned n, uint32_t idx,
                                const struct spyre_hw_cmd *c, bool first,
                                int64_t deadline_ns, uint64_t *cycles,
                                SpyreMmuFault *fault)
{
    const struct spyre_hw_cmd_sem *m = &c->sem;
    bool host = c->hdr.flags & SPYRE_CMD_F_SRC_HOST;
    SpyreDmaPeer peer = { .ddr_mbps = UINT32_MAX };
    struct spyre_hw_sem sem;
    uint64_t start, seen;
    SpyreMmuMap *map;
    uint32_t st;

    *cycles = SPYRE_CYCLES_ERROR;
    st = spyre_sem_map(s, c, host, true, first, &map, fault);
    if (st != SPYRE_STATUS_OK) {
        return st;
    }
    st = spyre_dma_side_rw(s, m->addr, host, map, m->offset, &sem.value,
                           sizeof(sem.value), false, fault, &peer);
    if (st == SPYRE_STATUS_OK) {
        /* The cycle stored with the value seen, or a later one. */
        smp_rmb();
        st = spyre_dma_side_rw(s, m->addr, host, map, m->offset + 8,
                               &sem.cycle, sizeof(sem.cycle), false, fault,
                               &peer);
    }
    spyre_mmu_unref(map);
    if (st != SPYRE_STATUS_OK) {
        trace_spyre_sem_wait(n, idx, 0, m->value, 0, "failed");
        return st;
    }
    sem.value = le64_to_cpu(sem.value);
    sem.cycle = le64_to_cpu(sem.cycle);
    start = spyre_clock_ready(s, n, idx);
    if (sem.value >= m->value) {
        /* Lamport join: never before the signal it saw. */
        seen = MIN(sem.cycle, SPYRE_SEM_CYCLE_MAX);
        *cycles = MAX(start, seen) + SPYRE_CYCLES_SEM_WAIT - start;
        trace_spyre_sem_wait(n, idx, sem.value, m->value, sem.cycle, "done");
        return SPYRE_STATUS_OK;
    }
    if (qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) >= deadline_ns) {
        /* Not a malformed command: traced, not logged as a guest error. */
        *cycles = SPYRE_CYCLES_SEM_WAIT;
        trace_spyre_sem_wait(n, idx, sem.value, m->value, sem.cycle,
                             "timeout");
        return SPYRE_STATUS_ERR_TIMEOUT;
    }
    if (first) {
        trace_spyre_sem_wait(n, idx, sem.value, m->value, sem.cycle,
                             "waiting");
    }
    return SPYRE_STATUS_SEM_WAITING;
}

/* Arm the timer for the next re-check or timeout of a waiting SEM_WAIT. */
static void spyre_sem_rearm(SpyreState *s)
{
    int64_t next = INT64_MAX;
    int64_t poll;
    unsigned i;

    for (i = 0; i < s->num_rings; i++) {
        if (s->rings[i].sem_wait) {
            next = MIN(next, s->rings[i].sem_deadline_ns);
        }
    }
    if (next == INT64_MAX) {
        timer_del(s->sem_timer);
        return;
    }
    poll = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) + SPYRE_SEM_POLL_US * SCALE_US;
    timer_mod(s->sem_timer, MIN(next, poll));
}

uint32_t spyre_sem_wait(SpyreState *s, unsigned n, uint32_t idx,
                        const struct spyre_hw_cmd *c, uint64_t *cycles,
                        SpyreMmuFault *fault)
{
    SpyreRing *r = &s->rings[n];
    int64_t now = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
    int64_t deadline = now + (int64_t)c->sem.timeout_us * SCALE_US;
    uint32_t st;

    st = spyre_sem_validate(s, n, c, true);
    if (st != SPYRE_STATUS_OK) {
        return st;
    }
    st = spyre_sem_check(s, n, idx, c, true, deadline, cycles, fault);
    if (st != SPYRE_STATUS_SEM_WAITING) {
        return st;
    }
    r->sem_wait = true;
    r->sem_idx = idx;
    r->sem_cmd = *c;
    r->sem_start_ns = now;
    r->sem_deadline_ns = deadline;
    spyre_sem_rearm(s);
    return SPYRE_STATUS_SEM_WAITING;
}

/*
 * Main loop: check the waiting SEM_WAITs again if a command completed since
 * (or the timer fired) and complete those released or timed out; again
 * while that completes more. Returns the interrupt causes to raise.
 */
uint32_t spyre_sem_poll(SpyreState *s)
{
    uint32_t causes = 0;
    bool any = false;
    unsigned i;

    while (s->sem_kick) {
        s->sem_kick = false;
        for (i = 0; i < s->num_rings; i++) {
            SpyreRing *r = &s->rings[i];
            SpyreMmuFault fault;
            uint64_t cycles;
            uint32_t st, detail = 0;

            if (!r->sem_wait) {
                continue;
            }
            any = true;
            st = spyre_sem_check(s, i, r->sem_idx, &r->sem_cmd, false,
                                 r->sem_deadline_ns, &cycles, &fault);
            if (st == SPYRE_STATUS_SEM_WAITING) {
                continue;
            }
            r->sem_wait = false;
            if (st == SPYRE_STATUS_ERR_MMU_FAULT) {
                detail = spyre_mmu_report(s, i, &fault);
            }
            causes |= spyre_ring_complete(s, i, r->sem_idx,
                                          r->sem_cmd.hdr.seqno,
                                          r->sem_cmd.hdr.flags, st, detail,
                                          cycles, SPYRE_CLK_NONE);
        }
    }
    if (any) {
        spyre_sem_rearm(s);
    }
    return causes;
}

/* Ring n lets go of its waiting SEM_WAIT, if any: no completion. */
void spyre_sem_cancel(SpyreState *s, unsigned n)
{
    SpyreRing *r = &s->rings[n];

    if (!r->sem_wait) {
        return;
    }
    trace_spyre_sem_wait(n, r->sem_idx, 0, r->sem_cmd.sem.value, 0,
                         "cancelled");
    r->sem_wait = false;
    spyre_sem_rearm(s);
}

static void spyre_sem_timer(void *opaque)
{
    SpyreState *s = opaque;
    uint32_t causes;

    s->sem_kick = true;
    causes = spyre_sem_poll(s);
    if (causes) {
        spyre_raise(s, causes);
    }
    /* The rings of the SEM_WAITs that ended may have more work. */
    qemu_bh_schedule(s->bh);
}

void spyre_sem_init(SpyreState *s)
{
    s->sem_timer = timer_new_ns(QEMU_CLOCK_VIRTUAL, spyre_sem_timer, s);
}

void spyre_sem_fini(SpyreState *s)
{
    timer_free(s->sem_timer);
    s->sem_timer = NULL;
}
