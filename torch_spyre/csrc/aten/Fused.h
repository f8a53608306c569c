// A fused kernel of a compiled graph prepared when the graph is loaded (spyre_fused_kernel_create:
// parsed, planned, its program generated and loaded on the card), launched by handle at each
// call: the calls neither parse the description nor look its plan up (Fused.cpp has the text
// path, torch.ops.spyre.fused_pointwise, for kernels whose size is only known at a call).
#pragma once

#include <ATen/ATen.h>
#include <spyre/ops.h>

#include <string>
#include <vector>

namespace torch_spyre::aten {

class PreparedFused {
  public:
    // Prepares `kernel` for n positions on card `device`; does not throw (see refused()).
    PreparedFused(const std::string& kernel, int64_t n, c10::DeviceIndex device);
    ~PreparedFused();
    PreparedFused(const PreparedFused&) = delete;
    PreparedFused& operator=(const PreparedFused&) = delete;

    // One launch on the outputs' current stream, named `label`; false when the kernel or an
    // operand is refused (the caller runs the eager form). Outputs on another card than the
    // kernel's, or a kernel not prepared for another reason than a refusal, go the text path.
    bool launch(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                const std::string& label);
    bool prepared() const { return handle_ != nullptr; }
    // The library refused the kernel (SPYRE_ERROR_NOT_SUPPORTED): every call runs the eager
    // form. Not prepared for another reason (a lost card, no memory for the program): calls go
    // the text path, which raises what the card says.
    bool refused() const { return refused_; }
    const std::string& reason() const { return reason_; }

  private:
    spyre_fused_kernel_t handle_ = nullptr;
    bool refused_ = false;
    std::string kernel_;
    int64_t n_;
    c10::DeviceIndex device_;
    std::string reason_;
};

}  // namespace torch_spyre::aten
