// nll_loss forward and backward on the card (the tail of cross_entropy): the target
// log-probabilities are a gather along the class dim (spyre_op_gather), the gradient a scatter
// of -weight * grad into zeros (spyre_op_scatter); ignore_index, class weights and the
// none / sum / mean reductions are elementwise ops and reductions on the card. A target
// outside [0, C) other than ignore_index stops the launch (a device-side assert). Inputs other
// than [C] / [N, C] floats with int64 targets run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr int64_t kNone = 0, kMean = 1;

bool takes(const at::Tensor& self, const at::Tensor& target,
           const std::optional<at::Tensor>& weight) {
    return self.is_privateuseone() && is_float(self.scalar_type()) &&
           (self.dim() == 1 || self.dim() == 2) && target.is_privateuseone() &&
           target.scalar_type() == at::kLong && target.dim() == self.dim() - 1 &&
           (!weight || !weight->defined() ||
            (weight->is_privateuseone() && weight->scalar_type() == self.scalar_type()));
}

// Per sample: the class index with ignored targets replaced by 0, and its weight (0 when
// ignored), both [N].
struct Picks {
    at::Tensor index, weight;
};

Picks picks(const at::Tensor& self, const at::Tensor& target,
            const std::optional<at::Tensor>& weight, int64_t ignore_index) {
    const at::Tensor t = target.reshape({-1});
    const at::Tensor valid = t.ne(ignore_index);
    Picks p;
    p.index = t.mul(valid);
    p.weight = valid.to(self.scalar_type());
    if (weight && weight->defined()) p.weight = p.weight.mul(weight->index_select(0, p.index));
    return p;
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_out(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, c10::SymInt ignore_index, at::Tensor& output, at::Tensor& total_weight) {
    if (takes(self, target, weight) && output.scalar_type() == self.scalar_type() &&
        total_weight.scalar_type() == self.scalar_type()) {
        c10::DeviceGuard guard(self.device());
        const at::Tensor x = self.dim() == 1 ? self.unsqueeze(0) : self;
        const Picks p = picks(x, target, weight, ignore_index.expect_int());
        // -x[n, target[n]] * w[n]
        const at::Tensor loss =
            at::gather(x, 1, p.index.unsqueeze(1)).squeeze(1).mul(p.weight).neg();
        if (reduction == kNone) {
            at::native::resize_output(output, target.sizes());
            output.copy_(loss.view(target.sizes()));
            at::native::resize_output(total_weight, {});
            total_weight.zero_();
        } else {
            at::native::resize_output(output, {});
            at::native::resize_output(total_weight, {});
            total_weight.copy_(p.weight.sum());
            output.copy_(reduction == kMean ? loss.sum().div(total_weight) : loss.sum());
        }
        return {output, total_weight};
    }
    return fallback_to_cpu<ATEN_OP2(nll_loss_forward, output)>(
        self, target, weight, reduction, ignore_index.expect_int(), output, total_weight);
}

at::Tensor& nll_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                  const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                  int64_t reduction, c10::SymInt ignore_index,
                                  const at::Tensor& total_weight, at::Tensor& grad_input) {
    if (takes(self, target, weight) && grad_output.is_privateuseone() &&
        grad_output.scalar_type() == self.scalar_type() &&
        grad_input.scalar_type() == self.scalar_type()) {
        c10::DeviceGuard guard(self.device());
        const at::Tensor x = self.dim() == 1 ? self.unsqueeze(0) : self;
        const Picks p = picks(x, target, weight, ignore_index.expect_int());
        at::Tensor g = reduction == kNone ? grad_output.reshape({-1}) : grad_output.reshape({});
        if (reduction == kMean) g = g.div(total_weight);
        const at::Tensor vals = p.weight.mul(g).neg().unsqueeze(1);  // [N, 1]
        at::native::resize_output(grad_input, self.sizes());
        at::Tensor gi = writable_output(grad_input);
        gi.zero_();
        const at::Tensor gi2 = gi.view(x.sizes());
        const auto idx = stick_dense(p.index.unsqueeze(1), "aten::nll_loss_backward");
        const auto v = stick_dense(vals, "aten::nll_loss_backward");
        if (idx && v) {
            const spyre_tensor tt = op_tensor(gi2), ti = op_tensor(*idx), tr = op_tensor(*v);
            if (op_ran("aten::nll_loss_backward",
                       spyre_op_scatter(op_stream(gi2), &tt, 1, &ti, &tr, 0))) {
                finish_output(grad_input, gi);
                return grad_input;
            }
        }
    }
    return fallback_to_cpu<ATEN_OP2(nll_loss_backward, grad_input)>(
        grad_output, self, target, weight, reduction, ignore_index.expect_int(), total_weight,
        grad_input);
}

// nll_loss2d (F.cross_entropy of [N, C, H, W] logits, segmentation): the 1-D loss over the
// pixels, [N * H * W, C] rows of the channels-last view, reshaped back.
bool takes_2d(const at::Tensor& self, const at::Tensor& target) {
    return self.is_privateuseone() && self.dim() == 4 && target.is_privateuseone() &&
           target.dim() == 3 && target.size(0) == self.size(0) && target.size(1) == self.size(2) &&
           target.size(2) == self.size(3);
}

at::Tensor pixel_rows(const at::Tensor& self) {
    return self.permute({0, 2, 3, 1}).reshape({-1, self.size(1)});
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss2d_forward_out(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, c10::SymInt ignore_index, at::Tensor& output, at::Tensor& total_weight) {
    const at::Tensor rows = takes_2d(self, target) ? pixel_rows(self) : at::Tensor();
    if (rows.defined() && takes(rows, target.reshape({-1}), weight)) {
        c10::DeviceGuard guard(self.device());
        at::Tensor out1 = at::empty({0}, self.options());
        nll_loss_forward_out(rows, target.reshape({-1}), weight, reduction, ignore_index, out1,
                             total_weight);
        at::native::resize_output(output, reduction == kNone ? target.sizes() : at::IntArrayRef{});
        output.copy_(reduction == kNone ? out1.view(target.sizes()) : out1);
        return {output, total_weight};
    }
    return fallback_to_cpu<ATEN_OP2(nll_loss2d_forward, output)>(
        self, target, weight, reduction, ignore_index.expect_int(), output, total_weight);
}

at::Tensor& nll_loss2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                    const at::Tensor& target,
                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                    c10::SymInt ignore_index, const at::Tensor& total_weight,
                                    at::Tensor& grad_input) {
    const at::Tensor rows = takes_2d(self, target) ? pixel_rows(self) : at::Tensor();
    if (rows.defined() && takes(rows, target.reshape({-1}), weight) &&
        grad_output.is_privateuseone() && grad_input.is_privateuseone()) {
        c10::DeviceGuard guard(self.device());
        const at::Tensor g = reduction == kNone ? grad_output.reshape({-1}) : grad_output;
        at::Tensor gi = at::empty(rows.sizes(), self.options());
        nll_loss_backward_out(g, rows, target.reshape({-1}), weight, reduction, ignore_index,
                              total_weight, gi);
        const at::Tensor back =
            gi.view({self.size(0), self.size(2), self.size(3), self.size(1)}).permute({0, 3, 1, 2});
        at::native::resize_output(grad_input, self.sizes());
        grad_input.copy_(back);
        return grad_input;
    }
    return fallback_to_cpu<ATEN_OP2(nll_loss2d_backward, grad_input)>(
        grad_output, self, target, weight, reduction, ignore_index.expect_int(), total_weight,
        grad_input);
}

// nll_loss2d's functional forms are separate operators (not structured)
std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self,
                                                      const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight,
                                                      int64_t reduction, c10::SymInt ignore_index) {
    at::Tensor output = at::empty({0}, self.options()), total = at::empty({0}, self.options());
    nll_loss2d_forward_out(self, target, weight, reduction, ignore_index, output, total);
    return {output, total};
}

at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Tensor& target, const std::optional<at::Tensor>& weight,
                               int64_t reduction, c10::SymInt ignore_index,
                               const at::Tensor& total_weight) {
    at::Tensor grad_input = at::empty({0}, self.options());
    return nll_loss2d_backward_out(grad_output, self, target, weight, reduction, ignore_index,
                                   total_weight, grad_input);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("nll_loss_forward.output", TORCH_FN(nll_loss_forward_out));
    m.impl("nll_loss_backward.grad_input", TORCH_FN(nll_loss_backward_out));
    m.impl("nll_loss2d_forward.output", TORCH_FN(nll_loss2d_forward_out));
    m.impl("nll_loss2d_backward.grad_input", TORCH_FN(nll_loss2d_backward_out));
    m.impl("nll_loss2d_forward", TORCH_FN(nll_loss2d_forward));
    m.impl("nll_loss2d_backward", TORCH_FN(nll_loss2d_backward));
}

}  // namespace torch_spyre::aten
