// SPDX-License-Identifier: MIT
// C API of attention (spyre_op_attention, spyre_op_attention_masked, spyre_op_attention_lse,
// spyre_op_attention_backward): the planned flash-attention program
// (ops/attention_program.hpp) on strided [B, H, L, D] tensors, with an optional additive or
// boolean mask read in place or re-laid into stick rows by the pad program, and its backward
// (ops/attention_backward_program.hpp) from the forward's logsumexp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <format>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "ops/api_common.hpp"
#include "ops/attention_backward_program.hpp"
#include "ops/attention_program.hpp"
#include "ops/layout_plans.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {
namespace {

// Decode (Lq 1) takes its key length, and the batch and head strides of K and V, as launch
// arguments: one plan and program serve a bucket of lengths (up to 64, then each power of two,
// 2^(k-1) + 1 .. 2^k), so a decode step at a new length reuses the plan, the loaded program
// and the engine's decoded copy instead of planning, building, uploading and decoding anew
// (ops.md "Attention plans across key lengths", attention_length_bucket). A bucket's blocks are
// chosen by their prices at five of its lengths; the modeled cycles reported for a length are
// interpolated between prices of its program at kLengthPoints lengths of the bucket.

// The modeled cycles of each bucket's program across its lengths, by plan key (a plan read
// from the program cache on disk is priced once per process), and the buckets whose longest
// length is more work than one launch may do (their lengths plan one by one, as before).
struct Prices {
    std::mutex mu;
    std::map<std::string, LengthPrices> by_key;
    std::set<std::string> too_large;
};
Prices& prices() {
    static Prices* p = new Prices;  // never destroyed, like the plan cache
    return *p;
}

// The shape a bucket's program is planned and priced with: key length Lk, the K and V strides
// of this call.
AttentionShape bucket_shape(const AttentionShape& s, uint64_t Lk) {
    AttentionShape r = s;
    r.runtime_lk = true;
    r.Lk = Lk;
    return r;
}

void add_strides(PlanKey& key, const AttentionShape& s) {
    for (const uint64_t* st : {s.q_st, s.o_st, s.m_st}) key.add(st[0], st[1], st[2]);
    key.add(s.lse, s.l_st[0], s.l_st[1]);
}

std::string plan_text(const AttentionShape& s, const AttentionPlan& p) {
    return std::format("q block {} x {} heads, key block {}, {} cores{}{}", p.bq, s.Hq / s.Hkv,
                       p.bk, p.cores,
                       s.mask == AttentionShape::Mask::NONE  ? ""
                       : s.mask == AttentionShape::Mask::ADD ? ", additive mask"
                                                             : ", boolean mask",
                       s.lse ? ", logsumexp" : "");
}

struct AttentionLaunch {
    std::shared_ptr<const PlanEntry> plan;
    std::vector<uint64_t> extra_args;  // after the six addresses
    std::optional<uint64_t> cycles;    // modeled, when not the plan's
};

AttentionLaunch attention_plan(const Card& c, const AttentionShape& s) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    auto per_length = [&]() -> AttentionLaunch {
        PlanKey key("attn", cfg);
        key.add(s.B, s.Hq, s.Hkv, s.Lq, s.Lk, s.D, s.t, s.causal, s.scale, s.mask, s.mask_t);
        for (const uint64_t* st : {s.k_st, s.v_st}) key.add(st[0], st[1], st[2]);
        add_strides(key, s);
        return {cached_plan(key.str(),
                            [&] {
                                const Pricer pricer(cfg);
                                const AttentionPlan p = plan_attention(pricer, s, cfg.num_cores);
                                return PlanEntry{0, build_attention(s, p), p.cores, p.cycles,
                                                 plan_text(s, p)};
                            }),
                {},
                std::nullopt};
    };
    if (s.Lq != 1 || s.causal) return per_length();
    // K and V strides are arguments: a program only needs them whole sticks
    for (const uint64_t* st : {s.k_st, s.v_st})
        if (st[0] % kStick || st[1] % kStick)
            fail(SPYRE_ERROR_NOT_SUPPORTED,
                 "attention: batch, head and position strides must be multiples of 128 bytes");
    const LengthBucket bk = attention_length_bucket(s.Lk);
    PlanKey key("attn-len", cfg);
    key.add(s.B, s.Hq, s.Hkv, s.Lq, bk.hi, s.D, s.t, s.scale, s.mask, s.mask_t, s.k_st[2],
            s.v_st[2]);
    add_strides(key, s);
    LengthPrices pts;
    {
        std::lock_guard lock(prices().mu);
        if (prices().too_large.contains(key.str())) return per_length();
        if (auto it = prices().by_key.find(key.str()); it != prices().by_key.end())
            pts = it->second;
    }
    std::shared_ptr<const PlanEntry> plan;
    try {
        plan = cached_plan(key.str(), [&] {
            const Pricer pricer(cfg);
            const AttentionShape top = bucket_shape(s, bk.hi);
            const AttentionPlan p = plan_attention_lengths(pricer, top, bk.lo, cfg.num_cores);
            return PlanEntry{0, build_attention(top, p), p.cores, p.cycles,
                             plan_text(s, p) + std::format(", keys {}..{}", bk.lo, bk.hi)};
        });
    } catch (const Error& e) {
        // the bucket's longest length past the engine's budget for one job (JobTooLarge):
        // shorter ones may fit
        if (e.status() != SPYRE_ERROR_NOT_SUPPORTED) throw;
        std::lock_guard lock(prices().mu);
        prices().too_large.insert(key.str());
        return per_length();
    }
    if (pts.empty()) {  // once per bucket and process
        const Pricer pricer(cfg);
        pts = price_attention_lengths(pricer, plan->image, plan->cores, bucket_shape(s, bk.hi),
                                      bk.lo, bk.hi);
        std::lock_guard lock(prices().mu);
        prices().by_key.insert_or_assign(key.str(), pts);
    }
    const uint64_t cycles = interpolate_cycles(pts, s.Lk);
    return {plan, attention_length_args(s), cycles};
}

// The mask as the program reads it: device address and byte strides of its batch, head and
// query dims (0 where it broadcasts), rows of Lk contiguous and 128-byte aligned.
struct MaskRows {
    uint64_t addr = 0;
    spyre_buffer_t buffer = nullptr;
    uint64_t st[3] = {};
};

// Checks the mask against [B, Hq, Lq, Lk] (torch broadcasting: 2 to 4 dims, each leading dim 1
// or the full size) and sets s.mask, s.mask_t. Uses its rows in place when they are stick rows,
// else queues the pad program to copy them into `scratch` with a 128-byte row pitch.
MaskRows attention_mask(const Card& c, const Tensor& m, AttentionShape& s, spyre_stream_t stream,
                        Scratch& scratch) {
    const int64_t want[4] = {int64_t(s.B), int64_t(s.Hq), int64_t(s.Lq), int64_t(s.Lk)};
    const size_t n = m.shape.size();
    require(n >= 2 && n <= 4,
            "attention: the mask has {} dims; it must be [Lq, Lk], "
            "[B or 1, Lq, Lk] or [B or 1, Hq or 1, Lq, Lk]",
            n);
    int64_t md[4] = {1, 1, 1, 1}, ms[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; ++i) md[4 - n + i] = m.shape[i], ms[4 - n + i] = m.strides[i];
    bool fits = md[3] == want[3];
    for (int d = 0; d < 3; ++d) fits = fits && (md[d] == 1 || md[d] == want[d]);
    require(fits,
            "attention: a mask [{}, {}, {}, {}] does not broadcast to [{}, {}, "
            "{}, {}] (only its batch, head and query dims may be 1)",
            md[0], md[1], md[2], md[3], want[0], want[1], want[2], want[3]);
    if (m.t == isa::DType::I8) {
        s.mask = AttentionShape::Mask::KEEP;
    } else {
        require(float_type(m.t),
                "attention: the mask is {}; it must be int8 (a "
                "boolean: nonzero = attend) or a float type (added)",
                dtype_name(int(m.t)));
        s.mask = AttentionShape::Mask::ADD;
    }
    s.mask_t = m.t;
    if (md[3] > 1 && ms[3] != 1)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             "attention: the mask's key dim must be contiguous (make it contiguous first)");
    const uint64_t es = m.es;
    MaskRows r{m.addr, m.buffer, {}};
    bool in_place = m.addr % kStick == 0;
    for (int d = 0; d < 3; ++d) {
        r.st[d] = md[d] == 1 ? 0 : uint64_t(ms[d]) * es;
        in_place = in_place && r.st[d] % kStick == 0;
    }
    if (in_place) return r;
    // stick rows in scratch: [md0, md1, md2] rows of ld bytes, broadcast dims kept at size 1
    const uint64_t ld = up(uint64_t(s.Lk) * es, kStick);
    const uint64_t rows = uint64_t(md[2]), bytes = uint64_t(md[0] * md[1]) * rows * ld;
    call(spyre_malloc(c.dev, bytes, &scratch.buf));
    call(spyre_buffer_device_address(scratch.buf, &r.addr));
    r.buffer = scratch.buf;
    r.st[2] = rows > 1 ? ld : 0;
    r.st[1] = md[1] > 1 ? rows * ld : 0;
    r.st[0] = md[0] > 1 ? uint64_t(md[1]) * rows * ld : 0;
    PadShape ps;
    ps.rows = rows, ps.cols = uint64_t(s.Lk), ps.es = static_cast<uint32_t>(es);
    ps.src_ld = rows > 1 ? uint64_t(ms[2]) * es : ps.cols * es;
    ps.dst_ld = ld, ps.dst_rows = rows, ps.dst_bs = rows * ld;
    // the batch and head dims as one batch of the pad program when their strides collapse,
    // else one launch per batch element
    const bool both = md[0] > 1 && md[1] > 1;
    const bool collapse = !both || ms[0] == ms[1] * md[1];
    ps.batch = collapse ? uint64_t(md[0] * md[1]) : uint64_t(md[1]);
    ps.src_bs = uint64_t(md[1] > 1 ? ms[1] : ms[0]) * es;
    const auto pad = pad_plan(c, ps);
    for (int64_t b = 0; b < (collapse ? 1 : md[0]); ++b)
        launch(c, pad, stream, {m.addr + uint64_t(b * ms[0]) * es, r.addr + uint64_t(b) * r.st[0]},
               {m.buffer, scratch.buf});
    return r;
}

// Byte strides of a [B, H, L, D] tensor's batch, head and position dims (a size-1 dim's stride
// is never used: 0), which needs contiguous head rows starting 128-byte aligned.
void head_strides(const Tensor& t, uint64_t* st) {
    if (t.stride(3) != 1 || t.addr % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             std::format("attention: `{}` needs contiguous head rows starting 128-byte "
                         "aligned (make it contiguous first)",
                         t.name));
    for (int d = 0; d < 3; ++d) st[d] = t.dim(d) == 1 ? 0 : uint64_t(t.stride(d)) * t.es;
}

// The logsumexp [B, Hq, Lq] fp32: its batch and head strides (multiples of 128 bytes), Lq
// values contiguous from a 128-byte aligned start.
void lse_strides(const Tensor& l, const AttentionShape& s, uint64_t* st) {
    require(l.shape.size() == 3 && l.dim(0) == int64_t(s.B) && l.dim(1) == int64_t(s.Hq) &&
                l.dim(2) == int64_t(s.Lq),
            "attention: `lse` must be [{}, {}, {}]", s.B, s.Hq, s.Lq);
    require(l.t == isa::DType::F32, "attention: `lse` must be float32");
    bool ok = l.addr % kStick == 0 && (l.dim(2) == 1 || l.stride(2) == 1);
    for (int d = 0; d < 2; ++d) {
        st[d] = l.dim(d) == 1 ? 0 : uint64_t(l.stride(d)) * 4;
        ok = ok && st[d] % kStick == 0;
    }
    // a size-1 dim gets the stride the program may step by anyway (never used: index 0)
    if (ok && !st[1]) st[1] = kStick * ((s.Lq * 4 + kStick - 1) / kStick);
    if (ok && !st[0]) st[0] = st[1] * s.Hq;
    if (!ok)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             "attention: `lse` needs its Lq values contiguous from a 128-byte aligned start and "
             "batch and head strides that are multiples of 128 bytes (e.g. [B, Hq, Lq] rows "
             "padded to 32 values)");
}

// Checks q, k, v and out (the shapes of attention) and fills the shape of the program.
AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                               bool causal, float scale) {
    for (const Tensor* t : {&q, &k, &v, &o}) {
        require(t->shape.size() == 4,
                "attention: `{}` must be 4-D [batch, heads, length, head_dim]", t->name);
        require(t->t == q.t, "attention: `{}` is {} but `q` is {}", t->name, dtype_name(int(t->t)),
                dtype_name(int(q.t)));
    }
    require(float_type(q.t), "attention: float32, float16 or bfloat16 tensors");
    const int64_t B = q.dim(0), Hq = q.dim(1), Lq = q.dim(2), D = q.dim(3);
    const int64_t Hkv = k.dim(1), Lk = k.dim(2);
    require(k.dim(0) == B && v.dim(0) == B && k.dim(3) == D && v.dim(3) == D && v.dim(1) == Hkv &&
                v.dim(2) == Lk,
            "attention: k and v must be [{}, Hkv, Lk, {}] alike", B, D);
    require(o.dim(0) == B && o.dim(1) == Hq && o.dim(2) == Lq && o.dim(3) == D,
            "attention: `out` must be [{}, {}, {}, {}]", B, Hq, Lq, D);
    require(Hkv > 0 && Hq % Hkv == 0, "attention: {} query heads are not a multiple of {} kv heads",
            Hq, Hkv);
    AttentionShape s;
    s.B = B, s.Hq = Hq, s.Hkv = Hkv, s.Lq = Lq, s.Lk = Lk, s.D = D;
    s.t = q.t, s.causal = causal, s.scale = scale;
    return s;
}

void attention_impl(spyre_stream_t stream, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor* mask, const Tensor& o, const Tensor* lse, bool causal,
                    float scale) {
    AttentionShape s = attention_shape(q, k, v, o, causal, scale);
    // one query row at the end of the keys sees them all: causal changes nothing
    if (s.Lq == 1) s.causal = false;
    const Card c = card_of(o.buffer);
    require_same_card(c, {&q, &k, &v, mask, lse}, "attention");
    if (s.B == 0 || s.Hq == 0 || s.Lq == 0 || s.D == 0) return;
    require(s.Lk > 0, "attention: no keys (Lk = 0)");
    head_strides(q, s.q_st), head_strides(k, s.k_st), head_strides(v, s.v_st);
    head_strides(o, s.o_st);
    if (lse) s.lse = true, lse_strides(*lse, s, s.l_st);
    Scratch mask_scratch;
    MaskRows m;
    if (mask) {
        m = attention_mask(c, *mask, s, stream, mask_scratch);
        std::copy(m.st, m.st + 3, s.m_st);
    }
    const AttentionLaunch a = attention_plan(c, s);
    std::vector<uint64_t> args = {q.addr, k.addr, v.addr, o.addr, m.addr, lse ? lse->addr : 0};
    args.insert(args.end(), a.extra_args.begin(), a.extra_args.end());
    launch(c, a.plan, stream, args,
           {q.buffer, k.buffer, v.buffer, o.buffer, m.buffer, lse ? lse->buffer : nullptr},
           a.cycles);
    finish_info(c, *a.plan);
}

// One pass of the backward (passes 1: dQ, 2: dK/dV), planned once per shape and strides.
std::shared_ptr<const PlanEntry> attention_grad_plan(const Card& c, const AttentionGradShape& g,
                                                     int pass) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    const AttentionShape& s = g.a;
    PlanKey key(pass == 1 ? "attn-bwd-dq" : "attn-bwd-dkv", cfg);
    key.add(s.B, s.Hq, s.Hkv, s.Lq, s.Lk, s.D, s.t, s.causal, s.scale, s.mask, s.mask_t);
    for (const uint64_t* st :
         {s.q_st, s.k_st, s.v_st, s.o_st, s.m_st, g.do_st, g.dq_st, g.dk_st, g.dv_st})
        key.add(st[0], st[1], st[2]);
    key.add(s.l_st[0], s.l_st[1], g.d_st[0], g.d_st[1]);
    return cached_plan(key.str(), [&] {
        const Pricer pricer(cfg);
        const AttentionGradPlan p = plan_attention_grad(pricer, g, cfg.num_cores, pass);
        PlanEntry e;
        if (pass == 1) {
            e.image = build_attention_dq(g, p), e.cores = p.dq_cores, e.cycles = p.dq_cycles;
            e.plan = std::format("dQ: q block {} x {} heads, key block {}, {} cores", p.bq,
                                 s.Hq / s.Hkv, p.bk, p.dq_cores);
        } else {
            e.image = build_attention_dkv(g, p), e.cores = p.dkv_cores, e.cycles = p.dkv_cycles;
            e.plan = std::format("dK/dV: key block {}, q block {} x {} heads, {} cores", p.kk, p.kq,
                                 s.Hq / s.Hkv, p.dkv_cores);
        }
        return e;
    });
}

void attention_backward_impl(spyre_stream_t stream, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor* mask, const Tensor& o,
                             const Tensor& dout, const Tensor& lse, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, bool causal, float scale) {
    AttentionGradShape g;
    g.a = attention_shape(q, k, v, o, causal, scale);
    AttentionShape& s = g.a;
    for (const Tensor* t : {&dout, &dq, &dk, &dv}) {
        require(t->shape.size() == 4 && t->t == q.t,
                "attention backward: `{}` must be a 4-D {} tensor", t->name, dtype_name(int(q.t)));
        const Tensor& like = t == &dk || t == &dv ? k : q;
        require(t->shape == like.shape, "attention backward: `{}` must have the shape of `{}`",
                t->name, like.name);
    }
    const Card c = card_of(dq.buffer);
    require_same_card(c, {&q, &k, &v, mask, &o, &dout, &lse, &dk, &dv}, "attention backward");
    if (s.B == 0 || s.Hq == 0 || s.Lq == 0 || s.D == 0) return;
    require(s.Lk > 0, "attention backward: no keys (Lk = 0)");
    head_strides(q, s.q_st), head_strides(k, s.k_st), head_strides(v, s.v_st);
    head_strides(o, s.o_st), head_strides(dout, g.do_st), head_strides(dq, g.dq_st);
    head_strides(dk, g.dk_st), head_strides(dv, g.dv_st);
    s.lse = true;
    lse_strides(lse, s, s.l_st);
    Scratch mask_scratch, delta;
    MaskRows m;
    if (mask) {
        m = attention_mask(c, *mask, s, stream, mask_scratch);
        std::copy(m.st, m.st + 3, s.m_st);
    }
    // delta = rowsum(dO * O): written by the dQ pass, read by the dK/dV pass
    dense_row_stat_strides(s.Hq, s.Lq, g.d_st);
    uint64_t delta_addr = 0;
    call(spyre_malloc(c.dev, s.B * g.d_st[0], &delta.buf));
    call(spyre_buffer_device_address(delta.buf, &delta_addr));
    const std::vector<uint64_t> args = {q.addr,    k.addr,     v.addr,  o.addr,  m.addr, lse.addr,
                                        dout.addr, delta_addr, dq.addr, dk.addr, dv.addr};
    const std::vector<spyre_buffer_t> bufs = {q.buffer,  k.buffer,   v.buffer,    o.buffer,
                                              m.buffer,  lse.buffer, dout.buffer, delta.buf,
                                              dq.buffer, dk.buffer,  dv.buffer};
    const auto pdq = attention_grad_plan(c, g, 1), pdkv = attention_grad_plan(c, g, 2);
    launch(c, pdq, stream, args, bufs);
    launch(c, pdkv, stream, args, bufs);
    PlanEntry both = *pdkv;
    both.plan = pdq->plan + "; " + pdkv->plan;
    both.cores = std::max(pdq->cores, pdkv->cores);
    finish_info(c, both);
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
                       nullptr, check_tensor(out, "out"), nullptr, causal != 0, scale);
    });
}

spyre_status spyre_op_attention_masked(spyre_stream_t stream, const spyre_tensor* q,
                                       const spyre_tensor* k, const spyre_tensor* v,
                                       const spyre_tensor* mask, const spyre_tensor* out,
                                       int causal, float scale) {
    return guard(__func__, [&] {
        begin_op("attention");
        const std::optional<Tensor> m =
            mask ? std::optional<Tensor>(check_tensor(mask, "mask")) : std::nullopt;
        attention_impl(stream, check_tensor(q, "q"), check_tensor(k, "k"), check_tensor(v, "v"),
                       m ? &*m : nullptr, check_tensor(out, "out"), nullptr, causal != 0, scale);
    });
}

spyre_status spyre_op_attention_lse(spyre_stream_t stream, const spyre_tensor* q,
                                    const spyre_tensor* k, const spyre_tensor* v,
                                    const spyre_tensor* mask, const spyre_tensor* out,
                                    const spyre_tensor* lse, int causal, float scale) {
    return guard(__func__, [&] {
        begin_op("attention");
        const std::optional<Tensor> m =
            mask ? std::optional<Tensor>(check_tensor(mask, "mask")) : std::nullopt;
        const Tensor l = check_tensor(lse, "lse");
        attention_impl(stream, check_tensor(q, "q"), check_tensor(k, "k"), check_tensor(v, "v"),
                       m ? &*m : nullptr, check_tensor(out, "out"), &l, causal != 0, scale);
    });
}

spyre_status spyre_op_attention_backward(spyre_stream_t stream, const spyre_tensor* q,
                                         const spyre_tensor* k, const spyre_tensor* v,
                                         const spyre_tensor* mask, const spyre_tensor* out,
                                         const spyre_tensor* dout, const spyre_tensor* lse,
                                         const spyre_tensor* dq, const spyre_tensor* dk,
                                         const spyre_tensor* dv, int causal, float scale) {
    return guard(__func__, [&] {
        begin_op("attention_backward");
        const std::optional<Tensor> m =
            mask ? std::optional<Tensor>(check_tensor(mask, "mask")) : std::nullopt;
        attention_backward_impl(stream, check_tensor(q, "q"), check_tensor(k, "k"),
                                check_tensor(v, "v"), m ? &*m : nullptr, check_tensor(out, "out"),
                                check_tensor(dout, "dout"), check_tensor(lse, "lse"),
                                check_tensor(dq, "dq"), check_tensor(dk, "dk"),
                                check_tensor(dv, "dv"), causal != 0, scale);
    });
}
