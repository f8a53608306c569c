// SPDX-License-Identifier: MIT
// The attention forward's logsumexp and the flash-style backward (dQ pass, then dK/dV pass) on
// the engine against a double-precision reference: GQA 4:1, causal (also over a KV cache), query
// and key counts that are not stick multiples, head dims 64 and 128, additive and boolean masks
// broadcast over batch and heads, fp32/fp16/bf16; the planner's choice priced exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/attention_backward_program.hpp"
#include "ops_test_util.hpp"

namespace spyre::ops {
namespace {

using isa::DType;
using M = AttentionShape::Mask;

struct Case {
    uint64_t B, Hq, Hkv, Lq, Lk, D;
    DType t;
    bool causal;
    M mask;
    DType mask_t;
    bool mask_batch, mask_heads;  // the mask has these dims (else they broadcast); rows always
};

struct Mem {
    std::vector<uint8_t> bytes;
    std::vector<uint64_t> at;  // launch arguments kGradQ .. kGradDv
};

// Measured worst errors (relative to the largest gradient): fp32 5e-7, fp16 5e-4, bf16 4e-3.
double tol_of(DType t) { return t == DType::F32 ? 1e-5 : t == DType::F16 ? 3e-3 : 2e-2; }

AttentionGradShape shape_of(const Case& c) {
    AttentionGradShape g;
    AttentionShape& s = g.a;
    s.B = c.B, s.Hq = c.Hq, s.Hkv = c.Hkv, s.Lq = c.Lq, s.Lk = c.Lk, s.D = c.D;
    s.t = c.t, s.causal = c.causal, s.mask = c.mask, s.mask_t = c.mask_t, s.lse = true;
    if (c.mask != M::NONE) {
        const uint64_t row = test::up128(c.Lk * isa::dtype_size(c.mask_t));
        s.m_st[2] = row;
        s.m_st[1] = c.mask_heads ? row * c.Lq : 0;
        s.m_st[0] = c.mask_batch ? row * c.Lq * (c.mask_heads ? c.Hq : 1) : 0;
    }
    return g.resolved();
}

Mem fill(const AttentionGradShape& g, uint32_t seed) {
    const AttentionShape& s = g.a;
    Mem m;
    uint64_t at = 0;
    for (int i = 0; i < kGradArgs; ++i) m.at.push_back(at), at += attention_grad_tensor_bytes(g, i);
    m.bytes.assign(at, 0);
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0, 1);
    const uint64_t es = isa::dtype_size(s.t);
    for (int i : {kGradQ, kGradK, kGradV, kGradDout})
        for (uint64_t e = 0; e < attention_grad_tensor_bytes(g, i) / es; ++e)
            test::store_elem(s.t, d(rng), &m.bytes[m.at[i] + e * es]);
    // masks: additive values with some -inf, or booleans keeping about 3 keys in 4; key 0
    // always kept so that no query sees nothing (its gradients would be NaN)
    std::uniform_int_distribution<int> pick(0, 7);
    const uint64_t mes = isa::dtype_size(s.mask_t), row = s.m_st[2];
    for (uint64_t e = 0; s.mask != M::NONE && e < attention_grad_tensor_bytes(g, kGradMask) / mes;
         ++e) {
        const int c = (e * mes) % row == 0 ? 7 : pick(rng);
        const float v = s.mask == M::KEEP ? float(c > 1 ? c : 0) : c == 0 ? -INFINITY : 2 * d(rng);
        test::store_elem(s.mask_t, v, &m.bytes[m.at[kGradMask] + e * mes]);
    }
    return m;
}

test::RunResult run(const std::vector<uint8_t>& img, uint32_t cores, Mem& m) {
    test::RunResult r = test::run_image(img, cores, m.at, m.bytes);
    EXPECT_EQ(r.error, 0) << r.message;
    return r;
}

// Reference gradients in double from the inputs; compares lse, dQ, dK, dV (worst error relative
// to the tensor's largest magnitude).
void check(const AttentionGradShape& g, const Mem& m) {
    const AttentionShape& s = g.a;
    const uint64_t es = isa::dtype_size(s.t), G = s.Hq / s.Hkv;
    const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(s.D));
    const int64_t off = int64_t(s.Lk) - int64_t(s.Lq);
    auto el = [&](int which, const uint64_t* st, uint64_t b, uint64_t h, uint64_t i,
                  uint64_t d) -> double {
        return test::load_elem(s.t,
                               &m.bytes[m.at[which] + b * st[0] + h * st[1] + i * st[2] + d * es]);
    };
    std::vector<double> dq(s.B * s.Hq * s.Lq * s.D), dk(s.B * s.Hkv * s.Lk * s.D),
        dv(s.B * s.Hkv * s.Lk * s.D), lse(s.B * s.Hq * s.Lq);
    std::vector<double> P(s.Lq * s.Lk), dS(s.Lq * s.Lk);
    for (uint64_t b = 0; b < s.B; ++b)
        for (uint64_t h = 0; h < s.Hq; ++h) {
            const uint64_t kh = h / G;
            for (uint64_t i = 0; i < s.Lq; ++i) {
                double mx = -INFINITY;
                for (uint64_t j = 0; j < s.Lk; ++j) {
                    bool keep = !s.causal || int64_t(j) <= int64_t(i) + off;
                    double dot = 0;
                    for (uint64_t d = 0; d < s.D; ++d)
                        dot += el(kGradQ, s.q_st, b, h, i, d) * el(kGradK, s.k_st, b, kh, j, d);
                    dot *= scale;
                    if (s.mask != M::NONE) {
                        const double mv = test::load_elem(
                            s.mask_t, &m.bytes[m.at[kGradMask] + b * s.m_st[0] + h * s.m_st[1] +
                                               i * s.m_st[2] + j * isa::dtype_size(s.mask_t)]);
                        if (s.mask == M::KEEP)
                            keep = keep && mv != 0;
                        else
                            dot += mv;
                    }
                    P[i * s.Lk + j] = keep ? dot : -INFINITY;
                    mx = std::max(mx, P[i * s.Lk + j]);
                }
                double sum = 0;
                for (uint64_t j = 0; j < s.Lk; ++j) sum += std::exp(P[i * s.Lk + j] - mx);
                const double l = mx + std::log(sum);
                lse[(b * s.Hq + h) * s.Lq + i] = l;
                for (uint64_t j = 0; j < s.Lk; ++j) P[i * s.Lk + j] = std::exp(P[i * s.Lk + j] - l);
                // dP = dO V^T, delta = rowsum(P dP), dS = P (dP - delta)
                double delta = 0;
                for (uint64_t j = 0; j < s.Lk; ++j) {
                    double dp = 0;
                    for (uint64_t d = 0; d < s.D; ++d)
                        dp += el(kGradDout, g.do_st, b, h, i, d) * el(kGradV, s.v_st, b, kh, j, d);
                    dS[i * s.Lk + j] = dp;
                    delta += P[i * s.Lk + j] * dp;
                }
                for (uint64_t j = 0; j < s.Lk; ++j)
                    dS[i * s.Lk + j] = P[i * s.Lk + j] * (dS[i * s.Lk + j] - delta);
            }
            for (uint64_t i = 0; i < s.Lq; ++i)
                for (uint64_t j = 0; j < s.Lk; ++j)
                    for (uint64_t d = 0; d < s.D; ++d) {
                        dq[((b * s.Hq + h) * s.Lq + i) * s.D + d] +=
                            scale * dS[i * s.Lk + j] * el(kGradK, s.k_st, b, kh, j, d);
                        dk[((b * s.Hkv + kh) * s.Lk + j) * s.D + d] +=
                            scale * dS[i * s.Lk + j] * el(kGradQ, s.q_st, b, h, i, d);
                        dv[((b * s.Hkv + kh) * s.Lk + j) * s.D + d] +=
                            P[i * s.Lk + j] * el(kGradDout, g.do_st, b, h, i, d);
                    }
        }
    // lse: fp32 values
    double worst = 0;
    for (uint64_t b = 0; b < s.B; ++b)
        for (uint64_t h = 0; h < s.Hq; ++h)
            for (uint64_t i = 0; i < s.Lq; ++i) {
                const double want = lse[(b * s.Hq + h) * s.Lq + i];
                const double got = test::load_elem(
                    DType::F32, &m.bytes[m.at[kGradLse] + b * s.l_st[0] + h * s.l_st[1] + i * 4]);
                worst = std::max(worst, std::fabs(got - want) / (1 + std::fabs(want)));
            }
    EXPECT_LE(worst, tol_of(s.t) / 4) << "lse";
    auto compare = [&](const char* name, int which, const uint64_t* st, uint64_t H, uint64_t L,
                       const std::vector<double>& ref) {
        double big = 0, err = 0;
        for (double x : ref) big = std::max(big, std::fabs(x));
        for (uint64_t b = 0; b < s.B; ++b)
            for (uint64_t h = 0; h < H; ++h)
                for (uint64_t i = 0; i < L; ++i)
                    for (uint64_t d = 0; d < s.D; ++d) {
                        const double got = el(which, st, b, h, i, d);
                        const double e = std::fabs(got - ref[((b * H + h) * L + i) * s.D + d]);
                        err = std::isnan(got) ? INFINITY : std::max(err, e);
                    }
        EXPECT_GT(big, 0.0) << name;
        EXPECT_LE(err, tol_of(s.t) * big) << name << ": worst error " << err << " of " << big;
    };
    compare("dq", kGradDq, g.dq_st, s.Hq, s.Lq, dq);
    compare("dk", kGradDk, g.dk_st, s.Hkv, s.Lk, dk);
    compare("dv", kGradDv, g.dv_st, s.Hkv, s.Lk, dv);
}

const Case kCases[] = {
    {1, 4, 1, 100, 100, 64, DType::F16, true, M::NONE, DType::F32, false, false},   // GQA 4:1
    {2, 2, 2, 77, 77, 128, DType::BF16, false, M::ADD, DType::F32, false, false},   // [L, S] bias
    {1, 4, 1, 64, 64, 64, DType::F32, true, M::KEEP, DType::I8, false, true},       // bool, heads
    {1, 2, 2, 96, 160, 128, DType::F16, true, M::NONE, DType::F32, false, false},   // KV cache
    {2, 4, 2, 40, 40, 64, DType::F16, false, M::ADD, DType::F16, true, false},      // batch bias
    {1, 2, 1, 256, 256, 64, DType::BF16, true, M::NONE, DType::F32, false, false},  // query blocks
};

TEST(OpsAttentionBackward, PlannedPassesMatchTheReference) {
    const Pricer pricer(default_engine_config());
    for (const Case& c : kCases) {
        const AttentionGradShape g = shape_of(c);
        SCOPED_TRACE(::testing::Message()
                     << "B" << c.B << " H" << c.Hq << "/" << c.Hkv << " L" << c.Lq << "x" << c.Lk
                     << " D" << c.D << " " << test::dtype_name(c.t) << (c.causal ? " causal" : "")
                     << " mask " << int(c.mask));
        Mem m = fill(g, 3);
        const AttentionPlan fwd = plan_attention(pricer, g.a, 32);
        run(build_attention(g.a, fwd), fwd.cores, m);
        const AttentionGradPlan p = plan_attention_grad(pricer, g, 32);
        const auto rq = run(build_attention_dq(g, p), p.dq_cores, m);
        const auto rkv = run(build_attention_dkv(g, p), p.dkv_cores, m);
        EXPECT_EQ(rq.stats.total_cycles, p.dq_cycles);  // the plan's price is the real run's
        EXPECT_EQ(rkv.stats.total_cycles, p.dkv_cycles);
        check(g, m);
        if (HasFailure()) return;
    }
}

// Every block size of both passes on a GQA shape with a key tail, few cores (several units each).
TEST(OpsAttentionBackward, EveryBlockSize) {
    const Pricer pricer(default_engine_config());
    const Case c{1, 4, 2, 64, 100, 64, DType::F16, true, M::ADD, DType::F32, false, true};
    const AttentionGradShape g = shape_of(c);
    Mem m0 = fill(g, 5);
    const AttentionPlan fwd = plan_attention(pricer, g.a, 32);
    run(build_attention(g.a, fwd), fwd.cores, m0);
    int n = 0;
    for (uint64_t bq : {32, 64})
        for (uint64_t bk : {32, 64, 128, 256}) {
            if (!attention_dq_lx_bytes(g, bq, bk) || !attention_dkv_lx_bytes(g, bq, bk)) continue;
            SCOPED_TRACE(::testing::Message() << "bq " << bq << " bk " << bk);
            Mem m = m0;
            AttentionGradPlan p;
            p.bq = p.kq = bq, p.bk = p.kk = bk, p.dq_cores = 3, p.dkv_cores = 5;
            run(build_attention_dq(g, p), p.dq_cores, m);
            run(build_attention_dkv(g, p), p.dkv_cores, m);
            check(g, m);
            ++n;
            if (HasFailure()) return;
        }
    EXPECT_GE(n, 7);
}

}  // namespace
}  // namespace spyre::ops
