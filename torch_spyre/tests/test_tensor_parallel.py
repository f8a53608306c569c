"""Tensor-parallel TinyGranite on the "spyre" backend (torch_spyre.tensor_parallel,
models.tensor_parallel): on 2 and 4 ranks, each its own process and simulated card, greedy decode
(prefill + decode steps with the sharded KV cache) gives the one-card tokens and logits, with
the LM head replicated and vocab-parallel, and with the decode step under torch.compile (no graph
break at the collectives); a two-layer Granite's prefill logits are one card's; and a column-
then row-parallel MLP's gradients are the blocks of the one-card gradients. Strict mode: nothing
falls back to the CPU (tp_worker.py)."""

import os
import tempfile

import pytest

from conftest import run_ranks

CASES = ["reference", "replicated_head", "vocab_parallel", "compiled", "granite", "training"]


@pytest.mark.parametrize("world", [2, 4])
def test_tensor_parallel_granite_matches_one_card(world):
    with tempfile.TemporaryDirectory() as d:
        outs = run_ranks("tp_worker.py", world, os.path.join(d, "store"),
                         TORCH_SPYRE_STRICT="1")
    for r, (code, out) in enumerate(outs):
        assert code == 0, f"rank {r} failed:\n{out[-3000:]}"
        for case in CASES:
            assert f"\n{case} ok " in "\n" + out, f"rank {r}: {case} did not run:\n{out[-2000:]}"
        assert "fallbacks {}" in out, f"rank {r} fell back to the CPU:\n{out[-2000:]}"
