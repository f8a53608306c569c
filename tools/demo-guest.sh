#!/bin/bash
# The demo, run inside the VM by 'make demo': load the driver, show the probe, the status tool,
# a verified host->device->host round trip and a verified matmul launch on every card.
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
show spyre-smi -q -i 0
build/cmake/tools/spyre-smi/spyre-smi -q -i 0
