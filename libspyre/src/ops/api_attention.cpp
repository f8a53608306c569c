// SPDX-License-Identifier: MIT
// C API of attention (spyre_op_attention): the planned flash-attention program
// (ops/attention_program.hpp) on strided [B, H, L, D] tensors.
#include "ops/api_common.hpp"
#include "ops/attention_program.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {
namespace {

std::shared_ptr<const PlanEntry> attention_plan(const Card& c, const AttentionShape& s) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    std::string key = std::format("attn/{} B{} H{}/{} L{}x{} D{} t{} c{} s{}", config_key(cfg), s.B,
                                  s.Hq, s.Hkv, s.Lq, s.Lk, s.D, int(s.t), s.causal, s.scale);
    for (const uint64_t* st : {s.q_st, s.k_st, s.v_st, s.o_st})
        key += std::format(" {},{},{}", st[0], st[1], st[2]);
    return cached_plan(key, [&] {
        const Pricer pricer(cfg);
        const AttentionPlan p = plan_attention(pricer, s, cfg.num_cores);
        PlanEntry e;
        e.image = build_attention(s, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = std::format("q block {} x {} heads, key block {}, {} cores", p.bq, s.Hq / s.Hkv,
                             p.bk, p.cores);
        return e;
    });
}

void attention_impl(spyre_stream_t stream, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& o, bool causal, float scale) {
    for (const Tensor* t : {&q, &k, &v, &o}) {
        require(
            t->shape.size() == 4,
            std::format("attention: `{}` must be 4-D [batch, heads, length, head_dim]", t->name));
        require(t->t == q.t, std::format("attention: `{}` is {} but `q` is {}", t->name,
                                         dtype_name(int(t->t)), dtype_name(int(q.t))));
    }
    require(float_type(q.t), "attention: float32, float16 or bfloat16 tensors");
    const int64_t B = q.dim(0), Hq = q.dim(1), Lq = q.dim(2), D = q.dim(3);
    const int64_t Hkv = k.dim(1), Lk = k.dim(2);
    require(k.dim(0) == B && v.dim(0) == B && k.dim(3) == D && v.dim(3) == D && v.dim(1) == Hkv &&
                v.dim(2) == Lk,
            std::format("attention: k and v must be [{}, Hkv, Lk, {}] alike", B, D));
    require(o.dim(0) == B && o.dim(1) == Hq && o.dim(2) == Lq && o.dim(3) == D,
            std::format("attention: `out` must be [{}, {}, {}, {}]", B, Hq, Lq, D));
    require(Hkv > 0 && Hq % Hkv == 0,
            std::format("attention: {} query heads are not a multiple of {} kv heads", Hq, Hkv));
    const Card c = card_of(o.buffer);
    require_same_card(c, {&q, &k, &v}, "attention");
    if (B == 0 || Hq == 0 || Lq == 0 || D == 0) return;
    require(Lk > 0, "attention: no keys (Lk = 0)");
    AttentionShape s;
    s.B = B, s.Hq = Hq, s.Hkv = Hkv, s.Lq = Lq, s.Lk = Lk, s.D = D;
    s.t = q.t, s.causal = causal, s.scale = scale;
    auto strides = [&](const Tensor& t, uint64_t* st) {
        if (t.stride(3) != 1 || t.addr % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 std::format("attention: `{}` needs contiguous head rows starting 128-byte "
                             "aligned (make it contiguous first)",
                             t.name));
        // a size-1 dim's stride is never used (its index is 0)
        for (int d = 0; d < 3; ++d) st[d] = t.dim(d) == 1 ? 0 : uint64_t(t.stride(d)) * t.es;
    };
    strides(q, s.q_st), strides(k, s.k_st), strides(v, s.v_st), strides(o, s.o_st);
    auto plan = attention_plan(c, s);
    launch(c, plan, stream, {q.addr, k.addr, v.addr, o.addr},
           {q.buffer, k.buffer, v.buffer, o.buffer});
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_attention(spyre_stream_t stream, const spyre_tensor* q, const spyre_tensor* k,
                                const spyre_tensor* v, const spyre_tensor* out, int causal,
                                float scale) {
    return guard(__func__, [&] {
        begin_op("attention");
        attention_impl(stream, check_tensor(q, "q"), check_tensor(k, "k"), check_tensor(v, "v"),
                       check_tensor(out, "out"), causal != 0, scale);
    });
}
