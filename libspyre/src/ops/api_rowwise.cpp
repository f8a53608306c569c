// SPDX-License-Identifier: MIT
// C API of the row-wise ops (spyre_op_softmax, spyre_op_layer_norm, spyre_op_rms_norm,
// spyre_op_reduce and the _dim forms): ops/rowwise_planner.hpp on dense tensors viewed as
// [rows, cols]; another dim, or a strided input, is moved last by the copy program on the cores.
#include <algorithm>
#include <cstdio>

#include "ops/api_common.hpp"
#include "ops/column_program.hpp"
#include "ops/int_reduce_program.hpp"
#include "ops/layout_plans.hpp"
#include "ops/pricing.hpp"
#include "ops/rowwise_planner.hpp"

namespace spyre::ops {
namespace {

// SUM, MAX, MIN of an integer tensor: exact (ops/int_reduce_program.hpp).
bool int_reduction(RowwiseOp op, const Tensor& x) {
    return isa::int_type(x.t) &&
           (op == RowwiseOp::SUM || op == RowwiseOp::MAX || op == RowwiseOp::MIN);
}

// out[r] = reduce(x[r, :]) over the last dim of a dense x, exactly in integers; out int64 or
// x's type for SUM (wrapped), any integer type for MAX / MIN.
std::shared_ptr<const PlanEntry> int_rows(spyre_stream_t stream, RowwiseOp op, const Tensor& x,
                                          const Tensor& o) {
    const char* name = rowwise_op_name(op);
    require(isa::int_type(o.t), "{}: `out` of an integer `x` must be an integer type", name);
    const uint64_t cols = x.shape.empty() ? 1 : uint64_t(x.dim(-1));
    const uint64_t rows = cols ? uint64_t(x.numel()) / cols : uint64_t(o.numel());
    require(uint64_t(o.numel()) == rows, "{}: `out` must hold one element per row ({})", name,
            rows);
    require(cols > 0 || op == RowwiseOp::SUM || rows == 0, "{}: empty rows have no {}", name, name);
    if (!is_dense(x) || !is_dense(o) || o.addr % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: `x` must be dense, `out` dense and 128-byte aligned", name));
    if (rows == 0) return nullptr;
    IntReduceShape s;
    s.f = op == RowwiseOp::SUM   ? isa::Red::SUM
          : op == RowwiseOp::MAX ? isa::Red::MAX
                                 : isa::Red::MIN;
    s.t = x.t, s.out = o.t, s.rows = rows, s.cols = cols;
    return int_reduce(stream, s, x, o);
}

std::shared_ptr<const PlanEntry> long_rows(spyre_stream_t stream, RowwiseOp op, const Tensor& x,
                                           const Tensor& o, const RowwiseShape& s);

std::shared_ptr<const PlanEntry> rowwise_impl(spyre_stream_t stream, RowwiseOp op, const Tensor& x,
                                              const Tensor* w, const Tensor* b, const Tensor& o,
                                              RowwiseShape s, const Tensor* res = nullptr,
                                              const Tensor* hout = nullptr) {
    const char* name = rowwise_op_name(op, s.log);
    if (int_reduction(op, x)) return int_rows(stream, op, x, o);
    require(float_type(x.t), "{}: `x` must be float32, float16 or bfloat16", name);
    require(!x.shape.empty(), "{}: `x` needs at least one dim", name);
    const uint64_t cols = uint64_t(x.dim(-1));
    const uint64_t rows = cols ? uint64_t(x.numel()) / cols : 0;
    const bool reduction = op >= RowwiseOp::SUM;
    if (reduction) {
        const isa::DType want = op == RowwiseOp::ARGMAX ? isa::DType::I32 : x.t;
        require(o.t == want, "{}: `out` must be {}", name, dtype_name(int(want)));
        require(uint64_t(o.numel()) == rows, "{}: `out` must hold one element per row ({})", name,
                rows);
    } else {
        require(o.t == x.t && o.shape == x.shape, "{}: `out` must have the type and shape of `x`",
                name);
    }
    for (const Tensor* t : {&x, &o, w, b, res, hout})
        if (t && (!is_dense(*t) || t->addr % kStick))
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{}: `{}` must be dense and start 128-byte aligned", name, t->name));
    for (const Tensor* t : {w, b})
        if (t) {
            require(t->numel() == int64_t(cols) && float_type(t->t) &&
                        (t->t == x.t || t->t == isa::DType::F32),
                    "{}: `{}` must have {} elements of x's type or float32", name, t->name, cols);
        }
    const Card c = card_of(o.buffer);
    require_same_card(c, {&x, w, b, res, hout}, name);
    if (rows == 0 || cols == 0) return nullptr;
    if (cols > kRowwiseMaxCols) return long_rows(stream, op, x, o, s);
    s.rows = rows, s.cols = cols, s.t = x.t;
    s.has_weight = w != nullptr;
    if (w) s.weight_t = w->t;
    s.has_bias = b != nullptr;
    if (b) s.bias_t = b->t;
    s.add_residual = res != nullptr;
    check_rowwise(op, s);
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("row", cfg);
    key.add(op, rows, cols, s.t, s.log, s.fp32_exp, s.eps, s.has_weight, s.weight_t, s.has_bias,
            s.bias_t, s.add_residual);
    auto plan = cached_plan(key.str(), [&] {
        const Pricer pricer(cfg);
        const RowwisePlan p = plan_rowwise(pricer, op, s, cfg.num_cores);
        PlanEntry e;
        e.image = build_rowwise(s, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = plan_name(p);
        return e;
    });
    std::vector<uint64_t> args = {x.addr, o.addr, w ? w->addr : 0, b ? b->addr : 0};
    if (res) args.insert(args.end(), {0, res->addr, hout->addr});  // kArgResidual, kArgOutResidual
    launch(c, plan, stream, args,
           {x.buffer, o.buffer, w ? w->buffer : nullptr, b ? b->buffer : nullptr,
            res ? res->buffer : nullptr, hout ? hout->buffer : nullptr});
    finish_info(c, *plan);
    return plan;
}

// Device bytes [first, end) of a dense tensor.
std::pair<uint64_t, uint64_t> extent(const Tensor& t) {
    return {t.addr, t.addr + uint64_t(t.numel()) * t.es};
}
bool overlap(const Tensor& a, const Tensor& b) {
    const auto [a0, a1] = extent(a);
    const auto [b0, b1] = extent(b);
    return a0 < b1 && b0 < a1 && on_card(card_of(a.buffer), b.buffer);
}

// out = rms_norm(h) * weight and out_residual = h = x + residual in one program. Every row is
// read before anything of it is written, so out and out_residual may each be x or residual
// exactly (in place); they may not overlap each other, nor anything else partially.
void add_rms_norm_impl(spyre_stream_t stream, const Tensor& x, const Tensor& res, const Tensor* w,
                       const Tensor& o, const Tensor& h, float eps) {
    const char* name = "add_rms_norm";
    require(res.t == x.t && res.shape == x.shape,
            "{}: `residual` must have the type and shape of `x`", name);
    require(h.t == x.t && h.shape == x.shape,
            "{}: `out_residual` must have the type and shape of `x`", name);
    require(!overlap(o, h), "{}: `out` and `out_residual` must not overlap", name);
    for (const Tensor* out : {&o, &h})
        for (const Tensor* in : {&x, &res})
            require(!overlap(*out, *in) || out->addr == in->addr,
                    "{}: `{}` overlaps `{}` without being it (in place means the same tensor)",
                    name, out->name, in->name);
    if (w) require(!overlap(o, *w) && !overlap(h, *w), "{}: an output overlaps `weight`", name);
    require(eps >= 0.0f, "{}: eps must be >= 0 (got {})", name, eps);
    RowwiseShape s;
    s.eps = eps;
    rowwise_impl(stream, RowwiseOp::RMS_NORM, x, w, nullptr, o, s, &res, &h);
}

bool dense_aligned(const Tensor& t) { return is_dense(t) && t.addr % kStick == 0; }

// A dense tensor of `shape` in new scratch device memory on card c.
Tensor scratch_tensor(const Card& c, const Tensor& like, std::vector<int64_t> shape,
                      Scratch& scratch, const char* name) {
    Tensor r = like;
    r.name = name;
    r.shape = std::move(shape);
    r.strides.assign(r.shape.size(), 1);
    for (size_t d = r.shape.size(); d-- > 1;)
        r.strides[d - 1] = r.strides[d] * std::max<int64_t>(r.shape[d], 1);
    call(spyre_malloc(c.dev, std::max<uint64_t>(uint64_t(r.numel()) * r.es, 1), &scratch.buf));
    r.buffer = scratch.buf, r.offset = 0;
    call(spyre_buffer_device_address(scratch.buf, &r.addr));
    return r;
}

// The number of equal blocks a row of `cols` elements splits into so that each block is a row
// the row program takes: the least divisor k of cols with cols / k <= kRowwiseMaxCols, or 0 if
// there is none worth taking (blocks of fewer than a stick of fp32 elements).
uint64_t long_row_blocks(uint64_t cols) {
    for (uint64_t k = (cols + kRowwiseMaxCols - 1) / kRowwiseMaxCols; cols / k >= 32; ++k)
        if (cols % k == 0) return k;
    return 0;
}

// Rows longer than the row program takes (2^23 elements: its counts and indices are fp32):
// x [rows, cols] read as [rows * k, cols / k] (equal blocks, long_row_blocks), each block
// reduced into scratch [rows, k], those rows then into out. SUM, MEAN (the mean of equal
// blocks' means), MAX and MIN; a 16-bit sum rounds its partial sums to x's type too.
std::shared_ptr<const PlanEntry> long_rows(spyre_stream_t stream, RowwiseOp op, const Tensor& x,
                                           const Tensor& o, const RowwiseShape& s) {
    const char* name = rowwise_op_name(op, s.log);
    const uint64_t cols = uint64_t(x.dim(-1)), rows = uint64_t(x.numel()) / cols;
    const bool two_stage = op == RowwiseOp::SUM || op == RowwiseOp::MEAN || op == RowwiseOp::MAX ||
                           op == RowwiseOp::MIN;
    const uint64_t k = two_stage ? long_row_blocks(cols) : 0;
    if (!k)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: rows of more than 8388608 (2^23) elements{}", name,
                         two_stage ? " whose length has no divisor that splits them into rows "
                                     "of at most 2^23"
                                   : " (fp32 element counts and indices)"));
    const Card c = card_of(o.buffer);
    Scratch sp;
    const Tensor part = scratch_tensor(c, x, {int64_t(rows), int64_t(k)}, sp, "partial");
    Tensor blocks = x;
    blocks.shape = {int64_t(rows * k), int64_t(cols / k)};
    blocks.strides = {int64_t(cols / k), 1};
    const auto first = rowwise_impl(stream, op, blocks, nullptr, nullptr, part, s);
    const auto plan = rowwise_impl(stream, op, part, nullptr, nullptr, o, s);
    std::snprintf(last_info().plan, sizeof last_info().plan,
                  "%llu blocks of %llu a row (%s), then %s", static_cast<unsigned long long>(k),
                  static_cast<unsigned long long>(cols / k), first->plan.c_str(),
                  plan->plan.c_str());
    last_info().cores = std::max(last_info().cores, first->cores);
    return plan;
}

// t with dim d moved to the end (a view: same memory).
Tensor dim_last(const Tensor& t, size_t d) {
    Tensor r = t;
    std::rotate(r.shape.begin() + d, r.shape.begin() + d + 1, r.shape.end());
    std::rotate(r.strides.begin() + d, r.strides.begin() + d + 1, r.strides.end());
    return r;
}

// The column program for a dense x whose dims after d are whole sticks (one launch, one pass
// over DDR); false if it does not take the shape (the caller moves the dim last instead).
bool columns_on_cores(spyre_stream_t stream, RowwiseOp op, const Tensor& x, size_t d,
                      const Tensor& o, const RowwiseShape& rs, const Card& c) {
    if (op == RowwiseOp::ARGMAX || !dense_aligned(x)) return false;
    ColumnShape s;
    s.op = op, s.log = rs.log, s.t = x.t;
    s.R = uint64_t(x.shape[d]);
    s.A = s.I = 1;
    for (size_t k = 0; k < d; ++k) s.A *= uint64_t(x.shape[k]);
    for (size_t k = d + 1; k < x.shape.size(); ++k) s.I *= uint64_t(x.shape[k]);
    if ((s.I * x.es) % kStick) return false;
    const spyre_engine_config cfg = engine_config_of(c.info);
    std::shared_ptr<const PlanEntry> plan;
    try {
        plan = cached_plan(PlanKey("col", cfg).add(op, s.log, s.A, s.R, s.I, s.t).str(), [&] {
            const Pricer pricer(cfg);
            const ColumnPlan p = plan_column(pricer, s, cfg.num_cores);
            PlanEntry e;
            e.image = build_column(s, p);
            e.cores = p.cores;
            e.cycles = p.cycles;
            e.plan = std::format("columns: tiles of {} x {} on {} cores", s.R, p.ic, p.cores);
            return e;
        });
    } catch (const Error& e) {
        if (e.status() != SPYRE_ERROR_NOT_SUPPORTED) throw;
        return false;  // e.g. the reduced dim does not fit LX in one tile
    }
    launch(c, plan, stream, {x.addr, o.addr}, {x.buffer, o.buffer});
    finish_info(c, *plan);
    return true;
}

// softmax / log_softmax / a reduction along dim `dim` of x (negative: from the end), any
// strides. The rows path takes dense rows along the last dim; a dense x whose inner dims are
// whole sticks takes the column program; otherwise the copy program makes x dense with dim
// last in scratch (one launch), and a softmax result is moved back into `o` (one more).
void rowwise_dim(spyre_stream_t stream, RowwiseOp op, const Tensor& x, int64_t dim, const Tensor& o,
                 const RowwiseShape& s) {
    const char* name = rowwise_op_name(op, s.log);
    const int64_t n = int64_t(x.shape.size());
    require(n >= 1, "{}: `x` needs at least one dim", name);
    require(dim >= -n && dim < n, "{}: dim {} is out of range for {} dims", name, dim, n);
    const size_t d = size_t(dim < 0 ? dim + n : dim);
    const bool reduction = op >= RowwiseOp::SUM;
    // size-1 dims after d change nothing: then d is the last dim of x without them
    bool last = true;
    for (size_t k = d + 1; k < size_t(n); ++k) last = last && x.shape[k] == 1;
    if (last && dense_aligned(x) && (reduction || dense_aligned(o))) {
        Tensor xr = x, orows = o;
        xr.shape.resize(d + 1), xr.strides.resize(d + 1);
        if (!reduction && o.shape == x.shape)
            orows.shape.resize(d + 1), orows.strides.resize(d + 1);
        rowwise_impl(stream, op, xr, nullptr, nullptr, orows, s);
        return;
    }
    const bool ints = int_reduction(op, x);
    require(ints || float_type(x.t), "{}: `x` must be float32, float16 or bfloat16", name);
    if (reduction) {
        const int64_t len = x.shape[d];
        require(len > 0 || x.numel() == 0, "{}: dim {} is empty (nothing to reduce)", name, d);
    } else {
        require(o.t == x.t && o.shape == x.shape, "{}: `out` must have the type and shape of `x`",
                name);
    }
    if (!dense_aligned(o))
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: `out` must be dense and start 128-byte aligned", name));
    const Card c = card_of(o.buffer);
    require_same_card(c, {&x}, name);
    if (x.numel() == 0) {
        require(o.numel() == 0, "{}: `out` must be empty like `x`", name);
        return;
    }
    if (reduction)
        require(o.t == x.t || op == RowwiseOp::ARGMAX || (ints && isa::int_type(o.t)),
                "{}: `out` must be {}", name, dtype_name(int(x.t)));
    if (reduction && op != RowwiseOp::ARGMAX)
        require(o.numel() * x.shape[d] == x.numel(),
                "{}: `out` must hold one element per reduced line ({})", name,
                x.numel() / x.shape[d]);
    if (!ints && columns_on_cores(stream, op, x, d, o, s, c)) return;
    // x made dense with dim d last, on the cores
    Scratch sx, so;
    const Tensor xv = dim_last(x, d);
    const Tensor xt = scratch_tensor(c, x, xv.shape, sx, "x");
    const auto to_rows = queue_copy(c, stream, xv, xt);
    const uint64_t copy_cycles = to_rows->cycles;
    std::shared_ptr<const PlanEntry> plan;
    uint32_t copies = 1;
    if (reduction) {
        plan = rowwise_impl(stream, op, xt, nullptr, nullptr, o, s);
    } else {
        // the result in rows, then each row back along dim d of `o`
        const Tensor ot = scratch_tensor(c, o, xv.shape, so, "out");
        plan = rowwise_impl(stream, op, xt, nullptr, nullptr, ot, s);
        Tensor back = ot;  // ot seen with o's shape: undo the rotation of the strides
        back.shape = o.shape;
        std::rotate(back.strides.rbegin(), back.strides.rbegin() + 1,
                    back.strides.rbegin() + (n - int64_t(d)));
        queue_copy(c, stream, back, o);
        copies = 2;
    }
    last_info().cores = std::max(last_info().cores, to_rows->cores);
    std::snprintf(last_info().plan, sizeof last_info().plan,
                  "%s; dim %zu last by %u copies (%llu cycles each)", plan->plan.c_str(), d, copies,
                  static_cast<unsigned long long>(copy_cycles));
    finish_info_ns(c);
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

spyre_status spyre_op_softmax_dim(spyre_stream_t stream, const spyre_tensor* x, int64_t dim,
                                  int log, const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op(log ? "log_softmax" : "softmax");
        RowwiseShape s;
        s.log = log != 0;
        s.fp32_exp = true;
        rowwise_dim(stream, RowwiseOp::SOFTMAX, check_tensor(x, "x"), dim, check_tensor(out, "out"),
                    s);
    });
}

spyre_status spyre_op_layer_norm(spyre_stream_t stream, const spyre_tensor* x,
                                 const spyre_tensor* weight, const spyre_tensor* bias, float eps,
                                 const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("layer_norm");
        require(eps >= 0.0f, "layer_norm: eps must be >= 0 (got {})", eps);
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
        require(eps >= 0.0f, "rms_norm: eps must be >= 0 (got {})", eps);
        Tensor tw{};
        if (weight) tw = check_tensor(weight, "weight");
        RowwiseShape s;
        s.eps = eps;
        rowwise_impl(stream, RowwiseOp::RMS_NORM, check_tensor(x, "x"), weight ? &tw : nullptr,
                     nullptr, check_tensor(out, "out"), s);
    });
}

spyre_status spyre_op_add_rms_norm(spyre_stream_t stream, const spyre_tensor* x,
                                   const spyre_tensor* residual, const spyre_tensor* weight,
                                   float eps, const spyre_tensor* out,
                                   const spyre_tensor* out_residual) {
    return guard(__func__, [&] {
        begin_op("add_rms_norm");
        Tensor tw{};
        if (weight) tw = check_tensor(weight, "weight");
        add_rms_norm_impl(stream, check_tensor(x, "x"), check_tensor(residual, "residual"),
                          weight ? &tw : nullptr, check_tensor(out, "out"),
                          check_tensor(out_residual, "out_residual"), eps);
    });
}

spyre_status spyre_op_reduce(spyre_stream_t stream, spyre_reduce_op op, const spyre_tensor* x,
                             const spyre_tensor* out) {
    return guard(__func__, [&] {
        require(op >= SPYRE_REDUCE_SUM && op <= SPYRE_REDUCE_ARGMAX, "unknown reduction {}",
                int(op));
        const RowwiseOp r = static_cast<RowwiseOp>(int(RowwiseOp::SUM) + int(op));
        begin_op(rowwise_op_name(r));
        rowwise_impl(stream, r, check_tensor(x, "x"), nullptr, nullptr, check_tensor(out, "out"),
                     RowwiseShape{});
    });
}

spyre_status spyre_op_reduce_dim(spyre_stream_t stream, spyre_reduce_op op, const spyre_tensor* x,
                                 int64_t dim, const spyre_tensor* out) {
    return guard(__func__, [&] {
        require(op >= SPYRE_REDUCE_SUM && op <= SPYRE_REDUCE_ARGMAX, "unknown reduction {}",
                int(op));
        const RowwiseOp r = static_cast<RowwiseOp>(int(RowwiseOp::SUM) + int(op));
        begin_op(rowwise_op_name(r));
        rowwise_dim(stream, r, check_tensor(x, "x"), dim, check_tensor(out, "out"), RowwiseShape{});
    });
}
