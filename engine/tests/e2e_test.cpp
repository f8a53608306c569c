// SPDX-License-Identifier: MIT
// End to end: a 256x256x256 fp16 matmul split over 32 cores, written with the builder; and the
// determinism of numerics and cycles across runs and host thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "spyre/programs/matmul.hpp"
#include "test_util.hpp"

namespace spyre::test {
namespace {

using programs::build_matmul_program;

struct MatmulData {
    std::vector<float> a, b;  // values exactly representable in fp16
};

MatmulData make_data(uint64_t m, uint64_t n, uint64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1, 1);
    MatmulData md{std::vector<float>(m * k), std::vector<float>(k * n)};
    for (auto& x : md.a) x = round_to(DType::F16, d(rng));
    for (auto& x : md.b) x = round_to(DType::F16, d(rng));
    return md;
}

TEST(EndToEnd, Matmul256Fp16On32Cores) {
    const uint64_t M = 256, N = 256, K = 256;
    Rig rig(2, 4u << 20);
    auto md = make_data(M, N, K, 7);
    const uint64_t A = 0x10000, B = 0x40000, C = 0x80000;
    rig.put_as(DType::F16, A, md.a);
    rig.put_as(DType::F16, B, md.b);
    auto prog = build_matmul_program(M, N, K, 32);
    ASSERT_EQ(rig.run(prog, {A, B, C}, 32), 0) << rig.res.message;
    auto c = rig.get_as(DType::F16, C, M * N);
    double max_err = 0;
    for (uint64_t i = 0; i < M; ++i)
        for (uint64_t j = 0; j < N; ++j) {
            double ref = 0;
            for (uint64_t kk = 0; kk < K; ++kk)
                ref += static_cast<double>(md.a[i * K + kk]) * md.b[kk * N + j];
            const double err = std::fabs(c[i * N + j] - ref);
            max_err = std::max(max_err, err);
            ASSERT_LE(err, 0x1p-10 * std::fabs(ref) + 1e-3) << i << "," << j;
        }
    EXPECT_EQ(rig.res.macs, M * N * K);
    // every core did the same amount of matrix work
    for (int core = 1; core < 32; ++core)
        EXPECT_EQ(rig.res.cores[core].busy[SPYRE_UNIT_MATRIX],
                  rig.res.cores[0].busy[SPYRE_UNIT_MATRIX]);
    RecordProperty("max_abs_err", std::to_string(max_err));
}

TEST(EndToEnd, DeterministicAcrossRunsAndThreadCounts) {
    const uint64_t M = 256, N = 256, K = 256;
    auto md = make_data(M, N, K, 9);
    auto prog = build_matmul_program(M, N, K, 32);
    std::vector<std::vector<uint8_t>> outs;
    std::vector<spyre_engine_result> results;
    for (uint32_t threads : {1u, 2u, 4u, 2u}) {
        Rig rig(threads, 4u << 20);
        rig.put_as(DType::F16, 0x10000, md.a);
        rig.put_as(DType::F16, 0x40000, md.b);
        ASSERT_EQ(rig.run(prog, {0x10000, 0x40000, 0x80000}, 32), 0) << rig.res.message;
        outs.push_back(rig.get<uint8_t>(0x80000, M * N * 2));
        results.push_back(rig.res);
    }
    for (size_t i = 1; i < outs.size(); ++i) {
        EXPECT_EQ(outs[i], outs[0]) << "run " << i;
        EXPECT_EQ(std::memcmp(&results[i], &results[0], sizeof results[0]), 0) << "run " << i;
        EXPECT_EQ(results[i].total_cycles, results[0].total_cycles);
    }
}

}  // namespace
}  // namespace spyre::test
