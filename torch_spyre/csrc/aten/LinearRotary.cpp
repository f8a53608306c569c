// torch.ops.spyre.linear_rotary(x, weight, cos, sin) -> [B, L, H * D]: the q/k projection of a
// rotary-embedding attention, rotary(x @ weight^T) per head of D = cos.size(-1), i.e.
//   spyre::rotary(linear(x, weight).view(B, L, H, D).transpose(1, 2), cos, sin)
// with the result handed back in the projection's [B, L, H * D] layout (the caller's view and
// transpose then give the [B, H, L, D] the attention reads). torch.compile's pattern pass makes
// it (torch_spyre/_inductor/patterns.py); on spyre tensors it is one spyre_op_linear_rotary
// launch, the rotation in the matmul's epilogue; shapes the library refuses run the op by op.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

void check_shapes(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos) {
    TORCH_CHECK(x.dim() == 3 && weight.dim() == 2 && x.size(2) == weight.size(1),
                "spyre::linear_rotary: x must be [B, L, in] and weight [H * D, in], got ",
                x.sizes(), " and ", weight.sizes());
    TORCH_CHECK(cos.dim() >= 1 && cos.size(-1) > 0 && weight.size(0) % cos.size(-1) == 0,
                "spyre::linear_rotary: the head dim (cos's last, ", cos.sizes(),
                ") must divide the ", weight.size(0), " output features");
}

const c10::OperatorHandle& rotary_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("spyre::rotary", "");
    return op;
}

// The op by op form (any device): linear, then rotary over the [B, H, L, D] view.
at::Tensor linear_rotary_eager(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos,
                               const at::Tensor& sin) {
    check_shapes(x, weight, cos);
    const int64_t B = x.size(0), L = x.size(1), N = weight.size(0), D = cos.size(-1);
    const at::Tensor q = at::linear(x, weight).view({B, L, N / D, D}).transpose(1, 2);
    const at::Tensor r =
        rotary_op()
            .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>()
            .call(q, cos, sin);
    return r.transpose(1, 2).reshape({B, L, N});
}

bool library_operands(std::initializer_list<const at::Tensor*> ts) {
    const at::Tensor& first = **ts.begin();
    for (const at::Tensor* t : ts)
        if (!t->is_privateuseone() || !is_float(t->scalar_type()) || t->device() != first.device())
            return false;
    return true;
}

at::Tensor linear_rotary_spyre(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos,
                               const at::Tensor& sin) {
    check_shapes(x, weight, cos);
    const bool takes = library_operands({&x, &weight, &cos, &sin}) &&
                       weight.scalar_type() == x.scalar_type() &&
                       cos.scalar_type() == sin.scalar_type() && cos.sizes() == sin.sizes() &&
                       cos.strides() == sin.strides() && x.numel() > 0 && weight.size(0) > 0;
    if (takes) {
        c10::DeviceGuard guard(x.device());
        at::Tensor out = at::empty({x.size(0), x.size(1), weight.size(0)}, x.options());
        const spyre_tensor tx = op_tensor(x), tw = op_tensor(weight), tc = op_tensor(cos),
                           ts = op_tensor(sin), to = op_tensor(out);
        if (op_ran("spyre::linear_rotary",
                   spyre_op_linear_rotary(op_stream(out), &tx, &tw, &tc, &ts, &to)))
            return out;
    }
    return linear_rotary_eager(x, weight, cos, sin);
}

// Inference only (the pattern pass makes it only when no gradient is wanted; no backward):
// below autograd through the dispatcher, so that a traced graph keeps the op whole.
at::Tensor linear_rotary_below_autograd(const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& cos, const at::Tensor& sin) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("spyre::linear_rotary", "")
                               .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                                 const at::Tensor&, const at::Tensor&)>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(x, weight, cos, sin);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
    m.def("linear_rotary(Tensor x, Tensor weight, Tensor cos, Tensor sin) -> Tensor");
}

TORCH_LIBRARY_IMPL(spyre, CompositeExplicitAutograd, m) {
    m.impl("linear_rotary", TORCH_FN(linear_rotary_eager));
}
TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) {
    m.impl("linear_rotary", TORCH_FN(linear_rotary_spyre));
}
TORCH_LIBRARY_IMPL(spyre, Autograd, m) {
    m.impl("linear_rotary", TORCH_FN(linear_rotary_below_autograd));
}

}  // namespace torch_spyre::aten
