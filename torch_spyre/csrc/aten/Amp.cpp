// Mixed-precision training's gradient scaler (torch.amp.GradScaler("spyre")) on the card: the
// unscale of every gradient with its check for inf/NaN, and the scale's update, composed of
// device ops with the CUDA kernels' semantics. Before, each step copied every gradient to the
// host and back through the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <vector>

#include "Fallback.h"

namespace torch_spyre::aten {
namespace {

bool on_card_float(const at::Tensor& t) {
    return t.defined() && t.is_privateuseone() &&
           (t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf ||
            t.scalar_type() == at::kBFloat16);
}

// For each gradient: found_inf = 1 if any of its values is inf or NaN (checked before the
// multiply, as CUDA's kernel checks the scaled value), then g *= inv_scale.
void unscale_(at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
    bool card = found_inf.numel() == 1 && inv_scale.numel() == 1 &&
                found_inf.scalar_type() == at::kFloat && inv_scale.scalar_type() == at::kFloat &&
                found_inf.is_privateuseone() && inv_scale.device() == found_inf.device();
    for (const at::Tensor& g : grads)
        card = card && on_card_float(g) && g.device() == found_inf.device() && !g.is_sparse();
    if (!card)
        return fallback_to_cpu<ATEN_OP(_amp_foreach_non_finite_check_and_unscale_)>(
            grads, found_inf, inv_scale);
    c10::DeviceGuard guard(found_inf.device());
    std::vector<at::Tensor> bad;  // per gradient: any value not finite (0-dim bool)
    bad.reserve(grads.size());
    for (const at::Tensor& g : grads) {
        if (g.numel() == 0) continue;
        bad.push_back(at::isfinite(g).logical_not_().any());
        const_cast<at::Tensor&>(g).mul_(inv_scale.reshape({}));
    }
    if (!bad.empty()) found_inf.masked_fill_(at::stack(bad).any().reshape(found_inf.sizes()), 1.0);
}

// The scale after a step: backed off (and the growth tracker reset) when found_inf, else the
// tracker counts the step and the scale grows once it reaches growth_interval, unless the grown
// scale is not finite in fp32 (then only the tracker is reset).
at::Tensor& update_scale_(at::Tensor& scale, at::Tensor& growth_tracker,
                          const at::Tensor& found_inf, double growth_factor, double backoff_factor,
                          int64_t growth_interval) {
    const bool card =
        scale.numel() == 1 && growth_tracker.numel() == 1 && found_inf.numel() == 1 &&
        scale.scalar_type() == at::kFloat && growth_tracker.scalar_type() == at::kInt &&
        found_inf.scalar_type() == at::kFloat && scale.is_privateuseone() &&
        growth_tracker.device() == scale.device() && found_inf.device() == scale.device();
    if (!card)
        return fallback_to_cpu<ATEN_OP(_amp_update_scale_)>(
            scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
    c10::DeviceGuard guard(scale.device());
    const at::Tensor inf = found_inf.reshape(scale.sizes()).ne(0);
    const at::Tensor successful = growth_tracker + 1;
    const at::Tensor grow =
        inf.logical_not().logical_and_(successful.eq(growth_interval).reshape(scale.sizes()));
    const at::Tensor grown = scale * growth_factor;
    const at::Tensor next =
        at::where(inf, scale * backoff_factor,
                  at::where(grow.logical_and(at::isfinite(grown)), grown, scale));
    const at::Tensor tracker = at::where(inf.logical_or(grow).reshape(growth_tracker.sizes()),
                                         at::zeros_like(growth_tracker), successful);
    scale.copy_(next);
    growth_tracker.copy_(tracker);
    return scale;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(unscale_));
    m.impl("_amp_update_scale_", TORCH_FN(update_scale_));
}

}  // namespace torch_spyre::aten
