// Activations with a learned slope or a random one, composed of card ops (they were CPU
// fallbacks): PReLU's kernel and its backward (nn.PReLU, F.prelu: one slope or one per channel,
// broadcast by torch.prelu before the kernel), and RReLU (nn.RReLU, F.rrelu): in training each
// input <= 0 is scaled by a slope drawn uniformly from [lower, upper) with the card's generator,
// which `noise` keeps for the backward (1 for the others); in eval the mean slope, as
// leaky_relu. Formulas and branch conditions are the CPU kernels' (NaN takes the same branch);
// 16-bit inputs compute in fp32 and round once, as the CPU's do. The draws differ from the
// CPU's for a seed (another random stream, as on every device); the distribution is the same.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

using Gen = std::optional<at::Generator>;

// Float spyre tensors of one dtype, none of them 0-dim (the card's kernels take no 0-dim
// operand; torch.prelu of a number is the CPU's).
bool float_operands(std::initializer_list<at::Tensor> ts) {
    const at::ScalarType t = ts.begin()->scalar_type();
    for (const at::Tensor& x : ts)
        if (!x.is_privateuseone() || x.scalar_type() != t || x.dim() == 0) return false;
    return is_float(t);
}

at::Tensor prelu_kernel(const at::Tensor& self, const at::Tensor& weight) {
    if (!float_operands({self, weight}) || self.device() != weight.device())
        return fallback_to_cpu<ATEN_OP(_prelu_kernel)>(self, weight);
    c10::DeviceGuard guard(self.device());
    const at::Tensor x = widened(self);
    return at::where(x > 0, x, widened(weight) * x).to(self.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> prelu_kernel_backward(const at::Tensor& grad,
                                                         const at::Tensor& self,
                                                         const at::Tensor& weight) {
    if (!float_operands({self, weight, grad}) || self.device() != weight.device() ||
        grad.device() != self.device())
        return fallback_to_cpu<ATEN_OP(_prelu_kernel_backward)>(grad, self, weight);
    c10::DeviceGuard guard(self.device());
    const at::Tensor x = widened(self), g = widened(grad), positive = x > 0;
    const at::Tensor grad_input = at::where(positive, g, widened(weight) * g);
    const at::Tensor xg = x * g;
    // both of the broadcast shape, as the CPU's kernel writes them (autograd sums the weight's)
    return {grad_input.to(self.scalar_type()),
            at::where(positive, at::zeros_like(xg), xg).to(weight.scalar_type())};
}

// A generator the card draws from: none (the default spyre one) or a spyre generator.
bool card_generator(const Gen& gen) {
    return !gen.has_value() || !gen->defined() || gen->device().is_privateuseone();
}

// The CPU's RReLU draws from [lower, upper) after converting both to the input's type.
double in_type(const at::Scalar& s, at::ScalarType t) {
    return at::scalar_tensor(s, at::TensorOptions().dtype(t)).item<double>();
}

bool rrelu_on_card(const at::Tensor& self, const at::Tensor& noise, const Gen& gen,
                   const at::Tensor& out) {
    return float_operands({self}) && out.is_privateuseone() && card_generator(gen) &&
           noise.is_privateuseone() && noise.scalar_type() == self.scalar_type() &&
           noise.sizes() == self.sizes() && noise.device() == self.device();
}

// out = rrelu(self), `noise` written in training; out may be self (the in-place form).
void rrelu_into(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                const at::Scalar& upper, bool training, const Gen& gen, at::Tensor& out) {
    c10::DeviceGuard guard(self.device());
    if (!training) {
        // the mean slope, computed as the CPU computes it (double tensors, then a number)
        const double slope = (lower.toDouble() + upper.toDouble()) / 2;
        assign(out, at::leaky_relu(self, slope));
        return;
    }
    const at::ScalarType t = self.scalar_type();
    const at::Tensor x = widened(self), nonpositive = x <= 0;
    at::Tensor slope = at::empty(self.sizes(), x.options());
    slope.uniform_(in_type(lower, t), in_type(upper, t), gen);
    noise.copy_(at::where(nonpositive, slope, at::ones_like(slope)));
    assign(out, at::where(nonpositive, x * slope, x).to(t));
}

at::Tensor rrelu_with_noise(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                            const at::Scalar& upper, bool training, Gen gen) {
    if (!rrelu_on_card(self, noise, gen, self))
        return fallback_to_cpu<ATEN_OP(rrelu_with_noise)>(self, noise, lower, upper, training, gen);
    at::Tensor out = at::empty_like(self);
    rrelu_into(self, noise, lower, upper, training, gen, out);
    return out;
}

at::Tensor& rrelu_with_noise_out(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                                 const at::Scalar& upper, bool training, Gen gen, at::Tensor& out) {
    if (!rrelu_on_card(self, noise, gen, out))
        return fallback_to_cpu<ATEN_OP2(rrelu_with_noise, out)>(self, noise, lower, upper, training,
                                                                gen, out);
    rrelu_into(self, noise, lower, upper, training, gen, out);
    return out;
}

at::Tensor& rrelu_with_noise_(at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                              const at::Scalar& upper, bool training, Gen gen) {
    if (!rrelu_on_card(self, noise, gen, self))
        return fallback_to_cpu<ATEN_OP(rrelu_with_noise_)>(self, noise, lower, upper, training,
                                                           gen);
    rrelu_into(self, noise, lower, upper, training, gen, self);
    return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_prelu_kernel", TORCH_FN(prelu_kernel));
    m.impl("_prelu_kernel_backward", TORCH_FN(prelu_kernel_backward));
    m.impl("rrelu_with_noise", TORCH_FN(rrelu_with_noise));
    m.impl("rrelu_with_noise.out", TORCH_FN(rrelu_with_noise_out));
    m.impl("rrelu_with_noise_", TORCH_FN(rrelu_with_noise_));
}

}  // namespace torch_spyre::aten
