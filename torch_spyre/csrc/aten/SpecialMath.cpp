// Special functions composed of card ops in fp32 (they were CPU fallbacks): erfinv
// (nn.init.trunc_normal_), lgamma (the log-densities of Gamma, Beta, Poisson) and digamma (their
// entropies and KL divergences); mvlgamma and friends are composites over these.
// - erfinv: Giles' single-precision approximation (M. Giles, "Approximating the erfinv
//   function", GPU Computing Gems, 2010), then two Newton steps on erf (the card's VUN ERF; in
//   the tails on erfc), as the CPU's kernel refines its own approximation; +-1 give +-inf,
//   |y| > 1 NaN.
// - lgamma: arguments below 8 shifted up by the recurrence (the product of the shifts divided
//   out as a log), then Stirling's series to 1/z^7; non-positive arguments by the reflection
//   log(pi / |sin(pi x)|) - lgamma(1 - x), with sin's argument reduced exactly (x - round(x));
//   poles (0, negative integers) and infinities give inf.
// - digamma: the recurrence up to 6, then the asymptotic series to 1/z^8; the reflection
//   psi(1 - x) - pi / tan(pi x) below 0; 0 gives -inf (+inf for -0), negative integers NaN.
// Values agree with the CPU's to a few units of fp32's last place where the function is not near
// a zero (near lgamma's zeros at 1 and 2 the error is absolute, ~1e-6); 16-bit inputs compute
// in fp32 and round once.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <initializer_list>
#include <numbers>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kInf = INFINITY;

// Horner's rule: c[0] + w (c[1] + w (c[2] + ...)), the coefficients given from the innermost.
at::Tensor horner(const at::Tensor& w, std::initializer_list<double> innermost_first) {
    at::Tensor p;
    for (double c : innermost_first) p = p.defined() ? p * w + c : at::full_like(w, c);
    return p;
}

at::Tensor erfinv_of(const at::Tensor& y) {
    const at::Tensor w = -at::log((1 - y) * (1 + y));
    const at::Tensor central =
        horner(w - 2.5, {2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                         0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941});
    const at::Tensor tail = horner(
        at::sqrt(w) - 3, {-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                          0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682});
    at::Tensor x = at::where(w < 5, central, tail) * y;
    const double two_over_sqrt_pi = 2.0 / std::sqrt(kPi);
    // Newton on erf(x) = y; in the tails the residual from erfc, whose small values keep the
    // digits erf(x) - y would cancel (1 - y and 1 + y are exact there)
    for (int step = 0; step < 2; ++step) {
        at::Tensor residual = at::where(y > 0.5, (1 - y) - at::erfc(x), at::erf(x) - y);
        residual = at::where(y < -0.5, at::erfc(-x) - (1 + y), residual);
        x = x - residual / (two_over_sqrt_pi * at::exp(-x * x));
    }
    x = at::where(at::abs(y) == 1, y * kInf, x);
    return at::where(at::abs(y) > 1, std::nan(""), x);
}

// (shifted z >= 8, the log of the product of the shifts) for z > 0
std::pair<at::Tensor, at::Tensor> shifted_up(const at::Tensor& x, double to) {
    at::Tensor z = x, prod = at::ones_like(x);
    for (int i = 0; i < static_cast<int>(to); ++i) {
        const at::Tensor below = z < to;
        prod = at::where(below, prod * z, prod);
        z = at::where(below, z + 1, z);
    }
    return {z, at::log(prod)};
}

// lgamma for x > 0
at::Tensor lgamma_positive(const at::Tensor& x) {
    auto [z, log_shift] = shifted_up(x, 8.0);
    const at::Tensor r = 1 / z, r2 = r * r;
    const at::Tensor series = r * horner(r2, {-1.0 / 1680, 1.0 / 1260, -1.0 / 360, 1.0 / 12});
    const at::Tensor stirling = (z - 0.5) * at::log(z) - z + 0.5 * std::log(2 * kPi) + series;
    return stirling - log_shift;
}

// |sin(pi x)| with the argument reduced exactly to [-1/2, 1/2]
at::Tensor abs_sin_pi(const at::Tensor& x) { return at::abs(at::sin((x - at::round(x)) * kPi)); }

at::Tensor lgamma_of(const at::Tensor& x) {
    const at::Tensor positive = x > 0;
    const at::Tensor arg = at::where(positive, x, 1 - x);  // > 0 everywhere but NaN
    const at::Tensor lg = lgamma_positive(arg);
    const at::Tensor reflected = std::log(kPi) - at::log(abs_sin_pi(x)) - lg;
    at::Tensor r = at::where(positive, lg, reflected);
    const at::Tensor pole = (x <= 0).logical_and(at::floor(x) == x);
    return at::where(pole.logical_or(at::isinf(x)), kInf, r);
}

// digamma for x > 0
at::Tensor digamma_positive(const at::Tensor& x) {
    at::Tensor z = x, shift = at::zeros_like(x);
    for (int i = 0; i < 6; ++i) {
        const at::Tensor below = z < 6;
        shift = at::where(below, shift + 1 / z, shift);
        z = at::where(below, z + 1, z);
    }
    const at::Tensor r = 1 / z, r2 = r * r;
    const at::Tensor series = r2 * horner(r2, {1.0 / 240, -1.0 / 252, 1.0 / 120, -1.0 / 12});
    return at::log(z) - 0.5 * r + series - shift;
}

at::Tensor digamma_of(const at::Tensor& x) {
    const at::Tensor positive = x > 0;
    const at::Tensor psi = digamma_positive(at::where(positive, x, 1 - x));
    // psi(x) = psi(1 - x) - pi / tan(pi x), tan's argument reduced exactly (period 1)
    const at::Tensor reflected = psi - kPi / at::tan((x - at::round(x)) * kPi);
    at::Tensor r = at::where(positive, psi, reflected);
    r = at::where((x < 0).logical_and(at::floor(x) == x), std::nan(""), r);
    r = at::where(x == kInf, kInf, at::where(x == -kInf, std::nan(""), r));
    // 0: -inf, -0: +inf (the CPU's copysign(inf, -x))
    return at::where(x == 0, at::where(x.view(at::kInt) < 0, kInf, -kInf), r);
}

template <class F>
at::Tensor special(const at::Tensor& x, at::ScalarType t, F f) {
    c10::DeviceGuard guard(x.device());
    const at::Tensor w = card_operand(x, x.device());
    return f(w).reshape(x.sizes()).to(t);
}

// float results for float inputs, the default float type for integer ones (as torch)
at::ScalarType result_of(const at::Tensor& x) {
    return at::isIntegralType(x.scalar_type(), true)
               ? at::typeMetaToScalarType(at::get_default_dtype())
               : x.scalar_type();
}

#define SPYRE_SPECIAL(fn, aten_op, formula)                   \
    at::Tensor& fn(const at::Tensor& x, at::Tensor& out) {    \
        const at::ScalarType t = result_of(x);                \
        if (!composable({x}, t) || !out.is_privateuseone())   \
            return fallback_to_cpu<ATEN_OP2 aten_op>(x, out); \
        return assign(out, special(x, t, formula));           \
    }

SPYRE_SPECIAL(erfinv_out, (erfinv, out), erfinv_of)
SPYRE_SPECIAL(lgamma_out, (lgamma, out), lgamma_of)
SPYRE_SPECIAL(digamma_out, (digamma, out), digamma_of)
#undef SPYRE_SPECIAL

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("erfinv.out", TORCH_FN(erfinv_out));
    m.impl("lgamma.out", TORCH_FN(lgamma_out));
    m.impl("digamma.out", TORCH_FN(digamma_out));
}

}  // namespace torch_spyre::aten
