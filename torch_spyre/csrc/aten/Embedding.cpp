// Row gathers on the card (spyre_op_embedding): torch.nn.Embedding / F.embedding, int64 or
// int32 indices of any shape gathering rows of a dense [V, D] weight whose rows are whole
// 128-byte sticks (index_select and the embedding backward are in Indexing.cpp).
// An index outside [0, V) stops the launch (a device-side assert reported by the next
// synchronize, like CUDA's). Other weight layouts go through index_select's element gather.
// And embedding_renorm_ (max_norm) composed of device ops.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// out [..indices.., D] = weight [V, D] rows at indices; nothing if the library cannot take it.
std::optional<at::Tensor> gather_rows(const char* name, const at::Tensor& weight,
                                      const at::Tensor& indices) {
    const auto it = indices.scalar_type();
    if (weight.dim() != 2 || !indices.is_privateuseone() || (it != at::kLong && it != at::kInt) ||
        !op_dtype(weight.scalar_type()) || !is_stick_dense(weight))
        return std::nullopt;
    c10::DeviceGuard guard(weight.device());
    std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end());
    shape.push_back(weight.size(1));
    at::Tensor out = at::empty(shape, weight.options());
    if (out.numel() == 0) return out;
    const auto idx = stick_dense(indices, name);
    if (!idx) return std::nullopt;
    const spyre_tensor ti = op_tensor(*idx), tw = op_tensor(weight), to = op_tensor(out);
    if (!op_ran(name, spyre_op_embedding(op_stream(out), &ti, &tw, &to))) return std::nullopt;
    return out;
}

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, int64_t padding_idx,
                     bool scale_grad_by_freq, bool sparse) {
    if (auto out = gather_rows("aten::embedding", weight, indices)) return *out;
    // other weight layouts: the element gather of index_select
    if (weight.dim() == 2 && weight.is_privateuseone() && indices.is_privateuseone() &&
        (indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt)) {
        std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end());
        shape.push_back(weight.size(1));
        return at::index_select(weight, 0, indices.reshape({-1})).view(shape);
    }
    return fallback_to_cpu<ATEN_OP(embedding)>(weight, indices, padding_idx, scale_grad_by_freq,
                                               sparse);
}

// nn.Embedding(max_norm=...): the rows the indices name rescaled in place to max_norm / (norm +
// 1e-7) where their p-norm exceeds max_norm, as the CPU kernel (each row once: the unique
// indices on the card, then a gather, the norms, and an index_copy back).
at::Tensor& embedding_renorm(at::Tensor& self, const at::Tensor& indices, double max_norm,
                             double norm_type) {
    if (!self.is_privateuseone() || !indices.is_privateuseone() || self.dim() != 2 ||
        !is_float(self.scalar_type()) ||
        (indices.scalar_type() != at::kLong && indices.scalar_type() != at::kInt))
        return fallback_to_cpu<ATEN_OP(embedding_renorm_)>(self, indices, max_norm, norm_type);
    c10::DeviceGuard guard(self.device());
    if (indices.numel() == 0) return self;
    const at::Tensor rows_at = std::get<0>(at::_unique2(indices.reshape({-1}).to(at::kLong)));
    const at::Tensor rows = self.index_select(0, rows_at);
    const at::Tensor norms =
        at::linalg_vector_norm(rows.to(at::kFloat), norm_type, {1}, /*keepdim=*/true);
    const at::Tensor scale = at::where(
        norms.gt(max_norm), norms.add(1e-7).reciprocal().mul(max_norm), at::ones_like(norms));
    self.index_copy_(0, rows_at, rows.mul(scale).to(self.scalar_type()));
    return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("embedding", TORCH_FN(embedding));
    m.impl("embedding_renorm_", TORCH_FN(embedding_renorm));
}

}  // namespace torch_spyre::aten
