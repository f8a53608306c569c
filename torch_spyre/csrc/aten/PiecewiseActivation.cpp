// Activations composed of card ops (they were CPU fallbacks): hardtanh/relu6, elu (celu and
// selu through it), leaky_relu, hardsigmoid, hardswish, softplus, softshrink, hardshrink,
// threshold, mish, glu, logit and log_sigmoid, and the backwards of all but threshold's and mish's
// (threshold_backward: Backward.cpp; mish's is a composite). Each follows the CPU kernel's
// formula and branch conditions (so NaN takes the same branch); 16-bit inputs compute in fp32
// as the CPU's kernels do, and round once at the end.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool on_card(const at::Tensor& x) { return composable({x}, x.scalar_type()); }

// hardtanh is clamp of floats (it is not structured: three operators; integers are the CPU's).
bool clampable(const at::Tensor& x) { return x.is_privateuseone() && is_float(x.scalar_type()); }

at::Tensor hardtanh(const at::Tensor& x, const at::Scalar& lo, const at::Scalar& hi) {
    if (!clampable(x)) return fallback_to_cpu<ATEN_OP(hardtanh)>(x, lo, hi);
    c10::DeviceGuard guard(x.device());
    return at::clamp(x, lo, hi);
}

at::Tensor& hardtanh_out(const at::Tensor& x, const at::Scalar& lo, const at::Scalar& hi,
                         at::Tensor& out) {
    if (!clampable(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(hardtanh, out)>(x, lo, hi, out);
    c10::DeviceGuard guard(x.device());
    return assign(out, at::clamp(x, lo, hi));
}

at::Tensor& hardtanh_(at::Tensor& x, const at::Scalar& lo, const at::Scalar& hi) {
    if (!clampable(x)) return fallback_to_cpu<ATEN_OP(hardtanh_)>(x, lo, hi);
    c10::DeviceGuard guard(x.device());
    return x.clamp_(lo, hi);
}

// The out= kernels of the structured activations: `f(widened x)` into out.
template <class F>
at::Tensor& compose_into(const at::Tensor& x, at::Tensor& out, F f) {
    c10::DeviceGuard guard(x.device());
    const at::Tensor r = f(card_operand(x, x.device()));
    return assign(out, (x.dim() ? r : r.reshape({})).to(x.scalar_type()));
}

at::Tensor& elu_out(const at::Tensor& x, const at::Scalar& alpha, const at::Scalar& scale,
                    const at::Scalar& input_scale, at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(elu, out)>(x, alpha, scale, input_scale, out);
    const double negcoef = alpha.toDouble() * scale.toDouble();
    return compose_into(x, out, [&](const at::Tensor& w) {
        return at::where(w <= 0, at::expm1(w * input_scale) * negcoef, w * scale);
    });
}

at::Tensor& leaky_relu_out(const at::Tensor& x, const at::Scalar& slope, at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(leaky_relu, out)>(x, slope, out);
    return compose_into(x, out,
                        [&](const at::Tensor& w) { return at::where(w > 0, w, w * slope); });
}

// min(max(x + 3, 0), 6) / 6, as the CPU computes it
at::Tensor relu6_of_shifted(const at::Tensor& w) { return at::clamp(w + 3, 0, 6) / 6; }

at::Tensor& hardsigmoid_out(const at::Tensor& x, at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(hardsigmoid, out)>(x, out);
    return compose_into(x, out, relu6_of_shifted);
}

at::Tensor hardswish_of(const at::Tensor& x) {
    c10::DeviceGuard guard(x.device());
    const at::Tensor w = card_operand(x, x.device());
    return (w * relu6_of_shifted(w)).reshape(x.sizes()).to(x.scalar_type());
}

at::Tensor hardswish(const at::Tensor& x) {
    if (!on_card(x)) return fallback_to_cpu<ATEN_OP(hardswish)>(x);
    return hardswish_of(x);
}

at::Tensor& hardswish_out(const at::Tensor& x, at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(hardswish, out)>(x, out);
    return assign(out, hardswish_of(x));
}

at::Tensor& hardswish_(at::Tensor& x) {
    if (!on_card(x)) return fallback_to_cpu<ATEN_OP(hardswish_)>(x);
    return x.copy_(hardswish_of(x));
}

at::Tensor& softplus_out(const at::Tensor& x, const at::Scalar& beta, const at::Scalar& threshold,
                         at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(softplus, out)>(x, beta, threshold, out);
    return compose_into(x, out, [&](const at::Tensor& w) {
        const at::Tensor scaled = w * beta;
        return at::where(scaled > threshold, w, at::log1p(at::exp(scaled)) / beta);
    });
}

at::Tensor& softshrink_out(const at::Tensor& x, const at::Scalar& lambd, at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(softshrink, out)>(x, lambd, out);
    const double l = lambd.toDouble();
    return compose_into(x, out, [&](const at::Tensor& w) {
        return at::where(w > l, w - l, at::where(w < -l, w + l, w * 0));
    });
}

at::Tensor& hardshrink_out(const at::Tensor& x, const at::Scalar& lambd, at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(hardshrink, out)>(x, lambd, out);
    const double l = lambd.toDouble();
    return compose_into(x, out, [&](const at::Tensor& w) {
        return at::where((w >= -l).logical_and(w <= l), 0, w);
    });
}

at::Tensor& threshold_out(const at::Tensor& x, const at::Scalar& threshold, const at::Scalar& value,
                          at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(threshold, out)>(x, threshold, value, out);
    return compose_into(x, out,
                        [&](const at::Tensor& w) { return at::where(w <= threshold, value, w); });
}

at::Tensor& mish_out(const at::Tensor& x, at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone()) return fallback_to_cpu<ATEN_OP2(mish, out)>(x, out);
    return compose_into(x, out,
                        [](const at::Tensor& w) { return w * at::tanh(at::log1p(at::exp(w))); });
}

at::Tensor& glu_out(const at::Tensor& x, int64_t dim, at::Tensor& out) {
    const int64_t d = x.dim() ? at::maybe_wrap_dim(dim, x.dim()) : 0;
    // an odd halving dimension: the CPU's error
    if (!on_card(x) || !out.is_privateuseone() || x.dim() == 0 || x.size(d) % 2)
        return fallback_to_cpu<ATEN_OP2(glu, out)>(x, dim, out);
    const int64_t h = x.size(d) / 2;
    return compose_into(x, out, [&](const at::Tensor& w) {
        return w.narrow(d, 0, h) * at::sigmoid(w.narrow(d, h, h));
    });
}

// log(z / (1 - z)), z clamped to [eps, 1 - eps] unless eps is absent or negative (as the CPU)
at::Tensor logit_of(const at::Tensor& x, std::optional<double> eps) {
    c10::DeviceGuard guard(x.device());
    at::Tensor z = card_operand(x, x.device());
    if (eps && *eps >= 0) z = at::clamp(z, *eps, 1.0 - *eps);
    return at::log(z / (1 - z)).reshape(x.sizes()).to(x.scalar_type());
}

at::Tensor logit(const at::Tensor& x, std::optional<double> eps) {
    if (!on_card(x)) return fallback_to_cpu<ATEN_OP(logit)>(x, eps);
    return logit_of(x, eps);
}

at::Tensor& logit_out(const at::Tensor& x, std::optional<double> eps, at::Tensor& out) {
    if (!on_card(x) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(logit, out)>(x, eps, out);
    return assign(out, logit_of(x, eps));
}

at::Tensor& logit_(at::Tensor& x, std::optional<double> eps) {
    if (!on_card(x)) return fallback_to_cpu<ATEN_OP(logit_)>(x, eps);
    return x.copy_(logit_of(x, eps));
}

// min(x, 0) - log1p(exp(-|x|)); the buffer is empty (the CPU's holds exp(-|x|) for its own
// backward; the card's backward below does not read it).
at::Tensor log_sigmoid_of(const at::Tensor& x) {
    c10::DeviceGuard guard(x.device());
    const at::Tensor w = card_operand(x, x.device());
    const at::Tensor r = at::clamp_max(w, 0) - at::log1p(at::exp(-at::abs(w)));
    return r.reshape(x.sizes()).to(x.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& x) {
    if (!on_card(x)) return fallback_to_cpu<ATEN_OP(log_sigmoid_forward)>(x);
    return {log_sigmoid_of(x), at::empty({0}, x.options())};
}

std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(const at::Tensor& x,
                                                             at::Tensor& output,
                                                             at::Tensor& buffer) {
    if (!on_card(x) || !output.is_privateuseone() || !buffer.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(log_sigmoid_forward, output)>(x, output, buffer);
    assign(output, log_sigmoid_of(x));
    buffer.resize_({0});
    return {output, buffer};
}

// d/dx log(sigmoid(x)) = sigmoid(-x)
at::Tensor log_sigmoid_grad(const at::Tensor& grad, const at::Tensor& x) {
    c10::DeviceGuard guard(x.device());
    const at::Tensor r = card_operand(grad, x.device()) * at::sigmoid(-card_operand(x, x.device()));
    return r.reshape(at::infer_size(grad.sizes(), x.sizes())).to(grad.scalar_type());
}

bool backward_on_card(const at::Tensor& grad, const at::Tensor& x) {
    return composable({grad, x}, grad.scalar_type()) && grad.is_privateuseone() &&
           x.is_privateuseone();
}

at::Tensor log_sigmoid_backward(const at::Tensor& grad, const at::Tensor& x,
                                const at::Tensor& buffer) {
    if (!backward_on_card(grad, x))
        return fallback_to_cpu<ATEN_OP(log_sigmoid_backward)>(grad, x, buffer);
    return log_sigmoid_grad(grad, x);
}

at::Tensor& log_sigmoid_backward_out(const at::Tensor& grad, const at::Tensor& x,
                                     const at::Tensor& buffer, at::Tensor& grad_input) {
    if (!backward_on_card(grad, x) || !grad_input.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(log_sigmoid_backward, grad_input)>(grad, x, buffer,
                                                                           grad_input);
    return assign(grad_input, log_sigmoid_grad(grad, x));
}

// The backwards: grad_input = f(grad, x) in fp32 with the CPU kernel's branch conditions.
template <class F>
at::Tensor backward_of(const at::Tensor& grad, const at::Tensor& x, F f) {
    c10::DeviceGuard guard(x.device());
    const at::Tensor r = f(card_operand(grad, x.device()), card_operand(x, x.device()));
    return r.reshape(at::infer_size(grad.sizes(), x.sizes())).to(grad.scalar_type());
}

// A structured backward's out= kernel: f(grad, x) on the card, else the CPU's kernel with the
// operator's own arguments (grad, x, args..., grad_input).
template <class Op, class F, class... Args>
at::Tensor& grad_into(F f, const at::Tensor& grad, const at::Tensor& x, at::Tensor& grad_input,
                      const Args&... args) {
    if (!backward_on_card(grad, x) || !grad_input.is_privateuseone())
        return fallback_to_cpu<Op>(grad, x, args..., grad_input);
    return assign(grad_input, backward_of(grad, x, f));
}

at::Tensor& leaky_relu_backward_out(const at::Tensor& grad, const at::Tensor& x,
                                    const at::Scalar& slope, bool self_is_result,
                                    at::Tensor& grad_input) {
    return grad_into<ATEN_OP2(leaky_relu_backward, grad_input)>(
        [&](const at::Tensor& g, const at::Tensor& w) { return at::where(w > 0, g, g * slope); },
        grad, x, grad_input, slope, self_is_result);
}

at::Tensor& hardsigmoid_backward_out(const at::Tensor& grad, const at::Tensor& x,
                                     at::Tensor& grad_input) {
    return grad_into<ATEN_OP2(hardsigmoid_backward, grad_input)>(
        [](const at::Tensor& g, const at::Tensor& w) {
            return at::where((w > -3).logical_and(w < 3), g / 6, 0.0);
        },
        grad, x, grad_input);
}

at::Tensor& hardtanh_backward_out(const at::Tensor& grad, const at::Tensor& x, const at::Scalar& lo,
                                  const at::Scalar& hi, at::Tensor& grad_input) {
    return grad_into<ATEN_OP2(hardtanh_backward, grad_input)>(
        [&](const at::Tensor& g, const at::Tensor& w) {
            return at::where((w <= lo).logical_or(w >= hi), 0.0, g);
        },
        grad, x, grad_input, lo, hi);
}

at::Tensor& softplus_backward_out(const at::Tensor& grad, const at::Tensor& x,
                                  const at::Scalar& beta, const at::Scalar& threshold,
                                  at::Tensor& grad_input) {
    return grad_into<ATEN_OP2(softplus_backward, grad_input)>(
        [&](const at::Tensor& g, const at::Tensor& w) {
            const at::Tensor scaled = w * beta;
            const at::Tensor z = at::exp(scaled);
            return at::where(scaled > threshold, g, g * z / (z + 1));
        },
        grad, x, grad_input, beta, threshold);
}

// softshrink's and hardshrink's: 0 inside [-lambd, lambd]
at::Tensor shrink_grad(const at::Tensor& g, const at::Tensor& w, double l) {
    return at::where((w >= -l).logical_and(w <= l), 0.0, g);
}

at::Tensor& softshrink_backward_out(const at::Tensor& grad, const at::Tensor& x,
                                    const at::Scalar& lambd, at::Tensor& grad_input) {
    return grad_into<ATEN_OP2(softshrink_backward, grad_input)>(
        [&](const at::Tensor& g, const at::Tensor& w) {
            return shrink_grad(g, w, lambd.toDouble());
        },
        grad, x, grad_input, lambd);
}

at::Tensor& hardshrink_backward_out(const at::Tensor& grad, const at::Tensor& x,
                                    const at::Scalar& lambd, at::Tensor& grad_input) {
    return grad_into<ATEN_OP2(hardshrink_backward, grad_input)>(
        [&](const at::Tensor& g, const at::Tensor& w) {
            return shrink_grad(g, w, lambd.toDouble());
        },
        grad, x, grad_input, lambd);
}

// outside [eps, 1 - eps] the gradient is 0; without eps, NaN outside [0, 1]
at::Tensor& logit_backward_out(const at::Tensor& grad, const at::Tensor& x,
                               std::optional<double> eps, at::Tensor& grad_input) {
    return grad_into<ATEN_OP2(logit_backward, grad_input)>(
        [&](const at::Tensor& g, const at::Tensor& w) {
            const at::Tensor r = g / (w * (1 - w));
            if (!eps || *eps < 0) return at::where((w < 0).logical_or(w > 1), std::nan(""), r);
            return at::where((w < *eps).logical_or(w > 1 - *eps), 0.0, r);
        },
        grad, x, grad_input, eps);
}

// x < -3: 0; x <= 3: g (x / 3 + 1/2); else g
at::Tensor hardswish_backward(const at::Tensor& grad, const at::Tensor& x) {
    if (!backward_on_card(grad, x)) return fallback_to_cpu<ATEN_OP(hardswish_backward)>(grad, x);
    return backward_of(grad, x, [](const at::Tensor& g, const at::Tensor& w) {
        return at::where(w < -3, 0.0, at::where(w <= 3, g * (w / 3 + 0.5), g));
    });
}

// from the input: x <= 0: g input_scale alpha scale e^(x input_scale); from the result y:
// g input_scale (y + alpha scale); x > 0 (y > 0): g scale
at::Tensor& elu_backward_out(const at::Tensor& grad, const at::Scalar& alpha,
                             const at::Scalar& scale, const at::Scalar& input_scale, bool is_result,
                             const at::Tensor& self_or_result, at::Tensor& grad_input) {
    if (!backward_on_card(grad, self_or_result) || !grad_input.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(elu_backward, grad_input)>(
            grad, alpha, scale, input_scale, is_result, self_or_result, grad_input);
    const double negcoef = alpha.toDouble() * scale.toDouble(), poscoef = scale.toDouble(),
                 negiptcoef = input_scale.toDouble();
    return assign(grad_input,
                  backward_of(grad, self_or_result, [&](const at::Tensor& g, const at::Tensor& v) {
                      const at::Tensor neg =
                          is_result ? g * negiptcoef * (v + negcoef)
                                    : g * (negiptcoef * negcoef) * at::exp(v * negiptcoef);
                      return at::where(v <= 0, neg, g * poscoef);
                  }));
}

// the halves a, b along dim: (g sigmoid(b), g a sigmoid(b) (1 - sigmoid(b)))
at::Tensor& glu_backward_out(const at::Tensor& grad, const at::Tensor& x, int64_t dim,
                             at::Tensor& grad_input) {
    const int64_t d = x.dim() ? at::maybe_wrap_dim(dim, x.dim()) : 0;
    if (!backward_on_card(grad, x) || !grad_input.is_privateuseone() || x.dim() == 0 ||
        x.size(d) % 2 || grad.dim() != x.dim())
        return fallback_to_cpu<ATEN_OP2(glu_backward, grad_input)>(grad, x, dim, grad_input);
    c10::DeviceGuard guard(x.device());
    const int64_t h = x.size(d) / 2;
    const at::Tensor w = widened(x), g = widened(grad);
    const at::Tensor a = w.narrow(d, 0, h), sig = at::sigmoid(w.narrow(d, h, h));
    const at::Tensor ga = g * sig, gb = g * a * sig * (1 - sig);
    return assign(grad_input, at::cat({ga, gb}, d).to(grad.scalar_type()));
}

// hardtanh's and glu's backwards are not structured: their functional forms are separate
at::Tensor hardtanh_backward(const at::Tensor& grad, const at::Tensor& x, const at::Scalar& lo,
                             const at::Scalar& hi) {
    at::Tensor out = at::empty({0}, grad.options());
    if (!backward_on_card(grad, x))
        return fallback_to_cpu<ATEN_OP(hardtanh_backward)>(grad, x, lo, hi);
    return hardtanh_backward_out(grad, x, lo, hi, out);
}

at::Tensor glu_backward(const at::Tensor& grad, const at::Tensor& x, int64_t dim) {
    at::Tensor out = at::empty({0}, grad.options());
    if (!backward_on_card(grad, x)) return fallback_to_cpu<ATEN_OP(glu_backward)>(grad, x, dim);
    return glu_backward_out(grad, x, dim, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("hardtanh", TORCH_FN(hardtanh));
    m.impl("hardtanh.out", TORCH_FN(hardtanh_out));
    m.impl("hardtanh_", TORCH_FN(hardtanh_));
    m.impl("elu.out", TORCH_FN(elu_out));
    m.impl("leaky_relu.out", TORCH_FN(leaky_relu_out));
    m.impl("hardsigmoid.out", TORCH_FN(hardsigmoid_out));
    m.impl("hardswish", TORCH_FN(hardswish));
    m.impl("hardswish.out", TORCH_FN(hardswish_out));
    m.impl("hardswish_", TORCH_FN(hardswish_));
    m.impl("softplus.out", TORCH_FN(softplus_out));
    m.impl("softshrink.out", TORCH_FN(softshrink_out));
    m.impl("hardshrink.out", TORCH_FN(hardshrink_out));
    m.impl("threshold.out", TORCH_FN(threshold_out));
    m.impl("mish.out", TORCH_FN(mish_out));
    m.impl("glu.out", TORCH_FN(glu_out));
    m.impl("logit", TORCH_FN(logit));
    m.impl("logit.out", TORCH_FN(logit_out));
    m.impl("logit_", TORCH_FN(logit_));
    m.impl("log_sigmoid_forward", TORCH_FN(log_sigmoid_forward));
    m.impl("log_sigmoid_forward.output", TORCH_FN(log_sigmoid_forward_out));
    m.impl("log_sigmoid_backward", TORCH_FN(log_sigmoid_backward));
    m.impl("log_sigmoid_backward.grad_input", TORCH_FN(log_sigmoid_backward_out));
    m.impl("leaky_relu_backward.grad_input", TORCH_FN(leaky_relu_backward_out));
    m.impl("hardsigmoid_backward.grad_input", TORCH_FN(hardsigmoid_backward_out));
    m.impl("hardtanh_backward.grad_input", TORCH_FN(hardtanh_backward_out));
    m.impl("softplus_backward.grad_input", TORCH_FN(softplus_backward_out));
    m.impl("softshrink_backward.grad_input", TORCH_FN(softshrink_backward_out));
    m.impl("hardshrink_backward.grad_input", TORCH_FN(hardshrink_backward_out));
    m.impl("logit_backward.grad_input", TORCH_FN(logit_backward_out));
    m.impl("hardswish_backward", TORCH_FN(hardswish_backward));
    m.impl("elu_backward.grad_input", TORCH_FN(elu_backward_out));
    m.impl("glu_backward.grad_input", TORCH_FN(glu_backward_out));
    m.impl("glu_backward", TORCH_FN(glu_backward));
    m.impl("hardtanh_backward", TORCH_FN(hardtanh_backward));
}

}  // namespace torch_spyre::aten
