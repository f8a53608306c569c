// Elementwise launches shared by the arithmetic, where/masked_fill and baddbmm kernels:
// operands that are spyre tensors or host scalars, torch-style broadcasting (the forms the op
// library takes natively, else the operands expanded on the card first), any output layout.
#pragma once

#include <ATen/ATen.h>
#include <spyre/ops.h>

#include <optional>
#include <vector>

#include "OpLibrary.h"

namespace torch_spyre::aten {

// An operand: a spyre tensor of a float type, or a number (a CPU 0-dim tensor, e.g. the 2 of
// `x * 2`).
struct Operand {
    at::Tensor tensor;  // undefined for a number
    double number = 0.0;
    bool is_number() const { return !tensor.defined(); }
};

// A number as the card's kernels take it; nothing for a complex number (the CPU's then).
std::optional<double> real_number(const at::Scalar& s);

// The operand for a kernel argument; nothing for a complex number, for a CPU tensor with elements
// or a spyre tensor that is not fp32/fp16/bf16.
std::optional<Operand> as_operand(const at::Tensor& t);

// A spyre tensor for an operand that must be one (a number becomes a 0-dim fp32 tensor filled
// on `like`'s card).
at::Tensor operand_tensor(const Operand& o, const at::Tensor& like);

// An operand as the library loads it: dense in its own shape; a full-size one also starts on a
// stick. expanded(): made out's shape first (the broadcasts the library does not take).
std::optional<at::Tensor> loadable(const at::Tensor& t, const at::Tensor& out, const char* name);
std::optional<at::Tensor> expanded(const at::Tensor& t, const at::Tensor& out, const char* name);

// Runs `launch(operands, writable out)` on loadable operands, and once more on expanded ones if
// the library refused the broadcast (numbers stay numbers: nullopt).
template <class Launch>
bool with_operands(const char* name, const at::Tensor& out,
                   std::initializer_list<const Operand*> in, Launch launch) {
    for (bool expand : {false, true}) {
        std::vector<std::optional<at::Tensor>> ts;
        bool ok = true;
        for (const Operand* o : in) {
            if (o->is_number()) {
                ts.emplace_back(std::nullopt);
                continue;
            }
            auto t = expand ? expanded(o->tensor, out, name) : loadable(o->tensor, out, name);
            if (!t) ok = false;
            ts.push_back(std::move(t));
        }
        if (!ok) continue;
        const at::Tensor w = writable_output(out);
        if (launch(ts, w)) {
            finish_output(out, w);
            return true;
        }
    }
    return false;
}

// out = a OP b (ADD/SUB: a +- alpha b) broadcast to out's shape; out has its final shape and
// a float dtype. False if the library refused (the caller falls back).
bool binary_into(const char* name, spyre_binary_op op, const at::Tensor& a, const Operand& b,
                 double alpha, const at::Tensor& out);

// The out= kernel of an arithmetic operator: out = self OP other (ADD/SUB: self +- alpha other)
// with torch's broadcasting and type promotion to a float type equal to out's, out resized as
// torch does. False for a case the library does not take (the caller falls back).
bool binary_out(const char* name, spyre_binary_op op, const at::Tensor& self,
                const at::Tensor& other, double alpha, const at::Tensor& out);

// out = cond ? a : b broadcast to out's shape; cond a spyre tensor (nonzero is true).
bool where_into(const char* name, const at::Tensor& cond, const Operand& a, const Operand& b,
                const at::Tensor& out);

// out = min(max(x, lo), hi) broadcast to out's shape, in one launch (torch.clamp with both
// bounds); x a spyre tensor.
bool clamp_into(const char* name, const at::Tensor& x, const Operand& lo, const Operand& hi,
                const at::Tensor& out);

}  // namespace torch_spyre::aten
