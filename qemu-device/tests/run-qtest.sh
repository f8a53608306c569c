#!/usr/bin/env bash
# Run the Spyre device qtest (QEMU's tests/qtest/spyre-test, built by tools/setup/qemu.sh).
# Runs inside the sysroot, e.g. from the checkout:
#   tools/in-sysroot qemu-device/tests/run-qtest.sh
# Each test case runs in its own process, so one crash does not hide the others.
# Environment: QEMU_BUILD (default: the newest /cache/qemu-*/build with a spyre-test binary),
# QTEST_QEMU_BINARY (default: $QEMU_BUILD/qemu-system-x86_64), SPYRE_QTEST_FILTER (substring),
# SPYRE_QTEST_TIMEOUT (seconds a case may take, default 120).
# Prints one line per case and a final line "N passed, M failed"; exits non-zero on failure.
set -uo pipefail

if [ -z "${QEMU_BUILD:-}" ]; then
	QEMU_BUILD=$(ls -td /cache/qemu-*/build 2>/dev/null | while read -r d; do
		[ -x "$d/tests/qtest/spyre-test" ] && { echo "$d"; break; }; done)
fi
test_bin=${QEMU_BUILD:-}/tests/qtest/spyre-test
if [ -z "${QEMU_BUILD:-}" ] || [ ! -x "$test_bin" ]; then
	echo "run-qtest: no spyre-test binary found (run tools/setup/qemu.sh first)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
export QTEST_QEMU_BINARY=${QTEST_QEMU_BINARY:-$QEMU_BUILD/qemu-system-x86_64}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

passed=0
failed=0
cases=$("$test_bin" -l 2>/dev/null | sed -n 's|^[# ]*\(/.*\)$|\1|p' | grep -F -- "${SPYRE_QTEST_FILTER:-/}")
for c in $cases; do
	if timeout -k 5 "${SPYRE_QTEST_TIMEOUT:-120}" "$test_bin" -p "$c" >"$log/out" 2>&1; then
		passed=$((passed + 1))
		echo "PASS $c"
	else
		failed=$((failed + 1))
		echo "FAIL $c"
		# A sanitizer's report starts far above its tail: name it first.
		grep -m3 -E 'ERROR: AddressSanitizer|runtime error:|SUMMARY: ' "$log/out" | sed 's/^/    /'
		sed 's/^/    /' "$log/out" | tail -20
	fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
