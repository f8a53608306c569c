// SPDX-License-Identifier: MIT
// C API of the row-wise ops (spyre_op_softmax, spyre_op_layer_norm, spyre_op_rms_norm,
// spyre_op_reduce): ops/rowwise_planner.hpp on dense tensors viewed as [rows, cols].
#include "ops/api_common.hpp"
#include "ops/pricing.hpp"
#include "ops/rowwise_planner.hpp"

namespace spyre::ops {
namespace {

void rowwise_impl(spyre_stream_t stream, RowwiseOp op, const Tensor& x, const Tensor* w,
                  const Tensor* b, const Tensor& o, RowwiseShape s) {
    const char* name = rowwise_op_name(op, s.log);
    require(float_type(x.t), std::format("{}: `x` must be float32, float16 or bfloat16", name));
    require(!x.shape.empty(), std::format("{}: `x` needs at least one dim", name));
    const uint64_t cols = uint64_t(x.dim(-1));
    const uint64_t rows = cols ? uint64_t(x.numel()) / cols : 0;
    const bool reduction = op >= RowwiseOp::SUM;
    if (reduction) {
        const isa::DType want = op == RowwiseOp::ARGMAX ? isa::DType::I32 : x.t;
        require(o.t == want, std::format("{}: `out` must be {}", name, dtype_name(int(want))));
        require(uint64_t(o.numel()) == rows,
                std::format("{}: `out` must hold one element per row ({})", name, rows));
    } else {
        require(o.t == x.t && o.shape == x.shape,
                std::format("{}: `out` must have the type and shape of `x`", name));
    }
    for (const Tensor* t : {&x, &o, w, b})
        if (t && (!is_dense(*t) || t->addr % kStick))
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{}: `{}` must be dense and start 128-byte aligned", name, t->name));
    for (const Tensor* t : {w, b})
        if (t) {
            require(t->numel() == int64_t(cols) && float_type(t->t) &&
                        (t->t == x.t || t->t == isa::DType::F32),
                    std::format("{}: `{}` must have {} elements of x's type or float32", name,
                                t->name, cols));
        }
    const Card c = card_of(o.buffer);
    require_same_card(c, {&x, w, b}, name);
    if (rows == 0 || cols == 0) return;
    s.rows = rows, s.cols = cols, s.t = x.t;
    s.has_weight = w != nullptr;
    if (w) s.weight_t = w->t;
    s.has_bias = b != nullptr;
    if (b) s.bias_t = b->t;
    check_rowwise(op, s);
    const spyre_engine_config cfg = engine_config_of(c.info);
    const std::string key =
        std::format("row/{} {} {}x{} t{} log{} e{} eps{} w{}:{} b{}:{}", config_key(cfg), int(op),
                    rows, cols, int(s.t), s.log, s.fp32_exp, s.eps, s.has_weight, int(s.weight_t),
                    s.has_bias, int(s.bias_t));
    auto plan = cached_plan(key, [&] {
        const Pricer pricer(cfg);
        const RowwisePlan p = plan_rowwise(pricer, op, s, cfg.num_cores);
        PlanEntry e;
        e.image = build_rowwise(s, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = plan_name(p);
        return e;
    });
    launch(c, plan, stream, {x.addr, o.addr, w ? w->addr : 0, b ? b->addr : 0},
           {x.buffer, o.buffer, w ? w->buffer : nullptr, b ? b->buffer : nullptr});
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_softmax(spyre_stream_t stream, const spyre_tensor* x, int log,
                              const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op(log ? "log_softmax" : "softmax");
        RowwiseShape s;
        s.log = log != 0;
        s.fp32_exp = true;  // one rounding: the closest to a float32 reference
        rowwise_impl(stream, RowwiseOp::SOFTMAX, check_tensor(x, "x"), nullptr, nullptr,
                     check_tensor(out, "out"), s);
    });
}

spyre_status spyre_op_layer_norm(spyre_stream_t stream, const spyre_tensor* x,
                                 const spyre_tensor* weight, const spyre_tensor* bias, float eps,
                                 const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("layer_norm");
        Tensor tw{}, tb{};
        if (weight) tw = check_tensor(weight, "weight");
        if (bias) tb = check_tensor(bias, "bias");
        RowwiseShape s;
        s.eps = eps;
        rowwise_impl(stream, RowwiseOp::LAYER_NORM, check_tensor(x, "x"), weight ? &tw : nullptr,
                     bias ? &tb : nullptr, check_tensor(out, "out"), s);
    });
}

spyre_status spyre_op_rms_norm(spyre_stream_t stream, const spyre_tensor* x,
                               const spyre_tensor* weight, float eps, const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("rms_norm");
        Tensor tw{};
        if (weight) tw = check_tensor(weight, "weight");
        RowwiseShape s;
        s.eps = eps;
        rowwise_impl(stream, RowwiseOp::RMS_NORM, check_tensor(x, "x"), weight ? &tw : nullptr,
                     nullptr, check_tensor(out, "out"), s);
    });
}

spyre_status spyre_op_reduce(spyre_stream_t stream, spyre_reduce_op op, const spyre_tensor* x,
                             const spyre_tensor* out) {
    return guard(__func__, [&] {
        require(op >= SPYRE_REDUCE_SUM && op <= SPYRE_REDUCE_ARGMAX,
                std::format("unknown reduction {}", int(op)));
        const RowwiseOp r = static_cast<RowwiseOp>(int(RowwiseOp::SUM) + int(op));
        begin_op(rowwise_op_name(r));
        rowwise_impl(stream, r, check_tensor(x, "x"), nullptr, nullptr, check_tensor(out, "out"),
                     RowwiseShape{});
    });
}
