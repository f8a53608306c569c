// nonzero on the card, composed of device ops: the elements' nonzero flags (x != 0: NaN counts,
// as on the CPU) as int64, their inclusive cumulative sum (spyre_op_scan) giving each nonzero
// element its row of the result, one host read of the count (the result's size depends on the
// data, as on every device), the flat positions scattered to those rows (index_copy; the zero
// elements all go to one spare row that is dropped; past 2^24 elements a binary search of the
// ranks per result row instead) and split into coordinates with integer floor division and
// remainder. Tensors of 2^31 elements or more run on the CPU fallback. And masked_select on
// top of it.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// The scatter of every element's position (index_copy) runs on the card up to 2^24 elements.
constexpr int64_t kScatterMax = int64_t{1} << 24;

at::Tensor nonzero(const at::Tensor& self) {
    if (self.is_privateuseone() && op_dtype(self.scalar_type()) &&
        self.dim() <= SPYRE_TENSOR_MAX_DIMS && self.numel() < (int64_t(1) << 31)) {
        c10::DeviceGuard guard(self.device());
        const int64_t N = self.numel(), R = self.dim();
        const auto opts = self.options().dtype(at::kLong);
        if (N == 0) return at::empty({0, R}, opts);
        // few N-element temporaries (a 16M-element mask needed ~1 GB of int64 ones before)
        const at::Tensor m = self.reshape({N}).ne(0);
        at::Tensor rank = m.cumsum(0, at::kLong);  // inclusive: row + 1 of each nonzero element
        const int64_t count = rank.narrow(0, N - 1, 1).item<int64_t>();
        if (count == 0 || R == 0) return at::empty({count, R}, opts);
        at::Tensor flat;
        if (N <= kScatterMax) {
            // row of each element: rank - 1 where nonzero, else the spare row `count`
            const at::Tensor row = rank.sub_(1).masked_fill_(m.logical_not(), count);
            flat = at::zeros({count + 1}, opts);
            flat.index_copy_(0, row, at::arange(N, opts));
            flat = flat.narrow(0, 0, count);
        } else {
            // the j-th nonzero element is the first whose rank reaches j + 1 (rank never
            // decreases): a binary search per result row instead of a scatter of every element
            flat = at::searchsorted(rank, at::arange(1, count + 1, opts));
        }
        std::vector<at::Tensor> coords(R);
        int64_t stride = 1;
        for (int64_t d = R - 1; d >= 0; --d) {
            const at::Tensor q =
                stride == 1 ? flat : at::floor_divide(flat, at::full({}, stride, opts));
            coords[d] = at::remainder(q, at::full({}, self.size(d), opts));
            stride *= self.size(d);
        }
        return at::stack(coords, 1);
    }
    return fallback_to_cpu<ATEN_OP(nonzero)>(self);
}

// masked_select: self and the mask broadcast together and flattened, the elements at the
// mask's nonzero positions (one index_select of the flat positions nonzero gives).
bool masked_select_on_card(const at::Tensor& self, const at::Tensor& mask) {
    return self.is_privateuseone() && mask.is_privateuseone() && op_dtype(self.scalar_type()) &&
           mask.scalar_type() == at::kBool && self.device() == mask.device();
}

at::Tensor masked_select_of(const at::Tensor& self, const at::Tensor& mask) {
    c10::DeviceGuard guard(self.device());
    const std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
    const at::Tensor flat = self.expand(shape).reshape({-1});
    return flat.index_select(0, at::nonzero(mask.expand(shape).reshape({-1})).squeeze(1));
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
    if (!masked_select_on_card(self, mask))
        return fallback_to_cpu<ATEN_OP(masked_select)>(self, mask);
    return masked_select_of(self, mask);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
    if (!masked_select_on_card(self, mask) || !out.is_privateuseone() ||
        out.scalar_type() != self.scalar_type())
        return fallback_to_cpu<ATEN_OP2(masked_select, out)>(self, mask, out);
    return assign(out, masked_select_of(self, mask));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("nonzero", TORCH_FN(nonzero));
    m.impl("masked_select", TORCH_FN(masked_select));
    m.impl("masked_select.out", TORCH_FN(masked_select_out));
}

}  // namespace torch_spyre::aten
