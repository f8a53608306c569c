// cumsum and cumprod on the card (spyre_op_scan) with the CPU's numerics: the input is cast to
// the output's dtype on the card first (torch promotes integers and bool to int64), then
// scanned along the dim in one launch. fp32 cumprod multiplies in fp32 (as CUDA does; the CPU
// multiplies in double: within N fp32 roundings of it, ops.md "Scans"). Integer cumsums of lines
// too long for one program scan in blocks (long_int_cumsum), float ones as a scan of
// double-float pairs (long_float_cumsum). Dtypes the library has no scan for
// and other slabs too large for a core's scratchpad run on the CPU fallback.
// logcumsumexp (its autograd formula is flips and logcumsumexps, so the backward follows) is a
// Hillis-Steele scan with logaddexp as the step, in fp32 (16-bit inputs rounded once at the end).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Composed.h"
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

// A float cumsum along lines too long for the library's program (it reproduces torch's double
// accumulator with one double VRED per output: quadratic, and refused past a scratchpad's
// slab): a Hillis-Steele scan of double-float pairs (hi + lo, about 48 bits: two-sum on the
// card's fp32 adds, which round exactly), so each output is the exact prefix sum rounded once
// to fp32 and then to the type. torch's sequential double sum differs from the exact one by at
// most n 2^-53 of the partial sums, so the two agree except where the exact sum lies that
// close to a rounding boundary (there by one unit in the last place). Infinities and NaN
// propagate as the CPU's do. In blocks of about 2^21 elements along the line, each block's
// pairs added to the running pair of the blocks before it (the same pair addition).
// x dense [R, n]; out [R, n]; false: not taken.
// (ah + al) + (bh + bl) as a double-float pair: two-sum of the high parts, the low parts added
// to its error, renormalized; a sum that is not finite stays as fp32 made it (lo 0).
std::pair<at::Tensor, at::Tensor> add_pairs(const at::Tensor& ah, const at::Tensor& al,
                                            const at::Tensor& bh, const at::Tensor& bl) {
    const at::Tensor sum = ah + bh, bv = sum - ah;
    const at::Tensor err = (ah - (sum - bv)).add_(bh - bv).add_(al).add_(bl);
    const at::Tensor finite = at::isfinite(sum);
    const at::Tensor h = at::where(finite, sum + err, sum);
    return {h, at::where(finite, err - (h - sum), at::zeros_like(err))};
}

bool long_float_cumsum(const at::Tensor& x, const at::Tensor& out) {
    constexpr int64_t kBlockElements = int64_t{1} << 21;  // bounds the temporaries
    const int64_t R = x.size(0), n = x.size(1);
    if (n < 2) return false;
    const int64_t block = std::max<int64_t>(2, kBlockElements / std::max<int64_t>(R, 1));
    at::Tensor carry_hi, carry_lo;
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        const int64_t m = std::min(block, n - b0);
        // +0.0 + -0.0 is +0.0, as torch's accumulator starts
        at::Tensor hi = x.narrow(1, b0, m).to(at::kFloat).add(0.0);
        at::Tensor lo = at::zeros_like(hi);
        for (int64_t s = 1; s < m; s *= 2) {
            auto [h, l] = add_pairs(hi.narrow(1, s, m - s), lo.narrow(1, s, m - s),
                                    hi.narrow(1, 0, m - s), lo.narrow(1, 0, m - s));
            at::Tensor nh = at::empty_like(hi), nl = at::empty_like(lo);
            nh.narrow(1, 0, s).copy_(hi.narrow(1, 0, s));
            nl.narrow(1, 0, s).copy_(lo.narrow(1, 0, s));
            nh.narrow(1, s, m - s).copy_(h);
            nl.narrow(1, s, m - s).copy_(l);
            hi = std::move(nh), lo = std::move(nl);
        }
        if (b0 > 0) std::tie(hi, lo) = add_pairs(hi, lo, carry_hi, carry_lo);
        out.narrow(1, b0, m).copy_(hi);
        carry_hi = hi.narrow(1, m - 1, 1).clone(), carry_lo = lo.narrow(1, m - 1, 1).clone();
    }
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
        if (op != SPYRE_SCAN_SUM || !xs.dim()) return false;
        const at::Tensor lines = xs.movedim(d, -1).contiguous();
        const at::Tensor result = at::empty(lines.sizes(), lines.options());
        const at::Tensor rows = lines.reshape({-1, lines.size(-1)}),
                         into = result.view({-1, lines.size(-1)});
        if (!(is_float(t) ? long_float_cumsum(rows, into) : long_int_cumsum(name, rows, into)))
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

// logcumsumexp along dim: ceil(log2 n) steps, each element combined by the card's logaddexp
// with the one 2^k before it (the first 2^k kept). logaddexp keeps -inf for -inf + -inf, so an
// all -inf prefix stays -inf, and NaN propagates as in the CPU's running sum. The CPU's
// accumulator is a double: the card's fp32 result is within about log2(n) + 2 units of fp32's
// last place of the sum.
at::Tensor logcumsumexp_of(const at::Tensor& self, int64_t dim) {
    c10::DeviceGuard guard(self.device());
    if (self.numel() == 0 || self.dim() == 0) return self.clone();
    const int64_t d = at::maybe_wrap_dim(dim, self.dim());
    at::Tensor cur = widened(self).movedim(d, -1).contiguous();
    const int64_t n = cur.size(-1);
    for (int64_t s = 1; s < n; s *= 2)
        cur = at::cat({cur.narrow(-1, 0, s),
                       at::logaddexp(cur.narrow(-1, s, n - s), cur.narrow(-1, 0, n - s))},
                      -1);
    return cur.movedim(-1, d).to(self.scalar_type()).contiguous();
}

bool logcumsumexp_on_card(const at::Tensor& self) {
    return self.is_privateuseone() && is_float(self.scalar_type());
}

at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
    if (!logcumsumexp_on_card(self)) return fallback_to_cpu<ATEN_OP(_logcumsumexp)>(self, dim);
    return logcumsumexp_of(self, dim);
}

at::Tensor& logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
    if (!logcumsumexp_on_card(self) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(_logcumsumexp, out)>(self, dim, out);
    return assign(out, logcumsumexp_of(self, dim));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("cumsum.out", TORCH_FN(cumsum_out));
    m.impl("cumprod.out", TORCH_FN(cumprod_out));
    m.impl("_logcumsumexp", TORCH_FN(logcumsumexp));
    m.impl("_logcumsumexp.out", TORCH_FN(logcumsumexp_out));
}

}  // namespace torch_spyre::aten
