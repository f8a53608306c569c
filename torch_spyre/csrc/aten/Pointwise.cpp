// The optimizers' pointwise steps on the card: addcmul, addcdiv (Adam's moment and update
// steps, SGD's momentum through add) and lerp with a number weight (Adam's first moment in the
// foreach path), as two elementwise passes with an fp32 intermediate, so 16-bit operands are
// rounded once more than in the CPU's one-expression kernel at most. Broadcasting and type
// promotion as for add; integer or complex operands, and lerp with a tensor weight, run on the
// CPU fallback.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>

#include "Elementwise.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// out = a + alpha * (t1 OP t2) for OP = MUL (addcmul) or DIV (addcdiv): t1 OP t2 into an fp32
// temporary of the broadcast shape, then the scaled add into out.
bool add_scaled_product(const char* name, spyre_binary_op op, const at::Tensor& a,
                        const at::Tensor& t1, const at::Tensor& t2, const at::Scalar& value,
                        at::Tensor& out) {
    const auto v = real_number(value);
    if (!v || !out.is_privateuseone()) return false;
    for (const at::Tensor* t : {&a, &t1, &t2})
        if (!t->is_privateuseone() || !is_float(t->scalar_type()) || t->device() != out.device())
            return false;
    const at::ScalarType type = c10::promoteTypes(at::result_type(a, t1), t2.scalar_type());
    if (out.scalar_type() != type) return false;
    at::assert_no_internal_overlap(out);
    for (const at::Tensor* t : {&a, &t1, &t2}) at::assert_no_partial_overlap(out, *t);
    const auto shape = at::infer_size(at::infer_size(a.sizes(), t1.sizes()), t2.sizes());
    c10::DeviceGuard guard(out.device());
    at::native::resize_output(out, shape);
    if (out.numel() == 0) return true;
    const at::Tensor tmp = at::empty(shape, out.options().dtype(at::kFloat));
    return binary_into(name, op, t1, Operand{t2, 0.0}, 1.0, tmp) &&
           binary_into(name, SPYRE_BINARY_ADD, a, Operand{tmp, 0.0}, *v, out);
}

at::Tensor& addcmul_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                        const at::Scalar& value, at::Tensor& out) {
    if (add_scaled_product("aten::addcmul", SPYRE_BINARY_MUL, self, t1, t2, value, out)) return out;
    return fallback_to_cpu<ATEN_OP2(addcmul, out)>(self, t1, t2, value, out);
}

at::Tensor& addcdiv_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                        const at::Scalar& value, at::Tensor& out) {
    if (add_scaled_product("aten::addcdiv", SPYRE_BINARY_DIV, self, t1, t2, value, out)) return out;
    return fallback_to_cpu<ATEN_OP2(addcdiv, out)>(self, t1, t2, value, out);
}

// torch's two-sided formula (exact at both ends): w < 0.5: self + w (end - self), else
// end - (1 - w) (end - self); the difference in fp32.
bool lerp_into(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight,
               at::Tensor& out) {
    const auto w = real_number(weight);
    if (!w || !out.is_privateuseone()) return false;
    for (const at::Tensor* t : {&self, &end})
        if (!t->is_privateuseone() || !is_float(t->scalar_type()) || t->device() != out.device())
            return false;
    if (self.scalar_type() != end.scalar_type() || out.scalar_type() != self.scalar_type())
        return false;
    at::assert_no_internal_overlap(out);
    at::assert_no_partial_overlap(out, self);
    at::assert_no_partial_overlap(out, end);
    const auto shape = at::infer_size(self.sizes(), end.sizes());
    c10::DeviceGuard guard(out.device());
    at::native::resize_output(out, shape);
    if (out.numel() == 0) return true;
    const char* name = "aten::lerp";
    const at::Tensor diff = at::empty(shape, out.options().dtype(at::kFloat));
    if (!binary_into(name, SPYRE_BINARY_SUB, end, Operand{self, 0.0}, 1.0, diff)) return false;
    if (std::abs(*w) < 0.5)
        return binary_into(name, SPYRE_BINARY_ADD, self, Operand{diff, 0.0}, *w, out);
    return binary_into(name, SPYRE_BINARY_SUB, end, Operand{diff, 0.0}, 1.0 - *w, out);
}

at::Tensor& lerp_scalar_out(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight,
                            at::Tensor& out) {
    if (lerp_into(self, end, weight, out)) return out;
    return fallback_to_cpu<ATEN_OP2(lerp, Scalar_out)>(self, end, weight, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("addcmul.out", TORCH_FN(addcmul_out));
    m.impl("addcdiv.out", TORCH_FN(addcdiv_out));
    m.impl("lerp.Scalar_out", TORCH_FN(lerp_scalar_out));
}

}  // namespace torch_spyre::aten
