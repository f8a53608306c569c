// Float binary math composed of card ops (they were CPU fallbacks): div with a rounding mode,
// floor_divide and remainder of floats, fmod, atan2, copysign, fmax/fmin, logaddexp(2), xlogy,
// heaviside, signbit, sinc, hypot, frac, lerp with a weight tensor, and pow of a tensor by a
// tensor or by any number. Each mirrors the CPU kernel's branches for zeros, signed zeros,
// infinities and NaN; the values agree to rounding (a composition rounds more than once: e.g.
// floor(a / b) where the CPU divides exactly through fmod, pow as exp2(e log2 |b|)). 16-bit
// operands compute in fp32 as the CPU's kernels do.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <numbers>
#include <optional>
#include <vector>

#include "Composed.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr double kPi = std::numbers::pi;

// The sign bit of a float (true for -0.0 and a negative NaN), from fp32's bits on the card.
at::Tensor sign_bit(const at::Tensor& w) {
    if (!w.is_privateuseone()) return at::signbit(w);
    return (w.scalar_type() == at::kFloat ? w : w.to(at::kFloat)).view(at::kInt) < 0;
}

// torch's result type of a binary op that computes in floats (integers promote to the default
// float type).
at::ScalarType float_result(const at::Tensor& a, const at::Tensor& b) {
    const at::ScalarType t = at::result_type(a, b);
    return at::isIntegralType(t, /*includeBool=*/true)
               ? at::typeMetaToScalarType(at::get_default_dtype())
               : t;
}

// f(a, b) on card operands, in torch's broadcast shape, converted to `type`, into out.
template <class F>
at::Tensor& binary_into(const at::Tensor& a, const at::Tensor& b, at::ScalarType type,
                        at::Tensor& out, F f) {
    const at::Device card = card_of({a, b});
    c10::DeviceGuard guard(card);
    const std::vector<int64_t> shape = at::infer_size(a.sizes(), b.sizes());
    const at::Tensor r = f(card_operand(a, card), card_operand(b, card));
    return assign(out, r.reshape(shape).to(type));
}

bool binary_on_card(const at::Tensor& a, const at::Tensor& b, at::ScalarType type,
                    const at::Tensor& out) {
    return composable({a, b}, type) && out.is_privateuseone();
}

// floor(a / b) with the CPU's answers where its fmod-based division differs: NaN for an infinite
// dividend (fmod(inf, b) is NaN), -1 for a finite nonzero dividend over an infinity of the
// other sign (0 for the same sign).
at::Tensor floor_of_quotient(const at::Tensor& a, const at::Tensor& b) {
    at::Tensor r = at::floor(a / b);
    r = at::where(at::isinf(a).logical_and(b != 0), std::nan(""), r);
    const at::Tensor over_inf = at::isinf(b).logical_and(at::isfinite(a)).logical_and(a != 0);
    return at::where(over_inf.logical_and(a * b < 0), -1.0, r);  // signs differ
}

// a - floor(a / b) * b, with fmod's exact answer for an infinite divisor of a finite dividend
// (a, moved to the divisor's sign when they differ, as the CPU's remainder).
at::Tensor remainder_of(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor r = a - at::floor(a / b) * b;
    const at::Tensor moved = at::where(a * b < 0, a + b, a);  // signs differ
    return at::where(at::isinf(b).logical_and(at::isfinite(a)), moved, r);
}

at::Tensor fmod_of(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor r = a - at::trunc(a / b) * b;
    return at::where(at::isinf(b).logical_and(at::isfinite(a)), a, r);
}

at::Tensor& div_mode_out(const at::Tensor& self, const at::Tensor& other,
                         std::optional<c10::string_view> mode, at::Tensor& out) {
    if (!mode) {  // true division
        if (!binary_on_card(self, other, float_result(self, other), out))
            return fallback_to_cpu<ATEN_OP2(div, out_mode)>(self, other, mode, out);
        c10::DeviceGuard guard(card_of({self, other}));
        return assign(out, at::div(self, other));
    }
    const at::ScalarType t = at::result_type(self, other);
    if (*mode == "floor" && !is_float(t) && out.is_privateuseone() &&
        int_binary_out("aten::div", SPYRE_BINARY_FLOOR_DIVIDE, self, other, 1, out))
        return out;
    if (!binary_on_card(self, other, t, out))
        return fallback_to_cpu<ATEN_OP2(div, out_mode)>(self, other, mode, out);
    if (*mode == "trunc")
        return binary_into(self, other, t, out, [](const at::Tensor& a, const at::Tensor& b) {
            return at::trunc(a / b);
        });
    if (*mode == "floor") return binary_into(self, other, t, out, floor_of_quotient);
    return fallback_to_cpu<ATEN_OP2(div, out_mode)>(self, other, mode, out);  // the CPU's error
}

// atan(y / x) moved by +-pi into x's half plane, with atan2's answers for two zeros (+-0 or
// +-pi by the signs) and two infinities (+-pi/4 or +-3pi/4).
at::Tensor atan2_of(const at::Tensor& y, const at::Tensor& x) {
    const at::Tensor x_neg = sign_bit(x), y_neg = sign_bit(y);
    const at::Tensor y_sign = 1 - 2 * y_neg.to(at::kFloat);  // +-1 by y's sign bit
    const at::Tensor half_turn = y_sign * kPi;
    at::Tensor r = at::atan(y / x) + half_turn * x_neg.to(at::kFloat);
    const at::Tensor zeros = (x == 0).logical_and(y == 0);
    r = at::where(zeros, at::where(x_neg, half_turn, y), r);
    const at::Tensor infs = at::isinf(x).logical_and(at::isinf(y));
    const at::Tensor diagonal = (0.25 * kPi + 0.5 * kPi * x_neg.to(at::kFloat)) * y_sign;
    return at::where(infs, diagonal, r);
}

at::Tensor copysign_of(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor m = at::abs(a);
    return at::where(sign_bit(b), -m, m);
}

// max + log(1 + e^-|a - b|), and a itself for two equal infinities
at::Tensor logaddexp_of(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor r = at::maximum(a, b) + at::log1p(at::exp(-at::abs(a - b)));
    return at::where(at::isinf(a).logical_and(a == b), a, r);
}

at::Tensor logaddexp2_of(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor r =
        at::maximum(a, b) + at::log1p(at::exp2(-at::abs(a - b))) * (1.0 / std::numbers::ln2);
    return at::where(at::isinf(a).logical_and(a == b), a, r);
}

// 0 where x is 0 (even for y 0 or inf), NaN where y is NaN
at::Tensor xlogy_of(const at::Tensor& x, const at::Tensor& y) {
    const at::Tensor r = at::where(x == 0, 0.0, x * at::log(y));
    return at::where(at::isnan(y), std::nan(""), r);
}

// the number where the other is NaN
at::Tensor fmax_of(const at::Tensor& a, const at::Tensor& b) {
    return at::where(at::isnan(a), b, at::where(at::isnan(b), a, at::maximum(a, b)));
}

at::Tensor fmin_of(const at::Tensor& a, const at::Tensor& b) {
    return at::where(at::isnan(a), b, at::where(at::isnan(b), a, at::minimum(a, b)));
}

// an infinity wins over NaN, as std::hypot
at::Tensor hypot_of(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor r = at::sqrt(a * a + b * b);
    return at::where(at::isinf(a).logical_or(at::isinf(b)), INFINITY, r);
}

// base ** exponent, both tensors: exp2(e log2 |b|) with std::pow's cases: b ** 0 and 1 ** e
// are 1 (even for NaN), so is (-1) ** +-inf; a finite negative base gives NaN unless e is an
// integer, then the sign of an odd e follows b's sign bit (-0 ** -3 is -inf).
at::Tensor pow_of(const at::Tensor& b, const at::Tensor& e) {
    at::Tensor r = at::exp2(e * at::log2(at::abs(b)));
    const at::Tensor integral = at::trunc(e) == e;
    const at::Tensor odd = integral.logical_and(at::trunc(e * 0.5) * 2 != e);
    r = at::where(sign_bit(b).logical_and(odd), -r, r);
    const at::Tensor finite_negative = (b < 0).logical_and(at::isfinite(b));
    r = at::where(finite_negative.logical_and(integral.logical_not()), std::nan(""), r);
    const at::Tensor one =
        (e == 0).logical_or(b == 1).logical_or((b == -1).logical_and(at::isinf(e)));
    return at::where(one, 1.0, r);
}

// The out= kernel of a binary op computed by `formula` on float operands: `result` gives
// torch's result type (nullopt: not a float, the CPU's).
#define SPYRE_COMPOSED_BINARY(fn, op_pair, result, formula)                            \
    at::Tensor& fn(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) { \
        const at::ScalarType t = result(self, other);                                  \
        if (!binary_on_card(self, other, t, out))                                      \
            return fallback_to_cpu<ATEN_OP2 op_pair>(self, other, out);                \
        return binary_into(self, other, t, out, formula);                              \
    }

SPYRE_COMPOSED_BINARY(fmod_out, (fmod, Tensor_out), at::result_type, fmod_of)
SPYRE_COMPOSED_BINARY(atan2_out, (atan2, out), float_result, atan2_of)
SPYRE_COMPOSED_BINARY(copysign_out, (copysign, out), float_result, copysign_of)
SPYRE_COMPOSED_BINARY(logaddexp_out, (logaddexp, out), at::result_type, logaddexp_of)
SPYRE_COMPOSED_BINARY(logaddexp2_out, (logaddexp2, out), at::result_type, logaddexp2_of)
SPYRE_COMPOSED_BINARY(xlogy_out, (xlogy, OutTensor), float_result, xlogy_of)
SPYRE_COMPOSED_BINARY(fmax_out, (fmax, out), at::result_type, fmax_of)
SPYRE_COMPOSED_BINARY(fmin_out, (fmin, out), at::result_type, fmin_of)
SPYRE_COMPOSED_BINARY(hypot_out, (hypot, out), at::result_type, hypot_of)
SPYRE_COMPOSED_BINARY(pow_tensor_out, (pow, Tensor_Tensor_out), at::result_type, pow_of)
#undef SPYRE_COMPOSED_BINARY

// x == 0 ? values : x > 0 (NaN gives 0, as the CPU); torch refuses differing dtypes
at::Tensor& heaviside_out(const at::Tensor& self, const at::Tensor& values, at::Tensor& out) {
    const at::ScalarType t = self.scalar_type();
    if (values.scalar_type() != t || !binary_on_card(self, values, t, out))
        return fallback_to_cpu<ATEN_OP2(heaviside, out)>(self, values, out);
    return binary_into(self, values, t, out, [](const at::Tensor& x, const at::Tensor& v) {
        return at::where(x == 0, v, (x > 0).to(x.scalar_type()));
    });
}

// self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w): the CPU's two forms
at::Tensor& lerp_tensor_out(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight,
                            at::Tensor& out) {
    const at::ScalarType t = self.scalar_type();
    if (end.scalar_type() != t || weight.scalar_type() != t ||
        !composable({self, end, weight}, t) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(lerp, Tensor_out)>(self, end, weight, out);
    const at::Device card = card_of({self, end, weight});
    c10::DeviceGuard guard(card);
    const at::Tensor a = card_operand(self, card), b = card_operand(end, card),
                     w = card_operand(weight, card);
    const at::Tensor d = b - a;
    const at::Tensor r = at::where(at::abs(w) < 0.5, a + w * d, b - d * (1 - w));
    return assign(
        out,
        r.reshape(at::infer_size(at::infer_size(self.sizes(), end.sizes()), weight.sizes())).to(t));
}

template <class F>
at::Tensor& float_unary_into(const at::Tensor& x, at::ScalarType t, at::Tensor& out, F f) {
    c10::DeviceGuard guard(x.device());
    return assign(out, f(card_operand(x, x.device())).reshape(x.sizes()).to(t));  // 0-dim too
}

at::Tensor& sinc_out(const at::Tensor& x, at::Tensor& out) {
    const at::ScalarType t = at::isIntegralType(x.scalar_type(), true)
                                 ? at::typeMetaToScalarType(at::get_default_dtype())
                                 : x.scalar_type();
    if (!composable({x}, t) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(sinc, out)>(x, out);
    return float_unary_into(x, t, out, [](const at::Tensor& w) {
        const at::Tensor p = w * kPi;
        return at::where(w == 0, 1.0, at::sin(p) / p);
    });
}

at::Tensor& frac_out(const at::Tensor& x, at::Tensor& out) {
    if (!composable({x}, x.scalar_type()) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(frac, out)>(x, out);
    return float_unary_into(x, x.scalar_type(), out,
                            [](const at::Tensor& w) { return w - at::trunc(w); });
}

// floats by their bits; the card's signed integers as x < 0; unsigned and bool never
at::Tensor& signbit_out(const at::Tensor& x, at::Tensor& out) {
    const at::ScalarType s = x.scalar_type();
    if (!x.is_privateuseone() || !out.is_privateuseone() || !(is_float(s) || is_int_dtype(s)))
        return fallback_to_cpu<ATEN_OP2(signbit, out)>(x, out);
    c10::DeviceGuard guard(x.device());
    if (is_float(s)) return assign(out, sign_bit(x));
    if (s == at::kByte || s == at::kBool)
        return assign(out, at::zeros(x.sizes(), x.options().dtype(at::kBool)));
    return assign(out, x < 0);
}

// 2 ** e (torch.ldexp is x * 2 ** e) and 1 ** e = 1 for a float result: exp2 on the card,
// exact for integral e; other bases stay with the CPU (exp2(e log2 b) would round e log2 b).
at::Tensor& pow_scalar_base_out(const at::Scalar& base, const at::Tensor& exponent,
                                at::Tensor& out) {
    const at::ScalarType t = at::result_type(base, exponent);
    const bool ok = !base.isComplex() && composable({exponent}, t) && exponent.is_privateuseone() &&
                    out.is_privateuseone();
    if (!ok) return fallback_to_cpu<ATEN_OP2(pow, Scalar_out)>(base, exponent, out);
    c10::DeviceGuard guard(exponent.device());
    const at::Tensor e = card_operand(exponent, exponent.device());
    const double b = base.toDouble();
    // 1 ** e and 2 ** e exactly; any other base as pow(b, e) of tensors (an optimizer's
    // bias corrections, beta ** step)
    const at::Tensor r = b == 1.0   ? at::ones_like(e)
                         : b == 2.0 ? at::exp2(e)
                                    : pow_of(at::scalar_tensor(b, e.options()), e);
    return assign(out, r.reshape(exponent.sizes()).to(t));
}

// x = mantissa * 2 ** exponent with |mantissa| in [0.5, 1) (std::frexp): the fields of the
// fp32 bits through an int32 view, subnormals scaled by 2 ** 24 first; zeros, infinities and
// NaN keep x with exponent 0, as glibc's frexp gives them. 16-bit inputs widen exactly.
std::tuple<at::Tensor&, at::Tensor&> frexp_out(const at::Tensor& self, at::Tensor& mantissa,
                                               at::Tensor& exponent) {
    const bool ok = self.is_privateuseone() && is_float(self.scalar_type()) &&
                    mantissa.is_privateuseone() && exponent.is_privateuseone() &&
                    mantissa.scalar_type() == self.scalar_type() &&
                    exponent.scalar_type() == at::kInt;
    if (!ok) return fallback_to_cpu<ATEN_OP2(frexp, Tensor_out)>(self, mantissa, exponent);
    c10::DeviceGuard guard(self.device());
    const at::Tensor x = card_operand(self, self.device());  // fp32, at least one dim
    const at::Tensor sub = at::logical_and(at::abs(x) < 0x1p-126, x != 0);
    const at::Tensor scaled = at::where(sub, x * 0x1p24, x).contiguous();
    const at::Tensor bits = scaled.view(at::kInt);
    const at::Tensor biased = at::bitwise_and(at::bitwise_right_shift(bits, 23), 0xff);
    const at::Tensor special = at::logical_or(x == 0, biased == 0xff);
    const at::Tensor e = biased - 126 - at::where(sub, 24, 0).to(at::kInt);
    const at::Tensor m =
        at::bitwise_or(at::bitwise_and(bits, static_cast<int32_t>(0x807fffff)), 0x3f000000)
            .view(at::kFloat);
    assign(mantissa, at::where(special, x, m).reshape(self.sizes()).to(self.scalar_type()));
    assign(exponent, at::where(special, 0, e).reshape(self.sizes()).to(at::kInt));
    return {mantissa, exponent};
}

}  // namespace

bool float_binary_composed(spyre_binary_op op, const at::Tensor& self, const at::Tensor& other,
                           at::Tensor& out) {
    const at::ScalarType t = at::result_type(self, other);
    if (!binary_on_card(self, other, t, out)) return false;
    if (op == SPYRE_BINARY_REMAINDER) {
        binary_into(self, other, t, out, remainder_of);
        return true;
    }
    if (op == SPYRE_BINARY_FLOOR_DIVIDE) {
        binary_into(self, other, t, out, floor_of_quotient);
        return true;
    }
    return false;
}

at::Tensor pow_composed(const at::Tensor& base, double exponent) {
    const at::Tensor w = widened(base);
    if (std::trunc(exponent) == exponent && std::fabs(exponent) <= 16) {
        // square and multiply: each product rounds once, as close as std::pow for these
        auto n = static_cast<int64_t>(std::fabs(exponent));
        at::Tensor r = at::ones_like(w), square = w;
        for (; n; n >>= 1) {
            if (n & 1) r = r * square;
            if (n > 1) square = square * square;
        }
        return exponent < 0 ? at::reciprocal(r) : r;
    }
    const at::Tensor r = at::exp2(at::log2(at::abs(w)) * exponent);
    if (std::trunc(exponent) != exponent)  // (-inf) ** 2.5 is inf, (-2) ** 2.5 NaN
        return at::where((w < 0).logical_and(at::isfinite(w)), std::nan(""), r);
    if (std::fmod(exponent, 2.0) != 0) return at::where(sign_bit(w), -r, r);
    return r;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("div.out_mode", TORCH_FN(div_mode_out));
    m.impl("fmod.Tensor_out", TORCH_FN(fmod_out));
    m.impl("atan2.out", TORCH_FN(atan2_out));
    m.impl("copysign.out", TORCH_FN(copysign_out));
    m.impl("fmax.out", TORCH_FN(fmax_out));
    m.impl("fmin.out", TORCH_FN(fmin_out));
    m.impl("logaddexp.out", TORCH_FN(logaddexp_out));
    m.impl("logaddexp2.out", TORCH_FN(logaddexp2_out));
    m.impl("xlogy.OutTensor", TORCH_FN(xlogy_out));
    m.impl("heaviside.out", TORCH_FN(heaviside_out));
    m.impl("hypot.out", TORCH_FN(hypot_out));
    m.impl("lerp.Tensor_out", TORCH_FN(lerp_tensor_out));
    m.impl("sinc.out", TORCH_FN(sinc_out));
    m.impl("frac.out", TORCH_FN(frac_out));
    m.impl("signbit.out", TORCH_FN(signbit_out));
    m.impl("pow.Tensor_Tensor_out", TORCH_FN(pow_tensor_out));
    m.impl("pow.Scalar_out", TORCH_FN(pow_scalar_base_out));
    m.impl("frexp.Tensor_out", TORCH_FN(frexp_out));
}

}  // namespace torch_spyre::aten
