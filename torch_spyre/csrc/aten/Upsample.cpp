// Upsampling (F.interpolate, nn.Upsample) on the card, composed of device ops: nearest and
// nearest-exact (1-D, 2-D, 3-D), linear, bilinear and trilinear with and without
// align_corners, and bicubic, forward and backward. Interpolation is separable: along each
// spatial dim (the last first, as the CPU's kernels nest their loops) the output gathers its
// source positions with index_select, and the weighted modes blend the taps with their
// weights: x[i0] * l0 + x[i1] * l1 for linear, 4 taps i-1 .. i+2 (each read clamped to
// [0, in-1]) with the cubic convolution weights (A = -0.75) for bicubic. The positions and
// weights are computed on the host in fp32 exactly as the CPU's kernels compute them
// (nearest_idx and its 2x shortcut, area_pixel_compute_source_index, the clamps at the edges,
// get_cubic_upsample_coefficients), so nearest results are the CPU's bit for bit and the
// weighted ones agree to rounding. Backwards add each output's gradient (times
// its weight) onto its source positions with index_add, dim by dim. Antialiased bilinear and
// bicubic (antialias=True) are two matmuls with host-computed weight matrices (below).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

enum class Mode { Nearest, NearestExact, Linear, Cubic };

// One spatial dim's interpolation: the source positions of each output, one vector per tap
// (1 for nearest, 2 for linear, 4 for cubic), and the taps' weights (none for nearest).
struct Axis {
    std::vector<std::vector<int64_t>> i;
    std::vector<std::vector<float>> l;
};

// The cubic convolution kernel with A = -0.75, as the CPU's get_cubic_upsample_coefficients
// evaluates it in fp32: taps at t + 1, t, 1 - t, 2 - t.
float cubic1(float x) {  // |x| <= 1
    constexpr float A = -0.75f;
    return ((A + 2) * x - (A + 3)) * x * x + 1;
}
float cubic2(float x) {  // 1 < |x| < 2
    constexpr float A = -0.75f;
    return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

// torch's compute_scales_value: 1 / scale when one is given, else in / out (fp32).
float scale_of(std::optional<double> scale, int64_t in, int64_t out) {
    return scale && *scale > 0 ? static_cast<float>(1.0 / *scale)
                               : static_cast<float>(in) / static_cast<float>(out);
}

Axis axis_of(Mode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> s) {
    Axis a;
    const size_t taps = mode == Mode::Cubic ? 4 : mode == Mode::Linear ? 2 : 1;
    a.i.resize(taps);
    a.l.resize(mode == Mode::Linear || mode == Mode::Cubic ? taps : 0);
    for (int64_t o = 0; o < out; ++o) {
        if (mode == Mode::Nearest) {
            int64_t src = o;
            if (out == 2 * in) {
                src = o >> 1;
            } else if (out != in) {
                src = std::min(
                    static_cast<int64_t>(std::floor(static_cast<float>(o) * scale_of(s, in, out))),
                    in - 1);
            }
            a.i[0].push_back(src);
            continue;
        }
        if (mode == Mode::NearestExact) {
            const float src = std::floor((static_cast<float>(o) + 0.5f) * scale_of(s, in, out));
            a.i[0].push_back(std::min(static_cast<int64_t>(src), in - 1));
            continue;
        }
        float scale;
        if (align_corners)
            scale = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
        else
            scale = scale_of(s, in, out);
        float real = align_corners ? scale * static_cast<float>(o)
                                   : scale * (static_cast<float>(o) + 0.5f) - 0.5f;
        if (mode == Mode::Linear) real = std::max(real, 0.0f);  // cubic keeps negative sources
        const int64_t i = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
        const float lambda = std::min(std::max(real - static_cast<float>(i), 0.0f), 1.0f);
        if (mode == Mode::Linear) {
            a.i[0].push_back(i);
            a.i[1].push_back(i + (i < in - 1 ? 1 : 0));
            a.l[0].push_back(1.0f - lambda);
            a.l[1].push_back(lambda);
            continue;
        }
        // cubic: taps i - 1 .. i + 2, each read clamped to [0, in - 1] as the CPU's kernels do
        const float rest = 1.0f - lambda;
        const float w[4] = {cubic2(lambda + 1.0f), cubic1(lambda), cubic1(rest),
                            cubic2(rest + 1.0f)};
        for (int64_t t = 0; t < 4; ++t) {
            a.i[t].push_back(std::clamp<int64_t>(i - 1 + t, 0, in - 1));
            a.l[t].push_back(w[t]);
        }
    }
    return a;
}

// A per-output vector along dim d (negative) shaped to broadcast against [..., out, rest...].
at::Tensor along(const std::vector<float>& v, int64_t d, at::Device device) {
    std::vector<int64_t> shape{static_cast<int64_t>(v.size())};
    for (int64_t k = d + 1; k < 0; ++k) shape.push_back(1);
    return at::tensor(v, at::kFloat).view(shape).to(device);
}

at::Tensor indices(const std::vector<int64_t>& v, at::Device device) {
    return at::tensor(v, at::kLong).to(device);
}

// y.index_select(d, idx) (d negative) with the dims before d folded into one: the gather splits
// a large result into chunks of its leading dim, which then has many rows even for one image.
at::Tensor select_along(const at::Tensor& y, int64_t d, const at::Tensor& idx) {
    std::vector<int64_t> folded{-1}, shape(y.sizes().begin(), y.sizes().end());
    for (int64_t k = d; k < 0; ++k) folded.push_back(y.size(k));
    shape[static_cast<size_t>(y.dim() + d)] = idx.numel();
    return y.reshape(folded).index_select(1, idx).view(shape);
}

// gi.index_add_(d, idx, src) (gi contiguous, d negative) with the dims before d folded into one
// (the library splits a scatter of more positions than one launch may do into launches over
// the folded rows).
void add_along(const at::Tensor& gi, int64_t d, const at::Tensor& idx, const at::Tensor& src) {
    std::vector<int64_t> fg{-1}, fs{-1};
    for (int64_t k = d; k < 0; ++k) {
        fg.push_back(gi.size(k));
        fs.push_back(src.size(k));
    }
    gi.view(fg).index_add_(1, idx, src.reshape(fs));
}

bool on_card(const at::Tensor& x, size_t dims) {
    return x.is_privateuseone() && is_float(x.scalar_type()) &&
           x.dim() == static_cast<int64_t>(dims) + 2 && x.numel() > 0;
}

at::Tensor upsample(const at::Tensor& x, Mode mode, at::IntArrayRef out_size, bool align_corners,
                    const std::vector<std::optional<double>>& scales) {
    c10::DeviceGuard guard(x.device());
    const int64_t n = static_cast<int64_t>(out_size.size());
    const bool weighted = mode == Mode::Linear || mode == Mode::Cubic;
    at::Tensor y = weighted ? widened(x) : x;
    for (int64_t k = n - 1; k >= 0; --k) {  // the last dim first
        const int64_t d = k - n;            // negative dim
        const Axis a = axis_of(mode, x.size(d), out_size[k], align_corners, scales[k]);
        if (!weighted) {
            y = select_along(y, d, indices(a.i[0], x.device()));
            continue;
        }
        at::Tensor sum;
        for (size_t t = 0; t < a.i.size(); ++t) {
            const at::Tensor tap =
                select_along(y, d, indices(a.i[t], x.device())) * along(a.l[t], d, x.device());
            sum = t == 0 ? tap : sum.add_(tap);
        }
        y = sum;
    }
    return y.to(x.scalar_type());
}

at::Tensor upsample_backward(const at::Tensor& grad, Mode mode, at::IntArrayRef out_size,
                             at::IntArrayRef in_size, bool align_corners,
                             const std::vector<std::optional<double>>& scales) {
    c10::DeviceGuard guard(grad.device());
    const int64_t n = static_cast<int64_t>(out_size.size());
    const int64_t lead = static_cast<int64_t>(in_size.size()) - n;
    at::Tensor g = widened(grad);
    for (int64_t k = 0; k < n; ++k) {  // the transposes, in the reverse order
        const int64_t d = k - n;
        const int64_t in = in_size[static_cast<size_t>(lead + k)];
        const Axis a = axis_of(mode, in, out_size[k], align_corners, scales[k]);
        std::vector<int64_t> shape(g.sizes().begin(), g.sizes().end());
        shape[static_cast<size_t>(g.dim() + d)] = in;
        at::Tensor gi = at::zeros(shape, g.options());
        if (a.l.empty()) {
            add_along(gi, d, indices(a.i[0], grad.device()), g);
        } else {
            for (size_t t = 0; t < a.i.size(); ++t)
                add_along(gi, d, indices(a.i[t], grad.device()),
                          g * along(a.l[t], d, grad.device()));
        }
        g = gi;
    }
    return g.to(grad.scalar_type());
}

bool sizes_ok(at::IntArrayRef out_size, size_t dims) {
    if (out_size.size() != dims) return false;
    return std::all_of(out_size.begin(), out_size.end(), [](int64_t s) { return s > 0; });
}

bool backward_on_card(const at::Tensor& grad, at::IntArrayRef out_size, at::IntArrayRef in_size,
                      const at::Tensor& grad_input, size_t dims) {
    if (!on_card(grad, dims) || !grad_input.is_privateuseone() || !sizes_ok(out_size, dims) ||
        in_size.size() != dims + 2)
        return false;
    for (size_t k = 0; k < dims; ++k)
        if (grad.size(static_cast<int64_t>(k + 2)) != out_size[k] || in_size[k + 2] <= 0)
            return false;
    return grad.size(0) == in_size[0] && grad.size(1) == in_size[1];
}

using Scale = std::optional<double>;

// The out= kernels: nearest (and exact) of 1, 2, 3 dims, linear of 1, 2, 3 dims, and their
// backwards. Anything else (other dtypes, sizes torch refuses) is the CPU's.
#define SPYRE_NEAREST(fn, aten_op, MODE, dims)                                               \
    at::Tensor& fn(const at::Tensor& x, at::IntArrayRef size, SPYRE_SCALE_PARAMS_##dims,     \
                   at::Tensor& out) {                                                        \
        if (!on_card(x, dims) || !sizes_ok(size, dims) || !out.is_privateuseone())           \
            return fallback_to_cpu<ATEN_OP2 aten_op>(x, size, SPYRE_SCALE_ARGS_##dims, out); \
        return assign(out, upsample(x, Mode::MODE, size, false, {SPYRE_SCALE_ARGS_##dims})); \
    }
#define SPYRE_SCALE_PARAMS_1 Scale s0
#define SPYRE_SCALE_PARAMS_2 Scale s0, Scale s1
#define SPYRE_SCALE_PARAMS_3 Scale s0, Scale s1, Scale s2
#define SPYRE_SCALE_ARGS_1 s0
#define SPYRE_SCALE_ARGS_2 s0, s1
#define SPYRE_SCALE_ARGS_3 s0, s1, s2

SPYRE_NEAREST(nearest1d_out, (upsample_nearest1d, out), Nearest, 1)
SPYRE_NEAREST(nearest2d_out, (upsample_nearest2d, out), Nearest, 2)
SPYRE_NEAREST(nearest3d_out, (upsample_nearest3d, out), Nearest, 3)
SPYRE_NEAREST(nearest_exact1d_out, (_upsample_nearest_exact1d, out), NearestExact, 1)
SPYRE_NEAREST(nearest_exact2d_out, (_upsample_nearest_exact2d, out), NearestExact, 2)
SPYRE_NEAREST(nearest_exact3d_out, (_upsample_nearest_exact3d, out), NearestExact, 3)
#undef SPYRE_NEAREST

#define SPYRE_NEAREST_BACKWARD(fn, aten_op, MODE, dims)                                            \
    at::Tensor& fn(const at::Tensor& grad, at::IntArrayRef size, at::IntArrayRef in_size,          \
                   SPYRE_SCALE_PARAMS_##dims, at::Tensor& grad_input) {                            \
        if (!backward_on_card(grad, size, in_size, grad_input, dims))                              \
            return fallback_to_cpu<ATEN_OP2 aten_op>(grad, size, in_size, SPYRE_SCALE_ARGS_##dims, \
                                                     grad_input);                                  \
        return assign(grad_input, upsample_backward(grad, Mode::MODE, size, in_size, false,        \
                                                    {SPYRE_SCALE_ARGS_##dims}));                   \
    }

SPYRE_NEAREST_BACKWARD(nearest1d_backward, (upsample_nearest1d_backward, grad_input), Nearest, 1)
SPYRE_NEAREST_BACKWARD(nearest2d_backward, (upsample_nearest2d_backward, grad_input), Nearest, 2)
SPYRE_NEAREST_BACKWARD(nearest3d_backward, (upsample_nearest3d_backward, grad_input), Nearest, 3)
SPYRE_NEAREST_BACKWARD(nearest_exact1d_backward, (_upsample_nearest_exact1d_backward, grad_input),
                       NearestExact, 1)
SPYRE_NEAREST_BACKWARD(nearest_exact2d_backward, (_upsample_nearest_exact2d_backward, grad_input),
                       NearestExact, 2)
SPYRE_NEAREST_BACKWARD(nearest_exact3d_backward, (_upsample_nearest_exact3d_backward, grad_input),
                       NearestExact, 3)
#undef SPYRE_NEAREST_BACKWARD

#define SPYRE_LINEAR(fn, aten_op, dims)                                                           \
    at::Tensor& fn(const at::Tensor& x, at::IntArrayRef size, bool align_corners,                 \
                   SPYRE_SCALE_PARAMS_##dims, at::Tensor& out) {                                  \
        if (!on_card(x, dims) || !sizes_ok(size, dims) || !out.is_privateuseone())                \
            return fallback_to_cpu<ATEN_OP2 aten_op>(x, size, align_corners,                      \
                                                     SPYRE_SCALE_ARGS_##dims, out);               \
        return assign(out,                                                                        \
                      upsample(x, Mode::Linear, size, align_corners, {SPYRE_SCALE_ARGS_##dims})); \
    }

SPYRE_LINEAR(linear1d_out, (upsample_linear1d, out), 1)
SPYRE_LINEAR(bilinear2d_out, (upsample_bilinear2d, out), 2)
SPYRE_LINEAR(trilinear3d_out, (upsample_trilinear3d, out), 3)
#undef SPYRE_LINEAR

at::Tensor& bicubic2d_out(const at::Tensor& x, at::IntArrayRef size, bool align_corners, Scale s0,
                          Scale s1, at::Tensor& out) {
    if (!on_card(x, 2) || !sizes_ok(size, 2) || !out.is_privateuseone())
        return fallback_to_cpu<ATEN_OP2(upsample_bicubic2d, out)>(x, size, align_corners, s0, s1,
                                                                  out);
    return assign(out, upsample(x, Mode::Cubic, size, align_corners, {s0, s1}));
}

#define SPYRE_LINEAR_BACKWARD(fn, aten_op, dims)                                                \
    at::Tensor& fn(const at::Tensor& grad, at::IntArrayRef size, at::IntArrayRef in_size,       \
                   bool align_corners, SPYRE_SCALE_PARAMS_##dims, at::Tensor& grad_input) {     \
        if (!backward_on_card(grad, size, in_size, grad_input, dims))                           \
            return fallback_to_cpu<ATEN_OP2 aten_op>(grad, size, in_size, align_corners,        \
                                                     SPYRE_SCALE_ARGS_##dims, grad_input);      \
        return assign(grad_input, upsample_backward(grad, Mode::Linear, size, in_size,          \
                                                    align_corners, {SPYRE_SCALE_ARGS_##dims})); \
    }

SPYRE_LINEAR_BACKWARD(linear1d_backward, (upsample_linear1d_backward, grad_input), 1)
SPYRE_LINEAR_BACKWARD(bilinear2d_backward, (upsample_bilinear2d_backward, grad_input), 2)
SPYRE_LINEAR_BACKWARD(trilinear3d_backward, (upsample_trilinear3d_backward, grad_input), 3)
#undef SPYRE_LINEAR_BACKWARD

at::Tensor& bicubic2d_backward(const at::Tensor& grad, at::IntArrayRef size,
                               at::IntArrayRef in_size, bool align_corners, Scale s0, Scale s1,
                               at::Tensor& grad_input) {
    if (!backward_on_card(grad, size, in_size, grad_input, 2))
        return fallback_to_cpu<ATEN_OP2(upsample_bicubic2d_backward, grad_input)>(
            grad, size, in_size, align_corners, s0, s1, grad_input);
    return assign(grad_input,
                  upsample_backward(grad, Mode::Cubic, size, in_size, align_corners, {s0, s1}));
}

// Antialiased bilinear / bicubic (antialias=True, as PIL resizes): each output averages the
// inputs within its support, widened by the scale when shrinking, weighted by the triangle or
// the cubic (A = -0.5) filter and normalized, as the CPU's _compute_indices_min_size_weights_aa
// computes them in fp32 on the host (the centres ignore align_corners, which only sets the
// scale). The taps per output grow with the shrink factor, so each dim is one matmul with the
// dense [out, in] weight matrix instead of a gather per tap: x @ Ww^T along the last dim,
// Wh @ y along the one before; the backward multiplies by the transposes.
float aa_filter(bool cubic, float x) {
    x = std::abs(x);
    if (!cubic) return x < 1.0f ? 1.0f - x : 0.0f;
    constexpr float A = -0.5f;
    if (x < 1.0f) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2.0f) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0.0f;
}

// The weights [out, in] of one dim; nullopt when the matrix would pass 16 MiB (left to the CPU).
std::optional<at::Tensor> aa_weights(bool cubic, int64_t in, int64_t out, bool align_corners,
                                     Scale s, at::Device device) {
    if (in * out > (int64_t{1} << 22)) return std::nullopt;
    const float scale =
        align_corners ? (out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f)
                      : scale_of(s, in, out);
    const double half = cubic ? 2.0 : 1.0;  // interp_size * 0.5
    const float support =
        scale >= 1.0f ? static_cast<float>(half * scale) : static_cast<float>(half);
    const int64_t max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
    const float invscale = scale >= 1.0f ? static_cast<float>(1.0 / scale) : 1.0f;
    std::vector<float> m(static_cast<size_t>(in * out), 0.0f);
    std::vector<float> w(static_cast<size_t>(max_taps));
    for (int64_t i = 0; i < out; ++i) {
        const float center = static_cast<float>(scale * (static_cast<double>(i) + 0.5));
        const int64_t xmin =
            std::max<int64_t>(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), 0);
        const int64_t xsize = std::clamp<int64_t>(
            std::min<int64_t>(static_cast<int64_t>(static_cast<double>(center + support) + 0.5),
                              in) -
                xmin,
            0, max_taps);
        float total = 0.0f;
        for (int64_t j = 0; j < xsize; ++j) {
            const float at = static_cast<float>(j + xmin) - center;
            w[j] = aa_filter(cubic, static_cast<float>((static_cast<double>(at) + 0.5) * invscale));
            total += w[j];
        }
        for (int64_t j = 0; j < xsize; ++j)
            m[static_cast<size_t>(i * in + xmin + j)] = total != 0.0f ? w[j] / total : w[j];
    }
    return at::tensor(m, at::kFloat).view({out, in}).to(device);
}

bool aa_on_card(const at::Tensor& x, at::IntArrayRef size) {
    return on_card(x, 2) && x.scalar_type() == at::kFloat && sizes_ok(size, 2);
}

std::optional<at::Tensor> upsample_aa(const at::Tensor& x, bool cubic, at::IntArrayRef size,
                                      bool align_corners, Scale sh, Scale sw) {
    c10::DeviceGuard guard(x.device());
    const auto wh = aa_weights(cubic, x.size(2), size[0], align_corners, sh, x.device());
    const auto ww = aa_weights(cubic, x.size(3), size[1], align_corners, sw, x.device());
    if (!wh || !ww) return std::nullopt;
    return at::matmul(*wh, at::matmul(x, ww->t()));
}

std::optional<at::Tensor> upsample_aa_backward(const at::Tensor& grad, bool cubic,
                                               at::IntArrayRef size, at::IntArrayRef in_size,
                                               bool align_corners, Scale sh, Scale sw) {
    c10::DeviceGuard guard(grad.device());
    const auto wh = aa_weights(cubic, in_size[2], size[0], align_corners, sh, grad.device());
    const auto ww = aa_weights(cubic, in_size[3], size[1], align_corners, sw, grad.device());
    if (!wh || !ww) return std::nullopt;
    return at::matmul(wh->t(), at::matmul(grad, *ww));
}

#define SPYRE_AA(fn, bw, aten_op, aten_bw, cubic)                                                 \
    at::Tensor& fn(const at::Tensor& x, at::IntArrayRef size, bool align_corners, Scale sh,       \
                   Scale sw, at::Tensor& out) {                                                   \
        if (aa_on_card(x, size) && out.is_privateuseone())                                        \
            if (auto r = upsample_aa(x, cubic, size, align_corners, sh, sw))                      \
                return assign(out, *r);                                                           \
        return fallback_to_cpu<ATEN_OP2 aten_op>(x, size, align_corners, sh, sw, out);            \
    }                                                                                             \
    at::Tensor& bw(const at::Tensor& grad, at::IntArrayRef size, at::IntArrayRef in_size,         \
                   bool align_corners, Scale sh, Scale sw, at::Tensor& grad_input) {              \
        if (backward_on_card(grad, size, in_size, grad_input, 2) &&                               \
            grad.scalar_type() == at::kFloat)                                                     \
            if (auto r = upsample_aa_backward(grad, cubic, size, in_size, align_corners, sh, sw)) \
                return assign(grad_input, *r);                                                    \
        return fallback_to_cpu<ATEN_OP2 aten_bw>(grad, size, in_size, align_corners, sh, sw,      \
                                                 grad_input);                                     \
    }

SPYRE_AA(bilinear2d_aa_out, bilinear2d_aa_backward, (_upsample_bilinear2d_aa, out),
         (_upsample_bilinear2d_aa_backward, grad_input), false)
SPYRE_AA(bicubic2d_aa_out, bicubic2d_aa_backward, (_upsample_bicubic2d_aa, out),
         (_upsample_bicubic2d_aa_backward, grad_input), true)
#undef SPYRE_AA

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("upsample_nearest1d.out", TORCH_FN(nearest1d_out));
    m.impl("upsample_nearest2d.out", TORCH_FN(nearest2d_out));
    m.impl("upsample_nearest3d.out", TORCH_FN(nearest3d_out));
    m.impl("_upsample_nearest_exact1d.out", TORCH_FN(nearest_exact1d_out));
    m.impl("_upsample_nearest_exact2d.out", TORCH_FN(nearest_exact2d_out));
    m.impl("_upsample_nearest_exact3d.out", TORCH_FN(nearest_exact3d_out));
    m.impl("upsample_nearest1d_backward.grad_input", TORCH_FN(nearest1d_backward));
    m.impl("upsample_nearest2d_backward.grad_input", TORCH_FN(nearest2d_backward));
    m.impl("upsample_nearest3d_backward.grad_input", TORCH_FN(nearest3d_backward));
    m.impl("_upsample_nearest_exact1d_backward.grad_input", TORCH_FN(nearest_exact1d_backward));
    m.impl("_upsample_nearest_exact2d_backward.grad_input", TORCH_FN(nearest_exact2d_backward));
    m.impl("_upsample_nearest_exact3d_backward.grad_input", TORCH_FN(nearest_exact3d_backward));
    m.impl("upsample_linear1d.out", TORCH_FN(linear1d_out));
    m.impl("upsample_bilinear2d.out", TORCH_FN(bilinear2d_out));
    m.impl("upsample_trilinear3d.out", TORCH_FN(trilinear3d_out));
    m.impl("upsample_linear1d_backward.grad_input", TORCH_FN(linear1d_backward));
    m.impl("upsample_bilinear2d_backward.grad_input", TORCH_FN(bilinear2d_backward));
    m.impl("upsample_trilinear3d_backward.grad_input", TORCH_FN(trilinear3d_backward));
    m.impl("upsample_bicubic2d.out", TORCH_FN(bicubic2d_out));
    m.impl("upsample_bicubic2d_backward.grad_input", TORCH_FN(bicubic2d_backward));
    m.impl("_upsample_bilinear2d_aa.out", TORCH_FN(bilinear2d_aa_out));
    m.impl("_upsample_bicubic2d_aa.out", TORCH_FN(bicubic2d_aa_out));
    m.impl("_upsample_bilinear2d_aa_backward.grad_input", TORCH_FN(bilinear2d_aa_backward));
    m.impl("_upsample_bicubic2d_aa_backward.grad_input", TORCH_FN(bicubic2d_aa_backward));
}

}  // namespace torch_spyre::aten
