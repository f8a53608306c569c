#!/bin/bash
# The demo, run inside the VM by 'make demo': load the driver, show the probe, the status tool,
# a verified host->device->host round trip and a verified matmul launch on every card,
# spyre-smi while a workload runs, and PyTorch running a small decoder on the card.
set -e
cd /src
show() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
show lspci -nn -d 1234:5350
lspci -nn -d 1234:5350
show modprobe spyre
modprobe spyre
show "dmesg | grep spyre"
dmesg | grep -E 'spyre[ :]|\[drm\]'

show spyre-smi
build/cmake/tools/spyre-smi/spyre-smi
show spyre-roundtrip
build/cmake/libspyre/spyre-roundtrip
show spyre-matmul 256 256 256
build/cmake/libspyre/spyre-matmul 256 256 256

# spyre-smi while work runs: a workload holding 64 MiB of card 0 and launching on all its cores.
smi=build/cmake/tools/spyre-smi/spyre-smi
rm -f /tmp/smi_workload.out
exec 3> >(build/cmake/tests/guest/smi/smi_workload 0 64 120 > /tmp/smi_workload.out)
for _ in $(seq 600); do grep -q ready /tmp/smi_workload.out 2>/dev/null && break; sleep 0.2; done
show "spyre-smi   (while smi_workload runs on card 0)"
$smi
show spyre-smi dmon -c 3
$smi dmon -c 3
exec 3>&-  # EOF on its stdin: the workload stops
for _ in $(seq 600); do grep -q launches /tmp/smi_workload.out && break; sleep 0.2; done
show spyre-smi --csv --query index,health,utilization.engine,memory.used,processes
$smi --csv --query index,health,utilization.engine,memory.used,processes
show spyre-smi -q -i 0
$smi -q -i 0

# PyTorch on the card: the Granite-style decoder of torch_spyre's model tests against the CPU,
# with the modeled device time of every operator.
show "python3 torch_spyre/tools/decoder_demo.py --table   (import torch takes a minute under TCG)"
PYTHONPATH=build/cmake/torch_spyre/python python3 torch_spyre/tools/decoder_demo.py --table
