#!/usr/bin/env bash
# Build the debug guest kernel: Debian's linux-source-6.12 (the same 6.12 release as the sysroot's
# kernel and headers) configured small for the spyre VM (tinyconfig + kvm_guest.config +
# tools/setup/kernel-debug.config) with KASAN, lockdep, kmemleak, UBSAN, DEBUG_OBJECTS, fault
# injection and KUnit. The driver's own Kconfig is hooked into drivers/accel (Kconfig only, so
# that its selects pull in drm_sched and the GEM shmem helpers); spyre.ko is built from the
# checkout out of tree against this tree ('make driver-debug'). Cached under $SPYRE_CACHE, keyed
# by its inputs; prints the kernel tree (sysroot view, /cache/...).
set -euo pipefail
. "$(dirname "$0")/common.sh"

root=$("$SPYRE_TOP/tools/setup/sysroot.sh")
take_lock kernel-debug
here=$SPYRE_TOP/tools/setup
key=$(cache_key "$here/kernel-debug.sh" "$here/kernel-debug.config" "$here/sysroot-packages.txt" \
	"$SPYRE_TOP/driver/Kconfig")
dir=linux-debug-$key
if [ ! -f "$SPYRE_CACHE/$dir/.complete" ]; then
	log "building the debug guest kernel in $SPYRE_CACHE/$dir (about 15-25 min on 2 cores)"
	rm -rf "$SPYRE_CACHE/$dir"
	mkdir -p "$SPYRE_CACHE/$dir/src" "$SPYRE_CACHE/$dir/deps"
	cp "$here/kernel-debug.config" "$SPYRE_TOP/driver/Kconfig" "$SPYRE_CACHE/$dir/"
	start=$(date +%s)
	# The kernel build needs bc and (objtool) libelf's headers, which the sysroot (a runtime
	# and guest tree) does not carry: the packages are unpacked next to the tree instead.
	in_sysroot "$root" /bin/bash -c "
		set -euo pipefail
		cd /cache/$dir/deps
		apt-get download -q -o APT::Sandbox::User=root libelf-dev bc >/dev/null
		for d in *.deb; do dpkg -x "\$d" .; done
		export PATH=/cache/$dir/deps/usr/bin:\$PATH
		bc --version >/dev/null
		ln -sf /usr/lib/x86_64-linux-gnu/libelf.so.1 usr/lib/x86_64-linux-gnu/libelf.so
		cd /cache/$dir/src
		tar -xJf /usr/src/linux-source-6.12.tar.xz --strip-components=1
		mkdir -p drivers/accel/spyre
		cp ../Kconfig drivers/accel/spyre/Kconfig
		echo '# Kconfig only: spyre.ko is built out of tree from the checkout.' > drivers/accel/spyre/Makefile
		grep -q spyre/Kconfig drivers/accel/Kconfig ||
			sed -i 's|^source \"drivers/accel/qaic/Kconfig\"|&\nsource \"drivers/accel/spyre/Kconfig\"|' drivers/accel/Kconfig
		grep -q spyre/Kconfig drivers/accel/Kconfig
		make -s tinyconfig
		scripts/kconfig/merge_config.sh -m .config kernel/configs/kvm_guest.config ../kernel-debug.config >/dev/null
		make -s olddefconfig
		# Every requested value must have been taken.
		bad=0
		while IFS= read -r line; do
			case \$line in CONFIG_*=*) ;; *) continue ;; esac
			grep -qxF \"\$line\" .config || { echo \"kernel-debug: \$line not taken: \$(grep \"^\${line%%=*}=\" .config || echo unset)\"; bad=1; }
		done < ../kernel-debug.config
		[ \$bad = 0 ]
		make -s -j\$(nproc) HOSTCFLAGS=-I/cache/$dir/deps/usr/include \
			HOSTLDFLAGS=-L/cache/$dir/deps/usr/lib/x86_64-linux-gnu all
		make -s kernelrelease > ../kernelrelease
	" >&2
	log "debug kernel $(cat "$SPYRE_CACHE/$dir/kernelrelease") built in $(( $(date +%s) - start )) s"
	touch "$SPYRE_CACHE/$dir/.complete"
	prune_cache 'linux-debug-*' 2
fi
touch "$SPYRE_CACHE/$dir"
echo "/cache/$dir/src"
