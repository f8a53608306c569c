// SPDX-License-Identifier: MIT
// LOAD / STORE: DDR <-> LX stick transfers.
#include "engine_impl.hpp"

namespace spyre::eng {

// Decodes and checks a LOAD/STORE/MCLOAD; d.bytes == 0 means nothing to move.
bool Engine::decode_dma(Core& c, const Instr& in, bool is_load, const char* what, DmaDesc& d) {
    d = DmaDesc{};
    const uint64_t lx = c.r[in.a];
    const uint64_t ddr = c.r[in.b] + static_cast<uint64_t>(in.imm);
    const uint64_t len = c.r[in.c];
    uint64_t n1 = 1, ds1 = 0, ls1 = 0, n2 = 1, ds2 = 0, ls2 = 0;
    if (in.d) {
        n1 = c.r[in.d], ds1 = c.r[in.d + 1], ls1 = c.r[in.d + 2];
        n2 = c.r[in.d + 3], ds2 = c.r[in.d + 4], ls2 = c.r[in.d + 5];
    }
    if (len == 0 || n1 == 0 || n2 == 0) return true;
    d = {lx, ddr, len, n1, ds1, ls1, n2, ds2, ls2, {}, 0};
    if (lx % kS || ddr % kS || ds1 % kS || ls1 % kS || ds2 % kS || ls2 % kS)
        return fail(c, SPYRE_ENGINE_ERR_MISALIGNED,
                    "%s: LX 0x%llx / DDR 0x%llx addresses and strides must be multiples of 128",
                    what, (unsigned long long)lx, (unsigned long long)ddr);
    const uint64_t padded = round_up(len, kS);
    if (len > lx_usable_ || n1 > lx_usable_ || n2 > lx_usable_ ||
        u128{n1} * n2 * padded > lx_usable_)
        return fail(c, SPYRE_ENGINE_ERR_TOO_LARGE, "%s: %llu x %llu rows of %llu B exceed LX", what,
                    (unsigned long long)n2, (unsigned long long)n1, (unsigned long long)len);
    // LX extent: bounding box of all rows
    u128 lx_hi = u128{lx} + u128{n1 - 1} * ls1 + u128{n2 - 1} * ls2 + (is_load ? padded : len);
    if (lx_hi > lx_usable_)
        return fail(c, SPYRE_ENGINE_ERR_LX_RANGE,
                    "%s: LX range 0x%llx..0x%llx beyond the usable LX %llu", what,
                    (unsigned long long)lx,
                    (unsigned long long)(lx_hi > UINT64_MAX ? UINT64_MAX : (uint64_t)lx_hi),
                    (unsigned long long)lx_usable_);
    // DDR: check every row (fast path: bounding box inside one window and the span)
    u128 ddr_hi = u128{ddr} + u128{n1 - 1} * ds1 + u128{n2 - 1} * ds2 + len;
    bool fast = false;
    if (ddr_hi <= UINT64_MAX && ddr >= c.span_base &&
        ddr_hi <= u128{c.span_base} + cfg_.span_bytes) {
        for (const auto& w : windows_)
            if (ddr >= w.addr && ddr_hi <= u128{w.addr} + w.size) fast = true;
    }
    if (!fast) {
        for (uint64_t i2 = 0; i2 < n2; ++i2)
            for (uint64_t i1 = 0; i1 < n1; ++i1) {
                u128 a = u128{ddr} + u128{i2} * ds2 + u128{i1} * ds1;
                if (a > UINT64_MAX)
                    return fail(c, SPYRE_ENGINE_ERR_DDR_WINDOW, "%s: DDR address overflow", what);
                if (!check_ddr_row(c, static_cast<uint64_t>(a), len)) return false;
            }
    }
    // translated job: the whole transfer through the mapping, before anything moves
    if (maps_ && !translate_dma(c, what, is_load, static_cast<uint64_t>(ddr_hi), d)) return false;
    d.lx_range = {lx, static_cast<uint64_t>(lx_hi)};
    d.bytes = n1 * n2 * padded;  // the DDR moves whole sticks
    return true;
}

// Moves the data of a checked transfer. Rows that follow each other without gaps on both sides
// (whole sticks, strides equal to the row) move as one: the same bytes, fewer calls.
void Engine::move_dma(Core& c, const DmaDesc& d, bool is_load) {
    const uint64_t lx = d.lx, ddr = d.ddr;
    uint64_t len = d.len, padded = round_up(len, kS);
    uint64_t n1 = d.n1, ds1 = d.ds1, ls1 = d.ls1, n2 = d.n2, ds2 = d.ds2, ls2 = d.ls2;
    if (timing_only_) return;
    if (!d.split && padded == len && (n1 == 1 || (ds1 == len && ls1 == len))) {
        len *= n1;
        n1 = 1;
        if (n2 > 1 && ds2 == len && ls2 == len) {
            len *= n2;
            n2 = 1;
        }
        padded = len;
    }
    if (is_load && !d.split && padded == len && n2 == 1 && (n1 == 1 || ls1 >= len) &&
        n1 * len >= kDeferMinBytes) {
        defer_load(c, lx, mem_ + (ddr + d.shift), ddr + d.shift, len, n1, ls1, ds1);
        return;
    }
    if (!is_load) {  // the deferred copies of this source are made before it changes
        const uint64_t lo = ddr + d.shift, hi = lo + (n1 - 1) * ds1 + (n2 - 1) * ds2 + len;
        // and the matmul kernels' packings of it dropped (Engine::ddr_gen_)
        if (ddr_gen_ && d.split)
            ddr_gen_ = fresh_ddr_gen();
        else if (ddr_gen_)
            kern::forget_packed(mem_ + lo, mem_ + hi);
        // this core's; every core's when they run one after another (as each would have copied
        // at its LOAD); the shared ones of other cores (LOADs before an ordering point: isa.md
        // memory ordering), under their owner's lock
        for (uint32_t i = 0; i < ncores_; ++i) {
            Core& o = cores_[i];
            if (&o != &c && !phase_inline_ && !o.shared) continue;
            std::unique_lock<std::recursive_mutex> g(*o.defer_mu, std::defer_lock);
            if (o.shared) g.lock();
            if (o.deferred.empty()) continue;
            if (d.split)
                lx_settle_all(o);
            else
                ddr_settle(o, lo, hi);
        }
    }
    // a STORE of rows following each other in LX (a sub-tile to strided DDR rows): their LX
    // bytes are touched at once, as the rows' touches would (the copies this STORE's DDR writes
    // could change were made above), then copied row by row
    const bool lx_block = !is_load && !d.split && n2 == 1 && ls1 == len;
    if (lx_block) {
        lx_touch(c, lx, lx + n1 * len);
        uint8_t* l = c.lx + lx;
        uint8_t* a = mem_ + (ddr + d.shift);
        if (len == kS)  // one stick per row: an inline copy
            for (uint64_t i1 = 0; i1 < n1; ++i1, l += kS, a += ds1) std::memcpy(a, l, kS);
        else
            for (uint64_t i1 = 0; i1 < n1; ++i1, l += len, a += ds1) std::memcpy(a, l, len);
        return;
    }
    for (uint64_t i2 = 0; i2 < n2; ++i2)
        for (uint64_t i1 = 0; i1 < n1; ++i1) {
            uint8_t* l = c.lx + lx + i2 * ls2 + i1 * ls1;
            const uint64_t a = ddr + i2 * ds2 + i1 * ds1;
            if (is_load) {
                lx_overwrite(c, l - c.lx, l - c.lx + padded);
                if (d.split)
                    copy_mapped_row(c, l, a, len, true);
                else
                    std::memcpy(l, mem_ + (a + d.shift), len);
                if (padded != len) std::memset(l + len, 0, padded - len);
            } else {
                lx_touch(c, l - c.lx, l - c.lx + len);
                if (d.split)
                    copy_mapped_row(c, l, a, len, false);
                else
                    std::memcpy(mem_ + (a + d.shift), l, len);
            }
        }
}

// A LOAD of n rows of len bytes (whole sticks) to LX lx (rows ls apart) from src (rows ds apart,
// device-memory offset ddr) recorded as a deferred copy: the LX sticks are written, their bytes
// are copied when needed (core.hpp `Deferred`).
void Engine::defer_load(Core& c, uint64_t lx, const uint8_t* src, uint64_t ddr, uint64_t len,
                        uint64_t n, uint64_t ls, uint64_t ds) {
    if (n == 1) ls = ds = len;
    const uint64_t hi = lx + (n - 1) * ls + len;
    if (ls == len)
        lx_overwrite(c, lx, hi);
    else
        for (uint64_t i = 0; i < n; ++i) lx_overwrite(c, lx + i * ls, lx + i * ls + len);
    std::unique_lock<std::recursive_mutex> g(*c.defer_mu, std::defer_lock);
    if (c.shared) g.lock();
    if (c.deferred.size() >= kMaxDeferred) {  // the oldest is copied now
        lx_settle(c, c.deferred[0].lo, c.deferred[0].lo + 1, false);
    }
    c.deferred.push_back({lx, hi, len, ls, n, ds, src, ddr, ddr + (n - 1) * ds + len});
}

bool Engine::exec_dma(Core& c, const Instr& in, bool is_load) {
    DmaDesc d;
    if (!decode_dma(c, in, is_load, is_load ? "LOAD" : "STORE", d)) return false;
    if (d.bytes == 0) return true;
    if (!dma_op(c, is_load, d.bytes, d.lx_range)) return false;
    (is_load ? c.stats.ddr_read_bytes : c.stats.ddr_write_bytes) += d.bytes;
    move_dma(c, d, is_load);
    return true;
}

}  // namespace spyre::eng
