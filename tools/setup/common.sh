# Shared helpers for the set-up scripts: cache location and input-keyed cache entries.
# Sourced, not executed.

export SPYRE_CACHE=${SPYRE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spyre}
SPYRE_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

log() { printf '[spyre-setup] %s\n' "$*" >&2; }
die() { printf '[spyre-setup] error: %s\n' "$*" >&2; exit 1; }

# cache_key FILE...: a short hash of the given inputs, so a cache entry is rebuilt when they change.
cache_key() { cat "$@" | sha256sum | cut -c1-12; }

# in_sysroot SYSROOT CMD...: run CMD inside the trixie tree with /proc, /sys, /dev and the
# checkout (at /src) mounted in a private mount namespace, so nothing leaks if we are killed.
in_sysroot() {
	local root=$1; shift
	unshare --mount --propagation private -- /bin/bash -c '
		root=$1; src=$2; shift 2
		mount -t proc proc "$root/proc"
		mount --rbind /sys "$root/sys"
		mount --rbind /dev "$root/dev"
		mkdir -p "$root/src" "$root/cache"
		mount --bind "$src" "$root/src"
		mount --bind "$SPYRE_CACHE" "$root/cache"
		[ -e /etc/resolv.conf ] && cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
		exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			SPYRE_CACHE=/cache "$@"
	' in_sysroot "$root" "${SPYRE_SRC:-$SPYRE_TOP}" "$@"
}

# take_lock NAME: serialize set-up steps that share a cache entry (held until the script exits).
take_lock() {
	mkdir -p "$SPYRE_CACHE"
	exec 9>"$SPYRE_CACHE/$1.lock"
	flock 9
}

# prune_cache PATTERN KEEP: after building a new cache entry, delete all but the KEEP most
# recently used entries matching PATTERN (entries are touched on every use), so that changing
# inputs does not fill the disk with stale sysroots and QEMU trees.
prune_cache() {
	local pattern=$1 keep=$2 old
	old=$(cd "$SPYRE_CACHE" && ls -dt -- $pattern 2>/dev/null | grep -v '\.tmp$' | tail -n +$((keep + 1)))
	for e in $old; do
		log "removing stale cache entry $e"
		rm -rf "${SPYRE_CACHE:?}/$e"
	done
}
