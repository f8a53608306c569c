// tril / triu on the card, composed of device ops: the band mask `j - i <= k` (or `>= k`) of
// the last two dims from two aranges (spyre_op_arange), an int64 subtraction and a compare,
// then masked_fill with 0 for floats (NaN above the band becomes 0, as on the CPU) or a
// multiplication by the mask for integers and bool. Other dtypes run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// self with the elements outside the band set to 0, or nothing if not taken.
std::optional<at::Tensor> band(const at::Tensor& self, int64_t k, bool lower,
                               const at::Tensor& out) {
    const auto t = self.scalar_type();
    if (!self.is_privateuseone() || self.dim() < 2 || !op_dtype(t) || out.scalar_type() != t)
        return std::nullopt;
    c10::DeviceGuard guard(self.device());
    if (self.numel() == 0) return self.clone();
    const auto opts = self.options().dtype(at::kLong);
    const at::Tensor d = at::arange(self.size(-1), opts)
                             .unsqueeze(0)
                             .sub(at::arange(self.size(-2), opts).unsqueeze(1));  // j - i
    if (is_float(t)) return self.masked_fill(lower ? d.gt(k) : d.lt(k), 0);
    return self.mul(lower ? d.le(k) : d.ge(k));
}

at::Tensor& tril_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
    if (auto r = band(self, diagonal, true, out)) {
        at::native::resize_output(out, self.sizes());
        out.copy_(*r);
        return out;
    }
    return fallback_to_cpu<ATEN_OP2(tril, out)>(self, diagonal, out);
}

at::Tensor& triu_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
    if (auto r = band(self, diagonal, false, out)) {
        at::native::resize_output(out, self.sizes());
        out.copy_(*r);
        return out;
    }
    return fallback_to_cpu<ATEN_OP2(triu, out)>(self, diagonal, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("tril.out", TORCH_FN(tril_out));
    m.impl("triu.out", TORCH_FN(triu_out));
}

}  // namespace torch_spyre::aten
