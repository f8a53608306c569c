"""The timing-only simulator from PyTorch (SPYRE_SIM_TIMING_ONLY=1, Documentation/libspyre.md
"Timing-only simulator"; compile_bench.py granite uses it): a model built on the meta device and
moved with to_empty runs compiled, the card says it is timing-only, its results read as zeros,
the modeled time is the computing card's, and a card holds a 64 GiB tensor. Each case runs in a
fresh process: the mode is read when the card is created."""

import json

from conftest import run_python

CASE = r"""
import json, os, sys
import torch, torch_spyre
sys.path.insert(0, os.path.dirname(os.path.abspath("conftest.py")))
from models import Granite

with torch.device("meta"):
    m = Granite(vocab=256, hidden=128, heads=4, kv_heads=2, intermediate=256, layers=2,
                max_len=32)
m = m.to(torch.float16).to_empty(device="spyre").eval()
with torch.no_grad():
    for p in m.parameters():  # real values, so a computing card gives non-zero logits
        p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(p.numel()))
                .to(torch.float16).to("spyre") * 0.1 + 0.01)
    tokens = torch.arange(16, device="spyre").view(1, 16)
    compiled = torch.compile(m, dynamic=False)
    compiled(tokens, 0)
    with torch_spyre.profiler.profile() as p:
        logits = compiled(tokens, 0)
    torch.spyre.synchronize()
big = None
try:
    big = torch.empty(32 << 30, dtype=torch.float16, device="spyre")  # 64 GiB
except RuntimeError as e:
    err = str(e)
print(json.dumps({"driver": torch.spyre.get_device_properties()["driver_name"],
                  "modeled_ns": p.total_modeled_ns(), "launches": sum(e.launches for e in p.events),
                  "logits_abs_max": logits.abs().max().item(), "big": big is not None}))
"""


def run(timing_only):
    env = {"SPYRE_SIM_TIMING_ONLY": "1"} if timing_only else {"SPYRE_SIM_TIMING_ONLY": "0"}
    r = run_python(CASE, **env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_timing_only_card_runs_a_compiled_model_without_data():
    real, _ = run(False)
    timed, stderr = run(True)
    assert real["driver"] == "spyre-sim" and not real["big"]
    assert real["logits_abs_max"] > 0
    # visible: the device properties and one line on stderr
    assert timed["driver"] == "spyre-sim (timing-only)"
    assert "TIMING-ONLY" in stderr
    # the same programs, priced alike; nothing computed, reads give zeros
    assert timed["launches"] == real["launches"] > 0
    assert timed["modeled_ns"] == real["modeled_ns"] > 0
    assert timed["logits_abs_max"] == 0
    # address space only: a 64 GiB tensor fits (a computing card of 1 GiB refuses it)
    assert timed["big"]
