// SPDX-License-Identifier: MIT
// C API of the rotary embedding (spyre_op_rotary): ops/rotary_program.hpp on strided tensors.
#include "ops/api_common.hpp"
#include "ops/pricing.hpp"
#include "ops/rotary_program.hpp"

namespace spyre::ops {
namespace {

void rotary_impl(spyre_stream_t stream, const Tensor& x, const Tensor& cs, const Tensor& sn,
                 const Tensor& o) {
    require(x.shape.size() == 4 && o.shape == x.shape,
            "rotary: `x` and `out` must be 4-D [batch, heads, length, head_dim] of one shape");
    require(float_type(x.t) && o.t == x.t, "rotary: `x` and `out` must be one floating type");
    const int64_t B = x.dim(0), H = x.dim(1), L = x.dim(2), D = x.dim(3);
    // cos/sin [L, D], [B, L, D] or [B, 1, L, D] (batch 1 = shared)
    RotaryShape s;
    s.B = B, s.H = H, s.L = L, s.D = D, s.t = x.t, s.ct = cs.t;
    auto table = [&](const Tensor& t, uint64_t* st) {
        require(float_type(t.t) && t.t == cs.t,
                "rotary: `cos` and `sin` must be one floating type");
        std::vector<int64_t> sh = t.shape, sd = t.strides;
        if (sh.size() == 4 && sh[1] == 1) sh.erase(sh.begin() + 1), sd.erase(sd.begin() + 1);
        if (sh.size() == 2) sh.insert(sh.begin(), 1), sd.insert(sd.begin(), 0);
        require(sh.size() == 3 && (sh[0] == B || sh[0] == 1) && sh[1] == L && sh[2] == D,
                "rotary: `{}` must be [{}, {}], [{} or 1, {}, {}] or [{} or 1, 1, "
                "{}, {}]",
                t.name, L, D, B, L, D, B, L, D);
        if (sd[2] != 1 || t.addr % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("rotary: `{}` needs contiguous rows starting 128-byte aligned",
                             t.name));
        st[0] = sh[0] == 1 ? 0 : uint64_t(sd[0]) * t.es;
        st[1] = L == 1 ? 0 : uint64_t(sd[1]) * t.es;
        if (!st[0] && !st[1]) st[1] = up(uint64_t(D) * t.es, kStick);  // one row: any stride
    };
    uint64_t sst[2];
    table(cs, s.c_st);
    table(sn, sst);
    require(sst[0] == s.c_st[0] && sst[1] == s.c_st[1],
            "rotary: `cos` and `sin` must have the same strides");
    auto strides = [&](const Tensor& t, uint64_t* st) {
        if (t.stride(3) != 1 || t.addr % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("rotary: `{}` needs contiguous head rows starting 128-byte aligned",
                             t.name));
        for (int d = 0; d < 3; ++d) st[d] = t.dim(d) == 1 ? 0 : uint64_t(t.stride(d)) * t.es;
        if (!st[0] && !st[1] && !st[2]) st[2] = up(uint64_t(D) * t.es, kStick);
    };
    strides(x, s.x_st), strides(o, s.o_st);
    const Card c = card_of(o.buffer);
    require_same_card(c, {&x, &cs, &sn}, "rotary");
    if (B == 0 || H == 0 || L == 0 || D == 0) return;
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("rope", cfg);
    key.add(B, H, L, D, s.t, s.ct);
    for (const uint64_t* st : {s.x_st, s.o_st}) key.add(st[0], st[1], st[2]);
    key.add(s.c_st[0], s.c_st[1]);
    auto plan = cached_plan(key.str(), [&] {
        const Pricer pricer(cfg);
        const RotaryPlan p = plan_rotary(pricer, s, cfg.num_cores);
        PlanEntry e;
        e.image = build_rotary(s, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = std::format("{} positions per unit, {} cores", p.bl, p.cores);
        return e;
    });
    launch(c, plan, stream, {x.addr, cs.addr, sn.addr, o.addr},
           {x.buffer, cs.buffer, sn.buffer, o.buffer});
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_rotary(spyre_stream_t stream, const spyre_tensor* x, const spyre_tensor* cos,
                             const spyre_tensor* sin, const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("rotary");
        rotary_impl(stream, check_tensor(x, "x"), check_tensor(cos, "cos"),
                    check_tensor(sin, "sin"), check_tensor(out, "out"));
    });
}
