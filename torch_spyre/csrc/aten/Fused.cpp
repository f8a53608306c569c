// torch.ops.spyre.fused_pointwise(kernel, n, inputs, outputs) -> bool: one fused pointwise
// kernel of torch.compile's Spyre backend (torch_spyre/_inductor) on the card. `kernel` is the
// kernel description (Documentation/torch_compile.md), n the positions; inputs and outputs are
// the buffers in the description's order, read and written as flat arrays from their first
// element (the generator checked their indexing). One spyre_op_fused launch on the outputs'
// current stream. Returns false when the library refuses the case (an operand that does not
// start on a stick, a kernel it cannot take): the caller then runs the kernel's eager form.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

spyre_tensor flat(const at::Tensor& t, int64_t n) {
    // a 1-D view of the first n (scalar: 1) elements from t's first element
    return op_tensor(t.as_strided({n}, {1}));
}

bool fused_pointwise(c10::string_view kernel, int64_t n, at::TensorList inputs,
                     at::TensorList outputs) {
    TORCH_CHECK(!outputs.empty(), "spyre::fused_pointwise: no outputs");
    if (n == 0) return true;
    for (const at::TensorList& ts : {inputs, outputs})
        for (const at::Tensor& t : ts)
            if (!t.is_privateuseone() || !is_float(t.scalar_type()) ||
                t.device() != outputs[0].device())
                return false;
    c10::DeviceGuard guard(outputs[0].device());
    const std::string text(kernel);
    std::vector<spyre_tensor> in, out;
    // a scalar input is read as one element (its description says so); full ones as n
    for (const at::Tensor& t : inputs) in.push_back(flat(t, t.numel() < n ? 1 : n));
    for (const at::Tensor& t : outputs) out.push_back(flat(t, n));
    return op_ran("spyre::fused_pointwise",
                  spyre_op_fused(op_stream(outputs[0]), text.c_str(), uint64_t(n), in.data(),
                                 uint32_t(in.size()), out.data(), uint32_t(out.size())));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
    m.def("fused_pointwise(str kernel, int n, Tensor[] inputs, Tensor(a!)[] outputs) -> bool");
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("fused_pointwise", TORCH_FN(fused_pointwise)); }

// compiled graphs call it on tensors that may require grad (inference: nothing to record)
TORCH_LIBRARY_IMPL(spyre, AutogradPrivateUse1, m) {
    m.impl("fused_pointwise", TORCH_FN(fused_pointwise));
}

}  // namespace torch_spyre::aten
