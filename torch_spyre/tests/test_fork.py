"""A child forked after the parent used spyre gets a clear RuntimeError on its first spyre use
(as CUDA's "Cannot re-initialize CUDA in forked subprocess"), instead of hanging on the
parent's streams; the parent is unaffected; a child of a parent that never used spyre may."""

import os
import subprocess
import sys
import time

import pytest
import torch

import torch_spyre  # noqa: F401


def in_child(fn, timeout=30.0):
    """Runs fn in a forked child; returns what it reported (its error, or its result)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running any cleanup
        os.close(r)
        try:
            msg = "ok " + repr(fn())
        except BaseException as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung")
        time.sleep(0.02)
    with os.fdopen(r, "rb") as f:
        return f.read().decode()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_gets_a_clear_error():
    x = torch.ones(4, device="spyre")  # the parent uses spyre
    assert not torch.spyre._is_in_bad_fork()
    msg = in_child(lambda: torch.ones(2, device="spyre"))
    assert msg.startswith("RuntimeError") and "forked subprocess" in msg and "spawn" in msg, msg
    # the parent's tensors are not usable in the child either (no hang on the parent's stream)
    msg = in_child(lambda: x.cpu())
    assert msg.startswith("RuntimeError") and "forked subprocess" in msg, msg
    assert in_child(lambda: torch.spyre._is_in_bad_fork()) == "ok True"
    # CPU work in the child is fine, and the parent goes on
    assert in_child(lambda: int(torch.ones(3).sum())) == "ok 3"
    assert (x + 1).cpu().tolist() == [2.0] * 4


def test_child_of_an_unused_parent_may_use_spyre():
    code = (
        "import os, torch, torch_spyre\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if torch.ones(2, device='spyre').sum().item() == 2 else 3)\n"
        "_, st = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(st))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "0", r.stderr
