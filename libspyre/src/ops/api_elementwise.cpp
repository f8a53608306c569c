// SPDX-License-Identifier: MIT
// C API of the elementwise ops (spyre_op_unary, spyre_op_binary, spyre_op_where,
// spyre_op_clamp): torch-style
// broadcasts collapsed into the [rows, cols] forms of ops/elementwise_program.hpp.
#include <cmath>
#include <optional>

#include "ops/api_common.hpp"
#include "ops/elementwise_program.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {
namespace {

// How an operand broadcasts to an output of `shape` when the dims split at k into rows
// (dims < k) and cols (dims >= k); nothing if it does not fit this split.
std::optional<isa::Bcast> fit(const Tensor& t, const std::vector<int64_t>& shape, size_t k) {
    const size_t n = shape.size();
    if (t.shape.size() > n) return std::nullopt;
    std::vector<int64_t> s(n - t.shape.size(), 1);
    s.insert(s.end(), t.shape.begin(), t.shape.end());
    bool full = true, one = true, row = true, col = true;
    for (size_t d = 0; d < n; ++d) {
        full &= s[d] == shape[d];
        one &= s[d] == 1;
        if (d < k)
            row &= s[d] == 1, col &= s[d] == shape[d];
        else
            row &= s[d] == shape[d], col &= s[d] == 1;
    }
    if (full) return isa::Bcast::NONE;
    if (one) return isa::Bcast::SCALAR;
    if (row) return isa::Bcast::ROW;
    if (col) return isa::Bcast::COL;
    return std::nullopt;
}

struct Operand {
    const Tensor* t = nullptr;  // nullptr: an immediate
    float imm = 0.0f;
    int64_t iimm = 0;  // the immediate of integer shapes
};

void elementwise_impl(spyre_stream_t stream, EwOp op, const Operand& a, const Operand& b,
                      const Operand& cond, const Tensor& out, float alpha, int64_t ialpha = 1) {
    const char* name = ew_name(op);
    if (!is_dense(out) || out.addr % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: `{}` must be dense and start 128-byte aligned", name, out.name));
    for (const Operand* o : {&a, &b, &cond})
        if (o->t) {
            if (!is_dense(*o->t))
                fail(SPYRE_ERROR_NOT_SUPPORTED,
                     std::format("{}: `{}` must be dense (make it contiguous first)", name,
                                 o->t->name));
        }
    const Card c = card_of(out.buffer);
    require_same_card(c, {a.t, b.t, cond.t}, name);
    if (out.numel() == 0) return;
    // the split of out's dims into rows and cols that every operand fits (most columns first)
    const std::vector<int64_t>& shape = out.shape;
    std::optional<size_t> split;
    isa::Bcast modes[3] = {isa::Bcast::IMM, isa::Bcast::IMM, isa::Bcast::IMM};
    for (size_t k = 0; k <= shape.size() && !split; ++k) {
        bool ok = true;
        const Operand* ops[3] = {&a, &b, &cond};
        for (int i = 0; i < 3 && ok; ++i) {
            if (!ops[i]->t) continue;
            const auto m = fit(*ops[i]->t, shape, k);
            if (!m)
                ok = false;
            else
                modes[i] = *m;
        }
        if (ok) split = k;
    }
    if (!split)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("{}: this broadcast does not collapse into rows and columns", name));
    uint64_t rows = 1, cols = 1;
    for (size_t d = 0; d < shape.size(); ++d) (d < *split ? rows : cols) *= uint64_t(shape[d]);
    EwShape s;
    s.op = op, s.rows = rows, s.cols = cols, s.out = out.t, s.alpha = alpha, s.ialpha = ialpha;
    auto operand = [&](const Operand& o, isa::Bcast m) {
        EwOperand r;
        r.mode = o.t ? m : isa::Bcast::IMM;
        r.t = o.t ? o.t->t : isa::DType::F32;
        r.imm = o.imm;
        r.iimm = o.iimm;
        return r;
    };
    s.a = operand(a, modes[0]);
    if (op >= EwOp::ADD) s.b = operand(b, modes[1]);
    if (op == EwOp::WHERE || op == EwOp::CLAMP) s.cond = operand(cond, modes[2]);
    // a full operand starts on a stick
    for (const Operand* o : {&a, &b, &cond})
        if (o->t && o->t->numel() == out.numel() && o->t->addr % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{}: `{}` must start 128-byte aligned", name, o->t->name));
    const spyre_engine_config cfg = engine_config_of(c.info);
    // the plan and its program depend on the structure only: every value of a scalar (an
    // optimizer's step size that changes every call) reuses them, the value is a launch argument
    const EwShape n = ew_structure(s);
    PlanKey key("ew", cfg);
    key.add(op, rows, cols, n.out, n.a.t, n.a.mode, n.b.t, n.b.mode, n.cond.t, n.cond.mode, n.alpha,
            n.b.iimm, n.ialpha);
    auto plan = cached_plan(key.str(), [&] {
        ew_validate(n);
        const Pricer pricer(cfg);
        const EwPlan p = plan_elementwise(pricer, n, cfg.num_cores);
        PlanEntry e;
        e.image = build_elementwise(n, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = ew_plan_name(p);
        return e;
    });
    auto addr = [](const Operand& o) { return o.t ? o.t->addr : uint64_t{0}; };
    auto buf = [](const Operand& o) { return o.t ? o.t->buffer : nullptr; };
    launch(c, plan, stream, ew_launch_args(s, addr(a), out.addr, addr(b), addr(cond)),
           {buf(a), out.buffer, buf(b), buf(cond)});
    finish_info(c, *plan);
}

// The float ops: RELU .. COS and FLOOR .. ATANH are positional, CAST is placed explicitly.
static_assert(int(EwOp::COS) - int(EwOp::RELU) == SPYRE_UNARY_COS - SPYRE_UNARY_RELU);
static_assert(int(EwOp::ATANH) - int(EwOp::FLOOR) == SPYRE_UNARY_ATANH - SPYRE_UNARY_FLOOR);
EwOp unary_op(spyre_unary_op op) {
    if (op == SPYRE_UNARY_CAST) return EwOp::CAST;
    if (op >= SPYRE_UNARY_FLOOR && op <= SPYRE_UNARY_ATANH)
        return static_cast<EwOp>(int(EwOp::FLOOR) + int(op) - int(SPYRE_UNARY_FLOOR));
    require(op >= SPYRE_UNARY_RELU && op <= SPYRE_UNARY_COS, "unknown unary op {}", int(op));
    return static_cast<EwOp>(int(EwOp::RELU) + int(op));
}

EwOp unary_op_any(spyre_unary_op op) {
    return op == SPYRE_UNARY_BITWISE_NOT ? EwOp::NOT : unary_op(op);
}

EwOp binary_op(spyre_binary_op op) {
    require(op >= SPYRE_BINARY_ADD && op <= SPYRE_BINARY_RSHIFT, "unknown binary op {}", int(op));
    if (op >= SPYRE_BINARY_FLOOR_DIVIDE)
        return static_cast<EwOp>(int(EwOp::FLOOR_DIV) + int(op) - int(SPYRE_BINARY_FLOOR_DIVIDE));
    return static_cast<EwOp>(int(EwOp::ADD) + int(op));
}

// A double that is a whole number within int64 (spyre_op_binary on integer tensors).
std::optional<int64_t> whole(double v) {
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0) || v != std::trunc(v))
        return std::nullopt;
    return static_cast<int64_t>(v);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_unary(spyre_stream_t stream, spyre_unary_op op, const spyre_tensor* x,
                            const spyre_tensor* out) {
    return guard(__func__, [&] {
        const EwOp e = unary_op_any(op);
        begin_op(ew_name(e));
        const Tensor tx = check_tensor(x, "x"), to = check_tensor(out, "out");
        require(tx.shape == to.shape, "unary: `x` and `out` must have one shape");
        elementwise_impl(stream, e, {&tx, 0.0f}, {}, {}, to, 1.0f);
    });
}

spyre_status spyre_op_binary(spyre_stream_t stream, spyre_binary_op op, const spyre_tensor* a,
                             const spyre_tensor* b, double scalar, double alpha,
                             const spyre_tensor* out) {
    return guard(__func__, [&] {
        const EwOp e = binary_op(op);
        begin_op(ew_name(e));
        const Tensor ta = check_tensor(a, "a"), to = check_tensor(out, "out");
        Tensor tb{};
        if (b) tb = check_tensor(b, "b");
        if (isa::int_type(ta.t)) {
            // integer tensors: the numbers must be exact integers
            const auto s = whole(b ? 0.0 : scalar), al = whole(alpha);
            if (!s || !al)
                fail(SPYRE_ERROR_NOT_SUPPORTED,
                     std::format("{}: integer tensors take whole-number scalar and alpha",
                                 ew_name(e)));
            elementwise_impl(stream, e, {&ta}, {b ? &tb : nullptr, 0.0f, *s}, {}, to, 1.0f, *al);
            return;
        }
        elementwise_impl(stream, e, {&ta, 0.0f}, {b ? &tb : nullptr, float(scalar)}, {}, to,
                         float(alpha));
    });
}

spyre_status spyre_op_binary_int(spyre_stream_t stream, spyre_binary_op op, const spyre_tensor* a,
                                 const spyre_tensor* b, int64_t scalar, int64_t alpha,
                                 const spyre_tensor* out) {
    return guard(__func__, [&] {
        const EwOp e = binary_op(op);
        begin_op(ew_name(e));
        const Tensor ta = check_tensor(a, "a"), to = check_tensor(out, "out");
        Tensor tb{};
        if (b) tb = check_tensor(b, "b");
        require(isa::int_type(ta.t), "{}: `a` must be an integer tensor", ew_name(e));
        elementwise_impl(stream, e, {&ta}, {b ? &tb : nullptr, 0.0f, b ? 0 : scalar}, {}, to, 1.0f,
                         alpha);
    });
}

spyre_status spyre_op_where(spyre_stream_t stream, const spyre_tensor* cond, const spyre_tensor* a,
                            double a_scalar, const spyre_tensor* b, double b_scalar,
                            const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("where");
        const Tensor tc = check_tensor(cond, "cond"), to = check_tensor(out, "out");
        Tensor ta{}, tb{};
        if (a) ta = check_tensor(a, "a");
        if (b) tb = check_tensor(b, "b");
        elementwise_impl(stream, EwOp::WHERE, {a ? &ta : nullptr, float(a_scalar)},
                         {b ? &tb : nullptr, float(b_scalar)}, {&tc, 0.0f}, to, 1.0f);
    });
}

spyre_status spyre_op_clamp(spyre_stream_t stream, const spyre_tensor* x, const spyre_tensor* lo,
                            double lo_scalar, const spyre_tensor* hi, double hi_scalar,
                            const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("clamp");
        const Tensor tx = check_tensor(x, "x"), to = check_tensor(out, "out");
        Tensor tl{}, th{};
        if (lo) tl = check_tensor(lo, "lo");
        if (hi) th = check_tensor(hi, "hi");
        elementwise_impl(stream, EwOp::CLAMP, {&tx, 0.0f}, {lo ? &tl : nullptr, float(lo_scalar)},
                         {hi ? &th : nullptr, float(hi_scalar)}, to, 1.0f);
    });
}
