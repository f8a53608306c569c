#include "OpLibrary.h"

#include <c10/util/Exception.h>

#include "../runtime/SpyreException.h"
#include "Copy.h"

namespace torch_spyre::aten {

std::optional<spyre_dtype> op_dtype(at::ScalarType t) {
    switch (t) {
        case at::kFloat:
            return SPYRE_DTYPE_FLOAT32;
        case at::kHalf:
            return SPYRE_DTYPE_FLOAT16;
        case at::kBFloat16:
            return SPYRE_DTYPE_BFLOAT16;
        case at::kInt:
            return SPYRE_DTYPE_INT32;
        case at::kLong:
            return SPYRE_DTYPE_INT64;
        default:
            return std::nullopt;
    }
}

spyre_tensor op_tensor(const at::Tensor& t) {
    const auto dt = op_dtype(t.scalar_type());
    TORCH_CHECK(dt, "spyre op library: no dtype for ", t.scalar_type());
    TORCH_CHECK(t.dim() <= SPYRE_TENSOR_MAX_DIMS, "spyre op library: ", t.dim(), " dims");
    const DeviceSpan span = device_span(t);
    spyre_tensor r{};
    r.buffer = span.buffer;
    r.offset = span.offset;
    r.dtype = *dt;
    r.ndim = static_cast<uint32_t>(t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) r.shape[d] = t.size(d), r.strides[d] = t.stride(d);
    return r;
}

bool op_ran(spyre_status status) {
    if (status == SPYRE_ERROR_NOT_SUPPORTED) return false;
    SPYRE_CHECK(status);
    return true;
}

spyre_stream_t op_stream(const at::Tensor& t) { return current_native_stream(t); }

}  // namespace torch_spyre::aten
