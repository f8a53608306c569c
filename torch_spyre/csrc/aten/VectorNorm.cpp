// Vector norms and NaN-aware sums composed of card ops (they were CPU fallbacks; F.normalize,
// cosine_similarity, clip_grad_norm_ and torch.norm call them): linalg_vector_norm and the
// legacy norm for every order (2: sqrt of the sum of squares; 1: sum of |x|; +-inf: amax/amin
// of |x|; 0: the count of nonzeros; any other p: (sum |x|^p)^(1/p)), nansum (NaN as 0) and
// aminmax. 16-bit inputs reduce in fp32 as the CPU does and round once.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/WrapDimUtils.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "Composed.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// The reduced dims: all for none or an empty list.
std::vector<int64_t> dims_of(const at::Tensor& x, at::OptionalIntArrayRef dim) {
    std::vector<int64_t> dims;
    if (dim && !dim->empty()) {
        for (int64_t d : *dim) dims.push_back(at::maybe_wrap_dim(d, x.dim()));
    } else {
        for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
    }
    return dims;
}

// ||x||_ord over dims in fp32 (keepdim as asked); nullopt where the CPU's answer or error is
// the CPU's to give (an empty reduction).
std::optional<at::Tensor> vector_norm(const at::Tensor& x, double ord, at::OptionalIntArrayRef dim,
                                      bool keepdim) {
    if (x.numel() == 0) return std::nullopt;  // 0 or the CPU's error for +-inf
    const at::Tensor w = x.dim() ? widened(x) : widened(x).reshape({1});
    const std::vector<int64_t> dims = dims_of(w, x.dim() ? dim : at::OptionalIntArrayRef{});
    const bool keep = keepdim && x.dim();
    const at::Tensor a = at::abs(w);
    if (ord == 2) return at::sqrt(at::sum(w * w, dims, keep));
    if (ord == 1) return at::sum(a, dims, keep);
    if (std::isinf(ord)) return ord > 0 ? at::amax(a, dims, keep) : at::amin(a, dims, keep);
    if (ord == 0) return at::sum((w != 0).to(at::kFloat), dims, keep);
    return at::pow(at::sum(pow_composed(a, ord), dims, keep), 1.0 / ord);
}

bool norm_on_card(const at::Tensor& x, at::ScalarType result, const at::Tensor& out) {
    return x.is_privateuseone() && out.is_privateuseone() && !x.is_complex() &&
           is_float(x.scalar_type()) && is_float(result);
}

at::Tensor& linalg_vector_norm_out(const at::Tensor& x, const at::Scalar& ord,
                                   at::OptionalIntArrayRef dim, bool keepdim,
                                   std::optional<at::ScalarType> dtype, at::Tensor& out) {
    const at::ScalarType t = dtype.value_or(x.scalar_type());
    if (norm_on_card(x, t, out) && !ord.isComplex()) {
        c10::DeviceGuard guard(x.device());
        if (auto r = vector_norm(x, ord.toDouble(), dim, keepdim)) return assign(out, r->to(t));
    }
    return fallback_to_cpu<ATEN_OP2(linalg_vector_norm, out)>(x, ord, dim, keepdim, dtype, out);
}

std::optional<at::Tensor> legacy_norm(const at::Tensor& x, const std::optional<at::Scalar>& p,
                                      at::IntArrayRef dim, bool keepdim, at::ScalarType t,
                                      const at::Tensor& out) {
    if (!norm_on_card(x, t, out) || (p && p->isComplex())) return std::nullopt;
    c10::DeviceGuard guard(x.device());
    auto r = vector_norm(x, p ? p->toDouble() : 2.0, dim, keepdim);
    if (r) return r->to(t);
    return std::nullopt;
}

at::Tensor& norm_out(const at::Tensor& x, const std::optional<at::Scalar>& p, at::IntArrayRef dim,
                     bool keepdim, at::Tensor& out) {
    if (auto r = legacy_norm(x, p, dim, keepdim, x.scalar_type(), out)) return assign(out, *r);
    return fallback_to_cpu<ATEN_OP2(norm, out)>(x, p, dim, keepdim, out);
}

at::Tensor& norm_dtype_out(const at::Tensor& x, const std::optional<at::Scalar>& p,
                           at::IntArrayRef dim, bool keepdim, at::ScalarType dtype,
                           at::Tensor& out) {
    if (auto r = legacy_norm(x, p, dim, keepdim, dtype, out)) return assign(out, *r);
    return fallback_to_cpu<ATEN_OP2(norm, dtype_out)>(x, p, dim, keepdim, dtype, out);
}

// The sum with NaN counted as 0; integers have no NaN (their sum, as torch).
std::optional<at::Tensor> nansum_of(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                                    std::optional<at::ScalarType> dtype) {
    if (!x.is_privateuseone() || !is_float(x.scalar_type())) return std::nullopt;
    const at::ScalarType t = dtype.value_or(x.scalar_type());
    if (!is_float(t)) return std::nullopt;
    c10::DeviceGuard guard(x.device());
    const at::Tensor w = widened(x);
    const at::Tensor clean = at::where(at::isnan(w), 0.0, w);
    const std::vector<int64_t> dims = dims_of(w, dim);
    return (x.dim() ? at::sum(clean, dims, keepdim) : clean).to(t);
}

at::Tensor nansum(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType> dtype) {
    if (auto r = nansum_of(x, dim, keepdim, dtype)) return *r;
    return fallback_to_cpu<ATEN_OP(nansum)>(x, dim, keepdim, dtype);
}

at::Tensor& nansum_out(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<at::ScalarType> dtype, at::Tensor& out) {
    if (out.is_privateuseone())
        if (auto r = nansum_of(x, dim, keepdim, dtype)) return assign(out, *r);
    return fallback_to_cpu<ATEN_OP2(nansum, out)>(x, dim, keepdim, dtype, out);
}

// amin and amax (NaN propagates in both, as torch); an empty reduction is the CPU's error
std::tuple<at::Tensor&, at::Tensor&> aminmax_out(const at::Tensor& x, std::optional<int64_t> dim,
                                                 bool keepdim, at::Tensor& min, at::Tensor& max) {
    const at::ScalarType t = x.scalar_type();
    if (!x.is_privateuseone() || !min.is_privateuseone() || !max.is_privateuseone() ||
        !(is_float(t) || is_int_dtype(t)) || x.numel() == 0 || min.scalar_type() != t ||
        max.scalar_type() != t)
        return fallback_to_cpu<ATEN_OP2(aminmax, out)>(x, dim, keepdim, min, max);
    c10::DeviceGuard guard(x.device());
    // integers exactly; bools as their bytes (0 or 1), read back as bool
    const bool bools = t == at::kBool;
    const at::Tensor v = bools ? x.view(at::kByte) : x;
    const auto back = [&](const at::Tensor& r) { return bools ? r.view(at::kBool) : r; };
    if (dim) {
        assign(min, back(at::amin(v, {*dim}, keepdim)));
        assign(max, back(at::amax(v, {*dim}, keepdim)));
    } else {
        // all elements: a 0-dim result, or 1 x ... x 1 with keepdim
        const at::Tensor flat = back(v.reshape({-1}));
        at::Tensor lo = at::amin(flat, {0}), hi = at::amax(flat, {0});
        if (keepdim && x.dim()) {
            const std::vector<int64_t> ones(x.dim(), 1);
            lo = lo.reshape(ones);
            hi = hi.reshape(ones);
        }
        assign(min, lo);
        assign(max, hi);
    }
    return {min, max};
}

// weight_norm (nn.utils.weight_norm and parametrizations.weight_norm over dim 0 or the last):
// w = v * (g / ||v||), the 2-norm over every dim but `dim`, kept as g's shape; fp32 (aten takes
// this fused form only without 16-bit operands).
std::vector<int64_t> other_dims(const at::Tensor& v, int64_t dim) {
    std::vector<int64_t> dims;
    for (int64_t k = 0; k < v.dim(); ++k)
        if (k != dim) dims.push_back(k);
    return dims;
}

bool weight_norm_on_card(const at::Tensor& v, const at::Tensor& g, int64_t dim) {
    return v.is_privateuseone() && g.is_privateuseone() && v.scalar_type() == at::kFloat &&
           g.scalar_type() == at::kFloat && v.dim() > 0 && (dim == 0 || dim == v.dim() - 1) &&
           g.numel() == v.size(dim);
}

std::tuple<at::Tensor, at::Tensor> weight_norm_interface(const at::Tensor& v, const at::Tensor& g,
                                                         int64_t dim) {
    if (!weight_norm_on_card(v, g, dim))
        return fallback_to_cpu<ATEN_OP(_weight_norm_interface)>(v, g, dim);
    c10::DeviceGuard guard(v.device());
    std::vector<int64_t> shape(v.dim(), 1);
    shape[dim] = v.size(dim);
    const at::Tensor norms = at::linalg_vector_norm(v, 2, other_dims(v, dim), /*keepdim=*/true);
    return {v * (g.reshape(shape) / norms), norms};
}

// grad_g = sum(grad_w v) / ||v||, grad_v = (g / ||v||) (grad_w - v sum(grad_w v) / ||v||^2),
// as the CPU kernel computes them.
std::tuple<at::Tensor, at::Tensor> weight_norm_interface_backward(const at::Tensor& grad_w,
                                                                  const at::Tensor& v,
                                                                  const at::Tensor& g,
                                                                  const at::Tensor& norms,
                                                                  int64_t dim) {
    if (!weight_norm_on_card(v, g, dim) || !grad_w.is_privateuseone() ||
        grad_w.scalar_type() != at::kFloat || !norms.is_privateuseone() ||
        norms.scalar_type() != at::kFloat || norms.numel() != g.numel())
        return fallback_to_cpu<ATEN_OP(_weight_norm_interface_backward)>(grad_w, v, g, norms, dim);
    c10::DeviceGuard guard(v.device());
    std::vector<int64_t> shape(v.dim(), 1);
    shape[dim] = v.size(dim);
    const at::Tensor n = norms.reshape(shape), gg = g.reshape(shape);
    const at::Tensor dot = (grad_w * v).sum(other_dims(v, dim), /*keepdim=*/true);
    const at::Tensor grad_g = (dot / n).reshape(g.sizes());
    const at::Tensor grad_v = (gg / n) * (grad_w - v * (dot / (n * n)));
    return {grad_v, grad_g};
}

// renorm: each slice along `dim` whose p-norm exceeds maxnorm scaled to maxnorm, as the CPU
// computes it: the norms (fp32 for 16-bit inputs), the factor maxnorm / (norm + 1e-7) or 1 in
// x's type, then x * factor. Made of differentiable ops, so autograd takes its gradient from
// them (renorm_autograd).
at::Tensor renorm_of(const at::Tensor& x, const at::Scalar& p, int64_t d, double cap) {
    const at::Tensor norms = at::linalg_vector_norm(widened(x), p, other_dims(x, d), true);
    const at::Tensor factor =
        at::where(norms > cap, at::full_like(norms, cap) / (norms + 1e-7), at::ones_like(norms))
            .to(x.scalar_type());
    return x * factor;
}

at::Tensor& renorm_out(const at::Tensor& x, const at::Scalar& p, int64_t dim,
                       const at::Scalar& maxnorm, at::Tensor& out) {
    const bool on_card = x.is_privateuseone() && out.is_privateuseone() &&
                         is_float(x.scalar_type()) && x.dim() > 0 && x.numel() > 0 &&
                         out.scalar_type() == x.scalar_type() && !p.isComplex() &&
                         p.toDouble() > 0 && maxnorm.toDouble() >= 0;
    if (!on_card) return fallback_to_cpu<ATEN_OP2(renorm, out)>(x, p, dim, maxnorm, out);
    c10::DeviceGuard guard(x.device());
    return assign(out, renorm_of(x, p, at::maybe_wrap_dim(dim, x.dim()), maxnorm.toDouble()));
}

// torch's renorm_backward asks for the norms in the accumulation type of a device that is not
// CUDA (float64 for fp32), which the cores do not compute: when a gradient is wanted, renorm
// is the composition above after torch's checks (its gradient: factor * grad - x * factor /
// (norm + 1e-7) * d norm, the CPU's formula, in fp32 on the card for fp32/fp16/bf16; other
// dtypes take each op's own kernel). Otherwise torch's own kernel below autograd.
at::Tensor renorm_autograd(const at::Tensor& x, const at::Scalar& p, int64_t dim,
                           const at::Scalar& maxnorm) {
    if (!at::GradMode::is_enabled() || !x.requires_grad()) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return at::renorm(x, p, dim, maxnorm);
    }
    TORCH_CHECK(x.dim() > 1, "renorm: input needs at least 2 dimensions, got ", x.dim(),
                " dimensions");
    TORCH_CHECK(!p.isComplex(), "renorm: p must be real-valued");
    TORCH_CHECK(p.toDouble() > 0.0, "renorm: non-positive-norm not supported");
    TORCH_CHECK(!maxnorm.isComplex(), "renorm: maxnorm must be real-valued");
    TORCH_CHECK(maxnorm.toDouble() >= 0.0, "renorm: expected maxnorm to be >= 0 but got ",
                maxnorm.toDouble());
    c10::DeviceGuard guard(x.device());
    return renorm_of(x, p, at::maybe_wrap_dim(dim, x.dim()), maxnorm.toDouble());
}

// renorm_ with a gradient wanted: the composition of a copy of self (so the graph keeps the
// values self had), written back by a differentiable copy_
at::Tensor& renorm_inplace_autograd(at::Tensor& self, const at::Scalar& p, int64_t dim,
                                    const at::Scalar& maxnorm) {
    if (!at::GradMode::is_enabled() || !self.requires_grad()) {
        at::AutoDispatchBelowAutograd below_autograd;  // ADInplaceOrView bumps the version
        return self.renorm_(p, dim, maxnorm);
    }
    const at::Tensor r = renorm_autograd(self.clone(), p, dim, maxnorm);
    self.copy_(r);
    return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("renorm.out", TORCH_FN(renorm_out));
    m.impl("_weight_norm_interface", TORCH_FN(weight_norm_interface));
    m.impl("_weight_norm_interface_backward", TORCH_FN(weight_norm_interface_backward));
    m.impl("linalg_vector_norm.out", TORCH_FN(linalg_vector_norm_out));
    m.impl("norm.out", TORCH_FN(norm_out));
    m.impl("norm.dtype_out", TORCH_FN(norm_dtype_out));
    m.impl("nansum", TORCH_FN(nansum));
    m.impl("nansum.out", TORCH_FN(nansum_out));
    m.impl("aminmax.out", TORCH_FN(aminmax_out));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
    m.impl("renorm", TORCH_FN(renorm_autograd));
    m.impl("renorm_", TORCH_FN(renorm_inplace_autograd));
}

}  // namespace torch_spyre::aten
