// Matrix products on the card through libspyre's op library: mm, bmm, addmm (torch.nn.Linear's
// x @ W^T + b is addmm with a transposed view of W, which the library reads in place), baddbmm.
// Anything the library does not take runs on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Elementwise.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool float_pair(const at::Tensor& a, const at::Tensor& b) {
    const auto t = a.scalar_type();
    return t == b.scalar_type() && (t == at::kFloat || t == at::kHalf || t == at::kBFloat16);
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
    if (!float_pair(a, b) || a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(0))
        return fallback_to_cpu<ATEN_OP(mm)>(a, b);
    c10::DeviceGuard guard(a.device());
    at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
    if (out.numel() == 0 || a.size(1) == 0) return out.zero_();  // empty, or an empty sum
    const spyre_tensor ta = op_tensor(a), tb = op_tensor(b), to = op_tensor(out);
    if (!op_ran("aten::mm", spyre_op_matmul(op_stream(out), &ta, &tb, &to)))
        return fallback_to_cpu<ATEN_OP(mm)>(a, b);
    return out;
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
    if (!float_pair(a, b) || a.dim() != 3 || b.dim() != 3 || a.size(0) != b.size(0) ||
        a.size(2) != b.size(1))
        return fallback_to_cpu<ATEN_OP(bmm)>(a, b);
    c10::DeviceGuard guard(a.device());
    at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
    if (out.numel() == 0 || a.size(2) == 0) return out.zero_();  // empty, or an empty sum
    const spyre_tensor ta = op_tensor(a), tb = op_tensor(b), to = op_tensor(out);
    if (!op_ran("aten::bmm", spyre_op_matmul(op_stream(out), &ta, &tb, &to)))
        return fallback_to_cpu<ATEN_OP(bmm)>(a, b);
    return out;
}

// prod = alpha * prod, then out = prod + beta * self (self broadcast; not read when beta = 0,
// so NaN in it does not propagate): the scaling of addmm and baddbmm as elementwise passes.
bool scale_and_add(const char* name, const at::Tensor& prod, const at::Tensor& self, double beta,
                   double alpha, const at::Tensor& out) {
    if (alpha != 1.0 &&
        !binary_into(name, SPYRE_BINARY_MUL, prod, Operand{at::Tensor(), alpha}, 1.0, prod))
        return false;
    if (beta == 0.0) {
        finish_output(out, prod);
        return true;
    }
    return binary_into(name, SPYRE_BINARY_ADD, prod, Operand{self, 0.0}, beta, out);
}

// beta * self + alpha * (m1 @ m2). A bias row ([N] or [1, N]) with beta = alpha = 1 is the
// linear layer's case: one spyre_op_linear, the bias added in the matmul's epilogue. Other
// scalings and any self that broadcasts to [M, N]: the product, then elementwise passes.
at::Tensor addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
    const char* name = "aten::addmm";
    const bool products =
        float_pair(m1, m2) && m1.dim() == 2 && m2.dim() == 2 && m1.size(1) == m2.size(0) &&
        m1.size(1) > 0 && self.is_privateuseone() &&
        (self.scalar_type() == m1.scalar_type() || self.scalar_type() == at::kFloat) &&
        real_number(alpha) && real_number(beta);
    if (products && m1.size(0) > 0 && m2.size(1) > 0) {
        c10::DeviceGuard guard(m1.device());
        const double a = alpha.toDouble(), b = beta.toDouble();
        at::Tensor out = at::empty({m1.size(0), m2.size(1)}, m1.options());
        const bool bias_row = (self.dim() == 1 || (self.dim() == 2 && self.size(0) == 1)) &&
                              self.size(-1) == m2.size(1) && self.is_contiguous();
        if (bias_row && a == 1.0 && b == 1.0) {
            const at::Tensor w = m2.t();  // the [N, K] weight (a view)
            const at::Tensor bias = self.reshape({self.size(-1)});
            const spyre_tensor tx = op_tensor(m1), tw = op_tensor(w), tb = op_tensor(bias),
                               to = op_tensor(out);
            if (op_ran(name,
                       spyre_op_linear(op_stream(out), &tx, &tw, &tb, SPYRE_ACTIVATION_NONE, &to)))
                return out;
        } else if (at::is_expandable_to(self.sizes(), out.sizes())) {
            const spyre_tensor t1 = op_tensor(m1), t2 = op_tensor(m2), to = op_tensor(out);
            if (op_ran(name, spyre_op_matmul(op_stream(out), &t1, &t2, &to)) &&
                scale_and_add(name, out, self, b, a, out))
                return out;
        }
    }
    return fallback_to_cpu<ATEN_OP(addmm)>(self, m1, m2, beta, alpha);
}

// out = beta * self + alpha * (b1 @ b2) per batch: the product on the matrix unit, the scaling
// and the sum with self (broadcast) as elementwise passes.
at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                        const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
    const char* name = "aten::baddbmm";
    if (float_pair(b1, b2) && b1.dim() == 3 && b2.dim() == 3 && b1.size(0) == b2.size(0) &&
        b1.size(2) == b2.size(1) && out.scalar_type() == b1.scalar_type() &&
        (self.scalar_type() == b1.scalar_type() || self.scalar_type() == at::kFloat) &&
        self.is_privateuseone() && b1.size(2) > 0 && real_number(alpha) && real_number(beta)) {
        c10::DeviceGuard guard(b1.device());
        at::native::resize_output(out, {b1.size(0), b1.size(1), b2.size(2)});
        if (out.numel() == 0) return out;
        const double a = alpha.toDouble(), b = beta.toDouble();
        const at::Tensor prod =
            b == 0.0 ? writable_output(out) : at::empty(out.sizes(), out.options());
        const spyre_tensor t1 = op_tensor(b1), t2 = op_tensor(b2), tp = op_tensor(prod);
        if (op_ran(name, spyre_op_matmul(op_stream(prod), &t1, &t2, &tp)) &&
            scale_and_add(name, prod, self, b, a, out))
            return out;
    }
    return fallback_to_cpu<ATEN_OP2(baddbmm, out)>(self, b1, b2, beta, alpha, out);
}

// The out= forms (torch.compile's extern kernels call them): the functional kernel, then one
// device copy into `out`.
at::Tensor& into(const at::Tensor& r, at::Tensor& out) {
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    return into(aten::mm(a, b), out);
}

at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    return into(aten::bmm(a, b), out);
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
    return into(aten::addmm(self, m1, m2, beta, alpha), out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("mm.out", TORCH_FN(mm_out));
    m.impl("bmm.out", TORCH_FN(bmm_out));
    m.impl("addmm.out", TORCH_FN(addmm_out));
    m.impl("mm", TORCH_FN(mm));
    m.impl("bmm", TORCH_FN(bmm));
    m.impl("addmm", TORCH_FN(addmm));
    m.impl("baddbmm.out", TORCH_FN(baddbmm_out));
}

}  // namespace torch_spyre::aten
