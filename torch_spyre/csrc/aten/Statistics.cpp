// Reductions composed of device ops (they were CPU fallbacks):
// - var / std / var_mean / std_mean with a correction: two passes (the mean, then the sum of
//   squared deviations) in fp32 for 16-bit inputs, divided by max(N - correction, 0) as torch;
// - prod (all, or along a dim): a tree of multiplications of the two halves, log2(n) launches;
//   floats round in the tree's order, not the CPU's sequential one; integers wrap alike;
// - count_nonzero: a compare and an integer sum;
// - argmin (and min along a dim: amin and argmin): floats as the argmax of -x (NaN stays NaN and
// wins, as in torch; ties keep the
//   first index); integers as the smallest position holding the minimum (amin of the
//   positions, the others pushed past the end), exact.
#include "Statistics.h"

#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// The reduced dims (all when none or an empty list is given), wrapped and sorted.
std::vector<int64_t> reduced_dims(const at::Tensor& x, at::OptionalIntArrayRef dim) {
    std::vector<int64_t> dims;
    if (dim && !dim->empty()) {
        for (int64_t d : *dim) dims.push_back(at::maybe_wrap_dim(d, std::max<int64_t>(x.dim(), 1)));
    } else {
        for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
    }
    std::sort(dims.begin(), dims.end());
    return dims;
}

bool statistic_on_card(const at::Tensor& x) {
    return x.is_privateuseone() && is_float(x.scalar_type());
}

// (var, mean) with keepdim as asked, in x's dtype.
std::tuple<at::Tensor, at::Tensor> var_and_mean(const at::Tensor& x, at::OptionalIntArrayRef dim,
                                                const std::optional<at::Scalar>& correction,
                                                bool keepdim) {
    c10::DeviceGuard guard(x.device());
    const std::vector<int64_t> dims = reduced_dims(x, dim);
    const at::Tensor xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
    int64_t n = 1;
    for (int64_t d : dims) n *= x.dim() ? x.size(d) : 1;
    const double c = correction ? correction->toDouble() : 1.0;
    const at::Tensor mean = x.dim() ? xf.mean(dims, /*keepdim=*/true) : xf.clone();
    const at::Tensor dev = xf - mean;
    at::Tensor sq = dev * dev;
    if (x.dim()) sq = sq.sum(dims, /*keepdim=*/true);
    at::Tensor var = sq / std::max(static_cast<double>(n) - c, 0.0);
    at::Tensor m = mean;
    if (!keepdim && x.dim()) {
        for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
            var = var.squeeze(*it);
            m = m.squeeze(*it);
        }
    }
    return {var.to(x.scalar_type()), m.to(x.scalar_type())};
}

at::Tensor var(const at::Tensor& self, at::OptionalIntArrayRef dim,
               const std::optional<at::Scalar>& correction, bool keepdim) {
    if (!statistic_on_card(self))
        return fallback_to_cpu<ATEN_OP2(var, correction)>(self, dim, correction, keepdim);
    return std::get<0>(var_and_mean(self, dim, correction, keepdim));
}

at::Tensor std_(const at::Tensor& self, at::OptionalIntArrayRef dim,
                const std::optional<at::Scalar>& correction, bool keepdim) {
    if (!statistic_on_card(self))
        return fallback_to_cpu<ATEN_OP2(std, correction)>(self, dim, correction, keepdim);
    return std::get<0>(var_and_mean(self, dim, correction, keepdim)).sqrt();
}

std::tuple<at::Tensor, at::Tensor> var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction,
                                            bool keepdim) {
    if (!statistic_on_card(self))
        return fallback_to_cpu<ATEN_OP2(var_mean, correction)>(self, dim, correction, keepdim);
    return var_and_mean(self, dim, correction, keepdim);
}

std::tuple<at::Tensor, at::Tensor> std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction,
                                            bool keepdim) {
    if (!statistic_on_card(self))
        return fallback_to_cpu<ATEN_OP2(std_mean, correction)>(self, dim, correction, keepdim);
    auto [v, m] = var_and_mean(self, dim, correction, keepdim);
    return {v.sqrt(), m};
}

// The product of x along d, keeping d as size 1.
at::Tensor tree_prod(at::Tensor x, int64_t d) {
    if (x.size(d) == 0) {
        std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
        shape[d] = 1;
        return at::ones(shape, x.options());
    }
    while (x.size(d) > 1) {
        const int64_t n = x.size(d), h = n / 2;
        at::Tensor y = x.narrow(d, 0, h) * x.narrow(d, h, h);
        if (n % 2) y = at::cat({y, x.narrow(d, n - 1, 1)}, d);
        x = y;
    }
    return x;
}

at::ScalarType prod_type(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
    if (dtype) return *dtype;
    return at::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong
                                                                        : self.scalar_type();
}

bool prod_on_card(const at::Tensor& self, at::ScalarType t) {
    return self.is_privateuseone() && !self.is_complex() &&
           (is_float(t) || t == at::kLong || t == at::kInt);
}

at::Tensor prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
    const at::ScalarType t = prod_type(self, dtype);
    if (!prod_on_card(self, t)) return fallback_to_cpu<ATEN_OP(prod)>(self, dtype);
    c10::DeviceGuard guard(self.device());
    return tree_prod(self.to(t).reshape({-1}), 0).reshape({});
}

at::Tensor& prod_out(const at::Tensor& self, int64_t dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
    const at::ScalarType t = prod_type(self, dtype);
    if (!prod_on_card(self, t) || out.scalar_type() != t || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(prod, int_out)>(self, dim, keepdim, dtype, out);
    c10::DeviceGuard guard(self.device());
    const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    at::Tensor r = self.dim() ? tree_prod(self.to(t), d) : self.to(t);
    if (!keepdim && self.dim()) r = r.squeeze(d);
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

at::Tensor count_nonzero(const at::Tensor& self, at::IntArrayRef dim) {
    if (!self.is_privateuseone() || self.is_complex())
        return fallback_to_cpu<ATEN_OP2(count_nonzero, dim_IntList)>(self, dim);
    c10::DeviceGuard guard(self.device());
    const at::Tensor nz = self.scalar_type() == at::kBool ? self : self.ne(0);
    if (dim.empty()) return nz.sum(at::kLong);
    return nz.sum(dim, /*keepdim=*/false, at::kLong);
}

at::Tensor& argmin_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                       at::Tensor& out) {
    const at::ScalarType t = self.scalar_type();
    // bool: the CPU's error ("not implemented for 'Bool'") through the fallback
    if (!self.is_privateuseone() ||
        !(is_float(t) || at::isIntegralType(t, /*includeBool=*/false)) ||
        out.scalar_type() != at::kLong || self.numel() == 0)  // the CPU's error for an empty input
        return fallback_to_cpu<ATEN_OP2(argmin, out)>(self, dim, keepdim, out);
    c10::DeviceGuard guard(self.device());
    if (is_float(t)) return at::argmax_out(out, self.neg(), dim, keepdim);
    if (int_arg_extreme(self, dim, keepdim, /*largest=*/false, out)) return out;
    return fallback_to_cpu<ATEN_OP2(argmin, out)>(self, dim, keepdim, out);
}

// torch.min(x, dim): amin and argmin along the dim (the value and index of the first NaN, as
// torch gives them).
std::tuple<at::Tensor&, at::Tensor&> min_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                 at::Tensor& values, at::Tensor& indices) {
    const at::ScalarType t = self.scalar_type();
    if (self.is_privateuseone() && t == at::kBool && self.numel() > 0 &&
        values.scalar_type() == t && indices.scalar_type() == at::kLong) {
        // bools as their bytes (0 or 1), read back as bool (torch.distributions' checks)
        c10::DeviceGuard guard(self.device());
        auto [v, i] = at::min(self.view(at::kByte), dim, keepdim);
        at::native::resize_output(values, v.sizes());
        values.copy_(v.view(at::kBool));
        at::native::resize_output(indices, i.sizes());
        indices.copy_(i);
        return {values, indices};
    }
    if (!self.is_privateuseone() || !(is_float(t) || at::isIntegralType(t, false)) ||
        self.numel() == 0 || values.scalar_type() != t || indices.scalar_type() != at::kLong)
        return fallback_to_cpu<ATEN_OP2(min, dim_min)>(self, dim, keepdim, values, indices);
    c10::DeviceGuard guard(self.device());
    const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    const at::Tensor v = self.dim() ? self.amin(d, keepdim) : self.clone();
    at::native::resize_output(values, v.sizes());
    values.copy_(v);
    argmin_out(self, d, keepdim, indices);
    return {values, indices};
}

}  // namespace

bool int_arg_extreme(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, bool largest,
                     at::Tensor& out) {
    if (!self.is_privateuseone() || !is_int_dtype(self.scalar_type()) ||
        self.scalar_type() == at::kBool || self.numel() == 0 || out.scalar_type() != at::kLong)
        return false;
    c10::DeviceGuard guard(self.device());
    const at::Tensor flat = dim ? self : self.reshape({-1});
    if (flat.dim() == 0) {
        out.resize_({}).zero_();
        return true;
    }
    const int64_t d = dim ? at::maybe_wrap_dim(*dim, flat.dim()) : 0;
    const int64_t n = flat.size(d);
    std::vector<int64_t> view(flat.dim(), 1);
    view[d] = n;
    const at::Tensor pos = at::arange(n, flat.options().dtype(at::kLong)).view(view);
    const at::Tensor extreme =
        largest ? flat.amax(d, /*keepdim=*/true) : flat.amin(d, /*keepdim=*/true);
    // the positions of the others pushed past the end: the smallest left is the first extreme
    at::Tensor r = (pos + flat.ne(extreme).to(at::kLong) * n).amin(d, /*keepdim=*/true);
    if (!keepdim) {
        r = r.squeeze(d);
    } else if (!dim) {
        r = r.view(std::vector<int64_t>(self.dim(), 1));
    }
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return true;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("min.dim_min", TORCH_FN(min_dim_out));
    m.impl("var.correction", TORCH_FN(var));
    m.impl("std.correction", TORCH_FN(std_));
    m.impl("var_mean.correction", TORCH_FN(var_mean));
    m.impl("std_mean.correction", TORCH_FN(std_mean));
    m.impl("prod", TORCH_FN(prod));
    m.impl("prod.int_out", TORCH_FN(prod_out));
    m.impl("count_nonzero.dim_IntList", TORCH_FN(count_nonzero));
    m.impl("argmin.out", TORCH_FN(argmin_out));
}

}  // namespace torch_spyre::aten
