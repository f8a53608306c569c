// SPDX-License-Identifier: MIT
// Embedding lookup (a row gather by device-resident indices): out[i] = weight[idx[i]], and the
// row scatter weight[idx[i]] = rows[i]. Each core loads its slice of the indices into LX, reads
// them one by one (LXLD) and moves the rows (DMA only: any number of rows of any table).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/pricing.hpp"

namespace spyre::ops {

// idx: n int64 (or int32) indices, dense, 128-byte aligned; weight: V rows of `row_bytes` with
// a byte stride `w_stride`; out: n rows with a byte stride `o_stride`. Strides and row starts
// multiples of 128 bytes.
// scatter: the other direction, weight[idx[i]] = out[i] (argument 2 is then the rows read);
// with repeated indices which of their rows lands is unspecified (cores run concurrently).
struct EmbeddingShape {
    uint64_t n = 0, V = 0, row_bytes = 0, w_stride = 0, o_stride = 0;
    uint32_t index_bytes = 8;  // 8 (int64) or 4 (int32)
    bool scatter = false;
};

struct EmbeddingPlan {
    uint64_t per_core = 0;  // indices each core gathers
    uint32_t cores = 1;
    uint64_t cycles = 0;
};

// Launch arguments: 0 = indices, 1 = weight, 2 = out. An index outside [0, V) stops the job with
// SPYRE_ENGINE_ERR_DIV_ZERO at the bounds check (the program's device-side assert).
std::vector<uint8_t> build_embedding(const EmbeddingShape& s, const EmbeddingPlan& p);
EmbeddingPlan plan_embedding(const Pricer& pricer, const EmbeddingShape& s, uint32_t max_cores);

}  // namespace spyre::ops
