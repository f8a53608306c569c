// Convolutions. Forward 1-D and 2-D convolutions (any stride, padding, dilation and groups;
// not transposed) run on the card as im2col + matmul: the padded input seen through a strided
// view as [N, groups, C/groups, k..., out...] patches, made dense on the card in the order
// [groups, N * out..., C/groups * k...] (one spyre_op_copy), one batched product with the
// weights [groups, O/groups, C/groups * k...] read transposed in place, the bias added on the
// card, and the result moved to [N, O, out...] by one more dense copy. Anything else (transposed
// or 3-D convolutions, mixed types) and the backward run aten::convolution /
// aten::convolution_backward on the CPU fallback (warning once, an error under
// TORCH_SPYRE_STRICT=1). For a PrivateUse1 tensor ATen routes torch.nn.Conv*d to
// convolution_overrideable (and its backward), whose default kernel raises "not implemented".
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

std::optional<at::Tensor> convolution_on_card(const at::Tensor& input, const at::Tensor& weight,
                                              const std::optional<at::Tensor>& bias,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation, int64_t groups) {
    const int64_t d = input.dim() - 2;  // spatial dims
    const at::ScalarType type = input.scalar_type();
    if (d < 1 || d > 2 || weight.dim() != d + 2 || !is_float(type) ||
        weight.scalar_type() != type || !weight.is_privateuseone() ||
        weight.device() != input.device() || groups < 1 || input.size(1) % groups != 0 ||
        weight.size(0) % groups != 0 || weight.size(1) * groups != input.size(1) ||
        int64_t(stride.size()) != d || int64_t(padding.size()) != d ||
        int64_t(dilation.size()) != d)
        return std::nullopt;
    if (bias && bias->defined() &&
        (bias->scalar_type() != type || !bias->is_privateuseone() || bias->dim() != 1 ||
         bias->size(0) != weight.size(0)))
        return std::nullopt;
    const int64_t n = input.size(0), c = input.size(1), o = weight.size(0);
    const int64_t cg = c / groups, og = o / groups;
    std::vector<int64_t> out_sp(d), pads;
    int64_t positions = 1, taps = 1;
    for (int64_t i = 0; i < d; ++i) {
        if (stride[i] < 1 || dilation[i] < 1 || padding[i] < 0) return std::nullopt;
        const int64_t k = weight.size(2 + i), span = dilation[i] * (k - 1) + 1;
        out_sp[i] = (input.size(2 + i) + 2 * padding[i] - span) / stride[i] + 1;
        if (input.size(2 + i) + 2 * padding[i] < span || out_sp[i] < 1) return std::nullopt;
        positions *= out_sp[i];
        taps *= k;
    }
    for (int64_t i = d - 1; i >= 0; --i) pads.insert(pads.end(), {padding[i], padding[i]});
    c10::DeviceGuard guard(input.device());
    std::vector<int64_t> out_shape{n, o};
    out_shape.insert(out_shape.end(), out_sp.begin(), out_sp.end());
    if (cg == 0) return std::nullopt;                          // no input channels: the CPU's
    if (n == 0) return at::empty(out_shape, input.options());  // an empty batch
    const at::Tensor x =
        (std::any_of(padding.begin(), padding.end(), [](int64_t p) { return p > 0; })
             ? at::constant_pad_nd(input, pads, 0)
             : input)
            .contiguous();
    // patches [N, groups, C/groups, k..., out...] as a view of the padded input
    std::vector<int64_t> sizes{n, groups, cg}, strides{x.stride(0), cg * x.stride(1), x.stride(1)};
    for (int64_t i = 0; i < d; ++i) {
        sizes.push_back(weight.size(2 + i));
        strides.push_back(dilation[i] * x.stride(2 + i));
    }
    for (int64_t i = 0; i < d; ++i) {
        sizes.push_back(out_sp[i]);
        strides.push_back(stride[i] * x.stride(2 + i));
    }
    const at::Tensor patches = x.as_strided(sizes, strides, x.storage_offset());
    // [groups, N, out..., C/groups, k...] -> [groups, N * positions, C/groups * taps]
    std::vector<int64_t> perm{1, 0};
    for (int64_t i = 0; i < d; ++i) perm.push_back(3 + d + i);
    perm.push_back(2);
    for (int64_t i = 0; i < d; ++i) perm.push_back(3 + i);
    const at::Tensor cols =
        patches.permute(perm).contiguous().view({groups, n * positions, cg * taps});
    const at::Tensor w = weight.contiguous().view({groups, og, cg * taps});
    at::Tensor y = at::bmm(cols, w.transpose(1, 2));  // [groups, N * positions, O/groups]
    if (bias && bias->defined()) y.add_(bias->view({groups, 1, og}));
    // [groups, N, out..., O/groups] -> [N, groups, O/groups, out...] -> [N, O, out...]
    std::vector<int64_t> ysizes{groups, n};
    ysizes.insert(ysizes.end(), out_sp.begin(), out_sp.end());
    ysizes.push_back(og);
    std::vector<int64_t> yperm{1, 0, 2 + d};
    for (int64_t i = 0; i < d; ++i) yperm.push_back(2 + i);
    return y.view(ysizes).permute(yperm).contiguous().view(out_shape);
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
    if (!transposed && input.is_privateuseone())
        if (auto r = convolution_on_card(input, weight, bias, stride, padding, dilation, groups))
            return *r;
    return fallback_to_cpu<ATEN_OP(convolution)>(input, weight, bias, stride, padding, dilation,
                                                 transposed, output_padding, groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
    // the bias has one element per output channel
    const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
    const std::vector<int64_t> bias_sizes{channels};
    return fallback_to_cpu<ATEN_OP(convolution_backward)>(
        grad_output, input, weight, at::OptionalIntArrayRef(bias_sizes), stride, padding, dilation,
        transposed, output_padding, groups, output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("convolution_overrideable", TORCH_FN(convolution));
    m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
}

}  // namespace torch_spyre::aten
