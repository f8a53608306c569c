// SPDX-License-Identifier: MIT
// Element gather and scatter by device-resident indices, the primitive behind gather,
// index_select on any dim, advanced indexing, scatter_add, index_copy and the embedding
// backward. The indexed tensor ("table") is seen as [O, V, I] (outer dims, the indexed dim,
// inner dims), the other side ("rows") as [O, N, I], the indices as [O or 1, N, I or 1]:
//   gather:      rows[o, n, i]  = table[o, idx[o, n, i], i]
//   scatter:     table[o, idx[o, n, i], i]  = rows[o, n, i]   (index_copy)
//   scatter_add: table[o, idx[o, n, i], i] += rows[o, n, i]
// The table slab table[o] stays in LX while the other operands pass through in tiles of
// n_tile positions along N (rows[o, tile, :] and idx[o, tile, :]); each index is read with
// LXLD and moves one element (or, with indices broadcast over I, a run of I elements) with a
// one-row vector instruction. A gather's unit of work is one (o, tile): units are spread over
// the cores (so a dim-0 gather of a 2-D tensor, O = 1, uses every core) and a core reloads the
// table only when o changes. A scatter's unit is a whole slab o, its tiles in ascending order
// on one core, so duplicate indices accumulate in (n, i) order: scatter_add is deterministic.
// N need not be a multiple of n_tile: split_index gives a second launch for the last partial
// tile.
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
    uint64_t n_tile = 0;         // positions along N per tile (0: N, one tile)
    uint64_t n_tiles = 1;        // tiles per slab this launch covers (n_tile * n_tiles <= N)

    uint64_t tile() const { return n_tile ? n_tile : N; }
    uint64_t id() const { return idx_inner ? I : 1; }  // index elements per position n
};

// One launch of a split index op: its shape and where its first position along N lies (the
// launch's rows and idx addresses move by `first` positions; the table does not), and its
// first slab along O (s.O slabs from first_o: every operand's address moves by first_o slabs).
struct IndexLaunch {
    IndexShape s;
    uint64_t first = 0;
    uint64_t first_o = 0;
};

struct IndexPlan {
    uint64_t per_core = 0;  // units per core (gather: (o, tile) pairs; scatter: slabs o)
    uint32_t cores = 1;
    uint64_t cycles = 0;
};

// Bytes of LX a core needs (the table slab and one tile of the others, each with up to a
// stick of lead-in).
uint64_t index_lx_bytes(const IndexShape& s);

// The launches of an index op whose shape has no tiling yet: one when a whole slab of every
// operand fits in `lx_budget` and the work needs no spreading, else tiles along N (a gather's
// sized to give `max_cores` units, on whole sticks of rows where possible) and, when N is not
// a multiple of the tile, a second launch for the rest. Throws std::invalid_argument when even
// the table slab with one position does not fit.
std::vector<IndexLaunch> split_index(const IndexShape& s, uint64_t lx_budget, uint32_t max_cores);

// Launch arguments: 0 = table, 1 = idx, 2 = rows (device addresses of element 0; the written
// operand starts on a stick). An index outside [0, V) (or [-V, V) with wrap_negative) stops
// the job with SPYRE_ENGINE_ERR_DIV_ZERO at the bounds check (a device-side assert).
std::vector<uint8_t> build_index(const IndexShape& s, const IndexPlan& p);
IndexPlan plan_index(const Pricer& pricer, const IndexShape& s, uint32_t max_cores);

}  // namespace spyre::ops
