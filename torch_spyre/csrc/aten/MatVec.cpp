// Matrix-vector and vector-vector products as matrix products on the card (they were CPU
// fallbacks; torch.mv, x @ v with a 1-D operand, torch.dot, torch.inner of vectors):
// addmv(self, mat, vec) = beta self + alpha (mat @ vec[:, None])[:, 0], dot and vdot (real) =
// (a[None, :] @ b[:, None])[0, 0]. The product accumulates in fp32 as the library's mm does.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool same_float(const at::Tensor& a, const at::Tensor& b) {
    return a.is_privateuseone() && b.is_privateuseone() && a.scalar_type() == b.scalar_type() &&
           is_float(a.scalar_type());
}

at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
    // shapes torch refuses keep the CPU's errors
    if (!same_float(mat, vec) || !out.is_privateuseone() || mat.dim() != 2 || vec.dim() != 1 ||
        mat.size(1) != vec.size(0) || mat.size(1) == 0 ||
        !(self.is_privateuseone() || self.dim() == 0) || self.scalar_type() != mat.scalar_type() ||
        beta.isComplex() || alpha.isComplex())
        return fallback_to_cpu<ATEN_OP2(addmv, out)>(self, mat, vec, beta, alpha, out);
    c10::DeviceGuard guard(mat.device());
    at::Tensor r = at::mm(mat, vec.unsqueeze(1)).squeeze(1);
    if (alpha.toDouble() != 1.0) r = r * alpha;
    // beta 0 ignores self (NaN in it does not propagate), as torch's addmv
    if (beta.toDouble() != 0.0) r = r + (beta.toDouble() == 1.0 ? self : self * beta);
    return assign(out, r);
}

at::Tensor dot_of(const at::Tensor& a, const at::Tensor& b) {
    c10::DeviceGuard guard(a.device());
    return at::mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
}

bool vectors_on_card(const at::Tensor& a, const at::Tensor& b) {
    return same_float(a, b) && a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0) &&
           a.size(0) > 0;
}

at::Tensor dot(const at::Tensor& a, const at::Tensor& b) {
    if (!vectors_on_card(a, b)) return fallback_to_cpu<ATEN_OP(dot)>(a, b);
    return dot_of(a, b);
}

// the conjugate of a real vector is itself
at::Tensor vdot(const at::Tensor& a, const at::Tensor& b) {
    if (!vectors_on_card(a, b)) return fallback_to_cpu<ATEN_OP(vdot)>(a, b);
    return dot_of(a, b);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("addmv.out", TORCH_FN(addmv_out));
    m.impl("dot", TORCH_FN(dot));
    m.impl("vdot", TORCH_FN(vdot));
}

}  // namespace torch_spyre::aten
