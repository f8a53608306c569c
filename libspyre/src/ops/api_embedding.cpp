// SPDX-License-Identifier: MIT
// C API of the embedding lookup (spyre_op_embedding) and of its other direction, the row
// scatter (spyre_op_scatter_rows): ops/embedding_program.hpp.
#include "ops/api_common.hpp"
#include "ops/embedding_program.hpp"
#include "ops/pricing.hpp"

namespace spyre::ops {
namespace {

// The gather out[i] = w[idx[i]], or (scatter) the row scatter w[idx[i]] = o[i].
void embedding_impl(spyre_stream_t stream, const Tensor& idx, const Tensor& w, const Tensor& o,
                    bool scatter) {
    require(idx.t == isa::DType::I64 || idx.t == isa::DType::I32,
            "embedding: `indices` must be int64 or int32, not {}", dtype_name(int(idx.t)));
    require(w.shape.size() == 2, "embedding: `weight` must be 2-D [num_embeddings, dim]");
    require(o.t == w.t, "embedding: `out` must have the type of `weight`");
    const int64_t V = w.dim(0), D = w.dim(1);
    std::vector<int64_t> want = idx.shape;
    want.push_back(D);
    require(o.shape == want, "embedding: `out` must have the shape of `indices` plus [dim]");
    const int64_t n = idx.numel();
    // indices dense; rows of weight and out contiguous, starting on sticks
    int64_t expect = 1;
    for (size_t d = idx.shape.size(); d-- > 0;) {
        if (idx.shape[d] != 1 && idx.strides[d] != expect)
            fail(SPYRE_ERROR_NOT_SUPPORTED, "embedding: `indices` must be contiguous");
        expect *= idx.shape[d];
    }
    const uint64_t row = uint64_t(D) * w.es;
    const uint64_t ws = uint64_t(w.stride(0)) * w.es;
    uint64_t os = row;  // out [..., D]: rows of the flattened index positions
    expect = 1;
    for (size_t d = o.shape.size(); d-- > 0;) {
        if (d + 1 == o.shape.size()) {
            if (o.strides[d] != 1 && o.shape[d] != 1)
                fail(SPYRE_ERROR_NOT_SUPPORTED, "embedding: `out` rows must be contiguous");
            expect = o.shape.size() >= 2 ? o.strides[d - 1] : D;
            os = uint64_t(expect) * o.es;
            continue;
        }
        if (o.shape[d] != 1 && o.strides[d] != expect)
            fail(SPYRE_ERROR_NOT_SUPPORTED, "embedding: the index dims of `out` must collapse");
        expect *= o.shape[d];
    }
    if (w.stride(1) != 1 && D != 1)
        fail(SPYRE_ERROR_NOT_SUPPORTED, "embedding: `weight` rows must be contiguous");
    const Card c = card_of(o.buffer);
    require_same_card(c, {&idx, &w}, "embedding");
    if (n == 0 || D == 0) return;
    require(V > 0, "embedding: `weight` has no rows");
    if (idx.addr % kStick || w.addr % kStick || o.addr % kStick || ws % kStick || os % kStick)
        fail(SPYRE_ERROR_NOT_SUPPORTED,
             "embedding: indices, weight rows and out rows must start 128-byte aligned");
    EmbeddingShape s;
    s.n = uint64_t(n), s.V = uint64_t(V), s.row_bytes = row, s.w_stride = ws, s.o_stride = os;
    s.index_bytes = static_cast<uint32_t>(idx.es);
    s.scatter = scatter;
    const spyre_engine_config cfg = engine_config_of(c.info);
    PlanKey key("emb", cfg);
    key.add(s.n, s.V, s.row_bytes, s.w_stride, s.o_stride, s.index_bytes, s.scatter);
    auto plan = cached_plan(key.str(), [&] {
        const Pricer pricer(cfg);
        const EmbeddingPlan p = plan_embedding(pricer, s, cfg.num_cores);
        PlanEntry e;
        e.image = build_embedding(s, p);
        e.cores = p.cores;
        e.cycles = p.cycles;
        e.plan = std::format("{} rows per core, {} cores", p.per_core, p.cores);
        return e;
    });
    launch(c, plan, stream, {idx.addr, w.addr, o.addr}, {idx.buffer, w.buffer, o.buffer});
    finish_info(c, *plan);
}

}  // namespace
}  // namespace spyre::ops

using namespace spyre;
using namespace spyre::ops;

spyre_status spyre_op_embedding(spyre_stream_t stream, const spyre_tensor* indices,
                                const spyre_tensor* weight, const spyre_tensor* out) {
    return guard(__func__, [&] {
        begin_op("embedding");
        embedding_impl(stream, check_tensor(indices, "indices"), check_tensor(weight, "weight"),
                       check_tensor(out, "out"), false);
    });
}

spyre_status spyre_op_scatter_rows(spyre_stream_t stream, const spyre_tensor* indices,
                                   const spyre_tensor* rows, const spyre_tensor* table) {
    return guard(__func__, [&] {
        begin_op("scatter_rows");
        embedding_impl(stream, check_tensor(indices, "indices"), check_tensor(table, "table"),
                       check_tensor(rows, "rows"), true);
    });
}
