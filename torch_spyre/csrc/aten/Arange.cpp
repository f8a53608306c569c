// torch.arange on the card (spyre_op_arange) for integer start and step: int64 and int32
// exactly, fp32/fp16/bf16 while every value is an integer the type holds exactly (2^24, 2048,
// 256: the CPU's vectorized kernel rounds partial sums in the type, so beyond that its values
// are not the once-rounded ones). Fractional starts or steps, other dtypes and the CPU's errors
// (zero step, bounds against the step's sign) run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// The value of s if it is an integer of at most 2^53 in magnitude.
std::optional<int64_t> whole(const at::Scalar& s) {
    if (s.isBoolean() || s.isComplex()) return std::nullopt;
    const double d = s.toDouble();
    if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9007199254740992.0)
        return std::nullopt;
    if (s.isIntegral(false)) return s.toLong();
    return static_cast<int64_t>(d);
}

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       at::Tensor& out) {
    const auto t = out.scalar_type();
    const auto a = whole(start), st = whole(step);
    const bool ints = t == at::kLong || t == at::kInt;
    if (out.is_privateuseone() && a && st && *st != 0 && (ints || is_float(t)) &&
        !end.isComplex() && std::isfinite(end.toDouble())) {
        const double size_d = std::ceil((end.toDouble() - double(*a)) / double(*st));
        // floats: every value exact in the type, so the CPU's vectorized sums (which round
        // base + i * step in the type) agree with one rounding
        const double top =
            std::max(std::fabs(double(*a)), std::fabs(double(*a) + double(*st) * (size_d - 1)));
        const double exact = t == at::kFloat ? 16777216.0 : t == at::kHalf ? 2048.0 : 256.0;
        if (size_d >= 0 && size_d < 2147483647.0 && (ints || top <= exact)) {
            c10::DeviceGuard guard(out.device());
            at::native::resize_output(out, {static_cast<int64_t>(size_d)});
            if (out.numel() == 0) return out;
            const at::Tensor w = writable_output(out);
            const spyre_tensor to = op_tensor(w);
            if (op_ran("aten::arange", spyre_op_arange(op_stream(w), &to, *a, *st))) {
                finish_output(out, w);
                return out;
            }
        }
    }
    return fallback_to_cpu<ATEN_OP2(arange, start_out)>(start, end, step, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("arange.start_out", TORCH_FN(arange_out)); }

}  // namespace torch_spyre::aten
