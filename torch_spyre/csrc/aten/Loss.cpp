// Losses on the card, composed of the device's elementwise and reduction kernels in fp32:
// mse_loss, binary_cross_entropy (weights; the CPU's log clamp at -100 and its [0, 1] check),
// smooth_l1_loss, huber_loss, multi_margin_loss and multilabel_margin_loss, and their backwards
// (reductions none, mean, sum), the result rounded once to the input's type. Other types and mixed
// operands run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

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

// The reduction of an elementwise loss, in fp32.
at::Tensor reduced(const at::Tensor& loss, int64_t reduction) {
    if (reduction == at::Reduction::Mean) return loss.mean();
    if (reduction == at::Reduction::Sum) return loss.sum();
    return loss;
}

// d(reduction)/d(loss): grad as given (none, sum), divided by the count (mean)
at::Tensor reduced_grad(const at::Tensor& grad, const at::Tensor& self, int64_t reduction) {
    const at::Tensor g = grad.to(at::kFloat);
    return reduction == at::Reduction::Mean && self.numel() > 0 ? g / double(self.numel()) : g;
}

bool loss_on_card(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                  const at::Tensor& out) {
    return same_float(self, target) && known_reduction(reduction) && out.is_privateuseone() &&
           self.sizes() == target.sizes();
}

bool loss_grad_on_card(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                       int64_t reduction, const at::Tensor& grad_input) {
    return loss_on_card(self, target, reduction, grad_input) && grad.is_privateuseone() &&
           is_float(grad.scalar_type());
}

at::Tensor& store(at::Tensor& out, const at::Tensor& r, const at::Tensor& self) {
    at::native::resize_output(out, r.sizes());
    out.copy_(r.to(self.scalar_type()));
    return out;
}

// -w (t max(log x, -100) + (1 - t) max(log(1 - x), -100)), the CPU's clamp of the logs; an
// input outside [0, 1] is the CPU's error (one host read of a flag)
std::optional<at::Tensor> bce_of(const at::Tensor& self, const at::Tensor& target,
                                 const std::optional<at::Tensor>& weight, int64_t reduction) {
    const bool weighted = weight && weight->defined();
    if (!same_float(self, target) || !known_reduction(reduction) ||
        self.sizes() != target.sizes() ||
        (weighted && (!weight->is_privateuseone() || !is_float(weight->scalar_type()))))
        return std::nullopt;
    c10::DeviceGuard guard(self.device());
    const at::Tensor x = self.to(at::kFloat), t = target.to(at::kFloat);
    TORCH_CHECK(!((x < 0).logical_or(x > 1)).any().item<bool>(),
                "all elements of input should be between 0 and 1");
    at::Tensor loss =
        -(t * at::clamp_min(at::log(x), -100) + (1 - t) * at::clamp_min(at::log(1 - x), -100));
    if (weighted) loss = loss * weight->to(at::kFloat);
    return reduced(loss, reduction).to(self.scalar_type());
}

at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight, int64_t reduction) {
    if (auto r = bce_of(self, target, weight, reduction)) return *r;
    return fallback_to_cpu<ATEN_OP(binary_cross_entropy)>(self, target, weight, reduction);
}

at::Tensor& binary_cross_entropy_out(const at::Tensor& self, const at::Tensor& target,
                                     const std::optional<at::Tensor>& weight, int64_t reduction,
                                     at::Tensor& out) {
    if (out.is_privateuseone())
        if (auto r = bce_of(self, target, weight, reduction)) return store(out, *r, self);
    return fallback_to_cpu<ATEN_OP2(binary_cross_entropy, out)>(self, target, weight, reduction,
                                                                out);
}

// g w (x - t) / max(x (1 - x), 1e-12), the CPU's epsilon
std::optional<at::Tensor> bce_grad(const at::Tensor& grad, const at::Tensor& self,
                                   const at::Tensor& target,
                                   const std::optional<at::Tensor>& weight, int64_t reduction) {
    const bool weighted = weight && weight->defined();
    if (!same_float(self, target) || !known_reduction(reduction) || !grad.is_privateuseone() ||
        !is_float(grad.scalar_type()) || self.sizes() != target.sizes() ||
        (weighted && (!weight->is_privateuseone() || !is_float(weight->scalar_type()))))
        return std::nullopt;
    c10::DeviceGuard guard(self.device());
    const at::Tensor x = self.to(at::kFloat), t = target.to(at::kFloat);
    at::Tensor gi =
        reduced_grad(grad, self, reduction) * (x - t) / at::clamp_min(x * (1 - x), 1e-12);
    if (weighted) gi = gi * weight->to(at::kFloat);
    return gi.to(self.scalar_type());
}

at::Tensor binary_cross_entropy_backward(const at::Tensor& grad, const at::Tensor& self,
                                         const at::Tensor& target,
                                         const std::optional<at::Tensor>& weight,
                                         int64_t reduction) {
    if (auto r = bce_grad(grad, self, target, weight, reduction)) return *r;
    return fallback_to_cpu<ATEN_OP(binary_cross_entropy_backward)>(grad, self, target, weight,
                                                                   reduction);
}

at::Tensor& binary_cross_entropy_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                              const at::Tensor& target,
                                              const std::optional<at::Tensor>& weight,
                                              int64_t reduction, at::Tensor& grad_input) {
    if (grad_input.is_privateuseone())
        if (auto r = bce_grad(grad, self, target, weight, reduction))
            return store(grad_input, *r, self);
    return fallback_to_cpu<ATEN_OP2(binary_cross_entropy_backward, grad_input)>(
        grad, self, target, weight, reduction, grad_input);
}

// |d| < beta: d^2 / (2 beta), else |d| - beta / 2 (beta 0: the L1 loss)
at::Tensor& smooth_l1_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                               double beta, at::Tensor& out) {
    if (!loss_on_card(self, target, reduction, out) || beta < 0)
        return fallback_to_cpu<ATEN_OP2(smooth_l1_loss, out)>(self, target, reduction, beta, out);
    c10::DeviceGuard guard(self.device());
    const at::Tensor z = at::abs(self.to(at::kFloat) - target.to(at::kFloat));
    const at::Tensor loss = beta == 0 ? z : at::where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta);
    return store(out, reduced(loss, reduction), self);
}

// d < -beta: -g; d > beta: g; else g d / beta (beta 0: g sign(d))
at::Tensor smooth_l1_grad(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                          int64_t reduction, double beta) {
    c10::DeviceGuard guard(self.device());
    const at::Tensor g = reduced_grad(grad, self, reduction);
    const at::Tensor d = self.to(at::kFloat) - target.to(at::kFloat);
    if (beta == 0) return (g * at::sign(d)).to(self.scalar_type());
    return at::where(d < -beta, -g, at::where(d > beta, g, g * d / beta)).to(self.scalar_type());
}

at::Tensor smooth_l1_loss_backward(const at::Tensor& grad, const at::Tensor& self,
                                   const at::Tensor& target, int64_t reduction, double beta) {
    at::Tensor probe = at::empty({0}, self.options());
    if (!loss_grad_on_card(grad, self, target, reduction, probe) || beta < 0)
        return fallback_to_cpu<ATEN_OP(smooth_l1_loss_backward)>(grad, self, target, reduction,
                                                                 beta);
    return smooth_l1_grad(grad, self, target, reduction, beta);
}

at::Tensor& smooth_l1_loss_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                        const at::Tensor& target, int64_t reduction, double beta,
                                        at::Tensor& grad_input) {
    if (!loss_grad_on_card(grad, self, target, reduction, grad_input) || beta < 0)
        return fallback_to_cpu<ATEN_OP2(smooth_l1_loss_backward, grad_input)>(
            grad, self, target, reduction, beta, grad_input);
    return store(grad_input, smooth_l1_grad(grad, self, target, reduction, beta), self);
}

// |d| < delta: d^2 / 2, else delta (|d| - delta / 2)
std::optional<at::Tensor> huber_of(const at::Tensor& self, const at::Tensor& target,
                                   int64_t reduction, double delta) {
    at::Tensor probe = at::empty({0}, self.options());
    if (!loss_on_card(self, target, reduction, probe) || !(delta > 0)) return std::nullopt;
    c10::DeviceGuard guard(self.device());
    const at::Tensor z = at::abs(self.to(at::kFloat) - target.to(at::kFloat));
    const at::Tensor loss = at::where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta));
    return reduced(loss, reduction).to(self.scalar_type());
}

at::Tensor huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                      double delta) {
    if (auto r = huber_of(self, target, reduction, delta)) return *r;
    return fallback_to_cpu<ATEN_OP(huber_loss)>(self, target, reduction, delta);
}

at::Tensor& huber_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                           double delta, at::Tensor& out) {
    if (out.is_privateuseone())
        if (auto r = huber_of(self, target, reduction, delta)) return store(out, *r, self);
    return fallback_to_cpu<ATEN_OP2(huber_loss, out)>(self, target, reduction, delta, out);
}

// d < -delta: -g delta; d > delta: g delta; else g d
std::optional<at::Tensor> huber_grad(const at::Tensor& grad, const at::Tensor& self,
                                     const at::Tensor& target, int64_t reduction, double delta) {
    at::Tensor probe = at::empty({0}, self.options());
    if (!loss_grad_on_card(grad, self, target, reduction, probe) || !(delta > 0))
        return std::nullopt;
    c10::DeviceGuard guard(self.device());
    const at::Tensor g = reduced_grad(grad, self, reduction);
    const at::Tensor d = self.to(at::kFloat) - target.to(at::kFloat);
    const at::Tensor r = at::where(d < -delta, -g * delta, at::where(d > delta, g * delta, g * d));
    return r.to(self.scalar_type());
}

at::Tensor huber_loss_backward(const at::Tensor& grad, const at::Tensor& self,
                               const at::Tensor& target, int64_t reduction, double delta) {
    if (auto r = huber_grad(grad, self, target, reduction, delta)) return *r;
    return fallback_to_cpu<ATEN_OP(huber_loss_backward)>(grad, self, target, reduction, delta);
}

at::Tensor& huber_loss_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                    const at::Tensor& target, int64_t reduction, double delta,
                                    at::Tensor& grad_input) {
    if (grad_input.is_privateuseone())
        if (auto r = huber_grad(grad, self, target, reduction, delta))
            return store(grad_input, *r, self);
    return fallback_to_cpu<ATEN_OP2(huber_loss_backward, out)>(grad, self, target, reduction, delta,
                                                               grad_input);
}

// multi_margin_loss (nn.MultiMarginLoss): per sample i with target t, the mean over the classes
// d != t of w[t] * max(0, margin - x[t] + x[d])^p, p 1 or 2; the target's score by a gather,
// the rest elementwise on [N, D] in fp32, a row sum. The CPU kernel takes fp32 and fp64 only
// (16-bit inputs go to its error); a target out of [0, D) is the CPU's error (one host read).
struct MarginTerms {
    at::Tensor z, keep, scale;  // [N, D] margin - x[t] + x[d]; the counted terms; w[t] or undef
    int64_t n, d;
};

std::optional<MarginTerms> margin_terms(const at::Tensor& self, const at::Tensor& target,
                                        const at::Scalar& p, const at::Scalar& margin,
                                        const std::optional<at::Tensor>& weight,
                                        int64_t reduction) {
    const bool weighted = weight && weight->defined();
    const int64_t dims = self.dim();
    if (!self.is_privateuseone() || self.scalar_type() != at::kFloat || dims < 1 || dims > 2 ||
        self.numel() == 0 || !target.is_privateuseone() || target.device() != self.device() ||
        (target.scalar_type() != at::kLong && target.scalar_type() != at::kInt) ||
        target.dim() > 1 || !known_reduction(reduction) || p.isComplex() || margin.isComplex())
        return std::nullopt;
    const double pv = p.toDouble();
    const int64_t n = dims == 1 ? 1 : self.size(0), d = self.size(dims - 1);
    if ((pv != 1 && pv != 2) || target.numel() != n ||
        (weighted && (!weight->is_privateuseone() || weight->scalar_type() != at::kFloat ||
                      weight->dim() != 1 || weight->numel() != d)))
        return std::nullopt;
    c10::DeviceGuard guard(self.device());
    const at::Tensor t = target.reshape({n, 1}).to(at::kLong);
    TORCH_CHECK(!((t < 0).logical_or_(t >= d)).any().item<bool>(), "target out of range");
    const at::Tensor x = self.reshape({n, d});
    MarginTerms m{(margin.toFloat() - x.gather(1, t)) + x, {}, {}, n, d};
    const at::Tensor col = at::arange(d, t.options()).view({1, d});
    m.keep = (m.z > 0).logical_and_(col != t);
    if (weighted) m.scale = weight->index_select(0, t.view({n})).view({n, 1});
    return m;
}

at::Tensor multi_margin_value(const MarginTerms& m, double p, int64_t reduction, int64_t tdim) {
    at::Tensor h = p == 1 ? m.z : m.z * m.z;
    h = at::where(m.keep, h, 0.0);
    if (m.scale.defined()) h = h * m.scale;
    const at::Tensor loss = h.sum(1) / static_cast<double>(m.d);
    if (reduction == at::Reduction::Mean) return loss.mean();
    if (reduction == at::Reduction::Sum) return loss.sum();
    return tdim > 0 ? loss : loss.reshape({});
}

at::Tensor multi_margin_loss(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                             const at::Scalar& margin, const std::optional<at::Tensor>& weight,
                             int64_t reduction) {
    if (auto m = margin_terms(self, target, p, margin, weight, reduction))
        return multi_margin_value(*m, p.toDouble(), reduction, target.dim());
    return fallback_to_cpu<ATEN_OP(multi_margin_loss)>(self, target, p, margin, weight, reduction);
}

at::Tensor& multi_margin_loss_out(const at::Tensor& self, const at::Tensor& target,
                                  const at::Scalar& p, const at::Scalar& margin,
                                  const std::optional<at::Tensor>& weight, int64_t reduction,
                                  at::Tensor& out) {
    if (out.is_privateuseone())
        if (auto m = margin_terms(self, target, p, margin, weight, reduction))
            return store(out, multi_margin_value(*m, p.toDouble(), reduction, target.dim()), self);
    return fallback_to_cpu<ATEN_OP2(multi_margin_loss, out)>(self, target, p, margin, weight,
                                                             reduction, out);
}

// d loss / d x[d] = g (p 1) or 2 g z (p 2) times w[t] for each counted term, and minus their
// sum at the target; g = 1 / D, or 1 / (N D) for the mean (the CPU's scaling), then times the
// incoming gradient (one number, or one per sample for reduction none).
std::optional<at::Tensor> multi_margin_grad(const at::Tensor& grad, const at::Tensor& self,
                                            const at::Tensor& target, const at::Scalar& p,
                                            const at::Scalar& margin,
                                            const std::optional<at::Tensor>& weight,
                                            int64_t reduction) {
    if (!grad.is_privateuseone() || grad.scalar_type() != at::kFloat) return std::nullopt;
    auto m = margin_terms(self, target, p, margin, weight, reduction);
    if (!m) return std::nullopt;
    const bool per_sample = reduction == at::Reduction::None && grad.dim() > 0;
    if ((per_sample && grad.numel() != m->n) || (!per_sample && grad.numel() != 1))
        return std::nullopt;
    const double g = reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(m->n * m->d)
                                                      : 1.0 / static_cast<double>(m->d);
    at::Tensor h = p.toDouble() == 1 ? at::full_like(m->z, g) : m->z * (2 * g);
    h = at::where(m->keep, h, 0.0);
    if (m->scale.defined()) h = h * m->scale;
    const at::Tensor t = target.reshape({m->n, 1}).to(at::kLong);
    const at::Tensor at_target = at::arange(m->d, t.options()).view({1, m->d}) == t;
    at::Tensor gi = h - at_target * h.sum(1, /*keepdim=*/true);
    gi = gi * grad.reshape({per_sample ? m->n : 1, 1});
    return gi.reshape(self.sizes());
}

at::Tensor multi_margin_loss_backward(const at::Tensor& grad, const at::Tensor& self,
                                      const at::Tensor& target, const at::Scalar& p,
                                      const at::Scalar& margin,
                                      const std::optional<at::Tensor>& weight, int64_t reduction) {
    if (auto r = multi_margin_grad(grad, self, target, p, margin, weight, reduction)) return *r;
    return fallback_to_cpu<ATEN_OP(multi_margin_loss_backward)>(grad, self, target, p, margin,
                                                                weight, reduction);
}

at::Tensor& multi_margin_loss_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                           const at::Tensor& target, const at::Scalar& p,
                                           const at::Scalar& margin,
                                           const std::optional<at::Tensor>& weight,
                                           int64_t reduction, at::Tensor& grad_input) {
    if (grad_input.is_privateuseone())
        if (auto r = multi_margin_grad(grad, self, target, p, margin, weight, reduction))
            return store(grad_input, *r, self);
    return fallback_to_cpu<ATEN_OP2(multi_margin_loss_backward, grad_input)>(
        grad, self, target, p, margin, weight, reduction, grad_input);
}

// multilabel_margin_loss (nn.MultiLabelMarginLoss): each sample's targets are its target row up
// to the first negative entry; the loss is the sum over those targets j and the classes d that
// are no target of max(0, 1 - x[y_j] + x[d]), over C. On [n, J, C] in fp32 (J: the most targets
// any row has, one host read; an entry outside [-1, C) is the CPU's error, another): the targets'
// scores by a gather, the target classes as a one-hot over the J targets. The CPU kernel takes fp32
// and fp64 only (16-bit inputs go to its error); is_target is the CPU's (1.0 at the targets).
struct MultilabelTerms {
    at::Tensor onehot;     // [n, J, C] float: target j is class c (valid targets only)
    at::Tensor keep;       // [n, J, C] bool: the counted terms
    at::Tensor z;          // [n, J, C] 1 - x[y_j] + x[d]
    at::Tensor is_target;  // [n, C] float
    int64_t n, c;
};

std::optional<MultilabelTerms> multilabel_terms(const at::Tensor& self, const at::Tensor& target,
                                                int64_t reduction) {
    const int64_t dims = self.dim();
    if (!self.is_privateuseone() || self.scalar_type() != at::kFloat || dims > 2 ||
        self.numel() == 0 || !target.is_privateuseone() || target.device() != self.device() ||
        target.scalar_type() != at::kLong || target.sizes() != self.sizes() ||
        !known_reduction(reduction))
        return std::nullopt;
    c10::DeviceGuard guard(self.device());
    // a 0-dim input is one sample of one class
    const int64_t n = dims == 2 ? self.size(0) : 1, c = dims == 0 ? 1 : self.size(dims - 1);
    const at::Tensor y = target.reshape({n, c});
    // a target counts until the row's first negative entry
    const at::Tensor valid = (y >= 0).to(at::kLong).cumprod(1);
    const at::Tensor counts = valid.sum(1);
    const int64_t J = counts.max().item<int64_t>();
    // the CPU checks every entry, those after the first -1 too
    TORCH_CHECK(!(y < -1).logical_or_(y >= c).any().item<bool>(),
                "argument #2 'target' is out of range");
    const at::Tensor x = self.reshape({n, c});
    const at::Tensor classes = at::arange(c, y.options()).view({1, 1, c});
    MultilabelTerms m{{}, {}, {}, {}, n, c};
    if (J == 0) {
        m.is_target = at::zeros({n, c}, x.options());
        return m;
    }
    const at::Tensor vj = valid.narrow(1, 0, J).to(at::kBool);
    const at::Tensor yj = at::where(vj, y.narrow(1, 0, J), 0);
    m.onehot = (yj.unsqueeze(2) == classes).logical_and(vj.unsqueeze(2)).to(at::kFloat);
    m.is_target = m.onehot.amax(1);
    m.z = (1 - x.gather(1, yj)).unsqueeze(2) + x.unsqueeze(1);
    m.keep = (m.z > 0).logical_and(vj.unsqueeze(2)).logical_and((m.is_target == 0).unsqueeze(1));
    return m;
}

std::tuple<at::Tensor, at::Tensor> multilabel_value(const MultilabelTerms& m,
                                                    const at::Tensor& self, int64_t reduction) {
    at::Tensor loss = m.keep.defined()
                          ? at::where(m.keep, m.z, 0.0).sum({1, 2}) / static_cast<double>(m.c)
                          : at::zeros({m.n}, self.options());
    if (reduction == at::Reduction::Mean)
        loss = loss.mean();
    else if (reduction == at::Reduction::Sum)
        loss = loss.sum();
    else if (self.dim() < 2)
        loss = loss.reshape({});
    return {loss, m.is_target.reshape(self.sizes())};
}

std::tuple<at::Tensor, at::Tensor> multilabel_margin_loss_forward(const at::Tensor& self,
                                                                  const at::Tensor& target,
                                                                  int64_t reduction) {
    if (auto m = multilabel_terms(self, target, reduction))
        return multilabel_value(*m, self, reduction);
    return fallback_to_cpu<ATEN_OP(multilabel_margin_loss_forward)>(self, target, reduction);
}

std::tuple<at::Tensor&, at::Tensor&> multilabel_margin_loss_forward_out(const at::Tensor& self,
                                                                        const at::Tensor& target,
                                                                        int64_t reduction,
                                                                        at::Tensor& output,
                                                                        at::Tensor& is_target) {
    if (output.is_privateuseone() && is_target.is_privateuseone())
        if (auto m = multilabel_terms(self, target, reduction)) {
            auto [loss, is_t] = multilabel_value(*m, self, reduction);
            store(output, loss, self);
            store(is_target, is_t, self);
            return {output, is_target};
        }
    return fallback_to_cpu<ATEN_OP2(multilabel_margin_loss_forward, output)>(
        self, target, reduction, output, is_target);
}

// d loss / d x[d] = g for each counted term (j, d), and -g at x[y_j] for each: the CPU's loop;
// g = 1 / C, or 1 / (n C) for the mean, then times the incoming gradient (one number, or one per
// sample for reduction none). is_target is recomputed from the target (the CPU's is the same).
std::optional<at::Tensor> multilabel_grad(const at::Tensor& grad, const at::Tensor& self,
                                          const at::Tensor& target, int64_t reduction) {
    if (!grad.is_privateuseone() || grad.scalar_type() != at::kFloat) return std::nullopt;
    auto m = multilabel_terms(self, target, reduction);
    if (!m) return std::nullopt;
    const bool per_sample = reduction == at::Reduction::None && grad.dim() > 0;
    if ((per_sample && grad.numel() != m->n) || (!per_sample && grad.numel() != 1))
        return std::nullopt;
    c10::DeviceGuard guard(self.device());
    if (!m->keep.defined()) return at::zeros_like(self);
    const double g = reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(m->n * m->c)
                                                      : 1.0 / static_cast<double>(m->c);
    const at::Tensor h = m->keep.to(at::kFloat) * g;  // [n, J, C]
    at::Tensor gi = h.sum(1) - (m->onehot * h.sum(2, /*keepdim=*/true)).sum(1);
    gi = gi * grad.reshape({per_sample ? m->n : 1, 1});
    return gi.reshape(self.sizes());
}

at::Tensor multilabel_margin_loss_backward(const at::Tensor& grad, const at::Tensor& self,
                                           const at::Tensor& target, int64_t reduction,
                                           const at::Tensor& is_target) {
    if (auto r = multilabel_grad(grad, self, target, reduction)) return *r;
    return fallback_to_cpu<ATEN_OP(multilabel_margin_loss_backward)>(grad, self, target, reduction,
                                                                     is_target);
}

at::Tensor& multilabel_margin_loss_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                                const at::Tensor& target, int64_t reduction,
                                                const at::Tensor& is_target,
                                                at::Tensor& grad_input) {
    if (grad_input.is_privateuseone())
        if (auto r = multilabel_grad(grad, self, target, reduction))
            return store(grad_input, *r, self);
    return fallback_to_cpu<ATEN_OP2(multilabel_margin_loss_backward, grad_input)>(
        grad, self, target, reduction, is_target, grad_input);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("mse_loss.out", TORCH_FN(mse_loss_out));
    m.impl("mse_loss_backward", TORCH_FN(mse_loss_backward));
    m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy));
    m.impl("binary_cross_entropy.out", TORCH_FN(binary_cross_entropy_out));
    m.impl("binary_cross_entropy_backward", TORCH_FN(binary_cross_entropy_backward));
    m.impl("binary_cross_entropy_backward.grad_input", TORCH_FN(binary_cross_entropy_backward_out));
    m.impl("smooth_l1_loss.out", TORCH_FN(smooth_l1_loss_out));
    m.impl("smooth_l1_loss_backward", TORCH_FN(smooth_l1_loss_backward));
    m.impl("smooth_l1_loss_backward.grad_input", TORCH_FN(smooth_l1_loss_backward_out));
    m.impl("huber_loss", TORCH_FN(huber_loss));
    m.impl("huber_loss.out", TORCH_FN(huber_loss_out));
    m.impl("huber_loss_backward", TORCH_FN(huber_loss_backward));
    m.impl("huber_loss_backward.out", TORCH_FN(huber_loss_backward_out));
    m.impl("multi_margin_loss", TORCH_FN(multi_margin_loss));
    m.impl("multi_margin_loss.out", TORCH_FN(multi_margin_loss_out));
    m.impl("multi_margin_loss_backward", TORCH_FN(multi_margin_loss_backward));
    m.impl("multi_margin_loss_backward.grad_input", TORCH_FN(multi_margin_loss_backward_out));
    m.impl("multilabel_margin_loss_forward", TORCH_FN(multilabel_margin_loss_forward));
    m.impl("multilabel_margin_loss_forward.output", TORCH_FN(multilabel_margin_loss_forward_out));
    m.impl("multilabel_margin_loss_backward", TORCH_FN(multilabel_margin_loss_backward));
    m.impl("multilabel_margin_loss_backward.grad_input",
           TORCH_FN(multilabel_margin_loss_backward_out));
}

}  // namespace torch_spyre::aten
