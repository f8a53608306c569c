// SPDX-License-Identifier: MIT
// C API of arange (spyre_op_arange): ops/arange_program.hpp on a dense output.
#include "ops/api_common.hpp"
#include "ops/arange_program.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {
namespace {

void arange_impl(spyre_stream_t stream, const Tensor& o, int64_t start, int64_t step) {
    using isa::DType;
    require(o.t == DType::F32 || o.t == DType::F16 || o.t == DType::BF16 || o.t == DType::I32 ||
                o.t == DType::I64,
            "arange: `out` must be fp32, fp16, bf16, int32 or int64, not {}", dtype_name(int(o.t)));
    if (!is_dense(o)) fail(SPYRE_ERROR_NOT_SUPPORTED, "arange: `out` must be dense");
    const Card c = card_of(o.buffer);
    const uint64_t n = uint64_t(o.numel());
    if (n == 0) return;
    if (o.addr % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED, "arange: `out` must start 128-byte aligned");
    ArangeShape s;
    s.n = n, s.t = o.t, s.es = o.es;
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("arange", cfg);
    key.add(s.n, s.t);
    auto plan = cached_plan(key.str(), [&] {
        const Pricer pricer(cfg);
        const ArangePlan p = plan_arange(pricer, s, cfg.num_cores);
        PlanEntry e;
        e.image = build_arange(s, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = std::format("chunks of {}, {} cores", p.chunk, p.cores);
        return e;
    });
    launch(c, plan, stream, {o.addr, uint64_t(start), uint64_t(step)}, {o.buffer});
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_arange(spyre_stream_t stream, const spyre_tensor* out, int64_t start,
                             int64_t step) {
    return guard(__func__, [&] {
        begin_op("arange");
        arange_impl(stream, check_tensor(out, "out"), start, step);
    });
}
