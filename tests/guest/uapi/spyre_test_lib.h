/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers shared by the guest kselftest suites of the spyre driver (spyre_uapi_test.c,
 * spyre_fault_test.c, spyre_vm_test.c): device nodes, ioctl wrappers, data round trips,
 * debugfs fault injection, and a tiny encoder for engine programs (Documentation/isa.md).
 */
#ifndef SPYRE_TEST_LIB_H
#define SPYRE_TEST_LIB_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <xf86drm.h>

#include "spyre_accel.h"
#include "spyre_hw.h"

#define MAX_CARDS 16
#define SEC_NS 1000000000LL

/* ---- helpers ---- */

static int xioctl(int fd, unsigned long req, void *arg)
{
	int ret;

	do {
		ret = ioctl(fd, req, arg);
	} while (ret == -1 && (errno == EINTR || errno == EAGAIN));
	return ret ? -errno : 0;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * SEC_NS + ts.tv_nsec;
}

/*
 * Minor numbers of the spyre accel nodes, sorted, from sysfs (the node's driver), not by
 * opening them: an open that fails (the failslab run injects allocation failures into
 * spyre_open) must not make another card the first one.
 */
static int spyre_minors(int *minors)
{
	int n = 0, m;

	for (m = 0; m < 64 && n < MAX_CARDS; m++) {
		char path[96], target[256];
		const char *drv;
		ssize_t len;

		snprintf(path, sizeof(path), "/sys/class/accel/accel%d/device/driver", m);
		len = readlink(path, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = 0;
		drv = strrchr(target, '/');
		if (!strcmp(drv ? drv + 1 : target, "spyre"))
			minors[n++] = m;
	}
	return n;
}

static int open_minor(int minor)
{
	char path[64];

	snprintf(path, sizeof(path), "/dev/accel/accel%d", minor);
	return open(path, O_RDWR | O_CLOEXEC);
}

static int open_card(int idx)
{
	int minors[MAX_CARDS];
	int n = spyre_minors(minors);

	return idx < n ? open_minor(minors[idx]) : -1;
}

static int query(int fd, uint32_t param, void *data, uint32_t size)
{
	struct drm_spyre_query q = { .param = param, .size = size,
				     .data = (uintptr_t)data };

	return xioctl(fd, DRM_IOCTL_SPYRE_QUERY, &q);
}

static int bo_create(int fd, uint64_t size, uint32_t flags, uint32_t *handle)
{
	struct drm_spyre_bo_create c = { .size = size, .flags = flags };
	int ret = xioctl(fd, DRM_IOCTL_SPYRE_BO_CREATE, &c);

	if (!ret)
		*handle = c.handle;
	return ret;
}

static int bo_info(int fd, uint32_t handle, struct drm_spyre_bo_info *info)
{
	memset(info, 0, sizeof(*info));
	info->handle = handle;
	return xioctl(fd, DRM_IOCTL_SPYRE_BO_INFO, info);
}

static int bo_close(int fd, uint32_t handle)
{
	struct drm_gem_close c = { .handle = handle };

	return xioctl(fd, DRM_IOCTL_GEM_CLOSE, &c);
}

static void *bo_map(int fd, uint32_t handle)
{
	struct drm_spyre_bo_info info;
	void *p;

	if (bo_info(fd, handle, &info))
		return NULL;
	p = mmap(NULL, info.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, info.mmap_offset);
	return p == MAP_FAILED ? NULL : p;
}

static struct drm_spyre_cmd copy_cmd(uint32_t src, uint64_t soff, uint32_t dst, uint64_t doff,
				     uint64_t size)
{
	struct drm_spyre_cmd c = {
		.op = DRM_SPYRE_CMD_COPY, .src_handle = src, .dst_handle = dst,
		.src_offset = soff, .dst_offset = doff, .size = size,
	};
	return c;
}

static struct drm_spyre_submit submit_args(struct drm_spyre_cmd *cmds, uint32_t n)
{
	struct drm_spyre_submit s = {
		.cmds = (uintptr_t)cmds, .cmd_count = n, .cmd_size = sizeof(*cmds),
		.sync_size = sizeof(struct drm_spyre_sync),
	};
	return s;
}

static int submit(int fd, struct drm_spyre_submit *s)
{
	return xioctl(fd, DRM_IOCTL_SPYRE_SUBMIT, s);
}

static int submit_cmds(int fd, struct drm_spyre_cmd *cmds, uint32_t n, uint64_t *job_id)
{
	struct drm_spyre_submit s = submit_args(cmds, n);
	int ret = submit(fd, &s);

	if (!ret && job_id)
		*job_id = s.job_id;
	return ret;
}

static int job_wait(int fd, uint64_t job_id, int64_t timeout_abs, struct drm_spyre_job_wait *w)
{
	struct drm_spyre_job_wait tmp;

	if (!w)
		w = &tmp;
	memset(w, 0, sizeof(*w));
	w->job_id = job_id;
	w->timeout_ns = timeout_abs;
	return xioctl(fd, DRM_IOCTL_SPYRE_JOB_WAIT, w);
}

/* Wait up to 30 s and return the job status, or a negative errno. */
static int job_status(int fd, uint64_t job_id)
{
	struct drm_spyre_job_wait w;
	int ret = job_wait(fd, job_id, now_ns() + 30 * SEC_NS, &w);

	return ret ? ret : (int)w.status;
}

static int nop_job(int fd, uint32_t ring, uint64_t *job_id)
{
	struct drm_spyre_cmd nop = { .op = DRM_SPYRE_CMD_NOP };
	struct drm_spyre_submit s = submit_args(&nop, 1);
	int ret;

	s.ring = ring;
	ret = submit(fd, &s);
	if (!ret && job_id)
		*job_id = s.job_id;
	return ret;
}

static void fill(uint8_t *p, size_t n, unsigned int seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 12));
}

/*
 * Copy n bytes host -> device -> host through the DMA engine with the given offsets and
 * check them. Returns 0 on success, -1 on a data mismatch, or a negative errno.
 */
static int round_trip(int fd, size_t n, uint64_t hoff, uint64_t doff, unsigned int seed)
{
	uint32_t h_in, h_out, d;
	uint8_t *in, *out;
	uint64_t job;
	struct drm_spyre_cmd cmds[2];
	size_t bo_size = n + hoff + doff + 4096;
	int ret;

	ret = bo_create(fd, bo_size, DRM_SPYRE_BO_HOST, &h_in);
	if (ret)
		return ret;
	ret = bo_create(fd, bo_size, DRM_SPYRE_BO_HOST, &h_out);
	if (ret)
		return ret;
	ret = bo_create(fd, bo_size, DRM_SPYRE_BO_DEVICE, &d);
	if (ret)
		return ret;
	in = bo_map(fd, h_in);
	out = bo_map(fd, h_out);
	if (!in || !out)
		return -ENOMEM;
	fill(in, bo_size, seed);
	memset(out, 0xee, bo_size);

	cmds[0] = copy_cmd(h_in, hoff, d, doff, n);
	cmds[1] = copy_cmd(d, doff, h_out, hoff, n);
	ret = submit_cmds(fd, cmds, 2, &job);
	if (ret)
		return ret;
	ret = job_status(fd, job);
	if (ret)
		return ret < 0 ? ret : -EIO;
	ret = memcmp(in + hoff, out + hoff, n) ? -1 : 0;
	if (!ret && hoff && out[hoff - 1] != 0xee)
		ret = -1;
	if (!ret && out[hoff + n] != 0xee)
		ret = -1;
	munmap(in, bo_size);
	munmap(out, bo_size);
	bo_close(fd, h_in);
	bo_close(fd, h_out);
	bo_close(fd, d);
	return ret;
}

/* PCI address (e.g. 0000:00:03.0) of the card behind fd. */
static int card_bdf(int fd, char *bdf, size_t len)
{
	char path[128], link[PATH_MAX];
	struct stat st;
	ssize_t n;
	char *base;

	if (fstat(fd, &st))
		return -errno;
	snprintf(path, sizeof(path), "/sys/class/accel/accel%u/device", minor(st.st_rdev));
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return -errno;
	link[n] = 0;
	base = strrchr(link, '/');
	snprintf(bdf, len, "%.63s", base ? base + 1 : link);
	return 0;
}

static int write_sysfs(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) != (ssize_t)strlen(val))
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * Path of the driver's debugfs file @name for the card behind fd (root only; debugfs is
 * mounted if needed). BAR0 itself is claimed by the driver, so a sysfs resource0 mapping is
 * refused on kernels with CONFIG_IO_STRICT_DEVMEM: fault injection goes through debugfs.
 */
static int debugfs_path(int fd, const char *name, char *path, size_t len)
{
	char bdf[64];
	struct stat st;

	if (card_bdf(fd, bdf, sizeof(bdf)))
		return -ENODEV;
	if (stat("/sys/kernel/debug/accel", &st))
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	snprintf(path, len, "/sys/kernel/debug/accel/%s/%s", bdf, name);
	if (stat(path, &st)) {
		if (fstat(fd, &st))
			return -errno;
		snprintf(path, len, "/sys/kernel/debug/accel/%u/%s", minor(st.st_rdev), name);
	}
	return 0;
}

static int debugfs_write(int fd, const char *name, unsigned long long val)
{
	char path[160], buf[32];
	int ret = debugfs_path(fd, name, path, sizeof(path));

	if (ret)
		return ret;
	snprintf(buf, sizeof(buf), "%llu", val);
	return write_sysfs(path, buf);
}

/* Read debugfs file name of the card behind fd as a number (the fault_* files print %#llx). */
static int debugfs_read(int fd, const char *name, unsigned long long *val)
{
	char path[160], buf[32];
	int ret = debugfs_path(fd, name, path, sizeof(path));
	ssize_t n;
	int f;

	if (ret)
		return ret;
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return -errno;
	n = read(f, buf, sizeof(buf) - 1);
	ret = n < 0 ? -errno : 0;
	close(f);
	if (ret)
		return ret;
	buf[n] = 0;
	*val = strtoull(buf, NULL, 0);
	return 0;
}

/*
 * Wait up to ms milliseconds for the card's armed hangs to be taken (FAULT_HANG's count at 0):
 * then the commands submitted so far hold them, and later ones cannot take them.
 */
static int fault_hang_wait_taken(int fd, int ms)
{
	unsigned long long v = 0;
	int i, ret;

	for (i = 0; i <= ms; i++) {
		ret = debugfs_read(fd, "fault_hang", &v);
		if (ret)
			return ret;
		if (!(v & 0xffff))
			return 0;
		usleep(1000);
	}
	return -ETIMEDOUT;
}

/* Make the next n commands of the card behind fd fail (SPYRE_REG_FAULT_INJECT). */
static int fault_inject(int fd, unsigned int n)
{
	return debugfs_write(fd, "fault_inject", n);
}

/* Make the next commands hang (SPYRE_REG_FAULT_HANG: count | SPYRE_HANG_* flags). */
static int fault_hang(int fd, uint32_t val)
{
	return debugfs_write(fd, "fault_hang", val);
}

/* ---- tracefs and fdinfo ---- */

#define TRACEFS "/sys/kernel/tracing"

/* Enable (1) or disable (0) every spyre tracepoint; enabling also empties the trace buffer. */
static int spyre_trace_enable(int on)
{
	struct stat st;
	int fd;

	if (stat(TRACEFS "/events", &st))
		mount("tracefs", TRACEFS, "tracefs", 0, NULL);
	if (on) {
		fd = open(TRACEFS "/trace", O_WRONLY | O_TRUNC | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		close(fd);
	}
	return write_sysfs(TRACEFS "/events/spyre/enable", on ? "1" : "0");
}

/* Whole contents of a (sysfs, tracefs) file, NUL-terminated; free() it. NULL on error. */
static char *read_all(const char *path)
{
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0 || !buf) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += n;
		if (len + 1 == cap) {
			char *b = realloc(buf, cap *= 2);

			if (!b)
				break;
			buf = b;
		}
	}
	close(fd);
	buf[len] = 0;
	return buf;
}

/*
 * Offset in the trace text of the first line at or after @from with event @event for job
 * @job_id of client @client, or -1. The event's fields follow "<event>: ".
 */
static long trace_find(const char *trace, long from, const char *event, uint64_t client,
		       uint64_t job_id)
{
	char key[128];
	const char *p = trace + from;

	snprintf(key, sizeof(key), " %s: ", event);
	while ((p = strstr(p, key))) {
		const char *eol = strchr(p, '\n');
		char id[64];
		const char *f;

		snprintf(id, sizeof(id), " client=%llu job=%llu ", (unsigned long long)client,
			 (unsigned long long)job_id);
		f = strstr(p, id);
		if (f && (!eol || f < eol))
			return p - trace;
		p += strlen(key);
	}
	return -1;
}

/* Value of "key=" on the trace line at @off (unsigned), or -1. */
static long long trace_field(const char *trace, long off, const char *key)
{
	const char *eol = strchr(trace + off, '\n');
	const char *f = strstr(trace + off, key);

	if (!f || (eol && f > eol))
		return -1;
	return strtoll(f + strlen(key), NULL, 10);
}

/* drm-client-id of the open file fd (its fdinfo), or 0. */
static uint64_t client_id(int fd)
{
	char path[64], line[128];
	uint64_t id = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "drm-client-id:", 14))
			id = strtoull(line + 14, NULL, 10);
	fclose(f);
	return id;
}

/*
 * Trace the jobs of the file fd: every spyre event on, the buffer emptied, fd's client id
 * in *client. -ENOENT: the kernel has no spyre tracepoints (no tracing).
 */
static int trace_begin(int fd, uint64_t *client)
{
	*client = client_id(fd);
	return *client ? spyre_trace_enable(1) : -EBADF;
}

/* ---- engine programs ---- */

/* Program encoding (Documentation/isa.md). */
#define ISA_MAGIC	0x50595053u
#define ISA_HDR		32
#define ISA_INSTR	16
#define ISA_MAX		64

enum { OP_HALT = 0x01, OP_LI = 0x02, OP_ARG = 0x03, OP_ALU = 0x04, OP_LOOP = 0x06,
       OP_ENDLOOP = 0x07, OP_SPAN = 0x0a, OP_LOAD = 0x10, OP_STORE = 0x11, OP_VBIN = 0x22 };
enum { ALU_ADD = 0, ALU_MUL = 2, ALU_SHR = 9 };
enum { DT_F32 = 0 };
enum { VBIN_ADD = 0 };

/* Engine error codes (isa.md "Errors"). */
#define ENG_ERR_BAD_PROGRAM	2
#define ENG_ERR_DDR_WINDOW	11

struct prog {
	uint8_t img[ISA_HDR + ISA_INSTR * ISA_MAX];
	uint32_t n;
};

static void ins(struct prog *p, uint8_t op, uint8_t dt, uint8_t a, uint8_t b, uint8_t c,
		uint8_t d, uint8_t func, uint8_t flags, int64_t imm)
{
	uint8_t *q = p->img + ISA_HDR + ISA_INSTR * p->n++;

	q[0] = op;
	q[1] = dt;
	q[2] = a;
	q[3] = b;
	q[4] = c;
	q[5] = d;
	q[6] = func;
	q[7] = flags;
	memcpy(q + 8, &imm, 8);		/* little endian */
}

static void li(struct prog *p, uint8_t rd, int64_t v)
{
	ins(p, OP_LI, 0, rd, 0, 0, 0, 0, 0, v);
}

static void arg(struct prog *p, uint8_t rd, int64_t idx)
{
	ins(p, OP_ARG, 0, rd, 0, 0, 0, 0, 0, idx);
}

/* rd = rs1 OP (rs2 + imm) */
static void alu(struct prog *p, uint8_t func, uint8_t rd, uint8_t rs1, uint8_t rs2, int64_t imm)
{
	ins(p, OP_ALU, 0, rd, rs1, rs2, 0, func, 0, imm);
}

static void span(struct prog *p, uint8_t base)
{
	ins(p, OP_SPAN, 0, 0, base, 0, 0, 0, 0, 0);
}

/* One row of R[len] bytes between LX R[lx] and DDR R[ddr]. */
static void dma(struct prog *p, uint8_t op, uint8_t lx, uint8_t ddr, uint8_t len)
{
	ins(p, op, 0, lx, ddr, len, 0, 0, 0, 0);
}

static size_t prog_finish(struct prog *p)
{
	uint32_t magic = ISA_MAGIC, n = p->n;
	uint16_t version = 1, hdr = ISA_HDR;

	memset(p->img, 0, ISA_HDR);
	memcpy(p->img, &magic, 4);
	memcpy(p->img + 4, &version, 2);
	memcpy(p->img + 6, &hdr, 2);
	memcpy(p->img + 8, &n, 4);
	return ISA_HDR + (size_t)ISA_INSTR * n;
}

/*
 * out = a + b (fp32), chunk bytes per core at offset core * chunk.
 * args: 0 = a, 1 = b, 2 = out (device addresses), 3 = chunk bytes (multiple of 128).
 */
static size_t build_vadd(struct prog *p)
{
	memset(p, 0, sizeof(*p));
	arg(p, 3, 0);
	arg(p, 4, 1);
	arg(p, 5, 2);
	arg(p, 6, 3);
	alu(p, ALU_MUL, 7, 1, 6, 0);		/* r7 = core * chunk */
	alu(p, ALU_ADD, 3, 3, 7, 0);
	alu(p, ALU_ADD, 4, 4, 7, 0);
	alu(p, ALU_ADD, 5, 5, 7, 0);
	li(p, 8, 0);				/* LX: a */
	li(p, 9, 0x10000);			/* LX: b */
	li(p, 10, 0x20000);			/* LX: out */
	span(p, 3);
	dma(p, OP_LOAD, 8, 3, 6);
	span(p, 4);
	dma(p, OP_LOAD, 9, 4, 6);
	li(p, 20, 1);				/* rows */
	alu(p, ALU_SHR, 21, 6, 0, 2);		/* cols = chunk / 4 */
	alu(p, ALU_ADD, 22, 6, 0, 0);		/* strides */
	alu(p, ALU_ADD, 23, 6, 0, 0);
	alu(p, ALU_ADD, 24, 6, 0, 0);
	ins(p, OP_VBIN, (DT_F32 << 4) | DT_F32, 10, 8, 9, 20, VBIN_ADD, 0, 0);
	span(p, 5);
	dma(p, OP_STORE, 10, 5, 6);
	ins(p, OP_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
	return prog_finish(p);
}

/* Copy R[2] bytes from args[0] to args[1]; the STORE is instruction STORE_PC. */
#define COPY_STORE_PC	7
static size_t build_copy(struct prog *p)
{
	memset(p, 0, sizeof(*p));
	arg(p, 3, 0);
	arg(p, 4, 1);
	arg(p, 5, 2);
	li(p, 8, 0);
	span(p, 3);
	dma(p, OP_LOAD, 8, 3, 5);
	span(p, 4);
	dma(p, OP_STORE, 8, 4, 5);
	ins(p, OP_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
	return prog_finish(p);
}

static uint64_t dev_addr(int fd, uint32_t handle)
{
	struct drm_spyre_bo_info info;

	return bo_info(fd, handle, &info) ? 0 : info.dev_addr;
}

/* A DEVICE BO of size bytes holding image at offset off. */
static int prog_bo(int fd, const void *image, size_t len, uint64_t off, size_t size,
		   uint32_t *handle)
{
	uint8_t *p;
	int ret = bo_create(fd, size, DRM_SPYRE_BO_DEVICE, handle);

	if (ret)
		return ret;
	p = bo_map(fd, *handle);
	if (!p)
		return -ENOMEM;
	memcpy(p + off, image, len);
	munmap(p, size);
	return 0;
}

static struct drm_spyre_cmd launch_cmd(uint32_t prog, uint64_t off, uint64_t size,
				       struct drm_spyre_launch *l)
{
	struct drm_spyre_cmd c = {
		.op = DRM_SPYRE_CMD_LAUNCH, .src_handle = prog, .src_offset = off,
		.size = size, .ext = (uintptr_t)l, .ext_size = sizeof(*l),
	};
	return c;
}

/* args[0] iterations of one scalar add: host time in proportion to it. */
static size_t build_count(struct prog *p)
{
	memset(p, 0, sizeof(*p));
	arg(p, 3, 0);
	ins(p, OP_LOOP, 0, 0, 3, 0, 0, 0, 0, 0);
	alu(p, ALU_ADD, 4, 4, 0, 1);
	ins(p, OP_ENDLOOP, 0, 0, 0, 0, 0, 0, 0, 0);
	ins(p, OP_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
	return prog_finish(p);
}

/* A single-core launch of prog (length plen) counting to n, on ring r of fd. */
static int count_submit(int fd, uint32_t prog, size_t plen, uint32_t r, uint64_t n,
			uint64_t *job)
{
	struct drm_spyre_launch l = { .num_cores = 1, .num_args = 1, .args = { n } };
	struct drm_spyre_cmd c = launch_cmd(prog, 0, plen, &l);
	struct drm_spyre_submit sub = submit_args(&c, 1);
	int ret;

	sub.ring = r;
	ret = submit(fd, &sub);
	*job = sub.job_id;
	return ret;
}

#endif /* SPYRE_TEST_LIB_H */
