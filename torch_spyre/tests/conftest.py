"""Shared set-up of the torch_spyre tests: the simulator backend with two cards (ctest sets the
same environment), torch_spyre imported once per process."""

import collections
import functools
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("SPYRE_BACKEND", "sim")
os.environ.setdefault("SPYRE_SIM_DEVICES", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_spyre  # noqa: E402,F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool]


def make(shape, dtype, seed=0):
    """Deterministic CPU data of any dtype (distinct values, so misplaced elements show)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-(2**40), 2**40, shape, generator=g, dtype=dtype)


def assert_same(actual, expected):
    """Bit-exact equality with a CPU reference (shape, dtype, values)."""
    assert actual.device.type == "cpu"
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.equal(actual, expected), f"\n{actual}\n!=\n{expected}"


FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def tol(dtype):
    """Tolerance of a device result against an fp32 reference rounded to dtype."""
    return {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1.5e-1}[dtype]


def close(actual, expected, dtype, scale=1.0):
    """A device result (moved to the CPU) within dtype tolerance of a CPU reference."""
    assert actual.device.type == "cpu" and actual.dtype == expected.dtype, (
        actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    torch.testing.assert_close(actual.float(), expected.float(), rtol=tol(dtype),
                               atol=tol(dtype) * scale)


def run_python(code, **env):
    """Runs `code` in a fresh interpreter with the test environment plus `env`."""
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300
    )


def run_ranks(script, world, *args, timeout=400, rank_env=None, **env):
    """Runs `script` (a file beside this one) as `world` ranks, each its own process with its
    own simulated card and RANK, WORLD_SIZE in the environment (plus `env`, and rank_env(rank)
    when given); returns [(exit code, output)] in rank order. A rank that hangs past `timeout`
    kills them all."""
    e = dict(os.environ, WORLD_SIZE=str(world), SPYRE_SIM_DEVICES="1", SPYRE_BACKEND="sim",
             USE_LIBUV="0", **env)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), script)
    procs = [subprocess.Popen([sys.executable, path, *args],
                              env=dict(e, RANK=str(r), **(rank_env(r) if rank_env else {})),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out))
    return outs


@functools.lru_cache(maxsize=None)
def _run_chain(world, specs, env):
    with tempfile.TemporaryDirectory() as d:
        return run_ranks("chain_worker.py", world, os.path.join(d, "store"), *specs, **dict(env))


def run_chain(world, specs, spec, **env):
    """One launch of `world` ranks running the workers `specs` ("script[:ARG]") in turn in each
    rank's process (chain_worker.py), shared by every caller that names the same world, specs
    and env; returns [(exit code, output, ok)] per rank for `spec`, one of them: the exit code
    is the process's; the output is what the rank printed from the start of `spec` to the
    start of the next one (or the end); ok: `spec` returned, or, as the last, ended the process
    with exit code 0. A rank stopped by an earlier worker gets that one's output, not ok."""
    return chain_part(_run_chain(world, tuple(specs), tuple(sorted(env.items()))), specs, spec)


def chain_part(outs, specs, spec):
    """run_chain's result for `spec` from the launch's [(exit code, output)]."""
    parts = []
    for code, out in outs:
        start = out.find(f"== {spec}\n")
        if start < 0:
            parts.append((code, f"{spec} did not start:\n{out}", False))
            continue
        end = out.find("\n== ", start)
        part = out[start:] if end < 0 else out[start:end + 1]
        ok = f"-- {spec} returned" in part or (spec == specs[-1] and code == 0)
        parts.append((code, part, ok))
    return parts


def run_worker_cases(script, world, cases, select=None, chain=None):
    """Runs a strict worker (ddp_worker.py, tp_worker.py: "CASE ok SECONDS" per case, then
    "fallbacks {...}") as `world` ranks with a FileStore; asserts every rank ran every case
    with no CPU fallback. `select` (comma-separated) picks the worker's cases to run. With
    `chain` (specs for run_chain, "script[:select]" among them) the worker shares that launch."""
    if chain is None:
        with tempfile.TemporaryDirectory() as d:
            outs = [(code, out, code == 0) for code, out in run_ranks(
                script, world, os.path.join(d, "store"), *([select] if select else []),
                TORCH_SPYRE_STRICT="1")]
    else:
        outs = run_chain(world, chain, f"{script}:{select}" if select else script,
                         TORCH_SPYRE_STRICT="1")
    for r, (code, out, ok) in enumerate(outs):
        assert ok, f"rank {r} (exit {code}) failed:\n{out[-3000:]}"
        for case in cases:
            assert f"\n{case} ok " in "\n" + out, f"rank {r}: {case} did not run:\n{out[-2000:]}"
        assert "fallbacks {}" in out, f"rank {r} fell back to the CPU:\n{out[-2000:]}"


@pytest.fixture
def strict(monkeypatch, fallback_reset):
    """TORCH_SPYRE_STRICT=1 for the test (a CPU fallback raises), and nothing fell back."""
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")
    yield
    assert torch_spyre.fallback_counts() == {}


@pytest.fixture
def clean_dynamo():
    """Dynamo's caches and counters fresh before the test and its caches dropped after."""
    from torch._dynamo.utils import counters

    torch.compiler.reset()
    counters.clear()
    yield
    torch.compiler.reset()


@pytest.fixture
def compile_strict(strict, clean_dynamo):
    """strict, with Dynamo's caches and counters fresh before and its caches dropped after."""
    yield


def profiled_launches(fn, *args):
    """fn's result, the ops it ran and their launches (device programs)."""
    with torch_spyre.profiler.profile() as prof:
        out = fn(*args)
    return out, [e.aten_op for e in prof.events], sum(e.launches for e in prof.events)


@pytest.fixture
def fallback_reset():
    """Fresh fallback counts and warnings for the test."""
    torch_spyre.reset_fallback_counts()
    yield
    torch_spyre.reset_fallback_counts()


def pytest_terminal_summary(terminalreporter):
    """test_opinfo's per-op counts: samples, on the card, handed to the CPU fallback (by op)."""
    opinfo = sys.modules.get("test_opinfo")
    if opinfo is None or not opinfo.SUMMARY:
        return
    w = terminalreporter.write_line
    w("OpInfo samples on spyre (op, dtype: samples, on the card, CPU fallbacks by operator):")
    total = collections.Counter()
    for (op, dtype), c in sorted(opinfo.SUMMARY.items()):
        falls = {k[len("fallback:"):]: v for k, v in c.items() if k.startswith("fallback:")}
        w(f"  {op:45} {dtype:9} {c['samples']:4} {c['card']:4}  {falls or ''}")
        total["samples"] += c["samples"]
        total["card"] += c["card"]
        total["fallback"] += sum(falls.values())
    w(f"OpInfo total: {len(opinfo.SUMMARY)} op x dtype, {total['samples']} samples, "
      f"{total['card']} on the card and equal to the CPU's, {total['fallback']} on the CPU fallback")
