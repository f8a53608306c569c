#!/usr/bin/env bash
# Build (once per sysroot) the tiny busybox initramfs that mounts the sysroot over 9p as the
# guest's root (read-only, under a tmpfs overlay) and the checkout at /src, then switch_roots
# into tools/vm/guest-init.sh. Prints its path inside the sysroot (/cache/...).
set -euo pipefail
. "$(dirname "$0")/../setup/common.sh"

root=$("$SPYRE_TOP/tools/setup/sysroot.sh")
take_lock initramfs
key=$( (echo "$root"; cat "$SPYRE_TOP/tools/vm/initramfs.sh" "$SPYRE_TOP/tools/vm/initramfs-init") |
	sha256sum | cut -c1-12)
img=initramfs-$key.img
if [ -f "$SPYRE_CACHE/$img" ]; then
	touch "$SPYRE_CACHE/$img"
	echo "/cache/$img"
	exit 0
fi
log "building the guest initramfs"
work=$(mktemp -d "$SPYRE_CACHE/initramfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/lib/mods" "$work/proc" "$work/sys" "$work/dev" "$work/lower" \
	"$work/upper" "$work/newroot"
cp "$root/bin/busybox" "$work/bin/busybox"
cp "$SPYRE_TOP/tools/vm/initramfs-init" "$work/init"
chmod +x "$work/init"
kver=$(ls "$root/lib/modules" | sort -V | tail -n1)
# Modules for 9p over virtio and overlayfs, in dependency order, decompressed so busybox
# insmod can load them.
wdir=/cache/$(basename "$work")
in_sysroot "$root" /bin/sh -c "
	set -e
	modprobe -a -S $kver --show-depends 9p 9pnet_virtio overlay | awk '\$1 == \"insmod\" {print \$2}' |
	while read -r m; do
		b=\$(basename \"\$m\"); b=\${b%.xz}; b=\${b%.zst}
		grep -qx \"\$b\" $wdir/lib/mods/order 2>/dev/null && continue
		case \"\$m\" in
		*.xz) xz -dc \"\$m\" > $wdir/lib/mods/\$b ;;
		*.zst) zstd -qdc \"\$m\" > $wdir/lib/mods/\$b ;;
		*) cp \"\$m\" $wdir/lib/mods/\$b ;;
		esac
		echo \"\$b\" >> $wdir/lib/mods/order
	done
	touch $wdir/lib/mods/order
	echo $kver > $wdir/lib/mods/kver
"
in_sysroot "$root" /bin/sh -c "cd $wdir && find . | cpio -o -H newc --quiet | gzip -1 > /cache/$img.tmp"
mv "$SPYRE_CACHE/$img.tmp" "$SPYRE_CACHE/$img"
prune_cache 'initramfs-*.img' 2
echo "/cache/$img"
