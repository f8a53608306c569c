#!/usr/bin/env python3
"""The cards' topology as spyre-smi --json and `topo` show it (spyre_mgmt_get_peers, the driver's
DRM_SPYRE_QUERY_TOPOLOGY) against the PCI hierarchy read independently from sysfs: each card's
chain of upstream bridges from its device path, the nearest bridge two cards share, the bridges
on the path between them (the root complex counted as one when they share none), and the link
type spyre-smi names from that (PIX below one switch, PXB across several, PHB through the root
complex). Usage: topo_check.py [EXPECTED_LINK]  (as root in /src, spyre loaded; with
EXPECTED_LINK every pair must have it). Prints PASS/FAIL lines and "N passed, M failed"."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../smi"))
from smi_common import Checks  # noqa: E402

SMI = "build/cmake/tools/spyre-smi/spyre-smi"
t = Checks()
check = t.check


def bridges(minor):
    """The card's upstream bridges, nearest first, from its sysfs device path."""
    path = os.path.realpath(f"/sys/class/accel/accel{minor}/device")
    parts = path.split("/")
    # /sys/devices/pci0000:00/<bridge>/.../<card>: everything between the host bridge and the card
    host = next(i for i, p in enumerate(parts) if p.startswith("pci"))
    return list(reversed(parts[host + 1:-1]))


def expected(a, b):
    ua, ub = bridges(a), bridges(b)
    for i, x in enumerate(ua):
        if x in ub:
            return (i + 1) + (ub.index(x) + 1) - 1, True  # up to it, it, down to b
    return len(ua) + len(ub) + 1, False


def link(distance, shared):
    return "PHB" if not shared else ("PIX" if distance <= 3 else "PXB")


minors = sorted(int(a[len("accel"):]) for a in os.listdir("/sys/class/accel"))
out = subprocess.run([SMI, "--json", "--window", "10"], capture_output=True, text=True)
doc = json.loads(out.stdout)
want_link = sys.argv[1] if len(sys.argv) > 1 else None
links = set()
for d in doc["devices"]:
    me = minors[d["index"]]
    for p in d["peers"]:
        other = minors[p["index"]]
        dist, shared = expected(me, other)
        links.add(p["link"])
        check(f"accel{me}_to_accel{other}",
              p["pci_bridges"] == dist and p["link"] == link(dist, shared)
              and (want_link is None or p["link"] == want_link),
              f"smi {p}, sysfs path: {dist} bridges, shared {shared}, expected link {want_link}")
topo = subprocess.run([SMI, "topo", "-m"], capture_output=True, text=True).stdout
rows = [r for r in topo.splitlines() if r.startswith("| spyre")]
check("topo_matrix_cells", len(rows) == len(minors)
      and all(sum(r.count(f" {lk} ") for lk in links) == len(minors) - 1 for r in rows), topo)
sys.exit(t.done())
