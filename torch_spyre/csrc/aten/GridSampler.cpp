// grid_sampler_2d (F.grid_sample of a 4-D input: spatial transformers, optical-flow warps) and
// its backward on the card, composed of device ops: modes bilinear, nearest and bicubic, padding
// zeros, border and reflection, align_corners both. The grid is a device tensor, so the sampling
// positions are computed on the card (fp32): unnormalized, clipped or reflected as the CPU's
// vectorized kernel does (GridSamplerKernel.cpp's ComputeLocation), floored (bilinear, bicubic)
// or rounded half to even (nearest); bicubic bounds each of its 4 taps per dim instead, as the
// CPU's get_value_bounded. The input is seen as rows [N*H*W, C] (one copy, channels last) and
// every corner of every output point is one flat row index n*H*W + y*W + x: the corners (4, or
// 16 for bicubic) of all points are gathered by one index_select, out-of-range corners (zeros
// padding, or the east/south corner at the last row or column) read a clamped row and are masked
// out, and the corners are blended by their weights. The backward adds grad * weight of every
// corner onto its row with index_add (duplicates accumulate), and the grid's gradient is the
// CPU's: the corner values (summed with the output's gradient over the channels) times the
// derivative of their weight along the dim and the weight along the other (for bilinear the
// CPU's corner differences times the distances), times the derivative of the unnormalize / clip
// / reflect step (bicubic: of the unnormalize only, as the CPU). Both grid components are
// computed together as [2, P] tensors. Other dtypes run on the CPU.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

enum Interp : int64_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };

// The input's gradient [N*H*W, C]: parts [K, P, C] added onto rows [K, P] (duplicates
// accumulate). The scatter program keeps its table in a core's scratchpad, so a table above
// ~1 MiB is added in groups of whole images (a corner only reaches its own image's rows) and, for
// one large image, of channels.
at::Tensor add_rows(const at::Tensor& rows, const at::Tensor& parts, int64_t N, int64_t HW) {
    constexpr int64_t kTableBytes = int64_t{1} << 20;
    const int64_t K = parts.size(0), P = parts.size(1), C = parts.size(2), per_image = P / N;
    const int64_t image_bytes = HW * C * parts.element_size();
    const int64_t images = std::max<int64_t>(1, kTableBytes / image_bytes);
    const int64_t channels = image_bytes > kTableBytes
                                 ? std::max<int64_t>(1, kTableBytes / (HW * parts.element_size()))
                                 : C;
    if (image_bytes <= kTableBytes && images >= N) {
        at::Tensor gi = at::zeros({N * HW, C}, parts.options());
        gi.index_add_(0, rows.reshape({K * P}), parts.reshape({K * P, C}));
        return gi;
    }
    at::Tensor gi = at::empty({N * HW, C}, parts.options());
    for (int64_t n0 = 0; n0 < N; n0 += images) {
        const int64_t g = std::min(images, N - n0);
        const at::Tensor idx =
            (rows.narrow(1, n0 * per_image, g * per_image) - n0 * HW).reshape({K * g * per_image});
        for (int64_t c0 = 0; c0 < C; c0 += channels) {
            const int64_t w = std::min(channels, C - c0);
            const at::Tensor src = parts.narrow(1, n0 * per_image, g * per_image)
                                       .narrow(2, c0, w)
                                       .contiguous()
                                       .view({K * g * per_image, w});
            at::Tensor part = at::zeros({g * HW, w}, parts.options());
            part.index_add_(0, idx, src);
            gi.narrow(0, n0 * HW, g * HW).narrow(1, c0, w).copy_(part);
        }
    }
    return gi;
}

bool on_card(const at::Tensor& input, const at::Tensor& grid, int64_t mode, int64_t padding) {
    return input.is_privateuseone() && grid.is_privateuseone() && input.device() == grid.device() &&
           is_float(input.scalar_type()) && grid.scalar_type() == input.scalar_type() &&
           input.dim() == 4 && grid.dim() == 4 && grid.size(3) == 2 &&
           grid.size(0) == input.size(0) && input.numel() > 0 && grid.numel() > 0 &&
           mode >= kBilinear && mode <= kBicubic && padding >= kZeros && padding <= kReflection;
}

// Both grid components travel together: [2, ...] tensors, row 0 for x (the input's W), row 1
// for y (H); the per-component constants are [2, 1, ...] tensors that broadcast over the rest.
at::Tensor pair(float x, float y, int64_t rank, at::Device dev) {
    std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
    shape[0] = 2;
    return at::tensor(std::vector<float>{x, y}, at::kFloat).view(shape).to(dev);
}

at::Tensor pair_long(int64_t x, int64_t y, int64_t rank, at::Device dev) {
    std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
    shape[0] = 2;
    return at::tensor(std::vector<int64_t>{x, y}, at::kLong).view(shape).to(dev);
}

// A constant along the tap dim (dim 1 of [2, K, P]).
at::Tensor taps_of(std::vector<float> v, at::Device dev) {
    const int64_t k = static_cast<int64_t>(v.size());
    return at::tensor(v, at::kFloat).view({1, k, 1}).to(dev);
}

// Sampling positions of both components and d position / d grid.
struct Coord {
    at::Tensor pos, mult;
};

// The CPU's compute_coordinates on unnormalized positions [2, ...] of an input W x H: clip
// (border) or reflect and clip (reflection); the multiplier (when defined) is multiplied by the
// clip's (0 at and beyond the borders) and the reflection's (+-1) derivatives.
Coord bound(at::Tensor pos, at::Tensor mult, int64_t W, int64_t H, int64_t padding,
            bool align_corners) {
    if (padding == kZeros) return {pos, mult};
    const int64_t rank = pos.dim();
    const at::Device dev = pos.device();
    const at::Tensor max = pair(static_cast<float>(W - 1), static_cast<float>(H - 1), rank, dev);
    if (padding == kReflection) {
        const float low = align_corners ? 0.0f : -0.5f;
        const at::Tensor twice_span = align_corners
                                          ? pair(2.0f * (W - 1), 2.0f * (H - 1), rank, dev)
                                          : pair(2.0f * W, 2.0f * H, rank, dev);
        const at::Tensor from_low = pos - low;
        const at::Tensor a = from_low.abs();
        const at::Tensor extra = a - (a / twice_span).floor() * twice_span;  // a >= 0: trunc
        const at::Tensor reflected = twice_span - extra;
        const at::Tensor flip = extra > reflected;
        pos = at::where(flip, reflected, extra) + low;
        // d/d pos: -1 when exactly one of (one more flip, below low) holds
        if (mult.defined()) mult = at::where(at::logical_xor(flip, from_low < 0), -mult, mult);
        if (align_corners && (W <= 1 || H <= 1)) {  // an empty span reflects everything to 0
            const at::Tensor empty = pair(W <= 1, H <= 1, rank, dev) > 0;
            pos = at::where(empty, 0.0, pos);
            if (mult.defined()) mult = at::where(empty, 0.0, mult);
        }
    }
    // clip to [0, size - 1]; the borders themselves count as outside for the gradient
    if (mult.defined()) mult = mult * (pos > 0).logical_and_(pos < max);
    return {at::minimum(pos.clamp_min(0), max), mult};
}

// Along each component, the taps around every point ([2, K, P]): masked weights and their
// derivatives d weight / d position (0 for taps out of range), and the clamped columns / rows.
struct Taps {
    at::Tensor weight, dweight, index;
};

// Taps at integer positions `at` ([2, K, P] float, already bounded), with their weights.
Taps taps_at(const at::Tensor& at, const at::Tensor& weight, const at::Tensor& dweight, int64_t W,
             int64_t H) {
    const at::Tensor index = at.to(at::kLong);
    const at::Tensor clamped =
        at::minimum(index.clamp_min(0), pair_long(W - 1, H - 1, 3, index.device()));
    const at::Tensor valid = clamped == index;  // zeros padding: out of range reads nothing
    Taps t;
    t.weight = at::where(valid, weight, 0.0);
    if (dweight.defined()) t.dweight = at::where(valid, dweight, 0.0);
    t.index = clamped;
    return t;
}

// The sampling state both directions share: the positions, the taps, and the input as rows
// [N*H*W, C] (fp32) with every corner of every point one flat row index n*H*W + y*W + x
// ([K*K, P], the corner (j, i) of tap j along y and tap i along x at j*K + i) and its weight.
struct Sampling {
    Coord c;
    Taps t;
    at::Tensor rows, weights, table;
};

// grid_grad: the weights' derivatives are wanted too.
Sampling prepare(const at::Tensor& input, const at::Tensor& grid, int64_t mode, int64_t padding,
                 bool align_corners, bool grid_grad) {
    const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
    const int64_t P = grid.numel() / 2;
    const at::Device dev = input.device();
    const at::Tensor g = widened(grid).reshape({P, 2}).t().contiguous();  // [2, P]
    const at::Tensor scaling = align_corners ? pair((W - 1) / 2.0f, (H - 1) / 2.0f, 2, dev)
                                             : pair(W / 2.0f, H / 2.0f, 2, dev);
    at::Tensor pos = (g + 1) * scaling;
    if (!align_corners) pos = pos - 0.5;
    Sampling s;
    // bicubic bounds each tap instead, and its gradient takes only the unnormalize's factor
    s.c =
        mode == kBicubic ? Coord{pos, scaling} : bound(pos, scaling, W, H, padding, align_corners);
    if (mode == kNearest) {
        s.t = taps_at(s.c.pos.round().view({2, 1, P}), at::ones({1, 1, 1}, pos.options()),
                      at::Tensor(), W, H);
    } else if (mode == kBilinear) {
        const at::Tensor low = s.c.pos.floor(), frac = s.c.pos - low;
        s.t = taps_at(low.view({2, 1, P}) + taps_of({0, 1}, dev), at::stack({1 - frac, frac}, 1),
                      grid_grad ? taps_of({-1, 1}, dev) : at::Tensor(), W, H);
    } else {
        // taps -1, 0, 1, 2 around floor(pos), each bounded as the CPU's get_value_bounded; the
        // Keys coefficients (A = -0.75, as get_cubic_coefficients) of t + 1, t, 1 - t, 2 - t and
        // their derivatives d / d t (taps 0 and 3 lie in (1, 2), the others in [0, 1])
        constexpr float A = -0.75f;
        const at::Tensor low = s.c.pos.floor().view({2, 1, P});
        const at::Tensor t = s.c.pos.view({2, 1, P}) - low;
        const at::Tensor sign = taps_of({1, 1, -1, -1}, dev);
        const at::Tensor x = t * sign + taps_of({1, 0, 1, 2}, dev);
        const at::Tensor outer = taps_of({1, 0, 0, 1}, dev) > 0;
        const at::Tensor coeff = at::where(outer, ((A * x - 5 * A) * x + 8 * A) * x - 4 * A,
                                           ((A + 2) * x - (A + 3)) * x * x + 1);
        const at::Tensor dcoeff = grid_grad ? at::where(outer, (3 * A * x - 10 * A) * x + 8 * A,
                                                        (3 * (A + 2) * x - 2 * (A + 3)) * x) *
                                                  sign
                                            : at::Tensor();
        const at::Tensor at_taps =
            bound(low + taps_of({-1, 0, 1, 2}, dev), at::Tensor(), W, H, padding, align_corners)
                .pos;
        s.t = taps_at(at_taps, coeff, dcoeff, W, H);
    }
    const int64_t K = s.t.index.size(1);
    const at::TensorOptions lopt = at::TensorOptions().dtype(at::kLong).device(dev);
    const at::Tensor base =
        (at::arange(N, lopt) * (H * W)).view({N, 1}).expand({N, P / N}).reshape({1, 1, P});
    s.rows =
        ((s.t.index[1] * W).view({K, 1, P}) + base + s.t.index[0].view({1, K, P})).view({K * K, P});
    s.weights = (s.t.weight[1].view({K, 1, P}) * s.t.weight[0].view({1, K, P})).view({K * K, P});
    // contiguous first: for N == 1 the reshape would be a strided view the gather refuses
    s.table = widened(input).permute({0, 2, 3, 1}).contiguous().view({N * H * W, C});
    return s;
}

at::Tensor grid_sampler_2d(const at::Tensor& input, const at::Tensor& grid, int64_t mode,
                           int64_t padding, bool align_corners) {
    if (!on_card(input, grid, mode, padding))
        return fallback_to_cpu<ATEN_OP(grid_sampler_2d)>(input, grid, mode, padding, align_corners);
    c10::DeviceGuard guard(input.device());
    const int64_t N = input.size(0), C = input.size(1);
    const int64_t Ho = grid.size(1), Wo = grid.size(2), P = N * Ho * Wo;
    const Sampling s = prepare(input, grid, mode, padding, align_corners, false);
    const int64_t K = s.rows.size(0);
    const at::Tensor vals = s.table.index_select(0, s.rows.reshape({K * P})).view({K, P, C});
    const at::Tensor out = (vals * s.weights.unsqueeze(2)).sum(0);
    return out.view({N, Ho, Wo, C}).permute({0, 3, 1, 2}).contiguous().to(input.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> grid_sampler_2d_backward(const at::Tensor& grad,
                                                            const at::Tensor& input,
                                                            const at::Tensor& grid, int64_t mode,
                                                            int64_t padding, bool align_corners,
                                                            std::array<bool, 2> output_mask) {
    if (!on_card(input, grid, mode, padding) || !grad.is_privateuseone() || grad.dim() != 4 ||
        grad.scalar_type() != input.scalar_type() || grad.size(0) != input.size(0) ||
        grad.size(1) != input.size(1) || grad.size(2) != grid.size(1) ||
        grad.size(3) != grid.size(2))
        return fallback_to_cpu<ATEN_OP(grid_sampler_2d_backward)>(grad, input, grid, mode, padding,
                                                                  align_corners, output_mask);
    c10::DeviceGuard guard(input.device());
    const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
    const int64_t Ho = grid.size(1), Wo = grid.size(2), P = N * Ho * Wo;
    const Sampling s = prepare(input, grid, mode, padding, align_corners, mode != kNearest);
    const int64_t K = s.rows.size(0), k = s.t.index.size(1);
    const at::Tensor go = widened(grad).permute({0, 2, 3, 1}).contiguous().view({P, C});
    at::Tensor grad_input, grad_grid;
    if (output_mask[0]) {
        const at::Tensor parts = go.unsqueeze(0) * s.weights.unsqueeze(2);  // [K, P, C]
        const at::Tensor gi = add_rows(s.rows, parts, N, H * W);
        grad_input =
            gi.view({N, H, W, C}).permute({0, 3, 1, 2}).contiguous().to(input.scalar_type());
    }
    if (mode == kNearest) {
        grad_grid = at::zeros(grid.sizes(), grid.options());  // no gradient through rounding
    } else {
        // d out / d x = sum over the corners (j, i) of value * dweight_x[i] * weight_y[j] (y
        // alike), the values summed with the output's gradient over the channels first; the
        // masked weights leave out what the forward did not read
        const at::Tensor v = s.table.index_select(0, s.rows.reshape({K * P})).view({K, P, C});
        const at::Tensor vg = (v * go.unsqueeze(0)).sum(2).view({k, k, P});
        const at::Tensor gx = ((vg * s.t.dweight[0].view({1, k, P})).sum(1) * s.t.weight[1]).sum(0);
        const at::Tensor gy = ((vg * s.t.weight[0].view({1, k, P})).sum(1) * s.t.dweight[1]).sum(0);
        grad_grid = (at::stack({gx, gy}) * s.c.mult)
                        .t()
                        .contiguous()
                        .view({N, Ho, Wo, 2})
                        .to(grid.scalar_type());
    }
    return {grad_input, grad_grid};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("grid_sampler_2d", TORCH_FN(grid_sampler_2d));
    m.impl("grid_sampler_2d_backward", TORCH_FN(grid_sampler_2d_backward));
}

}  // namespace torch_spyre::aten
