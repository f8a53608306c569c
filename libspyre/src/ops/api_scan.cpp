// SPDX-License-Identifier: MIT
// C API of the cumulative sum and product (spyre_op_scan): ops/scan_program.hpp on dense
// tensors seen as [O, N, I].
#include "ops/api_common.hpp"
#include "ops/pricing.hpp"
#include "ops/scan_program.hpp"

namespace spyre::ops {
namespace {

void scan_impl(spyre_stream_t stream, spyre_scan_op op, const Tensor& x, int32_t dim,
               const Tensor& out) {
    using isa::DType;
    const char* name = op == SPYRE_SCAN_PROD ? "cumprod" : "cumsum";
    require(op == SPYRE_SCAN_SUM || op == SPYRE_SCAN_PROD, "scan: unknown op {}", int(op));
    require(out.t == x.t, "{}: `out` must have x's type ({}), not {}", name, dtype_name(int(x.t)),
            dtype_name(int(out.t)));
    const size_t r = x.shape.size();
    require(r >= 1 && out.shape == x.shape, "{}: x and out must have one shape of rank >= 1", name);
    require(dim >= -int32_t(r) && dim < int32_t(r), "{}: dim {} out of range for rank {}", name,
            dim, r);
    const size_t d0 = size_t(dim < 0 ? dim + int32_t(r) : dim);
    ScanShape s;
    s.op = op == SPYRE_SCAN_PROD ? ScanOp::PROD : ScanOp::SUM;
    s.t = x.t;
    s.es = x.es;
    s.O = s.N = s.I = 1;
    for (size_t d = 0; d < r; ++d) (d < d0 ? s.O : d == d0 ? s.N : s.I) *= uint64_t(x.shape[d]);
    if (!scan_supported(s))
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: {} is not offered for {} (torch accumulates it in double)", name,
                         name, dtype_name(int(x.t))));
    if (!is_dense(x) || !is_dense(out))
        fail(SPYRE_ERROR_NOT_SUPPORTED, std::format("{}: tensors must be dense", name));
    const Card c = card_of(x.buffer);
    require_same_card(c, {&out}, name);
    if (s.O == 0 || s.N == 0 || s.I == 0) return;
    if (x.addr % kStick || out.addr % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: x and out must start 128-byte aligned", name));
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("scan", cfg);
    key.add(s.op, s.t, s.es, s.O, s.N, s.I);
    auto plan = cached_plan(key.str(), [&] {
        const Pricer pricer(cfg);
        const ScanPlan p = plan_scan(pricer, s, cfg.num_cores);
        PlanEntry e;
        e.image = build_scan(s, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = std::format("{} slabs per core in chunks of {}, {} cores", p.per_core, p.chunk,
                             p.cores);
        return e;
    });
    launch(c, plan, stream, {x.addr, out.addr}, {x.buffer, out.buffer});
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_scan(spyre_stream_t stream, spyre_scan_op op, const spyre_tensor* x,
                           int32_t dim, const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op(op == SPYRE_SCAN_PROD ? "cumprod" : "cumsum");
        scan_impl(stream, op, check_tensor(x, "x"), dim, check_tensor(out, "out"));
    });
}
