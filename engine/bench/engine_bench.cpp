// SPDX-License-Identifier: MIT
// Functional engine throughput (host time) for a 512x512x512 matmul over 32 cores, fp16 and fp32
// inputs, with 1 host thread and with all host threads. Not run by ctest.
//   spyre_engine_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <random>
#include <thread>
#include <vector>

#include "../tests/matmul_program.hpp"
#include "spyre/engine.h"
#include "spyre/numerics.hpp"

namespace {

void BM_Matmul(benchmark::State& state, spyre::isa::DType in) {
    const uint64_t n = static_cast<uint64_t>(state.range(0));
    const unsigned threads = state.range(1) ? static_cast<unsigned>(state.range(1))
                                            : std::max(1u, std::thread::hardware_concurrency());
    spyre_engine_config cfg;
    spyre_engine_config_default(&cfg);
    cfg.num_threads = threads;
    spyre_engine* eng = spyre_engine_create(&cfg);
    const uint64_t es = spyre::isa::dtype_size(in);
    const uint64_t A = 0, B = n * n * es, C = 2 * n * n * es;
    std::vector<uint8_t> mem(3 * n * n * 4 + 4096);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-1, 1);
    for (uint64_t i = 0; i < 2 * n * n; ++i) {
        float v = d(rng);
        if (in == spyre::isa::DType::F16) {
            uint16_t h = spyre::num::f32_to_f16(v);
            std::memcpy(mem.data() + 2 * i, &h, 2);
        } else {
            std::memcpy(mem.data() + 4 * i, &v, 4);
        }
    }
    auto prog = spyre::test::build_matmul_program(n, n, n, 32, in);
    const uint64_t args[3] = {A, B, C};
    spyre_engine_window win{0, mem.size()};
    spyre_engine_job job{};
    job.program = prog.data();
    job.program_size = prog.size();
    job.args = args;
    job.num_args = 3;
    job.mem = mem.data();
    job.mem_size = mem.size();
    job.windows = &win;
    job.num_windows = 1;
    spyre_engine_result res;
    for (auto _ : state) {
        if (spyre_engine_run(eng, &job, &res) != 0) {
            state.SkipWithError(res.message);
            break;
        }
    }
    const double flops = 2.0 * n * n * n;
    state.counters["host_GFLOPs"] =
        benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["threads"] = threads;
    state.counters["modeled_us"] = res.total_cycles / (cfg.clock_hz / 1e6);
    state.counters["modeled_TFLOPs"] = flops / (res.total_cycles / double(cfg.clock_hz)) / 1e12;
    spyre_engine_destroy(eng);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Matmul, fp16, spyre::isa::DType::F16)
    ->Args({512, 1})
    ->Args({512, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, fp32, spyre::isa::DType::F32)
    ->Args({512, 1})
    ->Args({512, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
