// Backward kernels of the activations and softmaxes on the card, composed of the device's
// elementwise, compare, where and reduction kernels in fp32 (then rounded once to the gradient's
// type, as the CPU's opmath does): threshold_backward (ReLU's), silu_backward, sigmoid_backward,
// tanh_backward, gelu_backward,
// native_layer_norm_backward, native_group_norm_backward, _softmax_backward_data and
// _log_softmax_backward_data. A case they do
// not take (integer or complex types, a half_to_float softmax) runs on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <optional>
#include <tuple>

#include "Elementwise.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool float_pair(const at::Tensor& a, const at::Tensor& b) {
    return a.is_privateuseone() && b.is_privateuseone() && a.device() == b.device() &&
           is_float(a.scalar_type()) && a.scalar_type() == b.scalar_type();
}

// `out` (resized to r's shape) = r converted to out's type, on the card.
at::Tensor& into(const at::Tensor& r, at::Tensor& out) {
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

// ReLU's gradient: grad where self > threshold, else 0 (a NaN self passes the gradient, as
// torch's `self <= threshold ? 0 : grad`). One operand may broadcast to the other's shape, as
// the CPU's TensorIterator takes it (torch.func's jacfwd/vmap: the tangents carry a batch dim
// that self does not).
at::Tensor& threshold_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                   const at::Scalar& threshold, at::Tensor& grad_input) {
    const auto t = real_number(threshold);
    const bool to_grad = at::is_expandable_to(self.sizes(), grad.sizes());
    if (t && float_pair(grad, self) &&
        (to_grad || at::is_expandable_to(grad.sizes(), self.sizes())) &&
        grad_input.is_privateuseone() && grad_input.scalar_type() == grad.scalar_type()) {
        c10::DeviceGuard guard(grad.device());
        at::native::resize_output(grad_input, to_grad ? grad.sizes() : self.sizes());
        if (grad.numel() == 0) return grad_input;
        const at::Tensor at_or_below = at::le(self, *t);
        if (where_into("aten::threshold_backward", at_or_below, Operand{at::Tensor(), 0.0},
                       Operand{grad, 0.0}, grad_input))
            return grad_input;
    }
    return fallback_to_cpu<ATEN_OP2(threshold_backward, grad_input)>(grad, self, threshold,
                                                                     grad_input);
}

// d silu(x) = s (1 + x (1 - s)), s = sigmoid(x).
at::Tensor& silu_backward_out(const at::Tensor& grad, const at::Tensor& self,
                              at::Tensor& grad_input) {
    if (float_pair(grad, self) && grad_input.is_privateuseone() &&
        grad_input.scalar_type() == grad.scalar_type()) {
        c10::DeviceGuard guard(grad.device());
        const at::Tensor x = self.to(at::kFloat), s = at::sigmoid(x);
        return into(grad.to(at::kFloat) * (s * (x * (1.0 - s) + 1.0)), grad_input);
    }
    return fallback_to_cpu<ATEN_OP2(silu_backward, grad_input)>(grad, self, grad_input);
}

// sigmoid and tanh from their outputs y: g (1 - y) y and g (1 - y^2), in the CPU kernels' order.
at::Tensor& sigmoid_backward_out(const at::Tensor& grad, const at::Tensor& y,
                                 at::Tensor& grad_input) {
    if (float_pair(grad, y) && grad_input.is_privateuseone() &&
        grad_input.scalar_type() == grad.scalar_type()) {
        c10::DeviceGuard guard(grad.device());
        const at::Tensor yf = y.to(at::kFloat);
        return into(grad.to(at::kFloat) * (1.0 - yf) * yf, grad_input);
    }
    return fallback_to_cpu<ATEN_OP2(sigmoid_backward, grad_input)>(grad, y, grad_input);
}

at::Tensor& tanh_backward_out(const at::Tensor& grad, const at::Tensor& y, at::Tensor& grad_input) {
    if (float_pair(grad, y) && grad_input.is_privateuseone() &&
        grad_input.scalar_type() == grad.scalar_type()) {
        c10::DeviceGuard guard(grad.device());
        const at::Tensor yf = y.to(at::kFloat);
        return into(grad.to(at::kFloat) * (1.0 - yf * yf), grad_input);
    }
    return fallback_to_cpu<ATEN_OP2(tanh_backward, grad_input)>(grad, y, grad_input);
}

// softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g), along dim.
at::Tensor& softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                 at::ScalarType input_dtype, at::Tensor& grad_input) {
    if (float_pair(grad, output) && input_dtype == grad.scalar_type() &&
        grad_input.is_privateuseone() && grad_input.scalar_type() == grad.scalar_type()) {
        c10::DeviceGuard guard(grad.device());
        const at::Tensor g = grad.to(at::kFloat), y = output.to(at::kFloat);
        return into(y * (g - (g * y).sum(dim, true)), grad_input);
    }
    return fallback_to_cpu<ATEN_OP2(_softmax_backward_data, out)>(grad, output, dim, input_dtype,
                                                                  grad_input);
}

at::Tensor& log_softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                     at::ScalarType input_dtype, at::Tensor& grad_input) {
    if (float_pair(grad, output) && input_dtype == grad.scalar_type() &&
        grad_input.is_privateuseone() && grad_input.scalar_type() == grad.scalar_type()) {
        c10::DeviceGuard guard(grad.device());
        const at::Tensor g = grad.to(at::kFloat), y = output.to(at::kFloat);
        return into(g - at::exp(y) * g.sum(dim, true), grad_input);
    }
    return fallback_to_cpu<ATEN_OP2(_log_softmax_backward_data, out)>(grad, output, dim,
                                                                      input_dtype, grad_input);
}

// d gelu(x) = Phi(x) + x phi(x). The card has GELU (x Phi(x), evaluated in double and rounded
// once), not erf: Phi(x) = gelu(x) / x within an ulp or two, 1/2 near 0 where the quotient
// loses its meaning. The tanh form differentiates tanh(u) directly.
at::Tensor gelu_derivative(const at::Tensor& x, c10::string_view approximate) {
    if (approximate == "tanh") {
        const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
        const at::Tensor x2 = x * x;
        const at::Tensor t = at::tanh((x + x2 * x * kappa) * beta);
        return (t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * ((x2 * (3.0 * kappa) + 1.0) * beta);
    }
    const at::Tensor cdf =
        at::where(at::abs(x) < 1e-20, at::scalar_tensor(0.5, x.options()), at::gelu(x) / x);
    const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * M_PI);
    return cdf + x * at::exp(x * x * -0.5) * inv_sqrt_2pi;
}

at::Tensor& gelu_backward_out(const at::Tensor& grad, const at::Tensor& self,
                              c10::string_view approximate, at::Tensor& grad_input) {
    if (float_pair(grad, self) && grad_input.is_privateuseone() &&
        grad_input.scalar_type() == grad.scalar_type() &&
        (approximate == "none" || approximate == "tanh")) {
        c10::DeviceGuard guard(grad.device());
        return into(grad.to(at::kFloat) * gelu_derivative(self.to(at::kFloat), approximate),
                    grad_input);
    }
    return fallback_to_cpu<ATEN_OP2(gelu_backward, grad_input)>(grad, self, approximate,
                                                                grad_input);
}

// Layer norm over the trailing dims, rows of N values, xhat = (x - mean) rstd, g = dy w:
// dx = rstd (g - mean(g) - xhat mean(g xhat)), dw = sum over rows of dy xhat, db = sum of dy.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad, const at::Tensor& input, at::IntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> mask) {
    const int64_t k = int64_t(normalized_shape.size());
    const bool has_w = weight && weight->defined(), has_b = bias && bias->defined();
    bool ok = float_pair(grad, input) && k >= 1 && k <= input.dim() && mean.is_privateuseone() &&
              rstd.is_privateuseone() && mean.numel() > 0 && input.numel() > 0;
    if (ok && has_w) ok = weight->is_privateuseone() && is_float(weight->scalar_type());
    if (ok && has_b) ok = bias->is_privateuseone() && is_float(bias->scalar_type());
    if (ok) {
        c10::DeviceGuard guard(input.device());
        const int64_t cols = input.numel() / mean.numel();
        const at::Tensor x = input.to(at::kFloat).reshape({-1, cols});
        const at::Tensor dy = grad.to(at::kFloat).reshape({-1, cols});
        const at::Tensor mu = mean.to(at::kFloat).reshape({-1, 1});
        const at::Tensor rs = rstd.to(at::kFloat).reshape({-1, 1});
        const at::Tensor xhat = (x - mu) * rs;
        at::Tensor dx, dw, db;
        if (mask[0]) {
            const at::Tensor g = has_w ? dy * weight->to(at::kFloat).reshape({1, cols}) : dy;
            dx = (rs * (g - g.mean(1, true) - xhat * (g * xhat).mean(1, true)))
                     .view(input.sizes())
                     .to(input.scalar_type());
        }
        if (mask[1] && has_w)
            dw = (dy * xhat).sum(0).view(weight->sizes()).to(weight->scalar_type());
        if (mask[2] && has_b) db = dy.sum(0).view(bias->sizes()).to(bias->scalar_type());
        return {dx, dw, db};
    }
    return fallback_to_cpu<ATEN_OP(native_layer_norm_backward)>(grad, input, normalized_shape, mean,
                                                                rstd, weight, bias, mask);
}

// GroupNorm's gradients (nn.GroupNorm's forward is torch's math_group_norm, already device
// ops): x [N, C, *] in G groups of D = C / G * HxW elements with their mean and rstd [N, G];
// with g = dy * weight, dx = rstd (g - mean(g) - xhat mean(g xhat)) over each group, as the
// layer norm's; dweight / dbias sum dy xhat / dy per channel over N and the positions.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm_backward(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t N, int64_t C, int64_t HxW, int64_t group,
    std::array<bool, 3> mask) {
    const bool has_w = weight && weight->defined();
    bool ok = float_pair(grad, input) && mean.is_privateuseone() && rstd.is_privateuseone() &&
              group > 0 && C % group == 0 && N * C * HxW == input.numel() && input.numel() > 0;
    if (ok && has_w) ok = weight->is_privateuseone() && is_float(weight->scalar_type());
    if (ok) {
        c10::DeviceGuard guard(input.device());
        const at::Tensor x = input.to(at::kFloat).reshape({N, group, C / group, HxW});
        const at::Tensor dy = grad.to(at::kFloat).reshape({N, group, C / group, HxW});
        const at::Tensor mu = mean.to(at::kFloat).reshape({N, group, 1, 1});
        const at::Tensor rs = rstd.to(at::kFloat).reshape({N, group, 1, 1});
        const at::Tensor xhat = (x - mu) * rs;
        at::Tensor dx, dw, db;
        if (mask[0]) {
            const at::Tensor g =
                has_w ? dy * weight->to(at::kFloat).reshape({1, group, C / group, 1}) : dy;
            const std::array<int64_t, 2> in_group = {2, 3};
            dx = (rs * (g - g.mean(in_group, true) - xhat * (g * xhat).mean(in_group, true)))
                     .view(input.sizes())
                     .to(input.scalar_type());
        }
        const std::array<int64_t, 2> per_channel = {0, 3};
        if (mask[1] && has_w)
            dw = (dy * xhat).sum(per_channel).view(weight->sizes()).to(weight->scalar_type());
        if (mask[2]) db = dy.sum(per_channel).reshape({C}).to(grad.scalar_type());
        return {dx, dw, db};
    }
    return fallback_to_cpu<ATEN_OP(native_group_norm_backward)>(grad, input, mean, rstd, weight, N,
                                                                C, HxW, group, mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_group_norm_backward", TORCH_FN(native_group_norm_backward));
    m.impl("gelu_backward.grad_input", TORCH_FN(gelu_backward_out));
    m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
    m.impl("threshold_backward.grad_input", TORCH_FN(threshold_backward_out));
    m.impl("silu_backward.grad_input", TORCH_FN(silu_backward_out));
    m.impl("sigmoid_backward.grad_input", TORCH_FN(sigmoid_backward_out));
    m.impl("tanh_backward.grad_input", TORCH_FN(tanh_backward_out));
    m.impl("_softmax_backward_data.out", TORCH_FN(softmax_backward_out));
    m.impl("_log_softmax_backward_data.out", TORCH_FN(log_softmax_backward_out));
}

}  // namespace torch_spyre::aten
