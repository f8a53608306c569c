#!/usr/bin/env bash
# 'make check': every test suite of the stack, with one summary line at the end.
#   host    unit tests of libspyre and tools (ctest, in the sysroot)
#   device  QEMU qtest of the card model, no guest kernel (if present)
#   style   checkpatch --strict on the driver
#   guest   one VM boot with $CHECK_CARDS cards: uapi kselftests, libspyre, spyre-smi, unload
# Exit status is non-zero if any test failed or any suite could not run.
set -uo pipefail
cd "$(dirname "$0")/.."
out=build/test-results
mkdir -p "$out"
rm -f "$out"/*.counts
cards=${CHECK_CARDS:-2}
start=$(date +%s)

section() { printf '\n=== %s ===\n' "$*"; }
# record SUITE PASSED FAILED [SKIPPED]
record() { echo "$2 $3 ${4:-0}" > "$out/$1.counts"; }

section "host unit tests (ctest)"
tools/in-sysroot "ctest --test-dir build/cmake --output-on-failure" > "$out/host.log" 2>&1
# "100% tests passed, 0 tests failed out of 12", then "(Skipped)" rows for skipped tests.
line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$out/host.log" | tail -n1)
if [ -n "$line" ]; then
	echo "$line"
	f=$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"$line")
	t=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
	s=$(grep -c '(Skipped)' "$out/host.log" || true)
	record host $((t - f - s)) "$f" "$s"
	[ "$f" -eq 0 ] || grep -E '\(Failed\)|\[  FAILED  \]' "$out/host.log" | head -n 20
else
	tail -n 20 "$out/host.log"; record host 0 1
fi

if [ -x qemu-device/tests/run-qtest.sh ]; then
	section "device model (QEMU qtest)"
	tools/in-sysroot qemu-device/tests/run-qtest.sh > "$out/device.log" 2>&1
	rc=$?
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/device.log" | tail -n1)
	echo "${line:-no summary (exit $rc)}"
	if [ -n "$line" ]; then
		read -r p _ f _ <<<"${line//,/}"
		[ $rc -eq 0 ] || [ "$f" -gt 0 ] || f=1
		record device "$p" "$f"
	else
		tail -n 20 "$out/device.log"; record device 0 1
	fi
fi

section "driver style (checkpatch --strict)"
if make -s checkpatch > "$out/checkpatch.log" 2>&1; then
	echo "clean"; record style 1 0
else
	head -n 20 "$out/checkpatch.log"; record style 0 1
fi

section "guest suites ($cards cards, one VM boot)"
rm -f "$out"/guest-*.counts
# The failure tests inject faults and hangs: the cards need the model's test knob.
if ! SPYRE_DEVICE_PROPS=x-fault-inject=on tools/vm/spyre-vm --cards "$cards" -- tests/guest/run-all.sh > "$out/guest.log" 2>&1; then
	echo "the VM run failed; serial log:"; tail -n 40 "$out/guest.log"
	record guest-vm 0 1
else
	grep -E '^(guest:|  )' "$out/guest.log"
fi
[ -n "$(ls "$out"/guest-*.counts 2>/dev/null)" ] || record guest-vm 0 1

section "summary"
tp=0 tf=0 ts=0
for c in "$out"/*.counts; do
	read -r p f s < "$c"
	printf '  %-18s %5d passed, %3d failed, %3d skipped\n' "$(basename "$c" .counts)" "$p" "$f" "$s"
	tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + s))
done
echo "make check took $(( $(date +%s) - start )) s (after the build)"
echo "$tp passed, $tf failed, $ts skipped"
[ "$tf" -eq 0 ]
