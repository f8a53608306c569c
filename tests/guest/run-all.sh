#!/bin/bash
# Guest test suites, run inside the VM by tests/check.sh (one boot for all of them).
# Each suite's pass/fail/skip counts and wall time go to build/test-results/$GUEST_RESULTS_PREFIX-<suite>.counts
# (prefix default "guest"; "debug" for the debug-kernel run), and its full output to the .log
# of the same name.
set -u
cd /src
# The program cache on disk the host's tests filled (tests/check.sh): the same test binaries and
# libspyre here, so the guest reads their programs instead of generating them under TCG.
export SPYRE_PROGRAM_CACHE_DIR=/src/build/program-cache
out=build/test-results
pfx=${GUEST_RESULTS_PREFIX:-guest}
mkdir -p "$out"
rm -f "$out"/"$pfx"-*.counts

# A suite that hangs fails alone: the later suites still run inside the VM's own time limit.
debug_kernel=$([ -d /sys/kernel/debug/kunit ] && echo 1)
suite_timeout=$([ -n "$debug_kernel" ] && echo 900 || echo 600)
# kmemleak's own scan every 10 minutes (each about half a minute of a vCPU under TCG) is off: the
# kmemleak rows scan twice when they check, and that is what they judge.
[ -n "$debug_kernel" ] && [ -e /sys/kernel/debug/kmemleak ] && echo scan=off > /sys/kernel/debug/kmemleak
bounded() {
	timeout -k 10 "$suite_timeout" "$@"
	local rc=$?
	[ $rc -ne 124 ] && [ $rc -ne 137 ] || echo "  (timed out after $suite_timeout s: $*)" >&2
	return $rc
}

# record SUITE PASSED FAILED [SKIPPED]; the 4th field of .counts is the suite's wall time in s
# (suites run one after another: the time since the previous record).
t_last=$(date +%s)
record() {
	local now; now=$(date +%s)
	echo "$2 $3 ${4:-0} $((now - t_last))" > "$out/$pfx-$1.counts"
	printf '  %-10s %d passed, %d failed, %d skipped, %d s\n' "$1" "$2" "$3" "${4:-0}" $((now - t_last))
	t_last=$now
}

# A single check counted as one test.
check() {
	local name=$1; shift
	if bounded "$@" > "$out/$pfx-$name.log" 2>&1; then record "$name" 1 0; else
		record "$name" 0 1; echo "  --- $name failed:"; tail -n 20 "$out/$pfx-$name.log"; fi
}

# kselftest harness: "# Totals: pass:N fail:N xfail:N xpass:N skip:N error:N"
kselftest() {
	local name=$1 bin=$2
	if [ ! -x "$bin" ]; then record "$name" 0 1; echo "  $bin is missing"; return; fi
	bounded "$bin" > "$out/$pfx-$name.log" 2>&1
	local rc=$? t
	t=$(grep '^# Totals:' "$out/$pfx-$name.log" | tail -n1)
	if [ -z "$t" ]; then record "$name" 0 1; echo "  $name crashed (rc $rc)"; tail -n 20 "$out/$pfx-$name.log"; return; fi
	local p f s e
	p=$(sed -E 's/.*Totals: pass:([0-9]+).*/\1/' <<<"$t"); f=$(sed -E 's/.* fail:([0-9]+).*/\1/' <<<"$t")
	s=$(sed -E 's/.*skip:([0-9]+).*/\1/' <<<"$t"); e=$(sed -E 's/.*error:([0-9]+).*/\1/' <<<"$t")
	record "$name" "$p" $((f + e)) "$s"
	[ $((f + e)) -eq 0 ] || grep -E '^not ok|^# (FAIL|.*Expected)' "$out/$pfx-$name.log" | head -n 20
}

# GoogleTest: counts from its JSON report.
gtest() {
	local name=$1 bin=$2
	if [ ! -x "$bin" ]; then record "$name" 0 1; echo "  $bin is missing"; return; fi
	rm -f "$out/$pfx-$name.json"
	bounded "$bin" --gtest_output="json:$out/$pfx-$name.json" > "$out/$pfx-$name.log" 2>&1
	local rc=$?
	if [ ! -s "$out/$pfx-$name.json" ]; then record "$name" 0 1; echo "  $name crashed (rc $rc)"; tail -n 20 "$out/$pfx-$name.log"; return; fi
	local t f skipped
	read -r t f skipped <<<"$(python3 - "$out/$pfx-$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cases = [c for s in r.get("testsuites", []) for c in s.get("testsuite", [])]
skipped = sum(1 for c in cases if c.get("result") == "SKIPPED")
print(r["tests"], r["failures"] + r.get("errors", 0), skipped)
PY
)"
	record "$name" $((t - f - skipped)) "$f" "$skipped"
	[ "$f" -eq 0 ] || grep -E '^\[  FAILED  \]|Failure|Expected|Which is' "$out/$pfx-$name.log" | head -n 30
}

# A program that prints "N passed, N failed" last: those counts.
counted() {
	local name=$1; shift
	bounded "$@" > "$out/$pfx-$name.log" 2>&1
	local rc=$? line
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/$pfx-$name.log" | tail -n1)
	if [ -z "$line" ]; then record "$name" 0 1; echo "  $name crashed (rc $rc)"; tail -n 20 "$out/$pfx-$name.log"; return; fi
	local p f
	read -r p _ f _ <<<"${line//,/}"
	[ $rc -eq 0 ] || [ "$f" -gt 0 ] || f=1
	record "$name" "$p" "$f"
	[ "$f" -eq 0 ] || grep -E 'FAIL' "$out/$pfx-$name.log" | head -n 20
}

echo "guest: $(uname -r), $(ls -d /sys/bus/pci/drivers/spyre/0000:* 2>/dev/null | wc -l) card(s) bound before modprobe"
check modprobe modprobe spyre
check probe sh -c "[ \$(ls /dev/accel/ | wc -l) -eq \$(lspci -n -d 1234:5350 | wc -l) ] && [ \$(lspci -n -d 1234:5350 | wc -l) -ge 1 ]"
# Debug kernel: the driver's KUnit suites ran at modprobe.
if [ -d /sys/kernel/debug/kunit ]; then
	counted kunit tests/guest/kunit.sh
fi
kselftest uapi build/cmake/tests/guest/uapi/spyre_uapi_test
kselftest vm build/cmake/tests/guest/uapi/spyre_vm_test
# On the debug kernel without Tools.SpyreSmiTableJsonListQuery (spyre-smi's table, JSON, list
# and query output, 43 s there against 7 s stock: process starts; its QUERY ioctls and sysfs
# reads run there in rows smi, smi-mgmt and observability).
libspyre_filter='-Peer.*:HeldFills*'
[ -z "$debug_kernel" ] || libspyre_filter="$libspyre_filter:Tools.SpyreSmiTableJsonListQuery"
GTEST_FILTER="$libspyre_filter" gtest libspyre build/cmake/tests/guest/libspyre/libspyre_guest_test
# libspyre's peer copies between the two cards through spyre.ko's dma-bufs: data both ways,
# the copying card's TELE_P2P counters, the peer link's modeled cycles, the import released
# with its buffer, the peer hot-unplugged (QEMU spyre1, re-plugged after).
GTEST_FILTER='Peer.*' gtest libspyre-p2p build/cmake/tests/guest/libspyre/libspyre_guest_test
# A batch with held fills on the card (its first command hangs) when QEMU's spyre1 is
# hot-unplugged: DEVICE_LOST, every handle released, no driver file left open; spyre1 plugged
# back runs batches of held fills in the same process (held_fills_failure_test.cpp).
GTEST_FILTER='HeldFillsUnplug.*' gtest libspyre-unplug build/cmake/tests/guest/libspyre/libspyre_guest_test
# The op library's C API through spyre.ko (the host suite, on the kernel backend), without its
# numeric sweeps: they repeat the same ioctls (BO create/free, SUBMIT, wait) hundreds of times
# to check results that only user space and the cores' programs decide, and the card model's
# engine is the simulator's own code, on which the host's ctest runs them all (they took 340 of
# the row's 450 s on the debug kernel and about 140 of its 215 s on the stock one, 2026-12-06).
# On the debug kernel also without the 1100 program loads of DistinctShapesKeepTheCardsPrograms-
# Bounded (118 of the row's 328 s there; the stock run keeps it, and the vm row's churn cases
# create and free BOs by the thousand there) and AddRmsNormMatchesReference's shape sweep (32 s).
ops_sweeps=Ops.ReductionsOfRowsLongerThan2To23:Ops.IntegerScalarsShareOneProgram:Ops.FloatScalarOperandsShareOneProgram:Ops.IntegerBinaryOpsMatchReference:Ops.ReductionsAlongAnyDim:Ops.SoftmaxAlongAnyDim:Ops.WhereAndClampNumbersShareOneProgram:Ops.FloatAlphaSharesOneProgram:Ops.GatherEveryTypeDimAndIndexShape:Ops.ScanEveryTypeAndDimEqualsTorchCpu:Ops.ScatterAddsDuplicatesInOrderAndCopies:Ops.IntegerReductions
[ -z "$debug_kernel" ] ||
	ops_sweeps=$ops_sweeps:Ops.DistinctShapesKeepTheCardsProgramsBounded:Ops.AddRmsNormMatchesReference
SPYRE_OPS_TEST_BACKEND=kernel GTEST_FILTER="-$ops_sweeps" gtest ops build/cmake/tests/host/libspyre_ops_api_test
# Random numbers on the card through spyre.ko (spyre_op_random: prefixes, rates, errors).
SPYRE_OPS_TEST_BACKEND=kernel GTEST_FILTER='RandomApi.*' gtest ops-random \
	build/cmake/tests/host/libspyre_ops_random_test
# Collectives between processes through spyre.ko: 2, 3 and 4 ranks over the VM's cards (rank r
# on card r mod the card count), and a rank killed mid-run (libspyre.md "Collectives"); one
# process per card: every collective and dtype through the p2p transport (inboxes shared as
# dma-bufs between the processes), and a rank killed mid-collective.
SPYRE_COMM_TEST_BACKEND=kernel gtest comm \
	build/cmake/tests/host/libspyre_comm_process_test
# Collectives between threads of one process, one card each: the p2p transport (chunks card to
# card through spyre.ko's dma-bufs, counted in the cards' TELE_P2P registers); the 2-rank cases
# of every collective and dtype, all-reduce on 3 and 4 ranks (two ranks per card), Comm.*.
# On the debug kernel every collective in fp32 only: the driver sees the same copies, launches
# and dma-bufs for every dtype (only the cores' programs differ, which the stock run checks);
# the 3- and 4-rank fp16/bf16 all-reduces took 150 of the row's 396 s there, and with every
# 16-bit case the row took 489 s of the debug run's 2446 (the CI of 6f672ee).
# The 3- and 4-rank all-reduces (two ranks on a card) also stay on the stock kernel: they took 113
# of the row's 265 s on the debug one (2026-12-06) for the same copies and dma-bufs per card.
comm_filter="Comm.*:Ranks/CommCollectives.*/2ranks_*:Ranks/CommCollectives.AllReduceEveryOpOddSizes/*"
[ -z "$debug_kernel" ] || comm_filter="Comm.*:Ranks/CommCollectives.*/2ranks_*-*_fp16:*_bf16"
SPYRE_COMM_TEST_BACKEND=kernel GTEST_FILTER="$comm_filter" \
	gtest comm-p2p build/cmake/tests/host/libspyre_comm_test
# PyTorch through spyre.ko, one Python process (an `import torch` takes minutes on the debug
# kernel): a Granite-style decoder (prefill and 8 greedy decode steps) on the card against the
# CPU, identical tokens, no CPU fallback (torch_spyre/tools/decoder_demo.py, Documentation/
# torch_spyre.md); then torch.spyre.SpyreGraph and backend="spyre_graphs", where a replay is one
# SUBMIT; a compiled call whose kernels read CPU scalars (fills held in its batch) is one SUBMIT
# (test_compiled_fills.py). Stock kernel only: what PyTorch asks of spyre.ko is libspyre's
# eager launches, graph replays (one SUBMIT each) and held fills, which the libspyre, ops and
# libspyre-fault rows submit on the debug kernel too (GraphReplayIsOneSubmit, HeldFills.*); the
# row took 351 of the debug run's 2590 s (2026-12-07), most of it Python under TCG.
pytest_counted() {
	local name=$1; shift
	bounded env PYTHONPATH=build/cmake/torch_spyre/python PYTHONDONTWRITEBYTECODE=1 \
		python3 -m pytest -q -p no:cacheprovider --durations=12 "$@" > "$out/$pfx-$name.log" 2>&1
	local rc=$? line p f s
	# "12 passed, 3 deselected in 152.0s" / "1 failed, 11 passed, 1 skipped, 1 error in ..."
	line=$(grep -E '^=*[ ]*[0-9]+ (passed|failed|errors?|skipped)' "$out/$pfx-$name.log" | tail -n1)
	read -r p f s <<<"$(awk '{for (i = 1; i < NF; i++) { w = $(i + 1); sub(/,$/, "", w)
		if (w == "passed") p = $i; else if (w == "skipped") s = $i
		else if (w == "failed" || w == "error" || w == "errors") f += $i }}
		END {print p + 0, f + 0, s + 0}' <<<"$line")"
	if [ -z "$line" ] || { [ $rc -ne 0 ] && [ "$f" -eq 0 ]; }; then
		record "$name" "$p" $((f + 1)) "$s"; echo "  $name crashed (rc $rc)"
		tail -n 20 "$out/$pfx-$name.log"; return
	fi
	record "$name" "$p" "$f" "$s"
	[ "$f" -eq 0 ] || grep -E '^(FAILED|ERROR) ' "$out/$pfx-$name.log" | head -n 20
}
# test_graphs.py's replayed training step runs once (its spyre_graphs form), without the
# tests of which graph serves which call (held outputs, gradient accumulation: the replayer's
# Python, the same on both backends) and without the reduce-overhead forms of the training step
# and the growing-KV decode (Dynamo's entry differs from the spyre_graphs form, not what it
# submits), and without the compiled dropout replays (four compiles; the replay's random
# streams on spyre.ko are test_a_graph_replays_random_ops_with_new_draws's and ops-random's).
compiled_fills=tests/guest/torch/test_compiled_fills.py
torch_filter="not training_replay and not (training_step and overhead) and not (growing_kv and overhead) and not compiled_dropout"
[ -n "$debug_kernel" ] ||
	SPYRE_BACKEND=kernel pytest_counted torch tests/guest/torch/test_decoder_demo.py \
		-k "$torch_filter" $compiled_fills torch_spyre/tests/test_graphs.py
# torch.distributed's "spyre" backend through spyre.ko, one process per card (python3 -m
# torch_spyre.launch, rank r on card r): DistributedDataParallel trained beside DDP on gloo (CPU)
# with equal parameters after every step, and the tensor-parallel decoder's tokens against one
# card's, strict (no CPU fallback; torch_spyre.md "DistributedDataParallel", "Tensor parallel");
# the communicator must have chosen the p2p transport (one process per card, dma-bufs).
# Stock kernel only: every rank imports torch, which takes minutes on the debug kernel. Both
# workers run in one launch (chain_worker.py: each its own process group, one after the other),
# so each rank imports torch once, not twice (113 s against 89 + 92 s for two launches, warm
# caches; testing.md "Where the time goes").
torch_dist() {
	local name=$1; shift
	rm -f "/tmp/$name-store"*
	check "$name" env PYTHONPATH=build/cmake/torch_spyre/python PYTHONDONTWRITEBYTECODE=1 \
		SPYRE_BACKEND=kernel TORCH_SPYRE_STRICT=1 SPYRE_COMM_EXPECT_TRANSPORT=p2p \
		python3 -m torch_spyre.launch --nproc 2 \
		torch_spyre/tests/chain_worker.py "/tmp/$name-store" "$@"
}
if [ -z "$debug_kernel" ] && [ "$(ls /dev/accel | wc -l)" -ge 2 ]; then
	busybox ip link set lo up	# gloo, DDP's reference, talks over loopback
	torch_dist torch-dist ddp_worker.py tp_worker.py
fi
check smi build/cmake/tools/spyre-smi/spyre-smi
# spyre-smi against a running workload: utilisation, memory, processes, --json schema, --csv,
# dmon, topo, reset (refusals and a real one), the Prometheus exporter, no permission/driver.
counted smi-mgmt python3 tests/guest/smi/smi_guest_test.py
# sysfs, hwmon and fdinfo against QUERY telemetry, config space and what clients ran.
counted observability python3 tests/guest/observability/observability.py
# Failure containment (Documentation/driver.md "Failure handling").
counted stress build/cmake/tests/guest/stress/spyre_stress --procs 8 --jobs 1000
# DEVICE BOs shared between two cards as dma-bufs (skips with a reason on one card); its last
# case hot-unplugs the exporting card spyre1 and plugs it back before the hotplug row.
kselftest p2p build/cmake/tests/guest/uapi/spyre_p2p_test
# On the stock kernel with a PyTorch process too (an `import torch` takes minutes on the debug
# kernel).
hotplug_torch=1
[ -z "$debug_kernel" ] || hotplug_torch=0
if [ "$(ls /dev/accel | wc -l)" -ge 2 ]; then
	check hotplug env HOTPLUG_TORCH=$hotplug_torch tests/guest/failure/hotplug.sh spyre1 spyre0
else
	check hotplug env HOTPLUG_TORCH=$hotplug_torch tests/guest/failure/hotplug.sh spyre0
fi
# Card spyre1's BARs come and go while every vCPU reads spyre0's registers: QEMU's TCG must route
# every read to spyre0 (qemu-device/patches/0001). Needs two cards. Stock kernel only: it tests
# QEMU's TCG, the same under either kernel; what it asks of spyre.ko (unbind, hot-unplug and
# re-plug, bind) the hotplug row above and the p2p and libspyre-unplug rows do on the debug
# kernel too (the row took 128 of the debug run's 2590 s, 2026-12-07).
if [ -n "$debug_kernel" ]; then
	:
elif [ "$(ls /dev/accel | wc -l)" -ge 2 ]; then
	check unplug-mmio tests/guest/failure/unplug-mmio.sh 2000
else
	record unplug-mmio 0 0 1
fi
# Debug kernel: allocation failures injected into spyre.ko.
if [ -d /sys/kernel/debug/failslab ]; then
	check failslab tests/guest/failslab.sh
fi
# Debug kernel: leaks while the module is loaded (backtraces name its functions).
if [ -e /sys/kernel/debug/kmemleak ]; then
	check kmemleak tests/guest/kmemleak.sh spyre
fi
check unload modprobe -r spyre
# Failure paths need a short job timeout: a module load of their own.
check modprobe-fault modprobe spyre job_timeout_ms=500
kselftest fault build/cmake/tests/guest/uapi/spyre_fault_test
check unload-fault modprobe -r spyre
# Batches with held fills whose job hangs: 10 ring resets, then a card reset with a batch
# re-run behind the hung one; each synchronize bounded, the staging slots back (10 batches after,
# more than the 8 slots), fills read back (held_fills_failure_test.cpp). A module load of its
# own: card resets count against the driver's 5 a minute per card, which the fault suite's
# spend, and a new probe starts a new budget.
check modprobe-held-fills modprobe spyre job_timeout_ms=500
GTEST_FILTER='HeldFills.*' gtest libspyre-fault build/cmake/tests/guest/libspyre/libspyre_guest_test
check unload-held-fills modprobe -r spyre
# 50 reloads on the stock kernel; 10 on the (much slower) debug kernel.
check reload tests/guest/failure/reload.sh "$([ -n "$debug_kernel" ] && echo 10 || echo 50)"
# After the unloads the module's addresses no longer resolve: what it left behind shows as
# DRM objects (this VM has no other DRM driver).
if [ -e /sys/kernel/debug/kmemleak ]; then
	check kmemleak-unload tests/guest/kmemleak.sh 'spyre|drm_'
fi
# (A bare call trace is not a failure: the allocation failures injected by failslab.sh print
# one each through warn_alloc. Every real report has its own header line matched here.)
check dmesg sh -c "! dmesg | grep -E 'WARNING:|BUG:|Oops|general protection|KFENCE|KASAN|UBSAN|ODEBUG|refcount_t|possible circular locking|possible recursive locking|inconsistent lock state|suspicious RCU usage|blocked for more than'"
exit 0
