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
#include "qom/object.h"
#include "spyre_hw.h"

#define TYPE_SPYRE "spyre"
OBJECT_DECLARE_SIMPLE_TYPE(SpyreState, SPYRE)

/* Modeled costs (device cycles), see Documentation/hardware.md. */
#define SPYRE_CYCLES_NOP            16
#define SPYRE_CYCLES_FENCE          32
#define SPYRE_CYCLES_DMA_SETUP      256
#define SPYRE_CYCLES_ERROR          16
/* LPDDR5 aggregate bandwidth, in MB/s (204.8 GB/s). */
#define SPYRE_DDR_MBPS              204800ULL

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
} SpyreRing;

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
    uint32_t power_cap_mw;
    uint16_t vendor_id;
    uint16_t device_id;

    /* Global registers. */
    uint32_t status;
    uint32_t scratch;
    uint32_t intr_status;
    uint32_t intr_mask;
    uint32_t error_code;
    uint32_t fault_inject;

    SpyreRing rings[SPYRE_NUM_RINGS_MAX];
    unsigned next_ring;         /* round-robin start of the next BH run */

    /* Telemetry (survive device reset). */
    uint64_t tele_cmds;
    uint64_t tele_h2d;
    uint64_t tele_d2h;
    uint64_t tele_d2d;
    uint32_t tele_errors;
    uint32_t tele_resets;
    uint32_t tele_hi_latch;     /* HI half latched by the last LO read */
    bool powered_on;            /* first reset after realize is power-on */

    /* Thermal/power model: decaying busy time, see spyre_update_load(). */
    double heat_ns;
    int64_t heat_stamp_ns;
};

/* spyre.c */
void spyre_raise(SpyreState *s, uint32_t causes);
void spyre_update_load(SpyreState *s, uint64_t busy_cycles);

/* spyre-ring.c */
void spyre_ring_write(SpyreState *s, unsigned n, unsigned reg, uint32_t val);
uint32_t spyre_ring_read(SpyreState *s, unsigned n, unsigned reg);
void spyre_ring_reset(SpyreRing *r);
void spyre_ring_bh(void *opaque);

/* spyre-dma.c */
uint32_t spyre_dma_copy(SpyreState *s, const struct spyre_hw_cmd_dma *d,
                        uint8_t flags, uint64_t *cycles);
uint64_t spyre_dma_cycles(SpyreState *s, uint64_t bytes);

#endif /* HW_MISC_SPYRE_H */
