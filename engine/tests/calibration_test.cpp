// SPDX-License-Identifier: MIT
// Calibration of the cycle model against IBM's published measurement (Documentation/isa.md
// "Calibration"): single-core softmax (512, 1024) fp16 without scratchpad planning, 32.51 us.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "spyre/programs/softmax_naive.hpp"
#include "test_util.hpp"

namespace spyre::test {
namespace {

constexpr double kIbmUs = 32.51;  // torch-spyre scratchpad_planning.md, median of 1000 runs

TEST(Calibration, NaiveSingleCoreSoftmaxModelsWithinTenPercentOfIbm) {
    const uint64_t rows = 512, cols = 1024;
    auto p = programs::build_softmax_naive(rows, cols);
    Rig rig(2, 8u << 20);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-4.f, 4.f);
    std::vector<float> x(rows * cols);
    for (float& v : x) v = round_to(DType::F16, u(rng));
    rig.put_as(DType::F16, p.x, x);
    uint64_t cycles = 0, ddr = 0;
    for (const auto& k : p.kernels) {
        ASSERT_EQ(rig.run(k, {}, 1), 0) << rig.res.message;
        cycles += rig.res.total_cycles;
        const auto& c0 = rig.res.cores[0];
        std::printf("  kernel: %llu cycles; load %llu store %llu vector %llu scalar %llu\n",
                    (unsigned long long)rig.res.total_cycles, (unsigned long long)c0.dma_load_busy,
                    (unsigned long long)c0.dma_store_busy,
                    (unsigned long long)c0.busy[SPYRE_UNIT_VECTOR],
                    (unsigned long long)c0.busy[SPYRE_UNIT_SCALAR]);
        ddr += rig.res.ddr_read_bytes + rig.res.ddr_write_bytes;
    }
    const double us = cycles / 1.5e3;
    RecordProperty("modeled_us", std::to_string(us));
    std::printf(
        "naive softmax (512,1024) fp16, 1 core: %.2f us modeled (IBM %.2f us), %.2f MiB "
        "DDR\n",
        us, kIbmUs, ddr / 1048576.0);
    EXPECT_NEAR(us, kIbmUs, 0.10 * kIbmUs);
    // the result is a softmax (fp16 arithmetic: tolerance of a few fp16 ulps)
    const auto o = rig.get_as(DType::F16, p.o, rows * cols);
    for (uint64_t r = 0; r < rows; r += 37) {
        float mx = -INFINITY;
        for (uint64_t c = 0; c < cols; ++c) mx = std::max(mx, x[r * cols + c]);
        double sum = 0;
        for (uint64_t c = 0; c < cols; ++c) sum += std::exp(double(x[r * cols + c]) - mx);
        for (uint64_t c = 0; c < cols; c += 13) {
            const double want = std::exp(double(x[r * cols + c]) - mx) / sum;
            EXPECT_NEAR(o[r * cols + c], want, 4e-3 * want + 1e-6) << r << "," << c;
        }
    }
}

}  // namespace
}  // namespace spyre::test
