// torch.isin on the card: every element compared with the test elements (torch's own
// brute-force kernel, as the CPU and CUDA take it for small test sets), chunk by chunk of the
// test elements so that one comparison holds at most kPairs booleans. NaN is in nothing (==).
// Elements and test elements of different dtypes run on the CPU fallback (torch promotes).
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr int64_t kPairs = int64_t{1} << 22;

bool on_card(const at::Tensor& t) {
    return t.is_privateuseone() && op_dtype(t.scalar_type()).has_value();
}

at::Tensor& isin_out(const at::Tensor& elements, const at::Tensor& test, bool assume_unique,
                     bool invert, at::Tensor& out) {
    if (on_card(elements) && on_card(test) && elements.scalar_type() == test.scalar_type() &&
        out.scalar_type() == at::kBool && out.is_privateuseone()) {
        c10::DeviceGuard guard(elements.device());
        at::native::resize_output(out, elements.sizes());
        if (out.numel() == 0) return out;
        const int64_t n = elements.numel(), t = test.numel();
        const at::Tensor e = elements.reshape({n, 1}), tests = test.reshape({1, t});
        at::Tensor hits = at::zeros({n}, out.options());
        const int64_t chunk = std::max<int64_t>(1, kPairs / n);
        for (int64_t begin = 0; begin < t; begin += chunk) {
            const at::Tensor h =
                at::eq(e, tests.narrow(1, begin, std::min(chunk, t - begin))).any(1);
            hits = at::bitwise_or(hits, h);
        }
        out.copy_((invert ? at::bitwise_not(hits) : hits).view(elements.sizes()));
        return out;
    }
    return fallback_to_cpu<ATEN_OP2(isin, Tensor_Tensor_out)>(elements, test, assume_unique, invert,
                                                              out);
}

at::Tensor isin(const at::Tensor& elements, const at::Tensor& test, bool assume_unique,
                bool invert) {
    at::Tensor out = at::empty({0}, elements.options().dtype(at::kBool));
    return isin_out(elements, test, assume_unique, invert, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("isin.Tensor_Tensor_out", TORCH_FN(isin_out));
    m.impl("isin.Tensor_Tensor", TORCH_FN(isin));
}

}  // namespace torch_spyre::aten
