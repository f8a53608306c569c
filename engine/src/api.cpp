// SPDX-License-Identifier: MIT
// C API of the engine (include/spyre/engine.h) and its default configuration.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "engine_impl.hpp"

// ---------------------------------------------------------------------------------------------
// C API

namespace spyre::eng {

bool config_valid(const spyre_engine_config& c) {
    return c.num_cores >= 1 && c.num_cores <= SPYRE_ENGINE_MAX_CORES && c.corelets_per_core >= 1 &&
           c.pe_rows >= 1 && c.pe_lanes >= 1 && c.lx_bytes >= kS && c.lx_bytes % kS == 0 &&
           c.lx_bytes <= (uint64_t{1} << 30) && c.clock_hz >= 1 && c.ddr_bytes_per_s >= 1 &&
           c.dma_port_bytes_per_cycle >= 1 && c.span_bytes >= kS && c.mm_int8_speedup >= 1 &&
           c.mm_fp32_slowdown >= 1 && c.vec_lanes_16 >= 1 && c.vec_lanes_32 >= 1 &&
           c.vec_special_cycles >= 1 && c.ring_bytes_per_cycle >= 1 && c.queue_depth >= 1 &&
           c.queue_depth <= kMaxQueueDepth && c.num_threads <= 1024 && c.lx_reserve_pct < 100 &&
           c.vec_lx_sticks_per_cycle >= 1 && c.host_dma_bytes_per_s >= 1;
}

}  // namespace spyre::eng

struct spyre_engine {
    spyre::eng::Engine impl;
    explicit spyre_engine(const spyre_engine_config& c) : impl(c) {}
};

extern "C" {

void spyre_engine_config_default(spyre_engine_config* c) {
    if (!c) return;
    std::memset(c, 0, sizeof *c);
    c->num_cores = 32;
    c->corelets_per_core = 2;
    c->pe_rows = 8;
    c->pe_lanes = 64;
    c->lx_bytes = 2u << 20;
    c->clock_hz = 1500000000ull;
    c->ddr_bytes_per_s = 204800000000ull;
    c->dma_port_bytes_per_cycle = 256;
    c->dma_latency = 150;
    c->span_bytes = 256ull << 20;
    c->mm_fill_latency = 16;
    c->mm_int8_speedup = 2;
    c->mm_fp32_slowdown = 4;
    c->vec_lanes_16 = 64;
    c->vec_lanes_32 = 32;
    c->vec_latency = 8;
    c->vec_special_cycles = 2;
    c->ring_bytes_per_cycle = 128;
    c->ring_hop_latency = 8;
    c->barrier_latency = 16;
    c->queue_depth = 4;
    c->num_threads = 0;
    c->ring_max_bytes = 8ull << 20;
    c->max_instructions = 1000000000ull;
    c->max_cycles = 15000000000ull;
    c->launch_overhead_cycles = 500;
    c->lx_reserve_pct = 20;
    c->vec_lx_sticks_per_cycle = 2;
    c->dma_setup_cycles = 256;
    c->host_dma_bytes_per_s = 60000000000ull;
}

uint64_t spyre_engine_lx_usable(const spyre_engine_config* c) {
    if (!c) return 0;
    const uint64_t sticks = c->lx_bytes / spyre::eng::kS;
    return sticks * (100 - std::min<uint32_t>(c->lx_reserve_pct, 100)) / 100 * spyre::eng::kS;
}

uint64_t spyre_engine_copy_cycles(const spyre_engine_config* c, int kind, uint64_t bytes) {
    if (!c || !c->clock_hz) return 0;
    // bytes / rate in cycles, rounded up, without overflow for any 64-bit byte count
    auto at = [&](uint64_t bytes_per_s) -> uint64_t {
        const unsigned __int128 num = static_cast<unsigned __int128>(bytes) * c->clock_hz;
        const unsigned __int128 cyc = (num + bytes_per_s - 1) / bytes_per_s;
        return cyc > UINT64_MAX / 2 ? UINT64_MAX / 2 : static_cast<uint64_t>(cyc);
    };
    uint64_t t = 0;
    switch (kind) {
        case SPYRE_COPY_HOST_TO_DEVICE:
        case SPYRE_COPY_DEVICE_TO_HOST:
            t = std::max(at(c->host_dma_bytes_per_s), at(c->ddr_bytes_per_s));
            break;
        case SPYRE_COPY_DEVICE_TO_DEVICE:
            t = at(c->ddr_bytes_per_s) * 2;
            break;
        default:
            t = at(c->ddr_bytes_per_s);
            break;
    }
    return c->dma_setup_cycles + t;
}

spyre_engine* spyre_engine_create(const spyre_engine_config* cfg) {
    spyre_engine_config c;
    if (cfg)
        c = *cfg;
    else
        spyre_engine_config_default(&c);
    if (!spyre::eng::config_valid(c)) return nullptr;
    try {
        return new spyre_engine(c);
    } catch (...) {
        return nullptr;
    }
}

void spyre_engine_destroy(spyre_engine* e) { delete e; }

const spyre_engine_config* spyre_engine_get_config(const spyre_engine* e) {
    return e ? &e->impl.config() : nullptr;
}

// MAC totals in fp16 slots and the per-core peak of the types used (engine.h).
static void finish_mac_stats(const spyre_engine_config& cfg, spyre_engine_result& r) {
    r.mac_slots = 0;
    for (uint32_t i = 0; i < r.num_cores && i < SPYRE_ENGINE_MAX_CORES; ++i)
        r.mac_slots += r.cores[i].mac_slots;
    const double fp16_peak = double(cfg.corelets_per_core) * cfg.pe_rows * cfg.pe_lanes;
    r.mac_peak =
        r.mac_slots
            ? static_cast<uint32_t>(std::llround(fp16_peak * double(r.macs) / double(r.mac_slots)))
            : 0;
}

int spyre_engine_run(spyre_engine* e, const spyre_engine_job* job, spyre_engine_result* res) {
    if (!job) e = nullptr;  // resuming is spyre_engine_run_slice's
    return spyre_engine_run_slice(e, job, 0, res);
}

int spyre_engine_run_slice(spyre_engine* e, const spyre_engine_job* job, uint64_t slice,
                           spyre_engine_result* res) {
    spyre_engine_result local;
    spyre_engine_result* r = res ? res : &local;
    if (!e) {
        std::memset(r, 0, sizeof *r);
        r->status = -1;
        r->error = SPYRE_ENGINE_ERR_INVALID_ARGUMENT;
        r->core = -1;
        std::snprintf(r->message, sizeof r->message, "NULL engine or job");
        return r->error;
    }
    // Host resource failures anywhere in the engine (also on a pool thread: the pool hands
    // exceptions back to this thread) end the job with NO_MEMORY; nothing escapes the C API.
    auto host_fail = [r](const char* what) {
        std::memset(r, 0, sizeof *r);
        r->status = -1;
        r->error = SPYRE_ENGINE_ERR_NO_MEMORY;
        r->core = -1;
        std::snprintf(r->message, sizeof r->message, "%s", what);
        return r->error;
    };
    try {
        const int rc = e->impl.run_slice(job, slice, *r);
        if (rc != SPYRE_ENGINE_PREEMPTED) finish_mac_stats(e->impl.config(), *r);
        return rc;
    } catch (const std::bad_alloc&) {
        return host_fail("out of host memory");
    } catch (const std::exception& ex) {
        char msg[SPYRE_ENGINE_MSG_LEN];
        std::snprintf(msg, sizeof msg, "host error in the engine: %s", ex.what());
        return host_fail(msg);
    } catch (...) {
        return host_fail("host error in the engine");
    }
}

int spyre_engine_run_linked(spyre_engine* e, const spyre_engine_job* parts, uint32_t num_parts,
                            spyre_engine_result* res) {
    spyre_engine_result local;
    spyre_engine_result* r = res ? res : &local;
    auto fail_with = [r](int code, const char* what) {
        std::memset(r, 0, sizeof *r);
        r->status = -1;
        r->error = code;
        r->core = -1;
        std::snprintf(r->message, sizeof r->message, "%s", what);
        return r->error;
    };
    if (!e || !parts) return fail_with(SPYRE_ENGINE_ERR_INVALID_ARGUMENT, "NULL engine or parts");
    try {
        const int rc = e->impl.run_linked(parts, num_parts, *r);
        finish_mac_stats(e->impl.config(), *r);
        return rc;
    } catch (const std::bad_alloc&) {
        return fail_with(SPYRE_ENGINE_ERR_NO_MEMORY, "out of host memory");
    } catch (const std::exception& ex) {
        char msg[SPYRE_ENGINE_MSG_LEN];
        std::snprintf(msg, sizeof msg, "host error in the engine: %s", ex.what());
        return fail_with(SPYRE_ENGINE_ERR_NO_MEMORY, msg);
    } catch (...) {
        return fail_with(SPYRE_ENGINE_ERR_NO_MEMORY, "host error in the engine");
    }
}

void spyre_engine_discard(spyre_engine* e) {
    if (e) e->impl.discard();
}

uint64_t spyre_engine_context_bytes(const spyre_engine* e) {
    return e ? e->impl.context_bytes() : 0;
}

void spyre_engine_cancel(spyre_engine* e) {
    if (e) e->impl.cancel();
}

const char* spyre_engine_error_name(int error) {
    static const char* const names[] = {"OK",
                                        "INVALID_ARGUMENT",
                                        "BAD_PROGRAM",
                                        "ILLEGAL_OPCODE",
                                        "BAD_REGISTER",
                                        "BAD_OPERAND",
                                        "BAD_LOOP",
                                        "BAD_BRANCH",
                                        "NO_HALT",
                                        "BAD_ARG",
                                        "LX_RANGE",
                                        "DDR_WINDOW",
                                        "DDR_SPAN",
                                        "MISALIGNED",
                                        "DIV_ZERO",
                                        "DEADLOCK",
                                        "COLLECTIVE_MISMATCH",
                                        "RING",
                                        "INSTR_BUDGET",
                                        "CYCLE_BUDGET",
                                        "TOO_LARGE",
                                        "CANCELLED",
                                        "NO_MEMORY",
                                        "MMU_FAULT"};
    static_assert(sizeof names / sizeof names[0] == SPYRE_ENGINE_ERR_COUNT);
    if (error < 0 || error >= SPYRE_ENGINE_ERR_COUNT) return "UNKNOWN";
    return names[error];
}

}  // extern "C"
