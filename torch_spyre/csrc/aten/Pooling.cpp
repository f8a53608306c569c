// 2-D pooling on the card for non-overlapping windows (stride = kernel, no padding, no
// dilation, as nn.MaxPool2d(k) / nn.AvgPool2d(k) by default): the windows are dims of a view
// [..., Ho, kh, Wo, kw], reduced by the amax / mean kernels (their dims moved last by a dense
// copy on the card). avg_pool2d is an ordinary operator; max_pool2d is a composite over
// max_pool2d_with_indices in torch 2.6, so, as for layer_norm, the spyre kernel replaces it when
// no gradient is wanted (nobody reads the indices). Other pools run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// Element i of a 1- or 2-element pooling argument (one value stands for both dims).
int64_t pick(at::IntArrayRef a, size_t i) { return a.size() == 1 ? a[0] : a[i]; }

// x [..., H, W] as [..., Ho, kh, Wo, kw] (floor division, the rest cropped); nothing for a
// pooling that is not non-overlapping windows of a float spyre tensor.
std::optional<at::Tensor> windows(const at::Tensor& x, at::IntArrayRef kernel,
                                  at::IntArrayRef stride, at::IntArrayRef padding,
                                  at::IntArrayRef dilation, bool ceil_mode) {
    const auto sized = [](at::IntArrayRef a) { return a.size() == 1 || a.size() == 2; };
    if (!x.is_privateuseone() || !is_float(x.scalar_type()) || (x.dim() != 3 && x.dim() != 4) ||
        !sized(kernel) || (!stride.empty() && !sized(stride)) || !sized(padding) ||
        (!dilation.empty() && !sized(dilation)))
        return std::nullopt;
    const int64_t kh = pick(kernel, 0), kw = pick(kernel, 1);
    for (size_t i = 0; i < 2; ++i)
        if ((!stride.empty() && pick(stride, i) != pick(kernel, i)) || pick(padding, i) != 0 ||
            (!dilation.empty() && pick(dilation, i) != 1))
            return std::nullopt;
    const int64_t h = x.size(-2), w = x.size(-1);
    if (kh <= 0 || kw <= 0 || h < kh || w < kw || (ceil_mode && (h % kh || w % kw)))
        return std::nullopt;
    const int64_t ho = h / kh, wo = w / kw;
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end() - 2);
    std::vector<int64_t> strides(x.strides().begin(), x.strides().end() - 2);
    const int64_t sh = x.stride(-2), sw = x.stride(-1);
    sizes.insert(sizes.end(), {ho, kh, wo, kw});
    strides.insert(strides.end(), {sh * kh, sh, sw * kw, sw});
    return x.as_strided(sizes, strides, x.storage_offset());
}

at::Tensor& avg_pool2d_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                           at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor, at::Tensor& out) {
    if (!divisor && out.is_privateuseone() && out.scalar_type() == self.scalar_type()) {
        if (auto v = windows(self, kernel, stride, padding, {}, ceil_mode)) {
            c10::DeviceGuard guard(self.device());
            const at::Tensor r = at::mean(*v, {-3, -1});
            at::native::resize_output(out, r.sizes());
            out.copy_(r);
            return out;
        }
    }
    return fallback_to_cpu<ATEN_OP2(avg_pool2d, out)>(self, kernel, stride, padding, ceil_mode,
                                                      count_include_pad, divisor, out);
}

at::Tensor max_pool2d_spyre(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
    if (auto v = windows(self, kernel, stride, padding, dilation, ceil_mode)) {
        c10::DeviceGuard guard(self.device());
        return at::amax(*v, {-3, -1});
    }
    return std::get<0>(
        at::max_pool2d_with_indices(self, kernel, stride, padding, dilation, ceil_mode));
}

at::Tensor max_pool2d_autograd(const at::Tensor& self, at::IntArrayRef kernel,
                               at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, bool ceil_mode) {
    if (at::GradMode::is_enabled() && self.requires_grad())
        return std::get<0>(
            at::max_pool2d_with_indices(self, kernel, stride, padding, dilation, ceil_mode));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // through the dispatcher, not a direct call: fake tensors (torch.compile) take the Python key
    return at::max_pool2d(self, kernel, stride, padding, dilation, ceil_mode);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("avg_pool2d.out", TORCH_FN(avg_pool2d_out));
    m.impl("max_pool2d", TORCH_FN(max_pool2d_spyre));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
    m.impl("max_pool2d", TORCH_FN(max_pool2d_autograd));
}

}  // namespace torch_spyre::aten
