#!/usr/bin/env bash
# Debian's ccache of the sysroot's release, unpacked once under $SPYRE_CACHE (the sysroot does not
# carry it: adding it to sysroot-packages.txt would rebuild the sysroot and everything keyed by
# it). Its libraries (libfmt, libhiredis, libxxhash, libzstd) are in the sysroot already. The
# compiler cache itself lives in $SPYRE_CACHE/ccache, so a clean clone (CI) compiles only what
# changed since any earlier build on this machine. Prints the launcher's path as the sysroot sees
# it (/cache/...), or nothing when ccache cannot be had (offline): the build then runs without it.
set -euo pipefail
. "$(dirname "$0")/common.sh"

root=$("$SPYRE_TOP/tools/setup/sysroot.sh")
version=$(chroot "$root" apt-cache policy ccache 2>/dev/null | sed -n 's/^ *Candidate: //p') || version=
[ -n "$version" ] && [ "$version" != "(none)" ] || exit 0
take_lock ccache-bin
dir=ccache-bin-$version
if [ ! -x "$SPYRE_CACHE/$dir/usr/bin/ccache" ]; then
	log "downloading Debian's ccache $version into $SPYRE_CACHE/$dir"
	rm -rf "$SPYRE_CACHE/$dir"
	mkdir -p "$SPYRE_CACHE/$dir"
	if ! in_sysroot "$root" /bin/bash -c "cd /cache/$dir &&
		apt-get download -q -o APT::Sandbox::User=root ccache=$version >/dev/null &&
		dpkg-deb -x ccache_*.deb . && rm -f ccache_*.deb" >&2; then
		log "ccache is not available: building without it"
		rm -rf "${SPYRE_CACHE:?}/$dir"
		exit 0
	fi
	prune_cache 'ccache-bin-*' 1
fi
# It must run in the sysroot (its libraries): a missing one means a sysroot change dropped it.
in_sysroot "$root" "/cache/$dir/usr/bin/ccache" --version >/dev/null 2>&1 || exit 0
# About three full builds of objects (RelWithDebInfo); ccache drops the least recently used.
mkdir -p "$SPYRE_CACHE/ccache"
[ -f "$SPYRE_CACHE/ccache/ccache.conf" ] ||
	in_sysroot "$root" env CCACHE_DIR=/cache/ccache "/cache/$dir/usr/bin/ccache" -M 6G >/dev/null
touch "$SPYRE_CACHE/$dir"
echo "/cache/$dir/usr/bin/ccache"
