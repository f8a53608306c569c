// SPDX-License-Identifier: GPL-2.0-only
/*
 * Peer-to-peer dma-bufs between spyre cards (Documentation/uapi.md "Sharing BOs (PRIME)",
 * driver.md "Peer-to-peer dma-bufs"): a DEVICE BO of one card exported as a dma-buf and
 * imported on another card as a PEER BO, the host side of COPY and COPY_2D, so the copy
 * moves card to card. Needs two cards of hw 1.6 (their VERSION register, through QUERY) and
 * skips otherwise, or when a card of the spyre-vm guest runs with p2p=off (its -device options):
 * a driver that does not report DRM_SPYRE_CAP_P2P on such cards fails. The hot-unplug case needs a spyre-vm guest (tools/vm/guest-qmp).
 *
 * Copyright (C) 2026 The Spyre open stack authors
 */
#include <sys/wait.h>

#include "kselftest_harness.h"
#include "spyre_test_lib.h"

#define CARD_SH		"tests/guest/uapi/p2p-card.sh"

static int device_info(int fd, struct drm_spyre_device_info *di)
{
	memset(di, 0, sizeof(*di));
	return query(fd, DRM_SPYRE_QUERY_DEVICE_INFO, di, sizeof(*di));
}

#define P2P_HW		0x00010006u	/* hw 1.6: CAP_P2P, unless the card runs with p2p=off */

static uint64_t devmem_used(int fd)
{
	struct drm_spyre_mem_info mi = { 0 };

	return query(fd, DRM_SPYRE_QUERY_MEM_INFO, &mi, sizeof(mi)) ? ~0ull : mi.devmem_used;
}

/*
 * devmem_used of fd once it equals want, waiting up to 5 s: a finished job's BOs are put
 * when the driver frees the job, shortly after JOB_WAIT returns.
 */
static uint64_t used_settles_at(int fd, uint64_t want)
{
	uint64_t used = devmem_used(fd);
	int i;

	for (i = 0; i < 100 && used != want; i++) {
		usleep(50000);
		used = devmem_used(fd);
	}
	return used;
}

/* Run one COPY (or COPY_2D with ext) on fd and return the job status or -errno. */
static int run_copy(int fd, struct drm_spyre_cmd *c)
{
	uint64_t job;
	int ret = submit_cmds(fd, c, 1, &job);

	return ret ? ret : job_status(fd, job);
}

/* Export DEVICE BO h of fd as a dma-buf; the fd, or -errno. */
static int export_bo(int fd, uint32_t h)
{
	int dmabuf = -1;

	if (drmPrimeHandleToFD(fd, h, DRM_CLOEXEC | DRM_RDWR, &dmabuf))
		return -errno;
	return dmabuf;
}

static int import_fd(int fd, int dmabuf, uint32_t *h)
{
	return drmPrimeFDToHandle(fd, dmabuf, h) ? -errno : 0;
}

/*
 * Whether a card of this spyre-vm guest runs with p2p=off: the -device options spyre-vm gave
 * QEMU ($SPYRE_VM_DIR/cards), read directly (a QMP query per test was too slow for the
 * harness's timeout on the debug kernel).
 */
static bool vm_card_p2p_off(void)
{
	const char *dir = getenv("SPYRE_VM_DIR");
	char path[512], *cards;
	bool off;

	if (!dir)
		return false;
	snprintf(path, sizeof(path), "%s/cards", dir);
	cards = read_all(path);
	off = cards && strstr(cards, "p2p=off");
	free(cards);
	return off;
}

FIXTURE(p2p) {
	int fd0, fd1;		/* exporter and importer */
	uint64_t caps0, caps1;
};

FIXTURE_SETUP(p2p)
{
	struct drm_spyre_device_info d0, d1;
	int minors[MAX_CARDS];
	int n = spyre_minors(minors);

	self->fd0 = self->fd1 = -1;
	if (n < 2)
		SKIP(return, "needs 2 spyre cards, the VM has %d", n);
	self->fd0 = open_minor(minors[0]);
	self->fd1 = open_minor(minors[1]);
	ASSERT_GE(self->fd0, 0);
	ASSERT_GE(self->fd1, 0);
	ASSERT_EQ(0, device_info(self->fd0, &d0));
	ASSERT_EQ(0, device_info(self->fd1, &d1));
	if (d0.hw_version < P2P_HW || d1.hw_version < P2P_HW)
		SKIP(return, "card model older than hw 1.6 (no peer-to-peer DMA)");
	if (vm_card_p2p_off())
		SKIP(return, "a card runs with p2p=off");
	self->caps0 = d0.caps;
	self->caps1 = d1.caps;
}

FIXTURE_TEARDOWN(p2p)
{
	if (self->fd0 >= 0)
		close(self->fd0);
	if (self->fd1 >= 0)
		close(self->fd1);
}

/* Both cards report DRM_SPYRE_CAP_P2P (the card model's default, p2p=on). */
TEST_F_TIMEOUT(p2p, cap_reported, 120)
{
	EXPECT_TRUE(self->caps0 & DRM_SPYRE_CAP_P2P);
	EXPECT_TRUE(self->caps1 & DRM_SPYRE_CAP_P2P);
}

static int accel_minor(int fd)
{
	struct stat st;

	return fstat(fd, &st) ? -1 : (int)minor(st.st_rdev);
}

/* sysfs p2p_peers of each card names the other card's accel minor, not its own. */
TEST_F_TIMEOUT(p2p, sysfs_p2p_peers, 120)
{
	int fds[2] = { self->fd0, self->fd1 }, k;

	for (k = 0; k < 2; k++) {
		char path[128], want[16], *peers, *tok, *save;
		int own = accel_minor(fds[k]), other = accel_minor(fds[1 - k]);
		int seen_other = 0, seen_own = 0;

		snprintf(path, sizeof(path), "/sys/class/accel/accel%d/device/p2p_peers", own);
		peers = read_all(path);
		ASSERT_NE(NULL, peers) TH_LOG("no %s", path);
		for (tok = strtok_r(peers, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			snprintf(want, sizeof(want), "%d", other);
			seen_other |= !strcmp(tok, want);
			snprintf(want, sizeof(want), "%d", own);
			seen_own |= !strcmp(tok, want);
		}
		free(peers);
		EXPECT_TRUE(seen_other);
		EXPECT_FALSE(seen_own);
	}
}

/*
 * Export on card 0, import on card 1: a PEER BO of the same size, no device address, no
 * mmap offset (not CPU-mappable through card 1); importing again gives the same handle;
 * on card 0 (another file) the dma-buf is the DEVICE BO itself.
 */
TEST_F_TIMEOUT(p2p, export_import_info, 120)
{
	struct drm_spyre_bo_info info;
	uint32_t d, p, p2, same;
	int dmabuf, fd0b;
	void *m;

	ASSERT_EQ(0, bo_create(self->fd0, 3 * 4096, DRM_SPYRE_BO_DEVICE, &d));
	dmabuf = export_bo(self->fd0, d);
	ASSERT_GE(dmabuf, 0);
	ASSERT_EQ(0, import_fd(self->fd1, dmabuf, &p));
	ASSERT_EQ(0, bo_info(self->fd1, p, &info));
	EXPECT_EQ(DRM_SPYRE_BO_PEER, info.flags);
	EXPECT_EQ(3 * 4096, info.size);
	EXPECT_EQ(0, info.dev_addr);
	EXPECT_EQ(0, info.mmap_offset);
	m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd1, info.mmap_offset);
	EXPECT_EQ(MAP_FAILED, m);
	ASSERT_EQ(0, import_fd(self->fd1, dmabuf, &p2));
	EXPECT_EQ(p, p2);

	fd0b = open_card(0);
	ASSERT_GE(fd0b, 0);
	ASSERT_EQ(0, import_fd(fd0b, dmabuf, &same));
	ASSERT_EQ(0, bo_info(fd0b, same, &info));
	EXPECT_EQ(DRM_SPYRE_BO_DEVICE, info.flags);
	EXPECT_EQ(3 * 4096, info.size);
	close(fd0b);
	EXPECT_EQ(0, bo_close(self->fd1, p));
	EXPECT_EQ(0, bo_close(self->fd0, d));
	close(dmabuf);
}

/* The dma-buf maps like the DEVICE BO: shared mappings show its memory, private refused. */
TEST_F_TIMEOUT(p2p, dmabuf_mmap, 120)
{
	uint8_t *pd, *pb;
	uint32_t d;
	int dmabuf;
	void *m;

	ASSERT_EQ(0, bo_create(self->fd0, 8192, DRM_SPYRE_BO_DEVICE, &d));
	pd = bo_map(self->fd0, d);
	ASSERT_NE(NULL, pd);
	fill(pd, 8192, 5);
	dmabuf = export_bo(self->fd0, d);
	ASSERT_GE(dmabuf, 0);
	pb = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, dmabuf, 0);
	ASSERT_NE(MAP_FAILED, pb);
	EXPECT_EQ(0, memcmp(pd, pb, 8192));
	pb[4100] ^= 0x5a;
	EXPECT_EQ(pb[4100], pd[4100]);
	munmap(pb, 8192);
	m = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, dmabuf, 0);
	EXPECT_EQ(MAP_FAILED, m);
	if (m != MAP_FAILED)
		munmap(m, 8192);
	munmap(pd, 8192);
	close(dmabuf);
	EXPECT_EQ(0, bo_close(self->fd0, d));
}

/*
 * COPY card 0 -> card 1 and back through the PEER BO, at odd offsets and sizes, the bytes
 * checked through both cards' mmaps; the bytes around the copied range stay untouched.
 */
TEST_F_TIMEOUT(p2p, copy_both_ways, 120)
{
	const size_t sz = (1 << 20) + 3 * 4096;
	const size_t n = (1 << 20) + 123;
	uint8_t *a, *b, *ref;
	uint32_t da, db, pa;
	struct drm_spyre_cmd c;
	int dmabuf;

	ref = malloc(sz);
	ASSERT_NE(NULL, ref);
	ASSERT_EQ(0, bo_create(self->fd0, sz, DRM_SPYRE_BO_DEVICE, &da));
	ASSERT_EQ(0, bo_create(self->fd1, sz, DRM_SPYRE_BO_DEVICE, &db));
	a = bo_map(self->fd0, da);
	b = bo_map(self->fd1, db);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	fill(a, sz, 11);
	memset(b, 0xee, sz);
	dmabuf = export_bo(self->fd0, da);
	ASSERT_GE(dmabuf, 0);
	ASSERT_EQ(0, import_fd(self->fd1, dmabuf, &pa));

	/* card 0 -> card 1: the peer BO is the source */
	c = copy_cmd(pa, 77, db, 4096 + 5, n);
	ASSERT_EQ(DRM_SPYRE_JOB_OK, run_copy(self->fd1, &c));
	EXPECT_EQ(0, memcmp(a + 77, b + 4096 + 5, n));
	EXPECT_EQ(0xee, b[4096 + 4]);
	EXPECT_EQ(0xee, b[4096 + 5 + n]);

	/* card 1 -> card 0: the peer BO is the destination */
	fill(b, sz, 23);
	memcpy(ref, a, sz);
	c = copy_cmd(db, 9, pa, 2 * 4096 + 1, n);
	ASSERT_EQ(DRM_SPYRE_JOB_OK, run_copy(self->fd1, &c));
	memcpy(ref + 2 * 4096 + 1, b + 9, n);
	EXPECT_EQ(0, memcmp(ref, a, sz));

	munmap(a, sz);
	munmap(b, sz);
	free(ref);
	close(dmabuf);
	EXPECT_EQ(0, bo_close(self->fd1, pa));
	EXPECT_EQ(0, bo_close(self->fd1, db));
	EXPECT_EQ(0, bo_close(self->fd0, da));
}

/* COPY_2D with a peer side: rows of a pitched block, both directions. */
TEST_F_TIMEOUT(p2p, copy_2d, 120)
{
	const uint32_t w = 300, h = 40, sp = 1000, dp = 4096 + 8;
	const size_t sz = 256 * 1024;
	struct drm_spyre_copy_2d e = { .height = h, .src_pitch = sp, .dst_pitch = dp };
	struct drm_spyre_cmd c;
	uint8_t *a, *b;
	uint32_t da, db, pa, r;
	int dmabuf;

	if (!(self->caps1 & DRM_SPYRE_CAP_COPY_2D))
		SKIP(return, "no DRM_SPYRE_CAP_COPY_2D");
	ASSERT_EQ(0, bo_create(self->fd0, sz, DRM_SPYRE_BO_DEVICE, &da));
	ASSERT_EQ(0, bo_create(self->fd1, sz, DRM_SPYRE_BO_DEVICE, &db));
	a = bo_map(self->fd0, da);
	b = bo_map(self->fd1, db);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	fill(a, sz, 31);
	memset(b, 0, sz);
	dmabuf = export_bo(self->fd0, da);
	ASSERT_GE(dmabuf, 0);
	ASSERT_EQ(0, import_fd(self->fd1, dmabuf, &pa));

	c = copy_cmd(pa, 3, db, 64, w);
	c.op = DRM_SPYRE_CMD_COPY_2D;
	c.ext = (uintptr_t)&e;
	c.ext_size = sizeof(e);
	ASSERT_EQ(DRM_SPYRE_JOB_OK, run_copy(self->fd1, &c));
	for (r = 0; r < h; r++)
		ASSERT_EQ(0, memcmp(a + 3 + (size_t)r * sp, b + 64 + (size_t)r * dp, w));
	EXPECT_EQ(0, b[63]);
	EXPECT_EQ(0, b[64 + w]);

	/* and back into card 0, at another offset with the pitches swapped */
	e.src_pitch = dp;
	e.dst_pitch = sp;
	c = copy_cmd(db, 64, pa, 128 * 1024, w);
	c.op = DRM_SPYRE_CMD_COPY_2D;
	c.ext = (uintptr_t)&e;
	c.ext_size = sizeof(e);
	ASSERT_EQ(DRM_SPYRE_JOB_OK, run_copy(self->fd1, &c));
	for (r = 0; r < h; r++)
		ASSERT_EQ(0, memcmp(a + 3 + (size_t)r * sp, a + 128 * 1024 + (size_t)r * sp, w));

	munmap(a, sz);
	munmap(b, sz);
	close(dmabuf);
	EXPECT_EQ(0, bo_close(self->fd1, pa));
	EXPECT_EQ(0, bo_close(self->fd1, db));
	EXPECT_EQ(0, bo_close(self->fd0, da));
}

/*
 * Semaphores across cards (hw 1.8): card 0 waits on a semaphore in its own DEVICE BO; card 1
 * signals it through the imported PEER BO (a posted write into card 0's BAR2), which
 * releases card 0's job. Card 1 can wait on the PEER BO too.
 */
TEST_F_TIMEOUT(p2p, semaphore_into_peer, 120)
{
	struct drm_spyre_sem sig = { .value = 9 };
	struct drm_spyre_sem wt = { .value = 9, .timeout_us = 1000000 };
	struct drm_spyre_cmd c = { .ext_size = sizeof(struct drm_spyre_sem) };
	struct drm_spyre_job_wait w;
	struct drm_spyre_submit s;
	uint64_t waiter, job;
	uint32_t da, pa;
	int dmabuf;

	if (!(self->caps0 & DRM_SPYRE_CAP_SEMAPHORE) || !(self->caps1 & DRM_SPYRE_CAP_SEMAPHORE))
		SKIP(return, "card model older than hw 1.8 (no semaphores)");
	ASSERT_EQ(0, bo_create(self->fd0, 4096, DRM_SPYRE_BO_DEVICE, &da));
	dmabuf = export_bo(self->fd0, da);
	ASSERT_GE(dmabuf, 0);
	ASSERT_EQ(0, import_fd(self->fd1, dmabuf, &pa));

	c.op = DRM_SPYRE_CMD_SEM_WAIT;
	c.src_handle = da;
	c.src_offset = 64;
	c.ext = (uintptr_t)&wt;
	s = submit_args(&c, 1);
	ASSERT_EQ(0, submit(self->fd0, &s));
	waiter = s.job_id;
	EXPECT_EQ(-ETIME, job_wait(self->fd0, waiter, now_ns() + SEC_NS / 20, NULL));

	memset(&c, 0, sizeof(c));
	c.op = DRM_SPYRE_CMD_SEM_SIGNAL;
	c.dst_handle = pa;
	c.dst_offset = 64;
	c.ext = (uintptr_t)&sig;
	c.ext_size = sizeof(sig);
	s = submit_args(&c, 1);
	ASSERT_EQ(0, submit(self->fd1, &s));
	EXPECT_EQ(0, job_wait(self->fd1, s.job_id, now_ns() + 30 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, w.status);
	EXPECT_EQ(0, job_wait(self->fd0, waiter, now_ns() + 30 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, w.status);

	/* card 1 waits on the PEER BO: the value is there already */
	memset(&c, 0, sizeof(c));
	c.op = DRM_SPYRE_CMD_SEM_WAIT;
	c.src_handle = pa;
	c.src_offset = 64;
	c.ext = (uintptr_t)&wt;
	c.ext_size = sizeof(wt);
	s = submit_args(&c, 1);
	ASSERT_EQ(0, submit(self->fd1, &s));
	job = s.job_id;
	EXPECT_EQ(0, job_wait(self->fd1, job, now_ns() + 30 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, w.status);

	close(dmabuf);
	EXPECT_EQ(0, bo_close(self->fd1, pa));
	EXPECT_EQ(0, bo_close(self->fd0, da));
}

/*
 * Refusals on the importer: a PEER BO is never a LAUNCH program, window or result BO
 * (-EINVAL; the same launch with card 1's own BO runs), and a copy between a PEER BO and
 * a HOST BO has two host sides (-EINVAL). A HOST BO's dma-buf of card 0 is foreign to
 * card 1 (-EINVAL).
 */
TEST_F_TIMEOUT(p2p, refusals, 120)
{
	struct drm_spyre_launch l = { .num_cores = 1, .num_args = 1, .args = { 1 } };
	struct drm_spyre_cmd c;
	struct prog pr;
	uint32_t da, pa, prog, win, hb, h0, hx;
	uint64_t handles[1];
	size_t plen = build_count(&pr);
	int dmabuf, hbuf;

	ASSERT_EQ(0, bo_create(self->fd0, 8192, DRM_SPYRE_BO_DEVICE, &da));
	dmabuf = export_bo(self->fd0, da);
	ASSERT_GE(dmabuf, 0);
	ASSERT_EQ(0, import_fd(self->fd1, dmabuf, &pa));

	if (self->caps1 & DRM_SPYRE_CAP_LAUNCH) {
		ASSERT_EQ(0, prog_bo(self->fd1, pr.img, plen, 0, 4096, &prog));
		ASSERT_EQ(0, bo_create(self->fd1, 8192, DRM_SPYRE_BO_DEVICE, &win));
		l.bo_count = 1;
		l.bo_handles = (uintptr_t)handles;
		handles[0] = win;
		c = launch_cmd(prog, 0, plen, &l);
		EXPECT_EQ(DRM_SPYRE_JOB_OK, run_copy(self->fd1, &c));
		handles[0] = pa;
		EXPECT_EQ(-EINVAL, run_copy(self->fd1, &c));
		l.bo_count = 0;
		l.bo_handles = 0;
		c = launch_cmd(pa, 0, plen, &l);
		EXPECT_EQ(-EINVAL, run_copy(self->fd1, &c));
		l.result_handle = pa;
		l.result_size = sizeof(struct drm_spyre_launch_result);
		c = launch_cmd(prog, 0, plen, &l);
		EXPECT_EQ(-EINVAL, run_copy(self->fd1, &c));
		bo_close(self->fd1, prog);
		bo_close(self->fd1, win);
	}

	ASSERT_EQ(0, bo_create(self->fd1, 8192, DRM_SPYRE_BO_HOST, &hb));
	c = copy_cmd(pa, 0, hb, 0, 4096);
	EXPECT_EQ(-EINVAL, run_copy(self->fd1, &c));
	c = copy_cmd(hb, 0, pa, 0, 4096);
	EXPECT_EQ(-EINVAL, run_copy(self->fd1, &c));
	bo_close(self->fd1, hb);

	ASSERT_EQ(0, bo_create(self->fd0, 8192, DRM_SPYRE_BO_HOST, &h0));
	hbuf = export_bo(self->fd0, h0);
	ASSERT_GE(hbuf, 0);
	EXPECT_EQ(-EINVAL, import_fd(self->fd1, hbuf, &hx));
	close(hbuf);
	bo_close(self->fd0, h0);

	close(dmabuf);
	EXPECT_EQ(0, bo_close(self->fd1, pa));
	EXPECT_EQ(0, bo_close(self->fd0, da));
}

/* A card without DRM_SPYRE_CAP_P2P refuses the export (-EOPNOTSUPP), if the VM has one. */
TEST(export_refused_without_p2p)
{
	int minors[MAX_CARDS], n = spyre_minors(minors), i, tested = 0;

	for (i = 0; i < n; i++) {
		struct drm_spyre_device_info di;
		int fd = open_minor(minors[i]), dmabuf;
		uint32_t d;

		ASSERT_GE(fd, 0);
		ASSERT_EQ(0, device_info(fd, &di));
		if (!(di.caps & DRM_SPYRE_CAP_P2P)) {
			ASSERT_EQ(0, bo_create(fd, 4096, DRM_SPYRE_BO_DEVICE, &d));
			dmabuf = export_bo(fd, d);
			EXPECT_EQ(-EOPNOTSUPP, dmabuf);
			if (dmabuf >= 0)
				close(dmabuf);
			tested++;
		}
		close(fd);
	}
	if (!tested)
		SKIP(return, "every card has CAP_P2P (a card with p2p=off is tested)");
}

/*
 * Close orders: the exporter's handle and file go first and the PEER BO still copies (the
 * dma-buf keeps card 0's memory); then the importer's handle first and the exporter's
 * last. Card 0's device memory in use is back where it started each time.
 */
TEST_F_TIMEOUT(p2p, close_orders, 120)
{
	uint64_t base0 = devmem_used(self->fd0), base1 = devmem_used(self->fd1), job;
	uint32_t da, db, dx, pa;
	struct drm_spyre_cmd c;
	uint8_t *b;
	int fdx, dmabuf;

	/* exporter first */
	fdx = open_card(0);
	ASSERT_GE(fdx, 0);
	ASSERT_EQ(0, bo_create(fdx, 65536, DRM_SPYRE_BO_DEVICE, &da));
	b = bo_map(fdx, da);
	ASSERT_NE(NULL, b);
	memset(b, 0x3c, 65536);
	munmap(b, 65536);
	dmabuf = export_bo(fdx, da);
	ASSERT_GE(dmabuf, 0);
	ASSERT_EQ(0, import_fd(self->fd1, dmabuf, &pa));
	EXPECT_EQ(0, bo_close(fdx, da));
	close(fdx);
	close(dmabuf);
	EXPECT_EQ(base0 + 65536, devmem_used(self->fd0));
	ASSERT_EQ(0, bo_create(self->fd1, 65536, DRM_SPYRE_BO_DEVICE, &db));
	c = copy_cmd(pa, 0, db, 0, 65536);
	ASSERT_EQ(DRM_SPYRE_JOB_OK, run_copy(self->fd1, &c));
	b = bo_map(self->fd1, db);
	ASSERT_NE(NULL, b);
	EXPECT_EQ(0x3c, b[0]);
	EXPECT_EQ(0x3c, b[65535]);
	munmap(b, 65536);
	EXPECT_EQ(0, bo_close(self->fd1, pa));
	EXPECT_EQ(base0, used_settles_at(self->fd0, base0));

	/* importer first: its file closes with a copy submitted, maybe still running */
	ASSERT_EQ(0, bo_create(self->fd0, 65536, DRM_SPYRE_BO_DEVICE, &da));
	dmabuf = export_bo(self->fd0, da);
	ASSERT_GE(dmabuf, 0);
	fdx = open_card(1);
	ASSERT_GE(fdx, 0);
	ASSERT_EQ(0, import_fd(fdx, dmabuf, &pa));
	close(dmabuf);
	ASSERT_EQ(0, bo_create(fdx, 65536, DRM_SPYRE_BO_DEVICE, &dx));
	c = copy_cmd(pa, 0, dx, 0, 65536);
	ASSERT_EQ(0, submit_cmds(fdx, &c, 1, &job));
	close(fdx);		/* the job keeps the PEER BO until it ends */
	EXPECT_EQ(0, bo_close(self->fd0, da));
	/* the in-flight job ends on its own; then everything is back */
	EXPECT_EQ(base0, used_settles_at(self->fd0, base0));
	EXPECT_EQ(0, bo_close(self->fd1, db));
	EXPECT_EQ(base1, used_settles_at(self->fd1, base1));
}

static int card_sh(const char *cmd, const char *id, char *out, size_t len)
{
	char line[256];
	FILE *f;
	int st;

	snprintf(line, sizeof(line), "%s %s %s", CARD_SH, cmd, id);
	f = popen(line, "r");
	if (!f)
		return -1;
	if (out && (!fgets(out, len, f) || !*out))
		out[0] = 0;
	if (out)
		out[strcspn(out, "\n")] = 0;
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * The exporter (QEMU card spyre1) is hot-unplugged while card spyre0 holds a PEER BO of it:
 * new copies with it fail with -ENODEV, BO_INFO still answers, closing it frees
 * everything, card spyre0 keeps working; spyre1 is plugged back in afterwards.
 */
TEST_F_TIMEOUT(p2p, exporter_unplugged, 300)
{
	char n0[64], n1[64];
	uint32_t da, pa, db, pj;
	struct drm_spyre_bo_info info;
	struct drm_spyre_cmd c;
	int e, i, j, dmabuf;
	uint64_t base;

	if (!getenv("SPYRE_VM_DIR") || access(CARD_SH, X_OK))
		SKIP(return, "needs a spyre-vm guest with tools/vm/guest-qmp, run from /src");
	ASSERT_EQ(0, card_sh("node", "spyre0", n0, sizeof(n0)));
	ASSERT_EQ(0, card_sh("node", "spyre1", n1, sizeof(n1)));
	e = open(n1, O_RDWR | O_CLOEXEC);
	i = open(n0, O_RDWR | O_CLOEXEC);
	ASSERT_GE(e, 0);
	ASSERT_GE(i, 0);
	base = devmem_used(i);

	ASSERT_EQ(0, bo_create(e, 65536, DRM_SPYRE_BO_DEVICE, &da));
	dmabuf = export_bo(e, da);
	ASSERT_GE(dmabuf, 0);
	ASSERT_EQ(0, import_fd(i, dmabuf, &pa));
	ASSERT_EQ(0, bo_create(i, 65536, DRM_SPYRE_BO_DEVICE, &db));
	c = copy_cmd(pa, 0, db, 0, 65536);
	ASSERT_EQ(DRM_SPYRE_JOB_OK, run_copy(i, &c));

	/* the exporter's file and dma-buf stay open across its removal */
	ASSERT_EQ(0, card_sh("unplug", "spyre1", NULL, 0));
	EXPECT_EQ(-ENODEV, run_copy(i, &c));
	c = copy_cmd(db, 0, pa, 0, 4096);
	EXPECT_EQ(-ENODEV, run_copy(i, &c));
	ASSERT_EQ(0, bo_info(i, pa, &info));
	EXPECT_EQ(DRM_SPYRE_BO_PEER, info.flags);
	/* a new import of the revoked dma-buf fails too (the exporter maps nothing any more) */
	j = open(n0, O_RDWR | O_CLOEXEC);
	ASSERT_GE(j, 0);
	EXPECT_EQ(-ENODEV, import_fd(j, dmabuf, &pj));
	close(j);
	EXPECT_EQ(0, bo_close(i, pa));
	close(dmabuf);
	close(e);
	ASSERT_EQ(0, round_trip(i, 65536 + 17, 3, 5, 41));
	EXPECT_EQ(0, bo_close(i, db));
	EXPECT_EQ(base, used_settles_at(i, base));
	close(i);
	ASSERT_EQ(0, card_sh("replug", "spyre1", NULL, 0));
}

TEST_HARNESS_MAIN
