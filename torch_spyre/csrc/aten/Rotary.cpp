// torch.ops.spyre.rotary(x, cos, sin): rotary position embedding, rotate-half convention
// (GPT-NeoX, Llama, Granite): x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] over
// the two halves of the last dim, computed in fp32 and rounded once. aten has no such operator,
// so torch_spyre defines it (Python: torch_spyre.rotary). x [B, H, L, D]; cos and sin [L, D],
// [B or 1, L, D] or [B or 1, 1, L, D]. On spyre tensors it is one spyre_op_rotary; the CPU
// kernel is the reference, and the CPU fallback runs it for layouts the library refuses.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

// cos/sin as [.., 1 or H, L, D] against x [B, H, L, D].
at::Tensor per_head(const at::Tensor& t) { return t.dim() == 3 ? t.unsqueeze(1) : t; }

// The definition in torch ops (differentiable): the CPU kernel, and the autograd path.
at::Tensor rotary_reference(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    TORCH_CHECK(x.dim() == 4, "spyre::rotary: x must be [B, H, L, D], got ", x.sizes());
    TORCH_CHECK(x.size(3) % 2 == 0, "spyre::rotary: the head dim must be even, got ", x.size(3));
    TORCH_CHECK(cos.sizes() == sin.sizes(), "spyre::rotary: cos and sin differ in shape");
    const int64_t half = x.size(3) / 2;
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor rot = at::cat({-xf.narrow(3, half, half), xf.narrow(3, 0, half)}, 3);
    return (xf * per_head(cos).to(at::kFloat) + rot * per_head(sin).to(at::kFloat))
        .to(x.scalar_type());
}

const c10::OperatorHandle& rotary_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("spyre::rotary", "");
    return op;
}

// cos/sin in a form the library reads: [L, D], [B or 1, L, D] or [B or 1, 1, L, D], one type.
bool library_tables(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    if (!cos.is_privateuseone() || !sin.is_privateuseone() || cos.sizes() != sin.sizes() ||
        cos.strides() != sin.strides() || cos.scalar_type() != sin.scalar_type() ||
        !is_float(cos.scalar_type()))
        return false;
    const at::Tensor t = cos.dim() == 4 && cos.size(1) == 1 ? cos.squeeze(1) : cos;
    const int64_t b = t.dim() == 3 ? t.size(0) : 1;
    return t.dim() >= 2 && t.dim() <= 3 && (b == 1 || b == x.size(0)) && t.size(-2) == x.size(2) &&
           t.size(-1) == x.size(3);
}

at::Tensor rotary_spyre(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    if (x.dim() == 4 && is_float(x.scalar_type()) && library_tables(x, cos, sin)) {
        c10::DeviceGuard guard(x.device());
        at::Tensor out = at::empty(x.sizes(), x.options());
        if (out.numel() == 0) return out;
        const spyre_tensor tx = op_tensor(x), tc = op_tensor(cos), ts = op_tensor(sin),
                           to = op_tensor(out);
        if (op_ran("spyre::rotary", spyre_op_rotary(op_stream(out), &tx, &tc, &ts, &to)))
            return out;
    }
    torch::jit::Stack stack{x, cos, sin};
    cpu_fallback(rotary_op(), &stack);
    return stack[0].toTensor();
}

// With a gradient wanted, the reference's ops record it; otherwise the device kernel.
at::Tensor rotary_autograd(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    if (at::GradMode::is_enabled() &&
        (x.requires_grad() || cos.requires_grad() || sin.requires_grad()))
        return rotary_reference(x, cos, sin);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return rotary_op()
        .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>()
        .call(x, cos, sin);
}

}  // namespace

TORCH_LIBRARY(spyre, m) { m.def("rotary(Tensor x, Tensor cos, Tensor sin) -> Tensor"); }

TORCH_LIBRARY_IMPL(spyre, CPU, m) { m.impl("rotary", TORCH_FN(rotary_reference)); }
TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("rotary", TORCH_FN(rotary_spyre)); }
TORCH_LIBRARY_IMPL(spyre, Autograd, m) { m.impl("rotary", TORCH_FN(rotary_autograd)); }

}  // namespace torch_spyre::aten
