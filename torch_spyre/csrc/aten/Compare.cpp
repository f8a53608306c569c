// Comparisons and bounds on the card through spyre_op_binary: eq/ne/lt/le/gt/ge into bool
// (the library writes 1 / 0 bytes), maximum/minimum (NaN-propagating, as torch's), and
// clamp/clamp_min/clamp_max with number or tensor bounds (both bounds: one spyre_op_clamp pass;
// one bound: a MAX or a MIN). Operands are
// float spyre tensors or numbers, broadcast as in torch; a number is first rounded to the
// type torch compares in, so `x_fp16 == 0.1` is decided as on the CPU. Registering the out=
// kernels of these structured operators covers their functional and in-place forms. Integer
// and bool operands compare exactly on the card (IntOps.h); outputs of other dtypes run on the
// CPU fallback. Integer clamps run exactly on the card too.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Elementwise.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// v as the float type `t` holds it (the library reads numbers in fp32).
double rounded(at::ScalarType t, double v) {
    switch (t) {
        case at::kHalf:
            return static_cast<float>(c10::Half(static_cast<float>(v)));
        case at::kBFloat16:
            return static_cast<float>(c10::BFloat16(static_cast<float>(v)));
        default:
            return static_cast<float>(v);
    }
}

// The operand of a kernel argument, a number rounded to the computation's type `common`.
std::optional<Operand> operand_in(const at::Tensor& t, at::ScalarType common) {
    auto o = as_operand(t);
    if (o && o->is_number()) o->number = rounded(common, o->number);
    return o;
}

// out (bool) = self OP other.
bool compare(const char* name, spyre_binary_op op, const at::Tensor& self, const at::Tensor& other,
             const at::Tensor& out) {
    if (!out.is_privateuseone() || out.scalar_type() != at::kBool) return false;
    const at::ScalarType common = at::result_type(self, other);
    if (!is_float(common)) return false;
    const auto a = operand_in(self, common), b = operand_in(other, common);
    if (!a || !b) return false;
    at::assert_no_internal_overlap(out);
    at::assert_no_partial_overlap(out, self);
    at::assert_no_partial_overlap(out, other);
    at::native::resize_output(out, at::infer_size(self.sizes(), other.sizes()));
    return binary_into(name, op, operand_tensor(*a, out), *b, 1.0, out);
}

// A Scalar argument as torch types it: a wrapped number, so a 0-dim tensor compared with it
// keeps its own dtype (an unwrapped 0-dim double would promote a 0-dim float to double).
at::Tensor number(const at::Scalar& s) {
    at::Tensor t = at::scalar_tensor(s, at::kDouble);
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
}

// Integer clamp, exact: a MAX into out of the whole broadcast shape, then a MIN in place.
bool int_clamp(const char* name, const at::Tensor& self, const at::Tensor& lo, const at::Tensor& hi,
               const at::Tensor& out) {
    if (!hi.defined()) return int_binary_out(name, SPYRE_BINARY_MAX, self, lo, 1, out);
    if (!lo.defined()) return int_binary_out(name, SPYRE_BINARY_MIN, self, hi, 1, out);
    const auto shape = at::infer_size(at::infer_size(self.sizes(), lo.sizes()), hi.sizes());
    return int_binary_out(name, SPYRE_BINARY_MAX, self.expand(shape), lo, 1, out) &&
           int_binary_out(name, SPYRE_BINARY_MIN, out, hi, 1, out);
}

// out = min(max(self, lo), hi) with either bound absent; torch's clamp (hi wins when lo > hi).
bool clamp_on_card(const char* name, const at::Tensor& self, const at::Tensor& lo,
                   const at::Tensor& hi, const at::Tensor& out) {
    TORCH_CHECK(lo.defined() || hi.defined(),
                "torch.clamp: At least one of 'min' or 'max' must not be None");
    if (!out.is_privateuseone() || !self.is_privateuseone()) return false;
    at::ScalarType common = self.scalar_type();
    for (const at::Tensor& b : {lo, hi})
        if (b.defined()) common = at::promote_types(common, at::result_type(self, b));
    if (out.scalar_type() != common) return false;
    if (is_int_dtype(common) && common != at::kBool) return int_clamp(name, self, lo, hi, out);
    if (!is_float(common)) return false;
    std::optional<Operand> olo, ohi;
    if (lo.defined() && !(olo = operand_in(lo, common))) return false;
    if (hi.defined() && !(ohi = operand_in(hi, common))) return false;
    at::assert_no_internal_overlap(out);
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    for (const at::Tensor& b : {lo, hi})
        if (b.defined()) {
            at::assert_no_partial_overlap(out, b);
            shape = at::infer_size(shape, b.sizes());
        }
    at::assert_no_partial_overlap(out, self);
    at::native::resize_output(out, shape);
    if (olo && ohi) return clamp_into(name, self, *olo, *ohi, out);
    at::Tensor src = self;
    if (olo) {
        if (!binary_into(name, SPYRE_BINARY_MAX, self, *olo, 1.0, out)) return false;
        src = out;
    }
    return !ohi || binary_into(name, SPYRE_BINARY_MIN, src, *ohi, 1.0, out);
}

at::Tensor undefined_or(const std::optional<at::Scalar>& s) {
    return s ? wrapped_number(*s) : at::Tensor();
}

at::Tensor undefined_or(const std::optional<at::Tensor>& t) {
    return t && t->defined() ? *t : at::Tensor();
}

#define SPYRE_COMPARE(op, OP)                                                               \
    at::Tensor& op##_tensor_out(const at::Tensor& self, const at::Tensor& other,            \
                                at::Tensor& out) {                                          \
        if (int_binary_out("aten::" #op, SPYRE_BINARY_##OP, self, other, 1, out) ||         \
            compare("aten::" #op, SPYRE_BINARY_##OP, self, other, out))                     \
            return out;                                                                     \
        return fallback_to_cpu<ATEN_OP2(op, Tensor_out)>(self, other, out);                 \
    }                                                                                       \
    at::Tensor& op##_scalar_out(const at::Tensor& self, const at::Scalar& other,            \
                                at::Tensor& out) {                                          \
        if (int_binary_out("aten::" #op, SPYRE_BINARY_##OP, self, wrapped_number(other), 1, \
                           out) ||                                                          \
            compare("aten::" #op, SPYRE_BINARY_##OP, self, number(other), out))             \
            return out;                                                                     \
        return fallback_to_cpu<ATEN_OP2(op, Scalar_out)>(self, other, out);                 \
    }

SPYRE_COMPARE(eq, EQ)
SPYRE_COMPARE(ne, NE)
SPYRE_COMPARE(lt, LT)
SPYRE_COMPARE(le, LE)
SPYRE_COMPARE(gt, GT)
SPYRE_COMPARE(ge, GE)
#undef SPYRE_COMPARE

at::Tensor& maximum_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (int_binary_out("aten::maximum", SPYRE_BINARY_MAX, self, other, 1, out) ||
        binary_out("aten::maximum", SPYRE_BINARY_MAX, self, other, 1.0, out))
        return out;
    return fallback_to_cpu<ATEN_OP2(maximum, out)>(self, other, out);
}

at::Tensor& minimum_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (int_binary_out("aten::minimum", SPYRE_BINARY_MIN, self, other, 1, out) ||
        binary_out("aten::minimum", SPYRE_BINARY_MIN, self, other, 1.0, out))
        return out;
    return fallback_to_cpu<ATEN_OP2(minimum, out)>(self, other, out);
}

at::Tensor& clamp_out(const at::Tensor& self, const std::optional<at::Scalar>& lo,
                      const std::optional<at::Scalar>& hi, at::Tensor& out) {
    if (clamp_on_card("aten::clamp", self, undefined_or(lo), undefined_or(hi), out)) return out;
    return fallback_to_cpu<ATEN_OP2(clamp, out)>(self, lo, hi, out);
}

at::Tensor& clamp_tensor_out(const at::Tensor& self, const std::optional<at::Tensor>& lo,
                             const std::optional<at::Tensor>& hi, at::Tensor& out) {
    if (clamp_on_card("aten::clamp", self, undefined_or(lo), undefined_or(hi), out)) return out;
    return fallback_to_cpu<ATEN_OP2(clamp, Tensor_out)>(self, lo, hi, out);
}

at::Tensor& clamp_min_out(const at::Tensor& self, const at::Scalar& lo, at::Tensor& out) {
    if (clamp_on_card("aten::clamp_min", self, wrapped_number(lo), at::Tensor(), out)) return out;
    return fallback_to_cpu<ATEN_OP2(clamp_min, out)>(self, lo, out);
}

at::Tensor& clamp_min_tensor_out(const at::Tensor& self, const at::Tensor& lo, at::Tensor& out) {
    if (clamp_on_card("aten::clamp_min", self, lo, at::Tensor(), out)) return out;
    return fallback_to_cpu<ATEN_OP2(clamp_min, Tensor_out)>(self, lo, out);
}

at::Tensor& clamp_max_out(const at::Tensor& self, const at::Scalar& hi, at::Tensor& out) {
    if (clamp_on_card("aten::clamp_max", self, at::Tensor(), wrapped_number(hi), out)) return out;
    return fallback_to_cpu<ATEN_OP2(clamp_max, out)>(self, hi, out);
}

at::Tensor& clamp_max_tensor_out(const at::Tensor& self, const at::Tensor& hi, at::Tensor& out) {
    if (clamp_on_card("aten::clamp_max", self, at::Tensor(), hi, out)) return out;
    return fallback_to_cpu<ATEN_OP2(clamp_max, Tensor_out)>(self, hi, out);
}

// torch.equal: same size and every element equal (NaN differs from itself), one host read of
// the card's all(); different dtypes or devices take the CPU's error through the fallback.
bool equal(const at::Tensor& self, const at::Tensor& other) {
    if (!self.is_privateuseone() || self.device() != other.device() ||
        self.scalar_type() != other.scalar_type() || self.is_complex())
        return fallback_to_cpu<ATEN_OP(equal)>(self, other);
    if (!self.is_same_size(other)) return false;
    if (self.numel() == 0 || (self.is_same(other) && !is_float(self.scalar_type()))) return true;
    c10::DeviceGuard guard(self.device());
    return self.eq(other).all().item<bool>();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("equal", TORCH_FN(equal));
    m.impl("eq.Tensor_out", TORCH_FN(eq_tensor_out));
    m.impl("eq.Scalar_out", TORCH_FN(eq_scalar_out));
    m.impl("ne.Tensor_out", TORCH_FN(ne_tensor_out));
    m.impl("ne.Scalar_out", TORCH_FN(ne_scalar_out));
    m.impl("lt.Tensor_out", TORCH_FN(lt_tensor_out));
    m.impl("lt.Scalar_out", TORCH_FN(lt_scalar_out));
    m.impl("le.Tensor_out", TORCH_FN(le_tensor_out));
    m.impl("le.Scalar_out", TORCH_FN(le_scalar_out));
    m.impl("gt.Tensor_out", TORCH_FN(gt_tensor_out));
    m.impl("gt.Scalar_out", TORCH_FN(gt_scalar_out));
    m.impl("ge.Tensor_out", TORCH_FN(ge_tensor_out));
    m.impl("ge.Scalar_out", TORCH_FN(ge_scalar_out));
    m.impl("maximum.out", TORCH_FN(maximum_out));
    m.impl("minimum.out", TORCH_FN(minimum_out));
    m.impl("clamp.out", TORCH_FN(clamp_out));
    m.impl("clamp.Tensor_out", TORCH_FN(clamp_tensor_out));
    m.impl("clamp_min.out", TORCH_FN(clamp_min_out));
    m.impl("clamp_min.Tensor_out", TORCH_FN(clamp_min_tensor_out));
    m.impl("clamp_max.out", TORCH_FN(clamp_max_out));
    m.impl("clamp_max.Tensor_out", TORCH_FN(clamp_max_tensor_out));
}

}  // namespace torch_spyre::aten
