// torch.cat (and torch.stack, which reaches it) on the card: each input is copied into its
// slice of the output with a device-to-device copy on the current stream (csrc/aten/Copy.h:
// strided slices are spyre_memcpy_3d copies). Inputs of another dtype than the output, on
// another device or of mismatched shapes run on the CPU fallback (which gives the CPU's errors).
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"

namespace torch_spyre::aten {
namespace {

// torch.cat skips 1-D empty inputs whatever the other shapes (legacy behaviour).
bool skipped(const at::Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
    std::vector<at::Tensor> in;
    for (const at::Tensor& t : tensors) in.push_back(t);
    const at::Tensor* ref = nullptr;
    for (const at::Tensor& t : in)
        if (!skipped(t)) {
            ref = &t;
            break;
        }
    bool ok = ref && out.is_privateuseone();
    int64_t d = 0, total = 0;
    if (ok) {
        d = c10::maybe_wrap_dim(dim, ref->dim());
        for (const at::Tensor& t : in) {
            if (skipped(t)) continue;
            ok &= t.device() == out.device() && t.scalar_type() == out.scalar_type() &&
                  t.dim() == ref->dim();
            for (int64_t i = 0; ok && i < t.dim(); ++i) ok &= i == d || t.size(i) == ref->size(i);
            if (ok) total += t.size(d);
        }
    }
    if (!ok) return fallback_to_cpu<ATEN_OP2(cat, out)>(tensors, dim, out);
    at::assert_no_internal_overlap(out);
    for (const at::Tensor& t : in) at::assert_no_overlap(out, t);
    c10::DeviceGuard guard(out.device());
    std::vector<int64_t> shape(ref->sizes().begin(), ref->sizes().end());
    shape[d] = total;
    at::native::resize_output(out, shape);
    int64_t at_index = 0;
    for (const at::Tensor& t : in) {
        if (skipped(t) || t.size(d) == 0) continue;
        out.narrow(d, at_index, t.size(d)).copy_(t);
        at_index += t.size(d);
    }
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("cat.out", TORCH_FN(cat_out)); }

}  // namespace torch_spyre::aten
