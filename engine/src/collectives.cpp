// SPDX-License-Identifier: MIT
// Ring transfers (SEND/RECV) and the collectives over core groups released by the scheduler:
// BAR, ALLRED and MCLOAD (multicast load: one DDR read delivered to every member).
#include "engine_impl.hpp"
#include "spyre/cost.hpp"

namespace spyre::eng {

bool Engine::exec_send(Core& c, const Instr& in) {
    const uint64_t lx = c.r[in.a], len = c.r[in.c];
    const int dir = in.func;
    Range r;
    if (len > lx_usable_)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "SEND: %llu bytes", (unsigned long long)len);
    if (!check_lx(c, "SEND", lx, 1, 0, len, &r)) return false;
    uint64_t pending = len;
    for (const Msg& m : c.out[dir]) pending += m.data.size();
    if (pending > cfg_.ring_max_bytes)
        return fail(c, SPYRE_ENGINE_ERR_RING, "SEND: more than %llu bytes undelivered",
                    (unsigned long long)cfg_.ring_max_bytes);
    if (!unit_op(c, SPYRE_UNIT_RING, 0, cost::ring_send_cycles(cfg_, len), 0, &r, 1, nullptr, 0,
                 nullptr, dir))
        return false;
    c.stats.ring_bytes += len;
    lx_touch(c, r);
    Msg m;
    m.data.assign(c.lx + lx, c.lx + lx + len);
    m.id = c.trace.ops().size() - 1;        // the send's record; the scheduler numbers it
    c.trace.ops().back().aux = kNoMessage;  // until delivered
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
    c.trace.add_sync(TKind::Recv, hazards(c, nullptr, 0, &w, 1), m.id);
    lx_touch(c, w);
    if (len && !timing_only_) std::memcpy(c.lx + lx, m.data.data(), len);
    c.lx_hw = std::max(c.lx_hw, w.hi);
    c.in_bytes[dir] -= len;
    c.in[dir].pop_front();
    return 1;
}

uint64_t Engine::group_of(const Core& c) const {
    const Instr& in = prog_->code[c.pc];
    const uint8_t reg = static_cast<Op>(in.op) == Op::BAR      ? in.b
                        : static_cast<Op>(in.op) == Op::ALLRED ? in.d
                                                               : in.func;
    const uint64_t all = ncores_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << ncores_) - 1;
    const uint64_t g = c.r[reg];
    return g == 0 ? all : g;
}

uint64_t Engine::ring_span(uint64_t members) const { return cost::ring_span(ncores_, members); }

bool Engine::release_group(const std::vector<Core*>& members, Failure& f) {
    switch (members[0]->st) {
        case St::AtBarrier:
            release_barrier(members);
            return true;
        case St::AtAllred:
            return release_allred(members, f);
        default:
            return release_mcload(members, f);
    }
}

// Records the collective in every member's trace and lets the members run on.
static void resume(const std::vector<Core*>& members, uint64_t id) {
    for (Core* c : members) {
        c->trace.add_sync(TKind::Collective, 0, id);
        c->pc++;
        c->st = St::Running;
    }
}

void Engine::release_barrier(const std::vector<Core*>& members) {
    CollectiveInfo ci;
    ci.members = members[0]->group;
    ci.cycles = cfg_.barrier_latency;
    colls_.push_back(ci);
    resume(members, colls_.size() - 1);
}

bool Engine::release_allred(const std::vector<Core*>& members, Failure& f) {
    const Core& c0 = *members[0];
    const Instr& i0 = prog_->code[c0.pc];
    const uint64_t count = c0.r[i0.c];
    for (Core* c : members) {
        const Instr& in = prog_->code[c->pc];
        if (in.dt != i0.dt || in.func != i0.func || c->r[in.c] != count) {
            set_fail(f, SPYRE_ENGINE_ERR_COLLECTIVE_MISMATCH, static_cast<int>(c->id), c->pc,
                     "ALLRED type/function/count differ from core %u", c0.id);
            return false;
        }
    }
    const DType t = static_cast<DType>(i0.dt);
    const uint64_t es = isa::dtype_size(t), bytes = count * es;
    if (bytes > lx_usable_) {
        set_fail(f, SPYRE_ENGINE_ERR_TOO_LARGE, static_cast<int>(c0.id), c0.pc,
                 "ALLRED of %llu elements", (unsigned long long)count);
        return false;
    }
    std::vector<Range> src(members.size()), dst(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
        Core& c = *members[i];
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
    // ring all-reduce (reduce-scatter + all-gather): 2(N-1) steps of B/N bytes per core, each
    // step as many hops as the widest gap between members
    const uint64_t nc = members.size();
    const uint64_t hops = nc > 1 ? std::max<uint64_t>(1, ring_span(c0.group) / (nc - 1)) : 0;
    const uint64_t chunk = ceil_div(bytes, nc);
    const uint64_t ring = cost::allreduce_cycles(cfg_, nc, bytes, hops);
    std::vector<float> acc(count), x(count);
    for (size_t i = 0; i < members.size(); ++i) {
        lx_touch(*members[i], src[i]);
        lx_touch(*members[i], dst[i]);
    }
    for (size_t i = 0; i < members.size() && !timing_only_; ++i) {
        kern::load_row(t, members[i]->lx + src[i].lo, count, i == 0 ? acc.data() : x.data());
        if (i) kern::combine(static_cast<isa::Red>(i0.func), acc.data(), x.data(), count);
    }
    for (size_t i = 0; i < members.size(); ++i) {
        Core& c = *members[i];
        if (!timing_only_) kern::store_row(t, c.lx + dst[i].lo, count, acc.data());
        c.lx_hw = std::max(c.lx_hw, dst[i].hi);
        c.stats.ring_bytes += nc > 1 ? 2 * (nc - 1) * chunk : 0;
    }
    CollectiveInfo ci;
    ci.members = c0.group;
    ci.cycles = ring;
    ci.busy_ring = ring;
    colls_.push_back(ci);
    resume(members, colls_.size() - 1);
    return true;
}

// MCLOAD: every member names the same DDR source (address, length, descriptor); each gets the
// data at its own LX address. One DDR read, delivered over the ring.
bool Engine::release_mcload(const std::vector<Core*>& members, Failure& f) {
    std::vector<DmaDesc> d(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
        Core& c = *members[i];
        if (!decode_dma(c, prog_->code[c.pc], true, "MCLOAD", d[i])) {
            f = c.fail;
            return false;
        }
        const DmaDesc& a = d[0];
        const DmaDesc& b = d[i];
        if (a.ddr != b.ddr || a.len != b.len || a.n1 != b.n1 || a.ds1 != b.ds1 || a.n2 != b.n2 ||
            a.ds2 != b.ds2) {
            set_fail(f, SPYRE_ENGINE_ERR_COLLECTIVE_MISMATCH, static_cast<int>(c.id), c.pc,
                     "MCLOAD source differs from core %u's", members[0]->id);
            return false;
        }
    }
    MulticastInfo mi;
    mi.members = members[0]->group;
    mi.bytes = d[0].bytes;
    mi.extra_latency = ring_span(mi.members) * uint64_t{cfg_.ring_hop_latency};
    mcasts_.push_back(mi);
    const uint64_t id = mcasts_.size() - 1;
    for (size_t i = 0; i < members.size(); ++i) {
        Core& c = *members[i];
        if (d[i].bytes) {
            TOp op;
            op.kind = TKind::Multicast;
            op.unit = kUnitLoad;
            op.cost = d[i].bytes;
            op.aux = id;
            c.trace.add(op, nullptr, 0, &d[i].lx_range, 1);
            c.lx_hw = std::max(c.lx_hw, d[i].lx_range.hi);
            move_dma(c, d[i], true);
        }
        c.pc++;
        c.st = St::Running;
    }
    members[0]->stats.ddr_read_bytes += mi.bytes;  // read once, charged to the first member
    return true;
}

}  // namespace spyre::eng
