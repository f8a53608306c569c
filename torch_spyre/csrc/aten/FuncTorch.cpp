// torch.func's grad/jacrev/jacfwd wrap a tensor in a GradTrackingTensor whose dispatch keys carry
// the CPU's and CUDA's backend keys but not PrivateUse1 (torch 2.6), so a spyre tensor's wrapper
// dispatches autograd through AutogradOther. For a CompositeImplicitAutograd operator that
// Vulkan (a backend mapped to AutogradOther) also implements, that slot is ambiguous and the
// dispatcher raised "INTERNAL ASSERT FAILED ... aten::layer_norm has kernels registered to both
// CompositeImplicitAutograd and a backend mapped to AutogradOther" (layer_norm, expand_as,
// var, conv1d, tile, max_pool2d, batch_norm, lstm, gru: every such operator of torch 2.6).
// Registered directly to AutogradOther, each is the composite it would resolve to anyway (the
// note in the message: "the dispatcher will always prefer the CompositeImplicitAutograd
// lowering"), so the wrapper decomposes it as it does for a CPU tensor.
#include <ATen/ATen.h>
#include <ATen/ops/batch_norm_native.h>
#include <ATen/ops/conv1d_native.h>
#include <ATen/ops/expand_as_native.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/layer_norm_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/max_pool2d_native.h>
#include <ATen/ops/tile_native.h>
#include <ATen/ops/var_native.h>
#include <torch/library.h>

namespace torch_spyre::aten {
namespace {

using LstmInput = std::tuple<at::Tensor, at::Tensor, at::Tensor> (*)(const at::Tensor&,
                                                                     at::TensorList, at::TensorList,
                                                                     bool, int64_t, double, bool,
                                                                     bool, bool);
using GruInput = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&,
                                                        at::TensorList, bool, int64_t, double, bool,
                                                        bool, bool);
using VarDim = at::Tensor (*)(const at::Tensor&, at::OptionalIntArrayRef, bool, bool);

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradOther, m) {
    m.impl("layer_norm", TORCH_FN(at::native::layer_norm_symint));
    m.impl("expand_as", TORCH_FN(at::native::expand_as));
    m.impl("var.dim", TORCH_FN(static_cast<VarDim>(at::native::var)));
    m.impl("conv1d", TORCH_FN(at::native::conv1d_symint));
    m.impl("tile", TORCH_FN(at::native::tile_symint));
    m.impl("max_pool2d", TORCH_FN(at::native::max_pool2d));
    m.impl("batch_norm", TORCH_FN(at::native::batch_norm));
    m.impl("lstm.input", TORCH_FN(static_cast<LstmInput>(at::native::lstm)));
    m.impl("gru.input", TORCH_FN(static_cast<GruInput>(at::native::gru)));
}

}  // namespace torch_spyre::aten
