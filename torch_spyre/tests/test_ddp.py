"""DistributedDataParallel on the "spyre" backend: each rank (its own process and simulated
card) trains a model with DDP on spyre and the same model with DDP on gloo on the CPU, on
rank-dependent data, and the parameters must agree after construction (rank 0's broadcast) and
after every optimizer step (the gradient all-reduce through the Reducer's buckets): an MLP with
small buckets (and DDP's runtime statistics taken), gradient accumulation under no_sync(),
find_unused_parameters=True, conv + batch norm (buffers, one int64, broadcast every forward),
gradient_as_bucket_view with static_graph, the allreduce and fp16-compression comm hooks, a
hook whose async all_reduce is still in flight when backward goes on (overlap), and
the DDP module under torch.compile (Dynamo's DDPOptimizer). Strict mode: nothing falls back to the CPU (ddp_worker.py)."""


import pytest

from conftest import run_worker_cases

CASES = ["mlp", "no_sync", "unused", "conv_bn", "bucket_view", "hook_allreduce", "hook_fp16",
         "overlap"]


# on 2 ranks the compiled case shares the launch (one import torch per rank for both)
CHAIN2 = ("ddp_worker.py", "ddp_worker.py:compiled")


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_matches_gloo(world):
    run_worker_cases("ddp_worker.py", world, CASES, chain=CHAIN2 if world == 2 else None)


def test_compiled_ddp_matches_gloo():
    run_worker_cases("ddp_worker.py", 2, ["compiled"], select="compiled", chain=CHAIN2)
