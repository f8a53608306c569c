// Reductions composed of device ops that other files reuse (Statistics.cpp).
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace torch_spyre::aten {

// out (int64) = the first index of the largest (or smallest) element of an int64/int32/int8/
// uint8 spyre tensor along dim (of the flattened tensor when none), as torch's argmax/argmin:
// the smallest position holding the extreme, in exact integer ops. False: not taken.
bool int_arg_extreme(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, bool largest,
                     at::Tensor& out);

}  // namespace torch_spyre::aten
