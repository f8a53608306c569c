// Reductions on the card (spyre_op_reduce along the last dim): sum, mean, amax, max (all
// elements, or a dim with its indices) and argmax over any set of dims. The reduced dims are
// moved to the end first (a dense copy on the card, spyre_op_copy, unless they already are
// the trailing dims of a dense tensor) and the tensor is read as [rows, cols]. argmax's int32
// indices are widened to int64 on the card too (a copy that interleaves them with zeros).
// Rows of more than 2^23 elements: the library reduces them in two stages; argmax takes the
// blocks' maxima and indices, then the first block holding the maximum (long_argmax_into).
// Integer and bool inputs reduce exactly on the card for sum (into int64), amax/amin, max() and
// any/all (MAX / MIN of x != 0); sum/mean with a dtype reduce x cast to it on the card; a sum
// or mean of an empty x is a fill; prod and other empty reductions run on the CPU fallback.
// trace is the sum of the diagonal view.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>
#include <numeric>

#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"
#include "Statistics.h"

namespace torch_spyre::aten {
namespace {

// x's reduced dims moved last and the result's shape: x as [rows, cols].
struct Plan {
    at::Tensor rows;  // [rows, cols], stick dense
    std::vector<int64_t> out_shape;
};

std::optional<Plan> plan(const char* name, const at::Tensor& x, at::OptionalIntArrayRef dims,
                         bool keepdim, bool ints = false) {
    const bool ok = is_float(x.scalar_type()) || (ints && is_int_dtype(x.scalar_type()));
    if (!ok || x.numel() == 0) return std::nullopt;
    const int64_t n = x.dim();
    std::vector<bool> reduced(std::max<int64_t>(n, 1), !dims || dims->empty());
    if (dims && !dims->empty()) {
        const auto mask = at::dim_list_to_bitset(*dims, n);
        for (int64_t d = 0; d < n; ++d) reduced[d] = mask[d];
    }
    std::vector<int64_t> perm, kept_shape, out_shape;
    int64_t cols = 1;
    for (int64_t d = 0; d < n; ++d)
        if (!reduced[d]) perm.push_back(d), kept_shape.push_back(x.size(d));
    for (int64_t d = 0; d < n; ++d)
        if (reduced[d]) perm.push_back(d), cols *= x.size(d);
    for (int64_t d = 0; d < n; ++d)
        if (!reduced[d] || keepdim) out_shape.push_back(reduced[d] ? 1 : x.size(d));
    auto dense = stick_dense(n ? x.permute(perm) : x, name);
    if (!dense) return std::nullopt;
    return Plan{dense->reshape({-1, cols}), out_shape};
}

// out (its final shape, x's type) = op over the rows of p.
bool reduce_into(const char* name, spyre_reduce_op op, const Plan& p, const at::Tensor& out) {
    const at::Tensor w = writable_output(out);
    const spyre_tensor tx = op_tensor(p.rows), to = op_tensor(w.view({p.rows.size(0)}));
    if (!op_ran(name, spyre_op_reduce(op_stream(w), op, &tx, &to))) return false;
    finish_output(out, w);
    return true;
}

// The library's rows hold at most 2^23 elements for ARGMAX (fp32 indices); longer rows split
// into k equal blocks of at most that (the least such k; 0 if none: the CPU then answers).
constexpr int64_t kLongRow = int64_t{1} << 23;
int64_t long_row_blocks(int64_t cols) {
    for (int64_t k = (cols + kLongRow - 1) / kLongRow; cols / k >= 32; ++k)
        if (cols % k == 0) return k;
    return 0;
}

bool argmax_into(const char* name, const Plan& p, const at::Tensor& out);

// argmax of rows longer than 2^23: each block's maximum and its first index (max.dim on the
// card), the first block holding the row's maximum, and its index there plus the block's start.
// NaN wins as in torch: a block's max is its first NaN, and so is the row's.
bool long_argmax_into(const char* name, const Plan& p, const at::Tensor& out) {
    const int64_t rows = p.rows.size(0), cols = p.rows.size(1), k = long_row_blocks(cols);
    if (!k) return false;
    const at::Tensor blocks = p.rows.view({rows, k, cols / k});
    at::Tensor bv = at::empty({rows, k}, blocks.options()),
               bi = at::empty({rows, k}, blocks.options().dtype(at::kLong));
    const Plan bp{blocks.reshape({rows * k, cols / k}), {rows, k}};
    if (!reduce_into(name, SPYRE_REDUCE_MAX, bp, bv) || !argmax_into(name, bp, bi)) return false;
    const at::Tensor first = at::empty({rows}, out.options());
    if (!argmax_into(name, Plan{bv, {rows}}, first)) return false;
    const at::Tensor sel = first.unsqueeze(1);
    out.copy_((sel * (cols / k) + bi.gather(1, sel)).view(out.sizes()));
    return true;
}

// int64 argmax indices into out: the library's int32 indices, then a copy on the card that
// writes each as the low word of an int64 with a zero high word (indices are >= 0).
bool argmax_into(const char* name, const Plan& p, const at::Tensor& out) {
    if (p.rows.size(1) > kLongRow) return long_argmax_into(name, p, out);
    const int64_t rows = p.rows.size(0);
    const at::Tensor idx = at::empty({2 * rows}, p.rows.options().dtype(at::kInt));
    idx.narrow(0, rows, rows).zero_();
    const spyre_tensor tx = op_tensor(p.rows), ti = op_tensor(idx.narrow(0, 0, rows));
    if (!op_ran(name, spyre_op_reduce(op_stream(idx), SPYRE_REDUCE_ARGMAX, &tx, &ti))) return false;
    const at::Tensor w = writable_output(out);
    spyre_tensor src = op_tensor(idx), dst = op_tensor(w);
    src.ndim = dst.ndim = 2;
    src.shape[0] = dst.shape[0] = rows;
    src.shape[1] = dst.shape[1] = 2;
    src.strides[0] = 1, src.strides[1] = rows;  // (i, 0) = idx[i], (i, 1) = a zero
    dst.strides[0] = 2, dst.strides[1] = 1;
    dst.dtype = SPYRE_DTYPE_INT32;
    if (!op_ran(name, spyre_op_copy(op_stream(w), &src, &dst))) return false;
    finish_output(out, w);
    return true;
}

bool reduce_out(const char* name, spyre_reduce_op op, const at::Tensor& x,
                at::OptionalIntArrayRef dims, bool keepdim, std::optional<at::ScalarType> dtype,
                const at::Tensor& out) {
    if ((dtype && *dtype != x.scalar_type()) || out.scalar_type() != x.scalar_type()) return false;
    c10::DeviceGuard guard(x.device());
    auto p = plan(name, x, dims, keepdim);
    if (!p) return false;
    at::native::resize_output(out, p->out_shape);
    return reduce_into(name, op, *p, out);
}

// An integer or bool x reduced exactly into the integer out (SUM wraps in int64 like torch).
bool int_reduce_out(const char* name, spyre_reduce_op op, const at::Tensor& x,
                    at::OptionalIntArrayRef dims, bool keepdim, const at::Tensor& out) {
    if (!x.is_privateuseone() || !out.is_privateuseone() || !is_int_dtype(x.scalar_type()) ||
        !is_int_dtype(out.scalar_type()) || out.scalar_type() == at::kBool)
        return false;
    c10::DeviceGuard guard(x.device());
    auto p = plan(name, x, dims, keepdim, true);
    if (!p) return false;
    at::native::resize_output(out, p->out_shape);
    return reduce_into(name, op, *p, out);
}

// any / all: MAX / MIN of the bool (x != 0) into out.
bool any_all_out(const char* name, bool any, const at::Tensor& x, at::OptionalIntArrayRef dims,
                 bool keepdim, const at::Tensor& out) {
    // bool out; uint8 for a uint8 x, as torch
    const bool out_ok = out.scalar_type() == at::kBool ||
                        (out.scalar_type() == at::kByte && x.scalar_type() == at::kByte);
    if (!x.is_privateuseone() || !out_ok ||
        !(is_int_dtype(x.scalar_type()) || is_float(x.scalar_type())))
        return false;
    c10::DeviceGuard guard(x.device());
    const at::Tensor m = x.scalar_type() == at::kBool ? x : x.ne(0);
    auto p = plan(name, m, dims, keepdim, true);
    if (!p) return false;
    at::native::resize_output(out, p->out_shape);
    return reduce_into(name, any ? SPYRE_REDUCE_MAX : SPYRE_REDUCE_MIN, *p, out);
}

// sum/mean(x, dtype=D) reduce x.to(D) (torch's definition): the cast, when D differs from x's
// type, on the card.
std::optional<at::Tensor> cast_for(const at::Tensor& x, std::optional<at::ScalarType> dtype) {
    if (!dtype || *dtype == x.scalar_type() || !x.is_privateuseone() || *dtype == at::kBool ||
        !(is_float(*dtype) || is_int_dtype(*dtype)))
        return std::nullopt;
    c10::DeviceGuard guard(x.device());
    return x.to(*dtype);
}

// A sum or mean over no elements (x empty: a mixture-of-experts layer's expert without tokens)
// is a fill: 0 for sum, NaN for mean, in the shape the CPU's reduction gives. false if x is
// not empty or not on the card.
bool empty_reduction(const at::Tensor& x, at::OptionalIntArrayRef dims, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out, bool mean) {
    if (x.numel() != 0 || !x.is_privateuseone() || !out.is_privateuseone()) return false;
    const at::Tensor shape = at::empty(x.sizes(), x.options().device(at::kMeta));
    const at::Tensor r =
        mean ? at::mean(shape, dims, keepdim, dtype) : at::sum(shape, dims, keepdim, dtype);
    if (r.scalar_type() != out.scalar_type()) return false;
    c10::DeviceGuard guard(out.device());
    at::native::resize_output(out, r.sizes());
    out.fill_(mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return true;
}

at::Tensor& sum_out(const at::Tensor& x, at::OptionalIntArrayRef dims, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
    if (empty_reduction(x, dims, keepdim, dtype, out, false)) return out;
    if (const auto cast = cast_for(x, dtype)) return sum_out(*cast, dims, keepdim, dtype, out);
    if ((!dtype || *dtype == out.scalar_type()) &&
        int_reduce_out("aten::sum", SPYRE_REDUCE_SUM, x, dims, keepdim, out))
        return out;
    if (reduce_out("aten::sum", SPYRE_REDUCE_SUM, x, dims, keepdim, dtype, out)) return out;
    return fallback_to_cpu<ATEN_OP2(sum, IntList_out)>(x, dims, keepdim, dtype, out);
}

at::Tensor& mean_out(const at::Tensor& x, at::OptionalIntArrayRef dims, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
    if (empty_reduction(x, dims, keepdim, dtype, out, true)) return out;
    if (const auto cast = cast_for(x, dtype)) return mean_out(*cast, dims, keepdim, dtype, out);
    if (reduce_out("aten::mean", SPYRE_REDUCE_MEAN, x, dims, keepdim, dtype, out)) return out;
    return fallback_to_cpu<ATEN_OP2(mean, out)>(x, dims, keepdim, dtype, out);
}

// A bool spyre tensor's bytes (0 or 1) read as uint8, whose extremes the integer kernels take:
// the extremes of bools are those of their bytes, and read back as bool.
bool card_bools(const at::Tensor& x) {
    return x.is_privateuseone() && x.scalar_type() == at::kBool;
}

at::Tensor& assign_bools(at::Tensor& out, const at::Tensor& bytes) {
    at::native::resize_output(out, bytes.sizes());
    out.copy_(bytes.view(at::kBool));
    return out;
}

at::Tensor& amax_out(const at::Tensor& x, at::IntArrayRef dims, bool keepdim, at::Tensor& out) {
    if (card_bools(x) && out.scalar_type() == at::kBool && x.numel() > 0) {
        c10::DeviceGuard guard(x.device());
        return assign_bools(out, at::amax(x.view(at::kByte), dims, keepdim));
    }
    if ((out.scalar_type() == x.scalar_type() &&
         int_reduce_out("aten::amax", SPYRE_REDUCE_MAX, x, dims, keepdim, out)) ||
        reduce_out("aten::amax", SPYRE_REDUCE_MAX, x, dims, keepdim, std::nullopt, out))
        return out;
    return fallback_to_cpu<ATEN_OP2(amax, out)>(x, dims, keepdim, out);
}

at::Tensor& amin_out(const at::Tensor& x, at::IntArrayRef dims, bool keepdim, at::Tensor& out) {
    if (card_bools(x) && out.scalar_type() == at::kBool && x.numel() > 0) {
        c10::DeviceGuard guard(x.device());
        return assign_bools(out, at::amin(x.view(at::kByte), dims, keepdim));
    }
    if ((out.scalar_type() == x.scalar_type() &&
         int_reduce_out("aten::amin", SPYRE_REDUCE_MIN, x, dims, keepdim, out)) ||
        reduce_out("aten::amin", SPYRE_REDUCE_MIN, x, dims, keepdim, std::nullopt, out))
        return out;
    return fallback_to_cpu<ATEN_OP2(amin, out)>(x, dims, keepdim, out);
}

at::Tensor& any_all_dims(const at::Tensor& x, at::OptionalIntArrayRef dims, bool keepdim,
                         at::Tensor& out) {
    if (any_all_out("aten::any", true, x, dims, keepdim, out)) return out;
    return fallback_to_cpu<ATEN_OP2(any, dims_out)>(x, dims, keepdim, out);
}
at::Tensor& any_all(const at::Tensor& x, at::Tensor& out) {
    if (any_all_out("aten::any", true, x, std::nullopt, false, out)) return out;
    return fallback_to_cpu<ATEN_OP2(any, all_out)>(x, out);
}
at::Tensor& all_dims(const at::Tensor& x, at::OptionalIntArrayRef dims, bool keepdim,
                     at::Tensor& out) {
    if (any_all_out("aten::all", false, x, dims, keepdim, out)) return out;
    return fallback_to_cpu<ATEN_OP2(all, dims_out)>(x, dims, keepdim, out);
}
at::Tensor& any_dim(const at::Tensor& x, int64_t dim, bool keepdim, at::Tensor& out) {
    const int64_t d[1] = {dim};
    if (any_all_out("aten::any", true, x, d, keepdim, out)) return out;
    return fallback_to_cpu<ATEN_OP2(any, out)>(x, dim, keepdim, out);
}
at::Tensor& all_dim(const at::Tensor& x, int64_t dim, bool keepdim, at::Tensor& out) {
    const int64_t d[1] = {dim};
    if (any_all_out("aten::all", false, x, d, keepdim, out)) return out;
    return fallback_to_cpu<ATEN_OP2(all, out)>(x, dim, keepdim, out);
}
at::Tensor& all_all(const at::Tensor& x, at::Tensor& out) {
    if (any_all_out("aten::all", false, x, std::nullopt, false, out)) return out;
    return fallback_to_cpu<ATEN_OP2(all, all_out)>(x, out);
}

// max() / min() of all elements into a 0-dim tensor; false: not taken.
bool extreme_all(const char* name, spyre_reduce_op op, const at::Tensor& x, at::Tensor& out) {
    if (!x.is_privateuseone()) return false;
    c10::DeviceGuard guard(x.device());
    out = at::empty({}, x.options());
    if (is_float(x.scalar_type()))
        return reduce_out(name, op, x, std::nullopt, false, std::nullopt, out);
    if (x.scalar_type() == at::kBool && x.numel() > 0) {
        at::Tensor bytes = at::empty({}, x.options().dtype(at::kByte));
        if (!int_reduce_out(name, op, x.view(at::kByte), std::nullopt, false, bytes)) return false;
        out = bytes.view(at::kBool);
        return true;
    }
    return is_int_dtype(x.scalar_type()) && x.scalar_type() != at::kBool &&
           int_reduce_out(name, op, x, std::nullopt, false, out);
}

at::Tensor max_all(const at::Tensor& x) {
    at::Tensor out;
    if (extreme_all("aten::max", SPYRE_REDUCE_MAX, x, out)) return out;
    return fallback_to_cpu<ATEN_OP(max)>(x);
}

at::Tensor min_all(const at::Tensor& x) {
    at::Tensor out;
    if (extreme_all("aten::min", SPYRE_REDUCE_MIN, x, out)) return out;
    return fallback_to_cpu<ATEN_OP(min)>(x);
}

std::tuple<at::Tensor&, at::Tensor&> max_dim_out(const at::Tensor& x, int64_t dim, bool keepdim,
                                                 at::Tensor& values, at::Tensor& indices) {
    const char* name = "aten::max.dim";
    if (card_bools(x) && values.scalar_type() == at::kBool && indices.scalar_type() == at::kLong &&
        x.numel() > 0) {
        c10::DeviceGuard guard(x.device());
        auto [v, i] = at::max(x.view(at::kByte), dim, keepdim);
        assign_bools(values, v);
        at::native::resize_output(indices, i.sizes());
        indices.copy_(i);
        return {values, indices};
    }
    if (values.scalar_type() == x.scalar_type() && indices.scalar_type() == at::kLong) {
        c10::DeviceGuard guard(x.device());
        const int64_t d[1] = {dim};
        if (auto p = plan(name, x, d, keepdim)) {
            at::native::resize_output(values, p->out_shape);
            at::native::resize_output(indices, p->out_shape);
            if (reduce_into(name, SPYRE_REDUCE_MAX, *p, values) && argmax_into(name, *p, indices))
                return {values, indices};
        }
    }
    // integers: amax and the first index holding it
    if (values.scalar_type() == x.scalar_type() && x.is_privateuseone() &&
        is_int_dtype(x.scalar_type()) && x.scalar_type() != at::kBool && x.numel() > 0 &&
        x.dim() > 0 && int_arg_extreme(x, dim, keepdim, /*largest=*/true, indices)) {
        c10::DeviceGuard guard(x.device());
        const at::Tensor v = x.amax(dim, keepdim);
        at::native::resize_output(values, v.sizes());
        values.copy_(v);
        return {values, indices};
    }
    return fallback_to_cpu<ATEN_OP2(max, dim_max)>(x, dim, keepdim, values, indices);
}

at::Tensor& argmax_out(const at::Tensor& x, std::optional<int64_t> dim, bool keepdim,
                       at::Tensor& out) {
    const char* name = "aten::argmax";
    if (out.scalar_type() == at::kLong) {
        c10::DeviceGuard guard(x.device());
        std::optional<Plan> p;
        if (dim) {
            const int64_t d[1] = {*dim};
            p = plan(name, x, d, keepdim);
        } else {
            p = plan(name, x, std::nullopt, false);  // the flat index; keepdim keeps all dims as 1
            if (p && keepdim) p->out_shape.assign(x.dim(), 1);
        }
        if (p) {
            at::native::resize_output(out, p->out_shape);
            if (argmax_into(name, *p, out)) return out;
        }
    }
    if (int_arg_extreme(x, dim, keepdim, /*largest=*/true, out)) return out;
    return fallback_to_cpu<ATEN_OP2(argmax, out)>(x, dim, keepdim, out);
}

// trace: the sum of a matrix's main diagonal, of the sum's type (int64 for integers; fp16 and
// bf16 too, which the CPU's kernel does not take; bool is the CPU's error).
bool traceable(const at::Tensor& x) {
    return x.is_privateuseone() && x.dim() == 2 &&
           (is_float(x.scalar_type()) ||
            (is_int_dtype(x.scalar_type()) && x.scalar_type() != at::kBool));
}

at::Tensor trace(const at::Tensor& x) {
    if (!traceable(x)) return fallback_to_cpu<ATEN_OP(trace)>(x);  // the CPU's result or error
    c10::DeviceGuard guard(x.device());
    return at::sum(x.diagonal());
}

at::Tensor& trace_out(const at::Tensor& x, at::Tensor& out) {
    if (!traceable(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(trace, out)>(x, out);
    c10::DeviceGuard guard(x.device());
    const at::Tensor r = at::sum(x.diagonal());
    at::native::resize_output(out, r.sizes());
    return out.copy_(r);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("sum.IntList_out", TORCH_FN(sum_out));
    m.impl("mean.out", TORCH_FN(mean_out));
    m.impl("amax.out", TORCH_FN(amax_out));
    m.impl("amin.out", TORCH_FN(amin_out));
    m.impl("any.dims_out", TORCH_FN(any_all_dims));
    m.impl("any.all_out", TORCH_FN(any_all));
    m.impl("all.dims_out", TORCH_FN(all_dims));
    m.impl("all.all_out", TORCH_FN(all_all));
    m.impl("any.out", TORCH_FN(any_dim));
    m.impl("all.out", TORCH_FN(all_dim));
    m.impl("max", TORCH_FN(max_all));
    m.impl("min", TORCH_FN(min_all));
    m.impl("max.dim_max", TORCH_FN(max_dim_out));
    m.impl("argmax.out", TORCH_FN(argmax_out));
    m.impl("trace", TORCH_FN(trace));
    m.impl("trace.out", TORCH_FN(trace_out));
}

}  // namespace torch_spyre::aten
