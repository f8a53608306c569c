// torch.nn.Embedding / F.embedding on the card (spyre_op_embedding): int64 or int32 indices
// of any shape gather rows of a dense [V, D] weight whose rows are whole 128-byte sticks. An
// index outside [0, V) stops the launch (a device-side assert reported by the next
// synchronize, like CUDA's). Other layouts run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, int64_t padding_idx,
                     bool scale_grad_by_freq, bool sparse) {
    const auto it = indices.scalar_type();
    if (weight.dim() == 2 && indices.is_privateuseone() && (it == at::kLong || it == at::kInt) &&
        op_dtype(weight.scalar_type()) && is_stick_dense(weight)) {
        c10::DeviceGuard guard(weight.device());
        std::vector<int64_t> shape(indices.sizes().begin(), indices.sizes().end());
        shape.push_back(weight.size(1));
        at::Tensor out = at::empty(shape, weight.options());
        if (out.numel() == 0) return out;
        const auto idx = stick_dense(indices, "aten::embedding");
        if (idx) {
            const spyre_tensor ti = op_tensor(*idx), tw = op_tensor(weight), to = op_tensor(out);
            if (op_ran("aten::embedding", spyre_op_embedding(op_stream(out), &ti, &tw, &to)))
                return out;
        }
    }
    return fallback_to_cpu<ATEN_OP(embedding)>(weight, indices, padding_idx, scale_grad_by_freq,
                                               sparse);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("embedding", TORCH_FN(embedding)); }

}  // namespace torch_spyre::aten
