// cummax / cummin on the card: a Hillis-Steele scan over `dim` of (value, index) pairs, log2(n)
// steps of elementwise compares and selects. The CPU's sequential rule (a NaN always takes over,
// at its own index; otherwise an element takes over when >= (cummax) or <= (cummin) the running
// one, so ties move to the later index) is the associative "keep the right pair when its value
// beats or ties the left one, NaN above everything", so the scan gives the CPU's values and
// indices exactly.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// The pair at the right replaces the one at the left of each step.
at::Tensor right_wins(const at::Tensor& left, const at::Tensor& right, bool is_max) {
    const at::Tensor beats = is_max ? at::ge(right, left) : at::le(right, left);
    if (!at::isFloatingType(left.scalar_type())) return beats;
    return at::logical_or(at::isnan(right),
                          at::logical_and(at::logical_not(at::isnan(left)), beats));
}

// The scan of x along dim as (values, indices), indices counted from `first`.
std::pair<at::Tensor, at::Tensor> scan_pairs(const at::Tensor& x, int64_t dim, bool is_max,
                                             int64_t first) {
    const int64_t n = x.size(dim);
    std::vector<int64_t> index_shape(x.dim(), 1);
    index_shape[dim] = n;
    at::Tensor v = x.contiguous();
    at::Tensor i = at::arange(first, first + n, x.options().dtype(at::kLong))
                       .reshape(index_shape)
                       .expand(x.sizes())
                       .contiguous();
    for (int64_t k = 1; k < n; k *= 2) {
        const at::Tensor lv = v.narrow(dim, 0, n - k), rv = v.narrow(dim, k, n - k);
        const at::Tensor take = right_wins(lv, rv, is_max);
        v = at::cat({v.narrow(dim, 0, k), at::where(take, rv, lv)}, dim);
        i = at::cat({i.narrow(dim, 0, k),
                     at::where(take, i.narrow(dim, k, n - k), i.narrow(dim, 0, n - k))},
                    dim);
    }
    return {v, i};
}

bool scan_on_card(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim,
                  bool is_max) {
    const at::ScalarType t = self.scalar_type();
    if (!self.is_privateuseone() || !values.is_privateuseone() || !indices.is_privateuseone() ||
        !(is_float(t) || t == at::kInt || t == at::kLong) || values.scalar_type() != t ||
        indices.scalar_type() != at::kLong || self.dim() == 0 || self.numel() == 0)
        return false;
    c10::DeviceGuard guard(self.device());
    dim = c10::maybe_wrap_dim(dim, self.dim());
    at::native::resize_output(values, self.sizes());
    at::native::resize_output(indices, self.sizes());
    // The scan's temporaries are several times the tensor (a 16.8M-element cummax needed more
    // than the simulator's 1 GiB): blocks of about 2^21 elements along dim, one after another,
    // each combined with the running pair of the blocks before it (the same associative rule).
    constexpr int64_t kBlockElements = int64_t{1} << 21;
    const int64_t n = self.size(dim), per = self.numel() / n;
    const int64_t block = std::max<int64_t>(1, kBlockElements / per);
    at::Tensor carry_v, carry_i;
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        const int64_t len = std::min(block, n - b0);
        auto [v, i] = scan_pairs(self.narrow(dim, b0, len), dim, is_max, b0);
        if (b0 > 0) {
            const at::Tensor take = right_wins(carry_v, v, is_max);
            v = at::where(take, v, carry_v);
            i = at::where(take, i, carry_i);
        }
        values.narrow(dim, b0, len).copy_(v);
        indices.narrow(dim, b0, len).copy_(i);
        carry_v = v.narrow(dim, len - 1, 1);
        carry_i = i.narrow(dim, len - 1, 1);
    }
    return true;
}

// bools as int32 (exact), the values converted back
bool bool_scan_on_card(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim,
                       bool is_max) {
    if (!self.is_privateuseone() || self.scalar_type() != at::kBool ||
        values.scalar_type() != at::kBool || !values.is_privateuseone())
        return false;
    c10::DeviceGuard guard(self.device());
    at::Tensor v = at::empty({0}, values.options().dtype(at::kInt));
    if (!scan_on_card(self.to(at::kInt), v, indices, dim, is_max)) return false;
    at::native::resize_output(values, v.sizes());
    values.copy_(v.to(at::kBool));
    return true;
}

void cummax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
    if (bool_scan_on_card(self, values, indices, dim, true)) return;
    if (!scan_on_card(self, values, indices, dim, true))
        fallback_to_cpu<ATEN_OP(_cummax_helper)>(self, values, indices, dim);
}

void cummin_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
    if (bool_scan_on_card(self, values, indices, dim, false)) return;
    if (!scan_on_card(self, values, indices, dim, false))
        fallback_to_cpu<ATEN_OP(_cummin_helper)>(self, values, indices, dim);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_cummax_helper", TORCH_FN(cummax_helper));
    m.impl("_cummin_helper", TORCH_FN(cummin_helper));
}

}  // namespace torch_spyre::aten
