// torch.nn.functional.scaled_dot_product_attention on the card (spyre_op_attention: flash
// attention, causal, grouped-query heads, strided KV caches read in place). torch 2.6 asks a
// PrivateUse1 backend which SDPA implementation to use (_fused_sdp_choice_stub): the
// "overrideable" fused op for the cases the library computes (no dropout, no gradient wanted,
// causal only for square attention, GQA when enable_gqa; an explicit mask, additive or
// boolean, [L, S] or 4-D broadcastable, through spyre_op_attention_masked), the math
// decomposition (other spyre ops) for the rest, and for masks the library refuses. The fused kernel
// returns only the attention output (no logsumexp: it is never the choice when autograd would need
// one).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>

#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool wants_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return at::GradMode::is_enabled() &&
           (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// The library's masks: [Lq, Lk] or 4-D, the key dim whole, the others 1 or whole.
bool mask_broadcasts(const at::Tensor& m, const std::array<c10::SymInt, 4>& want) {
    const int64_t n = m.dim();
    if (m.sym_size(n - 1) != want[3]) return false;
    for (int64_t i = 0; i < n - 1; ++i) {
        const c10::SymInt& w = want[4 - n + i];
        if (m.sym_size(i) != 1 && m.sym_size(i) != w) return false;
    }
    return true;
}

int64_t sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
    const auto math = static_cast<int64_t>(at::SDPBackend::math);
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || !is_float(q.scalar_type()) ||
        k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
        return math;
    if (dropout_p != 0.0 || (scale && *scale == 0.0) || wants_grad(q, k, v)) return math;
    if (mask && mask->defined() &&
        (mask->device() != q.device() || (mask->dim() != 2 && mask->dim() != 4) ||
         (mask->scalar_type() != at::kBool && !is_float(mask->scalar_type())) ||
         (mask->requires_grad() && at::GradMode::is_enabled()) ||
         !mask_broadcasts(*mask, {q.sym_size(0), q.sym_size(1), q.sym_size(2), k.sym_size(2)})))
        return math;
    // symbolic sizes under torch.compile (fake tensors): comparisons guard
    const c10::SymInt hq = q.sym_size(1), hkv = k.sym_size(1);
    if (k.sym_sizes() != v.sym_sizes() || k.sym_size(0) != q.sym_size(0) ||
        k.sym_size(3) != q.sym_size(3) || hkv == 0 || (hq != hkv && !(enable_gqa && hq % hkv == 0)))
        return math;
    if (q.sym_numel() == 0 || k.sym_numel() == 0 || (is_causal && q.sym_size(2) != k.sym_size(2)))
        return math;
    return static_cast<int64_t>(at::SDPBackend::overrideable);
}

using SdpaResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
                              c10::SymInt, at::Tensor, at::Tensor, at::Tensor>;

SdpaResult sdpa_overrideable(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& bias, double dropout_p,
                             bool is_causal, bool /*return_debug_mask*/,
                             std::optional<double> scale) {
    c10::DeviceGuard guard(q.device());
    const int64_t b = q.size(0), hq = q.size(1), lq = q.size(2), d = q.size(3);
    at::Tensor out;
    if (dropout_p == 0.0) {
        // [B, Lq, Hq, D] memory seen as [B, Hq, Lq, D]: the usual transpose back is a view
        out = at::empty({b, lq, hq, d}, q.options()).transpose(1, 2);
        const spyre_tensor tq = op_tensor(q), tk = op_tensor(k), tv = op_tensor(v),
                           to = op_tensor(out);
        const float s = scale ? static_cast<float>(*scale) : 0.0f;
        spyre_status st;
        if (bias && bias->defined()) {
            const spyre_tensor tm = op_tensor(*bias);
            st = spyre_op_attention_masked(op_stream(out), &tq, &tk, &tv, &tm, &to,
                                           is_causal ? 1 : 0, s);
        } else {
            st = spyre_op_attention(op_stream(out), &tq, &tk, &tv, &to, is_causal ? 1 : 0, s);
        }
        if (!op_ran("aten::scaled_dot_product_attention", st)) out = at::Tensor();
    }
    if (!out.defined())  // a layout the library does not take: the math decomposition
        out = std::get<0>(at::_scaled_dot_product_attention_math(
            q, k, v, bias, dropout_p, is_causal, std::nullopt, scale, hq != k.size(1)));
    const at::Tensor none = at::empty({0}, q.options());
    return {out, none, none, none, c10::SymInt(lq), c10::SymInt(k.size(2)), none, none, none};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_overrideable));
}

}  // namespace torch_spyre::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_spyre::aten::sdp_choice);
}
