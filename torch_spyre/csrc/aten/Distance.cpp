// Pairwise distances and the cross product on the card, composed of card ops:
// - _cdist_forward (torch.cdist): the CPU's two forms, the direct one (|x1_i - x2_j| reduced
//   over the last dim: p = 0 counts the differing coordinates, inf takes the largest, others
//   sum |d|^p and take the 1/p-th power) and, for p = 2 where torch picks it (compute_mode 1, or
//   0 with more than 25 rows), the matrix-product form with the CPU's operand layout. The direct
//   form runs in slices of x1's rows so that the [rows, R, M] differences stay bounded.
// - linalg_cross (torch.cross, torch.linalg.cross): the three components as products of
//   slices along dim, in the CPU's order.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// Differences held at once by the direct form (elements).
constexpr int64_t kDirectElements = int64_t{1} << 24;

at::Tensor direct_distance(const at::Tensor& x1, const at::Tensor& x2, double p) {
    const at::Tensor d = x1.unsqueeze(-2) - x2.unsqueeze(-3);  // [..., P, R, M]
    if (p == 0.0) return at::ne(d, 0).to(x1.scalar_type()).sum(-1);
    const at::Tensor a = at::abs(d);
    if (std::isinf(p)) return a.amax(-1);
    if (p == 1.0) return a.sum(-1);
    if (p == 2.0) return at::sqrt((a * a).sum(-1));
    return at::pow(at::pow(a, p).sum(-1), 1.0 / p);
}

at::Tensor euclidean_distance(const at::Tensor& x1, const at::Tensor& x2) {
    const at::Tensor n1 = x1.pow(2).sum(-1, true), n2 = x2.pow(2).sum(-1, true);
    const at::Tensor a = at::cat({x1.mul(-2), n1, at::ones_like(n1)}, -1);
    const at::Tensor b = at::cat({x2, at::ones_like(n2), n2}, -1);
    return a.matmul(b.mT()).clamp_min_(1e-30).sqrt_();
}

at::Tensor cdist_forward(const at::Tensor& x1, const at::Tensor& x2, double p,
                         std::optional<int64_t> compute_mode) {
    const bool ok = x1.is_privateuseone() && x2.is_privateuseone() &&
                    x1.scalar_type() == at::kFloat && x2.scalar_type() == at::kFloat &&
                    x1.dim() >= 2 && x2.dim() >= 2 && x1.size(-1) == x2.size(-1) &&
                    x1.numel() > 0 && x2.numel() > 0 && p >= 0 && !std::isnan(p) &&
                    x1.device() == x2.device();
    if (!ok) return fallback_to_cpu<ATEN_OP(_cdist_forward)>(x1, x2, p, compute_mode);
    c10::DeviceGuard guard(x1.device());
    const int64_t rows = x1.size(-2), cols = x2.size(-2), mode = compute_mode.value_or(0);
    if (p == 2.0 && (mode == 1 || (mode == 0 && (rows > 25 || cols > 25))))
        return euclidean_distance(x1, x2);
    const int64_t batch = std::max<int64_t>(1, x1.numel() / (rows * x1.size(-1)));
    const int64_t per_row = std::max<int64_t>(1, batch * cols * x1.size(-1));
    const int64_t step = std::max<int64_t>(1, kDirectElements / per_row);
    if (step >= rows) return direct_distance(x1, x2, p);
    std::vector<at::Tensor> parts;
    for (int64_t r = 0; r < rows; r += step)
        parts.push_back(direct_distance(x1.narrow(-2, r, std::min(step, rows - r)), x2, p));
    return at::cat(parts, -2);
}

at::Tensor& linalg_cross_out(const at::Tensor& self, const at::Tensor& other, int64_t dim,
                             at::Tensor& out) {
    const bool ok = self.is_privateuseone() && other.is_privateuseone() && out.is_privateuseone() &&
                    self.scalar_type() == other.scalar_type() && is_float(self.scalar_type()) &&
                    out.scalar_type() == self.scalar_type() && self.dim() == other.dim() &&
                    self.dim() > 0;
    if (ok) {
        const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
        bool broadcast = true;
        for (int64_t i = 0; i < self.dim(); i++)
            broadcast &= self.size(i) == other.size(i) || self.size(i) == 1 || other.size(i) == 1;
        if (self.size(d) == 3 && other.size(d) == 3 && broadcast && !out.is_alias_of(self) &&
            !out.is_alias_of(other)) {
            c10::DeviceGuard guard(self.device());
            auto a = [&](int64_t i) { return self.narrow(d, i, 1); };
            auto b = [&](int64_t i) { return other.narrow(d, i, 1); };
            const at::Tensor r = at::cat(
                {a(1) * b(2) - a(2) * b(1), a(2) * b(0) - a(0) * b(2), a(0) * b(1) - a(1) * b(0)},
                d);
            return assign(out, r);
        }
    }
    return fallback_to_cpu<ATEN_OP2(linalg_cross, out)>(self, other, dim, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_cdist_forward", TORCH_FN(cdist_forward));
    m.impl("linalg_cross.out", TORCH_FN(linalg_cross_out));
}

}  // namespace torch_spyre::aten
