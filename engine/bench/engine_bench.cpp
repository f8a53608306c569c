// SPDX-License-Identifier: MIT
// Functional engine throughput (host wall time) of a square matmul over 32 cores
// (spyre::programs::build_matmul_program) for 256^3, 512^3 and 1024^3, fp16 and fp32 inputs, with
// one host thread and with all host threads; plus the modeled device time. Not run by ctest.
//   spyre_engine_bench --benchmark_counters_tabular=true --benchmark_repetitions=5
//
// Counters: host_GFLOPs (engine functional throughput), threads, modeled_us (device time from the
// cycle model) and modeled_TFLOPs.
//
// BM_Copy: a DDR-bound copy (LOAD + STORE of 128-byte rows, 8 MiB over 32 cores, one host thread),
// physical (translated:0) or through 4 KiB runs mapped in reverse order (translated:1: a new run
// every 32 rows), the cost of job address translation. Counter: host_GBps (bytes copied).
#include <benchmark/benchmark.h>

#include "bench_matmul.hpp"
#include "spyre/program_builder.hpp"

namespace {

void BM_Matmul(benchmark::State& state, spyre::isa::DType in) {
    const uint64_t n = static_cast<uint64_t>(state.range(0));
    spyre::bench::MatmulRig rig(n, n, n, in, static_cast<unsigned>(state.range(1)));
    try {
        rig.run();  // warm up: thread-local buffers, page faults
        for (auto _ : state) rig.run();
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
        return;
    }
    state.counters["host_GFLOPs"] =
        benchmark::Counter(rig.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["threads"] = rig.threads;
    state.counters["modeled_us"] = rig.modeled_seconds() * 1e6;
    state.counters["modeled_TFLOPs"] = rig.flops() / rig.modeled_seconds() * 1e-12;
}

// Args: {size, host threads (0 = all)}
void Shapes(benchmark::internal::Benchmark* b) {
    for (int64_t n : {256, 512, 1024})
        for (int64_t t : {1, 0}) b->Args({n, t});
    b->ArgNames({"n", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

void BM_Copy(benchmark::State& state) {
    const bool translated = state.range(0) != 0;
    constexpr uint64_t kBytes = 8u << 20, kCores = 32, kShare = kBytes / kCores, kPage = 4096;
    spyre_engine_config cfg;
    spyre_engine_config_default(&cfg);
    cfg.num_threads = 1;
    spyre_engine* eng = spyre_engine_create(&cfg);
    std::vector<uint8_t> mem(2 * kBytes, 1);
    std::vector<spyre_engine_mapping> maps;
    for (uint64_t i = 0; i < 2 * kBytes / kPage; ++i)
        maps.push_back({i * kPage, 2 * kBytes - (i + 1) * kPage, kPage, SPYRE_ENGINE_MAP_WRITE, 0});
    spyre::ProgramBuilder b;
    b.muli(3, 1, kShare);  // r1 = core id
    b.addi(4, 3, kBytes);
    b.set_regs(10, {kShare / 128, 128, 128, 1, 0, 0});
    b.li(5, 0);
    b.li(6, 128);
    b.load(5, 3, 6, 10);
    b.store(5, 4, 6, 10);
    b.halt();
    const std::vector<uint8_t> prog = b.finish();
    const spyre_engine_window win{0, 2 * kBytes};
    spyre_engine_job job{};
    job.program = prog.data();
    job.program_size = prog.size();
    job.num_cores = kCores;
    job.mem = mem.data();
    job.mem_size = mem.size();
    job.windows = &win;
    job.num_windows = 1;
    const spyre_engine_mapping one{0, 0, 2 * kBytes, SPYRE_ENGINE_MAP_WRITE, 0};
    if (state.range(0) == 2) {
        job.mappings = &one;
        job.num_mappings = 1;
    } else if (translated) {
        job.mappings = maps.data();
        job.num_mappings = static_cast<uint32_t>(maps.size());
    }
    spyre_engine_result res{};
    spyre_engine_run(eng, &job, &res);  // warm up: scratchpad pages, thread-local buffers
    for (auto _ : state) {
        if (spyre_engine_run(eng, &job, &res) != SPYRE_ENGINE_OK) {
            state.SkipWithError(res.message);
            break;
        }
    }
    state.counters["host_GBps"] =
        benchmark::Counter(kBytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    spyre_engine_destroy(eng);
}

}  // namespace

BENCHMARK(BM_Copy)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("translated")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, fp16, spyre::isa::DType::F16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Matmul, fp32, spyre::isa::DType::F32)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Matmul, bf16, spyre::isa::DType::BF16)
    ->Args({512, 1})
    ->Args({512, 0})
    ->ArgNames({"n", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
