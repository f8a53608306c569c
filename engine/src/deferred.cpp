// SPDX-License-Identifier: MIT
// Deferred LOAD copies (core.hpp `Deferred`): when they are made, dropped or read in place.
#include "core.hpp"

namespace spyre::eng {

static void copy_rows(Core& c, const Deferred& d) {
    if (d.ls == d.len && d.ds == d.len) {
        std::memcpy(c.lx + d.lo, d.src, d.n * d.len);
        return;
    }
    for (uint64_t i = 0; i < d.n; ++i) std::memcpy(c.lx + d.lo + i * d.ls, d.src + i * d.ds, d.len);
}

void lx_settle(Core& c, uint64_t lo, uint64_t hi, bool drop) {
    auto& v = c.deferred;
    size_t k = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        const Deferred& d = v[i];
        if (d.hi <= lo || d.lo >= hi) {
            v[k++] = d;
            continue;
        }
        if (!(drop && lo <= d.lo && d.hi <= hi)) copy_rows(c, d);
    }
    v.resize(k);
}

void lx_settle_all(Core& c) {
    for (const Deferred& d : c.deferred) copy_rows(c, d);
    c.deferred.clear();
}

void ddr_settle(Core& c, uint64_t lo, uint64_t hi) {
    auto& v = c.deferred;
    size_t k = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        const Deferred& d = v[i];
        if (d.ddr_hi <= lo || d.ddr_lo >= hi)
            v[k++] = d;
        else
            copy_rows(c, d);
    }
    v.resize(k);
}

const uint8_t* lx_alias(const Core& c, uint64_t addr, uint64_t rows, uint64_t stride,
                        uint64_t row_bytes, uint64_t* stride_out) {
    if (rows == 0 || row_bytes == 0) return nullptr;
    for (const Deferred& d : c.deferred) {
        if (addr < d.lo || addr >= d.hi) continue;
        const uint64_t off = addr - d.lo;
        if (d.ls == d.len && d.ds == d.len) {  // one block: any rows inside it
            if (u128{rows - 1} * stride + row_bytes > d.hi - addr) return nullptr;
            *stride_out = stride;
            return d.src + off;
        }
        const uint64_t i0 = off / d.ls, col = off % d.ls;
        if (col + row_bytes > d.len || i0 + rows > d.n) return nullptr;
        if (rows > 1 && stride != d.ls) return nullptr;
        *stride_out = rows > 1 ? d.ds : stride;
        return d.src + i0 * d.ds + col;
    }
    return nullptr;
}

}  // namespace spyre::eng
