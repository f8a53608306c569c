// logical_not/and/or/xor on the card: each operand becomes a bool "is nonzero" (itself when it
// is bool) and the bool results combine with the card's bool ops (bitwise on bools is logical),
// then convert to the output's dtype on the card. nn.TransformerEncoder calls logical_not on
// every padding mask; masks and conditions combine with the others. Operands off the card
// (a CPU tensor that is not a 0-d number) take the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"

namespace torch_spyre::aten {
namespace {

// t != 0 (t itself for bool); a 0-d t as one element (the library's kernels take no 0-d).
at::Tensor truth(const at::Tensor& t) {
    if (t.scalar_type() == at::kBool) return t;
    return t.dim() ? t.ne(0) : t.view({1}).ne(0).squeeze(0);
}

// An operand the card can take: on out's card, or a 0-d CPU number (broadcast).
bool on_card(const at::Tensor& t, const at::Tensor& out) {
    return t.device() == out.device() || (t.is_cpu() && t.dim() == 0);
}

// out = r (bool, broadcast to out's shape) in out's dtype.
at::Tensor& write(const at::Tensor& r, at::Tensor& out) {
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

at::Tensor& logical_not_out(const at::Tensor& self, at::Tensor& out) {
    if (!out.is_privateuseone() || !on_card(self, out) || self.is_complex())
        return fallback_to_cpu<ATEN_OP2(logical_not, out)>(self, out);
    c10::DeviceGuard guard(out.device());
    return write(at::bitwise_not(truth(self)), out);
}

enum class Logic { And, Or, Xor };

// out = self OP other, either operand possibly a 0-d CPU number (decided on the host).
template <class Fallback>
at::Tensor& binary(Logic op, const at::Tensor& self, const at::Tensor& other, at::Tensor& out,
                   Fallback fallback) {
    if (!out.is_privateuseone() || !on_card(self, out) || !on_card(other, out) ||
        self.is_complex() || other.is_complex() || (self.is_cpu() && other.is_cpu()))
        return fallback();
    c10::DeviceGuard guard(out.device());
    if (self.is_cpu() || other.is_cpu()) {
        const bool v = (self.is_cpu() ? self : other).ne(0).item<bool>();
        const at::Tensor t = truth(self.is_cpu() ? other : self);
        switch (op) {
            case Logic::And:
                return write(v ? t : at::zeros_like(t), out);
            case Logic::Or:
                return write(v ? at::ones_like(t) : t, out);
            case Logic::Xor:
                return write(v ? at::bitwise_not(t) : t, out);
        }
    }
    const at::Tensor a = truth(self), b = truth(other);
    switch (op) {
        case Logic::And:
            return write(at::bitwise_and(a, b), out);
        case Logic::Or:
            return write(at::bitwise_or(a, b), out);
        case Logic::Xor:
            break;
    }
    return write(at::bitwise_xor(a, b), out);
}

at::Tensor& logical_and_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    return binary(Logic::And, self, other, out, [&]() -> at::Tensor& {
        return fallback_to_cpu<ATEN_OP2(logical_and, out)>(self, other, out);
    });
}

at::Tensor& logical_or_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    return binary(Logic::Or, self, other, out, [&]() -> at::Tensor& {
        return fallback_to_cpu<ATEN_OP2(logical_or, out)>(self, other, out);
    });
}

at::Tensor& logical_xor_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    return binary(Logic::Xor, self, other, out, [&]() -> at::Tensor& {
        return fallback_to_cpu<ATEN_OP2(logical_xor, out)>(self, other, out);
    });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("logical_not.out", TORCH_FN(logical_not_out));
    m.impl("logical_and.out", TORCH_FN(logical_and_out));
    m.impl("logical_or.out", TORCH_FN(logical_or_out));
    m.impl("logical_xor.out", TORCH_FN(logical_xor_out));
}

}  // namespace torch_spyre::aten
