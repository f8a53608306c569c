// median and nanmedian of a whole tensor on the card: one sort of the flattened values (the
// card's sort puts NaN last; int64/int32/int8/uint8 sort exactly), then the element at the
// lower middle. median is NaN when any element is (the last sorted one); nanmedian takes the
// lower middle of the m non-NaN values, index (m - 1) / 2 computed on the card, so nothing waits
// for the host. With a dim (values and indices): OrderStatistics.cpp.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// Floats, and the integers the card sorts exactly (aten/Sort.cpp's radix sort; no NaN there).
bool on_card(const at::Tensor& self) {
    const at::ScalarType t = self.scalar_type();
    return self.is_privateuseone() && self.numel() > 0 &&
           (is_float(t) || t == at::kLong || t == at::kInt || t == at::kChar || t == at::kByte);
}

at::Tensor sorted_values(const at::Tensor& self) {
    return std::get<0>(at::sort(self.reshape({-1})));
}

at::Tensor median(const at::Tensor& self) {
    if (!on_card(self)) return fallback_to_cpu<ATEN_OP(median)>(self);
    c10::DeviceGuard guard(self.device());
    const int64_t n = self.numel();
    const at::Tensor s = sorted_values(self);
    if (!is_float(self.scalar_type())) return s.narrow(0, (n - 1) / 2, 1).reshape({});
    const at::Tensor last = s.narrow(0, n - 1, 1);
    return at::where(at::isnan(last), last, s.narrow(0, (n - 1) / 2, 1)).reshape({});
}

at::Tensor nanmedian(const at::Tensor& self) {
    if (!on_card(self)) return fallback_to_cpu<ATEN_OP(nanmedian)>(self);
    c10::DeviceGuard guard(self.device());
    const at::Tensor s = sorted_values(self);
    if (!is_float(self.scalar_type())) return s.narrow(0, (self.numel() - 1) / 2, 1).reshape({});
    // m non-NaN values sort first; all NaN (m = 0) picks index 0, a NaN, as the CPU returns
    const at::Tensor m = at::logical_not(at::isnan(s)).sum().reshape({1});
    const at::Tensor k = at::where(at::gt(m, 0), at::div(m - 1, 2, "floor"), m);
    return at::index_select(s, 0, k).reshape({});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("median", TORCH_FN(median));
    m.impl("nanmedian", TORCH_FN(nanmedian));
}

}  // namespace torch_spyre::aten
