// SPDX-License-Identifier: MIT
// The op library's attention program on the engine against a double-precision reference:
// GQA groups, causal prefill, decode over a KV cache, key counts that are not a block multiple,
// fp16/bf16/fp32, additive and boolean masks broadcast over batch, heads and queries, every
// candidate block size; the planner's choice is priced exactly.
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
    uint64_t q, k, v, o, m;
    spyre_engine_result res{};
};

AttnRun run(const AttentionShape& s, const AttentionPlan& p, uint32_t seed) {
    const uint64_t es = isa::dtype_size(s.t);
    AttnRun r;
    r.q = 0, r.k = attention_tensor_bytes(s, 0), r.v = r.k + attention_tensor_bytes(s, 1);
    r.o = r.v + attention_tensor_bytes(s, 2);
    r.m = r.o + attention_tensor_bytes(s, 3);
    r.mem.assign(r.m + attention_tensor_bytes(s, 4), 0);
    const uint64_t nq = r.k / es, nkv = (r.v - r.k) / es;
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0, 1);
    for (uint64_t i = 0; i < nq; ++i) test::store_elem(s.t, d(rng), &r.mem[r.q + i * es]);
    for (uint64_t i = 0; i < nkv; ++i) test::store_elem(s.t, d(rng), &r.mem[r.k + i * es]);
    for (uint64_t i = 0; i < (r.o - r.v) / es; ++i)
        test::store_elem(s.t, d(rng), &r.mem[r.v + i * es]);
    // masks: additive values with some -inf, or booleans keeping about 3 keys in 4
    std::uniform_int_distribution<int> pick(0, 7);
    const uint64_t mes = isa::dtype_size(s.mask_t);
    for (uint64_t i = 0; i < attention_tensor_bytes(s, 4) / mes; ++i) {
        const int c = pick(rng);
        const float v = s.mask == AttentionShape::Mask::KEEP ? float(c > 1 ? c : 0)
                        : c == 0                             ? -INFINITY
                                                             : 2 * d(rng);
        test::store_elem(s.mask_t, v, &r.mem[r.m + i * mes]);
    }
    spyre_engine_config cfg = default_engine_config();
    cfg.num_threads = 2;
    spyre_engine* eng = spyre_engine_create(&cfg);
    const auto prog = build_attention(s, p);
    std::vector<uint64_t> args = {r.q, r.k, r.v, r.o, r.m, 0};
    if (s.runtime_lk)  // the key length and K/V strides as launch arguments 6..10
        for (uint64_t a : attention_length_args(s)) args.push_back(a);
    const spyre_engine_window w{0, r.mem.size()};
    spyre_engine_job job{};
    job.program = prog.data();
    job.program_size = prog.size();
    job.args = args.data();
    job.num_args = uint32_t(args.size());
    job.num_cores = p.cores;
    job.mem = r.mem.data();
    job.mem_size = r.mem.size();
    job.windows = &w;
    job.num_windows = 1;
    EXPECT_EQ(spyre_engine_run(eng, &job, &r.res), 0) << r.res.message;
    spyre_engine_destroy(eng);
    return r;
}

// Compares every output element with softmax(scale Q K^T + mask) V in double (a query that
// sees no key: NaN); returns the worst error.
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
                    bool keep = !s.causal || int64_t(j) <= int64_t(i) + off;
                    double dot = 0;
                    for (uint64_t d = 0; d < s.D; ++d) dot += double(Q(i, d)) * K(j, d);
                    dot *= scale;
                    if (s.mask != AttentionShape::Mask::NONE) {
                        const float m = test::load_elem(
                            s.mask_t, &r.mem[r.m + b * s.m_st[0] + h * s.m_st[1] + i * s.m_st[2] +
                                             j * isa::dtype_size(s.mask_t)]);
                        if (s.mask == AttentionShape::Mask::KEEP)
                            keep = keep && m != 0;
                        else
                            dot += m;
                    }
                    p[j] = keep ? dot : -INFINITY;
                    mx = std::max(mx, p[j]);
                }
                for (uint64_t j = 0; j < s.Lk; ++j) sum += p[j] = std::exp(p[j] - mx);
                if (mx == -INFINITY) {  // nothing to attend to
                    for (uint64_t d = 0; d < s.D; ++d) {
                        const float got = test::load_elem(
                            s.t,
                            &r.mem[r.o + b * s.o_st[0] + h * s.o_st[1] + i * s.o_st[2] + d * es]);
                        EXPECT_TRUE(std::isnan(got)) << "b" << b << " h" << h << " q" << i;
                    }
                    continue;
                }
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
            for (uint64_t bk : {64, 128})
                for (bool prefetch : {false, true}) {  // on 3 cores: several units per core
                    if (c.Lq % bq) continue;
                    AttentionPlan p;
                    p.bq = bq, p.bk = bk, p.cores = prefetch ? 3 : 32, p.prefetch_q = prefetch;
                    if (attention_lx_bytes(s, bq, bk, prefetch) > pricer.lx_budget()) continue;
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

// Masks of every broadcast form with causal or not, odd query and key counts, GQA, every dtype;
// every block size that can lay the mask out, and the planner's choice priced exactly.
TEST(OpsAttention, AdditiveAndBooleanMasksBroadcastOverBatchHeadsAndQueries) {
    using M = AttentionShape::Mask;
    const Pricer pricer(default_engine_config());
    struct MCase {
        uint64_t B, Hq, Hkv, Lq, Lk, D;
        DType t;
        bool causal;
        M mask;
        DType mask_t;
        bool batch, heads, rows;  // the mask has these dims (else they broadcast)
    };
    const MCase cases[] = {
        {2, 4, 2, 7, 37, 64, DType::F16, false, M::ADD, DType::F16, false, false, true},  // [L,S]
        {2, 4, 2, 7, 133, 64, DType::F16, true, M::ADD, DType::F32, true, false, true},
        {2, 4, 1, 5, 70, 64, DType::BF16, false, M::ADD, DType::BF16, true, true, true},
        {1, 2, 2, 1, 301, 32, DType::F32, true, M::ADD, DType::F32, true, true, true},  // decode
        {2, 4, 2, 9, 37, 64, DType::F16, true, M::KEEP, DType::I8, false, false, true},
        {2, 2, 1, 3, 200, 64, DType::BF16, false, M::KEEP, DType::I8, true, false, true},
        {3, 4, 4, 6, 129, 64, DType::F16, false, M::KEEP, DType::I8, true, true, true},
        {2, 4, 2, 5, 77, 64, DType::F16, false, M::KEEP, DType::I8, true, false, false},  // pad
        {2, 4, 2, 4, 64, 64, DType::F16, true, M::ADD, DType::F16, false, true, false},
    };
    for (const MCase& c : cases) {
        AttentionShape s;
        s.B = c.B, s.Hq = c.Hq, s.Hkv = c.Hkv, s.Lq = c.Lq, s.Lk = c.Lk, s.D = c.D;
        s.t = c.t, s.causal = c.causal, s.mask = c.mask, s.mask_t = c.mask_t;
        const uint64_t row = test::up128(c.Lk * isa::dtype_size(c.mask_t));
        s.m_st[2] = c.rows ? row : 0;
        s.m_st[1] = c.heads ? row * (c.rows ? c.Lq : 1) : 0;
        s.m_st[0] = c.batch ? row * (c.rows ? c.Lq : 1) * (c.heads ? c.Hq : 1) : 0;
        SCOPED_TRACE(::testing::Message()
                     << "B" << c.B << " H" << c.Hq << "/" << c.Hkv << " L" << c.Lq << "x" << c.Lk
                     << " t" << int(c.t) << (c.causal ? " causal" : "") << " mask " << int(c.mask)
                     << "/" << int(c.mask_t) << " " << c.batch << c.heads << c.rows);
        int n = 0;
        for (uint64_t bq : {1, 2, 4, 8})
            for (uint64_t bk : {64, 128, 256})
                for (bool prefetch : {false, true}) {
                    if (c.Lq % bq || (bk * isa::dtype_size(c.mask_t)) % 128) continue;
                    AttentionPlan p;
                    p.bq = bq, p.bk = bk, p.cores = prefetch ? 5 : 32, p.prefetch_q = prefetch;
                    if (attention_lx_bytes(s, bq, bk, prefetch) > pricer.lx_budget()) continue;
                    AttnRun r = run(s, p, 5 + n);
                    check(s, r);
                    ++n;
                    if (HasFailure()) return;
                }
        EXPECT_GE(n, 2);
        const AttentionPlan best = plan_attention(pricer, s, 32);
        EXPECT_EQ((best.bk * isa::dtype_size(c.mask_t)) % 128, 0u);
        AttnRun r = run(s, best, 3);
        check(s, r);
        EXPECT_EQ(best.cycles, r.res.total_cycles);
    }
}

// The mask in the program is what the reference sees: the same run without it differs.
TEST(OpsAttention, TheMaskChangesTheResult) {
    const Pricer pricer(default_engine_config());
    AttentionShape s;
    s.B = 1, s.Hq = 2, s.Hkv = 2, s.Lq = 4, s.Lk = 40, s.D = 64;
    s.mask = AttentionShape::Mask::KEEP, s.mask_t = DType::I8;
    s.m_st[2] = 128;
    AttentionPlan p = plan_attention(pricer, s, 32);
    AttnRun masked = run(s, p, 1);
    check(s, masked);
    AttentionShape plain = s;
    plain.mask = AttentionShape::Mask::NONE;
    std::fill(plain.m_st, plain.m_st + 3, 0);
    AttnRun r = run(plain, p, 1);  // same seed: same q, k, v
    EXPECT_NE(0, std::memcmp(&masked.mem[masked.o], &r.mem[r.o], r.m - r.o));
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
    s.q_st[0] = s.q_st[1] = s.q_st[2] = 0;
    s.mask = AttentionShape::Mask::KEEP, s.mask_t = DType::I8, s.m_st[2] = 200;  // mask rows
    EXPECT_THROW(plan_attention(pricer, s, 32), std::invalid_argument);
    AttentionPlan p;
    p.bk = 64;  // 64 boolean mask bytes per key block: not a whole stick
    s.m_st[2] = 128;
    EXPECT_THROW(build_attention(s, p), std::invalid_argument);
}

// A decode program with the key length as a launch argument (runtime_lk): one image for every
// length, and at each length (1 block, a short tail, whole blocks, many blocks; GQA, dense and
// KV-cache strides, fp16 and fp32, an additive [Lk] mask) the same output bytes as the program
// built for that length with the same blocks, and its modeled cycles within 0.5%.
TEST(OpsAttention, KeyLengthAsLaunchArgumentMatchesPerLengthProgram) {
    const Pricer pricer(default_engine_config());
    for (DType t : {DType::F16, DType::F32})
        for (bool cache : {false, true})
            for (bool masked : {false, true}) {
                AttentionShape s;
                s.Hq = 8, s.Hkv = 2, s.Lq = 1, s.D = 64, s.t = t;
                const uint64_t row = 64 * isa::dtype_size(t), Lmax = 300;
                if (cache)  // [1, Hkv, Lmax, D] read up to Lk
                    s.k_st[0] = s.v_st[0] = 2 * Lmax * row, s.k_st[1] = s.v_st[1] = Lmax * row,
                    s.k_st[2] = s.v_st[2] = row;
                if (masked) s.mask = AttentionShape::Mask::ADD, s.mask_t = DType::F32;
                AttentionPlan p;
                p.bq = 1, p.bk = 128, p.cores = 2;
                AttentionShape rt = s;
                rt.runtime_lk = true, rt.Lk = 256;
                const auto image = build_attention(rt, p);
                for (uint64_t lk : {1, 5, 127, 128, 129, 256, 300}) {
                    SCOPED_TRACE(::testing::Message()
                                 << "Lk " << lk << " type " << int(t)
                                 << (cache ? " cache" : " dense") << (masked ? " masked" : ""));
                    s.Lk = rt.Lk = lk;
                    EXPECT_EQ(image, build_attention(rt, p));
                    const AttnRun own = run(s, p, 7), arg = run(rt, p, 7);
                    check(s, arg);
                    ASSERT_EQ(own.mem.size(), arg.mem.size());
                    EXPECT_EQ(0, std::memcmp(own.mem.data() + own.o, arg.mem.data() + arg.o,
                                             attention_tensor_bytes(s, 3)));
                    AttentionPlan a = p, b = p;
                    price_attention(pricer, s, a);
                    price_attention(pricer, rt, b);
                    // a few more scalar instructions (the length from its argument, one
                    // more per key block for the tail test): at most 0.5%
                    EXPECT_GE(b.cycles, a.cycles);
                    EXPECT_LE(b.cycles, a.cycles + a.cycles / 200);
                }
            }
    AttentionShape c;
    c.runtime_lk = c.causal = true;
    AttentionPlan p;
    EXPECT_THROW(build_attention(c, p), std::invalid_argument);  // causal needs Lk when built
}

// Candidates past the engine's budget of timed operations for one job (small blocks over long
// sequences) are skipped, not fatal: a long causal prefill plans with larger blocks (a shape
// past the budget with every block size is refused as too much work for one launch: NOT_SUPPORTED,
// and torch_spyre takes the math path; not run here, its candidates take ~30 s to price).
TEST(OpsAttention, PlannerSkipsBlocksThatAreTooMuchWorkForOneJob) {
    const Pricer pricer(default_engine_config());
    AttentionShape s;
    s.Hq = s.Hkv = 8, s.Lq = s.Lk = 32768, s.D = 128, s.causal = true;
    const AttentionPlan p = plan_attention(pricer, s, 32);
    EXPECT_GT(p.cycles, 0u);
    EXPECT_GE(p.bq * p.bk, 128u * 128u) << p.bq << " x " << p.bk;
}

}  // namespace
}  // namespace spyre::ops
