// Normalizations on the card: native_layer_norm (torch.nn.LayerNorm, F.layer_norm) and
// rms_norm (torch.nn.RMSNorm, F.rms_norm) over the trailing normalized dims, one op-library
// call each (spyre_op_layer_norm / spyre_op_rms_norm). native_layer_norm also returns the
// per-row mean and 1/std that autograd keeps; they are computed on the card too (a mean
// reduction and a few elementwise passes). aten::rms_norm is a composite in torch 2.6; the
// kernel here replaces the decomposition for spyre tensors when no gradient is wanted (with one,
// the differentiable decomposition runs). Other cases run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>

#include "Elementwise.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// x viewed as [rows, cols] over the normalized dims, with its affine parameters as [cols];
// nothing if the library cannot take them.
struct Rows {
    at::Tensor x;
    std::optional<at::Tensor> weight, bias;
};

std::optional<at::Tensor> param(const std::optional<at::Tensor>& p, int64_t cols,
                                const at::Tensor& x, const char* name, bool& ok) {
    if (!p || !p->defined()) return std::nullopt;
    if (!p->is_privateuseone() || p->numel() != cols ||
        (p->scalar_type() != x.scalar_type() && p->scalar_type() != at::kFloat)) {
        ok = false;
        return std::nullopt;
    }
    auto d = stick_dense(p->reshape({cols}), name);
    if (!d) ok = false;
    return d;
}

std::optional<Rows> rows_of(const char* name, const at::Tensor& x, at::IntArrayRef normalized,
                            const std::optional<at::Tensor>& w,
                            const std::optional<at::Tensor>& b) {
    const int64_t k = static_cast<int64_t>(normalized.size());
    if (!is_float(x.scalar_type()) || k == 0 || x.dim() < k ||
        x.sizes().slice(x.dim() - k) != normalized || x.numel() == 0)
        return std::nullopt;
    const int64_t cols = c10::multiply_integers(normalized);
    auto dx = stick_dense(x, name);
    if (!dx) return std::nullopt;
    bool ok = true;
    Rows r{dx->view({-1, cols}), param(w, cols, x, name, ok), param(b, cols, x, name, ok)};
    if (!ok) return std::nullopt;
    return r;
}

const spyre_tensor* maybe(const std::optional<at::Tensor>& t, spyre_tensor& storage) {
    if (!t) return nullptr;
    storage = op_tensor(*t);
    return &storage;
}

// mean and 1/sqrt(var + eps) of each row of x [rows, cols] into [rows, 1] tensors of `type`.
bool row_stats(const at::Tensor& x, double eps, at::ScalarType type, at::Tensor& mean,
               at::Tensor& rstd) {
    const char* name = "aten::native_layer_norm";
    const at::Tensor m = at::empty({x.size(0), 1}, x.options());
    const spyre_tensor tx = op_tensor(x), tm = op_tensor(m);
    if (!op_ran(name, spyre_op_reduce(op_stream(m), SPYRE_REDUCE_MEAN, &tx, &tm))) return false;
    const at::Tensor centered = at::empty(x.sizes(), x.options().dtype(at::kFloat));
    if (!binary_into(name, SPYRE_BINARY_SUB, x, Operand{m, 0.0}, 1.0, centered)) return false;
    if (!binary_into(name, SPYRE_BINARY_MUL, centered, Operand{centered, 0.0}, 1.0, centered))
        return false;
    const at::Tensor var = at::empty({x.size(0), 1}, centered.options());
    const spyre_tensor tc = op_tensor(centered), tv = op_tensor(var);
    if (!op_ran(name, spyre_op_reduce(op_stream(var), SPYRE_REDUCE_MEAN, &tc, &tv))) return false;
    if (!binary_into(name, SPYRE_BINARY_ADD, var, Operand{at::Tensor(), eps}, 1.0, var))
        return false;
    rstd = at::empty({x.size(0), 1}, x.options().dtype(type));
    const spyre_tensor tvar = op_tensor(var), tr = op_tensor(rstd);
    if (!op_ran(name, spyre_op_unary(op_stream(rstd), SPYRE_UNARY_RSQRT, &tvar, &tr))) return false;
    if (m.scalar_type() == type) {
        mean = m;
        return true;
    }
    mean = at::empty(m.sizes(), m.options().dtype(type));
    const spyre_tensor tmean = op_tensor(mean);
    return op_ran(name, spyre_op_unary(op_stream(mean), SPYRE_UNARY_CAST, &tm, &tmean));
}

// layer_norm(input) in one spyre_op_layer_norm launch: {output, input as dense [rows, cols]};
// nothing if the library cannot take the case.
std::optional<std::pair<at::Tensor, at::Tensor>> layer_norm_on_card(
    const char* name, const at::Tensor& input, at::IntArrayRef normalized,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
    auto r = eps >= 0 ? rows_of(name, input, normalized, weight, bias) : std::nullopt;
    if (!r) return std::nullopt;  // (the library takes no negative eps; the CPU gives NaN)
    at::Tensor out = at::empty(input.sizes(), input.options());
    spyre_tensor sw, sb;
    const spyre_tensor tx = op_tensor(r->x), to = op_tensor(out.view(r->x.sizes()));
    if (!op_ran(name, spyre_op_layer_norm(op_stream(out), &tx, maybe(r->weight, sw),
                                          maybe(r->bias, sb), static_cast<float>(eps), &to)))
        return std::nullopt;
    return std::pair{out, r->x};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, at::IntArrayRef normalized, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps) {
    const char* name = "aten::native_layer_norm";
    c10::DeviceGuard guard(input.device());
    // the CPU's statistics type: fp32 when an fp32 parameter meets a 16-bit input
    const bool mixed =
        (weight && weight->defined() && weight->scalar_type() != input.scalar_type()) ||
        (bias && bias->defined() && bias->scalar_type() != input.scalar_type());
    const at::ScalarType stats = mixed ? at::kFloat : input.scalar_type();
    if (auto r = layer_norm_on_card(name, input, normalized, weight, bias, eps)) {
        at::Tensor mean, rstd;
        if (row_stats(r->second, eps, stats, mean, rstd)) {
            std::vector<int64_t> stat_shape(input.sizes().begin(),
                                            input.sizes().end() - normalized.size());
            stat_shape.resize(input.dim(), 1);
            return {r->first, mean.view(stat_shape), rstd.view(stat_shape)};
        }
    }
    return fallback_to_cpu<ATEN_OP(native_layer_norm)>(input, normalized, weight, bias, eps);
}

// aten::layer_norm is a composite over native_layer_norm, whose mean and 1/std outputs cost
// six more launches; without a gradient nobody reads them, so the spyre kernel is the one
// library launch. With a gradient wanted, native_layer_norm (and its autograd) runs.
at::Tensor layer_norm_spyre(const at::Tensor& input, at::IntArrayRef normalized,
                            const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, double eps, bool) {
    c10::DeviceGuard guard(input.device());
    if (auto r = layer_norm_on_card("aten::layer_norm", input, normalized, weight, bias, eps))
        return r->first;
    return std::get<0>(at::native_layer_norm(input, normalized, weight, bias, eps));
}

at::Tensor layer_norm_autograd(const at::Tensor& input, at::IntArrayRef normalized,
                               const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, double eps,
                               bool cudnn_enable) {
    const auto wants_grad = [](const std::optional<at::Tensor>& t) {
        return t && t->defined() && t->requires_grad();
    };
    if (at::GradMode::is_enabled() &&
        (input.requires_grad() || wants_grad(weight) || wants_grad(bias)))
        return std::get<0>(at::native_layer_norm(input, normalized, weight, bias, eps));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // through the dispatcher, not a direct call: fake tensors (torch.compile) take the Python key
    return at::layer_norm(input, normalized, weight, bias, eps, cudnn_enable);
}

double default_rms_eps(at::ScalarType t) {  // torch's: the machine epsilon of the type
    return t == at::kFloat  ? std::numeric_limits<float>::epsilon()
           : t == at::kHalf ? 0.0009765625
                            : 0.0078125;
}

at::Tensor rms_norm_spyre(const at::Tensor& input, at::IntArrayRef normalized,
                          const std::optional<at::Tensor>& weight, std::optional<double> eps) {
    const char* name = "aten::rms_norm";
    c10::DeviceGuard guard(input.device());
    // an fp32 weight on a 16-bit input gives an fp32 result on the CPU: not this kernel's
    const bool same_type =
        !weight || !weight->defined() || weight->scalar_type() == input.scalar_type();
    const double e = eps ? *eps : default_rms_eps(input.scalar_type());
    auto r =
        same_type && e >= 0 ? rows_of(name, input, normalized, weight, std::nullopt) : std::nullopt;
    if (r) {
        at::Tensor out = at::empty(input.sizes(), input.options());
        spyre_tensor sw;
        const spyre_tensor tx = op_tensor(r->x), to = op_tensor(out.view(r->x.sizes()));
        if (op_ran(name, spyre_op_rms_norm(op_stream(out), &tx, maybe(r->weight, sw),
                                           static_cast<float>(e), &to)))
            return out;
    }
    return fallback_to_cpu<ATEN_OP(rms_norm)>(input, normalized, weight, eps);
}

// Registering a spyre kernel for the composite rms_norm takes away its autograd: when a
// gradient is wanted, torch's decomposition (differentiable ops, fp32 inside) runs instead.
at::Tensor rms_norm_autograd(const at::Tensor& input, at::IntArrayRef normalized,
                             const std::optional<at::Tensor>& weight, std::optional<double> eps) {
    if (at::GradMode::is_enabled() &&
        (input.requires_grad() || (weight && weight->defined() && weight->requires_grad()))) {
        std::vector<int64_t> dims;
        for (int64_t i = 0; i < static_cast<int64_t>(normalized.size()); ++i)
            dims.push_back(-1 - i);
        const at::Tensor x = is_float(input.scalar_type()) ? input.to(at::kFloat) : input;
        const at::Tensor r = at::rsqrt((x * x).mean(dims, true) +
                                       eps.value_or(default_rms_eps(input.scalar_type())));
        at::Tensor result = (x * r).type_as(input);
        return weight && weight->defined() ? result * *weight : result;
    }
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return at::rms_norm(input, normalized, weight, eps);  // through the dispatcher, as above
}

// spyre::rms_norm: aten's rms_norm kept whole in torch.compile graphs (AOTAutograd decomposes
// the composite aten op; torch_spyre's Inductor backend swaps it for this one on spyre inputs
// in inference graphs, so the graph keeps the one-launch library kernel as an extern kernel).
at::Tensor rms_norm_op(const at::Tensor& input, at::IntArrayRef normalized,
                       const std::optional<at::Tensor>& weight, std::optional<double> eps) {
    return at::rms_norm(input, normalized, weight, eps);
}

at::Tensor rms_norm_below_autograd(const at::Tensor& input, at::IntArrayRef normalized,
                                   const std::optional<at::Tensor>& weight,
                                   std::optional<double> eps) {
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("spyre::rms_norm", "")
            .typed<at::Tensor(const at::Tensor&, at::IntArrayRef, const std::optional<at::Tensor>&,
                              std::optional<double>)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(input, normalized, weight, eps);
}

// spyre::add_rms_norm: h = x + residual and (rms_norm(h, normalized_shape, weight, eps), h),
// the residual add of a pre-norm decoder and the RMSNorm after it in one op-library launch
// (spyre_op_add_rms_norm: one read of x and residual, two writes). torch.compile's pattern pass
// (_inductor/patterns.py) makes it of an add whose result feeds an RMSNorm and is used again.
// Any case the library does not take runs as the add and rms_norm it stands for.
std::tuple<at::Tensor, at::Tensor> add_rms_norm_op(const at::Tensor& x, const at::Tensor& residual,
                                                   at::IntArrayRef normalized,
                                                   const std::optional<at::Tensor>& weight,
                                                   std::optional<double> eps) {
    at::Tensor h = at::add(x, residual);
    return {at::rms_norm(h, normalized, weight, eps), h};
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_spyre(const at::Tensor& x,
                                                      const at::Tensor& residual,
                                                      at::IntArrayRef normalized,
                                                      const std::optional<at::Tensor>& weight,
                                                      std::optional<double> eps) {
    const char* name = "spyre::add_rms_norm";
    c10::DeviceGuard guard(x.device());
    const bool same_type =
        residual.is_privateuseone() && residual.scalar_type() == x.scalar_type() &&
        residual.sizes() == x.sizes() &&
        (!weight || !weight->defined() || weight->scalar_type() == x.scalar_type());
    const double e = eps ? *eps : default_rms_eps(x.scalar_type());
    auto r =
        same_type && e >= 0 ? rows_of(name, x, normalized, weight, std::nullopt) : std::nullopt;
    auto res = r ? stick_dense(residual, name) : std::nullopt;
    if (r && res) {
        at::Tensor out = at::empty(x.sizes(), x.options()), h = at::empty(x.sizes(), x.options());
        const auto rows = r->x.sizes();
        spyre_tensor sw;
        const spyre_tensor tx = op_tensor(r->x), tr = op_tensor(res->view(rows)),
                           to = op_tensor(out.view(rows)), th = op_tensor(h.view(rows));
        if (op_ran(name, spyre_op_add_rms_norm(op_stream(out), &tx, &tr, maybe(r->weight, sw),
                                               static_cast<float>(e), &to, &th)))
            return {out, h};
    }
    return add_rms_norm_op(x, residual, normalized, weight, eps);
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_below_autograd(
    const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef normalized,
    const std::optional<at::Tensor>& weight, std::optional<double> eps) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("spyre::add_rms_norm", "")
                               .typed<std::tuple<at::Tensor, at::Tensor>(
                                   const at::Tensor&, const at::Tensor&, at::IntArrayRef,
                                   const std::optional<at::Tensor>&, std::optional<double>)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(x, residual, normalized, weight, eps);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
    m.def(
        "rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None) "
        "-> Tensor");
    m.def(
        "add_rms_norm(Tensor x, Tensor residual, int[] normalized_shape, Tensor? weight=None, "
        "float? eps=None) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(spyre, CompositeExplicitAutograd, m) {
    m.impl("rms_norm", TORCH_FN(rms_norm_op));
    m.impl("add_rms_norm", TORCH_FN(add_rms_norm_op));
}

// inference only (the pass that makes it checks that no gradient is wanted): below autograd,
// so a traced graph (the Python key) keeps the op whole
TORCH_LIBRARY_IMPL(spyre, Autograd, m) {
    m.impl("rms_norm", TORCH_FN(rms_norm_below_autograd));
    m.impl("add_rms_norm", TORCH_FN(add_rms_norm_below_autograd));
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("add_rms_norm", TORCH_FN(add_rms_norm_spyre)); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
    m.impl("layer_norm", TORCH_FN(layer_norm_spyre));
    m.impl("rms_norm", TORCH_FN(rms_norm_spyre));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
    m.impl("layer_norm", TORCH_FN(layer_norm_autograd));
    m.impl("rms_norm", TORCH_FN(rms_norm_autograd));
}

}  // namespace torch_spyre::aten
