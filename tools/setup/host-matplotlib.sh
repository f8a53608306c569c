#!/usr/bin/env bash
# Debian 12's python3 with python3-matplotlib on the host, for tools/bench/report.py ('make
# bench' draws its HTML report with it; 'make check' tests it). Installed with apt-get when
# missing, as root like debootstrap in sysroot.sh; never in the sysroot, whose package list keys
# every cached sysroot and guest image. Prints the interpreter's path.
set -euo pipefail
. "$(dirname "$0")/common.sh"

py=/usr/bin/python3
if ! "$py" -c 'import matplotlib' 2>/dev/null; then
	[ "$(id -u)" = 0 ] || die "the bench report needs python3-matplotlib on the host (apt-get install python3-matplotlib, as root)"
	log "installing python3-matplotlib on the host"
	apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		-o DPkg::Lock::Timeout=600 python3-matplotlib >&2
	"$py" -c 'import matplotlib' || die "python3-matplotlib is installed but $py cannot import it"
fi
echo "$py"
