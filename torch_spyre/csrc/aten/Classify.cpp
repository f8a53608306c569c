// isposinf / isneginf on the card: a compare with +-inf into the bool result (an integer or bool
// input has no infinities: all false, a fill). torch's isinf, isnan and isfinite are composites
// of abs and compares, which already run on the card.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>

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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("isposinf.out", TORCH_FN(isposinf_out));
    m.impl("isneginf.out", TORCH_FN(isneginf_out));
}

}  // namespace torch_spyre::aten
