// torch.where and masked_fill on the card (spyre_op_where): a spyre condition of any type
// the library reads (bool masks included), values that are spyre tensors of a float type or
// numbers, broadcasting as in torch. Integer values (int64, int32, int8, uint8) select by exact
// wrapping arithmetic, b + (a - b) * cond (the difference wraps and the sum wraps back), bool
// values by (cond & a) | (!cond & b), for a bool condition. Other cases run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>

#include "Elementwise.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// An operand of the integer select on cond's card: a spyre tensor or a 0-dim CPU number.
std::optional<at::Tensor> int_operand(const at::Tensor& t, const at::Tensor& cond,
                                      at::ScalarType type) {
    if (t.device() == cond.device()) return t.scalar_type() == type ? t : t.to(type);
    if (t.is_cpu() && t.dim() == 0 && !t.is_complex()) return t.to(cond.device(), type);
    return std::nullopt;
}

// cond ? self : other of an integer or bool result type; nothing if not taken.
std::optional<at::Tensor> int_where(const at::Tensor& cond, const at::Tensor& self,
                                    const at::Tensor& other, at::ScalarType type) {
    if (!cond.is_privateuseone() || cond.scalar_type() != at::kBool ||
        !(is_int_dtype(type) || type == at::kBool))
        return std::nullopt;
    c10::DeviceGuard guard(cond.device());
    const auto a = int_operand(self, cond, type), b = int_operand(other, cond, type);
    if (!a || !b) return std::nullopt;
    if (type == at::kBool)
        return at::bitwise_or(at::bitwise_and(cond, *a),
                              at::bitwise_and(at::bitwise_not(cond), *b));
    return *b + (*a - *b) * cond.to(type);
}

at::Tensor where(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
    const auto a = as_operand(self), b = as_operand(other);
    const at::ScalarType type = at::result_type(self, other);
    if (a && b && is_float(type) && cond.is_privateuseone()) {
        c10::DeviceGuard guard(cond.device());
        const auto shape =
            at::infer_size(at::infer_size(cond.sizes(), self.sizes()), other.sizes());
        at::Tensor out = at::empty(shape, cond.options().dtype(type));
        if (where_into("aten::where", cond, *a, *b, out)) return out;
    }
    if (auto r = int_where(cond, self, other, type)) {
        // the result's shape even where an operand broadcast away (a 0-dim cond and values)
        return r->expand(at::infer_size(at::infer_size(cond.sizes(), self.sizes()), other.sizes()))
            .contiguous();
    }
    return fallback_to_cpu<ATEN_OP2(where, self)>(cond, self, other);
}

// where(cond, self, other, out=): the _safe_softmax of torch's math attention calls it.
at::Tensor& where_out(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other,
                      at::Tensor& out) {
    const auto a = as_operand(self), b = as_operand(other);
    const at::ScalarType type = at::result_type(self, other);
    if (a && b && is_float(type) && cond.is_privateuseone() && out.is_privateuseone() &&
        out.scalar_type() == type) {
        c10::DeviceGuard guard(cond.device());
        at::native::resize_output(
            out, at::infer_size(at::infer_size(cond.sizes(), self.sizes()), other.sizes()));
        if (where_into("aten::where", cond, *a, *b, out)) return out;
    }
    if (out.is_privateuseone() && out.scalar_type() == type) {
        if (auto r = int_where(cond, self, other, type)) {
            at::native::resize_output(
                out, at::infer_size(at::infer_size(cond.sizes(), self.sizes()), other.sizes()));
            out.copy_(*r);
            return out;
        }
    }
    return fallback_to_cpu<ATEN_OP2(where, self_out)>(cond, self, other, out);
}

// self = mask ? value : self, mask broadcast to self's shape.
bool masked_fill_on_card(at::Tensor& self, const at::Tensor& mask, const Operand& value) {
    if (!is_float(self.scalar_type()) || mask.scalar_type() != at::kBool ||
        !mask.is_privateuseone() || at::infer_size(self.sizes(), mask.sizes()) != self.sizes())
        return false;
    return where_into("aten::masked_fill_", mask, value, Operand{self, 0.0}, self);
}

// self = mask ? value : self for an integer or bool self (value a 0-dim tensor).
bool int_masked_fill(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
    if (!self.is_privateuseone() || value.dim() != 0 ||
        at::infer_size(self.sizes(), mask.sizes()) != self.sizes())
        return false;
    const auto r = int_where(mask, value, self, self.scalar_type());
    if (!r) return false;
    self.copy_(*r);
    return true;
}

at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const at::Scalar& v) {
    const auto value = real_number(v);
    if (value && masked_fill_on_card(self, mask, Operand{at::Tensor(), *value})) return self;
    if (!is_float(self.scalar_type()) && !v.isComplex() &&
        int_masked_fill(self, mask,
                        at::scalar_tensor(v, at::TensorOptions().dtype(self.scalar_type()))))
        return self;
    return fallback_to_cpu<ATEN_OP2(masked_fill_, Scalar)>(self, mask, v);
}

at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& v) {
    const auto value = v.dim() == 0 ? as_operand(v) : std::nullopt;
    if (value && masked_fill_on_card(self, mask, *value)) return self;
    if (!is_float(self.scalar_type()) && !v.is_complex() && int_masked_fill(self, mask, v))
        return self;
    return fallback_to_cpu<ATEN_OP2(masked_fill_, Tensor)>(self, mask, v);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("where.self", TORCH_FN(where));
    m.impl("where.self_out", TORCH_FN(where_out));
    m.impl("masked_fill_.Scalar", TORCH_FN(masked_fill_scalar));
    m.impl("masked_fill_.Tensor", TORCH_FN(masked_fill_tensor));
}

}  // namespace torch_spyre::aten
