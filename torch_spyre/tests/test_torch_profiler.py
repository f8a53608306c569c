"""torch.profiler sees spyre device work: op-library launches with the cycle model's device
time, host<->device copies and CPU fallbacks, in key_averages() and on a device track of the
exported Chrome trace (csrc/runtime/SpyreTrace.cpp, a kineto child profiler)."""

import json
import os

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_spyre
from conftest import make

ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def device_rows(prof):
    """key_averages rows of spyre device events: {name: (count, device time us)}."""
    return {e.key: (e.count, e.self_device_time_total)
            for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.PrivateUse1}


def trace_events(prof, tmp_path):
    path = os.path.join(tmp_path, "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        return json.load(f)["traceEvents"]  # valid JSON


def test_default_activities_include_spyre():
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()


def test_key_averages_lists_spyre_ops_with_modeled_time(fallback_reset):
    a, b = make((64, 128), torch.float16).to("spyre"), make((128, 256), torch.float16, 1).to("spyre")
    torch.relu(a @ b)  # plans cached before the profile
    with torch_spyre.profiler.profile() as detail, profile(activities=ACTS) as prof:
        y = torch.relu(a @ b)
    rows = device_rows(prof)
    modeled = {e.op: e.modeled_ns for e in detail.events}
    assert set(modeled) == {"matmul", "relu"}
    for op, ns in modeled.items():
        count, us = rows["spyre::" + op]
        assert count == 1 and ns > 0 and abs(us * 1000 - ns) <= 1, (op, us, ns)
    # the device time is the launching aten op's too (the device-time column of the table)
    cpu = {e.key: e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CPU}
    assert abs(cpu["aten::mm"].device_time_total * 1000 - modeled["matmul"]) <= 1
    assert abs(cpu["aten::relu"].self_device_time_total * 1000 - modeled["relu"]) <= 1
    assert "spyre" in prof.key_averages().table(sort_by="self_device_time_total", row_limit=5).lower()
    assert y.shape == (64, 256)


def test_device_time_grows_with_the_work():
    def mm_us(n):
        x = torch.ones(n, n, dtype=torch.float16, device="spyre")
        x @ x
        with profile(activities=ACTS) as prof:
            x @ x
        return device_rows(prof)["spyre::matmul"][1]

    assert mm_us(512) > 4 * mm_us(128) > 0


def test_trace_has_a_device_track_with_the_modeled_times(fallback_reset, tmp_path):
    a = make((256, 512), torch.float32)
    w = make((512, 512), torch.float32, 1).to("spyre")
    torch.softmax(a.to("spyre") @ w, -1).cpu()
    with torch_spyre.profiler.profile() as detail, profile(activities=ACTS) as prof:
        out = torch.softmax(a.to("spyre") @ w, -1).cpu()
    events = trace_events(prof, tmp_path)
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert [e["name"] for e in kernels] == ["spyre::" + d.op for d in detail.events]
    for k, d in zip(kernels, detail.events):
        assert k["args"]["modeled ns"] == d.modeled_ns > 0
        assert abs(k["dur"] * 1000 - d.modeled_ns) <= 1, (k["dur"], d.modeled_ns)
        assert k["args"]["aten op"] == d.aten_op and k["args"]["device time"] == "modeled"
        assert k["pid"] != os.getpid()  # the device's track, not the host process
    copies = [e for e in events if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy"]
    kinds = [c["name"] for c in copies]
    assert kinds.count("spyre::memcpy_HtoD") == 1 and kinds.count("spyre::memcpy_DtoH") == 1
    assert {c["args"]["bytes"] for c in copies} == {a.numel() * 4}
    # one stream: its work in order, each item after the previous one ended
    track = sorted(kernels + copies, key=lambda e: e["ts"])
    assert [e["name"] for e in track] == (["spyre::memcpy_HtoD"] + [k["name"] for k in kernels]
                                          + ["spyre::memcpy_DtoH"])
    for prev, nxt in zip(track, track[1:]):
        assert nxt["ts"] >= prev["ts"] + prev["dur"] - 0.002
    names = {e.get("name") for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names and out.shape == (256, 512)


def test_fallbacks_appear_as_such(fallback_reset):
    x = make((8, 8), torch.float32).to("spyre")
    with profile(activities=ACTS) as prof:
        torch.special.bessel_j0(x)  # no spyre kernel: the CPU fallback
    keys = {e.key for e in prof.key_averages()}
    assert "spyre::cpu_fallback aten::special_bessel_j0.out" in keys, keys
    rows = device_rows(prof)
    assert rows["spyre::memcpy_DtoH"][0] == 1 and rows["spyre::memcpy_HtoD"][0] == 1
    assert not any(k.startswith("spyre::") and "memcpy" not in k for k in rows)  # no launches


def test_nothing_recorded_outside_the_profile(tmp_path):
    x = torch.ones(64, 64, device="spyre")
    x @ x
    with profile(activities=ACTS) as prof:
        pass
    (x @ x).relu()
    assert device_rows(prof) == {}
    assert not [e for e in trace_events(prof, tmp_path) if e.get("cat") in ("kernel", "gpu_memcpy")]
    # a CPU-only profile records no device activities
    with profile(activities=[ProfilerActivity.CPU]) as cpu_only:
        x @ x
    assert device_rows(cpu_only) == {}
    assert "aten::mm" in {e.key for e in cpu_only.key_averages()}


def test_autograd_profiler_on_kineto():
    x = torch.ones(128, 128, device="spyre")
    x @ x
    with torch.autograd.profiler.profile(use_device="spyre", use_kineto=True) as prof:
        x @ x
    count, us = device_rows(prof)["spyre::matmul"]
    assert count == 1 and us > 0
