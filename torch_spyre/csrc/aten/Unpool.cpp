// max_unpool2d / max_unpool3d on the card: zeros of the output size, then each input value
// written at its index within its (batch, channel) plane by the library's scatter, which keeps
// the last write of a repeated index as the CPU's sequential loop does. An index outside the
// plane goes to the CPU kernel, which raises its error.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// The unpooled planes [planes, plane] of x and indices of `spatial` trailing dims (input with
// or without its batch dim), or nothing when the card does not take the case.
std::optional<at::Tensor> unpool(const char* name, const at::Tensor& x, const at::Tensor& indices,
                                 at::IntArrayRef output_size) {
    const int64_t spatial = static_cast<int64_t>(output_size.size());
    if (!x.is_privateuseone() || !indices.is_privateuseone() || !op_dtype(x.scalar_type()) ||
        x.scalar_type() == at::kBool || indices.scalar_type() != at::kLong ||
        x.sizes() != indices.sizes() || (x.dim() != spatial + 1 && x.dim() != spatial + 2) ||
        x.numel() == 0)
        return std::nullopt;
    int64_t plane = 1;
    for (int64_t s : output_size) plane *= s;
    if (plane <= 0) return std::nullopt;
    c10::DeviceGuard guard(x.device());
    int64_t in_plane = 1;
    for (int64_t k = x.dim() - spatial; k < x.dim(); ++k) in_plane *= x.size(k);
    const int64_t planes = x.numel() / in_plane;
    const at::Tensor idx = indices.reshape({planes, -1});
    // the CPU's "Found an invalid max index" (one host read of a flag)
    if (at::logical_or(idx < 0, idx >= plane).any().item<bool>()) return std::nullopt;
    at::Tensor table = at::zeros({planes, plane}, x.options());
    if (!scatter_last_write(name, table, 1, idx.contiguous(), x.reshape({planes, -1})))
        return std::nullopt;
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - spatial);
    shape.insert(shape.end(), output_size.begin(), output_size.end());
    return table.reshape(shape);
}

// stride and padding only checked by max_unpool3d (the CPU's errors otherwise)
bool valid_3d(at::IntArrayRef stride, at::IntArrayRef padding) {
    if (stride.size() != 3 || padding.size() != 3) return false;
    for (int64_t s : stride)
        if (s <= 0) return false;
    return true;
}

at::Tensor& max_unpool2d_out(const at::Tensor& self, const at::Tensor& indices,
                             at::IntArrayRef output_size, at::Tensor& out) {
    if (output_size.size() == 2 && out.is_privateuseone() &&
        out.scalar_type() == self.scalar_type())
        if (auto r = unpool("aten::max_unpool2d", self, indices, output_size)) {
            at::native::resize_output(out, r->sizes());
            out.copy_(*r);
            return out;
        }
    return fallback_to_cpu<ATEN_OP2(max_unpool2d, out)>(self, indices, output_size, out);
}

at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices,
                        at::IntArrayRef output_size) {
    if (output_size.size() == 2)
        if (auto r = unpool("aten::max_unpool2d", self, indices, output_size)) return *r;
    return fallback_to_cpu<ATEN_OP(max_unpool2d)>(self, indices, output_size);
}

at::Tensor& max_unpool3d_out(const at::Tensor& self, const at::Tensor& indices,
                             at::IntArrayRef output_size, at::IntArrayRef stride,
                             at::IntArrayRef padding, at::Tensor& out) {
    if (output_size.size() == 3 && valid_3d(stride, padding) && out.is_privateuseone() &&
        out.scalar_type() == self.scalar_type())
        if (auto r = unpool("aten::max_unpool3d", self, indices, output_size)) {
            at::native::resize_output(out, r->sizes());
            out.copy_(*r);
            return out;
        }
    return fallback_to_cpu<ATEN_OP2(max_unpool3d, out)>(self, indices, output_size, stride, padding,
                                                        out);
}

at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices,
                        at::IntArrayRef output_size, at::IntArrayRef stride,
                        at::IntArrayRef padding) {
    if (output_size.size() == 3 && valid_3d(stride, padding))
        if (auto r = unpool("aten::max_unpool3d", self, indices, output_size)) return *r;
    return fallback_to_cpu<ATEN_OP(max_unpool3d)>(self, indices, output_size, stride, padding);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("max_unpool2d", TORCH_FN(max_unpool2d));
    m.impl("max_unpool2d.out", TORCH_FN(max_unpool2d_out));
    m.impl("max_unpool3d", TORCH_FN(max_unpool3d));
    m.impl("max_unpool3d.out", TORCH_FN(max_unpool3d_out));
}

}  // namespace torch_spyre::aten
