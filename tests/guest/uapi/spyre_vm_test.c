// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-file device address spaces (card MMU, DRM_SPYRE_CAP_VM): two files see the same
 * device addresses for their own, separate memory; neither reaches the other's by COPY,
 * LAUNCH, mmap, a guessed address or a stale handle; a translation fault in one file is
 * reported with its context and address while the other's jobs run on, correct; opens never
 * run out of the card's 255 contexts, which are bound at SUBMIT and taken from idle files;
 * one user's jobs hold at most its share of them (ctx_per_user), so others always get one.
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
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* A numeric fdinfo field of fd ("key:" then the value), or -1 without it. */
static long long fdinfo_val(int fd, const char *key)
{
	char path[64], line[128];
	size_t klen = strlen(key);
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			v = strtoll(line + klen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* The card context id fd's jobs run with now (fdinfo spyre-mmu-context; 0: none). */
static long long mmu_ctx(int fd)
{
	return fdinfo_val(fd, "spyre-mmu-context");
}

/* Room for @n more open files. */
static int want_fds(int n)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r))
		return -errno;
	if (r.rlim_cur >= (rlim_t)n + 64)
		return 0;
	r.rlim_cur = n + 64;
	if (r.rlim_max < r.rlim_cur)
		r.rlim_max = r.rlim_cur;
	return setrlimit(RLIMIT_NOFILE, &r) ? -errno : 0;
}

#define MANY_CLIENTS	300

/* MANY_CLIENTS clients with their memory, more than the card has context ids. */
FIXTURE(many) {
	struct client *c;
	int n;
};

FIXTURE_SETUP(many)
{
	self->c = calloc(MANY_CLIENTS, sizeof(*self->c));
	ASSERT_NE(NULL, self->c);
	self->n = 0;
	ASSERT_EQ(0, want_fds(MANY_CLIENTS));
}

FIXTURE_TEARDOWN(many)
{
	while (self->n)
		client_close(&self->c[--self->n]);
	free(self->c);
}

/* Open MANY_CLIENTS clients (skips without a card with the MMU). */
#define OPEN_MANY()								\
	do {									\
		int __e = 0;							\
		OPEN_CLIENT(&self->c[0]);					\
		for (self->n = 1; self->n < MANY_CLIENTS && !__e; self->n++)	\
			__e = client_open(&self->c[self->n]);			\
		ASSERT_EQ(0, __e) TH_LOG("client %d: %d", self->n - 1, __e);	\
	} while (0)

#define MANY_OPENS	1000

/*
 * Opening the card takes no hardware context (issue 24, defect 5): one user (a child
 * process as nobody, the node opened to all for it) holds 1000 open files, each of which has
 * also run a job (a SUBMIT binds a context id, so all 255 were taken many times over), and
 * another user can still open the card and run a job on its own memory. The old driver gave
 * every open a context: the 256th open failed with EBUSY, and nothing else could open.
 */
TEST_F_TIMEOUT(many, many_opens_leave_others_room, 600)
{
	int minors[MAX_CARDS], ready[2], done[2];
	char node[64];
	struct stat st;
	struct client c;
	uint64_t job;
	pid_t pid;
	char r = 0;
	int status;

	OPEN_CLIENT(&c);
	client_close(&c);
	ASSERT_LT(0, spyre_minors(minors));
	ASSERT_EQ(0, want_fds(MANY_OPENS));
	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, pipe(done));
	/* the node open to all for this test, so that the opens are another user's */
	snprintf(node, sizeof(node), "/dev/accel/accel%d", minors[0]);
	ASSERT_EQ(0, stat(node, &st));
	chmod(node, 0666);
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		static int fds[MANY_OPENS];
		struct drm_spyre_device_info info;
		char ok = 'y';
		int i;

		/* the files go when the test does, whatever happens to it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(ready[0]);
		close(done[1]);
		if (setresuid(65534, 65534, 65534))
			fprintf(stderr, "setresuid: %s\n", strerror(errno));
		for (i = 0; i < MANY_OPENS && ok == 'y'; i++) {
			fds[i] = open_minor(minors[0]);
			if (fds[i] < 0 || query(fds[i], DRM_SPYRE_QUERY_DEVICE_INFO, &info,
						sizeof(info)) ||
			    nop_job(fds[i], 0, &job) || job_status(fds[i], job) != DRM_SPYRE_JOB_OK) {
				fprintf(stderr, "open %d: %s\n", i, strerror(errno));
				ok = 'n';
			}
		}
		fprintf(stderr, "child (uid %d): %d files open\n", getuid(), i);
		if (write(ready[1], &ok, 1) != 1 || read(done[0], &ok, 1) != 1)
			_exit(2);
		_exit(0);
	}
	close(ready[1]);
	close(done[0]);
	r = 0;
	read(ready[0], &r, 1);
	chmod(node, st.st_mode & 07777);
	EXPECT_EQ('y', r) TH_LOG("the 1000 opens (and their jobs) did not all succeed");
	/* the other user: opens, creates memory, runs a launch on it, correct */
	ASSERT_EQ(0, client_open(&c));
	memset(c.msrc, 0x6b, VM_BYTES);
	memset(c.mdst, 0, VM_BYTES);
	ASSERT_EQ(0, client_copy(&c, dev_addr(c.fd, c.src), dev_addr(c.fd, c.dst), &job));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(c.fd, job));
	EXPECT_TRUE(all_bytes(c.mdst, VM_BYTES, 0x6b));
	EXPECT_LT(0, mmu_ctx(c.fd));
	client_close(&c);
	ASSERT_EQ(1, write(done[1], "x", 1));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && !WEXITSTATUS(status));
}

/*
 * More files than context ids, each with its own memory, run launches in turn, two rounds,
 * and then all at once (SUBMITs beyond 255 wait for a job to give its id back): every one
 * gets its own data (ids are taken from idle files and given back at their next SUBMIT).
 */
TEST_F_TIMEOUT(many, more_files_than_contexts, 900)
{
	uint64_t *jobs;
	int i, round;

	OPEN_MANY();
	jobs = calloc(MANY_CLIENTS, sizeof(*jobs));
	ASSERT_NE(NULL, jobs);
	for (round = 0; round < 3; round++) {
		for (i = 0; i < MANY_CLIENTS; i++) {
			struct client *c = &self->c[i];

			memset(c->msrc, (i * 7 + round) & 0xff, VM_BYTES);
			memset(c->mdst, 0xff, VM_BYTES);
			ASSERT_EQ(0, client_copy(c, dev_addr(c->fd, c->src),
						 dev_addr(c->fd, c->dst), &jobs[i]))
				TH_LOG("round %d client %d: %s", round, i, strerror(errno));
			/* rounds 0 and 1 in turn, round 2 all in flight together */
			if (round < 2)
				ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(c->fd, jobs[i]));
		}
		for (i = 0; i < MANY_CLIENTS; i++) {
			struct client *c = &self->c[i];

			if (round == 2)
				ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(c->fd, jobs[i]));
			ASSERT_TRUE(all_bytes(c->mdst, VM_BYTES, (i * 7 + round) & 0xff))
				TH_LOG("round %d client %d got another's data", round, i);
		}
	}
	free(jobs);
}

/*
 * Isolation across a taken context id: file a's id goes to another file b once 255 other
 * files have run jobs; b, probed by the card (debugfs mmu_probe, through its translation
 * cache) at the address of a's secret, faults: its context entry names b's tables and the
 * id was invalidated. a, given an id again at its next SUBMIT, runs correctly and reaches
 * only its own memory, at addresses where the others have theirs.
 */
TEST_F_TIMEOUT(many, taken_context_isolated, 900)
{
	struct client *a;
	uint32_t secret;
	uint64_t job, secret_va;
	long long a_ctx = 0;
	uint8_t *ms;
	struct probe p;
	int i, b = -1, ret;

	OPEN_MANY();
	a = &self->c[0];
	ASSERT_EQ(0, bo_create(a->fd, VM_BYTES, DRM_SPYRE_BO_DEVICE, &secret));
	ms = bo_map(a->fd, secret);
	ASSERT_NE(NULL, ms);
	memset(ms, 0xa5, VM_BYTES);
	munmap(ms, VM_BYTES);
	secret_va = dev_addr(a->fd, secret);
	memset(a->msrc, 0x5e, VM_BYTES);
	ASSERT_EQ(0, client_copy(a, dev_addr(a->fd, a->src), dev_addr(a->fd, a->dst), &job));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(a->fd, job));
	a_ctx = mmu_ctx(a->fd);
	ASSERT_LT(0, a_ctx) TH_LOG("no spyre-mmu-context in fdinfo");
	/* the card has a's translations cached, the secret's included */
	ret = mmu_probe(a->fd, secret_va, &p);
	if (ret == -ENOENT)
		SKIP(return, "no debugfs mmu_probe");
	ASSERT_EQ(0, ret);
	ASSERT_EQ(SPYRE_STATUS_OK, p.hw_status);
	ASSERT_EQ(0xa5a5a5a5a5a5a5a5ull, p.data);

	/* every other file runs a job: a, least recently used and idle, loses its id */
	for (i = 1; i < MANY_CLIENTS; i++) {
		struct client *c = &self->c[i];

		memset(c->msrc, 0x3c, VM_BYTES);
		ASSERT_EQ(0, nop_job(c->fd, 0, &job));
		ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(c->fd, job));
		if (b < 0 && mmu_ctx(c->fd) == a_ctx && i > 1)
			b = i;
	}
	EXPECT_EQ(0, mmu_ctx(a->fd));
	for (i = 1; b < 0 && i < MANY_CLIENTS; i++)
		if (mmu_ctx(self->c[i].fd) == a_ctx)
			b = i;
	ASSERT_LT(0, b) TH_LOG("no file holds a's old id %lld", a_ctx);
	/* b has no memory at the secret's address: the card must not translate it */
	ASSERT_LT(secret_va, (uint64_t)1 << 39);
	ASSERT_EQ(0, mmu_probe(self->c[b].fd, secret_va, &p));
	EXPECT_EQ(SPYRE_STATUS_ERR_MMU_FAULT, p.hw_status)
		TH_LOG("file %d on a's old id %lld read %#llx at a's secret", b, a_ctx, p.data);
	EXPECT_EQ(secret_va, p.fault_addr);
	/* b's own memory at the address of a's source: b's bytes */
	ASSERT_EQ(0, mmu_probe(self->c[b].fd, dev_addr(a->fd, a->src), &p));
	EXPECT_EQ(SPYRE_STATUS_OK, p.hw_status);
	EXPECT_EQ(0x3c3c3c3c3c3c3c3cull, p.data);

	/* a runs again (a new id), correctly, and reaches its own memory only */
	memset(a->mdst, 0, VM_BYTES);
	ASSERT_EQ(0, client_copy(a, dev_addr(a->fd, a->src), dev_addr(a->fd, a->dst), &job));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(a->fd, job));
	EXPECT_TRUE(all_bytes(a->mdst, VM_BYTES, 0x5e));
	EXPECT_LT(0, mmu_ctx(a->fd));
	ASSERT_EQ(0, mmu_probe(a->fd, secret_va, &p));
	EXPECT_EQ(SPYRE_STATUS_OK, p.hw_status);
	EXPECT_EQ(0xa5a5a5a5a5a5a5a5ull, p.data);
	ASSERT_EQ(0, mmu_probe(a->fd, dev_addr(a->fd, a->src), &p));
	EXPECT_EQ(SPYRE_STATUS_OK, p.hw_status);
	EXPECT_EQ(0x5e5e5e5e5e5e5e5eull, p.data);
}

/* ---- one user's share of the context ids (issue 24: ctx_per_user) ---- */

#define CTX_IDS		255	/* ids a job can hold: 1 .. SPYRE_MMU_NUM_CTX - 1 */

/* The ids one user's jobs may hold (module parameter), or all of them without the limit. */
/*
 * The share tests set ctx_per_user to this: filling 64 files behind one launch took longer
 * on the debug kernel than a launch may run (0.6 of the job timeout); 8 shows the same rule.
 */
#define TEST_SHARE 8

/* Writes @n to the ctx_per_user parameter; its old value, or 0 if it could not. */
static int set_ctx_share(int n)
{
	char buf[32] = "";
	int f = open("/sys/module/spyre/parameters/ctx_per_user", O_RDWR);
	int old = 0;

	if (f < 0)
		return 0;
	if (read(f, buf, sizeof(buf) - 1) > 0)
		old = atoi(buf);
	snprintf(buf, sizeof(buf), "%d\n", n);
	if (pwrite(f, buf, strlen(buf), 0) < 0)
		old = 0;
	close(f);
	return old;
}

static int ctx_share(void)
{
	char buf[32] = "";
	int f = open("/sys/module/spyre/parameters/ctx_per_user", O_RDONLY);
	int n = 0;

	if (f >= 0) {
		if (read(f, buf, sizeof(buf) - 1) > 0)
			n = atoi(buf);
		close(f);
	}
	return n > 0 && n < CTX_IDS ? n : CTX_IDS;
}

/* The driver's job timeout in ms (module parameter), 30 s without it. */
static long long job_timeout_ms(void)
{
	char buf[32] = "";
	int f = open("/sys/module/spyre/parameters/job_timeout_ms", O_RDONLY);
	long long v = 0;

	if (f >= 0) {
		if (read(f, buf, sizeof(buf) - 1) > 0)
			v = atoll(buf);
		close(f);
	}
	return v > 0 ? v : 30000;
}

/*
 * This user's files: files[0] runs one launch of at least 4 s on ring 0, the others a NOP each
 * queued behind it, so every one of them holds a context id until that launch is over.
 */
FIXTURE(share) {
	int fds[CTX_IDS + 2];
	int n;
	uint64_t long_job;
	int old_share;	/* ctx_per_user before the test, 0 if unchanged */
};

FIXTURE_SETUP(share)
{
	struct drm_spyre_device_info info;
	uint64_t iters = 1 << 16, job;
	int64_t t = 0, t0, want, cap;
	int i;
	uint32_t prog;
	struct prog p;
	size_t plen;

	self->n = 0;
	self->old_share = 0;
	ASSERT_EQ(0, want_fds(CTX_IDS + 2));
	self->fds[0] = open_card(0);
	if (self->fds[0] < 0)
		SKIP(return, "no card");
	self->n = 1;
	self->old_share = set_ctx_share(TEST_SHARE);
	ASSERT_NE(0, self->old_share) TH_LOG("ctx_per_user cannot be set (needs root)");
	ASSERT_EQ(TEST_SHARE, ctx_share());
	ASSERT_EQ(0, query(self->fds[0], DRM_SPYRE_QUERY_DEVICE_INFO, &info, sizeof(info)));
	if (!(info.caps & DRM_SPYRE_CAP_VM) || !(info.caps & DRM_SPYRE_CAP_LAUNCH))
		SKIP(return, "no card with DRM_SPYRE_CAP_VM and LAUNCH");
	plen = build_count(&p);
	ASSERT_EQ(0, prog_bo(self->fds[0], p.img, plen, 0, 4096, &prog));
	/* iterations per 250 ms of this host */
	while (t < 250 * 1000000LL && iters < 1ull << 34) {
		int64_t t0 = now_ns();

		ASSERT_EQ(0, count_submit(self->fds[0], prog, plen, 0, iters, &job));
		ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fds[0], job));
		t = now_ns() - t0;
		if (t < 250 * 1000000LL)
			iters *= 2;
	}
	/*
	 * One more busy file costs an open and a SUBMIT (some 150 ms on the debug kernel): the
	 * launch lasts the filling of every file the tests may fill, 3 times over, plus 4 s
	 * for the refused SUBMIT's second and what they check then, within 0.6 of the job
	 * timeout.
	 */
	t0 = now_ns();
	for (i = 0; i < 4; i++) {
		int fd = open_card(0);

		ASSERT_LE(0, fd);
		ASSERT_EQ(0, nop_job(fd, 0, &job));
		close(fd);
	}
	want = 4 * SEC_NS + (ctx_share() + 2) * ((now_ns() - t0) / 4) * 3;
	cap = job_timeout_ms() * 1000000LL * 6 / 10;
	want = want > cap ? cap : want;
	/* twice the iterations: the difference is the launch's own time, without SUBMIT's */
	t0 = now_ns();
	ASSERT_EQ(0, count_submit(self->fds[0], prog, plen, 0, iters * 2, &job));
	ASSERT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fds[0], job));
	t = now_ns() - t0 - t;
	t = t < 1000000 ? 1000000 : t;
	ASSERT_EQ(0, count_submit(self->fds[0], prog, plen, 0, iters * (want / (t / 16)) / 16,
				  &self->long_job));
}

FIXTURE_TEARDOWN(share)
{
	if (self->n)
		job_status(self->fds[0], self->long_job);
	while (self->n)
		close(self->fds[--self->n]);
	if (self->old_share)
		set_ctx_share(self->old_share);
}

/* The long launch is still running: whatever was measured was measured under it. */
static bool long_job_running(FIXTURE_DATA(share) *self)
{
	return job_wait(self->fds[0], self->long_job, now_ns(), NULL) == -ETIME;
}

/*
 * Open files of this user and queue a NOP behind the long launch on each, up to @max files
 * with work (the launch's included) or the first SUBMIT that fails: its -errno, 0 if none.
 * *ns is how long the failing SUBMIT took.
 */
static int share_fill(FIXTURE_DATA(share) *self, int max, int64_t *ns)
{
	uint64_t job;
	int64_t t;
	int ret;

	while (self->n < max) {
		self->fds[self->n] = open_card(0);
		if (self->fds[self->n] < 0)
			return -errno;
		self->n++;
		t = now_ns();
		ret = nop_job(self->fds[self->n - 1], 0, &job);
		*ns = now_ns() - t;
		if (ret)
			return ret;
	}
	return 0;
}

static void on_alarm(int sig)
{
}

/*
 * One user (root here) with its share of ids busy (ctx_per_user files with work queued) is
 * refused one more: the SUBMIT waits its bounded second for one of its own jobs to end, then
 * fails with -EBUSY, though the card has ids free; a signal ends that wait at once (-EINTR,
 * the handler installed without SA_RESTART). The old driver let one user's jobs hold all 255
 * ids, each of its SUBMITs succeeding.
 */
TEST_F_TIMEOUT(share, own_share_exhausted_ebusy, 120)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	/* every 50 ms: one lands in the wait however late the SUBMIT starts */
	struct itimerval it = { .it_value = { .tv_usec = 50000 },
				.it_interval = { .tv_usec = 50000 } };
	struct itimerval off = { 0 };
	struct drm_spyre_cmd nop = { .op = DRM_SPYRE_CMD_NOP };
	struct drm_spyre_submit sub = submit_args(&nop, 1);
	int share = ctx_share(), ret;
	uint64_t job;
	int64_t t;

	ret = share_fill(self, CTX_IDS + 1, &t);
	ASSERT_TRUE(long_job_running(self)) TH_LOG("the launch ended before the files were busy");
	ASSERT_EQ(-EBUSY, ret) TH_LOG("%d files of one user ran jobs at once", self->n);
	EXPECT_EQ(share + 1, self->n) TH_LOG("refused at file %d, share %d", self->n, share);
	EXPECT_LT(share, CTX_IDS);
	TH_LOG("share %d ids, file %d refused after %lld ms", share, self->n,
	       (long long)(t / 1000000));
	EXPECT_LE(900 * 1000000LL, t) TH_LOG("refused without the bounded wait");
	EXPECT_GE(5 * SEC_NS, t);
	/* the wait is interruptible: a signal ends it well before its second */
	ASSERT_EQ(0, sigaction(SIGALRM, &sa, NULL));
	ASSERT_EQ(0, setitimer(ITIMER_REAL, &it, NULL));
	t = now_ns();
	/* not xioctl(), which restarts on EINTR */
	ret = ioctl(self->fds[self->n - 1], DRM_IOCTL_SPYRE_SUBMIT, &sub) ? -errno : 0;
	t = now_ns() - t;
	setitimer(ITIMER_REAL, &off, NULL);
	signal(SIGALRM, SIG_DFL);
	EXPECT_EQ(-EINTR, ret) TH_LOG("signals every 50 ms did not end the wait");
	TH_LOG("interrupted SUBMIT: %d after %lld ms", ret, (long long)(t / 1000000));
	EXPECT_TRUE(long_job_running(self));
	/* once the user's jobs are done (the launch may time out on a loaded host), it runs */
	ASSERT_LE(0, job_status(self->fds[0], self->long_job));
	ASSERT_EQ(0, nop_job(self->fds[self->n - 1], 0, &job));
	EXPECT_EQ(DRM_SPYRE_JOB_OK, job_status(self->fds[self->n - 1], job));
}

/*
 * While one user's jobs hold its full share of ids, another user (a child as nobody, the
 * node opened to all for it) submits at once and its job completes. On the old driver the
 * first user's jobs held all 255 ids and the other's SUBMIT failed with -EBUSY after 1 s.
 */
TEST_F_TIMEOUT(share, other_user_submits_beside_full_share, 120)
{
	int minors[MAX_CARDS], res[2];
	int64_t r[2] = { -1, -1 }, t;
	char node[64];
	struct stat st;
	int status;
	pid_t pid;

	/* root makes as many files busy as it may: its share (all 255 ids on the old driver) */
	ASSERT_EQ(-EBUSY, share_fill(self, CTX_IDS + 1, &t));
	ASSERT_LT(0, spyre_minors(minors));
	snprintf(node, sizeof(node), "/dev/accel/accel%d", minors[0]);
	ASSERT_EQ(0, stat(node, &st));
	chmod(node, 0666);
	ASSERT_EQ(0, pipe(res));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		int64_t out[2];
		uint64_t job;
		int fd;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(res[0]);
		if (setresuid(65534, 65534, 65534))
			_exit(3);
		fd = open_minor(minors[0]);
		out[1] = now_ns();
		out[0] = fd < 0 ? -errno : nop_job(fd, 0, &job);
		out[1] = now_ns() - out[1];
		if (write(res[1], out, sizeof(out)) != sizeof(out))
			_exit(2);
		_exit(!out[0] && job_status(fd, job) == DRM_SPYRE_JOB_OK ? 0 : 1);
	}
	close(res[1]);
	ASSERT_EQ(sizeof(r), read(res[0], r, sizeof(r)));
	chmod(node, st.st_mode & 07777);
	EXPECT_TRUE(long_job_running(self)) TH_LOG("the launch ended before the other user ran");
	TH_LOG("%d files of root busy; nobody's SUBMIT: %lld after %lld ms", self->n - 1,
	       (long long)r[0], (long long)(r[1] / 1000000));
	EXPECT_EQ(0, r[0]);
	EXPECT_GT(500 * 1000000LL, r[1]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && !WEXITSTATUS(status));
}

TEST_HARNESS_MAIN
