// Per-op device time: while a torch_spyre profiler is active, every op-library launch of the
// aten kernels is recorded with libspyre's spyre_op_get_last_info (plan, cores, launches and
// the cycle model's device time, known when the op is queued). torch_spyre/profiler.py is the
// Python face (`with torch_spyre.profiler.profile() as p: ...; print(p.table())`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch_spyre::profiler {

struct OpRecord {
    std::string aten_op;  // the kernel that launched it ("aten::mm")
    std::string op;       // libspyre's op ("matmul", "add", "copy", ...)
    std::string plan;
    uint32_t cores = 0;
    uint32_t launches = 0;
    uint64_t modeled_ns = 0;
    bool plan_cached = false;
};

// Starts recording (all threads of the process); clears earlier records.
void start();
// Stops recording and returns the records in launch order.
std::vector<OpRecord> stop();
bool active();

// Called by the aten kernels right after a successful op-library call.
void record_last_op(const char* aten_op);

}  // namespace torch_spyre::profiler
