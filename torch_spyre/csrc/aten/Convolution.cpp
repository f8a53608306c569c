// Convolutions. 1-D, 2-D and 3-D convolutions and transposed convolutions (any stride, padding,
// output padding, dilation and groups) run on the card as im2col + matmul, forward and backward,
// on the patch machinery of Im2col.h:
// - forward: the patches made dense as [groups, N * out..., C/groups * k...] ("cols"), one
//   batched product with the weights [groups, O/groups, C/groups * k...] read transposed in
//   place, the bias added on the card, and the result moved to [N, O, out...] by a dense copy;
// - backward: grad_weight = grad^T cols (the gradient made dense as [groups, O/groups, N *
//   out...]), grad_input = the gradient rows times the weights, folded back onto the padded
//   input (fold_patches), grad_bias = the gradient summed over the batch and positions.
// A transposed convolution is the input gradient of the convolution whose input has the
// transposed one's output shape (same weight tensor [C_in, C_out/groups, k...], read as a
// convolution's [O, C/groups, k...]): its forward is that convolution's grad_input (plus the bias),
// its backward that convolution's forward (grad_input) and grad_weight with the roles of input
// and gradient swapped. Mixed types and a case the geometry refuses (no input channels, a kernel
// wider than the padded input) run aten::convolution / aten::convolution_backward on the
// CPU fallback (warning once, an error under TORCH_SPYRE_STRICT=1). For a PrivateUse1 tensor ATen
// routes torch.nn.Conv*d and ConvTranspose*d to convolution_overrideable (and its backward),
// whose default kernel raises "not implemented".
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "Fallback.h"
#include "Im2col.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool same_card_float(const at::Tensor& a, const at::Tensor& b) {
    return a.is_privateuseone() && b.is_privateuseone() && is_float(a.scalar_type()) &&
           b.scalar_type() == a.scalar_type() && b.device() == a.device();
}

// The convolution a call computes on the card: for a plain convolution the one over `input`;
// for a transposed one the convolution whose input gradient it is (its input has the output's
// shape, its output `input`'s shape). nullopt for the cases the card does not take.
std::optional<ConvGeometry> geometry(const at::Tensor& input, const at::Tensor& weight,
                                     at::IntArrayRef stride, at::IntArrayRef padding,
                                     at::IntArrayRef dilation, bool transposed,
                                     at::IntArrayRef output_padding, int64_t groups) {
    const int64_t d = input.dim() - 2;
    if (!same_card_float(input, weight) || d < 1 || weight.dim() != d + 2 || groups < 1 ||
        int64_t(stride.size()) != d || int64_t(padding.size()) != d ||
        int64_t(dilation.size()) != d)
        return std::nullopt;
    const at::IntArrayRef kernel = weight.sizes().slice(2);
    if (!transposed) {
        if (weight.size(1) * groups != input.size(1)) return std::nullopt;
        return conv_geometry(input.sizes(), weight.size(0), kernel, stride, padding, dilation,
                             groups);
    }
    if (int64_t(output_padding.size()) != d || weight.size(0) != input.size(1)) return std::nullopt;
    std::vector<int64_t> in_shape{input.size(0), weight.size(1) * groups};
    for (int64_t i = 0; i < d; ++i) {
        if (output_padding[i] < 0) return std::nullopt;
        in_shape.push_back((input.size(2 + i) - 1) * stride[i] - 2 * padding[i] +
                           dilation[i] * (kernel[i] - 1) + output_padding[i] + 1);
    }
    auto g = conv_geometry(in_shape, weight.size(0), kernel, stride, padding, dilation, groups);
    if (!g || g->n != input.size(0)) return std::nullopt;
    // An output padding of a stride or more (torch allows it below the dilation) makes the
    // convolution's output larger than `input`: only its first positions are read and the
    // output's last rows get nothing (but the bias), as in torch.
    g->positions = 1;
    for (int64_t i = 0; i < d; ++i) {
        if (input.size(2 + i) > g->out_sp[i]) return std::nullopt;
        g->out_sp[i] = input.size(2 + i);
        g->positions *= g->out_sp[i];
    }
    return g;
}

bool bias_fits(const std::optional<at::Tensor>& bias, const at::Tensor& input, int64_t channels) {
    return !bias || !bias->defined() ||
           (bias->scalar_type() == input.scalar_type() && bias->is_privateuseone() &&
            bias->device() == input.device() && bias->dim() == 1 && bias->size(0) == channels);
}

// b [K] as [1, K, 1...] against a [N, K, sp...] tensor of d spatial dims.
at::Tensor channel_view(const at::Tensor& b, int64_t d) {
    std::vector<int64_t> s{1, b.size(0)};
    s.insert(s.end(), d, 1);
    return b.view(s);
}

// The convolution's output [N, O, out...] of input [N, C, in...] (no bias).
at::Tensor conv_forward(const at::Tensor& input, const at::Tensor& weight, const ConvGeometry& g) {
    const at::Tensor cols = im2col_rows(input, g);
    const at::Tensor w = weight.contiguous().view({g.groups, g.og, g.cg * g.taps});
    const at::Tensor y = at::bmm(cols, w.transpose(1, 2));  // [groups, N * positions, O/groups]
    // [groups, N, out..., O/groups] -> [N, groups, O/groups, out...] -> [N, O, out...]
    std::vector<int64_t> ysizes{g.groups, g.n};
    ysizes.insert(ysizes.end(), g.out_sp.begin(), g.out_sp.end());
    ysizes.push_back(g.og);
    std::vector<int64_t> yperm{1, 0, 2 + g.d};
    for (int64_t i = 0; i < g.d; ++i) yperm.push_back(2 + i);
    return dense(y.view(ysizes).permute(yperm)).view(g.out_shape());
}

// The convolution's input gradient [N, C, in...] for the gradient `grad` [N, O, out...]: the
// gradient rows times the weights give every patch element's gradient, folded back.
at::Tensor conv_input_grad(const at::Tensor& grad, const at::Tensor& weight,
                           const ConvGeometry& g) {
    const at::Tensor w = weight.contiguous().view({g.groups, g.og, g.cg * g.taps});
    std::vector<int64_t> psizes{g.groups, g.n};
    psizes.insert(psizes.end(), g.out_sp.begin(), g.out_sp.end());
    psizes.push_back(g.cg);
    psizes.insert(psizes.end(), g.kernel.begin(), g.kernel.end());
    return fold_patches(at::bmm(channel_rows(grad, g), w).view(psizes), g, grad.options());
}

// The convolution's weight gradient [O, C/groups, k...] for input [N, C, in...] and gradient
// [N, O, out...].
at::Tensor conv_weight_grad(const at::Tensor& input, const at::Tensor& grad,
                            const at::Tensor& weight, const ConvGeometry& g) {
    return at::bmm(channel_cols(grad, g), im2col_rows(input, g)).view(weight.sizes());
}

at::Tensor spatial_sum(const at::Tensor& t, int64_t d) {
    std::vector<int64_t> dims{0};
    for (int64_t i = 0; i < d; ++i) dims.push_back(2 + i);
    return t.sum(dims);
}

std::optional<at::Tensor> convolution_on_card(const at::Tensor& input, const at::Tensor& weight,
                                              const std::optional<at::Tensor>& bias,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation, bool transposed,
                                              at::IntArrayRef output_padding, int64_t groups) {
    const auto geom =
        geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups);
    if (!geom) return std::nullopt;
    const ConvGeometry& g = *geom;
    const std::vector<int64_t> shape = transposed ? g.in_shape() : g.out_shape();
    if (!bias_fits(bias, input, shape[1])) return std::nullopt;
    c10::DeviceGuard guard(input.device());
    if (g.n == 0) return at::empty(shape, input.options());  // an empty batch
    at::Tensor y = transposed ? conv_input_grad(input, weight, g) : conv_forward(input, weight, g);
    if (bias && bias->defined()) y.add_(channel_view(*bias, g.d));
    return y;
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> convolution_backward_on_card(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
    const auto geom =
        geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups);
    if (!geom || !same_card_float(grad_output, input) ||
        grad_output.sizes() != (transposed ? geom->in_shape() : geom->out_shape()))
        return std::nullopt;
    const ConvGeometry& g = *geom;
    c10::DeviceGuard guard(input.device());
    at::Tensor gx, gw, gb;
    if (g.n == 0) {
        if (output_mask[0]) gx = at::zeros_like(input);
        if (output_mask[1]) gw = at::zeros_like(weight);
        if (output_mask[2]) gb = at::zeros({grad_output.size(1)}, grad_output.options());
        return std::make_tuple(gx, gw, gb);
    }
    if (output_mask[0])
        gx = transposed ? conv_forward(grad_output, weight, g)
                        : conv_input_grad(grad_output, weight, g);
    if (output_mask[1])
        gw = transposed ? conv_weight_grad(grad_output, input, weight, g)
                        : conv_weight_grad(input, grad_output, weight, g);
    if (output_mask[2]) gb = spatial_sum(grad_output, g.d);
    return std::make_tuple(gx, gw, gb);
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
    if (auto r = convolution_on_card(input, weight, bias, stride, padding, dilation, transposed,
                                     output_padding, groups))
        return *r;
    return fallback_to_cpu<ATEN_OP(convolution)>(input, weight, bias, stride, padding, dilation,
                                                 transposed, output_padding, groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
    if (auto r = convolution_backward_on_card(grad_output, input, weight, stride, padding, dilation,
                                              transposed, output_padding, groups, output_mask))
        return *r;
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
