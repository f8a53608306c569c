#!/bin/bash
# Hot-unplug a card while 4 processes run jobs on it, then plug it back (in a spyre-vm guest,
# spyre loaded, at least one card). Checks: every process ends within the time limit, having
# verified every job it finished and then seen the card go away (ENODEV, or its job ABORTED);
# the other cards keep working meanwhile; device_add brings back a card that passes the same
# workload; a process running op-library work across the unplug releases the lost card and
# runs the same op on the card once it is back (ops_replug.cpp); with HOTPLUG_TORCH=1, a PyTorch
# process running eager, torch.compile'd and replayed calls on the card gets the same clear error
# from all three (compile_unplug.py); the kernel log has no oops, warning or hung task.
set -euo pipefail
cd /src
stress=build/cmake/tests/guest/stress/spyre_stress
replug=build/cmake/tests/guest/failure/spyre_ops_replug
qmp=tools/vm/guest-qmp
id=${1:-spyre0}
other=${2:-}	# a card that must keep working meanwhile, if any

# The accel node of QEMU device $id: its root port's secondary bus holds the card.
node_of() {
	local bus
	bus=$($qmp qmp '{"execute": "query-pci"}' | python3 -c '
import json, sys
for bus in json.load(sys.stdin)["return"]:
    for dev in bus["devices"]:
        br = dev.get("pci_bridge")
        if br and dev.get("qdev_id") == "rp" + sys.argv[1][len("spyre"):]:
            print("%02x" % br["bus"]["secondary"])' "$1")
	[ -n "$bus" ] || { echo "no root port for $1" >&2; return 1; }
	local n
	for n in /sys/bus/pci/devices/0000:$bus:00.0/accel/accel*; do
		[ -e "$n" ] && { echo "/dev/accel/$(basename "$n")"; return 0; }
	done
	return 1
}

wait_node() {	# wait_node ID SEC: the accel node of ID once it exists
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		node_of "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "hotplug: $1 has no accel node after $2 s" >&2
	return 1
}

node=$(wait_node "$id" 10)
echo "hotplug: $id is $node"
args=$($qmp card-args "$id")
deleted=$(grep -c '"DEVICE_DELETED"' "$SPYRE_VM_DIR/qmp/events.jsonl" 2>/dev/null || true)

pci=$(basename "$(readlink -f "/sys/class/accel/$(basename "$node")/device")")
tpid=
if [ "${HOTPLUG_TORCH:-0}" = 1 ]; then
	# first, alone: `import torch` and the compiles take a minute or more under TCG
	env PYTHONPATH=build/cmake/torch_spyre/python PYTHONDONTWRITEBYTECODE=1 \
		python3 tests/guest/failure/compile_unplug.py "$pci" 900 > /tmp/hotplug-torch.log 2>&1 &
	tpid=$!
	for ((i = 0; i < 6000; i++)); do
		grep -q 'first op verified' /tmp/hotplug-torch.log && break
		kill -0 $tpid 2>/dev/null || break
		sleep 0.1
	done
	grep -q 'first op verified' /tmp/hotplug-torch.log || {
		cat /tmp/hotplug-torch.log
		echo "hotplug: the PyTorch process failed or was not ready in 600 s"
		exit 1
	}
fi
$stress --dev "$node" --procs 4 --until-gone --seconds 120 > /tmp/hotplug-stress.log 2>&1 &
spid=$!
$replug "$pci" 150 > /tmp/hotplug-replug.log 2>&1 &
rpid=$!
opid=
if [ -n "$other" ]; then
	$stress --dev "$(wait_node "$other" 10)" --procs 2 --jobs 60 > /tmp/hotplug-other.log 2>&1 &
	opid=$!
fi
sleep 3	# the processes have their buffers and are running jobs
# and the op-library process has run its first op (planned, program loaded, verified)
for ((i = 0; i < 600; i++)); do
	grep -q 'first op verified' /tmp/hotplug-replug.log && break
	kill -0 $rpid 2>/dev/null || break
	sleep 0.1
done
grep -q 'first op verified' /tmp/hotplug-replug.log ||
	echo "hotplug: the op-library process ran no op in 60 s before the unplug" >&2
$qmp hmp "device_del $id"
# pciehp powers the slot off after its 5 s attention-button delay; the driver's remove() runs.
$qmp wait-event DEVICE_DELETED 60 $((${deleted:-0} + 1))
echo "hotplug: $id removed"
rc=0
wait $spid || rc=$?
cat /tmp/hotplug-stress.log
[ $rc -eq 0 ] || { echo "hotplug: the workload failed on unplug"; exit 1; }
if [ -n "$opid" ]; then
	rc=0; wait $opid || rc=$?
	cat /tmp/hotplug-other.log
	[ $rc -eq 0 ] || { echo "hotplug: $other failed while $id was unplugged"; exit 1; }
fi
[ ! -e "$node" ] || [ "$(node_of "$id" 2>/dev/null)" != "$node" ] || { echo "hotplug: $node still there"; exit 1; }
if [ -n "$tpid" ]; then
	rc=0; wait $tpid || rc=$?
	cat /tmp/hotplug-torch.log
	[ $rc -eq 0 ] || { echo "hotplug: the PyTorch process did not see the loss as eager mode does"; exit 1; }
fi

$qmp hmp "device_add $args"
node=$(wait_node "$id" 60)
echo "hotplug: $id is back as $node"
$stress --dev "$node" --procs 2 --jobs 30
rc=0
wait $rpid || rc=$?
cat /tmp/hotplug-replug.log
[ $rc -eq 0 ] || { echo "hotplug: op-library work did not survive the unplug and re-plug"; exit 1; }
