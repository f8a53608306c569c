"""torch_spyre.profiler: every op-library launch inside the context is recorded with the
launching operator, libspyre's op and plan, and the cycle model's device time; nothing outside
it, and nothing for CPU fallbacks."""

import torch

import torch_spyre
from conftest import make


def test_records_each_launch_with_modeled_time(fallback_reset):
    a, b = make((64, 128), torch.float16).to("spyre"), make((128, 256), torch.float16, 1).to("spyre")
    a @ b  # the plan is cached before the profile
    with torch_spyre.profiler.profile() as prof:
        y = a @ b
        z = torch.relu(y)
        s = z.sum(-1)
    assert [(e.aten_op, e.op) for e in prof.events] == [
        ("aten::mm", "matmul"), ("aten::relu", "relu"), ("aten::sum", "sum")]
    mm = prof.events[0]
    assert mm.modeled_ns > 0 and mm.cores >= 1 and mm.launches >= 1 and mm.plan and mm.plan_cached
    assert prof.total_modeled_ns() == sum(e.modeled_ns for e in prof.events)
    assert prof.by_op()["aten::mm"] == {"calls": 1, "launches": mm.launches,
                                        "modeled_ns": mm.modeled_ns}
    t = prof.table()
    assert "aten::mm" in t and "aten::relu" in t and "total" in t
    assert s.shape == (64,)


def test_device_time_grows_with_the_work(fallback_reset):
    def mm_ns(n):
        a = torch.ones(n, n, dtype=torch.float16, device="spyre")
        with torch_spyre.profiler.profile() as p:
            a @ a
        return p.total_modeled_ns()

    assert mm_ns(512) > 4 * mm_ns(128) > 0


def test_matches_the_streams_modeled_time(fallback_reset):
    a = make((256, 512), torch.float32).to("spyre")
    w = make((512, 512), torch.float32, 1).to("spyre")
    torch.spyre.synchronize()
    start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    with torch_spyre.profiler.profile() as prof:
        start.record()
        torch.softmax(torch.nn.functional.gelu(a @ w), -1)
        end.record()
    end.synchronize()
    assert len(prof.events) == 3
    modeled_ms = start.modeled_time(end)
    assert abs(prof.total_modeled_ns() / 1e6 - modeled_ms) <= 0.01 * modeled_ms + 1e-6, (
        prof.total_modeled_ns(), modeled_ms)


def test_nothing_outside_the_context_and_no_fallbacks(fallback_reset):
    x = make((8, 8), torch.float32).to("spyre")
    with torch_spyre.profiler.profile() as prof:
        torch.special.bessel_j0(x)  # the CPU fallback: no launch
    assert prof.events == []
    torch.relu(x)
    assert prof.events == []
    with torch_spyre.profiler.profile() as prof2:
        torch.relu(x)
    assert len(prof2.events) == 1  # a new profile starts empty
