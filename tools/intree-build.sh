#!/usr/bin/env bash
# Builds spyre.ko inside a kernel tree, as drivers/accel/spyre: a copy of Debian's
# linux-source-6.12 (the sysroot's /usr/src/linux-source-6.12.tar.xz, the release of the
# guest kernel) with the driver, its register header and its uapi header copied in, Kconfig
# and Makefile of drivers/accel hooked, DRM_ACCEL_SPYRE=m in a small x86_64 config
# (tinyconfig + kvm_guest.config + the options the driver and its optional parts need), and
# warnings as errors (W=1 -Werror). It then installs the uapi headers the kernel way
# (make headers) and compiles a program against <drm/spyre_accel.h> from them, and again with
# the header 'make install-headers' installs.
#
# The extracted and prepared tree is cached in $SPYRE_CACHE/intree-<key> (key: the
# linux-source version); later runs copy the driver in, reconfigure and rebuild only it.
# Usage: tools/intree-build.sh    (host, as root; 'make intree-check')
set -euo pipefail
. "$(dirname "$0")/setup/common.sh"

root=$("$SPYRE_TOP/tools/setup/sysroot.sh")
take_lock intree
src_version=$(chroot "$root" dpkg-query -W -f '${Version}' linux-source-6.12)
# Bump the tag when the extraction or the unpacked build tools change.
key=$(echo "linux-source-6.12 $src_version, bc and libelf-dev unpacked, v1" | sha256sum | cut -c1-12)
dir=intree-$key
start=$(date +%s)

if [ ! -f "$SPYRE_CACHE/$dir/.extracted" ]; then
	log "extracting linux-source-6.12 $src_version into $SPYRE_CACHE/$dir (once, 1-3 min)"
	rm -rf "${SPYRE_CACHE:?}/$dir"
	mkdir -p "$SPYRE_CACHE/$dir/src" "$SPYRE_CACHE/$dir/deps"
	# bc (timeconst.h) and libelf's headers (objtool) are not in the sysroot: unpacked next
	# to the tree, as tools/setup/kernel-debug.sh does.
	in_sysroot "$root" /bin/bash -c "
		set -euo pipefail
		cd /cache/$dir/deps
		apt-get download -q -o APT::Sandbox::User=root libelf-dev bc >/dev/null
		for d in *.deb; do dpkg -x \"\$d\" .; done
		ln -sf /usr/lib/x86_64-linux-gnu/libelf.so.1 usr/lib/x86_64-linux-gnu/libelf.so
		tar -xJf /usr/src/linux-source-6.12.tar.xz -C /cache/$dir/src --strip-components=1
	" >&2
	touch "$SPYRE_CACHE/$dir/.extracted"
	prune_cache 'intree-*' 1
fi
touch "$SPYRE_CACHE/$dir"

in_sysroot "$root" /bin/bash -c "
	set -euo pipefail
	export PATH=/cache/$dir/deps/usr/bin:\$PATH
	k=/cache/$dir/src
	make_k() {
		make -C \$k -s -j\$(nproc) HOSTCFLAGS=-I/cache/$dir/deps/usr/include \
			HOSTLDFLAGS=-L/cache/$dir/deps/usr/lib/x86_64-linux-gnu \"\$@\"
	}

	# The driver as an in-tree directory: sources, Kconfig and Makefile of driver/, the
	# register header next to them, the uapi header in include/uapi/drm.
	rm -rf \$k/drivers/accel/spyre
	mkdir -p \$k/drivers/accel/spyre
	cp \$(ls /src/driver/*.[ch] | grep -v '\\.mod\\.c\$') /src/driver/Kconfig /src/driver/Makefile \
		/src/hw/spyre_hw.h \$k/drivers/accel/spyre/
	cp /src/uapi/spyre_accel.h \$k/include/uapi/drm/spyre_accel.h
	grep -q spyre/Kconfig \$k/drivers/accel/Kconfig ||
		sed -i 's|^source \"drivers/accel/qaic/Kconfig\"|&\nsource \"drivers/accel/spyre/Kconfig\"|' \
			\$k/drivers/accel/Kconfig
	grep -q 'spyre/' \$k/drivers/accel/Makefile ||
		echo 'obj-\$(CONFIG_DRM_ACCEL_SPYRE)	+= spyre/' >> \$k/drivers/accel/Makefile
	grep -q spyre/Kconfig \$k/drivers/accel/Kconfig

	# tinyconfig, a KVM guest, modules, and what spyre.ko and its optional parts use.
	cat > \$k/spyre.config <<-'EOF'
	CONFIG_64BIT=y
	CONFIG_MODULES=y
	CONFIG_MODULE_UNLOAD=y
	CONFIG_PCI=y
	CONFIG_PCI_MSI=y
	CONFIG_DRM=y
	CONFIG_DRM_ACCEL=y
	CONFIG_DRM_ACCEL_SPYRE=m
	CONFIG_HWMON=y
	CONFIG_DEBUG_FS=y
	CONFIG_FTRACE=y
	CONFIG_ENABLE_DEFAULT_TRACERS=y
	EOF
	cd \$k
	make -s tinyconfig
	scripts/kconfig/merge_config.sh -m .config kernel/configs/kvm_guest.config spyre.config >/dev/null
	make -s olddefconfig
	bad=0
	for want in \$(grep ^CONFIG_ spyre.config); do
		grep -qxF \"\$want\" .config || { echo \"intree: \$want not taken: \$(grep \"^\${want%%=*}=\" .config || echo unset)\"; bad=1; }
	done
	# What the driver selects or uses, built in or as modules.
	for opt in DRM_SCHED DRM_GEM_SHMEM_HELPER EVENT_TRACING; do
		grep -qE \"^CONFIG_\$opt=[ym]\" .config || { echo \"intree: CONFIG_\$opt is not set\"; bad=1; }
	done
	[ \$bad = 0 ]

	make_k modules_prepare
	rm -f drivers/accel/spyre/*.o drivers/accel/spyre/spyre.ko
	# Without a vmlinux (modules_prepare only) modpost cannot resolve the module's imports:
	# those warnings are expected; any other modpost warning (section mismatch, missing
	# MODULE_DESCRIPTION, ...) fails the check.
	make_k W=1 KCFLAGS=-Werror KBUILD_MODPOST_WARN=1 drivers/accel/spyre/spyre.ko \
		> /cache/$dir/build.log 2>&1 || { cat /cache/$dir/build.log; exit 1; }
	if grep 'WARNING: modpost:' /cache/$dir/build.log |
		grep -vE 'undefined!\$|suppressed [0-9]+ unresolved symbol warnings'; then
		echo 'intree: modpost warnings'; exit 1
	fi
	modinfo -F vermagic drivers/accel/spyre/spyre.ko | grep -q \"^\$(make -s kernelrelease) \"
	echo \"intree: drivers/accel/spyre/spyre.ko built (\$(make -s kernelrelease), W=1 -Werror)\"

	# The uapi header through the kernel's headers_install, then used as <drm/spyre_accel.h>.
	make_k headers
	test -f usr/include/drm/spyre_accel.h
	printf '#include <drm/spyre_accel.h>\nint main(void) { return DRM_IOCTL_SPYRE_QUERY == 0; }\n' |
		gcc -Wall -Werror -I usr/include -x c -o /dev/null -
	echo 'intree: <drm/spyre_accel.h> installed by make headers and compiles'
	# The same with the file 'make install-headers' installs, next to the kernel's drm.h.
	rm -rf /cache/$dir/staged
	make -s -C /src install-headers DESTDIR=/cache/$dir/staged
	cp /cache/$dir/staged/usr/include/drm/spyre_accel.h usr/include/drm/spyre_accel.h
	printf '#include <drm/spyre_accel.h>\nint main(void) { return DRM_IOCTL_SPYRE_QUERY == 0; }\n' |
		gcc -Wall -Werror -I usr/include -x c -o /dev/null -
	echo 'intree: make install-headers installs <drm/spyre_accel.h>, which compiles'
"
echo "intree: done in $(( $(date +%s) - start )) s"
