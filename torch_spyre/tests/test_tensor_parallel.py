"""Tensor-parallel TinyGranite on the "spyre" backend (torch_spyre.tensor_parallel,
models.tensor_parallel): on 2 and 4 ranks, each its own process and simulated card, greedy decode
(prefill + decode steps with the sharded KV cache) gives the one-card tokens and logits, with
the LM head replicated and vocab-parallel, and with the decode step under torch.compile (no graph
break at the collectives); a two-layer Granite's prefill logits are one card's; and a column-
then row-parallel MLP's gradients are the blocks of the one-card gradients. Strict mode: nothing
falls back to the CPU (tp_worker.py). And torch's DTensor (dtensor_worker.py), in the same
launches after tp_worker.py (chain_worker.py; it was test_dtensor.py)."""

import pytest

from conftest import run_worker_cases

CASES = ["reference", "replicated_head", "vocab_parallel", "compiled", "granite", "training",
         "all_to_all"]
# torch's DTensor on the same launches (one import torch per rank for both workers)
CHAIN = ("tp_worker.py", "dtensor_worker.py")


@pytest.mark.parametrize("world", [2, 4])
def test_tensor_parallel_granite_matches_one_card(world):
    run_worker_cases("tp_worker.py", world, CASES, chain=CHAIN)


@pytest.mark.parametrize("world", [2, 4])
def test_dtensor_colwise_rowwise_mlp_matches_cpu(world):
    """torch's DTensor tensor parallelism on spyre (dtensor_worker.py): a column-parallel and a
    row-parallel linear through parallelize_module on a DeviceMesh of spyre cards, forward,
    backward and SGD steps equal to one process on the CPU, strict (no CPU fallback)."""
    run_worker_cases("dtensor_worker.py", world, ["colwise_rowwise_mlp"], chain=CHAIN)
