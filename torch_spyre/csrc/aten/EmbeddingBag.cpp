// nn.EmbeddingBag / F.embedding_bag on the card, composed of device ops (_embedding_bag and
// _embedding_bag_forward_only, the dense _embedding_bag_backward, and the per_sample_weights
// gradient), for fp32/fp16/bf16 weights and int64/int32 indices (F.embedding_bag flattens a 2-D
// input and makes its offsets before calling these):
// - each index's bag (offset2bag) is the number of offsets at or before its position, less one
//   (an index_add of ones at the offsets and a cumsum, as the CPU computes it);
// - sum/mean: the gathered rows (times per_sample_weights), the padding_idx rows replaced by 0,
//   added per bag by one index_add in fp32 and rounded once; mean divides by the bag's size less
//   its padding indices (at least 1, as the CPU); with include_last_offset and no padding_idx
//   the last bag's sum ends at offsets[-1] and its size at the last index, as the CPU's fast
//   path computes them;
// - max: the CPU keeps the first value of a bag and replaces it by a strictly greater one, so
//   the result is the first position holding the maximum (or the first entry when that is NaN;
//   a later NaN never wins): a segmented scan over the bags' consecutive entries applies that
//   rule to (value, position) pairs (padding and NaN after a bag's first entry left out), and
//   each bag's last entry holds the answer: bit for bit; empty bags give 0 and index 0.
// The secondary outputs are the CPU's: offset2bag (empty for the sum without padding_idx, where
// the CPU skips it), bag_size (zeros for sum) and max_indices. Offsets whose first value is not 0
// or whose last is past the indices are the CPU's errors (read with one small device-to-host
// copy). Other dtypes, scale_grad_by_freq and sparse gradients run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <tuple>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr int64_t kSum = 0, kMean = 1, kMax = 2;

using Bags = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

bool index_dtype(const at::Tensor& t) {
    return t.scalar_type() == at::kLong || t.scalar_type() == at::kInt;
}

bool defined(const std::optional<at::Tensor>& t) { return t && t->defined(); }

// The bag of every index: [n] int64, the number of bag starts at or before it, less one (the
// CPU's offset2bag: one index_add of the starts and a cumsum, so empty bags are skipped).
at::Tensor bag_of_each(const at::Tensor& offsets, int64_t num_bags, int64_t n) {
    const at::Tensor starts = offsets.narrow(0, 0, num_bags).to(at::kLong);
    at::Tensor count = at::zeros({n + 1}, starts.options());
    count.index_add_(0, starts, at::ones_like(starts));
    return at::cumsum(count.narrow(0, 0, n), 0) - 1;
}

// The number of indices of every bag, from the offsets (the last bag runs to the end): [bags].
at::Tensor bag_lengths(const at::Tensor& offsets, int64_t num_bags, int64_t n) {
    const at::Tensor starts = offsets.narrow(0, 0, num_bags).to(at::kLong);
    const at::Tensor ends =
        at::cat({starts.narrow(0, 1, num_bags - 1), at::full({1}, n, starts.options())});
    return ends - starts;
}

// True where an index is not padding_idx.
at::Tensor not_padding(const at::Tensor& indices, int64_t padding_idx) {
    return padding_idx < 0 ? at::ones(indices.sizes(), indices.options().dtype(at::kBool))
                           : at::ne(indices, padding_idx);
}

bool takes(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
           int64_t mode, const std::optional<at::Tensor>& per_sample_weights) {
    if (!weight.is_privateuseone() || !is_float(weight.scalar_type()) || weight.dim() != 2 ||
        !indices.is_privateuseone() || !offsets.is_privateuseone() || indices.dim() != 1 ||
        offsets.dim() != 1 || !index_dtype(indices) ||
        offsets.scalar_type() != indices.scalar_type() || indices.device() != weight.device() ||
        offsets.device() != weight.device() || mode < kSum || mode > kMax)
        return false;
    if (!defined(per_sample_weights)) return true;
    const at::Tensor& w = *per_sample_weights;
    return mode == kSum && w.is_privateuseone() && w.device() == weight.device() &&
           w.scalar_type() == weight.scalar_type() && w.dim() == 1 && w.numel() == indices.numel();
}

// The CPU's checks of the offsets' first and last values (one small copy to the host).
void check_offsets(const at::Tensor& offsets, int64_t n) {
    if (offsets.size(0) == 0) return;
    const at::Tensor ends =
        at::stack({offsets.narrow(0, 0, 1), offsets.narrow(0, offsets.size(0) - 1, 1)})
            .to(at::kCPU, at::kLong);
    const int64_t first = ends[0].item<int64_t>(), last = ends[1].item<int64_t>();
    TORCH_CHECK(first == 0,
                "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                "from position 0. However, got ",
                first);
    TORCH_CHECK(last <= n, "offsets[-1] can not be greater than input's length ", n,
                " but got offsets[-1] of ", last);
}

Bags embedding_bag_on_card(const at::Tensor& weight, const at::Tensor& indices,
                           const at::Tensor& offsets, int64_t mode,
                           const std::optional<at::Tensor>& per_sample_weights,
                           bool include_last_offset, int64_t padding_idx, bool requires_grad) {
    TORCH_CHECK(!include_last_offset || offsets.size(0) >= 1,
                "include_last_offset: number of offset should be at least 1");
    const int64_t n = indices.size(0), D = weight.size(1);
    const int64_t num_bags = offsets.size(0) - (include_last_offset ? 1 : 0);
    check_offsets(offsets, n);
    const at::TensorOptions iopt = offsets.options();
    const bool skips_offset2bag = mode == kSum && padding_idx < 0;  // the CPU's fast path
    if (num_bags == 0 || n == 0) {  // nothing to gather: zeros, as the CPU
        at::Tensor bag_size =
            at::zeros({(requires_grad || mode != kSum) ? num_bags : offsets.size(0)}, iopt);
        if (num_bags > 0 && mode != kSum) bag_size = bag_lengths(offsets, num_bags, n).to(iopt);
        at::Tensor max_indices =
            mode == kMax ? at::zeros({num_bags, D}, iopt)
                         : (mode == kMean ? bag_size.clone() : at::zeros_like(bag_size));
        return {at::zeros({num_bags, D}, weight.options()),
                at::zeros({skips_offset2bag ? 0 : n}, iopt),
                mode == kSum ? at::zeros_like(bag_size) : bag_size, max_indices};
    }
    const at::Tensor bag = bag_of_each(offsets, num_bags, n);
    const at::Tensor keep = not_padding(indices, padding_idx);
    at::Tensor rows =
        at::index_select(weight, 0, indices).to(at::kFloat);  // [n, D], summed in fp32
    // bag_size: the offsets' lengths less the padding indices of each bag (mean, max, gradients)
    at::Tensor bag_size;
    if (requires_grad || mode != kSum) {
        at::Tensor padded = at::zeros({num_bags}, bag.options());
        if (padding_idx >= 0) padded.index_add_(0, bag, at::logical_not(keep).to(at::kLong));
        bag_size = (bag_lengths(offsets, num_bags, n) - padded).to(iopt);
    } else {
        bag_size = at::zeros({offsets.size(0)}, iopt);
    }
    const at::Tensor offset2bag = skips_offset2bag ? at::empty({0}, iopt) : bag.to(iopt);
    if (mode != kMax) {
        if (defined(per_sample_weights))
            rows = rows * per_sample_weights->to(at::kFloat).unsqueeze(1);
        // The CPU's fast path (no padding_idx) ends the last bag at offsets[-1] under
        // include_last_offset, the other paths (and bag_size) at the last index.
        const at::Tensor summed =
            include_last_offset && padding_idx < 0
                ? at::lt(at::arange(n, bag.options()), offsets.narrow(0, num_bags, 1).to(at::kLong))
                : keep;
        rows = at::where(summed.unsqueeze(1), rows, 0);
        at::Tensor out = at::zeros({num_bags, D}, rows.options()).index_add_(0, bag, rows);
        if (mode == kMean) out.div_(at::clamp_min(bag_size.to(at::kFloat), 1).unsqueeze(1));
        const at::Tensor max_indices = mode == kMean ? bag_size.clone() : at::zeros_like(bag_size);
        return {out.to(weight.scalar_type()), offset2bag,
                mode == kSum ? at::zeros_like(bag_size) : bag_size, max_indices};
    }
    // max: the entries that take part (not padding; a NaN only as its bag's first such entry)
    const at::Tensor counted = at::cumsum(keep.to(at::kLong), 0);  // kept entries up to here
    const at::Tensor start = at::index_select(offsets.to(at::kLong), 0, bag);
    const at::Tensor before = at::index_select(counted - keep.to(at::kLong), 0, start);
    const at::Tensor first = at::logical_and(keep, at::eq(counted - before, 1));  // [n]
    at::Tensor part = at::logical_and(
        keep.unsqueeze(1), at::logical_or(first.unsqueeze(1), at::logical_not(at::isnan(rows))));
    // A segmented scan over the positions (each bag's entries are consecutive) of (value,
    // position, taking part) pairs: the later pair replaces the earlier one only when it takes
    // part and is strictly greater (or the earlier one does not take part), the CPU's rule, so
    // each bag's last entry ends up with its first maximum. log2(n) rounds.
    at::Tensor value = rows, pos = at::arange(n, bag.options()).unsqueeze(1).expand({n, D});
    for (int64_t shift = 1; shift < n; shift *= 2) {
        const int64_t m = n - shift;
        const at::Tensor same = at::eq(bag.narrow(0, 0, m), bag.narrow(0, shift, m)).unsqueeze(1);
        const at::Tensor lv = value.narrow(0, 0, m), rv = value.narrow(0, shift, m);
        const at::Tensor lp = part.narrow(0, 0, m), rp = part.narrow(0, shift, m);
        const at::Tensor keep_left = at::logical_and(
            at::logical_and(same, lp),
            at::logical_or(at::logical_not(rp), at::le(rv, lv).logical_or(at::isnan(lv))));
        value = at::cat({value.narrow(0, 0, shift), at::where(keep_left, lv, rv)});
        pos = at::cat({pos.narrow(0, 0, shift),
                       at::where(keep_left, pos.narrow(0, 0, m), pos.narrow(0, shift, m))});
        part = at::cat({part.narrow(0, 0, shift), at::logical_or(rp, at::logical_and(same, lp))});
    }
    // each bag's last entry (a bag with none, or with only padding, gives 0 and index 0)
    const at::Tensor lengths = bag_lengths(offsets, num_bags, n);
    const at::Tensor has = at::gt(lengths, 0);
    const at::Tensor last =
        at::where(has, offsets.narrow(0, 0, num_bags).to(at::kLong) + lengths - 1, 0);
    const at::Tensor found = at::logical_and(has.unsqueeze(1), at::index_select(part, 0, last));
    const at::Tensor best = at::index_select(value, 0, last);
    const at::Tensor where_best = at::where(found, at::index_select(pos, 0, last), 0);
    const at::Tensor word =
        at::index_select(indices.to(at::kLong), 0, where_best.reshape({-1})).view({num_bags, D});
    return {at::where(found, best, 0).to(weight.scalar_type()), offset2bag, bag_size,
            at::where(found, word, 0).to(iopt)};
}

Bags embedding_bag(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
                   bool scale_grad_by_freq, int64_t mode, bool sparse,
                   const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
                   int64_t padding_idx) {
    if (!takes(weight, indices, offsets, mode, per_sample_weights))
        return fallback_to_cpu<ATEN_OP(_embedding_bag)>(
            weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
            include_last_offset, padding_idx);
    c10::DeviceGuard guard(weight.device());
    return embedding_bag_on_card(weight, indices, offsets, mode, per_sample_weights,
                                 include_last_offset, padding_idx, /*requires_grad=*/true);
}

Bags embedding_bag_forward_only(const at::Tensor& weight, const at::Tensor& indices,
                                const at::Tensor& offsets, bool scale_grad_by_freq, int64_t mode,
                                bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                                bool include_last_offset, int64_t padding_idx) {
    if (!takes(weight, indices, offsets, mode, per_sample_weights))
        return fallback_to_cpu<ATEN_OP(_embedding_bag_forward_only)>(
            weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
            include_last_offset, padding_idx);
    c10::DeviceGuard guard(weight.device());
    return embedding_bag_on_card(weight, indices, offsets, mode, per_sample_weights,
                                 include_last_offset, padding_idx, /*requires_grad=*/false);
}

// grad_weight [V, D] of the dense backward: sum/mean add each index's bag gradient (times its
// per-sample weight, over the bag size for mean) onto its row; max adds a bag's gradient onto
// the row that held its maximum (bags with no entry add nothing). In fp32, rounded once.
std::optional<at::Tensor> dense_backward_on_card(
    const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offset2bag,
    const at::Tensor& bag_size, const at::Tensor& max_indices, int64_t num_weights,
    bool scale_grad_by_freq, int64_t mode, const std::optional<at::Tensor>& per_sample_weights,
    int64_t padding_idx) {
    if (scale_grad_by_freq || !grad.is_privateuseone() || !is_float(grad.scalar_type()) ||
        grad.dim() != 2 || !indices.is_privateuseone() || !index_dtype(indices) ||
        indices.dim() != 1 || mode < kSum || mode > kMax ||
        (mode != kMax && offset2bag.numel() != indices.numel()))
        return std::nullopt;
    if (defined(per_sample_weights) && (mode != kSum || !per_sample_weights->is_privateuseone() ||
                                        per_sample_weights->numel() != indices.numel()))
        return std::nullopt;
    c10::DeviceGuard guard(grad.device());
    const int64_t D = grad.size(1);
    const at::Tensor g = grad.to(at::kFloat);
    at::Tensor gw = at::zeros({num_weights, D}, g.options());
    if (mode == kMax) {
        if (grad.size(0) == 0 || D == 0) return gw.to(grad.scalar_type());
        const at::Tensor has = at::gt(bag_size, 0).unsqueeze(1);
        const at::Tensor flat =
            max_indices.to(at::kLong) * D + at::arange(D, bag_size.options().dtype(at::kLong));
        gw.view({-1}).index_add_(0, flat.reshape({-1}), at::where(has, g, 0).reshape({-1}));
        return gw.to(grad.scalar_type());
    }
    if (indices.numel() == 0 || D == 0) return gw.to(grad.scalar_type());
    const at::Tensor bag = offset2bag.to(at::kLong);
    at::Tensor rows = at::index_select(g, 0, bag);
    if (defined(per_sample_weights)) rows = rows * per_sample_weights->to(at::kFloat).unsqueeze(1);
    if (mode == kMean) rows = rows / at::index_select(bag_size.to(at::kFloat), 0, bag).unsqueeze(1);
    rows = at::where(not_padding(indices, padding_idx).unsqueeze(1), rows, 0);
    gw.index_add_(0, indices, rows);
    return gw.to(grad.scalar_type());
}

at::Tensor embedding_bag_dense_backward(const at::Tensor& grad, const at::Tensor& indices,
                                        const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                        const at::Tensor& max_indices, c10::SymInt num_weights,
                                        bool scale_grad_by_freq, int64_t mode,
                                        const std::optional<at::Tensor>& per_sample_weights,
                                        int64_t padding_idx) {
    if (auto r = dense_backward_on_card(grad, indices, offset2bag, bag_size, max_indices,
                                        num_weights.expect_int(), scale_grad_by_freq, mode,
                                        per_sample_weights, padding_idx))
        return *r;
    return fallback_to_cpu<ATEN_OP(_embedding_bag_dense_backward)>(
        grad, indices, offset2bag, bag_size, max_indices, num_weights.expect_int(),
        scale_grad_by_freq, mode, per_sample_weights, padding_idx);
}

// The CPU's _embedding_bag_backward for dense gradients: offset2bag made from the offsets when
// the forward skipped it, then the dense backward.
at::Tensor embedding_bag_backward(const at::Tensor& grad, const at::Tensor& indices,
                                  const at::Tensor& offsets, const at::Tensor& offset2bag,
                                  const at::Tensor& bag_size, const at::Tensor& max_indices,
                                  c10::SymInt num_weights, bool scale_grad_by_freq, int64_t mode,
                                  bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                                  int64_t padding_idx) {
    if (!sparse && offsets.is_privateuseone() && offsets.dim() == 1 && indices.dim() == 1 &&
        grad.dim() == 2) {
        at::Tensor bags = offset2bag;
        if (indices.numel() != 0 && offset2bag.numel() == 0) {
            c10::DeviceGuard guard(grad.device());
            bags = bag_of_each(offsets, grad.size(0), indices.size(0));
        }
        if (auto r = dense_backward_on_card(grad, indices, bags, bag_size, max_indices,
                                            num_weights.expect_int(), scale_grad_by_freq, mode,
                                            per_sample_weights, padding_idx))
            return *r;
    }
    return fallback_to_cpu<ATEN_OP(_embedding_bag_backward)>(
        grad, indices, offsets, offset2bag, bag_size, max_indices, num_weights.expect_int(),
        scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx);
}

// d output / d per_sample_weights[i] = <grad of i's bag, weight row of i> (0 for padding).
at::Tensor per_sample_weights_backward(const at::Tensor& grad, const at::Tensor& weight,
                                       const at::Tensor& indices, const at::Tensor& offsets,
                                       const at::Tensor& offset2bag, int64_t mode,
                                       int64_t padding_idx) {
    if (mode == kSum && grad.is_privateuseone() && is_float(grad.scalar_type()) &&
        grad.dim() == 2 && weight.is_privateuseone() &&
        weight.scalar_type() == grad.scalar_type() && weight.dim() == 2 &&
        indices.is_privateuseone() && index_dtype(indices) && indices.dim() == 1 &&
        offsets.dim() == 1 && offsets.is_privateuseone()) {
        c10::DeviceGuard guard(grad.device());
        const int64_t n = indices.numel();
        if (n == 0) return at::zeros({0}, grad.options());
        const at::Tensor bag = offset2bag.numel() == n ? offset2bag.to(at::kLong)
                                                       : bag_of_each(offsets, grad.size(0), n);
        const at::Tensor g = at::index_select(grad.to(at::kFloat), 0, bag);
        const at::Tensor w = at::index_select(weight.to(at::kFloat), 0, indices);
        const at::Tensor dot = (g * w).sum(1);
        return at::where(not_padding(indices, padding_idx), dot, 0).to(grad.scalar_type());
    }
    return fallback_to_cpu<ATEN_OP(_embedding_bag_per_sample_weights_backward)>(
        grad, weight, indices, offsets, offset2bag, mode, padding_idx);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_embedding_bag", TORCH_FN(embedding_bag));
    m.impl("_embedding_bag_forward_only", TORCH_FN(embedding_bag_forward_only));
    m.impl("_embedding_bag_backward", TORCH_FN(embedding_bag_backward));
    m.impl("_embedding_bag_dense_backward", TORCH_FN(embedding_bag_dense_backward));
    m.impl("_embedding_bag_per_sample_weights_backward", TORCH_FN(per_sample_weights_backward));
}

}  // namespace torch_spyre::aten
