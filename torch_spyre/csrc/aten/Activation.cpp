// Activations and softmax on the card through libspyre's op library: relu, gelu (exact and
// tanh), silu, sigmoid, tanh, exp, _softmax and _log_softmax along the last dim. Other dtypes,
// dims and layouts run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool float_dense(const at::Tensor& t) {
    const auto s = t.scalar_type();
    return (s == at::kFloat || s == at::kHalf || s == at::kBFloat16) && t.is_contiguous();
}

// out = f(x) on the card, or nothing if the library refused.
std::optional<at::Tensor> unary(spyre_unary_op op, const at::Tensor& x) {
    if (!float_dense(x)) return std::nullopt;
    c10::DeviceGuard guard(x.device());
    at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
    if (x.numel() == 0) return out;
    const spyre_tensor tx = op_tensor(x), to = op_tensor(out);
    if (!op_ran(spyre_op_unary(op_stream(out), op, &tx, &to))) return std::nullopt;
    return out;
}

#define SPYRE_UNARY(name, op)                     \
    at::Tensor name(const at::Tensor& x) {        \
        if (auto r = unary(op, x)) return *r;     \
        return fallback_to_cpu<ATEN_OP(name)>(x); \
    }
SPYRE_UNARY(relu, SPYRE_UNARY_RELU)
SPYRE_UNARY(silu, SPYRE_UNARY_SILU)
SPYRE_UNARY(sigmoid, SPYRE_UNARY_SIGMOID)
SPYRE_UNARY(tanh, SPYRE_UNARY_TANH)
SPYRE_UNARY(exp, SPYRE_UNARY_EXP)
#undef SPYRE_UNARY

at::Tensor gelu(const at::Tensor& x, c10::string_view approximate) {
    const spyre_unary_op op = approximate == "tanh" ? SPYRE_UNARY_GELU_TANH : SPYRE_UNARY_GELU;
    if (auto r = unary(op, x)) return *r;
    return fallback_to_cpu<ATEN_OP(gelu)>(x, approximate);
}

std::optional<at::Tensor> softmax_on_card(const at::Tensor& x, int64_t dim, bool half_to_float,
                                          bool log) {
    if (half_to_float || !float_dense(x) || x.dim() == 0) return std::nullopt;
    if (c10::maybe_wrap_dim(dim, x.dim()) != x.dim() - 1) return std::nullopt;
    c10::DeviceGuard guard(x.device());
    at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
    if (x.numel() == 0) return out;
    const spyre_tensor tx = op_tensor(x), to = op_tensor(out);
    if (!op_ran(spyre_op_softmax(op_stream(out), &tx, log ? 1 : 0, &to))) return std::nullopt;
    return out;
}

at::Tensor softmax(const at::Tensor& x, int64_t dim, bool half_to_float) {
    if (auto r = softmax_on_card(x, dim, half_to_float, false)) return *r;
    return fallback_to_cpu<ATEN_OP(_softmax)>(x, dim, half_to_float);
}

at::Tensor log_softmax(const at::Tensor& x, int64_t dim, bool half_to_float) {
    if (auto r = softmax_on_card(x, dim, half_to_float, true)) return *r;
    return fallback_to_cpu<ATEN_OP(_log_softmax)>(x, dim, half_to_float);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("relu", TORCH_FN(relu));
    m.impl("silu", TORCH_FN(silu));
    m.impl("sigmoid", TORCH_FN(sigmoid));
    m.impl("tanh", TORCH_FN(tanh));
    m.impl("exp", TORCH_FN(exp));
    m.impl("gelu", TORCH_FN(gelu));
    m.impl("_softmax", TORCH_FN(softmax));
    m.impl("_log_softmax", TORCH_FN(log_softmax));
}

}  // namespace torch_spyre::aten
