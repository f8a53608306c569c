// SPDX-License-Identifier: MIT
// C API of the gather and scatter by indices (spyre_op_gather, spyre_op_scatter):
// ops/index_program.hpp on dense tensors seen as [O, V, I].
#include <numeric>
#include <string_view>

#include "ops/api_common.hpp"
#include "ops/index_program.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {
namespace {

int64_t prod(const std::vector<int64_t>& v, size_t from, size_t to) {
    int64_t p = 1;
    for (size_t d = from; d < to; ++d) p *= v[d];
    return p;
}

void index_impl(const char* op, spyre_stream_t stream, IndexMode mode, const Tensor& table,
                int32_t dim, const Tensor& idx, const Tensor& rows, uint32_t flags) {
    require(!(flags & ~uint32_t(SPYRE_INDEX_WRAP_NEGATIVE | SPYRE_INDEX_ACCUMULATE)) &&
                (mode != IndexMode::GATHER || !(flags & SPYRE_INDEX_ACCUMULATE)),
            "{}: unknown flags {:#x}", op, flags);
    require(idx.t == isa::DType::I64 || idx.t == isa::DType::I32,
            "{}: `index` must be int64 or int32, not {}", op, dtype_name(int(idx.t)));
    require(rows.t == table.t, "{}: the two data tensors must have one type", op);
    const size_t r = table.shape.size();
    require(r >= 1 && rows.shape.size() == r && idx.shape.size() == r,
            "{}: table, index and the other tensor must have one rank >= 1", op);
    require(dim >= 0 && size_t(dim) < r, "{}: dim {} out of range for rank {}", op, dim, r);
    const size_t d0 = size_t(dim);
    for (size_t d = 0; d < r; ++d)
        require(d == d0 || rows.shape[d] == table.shape[d],
                "{}: dim {} of the data tensors differ ({} and {})", op, d, rows.shape[d],
                table.shape[d]);
    require(idx.shape[d0] == rows.shape[d0], "{}: `index` must have N = {} at dim {}", op,
            rows.shape[d0], dim);
    // index dims before / after dim: all equal to rows' or all 1
    auto side = [&](size_t from, size_t to) {
        bool all_eq = true, all_one = true;
        for (size_t d = from; d < to; ++d) {
            all_eq &= idx.shape[d] == rows.shape[d];
            all_one &= idx.shape[d] == 1;
        }
        require(all_eq || all_one,
                "{}: `index` must have the data's sizes or 1 in all dims on each side of dim", op);
        return all_eq && prod(rows.shape, from, to) != 1;
    };
    IndexShape s;
    s.mode = mode;
    s.t = table.t;
    s.es = table.es;
    s.O = uint64_t(prod(table.shape, 0, d0));
    s.V = uint64_t(table.shape[d0]);
    s.N = uint64_t(rows.shape[d0]);
    s.I = uint64_t(prod(table.shape, d0 + 1, r));
    s.idx_outer = side(0, d0);
    s.idx_inner = side(d0 + 1, r);
    s.index_bytes = static_cast<uint32_t>(idx.es);
    s.wrap_negative = flags & SPYRE_INDEX_WRAP_NEGATIVE;
    if (!is_dense(table) || !is_dense(rows) || !is_dense(idx))
        fail(SPYRE_ERROR_NOT_SUPPORTED, std::format("{}: tensors must be dense", op));
    const Card c = card_of(table.buffer);
    require_same_card(c, {&idx, &rows}, op);
    if (s.O == 0 || s.N == 0 || s.I == 0) return;
    require(s.V > 0, "{}: index out of range: dim {} has size 0", op, dim);
    const Tensor& written = mode == IndexMode::GATHER ? rows : table;
    if (written.addr % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: the written tensor must start 128-byte aligned", op));
    const spyre_engine_config cfg = engine_config_of(c.info);
    std::vector<IndexLaunch> parts;
    try {
        parts = split_index(s, spyre_engine_lx_usable(&cfg), cfg.num_cores);
    } catch (const std::invalid_argument& ex) {
        fail(SPYRE_ERROR_NOT_SUPPORTED, std::format("{}: {}", op, ex.what()));
    }
    // Every part planned before any is queued. A part that is more work than one launch may
    // do (the engine's budget of timed operations per job: a scatter over millions of
    // positions) is split in two and planned again: over its slabs O (disjoint parts of the
    // table, at offsets that keep every operand's start on a stick), else over its tiles along
    // N (in ascending order, so repeated targets keep the order of their positions).
    const uint64_t slab_unit = std::lcm(
        std::lcm(kStick / std::gcd<uint64_t>(s.V * s.I * s.es, kStick),
                 kStick / std::gcd<uint64_t>(s.N * s.I * s.es, kStick)),
        s.idx_outer ? kStick / std::gcd<uint64_t>(s.N * s.id() * s.index_bytes, kStick) : 1);
    auto plan_of = [&](const IndexLaunch& part) {
        const IndexShape& ps = part.s;
        PlanKey key("index", cfg);
        key.add(ps.mode, ps.t, ps.es, ps.O, ps.V, ps.N, ps.I, ps.idx_outer, ps.idx_inner,
                ps.index_bytes, ps.wrap_negative, ps.n_tile, ps.n_tiles);
        return cached_plan(key.str(), [&] {
            const Pricer pricer(cfg);
            const IndexPlan p = plan_index(pricer, ps, cfg.num_cores);
            PlanEntry e;
            e.image = build_index(ps, p);
            e.cores = p.cores;
            e.cycles = p.cycles;
            e.plan = std::format("{} units per core, {} cores, tiles of {} of {} positions",
                                 p.per_core, p.cores, ps.tile(), ps.N);
            return e;
        });
    };
    std::vector<std::pair<IndexLaunch, std::shared_ptr<const PlanEntry>>> planned;
    std::vector<IndexLaunch> todo(parts.rbegin(), parts.rend());  // a stack, first part on top
    while (!todo.empty()) {
        const IndexLaunch part = todo.back();
        todo.pop_back();
        try {
            planned.emplace_back(part, plan_of(part));
            continue;
        } catch (const Error& err) {
            if (err.status() != SPYRE_ERROR_NOT_SUPPORTED ||
                std::string_view(err.what()).find(kJobTooLargeText) == std::string_view::npos)
                throw;
            const uint64_t half_o = part.s.O / 2 / slab_unit * slab_unit;
            IndexLaunch a = part, b = part;
            if (half_o > 0) {
                a.s.O = half_o;
                b.s.O = part.s.O - half_o;
                b.first_o = part.first_o + half_o;
            } else if (part.s.n_tiles > 1) {
                a.s.n_tiles = part.s.n_tiles / 2;
                b.s.n_tiles = part.s.n_tiles - a.s.n_tiles;
                b.first = part.first + a.s.n_tiles * part.s.tile();
            } else {
                throw;
            }
            todo.push_back(b);
            todo.push_back(a);
        }
    }
    std::shared_ptr<const PlanEntry> main_plan;  // the info reports the tiles' launch
    for (const auto& [part, plan] : planned) {
        const IndexShape& ps = part.s;
        const uint64_t o = part.first_o;
        launch(c, plan, stream,
               {table.addr + o * ps.V * ps.I * ps.es,
                idx.addr + ((ps.idx_outer ? o * ps.N : 0) + part.first) * ps.id() * ps.index_bytes,
                rows.addr + (o * ps.N + part.first) * ps.I * ps.es},
               {table.buffer, idx.buffer, rows.buffer});
        if (!main_plan) main_plan = plan;
    }
    finish_info(c, *main_plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_gather(spyre_stream_t stream, const spyre_tensor* table, int32_t dim,
                             const spyre_tensor* index, const spyre_tensor* rows, uint32_t flags) {
    return guard(__func__, [&] {
        begin_op("gather");
        index_impl("gather", stream, IndexMode::GATHER, check_tensor(table, "table"), dim,
                   check_tensor(index, "index"), check_tensor(rows, "rows"), flags);
    });
}

spyre_status spyre_op_scatter(spyre_stream_t stream, const spyre_tensor* table, int32_t dim,
                              const spyre_tensor* index, const spyre_tensor* rows, uint32_t flags) {
    return guard(__func__, [&] {
        const bool acc = flags & SPYRE_INDEX_ACCUMULATE;
        begin_op(acc ? "scatter_add" : "scatter");
        index_impl(acc ? "scatter_add" : "scatter", stream,
                   acc ? IndexMode::SCATTER_ADD : IndexMode::SCATTER, check_tensor(table, "table"),
                   dim, check_tensor(index, "index"), check_tensor(rows, "rows"), flags);
    });
}
