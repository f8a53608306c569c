/*
 * QTest for the Spyre accelerator model (-device spyre): drives the card
 * from the host through BAR0, guest RAM and BAR2, with no guest kernel.
 *
 * Built from QEMU's tests/qtest (tools/setup/qemu-sync.sh copies it there);
 * run with qemu-device/tests/run-qtest.sh.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/host-utils.h"
#include "libqtest.h"
#include "libqos/pci-pc.h"
#include "libqos/malloc-pc.h"
#include "libqos/libqos-malloc.h"
#include "hw/pci/pci_regs.h"
#include "hw/misc/spyre/spyre_hw.h"

#define SLOT            4
#define DEVMEM          (16 * 1024 * 1024)
#define NRINGS          4
#define PAGE            4096

typedef struct Ring {
    uint64_t cmd;
    uint64_t cpl;
    uint32_t size;
    uint32_t tail;
    uint32_t cpl_size;          /* 0: 32-byte entries; else with CPL_TIME */
} Ring;

typedef struct Spyre {
    QTestState *qts;
    QGuestAllocator alloc;
    QPCIBus *bus;
    QPCIDevice *dev;
    QPCIBar bar0;
    QPCIBar bar2;
    Ring ring[NRINGS];
} Spyre;

/* A host buffer described by a two-level host page directory. */
typedef struct HostBuf {
    uint64_t dir;
    size_t npages;
    uint64_t *page;
} HostBuf;

/* Debian keeps the BIOS outside QEMU's build tree. */
static const char *firmware_args(void)
{
    static const char *const dirs[] = {
        "/usr/share/seabios", "/usr/share/qemu",
    };
    static char args[256];
    size_t i;

    if (!args[0]) {
        for (i = 0; i < ARRAY_SIZE(dirs); i++) {
            if (g_file_test(dirs[i], G_FILE_TEST_IS_DIR)) {
                g_strlcat(args, " -L ", sizeof(args));
                g_strlcat(args, dirs[i], sizeof(args));
            }
        }
        g_strlcat(args, " ", sizeof(args));
    }
    return args;
}

static Spyre *spyre_start_on(const char *machine, const char *extra)
{
    Spyre *s = g_new0(Spyre, 1);
    uint64_t size;

    s->qts = qtest_initf("%s -nodefaults -machine %s -m 256M "
                         "-device spyre,id=spyre0,addr=%02x.0,devmem-size=%d%s",
                         firmware_args(), machine, SLOT, DEVMEM,
                         extra ? extra : "");
    pc_alloc_init(&s->alloc, s->qts, ALLOC_NO_FLAGS);
    s->bus = qpci_new_pc(s->qts, &s->alloc);
    s->dev = qpci_device_find(s->bus, QPCI_DEVFN(SLOT, 0));
    g_assert(s->dev);
    qpci_device_enable(s->dev);
    s->bar0 = qpci_iomap(s->dev, SPYRE_BAR_REGS, &size);
    g_assert_cmpuint(size, ==, SPYRE_REGS_SIZE);
    s->bar2 = qpci_iomap(s->dev, SPYRE_BAR_DEVMEM, &size);
    g_assert_cmpuint(size, ==, DEVMEM);
    return s;
}

static Spyre *spyre_start(const char *extra)
{
    return spyre_start_on("q35", extra);
}

static void spyre_stop(Spyre *s)
{
    g_free(s->dev);
    qpci_free_pc(s->bus);
    alloc_destroy(&s->alloc);
    qtest_quit(s->qts);
    g_free(s);
}

static uint32_t rd(Spyre *s, uint64_t off)
{
    return qpci_io_readl(s->dev, s->bar0, off);
}

static void wr(Spyre *s, uint64_t off, uint32_t val)
{
    qpci_io_writel(s->dev, s->bar0, off, val);
}

static uint64_t rd64(Spyre *s, uint64_t lo)
{
    uint64_t v = rd(s, lo);

    return v | (uint64_t)rd(s, lo + 4) << 32;
}

static uint32_t rrd(Spyre *s, int n, unsigned reg)
{
    return rd(s, SPYRE_RING_REG(n, reg));
}

static void rwr(Spyre *s, int n, unsigned reg, uint32_t val)
{
    wr(s, SPYRE_RING_REG(n, reg), val);
}

static uint64_t zalloc(Spyre *s, size_t size)
{
    uint64_t a = guest_alloc(&s->alloc, size);

    qtest_memset(s->qts, a, 0, size);
    return a;
}

static void ring_program(Spyre *s, int n, uint64_t cmd, uint64_t cpl,
                         uint32_t size)
{
    rwr(s, n, SPYRE_RING_CMD_BASE_LO, (uint32_t)cmd);
    rwr(s, n, SPYRE_RING_CMD_BASE_HI, cmd >> 32);
    rwr(s, n, SPYRE_RING_CPL_BASE_LO, (uint32_t)cpl);
    rwr(s, n, SPYRE_RING_CPL_BASE_HI, cpl >> 32);
    rwr(s, n, SPYRE_RING_SIZE, size);
    rwr(s, n, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ENABLE);
}

static void ring_setup(Spyre *s, int n, uint32_t size)
{
    Ring *r = &s->ring[n];

    r->size = size;
    r->cmd = zalloc(s, size * sizeof(struct spyre_hw_cmd));
    r->cpl = zalloc(s, size * sizeof(struct spyre_hw_cpl));
    r->tail = 0;
    r->cpl_size = 0;
    ring_program(s, n, r->cmd, r->cpl, size);
    g_assert_cmphex(rrd(s, n, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED);
}

/* Queue a command without ringing the doorbell; returns its index. */
static uint32_t ring_queue(Spyre *s, int n, const struct spyre_hw_cmd *c)
{
    Ring *r = &s->ring[n];
    uint32_t idx = r->tail;
    uint32_t cs = r->cpl_size ? r->cpl_size : sizeof(struct spyre_hw_cpl);

    qtest_memwrite(s->qts, r->cmd + idx * sizeof(*c), c, sizeof(*c));
    qtest_memset(s->qts, r->cpl + idx * cs, 0xee, cs);
    r->tail = (r->tail + 1) % r->size;
    return idx;
}

static double now_ms(void)
{
    return g_get_monotonic_time() / 1000.0;
}

/*
 * A RESET returns at once; the card is READY when every running command
 * stopped (milliseconds). Returns how long that took.
 */
static double wait_ready(Spyre *s)
{
    double t0 = now_ms();
    uint32_t st;

    while ((st = rd(s, SPYRE_REG_STATUS)) & SPYRE_STATUS_RESETTING) {
        g_assert_cmpfloat(now_ms() - t0, <, 10000);
        g_assert(!(st & SPYRE_STATUS_READY));
        g_usleep(500);
    }
    g_assert(st & SPYRE_STATUS_READY);
    return now_ms() - t0;
}

/* After an ABORT: wait until the ring let go (STATUS.BUSY clear). */
static double wait_not_busy(Spyre *s, int n)
{
    double t0 = now_ms();

    while (rrd(s, n, SPYRE_RING_STATUS) & SPYRE_RING_STATUS_BUSY) {
        g_assert_cmpfloat(now_ms() - t0, <, 10000);
        g_usleep(500);
    }
    return now_ms() - t0;
}

static void ring_kick_wait(Spyre *s, int n)
{
    Ring *r = &s->ring[n];
    int i;

    rwr(s, n, SPYRE_RING_TAIL, r->tail);
    /* LAUNCH completes from the engine thread, in real time: up to 60 s. */
    for (i = 0; i < 10000 + 60000 && rrd(s, n, SPYRE_RING_HEAD) != r->tail;
         i++) {
        qtest_clock_step(s->qts, 1000);
        if (i >= 10000) {
            g_usleep(1000);
        }
    }
    g_assert_cmpuint(rrd(s, n, SPYRE_RING_HEAD), ==, r->tail);
}

static struct spyre_hw_cpl ring_cpl(Spyre *s, int n, uint32_t idx)
{
    struct spyre_hw_cpl c;
    uint32_t cs = s->ring[n].cpl_size ? s->ring[n].cpl_size : sizeof(c);

    qtest_memread(s->qts, s->ring[n].cpl + idx * cs, &c, sizeof(c));
    return c;
}

/* Submit one command on ring n, wait for it, return its completion. */
static struct spyre_hw_cpl submit(Spyre *s, int n, const struct spyre_hw_cmd *c)
{
    uint32_t idx = ring_queue(s, n, c);

    ring_kick_wait(s, n);
    return ring_cpl(s, n, idx);
}

static struct spyre_hw_cmd cmd_nop(uint64_t seqno, uint8_t flags)
{
    struct spyre_hw_cmd c = { 0 };

    c.hdr.opcode = SPYRE_OP_NOP;
    c.hdr.flags = flags;
    c.hdr.seqno = seqno;
    return c;
}

static struct spyre_hw_cmd cmd_fence(uint64_t seqno, uint64_t addr,
                                     uint64_t value)
{
    struct spyre_hw_cmd c = { 0 };

    c.hdr.opcode = SPYRE_OP_FENCE_WRITE;
    c.hdr.seqno = seqno;
    c.fence.addr = addr;
    c.fence.value = value;
    return c;
}

static struct spyre_hw_cmd cmd_dma(uint64_t seqno, uint8_t flags,
                                   uint64_t src, uint64_t src_off,
                                   uint64_t dst, uint64_t dst_off,
                                   uint64_t size)
{
    struct spyre_hw_cmd c = { 0 };

    c.hdr.opcode = SPYRE_OP_DMA_COPY;
    c.hdr.flags = flags;
    c.hdr.seqno = seqno;
    c.dma.src_addr = src;
    c.dma.src_offset = src_off;
    c.dma.dst_addr = dst;
    c.dma.dst_offset = dst_off;
    c.dma.size = size;
    return c;
}

static struct spyre_hw_cmd cmd_dma2d(uint64_t seqno, uint8_t flags,
                                     uint64_t src, uint64_t src_off,
                                     uint64_t dst, uint64_t dst_off,
                                     uint32_t width, uint32_t height,
                                     uint32_t src_pitch, uint32_t dst_pitch)
{
    struct spyre_hw_cmd c = { 0 };

    c.hdr.opcode = SPYRE_OP_DMA_COPY_2D;
    c.hdr.flags = flags;
    c.hdr.seqno = seqno;
    c.dma2d.src_addr = src;
    c.dma2d.src_offset = src_off;
    c.dma2d.dst_addr = dst;
    c.dma2d.dst_offset = dst_off;
    c.dma2d.width = width;
    c.dma2d.height = height;
    c.dma2d.src_pitch = src_pitch;
    c.dma2d.dst_pitch = dst_pitch;
    return c;
}

/*
 * Host buffer of npages pages. With scatter, pages are allocated one by one
 * with a hole between them (and in reverse order), so no two are contiguous.
 */
static HostBuf *hostbuf_new(Spyre *s, size_t npages, bool scatter)
{
    HostBuf *h = g_new0(HostBuf, 1);
    size_t ntables = DIV_ROUND_UP(npages, SPYRE_HOST_PT_ENTRIES);
    uint64_t base = 0;
    size_t i;

    h->npages = npages;
    h->page = g_new0(uint64_t, npages);
    if (!scatter) {
        base = zalloc(s, npages * PAGE);
    }
    for (i = 0; i < npages; i++) {
        if (scatter) {
            h->page[npages - 1 - i] = zalloc(s, PAGE);
            guest_alloc(&s->alloc, PAGE);
        } else {
            h->page[i] = base + i * PAGE;
        }
    }
    h->dir = zalloc(s, ntables * 8);
    for (i = 0; i < ntables; i++) {
        uint64_t pt = zalloc(s, PAGE);
        size_t j;

        qtest_writeq(s->qts, h->dir + i * 8, pt);
        for (j = 0; j < SPYRE_HOST_PT_ENTRIES &&
             i * SPYRE_HOST_PT_ENTRIES + j < npages; j++) {
            qtest_writeq(s->qts, pt + j * 8,
                         h->page[i * SPYRE_HOST_PT_ENTRIES + j]);
        }
    }
    return h;
}

static void hostbuf_free(HostBuf *h)
{
    g_free(h->page);
    g_free(h);
}

static void hostbuf_io(Spyre *s, HostBuf *h, uint64_t off, void *buf,
                       size_t len, bool write)
{
    uint8_t *p = buf;

    while (len) {
        size_t in = off % PAGE;
        size_t n = MIN(len, PAGE - in);
        uint64_t a = h->page[off / PAGE] + in;

        if (write) {
            qtest_memwrite(s->qts, a, p, n);
        } else {
            qtest_memread(s->qts, a, p, n);
        }
        off += n;
        p += n;
        len -= n;
    }
}

static void fill(uint8_t *buf, size_t len, uint32_t seed)
{
    size_t i;

    for (i = 0; i < len; i++) {
        seed = seed * 1103515245 + 12345;
        buf[i] = seed >> 16;
    }
}

static void devmem_read(Spyre *s, uint64_t off, void *buf, size_t len)
{
    qpci_memread(s->dev, s->bar2, off, buf, len);
}

static void devmem_write(Spyre *s, uint64_t off, const void *buf, size_t len)
{
    qpci_memwrite(s->dev, s->bar2, off, buf, len);
}

/* ---- Tests ---- */

static void test_identity(void)
{
    Spyre *s = spyre_start(NULL);

    g_assert_cmphex(qpci_config_readw(s->dev, PCI_VENDOR_ID), ==,
                    SPYRE_PCI_VENDOR_ID);
    g_assert_cmphex(qpci_config_readw(s->dev, PCI_DEVICE_ID), ==,
                    SPYRE_PCI_DEVICE_ID);
    g_assert_cmphex(qpci_config_readb(s->dev, PCI_REVISION_ID), ==,
                    SPYRE_PCI_REVISION);
    g_assert_cmphex(qpci_config_readw(s->dev, PCI_CLASS_DEVICE), ==,
                    SPYRE_PCI_CLASS);
    g_assert_cmphex(qpci_config_readl(s->dev, PCI_BASE_ADDRESS_2) &
                    (PCI_BASE_ADDRESS_MEM_TYPE_64 |
                     PCI_BASE_ADDRESS_MEM_PREFETCH), ==,
                    PCI_BASE_ADDRESS_MEM_TYPE_64 |
                    PCI_BASE_ADDRESS_MEM_PREFETCH);
    g_assert_cmpuint(qpci_find_capability(s->dev, PCI_CAP_ID_EXP, 0), !=, 0);

    g_assert_cmphex(rd(s, SPYRE_REG_ID), ==, SPYRE_ID_MAGIC);
    g_assert_cmphex(rd(s, SPYRE_REG_VERSION), ==,
                    SPYRE_HW_VERSION(SPYRE_HW_VERSION_MAJOR,
                                     SPYRE_HW_VERSION_MINOR));
    g_assert_cmphex(rd(s, SPYRE_REG_CAPS), ==,
                    SPYRE_CAP_DMA | SPYRE_CAP_FENCE | SPYRE_CAP_MSIX |
                    SPYRE_CAP_TELEMETRY | SPYRE_CAP_LAUNCH |
                    SPYRE_CAP_RING_ABORT | SPYRE_CAP_DMA_2D | SPYRE_CAP_MMU |
                    SPYRE_CAP_EXEC_TIME | SPYRE_CAP_TIMESLICE |
                    SPYRE_CAP_P2P | SPYRE_CAP_CPL_TIME | SPYRE_CAP_SEM);
    g_assert_cmpuint(rd(s, SPYRE_REG_NUM_CORES), ==, 32);
    g_assert_cmpuint(rd64(s, SPYRE_REG_DEVMEM_SIZE_LO), ==, DEVMEM);
    g_assert_cmpuint(rd(s, SPYRE_REG_NUM_RINGS), ==, NRINGS);
    g_assert_cmpuint(rd(s, SPYRE_REG_LX_SIZE), ==, 2 * 1024 * 1024);
    g_assert_cmpuint(rd(s, SPYRE_REG_CLOCK_MHZ), ==, 1500);
    g_assert_cmpuint(rd(s, SPYRE_REG_STICK_BYTES), ==, 128);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_MASK), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_ERROR_CODE), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_INJECT), ==, 0);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_POWER_CAP_MW), ==, 75000);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_TEMP_MC), ==, 35000);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_POWER_MW), ==, 20000);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_CMDS_LO), ==, 0);
    /* 64-bit access is split into LO then HI. */
    g_assert_cmphex(qpci_io_readq(s->dev, s->bar0, SPYRE_REG_DEVMEM_SIZE_LO),
                    ==, DEVMEM);

    wr(s, SPYRE_REG_SCRATCH, 0xdeadbeef);
    g_assert_cmphex(rd(s, SPYRE_REG_SCRATCH), ==, 0xdeadbeef);
    /* Read-only registers ignore writes. */
    wr(s, SPYRE_REG_ID, 0);
    wr(s, SPYRE_REG_NUM_CORES, 7);
    g_assert_cmphex(rd(s, SPYRE_REG_ID), ==, SPYRE_ID_MAGIC);
    g_assert_cmpuint(rd(s, SPYRE_REG_NUM_CORES), ==, 32);
    /* Rings beyond num-rings are absent. */
    rwr(s, NRINGS, SPYRE_RING_SIZE, 8);
    g_assert_cmpuint(rrd(s, NRINGS, SPYRE_RING_SIZE), ==, 0);

    qpci_msix_enable(s->dev);
    g_assert_cmpuint(qpci_msix_table_size(s->dev), ==, NRINGS + 1);
    spyre_stop(s);
}

static void test_properties(void)
{
    Spyre *s = spyre_start(",num-rings=16,num-cores=8,lx-size=1M,"
                           "clock-mhz=1000,power-cap-mw=30000,"
                           "x-vendor-id=0x1b36,x-device-id=0x0042");

    g_assert_cmphex(qpci_config_readw(s->dev, PCI_VENDOR_ID), ==, 0x1b36);
    g_assert_cmphex(qpci_config_readw(s->dev, PCI_DEVICE_ID), ==, 0x0042);
    g_assert_cmpuint(rd(s, SPYRE_REG_NUM_RINGS), ==, 16);
    g_assert_cmpuint(rd(s, SPYRE_REG_NUM_CORES), ==, 8);
    g_assert_cmpuint(rd(s, SPYRE_REG_LX_SIZE), ==, 1024 * 1024);
    g_assert_cmpuint(rd(s, SPYRE_REG_CLOCK_MHZ), ==, 1000);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_POWER_CAP_MW), ==, 30000);
    qpci_msix_enable(s->dev);
    g_assert_cmpuint(qpci_msix_table_size(s->dev), ==, 17);
    spyre_stop(s);
}

/* Invalid properties make realize fail with a clear message. */
static void test_bad_properties(void)
{
    static const char *const bad[] = {
        "devmem-size=3M", "devmem-size=0", "num-rings=0", "num-rings=17",
        "clock-mhz=0", "num-cores=0", "num-cores=65", "lx-size=100",
        "lx-size=2G", "x-engine-threads=5000", "ddr-mbps=0",
        "ring-bytes-per-cycle=0", "x-mmu-cache-runs=15",
        "x-mmu-cache-runs=67108865", "timeslice-ms=0", "timeslice-ms=10001",
        "p2p-mbps=0", "pcie-mbps=0",
    };
    const char *qemu = g_getenv("QTEST_QEMU_BINARY");
    size_t i;

    for (i = 0; i < ARRAY_SIZE(bad); i++) {
        g_autofree char *cmd = g_strdup_printf(
            "%s %s -machine q35 -accel qtest -nodefaults -display none "
            "-device spyre,%s", qemu, firmware_args(), bad[i]);
        g_autofree char *out = NULL;
        g_autofree char *err = NULL;
        int status;

        g_assert(g_spawn_command_line_sync(cmd, &out, &err, &status, NULL));
        g_assert(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
        g_assert(strstr(err, "spyre:"));
    }
}

static void test_ring_config(void)
{
    Spyre *s = spyre_start(NULL);
    uint64_t cmd = zalloc(s, 64 * 64);
    uint64_t cpl = zalloc(s, 64 * 32);
    static const uint32_t bad_sizes[] = { 0, 1, 3, 12, 131072 };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(bad_sizes); i++) {
        ring_program(s, 0, cmd, cpl, bad_sizes[i]);
        g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                        SPYRE_RING_STATUS_BAD_CONFIG);
        g_assert_cmphex(rrd(s, 0, SPYRE_RING_CTRL), ==, 0);
    }
    ring_program(s, 0, cmd + 32, cpl, 8);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_BAD_CONFIG);
    ring_program(s, 0, cmd, cpl + 8, 8);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_BAD_CONFIG);
    ring_program(s, 0, 0, cpl, 8);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_BAD_CONFIG);
    /* A doorbell on a refused ring does nothing. */
    rwr(s, 0, SPYRE_RING_TAIL, 1);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_TAIL), ==, 0);

    ring_program(s, 0, cmd, cpl, 64);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_CTRL), ==, SPYRE_RING_CTRL_ENABLE);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, 0);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_TAIL), ==, 0);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_SIZE), ==, 64);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_CMD_BASE_LO), ==, (uint32_t)cmd);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_CPL_BASE_LO), ==, (uint32_t)cpl);

    /* Tail >= size is refused and flagged. */
    rwr(s, 0, SPYRE_RING_TAIL, 64);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_TAIL), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED | SPYRE_RING_STATUS_BAD_TAIL);

    /* Disable, then enable again: clears the flags, head and tail. */
    rwr(s, 0, SPYRE_RING_CTRL, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS) &
                    SPYRE_RING_STATUS_ENABLED, ==, 0);
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ENABLE);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED);
    spyre_stop(s);
}

static void test_nop_fence(void)
{
    Spyre *s = spyre_start(NULL);
    uint64_t fence = zalloc(s, 64);
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    uint32_t idx[6];
    int i, round;

    ring_setup(s, 0, 4);

    c = cmd_nop(0x1111, 0);
    p = submit(s, 0, &c);
    g_assert_cmphex(p.seqno, ==, 0x1111);
    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(p.detail, ==, 0);
    g_assert_cmpuint(p.cycles, >, 0);
    g_assert_cmpuint(p.done_count, ==, 1);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_COMPLETED), ==, 1);

    c = cmd_fence(0x2222, fence + 8, 0x0123456789abcdefULL);
    p = submit(s, 0, &c);
    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_OK);
    g_assert_cmphex(p.seqno, ==, 0x2222);
    g_assert_cmpuint(p.done_count, ==, 2);
    g_assert_cmphex(qtest_readq(s->qts, fence + 8), ==, 0x0123456789abcdefULL);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0);

    /* Several commands per doorbell, wrapping around the 4-entry ring. */
    for (round = 0; round < 3; round++) {
        for (i = 0; i < 3; i++) {
            uint64_t seq = 100 + round * 10 + i;

            c = i == 2 ? cmd_fence(seq, fence, seq) : cmd_nop(seq, 0);
            idx[i] = ring_queue(s, 0, &c);
        }
        ring_kick_wait(s, 0);
        for (i = 0; i < 3; i++) {
            p = ring_cpl(s, 0, idx[i]);
            g_assert_cmpuint(p.seqno, ==, 100 + round * 10 + i);
            g_assert_cmpuint(p.status, ==, SPYRE_STATUS_OK);
            g_assert_cmpuint(p.done_count, ==, 3 + round * 3 + i);
        }
        g_assert_cmpuint(qtest_readq(s->qts, fence), ==, 100 + round * 10 + 2);
    }
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_COMPLETED), ==, 11);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, 11 % 4);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_CMDS_LO), ==, 11);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);

    /* A second ring works independently. */
    ring_setup(s, 2, 2);
    c = cmd_nop(77, 0);
    p = submit(s, 2, &c);
    g_assert_cmpuint(p.seqno, ==, 77);
    g_assert_cmpuint(p.done_count, ==, 1);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_COMPLETED), ==, 11);
    spyre_stop(s);
}

/* Many commands in one doorbell exceed one BH batch: all still complete. */
static void test_batch(void)
{
    Spyre *s = spyre_start(NULL);
    uint64_t fence = zalloc(s, 8);
    struct spyre_hw_cmd c;
    int i;

    ring_setup(s, 1, 256);
    for (i = 0; i < 200; i++) {
        c = i == 199 ? cmd_fence(i, fence, 0xf00d) : cmd_nop(i, 0);
        ring_queue(s, 1, &c);
    }
    ring_kick_wait(s, 1);
    g_assert_cmpuint(ring_cpl(s, 1, 150).seqno, ==, 150);
    g_assert_cmpuint(ring_cpl(s, 1, 199).done_count, ==, 200);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0xf00d);
    spyre_stop(s);
}

static void check_dma_ok(struct spyre_hw_cpl p, uint64_t seq)
{
    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(p.seqno, ==, seq);
}

static void test_dma(void)
{
    Spyre *s = spyre_start(NULL);
    const size_t len = 3 * PAGE + 77;
    const uint64_t src_off = 123, dev_off = 0x10001, dst_off = 4001;
    HostBuf *src = hostbuf_new(s, 5, true);
    HostBuf *dst = hostbuf_new(s, 6, true);
    g_autofree uint8_t *want = g_malloc(len);
    g_autofree uint8_t *got = g_malloc0(len);
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    uint8_t edge[2];
    uint64_t t0, t1;

    ring_setup(s, 0, 16);
    fill(want, len, 1);
    hostbuf_io(s, src, src_off, want, len, true);

    /* H2D: scattered host pages, unaligned offsets and size. */
    c = cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, src_off, 0x100000,
                dev_off, len);
    p = submit(s, 0, &c);
    check_dma_ok(p, 1);
    /* PCIe (60 GB/s) is slower than LPDDR5 (204.8 GB/s): it sets the time */
    g_assert_cmpuint(p.cycles, ==, 256 + DIV_ROUND_UP(len * 1500, 60000));
    devmem_read(s, 0x100000 + dev_off, got, len);
    g_assert(memcmp(got, want, len) == 0);
    devmem_read(s, 0x100000 + dev_off - 1, edge, 1);
    devmem_read(s, 0x100000 + dev_off + len, edge + 1, 1);
    g_assert_cmpuint(edge[0], ==, 0);
    g_assert_cmpuint(edge[1], ==, 0);

    /* D2H into another scattered buffer at another offset. */
    c = cmd_dma(2, SPYRE_CMD_F_DST_HOST, 0x100000, dev_off, dst->dir, dst_off,
                len);
    p = submit(s, 0, &c);
    check_dma_ok(p, 2);
    memset(got, 0, len);
    hostbuf_io(s, dst, dst_off, got, len, false);
    g_assert(memcmp(got, want, len) == 0);
    hostbuf_io(s, dst, dst_off - 1, edge, 1, false);
    hostbuf_io(s, dst, dst_off + len, edge + 1, 1, false);
    g_assert_cmpuint(edge[0], ==, 0);
    g_assert_cmpuint(edge[1], ==, 0);

    /* 1-byte copies. */
    c = cmd_dma(3, SPYRE_CMD_F_SRC_HOST, src->dir, src_off + 5, 0, 7, 1);
    check_dma_ok(submit(s, 0, &c), 3);
    devmem_read(s, 7, edge, 1);
    g_assert_cmpuint(edge[0], ==, want[5]);

    /* D2D, disjoint and overlapping in both directions (memmove). */
    c = cmd_dma(4, 0, 0x100000, dev_off, 0x200000, 0, len);
    check_dma_ok(submit(s, 0, &c), 4);
    devmem_read(s, 0x200000, got, len);
    g_assert(memcmp(got, want, len) == 0);
    c = cmd_dma(5, 0, 0x200000, 0, 0x200000, 1000, len);
    check_dma_ok(submit(s, 0, &c), 5);
    devmem_read(s, 0x200000 + 1000, got, len);
    g_assert(memcmp(got, want, len) == 0);
    c = cmd_dma(6, 0, 0x200000, 1000, 0x200000, 3, len);
    check_dma_ok(submit(s, 0, &c), 6);
    devmem_read(s, 0x200000 + 3, got, len);
    g_assert(memcmp(got, want, len) == 0);

    /* Host to host through the engine. */
    c = cmd_dma(7, SPYRE_CMD_F_SRC_HOST | SPYRE_CMD_F_DST_HOST, src->dir,
                src_off, dst->dir, 1, len);
    check_dma_ok(submit(s, 0, &c), 7);
    hostbuf_io(s, dst, 1, got, len, false);
    g_assert(memcmp(got, want, len) == 0);

    /* Last bytes of device memory are reachable, one more is not. */
    c = cmd_dma(8, 0, 0, 0, DEVMEM - PAGE, 0, PAGE);
    check_dma_ok(submit(s, 0, &c), 8);

    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_H2D_BYTES_LO), ==, len + 1);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_D2H_BYTES_LO), ==, len);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_D2D_BYTES_LO), ==,
                     3 * len + PAGE);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, 0);

    /* Work heats the board a little; it cools down when idle. */
    t0 = rd(s, SPYRE_REG_TELE_TEMP_MC);
    g_assert_cmpuint(t0, >=, 35000);
    qtest_clock_step(s->qts, 10000000000LL);
    t1 = rd(s, SPYRE_REG_TELE_TEMP_MC);
    g_assert_cmpuint(t1, ==, 35000);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_POWER_MW), ==, 20000);

    hostbuf_free(src);
    hostbuf_free(dst);
    spyre_stop(s);
}

/* Large copies over contiguous pages and more than one page table. */
/* The ddr-mbps property drives the DMA cycle model (DDR slower than PCIe). */
/*
 * Bus mastering off (what the driver does to a card it cannot confirm idle): the card
 * reaches no host memory. Commands on the ring are not even read, nothing is written (no
 * fence, no copy to host memory, no completion entry); each such command fails with
 * ERR_HOST_DMA in ERROR_CODE and TELE_ERRORS, and HEAD moves on. With bus mastering back
 * the ring works again.
 */
static void test_bus_master_off(void)
{
    Spyre *s = spyre_start(NULL);
    uint64_t fence = zalloc(s, 8);
    HostBuf *dst = hostbuf_new(s, 1, false);
    uint8_t want[64], got[64], zero[64] = { 0 };
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    uint32_t idx[2], errors;
    uint64_t d2h, cmds;
    uint16_t cmd;
    int i;

    ring_setup(s, 0, 4);
    c = cmd_fence(1, fence, 0x1111);
    check_dma_ok(submit(s, 0, &c), 1);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0x1111);
    fill(want, sizeof(want), 7);
    devmem_write(s, 0, want, sizeof(want));
    errors = rd(s, SPYRE_REG_TELE_ERRORS);
    d2h = rd64(s, SPYRE_REG_TELE_D2H_BYTES_LO);
    cmds = rd64(s, SPYRE_REG_TELE_CMDS_LO);

    cmd = qpci_config_readw(s->dev, PCI_COMMAND);
    g_assert(cmd & PCI_COMMAND_MASTER);
    qpci_config_writew(s->dev, PCI_COMMAND, cmd & ~PCI_COMMAND_MASTER);
    c = cmd_fence(2, fence, 0x2222);
    idx[0] = ring_queue(s, 0, &c);
    c = cmd_dma(3, SPYRE_CMD_F_DST_HOST, 0, 0, dst->dir, 0, sizeof(want));
    idx[1] = ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0x1111);
    hostbuf_io(s, dst, 0, got, sizeof(got), false);
    g_assert_cmpmem(got, sizeof(got), zero, sizeof(zero));
    for (i = 0; i < 2; i++) {
        p = ring_cpl(s, 0, idx[i]);
        g_assert_cmphex(p.seqno, ==, 0xeeeeeeeeeeeeeeeeULL);
    }
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_CMDS_LO), ==, cmds + 2);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, errors + 2);
    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==, SPYRE_STATUS_ERR_HOST_DMA);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_D2H_BYTES_LO), ==, d2h);

    qpci_config_writew(s->dev, PCI_COMMAND, cmd);
    c = cmd_dma(4, SPYRE_CMD_F_DST_HOST, 0, 0, dst->dir, 0, sizeof(want));
    check_dma_ok(submit(s, 0, &c), 4);
    hostbuf_io(s, dst, 0, got, sizeof(got), false);
    g_assert_cmpmem(got, sizeof(got), want, sizeof(want));
    hostbuf_free(dst);
    spyre_stop(s);
}

static void test_dma_bandwidth(void)
{
    Spyre *s = spyre_start(",ddr-mbps=51200,clock-mhz=1000");
    const size_t len = 2 * PAGE + 5;
    HostBuf *src = hostbuf_new(s, 3, true);
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;

    ring_setup(s, 0, 4);
    c = cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0x100000, 0, len);
    p = submit(s, 0, &c);
    check_dma_ok(p, 1);
    g_assert_cmpuint(p.cycles, ==, 256 + DIV_ROUND_UP(len * 1000, 51200));
    hostbuf_free(src);
    spyre_stop(s);
}

static void test_dma_large(void)
{
    Spyre *s = spyre_start(NULL);
    const size_t len = 3 * 1024 * 1024 + 999;
    const size_t npages = DIV_ROUND_UP(len + 100, PAGE);
    HostBuf *src = hostbuf_new(s, npages, false);
    HostBuf *dst = hostbuf_new(s, npages, false);
    g_autofree uint8_t *want = g_malloc(len);
    g_autofree uint8_t *got = g_malloc0(len);
    struct spyre_hw_cmd c;

    ring_setup(s, 0, 8);
    fill(want, len, 7);
    qtest_bufwrite(s->qts, src->page[0] + 100, want, len);
    c = cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, 100, 0x400000, 0, len);
    check_dma_ok(submit(s, 0, &c), 1);
    devmem_read(s, 0x400000 + len - 64, got, 64);
    g_assert(memcmp(got, want + len - 64, 64) == 0);
    c = cmd_dma(2, SPYRE_CMD_F_DST_HOST, 0x400000, 0, dst->dir, 50, len);
    check_dma_ok(submit(s, 0, &c), 2);
    qtest_bufread(s->qts, dst->page[0] + 50, got, len);
    g_assert(memcmp(got, want, len) == 0);
    /* Recent work shows in the temperature. */
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_TEMP_MC), >, 35000);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_POWER_MW), >, 20000);
    hostbuf_free(src);
    hostbuf_free(dst);
    spyre_stop(s);
}

/*
 * Copies of 1 MiB and more run on the DMA worker: in order on their ring,
 * overlapping device copies in both directions, errors found by the worker.
 */
static void test_dma_async(void)
{
    Spyre *s = spyre_start(NULL);
    const size_t len = 2 * 1024 * 1024 + 4096;
    const size_t npages = DIV_ROUND_UP(len, PAGE);
    HostBuf *src = hostbuf_new(s, npages, false);
    g_autofree uint8_t *want = g_malloc(len);
    g_autofree uint8_t *got = g_malloc0(len);
    uint64_t fence = zalloc(s, 8);
    const uint64_t base = 0x200000, shift = 0x1040;
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    uint32_t i0, i1;
    uint64_t pt, h2d;

    ring_setup(s, 0, 8);
    fill(want, len, 11);
    qtest_bufwrite(s->qts, src->page[0], want, len);

    /* A large copy, then a fence: the fence completes after the copy. */
    c = cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, 0, base, 0, len);
    i0 = ring_queue(s, 0, &c);
    c = cmd_fence(2, fence, 7);
    i1 = ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    p = ring_cpl(s, 0, i0);
    check_dma_ok(p, 1);
    g_assert_cmpuint(p.done_count, ==, 1);
    g_assert_cmpuint(p.cycles, >, len / 256);
    g_assert_cmpuint(ring_cpl(s, 0, i1).done_count, ==, 2);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 7);
    h2d = rd64(s, SPYRE_REG_TELE_H2D_BYTES_LO);
    g_assert_cmpuint(h2d, ==, len);
    devmem_read(s, base + len - 4096, got, 4096);
    g_assert(memcmp(got, want + len - 4096, 4096) == 0);

    /* Overlapping device copy upwards (back to front) ... */
    c = cmd_dma(3, 0, base, 0, base + shift, 0, len);
    check_dma_ok(submit(s, 0, &c), 3);
    devmem_read(s, base + shift, got, 4096);
    g_assert(memcmp(got, want, 4096) == 0);
    devmem_read(s, base + shift + len - 4096, got, 4096);
    g_assert(memcmp(got, want + len - 4096, 4096) == 0);
    /* ... and back down (front to back). */
    c = cmd_dma(4, 0, base + shift, 0, base, 0, len);
    check_dma_ok(submit(s, 0, &c), 4);
    devmem_read(s, base, got, len);
    g_assert(memcmp(got, want, len) == 0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_D2D_BYTES_LO), ==, 2 * len);

    /* A bad page in the middle: the worker reports it, the ring goes on. */
    pt = qtest_readq(s->qts, src->dir);
    qtest_writeq(s->qts, pt + 300 * 8, src->page[300] + 8);
    c = cmd_dma(5, SPYRE_CMD_F_SRC_HOST, src->dir, 0, base, 0, len);
    p = submit(s, 0, &c);
    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_ERR_ALIGN);
    g_assert_cmpuint(p.seqno, ==, 5);
    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==, SPYRE_STATUS_ERR_ALIGN);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_H2D_BYTES_LO), ==, h2d);
    c = cmd_nop(6, 0);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);

    /* Reset with large copies queued: none completes afterwards. */
    qtest_writeq(s->qts, pt + 300 * 8, src->page[300]);
    c = cmd_dma(7, 0, base, 0, base + shift, 0, len);
    ring_queue(s, 0, &c);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, 0);
    wait_ready(s);
    ring_setup(s, 0, 8);
    c = cmd_dma(8, SPYRE_CMD_F_SRC_HOST, src->dir, 0, base, 0, len);
    check_dma_ok(submit(s, 0, &c), 8);
    devmem_read(s, base, got, len);
    g_assert(memcmp(got, want, len) == 0);
    hostbuf_free(src);
    spyre_stop(s);
}

static void expect_error(Spyre *s, const struct spyre_hw_cmd *c, uint32_t st,
                         uint32_t *nerr)
{
    struct spyre_hw_cpl p;
    struct spyre_hw_cmd nop = cmd_nop(0xabc, 0);

    wr(s, SPYRE_REG_INTR_STATUS, ~0u);
    p = submit(s, 0, c);
    g_assert_cmpuint(p.status, ==, st);
    g_assert_cmphex(p.seqno, ==, c->hdr.seqno);
    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==, st);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==,
                    SPYRE_STATUS_READY | SPYRE_STATUS_ERROR);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, SPYRE_INTR_ERROR);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, ++*nerr);
    /* The ring keeps going after a failed command. */
    p = submit(s, 0, &nop);
    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_OK);
    g_assert_cmphex(p.seqno, ==, 0xabc);
}

/*
 * DMA_COPY_2D: rows with a pitch on each side, device to device (gaps of
 * the destination untouched), host to device and back through scattered
 * host pages, a source pitch of 0 (one row broadcast), a copy large enough
 * for the DMA worker, one set-up in the cycle count, and malformed extents.
 */
static void test_dma_2d(void)
{
    Spyre *s = spyre_start(NULL);
    enum { W = 300, H = 7, SP = 512, DP = 384 };
    const uint64_t src = 0x100000 + 3, dst = 0x200000 + 5;
    HostBuf *h = hostbuf_new(s, 4, true);
    g_autofree uint8_t *img = g_malloc(SP * H);
    g_autofree uint8_t *got = g_malloc(DP * H);
    g_autofree uint8_t *back = g_malloc(W * H);
    g_autofree uint8_t *big = NULL;
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    uint32_t nerr = 0;
    int r;

    ring_setup(s, 0, 16);
    fill(img, SP * H, 3);
    devmem_write(s, src, img, SP * H);
    memset(got, 0xcc, DP * H);
    devmem_write(s, dst, got, DP * H);

    c = cmd_dma2d(1, 0, 0, src, 0, dst, W, H, SP, DP);
    check_dma_ok(submit(s, 0, &c), 1);
    devmem_read(s, dst, got, DP * H);
    for (r = 0; r < H; r++) {
        g_assert(memcmp(got + r * DP, img + r * SP, W) == 0);
        g_assert_cmpuint(got[r * DP + W], ==, 0xcc);  /* the gap */
    }

    /* Device to host, packed rows into scattered pages, and back. */
    c = cmd_dma2d(2, SPYRE_CMD_F_DST_HOST, 0, src, h->dir, 4000, W, H, SP, W);
    p = submit(s, 0, &c);
    check_dma_ok(p, 2);
    g_assert_cmpuint(p.cycles, ==, 256 + DIV_ROUND_UP(W * H * 1500, 60000));
    hostbuf_io(s, h, 4000, back, W * H, false);
    for (r = 0; r < H; r++) {
        g_assert(memcmp(back + r * W, img + r * SP, W) == 0);
    }
    c = cmd_dma2d(3, SPYRE_CMD_F_SRC_HOST, h->dir, 4000, 0, 0x300000, W, H, W,
                  1000);
    check_dma_ok(submit(s, 0, &c), 3);
    for (r = 0; r < H; r++) {
        devmem_read(s, 0x300000 + r * 1000, got, W);
        g_assert(memcmp(got, img + r * SP, W) == 0);
    }

    /* Source pitch 0: every row a copy of the first. */
    c = cmd_dma2d(4, 0, 0, src, 0, 0x380000, W, H, 0, W);
    check_dma_ok(submit(s, 0, &c), 4);
    for (r = 0; r < H; r++) {
        devmem_read(s, 0x380000 + r * W, got, W);
        g_assert(memcmp(got, img, W) == 0);
    }

    /* 2 MiB in 1024 rows: the DMA worker's path. */
    big = g_malloc(2048 * 1024);
    fill(big, 2048 * 1024, 9);
    devmem_write(s, 0x400000, big, 2048 * 1024);
    c = cmd_dma2d(5, 0, 0, 0x400000, 0, 0x800000, 2000, 1024, 2048, 2000);
    check_dma_ok(submit(s, 0, &c), 5);
    for (r = 0; r < 1024; r += 341) {
        devmem_read(s, 0x800000 + r * 2000, got, 300);
        g_assert(memcmp(got, big + r * 2048, 300) == 0);
    }

    /* Malformed: empty, overflowing or outside device memory. */
    c = cmd_dma2d(6, 0, 0, src, 0, dst, 0, H, SP, DP);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);
    c = cmd_dma2d(7, 0, 0, src, 0, dst, W, 0, SP, DP);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);
    c = cmd_dma2d(8, 0, 0, src, 0, dst, W, UINT32_MAX, SP, UINT32_MAX);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);
    c = cmd_dma2d(9, 0, 0, src, 0, UINT64_MAX - 100, W, H, SP, DP);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);
    c = cmd_dma2d(10, 0, 0, src, 0, DEVMEM - DP * (H - 1), W, H, SP, DP);
    expect_error(s, &c, SPYRE_STATUS_ERR_DEV_RANGE, &nerr);
    c = cmd_dma2d(11, SPYRE_CMD_F_SRC_HOST, h->dir + 4, 0, 0, dst, W, H, SP,
                  DP);
    expect_error(s, &c, SPYRE_STATUS_ERR_ALIGN, &nerr);
    /* Pitches of 0: tiny extents, but more bytes than device memory holds. */
    c = cmd_dma2d(12, 0, 0, src, 0, dst, 4096, DEVMEM / 4096 + 1, 0, 0);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);
    c = cmd_dma2d(13, SPYRE_CMD_F_DST_HOST, 0, src, h->dir, 0, W, UINT32_MAX,
                  0, 0);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);

    hostbuf_free(h);
    spyre_stop(s);
}

static void test_errors(void)
{
    Spyre *s = spyre_start(",x-fault-inject=on");
    HostBuf *h = hostbuf_new(s, 2, true);
    uint64_t fence = zalloc(s, 64);
    const uint64_t nowhere = 1ULL << 45;
    uint64_t bad_pt = zalloc(s, 8);
    uint64_t unaligned_pt = zalloc(s, 8);
    struct spyre_hw_cmd c;
    uint32_t nerr = 0;

    ring_setup(s, 0, 8);
    qtest_writeq(s->qts, bad_pt, nowhere);
    qtest_writeq(s->qts, unaligned_pt, h->page[0] + 8);

    c = cmd_nop(1, 0);
    c.hdr.opcode = 0x7f;
    expect_error(s, &c, SPYRE_STATUS_ERR_OPCODE, &nerr);

    c = cmd_nop(2, 0x80);
    expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
    c = cmd_nop(3, 0);
    c.hdr.ctx = 256;      /* context ids end at 255 */
    expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
    c = cmd_nop(4, 0);
    c.hdr.reserved1 = 1;
    expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
    c = cmd_nop(5, 0);
    c.raw[3] = 1;
    expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
    c = cmd_nop(6, SPYRE_CMD_F_SRC_HOST);
    expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
    c = cmd_dma(7, 0, 0, 0, PAGE, 0, 16);
    c.dma.reserved = 1;
    expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
    c = cmd_fence(8, fence, 1);
    c.fence.reserved[2] = 1;
    expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
    c = cmd_fence(9, fence, 1);
    c.hdr.flags = SPYRE_CMD_F_DST_HOST;
    expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);

    /* Sizes. */
    c = cmd_dma(10, 0, 0, 0, PAGE, 0, 0);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);
    c = cmd_dma(11, 0, 0, UINT64_MAX - 4, PAGE, 0, 16);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);
    c = cmd_dma(12, 0, 0, 0, 0, 0, DEVMEM + 1ULL);
    expect_error(s, &c, SPYRE_STATUS_ERR_SIZE, &nerr);

    /* Device ranges. */
    c = cmd_dma(13, 0, DEVMEM - 8, 0, 0, 0, 16);
    expect_error(s, &c, SPYRE_STATUS_ERR_DEV_RANGE, &nerr);
    c = cmd_dma(14, 0, 0, 0, DEVMEM - 8, 4, 8);
    expect_error(s, &c, SPYRE_STATUS_ERR_DEV_RANGE, &nerr);
    c = cmd_dma(15, 0, UINT64_MAX - 2, 16, 0, 0, 8);
    expect_error(s, &c, SPYRE_STATUS_ERR_DEV_RANGE, &nerr);
    c = cmd_dma(16, SPYRE_CMD_F_SRC_HOST, h->dir, 0, DEVMEM, 0, 1);
    expect_error(s, &c, SPYRE_STATUS_ERR_DEV_RANGE, &nerr);

    /* Host DMA failures: directory, page table, data page, fence. */
    c = cmd_dma(17, SPYRE_CMD_F_SRC_HOST, nowhere, 0, 0, 0, 64);
    expect_error(s, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    c = cmd_dma(18, SPYRE_CMD_F_SRC_HOST, bad_pt, 0, 0, 0, 64);
    expect_error(s, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    qtest_writeq(s->qts, qtest_readq(s->qts, h->dir) + 2 * 8, nowhere);
    c = cmd_dma(19, SPYRE_CMD_F_DST_HOST, 0, 0, h->dir, 0, 3 * PAGE);
    expect_error(s, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    c = cmd_fence(20, nowhere, 5);
    expect_error(s, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);

    /* Alignment. */
    c = cmd_fence(21, fence + 4, 5);
    expect_error(s, &c, SPYRE_STATUS_ERR_ALIGN, &nerr);
    c = cmd_dma(22, SPYRE_CMD_F_SRC_HOST, h->dir + 4, 0, 0, 0, 64);
    expect_error(s, &c, SPYRE_STATUS_ERR_ALIGN, &nerr);
    c = cmd_dma(23, SPYRE_CMD_F_SRC_HOST, unaligned_pt, 0, 0, 0, 64);
    expect_error(s, &c, SPYRE_STATUS_ERR_ALIGN, &nerr);

    /* Fault injection: the next 2 commands fail, then back to normal. */
    wr(s, SPYRE_REG_FAULT_INJECT, 2);
    g_assert_cmpuint(rd(s, SPYRE_REG_FAULT_INJECT), ==, 2);
    c = cmd_fence(24, fence, 0x55);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_INJECTED);
    g_assert_cmpuint(rd(s, SPYRE_REG_FAULT_INJECT), ==, 1);
    c = cmd_nop(25, 0);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_INJECTED);
    g_assert_cmpuint(rd(s, SPYRE_REG_FAULT_INJECT), ==, 0);
    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==,
                     SPYRE_STATUS_ERR_INJECTED);
    nerr += 2;
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, nerr);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0);
    c = cmd_fence(26, fence, 0x66);
    check_dma_ok(submit(s, 0, &c), 26);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0x66);

    /* A command array the device cannot read. */
    s->ring[1].size = 2;
    s->ring[1].cpl = zalloc(s, 2 * 32);
    s->ring[1].tail = 1;
    ring_program(s, 1, nowhere, s->ring[1].cpl, 2);
    ring_kick_wait(s, 1);
    g_assert_cmpuint(ring_cpl(s, 1, 0).status, ==, SPYRE_STATUS_ERR_HOST_DMA);
    g_assert_cmpuint(ring_cpl(s, 1, 0).done_count, ==, 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==,
                     SPYRE_STATUS_ERR_HOST_DMA);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, ++nerr);

    hostbuf_free(h);
    spyre_stop(s);
}

static void msix_entry(Spyre *s, int vec, uint64_t addr, uint32_t data,
                       bool masked)
{
    uint64_t off = s->dev->msix_table_off + vec * PCI_MSIX_ENTRY_SIZE;

    qpci_io_writel(s->dev, s->dev->msix_table_bar,
                   off + PCI_MSIX_ENTRY_LOWER_ADDR, (uint32_t)addr);
    qpci_io_writel(s->dev, s->dev->msix_table_bar,
                   off + PCI_MSIX_ENTRY_UPPER_ADDR, addr >> 32);
    qpci_io_writel(s->dev, s->dev->msix_table_bar,
                   off + PCI_MSIX_ENTRY_DATA, data);
    qpci_io_writel(s->dev, s->dev->msix_table_bar,
                   off + PCI_MSIX_ENTRY_VECTOR_CTRL,
                   masked ? PCI_MSIX_ENTRY_CTRL_MASKBIT : 0);
}

static void test_interrupts(void)
{
    Spyre *s = spyre_start(NULL);
    uint64_t msi = zalloc(s, 64);
    struct spyre_hw_cmd c;

    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);

    /* Causes latch in INTR_STATUS even when masked; RW1C. */
    c = cmd_nop(1, SPYRE_CMD_F_IRQ);
    submit(s, 1, &c);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, SPYRE_INTR_RING(1));
    c = cmd_nop(2, 0);
    submit(s, 0, &c);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, SPYRE_INTR_RING(1));
    wr(s, SPYRE_REG_INTR_STATUS, SPYRE_INTR_RING(0));
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, SPYRE_INTR_RING(1));
    wr(s, SPYRE_REG_INTR_STATUS, SPYRE_INTR_RING(1));
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, 0);

    /* MSI-X: vector n for ring n, vector num_rings for errors. */
    qpci_msix_enable(s->dev);
    msix_entry(s, 0, msi, 0x100, false);
    msix_entry(s, 1, msi + 8, 0x101, false);
    msix_entry(s, NRINGS, msi + 16, 0x1ee, false);
    wr(s, SPYRE_REG_INTR_MASK, SPYRE_INTR_RING(0) | SPYRE_INTR_RING(1) |
       SPYRE_INTR_ERROR);

    c = cmd_nop(3, SPYRE_CMD_F_IRQ);
    submit(s, 0, &c);
    g_assert_cmphex(qtest_readl(s->qts, msi), ==, 0x100);
    g_assert_cmphex(qtest_readl(s->qts, msi + 8), ==, 0);
    /* Without the IRQ flag: no interrupt. */
    qtest_writel(s->qts, msi, 0);
    c = cmd_nop(4, 0);
    submit(s, 0, &c);
    g_assert_cmphex(qtest_readl(s->qts, msi), ==, 0);
    /* A pending cause notifies again on the next completion. */
    c = cmd_nop(5, SPYRE_CMD_F_IRQ);
    submit(s, 0, &c);
    g_assert_cmphex(qtest_readl(s->qts, msi), ==, 0x100);

    c = cmd_nop(6, SPYRE_CMD_F_IRQ);
    submit(s, 1, &c);
    g_assert_cmphex(qtest_readl(s->qts, msi + 8), ==, 0x101);

    /* Errors go to the error vector. */
    c = cmd_nop(7, 0);
    c.hdr.opcode = 0x33;
    submit(s, 0, &c);
    g_assert_cmphex(qtest_readl(s->qts, msi + 16), ==, 0x1ee);
    g_assert(rd(s, SPYRE_REG_INTR_STATUS) & SPYRE_INTR_ERROR);

    /* INTR_MASK gates; enabling a pending cause delivers it. */
    wr(s, SPYRE_REG_INTR_STATUS, ~0u);
    wr(s, SPYRE_REG_INTR_MASK, 0);
    qtest_writel(s->qts, msi, 0);
    c = cmd_nop(8, SPYRE_CMD_F_IRQ);
    submit(s, 0, &c);
    g_assert_cmphex(qtest_readl(s->qts, msi), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, SPYRE_INTR_RING(0));
    wr(s, SPYRE_REG_INTR_MASK, SPYRE_INTR_RING(0));
    g_assert_cmphex(qtest_readl(s->qts, msi), ==, 0x100);

    /* A masked vector sets its pending bit instead. */
    wr(s, SPYRE_REG_INTR_STATUS, ~0u);
    qtest_writel(s->qts, msi, 0);
    msix_entry(s, 0, msi, 0x100, true);
    c = cmd_nop(9, SPYRE_CMD_F_IRQ);
    submit(s, 0, &c);
    g_assert_cmphex(qtest_readl(s->qts, msi), ==, 0);
    g_assert(qpci_msix_pending(s->dev, 0));
    /* Unmasking delivers it. */
    msix_entry(s, 0, msi, 0x100, false);
    g_assert_cmphex(qtest_readl(s->qts, msi), ==, 0x100);
    g_assert(!qpci_msix_pending(s->dev, 0));
    spyre_stop(s);
}

/*
 * Random, mostly malformed commands: the device must complete every one of
 * them with a defined status and never crash or stall.
 */
static void test_fuzz(void)
{
    Spyre *s = spyre_start(NULL);
    HostBuf *h = hostbuf_new(s, 4, true);
    uint64_t fence = zalloc(s, 64);
    const uint64_t vals[] = {
        0, 1, 7, 8, 64, PAGE - 1, PAGE, DEVMEM / 2, DEVMEM - 1, DEVMEM,
        DEVMEM + 1, 2 * PAGE + 3, UINT64_MAX, UINT64_MAX - 63, 1ULL << 45,
        h->dir, h->dir + 4, fence, fence + 3, h->page[1],
    };
    GRand *rnd = g_rand_new_with_seed(1234);
    struct spyre_hw_cmd c;
    int i, j, k;

    ring_setup(s, 3, 64);
    for (i = 0; i < 8; i++) {
        uint32_t first = s->ring[3].tail;

        for (j = 0; j < 50; j++) {
            memset(&c, 0, sizeof(c));
            c.hdr.opcode = g_rand_int_range(rnd, 0, 5);
            c.hdr.flags = g_rand_int_range(rnd, 0, 2) ?
                          g_rand_int_range(rnd, 0, 8) : g_rand_int(rnd);
            c.hdr.seqno = i * 100 + j;
            if (!g_rand_int_range(rnd, 0, 8)) {
                c.hdr.reserved1 = g_rand_int(rnd);
            }
            for (k = 0; k < 5; k++) {
                if (g_rand_int_range(rnd, 0, 2)) {
                    c.raw[k] = vals[g_rand_int_range(rnd, 0, ARRAY_SIZE(vals))];
                }
            }
            if (c.hdr.opcode == SPYRE_OP_DMA_COPY && c.raw[4] > DEVMEM) {
                c.raw[4] &= 0xffff;
            }
            ring_queue(s, 3, &c);
        }
        ring_kick_wait(s, 3);
        for (j = 0; j < 50; j++) {
            struct spyre_hw_cpl p = ring_cpl(s, 3, (first + j) % 64);

            g_assert_cmpuint(p.seqno, ==, i * 100 + j);
            g_assert_cmpuint(p.status, <=, SPYRE_STATUS_ERR_PROGRAM);
        }
    }
    c = cmd_nop(5, 0);
    g_assert_cmpuint(submit(s, 3, &c).status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_CMDS_LO), ==, 401);
    g_rand_free(rnd);
    hostbuf_free(h);
    spyre_stop(s);
}

/* GSIs 16..23 of the IOAPIC that are asserted (q35 routes PIRQs there). */
static unsigned intx_lines(Spyre *s)
{
    unsigned m = 0;
    int i;

    for (i = 16; i < 24; i++) {
        if (qtest_get_irq(s->qts, i)) {
            m |= 1u << i;
        }
    }
    return m;
}

/* Without MSI-X, INTA follows INTR_STATUS & INTR_MASK (level). */
static void test_intx(void)
{
    Spyre *s = spyre_start(NULL);
    struct spyre_hw_cmd c;
    unsigned line;

    qtest_irq_intercept_in(s->qts, "ioapic");
    ring_setup(s, 0, 8);
    g_assert_cmphex(intx_lines(s), ==, 0);

    c = cmd_nop(1, SPYRE_CMD_F_IRQ);
    submit(s, 0, &c);
    g_assert_cmphex(intx_lines(s), ==, 0);          /* masked */
    wr(s, SPYRE_REG_INTR_MASK, SPYRE_INTR_RING(0));
    line = intx_lines(s);
    g_assert_cmpuint(ctpop32(line), ==, 1);         /* asserted */
    wr(s, SPYRE_REG_INTR_STATUS, SPYRE_INTR_RING(0));
    g_assert_cmphex(intx_lines(s), ==, 0);          /* acknowledged */

    /* Errors assert it too once enabled. */
    wr(s, SPYRE_REG_INTR_MASK, SPYRE_INTR_ERROR);
    c = cmd_nop(2, 0);
    c.hdr.opcode = 0x99;
    submit(s, 0, &c);
    g_assert_cmphex(intx_lines(s), ==, line);
    wr(s, SPYRE_REG_INTR_MASK, 0);
    g_assert_cmphex(intx_lines(s), ==, 0);
    wr(s, SPYRE_REG_INTR_MASK, SPYRE_INTR_ERROR);
    g_assert_cmphex(intx_lines(s), ==, line);

    /* With MSI-X enabled, INTx is never asserted. */
    qpci_msix_enable(s->dev);
    g_assert_cmphex(intx_lines(s), ==, 0);
    spyre_stop(s);
}

static void test_reset(void)
{
    Spyre *s = spyre_start(",x-fault-inject=on");
    struct spyre_hw_cmd c;
    uint8_t b = 0;

    ring_setup(s, 0, 8);
    wr(s, SPYRE_REG_SCRATCH, 42);
    wr(s, SPYRE_REG_INTR_MASK, 3);
    wr(s, SPYRE_REG_FAULT_INJECT, 5);
    c = cmd_nop(1, SPYRE_CMD_F_IRQ);
    submit(s, 0, &c);
    devmem_write(s, 100, "\x5a", 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==,
                     SPYRE_STATUS_ERR_INJECTED);

    /* Anything but the magic is ignored. */
    wr(s, SPYRE_REG_RESET, 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_SCRATCH), ==, 42);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 0);

    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_SCRATCH), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_MASK), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_ERROR_CODE), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_INJECT), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_CTRL), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_HEAD), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_COMPLETED), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_CMD_BASE_LO), ==, 0);
    /* Telemetry totals survive; device memory is kept. */
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_CMDS_LO), ==, 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, 1);
    devmem_read(s, 100, &b, 1);
    g_assert_cmphex(b, ==, 0x5a);

    /* The device works again after set-up. */
    ring_setup(s, 0, 8);
    c = cmd_nop(2, 0);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);

    /* A system reset resets the device and is counted too. */
    qtest_qmp_assert_success(s->qts, "{ 'execute': 'system_reset' }");
    qtest_qmp_eventwait(s->qts, "RESET");
    qpci_device_enable(s->dev);
    s->bar0 = qpci_iomap(s->dev, SPYRE_BAR_REGS, NULL);
    g_assert_cmphex(rd(s, SPYRE_REG_ID), ==, SPYRE_ID_MAGIC);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 2);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_CMDS_LO), ==, 2);
    spyre_stop(s);
}

/* ---- LAUNCH ---- */

/* Engine ISA (Documentation/isa.md), just what the tests need. */
enum {
    ISA_HALT = 0x01, ISA_LI = 0x02, ISA_ARG = 0x03, ISA_ALU = 0x04,
    ISA_BR = 0x05, ISA_LOAD = 0x10, ISA_STORE = 0x11, ISA_VBIN = 0x22,
};
#define ISA_ALU_ADD     0
#define ISA_ALU_MUL     2
#define ISA_BR_ALWAYS   0
#define ISA_F32         0
#define ISA_VBIN_ADD    0
#define ISA_HDR         32
#define ISA_INSN        16
#define ERR_BAD_PROGRAM 2       /* enum spyre_engine_error */
#define ERR_DDR_WINDOW  11
#define UNIT_SCALAR     0
#define UNIT_DMA        1
#define UNIT_VECTOR     3

typedef struct Prog {
    uint8_t buf[ISA_HDR + 64 * ISA_INSN];
    uint32_t n;
} Prog;

static void isa(Prog *p, uint8_t op, uint8_t dt, uint8_t a, uint8_t b,
                uint8_t c, uint8_t d, uint8_t func, uint8_t flags,
                int64_t imm)
{
    uint8_t *q = p->buf + ISA_HDR + p->n * ISA_INSN;
    int i;

    g_assert_cmpuint(p->n, <, 64);
    q[0] = op, q[1] = dt, q[2] = a, q[3] = b;
    q[4] = c, q[5] = d, q[6] = func, q[7] = flags;
    for (i = 0; i < 8; i++) {
        q[8 + i] = (uint64_t)imm >> (8 * i);
    }
    p->n++;
}

static void isa_li(Prog *p, uint8_t r, int64_t v)
{
    isa(p, ISA_LI, 0, r, 0, 0, 0, 0, 0, v);
}

/* Header in place; returns the image size. */
static uint32_t isa_finish(Prog *p)
{
    uint8_t *h = p->buf;

    memset(h, 0, ISA_HDR);
    stl_le_p(h, 0x50595053);    /* "SPYP" */
    stw_le_p(h + 4, 1);
    stw_le_p(h + 6, ISA_HDR);
    stl_le_p(h + 8, p->n);
    return ISA_HDR + p->n * ISA_INSN;
}

/*
 * z[core] = x[core] + y[core], one 128-byte row (32 fp32) per core:
 * args = {x, y, z} device addresses, rows 128 bytes apart.
 */
static uint32_t prog_add_rows(Prog *p)
{
    memset(p, 0, sizeof(*p));
    isa(p, ISA_ARG, 0, 3, 0, 0, 0, 0, 0, 0);
    isa(p, ISA_ARG, 0, 4, 0, 0, 0, 0, 0, 1);
    isa(p, ISA_ARG, 0, 5, 0, 0, 0, 0, 0, 2);
    isa(p, ISA_ALU, 0, 6, 1, 0, 0, ISA_ALU_MUL, 0, 128);   /* r6 = core*128 */
    isa(p, ISA_ALU, 0, 3, 3, 6, 0, ISA_ALU_ADD, 0, 0);
    isa(p, ISA_ALU, 0, 4, 4, 6, 0, ISA_ALU_ADD, 0, 0);
    isa(p, ISA_ALU, 0, 5, 5, 6, 0, ISA_ALU_ADD, 0, 0);
    isa_li(p, 7, 128);          /* row bytes */
    isa_li(p, 8, 0);            /* LX x */
    isa_li(p, 9, 128);          /* LX y */
    isa_li(p, 10, 256);         /* LX z */
    isa(p, ISA_LOAD, 0, 8, 3, 7, 0, 0, 0, 0);
    isa(p, ISA_LOAD, 0, 9, 4, 7, 0, 0, 0, 0);
    isa_li(p, 20, 1);           /* rows */
    isa_li(p, 21, 32);          /* cols */
    isa_li(p, 22, 128);         /* strides */
    isa_li(p, 23, 128);
    isa_li(p, 24, 128);
    isa(p, ISA_VBIN, ISA_F32 << 4 | ISA_F32, 10, 8, 9, 20, ISA_VBIN_ADD, 0, 0);
    isa(p, ISA_STORE, 0, 10, 5, 7, 0, 0, 0, 0);
    isa(p, ISA_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
    return isa_finish(p);
}

/* STORE one stick to args[0] (meant to be outside every window). */
#define PROG_STRAY_STORE_PC 3
static uint32_t prog_stray_store(Prog *p)
{
    memset(p, 0, sizeof(*p));
    isa(p, ISA_ARG, 0, 3, 0, 0, 0, 0, 0, 0);
    isa_li(p, 7, 128);
    isa_li(p, 8, 0);
    isa(p, ISA_STORE, 0, 8, 3, 7, 0, 0, 0, 0);
    isa(p, ISA_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
    return isa_finish(p);
}

/* Branches to itself until the engine's instruction budget runs out. */
static uint32_t prog_spin(Prog *p)
{
    memset(p, 0, sizeof(*p));
    isa(p, ISA_BR, 0, 0, 0, 0, 0, ISA_BR_ALWAYS, 0, 0);
    isa(p, ISA_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
    return isa_finish(p);
}

/* Device memory layout of the LAUNCH tests. */
#define L_PROG          0x0
#define L_IN            0x10000     /* window 0: x rows, then y rows */
#define L_OUT           0x20000     /* window 1: z rows */
#define L_OUTSIDE       0x30000     /* in no window */
#define L_ROWS          4

typedef struct LaunchBufs {
    uint64_t desc;
    uint64_t result;
} LaunchBufs;

/* Host descriptor with n windows; returns its address. */
static uint64_t launch_desc(Spyre *s, uint32_t cores, uint32_t nargs,
                            const uint64_t *args, uint32_t nwin,
                            const struct spyre_hw_launch_window *win)
{
    size_t size = sizeof(struct spyre_hw_launch_desc) +
                  nwin * sizeof(struct spyre_hw_launch_window);
    g_autofree uint8_t *buf = g_malloc0(size);
    struct spyre_hw_launch_desc *d = (void *)buf;
    uint64_t a = zalloc(s, size);

    d->num_cores = cores;
    d->num_args = nargs;
    d->num_windows = nwin;
    memcpy(d->args, args, MIN(nargs, SPYRE_LAUNCH_MAX_ARGS) * 8);
    if (nwin) {
        memcpy(buf + sizeof(*d), win, nwin * sizeof(*win));
    }
    qtest_memwrite(s->qts, a, buf, size);
    return a;
}

static struct spyre_hw_cmd cmd_launch(uint64_t seqno, uint8_t flags,
                                      uint64_t prog, uint64_t size,
                                      uint64_t desc, uint64_t result)
{
    struct spyre_hw_cmd c = { 0 };

    c.hdr.opcode = SPYRE_OP_LAUNCH;
    c.hdr.flags = flags;
    c.hdr.seqno = seqno;
    c.launch.prog_addr = prog;
    c.launch.prog_size = size;
    c.launch.desc_addr = desc;
    c.launch.result_addr = result;
    return c;
}

static uint64_t result_buf(Spyre *s)
{
    uint64_t a = zalloc(s, sizeof(struct spyre_hw_launch_result));

    qtest_memset(s->qts, a, 0xa5, sizeof(struct spyre_hw_launch_result));
    return a;
}

static void read_result(Spyre *s, uint64_t a, struct spyre_hw_launch_result *r)
{
    qtest_memread(s->qts, a, r, sizeof(*r));
}

/* Input rows for the add program; returns the expected output in z. */
static void add_rows_setup(Spyre *s, float *z)
{
    float x[L_ROWS * 32], y[L_ROWS * 32];
    int i;

    for (i = 0; i < L_ROWS * 32; i++) {
        x[i] = (float)(i * 3 - 50) * 0.5f;
        y[i] = (float)(1000 - i * 7) * 0.25f;
        z[i] = x[i] + y[i];
    }
    devmem_write(s, L_IN, x, sizeof(x));
    devmem_write(s, L_IN + sizeof(x), y, sizeof(y));
}

/* Submit the add program on ring n with L_ROWS cores; check z exactly. */
static void launch_add_rows(Spyre *s, int n, uint64_t seqno,
                            struct spyre_hw_launch_result *res,
                            struct spyre_hw_cpl *cpl)
{
    const struct spyre_hw_launch_window win[2] = {
        { L_IN, 2 * L_ROWS * 128 }, { L_OUT, L_ROWS * 128 },
    };
    const uint64_t args[3] = { L_IN, L_IN + L_ROWS * 128, L_OUT };
    float want[L_ROWS * 32], got[L_ROWS * 32];
    Prog p;
    uint32_t size = prog_add_rows(&p);
    uint64_t desc = launch_desc(s, L_ROWS, 3, args, 2, win);
    uint64_t result = result_buf(s);
    struct spyre_hw_cmd c;

    add_rows_setup(s, want);
    devmem_write(s, L_OUT, "\xff", 1);
    devmem_write(s, L_PROG, p.buf, size);
    c = cmd_launch(seqno, SPYRE_CMD_F_IRQ, L_PROG, size, desc, result);
    *cpl = submit(s, n, &c);
    g_assert_cmpuint(cpl->seqno, ==, seqno);
    g_assert_cmpuint(cpl->status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(cpl->detail, ==, 0);
    devmem_read(s, L_OUT, got, sizeof(got));
    g_assert(memcmp(got, want, sizeof(got)) == 0);
    read_result(s, result, res);
}

static void test_launch(void)
{
    Spyre *s = spyre_start(NULL);
    struct spyre_hw_launch_result r;
    struct spyre_hw_cpl cpl;
    uint64_t busy_sum = 0;
    int i, u;

    ring_setup(s, 0, 8);
    wr(s, SPYRE_REG_INTR_MASK, SPYRE_INTR_RING(0));
    launch_add_rows(s, 0, 77, &r, &cpl);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, SPYRE_INTR_RING(0));

    g_assert_cmpuint(r.error, ==, 0);
    g_assert_cmpuint(r.message[SPYRE_LAUNCH_MSG_LEN - 1], ==, 0);
    g_assert_cmpuint(r.total_cycles, >, 0);
    g_assert_cmpuint(cpl.cycles, ==, r.total_cycles);
    g_assert_cmpuint(r.num_cores, ==, L_ROWS);
    /* Each core loads two rows and stores one (whole sticks). */
    g_assert_cmpuint(r.ddr_read_bytes, ==, L_ROWS * 2 * 128);
    g_assert_cmpuint(r.ddr_write_bytes, ==, L_ROWS * 128);
    g_assert_cmpuint(r.ring_bytes, ==, 0);
    g_assert_cmpuint(r.macs, ==, 0);
    g_assert_cmpuint(r.instructions, >=, L_ROWS * 20);
    g_assert_cmpuint(r.mac_peak, ==, 0); /* no matrix work */
    for (i = 0; i < L_ROWS; i++) {
        g_assert_cmpuint(r.cores[i].busy[UNIT_SCALAR], >, 0);
        g_assert_cmpuint(r.cores[i].busy[UNIT_DMA], >, 0);
        g_assert_cmpuint(r.cores[i].busy[UNIT_VECTOR], >, 0);
        g_assert_cmpuint(r.cores[i].end_cycle, >, 0);
        g_assert_cmpuint(r.cores[i].end_cycle, <=, r.total_cycles);
    }
    /* Entries past num_cores are zero. */
    g_assert_cmpuint(r.cores[L_ROWS].end_cycle, ==, 0);

    /* Telemetry: launch totals and per-core counters match the result. */
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_LAUNCH_ERRORS), ==, 0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_CYCLES_LO), ==,
                     r.total_cycles);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_INSTRS_LO), ==,
                     r.instructions);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_DDR_RD_LO), ==,
                     r.ddr_read_bytes);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_DDR_WR_LO), ==,
                     r.ddr_write_bytes);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_MACS_LO), ==, 0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_RING_LO), ==, 0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_CMDS_LO), ==, 1);
    for (i = 0; i < 32; i++) {
        uint64_t instrs = rd64(s, SPYRE_TELE_CORE_REG(i,
                                    SPYRE_TELE_CORE_INSTRS_LO));

        for (u = 0; u < SPYRE_LAUNCH_UNITS; u++) {
            uint64_t v = rd64(s, SPYRE_TELE_CORE_REG(i,
                                  SPYRE_TELE_CORE_BUSY_LO(u)));

            g_assert_cmpuint(v, ==, i < L_ROWS ? r.cores[i].busy[u] : 0);
        }
        g_assert_cmpuint(rd64(s, SPYRE_TELE_CORE_REG(i,
                                  SPYRE_TELE_CORE_ACTIVE_LO)), ==,
                         i < L_ROWS ? r.cores[i].end_cycle : 0);
        if (i < L_ROWS) {
            g_assert_cmpuint(instrs, >, 0);
        } else {
            g_assert_cmpuint(instrs, ==, 0);
        }
        busy_sum += instrs;
    }
    g_assert_cmpuint(busy_sum, ==, r.instructions);
    /* Blocks of absent cores read 0. */
    g_assert_cmpuint(rd(s, SPYRE_TELE_CORE_REG(40, 0)), ==, 0);

    /* The counters are cumulative: a second launch (ring 1) doubles them. */
    ring_setup(s, 1, 4);
    launch_add_rows(s, 1, 78, &r, &cpl);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 2);
    g_assert_cmpuint(rd64(s, SPYRE_TELE_CORE_REG(0,
                              SPYRE_TELE_CORE_BUSY_LO(UNIT_DMA))), ==,
                     2 * r.cores[0].busy[UNIT_DMA]);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_CYCLES_LO), ==,
                     2 * r.total_cycles);

    /* No result wanted: result_addr 0. */
    {
        const uint64_t args[3] = { L_IN, L_IN + L_ROWS * 128, L_OUT };
        const struct spyre_hw_launch_window win[2] = {
            { L_IN, 2 * L_ROWS * 128 }, { L_OUT, L_ROWS * 128 },
        };
        Prog p;
        uint32_t size = prog_add_rows(&p);
        struct spyre_hw_cmd c = cmd_launch(79, 0, L_PROG, size,
                                           launch_desc(s, 0, 3, args, 2, win),
                                           0);

        /* num_cores 0 = all 32 cores; rows past 4 are in no window. */
        cpl = submit(s, 0, &c);
        g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_ERR_PROGRAM);
        g_assert_cmpuint(cpl.detail, ==, ERR_DDR_WINDOW);
    }
    spyre_stop(s);
}

/* A faulty program stops with ERR_PROGRAM; the ring then runs on. */
static void test_launch_fault(void)
{
    Spyre *s = spyre_start(",x-engine-threads=1");
    const struct spyre_hw_launch_window win[1] = { { L_OUT, 4096 } };
    const uint64_t args[1] = { L_OUTSIDE };
    struct spyre_hw_launch_result r;
    struct spyre_hw_cpl cpl;
    struct spyre_hw_cmd c;
    uint8_t before[128], after[128];
    uint64_t result = result_buf(s);
    uint64_t fence = zalloc(s, 8);
    Prog p;
    uint32_t size = prog_stray_store(&p);
    uint32_t idx;

    ring_setup(s, 2, 8);
    wr(s, SPYRE_REG_INTR_MASK, SPYRE_INTR_ERROR | SPYRE_INTR_RING(2));
    fill(before, sizeof(before), 3);
    devmem_write(s, L_OUTSIDE, before, sizeof(before));
    devmem_write(s, L_PROG, p.buf, size);

    /* LAUNCH, then a FENCE behind it on the same ring: in order. */
    c = cmd_launch(10, 0, L_PROG, size, launch_desc(s, 1, 1, args, 1, win),
                   result);
    idx = ring_queue(s, 2, &c);
    c = cmd_fence(11, fence, 0x1234);
    ring_queue(s, 2, &c);
    ring_kick_wait(s, 2);
    cpl = ring_cpl(s, 2, idx);
    g_assert_cmpuint(cpl.seqno, ==, 10);
    g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_ERR_PROGRAM);
    g_assert_cmpuint(cpl.detail, ==, ERR_DDR_WINDOW);
    g_assert_cmpuint(cpl.done_count, ==, 1);
    g_assert_cmpuint(ring_cpl(s, 2, idx + 1).status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(ring_cpl(s, 2, idx + 1).done_count, ==, 2);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0x1234);

    read_result(s, result, &r);
    g_assert_cmpuint(r.error, ==, ERR_DDR_WINDOW);
    g_assert_cmpint(r.core, ==, 0);
    g_assert_cmpuint(r.pc, ==, PROG_STRAY_STORE_PC);
    g_assert(strstr(r.message, "outside the job's memory windows"));
    g_assert_cmpuint(r.num_cores, ==, 1);
    devmem_read(s, L_OUTSIDE, after, sizeof(after));
    g_assert(memcmp(before, after, sizeof(after)) == 0);

    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==,
                     SPYRE_STATUS_ERR_PROGRAM);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS) & SPYRE_STATUS_ERROR, ==,
                    SPYRE_STATUS_ERROR);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS) & SPYRE_INTR_ERROR, ==,
                    SPYRE_INTR_ERROR);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_LAUNCH_ERRORS), ==, 1);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, 1);

    /* A program that does not validate: core -1, BAD_PROGRAM. */
    devmem_write(s, L_PROG, "XXXX", 4);
    result = result_buf(s);
    c = cmd_launch(12, 0, L_PROG, size, launch_desc(s, 1, 1, args, 1, win),
                   result);
    cpl = submit(s, 2, &c);
    g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_ERR_PROGRAM);
    g_assert_cmpuint(cpl.detail, ==, ERR_BAD_PROGRAM);
    read_result(s, result, &r);
    g_assert_cmpuint(r.error, ==, ERR_BAD_PROGRAM);
    g_assert_cmpint(r.core, ==, -1);
    g_assert(strstr(r.message, "magic"));

    /* The good program on the same ring works. */
    launch_add_rows(s, 2, 13, &r, &cpl);
    g_assert_cmpuint(r.error, ==, 0);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_LAUNCH_ERRORS), ==, 2);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 3);
    spyre_stop(s);
}

/* Malformed LAUNCH commands and descriptors: precise statuses. */
static void test_launch_bad(void)
{
    Spyre *s = spyre_start(",num-cores=8,x-fault-inject=on");
    const struct spyre_hw_launch_window win[1] = { { L_IN, 4096 } };
    const uint64_t args[16] = { 0 };
    const uint64_t nowhere = 1ULL << 45;
    struct spyre_hw_launch_window bad_win[2] = {
        { L_IN, 128 }, { DEVMEM - 128, 256 },
    };
    uint64_t good = launch_desc(s, 1, 1, args, 1, win);
    uint64_t result = result_buf(s);
    uint8_t sentinel[64], chk[64];
    Prog p;
    uint32_t size = prog_add_rows(&p);
    struct spyre_hw_cmd c;
    struct {
        struct spyre_hw_cmd c;
        uint32_t status;
    } cases[32];
    int n = 0, i;

    devmem_write(s, L_PROG, p.buf, size);
    ring_setup(s, 0, 64);

#define CASE(cmd, st) do { cases[n].c = (cmd); cases[n].status = (st); \
                           n++; } while (0)
    c = cmd_launch(0, 0, L_PROG, size, good, result);
    c.launch.reserved[0] = 1;
    CASE(c, SPYRE_STATUS_ERR_RESERVED);
    c = cmd_launch(0, 0, L_PROG, size, good, result);
    c.launch.reserved[1] = 1ULL << 63;
    CASE(c, SPYRE_STATUS_ERR_RESERVED);
    CASE(cmd_launch(0, SPYRE_CMD_F_SRC_HOST, L_PROG, size, good, result),
         SPYRE_STATUS_ERR_RESERVED);
    CASE(cmd_launch(0, SPYRE_CMD_F_DST_HOST, L_PROG, size, good, result),
         SPYRE_STATUS_ERR_RESERVED);
    CASE(cmd_launch(0, 0x80, L_PROG, size, good, result),
         SPYRE_STATUS_ERR_RESERVED);
    CASE(cmd_launch(0, 0, L_PROG, 0, good, result), SPYRE_STATUS_ERR_SIZE);
    CASE(cmd_launch(0, 0, L_PROG, SPYRE_LAUNCH_MAX_PROG_SIZE + 1, good,
                    result), SPYRE_STATUS_ERR_SIZE);
    CASE(cmd_launch(0, 0, DEVMEM - 16, size, good, result),
         SPYRE_STATUS_ERR_DEV_RANGE);
    CASE(cmd_launch(0, 0, UINT64_MAX - 15, size, good, result),
         SPYRE_STATUS_ERR_DEV_RANGE);
    CASE(cmd_launch(0, 0, L_PROG, size, good + 4, result),
         SPYRE_STATUS_ERR_ALIGN);
    CASE(cmd_launch(0, 0, L_PROG, size, good, result + 1),
         SPYRE_STATUS_ERR_ALIGN);
    CASE(cmd_launch(0, 0, L_PROG, size, nowhere, result),
         SPYRE_STATUS_ERR_HOST_DMA);
    {
        uint64_t d = launch_desc(s, 1, 1, args, 1, win);

        qtest_writel(s->qts, d + 12, 1);                /* flags */
        CASE(cmd_launch(0, 0, L_PROG, size, d, result),
             SPYRE_STATUS_ERR_RESERVED);
    }
    CASE(cmd_launch(0, 0, L_PROG, size, launch_desc(s, 9, 1, args, 1, win),
                    result), SPYRE_STATUS_ERR_SIZE);      /* > num-cores */
    CASE(cmd_launch(0, 0, L_PROG, size, launch_desc(s, 1, 17, args, 1, win),
                    result), SPYRE_STATUS_ERR_SIZE);
    {
        uint64_t d = launch_desc(s, 1, 1, args, 0, NULL);

        qtest_writel(s->qts, d + 8, SPYRE_LAUNCH_MAX_WINDOWS + 1);
        CASE(cmd_launch(0, 0, L_PROG, size, d, result), SPYRE_STATUS_ERR_SIZE);
    }
    CASE(cmd_launch(0, 0, L_PROG, size,
                    launch_desc(s, 1, 1, args, 2, bad_win), result),
         SPYRE_STATUS_ERR_DEV_RANGE);
    bad_win[1].addr = UINT64_MAX - 63;
    bad_win[1].size = 128;
    CASE(cmd_launch(0, 0, L_PROG, size,
                    launch_desc(s, 1, 1, args, 2, bad_win), result),
         SPYRE_STATUS_ERR_DEV_RANGE);
    bad_win[1].addr = 0;
    bad_win[1].size = DEVMEM + 1;
    CASE(cmd_launch(0, 0, L_PROG, size,
                    launch_desc(s, 1, 1, args, 2, bad_win), result),
         SPYRE_STATUS_ERR_DEV_RANGE);
    {
        /*
         * The descriptor is readable, its window array is not: the
         * descriptor ends exactly at the end of guest RAM (-m 256M).
         */
        struct spyre_hw_launch_desc d = { .num_cores = 1, .num_windows = 1 };
        uint64_t end = 256 * 1024 * 1024;

        qtest_memwrite(s->qts, end - sizeof(d), &d, sizeof(d));
        CASE(cmd_launch(0, 0, L_PROG, size, end - sizeof(d), result),
             SPYRE_STATUS_ERR_HOST_DMA);
    }
#undef CASE

    qtest_memread(s->qts, result, sentinel, sizeof(sentinel));
    for (i = 0; i < n; i++) {
        struct spyre_hw_cpl cpl;

        cases[i].c.hdr.seqno = 100 + i;
        cpl = submit(s, 0, &cases[i].c);
        if (cpl.status != cases[i].status) {
            g_test_message("case %d: status %u, want %u", i, cpl.status,
                           cases[i].status);
        }
        g_assert_cmpuint(cpl.seqno, ==, 100 + i);
        g_assert_cmpuint(cpl.status, ==, cases[i].status);
        g_assert_cmpuint(cpl.detail, ==, 0);
        g_assert_cmpuint(cpl.cycles, >, 0);
    }
    /* Nothing reached the engine; no result was written. */
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 0);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_ERRORS), ==, n);
    qtest_memread(s->qts, result, chk, sizeof(chk));
    g_assert(memcmp(sentinel, chk, sizeof(chk)) == 0);

    /* Fault injection applies to LAUNCH too. */
    wr(s, SPYRE_REG_FAULT_INJECT, 1);
    c = cmd_launch(7, 0, L_PROG, size, good, result);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_INJECTED);
    spyre_stop(s);
}

/*
 * While a LAUNCH runs, its ring waits and the other rings go on; a reset
 * cancels the running launch; quitting QEMU while one runs is clean.
 */
static void test_launch_async(void)
{
    Spyre *s = spyre_start(",x-engine-threads=2");
    const uint64_t args[1] = { 0 };
    struct spyre_hw_launch_result r;
    struct spyre_hw_cpl cpl;
    struct spyre_hw_cmd c;
    uint64_t fence = zalloc(s, 8);
    uint64_t result = result_buf(s);
    uint64_t desc = launch_desc(s, 2, 1, args, 0, NULL);
    Prog p;
    uint32_t size = prog_spin(&p);
    int i;

    devmem_write(s, 0x8000, p.buf, size);
    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);

    c = cmd_launch(1, 0, 0x8000, size, desc, result);
    ring_queue(s, 0, &c);
    c = cmd_fence(2, fence, 99);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);

    /* Ring 1 runs while ring 0's launch spins. */
    for (i = 0; i < 20; i++) {
        c = cmd_nop(10 + i, 0);
        g_assert_cmpuint(submit(s, 1, &c).status, ==, SPYRE_STATUS_OK);
    }
    g_usleep(50 * 1000);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, 0);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_COMPLETED), ==, 0);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0);

    /* A second launch from ring 1 queues behind it for the engine. */
    c = cmd_launch(3, 0, 0x8000, size, desc, 0);
    ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmpuint(rrd(s, 1, SPYRE_RING_HEAD), ==, 20 % 8);

    /* Reset cancels it: nothing completes, the device is usable again. */
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 1);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 0);
    wait_ready(s);
    ring_setup(s, 0, 8);
    launch_add_rows(s, 0, 5, &r, &cpl);
    g_assert_cmpuint(r.error, ==, 0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 1);

    /* Disabling the ring under a launch drops its completion. */
    c = cmd_launch(6, 0, 0x8000, size, desc, result);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    qtest_clock_step(s->qts, 1000);
    rwr(s, 0, SPYRE_RING_CTRL, 0);

    /* Leave one spinning: QEMU must still quit cleanly. */
    spyre_stop(s);
}

/* Hot-unplug while a LAUNCH runs and a large copy waits: clean unrealize. */
static void test_launch_unplug(void)
{
    Spyre *s = spyre_start_on("pc", NULL);
    const uint64_t args[1] = { 0 };
    uint64_t desc = launch_desc(s, 2, 1, args, 0, NULL);
    struct spyre_hw_cmd c;
    Prog p;
    uint32_t size = prog_spin(&p);

    devmem_write(s, 0x8000, p.buf, size);
    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);
    c = cmd_launch(1, 0, 0x8000, size, desc, 0);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    c = cmd_launch(2, 0, 0x8000, size, desc, 0);
    ring_queue(s, 1, &c);
    c = cmd_dma(3, 0, 0, 0, DEVMEM / 2, 0, DEVMEM / 2);
    ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    qtest_clock_step(s->qts, 1000);
    g_usleep(20 * 1000);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, 0);

    qpci_unplug_acpi_device_test(s->qts, "spyre0", SLOT);
    qtest_qmp_assert_success(s->qts, "{ 'execute': 'query-status' }");
    g_assert(!qpci_device_find(s->bus, QPCI_DEVFN(SLOT, 0)));
    spyre_stop(s);
}

/* ---- Fault containment (hw interface 1.1) ---- */

#define ISA_LOOP        0x06
#define ISA_ENDLOOP     0x07
#define ISA_MM          0x20
#define ISA_F16         1
#define ERR_NO_MEMORY   22
#define ERR_MMU_FAULT   23

/*
 * A job of enormous instructions: MM 4096 x 4096 x 4096 fp16 with zero
 * strides (tiny scratchpad footprint), looped: seconds of host CPU per
 * instruction, minutes in all.
 */
static uint32_t prog_huge_mm(Prog *p)
{
    memset(p, 0, sizeof(*p));
    isa_li(p, 3, 32768);        /* C */
    isa_li(p, 4, 0);            /* A */
    isa_li(p, 5, 16384);        /* B */
    isa_li(p, 20, 4096);        /* M, N, K */
    isa_li(p, 21, 4096);
    isa_li(p, 22, 4096);
    isa_li(p, 23, 0);           /* lda, ldb, ldc */
    isa_li(p, 24, 0);
    isa_li(p, 25, 0);
    isa(p, ISA_LOOP, 0, 0, 0, 0, 0, 0, 0, 100);
    isa(p, ISA_MM, ISA_F16, 3, 4, 5, 20, 0, 0, 0);
    isa(p, ISA_ENDLOOP, 0, 0, 0, 0, 0, 0, 0, 0);
    isa(p, ISA_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
    return isa_finish(p);
}

/* Queue the huge job on ring n (2 cores); returns the result address. */
static uint64_t launch_huge(Spyre *s, int n, uint64_t seqno, uint32_t *idx)
{
    const uint64_t args[1] = { 0 };
    Prog p;
    uint32_t size = prog_huge_mm(&p);
    uint64_t result = result_buf(s);
    struct spyre_hw_cmd c;

    devmem_write(s, 0x8000, p.buf, size);
    c = cmd_launch(seqno, SPYRE_CMD_F_IRQ, 0x8000, size,
                   launch_desc(s, 2, 1, args, 0, NULL), result);
    *idx = ring_queue(s, n, &c);
    rwr(s, n, SPYRE_RING_TAIL, s->ring[n].tail);
    return result;
}

/* Completion entry idx of ring n was never written (ring_queue's 0xee). */
static void assert_no_cpl(Spyre *s, int n, uint32_t idx)
{
    struct spyre_hw_cpl c = ring_cpl(s, n, idx);

    g_assert_cmphex(c.seqno, ==, 0xeeeeeeeeeeeeeeeeULL);
    g_assert_cmphex(c.status, ==, 0xeeeeeeee);
}

static void assert_no_result(Spyre *s, uint64_t result)
{
    struct spyre_hw_launch_result r;

    read_result(s, result, &r);
    g_assert_cmphex(r.error, ==, 0xa5a5a5a5);
    g_assert_cmphex(r.total_cycles, ==, 0xa5a5a5a5a5a5a5a5ULL);
}

/* A directory of npages data pages that all point to the page at addr. */
static uint64_t dir_to(Spyre *s, uint64_t addr, size_t npages)
{
    size_t ntables = DIV_ROUND_UP(npages, SPYRE_HOST_PT_ENTRIES);
    uint64_t dir = zalloc(s, ntables * 8);
    size_t i, j;

    for (i = 0; i < ntables; i++) {
        uint64_t pt = zalloc(s, PAGE);

        qtest_writeq(s->qts, dir + i * 8, pt);
        for (j = 0; j < SPYRE_HOST_PT_ENTRIES; j++) {
            qtest_writeq(s->qts, pt + j * 8, addr);
        }
    }
    return dir;
}

static void assert_alive(Spyre *s, int n)
{
    struct spyre_hw_cmd c = cmd_nop(0x5a5a, 0);

    qtest_qmp_assert_success(s->qts, "{ 'execute': 'query-status' }");
    g_assert_cmphex(rd(s, SPYRE_REG_ID), ==, SPYRE_ID_MAGIC);
    g_assert_cmpuint(submit(s, n, &c).status, ==, SPYRE_STATUS_OK);
}

/*
 * Issue 6 item 11: a large copy (DMA worker) whose destination pages are
 * the card's own BAR0 (the RESET register, with the magic as data) or BAR2
 * fails with ERR_HOST_DMA; the card does not reset itself and QEMU stays
 * responsive. Small copies and fences to the BARs fail the same way.
 */
static void test_dma_to_own_bars(void)
{
    Spyre *s = spyre_start(NULL);
    const size_t len = 2 * 1024 * 1024;
    g_autofree uint32_t *magic = g_new(uint32_t, len / 4);
    uint64_t bar0 = s->bar0.addr, bar2 = s->bar2.addr;
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    double t0;
    size_t i;

    g_assert(!s->bar0.is_io && bar0);
    for (i = 0; i < len / 4; i++) {
        magic[i] = cpu_to_le32(SPYRE_RESET_MAGIC);
    }
    devmem_write(s, 0, magic, len);
    ring_setup(s, 0, 8);

    /* Worker: device -> host, every page is BAR0, offset = RESET. */
    c = cmd_dma(1, SPYRE_CMD_F_DST_HOST, 0, 0, dir_to(s, bar0, len / PAGE),
                SPYRE_REG_RESET, len - PAGE);
    t0 = now_ms();
    p = submit(s, 0, &c);
    g_test_message("DMA into BAR0 failed after %.1f ms", now_ms() - t0);
    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_ERR_HOST_DMA);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==,
                    SPYRE_STATUS_READY | SPYRE_STATUS_ERROR);
    assert_alive(s, 0);

    /* Worker: host -> device reading BAR0; device -> host into BAR2. */
    c = cmd_dma(2, SPYRE_CMD_F_SRC_HOST, dir_to(s, bar0, len / PAGE), 0,
                0x100000, 0, len);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_HOST_DMA);
    c = cmd_dma(3, SPYRE_CMD_F_DST_HOST, 0, 0, dir_to(s, bar2, len / PAGE),
                0, len);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_HOST_DMA);
    /* The page directory itself in BAR2. */
    c = cmd_dma(4, SPYRE_CMD_F_SRC_HOST, bar2, 0, 0x100000, 0, len);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_HOST_DMA);

    /* Inline (small) copy and fence into BAR0's RESET register. */
    c = cmd_dma(5, SPYRE_CMD_F_DST_HOST, 0, 0, dir_to(s, bar0, 1),
                SPYRE_REG_RESET, 64);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_HOST_DMA);
    /* 8 bytes at CLOCK_MHZ: the high half would land in SCRATCH. */
    c = cmd_fence(6, bar0 + SPYRE_REG_CLOCK_MHZ, 0x1234ULL << 32);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_HOST_DMA);
    g_assert_cmpuint(rd(s, SPYRE_REG_SCRATCH), ==, 0);
    /* Completion array in BAR2: logged and dropped, HEAD moves on. */
    ring_program(s, 1, s->ring[0].cmd, bar2 + 0x1000, 8);
    s->ring[1] = s->ring[0];
    s->ring[1].tail = 0;
    c = cmd_nop(7, 0);
    ring_queue(s, 1, &c);
    ring_kick_wait(s, 1);
    g_assert_cmpuint(rrd(s, 1, SPYRE_RING_COMPLETED), ==, 1);
    devmem_read(s, 0x1000, magic, 64);
    for (i = 0; i < 16; i++) {
        g_assert_cmphex(le32_to_cpu(magic[i]), ==, SPYRE_RESET_MAGIC);
    }

    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 0);
    assert_alive(s, 0);
    spyre_stop(s);
}

/*
 * Issue 6 item 12: a 16 MiB copy whose destination pages are MMIO (the
 * card's BAR0, unimplemented registers), then a register RESET, a system
 * reset and a hot-unplug: none deadlocks (before 1.1 the worker took the
 * BQL for every MMIO write while the reset waited for it with the BQL).
 */
static void queue_copy_to_mmio(Spyre *s, int n)
{
    uint64_t dir = dir_to(s, s->bar0.addr + 0x2000, DEVMEM / PAGE);
    struct spyre_hw_cmd c = cmd_dma(1, SPYRE_CMD_F_DST_HOST, 0, 0, dir, 0,
                                    DEVMEM);

    ring_queue(s, n, &c);
    ring_queue(s, n, &c);
    rwr(s, n, SPYRE_RING_TAIL, s->ring[n].tail);
}

static void test_reset_during_mmio_copy(void)
{
    Spyre *s = spyre_start(NULL);
    double ms;

    ring_setup(s, 0, 8);
    queue_copy_to_mmio(s, 0);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    ms = wait_ready(s);
    g_test_message("READY %.1f ms after RESET", ms);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 1);
    ring_setup(s, 0, 8);
    assert_alive(s, 0);

    queue_copy_to_mmio(s, 0);
    qtest_qmp_assert_success(s->qts, "{ 'execute': 'system_reset' }");
    qtest_qmp_eventwait(s->qts, "RESET");
    qpci_device_enable(s->dev);
    s->bar0 = qpci_iomap(s->dev, SPYRE_BAR_REGS, NULL);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 2);
    ring_setup(s, 0, 8);
    assert_alive(s, 0);
    spyre_stop(s);
}

static void test_unplug_during_mmio_copy(void)
{
    Spyre *s = spyre_start_on("pc", NULL);

    ring_setup(s, 0, 8);
    queue_copy_to_mmio(s, 0);
    qpci_unplug_acpi_device_test(s->qts, "spyre0", SLOT);
    qtest_qmp_assert_success(s->qts, "{ 'execute': 'query-status' }");
    g_assert(!qpci_device_find(s->bus, QPCI_DEVFN(SLOT, 0)));
    spyre_stop(s);
}

/*
 * Issue 6 item 14: RESET during a job of enormous instructions returns at
 * once (RESETTING), the card is READY within milliseconds, nothing of the
 * job completes, and the next launch works.
 */
static void test_reset_during_huge_launch(void)
{
    Spyre *s = spyre_start(",x-engine-threads=2");
    struct spyre_hw_launch_result r;
    struct spyre_hw_cpl cpl;
    uint64_t result;
    uint32_t idx, st;
    double t0, ms;

    ring_setup(s, 0, 8);
    result = launch_huge(s, 0, 1, &idx);
    g_usleep(200 * 1000);
    qtest_clock_step(s->qts, 1000);
    /* Running: HEAD on it, nothing completed. */
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, idx);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_COMPLETED), ==, 0);

    t0 = now_ms();
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    st = rd(s, SPYRE_REG_STATUS);
    g_test_message("RESET write + STATUS read: %.2f ms, STATUS 0x%x",
                   now_ms() - t0, st);
    g_assert(st == SPYRE_STATUS_RESETTING || st == SPYRE_STATUS_READY);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    ms = wait_ready(s);
    g_test_message("READY %.1f ms after the RESET write (%.1f ms polling)",
                   now_ms() - t0, ms);
    g_assert_cmpfloat(now_ms() - t0, <, 1000);

    assert_no_cpl(s, 0, idx);
    assert_no_result(s, result);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 0);
    ring_setup(s, 0, 8);
    launch_add_rows(s, 0, 2, &r, &cpl);
    g_assert_cmpuint(r.error, ==, 0);
    spyre_stop(s);
}

/*
 * CTRL.ABORT during a running launch: the write returns at once, BUSY
 * clears within milliseconds, no completion or result is written, other
 * rings go on, the re-enabled ring works.
 */
static void test_abort_launch(void)
{
    Spyre *s = spyre_start(",x-engine-threads=2");
    struct spyre_hw_cmd c;
    uint64_t result;
    uint32_t idx, i;
    double t0, ms;

    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);
    result = launch_huge(s, 0, 1, &idx);
    c = cmd_nop(2, 0);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    g_usleep(200 * 1000);
    for (i = 0; i < 10; i++) {
        c = cmd_nop(10 + i, 0);
        g_assert_cmpuint(submit(s, 1, &c).status, ==, SPYRE_STATUS_OK);
    }
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, idx);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_COMPLETED), ==, 0);

    t0 = now_ms();
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    g_test_message("ABORT write: %.2f ms", now_ms() - t0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS) & SPYRE_RING_STATUS_ENABLED,
                    ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_CTRL), ==, 0);
    ms = wait_not_busy(s, 0);
    g_test_message("BUSY clear %.1f ms after ABORT", now_ms() - t0);
    g_assert_cmpfloat(ms, <, 1000);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_COMPLETED), ==, 0);
    qtest_clock_step(s->qts, 1000);
    assert_no_cpl(s, 0, idx);
    assert_no_cpl(s, 0, idx + 1);
    assert_no_result(s, result);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_LAUNCHES_LO), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);

    /* Ring 1 was not affected; ring 0 works again once re-enabled. */
    c = cmd_nop(30, 0);
    g_assert_cmpuint(submit(s, 1, &c).status, ==, SPYRE_STATUS_OK);
    ring_setup(s, 0, 8);
    assert_alive(s, 0);
    /* ABORT of an idle ring just disables it. */
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT |
        SPYRE_RING_CTRL_ENABLE);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    spyre_stop(s);
}

/* Wait until ring n's command holds its engine (EXEC_TIME.RUNNING). */
static uint32_t wait_exec_running(Spyre *s, int n)
{
    double t0 = now_ms();
    uint32_t t;

    while (!((t = rrd(s, n, SPYRE_RING_EXEC_TIME)) & SPYRE_RING_EXEC_RUNNING)) {
        g_assert_cmpfloat(now_ms() - t0, <, 10000);
        g_usleep(500);
    }
    return t;
}

/*
 * EXEC_SEQNO / EXEC_TIME (1.4): a launch holding the engine reads RUNNING
 * with its seqno and the virtual time it has held the engine; a launch of
 * another ring queued behind it is not charged (0, though its ring is
 * BUSY) until it gets the engine; an injected hang counts from the moment
 * it hangs; idle and aborted rings read 0.
 */
static void test_exec_time(void)
{
    /* Without time slicing (1.4 behaviour): ring 2 waits for ring 0's end. */
    Spyre *s = spyre_start(",x-fault-inject=on,x-engine-threads=2,"
                           "timeslice=off");
    const uint64_t ms = 1000 * 1000;
    struct spyre_hw_cmd c;
    uint32_t idx, t;

    g_assert_cmphex(rd(s, SPYRE_REG_CAPS) & SPYRE_CAP_EXEC_TIME, ==,
                    SPYRE_CAP_EXEC_TIME);
    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);
    ring_setup(s, 2, 8);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_TIME), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_SEQNO), ==, 0);

    /* Ring 0 holds the engine, ring 2 waits for it. */
    launch_huge(s, 0, 0x100000007ULL, &idx);
    t = wait_exec_running(s, 0);
    g_assert_cmpuint(t & SPYRE_RING_EXEC_MS_MASK, <, 100);
    launch_huge(s, 2, 9, &idx);
    qtest_clock_step(s->qts, 1500 * ms);
    t = rrd(s, 0, SPYRE_RING_EXEC_TIME);
    g_assert_cmphex(t & SPYRE_RING_EXEC_RUNNING, ==, SPYRE_RING_EXEC_RUNNING);
    g_assert_cmpuint(t & SPYRE_RING_EXEC_MS_MASK, >=, 1500);
    g_assert_cmpuint(t & SPYRE_RING_EXEC_MS_MASK, <, 1600);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_SEQNO), ==, 7);
    g_assert_cmphex(rrd(s, 2, SPYRE_RING_STATUS) & SPYRE_RING_STATUS_BUSY, ==,
                    SPYRE_RING_STATUS_BUSY);
    g_assert_cmphex(rrd(s, 2, SPYRE_RING_EXEC_TIME), ==, 0);
    g_assert_cmphex(rrd(s, 2, SPYRE_RING_EXEC_SEQNO), ==, 0);

    /* Ring 0 lets go: ring 2 is charged from when it got the engine. */
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    wait_not_busy(s, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_TIME), ==, 0);
    t = wait_exec_running(s, 2);
    g_assert_cmpuint(t & SPYRE_RING_EXEC_MS_MASK, <, 100);
    g_assert_cmphex(rrd(s, 2, SPYRE_RING_EXEC_SEQNO), ==, 9);
    qtest_clock_step(s->qts, 200 * ms);
    t = rrd(s, 2, SPYRE_RING_EXEC_TIME) & SPYRE_RING_EXEC_MS_MASK;
    g_assert_cmpuint(t, >=, 200);
    g_assert_cmpuint(t, <, 300);
    rwr(s, 2, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    wait_not_busy(s, 2);
    g_assert_cmphex(rrd(s, 2, SPYRE_RING_EXEC_TIME), ==, 0);

    /* An injected hang holds its ring from the moment it hangs. */
    wr(s, SPYRE_REG_FAULT_HANG, 1);
    c = cmd_nop(42, 0);
    ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_EXEC_SEQNO), ==, 42);
    t = rrd(s, 1, SPYRE_RING_EXEC_TIME);
    g_assert_cmphex(t, ==, SPYRE_RING_EXEC_RUNNING);
    qtest_clock_step(s->qts, 2000 * ms);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_EXEC_TIME), ==,
                    SPYRE_RING_EXEC_RUNNING | 2000);
    rwr(s, 1, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_EXEC_TIME), ==, 0);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_EXEC_SEQNO), ==, 0);
    spyre_stop(s);
}

/* ---- Time slicing (1.5) ---- */

#define ISA_LXLD        0x08
#define ISA_LXST        0x09
#define TS_OUT          0x40000     /* launch n writes its rows at + n * 0x1000 */
#define TS_CORES        2
#define TS_QUANTUM_MS   10          /* timeslice-ms default */
/* One switch of a prog_lx_sum launch: 2048 + save and restore of one stick per core. */
#define TS_SWITCH_CYCLES \
    (2048 + 2 * ((TS_CORES * 128 * 1500 + 204800 - 1) / 204800))

/*
 * A long computation kept in scratchpad: LX[0] of each core accumulates
 * i + args[1] + core for i = 0 .. args[2] - 1, then goes to device memory
 * at args[0] + core * 128: n (n - 1) / 2 + n (args[1] + core).
 */
static uint32_t prog_lx_sum(Prog *p)
{
    memset(p, 0, sizeof(*p));
    isa(p, ISA_ARG, 0, 14, 0, 0, 0, 0, 0, 1);
    isa(p, ISA_ALU, 0, 15, 14, 1, 0, ISA_ALU_ADD, 0, 0);   /* r15 = a1 + core */
    isa(p, ISA_ARG, 0, 16, 0, 0, 0, 0, 0, 2);
    isa_li(p, 3, 0);
    isa(p, ISA_LOOP, 0, 13, 16, 0, 0, 0, 0, 0);
    isa(p, ISA_LXLD, 0, 12, 3, 0, 0, 0, 0, 0);
    isa(p, ISA_ALU, 0, 12, 12, 13, 0, ISA_ALU_ADD, 0, 0);
    isa(p, ISA_ALU, 0, 12, 12, 15, 0, ISA_ALU_ADD, 0, 0);
    isa(p, ISA_LXST, 0, 0, 3, 12, 0, 0, 0, 0);
    isa(p, ISA_ENDLOOP, 0, 0, 0, 0, 0, 0, 0, 0);
    isa(p, ISA_ARG, 0, 5, 0, 0, 0, 0, 0, 0);
    isa(p, ISA_ALU, 0, 6, 1, 0, 0, ISA_ALU_MUL, 0, 128);
    isa(p, ISA_ALU, 0, 5, 5, 6, 0, ISA_ALU_ADD, 0, 0);
    isa_li(p, 7, 128);
    isa(p, ISA_STORE, 0, 3, 5, 7, 0, 0, 0, 0);
    isa(p, ISA_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
    return isa_finish(p);
}

/* Queue prog_lx_sum on ring n with add and iters; returns its entry. */
static uint32_t ts_launch(Spyre *s, int n, uint64_t seqno, uint64_t add,
                          uint64_t iters)
{
    const uint64_t out = TS_OUT + n * 0x1000;
    const uint64_t args[3] = { out, add, iters };
    const struct spyre_hw_launch_window win = { out, TS_CORES * 128 };
    Prog p;
    uint32_t size = prog_lx_sum(&p);
    struct spyre_hw_cmd c;
    uint32_t idx;

    devmem_write(s, 0x8000, p.buf, size);
    devmem_write(s, out, "\xff", 1);
    c = cmd_launch(seqno, SPYRE_CMD_F_IRQ, 0x8000, size,
                   launch_desc(s, TS_CORES, 3, args, 1, &win), 0);
    idx = ring_queue(s, n, &c);
    rwr(s, n, SPYRE_RING_TAIL, s->ring[n].tail);
    return idx;
}

/* Ring n's prog_lx_sum launch wrote its sums. */
static void ts_check(Spyre *s, int n, uint64_t add, uint64_t iters)
{
    uint64_t got[TS_CORES * 16];
    int c;

    devmem_read(s, TS_OUT + n * 0x1000, got, sizeof(got));
    for (c = 0; c < TS_CORES; c++) {
        g_assert_cmpuint(got[c * 16], ==,
                         iters * (iters - 1) / 2 + iters * (add + c));
    }
}

/* Until ring n's command completed: its completion entry. */
static struct spyre_hw_cpl ts_wait(Spyre *s, int n, uint32_t idx)
{
    double t0 = now_ms();

    while (rrd(s, n, SPYRE_RING_HEAD) == idx) {
        g_assert_cmpfloat(now_ms() - t0, <, 60000);
        qtest_clock_step(s->qts, 100 * 1000);
        g_usleep(200);
    }
    return ring_cpl(s, n, idx);
}

/* Until ring n holds the engine, stepping the virtual clock by the quantum. */
static uint32_t ts_wait_running(Spyre *s, int n)
{
    double t0 = now_ms();
    uint32_t t;

    while (!((t = rrd(s, n, SPYRE_RING_EXEC_TIME)) & SPYRE_RING_EXEC_RUNNING)) {
        g_assert_cmpfloat(now_ms() - t0, <, 10000);
        qtest_clock_step(s->qts, TS_QUANTUM_MS * 1000 * 1000);
        g_usleep(500);
    }
    return t;
}

/* Wall milliseconds one prog_lx_sum launch of iters takes alone. */
static double ts_alone(Spyre *s, int n, uint64_t iters, uint64_t *cycles)
{
    double t0 = now_ms();
    uint32_t idx = ts_launch(s, n, 99, 5, iters);
    struct spyre_hw_cpl cpl = ts_wait(s, n, idx);

    g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_OK);
    ts_check(s, n, 5, iters);
    *cycles = cpl.cycles;
    return now_ms() - t0;
}

/*
 * Two rings' long launches share the engine (1.5): after a quantum of
 * virtual time the running one is preempted at an instruction boundary
 * and the other runs; they alternate, both compute the right sums (the
 * scratchpad and registers survived every switch), EXEC_TIME charges each
 * only the time it held the engine and reads a preempted launch's seqno
 * without RUNNING, and each switch costs the modeled cycles.
 */
static void test_timeslice(void)
{
    Spyre *s = spyre_start(",x-engine-threads=2");
    const int64_t ms = 1000 * 1000;
    uint64_t iters = 2000000, alone_cycles, sw0, swc0, sw, swc;
    int64_t v0, v;
    struct spyre_hw_cpl c0, c1;
    uint32_t i0, i1, t, switches_seen = 0;
    double alone;
    int turn;

    g_assert_cmphex(rd(s, SPYRE_REG_CAPS) & SPYRE_CAP_TIMESLICE, ==,
                    SPYRE_CAP_TIMESLICE);
    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);
    /* Long enough to see several switches: >= 1 s of host time alone. */
    alone = ts_alone(s, 0, iters, &alone_cycles);
    while (alone < 1000) {
        iters *= 2;
        alone = ts_alone(s, 0, iters, &alone_cycles);
    }
    g_test_message("%" PRIu64 " iterations alone: %.0f ms, %" PRIu64
                   " cycles", iters, alone, alone_cycles);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO), ==, 0);

    v0 = qtest_clock_step(s->qts, 1000);
    i0 = ts_launch(s, 0, 10, 1000, iters);
    wait_exec_running(s, 0);
    i1 = ts_launch(s, 1, 11, 2000, iters);
    qtest_clock_step(s->qts, 1000);
    /* Ring 1 waits: consumed, not started. */
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_EXEC_SEQNO), ==, 0);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_EXEC_TIME), ==, 0);

    /* Alternate a few times, each ring preempted while the other runs. */
    for (turn = 0; turn < 4; turn++) {
        int on = (turn + 1) % 2, off = turn % 2;

        t = ts_wait_running(s, on);
        g_assert_cmpuint(rrd(s, off, SPYRE_RING_HEAD), ==, off ? i1 : i0);
        g_assert_cmpuint(rrd(s, on, SPYRE_RING_HEAD), ==, on ? i1 : i0);
        /* The preempted one: its seqno, the time it held the engine. */
        g_assert_cmphex(rrd(s, off, SPYRE_RING_EXEC_SEQNO), ==, 10 + off);
        t = rrd(s, off, SPYRE_RING_EXEC_TIME);
        g_assert_cmphex(t & SPYRE_RING_EXEC_RUNNING, ==, 0);
        g_assert_cmpuint(t & SPYRE_RING_EXEC_MS_MASK, >=, TS_QUANTUM_MS);
        g_assert_cmphex(rrd(s, off, SPYRE_RING_STATUS) & SPYRE_RING_STATUS_BUSY,
                        ==, SPYRE_RING_STATUS_BUSY);
        switches_seen++;
    }
    /*
     * Charged only while held: the virtual time since it began less ring
     * 1's two slices (a quantum at least each).
     */
    v = qtest_clock_step(s->qts, 1000);
    t = rrd(s, 0, SPYRE_RING_EXEC_TIME) & SPYRE_RING_EXEC_MS_MASK;
    g_test_message("ring 0 held the engine %u ms of %" PRId64 " ms", t,
                   (v - v0) / ms);
    g_assert_cmpint(t, <=, (v - v0) / ms - 2 * TS_QUANTUM_MS);
    g_assert_cmpuint(t, >=, 2 * TS_QUANTUM_MS);

    c0 = ts_wait(s, 0, i0);
    c1 = ts_wait(s, 1, i1);
    g_assert_cmpuint(c0.status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(c1.status, ==, SPYRE_STATUS_OK);
    ts_check(s, 0, 1000, iters);
    ts_check(s, 1, 2000, iters);
    sw = rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO);
    swc = rd64(s, SPYRE_REG_TELE_ENG_SWITCH_CYCLES_LO);
    g_test_message("%" PRIu64 " switches, %" PRIu64 " cycles", sw, swc);
    g_assert_cmpuint(sw, >=, switches_seen);
    /* Each costs the fixed part, plus the sticks written if any. */
    g_assert_cmpuint(swc, >=, sw * 2048);
    g_assert_cmpuint(swc, <=, sw * TS_SWITCH_CYCLES);
    /* The switches are charged to the launches' cycles, nothing else. */
    g_assert_cmpuint(c0.cycles + c1.cycles, ==, 2 * alone_cycles + swc);

    /* A launch alone again: no switch, no cost. */
    sw0 = sw, swc0 = swc;
    ts_alone(s, 1, iters / 4, &alone_cycles);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO), ==, sw0);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_SWITCH_CYCLES_LO), ==, swc0);
    spyre_stop(s);
}

/*
 * timeslice=off: today's behaviour, the second ring's launch waits for the
 * first one's end however long it runs; CAP_TIMESLICE reads 0.
 */
static void test_timeslice_off(void)
{
    Spyre *s = spyre_start(",x-engine-threads=2,timeslice=off");
    uint64_t iters = 2000000, cycles;
    struct spyre_hw_cpl c0, c1;
    uint32_t i0, i1;
    int k;

    g_assert_cmphex(rd(s, SPYRE_REG_CAPS) & SPYRE_CAP_TIMESLICE, ==, 0);
    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);
    while (ts_alone(s, 0, iters, &cycles) < 1000) {
        iters *= 2;
    }
    i0 = ts_launch(s, 0, 10, 1000, iters);
    wait_exec_running(s, 0);
    i1 = ts_launch(s, 1, 11, 2000, iters);
    for (k = 0; k < 20; k++) {
        qtest_clock_step(s->qts, TS_QUANTUM_MS * 1000 * 1000);
        g_usleep(5000);
        g_assert_cmphex(rrd(s, 1, SPYRE_RING_EXEC_TIME), ==, 0);
        g_assert_cmphex(rrd(s, 1, SPYRE_RING_EXEC_SEQNO), ==, 0);
        if (rrd(s, 0, SPYRE_RING_HEAD) != i0) {
            break;
        }
        g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_TIME) &
                        SPYRE_RING_EXEC_RUNNING, ==, SPYRE_RING_EXEC_RUNNING);
    }
    c0 = ts_wait(s, 0, i0);
    c1 = ts_wait(s, 1, i1);
    g_assert_cmpuint(c0.status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(c1.status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(c0.cycles, ==, cycles);
    g_assert_cmpuint(c1.cycles, ==, cycles);
    ts_check(s, 0, 1000, iters);
    ts_check(s, 1, 2000, iters);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO), ==, 0);
    spyre_stop(s);
}

/*
 * The preempted launch's ring is aborted: BUSY drops at once (it holds no
 * engine), nothing is written for it, its saved context is released, and
 * the other ring's launch completes correctly; then a register reset with
 * a launch preempted, and launches on every ring contending afterwards
 * (every context was given back).
 */
static void test_timeslice_abort(void)
{
    Spyre *s = spyre_start(",x-engine-threads=2");
    uint64_t iters = 1000000, cycles, switches, switch_cycles;
    struct spyre_hw_cpl c1;
    uint32_t i0, i1, idx[NRINGS];
    uint16_t devctl;
    int n;

    for (n = 0; n < NRINGS; n++) {
        ring_setup(s, n, 8);
    }
    while (ts_alone(s, 0, iters, &cycles) < 500) {
        iters *= 2;
    }
    g_test_message("%" PRIu64 " iterations", iters);
    i0 = ts_launch(s, 0, 10, 1000, iters);
    wait_exec_running(s, 0);
    i1 = ts_launch(s, 1, 11, 2000, iters);
    ts_wait_running(s, 1);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_SEQNO), ==, 10);
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_TIME), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_SEQNO), ==, 0);
    c1 = ts_wait(s, 1, i1);
    g_assert_cmpuint(c1.status, ==, SPYRE_STATUS_OK);
    ts_check(s, 1, 2000, iters);
    assert_no_cpl(s, 0, i0);

    /*
     * A register reset with one launch preempted and one running. The
     * preempted one was switched away from: that switch counts though the
     * launch never completes.
     */
    ring_setup(s, 0, 8);
    i0 = ts_launch(s, 0, 20, 1000, iters);
    wait_exec_running(s, 0);
    switches = rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO);
    switch_cycles = rd64(s, SPYRE_REG_TELE_ENG_SWITCH_CYCLES_LO);
    i1 = ts_launch(s, 1, 21, 2000, iters);
    ts_wait_running(s, 1);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    wait_ready(s);
    assert_no_cpl(s, 0, i0);
    for (n = 0; n < 5000 &&
         rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO) == switches; n++) {
        g_usleep(1000);
    }
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO), >, switches);
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_SWITCH_CYCLES_LO), >,
                     switch_cycles);

    /* The same with a function-level reset (it waits for the running one). */
    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);
    i0 = ts_launch(s, 0, 40, 1000, iters);
    wait_exec_running(s, 0);
    i1 = ts_launch(s, 1, 41, 2000, iters);
    ts_wait_running(s, 1);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_SEQNO), ==, 40);
    devctl = qpci_find_capability(s->dev, PCI_CAP_ID_EXP, 0);
    qpci_config_writew(s->dev, devctl + PCI_EXP_DEVCTL,
                       qpci_config_readw(s->dev, devctl + PCI_EXP_DEVCTL) |
                       PCI_EXP_DEVCTL_BCR_FLR);
    qpci_device_enable(s->dev);
    s->bar0 = qpci_iomap(s->dev, SPYRE_BAR_REGS, NULL);
    s->bar2 = qpci_iomap(s->dev, SPYRE_BAR_DEVMEM, NULL);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);
    assert_no_cpl(s, 0, i0);
    assert_no_cpl(s, 1, i1);

    /*
     * Every ring contends now, which needs every engine context (one
     * kept by a dropped launch would be missing): all complete exactly.
     */
    for (n = 0; n < NRINGS; n++) {
        ring_setup(s, n, 8);
        idx[n] = ts_launch(s, n, 30 + n, 100 * n, iters);
    }
    for (n = 0; n < NRINGS; n++) {
        c1 = ts_wait(s, n, idx[n]);
        g_assert_cmpuint(c1.status, ==, SPYRE_STATUS_OK);
        ts_check(s, n, 100 * n, iters);
        g_test_message("ring %d done, %" PRIu64 " switches", n,
                       rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO));
    }
    g_assert_cmpuint(rd64(s, SPYRE_REG_TELE_ENG_SWITCHES_LO), >, 0);
    spyre_stop(s);
}

/* Hot-unplug with one launch preempted and one running. */
static void test_timeslice_unplug(void)
{
    Spyre *s = spyre_start_on("pc", ",x-engine-threads=2");
    uint64_t iters = 1000000, cycles;

    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);
    while (ts_alone(s, 0, iters, &cycles) < 500) {
        iters *= 2;
    }
    ts_launch(s, 0, 10, 1000, iters * 8);
    wait_exec_running(s, 0);
    ts_launch(s, 1, 11, 2000, iters * 8);
    ts_wait_running(s, 1);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_EXEC_SEQNO), ==, 10);
    qpci_unplug_acpi_device_test(s->qts, "spyre0", SLOT);
    qtest_qmp_assert_success(s->qts, "{ 'execute': 'query-status' }");
    g_assert(!qpci_device_find(s->bus, QPCI_DEVFN(SLOT, 0)));
    spyre_stop(s);
}

/* CTRL.ABORT with large copies running and queued behind a fence. */
static void test_abort_copy(void)
{
    Spyre *s = spyre_start(NULL);
    uint64_t fence = zalloc(s, 8);
    struct spyre_hw_cmd c;
    uint32_t first = 0, i;
    double t0, ms;

    ring_setup(s, 0, 16);
    ring_setup(s, 1, 8);
    for (i = 0; i < 14; i++) {
        c = cmd_dma(i, 0, 0, 0, DEVMEM / 2, 0, DEVMEM / 2);
        if (!i) {
            first = ring_queue(s, 0, &c);
        } else {
            ring_queue(s, 0, &c);
        }
    }
    c = cmd_fence(14, fence, 0x77);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    /* The copies run on the worker: the ring shows BUSY. */
    for (i = 0; i < 1000; i++) {
        if (rrd(s, 0, SPYRE_RING_STATUS) & SPYRE_RING_STATUS_BUSY) {
            break;
        }
    }
    g_assert_cmpuint(i, <, 1000);
    t0 = now_ms();
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    ms = wait_not_busy(s, 0);
    g_test_message("BUSY clear %.1f ms after ABORT (copy)", now_ms() - t0);
    g_assert_cmpfloat(ms, <, 1000);
    qtest_clock_step(s->qts, 1000);
    g_usleep(20 * 1000);
    qtest_clock_step(s->qts, 1000);
    /* Whatever had completed before the abort, nothing after it. */
    i = rrd(s, 0, SPYRE_RING_COMPLETED);
    g_test_message("%u of 14 copies completed before the ABORT", i);
    g_assert_cmpuint(i, <, 14);
    for (; i < 15; i++) {
        assert_no_cpl(s, 0, first + i);
    }
    g_assert_cmphex(qtest_readq(s->qts, fence), ==, 0);
    c = cmd_nop(20, 0);
    g_assert_cmpuint(submit(s, 1, &c).status, ==, SPYRE_STATUS_OK);
    ring_setup(s, 0, 8);
    assert_alive(s, 0);
    spyre_stop(s);
}

/* FAULT_HANG without flags, ON_RING, STICKY and WEDGE (section 10). */
static void test_fault_hang(void)
{
    Spyre *s = spyre_start(",x-fault-inject=on");
    struct spyre_hw_cmd c;
    uint16_t devctl;
    uint32_t st;

    g_assert_cmphex(rd(s, SPYRE_REG_CAPS) & SPYRE_CAP_FAULT_INJECT, ==,
                    SPYRE_CAP_FAULT_INJECT);
    ring_setup(s, 0, 8);
    ring_setup(s, 1, 8);

    /* Plain: the command hangs (HEAD on it, BUSY) until an ABORT. */
    wr(s, SPYRE_REG_FAULT_HANG, 1 | 0x100000);      /* reserved bit */
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 1);
    c = cmd_nop(1, SPYRE_CMD_F_IRQ);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 0);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED | SPYRE_RING_STATUS_BUSY);
    c = cmd_nop(2, 0);
    g_assert_cmpuint(submit(s, 1, &c).status, ==, SPYRE_STATUS_OK);
    assert_no_cpl(s, 0, 0);
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    assert_no_cpl(s, 0, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, 0);
    ring_setup(s, 0, 8);
    assert_alive(s, 0);

    /* ON_RING: ring 0's commands run, the first of ring 1 hangs. */
    wr(s, SPYRE_REG_FAULT_HANG, 1 | SPYRE_HANG_RING(1));
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 1 | SPYRE_HANG_RING(1));
    c = cmd_nop(5, 0);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 1 | SPYRE_HANG_RING(1));
    c = cmd_nop(6, 0);
    ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 0);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED | SPYRE_RING_STATUS_BUSY);
    rwr(s, 1, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_STATUS), ==, 0);
    ring_setup(s, 1, 8);
    assert_alive(s, 1);

    /* STICKY, count 2: ABORT cannot end it, a register RESET can. */
    wr(s, SPYRE_REG_FAULT_HANG, 2 | SPYRE_HANG_STICKY);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 2 | SPYRE_HANG_STICKY);
    c = cmd_nop(3, 0);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 1 | SPYRE_HANG_STICKY);
    c = cmd_nop(4, 0);
    ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 0);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED | SPYRE_RING_STATUS_BUSY);
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    g_usleep(20 * 1000);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, SPYRE_RING_STATUS_BUSY);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, 0);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_STATUS), ==, 0);
    ring_setup(s, 0, 8);
    assert_alive(s, 0);

    /* WEDGE: a register RESET leaves the card RESETTING; FLR ends it. */
    wr(s, SPYRE_REG_FAULT_HANG, 1 | SPYRE_HANG_WEDGE);
    c = cmd_nop(5, 0);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    qtest_clock_step(s->qts, 1000);
    rwr(s, 0, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==, SPYRE_RING_STATUS_BUSY);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    g_usleep(50 * 1000);
    qtest_clock_step(s->qts, 1000);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_RESETTING);
    /* Ring registers read 0 and ignore writes; RESET again changes nothing */
    rwr(s, 0, SPYRE_RING_SIZE, 8);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_SIZE), ==, 0);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_RESETTING);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 3);
    devctl = qpci_find_capability(s->dev, PCI_CAP_ID_EXP, 0);
    g_assert_cmpuint(devctl, !=, 0);
    g_assert(qpci_config_readl(s->dev, devctl + PCI_EXP_DEVCAP) &
             PCI_EXP_DEVCAP_FLR);
    qpci_config_writew(s->dev, devctl + PCI_EXP_DEVCTL,
                       qpci_config_readw(s->dev, devctl + PCI_EXP_DEVCTL) |
                       PCI_EXP_DEVCTL_BCR_FLR);
    qpci_device_enable(s->dev);
    s->bar0 = qpci_iomap(s->dev, SPYRE_BAR_REGS, NULL);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_RESETS), ==, 4);
    ring_setup(s, 0, 8);
    assert_alive(s, 0);

    /* WEDGE again, cleared by a system reset this time. */
    wr(s, SPYRE_REG_FAULT_HANG, 1 | SPYRE_HANG_WEDGE);
    c = cmd_nop(6, 0);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    qtest_clock_step(s->qts, 1000);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_RESETTING);
    qtest_qmp_assert_success(s->qts, "{ 'execute': 'system_reset' }");
    qtest_qmp_eventwait(s->qts, "RESET");
    qpci_device_enable(s->dev);
    s->bar0 = qpci_iomap(s->dev, SPYRE_BAR_REGS, NULL);
    /*
     * The system reset cleared the wedge at once: the first read is READY, not RESETTING
     * (judged on the state, not on a wall-clock bound that a loaded host can miss).
     */
    st = rd(s, SPYRE_REG_STATUS);
    g_assert_cmphex(st & SPYRE_STATUS_RESETTING, ==, 0);
    g_assert(st & SPYRE_STATUS_READY);
    ring_setup(s, 0, 8);
    assert_alive(s, 0);
    spyre_stop(s);
}

/* Without x-fault-inject, the fault registers read 0 and do nothing. */
static void test_fault_inject_off(void)
{
    Spyre *s = spyre_start(NULL);
    struct spyre_hw_cmd c;

    g_assert_cmphex(rd(s, SPYRE_REG_CAPS) & SPYRE_CAP_FAULT_INJECT, ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_CAPS) & SPYRE_CAP_RING_ABORT, ==,
                    SPYRE_CAP_RING_ABORT);
    wr(s, SPYRE_REG_FAULT_INJECT, 3);
    wr(s, SPYRE_REG_FAULT_HANG, 3 | SPYRE_HANG_STICKY);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_INJECT), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_FAULT_HANG), ==, 0);
    ring_setup(s, 0, 8);
    c = cmd_nop(1, 0);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
    spyre_stop(s);
}

/*
 * Issue 6 item 15: causes pending and enabled in INTR_MASK when MSI-X gets
 * enabled are sent (here to the PBA of the masked vector, then on unmask).
 */
static void test_msix_pending_on_enable(void)
{
    Spyre *s = spyre_start(NULL);
    uint64_t msi = zalloc(s, 64);
    struct spyre_hw_cmd c;

    ring_setup(s, 0, 8);
    wr(s, SPYRE_REG_INTR_MASK, SPYRE_INTR_RING(0) | SPYRE_INTR_ERROR);
    c = cmd_nop(1, SPYRE_CMD_F_IRQ);
    submit(s, 0, &c);
    c = cmd_nop(2, 0);
    c.hdr.opcode = 0x55;
    submit(s, 0, &c);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==,
                    SPYRE_INTR_RING(0) | SPYRE_INTR_ERROR);

    qpci_msix_enable(s->dev);
    g_assert(qpci_msix_pending(s->dev, 0));
    g_assert(qpci_msix_pending(s->dev, NRINGS));
    g_assert(!qpci_msix_pending(s->dev, 1));
    msix_entry(s, 0, msi, 0x100, false);
    msix_entry(s, NRINGS, msi + 16, 0x1ee, false);
    g_assert_cmphex(qtest_readl(s->qts, msi), ==, 0x100);
    g_assert_cmphex(qtest_readl(s->qts, msi + 16), ==, 0x1ee);
    g_assert(!qpci_msix_pending(s->dev, 0));
    spyre_stop(s);
}

/*
 * Issue 6 item 15: a C++ exception on one of the engine's pool threads (a
 * test hook of the engine) ends the launch with ERR_PROGRAM / NO_MEMORY
 * instead of std::terminate; QEMU lives on.
 */
static void test_launch_engine_exception(void)
{
    Spyre *s;
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl cpl;
    struct spyre_hw_launch_result r;
    const struct spyre_hw_launch_window win[2] = {
        { L_IN, 2 * L_ROWS * 128 }, { L_OUT, L_ROWS * 128 },
    };
    const uint64_t args[3] = { L_IN, L_IN + L_ROWS * 128, L_OUT };
    uint64_t result;
    Prog p;
    uint32_t size;

    g_setenv("SPYRE_ENGINE_TEST_THROW_CORE", "3", true);
    s = spyre_start(",x-engine-threads=4");
    g_unsetenv("SPYRE_ENGINE_TEST_THROW_CORE");
    ring_setup(s, 0, 8);
    size = prog_add_rows(&p);
    devmem_write(s, L_PROG, p.buf, size);
    result = result_buf(s);
    c = cmd_launch(1, 0, L_PROG, size, launch_desc(s, L_ROWS, 3, args, 2, win),
                   result);
    cpl = submit(s, 0, &c);
    g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_ERR_PROGRAM);
    g_assert_cmpuint(cpl.detail, ==, ERR_NO_MEMORY);
    read_result(s, result, &r);
    g_assert_cmpuint(r.error, ==, ERR_NO_MEMORY);
    g_assert(strstr(r.message, "test hook"));
    assert_alive(s, 0);
    spyre_stop(s);
}

/* ---- MMU (hardware.md section 15) ---- */

#define MMU_VA          0x4000000000ull     /* 256 GiB: far beyond devmem */
#define MMU_L1_SHIFT    30
#define MMU_L2_SHIFT    21

/* Context table in guest memory, programmed into MMU_CTX_BASE. */
static uint64_t mmu_init(Spyre *s)
{
    uint64_t table = zalloc(s, PAGE);

    wr(s, SPYRE_REG_MMU_CTX_BASE_LO, (uint32_t)table);
    wr(s, SPYRE_REG_MMU_CTX_BASE_HI, table >> 32);
    return table;
}

/* A new, empty context: its level-1 table. */
static uint64_t mmu_ctx(Spyre *s, uint64_t table, unsigned ctx)
{
    uint64_t l1 = zalloc(s, PAGE);

    qtest_writeq(s->qts, table + ctx * 8, l1 | SPYRE_MMU_VALID);
    return l1;
}

/* Address of the PTE of va, creating level-2/3 tables on the way. */
static uint64_t mmu_pte_addr(Spyre *s, uint64_t l1, uint64_t va)
{
    uint64_t t = l1;
    int shift;

    for (shift = MMU_L1_SHIFT; shift >= MMU_L2_SHIFT; shift -= 9) {
        uint64_t e = t + ((va >> shift) & 511) * 8;
        uint64_t next = qtest_readq(s->qts, e);

        if (!next) {
            next = zalloc(s, PAGE) | SPYRE_MMU_VALID;
            qtest_writeq(s->qts, e, next);
        }
        t = next & SPYRE_MMU_ADDR_MASK;
    }
    return t + ((va >> SPYRE_MMU_PAGE_SHIFT) & 511) * 8;
}

static void mmu_map(Spyre *s, uint64_t l1, uint64_t va, uint64_t pte)
{
    qtest_writeq(s->qts, mmu_pte_addr(s, l1, va), pte);
}

static struct spyre_hw_cmd in_ctx(struct spyre_hw_cmd c, unsigned ctx)
{
    c.hdr.ctx = ctx;
    return c;
}

/* The completion of a faulting command and the ring's latched fault. */
static void expect_fault(Spyre *s, int n, const struct spyre_hw_cmd *c,
                         uint64_t va, uint32_t info, uint32_t *nfaults)
{
    struct spyre_hw_cpl p = submit(s, n, c);

    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_ERR_MMU_FAULT);
    g_assert_cmphex(p.detail, ==, info | SPYRE_MMU_FAULT_VALID);
    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==,
                     SPYRE_STATUS_ERR_MMU_FAULT);
    g_assert_cmphex(rrd(s, n, SPYRE_RING_FAULT_INFO), ==,
                    info | SPYRE_MMU_FAULT_VALID);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(n, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    va);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, ++*nfaults);
    /* Clear for the next case (bit 31 written). */
    rwr(s, n, SPYRE_RING_FAULT_INFO, SPYRE_MMU_FAULT_VALID);
}

static uint32_t fault_info(unsigned ctx, unsigned access)
{
    return ctx | access << SPYRE_MMU_FAULT_ACCESS_SHIFT;
}

/*
 * DMA in a context: host -> VA, VA -> host and VA -> VA across
 * non-contiguous device pages, a 2D copy, a HOST PTE page, two contexts
 * with the same VA on different pages, a copy large enough for the DMA
 * worker, and context 0 still physical.
 */
static void test_mmu_dma(void)
{
    Spyre *s = spyre_start(NULL);
    /* VA pages 0..2 -> device pages 5, 2, 9; VA2 pages 0..2 -> 12, 11, 14. */
    static const uint64_t pg[3] = { 5, 2, 9 }, pg2[3] = { 12, 11, 14 };
    const uint64_t va2 = MMU_VA + 0x40000000ull * 3 + 0x7000;
    const size_t len = 3 * PAGE - 300;
    uint64_t table, l1, l1b, host_page;
    HostBuf *src = hostbuf_new(s, 3, true);
    HostBuf *dst = hostbuf_new(s, 3, true);
    g_autofree uint8_t *want = g_malloc(len);
    g_autofree uint8_t *got = g_malloc0(len);
    g_autofree uint8_t *big = NULL;
    uint8_t page[PAGE], other[PAGE];
    struct spyre_hw_cmd c;
    size_t i, off;

    ring_setup(s, 0, 16);
    g_assert_cmphex(rd(s, SPYRE_REG_CAPS) & SPYRE_CAP_MMU, ==, SPYRE_CAP_MMU);
    table = mmu_init(s);
    g_assert_cmphex(rd64(s, SPYRE_REG_MMU_CTX_BASE_LO), ==, table);
    l1 = mmu_ctx(s, table, 1);
    for (i = 0; i < 3; i++) {
        mmu_map(s, l1, MMU_VA + i * PAGE,
                pg[i] * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
        mmu_map(s, l1, va2 + i * PAGE,
                pg2[i] * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    }

    /* host -> VA + 100: lands on device pages 5, 2, 9 */
    fill(want, len, 7);
    hostbuf_io(s, src, 0, want, len, true);
    c = in_ctx(cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 100,
                       len), 1);
    check_dma_ok(submit(s, 0, &c), 1);
    for (off = 0; off < len;) {
        uint64_t va = 100 + off;
        size_t n = MIN(len - off, PAGE - va % PAGE);

        devmem_read(s, pg[va / PAGE] * PAGE + va % PAGE, got, n);
        g_assert(memcmp(got, want + off, n) == 0);
        off += n;
    }
    /* VA -> host */
    c = in_ctx(cmd_dma(2, SPYRE_CMD_F_DST_HOST, MMU_VA, 100, dst->dir, 0,
                       len), 1);
    check_dma_ok(submit(s, 0, &c), 2);
    hostbuf_io(s, dst, 0, got, len, false);
    g_assert(memcmp(got, want, len) == 0);
    /* VA -> VA2 (device pages 12, 11, 14), then VA2 -> host */
    c = in_ctx(cmd_dma(3, 0, MMU_VA, 100, va2, 50, len), 1);
    check_dma_ok(submit(s, 0, &c), 3);
    devmem_read(s, pg2[0] * PAGE + 50, got, PAGE - 50);
    g_assert(memcmp(got, want, PAGE - 50) == 0);
    memset(got, 0, len);
    hostbuf_io(s, dst, 0, got, len, true);
    c = in_ctx(cmd_dma(4, SPYRE_CMD_F_DST_HOST, va2, 50, dst->dir, 0, len), 1);
    check_dma_ok(submit(s, 0, &c), 4);
    hostbuf_io(s, dst, 0, got, len, false);
    g_assert(memcmp(got, want, len) == 0);

    /* 2D: 3 rows of 64 bytes, one per VA page, to host */
    c = in_ctx(cmd_dma2d(5, SPYRE_CMD_F_DST_HOST, MMU_VA, 200, dst->dir, 0,
                         64, 3, PAGE, 64), 1);
    check_dma_ok(submit(s, 0, &c), 5);
    hostbuf_io(s, dst, 0, got, 3 * 64, false);
    for (i = 0; i < 3; i++) {
        g_assert(memcmp(got + i * 64, want + i * PAGE + 100, 64) == 0);
    }

    /* A HOST PTE: VA page 3 is a host page; DMA reaches it both ways. */
    host_page = zalloc(s, PAGE);
    mmu_map(s, l1, MMU_VA + 3 * PAGE,
            host_page | SPYRE_MMU_HOST | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    wr(s, SPYRE_REG_MMU_INVALIDATE, 1);
    fill(page, PAGE, 9);
    hostbuf_io(s, src, 0, page, PAGE, true);
    c = in_ctx(cmd_dma(6, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA,
                       3 * PAGE, PAGE), 1);
    check_dma_ok(submit(s, 0, &c), 6);
    qtest_memread(s->qts, host_page, other, PAGE);
    g_assert(memcmp(page, other, PAGE) == 0);
    /* device page 9 (VA page 2) -> host page, across the VA boundary */
    c = in_ctx(cmd_dma(7, 0, MMU_VA, 2 * PAGE + 1000, MMU_VA,
                       3 * PAGE + 1000, 200), 1);
    check_dma_ok(submit(s, 0, &c), 7);
    devmem_read(s, pg[2] * PAGE + 1000, got, 200);
    qtest_memread(s->qts, host_page + 1000, other, 200);
    g_assert(memcmp(got, other, 200) == 0);

    /* Context 2: the same VA on device page 20; context 1 untouched. */
    l1b = mmu_ctx(s, table, 2);
    mmu_map(s, l1b, MMU_VA, 20 * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    devmem_read(s, pg[0] * PAGE, other, PAGE);
    fill(page, PAGE, 11);
    hostbuf_io(s, src, 0, page, PAGE, true);
    c = in_ctx(cmd_dma(8, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 0,
                       PAGE), 2);
    check_dma_ok(submit(s, 0, &c), 8);
    devmem_read(s, 20 * PAGE, got, PAGE);
    g_assert(memcmp(got, page, PAGE) == 0);
    devmem_read(s, pg[0] * PAGE, got, PAGE);
    g_assert(memcmp(got, other, PAGE) == 0);

    /* Context 0 is physical: device offset MMU_VA is out of range. */
    c = cmd_dma(9, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 0, 16);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_DEV_RANGE);
    c = cmd_dma(10, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 20 * PAGE, 0, 16);
    check_dma_ok(submit(s, 0, &c), 10);

    /*
     * 2 MiB in context 3 (reversed device pages 1024..1535): the DMA
     * worker copies through the snapshot.
     */
    {
        const size_t n = 512;
        uint64_t l1c = mmu_ctx(s, table, 3);
        HostBuf *hb = hostbuf_new(s, n, false);

        big = g_malloc(n * PAGE);
        for (i = 0; i < n; i++) {
            mmu_map(s, l1c, MMU_VA + i * PAGE,
                    (1535 - i) * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
        }
        fill(big, n * PAGE, 13);
        hostbuf_io(s, hb, 0, big, n * PAGE, true);
        c = in_ctx(cmd_dma(11, SPYRE_CMD_F_SRC_HOST, hb->dir, 0, MMU_VA, 0,
                           n * PAGE), 3);
        check_dma_ok(submit(s, 0, &c), 11);
        for (i = 0; i < n; i += 97) {
            devmem_read(s, (1535 - i) * PAGE, got, PAGE);
            g_assert(memcmp(got, big + i * PAGE, PAGE) == 0);
        }
        hostbuf_free(hb);
    }
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_FAULT_INFO), ==, 0);
    hostbuf_free(src);
    hostbuf_free(dst);
    spyre_stop(s);
}

/*
 * Translation faults of DMA: unmapped page (nothing written), write to a
 * read-only page, reserved bits, a page beyond device memory, an invalid
 * context, MMU_CTX_BASE = 0, on the worker too; VA >= 2^39 is a range
 * error; the first fault stays latched until FAULT_INFO is cleared (W1C);
 * unreadable tables are host DMA errors.
 */
/*
 * FAULT_MMU (section 10): the next N translated commands fault at their
 * first translated access; untranslated ones and later ones run.
 */
static void test_mmu_fault_inject(void)
{
    Spyre *s = spyre_start(",x-fault-inject=on");
    HostBuf *src = hostbuf_new(s, 512, false);
    uint8_t page[PAGE], got[PAGE], zero[PAGE] = { 0 };
    uint32_t nfaults = 0;
    uint64_t table, l1;
    struct spyre_hw_cmd c;

    ring_setup(s, 1, 16);
    table = mmu_init(s);
    l1 = mmu_ctx(s, table, 9);
    mmu_map(s, l1, MMU_VA, 40 * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    fill(page, PAGE, 5);
    hostbuf_io(s, src, 0, page, PAGE, true);
    devmem_write(s, 40 * PAGE, zero, PAGE);

    wr(s, SPYRE_REG_FAULT_MMU, 2);
    g_assert_cmpuint(rd(s, SPYRE_REG_FAULT_MMU), ==, 2);
    /* context 0 is not translated: not taken */
    c = cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 44 * PAGE, 0, 64);
    check_dma_ok(submit(s, 1, &c), 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_FAULT_MMU), ==, 2);
    /* host -> VA: only the destination is translated; nothing written */
    c = in_ctx(cmd_dma(2, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 16,
                       PAGE - 16), 9);
    expect_fault(s, 1, &c, MMU_VA + 16, fault_info(9, SPYRE_MMU_FAULT_WRITE),
                 &nfaults);
    devmem_read(s, 40 * PAGE, got, PAGE);
    g_assert(memcmp(got, zero, PAGE) == 0);
    /* VA -> VA: the source's first byte */
    c = in_ctx(cmd_dma(3, 0, MMU_VA, 8, MMU_VA, 2048, 64), 9);
    expect_fault(s, 1, &c, MMU_VA + 8, fault_info(9, SPYRE_MMU_FAULT_READ),
                 &nfaults);
    g_assert_cmpuint(rd(s, SPYRE_REG_FAULT_MMU), ==, 0);
    /* the count is spent: the same copy now works */
    c = in_ctx(cmd_dma(4, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 0,
                       PAGE), 9);
    check_dma_ok(submit(s, 1, &c), 4);
    devmem_read(s, 40 * PAGE, got, PAGE);
    g_assert(memcmp(got, page, PAGE) == 0);
    /* a reset clears it */
    wr(s, SPYRE_REG_FAULT_MMU, 3);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    g_assert_cmpuint(rd(s, SPYRE_REG_FAULT_MMU), ==, 0);
    hostbuf_free(src);
    spyre_stop(s);
}

static void test_mmu_faults(void)
{
    Spyre *s = spyre_start(NULL);
    HostBuf *src = hostbuf_new(s, 512, false);
    uint8_t page[PAGE], before[PAGE], got[PAGE];
    uint64_t table, l1, l1b, pte_ro, va_hole = MMU_VA + 2 * PAGE;
    uint32_t nfaults = 0;
    struct spyre_hw_cmd c, c2;
    struct spyre_hw_cpl p;

    ring_setup(s, 1, 16);
    table = mmu_init(s);
    l1 = mmu_ctx(s, table, 7);
    /* pages 0, 1 mapped writable (device 40, 41), page 2 not, 3 read-only */
    mmu_map(s, l1, MMU_VA, 40 * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    mmu_map(s, l1, MMU_VA + PAGE,
            41 * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    pte_ro = 43 * PAGE | SPYRE_MMU_VALID;
    mmu_map(s, l1, MMU_VA + 3 * PAGE, pte_ro);
    fill(before, PAGE, 1);
    devmem_write(s, 41 * PAGE, before, PAGE);
    fill(page, PAGE, 2);
    hostbuf_io(s, src, 0, page, PAGE, true);

    /* Unmapped page 2: the copy into pages 1..2 writes nothing. */
    c = in_ctx(cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA,
                       PAGE + 512, PAGE), 7);
    expect_fault(s, 1, &c, va_hole, fault_info(7, SPYRE_MMU_FAULT_WRITE),
                 &nfaults);
    devmem_read(s, 41 * PAGE, got, PAGE);
    g_assert(memcmp(got, before, PAGE) == 0);
    /* Reading it */
    c = in_ctx(cmd_dma(2, SPYRE_CMD_F_DST_HOST, MMU_VA, 2 * PAGE + 8,
                       src->dir, 0, 8), 7);
    expect_fault(s, 1, &c, va_hole + 8, fault_info(7, SPYRE_MMU_FAULT_READ),
                 &nfaults);
    /* Read-only page: reads work, writes fault (also from the device). */
    c = in_ctx(cmd_dma(3, SPYRE_CMD_F_DST_HOST, MMU_VA, 3 * PAGE, src->dir,
                       0, 64), 7);
    check_dma_ok(submit(s, 1, &c), 3);
    c = in_ctx(cmd_dma(4, 0, MMU_VA, 0, MMU_VA, 3 * PAGE + 64, 64), 7);
    expect_fault(s, 1, &c, MMU_VA + 3 * PAGE + 64,
                 fault_info(7, SPYRE_MMU_FAULT_WRITE), &nfaults);
    /* 2D: the fault is in row 2 of the destination */
    c = in_ctx(cmd_dma2d(5, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 64,
                         32, 3, 32, PAGE), 7);
    expect_fault(s, 1, &c, va_hole + 64,
                 fault_info(7, SPYRE_MMU_FAULT_WRITE), &nfaults);

    /* The first fault stays latched; writing 0 does not clear it. */
    c = in_ctx(cmd_dma(6, SPYRE_CMD_F_DST_HOST, MMU_VA, 2 * PAGE, src->dir,
                       0, 8), 7);
    c2 = in_ctx(cmd_dma(7, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA,
                        3 * PAGE + 16, 8), 7);
    g_assert_cmpuint(submit(s, 1, &c).status, ==, SPYRE_STATUS_ERR_MMU_FAULT);
    p = submit(s, 1, &c2);
    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_ERR_MMU_FAULT);
    g_assert_cmphex(p.detail, ==, fault_info(7, SPYRE_MMU_FAULT_WRITE) |
                    SPYRE_MMU_FAULT_VALID);
    nfaults += 2;
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, nfaults);
    rwr(s, 1, SPYRE_RING_FAULT_INFO, 0x7fffffff);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_FAULT_INFO), ==,
                    fault_info(7, SPYRE_MMU_FAULT_READ) |
                    SPYRE_MMU_FAULT_VALID);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(1, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    va_hole);
    rwr(s, 1, SPYRE_RING_FAULT_INFO, SPYRE_MMU_FAULT_VALID);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_FAULT_INFO), ==, 0);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(1, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    0);
    /* Other rings latch nothing. */
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_FAULT_INFO), ==, 0);

    /* Reserved bits in a PTE, WRITE in a level-1 entry, page beyond devmem */
    mmu_map(s, l1, MMU_VA + 4 * PAGE, 44 * PAGE | 0x8 | SPYRE_MMU_VALID);
    mmu_map(s, l1, MMU_VA + 5 * PAGE, (uint64_t)DEVMEM | SPYRE_MMU_VALID);
    mmu_map(s, l1, MMU_VA + 0x40000000ull, 45 * PAGE | SPYRE_MMU_VALID);
    qtest_writeq(s->qts, l1 + ((MMU_VA >> MMU_L1_SHIFT) + 1) % 512 * 8,
                 qtest_readq(s->qts, l1 + ((MMU_VA >> MMU_L1_SHIFT) + 1) %
                             512 * 8) | SPYRE_MMU_WRITE);
    wr(s, SPYRE_REG_MMU_INVALIDATE, 7);
    c = in_ctx(cmd_dma(8, SPYRE_CMD_F_DST_HOST, MMU_VA, 4 * PAGE, src->dir,
                       0, 8), 7);
    expect_fault(s, 1, &c, MMU_VA + 4 * PAGE,
                 fault_info(7, SPYRE_MMU_FAULT_READ), &nfaults);
    c = in_ctx(cmd_dma(9, SPYRE_CMD_F_DST_HOST, MMU_VA, 5 * PAGE + 4,
                       src->dir, 0, 8), 7);
    expect_fault(s, 1, &c, MMU_VA + 5 * PAGE + 4,
                 fault_info(7, SPYRE_MMU_FAULT_READ), &nfaults);
    c = in_ctx(cmd_dma(10, SPYRE_CMD_F_DST_HOST, MMU_VA + 0x40000000ull, 0,
                       src->dir, 0, 8), 7);
    expect_fault(s, 1, &c, MMU_VA + 0x40000000ull,
                 fault_info(7, SPYRE_MMU_FAULT_READ), &nfaults);

    /* On the DMA worker (2 MiB): faults at the hole, writes nothing. */
    c = in_ctx(cmd_dma(11, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 0,
                       512 * PAGE), 7);
    expect_fault(s, 1, &c, va_hole, fault_info(7, SPYRE_MMU_FAULT_WRITE),
                 &nfaults);
    devmem_read(s, 41 * PAGE, got, PAGE);
    g_assert(memcmp(got, before, PAGE) == 0);

    /* VA range beyond 2^39: a range error, not a fault. */
    c = in_ctx(cmd_dma(12, SPYRE_CMD_F_SRC_HOST, src->dir, 0,
                       (1ull << SPYRE_MMU_VA_BITS) - 8, 0, 16), 7);
    g_assert_cmpuint(submit(s, 1, &c).status, ==, SPYRE_STATUS_ERR_DEV_RANGE);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_FAULT_INFO), ==, 0);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, nfaults);
    /* ... but the last 16 bytes below 2^39 are a valid (unmapped) range. */
    c = in_ctx(cmd_dma(13, SPYRE_CMD_F_SRC_HOST, src->dir, 0,
                       (1ull << SPYRE_MMU_VA_BITS) - 16, 0, 16), 7);
    expect_fault(s, 1, &c, (1ull << SPYRE_MMU_VA_BITS) - 16,
                 fault_info(7, SPYRE_MMU_FAULT_WRITE), &nfaults);

    /* Invalid context entry (context 9 never set up): every VA faults. */
    c = in_ctx(cmd_dma(14, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0, 0, 8), 9);
    expect_fault(s, 1, &c, 0, fault_info(9, SPYRE_MMU_FAULT_WRITE),
                 &nfaults);
    /* Context entry without VALID */
    l1b = mmu_ctx(s, table, 10);
    mmu_map(s, l1b, 0, 50 * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    qtest_writeq(s->qts, table + 10 * 8, l1b);
    c = in_ctx(cmd_dma(15, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0, 0, 8), 10);
    expect_fault(s, 1, &c, 0, fault_info(10, SPYRE_MMU_FAULT_WRITE),
                 &nfaults);
    /* Made valid and invalidated: works. */
    qtest_writeq(s->qts, table + 10 * 8, l1b | SPYRE_MMU_VALID);
    wr(s, SPYRE_REG_MMU_INVALIDATE, 10);
    c = in_ctx(cmd_dma(16, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0, 0, 8), 10);
    check_dma_ok(submit(s, 1, &c), 16);

    /* MMU_CTX_BASE = 0: every context is invalid. */
    wr(s, SPYRE_REG_MMU_CTX_BASE_LO, 0);
    wr(s, SPYRE_REG_MMU_CTX_BASE_HI, 0);
    c = in_ctx(cmd_dma(17, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0, 0, 8), 10);
    expect_fault(s, 1, &c, 0, fault_info(10, SPYRE_MMU_FAULT_WRITE),
                 &nfaults);
    /* Host-to-host copies and NOPs in a context are untranslated. */
    c = in_ctx(cmd_dma(18, SPYRE_CMD_F_SRC_HOST | SPYRE_CMD_F_DST_HOST,
                       src->dir, 0, src->dir, PAGE, 8), 10);
    check_dma_ok(submit(s, 1, &c), 18);
    c = in_ctx(cmd_nop(19, 0), 255);
    check_dma_ok(submit(s, 1, &c), 19);

    /* A context table outside RAM: host DMA error, no fault. */
    wr(s, SPYRE_REG_MMU_CTX_BASE_LO, 0xfee00000u);
    c = in_ctx(cmd_dma(20, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0, 0, 8), 10);
    g_assert_cmpuint(submit(s, 1, &c).status, ==, SPYRE_STATUS_ERR_HOST_DMA);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_FAULT_INFO), ==, 0);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, nfaults);
    hostbuf_free(src);
    spyre_stop(s);
}

/*
 * A consumed command keeps the translations it started with: a 2 MiB copy
 * (DMA worker) in context 8 still writes its last page to the old device
 * page when the PTE changes and is invalidated after it was consumed; the
 * next copy uses the new page.
 */
static void test_mmu_snapshot_kept(Spyre *s, uint64_t table)
{
    const size_t n = 512;
    const uint64_t last = MMU_VA + (n - 1) * PAGE;
    uint64_t l1 = mmu_ctx(s, table, 8), pte, got;
    HostBuf *hb = hostbuf_new(s, n, false);
    struct spyre_hw_cmd c;
    uint32_t idx;
    size_t i;

    for (i = 0; i < n; i++) {
        mmu_map(s, l1, MMU_VA + i * PAGE,
                (1024 + i) * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    }
    pte = mmu_pte_addr(s, l1, last);
    hostbuf_io(s, hb, (n - 1) * PAGE, &(uint64_t){ 0x5151 }, 8, true);
    c = in_ctx(cmd_dma(100, SPYRE_CMD_F_SRC_HOST, hb->dir, 0, MMU_VA, 0,
                       n * PAGE), 8);
    idx = ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    /* Consumed: running on the worker (BUSY) or already completed. */
    while (!(rrd(s, 0, SPYRE_RING_STATUS) & SPYRE_RING_STATUS_BUSY) &&
           rrd(s, 0, SPYRE_RING_HEAD) == idx) {
        qtest_clock_step(s->qts, 100);
    }
    qtest_writeq(s->qts, pte, 2000 * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    wr(s, SPYRE_REG_MMU_INVALIDATE, SPYRE_MMU_INV_ALL);
    ring_kick_wait(s, 0);
    check_dma_ok(ring_cpl(s, 0, idx), 100);
    devmem_read(s, (1024 + n - 1) * PAGE, &got, 8);
    g_assert_cmphex(got, ==, 0x5151);
    devmem_read(s, 2000 * PAGE, &got, 8);
    g_assert_cmphex(got, ==, 0);
    c = in_ctx(cmd_dma(101, SPYRE_CMD_F_SRC_HOST, hb->dir, (n - 1) * PAGE,
                       last, 0, 8), 8);
    check_dma_ok(submit(s, 0, &c), 101);
    devmem_read(s, 2000 * PAGE, &got, 8);
    g_assert_cmphex(got, ==, 0x5151);
    hostbuf_free(hb);
}

/*
 * The translation cache: a changed PTE is used only after MMU_INVALIDATE
 * of its context (or ALL, or a write of MMU_CTX_BASE); reset clears the
 * base, the fault registers and the cache.
 */
static void test_mmu_invalidate(void)
{
    Spyre *s = spyre_start(NULL);
    HostBuf *src = hostbuf_new(s, 1, false);
    uint64_t table, l1, pte;
    uint32_t nfaults = 0;
    struct spyre_hw_cmd c;
    uint64_t seq = 1;
    uint32_t v;
    int i;

    ring_setup(s, 0, 16);
    table = mmu_init(s);
    l1 = mmu_ctx(s, table, 4);
    mmu_ctx(s, table, 5);
    pte = mmu_pte_addr(s, l1, MMU_VA);

    /*
     * Copy 8 bytes to MMU_VA in context 4 after each change; target[i] is
     * the device page the copy must reach (the stale one until an
     * invalidation), newer[i] a remapped page it must not reach yet.
     */
    for (i = 0; i < 6; i++) {
        static const uint32_t newer[6] = { 0, 61, 0, 62, 0, 0 };
        static const uint32_t target[6] = { 60, 60, 61, 61, 62, 63 };
        uint64_t want = 0x1000 + i, got;

        if (i == 0) {
            qtest_writeq(s->qts, pte, 60 * PAGE | 3);
        } else if (i == 1) {
            qtest_writeq(s->qts, pte, 61 * PAGE | 3);   /* not invalidated */
        } else if (i == 2) {
            wr(s, SPYRE_REG_MMU_INVALIDATE, 4);
        } else if (i == 3) {
            qtest_writeq(s->qts, pte, 62 * PAGE | 3);
            wr(s, SPYRE_REG_MMU_INVALIDATE, 5);         /* another context */
            wr(s, SPYRE_REG_MMU_INVALIDATE, 0);         /* no-op */
        } else if (i == 4) {
            wr(s, SPYRE_REG_MMU_INVALIDATE, SPYRE_MMU_INV_ALL);
        } else {
            qtest_writeq(s->qts, pte, 63 * PAGE | 3);
            wr(s, SPYRE_REG_MMU_CTX_BASE_LO, (uint32_t)table);
        }
        qtest_writeq(s->qts, src->page[0], want);
        c = in_ctx(cmd_dma(seq, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 0,
                           8), 4);
        check_dma_ok(submit(s, 0, &c), seq);
        seq++;
        devmem_read(s, target[i] * PAGE, &got, 8);
        g_assert_cmphex(got, ==, want);
        if (newer[i]) {
            devmem_read(s, newer[i] * PAGE, &got, 8);
            g_assert_cmphex(got, ==, 0);
        }
    }

    /* Unmapped and not invalidated: still mapped; invalidated: faults. */
    qtest_writeq(s->qts, pte, 0);
    c = in_ctx(cmd_dma(seq++, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 0,
                       8), 4);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
    wr(s, SPYRE_REG_MMU_INVALIDATE, 4);
    expect_fault(s, 0, &c, MMU_VA, fault_info(4, SPYRE_MMU_FAULT_WRITE),
                 &nfaults);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_ERR_MMU_FAULT);
    nfaults++;

    /* Reset: base 0, fault registers clear, the counter stays. */
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_FAULT_INFO), !=, 0);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    wait_ready(s);
    g_assert_cmphex(rd64(s, SPYRE_REG_MMU_CTX_BASE_LO), ==, 0);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_FAULT_INFO), ==, 0);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(0, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    0);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, nfaults);
    /* Remapped before the reset: the cache did not survive it. */
    qtest_writeq(s->qts, pte, 64 * PAGE | 3);
    ring_setup(s, 0, 16);
    wr(s, SPYRE_REG_MMU_CTX_BASE_LO, (uint32_t)table | 0xfff);
    wr(s, SPYRE_REG_MMU_CTX_BASE_HI, table >> 32);
    g_assert_cmphex(rd64(s, SPYRE_REG_MMU_CTX_BASE_LO), ==, table);
    v = 0x2222;
    qtest_writeq(s->qts, src->page[0], v);
    c = in_ctx(cmd_dma(seq, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 0, 8),
               4);
    check_dma_ok(submit(s, 0, &c), seq);
    {
        uint64_t got;

        devmem_read(s, 64 * PAGE, &got, 8);
        g_assert_cmphex(got, ==, v);
    }
    hostbuf_free(src);
    test_mmu_snapshot_kept(s, table);
    spyre_stop(s);
}

/*
 * LAUNCH in a context: the program is fetched and the cores load and store
 * through the context's mapping (inputs on two non-adjacent pages); a store
 * to a read-only or HOST page and an unmapped program image fault.
 */
static void test_mmu_launch(void)
{
    Spyre *s = spyre_start(",x-engine-threads=1");
    const uint64_t pv = MMU_VA + 0x100000, xv = MMU_VA;
    const uint64_t zv = MMU_VA + 0x200000, rov = zv + 0x10000;
    const uint64_t hostv = zv + 0x20000;
    const struct spyre_hw_launch_window win[3] = {
        { xv, 2 * PAGE }, { zv, L_ROWS * 128 }, { rov, 0x20000 },
    };
    const uint64_t args[3] = { xv, xv + PAGE, zv };
    float x[L_ROWS * 32], y[L_ROWS * 32], z[L_ROWS * 32], got[L_ROWS * 32];
    uint8_t before[128], after[128];
    uint64_t table, l1, result, host_page;
    uint32_t size, info;
    struct spyre_hw_launch_result r;
    struct spyre_hw_cpl cpl;
    struct spyre_hw_cmd c;
    char want_msg[80];
    Prog p;
    int i;

    ring_setup(s, 0, 16);
    table = mmu_init(s);
    l1 = mmu_ctx(s, table, 6);
    mmu_map(s, l1, pv, 0x80000 | SPYRE_MMU_VALID);          /* read-only */
    mmu_map(s, l1, xv, 0x91000 | SPYRE_MMU_VALID);
    mmu_map(s, l1, xv + PAGE, 0x90000 | SPYRE_MMU_VALID);
    mmu_map(s, l1, zv, 0xa0000 | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    mmu_map(s, l1, rov, 0xb0000 | SPYRE_MMU_VALID);
    host_page = zalloc(s, PAGE);
    mmu_map(s, l1, hostv, host_page | SPYRE_MMU_HOST | SPYRE_MMU_WRITE |
            SPYRE_MMU_VALID);
    for (i = 0; i < L_ROWS * 32; i++) {
        x[i] = (float)(i * 5 - 70) * 0.5f;
        y[i] = (float)(300 - i * 3) * 0.25f;
        z[i] = x[i] + y[i];
    }
    devmem_write(s, 0x91000, x, sizeof(x));
    devmem_write(s, 0x90000, y, sizeof(y));
    size = prog_add_rows(&p);
    devmem_write(s, 0x80000, p.buf, size);
    result = result_buf(s);
    c = in_ctx(cmd_launch(1, 0, pv, size,
                          launch_desc(s, L_ROWS, 3, args, 2, win), result), 6);
    cpl = submit(s, 0, &c);
    g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(cpl.detail, ==, 0);
    devmem_read(s, 0xa0000, got, sizeof(got));
    g_assert(memcmp(got, z, sizeof(z)) == 0);
    read_result(s, result, &r);
    g_assert_cmpuint(r.error, ==, 0);
    g_assert_cmpuint(r.ddr_write_bytes, ==, L_ROWS * 128);

    /* A store to a read-only page: error 23, fault latched with ENGINE. */
    fill(before, sizeof(before), 5);
    devmem_write(s, 0xb0000, before, sizeof(before));
    size = prog_stray_store(&p);
    devmem_write(s, 0x80000, p.buf, size);
    result = result_buf(s);
    c = in_ctx(cmd_launch(2, 0, pv, size,
                          launch_desc(s, 1, 1, &rov, 3, win), result), 6);
    cpl = submit(s, 0, &c);
    info = 6 | SPYRE_MMU_FAULT_WRITE << SPYRE_MMU_FAULT_ACCESS_SHIFT |
           SPYRE_MMU_FAULT_ENGINE | SPYRE_MMU_FAULT_VALID;
    g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_ERR_MMU_FAULT);
    g_assert_cmphex(cpl.detail, ==, info);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_FAULT_INFO), ==, info);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(0, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    rov);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, 1);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_LAUNCH_ERRORS), ==, 1);
    read_result(s, result, &r);
    g_assert_cmpuint(r.error, ==, ERR_MMU_FAULT);
    g_assert_cmpint(r.core, ==, 0);
    g_assert_cmpuint(r.pc, ==, PROG_STRAY_STORE_PC);
    snprintf(want_msg, sizeof(want_msg),
             "context 6: STORE: MMU fault at VA 0x%" PRIx64 " (write",
             rov);
    g_assert(strstr(r.message, want_msg));
    devmem_read(s, 0xb0000, after, sizeof(after));
    g_assert(memcmp(before, after, sizeof(after)) == 0);
    rwr(s, 0, SPYRE_RING_FAULT_INFO, SPYRE_MMU_FAULT_VALID);

    /* A store to a HOST page: cores cannot reach host memory. */
    result = result_buf(s);
    c = in_ctx(cmd_launch(3, 0, pv, size,
                          launch_desc(s, 1, 1, &hostv, 3, win), result), 6);
    cpl = submit(s, 0, &c);
    g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_ERR_MMU_FAULT);
    g_assert_cmphex(cpl.detail, ==, info);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(0, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    hostv);
    g_assert_cmphex(qtest_readq(s->qts, host_page), ==, 0);
    rwr(s, 0, SPYRE_RING_FAULT_INFO, SPYRE_MMU_FAULT_VALID);

    /* An unmapped program image: a fetch fault before the engine runs. */
    result = result_buf(s);
    c = in_ctx(cmd_launch(4, 0, pv + PAGE - 16, size,
                          launch_desc(s, 1, 1, &rov, 3, win), result), 6);
    cpl = submit(s, 0, &c);
    g_assert_cmpuint(cpl.status, ==, SPYRE_STATUS_ERR_MMU_FAULT);
    g_assert_cmphex(cpl.detail, ==, 6 | SPYRE_MMU_FAULT_FETCH <<
                    SPYRE_MMU_FAULT_ACCESS_SHIFT | SPYRE_MMU_FAULT_VALID);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(0, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    pv + PAGE);
    assert_no_result(s, result);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, 3);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_LAUNCH_ERRORS), ==, 2);

    /* Windows are checked against 2^39, not device memory. */
    {
        const struct spyre_hw_launch_window far = {
            (1ull << SPYRE_MMU_VA_BITS) - 128, 256,
        };

        c = in_ctx(cmd_launch(5, 0, pv, size,
                              launch_desc(s, 1, 1, &rov, 1, &far), result), 6);
        g_assert_cmpuint(submit(s, 0, &c).status, ==,
                         SPYRE_STATUS_ERR_DEV_RANGE);
    }
    spyre_stop(s);
}

/*
 * ---- Hostile guest: a bounded translation cache (issue 24, defect 2) ----
 *
 * The card-wide translation cache holds MMU_CACHE_RUNS runs (property
 * x-mmu-cache-runs, hardware.md section 15), one context at most 1/16 of
 * them; a walk reads at most MMU_WALK_TABLES tables. A context that does not
 * fit faults with FAULT_INFO.CACHE.
 */
#define MMU_CACHE_RUNS  (1u << 21)
#define MMU_CTX_RUNS    (MMU_CACHE_RUNS / 16)
#define MMU_WALK_TABLES 4096
#define MMU_RUN_BYTES   64          /* host bytes per cached run, at most */

/* Resident memory of the QEMU process under test, in bytes. */
static uint64_t qemu_rss(Spyre *s)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/status",
                                            (int)qtest_pid(s->qts));
    g_autofree char *text = NULL;
    const char *p;

    g_assert(g_file_get_contents(path, &text, NULL, NULL));
    p = strstr(text, "VmRSS:");
    g_assert(p);
    return g_ascii_strtoull(p + 6, NULL, 10) * 1024;
}

/* Whether the QEMU under test runs AddressSanitizer (its runtime is mapped). */
static bool qemu_has_asan(Spyre *s)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/maps",
                                            (int)qtest_pid(s->qts));
    g_autofree char *text = NULL;

    g_assert(g_file_get_contents(path, &text, NULL, NULL));
    return strstr(text, "libasan") != NULL;
}

/*
 * QEMU's resident memory at most @limit bytes. Not checked when QEMU runs
 * AddressSanitizer (make fuzz-asan, and make check's model-sanitizer run): its
 * quarantine keeps up to 256 MiB of freed memory resident and its shadow and
 * redzones add to every block, so RSS says nothing about the model's own bound
 * there; make check's normal build checks it.
 */
static void assert_rss_within(Spyre *s, uint64_t rss, uint64_t limit)
{
    if (qemu_has_asan(s)) {
        g_test_message("RSS %" PRIu64 " MiB, bound %" PRIu64 " MiB: not "
                       "checked under AddressSanitizer", rss >> 20,
                       limit >> 20);
        return;
    }
    g_assert_cmpuint(rss, <=, limit);
}

/*
 * A shared chain of tables: l1[0 .. n1 - 1] -> one level-2 table,
 * l2[0 .. n2 - 1] -> one level-3 table of 512 copies of pte. With equal
 * physical addresses no two pages merge: n1 * n2 * 512 runs. Returns l1.
 */
static uint64_t mmu_chain(Spyre *s, unsigned n1, unsigned n2, uint64_t pte)
{
    uint64_t l1 = zalloc(s, PAGE), l2 = zalloc(s, PAGE), l3 = zalloc(s, PAGE);
    uint64_t t[512];
    unsigned i;

    for (i = 0; i < 512; i++) {
        t[i] = cpu_to_le64(pte);
    }
    qtest_memwrite(s->qts, l3, t, sizeof(t));
    for (i = 0; i < 512; i++) {
        t[i] = cpu_to_le64(i < n2 ? l3 | SPYRE_MMU_VALID : 0);
    }
    qtest_memwrite(s->qts, l2, t, sizeof(t));
    for (i = 0; i < 512; i++) {
        t[i] = cpu_to_le64(i < n1 ? l2 | SPYRE_MMU_VALID : 0);
    }
    qtest_memwrite(s->qts, l1, t, sizeof(t));
    return l1;
}

/*
 * 255 contexts over one chain of MMU_CTX_RUNS non-merging PTEs, one DMA
 * through each (twice): every copy works and QEMU's memory stays within
 * the cache's bound (the old model kept 8 MiB per context: 2 GiB); one
 * more L3 table makes the context fault with CACHE, until the guest fixes
 * and invalidates it.
 */
static void test_mmu_cache_bound(void)
{
    Spyre *s = spyre_start(NULL);
    HostBuf *src = hostbuf_new(s, 1, false);
    const uint64_t pte = SPYRE_MMU_WRITE | SPYRE_MMU_VALID;  /* device page 0 */
    const uint64_t bound = (uint64_t)MMU_CACHE_RUNS * MMU_RUN_BYTES;
    uint64_t table, l1, big, rss0, rss, va;
    uint32_t nfaults = 0;
    struct spyre_hw_cmd c;
    unsigned ctx, pass;
    gint64 t0;

    ring_setup(s, 0, 16);
    table = mmu_init(s);
    l1 = mmu_chain(s, 1, MMU_CTX_RUNS / 512, pte);
    for (ctx = 1; ctx < SPYRE_MMU_NUM_CTX; ctx++) {
        qtest_writeq(s->qts, table + ctx * 8, l1 | SPYRE_MMU_VALID);
    }
    c = cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0, 0, 8);
    check_dma_ok(submit(s, 0, &c), 1);
    rss0 = qemu_rss(s);
    t0 = g_get_monotonic_time();
    for (pass = 0; pass < 2; pass++) {
        for (ctx = 1; ctx < SPYRE_MMU_NUM_CTX; ctx++) {
            va = (uint64_t)(ctx * 37 % (MMU_CTX_RUNS / 512)) << MMU_L2_SHIFT;
            c = in_ctx(cmd_dma(ctx, SPYRE_CMD_F_SRC_HOST, src->dir, 0, va,
                               8 * pass, 8), ctx);
            check_dma_ok(submit(s, 0, &c), ctx);
        }
        rss = qemu_rss(s);
        g_test_message("pass %u: 255 contexts of %u runs: RSS %" PRIu64
                       " -> %" PRIu64 " MiB (+%" PRId64 " MiB), %" PRId64
                       " ms", pass, MMU_CTX_RUNS, rss0 >> 20, rss >> 20,
                       ((int64_t)rss - (int64_t)rss0) / (1 << 20),
                       (g_get_monotonic_time() - t0) / 1000);
        assert_rss_within(s, rss, rss0 + bound + (32ull << 20));
    }
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, 0);

    /* One L3 table more than a context may cache: CACHE fault. */
    big = mmu_chain(s, 1, MMU_CTX_RUNS / 512 + 1, pte);
    qtest_writeq(s->qts, table + 5 * 8, big | SPYRE_MMU_VALID);
    wr(s, SPYRE_REG_MMU_INVALIDATE, 5);
    c = in_ctx(cmd_dma(2, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0x3000, 16, 8), 5);
    expect_fault(s, 0, &c, 0x3010, fault_info(5, SPYRE_MMU_FAULT_WRITE) |
                 SPYRE_MMU_FAULT_CACHE, &nfaults);
    /* The source side's first byte, for a copy out of the context. */
    c = in_ctx(cmd_dma(3, SPYRE_CMD_F_DST_HOST, 0x5000, 8, src->dir, 0, 8), 5);
    expect_fault(s, 0, &c, 0x5008, fault_info(5, SPYRE_MMU_FAULT_READ) |
                 SPYRE_MMU_FAULT_CACHE, &nfaults);
    /* Other contexts are not affected. */
    c = in_ctx(cmd_dma(4, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0, 0, 8), 6);
    check_dma_ok(submit(s, 0, &c), 4);
    /* Fixed and invalidated, the context works again. */
    qtest_writeq(s->qts, table + 5 * 8, l1 | SPYRE_MMU_VALID);
    wr(s, SPYRE_REG_MMU_INVALIDATE, 5);
    c = in_ctx(cmd_dma(5, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0x3000, 16, 8), 5);
    check_dma_ok(submit(s, 0, &c), 5);
    assert_rss_within(s, qemu_rss(s), rss0 + bound + (32ull << 20));
    hostbuf_free(src);
    spyre_stop(s);
}

/*
 * Eviction with a small cache (x-mmu-cache-runs=8192: 16 contexts of 512
 * runs): 40 contexts, each over its own level-3 table of 512 PTEs naming
 * one device page, are used round-robin three times (each use evicts the
 * least recently used context); each copy lands in its context's page
 * (refilled translations are right).
 */
static void test_mmu_cache_evict(void)
{
    Spyre *s = spyre_start(",x-mmu-cache-runs=8192");
    HostBuf *src = hostbuf_new(s, 1, false);
    uint8_t data[64], got[64];
    uint64_t table, l1[41];
    struct spyre_hw_cmd c;
    unsigned ctx, pass, seq = 1;

    ring_setup(s, 0, 16);
    table = mmu_init(s);
    for (ctx = 1; ctx <= 40; ctx++) {
        l1[ctx] = mmu_chain(s, 1, 1, (uint64_t)(100 + ctx) * PAGE |
                            SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
        qtest_writeq(s->qts, table + ctx * 8, l1[ctx] | SPYRE_MMU_VALID);
    }
    for (pass = 0; pass < 3; pass++) {
        for (ctx = 1; ctx <= 40; ctx++) {
            fill(data, sizeof(data), pass * 100 + ctx);
            hostbuf_io(s, src, 0, data, sizeof(data), true);
            /* VA page ctx % 512 + pass: every page maps device page 100+ctx */
            c = in_ctx(cmd_dma(seq, SPYRE_CMD_F_SRC_HOST, src->dir, 0,
                               (uint64_t)((ctx + pass) % 512) * PAGE, 64 * pass,
                               sizeof(data)), ctx);
            check_dma_ok(submit(s, 0, &c), seq++);
            devmem_read(s, (100 + ctx) * PAGE + 64 * pass, got, sizeof(got));
            g_assert(memcmp(got, data, sizeof(data)) == 0);
        }
    }
    /* One run more than a context's share (512) faults with CACHE. */
    qtest_writeq(s->qts, table + 7 * 8,
                 mmu_chain(s, 1, 2, 7 * PAGE | SPYRE_MMU_VALID) |
                 SPYRE_MMU_VALID);
    wr(s, SPYRE_REG_MMU_INVALIDATE, 7);
    c = in_ctx(cmd_dma(seq, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0, 0, 8), 7);
    g_assert_cmphex(submit(s, 0, &c).detail, ==,
                    fault_info(7, SPYRE_MMU_FAULT_WRITE) |
                    SPYRE_MMU_FAULT_CACHE | SPYRE_MMU_FAULT_VALID);
    hostbuf_free(src);
    spyre_stop(s);
}

/*
 * A walk reads at most MMU_WALK_TABLES tables: every level-1 and level-2
 * entry valid over empty level-3 tables (262,657 table reads on the old
 * model, under the BQL) faults with CACHE after the budget; 1 + 7 + 7 * 512
 * tables still walk (an ordinary fault: nothing is mapped), 1 + 8 + 8 * 512
 * do not.
 */
static void test_mmu_walk_bound(void)
{
    Spyre *s = spyre_start(NULL);
    HostBuf *src = hostbuf_new(s, 1, false);
    uint64_t table;
    uint32_t nfaults = 0;
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    gint64 t0, us;

    ring_setup(s, 0, 16);
    table = mmu_init(s);
    qtest_writeq(s->qts, table + 3 * 8,
                 mmu_chain(s, 512, 512, 0) | SPYRE_MMU_VALID);
    qtest_writeq(s->qts, table + 4 * 8,
                 mmu_chain(s, 7, 512, 0) | SPYRE_MMU_VALID);
    qtest_writeq(s->qts, table + 5 * 8,
                 mmu_chain(s, 8, 512, 0) | SPYRE_MMU_VALID);
    g_assert_cmpuint(1 + 7 + 7 * 512, <=, MMU_WALK_TABLES);
    g_assert_cmpuint(1 + 8 + 8 * 512, >, MMU_WALK_TABLES);

    c = in_ctx(cmd_dma(1, SPYRE_CMD_F_SRC_HOST, src->dir, 0, MMU_VA, 8, 8), 3);
    t0 = g_get_monotonic_time();
    p = submit(s, 0, &c);
    us = g_get_monotonic_time() - t0;
    g_test_message("walk of 512 x 512 empty level-3 tables: %" PRId64 " us, "
                   "status %u detail 0x%x", us, p.status, p.detail);
    g_assert_cmpuint(p.status, ==, SPYRE_STATUS_ERR_MMU_FAULT);
    g_assert_cmphex(p.detail, ==, fault_info(3, SPYRE_MMU_FAULT_WRITE) |
                    SPYRE_MMU_FAULT_CACHE | SPYRE_MMU_FAULT_VALID);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(0, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    MMU_VA + 8);
    g_assert_cmpuint(rd(s, SPYRE_REG_TELE_MMU_FAULTS), ==, ++nfaults);
    rwr(s, 0, SPYRE_RING_FAULT_INFO, SPYRE_MMU_FAULT_VALID);
    g_assert_cmpint(us, <, 2 * G_USEC_PER_SEC);
    /* The result is cached until an invalidation: no second walk. */
    c = in_ctx(cmd_dma(2, SPYRE_CMD_F_DST_HOST, 0, 0, src->dir, 0, 8), 3);
    expect_fault(s, 0, &c, 0, fault_info(3, SPYRE_MMU_FAULT_READ) |
                 SPYRE_MMU_FAULT_CACHE, &nfaults);

    c = in_ctx(cmd_dma(3, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0x1000, 0, 8), 4);
    expect_fault(s, 0, &c, 0x1000, fault_info(4, SPYRE_MMU_FAULT_WRITE),
                 &nfaults);
    c = in_ctx(cmd_dma(4, SPYRE_CMD_F_SRC_HOST, src->dir, 0, 0x1000, 0, 8), 5);
    expect_fault(s, 0, &c, 0x1000, fault_info(5, SPYRE_MMU_FAULT_WRITE) |
                 SPYRE_MMU_FAULT_CACHE, &nfaults);
    hostbuf_free(src);
    spyre_stop(s);
}

/*
 * A LAUNCH of a context of MMU_CTX_RUNS runs with 256 windows of the whole
 * 2^39 bytes: its completion marks each run's device pages dirty once, not
 * once per window (the old model made 256 x 131,072 calls), as trace event
 * spyre_mmu_dirty reports.
 */
static void test_mmu_dirty_bound(void)
{
    g_autofree char *trace = g_strdup_printf("/tmp/spyre-dirty-%d.log",
                                             (int)getpid());
    g_autofree char *opts = g_strdup_printf(
        ",x-engine-threads=1 -trace enable=spyre_mmu_dirty,file=%s", trace);
    g_autofree char *text = NULL;
    Spyre *s = spyre_start(opts);
    const char *line;
    unsigned nwin, ranges, nlines = 0;
    uint64_t marked;
    g_autofree struct spyre_hw_launch_window *win =
        g_new0(struct spyre_hw_launch_window, SPYRE_LAUNCH_MAX_WINDOWS);
    struct spyre_hw_launch_result r;
    struct spyre_hw_cmd c;
    const uint64_t no_arg = 0;
    uint64_t table, result, desc;
    uint32_t size;
    gint64 t0, us;
    Prog p;
    int i;

    ring_setup(s, 0, 16);
    table = mmu_init(s);
    qtest_writeq(s->qts, table + 2 * 8,
                 mmu_chain(s, 1, MMU_CTX_RUNS / 512,
                           SPYRE_MMU_WRITE | SPYRE_MMU_VALID) |
                 SPYRE_MMU_VALID);
    for (i = 0; i < SPYRE_LAUNCH_MAX_WINDOWS; i++) {
        win[i].addr = 0;
        win[i].size = 1ull << SPYRE_MMU_VA_BITS;
    }
    memset(&p, 0, sizeof(p));
    isa(&p, ISA_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
    size = isa_finish(&p);
    devmem_write(s, 0, p.buf, size);
    result = result_buf(s);
    desc = launch_desc(s, 1, 1, &no_arg, SPYRE_LAUNCH_MAX_WINDOWS, win);
    /* The first launch walks the context; the second uses the cache. */
    for (i = 0; i < 2; i++) {
        c = in_ctx(cmd_launch(1 + i, 0, 0, size, desc, result), 2);
        t0 = g_get_monotonic_time();
        g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
        us = g_get_monotonic_time() - t0;
        g_test_message("launch %d, 256 windows over %u runs: %" PRId64 " us",
                       i, MMU_CTX_RUNS, us);
        read_result(s, result, &r);
        g_assert_cmpuint(r.error, ==, 0);
        g_assert_cmpint(us, <, 2 * G_USEC_PER_SEC);
    }
    spyre_stop(s);
    g_assert(g_file_get_contents(trace, &text, NULL, NULL));
    unlink(trace);
    for (line = strstr(text, "spyre_mmu_dirty "); line;
         line = strstr(line + 1, "spyre_mmu_dirty ")) {
        g_assert_cmpint(sscanf(line, "spyre_mmu_dirty ctx 2: %u windows as %u "
                               "ranges, %" SCNu64, &nwin, &ranges, &marked),
                        ==, 3);
        g_assert_cmpuint(nwin, ==, SPYRE_LAUNCH_MAX_WINDOWS);
        g_assert_cmpuint(ranges, ==, 1);
        g_assert_cmpuint(marked, ==, MMU_CTX_RUNS);
        nlines++;
    }
    g_assert_cmpuint(nlines, ==, 2);
}

/*
 * ---- Bounded random fuzz of the card model (issue 24) ----
 *
 * A malicious guest driver: random register writes (rings, MMU, reset and
 * read-only ones), ring entries with random opcodes, flags, contexts and
 * fields, and MMU page tables, host page directories and launch descriptors
 * of random entries, from fixed seeds. Each seed runs in its own QEMU a fixed
 * sequence of FUZZ_OPS operations (SPYRE_FUZZ_OPS), stopping early at a
 * wall-clock budget (SPYRE_FUZZ_MS), then resets the card: QEMU must be alive,
 * the card READY and working (a NOP completes OK), every completion of a fuzzed
 * command carry a defined status, the guest errors be logged (-d guest_errors),
 * and QEMU's resident memory grow by at most FUZZ_RSS_BOUND (hardware.md
 * section 14). SPYRE_FUZZ_SEEDS sets the number of seeds (make fuzz: many).
 */
#define FUZZ_SEEDS      8
#define FUZZ_OPS        2000
#define FUZZ_MS         4000
#define FUZZ_POOL       16          /* guest pages of tables and descriptors */
#define FUZZ_RING_SIZE  64
#define FUZZ_CORES      4
#define FUZZ_CACHE_RUNS 65536
#define FUZZ_TAG        0x5eed000000000000ull
/*
 * Device memory (all of it may be touched), the scratchpads of up to one
 * engine context per ring (time slicing keeps a preempted launch's), the
 * translation cache (64 bytes a run) and its fill in progress, plus 32 MiB.
 */
#define FUZZ_RSS_BOUND  ((uint64_t)DEVMEM + NRINGS * FUZZ_CORES * (2ull << 20) + \
                         FUZZ_CACHE_RUNS * 64ull + (4ull << 20) + (32ull << 20))

typedef struct Fuzz {
    Spyre *s;
    GRand *rnd;
    uint64_t pool[FUZZ_POOL];
    uint64_t cmd[NRINGS], cpl[NRINGS];
    uint64_t seqno;
    unsigned completions, errors;
} Fuzz;

static unsigned fuzz_env(const char *name, unsigned dflt)
{
    const char *v = g_getenv(name);

    return v && *v ? (unsigned)g_ascii_strtoull(v, NULL, 0) : dflt;
}

static unsigned fuzz_int(Fuzz *f, unsigned n)
{
    return g_rand_int_range(f->rnd, 0, n);
}

/* A value a hostile driver might try: an edge, a pool address, a page. */
static uint64_t fuzz_value(Fuzz *f)
{
    static const uint64_t vals[] = {
        0, 1, 2, 7, 8, 63, 64, PAGE - 1, PAGE, PAGE + 1, DEVMEM / 2,
        DEVMEM - 8, DEVMEM, DEVMEM + PAGE, 1ull << 21, 1ull << 30, 1ull << 39,
        UINT32_MAX, (uint64_t)UINT32_MAX + 1, INT64_MAX, UINT64_MAX,
        UINT64_MAX - 63,
    };

    switch (fuzz_int(f, 4)) {
    case 0:
        return vals[fuzz_int(f, ARRAY_SIZE(vals))];
    case 1:
        return f->pool[fuzz_int(f, FUZZ_POOL)] + (fuzz_int(f, 2) ? 0 :
                                                  fuzz_int(f, 512) * 8);
    case 2:
        return (uint64_t)fuzz_int(f, DEVMEM / PAGE) * PAGE;
    default:
        return (uint64_t)g_rand_int(f->rnd) << 32 | g_rand_int(f->rnd);
    }
}

/* A table entry: the next table, a device or host page, or garbage. */
static uint64_t fuzz_entry(Fuzz *f)
{
    uint64_t e;

    switch (fuzz_int(f, 5)) {
    case 0:
    case 1:
        e = f->pool[fuzz_int(f, FUZZ_POOL)] | SPYRE_MMU_VALID;
        break;
    case 2:
        e = (uint64_t)fuzz_int(f, DEVMEM / PAGE) * PAGE | SPYRE_MMU_VALID |
            SPYRE_MMU_WRITE;
        break;
    case 3:
        e = 0;
        break;
    default:
        e = fuzz_value(f);
        break;
    }
    if (!fuzz_int(f, 8)) {
        e |= SPYRE_MMU_HOST;
    }
    if (!fuzz_int(f, 16)) {
        e |= (uint64_t)fuzz_int(f, 512) << 3;   /* reserved bits */
    }
    return e;
}

static void fuzz_tables(Fuzz *f)
{
    uint64_t page = f->pool[fuzz_int(f, FUZZ_POOL)];
    unsigned i, n = 1 + fuzz_int(f, 64);

    for (i = 0; i < n; i++) {
        qtest_writeq(f->s->qts, page + fuzz_int(f, 512) * 8, fuzz_entry(f));
    }
}

static void fuzz_bytes(Fuzz *f)
{
    uint8_t buf[64];
    unsigned i, n = 1 + fuzz_int(f, sizeof(buf));
    uint64_t off;

    for (i = 0; i < n; i++) {
        buf[i] = fuzz_int(f, 256);
    }
    if (fuzz_int(f, 2)) {
        off = fuzz_int(f, DEVMEM - sizeof(buf));
        devmem_write(f->s, off, buf, n);
    } else {
        off = f->pool[fuzz_int(f, FUZZ_POOL)] + fuzz_int(f, PAGE - sizeof(buf));
        qtest_memwrite(f->s->qts, off, buf, n);
    }
}

static void fuzz_register(Fuzz *f)
{
    uint64_t off;
    uint32_t val = fuzz_value(f);

    switch (fuzz_int(f, 6)) {
    case 0:
        off = fuzz_int(f, 0x60 / 4) * 4;
        if (off == SPYRE_REG_RESET && fuzz_int(f, 4)) {
            val = SPYRE_RESET_MAGIC;
        }
        break;
    case 1:
    case 2:
        off = SPYRE_RING_REG(fuzz_int(f, NRINGS + 1),
                             fuzz_int(f, 0x40 / 4) * 4);
        if ((off & 0xff) == SPYRE_RING_CTRL) {
            val = fuzz_int(f, 4);
        }
        break;
    case 3:
        off = fuzz_int(f, 2) ? SPYRE_REG_MMU_INVALIDATE :
                               SPYRE_REG_MMU_CTX_BASE_LO;
        val = off == SPYRE_REG_MMU_INVALIDATE ?
              (fuzz_int(f, 4) ? fuzz_int(f, 256) : SPYRE_MMU_INV_ALL) :
              (uint32_t)f->pool[fuzz_int(f, FUZZ_POOL)];
        break;
    case 4:
        off = 0x100 + fuzz_int(f, 0x80 / 4) * 4;    /* telemetry: read-only */
        break;
    default:
        off = fuzz_int(f, SPYRE_REGS_SIZE / 4) * 4;
        break;
    }
    wr(f->s, off, val);
}

/* Ring n enabled on the fuzz's arrays, if something disabled it. */
static void fuzz_ring_enable(Fuzz *f, int n)
{
    if (!(rrd(f->s, n, SPYRE_RING_STATUS) & SPYRE_RING_STATUS_ENABLED)) {
        rwr(f->s, n, SPYRE_RING_CTRL, 0);
        ring_program(f->s, n, f->cmd[n], f->cpl[n], FUZZ_RING_SIZE);
    }
}

/* A well-formed command of random kind over the pool and device memory. */
static void fuzz_plausible(Fuzz *f, struct spyre_hw_cmd *c)
{
    static const uint64_t sizes[] = {
        8, 64, 100, PAGE, 3 * PAGE + 5, 1 << 20, 2 << 20,
    };
    uint64_t dev = (uint64_t)fuzz_int(f, DEVMEM / PAGE) * PAGE;
    uint64_t dev2 = (uint64_t)fuzz_int(f, DEVMEM / PAGE) * PAGE;
    uint64_t host = f->pool[fuzz_int(f, FUZZ_POOL)];
    uint64_t size = sizes[fuzz_int(f, ARRAY_SIZE(sizes))];

    c->hdr.opcode = fuzz_int(f, 7);
    c->hdr.flags = fuzz_int(f, 2) ? SPYRE_CMD_F_IRQ : 0;
    c->hdr.ctx = fuzz_int(f, 2) ? 0 : 1 + fuzz_int(f, 4);
    c->hdr.reserved1 = 0;
    memset(c->raw, 0, sizeof(c->raw));
    switch (c->hdr.opcode) {
    case SPYRE_OP_FENCE_WRITE:
        c->fence.addr = host + fuzz_int(f, 512) * 8;
        c->fence.value = fuzz_value(f);
        break;
    case SPYRE_OP_DMA_COPY:
    case SPYRE_OP_DMA_COPY_2D:
        c->hdr.flags |= fuzz_int(f, 4) << 1;    /* SRC_HOST, DST_HOST */
        c->dma.src_addr = c->hdr.flags & SPYRE_CMD_F_SRC_HOST ? host : dev;
        c->dma.dst_addr = c->hdr.flags & SPYRE_CMD_F_DST_HOST ? host : dev2;
        c->dma.src_offset = fuzz_int(f, 2) ? 0 : fuzz_int(f, PAGE);
        c->dma.dst_offset = fuzz_int(f, 2) ? 0 : fuzz_int(f, PAGE);
        if (c->hdr.opcode == SPYRE_OP_DMA_COPY) {
            c->dma.size = size;
        } else {
            c->dma2d.width = 1 + fuzz_int(f, 256);
            c->dma2d.height = 1 + fuzz_int(f, 64);
            c->dma2d.src_pitch = fuzz_int(f, 1024);
            c->dma2d.dst_pitch = fuzz_int(f, 1024);
        }
        break;
    case SPYRE_OP_LAUNCH:
        c->launch.prog_addr = dev;
        c->launch.prog_size = 32 + 16 * fuzz_int(f, 64);
        c->launch.desc_addr = host;
        c->launch.result_addr = fuzz_int(f, 2) ? 0 :
                                f->pool[fuzz_int(f, FUZZ_POOL)];
        break;
    case SPYRE_OP_SEM_SIGNAL:
    case SPYRE_OP_SEM_WAIT:
        /* A semaphore in device memory or a pool page (as a directory) */
        if (fuzz_int(f, 2)) {
            c->hdr.flags |= c->hdr.opcode == SPYRE_OP_SEM_WAIT ?
                            SPYRE_CMD_F_SRC_HOST : SPYRE_CMD_F_DST_HOST;
        }
        c->sem.addr = c->hdr.flags & ~SPYRE_CMD_F_IRQ ? host : dev;
        c->sem.offset = fuzz_int(f, PAGE / 16) * 16;
        c->sem.value = fuzz_int(f, 4);
        if (c->hdr.opcode == SPYRE_OP_SEM_WAIT) {
            c->sem.timeout_us = fuzz_int(f, 3) * 500;
        }
        break;
    }
}

static void fuzz_commands(Fuzz *f)
{
    Spyre *s = f->s;
    int n = fuzz_int(f, NRINGS);
    unsigned i, k = 1 + fuzz_int(f, 8);
    uint32_t tail, idx, head;
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;

    fuzz_ring_enable(f, n);
    tail = rrd(s, n, SPYRE_RING_TAIL) % FUZZ_RING_SIZE;
    for (i = 0; i < k; i++) {
        memset(&c, 0, sizeof(c));
        if (fuzz_int(f, 2)) {
            fuzz_plausible(f, &c);
            c.hdr.seqno = FUZZ_TAG | ++f->seqno;
            goto queue;
        }
        c.hdr.opcode = fuzz_int(f, 8) ? fuzz_int(f, 5) : fuzz_int(f, 256);
        c.hdr.flags = fuzz_int(f, 4) ? fuzz_int(f, 8) : fuzz_int(f, 256);
        c.hdr.ctx = fuzz_int(f, 2) ? 0 :
                    fuzz_int(f, 8) ? 1 + fuzz_int(f, 255) : fuzz_int(f, 65536);
        c.hdr.reserved1 = fuzz_int(f, 16) ? 0 : g_rand_int(f->rnd);
        c.hdr.seqno = FUZZ_TAG | ++f->seqno;
        for (idx = 0; idx < ARRAY_SIZE(c.raw); idx++) {
            c.raw[idx] = fuzz_int(f, 3) ? fuzz_value(f) : 0;
        }
queue:
        idx = (tail + i) % FUZZ_RING_SIZE;
        qtest_memwrite(s->qts, f->cmd[n] + idx * sizeof(c), &c, sizeof(c));
        qtest_memset(s->qts, f->cpl[n] + idx * sizeof(p), 0, sizeof(p));
    }
    rwr(s, n, SPYRE_RING_TAIL, (tail + k) % FUZZ_RING_SIZE);
    /* virtual time for the main loop, real time for the workers: bounded */
    for (i = 0; i < 2000; i++) {
        head = rrd(s, n, SPYRE_RING_HEAD);
        if (head == (tail + k) % FUZZ_RING_SIZE &&
            !(rrd(s, n, SPYRE_RING_STATUS) & SPYRE_RING_STATUS_BUSY)) {
            break;
        }
        qtest_clock_step(s->qts, 1000);
        if (i >= 1000) {
            g_usleep(100);
        }
    }
    for (i = 0; i < k; i++) {
        idx = (tail + i) % FUZZ_RING_SIZE;
        qtest_memread(s->qts, f->cpl[n] + idx * sizeof(p), &p, sizeof(p));
        if ((p.seqno & ~0xffffffffull) != FUZZ_TAG) {
            continue;
        }
        g_assert_cmpuint(p.status, <=, SPYRE_STATUS_ERR_TIMEOUT);
        f->completions++;
        f->errors += p.status != SPYRE_STATUS_OK;
    }
}

static void fuzz_seed(unsigned seed, unsigned ops, unsigned budget_ms)
{
    g_autofree char *log = g_strdup_printf("/tmp/spyre-fuzz-%d-%u.log",
                                           (int)getpid(), seed);
    g_autofree char *extra =
        g_strdup_printf(",num-cores=%d,x-mmu-cache-runs=%d "
                        "-d guest_errors -D %s",
                        FUZZ_CORES, FUZZ_CACHE_RUNS, log);
    g_autofree char *text = NULL;
    Fuzz f = { .s = spyre_start(extra), .rnd = g_rand_new_with_seed(seed) };
    gint64 t0 = g_get_monotonic_time();
    uint64_t rss0, rss;
    struct spyre_hw_cmd c;
    unsigned i, done;
    int n;

    g_test_message("seed %u", seed);    /* names the seed if QEMU dies */
    for (i = 0; i < FUZZ_POOL; i++) {
        f.pool[i] = zalloc(f.s, PAGE);
    }
    for (n = 0; n < NRINGS; n++) {
        f.cmd[n] = zalloc(f.s, FUZZ_RING_SIZE * sizeof(struct spyre_hw_cmd));
        f.cpl[n] = zalloc(f.s, FUZZ_RING_SIZE * sizeof(struct spyre_hw_cpl));
        ring_program(f.s, n, f.cmd[n], f.cpl[n], FUZZ_RING_SIZE);
    }
    /* contexts 1..4 start at pool pages 1..4, filled with tables by the fuzz */
    for (i = 1; i <= 4; i++) {
        qtest_writeq(f.s->qts, f.pool[0] + i * 8, f.pool[i] | SPYRE_MMU_VALID);
    }
    wr(f.s, SPYRE_REG_MMU_CTX_BASE_LO, (uint32_t)f.pool[0]);
    wr(f.s, SPYRE_REG_MMU_CTX_BASE_HI, f.pool[0] >> 32);
    rss0 = qemu_rss(f.s);
    for (done = 0; done < ops; done++) {
        if (g_get_monotonic_time() - t0 > budget_ms * 1000ll) {
            break;
        }
        switch (fuzz_int(&f, 8)) {
        case 0:
        case 1:
            fuzz_register(&f);
            break;
        case 2:
        case 3:
            fuzz_tables(&f);
            break;
        case 4:
            fuzz_bytes(&f);
            break;
        default:
            fuzz_commands(&f);
            break;
        }
    }
    /* whatever the guest did: a reset brings back a working card */
    wr(f.s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    wait_ready(f.s);
    g_assert(qtest_probe_child(f.s->qts));
    g_assert_cmphex(rd(f.s, SPYRE_REG_ID), ==, SPYRE_ID_MAGIC);
    ring_setup(f.s, 0, 16);
    c = cmd_nop(7, 0);
    g_assert_cmpuint(submit(f.s, 0, &c).status, ==, SPYRE_STATUS_OK);
    rss = qemu_rss(f.s);
    g_test_message("seed %u: %u of %u operations in %" PRId64 " ms, %u "
                   "completions (%u errors), RSS %" PRIu64 " -> %" PRIu64
                   " MiB", seed, done, ops,
                   (g_get_monotonic_time() - t0) / 1000, f.completions,
                   f.errors, rss0 >> 20, rss >> 20);
    assert_rss_within(f.s, rss, rss0 + FUZZ_RSS_BOUND);
    spyre_stop(f.s);
    /* malformed writes and commands were reported, not silently taken */
    g_assert(g_file_get_contents(log, &text, NULL, NULL));
    g_assert(strstr(text, "spyre"));
    unlink(log);
    g_rand_free(f.rnd);
}

static void test_fuzz_seeds(void)
{
    unsigned seeds = fuzz_env("SPYRE_FUZZ_SEEDS", FUZZ_SEEDS);
    unsigned ops = fuzz_env("SPYRE_FUZZ_OPS", FUZZ_OPS);
    unsigned ms = fuzz_env("SPYRE_FUZZ_MS", FUZZ_MS);
    unsigned i;

    for (i = 0; i < seeds; i++) {
        fuzz_seed(1 + i * 7919, ops, ms);
    }
}

/* ---- Peer-to-peer between cards (hw 1.6, CAP_P2P) ---- */

#define SLOT_B          5
#define P2P_LAT         1500    /* SPYRE_CYCLES_P2P_LATENCY */

static void card_map(Spyre *s, int devfn)
{
    uint64_t size;

    s->dev = qpci_device_find(s->bus, devfn);
    g_assert(s->dev);
    qpci_device_enable(s->dev);
    s->bar0 = qpci_iomap(s->dev, SPYRE_BAR_REGS, &size);
    g_assert_cmpuint(size, ==, SPYRE_REGS_SIZE);
    s->bar2 = qpci_iomap(s->dev, SPYRE_BAR_DEVMEM, &size);
    g_assert_cmpuint(size, ==, DEVMEM);
}

/*
 * Two cards in one QEMU on the machine's root bus (q35: pcie.0), spyre0 (a)
 * at SLOT and spyre1 (b) at SLOT_B, sharing the QTest connection and the
 * PCI bus; each allocates from its own half of guest RAM. more: further
 * -device options.
 */
static void pair_start(const char *machine, const char *extra_a,
                       const char *extra_b, const char *more, Spyre **pa,
                       Spyre **pb)
{
    Spyre *a = g_new0(Spyre, 1), *b = g_new0(Spyre, 1);

    a->qts = qtest_initf("%s -nodefaults -machine %s -m 256M "
                         "-device spyre,id=spyre0,addr=%02x.0,devmem-size=%d%s "
                         "-device spyre,id=spyre1,addr=%02x.0,devmem-size=%d%s "
                         "%s", firmware_args(), machine, SLOT, DEVMEM,
                         extra_a ? extra_a : "", SLOT_B, DEVMEM,
                         extra_b ? extra_b : "", more ? more : "");
    b->qts = a->qts;
    alloc_init(&a->alloc, ALLOC_NO_FLAGS, 1 << 20, 128 << 20, PAGE);
    alloc_init(&b->alloc, ALLOC_NO_FLAGS, 128 << 20, 256 << 20, PAGE);
    a->bus = qpci_new_pc(a->qts, &a->alloc);
    b->bus = a->bus;
    card_map(a, QPCI_DEVFN(SLOT, 0));
    card_map(b, QPCI_DEVFN(SLOT_B, 0));
    *pa = a;
    *pb = b;
}

static void pair_stop(Spyre *a, Spyre *b)
{
    g_free(b->dev);
    alloc_destroy(&b->alloc);
    g_free(b);
    b = NULL;
    spyre_stop(a);
}

/* A host page directory of npages consecutive pages from addr on. */
static uint64_t dir_linear(Spyre *s, uint64_t addr, size_t npages)
{
    size_t ntables = DIV_ROUND_UP(npages, SPYRE_HOST_PT_ENTRIES);
    uint64_t dir = zalloc(s, ntables * 8);
    size_t i, j;

    for (i = 0; i < ntables; i++) {
        uint64_t pt = zalloc(s, PAGE);

        qtest_writeq(s->qts, dir + i * 8, pt);
        for (j = 0; j < SPYRE_HOST_PT_ENTRIES &&
             i * SPYRE_HOST_PT_ENTRIES + j < npages; j++) {
            qtest_writeq(s->qts, pt + j * 8,
                         addr + (i * SPYRE_HOST_PT_ENTRIES + j) * PAGE);
        }
    }
    return dir;
}

/* Cycles of a copy of host <-> device bytes at the default 60 GB/s. */
static uint64_t host_cycles(uint64_t bytes)
{
    return 256 + DIV_ROUND_UP(bytes * 1500, 60000);
}

/* ... and of peer bytes at rate MB/s (hardware.md section 11). */
static uint64_t peer_cycles(uint64_t bytes, uint64_t mbps)
{
    return P2P_LAT + DIV_ROUND_UP(bytes * 1500, mbps);
}

/*
 * Bulk transfers through QTest in pieces: one command line of many MiB is
 * far slower than the same bytes in lines of 64 KiB.
 */
#define QTEST_PIECE     (64 * 1024)

static void bulk_io(QTestState *qts, uint64_t addr, uint8_t *buf, size_t len,
                    bool write)
{
    size_t done, n;

    for (done = 0; done < len; done += n) {
        n = MIN(len - done, QTEST_PIECE);
        if (write) {
            qtest_bufwrite(qts, addr + done, buf + done, n);
        } else {
            qtest_bufread(qts, addr + done, buf + done, n);
        }
    }
}

static void assert_devmem(Spyre *s, uint64_t off, const uint8_t *want,
                          size_t len)
{
    g_autofree uint8_t *got = g_malloc(len);

    bulk_io(s->qts, s->bar2.addr + off, got, len, false);
    g_assert(memcmp(got, want, len) == 0);
}

static void devmem_fill(Spyre *s, uint64_t off, size_t len, uint32_t seed,
                        uint8_t *buf)
{
    fill(buf, len, seed);
    bulk_io(s->qts, s->bar2.addr + off, buf, len, true);
}

/*
 * Copies whose host side is the peer's BAR2 move the bytes card to card:
 * A pushes to B, A pulls from B, B pushes to A (inline and on the DMA
 * worker), DMA_COPY_2D with pitches, and a translated copy through a HOST
 * PTE that names a page of the peer's BAR2. The telemetry counts them, the
 * cycles are the documented formula.
 */
static void test_p2p_copy(void)
{
    Spyre *a, *b;
    const size_t len = 3 * PAGE + 123, big = 4 * 1024 * 1024;
    g_autofree uint8_t *want = g_malloc(big);
    g_autofree uint8_t *got = g_malloc(big);
    uint8_t zero[PAGE] = { 0 };
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    uint64_t table, l1;
    size_t i;

    pair_start("q35", NULL, NULL, NULL, &a, &b);
    g_assert_cmphex(rd(a, SPYRE_REG_VERSION), ==,
                    SPYRE_HW_VERSION(SPYRE_HW_VERSION_MAJOR,
                                     SPYRE_HW_VERSION_MINOR));
    g_assert_cmphex(rd(a, SPYRE_REG_CAPS) & SPYRE_CAP_P2P, ==, SPYRE_CAP_P2P);
    g_assert_cmphex(rd(b, SPYRE_REG_CAPS) & SPYRE_CAP_P2P, ==, SPYRE_CAP_P2P);
    ring_setup(a, 0, 16);
    ring_setup(b, 0, 16);

    /* A device -> B's BAR2 at 0x200000 + 77 (inline) */
    devmem_fill(a, 0x100000, len, 1, want);
    c = cmd_dma(1, SPYRE_CMD_F_DST_HOST, 0x100000, 0,
                dir_linear(a, b->bar2.addr + 0x200000, 5), 77, len);
    p = submit(a, 0, &c);
    check_dma_ok(p, 1);
    assert_devmem(b, 0x200000 + 77, want, len);
    g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(len, 60000));
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==, len);
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_RD_BYTES_LO), ==, 0);
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_D2H_BYTES_LO), ==, len);
    /* The target card does nothing: no command, no counter. */
    g_assert_cmpuint(rd64(b, SPYRE_REG_TELE_CMDS_LO), ==, 0);
    g_assert_cmpuint(rd64(b, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==, 0);

    /* A pulls B's 0x200000 + 77 back into its 0x300000 */
    c = cmd_dma(2, SPYRE_CMD_F_SRC_HOST,
                dir_linear(a, b->bar2.addr + 0x200000, 5), 77, 0x300000, 0,
                len);
    p = submit(a, 0, &c);
    check_dma_ok(p, 2);
    assert_devmem(a, 0x300000, want, len);
    g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(len, 60000));
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_RD_BYTES_LO), ==, len);

    /* B pushes 4 MiB to A's BAR2 (DMA worker) */
    devmem_fill(b, 0x400000, big, 2, want);
    c = cmd_dma(3, SPYRE_CMD_F_DST_HOST, 0x400000, 0,
                dir_linear(b, a->bar2.addr + 0x800000, big / PAGE), 0, big);
    p = submit(b, 0, &c);
    check_dma_ok(p, 3);
    assert_devmem(a, 0x800000, want, big);
    g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(big, 60000));
    g_assert_cmpuint(rd64(b, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==, big);

    /* host RAM -> B's BAR2 (both sides host) */
    {
        HostBuf *hb = hostbuf_new(a, 2, true);

        fill(want, 2 * PAGE, 5);
        hostbuf_io(a, hb, 0, want, 2 * PAGE, true);
        c = cmd_dma(6, SPYRE_CMD_F_SRC_HOST | SPYRE_CMD_F_DST_HOST, hb->dir,
                    0, dir_linear(a, b->bar2.addr + 0x6a0000, 2), 0,
                    2 * PAGE);
        p = submit(a, 0, &c);
        check_dma_ok(p, 6);
        assert_devmem(b, 0x6a0000, want, 2 * PAGE);
        g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(2 * PAGE, 60000));
        hostbuf_free(hb);
    }

    /* 2D: 5 rows of 100 bytes, pitch 128 -> pitch 1000 in B; gaps kept */
    qtest_bufwrite(a->qts, b->bar2.addr + 0x500000, zero, PAGE);
    devmem_fill(a, 0x600000, 5 * 128, 3, want);
    c = cmd_dma2d(4, SPYRE_CMD_F_DST_HOST, 0x600000, 0,
                  dir_linear(a, b->bar2.addr + 0x500000, 2), 10, 100, 5, 128,
                  1000);
    p = submit(a, 0, &c);
    check_dma_ok(p, 4);
    g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(500, 60000));
    qtest_bufread(a->qts, b->bar2.addr + 0x500000, got, PAGE);
    for (i = 0; i < PAGE; i++) {
        size_t r = (i - 10) / 1000, col = (i - 10) % 1000;
        bool in = i >= 10 && r < 5 && col < 100;

        g_assert_cmphex(got[i], ==, in ? want[r * 128 + col] : 0);
    }

    /*
     * Context 1 of A: VA page 0 -> device page 0x700, VA page 1 -> a HOST
     * PTE naming B's BAR2 page 0x680 (a peer aperture in A's MMU).
     */
    table = mmu_init(a);
    l1 = mmu_ctx(a, table, 1);
    mmu_map(a, l1, MMU_VA, 0x700 * PAGE | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    mmu_map(a, l1, MMU_VA + PAGE, (b->bar2.addr + 0x680 * PAGE) |
            SPYRE_MMU_HOST | SPYRE_MMU_WRITE | SPYRE_MMU_VALID);
    devmem_fill(a, 0x700 * PAGE, PAGE, 4, want);
    c = in_ctx(cmd_dma(5, 0, MMU_VA, 0, MMU_VA, PAGE + 16, PAGE - 16), 1);
    p = submit(a, 0, &c);
    check_dma_ok(p, 5);
    assert_devmem(b, 0x680 * PAGE + 16, want, PAGE - 16);
    /* device -> device pricing for the device bytes (none), peer for all */
    g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(PAGE - 16, 60000));
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==,
                     len + 2 * PAGE + 500 + PAGE - 16);
    pair_stop(a, b);
}

/*
 * The cycles of a peer copy: the slowest of the link (p2p-mbps) and both
 * cards' device memory, plus one latency; the bytes of a mixed copy that
 * stay in host RAM are priced as before, copies without peer bytes exactly
 * as before.
 */
static void test_p2p_cycles(void)
{
    Spyre *a, *b;
    const size_t len = 64 * PAGE;
    g_autofree uint8_t *wa = g_malloc(len);
    g_autofree uint8_t *wb = g_malloc(len);
    uint8_t got[PAGE];
    HostBuf *hb;
    uint64_t dir, pt;
    struct spyre_hw_cmd c;
    struct spyre_hw_cpl p;
    size_t i;

    pair_start("q35", ",p2p-mbps=20000", ",ddr-mbps=51200", NULL, &a, &b);
    ring_setup(a, 0, 16);
    ring_setup(b, 0, 16);
    devmem_fill(a, 0, len, 5, wa);
    devmem_fill(b, 0, len, 6, wb);

    /* A -> B: A's link (20 GB/s) is the slowest */
    c = cmd_dma(1, SPYRE_CMD_F_DST_HOST, 0, 0,
                dir_linear(a, b->bar2.addr + 0x100000, len / PAGE), 0, len);
    p = submit(a, 0, &c);
    check_dma_ok(p, 1);
    g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(len, 20000));
    /* B -> A: B's device memory (51.2 GB/s) is */
    c = cmd_dma(2, SPYRE_CMD_F_DST_HOST, 0, 0,
                dir_linear(b, a->bar2.addr + 0x100000, len / PAGE), 0, len);
    p = submit(b, 0, &c);
    check_dma_ok(p, 2);
    g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(len, 51200));
    /* A reads B: B's device memory again */
    c = cmd_dma(3, SPYRE_CMD_F_SRC_HOST,
                dir_linear(a, b->bar2.addr, len / PAGE), 0, 0x200000, 0, len);
    p = submit(a, 0, &c);
    check_dma_ok(p, 3);
    g_assert_cmpuint(p.cycles, ==, 256 + peer_cycles(len, 20000));
    assert_devmem(a, 0x200000, wb, len);

    /* Host RAM only: as before */
    hb = hostbuf_new(a, len / PAGE, true);
    c = cmd_dma(4, SPYRE_CMD_F_DST_HOST, 0, 0, hb->dir, 0, len);
    p = submit(a, 0, &c);
    check_dma_ok(p, 4);
    g_assert_cmpuint(p.cycles, ==, host_cycles(len));

    /* Every other page of the directory in B's BAR2: half the bytes peer */
    dir = hb->dir;
    pt = qtest_readq(a->qts, dir);
    for (i = 0; i < len / PAGE; i += 2) {
        qtest_writeq(a->qts, pt + i * 8, b->bar2.addr + 0x400000 + i * PAGE);
    }
    c = cmd_dma(5, SPYRE_CMD_F_DST_HOST, 0, 0, dir, 0, len);
    p = submit(a, 0, &c);
    check_dma_ok(p, 5);
    g_assert_cmpuint(p.cycles, ==,
                     host_cycles(len / 2) + peer_cycles(len / 2, 20000));
    for (i = 0; i < len / PAGE; i++) {
        if (i % 2) {
            qtest_memread(a->qts, hb->page[i], got, PAGE);
            g_assert(memcmp(got, wa + i * PAGE, PAGE) == 0);
        } else {
            assert_devmem(b, 0x400000 + i * PAGE, wa + i * PAGE, PAGE);
        }
    }
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==,
                     len + len / 2);
    hostbuf_free(hb);
    pair_stop(a, b);
}

/*
 * What stays refused with ERR_HOST_DMA, writing nothing: the peer's BAR0
 * registers and BAR4 MSI-X table, the card's own BAR2 through the host
 * path, a RAM BAR of another device type (bochs-display's VRAM), a page
 * directory or a fence in the peer's BAR2 (only data pages may be peer
 * memory), a run past the end of the peer's BAR2 (after writing its part),
 * the peer's BAR2 while its Memory Space Enable is clear.
 */
static void test_p2p_refused(void)
{
    Spyre *a, *b;
    QPCIDevice *vga;
    static const uint8_t zero[PAGE];
    QPCIBar b4, vram;
    uint8_t page[PAGE], got[PAGE], msix[64];
    uint64_t hostpage, dir;
    struct spyre_hw_cmd c;
    uint32_t nerr = 0;

    pair_start("q35", NULL, NULL, "-device bochs-display,addr=06.0", &a, &b);
    ring_setup(a, 0, 16);
    vga = qpci_device_find(a->bus, QPCI_DEVFN(6, 0));
    g_assert(vga);
    qpci_device_enable(vga);
    vram = qpci_iomap(vga, 0, NULL);
    b4 = qpci_iomap(b->dev, SPYRE_BAR_MSIX, NULL);
    fill(page, PAGE, 7);
    devmem_write(a, 0, page, PAGE);
    hostpage = zalloc(a, PAGE);

    /* Peer BAR0: data landing on SCRATCH and RESET */
    c = cmd_dma(1, SPYRE_CMD_F_DST_HOST, 0, 0, dir_linear(a, b->bar0.addr, 1),
                0, PAGE);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    c = cmd_dma(2, SPYRE_CMD_F_SRC_HOST, dir_linear(a, b->bar0.addr, 1), 0,
                0, 0, 64);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    g_assert_cmphex(rd(b, SPYRE_REG_SCRATCH), ==, 0);
    g_assert_cmpuint(rd(b, SPYRE_REG_TELE_RESETS), ==, 0);
    /* Peer BAR4 (MSI-X table) both ways */
    qtest_memread(a->qts, b4.addr, msix, sizeof(msix));
    c = cmd_dma(3, SPYRE_CMD_F_DST_HOST, 0, 0, dir_linear(a, b4.addr, 1), 0,
                64);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    c = cmd_dma(4, SPYRE_CMD_F_SRC_HOST, dir_linear(a, b4.addr, 1), 0, 0, 0,
                64);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    qtest_memread(a->qts, b4.addr, got, sizeof(msix));
    g_assert(memcmp(got, msix, sizeof(msix)) == 0);
    /* Own BAR2 through the host path */
    c = cmd_dma(5, SPYRE_CMD_F_DST_HOST, 0, 0,
                dir_linear(a, a->bar2.addr + 0x10000, 1), 0, PAGE);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    devmem_read(a, 0x10000, got, PAGE);
    g_assert(memcmp(got, page, PAGE) != 0);
    /* Another device type's RAM BAR */
    qtest_memset(a->qts, vram.addr, 0, PAGE);
    c = cmd_dma(6, SPYRE_CMD_F_DST_HOST, 0, 0, dir_linear(a, vram.addr, 1), 0,
                PAGE);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    qtest_memread(a->qts, vram.addr, got, PAGE);
    g_assert(!memcmp(got, zero, PAGE));
    /* The directory itself in the peer's BAR2 (naming a host RAM page) */
    qtest_writeq(a->qts, b->bar2.addr + 0x1000, b->bar2.addr + 0x2000);
    qtest_writeq(a->qts, b->bar2.addr + 0x2000, hostpage);
    c = cmd_dma(7, SPYRE_CMD_F_DST_HOST, 0, 0, b->bar2.addr + 0x1000, 0, 64);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    /* ... or a page table there */
    dir = zalloc(a, 8);
    qtest_writeq(a->qts, dir, b->bar2.addr + 0x2000);
    c = cmd_dma(8, SPYRE_CMD_F_DST_HOST, 0, 0, dir, 0, 64);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    qtest_memread(a->qts, hostpage, got, 64);
    g_assert(!memcmp(got, zero, 64));
    /* A fence into the peer's BAR2 */
    c = cmd_fence(9, b->bar2.addr + 0x3000, 0x1122334455667788ull);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    g_assert_cmphex(qtest_readq(a->qts, b->bar2.addr + 0x3000), ==, 0);
    /*
     * A contiguous run from the peer's last page past the end of its BAR2:
     * the peer page is written, then the copy fails.
     */
    qtest_memset(a->qts, b->bar2.addr + DEVMEM - PAGE, 0, PAGE);
    c = cmd_dma(10, SPYRE_CMD_F_DST_HOST, 0, 0,
                dir_linear(a, b->bar2.addr + DEVMEM - PAGE, 2), 0, 2 * PAGE);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    assert_devmem(b, DEVMEM - PAGE, page, PAGE);
    /* The peer's Memory Space Enable clear: its BAR2 does not decode */
    qpci_config_writew(b->dev, PCI_COMMAND,
                       qpci_config_readw(b->dev, PCI_COMMAND) &
                       ~PCI_COMMAND_MEMORY);
    c = cmd_dma(11, SPYRE_CMD_F_DST_HOST, 0, 0,
                dir_linear(a, b->bar2.addr + 0x10000, 1), 0, PAGE);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    qpci_device_enable(b->dev);
    devmem_read(b, 0x10000, got, PAGE);
    g_assert(memcmp(got, page, PAGE) != 0);
    /* Failed copies count no peer bytes. */
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==, 0);
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_RD_BYTES_LO), ==, 0);
    /* A peer copy still works */
    c = cmd_dma(12, SPYRE_CMD_F_DST_HOST, 0, 0,
                dir_linear(a, b->bar2.addr + 0x10000, 1), 0, PAGE);
    check_dma_ok(submit(a, 0, &c), 12);
    assert_devmem(b, 0x10000, page, PAGE);
    g_free(vga);
    pair_stop(a, b);
}

/*
 * p2p=off: CAP_P2P clear, copies to or from a peer's BAR2 fail with
 * ERR_HOST_DMA without writing (1.5's behaviour); the peer, p2p on, still
 * reaches this card's BAR2.
 */
static void test_p2p_off(void)
{
    Spyre *a, *b;
    uint8_t page[PAGE], got[PAGE];
    struct spyre_hw_cmd c;
    uint32_t nerr = 0;

    pair_start("q35", ",p2p=off", NULL, NULL, &a, &b);
    g_assert_cmphex(rd(a, SPYRE_REG_CAPS) & SPYRE_CAP_P2P, ==, 0);
    g_assert_cmphex(rd(b, SPYRE_REG_CAPS) & SPYRE_CAP_P2P, ==, SPYRE_CAP_P2P);
    ring_setup(a, 0, 8);
    ring_setup(b, 0, 8);
    fill(page, PAGE, 8);
    devmem_write(a, 0, page, PAGE);
    c = cmd_dma(1, SPYRE_CMD_F_DST_HOST, 0, 0,
                dir_linear(a, b->bar2.addr + 0x10000, 1), 0, PAGE);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    devmem_read(b, 0x10000, got, PAGE);
    g_assert(memcmp(got, page, PAGE) != 0);
    c = cmd_dma(2, SPYRE_CMD_F_SRC_HOST,
                dir_linear(a, b->bar2.addr + 0x10000, 1), 0, 0x20000, 0, PAGE);
    expect_error(a, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_RD_BYTES_LO), ==, 0);
    /* b pulls a's page */
    c = cmd_dma(3, SPYRE_CMD_F_SRC_HOST, dir_linear(b, a->bar2.addr, 1), 0,
                0x10000, 0, PAGE);
    check_dma_ok(submit(b, 0, &c), 3);
    assert_devmem(b, 0x10000, page, PAGE);
    pair_stop(a, b);
}

/* Wait until ring n of s consumed everything (worker copies included). */
static void ring_wait(Spyre *s, int n)
{
    double t0 = now_ms();

    while (rrd(s, n, SPYRE_RING_HEAD) != s->ring[n].tail) {
        g_assert_cmpfloat(now_ms() - t0, <, 60000);
        qtest_clock_step(s->qts, 1000);
        g_usleep(1000);
    }
}

/*
 * Both cards copy 8 MiB to each other at the same time, on their DMA
 * workers, three rounds on two rings each: every byte lands, nothing waits
 * for the other card.
 */
static void test_p2p_concurrent(void)
{
    const size_t half = 4 * 1024 * 1024;
    g_autofree uint8_t *wa = g_malloc(2 * half);
    g_autofree uint8_t *wb = g_malloc(2 * half);
    Spyre *a, *b;
    uint64_t da, db;
    struct spyre_hw_cmd c;
    int round, n;
    double t0;

    pair_start("q35", NULL, NULL, NULL, &a, &b);
    for (n = 0; n < 2; n++) {
        ring_setup(a, n, 8);
        ring_setup(b, n, 8);
    }
    da = dir_linear(a, b->bar2.addr + 2 * half, 2 * half / PAGE);
    db = dir_linear(b, a->bar2.addr + 2 * half, 2 * half / PAGE);
    for (round = 0; round < 3; round++) {
        devmem_fill(a, 0, 2 * half, 10 + round, wa);
        devmem_fill(b, 0, 2 * half, 20 + round, wb);
        t0 = now_ms();
        for (n = 0; n < 2; n++) {
            c = cmd_dma(round * 2 + n, SPYRE_CMD_F_DST_HOST, n * half, 0, da,
                        n * half, half);
            ring_queue(a, n, &c);
            c = cmd_dma(round * 2 + n, SPYRE_CMD_F_DST_HOST, n * half, 0, db,
                        n * half, half);
            ring_queue(b, n, &c);
        }
        for (n = 0; n < 2; n++) {
            rwr(a, n, SPYRE_RING_TAIL, a->ring[n].tail);
            rwr(b, n, SPYRE_RING_TAIL, b->ring[n].tail);
        }
        for (n = 0; n < 2; n++) {
            ring_wait(a, n);
            ring_wait(b, n);
            check_dma_ok(ring_cpl(a, n, (a->ring[n].tail + 7) % 8),
                         round * 2 + n);
            check_dma_ok(ring_cpl(b, n, (b->ring[n].tail + 7) % 8),
                         round * 2 + n);
        }
        g_test_message("round %d: 2 x 8 MiB crossing in %.1f ms", round,
                       now_ms() - t0);
        assert_devmem(b, 2 * half, wa, 2 * half);
        assert_devmem(a, 2 * half, wb, 2 * half);
    }
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==, 6 * half);
    g_assert_cmpuint(rd64(b, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==, 6 * half);
    assert_alive(a, 0);
    assert_alive(b, 0);
    pair_stop(a, b);
}

/*
 * Queue seven 16 MiB copies into B's BAR2 on each of A's four rings and
 * start the first of each (the DMA worker runs them one after the other);
 * returns once one runs or is done. peer_copies_rest() starts the others.
 */
static void queue_peer_copies(Spyre *a, uint64_t b_bar2)
{
    uint64_t dir = dir_linear(a, b_bar2, DEVMEM / PAGE);
    struct spyre_hw_cmd c;
    double t0;
    int n, k;

    for (n = 0; n < NRINGS; n++) {
        rwr(a, n, SPYRE_RING_CTRL, 0);
        ring_setup(a, n, 8);
        for (k = 0; k < 7; k++) {
            c = cmd_dma(100 + n * 10 + k, SPYRE_CMD_F_DST_HOST, 0, 0, dir, 0,
                        DEVMEM);
            ring_queue(a, n, &c);
        }
        rwr(a, n, SPYRE_RING_TAIL, 1);
    }
    t0 = now_ms();
    while (!(rrd(a, 0, SPYRE_RING_EXEC_TIME) & SPYRE_RING_EXEC_RUNNING) &&
           rrd(a, 0, SPYRE_RING_HEAD) == 0) {
        g_assert_cmpfloat(now_ms() - t0, <, 10000);
        qtest_clock_step(a->qts, 100);
    }
}

static void peer_copies_rest(Spyre *a)
{
    int n;

    for (n = 0; n < NRINGS; n++) {
        rwr(a, n, SPYRE_RING_TAIL, a->ring[n].tail);
    }
}

/*
 * Wait for A's peer copies; each ends OK or ERR_HOST_DMA (none cancelled,
 * none other). With @later_fail, those started after the peer went away
 * (all but the first of each ring) must have failed. Returns how many of
 * the first ones, which ran while it went, failed.
 */
static int wait_peer_copies(Spyre *a, bool later_fail)
{
    int n, k, failed = 0;

    for (n = 0; n < NRINGS; n++) {
        ring_wait(a, n);
        for (k = 0; k < 7; k++) {
            struct spyre_hw_cpl p = ring_cpl(a, n, k);

            g_assert_cmpuint(p.seqno, ==, 100 + n * 10 + k);
            g_assert(p.status == SPYRE_STATUS_OK ||
                     p.status == SPYRE_STATUS_ERR_HOST_DMA);
            if (k == 0) {
                failed += p.status != SPYRE_STATUS_OK;
            } else if (later_fail) {
                g_assert_cmpuint(p.status, ==, SPYRE_STATUS_ERR_HOST_DMA);
            } else {
                g_assert_cmpuint(p.status, ==, SPYRE_STATUS_OK);
            }
        }
    }
    return failed;
}

/*
 * The peer is reset while copies into its BAR2 run. A register RESET keeps
 * its BARs and device memory: every copy completes OK with its data. A
 * function-level reset clears its BARs: the copies running then end OK or
 * with ERR_HOST_DMA at their next piece, the later ones fail at their
 * first; once the peer is enabled again copies reach it again.
 */
static void test_p2p_peer_reset(void)
{
    g_autofree uint8_t *want = g_malloc(DEVMEM);
    Spyre *a, *b;
    struct spyre_hw_cmd c;
    uint16_t exp;
    int failed;

    pair_start("q35", NULL, NULL, NULL, &a, &b);
    devmem_fill(a, 0, DEVMEM, 30, want);
    queue_peer_copies(a, b->bar2.addr);
    wr(b, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    peer_copies_rest(a);
    wait_ready(b);
    failed = wait_peer_copies(a, false);
    g_assert_cmpint(failed, ==, 0);
    assert_devmem(b, 0, want, DEVMEM);
    g_assert_cmpuint(rd(b, SPYRE_REG_TELE_RESETS), ==, 1);

    queue_peer_copies(a, b->bar2.addr);
    exp = qpci_find_capability(b->dev, PCI_CAP_ID_EXP, 0);
    qpci_config_writew(b->dev, exp + PCI_EXP_DEVCTL,
                       qpci_config_readw(b->dev, exp + PCI_EXP_DEVCTL) |
                       PCI_EXP_DEVCTL_BCR_FLR);
    peer_copies_rest(a);
    failed = wait_peer_copies(a, true);
    g_test_message("%d of the 4 copies running at the peer's FLR failed",
                   failed);
    assert_alive(a, 0);
    qpci_device_enable(b->dev);
    b->bar0 = qpci_iomap(b->dev, SPYRE_BAR_REGS, NULL);
    b->bar2 = qpci_iomap(b->dev, SPYRE_BAR_DEVMEM, NULL);
    g_assert_cmphex(rd(b, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);
    ring_setup(b, 0, 8);
    assert_alive(b, 0);
    c = cmd_dma(1, SPYRE_CMD_F_DST_HOST, 0, 0,
                dir_linear(a, b->bar2.addr, 4), 0, 4 * PAGE);
    check_dma_ok(submit(a, 0, &c), 1);
    assert_devmem(b, 0, want, 4 * PAGE);
    pair_stop(a, b);
}

/*
 * The peer is hot-unplugged while copies into its BAR2 run: QEMU survives,
 * the copies running then end OK or with ERR_HOST_DMA, the later ones and
 * a new one to its old address fail (it no longer translates), the card
 * works on.
 */
static void test_p2p_peer_unplug(void)
{
    Spyre *a, *b;
    uint64_t b_bar2;
    struct spyre_hw_cmd c;
    int failed;

    pair_start("pc", NULL, NULL, NULL, &a, &b);
    b_bar2 = b->bar2.addr;
    /* Peer copies work on a conventional PCI bus too. */
    ring_setup(a, 0, 8);
    c = cmd_dma(1, SPYRE_CMD_F_DST_HOST, 0, 0, dir_linear(a, b_bar2, 1), 0,
                PAGE);
    check_dma_ok(submit(a, 0, &c), 1);
    queue_peer_copies(a, b_bar2);
    qpci_unplug_acpi_device_test(a->qts, "spyre1", SLOT_B);
    g_assert(!qpci_device_find(a->bus, QPCI_DEVFN(SLOT_B, 0)));
    peer_copies_rest(a);
    failed = wait_peer_copies(a, true);
    g_test_message("%d of the 4 copies running at the peer's unplug failed",
                   failed);
    qtest_qmp_assert_success(a->qts, "{ 'execute': 'query-status' }");
    assert_alive(a, 0);
    c = cmd_dma(2, SPYRE_CMD_F_DST_HOST, 0, 0, dir_linear(a, b_bar2, 1), 0,
                PAGE);
    g_assert_cmpuint(submit(a, 0, &c).status, ==, SPYRE_STATUS_ERR_HOST_DMA);
    pair_stop(a, b);
}

/*
 * The link says what the card is: PCIe Gen5 (32 GT/s) x16 in LNKCAP,
 * LNKCAP2 and LNKSTA (what lspci -vv shows), behind a root port (bus 1,
 * reached by numbering the port's secondary bus) and on pcie.0.
 */
static void check_link(QPCIDevice *d)
{
    uint8_t exp = qpci_find_capability(d, PCI_CAP_ID_EXP, 0);
    uint32_t cap, cap2;
    uint16_t sta;

    g_assert_cmpuint(exp, !=, 0);
    cap = qpci_config_readl(d, exp + PCI_EXP_LNKCAP);
    cap2 = qpci_config_readl(d, exp + PCI_EXP_LNKCAP2);
    sta = qpci_config_readw(d, exp + PCI_EXP_LNKSTA);
    g_assert_cmphex(cap & PCI_EXP_LNKCAP_SLS, ==, PCI_EXP_LNKCAP_SLS_32_0GB);
    g_assert_cmphex((cap & PCI_EXP_LNKCAP_MLW) >> 4, ==, 16);
    g_assert_cmphex(cap2 & PCI_EXP_LNKCAP2_SLS_32_0GB, ==,
                    PCI_EXP_LNKCAP2_SLS_32_0GB);
    g_assert_cmphex(sta & PCI_EXP_LNKSTA_CLS, ==, PCI_EXP_LNKSTA_CLS_32_0GB);
    g_assert_cmphex((sta & PCI_EXP_LNKSTA_NLW) >> PCI_EXP_LNKSTA_NLW_SHIFT,
                    ==, 16);
}

/*
 * The root port as tools/vm/spyre-vm creates it (x-speed=32,x-width=16):
 * its link status follows the card's, Gen5 x16, not limited by the port.
 */
static void test_pcie_link(void)
{
    Spyre *s = spyre_start(" -device pcie-root-port,id=rp0,bus=pcie.0,"
                           "chassis=1,slot=1,addr=06.0,x-speed=32,x-width=16 "
                           "-device spyre,id=spyre1,bus=rp0,devmem-size=1M");
    QPCIDevice *rp = qpci_device_find(s->bus, QPCI_DEVFN(6, 0));
    QPCIDevice *ep;
    uint8_t exp;

    g_assert(rp);
    qpci_config_writeb(rp, PCI_SECONDARY_BUS, 1);
    qpci_config_writeb(rp, PCI_SUBORDINATE_BUS, 1);
    /* The config address's bus number is devfn's bits 15:8. */
    ep = qpci_device_find(s->bus, 1 << 8 | QPCI_DEVFN(0, 0));
    g_assert(ep);
    g_assert_cmphex(qpci_config_readw(ep, PCI_DEVICE_ID), ==,
                    SPYRE_PCI_DEVICE_ID);
    exp = qpci_find_capability(ep, PCI_CAP_ID_EXP, 0);
    g_assert_cmphex((qpci_config_readw(ep, exp + PCI_EXP_FLAGS) &
                     PCI_EXP_FLAGS_TYPE) >> 4, ==, PCI_EXP_TYPE_ENDPOINT);
    check_link(ep);
    check_link(s->dev);
    exp = qpci_find_capability(rp, PCI_CAP_ID_EXP, 0);
    g_assert_cmphex(qpci_config_readw(rp, exp + PCI_EXP_LNKSTA) &
                    (PCI_EXP_LNKSTA_CLS | PCI_EXP_LNKSTA_NLW), ==,
                    PCI_EXP_LNKSTA_CLS_32_0GB | 16 << PCI_EXP_LNKSTA_NLW_SHIFT);
    g_free(ep);
    g_free(rp);
    spyre_stop(s);
}

/* ---- Modeled clock (1.7, CAP_CPL_TIME) ---- */

/* Ring n with 64-byte completion entries that carry start and end. */
static void ring_setup_timed(Spyre *s, int n, uint32_t size)
{
    Ring *r = &s->ring[n];

    r->size = size;
    r->cmd = zalloc(s, size * sizeof(struct spyre_hw_cmd));
    r->cpl = zalloc(s, size * sizeof(struct spyre_hw_cpl_time));
    r->tail = 0;
    r->cpl_size = sizeof(struct spyre_hw_cpl_time);
    ring_program(s, n, r->cmd, r->cpl, size);
    rwr(s, n, SPYRE_RING_CTRL, 0);
    rwr(s, n, SPYRE_RING_CTRL,
        SPYRE_RING_CTRL_ENABLE | SPYRE_RING_CTRL_CPL_TIME);
    g_assert_cmphex(rrd(s, n, SPYRE_RING_CTRL), ==,
                    SPYRE_RING_CTRL_ENABLE | SPYRE_RING_CTRL_CPL_TIME);
}

/* Completion idx of timed ring n: OK, seqno, end - start == cycles. */
static struct spyre_hw_cpl_time cpl_time(Spyre *s, int n, uint32_t idx,
                                         uint64_t seqno)
{
    struct spyre_hw_cpl_time c;

    qtest_memread(s->qts, s->ring[n].cpl + idx * sizeof(c), &c, sizeof(c));
    g_assert_cmpuint(c.cpl.seqno, ==, seqno);
    g_assert_cmpuint(c.cpl.status, ==, SPYRE_STATUS_OK);
    g_assert_cmpuint(c.end_cycle - c.start_cycle, ==, c.cpl.cycles);
    g_assert_cmpuint(c.reserved[0] | c.reserved[1], ==, 0);
    return c;
}

static void wait_head(Spyre *s, int n)
{
    double t0 = now_ms();

    while (rrd(s, n, SPYRE_RING_HEAD) != s->ring[n].tail) {
        g_assert_cmpfloat(now_ms() - t0, <, 60000);
        qtest_clock_step(s->qts, 1000);
        g_usleep(200);
    }
}

/*
 * Each command gets a modeled start and end (hw 1.7): start = max(its
 * ring's previous end, its unit free, the latest end the card had posted
 * at its doorbell). A copy on one ring and a launch on another overlap;
 * two copies share the DMA engine and serialise; a command rung after
 * another completed starts at its end; a ring without CPL_TIME keeps
 * 32-byte entries; a reset starts the clock again at 0.
 */
static void test_cpl_time(void)
{
    Spyre *s = spyre_start(",x-engine-threads=2");
    const size_t len = 4 * 1024 * 1024;
    struct spyre_hw_cpl_time cp, ln, a, b, n0, n1;
    struct spyre_hw_cmd c;
    uint64_t iters = 200000, cycles;
    uint32_t il, ic, ia, ib, i0, i1;

    g_assert_cmphex(rd(s, SPYRE_REG_CAPS) & SPYRE_CAP_CPL_TIME, ==,
                    SPYRE_CAP_CPL_TIME);
    ring_setup_timed(s, 0, 8);
    ring_setup_timed(s, 1, 8);
    ring_setup_timed(s, 2, 8);
    /* A launch that runs >= 200 ms of host time, so both rings ring first. */
    ring_setup(s, 3, 8);
    while (ts_alone(s, 3, iters, &cycles) < 200) {
        iters *= 2;
    }
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    wait_ready(s);
    ring_setup_timed(s, 0, 8);
    ring_setup_timed(s, 1, 8);
    ring_setup_timed(s, 2, 8);

    /* Two rings, two units: the launch and the copy both start at 0. */
    il = ts_launch(s, 1, 10, 3, iters);
    c = cmd_dma(11, 0, 0x100000, 0, 0x800000, 0, len);
    ic = ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    wait_head(s, 0);
    wait_head(s, 1);
    ts_check(s, 1, 3, iters);
    ln = cpl_time(s, 1, il, 10);
    cp = cpl_time(s, 0, ic, 11);
    g_assert_cmpuint(ln.cpl.cycles, ==, cycles);
    g_assert_cmpuint(ln.start_cycle, ==, 0);
    g_assert_cmpuint(cp.start_cycle, ==, 0);
    g_assert_cmpuint(cp.end_cycle, <, ln.end_cycle);

    /* Rung after both completed: starts when the later one ended. */
    c = cmd_nop(12, 0);
    i0 = ring_queue(s, 2, &c);
    c = cmd_nop(13, 0);
    i1 = ring_queue(s, 2, &c);
    rwr(s, 2, SPYRE_RING_TAIL, s->ring[2].tail);
    wait_head(s, 2);
    n0 = cpl_time(s, 2, i0, 12);
    n1 = cpl_time(s, 2, i1, 13);
    g_assert_cmpuint(n0.start_cycle, ==, ln.end_cycle);
    /* The same ring: in order. */
    g_assert_cmpuint(n1.start_cycle, ==, n0.end_cycle);

    /* Two copies on two rings share the DMA engine. */
    c = cmd_dma(14, 0, 0x100000, 0, 0x800000, 0, len);
    ia = ring_queue(s, 0, &c);
    c = cmd_dma(15, 0, 0x800000, 0, 0x100000, 0, len / 2);
    ib = ring_queue(s, 1, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    wait_head(s, 0);
    wait_head(s, 1);
    a = cpl_time(s, 0, ia, 14);
    b = cpl_time(s, 1, ib, 15);
    g_assert_cmpuint(a.start_cycle, >=, n1.end_cycle);
    g_assert_cmpuint(b.start_cycle, >=, n1.end_cycle);
    if (a.start_cycle < b.start_cycle) {
        g_assert_cmpuint(b.start_cycle, ==, a.end_cycle);
    } else {
        g_assert_cmpuint(a.start_cycle, ==, b.end_cycle);
    }

    /* Without CPL_TIME: 32-byte entries, nothing past them written. */
    rwr(s, 2, SPYRE_RING_CTRL, 0);
    ring_setup(s, 2, 8);
    qtest_memset(s->qts, s->ring[2].cpl, 0xee, 8 * sizeof(cp));
    c = cmd_nop(16, 0);
    i0 = ring_queue(s, 2, &c);
    c = cmd_nop(17, 0);
    i1 = ring_queue(s, 2, &c);
    rwr(s, 2, SPYRE_RING_TAIL, s->ring[2].tail);
    wait_head(s, 2);
    g_assert_cmpuint(ring_cpl(s, 2, i0).seqno, ==, 16);
    g_assert_cmpuint(ring_cpl(s, 2, i1).seqno, ==, 17);
    g_assert_cmphex(qtest_readq(s->qts, s->ring[2].cpl +
                                2 * sizeof(struct spyre_hw_cpl)), ==,
                    0xeeeeeeeeeeeeeeeeULL);

    /* A reset starts the clock again. */
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    wait_ready(s);
    ring_setup_timed(s, 0, 8);
    c = cmd_nop(18, 0);
    i0 = ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    wait_head(s, 0);
    n0 = cpl_time(s, 0, i0, 18);
    g_assert_cmpuint(n0.start_cycle, ==, 0);
    g_assert_cmpuint(n0.end_cycle, ==, 16);
    spyre_stop(s);
}

/* ---- Semaphores (hw 1.8, CAP_SEM) ---- */

#define SEM_POLL_NS     50000   /* SPYRE_SEM_POLL_US */

static struct spyre_hw_cmd cmd_sem(uint8_t opcode, uint64_t seqno,
                                   uint8_t flags, uint64_t addr,
                                   uint64_t offset, uint64_t value,
                                   uint32_t timeout_us)
{
    struct spyre_hw_cmd c = { 0 };

    c.hdr.opcode = opcode;
    c.hdr.flags = flags;
    c.hdr.seqno = seqno;
    c.sem.addr = addr;
    c.sem.offset = offset;
    c.sem.value = value;
    c.sem.timeout_us = timeout_us;
    return c;
}

static struct spyre_hw_cmd cmd_signal(uint64_t seqno, uint8_t flags,
                                      uint64_t addr, uint64_t offset,
                                      uint64_t value)
{
    return cmd_sem(SPYRE_OP_SEM_SIGNAL, seqno, flags, addr, offset, value, 0);
}

static struct spyre_hw_cmd cmd_wait(uint64_t seqno, uint8_t flags,
                                    uint64_t addr, uint64_t offset,
                                    uint64_t value, uint32_t timeout_us)
{
    return cmd_sem(SPYRE_OP_SEM_WAIT, seqno, flags, addr, offset, value,
                   timeout_us);
}

/* Timed completion idx of ring n, any status. */
static struct spyre_hw_cpl_time cpl_any(Spyre *s, int n, uint32_t idx)
{
    struct spyre_hw_cpl_time c;

    qtest_memread(s->qts, s->ring[n].cpl + idx * sizeof(c), &c, sizeof(c));
    return c;
}

/* Ring n consumed nothing past idx and holds it: BUSY, EXEC_* on it. */
static void assert_waiting(Spyre *s, int n, uint32_t idx, uint64_t seqno)
{
    uint32_t exec;

    g_assert_cmpuint(rrd(s, n, SPYRE_RING_HEAD), ==, idx);
    g_assert_cmphex(rrd(s, n, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED | SPYRE_RING_STATUS_BUSY);
    g_assert_cmpuint(rrd(s, n, SPYRE_RING_EXEC_SEQNO), ==, seqno);
    exec = rrd(s, n, SPYRE_RING_EXEC_TIME);
    g_assert_cmphex(exec & SPYRE_RING_EXEC_RUNNING, ==,
                    SPYRE_RING_EXEC_RUNNING);
}

/* Step the virtual clock by ns in poll periods, letting the card run. */
static void sem_step(Spyre *s, uint64_t ns)
{
    while (ns) {
        uint64_t d = MIN(ns, SEM_POLL_NS);

        qtest_clock_step(s->qts, d);
        ns -= d;
    }
}

/*
 * Signal then wait on one ring: value and cycle stored (the signal's end),
 * the wait completes at once, ends no earlier than the signal; a wait for
 * a smaller value completes too (>=, unsigned); the values are little
 * endian in device memory.
 */
static void test_sem_local(void)
{
    Spyre *s = spyre_start(NULL);
    const uint64_t sem = 0x1000;
    struct spyre_hw_cpl_time sg, wt;
    struct spyre_hw_cmd c;
    uint64_t v[2];
    uint32_t is, iw;

    ring_setup_timed(s, 0, 8);
    c = cmd_signal(1, SPYRE_CMD_F_IRQ, sem, 0, 42);
    is = ring_queue(s, 0, &c);
    c = cmd_wait(2, 0, 0x800, 0x800, 42, 0);
    iw = ring_queue(s, 0, &c);
    c = cmd_wait(3, 0, sem, 0, 7, 0);
    ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    sg = cpl_time(s, 0, is, 1);
    g_assert_cmpuint(sg.cpl.cycles, ==, 32);
    devmem_read(s, sem, v, sizeof(v));
    g_assert_cmpuint(le64_to_cpu(v[0]), ==, 42);
    g_assert_cmpuint(le64_to_cpu(v[1]), ==, sg.end_cycle);
    wt = cpl_time(s, 0, iw, 2);
    g_assert_cmpuint(wt.cpl.cycles, ==, 16);
    g_assert_cmpuint(wt.start_cycle, >=, sg.end_cycle);
    g_assert_cmpuint(wt.end_cycle, >=, sg.end_cycle + 16);
    cpl_time(s, 0, iw + 1, 3);

    /* A stored cycle ahead of the ring moves its clock (Lamport join). */
    v[0] = cpu_to_le64(100);
    v[1] = cpu_to_le64(1000000);
    devmem_write(s, sem, v, sizeof(v));
    c = cmd_wait(4, 0, sem, 0, 100, 0);
    iw = ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    wt = cpl_time(s, 0, iw, 4);
    g_assert_cmpuint(wt.end_cycle, ==, 1000000 + 16);
    /* Unsigned: UINT64_MAX is reached by nothing smaller */
    c = cmd_wait(5, 0, sem, 0, UINT64_MAX, 0);
    iw = ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    g_assert_cmpuint(cpl_any(s, 0, iw).cpl.status, ==,
                     SPYRE_STATUS_ERR_TIMEOUT);
    g_assert_cmpuint(cpl_any(s, 0, iw).cpl.cycles, ==, 16);
    spyre_stop(s);
}

/*
 * A wait on ring 1 rung first is released by a signal on ring 0 rung
 * later: ring 1 holds the wait (BUSY, EXEC_* name it) while ring 2 keeps
 * going; the wait completes after the signal, its modeled end after the
 * signal's although its ring's doorbell came first.
 */
static void test_sem_cross_ring(void)
{
    Spyre *s = spyre_start(NULL);
    const uint64_t sem = 0x2000;
    struct spyre_hw_cpl_time sg, wt;
    struct spyre_hw_cmd c;
    uint32_t is, iw, in, i;

    ring_setup_timed(s, 0, 8);
    ring_setup_timed(s, 1, 8);
    ring_setup(s, 2, 8);
    /* Ring 0's clock ahead: a copy first, so the signal ends late. */
    c = cmd_dma(9, 0, 0x100000, 0, 0x200000, 0, 65536);
    ring_queue(s, 0, &c);
    c = cmd_wait(20, 0, sem, 0, 5, SPYRE_SEM_WAIT_MAX_US);
    iw = ring_queue(s, 1, &c);
    c = cmd_nop(21, 0);
    in = ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    for (i = 0; i < 10; i++) {
        qtest_clock_step(s->qts, 1000);
    }
    assert_waiting(s, 1, iw, 20);
    /* Other rings keep going */
    c = cmd_nop(30, 0);
    g_assert_cmpuint(submit(s, 2, &c).status, ==, SPYRE_STATUS_OK);
    assert_waiting(s, 1, iw, 20);
    /* A smaller value does not release it */
    c = cmd_signal(10, 0, sem, 0, 4);
    ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    sem_step(s, 2 * SEM_POLL_NS);
    assert_waiting(s, 1, iw, 20);
    c = cmd_signal(11, 0, sem, 0, 5);
    is = ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    sg = cpl_time(s, 0, is, 11);
    /* Released by the completion itself */
    wait_head(s, 1);
    wt = cpl_time(s, 1, iw, 20);
    g_assert_cmpuint(wt.end_cycle, >=, sg.end_cycle);
    g_assert_cmpuint(wt.end_cycle, ==, MAX(wt.start_cycle, sg.end_cycle) + 16);
    g_assert_cmpuint(cpl_time(s, 1, in, 21).start_cycle, ==, wt.end_cycle);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED);
    g_assert_cmpuint(rrd(s, 1, SPYRE_RING_EXEC_TIME), ==, 0);
    spyre_stop(s);
}

/*
 * A wait released by the host writing the value through BAR2 (seen at the
 * next poll period), and one on a host page directory released by a write
 * to host memory; a signal into host memory; EXEC_TIME counts the
 * milliseconds waited.
 */
static void test_sem_host(void)
{
    Spyre *s = spyre_start(NULL);
    const uint64_t sem = 0x3010;
    HostBuf *h = hostbuf_new(s, 2, true);
    struct spyre_hw_cpl_time wt, sg;
    struct spyre_hw_cmd c;
    uint64_t v[2];
    uint32_t iw, is;

    ring_setup_timed(s, 0, 8);
    c = cmd_wait(1, 0, sem, 0, 3, SPYRE_SEM_WAIT_MAX_US);
    iw = ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    qtest_clock_step(s->qts, 1000);
    assert_waiting(s, 0, iw, 1);
    sem_step(s, 3 * 1000 * 1000);
    assert_waiting(s, 0, iw, 1);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_EXEC_TIME) &
                     SPYRE_RING_EXEC_MS_MASK, ==, 3);
    v[0] = cpu_to_le64(3);
    v[1] = cpu_to_le64(777);
    devmem_write(s, sem, v, sizeof(v));
    sem_step(s, SEM_POLL_NS);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, s->ring[0].tail);
    wt = cpl_time(s, 0, iw, 1);
    g_assert_cmpuint(wt.end_cycle, ==, 777 + 16);

    /* In host memory: a signal (DST_HOST), then a wait (SRC_HOST) */
    c = cmd_signal(3, SPYRE_CMD_F_DST_HOST, h->dir, PAGE + 32, 9);
    is = ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    sg = cpl_time(s, 0, is, 3);
    g_assert_cmpuint(sg.cpl.cycles, ==, 32);
    hostbuf_io(s, h, PAGE + 32, v, sizeof(v), false);
    g_assert_cmpuint(le64_to_cpu(v[0]), ==, 9);
    g_assert_cmpuint(le64_to_cpu(v[1]), ==, sg.end_cycle);
    c = cmd_wait(4, SPYRE_CMD_F_SRC_HOST, h->dir, PAGE + 32, 9, 0);
    iw = ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    cpl_time(s, 0, iw, 4);
    c = cmd_wait(5, SPYRE_CMD_F_SRC_HOST, h->dir, 16, 1, 100000);
    iw = ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    sem_step(s, 2 * SEM_POLL_NS);
    assert_waiting(s, 0, iw, 5);
    v[0] = cpu_to_le64(1);
    v[1] = 0;
    hostbuf_io(s, h, 16, v, sizeof(v), true);
    sem_step(s, SEM_POLL_NS);
    cpl_time(s, 0, iw, 5);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, s->ring[0].tail);
    /* A directory entry that cannot be read: ERR_HOST_DMA */
    c = cmd_wait(6, SPYRE_CMD_F_SRC_HOST, h->dir, 1ull << 50, 1, 0);
    iw = ring_queue(s, 0, &c);
    ring_kick_wait(s, 0);
    g_assert_cmpuint(cpl_any(s, 0, iw).cpl.status, ==,
                     SPYRE_STATUS_ERR_HOST_DMA);
    hostbuf_free(h);
    spyre_stop(s);
}

/*
 * A wait that is not released ends with ERR_TIMEOUT once timeout_us of
 * virtual time passed (not before), modeled 16 cycles; the ring goes on.
 */
static void test_sem_timeout(void)
{
    Spyre *s = spyre_start(NULL);
    struct spyre_hw_cpl_time wt;
    struct spyre_hw_cmd c;
    uint32_t iw, in;

    ring_setup_timed(s, 0, 8);
    wr(s, SPYRE_REG_INTR_STATUS, ~0u);
    c = cmd_wait(1, SPYRE_CMD_F_IRQ, 0x4000, 0, 1, 1000);
    iw = ring_queue(s, 0, &c);
    c = cmd_nop(2, 0);
    in = ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    qtest_clock_step(s->qts, 1000);
    assert_waiting(s, 0, iw, 1);
    qtest_clock_step(s->qts, 998 * 1000);
    assert_waiting(s, 0, iw, 1);
    qtest_clock_step(s->qts, 2000);
    g_assert_cmpuint(rrd(s, 0, SPYRE_RING_HEAD), ==, s->ring[0].tail);
    wt = cpl_any(s, 0, iw);
    g_assert_cmpuint(wt.cpl.status, ==, SPYRE_STATUS_ERR_TIMEOUT);
    g_assert_cmpuint(wt.cpl.seqno, ==, 1);
    g_assert_cmpuint(wt.cpl.cycles, ==, 16);
    g_assert_cmpuint(wt.end_cycle - wt.start_cycle, ==, 16);
    g_assert_cmpuint(rd(s, SPYRE_REG_ERROR_CODE), ==,
                     SPYRE_STATUS_ERR_TIMEOUT);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==,
                    SPYRE_INTR_ERROR | SPYRE_INTR_RING(0));
    cpl_time(s, 0, in, 2);
    g_assert_cmphex(rrd(s, 0, SPYRE_RING_STATUS), ==,
                    SPYRE_RING_STATUS_ENABLED);
    spyre_stop(s);
}

/*
 * ABORT of a ring that waits: no completion, BUSY clears at once, the ring
 * is usable again; a card RESET and an FLR drop a waiting SEM_WAIT the same
 * way.
 */
static void test_sem_abort(void)
{
    Spyre *s = spyre_start(NULL);
    struct spyre_hw_cmd c;
    uint32_t iw;
    uint16_t devctl;
    int i;

    ring_setup(s, 1, 8);
    c = cmd_wait(1, SPYRE_CMD_F_IRQ, 0x5000, 0, 1, SPYRE_SEM_WAIT_MAX_US);
    iw = ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    qtest_clock_step(s->qts, 1000);
    assert_waiting(s, 1, iw, 1);
    wr(s, SPYRE_REG_INTR_STATUS, ~0u);
    rwr(s, 1, SPYRE_RING_CTRL, SPYRE_RING_CTRL_ABORT);
    g_assert_cmphex(rrd(s, 1, SPYRE_RING_STATUS), ==, 0);
    g_assert_cmpuint(rrd(s, 1, SPYRE_RING_EXEC_TIME), ==, 0);
    /* Far past its timeout: nothing is completed */
    for (i = 0; i < 3; i++) {
        qtest_clock_step(s->qts, SPYRE_SEM_WAIT_MAX_US * 1000ull);
    }
    g_assert_cmpuint(rrd(s, 1, SPYRE_RING_COMPLETED), ==, 0);
    g_assert_cmphex(rd(s, SPYRE_REG_INTR_STATUS), ==, 0);
    g_assert_cmphex(ring_cpl(s, 1, iw).status, ==, 0xeeeeeeee);
    ring_setup(s, 1, 8);
    assert_alive(s, 1);

    /* A register RESET drops a waiting SEM_WAIT */
    c = cmd_wait(2, 0, 0x5000, 0, 1, SPYRE_SEM_WAIT_MAX_US);
    iw = ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    qtest_clock_step(s->qts, 1000);
    assert_waiting(s, 1, iw, 2);
    wr(s, SPYRE_REG_RESET, SPYRE_RESET_MAGIC);
    wait_ready(s);
    qtest_clock_step(s->qts, 2 * SPYRE_SEM_WAIT_MAX_US * 1000ull);
    g_assert_cmphex(ring_cpl(s, 1, iw).status, ==, 0xeeeeeeee);
    ring_setup(s, 1, 8);
    assert_alive(s, 1);

    /* An FLR drops it too */
    c = cmd_wait(3, 0, 0x5000, 0, 1, SPYRE_SEM_WAIT_MAX_US);
    iw = ring_queue(s, 1, &c);
    rwr(s, 1, SPYRE_RING_TAIL, s->ring[1].tail);
    qtest_clock_step(s->qts, 1000);
    assert_waiting(s, 1, iw, 3);
    devctl = qpci_find_capability(s->dev, PCI_CAP_ID_EXP, 0);
    qpci_config_writew(s->dev, devctl + PCI_EXP_DEVCTL,
                       qpci_config_readw(s->dev, devctl + PCI_EXP_DEVCTL) |
                       PCI_EXP_DEVCTL_BCR_FLR);
    qpci_device_enable(s->dev);
    s->bar0 = qpci_iomap(s->dev, SPYRE_BAR_REGS, NULL);
    s->bar2 = qpci_iomap(s->dev, SPYRE_BAR_DEVMEM, NULL);
    g_assert_cmphex(rd(s, SPYRE_REG_STATUS), ==, SPYRE_STATUS_READY);
    qtest_clock_step(s->qts, 2 * SPYRE_SEM_WAIT_MAX_US * 1000ull);
    g_assert_cmphex(ring_cpl(s, 1, iw).status, ==, 0xeeeeeeee);
    ring_setup(s, 1, 8);
    assert_alive(s, 1);
    spyre_stop(s);
}

/* Hot-unplug of a card whose ring waits: QEMU goes on, its timer is gone. */
static void test_sem_unplug(void)
{
    Spyre *s = spyre_start_on("pc", NULL);
    struct spyre_hw_cmd c;

    ring_setup(s, 0, 8);
    c = cmd_wait(1, 0, 0x5000, 0, 1, SPYRE_SEM_WAIT_MAX_US);
    ring_queue(s, 0, &c);
    rwr(s, 0, SPYRE_RING_TAIL, s->ring[0].tail);
    qtest_clock_step(s->qts, 1000);
    assert_waiting(s, 0, 0, 1);
    qpci_unplug_acpi_device_test(s->qts, "spyre0", SLOT);
    qtest_clock_step(s->qts, 2 * SPYRE_SEM_WAIT_MAX_US * 1000ull);
    qtest_qmp_assert_success(s->qts, "{ 'execute': 'query-status' }");
    g_assert(!qpci_device_find(s->bus, QPCI_DEVFN(SLOT, 0)));
    spyre_stop(s);
}

/* Every malformed field: its status, nothing written, the ring goes on. */
static void test_sem_bad(void)
{
    Spyre *s = spyre_start(NULL);
    const uint64_t sem = 0x6000;
    struct spyre_hw_cmd c;
    uint32_t nerr = 0;
    uint64_t v[2];
    int op;

    ring_setup(s, 0, 8);
    for (op = SPYRE_OP_SEM_SIGNAL; op <= SPYRE_OP_SEM_WAIT; op++) {
        bool wait = op == SPYRE_OP_SEM_WAIT;
        uint8_t host = wait ? SPYRE_CMD_F_SRC_HOST : SPYRE_CMD_F_DST_HOST;
        uint8_t other = wait ? SPYRE_CMD_F_DST_HOST : SPYRE_CMD_F_SRC_HOST;

        c = cmd_sem(op, 1, other, sem, 0, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
        c = cmd_sem(op, 2, 0x08, sem, 0, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
        c = cmd_sem(op, 3, 0, sem, 0, 1, 0);
        c.sem.reserved0 = 1;
        expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
        c = cmd_sem(op, 4, 0, sem, 0, 1, 0);
        c.sem.reserved[0] = 1;
        expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
        c = cmd_sem(op, 5, 0, sem, 0, 1, 0);
        c.sem.reserved[1] = 1ull << 63;
        expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
        c = cmd_sem(op, 6, 0, sem, 0, 1, SPYRE_SEM_WAIT_MAX_US + 1);
        expect_error(s, &c, wait ? SPYRE_STATUS_ERR_SIZE :
                     SPYRE_STATUS_ERR_RESERVED, &nerr);
        if (!wait) {
            c = cmd_sem(op, 7, 0, sem, 0, 1, 1);
            expect_error(s, &c, SPYRE_STATUS_ERR_RESERVED, &nerr);
        }
        c = cmd_sem(op, 8, 0, sem, 8, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_ALIGN, &nerr);
        c = cmd_sem(op, 9, 0, sem + 4, 8, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_ALIGN, &nerr);
        c = cmd_sem(op, 10, 0, DEVMEM - 16, 16, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_DEV_RANGE, &nerr);
        c = cmd_sem(op, 11, 0, UINT64_MAX - 15, 32, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_DEV_RANGE, &nerr);
        c = cmd_sem(op, 12, host, 0x10004, 0, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_ALIGN, &nerr);
        c = cmd_sem(op, 13, host, 0x10000, 40, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_ALIGN, &nerr);
        /* A host directory that is not guest RAM */
        c = cmd_sem(op, 14, host, 0xfffffffffff000ull, 0, 1, 0);
        expect_error(s, &c, SPYRE_STATUS_ERR_HOST_DMA, &nerr);
    }
    /* addr and offset unaligned, their sum aligned: fine */
    c = cmd_wait(19, 0, sem + 4, 12, 0, 0);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
    /* The last device slot is fine */
    c = cmd_signal(20, 0, DEVMEM - 32, 16, 1);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
    devmem_read(s, sem, v, sizeof(v));
    g_assert_cmpuint(v[0] | v[1], ==, 0);
    spyre_stop(s);
}

/*
 * Through a context (section 15): a semaphore at a virtual address mapped
 * to a device page, written and waited on; a read-only page refuses the
 * signal with ERR_MMU_FAULT, an unmapped one faults both.
 */
static void test_sem_mmu(void)
{
    Spyre *s = spyre_start(NULL);
    uint64_t table = mmu_init(s);
    uint64_t l1 = mmu_ctx(s, table, 1);
    struct spyre_hw_cmd c;
    uint64_t v[2];

    ring_setup(s, 0, 8);
    mmu_map(s, l1, MMU_VA, 0x7000 | SPYRE_MMU_VALID | SPYRE_MMU_WRITE);
    mmu_map(s, l1, MMU_VA + PAGE, 0x8000 | SPYRE_MMU_VALID);
    c = in_ctx(cmd_signal(1, 0, MMU_VA, 0x30, 11), 1);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
    devmem_read(s, 0x7030, v, sizeof(v));
    g_assert_cmpuint(le64_to_cpu(v[0]), ==, 11);
    c = in_ctx(cmd_wait(2, 0, MMU_VA, 0x30, 11, 0), 1);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
    /* Read-only: waits fine, a signal faults */
    c = in_ctx(cmd_wait(3, 0, MMU_VA + PAGE, 0, 0, 0), 1);
    g_assert_cmpuint(submit(s, 0, &c).status, ==, SPYRE_STATUS_OK);
    c = in_ctx(cmd_signal(4, 0, MMU_VA + PAGE, 0, 1), 1);
    g_assert_cmpuint(submit(s, 0, &c).status, ==,
                     SPYRE_STATUS_ERR_MMU_FAULT);
    rwr(s, 0, SPYRE_RING_FAULT_INFO, SPYRE_MMU_FAULT_VALID);
    c = in_ctx(cmd_wait(5, 0, MMU_VA + 2 * PAGE, 0, 0, 0), 1);
    g_assert_cmpuint(submit(s, 0, &c).status, ==,
                     SPYRE_STATUS_ERR_MMU_FAULT);
    g_assert_cmphex(rd64(s, SPYRE_RING_REG(0, SPYRE_RING_FAULT_ADDR_LO)), ==,
                    MMU_VA + 2 * PAGE);
    spyre_stop(s);
}

/*
 * Two cards: A signals into a page of B's BAR2 named by a host page
 * directory (a posted write across the link: 32 + P2P latency cycles); B
 * waits on its own device memory and is released at its next poll, its
 * modeled end after A's signal.
 */
static void test_sem_p2p(void)
{
    Spyre *a, *b;
    struct spyre_hw_cpl_time sg, wt;
    struct spyre_hw_cmd c;
    uint64_t dir;
    uint32_t iw, is;

    pair_start("q35", NULL, NULL, NULL, &a, &b);
    ring_setup_timed(a, 0, 8);
    ring_setup_timed(b, 0, 8);
    c = cmd_wait(1, 0, 0x9000, 0x40, 2, SPYRE_SEM_WAIT_MAX_US);
    iw = ring_queue(b, 0, &c);
    rwr(b, 0, SPYRE_RING_TAIL, b->ring[0].tail);
    qtest_clock_step(b->qts, 1000);
    assert_waiting(b, 0, iw, 1);
    dir = dir_linear(a, b->bar2.addr + 0x9000, 1);
    c = cmd_signal(2, SPYRE_CMD_F_DST_HOST, dir, 0x40, 2);
    is = ring_queue(a, 0, &c);
    ring_kick_wait(a, 0);
    sg = cpl_time(a, 0, is, 2);
    g_assert_cmpuint(sg.cpl.cycles, ==, 32 + P2P_LAT);
    sem_step(b, SEM_POLL_NS);
    g_assert_cmpuint(rrd(b, 0, SPYRE_RING_HEAD), ==, b->ring[0].tail);
    wt = cpl_time(b, 0, iw, 1);
    g_assert_cmpuint(wt.end_cycle, ==, sg.end_cycle + 16);
    /* a signal is control traffic: TELE_P2P_WR_BYTES counts copy data only */
    g_assert_cmpuint(rd64(a, SPYRE_REG_TELE_P2P_WR_BYTES_LO), ==, 0);
    pair_stop(a, b);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

    qtest_add_func("/spyre/identity", test_identity);
    qtest_add_func("/spyre/properties", test_properties);
    qtest_add_func("/spyre/bad-properties", test_bad_properties);
    qtest_add_func("/spyre/ring-config", test_ring_config);
    qtest_add_func("/spyre/nop-fence", test_nop_fence);
    qtest_add_func("/spyre/batch", test_batch);
    qtest_add_func("/spyre/dma", test_dma);
    qtest_add_func("/spyre/dma-2d", test_dma_2d);
    qtest_add_func("/spyre/dma-bandwidth", test_dma_bandwidth);
    qtest_add_func("/spyre/dma-large", test_dma_large);
    qtest_add_func("/spyre/dma-async", test_dma_async);
    qtest_add_func("/spyre/errors", test_errors);
    qtest_add_func("/spyre/interrupts", test_interrupts);
    qtest_add_func("/spyre/fuzz", test_fuzz);
    qtest_add_func("/spyre/fuzz-seeds", test_fuzz_seeds);
    qtest_add_func("/spyre/intx", test_intx);
    qtest_add_func("/spyre/reset", test_reset);
    qtest_add_func("/spyre/launch", test_launch);
    qtest_add_func("/spyre/launch-fault", test_launch_fault);
    qtest_add_func("/spyre/launch-bad", test_launch_bad);
    qtest_add_func("/spyre/launch-async", test_launch_async);
    qtest_add_func("/spyre/launch-unplug", test_launch_unplug);
    qtest_add_func("/spyre/dma-to-own-bars", test_dma_to_own_bars);
    qtest_add_func("/spyre/reset-during-mmio-copy",
                   test_reset_during_mmio_copy);
    qtest_add_func("/spyre/unplug-during-mmio-copy",
                   test_unplug_during_mmio_copy);
    qtest_add_func("/spyre/reset-during-huge-launch",
                   test_reset_during_huge_launch);
    qtest_add_func("/spyre/abort-launch", test_abort_launch);
    qtest_add_func("/spyre/abort-copy", test_abort_copy);
    qtest_add_func("/spyre/exec-time", test_exec_time);
    qtest_add_func("/spyre/cpl-time", test_cpl_time);
    qtest_add_func("/spyre/timeslice", test_timeslice);
    qtest_add_func("/spyre/timeslice-off", test_timeslice_off);
    qtest_add_func("/spyre/timeslice-abort", test_timeslice_abort);
    qtest_add_func("/spyre/timeslice-unplug", test_timeslice_unplug);
    qtest_add_func("/spyre/fault-hang", test_fault_hang);
    qtest_add_func("/spyre/fault-inject-off", test_fault_inject_off);
    qtest_add_func("/spyre/msix-pending-on-enable",
                   test_msix_pending_on_enable);
    qtest_add_func("/spyre/mmu-dma", test_mmu_dma);
    qtest_add_func("/spyre/mmu-faults", test_mmu_faults);
    qtest_add_func("/spyre/mmu-fault-inject", test_mmu_fault_inject);
    qtest_add_func("/spyre/mmu-invalidate", test_mmu_invalidate);
    qtest_add_func("/spyre/mmu-launch", test_mmu_launch);
    qtest_add_func("/spyre/bus-master-off", test_bus_master_off);
    qtest_add_func("/spyre/mmu-cache-bound", test_mmu_cache_bound);
    qtest_add_func("/spyre/mmu-cache-evict", test_mmu_cache_evict);
    qtest_add_func("/spyre/mmu-walk-bound", test_mmu_walk_bound);
    qtest_add_func("/spyre/mmu-dirty-bound", test_mmu_dirty_bound);
    qtest_add_func("/spyre/launch-engine-exception",
                   test_launch_engine_exception);
    qtest_add_func("/spyre/p2p-copy", test_p2p_copy);
    qtest_add_func("/spyre/p2p-cycles", test_p2p_cycles);
    qtest_add_func("/spyre/p2p-refused", test_p2p_refused);
    qtest_add_func("/spyre/p2p-off", test_p2p_off);
    qtest_add_func("/spyre/p2p-concurrent", test_p2p_concurrent);
    qtest_add_func("/spyre/p2p-peer-reset", test_p2p_peer_reset);
    qtest_add_func("/spyre/p2p-peer-unplug", test_p2p_peer_unplug);
    qtest_add_func("/spyre/pcie-link", test_pcie_link);
    qtest_add_func("/spyre/sem-local", test_sem_local);
    qtest_add_func("/spyre/sem-cross-ring", test_sem_cross_ring);
    qtest_add_func("/spyre/sem-host", test_sem_host);
    qtest_add_func("/spyre/sem-timeout", test_sem_timeout);
    qtest_add_func("/spyre/sem-abort", test_sem_abort);
    qtest_add_func("/spyre/sem-unplug", test_sem_unplug);
    qtest_add_func("/spyre/sem-bad", test_sem_bad);
    qtest_add_func("/spyre/sem-mmu", test_sem_mmu);
    qtest_add_func("/spyre/sem-p2p", test_sem_p2p);

    return g_test_run();
}
