// fill_ and zero_ of spyre tensors with libspyre's device fills (spyre_memset_async for
// patterns of equal bytes such as 0, spyre_fill_async for 1-, 2-, 4- and 8-byte patterns such
// as 1.0f) on the current stream.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstring>

#include "../runtime/SpyreException.h"
#include "../runtime/SpyreStream.h"
#include "Copy.h"
#include "Fallback.h"

namespace torch_spyre::aten {
namespace {

// Fills non-overlapping, dense `t` with the element `pattern` (a 0-dim CPU tensor of t's
// dtype, at most 8 bytes).
void fill_dense(const at::Tensor& t, const at::Tensor& pattern) {
    const DeviceSpan span = device_span(t);
    const auto item = static_cast<uint32_t>(t.element_size());
    const auto count = static_cast<uint64_t>(t.numel());
    const auto* bytes = static_cast<const uint8_t*>(pattern.const_data_ptr());
    spyre_stream_t st = current_native_stream(t);
    bool uniform = true;
    for (uint32_t i = 1; i < item; ++i) uniform = uniform && bytes[i] == bytes[0];
    if (uniform)
        SPYRE_CHECK(spyre_memset_async(span.buffer, span.offset, bytes[0], count * item, st));
    else
        SPYRE_CHECK(spyre_fill_async(span.buffer, span.offset, bytes, item, count, st));
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
    if (self.numel() == 0) return self;
    at::assert_no_internal_overlap(self);
    // 16-byte elements (complex128) have no libspyre fill pattern.
    if (self.element_size() > 8) return fallback_to_cpu<ATEN_OP2(fill_, Scalar)>(self, value);
    c10::DeviceGuard guard(self.device());
    at::Tensor pattern = at::empty({}, self.options().device(at::kCPU));
    pattern.fill_(value);
    if (self.is_neg()) pattern = pattern.neg();
    if (self.is_conj()) pattern = pattern.conj().resolve_conj();
    if (self.is_non_overlapping_and_dense()) {
        fill_dense(self, pattern);
    } else {
        // A strided view: fill a dense block, then a device copy into the view.
        at::Tensor dense = at::empty(self.sizes(), self.options());
        fill_dense(dense, pattern);
        copy_(self, dense, /*non_blocking=*/true);
    }
    return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
    TORCH_CHECK(value.dim() == 0,
                "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
                " dimensions.");
    return fill_scalar(self, value.item());
}

at::Tensor& zero(at::Tensor& self) { return fill_scalar(self, 0); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
    m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
    m.impl("zero_", TORCH_FN(zero));
}

}  // namespace torch_spyre::aten
