/*
 * Spyre-style PCIe AI accelerator model: DMA engine and its cycle model.
 *
 * A device-side address is an offset into device memory; the engine copies
 * it with a bounds-checked memcpy/memmove on the RAM block. A host-side
 * address is the DMA address of a two-level host page directory (see
 * spyre_hw.h); the engine walks it one page table (2 MiB of host memory) at
 * a time and merges physically contiguous pages into one host access.
 *
 * Copies of at least SPYRE_DMA_ASYNC_MIN bytes run on the DMA worker thread
 * (spyre-worker.c), so a multi-GiB copy does not stall the main loop; their
 * ring waits for them, other rings go on. Smaller copies run inline in the
 * ring bottom half. Both use the same validation and copy loop.
 *
 * Every host-side access of the device (commands, completions, page
 * directories, data, fences, launch descriptors and results) goes through
 * spyre_host_read/write: guest RAM only, never MMIO (not even the card's own
 * BARs), so it is safe without the BQL and cannot re-enter the device.
 * The data pages of a copy may also be a peer spyre card's device memory
 * (hw 1.6, property p2p): that is RAM too, reached the same way, so two
 * cards copying to each other never wait for one another.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/bitops.h"
#include "qemu/host-utils.h"
#include "qemu/log.h"
#include "qemu/rcu.h"
#include "exec/memory.h"
#include "hw/pci/pci_device.h"
#include "spyre.h"
#include "trace.h"

#define SPYRE_HOST_PAGE_MASK    ((uint64_t)SPYRE_HOST_PAGE_SIZE - 1)
#define SPYRE_BOUNCE_SIZE       (64 * 1024)
/* Copies this large go to the DMA worker thread. */
#define SPYRE_DMA_ASYNC_MIN     (1 * 1024 * 1024)
/* Device-to-device copies move at most this much between cancel checks. */
#define SPYRE_D2D_CHUNK         (4 * 1024 * 1024)
/* Internal status of a copy stopped by a reset (never reported). */
#define SPYRE_STATUS_CANCELLED  0xfffffffeu

/* ---- Host memory access (bus master DMA) ---- */

/*
 * The peer card whose device memory (BAR2) mr is, if this card may reach
 * it: p2p on, another spyre's RAM block. Anything else a PCI device owns
 * (registers, MSI-X, ROM, other device types, the card's own BAR2) is not.
 */
static SpyreState *spyre_peer_devmem(SpyreState *s, MemoryRegion *mr)
{
    Object *owner = memory_region_owner(mr);
    SpyreState *peer;

    if (!s->p2p || !owner) {
        return NULL;
    }
    peer = (SpyreState *)object_dynamic_cast(owner, TYPE_SPYRE);
    return peer && peer != s && mr == &peer->devmem ? peer : NULL;
}

/*
 * Memory the card may reach: directly accessible RAM that is not a
 * device's BAR (the card's own device memory included) or, if @peer is
 * not NULL (data pages of a copy), a peer card's device memory (*peer set).
 */
static bool spyre_host_ram(SpyreState *s, MemoryRegion *mr, bool is_write,
                           SpyreState **peer)
{
    Object *owner;

    if (!memory_region_is_ram(mr) || memory_region_is_ram_device(mr) ||
        mr == &s->devmem) {
        return false;
    }
    if (is_write && (mr->readonly || mr->rom_device)) {
        return false;
    }
    owner = memory_region_owner(mr);
    if (!owner || !object_dynamic_cast(owner, TYPE_PCI_DEVICE)) {
        return true;
    }
    if (peer) {
        *peer = spyre_peer_devmem(s, mr);
        return *peer != NULL;
    }
    return false;
}

/*
 * Copy between buf and the card's bus master address space at addr. Works
 * with or without the BQL (main loop and workers): the whole range must be
 * guest RAM or, with @pp (a copy's data pages), a peer's device memory
 * (spyre_host_ram); it is accessed through its host mapping under RCU, MMIO
 * is never dispatched. Stops at the first piece that is neither and returns
 * false (a write may have been partly done). Bytes moved to or from peers
 * are added to *pp.
 *
 * A peer's RAM stays alive during one access: the flat view the address
 * was translated through holds a reference to its region (and so to the
 * peer) until the RCU grace period after our read section, and
 * memory_region_ref() holds another until address_space_unmap(); a peer
 * unplugged or reset (BARs cleared) meanwhile no longer translates at the
 * next piece, which fails.
 */
static bool spyre_host_rw(SpyreState *s, uint64_t addr, void *buf,
                          uint64_t len, bool is_write, SpyreDmaPeer *pp)
{
    AddressSpace *as = pci_get_address_space(PCI_DEVICE(s));
    uint8_t *p = buf;

    if (len && addr + len - 1 < addr) {
        return false;
    }
    while (len) {
        hwaddr xlat, l = len;
        SpyreState *peer = NULL;
        MemoryRegion *mr;
        uint8_t *host;

        WITH_RCU_READ_LOCK_GUARD() {
            mr = address_space_translate(as, addr, &xlat, &l, is_write,
                                         MEMTXATTRS_UNSPECIFIED);
            if (!l || !spyre_host_ram(s, mr, is_write, pp ? &peer : NULL)) {
                trace_spyre_host_dma_denied(addr, len, is_write,
                                            memory_region_name(mr));
                return false;
            }
            /* Dropped by address_space_unmap(), which also marks dirty. */
            memory_region_ref(mr);
            host = (uint8_t *)memory_region_get_ram_ptr(mr) + xlat;
            if (is_write) {
                memcpy(host, p, l);
            } else {
                memcpy(p, host, l);
            }
            address_space_unmap(as, host, l, is_write, l);
            if (peer) {
                trace_spyre_p2p(addr, l, is_write,
                                DEVICE(peer)->id ? DEVICE(peer)->id : "");
                if (is_write) {
                    pp->wr += l;
                } else {
                    pp->rd += l;
                }
                pp->ddr_mbps = MIN(pp->ddr_mbps, peer->ddr_mbps);
            }
        }
        p += l;
        addr += l;
        len -= l;
    }
    return true;
}

bool spyre_host_read(SpyreState *s, uint64_t addr, void *buf, uint64_t len)
{
    return spyre_host_rw(s, addr, buf, len, false, NULL);
}

bool spyre_host_write(SpyreState *s, uint64_t addr, const void *buf,
                      uint64_t len)
{
    return spyre_host_rw(s, addr, (void *)buf, len, true, NULL);
}

/*
 * Modeled cycles of a DMA of @bytes, priced by the engine's cycle model
 * (spyre_engine_copy_cycles, Documentation/isa.md "Cycle model"): set-up
 * plus the transfer at the slower of PCIe (pcie-mbps) and LPDDR5 (ddr-mbps)
 * for host copies, or DDR read plus write for device-to-device copies.
 */
uint64_t spyre_dma_cycles(SpyreState *s, bool src_host, bool dst_host,
                          uint64_t bytes)
{
    int kind = src_host ? SPYRE_COPY_HOST_TO_DEVICE :
               dst_host ? SPYRE_COPY_DEVICE_TO_HOST :
                          SPYRE_COPY_DEVICE_TO_DEVICE;

    return spyre_engine_copy_cycles(&s->engine_cfg, kind, bytes);
}

/*
 * Modeled cycles of a copy of @bytes of which P = min(rd + wr, bytes) went
 * to or from peer cards (hw 1.6, hardware.md section 11): the other bytes
 * as spyre_dma_cycles(), the P bytes at the slowest of the peer link
 * (p2p-mbps) and the two cards' device memory (ddr-mbps), plus one peer
 * latency. A copy that touched no peer costs exactly spyre_dma_cycles().
 */
uint64_t spyre_dma_peer_cycles(SpyreState *s, bool src_host, bool dst_host,
                               uint64_t bytes, const SpyreDmaPeer *pp)
{
    uint64_t peer = MIN(pp->rd + pp->wr, bytes);
    uint64_t cycles = spyre_dma_cycles(s, src_host, dst_host, bytes - peer);
    uint64_t mbps;

    if (!peer) {
        return cycles;
    }
    mbps = MIN(MIN(s->p2p_mbps, s->ddr_mbps), pp->ddr_mbps);
    /* peer <= 1 TiB and clock-mhz <= 100000: no overflow */
    return cycles + SPYRE_CYCLES_P2P_LATENCY +
           DIV_ROUND_UP(peer * s->clock_mhz, mbps);
}

/* Walker over one host page directory. */
typedef struct SpyreHostWalk {
    uint64_t dir;               /* DMA address of the directory */
    uint64_t pt_index;          /* index of the cached page table */
    bool pt_valid;
    uint64_t pt[SPYRE_HOST_PT_ENTRIES];
} SpyreHostWalk;

static uint32_t spyre_host_load_pt(SpyreState *s, SpyreHostWalk *w,
                                   uint64_t index)
{
    uint64_t entry_addr, table;
    unsigned i;

    if (index > (UINT64_MAX - w->dir) / sizeof(uint64_t)) {
        return SPYRE_STATUS_ERR_HOST_DMA;
    }
    entry_addr = w->dir + index * sizeof(uint64_t);
    if (!spyre_host_read(s, entry_addr, &table, sizeof(table))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: DMA: cannot read page directory entry at 0x%"
                      PRIx64 "\n", entry_addr);
        return SPYRE_STATUS_ERR_HOST_DMA;
    }
    table = le64_to_cpu(table);
    if (table & SPYRE_HOST_PAGE_MASK) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: DMA: page table address 0x%" PRIx64
                      " not page aligned\n", table);
        return SPYRE_STATUS_ERR_ALIGN;
    }
    if (!spyre_host_read(s, table, w->pt, sizeof(w->pt))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: DMA: cannot read page table at 0x%" PRIx64 "\n",
                      table);
        return SPYRE_STATUS_ERR_HOST_DMA;
    }
    for (i = 0; i < SPYRE_HOST_PT_ENTRIES; i++) {
        w->pt[i] = le64_to_cpu(w->pt[i]);
    }
    w->pt_index = index;
    w->pt_valid = true;
    return SPYRE_STATUS_OK;
}

/*
 * Resolve host byte offset @off into a DMA address and the length (at most
 * @max) of the physically contiguous run that starts there, staying inside
 * one page table.
 */
static uint32_t spyre_host_resolve(SpyreState *s, SpyreHostWalk *w,
                                   uint64_t off, uint64_t max,
                                   dma_addr_t *addr, uint64_t *len)
{
    uint64_t index = off >> SPYRE_HOST_PT_SHIFT;
    unsigned i = (off >> SPYRE_HOST_PAGE_SHIFT) & (SPYRE_HOST_PT_ENTRIES - 1);
    uint64_t in_page = off & SPYRE_HOST_PAGE_MASK;
    uint64_t run;
    uint32_t st;

    if (!w->pt_valid || w->pt_index != index) {
        st = spyre_host_load_pt(s, w, index);
        if (st != SPYRE_STATUS_OK) {
            return st;
        }
    }
    if (w->pt[i] & SPYRE_HOST_PAGE_MASK) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: DMA: page address 0x%" PRIx64
                      " not page aligned\n", w->pt[i]);
        return SPYRE_STATUS_ERR_ALIGN;
    }
    *addr = w->pt[i] + in_page;
    run = SPYRE_HOST_PAGE_SIZE - in_page;
    while (run < max && i + 1 < SPYRE_HOST_PT_ENTRIES &&
           w->pt[i + 1] == w->pt[i] + SPYRE_HOST_PAGE_SIZE) {
        run += SPYRE_HOST_PAGE_SIZE;
        i++;
    }
    *len = MIN(run, max);
    return SPYRE_STATUS_OK;
}

/*
 * One side of a copy: a host page directory (walk), a context's virtual
 * addresses (map) or device memory (neither). Offsets are relative to addr.
 */
typedef struct SpyreDmaSide {
    uint64_t addr;
    SpyreHostWalk *walk;
    const SpyreMmuMap *map;
    uint32_t hint;              /* spyre_mmu_lookup() cache */
} SpyreDmaSide;

/*
 * Resolve byte @off of side d: *host tells host memory (DMA address) from
 * device memory (offset) in *addr; *len (at most @max) bytes are contiguous
 * there.
 */
static uint32_t spyre_dma_resolve(SpyreState *s, SpyreDmaSide *d,
                                  uint64_t off, uint64_t max, bool *host,
                                  uint64_t *addr, uint64_t *len)
{
    const SpyreMmuRun *r;
    uint64_t va;

    if (d->walk) {
        *host = true;
        return spyre_host_resolve(s, d->walk, off, max, addr, len);
    }
    *host = false;
    *addr = d->addr + off;
    *len = max;
    if (!d->map) {
        return SPYRE_STATUS_OK;
    }
    /* Translated: the whole extent was checked before the copy started. */
    va = d->addr + off;
    r = spyre_mmu_lookup(d->map, va, &d->hint);
    if (!r) {
        return SPYRE_STATUS_ERR_MMU_FAULT;
    }
    *host = r->pte & SPYRE_MMU_HOST;
    *addr = r->pa + (va - r->va);
    *len = MIN(max, r->len - (va - r->va));
    return SPYRE_STATUS_OK;
}

/* Physical device-to-device row: memmove semantics, cancellable in chunks. */
static uint32_t spyre_dma_row_d2d(SpyreState *s, uint64_t dst_off,
                                  uint64_t src_off, uint64_t size,
                                  const int32_t *cancel)
{
    uint8_t *dst = s->devmem_ptr + dst_off;
    uint8_t *src = s->devmem_ptr + src_off;
    uint64_t done = 0;

    if (!cancel) {
        memmove(dst, src, size);
    } else if (dst <= src || dst >= src + size) {
        /* Forward order is safe: front to back in chunks. */
        while (done < size) {
            uint64_t chunk = MIN(size - done, SPYRE_D2D_CHUNK);

            if (qatomic_read(cancel)) {
                return SPYRE_STATUS_CANCELLED;
            }
            memmove(dst + done, src + done, chunk);
            done += chunk;
        }
    } else {
        /* Overlap with dst above src: back to front. */
        while (done < size) {
            uint64_t chunk = MIN(size - done, SPYRE_D2D_CHUNK);

            if (qatomic_read(cancel)) {
                return SPYRE_STATUS_CANCELLED;
            }
            done += chunk;
            memmove(dst + size - done, src + size - done, chunk);
        }
    }
    return SPYRE_STATUS_OK;
}

/*
 * Copy row r of x: width bytes from source offset src_offset + r * src_pitch
 * to destination offset dst_offset + r * dst_pitch, piece by piece where
 * both sides are contiguous; bounce is the buffer of host-to-host pieces.
 * @cancel (worker only, else NULL) is polled between pieces of at most a
 * few MiB. Runs on the main loop or, without the BQL, on the DMA worker: it
 * touches only device memory and, through spyre_host_*, guest RAM.
 */
static uint32_t spyre_dma_row(SpyreState *s, const SpyreDmaXfer *x,
                              uint64_t r, SpyreDmaSide *sd, SpyreDmaSide *dd,
                              uint8_t *bounce, const int32_t *cancel,
                              SpyreDmaPeer *pp)
{
    const uint64_t soff = x->src_offset + r * x->src_pitch;
    const uint64_t doff = x->dst_offset + r * x->dst_pitch;
    const uint64_t size = x->width;
    uint64_t done = 0;
    uint32_t st;

    if (!sd->walk && !sd->map && !dd->walk && !dd->map) {
        return spyre_dma_row_d2d(s, x->dst_addr + doff, x->src_addr + soff,
                                 size, cancel);
    }

    while (done < size) {
        uint64_t chunk = size - done, saddr, daddr, len;
        bool shost, dhost;

        if (cancel && qatomic_read(cancel)) {
            return SPYRE_STATUS_CANCELLED;
        }
        st = spyre_dma_resolve(s, sd, soff + done, chunk, &shost, &saddr,
                               &len);
        if (st != SPYRE_STATUS_OK) {
            return st;
        }
        chunk = len;
        st = spyre_dma_resolve(s, dd, doff + done, chunk, &dhost, &daddr,
                               &len);
        if (st != SPYRE_STATUS_OK) {
            return st;
        }
        chunk = len;

        if (shost && dhost) {
            chunk = MIN(chunk, SPYRE_BOUNCE_SIZE);
            if (!spyre_host_rw(s, saddr, bounce, chunk, false, pp) ||
                !spyre_host_rw(s, daddr, bounce, chunk, true, pp)) {
                goto dma_error;
            }
        } else if (shost) {
            if (!spyre_host_rw(s, saddr, s->devmem_ptr + daddr, chunk, false,
                               pp)) {
                goto dma_error;
            }
        } else if (dhost) {
            if (!spyre_host_rw(s, daddr, s->devmem_ptr + saddr, chunk, true,
                               pp)) {
                goto dma_error;
            }
        } else {
            /* Translated device pages (a physical row took the fast path). */
            chunk = MIN(chunk, SPYRE_D2D_CHUNK);
            memmove(s->devmem_ptr + daddr, s->devmem_ptr + saddr, chunk);
        }
        done += chunk;
    }
    return SPYRE_STATUS_OK;

dma_error:
    qemu_log_mask(LOG_GUEST_ERROR,
                  "spyre: DMA: host access failed at byte %" PRIu64
                  " of row %" PRIu64 " (%" PRIu64 " bytes)\n", done, r, size);
    return SPYRE_STATUS_ERR_HOST_DMA;
}

/*
 * Translate the whole extent of the virtual sides of x before any byte
 * moves: rows in order, in each the source (read) before the destination
 * (write). False with the first fault in *f.
 */
static bool spyre_dma_translate(const SpyreDmaXfer *x, bool src_virt,
                                bool dst_virt, const int32_t *cancel,
                                SpyreMmuFault *f, bool *cancelled)
{
    uint32_t sh = 0, dh = 0;
    uint64_t r;

    for (r = 0; r < x->height; r++) {
        if (cancel && !(r & 0xffff) && qatomic_read(cancel)) {
            *cancelled = true;
            return false;
        }
        if (src_virt &&
            !spyre_mmu_check(x->map, x->src_addr + x->src_offset +
                             r * x->src_pitch, x->width,
                             SPYRE_MMU_FAULT_READ, &sh, f)) {
            return false;
        }
        if (dst_virt &&
            !spyre_mmu_check(x->map, x->dst_addr + x->dst_offset +
                             r * x->dst_pitch, x->width,
                             SPYRE_MMU_FAULT_WRITE, &dh, f)) {
            return false;
        }
    }
    return true;
}

/*
 * Read or write len bytes (buf) at byte @off of one side of a copy, as a
 * copy's row would (SEM_SIGNAL, SEM_WAIT): a host page directory at addr
 * (@host), else device address addr translated by @map (NULL: physical,
 * range already checked). Data pages may be peer memory (counted in *pp).
 * Main loop only: nothing to cancel, a few bytes. Returns ERR_MMU_FAULT
 * with *fault filled, ERR_HOST_DMA or ERR_ALIGN as a copy would.
 */
uint32_t spyre_dma_side_rw(SpyreState *s, uint64_t addr, bool host,
                           const SpyreMmuMap *map, uint64_t off, void *buf,
                           uint64_t len, bool is_write, SpyreMmuFault *fault,
                           SpyreDmaPeer *pp)
{
    SpyreHostWalk walk = { .dir = addr };
    SpyreDmaSide d = {
        .addr = addr, .walk = host ? &walk : NULL, .map = host ? NULL : map,
    };
    uint8_t *p = buf;
    uint64_t done = 0;
    uint32_t st;

    if (d.map && !spyre_mmu_check(d.map, addr + off, len,
                                  is_write ? SPYRE_MMU_FAULT_WRITE :
                                             SPYRE_MMU_FAULT_READ,
                                  &d.hint, fault)) {
        return SPYRE_STATUS_ERR_MMU_FAULT;
    }
    while (done < len) {
        uint64_t a, l;
        bool h;

        st = spyre_dma_resolve(s, &d, off + done, len - done, &h, &a, &l);
        if (st != SPYRE_STATUS_OK) {
            return st;
        }
        if (h) {
            if (!spyre_host_rw(s, a, p + done, l, is_write, pp)) {
                qemu_log_mask(LOG_GUEST_ERROR,
                              "spyre: host access of %" PRIu64 " bytes at 0x%"
                              PRIx64 " failed\n", l, a);
                return SPYRE_STATUS_ERR_HOST_DMA;
            }
        } else if (is_write) {
            memcpy(s->devmem_ptr + a, p + done, l);
            memory_region_set_dirty(&s->devmem, a, l);
        } else {
            memcpy(p + done, s->devmem_ptr + a, l);
        }
        done += l;
    }
    return SPYRE_STATUS_OK;
}

static uint32_t spyre_dma_run(SpyreState *s, const SpyreDmaXfer *x,
                              bool src_host, bool dst_host,
                              const int32_t *cancel, SpyreMmuFault *fault,
                              SpyreDmaPeer *pp)
{
    g_autofree SpyreHostWalk *sw = NULL;
    g_autofree SpyreHostWalk *dw = NULL;
    g_autofree uint8_t *bounce = NULL;
    SpyreDmaSide sd = { .addr = x->src_addr };
    SpyreDmaSide dd = { .addr = x->dst_addr };
    bool cancelled = false;
    uint64_t r;
    uint32_t st;

    *pp = (SpyreDmaPeer) { .ddr_mbps = UINT32_MAX };
    if (x->map) {
        if (!spyre_dma_translate(x, !src_host, !dst_host, cancel, fault,
                                 &cancelled)) {
            return cancelled ? SPYRE_STATUS_CANCELLED :
                               SPYRE_STATUS_ERR_MMU_FAULT;
        }
        sd.map = src_host ? NULL : x->map;
        dd.map = dst_host ? NULL : x->map;
    }
    if (src_host) {
        sw = g_new0(SpyreHostWalk, 1);
        sw->dir = x->src_addr;
        sd.walk = sw;
    }
    if (dst_host) {
        dw = g_new0(SpyreHostWalk, 1);
        dw->dir = x->dst_addr;
        dd.walk = dw;
    }
    if (src_host || dst_host || x->map) {
        bounce = g_malloc(SPYRE_BOUNCE_SIZE);
    }
    for (r = 0; r < x->height; r++) {
        if (cancel && qatomic_read(cancel)) {
            return SPYRE_STATUS_CANCELLED;
        }
        st = spyre_dma_row(s, x, r, &sd, &dd, bounce, cancel, pp);
        if (st != SPYRE_STATUS_OK) {
            return st;
        }
    }
    return SPYRE_STATUS_OK;
}

/* Check a device-side range [addr + offset, + size) against limit. */
bool spyre_dev_range_ok(uint64_t limit, uint64_t addr, uint64_t offset,
                               uint64_t size)
{
    uint64_t start;

    if (uadd64_overflow(addr, offset, &start)) {
        return false;
    }
    return start <= limit && size <= limit - start;
}

/* Bytes from the first row's start to the last row's end on one side. */
static uint64_t spyre_dma_extent(const SpyreDmaXfer *x, uint64_t pitch)
{
    return (x->height - 1) * pitch + x->width;
}

/*
 * Account a finished copy (main loop); a cancelled one only marks the
 * device memory it may have written.
 */
static void spyre_dma_account(SpyreState *s, const SpyreDmaXfer *x,
                              bool src_host, bool dst_host, uint32_t st,
                              const SpyreDmaPeer *pp)
{
    const uint64_t bytes = x->width * x->height;

    if (!dst_host && x->map) {
        if (st != SPYRE_STATUS_ERR_MMU_FAULT) {
            spyre_mmu_set_dirty(s, x->map, x->dst_addr + x->dst_offset,
                                spyre_dma_extent(x, x->dst_pitch));
        }
    } else if (!dst_host) {
        /* Keep dirty tracking (e.g. TCG code in BAR2) coherent. */
        memory_region_set_dirty(&s->devmem, x->dst_addr + x->dst_offset,
                                spyre_dma_extent(x, x->dst_pitch));
    }
    if (st != SPYRE_STATUS_OK) {
        return;
    }
    s->tele_p2p_rd += pp->rd;
    s->tele_p2p_wr += pp->wr;
    if (src_host && !dst_host) {
        s->tele_h2d += bytes;
    } else if (!src_host && dst_host) {
        s->tele_d2h += bytes;
    } else if (!src_host && !dst_host) {
        s->tele_d2d += bytes;
    }
}

/* DMA worker thread. */
static bool spyre_dma_job_run(SpyreState *s, SpyreWorker *w, SpyreJob *j)
{
    j->status = spyre_dma_run(s, &j->dma, j->flags & SPYRE_CMD_F_SRC_HOST,
                              j->flags & SPYRE_CMD_F_DST_HOST, &j->cancel,
                              &j->fault, &j->peer);
    return true;
}

/* Main loop. */
static uint32_t spyre_dma_job_complete(SpyreState *s, SpyreJob *j, bool live)
{
    bool src_host = j->flags & SPYRE_CMD_F_SRC_HOST;
    bool dst_host = j->flags & SPYRE_CMD_F_DST_HOST;
    uint32_t detail = 0;

    if (qatomic_read(&j->cancel)) {
        /* Aborted or reset: no completion, no telemetry. */
        j->status = SPYRE_STATUS_CANCELLED;
    }
    spyre_dma_account(s, &j->dma, src_host, dst_host, j->status, &j->peer);
    if (!live) {
        return 0;
    }
    j->cycles = spyre_dma_peer_cycles(s, src_host, dst_host,
                                      j->dma.width * j->dma.height, &j->peer);
    if (j->status == SPYRE_STATUS_ERR_MMU_FAULT) {
        detail = spyre_mmu_report(s, j->ring, &j->fault);
    }
    return spyre_ring_complete(s, j->ring, j->idx, j->seqno, j->flags,
                               j->status, detail, j->cycles, SPYRE_CLK_DMA);
}

void spyre_dma_worker_init(SpyreState *s)
{
    SpyreWorker *w = &s->dma_worker;

    w->run = spyre_dma_job_run;
    w->complete = spyre_dma_job_complete;
    spyre_worker_init(s, w, "spyre-dma");
}

/*
 * Validate transfer x of a DMA command (header already checked), then copy
 * inline or queue it on the DMA worker (SPYRE_STATUS_QUEUED).
 */
static uint32_t spyre_dma_start(SpyreState *s, unsigned n, uint32_t idx,
                                const struct spyre_hw_cmd *c, SpyreDmaXfer *x,
                                uint64_t *cycles, SpyreMmuFault *fault)
{
    uint8_t flags = c->hdr.flags;
    bool src_host = flags & SPYRE_CMD_F_SRC_HOST;
    bool dst_host = flags & SPYRE_CMD_F_DST_HOST;
    /* Device sides are virtual in a context: 2^39 bytes instead of devmem. */
    uint64_t limit = c->hdr.ctx ? SPYRE_MMU_VA_LIMIT : s->devmem_size;
    uint64_t sext, dext, end, bytes;
    SpyreMmuMap *map = NULL;
    SpyreDmaPeer peer;
    uint32_t st;

    trace_spyre_dma(x->src_addr, x->src_offset, x->dst_addr, x->dst_offset,
                    x->width, x->height, flags);

    /* Extents: (height - 1) * pitch + width, overflow-checked. */
    if (x->width == 0 || x->height == 0 ||
        umul64_overflow(x->height - 1, x->src_pitch, &sext) ||
        uadd64_overflow(sext, x->width, &sext) ||
        umul64_overflow(x->height - 1, x->dst_pitch, &dext) ||
        uadd64_overflow(dext, x->width, &dext) ||
        umul64_overflow(x->width, x->height, &bytes) ||
        bytes > s->devmem_size ||
        sext > (src_host ? s->devmem_size : limit) ||
        dext > (dst_host ? s->devmem_size : limit) ||
        uadd64_overflow(x->src_offset, sext, &end) ||
        uadd64_overflow(x->dst_offset, dext, &end)) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: DMA: invalid size: %" PRIu64 " rows of %" PRIu64
                      " bytes (at most device memory size in all), pitches %"
                      PRIu64 "/%" PRIu64 "\n", x->height,
                      x->width, x->src_pitch, x->dst_pitch);
        return SPYRE_STATUS_ERR_SIZE;
    }
    if ((!src_host && !spyre_dev_range_ok(limit, x->src_addr, x->src_offset,
                                          sext)) ||
        (!dst_host && !spyre_dev_range_ok(limit, x->dst_addr, x->dst_offset,
                                          dext))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: DMA: device range outside %s "
                      "(src 0x%" PRIx64 "+0x%" PRIx64 ", dst 0x%" PRIx64
                      "+0x%" PRIx64 ", extents 0x%" PRIx64 "/0x%" PRIx64 ")\n",
                      c->hdr.ctx ? "the context's 2^39 bytes" :
                      "device memory", x->src_addr, x->src_offset,
                      x->dst_addr, x->dst_offset, sext, dext);
        return SPYRE_STATUS_ERR_DEV_RANGE;
    }
    if ((src_host && (x->src_addr & 7)) || (dst_host && (x->dst_addr & 7))) {
        qemu_log_mask(LOG_GUEST_ERROR,
                      "spyre: DMA: host page directory not 8-byte aligned\n");
        return SPYRE_STATUS_ERR_ALIGN;
    }

    if (c->hdr.ctx && !(src_host && dst_host)) {
        map = spyre_mmu_get(s, c->hdr.ctx, &st);
        if (!map) {
            return st;
        }
        if (!src_host ?
            spyre_mmu_fault_first(s, map, x->src_addr + x->src_offset,
                                  SPYRE_MMU_FAULT_READ, fault) :
            spyre_mmu_fault_first(s, map, x->dst_addr + x->dst_offset,
                                  SPYRE_MMU_FAULT_WRITE, fault)) {
            spyre_mmu_unref(map);
            return SPYRE_STATUS_ERR_MMU_FAULT;
        }
        x->map = map;
    }

    /*
     * One descriptor: one set-up, then all its bytes (priced again when it
     * is done, if bytes went to or from a peer).
     */
    *cycles = spyre_dma_cycles(s, src_host, dst_host, bytes);
    if (bytes >= SPYRE_DMA_ASYNC_MIN) {
        SpyreJob *j = spyre_job_new(s, SPYRE_JOB_DMA, n, idx, c);

        j->dma = *x;
        j->map = map;           /* the job owns the reference */
        j->cycles = *cycles;
        trace_spyre_dma_queued(n, idx, bytes);
        s->rings[n].job = j;
        spyre_worker_submit(&s->dma_worker, j);
        return SPYRE_STATUS_QUEUED;
    }
    st = spyre_dma_run(s, x, src_host, dst_host, NULL, fault, &peer);
    spyre_dma_account(s, x, src_host, dst_host, st, &peer);
    *cycles = spyre_dma_peer_cycles(s, src_host, dst_host, bytes, &peer);
    spyre_mmu_unref(map);
    return st;
}

/* DMA_COPY: one row of size bytes. */
uint32_t spyre_dma_copy(SpyreState *s, unsigned n, uint32_t idx,
                        const struct spyre_hw_cmd *c, uint64_t *cycles,
                        SpyreMmuFault *fault)
{
    const struct spyre_hw_cmd_dma *d = &c->dma;
    SpyreDmaXfer x = {
        .src_addr = d->src_addr, .src_offset = d->src_offset,
        .dst_addr = d->dst_addr, .dst_offset = d->dst_offset,
        .width = d->size, .height = 1,
    };

    return spyre_dma_start(s, n, idx, c, &x, cycles, fault);
}

/*
 * DMA_COPY_2D. The 32-bit fields are read from the little-endian 64-bit
 * words they share (the command was converted word by word).
 */
uint32_t spyre_dma_copy_2d(SpyreState *s, unsigned n, uint32_t idx,
                           const struct spyre_hw_cmd *c, uint64_t *cycles,
                           SpyreMmuFault *fault)
{
    SpyreDmaXfer x = {
        .src_addr = c->raw[0], .src_offset = c->raw[1],
        .dst_addr = c->raw[2], .dst_offset = c->raw[3],
        .width = extract64(c->raw[4], 0, 32),
        .height = extract64(c->raw[4], 32, 32),
        .src_pitch = extract64(c->raw[5], 0, 32),
        .dst_pitch = extract64(c->raw[5], 32, 32),
    };

    return spyre_dma_start(s, n, idx, c, &x, cycles, fault);
}

/* Bytes a DMA command moves (for the bottom half's work budget). */
uint64_t spyre_dma_cmd_bytes(const struct spyre_hw_cmd *c)
{
    if (c->hdr.opcode == SPYRE_OP_DMA_COPY_2D) {
        return extract64(c->raw[4], 0, 32) * extract64(c->raw[4], 32, 32);
    }
    return c->hdr.opcode == SPYRE_OP_DMA_COPY ? c->dma.size : 0;
}
