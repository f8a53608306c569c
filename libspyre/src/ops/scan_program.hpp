// SPDX-License-Identifier: MIT
// Cumulative sum and product along one dim (torch.cumsum, torch.cumprod) with PyTorch's CPU
// numerics. The tensor is seen as [O, N, I] (outer dims, the scanned dim, inner dims); a slab o
// is N x I contiguous elements. Each core takes whole slabs, loads a chunk of them into LX and
// scans them all at once, one vector instruction per step j of the scanned dim:
//   integers (VINT, exact, wrapping like torch's int64 accumulator cast back):
//       x[:, j, :] = x[:, j - 1, :] (+ or *) x[:, j, :]       rows = slabs, cols = I
//   fp16 / bf16: the same recurrence on an fp32 copy (torch accumulates them in float), rounded
//       once to the type at the end;
//   fp32 sum: torch accumulates in double, which the fp32 vector unit cannot carry from step to
//       step; VRED SUM adds in double in index order from +0.0 and rounds once, so output j is
//       one VRED over x[.., 0..j, ..] (O(N^2) element reads per slab, exact);
//   fp32 product: the fp16 recurrence in fp32 (an fp32 accumulator like torch's CUDA kernel;
//       the CPU's double accumulator has no vector form: within N fp32 roundings of it).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/pricing.hpp"
#include "spyre/isa.hpp"

namespace spyre::ops {

enum class ScanOp : uint8_t { SUM, PROD };

struct ScanShape {
    ScanOp op = ScanOp::SUM;
    isa::DType t = isa::DType::F32;
    uint64_t es = 4;
    uint64_t O = 1, N = 0, I = 1;
};

struct ScanPlan {
    uint64_t chunk = 0;     // slabs per LX pass
    uint64_t per_core = 0;  // slabs per core
    uint32_t cores = 1;
    uint64_t cycles = 0;
};

// False if the op and type are not offered.
bool scan_supported(const ScanShape& s);
// Bytes of LX a chunk of `chunk` slabs needs.
uint64_t scan_lx_bytes(const ScanShape& s, uint64_t chunk);

// Launch arguments: 0 = x, 1 = out (device addresses of element 0, both 128-byte aligned; out
// may be x).
std::vector<uint8_t> build_scan(const ScanShape& s, const ScanPlan& p);
// Throws std::invalid_argument if no chunk of slabs fits in LX.
ScanPlan plan_scan(const Pricer& pricer, const ScanShape& s, uint32_t max_cores);

}  // namespace spyre::ops
