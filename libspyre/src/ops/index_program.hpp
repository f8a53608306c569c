// SPDX-License-Identifier: MIT
// Element gather and scatter by device-resident indices, the primitive behind gather,
// index_select on any dim, advanced indexing, scatter_add, index_copy and the embedding
// backward. The indexed tensor ("table") is seen as [O, V, I] (outer dims, the indexed dim,
// inner dims), the other side ("rows") as [O, N, I], the indices as [O or 1, N, I or 1]:
//   gather:      rows[o, n, i]  = table[o, idx[o, n, i], i]
//   scatter:     table[o, idx[o, n, i], i]  = rows[o, n, i]   (index_copy)
//   scatter_add: table[o, idx[o, n, i], i] += rows[o, n, i]
// Each core takes whole slabs o: it loads table[o], rows[o] and idx[o] into LX, reads each
// index with LXLD and moves one element (or, with indices broadcast over I, a run of I
// elements) with a one-row vector instruction, then stores the written slab. A slab's indices
// are applied in ascending (n, i) order on one core, so duplicate indices accumulate in that
// order: scatter_add is deterministic.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

enum class IndexMode : uint8_t { GATHER, SCATTER, SCATTER_ADD };

struct IndexShape {
    IndexMode mode = IndexMode::GATHER;
    isa::DType t = isa::DType::F32;
    uint64_t es = 4;
    uint64_t O = 1, V = 0, N = 0, I = 1;
    bool idx_outer = true;       // idx has an O dim (else one index slab shared by every o)
    bool idx_inner = true;       // idx has an I dim (else each index moves a run of I elements)
    uint32_t index_bytes = 8;    // 8 (int64) or 4 (int32)
    bool wrap_negative = false;  // idx in [-V, 0) means idx + V (advanced indexing)
};

struct IndexPlan {
    uint64_t per_core = 0;  // slabs o per core
    uint32_t cores = 1;
    uint64_t cycles = 0;
};

// Bytes of LX a core needs (one slab of each operand, each with up to a stick of lead-in).
uint64_t index_lx_bytes(const IndexShape& s);

// Launch arguments: 0 = table, 1 = idx, 2 = rows (device addresses of element 0; the written
// operand starts on a stick). An index outside [0, V) (or [-V, V) with wrap_negative) stops
// the job with SPYRE_ENGINE_ERR_DIV_ZERO at the bounds check (a device-side assert).
std::vector<uint8_t> build_index(const IndexShape& s, const IndexPlan& p);
IndexPlan plan_index(const Pricer& pricer, const IndexShape& s, uint32_t max_cores);

}  // namespace spyre::ops
