// View operators of spyre tensors. A view shares its base's storage and only changes sizes,
// strides and offset, so these are ATen's device-independent metadata implementations; every
// other view (transpose, permute, slice, select, expand, squeeze, diagonal, ...) is a composite
// over as_strided and reaches it here. The CPU fallback cannot run views (Fallback.h).
#include <ATen/ATen.h>
#include <ATen/NativeFunctions.h>
#include <torch/library.h>

namespace torch_spyre::aten {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
    m.impl("view", TORCH_FN(at::native::view));
    m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
    m.impl("unfold", TORCH_FN(at::native::unfold));
    m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
    m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
    m.impl("is_set_to", TORCH_FN(at::native::is_set_to));
}

}  // namespace torch_spyre::aten
