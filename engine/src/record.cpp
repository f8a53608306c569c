// SPDX-License-Identifier: MIT
// Cycle model, engine side: timed operations are recorded in the core's trace while the job runs
// functionally; after the job the Timeline replays all traces (timing.hpp) and the results get
// the per-core timing. A cheap lower bound of each core's cycles stops runaway jobs early.
#include <algorithm>

#include "engine_impl.hpp"

namespace spyre::eng {

bool Engine::charge(Core& c, int unit, uint64_t cycles) {
    uint64_t& u = c.unit_cost[unit];
    u = cycles > UINT64_MAX - u ? UINT64_MAX : u + cycles;
    if (u > max_cycles_)
        return fail(c, SPYRE_ENGINE_ERR_CYCLE_BUDGET,
                    "cycle budget %llu exceeded (unit %d alone needs more)",
                    (unsigned long long)max_cycles_, unit);
    return true;
}

bool Engine::unit_op(Core& c, int unit, uint64_t dep, uint64_t cost, uint32_t latency,
                     const Range* reads, int nr, const Range* writes, int nw, uint64_t* end_out,
                     int lane) {
    (void)dep;
    if (end_out) *end_out = 0;
    TOp op;
    op.kind = TKind::Unit;
    op.unit = static_cast<uint8_t>(unit);
    op.lane = static_cast<uint8_t>(lane >= 0 ? lane + 1 : 0);
    op.latency = latency ? 1 : 0;
    op.cost = cost;
    c.trace.add(op, reads, nr, writes, nw);
    for (int i = 0; i < nw; ++i) c.lx_hw = std::max(c.lx_hw, writes[i].hi);
    return charge(c, unit, cost);
}

bool Engine::dma_op(Core& c, bool is_load, uint64_t bytes, const Range& lx) {
    TOp op;
    op.kind = TKind::Dma;
    op.unit = is_load ? kUnitLoad : kUnitStore;
    op.latency = 1;
    op.cost = bytes;
    if (is_load) {
        c.trace.add(op, nullptr, 0, &lx, 1);
        c.lx_hw = std::max(c.lx_hw, lx.hi);
    } else {
        c.trace.add(op, &lx, 1, nullptr, 0);
    }
    // no transfer beats the port or the whole DDR bandwidth
    const double per_cycle =
        std::min<double>(cfg_.dma_port_bytes_per_cycle, timeline_.ddr_bytes_per_cycle());
    return charge(c, op.unit, static_cast<uint64_t>(static_cast<double>(bytes) / per_cycle));
}

uint64_t Engine::replay(spyre_engine_result& res) {
    std::vector<const Trace*> traces(ncores_);
    for (uint32_t i = 0; i < ncores_; ++i) traces[i] = &cores_[i].trace;
    std::vector<CoreTiming> t;
    uint64_t total = 0;
    const ReplayCache::Inputs in{traces, msg_count_, colls_, mcasts_};
    if (!replays_.find(in, t, total)) {
        total = timeline_.run(traces, msg_count_, colls_, mcasts_, cfg_.launch_overhead_cycles, t);
        replays_.store(in, t, total);
    }
    for (uint32_t i = 0; i < ncores_; ++i) {
        spyre_engine_core_stats& s = cores_[i].stats;
        s.busy[SPYRE_UNIT_SCALAR] = t[i].busy[kUnitScalar];
        s.busy[SPYRE_UNIT_DMA] = t[i].busy[kUnitLoad] + t[i].busy[kUnitStore];
        s.busy[SPYRE_UNIT_MATRIX] = t[i].busy[kUnitMatrix];
        s.busy[SPYRE_UNIT_VECTOR] = t[i].busy[kUnitVector];
        s.busy[SPYRE_UNIT_RING] = t[i].busy[kUnitRing];
        s.dma_load_busy = t[i].busy[kUnitLoad];
        s.dma_store_busy = t[i].busy[kUnitStore];
        s.wait_cycles = t[i].wait_cycles;
        s.end_cycle = t[i].end_cycle;
    }
    res.total_cycles = total;
    return total;
}

}  // namespace spyre::eng
