#!/bin/bash
# Guest test of the DKMS package ('make dkms'), as root in /src on the stock kernel, spyre not
# loaded: installs Debian's dkms (build/dkms/dkms.deb, unpacked: the guest root is a tmpfs
# overlay), loads the package that tools/dkms-stage.sh built for this kernel on the host (dkms
# add, build and mktarball in the sysroot, which is this guest's root: the same gcc and
# headers, natively) with dkms ldtarball, source and module, installs it, checks that modprobe
# picks the module DKMS installed, loads it, runs the uapi QUERY kselftests on it, unloads it
# and removes the package. Prints "PASS name" / "FAIL name: why" and "N passed, M failed" last.
set -u
cd /src
version=${1:?usage: dkms-install.sh VERSION}
kver=$(uname -r)
passed=0 failed=0
# Each step's wall time in the guest (where the row's time goes: testing.md "The DKMS row").
check() {
	local name=$1 t0 secs; shift
	t0=$(cut -d' ' -f1 /proc/uptime)
	if "$@" > /tmp/dkms-step.log 2>&1; then
		passed=$((passed + 1)); secs=$(awk -v a="$t0" '{printf "%.1f", $1 - a}' /proc/uptime)
		echo "PASS $name ($secs s)"
	else
		failed=$((failed + 1)); echo "FAIL $name: $*"; tail -n 30 /tmp/dkms-step.log
	fi
}
done_() { echo "$passed passed, $failed failed"; exit $((failed > 0)); }

# Under TCG each walk of the kernel's module tree over 9p (thousands of files) takes a minute or
# more: depmod's, and dkms's own searches for the tree's compression at install, status and
# remove (about 400 of this test's 620 s, measured). The tree is cut to what the test loads,
# spyre's dependencies (their files as they are, compressed the same), before anything runs.
trim_module_tree() {
	local kdir=/lib/modules/$kver/kernel keep=/tmp/kernel-modules f
	mkdir -p "$keep"
	for f in $(modprobe --show-depends spyre | awk '$1 == "insmod" {print $2}' | grep "^$kdir/"); do
		mkdir -p "$keep/$(dirname "${f#"$kdir"/}")" && cp "$f" "$keep/${f#"$kdir"/}" || return 1
	done
	[ -n "$(ls -A "$keep")" ] && mount --bind "$keep" "$kdir"
}
check trim_module_tree trim_module_tree
check unpack_dkms dpkg -x build/dkms/dkms.deb /
check dkms_runs dkms --version
# spyre-vm puts the checkout's spyre.ko in updates/: without it only DKMS's copy can load.
rm -f "/lib/modules/$kver/updates/spyre.ko" && depmod "$kver"
check no_other_spyre_module sh -c '! modinfo -n spyre'
# Under TCG the build here took 88-410 s; the host built the package (tools/dkms-stage.sh).
tarball=build/dkms/spyre-$version-kernel$kver-$(uname -m).dkms.tar.gz
check binary_package_for_this_kernel test -s "$tarball"
rm -rf "/usr/src/spyre-$version"
check dkms_ldtarball dkms ldtarball "$tarball"
check source_loaded diff -r "/usr/src/spyre-$version" "build/dkms/spyre-$version"
check dkms_status_built sh -c "dkms status -m spyre -v $version -k $kver | grep -q ': built'"
check dkms_install dkms install -m spyre -v "$version" -k "$kver"
check dkms_status_installed sh -c "dkms status -m spyre -v $version -k $kver | grep -q ': installed'"
check modinfo_is_dkms_module sh -c "modinfo -n spyre | grep -q '^/lib/modules/$kver/updates/dkms/spyre.ko'"
[ "$failed" -eq 0 ] || done_
check modprobe modprobe spyre
check accel_node sh -c '[ -e /dev/accel/accel0 ]'
# The three QUERY cases must all have run and passed (a filter that matches nothing passes).
check uapi_query sh -c 'build/cmake/tests/guest/uapi/spyre_uapi_test -t query_device_info \
	-t query_mem_info_tracks_bos -t query_telemetry_counts_jobs > /tmp/dkms-uapi.log 2>&1;
	cat /tmp/dkms-uapi.log; grep -q "^# Totals: pass:3 fail:0 " /tmp/dkms-uapi.log'
check unload modprobe -r spyre
check dkms_remove dkms remove -m spyre -v "$version" --all
check module_gone sh -c "! modinfo -n spyre && [ ! -e /lib/modules/$kver/updates/dkms/spyre.ko ]"
done_
