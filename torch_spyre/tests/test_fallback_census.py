"""The fallback census's corpus of everyday programs (torch_spyre/tools/fallback_census.py:
decoder generation and training, the encoder's fast path, CNN inference and training,
autocast, sorting and indexing, segmentation, embedding math, a recurrent classifier, a vision
transformer's training steps, a language model with a real vocabulary) runs on the card without one
CPU fallback or device copy through the host and gives the CPU's answer: a new op that silently falls back in any of them
fails here, not only in the benchmark table."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import fallback_census  # noqa: E402


@pytest.mark.parametrize("program", sorted(fallback_census.CORPUS))
def test_program_runs_on_the_card(fallback_reset, program):
    row = fallback_census.run(program, fallback_census.CORPUS[program])
    assert row["error"] is None, row["error"]
    assert row["fallback_calls"] == 0, row["fallbacks"]
    assert row["host_round_trips"] == 0, "device copies through the host"
    assert row["matches_cpu"], f"{program} differs from the CPU"
