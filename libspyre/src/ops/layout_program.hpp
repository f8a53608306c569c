// SPDX-License-Identifier: MIT
// The op library's layout programs: pad a matrix into stick rows (what the matmul program takes),
// unpad stick rows back to a dense matrix, batched 2D transpose with VTRANS, and a general
// strided -> dense copy of up to 8 dims (permute, contiguous()). They move bytes (any dtype of
// 1, 2 or 4 bytes) and are bit exact; the planner picks the core count, the block size and the
// way rows are gathered by pricing the very program on the cycle model
// (Documentation/ops-elementwise.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/pricing.hpp"

namespace spyre::ops {

// How a layout program divides its work.
struct LayoutPlan {
    uint32_t cores = 1;
    uint64_t block = 0;      // rows (pad, copies) or source columns (transposes) per step
    uint64_t block2 = 0;     // tiles: source rows per tile; row copies: elements per piece
    bool tiles = false;      // a transpose to stick rows (block2 x block tiles)
    bool columns = false;    // a dense transpose: block destination rows, block2 source rows
                             // per gather (0 = all)
    bool strided = false;    // rows gathered by strided loads per row class (else one span)
    uint64_t lx_bytes = 0;   // LX the program uses per core
    uint64_t cycles = 0;     // modeled cycles (timing-only run)
    uint64_t ddr_bytes = 0;  // DDR bytes moved by the priced run
};

std::string layout_plan_name(const LayoutPlan& p);

// ---- pad: any matrix -> stick rows ----
// Source: batch x rows x cols elements of es bytes, row r of batch b at src + b*src_bs +
// r*src_ld (src any element-aligned address; strides element aligned, any value, 0 allowed).
// Destination: batch x dst_rows rows of dst_ld bytes (a multiple of 128, >= cols*es) at dst +
// b*dst_bs (dst and dst_bs multiples of 128); columns cols.. of every row and rows rows..dst_rows
// are zero. Bytes between batches (dst_bs > dst_rows*dst_ld) are not written.
// Launch arguments: 0 = src, 1 = dst.
struct PadShape {
    uint64_t rows = 0, cols = 0;
    uint32_t es = 2;
    uint64_t src_ld = 0;
    uint64_t dst_ld = 0;
    uint64_t dst_rows = 0;  // 0 = rows
    uint64_t batch = 1, src_bs = 0, dst_bs = 0;
};
void pad_validate(const PadShape& s);
LayoutPlan pad_make_plan(const PadShape& s, uint32_t cores, uint64_t lx_budget, bool strided,
                         uint64_t block = 0);
std::vector<uint8_t> build_pad(const PadShape& s, const LayoutPlan& p);
LayoutPlan price_pad(const Pricer& pricer, const PadShape& s, LayoutPlan p);
LayoutPlan plan_pad(const Pricer& pricer, const PadShape& s, uint32_t max_cores);

// ---- unpad: stick rows -> dense ----
// Source: batch x rows rows of src_ld bytes (a multiple of 128) at src + b*src_bs (src and
// src_bs multiples of 128), cols elements of es bytes used per row. Destination: the dense
// batch x rows x cols array at dst (128-aligned). Launch arguments: 0 = src, 1 = dst.
struct UnpadShape {
    uint64_t rows = 0, cols = 0;
    uint32_t es = 2;
    uint64_t src_ld = 0;
    uint64_t batch = 1, src_bs = 0;
};

// ---- transpose: [batch, rows, cols] -> [batch, cols, rows] ----
// Source row r of batch b at src + b*src_bs + r*src_ld (src 128-aligned, strides element
// aligned). Destination row c (of `rows` elements) of batch b at dst + b*dst_bs + c*dst_ld: either
// dense (dst_ld = rows*es, dst_bs = cols*rows*es; dst_ld = 0 means that) or stick rows (dst_ld and
// dst_bs multiples of 128; each row written up to the end of its last stick, zero filled).
// Launch arguments: 0 = src, 1 = dst.
struct TransposeShape {
    uint64_t batch = 1, rows = 0, cols = 0;
    uint32_t es = 2;
    uint64_t src_ld = 0, src_bs = 0;  // 0 = dense
    uint64_t dst_ld = 0, dst_bs = 0;  // 0 = dense
};

// ---- strided copy / permute: up to 8 dims -> dense ----
// Element (i0 .. i{n-1}) of the source is at src + es * sum(i_d * strides[d]) (src any
// element-aligned address, strides >= 0 in elements); the destination is the dense row-major
// array of `sizes` at dst (128-aligned). A permute passes the permuted sizes and strides.
// Launch arguments: 0 = src, 1 = dst.
struct CopyShape {
    uint32_t ndim = 0;
    uint64_t sizes[8] = {};
    uint64_t strides[8] = {};
    uint32_t es = 2;
};

// What a dense-destination copy becomes after collapsing its dims (ops-elementwise.md):
// ROWS copies rows of contiguous elements, TRANSPOSE transposes [rows, cols] tiles whose columns
// are contiguous in the source, ELEMENTS gathers single elements (no source dim with stride 1
// where a tile could use it).
enum class CopyKind : uint8_t { ROWS, TRANSPOSE, ELEMENTS };
CopyKind copy_kind(const CopyShape& s);

void copy_validate(const CopyShape& s);
// An unpriced plan. block: rows (columns for transposes) per step, 0 = a third of a core's
// share; chunk > 0 (rows copies only): one row per step in pieces of `chunk` elements.
LayoutPlan copy_make_plan(const CopyShape& s, uint32_t cores, uint64_t lx_budget, bool strided,
                          uint64_t block = 0, uint64_t chunk = 0);
std::vector<uint8_t> build_copy(const CopyShape& s, const LayoutPlan& p);
LayoutPlan price_copy(const Pricer& pricer, const CopyShape& s, LayoutPlan p);
LayoutPlan plan_copy(const Pricer& pricer, const CopyShape& s, uint32_t max_cores);

// unpad and dense transposes are copies; transposes to stick rows have their own tile program
CopyShape unpad_as_copy(const UnpadShape& s);
CopyShape transpose_as_copy(const TransposeShape& s);
bool transpose_to_stick_rows(const TransposeShape& s);

void unpad_validate(const UnpadShape& s);
LayoutPlan plan_unpad(const Pricer& pricer, const UnpadShape& s, uint32_t max_cores);
std::vector<uint8_t> build_unpad(const UnpadShape& s, const LayoutPlan& p);

void transpose_validate(const TransposeShape& s);
LayoutPlan transpose_make_plan(const TransposeShape& s, uint32_t cores, uint64_t lx_budget,
                               bool strided, uint64_t block = 0, uint64_t block2 = 0);
LayoutPlan price_transpose(const Pricer& pricer, const TransposeShape& s, LayoutPlan p);
LayoutPlan plan_transpose(const Pricer& pricer, const TransposeShape& s, uint32_t max_cores);
std::vector<uint8_t> build_transpose(const TransposeShape& s, const LayoutPlan& p);

}  // namespace spyre::ops
