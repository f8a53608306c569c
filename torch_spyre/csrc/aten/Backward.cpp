// Backward kernels of the activations and softmaxes on the card, composed of the device's
// elementwise, compare, where and reduction kernels in fp32 (then rounded once to the gradient's
// type, as the CPU's opmath does): threshold_backward (ReLU's), silu_backward,
// _softmax_backward_data and _log_softmax_backward_data. A case they do not take (integer or
// complex types, a half_to_float softmax) runs on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

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
// torch's `self <= threshold ? 0 : grad`).
at::Tensor& threshold_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                   const at::Scalar& threshold, at::Tensor& grad_input) {
    const auto t = real_number(threshold);
    if (t && float_pair(grad, self) && grad.sizes() == self.sizes() &&
        grad_input.is_privateuseone() && grad_input.scalar_type() == grad.scalar_type()) {
        c10::DeviceGuard guard(grad.device());
        at::native::resize_output(grad_input, grad.sizes());
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("threshold_backward.grad_input", TORCH_FN(threshold_backward_out));
    m.impl("silu_backward.grad_input", TORCH_FN(silu_backward_out));
    m.impl("_softmax_backward_data.out", TORCH_FN(softmax_backward_out));
    m.impl("_log_softmax_backward_data.out", TORCH_FN(log_softmax_backward_out));
}

}  // namespace torch_spyre::aten
