// Copies between the host and spyre cards and between cards, through libspyre's copy functions
// on the current stream (csrc/aten/Copy.cpp).
//
//   host -> device  spyre_memcpy_htod_async     device -> host  spyre_memcpy_dtoh_async
//   device -> device spyre_memcpy_dtod_async    strided layouts spyre_memcpy_3d_async
//
// Layouts: two tensors with the same dense layout are one linear copy; strided layouts whose
// innermost dimension is contiguous on both sides are copied with spyre_memcpy_3d (up to three
// dimensions per call, a loop over the others); anything else goes through a host staging
// tensor (and, for a device view whose innermost stride is not 1, a read-modify-write of the
// byte range the view spans). Between host and device, dtype conversion and the conj/neg bits
// are applied on the host. A device-to-device conversion between the dtypes the cores convert
// exactly as the CPU does (fp32/fp16/bf16 among each other, int32/int8/bool to those, anything
// to bool, int8/bool to int32, bool to int8) is one elementwise launch on the source's card
// (spyre_op_unary CAST or spyre_op_where(x, 1, 0)); float -> int32/int8 is two (a fused kernel
// truncating toward zero in fp32, then the exact CAST). spyre_op_copy makes a strided source
// dense and a dense temporary serves a destination the launch cannot write in place. The other
// pairs (int32 -> int8, int64, other dtypes, conj/neg) run on the CPU and count as a CPU
// fallback naming the reason ("aten::_copy_from (Long -> Float, the cores compute no int64)").
//
// Blocking copies (non_blocking=False) return once the data is in place. With non_blocking=True
// a copy from or to pinned memory of the card (torch_spyre's pin_memory) stays asynchronous on
// the current stream; the pinned block is kept until the copy has finished. Copies from
// pageable memory have taken the data when they return, copies to pageable memory are
// synchronous (libspyre's rules).
#pragma once

#include <ATen/core/Tensor.h>
#include <spyre/spyre.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_spyre::aten {

// dst.copy_(src) for any mix of CPU and spyre tensors; src is broadcast to dst's shape.
void copy_(const at::Tensor& dst, const at::Tensor& src, bool non_blocking);

// Counters of the copy machinery since the start (or the last reset): libspyre calls by kind
// ("htod", "dtoh", "dtod", "memcpy_3d"), dtype conversions on the card ("cast") and the fallbacks
// among the layouts ("host_staged": a host staging tensor, "read_modify_write": a view's byte
// range rewritten, "through_host": a device-to-device copy through host memory). For tests and
// performance work.
std::vector<std::pair<std::string, uint64_t>> copy_stats();
void reset_copy_stats();

// Where a spyre tensor's first element lives.
struct DeviceSpan {
    spyre_buffer_t buffer;
    uint64_t offset;  // bytes
};
DeviceSpan device_span(const at::Tensor& t);
// The libspyre stream of the calling thread's current stream on t's card: where work on t is
// queued.
spyre_stream_t current_native_stream(const at::Tensor& t);

}  // namespace torch_spyre::aten
