// SPDX-License-Identifier: MIT
// 'make bench' op-library figures from the cycle model (deterministic, no host timing): every
// case against the naive plan on the same model, against the modeled peak and the roofline, and
// the planner's split against the exhaustive best of all splits. Writes build/bench/model.json:
// one object per case (its modeled times, and for the roofline its useful FLOPs and the bytes it
// must move between DDR and the cores at least), then one object "machine": the roofs, per dtype,
// from the engine's default configuration (tools/bench/report.py draws them).
//   spyre-ops-bench [output.json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <format>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "ops/attention_backward_program.hpp"
#include "ops/attention_program.hpp"
#include "ops/column_program.hpp"
#include "ops/layout_program.hpp"
#include "ops/matmul_planner.hpp"
#include "ops/pricing.hpp"
#include "ops/rotary_program.hpp"
#include "ops/rowwise_planner.hpp"
#include "ops/scan_program.hpp"
#include "ops/sort_program.hpp"
#include "spyre/cost.hpp"

namespace {

using spyre::isa::DType;
using namespace spyre::ops;

struct Row {
    std::string name;
    double modeled_us, peak_pct, utilization_pct, roofline_pct, naive_us, pure_m_mc_us;
    double exhaustive_best_us, planner_gap_pct;
    std::string split, naive_split;
    double plan_ms;
    double ddr_pct = 0;
    double naive_util_pct = 0;
    double reuse_worst_pct = 0, reuse_mean_pct = 0, replan_ms = 0;  // attention plan reuse
    std::string breakdown;  // where the cycles of the busiest program go (see unit_breakdown)
    // roofline: useful FLOPs (2 per MAC; vector cases: the elementwise operations), the least
    // DDR traffic (every input read and every output written once), the operands' type
    double flops = 0, bytes = 0;
    std::string dtype = "fp16";
};

double us(const spyre_engine_config& cfg, uint64_t cycles) {
    return double(cycles) * 1e6 / double(cfg.clock_hz);
}

// Per-unit occupancy of a priced run, averaged over its cores, in % of the job's cycles:
// matrix, DMA (load + store units), vector, ring, issue stalled on collectives (wait), and the
// cycles after a core halted (idle: imbalance). The busiest matrix unit's share: 100% less it
// is what fill, drain and stalls cost the core with the most matrix work.
std::string unit_breakdown(const spyre_engine_result& r) {
    double busy[SPYRE_UNIT_COUNT] = {}, wait = 0, idle = 0;
    uint64_t mm_max = 0;
    for (uint32_t c = 0; c < r.num_cores; ++c) {
        for (int u = 0; u < SPYRE_UNIT_COUNT; ++u) busy[u] += double(r.cores[c].busy[u]);
        wait += double(r.cores[c].wait_cycles), idle += double(r.cores[c].idle_cycles);
        mm_max = std::max(mm_max, r.cores[c].busy[SPYRE_UNIT_MATRIX]);
    }
    const double n =
        double(std::max(r.num_cores, 1u)) * double(std::max<uint64_t>(r.total_cycles, 1));
    return std::format(
        "{} cycles on {} cores: matrix {:.1f}% dma {:.1f}% vector {:.1f}% ring {:.1f}% wait "
        "{:.1f}% idle {:.1f}%, busiest matrix unit {:.1f}%",
        r.total_cycles, r.num_cores, 100 * busy[SPYRE_UNIT_MATRIX] / n,
        100 * busy[SPYRE_UNIT_DMA] / n, 100 * busy[SPYRE_UNIT_VECTOR] / n,
        100 * busy[SPYRE_UNIT_RING] / n, 100 * wait / n, 100 * idle / n,
        100.0 * double(mm_max) / double(std::max<uint64_t>(r.total_cycles, 1)));
}

// C = X W^T (a linear layer: weight [N, K] as stored), fp16.
Row matmul_case(const MatmulPlanner& pl, const char* label, uint64_t M, uint64_t N, uint64_t K) {
    const auto& cfg = pl.config();
    MatmulShape s;
    s.M = M, s.N = N, s.K = K;
    s.in = s.out = DType::F16;
    s.trans_b = true;
    s.lda = K * 2, s.ldb = K * 2, s.ldc = N * 2;
    const auto t0 = std::chrono::steady_clock::now();
    const PricedSplit best = pl.plan(s);
    const double plan_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const PricedSplit naive = pl.naive(s);
    // IBM's baseline: pure-M split, the shared weight panel broadcast to the cores
    PricedSplit pure_m_mc{};
    for (uint32_t gm = cfg.num_cores; gm >= 1 && !pure_m_mc.cycles; gm /= 2)
        if (auto f = fit_matmul_split(s, gm, 1, 1, pl.lx_budget(), true))
            pure_m_mc = pl.price(s, *f);
    uint64_t exhaustive = UINT64_MAX;
    for (const auto& c : pl.candidates(s))
        exhaustive = std::min(exhaustive, pl.price(s, c.split).cycles);
    const double macs = double(M) * N * K;
    const double peak_cycles = macs / (double(cfg.num_cores) * 1024);
    const double bytes = double(M * K + N * K + M * N) * 2;
    const double ddr_cycles = bytes / (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz));
    const double roof = std::max(peak_cycles, ddr_cycles);
    Row r;
    r.flops = 2 * macs, r.bytes = bytes;
    r.name = std::string("matmul ") + label + " " + std::to_string(M) + "x" + std::to_string(N) +
             "x" + std::to_string(K) + " fp16";
    r.modeled_us = us(cfg, best.cycles);
    r.peak_pct = 100 * peak_cycles / double(best.cycles);
    r.utilization_pct = 100 * macs / (double(best.cycles) * matmul_cores(best.split) * 1024);
    r.roofline_pct = 100 * roof / double(best.cycles);
    r.naive_us = us(cfg, naive.cycles);
    r.pure_m_mc_us = us(cfg, pure_m_mc.cycles);
    r.exhaustive_best_us = us(cfg, exhaustive);
    r.planner_gap_pct = 100.0 * (double(best.cycles) / double(exhaustive) - 1);
    r.split = split_name(best.split);
    r.naive_split = split_name(naive.split);
    r.plan_ms = plan_ms;
    r.breakdown = unit_breakdown(best.stats);
    return r;
}

// The weight-only int8 linear (spyre_op_linear_int8_weight): x fp16 [M, K], weight int8 [N, K]
// converted on the cores, fp16 per-column scales, against the fp16 linear of the same shape on
// the same model. Roofline: x, the int8 weight, the scales and the output moved once, or the
// fp16 peak.
Row int8_weight_case(const MatmulPlanner& pl, const char* label, uint64_t M, uint64_t N,
                     uint64_t K) {
    const auto& cfg = pl.config();
    MatmulShape s;
    s.M = M, s.N = N, s.K = K;
    s.in = s.out = DType::F16;
    s.trans_b = true;
    s.lda = K * 2, s.ldc = N * 2;
    MatmulShape w8 = s;
    w8.w_i8 = true, w8.has_scale = true, w8.scale_t = DType::F16;
    s.ldb = K * 2, w8.ldb = K;
    const PricedSplit best = pl.plan(w8), fp16 = pl.plan(s);
    const double macs = double(M) * N * K;
    const double peak_cycles = macs / (double(cfg.num_cores) * 1024);
    const double bytes = double(M * K + M * N + N) * 2 + double(N * K);
    const double ddr_cycles = bytes / (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz));
    Row r{};
    r.flops = 2 * macs, r.bytes = bytes;
    r.name = std::format("linear int8 weights {} {}x{}x{} fp16", label, M, N, K);
    r.modeled_us = us(cfg, best.cycles);
    r.peak_pct = 100 * peak_cycles / double(best.cycles);
    r.roofline_pct = 100 * std::max(peak_cycles, ddr_cycles) / double(best.cycles);
    r.naive_us = us(cfg, fp16.cycles);  // the fp16 weights' linear
    r.split = split_name(best.split);
    r.naive_split = split_name(fp16.split);
    r.breakdown = unit_breakdown(best.stats);
    return r;
}

// Granite's SwiGLU MLP, x [M, 4096] -> [M, 4096], I = 12800, fp16. Fused: gate and up in one
// program (silu(gate) * up in its epilogue), then down. Unfused: gate, up and down as three
// planned linears plus the silu * mul pass between them, priced as its DDR traffic (two
// [M, I] reads and one write at 204.8 GB/s: a lower bound for any elementwise program).
Row mlp_case(const MatmulPlanner& pl, uint64_t M) {
    const auto& cfg = pl.config();
    const uint64_t H = 4096, I = 12800;
    MatmulShape gu;
    gu.M = M, gu.N = I, gu.K = H, gu.trans_b = true;
    gu.lda = H * 2, gu.ldb = H * 2, gu.ldc = I * 2;
    MatmulShape down = gu;
    down.N = H, down.K = I, down.lda = I * 2, down.ldb = I * 2, down.ldc = H * 2;
    MatmulShape fused = gu;
    fused.gated = true, fused.has_act = true, fused.act = spyre::isa::VUn::SILU;
    const PricedSplit f = pl.plan(fused), d = pl.plan(down), g = pl.plan(gu);
    const uint64_t fused_cycles = f.cycles + d.cycles;
    const double ew_cycles =
        double(3 * M * I * 2) / (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz));
    const double unfused = double(2 * g.cycles + d.cycles) + ew_cycles;
    const double macs = 3.0 * M * H * I;
    const double peak_cycles = macs / (double(cfg.num_cores) * 1024);
    const double bytes = double(M * H * 2 + 3 * H * I + M * H) * 2;
    const double ddr_cycles = bytes / (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz));
    Row r{};
    r.flops = 2 * macs, r.bytes = bytes;
    r.name = "mlp swiglu " + std::to_string(M) + "x4096 I 12800 fp16";
    r.modeled_us = us(cfg, fused_cycles);
    r.peak_pct = 100 * peak_cycles / double(fused_cycles);
    r.utilization_pct = r.peak_pct;  // every core runs both programs
    r.roofline_pct = 100 * std::max(peak_cycles, ddr_cycles) / double(fused_cycles);
    r.naive_us = unfused * 1e6 / double(cfg.clock_hz);
    r.naive_util_pct = 100 * peak_cycles / unfused;
    r.split = "gate/up " + split_name(f.split) + "; down " + split_name(d.split);
    r.breakdown = "gate/up " + unit_breakdown(f.stats) + "; down " + unit_breakdown(d.stats);
    return r;
}

// Granite's q (32 heads) or k (8 heads) projection with rotary, x [M, 4096] -> [M, H * 128],
// fp16, cos/sin [M, 128] fp16: the rotation in the matmul's epilogue (spyre_op_linear_rotary)
// against the planned linear, then spyre_op_rotary over its [1, H, M, 128] transposed view.
Row linear_rotary_case(const MatmulPlanner& pl, const Pricer& pr, const char* label, uint64_t M,
                       uint64_t heads) {
    const auto& cfg = pl.config();
    const uint64_t D = 128, N = heads * D, K = 4096;
    MatmulShape lin;
    lin.M = M, lin.N = N, lin.K = K, lin.trans_b = true;
    lin.lda = K * 2, lin.ldb = K * 2, lin.ldc = N * 2;
    MatmulShape fused = lin;
    fused.rotary = true, fused.rot_d = D, fused.rot_l = M, fused.rot_cl = D * 2;
    RotaryShape rs;
    rs.B = 1, rs.H = heads, rs.L = M, rs.D = D;
    rs.x_st[0] = M * N * 2, rs.x_st[1] = D * 2, rs.x_st[2] = N * 2;  // view(1, M, H, D).transpose
    const PricedSplit f = pl.plan(fused), l = pl.plan(lin);
    const RotaryPlan rp = plan_rotary(pr, rs, cfg.num_cores);
    Row r{};
    r.name = std::format("linear_rotary {} {}x4096 -> {} heads fp16", label, M, heads);
    r.modeled_us = us(cfg, f.cycles);
    r.naive_us = us(cfg, l.cycles + rp.cycles);
    r.pure_m_mc_us = us(cfg, l.cycles);  // the linear alone: what the epilogue costs over it
    r.peak_pct = 100 * double(M * N * K) / (double(cfg.num_cores) * 1024) / double(f.cycles);
    r.split = split_name(f.split);
    r.naive_split = std::format("linear {}; rotary {}", split_name(l.split),
                                std::format("{} positions per unit, {} cores", rp.bl, rp.cores));
    r.breakdown = unit_breakdown(f.stats);
    return r;
}

// The unfused SDPA on the same model: S = Q K^T as a planned batched matmul (the g query heads
// of a KV head stacked as g*Lq rows, fp16 S in DDR, the scale folded into Q for free), the
// causal mask as one elementwise pass priced as its DDR traffic (read and write S: a lower
// bound), the planned row softmax over [Hq*Lq, Lk], and O = P V as a planned batched matmul.
// Every score is computed (no causal skipping), as an unfused graph does.
struct NaiveSdpa {
    uint64_t qk = 0, mask = 0, softmax = 0, pv = 0;
    uint64_t total() const { return qk + mask + softmax + pv; }
};

NaiveSdpa naive_sdpa(const MatmulPlanner& pl, const Pricer& pr, const AttentionShape& a) {
    const auto& cfg = pl.config();
    const uint64_t g = a.Hq / a.Hkv, es = 2;
    MatmulShape qk;
    qk.M = g * a.Lq, qk.N = a.Lk, qk.K = a.D, qk.trans_b = true;
    qk.lda = a.D * es, qk.ldb = a.D * es, qk.ldc = a.Lk * es;
    qk.batch = a.B * a.Hkv, qk.batch_a = qk.M * qk.lda, qk.batch_b = a.Lk * qk.ldb;
    qk.batch_c = qk.M * qk.ldc;
    MatmulShape pv;
    pv.M = g * a.Lq, pv.N = a.D, pv.K = a.Lk;
    pv.lda = a.Lk * es, pv.ldb = a.D * es, pv.ldc = a.D * es;
    pv.batch = qk.batch, pv.batch_a = qk.batch_c, pv.batch_b = a.Lk * pv.ldb;
    pv.batch_c = pv.M * pv.ldc;
    RowwiseShape sm;
    sm.rows = a.B * a.Hq * a.Lq, sm.cols = a.Lk, sm.t = DType::F16, sm.fp32_exp = true;
    NaiveSdpa n;
    n.qk = pl.plan(qk).cycles;
    n.pv = pl.plan(pv).cycles;
    n.softmax = plan_softmax(pr, sm, cfg.num_cores).cycles;
    if (a.causal)
        n.mask = uint64_t(double(2 * sm.rows * sm.cols * es) /
                          (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz)));
    return n;
}

// Granite attention: 32 query heads, 8 KV heads of 128, fp16, causal.
Row attention_case(const MatmulPlanner& pl, const Pricer& pr, const char* label, uint64_t Lq,
                   uint64_t Lk) {
    const auto& cfg = pr.config();
    AttentionShape s;
    s.Hq = 32, s.Hkv = 8, s.Lq = Lq, s.Lk = Lk, s.D = 128, s.causal = true;
    const auto t0 = std::chrono::steady_clock::now();
    const AttentionPlan p = plan_attention(pr, s, cfg.num_cores);
    const double plan_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // useful MACs: Q K^T and P V over the keys each query sees
    double seen = 0;
    for (uint64_t i = 0; i < Lq; ++i) seen += double(std::min<uint64_t>(Lk, i + 1 + (Lk - Lq)));
    const double macs = 2.0 * s.Hq * seen * s.D;
    const double peak_cycles = macs / (double(cfg.num_cores) * 1024);
    const double bytes = 2.0 * (2 * s.Hq * Lq * s.D + 2 * s.Hkv * Lk * s.D);
    const double ddr_cycles = bytes / (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz));
    uint64_t mm = 0;
    for (uint32_t c = 0; c < p.cores; ++c) mm += p.stats.cores[c].busy[SPYRE_UNIT_MATRIX];
    Row r{};
    r.flops = 2 * macs, r.bytes = bytes;
    r.name = std::string("sdpa ") + label + " Lq " + std::to_string(Lq) + " Lk " +
             std::to_string(Lk) + " 32/8 heads fp16 causal";
    r.modeled_us = us(cfg, p.cycles);
    r.peak_pct = 100 * peak_cycles / double(p.cycles);
    r.utilization_pct = 100 * double(mm) / (double(p.cycles) * p.cores);  // matrix unit busy
    r.roofline_pct = 100 * std::max(peak_cycles, ddr_cycles) / double(p.cycles);
    r.split = "q block " + std::to_string(p.bq) + " x 4 heads, key block " + std::to_string(p.bk) +
              ", " + std::to_string(p.cores) + " cores";
    r.plan_ms = plan_ms;
    r.ddr_pct = 100 * ddr_cycles / double(p.cycles);
    r.breakdown = unit_breakdown(p.stats);
    const NaiveSdpa n = naive_sdpa(pl, pr, s);
    r.naive_us = us(cfg, n.total());
    r.naive_util_pct = 100 * peak_cycles / double(n.total());
    r.naive_split = std::format("QK^T {:.1f} + mask {:.1f} + softmax {:.1f} + PV {:.1f} us",
                                us(cfg, n.qk), us(cfg, n.mask), us(cfg, n.softmax), us(cfg, n.pv));
    return r;
}

// The backward of the same Granite attention (causal, fp16, D 128): the flash-style dQ and dK/dV
// passes (attention_backward_program.hpp) against the math path's backward on the same model:
// dV = P^T dO, dP = dO V^T, dQ = dS K and dK = dS^T Q as planned batched matmuls over the Hq
// heads (every score, [Lq, Lk] fp16 operands in DDR; the transposed operands priced as plain
// ones, and the sum of dK/dV over a KV head's query heads left out: a lower bound), and the
// softmax backward dS = P (dP - rowsum(P dP)) priced as its DDR traffic (read P and dP, write
// dS). Useful MACs: the four gradient products over the scores each query sees.
Row attention_backward_case(const MatmulPlanner& pl, const Pricer& pr, uint64_t L) {
    const auto& cfg = pr.config();
    AttentionGradShape g;
    AttentionShape& s = g.a;
    s.Hq = 32, s.Hkv = 8, s.Lq = L, s.Lk = L, s.D = 128, s.causal = true, s.lse = true;
    const auto t0 = std::chrono::steady_clock::now();
    const AttentionGradPlan p = plan_attention_grad(pr, g, cfg.num_cores);
    const double plan_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const uint64_t cycles = p.dq_cycles + p.dkv_cycles;
    const double seen = double(L) * double(L + 1) / 2;
    const double macs = 4.0 * s.Hq * seen * s.D;
    const double peak_cycles = macs / (double(cfg.num_cores) * 1024);
    // q, k, v, out, dO read, dQ, dK, dV written, lse and delta
    const double bytes = 2.0 * (4 * s.Hq * L * s.D + 4 * s.Hkv * L * s.D) + 4.0 * 3 * s.Hq * L;
    const double ddr_cycles = bytes / (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz));
    // the math path
    const uint64_t es = 2;
    MatmulShape dv;  // [Lk, Lq] x [Lq, D] per head
    dv.M = L, dv.N = s.D, dv.K = L, dv.lda = L * es, dv.ldb = s.D * es, dv.ldc = s.D * es;
    dv.batch = s.Hq, dv.batch_a = L * L * es, dv.batch_b = L * s.D * es;
    dv.batch_c = L * s.D * es;
    MatmulShape dp;  // [Lq, D] x [Lk, D]^T per head
    dp.M = L, dp.N = L, dp.K = s.D, dp.trans_b = true;
    dp.lda = s.D * es, dp.ldb = s.D * es, dp.ldc = L * es;
    dp.batch = s.Hq, dp.batch_a = L * s.D * es, dp.batch_b = L * s.D * es;
    dp.batch_c = L * L * es;
    const uint64_t mm = 3 * pl.plan(dv).cycles + pl.plan(dp).cycles;  // dV, dQ, dK alike
    const uint64_t smb = uint64_t(double(3 * s.Hq * L * L * es) /
                                  (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz)));
    Row r{};
    r.flops = 2 * macs, r.bytes = bytes;
    r.name = std::format("sdpa backward Lq {} Lk {} 32/8 heads fp16 causal", L, L);
    r.modeled_us = us(cfg, cycles);
    r.peak_pct = 100 * peak_cycles / double(cycles);
    r.roofline_pct = 100 * std::max(peak_cycles, ddr_cycles) / double(cycles);
    r.ddr_pct = 100 * ddr_cycles / double(cycles);
    r.split = std::format(
        "dQ {:.1f} us (q block {} x 4 heads, key block {}, {} cores) + dK/dV "
        "{:.1f} us (key block {}, q block {} x 4 heads, {} cores)",
        us(cfg, p.dq_cycles), p.bq, p.bk, p.dq_cores, us(cfg, p.dkv_cycles), p.kk, p.kq,
        p.dkv_cores);
    r.plan_ms = plan_ms;
    r.naive_us = us(cfg, mm + smb);
    r.naive_util_pct = 100 * peak_cycles / double(mm + smb);
    r.naive_split =
        std::format("4 matmuls {:.1f} + softmax backward {:.1f} us", us(cfg, mm), us(cfg, smb));
    return r;
}

// softmax along dim 1 of a dense [A, R, I] fp16 tensor as spyre_op_softmax_dim runs it: the
// column program (one pass over DDR: [R, ic] tiles reduced across rows in LX). Against the DDR
// roofline of one read and one write of x, the same softmax along the last dim of a tensor of
// the same size, and (naive) the path for inner dims that are not whole sticks: the copy
// program lays x out with the dim last, the row softmax, the copy program moves it back.
Row softmax_dim_case(const Pricer& pr, uint64_t A, uint64_t R, uint64_t I) {
    const auto& cfg = pr.config();
    ColumnShape cs;
    cs.A = A, cs.R = R, cs.I = I, cs.t = DType::F16;
    const ColumnPlan col = plan_column(pr, cs, cfg.num_cores);
    CopyShape to_rows;  // [A, I, R] view of x: strides (R*I, 1, I)
    to_rows.ndim = 3, to_rows.es = 2;
    to_rows.sizes[0] = A, to_rows.sizes[1] = I, to_rows.sizes[2] = R;
    to_rows.strides[0] = R * I, to_rows.strides[1] = 1, to_rows.strides[2] = I;
    CopyShape back = to_rows;  // [A, R, I] view of the rows: strides (I*R, 1, R)
    back.sizes[1] = R, back.sizes[2] = I;
    back.strides[0] = I * R, back.strides[1] = 1, back.strides[2] = R;
    RowwiseShape sm;
    sm.rows = A * I, sm.cols = R, sm.t = DType::F16, sm.fp32_exp = true;
    const LayoutPlan c1 = plan_copy(pr, to_rows, cfg.num_cores);
    const RowwisePlan rows = plan_softmax(pr, sm, cfg.num_cores);
    const LayoutPlan c2 = plan_copy(pr, back, cfg.num_cores);
    const double ddr_cycles =
        double(2 * A * R * I * 2) / (double(cfg.ddr_bytes_per_s) / double(cfg.clock_hz));
    Row r{};
    // max, subtract, exp, sum and divide: 5 vector operations per element
    r.flops = 5.0 * double(A * R * I), r.bytes = double(2 * A * R * I * 2);
    r.name = std::format("softmax dim 1 of [{}, {}, {}] fp16", A, R, I);
    r.modeled_us = us(cfg, col.cycles);
    r.roofline_pct = 100 * ddr_cycles / double(col.cycles);
    r.pure_m_mc_us = us(cfg, rows.cycles);  // the last-dim softmax of the same size
    r.naive_us = us(cfg, c1.cycles + rows.cycles + c2.cycles);
    r.split = std::format("columns: tiles of {} x {} on {} cores", R, col.ic, col.cores);
    r.naive_split =
        std::format("copy {:.1f} us + rows {:.1f} us ({}) + copy back {:.1f} us",
                    us(cfg, c1.cycles), us(cfg, rows.cycles), plan_name(rows), us(cfg, c2.cycles));
    return r;
}

// The roofs of the roofline chart, from the engine's default configuration: the matrix units' peak
// per input type (spyre::cost::mm_peak_macs_per_cycle) x cores x clock x 2 FLOPs per MAC, the
// vector units' rate (16-bit lanes, one operation per lane per cycle), and DDR bandwidth.
nlohmann::json machine_roofs(const spyre_engine_config& cfg) {
    nlohmann::json peaks;
    for (auto [t, name] : {std::pair{DType::F16, "fp16"}, std::pair{DType::BF16, "bf16"},
                           std::pair{DType::I8, "int8"}, std::pair{DType::F32, "fp32"}})
        peaks[name] =
            2 * spyre::cost::mm_peak_macs_per_cycle(cfg, t) * cfg.num_cores * double(cfg.clock_hz);
    return {{"name", "machine"},
            {"num_cores", cfg.num_cores},
            {"clock_hz", cfg.clock_hz},
            {"ddr_bytes_per_s", cfg.ddr_bytes_per_s},
            {"matrix_peak_flops_per_s", peaks},
            {"vector_peak_ops_per_s", double(cfg.vec_lanes_16) * cfg.corelets_per_core *
                                          cfg.num_cores * double(cfg.clock_hz)},
            {"source",
             "spyre_engine_config_default() (engine/src/api.cpp): num_cores, clock_hz, "
             "ddr_bytes_per_s, vec_lanes_16, corelets_per_core; "
             "spyre::cost::mm_peak_macs_per_cycle() (engine/src/cost.cpp); "
             "Documentation/isa.md 1 and 6.2 name their origin"}};
}

// Decode attention by key length (ops.md "Attention plans across key lengths"): libspyre runs
// one program per bucket of lengths with the length a launch argument. Per length: the cycles
// of a program planned and built for that length alone, of the bucket's program run at it
// (exact), and what libspyre reports (interpolated between kLengthPoints priced lengths).
void attention_lengths(const Pricer& pr) {
    const auto& cfg = pr.config();
    struct Heads {
        const char* label;
        uint64_t Hq, Hkv, D;
        DType t;
    } heads[] = {{"TinyGranite 8/2 of 64 fp32", 8, 2, 64, DType::F32},
                 {"Granite 32/8 of 128 fp16", 32, 8, 128, DType::F16}};
    for (const Heads& h : heads) {
        std::printf("attention by key length, %s, Lq 1:\n", h.label);
        std::printf("  %5s %12s %22s %22s %9s %11s %s\n", "Lk", "own program", "bucket program",
                    "reported (interp.)", "own plan", "bucket plan", "blocks own/bucket");
        for (uint64_t lk : {5, 17, 100, 511, 512, 2048, 4096}) {
            AttentionShape s;
            s.Hq = h.Hq, s.Hkv = h.Hkv, s.D = h.D, s.t = h.t, s.Lk = lk;
            auto t0 = std::chrono::steady_clock::now();
            const AttentionPlan own = plan_attention(pr, s, cfg.num_cores);
            const double own_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
            const LengthBucket b = attention_length_bucket(lk);
            AttentionShape bs = s;
            bs.runtime_lk = true, bs.Lk = b.hi;
            t0 = std::chrono::steady_clock::now();
            const AttentionPlan bp = plan_attention_lengths(pr, bs, b.lo, cfg.num_cores);
            const double bucket_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
            AttentionShape at = bs;
            at.Lk = lk;
            AttentionPlan run = bp;
            price_attention(pr, at, run);
            const double est = double(interpolate_cycles(
                price_attention_lengths(pr, build_attention(bs, bp), bp.cores, bs, b.lo, b.hi),
                lk));
            std::printf(
                "  %5llu %12llu %12llu (%+6.2f%%) %12.0f (%+6.2f%%) %6.1f ms %8.1f ms  bk "
                "%llu/%llu\n",
                (unsigned long long)lk, (unsigned long long)own.cycles,
                (unsigned long long)run.cycles,
                100.0 * (double(run.cycles) / double(own.cycles) - 1), est,
                100.0 * (est / double(run.cycles) - 1), own_ms, bucket_ms,
                (unsigned long long)own.bk, (unsigned long long)bp.bk);
            std::fflush(stdout);
        }
        // every length to 128, then every 8th: the bucket program's cycles over the own
        // program's (the blocks of a bucket are chosen at its two ends)
        double worst = 0, sum = 0;
        uint64_t worst_lk = 0, n = 0;
        for (uint64_t lk = 1; lk <= 4096; lk += lk < 128 ? 1 : 8) {
            AttentionShape s;
            s.Hq = h.Hq, s.Hkv = h.Hkv, s.D = h.D, s.t = h.t, s.Lk = lk;
            const AttentionPlan own = plan_attention(pr, s, cfg.num_cores);
            const LengthBucket b = attention_length_bucket(lk);
            AttentionShape bs = s;
            bs.runtime_lk = true, bs.Lk = b.hi;
            AttentionPlan run = plan_attention_lengths(pr, bs, b.lo, cfg.num_cores);
            bs.Lk = lk;
            price_attention(pr, bs, run);
            const double gap = 100.0 * (double(run.cycles) / double(own.cycles) - 1);
            if (gap > worst) worst = gap, worst_lk = lk;
            sum += gap, ++n;
        }
        std::printf(
            "  %llu lengths 1..4096: bucket program vs own program worst %+.2f%% (Lk %llu), "
            "mean %+.3f%%\n",
            (unsigned long long)n, worst, (unsigned long long)worst_lk, sum / double(n));
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string out = argc > 1 ? argv[1] : "build/bench/model.json";
    const spyre_engine_config cfg = default_engine_config();
    if (out == "attention-lengths") {  // this table alone
        attention_lengths(Pricer(cfg));
        return 0;
    }
    MatmulPlanner pl(cfg);
    std::vector<Row> rows;
    // Granite-3.3-8B: hidden 4096, MLP 12800, 32 heads, 8 KV heads of 128 (K/V proj 1024)
    struct G {
        const char* label;
        uint64_t N, K;
    } layers[] = {{"q/o_proj", 4096, 4096},
                  {"kv_proj", 1024, 4096},
                  {"gate/up", 12800, 4096},
                  {"down", 4096, 12800}};
    for (uint64_t M : {512, 2048, 1, 4, 32})
        for (const auto& g : layers) {
            rows.push_back(matmul_case(pl, g.label, M, g.N, g.K));
            const Row& r = rows.back();
            std::printf(
                "%-34s %9.2f us  peak %5.1f%%  roof %5.1f%%  naive %9.2f us (%5.2fx)  "
                "pure-M+mc %9.2f us (%5.2fx)  vs exhaustive %+5.1f%%  %s  [plan %.0f ms]\n",
                r.name.c_str(), r.modeled_us, r.peak_pct, r.roofline_pct, r.naive_us,
                r.naive_us / r.modeled_us, r.pure_m_mc_us, r.pure_m_mc_us / r.modeled_us,
                r.planner_gap_pct, r.split.c_str(), r.plan_ms);
            std::printf("    units: %s\n", r.breakdown.c_str());
            std::fflush(stdout);
        }
    for (uint64_t M : {1, 32, 512})
        for (const auto& g : layers) {
            rows.push_back(int8_weight_case(pl, g.label, M, g.N, g.K));
            const Row& r = rows.back();
            std::printf("%-46s %9.2f us  roof %5.1f%%  fp16 weights %9.2f us (%.2fx)  %s\n",
                        r.name.c_str(), r.modeled_us, r.roofline_pct, r.naive_us,
                        r.naive_us / r.modeled_us, r.split.c_str());
            std::printf("    units: %s\n", r.breakdown.c_str());
            std::fflush(stdout);
        }
    for (uint64_t M : {512, 2048}) {
        rows.push_back(mlp_case(pl, M));
        const Row& r = rows.back();
        std::printf(
            "%-46s %9.2f us  utilisation %5.1f%%  roof %5.1f%%  unfused %9.2f us "
            "(utilisation %5.1f%%, %.2fx)  %s\n",
            r.name.c_str(), r.modeled_us, r.utilization_pct, r.roofline_pct, r.naive_us,
            r.naive_util_pct, r.naive_us / r.modeled_us, r.split.c_str());
        std::printf("    units: %s\n", r.breakdown.c_str());
        std::fflush(stdout);
    }
    const Pricer pr(cfg);
    for (uint64_t M : {512, 2048})
        for (auto [label, heads] : {std::pair{"q_proj", 32}, std::pair{"k_proj", 8}}) {
            rows.push_back(linear_rotary_case(pl, pr, label, M, heads));
            const Row& r = rows.back();
            std::printf(
                "%-46s %9.2f us  peak %5.1f%%  linear %9.2f us (+%.1f%%)  linear + rotary "
                "%9.2f us (%.3fx)  %s\n",
                r.name.c_str(), r.modeled_us, r.peak_pct, r.pure_m_mc_us,
                100 * (r.modeled_us / r.pure_m_mc_us - 1), r.naive_us, r.naive_us / r.modeled_us,
                r.split.c_str());
            std::printf("    units: %s\n", r.breakdown.c_str());
            std::fflush(stdout);
        }
    for (auto [label, lq, lk] :
         {std::tuple{"prefill", 2048, 2048}, std::tuple{"prefill", 512, 512},
          std::tuple{"decode", 1, 4096}, std::tuple{"decode x32", 32, 4096}}) {
        rows.push_back(attention_case(pl, pr, label, lq, lk));
        const Row& r = rows.back();
        std::printf(
            "%-46s %9.2f us  peak %5.1f%%  DDR roofline %5.1f%%  matrix busy %5.1f%%  %s  "
            "[plan %.0f ms]\n%-46s unfused %9.2f us (%.2fx): %s\n",
            r.name.c_str(), r.modeled_us, r.peak_pct, r.ddr_pct, r.utilization_pct, r.split.c_str(),
            r.plan_ms, "", r.naive_us, r.naive_us / r.modeled_us, r.naive_split.c_str());
        std::printf("    units: %s\n", r.breakdown.c_str());
        std::fflush(stdout);
    }
    // Attention plans across key lengths, the policy before decode took Lk as a launch argument
    // (attention_lengths below): the first decode shape of a family (same heads and types, Lq
    // 1, Lk within one power of two, from 512 keys) planned over every candidate and its blocks
    // reused for the rest, pricing only those. Seeds are each bucket's first length in decode
    // order (2^(k-1) + 1); the gap is the reused plan's cycles over the best. Lq 32 and
    // Lk < 512 show why reuse stopped there.
    for (auto [lq, from] :
         {std::pair<uint64_t, uint64_t>{1, 512}, std::pair<uint64_t, uint64_t>{1, 64},
          std::pair<uint64_t, uint64_t>{32, 64}}) {
        double worst = 0, sum = 0, plan_ms = 0, replan_ms = 0;
        int n = 0;
        for (uint64_t top = 2 * from; top <= 4096; top *= 2) {
            AttentionShape s;
            s.Hq = 32, s.Hkv = 8, s.Lq = lq, s.D = 128, s.causal = true;
            s.Lk = top / 2 + 1;
            const AttentionPlan seed = plan_attention(pr, s, cfg.num_cores);
            for (uint64_t lk : {top / 2 + 1 + top / 8, top / 2 + top / 4, top - top / 8 + 3, top}) {
                s.Lk = lk;
                auto t0 = std::chrono::steady_clock::now();
                const AttentionPlan best = plan_attention(pr, s, cfg.num_cores);
                auto t1 = std::chrono::steady_clock::now();
                const auto reused = replan_attention(pr, s, seed, cfg.num_cores);
                auto t2 = std::chrono::steady_clock::now();
                plan_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
                replan_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
                const double gap =
                    reused ? 100.0 * (double(reused->cycles) / double(best.cycles) - 1) : 1e9;
                worst = std::max(worst, gap), sum += gap, ++n;
            }
        }
        std::printf(
            "attention plan reuse, Lq %-3llu Lk %llu..4096%s (%d lengths): reused blocks vs every "
            "candidate: worst %+.2f%%, mean %+.2f%%; planning %.1f ms -> %.1f ms per length\n",
            (unsigned long long)lq, (unsigned long long)from + 1,
            lq == 1 && from >= 512 ? " (libspyre's decode policy before attention-lengths)"
                                   : " (why that policy stopped below 512 and for Lq > 1)",
            n, worst, sum / n, plan_ms / n, replan_ms / n);
        Row r{};
        r.name = std::format("attention plan reuse Lq {} Lk {}..4096", lq, from + 1);
        r.reuse_worst_pct = worst;
        r.reuse_mean_pct = sum / n;
        r.plan_ms = plan_ms / n;
        r.replan_ms = replan_ms / n;
        rows.push_back(r);
        std::fflush(stdout);
    }
    attention_lengths(pr);
    for (auto [A, R, I] : {std::tuple{16, 1024, 128}, std::tuple{1, 4096, 256}}) {
        rows.push_back(softmax_dim_case(pr, A, R, I));
        const Row& r = rows.back();
        std::printf(
            "%-46s %9.2f us  DDR roofline %5.1f%%  last-dim softmax %9.2f us  %s\n%-46s dim moved "
            "last %9.2f us (%.2fx): %s\n",
            r.name.c_str(), r.modeled_us, r.roofline_pct, r.pure_m_mc_us, r.split.c_str(), "",
            r.naive_us, r.naive_us / r.modeled_us, r.naive_split.c_str());
        std::fflush(stdout);
    }
    // Scans (cumsum: fp32 sums read N^2 / 2 elements per line, exact double accumulation) and
    // sorts (a stable bitonic network over rows padded to a power of two), as planned.
    for (auto [t, O, N, I] :
         {std::tuple{DType::F32, 8, 33, 1}, std::tuple{DType::I64, 8, 33, 1},
          std::tuple{DType::F32, 64, 1024, 1}, std::tuple{DType::F16, 64, 1024, 1},
          std::tuple{DType::F32, 1, 4096, 1}, std::tuple{DType::F16, 1, 4096, 1},
          std::tuple{DType::I64, 1, 4096, 1}, std::tuple{DType::F32, 1024, 64, 1},
          std::tuple{DType::F32, 1, 1024, 64}, std::tuple{DType::F16, 1, 1024, 64}}) {
        ScanShape s;
        s.t = t, s.es = t == DType::F16 ? 2 : t == DType::I64 ? 8 : 4;
        s.O = uint64_t(O), s.N = uint64_t(N), s.I = uint64_t(I);
        const ScanPlan p = plan_scan(pr, s, cfg.num_cores);
        Row r{};
        r.name = std::format("cumsum {} [{}, {}, {}] along dim 1",
                             t == DType::F32   ? "fp32"
                             : t == DType::F16 ? "fp16"
                                               : "int64",
                             O, N, I);
        r.modeled_us = us(cfg, p.cycles);
        r.split = std::format("{} cores, chunks of {}", p.cores, p.chunk);
        std::printf("%-46s %9.2f us  %s\n", r.name.c_str(), r.modeled_us, r.split.c_str());
        rows.push_back(r);
    }
    for (auto [O, N, K] :
         {std::tuple{8, 33, 33}, std::tuple{1, 96, 5}, std::tuple{1, 1024, 1024},
          std::tuple{1, 4096, 4096}, std::tuple{1, 32000, 50}, std::tuple{64, 1024, 1024},
          std::tuple{1024, 64, 64}, std::tuple{32, 4096, 4096}}) {
        SortShape s;
        s.t = DType::F32, s.es = 4, s.descending = true;
        s.O = uint64_t(O), s.N = uint64_t(N), s.K = uint64_t(K);
        const SortPlan p = plan_sort(pr, s, cfg.num_cores);
        Row r{};
        r.name = std::format("sort fp32 [{}, {}] top {}", O, N, K);
        r.modeled_us = us(cfg, p.cycles);
        r.split = std::format("{} cores, chunks of {}", p.cores, p.chunk);
        std::printf("%-46s %9.2f us  %s\n", r.name.c_str(), r.modeled_us, r.split.c_str());
        rows.push_back(r);
    }
    for (uint64_t L : {512, 2048}) {
        rows.push_back(attention_backward_case(pl, pr, L));
        const Row& r = rows.back();
        std::printf(
            "%-46s %9.2f us  peak %5.1f%%  DDR roofline %5.1f%%  roof %5.1f%%  %s  [plan %.0f "
            "ms]\n%-46s math path %9.2f us (%.2fx): %s\n",
            r.name.c_str(), r.modeled_us, r.peak_pct, r.ddr_pct, r.roofline_pct, r.split.c_str(),
            r.plan_ms, "", r.naive_us, r.naive_us / r.modeled_us, r.naive_split.c_str());
    }
    std::fflush(stdout);
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
        nlohmann::json o;
        if (r.name.starts_with("mlp")) {
            o = nlohmann::json({{"name", r.name},
                                {"modeled_us", r.modeled_us},
                                {"peak_pct", r.peak_pct},
                                {"utilization_pct", r.utilization_pct},
                                {"roofline_pct", r.roofline_pct},
                                {"naive_modeled_us", r.naive_us},
                                {"naive_utilization_pct", r.naive_util_pct},
                                {"split", r.split},
                                {"breakdown", r.breakdown}});
        } else if (r.name.starts_with("linear_rotary")) {
            o = nlohmann::json({{"name", r.name},
                                {"modeled_us", r.modeled_us},
                                {"peak_pct", r.peak_pct},
                                {"linear_modeled_us", r.pure_m_mc_us},
                                {"linear_plus_rotary_modeled_us", r.naive_us},
                                {"split", r.split},
                                {"unfused_split", r.naive_split},
                                {"breakdown", r.breakdown}});
        } else if (r.name.starts_with("softmax dim")) {
            o = nlohmann::json({{"name", r.name},
                                {"modeled_us", r.modeled_us},
                                {"roofline_pct", r.roofline_pct},
                                {"last_dim_softmax_us", r.pure_m_mc_us},
                                {"naive_modeled_us", r.naive_us},
                                {"naive_split", r.naive_split},
                                {"split", r.split}});
        } else if (r.name.starts_with("cumsum") || r.name.starts_with("sort")) {
            o = nlohmann::json(
                {{"name", r.name}, {"modeled_us", r.modeled_us}, {"split", r.split}});
        } else if (r.name.starts_with("attention plan reuse")) {
            o = nlohmann::json({{"name", r.name},
                                {"worst_gap_pct", r.reuse_worst_pct},
                                {"mean_gap_pct", r.reuse_mean_pct},
                                {"plan_ms", r.plan_ms},
                                {"replan_ms", r.replan_ms}});
        } else if (r.name.starts_with("sdpa")) {
            o = nlohmann::json({{"name", r.name},
                                {"modeled_us", r.modeled_us},
                                {"peak_pct", r.peak_pct},
                                {"utilization_pct", r.utilization_pct},
                                {"roofline_pct", r.roofline_pct},
                                {"ddr_roofline_pct", r.ddr_pct},
                                {"naive_modeled_us", r.naive_us},
                                {"naive_utilization_pct", r.naive_util_pct},
                                {"naive_split", r.naive_split},
                                {"split", r.split},
                                {"breakdown", r.breakdown}});
        } else {
            o = nlohmann::json({{"name", r.name},
                                {"modeled_us", r.modeled_us},
                                {"peak_pct", r.peak_pct},
                                {"utilization_pct", r.utilization_pct},
                                {"roofline_pct", r.roofline_pct},
                                {"naive_modeled_us", r.naive_us},
                                {"naive_split", r.naive_split},
                                {"pure_m_multicast_us", r.pure_m_mc_us},
                                {"exhaustive_best_us", r.exhaustive_best_us},
                                {"planner_gap_pct", r.planner_gap_pct},
                                {"split", r.split},
                                {"breakdown", r.breakdown}});
        }
        if (r.flops > 0) o.update({{"flops", r.flops}, {"bytes", r.bytes}, {"dtype", r.dtype}});
        j.push_back(o);
    }
    j.push_back(machine_roofs(cfg));
    std::ofstream(out) << j.dump(2) << "\n";
    std::printf("wrote %s (%zu cases)\n", out.c_str(), rows.size());
}
