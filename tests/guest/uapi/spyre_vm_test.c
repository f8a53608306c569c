// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-file device address spaces (card MMU, DRM_SPYRE_CAP_VM): two files see the same
 * device addresses for their own, separate memory; neither reaches the other's by COPY,
 * LAUNCH, mmap, a guessed address or a stale handle; a translation fault in one file is
 * reported with its context and address while the other's jobs run on, correct; a card
 * runs out of contexts cleanly (EBUSY) and gets every one back.
 *
 * Copyright (C) 2025 The Spyre open stack authors
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xf86drm.h>

#include "spyre_accel.h"
#include "spyre_hw.h"
#include "spyre_test_lib.h"
#include "kselftest_harness.h"

#define VM_BYTES	65536

/* One client: a program BO, a source and a destination BO, created in that order. */
struct client {
	int fd;
	uint32_t prog, src, dst;
	uint8_t *msrc, *mdst;
	size_t plen;
};

static int client_open(struct client *c)
{
	struct drm_spyre_device_info info;
	struct prog p;
	int ret;

	memset(c, 0, sizeof(*c));
	c->fd = open_card(0);
	if (c->fd < 0)
		return -ENODEV;
	ret = query(c->fd, DRM_SPYRE_QUERY_DEVICE_INFO, &info, sizeof(info));
	if (ret)
		return ret;
	if (!(info.caps & DRM_SPYRE_CAP_VM) || !(info.caps & DRM_SPYRE_CAP_LAUNCH))
		return -EOPNOTSUPP;
	c->plen = build_copy(&p);
	ret = prog_bo(c->fd, p.img, c->plen, 0, 4096, &c->prog);
	if (!ret)
		ret = bo_create(c->fd, VM_BYTES, DRM_SPYRE_BO_DEVICE, &c->src);
	if (!ret)
		ret = bo_create(c->fd, VM_BYTES, DRM_SPYRE_BO_DEVICE, &c->dst);
	if (ret)
		return ret;
	c->msrc = bo_map(c->fd, c->src);
	c->mdst = bo_map(c->fd, c->dst);
	return c->msrc && c->mdst ? 0 : -ENOMEM;
}

static void client_close(struct client *c)
{
	if (c->msrc)
		munmap(c->msrc, VM_BYTES);
	if (c->mdst)
		munmap(c->mdst, VM_BYTES);
	if (c->fd >= 0)
		close(c->fd);
}

/* Submit a launch of c's copy program: VM_BYTES from address @from to address @to. */
static int client_copy(struct client *c, uint64_t from, uint64_t to, uint64_t *job)
{
	struct drm_spyre_launch l = { .num_cores = 1, .num_args = 3 };
	uint32_t bos[2] = { c->src, c->dst };
	struct drm_spyre_cmd cmd;

	l.args[0] = from;
	l.args[1] = to;
	l.args[2] = VM_BYTES;
	l.bo_handles = (uintptr_t)bos;
	l.bo_count = 2;
	cmd = launch_cmd(c->prog, 0, c->plen, &l);
	return submit_cmds(c->fd, &cmd, 1, job);
}

static bool all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

#define OPEN_CLIENT(c)								\
	do {									\
		int __r = client_open(c);					\
		if (__r == -EOPNOTSUPP || __r == -ENODEV)			\
			SKIP(return, "no card with DRM_SPYRE_CAP_VM and LAUNCH");	\
		ASSERT_EQ(0, __r);						\
	} while (0)

/*
 * Two files built the same way get the same device addresses, yet each one's program and
 * copies reach only its own memory: the addresses are per-file virtual addresses.
 */
TEST(same_addresses_separate_memory)
{
	struct client a, b;
	uint64_t ja, jb;

	OPEN_CLIENT(&a);
	OPEN_CLIENT(&b);
	EXPECT_EQ(dev_addr(a.fd, a.prog), dev_addr(b.fd, b.prog));
	EXPECT_EQ(dev_addr(a.fd, a.src), dev_addr(b.fd, b.src));
	EXPECT_EQ(dev_addr(a.fd, a.dst), dev_addr(b.fd, b.dst));
	EXPECT_NE(0, dev_addr(a.fd, a.dst));

	memset(a.msrc, 0xa1, VM_BYTES);
	memset(b.msrc, 0xb2, VM_BYTES);
	memset(a.mdst, 0, VM_BYTES);
	memset(b.mdst, 0, VM_BYTES);
	/* Both in flight together, same addresses. */
	ASSERT_EQ(0, client_copy(&a, dev_addr(a.fd, a.src), dev_addr(a.fd, a.dst), &ja));
	ASSERT_EQ(0, client_copy(&b, dev_addr(b.fd, b.src), dev_addr(b.fd, b.dst), &jb));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(a.fd, ja));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(b.fd, jb));
	EXPECT_TRUE(all_bytes(a.mdst, VM_BYTES, 0xa1));
	EXPECT_TRUE(all_bytes(b.mdst, VM_BYTES, 0xb2));
	EXPECT_TRUE(all_bytes(a.msrc, VM_BYTES, 0xa1));
	EXPECT_TRUE(all_bytes(b.msrc, VM_BYTES, 0xb2));
	client_close(&a);
	client_close(&b);
}

/*
 * A handle or mmap offset of one file means nothing in another, and a closed handle
 * nothing at all: COPY, BO_INFO and mmap refuse them.
 */
TEST(foreign_and_stale_handles)
{
	struct drm_spyre_bo_info info;
	struct drm_spyre_cmd cmd;
	struct client a, b;
	uint32_t only_a;
	uint64_t job;
	void *p;

	OPEN_CLIENT(&a);
	OPEN_CLIENT(&b);
	/* A handle number b does not have. */
	ASSERT_EQ(0, bo_create(a.fd, 4096, DRM_SPYRE_BO_DEVICE, &only_a));
	ASSERT_EQ(0, bo_info(a.fd, only_a, &info));
	EXPECT_EQ(-ENOENT, bo_info(b.fd, only_a, &info));
	cmd = copy_cmd(only_a, 0, b.dst, 0, 4096);
	EXPECT_EQ(-ENOENT, submit_cmds(b.fd, &cmd, 1, &job));
	/* a's mmap offset on b's file */
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, b.fd, info.mmap_offset);
	EXPECT_EQ(MAP_FAILED, p);
	/* a stale handle */
	ASSERT_EQ(0, bo_close(a.fd, only_a));
	EXPECT_EQ(-ENOENT, bo_info(a.fd, only_a, &info));
	cmd = copy_cmd(only_a, 0, a.dst, 0, 4096);
	EXPECT_EQ(-ENOENT, submit_cmds(a.fd, &cmd, 1, &job));
	client_close(&a);
	client_close(&b);
}

/*
 * A translation fault (injected by the card: FAULT_MMU) fails only the job that took it,
 * reported with the file's context and the faulting address; the other file's jobs,
 * submitted around it, complete with the right data, and the faulting file works on.
 */
TEST(fault_reported_other_file_unaffected)
{
	struct drm_spyre_job_wait w;
	struct client a, b;
	uint64_t ja, jb, jb2;
	int ret;

	OPEN_CLIENT(&a);
	OPEN_CLIENT(&b);
	ret = debugfs_write(a.fd, "fault_mmu", 1);
	if (ret == -EOPNOTSUPP || ret == -ENOENT)
		SKIP(return, "no MMU fault injection (x-fault-inject=on, debugfs)");
	ASSERT_EQ(0, ret);
	memset(a.msrc, 0x3c, VM_BYTES);
	memset(a.mdst, 0, VM_BYTES);
	memset(b.msrc, 0x4d, VM_BYTES);
	memset(b.mdst, 0, VM_BYTES);
	ASSERT_EQ(0, client_copy(&a, dev_addr(a.fd, a.src), dev_addr(a.fd, a.dst), &ja));
	ASSERT_EQ(0, client_copy(&b, dev_addr(b.fd, b.src), dev_addr(b.fd, b.dst), &jb));
	ASSERT_EQ(0, job_wait(a.fd, ja, now_ns() + 60 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_DEVICE_ERROR, w.status);
	EXPECT_EQ(SPYRE_STATUS_ERR_MMU_FAULT, w.hw_status);
	EXPECT_TRUE(w.hw_detail & SPYRE_MMU_FAULT_VALID);
	EXPECT_EQ(SPYRE_MMU_FAULT_FETCH,
		  (w.hw_detail & SPYRE_MMU_FAULT_ACCESS_MASK) >> SPYRE_MMU_FAULT_ACCESS_SHIFT);
	EXPECT_NE(0, w.hw_detail & SPYRE_MMU_FAULT_CTX_MASK);
	EXPECT_EQ(dev_addr(a.fd, a.prog), w.fault_addr);
	EXPECT_TRUE(all_bytes(a.mdst, VM_BYTES, 0));	/* the faulting launch never ran */
	TH_LOG("fault: context %u, access %u, address %#llx",
	       w.hw_detail & SPYRE_MMU_FAULT_CTX_MASK,
	       (w.hw_detail & SPYRE_MMU_FAULT_ACCESS_MASK) >> SPYRE_MMU_FAULT_ACCESS_SHIFT,
	       (unsigned long long)w.fault_addr);

	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(b.fd, jb));
	EXPECT_TRUE(all_bytes(b.mdst, VM_BYTES, 0x4d));
	/* both go on: b again, and a's same launch, now without a fault */
	memset(b.mdst, 0, VM_BYTES);
	ASSERT_EQ(0, client_copy(&b, dev_addr(b.fd, b.src), dev_addr(b.fd, b.dst), &jb2));
	ASSERT_EQ(0, client_copy(&a, dev_addr(a.fd, a.src), dev_addr(a.fd, a.dst), &ja));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(a.fd, ja));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(b.fd, jb2));
	EXPECT_TRUE(all_bytes(a.mdst, VM_BYTES, 0x3c));
	EXPECT_TRUE(all_bytes(b.mdst, VM_BYTES, 0x4d));
	client_close(&a);
	client_close(&b);
}

/*
 * The card latches a ring's first translation fault (FAULT_ADDR/FAULT_INFO) until the driver
 * clears it. A fault behind another error in the same job (here an injected error on its
 * first command) latched too; left there, the next fault on the ring, another file's, was
 * reported with the first file's address (issue 24, defect 9). Each job gets only its own.
 */
TEST(stale_fault_latch_not_reported_to_other_file)
{
	struct drm_spyre_job_wait w;
	struct drm_spyre_cmd cmds[2];
	struct client a, b;
	uint64_t ja, jb;
	int ret;

	OPEN_CLIENT(&a);
	OPEN_CLIENT(&b);
	ret = debugfs_write(a.fd, "fault_mmu", 1);
	if (ret == -EOPNOTSUPP || ret == -ENOENT)
		SKIP(return, "no MMU fault injection (x-fault-inject=on, debugfs)");
	ASSERT_EQ(0, ret);
	/* a's first command fails (injected), its second faults at a.dst + 512 */
	ASSERT_EQ(0, fault_inject(a.fd, 1));
	cmds[0] = copy_cmd(a.src, 0, a.dst, 0, 4096);
	cmds[1] = copy_cmd(a.dst, 512, a.src, 0, 4096);
	ASSERT_EQ(0, submit_cmds(a.fd, cmds, 2, &ja));
	ASSERT_EQ(0, job_wait(a.fd, ja, now_ns() + 60 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_DEVICE_ERROR, w.status);
	EXPECT_EQ(SPYRE_STATUS_ERR_INJECTED, w.hw_status);
	EXPECT_EQ(0, w.failed_cmd);
	EXPECT_EQ(0, w.fault_addr);	/* its first failure is no fault */
	ASSERT_EQ(0, debugfs_write(a.fd, "fault_mmu", 0));	/* taken by a's second command */

	/* b's fault, on the same ring: its own address (b.src + 256), not a's */
	ASSERT_EQ(0, debugfs_write(b.fd, "fault_mmu", 1));
	cmds[0] = copy_cmd(b.src, 256, b.dst, 0, 4096);
	ASSERT_EQ(0, submit_cmds(b.fd, cmds, 1, &jb));
	ASSERT_EQ(0, job_wait(b.fd, jb, now_ns() + 60 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_DEVICE_ERROR, w.status);
	EXPECT_EQ(SPYRE_STATUS_ERR_MMU_FAULT, w.hw_status);
	EXPECT_EQ(SPYRE_MMU_FAULT_READ,
		  (w.hw_detail & SPYRE_MMU_FAULT_ACCESS_MASK) >> SPYRE_MMU_FAULT_ACCESS_SHIFT);
	EXPECT_EQ(dev_addr(b.fd, b.src) + 256, w.fault_addr)
		TH_LOG("b's fault reported at %#llx; a's was at %#llx",
		       (unsigned long long)w.fault_addr,
		       (unsigned long long)(dev_addr(a.fd, a.dst) + 512));
	client_close(&a);
	client_close(&b);
}

/*
 * Memory freed by one file and given to another is unreachable through the first file's
 * old address: a program of the first file aimed at it is stopped (its windows and its
 * MMU context no longer include it), and the new owner's data stay intact.
 */
TEST(freed_memory_unreachable)
{
	struct drm_spyre_job_wait w;
	struct client a, b;
	uint64_t old_va, job;
	uint32_t victim;
	uint8_t *pv;

	OPEN_CLIENT(&a);
	OPEN_CLIENT(&b);
	old_va = dev_addr(a.fd, a.dst);
	ASSERT_EQ(0, munmap(a.mdst, VM_BYTES));
	a.mdst = NULL;
	ASSERT_EQ(0, bo_close(a.fd, a.dst));
	ASSERT_EQ(0, bo_create(b.fd, VM_BYTES, DRM_SPYRE_BO_DEVICE, &victim));
	pv = bo_map(b.fd, victim);
	ASSERT_NE(NULL, pv);
	memset(pv, 0x77, VM_BYTES);
	memset(a.msrc, 0x11, VM_BYTES);
	a.dst = a.src;		/* list only what a still has */
	ASSERT_EQ(0, client_copy(&a, dev_addr(a.fd, a.src), old_va, &job));
	ASSERT_EQ(0, job_wait(a.fd, job, now_ns() + 60 * SEC_NS, &w));
	EXPECT_EQ(DRM_SPYRE_JOB_DEVICE_ERROR, w.status);
	EXPECT_TRUE(all_bytes(pv, VM_BYTES, 0x77));
	munmap(pv, VM_BYTES);
	client_close(&a);
	client_close(&b);
}

/* What the card read at device address va of fd's context (debugfs mmu_probe). */
struct probe {
	unsigned int hw_status;
	unsigned long long fault_addr, data;
};

static int mmu_probe(int fd, uint64_t va, struct probe *p)
{
	char path[160], buf[128];
	int f, ret = debugfs_path(fd, "mmu_probe", path, sizeof(path));
	ssize_t n;

	if (ret)
		return ret;
	f = open(path, O_RDWR | O_CLOEXEC);
	if (f < 0)
		return -errno;
	n = snprintf(buf, sizeof(buf), "%llu %llx", (unsigned long long)client_id(fd),
		     (unsigned long long)va);
	ret = write(f, buf, n) == n ? 0 : -errno;
	if (!ret) {
		n = read(f, buf, sizeof(buf) - 1);
		ret = n > 0 ? 0 : -EIO;
	}
	close(f);
	if (ret)
		return ret;
	buf[n] = 0;
	return sscanf(buf, "hw_status %u fault_addr %llx data %llx", &p->hw_status,
		      &p->fault_addr, &p->data) == 3 ? 0 : -EPROTO;
}

/*
 * The MMU layer alone: once a BO is closed, its old address no longer translates on the
 * card, though the card had cached the translation (a job of the file ran through it) and
 * the memory went to another file. Launch windows and handles would stop a job before the
 * MMU, so the card is asked directly (debugfs mmu_probe: a DMA read in the file's context).
 * Without the MMU_INVALIDATE after the unmap, the probe reads the new owner's bytes.
 */
TEST(unmapped_address_untranslated_on_card)
{
	struct client a, b;
	struct probe p;
	uint64_t old_va, job;
	uint32_t victim;
	uint8_t *pv;
	int ret;

	OPEN_CLIENT(&a);
	OPEN_CLIENT(&b);
	memset(a.msrc, 0x5e, VM_BYTES);
	memset(a.mdst, 0, VM_BYTES);
	/* the card caches a's translations, a.dst's included */
	ASSERT_EQ(0, client_copy(&a, dev_addr(a.fd, a.src), dev_addr(a.fd, a.dst), &job));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(a.fd, job));
	old_va = dev_addr(a.fd, a.dst);
	ret = mmu_probe(a.fd, old_va + 8, &p);
	if (ret == -ENOENT)
		SKIP(return, "no debugfs mmu_probe");
	ASSERT_EQ(0, ret);
	/* the probe reaches mapped memory: a's bytes */
	ASSERT_EQ(SPYRE_STATUS_OK, p.hw_status);
	ASSERT_EQ(0x5e5e5e5e5e5e5e5eull, p.data);

	ASSERT_EQ(0, munmap(a.mdst, VM_BYTES));
	a.mdst = NULL;
	ASSERT_EQ(0, bo_close(a.fd, a.dst));
	ASSERT_EQ(0, bo_create(b.fd, VM_BYTES, DRM_SPYRE_BO_DEVICE, &victim));
	pv = bo_map(b.fd, victim);
	ASSERT_NE(NULL, pv);
	memset(pv, 0x77, VM_BYTES);
	ASSERT_EQ(0, mmu_probe(a.fd, old_va + 8, &p));
	EXPECT_EQ(SPYRE_STATUS_ERR_MMU_FAULT, p.hw_status)
		TH_LOG("the card still reached a's old address: data %#llx", p.data);
	EXPECT_EQ(old_va + 8, p.fault_addr);
	EXPECT_TRUE(all_bytes(pv, VM_BYTES, 0x77));
	munmap(pv, VM_BYTES);
	client_close(&a);
	client_close(&b);
}

/* The file's page-table bytes (fdinfo drm-total-pagetables), or -1 without the key. */
static long long pt_bytes(int fd)
{
	char path[64], line[128], unit[16];
	long long v = -1, n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "drm-total-pagetables:", 21))
			continue;
		unit[0] = 0;
		if (sscanf(line + 21, "%lld %15s", &n, unit) < 1)
			break;
		v = !strcmp(unit, "KiB") ? n << 10 : !strcmp(unit, "MiB") ? n << 20 :
		    !strcmp(unit, "GiB") ? n << 30 : n;
	}
	fclose(f);
	return v;
}

/*
 * Device BOs over the card's free memory, in 4 MiB objects with a 4 KiB one between each
 * (so the objects straddle level-2 and level-1 boundaries at many offsets), until BO_CREATE
 * fails; their handles in @h, their number returned.
 */
#define CHURN_MAX	2048
static int fill_devmem(int fd, uint32_t *h)
{
	int n = 0;

	while (n < CHURN_MAX &&
	       !bo_create(fd, n & 1 ? 4096 : 4 << 20, DRM_SPYRE_BO_DEVICE, &h[n]))
		n++;
	return n;
}

/* A file of card 0 and room for the handles of fill_devmem(); minutes of BO churn. */
FIXTURE(churn) {
	int fd;
	uint32_t *h;
};

FIXTURE_SETUP(churn)
{
	self->h = calloc(CHURN_MAX, sizeof(*self->h));
	ASSERT_NE(NULL, self->h);
	self->fd = open_card(0);
}

FIXTURE_TEARDOWN(churn)
{
	if (self->fd >= 0)
		close(self->fd);
	free(self->h);
}

/*
 * Page tables an unmap leaves empty are freed (issue 24, defect 3): a file that maps
 * (nearly) all of device memory and frees it again is back at its empty state (the level-1
 * table alone), and churn does not grow it; the freed addresses fault on the card (the
 * tables are unlinked and invalidated before they are freed). The old driver kept every
 * level-2/3 table until close: devmem/512 bytes per file.
 */
TEST_F_TIMEOUT(churn, page_tables_freed_on_unmap, 300)
{
	struct drm_spyre_device_info info;
	long long empty, full, peak = 0;
	uint64_t first_va = 0, last_va = 0;
	uint32_t *h = self->h;
	int fd = self->fd, n, i, round, ret;
	struct probe p;

	if (fd < 0)
		SKIP(return, "no card");
	ASSERT_EQ(0, query(fd, DRM_SPYRE_QUERY_DEVICE_INFO, &info, sizeof(info)));
	if (!(info.caps & DRM_SPYRE_CAP_VM))
		SKIP(return, "no DRM_SPYRE_CAP_VM");
	empty = pt_bytes(fd);
	ASSERT_LT(0, empty) TH_LOG("no drm-total-pagetables in fdinfo");
	/* the level-1 table and its array of children */
	EXPECT_EQ(8192, empty);
	for (round = 0; round < 3; round++) {
		n = fill_devmem(fd, h);
		ASSERT_LT(16, n);
		full = pt_bytes(fd);
		/* a level-3 table per 2 MiB mapped, at least */
		EXPECT_LE(empty + (long long)(n / 2) * 2 * 4096, full);
		if (!round)
			peak = full;
		/* the same objects need the same tables: nothing left over from last round */
		EXPECT_EQ(peak, full);
		first_va = dev_addr(fd, h[0]);
		last_va = dev_addr(fd, h[n - 1]);
		ret = mmu_probe(fd, last_va, &p);
		if (ret != -ENOENT) {
			ASSERT_EQ(0, ret);
			ASSERT_EQ(SPYRE_STATUS_OK, p.hw_status);
		}
		for (i = 0; i < n; i++)
			ASSERT_EQ(0, bo_close(fd, h[i]));
		TH_LOG("round %d: %d BOs, page tables %lld -> %lld -> %lld bytes", round, n,
		       empty, full, pt_bytes(fd));
		EXPECT_EQ(empty, pt_bytes(fd));
		if (ret == -ENOENT)
			continue;
		/* unreachable, the last-level and the upper tables gone alike */
		ASSERT_EQ(0, mmu_probe(fd, first_va, &p));
		EXPECT_EQ(SPYRE_STATUS_ERR_MMU_FAULT, p.hw_status);
		EXPECT_EQ(first_va, p.fault_addr);
		ASSERT_EQ(0, mmu_probe(fd, last_va, &p));
		EXPECT_EQ(SPYRE_STATUS_ERR_MMU_FAULT, p.hw_status);
		EXPECT_EQ(last_va, p.fault_addr);
	}
}

/* This process's cgroup v2 "kernel" memory (memory.stat of @cg), or -1. */
static long long memcg_kernel_bytes(const char *cg)
{
	char path[256], key[64];
	long long v, ret = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/memory.stat", cg);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fscanf(f, "%63s %lld", key, &v) == 2)
		if (!strcmp(key, "kernel")) {
			ret = v;
			break;
		}
	fclose(f);
	return ret;
}

/*
 * The page tables of a file are charged to the memory cgroup of the caller that made it
 * need them: mapping most of device memory (a level-3 table per 2 MiB) raises the cgroup's
 * kernel memory by at least those tables. The old driver allocated them uncharged (the
 * cgroup grew by some 0.6 MiB of BO bookkeeping, against 2 MiB of tables per GiB mapped).
 */
TEST_F_TIMEOUT(churn, page_tables_charged_to_memcg, 300)
{
	char cg[64], path[128], pid[32];
	long long k0, k1, t0, t1, mapped;
	uint32_t *h = self->h;
	int fd = self->fd, n, i;
	struct drm_spyre_device_info info;

	if (fd < 0)
		SKIP(return, "no card");
	ASSERT_EQ(0, query(fd, DRM_SPYRE_QUERY_DEVICE_INFO, &info, sizeof(info)));
	if (!(info.caps & DRM_SPYRE_CAP_VM))
		SKIP(return, "no DRM_SPYRE_CAP_VM");
	if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) &&
	    mount("none", "/sys/fs/cgroup", "cgroup2", 0, NULL))
		SKIP(return, "no cgroup v2 (%s)", strerror(errno));
	write_sysfs("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
	snprintf(cg, sizeof(cg), "/sys/fs/cgroup/spyre_vm_%d", getpid());
	snprintf(pid, sizeof(pid), "%d", getpid());
	if (mkdir(cg, 0755) && errno != EEXIST)
		SKIP(return, "cannot create a cgroup (%s)", strerror(errno));
	snprintf(path, sizeof(path), "%s/memory.stat", cg);
	if (access(path, F_OK)) {
		rmdir(cg);
		SKIP(return, "no memory controller in %s", cg);
	}
	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	ASSERT_EQ(0, write_sysfs(path, pid));

	k0 = memcg_kernel_bytes(cg);
	t0 = pt_bytes(fd);
	n = fill_devmem(fd, h);
	k1 = memcg_kernel_bytes(cg);
	t1 = pt_bytes(fd);
	mapped = (long long)(n + 1) / 2 * (4 << 20) + (long long)n / 2 * 4096;
	TH_LOG("%d BOs (%lld MiB): page tables +%lld bytes, cgroup kernel memory +%lld bytes",
	       n, mapped >> 20, t1 - t0, k1 - k0);
	for (i = 0; i < n; i++)
		bo_close(fd, h[i]);
	write_sysfs("/sys/fs/cgroup/cgroup.procs", pid);
	rmdir(cg);
	ASSERT_LT(16, n);
	ASSERT_LE(0, k0);
	EXPECT_LE(mapped / 512, k1 - k0);
	if (t0 >= 0)
		EXPECT_LE(t1 - t0, k1 - k0);
}

/*
 * A card has 255 address-space contexts: the open that would need a 256th fails with EBUSY
 * and takes nothing, a closed file's context is free again at once, and a file on a reused
 * context reaches only its own memory (nothing of the context's last owner stays cached).
 */
TEST(contexts_run_out_and_come_back)
{
	int minors[MAX_CARDS], fds[SPYRE_MMU_NUM_CTX + 1];
	struct client c;
	int n = 0, err = 0, fd, i;
	uint64_t job;

	OPEN_CLIENT(&c);
	client_close(&c);
	ASSERT_LT(0, spyre_minors(minors));
	while (n < (int)(sizeof(fds) / sizeof(fds[0]))) {
		fd = open_minor(minors[0]);
		if (fd < 0) {
			err = errno;
			break;
		}
		fds[n++] = fd;
	}
	/* other files of this card (none in this suite) would hold some of the 255 */
	ASSERT_EQ(EBUSY, err);
	ASSERT_LE(n, SPYRE_MMU_NUM_CTX - 1);
	ASSERT_LE(SPYRE_MMU_NUM_CTX - 8, n);
	/* the refused open took nothing: one close lets exactly one open in */
	close(fds[--n]);
	fds[n] = open_minor(minors[0]);
	ASSERT_LE(0, fds[n]);
	n++;
	errno = 0;
	fd = open_minor(minors[0]);
	EXPECT_GT(0, fd);
	EXPECT_EQ(EBUSY, errno);
	if (fd >= 0)
		close(fd);
	/* a client on a context just given back works, on its own memory only */
	close(fds[--n]);
	ASSERT_EQ(0, client_open(&c));
	memset(c.msrc, 0x5a, VM_BYTES);
	memset(c.mdst, 0, VM_BYTES);
	ASSERT_EQ(0, client_copy(&c, dev_addr(c.fd, c.src), dev_addr(c.fd, c.dst), &job));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(c.fd, job));
	EXPECT_TRUE(all_bytes(c.mdst, VM_BYTES, 0x5a));
	client_close(&c);
	for (i = 0; i < n; i++)
		close(fds[i]);
	/* every context came back */
	for (i = 0; i < SPYRE_MMU_NUM_CTX - 8; i++) {
		fds[i] = open_minor(minors[0]);
		ASSERT_LE(0, fds[i]);
	}
	for (i = 0; i < SPYRE_MMU_NUM_CTX - 8; i++)
		close(fds[i]);
}

TEST_HARNESS_MAIN
