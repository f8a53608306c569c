// The collectives' choice between ring and binomial tree (libspyre/src/comm/tree.hpp's
// alpha-beta model: alpha = 256 + 1500 cycles at 1.5 GHz = 1.17 us per peer copy, beta = the
// 60 GB/s peer link, reductions at 204.8 GB/s / 3), at sizes either side of the crossovers that
// model puts (Documentation/libspyre.md "Collectives", Algorithms).
#include <gtest/gtest.h>

#include <cstdint>

#include "comm/one_shot.hpp"
#include "comm/tree.hpp"

namespace {

using spyre::comm::Collective;
using spyre::comm::one_shot_is_faster;
using spyre::comm::tree_is_faster;

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;
constexpr uint64_t kChunk = 4 * MiB;  // SPYRE_COMM_CHUNK_BYTES's default

// 2 L (alpha + S/beta) < 2 (n - 1) (alpha + S/(n beta)): below ~55 KiB on 4 ranks, ~129 KiB on 8,
// never on 2 or 3 (as before broadcast and reduce had trees).
TEST(CommAlgo, AllReduceTreeForSmallMessagesOnFourRanksOrMore) {
    for (int n : {2, 3}) {
        EXPECT_FALSE(tree_is_faster(Collective::AllReduce, n, 4, kChunk)) << n;
        EXPECT_FALSE(tree_is_faster(Collective::AllReduce, n, 1 * KiB, kChunk)) << n;
    }
    EXPECT_TRUE(tree_is_faster(Collective::AllReduce, 4, 4 * KiB, kChunk));
    EXPECT_TRUE(tree_is_faster(Collective::AllReduce, 4, 54 * KiB, kChunk));
    EXPECT_FALSE(tree_is_faster(Collective::AllReduce, 4, 56 * KiB, kChunk));
    EXPECT_FALSE(tree_is_faster(Collective::AllReduce, 4, 4 * MiB, kChunk));
    EXPECT_TRUE(tree_is_faster(Collective::AllReduce, 8, 128 * KiB, kChunk));
    EXPECT_FALSE(tree_is_faster(Collective::AllReduce, 8, 130 * KiB, kChunk));
}

// L (k alpha + S/beta) against the pipelined ring k alpha + S/beta + (n - 2)(alpha +
// min(S, chunk)/beta): on 4 ranks the tree up to 2 chunks (where the two tie),
// on 8 up to 3; never on 2 or 3 ranks.
TEST(CommAlgo, BroadcastTreeUpToAFewChunksOnFourRanksOrMore) {
    for (int n : {2, 3})
        for (uint64_t s : {uint64_t{4}, 8 * KiB, kChunk, 3 * kChunk})
            EXPECT_FALSE(tree_is_faster(Collective::Broadcast, n, s, kChunk)) << n << " " << s;
    EXPECT_TRUE(tree_is_faster(Collective::Broadcast, 4, 1 * KiB, kChunk));
    EXPECT_TRUE(tree_is_faster(Collective::Broadcast, 4, kChunk, kChunk));
    EXPECT_TRUE(tree_is_faster(Collective::Broadcast, 4, kChunk + MiB, kChunk));
    EXPECT_FALSE(tree_is_faster(Collective::Broadcast, 4, 2 * kChunk + MiB, kChunk));
    EXPECT_FALSE(tree_is_faster(Collective::Broadcast, 4, 16 * kChunk, kChunk));
    EXPECT_TRUE(tree_is_faster(Collective::Broadcast, 8, 3 * kChunk - MiB, kChunk));
    EXPECT_FALSE(tree_is_faster(Collective::Broadcast, 8, 4 * kChunk, kChunk));
    // small chunks make the ring's pipeline win early: 4004 bytes in 384-byte chunks
    EXPECT_FALSE(tree_is_faster(Collective::Broadcast, 4, 4004, 384));
    EXPECT_TRUE(tree_is_faster(Collective::Broadcast, 4, 384, 384));
}

// Reductions on the critical path too: the tree below ~156 KiB on 2 ranks, ~31 KiB on 3,
// ~65 KiB on 4, ~88 KiB on 8.
TEST(CommAlgo, ReduceTreeForSmallMessages) {
    const struct {
        int n;
        uint64_t tree_at, ring_at;
    } cases[] = {{2, 152 * KiB, 160 * KiB},
                 {3, 30 * KiB, 33 * KiB},
                 {4, 64 * KiB, 66 * KiB},
                 {8, 87 * KiB, 90 * KiB}};
    for (const auto& c : cases) {
        EXPECT_TRUE(tree_is_faster(Collective::Reduce, c.n, 1 * KiB, kChunk)) << c.n;
        EXPECT_TRUE(tree_is_faster(Collective::Reduce, c.n, c.tree_at, kChunk)) << c.n;
        EXPECT_FALSE(tree_is_faster(Collective::Reduce, c.n, c.ring_at, kChunk)) << c.n;
        EXPECT_FALSE(tree_is_faster(Collective::Reduce, c.n, 64 * MiB, kChunk)) << c.n;
    }
    EXPECT_FALSE(tree_is_faster(Collective::Reduce, 1, 1 * KiB, kChunk));
}

// one_shot.hpp: (n - 1) (alpha + S/beta) + (n - 1) (rho + S/gamma), alpha = a message step
// with its posted signal (256 + 1500 + 32 + 1500 cycles), rho = 500 cycles of launch overhead,
// gamma = 204.8 GB/s / 3, against the ring and the tree with their reductions: on 2 ranks below
// 2 alpha gamma = 292 KiB (one step less than the ring, a reduction of S instead of S/2), on 3
// below ~140 KiB, on 4 below ~111 KiB (it always beats the 4-rank tree: one message step less
// for one reduction more), never on 8 (the tree's 6 steps against 7); and never for more than
// one message.
TEST(CommAlgo, AllReduceOneShotForTheSmallestMessages) {
    EXPECT_FALSE(one_shot_is_faster(1, 4, kChunk));
    for (int n : {2, 3, 4}) EXPECT_TRUE(one_shot_is_faster(n, 4, kChunk)) << n;
    EXPECT_TRUE(one_shot_is_faster(2, 292 * KiB, kChunk));
    EXPECT_FALSE(one_shot_is_faster(2, 293 * KiB, kChunk));
    EXPECT_TRUE(one_shot_is_faster(3, 139 * KiB, kChunk));
    EXPECT_FALSE(one_shot_is_faster(3, 140 * KiB, kChunk));
    EXPECT_TRUE(one_shot_is_faster(4, 110 * KiB, kChunk));
    EXPECT_FALSE(one_shot_is_faster(4, 111 * KiB, kChunk));
    EXPECT_FALSE(one_shot_is_faster(8, 4, kChunk));
    EXPECT_FALSE(one_shot_is_faster(2, 8 * KiB, 4 * KiB));  // two messages
}

}  // namespace
