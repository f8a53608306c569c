// Activations, unary math and softmax on the card through libspyre's op library: relu, gelu
// (exact and tanh), silu, sigmoid, tanh, exp, log, neg, abs, sqrt, rsqrt, reciprocal, sin, cos,
// floor, ceil, trunc, round (also with decimals; integers: a copy), sign, sgn, erf, erfc, log1p,
// expm1, exp2, log2, log10, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, pow with the
// exponents 2, 0.5, -0.5, -1 (functional, in-place and out=), _softmax and _log_softmax along any
// dim (the last in place, others moved last by dense copies on the card). Other dtypes and layouts
// run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <optional>

#include "Composed.h"
#include "Elementwise.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// out = f(x) on the card into `out` (same shape and float dtype as x), false if refused.
// The types op runs on: the float types; neg and abs also exactly on integers (not bool).
bool takes(spyre_unary_op op, at::ScalarType t) {
    return is_float(t) ||
           ((op == SPYRE_UNARY_NEG || op == SPYRE_UNARY_ABS) && is_int_dtype(t) && t != at::kBool);
}

bool unary_into(const char* name, spyre_unary_op op, const at::Tensor& x, const at::Tensor& out) {
    if (!takes(op, x.scalar_type()) || out.scalar_type() != x.scalar_type() ||
        out.sizes() != x.sizes())
        return false;
    c10::DeviceGuard guard(x.device());
    if (x.numel() == 0) return true;
    const auto dx = stick_dense(x, name);
    if (!dx) return false;
    const at::Tensor w = writable_output(out);
    const spyre_tensor tx = op_tensor(*dx), to = op_tensor(w);
    if (!op_ran(name, spyre_op_unary(op_stream(w), op, &tx, &to))) return false;
    finish_output(out, w);
    return true;
}

std::optional<at::Tensor> unary(const char* name, spyre_unary_op op, const at::Tensor& x) {
    if (!takes(op, x.scalar_type())) return std::nullopt;
    c10::DeviceGuard guard(x.device());
    at::Tensor out = at::empty(x.sizes(), x.options());
    if (!unary_into(name, op, x, out)) return std::nullopt;
    return out;
}

// The functional kernel and the out= kernel (which the in-place form reaches) of a structured
// unary operator.
#define SPYRE_UNARY(name, op)                                                                \
    at::Tensor name(const at::Tensor& x) {                                                   \
        if (auto r = unary("aten::" #name, op, x)) return *r;                                \
        return fallback_to_cpu<ATEN_OP(name)>(x);                                            \
    }                                                                                        \
    at::Tensor& name##_out(const at::Tensor& x, at::Tensor& out) {                           \
        if (out.scalar_type() == x.scalar_type()) at::native::resize_output(out, x.sizes()); \
        if (unary_into("aten::" #name, op, x, out)) return out;                              \
        return fallback_to_cpu<ATEN_OP2(name, out)>(x, out);                                 \
    }
SPYRE_UNARY(silu, SPYRE_UNARY_SILU)
SPYRE_UNARY(sigmoid, SPYRE_UNARY_SIGMOID)
SPYRE_UNARY(tanh, SPYRE_UNARY_TANH)
SPYRE_UNARY(exp, SPYRE_UNARY_EXP)
SPYRE_UNARY(log, SPYRE_UNARY_LOG)
SPYRE_UNARY(neg, SPYRE_UNARY_NEG)
SPYRE_UNARY(abs, SPYRE_UNARY_ABS)
SPYRE_UNARY(sqrt, SPYRE_UNARY_SQRT)
SPYRE_UNARY(rsqrt, SPYRE_UNARY_RSQRT)
SPYRE_UNARY(reciprocal, SPYRE_UNARY_RECIPROCAL)
SPYRE_UNARY(sin, SPYRE_UNARY_SIN)
SPYRE_UNARY(cos, SPYRE_UNARY_COS)
SPYRE_UNARY(sign, SPYRE_UNARY_SIGN)
SPYRE_UNARY(sgn, SPYRE_UNARY_SIGN)  // real types only: complex is not a spyre dtype
SPYRE_UNARY(erf, SPYRE_UNARY_ERF)
SPYRE_UNARY(erfc, SPYRE_UNARY_ERFC)
SPYRE_UNARY(log1p, SPYRE_UNARY_LOG1P)
SPYRE_UNARY(expm1, SPYRE_UNARY_EXPM1)
SPYRE_UNARY(exp2, SPYRE_UNARY_EXP2)
SPYRE_UNARY(log2, SPYRE_UNARY_LOG2)
SPYRE_UNARY(log10, SPYRE_UNARY_LOG10)
SPYRE_UNARY(tan, SPYRE_UNARY_TAN)
SPYRE_UNARY(asin, SPYRE_UNARY_ASIN)
SPYRE_UNARY(acos, SPYRE_UNARY_ACOS)
SPYRE_UNARY(atan, SPYRE_UNARY_ATAN)
SPYRE_UNARY(sinh, SPYRE_UNARY_SINH)
SPYRE_UNARY(cosh, SPYRE_UNARY_COSH)
SPYRE_UNARY(asinh, SPYRE_UNARY_ASINH)
SPYRE_UNARY(acosh, SPYRE_UNARY_ACOSH)
SPYRE_UNARY(atanh, SPYRE_UNARY_ATANH)
#undef SPYRE_UNARY

// floor, ceil, trunc and round of an integer tensor are the tensor itself: torch copies it, so
// does the card (a device copy). Bool runs on the CPU fallback (torch refuses some of these).
bool integer_rounding_into(const at::Tensor& x, const at::Tensor& out) {
    if (!is_int_dtype(x.scalar_type()) || x.scalar_type() == at::kBool ||
        out.scalar_type() != x.scalar_type() || out.sizes() != x.sizes())
        return false;
    c10::DeviceGuard guard(x.device());
    if (!out.is_same(x)) out.copy_(x);
    return true;
}

#define SPYRE_ROUNDING(name, op)                                                                 \
    at::Tensor name(const at::Tensor& x) {                                                       \
        if (auto r = unary("aten::" #name, op, x)) return *r;                                    \
        if (is_int_dtype(x.scalar_type()) && x.scalar_type() != at::kBool) {                     \
            c10::DeviceGuard guard(x.device());                                                  \
            return x.clone();                                                                    \
        }                                                                                        \
        return fallback_to_cpu<ATEN_OP(name)>(x);                                                \
    }                                                                                            \
    at::Tensor& name##_out(const at::Tensor& x, at::Tensor& out) {                               \
        if (out.scalar_type() == x.scalar_type()) at::native::resize_output(out, x.sizes());     \
        if (unary_into("aten::" #name, op, x, out) || integer_rounding_into(x, out)) return out; \
        return fallback_to_cpu<ATEN_OP2(name, out)>(x, out);                                     \
    }
SPYRE_ROUNDING(floor, SPYRE_UNARY_FLOOR)
SPYRE_ROUNDING(ceil, SPYRE_UNARY_CEIL)
SPYRE_ROUNDING(trunc, SPYRE_UNARY_TRUNC)
SPYRE_ROUNDING(round, SPYRE_UNARY_ROUND)
#undef SPYRE_ROUNDING

// round(x, decimals=d) as the CPU's kernel computes it in fp32 (also fp16/bf16's opmath):
// rint(x * 10^d) / 10^d, for d < 0 rint(x / 10^-d) * 10^-d, each pass rounded to fp32 on the
// card, then to x's type; d = 0 is round.
bool round_decimals_into(const at::Tensor& x, int64_t decimals, const at::Tensor& out) {
    if (!is_float(x.scalar_type()) || out.scalar_type() != x.scalar_type() ||
        out.sizes() != x.sizes())
        return false;
    if (decimals == 0) return unary_into("aten::round", SPYRE_UNARY_ROUND, x, out);
    c10::DeviceGuard guard(x.device());
    if (x.numel() == 0) return true;
    const double ten = static_cast<float>(std::pow(10.0, static_cast<double>(std::abs(decimals))));
    const at::Tensor xf = x.to(at::kFloat);
    at::Tensor t = decimals < 0 ? at::div(xf, ten) : at::mul(xf, ten);
    if (!unary_into("aten::round", SPYRE_UNARY_ROUND, t, t)) return false;
    decimals < 0 ? t.mul_(ten) : t.div_(ten);
    out.copy_(t);
    return true;
}

at::Tensor round_decimals(const at::Tensor& x, int64_t decimals) {
    if (is_float(x.scalar_type())) {
        c10::DeviceGuard guard(x.device());
        at::Tensor out = at::empty(x.sizes(), x.options());
        if (round_decimals_into(x, decimals, out)) return out;
    }
    return fallback_to_cpu<ATEN_OP2(round, decimals)>(x, decimals);
}

at::Tensor& round_decimals_out(const at::Tensor& x, int64_t decimals, at::Tensor& out) {
    if (out.scalar_type() == x.scalar_type()) at::native::resize_output(out, x.sizes());
    if (round_decimals_into(x, decimals, out)) return out;
    return fallback_to_cpu<ATEN_OP2(round, decimals_out)>(x, decimals, out);
}

// relu is not structured: its functional and in-place forms are separate operators.
at::Tensor relu(const at::Tensor& x) {
    if (auto r = unary("aten::relu", SPYRE_UNARY_RELU, x)) return *r;
    return fallback_to_cpu<ATEN_OP(relu)>(x);
}

at::Tensor& relu_(at::Tensor& x) {
    if (unary_into("aten::relu_", SPYRE_UNARY_RELU, x, x)) return x;
    return fallback_to_cpu<ATEN_OP(relu_)>(x);
}

spyre_unary_op gelu_op(c10::string_view approximate) {
    return approximate == "tanh" ? SPYRE_UNARY_GELU_TANH : SPYRE_UNARY_GELU;
}

at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
    if (auto r = unary("aten::gelu", gelu_op(approximate), x)) return *r;
    return fallback_to_cpu<ATEN_OP(gelu)>(x, approximate);
}

at::Tensor& gelu_out(const at::Tensor& x, c10::string_view approximate, at::Tensor& out) {
    if (out.scalar_type() == x.scalar_type()) at::native::resize_output(out, x.sizes());
    if (unary_into("aten::gelu", gelu_op(approximate), x, out)) return out;
    return fallback_to_cpu<ATEN_OP2(gelu, out)>(x, approximate, out);
}

// The row program keeps fp32 counts: rows longer than 2^23 elements are composed of the card's
// two-stage max and sum (Reduce.cpp) and elementwise ops, in fp32: exp(x - max) / sum, or
// x - max - log(sum) (torch's CPU kernel computes the same; the sum's order differs).
constexpr int64_t kLongestSoftmaxRow = int64_t{1} << 23;

at::Tensor long_row_softmax(const at::Tensor& x, bool log) {
    const at::Tensor xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
    const at::Tensor z = xf - at::amax(xf, {-1}, true);
    at::Tensor r;
    if (log) {
        r = z - at::log(at::sum(at::exp(z), {-1}, true));
    } else {
        r = at::exp(z);
        r.div_(at::sum(r, {-1}, true));
    }
    return r.scalar_type() == x.scalar_type() ? r : r.to(x.scalar_type());
}

// Along the last dim in place; along another dim, that dim moved last by a dense copy on the
// card and the result moved back the same way (a 0-dim input is one row of one element).
std::optional<at::Tensor> softmax_on_card(const char* name, const at::Tensor& x, int64_t dim,
                                          bool half_to_float, bool log) {
    if (half_to_float || !is_float(x.scalar_type())) return std::nullopt;
    c10::DeviceGuard guard(x.device());
    if (x.dim() == 0) {
        auto r = softmax_on_card(name, x.reshape({1}), 0, false, log);
        return r ? std::optional(r->view(at::IntArrayRef{})) : std::nullopt;
    }
    const int64_t d = c10::maybe_wrap_dim(dim, x.dim());
    const bool last = d == x.dim() - 1;
    if (x.numel() == 0) return at::empty(x.sizes(), x.options());
    const auto dx = stick_dense(last ? x : x.movedim(d, -1), name);
    if (!dx) return std::nullopt;
    if (dx->size(-1) > kLongestSoftmaxRow) {
        const at::Tensor r = long_row_softmax(*dx, log);
        return last ? r : r.movedim(-1, d).contiguous();
    }
    at::Tensor out = at::empty(dx->sizes(), x.options());
    const spyre_tensor tx = op_tensor(*dx), to = op_tensor(out);
    if (!op_ran(name, spyre_op_softmax(op_stream(out), &tx, log ? 1 : 0, &to))) return std::nullopt;
    return last ? std::optional(out) : stick_dense(out.movedim(-1, d), name);
}

at::Tensor softmax(const at::Tensor& x, int64_t dim, bool half_to_float) {
    if (auto r = softmax_on_card("aten::_softmax", x, dim, half_to_float, false)) return *r;
    return fallback_to_cpu<ATEN_OP(_softmax)>(x, dim, half_to_float);
}

// x ** e for the exponents that are one op on the card: 2 (x * x), 0.5, -0.5 and -1 (the
// decomposed rms_norm of torch.compile squares), 1 (a copy: square's backward) and 0 (ones),
// and 3 in two; any other exponent of a float tensor is composed (pow_composed).
bool pow_into(const at::Tensor& x, const at::Scalar& e, const at::Tensor& out) {
    if (!e.isFloatingPoint() && !e.isIntegral(false)) return false;
    const double v = e.toDouble();
    if ((v == 1.0 || v == 0.0) && is_float(x.scalar_type()) &&
        out.scalar_type() == x.scalar_type() && out.sizes() == x.sizes()) {
        c10::DeviceGuard guard(x.device());
        if (v == 1.0)
            out.copy_(x);
        else
            out.fill_(1);  // 0 ** 0 = 1, as the CPU's
        return true;
    }
    if (v == 0.5) return unary_into("aten::pow", SPYRE_UNARY_SQRT, x, out);
    if (v == -0.5) return unary_into("aten::pow", SPYRE_UNARY_RSQRT, x, out);
    if (v == -1.0) return unary_into("aten::pow", SPYRE_UNARY_RECIPROCAL, x, out);
    if (v == 3.0 && is_float(x.scalar_type()) && out.scalar_type() == x.scalar_type() &&
        out.sizes() == x.sizes()) {
        // x * x * x as the CPU's kernel computes it (RMSNorm's backward cubes 1/rms)
        c10::DeviceGuard guard(x.device());
        if (x.numel() == 0) return true;
        const at::Tensor square = at::empty(x.sizes(), x.options().dtype(at::kFloat));
        return binary_into("aten::pow", SPYRE_BINARY_MUL, x, Operand{x, 0.0}, 1.0, square) &&
               binary_into("aten::pow", SPYRE_BINARY_MUL, square, Operand{x, 0.0}, 1.0, out);
    }
    if (!is_float(x.scalar_type()) || !is_float(out.scalar_type()) || out.sizes() != x.sizes())
        return false;
    if (v != 2.0) {  // any other exponent: squarings, or exp2(e log2 |x|) (BinaryMath.cpp)
        c10::DeviceGuard guard(x.device());
        out.copy_(pow_composed(x, v));
        return true;
    }
    if (out.scalar_type() != x.scalar_type()) return false;
    c10::DeviceGuard guard(x.device());
    if (x.numel() == 0) return true;
    const auto dx = stick_dense(x, "aten::pow");
    if (!dx) return false;
    const at::Tensor w = writable_output(out);
    const spyre_tensor tx = op_tensor(*dx), to = op_tensor(w);
    if (!op_ran("aten::pow",
                spyre_op_binary(op_stream(w), SPYRE_BINARY_MUL, &tx, &tx, 0.0, 1.0, &to)))
        return false;
    finish_output(out, w);
    return true;
}

// x ** e of an integer spyre tensor (not bool): for an integral e >= 0 exact and wrapping as
// the CPU's (products modulo 2^bits do not depend on their order) by repeated squaring in x's
// type; for a float e, x converted to the default float type and raised as a float tensor (the
// CPU's result type). Nothing for a negative integral e (the CPU's error) or other cases.
std::optional<at::Tensor> int_pow(const at::Tensor& x, const at::Scalar& e) {
    if (!x.is_privateuseone() || !is_int_dtype(x.scalar_type()) || x.scalar_type() == at::kBool ||
        x.dim() == 0)
        return std::nullopt;
    c10::DeviceGuard guard(x.device());
    if (e.isFloatingPoint())
        return at::pow(x.to(c10::typeMetaToScalarType(at::get_default_dtype())), e);
    if (!e.isIntegral(false) || e.toLong() < 0) return std::nullopt;
    at::Tensor result = at::ones_like(x, at::MemoryFormat::Contiguous), base = x;
    for (int64_t n = e.toLong(); n > 0; n >>= 1) {
        if (n & 1) result = result.mul(base);
        if (n > 1) base = base.mul(base);
    }
    return result;
}

at::Tensor pow_scalar(const at::Tensor& x, const at::Scalar& e) {
    if (is_float(x.scalar_type())) {
        c10::DeviceGuard guard(x.device());
        at::Tensor out = at::empty(x.sizes(), x.options());
        if (pow_into(x, e, out)) return out;
    }
    if (auto r = int_pow(x, e)) return *r;
    return fallback_to_cpu<ATEN_OP2(pow, Tensor_Scalar)>(x, e);
}

at::Tensor& pow_scalar_out(const at::Tensor& x, const at::Scalar& e, at::Tensor& out) {
    if (out.scalar_type() == x.scalar_type()) at::native::resize_output(out, x.sizes());
    if (pow_into(x, e, out)) return out;
    if (out.is_privateuseone() && !is_float(x.scalar_type()))
        if (auto r = int_pow(x, e); r && r->scalar_type() == out.scalar_type())
            return assign(out, *r);
    return fallback_to_cpu<ATEN_OP2(pow, Tensor_Scalar_out)>(x, e, out);
}

at::Tensor log_softmax(const at::Tensor& x, int64_t dim, bool half_to_float) {
    if (auto r = softmax_on_card("aten::_log_softmax", x, dim, half_to_float, true)) return *r;
    return fallback_to_cpu<ATEN_OP(_log_softmax)>(x, dim, half_to_float);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define SPYRE_REGISTER(name) \
    m.impl(#name, TORCH_FN(name)), m.impl(#name ".out", TORCH_FN(name##_out))
    SPYRE_REGISTER(silu);
    SPYRE_REGISTER(sigmoid);
    SPYRE_REGISTER(tanh);
    SPYRE_REGISTER(exp);
    SPYRE_REGISTER(log);
    SPYRE_REGISTER(neg);
    SPYRE_REGISTER(abs);
    SPYRE_REGISTER(sqrt);
    SPYRE_REGISTER(rsqrt);
    SPYRE_REGISTER(reciprocal);
    SPYRE_REGISTER(sin);
    SPYRE_REGISTER(cos);
    SPYRE_REGISTER(sign);
    SPYRE_REGISTER(sgn);
    SPYRE_REGISTER(erf);
    SPYRE_REGISTER(erfc);
    SPYRE_REGISTER(log1p);
    SPYRE_REGISTER(expm1);
    SPYRE_REGISTER(exp2);
    SPYRE_REGISTER(log2);
    SPYRE_REGISTER(log10);
    SPYRE_REGISTER(tan);
    SPYRE_REGISTER(asin);
    SPYRE_REGISTER(acos);
    SPYRE_REGISTER(atan);
    SPYRE_REGISTER(sinh);
    SPYRE_REGISTER(cosh);
    SPYRE_REGISTER(asinh);
    SPYRE_REGISTER(acosh);
    SPYRE_REGISTER(atanh);
    SPYRE_REGISTER(floor);
    SPYRE_REGISTER(ceil);
    SPYRE_REGISTER(trunc);
    SPYRE_REGISTER(round);
    m.impl("round.decimals", TORCH_FN(round_decimals));
    m.impl("round.decimals_out", TORCH_FN(round_decimals_out));
    SPYRE_REGISTER(gelu);
#undef SPYRE_REGISTER
    m.impl("pow.Tensor_Scalar", TORCH_FN(pow_scalar));
    m.impl("pow.Tensor_Scalar_out", TORCH_FN(pow_scalar_out));
    m.impl("relu", TORCH_FN(relu));
    m.impl("relu_", TORCH_FN(relu_));
    m.impl("_softmax", TORCH_FN(softmax));
    m.impl("_log_softmax", TORCH_FN(log_softmax));
}

}  // namespace torch_spyre::aten
