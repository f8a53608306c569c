// Calling libspyre's op library (spyre/ops.h) from the aten kernels: spyre tensors as op
// descriptors, and the rule for cases the library does not take (SPYRE_ERROR_NOT_SUPPORTED:
// the kernel hands the call to the CPU fallback; every other error is raised).
#pragma once

#include <ATen/ATen.h>
#include <spyre/ops.h>

#include <optional>

namespace torch_spyre::aten {

// The op-library dtype of a torch dtype, if the library computes on it.
std::optional<spyre_dtype> op_dtype(at::ScalarType t);

// A descriptor of spyre tensor t (buffer, byte offset, dtype, sizes, element strides). t must
// have an op_dtype and at most SPYRE_TENSOR_MAX_DIMS dims.
spyre_tensor op_tensor(const at::Tensor& t);

// True if the op ran (was queued); false if the library refused the case with
// SPYRE_ERROR_NOT_SUPPORTED (the caller falls back). Other failures raise with libspyre's
// message.
bool op_ran(spyre_status status);

// The libspyre stream of the current stream of t's card.
spyre_stream_t op_stream(const at::Tensor& t);

}  // namespace torch_spyre::aten
