// Arithmetic on the card: add, sub (with alpha), mul, div and rsub, for tensors and numbers,
// with torch's broadcasting and type promotion (fp32/fp16/bf16 results; mixed operand types
// are read as they are). Registering the out= kernels of these structured operators covers
// their functional and in-place forms (`x + y`, `x.mul_(2)`, `torch.div(x, y, out=z)`).
// Integer and bool results run exactly on the card (IntOps.h); rounding modes and CPU tensors
// with elements run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Elementwise.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
    if (int_binary_out("aten::add", SPYRE_BINARY_ADD, self, other, alpha, out)) return out;
    const auto a = real_number(alpha);
    if (a && binary_out("aten::add", SPYRE_BINARY_ADD, self, other, *a, out)) return out;
    return fallback_to_cpu<ATEN_OP2(add, out)>(self, other, alpha, out);
}

at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
    if (int_binary_out("aten::sub", SPYRE_BINARY_SUB, self, other, alpha, out)) return out;
    const auto a = real_number(alpha);
    if (a && binary_out("aten::sub", SPYRE_BINARY_SUB, self, other, *a, out)) return out;
    return fallback_to_cpu<ATEN_OP2(sub, out)>(self, other, alpha, out);
}

at::Tensor& mul_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (int_binary_out("aten::mul", SPYRE_BINARY_MUL, self, other, 1, out)) return out;
    if (binary_out("aten::mul", SPYRE_BINARY_MUL, self, other, 1.0, out)) return out;
    return fallback_to_cpu<ATEN_OP2(mul, out)>(self, other, out);
}

at::Tensor& div_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (binary_out("aten::div", SPYRE_BINARY_DIV, self, other, 1.0, out)) return out;
    // true division of integers (or bool): torch divides in the float output's type; the
    // dividend converted on the card first makes the result type that float
    if (self.is_privateuseone() && is_float(out.scalar_type()) &&
        at::isIntegralType(at::result_type(self, other), /*includeBool=*/true) &&
        binary_out("aten::div", SPYRE_BINARY_DIV, self.to(out.scalar_type()), other, 1.0, out))
        return out;
    return fallback_to_cpu<ATEN_OP2(div, out)>(self, other, out);
}

// other - alpha * self (`1 - x` reaches it); not structured, so a kernel of its own.
at::Tensor rsub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
    const at::ScalarType type = at::result_type(self, other);
    const auto a = real_number(alpha);
    if (is_float(type) && self.is_privateuseone() && a) {
        c10::DeviceGuard guard(self.device());
        at::Tensor out =
            at::empty(at::infer_size(self.sizes(), other.sizes()), self.options().dtype(type));
        if (binary_out("aten::rsub", SPYRE_BINARY_SUB, other, self, *a, out)) return out;
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
