// torch.autocast(device_type="spyre"): the AutocastPrivateUse1 dispatch key gets PyTorch's own
// op lists (ATen/autocast_mode.h publishes them so that backends share one policy): matmul-like
// ops (mm, bmm, addmm, linear, matmul, baddbmm, attention, convolutions) cast their floating
// inputs to the autocast dtype (bf16 or fp16, torch.spyre.get_amp_supported_dtype()); softmax,
// norms, losses, exp/log/pow and reductions run in fp32; multi-input ops such as cat and stack
// promote to the widest input type. Every other op falls through to the spyre kernels unchanged.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <optional>

namespace torch_spyre::aten {
namespace {

#define SPYRE_AUTOCAST_LOW(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define SPYRE_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define SPYRE_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
// these entries carry their policy (fp32_append_dtype) and name ops and types unqualified
#define SPYRE_AUTOCAST_FP32_APPEND_DTYPE(...) \
    KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(__VA_ARGS__)
#define ADD_NS(RAW_OP) at::RAW_OP
using at::DimnameList;
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;
#define SPYRE_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

// binary_cross_entropy on low-precision probabilities is unsafe (CUDA refuses it the same way).
at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&,
                                        const std::optional<at::Tensor>&, int64_t) {
    TORCH_CHECK(false,
                "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
                "autocast on spyre; use binary_cross_entropy_with_logits / BCEWithLogitsLoss, "
                "which combine the sigmoid and the loss and are safe to autocast");
}

// What autocast does not list keeps the types it was given.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
    AT_FORALL_LOWER_PRECISION_FP(SPYRE_AUTOCAST_LOW)
    AT_FORALL_FP32(SPYRE_AUTOCAST_FP32)
    AT_FORALL_FP32_SET_OPT_DTYPE(SPYRE_AUTOCAST_FP32_SET_OPT_DTYPE)
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(SPYRE_AUTOCAST_FP32_APPEND_DTYPE)
    AT_FORALL_PROMOTE(SPYRE_AUTOCAST_PROMOTE)
    m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
           TORCH_FN(binary_cross_entropy_refused));
}

}  // namespace
}  // namespace torch_spyre::aten
