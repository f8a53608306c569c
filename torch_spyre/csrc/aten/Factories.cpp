// linspace, logspace and eye on the card, composed of device ops (they were CPU fallbacks):
// linspace as the CPU's kernel computes it, start + step * i for the first half and
// end - step * (steps - 1 - i) for the second (so the last value is end exactly), from an
// arange of indices in fp32 (exact while steps <= 2^24), converted to the output's float type;
// logspace as base ** linspace (exp2(v * log2(base)): to rounding, positive bases); eye as the
// compare of two aranges. Integer outputs of linspace/logspace (the CPU steps in double) and
// other cases run on the CPU fallback. And _efficientzerotensor (torch.func's jacrev/hessian): a
// ZeroTensor of the card, no memory, as the CPU's and CUDA's.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

#include <cmath>
#include <optional>

#include "Composed.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr int64_t kExactIndices = int64_t{1} << 24;  // fp32 holds every index up to here

bool float_range_on_card(const at::Scalar& start, const at::Scalar& end, int64_t steps,
                         const at::Tensor& out) {
    return out.is_privateuseone() && is_float(out.scalar_type()) && !start.isComplex() &&
           !end.isComplex() && steps >= 0 && steps <= kExactIndices;
}

// The linspace values in fp32 (steps >= 2), as the CPU's kernel: start and end in the output's
// type first.
at::Tensor linspace_values(double start, double end, int64_t steps, at::ScalarType type,
                           at::Device device) {
    const auto in_type = [&](double v) { return at::Scalar(v).to<float>(); };
    const float s =
        type == at::kFloat ? in_type(start) : at::scalar_tensor(start).to(type).item<float>();
    const float e =
        type == at::kFloat ? in_type(end) : at::scalar_tensor(end).to(type).item<float>();
    const float step = (e - s) / static_cast<float>(steps - 1);
    const at::Tensor i = at::arange(steps, at::TensorOptions().dtype(at::kFloat).device(device));
    return at::where(i < static_cast<double>(steps / 2), i * step + s,
                     e - (static_cast<double>(steps - 1) - i) * step);
}

std::optional<at::Tensor> range_of(const at::Scalar& start, const at::Scalar& end, int64_t steps,
                                   const at::Tensor& out, std::optional<double> base) {
    if (!float_range_on_card(start, end, steps, out) || (base && !(*base > 0))) return std::nullopt;
    c10::DeviceGuard guard(out.device());
    const auto opts = out.options();
    if (steps == 0) return at::empty({0}, opts);
    at::Tensor v = steps == 1 ? at::full({1}, start.toDouble(), opts.dtype(at::kFloat))
                              : linspace_values(start.toDouble(), end.toDouble(), steps,
                                                out.scalar_type(), out.device());
    if (base) v = at::exp2(v * std::log2(*base));
    return v.to(out.scalar_type());
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps,
                         at::Tensor& out) {
    if (auto r = range_of(start, end, steps, out, std::nullopt)) return assign(out, *r);
    return fallback_to_cpu<ATEN_OP2(linspace, out)>(start, end, steps, out);
}

at::Tensor& logspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, double base,
                         at::Tensor& out) {
    if (auto r = range_of(start, end, steps, out, base)) return assign(out, *r);
    return fallback_to_cpu<ATEN_OP2(logspace, out)>(start, end, steps, base, out);
}

// [n, m] with ones on the diagonal: row index == column index
at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
    const at::ScalarType t = out.scalar_type();
    if (!out.is_privateuseone() || !(is_float(t) || is_int_dtype(t)) || n < 0 || m < 0)
        return fallback_to_cpu<ATEN_OP2(eye, m_out)>(n, m, out);
    c10::DeviceGuard guard(out.device());
    if (n == 0 || m == 0) {
        at::native::resize_output(out, {n, m});
        return out;
    }
    const auto longs = out.options().dtype(at::kLong);
    return assign(out, (at::arange(n, longs).unsqueeze(1) == at::arange(m, longs)).to(t));
}

at::Tensor& eye_out(int64_t n, at::Tensor& out) {
    if (!out.is_privateuseone()) return fallback_to_cpu<ATEN_OP2(eye, out)>(n, out);
    return eye_m_out(n, n, out);
}

// A tensor that is all zeros with no storage (the ZeroTensor key makes every op read it as
// zeros): what the CPU and CUDA kernels make, here with the card as its device.
at::Tensor efficientzerotensor(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> /*layout*/,
                               std::optional<at::Device> device,
                               std::optional<bool> /*pin_memory*/) {
    const at::Device dev = device.value_or(at::Device(c10::DeviceType::PrivateUse1));
    at::native::ZeroTensorAllocator allocator(dev);
    const auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) |
                      c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
    return at::detail::empty_generic(size, &allocator, keys,
                                     dtype.value_or(c10::get_default_dtype_as_scalartype()),
                                     std::nullopt);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_efficientzerotensor", TORCH_FN(efficientzerotensor));
    m.impl("linspace.out", TORCH_FN(linspace_out));
    m.impl("logspace.out", TORCH_FN(logspace_out));
    m.impl("eye.m_out", TORCH_FN(eye_m_out));
    m.impl("eye.out", TORCH_FN(eye_out));
}

}  // namespace torch_spyre::aten
