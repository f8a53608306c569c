// SPDX-License-Identifier: GPL-2.0-only
/*
 * KUnit tests of spyre_job.c's pure logic: SUBMIT argument checks with the v1 element sizes,
 * ring entry accounting across hardware restarts, and the card-reset rate limit. Included at
 * the end of spyre_job.c when CONFIG_KUNIT is enabled (the debug guest kernel); the suites run
 * when spyre.ko is loaded and report in /sys/kernel/debug/kunit/spyre_job/results.
 *
 * Copyright (C) 2026 The Spyre open stack authors
 */

#include <kunit/test.h>

static void spyre_kunit_elem_size(struct kunit *test)
{
	/* v1 sizes and larger 8-byte multiples up to the cap; nothing smaller than v1. */
	KUNIT_EXPECT_TRUE(test, spyre_elem_size_ok(64, SPYRE_CMD_SIZE_MIN));
	KUNIT_EXPECT_TRUE(test, spyre_elem_size_ok(72, SPYRE_CMD_SIZE_MIN));
	KUNIT_EXPECT_TRUE(test, spyre_elem_size_ok(SPYRE_ELEM_SIZE_MAX, SPYRE_CMD_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_elem_size_ok(56, SPYRE_CMD_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_elem_size_ok(68, SPYRE_CMD_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_elem_size_ok(SPYRE_ELEM_SIZE_MAX + 8, SPYRE_CMD_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_elem_size_ok(0, SPYRE_SYNC_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_elem_size_ok(8, SPYRE_SYNC_SIZE_MIN));
	KUNIT_EXPECT_TRUE(test, spyre_elem_size_ok(16, SPYRE_SYNC_SIZE_MIN));
}

static void spyre_kunit_ext_size(struct kunit *test)
{
	/* Extension structs: v1 (COPY_2D 32 bytes) up to 4096, multiples of 8, nothing else. */
	KUNIT_EXPECT_TRUE(test, spyre_ext_size_ok(32, SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_TRUE(test, spyre_ext_size_ok(40, SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_TRUE(test, spyre_ext_size_ok(DRM_SPYRE_EXT_SIZE_MAX,
						  SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_ext_size_ok(0, SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_ext_size_ok(8, SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_ext_size_ok(24, SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_ext_size_ok(36, SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_ext_size_ok(DRM_SPYRE_EXT_SIZE_MAX + 8,
						   SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_ext_size_ok(0xfffffff8u, SPYRE_COPY_2D_EXT_SIZE_MIN));
	KUNIT_EXPECT_FALSE(test, spyre_ext_size_ok(U32_MAX, SPYRE_COPY_2D_EXT_SIZE_MIN));
}

static void spyre_kunit_submit_args(struct kunit *test)
{
	struct spyre_device *sdev = kunit_kzalloc(test, sizeof(*sdev), GFP_KERNEL);
	struct drm_spyre_submit a = {
		.cmds = 0x1000, .cmd_count = 1, .cmd_size = 64, .sync_size = 16,
	};
	struct drm_spyre_submit b;

	KUNIT_ASSERT_NOT_NULL(test, sdev);
	sdev->user_rings = 3;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &a), 0);

	b = a;
	b.ring = 2;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), 0);
	b = a;
	b.ring = 3;	/* the kernel's ring */
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b = a;
	b.flags = 1;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b = a;
	b.priority = DRM_SPYRE_PRIORITY_LOW;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), 0);
	b.priority = DRM_SPYRE_PRIORITY_HIGH + 1;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b = a;
	b.cmd_count = 0;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b = a;
	b.cmd_count = DRM_SPYRE_MAX_CMDS + 1;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b = a;
	b.cmds = 0;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b = a;
	b.cmd_size = 56;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	/* in-syncs need a pointer and a valid element size; unused ones are not checked */
	b = a;
	b.in_sync_count = 1;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b.in_syncs = 0x2000;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), 0);
	b.sync_size = 8;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b = a;
	b.in_sync_count = DRM_SPYRE_MAX_SYNCS + 1;
	b.in_syncs = 0x2000;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	/* a timeline point needs a syncobj */
	b = a;
	b.out_point = 5;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), -EINVAL);
	b.out_sync = 7;
	KUNIT_EXPECT_EQ(test, spyre_submit_check_args(sdev, &b), 0);
}

static void spyre_kunit_ring_entry(struct kunit *test)
{
	struct spyre_ring *ring = kunit_kzalloc(test, sizeof(*ring), GFP_KERNEL);

	KUNIT_ASSERT_NOT_NULL(test, ring);
	ring->size = 8;
	KUNIT_EXPECT_EQ(test, spyre_ring_entry(ring, 0), 0u);
	KUNIT_EXPECT_EQ(test, spyre_ring_entry(ring, 7), 7u);
	KUNIT_EXPECT_EQ(test, spyre_ring_entry(ring, 8), 0u);
	KUNIT_EXPECT_EQ(test, spyre_ring_entry(ring, 13), 5u);
	/* After a restart the hardware counts from entry 0 again at sequence hw_base. */
	ring->hw_base = 13;
	KUNIT_EXPECT_EQ(test, spyre_ring_entry(ring, 13), 0u);
	KUNIT_EXPECT_EQ(test, spyre_ring_entry(ring, 22), 1u);
	/* 64-bit sequence numbers never wrap into a smaller entry space incorrectly */
	ring->size = 65536;
	ring->hw_base = U64_MAX - 2;
	KUNIT_EXPECT_EQ(test, spyre_ring_entry(ring, U64_MAX), 2u);
	KUNIT_EXPECT_EQ(test, spyre_ring_entry(ring, 1), 4u);
}

static void spyre_kunit_card_reset_rate(struct kunit *test)
{
	struct spyre_device *sdev = kunit_kzalloc(test, sizeof(*sdev), GFP_KERNEL);
	int i;

	KUNIT_ASSERT_NOT_NULL(test, sdev);
	for (i = 0; i < SPYRE_CARD_RESET_BURST; i++)
		KUNIT_EXPECT_TRUE(test, spyre_card_reset_allowed(sdev));
	/* one more within the window is refused (the caller wedges the card) */
	KUNIT_EXPECT_FALSE(test, spyre_card_reset_allowed(sdev));
	/* once the oldest reset left the window, one more is allowed */
	for (i = 0; i < SPYRE_CARD_RESET_BURST; i++)
		sdev->card_reset_at[i] = (jiffies - SPYRE_CARD_RESET_WINDOW - 1) | 1;
	KUNIT_EXPECT_TRUE(test, spyre_card_reset_allowed(sdev));
}

/* At most SPYRE_RING_JOBS jobs on a ring, and the largest job still fits. */
static void spyre_kunit_job_credits(struct kunit *test)
{
	struct spyre_ring *ring = kunit_kzalloc(test, sizeof(*ring), GFP_KERNEL);
	u32 limit;

	KUNIT_ASSERT_NOT_NULL(test, ring);
	ring->size = SPYRE_RING_ENTRIES;
	limit = ring->size - 1;		/* the scheduler's credit limit */
	KUNIT_EXPECT_LE(test, SPYRE_RING_JOBS * spyre_job_credits(ring, 1), limit);
	KUNIT_EXPECT_GT(test, (SPYRE_RING_JOBS + 1) * spyre_job_credits(ring, 1), limit);
	KUNIT_EXPECT_LE(test, spyre_job_credits(ring, DRM_SPYRE_MAX_CMDS), limit);
	/* credits never undercount ring entries */
	KUNIT_EXPECT_GE(test, spyre_job_credits(ring, DRM_SPYRE_MAX_CMDS), DRM_SPYRE_MAX_CMDS);
}

static struct kunit_case spyre_job_kunit_cases[] = {
	KUNIT_CASE(spyre_kunit_elem_size),
	KUNIT_CASE(spyre_kunit_ext_size),
	KUNIT_CASE(spyre_kunit_submit_args),
	KUNIT_CASE(spyre_kunit_ring_entry),
	KUNIT_CASE(spyre_kunit_card_reset_rate),
	KUNIT_CASE(spyre_kunit_job_credits),
	{}
};

static struct kunit_suite spyre_job_kunit_suite = {
	.name = "spyre_job",
	.test_cases = spyre_job_kunit_cases,
};

kunit_test_suite(spyre_job_kunit_suite);
