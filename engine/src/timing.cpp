// SPDX-License-Identifier: MIT
// Cycle model: unit issue with queues, LX hazards (scoreboard) and DDR transfer time.
#include <algorithm>

#include "engine_impl.hpp"

namespace spyre::eng {

uint64_t Engine::hazard(const Core& c, const Range* reads, int nr, const Range* writes,
                        int nw) const {
    uint64_t ready = 0;
    for (const SbEntry& e : c.sb) {
        if (e.ready <= ready) continue;
        for (int i = 0; i < nr; ++i)
            if (e.write && reads[i].lo < e.hi && e.lo < reads[i].hi) ready = e.ready;
        for (int i = 0; i < nw; ++i)
            if (writes[i].lo < e.hi && e.lo < writes[i].hi) ready = e.ready;
    }
    return ready;
}

// Issues one operation on a unit: waits for a queue slot, the unit, `dep` and LX hazards; the
// latency is charged when the unit starts from idle. Records the LX ranges in the scoreboard.
bool Engine::unit_op(Core& c, int unit, uint64_t dep, uint64_t cost, uint32_t latency,
                     const Range* reads, int nr, const Range* writes, int nw, uint64_t* end_out,
                     int lane) {
    auto& q = c.q[unit];
    c.t = std::max(c.t, q[c.qh[unit]]);  // queue full: issue stalls
    uint64_t& free_at = lane >= 0 ? c.ring_free[lane] : c.unit_free[unit];
    uint64_t start = std::max({c.t, free_at, dep, hazard(c, reads, nr, writes, nw)});
    if (start > free_at) cost += latency;
    uint64_t end = start + cost;
    if (end > max_cycles_ || end < start)
        return fail(c, SPYRE_ENGINE_ERR_CYCLE_BUDGET, "cycle budget %llu exceeded (cycle %llu)",
                    (unsigned long long)max_cycles_, (unsigned long long)end);
    free_at = end;
    c.unit_free[unit] = std::max(c.unit_free[unit], end);
    c.stats.busy[unit] += cost;
    q[c.qh[unit]] = end;
    c.qh[unit] = (c.qh[unit] + 1) % q.size();
    // prune finished entries, then record this op's ranges
    std::erase_if(c.sb, [&](const SbEntry& e) { return e.ready <= c.t; });
    for (int i = 0; i < nr; ++i)
        if (reads[i].hi > reads[i].lo) c.sb.push_back({reads[i].lo, reads[i].hi, end, false});
    for (int i = 0; i < nw; ++i)
        if (writes[i].hi > writes[i].lo) {
            c.sb.push_back({writes[i].lo, writes[i].hi, end, true});
            c.lx_hw = std::max(c.lx_hw, writes[i].hi);
        }
    if (end_out) *end_out = end;
    return true;
}

uint64_t Engine::dma_cycles(uint64_t bytes) const {
    // The job's cores share the DDR bandwidth equally; one core is limited by its port.
    u128 num = u128{bytes} * ncores_ * cfg_.clock_hz;
    u128 share = (num + cfg_.ddr_bytes_per_s - 1) / cfg_.ddr_bytes_per_s;
    uint64_t port = ceil_div(bytes, cfg_.dma_port_bytes_per_cycle);
    return std::max<uint64_t>(port, share > UINT64_MAX / 2 ? UINT64_MAX / 2 : (uint64_t)share);
}

}  // namespace spyre::eng
