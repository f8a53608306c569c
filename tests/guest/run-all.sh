#!/bin/bash
# Guest test suites, run inside the VM by tests/check.sh (one boot for all of them).
# Each suite's pass/fail/skip counts go to build/test-results/guest-<suite>.counts, and its full
# output to build/test-results/guest-<suite>.log.
set -u
cd /src
out=build/test-results
mkdir -p "$out"
rm -f "$out"/guest-*.counts

# record SUITE PASSED FAILED [SKIPPED]
record() { echo "$2 $3 ${4:-0}" > "$out/guest-$1.counts"; printf '  %-10s %d passed, %d failed, %d skipped\n' "$1" "$2" "$3" "${4:-0}"; }

# A single check counted as one test.
check() {
	local name=$1; shift
	if "$@" > "$out/guest-$name.log" 2>&1; then record "$name" 1 0; else
		record "$name" 0 1; echo "  --- $name failed:"; tail -n 20 "$out/guest-$name.log"; fi
}

# kselftest harness: "# Totals: pass:N fail:N xfail:N xpass:N skip:N error:N"
kselftest() {
	local name=$1 bin=$2
	if [ ! -x "$bin" ]; then record "$name" 0 1; echo "  $bin is missing"; return; fi
	"$bin" > "$out/guest-$name.log" 2>&1
	local rc=$? t
	t=$(grep '^# Totals:' "$out/guest-$name.log" | tail -n1)
	if [ -z "$t" ]; then record "$name" 0 1; echo "  $name crashed (rc $rc)"; tail -n 20 "$out/guest-$name.log"; return; fi
	local p f s e
	p=$(sed -E 's/.*Totals: pass:([0-9]+).*/\1/' <<<"$t"); f=$(sed -E 's/.* fail:([0-9]+).*/\1/' <<<"$t")
	s=$(sed -E 's/.*skip:([0-9]+).*/\1/' <<<"$t"); e=$(sed -E 's/.*error:([0-9]+).*/\1/' <<<"$t")
	record "$name" "$p" $((f + e)) "$s"
	[ $((f + e)) -eq 0 ] || grep -E '^not ok|^# (FAIL|.*Expected)' "$out/guest-$name.log" | head -n 20
}

# GoogleTest: counts from its JSON report.
gtest() {
	local name=$1 bin=$2
	if [ ! -x "$bin" ]; then record "$name" 0 1; echo "  $bin is missing"; return; fi
	rm -f "$out/guest-$name.json"
	"$bin" --gtest_output="json:$out/guest-$name.json" > "$out/guest-$name.log" 2>&1
	local rc=$?
	if [ ! -s "$out/guest-$name.json" ]; then record "$name" 0 1; echo "  $name crashed (rc $rc)"; tail -n 20 "$out/guest-$name.log"; return; fi
	local t f skipped
	read -r t f skipped <<<"$(python3 - "$out/guest-$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cases = [c for s in r.get("testsuites", []) for c in s.get("testsuite", [])]
skipped = sum(1 for c in cases if c.get("result") == "SKIPPED")
print(r["tests"], r["failures"] + r.get("errors", 0), skipped)
PY
)"
	record "$name" $((t - f - skipped)) "$f" "$skipped"
	[ "$f" -eq 0 ] || grep -E '^\[  FAILED  \]|Failure|Expected|Which is' "$out/guest-$name.log" | head -n 30
}

# A program that prints "N passed, N failed" last: those counts.
counted() {
	local name=$1; shift
	"$@" > "$out/guest-$name.log" 2>&1
	local rc=$? line
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/guest-$name.log" | tail -n1)
	if [ -z "$line" ]; then record "$name" 0 1; echo "  $name crashed (rc $rc)"; tail -n 20 "$out/guest-$name.log"; return; fi
	local p f
	read -r p _ f _ <<<"${line//,/}"
	[ $rc -eq 0 ] || [ "$f" -gt 0 ] || f=1
	record "$name" "$p" "$f"
	[ "$f" -eq 0 ] || grep -E 'FAIL' "$out/guest-$name.log" | head -n 20
}

echo "guest: $(uname -r), $(ls -d /sys/bus/pci/drivers/spyre/0000:* 2>/dev/null | wc -l) card(s) bound before modprobe"
check modprobe modprobe spyre
check probe sh -c "[ \$(ls /dev/accel/ | wc -l) -eq \$(lspci -n -d 1234:5350 | wc -l) ] && [ \$(lspci -n -d 1234:5350 | wc -l) -ge 1 ]"
kselftest uapi build/cmake/tests/guest/uapi/spyre_uapi_test
gtest libspyre build/cmake/tests/guest/libspyre/libspyre_guest_test
check smi build/cmake/tools/spyre-smi/spyre-smi
# Failure containment (Documentation/driver.md "Failure handling").
counted stress build/cmake/tests/guest/stress/spyre_stress --procs 8 --jobs 1000
if [ "$(ls /dev/accel | wc -l)" -ge 2 ]; then
	check hotplug tests/guest/failure/hotplug.sh spyre1 spyre0
else
	check hotplug tests/guest/failure/hotplug.sh spyre0
fi
check unload modprobe -r spyre
check reload tests/guest/failure/reload.sh 50
check dmesg sh -c "! dmesg | grep -E 'WARNING:|BUG:|Oops|general protection|KFENCE|refcount_t|blocked for more than|Call Trace'"
exit 0
