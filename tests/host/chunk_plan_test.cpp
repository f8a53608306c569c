// Planning of staged copies: the pure split of a copy into staging chunks.
#include <gtest/gtest.h>

#include <random>

#include "staging.hpp"

namespace {

using spyre::Chunk;
using spyre::ChunkPlan;

constexpr uint64_t MiB = 1ull << 20;

// Checks every invariant of a plan: contiguous, complete, bounded, aligned, alternating slots.
void check_plan(uint64_t size, uint64_t off, uint64_t chunk, unsigned slots) {
    SCOPED_TRACE(testing::Message() << "size " << size << " offset " << off << " chunk " << chunk
                                    << " slots " << slots);
    ChunkPlan plan(size, off, chunk, slots);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < plan.count(); ++i) {
        Chunk c = plan.at(i);
        ASSERT_EQ(c.index, i);
        ASSERT_EQ(c.host_offset, pos);
        ASSERT_EQ(c.dev_offset, off + pos);
        ASSERT_GT(c.size, 0u);
        ASSERT_LE(c.size, chunk);
        ASSERT_EQ(c.slot, i % slots);
        if (i > 0) {
            ASSERT_EQ(c.dev_offset % spyre::kStagingAlign, 0u);
        }
        pos += c.size;
    }
    ASSERT_EQ(pos, size);
    if (size > 0) {
        // Never more chunks than needed: at most one extra for the unaligned head.
        ASSERT_LE(plan.count(), (size + chunk - 1) / chunk + 1);
    }
}

TEST(ChunkPlan, ZeroBytesIsNoChunk) {
    ChunkPlan plan(0, 123, 4 * MiB, 2);
    EXPECT_EQ(plan.count(), 0u);
    EXPECT_THROW(plan.at(0), std::out_of_range);
}

TEST(ChunkPlan, OneByte) {
    ChunkPlan plan(1, 0, 4 * MiB, 2);
    ASSERT_EQ(plan.count(), 1u);
    EXPECT_EQ(plan.at(0).size, 1u);
}

TEST(ChunkPlan, ExactMultipleOfChunk) {
    ChunkPlan plan(8 * MiB, 0, 4 * MiB, 2);
    ASSERT_EQ(plan.count(), 2u);
    EXPECT_EQ(plan.at(0).size, 4 * MiB);
    EXPECT_EQ(plan.at(1).size, 4 * MiB);
    EXPECT_EQ(plan.at(1).slot, 1u);
}

TEST(ChunkPlan, OneByteOverAChunk) {
    ChunkPlan plan(4 * MiB + 1, 0, 4 * MiB, 2);
    ASSERT_EQ(plan.count(), 2u);
    EXPECT_EQ(plan.at(1).size, 1u);
    EXPECT_EQ(plan.at(1).host_offset, 4 * MiB);
}

TEST(ChunkPlan, UnalignedOffsetShortensTheFirstChunk) {
    ChunkPlan plan(10 * MiB, 100, 4 * MiB, 2);
    ASSERT_EQ(plan.count(), 3u);
    EXPECT_EQ(plan.at(0).size, 4 * MiB - 100);
    EXPECT_EQ(plan.at(1).dev_offset, 4 * MiB);
    EXPECT_EQ(plan.at(2).dev_offset, 8 * MiB);
    EXPECT_EQ(plan.at(2).size, 2 * MiB + 100);
    check_plan(10 * MiB, 100, 4 * MiB, 2);
}

TEST(ChunkPlan, SmallCopyAtUnalignedOffsetStaysOneChunk) {
    ChunkPlan plan(3, 4095, 4 * MiB, 2);
    ASSERT_EQ(plan.count(), 1u);
    EXPECT_EQ(plan.at(0).size, 3u);
    EXPECT_EQ(plan.at(0).dev_offset, 4095u);
}

TEST(ChunkPlan, HugeCopy) {
    ChunkPlan plan(16ull << 30, 7, 4 * MiB, 2);
    EXPECT_EQ(plan.count(), 4097u);
    Chunk last = plan.at(plan.count() - 1);
    EXPECT_EQ(last.host_offset + last.size, 16ull << 30);
    EXPECT_EQ(last.size, 7u);
}

TEST(ChunkPlan, RejectsBadParameters) {
    EXPECT_THROW(ChunkPlan(10, 0, 0, 2), std::invalid_argument);
    EXPECT_THROW(ChunkPlan(10, 0, 4096, 0), std::invalid_argument);
    EXPECT_THROW(ChunkPlan(10, 0, 5000, 2), std::invalid_argument);  // not a multiple of 4 KiB
}

TEST(ChunkPlan, InvariantsHoldForManyShapes) {
    for (uint64_t size : std::initializer_list<uint64_t>{
             1ull, 2ull, 127ull, 128ull, 4095ull, 4096ull, 4097ull, MiB + 3, 4 * MiB - 1, 4 * MiB,
             4 * MiB + 1, 64 * MiB, 256 * MiB + 5})
        for (uint64_t off : std::initializer_list<uint64_t>{0ull, 1ull, 3ull, 4095ull, 4096ull,
                                                            4097ull, 4 * MiB - 1, 4 * MiB})
            for (unsigned slots : {1u, 2u, 3u}) check_plan(size, off, 4 * MiB, slots);
    std::mt19937_64 rng(42);
    for (int i = 0; i < 2000; ++i) {
        uint64_t chunk = 4096 * (1 + rng() % 64);
        check_plan(rng() % (3 * chunk + 10), rng() % (1ull << 40), chunk, 1 + rng() % 4);
    }
}

TEST(StagingEnv, ChunkSizeOverride) {
    unsetenv("SPYRE_STAGING_CHUNK_BYTES");
    EXPECT_EQ(spyre::staging_chunk_bytes_from_env(), spyre::kDefaultStagingChunkBytes);
    setenv("SPYRE_STAGING_CHUNK_BYTES", "5000", 1);
    EXPECT_EQ(spyre::staging_chunk_bytes_from_env(), 8192u);
    setenv("SPYRE_STAGING_CHUNK_BYTES", "junk", 1);
    EXPECT_EQ(spyre::staging_chunk_bytes_from_env(), spyre::kDefaultStagingChunkBytes);
    unsetenv("SPYRE_STAGING_CHUNK_BYTES");
}

}  // namespace
