#!/usr/bin/env bash
# Build qemu-system-x86_64 from Debian trixie's QEMU source package with the Spyre card model
# (qemu-device/) compiled in. The unpacked source and the build directory are cached under
# $SPYRE_CACHE keyed by the sysroot and this script; the device sources are synced in on every
# call so ninja rebuilds only what changed. Prints the path of the QEMU binary (sysroot-relative).
set -euo pipefail
. "$(dirname "$0")/common.sh"

root=$("$(dirname "$0")/sysroot.sh")
# The build is keyed by the sysroot, the configure line and the patches carried against QEMU
# (qemu-device/patches/*.patch, applied in order to the unpacked source); bump QEMU_FORMAT when a
# change here needs a fresh source tree (e.g. a new hook into QEMU's build files).
QEMU_FORMAT=2
shopt -s nullglob
patches=("$SPYRE_TOP"/qemu-device/patches/*.patch)
shopt -u nullglob
CONFIGURE_FLAGS="--target-list=x86_64-softmmu --without-default-features --enable-kvm \
--enable-virtfs --enable-attr --enable-cap-ng --enable-fdt=system --disable-docs \
--disable-install-blobs --disable-werror"
# SPYRE_QEMU_SANITIZE=1: the same QEMU with AddressSanitizer and UBSan everywhere (make
# fuzz-asan), cached under its own key beside the normal build (a cold build: 20-40 minutes).
# SPYRE_QEMU_SANITIZE=model: the normal build with only the card model (qemu-device/ and the
# engine) compiled with both sanitizers and their runtimes linked in (make check): a copy of the
# normal tree that recompiles the model's sources alone, so it costs minutes, not a QEMU build.
case "${SPYRE_QEMU_SANITIZE:-}" in
"") ;;
model) export SPYRE_MODEL_SANITIZE=1 ;;
1) CONFIGURE_FLAGS="$CONFIGURE_FLAGS --enable-asan --enable-ubsan" ;;
*) die "SPYRE_QEMU_SANITIZE: 1 (all of QEMU) or model (the card model only)" ;;
esac
key=$( (echo "$QEMU_FORMAT $CONFIGURE_FLAGS $root"; cat "${patches[@]}" /dev/null) | sha256sum | cut -c1-12)
qdir=qemu-$key			# relative to $SPYRE_CACHE, seen as /cache inside the sysroot
# Two checkouts that change qemu-device/ at once would rebuild one tree with each other's
# sources: SPYRE_QEMU_INSTANCE=NAME gives a checkout its own build tree, copied from the shared
# one (meson's paths are all under /qemu, so a copy builds incrementally).
# The model-sanitizer tree is made the same way (suffix .model-san).
if [ -n "${SPYRE_QEMU_INSTANCE:-}" ] || [ -n "${SPYRE_MODEL_SANITIZE:-}" ]; then
	[[ ${SPYRE_QEMU_INSTANCE:-} =~ ^[A-Za-z0-9_-]*$ ]] || die "SPYRE_QEMU_INSTANCE: letters, digits, - and _ only"
	shared=$qdir
	qdir=qemu-$key${SPYRE_QEMU_INSTANCE:+.$SPYRE_QEMU_INSTANCE}${SPYRE_MODEL_SANITIZE:+.model-san}
	# The shared tree must exist (configured and built) before it can be copied.
	[ -f "$SPYRE_CACHE/$shared/.configured" ] || SPYRE_QEMU_INSTANCE= SPYRE_MODEL_SANITIZE= \
		SPYRE_QEMU_SANITIZE= "$0" >/dev/null
	take_lock "$qdir"
	if [ ! -f "$SPYRE_CACHE/$qdir/.configured" ] && [ -f "$SPYRE_CACHE/$shared/.configured" ]; then
		log "copying the QEMU build tree to $SPYRE_CACHE/$qdir"
		rm -rf "$SPYRE_CACHE/$qdir"
		(flock 8 && cp -a "$SPYRE_CACHE/$shared" "$SPYRE_CACHE/$qdir") 8>"$SPYRE_CACHE/$shared.lock"
	fi
else
	# One lock per build tree: the sanitizer build (long when cold) does not hold up the others.
	take_lock "$qdir"
fi

# Meson records absolute paths, so configure and build always see the tree at /qemu.
in_qemu_tree() {
	in_sysroot "$root" /bin/sh -c "mkdir -p /qemu && mount --bind /cache/$qdir /qemu && cd /qemu && $1"
}

if [ ! -f "$SPYRE_CACHE/$qdir/.configured" ]; then
	log "unpacking Debian's QEMU source into $SPYRE_CACHE/$qdir"
	rm -rf "$SPYRE_CACHE/$qdir"
	mkdir -p "$SPYRE_CACHE/$qdir"
	in_qemu_tree "apt-get source -q qemu >/dev/null && mv qemu-*/ src" >&2
	# Fixes to QEMU itself (Documentation/hardware.md "The model's QEMU build"): each must apply
	# exactly, or the build stops here.
	# The sysroot's patch (the host may not have one); the checkout is /src there.
	for p in "${patches[@]}"; do
		name=$(basename "$p")
		log "applying $name"
		in_qemu_tree "patch -d src -p1 --forward --batch --fuzz=0 --quiet < /src/qemu-device/patches/$name" >&2 ||
			die "$name does not apply to Debian's QEMU source"
	done
	# Hook the device directory into QEMU's build: hw/misc/spyre with its own meson.build,
	# Kconfig symbol and trace events.
	src=$SPYRE_CACHE/$qdir/src
	mkdir -p "$src/hw/misc/spyre"
	grep -q "subdir('spyre')" "$src/hw/misc/meson.build" || echo "subdir('spyre')" >> "$src/hw/misc/meson.build"
	grep -q 'spyre/Kconfig' "$src/hw/misc/Kconfig" || echo 'source spyre/Kconfig' >> "$src/hw/misc/Kconfig"
	grep -q "'hw/misc/spyre'" "$src/meson.build" || \
		sed -i -E "s|^( *)'hw/misc',|&\n\\1'hw/misc/spyre',|" "$src/meson.build"
	grep -q "'hw/misc/spyre'" "$src/meson.build" || die "could not add hw/misc/spyre to QEMU's trace subdirs"
	"$SPYRE_TOP/tools/setup/qemu-sync.sh" "$src"
	log "configuring QEMU"
	in_qemu_tree "mkdir -p build && cd build && ../src/configure $CONFIGURE_FLAGS" >&2
	touch "$SPYRE_CACHE/$qdir/.configured"
	prune_cache 'qemu-????????????' 2
	# Instance and model-sanitizer copies of trees that are gone go with them.
	for d in "$SPYRE_CACHE"/qemu-????????????.*; do
		b=${d##*/}
		[ -d "$d" ] && [ ! -d "$SPYRE_CACHE/${b%%.*}" ] || continue
		log "removing stale cache entry $b"
		rm -rf "$d" "$d.lock"
	done
fi
touch "$SPYRE_CACHE/$qdir"

"$SPYRE_TOP/tools/setup/qemu-sync.sh" "$SPYRE_CACHE/$qdir/src"
log "building QEMU (incremental)"
in_qemu_tree "ninja -C build ${SPYRE_NINJA_JOBS:+-j$SPYRE_NINJA_JOBS} qemu-system-x86_64 tests/qtest/spyre-test" >&2
echo "/cache/$qdir/build/qemu-system-x86_64"
