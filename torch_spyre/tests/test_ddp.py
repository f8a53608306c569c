"""DistributedDataParallel on the "spyre" backend: each rank (its own process and simulated
card) trains a model with DDP on spyre and the same model with DDP on gloo on the CPU, on
rank-dependent data, and the parameters must agree after construction (rank 0's broadcast) and
after every optimizer step (the gradient all-reduce through the Reducer's buckets): an MLP with
small buckets (and DDP's runtime statistics taken), gradient accumulation under no_sync(),
find_unused_parameters=True, conv + batch norm (buffers, one int64, broadcast every forward),
gradient_as_bucket_view with static_graph, and the allreduce and fp16-compression comm hooks.
Strict mode: nothing falls back to the CPU (ddp_worker.py)."""

import os
import tempfile

import pytest

from conftest import run_ranks

CASES = ["mlp", "no_sync", "unused", "conv_bn", "bucket_view", "hook_allreduce", "hook_fp16"]


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_matches_gloo(world):
    with tempfile.TemporaryDirectory() as d:
        outs = run_ranks("ddp_worker.py", world, os.path.join(d, "store"),
                         TORCH_SPYRE_STRICT="1")
    for r, (code, out) in enumerate(outs):
        assert code == 0, f"rank {r} failed:\n{out[-3000:]}"
        for case in CASES:
            assert f"\n{case} ok " in "\n" + out, f"rank {r}: {case} did not run:\n{out[-2000:]}"
        assert "fallbacks {}" in out, f"rank {r} fell back to the CPU:\n{out[-2000:]}"
