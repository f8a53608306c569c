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
	cmp -s "$top/qemu-device/$f" "$dst/$f" || cp "$top/qemu-device/$f" "$dst/$f"
done
cmp -s "$top/hw/spyre_hw.h" "$dst/spyre_hw.h" || cp "$top/hw/spyre_hw.h" "$dst/spyre_hw.h"
for f in $(cd "$dst" && ls); do
	[ "$f" = spyre_hw.h ] && continue
	[ -e "$top/qemu-device/$f" ] || rm -f "$dst/$f"
done
