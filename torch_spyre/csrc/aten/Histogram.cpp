// torch.histc of fp32/fp16/bf16 spyre tensors on the card, with the CPU kernel's bin rule:
// - the range: [min, max], or the data's own minimum and maximum when min == max (read from
//   the card: one small device-to-host copy, as the CPU and CUDA read theirs), widened by 1 on
//   both sides when still equal; a range that is not finite or not increasing is the CPU's error;
//   the ends are the first and last of linspace(min, max, bins + 1) in the input's type, that is
//   min and max rounded to it;
// - an element x in [min, max] (NaN and values outside are skipped) falls in bin
//   trunc((x - min) * bins / (max - min)), each operation rounded to the input's type as the
//   CPU's scalar_t arithmetic rounds it (the width max - min and bins too), the last bin taking
//   its right edge;
// - the counts are exact integers (an index_add of ones into int64 on the card), converted to
//   the input's type once. The CPU adds ones in the input's type per thread, so a 16-bit bin of
//   more than 2048 (fp16) or 256 (bf16) elements may stop growing there; the card's count does
//   not.
// Other dtypes run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// v rounded to type t (a host computation on a one-element CPU tensor).
double in_type(double v, at::ScalarType t) {
    return at::scalar_tensor(v, at::kDouble).to(t).item<double>();
}

at::Tensor histc_on_card(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                         const at::Scalar& max) {
    TORCH_CHECK(bins > 0, "torch.histogramdd(): expected each bin_ct to be positive, but got ",
                bins, " for dimension 0");
    const at::ScalarType t = self.scalar_type();
    c10::DeviceGuard guard(self.device());
    double left = min.to<double>(), right = max.to<double>();
    if (left == right && self.numel() > 0) {
        const at::Tensor ends = at::stack({self.amin().reshape({1}), self.amax().reshape({1})})
                                    .to(at::kCPU, at::kDouble);
        left = ends[0].item<double>();
        right = ends[1].item<double>();
    }
    if (left == right) {
        left -= 1;
        right += 1;
    }
    TORCH_CHECK(!(std::isinf(left) || std::isinf(right) || std::isnan(left) || std::isnan(right)),
                "torch.histc: range of [", left, ", ", right, "] is not finite");
    TORCH_CHECK(left < right, "torch.histc: max must be larger than min");
    at::Tensor hist = at::zeros({bins + 1}, self.options().dtype(at::kLong));
    if (self.numel() > 0) {
        // the CPU's scalar_t values of the bin edges, the width and the bin count
        const double lo = in_type(left, t), hi = in_type(right, t);
        const double width = (at::scalar_tensor(hi, t) - at::scalar_tensor(lo, t)).item<double>();
        const double count = in_type(static_cast<double>(bins), t);
        const auto rounded = [t](const at::Tensor& v) {
            return t == at::kFloat ? v : v.to(t).to(at::kFloat);
        };
        const at::Tensor x = self.reshape({-1}).to(at::kFloat);
        const at::Tensor offset = rounded(rounded(rounded(x - lo) * count) / width);
        at::Tensor pos = at::trunc(offset);
        pos = at::where(at::eq(pos, static_cast<double>(bins)), static_cast<double>(bins - 1), pos);
        const at::Tensor inside = at::logical_and(at::ge(x, lo), at::le(x, hi));
        const at::Tensor bin =
            at::where(inside, pos, static_cast<double>(bins)).to(at::kLong);  // outside: the last
        hist.index_add_(0, bin, at::ones_like(bin));
    }
    return hist.narrow(0, 0, bins).to(t);
}

bool takes(const at::Tensor& self) {
    return self.is_privateuseone() && is_float(self.scalar_type());
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                 const at::Scalar& max) {
    if (!takes(self)) return fallback_to_cpu<ATEN_OP(histc)>(self, bins, min, max);
    return histc_on_card(self, bins, min, max);
}

at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                      const at::Scalar& max, at::Tensor& out) {
    if (!takes(self) || !out.is_privateuseone() || out.scalar_type() != self.scalar_type())
        return fallback_to_cpu<ATEN_OP2(histc, out)>(self, bins, min, max, out);
    return assign(out, histc_on_card(self, bins, min, max));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("histc", TORCH_FN(histc));
    m.impl("histc.out", TORCH_FN(histc_out));
}

}  // namespace torch_spyre::aten
