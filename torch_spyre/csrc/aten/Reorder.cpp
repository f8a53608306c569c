// flip and roll on the card, composed of device ops: flip is one index_select per flipped dim
// with the reversed positions (arange on the card; a dim past 2^16 in blocks of 4096); roll is one
// cat of the two slices per rolled dim (with no dims, of the flattened tensor). They were CPU
// fallbacks. channel_shuffle (nn.ChannelShuffle, ShuffleNet) is aten's view-and-copy form, as
// CUDA's.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/ops/channel_shuffle_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"

namespace torch_spyre::aten {
namespace {

at::Tensor reverse_dim(const at::Tensor& x, int64_t d) {
    const int64_t n = x.size(d);
    return x.index_select(d, at::arange(n - 1, -1, -1, x.options().dtype(at::kLong)));
}

// A dim longer than this is reversed in two levels (one index_select would need n positions:
// past 2^20 they leave the index program's reach).
constexpr int64_t kLongestReversal = int64_t{1} << 16;
constexpr int64_t kReversalBlock = 4096;

// x reversed along d of n elements as a blocks of b: padded with zeros to a * b along d, the
// blocks reversed, the elements inside each block reversed, and the last n kept (the padding
// comes first once reversed).
at::Tensor flip_long_dim(const at::Tensor& x, int64_t d) {
    const int64_t n = x.size(d), b = kReversalBlock, a = (n + b - 1) / b;
    auto pad_shape = x.sizes().vec();
    pad_shape[d] = a * b - n;
    const at::Tensor padded =
        pad_shape[d] ? at::cat({x, at::zeros(pad_shape, x.options())}, d) : x.contiguous();
    auto blocks = x.sizes().vec();
    blocks[d] = b;
    blocks.insert(blocks.begin() + d, a);
    const at::Tensor r = reverse_dim(reverse_dim(padded.view(blocks), d), d + 1);
    auto flat = x.sizes().vec();
    flat[d] = a * b;
    return r.reshape(flat).narrow(d, a * b - n, n);
}

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
    if (!self.is_privateuseone() || self.is_complex())
        return fallback_to_cpu<ATEN_OP(flip)>(self, dims);
    c10::DeviceGuard guard(self.device());
    const auto flipped = at::dim_list_to_bitset(dims, self.dim());  // checks and wraps the dims
    at::Tensor x = self;
    for (int64_t d = 0; d < self.dim(); ++d) {
        if (!flipped[d] || self.size(d) < 2) continue;
        x = self.size(d) > kLongestReversal ? flip_long_dim(x, d) : reverse_dim(x, d);
    }
    return x.is_same(self) ? self.clone() : x;
}

// x rolled by shift along d.
at::Tensor roll_dim(const at::Tensor& x, int64_t shift, int64_t d) {
    const int64_t n = x.size(d);
    if (n == 0) return x;
    const int64_t s = ((shift % n) + n) % n;
    if (s == 0) return x;
    return at::cat({x.narrow(d, n - s, s), x.narrow(d, 0, n - s)}, d);
}

at::Tensor roll(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
    if (!self.is_privateuseone() || self.is_complex())
        return fallback_to_cpu<ATEN_OP(roll)>(self, shifts, dims);
    TORCH_CHECK(!shifts.empty(), "`shifts` required");
    TORCH_CHECK(dims.empty() || shifts.size() == dims.size(), "shifts and dimensions must align. ",
                "shifts: ", shifts.size(), ", dims:", dims.size());
    c10::DeviceGuard guard(self.device());
    if (dims.empty()) {
        TORCH_CHECK(shifts.size() == 1, "shifts and dimensions must align. shifts: ", shifts.size(),
                    ", dims:", dims.size());
        return roll_dim(self.reshape({-1}), shifts[0], 0).view(self.sizes()).clone();
    }
    at::Tensor x = self;
    for (size_t i = 0; i < dims.size(); ++i)
        x = roll_dim(x, shifts[i], at::maybe_wrap_dim(dims[i], self.dim()));
    return x.is_same(self) ? self.clone() : x.contiguous();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("flip", TORCH_FN(flip));
    m.impl("roll", TORCH_FN(roll));
    m.impl("channel_shuffle", TORCH_FN(at::native::math_channel_shuffle));
}

}  // namespace torch_spyre::aten
