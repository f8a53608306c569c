// Arithmetic on the card: add, sub (with alpha), mul, div and rsub, for tensors and numbers,
// with torch's broadcasting and type promotion (fp32/fp16/bf16 results; mixed operand types
// are read as they are). Registering the out= kernels of these structured operators covers
// their functional and in-place forms (`x + y`, `x.mul_(2)`, `torch.div(x, y, out=z)`).
// Integer and bool results, rounding modes and CPU tensors with elements run on the CPU
// fallback.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Elementwise.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// out = self OP other on the card; false if a case the library does not take.
bool arithmetic(const char* name, spyre_binary_op op, const at::Tensor& self,
                const at::Tensor& other, double alpha, const at::Tensor& out) {
    if (!out.is_privateuseone()) return false;
    const auto a = as_operand(self), b = as_operand(other);
    if (!a || !b) return false;
    const at::ScalarType type = at::result_type(self, other);
    if (!is_float(type) || out.scalar_type() != type) return false;
    at::assert_no_internal_overlap(out);
    at::assert_no_partial_overlap(out, self);
    at::assert_no_partial_overlap(out, other);
    at::native::resize_output(out, at::infer_size(self.sizes(), other.sizes()));
    return binary_into(name, op, operand_tensor(*a, out), *b, alpha, out);
}

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
    if (arithmetic("aten::add", SPYRE_BINARY_ADD, self, other, alpha.toDouble(), out)) return out;
    return fallback_to_cpu<ATEN_OP2(add, out)>(self, other, alpha, out);
}

at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
    if (arithmetic("aten::sub", SPYRE_BINARY_SUB, self, other, alpha.toDouble(), out)) return out;
    return fallback_to_cpu<ATEN_OP2(sub, out)>(self, other, alpha, out);
}

at::Tensor& mul_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (arithmetic("aten::mul", SPYRE_BINARY_MUL, self, other, 1.0, out)) return out;
    return fallback_to_cpu<ATEN_OP2(mul, out)>(self, other, out);
}

at::Tensor& div_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (arithmetic("aten::div", SPYRE_BINARY_DIV, self, other, 1.0, out)) return out;
    return fallback_to_cpu<ATEN_OP2(div, out)>(self, other, out);
}

// other - alpha * self (`1 - x` reaches it); not structured, so a kernel of its own.
at::Tensor rsub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    const at::ScalarType type = at::result_type(self, other);
    if (is_float(type) && self.is_privateuseone()) {
        c10::DeviceGuard guard(self.device());
        at::Tensor out =
            at::empty(at::infer_size(self.sizes(), other.sizes()), self.options().dtype(type));
        if (arithmetic("aten::rsub", SPYRE_BINARY_SUB, other, self, alpha.toDouble(), out))
            return out;
    }
    return fallback_to_cpu<ATEN_OP2(rsub, Tensor)>(self, other, alpha);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("add.out", TORCH_FN(add_out));
    m.impl("sub.out", TORCH_FN(sub_out));
    m.impl("mul.out", TORCH_FN(mul_out));
    m.impl("div.out", TORCH_FN(div_out));
    m.impl("rsub.Tensor", TORCH_FN(rsub));
}

}  // namespace torch_spyre::aten
