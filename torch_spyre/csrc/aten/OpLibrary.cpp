#include "OpLibrary.h"

#include <c10/util/Exception.h>

#include "../runtime/SpyreException.h"
#include "../runtime/SpyreProfiler.h"
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
        case at::kByte:
            return SPYRE_DTYPE_UINT8;
        case at::kBool:
        case at::kChar:
            return SPYRE_DTYPE_INT8;
        default:
            return std::nullopt;
    }
}

bool is_float(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

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

bool op_ran(const char* aten_op, spyre_status status) {
    if (status == SPYRE_ERROR_NOT_SUPPORTED) return false;
    SPYRE_CHECK(status);
    profiler::record_last_op(aten_op);
    return true;
}

spyre_stream_t op_stream(const at::Tensor& t) { return current_native_stream(t); }

bool is_stick_dense(const at::Tensor& t) {
    return t.is_contiguous() && (t.numel() == 0 || device_span(t).offset % 128 == 0);
}

std::optional<at::Tensor> stick_dense(const at::Tensor& t, const char* aten_op) {
    if (is_stick_dense(t)) return t;
    at::Tensor d = at::empty(t.sizes(), t.options());
    if (t.numel() == 0) return d;
    const spyre_tensor ts = op_tensor(t), td = op_tensor(d);
    if (!op_ran(aten_op, spyre_op_copy(op_stream(d), &ts, &td))) return std::nullopt;
    return d;
}

at::Tensor writable_output(const at::Tensor& out) {
    return is_stick_dense(out) ? out : at::empty(out.sizes(), out.options());
}

void finish_output(const at::Tensor& out, const at::Tensor& written) {
    if (!written.is_same(out)) out.copy_(written);
}

}  // namespace torch_spyre::aten
