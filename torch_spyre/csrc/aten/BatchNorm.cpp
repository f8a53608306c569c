// native_batch_norm on the card, composed of the device's reductions and elementwise kernels in
// fp32: in training the batch mean and biased variance over every dim but the channels (1), the
// running statistics updated in place with the unbiased variance, save_mean and save_invstd
// returned for the backward; in eval the running statistics. y = (x - mean) * invstd * weight +
// bias, rounded once to the input's type. Types other than fp32/fp16/bf16, or statistics of
// another type than fp32 or the input's, run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
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
    if (training && count <= 1) return std::nullopt;  // the CPU raises its own error
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
    return Result{y.to(input.scalar_type()), save_mean, save_invstd};
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
}

}  // namespace torch_spyre::aten
