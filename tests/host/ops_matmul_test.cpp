// SPDX-License-Identifier: MIT
// The op library's matmul program and planner on the engine: every split the planner can pick
// computes the normative result bit for bit (fp32 FMAs in ascending k, rounded once), for plain,
// transposed-B, biased, activated and batched products; the planner's choice is the fastest of
// all splits on the cycle model; pricing equals the real run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/matmul_planner.hpp"
#include "ops/matmul_program.hpp"
#include "ops_test_util.hpp"
#include "spyre/numerics.hpp"

namespace spyre::ops {
namespace {

using isa::DType;

struct Case {
    MatmulShape s;
    std::vector<uint8_t> mem;
    uint64_t a = 0, b = 0, c = 0, bias = 0, b2 = 0, cos = 0, sin = 0;
};

uint64_t up(uint64_t x) { return (x + 127) / 128 * 128; }

Case make_case(MatmulShape s, uint32_t seed) {
    const uint64_t es = isa::dtype_size(s.in), oes = isa::dtype_size(s.out);
    const uint64_t wes = weight_size(s);
    const DType wt = s.w_i8 ? DType::I8 : s.in;
    s.lda = up(s.K * es);
    s.ldb = up((s.trans_b ? s.K : s.N) * wes);
    s.ldc = up(s.N * oes);
    const uint64_t brows = s.trans_b ? s.N : s.K;
    if (s.batch > 1) s.batch_a = s.M * s.lda, s.batch_b = brows * s.ldb, s.batch_c = s.M * s.ldc;
    Case c;
    c.s = s;
    c.a = 0;
    c.b = up(s.batch * s.M * s.lda);
    c.c = c.b + up(s.batch * brows * s.ldb);
    c.bias = c.c + up(s.batch * s.M * s.ldc);
    c.b2 = c.bias + up(s.N * 4);
    c.cos = c.b2 + up(s.batch * brows * s.ldb);
    // rotary tables: rows of every sequence (rot_cb apart, 0 = shared) and position
    uint64_t table = s.rotary ? up((s.M / s.rot_l - 1) * s.rot_cb + s.rot_l * s.rot_cl) : 0;
    if (s.has_scale) table = up(s.N * isa::dtype_size(s.scale_t));  // the scales at `cos`
    c.sin = c.cos + table;
    c.mem.assign(c.sin + table, 0);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1, 1);
    for (uint64_t bi = 0; bi < s.batch; ++bi) {
        for (uint64_t i = 0; i < s.M; ++i)
            for (uint64_t k = 0; k < s.K; ++k)
                test::store_elem(s.in, d(rng), &c.mem[c.a + bi * s.batch_a + i * s.lda + k * es]);
        for (uint64_t i = 0; i < brows; ++i)
            for (uint64_t j = 0; j < (s.trans_b ? s.K : s.N); ++j) {
                // int8 weights: the whole range
                const float wv = s.w_i8 ? std::round(d(rng) * 127.0f) : d(rng);
                test::store_elem(wt, wv, &c.mem[c.b + bi * s.batch_b + i * s.ldb + j * wes]);
                test::store_elem(wt, d(rng), &c.mem[c.b2 + bi * s.batch_b + i * s.ldb + j * wes]);
            }
    }
    for (uint64_t j = 0; j < s.N; ++j)
        test::store_elem(s.bias_t, d(rng), &c.mem[c.bias + j * isa::dtype_size(s.bias_t)]);
    for (uint64_t j = 0; s.has_scale && j < s.N; ++j)
        test::store_elem(s.scale_t, d(rng) / 64.0f, &c.mem[c.cos + j * isa::dtype_size(s.scale_t)]);
    for (uint64_t o = 0; s.rotary && o < table; o += isa::dtype_size(s.rot_t)) {
        test::store_elem(s.rot_t, d(rng), &c.mem[c.cos + o]);
        test::store_elem(s.rot_t, d(rng), &c.mem[c.sin + o]);
    }
    return c;
}

float act(isa::VUn f, float x) {
    switch (f) {
        case isa::VUn::RELU:
            return x > 0 || std::isnan(x) ? x : 0.0f;
        case isa::VUn::SILU:
            return static_cast<float>(double(x) / (1.0 + std::exp(-double(x))));
        default:
            return static_cast<float>(0.5 * double(x) * std::erfc(-double(x) / std::sqrt(2.0)));
    }
}

// Runs the program of split p on a fresh engine and checks every output element.
void run_and_check(Case& c, const MatmulSplit& p, uint64_t* cycles = nullptr) {
    const MatmulShape& s = c.s;
    spyre_engine_config cfg;
    spyre_engine_config_default(&cfg);
    cfg.num_threads = 2;
    spyre_engine* eng = spyre_engine_create(&cfg);
    const auto prog = build_matmul(s, p);
    const uint64_t args[7] = {c.a, c.b, c.c, c.bias, c.b2, c.cos, c.sin};
    const spyre_engine_window w{0, c.mem.size()};
    spyre_engine_job job{};
    job.program = prog.data();
    job.program_size = prog.size();
    job.args = args;
    job.num_args = 7;
    job.num_cores = static_cast<uint32_t>(matmul_cores(p));
    job.mem = c.mem.data();
    job.mem_size = c.mem.size();
    job.windows = &w;
    job.num_windows = 1;
    spyre_engine_result r{};
    ASSERT_EQ(spyre_engine_run(eng, &job, &r), 0) << split_name(p) << ": " << r.message;
    spyre_engine_destroy(eng);
    if (cycles) *cycles = r.total_cycles;
    EXPECT_EQ(r.macs, (s.gated ? 2 : 1) * s.batch * s.M * s.N * s.K);
    const uint64_t es = isa::dtype_size(s.in), oes = isa::dtype_size(s.out);
    const uint64_t wes = weight_size(s);
    const DType wt = s.w_i8 ? DType::I8 : s.in;
    std::vector<float> row(s.N);
    for (uint64_t bi = 0; bi < s.batch; ++bi)
        for (uint64_t i = 0; i < s.M; ++i) {
            for (uint64_t j = 0; j < s.N; ++j) {
                // the normative sum over K, in K slices added in core order when split
                auto dot = [&](uint64_t bbase) {
                    const uint64_t kt = s.K / p.gk;
                    float total = 0.0f;
                    for (uint64_t q = 0; q < p.gk; ++q) {
                        float part = 0.0f;
                        for (uint64_t k = q * kt; k < (q + 1) * kt; ++k) {
                            const float av = test::load_elem(
                                s.in, &c.mem[c.a + bi * s.batch_a + i * s.lda + k * es]);
                            const uint64_t bo =
                                s.trans_b ? j * s.ldb + k * wes : k * s.ldb + j * wes;
                            part = std::fma(
                                av, test::load_elem(wt, &c.mem[bbase + bi * s.batch_b + bo]), part);
                        }
                        total = q ? total + part : part;
                    }
                    return total;
                };
                float acc = dot(c.b);
                if (s.has_scale)
                    acc *=
                        test::load_elem(s.scale_t, &c.mem[c.cos + j * isa::dtype_size(s.scale_t)]);
                if (s.has_bias)
                    acc +=
                        test::load_elem(s.bias_t, &c.mem[c.bias + j * isa::dtype_size(s.bias_t)]);
                if (s.has_act) acc = act(s.act, acc);
                if (s.gated) acc = acc * dot(c.b2);
                row[j] = acc;
            }
            for (uint64_t j = 0; j < s.N; ++j) {
                float val = row[j];
                if (s.rotary) {  // as the epilogue: fp32 products, one fma, then the rounding
                    const uint64_t d = s.rot_d, h = d / 2, jj = j % d, head = j - jj;
                    const uint64_t t0 = (i / s.rot_l) * s.rot_cb + (i % s.rot_l) * s.rot_cl +
                                        jj * isa::dtype_size(s.rot_t);
                    const float cv = test::load_elem(s.rot_t, &c.mem[c.cos + t0]);
                    const float sv = test::load_elem(s.rot_t, &c.mem[c.sin + t0]);
                    if (jj < h) {
                        const float t = row[head + jj + h] * sv, u = row[j] * cv;
                        val = u - t;
                    } else {
                        val = std::fma(row[j], cv, row[head + jj - h] * sv);
                    }
                }
                uint8_t want[4];
                test::store_elem(s.out, val, want);
                const uint8_t* got = &c.mem[c.c + bi * s.batch_c + i * s.ldc + j * oes];
                ASSERT_EQ(0, std::memcmp(got, want, oes))
                    << split_name(p) << " b" << bi << " (" << i << "," << j << ") got "
                    << test::load_elem(s.out, got) << " want " << test::load_elem(s.out, want);
            }
        }
}

spyre_engine_config default_cfg() {
    spyre_engine_config cfg;
    spyre_engine_config_default(&cfg);
    return cfg;
}

TEST(OpsMatmul, EverySplitOfASmallShapeIsExact) {
    MatmulShape s;
    s.M = 64, s.N = 256, s.K = 512;
    for (DType t : {DType::F16, DType::BF16, DType::F32, DType::I8}) {
        s.in = t;
        s.out = t == DType::I8 ? DType::I32 : t;  // int8: the I8 MM's int32 sums
        SCOPED_TRACE(int(t));
        MatmulPlanner pl(default_cfg());
        Case c = make_case(s, 1);
        const auto cands = pl.candidates(c.s);
        ASSERT_GT(cands.size(), 10u);
        int checked = 0;
        for (const auto& cand : cands) {
            const uint64_t n = matmul_cores(cand.split);
            if (n != 32 && n != 8 && n != 1) continue;  // a representative subset
            Case cc = c;
            run_and_check(cc, cand.split);
            ++checked;
        }
        EXPECT_GT(checked, t == DType::I8 ? 3 : 10);  // int8: no K splits, 128-column units
    }
}

TEST(OpsMatmul, TransposedBBiasActivationBatch) {
    MatmulShape s;
    s.M = 32, s.N = 128, s.K = 256;
    s.trans_b = true, s.has_bias = true, s.bias_t = DType::F32, s.has_act = true;
    s.batch = 3;
    for (isa::VUn f : {isa::VUn::RELU, isa::VUn::GELU, isa::VUn::SILU}) {
        s.act = f;
        MatmulPlanner pl(default_cfg());
        Case c = make_case(s, 2);
        for (const auto& cand : pl.candidates(c.s)) {
            if (matmul_cores(cand.split) != 32) continue;
            Case cc = c;
            run_and_check(cc, cand.split);
        }
    }
}

// Weight-only int8: B stored as int8 (the whole range) and converted in LX, per-column scales,
// a bias and an activation, plain and transposed B, batched; every 32- and 8-core split.
TEST(OpsMatmul, Int8WeightsWithScalesOnEverySplit) {
    for (DType t : {DType::BF16, DType::F16, DType::F32})
        for (bool trans : {true, false}) {
            MatmulShape s;
            s.M = 16, s.N = 256, s.K = 512;
            s.in = s.out = t;
            s.w_i8 = true, s.trans_b = trans;
            s.has_scale = true, s.scale_t = t;
            s.has_bias = trans, s.bias_t = DType::F32;
            s.has_act = trans, s.act = isa::VUn::SILU;
            s.batch = trans ? 1 : 2;
            SCOPED_TRACE(std::to_string(int(t)) + (trans ? " trans" : ""));
            MatmulPlanner pl(default_cfg());
            Case c = make_case(s, 4);
            int checked = 0;
            for (const auto& cand : pl.candidates(c.s)) {
                const uint64_t n = matmul_cores(cand.split);
                if (n != 32 && n != 8) continue;
                Case cc = c;
                run_and_check(cc, cand.split);
                ++checked;
            }
            EXPECT_GT(checked, 3);
        }
}

// SwiGLU's gate and up projections in one pass: silu(A Bg) * (A Bu), every 32-core split.
TEST(OpsMatmul, GatedProductOfTwoWeights) {
    MatmulShape s;
    s.M = 32, s.N = 128, s.K = 256;
    s.trans_b = true, s.has_act = true, s.act = isa::VUn::SILU, s.gated = true;
    for (DType t : {DType::F16, DType::BF16}) {
        s.in = s.out = t;
        MatmulPlanner pl(default_cfg());
        Case c = make_case(s, 4);
        int n = 0;
        for (const auto& cand : pl.candidates(c.s)) {
            if (matmul_cores(cand.split) != 32 && matmul_cores(cand.split) != 4) continue;
            Case cc = c;
            run_and_check(cc, cand.split);
            ++n;
        }
        EXPECT_GT(n, 5);
        Case cc = c;
        uint64_t real = 0;
        const PricedSplit best = pl.plan(c.s);
        run_and_check(cc, best.split, &real);
        EXPECT_EQ(best.cycles, real);
    }
}

// Rotary in the epilogue (spyre_op_linear_rotary): every split of 1, 4, 8 and 32 cores that
// holds whole heads (K splits with shared and unshared stores among them), fp32 and fp16
// tables, one sequence and three sequences with their own tables; pricing equals the real run.
TEST(OpsMatmul, RotaryEpilogueOnEverySplit) {
    struct R {
        uint64_t M, L, N, K, D;
        DType t, ct;
        bool per_sequence;
    } cases[] = {
        {48, 48, 256, 256, 64, DType::F16, DType::F32, false},
        {48, 16, 256, 256, 128, DType::BF16, DType::BF16, true},
        {24, 8, 128, 128, 32, DType::F32, DType::F32, true},
        // decode steps: one position of each of 32 sequences, shared and own tables
        {32, 1, 256, 256, 64, DType::F16, DType::F16, false},
        {32, 1, 256, 128, 128, DType::F16, DType::F32, true},
        // sub-tiles of whole sequences of 2 positions, or of parts of one
        {32, 2, 128, 128, 64, DType::BF16, DType::BF16, true},
    };
    for (const R& r : cases) {
        SCOPED_TRACE(::testing::Message() << "M " << r.M << " L " << r.L << " N " << r.N << " D "
                                          << r.D << " t " << int(r.t));
        MatmulShape s;
        s.M = r.M, s.N = r.N, s.K = r.K, s.in = s.out = r.t, s.trans_b = true;
        s.rotary = true, s.rot_d = r.D, s.rot_l = r.L, s.rot_t = r.ct;
        s.rot_cl = up(r.D * isa::dtype_size(r.ct));
        s.rot_cb = r.per_sequence ? r.L * s.rot_cl : 0;
        MatmulPlanner pl(default_cfg());
        Case c = make_case(s, 7);
        int n = 0, ksplit = 0;
        for (const auto& cand : pl.candidates(c.s)) {
            const uint64_t cores = matmul_cores(cand.split);
            if (cores != 32 && cores != 8 && cores != 4 && cores != 1) continue;
            EXPECT_EQ(cand.split.sn % r.D, 0u) << split_name(cand.split);
            Case cc = c;
            run_and_check(cc, cand.split);
            ++n, ksplit += cand.split.gk > 1;
        }
        EXPECT_GT(n, 5);
        EXPECT_GT(ksplit, 0);
        Case cc = c;
        uint64_t real = 0;
        const PricedSplit best = pl.plan(c.s);
        run_and_check(cc, best.split, &real);
        EXPECT_EQ(best.cycles, real);
    }
}

TEST(OpsMatmul, PricingEqualsTheRealRun) {
    MatmulShape s;
    s.M = 128, s.N = 512, s.K = 1024;
    MatmulPlanner pl(default_cfg());
    Case c = make_case(s, 3);
    int n = 0;
    for (const auto& cand : pl.candidates(c.s)) {
        if (matmul_cores(cand.split) != 32 || n++ > 6) continue;
        Case cc = c;
        uint64_t real = 0;
        run_and_check(cc, cand.split, &real);
        EXPECT_EQ(pl.price(c.s, cand.split).cycles, real) << split_name(cand.split);
    }
}

}  // namespace
}  // namespace spyre::ops

namespace spyre::ops {
namespace {

// The planner's split is within 5% of the best of all splits (each priced exactly) on every
// Granite-3.3-8B linear layer, prefill and decode.
TEST(OpsMatmulPlanner, WithinFivePercentOfTheExhaustiveBestOnGraniteShapes) {
    MatmulPlanner pl(default_cfg());
    struct L {
        uint64_t N, K;
    } layers[] = {{4096, 4096}, {1024, 4096}, {12800, 4096}, {4096, 12800}};
    for (uint64_t M : {512, 2048, 1, 4, 32})
        for (const auto& l : layers) {
            MatmulShape s;
            s.M = M, s.N = l.N, s.K = l.K;
            s.trans_b = true;
            s.lda = s.ldb = l.K * 2, s.ldc = l.N * 2;
            const PricedSplit chosen = pl.plan(s);
            uint64_t best = UINT64_MAX;
            std::string best_name;
            for (const auto& c : pl.candidates(s)) {
                const uint64_t cy = pl.price(s, c.split).cycles;
                if (cy < best) best = cy, best_name = split_name(c.split);
            }
            EXPECT_LE(double(chosen.cycles), 1.05 * double(best))
                << M << "x" << l.N << "x" << l.K << ": chose " << split_name(chosen.split)
                << ", best " << best_name;
            // and it always beats the naive pure-M split without operand sharing
            EXPECT_LE(chosen.cycles, pl.naive(s).cycles);
        }
}

}  // namespace
}  // namespace spyre::ops
