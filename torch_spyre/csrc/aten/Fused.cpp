// torch.ops.spyre.fused_pointwise(kernel, n, inputs, outputs) -> bool: one fused pointwise
// kernel of torch.compile's Spyre backend (torch_spyre/_inductor) on the card. `kernel` is the
// kernel description (Documentation/torch_compile.md), n the positions; inputs and outputs are
// the buffers in the description's order, read and written as flat arrays from their first
// element (the generator checked their indexing; a "view" operand reaches any element up to
// its storage's end). One spyre_op_fused launch on the outputs'
// current stream. Returns false when the library refuses the case (an operand that does not
// start on a stick, a kernel it cannot take): the caller then runs the kernel's eager form.
// `label` (may be empty) names the launch: a failure on the card says "launched by <label>".
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../runtime/SpyreException.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

spyre_tensor flat(const at::Tensor& t, int64_t n) {
    // the first n (scalar: 1) elements from t's first element, as a 1-D descriptor
    spyre_tensor d = op_tensor(t);
    d.ndim = 1;
    d.shape[0] = n;
    d.strides[0] = 1;
    return d;
}

// Names the launches queued in its scope (their errors say who queued them).
class LaunchLabel {
  public:
    explicit LaunchLabel(c10::string_view label) : on_(!label.empty()) {
        if (on_) SPYRE_CHECK(spyre_push_launch_label(std::string(label).c_str()));
    }
    ~LaunchLabel() {
        if (on_) spyre_pop_launch_label();
    }
    LaunchLabel(const LaunchLabel&) = delete;
    LaunchLabel& operator=(const LaunchLabel&) = delete;

  private:
    bool on_;
};

bool fused_pointwise(c10::string_view kernel, int64_t n, at::TensorList inputs,
                     at::TensorList outputs, c10::string_view label) {
    TORCH_CHECK(!outputs.empty(), "spyre::fused_pointwise: no outputs");
    if (n == 0) return true;
    // an operand is given as the elements from its first to its storage's end: the library
    // checks that each reaches what its description says (n by position, one, one per row or
    // per column, a view's extent, which may pass n: a slice of a wider buffer)
    auto count = [](const at::Tensor& t, bool) {
        const int64_t tail = int64_t(t.storage().nbytes()) / t.itemsize() - t.storage_offset();
        return std::max<int64_t>(1, tail);
    };
    auto usable = [&](const at::Tensor& t, bool out) {
        // int64 and bool outputs: the indices of arg reductions, any (the library checks they
        // are row outputs)
        return t.is_privateuseone() &&
               (is_float(t.scalar_type()) ||
                (out && (t.scalar_type() == at::kLong || t.scalar_type() == at::kBool))) &&
               t.device() == outputs[0].device() &&
               int64_t(t.storage().nbytes()) >= (t.storage_offset() + count(t, out)) * t.itemsize();
    };
    for (const at::Tensor& t : inputs)
        if (!usable(t, false)) return false;
    for (const at::Tensor& t : outputs)
        if (!usable(t, true)) return false;
    c10::DeviceGuard guard(outputs[0].device());
    const std::string text(kernel);  // NUL-terminated for the C API
    const LaunchLabel named(label);
    std::vector<spyre_tensor> in, out;
    for (const at::Tensor& t : inputs) in.push_back(flat(t, count(t, false)));
    for (const at::Tensor& t : outputs) out.push_back(flat(t, count(t, true)));
    return op_ran("spyre::fused_pointwise",
                  spyre_op_fused(op_stream(outputs[0]), text.c_str(), uint64_t(n), in.data(),
                                 uint32_t(in.size()), out.data(), uint32_t(out.size())));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
    m.def(
        "fused_pointwise(str kernel, int n, Tensor[] inputs, Tensor(a!)[] outputs, "
        "str label=\"\") -> bool");
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("fused_pointwise", TORCH_FN(fused_pointwise)); }

// compiled graphs call it on tensors that may require grad (inference: nothing to record)
TORCH_LIBRARY_IMPL(spyre, AutogradPrivateUse1, m) {
    m.impl("fused_pointwise", TORCH_FN(fused_pointwise));
}

}  // namespace torch_spyre::aten
