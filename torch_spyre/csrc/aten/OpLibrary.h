// Calling libspyre's op library (spyre/ops.h) from the aten kernels: spyre tensors as op
// descriptors, dense operands made on the card, and the rule for cases the library does not
// take (SPYRE_ERROR_NOT_SUPPORTED: the kernel hands the call to the CPU fallback; every other
// error is raised).
#pragma once

#include <ATen/ATen.h>
#include <spyre/ops.h>

#include <optional>

namespace torch_spyre::aten {

// The op-library dtype of a torch dtype, if the library computes on it (bool as int8: a mask).
std::optional<spyre_dtype> op_dtype(at::ScalarType t);

// fp32, fp16 or bf16: the types the cores compute in.
bool is_float(at::ScalarType t);

// A descriptor of spyre tensor t (buffer, byte offset, dtype, sizes, element strides). t must
// have an op_dtype and at most SPYRE_TENSOR_MAX_DIMS dims.
spyre_tensor op_tensor(const at::Tensor& t);

// True if the op ran (was queued); false if the library refused the case with
// SPYRE_ERROR_NOT_SUPPORTED (the caller falls back). Other failures raise with libspyre's
// message. `aten_op` names the operator for the profiler (csrc/runtime/SpyreProfiler.h).
bool op_ran(const char* aten_op, spyre_status status);

// The libspyre stream of the current stream of t's card.
spyre_stream_t op_stream(const at::Tensor& t);

// True if t is dense row-major and starts on a 128-byte stick: the layout every op loads in
// place.
bool is_stick_dense(const at::Tensor& t);

// t itself if is_stick_dense, else a dense copy made on the card (spyre_op_copy: transposes,
// slices, expanded dims); nothing if the library cannot copy that layout.
std::optional<at::Tensor> stick_dense(const at::Tensor& t, const char* aten_op);

// table (stick dense, written in place) [.., index[.., n, ..], ..] = rows[.., n, ..] along d
// (spyre_op_scatter), the positions of a slab in ascending order, so a repeated target keeps
// the last write; false: the library does not take the case (csrc/aten/ScatterReduce.cpp).
bool scatter_last_write(const char* name, const at::Tensor& table, int64_t d,
                        const at::Tensor& index, const at::Tensor& rows);

// An output for `like`'s shape and dtype that ops can write: `out` itself if it is stick
// dense, else a fresh dense tensor that finish_output() copies into `out`.
at::Tensor writable_output(const at::Tensor& out);
void finish_output(const at::Tensor& out, const at::Tensor& written);

}  // namespace torch_spyre::aten
