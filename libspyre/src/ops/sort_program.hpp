// SPDX-License-Identifier: MIT
// Sort and top-k along the last dim (torch.sort, torch.argsort, torch.topk): values and int64
// indices of the first K positions of each row's sorted order, stable (ties in ascending index
// order: what torch's stable sort gives, and a valid answer of its unstable sort and topk), NaN
// largest, as torch orders them.
//
// Each row element becomes one int64 key (key32(value) << 32 | index << 1 | negzero): key32 is
// the value's fp32 bits mapped to a signed integer of the same order (negative values' magnitude
// bits flipped; -0.0 mapped to +0.0's key, its sign kept in bit 0; every NaN to one key above
// +inf), inverted for a descending sort. Distinct indices make the keys distinct, so sorting the
// keys ascending gives the stable order, and a compare-exchange is just VINT MIN and MAX, with
// the index and the value riding along. A core loads a chunk of rows, transposes them to
// [P, rows] (P = N padded to a power of two with the largest key), runs a bitonic network whose
// compare-exchanges each cover whole rows of that layout (all the chunk's rows at once), then
// decodes values and indices of the first K positions and transposes them back.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

struct SortShape {
    isa::DType t = isa::DType::F32;  // F32, F16 or BF16
    uint64_t es = 4;
    uint64_t O = 1, N = 0, K = 0;  // O rows of N elements, the first K of each sorted row out
    bool descending = false;
};

struct SortPlan {
    uint64_t chunk = 0;     // rows per LX pass
    uint64_t per_core = 0;  // rows per core
    uint32_t cores = 1;
    uint64_t cycles = 0;
};

// N padded to a power of two.
uint64_t sort_padded(uint64_t n);
// Bytes of LX a chunk of `chunk` rows needs.
uint64_t sort_lx_bytes(const SortShape& s, uint64_t chunk);

// Launch arguments: 0 = x, 1 = values, 2 = indices (int64); device addresses of element 0, all
// 128-byte aligned.
std::vector<uint8_t> build_sort(const SortShape& s, const SortPlan& p);
// Throws std::invalid_argument if one chunk of rows does not fit in LX.
SortPlan plan_sort(const Pricer& pricer, const SortShape& s, uint32_t max_cores);

}  // namespace spyre::ops
