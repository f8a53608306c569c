// nn.CTCLoss (_ctc_loss and _ctc_loss_backward) on the card: the CPU's algorithm (LossCTC.cpp;
// Graves et al., "Connectionist Temporal Classification", 2006), the alpha and beta recursions in
// log space over the extended target (blanks between and around the labels), every batch item
// at once: one round of card ops per time step (the longest input's length of them), each
// item's own lengths as masks. log(e^a + e^b + e^c) with the max taken out as the CPU's loop
// does; the gradient's sum over the positions of each class a scatter of exponentials under
// that class's own maximum (a scatter_reduce amax), so no term is lost to underflow. fp32, as
// the CPU kernel (fp16/bf16 go to its error); targets padded [N, S] or concatenated 1-D, on the
// card. Lengths out of range, a blank or a label outside the classes (one host read) run on
// the CPU fallback, which gives the CPU's answer or error.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

constexpr double kNegInf = -INFINITY;

// log(e^a + e^b + e^c), the max taken out (0 when all three are -inf: the sum's log is -inf)
at::Tensor log_sum3(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
    at::Tensor m = at::maximum(at::maximum(a, b), c);
    m = at::where(m == kNegInf, 0.0, m);
    return at::log(at::exp(a - m) + at::exp(b - m) + at::exp(c - m)) + m;
}

// x moved k places along the last dim, -inf filling: towards higher s (k > 0) or lower (k < 0)
at::Tensor shifted(const at::Tensor& x, int64_t k) {
    const int64_t L = x.size(-1), a = std::abs(k);
    if (a >= L) return at::full_like(x, kNegInf);
    std::vector<int64_t> fill_shape(x.sizes().begin(), x.sizes().end());
    fill_shape.back() = a;
    const at::Tensor fill = at::full(fill_shape, kNegInf, x.options());
    return k > 0 ? at::cat({fill, x.narrow(-1, 0, L - a)}, -1)
                 : at::cat({x.narrow(-1, a, L - a), fill}, -1);
}

struct Ctc {
    at::Tensor lp;      // [T, N, C] fp32
    at::Tensor ext;     // [N, L] int64: the extended target (blank, l1, blank, l2, ..., blank)
    at::Tensor lpe;     // [T, N, L] the log-probabilities of the extended target
    at::Tensor skip;    // [N, L] bool: s may follow s - 2 (a label differing from the one before)
    at::Tensor il, tl;  // [N, 1] int64 on the card
    std::vector<int64_t> ilv, tlv;
    int64_t T, N, C, L, t_max;
};

std::optional<Ctc> ctc_setup(const at::Tensor& log_probs, const at::Tensor& targets,
                             at::IntArrayRef il, at::IntArrayRef tl, int64_t blank) {
    if (!log_probs.is_privateuseone() || log_probs.scalar_type() != at::kFloat ||
        log_probs.dim() != 3 || !targets.is_privateuseone() ||
        targets.device() != log_probs.device() ||
        !at::isIntegralType(targets.scalar_type(), /*includeBool=*/false) ||
        (targets.dim() != 1 && targets.dim() != 2))
        return std::nullopt;
    Ctc c;
    c.T = log_probs.size(0), c.N = log_probs.size(1), c.C = log_probs.size(2);
    if (c.N == 0 || c.T == 0 || c.C == 0 || blank < 0 || blank >= c.C ||
        static_cast<int64_t>(il.size()) != c.N || static_cast<int64_t>(tl.size()) != c.N)
        return std::nullopt;
    int64_t s_max = 0, total = 0;
    c.t_max = 0;
    for (int64_t n = 0; n < c.N; ++n) {
        if (il[n] < 0 || il[n] > c.T || tl[n] < 0) return std::nullopt;
        s_max = std::max(s_max, tl[n]);
        c.t_max = std::max(c.t_max, il[n]);
        total += tl[n];
    }
    if (targets.dim() == 2 ? (targets.size(0) != c.N || targets.size(1) < s_max)
                           : targets.numel() < total)
        return std::nullopt;
    c.ilv.assign(il.begin(), il.end());
    c.tlv.assign(tl.begin(), tl.end());
    c.L = 2 * s_max + 1;
    c10::DeviceGuard guard(log_probs.device());
    const at::TensorOptions cpu_long = at::TensorOptions().dtype(at::kLong);
    const at::Device card = log_probs.device();
    c.il = at::tensor(il, cpu_long).view({c.N, 1}).to(card);
    c.tl = at::tensor(tl, cpu_long).view({c.N, 1}).to(card);
    at::Tensor labels = at::full({c.N, s_max}, blank, log_probs.options().dtype(at::kLong));
    if (s_max > 0) {
        // each item's labels: their positions in the flat targets (host arithmetic), gathered
        std::vector<int64_t> pos(c.N * s_max, 0);
        std::vector<uint8_t> real(c.N * s_max, 0);
        int64_t offset = 0;
        for (int64_t n = 0; n < c.N; ++n) {
            const int64_t base = targets.dim() == 2 ? n * targets.size(1) : offset;
            for (int64_t j = 0; j < tl[n]; ++j)
                pos[n * s_max + j] = base + j, real[n * s_max + j] = 1;
            offset += tl[n];
        }
        const at::Tensor flat = targets.contiguous().view({-1}).to(at::kLong);
        const at::Tensor picked =
            flat.index_select(0, at::tensor(pos, cpu_long).to(card)).view({c.N, s_max});
        const at::Tensor is_real =
            at::tensor(std::vector<int64_t>(real.begin(), real.end()), cpu_long)
                .view({c.N, s_max})
                .to(card)
                .to(at::kBool);
        labels = at::where(is_real, picked, labels);
        if (((labels < 0).logical_or_(labels >= c.C)).any().item<bool>()) return std::nullopt;
    }
    const at::Tensor blanks = at::full({c.N, s_max}, blank, labels.options());
    c.ext = at::cat({at::stack({blanks, labels}, 2).view({c.N, 2 * s_max}),
                     at::full({c.N, 1}, blank, labels.options())},
                    1);
    c.lp = log_probs.contiguous();
    c.lpe = c.lp.gather(2, c.ext.unsqueeze(0).expand({c.T, c.N, c.L}).contiguous());
    const at::Tensor no =
        at::zeros({c.N, std::min<int64_t>(2, c.L)}, labels.options().dtype(at::kBool));
    c.skip =
        c.L > 2 ? at::cat({no, c.ext.narrow(1, 2, c.L - 2) != c.ext.narrow(1, 0, c.L - 2)}, 1) : no;
    return c;
}

// (neg_log_likelihood [N], log_alpha [N, T, L]); log_alpha past an item's input length is -inf
// (the CPU leaves it unset: no one reads it)
std::tuple<at::Tensor, at::Tensor> ctc_forward(const Ctc& c) {
    const at::Tensor col = at::arange(c.L, c.ext.options()).view({1, c.L});
    at::Tensor alpha =
        at::where((col == 0).logical_or((col == 1).logical_and(c.tl > 0)), c.lpe[0], kNegInf);
    std::vector<at::Tensor> alphas{alpha};
    at::Tensor last = at::where(c.il == 1, alpha, kNegInf);
    const at::Tensor skip_fill = at::full({c.N, c.L}, kNegInf, alpha.options());
    for (int64_t t = 1; t < c.t_max; ++t) {
        const at::Tensor from_two = at::where(c.skip, shifted(alpha, 2), skip_fill);
        const at::Tensor next = log_sum3(alpha, shifted(alpha, 1), from_two) + c.lpe[t];
        alpha = at::where(c.il > t, next, kNegInf);
        alphas.push_back(alpha);
        last = at::where(c.il == t + 1, alpha, last);
    }
    for (int64_t t = std::max<int64_t>(c.t_max, 1); t < c.T; ++t) alphas.push_back(skip_fill);
    // the likelihood: the last blank's and the last label's alphas added (the blank's alone for
    // an empty target)
    const at::Tensor end = (2 * c.tl).clamp_max(c.L - 1);
    const at::Tensor l1 = last.gather(1, end);
    const at::Tensor l2 = at::where(c.tl > 0, last.gather(1, (end - 1).clamp_min(0)), kNegInf);
    at::Tensor m = at::maximum(l1, l2);
    m = at::where(m == kNegInf, 0.0, m);
    at::Tensor ll = at::log(at::exp(l1 - m) + at::exp(l2 - m)) + m;
    // an empty input: 0 for an empty target, -inf otherwise
    ll = at::where(c.il == 0, at::where(c.tl == 0, 0.0, kNegInf), ll);
    return {(-ll).view({c.N}), at::stack(alphas, 1)};
}

at::Tensor ctc_backward(const Ctc& c, const at::Tensor& grad, const at::Tensor& nll,
                        const at::Tensor& log_alpha, bool zero_infinity) {
    const at::Tensor col = at::arange(c.L, c.ext.options()).view({1, c.L});
    const at::Tensor fill = at::full({c.N, c.L}, kNegInf, c.lp.options());
    const at::Tensor two_tl = 2 * c.tl;
    const at::Tensor init_at =
        (col == two_tl).logical_or((col == two_tl - 1).logical_and(c.tl > 0));
    const at::Tensor skip_up =
        c.L > 2 ? at::cat({c.skip.narrow(1, 2, c.L - 2), at::zeros({c.N, 2}, c.skip.options())}, 1)
                : at::zeros_like(c.skip);
    std::vector<at::Tensor> ab(c.T, fill);
    at::Tensor beta = fill;
    for (int64_t t = c.t_max - 1; t >= 0; --t) {
        const at::Tensor from_two = at::where(skip_up, shifted(beta, -2), fill);
        const at::Tensor rec = log_sum3(beta, shifted(beta, -1), from_two) + c.lpe[t];
        const at::Tensor init = at::where(init_at, c.lpe[t], kNegInf);
        beta = at::where(c.il == t + 1, init, at::where(c.il > t + 1, rec, kNegInf));
        ab[t] = log_alpha.select(1, t) + beta;
    }
    // per (t, n, class): log of the sum of e^(alpha + beta) over the positions of that class
    const at::Tensor lab = at::stack(ab, 0);  // [T, N, L]
    const at::Tensor idx = c.ext.unsqueeze(0).expand({c.T, c.N, c.L}).contiguous();
    const at::Tensor mc = at::full({c.T, c.N, c.C}, kNegInf, c.lp.options())
                              .scatter_reduce(2, idx, lab, "amax", /*include_self=*/true);
    const at::Tensor mc0 = at::where(mc == kNegInf, 0.0, mc);
    const at::Tensor e = at::exp(lab - mc0.gather(2, idx));
    const at::Tensor lcab =
        at::log(at::zeros({c.T, c.N, c.C}, c.lp.options()).scatter_add(2, idx, e)) + mc0;
    const at::Tensor nl = nll.view({1, c.N, 1}).to(at::kFloat);
    at::Tensor g = (at::exp(c.lp) - at::exp(lcab + nl - c.lp)) * grad.view({1, c.N, 1});
    // nothing past an item's input length; an infinite loss with zero_infinity gives 0
    const at::Tensor steps = at::arange(c.T, c.ext.options()).view({c.T, 1, 1});
    at::Tensor keep = steps < c.il.view({1, c.N, 1});
    if (zero_infinity) keep = keep.logical_and(nl != INFINITY);
    return at::where(keep, g, 0.0);
}

std::tuple<at::Tensor, at::Tensor> ctc_loss(const at::Tensor& log_probs, const at::Tensor& targets,
                                            at::IntArrayRef il, at::IntArrayRef tl, int64_t blank,
                                            bool zero_infinity) {
    if (auto c = ctc_setup(log_probs, targets, il, tl, blank)) {
        c10::DeviceGuard guard(log_probs.device());
        return ctc_forward(*c);
    }
    return fallback_to_cpu<ATEN_OP(_ctc_loss)>(log_probs, targets, il, tl, blank, zero_infinity);
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs,
                             const at::Tensor& targets, at::IntArrayRef il, at::IntArrayRef tl,
                             const at::Tensor& nll, const at::Tensor& log_alpha, int64_t blank,
                             bool zero_infinity) {
    const bool operands = grad.is_privateuseone() && grad.scalar_type() == at::kFloat &&
                          nll.is_privateuseone() && log_alpha.is_privateuseone() &&
                          log_alpha.scalar_type() == at::kFloat && log_alpha.dim() == 3;
    if (operands)
        if (auto c = ctc_setup(log_probs, targets, il, tl, blank)) {
            if (grad.numel() == c->N && nll.numel() == c->N && log_alpha.size(0) == c->N &&
                log_alpha.size(1) == c->T && log_alpha.size(2) == c->L) {
                c10::DeviceGuard guard(log_probs.device());
                return ctc_backward(*c, grad, nll, log_alpha, zero_infinity);
            }
        }
    return fallback_to_cpu<ATEN_OP(_ctc_loss_backward)>(grad, log_probs, targets, il, tl, nll,
                                                        log_alpha, blank, zero_infinity);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_ctc_loss", TORCH_FN(ctc_loss));
    m.impl("_ctc_loss_backward", TORCH_FN(ctc_loss_backward));
}

}  // namespace torch_spyre::aten
