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

#include <algorithm>
#include <vector>

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

// Rows longer than this take the CPU: the lexicographic sort is one stable sort per element
// of a row (launches grow with it).
constexpr int64_t kMaxUniqueRow = 256;

// torch.unique(dim=d): the slices along d sorted lexicographically (a stable sort by each
// element of the flattened slice, last element first: an LSD radix over elements), the first
// slice of each run of equal ones kept (a NaN differs from everything, as the CPU's equality),
// the inverse and the counts as in unique2. Like the CPU it returns the inverse and the counts
// whether asked or not.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim,
                                                          bool sorted, bool return_inverse,
                                                          bool return_counts) {
    const int64_t d = self.dim() ? at::maybe_wrap_dim(dim, self.dim()) : 0;
    const int64_t n = self.dim() ? self.size(d) : 0, m = n ? self.numel() / n : 0;
    if (!self.is_privateuseone() || !sortable(self.scalar_type()) || self.dim() == 0 || n == 0 ||
        m == 0 || m > kMaxUniqueRow)
        return fallback_to_cpu<ATEN_OP(unique_dim)>(self, dim, sorted, return_inverse,
                                                    return_counts);
    c10::DeviceGuard guard(self.device());
    const auto longs = self.options().dtype(at::kLong);
    const at::Tensor rows = self.movedim(d, 0).reshape({n, m});
    at::Tensor perm = at::arange(n, longs);
    for (int64_t c = m - 1; c >= 0; --c) {
        const at::Tensor keys = rows.select(1, c).index_select(0, perm);
        perm = perm.index_select(0, at::argsort(keys, /*stable=*/true, 0, false));
    }
    const at::Tensor sorted_rows = rows.index_select(0, perm);
    at::Tensor first = at::ones({n}, self.options().dtype(at::kBool));
    if (n > 1)
        first.narrow(0, 1, n - 1)
            .copy_(sorted_rows.narrow(0, 1, n - 1).ne(sorted_rows.narrow(0, 0, n - 1)).any(1));
    const at::Tensor starts = at::nonzero(first).squeeze(1);  // one host read
    const int64_t k = starts.numel();
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    shape[d] = k;
    std::vector<int64_t> moved(shape);
    std::rotate(moved.begin(), moved.begin() + d, moved.begin() + d + 1);
    const at::Tensor values =
        sorted_rows.index_select(0, starts).reshape(moved).movedim(0, d).contiguous();
    const at::Tensor group = at::cumsum(first.to(at::kLong), 0) - 1;
    at::Tensor inverse = at::empty({n}, longs);
    inverse.index_put_({perm}, group);
    const at::Tensor counts = at::zeros({k}, longs).index_put_({group}, at::ones({n}, longs), true);
    return {values, inverse, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_unique2", TORCH_FN(unique2));
    m.impl("unique_dim", TORCH_FN(unique_dim));
}

}  // namespace torch_spyre::aten
