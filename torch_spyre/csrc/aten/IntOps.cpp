// Integer elementwise kernels (IntOps.h) and the operators that only integers have on the card:
// floor_divide, remainder, bitwise and/or/xor/not, shifts (neg and abs: Activation.cpp); the
// float forms of floor_divide and remainder are compositions (BinaryMath.cpp). gcd and lcm of
// int64/int32 are composed of those kernels (Euclid's algorithm, as the CPU's calc_gcd).
// Registering the out= kernels of structured operators covers their functional and in-place
// forms. Bool arithmetic is logical (+ is or, * is and), as torch computes it.
#include "IntOps.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Composed.h"
#include "Elementwise.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {

bool is_int_dtype(at::ScalarType t) {
    return t == at::kLong || t == at::kInt || t == at::kChar || t == at::kByte || t == at::kBool;
}

at::Tensor wrapped_number(const at::Scalar& s) {
    at::Tensor t = at::scalar_tensor(s, at::TensorOptions().dtype(s.type()));
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
}

namespace {

bool is_compare(spyre_binary_op op) { return op >= SPYRE_BINARY_EQ && op <= SPYRE_BINARY_GE; }

// v as torch converts it to the type t (wrapping; bool: nonzero).
int64_t wrap_to(at::ScalarType t, int64_t v) {
    switch (t) {
        case at::kInt:
            return static_cast<int32_t>(static_cast<uint32_t>(v));
        case at::kChar:
            return static_cast<int8_t>(static_cast<uint8_t>(v));
        case at::kByte:
            return static_cast<uint8_t>(v);
        case at::kBool:
            return v != 0;
        default:
            return v;
    }
}

// The op on bools, whose arithmetic is logical; nothing where torch refuses or the card would
// leave 0/1 (sub, shifts, division).
std::optional<spyre_binary_op> bool_op(spyre_binary_op op, int64_t alpha) {
    switch (op) {
        case SPYRE_BINARY_ADD:
            return alpha == 1 ? std::optional(SPYRE_BINARY_BITWISE_OR) : std::nullopt;
        case SPYRE_BINARY_MUL:
            return SPYRE_BINARY_BITWISE_AND;
        case SPYRE_BINARY_MAX:
        case SPYRE_BINARY_BITWISE_OR:
            return SPYRE_BINARY_BITWISE_OR;
        case SPYRE_BINARY_MIN:
        case SPYRE_BINARY_BITWISE_AND:
            return SPYRE_BINARY_BITWISE_AND;
        case SPYRE_BINARY_BITWISE_XOR:
            return op;
        default:
            return is_compare(op) ? std::optional(op) : std::nullopt;
    }
}

// The operation with its operands swapped (a OP b == b OP' a), if there is one.
std::optional<spyre_binary_op> swapped(spyre_binary_op op) {
    switch (op) {
        case SPYRE_BINARY_MUL:
        case SPYRE_BINARY_MAX:
        case SPYRE_BINARY_MIN:
        case SPYRE_BINARY_BITWISE_AND:
        case SPYRE_BINARY_BITWISE_OR:
        case SPYRE_BINARY_BITWISE_XOR:
        case SPYRE_BINARY_EQ:
        case SPYRE_BINARY_NE:
            return op;
        case SPYRE_BINARY_LT:
            return SPYRE_BINARY_GT;
        case SPYRE_BINARY_GT:
            return SPYRE_BINARY_LT;
        case SPYRE_BINARY_LE:
            return SPYRE_BINARY_GE;
        case SPYRE_BINARY_GE:
            return SPYRE_BINARY_LE;
        default:
            return std::nullopt;
    }
}

}  // namespace

bool int_binary_out(const char* name, spyre_binary_op op, const at::Tensor& self,
                    const at::Tensor& other, const at::Scalar& alpha, const at::Tensor& out) {
    // a number first (C++'s `t.mul_(2)` reaches mul.out as `2 * t`): the tensor first
    if (!self.is_privateuseone() && other.is_privateuseone() && self.dim() == 0) {
        if (const auto op2 = swapped(op))
            return int_binary_out(name, *op2, other, self, alpha, out);
        // n - alpha t (`1 - t`): -alpha t, then + n, in out
        if (op == SPYRE_BINARY_SUB && other.scalar_type() != at::kBool &&
            is_int_dtype(self.scalar_type()) && alpha.isIntegral(false))
            return int_binary_out(name, SPYRE_BINARY_MUL, other, wrapped_number(-alpha.toLong()), 1,
                                  out) &&
                   int_binary_out(name, SPYRE_BINARY_ADD, out, self, 1, out);
    }
    if (!out.is_privateuseone() || !self.is_privateuseone()) return false;
    const at::ScalarType common = at::result_type(self, other);
    if (!is_int_dtype(common) || out.scalar_type() != (is_compare(op) ? at::kBool : common))
        return false;
    if (alpha.isFloatingPoint() || alpha.isComplex()) return false;  // torch's error, on the CPU
    const int64_t k = alpha.toLong();
    spyre_binary_op f = op;
    if (common == at::kBool) {
        const auto b = bool_op(op, k);
        if (!b) return false;
        f = *b;
    }
    Operand b;
    int64_t number = 0;
    if (other.is_privateuseone()) {
        b.tensor = other;
    } else {
        if (other.dim() != 0 || !other.device().is_cpu() || !is_int_dtype(other.scalar_type()))
            return false;
        number = wrap_to(common, other.item<int64_t>());
        TORCH_CHECK(
            number != 0 || (op != SPYRE_BINARY_FLOOR_DIVIDE && op != SPYRE_BINARY_REMAINDER),
            "ZeroDivisionError");
    }
    at::assert_no_internal_overlap(out);
    at::assert_no_partial_overlap(out, self);
    at::assert_no_partial_overlap(out, other);
    at::native::resize_output(out, at::infer_size(self.sizes(), other.sizes()));
    c10::DeviceGuard guard(out.device());
    if (out.numel() == 0) return true;
    // operands promoted to the common type on the card (exact casts)
    const Operand a{self.scalar_type() == common ? self : self.to(common)};
    if (!b.is_number() && b.tensor.scalar_type() != common) b.tensor = b.tensor.to(common);
    return with_operands(name, out, {&a, &b}, [&](const auto& ts, const at::Tensor& w) {
        const spyre_tensor ta = op_tensor(*ts[0]), to = op_tensor(w);
        spyre_tensor tb{};
        if (ts[1]) tb = op_tensor(*ts[1]);
        return op_ran(
            name, spyre_op_binary_int(op_stream(w), f, &ta, ts[1] ? &tb : nullptr, number, k, &to));
    });
}

namespace {

// out = ~self on integers (bool's not is xor 1), out of self's type.
bool unary_out(const char* name, spyre_unary_op f, const at::Tensor& self, const at::Tensor& out) {
    if (!out.is_privateuseone() || !self.is_privateuseone() ||
        out.scalar_type() != self.scalar_type())
        return false;
    const at::ScalarType t = self.scalar_type();
    if (t == at::kBool)
        return int_binary_out(name, SPYRE_BINARY_BITWISE_XOR, self, wrapped_number(true), 1, out);
    if (!is_int_dtype(t)) return false;
    at::assert_no_internal_overlap(out);
    at::assert_no_partial_overlap(out, self);
    at::native::resize_output(out, self.sizes());
    c10::DeviceGuard guard(out.device());
    if (out.numel() == 0) return true;
    const Operand a{self};
    return with_operands(name, out, {&a}, [&](const auto& ts, const at::Tensor& w) {
        const spyre_tensor ta = op_tensor(*ts[0]), to = op_tensor(w);
        return op_ran(name, spyre_op_unary(op_stream(w), f, &ta, &to));
    });
}

#define SPYRE_INT_BINARY(fn, OP, aten_name, fallback_op)                               \
    at::Tensor& fn(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) { \
        if (int_binary_out(aten_name, SPYRE_BINARY_##OP, self, other, 1, out) ||       \
            float_binary_composed(SPYRE_BINARY_##OP, self, other, out))                \
            return out;                                                                \
        return fallback_to_cpu<fallback_op>(self, other, out);                         \
    }

SPYRE_INT_BINARY(remainder_out, REMAINDER, "aten::remainder", ATEN_OP2(remainder, Tensor_out))
SPYRE_INT_BINARY(and_out, BITWISE_AND, "aten::bitwise_and", ATEN_OP2(bitwise_and, Tensor_out))
SPYRE_INT_BINARY(or_out, BITWISE_OR, "aten::bitwise_or", ATEN_OP2(bitwise_or, Tensor_out))
SPYRE_INT_BINARY(xor_out, BITWISE_XOR, "aten::bitwise_xor", ATEN_OP2(bitwise_xor, Tensor_out))
SPYRE_INT_BINARY(lshift_out, LSHIFT, "aten::bitwise_left_shift",
                 ATEN_OP2(bitwise_left_shift, Tensor_out))
SPYRE_INT_BINARY(rshift_out, RSHIFT, "aten::bitwise_right_shift",
                 ATEN_OP2(bitwise_right_shift, Tensor_out))
SPYRE_INT_BINARY(floor_divide_out, FLOOR_DIVIDE, "aten::floor_divide", ATEN_OP2(floor_divide, out))
#undef SPYRE_INT_BINARY

// floor_divide and the shift operators are not structured: functional and in-place forms.
at::Tensor floor_divide(const at::Tensor& self, const at::Tensor& other) {
    at::Tensor out = at::empty({0}, self.options().dtype(at::result_type(self, other)));
    if (int_binary_out("aten::floor_divide", SPYRE_BINARY_FLOOR_DIVIDE, self, other, 1, out) ||
        float_binary_composed(SPYRE_BINARY_FLOOR_DIVIDE, self, other, out))
        return out;
    return fallback_to_cpu<ATEN_OP(floor_divide)>(self, other);
}

at::Tensor& floor_divide_(at::Tensor& self, const at::Tensor& other) {
    if (at::result_type(self, other) == self.scalar_type() &&
        (int_binary_out("aten::floor_divide_", SPYRE_BINARY_FLOOR_DIVIDE, self, other, 1, self) ||
         float_binary_composed(SPYRE_BINARY_FLOOR_DIVIDE, self, other, self)))
        return self;
    return fallback_to_cpu<ATEN_OP2(floor_divide_, Tensor)>(self, other);
}

at::Tensor shift(const char* name, spyre_binary_op op, const at::Tensor& self,
                 const at::Tensor& other, bool& ok) {
    at::Tensor out = at::empty({0}, self.options().dtype(at::result_type(self, other)));
    ok = int_binary_out(name, op, self, other, 1, out);
    return out;
}

at::Tensor lshift_tensor(const at::Tensor& self, const at::Tensor& other) {
    bool ok = false;
    at::Tensor r = shift("aten::__lshift__", SPYRE_BINARY_LSHIFT, self, other, ok);
    return ok ? r : fallback_to_cpu<ATEN_OP2(__lshift__, Tensor)>(self, other);
}
at::Tensor lshift_scalar(const at::Tensor& self, const at::Scalar& other) {
    bool ok = false;
    at::Tensor r = shift("aten::__lshift__", SPYRE_BINARY_LSHIFT, self, wrapped_number(other), ok);
    return ok ? r : fallback_to_cpu<ATEN_OP2(__lshift__, Scalar)>(self, other);
}
at::Tensor rshift_tensor(const at::Tensor& self, const at::Tensor& other) {
    bool ok = false;
    at::Tensor r = shift("aten::__rshift__", SPYRE_BINARY_RSHIFT, self, other, ok);
    return ok ? r : fallback_to_cpu<ATEN_OP2(__rshift__, Tensor)>(self, other);
}
at::Tensor rshift_scalar(const at::Tensor& self, const at::Scalar& other) {
    bool ok = false;
    at::Tensor r = shift("aten::__rshift__", SPYRE_BINARY_RSHIFT, self, wrapped_number(other), ok);
    return ok ? r : fallback_to_cpu<ATEN_OP2(__rshift__, Scalar)>(self, other);
}

at::Tensor& not_out(const at::Tensor& self, at::Tensor& out) {
    if (unary_out("aten::bitwise_not", SPYRE_UNARY_BITWISE_NOT, self, out)) return out;
    return fallback_to_cpu<ATEN_OP2(bitwise_not, out)>(self, out);
}

// gcd and lcm of int32/int64 tensors on one card (a 0-dim operand in host memory too: a number)
bool gcd_on_card(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
    const at::ScalarType t = at::result_type(a, b);
    const auto card_or_number = [](const at::Tensor& x) {
        return x.is_privateuseone() || (x.device().is_cpu() && x.dim() == 0);
    };
    return (t == at::kLong || t == at::kInt) && out.is_privateuseone() &&
           (a.is_privateuseone() || b.is_privateuseone()) && card_or_number(a) && card_or_number(b);
}

// a % b as C computes it (the sign of the dividend; torch's remainder takes the divisor's):
// the two differ only for the operands abs() leaves negative (the type's minimum)
at::Tensor c_mod(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor r = at::remainder(a, b);
    return at::where((r != 0).logical_and((r < 0) != (a < 0)), r - b, r);
}

// The CPU's calc_gcd on every element: a = |a|, b = |b|; while a != 0: (a, b) = (b % a, a).
// Elements whose a reached 0 keep their b; the loop ends when all have (about 1.44 log2 of the
// larger operand steps: at most 46 for int32, 92 for int64), each step one host read.
at::Tensor gcd_of(const at::Tensor& self, const at::Tensor& other, at::ScalarType t) {
    const at::Device card = self.is_privateuseone() ? self.device() : other.device();
    c10::DeviceGuard guard(card);
    const auto operand = [&](const at::Tensor& x) { return at::abs(x.to(card, t)); };
    const std::vector<int64_t> shape = at::infer_size(self.sizes(), other.sizes());
    at::Tensor a = operand(self).expand(shape).contiguous();
    at::Tensor b = operand(other).expand(shape).contiguous();
    if (a.numel() == 0) return b;
    for (;;) {
        const at::Tensor live = a != 0;
        if (!live.any().item<bool>()) break;
        const at::Tensor next = at::where(live, c_mod(b, at::where(live, a, 1)), a);
        b = at::where(live, a, b);
        a = next;
    }
    return b;
}

at::Tensor& gcd_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (!gcd_on_card(self, other, out))
        return fallback_to_cpu<ATEN_OP2(gcd, out)>(self, other, out);
    return assign(out, gcd_of(self, other, at::result_type(self, other)));
}

// the CPU's lcm: g == 0 ? 0 : |a / g * b| (a / g exact; the product wraps as in C)
at::Tensor& lcm_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (!gcd_on_card(self, other, out))
        return fallback_to_cpu<ATEN_OP2(lcm, out)>(self, other, out);
    const at::ScalarType t = at::result_type(self, other);
    const at::Tensor g = gcd_of(self, other, t);
    c10::DeviceGuard guard(g.device());
    const at::Tensor a = self.to(g.device(), t), b = other.to(g.device(), t);
    const at::Tensor r = at::abs(at::floor_divide(a, at::where(g == 0, 1, g)) * b);
    return assign(out, at::where(g == 0, 0, r));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("remainder.Tensor_out", TORCH_FN(remainder_out));
    m.impl("bitwise_and.Tensor_out", TORCH_FN(and_out));
    m.impl("bitwise_or.Tensor_out", TORCH_FN(or_out));
    m.impl("bitwise_xor.Tensor_out", TORCH_FN(xor_out));
    m.impl("bitwise_left_shift.Tensor_out", TORCH_FN(lshift_out));
    m.impl("bitwise_right_shift.Tensor_out", TORCH_FN(rshift_out));
    m.impl("floor_divide", TORCH_FN(floor_divide));
    m.impl("floor_divide.out", TORCH_FN(floor_divide_out));
    m.impl("floor_divide_.Tensor", TORCH_FN(floor_divide_));
    m.impl("__lshift__.Tensor", TORCH_FN(lshift_tensor));
    m.impl("__lshift__.Scalar", TORCH_FN(lshift_scalar));
    m.impl("__rshift__.Tensor", TORCH_FN(rshift_tensor));
    m.impl("__rshift__.Scalar", TORCH_FN(rshift_scalar));
    m.impl("bitwise_not.out", TORCH_FN(not_out));
    m.impl("gcd.out", TORCH_FN(gcd_out));
    m.impl("lcm.out", TORCH_FN(lcm_out));
}

}  // namespace torch_spyre::aten
