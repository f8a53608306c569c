// 2-D and 3-D pooling on the card, composed of device ops, for every window torch allows:
// kernel, stride, padding, dilation (max), ceil_mode, count_include_pad and divisor_override
// (avg); max_pool2d/3d with and without indices, avg_pool2d/3d and adaptive average / max
// pooling in 2-D (3-D and 4-D inputs) and 3-D (4-D and 5-D inputs: nn.MaxPool3d,
// nn.AvgPool3d, nn.LocalResponseNorm, nn.AdaptiveAvgPool3d, video and 3-D CNNs); forward,
// indices and backward. One code path serves any number N of spatial dims.
//
// A window reduction is separable: first over each row's kw taps, then over the kh rows (and
// for 3-D then over the kd planes). The input, padded (-inf for max, 0 for avg) to cover every
// window, is read through a strided view [..., Hp, Wo, kw] made dense by one copy on the card
// and reduced (amax / sum) over the taps, then the same over [..., Ho, Wo, kh] (and [..., Do,
// Ho, Wo, kd]): one pass per dim whose copy is k/s times the data, instead of one
// kh*kw/(sh*sw) times as large (a dim of one tap stepping by one needs no pass). An average's
// divisor is the product of its window's per-dim counts. A max's indices (the flat position in
// its (N, C) plane: h * W + w, d * H * W + h * W + w in 3-D) come from the same passes: argmax
// over each pass's taps (first of equal values, as the CPU's scan), then traced back from the
// first dim: the winner's position along D picks (gather) the winning row among the taps of
// that plane, the row's position picks the winning column; a window that is all -inf gets the
// CPU's index (its first in-bounds element). The backward of max scatters the gradient to the
// indices (scatter_add); the backward of avg adds each tap's share onto the padded input
// through strided views, one accumulation per tap (kh*kw, or kd*kh*kw for 3-D). Adaptive
// windows vary in size: along each dim every output gathers the kmax positions its window may
// hold (index_select, the unused ones masked for avg, repeats of the last one for max), then
// the same reductions; the backward of adaptive avg adds the masked shares back with index_add,
// dim by dim.
//
// max_pool2d/3d are composites over max_pool2d/3d_with_indices in torch 2.6, so, as for
// layer_norm, their spyre kernels replace them when no gradient is wanted (nobody reads the
// indices). max_pool3d_with_indices, its backward and _adaptive_avg_pool2d/3d (and backward) are
// not structured: their functional forms are the ones dispatched and registered.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// Element i of a pooling argument of one value (it stands for every dim) or one per dim.
int64_t pick(at::IntArrayRef a, size_t i) { return a.size() == 1 ? a[0] : a[i]; }

// One spatial dim of a pooling: input size, kernel, stride, padding, dilation, output size,
// and the padding after the input that the last window needs.
struct PoolDim {
    int64_t in = 0, k = 0, s = 0, p = 0, d = 1, out = 0, p_after = 0;

    int64_t padded() const { return p + in + p_after; }
};

// torch's output size (pooling_output_shape); 0 for a window that does not fit.
int64_t pooled_size(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode) {
    const int64_t span = in + 2 * p - d * (k - 1) - 1;
    if (span < 0) return 0;
    int64_t out = (span + (ceil_mode ? s - 1 : 0)) / s + 1;
    if (ceil_mode && (out - 1) * s >= in + p) --out;
    return out;
}

// The N spatial dims (the last N) of a pooling of a float spyre tensor of N + 1 or N + 2 dims
// with arguments torch accepts (each of 1 or N values; stride and dilation may be empty);
// nothing otherwise (the CPU fallback then gives torch's answer or error).
template <size_t N>
std::optional<std::array<PoolDim, N>> pool_dims(const at::Tensor& x, at::IntArrayRef kernel,
                                                at::IntArrayRef stride, at::IntArrayRef padding,
                                                at::IntArrayRef dilation, bool ceil_mode) {
    constexpr auto n = static_cast<int64_t>(N);
    const auto sized = [](at::IntArrayRef a) { return a.size() == 1 || a.size() == N; };
    if (!x.is_privateuseone() || !is_float(x.scalar_type()) ||
        (x.dim() != n + 1 && x.dim() != n + 2) || !sized(kernel) ||
        (!stride.empty() && !sized(stride)) || !sized(padding) ||
        (!dilation.empty() && !sized(dilation)) || x.numel() == 0)
        return std::nullopt;
    std::array<PoolDim, N> dims;
    for (size_t i = 0; i < N; ++i) {
        PoolDim& dim = dims[i];
        dim.in = x.size(x.dim() - n + static_cast<int64_t>(i));
        dim.k = pick(kernel, i);
        dim.s = stride.empty() ? dim.k : pick(stride, i);
        dim.p = pick(padding, i);
        dim.d = dilation.empty() ? 1 : pick(dilation, i);
        if (dim.k <= 0 || dim.s <= 0 || dim.d <= 0 || dim.p < 0 || dim.p > dim.k / 2)
            return std::nullopt;
        dim.out = pooled_size(dim.in, dim.k, dim.p, dim.s, dim.d, ceil_mode);
        if (dim.out < 1) return std::nullopt;
        const int64_t need = (dim.out - 1) * dim.s + (dim.k - 1) * dim.d + 1;
        dim.p_after = std::max<int64_t>(0, need - dim.p - dim.in);
    }
    return dims;
}

// x padded with `value` along its last dims.size() dims to their padded sizes, contiguous.
at::Tensor padded(const at::Tensor& x, at::ArrayRef<PoolDim> dims, double value) {
    std::vector<int64_t> pad;  // constant_pad_nd's order: the last dim first
    bool any = false;
    for (auto dim = dims.rbegin(); dim != dims.rend(); ++dim) {
        pad.insert(pad.end(), {dim->p, dim->p_after});
        any = any || dim->p || dim->p_after;
    }
    if (!any) return x.contiguous();
    return at::constant_pad_nd(x, pad, value).contiguous();
}

// The taps of the windows along dim `axis` (counted from the end: -1 the last) of a contiguous
// t [..., n, rest...]: [..., out, rest..., k], dense (one copy on the card).
at::Tensor taps(const at::Tensor& t, int64_t axis, const PoolDim& dim) {
    const auto a = static_cast<size_t>(t.dim() + axis);
    std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
    std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
    const int64_t step = strides[a];
    sizes[a] = dim.out;
    strides[a] = dim.s * step;
    sizes.push_back(dim.k);
    strides.push_back(dim.d * step);
    return t.as_strided(sizes, strides, t.storage_offset()).contiguous();
}

// The shape of a pooling of x over its last dims.size() dims.
std::vector<int64_t> pooled_shape(const at::Tensor& x, at::ArrayRef<PoolDim> dims) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - dims.size());
    for (const PoolDim& dim : dims) shape.push_back(dim.out);
    return shape;
}

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The windows of a max along one spatial dim, in the input padded to `size` (`pad` of it before
// the input's `in` positions): window o's tap k is at start[o] + k * step.
struct MaxDim {
    std::vector<int64_t> start;
    int64_t step = 1, size = 0, pad = 0, in = 0;
};

// v as an int64 tensor on `device` of shape [v.size(), 1 x trailing]: along dim -(trailing + 1)
// of a broadcast.
at::Tensor along(const std::vector<int64_t>& v, int64_t trailing, at::Device device) {
    std::vector<int64_t> shape(static_cast<size_t>(trailing + 1), 1);
    shape[0] = static_cast<int64_t>(v.size());
    return at::tensor(v, at::kLong).view(shape).to(device);
}

// The maximum of x's windows over its last dims.size() dims, separable: along each dim (the last
// first) `taps(t, i)` gives the windows of t along its spatial dim i and the dim of their taps,
// reduced by amax (an undefined tensor: windows of one tap each, nothing to reduce). With
// `indices`, argmax of each pass's taps (the first of equal values, as the CPU's scan) and the
// flat position of each window's max in its (N, C) plane of the input (d * H * W + h * W + w
// for 3 dims): the winning tap along the first dim gives the winner's position there, which
// picks (gather) the winning tap along the second dim among the first's positions, and so on.
// A window of -inf only gets the CPU's index: its first in-bounds element.
template <class Taps>
std::tuple<at::Tensor, at::Tensor> window_max(const at::Tensor& x, const std::vector<MaxDim>& dims,
                                              bool indices, const Taps& taps) {
    const auto n = static_cast<int64_t>(dims.size());
    const int64_t lead = x.dim() - n;
    std::vector<at::Tensor> tap(dims.size());  // [..., size of dims < i, out of dims >= i]
    at::Tensor values = x;
    for (int64_t i = n - 1; i >= 0; --i) {
        const auto [t, k] = taps(values, i);
        if (!t.defined()) continue;
        values = at::amax(t, {k});
        if (indices) tap[static_cast<size_t>(i)] = at::argmax(t, k);
    }
    if (!indices) return {values, at::Tensor()};
    const at::Device device = x.device();
    const bool pads =
        std::any_of(dims.begin(), dims.end(), [](const MaxDim& dim) { return dim.size != dim.in; });
    at::Tensor pos, index, outside, first;  // pos: flat in the padded input's dims up to i
    for (int64_t i = 0; i < n; ++i) {
        const MaxDim& dim = dims[static_cast<size_t>(i)];
        at::Tensor k = tap[static_cast<size_t>(i)];
        if (!k.defined())
            k = at::zeros(values.sizes(), x.options().dtype(at::kLong));
        else if (i > 0)  // the winning tap at the winner's position along the dims before
            k = at::gather(k.flatten(lead, lead + i - 1), lead, pos.flatten(lead, lead + i - 1))
                    .view(values.sizes());
        const at::Tensor p = along(dim.start, n - 1 - i, device) + k * dim.step;
        if (i < n - 1) pos = i == 0 ? p : pos * dim.size + p;
        const at::Tensor q = p - dim.pad;  // in the input
        index = i == 0 ? q : index * dim.in + q;
        if (!pads) continue;
        std::vector<int64_t> f(dim.start.size());  // the first in-bounds tap of each window
        for (size_t o = 0; o < f.size(); ++o) {
            f[o] = dim.start[o] - dim.pad;
            while (f[o] < 0) f[o] += dim.step;
        }
        const at::Tensor fi = along(f, n - 1 - i, device);
        const at::Tensor off = (q < 0).logical_or(q >= dim.in);
        first = i == 0 ? fi : first * dim.in + fi;
        outside = i == 0 ? off : outside.logical_or(off);
    }
    // a window of -inf only: its first in-bounds element, as the CPU's scan leaves it
    if (pads) index = at::where(outside, first, index);
    return {values, index};
}

// max pooling over x's last dims.size() dims: values, and with `indices` each window's max's
// flat position in its plane. The input padded with -inf; taps through strided views.
std::tuple<at::Tensor, at::Tensor> max_pool(const at::Tensor& x, at::ArrayRef<PoolDim> dims,
                                            bool indices) {
    c10::DeviceGuard guard(x.device());
    std::vector<MaxDim> windows;
    for (const PoolDim& dim : dims) {
        MaxDim w{{}, dim.d, dim.padded(), dim.p, dim.in};
        for (int64_t o = 0; o < dim.out; ++o) w.start.push_back(o * dim.s);
        windows.push_back(std::move(w));
    }
    const auto n = static_cast<int64_t>(dims.size());
    const auto row_taps = [&](const at::Tensor& t, int64_t i) {
        const PoolDim& dim = dims[static_cast<size_t>(i)];
        if (dim.k == 1 && dim.s == 1) return std::make_pair(at::Tensor(), int64_t{-1});
        return std::make_pair(taps(t, i - n, dim), int64_t{-1});  // [..., out, rest..., k]
    };
    return window_max(padded(x, dims, kNegInf), windows, indices, row_taps);
}

// The values of max_pool2d/3d_with_indices, through the dispatcher.
template <size_t N>
at::Tensor with_indices_values(const at::Tensor& self, at::IntArrayRef kernel,
                               at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, bool ceil_mode) {
    if constexpr (N == 2)
        return std::get<0>(
            at::max_pool2d_with_indices(self, kernel, stride, padding, dilation, ceil_mode));
    else
        return std::get<0>(
            at::max_pool3d_with_indices(self, kernel, stride, padding, dilation, ceil_mode));
}

// max_pool2d/3d are composites over max_pool2d/3d_with_indices in torch 2.6: replaced for spyre
// tensors when no gradient is wanted (nobody reads the indices, which are then not computed).
template <size_t N>
at::Tensor max_pool_spyre(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
    if (auto dims = pool_dims<N>(self, kernel, stride, padding, dilation, ceil_mode))
        return std::get<0>(max_pool(self, *dims, false));
    return with_indices_values<N>(self, kernel, stride, padding, dilation, ceil_mode);
}

template <size_t N>
at::Tensor max_pool_autograd(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                             at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
    if (at::GradMode::is_enabled() && self.requires_grad())
        return with_indices_values<N>(self, kernel, stride, padding, dilation, ceil_mode);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // through the dispatcher, not a direct call: fake tensors (torch.compile) take the Python key
    if constexpr (N == 2)
        return at::max_pool2d(self, kernel, stride, padding, dilation, ceil_mode);
    else
        return at::max_pool3d(self, kernel, stride, padding, dilation, ceil_mode);
}

// max_pool2d_with_indices.out, max_pool3d_with_indices.out (Op: the operator, for the fallback)
template <size_t N, class Op>
std::tuple<at::Tensor&, at::Tensor&> max_pool_with_indices_out(
    const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef dilation, bool ceil_mode, at::Tensor& out, at::Tensor& indices) {
    const auto dims = pool_dims<N>(self, kernel, stride, padding, dilation, ceil_mode);
    if (!dims || !out.is_privateuseone() || !indices.is_privateuseone() ||
        indices.scalar_type() != at::kLong)
        return fallback_to_cpu<Op>(self, kernel, stride, padding, dilation, ceil_mode, out,
                                   indices);
    auto [values, index] = max_pool(self, *dims, true);
    assign(out, values);
    assign(indices, index);
    return {out, indices};
}

// max_pool3d_with_indices is not structured in torch 2.6: its functional form is the one called.
std::tuple<at::Tensor, at::Tensor> max_pool3d_with_indices(
    const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef dilation, bool ceil_mode) {
    const auto dims = pool_dims<3>(self, kernel, stride, padding, dilation, ceil_mode);
    if (!dims)
        return fallback_to_cpu<ATEN_OP(max_pool3d_with_indices)>(self, kernel, stride, padding,
                                                                 dilation, ceil_mode);
    return max_pool(self, *dims, true);
}

// The gradient of a max pooling over the last `spatial` dims: each output's gradient added at
// its max's position in its plane.
at::Tensor scatter_to_indices(const at::Tensor& grad, const at::Tensor& self,
                              const at::Tensor& indices, int64_t spatial) {
    c10::DeviceGuard guard(self.device());
    const int64_t lead = self.dim() - spatial;
    std::vector<int64_t> flat(self.sizes().begin(), self.sizes().begin() + lead);
    flat.push_back(c10::multiply_integers(self.sizes().slice(static_cast<size_t>(lead))));
    const at::Tensor g = widened(grad).flatten(lead);
    at::Tensor gi = at::zeros(flat, g.options());
    gi.scatter_add_(lead, indices.flatten(lead), g);
    return gi.view(self.sizes()).to(grad.scalar_type());
}

// A gradient of a pooling over `spatial` dims the card takes.
bool grad_on_card(const at::Tensor& grad, const at::Tensor& self, int64_t spatial) {
    return grad.is_privateuseone() && self.is_privateuseone() && is_float(grad.scalar_type()) &&
           grad.scalar_type() == self.scalar_type() &&
           (self.dim() == spatial + 1 || self.dim() == spatial + 2);
}

// A max pooling's gradient the card takes: its indices, on the card, of the gradient's shape.
bool max_grad_on_card(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& indices,
                      int64_t spatial) {
    return grad_on_card(grad, self, spatial) && indices.is_privateuseone() &&
           indices.scalar_type() == at::kLong && indices.sizes() == grad.sizes();
}

// The gradient of a max pooling of N dims the card takes: of the pooling's shape (a pooling
// torch accepts), its indices on the card.
template <size_t N>
bool max_pool_grad_on_card(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef kernel,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, bool ceil_mode, const at::Tensor& indices) {
    const auto dims = pool_dims<N>(self, kernel, stride, padding, dilation, ceil_mode);
    return dims && max_grad_on_card(grad, self, indices, N) &&
           grad.sizes() == pooled_shape(self, *dims);
}

// max_pool2d_with_indices_backward.grad_input, max_pool3d_with_indices_backward.grad_input
template <size_t N, class Op>
at::Tensor& max_pool_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                  at::IntArrayRef kernel, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                  const at::Tensor& indices, at::Tensor& grad_input) {
    if (!max_pool_grad_on_card<N>(grad, self, kernel, stride, padding, dilation, ceil_mode,
                                  indices) ||
        !grad_input.is_privateuseone())
        return fallback_to_cpu<Op>(grad, self, kernel, stride, padding, dilation, ceil_mode,
                                   indices, grad_input);
    return assign(grad_input, scatter_to_indices(grad, self, indices, N));
}

// max_pool3d_with_indices_backward (not structured either)
at::Tensor max_pool3d_with_indices_backward(const at::Tensor& grad, const at::Tensor& self,
                                            at::IntArrayRef kernel, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation,
                                            bool ceil_mode, const at::Tensor& indices) {
    if (!max_pool_grad_on_card<3>(grad, self, kernel, stride, padding, dilation, ceil_mode,
                                  indices))
        return fallback_to_cpu<ATEN_OP(max_pool3d_with_indices_backward)>(
            grad, self, kernel, stride, padding, dilation, ceil_mode, indices);
    return scatter_to_indices(grad, self, indices, 3);
}

// The products of one count of each dim, over every combination: fp32 [size of each list] on
// `device` (`value` instead of each, when given).
at::Tensor products(const std::vector<std::vector<int64_t>>& counts, std::optional<int64_t> value,
                    at::Device device) {
    std::vector<int64_t> n{1}, shape;
    for (const std::vector<int64_t>& c : counts) {
        std::vector<int64_t> next;
        next.reserve(n.size() * c.size());
        for (int64_t a : n)
            for (int64_t b : c) next.push_back(a * b);
        n = std::move(next);
        shape.push_back(static_cast<int64_t>(c.size()));
    }
    std::vector<float> d(n.size());
    for (size_t i = 0; i < n.size(); ++i) d[i] = static_cast<float>(value ? *value : n[i]);
    return at::tensor(d, at::kFloat).view(shape).to(device);
}

// How many taps of each window along one dim an average counts: the window clipped to the
// padded input, or to the input itself without count_include_pad (as torch computes it).
std::vector<int64_t> window_counts(const PoolDim& dim, bool count_include_pad) {
    std::vector<int64_t> n(static_cast<size_t>(dim.out));
    for (int64_t o = 0; o < dim.out; ++o) {
        int64_t start = o * dim.s - dim.p, end = std::min(start + dim.k, dim.in + dim.p);
        if (!count_include_pad) {
            start = std::max<int64_t>(start, 0);
            end = std::min(end, dim.in);
        }
        n[static_cast<size_t>(o)] = end - start;
    }
    return n;
}

// The divisor of each window of an average pooling [out of each dim] (CPU values: the product
// of the per-dim counts; divisor_override wins).
at::Tensor avg_divisors(at::ArrayRef<PoolDim> dims, bool count_include_pad,
                        std::optional<int64_t> divisor, at::Device device) {
    std::vector<std::vector<int64_t>> counts;
    for (const PoolDim& dim : dims) counts.push_back(window_counts(dim, count_include_pad));
    return products(counts, divisor, device);
}

// The average pooling of N dims of a float spyre tensor with arguments torch accepts; nothing
// otherwise (divisor_override 0 is the CPU's error).
template <size_t N>
std::optional<std::array<PoolDim, N>> avg_geometry(const at::Tensor& x, at::IntArrayRef kernel,
                                                   at::IntArrayRef stride, at::IntArrayRef padding,
                                                   bool ceil_mode, std::optional<int64_t> divisor) {
    if (divisor && *divisor == 0) return std::nullopt;  // the CPU's error
    return pool_dims<N>(x, kernel, stride, padding, {}, ceil_mode);
}

// The window sums along dim `axis` of a contiguous t; t itself for windows of one tap that
// step by one (nothing to add).
at::Tensor window_sums(const at::Tensor& t, int64_t axis, const PoolDim& dim) {
    if (dim.k == 1 && dim.s == 1) return t;
    return at::sum(taps(t, axis, dim), {-1});
}

// The average pooling of x over its last dims.size() dims: the window sums along each dim (the
// last first) of x padded with 0, divided by each window's divisor; 16-bit inputs summed in
// fp32 and rounded once.
at::Tensor avg_pool(const at::Tensor& x, at::ArrayRef<PoolDim> dims, bool count_include_pad,
                    std::optional<int64_t> divisor) {
    c10::DeviceGuard guard(x.device());
    const auto n = static_cast<int64_t>(dims.size());
    at::Tensor sums = padded(widened(x), dims, 0.0);
    for (int64_t i = n - 1; i >= 0; --i)
        sums = window_sums(sums, i - n, dims[static_cast<size_t>(i)]);
    const at::Tensor r = sums / avg_divisors(dims, count_include_pad, divisor, x.device());
    return r.to(x.scalar_type());
}

// The gradient of an average pooling: each window's share of the gradient added onto the
// padded input, one strided view per tap (every combination of the dims' taps), the padding
// then cut off.
at::Tensor avg_pool_backward(const at::Tensor& grad, const at::Tensor& self,
                             at::ArrayRef<PoolDim> dims, bool count_include_pad,
                             std::optional<int64_t> divisor) {
    c10::DeviceGuard guard(self.device());
    const auto n = static_cast<int64_t>(dims.size());
    const int64_t lead = self.dim() - n;
    const auto dim = [&](int64_t i) -> const PoolDim& { return dims[static_cast<size_t>(i)]; };
    const at::Tensor share =
        widened(grad) / avg_divisors(dims, count_include_pad, divisor, self.device());
    std::vector<int64_t> psize(self.sizes().begin(), self.sizes().begin() + lead);
    for (int64_t i = 0; i < n; ++i) psize.push_back(dim(i).padded());
    at::Tensor gp = at::zeros(psize, share.options());
    // one view of gp per tap: [..., out of each dim], each dim stepping by its stride
    const std::vector<int64_t> sizes = pooled_shape(self, dims);
    std::vector<int64_t> strides(gp.strides().begin(), gp.strides().end());
    for (int64_t i = 0; i < n; ++i) strides[static_cast<size_t>(lead + i)] *= dim(i).s;
    std::vector<int64_t> tap(static_cast<size_t>(n), 0);
    for (;;) {
        int64_t offset = 0;
        for (int64_t i = 0; i < n; ++i)
            offset += tap[static_cast<size_t>(i)] * dim(i).d * gp.stride(lead + i);
        gp.as_strided(sizes, strides, offset).add_(share);
        int64_t i = n - 1;  // the next tap: the last dim's taps change fastest
        while (i >= 0 && ++tap[static_cast<size_t>(i)] == dim(i).k)
            tap[static_cast<size_t>(i--)] = 0;
        if (i < 0) break;
    }
    at::Tensor gi = gp;
    for (int64_t i = 0; i < n; ++i) gi = gi.narrow(lead + i, dim(i).p, dim(i).in);
    return gi.to(grad.scalar_type());
}

at::Tensor& avg_pool2d_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                           at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor, at::Tensor& out) {
    const auto g = avg_geometry<2>(self, kernel, stride, padding, ceil_mode, divisor);
    if (!g || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(avg_pool2d, out)>(self, kernel, stride, padding, ceil_mode,
                                                          count_include_pad, divisor, out);
    return assign(out, avg_pool(self, *g, count_include_pad, divisor));
}

at::Tensor& avg_pool2d_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                    at::IntArrayRef kernel, at::IntArrayRef stride,
                                    at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                                    std::optional<int64_t> divisor, at::Tensor& grad_input) {
    const auto g = avg_geometry<2>(self, kernel, stride, padding, ceil_mode, divisor);
    if (!g || !grad_on_card(grad, self, 2) || !grad_input.is_privateuseone() ||
        grad.sizes() != pooled_shape(self, *g))
        return fallback_to_cpu<ATEN_OP2(avg_pool2d_backward, grad_input)>(
            grad, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor, grad_input);
    return assign(grad_input, avg_pool_backward(grad, self, *g, count_include_pad, divisor));
}

at::Tensor& avg_pool3d_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                           at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor, at::Tensor& out) {
    const auto g = avg_geometry<3>(self, kernel, stride, padding, ceil_mode, divisor);
    if (!g || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(avg_pool3d, out)>(self, kernel, stride, padding, ceil_mode,
                                                          count_include_pad, divisor, out);
    return assign(out, avg_pool(self, *g, count_include_pad, divisor));
}

at::Tensor& avg_pool3d_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                    at::IntArrayRef kernel, at::IntArrayRef stride,
                                    at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                                    std::optional<int64_t> divisor, at::Tensor& grad_input) {
    const auto g = avg_geometry<3>(self, kernel, stride, padding, ceil_mode, divisor);
    if (!g || !grad_on_card(grad, self, 3) || !grad_input.is_privateuseone() ||
        grad.sizes() != pooled_shape(self, *g))
        return fallback_to_cpu<ATEN_OP2(avg_pool3d_backward, grad_input)>(
            grad, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor, grad_input);
    return assign(grad_input, avg_pool_backward(grad, self, *g, count_include_pad, divisor));
}

// Adaptive windows along one dim: output o reads [floor(o * in / out), ceil((o + 1) * in /
// out)). The kmax positions each output gathers (the last one repeated past the window's end),
// whether each is inside the window, and each window's start and length.
struct AdaptiveDim {
    int64_t in = 0, out = 0, kmax = 0;
    std::vector<int64_t> index;
    std::vector<uint8_t> inside;
    std::vector<int64_t> start, length;
};

AdaptiveDim adaptive_dim(int64_t in, int64_t out) {
    AdaptiveDim a;
    a.in = in;
    a.out = out;
    a.start.resize(out);
    a.length.resize(out);
    for (int64_t o = 0; o < out; ++o) {
        a.start[o] = (o * in) / out;
        const int64_t end = ((o + 1) * in + out - 1) / out;
        a.length[o] = end - a.start[o];
        a.kmax = std::max(a.kmax, a.length[o]);
    }
    for (int64_t o = 0; o < out; ++o) {
        for (int64_t k = 0; k < a.kmax; ++k) {
            a.index.push_back(a.start[o] + std::min(k, a.length[o] - 1));
            a.inside.push_back(k < a.length[o]);
        }
    }
    return a;
}

// The adaptive windows of the last N dims of a float spyre tensor of N + 1 or N + 2 dims for an
// output size torch accepts; nothing otherwise (the CPU fallback then gives torch's answer or
// error).
template <size_t N>
std::optional<std::vector<AdaptiveDim>> adaptive_dims(const at::Tensor& x,
                                                      at::IntArrayRef output_size) {
    constexpr auto n = static_cast<int64_t>(N);
    if (!x.is_privateuseone() || !is_float(x.scalar_type()) ||
        (x.dim() != n + 1 && x.dim() != n + 2) || output_size.size() != N || x.numel() == 0)
        return std::nullopt;
    std::vector<AdaptiveDim> dims;
    for (size_t i = 0; i < N; ++i) {
        if (output_size[i] <= 0) return std::nullopt;
        dims.push_back(adaptive_dim(x.size(x.dim() - n + static_cast<int64_t>(i)), output_size[i]));
    }
    return dims;
}

// t [..., n, rest...] -> [..., out, kmax, rest...]: the positions of the windows along dim
// `axis` (counted from the end), gathered (index_select).
at::Tensor gather_windows(const at::Tensor& t, const AdaptiveDim& a, int64_t axis) {
    const at::Tensor idx = at::tensor(a.index, at::kLong).to(t.device());
    const at::Tensor g = t.index_select(axis, idx);
    std::vector<int64_t> sizes(g.sizes().begin(), g.sizes().end());
    const auto d = static_cast<size_t>(g.dim() + axis);
    sizes[d] = a.kmax;
    sizes.insert(sizes.begin() + static_cast<int64_t>(d), a.out);
    return g.view(sizes);
}

// Which of gather_windows's positions along dim `axis` are inside their windows: [out, kmax,
// 1...] against [..., out, kmax, rest...].
at::Tensor inside_mask(const AdaptiveDim& a, int64_t axis, at::Device device) {
    std::vector<int64_t> shape(static_cast<size_t>(1 - axis), 1);
    shape[0] = a.out;
    shape[1] = a.kmax;
    return at::tensor(a.inside).to(at::kBool).view(shape).to(device);
}

// Each adaptive window's size (the product of its per-dim lengths), fp32 [out of each dim].
at::Tensor areas(const std::vector<AdaptiveDim>& dims, at::Device device) {
    std::vector<std::vector<int64_t>> lengths;
    for (const AdaptiveDim& a : dims) lengths.push_back(a.length);
    return products(lengths, std::nullopt, device);
}

// _adaptive_avg_pool2d/3d: the masked window sums along each dim (the first first), divided by
// each window's size.
template <size_t N, class Op>
at::Tensor adaptive_avg_pool(const at::Tensor& self, at::IntArrayRef output_size) {
    const auto dims = adaptive_dims<N>(self, output_size);
    if (!dims) return fallback_to_cpu<Op>(self, output_size);
    c10::DeviceGuard guard(self.device());
    constexpr auto n = static_cast<int64_t>(N);
    at::Tensor sums = widened(self);
    for (int64_t i = 0; i < n; ++i) {
        const AdaptiveDim& a = (*dims)[static_cast<size_t>(i)];
        const at::Tensor w = gather_windows(sums, a, i - n);  // [..., out, kmax, rest...]
        sums = at::where(inside_mask(a, i - n, self.device()), w, 0.0).sum(i - n);
    }
    return (sums / areas(*dims, self.device())).to(self.scalar_type());
}

// _adaptive_avg_pool2d/3d_backward: each output's share added over its window along each dim
// (the last first: index_add of the masked shares onto the gathered positions).
template <size_t N, class Op>
at::Tensor adaptive_avg_pool_backward(const at::Tensor& grad, const at::Tensor& self) {
    constexpr auto n = static_cast<int64_t>(N);
    const auto lead = self.dim() - n;
    const auto dims = grad.dim() == self.dim() && lead >= 0
                          ? adaptive_dims<N>(self, grad.sizes().slice(static_cast<size_t>(lead)))
                          : std::nullopt;
    if (!dims || !grad.is_privateuseone() || grad.scalar_type() != self.scalar_type() ||
        grad.sizes().slice(0, static_cast<size_t>(lead)) !=
            self.sizes().slice(0, static_cast<size_t>(lead)))
        return fallback_to_cpu<Op>(grad, self);
    c10::DeviceGuard guard(self.device());
    at::Tensor t = widened(grad) / areas(*dims, self.device());
    for (int64_t i = n - 1; i >= 0; --i) {
        const AdaptiveDim& a = (*dims)[static_cast<size_t>(i)];
        const int64_t axis = i - n;
        // [..., out, rest...] -> [..., out, kmax, rest...] masked -> added onto [..., in, rest...]
        const at::Tensor mask = inside_mask(a, axis, self.device()).to(at::kFloat);
        const at::Tensor shares = (t.unsqueeze(axis) * mask).flatten(axis - 1, axis);
        std::vector<int64_t> size(t.sizes().begin(), t.sizes().end());
        size[static_cast<size_t>(t.dim() + axis)] = a.in;
        at::Tensor sums = at::zeros(size, t.options());
        sums.index_add_(axis, at::tensor(a.index, at::kLong).to(self.device()), shares);
        t = sums;
    }
    return t.to(grad.scalar_type());
}

// adaptive_max_pool2d/3d.out: the window maxima (repeated positions do not change a max) and
// their positions, as for max_pool: along the last dim first.
template <size_t N, class Op>
std::tuple<at::Tensor&, at::Tensor&> adaptive_max_pool_out(const at::Tensor& self,
                                                           at::IntArrayRef output_size,
                                                           at::Tensor& out, at::Tensor& indices) {
    const auto dims = adaptive_dims<N>(self, output_size);
    if (!dims || !out.is_privateuseone() || !indices.is_privateuseone())
        return fallback_to_cpu<Op>(self, output_size, out, indices);
    c10::DeviceGuard guard(self.device());
    constexpr auto n = static_cast<int64_t>(N);
    std::vector<MaxDim> windows;
    for (const AdaptiveDim& a : *dims) windows.push_back(MaxDim{a.start, 1, a.in, 0, a.in});
    const auto gathered = [&](const at::Tensor& t, int64_t i) {
        const AdaptiveDim& a = (*dims)[static_cast<size_t>(i)];
        if (a.out == a.in) return std::make_pair(at::Tensor(), int64_t{0});  // one tap each
        return std::make_pair(gather_windows(t, a, i - n), i - n);
    };
    auto [values, index] = window_max(self, windows, true, gathered);
    assign(out, values);
    assign(indices, index);
    return {out, indices};
}

// adaptive_max_pool2d/3d_backward.grad_input
template <size_t N, class Op>
at::Tensor& adaptive_max_pool_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                           const at::Tensor& indices, at::Tensor& grad_input) {
    if (!max_grad_on_card(grad, self, indices, N) || !grad_input.is_privateuseone())
        return fallback_to_cpu<Op>(grad, self, indices, grad_input);
    return assign(grad_input, scatter_to_indices(grad, self, indices, N));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("avg_pool2d.out", TORCH_FN(avg_pool2d_out));
    m.impl("avg_pool2d_backward.grad_input", TORCH_FN(avg_pool2d_backward_out));
    m.impl("avg_pool3d.out", TORCH_FN(avg_pool3d_out));
    m.impl("avg_pool3d_backward.grad_input", TORCH_FN(avg_pool3d_backward_out));
    m.impl("max_pool2d", TORCH_FN(max_pool_spyre<2>));
    m.impl("max_pool3d", TORCH_FN(max_pool_spyre<3>));
    m.impl("max_pool2d_with_indices.out",
           TORCH_FN((max_pool_with_indices_out<2, ATEN_OP2(max_pool2d_with_indices, out)>)));
    m.impl("max_pool3d_with_indices", TORCH_FN(max_pool3d_with_indices));
    m.impl("max_pool3d_with_indices.out",
           TORCH_FN((max_pool_with_indices_out<3, ATEN_OP2(max_pool3d_with_indices, out)>)));
    m.impl("max_pool2d_with_indices_backward.grad_input",
           TORCH_FN(
               (max_pool_backward_out<2, ATEN_OP2(max_pool2d_with_indices_backward, grad_input)>)));
    m.impl("max_pool3d_with_indices_backward", TORCH_FN(max_pool3d_with_indices_backward));
    m.impl("max_pool3d_with_indices_backward.grad_input",
           TORCH_FN(
               (max_pool_backward_out<3, ATEN_OP2(max_pool3d_with_indices_backward, grad_input)>)));
    m.impl("_adaptive_avg_pool2d", TORCH_FN((adaptive_avg_pool<2, ATEN_OP(_adaptive_avg_pool2d)>)));
    m.impl("_adaptive_avg_pool3d", TORCH_FN((adaptive_avg_pool<3, ATEN_OP(_adaptive_avg_pool3d)>)));
    m.impl("_adaptive_avg_pool2d_backward",
           TORCH_FN((adaptive_avg_pool_backward<2, ATEN_OP(_adaptive_avg_pool2d_backward)>)));
    m.impl("_adaptive_avg_pool3d_backward",
           TORCH_FN((adaptive_avg_pool_backward<3, ATEN_OP(_adaptive_avg_pool3d_backward)>)));
    m.impl("adaptive_max_pool2d.out",
           TORCH_FN((adaptive_max_pool_out<2, ATEN_OP2(adaptive_max_pool2d, out)>)));
    m.impl("adaptive_max_pool3d.out",
           TORCH_FN((adaptive_max_pool_out<3, ATEN_OP2(adaptive_max_pool3d, out)>)));
    m.impl("adaptive_max_pool2d_backward.grad_input",
           TORCH_FN((adaptive_max_pool_backward_out<2, ATEN_OP2(adaptive_max_pool2d_backward,
                                                                grad_input)>)));
    m.impl("adaptive_max_pool3d_backward.grad_input",
           TORCH_FN((adaptive_max_pool_backward_out<3, ATEN_OP2(adaptive_max_pool3d_backward,
                                                                grad_input)>)));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
    m.impl("max_pool2d", TORCH_FN(max_pool_autograd<2>));
    m.impl("max_pool3d", TORCH_FN(max_pool_autograd<3>));
}

}  // namespace torch_spyre::aten
