#!/usr/bin/env bash
# Runs make targets as a new user would on a fresh Debian 12 machine: a bookworm minbase tree
# (debootstrap) with only git, make, sudo and ca-certificates, a clean clone of this checkout's
# HEAD inside it, and an empty ~/.cache/spyre. Nothing of the host's set-up cache or tools is
# visible in there, so a step that relies on a host tool the scripts do not install fails here.
#   tests/fresh-machine/run.sh DIR [TARGET...]   (default targets: demo check; as root)
# Prints each target's wall time; exit status is the first failing target's.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "needs root (debootstrap, chroot)" >&2; exit 1; }
dir=$(realpath -m "${1:?usage: run.sh DIR [TARGET...]}"); shift
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(demo check)
top=$(cd "$(dirname "$0")/../.." && pwd)
mirror=${SPYRE_DEBIAN_MIRROR:-http://deb.debian.org/debian}

command -v debootstrap >/dev/null || { apt-get update -q; apt-get install -y -q debootstrap; }
if [ ! -f "$dir/.fresh-complete" ]; then
	rm -rf "$dir"
	debootstrap --variant=minbase --include=git,make,sudo,ca-certificates bookworm "$dir" "$mirror"
	cat > "$dir/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://security.debian.org/debian-security bookworm-security main
SRC
	touch "$dir/.fresh-complete"
fi
rm -rf "$dir/root/spyre" "$dir/root/.cache/spyre"
git clone -q "$top" "$dir/root/spyre"
git -C "$dir/root/spyre" checkout -q "$(git -C "$top" rev-parse HEAD)"

# The tree as / with its own /proc, /sys and /dev, in a private mount namespace.
rc=0
for t in "${targets[@]}"; do
	start=$(date +%s)
	unshare --mount --propagation private -- /bin/bash -c '
		dir=$1; t=$2
		mount --bind "$dir" "$dir"	# its / a mount point, as on a machine (unshare needs it)
		mount -t proc proc "$dir/proc"
		mount --rbind /sys "$dir/sys"
		mount --rbind /dev "$dir/dev"
		cp -L /etc/resolv.conf "$dir/etc/resolv.conf"
		exec chroot "$dir" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			/bin/bash -c "cd /root/spyre && make $t"' fresh "$dir" "$t" || rc=$?
	echo "fresh-machine: make $t: exit $rc after $(($(date +%s) - start)) s"
	[ $rc -eq 0 ] || exit $rc
done
