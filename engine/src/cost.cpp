// SPDX-License-Identifier: MIT
// Cost API (include/spyre/cost.hpp): the formulas the engine charges, and phases priced by the
// engine's own Trace + Timeline replay.
#include "spyre/cost.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "timing.hpp"
#include "util.hpp"

namespace spyre::cost {

using eng::ceil_div;
using eng::kS;

uint64_t lx_sticks(uint64_t addr, uint64_t rows, uint64_t stride, uint64_t row_bytes) {
    if (rows == 0 || row_bytes == 0) return 0;
    auto row = [&](uint64_t a) { return (a % kS + row_bytes + kS - 1) / kS; };
    if (rows == 1 || stride == row_bytes) return (addr % kS + row_bytes * rows + kS - 1) / kS;
    if (stride % kS == 0) return rows * row(addr);
    uint64_t n = 0;
    for (uint64_t i = 0; i < rows; ++i) n += row(addr + i * stride);
    return n;
}

uint64_t mm_cycles(const spyre_engine_config& cfg, isa::DType t, uint64_t m, uint64_t n,
                   uint64_t k) {
    // 8-row x 64-lane tiles over the corelets, one K step per cycle
    const uint64_t tiles = ceil_div(m, cfg.pe_rows) * ceil_div(n, cfg.pe_lanes);
    const uint64_t steps = ceil_div(tiles, cfg.corelets_per_core);
    return t == isa::DType::I8    ? steps * ceil_div(k, cfg.mm_int8_speedup)
           : t == isa::DType::F32 ? steps * k * cfg.mm_fp32_slowdown
                                  : steps * k;
}

double mm_peak_macs_per_cycle(const spyre_engine_config& cfg, isa::DType t) {
    const double base = double(cfg.corelets_per_core) * cfg.pe_rows * cfg.pe_lanes;
    return t == isa::DType::I8    ? base * cfg.mm_int8_speedup
           : t == isa::DType::F32 ? base / cfg.mm_fp32_slowdown
                                  : base;
}

namespace {

// The unary functions the special-function unit evaluates (transcendentals, square roots,
// reciprocals); the rest (copies, sign tricks, roundings) take one pass like an add.
bool vun_is_special(isa::VUn f) {
    using isa::VUn;
    switch (f) {
        case VUn::COPY:
        case VUn::SET:
        case VUn::NEG:
        case VUn::ABS:
        case VUn::RELU:
        case VUn::FLOOR:
        case VUn::CEIL:
        case VUn::TRUNC:
        case VUn::ROUND:
        case VUn::SIGN:
            return false;
        default:
            return true;
    }
}

}  // namespace

uint64_t vec_compute_cycles(const spyre_engine_config& cfg, isa::Op op, uint8_t func,
                            isa::DType dst, isa::DType src, uint64_t rows, uint64_t cols,
                            isa::DType src2) {
    // lanes of both corelets; 32-bit types use the narrower lane count, 64-bit integers two
    // 32-bit lanes each (twice the cycles)
    const uint32_t s2es = src2 != isa::DType::COUNT ? isa::dtype_size(src2) : 0;
    const uint32_t es = std::max({isa::dtype_size(dst), isa::dtype_size(src), s2es});
    const bool wide = es >= 4;
    const uint64_t lanes =
        uint64_t{wide ? cfg.vec_lanes_32 : cfg.vec_lanes_16} * cfg.corelets_per_core;
    uint64_t per_vec = 1;
    if (op == isa::Op::VUN) {
        if (vun_is_special(static_cast<isa::VUn>(func))) per_vec = cfg.vec_special_cycles;
    } else if (op == isa::Op::VBIN && func == static_cast<uint8_t>(isa::VBin::DIV)) {
        per_vec = cfg.vec_special_cycles;
    } else if (op == isa::Op::VINT && (func == static_cast<uint8_t>(isa::VInt::DIV) ||
                                       func == static_cast<uint8_t>(isa::VInt::REM))) {
        per_vec = cfg.vec_special_cycles;  // an iterative divider, like fp DIV
    } else if (op == isa::Op::VRNG) {
        // Philox rounds at the special-function rate; NORMAL adds a log, sqrt and sin/cos
        per_vec = cfg.vec_special_cycles * (func == static_cast<uint8_t>(isa::Rng::NORMAL) ? 2 : 1);
    }
    if (es == 8) per_vec *= 2;
    return ceil_div(rows * cols, lanes) * per_vec;
}

uint64_t vec_cycles(const spyre_engine_config& cfg, uint64_t compute, uint64_t max_sticks) {
    return std::max(compute, ceil_div(max_sticks, cfg.vec_lx_sticks_per_cycle));
}

uint64_t dma_bytes(uint64_t row_bytes, uint64_t rows) {
    return rows * eng::round_up(row_bytes, kS);
}

static double ddr_per_cycle(const spyre_engine_config& cfg) {
    return static_cast<double>(cfg.ddr_bytes_per_s) / static_cast<double>(cfg.clock_hz);
}

uint64_t dma_cycles_alone(const spyre_engine_config& cfg, uint64_t bytes) {
    return dma_cycles_shared(cfg, bytes, 1);
}

uint64_t dma_cycles_shared(const spyre_engine_config& cfg, uint64_t bytes, uint32_t sharers) {
    const double rate = std::min<double>(cfg.dma_port_bytes_per_cycle,
                                         ddr_per_cycle(cfg) / std::max<uint32_t>(sharers, 1));
    return static_cast<uint64_t>(
        std::max(0.0, std::ceil(static_cast<double>(bytes) / rate - 1e-9)));
}

uint64_t ring_send_cycles(const spyre_engine_config& cfg, uint64_t bytes) {
    return ceil_div(bytes, cfg.ring_bytes_per_cycle);
}

uint64_t ring_span(uint32_t ncores, uint64_t members) {
    uint64_t gap = 0, first = 64, prev = 64;
    for (uint32_t i = 0; i < ncores && i < 64; ++i) {
        if (!(members >> i & 1)) continue;
        if (first == 64) first = i;
        if (prev != 64) gap = std::max<uint64_t>(gap, i - prev);
        prev = i;
    }
    if (first == 64 || first == prev) return 0;
    gap = std::max<uint64_t>(gap, first + ncores - prev);  // the wrap-around gap
    return ncores - gap;
}

uint64_t allreduce_cycles(const spyre_engine_config& cfg, uint64_t members, uint64_t bytes,
                          uint64_t hops) {
    // reduce-scatter + all-gather: 2(N-1) steps of B/N bytes, `hops` hop latencies each
    if (members <= 1) return 0;
    const uint64_t steps = 2 * (members - 1);
    return steps * (ceil_div(ceil_div(bytes, members), cfg.ring_bytes_per_cycle) +
                    hops * uint64_t{cfg.ring_hop_latency});
}

// ---------------------------------------------------------------------------------------------
// Phase

struct Phase::Impl {
    const spyre_engine_config cfg;
    uint32_t cores;
    std::vector<eng::Trace> traces;
    std::vector<eng::CollectiveInfo> colls;
    std::vector<eng::MulticastInfo> mcasts;
    Impl(const spyre_engine_config& c, uint32_t n) : cfg(c), cores(n), traces(n) {
        for (auto& t : traces) t.reset(c.queue_depth);
    }
    void unit(uint32_t core, eng::TKind kind, uint8_t u, uint64_t cost, bool latency,
              const eng::LxRange* r, int nr, const eng::LxRange* w, int nw) {
        eng::TOp op;
        op.kind = kind;
        op.unit = u;
        op.latency = latency ? 1 : 0;
        op.cost = cost;
        traces[core].count_issue();
        traces[core].add(op, r, nr, w, nw);
    }
};

static eng::LxRange R(LxSpan s) { return {s.lo, s.hi}; }

Phase::Phase(const spyre_engine_config& cfg, uint32_t cores)
    : impl_(std::make_unique<Impl>(cfg, cores)) {}
Phase::~Phase() = default;

void Phase::issue(uint32_t core, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) impl_->traces[core].count_issue();
}

void Phase::load(uint32_t core, LxSpan lx, uint64_t bytes) {
    const eng::LxRange w = R(lx);
    impl_->unit(core, eng::TKind::Dma, eng::kUnitLoad, bytes, true, nullptr, 0, &w, 1);
}

void Phase::store(uint32_t core, LxSpan lx, uint64_t bytes) {
    const eng::LxRange r = R(lx);
    impl_->unit(core, eng::TKind::Dma, eng::kUnitStore, bytes, true, &r, 1, nullptr, 0);
}

void Phase::mm(uint32_t core, uint64_t cycles, LxSpan a, LxSpan b, LxSpan c, bool acc) {
    const eng::LxRange r[3] = {R(a), R(b), R(c)};
    impl_->unit(core, eng::TKind::Unit, eng::kUnitMatrix, cycles, true, r, acc ? 3 : 2, &r[2], 1);
}

void Phase::vec(uint32_t core, uint64_t cycles, const std::vector<LxSpan>& reads, LxSpan write) {
    std::vector<eng::LxRange> r;
    for (const LxSpan& s : reads) r.push_back(R(s));
    const eng::LxRange w = R(write);
    impl_->unit(core, eng::TKind::Unit, eng::kUnitVector, cycles, true, r.data(),
                static_cast<int>(r.size()), &w, 1);
}

void Phase::barrier(uint64_t members) {
    eng::CollectiveInfo ci;
    ci.members = members;
    ci.cycles = impl_->cfg.barrier_latency;
    impl_->colls.push_back(ci);
    for (uint32_t i = 0; i < impl_->cores; ++i)
        if (members >> i & 1) {
            impl_->traces[i].count_issue();
            impl_->traces[i].add_sync(eng::TKind::Collective, 0, impl_->colls.size() - 1);
        }
}

void Phase::allreduce(uint64_t members, uint64_t bytes) {
    const uint64_t n = std::popcount(members);
    const uint64_t hops =
        n > 1 ? std::max<uint64_t>(1, ring_span(impl_->cores, members) / (n - 1)) : 0;
    eng::CollectiveInfo ci;
    ci.members = members;
    ci.cycles = ci.busy_ring = allreduce_cycles(impl_->cfg, n, bytes, hops);
    impl_->colls.push_back(ci);
    for (uint32_t i = 0; i < impl_->cores; ++i)
        if (members >> i & 1) {
            impl_->traces[i].count_issue();
            impl_->traces[i].add_sync(eng::TKind::Collective, 0, impl_->colls.size() - 1);
        }
}

void Phase::multicast(uint64_t members, const std::vector<LxSpan>& lx, uint64_t bytes) {
    eng::MulticastInfo mi;
    mi.members = members;
    mi.bytes = bytes;
    mi.extra_latency = ring_span(impl_->cores, members) * uint64_t{impl_->cfg.ring_hop_latency};
    impl_->mcasts.push_back(mi);
    size_t k = 0;
    for (uint32_t i = 0; i < impl_->cores; ++i) {
        if (!(members >> i & 1)) continue;
        eng::TOp op;
        op.kind = eng::TKind::Multicast;
        op.unit = eng::kUnitLoad;
        op.cost = bytes;
        op.aux = impl_->mcasts.size() - 1;
        const eng::LxRange w = k < lx.size() ? R(lx[k]) : eng::LxRange{0, 0};
        ++k;
        impl_->traces[i].count_issue();
        impl_->traces[i].add(op, nullptr, 0, &w, 1);
    }
}

void Phase::halt() {
    for (auto& t : impl_->traces) {
        t.count_issue();
        t.add_sync(eng::TKind::Halt, 0, 0);
    }
}

PhaseResult Phase::run() const {
    std::vector<const eng::Trace*> tr;
    for (const auto& t : impl_->traces) tr.push_back(&t);
    std::vector<eng::CoreTiming> out;
    eng::Timeline tl(impl_->cfg);
    PhaseResult r;
    r.cycles = tl.run(tr, 0, impl_->colls, impl_->mcasts, impl_->cfg.launch_overhead_cycles, out);
    r.cores.resize(impl_->cores);
    for (uint32_t i = 0; i < impl_->cores; ++i) {
        auto& s = r.cores[i];
        s.busy[SPYRE_UNIT_SCALAR] = out[i].busy[eng::kUnitScalar];
        s.busy[SPYRE_UNIT_DMA] = out[i].busy[eng::kUnitLoad] + out[i].busy[eng::kUnitStore];
        s.busy[SPYRE_UNIT_MATRIX] = out[i].busy[eng::kUnitMatrix];
        s.busy[SPYRE_UNIT_VECTOR] = out[i].busy[eng::kUnitVector];
        s.busy[SPYRE_UNIT_RING] = out[i].busy[eng::kUnitRing];
        s.dma_load_busy = out[i].busy[eng::kUnitLoad];
        s.dma_store_busy = out[i].busy[eng::kUnitStore];
        s.wait_cycles = out[i].wait_cycles;
        s.end_cycle = out[i].end_cycle;
    }
    return r;
}

}  // namespace spyre::cost
