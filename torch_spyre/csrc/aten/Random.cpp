// Random operators on the card (spyre_op_random, Philox4x32-10 in the cores' VRNG): uniform_,
// normal_, bernoulli_ (scalar and tensor p), bernoulli, exponential_ and native_dropout (and its
// backward), so
// rand/randn/rand_like/randn_like/dropout run there too. poisson is composed of uniform draws
// (the CPU's two samplers: Knuth's product of uniforms below rate 10, Hoermann's transformed
// rejection from 10 on), one draw of the whole tensor per round. Each launch takes (seed, offset)
// from the tensor's spyre generator (csrc/runtime/SpyreGenerator.h) and advances its offset; the
// values depend only on that state. Types the cores do not generate (float64, integers for
// uniform_/normal_) run on the CPU fallback with the CPU generator.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "../runtime/SpyreGenerator.h"
#include "Fallback.h"
#include "OpLibrary.h"

namespace torch_spyre::aten {
namespace {

using Gen = std::optional<at::Generator>;

// The CPU fallback cannot use a spyre generator: it draws from the CPU's default one.
Gen cpu_gen(const Gen& g) {
    return g.has_value() && g->defined() && g->device().is_privateuseone() ? std::nullopt : g;
}

// Runs one spyre_op_random launch into `self` (dense, or through a dense temporary), the
// (seed, offset) from gen. p: a dense probability tensor of self's shape for BERNOULLI, or
// undefined.
bool random_into(const char* aten_op, at::Tensor& self, spyre_random_dist dist, double a, double b,
                 const Gen& gen, const at::Tensor& p = at::Tensor(),
                 std::optional<std::pair<uint64_t, uint64_t>> stream = std::nullopt) {
    if (self.numel() == 0) return true;
    c10::DeviceGuard guard(self.device());
    // A graph's replays draw from the card's default generator (runtime/SpyreGraph.cpp): a
    // launch drawing from another generator would replay that one's stream
    if (gen.has_value() && gen->defined() &&
        *gen != default_generator(self.device().index())) {
        int capturing = 0;
        TORCH_CHECK(spyre_stream_is_capturing(op_stream(self), &capturing) != SPYRE_SUCCESS ||
                        !capturing,
                    "torch_spyre: ", aten_op, " with a generator of its own cannot be captured "
                    "into a graph: replays draw from the card's default generator "
                    "(torch.manual_seed); draw without `generator=` inside the graph");
    }
    const auto [seed, offset] = stream ? *stream : next_stream(gen, self.device().index());
    at::Tensor out = writable_output(self);
    const spyre_tensor o = op_tensor(out);
    spyre_tensor pt{};
    if (p.defined()) pt = op_tensor(p);
    if (!op_ran(aten_op, spyre_op_random(op_stream(out), dist, &o, seed, offset, a, b,
                                         p.defined() ? &pt : nullptr)))
        return false;
    finish_output(self, out);
    return true;
}

at::Tensor& uniform(at::Tensor& self, double from, double to, Gen gen) {
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
                " > to=", to);
    if (is_float(self.scalar_type()) && std::isfinite(from) && std::isfinite(to) &&
        random_into("aten::uniform_", self, SPYRE_RANDOM_UNIFORM, from, to, gen))
        return self;
    return fallback_to_cpu<ATEN_OP(uniform_)>(self, from, to, cpu_gen(gen));
}

at::Tensor& normal(at::Tensor& self, double mean, double std, Gen gen) {
    TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
    if (is_float(self.scalar_type()) && std::isfinite(mean) && std::isfinite(std) &&
        random_into("aten::normal_", self, SPYRE_RANDOM_NORMAL, mean, std, gen))
        return self;
    return fallback_to_cpu<ATEN_OP(normal_)>(self, mean, std, cpu_gen(gen));
}

// Float types and bool/int8/int32 masks take 1/0 from the cores.
bool bernoulli_type(at::ScalarType t) {
    return is_float(t) || t == at::kBool || t == at::kChar || t == at::kInt;
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, Gen gen) {
    TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
    if (bernoulli_type(self.scalar_type()) &&
        random_into("aten::bernoulli_.float", self, SPYRE_RANDOM_BERNOULLI, p, 0, gen))
        return self;
    return fallback_to_cpu<ATEN_OP2(bernoulli_, float)>(self, p, cpu_gen(gen));
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, Gen gen) {
    if (bernoulli_type(self.scalar_type()) && p.is_privateuseone() && p.device() == self.device() &&
        is_float(p.scalar_type()) && at::infer_size(self.sizes(), p.sizes()) == self.sizes()) {
        // p broadcast to self's shape and made dense on the card
        const auto pd = stick_dense(p.expand(self.sizes()), "aten::bernoulli_.Tensor");
        if (pd &&
            random_into("aten::bernoulli_.Tensor", self, SPYRE_RANDOM_BERNOULLI, 0, 0, gen, *pd))
            return self;
    }
    return fallback_to_cpu<ATEN_OP2(bernoulli_, Tensor)>(self, p, cpu_gen(gen));
}

// torch.bernoulli(p): a tensor like p of 0/1 drawn with probabilities p.
at::Tensor bernoulli(const at::Tensor& p, Gen gen) {
    at::Tensor out = at::empty_like(p, at::MemoryFormat::Contiguous);
    bernoulli_tensor(out, p, gen);
    return out;
}

// exponential(lambda) = -log(1 - u) / lambda with u uniform in [0, 1): 1 - u is in (0, 1], so
// the log is finite. The uniform is made on the cores, the rest by the card's elementwise ops.
at::Tensor& exponential(at::Tensor& self, double lambd, Gen gen) {
    TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
    if (is_float(self.scalar_type()) && std::isfinite(lambd) && self.numel() > 0) {
        at::Tensor u = at::empty(self.sizes(), self.options());
        if (random_into("aten::exponential_", u, SPYRE_RANDOM_UNIFORM, 0, 1, gen)) {
            self.copy_(at::rsub(u, 1).log_().mul_(-1.0 / lambd));
            return self;
        }
    }
    if (self.numel() == 0) return self;
    return fallback_to_cpu<ATEN_OP(exponential_)>(self, lambd, cpu_gen(gen));
}

// Dropout: keep an element with probability 1 - p and scale it by 1 / (1 - p). The mask in
// the input's type and the bool mask are two launches of one (seed, offset): the same
// uniforms, so they agree element by element.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
    const bool training = !train.has_value() || *train;
    if (!training || input.numel() == 0) {
        return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
    }
    TORCH_CHECK(0 <= p && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
    if (is_float(input.scalar_type())) {
        c10::DeviceGuard guard(input.device());
        const double keep = 1.0 - p, scale = keep == 0.0 ? 0.0 : 1.0 / keep;
        const auto stream = next_stream(std::nullopt, input.device().index());
        at::Tensor maskf = at::empty(input.sizes(), input.options());
        at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
        if (random_into("aten::native_dropout", maskf, SPYRE_RANDOM_BERNOULLI, keep, 0,
                        std::nullopt, at::Tensor(), stream) &&
            random_into("aten::native_dropout", mask, SPYRE_RANDOM_BERNOULLI, keep, 0, std::nullopt,
                        at::Tensor(), stream))
            return {input.mul(maskf).mul_(scale), mask};
    }
    return fallback_to_cpu<ATEN_OP(native_dropout)>(input, p, train);
}

// 24 random bits per element as int64 in [0, 2^24): a uniform fp32 draw (VRNG: the top 24 bits
// of a Philox word times 2^-24) scaled back, exactly.
std::optional<at::Tensor> random_bits24(const char* aten_op, at::IntArrayRef shape,
                                        const at::TensorOptions& opts, const Gen& gen) {
    at::Tensor u = at::empty(shape, opts.dtype(at::kFloat));
    if (!random_into(aten_op, u, SPYRE_RANDOM_UNIFORM, 0.0, 1.0, gen)) return std::nullopt;
    return u.mul_(double(int64_t{1} << 24)).to(at::kLong);
}

constexpr int64_t kMaxRandomRange = int64_t{1} << 24;
constexpr int64_t kMaxWideRandomRange = int64_t{1} << 48;

// random_(from, to): from + floor(k * range / 2^24) for 24 random bits k (multiply-shift in int64
// on the card, exact), so each value of [from, to) has probability 1/range to within
// range / 2^24 (the CPU's `random() % range` is biased likewise). Ranges above 2^24 (up to
// 2^48) take 48 random bits k = hi 2^24 + lo and floor(k * range / 2^48) from the four 24 x 24
// bit partial products (each below 2^48: exact in int64). Wider ranges and types the card does
// not hold run on the CPU fallback.
bool random_range(const char* aten_op, at::Tensor& self, int64_t from, int64_t range,
                  const Gen& gen) {
    const at::ScalarType t = self.scalar_type();
    if (!self.is_privateuseone() || range <= 0 || range > kMaxWideRandomRange ||
        !(is_float(t) || t == at::kLong || t == at::kInt || t == at::kChar || t == at::kByte))
        return false;
    if (self.numel() == 0) return true;
    c10::DeviceGuard guard(self.device());
    const auto k = random_bits24(aten_op, self.sizes(), self.options(), gen);
    if (!k) return false;
    if (range <= kMaxRandomRange) {
        self.copy_(k->mul_(range).bitwise_right_shift_(24).add_(from));
        return true;
    }
    const auto lo = random_bits24(aten_op, self.sizes(), self.options(), gen);
    if (!lo) return false;
    const at::Tensor& hi = *k;
    const int64_t rh = range >> 24, rl = range & (kMaxRandomRange - 1);
    // floor((hi 2^24 + lo)(rh 2^24 + rl) / 2^48) = hi rh + floor((hi rl + lo rh +
    // floor(lo rl / 2^24)) / 2^24): the dropped fractions never carry into a whole unit
    const at::Tensor mid = (*lo * rl).bitwise_right_shift_(24).add_(hi * rl).add_(*lo * rh);
    self.copy_(mid.bitwise_right_shift_(24).add_(hi * rh).add_(from));
    return true;
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, Gen gen) {
    if (to && *to > from && random_range("aten::random_.from", self, from, *to - from, gen))
        return self;
    return fallback_to_cpu<ATEN_OP2(random_, from)>(self, from, to, cpu_gen(gen));
}

at::Tensor& random_to(at::Tensor& self, int64_t to, Gen gen) {
    if (to > 0 && random_range("aten::random_.to", self, 0, to, gen)) return self;
    return fallback_to_cpu<ATEN_OP2(random_, to)>(self, to, cpu_gen(gen));
}

// randperm(n): the positions sorted by 48-bit random keys (two 24-bit draws; a stable sort,
// so the rare equal keys keep their order) on the card.
at::Tensor& randperm_out(int64_t n, Gen gen, at::Tensor& out) {
    TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
    if (out.is_privateuseone() && n > 0 && n <= kMaxRandomRange &&
        (out.scalar_type() == at::kLong || out.scalar_type() == at::kInt)) {
        c10::DeviceGuard guard(out.device());
        const auto hi = random_bits24("aten::randperm", {n}, out.options(), gen);
        const auto lo = hi ? random_bits24("aten::randperm", {n}, out.options(), gen) : hi;
        if (lo) {
            const at::Tensor keys = hi->bitwise_left_shift_(24).bitwise_or_(*lo);
            at::native::resize_output(out, {n});
            out.copy_(at::argsort(keys, /*stable=*/true));
            return out;
        }
    }
    return fallback_to_cpu<ATEN_OP2(randperm, generator_out)>(n, cpu_gen(gen), out);
}

// Dropout's gradient: grad * mask * scale (the bool mask converted to grad's type on the card).
at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
    if (grad.is_privateuseone() && mask.is_privateuseone() && is_float(grad.scalar_type()) &&
        mask.scalar_type() == at::kBool) {
        c10::DeviceGuard guard(grad.device());
        return grad.mul(mask.to(grad.scalar_type())).mul_(scale);
    }
    return fallback_to_cpu<ATEN_OP(native_dropout_backward)>(grad, mask, scale);
}

// -lambda + k log(lambda) - lgamma(k + 1), PTRS's log acceptance bound, in fp32: for k >= 10
// through Stirling's series, k log1p((lambda - k) / k) + k - lambda - log(2 pi k) / 2 - (1/(12k)
// - 1/(360k^3) + 1/(1260k^5)), which keeps the digits the direct form loses to cancellation
// (k log(lambda) and lgamma(k + 1) both near lambda log(lambda)); below 10 the direct form.
at::Tensor log_poisson_bound(const at::Tensor& lam, const at::Tensor& k) {
    const at::Tensor kk = at::clamp_min(k, 1.0);  // k < 0 is rejected before this counts
    const at::Tensor r = 1 / kk, r2 = r * r;
    const at::Tensor series = r * ((r2 * (1.0 / 1260) - 1.0 / 360) * r2 + 1.0 / 12);
    const at::Tensor far =
        kk * at::log1p((lam - kk) / kk) + (kk - lam) - 0.5 * at::log(kk * (2 * M_PI)) - series;
    const at::Tensor near = -lam + k * at::log(lam) - at::lgamma(k + 1);
    return at::where(k >= 10, far, near);
}

// torch.poisson: the CPU's sample_poisson on every element, all elements drawing together.
// Below rate 10 the count of uniforms whose running product stays above exp(-rate) (a round:
// one uniform per element, until no element's product is above; rate 0, negative or NaN: 0);
// from 10 on Hoermann's PTRS (W. Hoermann, "The transformed rejection method for generating
// Poisson random variables", 1993): a round draws u, v per element and accepts as the CPU's
// loop does, until every element has accepted. One host read per round. fp32 (16-bit rates
// drawn in fp32, the counts rounded to the type as the CPU stores them).
at::Tensor poisson(const at::Tensor& rates, Gen gen) {
    const bool card_gen = !gen.has_value() || !gen->defined() || gen->device().is_privateuseone();
    if (!rates.is_privateuseone() || !is_float(rates.scalar_type()) || !card_gen)
        return fallback_to_cpu<ATEN_OP(poisson)>(rates, cpu_gen(gen));
    c10::DeviceGuard guard(rates.device());
    const at::Tensor lam = rates.to(at::kFloat).contiguous();
    if (lam.numel() == 0) return at::empty_like(rates);
    const auto uniform = [&] { return at::empty_like(lam).uniform_(0.0, 1.0, gen); };
    at::Tensor count = at::zeros_like(lam);
    // Knuth
    const at::Tensor limit = at::exp(-lam);
    at::Tensor prod = at::ones_like(lam);
    at::Tensor active = lam < 10;
    while (active.any().item<bool>()) {
        prod = at::where(active, prod * uniform(), prod);
        active = active.logical_and(prod > limit);
        count = count + active.to(at::kFloat);
    }
    // PTRS
    at::Tensor pending = lam >= 10;
    if (pending.any().item<bool>()) {
        const at::Tensor big = at::where(pending, lam, 10.0);  // no NaN in the others' lanes
        const at::Tensor b = 0.931 + 2.53 * at::sqrt(big);
        const at::Tensor a = -0.059 + 0.02483 * b;
        const at::Tensor log_invalpha = at::log(1.1239 + 1.1328 / (b - 3.4));
        const at::Tensor vr = 0.9277 - 3.6224 / (b - 2);
        at::Tensor k_of = at::zeros_like(lam);
        do {
            const at::Tensor u = uniform() - 0.5, v = uniform();
            const at::Tensor us = 0.5 - at::abs(u);
            const at::Tensor k = at::floor((2 * a / us + b) * u + big + 0.43);
            const at::Tensor quick = (us >= 0.07).logical_and(v <= vr);
            const at::Tensor refused = (k < 0).logical_or((us < 0.013).logical_and(v > us));
            const at::Tensor bound = at::log(v) + log_invalpha - at::log(a / (us * us) + b);
            const at::Tensor accept = pending.logical_and(quick.logical_or(
                refused.logical_not().logical_and(bound <= log_poisson_bound(big, k))));
            k_of = at::where(accept, k, k_of);
            pending = pending.logical_and(accept.logical_not());
        } while (pending.any().item<bool>());
        count = at::where(lam >= 10, k_of, count);
    }
    return count.to(rates.scalar_type()).reshape(rates.sizes());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
    m.impl("random_.from", TORCH_FN(random_from));
    m.impl("random_.to", TORCH_FN(random_to));
    m.impl("randperm.generator_out", TORCH_FN(randperm_out));
    m.impl("uniform_", TORCH_FN(uniform));
    m.impl("normal_", TORCH_FN(normal));
    m.impl("bernoulli_.float", TORCH_FN(bernoulli_float));
    m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor));
    m.impl("bernoulli", TORCH_FN(bernoulli));
    m.impl("exponential_", TORCH_FN(exponential));
    m.impl("native_dropout", TORCH_FN(native_dropout));
    m.impl("poisson", TORCH_FN(poisson));
}

}  // namespace torch_spyre::aten
