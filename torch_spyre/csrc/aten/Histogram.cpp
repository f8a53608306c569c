// torch.histc of fp32/fp16/bf16 spyre tensors on the card, with the CPU kernel's bin rule:
// - the range: [min, max], or the data's own minimum and maximum when min == max (read from
//   the card: one small device-to-host copy, as the CPU and CUDA read theirs), widened by 1 on
//   both sides when still equal; a range that is not finite or not increasing is the CPU's error;
//   the ends are the first and last of linspace(min, max, bins + 1) in the input's type, that is
//   min and max rounded to it;
// - an element x in [min, max] (NaN and values outside are skipped) falls in bin
//   trunc((x - min) * bins / (max - min)), each operation rounded to the input's type as the
//   CPU's scalar_t arithmetic rounds it (the width max - min and bins too), the last bin taking
//   its right edge;
// - the counts are exact integers (an index_add of ones into int64 on the card), converted to
//   the input's type once. The CPU adds ones in the input's type per thread, so a 16-bit bin of
//   more than 2048 (fp16) or 256 (bf16) elements may stop growing there; the card's count does
//   not.
// torch.histogram (int bins or a bins tensor; weight, density) of fp32 spyre tensors likewise:
// the range given or the data's (widened by 0.5 when empty), the CPU's linspace edges made on
// the host and uploaded, the bin by the CPU's interpolation in fp32 followed by its local search
// among the three nearest edges (int bins) or by the number of edges at or below the element
// (a bins tensor: searchsorted), the last bin keeping its right edge; counts exact, weights
// added in fp32 (in the card's order), density divided by the total and each bin's width.
// Other dtypes run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>

#include "Composed.h"
#include "Fallback.h"
#include "IntOps.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// v rounded to type t (a host computation on a one-element CPU tensor).
double in_type(double v, at::ScalarType t) {
    return at::scalar_tensor(v, at::kDouble).to(t).item<double>();
}

at::Tensor histc_on_card(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                         const at::Scalar& max) {
    TORCH_CHECK(bins > 0, "torch.histogramdd(): expected each bin_ct to be positive, but got ",
                bins, " for dimension 0");
    const at::ScalarType t = self.scalar_type();
    c10::DeviceGuard guard(self.device());
    double left = min.to<double>(), right = max.to<double>();
    if (left == right && self.numel() > 0) {
        const at::Tensor ends = at::stack({self.amin().reshape({1}), self.amax().reshape({1})})
                                    .to(at::kCPU, at::kDouble);
        left = ends[0].item<double>();
        right = ends[1].item<double>();
    }
    if (left == right) {
        left -= 1;
        right += 1;
    }
    TORCH_CHECK(!(std::isinf(left) || std::isinf(right) || std::isnan(left) || std::isnan(right)),
                "torch.histc: range of [", left, ", ", right, "] is not finite");
    TORCH_CHECK(left < right, "torch.histc: max must be larger than min");
    at::Tensor hist = at::zeros({bins + 1}, self.options().dtype(at::kLong));
    if (self.numel() > 0) {
        // the CPU's scalar_t values of the bin edges, the width and the bin count
        const double lo = in_type(left, t), hi = in_type(right, t);
        const double width = (at::scalar_tensor(hi, t) - at::scalar_tensor(lo, t)).item<double>();
        const double count = in_type(static_cast<double>(bins), t);
        const auto rounded = [t](const at::Tensor& v) {
            return t == at::kFloat ? v : v.to(t).to(at::kFloat);
        };
        const at::Tensor x = self.reshape({-1}).to(at::kFloat);
        const at::Tensor offset = rounded(rounded(rounded(x - lo) * count) / width);
        at::Tensor pos = at::trunc(offset);
        pos = at::where(at::eq(pos, static_cast<double>(bins)), static_cast<double>(bins - 1), pos);
        const at::Tensor inside = at::logical_and(at::ge(x, lo), at::le(x, hi));
        const at::Tensor bin =
            at::where(inside, pos, static_cast<double>(bins)).to(at::kLong);  // outside: the last
        hist.index_add_(0, bin, at::ones_like(bin));
    }
    return hist.narrow(0, 0, bins).to(t);
}

bool takes(const at::Tensor& self) {
    return self.is_privateuseone() && is_float(self.scalar_type());
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                 const at::Scalar& max) {
    if (!takes(self)) return fallback_to_cpu<ATEN_OP(histc)>(self, bins, min, max);
    return histc_on_card(self, bins, min, max);
}

at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                      const at::Scalar& max, at::Tensor& out) {
    if (!takes(self) || !out.is_privateuseone() || out.scalar_type() != self.scalar_type())
        return fallback_to_cpu<ATEN_OP2(histc, out)>(self, bins, min, max, out);
    return assign(out, histc_on_card(self, bins, min, max));
}

// torch.histogram's counts over the edges (on the card, ascending, in self's type): the bin of
// each element x in [edges[0], edges[-1]] (NaN and values outside skipped) is
// - given `guess` (the bin by linear interpolation, int64): the CPU's local search among the
//   edges guess - 1 .. guess + 1, that is the number of those edges <= x, less one;
// - else the number of edges <= x, less one (the CPU's upper_bound);
// the last edge belongs to the last bin. Counts exact (int64) or the weights added (fp32, in the
// card's order), then density divides by the total and by each bin's width.
at::Tensor histogram_counts(const at::Tensor& x, const at::Tensor& edges,
                            const std::optional<at::Tensor>& guess,
                            const std::optional<at::Tensor>& weight, bool density) {
    const int64_t nedges = edges.size(0), bins = nedges - 1;
    at::Tensor bin;
    if (guess) {
        const at::Tensor low = at::where(at::gt(*guess, 0), *guess - 1, 0);  // pos_min
        at::Tensor below = at::zeros(x.sizes(), guess->options());
        for (int64_t j = 0; j < 3; ++j) {
            const at::Tensor at_j = low + j;
            const at::Tensor valid =
                at::logical_and(at::lt(at_j, nedges), at::le(at_j, *guess + 1));
            const at::Tensor e = at::index_select(edges, 0, at::where(valid, at_j, 0));
            below = below + at::logical_and(valid, at::le(e, x)).to(at::kLong);
        }
        bin = low + below - 1;
    } else {
        bin = at::searchsorted(edges, x, /*out_int32=*/false, /*right=*/true) - 1;
    }
    bin = at::where(at::eq(bin, bins), bins - 1, bin);
    const at::Tensor first = edges.narrow(0, 0, 1), last = edges.narrow(0, bins, 1);
    const at::Tensor inside = at::logical_and(at::ge(x, first), at::le(x, last));
    bin = at::where(inside, bin, bins);  // outside: an extra bin, dropped
    at::Tensor hist;
    if (weight) {
        hist = at::zeros({bins + 1}, x.options()).index_add_(0, bin, *weight);
    } else {
        hist = at::zeros({bins + 1}, bin.options()).index_add_(0, bin, at::ones_like(bin));
    }
    hist = hist.narrow(0, 0, bins).to(x.scalar_type());
    if (density) hist = hist.div(hist.sum().reshape({1})).div(edges.diff());
    return hist;
}

bool histogram_takes(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
    return self.is_privateuseone() && self.scalar_type() == at::kFloat &&
           (!weight || !weight->defined() ||
            (weight->is_privateuseone() && weight->scalar_type() == at::kFloat &&
             weight->sizes() == self.sizes()));
}

std::optional<at::Tensor> flat_weight(const std::optional<at::Tensor>& weight) {
    if (!weight || !weight->defined()) return std::nullopt;
    return weight->reshape({-1});
}

std::tuple<at::Tensor, at::Tensor> histogram_bin_ct(const at::Tensor& self, int64_t bins,
                                                    std::optional<at::ArrayRef<double>> range,
                                                    const std::optional<at::Tensor>& weight,
                                                    bool density) {
    if (!histogram_takes(self, weight) || bins <= 0 || (range && range->size() != 2))
        return fallback_to_cpu<ATEN_OP2(histogram, bin_ct)>(self, bins, range, weight, density);
    c10::DeviceGuard guard(self.device());
    double left = 0, right = 1;  // numpy's range of an empty input
    if (range) {
        left = (*range)[0];
        right = (*range)[1];
    } else if (self.numel() > 0) {
        const at::Tensor ends = at::stack({self.amin().reshape({1}), self.amax().reshape({1})})
                                    .to(at::kCPU, at::kDouble);
        left = ends[0].item<double>();
        right = ends[1].item<double>();
    }
    TORCH_CHECK(std::isfinite(left) && std::isfinite(right),
                "torch.histogramdd: dimension 0's range [", left, ", ", right, "] is not finite");
    TORCH_CHECK(left <= right, "torch.histogramdd: min should not exceed max, but got min ", left,
                " max ", right, " for dimension 0");
    if (left == right) {
        left -= 0.5;
        right += 0.5;
    }
    // the CPU's linspace edges, bit for bit (bins + 1 values made on the host, one upload)
    const at::Tensor host_edges =
        at::linspace(left, right, bins + 1, at::TensorOptions(at::kFloat));
    const at::Tensor edges = host_edges.to(self.device());
    if (self.numel() == 0)
        return {at::zeros({bins}, self.options()).div(density ? 0.0 : 1.0), edges};
    // the CPU's interpolation in fp32 from the first and last edge: (x - e0) * bins / (eN - e0)
    const float e0 = host_edges[0].item<float>(), en = host_edges[bins].item<float>();
    const at::Tensor x = self.reshape({-1});
    const at::Tensor guess =
        at::trunc((x - e0) * static_cast<float>(bins) / static_cast<float>(en - e0));
    const at::Tensor inside = at::logical_and(at::ge(x, e0), at::le(x, en));
    const at::Tensor g = at::where(inside, guess, 0).to(at::kLong);
    return {histogram_counts(x, edges, g, flat_weight(weight), density), edges};
}

std::tuple<at::Tensor, at::Tensor> histogram_bins_tensor(const at::Tensor& self,
                                                         const at::Tensor& bins,
                                                         const std::optional<at::Tensor>& weight,
                                                         bool density) {
    if (!histogram_takes(self, weight) || !bins.is_privateuseone() ||
        bins.scalar_type() != at::kFloat || bins.dim() != 1 || bins.numel() < 2 ||
        bins.device() != self.device())
        return fallback_to_cpu<ATEN_OP2(histogram, bins_tensor)>(self, bins, weight, density);
    c10::DeviceGuard guard(self.device());
    const at::Tensor edges = bins.contiguous();
    if (self.numel() == 0)
        return {at::zeros({bins.numel() - 1}, self.options()).div(density ? 0.0 : 1.0),
                edges.clone()};
    return {histogram_counts(self.reshape({-1}), edges, std::nullopt, flat_weight(weight), density),
            edges.clone()};
}

// torch.bincount of a 1-D integer tensor: the counts (int64) or the sums of float32 weights per
// value, an index_add into zeros on the card (each bin's additions in input order, as the
// CPU's loop). The number of bins, max(input) + 1 or minlength, needs the input's minimum and
// maximum on the host: one small read, as CUDA's. Other weight types (the CPU returns double
// for them) run on the CPU fallback.
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights,
                    int64_t minlength) {
    const bool has_w = weights && weights->defined();
    if (self.is_privateuseone() && self.dim() == 1 && is_int_dtype(self.scalar_type()) &&
        self.scalar_type() != at::kBool && minlength >= 0 &&
        (!has_w || (weights->is_privateuseone() && weights->scalar_type() == at::kFloat &&
                    weights->sizes() == self.sizes()))) {
        c10::DeviceGuard guard(self.device());
        const auto type = has_w ? at::kFloat : at::kLong;
        if (self.numel() == 0) return at::zeros({minlength}, self.options().dtype(type));
        const at::Tensor ends = at::stack({self.min(), self.max()}).to(at::kLong).cpu();
        const int64_t lo = ends[0].item<int64_t>(), hi = ends[1].item<int64_t>();
        TORCH_CHECK(lo >= 0, "bincount only supports 1-d non-negative integral inputs.");
        at::Tensor out = at::zeros({std::max(hi + 1, minlength)}, self.options().dtype(type));
        const at::Tensor index = self.scalar_type() == at::kInt ? self : self.to(at::kLong);
        return out.index_add_(0, index, has_w ? *weights : at::ones_like(self, out.options()));
    }
    return fallback_to_cpu<ATEN_OP(bincount)>(self, weights, minlength);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("bincount", TORCH_FN(bincount));
    m.impl("histc", TORCH_FN(histc));
    m.impl("histc.out", TORCH_FN(histc_out));
    m.impl("histogram.bin_ct", TORCH_FN(histogram_bin_ct));
    m.impl("histogram.bins_tensor", TORCH_FN(histogram_bins_tensor));
}

}  // namespace torch_spyre::aten
