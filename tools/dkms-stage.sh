#!/usr/bin/env bash
# Stages what 'make dkms' installs in the guest, under build/dkms/:
#   spyre-<version>/   the DKMS source tree (driver/dkms.conf, driver sources and Makefile,
#                      hw/spyre_hw.h and uapi/spyre_accel.h, flat)
#   dkms.deb           Debian's dkms package (arch all) of the sysroot's release, downloaded
#                      once into $SPYRE_CACHE/dkms-<version>/ (the sysroot does not carry it,
#                      and its package list keys the set-up cache)
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
echo "$version"
