// sort (argsort, msort) and topk on the card (spyre_op_sort): fp32/fp16/bf16 rows in the stable
// order with NaN largest, int64 indices. The library sorts along the last dim, so another dim is
// moved last by a dense copy on the card and the results moved back the same way. Other dtypes,
// rows too long for a core's scratchpad (about 32768 elements) and k out of range (the CPU's
// error) run on the CPU fallback. The stable order is also a valid answer of the unstable sort
// and of topk (which leave the order of ties open).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// values, indices = the first k of self's rows along dim in the stable order; false: not taken.
bool sort_into(const char* name, const at::Tensor& self, int64_t dim, int64_t k, bool descending,
               at::Tensor& values, at::Tensor& indices) {
    if (!self.is_privateuseone() || !values.is_privateuseone() || !indices.is_privateuseone() ||
        !is_float(self.scalar_type()) || values.scalar_type() != self.scalar_type() ||
        indices.scalar_type() != at::kLong || self.dim() > SPYRE_TENSOR_MAX_DIMS)
        return false;
    c10::DeviceGuard guard(self.device());
    const at::Tensor x = self.dim() ? self : self.view({1});
    const int64_t d = at::maybe_wrap_dim(dim, x.dim());
    if (k < 0 || k > x.size(d)) return false;
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape[d] = k;
    at::native::resize_output(values, self.dim() ? at::IntArrayRef(shape) : self.sizes());
    at::native::resize_output(indices, self.dim() ? at::IntArrayRef(shape) : self.sizes());
    if (values.numel() == 0) return true;
    const bool last = d == x.dim() - 1;
    const auto xd = stick_dense(last ? x : x.movedim(d, -1), name);
    if (!xd) return false;
    std::vector<int64_t> lshape(xd->sizes().begin(), xd->sizes().end());
    lshape.back() = k;
    const at::Tensor v = values.dim() ? values : values.view({1});
    const at::Tensor i = indices.dim() ? indices : indices.view({1});
    const at::Tensor wv = last ? writable_output(v) : at::empty(lshape, values.options());
    const at::Tensor wi = last ? writable_output(i) : at::empty(lshape, indices.options());
    const spyre_tensor tx = op_tensor(*xd), tv = op_tensor(wv), ti = op_tensor(wi);
    if (!op_ran(name, spyre_op_sort(op_stream(wv), &tx, -1, descending ? SPYRE_SORT_DESCENDING : 0,
                                    &tv, &ti)))
        return false;
    if (last) {
        finish_output(v, wv);
        finish_output(i, wi);
    } else {
        v.copy_(wv.movedim(-1, d));
        i.copy_(wi.movedim(-1, d));
    }
    return true;
}

std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self,
                                                        std::optional<bool> stable, int64_t dim,
                                                        bool descending, at::Tensor& values,
                                                        at::Tensor& indices) {
    const int64_t n = self.dim() ? self.size(at::maybe_wrap_dim(dim, self.dim())) : 1;
    if (sort_into("aten::sort", self, dim, n, descending, values, indices))
        return {values, indices};
    return fallback_to_cpu<ATEN_OP2(sort, values_stable)>(self, stable, dim, descending, values,
                                                          indices);
}

std::tuple<at::Tensor&, at::Tensor&> sort_values(const at::Tensor& self, int64_t dim,
                                                 bool descending, at::Tensor& values,
                                                 at::Tensor& indices) {
    const int64_t n = self.dim() ? self.size(at::maybe_wrap_dim(dim, self.dim())) : 1;
    if (sort_into("aten::sort", self, dim, n, descending, values, indices))
        return {values, indices};
    return fallback_to_cpu<ATEN_OP2(sort, values)>(self, dim, descending, values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> topk_values(const at::Tensor& self, c10::SymInt k, int64_t dim,
                                                 bool largest, bool sorted, at::Tensor& values,
                                                 at::Tensor& indices) {
    // largest: the first k of the descending order; else of the ascending one (sorted either way)
    if (auto kk = k.maybe_as_int())
        if (sort_into("aten::topk", self, dim, *kk, largest, values, indices))
            return {values, indices};
    return fallback_to_cpu<ATEN_OP2(topk, values)>(self, k.expect_int(), dim, largest, sorted,
                                                   values, indices);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("sort.values_stable", TORCH_FN(sort_values_stable));
    m.impl("sort.values", TORCH_FN(sort_values));
    m.impl("topk.values", TORCH_FN(topk_values));
}

}  // namespace torch_spyre::aten
