"""torch.distributed on the "spyre" backend: one process per card (each its own simulated card),
started as subprocesses with a FileStore (file:// init_method), every collective (reduce, gather
and scatter included) compared with gloo on the CPU, send/recv/isend/irecv of any dtype, the ranks
of a pair isending 16 MiB to each other before receiving; a peer that dies gives the others an
error, not a hang. And the launcher
(python3 -m torch_spyre.launch) with init_method="env://"."""

import os
import subprocess
import sys
import tempfile

import pytest

from conftest import run_ranks


def _run(world, mode, timeout=400):
    with tempfile.TemporaryDirectory() as d:
        return run_ranks("dist_worker.py", world, mode, os.path.join(d, "store"),
                         timeout=timeout)


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_match_gloo(world):
    for r, (code, out) in enumerate(_run(world, "collectives")):
        assert code == 0, f"rank {r} failed:\n{out[-3000:]}"


def test_peer_death_is_an_error_not_a_hang():
    outs = _run(3, "peer_dies", timeout=120)
    assert outs[2][0] == 17
    for r in (0, 1):
        code, out = outs[r]
        assert code == 0, f"rank {r}:\n{out[-3000:]}"
        assert "rank 2" in out and "died" in out, out[-2000:]


def test_launcher_env_init(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import torch, torch_spyre, torch.distributed as dist\n"
        "dist.init_process_group('spyre')\n"
        "t = torch.full((5,), float(dist.get_rank() + 1), device='spyre')\n"
        "dist.all_reduce(t)\n"
        "assert t.cpu().tolist() == [3.0] * 5, t\n"
        "print('rank', dist.get_rank(), 'ok')\n"
        "dist.destroy_process_group()\n")
    env = dict(os.environ, SPYRE_SIM_DEVICES="1", SPYRE_BACKEND="sim")
    r = subprocess.run([sys.executable, "-m", "torch_spyre.launch", "--nproc", "2", str(script)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0 ok" in r.stdout and "rank 1 ok" in r.stdout


def _run_async(world, mode, timeout=300):
    with tempfile.TemporaryDirectory() as d:
        return run_ranks("async_worker.py", world, mode, os.path.join(d, "store"),
                         timeout=timeout)


@pytest.mark.parametrize("world", [2, 3])
def test_async_collectives_in_flight(world):
    """Every collective with async_op=True on rank 0 while the others are held back: none is
    complete when returned; waited in reverse order; the results equal the synchronous path's."""
    outs = _run_async(world, "inflight")
    for r, (code, out) in enumerate(outs):
        assert code == 0 and f"rank {r} ok" in out, f"rank {r} failed:\n{out[-3000:]}"


def test_async_dead_peer_error_from_wait():
    outs = _run_async(3, "dead_peer", timeout=120)
    assert outs[2][0] == 17
    for r in (0, 1):
        code, out = outs[r]
        assert code == 0, f"rank {r}:\n{out[-3000:]}"
        assert "rank 2" in out and "died" in out, out[-2000:]


def test_async_wait_timeout_fails_the_group():
    outs = _run_async(2, "timeout", timeout=120)
    for r, (code, out) in enumerate(outs):
        assert code == 0, f"rank {r}:\n{out[-3000:]}"
    assert "did not complete" in outs[0][1]
    assert "abort" in outs[1][1], outs[1][1][-2000:]  # the peer learns of it


@pytest.mark.parametrize("mode", ["shutdown_drains", "shutdown_stuck", "shutdown_detached"])
def test_async_destroy_with_work_in_flight(mode):
    outs = _run_async(2, mode, timeout=120)
    for r, (code, out) in enumerate(outs):
        assert code == 0, f"rank {r}:\n{out[-3000:]}"
    assert "rank 0 ok" in outs[0][1], outs[0][1][-2000:]
