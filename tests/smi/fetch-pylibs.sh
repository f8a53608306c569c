#!/usr/bin/env bash
# The Python libraries that validate spyre-smi's output on the host: Debian's
# python3-jsonschema and python3-prometheus-client with their dependencies, downloaded with the
# host's apt (Debian 12) and unpacked, not installed, into $SPYRE_CACHE/pylibs-<key> (key: the
# packages' candidate versions). Prints the directory to put on PYTHONPATH.
set -euo pipefail
. "$(dirname "$0")/../../tools/setup/common.sh"

pkgs="python3-jsonschema python3-attr python3-pyrsistent python3-prometheus-client python3-decorator"
versions=$(for p in $pkgs; do
	v=$(apt-cache policy "$p" | sed -n 's/^ *Candidate: //p')
	[ -n "$v" ] && [ "$v" != "(none)" ] || die "$p is not available from the host's apt sources"
	echo "$p=$v"
done)
dir=$SPYRE_CACHE/pylibs-$(echo "$versions" | sha256sum | cut -c1-12)
take_lock pylibs
if [ ! -f "$dir/.complete" ]; then
	log "unpacking $(echo $versions) into $dir"
	rm -rf "$dir" && mkdir -p "$dir/debs"
	# shellcheck disable=SC2086
	(cd "$dir/debs" && apt-get download -q -o APT::Sandbox::User=root $(echo $versions) >/dev/null)
	for d in "$dir"/debs/*.deb; do dpkg -x "$d" "$dir"; done
	echo "$versions" > "$dir/versions"
	touch "$dir/.complete"
	prune_cache 'pylibs-*' 1
fi
touch "$dir"
echo "$dir/usr/lib/python3/dist-packages"
