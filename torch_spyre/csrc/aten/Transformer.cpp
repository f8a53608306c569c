// nn.TransformerEncoderLayer's and nn.MultiheadAttention's inference fast paths on the card:
// `_transformer_encoder_layer_fwd` and `_native_multi_head_attention`. PyTorch has only CPU and
// CUDA kernels for them (fused, not composite), so without these every eval-mode encoder layer
// went through the CPU fallback. Both are compositions of spyre ops in the order of PyTorch's
// reference (aten/src/ATen/native/transformers/{transformer,attention}.cpp, torch 2.6):
//
//   layer: [norm1] -> attention -> + src -> [norm1] -> [norm2] -> linear, gelu|relu, linear
//          -> + residual -> [norm2]        (the bracketed norms by norm_first: before or after)
//   attention: one qkv projection, per-head scores, a masked softmax, the output projection.
//
// The masked softmax follows torch's `_masked_softmax`: any nonzero mask element (a float mask
// too: -inf and 0 become True and False) removes that key, and a query whose keys are all
// removed gets NaN probabilities, as the CPU kernel gives them (a fully padded sequence comes
// out NaN; the card's kernels would keep it finite). The attention itself is
// scaled_dot_product_attention with a boolean mask (the fused card kernel where it applies), or,
// when the weights are wanted, explicit scores and softmax.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

namespace torch_spyre::aten {
namespace {

// The removed keys as a boolean mask broadcastable to the scores [B, H, L, S], by torch's
// mask types: 0 an [L, S] attention mask, 1 a [B, S] key padding mask, 2 (or any mask that is
// not 2-D) a mask of the scores' shape.
at::Tensor removed_keys(const at::Tensor& mask, std::optional<int64_t> mask_type,
                        at::IntArrayRef scores) {
    at::Tensor m = mask.scalar_type() == at::kBool ? mask : mask.ne(0);
    int64_t type = mask_type.value_or(2);
    if (m.dim() != 2) type = 2;
    const int64_t b = scores[0], l = scores[2], s = scores[3];
    if (type == 1) {
        TORCH_CHECK(m.size(0) == b && m.size(1) == s,
                    "For mask_type == 1 mask shape should be (B, L)");
        return m.view({b, 1, 1, s});
    }
    if (type == 0) {
        TORCH_CHECK(m.size(0) == l && m.size(1) == s,
                    "For mask_type == 0 mask shape should be (L, L)");
        return m;
    }
    TORCH_CHECK(type == 2, "_native_multi_head_attention: unknown mask_type ", type);
    TORCH_CHECK(m.sizes() == scores, "For mask_type == 2 mask shape should match input shape");
    return m;
}

std::tuple<at::Tensor, at::Tensor> native_multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim,
    int64_t num_head, const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
    const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    const std::optional<at::Tensor>& mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
    // the CPU kernel's argument checks, with its messages
    const int64_t D = embed_dim;
    TORCH_CHECK(query.dim() == 3, "expected 3-D `query`, got ", query.dim(), "-D tensor");
    TORCH_CHECK(query.size(2) == D, "passed-in embed_dim ", D, " didn't match last dim of query ",
                query.size(2));
    TORCH_CHECK(key.dim() == 3, "expected 3-D `key`, got ", key.dim(), "-D tensor");
    TORCH_CHECK(value.dim() == 3, "expected 3-D `value`, got ", value.dim(), "-D tensor");
    TORCH_CHECK(query.sizes() == key.sizes() && key.sizes() == value.sizes(),
                "expected `query`/`key`/`value` shapes to match");
    TORCH_CHECK(qkv_weight.dim() == 2, "expected 2-D `qkv_weight`, got ", qkv_weight.dim(),
                "-D tensor");
    TORCH_CHECK(D == qkv_weight.size(1), "expected `qkv_weight` second dim to be embed_Dim");
    TORCH_CHECK(qkv_weight.size(0) == 3 * D, "expected `qkv_weight` first dim to be 3x embed_dim");
    TORCH_CHECK(qkv_bias.dim() == 1, "expected 1-D `qkv_bias`, got ", qkv_bias.dim(), "-D tensor");
    TORCH_CHECK(qkv_bias.size(0) == 3 * D,
                "expected `qkv_bias` first dim and first dim of query "
                "to be equal");
    TORCH_CHECK(num_head > 0 && D % num_head == 0, "`embed_dim` must divide evenly by `num_heads`");
    c10::DeviceGuard guard(query.device());

    const int64_t B = query.size(0), T = query.size(1), dh = D / num_head;
    // [B, T, 3D]: one projection when q, k and v are one tensor (self-attention)
    at::Tensor q, k, v;
    if (query.is_same(key) && key.is_same(value)) {
        const at::Tensor qkv = at::linear(query, qkv_weight, qkv_bias);
        if (qkv.numel() == 0)  // as the CPU kernel: the (empty) projection itself
            return {qkv, need_weights ? qkv : at::Tensor()};
        const auto parts = qkv.chunk(3, -1);
        q = parts[0], k = parts[1], v = parts[2];
    } else {
        const auto w = qkv_weight.chunk(3, 0), bias = qkv_bias.chunk(3, 0);
        q = at::linear(query, w[0], bias[0]);
        k = at::linear(key, w[1], bias[1]);
        v = at::linear(value, w[2], bias[2]);
        if (q.numel() == 0) {
            const at::Tensor qkv = at::cat({q, k, v}, -1);
            return {qkv, need_weights ? qkv : at::Tensor()};
        }
    }
    // [B, H, T, dh] views of the projection
    auto heads = [&](const at::Tensor& t) { return t.view({B, T, num_head, dh}).transpose(1, 2); };
    q = heads(q), k = heads(k), v = heads(v);

    const std::array<int64_t, 4> scores{B, num_head, T, T};
    std::optional<at::Tensor> removed;
    if (mask && mask->defined()) removed = removed_keys(*mask, mask_type, scores);
    // queries that see no key: NaN probabilities, as the CPU's masked softmax gives them (the
    // card's attention kernel keeps such rows finite)
    std::optional<at::Tensor> blind;
    if (removed) blind = removed->all(-1, /*keepdim=*/true);
    auto nan_if_blind = [&](const at::Tensor& t) {
        return blind ? at::where(*blind, std::numeric_limits<double>::quiet_NaN(), t) : t;
    };

    at::Tensor ctx, weights;
    if (!need_weights) {
        std::optional<at::Tensor> attend;
        if (removed) attend = at::bitwise_not(*removed);
        ctx = at::scaled_dot_product_attention(q, k, v, attend);
    } else {
        const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
        at::Tensor s = at::matmul(q * scale, k.transpose(-2, -1));
        if (removed) s = s.masked_fill(*removed, -std::numeric_limits<double>::infinity());
        weights = nan_if_blind(at::softmax(s, -1));
        ctx = at::matmul(weights, v);
        if (average_attn_weights) weights = weights.sum(1) / num_head;
    }
    ctx = nan_if_blind(ctx);
    const at::Tensor out =
        at::linear(ctx.transpose(1, 2).reshape({B, T, D}), proj_weight, proj_bias);
    return {out, weights};
}

at::Tensor transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
    const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2,
    const at::Tensor& ffn_weight_1, const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
    const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
    std::optional<int64_t> mask_type) {
    if (src.numel() == 0) return src.clone();
    TORCH_CHECK(src.dim() == 3, "batched input size should be 3");
    TORCH_CHECK(ffn_weight_1.dim() == 2 && ffn_weight_2.dim() == 2, "2d weights expected");
    c10::DeviceGuard guard(src.device());
    auto norm = [&](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
        return at::layer_norm(x, {embed_dim}, w, b, eps);
    };

    at::Tensor x = norm_first ? norm(src, norm_weight_1, norm_bias_1) : src;
    x = std::get<0>(native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                                proj_weight, proj_bias, mask,
                                                /*need_weights=*/false,
                                                /*average_attn_weights=*/true, mask_type));
    x = x + src;
    if (!norm_first) x = norm(x, norm_weight_1, norm_bias_1);

    const at::Tensor residual = x;
    if (norm_first) x = norm(x, norm_weight_2, norm_bias_2);
    x = at::linear(x, ffn_weight_1, ffn_bias_1);
    x = use_gelu ? at::gelu(x) : at::relu(x);
    x = at::linear(x, ffn_weight_2, ffn_bias_2) + residual;
    if (!norm_first) x = norm(x, norm_weight_2, norm_bias_2);
    return x;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_native_multi_head_attention", TORCH_FN(native_multi_head_attention));
    m.impl("_transformer_encoder_layer_fwd", TORCH_FN(transformer_encoder_layer_fwd));
}

}  // namespace torch_spyre::aten
