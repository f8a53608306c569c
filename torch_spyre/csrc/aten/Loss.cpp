// Losses on the card, composed of the device's elementwise and reduction kernels in fp32:
// mse_loss and its backward (reductions none, mean, sum), the result rounded once to the input's
// type. Other types and mixed operands run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool same_float(const at::Tensor& a, const at::Tensor& b) {
    return a.is_privateuseone() && b.is_privateuseone() && a.device() == b.device() &&
           is_float(a.scalar_type()) && a.scalar_type() == b.scalar_type();
}

bool known_reduction(int64_t r) {
    return r == at::Reduction::None || r == at::Reduction::Mean || r == at::Reduction::Sum;
}

at::Tensor& mse_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                         at::Tensor& out) {
    if (same_float(self, target) && known_reduction(reduction) && out.is_privateuseone() &&
        out.scalar_type() == self.scalar_type()) {
        c10::DeviceGuard guard(self.device());
        const at::Tensor d = self.to(at::kFloat) - target.to(at::kFloat);
        at::Tensor r = d * d;
        if (reduction == at::Reduction::Mean)
            r = r.mean();
        else if (reduction == at::Reduction::Sum)
            r = r.sum();
        at::native::resize_output(out, r.sizes());
        out.copy_(r);
        return out;
    }
    return fallback_to_cpu<ATEN_OP2(mse_loss, out)>(self, target, reduction, out);
}

// d/dself = 2 (self - target) grad (/ numel for the mean); grad is 0-dim unless reduction none.
at::Tensor mse_loss_backward(const at::Tensor& grad, const at::Tensor& self,
                             const at::Tensor& target, int64_t reduction) {
    if (same_float(self, target) && grad.is_privateuseone() && is_float(grad.scalar_type()) &&
        known_reduction(reduction)) {
        c10::DeviceGuard guard(self.device());
        const double scale =
            reduction == at::Reduction::Mean && self.numel() > 0 ? 2.0 / double(self.numel()) : 2.0;
        const at::Tensor d = self.to(at::kFloat) - target.to(at::kFloat);
        return (d * grad.to(at::kFloat) * scale).to(self.scalar_type());
    }
    return fallback_to_cpu<ATEN_OP(mse_loss_backward)>(grad, self, target, reduction);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("mse_loss.out", TORCH_FN(mse_loss_out));
    m.impl("mse_loss_backward", TORCH_FN(mse_loss_backward));
}

}  // namespace torch_spyre::aten
