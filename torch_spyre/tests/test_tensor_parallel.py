"""Tensor-parallel TinyGranite on the "spyre" backend (torch_spyre.tensor_parallel,
models.tensor_parallel): on 2 and 4 ranks, each its own process and simulated card, greedy decode
(prefill + decode steps with the sharded KV cache) gives the one-card tokens and logits, with
the LM head replicated and vocab-parallel, and with the decode step under torch.compile (no graph
break at the collectives); a two-layer Granite's prefill logits are one card's; and a column-
then row-parallel MLP's gradients are the blocks of the one-card gradients. Strict mode: nothing
falls back to the CPU (tp_worker.py)."""

import pytest

from conftest import run_worker_cases

CASES = ["reference", "replicated_head", "vocab_parallel", "compiled", "granite", "training",
         "all_to_all"]


@pytest.mark.parametrize("world", [2, 4])
def test_tensor_parallel_granite_matches_one_card(world):
    run_worker_cases("tp_worker.py", world, CASES)
