// torch.nn.functional.scaled_dot_product_attention on the card (spyre_op_attention: flash
// attention, causal, grouped-query heads, strided KV caches read in place). torch 2.6 asks a
// PrivateUse1 backend which SDPA implementation to use (_fused_sdp_choice_stub): the
// "overrideable" fused op for the cases the library computes (no dropout, causal only for
// square attention, GQA when enable_gqa; an explicit mask, additive or boolean, [L, S] or 4-D
// broadcastable, through spyre_op_attention_masked), the math decomposition (other spyre ops)
// for the rest, and for masks the library refuses. When autograd wants gradients of q, k or v the
// fused kernel also returns the logsumexp (spyre_op_attention_lse) and its backward
// (_scaled_dot_product_fused_attention_overrideable_backward) is the library's flash-style
// backward (spyre_op_attention_backward); a mask that wants a gradient keeps the math path.
// Shapes the library then refuses (head dims or lengths its plans cannot hold) take the math
// path's forward and backward on the card (math_attention_with_lse / _backward).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <limits>
#include <tuple>

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

// The cases the library's backward takes (spyre_op_attention_backward; the layouts of q, k, v
// and dO it refuses are made contiguous first): head rows of whole 128-byte sticks, and query
// blocks that start on a stick of the fp32 logsumexp, Lq a multiple of 32 or one block of all
// the group's rows small enough for the scratchpad (ops.md "Attention backward").
bool backward_fits(const at::Tensor& q, const at::Tensor& k) {
    const c10::SymInt d = q.sym_size(3), lq = q.sym_size(2), hq = q.sym_size(1);
    const c10::SymInt hkv = k.sym_size(1);
    if ((d * static_cast<int64_t>(q.element_size())) % 128 != 0) return false;
    return lq % 32 == 0 || (hkv != 0 && (hq / hkv) * lq <= 512);
}

int64_t sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
    const auto math = static_cast<int64_t>(at::SDPBackend::math);
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || !is_float(q.scalar_type()) ||
        k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
        return math;
    if (dropout_p != 0.0 || (scale && *scale == 0.0)) return math;
    if (wants_grad(q, k, v) && !backward_fits(q, k)) return math;
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

// The layout the op's meta kernel promises for outputs and gradients (torch_spyre/_dynamo.py
// `_register_sdpa_meta`): a [B, L, H, D] block seen as [B, H, L, D]. Compiled code indexes the
// result by those strides, so the math path's dense [B, H, L, D] results are copied into it.
at::Tensor blocks_like(const at::Tensor& t) {
    return at::empty({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
}

at::Tensor in_promised_layout(const at::Tensor& t) {
    const at::Tensor want = blocks_like(t);
    if (t.strides() == want.strides()) return t;
    return want.copy_(t);
}

using SdpaResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
                              c10::SymInt, at::Tensor, at::Tensor, at::Tensor>;

// A dense [B, Hq, Lq] fp32 logsumexp whose rows start on sticks (the library's layout): a
// [B, Hq, up(Lq, 32)] block seen as [B, Hq, Lq].
at::Tensor lse_like(const at::Tensor& q) {
    const int64_t lq = q.size(2), padded = (lq + 31) / 32 * 32;
    return at::empty({q.size(0), q.size(1), padded}, q.options().dtype(at::kFloat))
        .narrow(2, 0, lq);
}

// The forward with the logsumexp (autograd will call the backward below): q, k, v as they are,
// or made contiguous when the library refuses their layout. Undefined tensors if it refuses.
std::pair<at::Tensor, at::Tensor> attention_with_lse(const at::Tensor& q, const at::Tensor& k,
                                                     const at::Tensor& v,
                                                     const std::optional<at::Tensor>& bias,
                                                     bool is_causal, float s) {
    const int64_t b = q.size(0), hq = q.size(1), lq = q.size(2), d = q.size(3);
    for (int attempt = 0; attempt < 2; ++attempt) {
        const at::Tensor qq = attempt ? q.contiguous() : q, kk = attempt ? k.contiguous() : k,
                         vv = attempt ? v.contiguous() : v;
        at::Tensor out = at::empty({b, lq, hq, d}, q.options()).transpose(1, 2);
        at::Tensor lse = lse_like(q);
        const spyre_tensor tq = op_tensor(qq), tk = op_tensor(kk), tv = op_tensor(vv),
                           to = op_tensor(out), tl = op_tensor(lse);
        std::optional<spyre_tensor> tm;
        const at::Tensor mask =
            bias && bias->defined() ? (attempt ? bias->contiguous() : *bias) : at::Tensor();
        if (mask.defined()) tm = op_tensor(mask);
        const spyre_status st = spyre_op_attention_lse(
            op_stream(out), &tq, &tk, &tv, tm ? &*tm : nullptr, &to, &tl, is_causal ? 1 : 0, s);
        if (op_ran("aten::scaled_dot_product_attention", st)) return {out, lse};
    }
    return {};
}

// The math path on the card for what the library refuses once sdp_choice took the fused op
// (head dims or lengths its plans cannot hold): fp32 scores scale q k^T + mask, -inf where a
// boolean mask or causality hides a key; GQA by repeating the kv heads.
float scale_of(const at::Tensor& q, std::optional<double> scale) {
    return scale ? static_cast<float>(*scale) : 1.0f / std::sqrt(static_cast<float>(q.size(3)));
}

at::Tensor repeat_kv(const at::Tensor& t, int64_t heads) {
    return heads == t.size(1) ? t : t.repeat_interleave(heads / t.size(1), 1);
}

at::Tensor math_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& bias,
                       bool is_causal, float s) {
    const at::Tensor kk = repeat_kv(k, q.size(1)).to(at::kFloat);
    at::Tensor S = at::matmul(q.to(at::kFloat), kk.transpose(-2, -1)).mul_(s);
    const double ninf = -std::numeric_limits<double>::infinity();
    if (bias.defined())
        S = bias.scalar_type() == at::kBool ? S.masked_fill(bias.logical_not(), ninf)
                                            : S.add(bias.to(at::kFloat));
    if (is_causal) {  // query i sees keys j <= i + (Lk - Lq)
        const int64_t lq = q.size(2), lk = k.size(2);
        const auto ix = q.options().dtype(at::kLong);
        S = S.masked_fill(
            at::arange(lk, ix).unsqueeze(0) > at::arange(lq, ix).unsqueeze(1).add(lk - lq), ninf);
    }
    return S;
}

// The output and its fp32 logsumexp [B, Hq, Lq] by the math path.
std::pair<at::Tensor, at::Tensor> math_attention_with_lse(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& v,
                                                          const at::Tensor& bias, bool is_causal,
                                                          float s) {
    const at::Tensor S = math_scores(q, k, bias, is_causal, s);
    const at::Tensor lse = at::logsumexp(S, -1);
    const at::Tensor P = at::exp(S - lse.unsqueeze(-1));
    const at::Tensor out = at::matmul(P, repeat_kv(v, q.size(1)).to(at::kFloat));
    return {out.to(q.scalar_type()), lse};
}

// dQ, dK, dV by the math path from the logsumexp: P = exp(S - lse), dV = P^T dO,
// dS = P (dO V^T - rowsum(dO O)), dQ = s dS K, dK = s dS^T Q; GQA sums over each kv head's group.
std::tuple<at::Tensor, at::Tensor, at::Tensor> math_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& bias, const at::Tensor& out, const at::Tensor& lse, bool is_causal, float s) {
    const int64_t hq = q.size(1), hkv = k.size(1);
    const at::Tensor P = at::exp(math_scores(q, k, bias, is_causal, s) - lse.unsqueeze(-1));
    const at::Tensor dO = grad_out.to(at::kFloat);
    const at::Tensor delta = (dO * out.to(at::kFloat)).sum(-1, /*keepdim=*/true);
    const at::Tensor dP = at::matmul(dO, repeat_kv(v, hq).to(at::kFloat).transpose(-2, -1));
    const at::Tensor dS = P * (dP - delta);
    const at::Tensor dq = at::matmul(dS, repeat_kv(k, hq).to(at::kFloat)).mul_(s);
    auto per_kv_head = [&](const at::Tensor& g) {
        if (hq == hkv) return g;
        return g.view({g.size(0), hkv, hq / hkv, g.size(2), g.size(3)}).sum(2);
    };
    const at::Tensor dk = per_kv_head(at::matmul(dS.transpose(-2, -1), q.to(at::kFloat)).mul_(s));
    const at::Tensor dv = per_kv_head(at::matmul(P.transpose(-2, -1), dO));
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

SdpaResult sdpa_overrideable(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& bias, double dropout_p,
                             bool is_causal, bool /*return_debug_mask*/,
                             std::optional<double> scale) {
    c10::DeviceGuard guard(q.device());
    const int64_t b = q.size(0), hq = q.size(1), lq = q.size(2), d = q.size(3);
    at::Tensor out;
    const at::Tensor none = at::empty({0}, q.options());
    if (dropout_p == 0.0 && wants_grad(q, k, v)) {
        auto [o, lse] =
            attention_with_lse(q, k, v, bias, is_causal, scale ? static_cast<float>(*scale) : 0.0f);
        if (!o.defined()) {
            std::tie(o, lse) = math_attention_with_lse(q, k, v, bias ? *bias : at::Tensor(),
                                                       is_causal, scale_of(q, scale));
            o = in_promised_layout(o);
        }
        return {o, lse, none, none, c10::SymInt(lq), c10::SymInt(k.size(2)), none, none, none};
    }
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
    if (!out.defined()) {  // a layout the library does not take: the math decomposition
        // which adds its mask: a boolean one (the op's callers convert it, a direct call may
        // not) becomes 0 / -inf first
        std::optional<at::Tensor> additive = bias;
        if (bias && bias->defined() && bias->scalar_type() == at::kBool)
            additive =
                at::zeros(bias->sizes(), q.options())
                    .masked_fill(bias->logical_not(), -std::numeric_limits<double>::infinity());
        out = in_promised_layout(std::get<0>(at::_scaled_dot_product_attention_math(
            q, k, v, additive, dropout_p, is_causal, std::nullopt, scale, hq != k.size(1))));
    }
    return {out, none, none, none, c10::SymInt(lq), c10::SymInt(k.size(2)), none, none, none};
}

// dQ, dK, dV from the forward's output and logsumexp (spyre_op_attention_backward); the mask
// gets no gradient (sdp_choice keeps the math path for a mask that wants one).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal,
    const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
    std::optional<double> scale) {
    c10::DeviceGuard guard(q.device());
    TORCH_CHECK(dropout_p == 0.0, "spyre: the attention backward takes no dropout");
    TORCH_CHECK(!grad_input_mask[3],
                "spyre: the fused attention backward computes no gradient of the mask");
    // A forward that ran without gradients gives no logsumexp (a compiled training graph's
    // forward runs under no_grad and Inductor keeps the op's meta, which has none): recompute it.
    at::Tensor l = lse;
    if (!l.defined() || l.dim() != 3) {
        l = attention_with_lse(q, k, v, bias.defined() ? std::optional(bias) : std::nullopt,
                               is_causal, scale ? static_cast<float>(*scale) : 0.0f)
                .second;
        if (!l.defined())
            l = math_attention_with_lse(q, k, v, bias, is_causal, scale_of(q, scale)).second;
    }
    // gradients as [B, L, H, D] blocks seen as [B, H, L, D], like the forward's output
    at::Tensor dq = blocks_like(q), dk = blocks_like(k), dv = blocks_like(v);
    const float s = scale ? static_cast<float>(*scale) : 0.0f;
    for (int attempt = 0; attempt < 2; ++attempt) {
        auto lay = [&](const at::Tensor& t) { return attempt ? t.contiguous() : t; };
        const at::Tensor qq = lay(q), kk = lay(k), vv = lay(v), oo = lay(out), gg = lay(grad_out);
        const spyre_tensor tq = op_tensor(qq), tk = op_tensor(kk), tv = op_tensor(vv),
                           to = op_tensor(oo), tdo = op_tensor(gg), tl = op_tensor(l),
                           tdq = op_tensor(dq), tdk = op_tensor(dk), tdv = op_tensor(dv);
        std::optional<spyre_tensor> tm;
        const at::Tensor mask = bias.defined() ? lay(bias) : at::Tensor();
        if (mask.defined()) tm = op_tensor(mask);
        const spyre_status st =
            spyre_op_attention_backward(op_stream(dq), &tq, &tk, &tv, tm ? &*tm : nullptr, &to,
                                        &tdo, &tl, &tdq, &tdk, &tdv, is_causal ? 1 : 0, s);
        if (op_ran("aten::_scaled_dot_product_fused_attention_overrideable_backward", st))
            return {dq, dk, dv, at::Tensor()};
    }
    auto [mq, mk, mv] =
        math_attention_backward(grad_out, q, k, v, bias, out, l, is_causal, scale_of(q, scale));
    return {in_promised_layout(mq), in_promised_layout(mk), in_promised_layout(mv), at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_overrideable));
    m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
           TORCH_FN(sdpa_overrideable_backward));
}

}  // namespace torch_spyre::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_spyre::aten::sdp_choice);
}
