// Convolutions on the CPU fallback. For a PrivateUse1 tensor ATen routes torch.nn.Conv*d to
// convolution_overrideable (and its backward), whose default kernel raises "not implemented";
// the kernels here run aten::convolution / aten::convolution_backward through the fallback
// instead (warning once, an error under TORCH_SPYRE_STRICT=1), so any torch.nn model moved to
// spyre runs. The op library has no convolution yet.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <torch/library.h>

#include "Fallback.h"

namespace torch_spyre::aten {
namespace {

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
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
