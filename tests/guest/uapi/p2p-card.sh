#!/bin/bash
# Cards of a spyre-vm guest by QEMU id, for spyre_p2p_test's hot-unplug case:
#   p2p-card.sh node ID      the accel node of card ID (e.g. spyre1), waiting up to 60 s
#   p2p-card.sh unplug ID    device_del ID and wait until QEMU has removed it
#   p2p-card.sh replug ID    device_add ID again (its spyre-vm arguments) and wait for its node
# Exit status 0 on success; 2 outside a spyre-vm guest (no SPYRE_VM_DIR).
set -euo pipefail
[ -n "${SPYRE_VM_DIR:-}" ] || { echo "p2p-card.sh: not in a spyre-vm guest" >&2; exit 2; }
cd "$(dirname "$0")/../../.."
qmp=tools/vm/guest-qmp

# As tests/guest/failure/hotplug.sh: the card is on the secondary bus of its root port rpN.
node_of() {
	local bus n
	bus=$($qmp qmp '{"execute": "query-pci"}' | python3 -c '
import json, sys
for bus in json.load(sys.stdin)["return"]:
    for dev in bus["devices"]:
        br = dev.get("pci_bridge")
        if br and dev.get("qdev_id") == "rp" + sys.argv[1][len("spyre"):]:
            print("%02x" % br["bus"]["secondary"])' "$1")
	[ -n "$bus" ] || return 1
	for n in /sys/bus/pci/devices/0000:$bus:00.0/accel/accel*; do
		[ -e "$n" ] && { echo "/dev/accel/$(basename "$n")"; return 0; }
	done
	return 1
}

wait_node() {
	local i
	for ((i = 0; i < 600; i++)); do
		node_of "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "p2p-card.sh: $1 has no accel node" >&2
	return 1
}

case ${1:-} in
node) wait_node "$2" ;;
unplug)
	deleted=$(grep -c '"DEVICE_DELETED"' "$SPYRE_VM_DIR/qmp/events.jsonl" 2>/dev/null || true)
	$qmp hmp "device_del $2"
	$qmp wait-event DEVICE_DELETED 60 $((${deleted:-0} + 1)) ;;
replug)
	$qmp hmp "device_add $($qmp card-args "$2")"
	wait_node "$2" > /dev/null ;;
*) echo "usage: $0 node|unplug|replug ID" >&2; exit 1 ;;
esac
