#!/bin/bash
# KUnit results of spyre.ko's suites (debug kernel: they run when the module loads).
# Prints each case and "N passed, N failed".
set -u
shopt -s nullglob
dirs=(/sys/kernel/debug/kunit/spyre_*)
[ ${#dirs[@]} -gt 0 ] || { echo "no spyre KUnit suite ran (CONFIG_KUNIT? module loaded?)"; echo "0 passed, 1 failed"; exit 1; }
p=0 f=0
for d in "${dirs[@]}"; do
	while read -r verdict _ name rest; do
		case $verdict in
		ok) p=$((p + 1)); echo "PASS $(basename "$d").$name" ;;
		not) f=$((f + 1)); echo "FAIL $(basename "$d").${rest%% *}" ;;
		esac
	done < <(grep -E '^    (not )?ok [0-9]+ ' "$d/results" | sed 's/^    //')
done
grep -h -B2 -A8 'Expected' /sys/kernel/debug/kunit/spyre_*/results | head -n 40
echo "$p passed, $f failed"
[ $f -eq 0 ] && [ $p -gt 0 ]
