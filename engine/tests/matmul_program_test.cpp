// SPDX-License-Identifier: MIT
// The matmul program builder (spyre/programs/matmul.hpp): output types, K streaming and
// sub-tiling within 80% of LX, every Granite-3.3-8B prefill shape, and a large-K shape end to end
// against the normative fp32 accumulation (bit exact).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "spyre/programs/matmul.hpp"
#include "test_util.hpp"

namespace spyre::test {
namespace {

using programs::build_matmul_program;
using programs::MatmulGrid;
using programs::plan_matmul;

// Fills n elements of type t at mem[addr] with random values in [-1, 1] (integers in
// [-100, 100] for I8), fast enough for 100 MB operands.
void fill_random(std::vector<uint8_t>& mem, uint64_t addr, uint64_t n, DType t, uint64_t seed) {
    std::vector<float> table(4096);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto& x : table) x = t == DType::I8 ? std::round(d(rng) * 100) : d(rng);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t* p = mem.data() + addr;
    for (uint64_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float v = table[(s >> 33) & 4095];
        switch (t) {
            case DType::F32:
                std::memcpy(p + 4 * i, &v, 4);
                break;
            case DType::F16: {
                const uint16_t h = num::f32_to_f16(v);
                std::memcpy(p + 2 * i, &h, 2);
                break;
            }
            case DType::BF16: {
                const uint16_t h = num::f32_to_bf16(v);
                std::memcpy(p + 2 * i, &h, 2);
                break;
            }
            default:
                p[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
                break;
        }
    }
}

float value_at(const std::vector<uint8_t>& mem, uint64_t addr, DType t, uint64_t i) {
    const uint8_t* p = mem.data() + addr;
    uint16_t h;
    float f;
    switch (t) {
        case DType::F32:
            std::memcpy(&f, p + 4 * i, 4);
            return f;
        case DType::F16:
            std::memcpy(&h, p + 2 * i, 2);
            return num::f16_to_f32(h);
        case DType::BF16:
            std::memcpy(&h, p + 2 * i, 2);
            return num::bf16_to_f32(h);
        default:
            return static_cast<int8_t>(p[i]);
    }
}

// Checks C[i][j] against the normative accumulation: fp32 FMAs in ascending k from +0, rounded
// once to the output type (int32 wrapping sums for I8). Bit exact.
void expect_exact(const Rig& rig, DType in, uint64_t A, uint64_t B, uint64_t C, uint64_t N,
                  uint64_t K, uint64_t i, uint64_t j) {
    const DType out = programs::matmul_out_type(in);
    if (in == DType::I8) {
        uint32_t acc = 0;
        for (uint64_t k = 0; k < K; ++k)
            acc += static_cast<uint32_t>(static_cast<int32_t>(value_at(rig.mem, A, in, i * K + k)) *
                                         static_cast<int32_t>(value_at(rig.mem, B, in, k * N + j)));
        int32_t got;
        std::memcpy(&got, rig.mem.data() + C + 4 * (i * N + j), 4);
        ASSERT_EQ(static_cast<uint32_t>(got), acc) << i << "," << j;
        return;
    }
    float acc = 0.0f;
    for (uint64_t k = 0; k < K; ++k)
        acc =
            std::fma(value_at(rig.mem, A, in, i * K + k), value_at(rig.mem, B, in, k * N + j), acc);
    const float got = value_at(rig.mem, C, out, i * N + j);
    ASSERT_TRUE(same_float(got, round_to(out, acc)))
        << i << "," << j << " got " << got << " want " << round_to(out, acc);
}

TEST(MatmulProgram, OutputTypeFollowsInput) {
    EXPECT_EQ(programs::matmul_out_type(DType::F16), DType::F16);
    EXPECT_EQ(programs::matmul_out_type(DType::BF16), DType::BF16);
    EXPECT_EQ(programs::matmul_out_type(DType::F32), DType::F32);
    EXPECT_EQ(programs::matmul_out_type(DType::I8), DType::I32);
    EXPECT_THROW(plan_matmul(64, 64, 64, 1, DType::I32), std::invalid_argument);
    EXPECT_THROW(plan_matmul(64, 64, 60, 1, DType::F16), std::invalid_argument);  // 120-byte rows
    EXPECT_THROW(plan_matmul(64, 0, 64, 1, DType::F16), std::invalid_argument);
}

TEST(MatmulProgram, GranitePrefillShapesPlanWithin80PercentOfLx) {
    const uint64_t lx = 2u << 20, budget = lx * 4 / 5;
    // Granite-3.3-8B: hidden 4096, KV 1024 (8 KV heads x 128), MLP 12800
    const uint64_t nk[][2] = {{4096, 4096}, {1024, 4096}, {12800, 4096}, {4096, 12800}};
    for (DType in : {DType::F16, DType::BF16, DType::F32, DType::I8})
        for (uint64_t M : {512, 2048})
            for (const auto& s : nk) {
                const uint64_t N = s[0], K = s[1];
                MatmulGrid g;
                ASSERT_NO_THROW(g = plan_matmul(M, N, K, 32, in, lx)) << M << "x" << N << "x" << K;
                EXPECT_LE(g.lx_bytes_used, budget);
                EXPECT_EQ(g.gm * g.gn, 32u);
                EXPECT_EQ(g.gm * g.tm, M);
                EXPECT_EQ(g.gn * g.tn, N);
                EXPECT_EQ(g.tm % g.sm, 0u);
                EXPECT_EQ(g.tn % g.sn, 0u);
                EXPECT_EQ(K % g.kc, 0u);
                EXPECT_LE(g.kc, isa::kMaxMatDim);
                if (K * isa::dtype_size(in) * (g.tm + g.tn) > budget) {
                    EXPECT_LT(g.kc, K);
                }
                auto prog = build_matmul_program(M, N, K, 32, in, lx);
                EXPECT_GT(prog.size(), isa::kHeaderBytes);
            }
}

struct SmallLxCase {
    DType in;
    uint64_t M, N, K, cores;
};

class MatmulProgramSmallLx : public ::testing::TestWithParam<SmallLxCase> {};

// A 64 KiB scratchpad forces sub-tiles and several K chunks: every output element is checked.
TEST_P(MatmulProgramSmallLx, StreamsKAndSubTilesExactly) {
    const SmallLxCase cs = GetParam();
    spyre_engine_config cfg;
    spyre_engine_config_default(&cfg);
    cfg.num_cores = static_cast<uint32_t>(cs.cores);
    cfg.num_threads = 2;
    cfg.lx_bytes = 64 << 10;
    Rig rig(cfg, 8u << 20);
    const MatmulGrid g = plan_matmul(cs.M, cs.N, cs.K, cs.cores, cs.in, cfg.lx_bytes);
    EXPECT_LT(g.kc, cs.K);
    EXPECT_TRUE(g.sm < g.tm || g.sn < g.tn);
    EXPECT_LE(g.lx_bytes_used, cfg.lx_bytes * 4 / 5);
    const uint64_t es = isa::dtype_size(cs.in);
    const uint64_t A = 0x10000, B = A + (cs.M * cs.K * es + 4095) / 4096 * 4096,
                   C = B + (cs.K * cs.N * es + 4095) / 4096 * 4096;
    fill_random(rig.mem, A, cs.M * cs.K, cs.in, 1);
    fill_random(rig.mem, B, cs.K * cs.N, cs.in, 2);
    auto prog = build_matmul_program(cs.M, cs.N, cs.K, cs.cores, cs.in, cfg.lx_bytes);
    ASSERT_EQ(rig.run(prog, {A, B, C}, static_cast<uint32_t>(cs.cores)), 0) << rig.res.message;
    EXPECT_EQ(rig.res.macs, cs.M * cs.N * cs.K);
    for (uint64_t i = 0; i < cs.M; ++i)
        for (uint64_t j = 0; j < cs.N; ++j) expect_exact(rig, cs.in, A, B, C, cs.N, cs.K, i, j);
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulProgramSmallLx,
                         ::testing::Values(SmallLxCase{DType::F16, 96, 256, 640, 4},
                                           SmallLxCase{DType::BF16, 128, 256, 1024, 2},
                                           SmallLxCase{DType::F32, 120, 192, 320, 2},
                                           SmallLxCase{DType::I8, 128, 512, 1024, 2}));

// Granite-3.3-8B MLP down projection at M = 512: K = 12800 cannot sit in LX. Sampled elements
// are bit exact against the normative fp32 accumulation; bf16 in, bf16 out.
TEST(MatmulProgram, GraniteMlpDownLargeKEndToEnd) {
    const uint64_t M = 512, N = 4096, K = 12800;
    const DType in = DType::BF16;
    const uint64_t A = 0, B = M * K * 2, C = B + K * N * 2;
    Rig rig(2, C + M * N * 2, 32);
    fill_random(rig.mem, A, M * K, in, 3);
    fill_random(rig.mem, B, K * N, in, 4);
    const MatmulGrid g = plan_matmul(M, N, K, 32, in);
    EXPECT_LT(g.kc, K);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(rig.run(build_matmul_program(M, N, K, 32, in), {A, B, C}, 32), 0) << rig.res.message;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(rig.res.macs, M * N * K);
    std::mt19937 rng(5);
    for (int t = 0; t < 1500; ++t) expect_exact(rig, in, A, B, C, N, K, rng() % M, rng() % N);
    // the corners of every core's tile
    for (uint64_t i : {uint64_t{0}, g.tm - 1, M - 1})
        for (uint64_t j : {uint64_t{0}, g.tn - 1, g.tn, N - 1})
            expect_exact(rig, in, A, B, C, N, K, i, j);
    const double util = double(rig.res.macs) / (double(rig.res.total_cycles) * 32 * 1024);
    RecordProperty("host_seconds", std::to_string(s));
    RecordProperty("modeled_cycles", std::to_string(rig.res.total_cycles));
    RecordProperty("mac_utilization", std::to_string(util));
}

// SPYRE_ENGINE_JOB_TIMING_ONLY prices a job without data: the same statistics as the real run,
// DDR untouched (mem may be NULL), in a fraction of the host time.
TEST(MatmulProgram, TimingOnlyRunGivesTheRealRunsStatistics) {
    const uint64_t M = 256, N = 512, K = 1024;
    for (DType in : {DType::F16, DType::BF16, DType::F32, DType::I8}) {
        SCOPED_TRACE(int(in));
        const uint64_t es = isa::dtype_size(in);
        const uint64_t A = 0, B = M * K * es, C = B + K * N * es;
        Rig rig(2, C + M * N * 4, 32);
        fill_random(rig.mem, A, M * K, in, 1);
        fill_random(rig.mem, B, K * N, in, 2);
        const auto prog = build_matmul_program(M, N, K, 32, in);
        ASSERT_EQ(rig.run(prog, {A, B, C}, 32), 0) << rig.res.message;
        const spyre_engine_result real = rig.res;
        const std::vector<uint8_t> after = rig.mem;
        std::fill(rig.mem.begin() + C, rig.mem.end(), 0xAB);
        const std::vector<uint8_t> before = rig.mem;

        const uint64_t args[3] = {A, B, C};
        spyre_engine_window w{0, rig.mem.size()};
        spyre_engine_job job{};
        job.program = prog.data();
        job.program_size = prog.size();
        job.args = args;
        job.num_args = 3;
        job.num_cores = 32;
        job.mem_size = rig.mem.size();
        job.windows = &w;
        job.num_windows = 1;
        job.flags = SPYRE_ENGINE_JOB_TIMING_ONLY;
        for (void* mem : {static_cast<void*>(nullptr), static_cast<void*>(rig.mem.data())}) {
            job.mem = mem;
            spyre_engine_result t{};
            ASSERT_EQ(spyre_engine_run(rig.eng, &job, &t), 0) << t.message;
            EXPECT_EQ(t.total_cycles, real.total_cycles);
            EXPECT_EQ(t.ddr_read_bytes, real.ddr_read_bytes);
            EXPECT_EQ(t.ddr_write_bytes, real.ddr_write_bytes);
            EXPECT_EQ(t.instructions, real.instructions);
            EXPECT_EQ(t.macs, real.macs);
            EXPECT_EQ(t.mac_peak, real.mac_peak);
            for (uint32_t c = 0; c < 32; ++c)
                for (int u = 0; u < SPYRE_UNIT_COUNT; ++u)
                    EXPECT_EQ(t.cores[c].busy[u], real.cores[c].busy[u]);
        }
        EXPECT_EQ(rig.mem, before);  // nothing was written
        EXPECT_NE(after, before);    // (the real run did write C)
        // other flag bits are still refused
        job.flags = 2;
        spyre_engine_result t{};
        EXPECT_EQ(spyre_engine_run(rig.eng, &job, &t), SPYRE_ENGINE_ERR_INVALID_ARGUMENT);
    }
}

}  // namespace
}  // namespace spyre::test
