// torch.ops.spyre.fused_pointwise(kernel, n, inputs, outputs) -> bool: one fused pointwise
// kernel of torch.compile's Spyre backend (torch_spyre/_inductor) on the card. `kernel` is the
// kernel description (Documentation/torch_compile.md), n the positions; inputs and outputs are
// the buffers in the description's order, read and written as flat arrays from their first
// element (the generator checked their indexing; a "view" operand reaches any element up to
// its storage's end). One spyre_op_fused launch on the outputs'
// current stream. Returns false when the library refuses the case (an operand that does not
// start on a stick, a kernel it cannot take): the caller then runs the kernel's eager form.
// `label` (may be empty) names the launch: a failure on the card says "launched by <label>".
// PreparedFused (Fused.h) is the same launch of a kernel prepared when the graph was loaded.
#include "Fused.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <utility>
#include <vector>

#include "../runtime/SpyreException.h"
#include "../runtime/SpyreFunctions.h"
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

// The operands of a fused launch as the library wants them, or nothing when the kernel's
// eager form must run (an operand the library cannot take: another device or type, too short).
std::optional<std::pair<std::vector<spyre_tensor>, std::vector<spyre_tensor>>> fused_operands(
    at::TensorList inputs, at::TensorList outputs) {
    TORCH_CHECK(!outputs.empty(), "spyre::fused_pointwise: no outputs");
    // an operand is given as the elements from its first to its storage's end: the library
    // checks that each reaches what its description says (n by position, one, one per row or
    // per column, a view's extent, which may pass n: a slice of a wider buffer)
    auto count = [](const at::Tensor& t) {
        const int64_t tail = int64_t(t.storage().nbytes()) / t.itemsize() - t.storage_offset();
        return std::max<int64_t>(1, tail);
    };
    auto usable = [&](const at::Tensor& t) {
        // integer and bool operands: flat kernels' exact integer values, row kernels' arg
        // reduction and any outputs (the library checks each against the description)
        const auto st = t.scalar_type();
        return t.is_privateuseone() &&
               (is_float(st) || st == at::kLong || st == at::kInt || st == at::kBool ||
                st == at::kByte) &&
               t.device() == outputs[0].device() &&
               int64_t(t.storage().nbytes()) >= (t.storage_offset() + count(t)) * t.itemsize();
    };
    for (const at::Tensor& t : inputs)
        if (!usable(t)) return std::nullopt;
    for (const at::Tensor& t : outputs)
        if (!usable(t)) return std::nullopt;
    std::pair<std::vector<spyre_tensor>, std::vector<spyre_tensor>> ops;
    for (const at::Tensor& t : inputs) ops.first.push_back(flat(t, count(t)));
    for (const at::Tensor& t : outputs) ops.second.push_back(flat(t, count(t)));
    return ops;
}

bool fused_pointwise(c10::string_view kernel, int64_t n, at::TensorList inputs,
                     at::TensorList outputs, c10::string_view label) {
    TORCH_CHECK(!outputs.empty(), "spyre::fused_pointwise: no outputs");
    if (n == 0) return true;
    const auto ops = fused_operands(inputs, outputs);
    if (!ops) return false;
    c10::DeviceGuard guard(outputs[0].device());
    const std::string text(kernel);  // NUL-terminated for the C API
    const LaunchLabel named(label);
    const auto& [in, out] = *ops;
    return op_ran("spyre::fused_pointwise",
                  spyre_op_fused(op_stream(outputs[0]), text.c_str(), uint64_t(n), in.data(),
                                 uint32_t(in.size()), out.data(), uint32_t(out.size())));
}

}  // namespace

PreparedFused::PreparedFused(const std::string& kernel, int64_t n, c10::DeviceIndex device)
    : kernel_(kernel), n_(n), device_(device) {
    TORCH_CHECK(n >= 0, "spyre: a fused kernel of ", n, " positions");
    // not an error here: a refused kernel runs its eager form at every call, as the text
    // path's would; any other failure is the text path's to raise at a call
    try {
        const spyre_status st =
            spyre_fused_kernel_create(device_handle(device), kernel.c_str(), uint64_t(n), &handle_);
        if (st != SPYRE_SUCCESS) {
            refused_ = st == SPYRE_ERROR_NOT_SUPPORTED;
            reason_ = spyre_last_error();
            handle_ = nullptr;
        }
    } catch (const std::exception& e) {  // the card cannot be opened
        reason_ = e.what();
    }
}

PreparedFused::~PreparedFused() {
    if (handle_) spyre_fused_kernel_destroy(handle_);
}

bool PreparedFused::launch(const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& outputs, const std::string& label) {
    if (refused_) return false;
    TORCH_CHECK(!outputs.empty(), "spyre: a fused kernel call without outputs");
    if (!handle_ || outputs[0].device() != c10::Device(c10::DeviceType::PrivateUse1, device_))
        return fused_pointwise(kernel_, n_, inputs, outputs, label);
    if (n_ == 0) return true;
    const auto ops = fused_operands(inputs, outputs);
    if (!ops) return false;
    c10::DeviceGuard guard(outputs[0].device());
    const LaunchLabel named(label);
    const auto& [in, out] = *ops;
    return op_ran("spyre::fused_pointwise",
                  spyre_op_fused_prepared(op_stream(outputs[0]), handle_, in.data(),
                                          uint32_t(in.size()), out.data(), uint32_t(out.size())));
}

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
