// Operators composed of other spyre operators (each a kernel on the card), for the ones the op
// library has no kernel of their own for: the checks they share and the out= convention.
// The families: PiecewiseActivation.cpp, BinaryMath.cpp, VectorNorm.cpp, MatVec.cpp.
#pragma once

#include <ATen/ATen.h>
#include <spyre/ops.h>

#include <initializer_list>

namespace torch_spyre::aten {

// True when `result` is fp32/fp16/bf16, and every defined operand is a spyre tensor or a 0-dim
// CPU tensor (a number) with at least one spyre tensor among them: the composition runs on the
// card. Anything else (double, complex, a CPU tensor with dims) stays with the CPU fallback.
bool composable(std::initializer_list<at::Tensor> operands, at::ScalarType result);

// The first spyre tensor's device (composable() made sure there is one).
at::Device card_of(std::initializer_list<at::Tensor> operands);

// fp16/bf16 widened to fp32, the precision the CPU's kernels compute 16-bit floats in, and
// integers (operands of float results) converted to fp32; fp32 tensors as they are.
at::Tensor widened(const at::Tensor& t);

// An operand as the compositions take it: on the card with at least one dim (a number or a
// 0-dim tensor becomes one element: the card's kernels take no 0-dim operand, and every partial
// result then lives on the card), in fp32 for a number or a 16-bit or integral tensor (torch's
// result type is decided before). Reshape the result to torch's shape.
at::Tensor card_operand(const at::Tensor& t, at::Device card);

// out = r for an out= kernel: out resized as torch resizes out= tensors, r converted to out's
// dtype (refused as torch refuses it when r's type cannot be cast to out's).
at::Tensor& assign(at::Tensor& out, const at::Tensor& r);

// Compositions other families call (BinaryMath.cpp):

// out = self OP other for OP REMAINDER or FLOOR_DIVIDE when torch's result type is a float
// (the integer forms are exact kernels: IntOps.cpp). False when not composable.
bool float_binary_composed(spyre_binary_op op, const at::Tensor& self, const at::Tensor& other,
                           at::Tensor& out);

// base ** exponent for a float base on the card (fp32 result for a 16-bit base): integer
// exponents up to 16 by repeated squaring, others as exp2(e * log2|base|) with the sign and the
// NaN of a negative base as std::pow gives them.
at::Tensor pow_composed(const at::Tensor& base, double exponent);

}  // namespace torch_spyre::aten
