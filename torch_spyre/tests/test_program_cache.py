"""The op library's program cache on disk across processes (Documentation/torch_spyre.md
"Program cache"): a compiled graph (a fused pointwise kernel, a row kernel and a matmul) run in
a new process with empty caches generates and stores its programs; a second process with the
same directories generates nothing (AOTAutograd's and Inductor's FX graph caches and the
program cache all hit) and computes the same bytes; a libspyre of another build (a copy of the library with another
ELF build id, preloaded) finds none of them and regenerates all; a damaged file is rejected and
regenerated; SPYRE_PROGRAM_CACHE=0 and an unsafe directory turn the cache off, the results stay
right.
"""

import json
import os
import shutil

import pytest
import torch

import torch_spyre  # noqa: F401
from conftest import run_python

CHILD = r"""
import hashlib, json, torch, torch_spyre

def f(x, y, w):
    h = torch.relu(x * y + 1.5) - x.exp()
    h = h - h.amax(-1, keepdim=True)
    return torch.exp(h) @ w

g = torch.Generator().manual_seed(0)
x, y, w = (torch.randn(s, generator=g).to(torch.float16).to("spyre")
           for s in ((64, 256), (64, 256), (256, 128)))
out = torch.compile(f)(x, y, w).cpu()
from torch._dynamo.utils import counters
s = torch.spyre.program_cache_stats()
s["fxgraph_hits"] = counters["inductor"]["fxgraph_cache_hit"]
s["aot_hits"] = counters["aot_autograd"]["autograd_cache_hit"]
s["digest"] = hashlib.sha256(out.view(torch.int16).numpy().tobytes()).hexdigest()
s["maps"] = [l.split()[-1] for l in open("/proc/self/maps") if "libspyre.so" in l][:1]
print("RESULT " + json.dumps(s))
"""


def run(tmp_path, **env):
    e = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
         "SPYRE_PROGRAM_CACHE_DIR": str(tmp_path / "programs")}
    e.update(env)
    p = run_python(CHILD, **e)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    r = json.loads(line[len("RESULT "):])
    r["stderr"] = p.stderr
    return r


def program_files(tmp_path):
    d = tmp_path / "programs"
    return sorted(p for p in d.iterdir() if p.name.endswith(".sprog")) if d.exists() else []


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """The cold process, and the directory it filled."""
    tmp = tmp_path_factory.mktemp("progcache")
    r = run(tmp)
    r["files"] = program_files(tmp)
    return tmp, r


def test_cold_process_generates_and_stores(first):
    tmp, r = first
    assert r["enabled"] and r["status"] == "on" and r["dir"] == str(tmp / "programs")
    assert r["generated"] >= 2 and r["disk_hits"] == 0  # a generated kernel and the matmul
    assert r["disk_writes"] == r["generated"] and r["disk_rejected"] == 0
    assert len(program_files(tmp)) == r["generated"]
    assert r["version"].startswith("libspyre ") and " build " in r["version"]
    assert r["fxgraph_hits"] == 0 and r["aot_hits"] == 0


def test_warm_process_generates_nothing(first):
    tmp, cold = first
    warm = run(tmp)
    assert warm["fxgraph_hits"] >= 1  # Inductor's cache on disk served the graph
    assert warm["aot_hits"] >= 1  # and AOTAutograd's (torch_spyre turns it on): no retrace
    assert warm["generated"] == 0 and warm["disk_writes"] == 0
    assert warm["disk_hits"] == cold["generated"] and warm["disk_rejected"] == 0
    assert warm["digest"] == cold["digest"]  # the programs from disk compute the same bytes
    assert warm["version"] == cold["version"]


def test_another_library_build_regenerates(first, tmp_path):
    # the same library with another build id stands for a rebuilt or upgraded libspyre: it
    # must not run the programs the first one stored
    tmp, cold = first
    lib = cold["maps"][0]
    data = bytearray(open(lib, "rb").read())
    build_id = bytes.fromhex(cold["version"].split(" build ")[1].split()[0])
    assert data.count(build_id) == 1
    at = data.find(build_id)
    data[at] ^= 0xFF
    other = tmp_path / os.path.basename(lib)
    other.write_bytes(bytes(data))
    before = set(program_files(tmp))
    r = run(tmp, LD_PRELOAD=str(other))
    assert r["maps"] == [str(other)] and r["version"] != cold["version"]
    assert r["disk_hits"] == 0 and r["generated"] == cold["generated"]
    assert r["disk_writes"] == r["generated"]
    assert len(set(program_files(tmp)) - before) == r["generated"]  # beside the old ones
    assert r["digest"] == cold["digest"]


def test_a_damaged_file_is_regenerated(first):
    tmp, cold = first
    victim = cold["files"][0]
    victim.write_bytes(victim.read_bytes()[:-7])  # truncated
    r = run(tmp)
    assert r["disk_rejected"] == 1 and r["generated"] == 1 and r["disk_writes"] == 1
    assert r["disk_hits"] == cold["generated"] - 1
    assert r["digest"] == cold["digest"]
    assert run(tmp)["generated"] == 0  # stored again


def test_off(first, tmp_path):
    tmp, cold = first
    r = run(tmp, SPYRE_PROGRAM_CACHE="0")
    assert not r["enabled"] and "SPYRE_PROGRAM_CACHE=0" in r["status"]
    assert r["generated"] == cold["generated"] and r["disk_hits"] == 0
    assert r["digest"] == cold["digest"]
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    os.chmod(unsafe, 0o777)
    r = run(tmp, SPYRE_PROGRAM_CACHE_DIR=str(unsafe))
    assert not r["enabled"] and "writable by group or others" in r["status"], r["status"]
    assert "program cache on disk off" in r["stderr"]
    assert r["generated"] == cold["generated"] and list(unsafe.iterdir()) == []
    assert r["digest"] == cold["digest"]
    shutil.rmtree(unsafe)


def test_stats_in_this_process():
    x = torch.ones(4096, device="spyre")
    (x * 3).cpu()
    s = torch.spyre.program_cache_stats()
    # every plan the process's cache missed was read from disk or generated
    assert s["memory_misses"] == s["generated"] + s["disk_hits"] and s["memory_misses"] > 0
    assert set(s) >= {"memory_hits", "disk_writes", "disk_evictions", "version", "status"}
