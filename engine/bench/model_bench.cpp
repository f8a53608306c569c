// SPDX-License-Identifier: MIT
// Modeled device time of the cycle model's calibration case beside IBM's published figure
// (Documentation/isa.md "Calibration"). Deterministic: a model figure, not a host timing.
#include <cstdio>
#include <vector>

#include "spyre/engine.h"
#include "spyre/programs/softmax_naive.hpp"

int main() {
    spyre_engine_config cfg;
    spyre_engine_config_default(&cfg);
    cfg.num_cores = 1;
    spyre_engine* eng = spyre_engine_create(&cfg);
    const uint64_t rows = 512, cols = 1024;
    const auto p = spyre::programs::build_softmax_naive(rows, cols);
    std::vector<uint8_t> mem(8u << 20);
    spyre_engine_window win{0, mem.size()};
    uint64_t cycles = 0, ddr = 0;
    for (const auto& k : p.kernels) {
        spyre_engine_job job{};
        job.program = k.data();
        job.program_size = k.size();
        job.num_cores = 1;
        job.mem = mem.data();
        job.mem_size = mem.size();
        job.windows = &win;
        job.num_windows = 1;
        spyre_engine_result r;
        if (spyre_engine_run(eng, &job, &r) != 0) {
            std::fprintf(stderr, "calibration kernel failed: %s\n", r.message);
            return 1;
        }
        cycles += r.total_cycles;
        ddr += r.ddr_read_bytes + r.ddr_write_bytes;
    }
    spyre_engine_destroy(eng);
    const double us = cycles * 1e6 / static_cast<double>(cfg.clock_hz);
    std::printf("%-52s %10s %10s %8s\n", "case", "model us", "IBM us", "diff");
    std::printf("%-52s %10.2f %10.2f %+7.1f%%\n", "softmax (512,1024) fp16, 1 core, no LX planning",
                us, 32.51, (us / 32.51 - 1) * 100);
    std::printf("  (4 launches, %.2f MiB DDR traffic; calibration tolerance 10%%)\n",
                ddr / 1048576.0);
    return 0;
}
