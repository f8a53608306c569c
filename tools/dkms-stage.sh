#!/usr/bin/env bash
# Stages what 'make dkms' installs in the guest, under build/dkms/:
#   spyre-<version>/   the DKMS source tree (driver/dkms.conf, driver sources and Makefile,
#                      hw/spyre_hw.h and uapi/spyre_accel.h, flat)
#   dkms.deb           Debian's dkms package (arch all) of the sysroot's release, downloaded
#                      once into $SPYRE_CACHE/dkms-<version>/ (the sysroot does not carry it,
#                      and its package list keys the set-up cache)
#   spyre-<version>-kernel<kver>-x86_64.dkms.tar.gz
#                      the package with the module built for the guest's stock kernel: dkms
#                      add, build and mktarball of that source, run here in the sysroot (the
#                      guest's root: the same gcc and kernel headers) with a private dkms tree
#                      under build/dkms/host; the guest loads it with dkms ldtarball (source
#                      and module: "built" there, a kernel without a module would rebuild it)
# Prints the package version. Usage: tools/dkms-stage.sh   (host, as root)
set -euo pipefail
. "$(dirname "$0")/setup/common.sh"

root=$("$SPYRE_TOP/tools/setup/sysroot.sh")
version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$SPYRE_TOP/driver/dkms.conf")
[ -n "$version" ] || die "driver/dkms.conf has no PACKAGE_VERSION"

dkms_version=$(chroot "$root" apt-cache policy dkms | sed -n 's/^ *Candidate: //p')
[ -n "$dkms_version" ] && [ "$dkms_version" != "(none)" ] || die "no dkms package in the sysroot's apt sources"
take_lock dkms
cache=$SPYRE_CACHE/dkms-$dkms_version
if ! ls "$cache"/dkms_*_all.deb >/dev/null 2>&1; then
	log "downloading Debian's dkms $dkms_version into $cache"
	mkdir -p "$cache"
	in_sysroot "$root" /bin/bash -c "cd /cache/dkms-$dkms_version &&
		apt-get download -q -o APT::Sandbox::User=root dkms=$dkms_version >/dev/null"
	prune_cache 'dkms-*' 1
fi
touch "$cache"

out=$SPYRE_TOP/build/dkms
rm -rf "$out" && mkdir -p "$out/spyre-$version"
cp "$cache"/dkms_*_all.deb "$out/dkms.deb"
cd "$SPYRE_TOP"
cp $(ls driver/*.[ch] | grep -v '\.mod\.c$') driver/Makefile driver/dkms.conf hw/spyre_hw.h \
	uapi/spyre_accel.h "$out/spyre-$version/"

# Built here, not in the guest: under TCG the guest's `dkms build` (Kbuild's make runs, objtool,
# modpost, BTF, the link) took 88-410 s of the DKMS row, natively about 10 s (testing.md "The
# DKMS row"). dkms signs with a key it makes in the private tree, as it would in /var/lib/dkms.
kvers=$(ls "$root/lib/modules")
[ "$(wc -w <<<"$kvers")" -eq 1 ] || die "the sysroot has kernels '$kvers', expected the guest's one"
in_sysroot "$root" /bin/bash -c "set -e
	h=/src/build/dkms/host
	mkdir -p \$h/pkg \$h/tree \$h/src
	dpkg -x /src/build/dkms/dkms.deb \$h/pkg
	cp -r /src/build/dkms/spyre-$version \$h/src/
	dkms() { mok_signing_key=\$h/mok.key mok_certificate=\$h/mok.pub \$h/pkg/usr/sbin/dkms \\
		--dkmstree \$h/tree --sourcetree \$h/src \"\$@\"; }
	dkms add -m spyre -v $version
	t0=\$(date +%s)
	dkms build -m spyre -v $version -k $kvers
	echo \"host: dkms build took \$((\$(date +%s) - t0)) s\"
	dkms mktarball -m spyre -v $version -k $kvers
	cp \$h/tree/spyre/$version/tarball/spyre-$version-kernel$kvers-x86_64.dkms.tar.gz /src/build/dkms/
" >&2 || die "dkms could not build the binary package of spyre $version for $kvers (above)"
echo "$version"
