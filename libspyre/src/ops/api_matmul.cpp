// SPDX-License-Identifier: MIT
// C API of the matrix products (spyre_op_matmul, spyre_op_linear, spyre_op_mlp): operands
// normalised to stick rows, then the planned matmul program (ops/matmul_program.hpp).
#include <algorithm>
#include <cstdio>

#include "ops/api_common.hpp"
#include "ops/layout_plans.hpp"
#include "ops/matmul_planner.hpp"

namespace spyre::ops {
namespace {

std::shared_ptr<MatmulPlanner> planner_for(const Card& c) {
    static std::mutex mu;
    static auto* planners = new std::map<std::string, std::shared_ptr<MatmulPlanner>>;
    const spyre_engine_config cfg = engine_config_of(c.info);
    std::lock_guard lock(mu);
    auto& p = (*planners)[config_key(cfg)];
    if (!p) p = std::make_shared<MatmulPlanner>(cfg);
    return p;
}

// A matrix operand in stick layout: rows start 128-aligned, row stride a multiple of 128.
struct StickMat {
    spyre_buffer_t buf;
    uint64_t addr;  // device address of element (0, 0) of batch 0
    uint64_t ld;    // bytes between rows
    uint64_t bs;    // bytes between batch elements (0 = shared)
    bool trans;     // stored transposed (cols x rows)
};

// Queues `plan` (a pad or unpad plan for the op's card) if the layout program takes the shape;
// false if it does not (SPYRE_ERROR_NOT_SUPPORTED), for a DMA path instead.
template <class MakePlan>
bool layout_on_cores(const Card& c, MakePlan&& plan, spyre_stream_t stream, uint64_t src,
                     spyre_buffer_t src_buf, uint64_t dst, spyre_buffer_t dst_buf) {
    std::shared_ptr<const PlanEntry> e;
    try {
        e = plan();
    } catch (const Error& err) {
        if (err.status() != SPYRE_ERROR_NOT_SUPPORTED) throw;
        return false;
    }
    launch(c, e, stream, {src, dst}, {src_buf, dst_buf});
    return true;
}

// Uses m directly if its layout is stick rows (or, when allowed, transposed stick rows) of
// exactly rows_p x cols_p; else copies it into zero-padded scratch of that shape.
StickMat to_stick(const Mat& m, uint64_t rows_p, uint64_t cols_p, bool allow_trans,
                  spyre_stream_t stream, Scratch& scratch) {
    const uint64_t es = m.t->es;
    const bool aligned_addr = m.t->addr % kStick == 0;
    const bool bs_ok = m.batch == 1 || (uint64_t(m.bs) * es) % kStick == 0;
    if (rows_p == m.rows && cols_p == m.cols && aligned_addr && bs_ok) {
        if (m.cs == 1 && (uint64_t(m.rs) * es) % kStick == 0 && (m.rows == 1 || m.rs > 0))
            return {m.t->buffer, m.t->addr, m.rows == 1 ? up(m.cols * es, kStick) : m.rs * es,
                    m.bs * es, false};
        if (allow_trans && m.rs == 1 && (uint64_t(m.cs) * es) % kStick == 0 && m.cs > 0)
            return {m.t->buffer, m.t->addr, uint64_t(m.cs) * es, m.bs * es, true};
    }
    // zero-padded copy, one row of contiguous elements per strided copy row: rows of `cols`
    // elements (cs == 1), or for a transposed view (rs == 1, allowed) its stored rows
    const bool trans = m.cs != 1 && allow_trans && m.rs == 1;
    if (m.cs != 1 && !trans)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("tensor `{}`: a matrix whose rows and columns both have non-unit "
                         "element strides ({}, {}); make it contiguous first",
                         m.t->name, m.rs, m.cs));
    const uint64_t srows = trans ? m.cols : m.rows, scols = trans ? m.rows : m.cols;
    const uint64_t prows = trans ? cols_p : rows_p, pcols = trans ? rows_p : cols_p;
    const int64_t spitch = trans ? m.cs : m.rs;
    const uint64_t ld = up(pcols * es, kStick);
    const uint64_t batches = m.bs ? m.batch : 1;
    const Card c = card_of(m.t->buffer);
    call(spyre_malloc(c.dev, ld * prows * batches, &scratch.buf));
    uint64_t a = 0;
    call(spyre_buffer_device_address(scratch.buf, &a));
    const StickMat result{scratch.buf, a, ld, m.bs ? ld * prows : 0, trans};
    // the pad program: one launch on the cores, which also writes the zeros
    PadShape ps;
    ps.rows = srows, ps.cols = scols, ps.es = static_cast<uint32_t>(es);
    ps.src_ld = srows == 1 ? scols * es : uint64_t(spitch) * es;
    ps.dst_ld = ld, ps.dst_rows = prows;
    ps.batch = batches, ps.src_bs = uint64_t(m.bs) * es, ps.dst_bs = ld * prows;
    if (layout_on_cores(
            c, [&] { return pad_plan(c, ps); }, stream, m.t->addr, m.t->buffer, a, scratch.buf))
        return result;
    // shapes the pad program does not take: DMA (a clear, then one strided copy)
    call(spyre_memset_async(scratch.buf, 0, 0, ld * prows * batches, stream));
    spyre_memcpy3d_params p{};
    p.src_buffer = m.t->buffer;
    p.src_offset = m.t->offset;
    p.src_pitch = uint64_t(spitch) * es;
    p.src_slice_pitch = m.bs ? uint64_t(m.bs) * es : p.src_pitch * srows;
    p.dst_buffer = scratch.buf;
    p.dst_pitch = ld;
    p.dst_slice_pitch = ld * prows;
    p.width = scols * es;
    p.height = srows;
    p.depth = batches;
    if (srows == 1) p.src_pitch = p.width;  // a single row: its pitch does not matter
    if (p.src_pitch < p.width || (batches > 1 && p.src_slice_pitch < p.src_pitch * p.height)) {
        // rows overlap (e.g. a broadcast view with stride 0): copy row by row
        for (uint64_t bi = 0; bi < batches; ++bi)
            for (uint64_t r = 0; r < srows; ++r)
                call(spyre_memcpy_dtod_async(scratch.buf, (bi * prows + r) * ld, m.t->buffer,
                                             m.t->offset + (bi * m.bs + r * spitch) * es,
                                             scols * es, stream));
    } else {
        if (batches == 1) p.src_slice_pitch = p.src_pitch * p.height;
        call(spyre_memcpy_3d_async(&p, stream));
    }
    last_info().launches++;
    return result;
}

std::shared_ptr<const PlanEntry> matmul_plan(const Card& c, const MatmulShape& s) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("mm", cfg);
    key.add(s.M, s.N, s.K, s.in, s.out, s.trans_b, s.has_bias, s.bias_t, s.has_act, s.act, s.gated,
            s.lda, s.ldb, s.ldc, s.batch, s.batch_a, s.batch_b, s.batch_c);
    if (s.rotary) key.add(s.rot_d, s.rot_l, s.rot_cb, s.rot_cl, s.rot_t);
    if (s.w_i8 || s.has_scale) key.add(s.w_i8, s.has_scale, s.scale_t);
    return cached_plan(key.str(), [&] {
        const PricedSplit best = planner_for(c)->plan(s);
        PlanEntry e;
        e.image = build_matmul(s, best.split);
        e.cores = static_cast<uint32_t>(matmul_cores(best.split));
        e.cycles = best.cycles;
        e.plan = split_name(best.split);
        return e;
    });
}

// The rotary epilogue of spyre_op_linear_rotary: cos/sin rows (checked by the caller) of head
// dim d, row m of the product at position m % l of sequence m / l.
struct RotaryTables {
    const Tensor *cos, *sin;
    uint64_t d, l, cb, cl;  // byte strides of sequence and position (cb 0: shared)
};

// out = act(a @ b + bias), or with b2 (gated): out = act(a @ b) * (a @ b2), or with rot:
// rotary(a @ b).
// With `scales` (weight-only int8): b is int8, converted to a's type on the cores, and the
// product's columns are multiplied by the scales before the bias.
void matmul_impl(spyre_stream_t stream, const Mat& a, const Mat& b, const Tensor* bias,
                 spyre_activation act, const Tensor& out_t, const Mat* b2 = nullptr,
                 const RotaryTables* rot = nullptr, const Tensor* scales = nullptr) {
    const Mat out = as_batched_matrix(out_t);
    const isa::DType in = a.t->t;
    const bool w_i8 = scales != nullptr;
    // int8: the matrix unit's I8 MM, exact products summed in int32 (wrapping), no epilogue
    const bool i8 = in == isa::DType::I8;
    require(float_type(in) || i8,
            "matmul: {} inputs are not supported (float32, float16, "
            "bfloat16, int8)",
            dtype_name(int(in)));
    if (w_i8) {
        require(float_type(in) && b.t->t == isa::DType::I8,
                "linear_int8_weight: `{}` must be float32, float16 or bfloat16 and `{}` int8",
                a.t->name, b.t->name);
        require(scales->shape.size() == 1 && uint64_t(scales->shape[0]) == b.cols &&
                    float_type(scales->t),
                "linear_int8_weight: `{}` must be a float tensor of shape [{}]", scales->name,
                b.cols);
    } else {
        require(b.t->t == in, "matmul: `{}` is {} but `{}` is {}", a.t->name, dtype_name(int(in)),
                b.t->name, dtype_name(int(b.t->t)));
    }
    if (i8) {
        require(out_t.t == isa::DType::I32, "matmul: int8 inputs give an int32 output; `{}` is {}",
                out_t.name, dtype_name(int(out_t.t)));
        require(!bias && act == SPYRE_ACTIVATION_NONE && !b2 && !rot,
                "matmul: int8 inputs take no bias, activation, gate or rotary epilogue");
    } else {
        require(out_t.t == in || out_t.t == isa::DType::F32,
                "matmul: output `{}` is {}; it must be {} or float32", out_t.name,
                dtype_name(int(out_t.t)), dtype_name(int(in)));
    }
    require(a.cols == b.rows, "matmul: `{}` has {} columns but `{}` has {} rows", a.t->name, a.cols,
            b.t->name, b.rows);
    require(out.rows == a.rows && out.cols == b.cols,
            "matmul: output `{}` is {}x{}, expected {}x{}", out_t.name, out.rows, out.cols, a.rows,
            b.cols);
    const uint64_t batch = out.batch;
    require((a.batch == batch || a.batch == 1) && (b.batch == batch || b.batch == 1) &&
                (a.batch == batch || b.batch == batch),
            "matmul: batch sizes {} and {} do not give the output's {}", a.batch, b.batch, batch);
    if (bias) {
        require(bias->shape.size() == 1 && uint64_t(bias->shape[0]) == out.cols,
                "linear: bias must have shape [{}]", out.cols);
        require(float_type(bias->t), "linear: bias must be a floating-point tensor");
    }
    const Card c = card_of(out_t.buffer);
    for (const Tensor* t : {a.t, b.t, bias, scales})
        if (t)
            require(on_card(c, t->buffer), "matmul: `{}` is on another card than `{}`", t->name,
                    out_t.name);
    if (a.rows == 0 || b.cols == 0 || batch == 0) return;
    const uint64_t es = isa::dtype_size(in), oes = isa::dtype_size(out_t.t);
    const uint64_t wes = w_i8 ? 1 : es;
    if (a.cols == 0) {  // empty sum
        require(!bias, "linear: K = 0 with a bias is not supported");
        fail(SPYRE_ERROR_NOT_SUPPORTED, "matmul: K = 0 (nothing to multiply)");
    }
    // stick-aligned padded sizes: K and N to whole sticks of the input and output types
    const uint64_t Kp = up(a.cols, kStick / std::min(es, wes));
    const uint64_t Np = up(b.cols, std::max(kStick / std::min(es, wes), kStick / oes));
    Scratch sa, sb, sc, sbias;
    const StickMat A = to_stick(a, a.rows, Kp, false, stream, sa);
    StickMat B = to_stick(b, Kp, Np, true, stream, sb);
    if (B.trans && (B.ld / wes) < Kp) B = to_stick(b, Kp, Np, false, stream, sb);
    Scratch sb2;
    StickMat B2{};
    if (b2) {  // the second weight must be laid out exactly like the first
        require(b2->t->t == in && b2->rows == b.rows && b2->cols == b.cols && b2->batch == b.batch,
                "gated matmul: `{}` must match `{}`", b2->t->name, b.t->name);
        require(on_card(card_of(b.t->buffer), b2->t->buffer),
                "gated matmul: weights on different cards");
        B2 = to_stick(*b2, Kp, Np, true, stream, sb2);
        if (B2.trans != B.trans || B2.ld != B.ld || B2.bs != B.bs) {
            B = to_stick(b, Kp, Np, false, stream, sb);
            B2 = to_stick(*b2, Kp, Np, false, stream, sb2);
            if (B.trans != B2.trans || B.ld != B2.ld || B.bs != B2.bs)
                fail(SPYRE_ERROR_INTERNAL, "gated matmul: padded weights differ in layout");
        }
    }
    // the output: written in place when it has stick rows of width Np
    const bool direct_out = out.cols == Np && out.cs == 1 && out_t.addr % kStick == 0 &&
                            (uint64_t(out.rs) * oes) % kStick == 0 &&
                            (batch == 1 || (uint64_t(out.bs) * oes) % kStick == 0) &&
                            (out.rows == 1 || out.rs > 0);
    StickMat C{};
    if (direct_out) {
        C = {out_t.buffer, out_t.addr,
             out.rows == 1 ? up(out.cols * oes, kStick) : uint64_t(out.rs) * oes,
             uint64_t(out.bs) * oes, false};
    } else {
        const uint64_t ld = up(Np * oes, kStick);
        call(spyre_malloc(c.dev, ld * a.rows * batch, &sc.buf));
        uint64_t addr = 0;
        call(spyre_buffer_device_address(sc.buf, &addr));
        C = {sc.buf, addr, ld, ld * a.rows, false};
    }
    // a per-column vector (bias, scales) as Np elements from a stick: in place when it is one
    auto column_vector = [&](const Tensor* v, Scratch& sv) -> std::pair<uint64_t, spyre_buffer_t> {
        if (!v) return {0, nullptr};
        const uint64_t ves = v->es;
        if (v->addr % kStick == 0 && v->strides[0] == 1 && Np == out.cols)
            return {v->addr, v->buffer};
        uint64_t addr = 0;
        call(spyre_malloc(c.dev, up(Np * ves, kStick), &sv.buf));
        call(spyre_buffer_device_address(sv.buf, &addr));
        PadShape ps;  // one row
        ps.rows = 1, ps.cols = out.cols, ps.es = static_cast<uint32_t>(ves);
        ps.src_ld = out.cols * ves, ps.dst_ld = up(Np * ves, kStick);
        if (v->strides[0] != 1 ||
            !layout_on_cores(
                c, [&] { return pad_plan(c, ps); }, stream, v->addr, v->buffer, addr, sv.buf)) {
            call(spyre_memset_async(sv.buf, 0, 0, up(Np * ves, kStick), stream));
            for (uint64_t j = 0; j < out.cols; ++j)
                if (v->strides[0] != 1 || j == 0)
                    call(spyre_memcpy_dtod_async(
                        sv.buf, j * ves, v->buffer, v->offset + j * v->strides[0] * ves,
                        v->strides[0] == 1 ? out.cols * ves : ves, stream));
            last_info().launches++;
        }
        return {addr, sv.buf};
    };
    Scratch sscale;
    const auto [bias_addr, bias_buf] = column_vector(bias, sbias);
    const auto [scale_addr, scale_buf] = column_vector(scales, sscale);
    MatmulShape s;
    s.M = a.rows, s.N = Np, s.K = Kp;
    s.in = in, s.out = out_t.t;
    s.trans_b = B.trans;
    s.gated = b2 != nullptr;
    s.has_bias = bias != nullptr;
    if (bias) s.bias_t = bias->t;
    s.w_i8 = w_i8;
    s.has_scale = w_i8;
    if (w_i8) s.scale_t = scales->t;
    s.has_act = act != SPYRE_ACTIVATION_NONE;
    switch (act) {
        case SPYRE_ACTIVATION_RELU:
            s.act = isa::VUn::RELU;
            break;
        case SPYRE_ACTIVATION_GELU:
            s.act = isa::VUn::GELU;
            break;
        case SPYRE_ACTIVATION_GELU_TANH:
            s.act = isa::VUn::GELU_TANH;
            break;
        case SPYRE_ACTIVATION_SILU:
            s.act = isa::VUn::SILU;
            break;
        default:
            require(act == SPYRE_ACTIVATION_NONE, "unknown activation {}", int(act));
    }
    s.lda = A.ld, s.ldb = B.ld, s.ldc = C.ld;
    s.batch = batch;
    s.batch_a = a.batch == 1 ? 0 : A.bs;
    s.batch_b = b.batch == 1 ? 0 : B.bs;
    s.batch_c = C.bs;
    if (rot) {
        s.rotary = true;
        s.rot_d = rot->d, s.rot_l = rot->l, s.rot_cb = rot->cb, s.rot_cl = rot->cl;
        s.rot_t = rot->cos->t;
    }
    auto plan = matmul_plan(c, s);
    launch(
        c, plan, stream,
        {A.addr, B.addr, C.addr, bias_addr, b2 ? B2.addr : 0, rot ? rot->cos->addr : scale_addr,
         rot ? rot->sin->addr : 0},
        {A.buf, B.buf, C.buf, bias_buf ? bias_buf : A.buf, b2 ? B2.buf : A.buf,
         rot ? rot->cos->buffer : (scale_buf ? scale_buf : A.buf), rot ? rot->sin->buffer : A.buf});
    // drop the padding columns into the caller's output: on the cores if it is dense
    UnpadShape us;
    us.rows = out.rows, us.cols = out.cols, us.es = static_cast<uint32_t>(oes);
    us.src_ld = C.ld, us.batch = batch, us.src_bs = C.bs;
    const bool dense_out = is_dense(out_t) && out_t.addr % kStick == 0;
    if (!direct_out && !(dense_out && layout_on_cores(
                                          c, [&] { return unpad_plan(c, us); }, stream, C.addr,
                                          C.buf, out_t.addr, out_t.buffer))) {
        spyre_memcpy3d_params p{};
        p.src_buffer = C.buf;
        p.src_pitch = C.ld;
        p.src_slice_pitch = C.bs;
        p.dst_buffer = out_t.buffer;
        p.dst_offset = out_t.offset;
        p.dst_pitch = uint64_t(out.rs) * oes;
        p.dst_slice_pitch = uint64_t(out.bs) * oes;
        p.width = out.cols * oes;
        p.height = out.rows;
        p.depth = batch;
        require(out.cs == 1 && p.dst_pitch >= p.width &&
                    (batch == 1 || p.dst_slice_pitch >= p.dst_pitch * p.height),
                "matmul: output `{}` must have unit column stride and rows that do "
                "not overlap",
                out_t.name);
        if (batch == 1) p.dst_slice_pitch = p.dst_pitch * p.height;
        call(spyre_memcpy_3d_async(&p, stream));
        last_info().launches++;
    }
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_matmul(spyre_stream_t stream, const spyre_tensor* a, const spyre_tensor* b,
                             const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("matmul");
        const Tensor ta = check_tensor(a, "a"), tb = check_tensor(b, "b"),
                     to = check_tensor(out, "out");
        matmul_impl(stream, as_batched_matrix(ta), as_batched_matrix(tb), nullptr,
                    SPYRE_ACTIVATION_NONE, to);
    });
}

namespace {

// x [..., in] and out [..., out_features] as row matrices and weight^T as a K x N view.
struct LinearOperands {
    Tensor x2, wt, o2;
};

LinearOperands linear_operands(const Tensor& tx, const Tensor& tw, const Tensor& to) {
    require(tw.shape.size() == 2, "linear: `weight` must be 2-D [out_features, in]");
    require(!tx.shape.empty() && !to.shape.empty(), "linear: `x` and `out` need a dim");
    // x [..., in] as an M x in matrix: its leading dims must collapse into rows
    const uint64_t in = uint64_t(tx.dim(-1));
    uint64_t rows = 1;
    for (size_t d = 0; d + 1 < tx.shape.size(); ++d) rows *= uint64_t(tx.shape[d]);
    int64_t rs = tx.shape.size() >= 2 ? tx.stride(-2) : int64_t(in);
    for (size_t d = tx.shape.size() - 1; d-- > 1;)
        if (tx.shape[d - 1] != 1 && tx.strides[d - 1] != tx.strides[d] * tx.shape[d])
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 "linear: the leading dims of `x` do not collapse into rows (make it "
                 "contiguous first)");
    require(uint64_t(tw.dim(1)) == in, "linear: `x` has {} features but `weight` is {}x{}", in,
            tw.dim(0), tw.dim(1));
    uint64_t orows = 1;
    for (size_t d = 0; d + 1 < to.shape.size(); ++d) orows *= uint64_t(to.shape[d]);
    require(orows == rows && uint64_t(to.dim(-1)) == uint64_t(tw.dim(0)),
            "linear: `out` must have shape [..., {}] with the rows of `x`", tw.dim(0));
    int64_t ors = to.shape.size() >= 2 ? to.stride(-2) : to.dim(-1);
    for (size_t d = to.shape.size() - 1; d-- > 1;)
        if (to.shape[d - 1] != 1 && to.strides[d - 1] != to.strides[d] * to.shape[d])
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 "linear: the leading dims of `out` do not collapse into rows");
    LinearOperands r{tx, tw, to};
    r.x2.shape = {int64_t(rows), int64_t(in)};
    r.x2.strides = {rs, tx.stride(-1)};
    r.o2.shape = {int64_t(rows), to.dim(-1)};
    r.o2.strides = {ors, to.stride(-1)};
    r.wt.shape = {tw.dim(1), tw.dim(0)};
    r.wt.strides = {tw.stride(1), tw.stride(0)};
    return r;
}

}  // namespace

spyre_status spyre_op_linear(spyre_stream_t stream, const spyre_tensor* x,
                             const spyre_tensor* weight, const spyre_tensor* bias,
                             spyre_activation activation, const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("linear");
        const Tensor tx = check_tensor(x, "x"), tw = check_tensor(weight, "weight"),
                     to = check_tensor(out, "out");
        Tensor tbias{};
        if (bias) tbias = check_tensor(bias, "bias");
        const LinearOperands o = linear_operands(tx, tw, to);
        matmul_impl(stream, as_batched_matrix(o.x2), as_batched_matrix(o.wt),
                    bias ? &tbias : nullptr, activation, o.o2);
    });
}

spyre_status spyre_op_linear_int8_weight(spyre_stream_t stream, const spyre_tensor* x,
                                         const spyre_tensor* weight, const spyre_tensor* scales,
                                         const spyre_tensor* bias, spyre_activation activation,
                                         const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("linear_int8_weight");
        const Tensor tx = check_tensor(x, "x"), tw = check_tensor(weight, "weight"),
                     ts = check_tensor(scales, "scales"), to = check_tensor(out, "out");
        Tensor tbias{};
        if (bias) tbias = check_tensor(bias, "bias");
        const LinearOperands o = linear_operands(tx, tw, to);
        matmul_impl(stream, as_batched_matrix(o.x2), as_batched_matrix(o.wt),
                    bias ? &tbias : nullptr, activation, o.o2, nullptr, nullptr, &ts);
    });
}

spyre_status spyre_op_linear_rotary(spyre_stream_t stream, const spyre_tensor* x,
                                    const spyre_tensor* weight, const spyre_tensor* cos,
                                    const spyre_tensor* sin, const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("linear_rotary");
        const Tensor tx = check_tensor(x, "x"), tw = check_tensor(weight, "weight"),
                     tc = check_tensor(cos, "cos"), ts = check_tensor(sin, "sin"),
                     to = check_tensor(out, "out");
        const LinearOperands o = linear_operands(tx, tw, to);
        // rows of x: B sequences of L positions ([..., L, in]; a 1-D x is one position)
        const int64_t L = tx.shape.size() >= 2 ? tx.dim(-2) : 1;
        const int64_t rows = o.x2.dim(0), B = L ? rows / L : 0;
        require(!tc.shape.empty() && tc.shape == ts.shape && tc.t == ts.t && float_type(tc.t),
                "linear_rotary: `cos` and `sin` must be one floating type and shape");
        const int64_t D = tc.dim(-1), N = tw.dim(0);
        require(D > 0 && D % 2 == 0 && N % D == 0,
                "linear_rotary: the head dim ({}, cos's last) must be even and divide the {} "
                "output features",
                D, N);
        // cos/sin [L, D], [B or 1, L, D] or [B or 1, 1, L, D] (batch 1 = shared)
        RotaryTables rt{&tc, &ts, uint64_t(D), uint64_t(L), 0, 0};
        uint64_t st[2][2];
        int i = 0;
        for (const Tensor* t : {&tc, &ts}) {
            std::vector<int64_t> sh = t->shape, sd = t->strides;
            if (sh.size() == 4 && sh[1] == 1) sh.erase(sh.begin() + 1), sd.erase(sd.begin() + 1);
            if (sh.size() == 2) sh.insert(sh.begin(), 1), sd.insert(sd.begin(), 0);
            require(sh.size() == 3 && (sh[0] == B || sh[0] == 1) && sh[1] == L && sh[2] == D,
                    "linear_rotary: `{}` must be [{}, {}], [{} or 1, {}, {}] or [{} or 1, 1, {}, "
                    "{}]",
                    t->name, L, D, B, L, D, B, L, D);
            st[i][0] = sh[0] == 1 ? 0 : uint64_t(sd[0]) * t->es;
            st[i][1] = L == 1 ? up(uint64_t(D) * t->es, kStick) : uint64_t(sd[1]) * t->es;
            if (sd[2] != 1 || t->addr % kStick || st[i][0] % kStick || st[i][1] % kStick)
                fail(SPYRE_ERROR_NOT_SUPPORTED,
                     std::format("linear_rotary: `{}` needs contiguous rows starting 128-byte "
                                 "aligned, 128-byte multiple strides",
                                 t->name));
            ++i;
        }
        require(st[0][0] == st[1][0] && st[0][1] == st[1][1],
                "linear_rotary: `cos` and `sin` must have the same strides");
        rt.cb = st[0][0], rt.cl = st[0][1];
        require(on_card(card_of(to.buffer), tc.buffer) && on_card(card_of(to.buffer), ts.buffer),
                "linear_rotary: `cos` and `sin` must be on the card of `out`");
        matmul_impl(stream, as_batched_matrix(o.x2), as_batched_matrix(o.wt), nullptr,
                    SPYRE_ACTIVATION_NONE, o.o2, nullptr, &rt);
    });
}

spyre_status spyre_op_mlp(spyre_stream_t stream, const spyre_tensor* x, const spyre_tensor* w_gate,
                          const spyre_tensor* w_up, const spyre_tensor* w_down,
                          spyre_activation activation, const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("mlp");
        const Tensor tx = check_tensor(x, "x"), tu = check_tensor(w_up, "w_up"),
                     td = check_tensor(w_down, "w_down"), to = check_tensor(out, "out");
        Tensor tg{};
        if (w_gate) tg = check_tensor(w_gate, "w_gate");
        require(tu.shape.size() == 2 && td.shape.size() == 2 && (!w_gate || tg.shape.size() == 2),
                "mlp: weights must be 2-D [out_features, in_features]");
        require(tx.shape.size() == 2 && to.shape.size() == 2,
                "mlp: `x` and `out` must be 2-D [tokens, features]");
        const int64_t M = tx.dim(0), H = tx.dim(1), I = tu.dim(0);
        require(tu.dim(1) == H && (!w_gate || (tg.dim(0) == I && tg.dim(1) == H)) &&
                    td.dim(0) == H && td.dim(1) == I && to.dim(0) == M && to.dim(1) == H,
                "mlp: with x [{}, {}] the weights must be up/gate [I, {}] and "
                "down [{}, I], and out [{}, {}]",
                M, H, H, H, M, H);
        const Card c = card_of(to.buffer);
        // the hidden activations: stick rows of I elements in scratch
        const uint64_t es = tx.es, ld = up(uint64_t(I) * es, kStick);
        Scratch hs;
        call(spyre_malloc(c.dev, std::max<uint64_t>(ld * uint64_t(M), kStick), &hs.buf));
        Tensor th{"hidden", hs.buf, 0, 0, tx.t, es, {M, I}, {int64_t(ld / es), 1}};
        call(spyre_buffer_device_address(hs.buf, &th.addr));
        auto weight_t = [](const Tensor& w) {  // w^T as a K x N view
            Tensor r = w;
            r.shape = {w.dim(1), w.dim(0)};
            r.strides = {w.stride(1), w.stride(0)};
            return r;
        };
        const Tensor ut = weight_t(tu), dt = weight_t(td);
        const Mat xm = as_batched_matrix(tx), um = as_batched_matrix(ut);
        if (w_gate) {
            const Tensor gt = weight_t(tg);
            matmul_impl(stream, xm, as_batched_matrix(gt), nullptr, activation, th, &um);
        } else {
            matmul_impl(stream, xm, um, nullptr, activation, th);
        }
        std::string plan = std::string(w_gate ? "gate/up " : "up ") + last_info().plan;
        const uint32_t cores = last_info().cores;
        matmul_impl(stream, as_batched_matrix(th), as_batched_matrix(dt), nullptr,
                    SPYRE_ACTIVATION_NONE, to);
        plan += std::string("; down ") + last_info().plan;
        std::snprintf(last_info().plan, sizeof last_info().plan, "%s", plan.c_str());
        last_info().cores = std::max(cores, last_info().cores);
        finish_info_ns(c);
    });
}
