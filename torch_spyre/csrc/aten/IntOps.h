// Integer and bool elementwise math on the card: exact, wrapping like torch (the ISA's VINT
// through spyre_op_binary_int and spyre_op_unary). Used by the arithmetic and compare kernels
// (Binary.cpp, Compare.cpp) for integer results; IntOps.cpp registers the integer-only operators.
#pragma once

#include <ATen/ATen.h>
#include <spyre/ops.h>

namespace torch_spyre::aten {

// int64, int32, int8, uint8, bool: the integer dtypes the cores compute exactly.
bool is_int_dtype(at::ScalarType t);

// A number as a 0-dim CPU tensor of its own type, a wrapped number (so type promotion treats it
// as torch treats a Python number).
at::Tensor wrapped_number(const at::Scalar& s);

// out = self OP other (ADD/SUB: self +- alpha other; compares into bool) when torch's result
// type is an integer dtype: operands promoted on the card, numbers wrapped to the result type,
// broadcasting as torch, out resized as torch does. False for a case the card does not take
// (the caller falls back). A zero divisor in a number raises ZeroDivisionError as on the CPU.
bool int_binary_out(const char* name, spyre_binary_op op, const at::Tensor& self,
                    const at::Tensor& other, const at::Scalar& alpha, const at::Tensor& out);

}  // namespace torch_spyre::aten
