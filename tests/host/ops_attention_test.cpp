// SPDX-License-Identifier: MIT
// The op library's attention program on the engine against a double-precision reference:
// GQA groups, causal prefill, decode over a KV cache, key counts that are not a block multiple,
// fp16/bf16/fp32, every candidate block size; the planner's choice is priced exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/attention_program.hpp"
#include "ops_test_util.hpp"
#include "spyre/numerics.hpp"

namespace spyre::ops {
namespace {

using isa::DType;

struct AttnRun {
    std::vector<uint8_t> mem;
    uint64_t q, k, v, o;
    spyre_engine_result res{};
};

AttnRun run(const AttentionShape& s, const AttentionPlan& p, uint32_t seed) {
    const uint64_t es = isa::dtype_size(s.t);
    AttnRun r;
    r.q = 0, r.k = attention_tensor_bytes(s, 0), r.v = r.k + attention_tensor_bytes(s, 1);
    r.o = r.v + attention_tensor_bytes(s, 2);
    r.mem.assign(r.o + attention_tensor_bytes(s, 3), 0);
    const uint64_t nq = r.k / es, nkv = (r.v - r.k) / es;
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0, 1);
    for (uint64_t i = 0; i < nq; ++i) test::store_elem(s.t, d(rng), &r.mem[r.q + i * es]);
    for (uint64_t i = 0; i < nkv; ++i) test::store_elem(s.t, d(rng), &r.mem[r.k + i * es]);
    for (uint64_t i = 0; i < (r.o - r.v) / es; ++i)
        test::store_elem(s.t, d(rng), &r.mem[r.v + i * es]);
    spyre_engine_config cfg = default_engine_config();
    cfg.num_threads = 2;
    spyre_engine* eng = spyre_engine_create(&cfg);
    const auto prog = build_attention(s, p);
    const uint64_t args[4] = {r.q, r.k, r.v, r.o};
    const spyre_engine_window w{0, r.mem.size()};
    spyre_engine_job job{};
    job.program = prog.data();
    job.program_size = prog.size();
    job.args = args;
    job.num_args = 4;
    job.num_cores = p.cores;
    job.mem = r.mem.data();
    job.mem_size = r.mem.size();
    job.windows = &w;
    job.num_windows = 1;
    EXPECT_EQ(spyre_engine_run(eng, &job, &r.res), 0) << r.res.message;
    spyre_engine_destroy(eng);
    return r;
}

// Compares every output element with softmax(scale Q K^T + mask) V in double; returns the
// worst error.
double check(const AttentionShape& shape, const AttnRun& r) {
    const AttentionShape s = shape.resolved();
    const uint64_t es = isa::dtype_size(s.t), g = s.Hq / s.Hkv;
    const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(s.D));
    const int64_t off = int64_t(s.Lk) - int64_t(s.Lq);
    const double tol = s.t == DType::F32 ? 2e-5 : s.t == DType::F16 ? 4e-3 : 3e-2;
    double worst = 0;
    std::vector<double> p(s.Lk);
    for (uint64_t b = 0; b < s.B; ++b)
        for (uint64_t h = 0; h < s.Hq; ++h) {
            const uint64_t kvh = h / g;
            auto Q = [&](uint64_t i, uint64_t d) {
                return test::load_elem(
                    s.t, &r.mem[r.q + b * s.q_st[0] + h * s.q_st[1] + i * s.q_st[2] + d * es]);
            };
            auto K = [&](uint64_t j, uint64_t d) {
                return test::load_elem(
                    s.t, &r.mem[r.k + b * s.k_st[0] + kvh * s.k_st[1] + j * s.k_st[2] + d * es]);
            };
            auto V = [&](uint64_t j, uint64_t d) {
                return test::load_elem(
                    s.t, &r.mem[r.v + b * s.v_st[0] + kvh * s.v_st[1] + j * s.v_st[2] + d * es]);
            };
            for (uint64_t i = 0; i < s.Lq; ++i) {
                double mx = -INFINITY, sum = 0;
                for (uint64_t j = 0; j < s.Lk; ++j) {
                    const bool keep = !s.causal || int64_t(j) <= int64_t(i) + off;
                    double dot = 0;
                    for (uint64_t d = 0; d < s.D; ++d) dot += double(Q(i, d)) * K(j, d);
                    p[j] = keep ? dot * scale : -INFINITY;
                    mx = std::max(mx, p[j]);
                }
                for (uint64_t j = 0; j < s.Lk; ++j) sum += p[j] = std::exp(p[j] - mx);
                for (uint64_t d = 0; d < s.D; ++d) {
                    double o = 0;
                    for (uint64_t j = 0; j < s.Lk; ++j) o += p[j] * V(j, d);
                    o /= sum;
                    const float got = test::load_elem(
                        s.t, &r.mem[r.o + b * s.o_st[0] + h * s.o_st[1] + i * s.o_st[2] + d * es]);
                    const double err = std::fabs(got - o);
                    worst = std::max(worst, err);
                    EXPECT_LE(err, tol * (1 + std::fabs(o)))
                        << "b" << b << " h" << h << " q" << i << " d" << d << ": got " << got
                        << " want " << o;
                    if (err > tol * (1 + std::fabs(o))) return worst;
                }
            }
        }
    return worst;
}

struct Case {
    uint64_t B, Hq, Hkv, Lq, Lk, D;
    DType t;
    bool causal;
};

TEST(OpsAttention, MatchesReferenceForEveryBlockSize) {
    const Case cases[] = {
        {1, 4, 2, 8, 100, 64, DType::F16, false},   // GQA 2, key tail
        {1, 2, 2, 64, 64, 64, DType::F16, true},    // causal prefill
        {2, 4, 1, 1, 200, 64, DType::BF16, true},   // decode over a 199-token cache, MQA
        {1, 2, 1, 16, 48, 32, DType::F32, true},    // fp32, cache of 32 + 16 new tokens
        {1, 8, 2, 4, 129, 128, DType::F16, false},  // head dim 128
    };
    const Pricer pricer(default_engine_config());
    for (const Case& c : cases) {
        AttentionShape s;
        s.B = c.B, s.Hq = c.Hq, s.Hkv = c.Hkv, s.Lq = c.Lq, s.Lk = c.Lk, s.D = c.D;
        s.t = c.t, s.causal = c.causal;
        SCOPED_TRACE(::testing::Message()
                     << "B" << c.B << " H" << c.Hq << "/" << c.Hkv << " L" << c.Lq << "x" << c.Lk
                     << " D" << c.D << " t" << int(c.t) << (c.causal ? " causal" : ""));
        int n = 0;
        for (uint64_t bq : {1, 2, 4, 8, 16, 64})
            for (uint64_t bk : {64, 128}) {
                if (c.Lq % bq) continue;
                AttentionPlan p;
                p.bq = bq, p.bk = bk, p.cores = 32;
                if (attention_lx_bytes(s, bq, bk) > pricer.lx_budget()) continue;
                AttnRun r = run(s, p, 7);
                check(s, r);
                ++n;
                if (HasFailure()) return;
            }
        EXPECT_GE(n, 2);
        const AttentionPlan best = plan_attention(pricer, s, 32);
        AttnRun r = run(s, best, 9);
        check(s, r);
        EXPECT_EQ(best.cycles, r.res.total_cycles);  // the plan's price is the real run's
    }
}

// Q, K, V and out as torch's [B, L, H, D] -> [B, H, L, D] transposed views; K/V in a cache
// with room for more tokens than are used.
TEST(OpsAttention, StridedHeadsAndAKvCacheWithSpareRoom) {
    const Pricer pricer(default_engine_config());
    AttentionShape s;
    s.B = 2, s.Hq = 4, s.Hkv = 2, s.Lq = 4, s.Lk = 70, s.D = 64, s.causal = true;
    const uint64_t row = 128;
    const uint64_t cap = 96;  // cache capacity per head
    s.q_st[0] = s.Lq * s.Hq * row, s.q_st[1] = row, s.q_st[2] = s.Hq * row;
    s.o_st[0] = s.Lq * s.Hq * row, s.o_st[1] = row, s.o_st[2] = s.Hq * row;
    s.k_st[0] = s.Hkv * cap * row, s.k_st[1] = cap * row, s.k_st[2] = row;
    s.v_st[0] = cap * s.Hkv * row, s.v_st[1] = row, s.v_st[2] = s.Hkv * row;
    const AttentionPlan p = plan_attention(pricer, s, 32);
    AttnRun r = run(s, p, 11);
    check(s, r);
}

TEST(OpsAttention, PlannerRefusesWhatItCannotLayOut) {
    const Pricer pricer(default_engine_config());
    AttentionShape s;
    s.Hq = 3, s.Hkv = 2;
    EXPECT_THROW(plan_attention(pricer, s, 32), std::invalid_argument);
    s.Hq = 2, s.D = 50;  // 100-byte head rows
    EXPECT_THROW(plan_attention(pricer, s, 32), std::invalid_argument);
    s.D = 64, s.Lq = 2, s.q_st[0] = 256, s.q_st[1] = 256, s.q_st[2] = 64;  // misaligned rows
    EXPECT_THROW(plan_attention(pricer, s, 32), std::invalid_argument);
}

}  // namespace
}  // namespace spyre::ops
