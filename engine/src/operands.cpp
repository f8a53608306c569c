// SPDX-License-Identifier: MIT
// Operand checks shared by the instructions: LX ranges, DDR windows and spans; failures.
#include <cstdarg>
#include <cstdio>

#include "engine_impl.hpp"

namespace spyre::eng {

bool Engine::fail(Core& c, int code, const char* fmt, ...) {
    c.fail.code = code;
    c.fail.core = static_cast<int>(c.id);
    c.fail.pc = c.pc;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(c.fail.msg, sizeof c.fail.msg, fmt, ap);
    va_end(ap);
    c.st = St::Failed;
    return false;
}

// LX operand: rows of row_bytes at addr + i*stride must lie in the usable LX [0, lx_usable).
bool Engine::check_lx(Core& c, const char* what, uint64_t addr, uint64_t rows, uint64_t stride,
                      uint64_t row_bytes, Range* out) {
    if (rows == 0 || row_bytes == 0) {
        *out = {0, 0};
        return true;
    }
    u128 hi = u128{addr} + u128{rows - 1} * stride + row_bytes;
    if (hi > lx_usable_)
        return fail(
            c, SPYRE_ENGINE_ERR_LX_RANGE,
            "%s: LX range 0x%llx + %llu rows x %llu B (stride %llu) beyond the usable LX %llu",
            what, (unsigned long long)addr, (unsigned long long)rows, (unsigned long long)row_bytes,
            (unsigned long long)stride, (unsigned long long)lx_usable_);
    *out = {addr, static_cast<uint64_t>(hi)};
    return true;
}

bool Engine::check_ddr_row(Core& c, uint64_t addr, uint64_t len) {
    bool in_window = false;
    for (const auto& w : windows_) {
        if (addr >= w.addr && len <= w.size && addr - w.addr <= w.size - len) {
            in_window = true;
            break;
        }
    }
    if (!in_window)
        return fail(c, SPYRE_ENGINE_ERR_DDR_WINDOW,
                    "DDR access 0x%llx+%llu outside the job's memory windows",
                    (unsigned long long)addr, (unsigned long long)len);
    if (addr < c.span_base || addr - c.span_base > cfg_.span_bytes ||
        len > cfg_.span_bytes - (addr - c.span_base))
        return fail(c, SPYRE_ENGINE_ERR_DDR_SPAN,
                    "DDR access 0x%llx+%llu outside the core's span 0x%llx+%llu",
                    (unsigned long long)addr, (unsigned long long)len,
                    (unsigned long long)c.span_base, (unsigned long long)cfg_.span_bytes);
    return true;
}

}  // namespace spyre::eng
