// SPDX-License-Identifier: GPL-2.0-only
/*
 * Failure-path tests of the spyre DRM accel driver (Documentation/driver.md, "Failure
 * handling"): hung jobs and their recovery (ring reset, card reset, wedged card), innocent
 * jobs of other files, BO_CREATE interrupted by a signal, and remove() with jobs in flight.
 *
 * Needs root (debugfs, sysfs), a card created with x-fault-inject=on (hw 1.1: FAULT_HANG)
 * and the module loaded with a short job timeout:
 *   modprobe spyre job_timeout_ms=500 && spyre_fault_test
 * Tests that need what is missing are skipped, with the reason.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <linux/netlink.h>

#include <xf86drm.h>

#include "spyre_accel.h"
#include "spyre_hw.h"
#include "spyre_test_lib.h"
#include "kselftest_harness.h"

/* Hang cycles per kind of hang (issue 6: 50). */
#define HANG_CYCLES	50
#define MS_NS		1000000LL
/* Innocent job: a host -> device -> host round trip of this many bytes. */
#define INNOCENT_BYTES	(64 << 10)
#define MAX64(a, b)	((a) > (b) ? (a) : (b))

static unsigned int module_timeout_ms(void)
{
	unsigned int ms = 0;
	FILE *f = fopen("/sys/module/spyre/parameters/job_timeout_ms", "r");

	if (f) {
		if (fscanf(f, "%u", &ms) != 1)
			ms = 0;
		fclose(f);
	}
	return ms;
}

static int telemetry(int fd, struct drm_spyre_telemetry *t)
{
	memset(t, 0, sizeof(*t));
	return query(fd, DRM_SPYRE_QUERY_TELEMETRY, t, sizeof(*t));
}

static uint64_t devmem_used(int fd)
{
	struct drm_spyre_mem_info mi;

	return query(fd, DRM_SPYRE_QUERY_MEM_INFO, &mi, sizeof(mi)) ? UINT64_MAX : mi.devmem_used;
}

static long meminfo_kib(const char *key)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == ':')
			v = strtol(line + strlen(key) + 1, NULL, 10);
	fclose(f);
	return v;
}

/* Lines of the kernel log that contain any of the patterns (a WARN, a leak report). */
static int dmesg_count(void)
{
	char line[512];
	int n = 0;
	FILE *f = popen("dmesg", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "WARNING:") || strstr(line, "not clean") ||
		     strstr(line, "BUG:") || strstr(line, "refcount_t");
	pclose(f);
	return n;
}

/* debugfs 'recovery' line "key: value" of the card behind fd, or -1. */
static long long recovery_stat(int fd, const char *key)
{
	char path[160], line[128];
	long long v = -1;
	FILE *f;

	if (debugfs_path(fd, "recovery", path, sizeof(path)))
		return -1;
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == ':')
			v = strtoll(line + strlen(key) + 1, NULL, 10);
	fclose(f);
	return v;
}

/* ---- the innocent job: a verified round trip of another file ---- */

struct innocent {
	int fd;
	uint32_t hin, dev, hout;
	uint8_t *in, *out;
	unsigned int seed;
	uint64_t job;
};

static int innocent_init(struct innocent *x, int fd)
{
	int ret;

	memset(x, 0, sizeof(*x));
	x->fd = fd;
	ret = bo_create(fd, INNOCENT_BYTES, DRM_SPYRE_BO_HOST, &x->hin);
	if (!ret)
		ret = bo_create(fd, INNOCENT_BYTES, DRM_SPYRE_BO_HOST, &x->hout);
	if (!ret)
		ret = bo_create(fd, INNOCENT_BYTES, DRM_SPYRE_BO_DEVICE, &x->dev);
	if (ret)
		return ret;
	x->in = bo_map(fd, x->hin);
	x->out = bo_map(fd, x->hout);
	return x->in && x->out ? 0 : -ENOMEM;
}

static int innocent_submit(struct innocent *x, uint32_t ring)
{
	struct drm_spyre_cmd cmds[2];
	struct drm_spyre_submit s;
	int ret;

	x->seed++;
	fill(x->in, INNOCENT_BYTES, x->seed);
	memset(x->out, 0, INNOCENT_BYTES);
	cmds[0] = copy_cmd(x->hin, 0, x->dev, 0, INNOCENT_BYTES);
	cmds[1] = copy_cmd(x->dev, 0, x->hout, 0, INNOCENT_BYTES);
	s = submit_args(cmds, 2);
	s.ring = ring;
	ret = submit(x->fd, &s);
	x->job = s.job_id;
	return ret;
}

/* Job status, or -1 if it completed but the data is wrong. */
static int innocent_check(struct innocent *x)
{
	int st = job_status(x->fd, x->job);

	if (st == DRM_SPYRE_JOB_OK && memcmp(x->in, x->out, INNOCENT_BYTES))
		return -1;
	return st;
}

static void innocent_fini(struct innocent *x)
{
	if (x->in)
		munmap(x->in, INNOCENT_BYTES);
	if (x->out)
		munmap(x->out, INNOCENT_BYTES);
	bo_close(x->fd, x->hin);
	bo_close(x->fd, x->hout);
	bo_close(x->fd, x->dev);
}

/* ---- guilty programs ---- */

enum { OP_BR = 0x05, OP_MM = 0x20 };
enum { DT_F16 = 1 };

/* Spins forever: pc 0 branches to itself (until the engine's instruction budget). */
static size_t build_spin(struct prog *p)
{
	memset(p, 0, sizeof(*p));
	ins(p, OP_BR, 0, 0, 0, 0, 0, 0, 0, 0);
	ins(p, OP_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
	return prog_finish(p);
}

/*
 * One 4096 x 4096 x 4096 fp16 matrix multiply with zero row strides (every row is the same
 * 8 KiB of scratchpad, so it fits), looped: seconds of host time per instruction.
 */
static size_t build_mm_loop(struct prog *p)
{
	memset(p, 0, sizeof(*p));
	li(p, 3, 4096);			/* M */
	li(p, 4, 4096);			/* N */
	li(p, 5, 4096);			/* K */
	li(p, 6, 0);			/* lda, ldb, ldc: zero strides */
	li(p, 7, 0);
	li(p, 8, 0);
	li(p, 10, 0);			/* C */
	li(p, 11, 0x10000);		/* A */
	li(p, 12, 0x20000);		/* B */
	ins(p, OP_LOOP, 0, 0, 0, 0, 0, 0, 0, 1000000);
	ins(p, OP_MM, DT_F16, 10, 11, 12, 3, 0, 0, 0);
	ins(p, OP_ENDLOOP, 0, 0, 0, 0, 0, 0, 0, 0);
	ins(p, OP_HALT, 0, 0, 0, 0, 0, 0, 0, 0);
	return prog_finish(p);
}

/* ---- fixture: two files of the first card ---- */

enum hang_kind { HANG_SPIN, HANG_MM, HANG_DMA };

FIXTURE(fault) {
	int fd, fd2;
	unsigned int timeout_ms;
	struct drm_spyre_device_info info;
	uint32_t prog, hbo, dbo;
	size_t plen;
};

FIXTURE_SETUP(fault)
{
	self->fd = -1;
	self->fd2 = -1;
	if (geteuid())
		SKIP(return, "needs root (debugfs, sysfs)");
	self->fd = open_card(0);
	if (self->fd < 0)
		SKIP(return, "no spyre accel device (modprobe spyre?)");
	self->fd2 = open_card(0);
	ASSERT_GE(self->fd2, 0);
	ASSERT_EQ(0, query(self->fd, DRM_SPYRE_QUERY_DEVICE_INFO, &self->info,
			   sizeof(self->info)));
	self->timeout_ms = module_timeout_ms();
	if (!self->timeout_ms || self->timeout_ms > 2000)
		SKIP(return, "job_timeout_ms is %u: load spyre with job_timeout_ms=500",
		     self->timeout_ms);
	if (fault_hang(self->fd, 0) == -EOPNOTSUPP)
		SKIP(return, "card without FAULT_HANG (hw 1.1 with x-fault-inject=on)");
	ASSERT_EQ(0, bo_create(self->fd, 4096, DRM_SPYRE_BO_HOST, &self->hbo));
	ASSERT_EQ(0, bo_create(self->fd, 4096, DRM_SPYRE_BO_DEVICE, &self->dbo));
}

FIXTURE_TEARDOWN(fault)
{
	if (self->fd >= 0)
		close(self->fd);
	if (self->fd2 >= 0)
		close(self->fd2);
}

/* Submit the guilty job of kind k on ring 0 of self->fd. */
static int guilty_submit(struct __test_metadata *_metadata, FIXTURE_DATA(fault) *self,
			 enum hang_kind k, uint64_t *job)
{
	struct drm_spyre_launch l = { .num_cores = 1 };
	struct drm_spyre_cmd c;

	if (k == HANG_DMA) {
		/* ring 0 only: a clear on the kernel's ring must not take the hang */
		if (fault_hang(self->fd, 1 | SPYRE_HANG_RING(0)))
			return -EIO;
		c = copy_cmd(self->hbo, 0, self->dbo, 0, 4096);
	} else {
		c = launch_cmd(self->prog, 0, self->plen, &l);
	}
	return submit_cmds(self->fd, &c, 1, job);
}

/*
 * HANG_CYCLES times: a guilty job of self->fd hangs on ring 0 with a job of another file
 * queued behind it. The guilty job must fail with DRM_SPYRE_JOB_TIMEOUT within the timeout
 * plus HANG_SLACK_MS, the innocent one complete with the right data, the ring-reset counter
 * rise by exactly one, the next job succeed; no card memory or kernel memory may leak.
 */
/*
 * What a recovery may add to the timeout: it catches a timeout that does not fire or a recovery
 * that stalls (seconds to forever), not latency. Under TCG with the debug kernel on a loaded
 * 2-core host a normal recovery was seen at 2.51 s over a 500 ms timeout.
 */
#define HANG_SLACK_MS 4000

static void hang_cycles(struct __test_metadata *_metadata, FIXTURE_DATA(fault) *self,
			enum hang_kind k)
{
	struct drm_spyre_telemetry t0, t1, t;
	struct innocent x;
	int64_t t_sub, t_guilty, worst_guilty = 0, worst_innocent = 0, sum_guilty = 0;
	long slab0, slab1;
	uint64_t used0, job;
	struct prog p;
	int i;

	used0 = devmem_used(self->fd);
	if (k == HANG_SPIN)
		self->plen = build_spin(&p);
	else if (k == HANG_MM)
		self->plen = build_mm_loop(&p);
	if (k != HANG_DMA) {
		if (!(self->info.caps & DRM_SPYRE_CAP_LAUNCH))
			SKIP(return, "card without LAUNCH");
		ASSERT_EQ(0, prog_bo(self->fd, p.img, self->plen, 0, 4096, &self->prog));
	}
	ASSERT_EQ(0, innocent_init(&x, self->fd2));
	slab0 = meminfo_kib("Slab");
	ASSERT_EQ(0, telemetry(self->fd, &t0));

	for (i = 0; i < HANG_CYCLES; i++) {
		ASSERT_EQ(0, telemetry(self->fd, &t));
		t_sub = now_ns();
		ASSERT_EQ(0, guilty_submit(_metadata, self, k, &job));
		/*
		 * The innocent job queues behind a guilty command that already holds the injected
		 * hang: submitted earlier, the scheduler could run it first and it would take the
		 * hang (the guilty copy then completed: an intermittent failure).
		 */
		if (k == HANG_DMA)
			ASSERT_EQ(0, fault_hang_wait_taken(self->fd, 5000)) TH_LOG("cycle %d", i);
		ASSERT_EQ(0, innocent_submit(&x, 0));
		ASSERT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job)) TH_LOG("cycle %d", i);
		t_guilty = now_ns() - t_sub;
		ASSERT_LE(t_guilty, (self->timeout_ms + HANG_SLACK_MS) * MS_NS) TH_LOG("cycle %d", i);
		ASSERT_EQ(DRM_SPYRE_JOB_OK, innocent_check(&x)) TH_LOG("cycle %d", i);
		worst_innocent = MAX64(worst_innocent, now_ns() - t_sub - t_guilty);
		worst_guilty = MAX64(worst_guilty, t_guilty);
		sum_guilty += t_guilty;

		ASSERT_EQ(0, telemetry(self->fd, &t1));
		ASSERT_EQ(t.ring_resets + 1, t1.ring_resets) TH_LOG("cycle %d", i);
		ASSERT_EQ(t.card_resets, t1.card_resets) TH_LOG("cycle %d", i);
		ASSERT_EQ(DRM_SPYRE_STATE_OK, t1.state);
		/* the next job of the guilty file runs normally on the same ring */
		ASSERT_EQ(0, nop_job(self->fd, 0, &job));
		ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fd, job)) TH_LOG("cycle %d", i);
	}

	ASSERT_EQ(0, telemetry(self->fd, &t1));
	EXPECT_EQ(t0.ring_resets + HANG_CYCLES, t1.ring_resets);
	EXPECT_EQ(t0.jobs_timed_out + HANG_CYCLES, t1.jobs_timed_out);
	innocent_fini(&x);
	if (k != HANG_DMA)
		bo_close(self->fd, self->prog);
	EXPECT_EQ(used0, devmem_used(self->fd));
	slab1 = meminfo_kib("Slab");
	/* 50 leaked jobs with their buffers would be far more than this */
	EXPECT_LT(slab1 - slab0, 4096) TH_LOG("Slab %ld -> %ld KiB", slab0, slab1);
	TH_LOG("%d hangs (timeout %u ms): guilty job failed after %.0f ms on average, %.0f ms at worst; innocent job done %.0f ms later at worst; %llu jobs re-run; Slab %+ld KiB; recovery (timeout handler) max %lld us since load",
	       HANG_CYCLES, self->timeout_ms, sum_guilty / 1e6 / HANG_CYCLES, worst_guilty / 1e6,
	       worst_innocent / 1e6, (unsigned long long)(t1.jobs_rerun - t0.jobs_rerun),
	       slab1 - slab0, recovery_stat(self->fd, "max_recovery_us"));
}

TEST_F_TIMEOUT(fault, hang_spinning_program, 600)
{
	hang_cycles(_metadata, self, HANG_SPIN);
}

TEST_F_TIMEOUT(fault, hang_matrix_multiply_loop, 600)
{
	hang_cycles(_metadata, self, HANG_MM);
}

TEST_F_TIMEOUT(fault, hang_injected_dma, 600)
{
	hang_cycles(_metadata, self, HANG_DMA);
}

/*
 * A job's translation fault latched in the ring's fault registers, then the job hung and the
 * ring was reset before its completion was seen: the latch belonged to no job any more. Kept
 * over the ring restart, it was reported with the next fault on the ring, another file's
 * (issue 24, defect 9). The restart clears it: the other file gets its own address.
 */
TEST_F_TIMEOUT(fault, ring_restart_clears_fault_latch, 60)
{
	struct drm_spyre_launch l = { .num_cores = 1 };
	struct drm_spyre_job_wait w;
	struct drm_spyre_cmd c[2];
	uint32_t h2, d2;
	uint64_t job;
	struct prog p;
	int ret;

	if (!(self->info.caps & DRM_SPYRE_CAP_LAUNCH) || !(self->info.caps & DRM_SPYRE_CAP_VM))
		SKIP(return, "card without LAUNCH or VM");
	self->plen = build_spin(&p);
	ASSERT_EQ(0, prog_bo(self->fd, p.img, self->plen, 0, 4096, &self->prog));
	ASSERT_EQ(0, bo_create(self->fd2, 4096, DRM_SPYRE_BO_HOST, &h2));
	ASSERT_EQ(0, bo_create(self->fd2, 4096, DRM_SPYRE_BO_DEVICE, &d2));
	ret = debugfs_write(self->fd, "fault_mmu", 1);
	if (ret == -EOPNOTSUPP || ret == -ENOENT)
		SKIP(return, "no MMU fault injection");
	ASSERT_EQ(0, ret);
	/* faults at dbo + 128 (latched), then spins until the ring is reset */
	c[0] = copy_cmd(self->dbo, 128, self->hbo, 0, 1024);
	c[1] = launch_cmd(self->prog, 0, self->plen, &l);
	ASSERT_EQ(0, submit_cmds(self->fd, c, 2, &job));
	ASSERT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job));

	ASSERT_EQ(0, debugfs_write(self->fd2, "fault_mmu", 1));
	c[0] = copy_cmd(d2, 64, h2, 0, 1024);
	ASSERT_EQ(0, submit_cmds(self->fd2, c, 1, &job));
	ASSERT_EQ(0, job_wait(self->fd2, job, now_ns() + 30 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_DEVICE_ERROR, w.status);
	EXPECT_EQ(SPYRE_STATUS_ERR_MMU_FAULT, w.hw_status);
	EXPECT_EQ(dev_addr(self->fd2, d2) + 64, w.fault_addr)
		TH_LOG("fault reported at %#llx; the aborted job's was at %#llx",
		       (unsigned long long)w.fault_addr,
		       (unsigned long long)(dev_addr(self->fd, self->dbo) + 128));
	bo_close(self->fd, self->prog);
}

/*
 * A SEM_WAIT (hw 1.8) holds its ring reading RUNNING with the time it has waited. With
 * job_timeout_ms=500: a wait bounded below 7/8 of the timeout (200 ms) is kept by the
 * timeout handler and ends on the card with ERR_TIMEOUT (DEVICE_ERROR, hw_status 10); a wait
 * of 1 s outlasts it and is the job failed with DRM_SPYRE_JOB_TIMEOUT (the ring reset
 * cancels it), while a job of another file on another ring is never blamed and one queued
 * behind the waiter on its ring re-runs and completes.
 */
TEST_F_TIMEOUT(fault, sem_wait_blame, 60)
{
	struct drm_spyre_sem wt = { .value = 1, .timeout_us = 200000 };
	struct drm_spyre_cmd c = {
		.op = DRM_SPYRE_CMD_SEM_WAIT, .src_handle = self->dbo, .src_offset = 64,
		.ext = (uintptr_t)&wt, .ext_size = sizeof(wt),
	};
	struct drm_spyre_submit s = submit_args(&c, 1);
	struct drm_spyre_job_wait w;
	uint64_t job, behind, other;

	if (!(self->info.caps & DRM_SPYRE_CAP_SEMAPHORE))
		SKIP(return, "card model older than hw 1.8 (no semaphores)");
	if (self->info.num_rings < 2)
		SKIP(return, "needs 2 rings");
	ASSERT_EQ(0, submit(self->fd, &s));
	job = s.job_id;
	ASSERT_EQ(0, job_wait(self->fd, job, now_ns() + 30 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_DEVICE_ERROR, w.status);
	EXPECT_EQ(SPYRE_STATUS_ERR_TIMEOUT, w.hw_status);

	wt.timeout_us = DRM_SPYRE_SEM_WAIT_MAX_US;
	ASSERT_EQ(0, submit(self->fd, &s));
	job = s.job_id;
	ASSERT_EQ(0, nop_job(self->fd2, 0, &behind));
	ASSERT_EQ(0, nop_job(self->fd2, 1, &other));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fd2, other));
	EXPECT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fd2, behind));
	ASSERT_EQ(0, nop_job(self->fd, 0, &job));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fd, job));
}

static void on_alarm(int sig)
{
}

/*
 * BO_CREATE(DEVICE) waits for the clear of the new BO, interruptibly: with the clear hung,
 * a signal ends the call with EINTR long before the job timeout. The BO's card memory comes
 * back once the hung clear has been dealt with (it times out on the kernel's ring).
 */
TEST_F_TIMEOUT(fault, bo_create_interrupted, 60)
{
	struct drm_spyre_bo_create c = { .size = 1 << 20, .flags = DRM_SPYRE_BO_DEVICE };
	struct sigaction sa = { .sa_handler = on_alarm };	/* no SA_RESTART */
	struct itimerval it = { .it_value = { .tv_usec = 100000 } };
	struct drm_spyre_telemetry t0, t1;
	uint64_t used0;
	int64_t t, deadline;
	uint32_t h;
	int ret, err;

	used0 = devmem_used(self->fd);
	ASSERT_EQ(0, telemetry(self->fd, &t0));
	ASSERT_EQ(0, sigaction(SIGALRM, &sa, NULL));
	ASSERT_EQ(0, fault_hang(self->fd, 1));
	t = now_ns();
	ASSERT_EQ(0, setitimer(ITIMER_REAL, &it, NULL));
	ret = ioctl(self->fd, DRM_IOCTL_SPYRE_BO_CREATE, &c);
	err = errno;
	t = now_ns() - t;
	EXPECT_EQ(-1, ret);
	EXPECT_EQ(EINTR, err);
	EXPECT_LT(t, (int64_t)self->timeout_ms * MS_NS) TH_LOG("BO_CREATE took %.0f ms", t / 1e6);

	/* the memory returns when the hung clear has timed out */
	deadline = now_ns() + (self->timeout_ms + 3000) * MS_NS;
	while (devmem_used(self->fd) != used0 && now_ns() < deadline)
		usleep(20000);
	EXPECT_EQ(used0, devmem_used(self->fd));
	ASSERT_EQ(0, telemetry(self->fd, &t1));
	EXPECT_EQ(t0.ring_resets + 1, t1.ring_resets);
	/* and BO_CREATE works again */
	ASSERT_EQ(0, bo_create(self->fd, 1 << 20, DRM_SPYRE_BO_DEVICE, &h));
	ASSERT_EQ(0, bo_close(self->fd, h));
	TH_LOG("interrupted after %.0f ms", t / 1e6);
}

/*
 * First line of the driver's sysfs attribute @name (e.g. "state", "resets/card") of the card
 * behind fd, into buf; "" if it cannot be read.
 */
static const char *card_attr(int fd, const char *name, char *buf, size_t len)
{
	char bdf[64], path[192];
	FILE *f;

	buf[0] = 0;
	if (card_bdf(fd, bdf, sizeof(bdf)))
		return buf;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/%s", bdf, name);
	f = fopen(path, "r");
	if (!f)
		return buf;
	if (!fgets(buf, len, f))
		buf[0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	fclose(f);
	return buf;
}

/*
 * A hang that ignores the ring ABORT (SPYRE_HANG_STICKY): the driver escalates to a card
 * reset. The guilty job times out, innocent jobs of another file on the same ring and on
 * another ring are re-run and complete with the right data, the card-reset counter rises by
 * one and the card works afterwards.
 */
TEST_F_TIMEOUT(fault, sticky_hang_card_reset, 60)
{
	struct drm_spyre_telemetry t0, t1;
	struct innocent x, y;
	struct drm_spyre_cmd c;
	char num[32], attr[64];
	uint64_t job;
	int64_t t;

	ASSERT_EQ(0, innocent_init(&x, self->fd2));
	ASSERT_EQ(0, innocent_init(&y, self->fd2));
	ASSERT_EQ(0, telemetry(self->fd, &t0));
	ASSERT_EQ(0, fault_hang(self->fd, 1 | SPYRE_HANG_STICKY | SPYRE_HANG_RING(0)));
	c = copy_cmd(self->hbo, 0, self->dbo, 0, 4096);
	t = now_ns();
	ASSERT_EQ(0, submit_cmds(self->fd, &c, 1, &job));
	ASSERT_EQ(0, innocent_submit(&x, 0));
	ASSERT_EQ(0, innocent_submit(&y, self->info.num_rings > 1 ? 1 : 0));
	EXPECT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job));
	t = now_ns() - t;
	EXPECT_LE(t, (self->timeout_ms + 2000 + 1000) * MS_NS);
	EXPECT_EQ(DRM_SPYRE_JOB_OK, innocent_check(&x));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, innocent_check(&y));
	ASSERT_EQ(0, telemetry(self->fd, &t1));
	EXPECT_EQ(t0.card_resets + 1, t1.card_resets);
	EXPECT_EQ(t0.ring_resets, t1.ring_resets);
	EXPECT_GE(t1.jobs_rerun, t0.jobs_rerun + 1);
	EXPECT_EQ(DRM_SPYRE_STATE_OK, t1.state);
	/* sysfs shows the same counters and state */
	snprintf(num, sizeof(num), "%u", t1.card_resets);
	EXPECT_STREQ(num, card_attr(self->fd, "resets/card", attr, sizeof(attr)));
	snprintf(num, sizeof(num), "%u", t1.ring_resets);
	EXPECT_STREQ(num, card_attr(self->fd, "resets/ring", attr, sizeof(attr)));
	EXPECT_STREQ("ready", card_attr(self->fd, "state", attr, sizeof(attr)));
	EXPECT_GE(t1.resets, t0.resets + 1);	/* the card's own counter */
	ASSERT_EQ(0, nop_job(self->fd, 0, &job));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fd, job));
	EXPECT_EQ(0, round_trip(self->fd2, 10000, 3, 5, 7));
	innocent_fini(&x);
	innocent_fini(&y);
	TH_LOG("guilty job failed after %.0f ms (card reset)", t / 1e6);
}

/*
 * A PCI function reset while the driver is bound (sysfs reset; AER takes the same path):
 * reset_prepare stops the schedulers, reset_done brings the card back and re-runs what was
 * queued. Jobs of open files complete normally and the card keeps working.
 */
TEST_F_TIMEOUT(fault, pci_reset_while_bound, 60)
{
	struct drm_spyre_telemetry t0, t1;
	char bdf[64], path[160];
	struct innocent x, y;
	uint64_t job;

	ASSERT_EQ(0, card_bdf(self->fd, bdf, sizeof(bdf)));
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/reset", bdf);
	if (access(path, W_OK))
		SKIP(return, "%s: the card has no PCI reset method", path);
	ASSERT_EQ(0, innocent_init(&x, self->fd2));
	ASSERT_EQ(0, innocent_init(&y, self->fd));
	ASSERT_EQ(0, telemetry(self->fd, &t0));
	ASSERT_EQ(0, innocent_submit(&x, 0));
	ASSERT_EQ(0, innocent_submit(&y, self->info.num_rings > 1 ? 1 : 0));
	ASSERT_EQ(0, write_sysfs(path, "1"));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, innocent_check(&x));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, innocent_check(&y));
	ASSERT_EQ(0, telemetry(self->fd, &t1));
	EXPECT_EQ(t0.card_resets + 1, t1.card_resets);
	EXPECT_EQ(DRM_SPYRE_STATE_OK, t1.state);
	ASSERT_EQ(0, nop_job(self->fd, 0, &job));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fd, job));
	EXPECT_EQ(0, round_trip(self->fd2, 10000, 3, 5, 11));
	innocent_fini(&x);
	innocent_fini(&y);
}

/* ---- device coredump and recovery tracepoints (Documentation/driver.md) ---- */

#define DEVCD_CLASS	"/sys/class/devcoredump"

/*
 * Path (DEVCD_CLASS/devcdN) of the device coredump of PCI device @bdf into @path; 0 if
 * there is one, -ENOENT if not.
 */
static int devcd_of(const char *bdf, char *path, size_t len)
{
	char link[PATH_MAX], p[PATH_MAX];
	struct dirent *de;
	DIR *dir = opendir(DEVCD_CLASS);
	int ret = -ENOENT;
	ssize_t n;

	if (!dir)
		return ret;
	while (ret && (de = readdir(dir))) {
		if (strncmp(de->d_name, "devcd", 5))
			continue;
		snprintf(p, sizeof(p), DEVCD_CLASS "/%s/failing_device", de->d_name);
		n = readlink(p, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = 0;
		if (strcmp(strrchr(link, '/') ? strrchr(link, '/') + 1 : link, bdf))
			continue;
		snprintf(path, len, DEVCD_CLASS "/%s", de->d_name);
		ret = 0;
	}
	closedir(dir);
	return ret;
}

/* Free the coredump at @path (any write to its data does); 0 once it is gone. */
static int devcd_free(const char *path)
{
	char data[PATH_MAX + 8];
	struct stat st;
	int i;

	snprintf(data, sizeof(data), "%s/data", path);
	if (write_sysfs(data, "1"))
		return -EIO;
	for (i = 0; i < 100 && !stat(path, &st); i++)
		usleep(10000);
	return stat(path, &st) ? 0 : -EBUSY;
}

/* Value of the dump line "key: value" (the text after ": "), into val; 0 if found. */
static int dump_value(const char *dump, const char *key, char *val, size_t len)
{
	char k[96];
	const char *p;
	size_t n;

	snprintf(k, sizeof(k), "\n%s: ", key);
	p = strstr(dump, k);
	if (!p)
		return -ENOENT;
	p += strlen(k);
	n = strcspn(p, "\n");
	snprintf(val, len, "%.*s", (int)(n < len ? n : len - 1), p);
	return 0;
}

/* The 8 bytes at hex digits @h as a little-endian number. */
static unsigned long long hex_le64(const char *h)
{
	unsigned long long v = 0;
	unsigned int b, i;

	for (i = 0; i < 8; i++) {
		if (sscanf(h + 2 * i, "%2x", &b) != 1)
			return ~0ull;
		v |= (unsigned long long)b << (8 * i);
	}
	return v;
}

static long long dump_num(const char *dump, const char *key)
{
	char v[64];

	return dump_value(dump, key, v, sizeof(v)) ? -1 : strtoll(v, NULL, 0);
}

/*
 * A hung job leaves a device coredump (format: driver.md "Device coredump") naming it: pid,
 * client, ring, job id, its one command as the card got it; the card and ring registers;
 * the recovery. Writing to its data frees it.
 */
TEST_F_TIMEOUT(fault, hang_devcoredump, 60)
{
	char bdf[64], path[PATH_MAX], data[PATH_MAX + 8], v[256], key[48];
	uint64_t job, client;
	int64_t deadline;
	struct stat st;
	char *dump;

	if (stat(DEVCD_CLASS, &st))
		SKIP(return, "kernel without CONFIG_DEV_COREDUMP (no %s)", DEVCD_CLASS);
	ASSERT_EQ(0, card_bdf(self->fd, bdf, sizeof(bdf)));
	/* a device keeps one dump at a time: drop what earlier hangs left */
	while (!devcd_of(bdf, path, sizeof(path)))
		ASSERT_EQ(0, devcd_free(path));
	client = client_id(self->fd);
	ASSERT_NE(0, client);
	ASSERT_EQ(0, guilty_submit(_metadata, self, HANG_DMA, &job));
	ASSERT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job));
	/* published right after the recovery, which ends just after the job's fence */
	deadline = now_ns() + 5 * SEC_NS;
	while (devcd_of(bdf, path, sizeof(path)) && now_ns() < deadline)
		usleep(20000);
	ASSERT_EQ(0, devcd_of(bdf, path, sizeof(path))) TH_LOG("no coredump of %s", bdf);
	snprintf(data, sizeof(data), "%s/data", path);
	dump = read_all(data);
	ASSERT_NE(NULL, dump);

	EXPECT_EQ(0, strncmp(dump, "spyre devcoredump\n", 18)) TH_LOG("%.200s", dump);
	EXPECT_EQ(1, dump_num(dump, "version"));
	ASSERT_EQ(0, dump_value(dump, "reason", v, sizeof(v)));
	EXPECT_STREQ("job timeout", v);
	ASSERT_EQ(0, dump_value(dump, "device", v, sizeof(v)));
	EXPECT_STREQ(bdf, v);
	EXPECT_GT(dump_num(dump, "time_ns"), 0);
	EXPECT_EQ(getpid(), dump_num(dump, "guilty.pid"));
	EXPECT_EQ(client, dump_num(dump, "guilty.client_id"));
	EXPECT_EQ(0, dump_num(dump, "guilty.ring"));
	EXPECT_EQ(job, dump_num(dump, "guilty.job_id"));
	ASSERT_EQ(0, dump_value(dump, "guilty.priority", v, sizeof(v)));
	EXPECT_STREQ("normal", v);
	EXPECT_GT(dump_num(dump, "guilty.seqno"), 0);
	EXPECT_EQ(1, dump_num(dump, "guilty.cmd_count"));
	/*
	 * 64 bytes: DMA_COPY, flags SRC_HOST | IRQ, the MMU context (the file's own with
	 * DRM_SPYRE_CAP_VM, else 0), reserved, then its seqno (little endian)
	 */
	ASSERT_EQ(0, dump_value(dump, "guilty.cmd.0", v, sizeof(v)));
	EXPECT_EQ(128, strlen(v));
	EXPECT_EQ(0, strncmp(v, "0203", 4)) TH_LOG("cmd.0 %s", v);
	EXPECT_EQ(!(self->info.caps & DRM_SPYRE_CAP_VM), !strncmp(v + 4, "0000", 4))
		TH_LOG("cmd.0 %s", v);
	EXPECT_EQ(dump_num(dump, "guilty.mmu_context"), hex_le64(v + 4) & 0xffff)
		TH_LOG("cmd.0 %s", v);
	EXPECT_EQ(0, strncmp(v + 8, "00000000", 8)) TH_LOG("cmd.0 %s", v);
	EXPECT_EQ(dump_num(dump, "guilty.seqno"), hex_le64(v + 16)) TH_LOG("cmd.0 %s", v);
	EXPECT_EQ(SPYRE_ID_MAGIC, dump_num(dump, "card.ID"));
	EXPECT_EQ(self->info.hw_version, dump_num(dump, "card.VERSION"));
	EXPECT_EQ(8192, dump_num(dump, "ring.0.SIZE"));
	EXPECT_EQ(1, dump_num(dump, "ring.0.enabled"));
	/* the kernel's ring is the card's last */
	snprintf(key, sizeof(key), "ring.%lld.kernel", dump_num(dump, "card.NUM_RINGS") - 1);
	EXPECT_EQ(1, dump_num(dump, key));
	ASSERT_EQ(0, dump_value(dump, "recovery", v, sizeof(v)));
	EXPECT_STREQ("ring reset", v);
	EXPECT_NE(NULL, strstr(dump, "\nend\n"));
	free(dump);
	EXPECT_EQ(0, devcd_free(path));
	EXPECT_EQ(-ENOENT, devcd_of(bdf, path, sizeof(path)));
}

/* The driver's coredump buffer, allocated at probe (driver.md "Device coredump"). */
#define DUMP_MAX_BYTES	(16384 + DRM_SPYRE_MAX_CMDS * 160)

/* Hang a job of @n copies (the first one hangs) and return its dump, read out and freed; NULL if none. */
static char *hang_and_dump(struct __test_metadata *_metadata, FIXTURE_DATA(fault) *self,
			   const char *bdf, uint32_t n, uint64_t *job, size_t *len)
{
	struct drm_spyre_cmd *cmds = calloc(n, sizeof(*cmds));
	char path[PATH_MAX], data[PATH_MAX + 8];
	int64_t deadline;
	char *dump;
	uint32_t i;

	if (!cmds)
		return NULL;
	for (i = 0; i < n; i++)
		cmds[i] = copy_cmd(self->hbo, 0, self->dbo, 0, 4096);
	if (fault_hang(self->fd, 1 | SPYRE_HANG_RING(0)) || submit_cmds(self->fd, cmds, n, job)) {
		free(cmds);
		return NULL;
	}
	free(cmds);
	if (job_status(self->fd, *job) != DRM_SPYRE_JOB_TIMEOUT)
		return NULL;
	deadline = now_ns() + 5 * SEC_NS;
	while (devcd_of(bdf, path, sizeof(path)) && now_ns() < deadline)
		usleep(20000);
	if (devcd_of(bdf, path, sizeof(path)))
		return NULL;
	snprintf(data, sizeof(data), "%s/data", path);
	dump = read_all(data);
	*len = dump ? strlen(dump) : 0;
	if (devcd_free(path)) {
		free(dump);
		return NULL;
	}
	return dump;
}

/*
 * The dump is captured into one buffer allocated at probe (the timeout handler allocates
 * nothing): the largest job (DRM_SPYRE_MAX_CMDS commands) fits whole in it, within its
 * bound, and the buffer serves the next hang, whose dump holds that job and nothing stale.
 */
TEST_F_TIMEOUT(fault, hang_devcoredump_largest_job_then_next, 90)
{
	char bdf[64], path[PATH_MAX], key[48], v[256];
	uint64_t job, job2;
	struct stat st;
	char *dump;
	size_t len;

	if (stat(DEVCD_CLASS, &st))
		SKIP(return, "kernel without CONFIG_DEV_COREDUMP (no %s)", DEVCD_CLASS);
	ASSERT_EQ(0, card_bdf(self->fd, bdf, sizeof(bdf)));
	while (!devcd_of(bdf, path, sizeof(path)))
		ASSERT_EQ(0, devcd_free(path));

	dump = hang_and_dump(_metadata, self, bdf, DRM_SPYRE_MAX_CMDS, &job, &len);
	ASSERT_NE(NULL, dump) TH_LOG("no coredump of the %u-command hang", DRM_SPYRE_MAX_CMDS);
	EXPECT_LE(len, DUMP_MAX_BYTES);
	EXPECT_GT(len, DRM_SPYRE_MAX_CMDS * 128);
	EXPECT_EQ(job, dump_num(dump, "guilty.job_id"));
	EXPECT_EQ(DRM_SPYRE_MAX_CMDS, dump_num(dump, "guilty.cmd_count"));
	snprintf(key, sizeof(key), "guilty.cmd.%u", DRM_SPYRE_MAX_CMDS - 1);
	ASSERT_EQ(0, dump_value(dump, key, v, sizeof(v))) TH_LOG("dump truncated");
	EXPECT_EQ(128, strlen(v));
	ASSERT_EQ(0, dump_value(dump, "recovery", v, sizeof(v)));
	EXPECT_STREQ("ring reset", v);
	/* complete: the last line is "end" */
	EXPECT_GE(len, 5);
	EXPECT_STREQ("\nend\n", dump + len - 5);
	free(dump);

	dump = hang_and_dump(_metadata, self, bdf, 1, &job2, &len);
	ASSERT_NE(NULL, dump) TH_LOG("no coredump of the next hang");
	EXPECT_NE(job, job2);
	EXPECT_EQ(job2, dump_num(dump, "guilty.job_id"));
	EXPECT_EQ(1, dump_num(dump, "guilty.cmd_count"));
	EXPECT_EQ(0, dump_value(dump, "guilty.cmd.0", v, sizeof(v)));
	EXPECT_EQ(-ENOENT, dump_value(dump, "guilty.cmd.1", v, sizeof(v)));
	EXPECT_LT(len, 16384);
	EXPECT_STREQ("\nend\n", dump + len - 5);
	free(dump);
}

/*
 * The tracepoints of a hung job: submitted, run, timed out, completed with TIMEOUT, then the
 * ring reset, in that order.
 */
TEST_F_TIMEOUT(fault, hang_tracepoints, 60)
{
	long sub, run, tmo, done, rst;
	uint64_t job, client;
	char *trace;
	int ret;

	ret = trace_begin(self->fd, &client);
	if (ret == -ENOENT)
		SKIP(return, "kernel without tracepoints (no %s/events/spyre)", TRACEFS);
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, guilty_submit(_metadata, self, HANG_DMA, &job));
	ASSERT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job));
	/* the reset event follows the job's fence */
	usleep(200000);
	ASSERT_EQ(0, spyre_trace_enable(0));
	trace = read_all(TRACEFS "/trace");
	ASSERT_NE(NULL, trace);
	sub = trace_find(trace, 0, "spyre_job_submit", client, job);
	ASSERT_GE(sub, 0) TH_LOG("%s", trace);
	run = trace_find(trace, sub, "spyre_job_run", client, job);
	ASSERT_GT(run, sub);
	tmo = trace_find(trace, run, "spyre_job_timeout", client, job);
	ASSERT_GT(tmo, run);
	done = trace_find(trace, tmo, "spyre_job_complete", client, job);
	ASSERT_GT(done, tmo);
	EXPECT_EQ(DRM_SPYRE_JOB_TIMEOUT, trace_field(trace, done, "status="));
	ASSERT_NE(NULL, strstr(trace + done, " spyre_reset: ")) TH_LOG("%s", trace + done);
	rst = strstr(trace + done, " spyre_reset: ") - trace;
	EXPECT_EQ(0, trace_field(trace, rst, "ring="));
	EXPECT_EQ(0, strncmp(strstr(trace + rst, "kind="), "kind=ring\n", 10));
	free(trace);
}

/* ---- remove() and a wedged card (sysfs unbind/bind; these run last) ---- */

static int find_accel_of(const char *bdf)
{
	char path[128];
	struct dirent *de;
	int minor = -1;
	DIR *dir;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/accel", bdf);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((de = readdir(dir)))
		if (sscanf(de->d_name, "accel%d", &minor) == 1)
			break;
	closedir(dir);
	return minor;
}

/* ---- fair timeouts: a job is charged only while it holds the engine (issue 24, defect 4) ---- */

/*
 * Nanoseconds one count launch of n iterations takes alone on ring 0, or minus 1000 plus
 * the job's status (a negative errno if the submit failed).
 */
static int64_t count_time(int fd, uint32_t prog, size_t plen, uint64_t n)
{
	int64_t t = now_ns();
	uint64_t job;
	int st = count_submit(fd, prog, plen, 0, n, &job);

	if (!st)
		st = job_status(fd, job);
	return st ? st - 1000 : now_ns() - t;
}

/*
 * Iterations of the count program per millisecond of host time, alone on the card: doubled
 * until one launch takes an eighth of the timeout (the kernel's one-off costs then small,
 * and 7 times that before the launch itself is over budget), then the fastest of three more
 * runs, so that noise (TCG on a shared host) makes the jobs built from it longer, not
 * shorter, than asked. A launch the loaded host slowed past its budget is run again.
 */
static double count_rate(struct __test_metadata *_metadata, int fd, uint32_t prog,
			 size_t plen, unsigned int timeout_ms)
{
	uint64_t n = 1 << 16;
	int64_t t, best = INT64_MAX;
	int i, slow = 0;

	for (i = 0; i < 4;) {
		t = count_time(fd, prog, plen, n);
		if (t == DRM_SPYRE_JOB_TIMEOUT - 1000 && ++slow < 5)
			continue;
		if (t < 0) {
			TH_LOG("count launch of %llu: status %lld", (unsigned long long)n,
			       (long long)t + 1000);
			return 0;
		}
		if (best == INT64_MAX && t < timeout_ms * MS_NS / 8 && n < 1ull << 28) {
			n *= 2;
			continue;
		}
		best = t < best ? t : best;
		i++;
	}
	return n / (best / 1e6);
}

/* The file's devcoredump of bdf, read and freed: NULL if there is none. */
static char *take_dump(const char *bdf)
{
	char path[PATH_MAX], data[PATH_MAX + 8];
	char *dump;

	if (devcd_of(bdf, path, sizeof(path)))
		return NULL;
	snprintf(data, sizeof(data), "%s/data", path);
	dump = read_all(data);
	devcd_free(path);
	return dump;
}

/*
 * A job of this test timed out before the cycle it prepares: wait for its devcoredump (written
 * by a worker after the job's status is out) and free it, so that the cycle's check for a dump
 * sees only its own jobs' (the card keeps one dump at a time: a stale one would also hide them).
 */
static void drain_dump(const char *bdf)
{
	int64_t deadline = now_ns() + 5 * SEC_NS;
	char *dump;

	while (!(dump = take_dump(bdf)) && now_ns() < deadline)
		usleep(20000);
	free(dump);
}

/*
 * Nanoseconds of a count launch of a quarter of the timeout at rate, now: the host's speed
 * this moment (a launch slowed past its budget is run again); negative on an error.
 */
static int64_t count_probe(int fd, const char *bdf, uint32_t prog, size_t plen, double rate,
			   unsigned int timeout_ms, uint64_t *n)
{
	int64_t t;
	int i;

	*n = rate * timeout_ms / 4;
	for (i = 0; i < 5; i++) {
		t = count_time(fd, prog, plen, *n);
		if (t != DRM_SPYRE_JOB_TIMEOUT - 1000)
			break;
		drain_dump(bdf);
	}
	return t;
}

/*
 * Fixture state of the fairness tests: the count program in a BO of each file, its rate, the
 * second ring.
 */
struct fair {
	uint32_t prog, prog2, ring;
	size_t plen;
	double rate;
	char bdf[64];
};

static void fair_init(struct __test_metadata *_metadata, FIXTURE_DATA(fault) *self,
		      struct fair *f)
{
	struct drm_spyre_telemetry t0, t1;
	struct prog p;

	if (!(self->info.caps & DRM_SPYRE_CAP_LAUNCH))
		SKIP(return, "card without LAUNCH");
	ASSERT_GE(self->info.num_rings, 2);
	f->ring = self->info.num_rings > 2 ? 2 : 1;
	ASSERT_EQ(0, card_bdf(self->fd, f->bdf, sizeof(f->bdf)));
	f->plen = build_count(&p);
	ASSERT_EQ(0, prog_bo(self->fd, p.img, f->plen, 0, 4096, &f->prog));
	ASSERT_EQ(0, prog_bo(self->fd2, p.img, f->plen, 0, 4096, &f->prog2));
	ASSERT_EQ(0, telemetry(self->fd, &t0));
	f->rate = count_rate(_metadata, self->fd, f->prog, f->plen, self->timeout_ms);
	ASSERT_GT(f->rate, 0);
	ASSERT_EQ(0, telemetry(self->fd, &t1));
	/* what hangs left, or a measuring launch the host slowed: the cycles' dumps follow */
	if (t1.jobs_timed_out != t0.jobs_timed_out)
		drain_dump(f->bdf);
	free(take_dump(f->bdf));
}

/*
 * A job timed out in this cycle: its dump must show that it held the engine past its budget
 * (its ring's EXEC_TIME RUNNING for 7/8 of the timeout, EXEC_SEQNO its seqno). Then the blame
 * was deserved (the shared host slowed the launch that much) and the cycle proves nothing;
 * returns 1. A job blamed while it waited, or ran within budget, returns -1. Without
 * devcoredumps (the debug kernel has none) it cannot tell: 0, and the cycle is not counted.
 */
static int blame_deserved(const char *bdf, unsigned int timeout_ms, char **why)
{
	char key[48];
	long long ring, exec, seq;
	int64_t deadline = now_ns() + 5 * SEC_NS;
	struct stat st;
	char *dump;

	if (stat(DEVCD_CLASS, &st)) {
		*why = strdup("no devcoredump to tell whether it held the engine");
		return 0;
	}
	while (!(dump = take_dump(bdf)) && now_ns() < deadline)
		usleep(20000);
	if (!dump)
		return -1;
	ring = dump_num(dump, "guilty.ring");
	snprintf(key, sizeof(key), "ring.%lld.EXEC_TIME", ring);
	exec = dump_num(dump, key);
	snprintf(key, sizeof(key), "ring.%lld.EXEC_SEQNO", ring);
	seq = dump_num(dump, key);
	if (asprintf(why, "guilty job %lld of client %lld on ring %lld: EXEC_TIME %#llx EXEC_SEQNO %lld, seqno %lld",
		     dump_num(dump, "guilty.job_id"), dump_num(dump, "guilty.client_id"), ring,
		     exec, seq, dump_num(dump, "guilty.seqno")) < 0)
		*why = NULL;
	free(dump);
	if (!(exec & SPYRE_RING_EXEC_RUNNING) ||
	    (exec & SPYRE_RING_EXEC_MS_MASK) < timeout_ms - timeout_ms / 8)
		return -1;
	return 1;
}

/*
 * The measured case: user A's legitimate launches on rings 0 and 1 and user B's on ring 2 right
 * behind them, each alone well inside the timeout (0.45 of it at the host's speed measured
 * just before, which includes the submission's fixed costs: less on the engine), together
 * beyond it. The card has one engine, so B waits for A's; its ring's
 * timer started at run_job all the same. Charged only while they hold the engine, all
 * complete: nothing times out, nothing is reset, no devcoredump is written. A cycle in which
 * the shared host slowed a launch past its budget (the dump shows it held the engine that
 * long) is not counted; 3 cycles in which a ring's timer fired and the handler kept the job
 * (timeouts_deferred rose) must pass. The old driver failed B with DRM_SPYRE_JOB_TIMEOUT
 * and dumped it while it waited (EXEC_TIME 0).
 */
TEST_F_TIMEOUT(fault, fair_timeout_waiting_job_not_blamed, 300)
{
	struct drm_spyre_telemetry t0, t1;
	long long deferred0, deferred1;
	uint64_t job_a, job_a2, job_b, n;
	int64_t t_sub, t_a, t_b, t1_ns;
	int i, st[3], made = 0, slow = 0;
	struct fair f;
	char *why;

	fair_init(_metadata, self, &f);
	ASSERT_GE(self->info.num_rings, 3);
	for (i = 0; i < 12 && made < 3; i++) {
		/* the host's speed now */
		t1_ns = count_probe(self->fd, f.bdf, f.prog, f.plen, f.rate, self->timeout_ms, &n);
		ASSERT_GT(t1_ns, 0) TH_LOG("status %lld", (long long)t1_ns + 1000);
		n = n * (self->timeout_ms * 0.45 * MS_NS) / t1_ns;
		ASSERT_EQ(0, telemetry(self->fd, &t0));
		deferred0 = recovery_stat(self->fd, "timeouts_deferred");
		t_sub = now_ns();
		ASSERT_EQ(0, count_submit(self->fd, f.prog, f.plen, 0, n, &job_a));
		ASSERT_EQ(0, count_submit(self->fd, f.prog, f.plen, 1, n, &job_a2));
		ASSERT_EQ(0, count_submit(self->fd2, f.prog2, f.plen, 2, n, &job_b));
		st[0] = job_status(self->fd, job_a);
		st[1] = job_status(self->fd, job_a2);
		t_a = now_ns() - t_sub;
		st[2] = job_status(self->fd2, job_b);
		t_b = now_ns() - t_sub;
		ASSERT_EQ(0, telemetry(self->fd, &t1));
		deferred1 = recovery_stat(self->fd, "timeouts_deferred");
		TH_LOG("cycle %d: A's done after %.0f ms, B after %.0f ms (timeout %u ms), status %d %d %d",
		       i, t_a / 1e6, t_b / 1e6, self->timeout_ms, st[0], st[1], st[2]);
		if (t1.jobs_timed_out != t0.jobs_timed_out) {
			/* every timed-out job of the cycle must have held the engine that long */
			EXPECT_LE(0, blame_deserved(f.bdf, self->timeout_ms, &why))
				TH_LOG("cycle %d: %s", i, why);
			TH_LOG("cycle %d not counted: %s", i, why);
			free(why);
			EXPECT_EQ(t0.jobs_timed_out + 1, t1.jobs_timed_out) TH_LOG("cycle %d", i);
			slow++;
			continue;
		}
		EXPECT_EQ(DRM_SPYRE_JOB_OK, st[0]) TH_LOG("cycle %d", i);
		EXPECT_EQ(DRM_SPYRE_JOB_OK, st[1]) TH_LOG("cycle %d", i);
		EXPECT_EQ(DRM_SPYRE_JOB_OK, st[2]) TH_LOG("cycle %d", i);
		EXPECT_EQ(t0.ring_resets, t1.ring_resets);
		EXPECT_EQ(t0.card_resets, t1.card_resets);
		why = take_dump(f.bdf);
		EXPECT_EQ(NULL, why) TH_LOG("cycle %d: %.300s", i, why);
		free(why);
		/* the case is made when a timer fired on a job that had not used its budget */
		made += deferred1 > deferred0;
	}
	EXPECT_EQ(3, made) TH_LOG("%d cycles, %d slowed past the budget by the host", i, slow);
	bo_close(self->fd, f.prog);
	bo_close(self->fd2, f.prog2);
}

/*
 * A job that alone holds the engine past the timeout is still what times out: A spins on
 * ring 0, B (0.3 of the timeout at the host's speed measured just before) waits behind it on
 * another ring, both timers start together. A fails with DRM_SPYRE_JOB_TIMEOUT and its
 * devcoredump names A's client, ring and job and shows A holding the engine past 7/8 of the
 * timeout; B completes. A cycle in which the host slowed B itself past its budget (its own
 * dump shows it held the engine that long) is not counted; 3 cycles must pass. The old driver
 * timed out B too while it waited (its timer fired meanwhile).
 */
TEST_F_TIMEOUT(fault, fair_timeout_blames_engine_holder, 300)
{
	struct drm_spyre_launch l = { .num_cores = 1 };
	struct drm_spyre_telemetry t0, t1;
	uint64_t job_a, job_b, n;
	struct drm_spyre_cmd c;
	int i, st, made = 0;
	int64_t deadline, t1_ns;
	char *dump = NULL, *why;
	struct fair f;
	struct prog p;
	struct stat sb;
	/* the debug kernel has no devcoredump: then the statuses and counters alone */
	bool dumps = !stat(DEVCD_CLASS, &sb);

	fair_init(_metadata, self, &f);
	self->plen = build_spin(&p);
	ASSERT_EQ(0, prog_bo(self->fd, p.img, self->plen, 0, 4096, &self->prog));
	for (i = 0; i < 10 && made < 3; i++) {
		t1_ns = count_probe(self->fd, f.bdf, f.prog, f.plen, f.rate, self->timeout_ms, &n);
		ASSERT_GT(t1_ns, 0) TH_LOG("status %lld", (long long)t1_ns + 1000);
		n = n * (self->timeout_ms * 0.3 * MS_NS) / t1_ns;
		ASSERT_EQ(0, telemetry(self->fd, &t0));
		c = launch_cmd(self->prog, 0, self->plen, &l);
		ASSERT_EQ(0, submit_cmds(self->fd, &c, 1, &job_a));
		ASSERT_EQ(0, count_submit(self->fd2, f.prog2, f.plen, f.ring, n, &job_b));
		ASSERT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job_a)) TH_LOG("cycle %d", i);
		deadline = now_ns() + 5 * SEC_NS;
		while (dumps && !(dump = take_dump(f.bdf)) && now_ns() < deadline)
			usleep(20000);
		if (dumps) {
			ASSERT_NE(NULL, dump) TH_LOG("cycle %d: no devcoredump", i);
			EXPECT_EQ(client_id(self->fd), dump_num(dump, "guilty.client_id"));
			EXPECT_EQ(0, dump_num(dump, "guilty.ring"));
			EXPECT_EQ(job_a, dump_num(dump, "guilty.job_id"));
			EXPECT_EQ(SPYRE_RING_EXEC_RUNNING,
				  dump_num(dump, "ring.0.EXEC_TIME") & SPYRE_RING_EXEC_RUNNING);
			EXPECT_GE(dump_num(dump, "ring.0.EXEC_TIME") & SPYRE_RING_EXEC_MS_MASK,
				  self->timeout_ms - self->timeout_ms / 8);
			free(dump);
		}
		st = job_status(self->fd2, job_b);
		ASSERT_EQ(0, telemetry(self->fd, &t1));
		if (st == DRM_SPYRE_JOB_TIMEOUT) {
			EXPECT_LE(0, blame_deserved(f.bdf, self->timeout_ms, &why))
				TH_LOG("cycle %d: %s", i, why);
			TH_LOG("cycle %d not counted: %s", i, why);
			free(why);
			continue;
		}
		EXPECT_EQ(DRM_SPYRE_JOB_OK, st) TH_LOG("cycle %d", i);
		EXPECT_EQ(t0.jobs_timed_out + 1, t1.jobs_timed_out) TH_LOG("cycle %d", i);
		EXPECT_EQ(t0.ring_resets + 1, t1.ring_resets) TH_LOG("cycle %d", i);
		/* no second dump: it would be B's */
		dump = take_dump(f.bdf);
		EXPECT_EQ(NULL, dump) TH_LOG("cycle %d: %.300s", i, dump);
		free(dump);
		made++;
	}
	EXPECT_EQ(3, made) TH_LOG("%d cycles", i);
	bo_close(self->fd, self->prog);
	bo_close(self->fd, f.prog);
	bo_close(self->fd2, f.prog2);
}

/*
 * Issue 24's acceptance for a spinning user: A runs a launch branching to itself on every
 * ring it can reach, B a count job of 0.1 of the timeout on one of them (a different one
 * each cycle, queued behind A's spinner there). Over 50 cycles every one of A's jobs ends
 * with DRM_SPYRE_JOB_TIMEOUT, B's always completes and is never blamed: exactly one timeout
 * per ring per cycle, and every devcoredump names A's client. With the engine time-sliced
 * (hw 1.5) A's spinners share it in slices and each is charged only its own turns.
 */
TEST_F_TIMEOUT(fault, fair_spinner_on_every_ring, 900)
{
	struct drm_spyre_launch l = { .num_cores = 1 };
	unsigned int nr = self->info.num_rings, r, dumps = 0;
	struct drm_spyre_telemetry t0, t1;
	uint64_t job_a[16], job_b, n;
	struct drm_spyre_submit sub;
	struct drm_spyre_cmd c;
	int64_t t_cycle;
	char *dump;
	struct fair f;
	struct prog p;
	int i, st;

	fair_init(_metadata, self, &f);
	ASSERT_LE(nr, 16);
	self->plen = build_spin(&p);
	ASSERT_EQ(0, prog_bo(self->fd, p.img, self->plen, 0, 4096, &self->prog));
	n = f.rate * self->timeout_ms / 10;
	for (i = 0; i < 50; i++) {
		ASSERT_EQ(0, telemetry(self->fd, &t0));
		t_cycle = now_ns();
		for (r = 0; r < nr; r++) {
			c = launch_cmd(self->prog, 0, self->plen, &l);
			sub = submit_args(&c, 1);
			sub.ring = r;
			ASSERT_EQ(0, submit(self->fd, &sub)) TH_LOG("cycle %d ring %u", i, r);
			job_a[r] = sub.job_id;
		}
		ASSERT_EQ(0, count_submit(self->fd2, f.prog2, f.plen, i % nr, n, &job_b));
		for (r = 0; r < nr; r++)
			EXPECT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job_a[r]))
				TH_LOG("cycle %d: A's spinner on ring %u", i, r);
		st = job_status(self->fd2, job_b);
		EXPECT_EQ(DRM_SPYRE_JOB_OK, st) TH_LOG("cycle %d: B's job on ring %u", i, i % nr);
		ASSERT_EQ(0, telemetry(self->fd, &t1));
		EXPECT_EQ(t0.jobs_timed_out + nr, t1.jobs_timed_out) TH_LOG("cycle %d", i);
		EXPECT_EQ(t0.card_resets, t1.card_resets) TH_LOG("cycle %d", i);
		/* whatever devcoredumps were kept, they are A's */
		while ((dump = take_dump(f.bdf))) {
			EXPECT_EQ(client_id(self->fd), dump_num(dump, "guilty.client_id"))
				TH_LOG("cycle %d: %.300s", i, dump);
			free(dump);
			dumps++;
		}
		if (i % 10 == 0)
			TH_LOG("cycle %d: %.0f ms", i, (now_ns() - t_cycle) / 1e6);
		if (st != DRM_SPYRE_JOB_OK)
			break;
	}
	TH_LOG("%d cycles, %u devcoredumps read", i, dumps);
	bo_close(self->fd, self->prog);
	bo_close(self->fd, f.prog);
	bo_close(self->fd2, f.prog2);
}

/*
 * The engine is shared, not held (hw 1.5, time slicing): A spins on every ring but the last,
 * B runs a count job of 0.1 of the timeout on the last one. B gets its slices while A's
 * spinners run, so it completes before the first of them has used its budget (no timeout
 * yet); then every one of A's spinners times out, B is never blamed. 10 cycles. Without time
 * slicing B waits until the spinners have timed out one after the other.
 */
TEST_F_TIMEOUT(fault, fair_spinners_share_engine, 600)
{
	struct drm_spyre_launch l = { .num_cores = 1 };
	unsigned int nr = self->info.num_rings, r;
	struct drm_spyre_telemetry t0, t1, t2;
	uint64_t job_a[16], job_b, n;
	struct drm_spyre_submit sub;
	struct drm_spyre_cmd c;
	int64_t t_sub, t_b;
	struct fair f;
	struct prog p;
	char *dump;
	int i, st;

	fair_init(_metadata, self, &f);
	ASSERT_LE(nr, 16);
	self->plen = build_spin(&p);
	ASSERT_EQ(0, prog_bo(self->fd, p.img, self->plen, 0, 4096, &self->prog));
	n = f.rate * self->timeout_ms / 10;
	for (i = 0; i < 10; i++) {
		ASSERT_EQ(0, telemetry(self->fd, &t0));
		t_sub = now_ns();
		for (r = 0; r + 1 < nr; r++) {
			c = launch_cmd(self->prog, 0, self->plen, &l);
			sub = submit_args(&c, 1);
			sub.ring = r;
			ASSERT_EQ(0, submit(self->fd, &sub)) TH_LOG("cycle %d ring %u", i, r);
			job_a[r] = sub.job_id;
		}
		ASSERT_EQ(0, count_submit(self->fd2, f.prog2, f.plen, nr - 1, n, &job_b));
		st = job_status(self->fd2, job_b);
		t_b = now_ns() - t_sub;
		ASSERT_EQ(0, telemetry(self->fd, &t1));
		TH_LOG("cycle %d: B done after %.0f ms, %llu of A's spinners timed out by then", i,
		       t_b / 1e6, (unsigned long long)(t1.jobs_timed_out - t0.jobs_timed_out));
		EXPECT_EQ(DRM_SPYRE_JOB_OK, st) TH_LOG("cycle %d", i);
		EXPECT_EQ(t0.jobs_timed_out, t1.jobs_timed_out) TH_LOG("cycle %d", i);
		for (r = 0; r + 1 < nr; r++)
			EXPECT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job_a[r]))
				TH_LOG("cycle %d: A's spinner on ring %u", i, r);
		ASSERT_EQ(0, telemetry(self->fd, &t2));
		EXPECT_EQ(t0.jobs_timed_out + nr - 1, t2.jobs_timed_out) TH_LOG("cycle %d", i);
		while ((dump = take_dump(f.bdf))) {
			EXPECT_EQ(client_id(self->fd), dump_num(dump, "guilty.client_id"))
				TH_LOG("cycle %d: %.300s", i, dump);
			free(dump);
		}
	}
	bo_close(self->fd, self->prog);
	bo_close(self->fd, f.prog);
	bo_close(self->fd2, f.prog2);
}

/*
 * remove() while jobs are in flight and no file is open: no BO reference may leak (the
 * old driver left the jobs to a scheduler that was already gone: "Memory manager not
 * clean"), no warning, and the card comes back on bind.
 */
FIXTURE(unplug) {
	int unused;
};

FIXTURE_SETUP(unplug)
{
	if (geteuid())
		SKIP(return, "needs root (sysfs)");
}

FIXTURE_TEARDOWN(unplug)
{
}

TEST_F_TIMEOUT(unplug, remove_with_jobs_in_flight, 120)
{
	struct drm_spyre_device_info info;
	struct drm_spyre_cmd *cmds;
	uint32_t a, b, h;
	char bdf[64];
	int i, r, fd, warn0, minor;
	uint64_t job;

	fd = open_card(0);
	if (fd < 0)
		SKIP(return, "no spyre accel device");
	ASSERT_EQ(0, card_bdf(fd, bdf, sizeof(bdf)));
	ASSERT_EQ(0, query(fd, DRM_SPYRE_QUERY_DEVICE_INFO, &info, sizeof(info)));
	close(fd);
	warn0 = dmesg_count();

	fd = open_card(0);
	ASSERT_GE(fd, 0);
	cmds = calloc(48, sizeof(*cmds));
	ASSERT_NE(NULL, cmds);
	ASSERT_EQ(0, bo_create(fd, 1 << 20, DRM_SPYRE_BO_DEVICE, &a));
	ASSERT_EQ(0, bo_create(fd, 1 << 20, DRM_SPYRE_BO_DEVICE, &b));
	ASSERT_EQ(0, bo_create(fd, 1 << 20, DRM_SPYRE_BO_HOST, &h));
	for (i = 0; i < 48; i++)
		cmds[i] = copy_cmd(i & 1 ? b : (i & 2 ? h : a), 0, i & 1 ? a : b, 0, 1 << 20);
	/* many jobs, each holding BO references, most of them still queued on the card */
	for (r = 0; r < (int)info.num_rings; r++)
		for (i = 0; i < DRM_SPYRE_FILE_MAX_JOBS / 3 - 5; i++) {
			struct drm_spyre_submit s = submit_args(cmds, 48);

			s.ring = r;
			ASSERT_EQ(0, submit(fd, &s));
		}
	/* the handles go with the file; the jobs keep the BOs */
	close(fd);
	free(cmds);
	ASSERT_EQ(0, write_sysfs("/sys/bus/pci/drivers/spyre/unbind", bdf));
	usleep(200000);
	EXPECT_EQ(warn0, dmesg_count()) TH_LOG("new warnings in dmesg after unbind");

	ASSERT_EQ(0, write_sysfs("/sys/bus/pci/drivers/spyre/bind", bdf));
	minor = find_accel_of(bdf);
	ASSERT_GE(minor, 0);
	fd = open_minor(minor);
	ASSERT_GE(fd, 0);
	EXPECT_EQ(0, devmem_used(fd));
	EXPECT_EQ(0, round_trip(fd, 10000, 3, 5, 1));
	ASSERT_EQ(0, nop_job(fd, 0, &job));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(fd, job));
	close(fd);
}

static int uevent_open(void)
{
	struct sockaddr_nl a = { .nl_family = AF_NETLINK, .nl_groups = 1 };
	int s = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);

	if (s < 0)
		return -errno;
	if (bind(s, (struct sockaddr *)&a, sizeof(a))) {
		close(s);
		return -errno;
	}
	return s;
}

/* Wait up to timeout_ms for a uevent with a variable starting with @key; copy it to @out. */
static int uevent_wait(int s, const char *key, char *out, size_t len, int timeout_ms)
{
	int64_t deadline = now_ns() + timeout_ms * MS_NS;
	char buf[8192];

	while (now_ns() < deadline) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		ssize_t n;
		char *q;

		if (poll(&p, 1, (deadline - now_ns()) / MS_NS + 1) <= 0)
			continue;
		n = recv(s, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			continue;
		buf[n] = 0;
		for (q = buf; q < buf + n; q += strlen(q) + 1)
			if (!strncmp(q, key, strlen(key))) {
				snprintf(out, len, "%s", q);
				return 0;
			}
	}
	return -ETIME;
}

/* The bus master bit of PCI device @bdf's command register: 1, 0, or -errno. */
static int bus_master(const char *bdf)
{
	char path[160];
	uint16_t cmd;
	int f, n;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/config", bdf);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return -errno;
	n = pread(f, &cmd, sizeof(cmd), 4);
	close(f);
	if (n != sizeof(cmd))
		return -EIO;
	return !!(cmd & 0x4);
}

/*
 * Card resets are rate-limited (5 a minute): a ring that does not stop once the budget is
 * spent wedges the card without any reset, so it may still be running everything it was
 * given, on every ring. Its bus mastering must be off before the jobs fail (issue 24,
 * defect 6); a PCI reset while bound brings it back.
 */
TEST_F_TIMEOUT(fault, reset_budget_spent_stops_dma, 120)
{
	struct drm_spyre_telemetry t;
	struct drm_spyre_cmd c;
	char bdf[64], path[160];
	uint64_t job;
	int i;

	ASSERT_EQ(0, card_bdf(self->fd, bdf, sizeof(bdf)));
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/reset", bdf);
	if (access(path, W_OK))
		SKIP(return, "%s: the card has no PCI reset method", path);
	ASSERT_EQ(1, bus_master(bdf));
	c = copy_cmd(self->hbo, 0, self->dbo, 0, 4096);
	/* sticky hangs: each costs a card reset, until there is none left */
	for (i = 0; i < 8; i++) {
		ASSERT_EQ(0, fault_hang(self->fd, 1 | SPYRE_HANG_STICKY | SPYRE_HANG_RING(0)));
		ASSERT_EQ(0, submit_cmds(self->fd, &c, 1, &job));
		EXPECT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job));
		ASSERT_EQ(0, telemetry(self->fd, &t));
		if (t.state == DRM_SPYRE_STATE_WEDGED)
			break;
		ASSERT_EQ(1, bus_master(bdf)) TH_LOG("hang %d: card reset, still off", i);
	}
	ASSERT_EQ(DRM_SPYRE_STATE_WEDGED, t.state);
	TH_LOG("wedged at sticky hang %d", i + 1);
	EXPECT_GE(6, i + 1);
	EXPECT_EQ(0, bus_master(bdf));

	ASSERT_EQ(0, write_sysfs(path, "1"));
	ASSERT_EQ(0, telemetry(self->fd, &t));
	EXPECT_EQ(DRM_SPYRE_STATE_OK, t.state);
	EXPECT_EQ(1, bus_master(bdf));
	EXPECT_EQ(0, round_trip(self->fd2, 10000, 3, 5, 17));
}

/*
 * A hang whose card reset does not finish (issue 24, defect 6): the card is not confirmed
 * idle when every job is failed, so the driver stops its bus mastering first (no DMA into
 * host memory the failed jobs' BOs, rings and tables give back) and keeps the card memory
 * freed from then on out of the allocator (the card may still write it). A PCI reset while
 * bound ends the wedge: bus mastering is back, the quarantined memory returns, jobs run.
 * The old driver left bus mastering on and gave the memory back at once.
 */
TEST_F_TIMEOUT(fault, wedge_stops_dma_and_quarantines, 120)
{
	struct drm_spyre_telemetry t;
	struct innocent x;
	struct drm_spyre_cmd c;
	char bdf[64], path[160];
	uint64_t job, used0;

	ASSERT_EQ(0, card_bdf(self->fd, bdf, sizeof(bdf)));
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/reset", bdf);
	if (access(path, W_OK))
		SKIP(return, "%s: the card has no PCI reset method", path);
	ASSERT_EQ(1, bus_master(bdf));
	ASSERT_EQ(0, innocent_init(&x, self->fd2));
	used0 = devmem_used(self->fd);
	ASSERT_EQ(0, fault_hang(self->fd, 1 | SPYRE_HANG_WEDGE | SPYRE_HANG_RING(0)));
	c = copy_cmd(self->hbo, 0, self->dbo, 0, 4096);
	ASSERT_EQ(0, submit_cmds(self->fd, &c, 1, &job));
	ASSERT_EQ(0, innocent_submit(&x, 0));
	EXPECT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job));
	EXPECT_EQ(DRM_SPYRE_JOB_ABORTED, job_status(x.fd, x.job));
	ASSERT_EQ(0, telemetry(self->fd, &t));
	ASSERT_EQ(DRM_SPYRE_STATE_WEDGED, t.state);
	/* the card can no longer reach host memory */
	EXPECT_EQ(0, bus_master(bdf));
	/* the failed jobs' card memory, freed, stays out of the allocator */
	innocent_fini(&x);
	ASSERT_EQ(0, bo_close(self->fd, self->dbo));
	EXPECT_EQ(used0, devmem_used(self->fd));

	/* the PCI reset ends the wedge: DMA back, the memory given back, the card works */
	ASSERT_EQ(0, write_sysfs(path, "1"));
	ASSERT_EQ(0, telemetry(self->fd, &t));
	EXPECT_EQ(DRM_SPYRE_STATE_OK, t.state);
	EXPECT_EQ(1, bus_master(bdf));
	EXPECT_EQ(used0 - INNOCENT_BYTES - 4096, devmem_used(self->fd));
	EXPECT_EQ(0, round_trip(self->fd2, 10000, 3, 5, 13));
	ASSERT_EQ(0, nop_job(self->fd, 0, &job));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fd, job));
}

/*
 * A hang that only a PCI reset ends (SPYRE_HANG_WEDGE): the card reset does not complete,
 * the card is wedged. The guilty job times out, the others fail (ABORTED), a "WEDGED="
 * uevent is sent, the state is visible in QUERY, new work fails with -EIO; a bind after the
 * unbind is refused (-ETIMEDOUT: the card's reset does not complete); after a PCI function
 * reset the bind succeeds and the card works again.
 */
TEST_F_TIMEOUT(fault, z_wedge_then_pci_reset, 120)
{
	struct drm_spyre_telemetry t;
	struct innocent x;
	struct drm_spyre_cmd c;
	char bdf[64], path[160], ev[128];
	uint64_t job;
	uint32_t h;
	int ue, fd, minor;
	int64_t t0;

	ue = uevent_open();
	ASSERT_GE(ue, 0);
	ASSERT_EQ(0, card_bdf(self->fd, bdf, sizeof(bdf)));
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/reset", bdf);
	if (access(path, W_OK))
		SKIP(return, "%s: the card has no PCI reset method", path);
	ASSERT_EQ(0, innocent_init(&x, self->fd2));
	ASSERT_EQ(0, fault_hang(self->fd, 1 | SPYRE_HANG_WEDGE | SPYRE_HANG_RING(0)));
	c = copy_cmd(self->hbo, 0, self->dbo, 0, 4096);
	t0 = now_ns();
	ASSERT_EQ(0, submit_cmds(self->fd, &c, 1, &job));
	ASSERT_EQ(0, innocent_submit(&x, 0));
	EXPECT_EQ(DRM_SPYRE_JOB_TIMEOUT, job_status(self->fd, job));
	EXPECT_EQ(DRM_SPYRE_JOB_ABORTED, job_status(x.fd, x.job));
	EXPECT_EQ(0, uevent_wait(ue, "WEDGED=", ev, sizeof(ev), 5000));
	TH_LOG("after %.0f ms: uevent %s", (now_ns() - t0) / 1e6, ev);
	close(ue);
	ASSERT_EQ(0, telemetry(self->fd, &t));
	EXPECT_EQ(DRM_SPYRE_STATE_WEDGED, t.state);
	EXPECT_STREQ("wedged", card_attr(self->fd, "state", ev, sizeof(ev)));
	EXPECT_EQ(-EIO, nop_job(self->fd, 0, &job));
	EXPECT_EQ(-EIO, nop_job(self->fd2, 1, &job));
	EXPECT_EQ(-EIO, bo_create(self->fd, 4096, DRM_SPYRE_BO_DEVICE, &h));
	innocent_fini(&x);

	close(self->fd);
	close(self->fd2);
	self->fd = self->fd2 = -1;
	ASSERT_EQ(0, write_sysfs("/sys/bus/pci/drivers/spyre/unbind", bdf));
	/*
	 * Still wedged, its reset never completes: probe refuses the card (the old driver bound
	 * it, and its rings, never enabled, ran nothing: every BO_CREATE failed with -EIO).
	 */
	EXPECT_EQ(-ETIMEDOUT, write_sysfs("/sys/bus/pci/drivers/spyre/bind", bdf));
	EXPECT_LT(find_accel_of(bdf), 0);
	ASSERT_EQ(0, write_sysfs(path, "1"));
	ASSERT_EQ(0, write_sysfs("/sys/bus/pci/drivers/spyre/bind", bdf));
	minor = find_accel_of(bdf);
	ASSERT_GE(minor, 0);
	fd = open_minor(minor);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(0, telemetry(fd, &t));
	EXPECT_EQ(DRM_SPYRE_STATE_OK, t.state);
	EXPECT_STREQ("ready", card_attr(fd, "state", ev, sizeof(ev)));
	EXPECT_EQ(0, round_trip(fd, 10000, 3, 5, 2));
	ASSERT_EQ(0, nop_job(fd, 0, &job));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(fd, job));
	close(fd);
}

TEST_HARNESS_MAIN
