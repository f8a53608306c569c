#!/usr/bin/env bash
# 'make bench': performance figures, never pass/fail. Two kinds, kept apart:
#  - modeled device time from the engine's cycle model (deterministic);
#  - host wall-clock of the functional engine, as a ratio to host libtorch measured in the
#    same process on the same shapes.
# Results are printed and kept in build/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/bench
tools/in-sysroot 'ninja -C build/cmake spyre_engine_bench spyre_engine_torch_compare >/dev/null'
echo "=== engine matmul throughput and modeled device time (Google Benchmark) ==="
tools/in-sysroot 'build/cmake/engine/spyre_engine_bench --benchmark_repetitions=3 \
	--benchmark_report_aggregates_only=true --benchmark_out=/src/build/bench/engine.json' |
	tee build/bench/engine.txt
echo
echo "=== engine vs host libtorch CPU matmul (same process, same shapes) ==="
tools/in-sysroot 'build/cmake/engine/spyre_engine_torch_compare' | tee build/bench/torch_compare.txt
