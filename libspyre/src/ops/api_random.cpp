// SPDX-License-Identifier: MIT
// C API of spyre_op_random: checks, the plan (cached by distribution, size, types and the
// static scale/shift/p), and the launch with seed and offset as run-time arguments.
#include <cmath>

#include "ops/api_common.hpp"
#include "ops/pricing.hpp"
#include "ops/random_program.hpp"

using namespace spyre;
using namespace spyre::ops;

namespace {

const char* dist_name(spyre_random_dist d) {
    switch (d) {
        case SPYRE_RANDOM_UNIFORM:
            return "random_uniform";
        case SPYRE_RANDOM_NORMAL:
            return "random_normal";
        case SPYRE_RANDOM_BITS:
            return "random_bits";
        case SPYRE_RANDOM_BERNOULLI:
            return "random_bernoulli";
    }
    return "random";
}

}  // namespace

spyre_status spyre_op_random(spyre_stream_t stream, spyre_random_dist dist, const spyre_tensor* out,
                             uint64_t seed, uint64_t offset, double a, double b,
                             const spyre_tensor* p) {
    return guard(__func__, [&] {
        require(dist >= SPYRE_RANDOM_UNIFORM && dist <= SPYRE_RANDOM_BERNOULLI,
                "random: unknown distribution {}", int(dist));
        const char* name = dist_name(dist);
        begin_op(name);
        const Tensor to = check_tensor(out, "out");
        RandShape s;
        s.dist = static_cast<RandDist>(dist);
        s.n = static_cast<uint64_t>(to.numel());
        s.out = to.t;
        switch (dist) {
            case SPYRE_RANDOM_UNIFORM:
            case SPYRE_RANDOM_NORMAL:
                require(to.t != isa::DType::COUNT && float_type(to.t),
                        "{}: `out` must be fp32, fp16 or bf16, not {}", name,
                        dtype_name(out->dtype));
                require(std::isfinite(a) && std::isfinite(b), "{}: bounds must be finite", name);
                if (dist == SPYRE_RANDOM_UNIFORM)
                    s.scale = float(b - a), s.shift = float(a);
                else
                    s.scale = float(b), s.shift = float(a);
                break;
            case SPYRE_RANDOM_BITS:
                require(to.t == isa::DType::I32, "{}: `out` must be int32, not {}", name,
                        dtype_name(out->dtype));
                break;
            case SPYRE_RANDOM_BERNOULLI:
                require(to.t != isa::DType::COUNT, "{}: `out` must not be int64", name);
                if (!p) {
                    require(a >= 0.0 && a <= 1.0, "{}: p = {} is not in [0, 1]", name, a);
                    s.p = float(a);
                }
                break;
        }
        require(dist == SPYRE_RANDOM_BERNOULLI || !p, "{}: `p` is for BERNOULLI only", name);
        Tensor tp{};
        if (p) {
            tp = check_tensor(p, "p");
            require(tp.t != isa::DType::COUNT && float_type(tp.t),
                    "{}: `p` must be fp32, fp16 or bf16", name);
            require(tp.shape == to.shape, "{}: `p` must have out's shape", name);
            if (!is_dense(tp) || tp.addr % kStick)
                fail(SPYRE_ERROR_NOT_SUPPORTED,
                     std::format("{}: `p` must be dense and start 128-byte aligned", name));
            s.p_tensor = true, s.p_t = tp.t;
        }
        if (!is_dense(to) || to.addr % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("{}: `out` must be dense and start 128-byte aligned", name));
        const Card c = card_of(to.buffer);
        require_same_card(c, {p ? &tp : nullptr}, name);
        if (s.n == 0) return;
        const spyre_engine_config cfg = engine_config_of(c.info);
        PlanKey key("random", cfg);
        key.add(s.dist, s.n, s.out, s.scale, s.shift, s.p, s.p_tensor, s.p_t);
        auto plan = cached_plan(key.str(), [&] {
            const Pricer pricer(cfg);
            const RandPlan rp = plan_random(pricer, s, cfg.num_cores);
            PlanEntry e;
            e.image = build_random(s, rp);
            e.cores = rp.cores;
            e.cycles = rp.cycles;
            e.plan = random_plan_name(rp);
            return e;
        });
        launch(c, plan, stream, {to.addr, seed, offset, p ? tp.addr : 0},
               {to.buffer, p ? tp.buffer : nullptr}, std::nullopt, /*random_arg=*/1);
        finish_info(c, *plan);
    });
}
