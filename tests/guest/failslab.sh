#!/bin/bash
# Allocation-failure injection into spyre.ko (debug kernel, spyre loaded): re-runs the uapi
# suite while failslab and fail_page_alloc fail 10% of the allocations whose call stack passes
# through spyre.ko. The suite's own verdicts do not count here (its calls are meant to fail);
# what counts: failures were really injected, the kernel stays clean (the dmesg and kmemleak
# checks that follow in run-all.sh), and afterwards every card binds and works (verified jobs).
set -u
cd /src
dbg=/sys/kernel/debug
uapi=build/cmake/tests/guest/uapi/spyre_uapi_test
stress=build/cmake/tests/guest/stress/spyre_stress
[ -d $dbg/failslab ] && [ -d $dbg/fail_page_alloc ] || { echo "no failslab/fail_page_alloc"; exit 1; }
# spyre.ko's memory: /proc/modules gives the base of its text and the size of all its sections.
read -r _ size _ _ _ base _ < <(grep '^spyre ' /proc/modules)	# then taint flags
[ -n "${base:-}" ] || { echo "spyre is not loaded"; exit 1; }
start=$((base)); end=$((base + size))

setup() {	# setup DIR PROBABILITY
	local d=$dbg/$1
	echo "$2" > $d/probability
	echo 1 > $d/interval
	echo -1 > $d/times
	echo 0 > $d/space
	echo 1 > $d/verbose
	echo N > $d/task-filter
	echo 32 > $d/stacktrace-depth
	printf '%#x' $start > $d/require-start
	printf '%#x' $end > $d/require-end
	echo N > $d/ignore-gfp-wait
}
before=$(dmesg | grep -c 'FAULT_INJECTION: forcing a failure' || true)
log_lines=$(dmesg | wc -l)
setup failslab 10
setup fail_page_alloc 10
echo N > $dbg/fail_page_alloc/ignore-gfp-highmem
echo 0 > $dbg/fail_page_alloc/min-order
timeout 600 $uapi > /tmp/failslab-uapi.log 2>&1
rc=$?
echo 0 > $dbg/failslab/probability
echo 0 > $dbg/fail_page_alloc/probability
injected=$(( $(dmesg | grep -c 'FAULT_INJECTION: forcing a failure' || true) - before ))
echo "failslab: uapi suite exit $rc under injection: $(grep '^# Totals' /tmp/failslab-uapi.log)"
echo "failslab: $injected allocation(s) in spyre.ko failed on purpose" \
	"($(dmesg | grep -c 'page allocation failure' || true) page allocation failure warnings with a call trace)"
[ $rc -ne 124 ] || { echo "failslab: the uapi suite hung"; exit 1; }
[ "$injected" -gt 0 ] || { echo "failslab: nothing was injected"; exit 1; }
# A card that does not work afterwards: what the driver said meanwhile (not the injected
# failures' own reports and stack frames) and each card's state, then the verdict (a CI report
# keeps the last 12 lines of this log).
cards_after() {
	dmesg | tail -n +$((log_lines + 1)) | grep -E 'spyre|accel' |
		grep -vE 'FAULT_INJECTION|\+0x[0-9a-f]+/|Call Trace|CPU: |Hardware name' | tail -n 6 |
		cut -c1-160
	for a in /sys/class/accel/accel*; do
		echo "$(basename "$a"): $(basename "$(readlink -f "$a/device")") state $(cat "$a/device/state" 2>/dev/null)"
	done
}
# A card the injection left unbound (a probe that failed under it: the uapi suite's rebind test
# stops there) is bound again; with nothing injected its probe must succeed. Then every card
# has its node, and every node runs verified jobs.
for d in /sys/bus/pci/devices/*; do
	[ "$(cat "$d/vendor"):$(cat "$d/device")" = 0x1234:0x5350 ] && [ ! -e "$d/driver" ] || continue
	echo "failslab: $(basename "$d") was left unbound; binding it"
	basename "$d" > /sys/bus/pci/drivers/spyre/bind ||
		{ cards_after; echo "failslab: $(basename "$d") does not bind after injection"; exit 1; }
done
[ "$(ls /dev/accel | wc -l)" -eq "$(lspci -n -d 1234:5350 | wc -l)" ] ||
	{ cards_after; echo "failslab: a card has no accel node after injection"; exit 1; }
$stress --procs 2 --jobs 60 || { cards_after; echo "failslab: the cards do not work after injection"; exit 1; }
