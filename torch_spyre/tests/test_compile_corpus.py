"""The fallback census's corpus of everyday programs (torch_spyre/tools/fallback_census.py),
each compiled whole with torch.compile's default backend (Dynamo breaks the graph where the
program needs a host value) and run on the card: no error, no CPU fallback, no device copy
through the host, and the CPU's answer (the eager program on the CPU). The programs create their
modules and draws inside, so Inductor is asked to draw random numbers as eager does
(`fallback_random`). A compiled decoder with head dim 16 gave wrong logits here before the
attention's math path kept the layout its meta kernel promises.

Not in the list: `indexing` (its compiled form gives another `torch.unique` size than eager
on the CPU too, 186 against 188 elements: a difference of torch.compile itself), and `cnn`,
`moe`, `segmentation` (compiled whole like this, none of Inductor's generated kernels runs
in them: `runtime.STATS` counts none, so they would test nothing compiled here)."""

import os
import sys

import pytest
import torch
import torch._inductor.config as inductor_config
from torch_spyre._inductor import runtime

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import fallback_census  # noqa: E402

PROGRAMS = sorted(set(fallback_census.CORPUS) - {"indexing", "cnn", "moe", "segmentation"})


@pytest.mark.parametrize("program", PROGRAMS)
def test_compiled_program_runs_on_the_card(fallback_reset, program):
    fn = fallback_census.CORPUS[program]

    def compiled_on_spyre(device):
        return torch.compile(fn)(device) if device == "spyre" else fn(device)

    torch.compiler.reset()
    before = dict(runtime.STATS)
    with inductor_config.patch(fallback_random=True):
        row = fallback_census.run(program, compiled_on_spyre)
    torch.compiler.reset()
    # Inductor's generated kernels ran (on the card, or their eager forms)
    assert runtime.STATS["fused"] + runtime.STATS["eager"] > before["fused"] + before["eager"]
    assert row["error"] is None, row["error"]
    assert row["fallback_calls"] == 0, row["fallbacks"]
    assert row["host_round_trips"] == 0, "device copies through the host"
    assert row["matches_cpu"], f"compiled {program} differs from the CPU"
