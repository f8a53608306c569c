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
// - i0, i0e, i1, i1e (modified Bessel functions of the first kind, orders 0 and 1, and their
//   exponentially scaled forms): the CPU's Cephes Chebyshev series (the same coefficients, the
//   fp32 sets for i1/i1e as its float kernel takes them) in fp32 on |x| <= 8 and on 32/|x| - 2
//   beyond; i1 and i1e odd.
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

// Cephes' chbevl: sum' c_i T_i(y/2) by Clenshaw's recurrence, the coefficients as Cephes lists
// them (the constant term last).
at::Tensor chbevl(const at::Tensor& y, std::initializer_list<double> c) {
    at::Tensor b0, b1 = at::zeros_like(y), b2;
    for (double ci : c) {
        if (!b0.defined()) {
            b0 = at::full_like(y, ci);
            continue;
        }
        b2 = b1, b1 = b0;
        b0 = y * b1 - b2 + ci;
    }
    return 0.5 * (b0 - b2);
}

// exp(-x) I0(x) on [0, 8] and exp(-x) sqrt(x) I0(x) on (8, inf), of |x|
at::Tensor i0e_near(const at::Tensor& a) {
    return chbevl(
        a * 0.5 - 2,
        {-4.41534164647933937950E-18, 3.33079451882223809783E-17,  -2.43127984654795469359E-16,
         1.71539128555513303061E-15,  -1.16853328779934516808E-14, 7.67618549860493561688E-14,
         -4.85644678311192946090E-13, 2.95505266312963983461E-12,  -1.72682629144155570723E-11,
         9.67580903537323691224E-11,  -5.18979560163526290666E-10, 2.65982372468238665035E-9,
         -1.30002500998624804212E-8,  6.04699502254191894932E-8,   -2.67079385394061173391E-7,
         1.11738753912010371815E-6,   -4.41673835845875056359E-6,  1.64484480707288970893E-5,
         -5.75419501008210370398E-5,  1.88502885095841655729E-4,   -5.76375574538582365885E-4,
         1.63947561694133579842E-3,   -4.32430999505057594430E-3,  1.05464603945949983183E-2,
         -2.37374148058994688156E-2,  4.93052842396707084878E-2,   -9.49010970480476444210E-2,
         1.71620901522208775349E-1,   -3.04682672343198398683E-1,  6.76795274409476084995E-1});
}

at::Tensor i0e_far(const at::Tensor& a) {
    return chbevl(
        32 / a - 2,
        {-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
         3.46122286769746109310E-17,  -2.82762398051658348494E-16, -3.42548561967721913462E-16,
         1.77256013305652638360E-15,  3.81168066935262242075E-15,  -9.55484669882830764870E-15,
         -4.15056934728722208663E-14, 1.54008621752140982691E-14,  3.85277838274214270114E-13,
         7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11,
         -3.14991652796324136454E-11, 1.18891471078464383424E-11,  4.94060238822496958910E-10,
         3.39623202570838634515E-9,   2.26666899049817806459E-8,   2.04891858946906374183E-7,
         2.89137052083475648297E-6,   6.88975834691682398426E-5,   3.36911647825569408990E-3,
         8.04490411014108831608E-1});
}

// exp(-x) I1(x) / x on [0, 8] and exp(-x) sqrt(x) I1(x) on (8, inf), of |x| (the float sets)
at::Tensor i1e_near(const at::Tensor& a) {
    return chbevl(
        a * 0.5 - 2,
        {9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
         -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
         4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
         -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
         2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
         -1.76416518357834055153E-1, 2.52587186443633654823E-1});
}

at::Tensor i1e_far(const at::Tensor& a) {
    return chbevl(32 / a - 2, {-3.83538038596423702205E-9, -2.63146884688951950684E-8,
                               -2.51223623787020892529E-7, -3.88256480887769039346E-6,
                               -1.10588938762623716291E-4, -9.76109749136146840777E-3,
                               7.78576235018280120474E-1});
}

// scaled: the exponentially scaled form (no exp(|x|) factor); the series' argument on the
// other side of 8 is computed too and discarded by where (NaN stays NaN: it is not <= 8)
at::Tensor bessel_i0(const at::Tensor& x, bool scaled) {
    const at::Tensor a = at::abs(x);
    at::Tensor near = i0e_near(a), far = i0e_far(a);
    if (!scaled) {
        const at::Tensor e = at::exp(a);
        near = e * near, far = e * far;
    }
    return at::where(a <= 8, near, far / at::sqrt(a));
}

at::Tensor bessel_i1(const at::Tensor& x, bool scaled) {
    const at::Tensor a = at::abs(x);
    at::Tensor near, far;
    if (scaled) {
        near = i1e_near(a) * a, far = i1e_far(a) / at::sqrt(a);
    } else {
        const at::Tensor e = at::exp(a);
        near = e * a * i1e_near(a), far = e * i1e_far(a) / at::sqrt(a);
    }
    const at::Tensor r = at::where(a <= 8, near, far);
    return at::where(x < 0, -r, r);
}

at::Tensor i0_of(const at::Tensor& x) { return bessel_i0(x, false); }
at::Tensor i0e_of(const at::Tensor& x) { return bessel_i0(x, true); }
at::Tensor i1_of(const at::Tensor& x) { return bessel_i1(x, false); }
at::Tensor i1e_of(const at::Tensor& x) { return bessel_i1(x, true); }

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
SPYRE_SPECIAL(i0_out, (i0, out), i0_of)
SPYRE_SPECIAL(i0e_out, (special_i0e, out), i0e_of)
SPYRE_SPECIAL(i1_out, (special_i1, out), i1_of)
SPYRE_SPECIAL(i1e_out, (special_i1e, out), i1e_of)
#undef SPYRE_SPECIAL

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("erfinv.out", TORCH_FN(erfinv_out));
    m.impl("lgamma.out", TORCH_FN(lgamma_out));
    m.impl("digamma.out", TORCH_FN(digamma_out));
    m.impl("i0.out", TORCH_FN(i0_out));
    m.impl("special_i0e.out", TORCH_FN(i0e_out));
    m.impl("special_i1.out", TORCH_FN(i1_out));
    m.impl("special_i1e.out", TORCH_FN(i1e_out));
}

}  // namespace torch_spyre::aten
