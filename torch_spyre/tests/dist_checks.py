"""Inputs and comparisons the torch.distributed workers share (dist_worker.py,
multinode_worker.py), and their end (finish)."""

import os
import sys
import time

import torch

# chain_worker.py runs several workers in one process: their finish() returns (and records
# that the process is to end the same way after the last worker)
CHAINED = False
FINISHED = False


def finish():
    """A worker's end, after destroy_process_group(): without the interpreter's finalization.
    Once, in CI, a rank aborted while the process tore down at exit ("terminate called without
    an active exception", after every case had passed; not reproduced in 9 local runs; torch's
    gloo groups are known to race at exit). The cases check the results, which are printed by
    now; teardown is covered by every other test. Returns when chain_worker.py runs another
    worker next."""
    global FINISHED
    sys.stdout.flush()
    sys.stderr.flush()
    FINISHED = True
    if not CHAINED:
        os._exit(0)


def rank_data(rank, n, dtype, salt=0):
    """n values of `dtype` that differ per rank; 16-bit ones small integers, so sums are exact."""
    g = torch.Generator().manual_seed(100 * rank + salt)
    if dtype == torch.float32:
        return torch.rand(n, generator=g) * 8 - 4
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def close(got, want, what):
    """got (any device) equals want to the rounding of want's dtype."""
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[want.dtype]
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=tol, atol=tol, msg=what)


def release(init_file):
    """Tells a rank held by hold() that this rank is done with the mode (a file beside the
    store: it works when the process group is aborted or destroyed)."""
    open(f"{init_file}.released", "w").close()


def hold(init_file, bound):
    """Keeps this rank alive (and out of the collectives) until a peer calls release(), at
    most `bound` seconds: instead of sleeping for as long as the peer might ever need."""
    end = time.monotonic() + bound
    while not os.path.exists(f"{init_file}.released") and time.monotonic() < end:
        time.sleep(0.05)
