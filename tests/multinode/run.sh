#!/bin/bash
# Two VMs joined by an emulated network (tools/vm/spyre-vm --net: virtio-net on a QEMU socket
# netdev over the host's loopback), CARDS cards each, one process per card: the spyre backend
# across nodes (torch_spyre/hierarchical.py: on-card collectives inside each VM, gloo between
# them over eth0) runs torch_spyre/tests/multinode_worker.py on both (every collective against
# gloo, DDP against one process on the CPU), after checking each VM's card topology against its
# PCI hierarchy (tests/guest/smi/topo_check.py; node 1's cards sit below a PCIe switch).
# `make check-multinode`; Documentation/testing.md.
# Prints "N passed, M failed" last (one test per node); exit status 0 when both passed.
set -u
cd "$(dirname "$0")/../.."
cards=${CARDS:-2}
out=build/test-results/multinode
mkdir -p "$out"
rm -f "$out"/node*.log
# A free port for the VMs' link, and the store's port on node 0's address.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
	echo $((20000 + RANDOM % 20000)))
job() {	# NODE_RANK EXPECTED_LINK
	cat <<JOB
modprobe spyre || exit 1
python3 tests/guest/smi/topo_check.py $2 || exit 1
export PYTHONPATH=build/cmake/torch_spyre/python PYTHONDONTWRITEBYTECODE=1 SPYRE_BACKEND=kernel
export TORCH_SPYRE_STRICT=1 GLOO_SOCKET_IFNAME=eth0 TORCH_SPYRE_EXPECT_TRANSPORT=p2p
python3 -m torch_spyre.launch --nnodes 2 --node-rank $1 --nproc $cards --master-addr 10.77.0.1 \
	--master-port 29500 torch_spyre/tests/multinode_worker.py 2
JOB
}
listening() {	# is 127.0.0.1:$port in LISTEN (/proc/net/tcp: local address hex, state 0A)?
	grep -qi "0100007F:$(printf %04X "$port") 00000000:0000 0A" /proc/net/tcp
}
t0=$(date +%s)
# node 0: each card on a root port of its own (peers through the root complex: PHB); node 1:
# its cards below one PCIe switch (PIX), so the card-to-card path there crosses a switch.
tools/vm/spyre-vm --cards "$cards" --net "listen:$port" --ip 10.77.0.1/24 -- \
	bash -c "$(job 0 PHB)" > "$out/node0.log" 2>&1 &
pid0=$!
# The second VM connects to the first one's netdev: wait until QEMU listens (bounded).
for _ in $(seq 600); do
	listening && break
	kill -0 $pid0 2>/dev/null || break
	sleep 0.5
done
listening || echo "node0's QEMU never listened on 127.0.0.1:$port" >> "$out/node0.log"
tools/vm/spyre-vm --cards "$cards" --switch --net "connect:$port" --ip 10.77.0.2/24 -- \
	bash -c "$(job 1 PIX)" > "$out/node1.log" 2>&1 &
pid1=$!
pass=0 fail=0
for n in 0 1; do
	pid=$([ $n = 0 ] && echo $pid0 || echo $pid1)
	if wait "$pid" && grep -q '^ddp ok' "$out/node$n.log"; then
		pass=$((pass + 1)); echo "PASS node$n"
	else
		fail=$((fail + 1)); echo "FAIL node$n: $out/node$n.log"; tail -n 30 "$out/node$n.log"
	fi
done
echo "two VMs, $cards cards each: $(( $(date +%s) - t0 )) s"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
