// SPDX-License-Identifier: MIT
// C API of sort and top-k (spyre_op_sort): ops/sort_program.hpp on dense rows along the last
// dim (dims after `dim` of size 1).
#include "ops/api_common.hpp"
#include "ops/pricing.hpp"
#include "ops/sort_program.hpp"

namespace spyre::ops {
namespace {

void sort_impl(spyre_stream_t stream, const Tensor& x, int32_t dim, uint32_t flags,
               const Tensor& values, const Tensor& indices) {
    using isa::DType;
    require(!(flags & ~uint32_t(SPYRE_SORT_DESCENDING)), "sort: unknown flags {:#x}", flags);
    require(values.t == x.t, "sort: `values` must have x's type ({}), not {}", dtype_name(int(x.t)),
            dtype_name(int(values.t)));
    require(indices.t == DType::I64, "sort: `indices` must be int64, not {}",
            dtype_name(int(indices.t)));
    const size_t r = x.shape.size();
    require(r >= 1 && values.shape.size() == r && indices.shape == values.shape,
            "sort: x, values and indices must have one rank >= 1 and values and indices one "
            "shape");
    require(dim >= -int32_t(r) && dim < int32_t(r), "sort: dim {} out of range for rank {}", dim,
            r);
    const size_t d0 = size_t(dim < 0 ? dim + int32_t(r) : dim);
    for (size_t d = 0; d < r; ++d)
        require(d == d0 || values.shape[d] == x.shape[d],
                "sort: values must have x's size {} at dim {}, not {}", x.shape[d], d,
                values.shape[d]);
    require(values.shape[d0] <= x.shape[d0], "sort: k = {} is more than the {} elements of dim {}",
            values.shape[d0], x.shape[d0], dim);
    if (x.t != DType::F32 && x.t != DType::F16 && x.t != DType::BF16)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("sort: x must be fp32, fp16 or bf16, not {}", dtype_name(int(x.t))));
    SortShape s;
    s.t = x.t;
    s.es = x.es;
    s.descending = flags & SPYRE_SORT_DESCENDING;
    s.O = 1;
    for (size_t d = 0; d < d0; ++d) s.O *= uint64_t(x.shape[d]);
    s.N = uint64_t(x.shape[d0]);
    s.K = uint64_t(values.shape[d0]);
    uint64_t inner = 1;
    for (size_t d = d0 + 1; d < r; ++d) inner *= uint64_t(x.shape[d]);
    if (!is_dense(x) || !is_dense(values) || !is_dense(indices))
        fail(SPYRE_ERROR_NOT_SUPPORTED, "sort: tensors must be dense");
    const Card c = card_of(x.buffer);
    require_same_card(c, {&values, &indices}, "sort");
    if (s.O == 0 || s.K == 0 || inner == 0) return;
    if (inner != 1)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             "sort: the dims after `dim` must have size 1 (move `dim` last first)");
    if (x.addr % kStick || values.addr % kStick || indices.addr % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED, "sort: x, values and indices must start 128-byte aligned");
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("sort", cfg);
    key.add(s.t, s.es, s.O, s.N, s.K, s.descending);
    auto plan = cached_plan(key.str(), [&] {
        const Pricer pricer(cfg);
        const SortPlan p = plan_sort(pricer, s, cfg.num_cores);
        PlanEntry e;
        e.image = build_sort(s, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = std::format(
            "bitonic over {} (rows of {}), {} rows per core in chunks of {}, {} "
            "cores",
            sort_padded(s.N), s.N, p.per_core, p.chunk, p.cores);
        return e;
    });
    launch(c, plan, stream, {x.addr, values.addr, indices.addr},
           {x.buffer, values.buffer, indices.buffer});
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_sort(spyre_stream_t stream, const spyre_tensor* x, int32_t dim,
                           uint32_t flags, const spyre_tensor* values,
                           const spyre_tensor* indices) {
    return guard(__func__, [&] {
        begin_op("sort");
        sort_impl(stream, check_tensor(x, "x"), dim, flags, check_tensor(values, "values"),
                  check_tensor(indices, "indices"));
    });
}
