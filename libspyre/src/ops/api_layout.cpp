// SPDX-License-Identifier: MIT
// C API of the layout ops (spyre_op_copy): a strided view made dense on the cores, by
// ops/layout_program.hpp (row copies, tile transposes or element gathers); and the cached pad
// and unpad plans the other op families use (ops/layout_plans.hpp).
#include "ops/api_common.hpp"
#include "ops/layout_plans.hpp"
#include "ops/layout_program.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {

namespace {
// A plan entry from a layout plan and its program.
PlanEntry layout_entry(const LayoutPlan& p, std::vector<uint8_t> image) {
    PlanEntry e;
    e.image = std::move(image);
    e.cores = p.cores;
    e.cycles = p.cycles;
    e.plan = layout_plan_name(p);
    return e;
}
}  // namespace

std::shared_ptr<const PlanEntry> pad_plan(const Card& c, const PadShape& s) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("pad", cfg);
    key.add(s.batch, s.rows, s.cols, s.es, s.src_ld, s.dst_ld, s.dst_rows, s.src_bs, s.dst_bs);
    // a helper plan: info.plan_cached stays about the caller's own plan
    const uint8_t cached = last_info().plan_cached;
    auto e = cached_plan(key.str(), [&] {
        pad_validate(s);
        const Pricer pricer(cfg);
        const LayoutPlan p = plan_pad(pricer, s, cfg.num_cores);
        return layout_entry(p, build_pad(s, p));
    });
    last_info().plan_cached = cached;
    return e;
}

std::shared_ptr<const PlanEntry> unpad_plan(const Card& c, const UnpadShape& s) {
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("unpad", cfg);
    key.add(s.batch, s.rows, s.cols, s.es, s.src_ld, s.src_bs);
    const uint8_t cached = last_info().plan_cached;
    auto e = cached_plan(key.str(), [&] {
        const Pricer pricer(cfg);
        const LayoutPlan p = plan_unpad(pricer, s, cfg.num_cores);
        return layout_entry(p, build_unpad(s, p));
    });
    last_info().plan_cached = cached;
    return e;
}

std::shared_ptr<const PlanEntry> queue_copy(const Card& c, spyre_stream_t stream, const Tensor& src,
                                            const Tensor& dst) {
    CopyShape s;
    s.es = static_cast<uint32_t>(src.es);
    for (size_t d = 0; d < src.shape.size(); ++d)
        if (src.shape[d] != 1) {  // size-1 dims change nothing
            s.sizes[s.ndim] = uint64_t(src.shape[d]);
            s.strides[s.ndim] = uint64_t(src.strides[d]);
            ++s.ndim;
        }
    if (s.ndim == 0) s.sizes[0] = 1, s.strides[0] = 1, s.ndim = 1;
    // 8-byte elements (int64) move as pairs of 4-byte ones: one more innermost dim of 2
    if (s.es == 8) {
        if (s.ndim >= std::size(s.sizes))
            fail(SPYRE_ERROR_NOT_SUPPORTED, "copy: too many dims for 8-byte elements");
        for (uint32_t d = 0; d < s.ndim; ++d) s.strides[d] *= 2;
        s.sizes[s.ndim] = 2, s.strides[s.ndim] = 1, ++s.ndim;
        s.es = 4;
    }
    // the source's element offset inside its first stick shapes the program
    const uint64_t phase = src.addr % kStick;
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("copy", cfg);
    key.add(s.es, phase);
    for (uint32_t d = 0; d < s.ndim; ++d) key.add(s.sizes[d], s.strides[d]);
    auto plan = cached_plan(key.str(), [&] {
        copy_validate(s);
        const Pricer pricer(cfg);
        const LayoutPlan p = plan_copy(pricer, s, cfg.num_cores);
        return layout_entry(p, build_copy(s, p));
    });
    launch(c, plan, stream, {src.addr, dst.addr}, {src.buffer, dst.buffer});
    return plan;
}

namespace {

void copy_impl(spyre_stream_t stream, const Tensor& src, const Tensor& dst) {
    require(src.shape == dst.shape, "copy: `src` and `dst` must have one shape");
    require(src.es == dst.es && (src.t == dst.t),
            "copy: `src` is {} but `dst` is {} (use spyre_op_unary CAST to convert)",
            dtype_name(int(src.t)), dtype_name(int(dst.t)));
    if (!is_dense(dst)) fail(SPYRE_ERROR_NOT_SUPPORTED, "copy: `dst` must be dense");
    if (dst.addr % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED, "copy: `dst` must start 128-byte aligned");
    const Card c = card_of(dst.buffer);
    require_same_card(c, {&src}, "copy");
    if (dst.numel() == 0) return;
    finish_info(c, *queue_copy(c, stream, src, dst));
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_copy(spyre_stream_t stream, const spyre_tensor* src,
                           const spyre_tensor* dst) {
    return guard(__func__, [&] {
        begin_op("copy");
        copy_impl(stream, check_tensor(src, "src"), check_tensor(dst, "dst"));
    });
}
