#!/bin/bash
# Module unload and reload N times (default 50), with verified jobs on every card before each
# unload (in a spyre-vm guest, spyre not loaded). Then the kernel log must be clean.
set -euo pipefail
cd /src
stress=build/cmake/tests/guest/stress/spyre_stress
n=${1:-50}
cards=$(lspci -n -d 1234:5350 | wc -l)
for ((i = 1; i <= n; i++)); do
	modprobe spyre
	[ "$(ls /dev/accel | wc -l)" -eq "$cards" ] || { echo "reload $i: $(ls /dev/accel | wc -l) of $cards cards probed"; exit 1; }
	$stress --procs "$cards" --jobs 6 > /tmp/reload.log 2>&1 || { cat /tmp/reload.log; echo "reload $i: jobs failed"; exit 1; }
	modprobe -r spyre || { echo "reload $i: unload failed"; lsmod | grep spyre; exit 1; }
done
echo "reload: $n cycles, every one with verified jobs on $cards card(s)"
