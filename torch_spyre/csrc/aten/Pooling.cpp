// 2-D pooling on the card, composed of device ops, for every window torch allows: kernel,
// stride, padding, dilation (max), ceil_mode, count_include_pad and divisor_override (avg),
// 3-D and 4-D inputs; forward, indices and backward; and adaptive average / max pooling. 3-D
// average pooling (avg_pool3d: nn.AvgPool3d, nn.LocalResponseNorm, 3-D CNNs) the same way, 4-D
// and 5-D inputs, forward and backward.
//
// A window reduction is separable: first over each row's kw taps, then over the kh rows (and
// for 3-D then over the kd planes). The input, padded (-inf for max, 0 for avg) to cover every
// window, is read through a strided view [..., Hp, Wo, kw] made dense by one copy on the card
// and reduced (amax / sum) over the taps, then the same over [..., Ho, Wo, kh] (and [..., Do,
// Ho, Wo, kd]): one pass per dim whose copy is k/s times the data, instead of one
// kh*kw/(sh*sw) times as large (a dim of one tap stepping by one needs no pass). An average's
// divisor is the product of its window's per-dim counts. max_pool2d's indices come from the
// same passes: argmax over a row's taps (first of equal values, as the CPU's scan), then over
// the rows, the column of the winning row gathered; a window that is all -inf gets the CPU's
// index (its first in-bounds element). The backward of max scatters the gradient to the
// indices (scatter_add); the backward of avg adds each tap's share onto the padded input
// through strided views, one accumulation per tap (kh*kw, or kd*kh*kw for 3-D). Adaptive
// windows vary in size: each output row gathers the kmax input rows its window may hold
// (index_select, the unused ones masked), then the same along the columns.
//
// max_pool2d is a composite over max_pool2d_with_indices in torch 2.6, so, as for layer_norm,
// its spyre kernel replaces it when no gradient is wanted (nobody reads the indices).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
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

struct Pool2d {
    PoolDim h, w;
};

// The 2-D pooling of a float spyre tensor of 3 or 4 dims (pool_dims).
std::optional<Pool2d> geometry(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
    const auto dims = pool_dims<2>(x, kernel, stride, padding, dilation, ceil_mode);
    if (!dims) return std::nullopt;
    return Pool2d{(*dims)[0], (*dims)[1]};
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

// max pooling: values, and with `indices` the flat h * W + w position of each window's max.
std::tuple<at::Tensor, at::Tensor> max_pool(const at::Tensor& x, const Pool2d& g, bool indices) {
    c10::DeviceGuard guard(x.device());
    const at::Tensor xp = padded(x, {g.h, g.w}, kNegInf);
    const at::Tensor row_taps = taps(xp, -1, g.w);        // [..., Hp, Wo, kw]
    const at::Tensor row_max = at::amax(row_taps, {-1});  // [..., Hp, Wo]
    const at::Tensor col_taps = taps(row_max, -2, g.h);   // [..., Ho, Wo, kh]
    const at::Tensor values = at::amax(col_taps, {-1});   // [..., Ho, Wo]
    if (!indices) return {values, at::Tensor()};
    const auto opts = x.options().dtype(at::kLong);
    const at::Tensor kj = at::argmax(row_taps, -1);                // [..., Hp, Wo]
    const at::Tensor ki = at::argmax(col_taps, -1);                // [..., Ho, Wo]
    const at::Tensor ho = at::arange(g.h.out, opts).unsqueeze(1);  // [Ho, 1]
    const at::Tensor wo = at::arange(g.w.out, opts);               // [Wo]
    const at::Tensor prow = ho * g.h.s + ki * g.h.d;               // the winning padded row
    const at::Tensor kcol = at::gather(kj, -2, prow);              // its winning tap
    const at::Tensor row = prow - g.h.p, col = wo * g.w.s - g.w.p + kcol * g.w.d;
    at::Tensor index = row * g.w.in + col;
    // a window of -inf only: its first in-bounds element, as the CPU's scan leaves it
    const auto first = [](const PoolDim& dim, int64_t o) {
        int64_t start = o * dim.s - dim.p;
        while (start < 0) start += dim.d;
        return start;
    };
    std::vector<int64_t> first_row(g.h.out), first_col(g.w.out);
    for (int64_t i = 0; i < g.h.out; ++i) first_row[i] = first(g.h, i);
    for (int64_t j = 0; j < g.w.out; ++j) first_col[j] = first(g.w, j);
    const at::Tensor fr = at::tensor(first_row, at::kLong).to(x.device()).unsqueeze(1);
    const at::Tensor fc = at::tensor(first_col, at::kLong).to(x.device());
    const at::Tensor outside =
        (row < 0).logical_or(row >= g.h.in).logical_or(col < 0).logical_or(col >= g.w.in);
    index = at::where(outside, fr * g.w.in + fc, index);
    return {values, index};
}

at::Tensor max_pool2d_spyre(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
    if (auto g = geometry(self, kernel, stride, padding, dilation, ceil_mode))
        return std::get<0>(max_pool(self, *g, false));
    return std::get<0>(
        at::max_pool2d_with_indices(self, kernel, stride, padding, dilation, ceil_mode));
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_with_indices_out(
    const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
    at::IntArrayRef dilation, bool ceil_mode, at::Tensor& out, at::Tensor& indices) {
    const auto g = geometry(self, kernel, stride, padding, dilation, ceil_mode);
    if (!g || !out.is_privateuseone() || !indices.is_privateuseone() ||
        indices.scalar_type() != at::kLong)
        return fallback_to_cpu<ATEN_OP2(max_pool2d_with_indices, out)>(
            self, kernel, stride, padding, dilation, ceil_mode, out, indices);
    auto [values, index] = max_pool(self, *g, true);
    assign(out, values);
    assign(indices, index);
    return {out, indices};
}

// The gradient of a max pooling: each output's gradient added at its max's position.
at::Tensor scatter_to_indices(const at::Tensor& grad, const at::Tensor& self,
                              const at::Tensor& indices) {
    c10::DeviceGuard guard(self.device());
    const int64_t lead = self.dim() - 2, hw = self.size(-2) * self.size(-1);
    std::vector<int64_t> flat(self.sizes().begin(), self.sizes().begin() + lead);
    flat.push_back(hw);
    const at::Tensor g = widened(grad).flatten(lead);
    at::Tensor gi = at::zeros(flat, g.options());
    gi.scatter_add_(lead, indices.flatten(lead), g);
    return gi.view(self.sizes()).to(grad.scalar_type());
}

// A gradient of a pooling over `spatial` dims the card takes.
bool grad_on_card(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& out,
                  int64_t spatial = 2) {
    return grad.is_privateuseone() && self.is_privateuseone() && out.is_privateuseone() &&
           is_float(grad.scalar_type()) && grad.scalar_type() == self.scalar_type() &&
           (self.dim() == spatial + 1 || self.dim() == spatial + 2);
}

at::Tensor& max_pool2d_with_indices_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                                 at::IntArrayRef kernel, at::IntArrayRef stride,
                                                 at::IntArrayRef padding, at::IntArrayRef dilation,
                                                 bool ceil_mode, const at::Tensor& indices,
                                                 at::Tensor& grad_input) {
    if (!grad_on_card(grad, self, grad_input) || !indices.is_privateuseone() ||
        indices.sizes() != grad.sizes())
        return fallback_to_cpu<ATEN_OP2(max_pool2d_with_indices_backward, grad_input)>(
            grad, self, kernel, stride, padding, dilation, ceil_mode, indices, grad_input);
    return assign(grad_input, scatter_to_indices(grad, self, indices));
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
    std::vector<int64_t> n{1}, shape;
    for (const PoolDim& dim : dims) {
        const std::vector<int64_t> c = window_counts(dim, count_include_pad);
        std::vector<int64_t> next;
        next.reserve(n.size() * c.size());
        for (int64_t a : n)
            for (int64_t b : c) next.push_back(a * b);
        n = std::move(next);
        shape.push_back(dim.out);
    }
    std::vector<float> d(n.size());
    for (size_t i = 0; i < n.size(); ++i) d[i] = static_cast<float>(divisor ? *divisor : n[i]);
    return at::tensor(d, at::kFloat).view(shape).to(device);
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
    if (!g || !grad_on_card(grad, self, grad_input) || grad.sizes() != pooled_shape(self, *g))
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
    if (!g || !grad_on_card(grad, self, grad_input, 3) || grad.sizes() != pooled_shape(self, *g))
        return fallback_to_cpu<ATEN_OP2(avg_pool3d_backward, grad_input)>(
            grad, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor, grad_input);
    return assign(grad_input, avg_pool_backward(grad, self, *g, count_include_pad, divisor));
}

// Adaptive windows along one dim: output o reads [floor(o * in / out), ceil((o + 1) * in /
// out)). Returns the kmax positions each output gathers (the last one repeated past the
// window's end), whether each is inside the window, and each window's length.
struct AdaptiveDim {
    int64_t kmax = 0;
    std::vector<int64_t> index;
    std::vector<uint8_t> inside;
    std::vector<int64_t> length;
};

AdaptiveDim adaptive_dim(int64_t in, int64_t out) {
    AdaptiveDim a;
    a.length.resize(out);
    std::vector<int64_t> start(out);
    for (int64_t o = 0; o < out; ++o) {
        start[o] = (o * in) / out;
        const int64_t end = ((o + 1) * in + out - 1) / out;
        a.length[o] = end - start[o];
        a.kmax = std::max(a.kmax, a.length[o]);
    }
    for (int64_t o = 0; o < out; ++o) {
        for (int64_t k = 0; k < a.kmax; ++k) {
            a.index.push_back(start[o] + std::min(k, a.length[o] - 1));
            a.inside.push_back(k < a.length[o]);
        }
    }
    return a;
}

bool adaptive_on_card(const at::Tensor& x, at::IntArrayRef output_size) {
    return x.is_privateuseone() && is_float(x.scalar_type()) && (x.dim() == 3 || x.dim() == 4) &&
           output_size.size() == 2 && output_size[0] > 0 && output_size[1] > 0 && x.size(-2) > 0 &&
           x.size(-1) > 0 && x.numel() > 0;
}

// x [..., n, m] -> [..., out, kmax, m] (dim -2) gathered rows, or [..., n, out, kmax] (dim -1)
at::Tensor gather_windows(const at::Tensor& x, const AdaptiveDim& a, int64_t dim, int64_t out) {
    const at::Tensor idx = at::tensor(a.index, at::kLong).to(x.device());
    const at::Tensor g = x.index_select(dim, idx);
    std::vector<int64_t> sizes(g.sizes().begin(), g.sizes().end());
    const auto d = static_cast<size_t>(g.dim() + dim);
    sizes[d] = a.kmax;
    sizes.insert(sizes.begin() + static_cast<int64_t>(d), out);
    return g.view(sizes);
}

at::Tensor inside_mask(const AdaptiveDim& a, int64_t out, at::Device device, bool rows) {
    at::Tensor m = at::tensor(a.inside).to(at::kBool).view({out, a.kmax}).to(device);
    return rows ? m.unsqueeze(-1) : m;  // [out, kmax, 1] against [..., out, kmax, m]
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, at::IntArrayRef output_size) {
    if (!adaptive_on_card(self, output_size))
        return fallback_to_cpu<ATEN_OP(_adaptive_avg_pool2d)>(self, output_size);
    c10::DeviceGuard guard(self.device());
    const int64_t oh = output_size[0], ow = output_size[1];
    const AdaptiveDim ah = adaptive_dim(self.size(-2), oh), aw = adaptive_dim(self.size(-1), ow);
    const at::Tensor w = widened(self);
    // rows: [..., oh, kh, W] summed over kh (the repeated positions masked to 0)
    at::Tensor r = gather_windows(w, ah, -2, oh);
    r = at::where(inside_mask(ah, oh, self.device(), true), r, 0.0).sum(-2);  // [..., oh, W]
    at::Tensor c = gather_windows(r, aw, -1, ow);                             // [..., oh, ow, kw]
    c = at::where(inside_mask(aw, ow, self.device(), false), c, 0.0).sum(-1);
    std::vector<float> area(static_cast<size_t>(oh * ow));
    for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
            area[static_cast<size_t>(i * ow + j)] = static_cast<float>(ah.length[i] * aw.length[j]);
    const at::Tensor div = at::tensor(area, at::kFloat).view({oh, ow}).to(self.device());
    return (c / div).to(self.scalar_type());
}

// The gradient of an adaptive average: each output's share added over its window, along the
// columns then the rows (index_add of the masked shares onto the gathered positions).
at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad, const at::Tensor& self) {
    if (!grad.is_privateuseone() || !adaptive_on_card(self, grad.sizes().slice(grad.dim() - 2)) ||
        grad.scalar_type() != self.scalar_type() || grad.dim() != self.dim())
        return fallback_to_cpu<ATEN_OP(_adaptive_avg_pool2d_backward)>(grad, self);
    c10::DeviceGuard guard(self.device());
    const int64_t oh = grad.size(-2), ow = grad.size(-1), h = self.size(-2), w = self.size(-1);
    const AdaptiveDim ah = adaptive_dim(h, oh), aw = adaptive_dim(w, ow);
    std::vector<float> area(static_cast<size_t>(oh * ow));
    for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
            area[static_cast<size_t>(i * ow + j)] = static_cast<float>(ah.length[i] * aw.length[j]);
    const at::Tensor share =
        widened(grad) / at::tensor(area, at::kFloat).view({oh, ow}).to(self.device());
    // columns: [..., oh, ow] -> [..., oh, ow, kw] masked -> added onto [..., oh, W]
    const at::Tensor cmask = inside_mask(aw, ow, self.device(), false).to(at::kFloat);
    const at::Tensor cs = (share.unsqueeze(-1) * cmask).flatten(-2);  // [..., oh, ow * kw]
    std::vector<int64_t> rsize(grad.sizes().begin(), grad.sizes().end() - 1);
    rsize.push_back(w);
    at::Tensor rows = at::zeros(rsize, share.options());
    rows.index_add_(-1, at::tensor(aw.index, at::kLong).to(self.device()), cs);
    // rows: [..., oh, W] -> [..., oh, kh, W] masked -> added onto [..., H, W]
    const at::Tensor rmask = inside_mask(ah, oh, self.device(), true).to(at::kFloat);
    const at::Tensor rs = (rows.unsqueeze(-2) * rmask).flatten(-3, -2);  // [..., oh * kh, W]
    std::vector<int64_t> gsize(self.sizes().begin(), self.sizes().end());
    at::Tensor gi = at::zeros(gsize, share.options());
    gi.index_add_(-2, at::tensor(ah.index, at::kLong).to(self.device()), rs);
    return gi.to(grad.scalar_type());
}

// Adaptive max: the window maxima (repeated positions do not change a max) and their
// positions, as for max_pool: per row, then over the rows.
std::tuple<at::Tensor&, at::Tensor&> adaptive_max_pool2d_out(const at::Tensor& self,
                                                             at::IntArrayRef output_size,
                                                             at::Tensor& out, at::Tensor& indices) {
    if (!adaptive_on_card(self, output_size) || !out.is_privateuseone() ||
        !indices.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(adaptive_max_pool2d, out)>(self, output_size, out, indices);
    c10::DeviceGuard guard(self.device());
    const int64_t oh = output_size[0], ow = output_size[1], w = self.size(-1);
    const AdaptiveDim ah = adaptive_dim(self.size(-2), oh), aw = adaptive_dim(w, ow);
    const at::Tensor cols = gather_windows(self, aw, -1, ow);  // [..., H, ow, kw]
    const at::Tensor row_max = at::amax(cols, {-1});           // [..., H, ow]
    const at::Tensor kj = at::argmax(cols, -1);                // [..., H, ow]
    at::Tensor rows = gather_windows(row_max, ah, -2, oh);     // [..., oh, kh, ow]
    const at::Tensor values = at::amax(rows, {-2});            // [..., oh, ow]
    const at::Tensor ki = at::argmax(rows, -2);                // [..., oh, ow]
    std::vector<int64_t> row_start(oh), col_start(ow);
    for (int64_t i = 0; i < oh; ++i) row_start[i] = ah.index[static_cast<size_t>(i * ah.kmax)];
    for (int64_t j = 0; j < ow; ++j) col_start[j] = aw.index[static_cast<size_t>(j * aw.kmax)];
    const at::Tensor row = at::tensor(row_start, at::kLong).to(self.device()).unsqueeze(1) + ki;
    const at::Tensor kcol = at::gather(kj, -2, row);
    const at::Tensor col = at::tensor(col_start, at::kLong).to(self.device()) + kcol;
    assign(out, values);
    assign(indices, row * w + col);
    return {out, indices};
}

at::Tensor& adaptive_max_pool2d_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                             const at::Tensor& indices, at::Tensor& grad_input) {
    if (!grad_on_card(grad, self, grad_input) || !indices.is_privateuseone() ||
        indices.sizes() != grad.sizes())
        return fallback_to_cpu<ATEN_OP2(adaptive_max_pool2d_backward, grad_input)>(
            grad, self, indices, grad_input);
    return assign(grad_input, scatter_to_indices(grad, self, indices));
}

at::Tensor max_pool2d_autograd(const at::Tensor& self, at::IntArrayRef kernel,
                               at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, bool ceil_mode) {
    if (at::GradMode::is_enabled() && self.requires_grad())
        return std::get<0>(
            at::max_pool2d_with_indices(self, kernel, stride, padding, dilation, ceil_mode));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // through the dispatcher, not a direct call: fake tensors (torch.compile) take the Python key
    return at::max_pool2d(self, kernel, stride, padding, dilation, ceil_mode);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("avg_pool2d.out", TORCH_FN(avg_pool2d_out));
    m.impl("avg_pool2d_backward.grad_input", TORCH_FN(avg_pool2d_backward_out));
    m.impl("avg_pool3d.out", TORCH_FN(avg_pool3d_out));
    m.impl("avg_pool3d_backward.grad_input", TORCH_FN(avg_pool3d_backward_out));
    m.impl("max_pool2d", TORCH_FN(max_pool2d_spyre));
    m.impl("max_pool2d_with_indices.out", TORCH_FN(max_pool2d_with_indices_out));
    m.impl("max_pool2d_with_indices_backward.grad_input",
           TORCH_FN(max_pool2d_with_indices_backward_out));
    m.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool2d));
    m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool2d_backward));
    m.impl("adaptive_max_pool2d.out", TORCH_FN(adaptive_max_pool2d_out));
    m.impl("adaptive_max_pool2d_backward.grad_input", TORCH_FN(adaptive_max_pool2d_backward_out));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
    m.impl("max_pool2d", TORCH_FN(max_pool2d_autograd));
}

}  // namespace torch_spyre::aten
