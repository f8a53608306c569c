#!/bin/bash
# Guest half of tests/debug-net/run.sh (debug kernel, spyre not loaded): loads each deliberately
# broken spyre.ko from build/bugs/<kind>/driver, runs a few verified jobs, unloads it, and
# checks that the debug kernel's matching detector reported it:
#   leak -> kmemleak, lock -> lockdep (circular locking), uaf -> KASAN (use-after-free).
# Prints "N passed, N failed" (one test per kind).
set -u
cd /src
stress=build/cmake/tests/guest/stress/spyre_stress
p=0 f=0
verdict() {	# verdict KIND CAUGHT
	if [ "$2" = yes ]; then p=$((p + 1)); echo "caught: $1"; else f=$((f + 1)); echo "MISSED: $1"; fi
}
for kind in leak lock uaf; do
	insmod build/bugs/$kind/driver/spyre.ko || { verdict $kind no; continue; }
	$stress --procs 1 --jobs 6 > /tmp/debug-net-$kind.log 2>&1
	caught=no
	case $kind in
	leak) tests/guest/kmemleak.sh spyre > /tmp/kmemleak-$kind.log 2>&1 || caught=yes ;;
	lock) dmesg | grep -q 'possible circular locking dependency' && caught=yes ;;
	uaf) dmesg | grep -q 'KASAN: slab-use-after-free' && caught=yes ;;
	esac
	rmmod spyre
	verdict $kind $caught
done
echo "$p passed, $f failed"
[ $f -eq 0 ]
