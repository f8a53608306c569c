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
ours=$(awk -v pat="$1" '/^unreferenced object/ {if (blk ~ pat) n++; blk=""} {blk = blk "\n" $0}
	END {if (blk ~ pat) n++; print n + 0}' <<<"$report")
echo "kmemleak: $total unreferenced object(s), $ours with '$1' in the allocation backtrace"
[ "$ours" -eq 0 ] || { grep -B2 -A25 "$1" <<<"$report" | head -n 80; exit 1; }
