// SPDX-License-Identifier: MIT
#include "ops/matmul_planner.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "spyre/cost.hpp"

namespace spyre::ops {

std::string split_name(const MatmulSplit& s) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "m%u n%u k%u (sub %llux%llu, kc %llu%s%s)", s.gm, s.gn, s.gk,
                  (unsigned long long)s.sm, (unsigned long long)s.sn, (unsigned long long)s.kc,
                  s.double_buffered ? ", 2 buffers" : "", s.multicast ? ", multicast" : "");
    return buf;
}

// Roofline of one split: the slowest of the matrix unit of a core, the DDR bandwidth shared by
// all cores, and a core's DMA port; plus the K-split all-reduces and the launch overhead.
uint64_t MatmulPlanner::estimate(const MatmulShape& s, const MatmulSplit& p) const {
    const spyre_engine_config& cfg_ = config();
    const uint64_t es = isa::dtype_size(s.in), oes = isa::dtype_size(s.out);
    const uint64_t tm = s.M / p.gm, tn = s.N / p.gn, kt = s.K / p.gk;
    const uint64_t subtiles = (tm / p.sm) * (tn / p.sn);
    const uint64_t steps = subtiles * (kt / p.kc);
    const uint64_t nb = s.gated ? 2 : 1;  // B matrices
    const uint64_t compute = nb * s.batch * steps * cost::mm_cycles(cfg_, s.in, p.sm, p.sn, p.kc);
    const bool mc_a = p.multicast && p.gn > 1, mc_b = p.multicast && p.gm > 1;
    const uint64_t a_core = tm * kt * es * (tn / p.sn),
                   b_core = nb * kt * tn * weight_size(s) * (tm / p.sm);
    const uint64_t cores = matmul_cores(p);
    const uint64_t ddr = s.batch * (a_core * cores / (mc_a ? p.gn : 1) +
                                    b_core * cores / (mc_b ? p.gm : 1) + s.M * s.N * oes);
    const double ddr_per_cycle = double(cfg_.ddr_bytes_per_s) / double(cfg_.clock_hz);
    const uint64_t ddr_cycles = static_cast<uint64_t>(double(ddr) / ddr_per_cycle);
    const uint64_t port = s.batch * (a_core + b_core) / cfg_.dma_port_bytes_per_cycle;
    uint64_t red = 0;
    if (p.gk > 1)
        red = nb * s.batch * subtiles * cost::allreduce_cycles(cfg_, p.gk, p.sm * p.sn * 4, 1);
    return cfg_.launch_overhead_cycles + cfg_.dma_latency + std::max({compute, ddr_cycles, port}) +
           red;
}

std::vector<PricedSplit> MatmulPlanner::candidates(const MatmulShape& s, bool multicast) const {
    std::vector<PricedSplit> out;
    const uint32_t cores = config().num_cores;
    for (uint32_t gm = 1; gm <= cores; ++gm)
        for (uint32_t gn = 1; gm * gn <= cores; ++gn)
            for (uint32_t gk = 1; gm * gn * gk <= cores; ++gk) {
                // grids that leave more than half of the cores idle are never better than one
                // that uses them, except for shapes too small to split further
                const auto f = fit_matmul_split(s, gm, gn, gk, lx_budget(), multicast);
                if (!f) continue;
                out.push_back({*f, estimate(s, *f), 0, {}});
            }
    std::stable_sort(out.begin(), out.end(), [](const PricedSplit& a, const PricedSplit& b) {
        return a.estimate_cycles < b.estimate_cycles;
    });
    return out;
}

PricedSplit MatmulPlanner::price(const MatmulShape& s, const MatmulSplit& p) const {
    const auto prog = build_matmul(s, p);
    // operands at disjoint stick-aligned addresses; timing does not depend on where
    auto extent = [](uint64_t rows, uint64_t ld, uint64_t batch, uint64_t bstride) {
        return ((rows - 1) * ld + ld + (batch - 1) * bstride + 127) / 128 * 128;
    };
    const uint64_t a_size = extent(s.M, s.lda, s.batch, s.batch_a);
    const uint64_t b_size = extent(s.trans_b ? s.N : s.K, s.ldb, s.batch, s.batch_b);
    const uint64_t c_size = extent(s.M, s.ldc, s.batch, s.batch_c);
    const uint64_t bias_size = s.has_bias ? (s.N * isa::dtype_size(s.bias_t) + 127) / 128 * 128 : 0;
    const uint64_t c0 = a_size + b_size, bias0 = c0 + c_size, b2 = bias0 + bias_size;
    const uint64_t cos0 = b2 + (s.gated ? b_size : 0);
    uint64_t table = 0;  // rotary: the cos (and sin) rows of every sequence and position
    if (s.rotary)
        table = ((s.M / s.rot_l - 1) * s.rot_cb + (s.rot_l - 1) * s.rot_cl +
                 s.rot_d * isa::dtype_size(s.rot_t) + 127) /
                128 * 128;
    if (s.has_scale) table = (s.N * isa::dtype_size(s.scale_t) + 127) / 128 * 128;  // scales
    PricedSplit r{p, estimate(s, p), 0, {}};
    try {
        r.stats = pricer_.price(prog, static_cast<uint32_t>(matmul_cores(p)),
                                {0, a_size, c0, bias0, b2, cos0, cos0 + table}, cos0 + 2 * table);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error("matmul plan " + split_name(p) + ": " + e.what());
    }
    r.cycles = r.stats.total_cycles;
    return r;
}

PricedSplit MatmulPlanner::plan(const MatmulShape& s, int exact) const {
    auto c = candidates(s);
    if (c.empty()) throw std::invalid_argument("matmul: no split tiles this shape in sticks");
    PricedSplit best{};
    for (int i = 0; i < exact && i < static_cast<int>(c.size()); ++i) {
        PricedSplit r = price(s, c[i].split);
        if (!best.cycles || r.cycles < best.cycles) best = r;
    }
    // the naive plan is always a candidate: a plan is never slower than it
    try {
        PricedSplit n = naive(s);
        if (n.cycles < best.cycles) best = n;
    } catch (const std::invalid_argument&) {
    }
    return best;
}

PricedSplit MatmulPlanner::naive(const MatmulShape& s) const {
    for (uint32_t gm = config().num_cores; gm >= 1; gm /= 2) {
        const auto f = fit_matmul_split(s, gm, 1, 1, lx_budget(), false);
        if (f) return price(s, *f);
    }
    throw std::invalid_argument("matmul: no pure-M split tiles this shape");
}

}  // namespace spyre::ops
