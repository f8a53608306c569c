// Matrix products on the card through libspyre's op library: mm, bmm, addmm (torch.nn.Linear's
// x @ W^T + b is addmm with a transposed view of W, which the library reads in place), baddbmm.
// int8 and uint8 products run on the matrix unit (I8 MM, int32 sums; torch._int_mm too), wider
// integers as elementwise products summed on the card's exact integer ALU. Anything else the
// library does not take runs on the CPU fallback.
//
// And the library's fused blocks as spyre:: operators, which torch.compile's Spyre backend puts
// in place of the patterns they compute (torch_spyre/_inductor/patterns.py):
//   spyre::linear(x, weight, bias, activation) = act(x @ weight^T + bias): one spyre_op_linear;
//   spyre::mlp(x, w_gate, w_up, w_down, activation) = (act(x w_gate^T) * (x w_up^T)) w_down^T
//     (w_gate None: act(x w_up^T) w_down^T): one spyre_op_mlp.
// A case the library refuses runs as the eager spyre kernels of the pieces (their eager form).
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "Composed.h"
#include "Elementwise.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool float_pair(const at::Tensor& a, const at::Tensor& b) {
    const auto t = a.scalar_type();
    return t == b.scalar_type() && (t == at::kFloat || t == at::kHalf || t == at::kBFloat16);
}

// spyre_op_matmul, and when the library refuses an operand's layout (a transposed A, as in
// the weight gradient grad^T @ x, or rows and columns both strided, or a dense one whose size-1
// dims carry odd strides) once more with the operands made dense row-major (a copy on the card
// where they are not dense): one extra pass over that operand instead of the
// CPU round trip of the fallback.
// A dense operand with row-major strides: torch calls a tensor contiguous whatever the strides
// of its size-1 dims are (a permuted gradient [.., 1] keeps its old stride there), the library
// reads the strides as given.
at::Tensor dense_row_major(const at::Tensor& t) {
    if (!t.is_contiguous()) return t.contiguous();
    return t.as_strided(t.sizes(), c10::contiguous_strides(t.sizes()), t.storage_offset());
}

// `operands`: the element type the library reads a and b as (uint8 bytes as int8).
spyre_status matmul_on_card(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                            std::optional<spyre_dtype> operands = std::nullopt) {
    auto tensor = [&](const at::Tensor& t) {
        spyre_tensor r = op_tensor(t);
        if (operands) r.dtype = *operands;
        return r;
    };
    const spyre_tensor ta = tensor(a), tb = tensor(b), to = op_tensor(out);
    const spyre_status st = spyre_op_matmul(op_stream(out), &ta, &tb, &to);
    if (st != SPYRE_ERROR_NOT_SUPPORTED) return st;
    const at::Tensor da = dense_row_major(a), db = dense_row_major(b);
    if (da.strides() == a.strides() && db.strides() == b.strides()) return st;
    const spyre_tensor tda = tensor(da), tdb = tensor(db);
    return spyre_op_matmul(op_stream(out), &tda, &tdb, &to);
}

bool int_pair(const at::Tensor& a, const at::Tensor& b) {
    const auto t = a.scalar_type();
    return a.is_privateuseone() && b.is_privateuseone() && a.device() == b.device() &&
           t == b.scalar_type() && is_int_dtype(t) && t != at::kBool;
}

// int8 and uint8 products [.., M, K] @ [.., K, N] on the matrix unit (I8 MM: exact products
// summed in int32, wrapping), in int32 (torch._int_mm) or in the operands' type (mm, bmm: the
// int32 sums cast with wrapping, the CPU's wrapping byte sums). uint8 bytes read as int8 change
// each product by a multiple of 256, which leaves the low 8 bits, the uint8 result, as they are.
// Nothing if the library refuses the layout.
std::optional<at::Tensor> byte_product(const char* name, const at::Tensor& a, const at::Tensor& b,
                                       at::ScalarType result) {
    std::vector<int64_t> sizes(a.sizes().begin(), a.sizes().end());
    sizes.back() = b.size(-1);
    at::Tensor acc = at::empty(sizes, a.options().dtype(at::kInt));
    if (acc.numel() != 0 && a.size(-1) == 0) acc.zero_();  // an empty sum
    if (acc.numel() != 0 && a.size(-1) != 0 &&
        !op_ran(name, matmul_on_card(a, b, acc, SPYRE_DTYPE_INT8)))
        return std::nullopt;
    return result == at::kInt ? acc : acc.to(result);
}

bool byte_pair(const at::Tensor& a, const at::Tensor& b) {
    return int_pair(a, b) && (a.scalar_type() == at::kChar || a.scalar_type() == at::kByte);
}

// An integer product [B, M, K] @ [B, K, N] of wider integers (int16, int32, int64): the matrix
// unit multiplies bytes only, so elementwise products summed over K in the operands' type on
// the card's exact VINT, wrapping as the CPU's integer gemm does; in blocks of rows of at most
// 2^22 products.
at::Tensor int_product(const at::Tensor& a, const at::Tensor& b) {
    const auto t = a.scalar_type();
    const int64_t B = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
    at::Tensor out = at::empty({B, M, N}, a.options());
    if (out.numel() == 0) return out;
    if (K == 0) return out.zero_();
    const int64_t rows = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(1, B * K * N));
    const at::Tensor bb = b.unsqueeze(1);  // [B, 1, K, N]
    for (int64_t m = 0; m < M; m += rows) {
        const int64_t n = std::min(rows, M - m);
        const at::Tensor p = a.narrow(1, m, n).unsqueeze(3).mul(bb);  // [B, n, K, N]
        out.narrow(1, m, n).copy_(p.sum(2, /*keepdim=*/false, t));
    }
    return out;
}

// torch._int_mm: int8 [M, K] @ int8 [K, N] -> int32 [M, N] (torchao's int8 linears).
at::Tensor& int_mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    if (a.is_privateuseone() && b.is_privateuseone() && out.is_privateuseone() &&
        a.device() == b.device() && out.device() == a.device() && a.scalar_type() == at::kChar &&
        b.scalar_type() == at::kChar && out.scalar_type() == at::kInt && a.dim() == 2 &&
        b.dim() == 2 && a.size(1) == b.size(0)) {
        c10::DeviceGuard guard(a.device());
        if (auto r = byte_product("aten::_int_mm", a, b, at::kInt)) {
            at::native::resize_output(out, r->sizes());
            out.copy_(*r);
            return out;
        }
    }
    return fallback_to_cpu<ATEN_OP2(_int_mm, out)>(a, b, out);
}

at::Tensor int_mm(const at::Tensor& a, const at::Tensor& b) {
    if (a.is_privateuseone() && b.is_privateuseone() && a.device() == b.device() &&
        a.scalar_type() == at::kChar && b.scalar_type() == at::kChar && a.dim() == 2 &&
        b.dim() == 2 && a.size(1) == b.size(0)) {
        c10::DeviceGuard guard(a.device());
        if (auto r = byte_product("aten::_int_mm", a, b, at::kInt)) return *r;
    }
    return fallback_to_cpu<ATEN_OP(_int_mm)>(a, b);
}

// torch._weight_int8pack_mm(x [M, K], w int8 [N, K], scales [N]) = (x @ w^T) * scales, the
// weight-only int8 linear: one spyre_op_linear_int8_weight (the weight streams as int8 and is
// converted on the cores; fp32 sums, the scales in the epilogue, one rounding).
at::Tensor weight_int8pack_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scales) {
    if (x.is_privateuseone() && w.is_privateuseone() && scales.is_privateuseone() &&
        x.device() == w.device() && scales.device() == x.device() && is_float(x.scalar_type()) &&
        w.scalar_type() == at::kChar && scales.scalar_type() == x.scalar_type() && x.dim() == 2 &&
        w.dim() == 2 && w.size(1) == x.size(1) && scales.dim() == 1 &&
        scales.size(0) == w.size(0)) {
        c10::DeviceGuard guard(x.device());
        at::Tensor out = at::empty({x.size(0), w.size(0)}, x.options());
        if (out.numel() == 0 || x.size(1) == 0) return out.zero_();
        const spyre_tensor tx = op_tensor(x), tw = op_tensor(w), ts = op_tensor(scales),
                           to = op_tensor(out);
        if (op_ran("aten::_weight_int8pack_mm",
                   spyre_op_linear_int8_weight(op_stream(out), &tx, &tw, &ts, nullptr,
                                               SPYRE_ACTIVATION_NONE, &to)))
            return out;
    }
    return fallback_to_cpu<ATEN_OP(_weight_int8pack_mm)>(x, w, scales);
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
    if (int_pair(a, b) && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0)) {
        c10::DeviceGuard guard(a.device());
        if (byte_pair(a, b))
            if (auto r = byte_product("aten::mm", a, b, a.scalar_type())) return *r;
        return int_product(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0);
    }
    if (!float_pair(a, b) || a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(0))
        return fallback_to_cpu<ATEN_OP(mm)>(a, b);
    c10::DeviceGuard guard(a.device());
    at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
    if (out.numel() == 0 || a.size(1) == 0) return out.zero_();  // empty, or an empty sum
    if (!op_ran("aten::mm", matmul_on_card(a, b, out))) return fallback_to_cpu<ATEN_OP(mm)>(a, b);
    return out;
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
    if (int_pair(a, b) && a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) &&
        a.size(2) == b.size(1)) {
        c10::DeviceGuard guard(a.device());
        if (byte_pair(a, b))
            if (auto r = byte_product("aten::bmm", a, b, a.scalar_type())) return *r;
        return int_product(a, b);
    }
    if (!float_pair(a, b) || a.dim() != 3 || b.dim() != 3 || a.size(0) != b.size(0) ||
        a.size(2) != b.size(1))
        return fallback_to_cpu<ATEN_OP(bmm)>(a, b);
    c10::DeviceGuard guard(a.device());
    at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
    if (out.numel() == 0 || a.size(2) == 0) return out.zero_();  // empty, or an empty sum
    if (!op_ran("aten::bmm", matmul_on_card(a, b, out))) return fallback_to_cpu<ATEN_OP(bmm)>(a, b);
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

// r into `out`, resized to r's shape: one device copy.
at::Tensor& into(const at::Tensor& r, at::Tensor& out) {
    at::native::resize_output(out, r.sizes());
    out.copy_(r);
    return out;
}

// Integer addmm / baddbmm / addbmm: alpha and beta must be integers (torch refuses a float
// scale for integer operands, and its error stays the CPU's); the product on the card, then
// beta * self + alpha * prod as integer passes, wrapping as the CPU's integer gemm does (a sum
// modulo 2^bits does not depend on the order of its terms).
bool int_scaled(const at::Tensor& self, const at::Tensor& m1, const c10::Scalar& beta,
                const c10::Scalar& alpha) {
    return self.is_privateuseone() && self.device() == m1.device() &&
           self.scalar_type() == m1.scalar_type() && alpha.isIntegral(/*includeBool=*/false) &&
           beta.isIntegral(/*includeBool=*/false);
}

at::Tensor int_scaled_sum(at::Tensor prod, const at::Tensor& self, const c10::Scalar& beta,
                          const c10::Scalar& alpha) {
    if (alpha.toLong() != 1) prod.mul_(alpha);
    if (beta.toLong() != 0) prod.add_(self, beta);  // self broadcast; not read when beta = 0
    return prod;
}

// beta * self + alpha * (m1 @ m2). A bias row ([N] or [1, N]) with beta = alpha = 1 is the
// linear layer's case: one spyre_op_linear, the bias added in the matmul's epilogue. Other
// scalings and any self that broadcasts to [M, N]: the product, then elementwise passes.
at::Tensor addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
    const char* name = "aten::addmm";
    if (int_pair(m1, m2) && m1.dim() == 2 && m2.dim() == 2 && m1.size(1) == m2.size(0) &&
        int_scaled(self, m1, beta, alpha) &&
        at::is_expandable_to(self.sizes(), {m1.size(0), m2.size(1)})) {
        c10::DeviceGuard guard(m1.device());
        return int_scaled_sum(aten::mm(m1, m2), self, beta, alpha);
    }
    const bool products =
        float_pair(m1, m2) && m1.dim() == 2 && m2.dim() == 2 && m1.size(1) == m2.size(0) &&
        m1.size(1) > 0 && self.is_privateuseone() &&
        (self.scalar_type() == m1.scalar_type() || self.scalar_type() == at::kFloat) &&
        real_number(alpha) && real_number(beta);
    // no rows or no columns (a mixture-of-experts layer's expert that got no token): an
    // empty result, nothing to compute
    if (products && (m1.size(0) == 0 || m2.size(1) == 0) &&
        at::is_expandable_to(self.sizes(), {m1.size(0), m2.size(1)}))
        return at::empty({m1.size(0), m2.size(1)}, m1.options());
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
            if (op_ran(name, matmul_on_card(m1, m2, out)) &&
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
    if (int_pair(b1, b2) && b1.dim() == 3 && b2.dim() == 3 && b1.size(0) == b2.size(0) &&
        b1.size(2) == b2.size(1) && out.is_privateuseone() &&
        out.scalar_type() == b1.scalar_type() && int_scaled(self, b1, beta, alpha) &&
        at::is_expandable_to(self.sizes(), {b1.size(0), b1.size(1), b2.size(2)})) {
        c10::DeviceGuard guard(b1.device());
        return into(int_scaled_sum(aten::bmm(b1, b2), self, beta, alpha), out);
    }
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
        if (op_ran(name, matmul_on_card(b1, b2, prod)) &&
            scale_and_add(name, prod, self, b, a, out))
            return out;
    }
    return fallback_to_cpu<ATEN_OP2(baddbmm, out)>(self, b1, b2, beta, alpha, out);
}

// out = beta * self + alpha * sum over the batch of b1[i] @ b2[i]: the products on the matrix
// unit, their sum over the batch and the scaling as card ops (self not read when beta = 0).
at::Tensor& addbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                       const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
    if (int_pair(b1, b2) && b1.dim() == 3 && b2.dim() == 3 && b1.size(0) == b2.size(0) &&
        b1.size(2) == b2.size(1) && out.is_privateuseone() &&
        out.scalar_type() == b1.scalar_type() && int_scaled(self, b1, beta, alpha) &&
        at::is_expandable_to(self.sizes(), {b1.size(1), b2.size(2)})) {
        c10::DeviceGuard guard(b1.device());
        const at::Tensor prod = aten::bmm(b1, b2).sum(0, /*keepdim=*/false, b1.scalar_type());
        return into(int_scaled_sum(prod, self, beta, alpha), out);  // self read before out
    }
    if (float_pair(b1, b2) && b1.dim() == 3 && b2.dim() == 3 && b1.size(0) == b2.size(0) &&
        b1.size(2) == b2.size(1) && b1.size(0) > 0 && b1.size(2) > 0 && out.is_privateuseone() &&
        out.scalar_type() == b1.scalar_type() && self.is_privateuseone() &&
        self.scalar_type() == b1.scalar_type() &&
        at::is_expandable_to(self.sizes(), {b1.size(1), b2.size(2)}) && real_number(alpha) &&
        real_number(beta) && !out.is_alias_of(b1) && !out.is_alias_of(b2)) {
        c10::DeviceGuard guard(b1.device());
        // 16-bit: the products and their sum in fp32, rounded once
        at::Tensor r = at::bmm(widened(b1), widened(b2)).sum(0);
        if (alpha.toDouble() != 1.0) r = r * alpha;
        if (beta.toDouble() != 0.0)
            r = r + (beta.toDouble() == 1.0 ? widened(self) : widened(self) * beta);
        at::native::resize_output(out, r.sizes());
        out.copy_(r);
        return out;
    }
    return fallback_to_cpu<ATEN_OP2(addbmm, out)>(self, b1, b2, beta, alpha, out);
}

at::Tensor addbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                  const c10::Scalar& beta, const c10::Scalar& alpha) {
    at::Tensor out = at::empty({0}, b1.options());
    return addbmm_out(self, b1, b2, beta, alpha, out);
}

at::Tensor& addbmm_(at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                    const c10::Scalar& beta, const c10::Scalar& alpha) {
    // a self of another shape keeps torch's error (in place, it cannot be resized)
    if (b1.dim() != 3 || b2.dim() != 3 || self.dim() != 2 || self.size(0) != b1.size(1) ||
        self.size(1) != b2.size(2))
        return fallback_to_cpu<ATEN_OP(addbmm_)>(self, b1, b2, beta, alpha);
    return addbmm_out(self, b1, b2, beta, alpha, self);  // self is read before it is written
}

// The out= forms (torch.compile's extern kernels call them): straight into a dense `out` of the
// product's type when the library takes the case, else the functional kernel, then one device
// copy into `out` (into()).

bool direct_out(const at::Tensor& m1, const at::Tensor& m2, at::Tensor& out) {
    if (!float_pair(m1, m2) || m1.dim() != 2 || m2.dim() != 2 || m1.size(1) != m2.size(0) ||
        m1.size(1) == 0 || !out.is_privateuseone() || out.scalar_type() != m1.scalar_type() ||
        out.device() != m1.device() || out.is_alias_of(m1) || out.is_alias_of(m2))
        return false;
    at::native::resize_output(out, {m1.size(0), m2.size(1)});
    return out.numel() > 0 && is_stick_dense(out);
}

at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    if (direct_out(a, b, out)) {
        c10::DeviceGuard guard(a.device());
        if (op_ran("aten::mm", matmul_on_card(a, b, out))) return out;
    }
    return into(aten::mm(a, b), out);
}

at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    return into(aten::bmm(a, b), out);
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
    // the linear layer's case (see addmm): one spyre_op_linear into out
    if (real_number(alpha) && real_number(beta) && alpha.toDouble() == 1.0 &&
        beta.toDouble() == 1.0 && self.is_privateuseone() &&
        self.scalar_type() == m1.scalar_type() && self.is_contiguous() && !out.is_alias_of(self) &&
        (self.dim() == 1 || (self.dim() == 2 && self.size(0) == 1)) && m2.dim() == 2 &&
        self.size(-1) == m2.size(1) && direct_out(m1, m2, out)) {
        c10::DeviceGuard guard(m1.device());
        const at::Tensor w = m2.t(), bias = self.reshape({self.size(-1)});
        const spyre_tensor tx = op_tensor(m1), tw = op_tensor(w), tb = op_tensor(bias),
                           to = op_tensor(out);
        if (op_ran("aten::addmm",
                   spyre_op_linear(op_stream(out), &tx, &tw, &tb, SPYRE_ACTIVATION_NONE, &to)))
            return out;
    }
    return into(aten::addmm(self, m1, m2, beta, alpha), out);
}

std::optional<spyre_activation> activation_of(c10::string_view a) {
    if (a == "none") return SPYRE_ACTIVATION_NONE;
    if (a == "relu") return SPYRE_ACTIVATION_RELU;
    if (a == "gelu") return SPYRE_ACTIVATION_GELU;
    if (a == "gelu_tanh") return SPYRE_ACTIVATION_GELU_TANH;
    if (a == "silu") return SPYRE_ACTIVATION_SILU;
    return std::nullopt;
}

spyre_activation checked_activation(const char* op, c10::string_view a) {
    const auto act = activation_of(a);
    TORCH_CHECK(act, op, ": unknown activation '", a, "' (none, relu, gelu, gelu_tanh, silu)");
    return *act;
}

at::Tensor activate(const at::Tensor& y, spyre_activation act) {
    switch (act) {
        case SPYRE_ACTIVATION_RELU:
            return at::relu(y);
        case SPYRE_ACTIVATION_GELU:
            return at::gelu(y, "none");
        case SPYRE_ACTIVATION_GELU_TANH:
            return at::gelu(y, "tanh");
        case SPYRE_ACTIVATION_SILU:
            return at::silu(y);
        default:
            return y;
    }
}

// fp32/fp16/bf16 spyre tensors of one type and card
bool library_operands(std::initializer_list<const at::Tensor*> ts) {
    const at::Tensor& first = **ts.begin();
    for (const at::Tensor* t : ts)
        if (!t->is_privateuseone() || !is_float(t->scalar_type()) ||
            t->scalar_type() != first.scalar_type() || t->device() != first.device())
            return false;
    return true;
}

// The eager forms: what the patterns computed, op by op (any device).
at::Tensor linear_eager(const at::Tensor& x, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, c10::string_view activation) {
    return activate(at::linear(x, weight, bias), checked_activation("spyre::linear", activation));
}

at::Tensor mlp_eager(const at::Tensor& x, const std::optional<at::Tensor>& w_gate,
                     const at::Tensor& w_up, const at::Tensor& w_down,
                     c10::string_view activation) {
    const spyre_activation act = checked_activation("spyre::mlp", activation);
    const at::Tensor h = w_gate && w_gate->defined()
                             ? activate(at::linear(x, *w_gate), act) * at::linear(x, w_up)
                             : activate(at::linear(x, w_up), act);
    return at::linear(h, w_down);
}

// The output of a linear over x: x's leading dims, out_features, x's type and card.
at::Tensor linear_output(const at::Tensor& x, int64_t out_features) {
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes.back() = out_features;
    return at::empty(sizes, x.options());
}

at::Tensor linear_spyre(const at::Tensor& x, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, c10::string_view activation) {
    const spyre_activation act = checked_activation("spyre::linear", activation);
    const bool has_bias = bias && bias->defined();
    const bool takes = library_operands({&x, &weight}) && weight.dim() == 2 && x.dim() >= 1 &&
                       x.dim() <= SPYRE_TENSOR_MAX_DIMS && x.size(-1) == weight.size(1) &&
                       x.size(-1) > 0 && x.numel() > 0 && weight.size(0) > 0 &&
                       (!has_bias || (library_operands({&x, &*bias}) && bias->dim() == 1 &&
                                      bias->size(0) == weight.size(0) && bias->is_contiguous()));
    if (takes) {
        c10::DeviceGuard guard(x.device());
        at::Tensor out = linear_output(x, weight.size(0));
        spyre_tensor tb;
        const spyre_tensor tx = op_tensor(x), tw = op_tensor(weight), to = op_tensor(out);
        if (has_bias) tb = op_tensor(*bias);
        if (op_ran("spyre::linear",
                   spyre_op_linear(op_stream(out), &tx, &tw, has_bias ? &tb : nullptr, act, &to)))
            return out;
    }
    return linear_eager(x, weight, bias, activation);
}

// spyre::linear_int8_weight: activation((x @ weight^T) * scales + bias), weight int8
// [out_features, in] with one scale per output feature (torch_spyre.quantization's linears).
// The reference (CPU, meta): fp32 sums of the exact products, scaled, biased and activated in
// fp32, rounded once to x's type: what the card's epilogue computes.
void check_int8_weight(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales,
                       const std::optional<at::Tensor>& bias) {
    const char* op = "spyre::linear_int8_weight";
    TORCH_CHECK(at::isFloatingType(x.scalar_type()) && x.dim() >= 1, op,
                ": x must be a float tensor [..., in_features], got ", x.scalar_type(), " ",
                x.sizes());
    TORCH_CHECK(
        weight.scalar_type() == at::kChar && weight.dim() == 2 && weight.size(1) == x.size(-1), op,
        ": weight must be int8 [out_features, ", x.size(-1), "], got ", weight.scalar_type(), " ",
        weight.sizes());
    TORCH_CHECK(at::isFloatingType(scales.scalar_type()) && scales.dim() == 1 &&
                    scales.size(0) == weight.size(0),
                op, ": scales must be a float tensor [", weight.size(0), "], got ",
                scales.scalar_type(), " ", scales.sizes());
    TORCH_CHECK(!bias || !bias->defined() ||
                    (at::isFloatingType(bias->scalar_type()) && bias->dim() == 1 &&
                     bias->size(0) == weight.size(0)),
                op, ": bias must be a float tensor [", weight.size(0), "]");
}

at::Tensor linear_int8_weight_eager(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& scales, const std::optional<at::Tensor>& bias,
                                    c10::string_view activation) {
    const spyre_activation act = checked_activation("spyre::linear_int8_weight", activation);
    check_int8_weight(x, weight, scales, bias);
    at::Tensor y = at::matmul(x.to(at::kFloat), weight.to(at::kFloat).t()) * scales.to(at::kFloat);
    if (bias && bias->defined()) y = y + bias->to(at::kFloat);
    return activate(y, act).to(x.scalar_type());
}

// One spyre_op_linear_int8_weight: the weight streams as int8, the bias and the activation run
// in its epilogue.
at::Tensor linear_int8_weight_spyre(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& scales, const std::optional<at::Tensor>& bias,
                                    c10::string_view activation) {
    const spyre_activation act = checked_activation("spyre::linear_int8_weight", activation);
    check_int8_weight(x, weight, scales, bias);
    const bool has_bias = bias && bias->defined();
    const bool takes =
        library_operands({&x}) && x.dim() <= SPYRE_TENSOR_MAX_DIMS && x.numel() > 0 &&
        x.size(-1) > 0 && weight.size(0) > 0 && weight.is_privateuseone() &&
        weight.device() == x.device() && scales.is_privateuseone() &&
        scales.device() == x.device() && scales.is_contiguous() &&
        (scales.scalar_type() == x.scalar_type() || scales.scalar_type() == at::kFloat) &&
        (!has_bias || (library_operands({&x, &*bias}) && bias->is_contiguous()));
    if (takes) {
        c10::DeviceGuard guard(x.device());
        at::Tensor out = linear_output(x, weight.size(0));
        spyre_tensor tb;
        const spyre_tensor tx = op_tensor(x), tw = op_tensor(weight), ts = op_tensor(scales),
                           to = op_tensor(out);
        if (has_bias) tb = op_tensor(*bias);
        if (op_ran("spyre::linear_int8_weight",
                   spyre_op_linear_int8_weight(op_stream(out), &tx, &tw, &ts,
                                               has_bias ? &tb : nullptr, act, &to)))
            return out;
    }
    return linear_int8_weight_eager(x, weight, scales, bias, activation);
}

at::Tensor mlp_spyre(const at::Tensor& x, const std::optional<at::Tensor>& w_gate,
                     const at::Tensor& w_up, const at::Tensor& w_down,
                     c10::string_view activation) {
    const spyre_activation act = checked_activation("spyre::mlp", activation);
    const bool gated = w_gate && w_gate->defined();
    const int64_t hidden = x.dim() >= 1 ? x.size(-1) : 0,
                  inter = w_up.dim() == 2 ? w_up.size(0) : 0;
    const bool takes = library_operands({&x, &w_up, &w_down}) &&
                       (!gated || library_operands({&x, &*w_gate})) && x.dim() >= 1 &&
                       x.numel() > 0 && hidden > 0 && inter > 0 && w_up.dim() == 2 &&
                       w_up.size(1) == hidden && w_down.dim() == 2 &&
                       w_down.sizes() == at::IntArrayRef{hidden, inter} &&
                       (!gated || w_gate->sizes() == w_up.sizes());
    if (takes) {
        c10::DeviceGuard guard(x.device());
        const at::Tensor x2 = x.reshape({-1, hidden});  // a view of a contiguous x
        at::Tensor out = at::empty(x.sizes(), x.options());
        spyre_tensor tg;
        const spyre_tensor tx = op_tensor(x2), tu = op_tensor(w_up), td = op_tensor(w_down),
                           to = op_tensor(out.view({-1, hidden}));
        if (gated) tg = op_tensor(*w_gate);
        if (op_ran("spyre::mlp",
                   spyre_op_mlp(op_stream(out), &tx, gated ? &tg : nullptr, &tu, &td, act, &to)))
            return out;
    }
    return mlp_eager(x, w_gate, w_up, w_down, activation);
}

// The Autograd kernels: inference only (torch.compile's pass makes these ops only when no
// gradient is wanted; they have no backward), below autograd through the dispatcher, so that a
// traced graph (the Python key) keeps the op whole.
at::Tensor linear_below_autograd(const at::Tensor& x, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias,
                                 c10::string_view activation) {
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("spyre::linear", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                              const std::optional<at::Tensor>&, c10::string_view)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(x, weight, bias, activation);
}

// spyre::linear_int8_weight under autograd: the fused op below autograd when no gradient is
// wanted (inference), else its reference composed of differentiable ops, so that a gradient
// reaches x (a frozen quantized layer inside a trained model), the scales and the bias.
at::Tensor linear_int8_weight_autograd(const at::Tensor& x, const at::Tensor& weight,
                                       const at::Tensor& scales,
                                       const std::optional<at::Tensor>& bias,
                                       c10::string_view activation) {
    if (at::GradMode::is_enabled() && (x.requires_grad() || scales.requires_grad() ||
                                       (bias && bias->defined() && bias->requires_grad())))
        return linear_int8_weight_eager(x, weight, scales, bias, activation);
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("spyre::linear_int8_weight", "")
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const std::optional<at::Tensor>&, c10::string_view)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(x, weight, scales, bias, activation);
}

at::Tensor mlp_below_autograd(const at::Tensor& x, const std::optional<at::Tensor>& w_gate,
                              const at::Tensor& w_up, const at::Tensor& w_down,
                              c10::string_view activation) {
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("spyre::mlp", "")
            .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&,
                              const at::Tensor&, const at::Tensor&, c10::string_view)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(x, w_gate, w_up, w_down, activation);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
    m.def("linear(Tensor x, Tensor weight, Tensor? bias=None, str activation=\"none\") -> Tensor");
    m.def(
        "mlp(Tensor x, Tensor? w_gate, Tensor w_up, Tensor w_down, str activation=\"silu\") -> "
        "Tensor");
    m.def(
        "linear_int8_weight(Tensor x, Tensor weight, Tensor scales, Tensor? bias=None, "
        "str activation=\"none\") -> Tensor");
}

TORCH_LIBRARY_IMPL(spyre, CompositeExplicitAutograd, m) {
    m.impl("linear", TORCH_FN(linear_eager));
    m.impl("mlp", TORCH_FN(mlp_eager));
    m.impl("linear_int8_weight", TORCH_FN(linear_int8_weight_eager));
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) {
    m.impl("linear", TORCH_FN(linear_spyre));
    m.impl("mlp", TORCH_FN(mlp_spyre));
    m.impl("linear_int8_weight", TORCH_FN(linear_int8_weight_spyre));
}

TORCH_LIBRARY_IMPL(spyre, Autograd, m) {
    m.impl("linear", TORCH_FN(linear_below_autograd));
    m.impl("mlp", TORCH_FN(mlp_below_autograd));
    m.impl("linear_int8_weight", TORCH_FN(linear_int8_weight_autograd));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_int_mm", TORCH_FN(int_mm));
    m.impl("_weight_int8pack_mm", TORCH_FN(weight_int8pack_mm));
    m.impl("_int_mm.out", TORCH_FN(int_mm_out));
    m.impl("mm.out", TORCH_FN(mm_out));
    m.impl("bmm.out", TORCH_FN(bmm_out));
    m.impl("addmm.out", TORCH_FN(addmm_out));
    m.impl("mm", TORCH_FN(mm));
    m.impl("bmm", TORCH_FN(bmm));
    m.impl("addmm", TORCH_FN(addmm));
    m.impl("baddbmm.out", TORCH_FN(baddbmm_out));
    m.impl("addbmm.out", TORCH_FN(addbmm_out));
    m.impl("addbmm", TORCH_FN(addbmm));
    m.impl("addbmm_", TORCH_FN(addbmm_));
}

}  // namespace torch_spyre::aten
