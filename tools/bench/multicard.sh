#!/bin/bash
# make bench, in a VM with 4 cards (tools/bench.sh): a peer copy's bandwidth against the modeled
# link, the collectives on the card model, card to card through spyre.ko (all-reduce busbw on 2 and 4 cards, one process per card and one thread
# per card; modeled figures are the cards' job clocks, libspyre.md "Device-side waits"), and the
# tensor-parallel decode step of a Granite-shaped model on 1, 2 and 4 cards
# (torch_spyre/tools/tp_bench.py). Run from the checkout's root inside the guest.
set -u
modprobe spyre || exit 1
busybox ip link set lo up  # torch.distributed's store talks over loopback
export SPYRE_PROGRAM_CACHE_DIR=/src/build/program-cache
B=build/cmake/tools/bench/spyre-comm-bench
SIZES="1024 65536 1048576 16777216 67108864 268435456"
$B --peer-copy $SIZES
for n in 2 4; do
	$B "$n" $SIZES
	$B --threads "$n" $SIZES
done
export PYTHONPATH=build/cmake/torch_spyre/python PYTHONDONTWRITEBYTECODE=1 SPYRE_BACKEND=kernel
for n in 1 2 4; do
	python3 -m torch_spyre.launch --nproc "$n" torch_spyre/tools/tp_bench.py
done
