/*
 * Spyre-style PCIe AI accelerator model: PCI function, QOM properties,
 * BAR0 registers, interrupts, telemetry and reset.
 *
 * The guest-visible interface is encoded in spyre_hw.h and specified in
 * Documentation/hardware.md of the Spyre open stack.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <math.h>
#include "qemu/log.h"
#include "qemu/module.h"
#include "qemu/units.h"
#include "qemu/timer.h"
#include "qemu/main-loop.h"
#include "qapi/error.h"
#include "hw/pci/pci_device.h"
#include "hw/pci/msix.h"
#include "hw/pci/pcie.h"
#include "hw/qdev-properties.h"
#include "migration/vmstate.h"
#include "spyre.h"
#include "trace.h"

#define SPYRE_STICK_BYTES           128
#define SPYRE_PCIE_CAP_OFFSET       0x80
#define SPYRE_DEVMEM_MIN            (1 * MiB)
#define SPYRE_DEVMEM_MAX            (1 * TiB)

/* ---- Thermal and power model ---- */

/*
 * heat_ns is the device's busy time (modeled cycles converted to ns at
 * clock-mhz) passed through an exponential decay with time constant
 * SPYRE_THERMAL_TAU_NS of the virtual clock. A device busy 100% of the time
 * converges to heat_ns == tau, so utilization = heat_ns / tau in [0, 1].
 */
void spyre_update_load(SpyreState *s, uint64_t busy_cycles)
{
    int64_t now = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
    int64_t dt = now - s->heat_stamp_ns;

    if (dt > 0) {
        s->heat_ns *= exp(-(double)dt / SPYRE_THERMAL_TAU_NS);
        s->heat_stamp_ns = now;
    }
    s->heat_ns += (double)busy_cycles * 1000.0 / s->clock_mhz;
}

static double spyre_utilization(SpyreState *s)
{
    double u;

    spyre_update_load(s, 0);
    u = s->heat_ns / SPYRE_THERMAL_TAU_NS;
    return u > 1.0 ? 1.0 : u;
}

static uint32_t spyre_temp_mc(SpyreState *s)
{
    return SPYRE_IDLE_TEMP_MC + (uint32_t)(spyre_utilization(s) *
                                           SPYRE_LOAD_TEMP_MC);
}

static uint32_t spyre_power_mw(SpyreState *s)
{
    uint32_t p = SPYRE_IDLE_POWER_MW + (uint32_t)(spyre_utilization(s) *
                                                  SPYRE_LOAD_POWER_MW);

    return MIN(p, s->power_cap_mw);
}

/* ---- Interrupts ---- */

static unsigned spyre_cause_vector(SpyreState *s, unsigned bit)
{
    return bit == 31 ? s->num_rings : bit;
}

static void spyre_update_intx(SpyreState *s)
{
    PCIDevice *pdev = PCI_DEVICE(s);
    bool level = !msix_enabled(pdev) && (s->intr_status & s->intr_mask);

    pci_set_irq(pdev, level);
}

static void spyre_notify(SpyreState *s, uint32_t causes)
{
    PCIDevice *pdev = PCI_DEVICE(s);
    uint32_t pending = causes & s->intr_mask;

    if (msix_enabled(pdev)) {
        while (pending) {
            unsigned bit = ctz32(pending);

            pending &= pending - 1;
            trace_spyre_irq(bit, spyre_cause_vector(s, bit));
            /* msix_notify() sets the PBA bit if the vector is masked. */
            msix_notify(pdev, spyre_cause_vector(s, bit));
        }
    }
    spyre_update_intx(s);
}

/*
 * Set interrupt causes. Each call notifies the MSI-X vector of every cause
 * that is enabled in INTR_MASK, even if it was already pending, so that a
 * driver clearing INTR_STATUS after it scanned the ring never misses work.
 */
void spyre_raise(SpyreState *s, uint32_t causes)
{
    s->intr_status |= causes;
    spyre_notify(s, causes);
}

/* ---- Reset ---- */

/*
 * Main loop: a reset still stops running commands (RESETTING); once the
 * last one let go (and no WEDGE hang holds the card), the card is READY.
 */
void spyre_reset_progress(SpyreState *s)
{
    if ((s->status & SPYRE_STATUS_RESETTING) && !s->jobs_outstanding &&
        !s->wedged) {
        s->status = SPYRE_STATUS_READY;
        trace_spyre_reset_done(s->tele_resets);
    }
}

/*
 * Reset the card. Every command is cancelled: queued ones and finished
 * ones not yet completed are dropped now, running ones are disowned (they
 * complete nothing). A register RESET (pci false) never waits: STATUS is
 * RESETTING until the running ones let go, READY at once if none runs; a
 * WEDGE hang keeps it RESETTING. A PCI reset (pci true) waits for them,
 * which is bounded: the workers never wait for the BQL.
 */
static void spyre_card_reset(SpyreState *s, bool count, bool pci)
{
    bool wedged = s->wedged && !pci;
    unsigned i;

    for (i = 0; i < SPYRE_NUM_RINGS_MAX; i++) {
        if ((s->rings[i].hang & SPYRE_HANG_WEDGE) && !pci) {
            wedged = true;
        }
    }
    spyre_worker_disown_all(&s->engine_worker, pci);
    spyre_worker_disown_all(&s->dma_worker, pci);
    qemu_bh_cancel(s->bh);
    for (i = 0; i < SPYRE_NUM_RINGS_MAX; i++) {
        spyre_ring_reset(&s->rings[i]);
    }
    /* Waiting SEM_WAITs were dropped with their rings. */
    timer_del(s->sem_timer);
    s->sem_kick = false;
    s->scratch = 0;
    s->intr_status = 0;
    s->intr_mask = 0;
    s->error_code = SPYRE_STATUS_OK;
    s->fault_inject = 0;
    s->fault_hang = 0;
    s->next_ring = 0;
    /* The modeled clock starts again at cycle 0 (hardware.md section 9). */
    memset(s->clk_unit, 0, sizeof(s->clk_unit));
    s->clk_posted = 0;
    spyre_mmu_reset(s);
    s->wedged = wedged;
    if (count) {
        s->tele_resets++;
    }
    s->status = SPYRE_STATUS_RESETTING;
    trace_spyre_reset(s->tele_resets, s->jobs_outstanding, wedged);
    spyre_reset_progress(s);
    spyre_update_intx(s);
}

static void spyre_qdev_reset(DeviceState *dev)
{
    SpyreState *s = SPYRE(dev);

    /* The reset at power-on is not counted in TELE_RESETS. */
    spyre_card_reset(s, s->powered_on, true);
    s->powered_on = true;
}

/* ---- BAR0 registers ---- */

static uint32_t spyre_tele64(SpyreState *s, uint64_t v, bool hi)
{
    if (hi) {
        return s->tele_hi_latch;
    }
    s->tele_hi_latch = v >> 32;
    return (uint32_t)v;
}

/* Per-core telemetry block (SPYRE_TELE_CORE_*). */
static uint32_t spyre_core_tele_read(SpyreState *s, hwaddr addr)
{
    unsigned n = (addr - SPYRE_TELE_CORE_BASE) / SPYRE_TELE_CORE_STRIDE;
    unsigned reg = (addr - SPYRE_TELE_CORE_BASE) % SPYRE_TELE_CORE_STRIDE;
    SpyreCoreTele *t;
    uint64_t v;

    if (n >= s->num_cores) {
        return 0;
    }
    t = &s->tele_core[n];
    if (reg < SPYRE_TELE_CORE_BUSY_LO(SPYRE_LAUNCH_UNITS)) {
        v = t->busy[reg / 8];
    } else if ((reg & ~4) == SPYRE_TELE_CORE_ACTIVE_LO) {
        v = t->active;
    } else if ((reg & ~4) == SPYRE_TELE_CORE_INSTRS_LO) {
        v = t->instrs;
    } else {
        return 0;
    }
    return spyre_tele64(s, v, reg & 4);
}

static uint64_t spyre_regs_read(void *opaque, hwaddr addr, unsigned size)
{
    SpyreState *s = opaque;
    uint32_t val = 0;

    if (addr >= SPYRE_TELE_CORE_BASE &&
        addr < SPYRE_TELE_CORE_BASE +
               SPYRE_LAUNCH_MAX_CORES * SPYRE_TELE_CORE_STRIDE) {
        val = spyre_core_tele_read(s, addr);
        trace_spyre_mmio_read(addr, val);
        return val;
    }

    if (addr >= SPYRE_RING_BASE &&
        addr < SPYRE_RING_BASE + SPYRE_NUM_RINGS_MAX * SPYRE_RING_STRIDE) {
        unsigned n = (addr - SPYRE_RING_BASE) / SPYRE_RING_STRIDE;

        val = spyre_ring_read(s, n, (addr - SPYRE_RING_BASE) %
                              SPYRE_RING_STRIDE);
        trace_spyre_mmio_read(addr, val);
        return val;
    }

    switch (addr) {
    case SPYRE_REG_ID:
        val = SPYRE_ID_MAGIC;
        break;
    case SPYRE_REG_VERSION:
        val = SPYRE_HW_VERSION(SPYRE_HW_VERSION_MAJOR, SPYRE_HW_VERSION_MINOR);
        break;
    case SPYRE_REG_CAPS:
        val = SPYRE_CAP_DMA | SPYRE_CAP_FENCE | SPYRE_CAP_MSIX |
              SPYRE_CAP_TELEMETRY | SPYRE_CAP_LAUNCH | SPYRE_CAP_RING_ABORT |
              SPYRE_CAP_DMA_2D | SPYRE_CAP_MMU | SPYRE_CAP_EXEC_TIME |
              SPYRE_CAP_CPL_TIME | SPYRE_CAP_SEM;
        if (s->timeslice) {
            val |= SPYRE_CAP_TIMESLICE;
        }
        if (s->p2p) {
            val |= SPYRE_CAP_P2P;
        }
        if (s->fault_inject_enabled) {
            val |= SPYRE_CAP_FAULT_INJECT;
        }
        break;
    case SPYRE_REG_NUM_CORES:
        val = s->num_cores;
        break;
    case SPYRE_REG_DEVMEM_SIZE_LO:
        val = (uint32_t)s->devmem_size;
        break;
    case SPYRE_REG_DEVMEM_SIZE_HI:
        val = s->devmem_size >> 32;
        break;
    case SPYRE_REG_NUM_RINGS:
        val = s->num_rings;
        break;
    case SPYRE_REG_LX_SIZE:
        val = s->lx_size;
        break;
    case SPYRE_REG_STATUS:
        val = s->status;
        break;
    case SPYRE_REG_RESET:
        val = 0;
        break;
    case SPYRE_REG_CLOCK_MHZ:
        val = s->clock_mhz;
        break;
    case SPYRE_REG_SCRATCH:
        val = s->scratch;
        break;
    case SPYRE_REG_INTR_STATUS:
        val = s->intr_status;
        break;
    case SPYRE_REG_INTR_MASK:
        val = s->intr_mask;
        break;
    case SPYRE_REG_ERROR_CODE:
        val = s->error_code;
        break;
    case SPYRE_REG_STICK_BYTES:
        val = SPYRE_STICK_BYTES;
        break;
    case SPYRE_REG_FAULT_INJECT:
        val = s->fault_inject;
        break;
    case SPYRE_REG_FAULT_HANG:
        val = s->fault_hang;
        break;
    case SPYRE_REG_FAULT_MMU:
        val = s->mmu.fault_next;
        break;
    case SPYRE_REG_TELE_CMDS_LO:
    case SPYRE_REG_TELE_CMDS_HI:
        val = spyre_tele64(s, s->tele_cmds, addr & 4);
        break;
    case SPYRE_REG_TELE_H2D_BYTES_LO:
    case SPYRE_REG_TELE_H2D_BYTES_HI:
        val = spyre_tele64(s, s->tele_h2d, addr & 4);
        break;
    case SPYRE_REG_TELE_D2H_BYTES_LO:
    case SPYRE_REG_TELE_D2H_BYTES_HI:
        val = spyre_tele64(s, s->tele_d2h, addr & 4);
        break;
    case SPYRE_REG_TELE_D2D_BYTES_LO:
    case SPYRE_REG_TELE_D2D_BYTES_HI:
        val = spyre_tele64(s, s->tele_d2d, addr & 4);
        break;
    case SPYRE_REG_TELE_ERRORS:
        val = s->tele_errors;
        break;
    case SPYRE_REG_TELE_RESETS:
        val = s->tele_resets;
        break;
    case SPYRE_REG_TELE_TEMP_MC:
        val = spyre_temp_mc(s);
        break;
    case SPYRE_REG_TELE_POWER_MW:
        val = spyre_power_mw(s);
        break;
    case SPYRE_REG_TELE_POWER_CAP_MW:
        val = s->power_cap_mw;
        break;
    case SPYRE_REG_TELE_LAUNCH_ERRORS:
        val = s->tele_launch_errors;
        break;
    case SPYRE_REG_TELE_LAUNCHES_LO:
    case SPYRE_REG_TELE_LAUNCHES_HI:
        val = spyre_tele64(s, s->tele_launches, addr & 4);
        break;
    case SPYRE_REG_TELE_ENG_CYCLES_LO:
    case SPYRE_REG_TELE_ENG_CYCLES_HI:
        val = spyre_tele64(s, s->tele_eng_cycles, addr & 4);
        break;
    case SPYRE_REG_TELE_ENG_INSTRS_LO:
    case SPYRE_REG_TELE_ENG_INSTRS_HI:
        val = spyre_tele64(s, s->tele_eng_instrs, addr & 4);
        break;
    case SPYRE_REG_TELE_ENG_MACS_LO:
    case SPYRE_REG_TELE_ENG_MACS_HI:
        val = spyre_tele64(s, s->tele_eng_macs, addr & 4);
        break;
    case SPYRE_REG_TELE_ENG_DDR_RD_LO:
    case SPYRE_REG_TELE_ENG_DDR_RD_HI:
        val = spyre_tele64(s, s->tele_eng_ddr_rd, addr & 4);
        break;
    case SPYRE_REG_TELE_ENG_DDR_WR_LO:
    case SPYRE_REG_TELE_ENG_DDR_WR_HI:
        val = spyre_tele64(s, s->tele_eng_ddr_wr, addr & 4);
        break;
    case SPYRE_REG_TELE_ENG_RING_LO:
    case SPYRE_REG_TELE_ENG_RING_HI:
        val = spyre_tele64(s, s->tele_eng_ring, addr & 4);
        break;
    case SPYRE_REG_TELE_MMU_FAULTS:
        val = s->mmu.tele_faults;
        break;
    case SPYRE_REG_TELE_ENG_SWITCHES_LO:
    case SPYRE_REG_TELE_ENG_SWITCHES_HI:
        val = spyre_tele64(s, s->tele_eng_switches, addr & 4);
        break;
    case SPYRE_REG_TELE_ENG_SWITCH_CYCLES_LO:
    case SPYRE_REG_TELE_ENG_SWITCH_CYCLES_HI:
        val = spyre_tele64(s, s->tele_eng_switch_cycles, addr & 4);
        break;
    case SPYRE_REG_TELE_P2P_RD_BYTES_LO:
    case SPYRE_REG_TELE_P2P_RD_BYTES_HI:
        val = spyre_tele64(s, s->tele_p2p_rd, addr & 4);
        break;
    case SPYRE_REG_TELE_P2P_WR_BYTES_LO:
    case SPYRE_REG_TELE_P2P_WR_BYTES_HI:
        val = spyre_tele64(s, s->tele_p2p_wr, addr & 4);
        break;
    case SPYRE_REG_MMU_CTX_BASE_LO:
    case SPYRE_REG_MMU_CTX_BASE_HI:
        val = spyre_mmu_read_base(s, addr == SPYRE_REG_MMU_CTX_BASE_HI);
        break;
    default:
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: read of unimplemented register 0x%" HWADDR_PRIx
                      "\n", addr);
        break;
    }
    trace_spyre_mmio_read(addr, val);
    return val;
}

static void spyre_regs_write(void *opaque, hwaddr addr, uint64_t val64,
                             unsigned size)
{
    SpyreState *s = opaque;
    uint32_t val = val64;
    uint32_t newly;

    trace_spyre_mmio_write(addr, val);

    if (addr >= SPYRE_RING_BASE &&
        addr < SPYRE_RING_BASE + SPYRE_NUM_RINGS_MAX * SPYRE_RING_STRIDE) {
        unsigned n = (addr - SPYRE_RING_BASE) / SPYRE_RING_STRIDE;

        spyre_ring_write(s, n, (addr - SPYRE_RING_BASE) % SPYRE_RING_STRIDE,
                         val);
        return;
    }

    switch (addr) {
    case SPYRE_REG_RESET:
        if (val == SPYRE_RESET_MAGIC) {
            spyre_card_reset(s, true, false);
        } else {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: RESET written with 0x%08x, not the magic\n",
                          val);
        }
        break;
    case SPYRE_REG_SCRATCH:
        s->scratch = val;
        break;
    case SPYRE_REG_MMU_CTX_BASE_LO:
    case SPYRE_REG_MMU_CTX_BASE_HI:
        spyre_mmu_write_base(s, addr == SPYRE_REG_MMU_CTX_BASE_HI, val);
        break;
    case SPYRE_REG_MMU_INVALIDATE:
        spyre_mmu_invalidate(s, val);
        break;
    case SPYRE_REG_INTR_STATUS:
        s->intr_status &= ~val;
        spyre_update_intx(s);
        break;
    case SPYRE_REG_INTR_MASK:
        newly = val & ~s->intr_mask;
        s->intr_mask = val;
        /* Causes pending while masked are delivered when enabled. */
        spyre_notify(s, s->intr_status & newly);
        break;
    case SPYRE_REG_FAULT_INJECT:
    case SPYRE_REG_FAULT_HANG:
    case SPYRE_REG_FAULT_MMU:
        if (!s->fault_inject_enabled) {
            qemu_log_mask(LOG_GUEST_ERROR,
                          "spyre: write of 0x%08x to fault injection register "
                          "0x%" HWADDR_PRIx " without x-fault-inject=on "
                          "ignored\n", val, addr);
        } else if (addr == SPYRE_REG_FAULT_INJECT) {
            s->fault_inject = val;
        } else if (addr == SPYRE_REG_FAULT_MMU) {
            s->mmu.fault_next = val;
        } else {
            if (val & ~SPYRE_HANG_VALID_MASK) {
                qemu_log_mask(LOG_GUEST_ERROR,
                              "spyre: reserved FAULT_HANG bits 0x%08x "
                              "ignored\n", val & ~SPYRE_HANG_VALID_MASK);
            }
            val &= SPYRE_HANG_VALID_MASK;
            s->fault_hang = (val & SPYRE_HANG_COUNT_MASK) ? val : 0;
        }
        break;
    default:
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: write of 0x%08x to read-only or unimplemented "
                      "register 0x%" HWADDR_PRIx "\n", val, addr);
        break;
    }
}

static const MemoryRegionOps spyre_regs_ops = {
    .read = spyre_regs_read,
    .write = spyre_regs_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = {
        .min_access_size = 4,
        .max_access_size = 8,
    },
    .impl = {
        .min_access_size = 4,
        .max_access_size = 4,
    },
};

/* ---- PCI function ---- */

static void spyre_write_config(PCIDevice *pdev, uint32_t addr, uint32_t val,
                               int len)
{
    SpyreState *s = SPYRE(pdev);
    bool msix_was = msix_enabled(pdev);

    pci_default_write_config(pdev, addr, val, len);
    if (pci_is_express(pdev) && pdev->exp.exp_cap) {
        /* Function-level reset: a PCI reset of the function. */
        pcie_cap_flr_write_config(pdev, addr, val, len);
    }
    /*
     * MSI-X enable toggles between MSI-X and INTx delivery. Causes pending
     * and enabled when MSI-X gets enabled are sent (to the PBA if masked),
     * as INTx would have signalled them.
     */
    if (!msix_was && msix_enabled(pdev)) {
        spyre_notify(s, s->intr_status & s->intr_mask);
    }
    spyre_update_intx(s);
}

static void spyre_realize(PCIDevice *pdev, Error **errp)
{
    SpyreState *s = SPYRE(pdev);
    uint8_t *conf = pdev->config;
    unsigned i;

    if (!is_power_of_2(s->devmem_size) || s->devmem_size < SPYRE_DEVMEM_MIN ||
        s->devmem_size > SPYRE_DEVMEM_MAX) {
        error_setg(errp, "spyre: devmem-size must be a power of two between "
                   "1M and 1T (got %" PRIu64 ")", s->devmem_size);
        return;
    }
    if (s->num_rings < 1 || s->num_rings > SPYRE_NUM_RINGS_MAX) {
        error_setg(errp, "spyre: num-rings must be in [1, %d] (got %u)",
                   SPYRE_NUM_RINGS_MAX, s->num_rings);
        return;
    }
    if (s->num_cores < 1 || s->num_cores > SPYRE_LAUNCH_MAX_CORES) {
        error_setg(errp, "spyre: num-cores must be in [1, %d] (got %u)",
                   SPYRE_LAUNCH_MAX_CORES, s->num_cores);
        return;
    }
    if (s->lx_size < SPYRE_STICK_BYTES || s->lx_size % SPYRE_STICK_BYTES ||
        s->lx_size > 1 * GiB) {
        error_setg(errp, "spyre: lx-size must be a multiple of %d bytes in "
                   "[%d, 1G] (got %u)", SPYRE_STICK_BYTES, SPYRE_STICK_BYTES,
                   s->lx_size);
        return;
    }
    if (s->mmu_cache_runs < SPYRE_MMU_CTX_SHARE ||
        s->mmu_cache_runs > SPYRE_MMU_CACHE_RUNS_MAX) {
        error_setg(errp, "spyre: x-mmu-cache-runs must be in [%d, %u] "
                   "(got %u)", SPYRE_MMU_CTX_SHARE, SPYRE_MMU_CACHE_RUNS_MAX,
                   s->mmu_cache_runs);
        return;
    }
    if (s->timeslice_ms < 1 || s->timeslice_ms > 10000) {
        error_setg(errp, "spyre: timeslice-ms must be in [1, 10000] (got %u)",
                   s->timeslice_ms);
        return;
    }
    if (s->engine_threads > 1024) {
        error_setg(errp, "spyre: x-engine-threads must be in [0, 1024] "
                   "(got %u)", s->engine_threads);
        return;
    }
    if (s->clock_mhz < 1 || s->clock_mhz > 100000) {
        error_setg(errp, "spyre: clock-mhz must be in [1, 100000] (got %u)",
                   s->clock_mhz);
        return;
    }
    if (s->ddr_mbps == 0) {
        error_setg(errp, "spyre: ddr-mbps must not be zero");
        return;
    }
    if (s->pcie_mbps == 0) {
        error_setg(errp, "spyre: pcie-mbps must not be zero");
        return;
    }
    if (s->p2p_mbps == 0) {
        error_setg(errp, "spyre: p2p-mbps must not be zero");
        return;
    }
    if (s->ring_bytes_per_cycle == 0 || s->ring_bytes_per_cycle > 65536) {
        error_setg(errp, "spyre: ring-bytes-per-cycle must be in [1, 65536] "
                   "(got %u)", s->ring_bytes_per_cycle);
        return;
    }
    if (s->power_cap_mw == 0) {
        error_setg(errp, "spyre: power-cap-mw must not be zero");
        return;
    }

    pci_config_set_vendor_id(conf, s->vendor_id);
    pci_config_set_device_id(conf, s->device_id);
    pci_config_set_interrupt_pin(conf, 1);

    memory_region_init_io(&s->regs, OBJECT(s), &spyre_regs_ops, s,
                          "spyre-regs", SPYRE_REGS_SIZE);
    pci_register_bar(pdev, SPYRE_BAR_REGS, PCI_BASE_ADDRESS_SPACE_MEMORY,
                     &s->regs);

    /*
     * Anonymous, unreserved RAM: the host kernel allocates pages on first
     * touch, so a large device memory costs nothing until it is used.
     */
    if (!memory_region_init_ram_flags_nomigrate(&s->devmem, OBJECT(s),
                                                "spyre-devmem", s->devmem_size,
                                                RAM_NORESERVE, errp)) {
        return;
    }
    s->devmem_ptr = memory_region_get_ram_ptr(&s->devmem);
    pci_register_bar(pdev, SPYRE_BAR_DEVMEM,
                     PCI_BASE_ADDRESS_SPACE_MEMORY |
                     PCI_BASE_ADDRESS_MEM_TYPE_64 |
                     PCI_BASE_ADDRESS_MEM_PREFETCH, &s->devmem);

    if (msix_init_exclusive_bar(pdev, s->num_rings + 1, SPYRE_BAR_MSIX,
                                errp)) {
        return;
    }
    for (i = 0; i <= s->num_rings; i++) {
        msix_vector_use(pdev, i);
    }

    if (pci_bus_is_express(pci_get_bus(pdev))) {
        if (pcie_endpoint_cap_init(pdev, SPYRE_PCIE_CAP_OFFSET) < 0) {
            error_setg(errp, "spyre: cannot add the PCIe capability");
            msix_uninit_exclusive_bar(pdev);
            return;
        }
        pcie_cap_flr_init(pdev);
        /*
         * The card's link is PCIe Gen5 x16 (LNKCAP, LNKCAP2, LNKSTA), not
         * QEMU's default 2.5 GT/s x1; as an RCiEP on pcie.0 (no link) the
         * registers read the same.
         */
        pcie_cap_fill_link_ep_usp(pdev, QEMU_PCI_EXP_LNK_X16,
                                  QEMU_PCI_EXP_LNK_32GT);
    }

    s->bh = qemu_bh_new_guarded(spyre_ring_bh, s,
                                &DEVICE(s)->mem_reentrancy_guard);
    s->heat_ns = 0;
    s->heat_stamp_ns = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
    spyre_launch_worker_init(s);
    spyre_dma_worker_init(s);
    spyre_sem_init(s);
}

static void spyre_exit(PCIDevice *pdev)
{
    SpyreState *s = SPYRE(pdev);
    unsigned i;

    /*
     * Stop the workers (bounded: they never wait for the BQL): no job
     * touches devmem or guest memory after this.
     */
    spyre_launch_worker_fini(s);
    spyre_worker_fini(&s->dma_worker);
    spyre_mmu_reset(s);
    for (i = 0; i < SPYRE_NUM_RINGS_MAX; i++) {
        spyre_ring_reset(&s->rings[i]);
    }
    spyre_sem_fini(s);
    qemu_bh_delete(s->bh);
    if (pci_bus_is_express(pci_get_bus(pdev))) {
        pcie_cap_exit(pdev);
    }
    msix_uninit_exclusive_bar(pdev);
}

static void spyre_instance_init(Object *obj)
{
    /*
     * A hybrid device: PCIe (4 KiB config space, PCIe capability) on a PCIe
     * bus, conventional PCI elsewhere. QEMU leaves the flag to hybrids.
     */
    PCI_DEVICE(obj)->cap_present |= QEMU_PCI_CAP_EXPRESS;
}

static const Property spyre_props[] = {
    DEFINE_PROP_SIZE("devmem-size", SpyreState, devmem_size, 1 * GiB),
    DEFINE_PROP_UINT32("num-rings", SpyreState, num_rings, 4),
    DEFINE_PROP_UINT32("num-cores", SpyreState, num_cores, 32),
    DEFINE_PROP_SIZE32("lx-size", SpyreState, lx_size, 2 * MiB),
    DEFINE_PROP_UINT32("clock-mhz", SpyreState, clock_mhz, 1500),
    DEFINE_PROP_UINT32("ddr-mbps", SpyreState, ddr_mbps, SPYRE_DDR_MBPS),
    DEFINE_PROP_UINT32("pcie-mbps", SpyreState, pcie_mbps, SPYRE_PCIE_MBPS),
    /* Copies may reach peer cards' device memory (hw 1.6, CAP_P2P). */
    DEFINE_PROP_BOOL("p2p", SpyreState, p2p, true),
    DEFINE_PROP_UINT32("p2p-mbps", SpyreState, p2p_mbps, SPYRE_P2P_MBPS),
    DEFINE_PROP_UINT32("ring-bytes-per-cycle", SpyreState, ring_bytes_per_cycle,
                       128),
    DEFINE_PROP_UINT32("power-cap-mw", SpyreState, power_cap_mw, 75000),
    /* Time-slice the engine between rings' launches (off: run to the end). */
    DEFINE_PROP_BOOL("timeslice", SpyreState, timeslice, true),
    DEFINE_PROP_UINT32("timeslice-ms", SpyreState, timeslice_ms,
                       SPYRE_TIMESLICE_MS),
    /* Test and debugging knobs (not a stable interface). */
    /* Host threads of the compute engine; 0 = min(host CPUs, num-cores). */
    DEFINE_PROP_UINT32("x-engine-threads", SpyreState, engine_threads, 0),
    DEFINE_PROP_UINT32("x-mmu-cache-runs", SpyreState, mmu_cache_runs,
                       SPYRE_MMU_CACHE_RUNS),
    DEFINE_PROP_BOOL("x-fault-inject", SpyreState, fault_inject_enabled,
                     false),

    DEFINE_PROP_UINT16("x-vendor-id", SpyreState, vendor_id,
                       SPYRE_PCI_VENDOR_ID),
    DEFINE_PROP_UINT16("x-device-id", SpyreState, device_id,
                       SPYRE_PCI_DEVICE_ID),
};

static const VMStateDescription spyre_vmstate = {
    .name = "spyre",
    .unmigratable = 1,
};

static void spyre_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);
    PCIDeviceClass *k = PCI_DEVICE_CLASS(oc);

    k->realize = spyre_realize;
    k->exit = spyre_exit;
    k->config_write = spyre_write_config;
    k->vendor_id = SPYRE_PCI_VENDOR_ID;
    k->device_id = SPYRE_PCI_DEVICE_ID;
    k->revision = SPYRE_PCI_REVISION;
    k->class_id = SPYRE_PCI_CLASS;
    dc->desc = "Spyre-style AI accelerator (command rings, DMA, dataflow "
               "engine)";
    dc->vmsd = &spyre_vmstate;
    device_class_set_props(dc, spyre_props);
    device_class_set_legacy_reset(dc, spyre_qdev_reset);
    set_bit(DEVICE_CATEGORY_MISC, dc->categories);
}

static const TypeInfo spyre_info = {
    .name = TYPE_SPYRE,
    .parent = TYPE_PCI_DEVICE,
    .instance_size = sizeof(SpyreState),
    .instance_init = spyre_instance_init,
    .class_init = spyre_class_init,
    .interfaces = (InterfaceInfo[]) {
        { INTERFACE_PCIE_DEVICE },
        { INTERFACE_CONVENTIONAL_PCI_DEVICE },
        { },
    },
};

static void spyre_register_types(void)
{
    type_register_static(&spyre_info);
}

type_init(spyre_register_types)
