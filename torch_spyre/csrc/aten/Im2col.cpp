// Convolution patches on the card (Im2col.h), and aten::im2col / aten::col2im (F.unfold,
// nn.Unfold, F.fold, nn.Fold; each is the other's backward) of fp32/fp16/bf16 spyre tensors
// built on them: im2col is the patches of a one-group convolution made dense as [N, C * k...,
// out...] (bool too), col2im the fold of such patches (16-bit values summed in fp32, rounded
// once). Other dtypes run on the CPU fallback.
#include "Im2col.h"

#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {

std::vector<int64_t> ConvGeometry::in_shape() const {
    std::vector<int64_t> s{n, c};
    s.insert(s.end(), in_sp.begin(), in_sp.end());
    return s;
}

std::vector<int64_t> ConvGeometry::out_shape() const {
    std::vector<int64_t> s{n, o};
    s.insert(s.end(), out_sp.begin(), out_sp.end());
    return s;
}

bool ConvGeometry::padded() const {
    return std::any_of(padding.begin(), padding.end(), [](int64_t p) { return p > 0; });
}

std::optional<ConvGeometry> conv_geometry(at::IntArrayRef in_shape, int64_t out_channels,
                                          at::IntArrayRef kernel, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation,
                                          int64_t groups) {
    const int64_t d = int64_t(in_shape.size()) - 2;  // spatial dims
    if (d < 1 || d > 3 || int64_t(kernel.size()) != d || int64_t(stride.size()) != d ||
        int64_t(padding.size()) != d || int64_t(dilation.size()) != d || groups < 1 ||
        in_shape[1] % groups != 0 || out_channels % groups != 0)
        return std::nullopt;
    ConvGeometry g;
    g.d = d;
    g.n = in_shape[0];
    g.c = in_shape[1];
    g.o = out_channels;
    g.groups = groups;
    g.cg = g.c / groups;
    g.og = g.o / groups;
    if (g.cg == 0) return std::nullopt;  // no input channels: the CPU's
    g.in_sp = in_shape.slice(2).vec();
    g.kernel = kernel.vec();
    g.stride = stride.vec();
    g.padding = padding.vec();
    g.dilation = dilation.vec();
    for (int64_t i = 0; i < d; ++i) {
        if (kernel[i] < 1 || stride[i] < 1 || dilation[i] < 1 || padding[i] < 0)
            return std::nullopt;
        const int64_t span = dilation[i] * (kernel[i] - 1) + 1;
        if (g.in_sp[i] + 2 * padding[i] < span) return std::nullopt;
        g.out_sp.push_back((g.in_sp[i] + 2 * padding[i] - span) / stride[i] + 1);
        g.positions *= g.out_sp.back();
        g.taps *= kernel[i];
    }
    for (int64_t i = d - 1; i >= 0; --i) g.pads.insert(g.pads.end(), {padding[i], padding[i]});
    return g;
}

at::Tensor dense(const at::Tensor& t) {
    if (t.is_contiguous()) return t;
    std::vector<int64_t> sizes, strides;  // without the dims of size 1
    for (int64_t i = 0; i < t.dim(); ++i)
        if (t.size(i) != 1) {
            sizes.push_back(t.size(i));
            strides.push_back(t.stride(i));
        }
    if (int64_t(sizes.size()) <= SPYRE_TENSOR_MAX_DIMS)
        if (const auto d = stick_dense(t.as_strided(sizes, strides), "aten::convolution"))
            return d->view(t.sizes());
    return t.contiguous();
}

namespace {

// The patches of the dense padded input x as [N, groups, C/groups, k..., out...] (a view).
at::Tensor patches_view(const at::Tensor& x, const ConvGeometry& g) {
    std::vector<int64_t> sizes{g.n, g.groups, g.cg},
        strides{x.stride(0), g.cg * x.stride(1), x.stride(1)};
    for (int64_t i = 0; i < g.d; ++i) {
        sizes.push_back(g.kernel[i]);
        strides.push_back(g.dilation[i] * x.stride(2 + i));
    }
    for (int64_t i = 0; i < g.d; ++i) {
        sizes.push_back(g.out_sp[i]);
        strides.push_back(g.stride[i] * x.stride(2 + i));
    }
    return x.as_strided(sizes, strides, x.storage_offset());
}

at::Tensor padded_dense(const at::Tensor& input, const ConvGeometry& g) {
    return dense(g.padded() ? at::constant_pad_nd(input, g.pads, 0) : input);
}

}  // namespace

at::Tensor im2col_rows(const at::Tensor& input, const ConvGeometry& g) {
    // [groups, N, out..., C/groups, k...]
    std::vector<int64_t> perm{1, 0};
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(3 + g.d + i);
    perm.push_back(2);
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(3 + i);
    return dense(patches_view(padded_dense(input, g), g).permute(perm))
        .view({g.groups, g.n * g.positions, g.cg * g.taps});
}

at::Tensor fold_patches(const at::Tensor& patches, const ConvGeometry& g,
                        const at::TensorOptions& options) {
    // The padded input's positions split by phase: p = q * stride + r along each spatial dim,
    // held as [r..., N, C, q...]. A kernel tap's output positions o * stride + k * dilation are
    // then one phase r = (k * dilation) % stride and the consecutive q = o + (k * dilation) /
    // stride: a slice whose last dim is unit-strided, which the copy engine writes on the card.
    std::vector<int64_t> phase_shape(g.stride.begin(), g.stride.end()), quot(g.d);
    phase_shape.insert(phase_shape.end(), {g.n, g.c});
    for (int64_t i = 0; i < g.d; ++i) {
        const int64_t padded = g.in_sp[i] + 2 * g.padding[i];
        quot[i] = (padded + g.stride[i] - 1) / g.stride[i];
        phase_shape.push_back(quot[i]);
    }
    const at::Tensor ph =
        at::zeros(phase_shape, options.dtype(at::kFloat));  // 16-bit: one rounding
    // a tap's values [groups, N, out..., C/groups] as [N, C, out...]
    std::vector<int64_t> perm{1, 0, 2 + g.d};
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(2 + i);
    std::vector<int64_t> tap(g.d, 0);  // the kernel tap, an odometer over k...
    for (int64_t t = 0; t < g.taps; ++t) {
        at::Tensor dst = ph, values = patches;
        for (int64_t i = 0; i < g.d; ++i) {
            const int64_t at = tap[i] * g.dilation[i];
            dst = dst.select(0, at % g.stride[i]);
            values = values.select(-g.d + i, tap[i]);  // the kernel dims come last
        }
        for (int64_t i = 0; i < g.d; ++i)
            dst = dst.narrow(2 + i, tap[i] * g.dilation[i] / g.stride[i], g.out_sp[i]);
        std::vector<int64_t> split{g.n, g.groups, g.cg};
        split.insert(split.end(), g.out_sp.begin(), g.out_sp.end());
        dst.view(split).add_(values.permute(perm));
        for (int64_t i = g.d; i-- > 0;) {
            if (++tap[i] < g.kernel[i]) break;
            tap[i] = 0;
        }
    }
    // [r..., N, C, q...] -> [N, C, q0, r0, q1, r1, ...] -> [N, C, padded...], then the padding cut
    std::vector<int64_t> back{g.d, g.d + 1}, merged{g.n, g.c};
    for (int64_t i = 0; i < g.d; ++i) {
        back.insert(back.end(), {g.d + 2 + i, i});
        merged.push_back(quot[i] * g.stride[i]);
    }
    at::Tensor gx = dense(ph.permute(back)).view(merged);
    for (int64_t i = 0; i < g.d; ++i) gx = gx.narrow(2 + i, g.padding[i], g.in_sp[i]);
    return dense(gx).to(options.dtype());
}

at::Tensor channel_rows(const at::Tensor& t, const ConvGeometry& g) {
    const int64_t k = t.size(1) / g.groups;
    std::vector<int64_t> sizes{g.n, g.groups, k};  // [N, groups, K/groups, out...]
    sizes.insert(sizes.end(), g.out_sp.begin(), g.out_sp.end());
    std::vector<int64_t> perm{1, 0};  // [groups, N, out..., K/groups]
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(3 + i);
    perm.push_back(2);
    return dense(t.reshape(sizes).permute(perm)).view({g.groups, g.n * g.positions, k});
}

at::Tensor channel_cols(const at::Tensor& t, const ConvGeometry& g) {
    const int64_t k = t.size(1) / g.groups;
    std::vector<int64_t> sizes{g.n, g.groups, k};
    sizes.insert(sizes.end(), g.out_sp.begin(), g.out_sp.end());
    std::vector<int64_t> perm{1, 2, 0};  // [groups, K/groups, N, out...]
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(3 + i);
    return dense(t.reshape(sizes).permute(perm)).view({g.groups, k, g.n * g.positions});
}

namespace {

bool takes(const at::Tensor& t) { return t.is_privateuseone() && is_float(t.scalar_type()); }

// im2col only moves values: bool too (the CPU's other im2col type besides floats and complex).
bool moves(const at::Tensor& t) {
    return takes(t) || (t.is_privateuseone() && t.scalar_type() == at::kBool);
}

// F.unfold: [N, C, H, W] (or [C, H, W]) -> [N, C * kh * kw, L], rows ordered (c, kh, kw).
at::Tensor im2col(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef dilation,
                  at::IntArrayRef padding, at::IntArrayRef stride) {
    const bool batched = self.dim() == 4;
    std::optional<ConvGeometry> geom;
    if (moves(self) && (self.dim() == 3 || batched)) {
        const at::Tensor x = batched ? self : self.unsqueeze(0);
        geom = conv_geometry(x.sizes(), 1, kernel_size, stride, padding, dilation, 1);
    }
    if (!geom)
        return fallback_to_cpu<ATEN_OP(im2col)>(self, kernel_size, dilation, padding, stride);
    const ConvGeometry& g = *geom;
    c10::DeviceGuard guard(self.device());
    const at::Tensor x = batched ? self : self.unsqueeze(0);
    if (g.n == 0) return at::empty({0, g.c * g.taps, g.positions}, self.options());
    // [N, 1, C, k..., out...] is already the order of F.unfold's rows and columns
    at::Tensor cols =
        dense(patches_view(padded_dense(x, g), g)).view({g.n, g.c * g.taps, g.positions});
    return batched ? cols : cols.squeeze(0);
}

// F.fold: [N, C * kh * kw, L] (or [C * kh * kw, L]) -> [N, C, output_size...], overlapping
// patch elements summed.
at::Tensor col2im(const at::Tensor& self, at::IntArrayRef output_size, at::IntArrayRef kernel_size,
                  at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride) {
    const bool batched = self.dim() == 3;
    std::optional<ConvGeometry> geom;
    if (takes(self) && (self.dim() == 2 || batched) && output_size.size() == 2 &&
        kernel_size.size() == 2) {
        const at::Tensor x = batched ? self : self.unsqueeze(0);
        const int64_t taps = kernel_size[0] * kernel_size[1];
        if (taps > 0 && x.size(1) % taps == 0) {
            const std::vector<int64_t> in_shape{x.size(0), x.size(1) / taps, output_size[0],
                                                output_size[1]};
            geom = conv_geometry(in_shape, 1, kernel_size, stride, padding, dilation, 1);
            if (geom && geom->positions != x.size(2)) geom.reset();  // torch's error, on the CPU
        }
    }
    if (!geom)
        return fallback_to_cpu<ATEN_OP(col2im)>(self, output_size, kernel_size, dilation, padding,
                                                stride);
    const ConvGeometry& g = *geom;
    c10::DeviceGuard guard(self.device());
    const at::Tensor x = batched ? self : self.unsqueeze(0);
    if (g.n == 0) return at::empty(g.in_shape(), self.options());
    // [N, C, k..., out...] seen as [groups = 1, N, out..., C, k...]
    std::vector<int64_t> sizes{g.n, g.c};
    sizes.insert(sizes.end(), g.kernel.begin(), g.kernel.end());
    sizes.insert(sizes.end(), g.out_sp.begin(), g.out_sp.end());
    std::vector<int64_t> perm{0};
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(2 + g.d + i);
    perm.push_back(1);
    for (int64_t i = 0; i < g.d; ++i) perm.push_back(2 + i);
    const at::Tensor patches = x.reshape(sizes).permute(perm).unsqueeze(0);
    at::Tensor out = fold_patches(patches, g, x.options());
    return batched ? out : out.squeeze(0);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("im2col", TORCH_FN(im2col));
    m.impl("col2im", TORCH_FN(col2im));
}

}  // namespace torch_spyre::aten
