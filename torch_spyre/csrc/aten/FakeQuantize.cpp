// Fake quantization on the card (quantization-aware training: torch.fake_quantize_per_tensor_affine
// and _per_channel_affine, torch.ao's FakeQuantize): composed of device ops in fp32 with the CPU
// kernel's order of roundings, q = round_half_even(x * (1 / scale)) + zero_point, the mask
// qmin <= q <= qmax, and (clamp(q) - zero_point) * scale rounded once to the input's type. NaN
// and +-inf quantize to qmin (the CPU kernel casts them to int64 first: INT64_MIN on x86).
// The CPU kernel's argument checks and other dtypes run through the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// (output, mask) from q = round(x * inv) + zero_point, every operand fp32 on the card.
std::tuple<at::Tensor, at::Tensor> quantize(const at::Tensor& self, const at::Tensor& q,
                                            const at::Tensor& scale, const at::Tensor& zp,
                                            int64_t quant_min, int64_t quant_max) {
    const double lo = static_cast<double>(quant_min), hi = static_cast<double>(quant_max);
    at::Tensor mask = q.ge(lo).logical_and_(q.le(hi));
    at::Tensor clamped = q.nan_to_num(lo, lo, lo).clamp_(lo, hi);
    at::Tensor out = clamped.sub_(zp).mul_(scale).to(self.scalar_type());
    return {out, mask};
}

bool takes(const at::Tensor& self, int64_t quant_min, int64_t quant_max) {
    return self.is_privateuseone() && is_float(self.scalar_type()) && quant_min <= quant_max;
}

std::tuple<at::Tensor, at::Tensor> per_tensor(const at::Tensor& self, double scale,
                                              int64_t zero_point, int64_t quant_min,
                                              int64_t quant_max) {
    if (!takes(self, quant_min, quant_max) || zero_point < quant_min || zero_point > quant_max)
        return fallback_to_cpu<ATEN_OP(fake_quantize_per_tensor_affine_cachemask)>(
            self, scale, zero_point, quant_min, quant_max);
    c10::DeviceGuard guard(self.device());
    const float inv = 1.0f / static_cast<float>(scale);  // as the CPU kernel computes it
    const at::Tensor q = self.to(at::kFloat).mul(inv).round_().add_(zero_point);
    const at::Tensor sc = at::scalar_tensor(static_cast<float>(scale), at::kFloat);
    const at::Tensor zp = at::scalar_tensor(static_cast<float>(zero_point), at::kFloat);
    return quantize(self, q, sc, zp, quant_min, quant_max);
}

std::tuple<at::Tensor, at::Tensor> per_channel(const at::Tensor& self, const at::Tensor& scale,
                                               const at::Tensor& zero_point, int64_t axis,
                                               int64_t quant_min, int64_t quant_max) {
    const auto zt = zero_point.scalar_type();
    if (!takes(self, quant_min, quant_max) || !scale.is_privateuseone() ||
        !zero_point.is_privateuseone() || scale.scalar_type() != at::kFloat || zt != at::kInt ||
        scale.dim() != 1 || zero_point.dim() != 1 || axis < 0 || axis >= self.dim() ||
        scale.numel() != self.size(at::maybe_wrap_dim(axis, self.dim())) ||
        zero_point.numel() != scale.numel())
        return fallback_to_cpu<ATEN_OP(fake_quantize_per_channel_affine_cachemask)>(
            self, scale, zero_point, axis, quant_min, quant_max);
    c10::DeviceGuard guard(self.device());
    const int64_t d = at::maybe_wrap_dim(axis, self.dim());
    std::vector<int64_t> shape(self.dim(), 1);
    shape[d] = scale.numel();
    const at::Tensor sc = scale.view(shape);
    const at::Tensor zp = zero_point.to(at::kFloat).view(shape);
    // 1 / scale: the card's division is exact, as the CPU's 1.0f / scale per channel
    const at::Tensor q = self.to(at::kFloat).mul(at::ones_like(sc).div_(sc)).round_().add_(zp);
    return quantize(self, q, sc, zp, quant_min, quant_max);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("fake_quantize_per_tensor_affine_cachemask", TORCH_FN(per_tensor));
    m.impl("fake_quantize_per_channel_affine_cachemask", TORCH_FN(per_channel));
}

}  // namespace torch_spyre::aten
