// SPDX-License-Identifier: MIT
// Functional engine throughput (host wall time) of a square matmul over 32 cores
// (spyre::programs::build_matmul_program) for 256^3, 512^3 and 1024^3, fp16 and fp32 inputs, with
// one host thread and with all host threads; plus the modeled device time. Not run by ctest.
//   spyre_engine_bench --benchmark_counters_tabular=true --benchmark_repetitions=5
//
// Counters: host_GFLOPs (engine functional throughput), threads, modeled_us (device time from the
// cycle model) and modeled_TFLOPs.
#include <benchmark/benchmark.h>

#include "bench_matmul.hpp"

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

}  // namespace

BENCHMARK_CAPTURE(BM_Matmul, fp16, spyre::isa::DType::F16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Matmul, fp32, spyre::isa::DType::F32)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Matmul, bf16, spyre::isa::DType::BF16)->Args({512, 1})->Args({512, 0})
    ->ArgNames({"n", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
