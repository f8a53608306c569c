#!/usr/bin/env bash
# Build (once) the Debian trixie tree that is both the build sysroot and the guest root file
# system. Prints its path. Cached under $SPYRE_CACHE keyed by this script and the package list.
set -euo pipefail
. "$(dirname "$0")/common.sh"

MIRROR=${SPYRE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
here=$(dirname "$0")
# Bump SYSROOT_FORMAT when a change to this script changes the tree it produces.
SYSROOT_FORMAT=1
key=$( (echo "$SYSROOT_FORMAT"; cat "$here/sysroot-packages.txt") | sha256sum | cut -c1-12)
root=$SPYRE_CACHE/sysroot-$key

if [ -f "$root/.spyre-complete" ]; then
	touch "$root"
	echo "$root"
	exit 0
fi
take_lock sysroot
if [ -f "$root/.spyre-complete" ]; then	# built by a concurrent caller meanwhile
	echo "$root"
	exit 0
fi

[ "$(id -u)" = 0 ] || die "building the sysroot needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || { log "installing debootstrap"; apt-get update -q >&2; apt-get install -y -q debootstrap >&2; }
mkdir -p "$SPYRE_CACHE"
tmp=$root.tmp
rm -rf "$tmp"
start=$(date +%s)
log "debootstrap trixie into $tmp"
debootstrap --variant=minbase trixie "$tmp" "$MIRROR" >&2

cat > "$tmp/etc/apt/sources.list" <<SRC
deb $MIRROR trixie main
deb-src $MIRROR trixie main
SRC
# A guest never needs docs or man pages; keep the tree small.
cat > "$tmp/etc/dpkg/dpkg.cfg.d/01-spyre-nodoc" <<'CFG'
path-exclude=/usr/share/doc/*
path-exclude=/usr/share/man/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/share/info/*
CFG
pkgs=$(grep -v '^#' "$here/sysroot-packages.txt" | xargs)
log "installing packages into the sysroot"
in_sysroot "$tmp" /bin/sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs && apt-get clean" >&2

# The guest's hostname and a minimal fstab-free configuration.
echo spyre-vm > "$tmp/etc/hostname"
touch "$tmp/.spyre-complete"
rm -rf "$root"
mv "$tmp" "$root"
prune_cache 'sysroot-*' 2
log "sysroot ready in $(( $(date +%s) - start )) s: $root"
echo "$root"
