#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Guest test of spyre.ko's observability (Documentation/driver.md "Observability").

sysfs attributes and hwmon against the card's QUERY telemetry and its PCI config space,
and fdinfo against what clients (tests/guest/observability/spyre_obs) ran and allocated.
Prints "PASS name" / "FAIL name: why" per check and "N passed, M failed" last.
Usage: observability.py [HELPER]   (run as root with spyre loaded, cards idle)
"""
import glob
import os
import re
import subprocess
import sys

HELPER = sys.argv[1] if len(sys.argv) > 1 else "build/cmake/tests/guest/observability/spyre_obs"
passed = failed = 0


def check(name, ok, why=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {why}")
    sys.stdout.flush()
    return ok


def read(path):
    with open(path) as f:
        return f.read().strip()


def query(card):
    out = subprocess.run([HELPER, "query", str(card)], check=True, capture_output=True,
                         text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def cards():
    """(index, minor, bdf) of the spyre accel nodes, in spyre_obs's order (sorted minors)."""
    res = []
    for node in sorted(glob.glob("/sys/class/accel/accel*"), key=lambda p: int(p[22:])):
        dev = os.path.realpath(node + "/device")
        drv = os.path.realpath(dev + "/driver")
        if os.path.basename(drv) == "spyre":
            res.append((len(res), int(node[22:]), os.path.basename(dev)))
    return res


def pcie_link(bdf):
    """(speed code, width) from the Link Status register of the PCIe capability, or None."""
    cfg = open(f"/sys/bus/pci/devices/{bdf}/config", "rb").read()
    if len(cfg) < 64 or not cfg[6] & 0x10:      # Status: capabilities list
        return None
    pos, seen = cfg[0x34] & 0xfc, 0
    while pos and seen < 48 and pos + 0x14 <= len(cfg):
        if cfg[pos] == 0x10:                    # PCI Express capability
            lnksta = cfg[pos + 0x12] | cfg[pos + 0x13] << 8
            return lnksta & 0xf, (lnksta >> 4) & 0x3f
        pos, seen = cfg[pos + 1] & 0xfc, seen + 1
    return None


SPEEDS = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}
UNITS = {"": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}


def fdinfo(pid, fd):
    """Keys of /proc/pid/fdinfo/fd; sizes in bytes, ns and MHz suffixes dropped."""
    res = {}
    for line in read(f"/proc/{pid}/fdinfo/{fd}").splitlines():
        m = re.match(r"^(drm-[\w-]+):\s+(\S+)(?:\s+(\S+))?$", line)
        if not m:
            continue
        key, val, unit = m.group(1), m.group(2), m.group(3) or ""
        if re.fullmatch(r"\d+", val):
            n = int(val)
            if key.startswith(("drm-total-", "drm-shared-", "drm-resident-", "drm-active-",
                               "drm-purgeable-")):
                n *= UNITS[unit]
            res[key] = n
        else:
            res[key] = val
    return res


class Client:
    """A spyre_obs client process: runs its jobs, then holds its file until told to exit."""

    def __init__(self, card, launches, cores, copies, copy_bytes):
        self.p = subprocess.Popen([HELPER, "client", str(card), str(launches), str(cores),
                                   str(copies), str(copy_bytes)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.info = {}

    def wait_ready(self):
        for line in self.p.stdout:
            line = line.strip()
            if line == "ready":
                return True
            if "=" in line:
                k, v = line.split("=", 1)
                self.info[k] = int(v)
        return False

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def fdinfo(self):
        return fdinfo(self.info["pid"], self.info["fd"])

    def close(self):
        try:
            self.p.stdin.write("exit\n")
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        return self.p.wait(timeout=120)


def stable(card, fn):
    """fn() read between two QUERYs that agree on everything: (q, fn()), or (q1, None)."""
    for _ in range(5):
        q1 = query(card)
        v = fn()
        q2 = query(card)
        volatile = ("temp_mc", "power_mw")
        if all(q1[k] == q2[k] for k in q1 if k not in volatile):
            return q1, v
    return q1, None


def core_busy(bdf):
    """core_busy_time_ns as a list of ints, core 0 first."""
    return [int(v) for v in read(f"/sys/bus/pci/devices/{bdf}/core_busy_time_ns").split(" ")]


def test_sysfs(idx, bdf):
    base = f"/sys/bus/pci/devices/{bdf}"
    c = f"card{idx}"
    names = ["state", "hw_version", "num_cores", "mem_total_bytes", "mem_used_bytes",
             "busy_time_ns", "core_busy_time_ns", "pcie_link_speed", "pcie_link_width", "resets/ring",
             "resets/card", "resets/device", "resets/jobs_timed_out"]
    missing = [n for n in names if not os.path.isfile(f"{base}/{n}")]
    if not check(f"{c} sysfs attributes present", not missing, f"missing {missing}"):
        return

    def snap():
        return {n: read(f"{base}/{n}") for n in names}
    q, s = stable(idx, snap)
    if not check(f"{c} sysfs read between two identical QUERYs", s is not None, "card not idle"):
        return
    check(f"{c} state", s["state"] == "ready" and q["state"] == "0",
          f"sysfs {s['state']!r}, QUERY state {q['state']}")
    check(f"{c} hw_version", s["hw_version"] == q["hw_version"],
          f"sysfs {s['hw_version']}, QUERY {q['hw_version']}")
    check(f"{c} num_cores", s["num_cores"] == q["num_cores"],
          f"sysfs {s['num_cores']}, QUERY {q['num_cores']}")
    check(f"{c} mem_total_bytes", s["mem_total_bytes"] == q["devmem_total"],
          f"sysfs {s['mem_total_bytes']}, QUERY {q['devmem_total']}")
    check(f"{c} mem_used_bytes", s["mem_used_bytes"] == q["devmem_used"],
          f"sysfs {s['mem_used_bytes']}, QUERY {q['devmem_used']}")
    busy = int(q["engine_cycles"]) * 1000 // int(q["clock_mhz"])
    check(f"{c} busy_time_ns = engine cycles at the core clock", int(s["busy_time_ns"]) == busy,
          f"sysfs {s['busy_time_ns']}, QUERY {q['engine_cycles']} cycles = {busy} ns")
    per_core = [int(v) for v in s["core_busy_time_ns"].split(" ")]
    check(f"{c} core_busy_time_ns: one value per core, none above busy_time_ns",
          len(per_core) == int(q["num_cores"]) and max(per_core) <= busy,
          f"{len(per_core)} values for {q['num_cores']} cores, max {max(per_core)}, busy {busy}")
    for attr, key in (("ring", "ring_resets"), ("card", "card_resets"), ("device", "resets"),
                      ("jobs_timed_out", "jobs_timed_out")):
        check(f"{c} resets/{attr}", s[f"resets/{attr}"] == q[key],
              f"sysfs {s['resets/' + attr]}, QUERY {key} {q[key]}")
    check(f"{c} resets/device counts the probe reset", int(s["resets/device"]) >= 1,
          s["resets/device"])

    link = pcie_link(bdf)
    if check(f"{c} PCIe capability in config space", link is not None, "none found"):
        want_speed = SPEEDS.get(link[0], "unknown")
        want_speed = want_speed + " GT/s" if want_speed != "unknown" else want_speed
        check(f"{c} pcie_link_speed = LNKSTA", s["pcie_link_speed"] == want_speed,
              f"sysfs {s['pcie_link_speed']!r}, LNKSTA speed code {link[0]}")
        check(f"{c} pcie_link_width = LNKSTA", s["pcie_link_width"] == str(link[1]),
              f"sysfs {s['pcie_link_width']}, LNKSTA width {link[1]}")
        core = read(f"{base}/current_link_speed") if os.path.exists(
            f"{base}/current_link_speed") else ""
        check(f"{c} pcie_link_speed agrees with the PCI core",
              core.startswith(s["pcie_link_speed"].replace(" GT/s", "")) or
              (s["pcie_link_speed"] == "unknown" and "Unknown" in core),
              f"ours {s['pcie_link_speed']!r}, current_link_speed {core!r}")


def test_hwmon(idx, bdf):
    c = f"card{idx}"
    dirs = glob.glob(f"/sys/bus/pci/devices/{bdf}/hwmon/hwmon*")
    if not check(f"{c} one hwmon device", len(dirs) == 1, f"found {dirs}"):
        return
    h = dirs[0]
    check(f"{c} hwmon name", read(f"{h}/name") == "spyre", read(f"{h}/name"))
    vals = {}
    for f in ("temp1_input", "power1_input", "power1_cap"):
        try:
            vals[f] = int(read(f"{h}/{f}"))
        except (OSError, ValueError) as e:
            vals[f] = None
            check(f"{c} hwmon {f} parses", False, str(e))
    if None in vals.values():
        return
    check(f"{c} hwmon files parse", True)
    # Idle card: temperature and power only decay, so QUERY before >= hwmon >= QUERY after.
    q1 = query(idx)
    t, p, cap = (int(read(f"{h}/{f}")) for f in ("temp1_input", "power1_input", "power1_cap"))
    q2 = query(idx)
    check(f"{c} temp1_input (m°C) between QUERY temp_mc before and after",
          int(q1["temp_mc"]) >= t >= int(q2["temp_mc"]),
          f"{q1['temp_mc']} >= {t} >= {q2['temp_mc']}")
    check(f"{c} temp1_input in the model's 35..85 C", 35000 <= t <= 85000, str(t))
    check(f"{c} power1_input (uW) between QUERY power_mw before and after",
          int(q1["power_mw"]) * 1000 >= p >= int(q2["power_mw"]) * 1000,
          f"{q1['power_mw']}000 >= {p} >= {q2['power_mw']}000")
    check(f"{c} power1_cap = QUERY power_cap_mw", cap == int(q2["power_cap_mw"]) * 1000,
          f"{cap} vs {q2['power_cap_mw']} mW")
    check(f"{c} power1_cap is the 75 W default", cap == 75000000, str(cap))


ENGINES = ("compute", "dma")


def test_fdinfo(idx, bdf):
    c = f"card{idx}"
    clock = int(query(idx)["clock_mhz"])

    idle = Client(idx, 0, 0, 0, 0)
    if not check(f"{c} idle client starts", idle.wait_ready(), "no ready line"):
        return
    f = idle.fdinfo()
    check(f"{c} fdinfo drm-driver", f.get("drm-driver") == "spyre", str(f.get("drm-driver")))
    check(f"{c} fdinfo drm-client-id", isinstance(f.get("drm-client-id"), int),
          str(f.get("drm-client-id")))
    check(f"{c} fdinfo drm-pdev", f.get("drm-pdev") == bdf, f"{f.get('drm-pdev')} vs {bdf}")
    zero = [k for k in [f"drm-engine-{e}" for e in ENGINES] + [f"drm-cycles-{e}" for e in ENGINES]
            + ["drm-total-device", "drm-resident-device", "drm-total-memory",
               "drm-resident-memory"] if f.get(k) != 0]
    check(f"{c} idle fresh file: engines and memory all 0", not zero,
          f"non-zero or missing: {zero}: {f}")
    check(f"{c} fdinfo engine capacity and max frequency",
          all(f.get(f"drm-engine-capacity-{e}") == 1 and f.get(f"drm-maxfreq-{e}") == clock
              for e in ENGINES), str(f))
    idle_id = f.get("drm-client-id")

    # Two clients with different work at the same time, on the same card.
    q0, cores0 = query(idx), core_busy(bdf)
    a = Client(idx, 3, 4, 4, 1 << 20)
    b = Client(idx, 5, 8, 2, 3 << 20)
    ok = a.wait_ready() & b.wait_ready()
    q1, cores1 = query(idx), core_busy(bdf)
    if not check(f"{c} two clients ran their jobs", ok, "a client failed"):
        a.close(), b.close(), idle.close()
        return
    fa, fb = a.fdinfo(), b.fdinfo()
    for n, cl, fi in (("A", a, fa), ("B", b, fb)):
        for e in ENGINES:
            want = cl.info[f"cycles_{e}"]
            check(f"{c} client {n} drm-cycles-{e} = its JOB_WAIT cycles (> 0)",
                  want > 0 and fi.get(f"drm-cycles-{e}") == want,
                  f"fdinfo {fi.get(f'drm-cycles-{e}')}, JOB_WAIT {want}")
            check(f"{c} client {n} drm-engine-{e} busy ns > 0 at the core clock",
                  fi.get(f"drm-engine-{e}", 0) > 0 and
                  fi.get(f"drm-engine-{e}") == want * 1000 // clock,
                  f"{fi.get(f'drm-engine-{e}')} ns for {want} cycles at {clock} MHz")
        for region, key in (("device", "device_bytes"), ("memory", "host_bytes")):
            check(f"{c} client {n} drm-total-{region} = what it allocated",
                  fi.get(f"drm-total-{region}") == cl.info[key] > 0,
                  f"fdinfo {fi.get(f'drm-total-{region}')}, allocated {cl.info[key]}")
            check(f"{c} client {n} drm-resident-{region} = what it allocated",
                  fi.get(f"drm-resident-{region}") == cl.info[key],
                  f"fdinfo {fi.get(f'drm-resident-{region}')}, allocated {cl.info[key]}")
    ids = {idle_id, fa.get("drm-client-id"), fb.get("drm-client-id")}
    check(f"{c} drm-client-id differs per file", len(ids) == 3, str(ids))
    delta = int(q1["engine_cycles"]) - int(q0["engine_cycles"])
    check(f"{c} card engine cycles over the run = sum of the clients' drm-cycles-compute",
          delta == fa.get("drm-cycles-compute", -1) + fb.get("drm-cycles-compute", -1),
          f"card +{delta}, clients {fa.get('drm-cycles-compute')} + {fb.get('drm-cycles-compute')}")
    # Per core: A ran on cores 0-3, B on 0-7; a core is busy at most for its launches' time
    # (+1 ns: each cumulative value is truncated to ns on its own).
    moved = [after - before for before, after in zip(cores0, cores1)]
    engine_ns = delta * 1000 // clock
    check(f"{c} core_busy_time_ns grows on the cores the clients used, only there",
          len(moved) == int(q1["num_cores"]) and all(m > 0 for m in moved[:8])
          and not any(moved[8:]), str(moved))
    check(f"{c} core busy time of cores 0-3 within the card's busy time",
          all(m <= engine_ns + 1 for m in moved[:4]), f"{moved[:4]} vs {engine_ns} ns")
    check(f"{c} core busy time of cores 4-7 within client B's drm-engine-compute",
          all(m <= fb.get("drm-engine-compute", 0) + 1 for m in moved[4:8]),
          f"{moved[4:8]} vs {fb.get('drm-engine-compute')} ns")
    check(f"{c} idle file still 0 after the others ran",
          all(idle.fdinfo().get(f"drm-engine-{e}") == 0 for e in ENGINES), str(idle.fdinfo()))

    # Memory follows frees; sysfs mem_used sees the clients' BOs.
    used = int(read(f"/sys/bus/pci/devices/{bdf}/mem_used_bytes"))
    check(f"{c} mem_used_bytes covers the clients' device BOs",
          used >= a.info["device_bytes"] + b.info["device_bytes"],
          f"{used} < {a.info['device_bytes']} + {b.info['device_bytes']}")
    r = b.send("free")
    fb2 = b.fdinfo()
    check(f"{c} drm-total-device drops by a freed BO",
          r == f"freed {b.info['staging_bytes']}" and
          fb2.get("drm-total-device") == b.info["device_bytes"] - b.info["staging_bytes"],
          f"{r!r}: {fb2.get('drm-total-device')} vs {b.info['device_bytes']} - "
          f"{b.info['staging_bytes']}")
    used2 = int(read(f"/sys/bus/pci/devices/{bdf}/mem_used_bytes"))
    check(f"{c} mem_used_bytes drops by the freed BO", used - used2 == b.info["staging_bytes"],
          f"{used} -> {used2}")

    # The card goes away under open files: their fdinfo stays readable and unchanged.
    drv = "/sys/bus/pci/drivers/spyre"
    with open(f"{drv}/unbind", "w") as u:
        u.write(bdf)
    # The DRM core prints nothing for an unplugged device (drm_dev_enter fails).
    fa2 = a.fdinfo()
    check(f"{c} fdinfo of an open file after unbind readable and empty", fa2 == {}, str(fa2))
    check(f"{c} sysfs attributes and hwmon gone after unbind",
          not os.path.exists(f"/sys/bus/pci/devices/{bdf}/state") and
          not glob.glob(f"/sys/bus/pci/devices/{bdf}/hwmon/hwmon*"), "still there")
    rcs = (a.close(), b.close(), idle.close())
    check(f"{c} clients exit cleanly", rcs == (0, 0, 0), str(rcs))
    with open(f"{drv}/bind", "w") as bnd:
        bnd.write(bdf)
    check(f"{c} state ready and hwmon back after rebind",
          os.path.exists(f"/sys/bus/pci/devices/{bdf}/state") and
          read(f"/sys/bus/pci/devices/{bdf}/state") == "ready" and
          len(glob.glob(f"/sys/bus/pci/devices/{bdf}/hwmon/hwmon*")) == 1, "not back")


def main():
    cs = cards()
    if not check("spyre cards found", len(cs) >= 1, "none"):
        print(f"{passed} passed, {failed} failed")
        return 1
    tests = [(f"card{i} sysfs", test_sysfs, i, bdf) for i, _, bdf in cs]
    tests += [(f"card{i} hwmon", test_hwmon, i, bdf) for i, _, bdf in cs]
    tests.append(("card0 fdinfo", test_fdinfo, cs[0][0], cs[0][2]))
    for name, fn, idx, bdf in tests:
        try:
            fn(idx, bdf)
        except Exception as e:      # a missing file, a helper that failed: one failure
            check(f"{name} completes", False, f"{type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
