// multinomial on the card, composed of device ops: the rows' cumulative sums in fp32
// (spyre_op_scan), one uniform per draw from the spyre generator (spyre_op_random) scaled by the
// row's total, and the count of cumulative sums <= that draw, which is the index of the first
// category whose cumulative sum exceeds it (categories of probability 0 are never drawn). The
// CPU's checks (finite, non-negative, a positive sum) cost one host read of a flag; an invalid
// input goes to the CPU fallback, which raises the CPU's error. Draws with replacement are
// independent; several draws without replacement are the CPU kernel's exponential race: the
// n largest of p / q for q ~ Exponential(1) per category (exponential_, div and topk on the
// card), in that order (a row with fewer than n categories of positive probability then gets
// categories of probability 0 too, as on the CPU, which does not refuse it).
// The card's stream of random numbers is not the CPU's, so the draws differ from the CPU's for
// one seed (as on every other device), with the same distribution.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <limits>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr int64_t kMaxElements = int64_t(1) << 24;  // draws x categories on the card

at::Tensor multinomial(const at::Tensor& self, int64_t n, bool replacement,
                       std::optional<at::Generator> gen) {
    if (self.is_privateuseone() && is_float(self.scalar_type()) &&
        (self.dim() == 1 || self.dim() == 2) && self.size(-1) > 0 && self.numel() > 0 && n > 0 &&
        n * self.numel() <= kMaxElements && (n == 1 || replacement || n <= self.size(-1))) {
        c10::DeviceGuard guard(self.device());
        const at::Tensor p = (self.dim() == 1 ? self.unsqueeze(0) : self).to(at::kFloat);
        const int64_t C = p.size(1);
        const at::Tensor cdf = p.cumsum(1);
        const at::Tensor total = cdf.narrow(1, C - 1, 1);
        // finite and non-negative (false for NaN), and a positive total per row
        const at::Tensor ok = p.ge(0)
                                  .bitwise_and(p.lt(std::numeric_limits<double>::infinity()))
                                  .all()
                                  .bitwise_and(total.gt(0).all());
        const bool race = n > 1 && !replacement;
        if (ok.item<bool>() && race) {
            const at::Tensor q = at::empty_like(p).exponential_(1.0, gen);
            const at::Tensor out = std::get<1>(at::topk(p / q, n, 1, true, true));
            return self.dim() == 1 ? out.squeeze(0) : out;
        }
        if (ok.item<bool>()) {
            // every draw against its own copy of its row's cumulative sums: [B * n, C] against
            // a column of draws (one broadcast compare, one count)
            const int64_t B = p.size(0);
            const at::Tensor rows =
                n == 1 ? cdf : cdf.unsqueeze(1).expand({B, n, C}).reshape({B * n, C});
            const at::Tensor tot = rows.narrow(1, C - 1, 1);
            const at::Tensor u = at::rand({B * n, 1}, gen, p.options()).mul(tot);
            // a draw rounded up to the total takes the last category of positive probability
            const at::Tensor last = rows.lt(tot).sum(1, true);
            const at::Tensor out = at::minimum(rows.le(u).sum(1, true), last).view({B, n});
            return self.dim() == 1 ? out.squeeze(0) : out;
        }
    }
    return fallback_to_cpu<ATEN_OP(multinomial)>(self, n, replacement, gen);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("multinomial", TORCH_FN(multinomial)); }

}  // namespace torch_spyre::aten
