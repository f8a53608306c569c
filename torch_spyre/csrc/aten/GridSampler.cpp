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
// CPU's formula: the corner differences times the distances (bicubic: the values times the
// coefficients' derivatives), summed over the channels, times the derivative of the unnormalize
// / clip / reflect step (bicubic: of the unnormalize only, as the CPU). Other dtypes run on the
// CPU.
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

// A sampling coordinate along one dim (fp32, [N, Ho, Wo]) and d coordinate / d grid.
struct Coord {
    at::Tensor pos, mult;
};

float scaling_of(int64_t size, bool align_corners) {
    return align_corners ? static_cast<float>(size - 1) / 2 : static_cast<float>(size) / 2;
}

at::Tensor unnormalize(const at::Tensor& g, int64_t size, bool align_corners) {
    const at::Tensor pos = (g + 1) * scaling_of(size, align_corners);
    return align_corners ? pos : pos - 0.5;
}

// The CPU's compute_coordinates for one input dim of `size` on unnormalized positions: clip
// (border) or reflect and clip (reflection); the multiplier is `mult` times the clip's (0 at
// and beyond the borders) and the reflection's (+-1) derivatives.
Coord bound(at::Tensor pos, at::Tensor mult, int64_t size, int64_t padding, bool align_corners) {
    if (padding == kZeros) return {pos, mult};
    const float max = static_cast<float>(size - 1);
    if (padding == kReflection) {
        if (align_corners && size <= 1) return {at::zeros_like(pos), at::zeros_like(pos)};
        const float low = align_corners ? 0.0f : -0.5f;
        const float twice_span = align_corners ? 2.0f * max : 2.0f * static_cast<float>(size);
        const at::Tensor from_low = pos - low;
        const at::Tensor a = from_low.abs();
        const at::Tensor extra = a - (a / twice_span).floor() * twice_span;  // a >= 0: trunc
        const at::Tensor reflected = twice_span - extra;
        const at::Tensor flip = extra > reflected;
        pos = at::where(flip, reflected, extra) + low;
        // d/d pos: -1 when exactly one of (one more flip, below low) holds
        if (mult.defined()) mult = at::where(at::logical_xor(flip, from_low < 0), -mult, mult);
    }
    // clip to [0, size - 1]; the borders themselves count as outside for the gradient
    const at::Tensor inside = (pos > 0).logical_and_(pos < max);
    return {pos.clamp(0, max), mult.defined() ? mult * inside : mult};
}

// The CPU's ComputeLocation: unnormalize, then bound (bilinear and nearest). Bicubic bounds
// each tap instead, and its grid gradient takes only the unnormalize's factor.
Coord locate(const at::Tensor& g, int64_t size, int64_t padding, bool align_corners, int64_t mode) {
    const at::Tensor pos = unnormalize(g, size, align_corners);
    const at::Tensor mult = at::full_like(pos, scaling_of(size, align_corners));
    if (mode == kBicubic) return {pos, mult};
    return bound(pos, mult, size, padding, align_corners);
}

// Bicubic: the taps -1, 0, 1, 2 around floor(pos) along one dim ([4, P]): their columns (each
// bounded as the CPU's get_value_bounded does, then clamped for the gather), the in-range
// masks, the cubic convolution coefficients of t = pos - floor(pos) (A = -0.75, as
// get_cubic_coefficients) and their derivatives d coefficient / d t.
struct Taps {
    at::Tensor index, valid, coeff, dcoeff;
};

Taps cubic_taps(const at::Tensor& pos, int64_t size, int64_t padding, bool align_corners) {
    constexpr float A = -0.75f;
    const at::Device dev = pos.device();
    const int64_t P = pos.numel();
    const at::Tensor p = pos.reshape({1, P}), i0 = p.floor(), t = p - i0;
    const auto column = [&](std::initializer_list<float> v) {
        return at::tensor(std::vector<float>(v), at::kFloat).view({4, 1}).to(dev);
    };
    // the coefficients' arguments t + 1, t, 1 - t, 2 - t; taps 0 and 3 lie in (1, 2)
    const at::Tensor x = column({1, 0, 1, 2}) + t * column({1, 1, -1, -1});
    const at::Tensor outer = column({1, 0, 0, 1}) > 0;
    const at::Tensor inner_c = ((A + 2) * x - (A + 3)) * x * x + 1;
    const at::Tensor outer_c = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    const at::Tensor inner_d = (3 * (A + 2) * x - 2 * (A + 3)) * x;
    const at::Tensor outer_d = (3 * A * x - 10 * A) * x + 8 * A;
    Taps taps;
    taps.coeff = at::where(outer, outer_c, inner_c);
    taps.dcoeff = at::where(outer, outer_d, inner_d) * column({1, 1, -1, -1});
    const at::Tensor bounded =
        bound(i0 + column({-1, 0, 1, 2}), at::Tensor(), size, padding, align_corners)
            .pos.to(at::kLong);
    taps.valid = (bounded >= 0).logical_and_(bounded < size);
    taps.index = bounded.clamp(0, size - 1);
    return taps;
}

// The corners of every output point: flat row indices into [N*H*W, C] ([K, P] int64), their
// weights with out-of-range corners zeroed ([K, P] fp32) and, for the grid's gradient, the
// distances to the sides (bilinear: w, e, n, s as [P]) and the in-range masks ([K, P] fp32).
struct Corners {
    at::Tensor rows, weights, valid;
    at::Tensor w, e, n, s;
    Taps tx, ty;  // bicubic
};

Corners corners_of(const Coord& x, const Coord& y, int64_t N, int64_t H, int64_t W, int64_t mode,
                   int64_t padding, bool align_corners) {
    const at::Device dev = x.pos.device();
    const int64_t P = x.pos.numel();
    const at::TensorOptions lopt = at::TensorOptions().dtype(at::kLong).device(dev);
    const at::Tensor base = (at::arange(N, lopt) * (H * W)).view({N, 1, 1}).expand(x.pos.sizes());
    Corners c;
    at::Tensor cx, cy;  // [K, P] int64 corner columns and rows
    if (mode == kBicubic) {
        // 16 corners, row-major: corner 4 j + i is (tap i along x, tap j along y)
        c.tx = cubic_taps(x.pos, W, padding, align_corners);
        c.ty = cubic_taps(y.pos, H, padding, align_corners);
        c.valid = c.ty.valid.view({4, 1, P})
                      .logical_and(c.tx.valid.view({1, 4, P}))
                      .reshape({16, P})
                      .to(at::kFloat);
        c.weights =
            (c.ty.coeff.view({4, 1, P}) * c.tx.coeff.view({1, 4, P})).reshape({16, P}) * c.valid;
        c.rows =
            (base.reshape({1, 1, P}) + c.ty.index.view({4, 1, P}) * W + c.tx.index.view({1, 4, P}))
                .reshape({16, P});
        return c;
    }
    if (mode == kNearest) {
        cx = x.pos.round().to(at::kLong).reshape({1, P});
        cy = y.pos.round().to(at::kLong).reshape({1, P});
        c.weights = at::ones({1, P}, x.pos.options());
    } else {
        const at::Tensor xw = x.pos.floor(), yn = y.pos.floor();
        c.w = (x.pos - xw).reshape({P});
        c.e = 1 - c.w;
        c.n = (y.pos - yn).reshape({P});
        c.s = 1 - c.n;
        // corner order nw, ne, sw, se: x + (0, 1, 0, 1), y + (0, 0, 1, 1)
        const at::Tensor ix = xw.to(at::kLong).reshape({1, P});
        const at::Tensor iy = yn.to(at::kLong).reshape({1, P});
        cx = ix + at::tensor({0, 1, 0, 1}, at::kLong).view({4, 1}).to(dev);
        cy = iy + at::tensor({0, 0, 1, 1}, at::kLong).view({4, 1}).to(dev);
        c.weights = at::stack({c.s * c.e, c.s * c.w, c.n * c.e, c.n * c.w});
    }
    const at::Tensor valid =
        (cx >= 0).logical_and_(cx < W).logical_and_(cy >= 0).logical_and_(cy < H);
    c.valid = valid.to(at::kFloat);
    c.weights = c.weights * c.valid;
    c.rows = base.reshape({1, P}) + cy.clamp(0, H - 1) * W + cx.clamp(0, W - 1);
    return c;
}

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

// The sampling state both directions share.
struct Sampling {
    Coord x, y;
    Corners c;
    at::Tensor rows_table;  // the input as [N*H*W, C], fp32
};

Sampling prepare(const at::Tensor& input, const at::Tensor& grid, int64_t mode, int64_t padding,
                 bool align_corners) {
    const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
    const at::Tensor g = widened(grid);
    Sampling s;
    s.x = locate(g.select(3, 0), W, padding, align_corners, mode);
    s.y = locate(g.select(3, 1), H, padding, align_corners, mode);
    s.c = corners_of(s.x, s.y, N, H, W, mode, padding, align_corners);
    // contiguous first: for N == 1 the reshape would be a strided view the gather refuses
    s.rows_table = widened(input).permute({0, 2, 3, 1}).contiguous().view({N * H * W, C});
    return s;
}

at::Tensor grid_sampler_2d(const at::Tensor& input, const at::Tensor& grid, int64_t mode,
                           int64_t padding, bool align_corners) {
    if (!on_card(input, grid, mode, padding))
        return fallback_to_cpu<ATEN_OP(grid_sampler_2d)>(input, grid, mode, padding, align_corners);
    c10::DeviceGuard guard(input.device());
    const int64_t N = input.size(0), C = input.size(1);
    const int64_t Ho = grid.size(1), Wo = grid.size(2), P = N * Ho * Wo;
    const Sampling s = prepare(input, grid, mode, padding, align_corners);
    const int64_t K = s.c.rows.size(0);
    const at::Tensor vals = s.rows_table.index_select(0, s.c.rows.reshape({K * P})).view({K, P, C});
    const at::Tensor out = (vals * s.c.weights.unsqueeze(2)).sum(0);
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
    const Sampling s = prepare(input, grid, mode, padding, align_corners);
    const int64_t K = s.c.rows.size(0);
    const at::Tensor go = widened(grad).permute({0, 2, 3, 1}).contiguous().view({P, C});
    at::Tensor grad_input, grad_grid;
    if (output_mask[0]) {
        const at::Tensor parts = go.unsqueeze(0) * s.c.weights.unsqueeze(2);  // [K, P, C]
        const at::Tensor gi = add_rows(s.c.rows, parts, N, H * W);
        grad_input =
            gi.view({N, H, W, C}).permute({0, 3, 1, 2}).contiguous().to(input.scalar_type());
    }
    if (mode == kNearest) {
        grad_grid = at::zeros(grid.sizes(), grid.options());  // no gradient through rounding
    } else if (mode == kBicubic) {
        // d out / d x = sum over the corners of value * dcoeff_x[i] * coeff_y[j] (and y alike),
        // the values read as the forward read them, summed with the output's gradient over C
        const at::Tensor v =
            s.rows_table.index_select(0, s.c.rows.reshape({K * P})).view({K, P, C});
        const at::Tensor vg = ((v * go.unsqueeze(0)).sum(2) * s.c.valid).view({4, 4, P});
        const at::Tensor gx = ((vg * s.c.tx.dcoeff.view({1, 4, P})).sum(1) * s.c.ty.coeff).sum(0);
        const at::Tensor gy = ((vg * s.c.tx.coeff.view({1, 4, P})).sum(1) * s.c.ty.dcoeff).sum(0);
        grad_grid = at::stack({gx * s.x.mult.reshape({P}), gy * s.y.mult.reshape({P})}, 1)
                        .view({N, Ho, Wo, 2})
                        .to(grid.scalar_type());
    } else {
        // the corner values as the forward read them (zero out of range)
        const at::Tensor v =
            s.rows_table.index_select(0, s.c.rows.reshape({K * P})).view({K, P, C}) *
            s.c.valid.unsqueeze(2);
        const at::Tensor gx =
            (((v[1] - v[0]) * s.c.s.unsqueeze(1) + (v[3] - v[2]) * s.c.n.unsqueeze(1)) * go).sum(1);
        const at::Tensor gy =
            (((v[2] - v[0]) * s.c.e.unsqueeze(1) + (v[3] - v[1]) * s.c.w.unsqueeze(1)) * go).sum(1);
        grad_grid = at::stack({gx * s.x.mult.reshape({P}), gy * s.y.mult.reshape({P})}, 1)
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
