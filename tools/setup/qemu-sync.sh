#!/usr/bin/env bash
# Copy the Spyre device sources (qemu-device/ and the hardware header hw/spyre_hw.h) into a
# QEMU source tree at hw/misc/spyre, touching only files whose content changed so that an
# incremental ninja build recompiles only what is needed. Files removed from qemu-device/ are
# removed from the tree too.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
dst=$1/hw/misc/spyre
mkdir -p "$dst"
want=$(cd "$top/qemu-device" && ls)
for f in $want; do
	[ -f "$top/qemu-device/$f" ] || continue	# e.g. tests/, handled below
	cmp -s "$top/qemu-device/$f" "$dst/$f" || cp "$top/qemu-device/$f" "$dst/$f"
done
cmp -s "$top/hw/spyre_hw.h" "$dst/spyre_hw.h" || cp "$top/hw/spyre_hw.h" "$dst/spyre_hw.h"
for f in $(cd "$dst" && ls); do
	[ "$f" = spyre_hw.h ] && continue
	[ -e "$top/qemu-device/$f" ] || rm -f "$dst/$f"
done

# The device's qtest lives in qemu-device/tests/ and is built as QEMU's tests/qtest/spyre-test
# (target tests/qtest/spyre-test); hook it into tests/qtest/meson.build once.
test_src=$top/qemu-device/tests/spyre-test.c
if [ -f "$test_src" ]; then
	cmp -s "$test_src" "$1/tests/qtest/spyre-test.c" || cp "$test_src" "$1/tests/qtest/spyre-test.c"
	qmeson=$1/tests/qtest/meson.build
	if ! grep -q "'spyre-test'" "$qmeson"; then
		sed -i -E "s|^qtests_x86_64 = qtests_i386$|&\\nqtests_x86_64 += (config_all_devices.has_key('CONFIG_SPYRE') ? ['spyre-test'] : [])|" "$qmeson"
		grep -q "'spyre-test'" "$qmeson" || { echo "qemu-sync: could not hook spyre-test into $qmeson" >&2; exit 1; }
	fi
fi
