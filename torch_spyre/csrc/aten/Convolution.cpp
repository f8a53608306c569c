// Convolutions. 1-D and 2-D convolutions (any stride, padding, dilation and groups; not
// transposed) run on the card as im2col + matmul, forward and backward:
// - forward: the padded input seen through a strided view as [N, groups, C/groups, k...,
//   out...] patches, made dense on the card in the order [groups, N * out..., C/groups * k...]
//   (one spyre_op_copy: "cols"), one batched product with the weights [groups, O/groups,
//   C/groups * k...] read transposed in place, the bias added on the card, and the result moved
//   to [N, O, out...] by one more dense copy;
// - backward: grad_weight = grad^T cols (the gradient made dense as [groups, O/groups, N *
//   out...]), grad_input = the gradient rows times the weights, folded back onto the padded
//   input by one strided accumulation per kernel tap (taps overlap when the stride is smaller
//   than the kernel), grad_bias = the gradient summed over the batch and positions.
// Anything else (transposed or 3-D convolutions, mixed types) runs aten::convolution /
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

// The shape of a convolution the card takes: d spatial dims, groups of C/groups input and
// O/groups output channels, out_sp positions per dim.
struct ConvGeometry {
    int64_t d = 0, n = 0, c = 0, o = 0, groups = 1, cg = 0, og = 0, positions = 1, taps = 1;
    std::vector<int64_t> out_sp, pads;  // pads: constant_pad_nd's order (last dim first)
    std::vector<int64_t> stride, padding, dilation;

    std::vector<int64_t> out_shape() const {
        std::vector<int64_t> s{n, o};
        s.insert(s.end(), out_sp.begin(), out_sp.end());
        return s;
    }
    bool padded() const {
        return std::any_of(padding.begin(), padding.end(), [](int64_t p) { return p > 0; });
    }
};

std::optional<ConvGeometry> conv_geometry(const at::Tensor& input, const at::Tensor& weight,
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
    ConvGeometry g;
    g.d = d;
    g.n = input.size(0);
    g.c = input.size(1);
    g.o = weight.size(0);
    g.groups = groups;
    g.cg = g.c / groups;
    g.og = g.o / groups;
    if (g.cg == 0) return std::nullopt;  // no input channels: the CPU's
    g.stride = stride.vec();
    g.padding = padding.vec();
    g.dilation = dilation.vec();
    for (int64_t i = 0; i < d; ++i) {
        if (stride[i] < 1 || dilation[i] < 1 || padding[i] < 0) return std::nullopt;
        const int64_t k = weight.size(2 + i), span = dilation[i] * (k - 1) + 1;
        if (input.size(2 + i) + 2 * padding[i] < span) return std::nullopt;
        g.out_sp.push_back((input.size(2 + i) + 2 * padding[i] - span) / stride[i] + 1);
        g.positions *= g.out_sp.back();
        g.taps *= k;
    }
    for (int64_t i = d - 1; i >= 0; --i) g.pads.insert(g.pads.end(), {padding[i], padding[i]});
    return g;
}

// The patches of the dense padded input x as [N, groups, C/groups, k..., out...] (a view).
at::Tensor patches_view(const at::Tensor& x, const ConvGeometry& g, at::IntArrayRef kernel) {
    std::vector<int64_t> sizes{g.n, g.groups, g.cg},
        strides{x.stride(0), g.cg * x.stride(1), x.stride(1)};
    for (int64_t i = 0; i < g.d; ++i) {
        sizes.push_back(kernel[i]);
        strides.push_back(g.dilation[i] * x.stride(2 + i));
    }
    for (int64_t i = 0; i < g.d; ++i) {
        sizes.push_back(g.out_sp[i]);
        strides.push_back(g.stride[i] * x.stride(2 + i));
    }
    return x.as_strided(sizes, strides, x.storage_offset());
}

// [groups, N * positions, C/groups * taps]: the patches made dense on the card.
at::Tensor im2col(const at::Tensor& input, const ConvGeometry& g, at::IntArrayRef kernel) {
    const at::Tensor x = (g.padded() ? at::constant_pad_nd(input, g.pads, 0) : input).contiguous();
    // [groups, N, out..., C/groups, k...]
    std::vector<int64_t> perm{1, 0};
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(3 + g.d + i);
    perm.push_back(2);
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(3 + i);
    return patches_view(x, g, kernel)
        .permute(perm)
        .contiguous()
        .view({g.groups, g.n * g.positions, g.cg * g.taps});
}

std::optional<at::Tensor> convolution_on_card(const at::Tensor& input, const at::Tensor& weight,
                                              const std::optional<at::Tensor>& bias,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation, int64_t groups) {
    const auto geom = conv_geometry(input, weight, stride, padding, dilation, groups);
    if (!geom) return std::nullopt;
    const ConvGeometry& g = *geom;
    if (bias && bias->defined() &&
        (bias->scalar_type() != input.scalar_type() || !bias->is_privateuseone() ||
         bias->dim() != 1 || bias->size(0) != g.o))
        return std::nullopt;
    c10::DeviceGuard guard(input.device());
    if (g.n == 0) return at::empty(g.out_shape(), input.options());  // an empty batch
    const at::Tensor cols = im2col(input, g, weight.sizes().slice(2));
    const at::Tensor w = weight.contiguous().view({g.groups, g.og, g.cg * g.taps});
    at::Tensor y = at::bmm(cols, w.transpose(1, 2));  // [groups, N * positions, O/groups]
    if (bias && bias->defined()) y.add_(bias->view({g.groups, 1, g.og}));
    // [groups, N, out..., O/groups] -> [N, groups, O/groups, out...] -> [N, O, out...]
    std::vector<int64_t> ysizes{g.groups, g.n};
    ysizes.insert(ysizes.end(), g.out_sp.begin(), g.out_sp.end());
    ysizes.push_back(g.og);
    std::vector<int64_t> yperm{1, 0, 2 + g.d};
    for (int64_t i = 0; i < g.d; ++i) yperm.push_back(2 + i);
    return y.view(ysizes).permute(yperm).contiguous().view(g.out_shape());
}

// The input gradient: the gradient rows [groups, N * positions, O/groups] times the weights
// give the gradient of every patch element, [groups, N, out..., C/groups, k...]; each kernel
// tap's slice is added onto the positions of the padded input it was read from.
at::Tensor conv_input_grad(const at::Tensor& grad_rows, const at::Tensor& input,
                           const at::Tensor& weight, const ConvGeometry& g) {
    const at::Tensor w = weight.contiguous().view({g.groups, g.og, g.cg * g.taps});
    std::vector<int64_t> dsizes{g.groups, g.n};
    dsizes.insert(dsizes.end(), g.out_sp.begin(), g.out_sp.end());
    dsizes.push_back(g.cg);
    for (int64_t i = 0; i < g.d; ++i) dsizes.push_back(weight.size(2 + i));
    const at::Tensor dcols = at::bmm(grad_rows, w).view(dsizes);
    std::vector<int64_t> padded_shape{g.n, g.c};
    for (int64_t i = 0; i < g.d; ++i) padded_shape.push_back(input.size(2 + i) + 2 * g.padding[i]);
    at::Tensor gx = at::zeros(padded_shape, input.options());
    // one tap's positions in gx, in dcols' order [groups, N, out..., C/groups]
    std::vector<int64_t> sizes{g.groups, g.n}, strides{g.cg * gx.stride(1), gx.stride(0)};
    for (int64_t i = 0; i < g.d; ++i) {
        sizes.push_back(g.out_sp[i]);
        strides.push_back(g.stride[i] * gx.stride(2 + i));
    }
    sizes.push_back(g.cg);
    strides.push_back(gx.stride(1));
    const int64_t k0 = weight.size(2), k1 = g.d > 1 ? weight.size(3) : 1;
    for (int64_t a = 0; a < k0; ++a)
        for (int64_t b = 0; b < k1; ++b) {
            int64_t offset = a * g.dilation[0] * gx.stride(2);
            at::Tensor tap = dcols.select(-g.d, a);  // drop the first kernel dim
            if (g.d > 1) {
                offset += b * g.dilation[1] * gx.stride(3);
                tap = tap.select(-1, b);
            }
            gx.as_strided(sizes, strides, offset).add_(tap);
        }
    if (!g.padded()) return gx;
    at::Tensor inner = gx;
    for (int64_t i = 0; i < g.d; ++i) inner = inner.narrow(2 + i, g.padding[i], input.size(2 + i));
    return inner.contiguous();
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> convolution_backward_on_card(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
    std::array<bool, 3> output_mask) {
    const auto geom = conv_geometry(input, weight, stride, padding, dilation, groups);
    if (!geom || !grad_output.is_privateuseone() ||
        grad_output.scalar_type() != input.scalar_type() ||
        grad_output.device() != input.device() || grad_output.sizes() != geom->out_shape())
        return std::nullopt;
    const ConvGeometry& g = *geom;
    c10::DeviceGuard guard(input.device());
    at::Tensor gx, gw, gb;
    if (g.n == 0) {
        if (output_mask[0]) gx = at::zeros_like(input);
        if (output_mask[1]) gw = at::zeros_like(weight);
        if (output_mask[2]) gb = at::zeros({g.o}, grad_output.options());
        return std::make_tuple(gx, gw, gb);
    }
    // the gradient as [N, groups, O/groups, out...]
    std::vector<int64_t> gsizes{g.n, g.groups, g.og};
    gsizes.insert(gsizes.end(), g.out_sp.begin(), g.out_sp.end());
    const at::Tensor grad = grad_output.contiguous().view(gsizes);
    if (output_mask[0]) {
        std::vector<int64_t> perm{1, 0};  // [groups, N, out..., O/groups]
        for (int64_t i = 0; i < g.d; ++i) perm.push_back(3 + i);
        perm.push_back(2);
        const at::Tensor rows =
            grad.permute(perm).contiguous().view({g.groups, g.n * g.positions, g.og});
        gx = conv_input_grad(rows, input, weight, g);
    }
    if (output_mask[1]) {
        std::vector<int64_t> perm{1, 2, 0};  // [groups, O/groups, N, out...]
        for (int64_t i = 0; i < g.d; ++i) perm.push_back(3 + i);
        const at::Tensor grad_t =
            grad.permute(perm).contiguous().view({g.groups, g.og, g.n * g.positions});
        gw = at::bmm(grad_t, im2col(input, g, weight.sizes().slice(2))).view(weight.sizes());
    }
    if (output_mask[2]) {
        std::vector<int64_t> dims{0};
        for (int64_t i = 0; i < g.d; ++i) dims.push_back(2 + i);
        gb = grad_output.sum(dims);
    }
    return std::make_tuple(gx, gw, gb);
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
    if (!transposed && input.is_privateuseone())
        if (auto r = convolution_backward_on_card(grad_output, input, weight, stride, padding,
                                                  dilation, groups, output_mask))
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
