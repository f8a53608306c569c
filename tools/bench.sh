#!/usr/bin/env bash
# 'make bench': performance figures, never pass/fail. Two kinds, kept apart:
#  - modeled device time from the engine's cycle model (deterministic);
#  - host wall-clock of the functional engine, as a ratio to host libtorch measured in the
#    same process on the same shapes (BENCH_REPS repetitions, default 5, median).
# Results are printed and kept in build/bench/; build/bench/report.html draws them (plots and
# tables in one file, tools/bench/report.py on the host's python3-matplotlib).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/bench
# The report's inputs: none left from an earlier run (a section this run cannot fill is left out).
rm -f build/bench/model.json build/bench/torch_compare.json build/bench/torch_compile.json
tools/in-sysroot 'ninja -C build/cmake spyre_engine_bench spyre_engine_torch_compare spyre_engine_model_bench >/dev/null'
echo "=== cycle model calibration (modeled device time vs IBM's measurement) ==="
tools/in-sysroot 'build/cmake/engine/spyre_engine_model_bench' | tee build/bench/model_calibration.txt
echo
echo "=== op library plans on the cycle model (modeled device time; build/bench/model.json) ==="
tools/in-sysroot 'ninja -C build/cmake spyre-ops-bench >/dev/null && build/cmake/tools/bench/spyre-ops-bench /src/build/bench/model.json' |
	tee build/bench/ops.txt
echo
echo "=== engine matmul throughput and modeled device time (Google Benchmark) ==="
tools/in-sysroot 'build/cmake/engine/spyre_engine_bench --benchmark_repetitions=3 \
	--benchmark_report_aggregates_only=true --benchmark_out=/src/build/bench/engine.json' |
	tee build/bench/engine.txt
echo
echo "=== functional speed: engine vs host libtorch CPU matmul (same process, same shapes; target: engine <= 1.5x libtorch, one thread each) ==="
tools/in-sysroot "build/cmake/engine/spyre_engine_torch_compare --json /src/build/bench/torch_compare.json \
	${BENCH_REPS:-5}" | tee build/bench/torch_compare.txt

# libspyre runtime (streams, async submission, copy bandwidth, overlap): on the simulator on
# the host, and on the kernel path in a VM when the driver and QEMU are built (make build).
tools/in-sysroot 'ninja -C build/cmake spyre-bench >/dev/null'
echo
echo "=== libspyre runtime on the simulator (host) ==="
tools/in-sysroot 'SPYRE_BACKEND=sim build/cmake/libspyre/spyre-bench' | tee build/bench/libspyre_sim.txt
# Collectives between ranks on the simulator (issue 25): all-reduce bus bandwidth (nccl-tests'
# busbw) on 2 and 4 ranks: one process per rank (host-staged), then one thread per rank (the
# p2p transport, card to card) and the same threads forced host-staged.
tools/in-sysroot 'ninja -C build/cmake spyre-comm-bench >/dev/null'
echo
echo "=== libspyre collectives on the simulator, 2 and 4 ranks (processes, threads p2p/host-staged) ==="
for ranks in 2 4; do
	tools/in-sysroot "SPYRE_BACKEND=sim build/cmake/tools/bench/spyre-comm-bench $ranks"
	tools/in-sysroot "SPYRE_BACKEND=sim build/cmake/tools/bench/spyre-comm-bench --threads $ranks"
	tools/in-sysroot "SPYRE_BACKEND=sim SPYRE_COMM_TRANSPORT=host-staged build/cmake/tools/bench/spyre-comm-bench --threads $ranks"
done | tee build/bench/comm_sim.txt
# Broadcast from and reduce to rank 0 on 4 ranks (threads, p2p), ring against binomial tree for
# small messages (libspyre.md "Tree against ring for broadcast and reduce").
for op in broadcast reduce; do
	for algo in ring tree; do
		echo "SPYRE_COMM_ALGO=$algo"
		tools/in-sysroot "SPYRE_BACKEND=sim SPYRE_COMM_ALGO=$algo build/cmake/tools/bench/spyre-comm-bench --threads --op $op 4 1024 8192 65536 262144"
	done
done | tee -a build/bench/comm_sim.txt
if ls driver/spyre.ko >/dev/null 2>&1 && [ "${BENCH_VM:-1}" != 0 ]; then
	echo
	echo "=== libspyre runtime on the kernel path (VM, TCG; set BENCH_VM=0 to skip) ==="
	tools/vm/spyre-vm --cards 1 -- sh -c 'modprobe spyre && build/cmake/libspyre/spyre-bench' |
		tee build/bench/libspyre_vm.txt
	# Issue 25 on the card model: all-reduce busbw card to card through spyre.ko on 2 and 4 cards
	# (processes and threads), and the tensor-parallel decode step on 1, 2 and 4 cards
	# (libspyre.md "Device-side waits", torch_spyre.md "Tensor parallelism"); about 6 minutes.
	echo
	echo "=== collectives and tensor-parallel decode on 4 cards (VM, card model) ==="
	tools/vm/spyre-vm --cards 4 -- tools/bench/multicard.sh | tee build/bench/multicard_vm.txt
fi

# torch_spyre: per-op dispatch overhead against the CPU op (tiny tensors) and a decode step of
# the Granite-style decoder split into host time, transfers and modeled device time
# (Documentation/torch_spyre.md "Dispatch overhead"); only when torch_spyre is built.
if tools/in-sysroot 'ninja -C build/cmake torch_spyre_C >/dev/null 2>&1'; then
	echo
	tools/in-sysroot 'PYTHONPATH=build/cmake/torch_spyre/python SPYRE_BACKEND=sim \
		python3 torch_spyre/tools/dispatch_bench.py' | tee build/bench/torch_spyre_dispatch.txt
	# PyTorch's whole op_db on spyre against the CPU: per dtype, how many op x dtype pairs run
	# on the card, through the fallback, or fail (Documentation/torch_spyre.md).
	echo
	echo "=== torch_spyre: PyTorch's OpInfo database, every op x dtype against the CPU ==="
	tools/in-sysroot 'PYTHONPATH=build/cmake/torch_spyre/python SPYRE_BACKEND=sim \
		python3 torch_spyre/tools/opdb_sweep.py --quiet --json build/bench/opdb.json \
		--markdown build/bench/opdb.md' | tail -n 1 || echo "(some op x dtype failed: listed below the table)"
	head -n 20 build/bench/opdb.md
	# Which operators of everyday programs still run on the CPU (issue 23's fallback census).
	echo
	echo "=== torch_spyre: fallback census of a fixed corpus of programs ==="
	tools/in-sysroot 'PYTHONPATH=build/cmake/torch_spyre/python SPYRE_BACKEND=sim \
		python3 torch_spyre/tools/fallback_census.py --json build/bench/fallback_census.json \
		--markdown build/bench/fallback_census.md' || echo "(a program differs from the CPU: see above)"
	# torch.compile against eager: launches, modeled device time and host time per call of a
	# pointwise chain and of a TinyGranite decode step (Documentation/torch_compile.md).
	echo
	echo "=== torch.compile on spyre against eager (simulator) ==="
	tools/in-sysroot 'PYTHONPATH=build/cmake/torch_spyre/python SPYRE_BACKEND=sim \
		python3 torch_spyre/tools/compile_bench.py --json build/bench/torch_compile.json' |
		tee build/bench/torch_compile.txt
	# Granite sizes (a Granite-shaped layer, a Granite-8B-shaped model) on a timing-only
	# simulated card: modeled times exact, nothing computed (Documentation/torch_compile.md
	# "Granite sizes"); its records are added to torch_compile.json.
	echo
	echo "=== torch.compile on spyre: Granite sizes (timing-only simulator) ==="
	tools/in-sysroot 'PYTHONPATH=build/cmake/torch_spyre/python SPYRE_BACKEND=sim SPYRE_SIM_TIMING_ONLY=1 \
		python3 torch_spyre/tools/compile_bench.py granite --json build/bench/torch_compile.json' |
		tee -a build/bench/torch_compile.txt
fi

# The HTML report: the op library on the roofline, the engine against libtorch, eager against
# torch.compile (Documentation/user-guide.md "Benchmarks").
echo
echo "=== report ==="
py=$(tools/setup/host-matplotlib.sh)
"$py" tools/bench/report.py --bench-dir build/bench --out build/bench/report.html
echo "report: $PWD/build/bench/report.html"
