#!/bin/bash
# kmemleak.sh PATTERN: scan for leaks (debug kernel) and fail if a leaked object's allocation
# backtrace mentions PATTERN (e.g. "spyre": leaks from spyre.ko). Leaks elsewhere are listed.
set -u
k=/sys/kernel/debug/kmemleak
[ -e $k ] || { echo "kmemleak is not available (not the debug kernel?)"; exit 1; }
# An object only counts as leaked when two scans found no reference to it.
echo scan > $k; sleep 1; echo scan > $k
report=$(cat $k)
total=$(grep -c '^unreferenced object' <<<"$report" || true)
# The backtrace lines only: an object's `comm` line names the process (spyre_uapi_test), not
# the code that allocated it (one run reported kernfs's write buffer of that test's sysfs
# write as spyre's).
ours=$(awk -v pat="$1" '/^unreferenced object/ {bt = 0; hit = 0}
	/^ *backtrace/ {bt = 1; next}
	bt && $0 ~ pat && !hit {hit = 1; n++}
	END {print n + 0}' <<<"$report")
echo "kmemleak: $total unreferenced object(s), $ours with '$1' in the allocation backtrace"
[ "$total" -eq 0 ] || head -n 80 <<<"$report"
[ "$ours" -eq 0 ] || exit 1
