// cumsum and cumprod on the card (spyre_op_scan) with the CPU's numerics: the input is cast to
// the output's dtype on the card first (torch promotes integers and bool to int64), then
// scanned along the dim in one launch. fp32 cumprod multiplies in fp32 (as CUDA does; the CPU
// multiplies in double: within N fp32 roundings of it, ops.md "Scans"). Integer cumsums of lines
// too long for one program scan in blocks (long_int_cumsum). Dtypes the library has no scan for
// and other slabs too large for a core's scratchpad run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

bool scan_type(at::ScalarType t) {
    return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kLong ||
           t == at::kInt || t == at::kChar || t == at::kByte;
}

// An integer cumsum along lines too long for one scan program: the lines in blocks of kBlock
// (the last padded with zeros) scanned together, then each block's total added to the blocks
// after it (the scan of the totals). Exact: integer sums wrap alike in any order.
// x dense [R, n]; out [R, n]; false: not taken.
bool long_int_cumsum(const char* name, const at::Tensor& x, const at::Tensor& out) {
    constexpr int64_t kBlock = 8192;
    const int64_t R = x.size(0), n = x.size(1), C = (n + kBlock - 1) / kBlock;
    if (C < 2) return false;
    at::Tensor padded = at::zeros({R, C * kBlock}, x.options());
    padded.narrow(1, 0, n).copy_(x);
    const at::Tensor blocks = at::empty({R * C, kBlock}, x.options());
    const spyre_tensor tx = op_tensor(padded.view({R * C, kBlock})), tb = op_tensor(blocks);
    if (!op_ran(name, spyre_op_scan(op_stream(blocks), SPYRE_SCAN_SUM, &tx, 1, &tb))) return false;
    const at::Tensor scanned = blocks.view({R, C, kBlock});
    const at::Tensor totals = scanned.select(2, kBlock - 1);
    scanned.add_((totals.cumsum(1) - totals).unsqueeze(2));  // the blocks before each block
    out.copy_(scanned.view({R, C * kBlock}).narrow(1, 0, n));
    return true;
}

// out = the scan of self along dim; false: not taken (the caller falls back).
bool scan_into(const char* name, spyre_scan_op op, const at::Tensor& self, int64_t dim,
               at::Tensor& out) {
    const auto t = out.scalar_type();
    if (!self.is_privateuseone() || !out.is_privateuseone() || self.device() != out.device() ||
        !scan_type(t) || !op_dtype(self.scalar_type()) || self.dim() > SPYRE_TENSOR_MAX_DIMS)
        return false;
    c10::DeviceGuard guard(self.device());
    const int64_t d = at::maybe_wrap_dim(dim, self.dim());
    at::Tensor x = self.scalar_type() == t ? self : self.to(t);
    if (x.is_alias_of(out) && !x.is_same(out)) x = x.clone();
    at::native::resize_output(out, self.sizes());
    if (out.numel() == 0) return true;
    const auto xd = stick_dense(x, name);
    if (!xd) return false;
    const at::Tensor w = writable_output(out);
    // a 0-d tensor is its own scan: seen as one element along dim 0
    const at::Tensor xs = xd->dim() ? *xd : xd->view({1}), ws = w.dim() ? w : w.view({1});
    const spyre_tensor tx = op_tensor(xs), tw = op_tensor(ws);
    if (!op_ran(name, spyre_op_scan(op_stream(w), op, &tx, static_cast<int32_t>(d), &tw))) {
        if (op != SPYRE_SCAN_SUM || is_float(t) || !xs.dim()) return false;
        const at::Tensor lines = xs.movedim(d, -1).contiguous();
        const at::Tensor result = at::empty(lines.sizes(), lines.options());
        if (!long_int_cumsum(name, lines.reshape({-1, lines.size(-1)}),
                             result.view({-1, lines.size(-1)})))
            return false;
        out.copy_(result.movedim(-1, d));
        return true;
    }
    finish_output(out, w);
    return true;
}

at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype,
                       at::Tensor& out) {
    if (scan_into("aten::cumsum", SPYRE_SCAN_SUM, self, dim, out)) return out;
    return fallback_to_cpu<ATEN_OP2(cumsum, out)>(self, dim, dtype, out);
}

at::Tensor& cumprod_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype,
                        at::Tensor& out) {
    if (scan_into("aten::cumprod", SPYRE_SCAN_PROD, self, dim, out)) return out;
    return fallback_to_cpu<ATEN_OP2(cumprod, out)>(self, dim, dtype, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("cumsum.out", TORCH_FN(cumsum_out));
    m.impl("cumprod.out", TORCH_FN(cumprod_out));
}

}  // namespace torch_spyre::aten
