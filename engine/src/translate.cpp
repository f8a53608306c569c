// SPDX-License-Identifier: MIT
// Address translation of a job with mappings (engine.h, spyre_engine_job.mappings): look-up of
// the run that holds a virtual address, cached per core; row checks and copies.
#include <algorithm>

#include "engine_impl.hpp"

namespace spyre::eng {

// A job's mappings: sorted, disjoint, non-empty runs inside device memory with known flags.
bool mappings_valid(const spyre_engine_job& job, Failure& f) {
    if (!job.mappings) return true;
    uint64_t end = 0;
    for (uint32_t i = 0; i < job.num_mappings; ++i) {
        const spyre_engine_mapping& m = job.mappings[i];
        if (m.len == 0 || m.va + m.len < m.va || (i && m.va < end) || m.pa > job.mem_size ||
            m.len > job.mem_size - m.pa || (m.flags & ~SPYRE_ENGINE_MAP_WRITE) || m.reserved) {
            set_fail(f, SPYRE_ENGINE_ERR_INVALID_ARGUMENT, -1, 0,
                     "mapping %u (VA 0x%llx -> 0x%llx, %llu B, flags 0x%x) unsorted, "
                     "overlapping or beyond device memory %llu",
                     i, (unsigned long long)m.va, (unsigned long long)m.pa,
                     (unsigned long long)m.len, m.flags, (unsigned long long)job.mem_size);
            return false;
        }
        end = m.va + m.len;
    }
    return true;
}

// map_find() missed the run used last: try the next one (rows mostly ascend), then search.
const spyre_engine_mapping* Engine::map_search(Core& c, uint64_t va) const {
    const spyre_engine_mapping* m = maps_;
    const uint32_t h = c.map_hint;
    if (h + 1 < nmaps_ && va - m[h + 1].va < m[h + 1].len) {
        c.map_hint = h + 1;
        return &m[h + 1];
    }
    const spyre_engine_mapping* it = std::upper_bound(
        m, m + nmaps_, va, [](uint64_t v, const spyre_engine_mapping& r) { return v < r.va; });
    if (it == m) return nullptr;
    --it;
    if (va - it->va >= it->len) return nullptr;
    c.map_hint = static_cast<uint32_t>(it - m);
    return it;
}

bool Engine::check_map_row(Core& c, const char* what, uint64_t va, uint64_t len, bool write) {
    while (len) {
        const spyre_engine_mapping* r = map_find(c, va);
        if (!r || (write && !(r->flags & SPYRE_ENGINE_MAP_WRITE))) {
            fail(c, SPYRE_ENGINE_ERR_MMU_FAULT, "%s: MMU fault at VA 0x%llx (%s, %s)", what,
                 (unsigned long long)va, write ? "write" : "read",
                 r ? "read-only page" : "unmapped");
            c.fail.fault_va = va;
            c.fail.fault_access = write ? SPYRE_ENGINE_ACCESS_WRITE : SPYRE_ENGINE_ACCESS_READ;
            return false;
        }
        const uint64_t n = std::min(len, r->len - (va - r->va));
        va += n;
        len -= n;
    }
    return true;
}

// Translates a checked LOAD/STORE/MCLOAD whose DDR bounding box is [d.ddr, ddr_hi): one run
// holds it all (d.shift), or every row is checked and the transfer is split.
bool Engine::translate_dma(Core& c, const char* what, bool is_load, uint64_t ddr_hi, DmaDesc& d) {
    const spyre_engine_mapping* r = map_find(c, d.ddr);
    if (r && ddr_hi - r->va <= r->len && (is_load || (r->flags & SPYRE_ENGINE_MAP_WRITE))) {
        d.shift = r->pa - r->va;
        return true;
    }
    d.split = true;
    for (uint64_t i2 = 0; i2 < d.n2; ++i2)
        for (uint64_t i1 = 0; i1 < d.n1; ++i1)
            if (!check_map_row(c, what, d.ddr + i2 * d.ds2 + i1 * d.ds1, d.len, !is_load))
                return false;
    return true;
}

// Copies one checked row, split where it crosses runs.
void Engine::copy_mapped_row(Core& c, uint8_t* lx, uint64_t va, uint64_t len, bool to_lx) {
    while (len) {
        const spyre_engine_mapping* r = map_find(c, va);
        const uint64_t off = va - r->va;
        const uint64_t n = std::min(len, r->len - off);
        uint8_t* m = mem_ + r->pa + off;
        if (to_lx)
            std::memcpy(lx, m, n);
        else
            std::memcpy(m, lx, n);
        lx += n;
        va += n;
        len -= n;
    }
}

}  // namespace spyre::eng
