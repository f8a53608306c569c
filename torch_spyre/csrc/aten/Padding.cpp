// Reflection and replication padding (nn.ReflectionPad1d/2d/3d, nn.ReplicationPad1d/2d/3d,
// F.pad(mode="reflect" / "replicate"), conv's padding_mode) on the card: along each padded dim
// (the last first) the output gathers its source positions with index_select (a reflected
// position -i or 2 (n - 1) - i, a replicated one clamped to the edge), for every dtype
// index_select takes. The backwards add each output's gradient onto its source with index_add,
// dim by dim. Negative paddings (crops) and sizes torch refuses stay with the CPU.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "Composed.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

enum class Pad { Reflect, Replicate };

// The source position of each output position along one dim of size n padded by (before, after).
std::vector<int64_t> sources(Pad mode, int64_t n, int64_t before, int64_t after) {
    std::vector<int64_t> src;
    for (int64_t o = 0; o < n + before + after; ++o) {
        int64_t i = o - before;
        if (mode == Pad::Reflect) {
            if (i < 0) i = -i;
            if (i >= n) i = 2 * (n - 1) - i;
        } else {
            i = std::clamp<int64_t>(i, 0, n - 1);
        }
        src.push_back(i);
    }
    return src;
}

// padding = (last dim's before, after, the previous dim's before, after, ...), as torch.
bool padding_on_card(Pad mode, const at::Tensor& x, at::IntArrayRef padding, size_t dims) {
    if (!x.is_privateuseone() || x.is_complex() || x.scalar_type() == at::kBool ||  // CPU: refused
        padding.size() != 2 * dims ||
        (x.dim() != static_cast<int64_t>(dims) + 1 && x.dim() != static_cast<int64_t>(dims) + 2) ||
        x.numel() == 0)
        return false;
    for (size_t k = 0; k < dims; ++k) {
        const int64_t n = x.size(x.dim() - 1 - static_cast<int64_t>(k));
        const int64_t before = padding[2 * k], after = padding[2 * k + 1];
        if (before < 0 || after < 0) return false;
        if (mode == Pad::Reflect && (before >= n || after >= n)) return false;  // the CPU's error
    }
    return true;
}

at::Tensor index_of(const std::vector<int64_t>& v, at::Device device) {
    return at::tensor(v, at::kLong).to(device);
}

at::Tensor padded(Pad mode, const at::Tensor& x, at::IntArrayRef padding) {
    c10::DeviceGuard guard(x.device());
    at::Tensor y = x;
    for (size_t k = 0; k < padding.size() / 2; ++k) {
        const int64_t d = -1 - static_cast<int64_t>(k);
        y = y.index_select(
            d, index_of(sources(mode, x.size(d), padding[2 * k], padding[2 * k + 1]), x.device()));
    }
    return y;
}

at::Tensor padded_backward(Pad mode, const at::Tensor& grad, const at::Tensor& x,
                           at::IntArrayRef padding) {
    c10::DeviceGuard guard(x.device());
    at::Tensor g = widened(grad);
    for (size_t k = padding.size() / 2; k-- > 0;) {
        const int64_t d = -1 - static_cast<int64_t>(k);
        std::vector<int64_t> shape(g.sizes().begin(), g.sizes().end());
        shape[static_cast<size_t>(g.dim() + d)] = x.size(d);
        at::Tensor gi = at::zeros(shape, g.options());
        gi.index_add_(
            d, index_of(sources(mode, x.size(d), padding[2 * k], padding[2 * k + 1]), x.device()),
            g);
        g = gi;
    }
    return g.to(grad.scalar_type());
}

bool backward_on_card(Pad mode, const at::Tensor& grad, const at::Tensor& x,
                      at::IntArrayRef padding, size_t dims) {
    if (!padding_on_card(mode, x, padding, dims) || !grad.is_privateuseone() ||
        !is_float(grad.scalar_type()) || grad.scalar_type() != x.scalar_type() ||
        grad.dim() != x.dim())
        return false;
    for (size_t k = 0; k < dims; ++k) {
        const int64_t d = x.dim() - 1 - static_cast<int64_t>(k);
        if (grad.size(d) != x.size(d) + padding[2 * k] + padding[2 * k + 1]) return false;
    }
    return true;
}

// The functional, out= and backward kernels of one padding operator family member.
#define SPYRE_PADDING(name, MODE, dims)                                                     \
    at::Tensor name(const at::Tensor& x, at::IntArrayRef padding) {                         \
        if (!padding_on_card(Pad::MODE, x, padding, dims))                                  \
            return fallback_to_cpu<ATEN_OP(name)>(x, padding);                              \
        return padded(Pad::MODE, x, padding);                                               \
    }                                                                                       \
    at::Tensor& name##_out(const at::Tensor& x, at::IntArrayRef padding, at::Tensor& out) { \
        if (!padding_on_card(Pad::MODE, x, padding, dims) || !out.is_privateuseone())       \
            return fallback_to_cpu<ATEN_OP2(name, out)>(x, padding, out);                   \
        return assign(out, padded(Pad::MODE, x, padding));                                  \
    }                                                                                       \
    at::Tensor name##_backward(const at::Tensor& grad, const at::Tensor& x,                 \
                               at::IntArrayRef padding) {                                   \
        if (!backward_on_card(Pad::MODE, grad, x, padding, dims))                           \
            return fallback_to_cpu<ATEN_OP(name##_backward)>(grad, x, padding);             \
        return padded_backward(Pad::MODE, grad, x, padding);                                \
    }                                                                                       \
    at::Tensor& name##_backward_out(const at::Tensor& grad, const at::Tensor& x,            \
                                    at::IntArrayRef padding, at::Tensor& grad_input) {      \
        if (!backward_on_card(Pad::MODE, grad, x, padding, dims) ||                         \
            !grad_input.is_privateuseone())                                                 \
            return fallback_to_cpu<ATEN_OP2(name##_backward, grad_input)>(grad, x, padding, \
                                                                          grad_input);      \
        return assign(grad_input, padded_backward(Pad::MODE, grad, x, padding));            \
    }

SPYRE_PADDING(reflection_pad1d, Reflect, 1)
SPYRE_PADDING(reflection_pad2d, Reflect, 2)
SPYRE_PADDING(reflection_pad3d, Reflect, 3)
SPYRE_PADDING(replication_pad1d, Replicate, 1)
SPYRE_PADDING(replication_pad2d, Replicate, 2)
SPYRE_PADDING(replication_pad3d, Replicate, 3)
#undef SPYRE_PADDING

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define SPYRE_REGISTER(name)                                                   \
    m.impl(#name, TORCH_FN(name)), m.impl(#name ".out", TORCH_FN(name##_out)), \
        m.impl(#name "_backward", TORCH_FN(name##_backward)),                  \
        m.impl(#name "_backward.grad_input", TORCH_FN(name##_backward_out))
    SPYRE_REGISTER(reflection_pad1d);
    SPYRE_REGISTER(reflection_pad2d);
    SPYRE_REGISTER(reflection_pad3d);
    SPYRE_REGISTER(replication_pad1d);
    SPYRE_REGISTER(replication_pad2d);
    SPYRE_REGISTER(replication_pad3d);
#undef SPYRE_REGISTER
}

}  // namespace torch_spyre::aten
