#!/usr/bin/env bash
# Extract from Debian's linux-source-6.12 (in the sysroot) what the project needs of the kernel
# tree: kselftest_harness.h for the guest uapi tests and scripts/checkpatch.pl with its data
# files. Cached under $SPYRE_CACHE; prints the directory (sysroot view, /cache/...).
set -euo pipefail
. "$(dirname "$0")/common.sh"

root=$("$SPYRE_TOP/tools/setup/sysroot.sh")
take_lock kernel-tools
key=$(cache_key "$SPYRE_TOP/tools/setup/kernel-tools.sh" "$SPYRE_TOP/tools/setup/sysroot-packages.txt")
dir=linux-tools-$key
if [ ! -f "$SPYRE_CACHE/$dir/.complete" ]; then
	log "extracting kselftest and checkpatch from linux-source-6.12"
	rm -rf "$SPYRE_CACHE/$dir"
	mkdir -p "$SPYRE_CACHE/$dir"
	# tar runs in the sysroot: the host may lack xz.
	in_sysroot "$root" tar -C "/cache/$dir" --strip-components=1 \
		-xJf /usr/src/linux-source-6.12.tar.xz \
		--wildcards 'linux-source-6.12/tools/testing/selftests/kselftest*' \
		'linux-source-6.12/scripts/checkpatch.pl' 'linux-source-6.12/scripts/spelling.txt' \
		'linux-source-6.12/scripts/const_structs.checkpatch'
	touch "$SPYRE_CACHE/$dir/.complete"
	prune_cache 'linux-tools-*' 2
fi
touch "$SPYRE_CACHE/$dir"
echo "/cache/$dir"
