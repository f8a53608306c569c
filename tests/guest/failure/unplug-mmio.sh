#!/bin/bash
# Make card spyre1's BARs come and go while every vCPU reads card spyre0's registers through its
# BAR0 (mmio_hammer.c), in a spyre-vm guest with two cards: TOGGLES times memory decode of
# spyre1 off and on (a config space write each), then CYCLES hot-unplugs of spyre1 (QEMU
# device_del) each followed by device_add. Every change commits a QEMU memory map with other
# sections while the vCPUs hold TLB entries of the old one: QEMU 10.0's TCG resolved them against
# the new map (an abort in iotlb_to_section, or reads of another region), which
# qemu-device/patches/0001 fixes (Documentation/hardware.md "The model's QEMU build").
# Checks: every read of spyre0 returns its ID and VERSION, and QEMU survives (else the VM dies).
# Both cards are unbound from their driver meanwhile (a bound BAR cannot be mapped from user
# space, and decode must not go off under it) and bound again at the end.
#   unplug-mmio.sh [TOGGLES [CYCLES]]
set -euo pipefail
cd /src
toggles=${1:-2000}
cycles=${2:-1}
qmp=tools/vm/guest-qmp
hammer=build/cmake/tests/guest/failure/spyre_mmio_hammer

# The PCI device of QEMU device $1: its root port rpN's secondary bus holds the card.
dev_of() {
	local bus
	bus=$($qmp qmp '{"execute": "query-pci"}' | python3 -c '
import json, sys
for bus in json.load(sys.stdin)["return"]:
    for dev in bus["devices"]:
        br = dev.get("pci_bridge")
        if br and dev.get("qdev_id") == "rp" + sys.argv[1][len("spyre"):]:
            print("%02x" % br["bus"]["secondary"])' "$1")
	[ -n "$bus" ] && [ -e "/sys/bus/pci/devices/0000:$bus:00.0/resource0" ] &&
		echo "/sys/bus/pci/devices/0000:$bus:00.0"
}
unbind() {	# unbind DEV: prints the driver it was bound to
	[ -e "$1/driver" ] || return 0
	basename "$(readlink -f "$1/driver")"
	basename "$1" > "$1/driver/unbind"
}

dev0=$(dev_of spyre0) || { echo "unplug-mmio: no card spyre0"; exit 1; }
dev1=$(dev_of spyre1) || { echo "unplug-mmio: needs a second card spyre1"; exit 1; }
drv0=$(unbind "$dev0")
drv1=$(unbind "$dev1")
# hammer_during PHASE CMD...: CMD with mmio_hammer reading spyre0 meanwhile; counts its wrong
# reads in $wrong.
wrong=0
hammer_during() {
	local phase=$1 pid t0 out rc=0
	shift
	$hammer "$dev0/resource0" 3600 > "/tmp/unplug-mmio.$phase" &
	pid=$!
	sleep 1
	t0=$(date +%s)
	"$@"
	kill -TERM $pid
	wait $pid || rc=$?
	out=$(cat "/tmp/unplug-mmio.$phase")
	echo "unplug-mmio: $phase in $(($(date +%s) - t0)) s; $out"
	[ $rc -le 1 ] || { echo "unplug-mmio: mmio_hammer failed ($rc)"; exit 1; }
	wrong=$((wrong + $(sed -E 's/.* ([0-9]+) wrong/\1/' <<<"$out")))
}

toggle_decode() {	# memory decode of spyre1 off and on, $toggles times
	python3 - "$dev1/config" "$toggles" <<'PY'
import os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
cmd = struct.unpack("<H", os.pread(fd, 2, 4))[0]
for _ in range(int(sys.argv[2])):
    os.pwrite(fd, struct.pack("<H", cmd & ~0x2), 4)	# PCI_COMMAND_MEMORY off
    os.pwrite(fd, struct.pack("<H", cmd | 0x2), 4)
os.pwrite(fd, struct.pack("<H", cmd), 4)
PY
}

unplug_replug() {	# device_del spyre1 and device_add it back, $cycles times
	local i w deleted
	for ((i = 1; i <= cycles; i++)); do
		deleted=$(grep -c '"DEVICE_DELETED"' "$SPYRE_VM_DIR/qmp/events.jsonl" 2>/dev/null || true)
		$qmp hmp "device_del spyre1"
		$qmp wait-event DEVICE_DELETED 60 $((${deleted:-0} + 1)) > /dev/null
		$qmp hmp "device_add $($qmp card-args spyre1)"
		for ((w = 0; w < 600; w++)); do dev_of spyre1 > /dev/null && break; sleep 0.1; done
		dev_of spyre1 > /dev/null || { echo "unplug-mmio: spyre1 did not come back"; exit 1; }
	done
}

hammer_during "$toggles-decode-toggles" toggle_decode
[ -z "$drv1" ] || echo "$(basename "$dev1")" > "/sys/bus/pci/drivers/$drv1/bind"
hammer_during "$cycles-unplugs" unplug_replug
[ -z "$drv0" ] || echo "$(basename "$dev0")" > "/sys/bus/pci/drivers/$drv0/bind"
[ "$wrong" -eq 0 ]
