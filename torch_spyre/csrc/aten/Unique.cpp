// torch.unique (`_unique2`: sorted, return_inverse, return_counts) of the flattened input,
// composed of device ops: a stable sort (float or integer keys, Sort.cpp), the first element of
// each run of equal sorted values (`!=` with its predecessor: each NaN is its own run, as on
// the CPU), their inclusive count as each sorted element's group (cumsum), the groups
// scattered back to the elements' positions (the inverse), the runs' first values (nonzero:
// one host read, the result's size depends on the data, as on CUDA) and the counts (an
// accumulating index_put_ of ones). The sorted answer is also a valid unsorted one.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool sortable(at::ScalarType t) {
    return is_float(t) || t == at::kLong || t == at::kInt || t == at::kChar || t == at::kByte;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool sorted,
                                                       bool return_inverse, bool return_counts) {
    if (!self.is_privateuseone() || !sortable(self.scalar_type()))
        return fallback_to_cpu<ATEN_OP(_unique2)>(self, sorted, return_inverse, return_counts);
    c10::DeviceGuard guard(self.device());
    const auto longs = self.options().dtype(at::kLong);
    const int64_t n = self.numel();
    if (n == 0)
        return {at::empty({0}, self.options()),
                return_inverse ? at::empty(self.sizes(), longs) : at::empty({0}, longs),
                at::empty({0}, longs)};
    const auto [sv, perm] = at::sort(self.reshape({-1}), /*stable=*/true, 0, false);
    at::Tensor first = at::ones({n}, self.options().dtype(at::kBool));
    if (n > 1) first.narrow(0, 1, n - 1).copy_(sv.narrow(0, 1, n - 1).ne(sv.narrow(0, 0, n - 1)));
    const at::Tensor starts = at::nonzero(first).squeeze(1);  // one host read
    const int64_t m = starts.numel();
    const at::Tensor values = sv.index_select(0, starts);
    at::Tensor inverse = at::empty({0}, longs), counts = at::empty({0}, longs);
    if (return_inverse || return_counts) {
        const at::Tensor group = at::cumsum(first.to(at::kLong), 0) - 1;
        if (return_inverse) {
            inverse = at::empty({n}, longs);
            inverse.index_put_({perm}, group);
            inverse = inverse.view(self.sizes());
        }
        if (return_counts)
            counts = at::zeros({m}, longs).index_put_({group}, at::ones({n}, longs), true);
    }
    return {values, inverse, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_unique2", TORCH_FN(unique2)); }

}  // namespace torch_spyre::aten
