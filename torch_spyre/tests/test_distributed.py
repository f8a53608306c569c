"""torch.distributed on the "spyre" backend: one process per card (each its own simulated card),
started as subprocesses with a FileStore (file:// init_method), every collective (reduce, gather
and scatter included) compared with gloo on the CPU, send/recv/isend/irecv of any dtype, the ranks
of a pair isending 16 MiB to each other before receiving; a peer that dies gives the others an
error, not a hang. And the launcher
(python3 -m torch_spyre.launch) with init_method="env://".

The cases of one world size share a launch where they can (an `import torch` and the group's
set-up per rank are most of a small case's time): chain_worker.py runs the modes one after
another in each rank's process, each on its own process group and store; a mode that ends its
ranks (a peer dies, a rank leaves with os._exit) comes last. Each case checks its own mode's
part of every rank's output; a mode that fails stops its ranks, which fails the later modes'
cases too (none is skipped)."""

import os
import subprocess
import sys

import pytest

from conftest import run_chain

# (world, modes): every mode of test_distributed.py; a mode is "script:MODE"
LAUNCHES = [
    (2, ("dist_worker.py:collectives", "async_worker.py:inflight",
         "async_worker.py:shutdown_drains", "async_worker.py:timeout")),
    (4, ("dist_worker.py:collectives",)),
    (3, ("async_worker.py:inflight", "dist_worker.py:peer_dies")),
    (3, ("async_worker.py:dead_peer",)),
    (2, ("async_worker.py:shutdown_stuck",)),
    (2, ("async_worker.py:shutdown_detached",)),
]


def _run(world, mode):
    """run_chain's [(exit code, output, ok)] per rank for `mode` of its launch."""
    modes = next(m for w, m in LAUNCHES if w == world and mode in m)
    return run_chain(world, modes, mode)


def _ok(outs, ranks=None):
    for r in ranks if ranks is not None else range(len(outs)):
        code, out, ok = outs[r]
        assert ok, f"rank {r} (exit {code}) failed:\n{out[-3000:]}"


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_match_gloo(world):
    _ok(_run(world, "dist_worker.py:collectives"))


def test_peer_death_is_an_error_not_a_hang():
    outs = _run(3, "dist_worker.py:peer_dies")
    assert outs[2][0] == 17, outs[2][1][-3000:]
    _ok(outs, (0, 1))
    for r in (0, 1):
        assert "rank 2" in outs[r][1] and "died" in outs[r][1], outs[r][1][-2000:]


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


@pytest.mark.parametrize("world", [2, 3])
def test_async_collectives_in_flight(world):
    """Every collective with async_op=True on rank 0 while the others are held back: none is
    complete when returned; waited in reverse order; the results equal the synchronous path's."""
    outs = _run(world, "async_worker.py:inflight")
    _ok(outs)
    for r, (code, out, _) in enumerate(outs):
        assert f"rank {r} ok" in out, f"rank {r}:\n{out[-3000:]}"


def test_async_dead_peer_error_from_wait():
    outs = _run(3, "async_worker.py:dead_peer")
    assert outs[2][0] == 17, outs[2][1][-3000:]
    _ok(outs, (0, 1))
    for r in (0, 1):
        assert "rank 2" in outs[r][1] and "died" in outs[r][1], outs[r][1][-2000:]


def test_async_wait_timeout_fails_the_group():
    outs = _run(2, "async_worker.py:timeout")
    _ok(outs)
    assert "did not complete" in outs[0][1], outs[0][1][-2000:]
    assert "abort" in outs[1][1], outs[1][1][-2000:]  # the peer learns of it


@pytest.mark.parametrize("mode", ["shutdown_drains", "shutdown_stuck", "shutdown_detached"])
def test_async_destroy_with_work_in_flight(mode):
    outs = _run(2, f"async_worker.py:{mode}")
    _ok(outs)
    assert "rank 0 ok" in outs[0][1], outs[0][1][-2000:]
