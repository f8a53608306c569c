// SPDX-License-Identifier: MIT
// Ring transfers (SEND/RECV) and the collectives released by the scheduler (BAR, ALLRED).
#include "engine_impl.hpp"

namespace spyre::eng {

bool Engine::exec_send(Core& c, const Instr& in) {
    const uint64_t lx = c.r[in.a], len = c.r[in.c];
    const int dir = in.func;
    Range r;
    if (len > cfg_.lx_bytes)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "SEND: %llu bytes", (unsigned long long)len);
    if (!check_lx(c, "SEND", lx, 1, 0, len, &r)) return false;
    uint64_t pending = len;
    for (const Msg& m : c.out[dir]) pending += m.data.size();
    if (pending > cfg_.ring_max_bytes)
        return fail(c, SPYRE_ENGINE_ERR_RING, "SEND: more than %llu bytes undelivered",
                    (unsigned long long)cfg_.ring_max_bytes);
    uint64_t end = 0;
    if (!unit_op(c, SPYRE_UNIT_RING, 0, ceil_div(len, cfg_.ring_bytes_per_cycle), 0, &r, 1, nullptr,
                 0, &end, dir))
        return false;
    c.stats.ring_bytes += len;
    lx_touch(c, r);
    Msg m;
    m.data.assign(c.lx + lx, c.lx + lx + len);
    m.arrival = end + cfg_.ring_hop_latency;
    m.pc = c.pc;
    c.out[dir].push_back(std::move(m));
    return true;
}

int Engine::exec_recv(Core& c, const Instr& in) {
    const int dir = in.func;
    if (c.in[dir].empty()) return 0;
    const uint64_t lx = c.r[in.a], len = c.r[in.c];
    Msg& m = c.in[dir].front();
    if (m.data.size() != len) {
        fail(c, SPYRE_ENGINE_ERR_RING, "RECV of %llu bytes, but the message has %zu bytes",
             (unsigned long long)len, m.data.size());
        return -1;
    }
    Range w;
    if (!check_lx(c, "RECV", lx, 1, 0, len, &w)) return -1;
    // the core stalls until the message has arrived and the destination is free
    uint64_t ready = std::max(m.arrival, hazard(c, nullptr, 0, &w, 1));
    if (ready > c.t) {
        c.stats.wait_cycles += ready - c.t;
        c.t = ready;
    }
    lx_touch(c, w);
    if (len) std::memcpy(c.lx + lx, m.data.data(), len);
    c.lx_hw = std::max(c.lx_hw, w.hi);
    c.in_bytes[dir] -= len;
    c.in[dir].pop_front();
    return 1;
}

void Engine::release_barrier(std::vector<Core*>& live) {
    uint64_t rel = 0;
    for (Core* c : live) rel = std::max(rel, c->arrive);
    rel += cfg_.barrier_latency;
    for (Core* c : live) {
        c->stats.wait_cycles += rel - c->arrive;
        c->t = rel;
        c->pc++;
        c->st = St::Running;
    }
}

bool Engine::release_allred(std::vector<Core*>& live, Failure& f) {
    const Core& c0 = *live[0];
    const Instr& i0 = prog_->code[c0.pc];
    const uint64_t count = c0.r[i0.c];
    for (Core* c : live) {
        const Instr& in = prog_->code[c->pc];
        if (in.dt != i0.dt || in.func != i0.func || c->r[in.c] != count) {
            set_fail(f, SPYRE_ENGINE_ERR_COLLECTIVE_MISMATCH, static_cast<int>(c->id), c->pc,
                     "ALLRED type/function/count differ from core %u", c0.id);
            return false;
        }
    }
    const DType t = static_cast<DType>(i0.dt);
    const uint64_t es = isa::dtype_size(t), bytes = count * es;
    if (bytes > cfg_.lx_bytes) {
        set_fail(f, SPYRE_ENGINE_ERR_TOO_LARGE, static_cast<int>(c0.id), c0.pc,
                 "ALLRED of %llu elements", (unsigned long long)count);
        return false;
    }
    std::vector<Range> src(live.size()), dst(live.size());
    for (size_t i = 0; i < live.size(); ++i) {
        Core& c = *live[i];
        const Instr& in = prog_->code[c.pc];
        if (c.r[in.a] % es || c.r[in.b] % es) {
            fail(c, SPYRE_ENGINE_ERR_MISALIGNED, "ALLRED: addresses not element aligned");
            f = c.fail;
            return false;
        }
        if (!check_lx(c, "ALLRED src", c.r[in.b], 1, 0, bytes, &src[i]) ||
            !check_lx(c, "ALLRED dst", c.r[in.a], 1, 0, bytes, &dst[i])) {
            f = c.fail;
            return false;
        }
    }
    // ring all-reduce (reduce-scatter + all-gather): 2(N-1) steps of B/N bytes per core
    const uint64_t nc = live.size();
    const uint64_t chunk = ceil_div(bytes, nc);
    const uint64_t ring = nc > 1 ? 2 * (nc - 1) * ceil_div(chunk, cfg_.ring_bytes_per_cycle) : 0;
    const uint64_t lat = nc > 1 ? 2 * (nc - 1) * uint64_t{cfg_.ring_hop_latency} : 0;
    uint64_t start = 0;
    for (Core* c : live) start = std::max(start, c->arrive);
    const uint64_t end = start + ring + lat;
    std::vector<float> acc(count), x(count);
    for (size_t i = 0; i < live.size(); ++i) {
        lx_touch(*live[i], src[i]);
        lx_touch(*live[i], dst[i]);
    }
    for (size_t i = 0; i < live.size(); ++i) {
        kern::load_row(t, live[i]->lx + src[i].lo, count, i == 0 ? acc.data() : x.data());
        if (i) kern::combine(static_cast<isa::Red>(i0.func), acc.data(), x.data(), count);
    }
    for (size_t i = 0; i < live.size(); ++i) {
        Core& c = *live[i];
        kern::store_row(t, c.lx + dst[i].lo, count, acc.data());
        c.lx_hw = std::max(c.lx_hw, dst[i].hi);
        c.stats.wait_cycles += start - c.arrive;
        c.stats.busy[SPYRE_UNIT_RING] += ring + lat;
        c.stats.ring_bytes += nc > 1 ? 2 * (nc - 1) * chunk : 0;
        c.unit_free[SPYRE_UNIT_RING] = std::max(c.unit_free[SPYRE_UNIT_RING], end);
        c.t = end;
        c.pc++;
        c.st = St::Running;
    }
    return true;
}

}  // namespace spyre::eng
