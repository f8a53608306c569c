// SPDX-License-Identifier: MIT
// Cycle model: trace recording (functional side) and the discrete-event replay (Timeline).
#include "timing.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <queue>
#include <unordered_map>

namespace spyre::eng {

namespace {

inline bool overlap(const LxRange& a, const LxRange& b) { return a.lo < b.hi && b.lo < a.hi; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Trace

void Trace::reset(uint32_t queue_depth, std::atomic<uint64_t>* job_records) {
    ops_.clear();
    // a big job's records are not kept past the next one; a small job's storage is reused
    if (ops_.capacity() > kKeptRecords) ops_.shrink_to_fit();
    job_records_ = job_records;
    for (auto& unit : slots_)
        for (auto& s : unit) s.used = false;  // add() fills a slot completely
    for (auto& h : head_) h = 0;
    qd_ = std::clamp(queue_depth, 1u, kMaxQueueDepth);
    pending_issue_ = 0;
}

void Trace::trim() {
    ops_.clear();
    if (ops_.capacity() > kKeptRecords) ops_.shrink_to_fit();
}

uint64_t Trace::hazards(const LxRange* reads, int nr, const LxRange* writes, int nw) const {
    uint64_t deps = 0;
    for (uint32_t u = 0; u < kTUnits; ++u) {
        for (uint32_t s = 0; s < qd_; ++s) {
            const Slot& e = slots_[u][s];
            if (!e.used) continue;
            bool hit = false;
            // read after write
            for (int i = 0; i < nr && !hit; ++i) hit = e.has_w && overlap(reads[i], e.w);
            // write after read, write after write
            for (int i = 0; i < nw && !hit; ++i) {
                hit = e.has_w && overlap(writes[i], e.w);
                for (int j = 0; j < e.nr && !hit; ++j) hit = overlap(writes[i], e.r[j]);
            }
            if (hit) deps |= uint64_t{1} << (u * kMaxQueueDepth + s);
        }
    }
    return deps;
}

void Trace::add(TOp op, const LxRange* reads, int nr, const LxRange* writes, int nw) {
    op.deps = hazards(reads, nr, writes, nw);
    op.issue = pending_issue_;
    pending_issue_ = 0;
    Slot& s = slots_[op.unit][head_[op.unit]];
    s = Slot{};
    s.used = true;
    for (int i = 0; i < nr && s.nr < 3; ++i)
        if (reads[i].hi > reads[i].lo) s.r[s.nr++] = reads[i];
    if (nw > 0 && writes[0].hi > writes[0].lo) {
        s.w = writes[0];
        s.has_w = true;
    }
    head_[op.unit] = (head_[op.unit] + 1) % qd_;
    ops_.push_back(op);
    if (job_records_) job_records_->fetch_add(1, std::memory_order_relaxed);
}

void Trace::add_sync(TKind kind, uint64_t deps, uint64_t aux) {
    TOp op;
    op.kind = kind;
    op.deps = deps;
    op.aux = aux;
    op.issue = pending_issue_;
    pending_issue_ = 0;
    ops_.push_back(op);
    if (job_records_) job_records_->fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Timeline

namespace {

constexpr uint64_t kUnknown = UINT64_MAX;
constexpr int64_t kNone = -1;

struct Pending {
    uint32_t op;
    uint64_t t_issue;
    int64_t prev;  // previous op on the same unit (or ring lane)
    int64_t deps[kTUnits * kMaxQueueDepth];
    uint32_t ndeps;
};

struct CoreSim {
    const std::vector<TOp>* ops = nullptr;
    uint32_t id = 0;
    size_t next = 0;
    bool issue_applied = false;
    bool done = false;     // replayed to its end (Halt or end of a failed job's trace)
    bool waiting = false;  // at a collective, arrived, not yet released
    uint64_t t = 0;
    uint64_t arrive = 0;
    std::vector<uint64_t> end;  // per op: end cycle, kUnknown until known
    int64_t slot_op[kTUnits][kMaxQueueDepth];
    uint32_t head[kTUnits] = {};
    int64_t last_on_unit[kTUnits];
    int64_t last_on_lane[2] = {kNone, kNone};
    std::vector<Pending> pending;
    CoreTiming* out = nullptr;
};

struct Transfer {
    double remaining;
    double cap;  // bytes per cycle at most (the port or the ring)
    double rate = 0;
    uint64_t id;  // activation order: ties and determinism
    // who waits: a single op of a core, or every member of a multicast
    int32_t core;
    uint32_t op;
    int64_t mcast;  // multicast instance or -1
};

struct Activation {
    uint64_t time;
    uint64_t seq;
    int32_t core;
    uint32_t op;
    int64_t mcast;
    bool operator>(const Activation& o) const {
        return time != o.time ? time > o.time : seq > o.seq;
    }
};

class Replay {
  public:
    Replay(const spyre_engine_config& cfg, double ddr, const std::vector<const Trace*>& traces,
           uint64_t msg_count, const std::vector<CollectiveInfo>& colls,
           const std::vector<MulticastInfo>& mcasts, uint64_t start, std::vector<CoreTiming>& out)
        : cfg_(cfg), ddr_(ddr), colls_(colls), mcasts_(mcasts) {
        qd_ = std::clamp(cfg.queue_depth, 1u, kMaxQueueDepth);
        msg_arrival_.assign(msg_count, kUnknown);
        msg_waiter_.assign(msg_count, -1);
        coll_arrived_.assign(colls.size(), 0);
        coll_max_.assign(colls.size(), 0);
        mc_arrived_.assign(mcasts.size(), 0);
        mc_max_.assign(mcasts.size(), 0);
        mc_member_op_.assign(mcasts.size(), std::vector<int64_t>(traces.size(), kNone));
        mc_member_start_.assign(mcasts.size(), std::vector<uint64_t>(traces.size(), 0));
        out.assign(traces.size(), CoreTiming{});
        cores_.resize(traces.size());
        for (size_t i = 0; i < traces.size(); ++i) {
            CoreSim& c = cores_[i];
            c.ops = &traces[i]->ops();
            c.id = static_cast<uint32_t>(i);
            c.t = start;
            c.end.assign(c.ops->size(), kUnknown);
            for (auto& u : c.slot_op)
                for (auto& s : u) s = kNone;
            for (auto& l : c.last_on_unit) l = kNone;
            c.out = &out[i];
        }
    }

    uint64_t run() {
        for (auto& c : cores_) wake(c.id);
        drain_worklist();
        while (!heap_.empty() || !active_.empty()) {
            // next event: an activation or the earliest completion
            uint64_t t_act = heap_.empty() ? kUnknown : heap_.top().time;
            uint64_t t_done = kUnknown;
            size_t done_idx = 0;
            for (size_t j = 0; j < active_.size(); ++j) {
                const Transfer& x = active_[j];
                const double cyc = std::max(0.0, std::ceil(x.remaining / x.rate - 1e-9));
                const uint64_t fin = now_ + static_cast<uint64_t>(cyc);
                if (fin < t_done || (fin == t_done && x.id < active_[done_idx].id)) {
                    t_done = fin;
                    done_idx = j;
                }
            }
            if (t_act <= t_done) {
                advance(t_act);
                Activation a = heap_.top();
                heap_.pop();
                start_transfer(a);
            } else {
                advance(t_done);
                Transfer x = active_[done_idx];
                active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(done_idx));
                rates();
                finish_transfer(x, t_done);
            }
            drain_worklist();
        }
        uint64_t total = 0;
        for (auto& c : cores_) {
            uint64_t end = c.t;
            for (uint32_t u = 0; u < kTUnits; ++u)
                if (c.last_on_unit[u] != kNone && c.end[c.last_on_unit[u]] != kUnknown)
                    end = std::max(end, c.end[c.last_on_unit[u]]);
            for (int64_t l : c.last_on_lane)
                if (l != kNone && c.end[l] != kUnknown) end = std::max(end, c.end[l]);
            c.out->end_cycle = end;
            total = std::max(total, end);
        }
        return total;
    }

  private:
    uint32_t latency_of(uint8_t unit) const {
        switch (unit) {
            case kUnitLoad:
            case kUnitStore:
                return cfg_.dma_latency;
            case kUnitMatrix:
                return cfg_.mm_fill_latency;
            case kUnitVector:
                return cfg_.vec_latency;
            default:
                return 0;
        }
    }

    void wake(uint32_t core) { work_.push_back(core); }

    void drain_worklist() {
        while (!work_.empty()) {
            const uint32_t id = work_.back();
            work_.pop_back();
            pump(cores_[id]);
        }
    }

    // Advances a core as far as its known times allow.
    void pump(CoreSim& c) {
        for (bool progress = true; progress;) {
            progress = resolve_pending(c);
            progress |= issue(c);
        }
    }

    bool known(const CoreSim& c, int64_t op) const { return op == kNone || c.end[op] != kUnknown; }
    uint64_t end_of(const CoreSim& c, int64_t op) const { return op == kNone ? 0 : c.end[op]; }

    // Issues the next record(s); returns whether anything happened.
    bool issue(CoreSim& c) {
        bool any = false;
        while (!c.done && !c.waiting && c.next < c.ops->size()) {
            const uint32_t i = static_cast<uint32_t>(c.next);
            const TOp& op = (*c.ops)[i];
            if (!c.issue_applied) {
                c.t += op.issue;
                c.out->busy[kUnitScalar] += op.issue;
                c.issue_applied = true;
            }
            if (!issue_one(c, i, op)) return any;
            c.issue_applied = false;
            ++c.next;
            any = true;
        }
        if (!c.done && c.next >= c.ops->size() && !c.waiting) c.done = true;  // failed job
        return any;
    }

    // Deps of a record as op indices (the queue slots' occupants at its issue).
    uint32_t dep_ops(const CoreSim& c, uint64_t mask, int64_t* out) const {
        uint32_t n = 0;
        while (mask) {
            const int b = __builtin_ctzll(mask);
            mask &= mask - 1;
            const int64_t op = c.slot_op[b / kMaxQueueDepth][b % kMaxQueueDepth];
            if (op != kNone) out[n++] = op;
        }
        return n;
    }

    bool deps_known(const CoreSim& c, const int64_t* d, uint32_t n, uint64_t* ready) const {
        uint64_t r = 0;
        for (uint32_t k = 0; k < n; ++k) {
            if (c.end[d[k]] == kUnknown) return false;
            r = std::max(r, c.end[d[k]]);
        }
        *ready = r;
        return true;
    }

    uint64_t units_drained(const CoreSim& c, bool* ok) const {
        uint64_t a = c.t;
        *ok = true;
        for (uint32_t u = 0; u < kTUnits; ++u) {
            if (!known(c, c.last_on_unit[u]))
                *ok = false;
            else
                a = std::max(a, end_of(c, c.last_on_unit[u]));
        }
        for (int64_t l : c.last_on_lane) {
            if (!known(c, l))
                *ok = false;
            else
                a = std::max(a, end_of(c, l));
        }
        return a;
    }

    bool issue_one(CoreSim& c, uint32_t i, const TOp& op) {
        switch (op.kind) {
            case TKind::Unit:
            case TKind::Dma:
            case TKind::Multicast: {
                const uint32_t s = c.head[op.unit];
                const int64_t occupant = c.slot_op[op.unit][s];
                if (!known(c, occupant)) return false;  // queue full: issue stalls
                c.t = std::max(c.t, end_of(c, occupant));
                Pending p{};
                p.op = i;
                p.t_issue = c.t;
                p.ndeps = dep_ops(c, op.deps, p.deps);
                int64_t& last = op.lane ? c.last_on_lane[op.lane - 1] : c.last_on_unit[op.unit];
                p.prev = last;
                last = i;
                if (op.lane) c.last_on_unit[op.unit] = i;
                c.slot_op[op.unit][s] = i;
                c.head[op.unit] = (s + 1) % qd_;
                c.pending.push_back(p);
                return true;
            }
            case TKind::Wait:
            case TKind::Recv: {
                int64_t d[kTUnits * kMaxQueueDepth];
                const uint32_t n = dep_ops(c, op.deps, d);
                uint64_t ready = 0;
                if (!deps_known(c, d, n, &ready)) return false;
                if (op.kind == TKind::Recv) {
                    if (op.aux >= msg_arrival_.size()) return false;  // cannot happen
                    if (msg_arrival_[op.aux] == kUnknown) {
                        msg_waiter_[op.aux] = c.id;
                        return false;
                    }
                    ready = std::max(ready, msg_arrival_[op.aux]);
                    if (ready > c.t) c.out->wait_cycles += ready - c.t;
                }
                c.t = std::max(c.t, ready);
                return true;
            }
            case TKind::Collective: {
                bool ok = false;
                const uint64_t a = units_drained(c, &ok);
                if (!ok) return false;
                c.arrive = a;
                c.waiting = true;
                const CollectiveInfo& ci = colls_[op.aux];
                coll_max_[op.aux] = std::max(coll_max_[op.aux], a);
                // release() issues the record of every member, this core included
                if (++coll_arrived_[op.aux] ==
                    static_cast<uint32_t>(__builtin_popcountll(ci.members)))
                    release(op.aux);
                return false;
            }
            case TKind::Halt: {
                bool ok = false;
                const uint64_t a = units_drained(c, &ok);
                if (!ok) return false;
                c.t = a;
                c.done = true;
                c.out->finished = true;
                return true;
            }
        }
        return false;
    }

    void release(uint64_t id) {
        const CollectiveInfo& ci = colls_[id];
        const uint64_t rel = coll_max_[id] + ci.cycles;
        for (uint64_t m = ci.members; m;) {
            const int b = __builtin_ctzll(m);
            m &= m - 1;
            CoreSim& c = cores_[b];
            c.out->wait_cycles += rel - c.arrive - ci.busy_ring;
            c.out->busy[kUnitRing] += ci.busy_ring;
            c.t = rel;
            c.waiting = false;
            // the collective record is issued
            c.issue_applied = false;
            ++c.next;
            wake(c.id);
        }
    }

    // Starts the ops whose inputs are known; returns whether any did.
    bool resolve_pending(CoreSim& c) {
        bool any = false;
        for (size_t k = 0; k < c.pending.size();) {
            Pending& p = c.pending[k];
            uint64_t ready = 0;
            if (!known(c, p.prev) || !deps_known(c, p.deps, p.ndeps, &ready)) {
                ++k;
                continue;
            }
            const TOp& op = (*c.ops)[p.op];
            const uint64_t free_at = end_of(c, p.prev);
            const uint64_t start = std::max({p.t_issue, free_at, ready});
            const uint64_t lat = op.latency && start > free_at ? latency_of(op.unit) : 0;
            if (op.kind == TKind::Unit) {
                const uint64_t end = start + lat + op.cost;
                c.end[p.op] = end;
                c.out->busy[op.unit] += lat + op.cost;
                if (op.lane && op.aux < msg_arrival_.size()) {
                    // a ring send: its message arrives one hop later
                    const uint64_t id = op.aux;
                    msg_arrival_[id] = end + cfg_.ring_hop_latency;
                    if (msg_waiter_[id] >= 0) wake(static_cast<uint32_t>(msg_waiter_[id]));
                }
            } else if (op.kind == TKind::Dma) {
                heap_.push({start + lat, seq_++, static_cast<int32_t>(c.id), p.op, -1});
                dma_start_[key(c.id, p.op)] = start;
            } else {  // multicast member
                const uint64_t id = op.aux;
                mc_member_op_[id][c.id] = p.op;
                mc_member_start_[id][c.id] = start;
                mc_max_[id] = std::max(mc_max_[id], start);
                if (++mc_arrived_[id] ==
                    static_cast<uint32_t>(__builtin_popcountll(mcasts_[id].members)))
                    heap_.push(
                        {mc_max_[id] + cfg_.dma_latency, seq_++, -1, 0, static_cast<int64_t>(id)});
            }
            c.pending.erase(c.pending.begin() + static_cast<std::ptrdiff_t>(k));
            any = true;
        }
        return any;
    }

    static uint64_t key(uint32_t core, uint32_t op) { return (uint64_t{core} << 32) | op; }

    void advance(uint64_t t) {
        if (t <= now_) return;
        const double dt = static_cast<double>(t - now_);
        for (Transfer& x : active_) x.remaining = std::max(0.0, x.remaining - x.rate * dt);
        now_ = t;
    }

    // Shares the DDR bandwidth among the active transfers: equal shares, none above its cap
    // (water-filling).
    void rates() {
        std::vector<size_t> idx(active_.size());
        for (size_t j = 0; j < idx.size(); ++j) idx[j] = j;
        std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
            return active_[a].cap != active_[b].cap ? active_[a].cap < active_[b].cap
                                                    : active_[a].id < active_[b].id;
        });
        double left = ddr_;
        size_t n = idx.size();
        for (size_t j : idx) {
            const double share = left / static_cast<double>(n);
            active_[j].rate = std::min(active_[j].cap, share);
            left -= active_[j].rate;
            --n;
        }
    }

    void start_transfer(const Activation& a) {
        Transfer x{};
        x.id = a.seq;
        x.core = a.core;
        x.op = a.op;
        x.mcast = a.mcast;
        if (a.mcast >= 0) {
            const MulticastInfo& mi = mcasts_[a.mcast];
            x.remaining = static_cast<double>(mi.bytes);
            x.cap = std::min<double>(cfg_.dma_port_bytes_per_cycle, cfg_.ring_bytes_per_cycle);
        } else {
            x.remaining = static_cast<double>((*cores_[a.core].ops)[a.op].cost);
            x.cap = cfg_.dma_port_bytes_per_cycle;
        }
        if (x.remaining <= 0) {
            finish_transfer(x, now_);
            return;
        }
        active_.push_back(x);
        rates();
    }

    void finish_transfer(const Transfer& x, uint64_t t) {
        if (x.mcast < 0) {
            CoreSim& c = cores_[x.core];
            const TOp& op = (*c.ops)[x.op];
            c.end[x.op] = t;
            c.out->busy[op.unit] += t - dma_start_[key(c.id, x.op)];
            wake(c.id);
            return;
        }
        const MulticastInfo& mi = mcasts_[x.mcast];
        const uint64_t end = t + mi.extra_latency;
        for (uint64_t m = mi.members; m;) {
            const int b = __builtin_ctzll(m);
            m &= m - 1;
            CoreSim& c = cores_[b];
            const int64_t op = mc_member_op_[x.mcast][b];
            if (op == kNone) continue;
            c.end[op] = end;
            c.out->busy[kUnitLoad] += end - mc_member_start_[x.mcast][b];
            wake(c.id);
        }
    }

    const spyre_engine_config& cfg_;
    double ddr_;
    const std::vector<CollectiveInfo>& colls_;
    const std::vector<MulticastInfo>& mcasts_;
    uint32_t qd_ = 4;
    std::vector<CoreSim> cores_;
    std::vector<uint32_t> work_;
    std::vector<uint64_t> msg_arrival_;
    std::vector<int64_t> msg_waiter_;
    std::vector<uint32_t> coll_arrived_;
    std::vector<uint64_t> coll_max_;
    std::vector<uint32_t> mc_arrived_;
    std::vector<uint64_t> mc_max_;
    std::vector<std::vector<int64_t>> mc_member_op_;
    std::vector<std::vector<uint64_t>> mc_member_start_;
    std::priority_queue<Activation, std::vector<Activation>, std::greater<>> heap_;
    std::vector<Transfer> active_;
    std::unordered_map<uint64_t, uint64_t> dma_start_;
    uint64_t now_ = 0;
    uint64_t seq_ = 0;
};

}  // namespace

Timeline::Timeline(const spyre_engine_config& cfg)
    : cfg_(cfg),
      ddr_(static_cast<double>(cfg.ddr_bytes_per_s) / static_cast<double>(cfg.clock_hz)) {}

uint64_t Timeline::run(const std::vector<const Trace*>& traces, uint64_t msg_count,
                       const std::vector<CollectiveInfo>& colls,
                       const std::vector<MulticastInfo>& mcasts, uint64_t start,
                       std::vector<CoreTiming>& out) {
    Replay r(cfg_, ddr_, traces, msg_count, colls, mcasts, start, out);
    return r.run();
}

}  // namespace spyre::eng
