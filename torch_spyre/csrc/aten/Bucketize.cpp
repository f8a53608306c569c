// searchsorted, bucketize and repeat_interleave with a repeats tensor on the card, composed of
// device ops: the position of each value among the sorted boundaries is a count, of the
// boundaries b with !(b >= v) ("left", the CPU's lower_bound predicate, so NaN values land
// past the end) or !(b > v) ("right"), over a broadcast compare [..., n, m] summed along the
// boundaries: exact, up to 2^24 compares per call; larger searches are a binary search of
// device ops (log2 m rounds, each boundary fetched as its 128-byte row and picked from it).
// repeat_interleave(repeats) is the count of the repeats' cumulative sums at or below each
// output position (one host read of the total, as CUDA does, unless output_size is given).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <bit>
#include <optional>
#include <vector>

#include "Composed.h"
#include "ElementFetch.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr int64_t kMaxCompares = int64_t{1} << 24;

bool sortable(const at::Tensor& t) {
    return t.is_privateuseone() && (is_float(t.scalar_type()) || (is_int_dtype(t.scalar_type()) &&
                                                                  t.scalar_type() != at::kBool));
}

// The shapes torch accepts: 1-D boundaries for any values, or boundaries whose leading dims
// are the values' leading dims.
bool search_on_card(const at::Tensor& seq, const at::Tensor& values,
                    const std::optional<at::Tensor>& sorter, std::optional<c10::string_view> side,
                    bool right) {
    if (!sortable(seq) || !sortable(values) || seq.scalar_type() != values.scalar_type() ||
        seq.dim() == 0 || seq.size(-1) == 0)
        return false;
    if (side && ((*side != "left" && *side != "right") || (*side == "left" && right)))
        return false;  // the CPU's errors
    if (sorter && sorter->defined() &&
        (!sorter->is_privateuseone() || sorter->scalar_type() != at::kLong ||
         sorter->sizes() != seq.sizes()))
        return false;
    if (seq.dim() > 1) {
        if (values.dim() != seq.dim()) return false;
        for (int64_t d = 0; d + 1 < seq.dim(); ++d)
            if (seq.size(d) != values.size(d)) return false;
    }
    return true;
}

// Binary search on the card, for searches beyond kMaxCompares: bit_width(m) rounds of
// lower_bound over [lo, hi) per value, the CPU's predicate (b < v for "left", b <= v for
// "right", as !(b >= v) / !(b > v), so NaN values land past the end).
at::Tensor binary_search(const at::Tensor& seq, const at::Tensor& values,
                         const std::optional<at::Tensor>& sorter, bool right, bool out_int32) {
    const int64_t m = seq.size(-1);
    const auto longs = values.options().dtype(at::kLong);
    // the boundaries of each value's row in the flat seq: base + [0, m)
    at::Tensor base = at::zeros({}, longs);
    if (seq.dim() > 1) {
        std::vector<int64_t> shape(values.sizes().begin(), values.sizes().end());
        shape.back() = 1;
        base = at::arange(0, seq.numel(), m, longs).view(shape);
    }
    const ElementFetch boundary(seq.reshape({-1}));
    std::optional<ElementFetch> order;
    if (sorter && sorter->defined()) order.emplace(sorter->reshape({-1}));
    at::Tensor lo = at::zeros(values.sizes(), longs), hi = at::full(values.sizes(), m, longs);
    for (int64_t r = std::bit_width(uint64_t(m)); r > 0; --r) {
        const at::Tensor active = lo.lt(hi);
        const at::Tensor mid = lo.add(hi).div_(2, "floor");
        at::Tensor pos = mid.clamp_max(m - 1).add_(base);
        if (order) pos = (*order)(pos).add_(base);
        const at::Tensor b = boundary(pos);
        const at::Tensor go = (right ? b.gt(values) : b.ge(values)).logical_not_();
        lo = at::where(active.logical_and(go), mid.add(1), lo);
        hi = at::where(active.logical_and(go.logical_not()), mid, hi);
    }
    return out_int32 ? lo.to(at::kInt) : lo;
}

at::Tensor search(const at::Tensor& seq_in, const at::Tensor& values,
                  const std::optional<at::Tensor>& sorter, bool right, bool out_int32) {
    c10::DeviceGuard guard(values.device());
    if (values.numel() * seq_in.size(-1) > kMaxCompares)
        return binary_search(seq_in, values, sorter, right, out_int32);
    const at::Tensor seq = sorter && sorter->defined() ? seq_in.gather(-1, *sorter) : seq_in;
    const at::Tensor v = values.unsqueeze(-1);                      // [..., n, 1]
    const at::Tensor b = seq.dim() == 1 ? seq : seq.unsqueeze(-2);  // [..., 1, m]
    const at::Tensor before = right ? (b > v).logical_not() : (b >= v).logical_not();
    return before.sum(-1, /*keepdim=*/false, out_int32 ? at::kInt : at::kLong);
}

bool right_side(bool right, std::optional<c10::string_view> side) {
    return right || (side && *side == "right");
}

at::Tensor searchsorted(const at::Tensor& seq, const at::Tensor& values, bool out_int32, bool right,
                        std::optional<c10::string_view> side,
                        const std::optional<at::Tensor>& sorter) {
    if (!search_on_card(seq, values, sorter, side, right))
        return fallback_to_cpu<ATEN_OP2(searchsorted, Tensor)>(seq, values, out_int32, right, side,
                                                               sorter);
    return search(seq, values, sorter, right_side(right, side), out_int32);
}

at::Tensor& searchsorted_out(const at::Tensor& seq, const at::Tensor& values, bool out_int32,
                             bool right, std::optional<c10::string_view> side,
                             const std::optional<at::Tensor>& sorter, at::Tensor& out) {
    if (!search_on_card(seq, values, sorter, side, right) || !out.is_privateuseone() ||
        out.scalar_type() != (out_int32 ? at::kInt : at::kLong))
        return fallback_to_cpu<ATEN_OP2(searchsorted, Tensor_out)>(seq, values, out_int32, right,
                                                                   side, sorter, out);
    return assign(out, search(seq, values, sorter, right_side(right, side), out_int32));
}

at::Tensor bucketize(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32,
                     bool right) {
    if (boundaries.dim() != 1 ||
        !search_on_card(boundaries, self, std::nullopt, std::nullopt, right))
        return fallback_to_cpu<ATEN_OP2(bucketize, Tensor)>(self, boundaries, out_int32, right);
    return search(boundaries, self, std::nullopt, right, out_int32);
}

at::Tensor& bucketize_out(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32,
                          bool right, at::Tensor& out) {
    if (boundaries.dim() != 1 ||
        !search_on_card(boundaries, self, std::nullopt, std::nullopt, right) ||
        !out.is_privateuseone() || out.scalar_type() != (out_int32 ? at::kInt : at::kLong))
        return fallback_to_cpu<ATEN_OP2(bucketize, Tensor_out)>(self, boundaries, out_int32, right,
                                                                out);
    return assign(out, search(boundaries, self, std::nullopt, right, out_int32));
}

// [0, 0, 1, 2, 2, 2] for repeats [2, 1, 3]: position i holds the count of cumulative sums <= i
at::Tensor repeat_interleave(const at::Tensor& repeats, std::optional<int64_t> output_size) {
    if (!repeats.is_privateuseone() || repeats.dim() != 1 ||
        (repeats.scalar_type() != at::kLong && repeats.scalar_type() != at::kInt))
        return fallback_to_cpu<ATEN_OP2(repeat_interleave, Tensor)>(repeats, output_size);
    c10::DeviceGuard guard(repeats.device());
    const int64_t k = repeats.numel();
    const auto longs = repeats.options().dtype(at::kLong);
    if (k == 0) return at::empty({0}, longs);
    const at::Tensor r = repeats.to(at::kLong);
    TORCH_CHECK(r.min().item<int64_t>() >= 0, "repeats can not be negative");
    const at::Tensor cum = r.cumsum(0);
    const int64_t total = output_size ? *output_size : cum[k - 1].item<int64_t>();
    if (total * k > kMaxCompares)
        return fallback_to_cpu<ATEN_OP2(repeat_interleave, Tensor)>(repeats, output_size);
    const at::Tensor positions = at::arange(total, longs);
    return (cum <= positions.unsqueeze(-1)).sum(-1, /*keepdim=*/false, repeats.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("searchsorted.Tensor", TORCH_FN(searchsorted));
    m.impl("searchsorted.Tensor_out", TORCH_FN(searchsorted_out));
    m.impl("bucketize.Tensor", TORCH_FN(bucketize));
    m.impl("bucketize.Tensor_out", TORCH_FN(bucketize_out));
    m.impl("repeat_interleave.Tensor", TORCH_FN(repeat_interleave));
}

}  // namespace torch_spyre::aten
