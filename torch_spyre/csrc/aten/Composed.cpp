#include "Composed.h"

#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>

#include "OpLibrary.h"

namespace torch_spyre::aten {

bool composable(std::initializer_list<at::Tensor> operands, at::ScalarType result) {
    if (!is_float(result)) return false;
    bool card = false;
    for (const at::Tensor& t : operands) {
        if (!t.defined()) continue;
        if (t.is_privateuseone()) {
            if (t.is_complex()) return false;
            card = true;
        } else if (t.device().is_cpu() && t.dim() == 0) {
            if (t.is_complex()) return false;
        } else {
            return false;
        }
    }
    return card;
}

at::Device card_of(std::initializer_list<at::Tensor> operands) {
    for (const at::Tensor& t : operands)
        if (t.defined() && t.is_privateuseone()) return t.device();
    TORCH_INTERNAL_ASSERT(false, "card_of: no spyre operand");
}

at::Tensor widened(const at::Tensor& t) {
    const at::ScalarType s = t.scalar_type();
    return s == at::kHalf || s == at::kBFloat16 || at::isIntegralType(s, /*includeBool=*/true)
               ? t.to(at::kFloat)
               : t;
}

at::Tensor card_operand(const at::Tensor& t, at::Device card) {
    if (!t.is_privateuseone()) return t.reshape({1}).to(card, at::kFloat);  // a number
    const at::Tensor w = widened(t);
    return w.dim() ? w : w.reshape({1});
}

at::Tensor& assign(at::Tensor& out, const at::Tensor& r) {
    TORCH_CHECK(at::canCast(r.scalar_type(), out.scalar_type()), "result type ", r.scalar_type(),
                " can't be cast to the desired output type ", out.scalar_type());
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

}  // namespace torch_spyre::aten
