"""Errors of compiled spyre graphs (Documentation/torch_compile.md "Errors").

A program that faults on the card names the compiled kernel, its graph and FX nodes (aten
ops) and the user's source line, also when the fault is reported later by a synchronize and
when it comes from a replayed graph; an exception raised inside a compiled kernel (strict mode
in its eager form) carries the same as a note. A card lost in the middle of a call gives the
same exception type and message in eager mode, compiled and replayed, the card works again when
it is back, and a process whose card is lost exits cleanly. An op with no spyre kernel in the
middle of a compiled graph is a fallback segment: right values, one warning for the op, and
TORCH_SPYRE_STRICT=1 an error naming it. Faults are injected with the simulator's test hook
(torch_spyre.testing.inject_sim_fault, libspyre's spyre_sim_inject_fault).
"""

import os
import re
import subprocess
import sys
import warnings

import pytest
import torch

import torch_spyre
from conftest import close, make, run_python
from torch_spyre.testing import inject_sim_fault

SOURCE = "return torch.relu(x * y + 1.5) - x.exp()"


def chain(x, y):
    return torch.relu(x * y + 1.5) - x.exp()


def matmul_epilogue(a, b):
    return torch.relu(a @ b + 1.0) * 0.5


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    # the labels are made when a graph is compiled: a wrapper from Inductor's FX graph cache
    # would name the source lines of the run that compiled it (torch_compile.md "Errors")
    import torch._inductor.config

    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    torch.compiler.reset()
    yield
    torch.compiler.reset()
    for d in range(torch.spyre.device_count()):
        inject_sim_fault(d, "none")


def test_a_faulting_fused_program_names_its_graph_nodes():
    x, y = make((7, 33), torch.float32, 1).to("spyre"), make((7, 33), torch.float32, 2).to("spyre")
    g = torch.compile(chain)
    g(x, y)
    torch.spyre.synchronize()
    inject_sim_fault(0, "program")
    g(x, y)  # queued: the card reports the fault at the next synchronize
    with pytest.raises(RuntimeError) as e:
        torch.spyre.synchronize()
    msg = str(e.value)
    assert "program fault on spyre-sim0" in msg and msg.endswith("(program error)"), msg
    assert re.search(r"launched by spyre_kernel_0 of compiled graph \[\d+/\d+\]", msg), msg
    for op in ("aten.mul.Tensor", "aten.add.Tensor", "aten.relu.default", "aten.exp.default"):
        assert op in msg, (op, msg)
    assert f"test_compile_errors.py:{chain.__code__.co_firstlineno + 1}: {SOURCE}" in msg, msg
    close(g(x, y).cpu(), chain(x.cpu(), y.cpu()), torch.float32)  # the fault was one launch


_LABELS_CHILD = """
import gc, sys, torch, torch_spyre
from torch._dynamo.utils import counters
from torch_spyre._inductor.labels import LaunchLabel
from torch_spyre._inductor.runtime import SpyreKernel


def live_labels():
    return {id(o): o.label if isinstance(o, SpyreKernel) else o.text for o in gc.get_objects()
            if isinstance(o, (SpyreKernel, LaunchLabel))}


def labels(path):
    ns = {}
    exec(compile(open(path).read(), path, "exec"), ns)
    torch.compiler.reset()
    x, w = torch.ones(8, 16, device="spyre"), torch.ones(16, 8, device="spyre")
    old, hits = live_labels(), counters["inductor"]["fxgraph_cache_hit"]
    torch.compile(ns["f"])(x, w)
    new = {t for k, t in live_labels().items() if k not in old}
    return sorted(new), counters["inductor"]["fxgraph_cache_hit"] - hits


for path in sys.argv[1:]:
    print(repr(labels(path)))
"""


def test_labels_follow_the_source_through_inductors_cache(tmp_path):
    """The same function at other lines of another file is the same graph to Inductor: its
    cached wrapper named the first file's lines. The key holds the nodes' source lines: the
    second file gets its own labels, and the first file compiled again is a cache hit."""
    body = "def f(a, b):\n    return torch.relu(a @ b).exp() * 2.0\n"
    (tmp_path / "first.py").write_text("import torch\n" + body)
    (tmp_path / "second.py").write_text("import torch\n\n\n\n" + body)
    (tmp_path / "child.py").write_text(_LABELS_CHILD)
    env = dict(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"), SPYRE_BACKEND="sim")
    runs = []
    for files in (["first.py"], ["second.py", "first.py"]):  # two processes, one cache
        r = subprocess.run([sys.executable, str(tmp_path / "child.py"),
                            *[str(tmp_path / f) for f in files]],
                           env=dict(os.environ, **env), capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        runs += [eval(line) for line in r.stdout.splitlines() if line.startswith("([")]
    (first, hit1), (second, hit2), (again, hit3) = runs
    assert (hit1, hit2, hit3) == (0, 0, 1), runs
    assert first and all("from first.py:3: return torch.relu(a @ b).exp() * 2.0" in t
                         for t in first), first
    assert second and all("from second.py:6:" in t for t in second), second
    assert again == first, again


def _strict_mode_notes(monkeypatch, f, shape, op):
    """Compiles f, calls it under strict mode on a spyre tensor of `shape`: the notes of the
    NotImplementedError naming `op`."""
    g = torch.compile(f)
    x = make(shape, torch.float32).to("spyre")
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    with pytest.raises(NotImplementedError, match=op) as e:
        g(x)
    return "\n".join(getattr(e.value, "__notes__", []))


def test_an_error_in_the_eager_form_is_noted_with_the_kernel(monkeypatch):
    def f(x):
        return torch.nextafter(x, x) + 1

    notes = _strict_mode_notes(monkeypatch, f, (4, 4), "nextafter")
    assert re.search(r"raised by spyre_kernel_\d+ of compiled graph \[\d+/\d+\]", notes), notes
    assert "aten.nextafter.default" in notes and "return torch.nextafter(x, x) + 1" in notes, notes


def test_an_op_raising_type_error_with_a_number_first_runs_once(monkeypatch):
    # SpyreKernel._op decides before the op runs whether its binding takes a number first: an
    # op that takes it and raises TypeError for another reason is not run again with the number
    # as a 0-dim card tensor; one that does not take it (lt) gets the 0-dim tensor at once
    from torch_spyre._inductor import runtime

    calls = []

    def op(a, b):
        if b.device.type == "spyre":
            calls.append(a)
            raise TypeError("not about the number")
        return a + b

    monkeypatch.setitem(runtime._FUNCS, "test_type_error", op)
    dev = torch.device("spyre", 0)
    x = torch.ones(4, device=dev)
    with pytest.raises(TypeError, match="not about the number"):
        runtime.SpyreKernel._op("test_type_error", [2.0, x], dev)
    assert calls == [2.0], calls
    got = runtime.SpyreKernel._op("lt", [2.0, torch.tensor([1.0, 3.0], device=dev)], dev)
    assert got.cpu().tolist() == [False, True]
    got = runtime.SpyreKernel._op("sub", [2.0, torch.tensor([1.0, 3.0], device=dev)], dev)
    assert got.cpu().tolist() == [1.0, -1.0]


MM_LABEL = (r"launched by extern kernel extern_kernels\.mm of compiled graph \[\d+/\d+\], "
            r"graph nodes mm \(aten\.mm\.default\); from test_compile_errors\.py:\d+: "
            r"return torch\.relu\(a @ b \+ 1\.0\) \* 0\.5 \(program error\)$")


def _fault_each_launch(call, device=0):
    """Faults the call's launches one at a time (the n-th launch of the n-th call), until a
    call runs clean: the messages of the faults, in launch order."""
    who = []
    for after in range(16):
        inject_sim_fault(device, "program", after)
        call()
        try:
            torch.spyre.synchronize()
        except RuntimeError as e:
            msg = str(e)
            assert f"program fault on spyre-sim{device}" in msg, msg
            who.append(msg)
            continue
        finally:
            inject_sim_fault(device, "none")
        return who
    raise AssertionError(f"every launch faulted: {who}")


def test_a_faulting_extern_kernel_names_its_graph_node():
    # not replayed: the wrapper calls the extern mm itself, inside its label
    a, b = make((8, 16), torch.float32, 1).to("spyre"), make((16, 24), torch.float32, 2).to("spyre")
    g = torch.compile(matmul_epilogue)
    g(a, b)
    torch.spyre.synchronize()
    who = _fault_each_launch(lambda: g(a, b))
    assert len(who) >= 2, who
    for msg in who[:-1]:
        assert re.search(MM_LABEL, msg), msg
    assert re.search(r"launched by spyre_kernel_0 of compiled graph \[\d+/\d+\]", who[-1]), who
    close(g(a, b).cpu(), matmul_epilogue(a.cpu(), b.cpu()), torch.float32, scale=4)


def test_an_error_in_an_extern_kernel_is_noted_with_its_graph_node(monkeypatch):
    def f(x):
        return torch.linalg.qr(x + 1).R * 2

    notes = _strict_mode_notes(monkeypatch, f, (6, 6), "linalg_qr")
    assert re.search(r"raised by extern kernel \S*linalg_qr\S* of compiled graph \[\d+/\d+\], "
                     r"graph nodes linalg_qr \(aten\.linalg_qr\.default\); from "
                     r"test_compile_errors\.py:\d+: return torch\.linalg\.qr", notes), notes


def test_a_fault_in_a_replay_names_the_graph():
    a, b = make((8, 16), torch.float32, 1).to("spyre"), make((16, 24), torch.float32, 2).to("spyre")
    g = torch.compile(matmul_epilogue, backend="spyre_graphs")
    for _ in range(3):  # warm-up, capture, replay
        g(a, b)
    torch.spyre.synchronize()
    # a fault at each launch of the replay in turn: the extern mm's launches, then the fused
    # epilogue (the last), then none (past the graph's launches)
    def replay():
        before = torch_spyre._C._submissions(0)
        g(a, b)
        assert torch_spyre._C._submissions(0) == before + 1  # a replay

    who = _fault_each_launch(replay)
    assert len(who) >= 2, who
    for msg in who[:-1]:  # the extern kernel names itself inside the replayed graph too
        assert re.search(MM_LABEL, msg), msg
    assert re.search(r"launched by spyre_kernel_0 of compiled graph \[\d+/\d+\]", who[-1]), who
    assert "aten.relu.default" in who[-1] and "return torch.relu(a @ b + 1.0) * 0.5" in who[-1]
    close(g(a, b).cpu(), matmul_epilogue(a.cpu(), b.cpu()), torch.float32, scale=4)


def _lose_card_mid_call(call, device):
    """Loses the card after the call's first launch: the errors of that call (at its
    synchronize) and of the next call, each as (type, message without who launched it)."""
    inject_sim_fault(device, "lost", 1)
    errors = []
    for _ in range(2):
        with pytest.raises(Exception) as e:
            call()
            torch.spyre.synchronize(device)
        errors.append((type(e.value), re.sub(r"; launched by .*? \(device lost\)$",
                                             " (device lost)", str(e.value))))
    inject_sim_fault(device, "none")
    for _ in range(8):  # work that failed in the background reports once per stream
        try:
            torch.spyre.synchronize(device)
            break
        except RuntimeError as e:
            assert "was removed" in str(e), e
    torch.spyre.synchronize(device)
    return errors


def test_a_card_lost_mid_call_gives_the_eager_error():
    dev = "spyre:0"
    a, b = make((8, 16), torch.float32, 1), make((16, 24), torch.float32, 2)
    da, db = a.to(dev), b.to(dev)
    want = matmul_epilogue(a, b)
    compiled = torch.compile(matmul_epilogue)
    replayed = torch.compile(matmul_epilogue, backend="spyre_graphs")
    for _ in range(3):
        compiled(da, db)
        replayed(da, db)
    torch.spyre.synchronize(0)
    seen = {}
    for name, fn in [("eager", matmul_epilogue), ("compiled", compiled), ("replayed", replayed)]:
        seen[name] = _lose_card_mid_call(lambda: fn(da, db), 0)
        close(fn(da, db).cpu(), want, torch.float32, scale=4)  # the card is back
    for kind, msg in seen["eager"]:
        assert kind is RuntimeError
        assert re.fullmatch(r"\w+: spyre-sim0 was removed \(a simulated loss: "
                            r"spyre_sim_inject_fault\) \(device lost\)", msg), msg
    strip = [[(k, m.split(": ", 1)[1]) for k, m in v] for v in seen.values()]
    assert strip[0] == strip[1] == strip[2], seen


def test_a_process_whose_card_is_lost_exits_cleanly():
    r = run_python(
        "import torch, torch_spyre\n"
        "from torch_spyre.testing import inject_sim_fault\n"
        "f = torch.compile(lambda x: torch.relu(x * 2 + 1))\n"
        "x = torch.ones(64, 64, device='spyre')\n"
        "f(x); torch.spyre.synchronize()\n"
        "inject_sim_fault(0, 'lost')\n"
        "for call in (lambda: (f(x), torch.spyre.synchronize()), lambda: x * 3,\n"
        "             lambda: x.cpu(), lambda: f(x)):\n"
        "    try:\n"
        "        call()\n"
        "    except RuntimeError as e:\n"
        "        print('ERR', str(e).endswith('(device lost)'))\n"
        "torch.spyre.synchronize()\n"
        "print('done')\n")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ERR", "True"] * 4 + ["done"], r.stdout


def test_an_op_without_a_spyre_kernel_is_a_fallback_segment(monkeypatch, capfd):
    def f(x):
        h = torch.relu(x * 2.0 + 1.0)
        v = torch.nextafter(h, h + 1.0)[:, 4]  # no spyre kernel: the CPU
        return v.exp()[:, None] - h

    x = make((5, 37), torch.float32, 3).to("spyre")
    g = torch.compile(f)
    torch_spyre.reset_fallback_counts()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = g(x)
        g(x)
    close(out.cpu(), f(x.cpu()), torch.float32)
    # the extern kernel calls the aten op through torch.ops, whose C++ warnings are printed on
    # stderr rather than turned into Python warnings: count both
    said = [str(m.message) for m in w] + capfd.readouterr().err.splitlines()
    fallback = [m for m in said if "nextafter.out has no spyre kernel" in m]
    assert len(fallback) == 1, said
    assert list(torch_spyre.fallback_counts()) == ["aten::nextafter.out"], \
        torch_spyre.fallback_counts()
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    torch.compiler.reset()
    with pytest.raises(NotImplementedError, match="nextafter"):
        torch.compile(f)(x)
