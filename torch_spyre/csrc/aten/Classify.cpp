// isposinf / isneginf on the card: a compare with +-inf into the bool result (an integer or bool
// input has no infinities: all false, a fill); isnan as x != x (integers and bool: all false);
// nan_to_num as masked fills of the NaNs and infinities (integers and bool: a copy). torch's
// isinf and isfinite are composites of abs and compares, which already run on the card.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>
#include <optional>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool is_inf_into(const at::Tensor& self, double inf, at::Tensor& out) {
    if (!self.is_privateuseone() || !out.is_privateuseone() || out.scalar_type() != at::kBool ||
        self.is_complex())
        return false;
    c10::DeviceGuard guard(self.device());
    at::native::resize_output(out, self.sizes());
    if (!is_float(self.scalar_type())) {
        if (!at::isIntegralType(self.scalar_type(), /*includeBool=*/true)) return false;
        out.fill_(false);
        return true;
    }
    at::eq_out(out, self, inf);
    return true;
}

at::Tensor& isposinf_out(const at::Tensor& self, at::Tensor& out) {
    if (is_inf_into(self, std::numeric_limits<double>::infinity(), out)) return out;
    return fallback_to_cpu<ATEN_OP2(isposinf, out)>(self, out);
}

at::Tensor& isneginf_out(const at::Tensor& self, at::Tensor& out) {
    if (is_inf_into(self, -std::numeric_limits<double>::infinity(), out)) return out;
    return fallback_to_cpu<ATEN_OP2(isneginf, out)>(self, out);
}

at::Tensor isnan(const at::Tensor& self) {
    if (!self.is_privateuseone() || self.is_complex()) return fallback_to_cpu<ATEN_OP(isnan)>(self);
    c10::DeviceGuard guard(self.device());
    if (!is_float(self.scalar_type()))
        return at::zeros(self.sizes(), self.options().dtype(at::kBool));
    return self.ne(self);
}

at::Tensor& nan_to_num_out(const at::Tensor& self, std::optional<double> nan,
                           std::optional<double> posinf, std::optional<double> neginf,
                           at::Tensor& out) {
    const at::ScalarType t = self.scalar_type();
    if (!self.is_privateuseone() || !out.is_privateuseone() || out.scalar_type() != t ||
        self.is_complex() || !(is_float(t) || at::isIntegralType(t, /*includeBool=*/true)))
        return fallback_to_cpu<ATEN_OP2(nan_to_num, out)>(self, nan, posinf, neginf, out);
    c10::DeviceGuard guard(self.device());
    at::native::resize_output(out, self.sizes());
    if (!is_float(t)) {  // nothing to replace
        out.copy_(self);
        return out;
    }
    // torch's defaults: the type's largest and lowest finite values
    double hi = 0, lo = 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, "nan_to_num", [&] {
        hi = static_cast<double>(std::numeric_limits<scalar_t>::max());
        lo = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
    });
    const double inf = std::numeric_limits<double>::infinity();
    const at::Tensor r = self.masked_fill(self.ne(self), nan.value_or(0.0))
                             .masked_fill(self.eq(inf), posinf.value_or(hi))
                             .masked_fill(self.eq(-inf), neginf.value_or(lo));
    out.copy_(r);
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("isnan", TORCH_FN(isnan));
    m.impl("nan_to_num.out", TORCH_FN(nan_to_num_out));
    m.impl("isposinf.out", TORCH_FN(isposinf_out));
    m.impl("isneginf.out", TORCH_FN(isneginf_out));
}

}  // namespace torch_spyre::aten
