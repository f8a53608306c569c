// tril / triu on the card, composed of device ops: the band mask `j - i <= k` (or `>= k`) of
// the last two dims from two aranges (spyre_op_arange), an int64 subtraction and a compare,
// then masked_fill with 0 for floats (NaN above the band becomes 0, as on the CPU) or a
// multiplication by the mask for integers and bool. Other dtypes run on the CPU fallback. And
// tril_indices / triu_indices (below).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// self with the elements outside the band set to 0, or nothing if not taken.
std::optional<at::Tensor> band(const at::Tensor& self, int64_t k, bool lower,
                               const at::Tensor& out) {
    const auto t = self.scalar_type();
    if (!self.is_privateuseone() || self.dim() < 2 || !op_dtype(t) || out.scalar_type() != t)
        return std::nullopt;
    c10::DeviceGuard guard(self.device());
    if (self.numel() == 0) return self.clone();
    const auto opts = self.options().dtype(at::kLong);
    const at::Tensor d = at::arange(self.size(-1), opts)
                             .unsqueeze(0)
                             .sub(at::arange(self.size(-2), opts).unsqueeze(1));  // j - i
    if (is_float(t)) return self.masked_fill(lower ? d.gt(k) : d.lt(k), 0);
    return self.mul(lower ? d.le(k) : d.ge(k));
}

at::Tensor& tril_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
    if (auto r = band(self, diagonal, true, out)) {
        at::native::resize_output(out, self.sizes());
        out.copy_(*r);
        return out;
    }
    return fallback_to_cpu<ATEN_OP2(tril, out)>(self, diagonal, out);
}

at::Tensor& triu_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
    if (auto r = band(self, diagonal, false, out)) {
        at::native::resize_output(out, self.sizes());
        out.copy_(*r);
        return out;
    }
    return fallback_to_cpu<ATEN_OP2(triu, out)>(self, diagonal, out);
}

// tril_indices / triu_indices: the [2, N] coordinates (row, column) of the band's elements in
// row-major order. Each row's count and first column are host arithmetic on the arguments (a
// table of row + 1 starts, uploaded); the N positions are an arange on the card, each one's row
// the last start at or below it (searchsorted), its column the first column plus its place in
// the row. Nothing for a dtype the CPU refuses (its error) or an empty band's shape oddities.
std::optional<at::Tensor> band_indices(int64_t rows, int64_t cols, int64_t offset, bool lower,
                                       at::ScalarType dtype, at::Device device) {
    if (rows < 0 || cols < 0 || (dtype != at::kLong && dtype != at::kInt)) return std::nullopt;
    std::vector<int64_t> starts{0}, first;
    for (int64_t i = 0; i < rows; ++i) {
        const int64_t lo = lower ? 0 : std::clamp<int64_t>(i + offset, 0, cols);
        const int64_t hi = lower ? std::clamp<int64_t>(i + offset + 1, 0, cols) : cols;
        first.push_back(lo);
        starts.push_back(starts.back() + hi - lo);
    }
    const int64_t n = starts.back();
    if (n >= (int64_t{1} << 31) && dtype == at::kInt) return std::nullopt;
    c10::DeviceGuard guard(device);
    const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
    if (n == 0) return at::empty({2, 0}, longs.dtype(dtype));
    const at::Tensor start = at::tensor(starts, at::kLong).to(device);
    const at::Tensor k = at::arange(n, longs);
    const at::Tensor row = at::searchsorted(start, k, /*out_int32=*/false, /*right=*/true).sub_(1);
    const at::Tensor col = k - start.index_select(0, row) +
                           at::tensor(first, at::kLong).to(device).index_select(0, row);
    return at::stack({row, col}).to(dtype);
}

at::Tensor band_indices_factory(bool lower, int64_t rows, int64_t cols, int64_t offset,
                                std::optional<at::ScalarType> dtype,
                                std::optional<at::Layout> layout, std::optional<at::Device> device,
                                std::optional<bool> pin_memory) {
    const at::Device dev = device.value_or(at::Device(c10::DeviceType::PrivateUse1));
    if (auto r = band_indices(rows, cols, offset, lower, dtype.value_or(at::kLong), dev)) return *r;
    // the CPU's result or error (a factory has no spyre argument for the boxed fallback)
    note_cpu_work(lower ? "aten::tril_indices" : "aten::triu_indices");
    const at::Device cpu(c10::DeviceType::CPU);
    const at::Tensor r = lower
                             ? at::tril_indices(rows, cols, offset, dtype, layout, cpu, pin_memory)
                             : at::triu_indices(rows, cols, offset, dtype, layout, cpu, pin_memory);
    return r.to(dev);
}

at::Tensor tril_indices(int64_t rows, int64_t cols, int64_t offset,
                        std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                        std::optional<at::Device> device, std::optional<bool> pin_memory) {
    return band_indices_factory(true, rows, cols, offset, dtype, layout, device, pin_memory);
}

at::Tensor triu_indices(int64_t rows, int64_t cols, int64_t offset,
                        std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                        std::optional<at::Device> device, std::optional<bool> pin_memory) {
    return band_indices_factory(false, rows, cols, offset, dtype, layout, device, pin_memory);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("tril.out", TORCH_FN(tril_out));
    m.impl("triu.out", TORCH_FN(triu_out));
    m.impl("tril_indices", TORCH_FN(tril_indices));
    m.impl("triu_indices", TORCH_FN(triu_indices));
}

}  // namespace torch_spyre::aten
