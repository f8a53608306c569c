#!/usr/bin/env bash
# Does the debug kernel catch what it is there to catch? Builds three deliberately broken
# spyre.ko (a leak, a lock-order inversion, a use-after-free; make-variants.py) against the
# debug kernel and checks in one VM boot that kmemleak, lockdep and KASAN each report theirs
# (guest.sh). Not part of 'make check' (it tests the net, not the driver): 'make check-debug-net'.
set -euo pipefail
cd "$(dirname "$0")/../.."
kd=$(tools/setup/kernel-debug.sh)
tools/in-sysroot "python3 tests/debug-net/make-variants.py"
for kind in leak lock uaf; do
	tools/in-sysroot "make -s -C build/bugs/$kind/driver KDIR=$kd"
done
SPYRE_DEVICE_PROPS=x-fault-inject=on tools/vm/spyre-vm --kernel debug --cards 1 -- tests/debug-net/guest.sh
