#include "SpyreProfiler.h"

#include <spyre/ops.h>

#include <atomic>
#include <mutex>

#include "SpyreException.h"
#include "SpyreTrace.h"

namespace torch_spyre::profiler {
namespace {

std::atomic<bool> g_active{false};
std::mutex g_mu;
std::vector<OpRecord> g_records;

}  // namespace

void start() {
    std::lock_guard lock(g_mu);
    g_records.clear();
    g_active = true;
}

std::vector<OpRecord> stop() {
    std::lock_guard lock(g_mu);
    g_active = false;
    return std::move(g_records);
}

bool active() { return g_active; }

void record_last_op(const char* aten_op) {
    const bool traced = trace::active();
    if (!g_active && !traced) return;
    spyre_op_info info{};
    SPYRE_CHECK(spyre_op_get_last_info(&info));
    if (traced) trace::kernel(aten_op, info);  // torch.profiler's device track
    if (!g_active) return;
    OpRecord r;
    r.aten_op = aten_op;
    r.op = info.op;
    r.plan = info.plan;
    r.cores = info.cores;
    r.launches = info.launches;
    r.modeled_ns = info.modeled_ns;
    r.plan_cached = info.plan_cached != 0;
    std::lock_guard lock(g_mu);
    if (g_active) g_records.push_back(std::move(r));
}

}  // namespace torch_spyre::profiler
