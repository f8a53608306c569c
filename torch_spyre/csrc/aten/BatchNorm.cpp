// native_batch_norm on the card, composed of the device's reductions and elementwise kernels in
// fp32: in training the batch mean and biased variance over every dim but the channels (1), the
// running statistics updated in place with the unbiased variance, save_mean and save_invstd
// returned for the backward; in eval the running statistics. y = (x - mean) * invstd * weight +
// bias, rounded once to the input's type. The backward (native_batch_norm_backward and torch
// 2.6's batch_norm_backward) likewise in fp32. Types other than fp32/fp16/bf16, or statistics of
// another type than fp32 or the input's, run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

bool usable(const std::optional<at::Tensor>& t, const at::Tensor& input) {
    if (!t || !t->defined()) return true;
    return t->is_privateuseone() && t->device() == input.device() && t->dim() == 1 &&
           t->size(0) == input.size(1) &&
           (t->scalar_type() == at::kFloat || t->scalar_type() == input.scalar_type());
}

std::optional<Result> batch_norm_on_card(const at::Tensor& input,
                                         const std::optional<at::Tensor>& weight,
                                         const std::optional<at::Tensor>& bias,
                                         const std::optional<at::Tensor>& running_mean,
                                         const std::optional<at::Tensor>& running_var,
                                         bool training, double momentum, double eps) {
    if (!input.is_privateuseone() || !is_float(input.scalar_type()) || input.dim() < 2 ||
        !usable(weight, input) || !usable(bias, input) || !usable(running_mean, input) ||
        !usable(running_var, input))
        return std::nullopt;
    const bool has_running = running_mean && running_mean->defined();
    if (!training && (!has_running || !running_var || !running_var->defined())) return std::nullopt;
    const int64_t channels = input.size(1);
    const int64_t count = input.numel() / std::max<int64_t>(channels, 1);
    // count 1 in training (GroupNorm's one element per group): variance 0, as on the CPU
    // (F.batch_norm refuses it before reaching here; the running variance's 0 / 0 is NaN there too)
    if (input.numel() == 0) return std::nullopt;
    c10::DeviceGuard guard(input.device());
    std::vector<int64_t> dims{0}, per_channel(input.dim(), 1);
    for (int64_t i = 2; i < input.dim(); ++i) dims.push_back(i);
    per_channel[1] = channels;
    const at::Tensor x = input.to(at::kFloat);
    at::Tensor mean, invstd, save_mean, save_invstd;
    if (training) {
        mean = x.mean(dims);
        const at::Tensor centered = x - mean.view(per_channel);
        const at::Tensor var = (centered * centered).mean(dims);
        invstd = at::rsqrt(var + eps);
        save_mean = mean;
        save_invstd = invstd;
        if (has_running) {
            const at::Tensor unbiased = var * (double(count) / double(count - 1));
            running_mean->mul_(1.0 - momentum).add_(mean, momentum);
            if (running_var && running_var->defined())
                running_var->mul_(1.0 - momentum).add_(unbiased, momentum);
        }
    } else {
        mean = running_mean->to(at::kFloat);
        invstd = at::rsqrt(running_var->to(at::kFloat) + eps);
        // the CPU returns empty statistics in eval
        save_mean = at::empty({0}, input.options().dtype(at::kFloat));
        save_invstd = at::empty({0}, input.options().dtype(at::kFloat));
    }
    at::Tensor scale = invstd;
    if (weight && weight->defined()) scale = scale * weight->to(at::kFloat);
    at::Tensor y = (x - mean.view(per_channel)) * scale.view(per_channel);
    if (bias && bias->defined()) y = y + bias->to(at::kFloat).view(per_channel);
    // the saved statistics in fp32 when the parameters are (torch's mixed-type kernel), else in
    // the input's type, as the CPU returns them
    const auto fp32_param = [](const std::optional<at::Tensor>& t) {
        return t && t->defined() && t->scalar_type() == at::kFloat;
    };
    const at::ScalarType stat_type = fp32_param(weight) || fp32_param(bias) ||
                                             fp32_param(running_mean) || fp32_param(running_var)
                                         ? at::kFloat
                                         : input.scalar_type();
    return Result{y.to(input.scalar_type()), save_mean.to(stat_type), save_invstd.to(stat_type)};
}

Result native_batch_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                         const std::optional<at::Tensor>& bias,
                         const std::optional<at::Tensor>& running_mean,
                         const std::optional<at::Tensor>& running_var, bool training,
                         double momentum, double eps) {
    if (auto r = batch_norm_on_card(input, weight, bias, running_mean, running_var, training,
                                    momentum, eps))
        return *r;
    return fallback_to_cpu<ATEN_OP(native_batch_norm)>(input, weight, bias, running_mean,
                                                       running_var, training, momentum, eps);
}

// torch 2.6's training-mode entry point (nn.BatchNorm in training with running statistics):
// the same computation, and an empty reserve as the CPU's.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    double momentum, double eps) {
    if (auto r = batch_norm_on_card(input, weight, bias, running_mean, running_var, true, momentum,
                                    eps)) {
        auto [y, m, v] = *r;
        return {y, m, v, at::empty({0}, input.options().dtype(at::kByte))};
    }
    return fallback_to_cpu<ATEN_OP(_batch_norm_with_update)>(input, weight, bias, running_mean,
                                                             running_var, momentum, eps);
}

// The gradients, in fp32 with x_hat = (x - mean) * invstd and per-channel sums over N
// elements: grad_bias = sum(g), grad_weight = sum(g x_hat); grad_input = w invstd (g - sum(g) / N
// - x_hat sum(g x_hat) / N) in training (the batch statistics depend on x), w invstd g in eval.
std::optional<Result> batch_norm_backward_on_card(
    const at::Tensor& grad, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
    bool train, double eps, std::array<bool, 3> mask) {
    const auto defined = [](const std::optional<at::Tensor>& t) { return t && t->defined(); };
    if (!input.is_privateuseone() || !grad.is_privateuseone() || !is_float(input.scalar_type()) ||
        grad.scalar_type() != input.scalar_type() || grad.sizes() != input.sizes() ||
        input.dim() < 2 || input.numel() == 0 || !usable(weight, input))
        return std::nullopt;
    if (train ? !(defined(save_mean) && defined(save_invstd) && usable(save_mean, input) &&
                  usable(save_invstd, input))
              : !(defined(running_mean) && defined(running_var) && usable(running_mean, input) &&
                  usable(running_var, input)))
        return std::nullopt;
    c10::DeviceGuard guard(input.device());
    const int64_t channels = input.size(1);
    std::vector<int64_t> dims{0}, per_channel(input.dim(), 1);
    for (int64_t i = 2; i < input.dim(); ++i) dims.push_back(i);
    per_channel[1] = channels;
    const double n = static_cast<double>(input.numel() / channels);
    const at::Tensor x = input.to(at::kFloat), g = grad.to(at::kFloat);
    const at::Tensor mean = (train ? *save_mean : *running_mean).to(at::kFloat);
    const at::Tensor invstd =
        train ? save_invstd->to(at::kFloat) : at::rsqrt(running_var->to(at::kFloat) + eps);
    const at::Tensor xhat = (x - mean.view(per_channel)) * invstd.view(per_channel);
    const at::Tensor sum_g = g.sum(dims), sum_gx = (g * xhat).sum(dims);
    const at::ScalarType param_type = defined(weight) ? weight->scalar_type() : input.scalar_type();
    at::Tensor grad_input, grad_weight, grad_bias;
    if (mask[0]) {
        at::Tensor scale = invstd;
        if (defined(weight)) scale = scale * weight->to(at::kFloat);
        at::Tensor gi = g;
        if (train) gi = g - (sum_g / n).view(per_channel) - xhat * (sum_gx / n).view(per_channel);
        grad_input = (gi * scale.view(per_channel)).to(input.scalar_type());
    }
    if (mask[1]) grad_weight = sum_gx.to(param_type);
    if (mask[2]) grad_bias = sum_g.to(param_type);
    return Result{grad_input, grad_weight, grad_bias};
}

Result native_batch_norm_backward(const at::Tensor& grad, const at::Tensor& input,
                                  const std::optional<at::Tensor>& weight,
                                  const std::optional<at::Tensor>& running_mean,
                                  const std::optional<at::Tensor>& running_var,
                                  const std::optional<at::Tensor>& save_mean,
                                  const std::optional<at::Tensor>& save_invstd, bool train,
                                  double eps, std::array<bool, 3> mask) {
    if (auto r = batch_norm_backward_on_card(grad, input, weight, running_mean, running_var,
                                             save_mean, save_invstd, train, eps, mask))
        return *r;
    return fallback_to_cpu<ATEN_OP(native_batch_norm_backward)>(
        grad, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask);
}

// batch_norm_backward (the backward of _batch_norm_with_update and friends): `update` is
// training, save_var holds the saved invstd as in native_batch_norm_backward.
Result batch_norm_backward(const at::Tensor& grad, const at::Tensor& input,
                           const at::Tensor& weight, const std::optional<at::Tensor>& running_mean,
                           const std::optional<at::Tensor>& running_var,
                           const std::optional<at::Tensor>& save_mean,
                           const std::optional<at::Tensor>& save_var, bool update, double eps,
                           std::array<bool, 3> mask, const at::Tensor& reserve) {
    if (auto r = batch_norm_backward_on_card(grad, input, weight, running_mean, running_var,
                                             save_mean, save_var, update, eps, mask))
        return *r;
    return fallback_to_cpu<ATEN_OP(batch_norm_backward)>(grad, input, weight, running_mean,
                                                         running_var, save_mean, save_var, update,
                                                         eps, mask, reserve);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
    m.impl("_batch_norm_with_update", TORCH_FN(batch_norm_with_update));
    m.impl("native_batch_norm_backward", TORCH_FN(native_batch_norm_backward));
    m.impl("batch_norm_backward", TORCH_FN(batch_norm_backward));
}

}  // namespace torch_spyre::aten
